"""The what-if model: parameters of the job and the hardware, and one configuration simulated.

Parameters, each naming the runs it came from (`Param.value` is None, with
the reason, where the runs cannot give it). None is solved per measured
configuration: each is one number for the job or the machine, or one law.

- t_step(n): the compute step per iteration of n ranks (synthetic runs of the
  base job). t_step(n) = t_compute + t_allreduce * 2 (n - 1) / n (a ring
  all-reduce); t_allreduce is fitted when synthetic runs of two rank counts
  exist, else taken as 0 (said so). `--gpu-speedup k` divides t_compute only.
- c_prep: worker CPU seconds per sample (decode, transforms, collation share),
  one number, with one contention law across CPU counts:
  c(k) = c_prep * (1 + contention * (k - 1)) for k busy cores,
  k = min(CPUs, ranks * workers); contention is fitted when runs of two or
  more CPU counts exist, else the machine's parallel decode probe's
  (`resources/cpuscale.py`, recorded with the runs), else 0 (said so). The
  image loader's share of it (per-transform timing) follows each sample's
  file bytes.
- Work outside the job's cgroup (the kernel's I/O and reclaim for it, the
  harness's monitor and cache limiter): CPU seconds per sample of the steady
  iterations, machine-wide, for disk runs and for the others. It runs on the
  cores the job leaves free; a configuration that wants more cores than the
  machine has free of it gets min(CPUs, machine - others' cores).
- A step on the CPU at every core of the machine is held by the outside work
  (`held_load`): it takes step / (1 - L), L that work's cores beyond the cached
  runs'; the interval carries the size of that effect (`Rates.held_rel`).
- The main process of each rank: its CPU per iteration and the delay to take
  a ready batch from a worker, both measured on the cached runs' timelines.
- The storage device: read bandwidth and per-request latency measured by the
  harness on the dataset's own files before each disk run
  (`resources/storage.py`). Unthrottled storage is this device; a throttle is
  min(throttle * throttle_efficiency, device), with one efficiency for every
  throttle (cold epochs). The CPU a worker spends per byte read (page-cache
  fill, reclaim) is one number too.
- a, the read amplification: storage bytes per byte the training loader
  misses, measured on the disk runs whose cache holds almost nothing
  (`fit_reads`): a job that reads its files again (a validation pass) reads
  (a - 1) x each sample's bytes more, in the share of the dataset its cache
  does not hold (`reread_share`).
- s and the size distribution (the dataset's files), N (samples per epoch).
- h(C): `cachesim` over the real file sizes for the job's access pattern, with
  C the budget plus one slack (the page cache, DataLoader shared memory
  excluded, that the fit runs really had beyond their budgets).

`pipeline.simulate` turns these into rates: it has the loop's structure
(prefetch depth, in-order delivery, the refill at each epoch start, a worker's
read then decode, the main process needing CPU). `whatif/calibrate.py` fits
the parameters; a prediction's interval is the rate times exp(+-z sigma) with
sigma the fit runs' residual log error (degrees of freedom counted) scaled by
`SETTINGS.fit_sigma_scale`, widened by `SETTINGS.untested_sigma` for each assumption of
the prediction no fit run tested; both calibrated on a tuning grid
(`bench/interval_tuning.py`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from dsanalyze.analysis.window import steady_window
from dsanalyze.config import CacheBudget, Mode, Resources
from dsanalyze.errors import ConfigError
from dsanalyze.plain import PlainJson
from dsanalyze.records import RunResult
from dsanalyze.settings import SETTINGS
from dsanalyze.whatif import cachesim, pipeline
from dsanalyze.whatif.assumptions import Assume, Assumption, Law
from dsanalyze.whatif.heldout import HeldOut, run_cpus, run_layout
from dsanalyze.whatif.provenance import Provenance, SampleSizes, Sizes

__all__ = ["HeldOut", "run_cpus", "run_layout"]  # read from here by the what-if's modules

LEVEL, Z = 0.9, 1.645  # the prediction intervals' nominal level and its normal quantile


@dataclass(frozen=True)
class Param(PlainJson):
    """One model parameter with its provenance (`report/params.py` words `how`)."""

    name: str
    value: float | None
    unit: str
    runs: tuple[str, ...]
    how: Provenance


@dataclass(frozen=True)
class Config:
    """A configuration to predict: the resources (`Resources.cpus` set; a cache budget
    without a limit: no limit; no throttle: the device) and the job's knobs."""

    resources: Resources
    gpu_speedup: float = 1.0
    nproc: int | None = None  # ranks (per node); None: as measured
    workers: int | None = None  # DataLoader workers (DALI threads) per rank; None: as measured
    nnodes: int = 1  # nodes, each with `cpus`, the cache budget and the storage of this one

    def __post_init__(self) -> None:
        if self.resources.cpus is None:
            raise ConfigError("a what-if configuration needs a CPU count")

    @classmethod
    def of(cls, cpus: int, cache: CacheBudget | None = None,
           storage_read_bps: int | None = None, **knobs: Any) -> Config:
        return cls(Resources(cpus, cache or CacheBudget(), storage_read_bps), **knobs)

    @property
    def cpus(self) -> int:
        return int(self.resources.cpus or 1)

    @property
    def cache(self) -> CacheBudget:
        return self.resources.cache

    @property
    def cache_spec(self) -> str:
        return self.resources.cache.spec

    @property
    def cache_bytes(self) -> int | None:
        return self.resources.cache.cache_bytes

    @property
    def storage_read_bps(self) -> int | None:
        return self.resources.storage_read_bps

    def with_cache(self, cache: CacheBudget | None = None) -> Config:
        """This configuration with another page-cache budget (default: no limit)."""
        return replace(self, resources=replace(self.resources, cache=cache or CacheBudget()))

    def to_dict(self) -> dict[str, Any]:
        return {**self.resources.to_dict(), "gpu_speedup": self.gpu_speedup,
                "nproc": self.nproc, "workers": self.workers, "nnodes": self.nnodes}


