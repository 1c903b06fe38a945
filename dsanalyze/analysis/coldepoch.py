"""The cold first epoch of a configuration, beside its steady state.

A disk run starts with the dataset evicted, so its first epoch reads every
file from storage; with a page cache that holds the dataset, the later
(steady) epochs read nothing, and the steady-state figures of the table show
no fetch stall at all. The first epoch is therefore split on its own, as the
steady state is (`analysis/stalls.py`), per epoch of N samples:

    epoch_s       = the disk run's first epoch (`epoch1_s`)
    compute_s     = N / G                       as in the steady state
    prep_stall_s  = N / P_cached - N / G        the same loader on the same CPUs
    fetch_stall_s = epoch_s - N / P_cached      (>= 0)
    *_pct         = *_stall_s / epoch_s * 100

A disk run that measured a single epoch has no steady state: its figures are
the cold epoch's (`cold_only`), but under a page cache of 0, where every epoch
is cold and the one measured is the steady state.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsanalyze.analysis.stalls import Breakdown
from dsanalyze.analysis.verdict import Bound
from dsanalyze.plain import PlainJson
from dsanalyze.settings import SETTINGS


def cold_bound(epoch_s: float, prep_s: float, fetch_s: float) -> tuple[Bound, bool]:
    """What the cold epoch is bound by, and whether highly: compute when its stalls are at
    most 5% of it, else the larger stall (fetch on a tie), highly above 20%
    (`report/verdicts.py` words it: `highly fetch-bound, 4.5 s of 5.5 s waiting on storage`)."""
    if 100 * (prep_s + fetch_s) / epoch_s <= SETTINGS.input_bound_pct:
        return Bound.COMPUTE, False
    kind, stall_s = (Bound.FETCH, fetch_s) if fetch_s >= prep_s else (Bound.PREP, prep_s)
    return kind, 100 * stall_s / epoch_s > SETTINGS.highly_input_bound_pct


@dataclass(frozen=True)
class ColdEpoch(PlainJson):
    """The first epoch of a configuration's disk run, split as the module docstring says."""

    epoch_s: float
    rate_sps: float | None
    compute_s: float | None
    prep_stall_s: float | None
    fetch_stall_s: float
    prep_stall_pct: float | None
    fetch_stall_pct: float
    bound: Bound = Bound.UNKNOWN  # `cold_bound` (UNKNOWN: a summary stored before it was)
    highly: bool = False


def cold_epoch(b: Breakdown) -> ColdEpoch | None:
    """The first epoch of a configuration split as above; None without one."""
    disk, cached = b.modes.get("disk"), b.modes.get("cached")
    epoch_s = disk.epoch1_s if disk else None
    cached_s = cached.time_s if cached else None
    if disk is None or epoch_s is None or cached_s is None or epoch_s <= 0:
        return None
    prep = b.prep_stall_s or 0.0
    fetch = max(0.0, epoch_s - cached_s)
    return ColdEpoch(epoch_s, disk.epoch1_rate_sps, b.compute_s, b.prep_stall_s, fetch,
                     100 * prep / epoch_s if b.prep_stall_s is not None else None,
                     100 * fetch / epoch_s, *cold_bound(epoch_s, prep, fetch))


def cold_only(b: Breakdown) -> bool:
    """Whether the configuration's disk figures are a cold first epoch (one epoch measured)
    where later epochs would differ: under a page cache of 0 every epoch is cold, and the
    one measured is the steady state."""
    disk = b.modes.get("disk")
    return disk is not None and disk.rate_sps is not None and disk.epoch1_s is None \
        and b.cache_bytes != 0


def job_s(epoch_s: float, epoch1_s: float | None, epochs: int) -> float:
    """A job of `epochs` epochs: the cold first (`epoch1_s`; a steady one when None), then
    steady ones of `epoch_s`. The one span of the advice, the what-if and the table."""
    return (epoch1_s if epoch1_s is not None else epoch_s) + (epochs - 1) * epoch_s


def stall_pct(span_s: float, stalled_s: float) -> float:
    """The share of a job's span stalled, in percent (0 for an empty span)."""
    return 100 * max(0.0, stalled_s) / span_s if span_s > 0 else 0.0
