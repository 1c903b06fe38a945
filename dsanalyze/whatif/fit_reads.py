"""Read amplification: the storage bytes a disk run read per byte its training loader missed.

A job can read its files more than once per training sample: a Lightning
module's validation loader over the training files reads every file again each
epoch (the scripts bench's Lightning script: 95 MB read for 720 training samples
of a 15 MB dataset, 2.1x what the training loader missed). The cache simulator
knows only the training loader's reads, so a throttle or a device is taken to
carry half the bytes it does. The cgroup's read counter (through the throttle,
where the run had one) says what went through; against the cache simulator's
missed bytes over the same run (`simulated_reads`), its ratio is the
amplification a, measured (no rate is fitted to it) on the disk runs whose
cache holds under `1 - SETTINGS.reread_uncached` of the dataset: there the job's
other reads miss as its training reads do. At a cache that holds part of the
dataset the re-reads are taken to hit in the share it holds
(`laws.reread_share`), which no such run tested.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

import numpy as np

from dsanalyze.records import RunResult
from dsanalyze.settings import SETTINGS
from dsanalyze.whatif import bounds, cachesim
from dsanalyze.whatif.laws import read_ahead_bytes, run_cache, uncached_share
from dsanalyze.whatif.model import HeldOut, Model, Param, run_layout
from dsanalyze.whatif.provenance import Fixed, ReadAmplification, Reason
from dsanalyze.whatif.rates import held_buffer


def simulated_reads(model: Model, run: RunResult, seeds: int = 1
                    ) -> tuple[float, float, float]:
    """(missed, read, resident) bytes of the training loader over a disk run's iterations:
    `cachesim` over its epochs with its budget plus the fitted slack (mean of `seeds`
    permutations), the last epoch's resident bytes."""
    sizes = np.asarray(model.file_bytes)
    layout, cache = run_layout(run), run_cache(model, HeldOut.of(run))
    cap = model.dataset_bytes + 1 if cache is None else int(cache)
    share = layout.iters / (layout.epochs * layout.batches)
    missed, read, resident = [], [], []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        if held_buffer(model, model.ranks):  # a held buffer's reads (its fill left out)
            found = cachesim.buffered_miss_bytes(sizes, cap, layout.epochs,
                                                 model.held_buffer, rng)
            missed.append(sum(float(m.sum()) for m in found) * share)
            read.append(layout.epochs * float(sizes.sum()) * share)
            resident.append(float(min(cap, sizes.sum())))
            continue
        orders = [cachesim.epoch_order(len(sizes), rng, model.ranks, model.batch_size,
                                       same_order=model.same_order)
                  for _ in range(layout.epochs)]
        stats = cachesim.simulate(sizes, cap, model.policy, orders)
        missed.append(sum(s.read_bytes for s in stats) * share)
        read.append(sum(s.accessed_bytes for s in stats) * share)
        resident.append(stats[-1].resident_bytes)
    return statistics.fmean(missed), statistics.fmean(read), statistics.fmean(resident)


def measured_read_bytes(run: RunResult) -> int | None:
    """The job's storage reads: through its throttle (from the training loader's start, the
    job's code read beforehand) where the run had one, else the cgroup's over the run."""
    throttle = run.io.throttle
    if throttle is not None and throttle.throttled_read_bytes is not None:
        return throttle.throttled_read_bytes
    return run.io.read_bytes if run.io.read_bytes_source == "cgroup" else None


def _amplification(model: Model, run: RunResult) -> float | None:
    """a of one run, from measured = missed + (a - 1) x read x uncached (`reread_share`),
    less the loaders' read-ahead (`read_ahead_bytes`); None where its counter is not
    recorded or its cache holds too much to tell."""
    measured = measured_read_bytes(run)
    if measured is not None:
        measured -= read_ahead_bytes(model)
    uncached = uncached_share(model, run_cache(model, HeldOut.of(run)))
    if measured is None or uncached < SETTINGS.reread_uncached:
        return None
    missed, read, _ = simulated_reads(model, run)
    return 1.0 + (measured - missed) / (read * uncached) if read else None


def fit_reads(model: Model, disk: list[RunResult]) -> tuple[Model, list[Param]]:
    """The read amplification a: the median over the disk runs whose cache holds almost
    nothing and whose reads the cgroup counted; 1 (each sample read once) where none."""
    found = [(r.run_id, a) for r in disk if (a := _amplification(model, r)) is not None]
    ids = tuple(i for i, _ in found)
    if not found:
        return model, [Param("read_amplification", 1.0, "x", (),
                             Fixed(Reason.NO_AMPLIFICATION_RUN))]
    value = statistics.median(a for _, a in found)
    if not bounds.READ_AMPLIFICATION.holds(value):
        return model, [Param("read_amplification", 1.0, "x", ids, ReadAmplification(
            dropped=bounds.READ_AMPLIFICATION.dropped(value, ids)))]
    values = [a for _, a in found]
    return replace(model, read_amplification=value), [Param(
        "read_amplification", value, "x", ids,
        ReadAmplification(len(found), min(values), max(values)))]
