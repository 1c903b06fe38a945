"""Workers that start again at every epoch (no persistent workers): each spends the restart
CPU X before its first batch of every epoch after the first.

The independent reason: at an epoch start every batch of the epoch before has been taken,
so nothing else wants the CPU or the storage while the W workers restart; they share the C
cores (a worker at most one), all end together after X W / min(W, C), and from then on
the epoch runs as it would have with no restart. So each later epoch's first wait is longer
by exactly X W / min(W, C), every other iteration is as it was, and X = 0 is today's
pipeline. Runs timed by the simulation with a restart X give back X.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import timed_by
from hypothesis import given, settings
from hypothesis import strategies as st

from dsanalyze import store
from dsanalyze.config import Mode
from dsanalyze.whatif import api as whatif
from dsanalyze.whatif import fit_restart
from dsanalyze.whatif.pipeline import Pipeline, simulate

BATCHES, BATCH, EPOCHS = 12, 3, 3


@settings(max_examples=40, deadline=None)
@given(workers=st.integers(1, 4), cpus=st.integers(1, 4), restart_s=st.floats(0.001, 1.0),
       prep_s=st.floats(0.001, 0.05), step_s=st.floats(0.0, 0.1), on_cpu=st.booleans(),
       read_bps=st.sampled_from([None, 2e6, 5e7]), sizes=st.integers(1000, 200_000))
def test_each_later_epoch_waits_the_restart_and_nothing_else_moves(
        workers, cpus, restart_s, prep_s, step_s, on_cpu, read_bps, sizes):
    base = Pipeline(ranks=1, workers=workers, batch_size=BATCH, cpus=cpus,
                    step_s=0.0 if on_cpu else step_s, gang_step_s=step_s if on_cpu else 0.0,
                    gang_threads=cpus, main_cpu_s=0.002, prep_cpu_s=prep_s, read_bps=read_bps)
    misses = [np.full(BATCHES * BATCH, float(sizes)) for _ in range(EPOCHS)]
    plain = simulate(base, misses, BATCHES)
    again = simulate(replace(base, restart_cpu_s=restart_s), misses, BATCHES)
    assert simulate(replace(base, restart_cpu_s=0.0), misses, BATCHES) == plain
    shift = restart_s * workers / min(workers, cpus)
    for i in range(len(plain.iter_s)):
        later_start = i > 0 and plain.epoch[i] != plain.epoch[i - 1]
        assert again.wait_s[i] == pytest.approx(plain.wait_s[i] + shift * later_start,
                                                rel=1e-9, abs=1e-9)
        assert again.iter_s[i] == pytest.approx(plain.iter_s[i] + shift * later_start,
                                                rel=1e-9, abs=1e-9)


SCRIPT_CPU = Path(__file__).parent / "data" / "script_cpu"  # 3 workers, not persistent


@pytest.fixture(scope="module")
def cpu_script():
    runs = store.load_runs(SCRIPT_CPU)
    model = replace(whatif.fit(runs), step_s_by_cpus=((1, 0.080), (2, 0.045)),
                    prep_cpu_s=0.004, contention=0.0, cpu_stretch_by_cpus=(), startup_s=0.0)
    return runs, model


@settings(max_examples=6, deadline=None)
@given(restart_ms=st.floats(20.0, 800.0))
def test_runs_timed_with_a_restart_give_it_back(cpu_script, restart_ms):
    """Cached runs (3 workers that start again, 1 and 2 CPUs) timed by the simulation with a
    restart X give back X on each run; with persistent workers the same runs give 0 and
    the reason."""
    runs, model = cpu_script
    x = restart_ms / 1000
    cached = [timed_by(replace(model, restart_cpu_s=x), r) for r in runs
              if r.mode is Mode.CACHED]
    assert not model.persistent_workers and len(cached) == 2
    fitted, (param,) = fit_restart.fit(model, cached)
    assert fitted.restart_cpu_s == pytest.approx(x, rel=0.01)
    assert (param.how.low_s, param.how.high_s) == pytest.approx((x, x), rel=0.01)
    kept, (none,) = fit_restart.fit(replace(model, persistent_workers=True), cached)
    assert kept.restart_cpu_s == 0 and none.how.reason.value == "workers_kept"


@settings(max_examples=6, deadline=None)
@given(restart_ms=st.floats(20.0, 400.0), main_ms=st.floats(0.0, 400.0))
def test_runs_timed_with_the_main_process_share_give_both_back(cpu_script, restart_ms, main_ms):
    """The main process's share of the restart (its writes to the heap the new workers share,
    in its first iteration of each later epoch) lengthens that iteration, not its wait: runs
    timed by the simulation with a worker's restart X and the main's M give back X from
    their first waits and M from their first iterations; with M = 0 none is reported."""
    runs, model = cpu_script
    x, m = restart_ms / 1000, main_ms / 1000
    cached = [timed_by(replace(model, restart_cpu_s=x, restart_main_cpu_s=m), r) for r in runs
              if r.mode is Mode.CACHED]
    fitted, _ = fit_restart.fit(model, cached)
    assert fitted.restart_cpu_s == pytest.approx(x, rel=0.01)
    both, found = fit_restart.fit_main(fitted, cached)
    assert both.restart_main_cpu_s == pytest.approx(m, rel=0.02, abs=1e-3)
    if found:
        assert found[0].name == "restart_main_cpu_s"


@settings(max_examples=30, deadline=None)
@given(workers=st.integers(1, 4), cpus=st.integers(1, 3), main_s=st.floats(0.001, 0.5),
       prep_s=st.floats(0.001, 0.02))
def test_the_main_process_share_is_paid_once_an_epoch_whatever_the_workers(
        workers, cpus, main_s, prep_s):
    """A step off the CPU that the workers keep ahead of (a batch's prep under a third of a
    step), and a core each: the main process's share of the restart lengthens each later
    epoch's first iteration by exactly itself, and nothing else moves, whatever the number
    of workers (the workers are ahead again before the next step ends)."""
    base = Pipeline(ranks=1, workers=workers, batch_size=BATCH, cpus=cpus + workers,
                    step_s=0.2, main_cpu_s=0.0, prep_cpu_s=prep_s, read_bps=None)
    misses = [np.zeros(BATCHES * BATCH) for _ in range(EPOCHS)]
    plain = simulate(base, misses, BATCHES)
    paid = simulate(replace(base, restart_main_cpu_s=main_s), misses, BATCHES)
    for i, t in enumerate(plain.iter_s):
        later_start = i > 0 and plain.epoch[i] != plain.epoch[i - 1]
        assert paid.iter_s[i] == pytest.approx(t + main_s * later_start, rel=1e-9, abs=1e-9)
