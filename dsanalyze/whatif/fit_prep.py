"""The workers' prep: c_prep and its contention law, and the size-following share.

c(k) = c_prep (1 + contention (k - 1)) for k busy cores: c_prep is solved on
each loader run and each prep-bound cached run (a cached run under
`SETTINGS.prep_bound` of its compute rate), keyed by its busy cores, and the
law fitted across them in log; with one busy-core count, the contention of
the machine's parallel decode probe (else 0). A law outside its bounds
(`whatif/bounds.py`) falls back to the fewest cores alone, then to the
workers' own per-transform timing. The image loader's (read + decode) share
of the timed prep follows each file's bytes.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

from dsanalyze.analysis import runrate, transforms
from dsanalyze.config import Mode
from dsanalyze.records import LOADER_STAGE, CpuScaling, RunResult
from dsanalyze.settings import SETTINGS
from dsanalyze.whatif import bounds, pipeline
from dsanalyze.whatif.fitruns import by_mode, job_key
from dsanalyze.whatif.laws import (
    compute_sps,
    contention_factor,
    gang_step,
    run_config,
    workers_for,
)
from dsanalyze.whatif.model import HeldOut, Model, Param, run_cpus, run_layout
from dsanalyze.whatif.provenance import (
    Contention,
    Dropped,
    Fixed,
    PrepAlone,
    PrepLaw,
    PrepUnfitted,
    ProbedContention,
    Reason,
    SizeShare,
)
from dsanalyze.whatif.rates import mean_rates


def _solve_prep(model: Model, run: RunResult, mode: Mode) -> float:
    cfg, layout = run_config(model, HeldOut.of(run)).with_cache(), run_layout(run)
    target = runrate.run_rate(run).rate_sps or 0.0
    return pipeline.solve(lambda x: mean_rates(model, cfg, layout, mode, None,
                                               prep_cpu_s=x).rate_sps, target, 1e-6, 10.0)


def _prep_law(points: dict[int, float], probed: float | None = None) -> tuple[float, float]:
    """(c_prep, contention) of c(k) = c_prep (1 + contention (k - 1)), least squares in log;
    with one busy-core count, the contention `probed` on the machine (else 0)."""
    if len(points) == 1:
        k, x = next(iter(points.items()))
        alpha = probed or 0.0
        return x / (1 + alpha * (k - 1)), alpha

    def sse(alpha: float) -> float:
        c0 = math.exp(statistics.fmean(math.log(x / (1 + alpha * (k - 1)))
                                       for k, x in points.items()))
        return sum(math.log(c0 * (1 + alpha * (k - 1)) / x) ** 2 for k, x in points.items())
    alpha = pipeline.minimize(sse, 1e-4, 10.0)
    alpha = 0.0 if sse(0.0) <= sse(alpha) else alpha
    c0 = math.exp(statistics.fmean(math.log(x / (1 + alpha * (k - 1))) for k, x in points.items()))
    return c0, alpha


def _beyond(points: dict[int, float], alpha: float, probed: float | None) -> tuple[int, float]:
    """Where the law was fitted across busy-core counts, its reach (the most busy cores) and
    what each core beyond adds: the machine's parallel decode probe's contention, at most the
    fitted one (0 without a probe). A slope fitted between 1 and 2 busy cores is no law for 8:
    on an H200 machine (16 cores, a pytorch/examples-style script on cuda) the rates at 1 and 2
    CPUs fitted 0.123 a core, which made 8 cores' prep 1.86x one core's; the workers' own CPU
    clocks read 1.09x at 2 and 4 busy cores and 1.27x at 8, and the probe 0.000-0.013 a core."""
    if len(points) < 2 or alpha <= 0:
        return 0, 0.0
    return max(points), min(alpha, probed or 0.0)


def _prep_points(model: Model, loaders: list[RunResult], cached: list[RunResult]
                 ) -> tuple[dict[int, float], list[str]]:
    """Worker CPU per sample solved on each loader run and each prep-bound cached run of
    a job and CPU count without a loader run (every job of the prefix: they share the data
    and the transforms), keyed by its busy cores: the points the one law is fitted to."""
    points: dict[int, list[float]] = {}
    runs = []
    with_loader = {(job_key(r), run_cpus(r)) for r in loaders}
    for r in loaders + [r for r in cached if (job_key(r), run_cpus(r)) not in with_loader]:
        cfg = run_config(model, HeldOut.of(r))
        ranks = cfg.nproc or model.ranks
        if r.mode is Mode.CACHED and not (model.step_s and (runrate.run_rate(r).rate_sps or 0)
                                          < SETTINGS.prep_bound * compute_sps(model, cfg)):
            continue
        k = min(cfg.cpus, ranks * max(1, cfg.workers or 0))
        points.setdefault(k, []).append(_solve_prep(replace(model, contention=0.0), r, r.mode))
        runs.append(r.run_id)
    return {k: statistics.median(v) for k, v in points.items()}, runs


def fit_size_share(model: Model, results: list[RunResult]) -> tuple[Model, list[Param]]:
    """The image loader's (read + decode) share of a sample's timed prep, from the
    per-transform timing of the loader runs (else the cached runs): that share of each
    sample's prep scales with its file's bytes, the rest is the same for every sample."""
    runs = by_mode(results, Mode.LOADER) or by_mode(results, Mode.CACHED)
    shares, rows = [], []
    for r in runs:
        table = transforms.run_table(r)
        total = transforms.sum_s_per_sample(table)
        if total > 0:
            rows = table
            shares.append(sum(x["mean_s_per_sample"] for x in table
                              if x["stage"] == LOADER_STAGE) / total)
    if not shares:
        return model, [Param("prep_size_share", 0.0, "", (), Fixed(Reason.NO_TRANSFORM_TIMING))]
    share = statistics.median(shares)
    steps = tuple((x["name"], x["mean_s_per_sample"]) for x in rows)
    return replace(model, size_share=share), [Param(
        "prep_size_share", share, "", tuple(r.run_id for r in runs if transforms.run_table(r)),
        SizeShare(len(shares), steps))]


def _probe(results: list[RunResult]) -> tuple[CpuScaling, list[str]] | None:
    """The machine's parallel decode probe the runs recorded (one per sweep), and its runs."""
    found = [(s, r.run_id) for r in results
             if (s := CpuScaling.of_run(r)) is not None and s.contention is not None]
    if not found:
        return None
    return found[0][0], [i for _, i in found]


