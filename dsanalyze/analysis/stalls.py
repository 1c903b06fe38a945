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

A run's rate is its steady state: the iterations after the warm-up, and for a
disk run of two or more epochs, the epochs after the first (cold) one, which
is reported on its own. With several ranks, rate = the samples of all ranks /
the longest rank's measured time (ranks advance together through DDP).
"""

from __future__ import annotations

import dataclasses
import enum
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

from dsanalyze.analysis import interference, uncertainty
from dsanalyze.analysis.uncertainty import RateSamples, Significance, StallInterval
from dsanalyze.analysis.window import steady_window
from dsanalyze.config import Mode
from dsanalyze.plain import PlainJson
from dsanalyze.records import CacheAction, How, RunResult
from dsanalyze.settings import SETTINGS


class Bound(enum.Enum):
    """What the table calls a configuration (`verdict` words it; the advice reads it)."""

    PREP = "prep"  # a prep stall above 5% of the time, its whole interval above 0
    FETCH = "fetch"  # the same of the fetch stall (the larger of the two when both are)
    COMPUTE = "compute"  # every stall's interval at most 5% of the time
    NOISE = "within noise"  # a stall that may exceed 5% but cannot be told from 0
    UNKNOWN = "unknown"  # no synthetic and cached runs to compare


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
    error: str | None = None
    rate_sps_low: float | None = None  # confidence interval of rate_sps (uncertainty.py)
    rate_sps_high: float | None = None
    rate_method: str | None = None
    rate_level: float | None = None
    repeat: int = 1
    others_cpu_pct: float | None = None  # CPU time of other processes on the run's CPUs
    others_outside_pct: float | None = None  # ... on the CPUs the run was not given
    others_read_bytes: int | None = None  # bytes others read from the dataset's disk
    disturbed: tuple[str, ...] = ()  # Interference kinds beyond their threshold


def samples_per_epoch(result: RunResult) -> int | None:
    if not result.ranks:
        return None
    r0 = result.ranks[0]
    batches = r0.extra.get("batches_per_epoch")
    if batches and r0.samples:
        per_iter = statistics.median(r0.samples)
        return int(batches * per_iter * len(result.ranks))
    return result.dataset.num_files or None


def run_rate(result: RunResult, interval: bool = False) -> RunRate:
    """Steady-state rate, wait share, spread, cold epoch and interference of one run.

    `interval=True` adds the rate's confidence interval (a bootstrap: keep it
    out of loops that only need the rate).
    """
    base = RunRate(result.run_id, result.mode.value, result.status, error=result.error,
                   repeat=result.spec.repeat, **interference.of_run(result))
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
        base, rate_sps=samples / measured_s if measured_s > 0 else None,
        measured_samples=samples, measured_s=measured_s,
        wait_pct=100 * sum(waits) / sum(times) if sum(times) > 0 else None,
        iter_median_s=med, iter_iqr_pct=iqr_pct, epoch1_s=epoch1_s, epoch1_rate_sps=epoch1_rate,
        steady_epochs=len(window.epochs) - 1 if window.steady_from is not None else 0,
        samples_per_epoch=samples_per_epoch(result),
        rate_sps_low=ci.low_sps if ci else None, rate_sps_high=ci.high_sps if ci else None,
        rate_method=ci.method if ci else None, rate_level=ci.level if ci else None)


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
    rate_method: str | None = None
    rate_level: float | None = None
    time_s: float | None = None  # samples_per_epoch / rate_sps
    wait_pct: float | None = None
    iter_iqr_pct: float | None = None
    epoch1_s: float | None = None
    epoch1_rate_sps: float | None = None
    disturbed: tuple[str, ...] = ()
    error: str | None = None


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
    verdict: str
    warnings: tuple[str, ...] = ()
    bound: str = Bound.UNKNOWN.value  # `Bound` value: what the verdict calls it
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


def _likely_text(kind: str, stall: StallInterval) -> str:
    return f"{stall.pct:.0f}% ±{stall.half_width_pct:.0f} of time is {kind} stall"


def _likely(stalls: dict[str, StallInterval]) -> list[tuple[float, str]]:
    return sorted(((s.pct, k) for k, s in stalls.items()
                   if s.significance is Significance.LIKELY and s.pct > SETTINGS.input_bound_pct),
                  reverse=True)


def bound(prep: StallInterval | None, fetch: StallInterval | None) -> Bound:
    """The table's classification of one configuration (the rules of `verdict`)."""
    stalls = {k: s for k, s in (("prep", prep), ("fetch", fetch)) if s is not None}
    if not stalls:
        return Bound.UNKNOWN
    likely = _likely(stalls)
    if likely:
        return Bound(likely[0][1])
    if any(s.significance is Significance.SUSPECT for s in stalls.values()):
        return Bound.UNKNOWN  # as the verdict: a suspect stall is no finding either way
    if all(s.pct_high <= SETTINGS.input_bound_pct for s in stalls.values()):
        return Bound.COMPUTE
    return Bound.NOISE


