"""The notes under the stall table, in words: a configuration's typed notes
(`analysis.notes`), its enforcement caveats, the measured window's and the failed runs.

    note_text(WideSpread("synthetic", 42.0))
        -> "synthetic: iteration times spread widely (IQR 42% of median)"
    notes(summary) -> ['cache not enforced: ...', 'synthetic: ...', ...]

Every number is the note's; which note applies is the analysis's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dsanalyze.analysis.interference import Interference
from dsanalyze.analysis.measured import MeasuredWindow, NotCachedCause, ShortRun
from dsanalyze.analysis.notes import (
    CacheUnbound,
    Cause,
    Disturbed,
    EvictionIncomplete,
    HostDrift,
    InvertedStall,
    Note,
    ReadAheadMoved,
    RunNotOk,
    Said,
    SetEpochMissing,
    SpinningStep,
    StuckPages,
    SuspectStall,
    UnreadFetch,
    WideSpread,
)
from dsanalyze.analysis.summary import Summary
from dsanalyze.config import format_bytes
from dsanalyze.records import ReclaimScheme
from dsanalyze.report.text import enforcement_text

REPEAT = "repeat with --repeats"
# the figures a disturbed mode's rate is in (`analysis/interference.py`)
AFFECTS = {"synthetic": ("compute", "prep stall"), "cached": ("prep stall", "fetch stall"),
           "disk": ("fetch stall", "epoch time"), "loader": ("loader rate",)}


def _mib(n: float, fmt: str = "{:.0f}") -> str:
    return fmt.format(n / 2**20)


def _disturbed(n: Disturbed) -> str:
    what = []
    if Interference.CPU in n.kinds:
        what.append(f"other processes used {n.others_cpu_pct:.0f}% of its CPUs")
    if Interference.MACHINE in n.kinds:
        what.append(f"other processes kept the CPUs it was not given "
                    f"{n.others_outside_pct:.0f}% busy (memory bandwidth and caches are shared)")
    if Interference.IO in n.kinds:
        what.append(f"others read {_mib(n.others_read_bytes or 0)} MiB from its disk")
    return (f"{n.mode} run {n.run_id} disturbed: {' and '.join(what)}; affects "
            f"{' and '.join(AFFECTS[n.mode])}")


def _suspect(n: SuspectStall) -> str:
    if n.cause is Cause.OUTSIDE_WORK:
        during = f" ({n.fast_busy_pct:.0f}% during the {n.fast_mode} run)" \
            if n.fast_busy_pct is not None else ""
        cause = (f"other work on the machine during the {n.slow_mode} run: "
                 f"{n.slow_busy_pct:.0f}% of CPU busy outside the job{during}")
    else:
        cause = (f"drift between the runs: no more outside work was recorded during the "
                 f"{n.slow_mode} run")
    return (f"{n.stall} stall suspect: the {n.fast_mode} run measured faster than the "
            f"{n.slow_mode} run beyond both rate intervals ({n.fast_rate_sps:.1f} vs "
            f"{n.slow_rate_sps:.1f} samples/s), which the data path cannot explain; "
            f"suspected: {cause}; {REPEAT}")


def _inverted(n: InvertedStall) -> str:
    return (f"{n.stall} stall {n.pct:.1f}% ±{n.half_width_pct:.1f}: the {n.slower_mode} run "
            f"measured faster than the {n.faster_mode} run beyond noise (drift or interference "
            f"between the runs); {REPEAT}")


def _unread(n: UnreadFetch) -> str:
    rates = "" if n.disk_rate_sps is None or n.cached_rate_sps is None else \
        f" ({n.disk_rate_sps:.1f} against {n.cached_rate_sps:.1f} samples/s)"
    between = f"the {n.measured_pct:+.1f}% ±{n.half_width_pct:.1f} between the two runs{rates}"
    rest = f"{between} is within their noise" if n.measured == "within_noise" else \
        (f"{between} is not the storage's: drift between the runs, which neither run's interval "
         f"holds, or interference (see the runs' other notes); {REPEAT}")
    return (f"fetch stall 0: disk run {n.run_id} read {format_bytes(n.window_read_bytes)} from "
            f"storage in its steady window, too little to wait on for more than "
            f"{n.bound_pct:.1f}% of it: it ran from the page cache, as the cached run did; "
            f"{rest}")


def _unbound(n: CacheUnbound) -> str:
    room = "the budget plus the memory-limit margin" if n.margin_bytes else "the budget"
    return (f"cache {n.cache_label} does not bind: the dataset ({_mib(n.dataset_bytes)} MiB) "
            f"fits in {room}; use a larger dataset")


def _eviction(n: EvictionIncomplete) -> str:
    return (f"disk run {n.run_id} started with {_mib(n.resident_bytes, '{:.1f}')} MiB of the "
            f"dataset in the page cache that eviction could not drop (mapped by another "
            f"process, in {n.files_left} files): its first epoch read less from storage")


def _read_ahead(n: ReadAheadMoved) -> str:
    moved = "drained" if n.fetched_samples < n.consumed_samples else "filled"
    return (f"remote run {n.run_id}: its loader {moved} its read-ahead in the measured window "
            f"(the link carried {n.fetched_samples:.0f} samples, the ranks consumed "
            f"{n.consumed_samples}): its rate is not the link's, and the what-if leaves it out; "
            f"measure more iterations (--iters) on data larger than the loader reads ahead")


def _spinning(n: SpinningStep) -> str:
    policy = "OMP_WAIT_POLICY unset" if n.policy is None else f"OMP_WAIT_POLICY={n.policy}"
    spins = "spins before it sleeps" if n.policy is None else "spins"
    return (f"cached run {n.run_id}: the step runs {n.threads} OpenMP threads a rank on the "
            f"{n.cpus} CPUs its {n.workers} DataLoader worker(s) a rank use, with {policy}: a "
            f"thread that waits for the others {spins}, on a core a worker needs; profile "
            "again with OMP_WAIT_POLICY=PASSIVE in the harness's environment (the job "
            "inherits it) to measure the job without the spin")


def _host_drift(n: HostDrift) -> str:
    return (f"the machine itself ran {n.drift_pct:.0f}% slower around {n.slow_mode} run "
            f"{n.slow_run} than around {n.fast_mode} run {n.fast_run} (the same decode, timed "
            "on one CPU before and after each run): what separates those runs' rates holds up "
            "to that much of the machine's drift, not the job's; measure again when it is "
            "steadier, or with --repeats")


def _set_epoch(n: SetEpochMissing) -> str:
    return ("the training loader's sampler shuffles by its epoch (DistributedSampler), but the "
            f"script never calls its set_epoch (run {n.run_id} started two epochs at the same "
            "one): every epoch reads the same permutation, the same batches in the same order, "
            "and a page cache smaller than the data keeps none of them for the next epoch; "
            "call sampler.set_epoch(epoch) before each epoch's loop")


WORDS: dict[type[Note], Callable[[Any], str]] = {
    Said: lambda n: n.text,
    WideSpread: lambda n: f"{n.mode}: iteration times spread widely (IQR {n.iqr_pct:.0f}% of "
                          "median)",
    RunNotOk: lambda n: f"{n.mode} run {n.run_id} {n.status}: {n.error}",
    Disturbed: _disturbed,
    SuspectStall: _suspect,
    InvertedStall: _inverted,
    UnreadFetch: _unread,
    CacheUnbound: _unbound,
    EvictionIncomplete: _eviction,
    ReadAheadMoved: _read_ahead,
    SpinningStep: _spinning,
    SetEpochMissing: _set_epoch,
    HostDrift: _host_drift,
    StuckPages: lambda n: f"disk run {n.run_id}: {_mib(n.stuck_bytes, '{:.1f}')} MiB of the "
                          "dataset could not be evicted during the run (mapped by a process): "
                          "the budget held the rest",
}


def short_text(s: ShortRun) -> str:
    """`the script ended after 13 of 105 iterations (5 warm-up + 100 asked): measured 8`."""
    if s.unit == "iterations":
        asked = f"{s.warmup + s.asked} iterations ({s.warmup} warm-up + {s.asked} asked)"
    else:
        asked = f"{s.asked} epochs"
    return f"the script ended after {s.ran} of {asked}: measured {s.measured} iteration(s)"


def note_text(note: Note) -> str:
    """One note in one line."""
    return WORDS[type(note)](note)


def notes(summary: Summary) -> list[str]:
    """Enforcement caveats, the configurations' notes and failed runs, one line each."""
    out: list[str] = []
    seen: set[str] = set()
    for cfg in summary.configs:
        for knob in ("cache", "storage_bw"):
            how = cfg.enforced.get(knob)
            text = enforcement_text(knob, how) if how else ""
            if how and not how.enforced and f"{knob}{text}" not in seen:
                seen.add(f"{knob}{text}")
                out.append(f"{knob.replace('_', ' ')} {text}")
        for line in map(note_text, cfg.notes):
            if line not in seen:
                seen.add(line)
                out.append(line)
    out += _window_notes(summary)
    for f in summary.failed_runs:
        line = f"run {f.run_id} {f.status}: {f.error}"
        if not any(line in s or s in line for s in seen):
            out.append(line)
    return out


