"""What was measured, on disk: one JSON per run under `<prefix>/runs/` (`records.RunResult`).

Files are written atomically (temp file in the same directory, fsync, rename),
so a harness killed half-way leaves either the old file or the new one. A
sweep with `--resume` skips every run whose file says it completed with the
same spec.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from dsanalyze.config import RunSpec
from dsanalyze.errors import StoreError
from dsanalyze.records import RunResult


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Write JSON so that readers see the old file or the complete new one."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as e:
        raise _unwritable(path, e) from None
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600: give it the mode open() would
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):  # a full disk: the files already written stay as they were
            raise _unwritable(path, e) from None
        raise


def _unwritable(path: Path, e: OSError) -> StoreError:
    return StoreError(f"cannot write {path} ({e.strerror}): free some space or pass a writable "
                      "--prefix; runs already written are kept")


def check_writable(prefix: str | Path) -> None:
    """StoreError now, before any run, if results cannot be written under `prefix`."""
    prefix = Path(prefix)
    try:
        prefix.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=prefix):
            pass
    except OSError as e:
        raise _unwritable(prefix, e) from None


def _umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it: put it back at once
    os.umask(mask)
    return mask


def runs_dir(prefix: str | Path) -> Path:
    return Path(prefix) / "runs"


def run_path(prefix: str | Path, run_id: str) -> Path:
    return runs_dir(prefix) / f"{run_id}.json"


def write_run(prefix: str | Path, result: RunResult) -> Path:
    path = run_path(prefix, result.run_id)
    write_json_atomic(path, result.to_dict())
    return path


_UNREADABLE = (OSError, ValueError, KeyError, TypeError)


def _read_run(path: str | Path) -> RunResult:
    with open(path) as f:
        return RunResult.from_dict(json.load(f))


def read_run(path: str | Path) -> RunResult:
    try:
        return _read_run(path)
    except _UNREADABLE as e:
        raise StoreError(f"cannot read run file {path}: {e}; delete it to re-run") from None


# the folders under a prefix that keep the runs set aside (`set_aside`), never pooled
SUPERSEDED = "superseded"  # a newer measurement of its configuration replaced it
SLOWED = "host-slowed"  # the machine, or the run's own processes, ran slow: measured again


def set_aside(prefix: str | Path, folder: str, run: RunResult) -> Path:
    """Keep `run` as PREFIX/FOLDER/RUN_ID-STARTED.json, out of the runs pooled (`runs/`): the
    one way a run leaves them, never deleted. Its stored file moves there where it is this
    run; a run set aside before it was stored (a retry's first try) is written there."""
    started = int(run.started_unix_s or time.time())
    aside = Path(prefix) / folder / f"{run.run_id}-{started}.json"
    aside.parent.mkdir(parents=True, exist_ok=True)
    stored = run_path(prefix, run.run_id)
    try:
        same = stored.is_file() and _read_run(stored).started_unix_s == run.started_unix_s
    except _UNREADABLE:
        same = False
    if same:
        stored.rename(aside)
    else:
        write_json_atomic(aside, run.to_dict())
    return aside


def load_readable_runs(prefix: str | Path) -> tuple[list[RunResult], list[str]]:
    """Every readable run under the prefix, and "PATH (why)" for each run file that
    is not (truncated by a crash or a full disk); `--resume` measures those again."""
    runs, unreadable = [], []
    for p in sorted(runs_dir(prefix).glob("*.json")):
        try:
            runs.append(_read_run(p))
        except _UNREADABLE as e:
            unreadable.append(f"{p} ({type(e).__name__}: {e})")
    return runs, unreadable


def load_runs(prefix: str | Path) -> list[RunResult]:
    """Every run stored under the prefix, ordered by run id."""
    d = runs_dir(prefix)
    if not d.is_dir():
        raise StoreError(f"no runs under {prefix}: run harness.py --prefix {prefix} first")
    return [read_run(p) for p in sorted(d.glob("*.json"))]


def completed(prefix: str | Path, spec: RunSpec) -> RunResult | None:
    """The stored result of `spec` if it completed with the very same spec."""
    path = run_path(prefix, spec.run_id)
    if not path.is_file():
        return None
    try:
        result = read_run(path)
    except StoreError:
        return None
    if result.ok and result.spec == spec:
        return result
    return None
