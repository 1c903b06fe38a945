"""One run's headline numbers: its steady-state rate, wait share, spread, cold first epoch,
interference and the cores it kept busy (`run_rate`), the figures every configuration's
breakdown (`stalls`) pools.

A run's rate is its steady state: the iterations after the warm-up, and for a disk run of two
or more epochs, the epochs after the first (cold) one, which is reported on its own. Rate =
an epoch's samples (all ranks') over its time (the longest rank's: ranks advance together
through DDP), each place in the epoch once (`window.per_epoch`): a window whose first epoch
lacks the warm-up's places still counts every epoch's start once an epoch. `measured_s` and
`measured_samples` are the window's as it ran.
"""

from __future__ import annotations

import collections
import dataclasses
import statistics
from dataclasses import dataclass

from dsanalyze.analysis import interference, uncertainty
from dsanalyze.analysis.jobrun import run_cpus
from dsanalyze.analysis.uncertainty import RateMethod
from dsanalyze.analysis.window import steady_window, window_cores_busy
from dsanalyze.plain import PlainJson
from dsanalyze.records import RunResult


@dataclass(frozen=True)
class RunRate(PlainJson):
    """Headline numbers of one run; the interval only when asked (`run_rate(r, interval=True)`)."""

    run_id: str
    mode: str
    status: str
    rate_sps: float | None = None
    measured_samples: int = 0
    measured_s: float = 0.0
    wait_pct: float | None = None  # share of measured iteration time blocked on data
    iter_median_s: float | None = None
    iter_iqr_pct: float | None = None
    epoch1_s: float | None = None  # first (cold) epoch, when the run spans several
    epoch1_rate_sps: float | None = None
    steady_epochs: int = 0
    samples_per_epoch: int | None = None
    batch_samples: int | None = None  # a whole step's samples, all ranks (the median step's)
    error: str | None = None
    rate_sps_low: float | None = None  # confidence interval of rate_sps (uncertainty.py)
    rate_sps_high: float | None = None
    rate_method: RateMethod | None = None
    rate_level: float | None = None
    repeat: int = 1
    others_cpu_pct: float | None = None  # CPU time of other processes on the run's CPUs
    others_outside_pct: float | None = None  # ... on the CPUs the run was not given
    others_read_bytes: int | None = None  # bytes others read from the dataset's disk
    disturbed: tuple[str, ...] = ()  # Interference kinds beyond their threshold
    # cores the job's processes kept busy in the window (`window.window_cores_busy`), of `cpus`
    cores_busy: float | None = None
    cpus: int | None = None  # the CPUs the run was given, as resolved when it ran


def samples_per_epoch(result: RunResult) -> int | None:
    """The samples of one epoch, all ranks: those rank 0 took in its last whole epoch
    recorded (a short last batch counted as it came: DALI's PARTIAL policy hands out 8 of
    3000 files in a last batch of 16), else its batches per epoch x its median batch, else
    the dataset's files."""
    if not result.ranks:
        return None
    r0 = result.ranks[0]
    batches = r0.extra.get("batches_per_epoch")
    if batches and r0.samples:
        iterations = collections.Counter(r0.epoch)
        last = max((e for e, k in iterations.items() if k == batches), default=None)
        if last is not None and len(r0.epoch) == len(r0.samples):
            taken = sum(n for n, x in zip(r0.samples, r0.epoch) if x == last)
            return int(taken * len(result.ranks))
        per_iter = statistics.median(r0.samples)
        return int(batches * per_iter * len(result.ranks))
    return result.dataset.num_files or None


def run_rate(result: RunResult, interval: bool = False) -> RunRate:
    """Steady-state rate, wait share, spread, cold epoch and interference of one run.

    `interval=True` adds the rate's confidence interval (a bootstrap: keep it
    out of loops that only need the rate).
    """
    base = RunRate(result.run_id, result.mode.value, result.status, error=result.error,
                   repeat=result.spec.repeat, cpus=run_cpus(result),
                   **interference.of_run(result))
    window = steady_window(result)
    if window is None:
        return base
    ranks, chosen = window.ranks, window.chosen
    epoch1_s = epoch1_rate = None
    if window.steady_from is not None:
        first = [[i for i, e in enumerate(r.epoch) if e == window.epochs[0]] for r in ranks]
        epoch1_s = max(sum(r.iter_s[i] for i in f) for r, f in zip(ranks, first))
        epoch1_samples = sum(sum(r.samples[i] for i in f) for r, f in zip(ranks, first))
        epoch1_rate = epoch1_samples / epoch1_s if epoch1_s > 0 else None
    samples = window.samples()
    times = [sum(r.iter_s[i] for i in c) for r, c in zip(ranks, chosen)]
    waits = [sum(r.wait_s[i] for i in c) for r, c in zip(ranks, chosen)]
    measured_s = window.measured_s()
    iters = sorted(r.iter_s[i] for r, c in zip(ranks, chosen) for i in c)
    med = statistics.median(iters) if iters else None
    iqr_pct = None
    if len(iters) >= 4 and med:
        q = statistics.quantiles(iters, n=4)
        iqr_pct = (q[2] - q[0]) / med * 100
    ci = uncertainty.rate_interval(result) if interval else None
    return dataclasses.replace(
        base, rate_sps=window.rate_sps() if measured_s > 0 else None,
        measured_samples=samples, measured_s=measured_s,
        wait_pct=100 * sum(waits) / sum(times) if sum(times) > 0 else None,
        iter_median_s=med, iter_iqr_pct=iqr_pct, epoch1_s=epoch1_s, epoch1_rate_sps=epoch1_rate,
        steady_epochs=len(window.epochs) - 1 if window.steady_from is not None else 0,
        samples_per_epoch=samples_per_epoch(result),
        batch_samples=int(statistics.median(ranks[0].samples) * len(ranks))
        if ranks and ranks[0].samples else None,
        rate_sps_low=ci.low_sps if ci else None, rate_sps_high=ci.high_sps if ci else None,
        rate_method=ci.method if ci else None, rate_level=ci.level if ci else None,
        cores_busy=window_cores_busy(result, window))
