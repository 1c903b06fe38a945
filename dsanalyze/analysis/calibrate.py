"""Fitting the what-if model to stored runs: each parameter measured or calibrated.

`fit` reads the job's layout from the runs, then fits, in order: the step
time (synthetic runs), the worker CPU per sample for each CPU count and the
main process's CPU per iteration (loader and cached runs), the DataLoader
start-up, the CPU per byte read from unthrottled storage, the bandwidth each
throttle really gives (cold epochs) and the page cache runs had beyond their
budget. Calibrations minimise the squared log error of the steady rates that
`model.predict_run` gives for the runs. Every parameter names its runs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import replace

from dsanalyze.analysis import cachesim, pipeline, stalls
from dsanalyze.analysis.model import (
    CACHE_BINDS,
    PREP_BOUND,
    Config,
    Model,
    Param,
    effective_cache,
    file_sizes,
    mean_rates,
    predict_run,
    run_cpus,
    run_layout,
    simulate_run,
)
from dsanalyze.config import Mode, format_bytes
from dsanalyze.errors import ConfigError
from dsanalyze.store import RunResult


def _by_mode(results: list[RunResult], mode: Mode) -> list[RunResult]:
    return [r for r in results if r.ok and r.mode is mode and r.ranks]


def _fit_step(results: list[RunResult], per_iter: int) -> tuple[float | None, Param]:
    runs = _by_mode(results, Mode.SYNTHETIC)
    rates = [stalls.run_rate(r).rate_sps for r in runs]
    rates = [x for x in rates if x]
    if not rates:
        return None, Param("ingest_sps", None, "samples/s", (), "not measured: no synthetic run")
    g = statistics.median(rates)
    return per_iter / g, Param("ingest_sps", g, "samples/s", tuple(r.run_id for r in runs),
                               f"median of {len(rates)} synthetic run(s): step "
                               f"{per_iter / g * 1e3:.2f} ms per iteration")


def _solve_prep(model: Model, run: RunResult, mode: Mode) -> float:
    cfg, layout = Config(run_cpus(run)), run_layout(run)
    target = stalls.run_rate(run).rate_sps or 0.0
    return pipeline.solve(lambda x: mean_rates(model, cfg, layout, mode, None,
                                               prep_cpu_s=x).rate_sps, target, 1e-6, 10.0)


def _fit_cpu(model: Model, results: list[RunResult]) -> tuple[Model, list[Param]]:
    """Worker CPU per sample for each CPU count, and the main process's CPU per iteration."""
    loaders = {run_cpus(r): r for r in _by_mode(results, Mode.LOADER)}
    cached = {run_cpus(r): r for r in _by_mode(results, Mode.CACHED)}
    main_runs: list[str] = []
    for _ in range(2 if loaders else 1):  # the two fits depend on each other a little
        prep = {c: _solve_prep(model, r, Mode.LOADER) for c, r in loaders.items()}
        model = replace(model, prep_cpu_s=prep)
        pairs = [c for c in cached if c in loaders and model.step_s is not None]
        if pairs:
            runs = [cached[c] for c in pairs]
            main = pipeline.minimize(lambda x, m=model, runs=runs: _log_error(
                replace(m, main_cpu_s=x), runs), 1e-6, 0.1)
            main_runs = [cached[c].run_id for c in pairs] + [loaders[c].run_id for c in pairs]
            model = replace(model, main_cpu_s=main)
    g = model.step_s and model.ranks * model.batch_size / model.step_s
    for c, r in cached.items():
        rate = stalls.run_rate(r).rate_sps or 0.0
        if c not in loaders and g and rate < PREP_BOUND * g:
            model = replace(model, prep_cpu_s={**model.prep_cpu_s,
                                               c: _solve_prep(model, r, Mode.CACHED)})
    params = [_prep_param(model, c, loaders.get(c) or cached[c])
              for c in sorted(cached.keys() | loaders.keys())]
    how = (f"calibrated: cached against loader runs at the same CPUs ({len(main_runs) // 2} "
           "pair(s))" if main_runs else
           "not measured (needs a loader and a cached run with the same CPUs): taken as 0")
    params.append(Param("main_cpu_s_per_iter", model.main_cpu_s, "s", tuple(main_runs), how))
    return model, params


