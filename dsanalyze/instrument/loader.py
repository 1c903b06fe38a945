"""Timed iteration over a data loader, and synthetic replay of one batch.

`TimedLoader` wraps any iterable of batches (a `torch.utils.data.DataLoader`,
a DALI iterator, a replay loader) and records, per iteration:

- `wait_s`: time spent inside the wrapped iterator's `__next__`, i.e. blocked
  on the next batch. The first `next()` of an epoch also pays for creating the
  iterator (`iter(loader)`: DataLoader worker start-up), which is real stall.
- `iter_s`: from the start of one `next()` to the start of the following one,
  so `iter_s = wait_s + compute`.
- A loader that reads as it is built (`build_s`: a DALI iterator's constructor
  runs its first batches) is charged that time in its first batch's wait and
  iteration, as a DataLoader's first `next()` pays for its workers' start.

CUDA is asynchronous: a training step returns before the GPU has finished.
Without a synchronisation at the iteration boundary, the unfinished GPU work
of step i would be paid inside step i+1's `next()` (when `.cuda()` copies
wait for the stream) and be counted as data wait. `sync` (for CUDA,
`torch.cuda.synchronize`) is therefore called at every boundary, before the
clock is read.

`DeviceCache` completes the replay for a script (the built-in job's too):
its own `.to(device)` call decides where the replayed batch lives.

This module imports no torch: the device synchronisation and the tensor type
are passed in, so it is usable (and testable) with any loader.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any


def batch_size_of(batch: Any) -> int:
    """Number of samples in a batch: tensors, (images, labels), dicts, DALI lists."""
    if hasattr(batch, "shape") and len(batch.shape) > 0:
        return int(batch.shape[0])
    if isinstance(batch, dict):
        return batch_size_of(next(iter(batch.values())))
    if isinstance(batch, (list, tuple)) and batch:
        first = batch[0]
        if hasattr(first, "shape") or isinstance(first, (list, tuple, dict)):
            return batch_size_of(first)  # (images, labels) or DALI's [{"data": ...}]
        return len(batch)  # a plain list of samples
    if hasattr(batch, "__len__"):
        return len(batch)
    return 1


class IterationRecorder:
    """Collects per-iteration timings of one rank.

    `max_iters`: stop after `warmup + max_iters` iterations (None: never).
    `stopper`: called with the recorder after each closed iteration; once it
    returns True the window is complete (`--until-ci`, `untilci.RankStop`).
    `clock` is injectable so tests can control time. `heartbeat` (`progress.Heartbeat`) is
    told the iterations completed at every boundary: the harness's progress watchdog.
    """

    def __init__(self, rank: int = 0, warmup: int = 0, max_iters: int | None = None,
                 sync: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 stopper: Callable[[IterationRecorder], bool] | None = None,
                 heartbeat: Callable[[int], None] | None = None) -> None:
        self.heartbeat = heartbeat
        self.rank = rank
        self.warmup = warmup
        self.max_iters = max_iters
        self.sync = sync
        self.clock = clock
        self.stopper = stopper
        self.stopped = False  # the stopper ended the window
        self.wait_s: list[float] = []
        self.iter_s: list[float] = []
        self.epoch: list[int] = []
        self.samples: list[int] = []
        self.epochs_started = 0
        self.epoch_lengths: list[int] = []  # batches of each epoch the loader itself ended
        self.start_unix_s = 0.0
        # What the loader spent reading as it was built, before its first next() (a DALI
        # iterator runs its first batches in its constructor): the first batch's wait.
        self.build_s = 0.0
        self._open: tuple[float, float, int, int] | None = None  # start, wait, samples, epoch

    @property
    def done(self) -> bool:
        return self.stopped or (self.max_iters is not None
                                and len(self.iter_s) >= self.warmup + self.max_iters)

    def boundary(self) -> float:
        """Mark an iteration boundary now; close the open iteration, if any."""
        if self.sync is not None:
            self.sync()  # finish the previous step's device work before reading the clock
        now = self.clock()
        if self._open is not None:
            start, wait, samples, epoch = self._open
            self.iter_s.append(now - start)
            self.wait_s.append(wait)
            self.samples.append(samples)
            self.epoch.append(epoch)
            self._open = None
            if self.stopper is not None and not self.stopped:
                self.stopped = self.stopper(self)
        elif not self.iter_s:
            self.start_unix_s = time.time()
        if self.heartbeat is not None:
            self.heartbeat(len(self.iter_s))
        return now

    def open(self, start: float, wait_s: float, samples: int) -> None:
        if not self.iter_s and self.build_s:  # the first batch: the loader's build before it
            start, wait_s, self.build_s = start - self.build_s, wait_s + self.build_s, 0.0
        self._open = (start, wait_s, samples, self.epochs_started - 1)

    def discard_open(self) -> None:
        self._open = None

    def finish(self) -> None:
        """Close the last iteration when the loop ended without another `next()`."""
        if self._open is not None:
            self.boundary()

    def to_dict(self) -> dict[str, Any]:
        """The `RankRecord` JSON of this rank."""
        return {"rank": self.rank, "warmup": min(self.warmup, len(self.iter_s)),
                "start_unix_s": self.start_unix_s, "wait_s": self.wait_s,
                "iter_s": self.iter_s, "epoch": self.epoch, "samples": self.samples}


class TimedLoader:
    """Iterable wrapper: each `iter()` is one epoch, each `next()` is timed."""

    def __init__(self, loader: Iterable[Any], recorder: IterationRecorder) -> None:
        self.loader = loader
        self.recorder = recorder

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        # Delegate everything else (sampler, dataset, batch_size) to the loader.
        if name in ("loader", "recorder"):
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __iter__(self) -> Iterator[Any]:
        self.recorder.epochs_started += 1
        return _TimedIterator(self.loader, self.recorder)


class _TimedIterator:
    def __init__(self, loader: Iterable[Any], recorder: IterationRecorder) -> None:
        self._loader = loader
        self._it: Iterator[Any] | None = None
        self._rec = recorder
        self._batches = 0

    def __iter__(self) -> _TimedIterator:
        return self

    def __next__(self) -> Any:
        rec = self._rec
        start = rec.boundary()
        if rec.done:
            raise StopIteration
        try:
            if self._it is None:
                self._it = iter(self._loader)  # worker start-up counts as wait
            batch = next(self._it)
        except StopIteration:
            rec.discard_open()
            rec.epoch_lengths.append(self._batches)  # the loader ended its epoch: its length
            raise
        self._batches += 1
        rec.open(start, rec.clock() - start, batch_size_of(batch))
        return batch


class ReplayLoader:
    """Synthetic mode: one real batch, replayed.

    The batch is taken from the real loader once (its workers are then shut
    down) and yielded `length` times per epoch, so the training step sees real
    shapes and values with no fetch and no prep. Where it lives is the
    script's choice: `DeviceCache` keeps the copy its `.to(device)` makes.
    """

    def __init__(self, loader: Iterable[Any], length: int) -> None:
        it = iter(loader)
        try:
            first = next(it)
        except StopIteration:
            raise ValueError("the loader yielded no batch to replay") from None
        del it  # shuts DataLoader workers down
        self.batch = first
        self.length = length
        self.source = loader

    def __len__(self) -> int:
        return self.length

    def __getattr__(self, name: str) -> Any:
        if name in ("source", "batch", "length"):
            raise AttributeError(name)
        return getattr(self.source, name)

    def __iter__(self) -> Iterator[Any]:
        for _ in range(self.length):
            yield self.batch


_MISSING = object()


def patch_attr(cls: type, name: str, value: Any) -> Callable[[], None]:
    """Set `cls.name = value`; returns the function that puts the original back."""
    old = cls.__dict__.get(name, _MISSING)
    setattr(cls, name, value)

    def restore() -> None:
        if old is _MISSING:
            delattr(cls, name)  # it was inherited: inherit it again
        else:
            setattr(cls, name, old)
    return restore


def tensors_of(batch: Any, tensor_type: type) -> list[Any]:
    """The tensors in a batch: a tensor, nested lists/tuples, dicts."""
    if isinstance(batch, tensor_type):
        return [batch]
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        return [t for b in batch for t in tensors_of(b, tensor_type)]
    return []


class DeviceCache:
    """Synthetic replay of a script: the batch lands where the script moves it.

    While installed, `.to()` and `.cuda()` of a tensor of the replayed batch
    return a copy made on the first such call and kept, keyed by the method
    and its arguments (`x.to(dev)` and `x.to(dev, non_blocking=True)` copy once
    each; unhashable arguments such as `x.to(other_tensor)` fall through to the
    real method). So the script's own transfer costs a dictionary look-up, and
    every replayed iteration finds the batch already on its device. `device`:
    that of the first copy. Other tensors are untouched (one extra Python call).
    `tensor_type` is `torch.Tensor` (passed in: this module imports no torch).
    """

    def __init__(self, batch: Any, tensor_type: type) -> None:
        self.tensor_type = tensor_type
        self.tensors = {id(t): t for t in tensors_of(batch, tensor_type)}
        self.copies: dict[Any, Any] = {}
        self.device: Any = None
        self._restore: list[Callable[[], None]] = []

    def install(self) -> None:
        for name in ("to", "cuda"):
            self._restore.append(patch_attr(self.tensor_type, name, self._method(name)))

    def uninstall(self) -> None:
        while self._restore:
            self._restore.pop()()

    def _method(self, name: str) -> Callable[..., Any]:
        original = getattr(self.tensor_type, name)
        tensors, copies = self.tensors, self.copies

        def method(t: Any, *args: Any, **kwargs: Any) -> Any:
            if id(t) not in tensors:
                return original(t, *args, **kwargs)
            key = (name, id(t), args, tuple(sorted(kwargs.items())))
            try:
                out = copies.get(key)
            except TypeError:
                return original(t, *args, **kwargs)
            if out is None:
                out = copies[key] = original(t, *args, **kwargs)
                if self.device is None:
                    self.device = getattr(out, "device", None)
            return out
        method.__name__, method.__doc__ = name, original.__doc__
        return method
