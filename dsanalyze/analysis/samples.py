"""The job monitor's samples (`RunResult.monitor`, written by `monitor.JobMonitor.sample`), typed.

    samples = monitor_samples(run)   # those with a time stamp, in order

A counter the monitor did not read in a sample is None: the cgroup's counters
(`cpu_usage_s`, `read_bytes`, `cache_bytes`, `memory_bytes`) where the job ran
in one, the process tree's (`tree_*`) always, each GPU's where NVML sampled it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsanalyze.plain import PlainJson


@dataclass(frozen=True)
class GpuSample(PlainJson):
    util_pct: float
    mem_used_bytes: float


@dataclass(frozen=True)
class MonitorSample(PlainJson):
    """One sample: wall time (s since the epoch) and the counters read then."""

    unix_s: float | None = None
    cpu_usage_s: float | None = None  # the cgroup's CPU time
    read_bytes: float | None = None  # the cgroup's reads from storage
    cache_bytes: float | None = None  # its page cache
    memory_bytes: float | None = None  # its memory
    tree_cpu_s: float | None = None  # the job's process tree: CPU time
    tree_read_chars: float | None = None  # bytes its read calls returned (cache hits too)
    tree_rss_bytes: float | None = None
    gpu: tuple[GpuSample, ...] = ()

    @property
    def in_cgroup(self) -> bool:
        return self.cpu_usage_s is not None


def monitor_samples(monitor: Any) -> list[MonitorSample]:
    """A run's monitor records (plain dicts) as samples, those without a time stamp left out."""
    samples = [MonitorSample.from_dict(m) for m in monitor]
    return [s for s in samples if s.unix_s is not None]