def verdict(prep: StallInterval | None, fetch: StallInterval | None) -> str:
    """In words: `likely prep-bound: 41% ±3 of time is prep stall`, or `within noise: ...`."""
    if prep is None and fetch is None:
        return "unknown: no synthetic and cached runs to compare"
    stalls = {k: s for k, s in (("prep", prep), ("fetch", fetch)) if s is not None}
    suspects = [k for k, s in stalls.items() if s.significance is Significance.SUSPECT]
    if suspects and not any(s.significance is Significance.LIKELY for s in stalls.values()):
        return f"unknown: the {suspects[0]} stall is suspect (see the note)"
    likely = _likely(stalls)
    if likely:
        (pct, kind), *rest = likely
        level = "highly " if pct > SETTINGS.highly_input_bound_pct else ""
        text = f"likely {level}{kind}-bound: {_likely_text(kind, stalls[kind])}"
        for _, other in rest:
            text += f", {stalls[other].pct:.0f}% ±{stalls[other].half_width_pct:.0f} {other} stall"
        return text
    if all(s.pct_high <= SETTINGS.input_bound_pct for s in stalls.values()):
        total = sum(max(s.pct, 0.0) for s in stalls.values())
        noise = all(s.significance is not Significance.LIKELY for s in stalls.values())
        return f"compute-bound: stalls are {total:.0f}% of time" + (" (within noise)" if noise else "")
    kind, s = max(stalls.items(), key=lambda ks: ks[1].pct_high)
    return (f"within noise: {kind} stall {s.pct:.0f}% ±{s.half_width_pct:.0f} cannot be told "
            "from 0; repeat the runs (--repeats, --target-ci)")


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
        disturbed=tuple(sorted({k for r in rates for k in r.disturbed})), error=first.error)


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


