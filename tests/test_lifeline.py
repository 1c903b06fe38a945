"""The job dies with its harness: SIGKILL of the harness leaves no process and no cgroup."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import needs_cgroups

from dsanalyze.instrument import rank as rankenv
from dsanalyze.resources import cgroups, scratch

REPO = Path(__file__).resolve().parent.parent


def run_dirs(hierarchy: cgroups.Hierarchy, harness_pid: int) -> list[Path]:
    """The cgroup directories of one harness's runs, on every controller."""
    out = []
    for root in set(hierarchy.roots.values()):
        out += [d for d in root.glob(f"{cgroups.PREFIX}{harness_pid}-*") if d.is_dir()]
    return out


def procs_in(dirs: list[Path]) -> set[int]:
    pids: set[int] = set()
    for d in dirs:
        try:
            pids.update(int(p) for p in (d / "cgroup.procs").read_text().split())
        except OSError:
            pass
    return pids


def running(pid: int) -> bool:
    """Alive and not a zombie (this machine's init reaps no orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_for(condition, timeout_s: float, step_s: float = 0.1):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(step_s)
    return condition()


@pytest.mark.slow
@needs_cgroups
def test_sigkill_of_the_harness_ends_the_job_and_its_cgroups(small_dataset, tmp_path):
    hierarchy = cgroups.detect()
    # the harness's own temporary directory, short (`scratch.fits`): the job's TMPDIR is made
    # in it, and the reaper removes it with what the killed job left there
    temp = Path(tempfile.mkdtemp(prefix="dsa-test-", dir="/tmp"))
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(temp)}
    harness = subprocess.Popen(
        [sys.executable, str(REPO / "harness.py"), "--data", str(small_dataset), "--prefix",
         str(tmp_path / "r"), "--modes", "disk", "-b", "4", "-j", "1", "--iters", "100000",
         "--warmup", "1", "--sim-step-ms", "50", "--timeout", "600", "--no-plots"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    pids: set[int] = set()
    try:
        # agent, rank and its DataLoader worker, all in the run's cgroup
        pids = wait_for(lambda: (p := procs_in(run_dirs(hierarchy, harness.pid))) and
                        len(p) >= 3 and p, timeout_s=120, step_s=0.5) or set()
        assert len(pids) >= 3, f"the job did not start: {pids}"
        assert [p.name.startswith(f"dsa-job-{harness.pid}-") for p in temp.iterdir()] == [True]
        harness.send_signal(signal.SIGKILL)
        harness.wait()
        gone = wait_for(lambda: not run_dirs(hierarchy, harness.pid)
                        and not any(running(p) for p in pids), timeout_s=10)
        assert not [p for p in pids if running(p)], "job processes outlived the harness"
        assert not run_dirs(hierarchy, harness.pid), "cgroups outlived the harness"
        assert gone
        assert wait_for(lambda: not any(temp.iterdir()), timeout_s=10), list(temp.iterdir())
    finally:
        if harness.poll() is None:
            harness.kill()
            harness.wait()
        shutil.rmtree(temp, ignore_errors=True)
        for d in run_dirs(hierarchy, harness.pid):  # ours only, if the test failed
            cgroups.RunCgroup(cgroups.Hierarchy(hierarchy.version, {"x": d.parent}), d.name).remove()


def discovery_pids(prefix: Path) -> set[int]:
    """Processes of the discovery run (`datafind.discover`) of the sweep in `prefix`: their
    environment names its run directory (no other test's)."""
    mine = f"{rankenv.ENV_RUN_DIR}={prefix / 'tmp' / 'discover'}".encode()
    found = set()
    for p in Path("/proc").glob("[0-9]*"):
        try:
            if mine in (p / "environ").read_bytes().split(b"\0"):
                found.add(int(p.name))
        except (OSError, ValueError):
            pass
    return found


STUCK = """\
import sys, time
from torch.utils.data import DataLoader
from torchvision import datasets


class Stuck(datasets.ImageFolder):
    def __getitem__(self, index):
        time.sleep(3600)


for batch in DataLoader(Stuck(sys.argv[1]), batch_size=2, num_workers=1):
    pass
"""


@pytest.mark.slow
def test_sigkill_of_the_harness_ends_a_script_s_discovery_run_and_its_temporary_files(
        small_dataset, tmp_path):
    """No --data: the script runs once to show its files, before any measured run. A harness
    killed then takes that run with it, as it takes a measured one."""
    temp = Path(tempfile.mkdtemp(prefix="dsa-test-", dir="/tmp"))
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(temp)}
    # its loader's first sample never comes: the discovery run lasts until it is killed
    script = tmp_path / "train_stuck.py"
    script.write_text(STUCK)
    harness = subprocess.Popen(
        [sys.executable, str(REPO / "harness.py"), "--prefix", str(tmp_path / "r"), "--iters",
         "3", "--no-plots", str(script), str(small_dataset)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    pids: set[int] = set()
    try:
        prefix = tmp_path / "r"
        pids = wait_for(lambda: discovery_pids(prefix), timeout_s=120, step_s=0.05) or set()
        assert pids, "the discovery run did not start"
        assert [p.name.startswith(f"dsa-job-{harness.pid}-") for p in temp.iterdir()] == [True]
        # the rank's DataLoader worker has started, and waits in the sleep
        assert wait_for(lambda: len(discovery_pids(prefix)) >= 3, timeout_s=60, step_s=0.1)
        harness.send_signal(signal.SIGKILL)
        harness.wait()
        assert wait_for(lambda: not any(running(p) for p in pids | discovery_pids(prefix)),
                        timeout_s=10), "the discovery run outlived the harness"
        # the run's TMPDIR gone; torch.compile's cache, where torch keeps it, may stay
        cache = Path(scratch.inductor_cache_dir(temp)).name
        assert wait_for(lambda: {p.name for p in temp.iterdir()} <= {cache}, timeout_s=10), \
            list(temp.iterdir())
    finally:
        if harness.poll() is None:
            harness.kill()
            harness.wait()
        for pid in discovery_pids(tmp_path / "r"):  # if the test failed
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)
