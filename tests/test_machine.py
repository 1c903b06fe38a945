"""The machine under the job: its parallel efficiency and the work outside the job's cgroup.

The probe (`resources/cpuscale.py`) decodes real JPEGs in real pinned processes. The
what-if model's use of both is checked on the committed whatif_prep runs (real runs at 1
CPU, prep-bound: see tests/test_whatif.py), with the figures a sweep records added: the
probe's `environment["cpu_scaling"]`, and monitor samples of the machine's and the
cgroup's CPU seconds (`machine_busy_s`, `cpu_usage_s`) with `machine_cpus`.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import with_probed_contention

from dsanalyze import store
from dsanalyze.analysis import interference
from dsanalyze.analysis.stalls import run_rate
from dsanalyze.config import Mode
from dsanalyze.dataset import scan_dataset
from dsanalyze.records import CpuScaling
from dsanalyze.resources import cpuscale
from dsanalyze.whatif import api as whatif
from dsanalyze.whatif.assumptions import Law
from dsanalyze.whatif.laws import usable_cpus
from dsanalyze.whatif.provenance import Fixed, ProbedContention, Reason

DATA = Path(__file__).parent / "data"
TWO_CPUS = len(os.sched_getaffinity(0)) >= 2


@pytest.mark.whole_machine
@pytest.mark.skipif(not TWO_CPUS, reason="the parallel phase needs two CPUs")
def test_probe_measures_solo_and_parallel_cpu_per_decode(small_dataset: Path) -> None:
    files = scan_dataset(small_dataset).files
    found = cpuscale.measure(files, phase_s=0.15, rounds=1)
    assert found.why is None and found.work == "decode"
    assert found.cpus == len(os.sched_getaffinity(0)) and found.items > 0
    # a 500 x 375 JPEG decodes and resizes in well under 50 ms, and in more than 0.1 ms
    assert 1e-4 < found.solo_cpu_s < 0.05 and 1e-4 < found.parallel_cpu_s < 0.05
    assert found.contention == pytest.approx(max(0.0, (found.parallel_cpu_s / found.solo_cpu_s
                                                       - 1) / (found.cpus - 1)))
    assert found.contention >= 0 and found.probe_s < 10
    assert CpuScaling.from_dict(found.to_dict()) == found
    # one CPU cannot run in parallel (said, never raised)
    alone = cpuscale.measure(files, cpu_ids=[0])
    assert alone.contention is None and "one CPU" in alone.why


def _prep_runs() -> list:
    return store.load_runs(DATA / "whatif_prep")


def test_one_cpu_count_takes_the_machines_probe_as_its_contention() -> None:
    """Fitted on 1 CPU: without a probe each extra core adds a full core (2 CPUs predicted
    2x 1 CPU, prep-bound); with the probe's 0.08, 2 CPUs give 2 / 1.08 of 1 CPU."""
    bare = whatif.fit(_prep_runs())
    model = whatif.fit(with_probed_contention(_prep_runs(), 0.08, cpus=2))
    assert bare.contention == 0 and not bare.contention_probed
    assert model.contention == pytest.approx(0.08) and model.contention_probed
    assert model.prep_cpu_s == pytest.approx(bare.prep_cpu_s, rel=1e-9)  # k = 1: no change
    (param,) = [p for p in model.params if p.name == "contention"]
    assert isinstance(param.how, ProbedContention) and len(param.runs) == 4
    one, two = (whatif.predict(model, whatif.Config.of(c)).rate_sps for c in (1, 2))
    bare_two = whatif.predict(bare, whatif.Config.of(2)).rate_sps
    assert two < 2 * one and two == pytest.approx(bare_two / 1.08, rel=0.02)
    assert any(u.law is Law.PROBED for u in whatif.predict(model, whatif.Config.of(2)).untested)


def _with_outside(run, others_cores: float):
    """The run with monitor samples over its iterations: the job's cgroup busy 0.9 cores,
    the machine's 2 cores busy `others_cores` more."""
    r0 = run.ranks[0]
    t0, t1 = r0.start_unix_s, r0.start_unix_s + sum(r0.iter_s)
    ts = [t0 + (t1 - t0) * i / 39 for i in range(40)]
    samples = tuple({"unix_s": t, "cpu_usage_s": 0.9 * (t - t0),
                     "machine_busy_s": 1e4 + (0.9 + others_cores) * (t - t0)} for t in ts)
    return replace(run, monitor=samples, io=replace(run.io, interference={"machine_cpus": 2}))


