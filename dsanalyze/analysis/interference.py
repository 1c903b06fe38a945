"""Was a run disturbed by other processes, and which figures does that affect?

The monitor (`monitor.InterferenceProbe`) stores, per run, `io.interference`:
the CPU seconds spent on the run's CPUs by processes outside its cgroup
(busy time of those CPUs in /proc/stat minus the cgroup's own per-CPU usage)
and the bytes others read from the dataset's disk (/proc/diskstats minus the
cgroup's blkio counters), over the run's wall time. A run is disturbed when
others took more than `SETTINGS.others_cpu_pct` of its CPUs' capacity, or (a disk run) read
more than `SETTINGS.others_read_share` of what it read itself, or kept the CPUs it was not
given more than `SETTINGS.others_machine_pct` busy (`Interference.MACHINE`).

That last check is why a cached run 2.5x slower than its disk run went
unflagged: with `--cpus 1` of 2 the check looked at the run's own CPU only,
while a process on the other core competes for the memory bandwidth, the
shared cache and the kernel's work for the job. Without a cgroup (`--no-cgroups`
or none writable) there were no figures at all: the run's own CPU time is
then its process tree's (the monitor's `tree_cpu_s`), against the machine's
busy time, from the monitor samples.

A disturbed mode's rate is off, and so is every figure computed from it:
synthetic -> compute and prep stall; cached -> prep and fetch stall;
disk -> fetch stall and the epoch time.
"""

from __future__ import annotations

import enum
from typing import Any

from dsanalyze.analysis.window import steady_window
from dsanalyze.config import Mode
from dsanalyze.records import RunResult
from dsanalyze.settings import SETTINGS


class Interference(str, enum.Enum):
    CPU = "cpu"  # other processes ran on the run's CPUs
    IO = "io"  # other processes read from the dataset's disk
    MACHINE = "machine"  # other processes kept the CPUs the run was not given busy


def others_pct(result: RunResult) -> tuple[float | None, float | None]:
    """(others' share of the run's CPUs, others' share of the CPUs it was not given), in %.

    From the probe's cgroup figures; without them (no cgroup) from the monitor samples:
    the machine's busy time less the job's process tree, over the whole machine."""
    probe = result.io.interference or {}
    machine = probe.get("machine_cpus")
    own_cpus = len(probe.get("cpus") or ()) or machine
    window_s = probe.get("window_s") or 0.0
    if probe.get("others_cpu_pct") is not None:
        outside_s = (probe.get("machine_others_cpu_s") or 0.0) - probe["others_cpu_s"]
        free = (machine or 0) - (own_cpus or 0)
        rest = 100 * max(0.0, outside_s) / (window_s * free) if free > 0 and window_s else None
        return probe["others_cpu_pct"], rest
    found = _from_samples(result, machine)
    return (found, None) if found is not None else (None, None)


def _from_samples(result: RunResult, machine: int | None) -> float | None:
    """Others' share of the whole machine (%) from the first and last monitor samples."""
    rows = [m for m in result.monitor if "machine_busy_s" in m and "tree_cpu_s" in m]
    if len(rows) < 2 or not machine:
        return None
    a, b = rows[0], rows[-1]
    span = b.get("unix_s", 0.0) - a.get("unix_s", 0.0)
    if span <= 0:
        return None
    others = (b["machine_busy_s"] - a["machine_busy_s"]) - (b["tree_cpu_s"] - a["tree_cpu_s"])
    return 100 * max(0.0, others) / (span * machine)


def of_run(result: RunResult) -> dict[str, Any]:
    """`others_cpu_pct`, `others_outside_pct`, `others_read_bytes` and `disturbed`
    (Interference values) of one run."""
    probe = result.io.interference or {}
    cpu_pct, outside_pct = others_pct(result)
    read = probe.get("others_read_bytes")
    disturbed = []
    if cpu_pct is not None and cpu_pct > SETTINGS.others_cpu_pct:
        disturbed.append(Interference.CPU.value)
    if outside_pct is not None and outside_pct > SETTINGS.others_machine_pct:
        disturbed.append(Interference.MACHINE.value)
    own = result.io.read_bytes or 0
    if (result.mode is Mode.DISK and read is not None and read > SETTINGS.others_read_floor_bytes
            and read > SETTINGS.others_read_share * own):
        disturbed.append(Interference.IO.value)
    return {"others_cpu_pct": cpu_pct, "others_outside_pct": outside_pct,
            "others_read_bytes": read, "disturbed": tuple(disturbed)}


def outside_cpu_s_per_sample(result: RunResult) -> float | None:
    """CPU seconds spent outside the run's cgroup anywhere on the machine, per sample of its
    steady window (`window.steady_window`, the iterations its rate counts): the monitor
    samples' machine-wide busy time (`machine_busy_s`) less the cgroup's (`cpu_usage_s`),
    over the samples inside the window, per second, divided by the job's rate over it. The
    kernel's work for the job (I/O completion, reclaim), the harness's monitor and cache
    limiter, and any other process. None: not recorded.
    """
    window = steady_window(result)
    span = window.span_unix_s() if window is not None else None
    if window is None or span is None:
        return None
    lo, hi = span
    samples = window.samples()
    inside = [m for m in result.monitor if lo <= m.get("unix_s", 0.0) <= hi
              and "machine_busy_s" in m and "cpu_usage_s" in m]
    if len(inside) < 3 or hi <= lo or not samples:
        return None
    a, b = inside[0], inside[-1]
    others_s = (b["machine_busy_s"] - a["machine_busy_s"]) - (b["cpu_usage_s"] - a["cpu_usage_s"])
    cores = max(0.0, others_s) / (b["unix_s"] - a["unix_s"])
    return cores / (samples / (hi - lo))
