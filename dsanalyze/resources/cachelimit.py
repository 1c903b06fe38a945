"""Keep a run's page cache within its budget while the job's own memory moves.

A memory limit bounds page cache *plus* the job's own (anonymous and shared)
memory. A disk run's limit is therefore budget + the job's own memory at its
peak in the cached run + a margin: the job never runs short for its own
allocations. But whenever it uses less than that peak, the difference is room
for page cache too: on this machine 40 to 100 MB beyond the budget.

`CacheLimiter` reads the page cache charged to the run every `interval_s`
and, above `budget + margin / 2`, has the kernel reclaim the excess
(`RunCgroup.reclaim`: the oldest pages go first, as they would at a tighter
limit). The other half of the margin covers what the job reads between two
checks. The limit itself stays put, so the job's own memory may grow and
shrink as it likes.

(A first version moved the limit with the job's own memory instead, to
budget + its peak over the last 5 s + margin; a job whose start-up grew by
more than the margin within one check, as with 2 CPUs and cache 0, was
OOM-killed.)
"""

from __future__ import annotations

import threading
from typing import Any

from dsanalyze.resources.cgroups import RunCgroup


class CacheLimiter:
    """Background thread that trims the run's page cache back to its budget."""

    def __init__(self, cgroup: RunCgroup, budget_bytes: int, margin_bytes: int,
                 interval_s: float = 0.05) -> None:
        self.cgroup = cgroup
        self.trim_at_bytes = budget_bytes + margin_bytes // 2
        self.interval_s = interval_s
        self.trims = 0
        self.trimmed_bytes = 0
        self.refused = 0
        self.cache_max_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dsanalyze-cachelimit",
                                        daemon=True)

    def __enter__(self) -> CacheLimiter:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def step(self) -> None:
        cache = self.cgroup.page_cache_bytes()
        self.cache_max_bytes = max(self.cache_max_bytes, cache)
        excess = cache - self.trim_at_bytes
        if excess <= 0:
            return
        self.trims += 1
        if self.cgroup.reclaim(excess):
            self.trimmed_bytes += excess
        else:
            self.refused += 1

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.step()

    def report(self) -> dict[str, Any]:
        return {"page_cache_trim_at_bytes": self.trim_at_bytes,
                "page_cache_trims": self.trims,
                "page_cache_trimmed_bytes": self.trimmed_bytes,
                "page_cache_trims_refused": self.refused,
                "page_cache_max_bytes": self.cache_max_bytes,
                "page_cache_check_interval_s": self.interval_s}
