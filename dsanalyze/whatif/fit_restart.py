"""Workers that start again at every epoch: the CPU each spends at each epoch start after
the first, fitted on the first waits of the cached runs' epochs (`fit`); and the main
process's share, fitted on their first iterations given it (`fit_main`).

A DataLoader without persistent workers forks its workers again at every epoch. Once
training has started the main process's heap has grown, and a worker forked from it
copies the pages it touches: on the scripts bench (`train_examples.py`, 1 CPU) each
worker forked after the first epoch took about 0.2 s of a core and 26 000 page faults,
against 5 000 in the first epoch, whatever its share of the samples. The main process
waits for it in order: the third epoch's first wait was 250-350 ms with 1 worker and
490-760 ms with 2 (every mode, four sweeps), 255-340 ms with either at 2 CPUs. Per worker
and epoch, not per sample: the rates alone take it for prep CPU, which a throttle hides
behind its reads (docs/design.md, "What is implemented").

The main process pays its share in its first iteration, after the wait: its own writes to
the heap it now shares with the new workers copy the pages, once an epoch whatever their
number. On the scripts bench's examples runs the epoch's first iteration is 6-9 times a
steady one with 1 worker and about twice that with 4 (at 1 CPU: 0.28-0.47 s, then
0.55-1.07 s), its wait only 0.06-0.30 s: the waits alone gave 0.05-0.11 s a worker, the
iterations 0.21-0.25 s more in the main process. Fitted on the iterations as a worker's
cost alone (no share of the main's), 3 workers at 1 CPU were predicted 24% slow.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import replace

from dsanalyze.config import Mode
from dsanalyze.records import RunResult
from dsanalyze.whatif import bounds, pipeline
from dsanalyze.whatif.fitruns import by_mode
from dsanalyze.whatif.laws import run_config, workers_for
from dsanalyze.whatif.model import HeldOut, Model, Param
from dsanalyze.whatif.provenance import Fixed, MainRestart, Reason, WorkerRestart
from dsanalyze.whatif.rates import simulate_run


def _restarts(model: Model, run: RunResult) -> bool:
    """The run's workers start again inside its steady window: workers, and an epoch start
    after the first beyond the warm-up."""
    held = HeldOut.of(run)
    return workers_for(model, run_config(model, held)) > 0 and held.layout.epochs >= 2 \
        and held.layout.iters > held.layout.batches > held.layout.warmup


def _restart_runs(model: Model, results: list[RunResult]) -> list[RunResult]:
    """The loader and cached runs whose workers start again in their steady window."""
    return [r for r in by_mode(results, Mode.LOADER) + by_mode(results, Mode.CACHED)
            if _restarts(model, r)]


def _start_waits_s(wait_s: Sequence[float], epoch: Sequence[int], warmup: int) -> float:
    """The first waits (or iterations) of the epochs after the first, in the steady window,
    summed."""
    return sum(w for i, (w, e) in enumerate(zip(wait_s, epoch))
               if i >= warmup and i and e != epoch[i - 1])


def _simulated(model: Model, run: RunResult) -> pipeline.Timeline:
    held = HeldOut.of(run)
    return simulate_run(model, run_config(model, held), held.layout, run.mode)


def _solve(model: Model, run: RunResult, share: str = "restart_cpu_s",
           series: str = "wait_s") -> float:
    """The restart CPU `share` (each worker's, or the main process's) that makes the run's
    simulated `series` at the first iterations of its steady epochs (their waits, or the
    whole iterations) its measured one, each less the first epoch's own start beyond the
    simulated one (the workers' start-up, which every epoch pays); 0 where the simulation
    takes as long."""
    r0, warmup = run.ranks[0], HeldOut.of(run).layout.warmup
    bare = replace(model, startup_s=0.0, **{share: 0.0})
    first = _simulated(bare, run)
    starts = sum(1 for i in range(max(1, warmup), len(r0.epoch))
                 if r0.epoch[i] != r0.epoch[i - 1])
    target = _start_waits_s(getattr(r0, series), r0.epoch, warmup) - \
        starts * (r0.wait_s[0] - first.wait_s[0])

    def at(x: float) -> float:
        tl = first if x == 0 else _simulated(replace(bare, **{share: x}), run)
        return _start_waits_s(getattr(tl, series), tl.epoch, warmup)
    if at(0.0) >= target:
        return 0.0
    return pipeline.solve(lambda x: -at(x), -target, 1e-4, bounds.RESTART_CPU_S.high)


def fit_main(model: Model, results: list[RunResult]) -> tuple[Model, list[Param]]:
    """The main process's CPU at each epoch start after the first (its writes to the heap
    the new workers share copy its pages: once an epoch, whatever their number), median
    over the runs `fit` used, given the workers' restart; 0 where they have none."""
    runs = _restart_runs(model, results)
    if model.persistent_workers or not model.restart_cpu_s or not runs:
        return replace(model, restart_main_cpu_s=0.0), []
    # (run, value), not keyed by run id: runs of one id from two prefixes stay apart
    solved = [(r, _solve(model, r, "restart_main_cpu_s", "iter_s")) for r in runs]
    # a run solved at the solver's limit did not determine it (its first iterations longer
    # than any restart makes them): left out, named
    over = [r.run_id for r, x in solved if x >= bounds.RESTART_CPU_S.high]
    found = [(r.run_id, x) for r, x in solved if x < bounds.RESTART_CPU_S.high]
    dropped = bounds.RESTART_CPU_S.dropped(bounds.RESTART_CPU_S.high, over) if over else None
    if not found:
        return replace(model, restart_main_cpu_s=0.0), [Param(
            "restart_main_cpu_s", 0.0, "s", tuple(over), MainRestart(0, 0.0, 0.0, dropped))]
    values = [x for _, x in found]
    value = statistics.median(values)
    return replace(model, restart_main_cpu_s=value), [Param(
        "restart_main_cpu_s", value, "s", tuple(i for i, _ in found), MainRestart(
            len(found), min(values), max(values), dropped))]


def fit(model: Model, results: list[RunResult]) -> tuple[Model, list[Param]]:
    """Each worker's CPU at each epoch start after the first, median over the loader and
    cached runs whose workers start again in their steady window, given c_prep and the
    main process (the caller fits those again with it); 0 for persistent workers."""
    if model.persistent_workers or model.prep_cpu_s is None:
        reason = Reason.WORKERS_KEPT if model.persistent_workers else Reason.NO_RESTART_RUN
        return replace(model, restart_cpu_s=0.0), [
            Param("restart_cpu_s", 0.0, "s", (), Fixed(reason))]
    runs = _restart_runs(model, results)
    if not runs:
        return replace(model, restart_cpu_s=0.0), [
            Param("restart_cpu_s", 0.0, "s", (), Fixed(Reason.NO_RESTART_RUN))]
    found = [_solve(model, r) for r in runs]
    value = statistics.median(found)
    ids = tuple(r.run_id for r in runs)
    if value >= bounds.RESTART_CPU_S.high:
        return replace(model, restart_cpu_s=0.0), [Param(
            "restart_cpu_s", 0.0, "s", ids, WorkerRestart(
                len(found), min(found), max(found), bounds.RESTART_CPU_S.dropped(value, ids)))]
    return replace(model, restart_cpu_s=value), [Param(
        "restart_cpu_s", value, "s", ids, WorkerRestart(len(found), min(found), max(found)))]
