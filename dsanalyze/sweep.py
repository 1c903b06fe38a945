"""Run a Sweep: every RunSpec in order, resumable, failures recorded.

Runs of one prefix belong to one job. Cached runs come before disk runs of
the same CPU count, because a disk run's memory limit is its cache budget
plus the job memory the cached run measured.

Repeats (`--repeats`, `--target-ci`) run the whole list again, in the same
order, so that drift affects every mode alike; each repeat is its own run
file (`<run id>-r<N>`) and resumes like the others. Without them, the cached
runs of a step on the CPU that shares its cores with the DataLoader workers
(`analysis.jobrun.shares_cores`) are measured `--shared-core-runs` times (3):
one such run lies up to a third from its configuration's mean, and the what-if
fits their mean and their spread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsanalyze import datafind, launch, nodes, store
from dsanalyze.analysis import measured as measured_window
from dsanalyze.analysis import runrate, stalls, workspeed
from dsanalyze.analysis.jobrun import shares_cores
from dsanalyze.analysis.window import steady_window
from dsanalyze.config import Mode, RunSpec, Sweep
from dsanalyze.dataset import DatasetInfo
from dsanalyze.errors import (
    ConfigError,
    DatasetError,
    DsAnalyzeError,
    FailureKind,
    NodeLost,
    ResourceError,
    RunFailed,
)
from dsanalyze.fingerprint import Fingerprint, check_resumable, check_unchanged
from dsanalyze.records import CpuScaling, HostSpeed, RunResult, Status
from dsanalyze.remote.runlink import RemoteData
from dsanalyze.report.notes import short_text
from dsanalyze.resources import cgroups, cpuscale, interrupts, scratch
from dsanalyze.resources.datalock import DataLock
from dsanalyze.resources.hostspeed import (
    SETTLE_S,
    HostProbe,
    is_slowed,
    slowed_pct,
)
from dsanalyze.settings import SETTINGS

if TYPE_CHECKING:  # the adaptive search fits the what-if: imported only when asked for
    from dsanalyze import adaptive


@dataclass
class SweepOutcome:
    results: list[RunResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    cgroup_note: str = ""
    unreadable: list[str] = field(default_factory=list)  # run files found truncated: measured again
    superseded: list[str] = field(default_factory=list)  # an earlier sweep's repeats, set aside
    superseded_dir: Path | None = None
    host_slowed: list[str] = field(default_factory=list)  # runs the machine slowed, kept aside
    adaptive: Any = None  # adaptive.AdaptiveAnswer, with --adaptive

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


def set_aside_stale_repeats(prefix: Path, specs: list[RunSpec]) -> tuple[list[str], Path | None]:
    """A sweep without `--resume` measures its configurations afresh: the repeat files
    (`-r<N>`) an earlier sweep left for them would be pooled with the new runs. They are set
    aside in `PREFIX/superseded/` (`store.set_aside`: kept, not deleted); returns their run ids
    and the folder."""
    wanted = {s.run_id for s in specs}
    stale = [r for r in store.load_readable_runs(prefix)[0]
             if r.spec.repeat > 1 and dataclasses.replace(r.spec, repeat=1).run_id in wanted]
    if not stale:
        return [], None
    asides = [store.set_aside(prefix, store.SUPERSEDED, r) for r in stale]
    return [r.run_id for r in stale], asides[0].parent


def check_data(prefix: Path, sweep: Sweep, specs: list[RunSpec], fp: Fingerprint) -> list[str]:
    """Refuse to mix runs over other data; return the unreadable run files, to measure again."""
    if not store.runs_dir(prefix).is_dir():
        return []
    runs, unreadable = store.load_readable_runs(prefix)
    check_resumable(runs, fp, {s.run_id for s in specs}, sweep.resume)
    return unreadable


def check_cpus(sweep: Sweep) -> None:
    """Refuse `--cpus` beyond the machine, and any value of the grid that does not parse
    (`--cache`, `--storage-bw`, the links'), before anything slow: the dataset's scan, a
    discovery run, the first run."""
    asked = [c for c, _, _ in sweep.combos] if sweep.combos else list(sweep.cpus)
    for cpus in asked:
        launch.cpu_ids(None if cpus is None else int(cpus))
    sweep.resource_grid(1)  # a budget in % of the dataset parses at any size


def find_dataset(sweep: Sweep) -> DatasetInfo:
    check_cpus(sweep)  # before the scan or the discovery run: they can take minutes
    return datafind.dataset_for(sweep.job, Path(sweep.prefix))[0]


def _specs(sweep: Sweep, dataset: DatasetInfo) -> list[RunSpec]:
    if sweep.job.nnodes > 1 and sweep.target_ci_pct is not None:
        # each node would judge its own ranks' intervals: they could disagree
        raise ConfigError("--target-ci needs one node: with several, give --repeats N")
    return sweep.run_specs(dataset.total_bytes)


def before_meeting(sweep: Sweep, step: Callable[[], Any]) -> Any:
    """`step()`; a node that fails in it, before the nodes meet, tells the others (they stop
    at once with its reason instead of waiting for it: `nodes.announce_failure`)."""
    try:
        return step()
    except DsAnalyzeError as e:
        if sweep.job.nnodes > 1:
            nodes.announce_failure(sweep.job, str(e))
        raise


def run_sweep(sweep: Sweep, progress: Callable[[str], None] | None = None,
              dataset: DatasetInfo | None = None, lock_wait_s: float = 0.0,
              known_runs: Sequence[RunResult] = ()) -> SweepOutcome:
    """Measure every run of the sweep that is not already complete (`app.profile` writes
    summary.json from them). `known_runs`: runs of the same job stored elsewhere (`verify`'s
    run into a sub-prefix): the files they mapped are read back before a disk run as those
    of the sweep's own runs are (`_remember_libraries`).

    The dataset stays locked against other harnesses for the whole sweep. With several
    nodes, they meet before any other check: a node whose check fails stops every node at
    once with its reason (`nodes.NodeGroup.fail`)."""
    dataset = dataset or before_meeting(sweep, lambda: find_dataset(sweep))
    specs = real_loader_first(before_meeting(sweep, lambda: _specs(sweep, dataset)))
    group = nodes.NodeGroup.join(sweep.job, specs) if sweep.job.nnodes > 1 else None
    lock = None
    stack = contextlib.ExitStack()
    # Ctrl-C and SIGTERM raise KeyboardInterrupt and Interrupted (cli: exit 130, 143), never
    # inside a wait on the job, and the teardown below is bounded (resources/interrupts.py)
    with interrupts.handled():
        try:
            try:
                if group is not None:
                    group.meet(dataset.root, sweep.job.timeout_s)
                measuring, lock = _prepare(sweep, specs, dataset, lock_wait_s, group, known_runs)
                measuring.progress = progress
                stack.callback(lambda: measuring.probe.close() if measuring.probe else None)
                # served data: its servers start (and a user's endpoint is checked) before any run
                measuring.ctx.remote = stack.enter_context(RemoteData.open(sweep, dataset))
            except DsAnalyzeError as e:
                if group is not None:
                    group.fail(str(e))
                raise
            if sweep.adaptive:
                measuring.outcome.adaptive = _search(sweep, specs, measuring, dataset, progress)
            else:
                _measure_all(sweep, specs, measuring, progress)
        finally:
            if group is not None:
                group.close()
            stack.close()  # the servers of served data stop, their namespace goes
            if lock is not None:
                lock.release()
    return measuring.outcome


def _prepare(sweep: Sweep, specs: list[RunSpec], dataset: DatasetInfo, lock_wait_s: float,
             group: nodes.NodeGroup | None,
             known_runs: Sequence[RunResult]) -> tuple[_Measuring, DataLock]:
    """The checks before the first run (prefix, data, cgroups, the dataset's lock) and what
    every run shares: with the files `known_runs` mapped (`_remember_libraries`)."""
    prefix = Path(sweep.prefix)
    check_prefix(prefix, sweep)
    fp = Fingerprint.of(dataset)
    unreadable = check_data(prefix, sweep, specs, fp)
    store.check_writable(prefix)
    if sweep.adaptive:
        from dsanalyze import adaptive
        adaptive.check(sweep)
    scratch.clean_stale()  # the temporary directories of runs whose harness was killed
    hierarchy, why = resolve_cgroups(sweep.use_cgroups)
    ctx = launch.LaunchContext(prefix, dataset, hierarchy, why,
                               drop_caches_globally=sweep.drop_caches_globally)
    for known in known_runs:
        _remember_libraries(ctx, known)
    outcome = SweepOutcome(cgroup_note=why, unreadable=unreadable)
    lock = DataLock.acquire(dataset.root, lock_wait_s)
    if not sweep.resume and sweep.job.node_rank == 0:
        outcome.superseded, outcome.superseded_dir = set_aside_stale_repeats(prefix, specs)
    return _Measuring(ctx, outcome, sweep.resume, fp, group, sweep.host_retries,
                      reference=tuple(known_runs)), lock


def _measure_all(sweep: Sweep, specs: list[RunSpec], measuring: _Measuring,
                 progress: Callable[[str], None] | None) -> None:
    """Every run, then the repeats `next_repeat` asks for, a progress line after each."""
    t_start = time.monotonic()
    measured, repeat, todo, seq = 0, 1, specs, 0
    while todo:
        for i, spec in enumerate(todo, 1):
            seq += 1  # the same on every node: the sweep and its repeats are the same
            result = _measure(spec, measuring, seq)
            if result is None:
                continue
            measured += 1
            if progress:
                line = _progress_line(spec, result, measured, time.monotonic() - t_start,
                                      len(todo) - i)
                progress(f"[{i}/{len(todo)}] {line}{_repeat_tag(sweep, repeat)}")
            _stop_on_usage_error(result, sweep)
            _stop_on_crash_at_start(result)
            _stop_on_lost_node(spec, result, measuring.group)
        repeat += 1
        todo = next_repeat(sweep, specs, repeat, progress)
    _measure_slowed_again(measuring, seq)


def _stop_on_lost_node(spec: RunSpec, result: RunResult, group: nodes.NodeGroup | None) -> None:
    """A run that failed with a node gone stops the sweep. After a run that succeeded, node 0
    may have ended already (it was the last run) and its store with it: the next run's gate
    notices a lost node, so the store is not asked."""
    if result.ok or group is None or group.lost_node() is None:
        return
    raise NodeLost(f"{spec.run_id}: {result.error}; restart every node's harness with --resume")


def _search(sweep: Sweep, specs: list[RunSpec], measuring: _Measuring, dataset: DatasetInfo,
            progress: Callable[[str], None] | None) -> adaptive.AdaptiveAnswer:
    """`--adaptive`: the search picks the runs; each gets its progress line as it ends."""
    from dsanalyze import adaptive
    t_start, count = time.monotonic(), [0]

    def measure(spec: RunSpec) -> RunResult | None:
        result = _measure(spec, measuring, count[0] + 1)
        if result is None:
            return None
        count[0] += 1
        if progress:
            line = _progress_line(spec, result, count[0], time.monotonic() - t_start, 0)
            progress(f"[adaptive run {count[0]}] {line.rsplit(', ETA', 1)[0]}")
        _stop_on_usage_error(result, sweep)
        return result

    def cpu_count(cpus: int | None) -> int:
        return len(launch.cpu_ids(cpus) or os.sched_getaffinity(0))
    return adaptive.search(sweep, specs, measure, dataset.file_bytes, cpu_count, progress)


def _run(spec: RunSpec, ctx: launch.LaunchContext, group: nodes.NodeGroup | None,
         seq: int) -> RunResult:
    """One run; on several nodes, started in step with the others and merged on node 0."""
    if group is None:
        return _link_window(launch.run_one(spec, ctx), ctx.remote)
    ctx.start_gate = lambda: group.start_gate(seq, spec.job.timeout_s)
    ctx.should_abort = group.abort_reason
    try:
        result = _link_window(launch.run_one(spec, ctx), ctx.remote)
    finally:
        ctx.start_gate = ctx.should_abort = None
    return group.exchange(seq, result, spec.job.timeout_s)


def _link_window(result: RunResult, remote: RemoteData | None) -> RunResult:
    """The run with its link's counts over its steady window (this node's ranks; its whole
    epochs when it starts at an epoch's), so that a sample's requests and bytes leave out
    the warm-up and what was read ahead and never used."""
    if remote is None or result.link is None:
        return result
    window = steady_window(result)
    window = window.whole_epochs() if window is not None else None
    span = window.span_unix_s() if window is not None else None
    if window is None or span is None:
        return result
    return dataclasses.replace(result, link=remote.windowed(result.link, span, window.samples()))


def _stop_on_usage_error(result: RunResult, sweep: Sweep) -> None:
    """A script that exits with code 2 (argparse's usage error) before writing its record would
    do so in every run: stop the sweep with its own error lines."""
    exit_info = result.environment.get("script_exit") or {}
    if result.ok or result.ranks or exit_info.get("code") != 2:
        return
    raise launch.usage_error(sweep.job, exit_info.get("lines") or [], result.log_path)


def _stop_on_crash_at_start(result: RunResult) -> None:
    """A script that raised before its training loader's first batch (the same code in every
    mode, before any of them differ) would crash the same way in every run: stop the sweep
    after the first, with its error. A crash later, an OOM, a timeout or a lost node may
    belong to the mode or the limits: the sweep goes on."""
    first = result.environment.get("first_failure") or {}
    if (result.status is not Status.FAILED or result.failure is not FailureKind.CRASH
            or result.ranks or first.get("batches") != 0):
        return
    raise RunFailed(f"{result.run_id}: {result.error}; the script failed before its first "
                    "batch, as it would in every mode: the sweep stops here (fix the script, "
                    f"then run again; log: {result.log_path})")


@dataclass
class _Measuring:
    """What every run of one sweep shares while it is measured."""

    ctx: launch.LaunchContext
    outcome: SweepOutcome
    resume: bool
    fingerprint: Fingerprint  # of the data at the start: each run checks it is unchanged
    group: nodes.NodeGroup | None  # the other nodes, with several
    host_retries: int  # `Sweep.host_retries`
    # the machine's own speed, timed around each run (`resources/hostspeed.py`): started
    # before the first run is measured, closed with the sweep
    probe: HostProbe | None = None
    progress: Callable[[str], None] | None = None
    # every run of the sweep stored so far, by id (those resumed too): what the machine's
    # speed during each is judged against (`_measure_slowed_again`)
    stored: dict[str, RunResult] = field(default_factory=dict)
    # runs of the same job stored elsewhere (`run_sweep`'s `known_runs`): `verify`'s one run is
    # judged against the profile's
    reference: tuple[RunResult, ...] = ()

    def keep(self, result: RunResult) -> None:
        """`result` is the run of its id this sweep stores (stored already by the caller)."""
        self.outcome.results[:] = [r for r in self.outcome.results
                                   if r.run_id != result.run_id] + [result]
        self.stored[result.run_id] = result


def _measure(spec: RunSpec, m: _Measuring, seq: int, again: int = 0) -> RunResult | None:
    """One run, stored as soon as it ends; None when `resume` finds it complete (on every
    node, with several). `again`: the times it was measured before, each set aside slowed
    (`_measure_slowed_again`): it is measured whether stored or not."""
    ctx, outcome, fp, group = m.ctx, m.outcome, m.fingerprint, m.group
    done = store.completed(ctx.prefix, spec) if m.resume and not again else None
    if group is not None and not group.agree_skip(seq, done is not None, spec.job.timeout_s):
        done = None  # another node lacks it: every node runs it again
    if done is not None:
        outcome.skipped.append(spec.run_id)
        m.stored[spec.run_id] = done
        _remember_libraries(ctx, done)
        _remember_epoch(ctx, done)
        return None
    check_unchanged(datafind.rescan(spec.job, ctx.dataset), fp)
    if ctx.cpu_scaling is None:
        ctx.cpu_scaling = cpu_scaling(ctx, m.resume)
    if m.probe is None:
        m.probe = HostProbe.start(ctx.dataset.files)
    for attempt in range(again, m.host_retries + 1):
        before = _settled(m, m.probe.measure())
        baseline = m.probe.baseline_cpu_s()
        result = _run(spec, ctx, group, seq)
        after = m.probe.measure()
        speed = HostSpeed(m.probe.work, before, after, m.probe.why, baseline, attempt)
        result = dataclasses.replace(
            result, dataset=dataclasses.replace(result.dataset, fingerprint=fp.to_dict()),
            environment={**result.environment, "host_speed": speed.to_dict()})
        # the spell began during the run: measured again, on one node, if the run succeeded
        if attempt == m.host_retries or group is not None or not result.ok \
                or not is_slowed(after, m.probe.seen):
            break
        _set_aside_slowed(result, m, f"the machine itself ran {speed.slowed_after_pct:.0f}% slow "
                          f"after it (a decode {1e3 * (speed.after_cpu_s or 0):.2f} ms against "
                          f"{1e3 * (speed.baseline_cpu_s or 0):.2f})")
    store.write_run(ctx.prefix, result)
    m.keep(result)
    _remember_libraries(ctx, result)
    _remember_epoch(ctx, result)
    if result.failure is FailureKind.CORRUPT_SAMPLE:
        # every other run would read the same file: stop here
        raise DatasetError(result.error)
    return result


def _settled(m: _Measuring, cpu_s: float | None) -> float | None:
    """The probe's reading before a run; a slowed machine waited for first (`HostProbe.settle`),
    except with `--host-retries 0` or across several nodes (the others would wait at the
    start gate on a machine they do not share)."""
    assert m.probe is not None
    if m.host_retries == 0 or m.group is not None or not is_slowed(cpu_s, m.probe.seen):
        return cpu_s
    base = m.probe.baseline_cpu_s() or 0.0
    if m.progress:
        m.progress(f"the machine itself runs {slowed_pct(cpu_s, m.probe.seen):.0f}% slow (a decode "
                   f"{1e3 * (cpu_s or 0):.2f} ms against {1e3 * base:.2f} ms between runs): waiting "
                   f"up to {SETTLE_S:.0f} s for it before the next run")
    settled = m.probe.settle(cpu_s)
    if m.progress and not settled.back:
        m.progress(f"the machine stayed slow for {settled.waited_s:.0f} s: taken as its speed "
                   "from here on")
    return settled.cpu_s


def _set_aside_slowed(result: RunResult, m: _Measuring, why: str) -> Path:
    """Keep the slowed run under `PREFIX/host-slowed/` (never pooled: not in runs/), say `why`."""
    path = store.set_aside(m.ctx.prefix, store.SLOWED, result)
    m.outcome.host_slowed.append(str(path))
    if m.progress:
        m.progress(f"{result.run_id}: {why}: kept in {path.parent}, measured again")
    return path


def _measure_slowed_again(m: _Measuring, seq: int) -> None:
    """After the sweep, each run whose own transforms cost more than `SETTINGS.work_slow_pct`
    CPU a sample over the cheapest of its configuration's runs (its repeats, at least 3:
    `analysis/workspeed.py`: the machine slowed during it, with the probes around it normal,
    or the run's processes drew their speed slow: bench58's workers drew it per process),
    or more than `SETTINGS.work_outlier_pct` over the sweep's cheapest unthrottled run (a
    configuration's only run: `_slowed_during`), is set aside and measured again, the slowest
    first, until none is or each has been
    measured `host_retries` times more. After the sweep, not at once: every repeat is then
    measured, the first one's included, and a neighbour's spell has passed; with `known_runs`
    (`verify`), theirs count too. Not across several nodes (a run is measured on all of them at
    once). Of each run's tries, the cheapest is stored (`_keep_cheapest`)."""
    if m.host_retries == 0 or m.group is not None:
        return
    tries: dict[str, list[tuple[RunResult, Path]]] = {}  # run id: its tries this pass set aside
    for _ in range(m.host_retries):
        found = [(run, why) for run, why in _slowed_during(m)
                 if _measured_again(run) < m.host_retries]
        if not found:
            break
        for run, why in found:
            tries.setdefault(run.run_id, []).append((run, _set_aside_slowed(
                run, m, f"its transforms took {why} (the same work: the machine, or this run's "
                "processes, ran slow)")))
            seq += 1
            _measure(run.spec, m, seq, again=_measured_again(run) + 1)
    for run_id, asides in tries.items():
        _keep_cheapest(m, run_id, asides)


def _slowed_during(m: _Measuring) -> list[tuple[RunResult, str]]:
    """The stored runs whose transforms cost too much, each once, slowest first: among their
    repeats (`SETTINGS.work_slow_pct`), or, a configuration's only run, far over the sweep's
    cheapest unthrottled run (`SETTINGS.work_outlier_pct`); with what each was judged against."""
    runs = list(m.stored.values())
    found: dict[str, tuple[RunResult, float, str]] = {}
    for run, pct in workspeed.over_the_sweep(runs, SETTINGS.work_outlier_pct, m.reference):
        found[run.run_id] = (run, pct, "the sweep's cheapest unthrottled run")
    for run, pct in workspeed.slowed(runs, SETTINGS.work_slow_pct, m.reference):
        found[run.run_id] = (run, pct, "its fastest repeat")
    return [(run, f"{pct:.0f}% more CPU a sample than {against}")
            for run, pct, against in sorted(found.values(), key=lambda t: -t[1])]


def _keep_cheapest(m: _Measuring, run_id: str, asides: list[tuple[RunResult, Path]]) -> None:
    """Of a run's tries, store the one whose transforms cost the least CPU a sample
    (`workspeed.cheapest`); the others stay in host-slowed/. A neighbour only ever makes the
    work dearer, and a try measured again can land in its next spell: on bench35, timm's
    3-worker cached repeat at 2 CPUs measured 294.7 samples/s, then 257.2 with its transforms
    14% dearer, and the end pass kept the second."""
    stored = m.stored[run_id]
    cheapest = workspeed.cheapest([stored, *(run for run, _ in asides)])
    if cheapest is stored:
        return
    path = next(p for run, p in asides if run is cheapest)
    m.outcome.host_slowed.append(str(store.set_aside(m.ctx.prefix, store.SLOWED, stored)))
    m.outcome.host_slowed.remove(str(path))
    path.rename(store.run_path(m.ctx.prefix, run_id))
    m.keep(cheapest)
    if m.progress:
        last = workspeed.reading(stored)
        m.progress(f"{run_id}: the one of its {len(asides) + 1} tries whose transforms cost least "
                   f"is stored ({1e3 * workspeed.work_cpu_s(cheapest):.3f} ms a sample; the last "
                   f"one: {f'{1e3 * last:.3f} ms' if last is not None else stored.status})")


def _measured_again(run: RunResult) -> int:
    speed = HostSpeed.of_run(run)
    return speed.measured_again if speed else 0


def cpu_scaling(ctx: launch.LaunchContext, resume: bool) -> dict[str, Any]:
    """The machine's parallel efficiency for every run of the sweep: measured once, before
    its first run is (outside any cgroup); a resumed sweep keeps the one its stored runs have."""
    if resume:
        for run in store.load_readable_runs(ctx.prefix)[0]:
            if (found := CpuScaling.of_run(run)) is not None:
                return found.to_dict()
    return cpuscale.measure(ctx.dataset.files).to_dict()


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
        return again if repeat <= sweep.repeats else shared_core_repeats(sweep, again, progress)
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


def shared_core_repeats(sweep: Sweep, again: list[RunSpec],
                        progress: Callable[[str], None] | None = None) -> list[RunSpec]:
    """Of a repeat's runs `again`, the cached ones up to `--shared-core-runs` whose first run
    shares its cores (`jobrun.shares_cores`: a step on the CPU beside the workers). Not in an
    adaptive search (it repeats what it needs) nor across nodes (each would judge its own
    runs: `--repeats N` there)."""
    if sweep.adaptive or sweep.job.nnodes > 1 or not again \
            or again[0].repeat > sweep.shared_core_runs:
        return []
    first = {r.run_id: r for r in store.load_readable_runs(Path(sweep.prefix))[0]
             if r.ok and r.ranks and r.spec.repeat == 1}
    todo = [s for s in again if s.mode is Mode.CACHED
            and (r := first.get(dataclasses.replace(s, repeat=1).run_id)) is not None
            and shares_cores(r)]
    if progress and again[0].repeat == 2 and any(store.completed(sweep.prefix, s) is None
                                                 for s in todo):
        progress(f"{', '.join(s.run_id.rsplit('-r', 1)[0] for s in todo)}: the step runs on the "
                 f"CPU beside the workers, where one run lies up to a third from the mean: "
                 f"{sweep.shared_core_runs} runs each (--shared-core-runs)")
    return todo


def _serves(spec: RunSpec, b: stalls.Breakdown) -> bool:
    """Whether the run is one of the configuration's (shared synthetic/cached runs included)."""
    if spec.resources.cpus != b.cpus:
        return False
    return spec.mode.cache_independent or spec.resources.key == b.key


def _repeat_tag(sweep: Sweep, repeat: int) -> str:
    if sweep.target_ci_pct is not None:
        return f", repeat {repeat} (at most {sweep.max_repeats}, until stalls ±{sweep.target_ci_pct:g}%)"
    if repeat > sweep.repeats:
        return f", run {repeat}/{sweep.shared_core_runs} (a step sharing its cores)"
    return f", repeat {repeat}/{sweep.repeats}" if sweep.repeats > 1 else ""


def _remember_epoch(ctx: launch.LaunchContext, result: RunResult) -> None:
    """An epoch's batches as a run of the real loader counted them: the synthetic runs of a
    loader with no len() replay that many."""
    seen = result.ranks[0].extra.get("epoch_batches_seen") if result.ranks else None
    if seen and result.mode is not Mode.SYNTHETIC and ctx.epoch_batches is None:
        ctx.epoch_batches = int(seen)


def real_loader_first(specs: list[RunSpec]) -> list[RunSpec]:
    """A script measured in whole epochs: its synthetic runs after the first run of the real
    loader, which counts an epoch's batches for them to replay (an IterableDataset, as a
    webdataset pipeline, has no len()). Otherwise the order of --modes."""
    job = specs[0].job if specs else None
    if job is None or job.script is None or job.epochs is None:
        return specs
    first = next((i for i, s in enumerate(specs) if s.mode is not Mode.SYNTHETIC), None)
    if first is None:
        return specs
    early = [s for s in specs[:first] if s.mode is Mode.SYNTHETIC]
    return [s for s in specs[:first + 1] if s not in early] + early + specs[first + 1:]


def _remember_libraries(ctx: launch.LaunchContext, result: RunResult) -> None:
    """The files the job's processes mapped in any run so far, measured, resumed or known from
    elsewhere (`run_sweep`'s `known_runs`): what a disk run reads back first if they were
    evicted (`libmaps.warm_missing`)."""
    if result.io.mapped_files:
        ctx.library_files = tuple(sorted({*ctx.library_files, *result.io.mapped_files}))


def _progress_line(spec: RunSpec, result: RunResult, measured: int, elapsed_s: float,
                   remaining: int) -> str:
    """`cached-cpus1: 40.0 samples/s [38.2, 41.5] (12 s), ETA 0m30s`."""
    rate = runrate.run_rate(result, interval=True)
    what = f"{result.status}: {result.error}"
    if rate.rate_sps:
        what = f"{rate.rate_sps:.1f} samples/s"
        if rate.rate_sps_low is not None:
            what += f" [{rate.rate_sps_low:.1f}, {rate.rate_sps_high:.1f}]"
    short = measured_window.short_run(result)
    if short is not None:
        what += f"; {short_text(short)}"
    eta_s = elapsed_s / measured * remaining
    return (f"{spec.run_id}: {what} ({result.duration_s:.0f} s), "
            f"ETA {eta_s // 60:.0f}m{eta_s % 60:02.0f}s")
