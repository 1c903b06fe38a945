"""Run an unmodified training script in each rank, with the instrumentation in place.

    python -m torch.distributed.run --nproc_per_node 2 \\
        -m dsanalyze.instrument.bootstrap train.py --its --own args
    python -m torch.distributed.run ... -m dsanalyze.instrument.bootstrap -m package.module ARGS

(`launch.job_argv` builds this line; the run is described by the
`DSANALYZE_*` variables of `rank.py` and `api.py`.) In each rank:

1. A session is started (`api.Session`) and patches installed:
   `torch.utils.data.DataLoader.__init__` registers each loader in creation
   order, `DataLoader.__iter__` hands every epoch to the session; the same two
   for DALI iterators (`nvidia.dali.plugin.base_iterator._DaliBaseIterator`),
   `torchdata.nodes.Loader` and timm's `PrefetchLoader` (`EXTRA_LOADERS`),
   each patched when, and only if, the script imports it (an import hook: a
   script that does not use DALI does not pay for importing it). webdataset's
   `gopen` and `StreamingOpen` are wrapped to count and time the reads of each shard
   (`filereads.py`).
2. The script runs as `python train.py ARGS` would run it: `runpy.run_path`
   with `run_name="__main__"`, `sys.argv = [train.py, ARGS...]`, the script's
   directory first on `sys.path`, torchrun's environment (RANK, WORLD_SIZE,
   LOCAL_RANK, MASTER_ADDR, ...) untouched; `-m MODULE` as `python -m MODULE
   ARGS` would run it (`runpy.run_module`): the built-in job runs so.
3. The training loader is the first loader iterated whose sampler shuffles
   (RandomSampler, DistributedSampler(shuffle=True), a DALI reader with
   random_shuffle); a loader iterated before it is left alone if a shuffled
   one has already been created, else it is the training loader (the first
   iterated). `--loader-index K` (`DSANALYZE_LOADER_INDEX`) picks the K-th
   loader created instead (0-based), and `dsanalyze.instrument(loader)` in the
   script wins over both. Every other loader (validation) runs untouched, and
   its time is outside the measured iterations.
4. What the training loader does per mode (timing, synthetic replay on the
   script's device, per-transform timing, loader-only) is described in
   `api.py`. Once `--iters` iterations are measured (or `--epochs` epochs), its
   `next()` raises `StopProfiling`; every rank stops at the same iteration.
5. The rank writes its record (`rank.write_record`, with `batches_per_epoch`,
   the loaders seen, the per-transform table in `extra`), then, if the script
   initialised `torch.distributed`, waits at a barrier (no rank tears its
   sockets down while a peer is still in the last step's all-reduce) and
   destroys the process group. It runs the exit handlers and exits 0
   without finalizing the interpreter (`_finish`): a thread the script
   started must not keep the rank alive, and a loader's threads stopped
   mid-epoch must not abort it.

Not covered: scripts that start their own processes (`mp.spawn`): their
children are not instrumented; run them under torchrun instead.
"""

from __future__ import annotations

import atexit
import functools
import gc
import importlib.abc
import importlib.machinery
import importlib.util
import os
import runpy
import sys
import threading
import time
import types
from collections.abc import Callable
from typing import Any

from dsanalyze.instrument import api, filereads, subset
from dsanalyze.instrument import rank as rankenv
from dsanalyze.instrument.loader import patch_attr

DALI_MODULE = "nvidia.dali.plugin.base_iterator"
EXIT_GRACE_S = 30.0


