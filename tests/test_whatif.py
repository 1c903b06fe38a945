"""The what-if model: the loop simulation by hand, and fits on small real runs.

The fixtures under tests/data/whatif_*/runs are real harness runs (built-in job,
sim device, 64 JPEGs of about 100 KB, batch 4, 2 workers, one epoch), trimmed
(no monitor samples, rounded timings, the dataset's size quantiles added):

    H="harness.py --data DATA -b 4 -j 2 --epochs 1 --warmup 2 --no-plots"
    $H --prefix whatif_compute --sim-step-ms 80 --cpus 1 --modes synthetic,loader,cached,disk
    $H --prefix whatif_prep --sim-step-ms 4 --cpus 1 --modes synthetic,loader,cached,disk
    $H --prefix whatif_fetch --sim-step-ms 4 --cpus 2 --storage-bw none,1M \\
        --modes synthetic,loader,cached,disk

whatif_caches holds seven untrimmed runs of bench/whatif_accuracy.py's base job (500
JPEGs of about 530 KB, batch 8, 60 ms step, 3 epochs) at 1 CPU, unthrottled: synthetic,
loader (its second repeat), cached, and disk at cache 0 (two repeats), 25% and 100%.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
from conftest import slower

from dsanalyze import cli, store
from dsanalyze.analysis.stalls import run_rate
from dsanalyze.config import CacheBudget, Mode
from dsanalyze.errors import ConfigError
from dsanalyze.report.advice import advice_text
from dsanalyze.report.assumptions import assumption_text
from dsanalyze.report.whatif_text import unmade_text
from dsanalyze.settings import SETTINGS
from dsanalyze.whatif import api as whatif
from dsanalyze.whatif import pipeline, recommend
from dsanalyze.whatif.advice import Advice
from dsanalyze.whatif.assumptions import Assume, Assumption
from dsanalyze.whatif.decision import DecisionKind
from dsanalyze.whatif.documents import Unmade, UnmadeWhy
from dsanalyze.whatif.laws import run_config
from dsanalyze.whatif.model import HeldOut, run_layout
from dsanalyze.whatif.provenance import Contention, Fixed, MainLoop, Reason, Sizes
from dsanalyze.whatif.rates import predict_run, simulate_run

DATA = Path(__file__).parent / "data"


def runs_of(case: str) -> list:
    return store.load_runs(DATA / f"whatif_{case}")


# ---- the loop simulation, by hand -----------------------------------------------------------

@dataclass(frozen=True)
class Loop:
    name: str
    pipe: pipeline.Pipeline
    miss_bytes: float  # per sample
    rate_sps: float  # after the first batch of the only epoch


B = 4
LOOPS = [
    # one worker, one core, no step: a batch every B * 10 ms
    Loop("prep, 1 worker", pipeline.Pipeline(1, 1, B, 1, 0.0, 0.0, 0.010, None), 0, 100.0),
    # two workers share one core: still 100 samples/s
    Loop("prep, 2 workers on 1 core", pipeline.Pipeline(1, 2, B, 1, 0.0, 0.0, 0.010, None), 0,
         100.0),
    # two workers on two cores: twice as fast
    Loop("prep, 2 workers on 2 cores", pipeline.Pipeline(1, 2, B, 2, 0.0, 0.0, 0.010, None), 0,
         200.0),
    # a worker uses at most one core: 8 cores do not help 2 workers
    Loop("prep, 2 workers on 8 cores", pipeline.Pipeline(1, 2, B, 8, 0.0, 0.0, 0.010, None), 0,
         200.0),
    # the step (0.2 s per batch of 4) hides prep: compute-bound at 20 samples/s
    Loop("compute", pipeline.Pipeline(1, 2, B, 1, 0.2, 0.0, 0.010, None), 0, 20.0),
    # 1 MB/s shared by the readers, 100 kB per sample: 10 samples/s
    Loop("fetch", pipeline.Pipeline(1, 2, B, 2, 0.0, 0.0, 0.001, 1e6), 1e5, 10.0),
    # no overlap of a worker's read with its decode, one worker: 0.1 s + 0.1 s per sample
    Loop("fetch then prep, 1 worker", pipeline.Pipeline(1, 1, B, 1, 0.0, 0.0, 0.1, 1e6,
                                                        read_overlap=0.0), 1e5, 5.0),
    # full overlap: max(0.1, 0.1) s per sample
    Loop("fetch with prep, 1 worker", pipeline.Pipeline(1, 1, B, 1, 0.0, 0.0, 0.1, 1e6), 1e5,
         10.0),
    # the device's latency per request comes before each sample's bytes: 10 ms + 100 ms
    Loop("fetch with latency, 1 worker", pipeline.Pipeline(1, 1, B, 1, 0.0, 0.0, 1e-9, 1e6,
                                                           read_latency_s=0.01), 1e5, 1 / 0.11),
    # 0 workers: the main process loads, then steps: 4 * 10 ms + 0.1 s per batch
    Loop("no workers", pipeline.Pipeline(1, 0, B, 1, 0.1, 0.0, 0.010, None), 0, B / 0.14),
    # two ranks in lock step, each compute-bound: 2 * 4 samples per 0.2 s
    Loop("2 ranks", pipeline.Pipeline(2, 2, B, 4, 0.2, 0.0, 0.010, None), 0, 40.0),
    # compute-bound, a ready batch taken 10 ms after it is asked for: 4 samples per 0.21 s
    Loop("receive delay", pipeline.Pipeline(1, 2, B, 1, 0.2, 0.0, 0.010, None, receive_s=0.01),
         0, B / 0.21),
]


@pytest.mark.parametrize("case", LOOPS, ids=[c.name for c in LOOPS])
def test_loop_simulation(case: Loop) -> None:
    batches = 40
    misses = [np.full(batches * B * case.pipe.ranks, case.miss_bytes)]
    tl = pipeline.simulate(case.pipe, misses, batches)
    assert len(tl.iter_s) == batches
    assert tl.rate_sps(first=4) == pytest.approx(case.rate_sps, rel=1e-6)


def test_epoch_start_refills_the_prefetch_queue() -> None:
    """Each epoch's first batch waits a full batch of prep: the stall min() misses."""
    p = pipeline.Pipeline(1, 2, B, 2, 0.05, 0.0, 0.010, None)
    tl = pipeline.simulate(p, [np.zeros(10 * B)] * 3, 10)
    firsts = [tl.wait_s[i] for i in range(len(tl.epoch))
              if i == 0 or tl.epoch[i] != tl.epoch[i - 1]]
    assert firsts == pytest.approx([B * 0.010] * 3)
    assert tl.rate_sps() < B / 0.05  # below min(G, P) = 80 samples/s


