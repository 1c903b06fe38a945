"""Per-transform timing of a dataset's preprocessing, in every DataLoader worker.

    sink = transforms.sink_dir(run_dir, rank)
    steps = transforms.instrument_dataset(loader.dataset, sink)   # before the first iter()
    ... train ...
    table = transforms.finish(loader, sink)                        # after the last batch

What is timed: the steps of each torchvision `Compose` (v1 `transforms.Compose`
and v2 `transforms.v2.Compose`) found among the dataset's attributes (its
`transform`, `target_transform`, `transforms`, or any other attribute holding a
Compose), a single non-Compose `transform`, and a `DatasetFolder`'s `loader`
(file read + image decode, named `read+decode`). Wrapped datasets are followed
through `.dataset` (Subset) and `.datasets` (ConcatDataset). A webdataset
pipeline's stages are searched for a Compose among their bound arguments
(`.map_tuple(Compose(...), ...)`: stage `pipeline[i]`), and a torchdata.nodes
graph for the dataset whose `__getitem__` it maps (`graph_dataset`). Only the top level
of a pipeline is broken down: a nested Compose is one step.

How, without a patched PyTorch or torchvision: each step is replaced, in place
in the Compose's `transforms` list, by a `TimedStep` that calls it between two
`time.perf_counter_ns()` reads and two of its thread's CPU clock
(`time.thread_time_ns()`, a system call: 0.57 us a read here, against 0.14 for
the wall clock; about 1.5 us a call in all, against 0.1-1 ms per decode or crop:
`bench/overhead.py` measures it). The CPU clock is the step's own work, without
the time its thread waited for a core or for storage (`analysis/workspeed.py`). This is done in the rank before the first `iter()`, so the
forked (or spawned: `TimedStep` pickles) DataLoader workers inherit it.

Aggregation across processes: every process (each worker, or the rank itself
with `num_workers=0`) accumulates `calls` and nanoseconds per step, and writes
its totals to its own file `<sink>/pid<P>-<T>.json`: at most once a second
while it works, and at exit (a `multiprocessing.util.Finalize`, which worker
processes run when they shut down). `finish` shuts the loader's persistent
workers down, so their last totals are written, and sums the files. The table
counts every sample a worker prepared, including warm-up and prefetched ones:
its means are per sample, not per measured iteration.

Table rows (`step_table`): `stage` (`loader`, or the attribute that holds the
pipeline: `transform`, ...), `index` (position in the pipeline), `name`,
`calls`, `total_s`, `mean_s_per_sample` (= total_s / calls). The sum of the
means is the worker time one sample costs in these steps; with w workers on c
free cores the steps alone allow about min(w, c) / sum samples/s.

This module imports neither torch nor torchvision: it recognises a Compose by
its module and class name, so the report can read its tables without them.
"""

from __future__ import annotations

import json
import multiprocessing.util
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from dsanalyze.records import LOADER_STAGE, step_table

FLUSH_INTERVAL_NS = 1_000_000_000
READ_DECODE = "read+decode"


class TimedStep:
    """A transform (or loader function) whose calls are timed; picklable."""

    def __init__(self, fn: Callable[..., Any], stage: str, index: int, name: str,
                 sink: str | None) -> None:
        self.fn, self.stage, self.index, self.name, self.sink = fn, stage, index, name, sink
        self.key = f"{stage}\t{index}\t{name}"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        out = self.fn(*args, **kwargs)
        t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        _ACC.add(self.key, t1 - t0, t1, self.sink, c1 - c0)
        return out

    def __getattr__(self, name: str) -> Any:
        # Attributes of the transform (size, p, ...) stay readable; pickle's
        # look-ups before __dict__ is restored must not recurse.
        if name.startswith("__") or name in ("fn", "stage", "index", "name", "sink", "key"):
            raise AttributeError(name)
        return getattr(self.fn, name)

    def __repr__(self) -> str:
        return repr(self.fn)


class ProcessTotals:
    """Per-process totals: key -> [calls, nanoseconds, CPU nanoseconds of the calling thread],
    written under a sink directory."""

    def __init__(self) -> None:
        self.pid = -1
        self.totals: dict[str, list[int]] = {}
        self.sink: str | None = None
        self.path: Path | None = None
        self.last_flush_ns = 0

    def _start(self, sink: str | None) -> None:
        # A forked worker inherits its parent's totals: start from zero, own file.
        # So does a process that starts timing for another sink (tests, a second run).
        if self.pid >= 0:
            self.flush()
        self.pid = os.getpid()
        self.totals = {}
        self.sink = sink
        self.path = Path(sink) / f"pid{self.pid}-{time.monotonic_ns()}.json" if sink else None
        self.last_flush_ns = time.perf_counter_ns()
        if self.path is not None:
            multiprocessing.util.Finalize(None, self.flush, exitpriority=0)

    def forget(self) -> None:
        """In a forked child (a DataLoader worker): the parent's totals are not ours."""
        self.pid = -1

    def add(self, key: str, ns: int, now_ns: int, sink: str | None, cpu_ns: int = 0) -> None:
        if self.pid < 0 or self.sink != sink:
            self._start(sink)
        entry = self.totals.get(key)
        if entry is None:
            self.totals[key] = [1, ns, cpu_ns]
        else:
            entry[0] += 1
            entry[1] += ns
            entry[2] += cpu_ns
        if self.path is not None and now_ns - self.last_flush_ns > FLUSH_INTERVAL_NS:
            self.flush()

    def flush(self) -> None:
        """Write this process's totals (atomically: temp file + rename)."""
        if self.path is None or self.pid != os.getpid() or not self.totals:
            return
        self.last_flush_ns = time.perf_counter_ns()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"pid": self.pid, "totals": self.totals}))
            os.replace(tmp, self.path)
        except OSError:
            pass  # the run directory is gone: the harness has finished with this run


