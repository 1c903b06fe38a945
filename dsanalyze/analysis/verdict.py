"""What the stall table calls a configuration: its `Bound` and the `Verdict` with the numbers
its words quote (`report/verdicts.py` words it), from the two stall intervals.

    verdict(prep, fetch) -> Verdict(Bound.PREP, (StallShare("prep", 41.0, 3.0),), highly=True)

Input-bound above `SETTINGS.input_bound_pct` of the time stalled (its whole interval above
0), highly above `SETTINGS.highly_input_bound_pct`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from dsanalyze.analysis.uncertainty import Significance, StallInterval
from dsanalyze.plain import PlainJson
from dsanalyze.settings import SETTINGS


class Bound(enum.Enum):
    """What the table calls a configuration (`verdict`; `report/verdicts.py` words it; the
    advice reads it)."""

    PREP = "prep"  # a prep stall above 5% of the time, its whole interval above 0
    FETCH = "fetch"  # the same of the fetch stall (the larger of the two when both are)
    COMPUTE = "compute"  # every stall's interval at most 5% of the time
    NOISE = "within noise"  # a stall that may exceed 5% but cannot be told from 0
    UNKNOWN = "unknown"  # no synthetic and cached runs to compare


@dataclass(frozen=True)
class StallShare(PlainJson):
    """A stall a verdict quotes: its share of the epoch and the interval's half-width (points)."""

    kind: str  # prep, fetch
    pct: float
    half_width_pct: float

    @classmethod
    def of(cls, kind: str, s: StallInterval) -> StallShare:
        return cls(kind, s.pct, s.half_width_pct)


@dataclass(frozen=True)
class Verdict(PlainJson):
    """What the table calls a configuration, and the numbers its words quote
    (`report/verdicts.py` words it):

    - PREP / FETCH: `stalls`, the stalls above 5% whose whole interval is above 0, the
      largest first (`highly`: it is above 20%);
    - COMPUTE: every stall's interval at most 5%; `stalled_pct` their sum (each clamped at
      0), `within_noise` when no stall is a finding;
    - NOISE: `stalls`, the one with the highest upper end, that cannot be told from 0;
    - UNKNOWN: `suspect`, the stall whose rates inverted beyond both intervals, or None when
      no synthetic and cached runs were there to compare.
    """

    bound: Bound
    stalls: tuple[StallShare, ...] = ()
    highly: bool = False
    stalled_pct: float | None = None
    within_noise: bool = False
    suspect: str | None = None


def _likely(stalls: dict[str, StallInterval]) -> list[tuple[float, str]]:
    return sorted(((s.pct, k) for k, s in stalls.items()
                   if s.significance is Significance.LIKELY and s.pct > SETTINGS.input_bound_pct),
                  reverse=True)


def bound(prep: StallInterval | None, fetch: StallInterval | None) -> Bound:
    """The table's classification of one configuration (the rules of `verdict`)."""
    return verdict(prep, fetch).bound


def verdict(prep: StallInterval | None, fetch: StallInterval | None) -> Verdict:
    """The table's verdict on one configuration (see `Verdict`): a likely stall first, then a
    suspect one, then compute-bound when no interval reaches above 5%, else within noise."""
    stalls = {k: s for k, s in (("prep", prep), ("fetch", fetch)) if s is not None}
    if not stalls:
        return Verdict(Bound.UNKNOWN)
    likely = _likely(stalls)
    if likely:
        return Verdict(Bound(likely[0][1]), tuple(StallShare.of(k, stalls[k]) for _, k in likely),
                       highly=likely[0][0] > SETTINGS.highly_input_bound_pct)
    suspects = [k for k, s in stalls.items() if s.significance is Significance.SUSPECT]
    if suspects:  # no finding either way
        return Verdict(Bound.UNKNOWN, suspect=suspects[0])
    if all(s.pct_high <= SETTINGS.input_bound_pct for s in stalls.values()):
        return Verdict(Bound.COMPUTE, stalled_pct=sum(max(s.pct, 0.0) for s in stalls.values()),
                       within_noise=all(s.significance is not Significance.LIKELY
                                        for s in stalls.values()))
    kind, s = max(stalls.items(), key=lambda ks: ks[1].pct_high)
    return Verdict(Bound.NOISE, (StallShare.of(kind, s),))