def test_prep_scales_with_the_sample_bytes_by_its_size_share() -> None:
    """Half the prep follows the file's bytes: small files' batches go faster, big ones'
    slower, at the same mean."""
    p = pipeline.Pipeline(1, 1, B, 1, 0.0, 0.0, 0.010, None, size_share=0.5)
    sizes = np.repeat([1.0, 3.0], 10 * B)  # 10 batches of small files, then 10 of big ones
    tl = pipeline.simulate(p, [np.zeros(20 * B)], 20, [sizes])
    assert tl.iter_s[5] == pytest.approx(B * 0.010 * 0.75)  # 0.5 + 0.5 * 1 / 2
    assert tl.iter_s[15] == pytest.approx(B * 0.010 * 1.25)  # 0.5 + 0.5 * 3 / 2


@pytest.mark.parametrize("f, target, expect", [(lambda x: 10 / x, 5.0, 2.0),
                                               (lambda x: 1 / x ** 2, 0.25, 2.0)])
def test_solve_and_minimize(f, target: float, expect: float) -> None:
    assert pipeline.solve(f, target, 1e-3, 1e3, steps=22) == pytest.approx(expect, rel=1e-4)
    assert pipeline.minimize(lambda x: (f(x) - target) ** 2, 1e-3, 1e3, 60) == \
        pytest.approx(expect, rel=1e-3)


# ---- fits on real runs ----------------------------------------------------------------------

@dataclass(frozen=True)
class Bound:
    case: str
    held_out: str  # fitted on every other run of the fixture
    tolerance_pct: float
    config: whatif.Config  # its steady state (whole epochs), predicted
    bound: str  # which part dominates the predicted epoch


BOUNDS = [
    Bound("compute", "disk-cpus1-cachenone-bwnone", 3.0, whatif.Config.of(1), "compute"),
    Bound("prep", "cached-cpus1", 3.0, whatif.Config.of(1), "prep"),
    # the fixture's disk runs are one cold epoch; with no page cache every epoch is cold
    Bound("fetch", "disk-cpus2-cachenone-bw1M", 3.0,
          whatif.Config.of(2, CacheBudget("0", 0), 1 << 20), "fetch"),
]


@pytest.mark.parametrize("case", BOUNDS, ids=[b.case for b in BOUNDS])
def test_predicts_the_held_out_run(case: Bound) -> None:
    runs = runs_of(case.case)
    held = next(r for r in runs if r.run_id == case.held_out)
    model = whatif.fit([r for r in runs if r is not held])
    predicted = predict_run(model, HeldOut.of(held)).rate_sps
    measured = run_rate(held).rate_sps
    assert predicted == pytest.approx(measured, rel=case.tolerance_pct / 100)
    p = whatif.predict(model, case.config)
    parts = {"compute": p.compute_s, "prep": p.prep_stall_s, "fetch": p.fetch_stall_s}
    assert max(parts, key=parts.get) == case.bound
    assert p.epoch_s == pytest.approx(sum(parts.values()))


