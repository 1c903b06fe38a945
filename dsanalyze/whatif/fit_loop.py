"""The main process and the work around the job, measured on the runs' timelines.

The main process's CPU per iteration and its delay to take a ready batch
(the cached runs), the workers' start-up (the first iteration's wait beyond
the simulated one), and the CPU outside the job's cgroup per sample (the
machine-wide samples; a run over `SETTINGS.foreign_factor` x every run's
median is another process's load and is set aside).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

from dsanalyze.analysis import interference, runrate
from dsanalyze.config import Mode
from dsanalyze.records import RunResult
from dsanalyze.settings import SETTINGS
from dsanalyze.whatif import fit_prep, fit_restart, pipeline
from dsanalyze.whatif.fitruns import by_mode, cores_and_workers
from dsanalyze.whatif.laws import compute_sps, gang_step, run_config, step_for
from dsanalyze.whatif.model import HeldOut, Model, Param, run_layout
from dsanalyze.whatif.provenance import (
    CpuStretch,
    Fixed,
    MainLoop,
    OutsideWork,
    Reason,
    ReceiveWait,
)
from dsanalyze.whatif.rates import predict_run, simulate_run, solve_stretch


def _loop_s(run: RunResult) -> float | None:
    """The main process's own time per iteration, wall: (iteration - wait) over the run's
    steady iterations (median), the step included."""
    r0 = run.ranks[0]
    rest = [t - w for t, w in zip(r0.iter_s[r0.warmup:], r0.wait_s[r0.warmup:])]
    return statistics.median(rest) if rest else None


def _compute_bound(model: Model, run: RunResult) -> bool:
    """A cached run at least `SETTINGS.prep_bound` of its job's compute rate G: its loader is
    ahead."""
    cfg = run_config(model, HeldOut.of(run))
    g = compute_sps(model, cfg)
    return (runrate.run_rate(run).rate_sps or 0.0) >= SETTINGS.prep_bound * g


def _loop_share(model: Model, run: RunResult) -> float:
    """The main process's CPU per iteration on a cached run in closed form: (iteration -
    wait) less the step, times the share of a core it gets among the job's busy processes
    (processor sharing); a step on the CPU taken as slowed by the workers as the loop's own
    work is (the seed of `_solve_main`, which the gang law then corrects)."""
    cfg = run_config(model, HeldOut.of(run))
    procs = (cfg.nproc or model.ranks) * (max(0, cfg.workers or 0) + 1)
    share = min(1.0, cfg.cpus / procs)
    loop, step = _loop_s(run) or 0.0, step_for(model, cfg)
    return max(0.0, loop * share - step if model.step_on_cpu else (loop - step) * share)


def _simulated_loop_s(model: Model, run: RunResult) -> float:
    """The median (iteration - wait) over the steady iterations of the cached run simulated."""
    held = HeldOut.of(run)
    tl = simulate_run(model, run_config(model, held), held.layout, Mode.CACHED)
    w = held.layout.warmup
    return statistics.median(t - x for t, x in zip(tl.iter_s[w:], tl.wait_s[w:]))


def _solve_main(model: Model, run: RunResult) -> float:
    """The main process's CPU per iteration that makes the simulated cached run's loop
    (iteration - wait, the step beside the workers by the gang law) the measured one."""
    target = _loop_s(run) or 0.0
    if _simulated_loop_s(replace(model, main_cpu_s=0.0), run) >= target:
        return 0.0  # the step beside the workers takes the whole loop
    return pipeline.solve(lambda x: -_simulated_loop_s(replace(model, main_cpu_s=x), run),
                          -target, 1e-6, target)


def fit_main(model: Model, results: list[RunResult]) -> tuple[Model, list[Param]]:
    """The main process, measured on the cached runs' timelines: the delay to take a ready
    batch, the median wait of the compute-bound ones (their loader is ahead); and its CPU
    per iteration, median over the runs: in closed form (`_loop_share`), or where the step
    runs on the CPU and c_prep is known, solved on each run's simulated loop (`_solve_main`:
    the cached loop holds the step slowed by the workers, which the simulation has)."""
    cached = [r for r in by_mode(results, Mode.CACHED) if _loop_s(r) is not None]
    if model.step_s is None or not cached:
        why = Fixed(Reason.MAIN_UNMEASURED)
        return model, [Param("main_cpu_s_per_iter", 0.0, "s", (), why),
                       Param("receive_s", 0.0, "s", (), why)]
    ahead = [r for r in cached if _compute_bound(model, r)]
    waits = [statistics.median(r.ranks[0].wait_s[r.ranks[0].warmup:]) for r in ahead]
    model = replace(model, receive_s=statistics.median(waits) if waits else 0.0)
    simulated = model.step_on_cpu and model.prep_cpu_s is not None
    points = [_solve_main(model, r) if simulated else _loop_share(model, r) for r in cached]
    model = replace(model, main_cpu_s=statistics.median(points))
    return model, [
        Param("main_cpu_s_per_iter", model.main_cpu_s, "s", tuple(r.run_id for r in cached),
              MainLoop(len(points), min(points), max(points))),
        Param("receive_s", model.receive_s, "s", tuple(r.run_id for r in ahead),
              ReceiveWait(len(ahead), min(waits), max(waits)) if waits else
              Fixed(Reason.NO_COMPUTE_BOUND_RUN))]


def fit_main_and_prep(model: Model, results: list[RunResult]) -> tuple[Model, list[Param]]:
    """The main process and c_prep with its law (`fit_prep.fit_cpu`), fitted together: a
    prep-bound cached run's rate gives c_prep given the main process's CPU, and where the
    step runs on the CPU its loop gives the main process's CPU given c_prep (the workers
    that slow the step). The main process in closed form first, c_prep given it; then,
    for a step on the CPU, the main process simulated given c_prep, and c_prep again.
    Workers that start again at every epoch: their restart CPU (`fit_restart`, on the
    waits, given the start-up) and then both again, which the rates had taken for c_prep."""
    model, main = fit_main(model, results)
    model, prep = fit_prep.fit_cpu(model, results)
    if model.step_on_cpu and model.prep_cpu_s is not None:
        model, main = fit_main(model, results)
        model, prep = fit_prep.fit_cpu(model, results)
    model, restart = fit_restart.fit(model, results)
    if model.restart_cpu_s:
        model, main = fit_main(model, results)
        model, prep = fit_prep.fit_cpu(model, results)
        model, restart_main = fit_restart.fit_main(model, results)
        restart += restart_main
    return model, main + prep + restart


def _stretch_of(model: Model, run: RunResult) -> float:
    """The stretch of the CPU work at `run`'s CPU count that makes its simulated rate its
    measured one: a secant on log rate against log stretch, from 1, whose first step takes
    the rate as inversely proportional to the stretch (the CPU work is the whole iteration)
    and whose later ones the slope the steps so far measured (an epoch's start, the workers
    forked again, is less of it than the rest: each step scaled by predicted / measured
    alone stopped 3.5% short of a stretch of 0.72 in three)."""
    measured = runrate.run_rate(run).rate_sps or 0.0
    (cpus, workers) = cores_and_workers(model, run)

    def excess(s: float) -> float:  # ln(predicted at stretch s / measured)
        stretched = replace(model, cpu_stretch_by_cpus=((cpus, workers, s),))
        return math.log(predict_run(stretched, HeldOut.of(run)).rate_sps / measured)
    return solve_stretch(excess, 1.0, SETTINGS.stretch_steps)


def fit_stretch(model: Model, results: list[RunResult]) -> tuple[Model, list[Param]]:
    """A step on the CPU beside its loader: its threads, the workers and the main process
    share the cores in ways the gang law only averages (spinning threads, a tail of held
    steps, the workers' restarts: docs/design.md), which the cached runs at each CPU count
    measure. Per CPU count and worker count, the stretch of the job's CPU work (step, main
    process, workers) that makes each cached run's simulated rate its measured one (median
    of its runs); another worker count at a fitted CPU count takes the nearest fitted one's,
    a CPU count with no cached run none (1), as a step off the CPU (whose sharing the law
    has)."""
    if not model.step_on_cpu or model.prep_cpu_s is None:
        return model, []
    cached = [r for r in by_mode(results, Mode.CACHED) if runrate.run_rate(r).rate_sps
              and gang_step(model, run_config(model, HeldOut.of(r)))]
    if not cached:
        return model, []
    groups: dict[tuple[int, int], list[RunResult]] = {}
    for r in cached:
        groups.setdefault(cores_and_workers(model, r), []).append(r)
    found = {ck: [_stretch_of(model, r) for r in runs] for ck, runs in sorted(groups.items())}
    stretch = tuple((c, k, statistics.median(v)) for (c, k), v in found.items())
    busy = {ck: statistics.median(b) for ck, runs in groups.items()
            if (b := [x for r in runs if (x := runrate.run_rate(r).cores_busy) is not None])}
    return replace(model, cpu_stretch_by_cpus=stretch,
                   cores_busy_by_cpus=tuple((c, k, b) for (c, k), b in sorted(busy.items()))), [
        Param(f"cpu_stretch_at_{c}_cpus_{k}_workers", s, "x",
              tuple(r.run_id for r in groups[c, k]),
              CpuStretch(c, k, len(found[c, k]), min(found[c, k]), max(found[c, k]),
                         busy.get((c, k))))
        for c, k, s in stretch]


def fit_startup(model: Model, results: list[RunResult]) -> tuple[Model, list[Param]]:
    """The workers' start-up: the first iteration's wait beyond the simulated one."""
    runs = by_mode(results, Mode.LOADER)
    runs += by_mode(results, Mode.CACHED) if model.step_s is not None else []
    if not runs or not model.prep_cpu_s:
        return model, [Param("startup_s", 0.0, "s", (), Fixed(Reason.NO_STARTUP_RUN))]
    bare = replace(model, startup_s=0.0)
    extra = [r.ranks[0].wait_s[0] - simulate_run(bare, run_config(model, HeldOut.of(r)),
                                                 run_layout(r), r.mode).wait_s[0] for r in runs]
    value = max(0.0, statistics.median(extra))
    return replace(model, startup_s=value), [Param(
        "startup_s", value, "s", tuple(r.run_id for r in runs), Fixed(Reason.STARTUP_WAIT))]


def _drop_foreign(found: dict[str, list[tuple[str, float]]]
                  ) -> tuple[dict[str, list[tuple[str, float]]], list[tuple[str, float]]]:
    """The runs whose outside work is the job's: a run where it exceeds
    `SETTINGS.foreign_factor` x the median of every run's (another process busy on a core
    the job did not use, which no interference check sees at fewer CPUs than the
    machine's) is set aside, and named."""
    every = [x for v in found.values() for _, x in v]
    if len(every) < 3:
        return found, []
    limit = SETTINGS.foreign_factor * statistics.median(every)
    kept = {k: [(i, x) for i, x in v if x <= limit] for k, v in found.items()}
    return kept, sorted((i, x) for v in found.values() for i, x in v if x > limit)


