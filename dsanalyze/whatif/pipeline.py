"""Discrete-event model of the training loop and its DataLoader, for the what-if model.

`min(G, P, F)` assumes the stages overlap perfectly. They do not: a worker
reads a sample and then decodes it (its own fetch and prep never overlap), the
main process takes batches in order (a slow batch holds the faster ones back),
the prefetch queue drains at every epoch end and the first batch of the next
epoch is paid in full, and the main process needs the CPU the workers are
using. This module simulates exactly that structure, with the measured rates
as its inputs:

- each of `ranks` ranks has `workers` DataLoader workers; at most
  `prefetch_factor * workers` batches are outstanding per rank, handed out
  round-robin from worker 0 at each epoch start (PyTorch's in-order loader);
  with 0 workers the main process loads each batch when it asks for it;
- a worker handles its batches one after the other, and each sample of a batch
  as: wait `read_latency_s` if it misses (the device's latency and the read's wait: no
  CPU, and no prep before its first bytes), read its missing bytes from storage while
  `read_overlap` of its `prep_cpu_s` runs (readahead streams the file to the decoder), then the
  rest of the prep plus `miss_cpu_s_per_byte` per byte read; the job's other
  reads of the same files (a validation pass over the training files) add
  `reread_share` of each sample's bytes to what it reads from storage;
- the main process of a rank waits for its next batch in order, and takes it
  `receive_s` after it is ready (handing a batch over between processes is
  not free; this is where a new index is sent to a worker; the wait ends with
  the batch in hand), then spends `main_cpu_s` of CPU (the loop's own work, competing for
  the cores with the workers), then the step takes `step_s` with the CPU free
  (an accelerator, or the `sim` device); ranks leave each step together (the
  gradient all-reduce);
- a step on the CPU (`gang_step_s`, measured with `gang_threads` threads at this
  CPU count) follows `main_cpu_s` on the cores: its threads meet at barriers, so the
  step moves at the pace of its slowest thread, which shares its core with its share
  of the other busy processes: alone it takes `gang_step_s`, beside k busy workers on
  C cores its threads run 1 / (1 + ceil(k / C)) of the time and it takes that much
  longer, and the workers have the cores it leaves;
- the work between epochs (`epoch_end_s`: the script's validation, a checkpoint) follows
  each epoch's last step, in the main process, before the next epoch's batches are handed
  out: the workers have nothing to prepare meanwhile (`whatif/epochend.py`); where the
  job's other reads of its files are that work (`epoch_read_bytes`: a validation pass
  over the training files), its misses (`epoch_read_misses`) cost the pass's workers (the
  training loader's count) their wait and their CPU per byte, as the samples' reads do
  (`pass_reads_s`), it takes at least their bytes over the storage's bandwidth, and the
  samples' own reads carry no `reread_share`;
- workers that are not persistent start again at every epoch; from the second epoch on,
  each spends `restart_cpu_s` of CPU before its first batch (the re-forked worker copying the
  pages of the main process's grown heap it touches), on the cores like any other work,
  and the main process `restart_main_cpu_s` in its first iteration (its own writes to the
  heap the workers share copy the pages: once an epoch, whatever their number);
- `cpus` cores are shared equally by every process that wants CPU (at most one
  core each); the storage bandwidth `read_bps` is shared equally by every
  worker that is reading (None: reads cost no time: the device was not measured).
- a throttle (blk-throttle: cgroup v1 blkio, v2 io.max) budgets its bytes per slice of
  time, not per read: bytes the readers left unused while none was reading are theirs
  later, up to `read_credit_bytes` (its rate times one slice: 20 ms on a non-rotational
  device, 100 ms on a rotational one, the kernel's DFL_THROTL_SLICE_*). A worker that
  reads, then works on the CPU for less than a slice, then reads again, gets the
  throttle's whole rate; reads served from that budget take no time (the device under
  the throttle is far faster than it). 0: a device, not a throttle.

Times are seconds, sizes bytes. The simulation is deterministic: the bytes
each sample misses are an input. A batch of more than `SETTINGS.max_chunks` samples is
simulated in that many chunks of consecutive samples (a chunk reads, then
decodes, as one), which keeps large batches cheap to simulate.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import math
import statistics
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from dsanalyze.analysis.window import per_epoch, places
from dsanalyze.errors import ConfigError
from dsanalyze.settings import SETTINGS

PREFETCH_FACTOR = 2  # PyTorch's DataLoader default


@dataclass(frozen=True)
class Pipeline:
    """One configuration of the job's loop: resources, sizes, per-unit costs."""

    ranks: int
    workers: int  # DataLoader workers per rank (0: the main process loads)
    batch_size: int  # per rank
    cpus: float
    step_s: float  # compute per iteration; 0 in loader mode
    main_cpu_s: float  # CPU per iteration of each rank's main process
    prep_cpu_s: float  # CPU per sample in a worker: decode, augment, collate share
    read_bps: float | None  # storage bandwidth shared by the readers; None: free
    miss_cpu_s_per_byte: float = 0.0  # CPU a worker spends per byte read from storage
    read_latency_s: float = 0.0  # per missed sample, before its bytes flow
    read_overlap: float = 1.0  # share of a sample's prep that runs while its bytes arrive
    read_credit_bytes: float = 0.0  # a throttle's unused budget the reads may bank
    prefetch_factor: int = PREFETCH_FACTOR
    size_share: float = 0.0  # share of the prep that scales with the sample's bytes (decode)
    receive_s: float = 0.0  # delay, not CPU, for the main process to take a ready batch
    # storage bytes read beyond a sample's misses, per byte of the sample (hit or miss): the
    # job's other reads of its files where they miss (`laws.reread_share`); < 0: a loader
    # that reads less than its files' bytes
    reread_share: float = 0.0
    gang_step_s: float = 0.0  # a step on the CPU: its time alone at `cpus`, in its threads
    gang_threads: float = 1.0  # the step's threads per rank (the cores it was measured on)
    restart_cpu_s: float = 0.0  # CPU of each worker at each epoch start after the first
    # the main process's CPU at each such start, in its first iteration (writing its heap,
    # shared with the new workers, copies the pages: once, whatever their number)
    restart_main_cpu_s: float = 0.0
    epoch_end_s: float = 0.0  # the work between epochs, after each epoch's last step
    # > 0: the job's other reads of its files are that work (a validation pass over the
    # training files): `reread_share` of these bytes (a node's samples' bytes an epoch) read
    # at each epoch's end, not with each sample
    epoch_read_bytes: float = 0.0
    # of which, the files a node's pass misses (each waits `read_latency_s`, and its bytes cost
    # `miss_cpu_s_per_byte`, in the pass's workers: `_epoch_end_s`); 0: the pass's reads
    # cost only their storage time
    epoch_read_misses: float = 0.0

    @property
    def epoch_rereads(self) -> bool:
        """The job's other reads of its files are read at each epoch's end (`epoch_read_bytes`),
        not with each sample."""
        return self.epoch_read_bytes > 0 and self.reread_share > 0

    def __post_init__(self) -> None:
        if self.ranks < 1 or self.batch_size < 1 or self.workers < 0 or self.cpus <= 0:
            raise ConfigError("pipeline needs ranks, batch size and cpus above 0")
        if self.read_bps is not None and self.read_bps <= 0:
            raise ConfigError("storage bandwidth must be positive, or None")
        if self.read_credit_bytes < 0:
            raise ConfigError("a throttle's banked budget cannot be negative")


