"""The Chrome trace of real stored runs: spans add up to what the analysis measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import copy_of

from dsanalyze import cli, records, store
from dsanalyze.analysis import stalls
from dsanalyze.analysis.samples import MonitorSample
from dsanalyze.config import Mode
from dsanalyze.errors import StoreError
from dsanalyze.report import trace

DATA = Path(__file__).parent / "data"
SWEEP, TWO_RANKS = DATA / "report_sweep", DATA / "report_2ranks"
RUNS = [(SWEEP, p.stem) for p in sorted((SWEEP / "runs").glob("*.json"))] + \
    [(TWO_RANKS, p.stem) for p in sorted((TWO_RANKS / "runs").glob("*.json"))]


def load(prefix: Path, run_id: str):
    return store.read_run(store.run_path(prefix, run_id))


def spans_of(doc: dict, pid: int) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == pid
            and e["cat"] == "iteration"]


def measured(run, event) -> bool:
    """The analysis' window: after the warm-up; a disk run of several epochs: after the first."""
    steady_from = 1 if run.mode is Mode.DISK and len({e for r in run.ranks for e in r.epoch}) > 1 \
        else 0
    return not event["args"]["warmup"] and event["args"]["epoch"] >= steady_from


@pytest.mark.parametrize("prefix,run_id", RUNS)
def test_spans_sum_to_the_measured_wait_and_iteration_times(prefix, run_id):
    run = load(prefix, run_id)
    doc = trace.chrome_trace([run])
    rate = stalls.run_rate(run)
    totals, waits = [], []
    for pid, rank in enumerate(run.ranks, start=1):
        spans = [e for e in spans_of(doc, pid) if measured(run, e)]
        wait_us = sum(e["dur"] for e in spans if e["name"] == trace.WAIT)
        totals.append(sum(e["dur"] for e in spans) / 1e6)
        waits.append(wait_us / 1e6)
        # every iteration, warm-up included, is in the trace
        everything = spans_of(doc, pid)
        assert sum(e["dur"] for e in everything if e["name"] == trace.WAIT) / 1e6 == \
            pytest.approx(sum(rank.wait_s), abs=1e-6)
        assert sum(e["dur"] for e in everything) / 1e6 == pytest.approx(sum(rank.iter_s), abs=1e-6)
    # the analysis: measured time = the longest rank's, wait share over all ranks
    assert max(totals) == pytest.approx(rate.measured_s, abs=1e-6)
    assert 100 * sum(waits) / sum(totals) == pytest.approx(rate.wait_pct, abs=1e-6)


@pytest.mark.parametrize("prefix,run_id", RUNS[:1] + RUNS[-1:])
def test_spans_are_back_to_back_and_in_microseconds(prefix, run_id):
    run = load(prefix, run_id)
    doc = trace.chrome_trace([run])
    origin = doc["otherData"]["origin_unix_s"]
    for pid, rank in enumerate(run.ranks, start=1):
        spans = spans_of(doc, pid)
        assert [e["name"] for e in spans[:4]] == [trace.WAIT, trace.COMPUTE] * 2
        assert spans[0]["ts"] == pytest.approx((rank.start_unix_s - origin) * 1e6, abs=1e-3)
        for a, b in zip(spans, spans[1:]):
            assert b["ts"] == pytest.approx(a["ts"] + a["dur"], abs=2e-3)  # 1 ns rounding
        epochs = [e for e in doc["traceEvents"] if e["pid"] == pid and e.get("cat") == "epoch"]
        assert {e["tid"] for e in epochs} == {0} and {e["tid"] for e in spans} == {1}
        assert sum(e["args"]["iterations"] for e in epochs) == len(rank.iter_s)


def test_one_process_per_rank_and_one_for_the_counters():
    runs = store.load_runs(TWO_RANKS)
    doc = trace.chrome_trace(runs)
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert list(names.values()) == [f"{r.run_id} {who}" for r in runs
                                    for who in ("rank 0", "rank 1", "job")]
    assert len(set(names)) == 9
    json.dumps(doc)  # plain JSON


