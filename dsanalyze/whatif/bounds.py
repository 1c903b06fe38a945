"""Physical bounds on the what-if model's fitted numbers.

A calibration can land anywhere its objective is flat: a throttle "giving"
240000x its bandwidth, reads costing less CPU than copying the bytes through
memory. Such a value is not a finding about the machine; it is a fit that
failed. Each bound below is the plausible range of one parameter, with why;
a fitted value outside it is dropped from the fit (the parameter keeps its
untested default) and the runs it came from are named in the parameter's
note, never printed as the parameter's value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dsanalyze.settings import SETTINGS


@dataclass(frozen=True)
class Bound:
    """The plausible range of one fitted parameter, `low <= value <= high`."""

    name: str
    low: float
    high: float
    why: str

    def holds(self, value: float) -> bool:
        return self.low <= value <= self.high

    def dropped(self, value: float, runs: Sequence[str], fmt: str = "{:.4g}") -> str:
        """The note of a dropped value: what it was, why not, the runs it came from."""
        return (f"fitted {fmt.format(value)} on {', '.join(runs) or 'no run'}, outside "
                f"{fmt.format(self.low)} to {fmt.format(self.high)} ({self.why}): dropped")


THROTTLE_EFFICIENCY = Bound(
    "throttle_efficiency", 0.05, 1.5,
    "a throttle gives about what it says; far below or above it is a window the throttle "
    "did not hold")
READ_CPU_BPS = Bound(
    "read_cpu_bps", 0.0, SETTINGS.memory_bps,
    "a read costs at least the memory copy of its bytes, about 20 GB/s per core")
READ_AMPLIFICATION = Bound(
    "read_amplification", 0.5, 10.0,
    "a job reads each file once per training sample or a few times more (a validation "
    "pass, a test pass); under half the bytes its loader missed, the page cache held more "
    "than its budget; over 10x, the counter saw another process's reads")
CONTENTION = Bound(
    "contention", 0.0, 1.0,
    "above 1 each extra busy core would lower the loader's total rate")
PREP_CPU_S = Bound(
    "prep_cpu_s_per_sample", 1e-5, 5.0,
    "no sample's read, decode and collation takes under 10 us or over 5 s of a core; a "
    "value at the solver's limits means the runs did not determine it")
