"""Run JSONs: the committed fixtures (written by earlier versions) still load."""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest import DATA_DIR

from dsanalyze import store
from dsanalyze.errors import FailureKind, StoreError
from dsanalyze.records import (
    CacheAction,
    DatasetRecord,
    Enforcement,
    How,
    IoRecord,
    Knob,
    RunResult,
    Status,
)

FIXTURES = sorted(DATA_DIR.glob("*/runs/*.json"))


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_committed_run_files_load_as_typed_records(path):
    """Version-1 files (dicts, enforcement as sentences) load into the typed records, and
    every figure they hold survives a round trip through the version-2 form; a version-2
    file is written back exactly as it was read."""
    raw = json.loads(path.read_text())
    run = store.read_run(path)
    assert isinstance(run.status, Status) and run.status.value == raw["status"]
    assert run.ok == (raw["status"] == "ok") and run.failure is None
    again = run.to_dict()
    assert again["schema"] == 2 and RunResult.from_dict(again) == run
    if raw.get("schema") == 2:
        assert again == raw
        return
    for key in ("spec", "ranks", "monitor", "environment", "status", "error"):
        assert again[key] == raw[key]
    ds, io = raw["dataset"], raw["io"]
    assert (run.dataset.num_files, run.dataset.total_bytes) == (ds["files"], ds["bytes"])
    assert run.dataset.root == ds["root"]
    assert list(run.dataset.file_bytes_quantiles) == ds.get("file_bytes_quantiles", [])
    assert {k: again["io"][k] for k in io} == io  # every io figure kept, under its own name
    assert run.io.read_bytes == io.get("read_bytes")
    if "cache_state" in io:
        assert run.io.cache_action is CacheAction(io["cache_state"]["action"])
    enforced = raw["enforced"]
    cpus = enforced.get("cpus", "none")
    assert (run.enforced.cpus is None) == (cpus == "none")
    if "cgroup" in cpus:
        assert run.enforced.cpus == Knob(How.CGROUP) and run.enforced.cgroup_version == 1
    for knob in ("cache", "storage_bw"):
        text = enforced.get(knob)
        got = getattr(run.enforced, knob)
        assert (got is None) == (text is None)
        if text is not None:
            assert got.enforced == (not text.startswith("not enforced"))
    if "memory_margin_bytes" in enforced:
        assert run.enforced.memory_margin_bytes == enforced["memory_margin_bytes"]
        assert run.enforced.job_memory_measured == enforced["job_memory_source"].startswith("cached")
    if "page_cache_trims" in enforced:
        assert run.enforced.limiter["page_cache_trims"] == enforced["page_cache_trims"]
        assert run.enforced.trims_page_cache


def test_version_1_enforcement_sentences_become_knobs():
    e = Enforcement.from_dict({
        "dataset_disk": "none (no block device: overlay, tmpfs, NFS or FUSE)", "cpus": "affinity",
        "cache": "not enforced: --no-cgroups", "storage_bw": "not enforced: --no-cgroups",
        "memory_limit_bytes": 3 << 30, "job_memory_bytes": 2 << 30,
        "job_memory_source": "default estimate (no cached run with these CPUs)"})
    assert e.cpus == Knob(How.AFFINITY) and e.dataset_disk is None
    assert e.cache == e.storage_bw == Knob(How.NOT_ENFORCED, "--no-cgroups")
    assert e.job_memory_measured is False and not e.trims_page_cache
    assert Enforcement.from_dict(e.to_dict()) == e
    v1 = Enforcement.from_dict({"dataset_disk": "254:0", "cpus": "cgroup v1 cpuset",
                                "storage_bw": "cgroup v1 read throttle on 254:0",
                                "cache": "cgroup v1 memory limit (budget + job memory + margin, "
                                         "raised ...), page cache trimmed to budget + margin/2",
                                "page_cache_trims": 7})
    assert v1.knobs() == {k: Knob(How.CGROUP) for k in ("cpus", "cache", "storage_bw")}
    assert v1.cgroup_version == 1 and v1.trims_page_cache and v1.limiter == {"page_cache_trims": 7}


def test_records_convert_their_stored_forms():
    run = store.read_run(FIXTURES[0])
    plain = RunResult(run.spec, "ok", dataset={"root": "/d", "files": 3, "bytes": 30},
                      io={"read_bytes": 7, "shards": {"a.tar": 1}}, enforced={})
    assert plain.dataset == DatasetRecord("/d", 0, 3, 30) and plain.dataset.mean_file_bytes == 10
    assert plain.io == IoRecord(read_bytes=7, extra={"shards": {"a.tar": 1}})
    assert plain.io.to_dict()["shards"] == {"a.tar": 1}  # an unknown figure is kept
    assert plain.enforced == Enforcement()


def test_status_and_failure_round_trip_and_read_as_words(tmp_path):
    run = store.read_run(FIXTURES[0])
    failed = RunResult(run.spec, "failed", error="cannot decode image x.jpg",
                       failure=FailureKind.CORRUPT_SAMPLE)
    assert failed.status is Status.FAILED and f"{failed.status}: x" == "failed: x"
    path = store.write_run(tmp_path, failed)
    raw = json.loads(path.read_text())
    assert raw["status"] == "failed" and raw["failure"] == "corrupt_sample"
    assert store.read_run(path) == failed


def test_unknown_status_is_a_store_error(tmp_path):
    raw = json.loads(FIXTURES[0].read_text())
    raw["status"] = "exploded"
    path = tmp_path / "runs" / "x.json"
    store.write_json_atomic(path, raw)
    with pytest.raises(StoreError, match="delete it to re-run"):
        store.read_run(path)


def test_a_run_set_aside_leaves_the_runs_pooled_and_is_kept_whole(tmp_path):
    """The stored run moves out of runs/ byte for byte; a run never stored (a retry's first
    try) is written beside it; a stored run of the same id measured at another time stays."""
    run = next(r for r in map(store.read_run, FIXTURES) if r.started_unix_s)
    stored = store.write_run(tmp_path, run)
    before = stored.read_bytes()
    aside = store.set_aside(tmp_path, store.SLOWED, run)
    assert not stored.exists() and aside.read_bytes() == before
    assert aside.parent == tmp_path / store.SLOWED and aside.name.startswith(run.run_id + "-")
    assert store.load_readable_runs(tmp_path) == ([], [])

    newer = dataclasses.replace(run, started_unix_s=run.started_unix_s + 100)
    store.write_run(tmp_path, newer)
    first_try = store.set_aside(tmp_path, store.SUPERSEDED, run)
    assert store.read_run(first_try) == run and first_try != aside
    assert store.load_runs(tmp_path) == [newer]  # the newer measurement is still pooled
