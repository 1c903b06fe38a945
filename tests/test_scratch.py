"""The job's TMPDIR (`resources/scratch.py`): what a stopped job leaves there goes with it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import harness
from hypothesis import given, settings
from hypothesis import strategies as st

from dsanalyze.resources import scratch
from dsanalyze.resources.lifeline import Lifeline


@pytest.fixture
def temp_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A temporary directory of the harness's own (TMPDIR), empty: what a run leaves in it
    shows, apart from any other process's. Short, as /tmp is: under pytest's tmp_path the
    job's sockets would not fit (`scratch.fits`)."""
    root = Path(tempfile.mkdtemp(prefix="dsa-test-", dir="/tmp"))
    monkeypatch.setenv("TMPDIR", str(root))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
def test_a_stopped_job_leaves_nothing_in_the_temporary_directory(small_dataset, tmp_path,
                                                                  temp_dir):
    # the built-in job trains until the harness stops it (SIGTERM, then the cgroup's
    # SIGKILL): torchrun's agent leaves its `torchelastic_*` log directory, and DataLoader
    # workers that handed batches over by file descriptor their `pymp-*` directories (only
    # a clean exit removes them); before the job had a TMPDIR of its own, this run left
    # `torchelastic_*` here
    assert harness("--data", small_dataset, "--prefix", tmp_path / "r", "--modes", "cached",
                   "-b", 4, "-j", 2, "--iters", 8, "--warmup", 2, "--sim-step-ms", 20,
                   "--no-plots") == 0
    assert sorted(p.name for p in temp_dir.iterdir()) == []


@pytest.mark.slow
def test_the_discovery_run_of_a_script_leaves_nothing_there_either(small_dataset, tmp_path,
                                                                    temp_dir):
    # no --data: the script runs once, outside the sweep, to show which files it reads
    script = Path(__file__).parent / "scripts" / "train_examples.py"
    assert harness("--prefix", tmp_path / "r", "--modes", "cached", "--iters", 3, "--warmup",
                   1, "--no-plots", "--no-advice", script, small_dataset, "-j", 2, "-b", 8,
                   "--img-size", 32) == 0
    assert (tmp_path / "r" / "logs" / "discover.log").is_file()
    # torch.compile's cache, where torch keeps it (torch made it in this script's run; before
    # the discovery run had a TMPDIR of its own, torchrun's torchelastic_* stayed too), and
    # nothing else
    cache = Path(scratch.inductor_cache_dir(temp_dir)).name
    assert {p.name for p in temp_dir.iterdir()} <= {cache}


def test_the_job_writes_its_temporary_files_in_a_directory_removed_after_it(temp_dir):
    with scratch.job_tmpdir() as tmp:
        assert tmp.parent == temp_dir and tmp.name.startswith(f"dsa-job-{os.getpid()}-")
        # a process that makes a directory in its TMPDIR and is killed before it can remove it
        child = subprocess.run(
            [sys.executable, "-c", "import tempfile, os, signal; d = tempfile.mkdtemp("
             "prefix='pymp-'); print(d, flush=True); os.kill(os.getpid(), signal.SIGKILL)"],
            env={**os.environ, "TMPDIR": str(tmp)}, capture_output=True, text=True)
        made = Path(child.stdout.strip())
        assert child.returncode == -9 and made.parent == tmp and made.is_dir()
    assert not made.exists() and list(temp_dir.iterdir()) == []


def test_a_killed_harness_s_reaper_removes_the_job_s_temporary_directory(temp_dir):
    line = Lifeline()
    path = temp_dir / "dsa-job-1-x"
    (path / "pymp-1").mkdir(parents=True)
    line.remove_after(path)
    # the harness dies without saying `done`: its end of the pipe closes
    assert line._pipe is not None
    line._pipe.close()
    assert line._proc.wait(timeout=30) == 0
    assert not path.exists()


def test_stale_directories_of_dead_harnesses_are_removed_at_the_next_start(temp_dir):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = temp_dir / f"dsa-job-{dead.pid}-abc123"
    live = temp_dir / f"dsa-job-{os.getpid()}-def456"
    other = temp_dir / f"dsa-jobs-{dead.pid}-abc123"  # not one of ours
    for d in (stale, live, other):
        (d / "inner").mkdir(parents=True)
    assert scratch.clean_stale() == [stale]
    assert not stale.exists() and live.is_dir() and other.is_dir()


def _binds(path: Path) -> bool:
    """Whether the kernel takes `path` as a Unix socket's address (its length, not its
    folders: an address too long fails before any lookup)."""
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.bind(str(path))
        except OSError as e:
            return "too long" not in str(e)
        return True


@given(st.integers(min_value=1, max_value=90))
@settings(max_examples=60, deadline=None)
def test_a_run_directory_is_made_only_where_the_job_s_sockets_fit(length):
    """`fits` against the kernel: a parent of `length` bytes takes the run directory exactly
    where the deepest socket a DataLoader worker makes under it (multiprocessing's resource
    sharer: pymp-XXXXXXXX/listener-XXXXXXXX) binds."""
    parent = Path("/" + "p" * (length - 1))
    deepest = parent / f"{scratch.PREFIX}{os.getpid()}-abcdefgh" / "pymp-abcdefgh" / \
        "listener-abcdefgh"
    assert scratch.fits(parent) == _binds(deepest)


def test_a_long_temporary_directory_is_left_to_the_job_as_it_was(monkeypatch, tmp_path):
    long = tmp_path / ("d" * max(1, 60 - len(str(tmp_path))))
    long.mkdir()
    monkeypatch.setenv("TMPDIR", str(long))
    monkeypatch.setattr(tempfile, "tempdir", None)
    with scratch.job_tmpdir() as tmp:
        assert tmp is None
    assert list(long.iterdir()) == []


def test_torch_compile_s_cache_stays_where_torch_keeps_it(temp_dir):
    """A run directory removed after each run must not take torch.compile's cache with it
    (every run would compile from nothing): torch's own rule, asked in the job's environment,
    names the directory it names in the harness's."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    ask = ("import tempfile; from torch._inductor.runtime.cache_dir_utils import cache_dir; "
           "print(tempfile.gettempdir()); print(cache_dir())")
    with scratch.job_tmpdir() as tmp:
        assert tmp is not None
        env = scratch.job_env({k: v for k, v in os.environ.items()
                               if k != "TORCHINDUCTOR_CACHE_DIR"}, tmp)
        job_temp, job_cache = subprocess.run([sys.executable, "-c", ask], env=env, check=True,
                                             capture_output=True, text=True).stdout.split()
        # one the user set is theirs
        mine = scratch.job_env({**env, "TORCHINDUCTOR_CACHE_DIR": "/elsewhere"}, tmp)
    assert job_temp == str(tmp)
    assert job_cache == default_cache_dir() and Path(job_cache).parent == temp_dir
    assert Path(job_cache).is_dir()  # made there, and still there after the run
    assert mine["TORCHINDUCTOR_CACHE_DIR"] == "/elsewhere"
