"""Intervals for rates and for the stalls that subtract them.

A run's rate is an epoch's samples over its time, in its steady window
(`window.per_epoch`: each place in the epoch once, at the mean of the epochs that hold it). Iteration
times are autocorrelated (a slow decode, a page-cache miss streak, a noisy
neighbour last for several iterations), so an i.i.d. bootstrap would be too
narrow. We use the circular block bootstrap (Politis & Romano 1992): resample
the series of iterations as blocks of `b` consecutive iterations, wrapping at
the end, recompute the rate, and take the percentiles of the replicates.

Block length: twice the Politis-White (2004) rule for the circular block
bootstrap, `b = 2 (1.5 (G/g)^2)^(1/3) n^(1/3)`, with G/g = 2 rho / (1 - rho^2)
the AR(1) plug-in from the lag-1 autocorrelation rho of the iteration times,
clipped to [1, n/3]: blocks of 1 for uncorrelated series, longer ones when the
series remembers more. Twice, because on series of a few hundred iterations
the plug-in underestimates rho and the shorter blocks undercover. The
replicates' spread rests on about n/b blocks, so it is widened by t/z for
n/b - 1 degrees of freedom, as a Student interval would be. On 200 simulated
AR(1) series (rho 0, 0.5, 0.8; n 100, 200) the 95% intervals cover the true
rate 90-96% of the time (tests/test_uncertainty.py).

A window of two or more epochs is resampled in step with them (`epoch_replicates`): what
happens once an epoch (a checkpoint saved at its end, the workers forked again at its
start, the last partial batch) happens once an epoch in every replicate. Each block of b
positions in the epoch is drawn from the epochs that hold it (with replacement, as many
times as they are), so the replicates vary by what differs between epochs at the same
place, never by how many epoch ends they happened to draw: a Lightning script's
checkpoint, 0.7 s once every 20 steps of 25 ms, gave its rate an interval from 0.6 to 2.6
times itself when its iterations were drawn alone. The spread rests on E epochs at each place, so it is widened by sqrt(E / (E - 1))
(the bootstrap's variance of a mean of E) and by t/z for blocks x (E - 1) degrees of
freedom.

A configuration run several times (`--repeats`) adds the spread between
repeats, by a two-stage bootstrap: each replicate draws the repeats with
replacement, then one block-bootstrap replicate of each drawn repeat, and
averages their rates. With one run the interval says nothing about
run-to-run drift; the method (`RateMethod`) says how many repeats it rests on.

A stall is a difference of the times per epoch of two modes (N / rate), so
its interval is propagated by pairing the replicates of the two rates (the
runs are independent) and taking percentiles of the difference; its share of
the epoch divides by the replicate's epoch time the same way. A stall whose
interval contains 0 is within noise.

Replicates use numpy's Generator seeded from each run's id: the same runs
give the same intervals.
"""

from __future__ import annotations

import enum
import math
import re
import statistics
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Self

import numpy as np

from dsanalyze.analysis.window import places, steady_window
from dsanalyze.blockstats import DEFAULT_LEVEL, block_length, small_sample_factor
from dsanalyze.plain import PlainJson
from dsanalyze.records import RunResult
from dsanalyze.settings import SETTINGS


@dataclass(frozen=True)
class RateMethod(PlainJson):
    """How a rate's interval was found: the circular block bootstrap over iterations, in
    blocks of `block` of the `iterations` (None where repeats are pooled), and, when
    `repeats` > 1, the two-stage bootstrap over the repeats."""

    block: int | None
    iterations: int | None
    repeats: int = 1
    epochs: int = 0  # > 1: resampled in step with this many epochs (`epoch_replicates`)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | str) -> Self:
        if isinstance(d, str):  # the sentence a summary of schema < 4 stored
            blocks = re.search(r"block (\d+) of (\d+)", d)
            repeats = re.search(r"over (\d+) repeats", d)
            return cls(int(blocks[1]) if blocks else None, int(blocks[2]) if blocks else None,
                       int(repeats[1]) if repeats else 1)
        return super().from_dict(d)


@dataclass(frozen=True)
class RateInterval:
    """A rate (samples/s) and its confidence interval at `level` (0.95: 95%)."""

    rate_sps: float
    low_sps: float
    high_sps: float
    method: RateMethod
    level: float = DEFAULT_LEVEL

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RateInterval:
        return cls(float(d["rate_sps"]), float(d["low_sps"]), float(d["high_sps"]),
                   RateMethod.from_dict(d["method"]), float(d.get("level", DEFAULT_LEVEL)))


