"""Fitting the what-if model to stored runs: each parameter measured or calibrated once.

`fit` picks the base job (the fewest ranks, then the slowest sim step) and
reads its layout, then fits, in order: the step time and the all-reduce law
(synthetic runs), the main process's CPU per iteration and its delay to take a
ready batch (measured on the cached runs' timelines), the share of the prep
that follows the file's bytes (per-transform timing), c_prep and its
contention law across CPU counts (loader and cached runs of every job), the
DataLoader start-up,
the storage device (the harness's probe in each disk run), the CPU per byte
read, one throttle efficiency for every throttle (cold epochs), the page cache
runs had beyond their budget, and the residual error that sizes the
intervals. Calibrations minimise the squared log error of the steady rates
`model.predict_run` gives, optionally weighted by each run's measured
uncertainty (`rate_rel_sigma`). Every parameter names its runs. None is solved
for one configuration alone.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace

from dsanalyze.analysis import interference, stalls, transforms, uncertainty
from dsanalyze.analysis.jobrun import job_as_run
from dsanalyze.config import Mode, format_bytes
from dsanalyze.errors import ConfigError
from dsanalyze.records import LOADER_STAGE, CpuScaling, RunResult
from dsanalyze.whatif import bounds, cachesim, pipeline
from dsanalyze.whatif.model import (
    CACHE_BINDS,
    LEVEL,
    PREP_BOUND,
    HeldOut,
    Model,
    Param,
    effective_cache,
    file_sizes,
    mean_rates,
    predict_run,
    run_config,
    run_cpus,
    run_layout,
    simulate_run,
    step_for,
)


def _by_mode(results: list[RunResult], mode: Mode) -> list[RunResult]:
    return [r for r in results if r.ok and r.mode is mode and r.ranks]


DEFAULT_REL_SIGMA = 0.05  # when the fit runs cannot size the intervals
NOISE_FLOOR = 0.02  # run-to-run spread of one configuration on this kind of machine
FOREIGN_FACTOR = 3.0  # outside work above this x every run's median is another process's
BINDS = 0.5  # a throttled cold window reading under this share of the throttle is not held by it


def _job_key(run: RunResult) -> tuple[int, float | None]:
    job = run.spec.job  # the sim step is the built-in job's alone (a script's device is its own)
    return job.world_size, job.sim_step_ms if job_as_run(run).device == "sim" else None


def base_runs(results: list[RunResult]) -> list[RunResult]:
    """The runs of the base job: the fewest ranks, then the slowest sim step."""
    key = min({_job_key(r) for r in results}, key=lambda k: (k[0], -(k[1] or 0)))
    return [r for r in results if _job_key(r) == key]


def _fit_step(results: list[RunResult], base: tuple[int, float | None]
              ) -> tuple[float | None, float, list[Param]]:
    """(step at the base ranks, t_allreduce, params): synthetic runs of the base step."""
    by_n: dict[int, list[RunResult]] = {}
    for r in _by_mode(results, Mode.SYNTHETIC):
        if _job_key(r)[1] == base[1] and stalls.run_rate(r).rate_sps:
            by_n.setdefault(r.spec.job.world_size, []).append(r)
    if base[0] not in by_n:
        return None, 0.0, [Param("ingest_sps", None, "samples/s", (),
                                 "not measured: no synthetic run")]
    steps = {n: statistics.median(_per_iter(r) / stalls.run_rate(r).rate_sps for r in runs)
             for n, runs in by_n.items()}
    params = [Param(f"ingest_sps[ranks={n}]", _per_iter(runs[0]) / steps[n],
                    "samples/s", tuple(r.run_id for r in runs),
                    f"median of {len(runs)} synthetic run(s): step {steps[n] * 1e3:.2f} ms")
              for n, runs in sorted(by_n.items())]
    ring = {n: 2 * (n - 1) / n for n in steps}
    others = [n for n in steps if n != base[0]]
    allreduce = 0.0
    if others:  # t(n) - t(base) = a (ring(n) - ring(base)), least squares through the origin
        x = [ring[n] - ring[base[0]] for n in others]
        y = [steps[n] - steps[base[0]] for n in others]
        allreduce = max(0.0, sum(a * b for a, b in zip(x, y)) / sum(a * a for a in x))
    how = (f"ring law t(n) = t_compute + t_allreduce * 2(n-1)/n fitted on ranks "
           f"{sorted(steps)}" if others else
           "not measured: synthetic runs of one rank count only; other rank counts are taken "
           "to add no all-reduce time (untested)")
    params.append(Param("allreduce_s", allreduce, "s",
                        tuple(r.run_id for n in sorted(by_n) for r in by_n[n]) if others else (),
                        how))
    return steps[base[0]], allreduce, params


def _per_iter(run: RunResult) -> int:
    """Samples per iteration of the whole job, as the script ran it."""
    ran = job_as_run(run)
    return ran.ranks * ran.batch_size


def _fit_cpu_step(base: list[RunResult]) -> tuple[tuple[tuple[int, float], ...], list[Param]]:
    """A step on the CPU: its time per iteration at each CPU count a synthetic run of the
    base job measured (the step's threads take every core; no law across counts)."""
    by: dict[int, list[RunResult]] = {}
    for r in _by_mode(base, Mode.SYNTHETIC):
        if stalls.run_rate(r).rate_sps:
            by.setdefault(run_cpus(r), []).append(r)
    steps = {k: statistics.median(_per_iter(r) / (stalls.run_rate(r).rate_sps or 1.0)
                                  for r in runs) for k, runs in sorted(by.items())}
    return tuple(steps.items()), [Param(
        f"step_s[cpus={k}]", steps[k], "s", tuple(r.run_id for r in by[k]),
        f"the step runs on the CPU (the script's device): measured at {k} CPU(s) by "
        f"{len(by[k])} synthetic run(s); it shares the cores with the loader's workers, and "
        "other CPU counts are not predicted") for k in steps]


def _solve_prep(model: Model, run: RunResult, mode: Mode) -> float:
    cfg, layout = run_config(model, HeldOut.of(run)).with_cache(), run_layout(run)
    target = stalls.run_rate(run).rate_sps or 0.0
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


def _prep_points(model: Model, loaders: list[RunResult], cached: list[RunResult]
                 ) -> tuple[dict[int, float], list[str]]:
    """Worker CPU per sample solved on each loader run and each prep-bound cached run of
    a job and CPU count without a loader run (every job of the prefix: they share the data
    and the transforms), keyed by its busy cores: the points the one law is fitted to."""
    points: dict[int, list[float]] = {}
    runs = []
    with_loader = {(_job_key(r), run_cpus(r)) for r in loaders}
    for r in loaders + [r for r in cached if (_job_key(r), run_cpus(r)) not in with_loader]:
        cfg = run_config(model, HeldOut.of(r))
        ranks = cfg.nproc or model.ranks
        if r.mode is Mode.CACHED and not (model.step_s and (stalls.run_rate(r).rate_sps or 0)
                                          < PREP_BOUND * ranks * model.batch_size
                                          / step_for(model, cfg)):
            continue
        k = min(cfg.cpus, ranks * max(1, cfg.workers or 0))
        points.setdefault(k, []).append(_solve_prep(replace(model, contention=0.0), r, r.mode))
        runs.append(r.run_id)
    return {k: statistics.median(v) for k, v in points.items()}, runs


def _loop_s(run: RunResult) -> float | None:
    """The main process's own time per iteration, wall: (iteration - wait) over the run's
    steady iterations (median), the step included."""
    r0 = run.ranks[0]
    rest = [t - w for t, w in zip(r0.iter_s[r0.warmup:], r0.wait_s[r0.warmup:])]
    return statistics.median(rest) if rest else None


def _compute_bound(model: Model, run: RunResult) -> bool:
    """A cached run at least PREP_BOUND of its job's compute rate G: its loader is ahead."""
    cfg = run_config(model, HeldOut.of(run))
    g = (cfg.nproc or model.ranks) * model.batch_size / step_for(model, cfg)
    return (stalls.run_rate(run).rate_sps or 0.0) >= PREP_BOUND * g


def _fit_main(model: Model, results: list[RunResult]) -> tuple[Model, list[Param]]:
    """The main process, measured on the cached runs' timelines: its CPU per iteration,
    (iteration - wait) less the step (synthetic runs), times the share of a core it gets
    among the job's busy processes (processor sharing, as simulated); and the delay to take
    a ready batch, the median wait of the compute-bound ones (their loader is ahead)."""
    cached = [r for r in _by_mode(results, Mode.CACHED) if _loop_s(r) is not None]
    if model.step_s is None or not cached:
        why = "not measured (needs a synthetic and a cached run): taken as 0"
        return model, [Param("main_cpu_s_per_iter", 0.0, "s", (), why),
                       Param("receive_s", 0.0, "s", (), why)]
    points = []
    for r in cached:
        cfg = run_config(model, HeldOut.of(r))
        procs = (cfg.nproc or model.ranks) * (max(0, cfg.workers or 0) + 1)
        share = min(1.0, cfg.cpus / procs)
        loop, step = _loop_s(r) or 0.0, step_for(model, cfg)
        # a step on the CPU is slowed by the workers as the loop's own work is
        points.append(max(0.0, loop * share - step if model.step_on_cpu else
                          (loop - step) * share))
    main = statistics.median(points)
    ahead = [r for r in cached if _compute_bound(model, r)]
    waits = [statistics.median(r.ranks[0].wait_s[r.ranks[0].warmup:]) for r in ahead]
    receive = statistics.median(waits) if waits else 0.0
    return replace(model, main_cpu_s=main, receive_s=receive), [
        Param("main_cpu_s_per_iter", main, "s", tuple(r.run_id for r in cached),
              f"measured: each cached run's loop time beyond its step (iteration - wait - "
              f"step, median of its steady iterations) times the core share of its main "
              f"process among the job's processes; median of {len(points)}: "
              f"{min(points) * 1e3:.2f} to {max(points) * 1e3:.2f} ms"),
        Param("receive_s", receive, "s", tuple(r.run_id for r in ahead),
              f"measured: median wait for a batch in the {len(ahead)} compute-bound cached "
              f"run(s), whose loader is ahead: "
              f"{min(waits) * 1e3:.2f} to {max(waits) * 1e3:.2f} ms" if waits else
              "not measured: no compute-bound cached run (its loader ahead of the step); "
              "a ready batch is taken at once (untested)")]


def _fit_size_share(model: Model, results: list[RunResult]) -> tuple[Model, Param]:
    """The image loader's (read + decode) share of a sample's timed prep, from the
    per-transform timing of the loader runs (else the cached runs): that share of each
    sample's prep scales with its file's bytes, the rest is the same for every sample."""
    runs = _by_mode(results, Mode.LOADER) or _by_mode(results, Mode.CACHED)
    shares, rows = [], []
    for r in runs:
        table = transforms.run_table(r)
        total = transforms.sum_s_per_sample(table)
        if total > 0:
            rows = table
            shares.append(sum(x["mean_s_per_sample"] for x in table
                              if x["stage"] == LOADER_STAGE) / total)
    if not shares:
        return model, Param("prep_size_share", 0.0, "", (), "not measured: no per-transform "
                            "timing recorded; every sample's prep taken as the mean")
    share = statistics.median(shares)
    steps = ", ".join(f"{x['name']} {x['mean_s_per_sample'] * 1e3:.2f} ms" for x in rows)
    return replace(model, size_share=share), Param(
        "prep_size_share", share, "", tuple(r.run_id for r in runs if transforms.run_table(r)),
        f"measured: the image loader's share of the timed prep per sample (median of "
        f"{len(shares)} run(s); e.g. {steps}); that share of a sample's prep scales with its "
        "file's bytes, the rest is the same for every sample")


def _probe(results: list[RunResult]) -> tuple[CpuScaling, list[str]] | None:
    """The machine's parallel decode probe the runs recorded (one per sweep), and its runs."""
    found = [(s, r.run_id) for r in results
             if (s := CpuScaling.of_run(r)) is not None and s.contention is not None]
    if not found:
        return None
    return found[0][0], [i for _, i in found]


def _fit_cpu(model: Model, results: list[RunResult]) -> tuple[Model, list[Param]]:
    """c_prep and its contention law, given the main process's CPU per iteration."""
    loaders, cached = _by_mode(results, Mode.LOADER), _by_mode(results, Mode.CACHED)
    points, prep_runs = _prep_points(model, loaders, cached)
    probe = _probe(results)
    dropped = ""
    if points:
        c0, alpha = _prep_law(points, probe[0].contention if probe else None)
        if not bounds.CONTENTION.holds(alpha):
            dropped = bounds.CONTENTION.dropped(alpha, prep_runs)
            c0, alpha = _prep_law({k: x for k, x in points.items() if k == min(points)})
        if not bounds.PREP_CPU_S.holds(c0):
            return _prep_from_timing(model, results, bounds.PREP_CPU_S.dropped(c0, prep_runs))
        model = replace(model, prep_cpu_s=c0, contention=alpha,
                        contention_probed=len(points) == 1 and probe is not None)
    params = [_prep_param(model, prep_runs, sorted(points), cached, dropped)]
    if model.contention_probed and probe:
        scaling, ids = probe
        params.append(Param(
            "contention", model.contention, "", tuple(ids),
            f"measured by the machine's parallel decode probe: {scaling.work} of the dataset's "
            f"files took {scaling.solo_cpu_s * 1e3:.2f} ms CPU per item alone on one core, "
            f"{scaling.parallel_cpu_s * 1e3:.2f} ms on each of {scaling.cpus} cores at once "
            "(the runs measured one busy-core count, so the job's own law is untested)"))
    return model, params


def _prep_from_timing(model: Model, results: list[RunResult], dropped: str
                      ) -> tuple[Model, list[Param]]:
    """c_prep where the rates did not determine it: the workers' own per-transform timing
    (the sum of the timed steps per sample, median over the loader or cached runs), no
    contention; else not measured. `dropped`: the fitted value and its runs."""
    runs = [r for r in _by_mode(results, Mode.LOADER) or _by_mode(results, Mode.CACHED)
            if transforms.run_table(r)]
    timed = [transforms.sum_s_per_sample(transforms.run_table(r)) for r in runs]
    if not timed or not bounds.PREP_CPU_S.holds(statistics.median(timed)):
        return replace(model, prep_cpu_s=None), [Param(
            "prep_cpu_s_per_sample", None, "s", (), f"not measured: {dropped}")]
    value = statistics.median(timed)
    return replace(model, prep_cpu_s=value, contention=0.0, contention_probed=False), [Param(
        "prep_cpu_s_per_sample", value, "s", tuple(r.run_id for r in runs),
        f"the workers' per-transform timing, summed per sample (median of {len(timed)} "
        f"run(s)), contention 0 (untested); from the rates: {dropped}")]


def _prep_param(model: Model, runs: list[str], cores: list[int], cached: list[RunResult],
                dropped: str = "") -> Param:
    if model.prep_cpu_s is None:
        ids = tuple(r.run_id for r in cached)
        return Param("prep_cpu_s_per_sample", None, "s", ids,
                     "not measured: the cached runs are compute-bound, so prep is faster than "
                     "they show; run harness.py --modes loader")
    law = (f"contention {model.contention:.3f} per extra busy core from the machine's "
           "parallel decode probe (one busy-core count measured)" if model.contention_probed else
           f"contention {model.contention:.3f} per extra busy core, fitted across busy cores "
           f"{cores}" if model.contention else
           f"contention 0: one busy-core count measured ({cores[0]}), so each extra core is "
           "taken to add a full core of prep (untested)" if len(cores) == 1 else
           f"contention fitted as 0 across busy cores {cores} (cores add prep linearly)")
    if dropped:  # the law refitted on the fewest busy cores alone, contention 0
        law = f"contention {dropped}; c_prep from busy cores {cores[0]} alone, contention 0"
    return Param("prep_cpu_s_per_sample", model.prep_cpu_s, "s", tuple(runs),
                 f"c_prep: worker CPU per sample on one busy core ({1 / model.prep_cpu_s:.1f} "
                 f"samples/s per core); {law}")


def _drop_foreign(found: dict[str, list[tuple[str, float]]]
                  ) -> tuple[dict[str, list[tuple[str, float]]], list[tuple[str, float]]]:
    """The runs whose outside work is the job's: a run where it exceeds `FOREIGN_FACTOR` x the
    median of every run's (another process busy on a core the job did not use, which no
    interference check sees at fewer CPUs than the machine's) is set aside, and named."""
    every = [x for v in found.values() for _, x in v]
    if len(every) < 3:
        return found, []
    limit = FOREIGN_FACTOR * statistics.median(every)
    kept = {k: [(i, x) for i, x in v if x <= limit] for k, v in found.items()}
    return kept, sorted((i, x) for v in found.values() for i, x in v if x > limit)


def _background_cores(results: list[RunResult]) -> float:
    """Cores busy outside the job's cgroup that the job's data does not cause: the median over
    the synthetic runs (no loader: no reads, no decode, no limiter) of their outside work
    per second. On a machine shared with other tenants that is their load, which a run's
    outside work per sample would otherwise charge to the job."""
    cores = [x * rate for r in _by_mode(results, Mode.SYNTHETIC)
             if (x := interference.outside_cpu_s_per_sample(r)) is not None
             and (rate := stalls.run_rate(r).rate_sps)]
    return statistics.median(cores) if cores else 0.0


def _fit_others(model: Model, results: list[RunResult]) -> tuple[Model, list[Param]]:
    """The work outside the job's cgroup per sample (`interference.outside_cpu_s_per_sample`),
    median over the loader and cached runs, and over the disk runs (their kernel I/O work
    besides; the others' figure where none recorded it), with the machine's online CPUs."""
    machine = [m for r in results if (m := (r.io.interference or {}).get("machine_cpus"))]
    background = _background_cores(results)
    found = {mode: [(r.run_id, max(0.0, x - background / rate)) for r in results
                    if r.ok and r.ranks and r.mode in modes
                    and (x := interference.outside_cpu_s_per_sample(r)) is not None
                    and (rate := stalls.run_rate(r).rate_sps)]
             for mode, modes in (("cached", (Mode.LOADER, Mode.CACHED)), ("disk", (Mode.DISK,)))}
    found, foreign = _drop_foreign(found)
    if not machine or not (found["cached"] or found["disk"]):
        return model, [Param("others_cpu_s_per_sample", 0.0, "s", (), "not measured: the runs "
                             "predate the machine-wide CPU samples; work outside the job's "
                             "cgroup taken to take none of its cores")]
    value = {k: statistics.median(x for _, x in v) if v else None for k, v in found.items()}
    mem = value["cached"] if value["cached"] is not None else value["disk"]
    disk = value["disk"] if value["disk"] is not None else mem
    model = replace(model, machine_cpus=max(machine), others_cpu_s_per_sample=mem,
                    others_disk_cpu_s_per_sample=disk)
    how = (f"measured: CPU outside the job's cgroup on any of the machine's {max(machine)} "
           "cores (kernel I/O and reclaim, the harness's monitor and limiter) per sample of the "
           "steady iterations, less the synthetic runs' outside work per second (other "
           f"tenants: {background:.2f} cores), median of {{n}} run(s); it takes the job's "
           "cores where the job wants more than the machine has free of it")
    if foreign:
        how += (f"; left out, as another process's load rather than the job's (over "
                f"{FOREIGN_FACTOR:g}x the median of every run): " +
                ", ".join(f"{i} {x * 1e3:.2f} ms" for i, x in foreign))
    return model, [Param(f"others_cpu_s_per_sample[{k}]", v, "s",
                         tuple(i for i, _ in found[k] or found["cached"]),
                         how.format(n=len(found[k])) if found[k] else
                         "not measured on these runs: the loader and cached runs' figure")
                   for k, v in (("cached", mem), ("disk", disk))]


def _residual(model: Model, run: RunResult) -> float:
    predicted = predict_run(model, HeldOut.of(run)).rate_sps
    return math.log(predicted / (stalls.run_rate(run).rate_sps or 1.0))


def _log_error(model: Model, runs: list[RunResult]) -> float:
    """Sum of squared log errors of the predicted steady rates: the calibration's objective,
    each run weighted by 1 / its measured relative variance where `model.fit_weights` has it."""
    w = model.fit_weights
    return sum(_residual(model, r) ** 2 * w.get(r.run_id, 1.0) for r in runs)


def _fit_startup(model: Model, results: list[RunResult]) -> tuple[Model, Param]:
    runs = _by_mode(results, Mode.LOADER)
    runs += _by_mode(results, Mode.CACHED) if model.step_s is not None else []
    if not runs or not model.prep_cpu_s:
        return model, Param("startup_s", 0.0, "s", (), "not measured: no cached or loader run")
    bare = replace(model, startup_s=0.0)
    extra = [r.ranks[0].wait_s[0] - simulate_run(bare, run_config(model, HeldOut.of(r)),
                                                 run_layout(r), r.mode).wait_s[0] for r in runs]
    value = max(0.0, statistics.median(extra))
    return replace(model, startup_s=value), Param(
        "startup_s", value, "s", tuple(r.run_id for r in runs),
        "first iteration's wait beyond the simulated one (DataLoader worker start-up)")


def _fit_device(model: Model, disk: list[RunResult]) -> tuple[Model, list[Param]]:
    """The storage device: the harness's cold probe before each disk run (median)."""
    probes = [(r.run_id, d) for r in disk
              if (d := r.io.storage_device) and d.get("read_bps")]
    if not probes:
        why = ("not measured: the disk runs predate the storage probe (re-run them); "
               "unthrottled storage is taken as never limiting")
        return model, [Param("device_read_bps", None, "B/s", (), why)]
    ids = tuple(i for i, _ in probes)
    bps = statistics.median(d["read_bps"] for _, d in probes)
    lat = statistics.median(d.get("latency_s") or 0.0 for _, d in probes)
    spread = [d["read_bps"] for _, d in probes]
    return replace(model, device_read_bps=bps, device_latency_s=lat), [
        Param("device_read_bps", bps, "B/s", ids,
              f"cold reads of the dataset's own files by one reader before each disk run "
              f"(median of {len(probes)}: {format_bytes(min(spread))}/s to "
              f"{format_bytes(max(spread))}/s); unthrottled storage is this device"),
        Param("device_latency_s", lat, "s", ids, "median cold 4 KiB read per request")]


def _fit_read_cpu(model: Model, disk: list[RunResult]) -> tuple[Model, list[Param]]:
    """CPU a worker spends per byte read from storage (one number), on unthrottled runs.

    Where unthrottled runs at one CPU count had different cache budgets, from the
    contrast alone: how their rates change with the bytes they missed, their common level
    left to the prep cost and the contention law (fitted on their own); the fewest such
    CPUs. Otherwise from the level of the runs without a page cache at their fewest CPUs,
    where the job's own CPU holds it. A level fit at more CPUs would fold the contention
    and the work outside the cgroup into a read cost (one fold of bench/whatif_accuracy.py
    made it 2 ms a sample from 2-CPU runs and missed a 1-CPU run by 11%)."""
    unthrottled = [r for r in disk if r.spec.resources.storage_read_bps is None]
    by_cpus: dict[int, list[RunResult]] = {}
    for r in unthrottled:
        by_cpus.setdefault(run_cpus(r), []).append(r)
    varied = [c for c, rs in by_cpus.items()
              if len({r.spec.resources.cache.cache_bytes for r in rs}) > 1]
    if varied:
        runs, contrast = by_cpus[min(varied)], True
    else:
        # the runs without a page cache, where it is not confounded with the cache model
        runs = [r for r in unthrottled if not r.spec.resources.cache.cache_bytes] or unthrottled
        fewest = min(map(run_cpus, runs), default=None)
        runs, contrast = [r for r in runs if run_cpus(r) == fewest], False
    if not runs:
        return model, [Param("read_cpu_bps", None, "B/s", (), "not measured: no unthrottled "
                             "disk run; reads are taken to cost no CPU")]

    def error(kappa: float) -> float:
        trial = replace(model, miss_cpu_s_per_byte=kappa)
        if not contrast:
            return _log_error(trial, runs)
        res = [_residual(trial, r) for r in runs]
        mean = statistics.fmean(res)
        return sum((x - mean) ** 2 for x in res)
    kappa = pipeline.minimize(error, 1e-13, 1e-7, 12)
    if kappa <= 1e-13 or error(0.0) <= error(kappa):
        kappa = 0.0
    ids = tuple(r.run_id for r in runs)
    if kappa and not bounds.READ_CPU_BPS.holds(1 / kappa):
        return model, [Param("read_cpu_bps", None, "B/s", ids, "not measured: reads taken to "
                             "cost no CPU; " + bounds.READ_CPU_BPS.dropped(1 / kappa, ids))]
    where = (f"the change of rate with the bytes missed across the cache budgets of the "
             f"unthrottled disk runs at {run_cpus(runs[0])} CPU(s)" if contrast else
             f"the unthrottled disk runs without a page cache at {run_cpus(runs[0])} CPU(s)")
    return replace(model, miss_cpu_s_per_byte=kappa), [Param(
        "read_cpu_bps", 1 / kappa if kappa else None, "B/s", ids,
        f"calibrated, one number: bytes read per CPU second (page-cache fill, reclaim), from "
        f"{where}" if kappa else f"calibrated: reading costs no measurable CPU ({where})")]


def _cold_window(run: RunResult) -> tuple[pipeline.Layout, float, bool] | None:
    """A window of a disk run where every read misses: (layout, rate, is it epoch 1)."""
    layout, rate = run_layout(run), stalls.run_rate(run)
    if layout.epochs >= 2 and rate.epoch1_rate_sps:
        return replace(layout, epochs=2, iters=layout.batches + 1), rate.epoch1_rate_sps, True
    if layout.epochs == 1 and rate.rate_sps:
        return layout, rate.rate_sps, False  # a run within its first epoch: cold throughout
    return None


def _throttle_fit(model: Model, run: RunResult, window: tuple[pipeline.Layout, float, bool]
                  ) -> float:
    """The efficiency (bandwidth got / throttle) that reproduces one cold window."""
    layout, target, first = window
    cfg = run_config(model, HeldOut.of(run)).with_cache()
    bps = cfg.storage_read_bps

    def rate(x: float) -> float:
        got = mean_rates(replace(model, throttle_efficiency=1 / (x * bps)), cfg, layout,
                         Mode.DISK, None, cold_first=first)
        return got.epoch1_sps if first else got.rate_sps
    return 1 / bps / pipeline.solve(rate, target, 1e-12, 1e-3)


def _fit_throttles(model: Model, disk: list[RunResult]) -> tuple[Model, list[Param]]:
    """One efficiency for every throttle: the median over the cold windows of throttled runs
    whose throttle is under the device's bandwidth."""
    fits, runs = [], []
    sample_bytes = model.dataset_bytes / len(model.file_bytes)
    for r in disk:
        bps = r.spec.resources.storage_read_bps
        if bps is None or (model.device_read_bps and bps >= model.device_read_bps):
            continue
        window = _cold_window(r)
        # only where the throttle binds: the cold window read at least half of it
        if window and window[1] * sample_bytes >= BINDS * bps:
            fits.append(_throttle_fit(model, r, window))
            runs.append(r.run_id)
    bad = [(i, x) for i, x in zip(runs, fits) if not bounds.THROTTLE_EFFICIENCY.holds(x)]
    dropped = "; ".join(bounds.THROTTLE_EFFICIENCY.dropped(x, [i]) for i, x in bad)
    runs, fits = [i for i, x in zip(runs, fits) if bounds.THROTTLE_EFFICIENCY.holds(x)], \
        [x for x in fits if bounds.THROTTLE_EFFICIENCY.holds(x)]
    if not fits:
        why = "every throttled fit out of bounds" if bad else \
            "no throttled disk run held by its throttle"
        return model, [Param("throttle_efficiency", 1.0, "", tuple(i for i, _ in bad),
                             f"not measured: {why}; a throttle is taken at face value (capped "
                             "by the device)" + (f"; {dropped}" if dropped else ""))]
    eff = statistics.median(fits)
    return replace(model, throttle_efficiency=eff, throttle_measured=True), [Param(
        "throttle_efficiency", eff, "", tuple(runs),
        f"one number for every throttle: cold epochs (every read misses) got {min(fits):.1%} to "
        f"{max(fits):.1%} of their throttle; the median is used"
        + (f"; {dropped}" if dropped else ""))]


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
        f"page cache (shared memory excluded) the fit runs had over their budget in their "
        f"steady epochs: {format_bytes(min(slack))} to {format_bytes(max(slack))}")


