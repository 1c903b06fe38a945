"""Which files the training loader reads: the rank's half of finding the data without `--data`.

Two sources, both reported in the rank record (`extra["data"]`) of the
harness's discovery run (`DSANALYZE_DISCOVER=1`, see `dsanalyze/datafind.py`):

- `declared`: what the loader's objects say they read, found by walking
  the training loader's attributes (`dataset`, `datasets`, `loader`,
  `source`, `root` node, webdataset `pipeline` stages): an `ImageFolder`'s
  `root`, a `samples`/`imgs` list of (path, label), webdataset
  `urls`, or a list of paths in `files`, `paths`, `shards`, `file_list`.
- `opened`: every regular file opened for reading, in the rank and in its
  (forked) DataLoader workers, while the training loader was iterated:
  an audit hook (`sys.addaudithook`, event `open`), installed when the
  training loader is chosen, before its workers start. Python's own files
  (the interpreter's prefix, site-packages, `.py`/`.pyc`/`.so`) and
  `/proc`, `/sys`, `/dev` and the run directory are left out. Each process writes its set to
  `<sink>/opened-<pid>.txt` (at most every half second, and at exit).
"""

from __future__ import annotations

import multiprocessing.util
import os
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dsanalyze.instrument import dalipipes

PATH_LISTS = ("files", "paths", "shards", "file_list", "filenames", "urls")
CHILDREN = ("dataset", "datasets", "loader", "base_dataloader", "source", "root", "pipeline",
            "datapipe", "_dataset", "reader")
SKIP_SUFFIXES = (".py", ".pyc", ".so", ".pth")
SKIP_DIRS = ("/proc/", "/sys/", "/dev/")
FLUSH_INTERVAL_S = 0.5
MAX_DEPTH = 6


def _as_path(value: Any) -> str | None:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value:
        return None
    value = value.removeprefix("file://").removeprefix("file:")
    return os.path.abspath(value) if os.path.exists(value) else None


def _paths(values: Any) -> list[str]:
    if isinstance(values, (str, os.PathLike)):
        values = [values]
    if not isinstance(values, (list, tuple)):
        return []
    out = []
    for v in values:
        p = _as_path(v[0] if isinstance(v, (list, tuple)) and v else v)
        if p is None:
            return []  # not a list of local paths
        out.append(p)
    return out


def _children(obj: Any) -> Iterator[Any]:
    for name in CHILDREN:
        try:
            child = getattr(obj, name, None)
        except Exception:  # a property that cannot be computed yet
            continue
        if isinstance(child, (list, tuple)):
            yield from child
        elif child is not None and not isinstance(child, (str, os.PathLike)):
            yield child


def declared(loader: Any) -> dict[str, Any] | None:
    """`{"source": "ImageFolder.root", "paths": [...]}` from the loader's objects, or None."""
    if getattr(loader, "_pipes", None):
        return _dali_paths(loader._pipes)
    seen: set[int] = set()
    todo = [(loader, 0)]
    while todo:
        obj, depth = todo.pop(0)
        if id(obj) in seen or depth > MAX_DEPTH:
            continue
        seen.add(id(obj))
        found = _own_paths(obj)
        if found is not None:
            return found
        todo += [(c, depth + 1) for c in _children(obj)]
    return None


def _own_paths(obj: Any) -> dict[str, Any] | None:
    name = type(obj).__name__
    root = _as_path(getattr(obj, "root", None))
    if root is not None and os.path.isdir(root):
        return {"source": f"{name}.root", "paths": [root]}
    for attr in ("samples", "imgs", *PATH_LISTS):
        try:
            paths = _paths(getattr(obj, attr, None))
        except Exception:
            continue
        if paths:
            return {"source": f"{name}.{attr}", "paths": paths}
    return None


# The arguments of DALI's readers that name what they read: a folder (fn.readers.file,
# numpy), or files (file, numpy, webdataset's tar `paths`, tfrecord/caffe/mxnet `path`).
DALI_READER_ARGS = ("file_root", "files", "paths", "path")


def _dali_paths(pipes: list[Any]) -> dict[str, Any] | None:
    """What a DALI iterator's readers read, from the arguments the script gave them (their
    C++ reads pass no Python audit hook); None when no reader names a local path."""
    for name, op in dalipipes.operators(pipes, "readers"):
        args = getattr(op, "_init_args", {})
        for arg in DALI_READER_ARGS:
            paths = _paths(args.get(arg))
            if paths:
                reader = name.removeprefix("readers__").lower()
                return {"source": f"DALI readers.{reader}({arg}=...)", "paths": paths}
    return None


def _python_dirs() -> tuple[str, ...]:
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, *sysconfig.get_paths().values()}
    return tuple(os.path.join(os.path.abspath(d), "") for d in dirs if d)


class OpenAudit:
    """Records the regular files opened for reading, per process, under `sink`."""

    def __init__(self, sink: str) -> None:
        self.sink, self.pid, self.opened = sink, -1, set()
        run_dir = os.path.dirname(os.path.abspath(sink))  # the harness's own files
        self.skip = (*_python_dirs(), *SKIP_DIRS, os.path.join(run_dir, ""))
        self.last_flush_s, self.busy = 0.0, False

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if event != "open" or self.busy:
            return
        path, mode, flags = (tuple(args) + (None, None, None))[:3]
        if not isinstance(path, (str, bytes, os.PathLike)) or isinstance(path, int):
            return
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR))
        if writing:
            return
        self.busy = True  # flushing opens files too
        try:
            self._add(os.path.abspath(os.fsdecode(path)))
        finally:
            self.busy = False

    def _add(self, path: str) -> None:
        if path.endswith(SKIP_SUFFIXES) or path.startswith(self.skip) or path in self.opened:
            return
        if not os.path.isfile(path):
            return
        if self.pid != os.getpid():  # a forked worker: its own set, its own file
            self.pid, self.opened = os.getpid(), set()
            multiprocessing.util.Finalize(None, self.flush, exitpriority=0)
        self.opened.add(path)
        if time.monotonic() - self.last_flush_s > FLUSH_INTERVAL_S:
            self.flush()

    def flush(self) -> None:
        if self.pid != os.getpid() or not self.opened:
            return
        self.busy, self.last_flush_s = True, time.monotonic()
        try:
            out = Path(self.sink) / f"opened-{self.pid}.txt"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.with_suffix(".tmp").write_text("\n".join(sorted(self.opened)))
            os.replace(out.with_suffix(".tmp"), out)
        except OSError:
            pass
        finally:
            self.busy = False


def start_audit(sink: str) -> OpenAudit:
    """Record the files opened from now on, in this process and those it forks."""
    audit = OpenAudit(sink)
    sys.addaudithook(audit.hook)  # cannot be removed: only the discovery run installs it
    return audit


def opened(audit: OpenAudit) -> list[str]:
    """Every file the rank and its workers opened for reading since `start_audit`."""
    audit.flush()
    found: set[str] = set(audit.opened)
    for f in Path(audit.sink).glob("opened-*.txt"):
        try:
            found.update(line for line in f.read_text().splitlines() if line)
        except OSError:
            continue
    return sorted(found)
