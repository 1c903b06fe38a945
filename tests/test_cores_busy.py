"""The cores a run's job kept busy in its steady window (`window.window_cores_busy`), carried
to the stall table's "CPUs busy" column.

The runs are made by hand, so the answers come from arithmetic: 10 samples an iteration, 10
iterations an epoch; a disk run's cold first epoch of 0.5-s iterations from T0, then a
steady second one whose window starts at T0 + 5 s; the monitor reads the cgroup's CPU time
every 0.2 s.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsanalyze.analysis.runrate import run_rate
from dsanalyze.analysis.stalls import breakdowns
from dsanalyze.analysis.summary import summarize
from dsanalyze.analysis.window import steady_window, window_cores_busy
from dsanalyze.config import CacheBudget, Job, Mode, Resources, RunSpec
from dsanalyze.records import IoRecord, RankRecord, RunResult
from dsanalyze.report.summary import COLUMNS, table_rows

JOB = Job(data_dir="/d", batch_size=10)
T0 = 1000.0


def rank(iters: list[float], epochs: list[int], warmup: int = 0) -> RankRecord:
    n = len(iters)
    return RankRecord(0, (0.0,) * n, tuple(iters), tuple(epochs), (10,) * n, warmup, T0,
                      extra={"batches_per_epoch": 10})


def disk_run(cold_cores: float, steady_cores: float, cpus: int = 2, nodes: bool = False,
             cgroup: bool = True, period_s: float = 0.2, offset_s: float = 0.0) -> RunResult:
    """A cold epoch of 10 x 0.5 s at `cold_cores` busy, then 10 x 0.1 s from T0 + 5 s at
    `steady_cores` busy, and 1 s more after the run's last iteration at 3 cores (what
    follows the window: the harness's own work, the next run's start) - a run the monitor
    samples every `period_s` from `offset_s` after T0."""
    def cpu_s(t: float) -> float:
        return cold_cores * min(t, 5) + steady_cores * min(1.0, max(0.0, t - 5)) \
            + 3 * max(0.0, t - 6)

    times = [offset_s + period_s * i for i in range(int((7 - offset_s) / period_s))]
    monitor = tuple({"unix_s": T0 + t, **({"cpu_usage_s": cpu_s(t)} if cgroup else {})}
                    for t in times)
    io = IoRecord(nodes={"0": {}, "1": {}} if nodes else {})
    return RunResult(RunSpec(JOB, Mode.DISK, Resources(cpus, CacheBudget.parse("none"))), "ok",
                     ranks=(rank([0.5] * 10 + [0.1] * 10, [0] * 10 + [1] * 10),),
                     dataset={"files": 100}, io=io, monitor=monitor)


def test_the_window_counts_its_own_cores_not_the_cold_epochs_or_what_follows():
    r = disk_run(cold_cores=1.9, steady_cores=0.6)
    assert window_cores_busy(r, steady_window(r)) == pytest.approx(0.6)
    rate = run_rate(r)
    assert rate.cores_busy == pytest.approx(0.6) and rate.cpus == 2


@given(st.floats(0.0, 8.0), st.floats(0.0, 8.0), st.sampled_from([0.05, 0.1, 0.2, 0.25]),
       st.floats(0.0, 0.05))
def test_a_steady_load_is_read_back_whatever_the_sampling(cold, steady, period_s, offset_s):
    r = disk_run(cold, steady, period_s=period_s, offset_s=offset_s)
    assert window_cores_busy(r, steady_window(r)) == pytest.approx(steady, abs=1e-9)


def test_not_counted_without_the_cgroup_for_several_nodes_or_a_window_between_two_samples():
    for r in (disk_run(1, 1, cgroup=False), disk_run(1, 1, nodes=True),
              disk_run(1, 1, period_s=0.7)):  # the 1-s window holds one sample
        assert window_cores_busy(r, steady_window(r)) is None


def test_the_table_shows_the_cached_runs_cores_of_its_cpus():
    cached = RunResult(RunSpec(JOB, Mode.CACHED, Resources(2)), "ok",
                       ranks=(rank([0.1] * 20, [0] * 10 + [1] * 10, warmup=2),),
                       dataset={"files": 100},
                       monitor=tuple({"unix_s": T0 + 0.2 * i, "cpu_usage_s": 1.5 * 0.2 * i}
                                     for i in range(12)))
    disk = disk_run(1.0, 0.4)
    (cfg,) = summarize([cached, disk]).configs
    assert cfg.modes["cached"].cores_busy == pytest.approx(1.5)
    assert cfg.modes["disk"].cores_busy == pytest.approx(0.4)
    (row,) = table_rows(summarize([cached, disk]))[:1]
    assert row[COLUMNS.index("CPUs busy")] == "1.50/2"
    # no cached run: nothing to show
    assert table_rows(summarize([disk]))[0][COLUMNS.index("CPUs busy")] == "-"
    # repeats: the mean of those counted
    (b,) = breakdowns([cached, RunResult.from_dict({**cached.to_dict(), "monitor": []}), disk])
    assert b.modes["cached"].cores_busy == pytest.approx(1.5)


def tree_run(counts: list[float]) -> RunResult:
    """A cached run without cgroups (`--no-cgroups`): 20 x 0.1 s from T0 after 2 warm-up
    iterations, the process tree's CPU time sampled every 0.2 s from T0 as `counts`."""
    return RunResult(RunSpec(JOB, Mode.CACHED, Resources(2)), "ok",
                     ranks=(rank([0.1] * 20, [0] * 10 + [1] * 10, warmup=2),),
                     dataset={"files": 100},
                     monitor=tuple({"unix_s": T0 + 0.2 * i, "tree_cpu_s": c}
                                   for i, c in enumerate(counts)))


def test_without_cgroups_the_process_trees_count_serves_unless_it_falls():
    steady = tree_run([1.2 * 0.2 * i for i in range(12)])
    assert window_cores_busy(steady, steady_window(steady)) == pytest.approx(1.2)
    # a worker ended and its time left the count (a run recorded before the tree counted the
    # workers its main process reaped): no figure rather than a wrong one
    fell = tree_run([1.2 * 0.2 * i - (2.0 if i >= 6 else 0.0) for i in range(12)])
    assert window_cores_busy(fell, steady_window(fell)) is None
