"""Resource control end to end with real cgroups: CPUs, SIGINT, resume, --no-cgroups (the cache
budget, OOM and the throttle: tests/test_datacache.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import harness, needs_cgroups

from dsanalyze.records import How, Knob
from dsanalyze.resources import cgroups, interrupts
from dsanalyze.store import load_runs

pytestmark = [pytest.mark.slow, needs_cgroups]
ROOT = Path(__file__).resolve().parent.parent


def our_cgroups(pid: int) -> list[Path]:
    h = cgroups.detect()
    return [d for root in set(h.roots.values()) for d in root.glob(f"{cgroups.PREFIX}{pid}-*")]


def test_one_cpu_in_every_process(small_dataset, tmp_path):
    prefix = tmp_path / "r"
    assert harness("--data", small_dataset, "--prefix", prefix, "--modes", "cached",
                   "--cpus", 1, "-b", 8, "-j", 2, "--iters", 10, "--warmup", 2,
                   "--sim-step-ms", 20, "--no-plots") == 0
    (run,) = load_runs(prefix)
    assert run.enforced.cpus == Knob(How.CGROUP)
    assert run.environment["threads"]["omp_num_threads"] == 1
    assert run.ranks[0].extra["torch_threads"] == 1
    # torchrun agent + rank + 2 workers were sampled, and none could use a second CPU
    assert max(s["procs"] for s in run.monitor) >= 4
    assert {s["max_affinity_cpus"] for s in run.monitor if s["procs"]} == {1}


# The harness's start before its first run's job joins its cgroup: the dataset's scan and
# fingerprint, the CPU-scaling probe, the cache warm, python and torchrun starting. About
# 8 s on a quiet machine; 35 s seen at a load average of 20 on 2 cores.
START_S = 180.0


def wait_for_job_in_cgroup(proc: subprocess.Popen, deadline_s: float) -> None:
    """Until a process of the run's job is in the run's cgroup (the job is running inside
    it); fails with the harness's stderr if the harness ends first or the deadline passes."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end and proc.poll() is None:
        if any((d / "cgroup.procs").read_text().split() for d in our_cgroups(proc.pid)
               if (d / "cgroup.procs").exists()):
            return
        time.sleep(0.1)
    _, err = proc.communicate(timeout=5) if proc.poll() is not None else ("", "")
    pytest.fail(f"no job in the run's cgroup after {time.monotonic() - end + deadline_s:.0f} s "
                f"(harness exit {proc.returncode}): {err}")


@pytest.mark.parametrize("sig,code,word", [(signal.SIGINT, 130, "interrupted"),
                                           (signal.SIGTERM, 143, "terminated")])
def test_signal_leaves_no_cgroup(small_dataset, tmp_path, sig, code, word):
    """A signal while the job runs: the harness stops it, removes its cgroup and exits with
    the signal's code within its teardown's deadline, without reaching it (the deadline
    names a teardown that hung; `resources/interrupts.py`)."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "harness.py"), "--data", str(small_dataset),
                             "--prefix", str(tmp_path / "r"), "--modes", "cached", "--cpus", "1",
                             "--iters", "500", "--sim-step-ms", "50", "--no-plots"],
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for_job_in_cgroup(proc, START_S)
        proc.send_signal(sig)
        # past the deadline and its C backstop the harness is hung: killed below, so that
        # it holds neither the dataset's lock nor its cgroup for the next test
        _, err = proc.communicate(timeout=interrupts.TEARDOWN_S + interrupts.BACKSTOP_S + 10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "did not finish stopping" not in err, err
    assert proc.returncode == code and word in err, err
    assert our_cgroups(proc.pid) == []


@pytest.mark.long
def test_resume_reruns_only_what_was_missing(small_dataset, tmp_path):
    # a dataset of its own: the suite's shared one may still be locked by a job of an earlier
    # test that its lifeline is reaping (the lock is not what this test is about)
    data = Path(shutil.copytree(small_dataset, tmp_path / "data"))
    prefix = tmp_path / "r"
    argv = [sys.executable, str(ROOT / "harness.py"), "--data", str(data), "--prefix",
            str(prefix), "--modes", "synthetic,cached,loader", "--cpus", "1", "-b", "8", "-j", "1",
            "--iters", "6", "--warmup", "1", "--sim-step-ms", "20", "--no-plots"]
    with open(tmp_path / "first.err", "w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
        runs = prefix / "runs"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(list(runs.glob("*.json"))) < 2 and \
                proc.poll() is None:
            time.sleep(0.1)
        proc.kill()  # no cleanup at all: the next start must clean up after it
        proc.wait()
    before = {p.name: p.stat().st_mtime_ns for p in runs.glob("*.json")}
    # three runs at one CPU (a pytest-xdist worker of `make test` has one of this machine's 2)
    assert len(before) == 2, (tmp_path / "first.err").read_text()[-2000:]
    out = subprocess.run(argv + ["--resume"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert f"resumed: {len(before)} run(s) already complete" in out.stdout
    after = {p.name: p.stat().st_mtime_ns for p in runs.glob("*.json")}
    assert len(after) == 3
    assert all(after[name] == mtime for name, mtime in before.items())
    assert our_cgroups(proc.pid) == []  # the killed harness's cgroup was cleaned
    # the machine's parallel decode probe, measured once by the first harness, kept by the
    # resumed one; the machine-wide CPU in every monitor sample and in the probe of others
    runs = load_runs(prefix)
    assert len({json.dumps(r.environment["cpu_scaling"]) for r in runs}) == 1
    assert runs[0].environment["cpu_scaling"]["cpus"] == len(os.sched_getaffinity(0))
    for run in runs:
        assert all("machine_busy_s" in m and "cpu_usage_s" in m for m in run.monitor)
        probe = run.io.interference
        assert probe["machine_cpus"] == os.cpu_count()
        assert 0 <= probe["machine_others_cpu_s"] <= probe["machine_busy_s"]


def test_no_cgroups_marks_limits_not_enforced(small_dataset, tmp_path):
    prefix = tmp_path / "r"
    assert harness("--data", small_dataset, "--prefix", prefix, "--modes", "disk", "--cpus", 1,
                   "--cache", "25%", "--storage-bw", "50M", "-b", 8, "-j", 1, "--iters", 4,
                   "--warmup", 1, "--sim-step-ms", 10, "--no-cgroups", "--no-plots") == 0
    (run,) = load_runs(prefix)
    assert run.enforced.cpus == Knob(How.AFFINITY)
    # the cache budget needs no cgroup: the harness evicts the dataset's pages itself
    assert run.enforced.cache == Knob(How.EVICTION) and run.io.residency is not None
    assert run.enforced.storage_bw == Knob(How.NOT_ENFORCED, "--no-cgroups")
    doc = json.loads((prefix / "summary.json").read_text())
    assert doc["configs"][0]["enforced"]["storage_bw"] == {
        "how": "not_enforced", "why": "--no-cgroups", "cgroup_version": None,
        "device": doc["configs"][0]["enforced"]["storage_bw"]["device"]}
    assert {s["max_affinity_cpus"] for s in run.monitor if s["procs"]} == {1}
