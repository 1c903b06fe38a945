"""Ctrl-C and SIGTERM (resources/interrupts.py): raised between waits on the job, never inside
`Popen.wait`; a teardown that hangs is stopped at its deadline and named."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from dsanalyze import launch
from dsanalyze.errors import Interrupted
from dsanalyze.resources import interrupts


@pytest.mark.parametrize("sig,raised", [(signal.SIGINT, KeyboardInterrupt),
                                        (signal.SIGTERM, Interrupted)])
def test_a_signal_storm_never_leaves_the_wait_on_the_job_holding_popen_lock(sig, raised):
    """A plain KeyboardInterrupt lands between `Popen.wait`'s `_waitpid_lock.acquire(False)`
    and its `try` about twice in 1000 signals at random moments (the lock then stays held
    and stopping the job hangs); here 600 signals at random moments of a tight wait on a
    real child each raise from the wait's own check, and the lock is free every time."""
    child = subprocess.Popen(["sleep", "600"])
    rng = random.Random(0)
    signal.signal(signal.SIGALRM, lambda *_: signal.raise_signal(sig))
    try:
        for _ in range(600):
            with interrupts.handled(), pytest.raises(raised) as caught:
                signal.setitimer(signal.ITIMER_REAL, rng.uniform(1e-4, 2e-3))
                launch._wait_job(child, 60, None, None, poll_s=0.0005)
            assert not child._waitpid_lock.locked()
            assert caught.traceback[-1].name == "check"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        child.kill()
        child.wait()


def test_a_second_signal_does_not_cut_the_teardown_short():
    """The first Ctrl-C raises; the teardown that follows runs to its end through more."""
    done, before = [], signal.getsignal(signal.SIGINT)
    with interrupts.handled(), pytest.raises(KeyboardInterrupt):
        try:
            signal.raise_signal(signal.SIGINT)
        finally:
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGTERM)
            done.append(True)
    assert done == [True]
    assert signal.getsignal(signal.SIGINT) is before


STUCK_TEARDOWN = """
import sys, threading, time
from dsanalyze.resources import interrupts
interrupts.TEARDOWN_S = float(sys.argv[1])
lock = threading.Lock()
with interrupts.handled():
    try:
        print("ready", flush=True)
        time.sleep(60)
    finally:
        lock.acquire()
        lock.acquire()  # a teardown stuck in a futex, as after a leaked Popen lock
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_teardown_stuck_after_a_signal_is_stopped_at_its_deadline_and_named(sig):
    teardown_s = 1.0
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(STUCK_TEARDOWN),
                             str(teardown_s)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        t0 = time.monotonic()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=teardown_s + interrupts.BACKSTOP_S)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 128 + sig
    # the deadline, not the C backstop after it; the 0.5 s steps of its wait
    assert teardown_s <= time.monotonic() - t0 < teardown_s + interrupts.BACKSTOP_S
    assert f"{signal.Signals(sig).name}: the harness did not finish stopping within 1 s" in err
    assert 'line 12 in <module>' in err  # where it was stuck: the second acquire
