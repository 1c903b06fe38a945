"""The progress watchdog: heartbeats through real mapped files, the watchdog's clock
injected, and a real script that hangs stopped and named by the harness."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import harness, needs_cgroups

from dsanalyze import progress
from dsanalyze.records import RunResult, Status

SCRIPTS = Path(__file__).parent / "scripts"


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _first_stall(watch: progress.Watchdog, clock: Clock, beat: Callable[[int], None] | None = None,
                 count: Callable[[int], int] = lambda step: 0) -> tuple[float, str | None]:
    """The watchdog checked every 0.5 s for 1000 s (the rank's counter at `count(step)` before
    each check, where `beat` is given): when it first fired, and why."""
    for step in range(2000):
        clock.t = step / 2
        if beat is not None:
            beat(count(step))
        why = watch.check()
        if why is not None:
            return clock.t, why
    return clock.t, None


def test_heartbeat_is_read_by_the_harness(tmp_path: Path) -> None:
    beats = [progress.Heartbeat.open(tmp_path, r) for r in (0, 1)]
    beats[0](7)
    beats[1](6)
    assert progress.read_progress(tmp_path) == {0: 7, 1: 6}
    beats[0](8)
    assert progress.read_progress(tmp_path)[0] == 8
    assert progress.Heartbeat.open(None, 0) is None  # outside the harness: no heartbeat


@pytest.mark.parametrize("started", [False, True])
def test_watchdog_fires_after_the_timeout_that_applies(tmp_path: Path, started: bool) -> None:
    """10 s without progress after the first iteration; 50 s before it. The rank counts
    for its first 5 s (from 3 if started, else it stays at 0), then stops."""
    clock = Clock()
    beat = progress.Heartbeat.open(tmp_path, 0)
    watch = progress.Watchdog(tmp_path, stall_s=10, first_s=50, clock=clock)
    # the last move at step 9, 4.5 s
    t, why = _first_stall(watch, clock, beat, lambda step: 3 + min(step, 9) if started else 0)
    assert t == (4.5 + 10 if started else 50)
    assert ("rank 0 at 12" in why) if started else ("first 50 s" in why)


HANG_LOG = ("Exception in thread QueueFeederThread:\nTraceback (most recent call last):\n"
            "  File \"/usr/lib/python3.11/multiprocessing/queues.py\", line 239, in _feed\n"
            "    reader_close()\nOSError: AF_UNIX path too long\n")


@pytest.mark.parametrize("started", [False, True])
def test_a_log_that_shows_a_hang_stops_the_run_long_before_its_timeout(
        tmp_path: Path, started: bool) -> None:
    """A DataLoader worker's feeder thread died on a socket path (`progress.HANGS`): the
    run is stalled once its counters stood still `HANG_STILL_S`, not the 600 s before a first
    iteration nor the 120 s after one, and the reason quotes the log's exception."""
    clock, log = Clock(), tmp_path / "job.log"
    log.write_text("step 1\n" + HANG_LOG)
    beat = progress.Heartbeat.open(tmp_path, 0)
    beat(5 if started else 0)
    watch = progress.Watchdog(tmp_path, stall_s=120, first_s=600, clock=clock, log_path=log)
    t, why = _first_stall(watch, clock)
    assert t == progress.HANG_STILL_S
    assert why == "no iteration for 10 s after the job's log showed OSError: AF_UNIX path too long"


def test_an_exception_that_does_not_hang_waits_for_the_timeout(tmp_path: Path) -> None:
    """A worker's exception that the loader raises in the rank ends the job by itself; a
    log's other exceptions are no reason to stop a run early: the 50 s timeout applies."""
    clock, log = Clock(), tmp_path / "job.log"
    log.write_text(HANG_LOG.replace("OSError: AF_UNIX path too long", "KeyError: 'label'"))
    progress.Heartbeat.open(tmp_path, 0)(0)
    watch = progress.Watchdog(tmp_path, stall_s=10, first_s=50, clock=clock, log_path=log)
    assert _first_stall(watch, clock) == (50, "no iteration in the first 50 s")


