"""The report's per-shard reads (report/shards.py) over stored runs; the real webdataset
runs are in test_frameworks.py::test_webdataset_shards."""

from __future__ import annotations

import dataclasses

from conftest import DATA_DIR

from dsanalyze import store
from dsanalyze.config import Mode
from dsanalyze.report import document
from dsanalyze.report import shards as shard_report


def _with_files(run: store.RunResult, rows: list[dict]) -> store.RunResult:
    """`run` whose rank 0 counted reads of `rows` (file, opens, read_bytes, read_s)."""
    rank = run.ranks[0]
    rank = dataclasses.replace(rank, extra={**rank.extra, "files": rows})
    return dataclasses.replace(run, ranks=(rank, *run.ranks[1:]))


def _row(name: str, read_bytes: int, read_s: float) -> dict:
    return {"file": f"/data/{name}", "opens": 1, "read_bytes": read_bytes, "read_s": read_s}


def test_shards_are_shown_per_configuration_most_fetch_first():
    runs = store.load_runs(DATA_DIR / "report_sweep")
    shards = {"a.tar": (2 << 20, 0.1, 0.5), "b.tar": (2 << 20, 0.1, 1.3),
              "c.tar": (1 << 20, 0.2, 0.1)}  # bytes, cached read s, disk read s
    cached = [_row(n, b, c) for n, (b, c, _) in shards.items()]
    disk = [_row(n, b, d) for n, (b, _, d) in shards.items()]
    runs = [_with_files(r, cached if r.mode is Mode.CACHED else disk)
            if r.mode in (Mode.CACHED, Mode.DISK) and r.spec.resources.cpus == 1 else r
            for r in runs]
    md = document.render_markdown(shard_report.shard_blocks(runs, most=2))
    # cpus=1 only (cpus=2 counted no shard); both disk runs of cpus=1, against cached-cpus1
    assert md.count("against **cached-cpus1**: 3 shards read (1 more shard not shown)") == 2
    rows = [line for line in md.splitlines() if line.startswith("| ") and ".tar" in line]
    assert rows[:2] == ["| b.tar | 2M | 2M | 0.10 | 1.30 | 1.20 | 75% |",
                        "| a.tar | 2M | 2M | 0.10 | 0.50 | 0.40 | 25% |"]


def test_no_shard_counted_is_no_section():
    assert shard_report.shard_blocks(store.load_runs(DATA_DIR / "report_sweep")) == []