def _instrument_class(cls: type, session: api.Session, kind: str,
                      built_by: str | None = None) -> list[Callable[[], None]]:
    """Register instances at creation; route every `iter()` through the session.

    A loader that reads as it is built names the method that fetches its batches
    (`built_by`): DALI's iterator runs its pipeline's first batch in its constructor (a
    file reader with `random_shuffle` first fills a 1024-sample buffer). It waits for a
    disk run's read throttle before it is built, not at its first iteration, and the time
    that method spends before the loader is first iterated is its build (`build_s`),
    charged to its first batch's wait (`loader.IterationRecorder`)."""
    init, iterate = cls.__init__, cls.__iter__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if built_by is not None:
            session.before_reading()
        init(self, *args, **kwargs)
        session.info(self, kind)

    def __iter__(self: Any) -> Any:
        return session.iterate(self, lambda: iterate(self))

    # The originals' names, docs and signatures (`__wrapped__`): Lightning re-creates a
    # DataLoader from the arguments it reads through inspect.signature(cls.__init__).
    functools.update_wrapper(__init__, init)
    functools.update_wrapper(__iter__, iterate)
    restore = [patch_attr(cls, "__init__", __init__), patch_attr(cls, "__iter__", __iter__)]
    fetch = getattr(cls, built_by, None) if built_by is not None else None
    if fetch is None:  # not such a loader, or a version without that method: timed from iter()
        return restore

    def fetch_timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        info = session.info(self, kind)
        if info.epochs:  # iterated: timed by the recorder
            return fetch(self, *args, **kwargs)
        start = time.perf_counter()
        try:
            return fetch(self, *args, **kwargs)
        finally:
            info.build_s += time.perf_counter() - start

    functools.update_wrapper(fetch_timed, fetch)
    return [*restore, patch_attr(cls, built_by, fetch_timed)]


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls `callback(module)` right after `name` is first imported."""

    def __init__(self, name: str, callback: Callable[[types.ModuleType], None]) -> None:
        self.name, self.callback = name, callback

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        exec_module = spec.loader.exec_module

        def exec_then_patch(module: types.ModuleType) -> None:
            exec_module(module)
            self.callback(module)
        spec.loader.exec_module = exec_then_patch  # type: ignore[method-assign]
        return spec


# Loader classes of other libraries, patched when (and only if) the script imports them.
# (class, kind, the method that fetches its batches if it reads as it is built)
EXTRA_LOADERS = {
    DALI_MODULE: ("_DaliBaseIterator", "DALI iterator", "_get_outputs"),
    "torchdata.nodes.loader": ("Loader", "torchdata.nodes Loader", None),
    # timm's PrefetchLoader moves and normalises batches on the device: the batch that
    # comes out of it is the one synthetic mode replays.
    "timm.data.loader": ("PrefetchLoader", "timm PrefetchLoader", None),
}


def install(session: api.Session) -> Callable[[], None]:
    """Install the patches; returns the function that removes them all."""
    from torch.utils.data import DataLoader

    restore = _instrument_class(DataLoader, session, "DataLoader")
    patches: dict[str, Callable[[types.ModuleType], None]] = {
        name: lambda module, attr=attr, kind=kind, built=built: restore.extend(
            _instrument_class(getattr(module, attr), session, kind, built))
        for name, (attr, kind, built) in EXTRA_LOADERS.items()}
    # where webdataset opens its shards: count and time their reads (filereads.py)
    patches[filereads.WEBDATASET_GOPEN] = lambda module: restore.append(
        filereads.patch_gopen(module, session.files_sink))
    patches[filereads.WEBDATASET_CACHE] = lambda module: restore.append(
        filereads.patch_streaming_open(module, session.files_sink))
    if session.narrowing is not None:  # data larger than memory: the warmed subset alone
        patches[subset.FOLDER_MODULE] = lambda module: restore.append(
            session.narrowing.patch_folder(module))
    hooks = []
    for name, patch in patches.items():
        if name in sys.modules:
            patch(sys.modules[name])
        else:
            hooks.append(_AfterImport(name, patch))
            sys.meta_path.insert(0, hooks[-1])

    def uninstall() -> None:
        for hook in hooks:
            if hook in sys.meta_path:
                sys.meta_path.remove(hook)
        while restore:
            restore.pop()()
        session.close()
    return uninstall


def run_script(path: str, args: list[str]) -> bool:
    """Run the script as `__main__`; True if it was stopped after the measured window.

    `path` "-m": `args[0]` is a module, run as `python -m MODULE ARGS` runs it
    (the built-in job is run so, `launch.job_argv`)."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    try:
        if path == "-m":
            sys.argv = list(args)  # run_module puts the module's file in argv[0]
            runpy.run_module(args[0], run_name="__main__", alter_sys=True)
        else:
            script = os.path.abspath(path)
            sys.argv = [path, *args]
            sys.path.insert(0, os.path.dirname(script))
            runpy.run_path(script, run_name="__main__")
    except api.StopProfiling:
        return True
    except SystemExit as e:
        if e.code not in (0, None):
            raise
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return False


def script_file(argv: list[str]) -> str:
    """The file that runs: the script, or the module's source for `-m MODULE`."""
    if argv[0] == "-m":
        spec = importlib.util.find_spec(argv[1])
        return str(spec.origin) if spec is not None else argv[1]
    return os.path.abspath(argv[0])


def shutdown_distributed() -> None:
    """Barrier, then destroy the script's process group, if it left one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def _exit_anyway() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main(argv: list[str] | None = None) -> bool:
    """Profile the script `argv[0]` (or `-m MODULE`) with the arguments that follow;
    True if it was stopped."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv == ["-m"]:
        raise api.InstrumentError(
            "usage: python -m dsanalyze.instrument.bootstrap SCRIPT|-m MODULE [ARGS]")
    session = api.start_session()
    uninstall = install(session)
    try:
        stopped = run_script(argv[0], argv[1:])
        # The script's loaders die with its frames now, not at interpreter exit: a
        # torchdata ParallelMapper still running its threads then aborts the process
        # ("terminate called without an active exception").
        gc.collect()
        record, extra = session.record()
        extra["script"] = script_file(argv)
        rankenv.write_record(record, extra)
    finally:
        uninstall()
        api.end_session()
    shutdown_distributed()
    return stopped


def _finish() -> None:
    """Exit 0 once the record is written: the script's exit handlers run (logging flushed,
    DataLoader worker processes ended), then the process ends without finalizing the
    interpreter. A thread the script left running must not keep the rank (and torchrun)
    alive, and finalizing while a loader's threads still decode (torchdata's
    ParallelMapper, stopped mid-epoch) aborts the process with "terminate called
    without an active exception". A hanging exit handler gets `EXIT_GRACE_S`."""
    timer = threading.Timer(EXIT_GRACE_S, _exit_anyway)
    timer.daemon = True
    timer.start()
    atexit._run_exitfuncs()
    _exit_anyway()


if __name__ == "__main__":
    rankenv.run_reporting_errors(main, api.last_batches)
    _finish()
