"""Page-cache state of the dataset: warm, evict, drop, and measure residency.

- `warm`: read every file once, from the calling process. The harness calls
  it from outside the job's cgroup, so the pages are charged to the harness
  and the job's memory limit does not evict them.
- `evict`: `posix_fadvise(POSIX_FADV_DONTNEED)` per file (no root needed),
  after `fdatasync` so that dirty pages can actually be dropped. Pages first
  read by another cgroup stay charged there, which is why docs/design.md insists
  on evicting before every disk run.
- `drop_all`: `echo 1 > /proc/sys/vm/drop_caches` (root only).
- `resident_bytes`: `mincore(2)` over an mmap of each file.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from collections.abc import Iterable

from dsanalyze.errors import ResourceError

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


def drop_all() -> None:
    """Drop the whole page cache (root only)."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
    except OSError as e:
        raise ResourceError(f"cannot drop the page cache ({e.strerror}): run as root, "
                            "or rely on per-file eviction") from None


def file_resident_bytes(path: str) -> int:
    """Bytes of `path` that are in the page cache now (whole pages, capped at the size)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0
        # Map without reading (mmap does not fault pages in), then ask mincore.
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, _MAP_FAILED):
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), path)
        try:
            pages = (size + _PAGE - 1) // _PAGE
            vec = (ctypes.c_ubyte * pages)()
            if _libc.mincore(addr, size, vec) != 0:
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err), path)
            resident = sum(v & 1 for v in bytes(vec))
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)
    return min(size, resident * _PAGE)


def resident_bytes(paths: Iterable[str]) -> int:
    """Total bytes of the files that are resident in the page cache."""
    return sum(file_resident_bytes(p) for p in paths)
