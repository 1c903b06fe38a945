"""Page-cache state of the dataset: warm, evict, and measure residency.

- `warm`: read every file once, from the calling process. The harness calls
  it from outside the job's cgroup, so the pages are charged to the harness.
- `evict`: `posix_fadvise(POSIX_FADV_DONTNEED)` per file (no root needed),
  after `fdatasync` so that dirty pages can actually be dropped.
- `evict_verified`: `evict`, then the residency of each file, and again for
  the files that kept pages (pages still under writeback, or in another CPU's
  LRU batch, go on a later try), a bounded number of times.
- `evict_dataset`: what a disk run does: `evict_verified`; pages that stay
  (mapped by another process) are recorded (`evicted_incomplete`, with the
  files), never dropped machine-wide, unless the user asked for it with
  `--drop-caches-globally` (`drop_all`: `echo 1 > /proc/sys/vm/drop_caches`,
  which empties every other process's page cache too).
- `file_resident_bytes`: `cachestat(2)` (Linux >= 6.5: one system call, no
  mapping), else `mincore(2)` over an mmap of the file.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dsanalyze.errors import ResourceError
from dsanalyze.records import CacheAction

_CHUNK = 1 << 20
_PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte))
_libc.mincore.restype = ctypes.c_int
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_long)
_libc.mmap.restype = ctypes.c_void_p
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_MAP_FAILED = ctypes.c_void_p(-1).value
_libc.syscall.restype = ctypes.c_long
SYS_CACHESTAT = 451  # the same number on x86-64 and arm64 (the unified syscall table)
EVICT_ATTEMPTS = 4
EVICT_BACKOFF_S = 0.1  # then 0.2, 0.3 s: writeback ends, exiting processes unmap
STUCK_FILES_KEPT = 10  # files named in the record when pages stay resident


@dataclass(frozen=True)
class Eviction:
    """Outcome of `evict_verified`: tries made, and what stayed resident after the last."""

    attempts: int
    resident_bytes: int
    files_resident: tuple[str, ...]


def warm(paths: Iterable[str]) -> int:
    """Read every file to the end; return the bytes read."""
    total = 0
    buf = bytearray(_CHUNK)
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                total += n
    return total


def evict(paths: Iterable[str]) -> None:
    """Drop each file's pages from the page cache."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            try:
                os.fdatasync(fd)
            except OSError:
                pass  # read-only filesystems: nothing dirty to write back
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def evict_verified(paths: Sequence[str], tolerance_bytes: int = 0,
                   attempts: int = EVICT_ATTEMPTS) -> Eviction:
    """Evict each file, check it with `mincore`, and retry the files that kept pages.

    Stops when at most `tolerance_bytes` stay resident, or after `attempts` tries.
    """
    pending, resident = list(paths), 0
    for attempt in range(1, attempts + 1):
        evict(pending)
        left = {p: n for p in pending if (n := file_resident_bytes(p)) > 0}
        pending, resident = list(left), sum(left.values())
        if resident <= tolerance_bytes:
            break
        if attempt < attempts:
            time.sleep(EVICT_BACKOFF_S * attempt)
    return Eviction(attempt, resident, tuple(pending))


def evict_dataset(files: Sequence[str], tolerance_bytes: int, drop_globally: bool = False,
                  drop: Callable[[], None] | None = None) -> dict[str, Any]:
    """Evict the dataset for a disk run; return the run's `cache_state` record.

    Pages that stay after `evict_verified` (more than `tolerance_bytes`) are
    recorded with the first files that hold them. The whole page cache is
    dropped only with `drop_globally` (`--drop-caches-globally`).
    """
    ev = evict_verified(files, tolerance_bytes)
    state = {"action": CacheAction.EVICTED_PER_FILE.value, "global_drop": False,
             "evict_attempts": ev.attempts, "files_left_resident": len(ev.files_resident),
             "resident_before_bytes": ev.resident_bytes}
    if ev.resident_bytes <= tolerance_bytes:
        return state
    stuck = {**state, "action": CacheAction.EVICTED_INCOMPLETE.value,
             "resident_files_sample": list(ev.files_resident[:STUCK_FILES_KEPT])}
    if not drop_globally:
        return stuck
    try:
        (drop or drop_all)()
    except ResourceError as e:
        return {**stuck, "drop_error": str(e)}
    return {**state, "action": CacheAction.DROPPED_ALL.value, "global_drop": True,
            "resident_before_bytes": resident_bytes(files)}


def drop_all() -> None:
    """Drop the whole page cache, every process's (root only; `--drop-caches-globally`)."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
    except OSError as e:
        raise ResourceError(f"cannot drop the page cache ({e.strerror}): run as root, "
                            "or rely on per-file eviction") from None


class _CacheStatRange(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _CacheStat(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("nr_cache", "nr_dirty", "nr_writeback",
                                               "nr_evicted", "nr_recently_evicted")]


_cachestat_works = True


def cachestat_pages(fd: int, offset: int = 0, length: int = 0) -> int | None:
    """Pages of the open file `fd` in the page cache (`cachestat(2)`), in `length` bytes
    from `offset` (0: to the end), or None where the kernel has no cachestat (before 6.5)."""
    global _cachestat_works
    if not _cachestat_works:
        return None
    span, stat = _CacheStatRange(offset, length), _CacheStat()
    if _libc.syscall(SYS_CACHESTAT, fd, ctypes.byref(span), ctypes.byref(stat), 0) == 0:
        return int(stat.nr_cache)
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EPERM):  # EPERM: a seccomp filter that does not know it
        _cachestat_works = False
        return None
    raise OSError(err, os.strerror(err))


def evict_prefix(path: str, nbytes: int) -> None:
    """Drop the pages of the first `nbytes` of `path` (0: the whole file)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, nbytes, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def file_resident_bytes(path: str) -> int:
    """Bytes of `path` that are in the page cache now (whole pages, capped at the size)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return fd_resident_bytes(fd, path)
    finally:
        os.close(fd)


def fd_resident_bytes(fd: int, name: str = "", size: int | None = None) -> int:
    """Bytes of the open file `fd` in the page cache now (whole pages, capped at its size,
    `size` where the caller knows it)."""
    if size is None:
        size = os.fstat(fd).st_size
    if size == 0:
        return 0
    pages = cachestat_pages(fd)
    if pages is not None:
        return min(size, pages * _PAGE)
    # Map without reading (mmap does not fault pages in), then ask mincore.
    addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if addr in (None, _MAP_FAILED):
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), name)
    try:
        pages = (size + _PAGE - 1) // _PAGE
        vec = (ctypes.c_ubyte * pages)()
        if _libc.mincore(addr, size, vec) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), name)
        resident = sum(v & 1 for v in bytes(vec))
    finally:
        _libc.munmap(addr, size)
    return min(size, resident * _PAGE)


def resident_bytes(paths: Iterable[str]) -> int:
    """Total bytes of the files that are resident in the page cache."""
    return sum(file_resident_bytes(p) for p in paths)
