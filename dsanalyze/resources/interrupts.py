"""Ctrl-C and SIGTERM: the harness stops at a safe point, and its teardown is bounded.

    with interrupts.handled():              # the sweep: SIGINT and SIGTERM caught
        ...                                 # a signal raises here at once, as usual
        with interrupts.deferred():         # a wait on the job: a signal is only noted
            while not done:
                wait(0.5)
                interrupts.check()          # ... and raised here, between two waits

Python raises KeyboardInterrupt at whatever bytecode the main thread is at. CPython
3.11's `Popen.wait(timeout)` takes its `_waitpid_lock` with `acquire(False)` one
instruction before the `try` that releases it: an exception raised there leaves the
lock held, and the harness's next `proc.wait()` (stopping the job) blocks in a futex
forever, its cgroup still there. A signal storm hits that window about 2 times in 1000
(tests/test_interrupts.py); the harness's monitor threads, taking the GIL at those
instructions, make it likelier under load, where it was seen. Inside `deferred()` the
handler only notes the signal; the waiting loop raises it from its own frame.

The first signal also starts the teardown's deadline: the job is stopped and its
cgroups removed, and later signals are noted and ignored so that no second exception
cuts that short. If the harness is still inside `handled()` TEARDOWN_S later, it says
so, prints every thread's stack (what it is stuck in) and exits with the signal's code;
its lifeline reapers then kill the job and remove its cgroups and namespaces, as after
a crash (`resources/lifeline.py`).
"""

from __future__ import annotations

import _thread
import contextlib
import faulthandler
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

from dsanalyze.errors import Interrupted

TEARDOWN_S = 30.0  # after the first signal: stopping the job, removing its cgroups and servers
BACKSTOP_S = 10.0  # then the C-level watchdog, should the main thread never let go of the GIL
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Stop:
    """The process's one record of the signal that stops it (signal handlers are global)."""

    signum: int | None = None  # the first signal, once one came
    raised = False  # its exception was raised
    deferring = 0  # depth of `deferred()` blocks on the main thread
    generation = 0  # bumped when `handled()` ends: an armed deadline from before is void


def exception_for(signum: int) -> BaseException:
    """What a stop signal raises: KeyboardInterrupt (the CLI exits 130), Interrupted (143)."""
    return KeyboardInterrupt() if signum == signal.SIGINT else Interrupted()


def _on_signal(signum: int, frame: Any) -> None:
    if _Stop.signum is not None:
        return  # the teardown is under way, with its deadline: let it finish
    _Stop.signum = signum
    _arm_deadline(signum)
    if _Stop.deferring == 0:
        check()


def check() -> None:
    """Raise the stop signal's exception if one came and was not raised yet."""
    if _Stop.signum is not None and not _Stop.raised:
        _Stop.raised = True
        raise exception_for(_Stop.signum)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A block whose waits a signal must not cut at an arbitrary instruction: the handler
    notes it, the block's own `check()` calls raise it, and so does the block's end."""
    _Stop.deferring += 1
    try:
        yield
    finally:
        _Stop.deferring -= 1
    check()


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """SIGINT and SIGTERM handled as above inside the block (on the main thread); the old
    handlers, and a state with no signal, are back after it."""
    old = {s: signal.signal(s, _on_signal) for s in SIGNALS}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        _Stop.generation += 1
        _Stop.signum, _Stop.raised = None, False
        faulthandler.cancel_dump_traceback_later()


def _arm_deadline(signum: int) -> None:
    # a raw thread: `threading` takes module locks that the interrupted main thread may hold
    _thread.start_new_thread(_deadline, (signum, _Stop.generation, TEARDOWN_S))
    faulthandler.dump_traceback_later(TEARDOWN_S + BACKSTOP_S, exit=True, file=2)


def _deadline(signum: int, generation: int, after_s: float) -> None:
    """Exit the process if the teardown of `generation` is still running `after_s` later."""
    end = time.monotonic() + after_s
    while time.monotonic() < end:
        time.sleep(min(0.5, max(0.0, end - time.monotonic())))
        if _Stop.generation != generation:
            return
    name = signal.Signals(signum).name
    # straight to the descriptor: the stuck main thread may hold sys.stderr's lock
    os.write(2, (f"error: {name}: the harness did not finish stopping within {after_s:.0f} s; "
                 "it is stuck where its main thread's stack below shows. Exiting now: the "
                 "lifeline reapers kill the job and remove its cgroups and namespaces\n").encode())
    faulthandler.dump_traceback(file=2, all_threads=True)
    os._exit(128 + signum)
