"""Run JSONs: the committed fixtures (written by earlier versions) still load."""

from __future__ import annotations

import json

import pytest
from conftest import DATA_DIR

from dsanalyze import store
from dsanalyze.errors import FailureKind, StoreError
from dsanalyze.store import RunResult, Status

FIXTURES = sorted(DATA_DIR.glob("*/runs/*.json"))


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_committed_run_files_load_with_typed_status(path):
    raw = json.loads(path.read_text())
    run = store.read_run(path)
    assert isinstance(run.status, Status) and run.status.value == raw["status"]
    assert run.ok == (raw["status"] == "ok") and run.failure is None
    again = run.to_dict()
    assert again["status"] == raw["status"] and RunResult.from_dict(again) == run
    # every field an old file holds is written back unchanged
    assert {k: again[k] for k in raw} == raw


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
