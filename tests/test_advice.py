"""One decision, one answer: `whatif/decision.py`, called by the end-of-run advice
(`whatif/advice.py`), `dsanalyze whatif --recommend` and the report, worded by
`report/advice.py`."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import copy_of, harness
from hypothesis import given, settings
from hypothesis import strategies as st

from dsanalyze import app, cli, store
from dsanalyze.analysis.jobrun import job_as_run
from dsanalyze.analysis.summary import Summary, summarize
from dsanalyze.analysis.verdict import Bound, Verdict
from dsanalyze.config import Mode
from dsanalyze.dataset import scan_dataset
from dsanalyze.records import RunResult
from dsanalyze.report.advice import (
    advice_text,
    change_text,
    failure_text,
    option_label,
    why_not_validated,
)
from dsanalyze.report.verdicts import verdict_text
from dsanalyze.report.whatif_text import whatif_lines
from dsanalyze.whatif import api as whatif_api
from dsanalyze.whatif import calibrate, decision, fit_prep, fit_restart, recommend
from dsanalyze.whatif.advice import Advice, ModelFailure, advise, conclude, predictions, within
from dsanalyze.whatif.assumptions import Assume, Assumption, Law
from dsanalyze.whatif.decision import (
    Decision,
    DecisionKind,
    ErrorQuote,
    Facts,
    Option,
    Refusal,
    decide,
    failed,
    measured_epochs,
    measured_options,
    predicted_option,
)
from dsanalyze.whatif.documents import ValidationDoc
from dsanalyze.whatif.verification import verify_plan

DATA = Path(__file__).parent / "data"
FIXTURES = sorted(p.name for p in DATA.iterdir() if (p / "runs").is_dir())
# Fits of a large grid, tens of seconds each on 2 cores: `make test-extended`. Each decision
# kind they reach stays in `make test`: report_12configs keeps (KEEP, with validation runs),
# as whatif_compute and script_cpu do.
SLOW_FIXTURES = {"whatif_caches", "report_sweep", "report_2ranks", "whatif_fetch",
                 "report_12configs"}
LONG_FIXTURES = {"script_lightning", "script_cpu_w1", "script_csv",  # 25-40 s: make test-long
                 "cuda_examples"}
MIB = 1 << 20

def typed(summary: dict) -> Summary:
    """`summary.json` read back: what the decision takes (the test reads the document)."""
    return Summary.from_dict(summary)


BASE = Option(cpus=1, cpus_used=1, cache_spec="none", cache_bytes=None,
              storage_read_bps=8 * MIB, workers=2, rate_sps=80.0, span_s=6.0, stall_pct=70.0,
              measured=True, bound=Bound.FETCH.value, nproc=1)
FASTER = Option(cpus=4, cpus_used=4, cache_spec="none", cache_bytes=None, storage_read_bps=None,
                workers=2, rate_sps=370.0, span_s=1.5, stall_pct=3.2, rate_sps_low=300.0,
                rate_sps_high=450.0, untested=(Assumption(Assume.BEYOND_CPUS, cpus=4, measured_cpus=1,
                                                     law=Law.CONTENTION),), nproc=1)
EXTRAPOLATION = ErrorQuote("extrapolation", 3, 34.0, 41.0, 1 / 3, 0.9)


def test_a_change_beyond_the_measured_range_quotes_the_extrapolation_error():
    d = Decision(DecisionKind.CHANGE, 2, 5.0, FASTER, BASE, ("CPUs",), EXTRAPOLATION, workers=2)
    text = advice_text(Advice(d, fitted_runs=6))
    assert text.startswith("Advice: give the job 4 CPUs (1 measured), storage at this "
                           "machine's disk, unthrottled (8M/s measured): predicted 370.0 "
                           "samples/s steady (interval 300.0-450.0), 2 epochs in 1.50 s")
    assert "against 6.00 s measured at cpus=1 cache=unlimited bw=8M/s (70% stalled, likely " \
           "fetch-bound)" in text
    assert "Untested: 4 CPUs: beyond the 1 measured; prep by the contention law." in text
    assert text.endswith("beyond the measured range (CPUs), its extrapolation error on 3 "
                         "held-out configuration(s): median 34.0%, maximum 41.0%, 33% inside "
                         "their 90% intervals.")
    assert "leave-one-out" not in text


@pytest.mark.parametrize("held_out,coverage,rejected", [
    (2, 0.0, True),  # both outside 90% intervals: 1% of the time
    (2, 0.5, False),  # one of two: 19%
    (3, 1 / 3, True),  # two of three: 2.8%
    (4, 0.5, False),  # two of four: 5.2%
    (4, 0.25, True),  # three of four: 0.4%
    (8, 5 / 8, True),  # three of eight: 3.8%
    (8, 0.75, False),  # two of eight: 19%
    (5, 1.0, False),
    (0, None, False),  # no split made: nothing rejects the model
])
def test_a_validation_split_fails_the_model_by_a_binomial_test(held_out, coverage, rejected):
    """The tail probability of that many misses of 90% intervals, against 5%: the figures in
    the comments are the binomial tails, worked by hand."""
    quote = ErrorQuote("leave-one-out", held_out, 10.0 if held_out else None,
                       20.0 if held_out else None, coverage, 0.9)
    assert failed(quote) is rejected


def test_a_pick_the_model_s_own_check_rejects_is_refused_with_the_reason():
    """The prep-bound fixture's pick (more CPUs, predicted faster than every measured
    configuration) stands while its extrapolation split is not made; when that split's two
    held-out runs both lie outside their intervals, the fastest measured configuration is
    kept and the advice says which pick it did not take and why."""
    runs = store.load_runs(DATA / "whatif_prep")
    a = advise(runs)
    assert a.decision.kind is DecisionKind.CHANGE and a.decision.beyond
    summary = summarize(runs)
    facts = recommend.facts(a.model, runs, summary)
    doc = ValidationDoc.from_dict(
        {"splits": [{"name": "extrapolation", "held_out": 2, "median_abs_error_pct": 35.0,
                     "max_abs_error_pct": 40.0, "coverage": 0.0, "nominal": 0.9}]})
    d = decide(summary, [a.decision.prediction], facts, doc)
    assert d.kind is DecisionKind.REFUSED and d.choice == d.best_measured
    assert d.choice.measured and d.error.coverage == 0.0
    text = advice_text(Advice(d, fitted_runs=len(runs)))
    assert text.startswith(f"Advice: keep {option_label(d.best_measured)} (")
    assert "is not advised: the model failed its own check, beyond the measured range" in text
    assert "extrapolation error on 2 held-out configuration(s): median 35.0%" in text
    assert decide(summary, [a.decision.prediction], facts, None).kind is DecisionKind.CHANGE


@pytest.fixture(scope="module")
def prep_pick():
    """The prep-bound fixture's table, facts and its pick (a prediction faster than every
    measured configuration), fitted once."""
    runs = store.load_runs(DATA / "whatif_prep")
    a = advise(runs)
    summary = summarize(runs)
    return summary, recommend.facts(a.model, runs, summary), a.decision


@settings(max_examples=40, deadline=None)
@given(gain=st.floats(0.5, 3.0), width=st.floats(1.0, 2.5))
def test_a_pick_is_advised_only_when_faster_at_its_interval_s_slow_end(prep_pick, gain, width):
    """Rule 2 for every point and interval: a prediction whose job is `gain` x shorter than
    the fastest measured one, with an interval reaching `width` x below its rate, is the
    change exactly when its job at that slow end is still shorter by the tie tolerance;
    otherwise the measured configuration is kept and the prediction named as within noise,
    never advised."""
    summary, facts, d0 = prep_pick
    best = d0.best_measured
    p = d0.prediction
    epoch = best.span_s / gain / facts.epochs  # steady epochs alone: no cold first epoch
    candidate = replace(p, epoch_s=epoch, epoch1_s=None, rate_sps_low=p.rate_sps / width,
                        rate_sps_high=p.rate_sps * width)
    d = decide(summary, [candidate], replace(facts, cold=False))
    span, slow = epoch * facts.epochs, epoch * facts.epochs * width
    if slow < best.span_s * (1 - facts.tolerance):
        assert d.kind is DecisionKind.CHANGE and d.unsure is None
        assert d.choice.span_s == pytest.approx(span)
    else:
        assert d.kind is DecisionKind.KEEP and d.choice == best
        ahead = span < best.span_s * (1 - facts.tolerance)
        assert (d.unsure is not None) is ahead
        if ahead:
            assert d.unsure.span_s == pytest.approx(span)
            text = advice_text(Advice(d, fitted_runs=3))
            assert "predicted faster beyond its interval than its measured" in text
            assert f"but {slow:.2f} s at its interval's slow end: within the model's noise" \
                in text


def test_a_kept_configuration_s_reason_is_its_own_or_names_the_prediction_it_is_of(prep_pick):
    """The reason a kept configuration stays stalled is about a configuration the line names.
    A user's CPU-trained script (cpus=1 bw=4M/s kept, the table: likely prep-bound, fetch
    stall 0) was told "(the fetch stall dominates: measure more cache or storage
    bandwidth)": the reason was that of the least stalled prediction, unnamed, which did not
    stall at all (0% stall, its fetch a hair over its prep of 0). A prediction within the
    budget that is not faster leaves no reason; one that still stalls over it gives its
    reason with its name and its stall."""
    summary, facts, d0 = prep_pick
    facts = replace(facts, cold=False)
    best, p = d0.best_measured, d0.prediction
    assert best.stall_pct > facts.max_stall_pct and best.bound == Bound.PREP.value
    epoch = best.span_s / facts.epochs
    # 10% faster by its point, its interval reaching 1.5x below: not surely faster; no stall
    calm = replace(p, epoch_s=0.9 * epoch, epoch1_s=None, compute_s=0.9 * epoch,
                   prep_stall_s=0.0, fetch_stall_s=1e-9, rate_sps_low=p.rate_sps / 1.5,
                   rate_sps_high=p.rate_sps * 1.5)
    d = decide(summary, [calm], facts)
    assert d.kind is DecisionKind.KEEP and d.choice == best and d.unsure is not None
    assert d.reason is None and d.stalled is None
    text = advice_text(Advice(d, fitted_runs=3))
    assert "dominates" not in text and "The fastest prediction" in text
    # 5% slower, 30% of it a fetch stall: it stays stalled, for its fetch
    stalled = replace(p, epoch_s=1.05 * epoch, epoch1_s=None, compute_s=0.7 * 1.05 * epoch,
                      prep_stall_s=0.05 * epoch, fetch_stall_s=0.25 * 1.05 * epoch)
    d = decide(summary, [stalled], facts)
    assert d.kind is DecisionKind.KEEP and d.reason is decision.StallReason.FETCH
    assert d.stalled is not None and d.stalled.stall_pct == pytest.approx(30.0)
    text = advice_text(Advice(d, fitted_runs=3))
    assert f"likely prep-bound) (the least stalled prediction, {change_text(d.stalled, best)}, " \
        "still stalls 30%; the fetch stall dominates: measure more cache or storage " \
        "bandwidth)." in text
    # the JSON the report reads says whose stall it is
    assert d.to_dict()["stalled"] == d.stalled.to_dict()


@pytest.mark.long  # a fit of a CPU-trained script's 10 runs: 11 s on 2 cores
def test_the_configuration_the_advice_names_is_a_row_of_its_grid():
    """tests/data/script_csv: a Kaggle-style script (tests/scripts/train_csv.py: a CSV
    manifest, a hand-written Dataset, a small CNN trained on the CPU, 2 persistent workers),
    profiled as a new user would (`--cpus 1,2 --storage-bw none,4M --epochs 2`, its data
    found by the discovery run). The advice kept cpus=1 bw=4M/s and named the fastest
    prediction, 1 worker at 2 CPUs, a worker count of the free knob that the grid (the
    measured count, 2x and 4x: 2, 4, 8) lacks: the grid printed above it had no such row.
    Every configuration the advice names is a row of `whatif.json` and of the printed grid.
    And its table's stalls are prep's alone (fetch 0: the page cache), so the line gives no
    fetch reason."""
    runs = store.load_runs(DATA / "script_csv")
    model = whatif_api.fit(runs)
    preds = predictions(model, runs)
    assert {p.config.workers for p in preds} == {2, 4, 8}
    a = conclude(model, preds, runs, None, None, 5.0, None, rows_of=whatif_api.grid_rows)
    d = a.decision
    assert d.kind is DecisionKind.KEEP and d.unsure is not None and d.unsure.workers == 1
    text = advice_text(a)
    assert "1 DataLoader worker per rank (2 measured)" in text and "dominates" not in text
    u = d.unsure_prediction.config
    assert any(r.workers == 1 and r.cpus == u.cpus and r.storage_read_bps is None
               for r in a.rows)
    printed = [line.split() for line in whatif_lines(preds, a)]
    assert any(cols[:6] == [str(u.cpus), "unlimited", "device", "1x", "1", "1"]
               and cols[6] == f"{d.unsure.rate_sps:.1f}" for cols in printed if len(cols) > 6)


def test_without_a_disk_run_predictions_are_weighed_on_steady_epochs_as_measured():
    """Cached runs alone measure no cold epoch: the table's spans are steady epochs, and a
    prediction is weighed the same way. Its cold start (the first epoch's reads and its first
    batches' wait on an empty prefetch queue) against a measurement without one counted
    against every change: on a loaded CI machine a 1-CPU prep-bound sweep was told to keep
    its CPU. A candidate whose steady epoch is 20% shorter than the fastest measured one
    and whose cold first epoch is 20% longer is the change here, and is not on a table that
    measured cold epochs."""
    runs = [r for r in store.load_runs(DATA / "whatif_prep") if r.mode is not Mode.DISK]
    a = advise(runs)
    summary = summarize(runs)
    facts = recommend.facts(a.model, runs, summary)
    assert not facts.cold and facts.epochs == 1 and not a.decision.cold
    best = a.decision.best_measured
    assert best is not None and best.measured
    p = a.decision.prediction
    # its interval's slow end 10% below its rate: faster beyond its noise too (rule 2)
    candidate = replace(p, epoch_s=0.8 * best.span_s, epoch1_s=1.2 * best.span_s,
                        compute_s=0.5 * best.span_s, rate_sps_low=0.9 * p.rate_sps)
    d = decide(summary, [candidate], facts)
    assert d.kind is DecisionKind.CHANGE and d.choice.span_s == pytest.approx(0.8 * best.span_s)
    assert d.choice.stall_pct == pytest.approx(100 * (0.8 - 0.5) / 0.8)
    line = advice_text(Advice(d, fitted_runs=len(runs)))
    assert " 1 epoch in " in line and "(cold)" not in line and "first epoch" not in line
    cold = decide(summary, [candidate], replace(facts, cold=True))
    assert cold.kind is DecisionKind.KEEP and cold.choice == best
    assert " 1 epoch (cold) in " in advice_text(Advice(cold, fitted_runs=len(runs)))


@pytest.mark.long
def test_a_cpu_trained_pick_at_unmeasured_cpus_and_workers_is_refused_naming_the_run(
        tmp_path, monkeypatch):
    """tests/data/script_cpu_w1: a pytorch/examples-style script trained on the CPU, its
    cached runs at 1 and 2 CPUs with 1 worker (bench/scripts_accuracy.py's sweep; its advice,
    2 workers at 2 CPUs, measured 22% under its prediction, outside its interval). With the
    workers' restarts at each epoch (`fit_restart`: its workers do not persist) that pick is
    never given: the fastest measured is kept, or the pick refused (the model with the
    main process's share of the restarts predicts it faster again), and so is it with the
    prep of the 1-CPU runs, where the step takes turns with the workers (`fit_prep.fit_alone`).
    Without either, and without the stretch of the CPU work the cached runs at 2 CPUs and 1
    worker measure (`fit_loop.fit_stretch`, in `calibrate.FITTERS`: since e96a176 counts each epoch's start once an
    epoch, those runs' rates are 8% lower and the stretch alone keeps the pick from being
    predicted faster), the model makes that pick, and no cached run had the pick's CPUs and
    workers: it is refused, the
    line says why and which run settles it, and `verify` would measure that pick. The same
    decision with a cached run at the pick's CPUs and workers gives it."""
    prefix = copy_of("script_cpu_w1", tmp_path)
    runs = store.load_runs(prefix)
    with_restarts = app.advise(prefix, runs).advice.decision
    assert with_restarts.kind is DecisionKind.KEEP or (
        with_restarts.kind is DecisionKind.REFUSED
        and with_restarts.refusal is Refusal.CPU_SHARING)
    monkeypatch.setattr(fit_restart, "fit", lambda model, results: (
        replace(model, restart_cpu_s=0.0, restart_main_cpu_s=0.0), []))
    monkeypatch.setattr(fit_prep, "fit_alone", lambda model, cached: (
        replace(model, prep_alone_cpu_s=None), []))
    # the fit's table holds its rules (`fitters.FITTERS`, as `calibrate` applies it): the
    # stretch's replaced there
    monkeypatch.setattr(calibrate, "FITTERS", tuple(
        replace(f, rule=lambda model, results: (model, [])) if f.name == "cpu_stretch" else f
        for f in calibrate.FITTERS))
    cached = {(r.spec.resources.cpus, job_as_run(r).workers) for r in runs
              if r.mode is Mode.CACHED}
    # that pick is faster by its point, not at its interval's slow end: kept, named as within
    # the model's noise (rule 2); with its point alone weighed, it is refused
    noisy = app.advise(prefix, runs).advice.decision
    assert noisy.kind is DecisionKind.KEEP and noisy.unsure is not None
    assert (noisy.unsure.cpus_used, noisy.unsure.workers) not in cached
    monkeypatch.setattr(decision, "surely_faster", lambda o, best, tolerance:
                        o.span_s < best.span_s * (1 - tolerance))
    a = app.advise(prefix, runs).advice
    d = a.decision
    assert d.kind is DecisionKind.REFUSED and d.refusal is Refusal.CPU_SHARING
    pick = predicted_option(d.prediction, d.epochs)
    assert (pick.cpus_used, pick.workers) not in cached and d.choice == d.best_measured
    line = advice_text(a)
    assert line.startswith("Advice: measure the what-if model's pick before changing; until "
                           f"then keep {option_label(d.best_measured)} (")
    assert (f"no cached run had {pick.cpus_used} CPU(s) with {pick.workers} DataLoader "
            "workers per rank") in line
    assert "One run settles it: `dsanalyze verify PREFIX`" in line
    plan = verify_plan(d, runs[0].spec.job, 8)
    assert plan.refused and plan.runnable and plan.choice == pick
    assert plan.sub_prefix == f"verify-workers{pick.workers}"
    assert str(pick.workers) in plan.job.script_args  # through the script's own -j
    summary = summarize(runs)
    facts = recommend.facts(a.model, runs, summary)
    assert facts.cpu_step_runs == tuple(sorted(cached))
    measured = replace(facts, cpu_step_runs=(*facts.cpu_step_runs,
                                             (pick.cpus_used, pick.workers)))
    given = decide(summary, [d.prediction], measured, a.validation)
    assert given.kind is DecisionKind.CHANGE and given.choice == pick


@pytest.mark.parametrize("name,cpus", [("whatif_prep", 2), ("script_cpu_w1", 1)])
def test_the_advice_confined_to_a_machine_never_asks_for_more_cpus(name, cpus):
    """What `--verify` checks in place of a pick beyond this machine: the same decision with
    every configuration, measured or predicted, at most `cpus` CPUs; the measured one it
    weighs against is the fastest of the table's at those CPUs."""
    runs = store.load_runs(DATA / name)
    a = advise(runs)
    assert a.decision.choice.cpus_used > cpus  # the advice itself asks for more
    d = within(a, runs, cpus)
    assert d.choice.cpus_used <= cpus and d.best_measured.cpus_used <= cpus
    assert d.prediction is None or d.prediction.config.cpus <= cpus
    at = [o for o in measured_options(summarize(runs), Facts(d.epochs)) if o.cpus_used <= cpus]
    assert d.best_measured.run_id == min(at, key=lambda o: o.span_s).run_id


def test_keep_and_no_model_in_words():
    keep = Decision(DecisionKind.KEEP, 1, 5.0, BASE, BASE)
    assert advice_text(Advice(keep, fitted_runs=3)) == (
        "Advice: keep cpus=1 cache=unlimited bw=8M/s: no configuration of the what-if grid is "
        "predicted faster than its measured 1 epoch (cold) in 6.00 s (70% stalled, likely "
        "fetch-bound). Its bw=8M/s is a throttle the sweep put on the storage: no run with "
        "faster storage measured faster, so faster storage bought nothing in these runs. From "
        "the what-if model fitted on the 3 runs of this sweep.")
    # unthrottled: the machine's own storage, nothing to say about it
    own = replace(BASE, storage_read_bps=None)
    text = advice_text(Advice(Decision(DecisionKind.KEEP, 1, 5.0, own, own), fitted_runs=3))
    assert text.startswith("Advice: keep cpus=1 cache=unlimited bw=unthrottled: ")
    assert "a throttle the sweep put" not in text
    none = Decision(DecisionKind.KEEP, 2, 5.0, BASE, BASE)
    refused = ModelFailure("ConfigError", "no completed runs: run harness.py first", True)
    assert advice_text(Advice(none, note=refused)) == \
        "Advice: none: the what-if model could not be fitted on these runs (no completed runs: " \
        "run harness.py first)."
    # a bug of the model: its type and first line, never the traceback's rest
    bug = ModelFailure.of(ValueError("math domain error\n  at line 3"))
    assert "(ValueError: math domain error)." in advice_text(Advice(none, note=bug))
    assert why_not_validated(refused) == "no completed runs"
    assert ModelFailure.from_dict(json.loads(json.dumps(bug.to_dict()))) == bug


def test_a_stall_within_noise_and_no_model_asks_for_the_runs_again_as_the_table_does():
    """A compute-bound sweep (2 samples a 300 ms step, 4 steps measured) whose runs lost steps
    to stolen time (a SCHED_FIFO burner, 80 ms every 1.5 s, on their CPU; CI at 6772a95 failed
    so): the table cannot tell the stall from 0 and says to repeat the runs, and no model fits
    (no prep-bound run). The advice said only that the model wanted a prep-bound run."""
    runs = store.load_runs(DATA / "compute_noise")
    (cfg,) = summarize(runs).configs
    assert cfg.bound == Bound.NOISE.value
    hint = verdict_text(cfg.verdict).rsplit("; ", 1)[1]
    a = advise(runs)
    assert a.note is not None and "prep rate was not measured" in a.note.message
    text = advice_text(a)
    assert text.startswith("Advice: none yet: cpus=all cache=unlimited bw=unthrottled stalls ")
    assert hint.startswith("repeat the runs") and hint in text
    assert "compute-bound" not in text and "no change needed" not in text
    assert failure_text(a.note) in text  # and why the model could not help


def test_measured_configurations_count_the_cold_epoch():
    """Two epochs of the committed 2-rank run: its cold first epoch plus one steady epoch,
    stalled by the table's stalls (the cold epoch's, then the steady one's)."""
    summary = summarize(store.load_runs(DATA / "report_2ranks")).to_dict()
    (cfg,) = summary["configs"]
    (o,) = measured_options(typed(summary), Facts(2))
    disk, cold = cfg["modes"]["disk"], cfg["cold_epoch"]
    assert o.span_s == pytest.approx(disk["epoch1_s"] + disk["time_s"])
    stalled = cold["prep_stall_s"] + cold["fetch_stall_s"] + cfg["prep_stall_s"] + \
        cfg["fetch_stall_s"]
    assert o.stall_pct == pytest.approx(100 * stalled / o.span_s)
    assert o.stall_pct > cfg["prep_stall_pct"] + cfg["fetch_stall_pct"]  # the cold epoch counts


def _disk_faster(runs: list[RunResult], run_id: str, k: float) -> list[RunResult]:
    """The runs with `run_id`'s iterations `k` times as long: a disk run measured faster than
    its cached run (drift between the runs), as in issue 24's sweep."""
    def scaled(r: RunResult) -> RunResult:
        ranks = tuple(replace(rk, iter_s=[t * k for t in rk.iter_s],
                              wait_s=[t * k for t in rk.wait_s]) for rk in r.ranks)
        return replace(r, ranks=ranks)
    return [scaled(r) if r.run_id == run_id else r for r in runs]


def test_a_configuration_the_table_calls_prep_bound_is_never_called_compute_bound():
    """Issue 24: the table said `likely prep-bound: 19% ±15`, the advice "no change needed:
    ... stalls 4% ... the job is compute-bound there": the disk run had measured faster than
    the cached one, so its job span (1 - compute / epoch) hid the prep stall."""
    runs = _disk_faster(store.load_runs(DATA / "report_sweep"), "disk-cpus1-cachenone-bwnone",
                        0.86)
    summary = summarize(runs).to_dict()
    cfg = next(c for c in summary["configs"] if c["key"] == "cpus1-cachenone-bwnone")
    assert cfg["bound"] == Bound.PREP.value and \
        "likely prep-bound" in verdict_text(Verdict.from_dict(cfg["verdict"]))
    assert 100 * (1 - cfg["compute_s"] / cfg["total_s"]) <= 5  # the old rule's "calm"
    facts = Facts(measured_epochs(typed(summary)), workers=2, all_cpus=2, ranks=1)
    d = decide(typed(summary), [], facts)
    assert d.kind is not DecisionKind.MEASURED or d.choice.bound == Bound.COMPUTE.value
    (o,) = [o for o in measured_options(typed(summary), facts) if o.run_id == cfg["modes"]["disk"]
            ["run_id"]]
    assert o.stall_pct >= cfg["prep_stall_pct"]  # the table's stall, not hidden
    text = advice_text(Advice(d, fitted_runs=8))
    assert not re.search(re.escape(option_label(o)) + r"[^.]*compute-bound", text)


def _check_against_table(summary: dict, a: Advice) -> None:
    """The decision never contradicts the measured table."""
    d = a.decision
    bounds = {c["modes"].get("disk", c["modes"].get("cached", {})).get("run_id"): c["bound"]
              for c in summary["configs"]}
    if d.kind is DecisionKind.MEASURED:
        assert bounds[d.choice.run_id] == Bound.COMPUTE.value  # the 5% budget is the table's
    if d.kind is DecisionKind.CHANGE:
        assert not d.choice.measured and d.choice.span_s < d.best_measured.span_s
        # no run measured the configuration picked: a measured one is judged by its numbers
        measured = {(o.cpus_used, o.cache_bytes, o.storage_read_bps, o.workers)
                    for o in measured_options(typed(summary), Facts(d.epochs, workers=d.workers))}
        assert (d.choice.cpus_used, d.choice.cache_bytes, d.choice.storage_read_bps,
                d.choice.workers) not in measured or any(
            c["modes"].get("disk") is None for c in summary["configs"])
        quoted = d.error.split if d.error else None
        assert quoted in (None, "extrapolation" if d.beyond else "leave-one-out")
    for label, bound in ((option_label(o), bounds.get(o.run_id)) for o in
                         measured_options(typed(summary), Facts(d.epochs))):
        if bound in (Bound.PREP.value, Bound.FETCH.value):
            assert not re.search(re.escape(label) + r"[^.]*compute-bound", advice_text(a))


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.extended)
                                  if n in SLOW_FIXTURES else
                                  pytest.param(n, marks=pytest.mark.long)
                                  if n in LONG_FIXTURES else n for n in FIXTURES])
