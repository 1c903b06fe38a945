"""The read throttle of a disk run, turned on when the training loader starts reading.

The throttle (`blkio.throttle.read_bps_device` on v1, `io.max` on v2) is on
the whole disk holding the dataset, which often holds the job's Python
environment too. Turned on at the job's start, it would make the job read
its own code (torch's libraries, hundreds of MB) at the throttled speed
whenever those pages are not cached: minutes at a few MB/s, charged to no
measured figure but the run's length. So the job starts unthrottled, and
`ThrottleGate` (a harness thread) turns the throttle on as soon as a rank's
training loader is about to read its first batch: the rank writes
`throttle-wait-rank<R>` in the run directory and waits for `throttle-on`
(`instrument/rank.wait_for_throttle`). Before it lets the rank go, the
harness reads whole every file the job's processes map that is not wholly
cached (`libmaps.warm_missing`): code is paged in as it first runs (a
worker's first decode, the first backward pass: 1-7 MB of torch's libraries
in a small test job, read through a 1 MB/s throttle), and it must not be read
through the throttle either. From then on every read of the job goes through
the throttle; the cgroup's read counter at that moment is kept, so the bytes
read through the throttle are known (`records.ThrottleStart`). What the job
imports lazily after that (a Python module not cached yet) is still read
through it: at most its size, once (nothing evicts it).

A DALI iterator reads as it is built (its pipeline's first batches, and a
file reader with `random_shuffle` fills a 1024-sample buffer first): it
signals before its constructor runs (`instrument/bootstrap.py`), not at its
first iteration. A job whose training loader never starts gets the throttle
after `LATE_AFTER_S` anyway.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dsanalyze.instrument import rank as rankenv
from dsanalyze.records import ThrottleStart
from dsanalyze.resources import libmaps
from dsanalyze.resources.cgroups import RunCgroup

POLL_S = 0.005
LATE_AFTER_S = 120.0


class ThrottleGate:
    """Background thread: the throttle on at the first rank's signal (or after `late_after_s`)."""

    def __init__(self, cg: RunCgroup, device: str, read_bps: int, run_dir: Path,
                 dataset: Sequence[str] = (), late_after_s: float = LATE_AFTER_S) -> None:
        self.cg, self.device, self.read_bps, self.run_dir = cg, device, read_bps, run_dir
        self.dataset = dataset
        self.late_after_s = late_after_s
        self.warmed: tuple[int, int] = (0, 0)
        self.harness_read_bytes = 0  # from storage, by the warm: not another process's reads
        self.started_unix_s: float | None = None
        self.read_bytes_at_start: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dsanalyze-throttle", daemon=True)

    def __enter__(self) -> ThrottleGate:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        deadline = time.monotonic() + self.late_after_s
        while not self._stop.wait(POLL_S):
            if any(self.run_dir.glob(rankenv.THROTTLE_WAIT_FILE.format(rank="*"))) \
                    or time.monotonic() >= deadline:
                self.open()
                return

    def open(self) -> None:
        """Read the job's code in, turn the throttle on, note the read counter, and let the
        ranks go."""
        before = own_storage_read_bytes()
        self.warmed = libmaps.warm_missing(libmaps.mapped_files(self.cg.pids()), self.dataset)
        self.harness_read_bytes = own_storage_read_bytes() - before
        self.read_bytes_at_start = int(self.cg.counters().get("read_bytes", 0))
        self.cg.set_read_bps(self.device, self.read_bps)
        self.started_unix_s = time.time()
        (self.run_dir / rankenv.THROTTLE_ON_FILE).touch()

    def record(self, read_bytes: int | None) -> ThrottleStart | None:
        """When the throttle came on and, of the run's `read_bytes` (the counter at its end),
        those read through it; None if it never came on."""
        if self.started_unix_s is None or self.read_bytes_at_start is None:
            return None
        through = None if read_bytes is None else read_bytes - self.read_bytes_at_start
        return ThrottleStart(self.started_unix_s, through, *self.warmed)


def own_storage_read_bytes() -> int:
    """Bytes this process (every thread) has had read from storage (/proc/self/io)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    return 0
