"""The what-if model: parameters with provenance, and one configuration simulated.

Measured parameters, each naming the runs it came from (`Param.value` is None,
with the reason, where the runs cannot give it):

- G(n), the ingestion rate of n ranks (synthetic runs). The step time is
  n * b / G per iteration; a GPU k times faster divides it by k; another rank
  count keeps it (perfect data-parallel scaling: an assumption, said so).
- P(c), the prep rate with c CPUs (loader-mode runs; cached runs when there
  are none and they are prep-bound), turned into the CPU seconds a worker
  spends per sample, so that c CPUs and w workers per rank combine: a worker
  uses at most one core.
- B, the storage bandwidth the job saw: the cold first epoch of throttled disk
  runs, where every read misses (its ratio to the throttle is reported).
- s and the size distribution (the dataset's files), N (samples per epoch).
- h(C): `cachesim` over the real file sizes for the job's access pattern.

`min(G, P, B / ((1 - h) s))` (docs/design.md) holds only if the stages overlap
perfectly. The model instead runs `pipeline.simulate`, which has the loop's
structure (prefetch depth, in-order delivery, the refill at each epoch start,
a worker's read then decode, the main process needing CPU). Its free
parameters are calibrated on the measured runs by `analysis/calibrate.py`:
the main process's CPU per iteration (cached vs loader runs), the CPU per byte
read from storage (unthrottled disk runs), the bandwidth a throttle really
gives (cold epochs), and the page cache runs really had over their budget
(the cgroup's file cache during their steady epochs).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from dsanalyze.analysis import cachesim, pipeline
from dsanalyze.config import Mode
from dsanalyze.errors import ConfigError
from dsanalyze.store import RunResult

SEEDS = 3  # permutations averaged per disk prediction
SIM_SAMPLES = 6000  # samples per simulated epoch; larger epochs are simulated on a sample
CACHE_BINDS = 0.97  # an effective cache under this share of the dataset limits hits
PREP_BOUND = 0.95  # a cached run below this share of G is prep-bound


@dataclass(frozen=True)
class Param:
    """One model parameter with its provenance."""

    name: str
    value: float | None
    unit: str
    runs: tuple[str, ...]
    how: str

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["runs"] = list(self.runs)
        return d


@dataclass(frozen=True)
class Config:
    """A configuration to predict. `cache_bytes` None: no limit; bandwidth None: as measured."""

    cpus: int
    cache_spec: str = "none"
    cache_bytes: int | None = None
    storage_read_bps: int | None = None
    gpu_speedup: float = 1.0
    nproc: int | None = None  # ranks; None: as measured
    workers: int | None = None  # DataLoader workers per rank (-j); None: as measured

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Model:
    """Fitted parameters and calibration of one job (one results prefix)."""

    ranks: int
    batch_size: int
    workers: int
    samples_per_epoch: int
    file_bytes: tuple[int, ...]  # page-rounded, as the page cache holds them
    layout: pipeline.Layout  # what `predict` predicts: a cold epoch, then at least 2 steady ones
    step_s: float | None  # compute per iteration
    prep_cpu_s: dict[int, float]  # CPUs -> worker CPU seconds per sample
    main_cpu_s: float
    miss_cpu_s_per_byte: float
    throttle_efficiency: dict[int, float]  # throttle (B/s) -> bandwidth seen / throttle
    cache_slack_bytes: float  # effective page cache - budget, in the measured runs
    startup_s: float  # first iteration's extra wait (worker start-up)
    policy: str
    params: tuple[Param, ...] = ()

    @property
    def dataset_bytes(self) -> int:
        return int(sum(self.file_bytes))

    def to_dict(self) -> dict[str, Any]:
        return {"params": [p.to_dict() for p in self.params], "policy": self.policy,
                "layout": asdict(self.layout)}


# ---- reading runs ---------------------------------------------------------------------------

def run_layout(result: RunResult) -> pipeline.Layout:
    r0 = result.ranks[0]
    batches = int(r0.extra.get("batches_per_epoch") or max(r0.epoch) + 1)
    return pipeline.Layout(max(r0.epoch) + 1, batches, len(r0.iter_s), r0.warmup)


def run_cpus(result: RunResult) -> int:
    cpus = result.spec.resources.cpus
    return int(cpus if cpus is not None else result.environment.get("cpus_available") or 1)


def _steady_window(result: RunResult) -> tuple[float, float]:
    r0 = result.ranks[0]
    t, start = r0.start_unix_s, None
    for i, dt in enumerate(r0.iter_s):
        if start is None and r0.epoch[i] != r0.epoch[0]:
            start = t
        t += dt
    return (r0.start_unix_s if start is None else start), t


def effective_cache(result: RunResult, dataset_bytes: int) -> float | None:
    """Page cache the run had: the cgroup's file cache averaged over its steady epochs.

    None when it is not recorded (no cgroup counters, no monitor samples).
    """
    if not result.ranks or not result.ranks[0].start_unix_s:
        return None
    lo, hi = _steady_window(result)
    values = [m["cache_bytes"] for m in result.monitor
              if "cache_bytes" in m and lo <= m.get("unix_s", 0.0) <= hi]
    return float(statistics.fmean(values)) if values else None


def file_sizes(result: RunResult, sizes: Sequence[int] | None) -> tuple[tuple[int, ...], Param]:
    """Page-rounded file sizes: given (scanned by the caller), recorded quantiles, or the mean."""
    ds = result.dataset
    n = int(ds.get("files") or 0)
    if sizes:
        how = f"the {len(sizes)} files of {ds.get('root', 'the dataset')}"
    elif ds.get("file_bytes_quantiles") and n:
        sizes = cachesim.sizes_from_quantiles(ds["file_bytes_quantiles"], n).tolist()
        how = "the size quantiles recorded with the run"
    elif n and ds.get("bytes"):
        sizes = [int(ds["bytes"] / n)] * n
        how = "not measured: no size distribution recorded and the dataset is gone; every file " \
              "taken as the mean size"
    else:
        raise ConfigError(f"run {result.run_id} records no dataset size: re-run it with harness.py")
    rounded = tuple(int(x) for x in cachesim.page_rounded(sizes))
    q = np.percentile(sizes, [5, 50, 95]).astype(int).tolist()
    return rounded, Param("sample_bytes", float(np.mean(sizes)), "B", (result.run_id,),
                          f"mean of {how}; p5/p50/p95 {q[0]}/{q[1]}/{q[2]} B")


# ---- simulation -----------------------------------------------------------------------------

def prep_cpu_for(model: Model, cpus: int) -> float:
    """Worker CPU seconds per sample at `cpus`: the nearest measured CPU count's."""
    if not model.prep_cpu_s:
        raise ConfigError("the prep rate was not measured: run harness.py with --modes loader "
                          "(or a prep-bound cached run)")
    nearest = min(model.prep_cpu_s, key=lambda c: (abs(c - cpus), -c))
    return model.prep_cpu_s[nearest]


