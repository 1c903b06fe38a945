"""Sampling while a run goes: the cgroup's counters, the process tree, the GPUs.

The cgroup's own counters (CPU time, bytes read, memory) are preferred: psutil
misses processes that lived between two samples (DataLoader workers of a short
epoch). psutil adds per-process detail; NVML adds GPU utilisation and memory
where there is a GPU (without one, `gpu` is recorded as absent, not an error).
Each sample also has `machine_busy_s`, every CPU's busy seconds since boot
(/proc/stat): with the cgroup's `cpu_usage_s` it gives the CPU spent outside
the job's cgroup over any window. `InterferenceProbe` measures what other
processes did on the run's CPUs and disk meanwhile, and on the whole machine
(`analysis/interference.py` judges it).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

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


def tree_sample(root_pid: int, pids: Iterable[int] | None = None) -> dict[str, float]:
    """CPU seconds, RSS, read bytes and CPU affinity of a process and its live descendants,
    or of `pids` (a cgroup's processes: listing them costs far less than finding a
    process's descendants, which reads every process of the machine).

    The CPU seconds count each process's own and those of its children it has reaped
    (cutime, cstime): a DataLoader worker that ended (workers that are not persistent end
    at every epoch) leaves its CPU time to the main process that joined it, so the count
    only grows. Counted over the live processes alone it fell by each ended worker's time,
    and a quiet run of a script without cgroups read as 75% of its CPUs taken by others
    (`analysis.interference`)."""
    cpu_s = rss = read = 0.0
    nproc = affinity = 0
    try:
        procs = _processes(root_pid, pids)
    except psutil.Error:
        return {"procs": 0}
    for p in procs:
        try:
            with p.oneshot():
                t = p.cpu_times()
                cpu_s += t.user + t.system + t.children_user + t.children_system
                rss += p.memory_info().rss
                read += getattr(p.io_counters(), "read_chars", 0)
                affinity = max(affinity, len(p.cpu_affinity()))
                nproc += 1
        except (psutil.Error, AttributeError):
            continue
    return {"procs": nproc, "tree_cpu_s": cpu_s, "tree_rss_bytes": rss, "tree_read_chars": read,
            "max_affinity_cpus": affinity}  # the widest CPU set any process may run on


def _processes(root_pid: int, pids: Iterable[int] | None) -> list[psutil.Process]:
    if pids is None:
        root = psutil.Process(root_pid)
        return [root, *root.children(recursive=True)]
    out = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):  # exited since the listing
            out.append(psutil.Process(pid))
    return out


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
                 interval_s: float = 0.5, gpus: bool = True,
                 pids: Callable[[], Iterable[int]] | None = None) -> None:
        self.root_pid = root_pid
        self.pids = pids  # the run's processes (its cgroup's), else the root's descendants
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
        s: dict[str, Any] = {"t_s": round(time.monotonic() - self._t0, 4), "unix_s": time.time(),
                             "machine_busy_s": machine_busy_s()}
        if self.counters is not None:
            s.update(self.counters())
        s.update(tree_sample(self.root_pid, self.pids() if self.pids else None))
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


_CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_busy_s(cpu_ids: tuple[int, ...]) -> float:
    """Seconds the given CPUs spent busy since boot, from /proc/stat (all processes).

    Busy: user, nice, system, irq, softirq and steal; idle and iowait are not.
    (guest time is already counted in user.)
    """
    wanted = {f"cpu{i}" for i in cpu_ids}
    with open("/proc/stat") as f:
        busy = sum(_busy_ticks(parts) for line in f if (parts := line.split())
                   and parts[0] in wanted)
    return busy / _CLK_TCK


def _busy_ticks(parts: list[str]) -> int:
    """Busy clock ticks of one /proc/stat `cpu` line, split: user, nice, system, irq,
    softirq and steal (idle and iowait are not busy; guest is already in user)."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, parts[1:9])
    return user + nice + system + irq + softirq + steal


def machine_busy_s() -> float:
    """Seconds every online CPU of the machine spent busy since boot (/proc/stat's `cpu`
    line, all processes and the kernel): the machine-wide counterpart of `cpu_busy_s`."""
    with open("/proc/stat") as f:
        return _busy_ticks(f.readline().split()) / _CLK_TCK


def cgroup_cpu_s(cpuacct_dir: Path, cpu_ids: tuple[int, ...] | None) -> float | None:
    """Seconds the cgroup's processes ran on the given CPUs (cpuacct.usage_percpu, v1);
    `cpu_ids` None: on every CPU."""
    try:
        per_cpu = [int(x) for x in (cpuacct_dir / "cpuacct.usage_percpu").read_text().split()]
    except (OSError, ValueError):
        return None
    if cpu_ids is None:
        return sum(per_cpu) / 1e9
    return sum(per_cpu[i] for i in cpu_ids if i < len(per_cpu)) / 1e9


def online_cpus() -> int:
    """CPUs of the machine online now (the `cpuN` lines of /proc/stat)."""
    with open("/proc/stat") as f:
        return sum(1 for line in f if line.startswith("cpu") and line[3:4].isdigit())


class _Reading(NamedTuple):
    t: float
    busy_s: float  # the run's CPUs
    own_s: float | None  # the cgroup, on the run's CPUs
    disk_bytes: int | None
    machine_busy_s: float  # every CPU of the machine
    own_total_s: float | None  # the cgroup, on every CPU


class InterferenceProbe:
    """CPU time and disk reads of processes outside a run's cgroup, while the run goes.

    Others' CPU seconds = busy time of the run's CPUs (/proc/stat) minus the
    cgroup's own usage on them (cpuacct); others' reads = bytes read from the
    dataset's whole disk (/proc/diskstats) minus the cgroup's (blkio). Both
    over the run's wall time, from `start()` to `stop()`. The harness's own
    sampling threads run outside the cgroup and count as others (about 1%).

    Machine-wide too: `machine_cpus` online, `machine_others_cpu_s` = busy time
    of every CPU minus the cgroup's whole usage: work done outside the job's
    cgroup anywhere (kernel threads doing its I/O and reclaim, the harness's
    monitor and cache limiter, other processes), which runs on the cores the
    job leaves free, or on the job's own when it has them all.
    """

    def __init__(self, cpu_ids: tuple[int, ...] | None, device: str | None,
                 cpuacct_dir: Path | None) -> None:
        self.cpu_ids = tuple(cpu_ids) if cpu_ids else tuple(sorted(os.sched_getaffinity(0)))
        self.device = device
        self.cpuacct_dir = cpuacct_dir
        self._start: _Reading | None = None

    def _now(self) -> _Reading:
        d = self.cpuacct_dir
        return _Reading(time.monotonic(), cpu_busy_s(self.cpu_ids),
                        cgroup_cpu_s(d, self.cpu_ids) if d else None,
                        diskstats_read_bytes(self.device), machine_busy_s(),
                        cgroup_cpu_s(d, None) if d else None)

    def start(self) -> None:
        self._start = self._now()

    def stop(self, cgroup_read_bytes: int | None, tool_read_bytes: int = 0) -> dict[str, Any]:
        """What others did since `start()`; `cgroup_read_bytes` the cgroup's reads since it was
        made, `tool_read_bytes` the harness's own from the disk meanwhile (the job's code read
        in before its throttle came on)."""
        b = self._now()
        a = self._start or b
        window_s = b.t - a.t
        out: dict[str, Any] = {"cpus": list(self.cpu_ids), "window_s": window_s,
                               "cpu_busy_s": b.busy_s - a.busy_s, "device": self.device,
                               "machine_cpus": online_cpus(),
                               "machine_busy_s": b.machine_busy_s - a.machine_busy_s}
        if b.own_s is not None and a.own_s is not None and window_s > 0:
            own_s = b.own_s - a.own_s
            others_s = max(0.0, b.busy_s - a.busy_s - own_s)
            out.update(cgroup_cpu_s=own_s, others_cpu_s=others_s,
                       others_cpu_pct=100 * others_s / (window_s * len(self.cpu_ids)))
        if b.own_total_s is not None and a.own_total_s is not None:
            out["machine_others_cpu_s"] = max(0.0, out["machine_busy_s"]
                                              - (b.own_total_s - a.own_total_s))
        if a.disk_bytes is not None and b.disk_bytes is not None and cgroup_read_bytes is not None:
            out.update(disk_read_bytes=b.disk_bytes - a.disk_bytes,
                       cgroup_read_bytes=cgroup_read_bytes,
                       tool_read_bytes=tool_read_bytes,
                       others_read_bytes=max(0, b.disk_bytes - a.disk_bytes - cgroup_read_bytes
                                              - tool_read_bytes))
        return out
