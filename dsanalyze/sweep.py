"""Run a Sweep: every RunSpec in order, resumable, failures recorded.

Runs of one prefix belong to one job. Cached runs come before disk runs of
the same CPU count, because a disk run's memory limit is its cache budget
plus the job memory the cached run measured.

Repeats (`--repeats`, `--target-ci`) run the whole list again, in the same
order, so that drift affects every mode alike; each repeat is its own run
file (`<run id>-r<N>`) and resumes like the others.
"""

from __future__ import annotations

import dataclasses
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsanalyze import launch, store
from dsanalyze.analysis import stalls
from dsanalyze.config import Mode, RunSpec, Sweep
from dsanalyze.errors import ConfigError, DatasetError, ResourceError
from dsanalyze.jobs.datasets import DatasetInfo, scan_dataset
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
    if sweep.job.data_dir is None:
        raise ConfigError("no dataset: pass --data DIR (the files the job reads)")
    dataset = dataset or scan_dataset(sweep.job.data_dir)
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
        repeat, todo = 1, specs
        while todo:
            for i, spec in enumerate(todo, 1):
                result = _measure(spec, ctx, outcome, sweep.resume)
                if result is None:
                    continue
                measured += 1
                if progress:
                    line = _progress_line(spec, result, measured, time.monotonic() - t_start,
                                          len(todo) - i)
                    progress(f"[{i}/{len(todo)}] {line}{_repeat_tag(sweep, repeat)}")
            repeat += 1
            todo = next_repeat(sweep, specs, repeat, progress)
    finally:
        signal.signal(signal.SIGTERM, old)
        doc = write_summary(prefix)
    outcome.summary = doc if doc is not None else stalls.summary([])
    return outcome


def _measure(spec: RunSpec, ctx: launch.LaunchContext, outcome: SweepOutcome,
             resume: bool) -> RunResult | None:
    """One run, stored as soon as it ends; None when `resume` finds it complete."""
    done = store.completed(ctx.prefix, spec) if resume else None
    if done is not None:
        outcome.skipped.append(spec.run_id)
        _remember_memory(ctx, done)
        return None
    result = launch.run_one(spec, ctx)
    store.write_run(ctx.prefix, result)
    outcome.results.append(result)
    _remember_memory(ctx, result)
    if not result.ok and "CorruptSampleError" in (result.error or ""):
        # every other run would read the same file: stop here
        raise DatasetError(result.error.split("CorruptSampleError: ", 1)[-1])
    return result


def next_repeat(sweep: Sweep, specs: list[RunSpec], repeat: int,
                progress: Callable[[str], None] | None = None) -> list[RunSpec]:
    """The runs of repeat number `repeat` (1-based), in the order of the first: none when done.

    `--repeats N`: all of them up to N. `--target-ci`: at least 2 (one run says
    nothing about run-to-run drift) and at most `max_repeats`; beyond 2, only
    the runs of configurations whose stall intervals are still wider than the
    target (the synthetic and cached runs of their CPU count, and their disk run).
    """
    again = [dataclasses.replace(s, repeat=repeat) for s in specs]
    if sweep.target_ci_pct is None:
        return again if repeat <= sweep.repeats else []
    if repeat > sweep.max_repeats:
        return []
    if repeat <= max(sweep.repeats, 2):
        return again
    wide = [b for b in stalls.breakdowns(store.load_runs(sweep.prefix))
            if (w := b.widest_pct()) is not None and w > sweep.target_ci_pct]
    if progress:
        for b in wide:
            progress(f"after {repeat - 1} repeats: {b.key} stalls ±{b.widest_pct():.1f}% > "
                     f"target ±{sweep.target_ci_pct:g}%: repeating")
    return [s for s in again if any(_serves(s, b) for b in wide)]


def _serves(spec: RunSpec, b: stalls.Breakdown) -> bool:
    """Whether the run is one of the configuration's (shared synthetic/cached runs included)."""
    if spec.resources.cpus != b.cpus:
        return False
    return spec.mode.cache_independent or spec.resources.key == b.key


def _repeat_tag(sweep: Sweep, repeat: int) -> str:
    if sweep.target_ci_pct is not None:
        return f", repeat {repeat} (at most {sweep.max_repeats}, until stalls ±{sweep.target_ci_pct:g}%)"
    return f", repeat {repeat}/{sweep.repeats}" if sweep.repeats > 1 else ""


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


def _progress_line(spec: RunSpec, result: RunResult, measured: int, elapsed_s: float,
                   remaining: int) -> str:
    """`cached-cpus1: 40.0 samples/s [38.2, 41.5] (12 s), ETA 0m30s`."""
    rate = stalls.run_rate(result, interval=True)
    what = f"{result.status}: {result.error}"
    if rate.rate_sps:
        what = f"{rate.rate_sps:.1f} samples/s"
        if rate.rate_sps_low is not None:
            what += f" [{rate.rate_sps_low:.1f}, {rate.rate_sps_high:.1f}]"
    eta_s = elapsed_s / measured * remaining
    return (f"{spec.run_id}: {what} ({result.duration_s:.0f} s), "
            f"ETA {eta_s // 60:.0f}m{eta_s % 60:02.0f}s")
