"""Keep a run's page cache within its budget while the job's own memory moves.

A memory limit bounds page cache *plus* the job's own (anonymous and shared)
memory. A disk run's limit starts at budget + the job's own memory at its
peak in the cached run + a margin. Two things go wrong with that limit alone:

- whenever the job uses less than that peak, the difference is room for page
  cache too (on this machine 40 to 100 MB beyond the budget);
- the job's own memory is not the same from run to run: a disk run whose
  workers outgrew the cached run's peak by more than the margin (830 MB
  cached, still growing at 860 MB after 25 s of a slow disk run) is OOM-killed.

So every `interval_s` `CacheLimiter` reads the run's memory and

- raises the limit to budget + own memory now + margin when that is above
  it (never lowers it: a limit moved down with the job's memory got a job
  whose start-up outgrew the margin between two checks OOM-killed);
- when the page cache is above `budget + margin / 2`, has the kernel reclaim
  the excess, oldest pages first (`RunCgroup.reclaim`), as it would at a
  tighter limit. The other half of the margin covers what the job reads
  between two checks.
"""

from __future__ import annotations

import threading
from typing import Any

from dsanalyze.resources.cgroups import RunCgroup


class CacheLimiter:
    """Background thread that trims the run's page cache back to its budget and
    raises the memory limit as the job's own memory grows."""

    def __init__(self, cgroup: RunCgroup, budget_bytes: int, margin_bytes: int,
                 limit_bytes: int, interval_s: float = 0.05) -> None:
        self.cgroup = cgroup
        self.budget_bytes = budget_bytes
        self.margin_bytes = margin_bytes
        self.limit_bytes = limit_bytes
        self.trim_at_bytes = budget_bytes + margin_bytes // 2
        self.interval_s = interval_s
        self.raises = 0
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
        own, cache = self.cgroup.memory_split()
        self.cache_max_bytes = max(self.cache_max_bytes, cache)
        need = self.budget_bytes + own + self.margin_bytes
        if need > self.limit_bytes and self.cgroup.raise_memory_limit(need):
            self.limit_bytes = need
            self.raises += 1
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
        return {"memory_limit_raises": self.raises,
                "memory_limit_final_bytes": self.limit_bytes,
                "page_cache_trim_at_bytes": self.trim_at_bytes,
                "page_cache_trims": self.trims,
                "page_cache_trimmed_bytes": self.trimmed_bytes,
                "page_cache_trims_refused": self.refused,
                "page_cache_max_bytes": self.cache_max_bytes,
                "page_cache_check_interval_s": self.interval_s}