def _prep_param(model: Model, cpus: int, run: RunResult) -> Param:
    name = f"prep_sps[cpus={cpus}]"
    if cpus not in model.prep_cpu_s:
        rate = stalls.run_rate(run).rate_sps or 0.0
        return Param(name, None, "samples/s", (run.run_id,),
                     f"not measured: {run.run_id} is compute-bound, so prep is faster than "
                     f"{rate:.1f} samples/s; run harness.py --modes loader")
    tp = model.prep_cpu_s[cpus]
    cores = min(cpus, model.ranks * max(1, model.workers))
    return Param(name, cores / tp, "samples/s", (run.run_id,),
                 f"{run.mode.value} run: {tp * 1e3:.2f} ms of worker CPU per sample; "
                 f"{model.ranks * max(1, model.workers)} worker(s) use at most {cores} core(s)")


def _log_error(model: Model, runs: list[RunResult]) -> float:
    """Sum of squared log errors of the predicted steady rates: the calibration's objective."""
    return sum(math.log(predict_run(model, r).rate_sps / (stalls.run_rate(r).rate_sps or 1.0)) ** 2
               for r in runs)


def _fit_startup(model: Model, results: list[RunResult]) -> tuple[Model, Param]:
    runs = _by_mode(results, Mode.LOADER)
    runs += _by_mode(results, Mode.CACHED) if model.step_s is not None else []
    if not runs or not model.prep_cpu_s:
        return model, Param("startup_s", 0.0, "s", (), "not measured: no cached or loader run")
    bare = replace(model, startup_s=0.0)
    extra = [r.ranks[0].wait_s[0] - simulate_run(bare, Config(run_cpus(r)), run_layout(r),
                                                 r.mode).wait_s[0] for r in runs]
    value = max(0.0, statistics.median(extra))
    return replace(model, startup_s=value), Param(
        "startup_s", value, "s", tuple(r.run_id for r in runs),
        "first iteration's wait beyond the simulated one (DataLoader worker start-up)")


def _fit_read_cpu(model: Model, disk: list[RunResult]) -> tuple[Model, list[Param]]:
    """CPU per byte read from unthrottled storage; the device itself is taken as not limiting."""
    runs = [r for r in disk if r.spec.resources.storage_read_bps is None]
    if not runs:
        return model, [Param("read_cpu_bps", None, "B/s", (), "not measured: no unthrottled "
                             "disk run; reads are taken to cost no CPU")]
    kappa = pipeline.minimize(
        lambda x: _log_error(replace(model, miss_cpu_s_per_byte=x), runs), 1e-13, 1e-7)
    if kappa <= 1e-13 or _log_error(replace(model, miss_cpu_s_per_byte=0.0), runs) <= \
            _log_error(replace(model, miss_cpu_s_per_byte=kappa), runs):
        kappa = 0.0
    ids = tuple(r.run_id for r in runs)
    cpu = Param("read_cpu_bps", 1 / kappa if kappa else None, "B/s", ids,
                "calibrated: bytes read per CPU second (page-cache fill, reclaim) that reproduce "
                "the unthrottled disk runs" if kappa else
                "calibrated: reading costs no measurable CPU")
    cold = [(w[1], r.run_id) for r in runs if (w := _cold_window(r))]
    how = "not limiting: unthrottled storage is simulated as free reads (CPU cost only)"
    if cold:
        rate, run = max(cold)
        bps = rate * model.dataset_bytes / len(model.file_bytes)
        how += f"; it delivered at least {format_bytes(bps)}/s in the cold window of {run}"
    return replace(model, miss_cpu_s_per_byte=kappa), [
        cpu, Param("storage_bps[unthrottled]", None, "B/s", ids, how)]


def _cold_window(run: RunResult) -> tuple[pipeline.Layout, float, bool] | None:
    """A window of a disk run where every read misses: (layout, rate, is it epoch 1)."""
    layout, rate = run_layout(run), stalls.run_rate(run)
    if layout.epochs >= 2 and rate.epoch1_rate_sps:
        return replace(layout, epochs=2, iters=layout.batches + 1), rate.epoch1_rate_sps, True
    if layout.epochs == 1 and rate.rate_sps:
        return layout, rate.rate_sps, False  # a run within its first epoch: cold throughout
    return None


