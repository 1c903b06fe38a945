"""Storage: the device, the CPU per byte read and a read's wait, the throttles and the page
cache's slack.

The device is the harness's cold probe before each disk run; the CPU per
byte read is calibrated on the unthrottled disk runs, with the wait a read
that misses holds its worker where their worker counts show one; one efficiency for
every throttle is solved on the cold windows the throttle held (reading at
least `SETTINGS.throttle_binds` of it); the slack is the page cache the runs
had beyond a budget that bound.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from dsanalyze.analysis import runrate
from dsanalyze.config import Mode
from dsanalyze.records import RunResult
from dsanalyze.settings import SETTINGS
from dsanalyze.whatif import bounds, pipeline
from dsanalyze.whatif.fitruns import cores_and_workers, log_error, residual
from dsanalyze.whatif.laws import read_ahead_bytes, reread_share, run_cache, run_config
from dsanalyze.whatif.model import HeldOut, Model, Param, run_cpus, run_layout
from dsanalyze.whatif.provenance import (
    DeviceProbe,
    Fixed,
    ReadCpu,
    ReadCpuDropped,
    Reason,
    Slack,
    Throttle,
)
from dsanalyze.whatif.rates import mean_rates
from dsanalyze.whatif.runsizes import effective_cache


def fit_device(model: Model, disk: list[RunResult]) -> tuple[Model, list[Param]]:
    """The storage device: the harness's cold probe before each disk run (median), and
    blk-throttle's slice on it as the probes recorded it (else `SETTINGS.throttle_slice_s`)."""
    probes = [(r.run_id, d) for r in disk
              if (d := r.io.storage_device) and d.get("read_bps")]
    if not probes:
        return model, [Param("device_read_bps", None, "B/s", (),
                             Fixed(Reason.DEVICE_PREDATES_PROBE))]
    ids = tuple(i for i, _ in probes)
    bps = statistics.median(d["read_bps"] for _, d in probes)
    lat = statistics.median(d.get("latency_s") or 0.0 for _, d in probes)
    spread = [d["read_bps"] for _, d in probes]
    sliced = [(i, d["throttle_slice_s"]) for i, d in probes if d.get("throttle_slice_s")]
    slice_s = max(x for _, x in sliced) if sliced else SETTINGS.throttle_slice_s
    return replace(model, device_read_bps=bps, device_latency_s=lat,
                   throttle_slice_s=slice_s), [
        Param("device_read_bps", bps, "B/s", ids,
              DeviceProbe(len(probes), min(spread), max(spread))),
        Param("device_latency_s", lat, "s", ids, Fixed(Reason.DEVICE_LATENCY)),
        Param("throttle_slice_s", slice_s, "s", tuple(i for i, _ in sliced), Fixed(
            Reason.THROTTLE_SLICE if sliced else Reason.THROTTLE_SLICE_DEFAULT))]


def _read_runs(disk: list[RunResult]) -> tuple[list[RunResult], bool]:
    """(runs, contrast): the unthrottled runs at the fewest CPUs that had different cache
    budgets (contrast), else those without a page cache at their fewest CPUs."""
    unthrottled = [r for r in disk if r.spec.resources.storage_read_bps is None]
    by_cpus: dict[int, list[RunResult]] = {}
    for r in unthrottled:
        by_cpus.setdefault(run_cpus(r), []).append(r)
    varied = [c for c, rs in by_cpus.items()
              if len({r.spec.resources.cache.cache_bytes for r in rs}) > 1]
    if varied:
        return by_cpus[min(varied)], True
    # the runs without a page cache, where it is not confounded with the cache model
    runs = [r for r in unthrottled if not r.spec.resources.cache.cache_bytes] or unthrottled
    fewest = min(map(run_cpus, runs), default=None)
    return [r for r in runs if run_cpus(r) == fewest], False


def _twins(model: Model, runs: list[RunResult]) -> list[tuple[RunResult, list[RunResult]]]:
    """Each unthrottled disk run without a page cache, with the cached runs of its CPU count and
    worker count (its twins: the same loop, its reads from memory); those that have some."""
    runs = [r for r in runs if r.ok and r.ranks and runrate.run_rate(r).rate_sps]
    cached: dict[tuple[int, int], list[RunResult]] = {}
    for r in runs:
        if r.mode is Mode.CACHED:
            cached.setdefault(cores_and_workers(model, r), []).append(r)
    return [(r, twins) for r in runs if r.mode is Mode.DISK
            and r.spec.resources.storage_read_bps is None
            and not r.spec.resources.cache.cache_bytes
            and (twins := cached.get(cores_and_workers(model, r)))]


