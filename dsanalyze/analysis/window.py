"""The steady-state window of a run: which iterations its headline rate counts.

The iterations after the warm-up; for a disk run of two or more epochs, the
epochs after the first (cold) one, which is reported on its own. Shared by the
rate (`stalls.run_rate`) and its interval (`uncertainty.rate_interval`), so
both count the very same iterations. For a remote run, whether the window's rate is
its link's at all: how far its loader's read-ahead moved in it (`read_ahead_drift`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dsanalyze.config import Mode
from dsanalyze.records import RankRecord, RunResult
from dsanalyze.settings import SETTINGS


@dataclass(frozen=True)
class Window:
    """Per rank, the indices of its measured iterations; `steady_from` the first steady epoch."""

    ranks: tuple[RankRecord, ...]
    chosen: tuple[tuple[int, ...], ...]
    epochs: tuple[int, ...]
    steady_from: int | None

    def samples(self) -> int:
        return sum(sum(r.samples[i] for i in c) for r, c in zip(self.ranks, self.chosen))

    def measured_s(self) -> float:
        """The longest rank's measured time: ranks advance together through DDP."""
        return max(sum(r.iter_s[i] for i in c) for r, c in zip(self.ranks, self.chosen))

    def rate_sps(self) -> float | None:
        """The steady rate: an epoch's samples over its time, the longest rank's, each place
        in the epoch counted once (`per_epoch`). None: no time measured."""
        time_s = max(per_epoch(r.iter_s, r.epoch, c) for r, c in zip(self.ranks, self.chosen))
        samples = sum(per_epoch(r.samples, r.epoch, c) for r, c in zip(self.ranks, self.chosen))
        return samples / time_s if time_s > 0 else None

    def span_unix_s(self) -> tuple[float, float] | None:
        """Wall-clock start and end of the window on the first rank (for the monitor's
        samples); None when the rank recorded no start time or measured nothing."""
        r0, chosen = self.ranks[0], self.chosen[0]
        if not r0.start_unix_s or not chosen:
            return None
        start = r0.start_unix_s + sum(r0.iter_s[:chosen[0]])
        return start, r0.start_unix_s + sum(r0.iter_s[:chosen[-1] + 1])

    def whole_epochs(self) -> Window:
        """For counting what a loader fetched a sample: the window cut to the epochs it
        holds whole, when it begins at an epoch's start (a disk run's after its cold first
        epoch). A loader reads ahead within an epoch, never into the next, so whole epochs
        have no read-ahead at either edge, while a window cut short by the run's end holds
        the run's read-ahead that was never consumed. Unchanged when it begins mid-epoch
        (both edges then hold read-ahead, which cancels) or holds no whole epoch."""
        if self.steady_from is None:
            return self
        last = max(self.epochs)  # the run may have stopped in it
        chosen = tuple(tuple(i for i in c if r.epoch[i] < last)
                       for r, c in zip(self.ranks, self.chosen))
        if not all(chosen):
            return self
        return Window(self.ranks, chosen, self.epochs, self.steady_from)


def places(epoch: Sequence[int], chosen: Sequence[int]) -> list[int]:
    """Each chosen iteration's place in its epoch: iterations since the epoch's first one in
    the rank's record (warm-up included, so the window's first epoch keeps its places)."""
    first: dict[int, int] = {}
    for i, e in enumerate(epoch):
        first.setdefault(e, i)
    return [i - first[epoch[i]] for i in chosen]


def per_epoch(values: Sequence[float], epoch: Sequence[int], chosen: Sequence[int]) -> float:
    """The sum over one epoch of `values` (iteration times, samples) as the iterations
    `chosen` hold it: each place in the epoch once, at the mean of the epochs that hold it.

    A window over two or more epochs holds some places fewer times than others: a run's
    warm-up leaves its first epoch without its first places, among them the epoch's start
    (the workers forked again, the prefetch queue filled again), which the later epochs
    hold. A plain sum over the window counts that start once in 1.85 epochs (the demo's
    cached run: 59 iterations of two epochs of 32), a disk run's window of the epochs after
    its cold one once in every epoch; their difference was up to 8% of the cached epoch
    (the CPU-trained script fixtures) taken for a fetch stall. The same sum over a window
    that holds every place equally often (whole epochs) is the plain mean's."""
    by_place: dict[int, list[float]] = {}
    for i, p in zip(chosen, places(epoch, chosen)):
        by_place.setdefault(p, []).append(values[i])
    return sum(sum(v) / len(v) for v in by_place.values())


