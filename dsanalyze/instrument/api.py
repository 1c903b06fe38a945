"""`dsanalyze.instrument(loader)`: time a training loop's data loader.

    import dsanalyze
    train_loader = dsanalyze.instrument(train_loader)   # before the first epoch
    for epoch in range(epochs):
        for images, target in train_loader: ...

Under the harness (`python harness.py ... train.py ARGS`) this is optional:
the bootstrap (`dsanalyze.instrument.bootstrap`) installs the same
instrumentation on every `torch.utils.data.DataLoader` and DALI iterator and
picks the training loader by itself. Calling `instrument` names the training
loader explicitly (it wins over the automatic choice and `--loader-index`),
and works for any iterable of batches. The built-in job
(`dsanalyze.jobs.image_classification`) is such a script: it calls
`instrument` and runs under the bootstrap.

What the training loader does, in each harness mode (`DSANALYZE_MODE`):

- every mode: each `next()` is timed (`wait_s`, `iter_s`: see `loader.py`);
  after `DSANALYZE_WARMUP` + `DSANALYZE_ITERS` iterations, or at the start of
  epoch `DSANALYZE_EPOCHS` + 1, or once rank 0 finds the rate within
  ±`DSANALYZE_UNTIL_CI`% (`untilci.py`), its `next()` raises `StopProfiling`, which the
  bootstrap catches to end the script (every rank stops at the same
  iteration, since DDP ranks iterate equally many batches). With
  `DSANALYZE_EPOCHS`, the warm-up is at most the first epoch less one
  iteration, so that the first epoch keeps a measured iteration.
- `synthetic`: one real batch, replayed `len(loader)` times per epoch. The
  batch is taken on the device the script moves it to: `Tensor.to()` and
  `Tensor.cuda()` of a replayed tensor return a copy made on the first such
  call (one copy per distinct set of arguments) and kept, so the script's
  own `.to(device)` / `.cuda()` costs a dictionary look-up and no transfer.
  In-place changes the script makes to that copy persist into later
  iterations (shapes, hence compute, do not change).
- `cached`, `disk`: the real loader; the steps of its dataset's torchvision
  pipeline are timed in every worker (`transforms.py`).
- `loader`: the loader alone, no compute: the loop is driven here, then the
  script is stopped.

Also in the rank record's `extra`: `loader`, the training loader's kind and
settings (`loader_settings`); `files`, per data file read through
webdataset, opens, bytes and time blocked reading (`filereads.py`); and, in
the harness's discovery run (`DSANALYZE_DISCOVER=1`), `data`: the files the
training loader declares and those it opened (`datafiles.py`).

Outside the harness (no `DSANALYZE_*` variables) it times every iteration and
never stops the loop; `loader.recorder.to_dict()` holds the timings.

Iteration boundaries synchronise CUDA when the script has initialised it
(`torch.cuda.synchronize()` on the current device): without that, an
unfinished step would be charged to the next `next()` as data wait.
"""

from __future__ import annotations

import os
import sys
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from dsanalyze import progress
from dsanalyze.errors import DsAnalyzeError
from dsanalyze.instrument import dalipipes, datafiles, filereads, subset
from dsanalyze.instrument import rank as rankenv
from dsanalyze.instrument import transforms as steps
from dsanalyze.instrument.loader import DeviceCache, IterationRecorder, ReplayLoader, TimedLoader
from dsanalyze.instrument.untilci import RankStop

MODES = ("synthetic", "cached", "disk", "loader")


class InstrumentError(DsAnalyzeError):
    """The script's loaders cannot be instrumented as asked."""


class StopProfiling(BaseException):  # noqa: N818 - a control-flow signal, like SystemExit
    """The measured window is complete: raised out of the training loader's `next()`.

    A BaseException, so that a script's `except Exception` does not swallow it.
    """