def test_parameters_name_their_runs() -> None:
    model = whatif.fit(runs_of("prep"))
    params = {p.name: p for p in model.params}
    g = params["ingest_sps[ranks=1]"]
    assert g.runs == ("synthetic-cpus1",) and g.value == pytest.approx(
        run_rate(store.read_run(DATA / "whatif_prep/runs/synthetic-cpus1.json")).rate_sps)
    prep = params["prep_cpu_s_per_sample"]
    assert prep.runs == ("loader-cpus1",) and 250 < 1 / prep.value < 320
    assert prep.how.law is Contention.ONE_COUNT and prep.how.cores == (1,)
    assert params["allreduce_s"].value == 0 and \
        params["allreduce_s"].how == Fixed(Reason.ONE_RANK_COUNT)
    assert params["samples_per_epoch"].value == 64
    assert params["sample_bytes"].how.source is Sizes.QUANTILES
    # nothing throttled, no cache limit, runs older than the device probe: said, not invented
    assert params["throttle_efficiency"].value == 1 and not params["throttle_efficiency"].runs
    assert params["device_read_bps"].value is None and \
        params["device_read_bps"].how == Fixed(Reason.DEVICE_PREDATES_PROBE)
    assert params["cache_slack_bytes"].value is None
    # the per-transform timing gives the share of the prep that follows the file's bytes
    assert 0 < params["prep_size_share"].value < 1 and "read+decode" in \
        dict(params["prep_size_share"].how.steps_s)


def test_main_process_measured_on_the_cached_runs_timeline() -> None:
    """The compute-bound cached run's loader is ahead: its median wait is the delay to take
    a ready batch. The main process's CPU per iteration is what makes the simulated loop
    (iteration - wait) of that run, its 2 workers sharing one core with it, as long as the
    measured one: the simulation, not the fit's own formula, is the check."""
    runs = runs_of("compute")
    model = whatif.fit(runs)
    params = {p.name: p for p in model.params}
    run = next(r for r in runs if r.run_id == "cached-cpus1")
    cached = run.ranks[0]
    assert params["receive_s"].runs == ("cached-cpus1",)
    assert model.receive_s == pytest.approx(np.median(cached.wait_s[cached.warmup:]))
    assert isinstance(params["main_cpu_s_per_iter"].how, MainLoop) and model.main_cpu_s > 0

    def loop_s(timeline) -> float:  # the median loop time of the steady iterations
        return float(np.median([t - w for t, w in zip(timeline.iter_s[cached.warmup:],
                                                      timeline.wait_s[cached.warmup:])]))
    cfg, layout = run_config(model, HeldOut.of(run)), run_layout(run)
    simulated = simulate_run(model, cfg, layout, Mode.CACHED)
    idle = simulate_run(replace(model, main_cpu_s=0.0), cfg, layout, Mode.CACHED)
    assert loop_s(simulated) == pytest.approx(loop_s(cached), rel=0.05)
    assert loop_s(idle) < loop_s(cached)  # without it the loop would be the step alone


def test_a_value_equal_configuration_is_the_measured_run() -> None:
    """A cache asked as bytes or as a percentage, and the ranks and workers left unset, match
    the run measured with them."""
    runs = runs_of("fetch")
    model = whatif.fit(runs)
    run = next(r for r in runs if r.run_id == "disk-cpus2-cachenone-bw1M")
    asked = [whatif.Config.of(2, storage_read_bps=1 << 20),
             whatif.Config.of(2, storage_read_bps=1 << 20, nproc=1, workers=2)]
    assert [p.measured_run for p in whatif.grid(model, asked, runs)] == [run.run_id] * 2
    other = whatif.grid(model, [whatif.Config.of(2, storage_read_bps=1 << 20, workers=4)], runs)
    assert other[0].measured_run is None


def test_an_untested_assumption_widens_the_interval() -> None:
    """Fitted on 1 CPU: 4 CPUs rest on the contention law no run tested; the interval says
    so by its width, and the prediction names the assumption. An interval is symmetric
    about its rate in log (rate x exp(+-w)), never narrower than the noise floor, and it
    holds the rate of the fit's measured 1-CPU runs."""
    runs = runs_of("prep")
    model = whatif.fit(runs)
    one, four = (whatif.predict(model, whatif.Config.of(c)) for c in (1, 4))
    width = lambda p: math.log(p.rate_sps_high / p.rate_sps_low)  # noqa: E731
    assert any(u.cpus == 4 for u in four.untested) and len(four.untested) > len(one.untested)
    # the floor: the noise floor, times the share of it a held-out run shows, both ways
    assert width(four) > width(one) >= 2 * 1.645 * SETTINGS.fit_sigma_scale * \
        SETTINGS.noise_floor
    for p in (one, four):
        assert math.log(p.rate_sps_high / p.rate_sps) == pytest.approx(
            math.log(p.rate_sps / p.rate_sps_low))
    measured = run_rate(next(r for r in runs if r.run_id == "cached-cpus1")).rate_sps
    assert one.rate_sps_low <= measured <= one.rate_sps_high


