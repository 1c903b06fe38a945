"""A disk run's cache budget, on the dataset's pages only: the harness evicts them, LRU.

The budget C of a disk run is the page cache the *dataset* may have. Nothing
else of the job is counted or touched: its anonymous and shared memory, its
code and libraries are not under any limit of the tool, so the job is never
OOM-killed and never pages its own code back in because of the budget.

`DatasetCacheLimiter`, a harness thread during the run, holds the dataset's
resident bytes R at C:

- it learns which files the job reads from `fanotify` (`OpenWatcher`: opens
  and closes, as they happen), else by polling the residency of the files
  (`scan`); a file read moves to the recent end of an LRU list;
- it measures each file's resident bytes (`cachestat(2)`, else `mincore`)
  while it is being read and shortly after, and re-measures every file of
  the list in slices (pages the kernel reclaimed on its own, lost events);
- while R > C it evicts the least recently read file that no process has
  open (`POSIX_FADV_DONTNEED`); when that file holds more than the excess,
  only the pages from its start up to the excess go (the oldest a
  sequential read left), so R lands on C within a page;
- pages that stay after several tries (mapped by a process) are counted as
  stuck, reported, and never dropped some other way.

A budget smaller than the files the job has open at once: those files are
never evicted while open (evicting pages a reader is about to consume makes
it read them twice, which no real cache does); R then stays above C by what
they hold until they are closed, and the time spent so is recorded
(`over_budget_s`). With `--cache 0` every file is evicted when it is closed.
"""

from __future__ import annotations

import mmap
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from dsanalyze.errors import ResourceError
from dsanalyze.records import Residency
from dsanalyze.resources import pagecache
from dsanalyze.resources.fanotify import OpenWatcher

INTERVAL_S = 0.05  # the longest wait for an event; residency is sampled per this period
SAMPLE_S = 0.2  # one residency sample (the most seen) per period
SETTLE_S = 0.5  # a file is re-measured this long after its last open or close
SCAN_PER_TICK = 64  # files re-measured per tick in slices (fanotify mode)
SCAN_ALL_UP_TO = 4096  # scan mode: files measured per tick (all of them up to this)
STUCK_AFTER = 3  # evictions that freed nothing before a file's pages count as stuck
BOOST_NICE = 10  # the limiter thread's nice below the harness's (and so the job's)


def raise_priority(by: int = BOOST_NICE) -> int:
    """This thread's nice value lowered by `by` (to at most -20), where allowed (root or
    RLIMIT_NICE): the limiter plays the kernel's page cache, which evicts as the reader
    reads. On a loaded CPU, a limiter at the job's priority runs late, and the dataset's
    pages pile up above the budget between its passes. It runs for a few ms a second;
    the job's own threads (forked from others) keep their priority. Returns the nice
    value it runs at."""
    tid = threading.get_native_id()
    now = os.getpriority(os.PRIO_PROCESS, tid)
    try:
        os.setpriority(os.PRIO_PROCESS, tid, max(-20, now - by))
    except OSError:
        return now  # not allowed: it stays at the harness's priority
    return os.getpriority(os.PRIO_PROCESS, tid)