def _fit_sigma(model: Model, runs: list[RunResult], calibrated: int) -> tuple[Model, Param]:
    """The relative standard error of a prediction: the fit runs' residual log error over
    their degrees of freedom (runs - calibrated numbers), at least NOISE_FLOOR."""
    rated = [r for r in runs if r.mode is not Mode.SYNTHETIC and stalls.run_rate(r).rate_sps]
    dof = len(rated) - calibrated
    ids = tuple(r.run_id for r in rated)
    measured = [model.measured_sigma[r.run_id] for r in rated if r.run_id in model.measured_sigma]
    noise = statistics.median(measured) if measured else 0.0
    if dof < 2:
        sigma = max(DEFAULT_REL_SIGMA, noise)
        return replace(model, rel_sigma=sigma), Param(
            "rel_sigma", sigma, "", ids,
            f"default {DEFAULT_REL_SIGMA:.0%}, at least the fit runs' median measured noise "
            f"({noise:.1%}): {len(rated)} fit run(s) for {calibrated} calibrated number(s) "
            "leave too few degrees of freedom to size the intervals")
    res = [_residual(model, r) for r in rated]
    sigma = max(NOISE_FLOOR, noise, math.sqrt(sum(x * x for x in res) / dof))
    return replace(model, rel_sigma=sigma), Param(
        "rel_sigma", sigma, "", ids,
        f"residual log error of {len(rated)} fit runs over {dof} degrees of freedom, at least "
        f"their median measured noise ({noise:.1%}, block bootstrap) and {NOISE_FLOOR:.0%}: "
        f"intervals are rate x exp(+-1.645 sigma), {LEVEL:.0%} nominal")


