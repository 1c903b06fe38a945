"""The contention law beyond the busy cores it was fitted on (`laws.contention_factor`).

A slope fitted between 1 and 2 busy cores is no law for 8. The fixtures are a
pytorch/examples-style script (`tests/scripts/train_examples.py`, resnet18 on cuda, 2 workers)
measured on an H200 machine with 16 cores: `cuda_examples` at 1 and 2 CPUs, the what-if's fit
runs; `cuda_examples_wide` the same script with 4 workers at 4 CPUs and 8 workers at 8, measured
after, never fitted on. Those runs showed the linear law's miss (-22 to -25%) and motivated the
change, so they are its tuning data, not a score of it.
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import with_probed_contention
from hypothesis import given, settings
from hypothesis import strategies as st

from dsanalyze import store
from dsanalyze.config import Mode
from dsanalyze.whatif.api import fit
from dsanalyze.whatif.assumptions import Law
from dsanalyze.whatif.laws import busy_cores, contention_factor
from dsanalyze.whatif.model import Config, Model
from dsanalyze.whatif.validation import check

DATA = Path(__file__).parent / "data"


@functools.cache
def _fitted() -> Model:
    return fit(_fit_runs())


def _fit_runs() -> list:
    return store.load_runs(DATA / "cuda_examples")


def _wide_runs() -> list:
    return [r for r in store.load_runs(DATA / "cuda_examples_wide") if r.mode is not Mode.SYNTHETIC]


@settings(deadline=None)  # the first example fits the model once
@given(alpha=st.floats(0.001, 1.0), beyond=st.floats(0.0, 1.0), top=st.integers(2, 16),
       cores=st.integers(1, 64))
def test_the_law_is_the_fitted_one_up_to_its_cores_and_the_probes_beyond(
        alpha: float, beyond: float, top: int, cores: int) -> None:
    """Up to the fitted cores the factor is 1 + alpha (k - 1); beyond, it grows by `beyond` a
    core from where the fitted law left off: continuous at the last fitted core, never under
    it, and never over the fitted law carried on where `beyond` is at most alpha."""
    beyond = min(beyond, alpha)
    model = replace(_fitted(), contention=alpha, contention_cores=top, contention_beyond=beyond,
                    ranks=1)
    cfg = Config.of(cores, workers=cores)
    k = busy_cores(model, cfg)
    linear = 1 + alpha * (k - 1)
    got = contention_factor(model, cfg)
    at_top = 1 + alpha * (top - 1)
    if k <= top:
        assert got == pytest.approx(linear)
    else:
        assert got == pytest.approx(at_top + beyond * (k - top))
        assert at_top - 1e-12 <= got <= linear + 1e-12
    # without a reach (a probed or single-count law) the law holds at every count
    assert contention_factor(replace(model, contention_cores=0), cfg) == pytest.approx(linear)


def test_each_core_beyond_the_fitted_ones_adds_the_machines_probe_at_most_the_fitted() -> None:
    """Fitted on 1 and 2 busy cores (the rates give 0.12 a core): the reach is 2; beyond it
    each core adds the machine's parallel probe's contention, capped at the fitted one; with
    no probe recorded, none."""
    fitted = _fitted()
    assert fitted.contention == pytest.approx(0.123, abs=0.01)
    assert fitted.contention_cores == 2 and not fitted.contention_probed
    assert fitted.contention_beyond == 0.0  # this machine's probe read 0.000 a core
    assert fit(with_probed_contention(_fit_runs(), 0.02, cpus=16)).contention_beyond == pytest.approx(0.02)
    assert fit(with_probed_contention(_fit_runs(), 0.5, cpus=16)).contention_beyond == pytest.approx(
        fitted.contention)
    bare = [replace(r, environment={k: v for k, v in r.environment.items()
                                    if k != "cpu_scaling"}) for r in _fit_runs()]
    assert fit(bare).contention_beyond == 0.0


def test_more_cores_on_the_h200_are_predicted_closer_than_by_the_linear_law() -> None:
    """The 4- and 8-core runs (cached and disk, 4 and 8 workers), predicted from the 1- and
    2-CPU fit: the linear law carried its 1-to-2-core slope on and missed every one low, by
    14-25%; held beyond the fitted cores the errors are -11 to +21% and their median less than
    half the linear law's, and 3 of the 4 lie inside their 90% intervals (the linear law: 1).
    The 8-core disk run, at 1111.5 samples/s, lies 10% under its cached run and is
    over-predicted by 21%; `--verify` measured the same configuration at 1271.2 (+5.6%)."""
    model = _fitted()
    linear = replace(model, contention_cores=0)
    new = [check(model, (r,), "wide") for r in _wide_runs()]
    old = [check(linear, (r,), "wide") for r in _wide_runs()]
    assert len(new) == 4
    assert all(-26 < o.error_pct < -10 for o in old)  # the linear law: every one low
    assert all(abs(n.error_pct) < 22 for n in new)
    assert statistics.median(abs(n.error_pct) for n in new) < \
        0.5 * statistics.median(abs(o.error_pct) for o in old)
    inside = sum(c.low_sps <= c.measured_sps <= c.high_sps for c in new)
    assert inside == 3 and sum(c.low_sps <= c.measured_sps <= c.high_sps for c in old) == 1
    # the untested assumption names the law beyond the fitted cores
    eight = next(c for c in new if c.run_id.startswith("disk-cpus8"))
    assert any(u.law is Law.BEYOND for u in eight.untested)
