"""Was a run disturbed by other processes, and which figures does that affect?

The monitor (`monitor.InterferenceProbe`) stores, per run, `io.interference`:
the CPU seconds spent on the run's CPUs by processes outside its cgroup
(busy time of those CPUs in /proc/stat minus the cgroup's own per-CPU usage)
and the bytes others read from the dataset's disk (/proc/diskstats minus the
cgroup's blkio counters), over the run's wall time. A run is disturbed when
others took more than `CPU_PCT` of its CPUs' capacity, or (a disk run) read
more than `READ_SHARE` of what it read itself.

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

CPU_PCT = 10.0  # others' share of the run's CPU capacity above which it is disturbed
READ_SHARE = 0.10  # others' reads on the dataset's disk, as a share of the run's own
READ_FLOOR_BYTES = 4 << 20  # below this, reads by others do not matter

AFFECTS = {Mode.SYNTHETIC: ("compute", "prep stall"), Mode.CACHED: ("prep stall", "fetch stall"),
           Mode.DISK: ("fetch stall", "epoch time"), Mode.LOADER: ("loader rate",)}


class Interference(str, enum.Enum):
    CPU = "cpu"  # other processes ran on the run's CPUs
    IO = "io"  # other processes read from the dataset's disk


def of_run(result: RunResult) -> dict[str, Any]:
    """`others_cpu_pct`, `others_read_bytes` and `disturbed` (Interference values) of one run."""
    probe = result.io.interference or {}
    cpu_pct = probe.get("others_cpu_pct")
    read = probe.get("others_read_bytes")
    disturbed = []
    if cpu_pct is not None and cpu_pct > CPU_PCT:
        disturbed.append(Interference.CPU.value)
    own = result.io.read_bytes or 0
    if (result.mode is Mode.DISK and read is not None and read > READ_FLOOR_BYTES
            and read > READ_SHARE * own):
        disturbed.append(Interference.IO.value)
    return {"others_cpu_pct": cpu_pct, "others_read_bytes": read, "disturbed": tuple(disturbed)}


def warning(run_id: str, mode: Mode, found: dict[str, Any]) -> str | None:
    """One line for the summary: who disturbed the run, and which figures that affects."""
    kinds = found["disturbed"]
    if not kinds:
        return None
    what = []
    if Interference.CPU.value in kinds:
        what.append(f"other processes used {found['others_cpu_pct']:.0f}% of its CPUs")
    if Interference.IO.value in kinds:
        what.append(f"others read {found['others_read_bytes'] / 2**20:.0f} MiB from its disk")
    return (f"{mode.value} run {run_id} disturbed: {' and '.join(what)}; affects "
            f"{' and '.join(AFFECTS[mode])}")


def outside_cpu_s_per_sample(result: RunResult) -> float | None:
    """CPU seconds spent outside the run's cgroup anywhere on the machine, per sample of its
    steady window (`window.steady_window`, the iterations its rate counts): the monitor
    samples' machine-wide busy time (`machine_busy_s`) less the cgroup's (`cpu_usage_s`),
    over the samples inside the window, per second, divided by the job's rate over it. The
    kernel's work for the job (I/O completion, reclaim), the harness's monitor and cache
    limiter, and any other process. None: not recorded.
    """
    window = steady_window(result)
    if window is None or not window.ranks[0].start_unix_s or not window.chosen[0]:
        return None
    r0, chosen = window.ranks[0], window.chosen[0]  # the window's iterations are consecutive
    lo = r0.start_unix_s + sum(r0.iter_s[:chosen[0]])
    hi = r0.start_unix_s + sum(r0.iter_s[:chosen[-1] + 1])
    samples = window.samples()
    inside = [m for m in result.monitor if lo <= m.get("unix_s", 0.0) <= hi
              and "machine_busy_s" in m and "cpu_usage_s" in m]
    if len(inside) < 3 or hi <= lo or not samples:
        return None
    a, b = inside[0], inside[-1]
    others_s = (b["machine_busy_s"] - a["machine_busy_s"]) - (b["cpu_usage_s"] - a["cpu_usage_s"])
    cores = max(0.0, others_s) / (b["unix_s"] - a["unix_s"])
    return cores / (samples / (hi - lo))
