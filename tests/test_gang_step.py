"""A step on the CPU in the pipeline simulation: its threads meet at barriers.

The independent reason: a step of T threads measured alone at C cores takes t; beside k
processes that never stop (workers with far more prep than the step), each core holds
one of its threads and ceil(k / C) of the others, so a thread runs 1 / (1 + ceil(k / C))
of the time and the step, at its slowest thread's pace, takes t x (1 + ceil(k / C)).
Alone (no busy worker) it takes t. These hold for any t, C and k.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import timed_by
from hypothesis import given, settings
from hypothesis import strategies as st

from dsanalyze import store
from dsanalyze.config import Mode
from dsanalyze.report.assumptions import assumption_text
from dsanalyze.settings import SETTINGS
from dsanalyze.whatif import api as whatif
from dsanalyze.whatif import fit_loop, fit_prep
from dsanalyze.whatif.assumptions import Assume, Assumption
from dsanalyze.whatif.intervals import rel_sigma_for, untested
from dsanalyze.whatif.laws import cpu_stretch, run_config, stretch_from
from dsanalyze.whatif.model import HeldOut, Z
from dsanalyze.whatif.pipeline import Pipeline, simulate
from dsanalyze.whatif.rates import mean_rates

BATCHES, BATCH = 80, 2  # many batches a worker: none runs out of work mid-run


def step_times(cpus: int, workers: int, step_s: float, prep_s: float) -> list[float]:
    """Each steady iteration's time beyond its wait (the step: the main process has no CPU
    work of its own here)."""
    p = Pipeline(ranks=1, workers=workers, batch_size=BATCH, cpus=cpus, step_s=0.0,
                 main_cpu_s=0.0, prep_cpu_s=prep_s, read_bps=None, gang_step_s=step_s,
                 gang_threads=cpus)
    tl = simulate(p, [np.zeros(BATCHES * BATCH)], BATCHES)
    return [it - w for it, w in zip(tl.iter_s[2:40], tl.wait_s[2:40], strict=True)]


@settings(max_examples=30, deadline=None)
@given(cpus=st.sampled_from([1, 2, 4, 8]), workers=st.integers(1, 9),
       step_s=st.floats(0.01, 0.2))
def test_beside_busy_workers_the_step_runs_at_its_slowest_thread_s_pace(cpus, workers,
                                                                       step_s):
    # each sample's prep a hundred steps: every worker is busy through every step
    times = step_times(cpus, workers, step_s, prep_s=100 * step_s)
    expected = step_s * (1 + math.ceil(workers / cpus))
    assert statistics.median(times) == pytest.approx(expected, rel=1e-3)


@settings(max_examples=20, deadline=None)
@given(cpus=st.sampled_from([1, 2, 4]), step_s=st.floats(0.01, 0.2))
def test_alone_the_step_takes_its_measured_time(cpus, step_s):
    # a sample's prep a thousandth of the step: the worker is busy for a batch's 2 ms of
    # the step's 1000 (at most 1% slower), then idle
    times = step_times(cpus, 1, step_s, prep_s=step_s / 1000)
    assert statistics.median(times) == pytest.approx(step_s, rel=0.01)


# ---- the main process's CPU, fitted beside the gang step ---------------------------------

SCRIPT_CPU = Path(__file__).parent / "data" / "script_cpu"  # examples-style, trained on the CPU


@pytest.fixture(scope="module")
def cpu_script():
    """The CPU-trained script's runs (3 workers, batch 12, 1 and 2 CPUs) and the model fitted
    on them, with a step of 80 ms at 1 CPU and 45 ms at 2 and a prep of 4 ms a sample (the
    fixture's own were measured under heavy load: an 8 s step at 2 CPUs), and no stretch
    (one fitted on those steps would be meaningless)."""
    runs = store.load_runs(SCRIPT_CPU)
    model = replace(whatif.fit(runs), step_s_by_cpus=((1, 0.080), (2, 0.045)),
                    prep_cpu_s=0.004, prep_alone_cpu_s=None, contention=0.0,
                    cpu_stretch_by_cpus=())
    return runs, model


@settings(max_examples=8, deadline=None)
@given(main_ms=st.floats(1.0, 30.0))
def test_the_main_cpu_is_fitted_on_the_simulated_loop_not_twice_the_slowdown(cpu_script,
                                                                            main_ms):
    """Cached runs whose loops are what the simulation gives with a main-process CPU of M
    (the step beside the busy workers by the gang law) give back M on each run: the loop's
    gang slowdown is the simulation's, not the main process's own work, which the loop less
    the step measured alone would take it for (at 2 CPUs, beyond M by 5% of the loop)."""
    runs, model = cpu_script
    main_s = main_ms / 1000
    cached = [timed_by(replace(model, main_cpu_s=main_s), r) for r in runs
              if r.mode is Mode.CACHED]
    fitted, params = fit_loop.fit_main(model, cached)
    assert fitted.main_cpu_s == pytest.approx(main_s, rel=0.01)
    assert (params[0].how.low_s, params[0].how.high_s) == pytest.approx((main_s, main_s),
                                                                         rel=0.01)
    alone = {c: s for c, s in model.step_s_by_cpus}
    at_two = next(r for r in cached if HeldOut.of(r).cpus == 2)
    loop = fit_loop._loop_s(at_two)
    assert loop - alone[2] > main_s + 0.05 * loop


def test_the_fit_s_main_cpu_remakes_the_measured_loops() -> None:
    """On the script's own cached runs, fitted as they are: the simulated loop of some run
    is the measured one (within 2%) with the fitted main CPU, or none needs any (the step
    beside the workers already takes the loop of at least half of them)."""
    runs = store.load_runs(SCRIPT_CPU)
    model = whatif.fit(runs)
    loops = [(fit_loop._loop_s(r), fit_loop._simulated_loop_s(model, r))
             for r in runs if r.mode is Mode.CACHED]
    assert model.step_on_cpu and model.prep_cpu_s is not None
    if model.main_cpu_s == 0:
        assert sum(sim >= measured for measured, sim in loops) * 2 >= len(loops)
    else:
        assert any(sim == pytest.approx(measured, rel=0.02) for measured, sim in loops)


# ---- the prep where a one-thread step takes turns with the workers -----------------------

@settings(max_examples=6, deadline=None)
@given(ratio=st.floats(0.3, 4.0))
def test_a_one_thread_step_s_run_gives_its_own_prep_whatever_the_gang_s(cpu_script, ratio):
    """At 1 CPU the step (one thread) takes turns with the workers: each CPU cost of an
    iteration adds to it. Beside a gang (2 CPUs) every CPU cost is slowed, so the prep its
    runs show need not be the one-thread runs'. Cached runs timed by the simulation with a
    prep of 4 ms a sample at 1 CPU and `ratio` times that at 2 CPUs give the same prep where
    the step takes turns as when both had 4 ms, and near 4 ms (within 10%: a timed run's
    rate and the simulation's predicted mean differ by about 1%, and the prep is a third of
    a 1-CPU iteration); the fit remakes the 1-CPU run's rate (within 1%) whatever the 2-CPU
    runs say, and the 2-CPU prediction keeps c_prep's law."""
    from dsanalyze.analysis import runrate
    from dsanalyze.whatif.rates import predict_run
    runs, model = cpu_script
    cached = [r for r in runs if r.mode is Mode.CACHED]

    def timed_at(r: float) -> list:
        return [timed_by(model if HeldOut.of(x).cpus == 1 else
                         replace(model, prep_cpu_s=0.004 * r), x) for x in cached]
    timed = timed_at(ratio)
    fitted, params = fit_prep.fit_cpu(model, timed)
    same, _ = fit_prep.fit_cpu(model, timed_at(1.0))
    assert fitted.prep_alone_cpu_s == same.prep_alone_cpu_s
    assert fitted.prep_alone_cpu_s == pytest.approx(0.004, rel=0.10)
    alone = next(p for p in params if p.name == "prep_alone_cpu_s_per_sample")
    assert alone.runs == tuple(r.run_id for r in timed if HeldOut.of(r).cpus == 1)
    one = next(r for r in timed if HeldOut.of(r).cpus == 1)
    assert predict_run(fitted, HeldOut.of(one)).rate_sps == pytest.approx(
        runrate.run_rate(one).rate_sps, rel=0.01)
    two = next(r for r in timed if HeldOut.of(r).cpus == 2)
    without = replace(fitted, prep_alone_cpu_s=None)
    assert predict_run(fitted, HeldOut.of(two)).rate_sps == \
        predict_run(without, HeldOut.of(two)).rate_sps


def _faster(run, k: float):
    """The run with every iteration (and its wait) `k` times shorter."""
    r0 = run.ranks[0]
    return replace(run, ranks=[replace(r0, iter_s=[x / k for x in r0.iter_s],
                                       wait_s=[x / k for x in r0.wait_s])])


@settings(max_examples=6, deadline=None)
@given(faster=st.floats(1.02, 1.3))
def test_a_one_thread_run_faster_than_its_step_allows_holds_the_prep_at_its_floor(
        cpu_script, faster):
    """A cached run whose one-thread step takes turns with the workers is at best as fast as
    the step and the main process alone: every CPU cost of an iteration adds to them. A 1-CPU
    cached run timed with no prep (the floor's), then made 2-30% faster still (the one
    synthetic run that gave the step was slow), says the prep there is at most nil: the
    prep where the step takes turns is held at its floor, said so, and the fit predicts that
    run at the rate the step and the main process allow (within 1%: the nearest the law
    comes), never at c_prep's law from the 2-CPU runs, whose 4 ms a sample is slower."""
    from dsanalyze.analysis import runrate
    from dsanalyze.report.params import how_text
    from dsanalyze.whatif import bounds
    from dsanalyze.whatif.rates import predict_run
    runs, model = cpu_script
    floor = bounds.PREP_CPU_S.low
    cached = [r for r in runs if r.mode is Mode.CACHED]
    timed = [_faster(timed_by(replace(model, prep_cpu_s=floor), r), faster)
             if HeldOut.of(r).cpus == 1 else timed_by(model, r) for r in cached]
    fitted, (alone, *_) = fit_prep.fit_alone(model, timed)  # c_prep: the fixture's 4 ms
    assert fitted.prep_alone_cpu_s == floor and alone.name == "prep_alone_cpu_s_per_sample"
    assert alone.value == floor and alone.how.floored and alone.how.dropped is None
    assert "held at its floor" in how_text(alone.how)
    run = next(r for r in timed if HeldOut.of(r).cpus == 1)
    one = HeldOut.of(run)
    nil_prep = predict_run(replace(model, prep_cpu_s=floor, prep_alone_cpu_s=None), one)
    got = predict_run(fitted, one).rate_sps
    assert got == pytest.approx(nil_prep.rate_sps, rel=0.01)
    assert got <= runrate.run_rate(run).rate_sps * 1.01
    assert predict_run(replace(fitted, prep_alone_cpu_s=None), one).rate_sps < 0.9 * got


# ---- the stretch of a gang step's CPU work, per CPU count and workers ---------------------

def _stretched_as(model, run, stretch: float):
    """The cached run timed with the CPU work stretched `stretch` times at its CPU count."""
    cpus = run_config(model, HeldOut.of(run)).cpus
    return timed_by(replace(model, cpu_stretch_by_cpus=((cpus, model.workers, stretch),)), run)


@settings(max_examples=6, deadline=None)
@given(stretch=st.floats(0.7, 2.5))
def test_the_stretch_of_a_gang_is_fitted_back_and_a_single_thread_has_none(cpu_script,
                                                                           stretch):
    """Cached runs timed by the simulation with the CPU work at 2 CPUs stretched S times give
    back S there (the fixed point, within 3%); the 1-CPU run, whose one-thread step takes
    turns with the workers as the sharing law has it, gets no stretch. The stretch leaves a
    synthetic run (no loader beside the step) as it was, and a stretch over 1 slows the
    prediction at 2 CPUs, one under 1 speeds it."""
    runs, model = cpu_script
    # no work outside the job: the prediction is then the one simulation the runs are timed by
    model = replace(model, others_cpu_s_per_sample=0.0, others_disk_cpu_s_per_sample=0.0)
    cached = [_stretched_as(model, r, stretch) for r in runs if r.mode is Mode.CACHED]
    fitted, params = fit_loop.fit_stretch(model, cached)
    ((cpus, workers, found),) = fitted.cpu_stretch_by_cpus
    assert (cpus, workers) == (2, model.workers) and found == pytest.approx(stretch, rel=0.03)
    assert params[0].how.cpus == 2 and params[0].how.runs == len(
        [r for r in cached if HeldOut.of(r).cpus == 2])
    at_two = whatif.Config.of(2)
    plain, slowed = (whatif.predict(m, at_two).rate_sps for m in (model, fitted))
    if abs(found - 1) > 0.05:  # more CPU work, a slower job; less, a faster one
        assert (slowed < plain) == (found > 1)
    synthetic = next(r for r in runs if r.mode is Mode.SYNTHETIC and HeldOut.of(r).cpus == 2)
    from dsanalyze.whatif.rates import predict_run
    assert predict_run(fitted, HeldOut.of(synthetic)).rate_sps == \
        predict_run(model, HeldOut.of(synthetic)).rate_sps


# ---- a stretch carried to a worker count no cached run had ---------------------------------

@settings(max_examples=30, deadline=None)
@given(fitted=st.sets(st.integers(1, 8), min_size=1, max_size=3), workers=st.integers(0, 10))
def test_a_worker_count_without_its_own_stretch_takes_the_nearest_and_says_so(cpu_script,
                                                                             fitted, workers):
    """At a CPU count with stretches fitted for some worker counts, a configuration with one
    of them takes its own, without an assumption; any other takes the nearest fitted (the
    fewer on a tie: the nearest by the distance's own definition, checked by brute force),
    names it in a SHARING assumption, and its interval is wider than the same prediction's
    with that stretch fitted for its own worker count. A CPU count with no stretch (1 CPU:
    a one-thread step) carries none."""
    _, model = cpu_script
    stretches = tuple((2, k, 1.0 + k / 10) for k in sorted(fitted))
    model = replace(model, cpu_stretch_by_cpus=stretches)
    cfg = whatif.Config.of(2, workers=workers)
    carried = stretch_from(model, cfg)
    if workers in fitted:
        assert carried is None
        assert cpu_stretch(model, cfg, Mode.CACHED) == 1.0 + workers / 10
    else:
        nearest = min(abs(k - workers) for k in fitted)
        assert carried == min(k for k in fitted if abs(k - workers) == nearest)
        assert cpu_stretch(model, cfg, Mode.CACHED) == 1.0 + carried / 10
        sharing = [a for a in untested(model, cfg) if a.kind is Assume.SHARING]
        assert sharing == [Assumption(Assume.SHARING, cpus=2, workers=workers,
                                      measured_workers=carried)]
        assert f"the cached run with {carried}" in assumption_text(sharing[0])
        own = replace(model, cpu_stretch_by_cpus=((2, workers, 1.0 + carried / 10),))
        assert rel_sigma_for(model, cfg) > rel_sigma_for(own, cfg)
    assert stretch_from(model, whatif.Config.of(1, workers=workers)) is None


@settings(max_examples=12, deadline=None)
@given(fitted=st.integers(1, 4), workers=st.integers(0, 8))
def test_a_carried_sharing_widens_the_interval_by_the_gain_it_predicts(cpu_script, fitted,
                                                                       workers):
    """A cached run cannot tell whether its workers or the step's sharing of the cores held
    its rate: a worker count that carries another's sharing is predicted as the model has it
    (more workers, more prep), and its interval's sigma holds at least the root mean square
    distance to the other end of the range, the carried count's own rate (|ln(ratio)| over
    sqrt(3), a uniform range's). The carried count itself, and 1 CPU, carry nothing."""
    _, model = cpu_script
    model = replace(model, cpu_stretch_by_cpus=((2, fitted, 1.2),))
    asked = whatif.predict(model, whatif.Config.of(2, workers=workers))
    own = whatif.predict(model, whatif.Config.of(2, workers=fitted))
    sigma = math.log(asked.rate_sps_high / asked.rate_sps) / Z
    gain = abs(math.log(asked.rate_sps / own.rate_sps))
    assert sigma >= gain / math.sqrt(3) - 1e-9
    assert math.log(own.rate_sps_high / own.rate_sps) / Z < sigma or workers == fitted \
        or gain < 1e-6
    one = whatif.predict(model, whatif.Config.of(1, workers=workers))
    assert whatif.predict(replace(model, cpu_stretch_by_cpus=()),
                          whatif.Config.of(1, workers=workers)).rate_sps_high == one.rate_sps_high


@settings(max_examples=40, deadline=None)
@given(fitted=st.integers(1, 3), workers=st.integers(1, 6), busy=st.floats(1.0, 2.0),
       prep_ms=st.sampled_from([4.0, 10.0, 20.0]))
def test_more_workers_than_a_count_that_kept_its_cores_full_gain_what_the_cores_allow(
        cpu_script, fitted, workers, busy, prep_ms):
    """CPU conservation: a cached run whose job kept its 2 cores full (at least
    `saturated_share` of them busy) did all the CPU work those cores allow; more workers
    share the same cores, so the cached rate they are predicted gains at most 2 / busy over
    that count's, and is never held below it (each within the two solver steps' 2%). Cores
    left idle (fewer busy), fewer workers, or the count itself: the sharing law's prediction,
    unchanged. A prep of 10-20 ms a sample against the 45 ms step of 12 samples: one worker
    holds the rate back, and the sharing law alone has more of them gain 12-38%."""
    _, model = cpu_script
    model = replace(model, cpu_stretch_by_cpus=((2, fitted, 1.2),), prep_cpu_s=prep_ms / 1e3,
                    cores_busy_by_cpus=((2, fitted, busy),))
    free = replace(model, cores_busy_by_cpus=())

    def cached(m, k):
        return mean_rates(m, whatif.Config.of(2, workers=k), m.layout, Mode.CACHED,
                          None).rate_sps
    own, asked = cached(model, fitted), cached(model, workers)
    if workers > fitted and busy >= SETTINGS.saturated_share * 2:
        law = cached(free, workers)  # the sharing law's own (it may already lie below)
        assert min(law, own * 0.98) <= asked <= own * 2 / busy * 1.02
        assert asked <= law * (1 + 1e-9)
    else:
        assert asked == cached(free, workers)
