"""The files a job maps (its Python extension modules, torch's and CUDA's libraries).

`MapsRecorder` reads `/proc/<pid>/maps` of every process of a run once a
second and keeps the union of the regular files mapped. Every run records
its set. A disk run must not read the job's own code through its throttle
(the throttle is on the whole disk, which often holds the venv): before it,
the harness reads, from outside the job's cgroup and unthrottled, the files
earlier runs mapped that are not wholly cached (`warm_missing`), and again
the files the job maps when its throttle comes on (`resources/throttle.py`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import psutil

from dsanalyze.resources import pagecache

INTERVAL_S = 1.0
_SKIP = ("/dev/", "/proc/", "/sys/", "/memfd:")


def mapped_files(pids: Iterable[int]) -> set[str]:
    """Regular files mapped by any of `pids` now (deleted and special files left out)."""
    out: set[str] = set()
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue  # exited between listing and reading
        for line in text.splitlines():
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].startswith("/") and not parts[5].endswith("(deleted)") \
                    and not parts[5].startswith(_SKIP):
                out.add(parts[5])
    return out


def file_pss_bytes(pids: Iterable[int]) -> int | None:
    """The processes' share of the file pages they map: `Pss_File` of each one's
    `/proc/<pid>/smaps_rollup`, summed (a page mapped by k processes counts 1/k in each, so
    once across the job, and in part where other processes map it too). None: no process
    could be read, or the kernel has no `Pss_File` (before 5.x)."""
    total, seen = 0, False
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("Pss_File:"):
                total, seen = total + int(line.split()[1]) * 1024, True
    return total if seen else None


def warm_missing(files: Iterable[str], dataset: Iterable[str] = ()) -> tuple[int, int]:
    """Read whole every file of `files` (the dataset's left out) that is not wholly in the
    page cache; return (files, bytes) read. A library is paged in as its code runs: a
    page the job has not run yet (a worker's first decode, the first backward pass) would
    otherwise be read when it first runs, through the throttle."""
    skip = {os.path.realpath(f) for f in dataset}
    cold = []
    for f in files:
        try:
            size = os.path.getsize(f)
            if os.path.realpath(f) not in skip and size > 0 \
                    and pagecache.file_resident_bytes(f) < size:
                cold.append(f)
        except OSError:
            continue  # removed since (a reinstalled package): nothing to warm
    read = 0
    for f in cold:
        with contextlib.suppress(OSError):
            read += _read_in(f)
    return len(cold), read


def _read_in(path: str) -> int:
    """Bring the whole file into the page cache; return its size. `POSIX_FADV_WILLNEED`
    first (the kernel reads the missing pages, no copy; a page still being read when the
    job faults it is waited for, not read again through the job's throttle), then a
    plain read of what it left out (under memory pressure readahead may stop early)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    finally:
        os.close(fd)
    if pagecache.file_resident_bytes(path) < size:
        pagecache.warm([path])
    return size


def tree_pids(root_pid: int) -> set[int]:
    """A process and its live descendants (ranks too: they are children of the agent)."""
    try:
        root = psutil.Process(root_pid)
        return {root_pid, *(p.pid for p in root.children(recursive=True))}
    except psutil.Error:
        return set()


class MapsRecorder:
    """Background union of the files mapped by a run's processes, and the peak of their
    share of those files' pages (`file_pss_bytes`): the job's code as it holds it.

    `file_pss`: whether a sample reads the Pss now (None: never). Each read walks every page
    table of every process of the job, holding its memory map's lock (85 ms of CPU for a
    resnet18 main process and 3 workers): once a second all run long it slowed a throttled
    disk run to -22..-25% of its throttle, and took 8.5% of a core from the runs of every
    other mode, so the harness reads it only while the job is in its warm-up
    (`launch._pss_while`), never in the window its rates are read on."""

    def __init__(self, pids: Callable[[], Iterable[int]], interval_s: float = INTERVAL_S,
                 file_pss: Callable[[], bool] | None = lambda: True) -> None:
        self._pids = pids
        self._file_pss = file_pss
        self._interval_s = interval_s
        self._files: set[str] = set()
        self.file_pss_peak_bytes: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dsanalyze-maps", daemon=True)

    def __enter__(self) -> MapsRecorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def files(self) -> list[str]:
        return sorted(self._files)

    def sample(self) -> None:
        pids = list(self._pids())
        self._files |= mapped_files(pids)
        pss = file_pss_bytes(pids) if self._file_pss is not None and self._file_pss() else None
        if pss is not None:
            self.file_pss_peak_bytes = max(self.file_pss_peak_bytes or 0, pss)

    def _loop(self) -> None:
        self.sample()
        while not self._stop.wait(self._interval_s):
            self.sample()
