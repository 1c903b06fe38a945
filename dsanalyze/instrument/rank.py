"""What a rank knows about its run and what it hands back to the harness.

The harness passes the run through environment variables (set before
`torch.distributed.run` starts the ranks); each rank writes
`$DSANALYZE_RUN_DIR/rank<R>.json` (its `RankRecord`) on success and
`rank<R>.error` (the traceback) on failure.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENV_RUN_DIR = "DSANALYZE_RUN_DIR"
ENV_MODE = "DSANALYZE_MODE"
ENV_ITERS = "DSANALYZE_ITERS"
ENV_WARMUP = "DSANALYZE_WARMUP"
ENV_THREADS = "DSANALYZE_THREADS"  # the CPU budget's thread count for this rank
ENV_EPOCHS = "DSANALYZE_EPOCHS"  # user scripts: stop after this many training epochs
ENV_LOADER_INDEX = "DSANALYZE_LOADER_INDEX"  # user scripts: the training loader, by creation
ENV_DISCOVER = "DSANALYZE_DISCOVER"  # "1": report the files the training loader reads


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def run_dir() -> Path | None:
    d = os.environ.get(ENV_RUN_DIR)
    return Path(d) if d else None


def write_record(record: dict[str, Any], extra: dict[str, Any] | None = None) -> None:
    d = run_dir()
    if d is None:
        return
    record = dict(record)
    record["extra"] = dict(extra or {})
    tmp = d / f".rank{rank()}.json.tmp"
    tmp.write_text(json.dumps(record))
    os.replace(tmp, d / f"rank{rank()}.json")


def write_error(text: str) -> None:
    d = run_dir()
    if d is not None:
        (d / f"rank{rank()}.error").write_text(text)


def run_reporting_errors(main: Callable[[], Any]) -> Any:
    """Call `main`; on an exception write its traceback for the harness, re-raise."""
    try:
        return main()
    except SystemExit as e:
        if e.code not in (0, None):
            write_error(f"SystemExit: {e.code}\n")
        raise
    except BaseException:
        write_error(traceback.format_exc())
        sys.stderr.flush()
        raise