def test_work_outside_the_cgroup_takes_cores_only_from_a_job_with_every_core() -> None:
    """0.3 cores of outside work at 1 CPU of 2 run on the free core: 1 CPU is predicted as
    before. At 2 CPUs of 2 the job keeps 2 - others' cores, others' cores = per sample x
    the rate it settles at, and prep-bound its rate shrinks with them."""
    runs = [_with_outside(r, 0.3) if r.mode is not Mode.SYNTHETIC else r for r in _prep_runs()]
    cached = next(r for r in runs if r.mode is Mode.CACHED)
    per_sample = interference.outside_cpu_s_per_sample(cached)
    assert per_sample == pytest.approx(0.3 / run_rate(cached).rate_sps, rel=0.05)
    bare, model = whatif.fit(_prep_runs()), whatif.fit(runs)
    assert model.machine_cpus == 2 and model.others_cpu_s_per_sample > 0
    assert model.others_disk_cpu_s_per_sample > 0
    names = {p.name: p for p in model.params}
    assert names["others_cpu_s_per_sample[disk]"].runs == ("disk-cpus1-cachenone-bwnone",)
    assert set(names["others_cpu_s_per_sample[cached]"].runs) == {"cached-cpus1", "loader-cpus1"}
    one = whatif.Config.of(1)
    assert whatif.predict(model, one).rate_sps == pytest.approx(
        whatif.predict(bare, one).rate_sps, rel=1e-9)
    two = whatif.Config.of(2)
    got, free = whatif.predict(model, two).rate_sps, whatif.predict(bare, two).rate_sps
    cores = usable_cpus(model, two, Mode.DISK, got)
    assert 1.0 < cores < 1.8
    assert got / free == pytest.approx(cores / 2, rel=0.05)


def test_another_process_on_a_core_the_job_left_free_is_not_the_jobs_outside_work() -> None:
    """At 1 CPU of 2 a process busy on the other core is seen by no interference check (it
    is not on the run's CPUs) but lands in the machine-wide figure: ten times the other
    runs' outside work is set aside, named, and does not take cores from 2-CPU predictions."""
    def outside(r):
        return _with_outside(r, 0.9 if r.run_id == "cached-cpus1" else 0.03)
    runs = [outside(r) if r.mode is not Mode.SYNTHETIC else r for r in _prep_runs()]
    quiet = [_with_outside(r, 0.03) if r.mode is not Mode.SYNTHETIC else r for r in _prep_runs()]
    model, calm = whatif.fit(runs), whatif.fit(quiet)
    names = {p.name: p for p in model.params}
    cached = names["others_cpu_s_per_sample[cached]"]
    assert cached.runs == ("loader-cpus1",)
    assert [i for i, _ in cached.how.foreign] == ["cached-cpus1"]
    loader = next(r for r in runs if r.run_id == "loader-cpus1")
    assert model.others_cpu_s_per_sample == pytest.approx(
        interference.outside_cpu_s_per_sample(loader))
    two = whatif.Config.of(2)
    assert whatif.predict(model, two).rate_sps == pytest.approx(
        whatif.predict(calm, two).rate_sps, rel=0.02)
    # every run alike: nothing is set aside
    assert not {p.name: p for p in calm.params}["others_cpu_s_per_sample[cached]"].how.foreign


def test_records_without_the_machine_figures_predict_as_before() -> None:
    """Old runs (no probe, no machine-wide samples): contention 0, no outside work, said."""
    model = whatif.fit(_prep_runs())
    assert model.others_cpu_s_per_sample == 0 and model.others_disk_cpu_s_per_sample == 0
    (param,) = [p for p in model.params if p.name == "others_cpu_s_per_sample"]
    assert param.value == 0 and param.how == Fixed(Reason.OTHERS_PREDATE)
    assert usable_cpus(model, whatif.Config.of(2), Mode.DISK, 500.0) == 2
    assert all(CpuScaling.of_run(r) is None for r in _prep_runs())