def _wait_shown(model: Model, pairs: list[tuple[RunResult, list[RunResult]]]) -> bool | None:
    """Whether the runs show a wait: at every CPU count with disk runs of several worker
    counts, the fewest workers' run lies further under its cached twins than the most
    workers' (a wait hurts fewer workers more; the CPU a read costs, all alike). None: no
    CPU count had two worker counts."""
    ratio: dict[int, dict[int, float]] = {}
    for r, twins in pairs:
        twin = statistics.fmean(runrate.run_rate(c).rate_sps or 0.0 for c in twins)
        if twin:
            cpus, workers = cores_and_workers(model, r)
            ratio.setdefault(cpus, {})[workers] = (runrate.run_rate(r).rate_sps or 0.0) / twin
    both = [by for by in ratio.values() if len(by) > 1]
    if not both:
        return None
    return all(by[min(by)] < by[max(by)] for by in both)


def _fit_wait(model: Model, pairs: list[tuple[RunResult, list[RunResult]]]
              ) -> tuple[float, float]:
    """(kappa, wait): the CPU per byte read and the wait per missed sample that reproduce how
    much slower each disk run of `pairs` is than its cached twins (the log ratio of the rates,
    predicted against measured: the loop's own misfit at that CPU and worker count cancels).
    Least squares by Gauss-Newton steps on (the CPU a sample's read costs, the wait), both
    kept at 0 or above (the wait at most `SETTINGS.read_wait_max_s`): a few simulations of
    each run where a search would take hundreds."""
    twin_res = [statistics.fmean(residual(model, c) for c in twins) for _, twins in pairs]
    per_sample = model.dataset_bytes / len(model.file_bytes)

    def res(x: tuple[float, float]) -> list[float]:
        trial = replace(model, miss_cpu_s_per_byte=x[0] / per_sample, read_wait_s=x[1])
        return [residual(trial, r) - t for (r, _), t in zip(pairs, twin_res)]

    h = SETTINGS.read_fit_step_s
    x, at = (0.0, 0.0), res((0.0, 0.0))
    for _ in range(SETTINGS.read_fit_steps):
        cols = [[(b - a) / h for a, b in zip(at, res(_moved(x, i, h)))] for i in (0, 1)]
        step = _least_squares(cols, [-v for v in at], x)
        trial = (max(0.0, x[0] + step[0]),
                 min(SETTINGS.read_wait_max_s, max(0.0, x[1] + step[1])))
        got = res(trial)
        if sum(v * v for v in got) >= sum(v * v for v in at):
            break
        x, at = trial, got
    return x[0] / per_sample, x[1]


def _moved(x: tuple[float, float], i: int, h: float) -> tuple[float, float]:
    return (x[0] + h, x[1]) if i == 0 else (x[0], x[1] + h)


def _least_squares(cols: list[list[float]], rhs: list[float], x: tuple[float, float]
                   ) -> tuple[float, float]:
    """The step d minimising |cols d - rhs| with x + d >= 0: both free, else each alone with
    the other held at 0 (its lower end), the better of those."""
    def dot(u: list[float], v: list[float]) -> float:
        return sum(a * b for a, b in zip(u, v))

    def alone(i: int) -> tuple[float, float]:
        aa = dot(cols[i], cols[i])
        d = max(-x[i], dot(cols[i], rhs) / aa) if aa > 0 else 0.0
        other = -x[1 - i]
        return (d, other) if i == 0 else (other, d)

    a, b, c = dot(cols[0], cols[0]), dot(cols[0], cols[1]), dot(cols[1], cols[1])
    det = a * c - b * b
    if det > 1e-12 * max(a * c, 1e-300):
        u, v = dot(cols[0], rhs), dot(cols[1], rhs)
        d = ((c * u - b * v) / det, (a * v - b * u) / det)
        if x[0] + d[0] >= 0 and x[1] + d[1] >= 0:
            return d

    def cost(d: tuple[float, float]) -> float:
        return sum((p * d[0] + q * d[1] - r) ** 2 for p, q, r in zip(cols[0], cols[1], rhs))
    return min((alone(0), alone(1)), key=cost)