@dataclass(frozen=True)
class Settings:
    """What the harness asked of this rank (from the environment)."""

    mode: str = "cached"
    iters: int | None = None
    warmup: int = 0
    epochs: int | None = None
    loader_index: int | None = None
    rank: int = 0
    discover: bool = False  # report the files the training loader reads (datafiles.py)
    until_ci_pct: float | None = None  # stop once the rate is within ± this (untilci.py)
    min_iters: int = 30  # ... after at least this many iterations in its window
    epoch_batches: int | None = None  # synthetic, no len(): an epoch's length, counted earlier

    @classmethod
    def from_env(cls) -> Settings:
        env = os.environ

        def num(name: str) -> int | None:
            return int(env[name]) if env.get(name) else None

        mode = env.get(rankenv.ENV_MODE, "cached")
        if mode not in MODES:
            raise InstrumentError(f"{rankenv.ENV_MODE}={mode!r}: use one of {', '.join(MODES)}")
        until = env.get(rankenv.ENV_UNTIL_CI)
        return cls(mode, num(rankenv.ENV_ITERS), num(rankenv.ENV_WARMUP) or 0,
                   num(rankenv.ENV_EPOCHS), num(rankenv.ENV_LOADER_INDEX), rankenv.rank(),
                   env.get(rankenv.ENV_DISCOVER) == "1", float(until) if until else None,
                   num(rankenv.ENV_MIN_ITERS) or 30, num(rankenv.ENV_EPOCH_BATCHES))


@dataclass
class LoaderInfo:
    """A loader the script created, in creation order."""

    index: int
    kind: str
    shuffles: bool | None
    batches: int | None
    ref: Callable[[], Any]
    role: str = ""  # "" until first iterated, then "training" or "other"
    epochs: int = 0  # times iterated
    build_s: float = 0.0  # in its constructor, for a loader that reads as it is built (DALI)

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "kind": self.kind, "shuffles": self.shuffles,
                "batches": self.batches, "role": self.role or "never iterated",
                "epochs": self.epochs, "build_s": self.build_s}


def _ref(obj: Any) -> Callable[[], Any]:
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


def _length(loader: Any) -> int | None:
    try:
        return len(loader)
    except Exception:  # an iterable dataset, or a loader not fully built yet
        return None


def _samplers(loader: Any, depth: int = 4) -> list[Any]:
    """The loader's sampler and batch sampler, and those they wrap (accelerate's
    BatchSamplerShard holds the script's BatchSampler, which holds its RandomSampler)."""
    out = []
    for name in ("sampler", "batch_sampler"):
        inner = getattr(loader, name, None)
        if inner is not None and inner is not loader:
            out.append(inner)
            if depth > 0:
                out += _samplers(inner, depth - 1)
    return out


def sampler_epoch(loader: Any) -> int | None:
    """The epoch of the loader's shuffling sampler that permutes by it (a
    `DistributedSampler(shuffle=True)` draws its order from `seed + epoch`, and only the
    script's `set_epoch` moves it on); None for any other sampler."""
    for s in _samplers(loader):
        at = getattr(s, "epoch", None)
        if getattr(s, "shuffle", None) is True and callable(getattr(s, "set_epoch", None)) \
                and isinstance(at, int):
            return at
    return None


def _graph_samplers(loader: Any) -> list[Any]:
    """The samplers of a torchdata.nodes graph (`Loader.root`, then each node's `source`)."""
    node, out = getattr(loader, "root", None), []
    for _ in range(16):
        if node is None or isinstance(node, (str, os.PathLike)):
            break
        out.append(getattr(node, "sampler", None))
        node = getattr(node, "source", None)
    return out


def shuffles(loader: Any) -> bool | None:
    """Whether a loader draws its samples in random order (None: cannot tell)."""
    pipes = getattr(loader, "_pipes", None)
    if pipes is not None:  # a DALI iterator: its readers' random_shuffle
        if not all(hasattr(p, "_ops") for p in pipes):
            return None  # a pipeline not built from a definition: its operators unknown
        args = [getattr(op, "_init_args", {}) for _, op in dalipipes.operators(pipes, "readers")]
        return any(a.get("random_shuffle") or a.get("shuffle_after_epoch") for a in args)
    samplers = [*_samplers(loader), *_graph_samplers(loader)]
    random = (torch.utils.data.RandomSampler, torch.utils.data.SubsetRandomSampler,
              torch.utils.data.WeightedRandomSampler)
    return any(isinstance(s, random) or getattr(s, "shuffle", False) is True for s in samplers)


# A loader first iterated inside one of these is an evaluation loader, never the training
# one: the script's own validate(), Hugging Face's evaluation_loop, Lightning's sanity check
# and evaluation loop (which run before the training loader exists).
EVAL_FUNCTIONS = frozenset({"validate", "validation", "evaluate", "evaluation_loop",
                            "prediction_loop", "predict", "test", "_run_sanity_check"})
EVAL_FILES = ("evaluation_loop.py", "prediction_loop.py")