def _speedups(runs: list[RunResult], base: RunResult) -> tuple[float, ...]:
    """Base step / the sim step of each run: the GPU speed-ups some run measured."""
    if _job_key(base)[1] is None:
        return (1.0,)
    return tuple(sorted({base.spec.job.sim_step_ms / step for r in runs
                         if (step := _job_key(r)[1])}))


def _job_model(ok: list[RunResult], base: list[RunResult], sizes: Sequence[int] | None,
               policy: str, rate_rel_sigma: Mapping[str, float]) -> tuple[Model, list[Param]]:
    """The model's job and layout (the base job's), its step law, and what it measured:
    the step's params, then samples per epoch, dataset bytes and sample bytes."""
    job, ran = base[0].spec.job, job_as_run(base[0])
    file_bytes, size_param = file_sizes(base[0], sizes)
    # the whole dataset's epoch: a cached run of data larger than memory ran on a subset
    n_samples = max(stalls.samples_per_epoch(r) or 0 for r in base) or len(file_bytes)
    batches = max(run_layout(r).batches for r in base)
    epochs = max([3] + [run_layout(r).epochs for r in _by_mode(base, Mode.DISK)])
    # a cold epoch, then steady ones
    layout = pipeline.Layout(epochs, batches, epochs * batches, min(job.warmup, batches - 1))
    step, allreduce, g_params = _fit_step(ok, _job_key(base[0]))
    by_cpus, cpu_params = _fit_cpu_step(base) if ran.step_uses_cpu else ((), [])
    weights = {k: 1 / max(v, NOISE_FLOOR) ** 2 * NOISE_FLOOR ** 2
               for k, v in rate_rel_sigma.items()}
    model = Model(ranks=ran.ranks, batch_size=ran.batch_size, workers=ran.workers,
                  samples_per_epoch=n_samples, file_bytes=file_bytes, layout=layout, step_s=step,
                  policy=policy, allreduce_s=allreduce,
                  step_ms=_job_key(base[0])[1],
                  measured_cpus=tuple(sorted({run_cpus(r) for r in base})),
                  measured_ranks=tuple(sorted({r.spec.job.world_size for r in ok})),
                  measured_speedups=_speedups(ok, base[0]),
                  machine_cpus=base[0].environment.get("cpus_available"), loader=ran.loader,
                  prefetch_factor=ran.prefetch_factor, step_on_cpu=ran.step_uses_cpu,
                  persistent_workers=ran.persistent_workers,
                  step_s_by_cpus=by_cpus,
                  fit_weights=weights, measured_sigma=dict(rate_rel_sigma))
    fixed = [Param("samples_per_epoch", float(n_samples), "samples", (base[0].run_id,),
                   "batches per epoch x batch size x ranks"),
             Param("dataset_bytes", float(model.dataset_bytes), "B", (base[0].run_id,),
                   "page-rounded bytes of every file"), size_param]
    return model, [*g_params, *cpu_params, *fixed]


