"""How each model parameter was obtained, typed: which rule, and the numbers it used.

    Param("startup_s", 0.21, "s", ("cached-cpus2",), Fixed(Reason.STARTUP_WAIT))
    Param("receive_s", 0.002, "s", ids, ReceiveWait(runs=2, low_s=0.001, high_s=0.003))

One frozen dataclass per kind of provenance, carrying the numbers its words
quote (`report/params.py` words them); `Fixed` is a rule with no numbers of its
own. A provenance is stored as its fields plus `kind` (`Provenance.to_dict`)
and read back into its own class (`Provenance.from_dict`); the sentence an
older `validation.json` stored reads back as `Said`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from dsanalyze.plain import PlainJson, Tagged


class Provenance(Tagged):
    """A provenance's JSON carries its `kind`, by which `from_dict` finds its class."""

    KINDS: ClassVar[dict[str, type[Provenance]]] = {}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | str) -> Self:
        if isinstance(d, str):  # a sentence, as written before provenance was typed
            return Said(d)  # type: ignore[return-value]
        return super().from_dict(d)


class Reason(str, enum.Enum):
    """A rule that quotes no number of its own (`Fixed`): its name."""

    NOTHING_TO_PREDICT = "nothing_to_predict"  # rel_sigma: c_prep or the step unknown
    NO_TRANSFORM_TIMING = "no_transform_timing"  # prep_size_share
    PREP_COMPUTE_BOUND = "prep_compute_bound"  # c_prep: every cached run compute-bound
    MAIN_UNMEASURED = "main_unmeasured"  # main_cpu_s_per_iter, receive_s: no synthetic+cached
    NO_COMPUTE_BOUND_RUN = "no_compute_bound_run"  # receive_s
    NO_STARTUP_RUN = "no_startup_run"  # startup_s
    STARTUP_WAIT = "startup_wait"  # startup_s
    WORKERS_KEPT = "workers_kept"  # restart_cpu_s: persistent workers, or none
    NO_RESTART_RUN = "no_restart_run"  # restart_cpu_s: no cached run of two epochs or more
    OTHERS_PREDATE = "others_predate"  # others_cpu_s_per_sample: no machine-wide samples
    OTHERS_FROM_CACHED = "others_from_cached"  # the disk figure taken from the cached runs'
    DEVICE_PREDATES_PROBE = "device_predates_probe"  # device_read_bps
    DEVICE_LATENCY = "device_latency"  # device_latency_s
    THROTTLE_SLICE = "throttle_slice"  # throttle_slice_s: as the storage probe read it
    THROTTLE_SLICE_DEFAULT = "throttle_slice_default"  # throttle_slice_s: not recorded
    NO_UNTHROTTLED_RUN = "no_unthrottled_run"  # read_cpu_bps
    ONE_WORKER_COUNT = "one_worker_count"  # read_wait_s: no CPU count had two worker counts
    NO_WAIT_SHOWN = "no_wait_shown"  # read_wait_s: fewer workers were not slowed more
    NO_BINDING_CACHE = "no_binding_cache"  # cache_slack_bytes
    NO_STORAGE_BOUND_RUN = "no_storage_bound_run"  # storage_rel_sigma
    NO_AMPLIFICATION_RUN = "no_amplification_run"  # read_amplification
    NO_SYNTHETIC_RUN = "no_synthetic_run"  # ingest_sps
    ONE_RANK_COUNT = "one_rank_count"  # allreduce_s
    SAMPLES_PER_EPOCH = "samples_per_epoch"
    DATASET_BYTES = "dataset_bytes"


@dataclass(frozen=True)
class Said(Provenance):
    """A provenance in words, as an older document has it."""

    kind: ClassVar[str] = "said"
    text: str


@dataclass(frozen=True)
class Fixed(Provenance):
    kind: ClassVar[str] = "fixed"
    reason: Reason


@dataclass(frozen=True)
class Dropped(PlainJson):
    """A fitted value outside its physical bound (`whatif/bounds.py`), and its runs."""

    bound: str  # the bound's name: the parameter's
    value: float
    low: float
    high: float
    runs: tuple[str, ...]


