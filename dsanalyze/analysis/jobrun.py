"""The job as it ran: the loader and step knobs the script itself used, read from its runs.

The harness's `-j`, `-b` and `--device` describe the built-in job only; a
user script sets its own DataLoader (workers, batch size, prefetch factor,
pinning, persistent workers) and its own device. Each rank records them
(`RankRecord.extra`: `loader` from `instrument.api.loader_settings`,
`device`, `world_size`; `samples` per iteration), and this module reads them
back as one value, `JobAsRun`, which the what-if model, the report and the
advice all use. The spec's values are a fallback only where a run recorded
nothing (runs from before these records, or a loader that is not a
DataLoader).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from dsanalyze.records import RunResult

PYTORCH_PREFETCH = 2  # DataLoader's default prefetch_factor (with workers)
# The order an epoch reads the files in: a fresh permutation every epoch (a shuffling
# sampler; DALI's reader with `shuffle_after_epoch`), or the same order every epoch (a
# DataLoader that does not shuffle a map-style dataset; DALI's file reader otherwise:
# `random_shuffle` mixes samples within a buffer of 1024 while the files are still read in
# list order), which a page cache smaller than the dataset never hits.
PERMUTATION, SAME_ORDER = "permutation", "same_order"


@dataclass(frozen=True)
class JobAsRun:
    """The knobs of the job as one run ran it (rank 0's record)."""

    ranks: int  # ranks of the whole job
    batch_size: int  # samples per rank per iteration
    workers: int  # DataLoader workers (DALI threads) per rank
    prefetch_factor: int  # batches in flight per worker
    pin_memory: bool
    persistent_workers: bool
    device: str  # where the step ran: sim, cpu, cuda
    loader: str  # pytorch, dali, or the loader's class name
    script: bool  # a user script (False: the built-in job)
    read_order: str = PERMUTATION  # PERMUTATION or SAME_ORDER
    # samples the loader reads beyond those the training takes, held at any time: a DALI
    # file reader with `random_shuffle` fills a buffer of `initial_fill` first, so a run's
    # storage reads hold that many samples more than it trained on (`fit_reads`)
    read_ahead_samples: int = 0
    # of those, a buffer whose files stay held until it hands them out at random, read in the
    # same order every epoch (a shuffling DALI file reader that maps its files): the order
    # the page cache sees (`cachesim.buffered_miss_bytes`); 0: none
    held_buffer: int = 0

    @property
    def step_uses_cpu(self) -> bool:
        """The step runs on the CPU, on the cores the loader uses."""
        return self.device == "cpu"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> JobAsRun:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


def run_cpus(run: RunResult) -> int:
    """The run's CPUs: as asked, else (`--cpus all`) the machine's count when it ran."""
    cpus = run.spec.resources.cpus
    return int(cpus if cpus is not None else run.environment.get("cpus_available") or 1)


def shares_cores(run: RunResult) -> bool:
    """The step runs on the CPU in more threads than the node has ranks (a thread per CPU, as
    torch starts them), beside DataLoader workers on the same cores. Its rate varies from
    run to run far more than a one-thread step's: the step's threads wait on each other
    while a worker holds one of their cores (on 2 cores, a script's cached runs lay up to
    33% from their mean where its 1-CPU runs lay within 7%)."""
    job = job_as_run(run)
    return job.step_uses_cpu and job.workers > 0 and run_cpus(run) > run.spec.job.nproc_per_node


def _device(run: RunResult, extra: dict[str, Any]) -> str:
    """The built-in job's `--device` (its `sim` step is not a torch device); a script's
    own record (`cuda:0` -> `cuda`)."""
    if run.spec.job.script is None or not extra.get("device"):
        return run.spec.job.device
    return str(extra["device"]).split(":")[0]


def _batch_size(run: RunResult, loader: dict[str, Any]) -> int:
    """The loader's batch size, else the largest batch rank 0 took, else `-b`."""
    if loader.get("batch_size"):
        return int(loader["batch_size"])
    samples = run.ranks[0].samples if run.ranks else ()
    return int(max(samples)) if samples else run.spec.job.batch_size


def job_as_run(run: RunResult) -> JobAsRun:
    """The job's knobs as `run` recorded them; the spec's where it recorded none."""
    job = run.spec.job
    extra = run.ranks[0].extra if run.ranks else {}
    loader = extra.get("loader") or {}
    kind = str(loader.get("kind") or job.loader)
    if kind == "dali":
        workers = loader.get("num_threads", job.workers)
        prefetch = loader.get("prefetch_queue_depth", PYTORCH_PREFETCH)
        # the built-in job's records before the key: it permuted
        order = PERMUTATION if loader.get("shuffle_after_epoch", True) else SAME_ORDER
        # runs recorded before the key: DALI's default buffer
        ahead = int(loader.get("initial_fill", 1024)) if loader.get("random_shuffle") else 0
        held = ahead if order == SAME_ORDER and not loader.get("dont_use_mmap", False) else 0
    else:
        workers = loader.get("workers", job.workers)
        prefetch = loader.get("prefetch_factor") or PYTORCH_PREFETCH
        order = SAME_ORDER if loader.get("same_order") else PERMUTATION
        ahead = held = 0
    return JobAsRun(
        ranks=int(extra.get("world_size") or job.world_size), batch_size=_batch_size(run, loader),
        workers=int(workers), prefetch_factor=int(prefetch),
        pin_memory=bool(loader.get("pin_memory", False)),
        # DALI's threads live as long as its pipeline; the built-in job keeps its workers
        # (runs recorded before the key: its own setting)
        persistent_workers=bool(loader.get("persistent_workers", kind == "dali" or (
            job.script is None and int(workers) > 0))),
        device=_device(run, extra), loader=kind, script=job.script is not None,
        read_order=order, read_ahead_samples=ahead, held_buffer=held)