@dataclass(frozen=True)
class RateSamples:
    """A rate's point estimate and its bootstrap replicates (samples/s)."""

    rate_sps: float
    replicates: np.ndarray
    method: RateMethod

    def interval(self, level: float = DEFAULT_LEVEL) -> RateInterval:
        low, high = percentiles(self.replicates, level)
        return RateInterval(self.rate_sps, low, high, self.method, level)


class Significance(str, enum.Enum):
    """Where a stall's interval lies with respect to 0."""

    LIKELY = "likely"  # the whole interval is above 0
    WITHIN_NOISE = "within_noise"  # the interval contains 0
    INVERTED = "inverted"  # the whole interval is below 0: the slower mode measured faster
    # inverted, and the two rates' intervals apart: no noise explains it, something disturbed
    # one run (the summary's note names what it suspects); `stalls.suspect`
    SUSPECT = "suspect"
    # a fetch stall whose disk run's window read so little from storage that it cannot have
    # waited on it beyond the noise floor (`fetchbound.FetchBound.unread`): 0, whatever the
    # two runs measured
    UNREAD = "unread"


@dataclass(frozen=True)
class StallInterval:
    """One stall per epoch: seconds and share of the epoch, each with its interval.

    `s` and `pct` are the plain differences of the point rates, not clamped:
    a negative value is a measurement, worded as noise or inversion at the edge.
    """

    s: float
    s_low: float
    s_high: float
    pct: float
    pct_low: float
    pct_high: float
    significance: Significance

    @property
    def half_width_pct(self) -> float:
        """Half the interval's width, in points of the epoch: the `±` printed."""
        return (self.pct_high - self.pct_low) / 2

    @classmethod
    def unread(cls) -> StallInterval:
        """A fetch stall the storage cannot have caused (`Significance.UNREAD`): 0."""
        return cls(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, Significance.UNREAD)


def percentiles(x: np.ndarray, level: float) -> tuple[float, float]:
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(x, [tail, 100 - tail])
    return float(low), float(high)


