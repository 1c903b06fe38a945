"""Tiny wrapper: join cgroups and pin CPUs, then exec the real command.

    python -m dsanalyze.resources.enter [--procs FILE]... [--cpus 0,1] [--oom-score-adj N] -- ARGV...

Writing its own pid into each `cgroup.procs` before `exec` puts the job, and
every process it will start, in the cgroup from its first instruction; there
is no window in which a rank or a DataLoader worker runs outside it (no
`preexec_fn`, no attaching after `Popen`). `--cpus` sets the CPU affinity,
which is the fallback for a CPU budget where cpusets are not writable.
`--oom-score-adj` makes the process the OOM killer's choice (used per rank).
This module imports nothing heavy: it runs before every job.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> None:
    if "--" not in argv:
        sys.exit("usage: python -m dsanalyze.resources.enter [--procs F]... [--cpus L] -- ARGV")
    split = argv.index("--")
    opts, command = argv[:split], argv[split + 1:]
    i = 0
    while i < len(opts):
        flag, value = opts[i], opts[i + 1]
        if flag == "--procs":
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
