"""Fitted values outside their physical bounds are dropped, with the runs they came from."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsanalyze import store
from dsanalyze.report import whatif_text
from dsanalyze.report.params import dropped_text
from dsanalyze.settings import SETTINGS
from dsanalyze.whatif import api as whatif
from dsanalyze.whatif import bounds
from dsanalyze.whatif.assumptions import Assume, Assumption

DATA = Path(__file__).parent / "data"


def _param(model, name):
    return next(p for p in model.params if p.name == name)


def test_a_throttle_that_gave_250x_its_bandwidth_is_dropped_and_its_run_named() -> None:
    """whatif_fetch's 1 MiB/s run, its spec rewritten to 4 KiB/s: its cold epoch read far
    faster than 4 KiB/s could give (a throttle that did not hold). The efficiency it fits
    is no finding: the fit keeps 1 (face value), and the note names the run."""
    runs = store.load_runs(DATA / "whatif_fetch")
    slow = [replace(r, spec=replace(r.spec, resources=replace(r.spec.resources,
                                                              storage_read_bps=4096)))
            if r.spec.resources.storage_read_bps else r for r in runs]
    model = whatif.fit(slow)
    p = _param(model, "throttle_efficiency")
    assert model.throttle_efficiency == p.value == 1.0
    (dropped,) = p.how.dropped
    assert dropped.runs == ("disk-cpus2-cachenone-bw4K",)
    assert dropped.value > bounds.THROTTLE_EFFICIENCY.high  # what was dropped
    line = next(x for x in whatif_text.params_lines(model) if "throttle_efficiency" in x)
    assert line.split()[1] == "1"  # printed as its value: face value, not the dropped fit
    # a throttled prediction then rests on the throttle taken at face value, and says so
    throttled = whatif.Config.of(2, storage_read_bps=4096)
    assert Assumption(Assume.THROTTLE) in whatif.predict(model, throttled).untested
    # the real 1 MiB/s run: a plausible efficiency, kept, and the throttle tested
    real = whatif.fit(runs)
    assert 0.5 < real.throttle_efficiency < 1.5 and real.throttle_measured
    assert not whatif.predict(real, whatif.Config.of(2, storage_read_bps=1 << 20)).untested


@pytest.mark.parametrize("bound,inside,outside", [
    (bounds.THROTTLE_EFFICIENCY, 0.98, 2.384e5),
    (bounds.READ_CPU_BPS, 163e6, 646e9),  # the 646G/s: faster than memory
    (bounds.CONTENTION, 0.2, 3.0),
])
def test_bounds_keep_the_plausible_and_drop_the_rest(bound, inside, outside) -> None:
    assert bound.holds(inside) and not bound.holds(outside)
    dropped = bound.dropped(outside, ["run-a"])
    assert dropped.runs == ("run-a",) and dropped.value == outside
    words = dropped_text(dropped)  # the value, the range and the run, as printed
    assert f"fitted {outside:.4g} on run-a, outside {bound.low:.4g} to {bound.high:.4g}" in words


@given(st.floats(min_value=1e-3, max_value=1e12, allow_nan=False))
def test_a_read_cost_is_plausible_exactly_when_slower_than_memory(bps: float) -> None:
    assert bounds.READ_CPU_BPS.holds(bps) == (bps <= SETTINGS.memory_bps)
