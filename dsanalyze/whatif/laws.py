"""The model's numbers for one configuration: the cores, the prep, the step, the
bandwidth, the workers and the page cache a `Config` gets (each law of `model.py`'s
list), and a stored run's configuration as a `Config`."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace

from dsanalyze.config import Mode
from dsanalyze.errors import ConfigError
from dsanalyze.settings import SETTINGS
from dsanalyze.whatif import pipeline
from dsanalyze.whatif.heldout import HeldOut
from dsanalyze.whatif.model import Config, Model


def busy_cores(model: Model, cfg: Config) -> int:
    """Cores the workers can keep busy: min(CPUs, ranks * workers)."""
    return max(1, min(cfg.cpus, (cfg.nproc or model.ranks) * max(1, workers_for(model, cfg))))


def cores_beyond_fit(model: Model, cfg: Config) -> int:
    """`cfg`'s busy cores beyond the most a fitted contention law was fitted on
    (`Model.contention_cores`; 0 where it has no reach, or `cfg` lies within it)."""
    top = model.contention_cores
    return max(0, busy_cores(model, cfg) - top) if top else 0


def contention_factor(model: Model, cfg: Config) -> float:
    """The contention law's slowdown of a sample's prep in `cfg`: 1 + contention (k - 1), k
    the busy cores; a prep on one busy core times it is the prep there. Each core beyond the
    law's reach (`cores_beyond_fit`) adds `Model.contention_beyond` instead."""
    beyond = cores_beyond_fit(model, cfg)
    within = busy_cores(model, cfg) - beyond
    return 1 + model.contention * (within - 1) + model.contention_beyond * beyond


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
    """Worker CPU seconds per sample in `cfg`: the contention law, from c_prep, or where a
    step on the CPU runs one thread a rank (it takes turns with the workers, `gang_step`
    false) from the prep solved on such runs where one was (`Model.prep_alone_cpu_s`)."""
    if model.prep_cpu_s is None:
        raise ConfigError("the prep rate was not measured: run harness.py with --modes loader "
                          "(or a prep-bound cached run)")
    alone = model.prep_alone_cpu_s is not None and model.step_on_cpu \
        and not gang_step(model, cfg)
    base = prep_alone_for(model, cfg) if alone else model.prep_cpu_s
    return base * contention_factor(model, cfg)


def prep_alone_for(model: Model, cfg: Config) -> float | None:
    """The prep where a one-thread step takes turns with `cfg`'s workers: the one fitted at its
    CPU count and worker count, else at the nearest worker count fitted at that CPU count
    (`nearest`), else the median over every such run (`Model.prep_alone_cpu_s`)."""
    at = {k: x for c, k, x in model.prep_alone_by_workers if c == cfg.cpus}
    if not at:
        return model.prep_alone_cpu_s
    return at[nearest(at, workers_for(model, cfg))]


def read_bps_for(model: Model, bps: int | None) -> float | None:
    """The bandwidth the job gets: the device, or min(throttle * efficiency, device)."""
    if bps is None:
        return model.device_read_bps
    got = bps * model.throttle_efficiency
    return got if model.device_read_bps is None else min(got, model.device_read_bps)


def read_credit_bytes_for(model: Model, bps: int | None) -> float:
    """The budget a throttle leaves unused that its readers may bank: one slice of the rate
    the job gets from it (`pipeline`'s law); none without a throttle or where the device,
    not the throttle, sets the rate."""
    got = read_bps_for(model, bps)
    if bps is None or got is None or got < bps * model.throttle_efficiency:
        return 0.0
    return got * model.throttle_slice_s


def nearest(counts: Iterable[int], count: int) -> int:
    """The measured count a law carries to `count`: the nearest, the fewer on a tie."""
    return min(counts, key=lambda m: (abs(m - count), m))


def gang_step(model: Model, cfg: Config) -> bool:
    """A step on the CPU that runs more than one thread (more CPUs than ranks): a gang beside
    the workers. A one-thread step takes turns with them as the sharing law has it."""
    return model.step_on_cpu and cfg.cpus > (cfg.nproc or model.ranks)


def stretch_from(model: Model, cfg: Config) -> int | None:
    """The worker count whose fitted stretch `cfg` takes (`cpu_stretch`) where no cached run
    had `cfg`'s CPUs and workers: the nearest one fitted at its CPU count (the fewer on a tie);
    None where its own was fitted or none was at that CPU count."""
    at = [k for c, k, _ in model.cpu_stretch_by_cpus if c == cfg.cpus]
    k = workers_for(model, cfg)
    if not at or k in at:
        return None
    return nearest(at, k)


