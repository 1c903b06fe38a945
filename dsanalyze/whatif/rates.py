"""One configuration simulated: the pipeline of a `Config` (`pipeline.simulate`) over
the bytes its page cache misses, its steady and cold rates (`Rates`, averaged over
permutations, on the cores the work outside the job leaves), and `predict_run`: a
stored run's rates as a prediction may see it (`HeldOut`)."""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from dsanalyze.config import Mode
from dsanalyze.settings import SETTINGS
from dsanalyze.whatif import cachesim, pipeline
from dsanalyze.whatif.heldout import HeldOut
from dsanalyze.whatif.laws import (
    cpu_stretch,
    epoch_end_for,
    held_gain,
    held_load,
    outside_load,
    prep_cpu_for,
    read_bps_for,
    read_credit_bytes_for,
    reread_share,
    run_cache,
    run_config,
    step_for,
    stretch_from,
    usable_cpus,
    workers_for,
)
from dsanalyze.whatif.model import Config, Model


def _pipe(model: Model, cfg: Config, mode: Mode, prep: float | None = None,
          cache_bytes: float | None = None, held: float = 0.0) -> pipeline.Pipeline:
    """The pipeline of `cfg` (a disk run's with `cache_bytes` of page cache); a step on the
    CPU is the main process's CPU work (it competes with the workers for the cores), else
    the step leaves the CPU free."""
    step = 0.0 if mode is Mode.LOADER else step_for(model, cfg)
    cpu_step = step / (1 - held) if model.step_on_cpu else 0.0  # `held_load`
    s = cpu_stretch(model, cfg, mode)
    reread = reread_share(model, cache_bytes) if mode is Mode.DISK else 0.0
    end_s = 0.0 if mode is Mode.LOADER else epoch_end_for(model, cfg)
    restarts_kept = model.persistent_workers or mode is Mode.SYNTHETIC \
        or workers_for(model, cfg) == 0
    return pipeline.Pipeline(
        ranks=cfg.nproc or model.ranks, workers=workers_for(model, cfg),
        batch_size=model.batch_size, prefetch_factor=model.prefetch_factor,
        cpus=cfg.cpus, step_s=0.0 if model.step_on_cpu else step,
        main_cpu_s=model.main_cpu_s * s,
        gang_step_s=cpu_step * s, gang_threads=cfg.cpus / (cfg.nproc or model.ranks),
        prep_cpu_s=(prep_cpu_for(model, cfg) if prep is None else prep) * s,
        read_bps=read_bps_for(model, cfg.storage_read_bps) if mode is Mode.DISK else None,
        read_credit_bytes=read_credit_bytes_for(model, cfg.storage_read_bps)
        if mode is Mode.DISK else 0.0,
        miss_cpu_s_per_byte=model.miss_cpu_s_per_byte * s,
        read_latency_s=model.device_latency_s + model.read_wait_s,
        size_share=model.size_share, receive_s=model.receive_s,
        reread_share=reread, restart_cpu_s=0.0 if restarts_kept else model.restart_cpu_s * s,
        restart_main_cpu_s=0.0 if restarts_kept else model.restart_main_cpu_s * s,
        epoch_end_s=end_s, epoch_read_bytes=_epoch_bytes(model, cfg) if end_s > 0 else 0.0,
        epoch_read_misses=reread * model.samples_per_epoch / cfg.nnodes if end_s > 0 else 0.0)


def _epoch_bytes(model: Model, cfg: Config) -> float:
    """A node's samples' bytes an epoch: what the job's other reads of its files, where the
    work between epochs makes them (a validation pass over them), are a share of."""
    per_sample = model.dataset_bytes / len(model.file_bytes)
    return per_sample * model.samples_per_epoch / cfg.nnodes


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
    orders = [cachesim.epoch_order(files, rng, ranks * nodes, model.batch_size, ranks,
                                   model.same_order)
              [:batches * model.batch_size * ranks] for _ in range(layout.epochs)]
    read = [sizes[o].astype(float) for o in orders]
    if mode is not Mode.DISK:
        return [np.zeros(len(o)) for o in orders], read, batches
    cap = None if cache_bytes is None else int(cache_bytes)
    if held_buffer(model, ranks * nodes):  # its buffer, as a share of the files simulated
        window = max(1, round(model.held_buffer * files / len(model.file_bytes)))
        missed = cachesim.buffered_miss_bytes(sizes, cap, layout.epochs, window, rng)
        return [m[:batches * model.batch_size] for m in missed], read, batches
    return cachesim.miss_bytes(sizes, cap, model.policy, orders), read, batches


def held_buffer(model: Model, readers: int) -> bool:
    """Whether the page cache sees the job's reads as one reader's held buffer
    (`Model.held_buffer`): one rank on one node (ranks' own buffers over their shards, sharing
    a node's cache, are simulated as the cyclic read they make together)."""
    return model.held_buffer > 0 and readers == 1


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
    if mode in (Mode.CACHED, Mode.DISK):
        model = held_stretch(model, cfg)
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


def held_stretch(model: Model, cfg: Config) -> Model:
    """The model with `cfg`'s worker count held to its cores (`laws.held_gain`): where more
    workers than a count whose cached runs kept their cores full would gain more than those
    cores allow, its CPU work stretched by the excess (a proportional step, on full cores the
    cached rate being about inversely proportional to the CPU work, then one secant step), as
    a fitted count of its own; the model itself elsewhere."""
    gain = held_gain(model, cfg)
    carried = stretch_from(model, cfg)
    if gain is None or carried is None:
        return model
    there = _mean_rates(model, replace(cfg, workers=carried), model.layout, Mode.CACHED,
                        None).rate_sps
    k = workers_for(model, cfg)

    @functools.cache
    def excess(s: float) -> float:  # ln(the cached rate at stretch s / the most it may be)
        m = replace(model, cpu_stretch_by_cpus=(*model.cpu_stretch_by_cpus, (cfg.cpus, k, s)))
        return math.log(_mean_rates(m, cfg, model.layout, Mode.CACHED, None).rate_sps
                        / (there * gain))
    s0 = cpu_stretch(model, cfg, Mode.CACHED)
    if excess(s0) <= 0:
        return model
    s = solve_stretch(excess, s0, 2)  # the proportional step, then one secant step
    return replace(model, cpu_stretch_by_cpus=(*model.cpu_stretch_by_cpus, (cfg.cpus, k, s)))


def solve_stretch(excess: Callable[[float], float], s: float, steps: int) -> float:
    """The stretch of the CPU work where `excess` (ln of the simulated rate over the one
    sought) is 0, from `s`, in `steps` evaluations: a secant on log rate against log stretch
    whose first step takes the rate as inversely proportional to the stretch and whose later
    ones the slope the steps so far measured (between -4 and -0.25, else proportional again)."""
    prev: tuple[float, float] | None = None  # the last step's (log stretch, excess)
    for _ in range(steps):
        here = (math.log(s), excess(s))
        slope = -1.0
        if prev is not None and here[0] != prev[0]:
            found = (here[1] - prev[1]) / (here[0] - prev[0])
            slope = found if -4.0 < found < -0.25 else slope
        s = math.exp(here[0] - here[1] / slope)
        prev = here
    return s


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