def test_more_cpus_remove_the_prep_stall_up_to_the_workers() -> None:
    model = whatif.fit(runs_of("prep"))
    cfgs = whatif.configs([1, 2, 8], ["none"], [None], 1 << 30)
    p1, p2, p8 = whatif.grid(model, cfgs, runs_of("prep"))
    # fitted on 1 CPU alone, how much a second core adds is the contention law's guess (the
    # runs of report_sweep test it: test_fitted_on_one_cpu_predicts_two_cpus); here only that
    # it adds, and that the prediction says it is untested
    assert p2.rate_sps > p1.rate_sps and p2.prep_stall_s < p1.prep_stall_s
    assert any("contention" in assumption_text(u) for u in p2.untested)
    assert p8.rate_sps == pytest.approx(p2.rate_sps, rel=0.02)  # 2 workers: 2 cores at most
    assert p1.measured_run == "disk-cpus1-cachenone-bwnone" and p2.measured_run is None


def test_more_workers_use_the_cpus_the_measured_workers_could_not() -> None:
    """The prep-bound job was measured with 2 workers: at 8 CPUs, 4 workers use
    the cores 2 could not; at 1 CPU more workers share one core and gain nothing
    (each epoch starts with every worker's first batch in progress at once)."""
    runs = runs_of("prep")
    model = whatif.fit(runs)
    preds = whatif.grid(model, whatif.configs([1, 8], ["none"], [None], 1 << 30,
                                              workers=[None, 1, 4, 8]), runs)
    rate = {(p.config.cpus, p.config.workers): p.rate_sps for p in preds}
    assert [p.config.workers for p in preds[:4]] == [2, 1, 4, 8]  # None: as measured
    assert rate[8, 4] > 1.4 * rate[8, 2]
    assert rate[8, 1] == pytest.approx(rate[8, 2] / 2, rel=0.1)
    assert rate[1, 8] <= rate[1, 2] <= 1.02 * rate[1, 1]
    # the measured run is matched to its own worker count only
    assert [p.measured_run for p in preds[:2]] == ["disk-cpus1-cachenone-bwnone", None]
    with pytest.raises(ConfigError, match="--workers"):
        whatif.configs([1], ["none"], [None], 1 << 30, workers=[-1])


def test_recommendation_names_the_workers_it_needs() -> None:
    runs = runs_of("prep")
    preds = whatif.grid(whatif.fit(runs), whatif.configs([1, 8], ["none"], [None], 1 << 30,
                                                         workers=[2, 8]), runs)
    model = whatif.fit(runs)
    stalls_2 = min(p.job_stall_pct(20) for p in preds if p.config.workers == 2)
    d = recommend.recommend(model, preds, runs, stalls_2 - 1, epochs=20)  # 2 workers cannot
    assert d.kind is DecisionKind.CHANGE and d.meets_budget and d.choice.workers > 2
    assert (d.choice.cpus, d.choice.workers) == \
        min((p.config.cpus, p.config.workers) for p in preds
            if p.job_stall_pct(20) <= stalls_2 - 1)


def test_faster_gpu_and_more_ranks() -> None:
    model = whatif.fit(runs_of("compute"))
    base, fast = (whatif.predict(model, whatif.Config.of(1, gpu_speedup=k)) for k in (1.0, 2.0))
    assert fast.compute_s == pytest.approx(base.compute_s / 2)
    assert fast.rate_sps > 1.8 * base.rate_sps  # still compute-bound at 2x
    two = whatif.predict(model, whatif.Config.of(2, nproc=2))
    assert two.nproc == 2 and two.rate_sps == pytest.approx(2 * base.rate_sps, rel=0.05)


def test_a_measured_configuration_within_the_budget_is_the_answer() -> None:
    """At a 70% budget the measured 2-CPU unthrottled run qualifies by its own numbers: it is
    the answer, though the model predicts cheaper ones under the budget too."""
    runs = runs_of("fetch")
    model = whatif.fit(runs)
    cfgs = whatif.configs([1, 2], ["0"], [1 << 20, 64 << 20], 1 << 30)
    preds = whatif.grid(model, cfgs, runs)
    d = recommend.recommend(model, preds, runs, max_stall_pct=70, epochs=1)
    assert d.kind is DecisionKind.MEASURED and d.choice.measured
    assert d.choice.run_id == "disk-cpus2-cachenone-bwnone"
    rate = run_rate(next(r for r in runs if r.run_id == d.choice.run_id)).rate_sps
    assert d.choice.rate_sps == pytest.approx(rate)  # its measured rate, not a prediction
    # every prediction of this grid has a page cache of 0: cheaper than the measured (no limit)
    assert any(p.job_stall_pct(1) <= 70 for p in preds)
    # nothing meets 0.1%: a prediction only if faster than every measured job
    none = recommend.recommend(model, preds, runs, max_stall_pct=0.1, epochs=1)
    assert not none.meets_budget
    if none.kind is DecisionKind.CHANGE:
        assert none.choice.span_s < none.best_measured.span_s
    else:
        assert none.kind is DecisionKind.KEEP and none.choice == none.best_measured