def fit_read_cpu(model: Model, runs: list[RunResult]) -> tuple[Model, list[Param]]:
    """CPU a worker spends per byte read from storage (one number), on unthrottled runs, and
    where their worker counts differ, the wait a read that misses holds its worker.

    A read that misses costs its worker some CPU and a wait without CPU (the worker sleeps
    until its bytes arrive). One worker pays both in turn; several hide each other's waits
    behind their CPU work, so the disk runs of 1 worker lie further under their cached twins
    than those of several (timm's and Lightning's on the scripts bench: 0.3-1.0 ms a sample
    over cached with 1 worker, 0.0-0.6 ms with 2-3). Where the unthrottled disk runs without a
    page cache had more than one worker count at one CPU count and the fewer workers lay
    further under their cached twins at each (`_wait_shown`), both are fitted on how far
    each lies under its cached twins (`_fit_wait`). Otherwise the wait is the device's
    latency alone (a wait fitted on runs without that sign took their noise for it: examples'
    2-worker run at 1 CPU 21% under its cached twin, bench47) and the CPU per byte is fitted
    alone (`_fit_kappa`)."""
    pairs = _twins(model, runs)
    shown = _wait_shown(model, pairs)
    if shown:
        kappa, wait = _fit_wait(model, pairs)
        ids = tuple(r.run_id for r, _ in pairs)
        how = ReadCpu(False, min(run_cpus(r) for r, _ in pairs), bool(kappa), wait_fitted=True)
        model, params = _read_cpu_params(replace(model, read_wait_s=wait), kappa, ids, how)
        return model, [*params, Param("read_wait_s", wait, "s", ids, how)]
    read, contrast = _read_runs([r for r in runs if r.mode is Mode.DISK])
    if not read:
        return model, [Param("read_cpu_bps", None, "B/s", (), Fixed(Reason.NO_UNTHROTTLED_RUN))]
    kappa = _fit_kappa(model, read, contrast)
    model, params = _read_cpu_params(model, kappa, tuple(r.run_id for r in read),
                                     ReadCpu(contrast, run_cpus(read[0]), bool(kappa)))
    why = Reason.ONE_WORKER_COUNT if shown is None else Reason.NO_WAIT_SHOWN
    return model, [*params, Param("read_wait_s", model.read_wait_s, "s", (), Fixed(why))]


def _fit_kappa(model: Model, read: list[RunResult], contrast: bool) -> float:
    """The CPU per byte read alone, on `_read_runs`' runs (0: reading costs no measurable CPU).

    Where unthrottled runs at one CPU count had different cache budgets, from the
    contrast alone: how their rates change with the bytes they missed, their common level
    left to the prep cost and the contention law (fitted on their own); the fewest such
    CPUs. Otherwise from the level of the runs without a page cache at their fewest CPUs,
    where the job's own CPU holds it. A level fit at more CPUs would fold the contention
    and the work outside the cgroup into a read cost (one fold of bench/whatif_accuracy.py
    made it 2 ms a sample from 2-CPU runs and missed a 1-CPU run by 11%)."""
    def error(kappa: float) -> float:
        trial = replace(model, miss_cpu_s_per_byte=kappa)
        if not contrast:
            return log_error(trial, read)
        res = [residual(trial, r) for r in read]
        mean = statistics.fmean(res)
        return sum((x - mean) ** 2 for x in res)
    kappa = pipeline.minimize(error, 1e-13, 1e-7, 12)
    return 0.0 if kappa <= 1e-13 or error(0.0) <= error(kappa) else kappa


def _read_cpu_params(model: Model, kappa: float, ids: tuple[str, ...], how: ReadCpu
                     ) -> tuple[Model, list[Param]]:
    """The fitted CPU per byte read, in the model and as its parameter; dropped (the model
    as it was, the value named) outside its bound."""
    if kappa and not bounds.READ_CPU_BPS.holds(1 / kappa):
        return model, [Param("read_cpu_bps", None, "B/s", ids,
                             ReadCpuDropped(bounds.READ_CPU_BPS.dropped(1 / kappa, ids)))]
    return replace(model, miss_cpu_s_per_byte=kappa), [Param(
        "read_cpu_bps", 1 / kappa if kappa else None, "B/s", ids, how)]


def _cold_window(run: RunResult) -> tuple[pipeline.Layout, float, bool] | None:
    """A window of a disk run where every read misses: (layout, rate, is it epoch 1)."""
    layout, rate = run_layout(run), runrate.run_rate(run)
    if layout.epochs >= 2 and rate.epoch1_rate_sps:
        return replace(layout, epochs=2, iters=layout.batches + 1), rate.epoch1_rate_sps, True
    if layout.epochs == 1 and rate.rate_sps:
        return layout, rate.rate_sps, False  # a run within its first epoch: cold throughout
    return None


def _throttle_fit(model: Model, run: RunResult, window: tuple[pipeline.Layout, float, bool]
                  ) -> float:
    """The efficiency (bandwidth got / throttle) that reproduces one cold window."""
    layout, target, first = window
    held = HeldOut.of(run)
    cfg = run_config(model, held).with_cache()
    bps = cfg.storage_read_bps
    # every training read of the window misses; the job's re-reads miss where its cache is short
    rereads = reread_share(model, run_cache(model, held))

    def rate(x: float) -> float:
        got = mean_rates(replace(model, throttle_efficiency=1 / (x * bps)), cfg, layout,
                         Mode.DISK, None, cold_first=first, reread_share=rereads)
        return got.epoch1_sps if first else got.rate_sps
    return 1 / bps / pipeline.solve(rate, target, 1e-12, 1e-3)