@dataclass(frozen=True)
class Model:
    """Parameters of one job (the base job of a results prefix) and of its machine."""

    ranks: int
    batch_size: int
    workers: int
    samples_per_epoch: int
    file_bytes: tuple[int, ...]  # page-rounded, as the page cache holds them
    layout: pipeline.Layout  # what `predict` predicts: a cold epoch, then at least 2 steady ones
    step_s: float | None  # compute per iteration at `ranks`, all-reduce included
    policy: str
    prep_cpu_s: float | None = None  # c_prep: worker CPU seconds per sample on one busy core
    main_cpu_s: float = 0.0  # CPU of a rank's main process per iteration
    receive_s: float = 0.0  # delay for the main process to take a ready batch (not CPU)
    miss_cpu_s_per_byte: float = 0.0
    read_amplification: float = 1.0  # storage bytes / the training loader's missed bytes
    throttle_efficiency: float = 1.0  # bandwidth a throttle gives / the throttle
    throttle_measured: bool = False  # fitted on throttled runs (else taken at face value)
    cache_slack_bytes: float = 0.0  # effective page cache - budget, in the fit runs
    startup_s: float = 0.0  # first iteration's extra wait (worker start-up)
    params: tuple[Param, ...] = ()
    contention: float = 0.0  # c(k) = c_prep * (1 + contention * (k - 1))
    contention_probed: bool = False  # contention from the machine's probe, not the job's runs
    # CPU seconds per sample spent outside the job's cgroup, machine-wide (0: not measured)
    others_cpu_s_per_sample: float = 0.0  # loader and cached runs
    others_disk_cpu_s_per_sample: float = 0.0  # disk runs (the kernel's I/O work besides)
    allreduce_s: float = 0.0  # t_allreduce of the ring law
    device_read_bps: float | None = None  # the storage device (None: not measured)
    device_latency_s: float = 0.0
    rel_sigma: float = 0.05  # relative standard error of a predicted rate
    step_ms: float | None = None  # the base job's sim step (sim device), for other step times
    measured_cpus: tuple[int, ...] = ()
    measured_ranks: tuple[int, ...] = ()
    measured_speedups: tuple[float, ...] = (1.0,)  # base step / each sim step a run measured
    machine_cpus: int | None = None
    loader: str = "pytorch"  # pytorch: workers are DataLoader workers; dali: DALI threads
    prefetch_factor: int = pipeline.PREFETCH_FACTOR  # batches in flight per worker, as run
    persistent_workers: bool = True  # False: the workers start again at every epoch (startup_s)
    # a step on the CPU (the script's recorded device): its time per CPU count, fitted on the
    # synthetic runs of each; it runs in the main process, on the cores the workers use
    step_on_cpu: bool = False
    step_s_by_cpus: tuple[tuple[int, float], ...] = ()
    size_share: float = 0.0  # share of c_prep that scales with the sample's bytes (read+decode)
    fit_weights: dict[str, float] = field(default_factory=dict, compare=False)
    # each fit run's measured sigma / rate (block bootstrap): a floor on the intervals
    measured_sigma: dict[str, float] = field(default_factory=dict, compare=False)

    @property
    def dataset_bytes(self) -> int:
        return int(sum(self.file_bytes))

    def to_dict(self) -> dict[str, Any]:
        return {"params": [p.to_dict() for p in self.params], "policy": self.policy,
                "layout": asdict(self.layout), "rel_sigma": self.rel_sigma, "level": LEVEL}


