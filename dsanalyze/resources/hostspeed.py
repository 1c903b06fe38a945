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
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from dsanalyze.resources import cpuscale

PROBE_S = 0.2  # wall seconds of one probe
PHASES = 2  # a probe's phases, the faster counted


@dataclass
class HostProbe:
    """One probe worker for a sweep (`start`), or none with the reason (`why`)."""

    proc: subprocess.Popen | None
    work: str | None = None
    why: str | None = None

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
        return probe

    def measure(self, probe_s: float = PROBE_S) -> float | None:
        """CPU seconds per item of one probe: the faster of two phases of half `probe_s`
        each (the first after the worker sat idle between runs was up to 50% slower, now
        and then, than every other: a vCPU the host had descheduled waking up); None where
        the probe is gone (and `why`)."""
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

    def close(self) -> None:
        if self.proc is not None:
            cpuscale.stop([self.proc])
            self.proc = None

    def __enter__(self) -> HostProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