def block_indices(n: int, b: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """`n_resamples` rows of n indices: blocks of b consecutive iterations, wrapping at n."""
    blocks = math.ceil(n / b)
    starts = rng.integers(0, n, size=(n_resamples, blocks))
    idx = (starts[:, :, None] + np.arange(b)[None, None, :]) % n
    return idx.reshape(n_resamples, blocks * b)[:, :n]


def _seed(run_id: str) -> int:
    return zlib.crc32(run_id.encode())


def run_samples(result: RunResult, n_resamples: int = SETTINGS.n_resamples) -> RateSamples | None:
    """The steady rate of one run and its block-bootstrap replicates; None without a window.

    Ranks are resampled with the same indices (iteration i of every rank is
    one DDP step); ranks of unequal length are cut to the shortest for the
    replicates, whose spread is applied relative to the steady rate
    (`Window.rate_sps`: each place in the epoch once).
    """
    window = steady_window(result)
    rate = window.rate_sps() if window is not None else None
    if window is None or rate is None:
        return None
    n = min(len(c) for c in window.chosen)
    iters = np.array([[r.iter_s[i] for i in c[:n]] for r, c in zip(window.ranks, window.chosen)])
    samples = np.array([[r.samples[i] for i in c[:n]] for r, c in zip(window.ranks, window.chosen)])
    b = block_length(iters.max(axis=0))
    rng = np.random.default_rng(_seed(result.run_id))
    hat = samples.sum() / iters.sum(axis=1).max()
    r0, c0 = window.ranks[0], window.chosen[0][:n]
    epochs = [r0.epoch[i] for i in c0]
    groups = epoch_places(epochs, places(r0.epoch, c0), b)
    if groups is not None:
        rep, factor = epoch_replicates(samples, iters, groups, n_resamples, rng)
        method = RateMethod(b, n, epochs=len(set(epochs)))
    else:
        idx = block_indices(n, b, n_resamples, rng)
        # (ranks, resamples, n) -> per resample: all ranks' samples / the longest rank's time
        rep = samples[:, idx].sum(axis=(0, 2)) / iters[:, idx].sum(axis=2).max(axis=0)
        factor, method = small_sample_factor(n // b), RateMethod(b, n)
    rep = hat + (rep - hat) * factor
    return RateSamples(rate, rate * rep / hat, method)


def epoch_places(epochs: Sequence[int], positions: Sequence[int], b: int
                 ) -> list[list[np.ndarray]] | None:
    """The window's iterations (0..n-1) grouped for `epoch_replicates`: per block of b places
    in the epoch, one index array per epoch that holds any of them. None with fewer than two
    epochs, or no block that two epochs hold (nothing to draw between)."""
    if len(set(epochs)) < 2:
        return None
    groups: dict[int, dict[int, list[int]]] = {}
    for j, (e, p) in enumerate(zip(epochs, positions)):
        groups.setdefault(p // b, {}).setdefault(e, []).append(j)
    places = [[np.array(js) for _, js in sorted(by_epoch.items())]
              for _, by_epoch in sorted(groups.items())]
    return places if any(len(p) > 1 for p in places) else None


def epoch_replicates(samples: np.ndarray, iters: np.ndarray, places: list[list[np.ndarray]],
                     n_resamples: int, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """Rate replicates (all ranks' samples / the longest rank's time) of a window drawn in
    step with its epochs: each block of places drawn, with replacement, from the epochs that
    hold it, as many times as they are; and the factor their spread is widened by (the
    module's docstring)."""
    ranks = samples.shape[0]
    s_rep, t_rep = np.zeros(n_resamples), np.zeros((ranks, n_resamples))
    for block in places:
        s = np.array([samples[:, js].sum() for js in block])
        t = np.array([iters[:, js].sum(axis=1) for js in block]).T  # (ranks, epochs here)
        # as many draws as epochs hold the block, with replacement
        pick = rng.integers(0, len(block), size=(n_resamples, len(block)))
        s_rep += s[pick].sum(axis=1)
        t_rep += t[:, pick].sum(axis=2)
    drawn = [len(block) for block in places if len(block) > 1]
    e = statistics.median(drawn)
    factor = math.sqrt(e / (e - 1)) * small_sample_factor(int(len(drawn) * (e - 1)) + 1)
    return s_rep / t_rep.max(axis=0), factor


def rate_interval(result: RunResult, level: float = DEFAULT_LEVEL) -> RateInterval | None:
    """The steady rate of one run with its confidence interval; None for a run with no window."""
    s = run_samples(result)
    return s.interval(level) if s is not None else None


def combined_samples(runs: Sequence[RunResult],
                     n_resamples: int = SETTINGS.n_resamples) -> RateSamples | None:
    """One configuration's mode over its repeats: mean rate, two-stage bootstrap replicates.
    The same whatever the order of `runs` (the seed and the stacking go by run id)."""
    runs = sorted(runs, key=lambda r: r.run_id)
    per_run = [s for s in (run_samples(r, n_resamples) for r in runs) if s is not None]
    if not per_run:
        return None
    if len(per_run) == 1:
        return per_run[0]
    k = len(per_run)
    rng = np.random.default_rng(_seed("+".join(sorted(r.run_id for r in runs))))
    reps = np.stack([s.replicates for s in per_run])  # (repeats, resamples)
    which = rng.integers(0, k, size=(n_resamples, k))
    column = rng.integers(0, reps.shape[1], size=(n_resamples, k))
    rep = reps[which, column].mean(axis=1)
    rate = float(np.mean([s.rate_sps for s in per_run]))
    return RateSamples(rate, rep, RateMethod(None, None, k))


def epoch_time(samples_per_epoch: int, rate: RateSamples) -> tuple[float, np.ndarray]:
    """Seconds per epoch: point and replicates."""
    return samples_per_epoch / rate.rate_sps, samples_per_epoch / rate.replicates


def stall_interval(slower: tuple[float, np.ndarray], faster: tuple[float, np.ndarray],
                   total: tuple[float, np.ndarray], level: float = DEFAULT_LEVEL) -> StallInterval:
    """slower - faster (seconds per epoch) and its share of `total`, paired replicate by replicate."""
    s = slower[0] - faster[0]
    reps = slower[1] - faster[1]
    pct_reps = 100 * reps / total[1]
    s_low, s_high = percentiles(reps, level)
    pct_low, pct_high = percentiles(pct_reps, level)
    if s_low > 0:
        sig = Significance.LIKELY
    elif s_high < 0:
        sig = Significance.INVERTED
    else:
        sig = Significance.WITHIN_NOISE
    return StallInterval(s, s_low, s_high, 100 * s / total[0], pct_low, pct_high, sig)


def rel_sigmas(results: Sequence[RunResult], level: float = DEFAULT_LEVEL) -> dict[str, float]:
    """Each completed run's relative standard error of its rate, sigma / rate, read off its
    interval as (high - low) / (2 z) / rate: the what-if fit's weights (`calibrate.fit`)."""
    z = statistics.NormalDist().inv_cdf(0.5 + level / 2)
    out = {}
    for r in results:
        iv = rate_interval(r, level) if r.ok else None
        if iv is not None and iv.rate_sps > 0:
            out[r.run_id] = (iv.high_sps - iv.low_sps) / (2 * z) / iv.rate_sps
    return out