# ---- reading runs ---------------------------------------------------------------------------

def effective_cache(result: RunResult, dataset_bytes: int) -> float | None:
    """Page cache the run had, averaged over its steady epochs (`window.steady_window`, the
    iterations the rate counts): the dataset's resident bytes the harness's limiter sampled
    (`io.residency`), else (runs from before it) the cgroup's file cache less shared memory
    (DataLoader batches in /dev/shm, which v1 `cache` and v2 `file` count). Only fit runs
    are read this way. None when not recorded.
    """
    window = steady_window(result)
    span = window.span_unix_s() if window is not None else None
    if span is None:
        return None
    lo, hi = span
    held = result.io.residency  # the dataset's own pages, where the harness held the budget
    if held is not None:
        values = [b for t, b in zip(held.sample_unix_s, held.sample_bytes) if lo <= t <= hi]
        return float(statistics.fmean(values)) if values else None
    values = [m["cache_bytes"] - m.get("shmem_bytes", 0) for m in result.monitor
              if "cache_bytes" in m and lo <= m.get("unix_s", 0.0) <= hi]
    return float(statistics.fmean(values)) if values else None


def file_sizes(result: RunResult, sizes: Sequence[int] | None) -> tuple[tuple[int, ...], Param]:
    """Page-rounded file sizes: given (scanned by the caller), recorded quantiles, or the mean."""
    ds = result.dataset
    n = ds.num_files
    if sizes:
        source, files = Sizes.SCANNED, len(sizes)
    elif ds.file_bytes_quantiles and n:
        sizes = cachesim.sizes_from_quantiles(list(ds.file_bytes_quantiles), n).tolist()
        source, files = Sizes.QUANTILES, 0
    elif n and ds.total_bytes:
        sizes = [int(ds.total_bytes / n)] * n
        source, files = Sizes.MEAN, 0
    else:
        raise ConfigError(f"run {result.run_id} records no dataset size: re-run it with harness.py")
    rounded = tuple(int(x) for x in cachesim.page_rounded(sizes))
    q = np.percentile(sizes, [5, 50, 95]).astype(int).tolist()
    how = SampleSizes(source, files, ds.root, q[0], q[1], q[2])
    return rounded, Param("sample_bytes", float(np.mean(sizes)), "B", (result.run_id,), how)


# ---- simulation -----------------------------------------------------------------------------

def busy_cores(model: Model, cfg: Config) -> int:
    """Cores the workers can keep busy: min(CPUs, ranks * workers)."""
    return max(1, min(cfg.cpus, (cfg.nproc or model.ranks) * max(1, workers_for(model, cfg))))


def outside_load(model: Model, cfg: Config, mode: Mode) -> tuple[float, float] | None:
    """(CPU seconds per sample outside the job's cgroup, cores of the machine) for `cfg`, or
    None where not measured. A configuration with more CPUs than this machine is taken to
    have a machine of its own size."""
    per_sample = model.others_disk_cpu_s_per_sample if mode is Mode.DISK else \
        model.others_cpu_s_per_sample
    if not per_sample or not model.machine_cpus:
        return None
    return per_sample, float(max(model.machine_cpus, cfg.cpus))


