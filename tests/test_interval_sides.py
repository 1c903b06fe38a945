"""Each side of the model carries its own part of a prediction's sigma (`whatif/intervals.py`).

The law: sigma^2 = (s fit L)^2 + (max(k storage, f) (1 - L))^2 + (c L)^2 [a step on the CPU]
+ (w_throttle u_t)^2 + sum (w u)^2 + held^2 + sharing^2, L the loop's share of the rate.
The property tests check what each constant reaches and what it leaves alone, for every
Spread: a constant changed on one side moves no prediction whose rate the other side sets.
The fixture test checks that a CPU-trained script's model carries the step's part and the
built-in job's (the sim device, the step on no core) does not.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsanalyze import store
from dsanalyze.settings import SETTINGS
from dsanalyze.whatif import api as whatif
from dsanalyze.whatif.intervals import Spread, spread
from dsanalyze.whatif.model import Z

DATA = Path(__file__).parent / "data"

unit = st.floats(0.0, 1.0)
rel = st.floats(0.0, 0.5)
spreads = st.builds(Spread, loop=unit, fit_rel=rel, storage_rel=rel,
                    weights=st.lists(unit, max_size=3).map(tuple), held_rel=rel,
                    sharing_rel=rel, throttle_weight=unit, step_on_cpu=st.booleans(),
                    efficiency_fitted=st.booleans())


@given(spreads)
def test_the_step_and_the_throttle_add_their_own_parts_in_quadrature(sp: Spread) -> None:
    bare = replace(sp, step_on_cpu=False, throttle_weight=0.0)
    step = SETTINGS.cpu_step_sigma * sp.loop if sp.step_on_cpu else 0.0
    throttle = SETTINGS.throttle_sigma * sp.throttle_weight
    assert sp.sigma() ** 2 == pytest.approx(bare.sigma() ** 2 + step ** 2 + throttle ** 2,
                                            rel=1e-9, abs=1e-15)


@given(spreads, st.floats(0.0, 0.3))
def test_a_loop_constant_never_moves_a_rate_the_storage_alone_sets(sp: Spread, c: float) -> None:
    held = replace(sp, loop=0.0)  # the throttle alone sets the rate
    other = replace(SETTINGS, cpu_step_sigma=c, fit_sigma_scale=2 * SETTINGS.fit_sigma_scale)
    assert held.sigma(other) == held.sigma()


@given(spreads, st.floats(0.0, 0.3), st.floats(0.0, 3.0))
def test_a_storage_constant_never_moves_a_rate_the_loop_alone_sets(sp: Spread, u_t: float,
                                                                   k: float) -> None:
    cpu_bound = replace(sp, loop=1.0, throttle_weight=0.0)  # its weight is 1 - L: nil
    other = replace(SETTINGS, throttle_sigma=u_t, storage_sigma_scale=k,
                    storage_sigma_floor=k / 10)
    assert cpu_bound.sigma(other) == cpu_bound.sigma()


@given(spreads, st.floats(0.0, 0.05))
def test_a_rate_the_storage_alone_sets_is_never_known_closer_than_the_floor(
        sp: Spread, f: float) -> None:
    # a throttle's steady rate is known no closer than its efficiency, however small the fit
    # runs' residual: a held-out rate the storage sets carries at least the floor, and the
    # floor reaches such a rate as far as the rate depends on the storage, no further
    held = replace(sp, loop=0.0, efficiency_fitted=True)
    other = replace(SETTINGS, storage_sigma_floor=f)
    assert held.sigma(other) >= f * (1 - 1e-12)
    half = replace(sp, loop=0.5, weights=(), held_rel=0.0, sharing_rel=0.0, throttle_weight=0.0,
                   fit_rel=0.0, step_on_cpu=False, efficiency_fitted=True)
    assert half.sigma(other) >= f / 2 * (1 - 1e-12)
    if SETTINGS.storage_sigma_scale * sp.storage_rel < f:
        assert half.sigma(other) == pytest.approx(f / 2)


@given(spreads, st.floats(0.0, 0.05))
def test_the_floor_never_reaches_a_throttle_taken_at_face_value(sp: Spread, f: float) -> None:
    # no fit run measured the throttle: its own sigma (`throttle_sigma`) is the whole of what
    # is known of it, and the efficiency's floor has nothing to bound (bench45's face-value
    # throttles lay within 0.5% of their predictions)
    face = replace(sp, efficiency_fitted=False)
    assert face.sigma(replace(SETTINGS, storage_sigma_floor=f)) == face.sigma(
        replace(SETTINGS, storage_sigma_floor=0.0))


@given(spreads)
def test_the_interval_is_the_rate_times_exp_of_z_sigma_either_way(sp: Spread) -> None:
    low, high = sp.interval(100.0)
    assert low * high == pytest.approx(100.0 ** 2)
    assert math.log(high / 100.0) == pytest.approx(Z * sp.sigma())


def test_a_cpu_trained_script_carries_the_steps_part_and_the_sim_job_does_not() -> None:
    script = whatif.fit(store.load_runs(DATA / "script_cpu"))  # examples-style, on the CPU
    sim = whatif.fit(store.load_runs(DATA / "whatif_prep"))  # the built-in job, sim device
    assert script.step_on_cpu and not sim.step_on_cpu
    for model in (script, sim):
        cfg = whatif.Config.of(1)  # unthrottled: the loop sets the rate
        parts = spread(model, cfg, loop=1.0)
        expected = SETTINGS.cpu_step_sigma if model.step_on_cpu else 0.0
        assert parts.sigma() ** 2 - replace(parts, step_on_cpu=False).sigma() ** 2 \
            == pytest.approx(expected ** 2)
        # the prediction's interval is at least that wide
        p = whatif.predict(model, cfg)
        assert math.log(p.rate_sps_high / p.rate_sps) >= Z * expected * (1 - 1e-9)


def test_only_a_throttle_the_fit_measured_takes_the_efficiencys_floor() -> None:
    model = whatif.fit(store.load_runs(DATA / "script_cpu"))
    throttled, free = whatif.Config.of(1, storage_read_bps=4e6), whatif.Config.of(1)
    measured = replace(model, throttle_measured=True)
    face = replace(model, throttle_measured=False)
    assert spread(measured, throttled, loop=0.0).efficiency_fitted
    assert not spread(face, throttled, loop=0.0).efficiency_fitted
    assert not spread(measured, free, loop=0.0).efficiency_fitted  # the device: no throttle
    # at face value the throttle's own sigma stands where the floor would
    at_face = spread(face, throttled, loop=0.0)
    assert at_face.sigma() == pytest.approx(math.hypot(
        SETTINGS.storage_sigma_scale * at_face.storage_rel, SETTINGS.throttle_sigma))
