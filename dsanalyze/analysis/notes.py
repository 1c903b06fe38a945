"""What a configuration's runs leave to say beside the table, typed: one frozen dataclass per
kind of note, carrying the numbers its words quote (`report/notes.py` words them).

    config_notes(anchor, rates, prep, fetch) -> (WideSpread(...), Disturbed(...), ...)

A note is stored in `summary.json` as its fields plus `kind` (`Note.to_dict`) and read back
into its own class (`Note.from_dict`). `Said` is the sentence a summary stored before the
notes were typed (schema < 3).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from dsanalyze.analysis.interference import Interference
from dsanalyze.analysis.jobrun import job_as_run, run_cpus, shares_cores
from dsanalyze.analysis.runrate import RunRate
from dsanalyze.analysis.uncertainty import Significance, StallInterval
from dsanalyze.analysis.window import read_ahead_steady
from dsanalyze.config import Mode
from dsanalyze.plain import Tagged
from dsanalyze.records import CacheAction, HostSpeed, RunResult
from dsanalyze.settings import SETTINGS

# more CPU busy outside the job (points) during the slower run than during the faster one that
# names outside work, rather than drift, as what a suspect inversion suspects
OUTSIDE_WORK_MARGIN_PCT = 10.0


class Note(Tagged):
    """A note's JSON carries its `kind`, by which `from_dict` finds its class."""

    KINDS: ClassVar[dict[str, type[Note]]] = {}


@dataclass(frozen=True)
class Said(Note):
    """A note in words, as a summary stored before the notes were typed has it."""

    kind: ClassVar[str] = "said"
    text: str


@dataclass(frozen=True)
class WideSpread(Note):
    """The synthetic run's iteration times spread widely: IQR above `SETTINGS.wide_spread_pct`
    of the median."""

    kind: ClassVar[str] = "wide_spread"
    mode: str
    iqr_pct: float


@dataclass(frozen=True)
class RunNotOk(Note):
    """A run of the configuration that did not complete (`status` other than ok)."""

    kind: ClassVar[str] = "run_not_ok"
    mode: str
    run_id: str
    status: str
    error: str | None


@dataclass(frozen=True)
class Disturbed(Note):
    """Others disturbed a run beyond a threshold (`interference.of_run`): on its CPUs (`CPU`,
    `others_cpu_pct` of them), on the CPUs it was not given (`MACHINE`, `others_outside_pct`
    busy) or on its disk (`IO`, `others_read_bytes`)."""

    kind: ClassVar[str] = "disturbed"
    mode: str
    run_id: str
    kinds: tuple[Interference, ...]
    others_cpu_pct: float | None = None
    others_outside_pct: float | None = None
    others_read_bytes: int | None = None


class Cause(enum.Enum):
    """What a suspect inversion suspects."""

    OUTSIDE_WORK = "outside_work"  # more CPU busy outside the job during the slower run
    DRIFT = "drift"  # no more outside work recorded: the runs drifted apart


@dataclass(frozen=True)
class SuspectStall(Note):
    """The `stall` (prep, fetch) inverted beyond both rate intervals: the `fast_mode` run,
    which should have been the slower, measured faster than the `slow_mode` run. `*_busy_pct`:
    the CPU busy outside the job during each run (the larger of the two shares recorded)."""

    kind: ClassVar[str] = "suspect_stall"
    stall: str
    fast_mode: str
    slow_mode: str
    fast_rate_sps: float | None
    slow_rate_sps: float | None
    cause: Cause
    slow_busy_pct: float | None = None
    fast_busy_pct: float | None = None


@dataclass(frozen=True)
class InvertedStall(Note):
    """The `stall` came out below 0 beyond noise: the `slower_mode` run (the one that should be
    slower) measured faster than the `faster_mode` run; `pct` ± `half_width_pct` of the epoch."""

    kind: ClassVar[str] = "inverted_stall"
    stall: str
    slower_mode: str
    faster_mode: str
    pct: float
    half_width_pct: float


@dataclass(frozen=True)
class UnreadFetch(Note):
    """The fetch stall is 0: the disk run `run_id` read `window_read_bytes` from storage in
    its steady window, which could hold it at most `bound_pct` of its time
    (`fetchbound.FetchBound.unread`). The two runs' rates (`disk_rate_sps`,
    `cached_rate_sps`) differed by `measured_pct` ± `half_width_pct` of the epoch
    (`measured`: that difference's `Significance` value), which is not the storage's."""

    kind: ClassVar[str] = "unread_fetch"
    run_id: str
    window_read_bytes: int
    bound_pct: float
    disk_rate_sps: float | None
    cached_rate_sps: float | None
    measured_pct: float
    half_width_pct: float
    measured: str = Significance.LIKELY.value