@dataclass(frozen=True)
class Timeline:
    """Rank 0's iterations (all ranks move in lock step): wait, whole time, epoch."""

    wait_s: tuple[float, ...]
    iter_s: tuple[float, ...]
    epoch: tuple[int, ...]
    samples_per_iter: int  # all ranks together

    def rate_sps(self, first: int = 0, epochs: Sequence[int] | None = None) -> float:
        """Samples per second over iterations `first`.. (and only `epochs` if given), each
        place in the epoch once, as a measured run's (`window.per_epoch`)."""
        idx = [i for i in range(first, len(self.iter_s))
               if epochs is None or self.epoch[i] in epochs]
        total = per_epoch(self.iter_s, self.epoch, idx)
        return len(set(places(self.epoch, idx))) * self.samples_per_iter / total \
            if total > 0 else math.inf

    def epoch_s(self, epoch: int) -> float:
        return sum(t for t, e in zip(self.iter_s, self.epoch) if e == epoch)


class Chunk(NamedTuple):
    """Chunk `t` of batch `batch` of `epoch`, loaded by worker `worker` of rank `rank`."""

    rank: int
    worker: int
    epoch: int
    batch: int
    t: int


class ReadStarts(NamedTuple):
    """A chunk's request latency passed: its bytes start to flow."""

    chunk: Chunk