def usable_cpus(model: Model, cfg: Config, mode: Mode, rate_sps: float) -> float:
    """Cores the job's processes get in `cfg` at a rate of `rate_sps` (one node's, as
    simulated): its CPUs, less the work outside its cgroup (others' CPU per sample x the
    rate) beyond the cores of the machine it leaves free: min(CPUs, machine - others)."""
    load = outside_load(model, cfg, mode)
    if load is None or not math.isfinite(rate_sps):
        return float(cfg.cpus)
    per_sample, machine = load
    return max(cfg.cpus / 2, min(float(cfg.cpus), machine - per_sample * rate_sps))


def prep_cpu_for(model: Model, cfg: Config) -> float:
    """Worker CPU seconds per sample in `cfg`: the contention law."""
    if model.prep_cpu_s is None:
        raise ConfigError("the prep rate was not measured: run harness.py with --modes loader "
                          "(or a prep-bound cached run)")
    return model.prep_cpu_s * (1 + model.contention * (busy_cores(model, cfg) - 1))


def read_bps_for(model: Model, bps: int | None) -> float | None:
    """The bandwidth the job gets: the device, or min(throttle * efficiency, device)."""
    if bps is None:
        return model.device_read_bps
    got = bps * model.throttle_efficiency
    return got if model.device_read_bps is None else min(got, model.device_read_bps)


def step_for(model: Model, cfg: Config) -> float:
    """t_step(n) / iteration: t_compute / k + t_allreduce * 2 (n - 1) / n."""
    if model.step_s is None:
        raise ConfigError("the compute rate G was not measured: run harness.py with --modes "
                          "synthetic,cached,disk")
    ring = lambda n: 2 * (n - 1) / n  # noqa: E731
    compute = _base_step(model, cfg) - model.allreduce_s * ring(model.ranks)
    return compute / cfg.gpu_speedup + model.allreduce_s * ring(job_ranks(model, cfg))


def _base_step(model: Model, cfg: Config) -> float:
    """t_step at the base ranks: one number, or (a step on the CPU) the one measured at
    `cfg`'s CPU count; a CPU count without a synthetic run is refused."""
    if not model.step_on_cpu:
        return float(model.step_s or 0.0)
    by = dict(model.step_s_by_cpus)
    if cfg.cpus not in by:
        raise ConfigError(
            f"the script's step runs on the CPU and was measured at {sorted(by)} CPU(s) only: "
            f"its time at {cfg.cpus} CPUs is not known (it shares the cores with the loader); "
            f"measure it: harness.py --cpus {cfg.cpus} --modes synthetic,cached,disk")
    return by[cfg.cpus]


def job_ranks(model: Model, cfg: Config) -> int:
    """Ranks of the whole job: ranks per node x nodes."""
    return (cfg.nproc or model.ranks) * cfg.nnodes


def workers_for(model: Model, cfg: Config) -> int:
    """DataLoader workers per rank in `cfg`: as measured unless it says otherwise.

    A worker's CPU per sample is taken as independent of the worker count; more
    workers than cores share them (the pipeline simulation's CPU budget).
    """
    return model.workers if cfg.workers is None else cfg.workers


def uncached_share(model: Model, cache_bytes: float | None) -> float:
    """The share of the dataset a page cache of `cache_bytes` (None: no limit) cannot hold."""
    if cache_bytes is None or not model.dataset_bytes:
        return 0.0
    return max(0.0, 1.0 - cache_bytes / model.dataset_bytes)


def reread_share(model: Model, cache_bytes: float | None) -> float:
    """Storage bytes a sample reads beyond its misses, per byte of it: (a - 1) x the share
    of the dataset the cache cannot hold. The job's other reads of a file (a validation
    pass) are taken to hit where the cache holds the dataset's bytes, as a pass over the
    files in another order would (a cached share C / D), and to miss elsewhere: measured
    where the cache holds almost nothing (`fit_reads`), untested in between."""
    return (model.read_amplification - 1.0) * uncached_share(model, cache_bytes)


