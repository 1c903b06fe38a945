"""Interference the old check missed, and the suspect cached/disk inversion it left in the table.

Real runs of a sweep on this machine (tests/data/report_12configs, CPUs 1 and 2 of 2, two
epochs), with the probe's figures or one run's timings changed as a neighbour would have
changed them; every expected figure is worked out here from the run's own numbers.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dsanalyze import store
from dsanalyze.analysis import interference, notes
from dsanalyze.analysis.interference import Interference
from dsanalyze.analysis.runrate import RunRate
from dsanalyze.analysis.summary import summarize
from dsanalyze.records import RunResult
from dsanalyze.report import plots
from dsanalyze.report.notes import note_text
from dsanalyze.report.notes import notes as report_notes
from dsanalyze.report.summary import render_table
from dsanalyze.report.verdicts import verdict_text

TWELVE = Path(__file__).parent / "data" / "report_12configs"


def run(run_id: str) -> RunResult:
    return store.read_run(store.run_path(TWELVE, run_id))


def with_probe(r: RunResult, **probe) -> RunResult:
    return dataclasses.replace(r, io=dataclasses.replace(r.io, interference=probe))


def test_a_neighbour_on_the_core_the_run_was_not_given_is_seen():
    """--cpus 1 of 2, its own CPU quiet, the other core 90% busy with another process: the old
    check (own CPUs only) said nothing."""
    r = run("cached-cpus1")
    window = r.io.interference["window_s"]
    quiet = with_probe(r, cpus=[0], window_s=window, machine_cpus=2, others_cpu_s=0.02 * window,
                       others_cpu_pct=2.0, machine_others_cpu_s=0.02 * window + 0.9 * window)
    found = interference.of_run(quiet)
    assert found["others_cpu_pct"] == 2.0 and found["others_outside_pct"] == pytest.approx(90.0)
    assert found["disturbed"] == ("machine",)
    note = notes.disturbed(RunRate(quiet.run_id, quiet.mode.value, quiet.status, **found))
    assert note == notes.Disturbed("cached", quiet.run_id, (Interference.MACHINE,), 2.0,
                                   pytest.approx(90.0), found["others_read_bytes"])
    said = note_text(note)
    # a cached run's rate is in the prep and the fetch stall
    assert "kept the CPUs it was not given 90% busy" in said and "prep stall" in said
    # the harness's own sampling and the kernel's work for the job: a few percent, no warning
    calm = with_probe(r, cpus=[0], window_s=window, machine_cpus=2, others_cpu_s=0.0,
                      others_cpu_pct=0.0, machine_others_cpu_s=0.05 * window)
    assert interference.of_run(calm)["disturbed"] == ()


def test_without_a_cgroup_the_monitor_samples_give_the_figure():
    """No cgroup, no cpuacct: others = machine busy - the job's process tree, per the samples."""
    r = with_probe(run("cached-cpus2"), cpus=[0, 1], window_s=20.0, machine_cpus=2)
    rows = [m for m in r.monitor if "machine_busy_s" in m and "tree_cpu_s" in m]
    a, b = rows[0], rows[-1]
    others = (b["machine_busy_s"] - a["machine_busy_s"]) - (b["tree_cpu_s"] - a["tree_cpu_s"])
    expected = 100 * others / ((b["unix_s"] - a["unix_s"]) * 2)
    found = interference.of_run(r)
    assert found["others_cpu_pct"] == pytest.approx(expected)
    assert expected > 10 and "cpu" in found["disturbed"]  # the loaded machine of that sweep


def slowed(r: RunResult, factor: float) -> RunResult:
    """The run as if every iteration had taken `factor` times as long."""
    ranks = [dataclasses.replace(k, iter_s=[t * factor for t in k.iter_s],
                                 wait_s=[t * factor for t in k.wait_s]) for k in r.ranks]
    return dataclasses.replace(r, ranks=ranks)


def test_cached_slower_than_disk_beyond_both_intervals_is_flagged_as_suspect():
    """The Lightning report: cached 2.5x slower than disk. The table printed a negative fetch
    stall as a finding; now it says suspect, and what it suspects."""
    cached = slowed(run("cached-cpus1"), 2.5)
    disk = run("disk-cpus1-cachenone-bwnone")
    runs = [run("synthetic-cpus1"), cached, disk]
    summary = summarize(runs)
    (cfg,) = summary.configs
    c, d = cfg.modes["cached"], cfg.modes["disk"]
    assert d.rate_sps_low > c.rate_sps_high  # apart beyond both intervals
    assert cfg.fetch_stall_significance == "suspect" and cfg.fetch_stall_s == 0.0
    table = render_table(summary)
    assert "suspect (see note)" in table
    (note,) = [n for n in cfg.notes if isinstance(n, notes.SuspectStall)]
    assert (note.stall, note.fast_mode, note.slow_mode) == ("fetch", "disk", "cached")
    # both runs had their other core busy: no more during the cached run, so drift is named
    assert note.cause is notes.Cause.DRIFT
    said = note_text(note)
    assert said.startswith("fetch stall suspect")
    assert f"({d.rate_sps:.1f} vs {c.rate_sps:.1f} samples/s)" in said
    assert "suspected: drift between the runs" in said and said in report_notes(summary)
    assert "compute-bound" not in verdict_text(cfg.verdict)
    # the figure: the bar stands at the table's epoch time, the fetch stall labelled suspect
    fig = plots.stall_breakdown(summary)
    ax = fig.axes[0]
    heights = sum(c.patches[0].get_height() for c in ax.containers if hasattr(c, "patches"))
    assert heights == pytest.approx(cfg.total_s, rel=1e-12)
    assert ax.texts[0].get_text().endswith("fetch suspect")


def test_the_suspect_note_names_outside_work_during_the_slow_run():
    cached = slowed(run("cached-cpus1"), 2.5)
    window = cached.io.interference["window_s"]
    cached = with_probe(cached, cpus=[0], window_s=window, machine_cpus=2, others_cpu_s=0.0,
                        others_cpu_pct=0.0, machine_others_cpu_s=0.95 * window)
    disk = with_probe(run("disk-cpus1-cachenone-bwnone"), cpus=[0], window_s=10.0,
                      machine_cpus=2, others_cpu_s=0.0, others_cpu_pct=0.0,
                      machine_others_cpu_s=0.5)
    (cfg,) = summarize([run("synthetic-cpus1"), cached, disk]).configs
    (note,) = [n for n in cfg.notes if isinstance(n, notes.SuspectStall)]
    # 0.95 of the window busy on the core it was not given; 0.5 s of 10 s on the disk run's
    assert note.cause is notes.Cause.OUTSIDE_WORK
    assert (note.slow_busy_pct, note.fast_busy_pct) == (pytest.approx(95.0), pytest.approx(5.0))
    assert "other work on the machine during the cached run: 95% of CPU busy outside the job " \
           "(5% during the disk run)" in note_text(note)