@dataclass(frozen=True)
class CacheUnbound(Note):
    """The cache budget `cache_label` cannot bind: the dataset fits in it (plus the memory
    limit's `margin_bytes`, runs from before the dataset-only budget)."""

    kind: ClassVar[str] = "cache_unbound"
    cache_label: str
    dataset_bytes: int
    margin_bytes: int


@dataclass(frozen=True)
class EvictionIncomplete(Note):
    """The disk run started with `resident_bytes` of the dataset in the page cache, in
    `files_left` files, that eviction could not drop (mapped by another process)."""

    kind: ClassVar[str] = "eviction_incomplete"
    run_id: str
    resident_bytes: int
    files_left: int


@dataclass(frozen=True)
class StuckPages(Note):
    """`stuck_bytes` of the dataset could not be evicted during the disk run."""

    kind: ClassVar[str] = "stuck_pages"
    run_id: str
    stuck_bytes: int


@dataclass(frozen=True)
class ReadAheadMoved(Note):
    """The remote run's loader fetched `fetched_samples` in its steady window and handed out
    `consumed_samples` (`window.read_ahead_drift` beyond its setting): it drained (or filled)
    its read-ahead, and its rate is not the rate its link sustains."""

    kind: ClassVar[str] = "read_ahead_moved"
    run_id: str
    consumed_samples: int
    fetched_samples: float


@dataclass(frozen=True)
class HostDrift(Note):
    """The machine's own speed differed between a configuration's runs by more than
    `SETTINGS.host_drift_pct`: a decode timed on one CPU around each run
    (`records.HostSpeed`) took `drift_pct` longer around `slow_run` than around
    `fast_run`."""

    kind: ClassVar[str] = "host_drift"
    slow_mode: str
    slow_run: str
    fast_mode: str
    fast_run: str
    drift_pct: float


def host_drift(runs: Sequence[RunResult]) -> HostDrift | None:
    """The note of a configuration whose runs (every mode, repeats too) the machine ran at
    speeds further apart than `SETTINGS.host_drift_pct`: the slowest against the fastest,
    each run's speed the mean of its probes before and after it; None otherwise, or where
    fewer than two runs recorded one."""
    timed = [(cpu_s, r) for r in runs if r.ok
             and (speed := HostSpeed.of_run(r)) is not None and (cpu_s := speed.cpu_s)]
    if len(timed) < 2:
        return None
    (slow_s, slow), (fast_s, fast) = max(timed, key=lambda t: t[0]), min(timed, key=lambda t: t[0])
    drift_pct = 100 * (slow_s / fast_s - 1)
    if drift_pct <= SETTINGS.host_drift_pct:
        return None
    return HostDrift(slow.mode.value, slow.run_id, fast.mode.value, fast.run_id, drift_pct)


@dataclass(frozen=True)
class SpinningStep(Note):
    """The step runs on the CPU in `threads` threads a rank beside `workers` DataLoader
    workers a rank on the same `cpus` (`jobrun.shares_cores`), and the job ran with
    OMP_WAIT_POLICY unset (`policy` None) or other than PASSIVE: a thread that waits for the
    others spins, on a core a worker needs. Only where the run recorded the policy."""

    kind: ClassVar[str] = "spinning_step"
    run_id: str
    threads: int
    workers: int
    cpus: int
    policy: str | None


@dataclass(frozen=True)
class SetEpochMissing(Note):
    """The training loader's sampler permutes by its epoch (`DistributedSampler(shuffle=True)`)
    and started two epochs of a run at the same one: the script does not call `set_epoch`, so
    every epoch reads the same permutation, the same batches in the same order (recorded by
    `instrument.api.Session.epoch_starts`; the what-if simulates that order)."""

    kind: ClassVar[str] = "set_epoch_missing"
    run_id: str


def set_epoch_missing(runs: Sequence[RunResult]) -> SetEpochMissing | None:
    """`SetEpochMissing` of the first of `runs` whose training loader recorded it, or None."""
    for r in runs:
        if r.ranks and (r.ranks[0].extra.get("loader") or {}).get("set_epoch_missing"):
            return SetEpochMissing(r.run_id)
    return None


def spinning_step(cached: Sequence[RunResult]) -> SpinningStep | None:
    """The first cached run whose step shares its cores with the workers while OpenMP threads
    spin (OMP_WAIT_POLICY recorded and unset, or not PASSIVE); None: none."""
    for run in cached:
        threads = run.environment.get("threads") or {}
        policy = threads.get("omp_wait_policy")
        if "omp_wait_policy" not in threads or (policy or "").strip().upper() == "PASSIVE":
            continue
        if run.ranks and shares_cores(run):
            n = run.ranks[0].extra.get("torch_threads") or threads.get("omp_num_threads") or 0
            if n > 1:
                return SpinningStep(run.run_id, int(n), job_as_run(run).workers, run_cpus(run),
                                    policy)
    return None