_ACC = ProcessTotals()
os.register_at_fork(after_in_child=_ACC.forget)


def sink_dir(run_dir: str | Path | None, rank: int) -> str | None:
    """Where the processes of `rank` write their totals (None: keep them in-process)."""
    return None if run_dir is None else str(Path(run_dir) / f"transforms-rank{rank}")


def _is_compose(obj: Any) -> bool:
    cls = type(obj)
    return (cls.__name__ == "Compose" and cls.__module__.startswith("torchvision.transforms")
            and isinstance(getattr(obj, "transforms", None), list))


def _datasets(dataset: Any, depth: int = 4) -> Iterable[Any]:
    """The dataset and those it wraps (Subset.dataset, ConcatDataset.datasets)."""
    yield dataset
    if depth == 0:
        return
    inner = getattr(dataset, "dataset", None)
    if inner is not None and inner is not dataset:
        yield from _datasets(inner, depth - 1)
    for d in getattr(dataset, "datasets", None) or ():
        yield from _datasets(d, depth - 1)


def step_name(step: Any) -> str:
    """A transform object's class name; a function's (or a lambda's) own name."""
    return getattr(step, "__name__", None) or type(step).__name__


def _names(steps: list[Any]) -> list[str]:
    """Step names; a name that repeats gets `#2`, `#3`."""
    seen: dict[str, int] = {}
    out = []
    for s in steps:
        base = step_name(s)
        seen[base] = seen.get(base, 0) + 1
        out.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
    return out


def _wrap_compose(compose: Any, stage: str, sink: str | None) -> list[str]:
    steps = compose.transforms
    if any(isinstance(s, TimedStep) for s in steps):
        return []
    names = _names(steps)
    for i, (step, name) in enumerate(zip(steps, names)):
        steps[i] = TimedStep(step, stage, i, name, sink)
    return [f"{stage}/{n}" for n in names]


def _stage_arguments(stage: Any) -> list[Any]:
    """The arguments bound in a pipeline stage: functools.partial, webdataset's RestCurried."""
    args = getattr(stage, "args", None)
    kwargs = getattr(stage, "keywords", None) or getattr(stage, "kw", None)
    return [*(args if isinstance(args, tuple) else ()),
            *(kwargs.values() if isinstance(kwargs, dict) else ())]


def graph_dataset(loader: Any) -> Any:
    """The map-style dataset a torchdata.nodes graph maps over (`map_fn=dataset.__getitem__`)."""
    node = getattr(loader, "root", None)
    for _ in range(16):
        owner = getattr(getattr(node, "map_fn", None), "__self__", None)
        if owner is not None and hasattr(owner, "__getitem__"):
            return owner
        node = getattr(node, "source", None)
        if node is None:
            return None
    return None


def instrument_dataset(dataset: Any, sink: str | None) -> list[str]:
    """Time the preprocessing steps of `dataset` in place; returns `stage/name` of each.

    Call it before the loader's first `iter()`, so that workers inherit it.
    Idempotent: steps already timed are left as they are.
    """
    wrapped: list[str] = []
    if dataset is None:  # a DALI iterator: its operators run in C++, not timed here
        return wrapped
    for ds in _datasets(dataset):
        load = getattr(ds, "loader", None)
        if callable(load) and hasattr(ds, "samples") and not isinstance(load, TimedStep):
            ds.loader = TimedStep(load, LOADER_STAGE, 0, READ_DECODE, sink)
            wrapped.append(f"{LOADER_STAGE}/{READ_DECODE}")
        for i, stage in enumerate(getattr(ds, "pipeline", None) or ()):
            for value in _stage_arguments(stage):  # webdataset: .map_tuple(Compose, ...)
                if _is_compose(value):
                    wrapped += _wrap_compose(value, f"pipeline[{i}]", sink)
        for attr, value in list(getattr(ds, "__dict__", {}).items()):
            if _is_compose(value):
                wrapped += _wrap_compose(value, attr, sink)
            elif attr == "transform" and callable(value) and not isinstance(value, TimedStep):
                name = step_name(value)
                setattr(ds, attr, TimedStep(value, attr, 0, name, sink))
                wrapped.append(f"{attr}/{name}")
    return wrapped


def shutdown_workers(loader: Any) -> None:
    """Stop a DataLoader's persistent workers, so that they write their last totals."""
    it = getattr(loader, "_iterator", None)
    stop = getattr(it, "_shutdown_workers", None)
    if callable(stop):
        stop()


def sum_totals(sink: str | None, acc: ProcessTotals) -> dict[str, list[int]]:
    """`acc`'s totals in this process plus every process's file under `sink`, summed by key."""
    acc.flush()
    totals: dict[str, list[int]] = {}
    sources = []
    if sink is not None and Path(sink).is_dir():
        for f in sorted(Path(sink).glob("pid*.json")):
            try:
                sources.append(json.loads(f.read_text())["totals"])
            except (OSError, ValueError, KeyError):
                continue  # a file being replaced: its process wrote it again, or never will
    if sink is None and acc.pid == os.getpid() and acc.sink is None:
        sources.append(acc.totals)  # nowhere to write: this process's own totals
    for src in sources:
        for key, counts in src.items():
            t = totals.setdefault(key, [0, 0, 0])
            for i, n in enumerate(counts[:3]):
                t[i] += n
    return totals


def collect(sink: str | None) -> list[dict[str, Any]]:
    """Sum this process's totals and every file under `sink` into the step table."""
    return step_table(sum_totals(sink, _ACC))


def finish(loader: Any, sink: str | None) -> list[dict[str, Any]]:
    """After the last batch: stop the workers, then the table of this rank."""
    shutdown_workers(loader)
    return collect(sink)