def loader_settings(loader: Any) -> dict[str, Any]:
    """The training loader's kind and settings, for the rank's record (`extra["loader"]`):
    its own `settings.to_dict()` if it has one (the built-in job's DALI loader), a
    DataLoader's workers, batch size, prefetch, pinning and persistent workers, else its
    class name (`analysis/jobrun.py` reads them back as the job as it ran)."""
    settings = getattr(loader, "settings", None)
    if callable(getattr(settings, "to_dict", None)):
        return settings.to_dict()
    if getattr(loader, "_pipes", None):
        return dali_settings(loader)
    if isinstance(loader, torch.utils.data.DataLoader):
        return {"kind": "pytorch", "workers": loader.num_workers,
                "batch_size": loader.batch_size, "prefetch_factor": loader.prefetch_factor,
                "pin_memory": loader.pin_memory,
                "persistent_workers": loader.persistent_workers,
                "same_order": reads_in_the_same_order(loader)}
    return {"kind": type(loader).__name__}


def reads_in_the_same_order(loader: torch.utils.data.DataLoader) -> bool:
    """A DataLoader over a map-style dataset whose sampler draws the same order every epoch
    (a `SequentialSampler`: `shuffle=False`; a sampler whose `shuffle` is False, as
    `DistributedSampler(shuffle=False)`). An iterable dataset orders itself: not known."""
    if isinstance(loader.dataset, torch.utils.data.IterableDataset):
        return False
    batches = loader.batch_sampler
    sampler = getattr(batches, "sampler", None) if batches is not None else loader.sampler
    return isinstance(sampler, torch.utils.data.SequentialSampler) or \
        getattr(sampler, "shuffle", None) is False


DALI_INITIAL_FILL = 1024  # samples a shuffling DALI reader reads first (its default)


def dali_settings(loader: Any) -> dict[str, Any]:
    """A user's DALI iterator as its first pipeline was built: `num_threads` (the workers of
    the model), `max_batch_size`, `prefetch_queue_depth` (an int, or its CPU stage's size
    when split), the GPU, the decoder's device, and the reader's shard and shuffling (the
    order it reads its files in, and the buffer a shuffling one fills first); the keys of
    the built-in job's `DaliSettings`, so both are read back alike (`analysis/jobrun.py`)."""
    pipe = loader._pipes[0]
    depth = pipe.prefetch_queue_depth
    if isinstance(depth, dict):  # separated queues: {"cpu_size": n, "gpu_size": m}
        depth = depth.get("cpu_size", 2)
    decoders = [op.device for _, op in dalipipes.operators([pipe], "decoders")]
    reader = next((op._init_args for _, op in dalipipes.operators([pipe], "readers")), {})
    return {"kind": "dali", "pipelines": len(loader._pipes), "num_threads": pipe.num_threads,
            "batch_size": pipe.max_batch_size, "prefetch_queue_depth": int(depth),
            "device_id": pipe.device_id, "decoder_device": decoders[0] if decoders else None,
            "shard_id": int(reader.get("shard_id", 0)),
            "num_shards": int(reader.get("num_shards", 1)),
            "random_shuffle": bool(reader.get("random_shuffle", False)),
            "shuffle_after_epoch": bool(reader.get("shuffle_after_epoch", False)),
            "dont_use_mmap": bool(reader.get("dont_use_mmap", False)),
            "initial_fill": int(reader.get("initial_fill", DALI_INITIAL_FILL))}


def in_evaluation() -> bool:
    """Whether the caller runs inside an evaluation function (see EVAL_FUNCTIONS)."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name in EVAL_FUNCTIONS or code.co_filename.endswith(EVAL_FILES):
            return True
        frame = frame.f_back
    return False


def cuda_sync() -> None:
    """The sync at every iteration boundary: close the iteration only once the device
    has finished its step (a no-op until the script initialises CUDA)."""
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()


class _Source:
    """The training loader's own iteration, bypassing the instrumentation."""

    def __init__(self, make_iter: Callable[[], Iterator[Any]]) -> None:
        self.make_iter = make_iter

    def __iter__(self) -> Iterator[Any]:
        return self.make_iter()


