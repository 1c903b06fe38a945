"""A prediction grid without duplicate rows: budgets that do not bind folded into one.

Asked for 3 CPU counts x 2 bandwidths x 2 worker counts, the default cache
grid multiplies the rows by five budgets, and where the page cache does not
limit the job they are the same prediction five times. `fold` merges the
predictions of one configuration (everything but the cache budget equal)
whose figures are the same (`same`), over adjacent budgets, into one
`GridRow` that says which budgets it covers (`CacheRange`). A measured
configuration keeps a row of its own (it carries its measured rate).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dsanalyze.config import CacheBudget
from dsanalyze.settings import SETTINGS
from dsanalyze.whatif.api import Prediction


@dataclass(frozen=True)
class CacheRange:
    """The budgets one grid row covers, smallest first (an unlimited one last)."""

    budgets: tuple[CacheBudget, ...]

    @property
    def low(self) -> CacheBudget:
        return self.budgets[0]

    @property
    def high(self) -> CacheBudget:
        return self.budgets[-1]

    def to_dict(self) -> dict[str, Any]:
        return {"cache_specs": [b.spec for b in self.budgets],
                "cache_bytes": [b.cache_bytes for b in self.budgets]}


@dataclass(frozen=True)
class GridRow:
    """One printed row: a prediction and the cache budgets it stands for."""

    prediction: Prediction  # the smallest budget's
    caches: CacheRange
    hit_rates: tuple[float | None, ...] = ()  # each budget's, in the order of `caches`

    @property
    def folded(self) -> bool:
        return len(self.caches.budgets) > 1

    def covers(self, pred: Prediction) -> bool:
        """Whether `pred` is one of the predictions this row stands for."""
        return pred.config.with_cache() == self.prediction.config.with_cache() and \
            pred.config.cache in self.caches.budgets


def _figures(p: Prediction) -> tuple[float, ...]:
    """What the grid prints of a prediction but its page cache's hit rate (which a budget
    changes whether or not it limits the job: a folded row shows its range): the rate and
    its interval, the epoch and its parts, the cold epoch."""
    return (p.rate_sps, p.rate_sps_low, p.rate_sps_high, p.epoch_s, p.compute_s,
            p.prep_stall_s, p.fetch_stall_s, p.epoch1_s or 0.0)


def same(a: Prediction, b: Prediction) -> bool:
    """The same prediction as far as the grid can tell: every figure within `SETTINGS.same_rel` (or
    `SETTINGS.same_s` seconds), and the same untested assumptions."""
    return a.untested == b.untested and all(
        abs(x - y) <= max(SETTINGS.same_s, SETTINGS.same_rel * max(abs(x), abs(y)))
        for x, y in zip(_figures(a), _figures(b)))


def _order(budget: CacheBudget) -> tuple[bool, int]:
    return budget.cache_bytes is None, budget.cache_bytes or 0


def fold(preds: Sequence[Prediction]) -> list[GridRow]:
    """The grid's rows, each configuration's adjacent budgets with the same figures folded
    into one; rows in the order of each one's first prediction."""
    groups: dict[Any, list[Prediction]] = {}
    for p in preds:
        groups.setdefault(p.config.with_cache(), []).append(p)
    rows: list[tuple[int, GridRow]] = []
    index = {id(p): i for i, p in enumerate(preds)}
    for group in groups.values():
        run: list[Prediction] = []
        for p in sorted(group, key=lambda p: _order(p.config.cache)):
            if run and (p.measured_run or run[0].measured_run or not same(p, run[0])):
                rows.append((index[id(run[0])], _row(run)))
                run = []
            run.append(p)
        rows.append((index[id(run[0])], _row(run)))
    return [r for _, r in sorted(rows, key=lambda x: x[0])]


def _row(run: list[Prediction]) -> GridRow:
    return GridRow(run[0], CacheRange(tuple(p.config.cache for p in run)),
                   tuple(p.hit_rate for p in run))
