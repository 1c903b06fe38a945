"""Sampling while a run goes: the cgroup's counters, the process tree, the GPUs.

The cgroup's own counters (CPU time, bytes read, memory) are preferred: psutil
misses processes that lived between two samples (DataLoader workers of a short
epoch). psutil adds per-process detail; NVML adds GPU utilisation and memory
where there is a GPU (without one, `gpu` is recorded as absent, not an error).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psutil


def _nvml_handles() -> tuple[Any, list[Any], str | None]:
    try:
        import pynvml

        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        return pynvml, handles, None
    except Exception as e:  # no driver, no GPU, no library: all mean "no GPU here"
        return None, [], f"no GPU: {type(e).__name__}: {e}"


def gpu_sample(nvml: Any, handles: list[Any]) -> list[dict[str, float]]:
    out = []
    for h in handles:
        util = nvml.nvmlDeviceGetUtilizationRates(h)
        mem = nvml.nvmlDeviceGetMemoryInfo(h)
        out.append({"util_pct": float(util.gpu), "mem_used_bytes": float(mem.used)})
    return out


def tree_sample(root_pid: int) -> dict[str, float]:
    """CPU seconds, RSS, read bytes and CPU affinity of a process and its live descendants."""
    cpu_s = rss = read = 0.0
    nproc = affinity = 0
    try:
        root = psutil.Process(root_pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return {"procs": 0}
    for p in procs:
        try:
            with p.oneshot():
                t = p.cpu_times()
                cpu_s += t.user + t.system
                rss += p.memory_info().rss
                read += getattr(p.io_counters(), "read_chars", 0)
                affinity = max(affinity, len(p.cpu_affinity()))
                nproc += 1
        except (psutil.Error, AttributeError):
            continue
    return {"procs": nproc, "tree_cpu_s": cpu_s, "tree_rss_bytes": rss, "tree_read_chars": read,
            "max_affinity_cpus": affinity}  # the widest CPU set any process may run on


def diskstats_read_bytes(device: str | None) -> int | None:
    """Bytes read from a whole disk (MAJ:MIN) since boot, machine-wide, from /proc/diskstats."""
    if not device:
        return None
    major, minor = device.split(":")
    try:
        with open("/proc/diskstats") as f:
            for line in f:
                parts = line.split()
                if parts[0] == major and parts[1] == minor:
                    return int(parts[5]) * 512  # sectors are 512 bytes in diskstats
    except (OSError, IndexError, ValueError):
        pass
    return None


class Monitor:
    """Background sampler; `samples` holds one dict per interval, `t_s` from start."""

    def __init__(self, root_pid: int, counters: Callable[[], dict[str, Any]] | None = None,
                 interval_s: float = 0.5, gpus: bool = True) -> None:
        self.root_pid = root_pid
        self.counters = counters
        self.interval_s = interval_s
        self.samples: list[dict[str, Any]] = []
        self.gpu_status = "not sampled"
        self._nvml, self._handles = None, []
        if gpus:
            self._nvml, self._handles, why = _nvml_handles()
            self.gpu_status = why or f"{len(self._handles)} GPU(s) sampled with NVML"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dsanalyze-monitor", daemon=True)
        self._t0 = time.monotonic()

    def __enter__(self) -> Monitor:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()  # one last sample at the end of the run

    def sample(self) -> None:
        s: dict[str, Any] = {"t_s": round(time.monotonic() - self._t0, 4), "unix_s": time.time()}
        if self.counters is not None:
            s.update(self.counters())
        s.update(tree_sample(self.root_pid))
        if self._handles:
            try:
                s["gpu"] = gpu_sample(self._nvml, self._handles)
            except Exception as e:  # a GPU that fell off the bus: record, keep sampling the rest
                s["gpu_error"] = str(e)
        self.samples.append(s)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def peak(self, key: str) -> float:
        return max((float(s.get(key, 0)) for s in self.samples), default=0.0)