def test_counter_tracks_from_the_cgroup():
    run = load(SWEEP, "disk-cpus1-cachenone-bw8M")
    doc = trace.chrome_trace([run])
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    assert {e["name"] for e in counters} == {"CPU", "read bandwidth", "page cache", "memory"}
    assert {e["pid"] for e in counters} == {2}  # after the one rank
    samples = run.monitor
    # storage read bandwidth integrated over the samples = the cgroup's bytes read
    read = [e for e in counters if e["name"] == "read bandwidth"]
    dts = [b["unix_s"] - a["unix_s"] for a, b in zip(samples, samples[1:])]
    total_bytes = sum(e["args"]["MB/s"] * 1e6 * dt for e, dt in zip(read, dts))
    assert total_bytes == pytest.approx(samples[-1]["read_bytes"] - samples[0]["read_bytes"],
                                        rel=1e-3)
    assert total_bytes > 10e6  # the cold epoch read the 13 MB dataset from disk
    cpu = [e for e in counters if e["name"] == "CPU"]
    cpu_s = sum(e["args"]["cores busy"] * dt for e, dt in zip(cpu, dts))
    assert cpu_s == pytest.approx(samples[-1]["cpu_usage_s"] - samples[0]["cpu_usage_s"],
                                  rel=1e-3)
    assert max(e["args"]["cores busy"] for e in cpu) <= 1.05  # a cpuset of one CPU


@pytest.mark.parametrize("prev,cur,expected", [
    # no cgroup: CPU and memory of the process tree, read calls instead of storage reads
    ({"unix_s": 10.0, "tree_cpu_s": 1.0, "tree_read_chars": 0.0},
     {"unix_s": 10.5, "tree_cpu_s": 1.75, "tree_read_chars": 5e6, "tree_rss_bytes": 3 << 20},
     {"CPU": {"cores busy": 1.5}, "read calls (incl. cache hits)": {"MB/s": 10.0},
      "memory": {"MiB": 3.0}}),
    # cgroup counters win over the tree's
    ({"unix_s": 0.0, "cpu_usage_s": 2.0, "tree_cpu_s": 0.0, "read_bytes": 0},
     {"unix_s": 2.0, "cpu_usage_s": 4.0, "tree_cpu_s": 9.0, "read_bytes": 4e6,
      "cache_bytes": 1 << 20, "memory_bytes": 2 << 20, "tree_rss_bytes": 99.0},
     {"CPU": {"cores busy": 1.0}, "read bandwidth": {"MB/s": 2.0}, "page cache": {"MiB": 1.0},
      "memory": {"MiB": 2.0}}),
    # GPUs sampled by NVML: one track each
    ({"unix_s": 0.0}, {"unix_s": 1.0, "gpu": [{"util_pct": 97.0, "mem_used_bytes": 4 << 20},
                                               {"util_pct": 12.0, "mem_used_bytes": 0.0}]},
     {"GPU 0": {"util %": 97.0, "memory MiB": 4.0}, "GPU 1": {"util %": 12.0, "memory MiB": 0.0}}),
    # first sample: levels only, no rate yet
    ({"unix_s": 5.0}, {"unix_s": 5.0, "cpu_usage_s": 1.0, "cache_bytes": 0, "memory_bytes": 0},
     {"page cache": {"MiB": 0.0}, "memory": {"MiB": 0.0}}),
])
def test_counter_values(prev, cur, expected):
    assert trace.counter_values(MonitorSample.from_dict(prev), MonitorSample.from_dict(cur)) == \
        expected


def test_iteration_spans_of_a_rank():
    rank = records.RankRecord(0, (0.5, 0.0, 0.25), (1.0, 0.5, 0.75), (0, 0, 1), (4, 4, 4), warmup=1,
                            start_unix_s=100.0)
    spans = trace.iteration_spans(rank)
    assert [(s.name, s.start_s, s.dur_s, s.epoch, s.warmup) for s in spans] == [
        ("data wait", 0.0, 0.5, 0, True), ("compute", 0.5, 0.5, 0, True),
        ("data wait", 1.0, 0.0, 0, False), ("compute", 1.0, 0.5, 0, False),
        ("data wait", 1.5, 0.25, 1, False), ("compute", 1.75, 0.5, 1, False)]


@pytest.fixture()
def prefix(tmp_path: Path) -> Path:
    return copy_of("report_2ranks", tmp_path)


def test_cli_trace(prefix, capsys):
    assert cli.main(["trace", str(prefix)]) == 0
    doc = json.loads((prefix / "trace.json").read_text())
    assert doc["otherData"]["runs"] == ["synthetic-cpusall", "cached-cpusall",
                                        "disk-cpusall-cachenone-bw8M"]  # in the order they ran
    out = prefix / "one.json"
    assert cli.main(["trace", str(prefix), "--run", "cached-cpusall", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["otherData"]["runs"] == ["cached-cpusall"]
    assert cli.main(["trace", str(prefix), "--run", "nope"]) == 2
    assert "no run 'nope'" in capsys.readouterr().err


def test_nothing_to_trace():
    with pytest.raises(StoreError, match="no run with iterations"):
        trace.chrome_trace([])