def fit_cpu(model: Model, results: list[RunResult]) -> tuple[Model, list[Param]]:
    """c_prep and its contention law, given the main process's CPU per iteration."""
    loaders, cached = by_mode(results, Mode.LOADER), by_mode(results, Mode.CACHED)
    # until `fit_alone` solves them again
    model = replace(model, prep_alone_cpu_s=None, prep_alone_by_workers=())
    points, prep_runs = _prep_points(model, loaders, cached)
    probe = _probe(results)
    dropped = None
    if points:
        probed = probe[0].contention if probe else None
        c0, alpha = _prep_law(points, probed)
        if not bounds.CONTENTION.holds(alpha):
            dropped = bounds.CONTENTION.dropped(alpha, prep_runs)
            c0, alpha = _prep_law({k: x for k, x in points.items() if k == min(points)})
        if not bounds.PREP_CPU_S.holds(c0):
            return _prep_from_timing(model, results, bounds.PREP_CPU_S.dropped(c0, prep_runs))
        reach, beyond = _beyond(points, alpha, probed)
        model = replace(model, prep_cpu_s=c0, contention=alpha,
                        contention_probed=len(points) == 1 and probe is not None,
                        contention_cores=reach, contention_beyond=beyond)
    params = [_prep_param(model, prep_runs, sorted(points), cached, dropped)]
    model, alone = fit_alone(model, cached)
    params += alone
    if model.contention_probed and probe:
        scaling, ids = probe
        params.append(Param("contention", model.contention, "", tuple(ids), ProbedContention(
            scaling.work, scaling.solo_cpu_s or 0.0, scaling.parallel_cpu_s or 0.0,
            scaling.cpus)))
    return model, params


