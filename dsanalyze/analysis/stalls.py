"""The differential stall breakdown, a pure function over stored runs.

For one resource configuration, with N samples per epoch:

    compute_s     = N / G                 G: synthetic rate (samples/s)
    prep_stall_s  = N / P_cached - N / G  (>= 0)
    fetch_stall_s = N / P_disk - N / P_cached  (>= 0)
    total_s       = N / P_disk  (N / P_cached when there is no disk run)
    *_pct         = *_stall_s / total_s * 100

A run's rate is its steady state: the iterations after the warm-up, and for a
disk run of two or more epochs, the epochs after the first (cold) one, which
is reported on its own. With several ranks, rate = the samples of all ranks /
the longest rank's measured time (ranks advance together through DDP).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

from dsanalyze.config import Mode
from dsanalyze.store import RankRecord, RunResult

INPUT_BOUND_PCT = 5.0  # TF profiler: input-bound when > 5% of step time waits for data
HIGHLY_INPUT_BOUND_PCT = 20.0
WIDE_SPREAD_PCT = 10.0  # torch.utils.benchmark warns when IQR/median > 10%


@dataclass(frozen=True)
class RunRate:
    """Headline numbers of one run."""

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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _measured(rank: RankRecord, steady_from_epoch: int | None) -> list[int]:
    idx = range(rank.warmup, len(rank.iter_s))
    if steady_from_epoch is None:
        return list(idx)
    return [i for i in idx if rank.epoch[i] >= steady_from_epoch]


def samples_per_epoch(result: RunResult) -> int | None:
    if not result.ranks:
        return None
    r0 = result.ranks[0]
    batches = r0.extra.get("batches_per_epoch")
    if batches and r0.samples:
        per_iter = statistics.median(r0.samples)
        return int(batches * per_iter * len(result.ranks))
    return result.dataset.get("files")


def run_rate(result: RunResult) -> RunRate:
    """Steady-state rate, wait share, spread and cold epoch of one run."""
    base = RunRate(result.run_id, result.mode.value, result.status, error=result.error)
    ranks = [r for r in result.ranks if len(r.iter_s) > r.warmup]
    if not result.ok or not ranks:
        return base
    epochs = sorted({e for r in ranks for e in r.epoch})
    steady_from = None
    epoch1_s = epoch1_rate = None
    if result.mode is Mode.DISK and len(epochs) >= 2:
        steady_from = epochs[1]
        first = [[i for i, e in enumerate(r.epoch) if e == epochs[0]] for r in ranks]
        epoch1_s = max(sum(r.iter_s[i] for i in f) for r, f in zip(ranks, first))
        epoch1_samples = sum(sum(r.samples[i] for i in f) for r, f in zip(ranks, first))
        epoch1_rate = epoch1_samples / epoch1_s if epoch1_s > 0 else None
    chosen = [_measured(r, steady_from) for r in ranks]
    samples = sum(sum(r.samples[i] for i in c) for r, c in zip(ranks, chosen))
    times = [sum(r.iter_s[i] for i in c) for r, c in zip(ranks, chosen)]
    waits = [sum(r.wait_s[i] for i in c) for r, c in zip(ranks, chosen)]
    measured_s = max(times)
    iters = sorted(r.iter_s[i] for r, c in zip(ranks, chosen) for i in c)
    med = statistics.median(iters) if iters else None
    iqr_pct = None
    if len(iters) >= 4 and med:
        q = statistics.quantiles(iters, n=4)
        iqr_pct = (q[2] - q[0]) / med * 100
    return RunRate(
        result.run_id, result.mode.value, result.status,
        rate_sps=samples / measured_s if measured_s > 0 else None,
        measured_samples=samples, measured_s=measured_s,
        wait_pct=100 * sum(waits) / sum(times) if sum(times) > 0 else None,
        iter_median_s=med, iter_iqr_pct=iqr_pct, epoch1_s=epoch1_s, epoch1_rate_sps=epoch1_rate,
        steady_epochs=len(epochs) - 1 if steady_from is not None else 0,
        samples_per_epoch=samples_per_epoch(result),
    )


@dataclass(frozen=True)
class Breakdown:
    """Per resource configuration: each mode's rate and the stall split (per epoch)."""

    key: str
    cpus: int | None
    cache_spec: str
    cache_bytes: int | None
    storage_read_bps: int | None
    samples_per_epoch: int | None
    modes: dict[str, dict[str, Any]]  # mode -> rate_sps, time_s, wait_pct, run_id, status
    enforced: dict[str, Any]
    compute_s: float | None
    prep_stall_s: float | None
    fetch_stall_s: float | None
    total_s: float | None
    prep_stall_pct: float | None
    fetch_stall_pct: float | None
    verdict: str
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["warnings"] = list(self.warnings)
        return d


def verdict(prep_pct: float | None, fetch_pct: float | None) -> str:
    """In words: `prep-bound: 41% of time is prep stall`."""
    if prep_pct is None and fetch_pct is None:
        return "unknown: no synthetic and cached runs to compare"
    prep, fetch = prep_pct or 0.0, fetch_pct or 0.0
    if prep + fetch <= INPUT_BOUND_PCT:
        return f"compute-bound: stalls are {prep + fetch:.0f}% of time"
    kind, pct, other, other_pct = ("prep", prep, "fetch", fetch) if prep >= fetch else \
        ("fetch", fetch, "prep", prep)
    level = "highly " if pct > HIGHLY_INPUT_BOUND_PCT else ""
    text = f"{level}{kind}-bound: {pct:.0f}% of time is {kind} stall"
    if other_pct > INPUT_BOUND_PCT:
        text += f", {other_pct:.0f}% {other} stall"
    return text