def _fit_throttles(model: Model, disk: list[RunResult]) -> tuple[Model, list[Param]]:
    by_bw: dict[int, list[tuple[RunResult, tuple[pipeline.Layout, float, bool]]]] = {}
    for r in disk:
        if r.spec.resources.storage_read_bps is not None and (window := _cold_window(r)):
            by_bw.setdefault(r.spec.resources.storage_read_bps, []).append((r, window))
    eff, params = {}, []
    for bps, windows in sorted(by_bw.items()):
        fits = []
        for r, (layout, target, first) in windows:
            cfg = Config(run_cpus(r), storage_read_bps=bps)

            def rate(x: float, bps: int = bps, cfg: Config = cfg, layout: pipeline.Layout = layout,
                     first: bool = first) -> float:
                got = mean_rates(replace(model, throttle_efficiency={bps: 1 / (x * bps)}), cfg,
                                 layout, Mode.DISK, None, cold_first=first)
                return got.epoch1_sps if first else got.rate_sps
            fits.append(1 / bps / pipeline.solve(rate, target, 1e-12, 1e-3))
        eff[bps] = statistics.median(fits)
        params.append(Param(f"storage_bps[throttle={format_bytes(bps)}/s]", bps * eff[bps], "B/s",
                            tuple(r.run_id for r, _ in windows),
                            f"cold epochs (every read misses): {eff[bps]:.1%} of the throttle"))
    if not params:
        params.append(Param("storage_bps", None, "B/s", (), "not measured: no throttled disk "
                            "run; a throttle is taken at face value"))
    return replace(model, throttle_efficiency=eff), params


def _fit_slack(model: Model, disk: list[RunResult]) -> tuple[Model, Param]:
    slack, runs = [], []
    for r in disk:
        budget = r.spec.resources.cache.cache_bytes
        had = effective_cache(r, model.dataset_bytes)
        if budget is not None and had is not None and had < CACHE_BINDS * model.dataset_bytes:
            slack.append(had - budget)
            runs.append(r.run_id)
    if not slack:
        return model, Param("cache_slack_bytes", None, "B", (),
                            "not measured: no disk run with a binding cache limit and cgroup "
                            "counters; budgets taken at face value")
    value = statistics.median(slack)
    return replace(model, cache_slack_bytes=value), Param(
        "cache_slack_bytes", value, "B", tuple(runs),
        f"page cache the runs really had over their budget (cgroup file cache in the steady "
        f"epochs): {format_bytes(min(slack))} to {format_bytes(max(slack))}")


def fit(results: list[RunResult], sizes: Sequence[int] | None = None,
        policy: str = cachesim.Policy.PAGECACHE.value) -> Model:
    """Fit the model on the completed runs of one job; `sizes`: the dataset's file sizes."""
    ok = [r for r in results if r.ok and r.ranks]
    if not ok:
        raise ConfigError("no completed runs to fit the model on: run harness.py first")
    job = ok[0].spec.job
    cachesim.Policy.parse(policy)
    file_bytes, size_param = file_sizes(ok[0], sizes)
    n_samples = stalls.samples_per_epoch(ok[0]) or len(file_bytes)
    batches = run_layout(ok[0]).batches
    disk = _by_mode(ok, Mode.DISK)
    epochs = max([3] + [run_layout(r).epochs for r in disk])  # a cold epoch, then steady ones
    layout = pipeline.Layout(epochs, batches, epochs * batches, min(job.warmup, batches - 1))
    step, g_param = _fit_step(ok, job.world_size * job.batch_size)
    model = Model(job.world_size, job.batch_size, job.workers, n_samples, file_bytes, layout, step,
                  {}, 0.0, 0.0, {}, 0.0, 0.0, policy)
    model, cpu_params = _fit_cpu(model, ok)
    model, startup = _fit_startup(model, ok)
    model, read_cpu = _fit_read_cpu(model, disk) if model.prep_cpu_s and step else (model, [])
    model, storage = _fit_throttles(model, disk) if model.prep_cpu_s and step else (model, [])
    model, slack = _fit_slack(model, disk)
    fixed = [Param("samples_per_epoch", float(n_samples), "samples", (ok[0].run_id,),
                   "batches per epoch x batch size x ranks"),
             Param("dataset_bytes", float(model.dataset_bytes), "B", (ok[0].run_id,),
                   "page-rounded bytes of every file"), size_param]
    g_param = replace(g_param, name=f"ingest_sps[ranks={job.world_size}]")
    params = [g_param, *cpu_params, *fixed, startup, *read_cpu, *storage, slack]
    return replace(model, params=tuple(params))
