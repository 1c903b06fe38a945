"""A freshly written dataset evicted per file; runs over other data never mixed; truncated runs."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import harness

from dsanalyze import cli
from dsanalyze.dataset import scan_dataset
from dsanalyze.errors import DatasetError
from dsanalyze.fingerprint import Fingerprint, check_unchanged
from dsanalyze.jobs.datasets import make_dataset
from dsanalyze.store import load_runs, run_path

CACHED, DISK = "cached-cpusall", "disk-cpusall-cachenone-bwnone"
RUN = ("-b", 4, "-j", 1, "--iters", 4, "--warmup", 1, "--sim-step-ms", 10, "--no-plots")


@pytest.mark.parametrize("change", ["add", "remove", "rewrite", "touch"])
def test_fingerprint_moves_with_any_change_and_the_sweep_stops(tmp_path, change):
    data = tmp_path / "data"
    make_dataset(data, images=6, classes=2, size=(64, 48), seed=0, workers=1)
    start = check_unchanged(scan_dataset(str(data)), Fingerprint.of_root(str(data)))  # passes
    victim = data / "class_000" / "img_000000.jpg"
    if change == "add":
        shutil.copy(victim, data / "class_001" / "new.jpg")
    elif change == "remove":
        victim.unlink()
    elif change == "rewrite":  # same size, new content and time
        victim.write_bytes(bytes(reversed(victim.read_bytes())))
    else:
        os.utime(victim, ns=(0, victim.stat().st_mtime_ns + 1))
    with pytest.raises(DatasetError, match=rf"the dataset {data} changed during the sweep \(was "
                       rf"{start.describe()}; now "):
        check_unchanged(scan_dataset(str(data)), start)


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> tuple[Path, Path]:
    """A dataset written just now, and a prefix with its cached and disk runs."""
    root = tmp_path_factory.mktemp("fresh")
    data = root / "data"
    make_dataset(data, images=32, classes=2, size=(400, 300), seed=3)
    assert harness("--data", data, "--prefix", root / "r", "--modes", "cached,disk", *RUN) == 0
    return data, root / "r"


@pytest.mark.slow
def test_fresh_dataset_is_evicted_per_file_with_no_global_drop(measured):
    data, prefix = measured
    runs = {r.run_id: r for r in load_runs(prefix)}
    state = runs[DISK].io.cache_state
    assert state["action"] == "evicted_per_file" and state["global_drop"] is False
    assert state["resident_before_bytes"] == 0 and state["files_left_resident"] == 0
    # what a global drop would re-read: the libraries the cached run mapped
    assert any("libtorch" in f for f in runs[CACHED].io.mapped_files)
    fp = Fingerprint.of_root(str(data)).to_dict()
    assert runs[CACHED].dataset.fingerprint == fp == runs[DISK].dataset.fingerprint
    assert fp["files"] == 32 and fp["bytes"] == runs[DISK].dataset.total_bytes


@pytest.mark.slow
def test_a_file_added_makes_resume_refuse_naming_the_runs(measured, tmp_path, capsys):
    data, prefix = measured
    prefix = Path(shutil.copytree(prefix, tmp_path / "r"))
    added = data / "class_000" / "added.jpg"
    shutil.copy(next((data / "class_000").iterdir()), added)
    try:
        assert harness("--data", data, "--prefix", prefix, "--modes", "cached,disk", "--resume",
                       *RUN) == 2
    finally:
        added.unlink()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: the dataset changed since runs")
    assert f"{CACHED}, {DISK} were measured" in err[0] and "32 files" in err[0]
    assert "33 files" in err[0]


@pytest.mark.slow
def test_a_truncated_run_is_reported_and_measured_again_by_resume(measured, tmp_path, capsys):
    data, prefix = measured
    prefix = Path(shutil.copytree(measured[1], tmp_path / "r"))
    cached_before = json.loads(run_path(prefix, CACHED).read_text())
    disk = run_path(prefix, DISK)
    disk.write_text(disk.read_text()[:500])  # a crash or a full disk half-way
    assert cli.main(["summary", str(prefix)]) == 0  # summary leaves it out, says so
    err = capsys.readouterr().err
    assert f"unreadable run file {disk}" in err and "--resume" in err
    assert harness("--data", data, "--prefix", prefix, "--modes", "cached,disk", "--resume",
                   *RUN) == 0
    out = capsys.readouterr()
    assert "resumed: 1 run(s) already complete" in out.out
    assert f"warning: unreadable run file {disk} (JSONDecodeError" in out.err
    runs = {r.run_id: r for r in load_runs(prefix)}
    assert runs[DISK].ok and len(runs[DISK].ranks[0].iter_s) == 5
    assert json.loads(run_path(prefix, CACHED).read_text()) == cached_before


@pytest.mark.slow
def test_summary_refuses_runs_on_different_data(measured, tmp_path, capsys):
    prefix = Path(shutil.copytree(measured[1], tmp_path / "r"))
    path = run_path(prefix, DISK)
    doc = json.loads(path.read_text())
    doc["dataset"]["fingerprint"]["sha256"] = "0" * 64
    path.write_text(json.dumps(doc))
    assert cli.main(["summary", str(prefix)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "runs measured on different data" in err[0]
    assert f"{CACHED} on 32 files" in err[0] and f"{DISK} on 32 files" in err[0]
