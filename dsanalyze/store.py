"""What was measured, on disk: one JSON per run under `<prefix>/runs/`.

Files are written atomically (temp file in the same directory, fsync, rename),
so a harness killed half-way leaves either the old file or the new one. A
sweep with `--resume` skips every run whose file says it completed with the
same spec.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsanalyze.config import Mode, RunSpec
from dsanalyze.errors import StoreError

SCHEMA_VERSION = 1


class Status:
    OK = "ok"
    FAILED = "failed"
    OOM = "oom"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"


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
    status: str
    error: str | None = None
    ranks: tuple[RankRecord, ...] = ()
    dataset: dict[str, Any] = field(default_factory=dict)  # files, bytes, samples_per_epoch
    enforced: dict[str, Any] = field(default_factory=dict)  # knob -> how, or "not enforced: why"
    environment: dict[str, Any] = field(default_factory=dict)  # versions, threads, git sha, host
    io: dict[str, Any] = field(default_factory=dict)  # bytes read, residency, memory peaks
    monitor: tuple[dict[str, Any], ...] = ()
    started_unix_s: float = 0.0
    duration_s: float = 0.0
    log_path: str | None = None

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
            "status": self.status,
            "error": self.error,
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
            status=d["status"],
            error=d.get("error"),
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
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600: give it the mode open() would
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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


def read_run(path: str | Path) -> RunResult:
    try:
        with open(path) as f:
            return RunResult.from_dict(json.load(f))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise StoreError(f"cannot read run file {path}: {e}; delete it to re-run") from None


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
