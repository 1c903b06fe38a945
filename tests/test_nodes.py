"""Several nodes: scheduler environments, merging, per-node breakdown, and two real
harnesses acting as two nodes on loopback (lockstep, gathering, a killed node)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import DATA_DIR, STEP_BOUND, assert_step_bound_rate, needs_cgroups

from dsanalyze import nodemerge, nodes, scheduler
from dsanalyze.analysis import pernode
from dsanalyze.config import Job
from dsanalyze.records import RunResult, Status
from dsanalyze.store import load_runs, read_run

HARNESS = Path(__file__).parent.parent / "harness.py"


@pytest.mark.parametrize("env,expected", [
    ({}, {}),
    ({"PET_NNODES": "1:4", "PET_NODE_RANK": "2", "PET_MASTER_ADDR": "10.0.0.1",
      "PET_MASTER_PORT": "23456", "PET_NPROC_PER_NODE": "8"},
     {"nnodes": 4, "node_rank": 2, "master_addr": "10.0.0.1", "master_port": 23456,
      "nproc_per_node": 8}),
    # a PyTorchJob pod: WORLD_SIZE nodes, this is node RANK
    ({"WORLD_SIZE": "3", "RANK": "1", "MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456",
      "NPROC_PER_NODE": "8"},
     {"nnodes": 3, "node_rank": 1, "master_addr": "job-master-0", "master_port": 23456,
      "nproc_per_node": 8}),
    # SLURM: the batch script exports MASTER_ADDR
    ({"SLURM_NNODES": "2", "SLURM_NODEID": "1", "MASTER_ADDR": "node17"},
     {"nnodes": 2, "node_rank": 1, "master_addr": "node17"}),
    ({"SLURM_NNODES": "2", "SLURM_NODEID": "1"}, {}),  # no master address: nothing to use
])
def test_node_settings_from_a_schedulers_environment(env, expected):
    assert scheduler.from_environment(env) == expected


def test_unreadable_environment_is_a_one_line_error():
    with pytest.raises(Exception, match="pass --nnodes"):
        scheduler.from_environment({"WORLD_SIZE": "two", "RANK": "0", "MASTER_ADDR": "a"})


def _as_two_nodes(run: RunResult, offset_s: float) -> tuple[RunResult, RunResult]:
    """A committed 2-rank run, cut into what node 0 and node 1 would have stored."""
    job = dataclasses.replace(run.spec.job, nproc_per_node=1, nnodes=2)
    spec = dataclasses.replace(run.spec, job=job)
    node1_spec = dataclasses.replace(spec, job=dataclasses.replace(job, node_rank=1))
    r0, r1 = sorted(run.ranks, key=lambda r: r.rank)
    node0 = dataclasses.replace(run, spec=spec, ranks=(r0,), io=dataclasses.replace(run.io, read_bytes=100))
    node1 = dataclasses.replace(run, spec=node1_spec, ranks=(r1,),
                                io=dataclasses.replace(run.io, read_bytes=50),
                                environment={**run.environment, "clock_offset_s": offset_s,
                                             "host": "other"})
    return node0, node1


def test_merge_puts_every_rank_on_node0s_clock():
    run = read_run(DATA_DIR / "report_2ranks" / "runs" / "disk-cpusall-cachenone-bw8M.json")
    node0, node1 = _as_two_nodes(run, offset_s=0.25)
    merged = nodemerge.merge_results(node0, {1: node1})
    assert merged.ok and [r.rank for r in merged.ranks] == [0, 1]
    assert [r.extra["node"] for r in merged.ranks] == [0, 1]
    r1 = next(r for r in run.ranks if r.rank == 1)
    assert merged.ranks[1].start_unix_s == pytest.approx(r1.start_unix_s + 0.25, abs=1e-9)
    assert merged.ranks[0].start_unix_s == node0.ranks[0].start_unix_s
    assert merged.io.read_bytes == 150
    assert merged.io.nodes["1"]["host"] == "other"
    # a node that failed makes the job's run fail, and is named
    failed = nodemerge.merge_results(node0, {1: dataclasses.replace(node1, status=Status.OOM,
                                                                 error="out of memory")})
    assert failed.status == Status.OOM and failed.error == "node 1: out of memory"
    # a node that never reported: the run lacks ranks
    missing = nodemerge.merge_results(node0, {})
    assert missing.status == Status.FAILED and "1 of 2 ranks" in missing.error


def test_merge_prefixes_joins_runs_by_id():
    run = read_run(DATA_DIR / "report_2ranks" / "runs" / "disk-cpusall-cachenone-bw8M.json")
    node0, node1 = _as_two_nodes(run, offset_s=0.0)
    merged = nodemerge.merge_prefixes([node0], [[node1]])
    assert len(merged[0].ranks) == 2
    assert nodemerge.merge_prefixes(merged, [[node1]])[0] is merged[0]  # already whole: untouched


def test_the_node_with_the_slow_loader_is_named():
    run = read_run(DATA_DIR / "report_2ranks" / "runs" / "disk-cpusall-cachenone-bw8M.json")
    node0, node1 = _as_two_nodes(run, offset_s=0.0)
    # node 0 waits for nothing; node 1 spends 80% of each iteration waiting for data
    r0 = dataclasses.replace(node0.ranks[0], wait_s=tuple(0.0 for _ in node0.ranks[0].wait_s))
    r1 = node1.ranks[0]
    r1 = dataclasses.replace(r1, wait_s=tuple(0.8 * t for t in r1.iter_s))
    merged = nodemerge.merge_results(dataclasses.replace(node0, ranks=(r0,)),
                                 {1: dataclasses.replace(node1, ranks=(r1,))})
    shares = pernode.node_shares(merged)
    assert [s.node for s in shares] == [0, 1]
    assert shares[0].wait_pct == pytest.approx(0.0)
    assert shares[1].wait_pct == pytest.approx(80.0)
    assert pernode.holding_node(shares) == 1
    alike = nodemerge.merge_results(node0, {1: node1})
    assert pernode.holding_node(pernode.node_shares(alike)) is None


# -- two real harnesses on loopback --------------------------------------------

def _free_port_pair() -> int:
    """A port P with P + 1 free too (torchrun uses P, the harnesses' store P + 1)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 65000:
            with socket.socket() as s2:
                try:
                    s2.bind(("127.0.0.1", port + 1))
                    return port
                except OSError:
                    continue
    raise RuntimeError("no free port pair")


def _node_argv(node: int, data: Path, prefix: Path, port: int, *extra: object) -> list[str]:
    # Each node on a CPU of its own, as on separate machines: `--cpus 1` takes the first
    # CPU of the harness's affinity, so without taskset both nodes would share CPU 0.
    cpus = sorted(os.sched_getaffinity(0))
    return ["taskset", "-c", str(cpus[node % len(cpus)]), sys.executable, str(HARNESS), "--data", str(data), "--prefix", str(prefix),
            "--nnodes", "2", "--node_rank", str(node), "--master_addr", "127.0.0.1",
            "--master_port", str(port), "--cpus", "1", "--no-plots", *map(str, extra)]


def _start_nodes(tmp_path: Path, data: Path, port: int, *extra: object, tag: str = ""
                 ) -> list[subprocess.Popen]:
    procs = []
    for node in (0, 1):
        log = open(tmp_path / f"node{node}{tag}.log", "w")
        procs.append(subprocess.Popen(_node_argv(node, data / f"d{node}", tmp_path / f"p{node}",
                                                 port, *extra),
                                      stdout=log, stderr=subprocess.STDOUT))
    return procs


def _log(tmp_path: Path, node: int, tag: str = "") -> str:
    return (tmp_path / f"node{node}{tag}.log").read_text()


def _our_cgroups(pids: list[int]) -> list[str]:
    names = [f"dsanalyze-{pid}-" for pid in pids]
    found = []
    for root in Path("/sys/fs/cgroup").glob("*"):
        if root.is_dir():
            found += [str(p) for p in root.glob("dsanalyze-*") if any(n in p.name for n in names)]
    return found


@pytest.fixture(scope="module")
def node_data(tmp_path_factory, small_dataset) -> Path:
    """Each node reads its own copy of the data, as on separate machines."""
    import shutil

    root = tmp_path_factory.mktemp("nodes")
    for node in (0, 1):
        shutil.copytree(small_dataset, root / f"d{node}")
    return root


@STEP_BOUND
@pytest.mark.slow
@needs_cgroups
@pytest.mark.long
def test_two_harnesses_profile_one_job(node_data, tmp_path):
    port = _free_port_pair()
    batch, step_ms = 4, 40.0
    procs = _start_nodes(tmp_path, node_data, port, "-b", batch, "-j", 1, "--iters", 50,
                         "--warmup", 3, "--sim-step-ms", step_ms)
    rcs = [p.wait(timeout=600) for p in procs]
    assert rcs == [0, 0], _log(tmp_path, 0) + _log(tmp_path, 1)
    doc = json.loads((tmp_path / "p0" / "summary.json").read_text())
    cfg = doc["configs"][0]
    # the job's synthetic rate: 2 ranks x batch / step, over both nodes
    assert_step_bound_rate(cfg["modes"]["synthetic"], 2 * batch / (step_ms / 1000))
    assert {r["run_id"] for r in doc["nodes"]} == {"synthetic-cpus1", "cached-cpus1",
                                                  "disk-cpus1-cachenone-bwnone"}
    for run in doc["nodes"]:
        assert [n["node"] for n in run["nodes"]] == [0, 1]
        assert [n["ranks"] for n in run["nodes"]] == [[0], [1]]
    for run in load_runs(tmp_path / "p0"):
        assert run.ok and [r.rank for r in run.ranks] == [0, 1]
        offset = run.io.nodes["1"]["clock_offset_s"]
        assert abs(offset) < 0.05  # one machine: one clock, up to the round trip's asymmetry
    assert "nodes, synthetic-cpus1: node 0 waits" in _log(tmp_path, 0)
    assert "node 1 of 2" in _log(tmp_path, 1)
    subprocess.run([sys.executable, "-m", "dsanalyze.cli", "trace", str(tmp_path / "p0")],
                   check=True, capture_output=True)
    trace = json.loads((tmp_path / "p0" / "trace.json").read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    names = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert {"synthetic-cpus1 node 0 rank 0", "synthetic-cpus1 node 1 rank 1"} <= names
    # both nodes' ranks on one timeline: their first iterations start together (lockstep,
    # and the all-reduce of every step ties them), within a few steps
    pid_name = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    first = {}
    for e in events:
        if e.get("ph") == "X" and pid_name.get(e["pid"], "").startswith("synthetic-cpus1 node"):
            first[e["pid"]] = min(first.get(e["pid"], e["ts"]), e["ts"])
    assert len(first) == 2
    assert abs(max(first.values()) - min(first.values())) < 5 * step_ms * 1000
    assert not _our_cgroups([p.pid for p in procs])


@pytest.mark.slow
@needs_cgroups
@pytest.mark.long
def test_a_killed_node_stops_the_run_and_resume_completes(node_data, tmp_path):
    port = _free_port_pair()
    run_args = ("--modes", "synthetic", "-b", 4, "-j", 1, "--warmup", 3, "--sim-step-ms", 40,
                "--timeout", 300, "--iters", 200)
    procs = _start_nodes(tmp_path, node_data, port, *run_args)
    log = tmp_path / "p0" / "logs" / "synthetic-cpus1.log"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not log.is_file():  # the job starts after the gate
        time.sleep(0.5)
    time.sleep(6)  # inside the run: its 200 iterations of 40 ms take 8 s, after start-up
    procs[1].send_signal(signal.SIGKILL)
    t0 = time.monotonic()
    rc0 = procs[0].wait(timeout=120)
    waited = time.monotonic() - t0
    procs[1].wait()
    assert rc0 != 0
    assert waited < nodes.LOST_AFTER_S + 30
    log0 = _log(tmp_path, 0)
    assert "node 1 stopped responding" in log0, log0
    failed = read_run(tmp_path / "p0" / "runs" / "synthetic-cpus1.json")
    assert failed.status == Status.FAILED and "node 1" in failed.error
    deadline = time.monotonic() + 30  # node 1's job, its parent killed, ends on its lifeline
    while _our_cgroups([p.pid for p in procs]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _our_cgroups([p.pid for p in procs]), "a killed node left its cgroups"
    # both nodes resume: the failed run is measured again, in step
    port = _free_port_pair()
    again = _start_nodes(tmp_path, node_data, port, *run_args, "--resume", tag="-resume")
    rcs = [p.wait(timeout=300) for p in again]
    assert rcs == [0, 0], _log(tmp_path, 0, "-resume") + _log(tmp_path, 1, "-resume")
    done = read_run(tmp_path / "p0" / "runs" / "synthetic-cpus1.json")
    assert done.ok and [r.rank for r in done.ranks] == [0, 1]


def test_job_settings_keep_node_rank_out_of_the_plan():
    from dsanalyze.config import Mode, Resources, RunSpec

    a = RunSpec(Job(nnodes=2, node_rank=0, data_dir="/a"), Mode.SYNTHETIC, Resources(cpus=1))
    b = RunSpec(Job(nnodes=2, node_rank=1, data_dir="/b"), Mode.SYNTHETIC, Resources(cpus=1))
    c = RunSpec(Job(nnodes=2, node_rank=1, batch_size=7), Mode.SYNTHETIC, Resources(cpus=1))
    assert nodes.plan_key([a]) == nodes.plan_key([b]) != nodes.plan_key([c])


def test_harness_options_come_from_a_pytorchjob_pod(monkeypatch, small_dataset):
    from dsanalyze import cli
    from dsanalyze.options import HarnessOptions, build_sweep

    def sweep_of(argv):
        return build_sweep(HarnessOptions.from_flat(vars(cli.harness_parser().parse_args(argv))))

    for k, v in {"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "job-master-0",
                 "MASTER_PORT": "23456"}.items():
        monkeypatch.setenv(k, v)
    sweep = sweep_of(["--data", str(small_dataset)])
    assert (sweep.job.nnodes, sweep.job.node_rank, sweep.job.master_addr,
            sweep.job.master_port) == (2, 1, "job-master-0", 23456)
    # an option given on the command line wins over the environment
    sweep = sweep_of(["--data", str(small_dataset), "--node_rank", "0"])
    assert sweep.job.node_rank == 0


def _start(tmp_path: Path, port: int, data: dict[int, Path], *extra: object) -> list:
    procs = []
    for node in (0, 1):
        log = open(tmp_path / f"node{node}.log", "w")
        argv = _node_argv(node, data[node], tmp_path / f"p{node}", port, "--modes", "synthetic",
                          "--iters", 5, "--no-cgroups", "--no-advice", *extra)
        procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))
    return procs


@pytest.mark.slow
@pytest.mark.long
def test_two_nodes_on_one_host_over_one_dataset_are_refused_at_once(small_dataset, tmp_path):
    """A common first check of a multi-node set-up: both nodes on 127.0.0.1, one --data. Node 0
    was refused by the dataset's lock and node 1 waited 300 s, then blamed the store's address;
    now both stop at once with the reason."""
    t0 = time.monotonic()
    procs = _start(tmp_path, _free_port_pair(), {0: small_dataset, 1: small_dataset})
    rcs = [p.wait(timeout=120) for p in procs]
    assert time.monotonic() - t0 < 90  # no 300 s wait
    assert rcs == [2, 2] or (0 not in rcs and 2 in rcs), rcs
    for node in (0, 1):
        log = _log(tmp_path, node)
        assert "nodes 0 and 1 run on one host" in log and "share one page cache" in log, log
        assert "cannot reach the harnesses' store" not in log
    assert not (tmp_path / "p0" / "runs").exists() and not (tmp_path / "p1" / "runs").exists()


@pytest.mark.slow
@pytest.mark.parametrize("failing", [0, 1])
def test_a_node_that_fails_before_the_nodes_meet_stops_the_other_at_once(
        node_data, tmp_path, failing):
    """One node's --data does not exist: it stops with that error, and the other stops at
    once naming it, whichever of the two hosts the store."""
    data = {n: node_data / f"d{n}" for n in (0, 1)}
    data[failing] = tmp_path / "missing-data"
    t0 = time.monotonic()
    procs = _start(tmp_path, _free_port_pair(), data)
    rcs = [p.wait(timeout=120) for p in procs]
    assert time.monotonic() - t0 < 60, (_log(tmp_path, 0), _log(tmp_path, 1))
    assert all(rc != 0 for rc in rcs)
    other = 1 - failing
    said = _log(tmp_path, other)
    assert f"node {failing} stopped:" in said and "missing-data" in said, said


def test_a_run_that_succeeded_is_kept_when_node0_has_ended_since():
    """Node 0 ends as soon as it has gathered the last run, and its store with it. The other
    node's run succeeded: that is no lost node (CI once saw node 1 exit 1 with
    "disk-...: None; restart every node's harness with --resume"). A run that failed with
    node 0 gone still stops the sweep, naming the run and its error."""
    from datetime import timedelta

    from torch.distributed import TCPStore

    from dsanalyze import sweep

    port = _free_port_pair()
    host = TCPStore("127.0.0.1", port, 2, True, timedelta(seconds=5), wait_for_workers=False)
    job = Job(nnodes=2, node_rank=1, master_addr="127.0.0.1", master_port=port)
    client = TCPStore("127.0.0.1", port, 2, False, timedelta(seconds=2))
    group = nodes.NodeGroup(job, client, client, lost_after_s=1.0)
    ok = load_runs(DATA_DIR / "report_2ranks")[0]
    assert ok.ok
    del host  # node 0's harness ended: its store is gone
    sweep._stop_on_lost_node(ok.spec, ok, group)  # nothing raised
    failed = dataclasses.replace(ok, status=Status.FAILED, error="rank 0 lost its peer")
    with pytest.raises(nodes.NodeLost, match=rf"{ok.spec.run_id}: rank 0 lost its peer; "
                                              "restart every node's harness with --resume"):
        sweep._stop_on_lost_node(ok.spec, failed, group)
