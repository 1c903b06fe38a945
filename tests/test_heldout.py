"""What a prediction may see of a held-out run: a `HeldOut`, nothing it measured.

Committed real runs (tests/data): report_sweep (built-in job at 1 and 2 CPUs),
report_2ranks (two ranks, `--cpus all` on a 2-CPU machine).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dsanalyze import store
from dsanalyze.whatif import api as whatif
from dsanalyze.whatif.assumptions import Assume
from dsanalyze.whatif.laws import run_config
from dsanalyze.whatif.model import HeldOut
from dsanalyze.whatif.rates import predict_run

DATA = Path(__file__).parent / "data"
PREDICTED = ("predicted_sps", "low_sps", "high_sps", "predicted_epoch1_sps", "cache_bytes",
             "untested", "mode", "run_id")


def _scrambled(run, seed: int):
    """`run` with every rank's iteration and wait times shuffled and rescaled (a wait never
    longer than its iteration): the same layout, other timings."""
    rng = np.random.default_rng(seed)
    ranks = []
    for k in run.ranks:
        scale = rng.uniform(0.3, 3.0, len(k.iter_s))
        iters = rng.permutation(np.asarray(k.iter_s)) * scale
        waits = np.minimum(rng.permutation(np.asarray(k.wait_s)) * scale, iters)
        ranks.append(replace(k, iter_s=tuple(iters.tolist()), wait_s=tuple(waits.tolist())))
    return replace(run, ranks=tuple(ranks))


def _predicted(check) -> tuple:
    return tuple(getattr(check, f) for f in PREDICTED)


def test_scrambled_timings_of_a_held_out_run_leave_its_prediction_bit_identical() -> None:
    """Leave-one-out: each disk run predicted by the model fitted on the others, from its
    real and from its scrambled record: the same prediction to the bit, a different
    measured rate."""
    runs = store.load_runs(DATA / "report_sweep")
    disk = [r for r in runs if r.mode.value == "disk"]
    assert len(disk) >= 2
    for i, run in enumerate(disk):
        model = whatif.fit([r for r in runs if r is not run])
        real = whatif.check(model, (run,), "loo")
        scrambled = whatif.check(model, (_scrambled(run, i),), "loo")
        assert _predicted(scrambled) == _predicted(real)
        assert scrambled.measured_sps != real.measured_sps


def test_scrambled_held_out_runs_leave_the_extrapolation_bit_identical() -> None:
    runs = store.load_runs(DATA / "report_sweep")
    val = whatif.validate(runs)
    extrapolation = val.splits[1]
    held = {c.run_id for c in extrapolation.checks}
    assert held and not held & set(extrapolation.fit_runs)
    again = whatif.validate([_scrambled(r, 7) if r.run_id in held else r for r in runs])
    assert [_predicted(c) for c in again.splits[1].checks] == \
        [_predicted(c) for c in extrapolation.checks]
    assert [c.measured_sps for c in again.splits[1].checks] != \
        [c.measured_sps for c in extrapolation.checks]


def test_predict_run_takes_only_a_held_out() -> None:
    runs = store.load_runs(DATA / "report_sweep")
    model = whatif.fit(runs)
    with pytest.raises(TypeError, match="HeldOut"):
        predict_run(model, runs[0])
    assert predict_run(model, HeldOut.of(runs[-1])).rate_sps > 0


def test_all_cpus_are_the_machine_s_count_when_the_run_ran() -> None:
    """report_2ranks ran with `--cpus all` on a machine of 2 CPUs (its environment says so):
    held out, each run is a 2-CPU run, and its prediction is the model's for 2 CPUs with its
    own budget and bandwidth, not for 1 CPU."""
    runs = store.load_runs(DATA / "report_2ranks")
    assert all(r.spec.resources.cpus is None and r.environment["cpus_available"] == 2
               for r in runs)
    val = whatif.validate(runs)
    (check,) = val.checks
    run = next(r for r in runs if r.run_id == check.run_id)
    held = HeldOut.of(run)
    assert held.cpus == 2 and held.job.ranks == 2
    model = whatif.fit([r for r in runs if r is not run])
    cfg = run_config(model, held)
    assert cfg.cpus == 2
    by_hand = whatif.Config.of(2, storage_read_bps=run.spec.resources.storage_read_bps,
                               nproc=2, workers=1)
    assert whatif.interval(model, by_hand, check.predicted_sps) == (check.low_sps, check.high_sps)
    assert not {u.kind for u in check.untested} & {Assume.BEYOND_CPUS, Assume.ONE_CPU_COUNT,
                                                  Assume.MACHINE_CPUS}