def _window_notes(summary: Summary) -> list[str]:
    """Disk figures of a single (cold) epoch; scripts that ended before the window was full."""
    out = []
    if any(c.cold_only for c in summary.configs):
        out.append("disk figures are the cold first epoch (one epoch measured, the page cache "
                   "empty at its start): measure 2 or more epochs (--epochs 2) for the steady "
                   "state")
    said: dict[str, list[str]] = {}
    for s in summary.measured.short_runs:
        said.setdefault(short_text(s), []).append(s.run_id)
    n_runs = len(summary.runs)
    out += [f"{text} ({'every run' if len(ids) == n_runs else ', '.join(ids)})"
            for text, ids in said.items()]
    return out + _cache_notes(summary.measured)


def _cache_notes(measured: MeasuredWindow) -> list[str]:
    """Data larger than memory: the subset a cached run measured prep on; cached runs that
    were not cached."""
    out = [f"{s.run_id} measured prep on a subset: {s.files} of {s.of_files} files "
           f"({format_bytes(s.bytes)} of {format_bytes(s.of_bytes)}); the page cache has "
           f"room for {format_bytes(s.room_bytes)} ({s.room_why}); the table is per epoch "
           "of the whole dataset" for s in measured.subsets]
    for n in measured.not_cached:
        why = "its dataset could not be narrowed to the warmed subset (not a torchvision " \
              "DatasetFolder)" if n.narrowed is False else \
              f"only {n.resident_pct:g}% of the files warmed were resident at its start or its end"
        read = (f"its measured window read {format_bytes(n.window_read_bytes or 0)} from "
                f"storage, {100 * (n.window_read_bytes or 0) / (n.window_data_bytes or 1):.0f}% "
                "of the data it went through")
        if n.cause is NotCachedCause.READ_IN_WINDOW:
            why = f"{read} (the page cache reclaimed while it ran and read back; or files " \
                  "beside the dataset)"
        elif n.read_in_window:
            why = f"{why}; {read}"
        own = "".join(f"; this machine reclaims on its own: {reclaim_text(r)}" for r in n.reclaim)
        out.append(f"{n.run_id} was NOT cached: {why}{own}; its prep stall includes fetch time")
    return out


def reclaim_text(s: ReclaimScheme) -> str:
    """`DAMON kdamond 0 applies pageout to memory other than anon pages idle 60 s or longer,
    at most 128M/s`."""
    spared = f" other than {', '.join(s.excludes)} pages" if s.excludes else ""
    idle = f" idle {s.min_idle_s:g} s or longer" if s.min_idle_s is not None else ""
    quota = f", at most {format_bytes(s.quota_bps)}/s" if s.quota_bps else ""
    return f"DAMON kdamond {s.kdamond} applies {s.action} to memory{spared}{idle}{quota}"
