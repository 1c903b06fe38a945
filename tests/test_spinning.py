"""A step on the CPU whose OpenMP threads spin on the cores its DataLoader workers need.

tests/data/script_cpu: pytorch/examples' script trained on the CPU, 3 workers, at 1 and 2
CPUs. At 2 CPUs torch runs 2 threads (the harness's OMP_NUM_THREADS, from the CPU budget)
beside the workers on the same 2 cores; with OMP_WAIT_POLICY unset a waiting thread spins
(timm with 2 workers here, cached at 2 CPUs: 143-182 samples/s in 6 runs, 199-225 in 6 with
OMP_WAIT_POLICY=PASSIVE; README). The note names the runs where that holds, from what the
runs recorded; runs from before the policy was recorded get none.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dsanalyze import launch, store
from dsanalyze.analysis.notes import SpinningStep
from dsanalyze.analysis.summary import summarize
from dsanalyze.config import Job, Mode, Resources, RunSpec
from dsanalyze.records import RunResult
from dsanalyze.report.notes import note_text, notes

FIXTURE = Path(__file__).parent / "data" / "script_cpu"
UNSET = object()


def with_policy(run: RunResult, policy: object) -> RunResult:
    """The run as if the job had inherited OMP_WAIT_POLICY=`policy` (None: unset; UNSET:
    not recorded, as the fixture's runs are)."""
    threads = dict(run.environment["threads"])
    if policy is UNSET:
        threads.pop("omp_wait_policy", None)
    else:
        threads["omp_wait_policy"] = policy
    return dataclasses.replace(run, environment={**run.environment, "threads": threads})


def spinning(policy: object) -> dict[int | None, list[SpinningStep]]:
    """Each configuration's spinning-step notes, by its CPU count."""
    runs = [with_policy(r, policy) for r in store.load_runs(FIXTURE)]
    out: dict[int | None, list[SpinningStep]] = {}
    for cfg in summarize(runs).configs:
        out.setdefault(cfg.cpus, []).extend(n for n in cfg.notes if isinstance(n, SpinningStep))
    return out


def test_a_step_of_two_threads_beside_its_workers_with_the_policy_unset_is_named():
    found = spinning(None)
    # at 2 CPUs: every configuration there (cached runs shared), the same cached run
    assert found[2] and set(found[2]) == {SpinningStep("cached-cpus2", 2, 3, 2, None)}
    # at 1 CPU the step runs one thread a rank: it takes turns with the workers, no spin
    assert found[1] == []
    text = note_text(found[2][0])
    assert "2 OpenMP threads a rank on the 2 CPUs its 3 DataLoader worker(s)" in text
    assert "OMP_WAIT_POLICY unset" in text and "OMP_WAIT_POLICY=PASSIVE" in text
    # said once under the table, not once per configuration at 2 CPUs
    runs = [with_policy(r, None) for r in store.load_runs(FIXTURE)]
    assert notes(summarize(runs)).count(text) == 1


@pytest.mark.parametrize("policy,named", [
    ("PASSIVE", False), (" passive\n", False), (UNSET, False), ("ACTIVE", True)])
def test_the_policy_the_job_ran_with_decides(policy, named):
    found = spinning(policy)[2]
    assert bool(found) == named
    if named:
        assert found[0].policy == "ACTIVE" and "OMP_WAIT_POLICY=ACTIVE" in note_text(found[0])


def test_the_note_round_trips_through_the_summary():
    runs = [with_policy(r, None) for r in store.load_runs(FIXTURE)]
    summary = summarize(runs)
    again = type(summary).from_dict(summary.to_dict())
    assert [c.notes for c in again.configs] == [c.notes for c in summary.configs]


@pytest.mark.parametrize("env,expected", [({}, None), ({"OMP_WAIT_POLICY": "PASSIVE"}, "PASSIVE")])
def test_the_run_records_the_policy_the_job_inherits(monkeypatch, tmp_path, env, expected):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    spec = RunSpec(Job(data_dir=str(tmp_path), script="train.py"), Mode.CACHED, Resources(2))
    job_env, threads = launch.job_env(spec, tmp_path)
    assert threads["omp_wait_policy"] == expected
    assert job_env.get("OMP_WAIT_POLICY") == expected