def _background_cores(results: list[RunResult]) -> float:
    """Cores busy outside the job's cgroup that the job's data does not cause: the median over
    the synthetic runs (no loader: no reads, no decode, no limiter) of their outside work
    per second. On a machine shared with other tenants that is their load, which a run's
    outside work per sample would otherwise charge to the job."""
    cores = [x * rate for r in by_mode(results, Mode.SYNTHETIC)
             if (x := interference.outside_cpu_s_per_sample(r)) is not None
             and (rate := runrate.run_rate(r).rate_sps)]
    return statistics.median(cores) if cores else 0.0


def fit_others(model: Model, results: list[RunResult]) -> tuple[Model, list[Param]]:
    """The work outside the job's cgroup per sample (`interference.outside_cpu_s_per_sample`),
    median over the loader and cached runs, and over the disk runs (their kernel I/O work
    besides; the others' figure where none recorded it), with the machine's online CPUs."""
    machine = [m for r in results if (m := (r.io.interference or {}).get("machine_cpus"))]
    background = _background_cores(results)
    found = {mode: [(r.run_id, max(0.0, x - background / rate)) for r in results
                    if r.ok and r.ranks and r.mode in modes
                    and (x := interference.outside_cpu_s_per_sample(r)) is not None
                    and (rate := runrate.run_rate(r).rate_sps)]
             for mode, modes in (("cached", (Mode.LOADER, Mode.CACHED)), ("disk", (Mode.DISK,)))}
    found, foreign = _drop_foreign(found)
    if not machine or not (found["cached"] or found["disk"]):
        return model, [Param("others_cpu_s_per_sample", 0.0, "s", (),
                             Fixed(Reason.OTHERS_PREDATE))]
    value = {k: statistics.median(x for _, x in v) if v else None for k, v in found.items()}
    mem = value["cached"] if value["cached"] is not None else value["disk"]
    disk = value["disk"] if value["disk"] is not None else mem
    model = replace(model, machine_cpus=max(machine), others_cpu_s_per_sample=mem,
                    others_disk_cpu_s_per_sample=disk)
    return model, [Param(f"others_cpu_s_per_sample[{k}]", v, "s",
                         tuple(i for i, _ in found[k] or found["cached"]),
                         OutsideWork(max(machine), background, len(found[k]),
                                     SETTINGS.foreign_factor, tuple(foreign)) if found[k] else
                         Fixed(Reason.OTHERS_FROM_CACHED))
                   for k, v in (("cached", mem), ("disk", disk))]
