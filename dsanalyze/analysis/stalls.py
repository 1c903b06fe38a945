"""The differential stall breakdown, a pure function over stored runs.

For one resource configuration, with N samples per epoch:

    compute_s     = N / G                 G: synthetic rate (samples/s)
    prep_stall_s  = N / P_cached - N / G
    fetch_stall_s = N / P_disk - N / P_cached
    total_s       = N / P_disk  (N / P_cached when there is no disk run)
    *_pct         = *_stall_s / total_s * 100

Each rate has a confidence interval and each stall an interval propagated
from the two rates it subtracts (`uncertainty.py`). A stall whose interval
contains 0 is within noise: the verdict says "likely" only of a stall whose
whole interval is above 0. The stored `*_stall_s` and `*_stall_pct` are
clamped at 0 for drawing; the interval and the significance say the rest.

Each run's rate is its steady state (`runrate.run_rate`); what the runs leave to say
beside the table are typed notes (`notes.config_notes`).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from dsanalyze.analysis import uncertainty
from dsanalyze.analysis.fetchbound import fetch_bound
from dsanalyze.analysis.notes import Note, UnreadFetch, config_notes, host_drift
from dsanalyze.analysis.runrate import RunRate, run_rate
from dsanalyze.analysis.uncertainty import RateMethod, RateSamples, Significance, StallInterval
from dsanalyze.analysis.verdict import Bound, Verdict, verdict
from dsanalyze.config import Mode
from dsanalyze.plain import PlainJson
from dsanalyze.records import How, RunResult


@dataclass(frozen=True)
class ModeRate(PlainJson):
    """One mode of a configuration: its rate pooled over repeats, with the interval, and the
    first run's figures."""

    run_id: str
    run_ids: tuple[str, ...] = ()
    repeats: int = 1
    status: str = "ok"
    rate_sps: float | None = None
    rate_sps_low: float | None = None
    rate_sps_high: float | None = None
    rate_method: RateMethod | None = None
    rate_level: float | None = None
    time_s: float | None = None  # samples_per_epoch / rate_sps
    wait_pct: float | None = None
    iter_iqr_pct: float | None = None
    epoch1_s: float | None = None
    epoch1_rate_sps: float | None = None
    disturbed: tuple[str, ...] = ()
    error: str | None = None
    # cores the job kept busy in its steady window, the mean over the repeats that counted
    # them (`window.window_cores_busy`), of the `cpus` it was given
    cores_busy: float | None = None
    cpus: int | None = None


@dataclass(frozen=True)
class KnobHold(PlainJson):
    """How a configuration's runs held one knob (`records.Knob`), on which cgroup version and
    device."""

    how: str  # records.How value: cgroup, affinity, eviction, not_enforced
    why: str | None = None  # for not_enforced
    cgroup_version: int | None = None
    device: str | None = None  # the dataset's block device (the read throttle's)

    @property
    def enforced(self) -> bool:
        return self.how != How.NOT_ENFORCED.value


@dataclass(frozen=True)
class Breakdown(PlainJson):
    """Per resource configuration: each mode's rate and the stall split (per epoch).

    `prep_stall_s` and `fetch_stall_s` are clamped at 0 (what a bar can draw);
    the `*_low`/`*_high` interval and `*_significance` (a `Significance`
    value) say whether the stall is a finding or noise. With repeats, a mode's
    rate is the mean over its repeats.
    """

    key: str
    cpus: int | None
    cache_spec: str
    cache_bytes: int | None
    storage_read_bps: int | None
    samples_per_epoch: int | None
    modes: dict[str, ModeRate]  # mode value -> its rate
    enforced: dict[str, KnobHold]  # knob -> how it was held
    compute_s: float | None
    prep_stall_s: float | None
    fetch_stall_s: float | None
    total_s: float | None
    prep_stall_pct: float | None
    fetch_stall_pct: float | None
    verdict: Verdict  # what the table calls it, with the numbers it quotes
    notes: tuple[Note, ...] = ()  # what to say beside the table (`report/notes.py` words it)
    bound: str = Bound.UNKNOWN.value  # `Bound` value: the verdict's (what the advice reads)
    prep_stall_s_low: float | None = None
    prep_stall_s_high: float | None = None
    prep_stall_pct_low: float | None = None
    prep_stall_pct_high: float | None = None
    prep_stall_significance: str | None = None
    fetch_stall_s_low: float | None = None
    fetch_stall_s_high: float | None = None
    fetch_stall_pct_low: float | None = None
    fetch_stall_pct_high: float | None = None
    fetch_stall_significance: str | None = None
    level: float = uncertainty.DEFAULT_LEVEL
    net_bw_bps: int | None = None  # a remote configuration's link (None: unshaped)
    net_latency_s: float | None = None  # None: the data is local

    def widest_pct(self) -> float | None:
        """The larger half-width of the two stall intervals (points of the epoch)."""
        widths = [(hi - lo) / 2 for lo, hi in ((self.prep_stall_pct_low, self.prep_stall_pct_high),
                                              (self.fetch_stall_pct_low, self.fetch_stall_pct_high))
                  if lo is not None and hi is not None]
        return max(widths) if widths else None


