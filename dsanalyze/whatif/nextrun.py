"""The adaptive sweep's choice: which configuration to measure next, or why to stop.

    decision = choose(candidates, max_stall_pct=5, epochs=E, target_pct=5)

Each candidate is one configuration of the sweep's grid with the model's
prediction and, where a disk run measured it, that run's rate interval. The
pick is the recommendation's own ranking (`recommend.rank`: the cheapest under
the stall limit, else the cheapest of the fastest) over the predictions.
Then, in order:

1. The pick is not measured: measure it (a measurement is the most direct way
   to narrow its interval, and the answer rests on a measurement: a model
   whose interval is narrow can still miss a knob it never saw bind, as a
   page cache below the working set on a prep-bound job did in
   bench/adaptive.py's prep grid, predicted 258 samples/s ±4%, measured 153).
2. An unmeasured configuration has at least `SETTINGS.chance_min` chance of taking the
   pick's place: measure the likeliest. With the pick under the limit, the
   chance is that of a cheaper configuration staying under the limit too;
   else, that of it staying under the limit or running faster than the pick
   (by more than the ranking's tolerance): none, when it differs from the pick
   only in cache and storage and the pick is already within the tolerance of
   its job with no fetch stall (`cannot_beat`).
   Once the pick is measured, "faster" means faster by more than its own noise
   (`margin`: its measured interval's half-width, where that is wider than
   the tolerance): a rival predicted within the pick's noise cannot change
   the answer by more than the runs can tell apart, which is the issue's own
   criterion (the same answer, or within the full grid's pick's interval).
3. Rivals that step 2 would measure at the tolerance but not beyond the pick's
   noise (`equivalent`): stop, `EQUIVALENT`, naming them: more runs of the pick
   would only narrow its noise until one of them became a rival again.
4. The pick is measured, its interval (its runs' own, pooled over repeats) is
   wider than ±`target_pct`, and it has had fewer than `SETTINGS.max_pick_runs` runs:
   `REPEAT` it (one more run of it; the runs pool, the interval narrows).
5. Else stop: `CONFIDENT` when the pick's interval is within ±`target_pct`,
   `SETTLED` when it is not but no configuration left to measure could change
   the answer (the pick is measured `SETTINGS.max_pick_runs` times, or not measurable).

Chances treat a rate as log-normal, sigma read off its interval: the
prediction's (`LEVEL`, the model's error) or, for a measured configuration,
its run's (95%, the block bootstrap). A configuration `tried` already (its run
failed) is not measurable. Pure: values in, a `Decision` out.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

from dsanalyze.plain import PlainJson
from dsanalyze.settings import SETTINGS
from dsanalyze.whatif.api import Prediction
from dsanalyze.whatif.model import LEVEL
from dsanalyze.whatif.recommend import TOLERANCE, cost, rank

MEASURED_LEVEL = 0.95  # a run's rate interval (analysis/uncertainty.py)
_NORMAL = NormalDist()


class Verdict(str, enum.Enum):
    MEASURE = "measure"  # measure `next_key`
    REPEAT = "repeat"  # measure the measured pick `next_key` once more (its runs pool)
    CONFIDENT = "confident"  # the pick's interval is within the target, no rival likely
    SETTLED = "settled"  # the interval is wider, but nothing left to measure could change it
    EQUIVALENT = "equivalent"  # the rivals left are predicted within the pick's noise
    BUDGET = "budget"  # the budget is spent (decided by the loop, not here)


@dataclass(frozen=True)
class Candidate:
    """One configuration of the grid: `key` its `Resources.key`."""

    key: str
    prediction: Prediction
    measured_sps: float | None = None  # its disk run's steady rate and 95% interval
    measured_low_sps: float | None = None
    measured_high_sps: float | None = None
    runs: int = 0  # its disk runs so far (repeats and failed ones included)

    @property
    def measured(self) -> bool:
        return self.measured_sps is not None

    def half_width_pct(self) -> float:
        """The rate interval's half-width relative to the rate: the run's if measured."""
        if self.measured and self.measured_low_sps is not None:
            return 50 * (self.measured_high_sps - self.measured_low_sps) / self.measured_sps
        p = self.prediction
        return 50 * (p.rate_sps_high - p.rate_sps_low) / p.rate_sps

    def log_sigma(self) -> float:
        """Sigma of log(rate), read off the interval at its level."""
        if self.measured and self.measured_low_sps is not None:
            z = _NORMAL.inv_cdf(0.5 + MEASURED_LEVEL / 2)
            return math.log(self.measured_high_sps / self.measured_low_sps) / (2 * z)
        p = self.prediction
        return math.log(p.rate_sps_high / p.rate_sps_low) / (2 * _NORMAL.inv_cdf(0.5 + LEVEL / 2))


@dataclass(frozen=True)
class Setup(PlainJson):
    """The pick's configuration, as its words quote it."""

    cpus: int
    cache_bytes: int | None  # None: unlimited
    storage_read_bps: int | None  # None: the measured device
    workers: int | None
    loader: str