def _breakdown(anchor: RunResult, group: dict[Mode, list[RunResult]], level: float) -> Breakdown:
    rates = {m: [run_rate(r) for r in runs] for m, runs in group.items()}
    ok = {m: [r for r in runs if r.ok] for m, runs in group.items()}
    boot = {m: uncertainty.combined_samples(runs) for m, runs in ok.items()}
    # the whole dataset's: a cached run of data larger than memory ran on a subset
    n = max((r.samples_per_epoch for rs in rates.values() for r in rs if r.samples_per_epoch),
            default=None)
    times = {m: uncertainty.epoch_time(n, b) for m, b in boot.items() if b is not None and n}
    t_g, t_c, t_d = (times.get(m) for m in (Mode.SYNTHETIC, Mode.CACHED, Mode.DISK))
    total = t_d if t_d is not None else t_c
    prep = uncertainty.stall_interval(t_c, t_g, total, level) if t_c and t_g else None
    fetch = uncertainty.stall_interval(t_d, t_c, total, level) if t_d and t_c else None
    prep = suspect(prep, boot.get(Mode.CACHED), boot.get(Mode.SYNTHETIC), level)
    fetch = suspect(fetch, boot.get(Mode.DISK), boot.get(Mode.CACHED), level)
    res = anchor.spec.resources
    return Breakdown(
        key=res.key if anchor.mode is Mode.DISK else f"cpus{res.cpus or 'all'}",
        cpus=res.cpus, cache_spec=res.cache.spec, cache_bytes=res.cache.cache_bytes,
        storage_read_bps=res.storage_read_bps, samples_per_epoch=n,
        modes={m.value: _mode_entry(rs, boot.get(m), n, level) for m, rs in rates.items()},
        enforced=enforcement([r for runs in group.values() for r in runs]),
        compute_s=t_g[0] if t_g else None, total_s=total[0] if total else None,
        **_stall_fields("prep", prep), **_stall_fields("fetch", fetch),
        verdict=verdict(prep, fetch), bound=bound(prep, fetch).value,
        warnings=tuple(_warnings(anchor, rates, prep, fetch)),
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


def suspect_note(kind: str, slow: RunRate, fast: RunRate) -> str:
    """What a suspect inversion suspects: `slow` measured slower than `fast`, which should have
    been the slower. More work outside the job during it (machine-wide, also on CPUs it was
    not given), else drift between the runs."""
    def load(r: RunRate) -> float | None:
        shares = [p for p in (r.others_outside_pct, r.others_cpu_pct) if p is not None]
        return max(shares) if shares else None
    a, b = load(slow), load(fast)
    if a is not None and (b is None or a > b + 10):
        cause = (f"other work on the machine during the {slow.mode} run: {a:.0f}% of CPU "
                 f"busy outside the job" + (f" ({b:.0f}% during the {fast.mode} run)"
                                              if b is not None else ""))
    else:
        cause = (f"drift between the runs: no more outside work was recorded during the "
                 f"{slow.mode} run")
    return (f"{kind} stall suspect: the {fast.mode} run measured faster than the {slow.mode} run "
            f"beyond both rate intervals ({fast.rate_sps:.1f} vs {slow.rate_sps:.1f} samples/s), "
            f"which the data path cannot explain; suspected: {cause}; repeat with --repeats")


def _warnings(anchor: RunResult, rates: dict[Mode, list[RunRate]], prep: StallInterval | None,
              fetch: StallInterval | None) -> list[str]:
    out = [f"{m.value}: iteration times spread widely (IQR {r.iter_iqr_pct:.0f}% of median)"
           for m, rs in rates.items() for r in rs[:1]
           if r.iter_iqr_pct and r.iter_iqr_pct > SETTINGS.wide_spread_pct and m is Mode.SYNTHETIC]
    out += [f"{m.value} run {r.run_id} {r.status}: {r.error}" for m, rs in rates.items()
            for r in rs if r.status != "ok"]
    out += [w for m, rs in rates.items() for r in rs
            if (w := interference.warning(r.run_id, m, asdict(r))) is not None]
    for kind, slower, faster, stall in (("prep", "cached", "synthetic", prep),
                                        ("fetch", "disk", "cached", fetch)):
        if stall is not None and stall.significance is Significance.SUSPECT:
            out.append(suspect_note(kind, rates[Mode(faster)][0], rates[Mode(slower)][0]))
        if stall is not None and stall.significance is Significance.INVERTED:
            out.append(f"{kind} stall {stall.pct:.1f}% ±{stall.half_width_pct:.1f}: the {slower} "
                       f"run measured faster than the {faster} run beyond noise (drift or "
                       "interference between the runs); repeat with --repeats")
    return out + _budget_warnings(anchor)


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


def _budget_warnings(disk: RunResult) -> list[str]:
    """A cache budget that cannot bind (the dataset fits in it, plus the memory-limit margin
    of runs from before the dataset-only budget), and dataset pages that eviction left."""
    if disk.mode is not Mode.DISK:
        return []
    budget = disk.spec.resources.cache.cache_bytes
    margin = disk.enforced.memory_margin_bytes or 0
    dataset_bytes = disk.dataset.total_bytes
    out = []
    if budget is not None and dataset_bytes and dataset_bytes <= budget + margin:
        room = "the budget plus the memory-limit margin" if margin else "the budget"
        out.append(f"cache {disk.spec.resources.cache.label} does not bind: the dataset "
                   f"({dataset_bytes / 2**20:.0f} MiB) fits in {room}; use a larger dataset")
    before = disk.io.cache_state.get("resident_before_bytes") or 0
    if disk.io.cache_action is CacheAction.EVICTED_INCOMPLETE:
        out.append(f"disk run {disk.run_id} started with {before / 2**20:.1f} MiB of the dataset "
                   f"in the page cache that eviction could not drop (mapped by another process, "
                   f"in {disk.io.cache_state.get('files_left_resident', 0)} files): its first "
                   "epoch read less from storage")
    stuck = disk.io.residency.stuck_bytes if disk.io.residency else 0
    if stuck:
        out.append(f"disk run {disk.run_id}: {stuck / 2**20:.1f} MiB of the dataset could not be "
                   "evicted during the run (mapped by a process): the budget held the rest")
    return out

