"""What a rank knows about its run and what it hands back to the harness.

The harness passes the run through environment variables (set before
`torch.distributed.run` starts the ranks); each rank writes
`$DSANALYZE_RUN_DIR/rank<R>.json` (its `RankRecord`) on success and
`rank<R>.error` on failure: a JSON record of the failure's kind
(`FailureKind`), its one-line message and its traceback.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsanalyze.errors import FailureKind

ENV_RUN_DIR = "DSANALYZE_RUN_DIR"
ENV_MODE = "DSANALYZE_MODE"
ENV_ITERS = "DSANALYZE_ITERS"
ENV_WARMUP = "DSANALYZE_WARMUP"
ENV_THREADS = "DSANALYZE_THREADS"  # the CPU budget's thread count for this rank
ENV_EPOCHS = "DSANALYZE_EPOCHS"  # user scripts: stop after this many training epochs
ENV_LOADER_INDEX = "DSANALYZE_LOADER_INDEX"  # user scripts: the training loader, by creation
ENV_DISCOVER = "DSANALYZE_DISCOVER"  # "1": report the files the training loader reads
ENV_UNTIL_CI = "DSANALYZE_UNTIL_CI"  # stop once the rate is within ± this many percent
ENV_MIN_ITERS = "DSANALYZE_MIN_ITERS"  # ... but not before this many measured iterations
# synthetic mode, a training loader with no len(): batches per epoch, as an earlier run of the
# real loader counted them (its record's `epoch_batches_seen`)
ENV_EPOCH_BATCHES = "DSANALYZE_EPOCH_BATCHES"
ENV_SUBSET = "DSANALYZE_SUBSET"  # a file listing the dataset's files a cached run reads alone
# "1": a throttled disk run; the rank waits at its training loader's first iteration until
# the harness has turned the read throttle on (`resources/throttle.py`)
ENV_THROTTLE_GATE = "DSANALYZE_THROTTLE_GATE"
THROTTLE_WAIT_FILE = "throttle-wait-rank{rank}"
THROTTLE_ON_FILE = "throttle-on"
THROTTLE_WAIT_S = 600.0  # the harness reads the job's code in first (seconds to minutes)


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


@dataclass(frozen=True)
class RankFailure:
    """How a rank failed: `rank<R>.error`, read back by the harness."""

    rank: int
    kind: FailureKind
    exception: str  # the exception's type name, e.g. "RuntimeError"
    message: str  # its one-line message
    traceback: str
    batches: int | None = None  # batches the training loader had yielded (None: not known)

    @property
    def line(self) -> str:
        return f"{self.exception}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "kind": self.kind.value, "exception": self.exception,
                "message": self.message, "traceback": self.traceback, "batches": self.batches}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RankFailure:
        return cls(int(d["rank"]), FailureKind(d["kind"]), d["exception"], d["message"],
                   d["traceback"], d.get("batches"))


def write_error(failure: RankFailure) -> None:
    d = run_dir()
    if d is not None:
        tmp = d / f".rank{failure.rank}.error.tmp"
        tmp.write_text(json.dumps(failure.to_dict()))
        os.replace(tmp, d / f"rank{failure.rank}.error")


def failure_message(e: BaseException) -> str:
    """One line of the exception's message: what went wrong.

    An exception raised in a DataLoader worker is re-raised in the rank with
    the worker's whole traceback as its message (torch passes it as text),
    which ends with the original `module.Type: message`: that last line, the
    prefix gone. Any other message of several lines leads with what went wrong
    and follows with hints: torch's CUDA errors say "CUDA error: device-side
    assert triggered", then where to search, CUDA_LAUNCH_BLOCKING and
    TORCH_USE_CUDA_DSA (a run on an H200 was reported by that last hint alone).
    """
    text = str(e)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return ""
    line = lines[-1] if "Traceback (most recent call last)" in text else lines[0]
    return re.sub(rf"^[\w.]*\b{type(e).__name__}: ", "", line)


def run_reporting_errors(main: Callable[[], Any],
                         batches: Callable[[], int | None] = lambda: None) -> Any:
    """Call `main`; on an exception write its failure record for the harness, re-raise.

    `batches()`: how many batches the training loader had yielded when it failed
    (0: the script failed before its first, the same way in every mode)."""
    try:
        return main()
    except SystemExit as e:
        if e.code not in (0, None):
            write_error(RankFailure(rank(), FailureKind.CRASH, "SystemExit", str(e.code),
                                    f"SystemExit: {e.code}\n", batches()))
        raise
    except BaseException as e:
        write_error(RankFailure(rank(), FailureKind.of(e), type(e).__name__, failure_message(e),
                                traceback.format_exc(), batches()))
        sys.stderr.flush()
        raise


def wait_for_throttle(timeout_s: float = THROTTLE_WAIT_S) -> None:
    """In a throttled disk run: tell the harness the training loader is about to read, and
    wait until it has turned the read throttle on (the job's start-up, imports and model
    build, read at the device's speed: they are not the dataset's fetch)."""
    d = run_dir()
    if d is None or os.environ.get(ENV_THROTTLE_GATE) != "1":
        return
    on = d / THROTTLE_ON_FILE
    if on.exists():
        return
    (d / THROTTLE_WAIT_FILE.format(rank=rank())).touch()
    deadline = time.monotonic() + timeout_s
    while not on.exists() and time.monotonic() < deadline:
        time.sleep(0.005)