@dataclass(frozen=True)
class Budget(PlainJson):
    """Why a BUDGET stop: `spent_s` of `budget_s`, the next run (`skipped_key`) expected to
    take `expected_s` more."""

    spent_s: float
    budget_s: float
    expected_s: float
    skipped_key: str | None


@dataclass(frozen=True)
class Decision(PlainJson):
    """What the adaptive sweep does next, and the numbers that say why (`report/adaptive.py`
    words it). Why a MEASURE: the pick itself is not measured yet (`next_key` is the
    pick) or the rival has at least `chance_min` chance to take its place (`under_limit`:
    to be cheaper under the limit, else to do better); REPEAT: the measured pick is still
    wider after `pick_runs` runs; CONFIDENT / SETTLED: within the target or not, no rival at
    `chance_min`; EQUIVALENT: the rivals `equivalent` have that chance to do better than the
    pick only by less than `margin_pct`, its measured noise; BUDGET: `budget`."""

    verdict: Verdict
    pick_key: str
    pick_measured: bool
    pick_half_width_pct: float
    pick_rate_sps: float
    rival_key: str | None  # the unmeasured configuration likeliest to change the answer
    rival_chance: float  # its chance (0: none left)
    next_key: str | None  # to measure (MEASURE only)
    pick: Setup | None = None
    under_limit: bool = False  # the pick stalls under `max_stall_pct`
    max_stall_pct: float = 0.0
    target_pct: float = 0.0
    chance_min: float = 0.0
    pick_runs: int = 0
    budget: Budget | None = None
    equivalent: tuple[str, ...] = ()  # rivals within the pick's noise (EQUIVALENT)
    margin_pct: float = 0.0  # "do better" means by more than this (% of the pick's job)


def stall_chance(c: Candidate, max_stall_pct: float, epochs: int) -> float:
    """The chance that `c` stalls at most `max_stall_pct` of a job of `epochs` epochs: the
    job's time scales as 1 / rate, so it needs rate x f with f >= (1 - L) job_s / compute."""
    p = c.prediction
    need = (1 - max_stall_pct / 100) * p.job_s(epochs) / (epochs * p.compute_s)
    return 1 - _NORMAL.cdf(math.log(max(need, 1e-12)) / max(c.log_sigma(), 1e-9))


def faster_chance(c: Candidate, pick: Candidate, epochs: int, margin: float = TOLERANCE) -> float:
    """The chance that `c`'s job is shorter than the pick's by more than `margin`: the
    tolerance (both uncertain), or the measured pick's noise (`noise_margin`: then the pick's
    uncertainty is the margin itself, and only `c`'s prediction is uncertain)."""
    ratio = c.prediction.job_s(epochs) / (pick.prediction.job_s(epochs) * (1 - margin))
    sigma = c.log_sigma() if margin > TOLERANCE else math.hypot(c.log_sigma(), pick.log_sigma())
    return 1 - _NORMAL.cdf(math.log(ratio) / max(sigma, 1e-9))


