"""The work between epochs (`whatif/epochend.py`): a script's validation pass or checkpoint,
once an epoch after its last step.

The independent reasons:
- in the pipeline, every batch of an epoch has been taken when its work between epochs
  starts, and the next epoch's are handed out only after it: the workers have nothing to
  do meanwhile. So each epoch's last iteration is longer by exactly that work, and every
  other iteration is as it was; where the job's other reads of its files are that work (a
  validation pass over them), by at least their bytes over the storage's bandwidth, and
  the samples' own reads are those of a job without re-reads;
- read off a synthetic run whose iterations are known: its step, and what each epoch's
  last iteration took beyond it;
- tests/data/script_lightning: the Lightning script of bench/scripts_accuracy.py (a
  tuning grid's sweep, /tmp/dsa-scripts-bench2), whose steps take about 1 ms and whose
  validation pass over the training files 0.4-0.6 s an epoch. Fitted on its runs with 1
  worker, unthrottled, the 2-worker runs at 2 CPUs (w2/) lie inside their intervals; the
  model that spread the validation over the steps put them 12-15% low, outside.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsanalyze import store
from dsanalyze.config import Job, Mode, Resources, RunSpec
from dsanalyze.records import RankRecord, RunResult
from dsanalyze.whatif import api as whatif
from dsanalyze.whatif.epochend import EpochEnd
from dsanalyze.whatif.pipeline import Pipeline, simulate
from dsanalyze.whatif.validation import check

BATCHES, BATCH, EPOCHS = 10, 3, 3
LIGHTNING = Path(__file__).parent / "data" / "script_lightning"


def _last_of_epoch(epoch: tuple[int, ...], i: int) -> bool:
    return i + 1 == len(epoch) or epoch[i + 1] != epoch[i]


@settings(max_examples=40, deadline=None)
@given(workers=st.integers(0, 4), cpus=st.integers(1, 4), end_s=st.floats(0.001, 2.0),
       prep_s=st.floats(0.001, 0.05), step_s=st.floats(0.0, 0.1), on_cpu=st.booleans(),
       restart_s=st.sampled_from([0.0, 0.05]), read_bps=st.sampled_from([None, 2e6, 5e7]))
def test_each_epoch_ends_later_by_its_work_and_nothing_else_moves(
        workers, cpus, end_s, prep_s, step_s, on_cpu, restart_s, read_bps):
    base = Pipeline(ranks=1, workers=workers, batch_size=BATCH, cpus=cpus,
                    step_s=0.0 if on_cpu else step_s, gang_step_s=step_s if on_cpu else 0.0,
                    gang_threads=cpus, main_cpu_s=0.002, prep_cpu_s=prep_s, read_bps=read_bps,
                    restart_cpu_s=restart_s if workers else 0.0)
    misses = [np.full(BATCHES * BATCH, 20_000.0) for _ in range(EPOCHS)]
    plain = simulate(base, misses, BATCHES)
    ended = simulate(replace(base, epoch_end_s=end_s), misses, BATCHES)
    assert ended.wait_s == pytest.approx(plain.wait_s, rel=1e-9, abs=1e-9)
    for i, t in enumerate(plain.iter_s):
        assert ended.iter_s[i] == pytest.approx(t + end_s * _last_of_epoch(plain.epoch, i),
                                                rel=1e-9, abs=1e-9)


@settings(max_examples=30, deadline=None)
@given(end_s=st.floats(0.001, 2.0), share=st.floats(0.1, 2.0), read_bps=st.floats(1e5, 1e8),
       workers=st.integers(1, 3))
def test_rereads_at_the_epochs_end_take_it_at_least_their_bytes_over_the_bandwidth(
        end_s, share, read_bps, workers):
    """A validation pass over the training files: `share` of an epoch's bytes read again,
    at its end; the training reads are a job's without re-reads."""
    sample_bytes = 20_000.0
    epoch_bytes = BATCHES * BATCH * sample_bytes
    base = Pipeline(ranks=1, workers=workers, batch_size=BATCH, cpus=2, step_s=0.01,
                    main_cpu_s=0.001, prep_cpu_s=0.004, read_bps=read_bps)
    misses = [np.full(BATCHES * BATCH, sample_bytes) for _ in range(EPOCHS)]
    plain = simulate(base, misses, BATCHES, misses)
    ended = simulate(replace(base, epoch_end_s=end_s, reread_share=share,
                             epoch_read_bytes=epoch_bytes), misses, BATCHES, misses)
    work = max(end_s, share * epoch_bytes / read_bps)
    for i, t in enumerate(plain.iter_s):
        assert ended.iter_s[i] == pytest.approx(t + work * _last_of_epoch(plain.epoch, i),
                                                rel=1e-9, abs=1e-9)