def _mode_entry(rates: list[RunRate], samples: RateSamples | None, n: int | None,
                level: float) -> ModeRate:
    first = rates[0]
    rate = samples.rate_sps if samples else first.rate_sps
    ci = samples.interval(level) if samples else None
    return ModeRate(
        first.run_id, tuple(r.run_id for r in rates), len(rates), first.status, rate,
        rate_sps_low=ci.low_sps if ci else None, rate_sps_high=ci.high_sps if ci else None,
        rate_method=ci.method if ci else None, rate_level=level,
        time_s=n / rate if (n and rate) else None, wait_pct=first.wait_pct,
        iter_iqr_pct=first.iter_iqr_pct, epoch1_s=first.epoch1_s,
        epoch1_rate_sps=first.epoch1_rate_sps,
        disturbed=tuple(sorted({k for r in rates for k in r.disturbed})), error=first.error,
        cores_busy=statistics.mean(busy) if (busy := [r.cores_busy for r in rates
                                                      if r.cores_busy is not None]) else None,
        cpus=first.cpus)


def breakdowns(results: list[RunResult], level: float = uncertainty.DEFAULT_LEVEL) -> list[Breakdown]:
    """One Breakdown per resource configuration found among the runs.

    Configurations come from the disk runs (each pairs with the synthetic and
    cached runs of the same CPU count); without disk runs, one per CPU count.
    Repeats of a run (`RunSpec.repeat`) are pooled into their configuration.
    """
    by_mode_cpus: dict[tuple[Mode, int | None], list[RunResult]] = defaultdict(list)
    disk_runs: dict[str, list[RunResult]] = defaultdict(list)
    for r in sorted(results, key=lambda r: r.spec.repeat):
        if r.mode is Mode.DISK:
            disk_runs[r.spec.resources.key].append(r)
        else:
            by_mode_cpus[(r.mode, r.spec.resources.cpus)].append(r)
    anchors = list(disk_runs.values()) or \
        [v for (m, _), v in by_mode_cpus.items() if m is Mode.CACHED] or \
        [v for (m, _), v in by_mode_cpus.items() if m is Mode.SYNTHETIC]
    out = []
    for anchor in sorted(anchors, key=lambda runs: _order_key(runs[0])):
        cpus = anchor[0].spec.resources.cpus
        group = {Mode.DISK: anchor} if anchor[0].mode is Mode.DISK else {}
        for mode in (Mode.SYNTHETIC, Mode.CACHED, Mode.LOADER):
            if (mode, cpus) in by_mode_cpus:
                group[mode] = by_mode_cpus[(mode, cpus)]
        out.append(_breakdown(anchor[0], group, level))
    return out


def _order_key(r: RunResult) -> tuple:
    res = r.spec.resources
    return (res.cpus or 1 << 20,
            res.cache.cache_bytes if res.cache.cache_bytes is not None else 1 << 62,
            -(res.storage_read_bps or 1 << 62))


def _stall_fields(kind: str, stall: StallInterval | None) -> dict[str, Any]:
    if stall is None:
        return {f"{kind}_stall_s": None, f"{kind}_stall_pct": None}
    return {f"{kind}_stall_s": max(0.0, stall.s), f"{kind}_stall_pct": max(0.0, stall.pct),
            f"{kind}_stall_s_low": stall.s_low, f"{kind}_stall_s_high": stall.s_high,
            f"{kind}_stall_pct_low": stall.pct_low, f"{kind}_stall_pct_high": stall.pct_high,
            f"{kind}_stall_significance": stall.significance.value}


def _epoch_samples(rates: dict[Mode, list[RunRate]]) -> int | None:
    """A configuration's samples per epoch: the whole dataset's (a cached run of data larger
    than memory ran on a subset, the synthetic run on the whole loader), as the loader
    handed them out where a run read it: a synthetic run replays whole batches, so its
    epoch exceeds the loader's by less than a batch where the last batch was short (DALI's
    PARTIAL policy: 3008 for 3000 files in batches of 16)."""
    every = [r for rs in rates.values() for r in rs if r.samples_per_epoch]
    if not every:
        return None
    most = max(every, key=lambda r: r.samples_per_epoch)
    read = max((r.samples_per_epoch for r in every if r.mode != Mode.SYNTHETIC.value),
               default=0)
    short = most.samples_per_epoch - read
    if most.mode == Mode.SYNTHETIC.value and read and most.batch_samples \
            and 0 < short < most.batch_samples:
        return read
    return most.samples_per_epoch