def held_load(model: Model, cfg: Config, mode: Mode, rate_sps: float) -> float:
    """The share of time a step on the CPU is held by the work outside the job's cgroup
    (the kernel's reads, the harness's monitor and limiter), at a rate of `rate_sps`: a step
    whose threads take every core of the machine waits at its barriers for a thread that
    work preempted while its other threads spin, so the outside load L (cores) holds the
    whole step L of its time: it takes step / (1 - L). L is the disk runs' outside CPU per
    sample beyond the cached runs' (whose loop time, where the main process's CPU is
    measured, holds theirs) x the rate, at most half. With fewer CPUs than the machine the
    outside work runs on the cores the job leaves free: 0."""
    if not model.step_on_cpu or mode is not Mode.DISK or not model.machine_cpus \
            or cfg.cpus < model.machine_cpus or not math.isfinite(rate_sps):
        return 0.0
    extra = max(0.0, model.others_disk_cpu_s_per_sample - model.others_cpu_s_per_sample)
    return min(0.5, extra * rate_sps)


def _pipe(model: Model, cfg: Config, mode: Mode, prep: float | None = None,
          cache_bytes: float | None = None, held: float = 0.0) -> pipeline.Pipeline:
    """The pipeline of `cfg` (a disk run's with `cache_bytes` of page cache); a step on the
    CPU is the main process's CPU work (it competes with the workers for the cores), else
    the step leaves the CPU free."""
    step = 0.0 if mode is Mode.LOADER else step_for(model, cfg)
    cpu_step = step / (1 - held) if model.step_on_cpu else 0.0  # `held_load`
    return pipeline.Pipeline(
        ranks=cfg.nproc or model.ranks, workers=workers_for(model, cfg),
        batch_size=model.batch_size, prefetch_factor=model.prefetch_factor,
        cpus=cfg.cpus, step_s=0.0 if model.step_on_cpu else step, main_cpu_s=model.main_cpu_s,
        gang_step_s=cpu_step, gang_threads=cfg.cpus / (cfg.nproc or model.ranks),
        prep_cpu_s=prep_cpu_for(model, cfg) if prep is None else prep,
        read_bps=read_bps_for(model, cfg.storage_read_bps) if mode is Mode.DISK else None,
        miss_cpu_s_per_byte=model.miss_cpu_s_per_byte, read_latency_s=model.device_latency_s,
        size_share=model.size_share, receive_s=model.receive_s,
        reread_share=reread_share(model, cache_bytes) if mode is Mode.DISK else 0.0)