class Sizes(str, enum.Enum):
    """Where the file sizes came from."""

    SCANNED = "scanned"  # the dataset's files, scanned by the caller
    QUANTILES = "quantiles"  # the size quantiles recorded with the run
    MEAN = "mean"  # the mean size only (not measured)


@dataclass(frozen=True)
class SampleSizes(Provenance):
    kind: ClassVar[str] = "sample_sizes"
    source: Sizes
    files: int  # scanned files (SCANNED), else 0
    root: str | None
    p5_bytes: int
    p50_bytes: int
    p95_bytes: int


@dataclass(frozen=True)
class SigmaDefault(Provenance):
    """Too few degrees of freedom: the default, at least the median measured noise."""

    kind: ClassVar[str] = "sigma_default"
    default: float
    noise: float
    runs: int
    calibrated: int


@dataclass(frozen=True)
class SigmaResidual(Provenance):
    kind: ClassVar[str] = "sigma_residual"
    runs: int
    dof: int
    noise: float
    floor: float
    z: float
    level: float


@dataclass(frozen=True)
class StorageSigma(Provenance):
    """The storage's sigma: `runs` residuals pooled with a `prior` pseudo-run, `floor`."""

    kind: ClassVar[str] = "storage_sigma"
    runs: int
    prior: float
    floor: float
    z: float
    level: float


@dataclass(frozen=True)
class SizeShare(Provenance):
    """The image loader's share of the timed prep: per-transform steps of one run quoted."""

    kind: ClassVar[str] = "size_share"
    runs: int
    steps_s: tuple[tuple[str, float], ...]  # (transform, mean seconds per sample)


@dataclass(frozen=True)
class ProbedContention(Provenance):
    kind: ClassVar[str] = "probed_contention"
    work: str | None
    solo_cpu_s: float
    parallel_cpu_s: float
    cpus: int


class Contention(str, enum.Enum):
    """Where c_prep's contention came from."""

    PROBED = "probed"  # the machine's parallel decode probe, one busy-core count measured
    FITTED = "fitted"  # fitted across busy cores
    ONE_COUNT = "one_count"  # one busy-core count, no probe: 0 (untested)
    LINEAR = "linear"  # fitted as 0 across busy cores
    REFITTED = "refitted"  # the law out of bounds: the fewest busy cores alone, 0


@dataclass(frozen=True)
class PrepLaw(Provenance):
    kind: ClassVar[str] = "prep_law"
    prep_cpu_s: float
    law: Contention
    contention: float
    cores: tuple[int, ...]
    dropped: Dropped | None = None  # REFITTED: the contention dropped
    beyond: float = 0.0  # FITTED: the contention each busy core beyond `cores` adds


@dataclass(frozen=True)
class PrepAlone(Provenance):
    """A step on the CPU of one thread a rank: the prep per sample on one busy core solved on
    each of `runs` such cached runs (median used), held at the bound's floor where it solved
    under it (`floored`), or dropped above the bound."""

    kind: ClassVar[str] = "prep_alone"
    runs: int
    low_s: float
    high_s: float
    dropped: Dropped | None = None
    floored: bool = False  # the median solved under the bound's floor: held there


@dataclass(frozen=True)
class PrepUnfitted(Provenance):
    """c_prep out of bounds from the rates: the workers' own timing (`timed_runs` > 0), else
    not measured."""

    kind: ClassVar[str] = "prep_unfitted"
    dropped: Dropped
    timed_runs: int = 0


@dataclass(frozen=True)
class MainLoop(Provenance):
    kind: ClassVar[str] = "main_loop"
    runs: int
    low_s: float
    high_s: float


@dataclass(frozen=True)
class CpuStretch(Provenance):
    """A step on the CPU beside its loader: at `cpus` CPUs and `workers` workers, the stretch
    of the job's CPU work that makes each of `runs` cached runs' simulated rate its measured
    one (median used)."""

    kind: ClassVar[str] = "cpu_stretch"
    cpus: int
    workers: int
    runs: int
    low: float
    high: float
    cores_busy: float | None = None  # those runs' cores busy (median), of `cpus`