def _mode_entry(rate: RunRate, n: int | None) -> dict[str, Any]:
    time_s = n / rate.rate_sps if (n and rate.rate_sps) else None
    return {"run_id": rate.run_id, "status": rate.status, "rate_sps": rate.rate_sps,
            "time_s": time_s, "wait_pct": rate.wait_pct, "iter_iqr_pct": rate.iter_iqr_pct,
            "epoch1_s": rate.epoch1_s, "epoch1_rate_sps": rate.epoch1_rate_sps,
            "error": rate.error}


def breakdowns(results: list[RunResult]) -> list[Breakdown]:
    """One Breakdown per resource configuration found among the runs.

    Configurations come from the disk runs (each pairs with the synthetic and
    cached runs of the same CPU count); without disk runs, one per CPU count.
    """
    by_mode_cpus: dict[tuple[Mode, int | None], RunResult] = {}
    disk_runs = []
    for r in results:
        if r.mode is Mode.DISK:
            disk_runs.append(r)
        else:
            by_mode_cpus[(r.mode, r.spec.resources.cpus)] = r
    anchors = disk_runs or [r for r in results if r.mode is Mode.CACHED] or \
        [r for r in results if r.mode is Mode.SYNTHETIC]
    out = []
    for anchor in sorted(anchors, key=_order_key):
        cpus = anchor.spec.resources.cpus
        group = {Mode.DISK: anchor} if anchor.mode is Mode.DISK else {}
        for mode in (Mode.SYNTHETIC, Mode.CACHED, Mode.LOADER):
            if (mode, cpus) in by_mode_cpus:
                group[mode] = by_mode_cpus[(mode, cpus)]
        out.append(_breakdown(anchor, group))
    return out


def _order_key(r: RunResult) -> tuple:
    res = r.spec.resources
    return (res.cpus or 1 << 20,
            res.cache.cache_bytes if res.cache.cache_bytes is not None else 1 << 62,
            -(res.storage_read_bps or 1 << 62))


def _breakdown(anchor: RunResult, group: dict[Mode, RunResult]) -> Breakdown:
    rates = {m: run_rate(r) for m, r in group.items()}
    n = next((r.samples_per_epoch for r in rates.values() if r.samples_per_epoch), None)
    g = rates.get(Mode.SYNTHETIC)
    c = rates.get(Mode.CACHED)
    d = rates.get(Mode.DISK)

    def t(rate: RunRate | None) -> float | None:
        return n / rate.rate_sps if (rate and rate.rate_sps and n) else None

    t_g, t_c, t_d = t(g), t(c), t(d)
    compute = t_g
    prep = max(0.0, t_c - t_g) if (t_c is not None and t_g is not None) else None
    fetch = max(0.0, t_d - t_c) if (t_d is not None and t_c is not None) else None
    total = t_d if t_d is not None else t_c

    def pct(x: float | None) -> float | None:
        return 100 * x / total if (x is not None and total) else None

    warnings = [f"{m.value}: iteration times spread widely (IQR {r.iter_iqr_pct:.0f}% of median)"
                for m, r in rates.items() if r.iter_iqr_pct and r.iter_iqr_pct > WIDE_SPREAD_PCT
                and m is Mode.SYNTHETIC]
    warnings += [f"{m.value} run {r.run_id} {r.status}: {r.error}" for m, r in rates.items()
                 if r.status != "ok"]
    enforced = {k: v for r in group.values() for k, v in r.enforced.items()}
    warnings += _budget_warnings(anchor)
    res = anchor.spec.resources
    return Breakdown(
        key=res.key if anchor.mode is Mode.DISK else f"cpus{res.cpus or 'all'}",
        cpus=res.cpus, cache_spec=res.cache.spec, cache_bytes=res.cache.cache_bytes,
        storage_read_bps=res.storage_read_bps, samples_per_epoch=n,
        modes={m.value: _mode_entry(r, n) for m, r in rates.items()}, enforced=enforced,
        compute_s=compute, prep_stall_s=prep, fetch_stall_s=fetch, total_s=total,
        prep_stall_pct=pct(prep), fetch_stall_pct=pct(fetch),
        verdict=verdict(pct(prep), pct(fetch)), warnings=tuple(warnings))


def _budget_warnings(disk: RunResult) -> list[str]:
    """A cache budget that cannot bind: the dataset fits in the budget plus the margin."""
    budget = disk.spec.resources.cache.cache_bytes
    margin = disk.enforced.get("memory_margin_bytes")
    dataset_bytes = disk.dataset.get("bytes")
    if disk.mode is not Mode.DISK or budget is None or not margin or not dataset_bytes:
        return []
    if dataset_bytes <= budget + margin:
        return [f"cache {disk.spec.resources.cache.label} does not bind: the dataset "
                f"({dataset_bytes / 2**20:.0f} MiB) fits in the budget plus the memory-limit margin "
                f"({margin / 2**20:.0f} MiB); use a larger dataset"]
    return []


def summary(results: list[RunResult]) -> dict[str, Any]:
    """The `summary.json` document: job, dataset, one entry per configuration (its cold
    first epoch included), what the runs measured against what was asked."""
    from dsanalyze.analysis import coldepoch, pernode, window  # they build on this module

    ok = [r for r in results if r.ok]
    first = (ok or results)[0] if results else None
    return {
        "job": first.spec.job.to_dict() if first else None,
        "dataset": first.dataset if first else None,
        "configs": [coldepoch.with_cold_epoch(b.to_dict()) for b in breakdowns(results)],
        "measured": window.window_summary(results),
        "runs": [run_rate(r).to_dict() for r in results],
        "failed_runs": [{"run_id": r.run_id, "status": r.status, "error": r.error}
                        for r in results if not r.ok],
        "nodes": pernode.breakdown(results),
    }
