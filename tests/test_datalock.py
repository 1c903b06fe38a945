"""One harness per dataset: a second harness on the same data refuses, naming the holder."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import argv_of, harness
from test_errors import one_line_error
from test_lifeline import running, wait_for

from dsanalyze.errors import ResourceError
from dsanalyze.resources.datalock import DataLock, lock_path

REPO = Path(__file__).resolve().parent.parent


def holder_pid(data: Path) -> int | None:
    try:
        text = lock_path(data).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def test_bounded_wait_then_refusal_then_the_lock_is_free_when_the_holder_dies(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from dsanalyze.resources.datalock import "
         "DataLock; DataLock.acquire(sys.argv[1]); print('held', flush=True); time.sleep(60)",
         str(data)], env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        with pytest.raises(ResourceError, match=rf"another harness \(pid {holder.pid}\) is measuring"):
            DataLock.acquire(data, wait_s=0.6)
        assert time.monotonic() - t0 >= 0.6
    finally:
        holder.kill()  # SIGKILL: the kernel releases the flock
        holder.wait()
    with DataLock.acquire(data, wait_s=2.0):
        assert holder_pid(data) == os.getpid()


@pytest.mark.slow
def test_second_harness_on_the_same_data_refuses(small_dataset, tmp_path, capsys):
    """...and the first, killed with SIGKILL without cgroups, takes its job along."""
    first = subprocess.Popen(
        [sys.executable, str(REPO / "harness.py"), "--data", str(small_dataset), "--prefix",
         str(tmp_path / "a"), "--modes", "synthetic", "-b", "4", "-j", "1", "--iters", "100000",
         "--sim-step-ms", "50", "--no-cgroups", "--no-plots"],
        env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while holder_pid(small_dataset) != first.pid and time.monotonic() < deadline:
            time.sleep(0.1)
        assert holder_pid(small_dataset) == first.pid
        t0 = time.monotonic()
        assert harness("--data", small_dataset, "--prefix", tmp_path / "b", "--modes", "synthetic",
                       "--lock-wait", 1, "--no-plots") == 2
        assert time.monotonic() - t0 >= 1.0
        line = one_line_error(capsys)
        assert f"another harness (pid {first.pid}) is measuring {small_dataset}" in line
        assert not (tmp_path / "b" / "runs").exists()
        # reaper, agent, rank (in a session of its own)
        job = wait_for(lambda: (c := psutil.Process(first.pid).children(recursive=True))
                       and len(c) >= 3 and c, timeout_s=60) or []
        assert len(job) >= 3
        first.kill()
        first.wait()
        wait_for(lambda: not any(running(p.pid) for p in job), timeout_s=10)
        left = [p for p in job if running(p.pid)]
        assert not left, [f"{p.pid}: {' '.join(argv_of(p))}" for p in left]  # which one lingered
    finally:
        first.kill()
        first.wait()
