"""Keep a run's page cache within its budget while the job's own memory moves.

A memory limit bounds page cache *plus* the job's anonymous and shared memory.
A static limit (budget + the job's peak memory measured in the cached run)
leaves the page cache whatever the job is not using at the moment: on this
machine 40 to 100 MB beyond the budget. `CacheLimiter` therefore moves the
limit every `interval_s` to

    limit = budget + max(own memory over the last `window_s`) + margin

Lowering the limit makes the kernel reclaim page cache down to it; raising it
is always allowed. The running maximum and the margin leave room for the job's
own memory to grow between two adjustments; growth beyond them is an OOM,
reported as such by the launcher. The limit stays static until the job has
started (its own memory at 80% of the cached run's peak).

The room kept for growth is also room for page cache whenever the job uses
less than its recent peak. So at every check the page cache charged to the
run is also compared with `budget + margin / 2`; above it, the limit is
pulsed down to `own memory now + budget + margin / 2` (the kernel reclaims the
oldest pages, as it would at a static limit) and put straight back. The
other half of the margin covers what the job reads between two checks.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

from dsanalyze.resources.cgroups import RunCgroup


class CacheLimiter:
    """Background thread that tracks the job's own memory with the limit."""

    def __init__(self, cgroup: RunCgroup, budget_bytes: int, margin_bytes: int,
                 job_bytes: int = 0, interval_s: float = 0.05, window_s: float = 5.0) -> None:
        self.cgroup = cgroup
        self.budget_bytes = budget_bytes
        self.margin_bytes = margin_bytes
        # The limit starts static (budget + job_bytes + margin) and only starts to
        # move once the job has grown to most of the memory its cached run used:
        # start-up (imports, worker start) allocates too fast to be followed.
        self.started_at_bytes = int(0.8 * job_bytes)
        self.started = job_bytes == 0
        self.static_bytes = budget_bytes + job_bytes + margin_bytes
        self.trim_at_bytes = budget_bytes + margin_bytes // 2
        self.trims = 0
        self.cache_max_bytes = 0
        self.interval_s = interval_s
        self.recent: collections.deque[tuple[float, int]] = collections.deque()
        self.window_s = window_s
        self.adjustments = 0
        self.refused = 0
        self.limits: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dsanalyze-cachelimit",
                                        daemon=True)

    def __enter__(self) -> CacheLimiter:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def target(self, now: float, own_bytes: int) -> int:
        """The limit for the job's memory now: budget + recent peak + margin."""
        self.recent.append((now, own_bytes))
        while self.recent and self.recent[0][0] < now - self.window_s:
            self.recent.popleft()
        return self.budget_bytes + max(b for _, b in self.recent) + self.margin_bytes

    def step(self) -> None:
        own, cache = self.cgroup.memory_split()
        self.cache_max_bytes = max(self.cache_max_bytes, cache)
        target = self.target(time.monotonic(), own)
        self.started = self.started or own >= self.started_at_bytes
        limit = target if self.started else self.static_bytes
        current = self.limits[-1] if self.limits else self.static_bytes
        if cache > self.trim_at_bytes:
            # The pulse: the write reclaims the oldest pages down to the new limit
            # (or gives up with EBUSY); the limit is put back at once below.
            self.trims += 1
            self.cgroup.set_memory_limit(own + self.trim_at_bytes)
        elif limit == current:
            return
        if not self.cgroup.set_memory_limit(limit):
            self.refused += 1
        elif limit != current:
            self.adjustments += 1
            self.limits.append(limit)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.step()

    def report(self) -> dict[str, Any]:
        return {"memory_limit_adjustments": self.adjustments,
                "memory_limit_refused": self.refused,
                "memory_limit_min_bytes": min(self.limits, default=None),
                "memory_limit_max_bytes": max(self.limits, default=None),
                "memory_limit_interval_s": self.interval_s,
                "memory_limit_window_s": self.window_s,
                "page_cache_trims": self.trims,
                "page_cache_trim_at_bytes": self.trim_at_bytes,
                "page_cache_max_bytes": self.cache_max_bytes}
