"""The closed loop: `--verify` / `dsanalyze verify` measure the recommended configuration and
print it against its prediction (`whatif/verification.py`, `app.verify`)."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import copy_of, harness

from dsanalyze import app, cli, store
from dsanalyze.analysis.stalls import run_rate
from dsanalyze.config import Job
from dsanalyze.records import RunResult
from dsanalyze.report.advice import not_run_text, option_label, verify_text
from dsanalyze.resources import pagecache
from dsanalyze.whatif import api as whatif
from dsanalyze.whatif.advice import Advice, within
from dsanalyze.whatif.decision import Decision, DecisionKind, Option, predicted_option
from dsanalyze.whatif.rates import predict_run
from dsanalyze.whatif.validation import spec_only
from dsanalyze.whatif.verification import (
    REPEAT,
    NotRun,
    Unrunnable,
    Verification,
    verify_plan,
    with_workers,
)

PICK = Option(cpus=2, cpus_used=2, cache_spec="none", cache_bytes=None, storage_read_bps=None,
              workers=4, rate_sps=100.0, span_s=1.0, stall_pct=1.0, nproc=1)


@pytest.mark.parametrize("args,expected", [
    (("--epochs", "2", "--workers", "2"), ("--epochs", "2", "--workers", "8")),
    (("-j", "2", "data"), ("-j", "8", "data")),
    (("--num-workers=2",), ("--num-workers=8",)),
    (("--num_workers", "2"), ("--num_workers", "8")),
])
def test_a_script_workers_flag_is_set(args, expected):
    job = Job(script="/x/train.py", script_args=args)
    assert with_workers(job, 8).script_args == expected


def test_a_kept_configuration_s_fastest_prediction_is_what_verify_measures():
    """The advice kept a measured configuration and named the fastest prediction, within the
    model's noise of it: "measure it before changing". `verify` measured the kept one again
    instead (a Kaggle-style script, tests/data/script_csv: kept cpus=1 bw=4M/s, named 2 CPUs
    with 1 worker). It now measures the one named, where this machine can run it, and says
    how it ran against the kept configuration's measured rate; where it cannot (more CPUs
    than the machine's), the kept configuration is measured again as before."""
    kept = Option(cpus=1, cpus_used=1, cache_spec="none", cache_bytes=None,
                  storage_read_bps=4 << 20, workers=2, rate_sps=200.0, span_s=6.2,
                  stall_pct=20.0, measured=True, run_id="disk-cpus1-cachenone-bw4M", nproc=1)
    unsure = replace(PICK, workers=1, rate_sps=214.0, rate_sps_low=170.0, rate_sps_high=270.0)
    keep = Decision(DecisionKind.KEEP, 2, 5.0, kept, kept, workers=2, unsure=unsure)
    job = Job(script="/x/train.py", script_args=("--num-workers", "2"))
    plan = verify_plan(keep, job, machine_cpus=2)
    assert plan.runnable and plan.kept == kept and plan.choice == unsure
    assert plan.job.script_args == ("--num-workers", "1") and plan.resources.cpus == 2
    assert plan.sub_prefix == "verify-workers1"
    # beyond this machine: the kept configuration, measured again
    again = verify_plan(keep, job, machine_cpus=1)
    assert again.runnable and again.kept is None and again.choice == kept
    assert again.sub_prefix == REPEAT and again.job == job
    v = Verification(unsure, "disk-cpus2-cachenone-bwnone", 214.0, 170.0, 270.0, 230.0, 0.9,
                     214.0, "verify-workers1", kept=kept)
    said = verify_text(plan, v)
    assert said.startswith("Verify: the fastest prediction, which the advice said to measure "
                           "before changing: cpus=2 cache=unlimited bw=unthrottled workers=1")
    assert said.endswith("The kept cpus=1 cache=unlimited bw=4M/s measured 200.0 steady: this "
                         "one ran 15.0% faster.")  # 230 / 200
    assert Verification.from_dict(json.loads(json.dumps(v.to_dict()))) == v


