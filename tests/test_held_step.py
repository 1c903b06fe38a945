"""A step on the CPU at every core of the machine, held by the work outside the job's cgroup.

tests/data/script_cpu holds real runs of tests/scripts/train_examples.py (a step on the
CPU) at 1 and 2 CPUs of a 2-core machine. Its disk runs' outside work per sample was no
larger than its cached runs', so nothing holds its step; the model below is the fitted one
with 2 ms of outside work per sample more in its disk runs (the scripts bench's disk runs
had 1.3 to 3 ms), a construction for the law, whose numbers are the fixture's.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from dsanalyze import store
from dsanalyze.config import Mode
from dsanalyze.whatif import api as whatif
from dsanalyze.whatif.intervals import rel_sigma_for
from dsanalyze.whatif.laws import held_load
from dsanalyze.whatif.model import Z

DATA = Path(__file__).parent / "data" / "script_cpu"
EXTRA_S = 2e-3


@pytest.fixture(scope="module")
def models():
    free = whatif.fit(store.load_runs(DATA))
    free = replace(free, others_disk_cpu_s_per_sample=free.others_cpu_s_per_sample)
    return free, replace(free, others_disk_cpu_s_per_sample=free.others_cpu_s_per_sample
                         + EXTRA_S)


def test_the_outside_work_holds_the_step_only_where_it_has_no_core_of_its_own(models) -> None:
    free, held = models
    assert held.step_on_cpu and held.machine_cpus == 2
    two, one = whatif.Config.of(2), whatif.Config.of(1)
    assert held_load(held, two, Mode.DISK, 100.0) == pytest.approx(EXTRA_S * 100)
    assert held_load(held, two, Mode.DISK, 1e4) == 0.5  # at most half the time
    assert held_load(held, one, Mode.DISK, 100.0) == 0.0  # the other core takes it
    assert held_load(held, two, Mode.CACHED, 100.0) == 0.0  # in the cached runs' loop time
    assert held_load(free, two, Mode.DISK, 100.0) == 0.0
    assert whatif.predict(held, one).rate_sps == whatif.predict(free, one).rate_sps


def test_a_held_step_is_slower_and_its_interval_carries_the_hold(models) -> None:
    free, held = models
    cfg = whatif.Config.of(2)
    a, b = whatif.predict(free, cfg), whatif.predict(held, cfg)
    assert b.rate_sps < a.rate_sps
    # the hold lengthens the step by 1 / (1 - L), L = 2 ms x the rate: at most that much
    assert b.rate_sps >= a.rate_sps * (1 - EXTRA_S * a.rate_sps) * 0.98
    # the interval: exp(+-z sigma), sigma the fit's in quadrature with ln(free / held)
    width = math.log(b.rate_sps_high / b.rate_sps_low) / (2 * Z)
    assert width == pytest.approx(math.hypot(rel_sigma_for(held, cfg),
                                             math.log(a.rate_sps / b.rate_sps)), rel=0.02)
