"""Which dataset files other processes open and close, as it happens (fanotify(7)).

`OpenWatcher` marks every directory that holds a dataset file with
`FAN_OPEN | FAN_CLOSE_NOWRITE | FAN_EVENT_ON_CHILD`; each event carries a
file descriptor of the file, whose (device, inode) names the dataset file.
Nothing outside those directories is reported, so the job's libraries and
other processes' files cost nothing. Events of the watching process itself
(the harness measuring residency, evicting) are left out.

As a gate (`gate=True`) it asks for `FAN_OPEN_PERM` instead of `FAN_OPEN`:
the opener's `open(2)` waits until the watcher `allow`s it, so that the cache
limiter makes room for a file before a byte of it is read. The watcher's own
process must then never open a watched file by its path (it would wait on
itself forever): it works through the descriptors events carry, which the
kernel opened without raising events. Opens by ignored processes and of
files outside the dataset are allowed at once.

Every event is read (`FAN_UNLIMITED_QUEUE`: none is dropped, so no open is
missed). The kernel merges an unread notification with the next one on the
same file from the same process, so one event can say "opened and closed":
each becomes a change of the file's open count (+1, −1 or 0).

Needs CAP_SYS_ADMIN (file-descriptor events); without it `OpenWatcher.start`
raises `ResourceError` and the caller scans residency instead.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from dsanalyze.errors import ResourceError

FAN_CLOSE_NOWRITE = 0x10
FAN_OPEN = 0x20
FAN_Q_OVERFLOW = 0x4000
FAN_OPEN_PERM = 0x10000
FAN_EVENT_ON_CHILD = 0x08000000
FAN_CLOEXEC, FAN_NONBLOCK = 0x1, 0x2
FAN_CLASS_CONTENT = 0x4  # permission events (FAN_CLASS_NOTIF, 0: notifications only)
FAN_UNLIMITED_QUEUE = 0x10
FAN_MARK_ADD = 0x1
FAN_ALLOW = 0x1
AT_FDCWD = -100
_EVENT = struct.Struct("IBBHQii")  # struct fanotify_event_metadata: len, vers, -, len, mask, fd, pid
_RESPONSE = struct.Struct("iI")  # struct fanotify_response: fd, response

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.fanotify_init.argtypes = (ctypes.c_uint, ctypes.c_uint)
_libc.fanotify_mark.argtypes = (ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int,
                                ctypes.c_char_p)


@dataclass(frozen=True)
class Event:
    """A dataset file opened or closed by a process watched: `index` in the watcher's paths;
    `delta` to its open count; `fd`, the file opened for the watcher (using it raises no
    event), which the receiver closes; `asks`: the opener waits for `OpenWatcher.allow(fd)`."""

    index: int
    delta: int
    fd: int
    asks: bool


class OpenWatcher:
    """Open and close events on a fixed set of files, by their index in `paths`."""

    def __init__(self, paths: Sequence[str], ignore_pids: Sequence[int] = (),
                 gate: bool = False) -> None:
        self._index: dict[tuple[int, int], int] = {}
        self._ignore = set(ignore_pids)  # besides this process: e.g. the harness's reads
        self._dirs: set[str] = set()
        for i, p in enumerate(paths):
            st = os.stat(p)
            self._index[(st.st_dev, st.st_ino)] = i
            self._dirs.add(os.path.dirname(os.path.abspath(p)))
        self.gate = gate
        self._fd = -1
        self.overflowed = False  # events were lost (never, with an unlimited queue)

    def start(self) -> OpenWatcher:
        flags = FAN_CLOEXEC | FAN_NONBLOCK | FAN_UNLIMITED_QUEUE
        fd = _libc.fanotify_init(flags | (FAN_CLASS_CONTENT if self.gate else 0),
                                 os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_LARGEFILE", 0))
        if fd < 0:
            err = ctypes.get_errno()
            raise ResourceError(f"fanotify is not available ({os.strerror(err)}): the cache "
                                "limiter scans the dataset's residency instead (run as root "
                                "for per-open tracking)")
        self._fd = fd
        mask = (FAN_OPEN_PERM if self.gate else FAN_OPEN) | FAN_CLOSE_NOWRITE | FAN_EVENT_ON_CHILD
        for d in sorted(self._dirs):
            if _libc.fanotify_mark(fd, FAN_MARK_ADD, mask, AT_FDCWD, os.fsencode(d)) != 0:
                err = ctypes.get_errno()
                self.close()
                raise ResourceError(f"cannot watch {d} with fanotify ({os.strerror(err)})")
        return self

    def close(self) -> None:
        """Stop watching; opens still waiting are let through by the kernel."""
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

    def allow(self, fd: int) -> None:
        """Let the open that raised the event carrying `fd` go on."""
        os.write(self._fd, _RESPONSE.pack(fd, FAN_ALLOW))

    def drain(self) -> list[Event]:
        """Every event waiting on a dataset file from a process watched, in order. The
        others are let through (and their descriptors closed) here."""
        out: list[Event] = []
        ignored = {os.getpid(), *self._ignore}
        for mask, fd, pid in self._read():
            asks = bool(mask & FAN_OPEN_PERM)
            try:
                st = os.fstat(fd)
                i = None if pid in ignored else self._index.get((st.st_dev, st.st_ino))
            except OSError:
                i = None
            if i is None:
                if asks:
                    self.allow(fd)
                os.close(fd)
                continue
            opened = bool(mask & (FAN_OPEN | FAN_OPEN_PERM))
            out.append(Event(i, opened - bool(mask & FAN_CLOSE_NOWRITE), fd, asks))
        return out

    def _read(self) -> Iterator[tuple[int, int, int]]:
        """(mask, fd, pid) of every event waiting, with a file descriptor."""
        while True:
            try:
                buf = os.read(self._fd, 64 * 1024)
            except BlockingIOError:
                return
            off = 0
            while off + _EVENT.size <= len(buf):
                size, _, _, _, mask, fd, pid = _EVENT.unpack_from(buf, off)
                off += size
                if mask & FAN_Q_OVERFLOW:
                    self.overflowed = True
                if fd >= 0:
                    yield mask, fd, pid