@dataclass(frozen=True)
class WorkerRestart(Provenance):
    """Workers that start again at every epoch: each worker's CPU at each epoch start after
    the first that makes each of `runs` runs' simulated waits its measured ones (median used)."""

    kind: ClassVar[str] = "worker_restart"
    runs: int
    low_s: float
    high_s: float
    dropped: Dropped | None = None  # the median at the solver's limit: taken as 0


@dataclass(frozen=True)
class MainRestart(WorkerRestart):
    """The main process's share of the workers' restart: its CPU in its first iteration of
    each epoch after the first that makes each of `runs` runs' simulated first iterations
    their measured ones, given the workers' share (median used; `runs` 0: every run was at
    the solver's limit, `dropped` names them, and those of a median kept)."""

    kind: ClassVar[str] = "main_restart"


@dataclass(frozen=True)
class ReceiveWait(Provenance):
    kind: ClassVar[str] = "receive_wait"
    runs: int
    low_s: float
    high_s: float


@dataclass(frozen=True)
class OutsideWork(Provenance):
    """CPU outside the job's cgroup per sample, and the runs set aside as others' load."""

    kind: ClassVar[str] = "outside_work"
    machine_cpus: int
    background_cores: float
    runs: int
    foreign_factor: float
    foreign: tuple[tuple[str, float], ...] = ()  # (run id, CPU seconds per sample)


@dataclass(frozen=True)
class DeviceProbe(Provenance):
    kind: ClassVar[str] = "device_probe"
    runs: int
    low_bps: float
    high_bps: float


@dataclass(frozen=True)
class ReadCpu(Provenance):
    """The CPU per byte read: `contrast` across cache budgets, else the level of the runs
    without a page cache, at `cpus`; `measurable` False: reading costs no measurable CPU."""

    kind: ClassVar[str] = "read_cpu"
    contrast: bool
    cpus: int
    measurable: bool
    # with the wait a missed read holds its worker, on the disk runs' ratios to their cached
    # twins at every CPU and worker count (`cpus`: the fewest)
    wait_fitted: bool = False


@dataclass(frozen=True)
class ReadCpuDropped(Provenance):
    kind: ClassVar[str] = "read_cpu_dropped"
    dropped: Dropped


@dataclass(frozen=True)
class ReadAmplification(Provenance):
    """Storage bytes per byte the training loader missed: the median of `runs` disk runs
    (`low` to `high`), or dropped (`dropped`; then 1)."""

    kind: ClassVar[str] = "read_amplification"
    runs: int = 0
    low: float = 1.0
    high: float = 1.0
    dropped: Dropped | None = None


@dataclass(frozen=True)
class Throttle(Provenance):
    """One efficiency for every throttle (`low`, `high`: the cold epochs' range), or none
    (`low` None: `every_dropped` or no throttled run held)."""

    kind: ClassVar[str] = "throttle"
    low: float | None
    high: float | None
    dropped: tuple[Dropped, ...] = ()


@dataclass(frozen=True)
class Slack(Provenance):
    kind: ClassVar[str] = "slack"
    low_bytes: float
    high_bytes: float


@dataclass(frozen=True)
class StepMedian(Provenance):
    kind: ClassVar[str] = "step_median"
    runs: int
    step_s: float


@dataclass(frozen=True)
class RingLaw(Provenance):
    kind: ClassVar[str] = "ring_law"
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class CpuStep(Provenance):
    kind: ClassVar[str] = "cpu_step"
    cpus: int
    runs: int


@dataclass(frozen=True)
class EpochEndMedian(Provenance):
    """The work between epochs (`jobfit.epoch_end_s`): over `epochs` epoch ends of `runs`
    synthetic runs at `cpus` CPUs, the median of what their last iteration took beyond
    the run's median iteration."""

    kind: ClassVar[str] = "epoch_end_median"
    cpus: int
    runs: int
    epochs: int
