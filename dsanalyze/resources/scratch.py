"""The job's own temporary directory: its TMPDIR, removed with all it holds once the job ends.

    with job_tmpdir(line) as tmp:         # <the harness's temp dir>/dsa-job-<pid>-XXXXXXXX
        Popen(argv, env={**env, "TMPDIR": str(tmp)})
        ...                               # the job ends, or is stopped
    # gone, whatever the job left in it

The harness stops a job with SIGTERM, then SIGKILL (`launch._kill_group`, the cgroup's
kill): a Python process stopped so runs no exit handlers, and what it made in the temporary
directory stays. Each DataLoader worker that handed a batch to its rank by file descriptor
(torch's default sharing strategy, through `multiprocessing.resource_sharer`) holds a
`pymp-*` directory with a socket there, removed only by its own clean exit, and torchrun's
agent its `torchelastic_*` log directory: this machine's /tmp held 767 and 3221 of them
after a few days of tests and benches.

The directory is made in the temporary directory the harness itself was given (`TMPDIR`,
else the system's), so the job's temporary files stay on the filesystem the user chose. A
socket's path has at most 107 bytes: where the job's would not fit under the run
directory's (a TMPDIR of over about 50 bytes), the job keeps its TMPDIR as it was (`fits`).
A killed harness's reaper removes it (`Lifeline.remove_after`); a reaper killed too leaves
it to `clean_stale` at the next start, which knows it by its harness's pid.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from dsanalyze.resources.cgroups import pid_alive
from dsanalyze.resources.lifeline import Lifeline

PREFIX = "dsa-job-"
SOCKET_PATH_MAX = 107  # bytes of an AF_UNIX socket's path (sun_path, less its NUL)
# what the job's processes add under TMPDIR for a socket: multiprocessing's resource sharer
SOCKET_TAIL = len("/pymp-abcdefgh/listener-abcdefgh")
RANDOM_CHARS = 8  # tempfile.mkdtemp's


def fits(parent: str | Path) -> bool:
    """A run directory in `parent` leaves the sockets the job makes under it within
    `SOCKET_PATH_MAX`: a DataLoader worker that cannot bind its socket hangs its rank (the
    error is in a feeder thread, the batch never comes)."""
    name = f"/{PREFIX}{os.getpid()}-" + "x" * RANDOM_CHARS
    return len(os.fsencode(str(parent))) + len(name) + SOCKET_TAIL <= SOCKET_PATH_MAX


@contextlib.contextmanager
def job_tmpdir(line: Lifeline | None = None) -> Iterator[Path | None]:
    """A fresh directory for one run's TMPDIR, removed on exit (and by `line`'s reaper if the
    harness is killed first); None where it would not `fit`: the job keeps the TMPDIR it
    had, and what it leaves there stays, as without the harness."""
    parent = tempfile.gettempdir()
    if not fits(parent):
        yield None
        return
    path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=parent))
    if line is not None:
        line.remove_after(path)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def job_env(env: dict[str, str], tmp: Path | None) -> dict[str, str]:
    """`env` with its TMPDIR at `tmp` (None: as it was), and the caches that torch keeps in
    the temporary directory to outlast a run left where they were: torch.compile's
    (inductor's, and Triton's under it), which a run directory removed after each run would
    make compile from nothing every run, a start-up the job does not have."""
    if tmp is None:
        return env
    out = {**env, "TMPDIR": str(tmp)}
    out.setdefault("TORCHINDUCTOR_CACHE_DIR", inductor_cache_dir(tmp.parent))
    return out


def inductor_cache_dir(temp: Path) -> str:
    """torch.compile's cache directory where TORCHINDUCTOR_CACHE_DIR is not set, for a
    temporary directory `temp` (torch/_inductor/runtime/cache_dir_utils.py's
    `default_cache_dir`, outside fbcode)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid_{os.getuid()}"
    return os.path.join(str(temp), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def clean_stale(parent: Path | None = None) -> list[Path]:
    """Remove the run directories (`job_tmpdir`) in `parent` (the temporary directory) whose
    harness is gone; return them."""
    parent = parent or Path(tempfile.gettempdir())
    gone = []
    with contextlib.suppress(OSError):
        for d in parent.iterdir():
            m = re.fullmatch(rf"{PREFIX}(\d+)-\w+", d.name)
            if m and not pid_alive(int(m.group(1))) and d.is_dir() and not d.is_symlink():
                shutil.rmtree(d, ignore_errors=True)
                gone.append(d)
    return gone