def _breakdown(anchor: RunResult, group: dict[Mode, list[RunResult]], level: float) -> Breakdown:
    rates = {m: [run_rate(r) for r in runs] for m, runs in group.items()}
    ok = {m: [r for r in runs if r.ok] for m, runs in group.items()}
    boot = {m: uncertainty.combined_samples(runs) for m, runs in ok.items()}
    n = _epoch_samples(rates)
    times = {m: uncertainty.epoch_time(n, b) for m, b in boot.items() if b is not None and n}
    t_g, t_c, t_d = (times.get(m) for m in (Mode.SYNTHETIC, Mode.CACHED, Mode.DISK))
    total = t_d if t_d is not None else t_c
    prep = uncertainty.stall_interval(t_c, t_g, total, level) if t_c and t_g else None
    fetch = uncertainty.stall_interval(t_d, t_c, total, level) if t_d and t_c else None
    prep = suspect(prep, boot.get(Mode.CACHED), boot.get(Mode.SYNTHETIC), level)
    fetch = suspect(fetch, boot.get(Mode.DISK), boot.get(Mode.CACHED), level)
    unread = unread_fetch(fetch, ok.get(Mode.DISK, []),
                          *(b.rate_sps if (b := boot.get(m)) else None
                            for m in (Mode.DISK, Mode.CACHED)))
    if unread is not None:
        fetch = StallInterval.unread()
    res = anchor.spec.resources
    return Breakdown(
        key=res.key if anchor.mode is Mode.DISK else f"cpus{res.cpus or 'all'}",
        cpus=res.cpus, cache_spec=res.cache.spec, cache_bytes=res.cache.cache_bytes,
        storage_read_bps=res.storage_read_bps, samples_per_epoch=n,
        modes={m.value: _mode_entry(rs, boot.get(m), n, level) for m, rs in rates.items()},
        enforced=enforcement([r for runs in group.values() for r in runs]),
        compute_s=t_g[0] if t_g else None, total_s=total[0] if total else None,
        **_stall_fields("prep", prep), **_stall_fields("fetch", fetch),
        verdict=(v := verdict(prep, fetch)), bound=v.bound.value,
        notes=config_notes(anchor, rates, prep, fetch, group.get(Mode.CACHED, ()))
        + ((unread,) if unread is not None else ())
        + ((drift,) if (drift := host_drift([r for rs in group.values() for r in rs]))
           else ()),
        level=level, net_bw_bps=res.net_bw_bps, net_latency_s=res.net_latency_s)


def suspect(stall: StallInterval | None, slower: RateSamples | None, faster: RateSamples | None,
            level: float) -> StallInterval | None:
    """An inverted stall whose two rate intervals do not even overlap (the mode that should be
    slower measured faster beyond both intervals: a disk run faster than its cached run) is
    `SUSPECT`: not noise, and not the data path either."""
    if stall is None or stall.significance is not Significance.INVERTED or not slower or \
            not faster:
        return stall
    if slower.interval(level).low_sps > faster.interval(level).high_sps:
        return dataclasses.replace(stall, significance=Significance.SUSPECT)
    return stall


def unread_fetch(fetch: StallInterval | None, disk: list[RunResult], disk_rate_sps: float | None,
                 cached_rate_sps: float | None) -> UnreadFetch | None:
    """The note of a fetch stall the storage cannot have caused: every disk run of the
    configuration ran its steady window from the page cache (`fetchbound.FetchBound.unread`),
    with the two runs' difference it replaces; None otherwise, and for a stall inverted or
    suspect (the disk run measured faster: `suspect` and its notes say what that means)."""
    if fetch is None or fetch.significance not in (Significance.LIKELY, Significance.WITHIN_NOISE):
        return None  # an inverted or suspect stall is named as such: its faster run is the news
    bounds = [fetch_bound(r) for r in disk]
    if not bounds or not all(b is not None and b.unread for b in bounds):
        return None
    worst = max((b for b in bounds if b is not None), key=lambda b: b.bound_pct)
    return UnreadFetch(worst.run_id, worst.window_read_bytes, worst.bound_pct,
                       disk_rate_sps, cached_rate_sps, fetch.pct, fetch.half_width_pct,
                       fetch.significance.value)


def enforcement(runs: list[RunResult]) -> dict[str, KnobHold]:
    """Per knob, how a configuration's runs held it (the weakest where they differ), with the
    cgroup version and the dataset's device."""
    out: dict[str, KnobHold] = {}
    for r in runs:
        for name, knob in r.enforced.knobs().items():
            if name not in out or not knob.enforced:
                out[name] = KnobHold(knob.how.value, knob.why, r.enforced.cgroup_version,
                                     r.enforced.dataset_disk)
    return out
