"""The dataset's cache limiter in a process of its own: `LimiterProcess`.

    with LimiterProcess(files, budget_bytes) as limiter:
        ...  # the job runs
    residency = limiter.record()

`DatasetCacheLimiter` plays the kernel's page cache, which evicts as the reader reads; it
must keep up with the job's reads. In the harness's process its thread shares the GIL
with the harness's other threads (the monitor, the maps recorder, the watchdog), and on a
loaded CPU a thread that holds the GIL waits for a CPU while holding it: the limiter's
passes came 30-60 ms apart, and the dataset's pages piled up 10-20% above a small budget
between them (bench/disk_matrix.py). In a process of its own, at a nice value below the
harness's (`ownlimits.raise_priority`), it runs when the kernel wakes it.

The process is spawned (not forked: the harness has threads), ignores SIGINT (the harness
tears the run down and asks for the record), and ends when the harness's end of its pipe
closes, so it never outlives a harness that was killed. Opens by the harness's own process
(the throttle gate's warm of the job's code, the storage probe) are not the job's reads.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

from dsanalyze.errors import ResourceError
from dsanalyze.records import Residency
from dsanalyze.resources.datacache import DatasetCacheLimiter

START_TIMEOUT_S = 120.0  # a Python start-up on a loaded machine
STOP_TIMEOUT_S = 30.0


def _serve(files: list[str], budget_bytes: int, use_fanotify: bool, harness_pid: int,
           conn: Connection) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    limiter = DatasetCacheLimiter(files, budget_bytes, use_fanotify=use_fanotify,
                                  ignore_pids=(harness_pid,))
    with limiter:
        conn.send(limiter.watch)
        try:
            conn.recv()  # the run ended
        except EOFError:
            return  # the harness is gone
    conn.send(limiter.record().to_dict())


class LimiterProcess:
    """`DatasetCacheLimiter` run in a spawned process for the length of a `with` block."""

    def __init__(self, files: Sequence[str], budget_bytes: int, use_fanotify: bool = True
                 ) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, name="dsanalyze-datacache", daemon=True,
                                 args=(list(files), budget_bytes, use_fanotify, os.getpid(),
                                       child))
        self._child = child
        self._record: Residency | None = None
        self.watch = "none"

    def __enter__(self) -> LimiterProcess:
        self._proc.start()
        self._child.close()
        if not self._conn.poll(START_TIMEOUT_S):
            self._end()
            raise ResourceError("the dataset's cache limiter did not start in "
                                f"{START_TIMEOUT_S:.0f} s: the machine is overloaded")
        try:
            self.watch = self._conn.recv()
        except EOFError as e:
            self._end()
            raise ResourceError("the dataset's cache limiter failed to start (see stderr)") from e
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self._conn.send("stop")
            if self._conn.poll(STOP_TIMEOUT_S):
                self._record = Residency.from_dict(self._conn.recv())
        except (OSError, EOFError):
            pass  # it died: the run has no residency record
        finally:
            self._end()

    def _end(self) -> None:
        self._conn.close()
        self._proc.join(5)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()

    def record(self) -> Residency | None:
        """What the limiter saw and did; None if its process died."""
        return self._record
