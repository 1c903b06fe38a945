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
  (`resources/cpuscale.py`, recorded with the runs), else 0 (said so). A law
  fitted on busy cores up to K holds up to K; each core beyond K adds the
  probe's contention (at most the fitted one; 0 without a probe). The
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

The laws for one configuration are `laws.py`'s; `rates.py` simulates one with
`pipeline.simulate`, which has the loop's structure (prefetch depth, in-order
delivery, the refill at each epoch start, a worker's read then decode, the
main process needing CPU). `whatif/calibrate.py` fits the parameters; a
prediction's interval (`intervals.py`) is the rate times exp(+-z sigma), sigma
propagated from what the rate depends on: the fit runs' residual log error
(degrees of freedom counted, scaled by `SETTINGS.fit_sigma_scale`) times the
rate's sensitivity to the loop's costs, the storage's own residual (scaled by
`SETTINGS.storage_sigma_scale`, at least `SETTINGS.storage_sigma_floor` for a
throttle the fit measured) times its sensitivity to the storage, a step on
the CPU's sharing of the cores (`SETTINGS.cpu_step_sigma`) times the loop's, and
`SETTINGS.untested_sigma` for each assumption of the prediction no fit run
tested (a throttle at face value: `SETTINGS.throttle_sigma`), weighted by the
side it is about; the constants calibrated on a tuning grid, each side apart
(`bench/interval_tuning.py`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from dsanalyze.config import CacheBudget, Resources
from dsanalyze.errors import ConfigError
from dsanalyze.plain import PlainJson
from dsanalyze.settings import SETTINGS
from dsanalyze.whatif import pipeline
from dsanalyze.whatif.heldout import HeldOut, run_cpus, run_layout
from dsanalyze.whatif.provenance import Provenance

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
    # a step on the CPU of one thread a rank (it takes turns with the workers): c_prep solved on
    # such runs (`fit_prep.fit_alone`); None: none, or out of bounds (c_prep is used there)
    prep_alone_cpu_s: float | None = None
    # the same per (CPU count, workers) such cached runs had (median of each count's, floored
    # as the one above): a worker count at that CPU count takes the nearest one's
    prep_alone_by_workers: tuple[tuple[int, int, float], ...] = ()
    main_cpu_s: float = 0.0  # CPU of a rank's main process per iteration
    receive_s: float = 0.0  # delay for the main process to take a ready batch (not CPU)
    miss_cpu_s_per_byte: float = 0.0
    read_amplification: float = 1.0  # storage bytes / the training loader's missed bytes
    throttle_efficiency: float = 1.0  # bandwidth a throttle gives / the throttle
    throttle_measured: bool = False  # fitted on throttled runs (else taken at face value)
    cache_slack_bytes: float = 0.0  # effective page cache - budget, in the fit runs
    startup_s: float = 0.0  # first iteration's extra wait (worker start-up)
    # CPU of each worker that is not persistent at each epoch start after the first
    restart_cpu_s: float = 0.0
    restart_main_cpu_s: float = 0.0  # the main process's share of the restart (`fit_restart`)
    params: tuple[Param, ...] = ()
    contention: float = 0.0  # c(k) = c_prep * (1 + contention * (k - 1))
    contention_probed: bool = False  # contention from the machine's probe, not the job's runs
    # the most busy cores a fitted law (two or more busy-core counts) was fitted on, and the
    # contention each core beyond them adds (`laws.contention_factor`); 0: the law everywhere
    contention_cores: int = 0
    contention_beyond: float = 0.0
    # CPU seconds per sample spent outside the job's cgroup, machine-wide (0: not measured)
    others_cpu_s_per_sample: float = 0.0  # loader and cached runs
    others_disk_cpu_s_per_sample: float = 0.0  # disk runs (the kernel's I/O work besides)
    allreduce_s: float = 0.0  # t_allreduce of the ring law
    device_read_bps: float | None = None  # the storage device (None: not measured)
    device_latency_s: float = 0.0
    # a read that misses holds its worker this long besides the device's latency, without CPU
    # (`fit_storage.fit_read_cpu`: fitted with the CPU per byte where the unthrottled disk runs
    # had more than one worker count; 0: not fitted)
    read_wait_s: float = 0.0
    # a throttle's unused budget the reads may bank for up to this long (blk-throttle's slice)
    throttle_slice_s: float = SETTINGS.throttle_slice_s
    rel_sigma: float = 0.05  # relative standard error of a predicted rate: the loop's costs
    # the storage's (the runs the storage held: their residual), None: not fitted (`intervals`)
    storage_rel_sigma: float | None = None
    step_ms: float | None = None  # the base job's sim step (sim device), for other step times
    measured_cpus: tuple[int, ...] = ()
    measured_ranks: tuple[int, ...] = ()
    measured_speedups: tuple[float, ...] = (1.0,)  # base step / each sim step a run measured
    machine_cpus: int | None = None
    loader: str = "pytorch"  # pytorch: workers are DataLoader workers; dali: DALI threads
    prefetch_factor: int = pipeline.PREFETCH_FACTOR  # batches in flight per worker, as run
    persistent_workers: bool = True  # False: the workers start again at every epoch (startup_s)
    # the files in a fresh permutation every epoch, or in the same order (`jobrun.SAME_ORDER`)
    same_order: bool = False
    read_ahead_samples: int = 0  # a rank's loader's reads beyond its samples (`JobAsRun`)
    held_buffer: int = 0  # its buffer of held files, handed out at random (`JobAsRun`)
    # a step on the CPU (the script's recorded device): its time per CPU count, fitted on the
    # synthetic runs of each; it runs in the main process, on the cores the workers use
    step_on_cpu: bool = False
    step_s_by_cpus: tuple[tuple[int, float], ...] = ()
    # the work between epochs (validation, a checkpoint) per CPU count a synthetic run
    # measured (`whatif/epochend.py`): it adds to every epoch, the workers idle meanwhile
    epoch_end_s_by_cpus: tuple[tuple[int, float], ...] = ()
    # such a step beside its loader: per (CPU count, workers), how many times longer the job's
    # CPU work takes than the sharing law says, fitted on those cached runs (`fit_stretch`)
    cpu_stretch_by_cpus: tuple[tuple[int, int, float], ...] = ()
    # those cached runs' cores busy (median, `window.window_cores_busy`), per (CPUs, workers)
    cores_busy_by_cpus: tuple[tuple[int, int, float], ...] = ()
    size_share: float = 0.0  # share of c_prep that scales with the sample's bytes (read+decode)
    fit_weights: dict[str, float] = field(default_factory=dict, compare=False)
    # each fit run's measured sigma / rate (block bootstrap): a floor on the intervals
    measured_sigma: dict[str, float] = field(default_factory=dict, compare=False)

    # the files' own bytes (a run's `dataset.total_bytes`), in which cache budgets are given;
    # 0: not recorded (budgets taken in pages)
    raw_dataset_bytes: int = 0

    @property
    def dataset_bytes(self) -> int:
        return int(sum(self.file_bytes))

    def to_dict(self) -> dict[str, Any]:
        return {"params": [p.to_dict() for p in self.params], "policy": self.policy,
                "layout": asdict(self.layout), "rel_sigma": self.rel_sigma, "level": LEVEL}