def steady_window(result: RunResult) -> Window | None:
    """The measured window of a completed run, or None when it has no measured iteration."""
    ranks = tuple(r for r in result.ranks if len(r.iter_s) > r.warmup)
    if not result.ok or not ranks:
        return None
    epochs = tuple(sorted({e for r in ranks for e in r.epoch}))
    steady_from = epochs[1] if result.mode is Mode.DISK and len(epochs) >= 2 else None
    chosen = tuple(tuple(i for i in range(r.warmup, len(r.iter_s))
                         if steady_from is None or r.epoch[i] >= steady_from) for r in ranks)
    return Window(ranks, chosen, epochs, steady_from)


def _inside(result: RunResult, window: Window | None, counter: str
            ) -> tuple[tuple[float, float], list[tuple[float, float]], list[float]] | None:
    """The window's span, the monitor's (time, count) samples of `counter` inside it, and the
    counts sampled before it; None: no window, no start time, or no count."""
    span = window.span_unix_s() if window is not None else None
    if span is None:
        return None
    lo, hi = span
    rows = [(m["unix_s"], m[counter]) for m in result.monitor
            if m.get(counter) is not None and "unix_s" in m]
    return span, [(t, n) for t, n in rows if lo <= t <= hi], [n for t, n in rows if t <= lo]


def window_read_bytes(result: RunResult, window: Window | None) -> int | None:
    """Bytes the run's cgroup read from storage during `window` (its `steady_window`): the
    monitor's running count (`read_bytes`, sampled every 0.2 s) from its first sample inside
    the window to its last, scaled to the window's whole span. The two sampling intervals
    across the window's edges are left out: they hold the reads of what came before and
    after it (a disk run's cold first epoch reads up to its last batch, where the window
    starts). A window holding fewer than two samples: the count from the last sample before
    it to the last inside it. None: no window, no start time, or no cgroup count
    (`--no-cgroups`)."""
    found = _inside(result, window, "read_bytes") \
        if result.io.read_bytes_source == "cgroup" else None
    if found is None:
        return None
    (lo, hi), inside, before = found
    if len(inside) >= 2 and inside[-1][0] > inside[0][0]:
        (t0, n0), (t1, n1) = inside[0], inside[-1]
        return max(0, round((n1 - n0) * (hi - lo) / (t1 - t0)))
    if not before or not inside:
        return None
    return max(0, inside[-1][1] - before[-1])


def window_cores_busy(result: RunResult, window: Window | None) -> float | None:
    """Cores the job kept busy during `window`: its CPU time over wall time, from the
    monitor's first sample inside the window to its last, the edges left out as
    `window_read_bytes` leaves them. The CPU time is the cgroup's (`cpu_usage_s`: every
    process of the job, workers too), else (`--no-cgroups`) its process tree's
    (`tree_cpu_s`, which counts the workers that ended in their main process, `monitor.
    tree_sample`) where that count never falls inside the window (runs recorded before it
    counted them: their ended workers' time left the count). None: no window, no count, a
    job of several nodes (whose counts are each node's), or fewer than two samples inside
    the window."""
    if result.io.nodes:
        return None
    for counter in ("cpu_usage_s", "tree_cpu_s"):
        found = _inside(result, window, counter)
        if found is None or len(found[1]) < 2:
            continue
        inside = found[1]
        if counter == "tree_cpu_s" and any(b < a for (_, a), (_, b) in zip(inside, inside[1:])):
            return None
        (t0, c0), (t1, c1) = inside[0], inside[-1]
        return max(0.0, (c1 - c0) / (t1 - t0)) if t1 > t0 else None
    return None


def read_ahead_drift(result: RunResult) -> float | None:
    """How far a remote run's loader's read-ahead moved over its steady window, as a share of
    the samples the ranks consumed in it: (fetched − consumed) / consumed, the samples the
    link carried in the window against those consumed (`LinkCounts.read_ahead_change`;
    negative: it drained); None where the run has no window or its samples are unknown."""
    window = result.link.window if result.link is not None else None
    change = window.read_ahead_change if window is not None and window.samples else None
    return change / window.samples if change is not None and window is not None else None


def read_ahead_steady(result: RunResult) -> bool:
    """The run's rate is the rate its link sustains, as far as its read-ahead tells: it moved
    by at most `SETTINGS.read_ahead_drift` of the window's samples (or is not known)."""
    drift = read_ahead_drift(result)
    return drift is None or abs(drift) <= SETTINGS.read_ahead_drift