def fit(results: list[RunResult], sizes: Sequence[int] | None = None,
        policy: str = cachesim.Policy.PAGECACHE.value,
        rate_rel_sigma: Mapping[str, float] | None = None) -> Model:
    """Fit the model on the completed runs of one job; `sizes`: the dataset's file sizes.

    `rate_rel_sigma`: each run's measured relative uncertainty of its rate (run id ->
    sigma / rate); by default the block bootstrap's (`uncertainty.rel_sigmas`). Runs are
    weighted by 1 / sigma^2 in the calibrations, and a prediction's interval is never
    narrower than the fit runs' median measured noise.
    """
    ok = [r for r in results if r.ok and r.ranks]
    if not ok:
        raise ConfigError("no completed runs to fit the model on: run harness.py first")
    if rate_rel_sigma is None:
        rate_rel_sigma = uncertainty.rel_sigmas(ok)
    if any(r.spec.job.nnodes > 1 for r in ok):
        raise ConfigError("the what-if model is fitted on one node's runs: fit it on a one-node "
                          "sweep and ask for several nodes with --nnodes")
    base = base_runs(ok)
    cachesim.Policy.parse(policy)
    model, fixed = _job_model(ok, base, sizes, policy, rate_rel_sigma)
    disk = _by_mode(base, Mode.DISK)
    model, device = _fit_device(model, disk)
    model, others = _fit_others(model, ok)
    model, main = _fit_main(model, ok)
    model, size_share = _fit_size_share(model, base)
    model, cpu_params = _fit_cpu(model, ok)
    model, startup = _fit_startup(model, base)
    ready = model.prep_cpu_s is not None and model.step_s is not None
    model, read_cpu = _fit_read_cpu(model, disk) if ready else (model, [])
    model, storage = _fit_throttles(model, disk) if ready else (model, [])
    model, slack = _fit_slack(model, disk)
    calibrated = 2 + int(model.contention > 0 and not model.contention_probed) + \
        int(bool(model.miss_cpu_s_per_byte)) + int(bool(storage and storage[0].runs)) + \
        int(slack.value is not None)
    model, sigma = _fit_sigma(model, base, calibrated) if ready else \
        (model, Param("rel_sigma", model.rel_sigma, "", (), "default: nothing to predict"))
    params = [*fixed[:-3], *main, size_share, *cpu_params, *others, *fixed[-3:], startup,
              *device, *read_cpu, *storage, slack, sigma]
    return replace(model, params=tuple(params))