def test_advice_recommend_and_report_agree(name, tmp_path, capsys):
    """On every committed fixture: the harness's advice line, `whatif --recommend` with its
    defaults and the report say the same sentence, and it agrees with the table."""
    prefix = copy_of(name, tmp_path)
    runs = store.load_runs(prefix)
    docs = app.advise(prefix, runs)
    (line,) = docs.recommendation
    _check_against_table(summarize(runs).to_dict(), docs.advice)
    rc = cli.main(["whatif", str(prefix), "--recommend"])
    out, err = capsys.readouterr()
    if docs.advice.note:  # no model: `whatif` refuses with the same reason
        assert rc == 2 and failure_text(docs.advice.note) in err
    else:
        assert rc == 0 and f"recommendation: {line}\n" in out
    app.report(prefix, docs)  # the harness's advice, as `dsanalyze report` fits it
    assert f"- {line}\n" in (prefix / "report.md").read_text()


def sweep(prefix: Path, data: Path, *options: object) -> int:
    return harness("--data", data, "--prefix", prefix, "--modes", "synthetic,cached",
                   "--iters", 6, "--warmup", 2, "--no-plots", *options)


@pytest.mark.slow
def test_prep_bound_sweep_ends_with_a_change_predicted_faster_than_every_measured_one(
        small_dataset, tmp_path, capsys):
    prefix = tmp_path / "prep"
    # one CPU, 16 JPEGs per 5 ms step: decoding cannot keep up
    assert sweep(prefix, small_dataset, "--cpus", 1, "-b", 16, "-j", 2, "--sim-step-ms", 5) == 0
    out = capsys.readouterr().out.splitlines()
    (line,) = [s for s in out if s.startswith("Advice: ")]
    assert out.index(line) > max(i for i, s in enumerate(out) if s.startswith("cpus=1 "))
    # the printed claim: a predicted time under the measured one, at the one CPU asked for;
    # given, or (rule 2) kept while the pick's interval reaches past the measured time: a
    # loaded machine's decode probe can leave a gain of under half the interval's width
    claim = re.search(r"give the job (.*): predicted .*, \d+ epochs? (?:\(cold\) )?in "
                      r"([\d.]+) s, .* against ([\d.]+) s measured at cpus=1\b", line)
    if claim is not None:
        change, predicted_s, measured_s = claim.group(1), float(claim.group(2)), \
            float(claim.group(3))
    else:
        kept = re.search(r"^Advice: keep cpus=1 \S+ \S+: .* its measured \d+ epochs? "
                         r"(?:\(cold\) )?in ([\d.]+) s .* The fastest prediction, (.*), is "
                         r"predicted .*, \d+ epochs? (?:\(cold\) )?in ([\d.]+) s, but ([\d.]+) s at "
                         r"its interval's slow end", line)
        assert kept is not None, line
        change, predicted_s, measured_s = kept.group(2), float(kept.group(3)), \
            float(kept.group(1))
        assert float(kept.group(4)) >= measured_s * (1 - 0.02) - 0.005, line
    assert predicted_s < measured_s, line
    # the measured time from the cached run's own record: an epoch of the dataset's 96
    # files at its steady iterations' seconds per sample (no disk run: no cold epoch)
    (cached,) = [r for r in store.load_runs(prefix) if r.mode is Mode.CACHED]
    r0 = cached.ranks[0]
    per_sample_s = sum(r0.iter_s[r0.warmup:]) / sum(r0.samples[r0.warmup:])
    files = scan_dataset(small_dataset).num_files
    assert measured_s == pytest.approx(files * per_sample_s, rel=0.15)
    # more of what the prep stall lacks: CPUs or workers
    assert re.search(r"\d+ CPUs \(1 measured\)|\d+ [\w ]+ per rank \(2 measured\)",
                     change), line
    assert "fitted on the 2 runs of this sweep" in line and " (interval " in line


@pytest.mark.long  # 30 s or more on this VM: make test-long
@pytest.mark.slow
def test_compute_bound_sweep_needs_no_change_and_no_advice_turns_it_off(
        small_dataset, tmp_path, capsys):
    # two samples per 300 ms step: the loader keeps up easily, even on a loaded machine; 22
    # measured steps, not 4: with 4, one sleep woken 60 ms late (a VM's stolen time) widens the
    # stall's bootstrap interval past 5% (t_3 on blocks of one), and the table calls it within
    # noise, which no measured configuration meets the budget with (CI failed so at 6772a95)
    options = ("-b", 2, "-j", 2, "--sim-step-ms", 300, "--iters", 24)
    assert sweep(tmp_path / "compute", small_dataset, *options) == 0
    out = capsys.readouterr().out
    assert "Advice: no change needed: cpus=all " in out
    assert "the job is compute-bound there." in out
    assert sweep(tmp_path / "compute", small_dataset, *options, "--resume", "--no-advice") == 0
    assert "Advice" not in capsys.readouterr().out