def test_whatif_document() -> None:
    runs = runs_of("compute")
    preds = whatif.grid(whatif.fit(runs), whatif.configs([1, 2], ["0", "none"], [None], 10 ** 6),
                        runs)
    rec = recommend.recommend(whatif.fit(runs), preds, runs, 0.1)
    doc = whatif.whatif_document(preds, rec.prediction)
    assert sum(d["recommended"] for d in doc) == (rec.prediction is not None)
    # a worker count outside the grid is appended as its own row
    assert len(doc) == 4 or (len(doc) == 5 and doc[-1]["recommended"] and doc[-1]["workers"] != 2)
    for d in doc:
        assert {"cpus", "cache_spec", "cache_bytes", "storage_read_bps", "gpu_speedup", "nproc",
                "workers", "rate_sps", "epoch_s", "compute_s", "prep_stall_s", "fetch_stall_s",
                "measured", "rate_sps_low", "rate_sps_high", "stall_s_low", "stall_s_high",
                "prep_stall_s_low", "fetch_stall_s_high", "untested"} <= d.keys()
        assert d["epoch_s"] == pytest.approx(d["compute_s"] + d["prep_stall_s"] +
                                             d["fetch_stall_s"])
        assert d["rate_sps_low"] < d["rate_sps"] < d["rate_sps_high"]
        assert d["stall_s_low"] <= d["prep_stall_s"] + d["fetch_stall_s"] <= d["stall_s_high"]
    json.dumps(doc)


def test_validate_without_disk_runs_predicts_the_cached_run() -> None:
    runs = [r for r in runs_of("prep") if r.mode.value != "disk"]
    val = whatif.validate(runs)
    loo, extrapolation = val.splits
    assert [c.run_id for c in loo.checks] == ["cached-cpus1"] and not extrapolation.checks
    # one CPU count, one rank, one step
    assert extrapolation.unmade == Unmade(UnmadeWhy.ONE_CONFIG)
    assert unmade_text(extrapolation.unmade).startswith("not made: every run has the fewest CPUs")
    assert val.max_abs_error_pct < 5
    doc = whatif.validation_document(val)
    assert doc["runs"][0].keys() >= {"run_id", "measured_sps", "predicted_sps", "error_pct",
                                     "predicted_sps_low", "predicted_sps_high", "covered"}
    assert doc["median_abs_error_pct"] == doc["max_abs_error_pct"] == abs(doc["runs"][0]
                                                                          ["error_pct"])
    assert doc["coverage"] in (0.0, 1.0) and doc["nominal"] == 0.9


def test_validate_needs_something_to_hold_out() -> None:
    with pytest.raises(ConfigError, match="nothing left to validate"):
        whatif.validate([r for r in runs_of("fetch") if r.mode.value == "synthetic"])


def test_no_synthetic_run_is_said() -> None:
    runs = [r for r in runs_of("prep") if r.mode.value != "synthetic"]
    model = whatif.fit(runs)
    assert model.params[0].value is None and model.params[0].how == Fixed(Reason.NO_SYNTHETIC_RUN)
    with pytest.raises(ConfigError, match="compute rate G was not measured"):
        whatif.predict(model, whatif.Config.of(1))


# ---- the CLI --------------------------------------------------------------------------------

def _copy(case: str, tmp_path: Path, keep=lambda name: True) -> Path:
    dst = tmp_path / case
    (dst / "runs").mkdir(parents=True)
    for f in (DATA / f"whatif_{case}" / "runs").glob("*.json"):
        if keep(f.name):
            shutil.copy(f, dst / "runs" / f.name)
    return dst


def test_cli_whatif_json_and_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    prefix = _copy("fetch", tmp_path)
    rc = cli.main(["whatif", str(prefix), "--cpus", "1,2", "--cache", "none",
                   "--storage-bw", "none,1M", "--workers", "2", "--json"])
    assert rc == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((prefix / "whatif.json").read_text())
    assert [(d["cpus"], d["storage_read_bps"]) for d in printed] == \
        [(1, None), (1, 1 << 20), (2, None), (2, 1 << 20)]
    measured = [d for d in printed if d["measured"]]
    assert {d["measured_run"] for d in measured} == {"disk-cpus2-cachenone-bwnone",
                                                     "disk-cpus2-cachenone-bw1M"}


