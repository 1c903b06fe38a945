"""Bytes read and time blocked reading, per data file (webdataset shards), in every worker.

A streaming loader reads a few large files (shards) sequentially, so the
file, not the sample, is the unit of fetch. webdataset opens each shard in
`webdataset.cache.StreamingOpen` (`WebDataset`) or `webdataset.gopen.gopen`
(`tarfile_to_samples` pipelines); while a rank is profiled both hand out the
stream of a local file wrapped in a `CountingReader`, which adds to per-file
totals of its process:

- `opens`: times the file was opened;
- `read_bytes`: bytes that `read`/`readinto`/`readline` returned;
- `read_s`: time spent inside those calls, i.e. blocked on the page cache
  (cached mode) or on storage (disk mode): the fetch of that shard.

The patch is installed in the rank before its first `iter()` forks the
DataLoader workers, which inherit it. Totals are written and summed as the
per-transform ones are (`transforms.ProcessTotals`: one file per process
under the rank's sink, at most once a second and at exit). `table` gives one
row per file: `{"file", "opens", "read_bytes", "read_s"}`; the fetch stall
of a shard is its `read_s` in a disk run minus that in the cached run
(`analysis/shards.py`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dsanalyze.instrument.loader import patch_attr
from dsanalyze.instrument.transforms import ProcessTotals, sum_totals

WEBDATASET_GOPEN = "webdataset.gopen"  # gopen(url): tariterators.url_opener's way
WEBDATASET_CACHE = "webdataset.cache"  # StreamingOpen: WebDataset's way (local files: open())

_TOTALS = ProcessTotals()
os.register_at_fork(after_in_child=_TOTALS.forget)


def sink_dir(run_dir: str | Path | None, rank: int) -> str | None:
    """Where the processes of `rank` write their per-file totals (None: in-process only)."""
    return None if run_dir is None else str(Path(run_dir) / f"files-rank{rank}")


class CountingReader:
    """A binary stream whose reads are counted and timed against `path`."""

    def __init__(self, stream: Any, path: str, sink: str | None) -> None:
        self._stream, self._path, self._sink = stream, path, sink
        _TOTALS.add(f"{path}\topens", 0, time.perf_counter_ns(), sink)

    def _timed(self, method: Callable[..., Any], *args: Any) -> Any:
        t0 = time.perf_counter_ns()
        out = method(*args)
        t1 = time.perf_counter_ns()
        n = out if isinstance(out, int) else len(out or b"")
        _TOTALS.add(f"{self._path}\tread_s", t1 - t0, t1, self._sink)
        _TOTALS.add(f"{self._path}\tread_bytes", n, t1, self._sink)
        return out

    def read(self, *args: Any) -> Any:
        return self._timed(self._stream.read, *args)

    def readinto(self, buffer: Any) -> Any:
        return self._timed(self._stream.readinto, buffer)

    def readline(self, *args: Any) -> Any:
        return self._timed(self._stream.readline, *args)

    def __iter__(self) -> Any:
        return iter(self.readline, b"")

    def __enter__(self) -> CountingReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._stream, name)


def local_path(url: Any) -> str | None:
    """The local file a webdataset url names (`/x.tar`, `file:/x.tar`), or None."""
    text = os.fspath(url) if isinstance(url, (str, os.PathLike)) else None
    if text is None:
        return None
    text = text.removeprefix("file://").removeprefix("file:")
    return os.path.abspath(text) if os.path.isfile(text) else None


def patch_gopen(module: Any, sink: str | None) -> Callable[[], None]:
    """Count reads of every local file `module.gopen` opens; returns the undo."""
    original = module.gopen

    def gopen(url: Any, *args: Any, **kwargs: Any) -> Any:
        stream = original(url, *args, **kwargs)
        path = local_path(url)
        mode = args[0] if args else kwargs.get("mode", "rb")
        if path is None or "r" not in str(mode):
            return stream
        return CountingReader(stream, path, sink)
    gopen.__doc__ = original.__doc__
    return patch_attr(module, "gopen", gopen)


def patch_streaming_open(module: Any, sink: str | None) -> Callable[[], None]:
    """Count reads of the local shards `module.StreamingOpen` opens; returns the undo."""
    cls = module.StreamingOpen
    original = cls.__call__

    def __call__(self: Any, urls: Any) -> Any:
        for item in original(self, urls):
            path = local_path(item.get("local_path") or item.get("url"))
            if path is not None and "stream" in item:
                item["stream"] = CountingReader(item["stream"], path, sink)
            yield item
    __call__.__doc__ = original.__doc__
    return patch_attr(cls, "__call__", __call__)


def table(sink: str | None) -> list[dict[str, Any]]:
    """One row per file read in this rank (its workers included), sorted by path."""
    rows: dict[str, dict[str, Any]] = {}
    for key, (calls, value, *_cpu) in sum_totals(sink, _TOTALS).items():  # no CPU clock here
        path, what = key.rsplit("\t", 1)
        row = rows.setdefault(path, {"file": path, "opens": 0, "read_bytes": 0, "read_s": 0.0})
        if what == "opens":
            row["opens"] = calls
        elif what == "read_bytes":
            row["read_bytes"] = value
        else:
            row["read_s"] = value / 1e9
    return [rows[p] for p in sorted(rows)]