def test_process_states_of_a_sleeping_process() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.5)
        (state,) = progress.process_states([sleeper.pid, 1 << 30])  # the second does not exist
        assert state.pid == sleeper.pid and state.state == "S" and state.name.startswith("python")
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.slow
@needs_cgroups
def test_a_script_that_hangs_is_stopped_as_stalled_and_the_sweep_goes_on(
        small_dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The script sleeps for good at its 4th batch: the cached run stops 3 s after its last
    iteration, recorded as stalled with the rank's count and its processes asleep; the loader
    run after it (which never reaches the loop's body) completes; the table names the run."""
    prefix = tmp_path / "p"
    t0 = time.monotonic()
    rc = harness("--prefix", prefix, "--data", small_dataset, "--modes", "cached,loader",
                 "--iters", 20, "--warmup", 1, "-b", 4, "--stall-timeout", 3, "--startup-timeout", 200,
                 "--no-plots",
                 "--no-advice", str(SCRIPTS / "train_hangs.py"), small_dataset)
    took = time.monotonic() - t0
    out = capsys.readouterr().out
    assert rc == 1
    runs = {p.stem: RunResult.from_dict(json.loads(p.read_text()))
            for p in (prefix / "runs").glob("*.json")}
    stalled, loader = runs["cached-cpusall"], runs["loader-cpusall"]
    assert stalled.status is Status.STALLED and loader.ok
    assert stalled.stall is not None and stalled.stall.iterations == {0: 3}
    assert 3 <= stalled.stall.still_s < 6
    assert any(p.state == "S" and p.name.startswith("python") for p in stalled.stall.processes)
    assert stalled.stall.memory_bytes and stalled.stall.read_bytes is not None
    assert "run cached-cpusall stalled: no iteration for" in out
    assert stalled.stall.log_exception is None  # it raised nothing: it sleeps
    assert took < 300, took  # far from the 1800 s run timeout
    assert not [p for p in Path("/proc").glob("[0-9]*") if b"train_hangs.py" in _cmdline(p)]


@pytest.mark.slow
def test_a_worker_that_cannot_hand_over_its_batch_is_named_from_the_log(
        small_dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A TMPDIR too long for the Unix socket a DataLoader worker binds to hand a batch over by
    file descriptor: the worker's queue feeder thread raises and ends, the worker goes on, and
    the rank waits for the batch for good. The run is stopped seconds after the exception,
    not at its startup timeout, and the stall names the exception from the log, and what to
    do."""
    long = tmp_path / ("t" * max(1, 90 - len(str(tmp_path))))
    long.mkdir()
    monkeypatch.setenv("TMPDIR", str(long))
    monkeypatch.setattr(tempfile, "tempdir", None)
    prefix = tmp_path / "p"
    t0 = time.monotonic()
    rc = harness("--prefix", prefix, "--data", small_dataset, "--modes", "cached", "-b", 4,
                 "-j", 2, "--iters", 8, "--warmup", 2, "--sim-step-ms", 20,
                 "--startup-timeout", 300, "--no-plots", "--no-advice")
    took = time.monotonic() - t0
    out = capsys.readouterr()
    assert rc == 1
    # the worker fails 2-4 s into the job here, and the run stops 10 s later: far from 300 s
    assert took < 150, took
    (run,) = [RunResult.from_dict(json.loads(p.read_text())) for p in (prefix / "runs").glob("*.json")]
    assert run.status is Status.STALLED and run.stall is not None
    assert run.stall.log_exception == "OSError: AF_UNIX path too long"
    assert RunResult.from_dict(json.loads(json.dumps(run.to_dict()))).stall == run.stall
    assert "the log's last exception: OSError: AF_UNIX path too long" in out.out + out.err
    assert "set a shorter TMPDIR" in out.out + out.err
    assert run.error and "after the job's log showed OSError: AF_UNIX path too long" in run.error


def test_the_last_exception_of_a_log_is_the_last_traceback_s_own_line() -> None:
    log = ("step 1\nTraceback (most recent call last):\n  File \"a.py\", line 1, in f\n"
           "    g()\nValueError: first\n\nDuring handling of the above exception, another "
           "exception occurred:\n\nTraceback (most recent call last):\n  File \"b.py\", "
           "line 2, in h\n    raise KeyError('k')\nKeyError: 'k'\nstep 2\nwarning: later\n")
    assert progress.last_exception(log) == "KeyError: 'k'"
    assert progress.last_exception("step 1\nerror: not a traceback\n") is None


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


def test_stall_timeout_must_be_positive() -> None:
    assert harness("--stall-timeout", "0", "--data", os.devnull) == 2