def test_cli_whatif_recommend_in_words(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    prefix = _copy("fetch", tmp_path)
    rc = cli.main(["whatif", str(prefix), "--cpus", "1,2", "--cache", "0",
                   "--storage-bw", "1M,64M", "--recommend", "--max-stall", "70%", "--epochs", "1"])
    out = capsys.readouterr().out
    # the measured 2-CPU run meets 70% by its own numbers: no prediction undercuts it
    assert rc == 0 and "recommendation: Advice: no change needed: cpus=2 cache=unlimited " \
        "bw=unthrottled stalls " in out
    doc = json.loads((prefix / "whatif.json").read_text())
    assert sum(d["recommended"] for d in doc) == 0  # that configuration is not in this grid


def test_cli_validate(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    prefix = _copy("prep", tmp_path, keep=lambda name: not name.startswith("disk"))
    assert cli.main(["validate", str(prefix), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["run_id"] for r in doc["runs"]] == ["cached-cpus1"]
    prefix = _copy("compute", tmp_path, keep=lambda name: name.startswith("synthetic"))
    assert cli.main(["validate", str(prefix)]) == 2
    assert "nothing left to validate on" in capsys.readouterr().err


def test_cold_first_epoch_is_predicted_on_its_own() -> None:
    """Unlimited page cache: every epoch after the first hits; the first reads at 1 MB/s."""
    runs = runs_of("fetch")
    model = whatif.fit(runs)
    p = whatif.predict(model, whatif.Config.of(2, storage_read_bps=1 << 20))
    cold = run_rate(next(r for r in runs if r.run_id == "disk-cpus2-cachenone-bw1M")).rate_sps
    assert model.samples_per_epoch / p.epoch1_s == pytest.approx(cold, rel=0.05)
    assert p.hit_rate == 1.0 and p.fetch_stall_s == 0.0
    assert p.rate_sps > 20 * cold


# ---- v2: hardware never measured, honest validation ----------------------------------------

def test_fitted_on_one_cpu_predicts_two_cpus() -> None:
    """The demo's runs (report_sweep: real runs at 1 and 2 CPUs): the model fitted on the
    1-CPU runs alone predicts the 2-CPU runs, which it never saw, within 10%; the 2-CPU
    cached run is still prep-stalled (over 5% of its time: input-bound)."""
    runs = store.load_runs(DATA / "report_sweep")
    one = [r for r in runs if r.spec.resources.cpus == 1]
    model = whatif.fit(one)
    assert model.measured_cpus == (1,) and model.contention == 0
    g = run_rate(next(r for r in runs if r.run_id == "synthetic-cpus2")).rate_sps
    assert run_rate(next(r for r in runs if r.run_id == "cached-cpus2")).rate_sps < 0.95 * g
    for run in (r for r in runs if r.spec.resources.cpus == 2 and r.mode.value != "synthetic"):
        measured = run_rate(run).rate_sps
        assert predict_run(model, whatif.spec_only(run)).rate_sps == \
            pytest.approx(measured, rel=0.10), run.run_id
    assert any("contention not fitted" in assumption_text(u)
               for u in whatif.predict(model, whatif.Config.of(2)).untested)


def test_unthrottled_disk_on_a_slow_device_is_fetch_bound() -> None:
    """No throttle means the device: a device that reads 1 MiB/s (as the harness's probe
    would record it) makes the unthrottled configuration fetch-bound, at the rate the
    run throttled to 1 MiB/s measured."""
    runs = runs_of("fetch")
    slow = [replace(r, io=replace(r.io, cache_state={"storage_device": {
        "read_bps": float(1 << 20), "latency_s": 0.0}})) if r.mode.value == "disk" else r
        for r in runs if r.run_id != "disk-cpus2-cachenone-bw1M"]
    model = whatif.fit(slow)
    assert model.device_read_bps == 1 << 20
    p = whatif.predict(model, whatif.Config.of(2, CacheBudget("0", 0), None))
    assert p.fetch_stall_s > p.prep_stall_s + p.compute_s  # fetch-bound
    throttled = run_rate(next(r for r in runs if r.run_id == "disk-cpus2-cachenone-bw1M"))
    assert model.samples_per_epoch / p.epoch1_s == pytest.approx(throttled.rate_sps, rel=0.05)
    # a throttle above the device is the device
    faster = whatif.predict(model, whatif.Config.of(2, CacheBudget("0", 0), 64 << 20))
    assert faster.rate_sps == pytest.approx(p.rate_sps, rel=1e-6)
    assert Assumption(Assume.ABOVE_DEVICE) in faster.untested
    # unthrottled on the fixture's own runs (no probe recorded): said, not infinitely fast
    assert Assumption(Assume.NO_DEVICE) in whatif.predict(whatif.fit(runs),
                                                          whatif.Config.of(2)).untested


def _ran_with(run, **loader):
    """`run` as if its ranks had recorded these DataLoader settings (the job as it ran)."""
    ranks = tuple(replace(k, extra={**k.extra, "loader": {**k.extra["loader"], **loader}})
                  for k in run.ranks)
    return replace(run, ranks=ranks)


def _blank(run):
    return replace(run, io={}, monitor=(), enforced={}, environment={})


def test_validate_reads_nothing_measured_in_held_out_runs() -> None:
    """Every held-out run's io, monitor, enforced and environment blanked: the same figures."""
    runs = store.load_runs(DATA / "report_sweep")
    val = whatif.validate(runs)
    loo, extrapolation = val.splits
    assert extrapolation.checks and loo.checks
    held = {c.run_id for c in extrapolation.checks}
    blanked = whatif.validate([_blank(r) if r.run_id in held else r for r in runs])
    assert whatif.validation_document(blanked)["splits"][1] == \
        whatif.validation_document(val)["splits"][1]
    assert blanked.splits[1].checks == extrapolation.checks
    # leave-one-out: each run's own fold predicts it from its spec alone
    for run in (r for r in runs if r.mode.value == "disk"):
        model = whatif.fit([r for r in runs if r is not run])
        assert whatif.check(model, (_blank(run),), "loo") == whatif.check(model, (run,), "loo")
    doc = whatif.validation_document(val)
    assert 0 <= doc["coverage"] <= 1 and doc["nominal"] == 0.9
    assert {s["name"] for s in doc["splits"]} == {"leave-one-out", "extrapolation"}


def test_validate_holds_out_a_configuration_with_its_repeats() -> None:
    """A repeat of the held-out configuration left in the fit would predict it in sample:
    both are held out, and the figure predicted is their mean rate."""
    runs = store.load_runs(DATA / "report_sweep")
    disk = next(r for r in runs if r.mode.value == "disk")
    twin = replace(slower(disk, 1.25), spec=replace(disk.spec, repeat=2))
    alone = {c.run_id: c for c in whatif.validate(runs).splits[0].checks}[disk.run_id]
    both = {c.run_id: c for c in whatif.validate([*runs, twin]).splits[0].checks}[disk.run_id]
    assert both.repeats == 2 and alone.repeats == 1
    # the fold is the same without the twin: it was held out too
    assert both.predicted_sps == alone.predicted_sps
    assert (both.low_sps, both.high_sps) == (alone.low_sps, alone.high_sps)
    twin_rate = run_rate(twin).rate_sps
    assert twin_rate == pytest.approx(alone.measured_sps / 1.25, rel=0.02)
    assert both.measured_sps == pytest.approx((alone.measured_sps + twin_rate) / 2)
    assert len(whatif.validate([*runs, twin]).splits[0].checks) == len(
        whatif.validate(runs).splits[0].checks)


def test_recommendation_on_the_demo_weighs_the_cold_epoch() -> None:
    """The demo's runs (1 and 2 CPUs, 8 MB/s or the device, no cache limit, one cold epoch
    each): a job of one epoch is all cold, so 8 MB/s stalls it; of fifty, mostly cached."""
    runs = store.load_runs(DATA / "report_sweep")
    model = whatif.fit(runs)
    preds = whatif.grid(model, whatif.configs([1, 2, 4], ["none"], [8 << 20, None],
                                              model.dataset_bytes), runs)
    slow = next(p for p in preds if (p.config.cpus, p.config.storage_read_bps) == (4, 8 << 20))
    assert slow.job_stall_pct(1) > 20 > slow.job_stall_pct(50)
    assert slow.job_stall_pct(1) > slow.stall_pct  # the cold epoch counted
    # a 20% budget: the cheapest measured configuration meets it, by its measured numbers
    d = recommend.recommend(model, preds, runs, 20, epochs=50)
    assert d.kind is DecisionKind.MEASURED
    assert (d.choice.cpus, d.choice.storage_read_bps) == (1, None)


def test_page_cache_the_run_had_excludes_shared_memory() -> None:
    """DataLoader batches in /dev/shm count in the cgroup's file cache (v1 `cache`, v2
    `file`); the page cache a run had is that less `shmem_bytes`."""
    from dsanalyze.analysis.window import steady_window
    from dsanalyze.whatif.runsizes import effective_cache

    run = next(r for r in runs_of("fetch") if r.run_id == "disk-cpus2-cachenone-bwnone")
    lo, hi = steady_window(run).span_unix_s()
    mid = (lo + hi) / 2
    samples = ({"unix_s": mid, "cache_bytes": 50 << 20, "shmem_bytes": 8 << 20},
               {"unix_s": mid, "cache_bytes": 60 << 20, "shmem_bytes": 8 << 20})
    assert effective_cache(replace(run, monitor=samples), 1 << 30) == 47 << 20


def test_more_workers_on_the_cpus_you_have_come_before_more_cpus() -> None:
    """A job whose runs are taken as measured with 1 worker on 2 CPUs (the fetch fixture's
    spec rewritten: a construction for the logic, the rates are the fixture's): the answer
    is a worker count on the same 2 CPUs, said so, not 4 CPUs."""
    runs = [_ran_with(r, workers=1)
            for r in runs_of("fetch") if r.run_id != "disk-cpus2-cachenone-bw1M"]
    model = whatif.fit(runs)
    preds = whatif.grid(model, whatif.configs([2, 4], ["none"], [None], model.dataset_bytes),
                        runs)
    limit = min(p.job_stall_pct(20) for p in preds) - 1  # more CPUs alone cannot
    d = recommend.recommend(model, preds, runs, limit, epochs=20)
    assert d.kind is DecisionKind.CHANGE and d.meets_budget
    assert d.choice.cpus == 2 and d.choice.workers > 1
    text = advice_text(Advice(d, fitted_runs=len(runs)))
    assert text.startswith(f"Advice: give the job {d.choice.workers} DataLoader workers per "
                           "rank (1 measured): predicted ")
    doc = whatif.whatif_document(preds, d.prediction)
    assert doc[-1]["recommended"] and doc[-1]["workers"] == d.choice.workers


def test_more_nodes_bring_their_own_cpus() -> None:
    """The prep-bound job at 1 CPU: a second rank on the same CPU gains nothing, a
    second node (its own CPU, cache and storage) doubles the job's rate."""
    model = whatif.fit(runs_of("prep"))
    one = whatif.predict(model, whatif.Config.of(1))
    two_ranks = whatif.predict(model, whatif.Config.of(1, nproc=2))
    two_nodes = whatif.predict(model, whatif.Config.of(1, nnodes=2))
    assert two_nodes.nproc == 2 and two_nodes.rate_sps == pytest.approx(2 * one.rate_sps,
                                                                        rel=0.1)
    assert two_ranks.rate_sps < 1.2 * one.rate_sps
    assert Assumption(Assume.NODES, nodes=2) in two_nodes.untested
    # each node reads half of every epoch, so the epoch's samples are the whole dataset's
    assert two_nodes.epoch_s == pytest.approx(one.epoch_s / 2, rel=0.1)


def test_a_node_caches_only_what_its_own_ranks_read() -> None:
    rng = np.random.default_rng(0)
    from dsanalyze.whatif import cachesim

    whole = cachesim.epoch_order(100, np.random.default_rng(0), ranks=4, batch_size=5)
    node0 = cachesim.epoch_order(100, rng, ranks=4, batch_size=5, kept=2)
    assert len(node0) == len(whole) // 2
    assert list(node0) == [x for i, x in enumerate(whole) if i % 4 < 2]


def test_a_multi_node_prefix_is_not_fitted() -> None:
    runs = [replace(r, spec=replace(r.spec, job=replace(r.spec.job, nnodes=2)))
            for r in runs_of("prep")]
    with pytest.raises(ConfigError, match="--nnodes"):
        whatif.fit(runs)


def test_no_negative_zero_in_the_whatif_table() -> None:
    """A hit rate of -0.0001 (float noise) is printed 0.00, never -0.00."""
    from dsanalyze.report import whatif_text

    runs = runs_of("prep")
    model = whatif.fit(runs)
    pred = replace(whatif.predict(model, whatif.Config.of(1)), hit_rate=-0.0001,
                   fetch_stall_s=-0.0)
    text = "\n".join(whatif_text.whatif_lines([pred], None))
    assert "-0.00" not in text and "0.00" in text


def test_measured_noise_weighs_the_fit_and_floors_the_intervals() -> None:
    """The block bootstrap's sigma of each run is the fit's weight; a prediction's interval
    is never narrower than the fit runs' median measured noise times
    SETTINGS.fit_sigma_scale (the calibrated share of it a held-out single run shows)."""
    from dsanalyze.analysis import uncertainty

    runs = runs_of("prep")
    sigmas = uncertainty.rel_sigmas(runs)
    assert set(sigmas) == {r.run_id for r in runs if r.ok} and all(s > 0 for s in sigmas.values())
    model = whatif.fit(runs)
    assert model.measured_sigma == sigmas
    noisy = whatif.fit(runs, rate_rel_sigma={k: 0.3 for k in sigmas})
    assert noisy.rel_sigma >= 0.3
    p = whatif.predict(noisy, whatif.Config.of(1))
    assert p.rate_sps_high / p.rate_sps >= math.exp(1.645 * SETTINGS.fit_sigma_scale * 0.3) * 0.999


def test_read_cost_comes_from_the_contrast_across_cache_budgets() -> None:
    """whatif_caches: the built-in job at 1 CPU, prep-bound, unthrottled, cache 0 (twice),
    25% and 100% (bench/whatif_accuracy.py). The read cost is fitted on how the rate changes
    with the bytes missed, not on the level: every disk run 10% slower leaves it unchanged
    (the level belongs to the prep cost), and cache 0 held out is predicted within 5%."""
    runs = runs_of("caches")
    model = whatif.fit(runs)
    (param,) = [p for p in model.params if p.name == "read_cpu_bps"]
    assert param.how.contrast and len(param.runs) == 4
    slow = whatif.fit([slower(r, 1.1) if r.mode.value == "disk" else r for r in runs])
    assert slow.miss_cpu_s_per_byte == pytest.approx(model.miss_cpu_s_per_byte, rel=1e-9, abs=1e-15)
    loo = {c.run_id: c for c in whatif.validate(runs).splits[0].checks}
    cold = loo["disk-cpus1-cache0B-bwnone"]
    assert cold.repeats == 2 and abs(cold.error_pct) < 5


@pytest.mark.parametrize("fixture", ["script_dali_cache", "report_sweep"])
def test_a_cache_budget_holds_its_share_of_the_files_not_of_their_pages(fixture) -> None:
    """`--cache P%` is P% of the dataset's own bytes, and the limiter counts a file's resident
    bytes up to its size: a budget holds as many files as its share of those bytes. The
    simulation's files are in whole pages, so the budget it simulates is that share of
    their pages: the whole dataset's bytes hold every file (for 10.6 KB files in three pages
    the pages are 16% more: taken in pages, `--cache 100%` would keep none of a cyclic read),
    and half of them half of the pages."""
    from dsanalyze.whatif.laws import binding_cache

    runs = store.load_runs(DATA / fixture)
    model = whatif.fit(runs)
    raw = next(r.dataset.total_bytes for r in runs if r.ok)
    assert model.raw_dataset_bytes == raw < model.dataset_bytes
    assert binding_cache(model, raw) is None
    assert binding_cache(model, raw / 2) == pytest.approx(model.dataset_bytes / 2)
