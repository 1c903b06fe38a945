"""Run a Sweep: every RunSpec in order, resumable, failures recorded.

Runs of one prefix belong to one job. Cached runs come before disk runs of
the same CPU count, because a disk run's memory limit is its cache budget
plus the job memory the cached run measured.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsanalyze import datafind, launch, store
from dsanalyze.analysis import stalls
from dsanalyze.config import Mode, RunSpec, Sweep
from dsanalyze.errors import ConfigError, DatasetError, ResourceError
from dsanalyze.jobs.datasets import DatasetInfo
from dsanalyze.resources import cgroups
from dsanalyze.store import RunResult


@dataclass
class SweepOutcome:
    results: list[RunResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    cgroup_note: str = ""

    @property
    def failed(self) -> list[RunResult]:
        return [r for r in self.results if not r.ok]


def resolve_cgroups(use_cgroups: bool) -> tuple[cgroups.Hierarchy | None, str]:
    """The hierarchy to use, or None and the reason why limits are not enforced."""
    if not use_cgroups:
        return None, "--no-cgroups"
    try:
        hierarchy = cgroups.detect()
        cgroups.clean_stale(hierarchy)
        cgroups.probe(hierarchy)
        return hierarchy, ""
    except (ResourceError, OSError) as e:
        return None, f"cgroups not writable here ({e})"


def check_prefix(prefix: Path, sweep: Sweep) -> None:
    """Refuse to mix runs of different jobs in one prefix."""
    if not store.runs_dir(prefix).is_dir():
        return
    new = sweep.job.to_dict()
    for r in store.load_runs(prefix):
        if r.spec.job != sweep.job:
            old = r.spec.job.to_dict()
            diff = ", ".join(f"{k} {old.get(k)!r} now {v!r}" for k, v in new.items()
                             if old.get(k) != v)
            raise ConfigError(f"{prefix} holds runs of a different job ({r.run_id}: {diff}): "
                              "pass another --prefix, or delete its runs/ folder")


def _sigterm(signum: int, frame: Any) -> None:
    raise launch.Interrupted()


def run_sweep(sweep: Sweep, progress: Callable[[str], None] | None = None,
              dataset: DatasetInfo | None = None) -> SweepOutcome:
    """Measure every run of the sweep that is not already complete; write summary.json."""
    prefix = Path(sweep.prefix)
    dataset = dataset or datafind.dataset_for(sweep.job, prefix)[0]
    specs = sweep.run_specs(dataset.total_bytes)
    for spec in specs:
        launch.cpu_ids(spec.resources.cpus)  # fail early on --cpus beyond the machine
    check_prefix(prefix, sweep)
    hierarchy, why = resolve_cgroups(sweep.use_cgroups)
    ctx = launch.LaunchContext(prefix, dataset, hierarchy, why)
    outcome = SweepOutcome(cgroup_note=why)
    old = signal.signal(signal.SIGTERM, _sigterm)
    t_start = time.monotonic()
    measured = 0
    try:
        for i, spec in enumerate(specs, 1):
            done = store.completed(prefix, spec) if sweep.resume else None
            if done is not None:
                outcome.skipped.append(spec.run_id)
                _remember_memory(ctx, done)
                continue
            result = launch.run_one(spec, ctx)
            store.write_run(prefix, result)
            outcome.results.append(result)
            _remember_memory(ctx, result)
            measured += 1
            if progress:
                progress(_progress_line(i, len(specs), spec, result, measured,
                                        time.monotonic() - t_start, len(specs) - i))
            if not result.ok and "CorruptSampleError" in (result.error or ""):
                # every other run would read the same file: stop here
                raise DatasetError(result.error.split("CorruptSampleError: ", 1)[-1])
    finally:
        signal.signal(signal.SIGTERM, old)
        doc = write_summary(prefix)
    outcome.summary = doc if doc is not None else stalls.summary([])
    return outcome


def write_summary(prefix: Path) -> dict[str, Any] | None:
    if not store.runs_dir(prefix).is_dir():
        return None
    runs = store.load_runs(prefix)
    if not runs:
        return None
    doc = stalls.summary(runs)
    store.write_json_atomic(prefix / "summary.json", doc)
    return doc


def _remember_memory(ctx: launch.LaunchContext, result: RunResult) -> None:
    if result.mode is Mode.CACHED and result.ok:
        peak = result.io.get("job_memory_peak_bytes")
        if peak:
            ctx.job_memory_bytes[result.spec.resources.cpus] = int(peak)


def _progress_line(i: int, n: int, spec: RunSpec, result: RunResult, measured: int,
                   elapsed_s: float, remaining: int) -> str:
    rate = stalls.run_rate(result).rate_sps
    what = f"{rate:.1f} samples/s" if rate else f"{result.status}: {result.error}"
    eta_s = elapsed_s / measured * remaining
    return (f"[{i}/{n}] {spec.run_id}: {what} ({result.duration_s:.0f} s), "
            f"ETA {eta_s // 60:.0f}m{eta_s % 60:02.0f}s")