def _synthetic(iter_s: list[float], batches: int) -> RunResult:
    n = len(iter_s)
    rank = RankRecord(0, (0.0,) * n, tuple(iter_s), tuple(i // batches for i in range(n)),
                      (4,) * n, warmup=2, extra={"batches_per_epoch": batches})
    return RunResult(RunSpec(Job(data_dir="/d", batch_size=4), Mode.SYNTHETIC, Resources(1), 1),
                     "ok", ranks=(rank,))


def test_a_synthetic_run_gives_its_step_and_its_work_between_epochs():
    """Steps of 10 ms (a few of 11 and 9), and 0.5 s more at each epoch's end (the last one
    at 0.7 s: the run's teardown): 0.5 s an epoch, a 10 ms step without it."""
    rng = np.random.default_rng(5)
    steps = list(0.010 + rng.choice([-0.001, 0.0, 0.001], 60))
    for end, extra in ((19, 0.5), (39, 0.5), (59, 0.7)):
        steps[end] = 0.010 + extra
    found = EpochEnd.of(_synthetic(steps, 20))
    assert found.epoch_end_s == pytest.approx(0.5, abs=0.0015)
    assert found.ends == 3
    # an epoch's time (each of its 20 places once, at the mean of the epochs that hold it:
    # the warm-up took places 0 and 1 of the first) less the median work at its end
    epoch_s = sum(statistics.fmean(steps[e * 20 + p] for e in range(3) if e * 20 + p >= 2)
                  for p in range(20))
    assert found.step_s == pytest.approx((epoch_s - found.epoch_end_s) / 20)
    flat = EpochEnd.of(_synthetic([0.010] * 60, 20))
    assert (flat.epoch_end_s, flat.step_s) == (0.0, pytest.approx(0.010))
    # 1 ms steps and validation passes of 2.0-2.4 s (Lightning at 960 images): the median
    # pass times three is more than the window's whole excess; the step is still the 1 ms
    # of its fastest iterations, not nil
    fast = [0.001] * 60
    for end, extra in ((19, 2.0), (39, 2.4), (59, 2.4)):
        fast[end] = 0.001 + extra
    found = EpochEnd.of(_synthetic(fast, 20))
    assert found.epoch_end_s == pytest.approx(2.4)
    assert found.step_s == pytest.approx(0.001)


@pytest.fixture(scope="module")
def lightning() -> tuple[list[RunResult], list[RunResult]]:
    return store.load_runs(LIGHTNING), store.load_runs(LIGHTNING / "w2")


def test_the_validation_pass_of_a_lightning_script_is_its_work_between_epochs(lightning):
    runs, _ = lightning
    model = whatif.fit(runs)
    ends = dict(model.epoch_end_s_by_cpus)
    assert set(ends) == {1, 2}
    assert all(0.3 < e < 0.8 for e in ends.values())  # the iterations' records: 0.4-0.6 s
    assert all(s < 0.01 for _, s in model.step_s_by_cpus)  # steps of about 1 ms


def test_fitted_at_one_worker_two_workers_lie_inside_their_intervals(lightning):
    runs, held = lightning
    fit_runs = [r for r in runs if r.spec.resources.storage_read_bps is None]
    model = whatif.fit(fit_runs)
    assert model.workers == 1
    for run in held:
        c = check(model, (run,), "extrapolation")
        assert c.low_sps <= c.measured_sps <= c.high_sps, (run.run_id, c)
        assert abs(c.error_pct) < 5, (run.run_id, c.error_pct)
