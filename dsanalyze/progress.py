"""Iteration progress of a run, seen from the harness, and the watchdog that stops a run that
makes none.

    beat = Heartbeat.open(run_dir, rank)     # in each rank (instrument.api.Session)
    beat(iterations)                         # every iteration boundary: one 8-byte store
    watch = Watchdog(run_dir, stall_s=120, first_s=600)  # --stall-timeout, --startup-timeout
    watch.check()                            # in the harness, every 0.5 s: None, or why it stalled

Each rank maps `progress<R>` (8 bytes, its iteration count, little-endian) from the run's
temporary directory and stores its counter there at every `next()` of the training loader:
a store into a shared mapping, no system call. The harness reads the files. A run is stalled
when no rank's counter moved for `stall_s` seconds since the last move, or for `first_s`
before the first iteration (imports, dataset scan, worker start-up take longer than a step),
unless every rank has written its record (`rank<R>.json` or `.error`): the job is ending.
Sooner where the job's log (`log_path`) shows an exception after which it waits for good
(`HANGS`): stalled once the counters have stood still `HANG_STILL_S` with it there.
`process_states` says what the job's processes were doing then: their state letter and the
kernel function they wait in (`/proc/<pid>/stat`, `/proc/<pid>/wchan`); `last_exception`, the
last exception its log shows (a thread that raised and ended while the rest waits for it).
"""

from __future__ import annotations

import math
import mmap
import os
import struct
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from dsanalyze.config import format_bytes
from dsanalyze.records import ProcessState, StallRecord

PREFIX = "progress"
_COUNT = struct.Struct("<Q")
DEFAULT_STALL_S = 120.0  # no iteration for this long after the first one: stalled
DEFAULT_FIRST_S = 600.0  # before the first one (imports, a data scan, worker start-up)
LOG_TAIL_BYTES = 1 << 16  # of the job's log read for its last exception
EXCEPTION_CHARS = 300  # of that exception's line kept
HANG_STILL_S = 10.0  # no iteration for this long with a `HANGS` exception in the log: stalled
LOG_LOOK_S = 2.0  # the log read at most this often while the counters stand still


class Heartbeat:
    """A rank's iteration counter, shared with the harness through a mapped file."""

    def __init__(self, path: Path) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, _COUNT.size)
            self._map = mmap.mmap(fd, _COUNT.size)
        finally:
            os.close(fd)

    @classmethod
    def open(cls, run_dir: Path | None, rank: int) -> Heartbeat | None:
        """The rank's heartbeat, or None outside the harness (no run directory)."""
        if run_dir is None:
            return None
        try:
            return cls(run_dir / f"{PREFIX}{rank}")
        except OSError:
            return None  # the run goes on unwatched rather than fail

    def __call__(self, iterations: int) -> None:
        _COUNT.pack_into(self._map, 0, iterations)


def read_progress(run_dir: Path) -> dict[int, int]:
    """rank -> iterations its heartbeat says (ranks that have not started: absent)."""
    out = {}
    for path in run_dir.glob(f"{PREFIX}*"):
        suffix = path.name[len(PREFIX):]
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if suffix.isdigit() and len(data) == _COUNT.size:
            out[int(suffix)] = _COUNT.unpack(data)[0]
    return out


class Watchdog:
    """Says when the ranks' counters have stood still for too long. `clock` is injectable."""

    def __init__(self, run_dir: Path, stall_s: float = DEFAULT_STALL_S,
                 first_s: float = DEFAULT_FIRST_S,
                 clock: Callable[[], float] = time.monotonic, log_path: Path | None = None
                 ) -> None:
        self.run_dir, self.stall_s, self.first_s, self.clock = run_dir, stall_s, first_s, clock
        self.log_path = log_path
        self.last: dict[int, int] = {}
        self.moved_at = clock()
        self.looked_at = -math.inf

    @property
    def iterations(self) -> dict[int, int]:
        return dict(self.last)

    def _finished(self, rank: int) -> bool:
        """The rank wrote its record or its failure (`instrument/rank.py`)."""
        return any((self.run_dir / f"rank{rank}.{kind}").exists() for kind in ("json", "error"))

    def check(self) -> str | None:
        """None while the run makes progress; else why it is stalled, in words."""
        now, seen = self.clock(), read_progress(self.run_dir)
        if seen != self.last or (seen and all(self._finished(r) for r in seen)):
            self.last, self.moved_at = seen, now  # a finished rank is not stalled: it ends
            return None
        still = now - self.moved_at
        started = any(self.last.values())
        limit = self.stall_s if started else self.first_s
        if still < limit:
            return self._hung(still, now)
        if not started:
            return f"no iteration in the first {still:.0f} s"
        where = ", ".join(f"rank {r} at {n}" for r, n in sorted(self.last.items()))
        return f"no iteration for {still:.0f} s ({where})"

    def _hung(self, still: float, now: float) -> str | None:
        """Why the run is stalled before its timeout: its counters stood still `HANG_STILL_S`
        (until `now`) with a `HANGS` exception last in its log; None otherwise (the log read at
        most every `LOG_LOOK_S`)."""
        if self.log_path is None or still < HANG_STILL_S or now - self.looked_at < LOG_LOOK_S:
            return None
        self.looked_at = now
        exc = _log_exception(self.log_path)
        if exc is None or not any(k in exc for k in HANGS):
            return None
        return f"no iteration for {still:.0f} s after the job's log showed {exc}"


