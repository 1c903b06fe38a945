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
from dsanalyze.whatif.provenance import Dropped


@dataclass(frozen=True)
class Bound:
    """The plausible range of one fitted parameter, `low <= value <= high`; why each range
    is where it is: `report/params.py`'s `BOUND_WHY`, which the dropped value's note quotes."""

    name: str
    low: float
    high: float

    def holds(self, value: float) -> bool:
        return self.low <= value <= self.high

    def dropped(self, value: float, runs: Sequence[str]) -> Dropped:
        """A dropped value: what it was, the bound, the runs it came from."""
        return Dropped(self.name, value, self.low, self.high, tuple(runs))


THROTTLE_EFFICIENCY = Bound("throttle_efficiency", 0.05, 1.5)
READ_CPU_BPS = Bound("read_cpu_bps", 0.0, SETTINGS.memory_bps)  # a read copies its bytes
READ_AMPLIFICATION = Bound("read_amplification", 0.5, 10.0)
CONTENTION = Bound("contention", 0.0, 1.0)
PREP_CPU_S = Bound("prep_cpu_s_per_sample", 1e-5, 5.0)
RESTART_CPU_S = Bound("restart_cpu_s", 0.0, 5.0)
