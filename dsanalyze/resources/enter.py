"""Tiny wrapper: bind to the parent's life, join cgroups and pin CPUs, then exec the real command.

    python -m dsanalyze.resources.enter [--bind-to-parent PID|any] [--procs FILE]...
        [--cpus 0,1] [--oom-score-adj N] -- ARGV...

Writing its own pid into each `cgroup.procs` before `exec` puts the job, and
every process it will start, in the cgroup from its first instruction; there
is no window in which a rank or a DataLoader worker runs outside it (no
`preexec_fn`, no attaching after `Popen`). `--cpus` sets the CPU affinity,
which is the fallback for a CPU budget where cpusets are not writable.
`--oom-score-adj` makes the process the OOM killer's choice (used per rank).

`--bind-to-parent` sets `PR_SET_PDEATHSIG` to SIGKILL, which survives the
`exec`: the command is killed as soon as the thread that started it exits.
The harness starts the job from its main thread, and the torchrun agent its
ranks from its own main thread, so a harness killed with SIGKILL takes the
agent with it, and the agent its ranks (DataLoader workers notice their rank
is gone and exit; the harness's reaper, `lifeline.py`, kills whatever is left
in the run's cgroups). PID is the parent the wrapper expects (the harness):
if it is already gone, the wrapper exits at once instead of running an
orphan job; `any` checks against the parent found at start.
This module imports nothing heavy: it runs before every job.
"""

from __future__ import annotations

import os
import signal
import sys

PR_SET_PDEATHSIG = 1
ORPHANED_EXIT = 128 + signal.SIGKILL  # what the parent's death would have given


def bind_to_parent(expected: str, parent_at_start: int) -> None:
    """Die with SIGKILL when the parent thread exits; exit now if it already has."""
    import ctypes  # here, not at the top: the cgroup is joined (--procs) before this import

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return  # not Linux: the reaper alone cleans up
    parent = parent_at_start if expected == "any" else int(expected)
    # The parent may have died between fork and prctl: then no signal will come.
    if os.getppid() != parent:
        os._exit(ORPHANED_EXIT)


def main(argv: list[str]) -> None:
    parent_at_start = os.getppid()
    if "--" not in argv:
        sys.exit("usage: python -m dsanalyze.resources.enter [--bind-to-parent PID] [--procs F]... "
                 "[--cpus L] -- ARGV")
    split = argv.index("--")
    opts, command = argv[:split], argv[split + 1:]
    i = 0
    while i < len(opts):
        flag, value = opts[i], opts[i + 1]
        if flag == "--bind-to-parent":
            bind_to_parent(value, parent_at_start)
        elif flag == "--procs":
            with open(value, "w") as f:
                f.write(str(os.getpid()))
        elif flag == "--oom-score-adj":
            try:
                with open("/proc/self/oom_score_adj", "w") as f:
                    f.write(value)  # raising one's own score needs no privilege
            except OSError:
                pass
        elif flag == "--cpus":
            os.sched_setaffinity(0, {int(c) for c in value.split(",")})
        else:
            sys.exit(f"enter: unknown option {flag}")
        i += 2
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