def process_states(pids: Iterable[int]) -> tuple[ProcessState, ...]:
    """State letter (R, S, D, Z, ...), name and wait channel of each process still there."""
    out = []
    for pid in sorted(set(pids)):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue  # gone meanwhile
        name = stat[stat.find("(") + 1:stat.rfind(")")]
        state = stat[stat.rfind(")") + 2:].split(" ", 1)[0]
        try:
            wchan = Path(f"/proc/{pid}/wchan").read_text().strip()
        except OSError:
            wchan = ""
        out.append(ProcessState(pid, name, state, "" if wchan == "0" else wchan))
    return tuple(out)


def stall_record(watchdog: Watchdog, pids: Iterable[int],
                 counters: dict[str, int | float], log_path: Path | None = None) -> StallRecord:
    """What the job was doing when the watchdog fired: its processes and cgroup counters, and
    the last exception its log (`log_path`) shows."""
    def count(key: str) -> int | None:
        return int(counters[key]) if key in counters else None
    return StallRecord(round(watchdog.clock() - watchdog.moved_at, 1), watchdog.iterations,
                       process_states(pids), count("read_bytes"), count("memory_bytes"),
                       count("cache_bytes"), _log_exception(log_path))


def _log_exception(log_path: Path | None) -> str | None:
    if log_path is None:
        return None
    try:
        with open(log_path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - LOG_TAIL_BYTES))
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    return last_exception(text)


def last_exception(log: str) -> str | None:
    """The exception line of the last Python traceback in `log` (the first line after
    `Traceback (most recent call last):` that is not indented, a frame's), cut to
    `EXCEPTION_CHARS`; None without one."""
    found, inside = None, False
    for line in log.splitlines():
        if line.startswith("Traceback (most recent call last):"):
            inside = True
        elif inside and line and not line[0].isspace():
            found, inside = line.strip()[:EXCEPTION_CHARS], False
    return found


SOCKET_PATH_TOO_LONG = "AF_UNIX path too long"

# what a `log_exception` says to do, by a fragment of it
EXCEPTION_HINTS = {
    SOCKET_PATH_TOO_LONG: "a Unix socket the job made under TMPDIR needs a path over "
                             "107 bytes, a DataLoader worker's to hand a batch over: set a "
                             "shorter TMPDIR",
}

# exceptions after which a job that is still running waits for good, by a fragment of them:
# a DataLoader worker's queue feeder thread that cannot bind its socket raises this and ends,
# the worker lives on (the loader's liveness check passes), and the rank waits for that batch
# (a main process that raised it would have exited instead)
HANGS = (SOCKET_PATH_TOO_LONG,)


def stall_text(stall: StallRecord) -> str:
    """`stopped; 3 processes: python S (hrtimer_nanosleep) x2, ...; read 4.3G; memory 812M`."""
    kinds: dict[str, int] = {}
    for p in stall.processes:
        key = f"{p.name} {p.state}" + (f" ({p.wchan})" if p.wchan else "")
        kinds[key] = kinds.get(key, 0) + 1
    said = ", ".join(k + (f" x{n}" if n > 1 else "") for k, n in kinds.items())
    parts = [f"stopped; {len(stall.processes)} processes: {said or 'none left'}"]
    if stall.log_exception is not None:
        hints = [h for k, h in EXCEPTION_HINTS.items() if k in stall.log_exception]
        parts.append(f"the log's last exception: {stall.log_exception}"
                     + "".join(f" ({h})" for h in hints))
    if stall.read_bytes is not None:
        parts.append(f"read {format_bytes(stall.read_bytes)}")
    if stall.memory_bytes is not None:
        parts.append(f"memory {format_bytes(stall.memory_bytes)}"
                     + (f" ({format_bytes(stall.cache_bytes)} page cache)"
                        if stall.cache_bytes is not None else ""))
    return "; ".join(parts)
