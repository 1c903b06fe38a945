"""One harness per dataset at a time: an `flock` keyed by the dataset's path.

    lock = DataLock.acquire("/data/imagenet/train", wait_s=0)
    ...                                   # the whole sweep: warm, evict, runs
    lock.release()

Two harnesses on one machine would warm and evict the same files under each
other's runs. The lock file is `/tmp/dsanalyze-locks/<sha256 of the dataset's
real path>.lock`, open to every user, and holds the holder's pid. `flock` is
released by the kernel when the holder dies, however it dies, and is not
passed to the job (the descriptor is not inheritable). A second harness waits
up to `wait_s` seconds, then refuses with a line naming the holder's pid.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import time
from pathlib import Path

from dsanalyze.errors import ResourceError

LOCK_DIR = Path("/tmp/dsanalyze-locks")
POLL_S = 0.2


def lock_path(data_dir: str | Path, lock_dir: Path = LOCK_DIR) -> Path:
    key = hashlib.sha256(os.path.realpath(data_dir).encode()).hexdigest()[:32]
    return lock_dir / f"{key}.lock"


def _holder(fd: int) -> str:
    try:
        return os.pread(fd, 32, 0).decode().strip() or "unknown"
    except OSError:
        return "unknown"


class DataLock:
    """An exclusive lock on one dataset, held by this process until `release`."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd: int | None = fd
        self.path = path

    @classmethod
    def acquire(cls, data_dir: str | Path, wait_s: float = 0.0,
                lock_dir: Path = LOCK_DIR) -> DataLock:
        """Take the lock, waiting up to `wait_s`; ResourceError naming the holder otherwise."""
        with contextlib.suppress(FileExistsError):
            lock_dir.mkdir(parents=True)
            os.chmod(lock_dir, 0o1777)  # every user's harness locks here
        path = lock_path(data_dir, lock_dir)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as e:
            raise ResourceError(f"cannot open the dataset lock {path} ({e.strerror}): "
                                f"make {lock_dir} writable") from None
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o666)  # the umask took write access from other users' harnesses
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = _holder(fd)
                    os.close(fd)
                    raise ResourceError(
                        f"another harness (pid {holder}) is measuring {data_dir} (lock {path}): "
                        "wait for it to finish, or pass --lock-wait SECONDS") from None
                time.sleep(POLL_S)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(fd, path)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = None

    def __enter__(self) -> DataLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