def _busy_pct(r: RunRate) -> float | None:
    shares = [p for p in (r.others_outside_pct, r.others_cpu_pct) if p is not None]
    return max(shares) if shares else None


def suspect_stall(stall: str, slow: RunRate, fast: RunRate) -> SuspectStall:
    """What a suspect inversion suspects: `slow` measured slower than `fast`, which should have
    been the slower. More work outside the job during it (machine-wide, also on CPUs it was
    not given) by more than `OUTSIDE_WORK_MARGIN_PCT`, else drift between the runs."""
    a, b = _busy_pct(slow), _busy_pct(fast)
    outside = a is not None and (b is None or a > b + OUTSIDE_WORK_MARGIN_PCT)
    return SuspectStall(stall, fast.mode, slow.mode, fast.rate_sps, slow.rate_sps,
                        Cause.OUTSIDE_WORK if outside else Cause.DRIFT, a, b)


def disturbed(r: RunRate) -> Disturbed | None:
    """Who disturbed the run (`RunRate.disturbed`), with the figures; None: nobody."""
    if not r.disturbed:
        return None
    return Disturbed(r.mode, r.run_id, tuple(Interference(k) for k in r.disturbed),
                     r.others_cpu_pct, r.others_outside_pct, r.others_read_bytes)


def _stall_notes(rates: dict[Mode, list[RunRate]], prep: StallInterval | None,
                 fetch: StallInterval | None) -> list[Note]:
    out: list[Note] = []
    for kind, slower, faster, stall in (("prep", Mode.CACHED, Mode.SYNTHETIC, prep),
                                        ("fetch", Mode.DISK, Mode.CACHED, fetch)):
        if stall is not None and stall.significance is Significance.SUSPECT:
            out.append(suspect_stall(kind, rates[faster][0], rates[slower][0]))
        if stall is not None and stall.significance is Significance.INVERTED:
            out.append(InvertedStall(kind, slower.value, faster.value, stall.pct,
                                     stall.half_width_pct))
    return out


def config_notes(anchor: RunResult, rates: dict[Mode, list[RunRate]],
                 prep: StallInterval | None, fetch: StallInterval | None,
                 cached: Sequence[RunResult] = ()) -> tuple[Note, ...]:
    """A configuration's notes: a wide spread, runs that failed or were disturbed, inverted
    stalls, a cache budget that could not bind or pages it could not evict, and a step whose
    OpenMP threads spin on the cores of its `cached` runs' workers, and a shuffling sampler
    whose `set_epoch` the script never calls."""
    out: list[Note] = [WideSpread(m.value, r.iter_iqr_pct) for m, rs in rates.items()
                       for r in rs[:1] if m is Mode.SYNTHETIC and r.iter_iqr_pct
                       and r.iter_iqr_pct > SETTINGS.wide_spread_pct]
    out += [RunNotOk(m.value, r.run_id, r.status, r.error) for m, rs in rates.items()
            for r in rs if r.status != "ok"]
    out += [d for rs in rates.values() for r in rs if (d := disturbed(r)) is not None]
    spinning, unset = spinning_step(cached), set_epoch_missing([anchor, *cached])
    return tuple(out + _stall_notes(rates, prep, fetch) + budget_notes(anchor)
                 + ([spinning] if spinning else []) + ([unset] if unset else []))


def budget_notes(disk: RunResult) -> list[Note]:
    """A cache budget that cannot bind (the dataset fits in it, plus the memory-limit margin
    of runs from before the dataset-only budget), dataset pages that eviction left, and a
    remote run whose loader's read-ahead moved over its steady window."""
    if disk.mode is not Mode.DISK:
        return []
    budget = disk.spec.resources.cache.cache_bytes
    margin = disk.enforced.memory_margin_bytes or 0
    dataset_bytes = disk.dataset.total_bytes
    out: list[Note] = []
    if budget is not None and dataset_bytes and dataset_bytes <= budget + margin:
        out.append(CacheUnbound(disk.spec.resources.cache.label, dataset_bytes, margin))
    if disk.io.cache_action is CacheAction.EVICTED_INCOMPLETE:
        out.append(EvictionIncomplete(disk.run_id,
                                      disk.io.cache_state.get("resident_before_bytes") or 0,
                                      disk.io.cache_state.get("files_left_resident", 0)))
    stuck = disk.io.residency.stuck_bytes if disk.io.residency else 0
    if stuck:
        out.append(StuckPages(disk.run_id, stuck))
    window = disk.link.window if disk.link is not None else None
    if window is not None and window.fetched_samples is not None and not read_ahead_steady(disk):
        out.append(ReadAheadMoved(disk.run_id, window.samples, window.fetched_samples))
    return out


def said(sentences: list[str]) -> list[dict[str, Any]]:
    """The notes of a summary stored before they were typed (sentences), as `Said` notes."""
    return [Said(text).to_dict() for text in sentences]

