"""The job dies with its harness: a reaper that outlives the harness just long enough.

    with Lifeline() as line:                      # starts the reaper
        line.watch_cgroups(cg_dirs)               # the run's cgroup directories
        proc = Popen(line.bind_args() ...)        # the job, bound to the harness (enter.py)
        line.watch_group(proc.pid)                # the job's process group
        ...                                       # the harness removes its cgroups itself
    # the reaper is told "done" and exits

The reaper is a small process in its own session, outside the job's cgroups,
whose standard input is a pipe only the harness holds. The harness writes what
to watch as lines; when it ends normally it writes `done`. If instead the pipe
reaches end-of-file with no `done` (the harness was killed with SIGKILL, by
the OOM killer, a lost SSH session or a scheduler), the reaper SIGKILLs the
job's process group and every process in the run's cgroups until none is
left, removes the cgroups, unlists the cgroup v2 controllers the harness listed
for them (`unlist_after`) unless another run cgroup still needs them, runs the
undo commands it was given (`undo_with`: a network namespace to delete), removes the
directories it was given (`remove_after`: the job's TMPDIR), and exits: the last process
standing cleans up.
`cgroups.clean_stale` at the next start remains the fallback for a reaper
that was itself killed. The reaper imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from dsanalyze.resources import cgroups

REAP_TIMEOUT_S = 30.0
DONE = "done"


class Lifeline:
    """The harness's end of the pipe to a reaper process."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      start_new_session=True, text=True)
        self._pipe: IO[str] | None = self._proc.stdin

    def __enter__(self) -> Lifeline:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    @property
    def reaper_pid(self) -> int:
        return self._proc.pid

    @staticmethod
    def bind_args() -> list[str]:
        """`enter` options that kill the job when this (main) thread of the harness exits."""
        return ["--bind-to-parent", str(os.getpid())]

    def watch_cgroups(self, dirs: Iterable[str | Path]) -> None:
        self._send(*(f"cgroup {d}" for d in dirs))

    def watch_group(self, pgid: int) -> None:
        self._send(f"pgid {pgid}")

    def unlist_after(self, parent: str | Path, controllers: tuple[str, ...],
                     record: str = "") -> None:
        """cgroup v2: controllers the harness listed in `parent`'s `cgroup.subtree_control`
        for its run cgroups, which the reaper unlists after removing them, unless another
        run cgroup is still there (`cgroups.unlist_unused`); then it drops their `record`
        (`cgroups.remember_listed`), so that no later start unlists them again."""
        self._send(f"unlist {json.dumps([str(parent), list(controllers), record])}")

    def undo_with(self, argv: list[str]) -> None:
        """A command the reaper runs after its kills (a network namespace to delete)."""
        self._send(f"run {json.dumps(argv)}")

    def remove_after(self, path: str | Path) -> None:
        """A directory the reaper removes, with all it holds, after its kills (the job's
        TMPDIR, `scratch.job_tmpdir`)."""
        self._send(f"rmtree {path}")

    def release(self) -> None:
        """The harness cleaned up itself: let the reaper go without touching anything."""
        if self._pipe is None:
            return
        with contextlib.suppress(OSError):
            self._send(DONE)
            self._pipe.close()
        self._pipe = None
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def _send(self, *lines: str) -> None:
        if self._pipe is not None:
            self._pipe.write("".join(f"{line}\n" for line in lines))
            self._pipe.flush()


def _procs(dirs: list[str]) -> set[int]:
    pids: set[int] = set()
    for d in dirs:
        with contextlib.suppress(OSError, ValueError):
            pids.update(int(p) for p in Path(d, "cgroup.procs").read_text().split())
    return pids


def _descendants(roots: list[int]) -> set[int]:
    """Every process below `roots` now, by /proc's parent links. A rank runs in a session of
    its own and its DataLoader workers in the rank's group: no signal to the launcher's group
    reaches them, and without cgroups nothing else lists them."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                ppid = int(Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def reap(pgids: list[int], dirs: list[str], timeout_s: float = REAP_TIMEOUT_S) -> bool:
    """Kill the job's groups, every process below their leaders and everything in its
    cgroups, then remove the cgroups.

    True when every cgroup directory is gone.
    """
    below = _descendants(pgids)  # before the kill: once a parent dies its children move away
    for pgid in pgids:
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)
    for pid in below:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    left = list(dirs)
    while left and time.monotonic() < deadline:
        for pid in _procs(left):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for d in list(left):
            try:
                os.rmdir(d)
                left.remove(d)
            except FileNotFoundError:
                left.remove(d)
            except OSError:
                pass  # EBUSY: processes still exiting
        if left:
            time.sleep(0.05)
    return not left


def undo(commands: list[list[str]]) -> None:
    """Run each command once, whatever the others do."""
    for argv in commands:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)


def main() -> int:
    # Ctrl-C and a hang-up reach the harness, which cleans up and says `done`.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    pgids: list[int] = []
    dirs: list[str] = []
    commands: list[list[str]] = []
    trees: list[str] = []
    listed: list[tuple[Path, tuple[str, ...], str]] = []
    for line in sys.stdin:
        word, _, value = line.strip().partition(" ")
        if word == DONE:
            return 0
        if word == "pgid":
            pgids.append(int(value))
        elif word == "cgroup":
            dirs.append(value)
        elif word == "run":
            commands.append(json.loads(value))
        elif word == "rmtree":
            trees.append(value)
        elif word == "unlist":
            parent, controllers, record = json.loads(value)
            listed.append((Path(parent), tuple(controllers), record))
    reaped = reap(pgids, dirs)
    for parent, controllers, record in listed:
        with contextlib.suppress(OSError):
            if cgroups.unlist_unused(parent, controllers) and record:
                cgroups.forget_listed(record)
    undo(commands)
    for tree in trees:  # after the kills: no process of the job writes there any more
        shutil.rmtree(tree, ignore_errors=True)
    return 0 if reaped else 1


if __name__ == "__main__":
    sys.exit(main())