def fit_alone(model: Model, cached: list[RunResult]) -> tuple[Model, list[Param]]:
    """A step on the CPU of one thread a rank (`laws.gang_step` false: at as many CPUs as
    ranks) takes turns with the workers on the cores, so every CPU cost of an iteration adds
    to it, however near its compute rate the run is; beside a step of several threads (a
    gang) every CPU cost is slowed (`fit_loop.fit_stretch`), and c_prep's points from such
    runs outvote a one-thread run's. The prep where the step takes turns: solved on each such
    cached run given the main process (on one busy core by the contention law), median;
    None where there is none, or where it lies above `bounds.PREP_CPU_S` (c_prep used);
    `fit_cpu`, its caller, clears the one fitted before.

    A median under the bound's floor is held at the floor: such runs were as fast as the
    step and the main process alone allow, or faster (the one synthetic run that gave the
    step at that CPU count was slow: on the 2-core VM one script's 1-CPU synthetic runs lay
    at 82-105 samples/s from sweep to sweep), so the prep there is at most nil, and the floor
    is the nearest the law comes to them. c_prep, fitted on the gang runs, is several times
    larger there (2.6 against 1.5-3.9 ms a sample solved on other sweeps' 1-CPU runs of the
    same script) and predicted such a run 26% under its own rate (bench25)."""
    if not model.step_on_cpu or model.prep_cpu_s is None:
        return model, []
    alone = [(r, cfg) for r in cached if runrate.run_rate(r).rate_sps
             and not gang_step(model, cfg := run_config(model, HeldOut.of(r)))]
    if not alone:
        return model, []
    runs = [r for r, _ in alone]
    points = [_solve_prep(model, r, Mode.CACHED) / contention_factor(model, cfg)
              for r, cfg in alone]
    value, param = _alone_param("prep_alone_cpu_s_per_sample", points,
                                tuple(r.run_id for r in runs))
    if value is None:
        return model, [param]
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (_, cfg) in enumerate(alone):
        groups.setdefault((cfg.cpus, workers_for(model, cfg)), []).append(i)
    each = [(ck, _alone_param(f"prep_alone_at_{ck[0]}_cpus_{ck[1]}_workers",
                              [points[i] for i in v], tuple(runs[i].run_id for i in v)))
            for ck, v in sorted(groups.items())]
    by_workers = tuple((c, k, x) for (c, k), (x, _) in each if x is not None)
    return replace(model, prep_alone_cpu_s=value, prep_alone_by_workers=by_workers), [
        param, *(p for _, (_, p) in each)]


def _alone_param(name: str, points: list[float], ids: tuple[str, ...]
                 ) -> tuple[float | None, Param]:
    """The median of `points`, held at `bounds.PREP_CPU_S`'s floor under it, None (dropped,
    named) above its ceiling; with its parameter."""
    value = statistics.median(points)
    how = PrepAlone(len(points), min(points), max(points))
    if value < bounds.PREP_CPU_S.low:
        value, how = bounds.PREP_CPU_S.low, replace(how, floored=True)
    if not bounds.PREP_CPU_S.holds(value):
        return None, Param(name, None, "s", ids, replace(
            how, dropped=bounds.PREP_CPU_S.dropped(value, ids)))
    return value, Param(name, value, "s", ids, how)


def _prep_from_timing(model: Model, results: list[RunResult], dropped: Dropped
                      ) -> tuple[Model, list[Param]]:
    """c_prep where the rates did not determine it: the workers' own per-transform timing
    (the sum of the timed steps per sample, median over the loader or cached runs), no
    contention; else not measured. `dropped`: the fitted value and its runs."""
    runs = [r for r in by_mode(results, Mode.LOADER) or by_mode(results, Mode.CACHED)
            if transforms.run_table(r)]
    timed = [transforms.sum_s_per_sample(transforms.run_table(r)) for r in runs]
    if not timed or not bounds.PREP_CPU_S.holds(statistics.median(timed)):
        return replace(model, prep_cpu_s=None), [Param(
            "prep_cpu_s_per_sample", None, "s", (), PrepUnfitted(dropped))]
    value = statistics.median(timed)
    return replace(model, prep_cpu_s=value, contention=0.0, contention_probed=False), [Param(
        "prep_cpu_s_per_sample", value, "s", tuple(r.run_id for r in runs),
        PrepUnfitted(dropped, len(timed)))]


def _prep_param(model: Model, runs: list[str], cores: list[int], cached: list[RunResult],
                dropped: Dropped | None = None) -> Param:
    if model.prep_cpu_s is None:
        ids = tuple(r.run_id for r in cached)
        return Param("prep_cpu_s_per_sample", None, "s", ids, Fixed(Reason.PREP_COMPUTE_BOUND))
    law = (Contention.PROBED if model.contention_probed else
           Contention.FITTED if model.contention else
           Contention.ONE_COUNT if len(cores) == 1 else Contention.LINEAR)
    if dropped:  # the law refitted on the fewest busy cores alone, contention 0
        law = Contention.REFITTED
    return Param("prep_cpu_s_per_sample", model.prep_cpu_s, "s", tuple(runs),
                 PrepLaw(model.prep_cpu_s, law, model.contention, tuple(cores), dropped,
                         model.contention_beyond))