class PartDone(NamedTuple):
    """A chunk's read, or the prep that overlaps it, finished."""

    chunk: Chunk


class ChunkDone(NamedTuple):
    """A chunk is read and prepared."""

    chunk: Chunk


class Taken(NamedTuple):
    """A rank's main process has its batch in hand (the receive delay passed)."""

    rank: int


class Received(NamedTuple):
    """A rank's main process took its batch (its CPU work done)."""

    rank: int


class StepDone(NamedTuple):
    """A rank's compute step ended."""

    rank: int


class GangStarts(NamedTuple):
    """A rank's step on the CPU starts: its threads take the cores."""

    rank: int


class Restarted(NamedTuple):
    """A worker (rank, worker) started again at an epoch start: it takes its batches."""

    worker: tuple[int, int]


class EpochEnded(NamedTuple):
    """A rank's work between epochs ended: its next epoch starts."""

    rank: int


Event = (ReadStarts | PartDone | ChunkDone | Taken | Received | StepDone | GangStarts
         | Restarted | EpochEnded)


class _PS:
    """A processor-sharing resource: every active job progresses at rate(k) / k each."""

    def __init__(self, capacity: float, per_job_cap: float) -> None:
        self.capacity = capacity
        self.per_job_cap = per_job_cap
        self.virtual = 0.0  # work done by each job that was active all the time
        self.heap: list[tuple[float, int, Event]] = []

    def add(self, work: float, seq: int, what: Event) -> None:
        heapq.heappush(self.heap, (self.virtual + work, seq, what))


def simulate(p: Pipeline, miss_bytes: Sequence[np.ndarray], batches_per_epoch: int,
             sample_bytes: Sequence[np.ndarray] | None = None) -> Timeline:
    """Run `len(miss_bytes)` epochs of `batches_per_epoch` iterations.

    `miss_bytes[e][i]` is the storage bytes sample i of epoch e needs (0: a
    cache hit); sample i of rank r's batch j is `(j * batch_size + t) * ranks + r`,
    the order `cachesim.epoch_order` gives.

    The simulation is deterministic: a timeline already simulated for the same inputs is
    given again (a fit and its validation ask for the same configuration many times:
    about a third of the calls of an advice).
    """
    key = (p, batches_per_epoch, _digest(miss_bytes),
           None if sample_bytes is None else _digest(sample_bytes))
    timeline = _SIMULATED.get(key)
    if timeline is None:
        timeline = _Sim(p, miss_bytes, batches_per_epoch, sample_bytes).run()
        if len(_SIMULATED) >= SIMULATED_KEPT:
            del _SIMULATED[next(iter(_SIMULATED))]  # the oldest
        _SIMULATED[key] = timeline
    return timeline


SIMULATED_KEPT = 4096  # timelines remembered by `simulate` (each a few KB)
_SIMULATED: dict[tuple[Any, ...], Timeline] = {}