def test_what_cannot_run_here_says_why():
    job = Job(script="/x/train.py", script_args=("--epochs", "2"))
    change = Decision(DecisionKind.CHANGE, 2, 5.0, PICK, None, workers=2)
    plan = verify_plan(change, job, machine_cpus=8)
    assert not plan.runnable and plan.reason == NotRun(Unrunnable.NO_WORKERS_FLAG, workers=4)
    said = verify_text(plan)
    assert said.startswith("Verify: not run: the script's arguments name no workers flag")
    assert "run it with 4 workers yourself" in said
    plan = verify_plan(change, Job(), machine_cpus=1)  # the built-in job: workers are -j
    assert plan.reason == NotRun(Unrunnable.CPUS, cpus=2, machine_cpus=1)
    assert verify_text(plan) == ("Verify: not run: it needs 2 CPUs; the harness may use 1 here: "
                                 "measure it on a larger machine.")
    built_in = verify_plan(change, Job(), machine_cpus=2)
    assert built_in.runnable and built_in.job.workers == 4
    assert built_in.sub_prefix == "verify-workers4"  # another job: not mixed into the prefix
    faster = replace(change, choice=replace(PICK, workers=2, gpu_speedup=2.0))
    assert verify_plan(faster, Job(), 8).reason == NotRun(Unrunnable.FASTER_STEP, gpu_speedup=2.0)
    assert "2x faster" in verify_text(verify_plan(faster, Job(), 8))
    measured = Decision(DecisionKind.MEASURED, 2, 5.0, replace(PICK, measured=True,
                                                               run_id="disk-cpus2"), None)
    again = verify_plan(measured, Job(), 8)  # its run is in the fit: a fresh one checks it
    assert again.runnable and again.sub_prefix == REPEAT and again.job == Job()
    assert again.resources.cpus == PICK.cpus_used
    assert verify_plan(measured, Job(), 1).reason == NotRun(Unrunnable.CPUS, cpus=2,
                                                            machine_cpus=1)
    remote = replace(measured, choice=replace(measured.choice, net_latency_s=0.02))
    assert verify_plan(remote, Job(), 8).reason == NotRun(Unrunnable.MEASURED, run_id="disk-cpus2")
    assert verify_text(verify_plan(remote, Job(), 8)) == (
        "Verify: not run: the recommended configuration was measured (disk-cpus2) over a "
        "network: verify runs local data only.")


