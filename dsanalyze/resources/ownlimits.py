"""The cache limiter's own process limits: its thread's priority, its descriptors.

`raise_priority`: the limiter plays the kernel's page cache and must run when the job's
reads need it; `fds_for`: the gate holds a descriptor per dataset file it tracks.
"""

from __future__ import annotations

import os
import resource
import threading

BOOST_NICE = 10  # the limiter thread's nice below the harness's (and so the job's)
SPARE_FDS = 256  # descriptors left for the rest of the process when gating


def raise_priority(by: int = BOOST_NICE) -> int:
    """This thread's nice value lowered by `by` (to at most -20), where allowed (root or
    RLIMIT_NICE): the limiter plays the kernel's page cache, which evicts as the reader
    reads. On a loaded CPU, a limiter at the job's priority runs late, and the dataset's
    pages pile up above the budget between its passes. It runs for a few ms a second;
    the job's own threads (forked from others) keep their priority. Returns the nice
    value it runs at."""
    tid = threading.get_native_id()
    now = os.getpriority(os.PRIO_PROCESS, tid)
    try:
        os.setpriority(os.PRIO_PROCESS, tid, max(-20, now - by))
    except OSError:
        return now  # not allowed: it stays at the harness's priority
    return os.getpriority(os.PRIO_PROCESS, tid)


def fds_for(files: int) -> bool:
    """Whether this process may hold a descriptor per dataset file (the gate holds one per
    file it tracks), raising its soft limit to the hard one if need be."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if files + SPARE_FDS > soft and soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return files + SPARE_FDS <= soft