def read_bps_for(model: Model, bps: int | None) -> float | None:
    """The bandwidth a throttle of `bps` gives, as calibrated (None: unthrottled)."""
    if bps is None:
        return None
    eff = model.throttle_efficiency.get(bps)
    if eff is None:
        eff = statistics.median(model.throttle_efficiency.values()) \
            if model.throttle_efficiency else 1.0
    return bps * eff


def workers_for(model: Model, cfg: Config) -> int:
    """DataLoader workers per rank in `cfg`: as measured unless it says otherwise.

    A worker's CPU per sample is taken as independent of the worker count; more
    workers than cores share them (the pipeline simulation's CPU budget).
    """
    return model.workers if cfg.workers is None else cfg.workers


def _pipe(model: Model, cfg: Config, mode: Mode, prep: float | None = None) -> pipeline.Pipeline:
    if model.step_s is None and mode is not Mode.LOADER:
        raise ConfigError("the compute rate G was not measured: run harness.py with --modes "
                          "synthetic,cached,disk")
    step = 0.0 if mode is Mode.LOADER else model.step_s / cfg.gpu_speedup
    return pipeline.Pipeline(
        ranks=cfg.nproc or model.ranks, workers=workers_for(model, cfg),
        batch_size=model.batch_size,
        cpus=cfg.cpus, step_s=step, main_cpu_s=model.main_cpu_s,
        prep_cpu_s=prep_cpu_for(model, cfg.cpus) if prep is None else prep,
        read_bps=read_bps_for(model, cfg.storage_read_bps) if mode is Mode.DISK else None,
        miss_cpu_s_per_byte=model.miss_cpu_s_per_byte)


