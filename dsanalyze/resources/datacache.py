"""A disk run's cache budget, on the dataset's pages only: the harness evicts them, LRU.

The budget C of a disk run is the page cache the *dataset* may have. Nothing
else of the job is counted or touched: its anonymous and shared memory, its
code and libraries are not under any limit of the tool, so the job is never
OOM-killed and never pages its own code back in because of the budget.

`DatasetCacheLimiter`, a thread during the run (in a process of its own:
`cacheproc.py`), holds the dataset's resident bytes R at C:

- it learns which files the job opens and closes from `fanotify`
  (`OpenWatcher`), else by polling the residency of the files (`scan`); a
  file opened or closed moves to the recent end of an LRU list;
- with fanotify and a budget smaller than the dataset, the job's `open(2)` of
  a dataset file waits (`FAN_OPEN_PERM`, `gate`) until the limiter has made
  room for the whole file: R + what the open files can still add (their size
  less what they hold) is brought down to C *before* the file is read. So R
  never runs ahead of the limiter however fast the job reads and however late
  the limiter is scheduled; the job waits for one round trip per open (tens
  of µs, `tests/test_datacache.py`), and the eviction it waits for is the one
  a kernel's LRU would do in its read. That wait does not grow with the files
  the job holds open: a reader that maps its files holds each open until it
  unmaps it (DALI's file reader, its 1024-sample shuffle buffer), and an open
  that walked them all waited 0.5 ms with 1000 held and 1 ms with 2000,
  which halved such a job's rate at one CPU. Without the gate (scan, or a budget
  that holds the whole dataset) the limiter evicts after the reads;
- it measures a file's resident bytes (`cachestat(2)`, else `mincore`) when
  it is opened and closed, while it is open (with each sample), once more `SETTLE_S` after its
  close (pages mapped and faulted in after), and every file of the list in
  slices (pages the kernel reclaimed on its own); with fanotify it holds the
  descriptor each file's first event carried, and never opens a dataset file
  by its path (a gated open by the limiter itself would wait on it forever);
- to make room it evicts the least recently used file that no process has
  open (`POSIX_FADV_DONTNEED`); when that file holds more than the excess,
  only the pages from its start up to the excess go (the oldest a sequential
  read left), so R lands on C within a page;
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
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from dsanalyze.errors import ResourceError
from dsanalyze.records import Residency
from dsanalyze.resources import pagecache
from dsanalyze.resources.fanotify import Event, OpenWatcher
from dsanalyze.resources.ownlimits import fds_for, raise_priority

INTERVAL_S = 0.05  # a tick: open files measured, a slice of the list re-measured
SAMPLE_S = 0.2  # one residency sample (the most seen) per period
SETTLE_S = 0.5  # a closed file is measured again this long after its close
SCAN_PER_TICK = 64  # files re-measured per tick in slices (fanotify mode)
SCAN_ALL_UP_TO = 4096  # scan mode: files measured per tick (all of them up to this)
STUCK_AFTER = 3  # evictions that freed nothing before a file's pages count as stuck
_PAGE = mmap.PAGESIZE


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
        self._size = [os.stat(f).st_size for f in self.files]  # resident bytes are capped at it
        self.watch = "scan"
        self.resident: dict[int, int] = {}  # file index -> resident bytes, as last measured
        self.total = 0
        # read files no process has open, least recently closed first: what may be evicted
        self._lru: OrderedDict[int, None] = OrderedDict()
        self._open: dict[int, int] = {}
        # what each open file can still add, read whole, and their sum (`_coming_bytes`)
        self._coming_of: dict[int, int] = {}
        self._coming = 0
        self._fds: dict[int, int] = {}  # file -> a descriptor from its first event (fanotify)
        self._fresh: dict[int, float] = {}  # file -> monotonic time of its last open/close
        self._cut: dict[int, int] = {}  # file -> bytes evicted from its start (partial evictions)
        self._failed: dict[int, int] = {}
        self._stuck: set[int] = set()
        self._scan_at = 0
        self._samples: list[tuple[float, int]] = []
        self._next_sample, self.peak_bytes = 0.0, 0
        self.evictions = self.evicted_bytes = 0
        self.over_budget_s = self.cpu_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dsanalyze-datacache", daemon=True)

    @property
    def gated(self) -> bool:
        """Whether the job's opens wait for room (fanotify, a budget under the dataset)."""
        return self._watcher is not None and self._watcher.gate

    def __enter__(self) -> DatasetCacheLimiter:
        gate = sum(self._size) > self.budget_bytes and fds_for(len(self.files))
        try:
            if self._use_fanotify:
                self._watcher = OpenWatcher(self.files, self._ignore_pids, gate).start()
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
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def _loop(self) -> None:
        cpu0 = time.thread_time()
        try:
            self._run()
        finally:  # ended, or failed: no open may wait on a limiter that is gone
            if self._watcher is not None:
                self._watcher.close()
            self.cpu_s = time.thread_time() - cpu0

    def _run(self) -> None:
        raise_priority()
        last = next_tick = time.monotonic()
        while not self._stop.is_set():
            if self._watcher is not None:
                self._watcher.wait(max(0.0, next_tick - time.monotonic()))
                self._take_events(self._watcher)
            else:
                self._stop.wait(self.interval_s)
            now = time.monotonic()
            if now >= next_tick:
                self.step()
                next_tick = now + self.interval_s
            if self.total > self.budget_bytes:
                self.over_budget_s += now - last  # open files held more than the budget
            last = now
            if not self.gated:  # a busy reader's events are taken in batches, 5 ms apart
                self._stop.wait(max(0.0, 0.005 - (time.monotonic() - now)))

    def step(self) -> None:
        """One tick: measure the files being read, sample, re-measure a slice, evict down to
        the budget."""
        now = time.monotonic()
        for i, t in list(self._fresh.items()):
            if now - t > SETTLE_S:
                self._measure(i)
                del self._fresh[i]
        self._scan_slice(now)
        self._sample()
        self._evict()

    def _take_events(self, watcher: OpenWatcher) -> None:
        """The job's opens and closes; a gated open goes on once there is room for its file."""
        now = time.monotonic()
        for ev in watcher.drain():
            kept = False
            try:
                kept = self._on_event(ev, now)
            finally:
                if ev.asks:
                    watcher.allow(ev.fd)
                if not kept:
                    os.close(ev.fd)

    def _on_event(self, ev: Event, now: float) -> bool:
        """Count the open or close, make room; True if the limiter keeps the event's
        descriptor as the file's (its first)."""
        i = ev.index
        kept = self._fds.setdefault(i, ev.fd) == ev.fd
        opened = self._open.pop(i, 0) + ev.delta
        if opened > 0:
            self._open[i] = opened
        self._touch(i, now)
        self._recount(i)
        self._measure(i)
        self._sample()
        self._evict()
        return kept

    def _touch(self, i: int, now: float) -> None:
        """A file opened or closed (or, polled, grown): an open one leaves the eviction
        order, a closed one goes to its recent end and is measured again `SETTLE_S` on."""
        if self._open.get(i):
            self._lru.pop(i, None)
            self._fresh.pop(i, None)
        else:
            self._lru[i] = None
            self._lru.move_to_end(i)
            self._fresh[i] = now
        self._cut.pop(i, None)
        self._failed.pop(i, None)
        self._stuck.discard(i)

    def _forget(self, i: int) -> None:
        """Stop tracking a file that holds nothing (until the job opens it again)."""
        self._lru.pop(i, None)
        self._fresh.pop(i, None)
        fd = self._fds.pop(i, None)
        if fd is not None:
            os.close(fd)

    def _measure(self, i: int) -> int:
        fd = self._fds.get(i)
        try:
            if fd is not None:
                now = pagecache.fd_resident_bytes(fd, self.files[i], self._size[i])
            else:  # never by path while watching: a gated open of its own would wait forever
                now = 0 if self._watcher is not None else \
                    pagecache.file_resident_bytes(self.files[i])
        except OSError:
            now = 0  # removed under the run: nothing of it can be held
        self.total += now - self.resident.get(i, 0)
        if now:
            self.resident[i] = now
        else:
            self.resident.pop(i, None)
        self._recount(i)
        return now

    def _recount(self, i: int) -> None:
        """File i's share of `_coming_bytes`, after its residency or its opens changed."""
        coming = max(0, self._size[i] - self.resident.get(i, 0)) if self._open.get(i) else 0
        self._coming += coming - self._coming_of.pop(i, 0)
        if coming:
            self._coming_of[i] = coming

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
                self._forget(i)
        self._scan_at = (self._scan_at + count) % max(1, len(pool))

    def _sample(self) -> None:
        """A sample per `SAMPLE_S`: the residency at the first event or tick after the
        instant, the open files measured then, before it evicts (what a snapshot then saw);
        and the peak of the residency as measured."""
        t = self._clock()
        if t >= self._next_sample:
            for i in self._open:
                self._measure(i)
            self._samples.append((t, self.total))
            self._next_sample = t + SAMPLE_S
        self.peak_bytes = max(self.peak_bytes, self.total)

    def _coming_bytes(self) -> int:
        """What the open files can still add, if read whole: the room a gated open needs.
        Kept as they open, close and are measured (a job that maps its files holds them open
        until it unmaps them: DALI's reader, a thousand at once), so an open waits for no
        pass over them; and an open file's resident bytes and this add up to its size
        however long ago it was measured, so the room does not depend on measuring them."""
        return self._coming if self.gated else 0

    def _evict(self) -> None:
        """Evict, the least recently used first, down to the budget less what is coming."""
        coming = self._coming_bytes()
        if self.total + coming <= self.budget_bytes:
            return
        emptied = []
        for i in self._candidates():
            excess = self.total + coming - self.budget_bytes
            if excess <= 0:
                break
            self._evict_one(i, excess)
            if i not in self.resident and self._watcher is not None:
                emptied.append(i)
        for i in emptied:
            self._forget(i)

    def _candidates(self) -> Iterator[int]:
        """Files no process has open, the least recently used first; in scan mode (opens
        unknown) files still settling after a read go last."""
        order = (i for i in self._lru if i not in self._stuck and i in self.resident)
        if self._watcher is None:
            return iter(sorted(order, key=lambda i: i in self._fresh))
        return order

    def _evict_one(self, i: int, excess: int) -> None:
        had = self.resident.get(i, 0)
        cut = 0  # the whole file
        if had > excess:  # only the oldest part: from its start, as far as the excess
            cut = self._cut.get(i, 0) + -(-excess // _PAGE) * _PAGE
            self._cut[i] = cut
        fd = self._fds.get(i)
        if fd is not None:
            os.posix_fadvise(fd, 0, cut, os.POSIX_FADV_DONTNEED)
        else:
            pagecache.evict_prefix(self.files[i], cut)
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
            over_budget_s=round(self.over_budget_s, 3), gated=self.gated,
            cpu_s=round(self.cpu_s, 3))