def noise_margin(pick: Candidate) -> float:
    """How much faster than the pick a rival must be to change the answer by more than the
    runs can tell apart: the measured pick's interval half-width (its runs' noise, repeats
    pooled), at least the tolerance; the tolerance while it is only predicted."""
    return max(TOLERANCE, pick.half_width_pct() / 100) if pick.measured else TOLERANCE


def rival_chance(c: Candidate, pick: Candidate, under_limit: bool, max_stall_pct: float,
                 epochs: int, margin: float = TOLERANCE) -> float:
    """The chance that `c` would take the pick's place (module docstring, step 2): to be
    faster, by more than `margin`."""
    if under_limit:
        cheaper = cost(c.prediction)[:3] < cost(pick.prediction)[:3]
        return stall_chance(c, max_stall_pct, epochs) if cheaper else 0.0
    faster = 0.0 if cannot_beat(c, pick, epochs) else faster_chance(c, pick, epochs, margin)
    return max(stall_chance(c, max_stall_pct, epochs), faster)


def cannot_beat(c: Candidate, pick: Candidate, epochs: int) -> bool:
    """True when `c` differs from the pick only in page cache and storage and the pick is
    within the tolerance of its job with no fetch stall (`epochs` epochs at its cached
    epoch, prep and compute): cache and storage change only the fetch stall, so `c`'s job
    is no shorter than that bound, the one figure of the model both share (their errors
    cancel, where independent intervals would see a rival in every tie)."""
    a, b = c.prediction.config, pick.prediction.config
    if (a.cpus, a.gpu_speedup, a.nproc, a.workers, a.nnodes) != \
            (b.cpus, b.gpu_speedup, b.nproc, b.workers, b.nnodes):
        return False
    p = pick.prediction
    best_s = epochs * max(p.cached_s, p.compute_s)
    return best_s >= p.job_s(epochs) * (1 - TOLERANCE)


def choose(candidates: Sequence[Candidate], max_stall_pct: float, epochs: int,
           target_pct: float, tried: frozenset[str] = frozenset()) -> Decision:
    """The next configuration to measure, or the verdict to stop (module docstring)."""
    by_pred = {id(c.prediction): c for c in candidates}
    chosen, closest = rank([c.prediction for c in candidates], max_stall_pct, epochs)
    pick = by_pred[id(closest)]
    hw, margin, under = pick.half_width_pct(), noise_margin(pick), chosen is not None
    left = [c for c in candidates if c is not pick and not c.measured and c.key not in tried]
    rivals = sorted(((rival_chance(c, pick, under, max_stall_pct, epochs, margin), c.key)
                     for c in left), reverse=True)
    chance, rival = rivals[0] if rivals else (0.0, None)
    equivalent = tuple(c.key for c in left if margin > TOLERANCE and rival_chance(
        c, pick, under, max_stall_pct, epochs) >= SETTINGS.chance_min)
    c = pick.prediction.config
    setup = Setup(c.cpus, c.cache_bytes, c.storage_read_bps, c.workers, pick.prediction.loader)

    def decided(verdict: Verdict, next_key: str | None) -> Decision:
        return Decision(verdict, pick.key, pick.measured, hw, _rate(pick), rival, chance,
                        next_key, setup, under, max_stall_pct, target_pct,
                        SETTINGS.chance_min, pick.runs,
                        equivalent=equivalent if verdict is Verdict.EQUIVALENT else (),
                        margin_pct=100 * margin)
    if not pick.measured and pick.key not in tried:
        return decided(Verdict.MEASURE, pick.key)
    if rival is not None and chance >= SETTINGS.chance_min:
        return decided(Verdict.MEASURE, rival)
    if equivalent:
        return decided(Verdict.EQUIVALENT, None)
    if pick.measured and hw > target_pct and pick.runs < SETTINGS.max_pick_runs:
        return decided(Verdict.REPEAT, pick.key)
    return decided(Verdict.CONFIDENT if hw <= target_pct else Verdict.SETTLED, None)


def _rate(c: Candidate) -> float:
    return c.measured_sps if c.measured_sps is not None else c.prediction.rate_sps