def cpu_stretch(model: Model, cfg: Config, mode: Mode) -> float:
    """How many times longer than the sharing law the job's CPU work takes at `cfg`'s CPU
    count, where a step on the CPU runs beside the loader (cached and disk runs; fitted per
    count on its cached runs, `fit_loop.fit_stretch`); 1 elsewhere."""
    if mode not in (Mode.CACHED, Mode.DISK):
        return 1.0
    at = {k: s for c, k, s in model.cpu_stretch_by_cpus if c == cfg.cpus}
    if not at:
        return 1.0
    carried = stretch_from(model, cfg)
    return at[workers_for(model, cfg) if carried is None else carried]


def held_gain(model: Model, cfg: Config) -> float | None:
    """Where `cfg` has more workers than the count whose stretch it carries (`stretch_from`)
    and that count's cached runs kept their cores full (at least `SETTINGS.saturated_share`
    of them busy): the most its cached rate may gain over that count's, CPUs / cores busy.
    The cores were full: more workers share the same cores with the step's threads (timm and
    examples at 2 CPUs, 0.95-0.99 busy, gained -1% to +2% from more workers; lightning with
    1 worker, 0.70 busy, +15% to +65%). None elsewhere: the sharing law's gain stands."""
    carried = stretch_from(model, cfg)
    if carried is None or workers_for(model, cfg) <= carried:
        return None
    busy = {k: b for c, k, b in model.cores_busy_by_cpus if c == cfg.cpus}.get(carried)
    if busy is None or busy < SETTINGS.saturated_share * cfg.cpus:
        return None
    return cfg.cpus / busy


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


def compute_sps(model: Model, cfg: Config) -> float:
    """G, the job's compute rate (samples/s over a node's ranks): its step and, once an
    epoch, the work between epochs."""
    ranks = cfg.nproc or model.ranks
    per_iter_s = step_for(model, cfg) + epoch_end_for(model, cfg) / model.layout.batches
    return ranks * model.batch_size / per_iter_s


def epoch_end_for(model: Model, cfg: Config) -> float:
    """The work between epochs at `cfg`'s CPU count: as measured there, else at the nearest
    CPU count measured (the fewer on a tie); 0 where no synthetic run had any."""
    by = dict(model.epoch_end_s_by_cpus)
    if not by:
        return 0.0
    return by[nearest(by, cfg.cpus)]


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


def read_ahead_bytes(model: Model) -> float:
    """The bytes a run's loaders read beyond the samples its training took: each rank's
    `Model.read_ahead_samples` of the mean file. A DALI reader that shuffles reads its
    1024-sample buffer before its first batch and keeps it about full to the end:
    train_dali.py over 3000 files of 12 KiB in pages, cache 0, two epochs, read 84.9 MB
    through its throttle, 6908 files for two epochs of 3000 (the read amplification fitted
    1.154 with the buffer counted as the samples' reads, 0.98 without)."""
    return model.read_ahead_samples * model.ranks * model.dataset_bytes / len(model.file_bytes)


def reread_share(model: Model, cache_bytes: float | None) -> float:
    """Storage bytes a sample reads beyond its misses, per byte of it: (a - 1) x the share
    of the dataset the cache cannot hold. The job's other reads of a file (a validation
    pass) are taken to hit where the cache holds the dataset's bytes, as a pass over the
    files in another order would (a cached share C / D), and to miss elsewhere: measured
    where the cache holds almost nothing (`fit_reads`), untested in between. A job that
    reads its files in the same order every epoch keeps none of them in a cache smaller
    than the dataset (`cachesim`), its other reads included."""
    share = uncached_share(model, cache_bytes)
    if model.same_order and share > 0:
        share = 1.0
    return (model.read_amplification - 1.0) * share


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


def run_cache(model: Model, run: HeldOut) -> float | None:
    """Page cache a disk run is predicted with: its budget plus the fitted slack (None:
    no limit, or the whole dataset fits). Read from the spec only."""
    budget = run.spec.resources.cache.cache_bytes
    if budget is None:
        return None
    return binding_cache(model, budget + model.cache_slack_bytes)


def binding_cache(model: Model, cache: float | None) -> float | None:
    """The page cache a prediction simulates, in the pages of `Model.file_bytes`: None
    (every file a hit after the first read) when there is no limit or it holds the dataset
    (`SETTINGS.cache_binds`), else the cache. `cache` is a budget as the harness holds it, in
    the files' own bytes (`--cache 50%` is half the dataset's bytes; the limiter counts a
    file's resident bytes up to its size): a budget holds as many files as its share of
    those, so it simulates as that share of their pages (`Model.raw_dataset_bytes`). With
    files of 10.6 KB in three pages, `--cache 100%` held every file while the simulation,
    taking it as 86% of their pages, kept none of a cyclic read."""
    if cache is None:
        return None
    if model.raw_dataset_bytes:
        cache = cache * model.dataset_bytes / model.raw_dataset_bytes
    return None if cache >= SETTINGS.cache_binds * model.dataset_bytes else cache


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
