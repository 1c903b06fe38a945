"""The machine's own speed around each run: a fixed piece of the dataset's work timed just
before the run starts and just after it ends.

    with HostProbe.start(dataset.files) as probe:     # one worker process for the sweep
        before = probe.measure()                      # CPU seconds per item, or None
        ...                                           # the run
        after = probe.measure()

Two single runs compared (the synthetic and the cached run of a configuration, a disk run
and its cached run) differ by the machine's drift too: on a VM whose host runs other
tenants, the same decode takes up to 20% longer from one minute to the next with nothing
else on the guest (`bench/machine_drift.py`), and a run cannot tell that from its job. The
probe is `resources/cpuscale.py`'s worker: one process pinned to the first CPU the harness
may use, decoding (or checksumming) three of the dataset's files from memory for
`PROBE_S` wall seconds in two phases, the faster counted, each timed by its own CPU clock
(`process_time`), so that a core lent to another process meanwhile does not count. Between runs nothing of the job runs: the
probe takes no CPU from it. Idle, the worker waits on its stdin; it ends when the harness
closes it, or dies (its stdin then ends too).

A probe that cannot start or answer says why once (`HostProbe.why`) and measures nothing
more; the sweep goes on.

The machine slowed (`slowed_pct`): a reading more than `SETTINGS.host_slow_pct` over the
median of the sweep's latest readings not slowed (`HostProbe.seen`, three taken at the start). A
neighbour on the VM's host slows the same decode by 57-70% for a minute or less, and the
run beside it with it: on bench/scripts_accuracy.py's grids the three such readings each
followed a run 20-40% slower than its configuration's others. The sweep then waits for the
machine to come back (`HostProbe.settle`) and measures that run again (`sweep._measure`).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from dsanalyze.records import pct_over
from dsanalyze.resources import cpuscale
from dsanalyze.settings import SETTINGS

PROBE_S = 0.2  # wall seconds of one probe
PHASES = 2  # a probe's phases, the faster counted
BASELINE_PROBES = 3  # readings taken at the start: the median the first run is judged by
WINDOW = 24  # the latest readings the median is of (a dozen runs): slow drift moves it
SETTLE_S = 90.0  # the longest wait for a slowed machine to come back (its slow spells: < 1 min)
POLL_S = 5.0  # seconds between readings while waiting


def slowed_pct(cpu_s: float | None, seen: Sequence[float]) -> float | None:
    """How much longer than the median of `seen` the reading `cpu_s` took, in % (negative:
    faster); None without a reading or with fewer than `BASELINE_PROBES` seen."""
    base = baseline(seen)
    return pct_over(cpu_s, base) if cpu_s and base is not None else None


def baseline(seen: Sequence[float]) -> float | None:
    """The median of the readings `seen`, that a reading is judged by (None: fewer than
    `BASELINE_PROBES`)."""
    return statistics.median(seen) if len(seen) >= BASELINE_PROBES else None


def is_slowed(cpu_s: float | None, seen: Sequence[float]) -> bool:
    """The reading is more than `SETTINGS.host_slow_pct` over the sweep's median so far."""
    pct = slowed_pct(cpu_s, seen)
    return pct is not None and pct > SETTINGS.host_slow_pct


@dataclass(frozen=True)
class Settled:
    """A wait for a slowed machine: the last reading, the seconds waited, and whether the
    machine came back (`back`; False: it stayed slow for `SETTLE_S`, taken as its speed now)."""

    cpu_s: float | None
    waited_s: float
    back: bool


@dataclass
class HostProbe:
    """One probe worker for a sweep (`start`), or none with the reason (`why`)."""

    proc: subprocess.Popen | None
    work: str | None = None
    why: str | None = None
    # the readings the machine's speed is judged by: every one not slowed (`is_slowed`)
    seen: list[float] = field(default_factory=list)

    @classmethod
    def start(cls, files: Sequence[str], cpu_ids: Sequence[int] | None = None) -> HostProbe:
        """The worker, pinned to the first of `cpu_ids` (default: the harness's affinity),
        on three of `files` spread over the list; none without files."""
        picked, work = cpuscale.probe_files(files)
        if not picked:
            return cls(None, why="no dataset files to decode")
        cpu = min(cpu_ids if cpu_ids else os.sched_getaffinity(0))
        try:
            proc = cpuscale.start_worker(cpu, work, picked)
        except OSError as e:
            return cls(None, why=f"the probe did not start: {e}")
        probe = cls(proc, work)
        try:
            cpuscale.expect_ready(proc)
        except (OSError, ValueError) as e:
            probe.close()
            return cls(None, why=f"the probe did not start: {e}")
        for _ in range(BASELINE_PROBES):
            probe.measure()
        return probe

    def measure(self, probe_s: float = PROBE_S) -> float | None:
        """CPU seconds per item of one probe: the faster of two phases of half `probe_s`
        each (the first after the worker sat idle between runs was up to 50% slower, now
        and then, than every other: a vCPU the host had descheduled waking up); None where
        the probe is gone (and `why`)."""
        cpu_s = self._read(probe_s)
        if cpu_s and not is_slowed(cpu_s, self.seen):
            self.seen.append(cpu_s)
            del self.seen[:-WINDOW]
        return cpu_s

    def _read(self, probe_s: float) -> float | None:
        """One reading from the worker, judged by nothing."""
        if self.proc is None:
            return None
        found = []
        try:
            for _ in range(PHASES):
                (answer,) = cpuscale.phase([self.proc], probe_s / PHASES)
                if answer["items"]:
                    found.append(answer["cpu_s"] / answer["items"])
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            self.why = f"the probe failed: {e}"
            self.close()
            return None
        return min(found) if found else None

    def baseline_cpu_s(self) -> float | None:
        """The median reading the next one is judged by (None: too few yet)."""
        return baseline(self.seen)

    def settle(self, cpu_s: float | None, wait_s: float | None = None,
               poll_s: float | None = None) -> Settled:
        """From a slowed reading `cpu_s`, a reading every `poll_s` (`POLL_S`) until one is no
        longer slowed, for at most `wait_s` (`SETTLE_S`). A machine still slow then has a new
        speed: the readings judged by start again from the last one (a neighbour for good,
        not a spell), so that every later run is not measured twice."""
        wait_s = SETTLE_S if wait_s is None else wait_s
        poll_s = POLL_S if poll_s is None else poll_s
        t0 = time.monotonic()
        while is_slowed(cpu_s, self.seen):
            if time.monotonic() - t0 >= wait_s or self.proc is None:
                self.seen[:] = [cpu_s] * BASELINE_PROBES if cpu_s else []
                return Settled(cpu_s, time.monotonic() - t0, back=False)
            time.sleep(poll_s)
            cpu_s = self.measure()
        return Settled(cpu_s, time.monotonic() - t0, back=True)

    def close(self) -> None:
        if self.proc is not None:
            cpuscale.stop([self.proc])
            self.proc = None

    def __enter__(self) -> HostProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