def _fill_fit(model: Model, run: RunResult, bps: int) -> float | None:
    """The efficiency of a loader that reads ahead (`Model.read_ahead_samples`: a shuffling
    DALI reader) from its fill: before its first batch it reads its buffer and the batches
    its pipeline holds, and nothing else runs, so those bytes over the time it took
    (`build_s`, the training loader's) are what the throttle gave. Its cold epoch holds that
    fill and then draws the buffer down, which the simulation has neither of: fitted there,
    train_dali.py's throttle gave 0.85 of 8 MiB/s and its own cache-0 run was predicted
    17% slow; its fill read 1056 files of 12 KiB in 1.51 s, 1.02 of the throttle."""
    if not model.read_ahead_samples or not run.ranks:
        return None
    build_s = next((li.get("build_s") for li in run.ranks[0].extra.get("loaders") or ()
                    if li.get("role") == "training"), None)
    if not build_s or build_s <= 0:
        return None
    batches = model.prefetch_factor * model.batch_size * model.ranks
    fill_bytes = read_ahead_bytes(model) + batches * model.dataset_bytes / len(model.file_bytes)
    return fill_bytes / build_s / bps


def fit_throttles(model: Model, disk: list[RunResult]) -> tuple[Model, list[Param]]:
    """One efficiency for every throttle: the median over the cold windows of throttled runs
    whose throttle is under the device's bandwidth (a loader that reads ahead: over their
    fills, `_fill_fit`)."""
    fits, runs = [], []
    sample_bytes = model.dataset_bytes / len(model.file_bytes)
    for r in disk:
        bps = r.spec.resources.storage_read_bps
        if bps is None or (model.device_read_bps and bps >= model.device_read_bps):
            continue
        if (fill := _fill_fit(model, r, bps)) is not None:
            fits.append(fill)
            runs.append(r.run_id)
            continue
        window = _cold_window(r)
        # only where the throttle binds: the cold window read at least half of it
        if window and window[1] * sample_bytes >= SETTINGS.throttle_binds * bps:
            fits.append(_throttle_fit(model, r, window))
            runs.append(r.run_id)
    bad = [(i, x) for i, x in zip(runs, fits) if not bounds.THROTTLE_EFFICIENCY.holds(x)]
    dropped = tuple(bounds.THROTTLE_EFFICIENCY.dropped(x, [i]) for i, x in bad)
    runs, fits = [i for i, x in zip(runs, fits) if bounds.THROTTLE_EFFICIENCY.holds(x)], \
        [x for x in fits if bounds.THROTTLE_EFFICIENCY.holds(x)]
    if not fits:
        return model, [Param("throttle_efficiency", 1.0, "", tuple(i for i, _ in bad),
                             Throttle(None, None, dropped))]
    eff = statistics.median(fits)
    return replace(model, throttle_efficiency=eff, throttle_measured=True), [Param(
        "throttle_efficiency", eff, "", tuple(runs), Throttle(min(fits), max(fits), dropped))]


def fit_slack(model: Model, disk: list[RunResult]) -> tuple[Model, list[Param]]:
    """Page cache the runs had beyond a budget that bound (under `SETTINGS.cache_binds` of
    the dataset): the median over the disk runs. A loader that reads ahead holds its buffer
    resident, read and not yet trained on (`read_ahead_bytes`: a shuffling DALI reader's
    files stay mapped, open, until it takes them): that is its own, not a cache the next
    epoch finds. Counted as slack, train_dali.py's 17 MB buffer made a budget of 85% hold
    the whole dataset, and the run was predicted at 1528 samples/s against 556."""
    binds = SETTINGS.cache_binds * model.dataset_bytes
    ahead = read_ahead_bytes(model)
    slack, runs = [], []
    for r in disk:
        budget = r.spec.resources.cache.cache_bytes
        had = effective_cache(r, model.dataset_bytes)
        if budget is not None and had is not None and had < binds:
            slack.append(max(0.0, had - budget - ahead) if ahead else had - budget)
            runs.append(r.run_id)
    if not slack:
        return model, [Param("cache_slack_bytes", None, "B", (),
                             Fixed(Reason.NO_BINDING_CACHE))]
    value = statistics.median(slack)
    return replace(model, cache_slack_bytes=value), [Param(
        "cache_slack_bytes", value, "B", tuple(runs), Slack(min(slack), max(slack)))]