class _TrainingIterator:
    """One epoch of the training loader; `StopProfiling` once the window is complete."""

    def __init__(self, it: Iterator[Any], recorder: IterationRecorder) -> None:
        self._it, self._rec = it, recorder

    def __iter__(self) -> _TrainingIterator:
        return self

    def __next__(self) -> Any:
        try:
            return next(self._it)
        except StopIteration:
            if self._rec.done:
                raise StopProfiling(f"{len(self._rec.iter_s)} iterations measured") from None
            raise


class _Draining:
    """Loader mode: the first `next()` drains the loader, then raises `StopProfiling`."""

    def __init__(self, drain: Callable[[], None]) -> None:
        self._drain = drain

    def __iter__(self) -> _Draining:
        return self

    def __next__(self) -> Any:
        self._drain()
        raise StopProfiling("loader mode: loader drained")


class Session:
    """The instrumentation of one rank: its loaders, the training loader, its timings."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.until: RankStop | None = None
        if settings.until_ci_pct is not None and settings.mode != "loader":
            self.until = RankStop(settings.until_ci_pct, settings.min_iters, settings.mode,
                                  settings.rank, rankenv.world_size(), rankenv.run_dir())
        self.recorder = IterationRecorder(settings.rank, settings.warmup, settings.iters,
                                          sync=cuda_sync, stopper=self.until,
                                          heartbeat=progress.Heartbeat.open(
                                              rankenv.run_dir(), settings.rank))
        self.loaders: list[LoaderInfo] = []  # in creation order
        self._by_id: dict[int, LoaderInfo] = {}
        self.training: LoaderInfo | None = None
        self.training_settings: dict[str, Any] = {}  # loader_settings() of the training loader
        self.last_sampler_epoch: int | None = None  # `sampler_epoch` at the last epoch start
        self.explicit: set[int] = set()  # ids of loaders wrapped by instrument()
        self.sink = steps.sink_dir(rankenv.run_dir(), settings.rank)
        self.files_sink = filereads.sink_dir(rankenv.run_dir(), settings.rank)
        self.audit: datafiles.OpenAudit | None = None  # discovery run: files opened
        self.replay: Any = None  # synthetic mode: the device cache of the replayed batch
        self.replay_length: int | None = None  # synthetic mode: batches replayed per epoch
        self.stop_reason = "the script ended"
        self._timed: TimedLoader | None = None
        listed = os.environ.get(rankenv.ENV_SUBSET)  # data larger than memory (subset.py)
        self.narrowing = subset.Narrowing(listed) if listed else None

    def info(self, loader: Any, kind: str | None = None) -> LoaderInfo:
        """The loader's record, registering it (next creation index) if new."""
        found = self._by_id.get(id(loader))
        if found is not None and found.ref() is loader:
            return found
        info = LoaderInfo(len(self.loaders), kind or type(loader).__name__, shuffles(loader),
                          _length(loader), _ref(loader))
        self.loaders.append(info)
        self._by_id[id(loader)] = info  # a dead loader's id may be reused: ref() tells
        return info

    def _decide(self, info: LoaderInfo) -> bool:
        """At a loader's first iteration: is it the training loader?"""
        if self.training is not None:
            return False
        if self.settings.loader_index is not None:
            return info.index == self.settings.loader_index
        if in_evaluation():
            return False
        if info.shuffles:
            return True
        # Not shuffled: the training loader unless a shuffled one exists, not yet iterated.
        return not any(i.shuffles and not i.role for i in self.loaders if i is not info)

    def choose(self, loader: Any, explicit: bool = False) -> LoaderInfo:
        info = self.info(loader)
        if self.training is info:
            return info
        if self.training is not None and (explicit is False or self.recorder.iter_s):
            raise InstrumentError(
                f"dsanalyze.instrument() got loader #{info.index} but loader "
                f"#{self.training.index} is already timed: instrument one training loader, "
                "before its first iteration")
        if self.training is not None:
            self.training.role, self._timed = "other", None
        self.training, info.role = info, "training"
        if not self.recorder.iter_s:
            self.recorder.build_s = info.build_s
        info.shuffles, info.batches = shuffles(loader), _length(loader)
        self.training_settings = loader_settings(loader)  # the loader may be gone at the end
        if self.until is not None:
            self.until.epoch_batches = info.batches  # a short epoch is seen to its end
        if self.settings.epochs is not None and info.batches:
            # Whole epochs measured: the warm-up leaves at least one iteration of the first.
            self.recorder.warmup = min(self.settings.warmup, info.batches - 1)
        dataset = getattr(loader, "dataset", None)
        if dataset is None:
            dataset = steps.graph_dataset(loader)
        if self.settings.mode != "synthetic" and dataset is not None:
            steps.instrument_dataset(dataset, self.sink)  # before iter() forks the workers
        self.before_reading()  # before its workers read the first sample
        run_dir = rankenv.run_dir()
        if self.settings.discover and self.audit is None and run_dir is not None:
            self.audit = datafiles.start_audit(str(run_dir / f"opened-rank{self.settings.rank}"))
        return info

    def before_reading(self) -> None:
        """A loader is about to read the data: in a disk run, wait for the read throttle."""
        if self.settings.mode == "disk":
            rankenv.wait_for_throttle()

    def iterate(self, loader: Any, original: Callable[[], Iterator[Any]]) -> Iterator[Any]:
        """`iter(loader)` for every loader the bootstrap instruments."""
        if id(loader) in self.explicit:
            return original()  # called by InstrumentedLoader, which times it
        info = self.info(loader)
        info.epochs += 1
        if not info.role:
            # Decide at the first iteration, when sampler and length are final.
            info.shuffles, info.batches = shuffles(loader), _length(loader)
            info.role = "other"
            if self._decide(info):
                self.choose(loader)
        if info is not self.training:
            return original()
        self.epoch_starts(loader)
        return self.epoch(original)

    def epoch_starts(self, loader: Any) -> None:
        """The training loader's epoch starts: where its sampler permutes by its epoch and that
        epoch is the one the epoch before started at, the script did not call `set_epoch`
        between them, and this epoch reads the same permutation: recorded as the loader's
        `same_order` (the order the what-if simulates) and `set_epoch_missing` (a note)."""
        at = sampler_epoch(loader)
        if at is not None and at == self.last_sampler_epoch:
            self.training_settings.update(same_order=True, set_epoch_missing=True)
        self.last_sampler_epoch = at

    def epoch(self, original: Callable[[], Iterator[Any]]) -> Iterator[Any]:
        """One epoch of the training loader: timed, replayed in synthetic mode, or drained."""
        epochs = self.settings.epochs
        if epochs is not None and self.recorder.epochs_started >= epochs:
            self.stop_reason = f"{epochs} epochs measured"
            raise StopProfiling(self.stop_reason)
        if self._timed is None:
            self._timed = TimedLoader(self._source(original), self.recorder)
        if self.settings.mode == "loader":
            # At the first next(), not inside iter(): a framework (Lightning's
            # CombinedLoader) finishes building its iterator before it is stopped.
            return _Draining(self._drain)
        return _TrainingIterator(iter(self._timed), self.recorder)

    def _source(self, original: Callable[[], Iterator[Any]]) -> Any:
        if self.settings.mode != "synthetic":
            return _Source(original)
        length = self.training.batches if self.training else None
        length = length or self.settings.epoch_batches  # counted by a run of the real loader
        if length is None and self.settings.iters is None:
            raise InstrumentError("synthetic mode: the training loader has no len() and no "
                                  "run of the real loader counted an epoch's batches yet: "
                                  "measure a cached run first, or pass --iters")
        replay = ReplayLoader(_Source(original), length or (1 << 62))
        self.replay_length = length
        self.replay = DeviceCache(replay.batch, torch.Tensor)
        self.replay.install()
        return replay

    def _drain(self) -> None:
        """Loader mode: iterate the loader here with no compute, then stop the script."""
        timed = self._timed
        loader = self.training.ref() if self.training else None
        for epoch in range(self.settings.epochs or (1 << 30)):
            set_epoch = getattr(getattr(loader, "sampler", None), "set_epoch", None)
            if epoch > 0 and callable(set_epoch):
                set_epoch(epoch)
            for _ in _TrainingIterator(iter(timed), self.recorder):
                pass
        self.stop_reason = "loader mode: loader drained"
        raise StopProfiling(self.stop_reason)

    def record(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The rank's `RankRecord` and its `extra`, once the script has stopped."""
        if self.training is None:
            raise InstrumentError(self._no_training_message())
        if self.recorder.stopped:
            self.stop_reason = (f"rate within ±{self.settings.until_ci_pct:g}% (--until-ci) "
                                f"after {len(self.recorder.iter_s)} iterations")
        elif self.recorder.done:
            self.stop_reason = f"{self.settings.iters} iterations measured"
        self.recorder.finish()
        table: list[dict[str, Any]] = []
        loader = self.training.ref()
        if self.settings.mode != "synthetic":
            table = steps.finish(loader, self.sink)
        extra: dict[str, Any] = {
            "batches_per_epoch": self.training.batches or self._seen_epoch(),
            "epoch_batches_seen": self._seen_epoch(), "world_size": rankenv.world_size(),
            "torch_threads": torch.get_num_threads(), "device": self._device(),
            "training_loader": self.training.index, "loader": self.training_settings,
            "stopped": self.stop_reason,
            "loaders": [i.to_dict() for i in self.loaders], "transforms": table}
        if self.narrowing is not None:
            extra["subset"] = self.narrowing.to_dict()
        if self.until is not None:
            extra["until_ci"] = {**self.until.record(), "stopped": self.recorder.stopped}
        files = filereads.table(self.files_sink)
        if files:
            extra["files"] = files
        if self.settings.discover:
            extra["data"] = {"declared": datafiles.declared(loader),
                             "opened": datafiles.opened(self.audit) if self.audit else []}
        return self.recorder.to_dict(), extra

    def _seen_epoch(self) -> int | None:
        """Batches of the first epoch the training loader ended on its own (a webdataset
        pipeline has no len(): this is how its epoch's length is learned); in synthetic
        mode, the length replayed."""
        if self.settings.mode == "synthetic":
            return self.replay_length
        return self.recorder.epoch_lengths[0] if self.recorder.epoch_lengths else None

    def _device(self) -> str:
        if self.replay is not None and self.replay.device is not None:
            return str(self.replay.device)
        if torch.cuda.is_initialized():
            return f"cuda:{torch.cuda.current_device()}"
        return "cpu"

    def _no_training_message(self) -> str:
        made = ", ".join(f"#{i.index} {i.kind}" for i in self.loaders) or "none"
        if self.settings.loader_index is not None:
            return (f"--loader-index {self.settings.loader_index}: that loader was never iterated "
                    f"(loaders created: {made}); pass the index of the training loader")
        return (f"the script iterated no DataLoader or DALI iterator (loaders created: {made}): "
                "wrap its training loader with dsanalyze.instrument(loader)")

    def close(self) -> None:
        if self.replay is not None:
            self.replay.uninstall()


_SESSION: Session | None = None


def start_session(settings: Settings | None = None) -> Session:
    """A fresh session for this process (the bootstrap calls it once per rank)."""
    global _SESSION
    if _SESSION is not None:
        _SESSION.close()
    _SESSION = Session(settings or Settings.from_env())
    return _SESSION


def current_session() -> Session:
    return _SESSION if _SESSION is not None else start_session()


_LAST_BATCHES: int | None = None  # batches the last session's training loader yielded


def end_session() -> None:
    global _SESSION, _LAST_BATCHES
    if _SESSION is not None:
        rec = _SESSION.recorder
        _LAST_BATCHES = len(rec.iter_s) + (rec._open is not None)
        _SESSION.close()
    _SESSION = None


def last_batches() -> int | None:
    """Batches the ended session's training loader yielded (None: no session ended); a rank's
    failure record says it, so that the harness tells a script that fails before its first
    batch (the same in every mode) from one that fails later."""
    return _LAST_BATCHES


class InstrumentedLoader:
    """What `instrument` returns: iterate it as the loader; other attributes delegate."""

    def __init__(self, loader: Any, session: Session) -> None:
        self.loader, self.session = loader, session

    @property
    def recorder(self) -> IterationRecorder:
        return self.session.recorder

    def __iter__(self) -> Iterator[Any]:
        self.session.info(self.loader).epochs += 1
        self.session.epoch_starts(self.loader)
        return self.session.epoch(lambda: iter(self.loader))

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        if name in ("loader", "session"):
            raise AttributeError(name)
        return getattr(self.loader, name)


def instrument(loader: Any) -> InstrumentedLoader:
    """Time `loader` as the training loader of this rank; use the result in its place.

    `loader`: a `torch.utils.data.DataLoader`, a DALI iterator, or any iterable
    of batches (with `len()` for synthetic mode without `--iters`). Call it
    once, before the first epoch. Returns an iterable wrapper; its `recorder`
    holds the per-iteration timings (`wait_s`, `iter_s`, `samples`).
    """
    session = current_session()
    session.choose(loader, explicit=True)
    session.explicit.add(id(loader))
    return InstrumentedLoader(loader, session)
