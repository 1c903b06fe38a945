"""Sweep bookkeeping that needs no run: progress lines, prefix checks, job memory."""

from __future__ import annotations

import pytest

from dsanalyze import store, sweep
from dsanalyze.config import Job, Mode, Resources, RunSpec, Sweep
from dsanalyze.errors import ConfigError
from dsanalyze.records import RankRecord, RunResult

JOB = Job(data_dir="/d", batch_size=4)


def result(mode: Mode, cpus: int = 1, job: Job = JOB, **io) -> RunResult:
    rank = RankRecord(0, (0.0,) * 4, (0.1,) * 4, (0,) * 4, (4,) * 4, 0,
                      extra={"batches_per_epoch": 4})
    return RunResult(RunSpec(job, mode, Resources(cpus)), "ok", ranks=(rank,), io=io,
                     duration_s=12.0)


@pytest.mark.parametrize("i,n,measured,elapsed,remaining,eta", [
    (1, 4, 1, 10.0, 3, "ETA 0m30s"),
    (3, 9, 2, 100.0, 6, "ETA 5m00s"),
])
def test_progress_line_has_rate_interval_and_eta(i, n, measured, elapsed, remaining, eta):
    r = result(Mode.CACHED)
    line = sweep._progress_line(r.spec, r, measured, elapsed, remaining)
    assert line.startswith("cached-cpus1: 40.0 samples/s [40.0, 40.0] (12 s)") and line.endswith(eta)


def test_prefix_of_another_job_is_refused_with_the_difference(tmp_path):
    store.write_run(tmp_path, result(Mode.CACHED, job=Job(data_dir="/d", batch_size=8)))
    with pytest.raises(ConfigError, match="batch_size 8 now 4"):
        sweep.check_prefix(tmp_path, Sweep(JOB, prefix=str(tmp_path)))
    sweep.check_prefix(tmp_path, Sweep(Job(data_dir="/d", batch_size=8), prefix=str(tmp_path)))


def test_every_run_adds_the_files_it_mapped_to_those_warmed_before_disk_runs(tmp_path):
    ctx = sweep.launch.LaunchContext(tmp_path, None, None)
    sweep._remember_libraries(ctx, result(Mode.SYNTHETIC, mapped_files=("/v/a.so", "/v/b.so")))
    sweep._remember_libraries(ctx, result(Mode.DISK, mapped_files=("/v/c.so", "/v/a.so")))
    sweep._remember_libraries(ctx, result(Mode.CACHED))  # none recorded: nothing lost
    assert ctx.library_files == ("/v/a.so", "/v/b.so", "/v/c.so")


def test_a_fresh_sweep_sets_aside_an_earlier_sweeps_repeats(tmp_path):
    """Without --resume, repeat files an earlier sweep left for the same configurations would
    be pooled with the new runs: they are moved to superseded/, not deleted."""
    import dataclasses

    first = result(Mode.CACHED)
    for repeat in (1, 2, 3):
        store.write_run(tmp_path, dataclasses.replace(
            first, spec=dataclasses.replace(first.spec, repeat=repeat)))
    other = result(Mode.CACHED, cpus=2)
    store.write_run(tmp_path, dataclasses.replace(
        other, spec=dataclasses.replace(other.spec, repeat=2)))
    specs = Sweep(JOB, prefix=str(tmp_path), cpus=(1,), modes=(Mode.CACHED,)).run_specs(100)
    moved, folder = sweep.set_aside_stale_repeats(tmp_path, specs)
    assert moved == ["cached-cpus1-r2", "cached-cpus1-r3"]
    assert folder == tmp_path / store.SUPERSEDED
    assert sorted(store.read_run(p).run_id for p in folder.iterdir()) == moved
    left = sorted(r.run_id for r in store.load_runs(tmp_path))
    assert left == ["cached-cpus1", "cached-cpus2-r2"]  # another configuration's stay
    assert sweep.set_aside_stale_repeats(tmp_path, specs) == ([], None)