def _misses(model: Model, ranks: int, workers: int, layout: pipeline.Layout,
            cache_bytes: float | None, mode: Mode, seed: int) -> tuple[list[np.ndarray], int]:
    """Bytes each simulated read misses, per epoch; and the simulated batches per epoch."""
    per_batch = model.batch_size * ranks
    depth = pipeline.PREFETCH_FACTOR * max(1, workers)
    batches = min(layout.batches, max(4 * depth, SIM_SAMPLES // per_batch))
    sizes = np.asarray(model.file_bytes)
    rng = np.random.default_rng(seed)
    files = len(sizes)
    if batches < layout.batches:  # a miniature dataset with the same sizes and C / D
        files = max(batches * per_batch, files * batches // layout.batches)
        sizes = sizes[rng.choice(len(sizes), files, replace=False)]
        if cache_bytes is not None:
            cache_bytes = cache_bytes * sizes.sum() / model.dataset_bytes
    batches = min(batches, files // per_batch)
    orders = [cachesim.epoch_order(files, rng, ranks, model.batch_size)[:batches * per_batch]
              for _ in range(layout.epochs)]
    if mode is not Mode.DISK:
        return [np.zeros(len(o)) for o in orders], batches
    cap = None if cache_bytes is None else int(cache_bytes)
    return cachesim.miss_bytes(sizes, cap, model.policy, orders), batches


def simulate_run(model: Model, cfg: Config, layout: pipeline.Layout, mode: Mode,
                 cache_bytes: float | None = None, seed: int = 0,
                 misses: list[np.ndarray] | None = None, sim_batches: int | None = None,
                 **override: float) -> pipeline.Timeline:
    """Rank 0's iterations for `cfg` over `layout`; `override` replaces pipeline fields."""
    ranks = cfg.nproc or model.ranks
    if misses is None:
        misses, sim_batches = _misses(model, ranks, workers_for(model, cfg), layout,
                                      cache_bytes, mode, seed)
    p = replace(_pipe(model, cfg, mode, override.pop("prep_cpu_s", None)), **override)
    sim_batches = sim_batches or layout.batches
    tl = pipeline.expand(pipeline.simulate(p, misses, sim_batches), sim_batches, layout)
    n = min(layout.iters, len(tl.iter_s))
    first = (tl.iter_s[0] + model.startup_s,) if n else ()
    return pipeline.Timeline(tl.wait_s[:n], first + tl.iter_s[1:n], tl.epoch[:n],
                             tl.samples_per_iter)


@dataclass(frozen=True)
class Rates:
    """Predicted rates of one configuration, averaged over permutations."""

    rate_sps: float  # steady window
    epoch1_sps: float | None  # cold first epoch (disk runs of two or more epochs)
    hit_rate: float | None  # byte hit rate in the steady window (disk)


def mean_rates(model: Model, cfg: Config, layout: pipeline.Layout, mode: Mode,
               cache_bytes: float | None, cold_first: bool | None = None,
               **override: float) -> Rates:
    """Simulated steady and cold rates (and hit rate) over the layout's windows."""
    cold_first = mode is Mode.DISK if cold_first is None else cold_first
    ranks = cfg.nproc or model.ranks
    out, hits = [], []
    # big epochs average over their own many reads: one permutation is enough
    varied = mode is Mode.DISK and cache_bytes is not None and layout.batches * ranks * \
        model.batch_size < SIM_SAMPLES
    for seed in range(SEEDS if varied else 1):
        misses, batches = _misses(model, ranks, workers_for(model, cfg), layout, cache_bytes,
                                  mode, seed)
        tl = simulate_run(model, cfg, layout, mode, misses=misses, sim_batches=batches,
                          **override)
        out.append(pipeline.window_rates(tl, layout, cold_first))
        if mode is Mode.DISK:
            steady = misses[1:] if cold_first and len(misses) > 1 else misses
            read = sum(float(m.sum()) for m in steady)
            hits.append(1 - read / max(1.0, sum(_accessed(model, m) for m in steady)))
    cold = [c for _, c in out if c is not None]
    return Rates(statistics.fmean(r for r, _ in out), statistics.fmean(cold) if cold else None,
                 statistics.fmean(hits) if hits else None)


def _accessed(model: Model, misses: np.ndarray) -> float:
    return len(misses) * model.dataset_bytes / len(model.file_bytes)


def run_cache(model: Model, run: RunResult, nominal: bool = False) -> tuple[float | None, str]:
    """Page cache a disk run is predicted with, and where the number comes from.

    The cache it really had (measured) unless `nominal`; else its budget plus
    the calibrated slack. None: the whole dataset fits.
    """
    budget = run.spec.resources.cache.cache_bytes
    if budget is None:
        return None, "no cache limit"
    measured = None if nominal else effective_cache(run, model.dataset_bytes)
    cache, how = (measured, "measured") if measured is not None else \
        (budget + model.cache_slack_bytes, "budget + slack")
    return (None if cache >= CACHE_BINDS * model.dataset_bytes else cache), how


def predict_run(model: Model, run: RunResult, nominal_cache: bool = False) -> Rates:
    """The model's rates for a stored run's configuration, over the run's own windows."""
    res = run.spec.resources
    cfg = Config(run_cpus(run), res.cache.spec, res.cache.cache_bytes, res.storage_read_bps,
                 workers=run.spec.job.workers)
    cache = run_cache(model, run, nominal_cache)[0] if run.mode is Mode.DISK else None
    return mean_rates(model, cfg, run_layout(run), run.mode, cache)
