"""Which dataset files other processes open and close, as it happens (fanotify(7)).

`OpenWatcher` marks every directory that holds a dataset file with
`FAN_OPEN | FAN_CLOSE_NOWRITE | FAN_EVENT_ON_CHILD`; each event carries a
file descriptor of the file, whose (device, inode) names the dataset file.
Nothing outside those directories is reported, so the job's libraries and
other processes' files cost nothing. Events of the watching process itself
(the harness measuring residency, evicting) are left out.

The kernel merges an unread event with the next one on the same file from
the same process, so one event can say "opened and closed": `drain` turns
each into a change of the file's open count (+1, −1 or 0).

Needs CAP_SYS_ADMIN (file-descriptor events); without it `OpenWatcher.start`
raises `ResourceError` and the caller scans residency instead.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import struct
from collections.abc import Sequence

from dsanalyze.errors import ResourceError

FAN_CLOSE_NOWRITE = 0x10
FAN_OPEN = 0x20
FAN_Q_OVERFLOW = 0x4000
FAN_EVENT_ON_CHILD = 0x08000000
FAN_CLOEXEC, FAN_NONBLOCK = 0x1, 0x2  # FAN_CLASS_NOTIF is 0
FAN_MARK_ADD = 0x1
AT_FDCWD = -100
_EVENT = struct.Struct("IBBHQii")  # struct fanotify_event_metadata: len, vers, -, len, mask, fd, pid

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.fanotify_init.argtypes = (ctypes.c_uint, ctypes.c_uint)
_libc.fanotify_mark.argtypes = (ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int,
                                ctypes.c_char_p)


class OpenWatcher:
    """Open and close events on a fixed set of files, by their index in `paths`."""

    def __init__(self, paths: Sequence[str], ignore_pids: Sequence[int] = ()) -> None:
        self._index: dict[tuple[int, int], int] = {}
        self._ignore = set(ignore_pids)  # besides this process: e.g. the harness's reads
        self._dirs: set[str] = set()
        for i, p in enumerate(paths):
            st = os.stat(p)
            self._index[(st.st_dev, st.st_ino)] = i
            self._dirs.add(os.path.dirname(os.path.abspath(p)))
        self._fd = -1
        self.overflowed = False  # events were lost: the caller must rescan residency

    def start(self) -> OpenWatcher:
        fd = _libc.fanotify_init(FAN_CLOEXEC | FAN_NONBLOCK,
                                 os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_LARGEFILE", 0))
        if fd < 0:
            err = ctypes.get_errno()
            raise ResourceError(f"fanotify is not available ({os.strerror(err)}): the cache "
                                "limiter scans the dataset's residency instead (run as root "
                                "for per-open tracking)")
        self._fd = fd
        mask = FAN_OPEN | FAN_CLOSE_NOWRITE | FAN_EVENT_ON_CHILD
        for d in sorted(self._dirs):
            if _libc.fanotify_mark(fd, FAN_MARK_ADD, mask, AT_FDCWD, os.fsencode(d)) != 0:
                err = ctypes.get_errno()
                self.close()
                raise ResourceError(f"cannot watch {d} with fanotify ({os.strerror(err)})")
        return self

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> OpenWatcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait(self, timeout_s: float) -> None:
        """Return when events are waiting, or after `timeout_s`."""
        select.select([self._fd], [], [], timeout_s)

    def drain(self) -> dict[int, int]:
        """Every event waiting: file index -> change of its open count (opens − closes)."""
        out: dict[int, int] = {}
        ignored = {os.getpid(), *self._ignore}
        while True:
            try:
                buf = os.read(self._fd, 64 * 1024)
            except BlockingIOError:
                return out
            off = 0
            while off + _EVENT.size <= len(buf):
                size, _, _, _, mask, fd, pid = _EVENT.unpack_from(buf, off)
                off += size
                if mask & FAN_Q_OVERFLOW:
                    self.overflowed = True
                if fd < 0:
                    continue
                try:
                    st = os.fstat(fd)
                finally:
                    os.close(fd)
                i = self._index.get((st.st_dev, st.st_ino))
                if i is None or pid in ignored:
                    continue
                delta = bool(mask & FAN_OPEN) - bool(mask & FAN_CLOSE_NOWRITE)
                out[i] = out.get(i, 0) + delta
