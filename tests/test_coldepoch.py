"""The cold first epoch beside the steady state: `analysis/coldepoch.py` and the table."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from pathlib import Path

import pytest
from conftest import harness, needs_cgroups

from dsanalyze import store
from dsanalyze.analysis.coldepoch import ColdEpoch, cold_bound
from dsanalyze.analysis.fetchbound import fetch_bound
from dsanalyze.analysis.summary import summarize
from dsanalyze.config import CacheBudget, Mode
from dsanalyze.report import summary as report
from dsanalyze.report.verdicts import cold_text

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("epoch_s,prep_s,fetch_s,text", [
    (5.5, 0.2, 4.5, "highly fetch-bound, 4.5 s of 5.5 s waiting on storage"),
    (10.0, 1.5, 0.5, "prep-bound, 1.5 s of 10.0 s waiting on pre-processing"),
    (10.0, 0.2, 0.1, "compute-bound, 0.3 s of 10.0 s stalled"),
])
def test_cold_verdict(epoch_s, prep_s, fetch_s, text):
    """The cold epoch's bound (analysis), worded by the report with the epoch's own seconds."""
    bound, highly = cold_bound(epoch_s, prep_s, fetch_s)
    cold = ColdEpoch(epoch_s, None, None, prep_s, fetch_s, None, 100 * fetch_s / epoch_s,
                     bound, highly)
    assert cold_text(cold) == text


def test_a_sweep_of_one_epoch_says_its_disk_figures_are_cold():
    summary = summarize(store.load_runs(DATA / "report_sweep"))  # --epochs 1
    assert all(c.cold_only and c.cold_epoch is None for c in summary.configs)
    notes = report.notes(summary)
    assert any(n.startswith("disk figures are the cold first epoch") and "--epochs 2" in n
               for n in notes)


def test_one_epoch_under_a_cache_of_zero_is_its_steady_state():
    """At cache 0 every epoch reads every file: the one measured is the steady state, and
    the table says nothing of a cold epoch (the same sweep's runs, their budget set to 0)."""
    runs = store.load_runs(DATA / "report_sweep")
    zero = [dataclasses.replace(r, spec=dataclasses.replace(
        r.spec, resources=dataclasses.replace(r.spec.resources, cache=CacheBudget.parse("0"))))
        for r in runs]
    summary = summarize(zero)
    assert summary.configs and not any(c.cold_only for c in summary.configs)
    assert not any(n.startswith("disk figures are the cold first epoch")
                   for n in report.notes(summary))


@pytest.mark.slow
@needs_cgroups
@pytest.mark.long
def test_two_throttled_epochs_with_unlimited_cache_show_the_cold_fetch_stall(
        small_dataset, tmp_path, capsys):
    prefix = tmp_path / "r"
    old = os.umask(0o022)
    try:
        rc = harness("--data", small_dataset, "--prefix", prefix, "--storage-bw", "1M",
                     "--epochs", 2, "--warmup", 1, "-b", 8, "-j", 2, "--sim-step-ms", 50,
                     "--no-plots", "--no-advice")
    finally:
        os.umask(old)
    assert rc == 0
    lines = capsys.readouterr().out.splitlines()
    (row,) = [s for s in lines if s.startswith("cpus=all cache=unlimited bw=1M/s ")]
    cold = lines[lines.index(row) + 1]
    cfg = json.loads((prefix / "summary.json").read_text())["configs"][0]
    c = cfg["cold_epoch"]
    # steady epochs come from the page cache: their window read under 2% of the 9 MB the
    # first read at 1 MB/s (over 8 s). Its fetch stall is 0 (`fetchbound`) unless what it did
    # read, at 1 MB/s, could hold it beyond the noise floor (the epoch's new workers have read
    # up to 74 KB of the job's own files there: 7% of a 0.7-s window)
    (disk,) = [r for r in store.load_runs(prefix) if r.mode is Mode.DISK]
    bound = fetch_bound(disk)
    assert bound.window_read_bytes < 0.02 * disk.dataset.total_bytes
    assert (cfg["fetch_stall_significance"] == "unread") is bound.unread
    assert not bound.unread or cfg["fetch_stall_s"] == 0
    assert c["fetch_stall_pct"] > 40 and c["fetch_stall_s"] > 4
    assert c["fetch_stall_s"] > 3 * cfg["fetch_stall_s"]
    assert c["epoch_s"] == pytest.approx(cfg["modes"]["disk"]["epoch1_s"])
    assert c["fetch_stall_s"] == pytest.approx(c["epoch_s"] - cfg["modes"]["cached"]["time_s"])
    assert "steady: " in row
    assert cold.startswith("  first epoch (cold)")
    assert f"{c['fetch_stall_s']:.1f}s {c['fetch_stall_pct']:.0f}%" in cold
    assert (f"first epoch: highly fetch-bound, {c['fetch_stall_s']:.1f} s of "
            f"{c['epoch_s']:.1f} s waiting on storage") in cold
    # results honour the umask (not mkstemp's 0600); no empty tmp/ left in the prefix
    for path in [prefix / "summary.json", *store.runs_dir(prefix).glob("*.json")]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path
    assert not (prefix / "tmp").exists()