def _digest(arrays: Sequence[np.ndarray]) -> tuple[bytes, ...]:
    """Arrays as a key: a 128-bit hash of each one's values as floats."""
    return tuple(hashlib.blake2b(np.ascontiguousarray(a, dtype=float).tobytes(),
                                 digest_size=16).digest() for a in arrays)


class _Sim:
    def __init__(self, p: Pipeline, miss_bytes: Sequence[np.ndarray], batches: int,
                 sample_bytes: Sequence[np.ndarray] | None = None) -> None:
        if batches < 1 or not miss_bytes:
            raise ConfigError("simulate at least one epoch of one batch")
        need = batches * p.batch_size * p.ranks
        if any(len(m) < need for m in miss_bytes):
            raise ConfigError(f"every epoch needs {need} sample sizes")
        self.p, self.batches = p, batches
        self.chunk = -(-p.batch_size // SETTINGS.max_chunks)  # samples simulated as one step
        self.reread = 0.0 if p.epoch_rereads else p.reread_share  # of each sample's bytes
        self._sum_chunks(miss_bytes, sample_bytes)
        self.epochs = len(miss_bytes)
        self.now, self.seq = 0.0, 0
        self.cpu = _PS(p.cpus, 1.0)
        self.io, self.credit = _PS(p.read_bps or 1.0, math.inf), p.read_credit_bytes  # banked
        self.timers: list[tuple[float, int, Event]] = []
        nw = max(1, p.workers)
        self.queues = [[deque() for _ in range(nw)] for _ in range(p.ranks)]
        self.busy = [[False] * nw for _ in range(p.ranks)]
        self.ready: list[set[tuple[int, int]]] = [set() for _ in range(p.ranks)]
        self.pos = [[0, 0] for _ in range(p.ranks)]  # epoch, next batch of each main
        self.waiting = [False] * p.ranks
        self.iter_start = [0.0] * p.ranks
        self.arrived = 0
        self.wait_s: list[float] = []
        self.iter_s: list[float] = []
        self.epoch_of: list[int] = []
        self.done = False
        self.pending: dict[Chunk, int] = {}
        self.after: dict[Chunk, float] = {}
        # a chunk waiting on its latency: (its bytes, the prep that runs while they arrive)
        self.latent: dict[Chunk, tuple[float, float]] = {}
        # an event's handler by its type, called with its one field (a dict lookup, hot loop)
        self.handlers: dict[type, Callable[[Any], None]] = {
            ReadStarts: self._read_starts, PartDone: self._part_done,
            ChunkDone: self._chunk_done, Taken: self._taken, Received: self._received,
            StepDone: self._step_done, GangStarts: self._gang_starts, Restarted: self._restarted,
            EpochEnded: self._epoch_ended}
        self.gang: dict[int, float] = {}  # rank: core-seconds left of its step on the CPU

    def _sum_chunks(self, miss_bytes: Sequence[np.ndarray],
                    sample_bytes: Sequence[np.ndarray] | None) -> None:
        """Per epoch, [batch][chunk][rank]: each chunk's missed bytes, bytes (what a re-read
        reads, hit or miss; its misses where not given), prep weight (each sample's prep
        relative to the mean: the size-scaled share) and misses, summed once here: the hot
        loop reads them one chunk at a time. Bytes and misses only where a re-read or a
        latency needs them."""
        p, batches = self.p, self.batches
        miss = [np.asarray(m, dtype=float) for m in miss_bytes]
        self.miss_sum = [self._chunk_sums(m, batches) for m in miss]
        self.read_sum = self.miss_sum if sample_bytes is None or not self.reread else \
            [self._chunk_sums(b, batches) for b in sample_bytes]
        self.weight_sum = None
        if sample_bytes is not None and p.size_share > 0:
            mean = float(np.mean(np.concatenate([np.asarray(b, float) for b in sample_bytes])))
            self.weight_sum = [self._chunk_sums(
                1 - p.size_share + p.size_share * np.asarray(b, float) / mean, batches)
                for b in sample_bytes]
        self.misses = [self._chunk_sums(m != 0, batches) for m in miss] \
            if p.read_latency_s > 0 and p.read_bps is not None else None

    def _chunk_sums(self, values: np.ndarray, batches: int) -> list[list[list[float]]]:
        """`values` (one epoch's, sample i of rank r's batch j at `(j * batch_size + t) *
        ranks + r`) summed over each chunk of each batch: [batch][chunk][rank]."""
        p, chunk = self.p, self.chunk
        chunks = -(-p.batch_size // chunk)
        per = np.asarray(values, dtype=float)[:batches * p.batch_size * p.ranks].reshape(
            batches, p.batch_size, p.ranks)
        padded = np.zeros((batches, chunks * chunk, p.ranks))
        padded[:, :p.batch_size] = per
        return padded.reshape(batches, chunks, chunk, p.ranks).sum(axis=2).tolist()

    # -- scheduling helpers ------------------------------------------------------------------
    def _seq(self) -> int:
        self.seq += 1
        return self.seq

    def _timer(self, delay: float, what: Event) -> None:
        heapq.heappush(self.timers, (self.now + delay, self._seq(), what))

    def _cpu(self, work: float, what: Event) -> None:
        if work <= 0:
            self._timer(0.0, what)
        else:
            self.cpu.add(work, self._seq(), what)

    # -- the loader --------------------------------------------------------------------------
    @property
    def depth(self) -> int:
        """Batches outstanding per rank; 0 workers: the main process loads on demand."""
        return self.p.prefetch_factor * self.p.workers

    def _dispatch(self, rank: int, epoch: int, batch: int) -> None:
        if batch >= self.batches:
            return
        w = batch % max(1, self.p.workers)  # the cycle restarts at worker 0 each epoch
        self.queues[rank][w].append((epoch, batch))
        if not self.busy[rank][w]:
            self._next_task(rank, w)

    def _next_task(self, rank: int, w: int) -> None:
        if not self.queues[rank][w]:
            self.busy[rank][w] = False
            return
        self.busy[rank][w] = True
        epoch, batch = self.queues[rank][w][0]
        self._sample(rank, w, epoch, batch, 0)

    def _sample(self, rank: int, w: int, epoch: int, batch: int, t: int) -> None:
        """Start chunk t of a batch: samples t * chunk .. (t + 1) * chunk - 1."""
        p = self.p
        n = min(self.chunk, p.batch_size - t * self.chunk)
        nbytes = max(0.0, self.miss_sum[epoch][batch][t][rank]
                     + self.reread * self.read_sum[epoch][batch][t][rank])
        prep = p.prep_cpu_s * (n if self.weight_sum is None
                               else self.weight_sum[epoch][batch][t][rank])
        key = Chunk(rank, w, epoch, batch, t)
        if nbytes > 0 and p.read_bps is not None:
            # readahead streams the file while the decoder works on what arrived:
            # `read_overlap` of the prep runs alongside the read, the rest after it
            self.pending[key] = 2
            if self.misses is not None:  # a latency per missed sample, before any byte
                self.latent[key] = nbytes, prep * p.read_overlap
                self._timer(p.read_latency_s * round(self.misses[epoch][batch][t][rank]),
                            ReadStarts(key))
            else:
                self.io.add(nbytes, self._seq(), PartDone(key))
                self._cpu(prep * p.read_overlap, PartDone(key))
            self.after[key] = prep * (1 - p.read_overlap) + \
                nbytes * p.miss_cpu_s_per_byte
        else:
            self._cpu(prep + nbytes * p.miss_cpu_s_per_byte, ChunkDone(key))

    def _read_starts(self, key: Chunk) -> None:
        nbytes, prep = self.latent.pop(key)
        self.io.add(nbytes, self._seq(), PartDone(key))
        self._cpu(prep, PartDone(key))  # the decoder starts on the first bytes

    def _part_done(self, key: Chunk) -> None:
        self.pending[key] -= 1
        if self.pending[key] == 0:
            del self.pending[key]
            self._cpu(self.after.pop(key), ChunkDone(key))

    def _chunk_done(self, key: Chunk) -> None:
        rank, w, epoch, batch, t = key
        if (t + 1) * self.chunk < self.p.batch_size:
            self._sample(rank, w, epoch, batch, t + 1)
            return
        self.queues[rank][w].popleft()
        self.ready[rank].add((epoch, batch))
        if self.waiting[rank] and tuple(self.pos[rank]) == (epoch, batch):
            self._receive(rank)
        self._next_task(rank, w)

    # -- the training loop -------------------------------------------------------------------
    def _next(self, rank: int) -> None:
        self.iter_start[rank] = self.now
        if self.depth == 0:
            self._dispatch(rank, *self.pos[rank])
        if tuple(self.pos[rank]) in self.ready[rank]:
            self._receive(rank)
        else:
            self.waiting[rank] = True

    def _receive(self, rank: int) -> None:
        self.waiting[rank] = False
        self.ready[rank].discard(tuple(self.pos[rank]))
        self._timer(self.p.receive_s, Taken(rank))

    def _taken(self, rank: int) -> None:
        epoch, batch = self.pos[rank]
        if self.depth:
            self._dispatch(rank, epoch, batch + self.depth)
        if rank == 0:  # the wait ends with the batch in hand; the loop's own work follows
            self.wait_s.append(self.now - self.iter_start[0])
            self.epoch_of.append(epoch)
        restart = self.p.restart_main_cpu_s if epoch and batch == 0 else 0.0
        self._cpu(self.p.main_cpu_s + restart, GangStarts(rank) if self.p.gang_step_s > 0
                  else Received(rank))

    def _received(self, rank: int) -> None:
        self.arrived += 1
        if self.arrived == self.p.ranks:  # the all-reduce: every rank leaves together
            self.arrived = 0
            for r in range(self.p.ranks):
                self._timer(self.p.step_s, StepDone(r))

    def _spend_credit(self) -> None:
        """The reads in flight take what the throttle left unused, at once, equally (as they
        share its rate): the first to end as far as the budget goes."""
        if self.credit <= 0 or not self.io.heap:
            return
        k = len(self.io.heap)
        step = min(self.credit / k, max(0.0, self.io.heap[0][0] - self.io.virtual))
        self.io.virtual += step
        self.credit -= step * k

    def _gang_starts(self, rank: int) -> None:
        self.gang[rank] = self.p.gang_step_s * self.p.gang_threads

    def _step_done(self, rank: int) -> None:
        if self.pos[rank][1] + 1 == self.batches and self.p.epoch_end_s > 0:
            self._timer(self._epoch_end_s, EpochEnded(rank))  # the work between epochs
            return
        self._epoch_ended(rank)

    @functools.cached_property
    def _epoch_end_s(self) -> float:
        """The work between epochs (the same at every epoch's end); where it is the job's
        other reads of its files, the pass pays the reads its misses make (`pass_reads_s`),
        and takes at least as long as the storage takes to give them (its CPU runs while they
        arrive)."""
        p = self.p
        if not p.epoch_rereads:
            return p.epoch_end_s
        ranks = p.ranks
        cpu_s = p.miss_cpu_s_per_byte * p.reread_share * p.epoch_read_bytes / ranks
        wait_s = p.read_latency_s * p.epoch_read_misses / ranks if p.read_bps is not None \
            else 0.0
        end_s = p.epoch_end_s + pass_reads_s(p.epoch_end_s, cpu_s, wait_s, p.workers,
                                              p.cpus / ranks)
        if p.read_bps is None:
            return end_s
        return max(end_s, p.reread_share * p.epoch_read_bytes / p.read_bps)

    def _epoch_ended(self, rank: int) -> None:
        """The rank's iteration ends (at an epoch's end, after the work between epochs)."""
        if rank == 0:
            self.iter_s.append(self.now - self.iter_start[0])
        pos = self.pos[rank]
        pos[1] += 1
        if pos[1] == self.batches:
            pos[0] += 1
            pos[1] = 0
            if pos[0] == self.epochs:
                self.done = self.done or rank == self.p.ranks - 1
                return
            self._start_epoch(rank, pos[0])
        self._next(rank)

    def _start_epoch(self, rank: int, epoch: int) -> None:
        if epoch and self.p.restart_cpu_s > 0:  # the workers start again: busy until restarted
            for w in range(self.p.workers):
                self.busy[rank][w] = True
                self._cpu(self.p.restart_cpu_s, Restarted((rank, w)))
        for b in range(min(self.batches, self.depth)):
            self._dispatch(rank, epoch, b)

    def _restarted(self, worker: tuple[int, int]) -> None:
        self._next_task(*worker)

    def _ahead(self) -> tuple[float, float, float, float, float, float, float]:
        """The next event's distance and the speeds until then: (dt, dt_gang, dt_timer,
        dt_cpu, gang speed, CPU speed, storage speed). The steps on the CPU move at their
        threads' pace, the slowest thread's, which shares its core with ceil(others / cpus)
        busy processes; the processes share equally the cores the steps leave, at most one
        each, and the reads the storage (a `_PS` each: the time until its first job ends is
        its lead over the virtual time over that speed; none moves while the steps hold
        every core). Written out, not in helpers: it runs once per event."""
        cpu, io, gang, inf = self.cpu, self.io, self.gang, math.inf
        if self.credit > 0 and io.heap:
            self._spend_credit()
        others = len(cpu.heap)
        threads = self.p.gang_threads
        gang_speed = threads / (1 + math.ceil(others / self.p.cpus)) if others else threads
        dt_gang = min(gang.values()) / gang_speed if gang else inf
        dt_cpu = dt_io = inf
        cpu_speed = io_speed = 0.0
        if others:  # the cores the steps leave
            speed = min(cpu.per_job_cap, (cpu.capacity - gang_speed * len(gang)) / others)
            if speed > 0:
                dt_cpu, cpu_speed = max(0.0, cpu.heap[0][0] - cpu.virtual) / speed, speed
        if io.heap:
            speed = min(io.per_job_cap, io.capacity / len(io.heap))
            if speed > 0:
                dt_io, io_speed = max(0.0, io.heap[0][0] - io.virtual) / speed, speed
        dt_timer = self.timers[0][0] - self.now if self.timers else inf
        dt = min(dt_cpu, dt_io, dt_timer, dt_gang)
        return dt, dt_gang, dt_timer, dt_cpu, gang_speed, cpu_speed, io_speed

    def run(self) -> Timeline:
        """The event loop: each turn, every clock moves to the next event (`_ahead`), which
        is then handled (a step on the CPU ending, a timer, a process, a read)."""
        for r in range(self.p.ranks):
            self._start_epoch(r, 0)
            self._next(r)
        cpu, io, gang, timers, handlers = self.cpu, self.io, self.gang, self.timers, self.handlers
        heappop = heapq.heappop
        while not self.done:
            dt, dt_gang, dt_timer, dt_cpu, gang_speed, cpu_speed, io_speed = self._ahead()
            if dt == math.inf:
                raise ConfigError("the pipeline simulation stalled: no event left")
            self.now += max(0.0, dt)
            if not io.heap:  # no read in flight: the throttle's budget goes unused
                self.credit = min(self.p.read_credit_bytes, self.credit + io.capacity * dt)
            cpu.virtual += cpu_speed * dt
            io.virtual += io_speed * dt
            for r in gang:
                gang[r] -= gang_speed * dt
            if dt == dt_gang:
                rank = min(gang, key=gang.__getitem__)
                del gang[rank]
                self._received(rank)
                continue
            if dt == dt_timer:
                what = heappop(timers)[2]
            else:
                ps = cpu if dt == dt_cpu else io
                fv, _, what = heappop(ps.heap)
                ps.virtual = fv
            handlers[type(what)](what[0])
        return Timeline(tuple(self.wait_s), tuple(self.iter_s), tuple(self.epoch_of),
                        self.p.batch_size * self.p.ranks)


@dataclass(frozen=True)
class Layout:
    """Iterations of a run: `epochs` of `batches`, `iters` in all, the first `warmup` discarded."""

    epochs: int
    batches: int
    iters: int
    warmup: int


def expand(tl: Timeline, sim_batches: int, layout: Layout) -> Timeline:
    """A timeline of `sim_batches` per epoch stretched to the layout's batches.

    The added iterations repeat the mean of the middle half of each simulated
    epoch: past the refill at its start, before the drain at its end.
    """
    if sim_batches >= layout.batches:
        return tl
    wait, it, ep = [], [], []
    for e in range(layout.epochs):
        idx = [i for i, x in enumerate(tl.epoch) if x == e]
        tail = idx[len(idx) // 4: 3 * len(idx) // 4] or idx  # neither the refill nor the drain
        mean_w = statistics.fmean(tl.wait_s[i] for i in tail)
        mean_t = statistics.fmean(tl.iter_s[i] for i in tail)
        extra = layout.batches - len(idx)
        wait += [tl.wait_s[i] for i in idx] + [mean_w] * extra
        it += [tl.iter_s[i] for i in idx] + [mean_t] * extra
        ep += [e] * layout.batches
    return Timeline(tuple(wait), tuple(it), tuple(ep), tl.samples_per_iter)


def window_rates(tl: Timeline, layout: Layout, cold_first: bool) -> tuple[float, float | None]:
    """(steady rate, first-epoch rate) over the windows of `stalls.run_rate`.

    `cold_first` (a disk run of two or more epochs): the steady window is the
    epochs after the first, which is rated on its own; otherwise every
    iteration after the warm-up.
    """
    steady = list(range(1, layout.epochs)) if cold_first and layout.epochs >= 2 else None
    rate = tl.rate_sps(layout.warmup, steady)
    if steady is None:
        return rate, None
    return rate, tl.rate_sps(0, [0])


def solve(f: Callable[[float], float], target: float, lo: float, hi: float,
          steps: int = 16) -> float:
    """x in [lo, hi] with f(x) = target, for f decreasing in x (bisection on log x)."""
    a, b = math.log(lo), math.log(hi)
    if f(lo) <= target:
        return lo
    if f(hi) >= target:
        return hi
    for _ in range(steps):
        mid = (a + b) / 2
        if f(math.exp(mid)) > target:
            a = mid
        else:
            b = mid
    return math.exp((a + b) / 2)


def minimize(f: Callable[[float], float], lo: float, hi: float, steps: int = 16) -> float:
    """x in [lo, hi] minimising a unimodal f (golden-section search on log x)."""
    a, b = math.log(lo), math.log(hi)
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(math.exp(c)), f(math.exp(d))
    for _ in range(steps):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(math.exp(d))
    return math.exp((a + b) / 2)


def pass_reads_s(pass_s: float, cpu_s: float, wait_s: float, workers: int, cores: float
                 ) -> float:
    """What a loader-bound pass of `pass_s` (a validation pass over the training files, as
    measured with its files cached) takes longer when its misses cost `cpu_s` of CPU and
    `wait_s` of waiting in all: its `workers` (the main process where 0) each pay a
    sample's wait and then its work, on `cores` cores. The pass's own work is
    `pass_s` x k CPU-seconds (k = min(workers, cores): it was that loader-bound); with the
    reads it takes the longer of its CPU over k cores and every worker's wait and work
    in turn, over the workers. Workers with a core each pay `(cpu_s + wait_s) / workers`;
    workers past the cores hide the waits behind each other's work (a rank's share of a
    core is the cores' share: while one process waits, another has the core)."""
    lanes = max(workers, 1)
    k = min(lanes, cores)
    work_s = pass_s * k + cpu_s
    return max(work_s / k, (work_s + wait_s) / lanes) - pass_s