def _harness(data: Path, prefix: Path, *extra: object) -> int:
    """A prep-bound job: one CPU, one worker, 8 JPEGs per 5 ms step."""
    return harness("--data", data, "--prefix", prefix, "--cpus", 1, "-b", 8, "-j", 1,
                   "--sim-step-ms", 5, "--iters", 6, "--warmup", 2, "--no-plots",
                   "--no-cgroups", *extra)


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(data, prefix): the sweep that both tests below verify from (synthetic, cached and
    disk runs), made once; each test works on its own copy of the prefix."""
    root = tmp_path_factory.mktemp("verify")
    data = root / "data"
    assert cli.main(["make-dataset", str(data), "--images", "48", "--classes", "2",
                     "--size", "320x240", "--seed", "3"]) == 0
    assert _harness(data, root / "prefix", "--no-advice") == 0
    return data, root / "prefix"


def _a_library_the_runs_mapped(prefix: Path, runs: list[RunResult]) -> Path:
    """A 4 MiB file, not in the page cache, added to what each stored run's processes mapped
    (as a library the job loads): what a disk run of the prefix reads back first."""
    lib = prefix.parent / "libjob.so"
    lib.write_bytes(os.urandom(4 << 20))
    pagecache.evict([str(lib)])
    assert pagecache.file_resident_bytes(str(lib)) == 0
    for r in runs:
        mapped = (*(r.io.mapped_files or ()), str(lib))
        store.write_run(prefix, replace(r, io=replace(r.io, mapped_files=mapped)))
    return lib


@pytest.mark.slow
@pytest.mark.long
def test_verify_measures_a_recommended_worker_count(tmp_path, swept):
    """A prep-bound job at one CPU and one worker; the decision "2 workers" is run for real
    (the built-in job's -j, into a sub-prefix) and judged by the model fitted before it,
    measured as the sweep's disk runs were: the job's code its runs mapped, evicted since,
    read back before it (the sub-prefix holds none of those runs to learn it from)."""
    prefix = Path(shutil.copytree(swept[1], tmp_path / "prefix"))
    lib = _a_library_the_runs_mapped(prefix, store.load_runs(prefix))
    runs = store.load_runs(prefix)
    model = whatif.fit(runs)
    p = whatif.predict(model, whatif.Config.of(1, workers=2))
    d = Decision(DecisionKind.CHANGE, 1, 5.0, predicted_option(p, 1), None, workers=1,
                 prediction=p)
    v = app.verify(prefix, Advice(d, model=model), use_cgroups=False)
    assert v.plan.runnable and v.result is not None, v.failed or v.plan.reason
    (run,) = store.load_runs(prefix / "verify-workers2")
    assert run.spec.job.workers == 2 and run.spec.resources.cpus == 1 and run.ok
    assert run.io.cache_state["libraries_warmed_files"] >= 1  # read back before it
    assert run.io.cache_state["libraries_warmed_bytes"] >= lib.stat().st_size
    assert len(store.load_runs(prefix)) == len(runs)  # the prefix keeps one job
    r = v.result
    assert r.measured_sps == pytest.approx(run_rate(run).rate_sps)
    assert r.predicted_sps == pytest.approx(predict_run(model, spec_only(run)).rate_sps)
    assert r.low_sps < r.predicted_sps < r.high_sps
    assert r.inside == (r.low_sps <= r.measured_sps <= r.high_sps)
    line = verify_text(v.plan, r)
    assert f"measured {r.measured_sps:.1f}: " in line
    assert ("inside the interval" if r.inside else "OUTSIDE the interval") in line


@pytest.mark.slow
def test_harness_verify_checks_its_own_advice(tmp_path, capsys, swept):
    """`harness.py --verify`: after the advice, its recommended configuration measured into
    the prefix when this machine can run it, else the one-line reason (the sweep's runs
    resumed from the shared one, as a rerun with --resume --verify would)."""
    data, prefix = swept[0], Path(shutil.copytree(swept[1], tmp_path / "prefix"))
    capsys.readouterr()
    assert _harness(data, prefix, "--resume", "--verify") == 0
    out = capsys.readouterr().out.splitlines()
    assert "resumed: 3 run(s) already complete, skipped" in out
    (advice,) = [s for s in out if s.startswith("Advice: ")]
    (line,) = [s for s in out if s.startswith("Verify: ")]
    assert out.index(line) == out.index(advice) + 1
    runs = store.load_runs(prefix)
    before = [r for r in runs if not r.run_id.startswith("disk-")] + \
        [r for r in runs if r.run_id == "disk-cpus1-cachenone-bwnone"]
    a = app.advise(prefix, before).advice  # the harness's advice, on the runs before
    cpus = len(os.sched_getaffinity(0))
    plan = verify_plan(a.decision, runs[0].spec.job, cpus, a.note)
    if not plan.runnable and plan.reason.why is Unrunnable.CPUS:  # the best it can run instead
        here = verify_plan(within(a, before, cpus), runs[0].spec.job, cpus, a.note)
        if here.runnable:
            assert line.startswith(f"Verify: the advice's pick, {option_label(plan.choice)} ")
            assert "checked here instead: the advice confined to this machine's CPUs, " in line
            plan = here
    if not plan.runnable:
        assert line == f"Verify: not run: {not_run_text(plan.reason)}." and len(runs) == len(before)
    else:
        folder = prefix / plan.sub_prefix if plan.sub_prefix else prefix
        made = [r for r in store.load_runs(folder) if r.spec.resources == plan.resources
                and r.spec.job == plan.job]
        assert made and f"measured {run_rate(made[0]).rate_sps:.1f}: " in line


@pytest.mark.slow
@pytest.mark.long
def test_a_pick_beyond_this_machine_is_checked_by_the_best_one_it_can_run(tmp_path, swept):
    """The prep-bound job at one CPU: its advice asks for more CPUs than a one-CPU machine
    has. `verify` there measures the advice confined to one CPU in its place (the same
    decision over the grid's one-CPU predictions), names the pick it stands for, and keeps
    the check as a `Verification` that reads back from its JSON."""
    prefix = Path(shutil.copytree(swept[1], tmp_path / "prefix"))
    runs = store.load_runs(prefix)
    a = app.advise(prefix, runs).advice
    pick = a.decision.choice
    assert pick.cpus_used > 1  # decoding on one CPU cannot keep up: more CPUs
    v = app.verify(prefix, a, use_cgroups=False, machine_cpus=1)
    assert v.plan.runnable and v.result is not None, v.failed or v.plan.reason
    assert v.plan.reason == NotRun(Unrunnable.CPUS, cpus=pick.cpus_used, machine_cpus=1)
    r = v.result
    assert r.stands_for == pick and r.choice.cpus_used == 1
    here = within(a, runs, 1)
    # the confined decision's own check: its pick, or where it keeps the measured one with a
    # prediction ahead of it by its point, that prediction ("measure it before changing")
    checked = verify_plan(here, runs[0].spec.job, 1, a.note).choice
    assert here.choice.cpus_used == 1 and (r.refused or r.choice == checked)
    assert r.choice.cpus_used == 1
    run = next(x for x in store.load_runs(prefix / r.where) if x.run_id == r.run_id)
    assert run.ok and run.spec.resources.cpus == 1
    assert r.measured_sps == pytest.approx(run_rate(run).rate_sps)
    assert r.predicted_sps == pytest.approx(predict_run(a.model, spec_only(run)).rate_sps)
    assert r.low_sps < r.predicted_sps < r.high_sps
    assert v.text.startswith(f"Verify: the advice's pick, {option_label(pick)} workers="
                             f"{pick.workers}, cannot run here (it needs {pick.cpus_used} CPUs; "
                             "the harness may use 1 here")
    assert "; checked here instead: the advice confined to this machine's CPUs, " in v.text
    assert f"measured {r.measured_sps:.1f}: " in v.text
    assert Verification.from_dict(json.loads(json.dumps(r.to_dict()))) == r


def test_cli_verify_beyond_this_machine_without_the_data_says_what_to_do(tmp_path, capsys):
    """The committed prep-bound runs at one CPU: the advice's pick needs more CPUs than this
    machine lets the harness use, so `dsanalyze verify` would measure the best configuration
    it can run in its place; the runs' data is gone (only their records are committed): one
    line that says what to do, exit 2, and no run added."""
    prefix = copy_of("whatif_prep", tmp_path)
    runs = store.load_runs(prefix)
    a = app.advise(prefix, runs).advice
    cpus = len(os.sched_getaffinity(0))
    if a.decision.choice.cpus_used <= cpus:
        pytest.skip(f"this machine can run the pick ({cpus} CPUs): the end-to-end tests run one")
    assert not Path(runs[0].spec.job.data_dir).exists()
    assert cli.main(["verify", str(prefix), "--no-cgroups"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: dataset directory {runs[0].spec.job.data_dir} does not exist")
    assert len(err.strip().splitlines()) == 1 and "make-dataset" in err
    assert len(store.load_runs(prefix)) == len(runs)


def test_a_run_that_others_disturbed_does_not_settle_the_check():
    """A check is as fair as its run: the same committed disk run, once with the CPUs its
    own (others used none of them), once with others on them beyond the threshold the
    table's notes use: only the first is conclusive, the second says so and why."""
    from dsanalyze.settings import SETTINGS
    from dsanalyze.whatif.verification import verification

    runs = store.load_runs(Path(__file__).parent / "data" / "whatif_prep")
    model = whatif.fit(runs)
    disk = next(r for r in runs if r.mode.value == "disk")
    d = Decision(DecisionKind.MEASURED, 1, 5.0, replace(PICK, measured=True, run_id=disk.run_id),
                 None)
    plan = verify_plan(d, Job(), 8)

    def probed(others_pct: float):
        io = replace(disk.io, interference={**(disk.io.interference or {}), "cpus": [0],
                                            "machine_cpus": 2, "window_s": 10.0,
                                            "others_cpu_pct": others_pct, "others_cpu_s": 0.0,
                                            "machine_others_cpu_s": 0.0})
        return verification(model, plan, replace(disk, io=io))

    quiet, busy = probed(0.0), probed(SETTINGS.others_cpu_pct + 30)
    assert quiet.conclusive and "Not conclusive" not in verify_text(plan, quiet)
    assert not busy.conclusive and busy.measured_sps == quiet.measured_sps
    said = verify_text(plan, busy)
    assert f"other processes used {SETTINGS.others_cpu_pct + 30:.0f}% of its CPUs" in said
    assert said.endswith("verify again when the machine is quiet.")
    assert "(in verify-repeat/: measured again, a run the fit never saw)" in said
    assert busy.to_dict()["disturbed"]["kinds"] == ["cpu"]


@pytest.mark.slow
def test_a_check_older_than_the_sweeps_runs_is_measured_again(tmp_path, swept):
    """A check's run stored by an earlier `verify`, before the prefix's runs were measured
    (here: the prefix's own disk run, started 1000 s before any of them): the check measures
    the configuration again and sets the old run aside, kept. Verified again at once, the
    new run is newer than every run of the fit: it is the check, read back, not measured a
    third time."""
    prefix = Path(shutil.copytree(swept[1], tmp_path / "prefix"))
    runs = store.load_runs(prefix)
    disk = next(r for r in runs if r.mode.value == "disk")
    first = min(r.started_unix_s for r in runs)
    older = replace(disk, started_unix_s=first - 1000.0)
    store.write_run(prefix / REPEAT, older)
    model = whatif.fit(runs)
    d = Decision(DecisionKind.MEASURED, 1, 5.0, replace(PICK, cpus=1, cpus_used=1, workers=1,
                                                        measured=True, run_id=disk.run_id), None)
    v = app.verify(prefix, Advice(d, model=model), use_cgroups=False)
    assert v.plan.sub_prefix == REPEAT and v.result is not None, v.failed or v.plan.reason
    aside = prefix / v.superseded
    assert aside.parent == prefix / REPEAT / "superseded"
    assert store.read_run(aside).started_unix_s == older.started_unix_s  # kept as it was
    (again,) = store.load_runs(prefix / REPEAT)
    newest = max(r.started_unix_s + r.duration_s for r in runs)
    assert again.started_unix_s >= newest and again.run_id == disk.run_id
    assert v.result.measured_sps == pytest.approx(run_rate(again).rate_sps)
    assert v.text.endswith(f"An earlier check's run of it, older than the sweep's runs, was set "
                           f"aside in {v.superseded}.")
    v2 = app.verify(prefix, Advice(d, model=model), use_cgroups=False)
    assert not v2.superseded and v2.result.measured_sps == v.result.measured_sps
    (same,) = store.load_runs(prefix / REPEAT)
    assert same.started_unix_s == again.started_unix_s
