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
