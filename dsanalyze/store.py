"""What was measured, on disk: one JSON per run under `<prefix>/runs/`.

Files are written atomically (temp file in the same directory, fsync, rename),
so a harness killed half-way leaves either the old file or the new one. A
sweep with `--resume` skips every run whose file says it completed with the
same spec.
"""

from __future__ import annotations

import enum
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsanalyze.config import Mode, RunSpec
from dsanalyze.errors import FailureKind, StoreError

SCHEMA_VERSION = 1


class Status(str, enum.Enum):
    """How a run ended. A str, so that run JSONs keep the plain words."""

    OK = "ok"
    FAILED = "failed"
    OOM = "oom"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class RankRecord:
    """Per-iteration timings of one rank, in the order they happened.

    `wait_s[i]`: time blocked in the loader's `next()` for iteration i.
    `iter_s[i]`: from the start of iteration i's `next()` to the start of
    iteration i+1's (so it includes the wait and the compute).
    `epoch[i]`: 0-based epoch of iteration i; `samples[i]`: samples in it.
    The first `warmup` iterations are discarded by the analysis.
    """

    rank: int
    wait_s: tuple[float, ...]
    iter_s: tuple[float, ...]
    epoch: tuple[int, ...]
    samples: tuple[int, ...]
    warmup: int = 0
    start_unix_s: float = 0.0  # wall-clock time of the first iteration's start
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "warmup": self.warmup, "start_unix_s": self.start_unix_s,
                "wait_s": list(self.wait_s), "iter_s": list(self.iter_s),
                "epoch": list(self.epoch), "samples": list(self.samples), "extra": self.extra}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RankRecord:
        return cls(int(d["rank"]), tuple(d["wait_s"]), tuple(d["iter_s"]), tuple(d["epoch"]),
                   tuple(d["samples"]), int(d.get("warmup", 0)), float(d.get("start_unix_s", 0.0)),
                   dict(d.get("extra", {})))


@dataclass(frozen=True)
class RunResult:
    """Everything one run measured, plus what is needed to re-analyse it."""

    spec: RunSpec
    status: Status  # a plain string ("ok") is converted
    error: str | None = None
    failure: FailureKind | None = None  # why a failed run's first rank failed
    ranks: tuple[RankRecord, ...] = ()
    dataset: dict[str, Any] = field(default_factory=dict)  # files, bytes, samples_per_epoch
    enforced: dict[str, Any] = field(default_factory=dict)  # knob -> how, or "not enforced: why"
    environment: dict[str, Any] = field(default_factory=dict)  # versions, threads, git sha, host
    io: dict[str, Any] = field(default_factory=dict)  # bytes read, residency, memory peaks
    monitor: tuple[dict[str, Any], ...] = ()
    started_unix_s: float = 0.0
    duration_s: float = 0.0
    log_path: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", Status(self.status))

    @property
    def run_id(self) -> str:
        return self.spec.run_id

    @property
    def mode(self) -> Mode:
        return self.spec.mode

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA_VERSION,
            "run_id": self.run_id,
            "spec": self.spec.to_dict(),
            "status": self.status.value,
            "error": self.error,
            "failure": self.failure.value if self.failure else None,
            "started_unix_s": self.started_unix_s,
            "duration_s": self.duration_s,
            "log_path": self.log_path,
            "dataset": self.dataset,
            "enforced": self.enforced,
            "environment": self.environment,
            "io": self.io,
            "ranks": [r.to_dict() for r in self.ranks],
            "monitor": list(self.monitor),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunResult:
        return cls(
            spec=RunSpec.from_dict(d["spec"]),
            status=Status(d["status"]),
            error=d.get("error"),
            failure=FailureKind(d["failure"]) if d.get("failure") else None,
            ranks=tuple(RankRecord.from_dict(r) for r in d.get("ranks", [])),
            dataset=dict(d.get("dataset", {})),
            enforced=dict(d.get("enforced", {})),
            environment=dict(d.get("environment", {})),
            io=dict(d.get("io", {})),
            monitor=tuple(d.get("monitor", [])),
            started_unix_s=float(d.get("started_unix_s", 0.0)),
            duration_s=float(d.get("duration_s", 0.0)),
            log_path=d.get("log_path"),
        )


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
