"""Run a Sweep: every RunSpec in order, resumable, failures recorded.

Runs of one prefix belong to one job. Cached runs come before disk runs of
the same CPU count, because a disk run's memory limit is its cache budget
plus the job memory the cached run measured.
"""

from __future__ import annotations

import dataclasses
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsanalyze import launch, nodes, store
from dsanalyze.analysis import stalls, window
from dsanalyze.config import Mode, RunSpec, Sweep
from dsanalyze.errors import ConfigError, DatasetError, FailureKind, NodeLost, ResourceError
from dsanalyze.fingerprint import Fingerprint, check_consistent, check_resumable, check_unchanged
from dsanalyze.jobs.datasets import DatasetInfo, scan_dataset
from dsanalyze.resources import cgroups
from dsanalyze.resources.datalock import DataLock
from dsanalyze.store import RunResult


@dataclass
class SweepOutcome:
    results: list[RunResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    cgroup_note: str = ""
    unreadable: list[str] = field(default_factory=list)  # run files found truncated: measured again

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
    for r in store.load_readable_runs(prefix)[0]:
        if r.spec.job != sweep.job:
            old = r.spec.job.to_dict()
            diff = ", ".join(f"{k} {old.get(k)!r} now {v!r}" for k, v in new.items()
                             if old.get(k) != v)
            raise ConfigError(f"{prefix} holds runs of a different job ({r.run_id}: {diff}): "
                              "pass another --prefix, or delete its runs/ folder")


def _sigterm(signum: int, frame: Any) -> None:
    raise launch.Interrupted()


def check_data(prefix: Path, sweep: Sweep, specs: list[RunSpec], fp: Fingerprint) -> list[str]:
    """Refuse to mix runs over other data; return the unreadable run files, to measure again."""
    if not store.runs_dir(prefix).is_dir():
        return []
    runs, unreadable = store.load_readable_runs(prefix)
    check_resumable(runs, fp, {s.run_id for s in specs}, sweep.resume)
    return unreadable


def run_sweep(sweep: Sweep, progress: Callable[[str], None] | None = None,
              dataset: DatasetInfo | None = None, lock_wait_s: float = 0.0) -> SweepOutcome:
    """Measure every run of the sweep that is not already complete; write summary.json.

    The dataset stays locked against other harnesses for the whole sweep."""
    prefix = Path(sweep.prefix)
    if sweep.job.data_dir is None:
        raise ConfigError("no dataset: pass --data DIR (the files the job reads)")
    dataset = dataset or scan_dataset(sweep.job.data_dir)
    specs = sweep.run_specs(dataset.total_bytes)
    for spec in specs:
        launch.cpu_ids(spec.resources.cpus)  # fail early on --cpus beyond the machine
    check_prefix(prefix, sweep)
    fp = Fingerprint.of(dataset)
    unreadable = check_data(prefix, sweep, specs, fp)
    store.check_writable(prefix)
    hierarchy, why = resolve_cgroups(sweep.use_cgroups)
    ctx = launch.LaunchContext(prefix, dataset, hierarchy, why)
    outcome = SweepOutcome(cgroup_note=why, unreadable=unreadable)
    lock = DataLock.acquire(dataset.root, lock_wait_s)
    old = signal.signal(signal.SIGTERM, _sigterm)
    t_start = time.monotonic()
    measured = 0
    group = None
    try:
        if sweep.job.nnodes > 1:
            group = nodes.NodeGroup.join(sweep.job, specs)
        for i, spec in enumerate(specs, 1):
            done = store.completed(prefix, spec) if sweep.resume else None
            if group is not None and not group.agree_skip(i, done is not None, spec.job.timeout_s):
                done = None  # another node lacks it: every node runs it again
            if done is not None:
                outcome.skipped.append(spec.run_id)
                _remember_memory(ctx, done)
                continue
            check_unchanged(dataset.root, fp)
            result = _run(spec, ctx, group, i)
            result = dataclasses.replace(result, dataset={**result.dataset,
                                                          "fingerprint": fp.to_dict()})
            store.write_run(prefix, result)
            outcome.results.append(result)
            _remember_memory(ctx, result)
            measured += 1
            if progress:
                progress(_progress_line(i, len(specs), spec, result, measured,
                                        time.monotonic() - t_start, len(specs) - i))
            _stop_on_usage_error(result, sweep)
            if result.failure is FailureKind.CORRUPT_SAMPLE:
                # every other run would read the same file: stop here
                raise DatasetError(result.error)
            if group is not None and group.lost_node() is not None:
                raise NodeLost(f"{spec.run_id}: {result.error}; restart every node's harness "
                               "with --resume")
    finally:
        if group is not None:
            group.close()
        signal.signal(signal.SIGTERM, old)
        lock.release()
        doc = write_summary(prefix)
    outcome.summary = doc if doc is not None else stalls.summary([])
    return outcome


def _run(spec: RunSpec, ctx: launch.LaunchContext, group: nodes.NodeGroup | None,
         seq: int) -> RunResult:
    """One run; on several nodes, started in step with the others and merged on node 0."""
    if group is None:
        return launch.run_one(spec, ctx)
    ctx.start_gate = lambda: group.start_gate(seq, spec.job.timeout_s)
    ctx.should_abort = group.abort_reason
    try:
        result = launch.run_one(spec, ctx)
    finally:
        ctx.start_gate = ctx.should_abort = None
    return group.exchange(seq, result, spec.job.timeout_s)


def _stop_on_usage_error(result: RunResult, sweep: Sweep) -> None:
    """A script that exits with code 2 (argparse's usage error) before writing its record would
    do so in every run: stop the sweep with its own error lines."""
    exit_info = result.environment.get("script_exit") or {}
    if result.ok or result.ranks or exit_info.get("code") != 2:
        return
    said = "; ".join(exit_info.get("lines") or []) or "no message"
    args = " ".join(sweep.job.script_args)
    raise ConfigError(f"the script {Path(sweep.job.script or '').name} stopped at once with its "
                      f"own usage error: {said} (its arguments: {args or 'none'}; options for "
                      "the harness go before the script: python harness.py [options] SCRIPT [script "
                      f"args]; log: "
                      f"{result.log_path})")


def write_summary(prefix: Path) -> dict[str, Any] | None:
    if not store.runs_dir(prefix).is_dir():
        return None
    runs, unreadable = store.load_readable_runs(prefix)
    if not runs:
        return None
    check_consistent(runs)
    doc = stalls.summary(runs)
    if unreadable:
        doc["unreadable_runs"] = unreadable
    store.write_json_atomic(prefix / "summary.json", doc)
    return doc


def _remember_memory(ctx: launch.LaunchContext, result: RunResult) -> None:
    if result.mode is Mode.CACHED and result.ok:
        peak = result.io.get("job_memory_peak_bytes")
        if peak:
            ctx.job_memory_bytes[result.spec.resources.cpus] = int(peak)
        ctx.library_files = tuple(result.io.get("mapped_files") or ctx.library_files)


def _progress_line(i: int, n: int, spec: RunSpec, result: RunResult, measured: int,
                   elapsed_s: float, remaining: int) -> str:
    rate = stalls.run_rate(result).rate_sps
    what = f"{rate:.1f} samples/s" if rate else f"{result.status}: {result.error}"
    short = window.short_run(result)
    if short is not None:
        what += f"; {window.short_text(short)}"
    eta_s = elapsed_s / measured * remaining
    return (f"[{i}/{n}] {spec.run_id}: {what} ({result.duration_s:.0f} s), "
            f"ETA {eta_s // 60:.0f}m{eta_s % 60:02.0f}s")
