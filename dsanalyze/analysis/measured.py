"""What the runs measured against what was asked: the window and the device.

A user script decides its own length: asked for `--iters 100`, a script of
two short epochs ends after 13; asked for `--epochs 4`, one of two epochs
stops after 2. Each such run is listed (`short_runs`), so that the table, the
run's progress line and the report say so instead of a silent cut. A user
script also decides its own device: `job_device` is the one its ranks used
(`extra["device"]`: where the replayed batch lives, else the rank's torch
state), not the built-in job's `--device` setting.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from dsanalyze.analysis.jobrun import JobAsRun, job_as_run
from dsanalyze.analysis.runrate import samples_per_epoch
from dsanalyze.analysis.window import steady_window, window_read_bytes
from dsanalyze.config import Mode
from dsanalyze.plain import PlainJson
from dsanalyze.records import ReclaimScheme, RunResult
from dsanalyze.settings import SETTINGS


@dataclass(frozen=True)
class ShortRun(PlainJson):
    """A run whose script ended before the measured window was full (per rank 0)."""

    run_id: str
    asked: int  # iterations (after the warm-up) or epochs asked for
    ran: int  # iterations or epochs the script ran (warm-up included)
    measured: int  # iterations measured (after the warm-up)
    unit: str  # "iterations" or "epochs"
    warmup: int = 0  # warm-up iterations, before the asked iterations


def short_run(result: RunResult) -> ShortRun | None:
    """The run as a ShortRun if its script ended before `--iters` or `--epochs` were reached."""
    job = result.spec.job
    if not result.ok or not result.ranks or job.script is None:
        return None
    rank = result.ranks[0]
    if (rank.extra.get("until_ci") or {}).get("stopped"):
        return None  # --until-ci ended it, sure of its rate: not the script
    measured = max(0, len(rank.iter_s) - rank.warmup)
    if job.iters is not None and measured < job.iters:
        return ShortRun(result.run_id, job.iters, len(rank.iter_s), measured, "iterations",
                        rank.warmup)
    epochs = len(set(rank.epoch))
    if job.epochs is not None and epochs < job.epochs:
        return ShortRun(result.run_id, job.epochs, epochs, measured, "epochs", rank.warmup)
    return None


def measured_iters(results: list[RunResult]) -> int | None:
    """Iterations measured per rank (after the warm-up) when every completed run measured as
    many; None when they differ or none completed."""
    counts = {max(0, len(r.ranks[0].iter_s) - r.ranks[0].warmup) for r in results
              if r.ok and r.ranks}
    return counts.pop() if len(counts) == 1 else None


def job_device(results: list[RunResult]) -> str:
    """The device the job trained on: `cpu`, `cuda` (the ranks' own record), else `--device`."""
    used = {str(r.ranks[0].extra.get("device", "")).split(":")[0] for r in results
            if r.ok and r.ranks and r.ranks[0].extra.get("device")}
    job = results[0].spec.job if results else None
    if job is not None and job.script is None:
        return job.device
    return ",".join(sorted(used)) if used else "unknown (no completed run)"




@dataclass(frozen=True)
class CachedSubset(PlainJson):
    """A cached or loader run of data larger than memory: the subset it measured prep on
    (`io.cache_state["subset"]`, `resources/memroom.py`) and the room that sized it."""

    run_id: str
    files: int
    bytes: int
    of_files: int
    of_bytes: int
    room_bytes: int
    room_why: str
    narrowed: bool  # the ranks' dataset kept the subset alone (a torchvision DatasetFolder)


class NotCachedCause(str, enum.Enum):
    NOT_NARROWED = "not_narrowed"  # a subset warmed, the dataset not narrowed to it
    NOT_RESIDENT = "not_resident"  # the warmed files not resident at its start or its end
    READ_IN_WINDOW = "read_in_window"  # resident at both ends, read from storage in between


@dataclass(frozen=True)
class NotCached(PlainJson):
    """A cached run that was not cached: its prep stall includes fetch time."""

    run_id: str
    resident_pct: float  # of the bytes warmed, resident when it started or ended (the least)
    narrowed: bool | None = None  # False: a subset was warmed, the dataset not narrowed to it
    # read from storage during the measured window (the page cache reclaimed while the run
    # went, its pages read again: resident at both ends), and the data the window went through
    window_read_bytes: int | None = None
    window_data_bytes: int | None = None
    # the machine's own reclaim the run recorded (DAMON schemes that take memory away)
    reclaim: tuple[ReclaimScheme, ...] = ()

    @property
    def read_in_window(self) -> bool:
        """The window read more than `SETTINGS.cached_read_share` of the data it went through."""
        return (self.window_read_bytes is not None and bool(self.window_data_bytes)
                and self.window_read_bytes > SETTINGS.cached_read_share * self.window_data_bytes)

    @property
    def cause(self) -> NotCachedCause:
        """Why: not narrowed; else read in its window while resident at both ends; else not
        resident (the only cause left of a run `not_cached` named)."""
        if self.narrowed is False:
            return NotCachedCause.NOT_NARROWED
        if self.read_in_window and self.resident_pct >= 100 * SETTINGS.resident_share:
            return NotCachedCause.READ_IN_WINDOW
        return NotCachedCause.NOT_RESIDENT


def cached_subset(result: RunResult) -> CachedSubset | None:
    sub = (result.io.cache_state or {}).get("subset")
    if not result.ok or sub is None or result.mode not in (Mode.CACHED, Mode.LOADER):
        return None
    kept = sum((r.extra.get("subset") or {}).get("kept", 0) for r in result.ranks)
    return CachedSubset(result.run_id, sub["files"], sub["bytes"], sub["of_files"],
                        sub["of_bytes"], sub["room_bytes"], sub["room_why"], kept > 0)


def not_cached(result: RunResult) -> NotCached | None:
    """Under SETTINGS.resident_share of what the harness warmed was resident when the cached run
    started (the warm did not fit) or when it ended (evicted during the run: other processes
    took the memory), its dataset was not narrowed to the subset warmed, or its measured
    window read from storage more than SETTINGS.cached_read_share of the data it went through
    (pages reclaimed while it ran and read back, resident again at its end: a host's
    proactive reclaim, DAMON's or a memory controller's)."""
    state = result.io.cache_state or {}
    if not result.ok or result.mode is not Mode.CACHED or "resident_before_bytes" not in state:
        return None
    warmed = state.get("warmed_bytes") or result.io.dataset_bytes or 0
    after = result.io.resident_after_bytes
    resident = min(state["resident_before_bytes"], state["resident_before_bytes"] if after is None
                   else after)
    share = resident / warmed if warmed else 1.0
    sub = cached_subset(result)
    found = NotCached(result.run_id, round(100 * share, 1), None if sub is None else sub.narrowed,
                      *_window_reads(result),
                      tuple(s for s in ReclaimScheme.of_run(result) if s.reclaims))
    if share < SETTINGS.resident_share or (sub is not None and not sub.narrowed) \
            or found.read_in_window:
        return found
    return None


def _window_reads(result: RunResult) -> tuple[int | None, int | None]:
    """(bytes read from storage in the steady window, bytes of data the window went through:
    its samples over an epoch's, times the dataset's bytes (the warmed subset's, where one))."""
    window = steady_window(result)
    per_epoch = samples_per_epoch(result)
    data = (result.io.cache_state or {}).get("warmed_bytes") or result.dataset.total_bytes
    read = window_read_bytes(result, window)
    if window is None or not per_epoch or not data:
        return read, None
    return read, int(window.samples() / per_epoch * data)


@dataclass(frozen=True)
class MeasuredWindow(PlainJson):
    """The `measured` entry of `summary.json`: device, iterations per run, short runs, and
    the job's knobs as the script ran them (`jobrun.JobAsRun`)."""

    device: str
    iters_per_run: int | None = None
    short_runs: tuple[ShortRun, ...] = ()
    job_as_run: JobAsRun | None = None
    subsets: tuple[CachedSubset, ...] = ()  # data larger than memory: prep on a subset
    not_cached: tuple[NotCached, ...] = ()  # cached runs that were not cached


def window_summary(results: list[RunResult]) -> MeasuredWindow:
    """What the runs measured against what was asked."""
    ran = next((r for r in results if r.ok and r.ranks), None)
    return MeasuredWindow(job_device(results), measured_iters(results),
                          tuple(s for r in results if (s := short_run(r)) is not None),
                          job_as_run(ran) if ran is not None else None,
                          tuple(s for r in results if (s := cached_subset(r)) is not None),
                          tuple(s for r in results if (s := not_cached(r)) is not None))