class DatasetCacheLimiter:
    """Background thread holding the dataset's page cache to `budget_bytes`."""

    def __init__(self, files: Sequence[str], budget_bytes: int, interval_s: float = INTERVAL_S,
                 clock: Callable[[], float] = time.time, use_fanotify: bool = True,
                 ignore_pids: Sequence[int] = ()) -> None:
        self.files = list(files)
        self.budget_bytes = budget_bytes
        self.interval_s = interval_s
        self._clock = clock
        self._watcher: OpenWatcher | None = None
        self._use_fanotify = use_fanotify
        self._ignore_pids = tuple(ignore_pids)  # opens that are not the job's (the harness's)
        self.watch = "scan"
        self.resident: dict[int, int] = {}  # file index -> resident bytes, as last measured
        self.total = 0
        self._lru: OrderedDict[int, None] = OrderedDict()  # read files, least recent first
        self._open: dict[int, int] = {}
        self._fresh: dict[int, float] = {}  # file -> monotonic time of its last open/close
        self._cut: dict[int, int] = {}  # file -> bytes evicted from its start (partial evictions)
        self._failed: dict[int, int] = {}
        self._stuck: set[int] = set()
        self._scan_at = 0
        self._samples: list[tuple[float, int]] = []
        self._next_sample, self.peak_bytes = 0.0, 0
        self.evictions = self.evicted_bytes = 0
        self.over_budget_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dsanalyze-datacache", daemon=True)

    def __enter__(self) -> DatasetCacheLimiter:
        try:
            if self._use_fanotify:
                self._watcher = OpenWatcher(self.files, self._ignore_pids).start()
                self.watch = "fanotify"
        except (ResourceError, OSError):
            self._watcher = None  # not root, or no fanotify here: poll residency instead
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        if self._watcher is not None:
            self._watcher.close()

    def _loop(self) -> None:
        raise_priority()
        last = time.monotonic()
        while not self._stop.is_set():
            if self._watcher is not None:
                self._watcher.wait(self.interval_s)
            else:
                self._stop.wait(self.interval_s)
            self.step()
            now = time.monotonic()
            if self.total > self.budget_bytes:
                self.over_budget_s += now - last  # open files held more than the budget
            last = now
            # at most one pass per 5 ms: a busy reader's events are taken in batches
            self._stop.wait(max(0.0, 0.005 - (time.monotonic() - now)))

    def step(self) -> None:
        """One pass: take the reads seen, measure, sample, evict down to the budget."""
        now = time.monotonic()
        for i, delta in self._touched().items():
            self._open[i] = max(0, self._open.get(i, 0) + delta)
            self._touch(i, now)
        for i in list(self._fresh):
            self._measure(i)
            if now - self._fresh[i] > SETTLE_S and not self._open.get(i):
                del self._fresh[i]
        self._scan_slice(now)
        self._sample(self.total)
        self._evict()

    def _touch(self, i: int, now: float) -> None:
        self._lru[i] = None
        self._lru.move_to_end(i)
        self._fresh[i] = now
        self._cut.pop(i, None)
        self._failed.pop(i, None)
        self._stuck.discard(i)

    def _touched(self) -> dict[int, int]:
        if self._watcher is None:
            return {}
        events = self._watcher.drain()
        if self._watcher.overflowed:  # events lost: find the files read by their residency
            self._watcher.overflowed = False
            for i in range(len(self.files)):
                if i not in self._lru and self._measure(i):
                    events.setdefault(i, 0)
        return events

    def _measure(self, i: int) -> int:
        try:
            now = pagecache.file_resident_bytes(self.files[i])
        except OSError:
            now = 0  # removed under the run: nothing of it can be held
        self.total += now - self.resident.get(i, 0)
        if now:
            self.resident[i] = now
        else:
            self.resident.pop(i, None)
        return now

    def _scan_slice(self, now: float) -> None:
        """Re-measure the next slice: the LRU list's files (fanotify), else the dataset's."""
        pool = list(self._lru) if self._watcher is not None else range(len(self.files))
        count = min(len(pool), SCAN_PER_TICK if self._watcher is not None else SCAN_ALL_UP_TO)
        for k in range(count):
            i = pool[(self._scan_at + k) % len(pool)]
            before = self.resident.get(i, 0)
            if self._measure(i) > before and self._watcher is None:
                self._touch(i, now)  # grew: being read now
            if i not in self.resident and i in self._lru and i not in self._fresh:
                del self._lru[i]
        self._scan_at = (self._scan_at + count) % max(1, len(pool))

    def _sample(self, resident: int) -> None:
        """A sample per `SAMPLE_S`: the residency at the first pass after the instant, before
        that pass evicts (what a snapshot then saw); and the peak of every pass."""
        self.peak_bytes = max(self.peak_bytes, resident)
        t = self._clock()
        if t >= self._next_sample:
            self._samples.append((t, resident))
            self._next_sample = t + SAMPLE_S

    def _evict(self) -> None:
        # files no process has open, the least recently read first; in scan mode (opens
        # unknown) files still settling after a read go last
        order = [i for i in self._lru if not self._open.get(i) and i not in self._stuck
                 and i in self.resident]
        if self._watcher is None:
            order.sort(key=lambda i: i in self._fresh)
        for i in order:
            excess = self.total - self.budget_bytes
            if excess <= 0:
                return
            self._evict_one(i, excess)

    def _evict_one(self, i: int, excess: int) -> None:
        had = self.resident.get(i, 0)
        if had <= excess:
            pagecache.evict_prefix(self.files[i], 0)
        else:  # only the oldest part: from its start, as far as the excess (whole pages)
            page = mmap.PAGESIZE
            cut = self._cut.get(i, 0) + -(-excess // page) * page
            pagecache.evict_prefix(self.files[i], cut)
            self._cut[i] = cut
        left = self._measure(i)
        self.evictions += 1
        self.evicted_bytes += max(0, had - left)
        if left >= had:
            self._failed[i] = self._failed.get(i, 0) + 1
            if self._failed[i] >= STUCK_AFTER:
                self._stuck.add(i)

    def record(self) -> Residency:
        """What the run's limiter saw and did (`records.Residency`)."""
        samples = self._samples
        return Residency(
            budget_bytes=self.budget_bytes, watch=self.watch, interval_s=SAMPLE_S,
            sample_unix_s=tuple(round(t, 3) for t, _ in samples),
            sample_bytes=tuple(b for _, b in samples), evictions=self.evictions,
            evicted_bytes=self.evicted_bytes, peak_bytes=self.peak_bytes,
            stuck_files=len(self._stuck),
            stuck_bytes=sum(self.resident.get(i, 0) for i in self._stuck),
            over_budget_s=round(self.over_budget_s, 3))