def _misses(model: Model, ranks: int, workers: int, layout: pipeline.Layout,
            cache_bytes: float | None, mode: Mode, seed: int, nodes: int = 1
            ) -> tuple[list[np.ndarray], list[np.ndarray], int]:
    """Bytes each simulated read of one node misses, per epoch; the bytes of each read
    (hit or miss); and the simulated batches per epoch. With several nodes each node's
    page cache sees its own ranks' share."""
    per_batch = model.batch_size * ranks * nodes  # samples of one step of the whole job
    depth = model.prefetch_factor * max(1, workers)
    batches = min(layout.batches, max(4 * depth, SETTINGS.sim_samples // per_batch))
    sizes = np.asarray(model.file_bytes)
    rng = np.random.default_rng(seed)
    files = len(sizes)
    samples = layout.batches * per_batch
    if samples > files:  # shards or mapped files of many samples: a sample, a share of one
        files = batches * per_batch  # the miniature's samples, drawn over the files' sizes
        sizes = np.maximum(1, sizes[rng.choice(len(sizes), files)] * len(sizes) // samples)
    elif batches < layout.batches:  # a miniature dataset with the same sizes and C / D
        files = max(batches * per_batch, files * batches // layout.batches)
        sizes = sizes[rng.choice(len(sizes), files, replace=False)]
    if cache_bytes is not None and files != len(model.file_bytes):
        cache_bytes = cache_bytes * sizes.sum() / model.dataset_bytes
    batches = min(batches, files // per_batch)
    orders = [cachesim.epoch_order(files, rng, ranks * nodes, model.batch_size, ranks)
              [:batches * model.batch_size * ranks] for _ in range(layout.epochs)]
    read = [sizes[o].astype(float) for o in orders]
    if mode is not Mode.DISK:
        return [np.zeros(len(o)) for o in orders], read, batches
    cap = None if cache_bytes is None else int(cache_bytes)
    return cachesim.miss_bytes(sizes, cap, model.policy, orders), read, batches


def simulate_run(model: Model, cfg: Config, layout: pipeline.Layout, mode: Mode,
                 cache_bytes: float | None = None, seed: int = 0,
                 sim: tuple[list[np.ndarray], list[np.ndarray], int] | None = None,
                 **override: float) -> pipeline.Timeline:
    """Rank 0's iterations for `cfg` over `layout`; `sim`: `_misses`'s answer if the
    caller has it; `override` replaces pipeline fields."""
    ranks = cfg.nproc or model.ranks
    if sim is None:
        sim = _misses(model, ranks, workers_for(model, cfg), layout, cache_bytes, mode, seed,
                      cfg.nnodes)
    misses, read, sim_batches = sim
    p = replace(_pipe(model, cfg, mode, override.pop("prep_cpu_s", None), cache_bytes,
                      override.pop("held_load", 0.0)), **override)
    layout = rated_layout(layout)
    tl = pipeline.expand(pipeline.simulate(p, misses, sim_batches, read), sim_batches, layout)
    n = min(layout.iters, len(tl.iter_s))
    # the workers start before the first batch; without persistent workers, at every epoch
    once = model.persistent_workers or workers_for(model, cfg) == 0 or mode is Mode.SYNTHETIC
    starts = {0} if once else {i for i in range(n) if i == 0 or tl.epoch[i] != tl.epoch[i - 1]}
    iters = tuple(t + model.startup_s if i in starts else t for i, t in enumerate(tl.iter_s[:n]))
    return pipeline.Timeline(tl.wait_s[:n], iters, tl.epoch[:n], tl.samples_per_iter)


def rated_layout(layout: pipeline.Layout) -> pipeline.Layout:
    """The layout a timeline is stretched to and rated over: epochs of at most
    `SETTINGS.rated_batches` (an epoch of shards of millions of samples would be a list of
    millions of
    iterations); its iterations cut at the same point of the same epoch. The rates differ by
    the share of an epoch the simulated refill and drain take, under 1/SETTINGS.rated_batches."""
    if layout.batches <= SETTINGS.rated_batches:
        return layout
    full, part = divmod(layout.iters, layout.batches)
    return replace(layout, batches=SETTINGS.rated_batches,
                   iters=full * SETTINGS.rated_batches + min(part, SETTINGS.rated_batches))


@dataclass(frozen=True)
class Rates:
    """Predicted rates of one configuration, averaged over permutations."""

    rate_sps: float  # steady window
    epoch1_sps: float | None  # cold first epoch (disk runs of two or more epochs)
    hit_rate: float | None  # byte hit rate in the steady window (disk)
    # ln(rate without / with the step held by the outside work, `held_load`): how much of the
    # rate rests on that law, whose size the runs measure loosely (it widens the interval)
    held_rel: float = 0.0


def mean_rates(model: Model, cfg: Config, layout: pipeline.Layout, mode: Mode,
               cache_bytes: float | None, cold_first: bool | None = None,
               **override: float) -> Rates:
    """Simulated steady and cold rates (and hit rate) over the layout's windows; where the
    work outside the job's cgroup takes part of its cores (`usable_cpus` at the rate
    simulated with all of them), simulated once more on the cores left. A step on the CPU
    held by that work (`held_load`) is simulated at the load of the rate without it, then
    of the rate with it (two steps towards the fixed point, from either side)."""
    full = free = _mean_rates(model, cfg, layout, mode, cache_bytes, cold_first, **override)
    for _ in range(2):
        held = held_load(model, cfg, mode, full.rate_sps)
        if not held:
            break
        override = {**override, "held_load": held}
        full = _mean_rates(model, cfg, layout, mode, cache_bytes, cold_first, **override)
    full = replace(full, held_rel=math.log(free.rate_sps / full.rate_sps))
    cores = usable_cpus(model, cfg, mode, full.rate_sps)
    if cores >= cfg.cpus:
        return full

    def at(x: float) -> Rates:
        return _mean_rates(model, cfg, layout, mode, cache_bytes, cold_first,
                           **{**override, "cpus": x})
    rates = replace(at(cores), held_rel=full.held_rel)
    # fewer cores, a lower rate, less outside work: the fixed point of
    # u = machine - per_sample * rate(u), the rate linear between the two simulations
    per_sample, machine = outside_load(model, cfg, mode) or (0.0, 0.0)
    slope = (full.rate_sps - rates.rate_sps) / (cfg.cpus - cores)
    settled = (machine - per_sample * (rates.rate_sps - slope * cores)) / (1 + per_sample * slope)
    settled = max(cfg.cpus / 2, min(float(cfg.cpus), settled))
    if abs(settled - cores) > SETTINGS.settled * cores:
        return replace(at(settled), held_rel=full.held_rel)
    return rates


def _mean_rates(model: Model, cfg: Config, layout: pipeline.Layout, mode: Mode,
                cache_bytes: float | None, cold_first: bool | None = None,
                **override: float) -> Rates:
    cold_first = mode is Mode.DISK if cold_first is None else cold_first
    ranks = cfg.nproc or model.ranks
    out, hits = [], []
    # big epochs average over their own many reads: one permutation is enough
    varied = mode is Mode.DISK and bool(cache_bytes) and layout.batches * ranks * \
        model.batch_size < SETTINGS.sim_samples  # no cache (0) misses everything in any order
    for seed in range(SETTINGS.seeds if varied else 1):
        sim = _misses(model, ranks, workers_for(model, cfg), layout, cache_bytes, mode, seed,
                      cfg.nnodes)
        misses, reads = sim[0], sim[1]
        tl = simulate_run(model, cfg, layout, mode, cache_bytes, sim=sim, **override)
        out.append(pipeline.window_rates(tl, rated_layout(layout), cold_first))
        if mode is Mode.DISK:
            skip = 1 if cold_first and len(misses) > 1 else 0
            missed = sum(float(m.sum()) for m in misses[skip:])
            hits.append(1 - missed / max(1.0, sum(float(r.sum()) for r in reads[skip:])))
    cold = [c for _, c in out if c is not None]
    return Rates(statistics.fmean(r for r, _ in out), statistics.fmean(cold) if cold else None,
                 statistics.fmean(hits) if hits else None)


def run_cache(model: Model, run: HeldOut) -> float | None:
    """Page cache a disk run is predicted with: its budget plus the fitted slack (None:
    no limit, or the whole dataset fits). Read from the spec only."""
    budget = run.spec.resources.cache.cache_bytes
    if budget is None:
        return None
    return binding_cache(model, budget + model.cache_slack_bytes)


def binding_cache(model: Model, cache: float | None) -> float | None:
    """The page cache a prediction simulates: None (every file a hit after the first read)
    when there is no limit or it holds the dataset (`SETTINGS.cache_binds`), else the cache."""
    return None if cache is None or cache >= SETTINGS.cache_binds * model.dataset_bytes else cache


def run_config(model: Model, run: HeldOut) -> Config:
    """A stored run's configuration as a what-if Config: its spec, its CPUs as resolved at
    sweep time and its workers as the script ran them.

    Another sim step time is a GPU speed-up of base step / its step; other rank
    counts and worker counts are the Config's own knobs.
    """
    res, job = run.spec.resources, run.spec.job
    speedup = model.step_ms / job.sim_step_ms if model.step_ms and run.job.device == "sim" \
        else 1.0
    return Config(replace(res, cpus=run.cpus), gpu_speedup=speedup, nproc=job.world_size,
                  workers=run.job.workers)


def layout_for(model: Model, ranks: int, layout: pipeline.Layout | None = None
               ) -> tuple[pipeline.Layout, int]:
    """A layout for another rank count (the dataset split in more shards), and the samples
    of one epoch."""
    layout = layout or model.layout
    if ranks == model.ranks:
        return layout, model.samples_per_epoch
    samples = max(len(model.file_bytes), model.samples_per_epoch)  # shards: many per file
    batches = samples // ranks // model.batch_size
    if batches < 1:
        raise ConfigError(f"{ranks} ranks of {model.batch_size} samples need more files than "
                          f"the dataset's {len(model.file_bytes)}")
    iters = min(layout.iters, layout.epochs * batches)
    return (replace(layout, batches=batches, iters=iters, warmup=min(layout.warmup, batches - 1)),
            batches * model.batch_size * ranks)


def predict_run(model: Model, run: HeldOut) -> Rates:
    """The model's rates for a stored run's configuration, over the run's own windows.

    Sees the run only as a `HeldOut`: its spec, CPUs, knobs and iteration layout
    (how many epochs and iterations it ran), nothing it measured.
    """
    if not isinstance(run, HeldOut):
        raise TypeError("predict_run takes a HeldOut (HeldOut.of(run)), never a measured run")
    cfg, layout = run_config(model, run), run.layout
    cache = run_cache(model, run) if run.mode is Mode.DISK else None
    return mean_rates(model, cfg, layout, run.mode, cache)


def rel_sigma_for(model: Model, cfg: Config) -> float:
    """The relative standard error of a prediction for `cfg`: the fit's own sigma scaled by
    `SETTINGS.fit_sigma_scale`, widened by `SETTINGS.untested_sigma` for each assumption of
    `untested` (both calibrated by bench/interval_tuning.py)."""
    return math.sqrt((SETTINGS.fit_sigma_scale * model.rel_sigma) ** 2
                     + len(untested(model, cfg)) * SETTINGS.untested_sigma ** 2)


def interval(model: Model, cfg: Config, rate_sps: float, held_rel: float = 0.0
             ) -> tuple[float, float]:
    """The rate's interval at the nominal level: rate x exp(-+z sigma); a step held by the
    outside work (`Rates.held_rel`) adds the size of that effect to sigma, in quadrature:
    the runs measure it loosely (the scripts bench's disk runs at every core of the machine
    were held from nil to twice as long as the law says)."""
    k = math.exp(Z * math.hypot(rel_sigma_for(model, cfg), held_rel))
    return rate_sps / k, rate_sps * k


def _cpu_assumptions(model: Model, cfg: Config) -> list[Assumption]:
    top = max(model.measured_cpus, default=0)
    out = []
    if cfg.cpus > top:
        law = Law.PROBED if model.contention_probed else Law.CONTENTION if model.contention \
            else Law.LINEAR
        out.append(Assumption(Assume.BEYOND_CPUS, cpus=cfg.cpus, measured_cpus=top, law=law))
    elif cfg.cpus not in model.measured_cpus and len(model.measured_cpus) == 1:
        out.append(Assumption(Assume.ONE_CPU_COUNT, cpus=cfg.cpus, measured_cpus=top,
                              law=Law.PROBED if model.contention_probed else None))
    if model.machine_cpus and cfg.cpus > model.machine_cpus:
        out.append(Assumption(Assume.MACHINE_CPUS, cpus=cfg.cpus,
                              machine_cpus=model.machine_cpus))
    return out


def _storage_assumptions(model: Model, cfg: Config) -> list[Assumption]:
    bps = cfg.storage_read_bps
    out = []
    if bps is not None and not model.throttle_measured:
        out.append(Assumption(Assume.THROTTLE))
    if model.device_read_bps is None and (bps is None):
        out.append(Assumption(Assume.NO_DEVICE))
    elif model.device_read_bps is not None and bps is not None and bps > model.device_read_bps:
        out.append(Assumption(Assume.ABOVE_DEVICE))
    # a cache that holds part of the dataset: the re-reads' hits there were not measured; they
    # matter where they move the bytes read by more than the run-to-run noise
    cache = binding_cache(model, None if cfg.cache_bytes is None else
                          cfg.cache_bytes + model.cache_slack_bytes)
    uncached = uncached_share(model, cache)
    if uncached < SETTINGS.reread_uncached and \
            abs(model.read_amplification - 1) * uncached > SETTINGS.noise_floor:
        out.append(Assumption(Assume.REREADS, amplification=model.read_amplification))
    return out


def untested(model: Model, cfg: Config) -> tuple[Assumption, ...]:
    """The assumptions a prediction for `cfg` rests on that no fit run tested
    (`report/assumptions.py` words them)."""
    out = _cpu_assumptions(model, cfg)
    if cfg.nnodes > 1:
        out.append(Assumption(Assume.NODES, nodes=cfg.nnodes))
    ranks = job_ranks(model, cfg)
    if ranks not in model.measured_ranks:
        out.append(Assumption(Assume.RANKS, ranks=ranks, ring=bool(model.allreduce_s)))
    if round(cfg.gpu_speedup, 3) not in {round(x, 3) for x in model.measured_speedups}:
        out.append(Assumption(Assume.FASTER_STEP, speedup=cfg.gpu_speedup))
    if model.loader == "dali":
        out.append(Assumption(Assume.DALI))
    if workers_for(model, cfg) != model.workers:
        out.append(Assumption(Assume.WORKERS, workers=workers_for(model, cfg),
                              measured_workers=model.workers))
    return tuple(out + _storage_assumptions(model, cfg))
