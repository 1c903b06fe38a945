"""Page-cache hit rates for the job's access pattern, simulated over real file sizes.

The job reads every sample once per epoch in a fresh random permutation
(`RandomSampler`, or `DistributedSampler` sharded across ranks, whose shards
the ranks read in lock step), so a file is read again about one epoch later;
or in the same order every epoch (`same_order`: a DataLoader that does not
shuffle, DALI's file reader without `shuffle_after_epoch`), a cyclic scan that a cache smaller than the dataset
never hits under `lru` or `pagecache`.
Three caches of C bytes are simulated:

- `lru`: least-recently-used eviction, the textbook model of the page cache.
  When C < D (the dataset's bytes) it thrashes: the files of the previous
  epoch's tail are evicted before the new permutation asks for them again,
  so the steady hit rate is well below C / D.
- `pagecache`: Linux's two lists (inactive and active, with refault
  activation). It thrashes too, less than LRU: files read twice are promoted
  to the active list and survive the next epoch's stream of new files. It is
  the one that reproduces the disk runs measured on this machine.
- `noevict`: the first files read stay and nothing is ever evicted (MinIO, as
  in CoorDL): the steady hit rate is the admitted bytes / D, about C / D,
  which is also DS-Analyzer's assumption.

Epoch 1 starts from an empty cache (a disk run evicts the dataset first), so
each of its reads misses; the steady state is the mean over the epochs after
it. Hit rates are byte-weighted (bytes served from the cache / bytes read),
which is what the storage sees. File sizes are rounded up to whole pages, as
the page cache holds them. `simulate` replays given read orders
(`epoch_order`) and reports each epoch; `miss_bytes` gives the bytes each read
takes from storage, what the what-if model's pipeline simulation consumes
(`whatif/rates.py` simulates large datasets on a uniform sample of their
files with the cache scaled by the sampled share of the bytes).
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from dsanalyze.errors import ConfigError

PAGE_BYTES = 4096


class Policy(str, enum.Enum):
    """Cache replacement policies."""

    LRU = "lru"  # textbook least-recently-used
    NOEVICT = "noevict"  # MinIO-style: admit until full, never evict
    PAGECACHE = "pagecache"  # Linux's two lists (inactive, active) with refault activation

    @classmethod
    def parse(cls, text: str | Policy) -> Policy:
        if isinstance(text, Policy):
            return text
        try:
            return cls(str(text).strip().lower())
        except ValueError:
            raise ConfigError(f"unknown cache policy {text!r}: use lru, pagecache or noevict"
                              ) from None


@dataclass(frozen=True)
class EpochStats:
    """What one simulated epoch read: bytes from the cache and from storage."""

    accessed_bytes: int
    hit_bytes: int
    accesses: int
    hits: int
    resident_bytes: int  # dataset bytes in the cache at the end of the epoch
    profile: tuple[float, ...] = ()  # byte hit rate in equal slices of the epoch

    @property
    def read_bytes(self) -> int:
        """Bytes that had to come from storage (the misses)."""
        return self.accessed_bytes - self.hit_bytes

    @property
    def hit_rate(self) -> float:
        return self.hit_bytes / self.accessed_bytes if self.accessed_bytes else 0.0


def page_rounded(sizes: Sequence[int], page_bytes: int = PAGE_BYTES) -> np.ndarray:
    """Each size rounded up to whole pages (what the file occupies in the page cache)."""
    arr = np.asarray(sizes, dtype=np.int64)
    if page_bytes <= 1:
        return arr
    return (arr + page_bytes - 1) // page_bytes * page_bytes


def epoch_order(n_files: int, rng: np.random.Generator, ranks: int = 1,
                batch_size: int = 1, kept: int | None = None,
                same_order: bool = False) -> np.ndarray:
    """The node's read order in one epoch, as the job's samplers produce it.

    One rank: a permutation, cut to whole batches (DataLoader `drop_last`).
    n ranks: `DistributedSampler(drop_last=True)` keeps n * floor(N / n) of
    the permutation and gives rank r every n-th index from r; each rank keeps
    whole batches; the ranks advance in lock step, so the node reads the
    shards interleaved. `kept`: only ranks 0..kept-1 (node 0 of a job whose
    `ranks` span several nodes: its page cache sees only its own ranks' reads).
    `same_order`: the files in list order, the same every epoch (a DataLoader
    that does not shuffle, DALI's file reader without `shuffle_after_epoch`), cut
    and sharded alike: a cyclic scan.
    """
    if ranks < 1 or batch_size < 1:
        raise ConfigError("ranks and batch size must be at least 1")
    perm = np.arange(n_files) if same_order else rng.permutation(n_files)
    per_rank = n_files // ranks
    used = per_rank // batch_size * batch_size
    if ranks == 1:
        return perm[:used]
    shards = perm[:per_rank * ranks].reshape(per_rank, ranks)  # column r: rank r's samples
    return shards[:used, :kept].reshape(-1)


class _Lru:
    """Least recently used, by bytes."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self.files: OrderedDict[int, int] = OrderedDict()

    def access(self, idx: int, size: int) -> bool:
        if idx in self.files:
            self.files.move_to_end(idx)
            return True
        if size <= self.capacity:
            self.files[idx] = size
            self.used += size
            while self.used > self.capacity:
                self.used -= self.files.popitem(last=False)[1]
        return False


class _NoEvict:
    """Admit files until full, never evict."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self.files: set[int] = set()

    def access(self, idx: int, size: int) -> bool:
        if idx in self.files:
            return True
        if self.used + size <= self.capacity:
            self.files.add(idx)
            self.used += size
        return False


class _TwoList:
    """Linux's page cache: an inactive and an active list, with refault activation.

    A file read for the first time goes to the inactive list, marked referenced
    (the read marks it accessed); read again while inactive, it is promoted to
    the active list. Reclaim takes the oldest inactive file, after moving the
    oldest active files to the inactive list while the inactive list is smaller
    than the active one (`inactive_ratio` 1 below 1 GiB). An evicted file leaves
    a shadow entry; read again within a refault distance no larger than the
    active list, it goes straight to the active list (mm/workingset.c).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.inactive: OrderedDict[int, int] = OrderedDict()
        self.active: OrderedDict[int, int] = OrderedDict()
        self.inactive_bytes = self.active_bytes = 0
        self.referenced: set[int] = set()
        self.shadow: dict[int, int] = {}
        self.age = 0  # bytes evicted or activated so far (the nonresident age)

    @property
    def used(self) -> int:
        return self.inactive_bytes + self.active_bytes

    def _activate(self, idx: int, size: int) -> None:
        self.active[idx] = size
        self.active_bytes += size
        self.age += size

    def access(self, idx: int, size: int) -> bool:
        if idx in self.active:
            self.referenced.add(idx)
            return True
        if idx in self.inactive:
            if idx in self.referenced:
                del self.inactive[idx]
                self.inactive_bytes -= size
                self.referenced.discard(idx)
                self._activate(idx, size)
            else:
                self.referenced.add(idx)
            return True
        if size > self.capacity:
            return False
        evicted_at = self.shadow.pop(idx, None)
        if evicted_at is not None and self.age - evicted_at <= self.active_bytes:
            self._activate(idx, size)
        else:
            self.inactive[idx] = size
            self.inactive_bytes += size
            self.referenced.add(idx)
        self._reclaim()
        return False

    def _reclaim(self) -> None:
        while self.used > self.capacity:
            if self.inactive_bytes < self.active_bytes:
                j, size = self.active.popitem(last=False)
                self.active_bytes -= size
                self.inactive[j] = size
                self.inactive_bytes += size
                continue
            j, size = self.inactive.popitem(last=False)
            self.inactive_bytes -= size
            self.referenced.discard(j)
            self.shadow[j] = self.age
            self.age += size


_CACHES = {Policy.LRU: _Lru, Policy.NOEVICT: _NoEvict, Policy.PAGECACHE: _TwoList}


def simulate(sizes: Sequence[int] | np.ndarray, cache_bytes: int, policy: Policy | str,
             orders: Iterable[Sequence[int]], bins: int = 1) -> list[EpochStats]:
    """Replay the given read orders (one per epoch) through one cache, starting empty.

    `sizes` are the bytes each file occupies in the cache. A file larger than
    the whole cache is read but never kept. `bins` > 1 also records the byte
    hit rate in that many equal slices of each epoch (`EpochStats.profile`).
    """
    cache = _CACHES[Policy.parse(policy)](int(cache_bytes))
    size_of = [int(s) for s in sizes]
    out = []
    for order in orders:
        order = [int(i) for i in order]
        n = len(order)
        acc = [0] * bins
        hit = [0] * bins
        hits = 0
        for pos, idx in enumerate(order):
            size = size_of[idx]
            b = pos * bins // n
            acc[b] += size
            if cache.access(idx, size):
                hits += 1
                hit[b] += size
        profile = tuple(h / a if a else 0.0 for h, a in zip(hit, acc))
        out.append(EpochStats(sum(acc), sum(hit), n, hits, cache.used, profile))
    return out


def miss_bytes(sizes: Sequence[int] | np.ndarray, cache_bytes: int | None,
               policy: Policy | str, orders: Iterable[Sequence[int]]) -> list[np.ndarray]:
    """Per epoch, the bytes each read of `orders` takes from storage (0: a hit).

    The cache starts empty; `cache_bytes` None is a cache larger than the data.
    """
    cap = int(np.sum(sizes)) + 1 if cache_bytes is None else int(cache_bytes)
    cache = _CACHES[Policy.parse(policy)](cap)
    size_of = [int(s) for s in sizes]
    out = []
    for order in orders:
        out.append(np.array([0.0 if cache.access(int(i), size_of[int(i)]) else size_of[int(i)]
                             for i in order], dtype=float))
    return out


def buffered_miss_bytes(sizes: Sequence[int] | np.ndarray, cache_bytes: int | None,
                        epochs: int, window: int, rng: np.random.Generator
                        ) -> list[np.ndarray]:
    """Per epoch, the bytes each step's read takes from storage, for a reader that reads its
    files in one order every epoch into a buffer of `window` samples, hands out a random
    one of the buffer at each step and reads the next file in its place, and holds each
    file it read until it hands it out (DALI's file reader with `random_shuffle`, whose
    list is shuffled once, mapping its files: a mapped file stays open, and its pages in
    use, until it is taken). The buffer is filled before the first step (those reads all
    miss, and are not a step's). A read hits where the file is held, or was handed out
    recently enough that the budget still holds it: the cache keeps what the buffer holds
    and, within what is left of `cache_bytes`, the files handed out last (an LRU by
    hand-out, as the harness's limiter evicts files once closed, the least recently closed
    first). So a budget under the dataset keeps some of a cyclic read: a file handed out
    late is still there when its next read comes (train_dali.py, 2400 files, at 85% of
    them: 556 samples/s against 374 at cache 0 and 1511 at 100%)."""
    size_of = [int(s) for s in sizes]
    n = len(size_of)
    cap = sum(size_of) + 1 if cache_bytes is None else int(cache_bytes)
    reader = _HeldBuffer(size_of, [int(i) for i in rng.permutation(n)])
    for _ in range(min(window, n)):
        reader.read()
    out = []
    for _ in range(epochs):
        missed = np.zeros(n)
        for step in range(n):
            reader.hand_out(int(rng.integers(len(reader.buffer))))
            missed[step] = reader.read()
            reader.keep_within(cap)
        out.append(missed)
    return out


class _HeldBuffer:
    """`buffered_miss_bytes`'s reader: the files it holds (read, not yet handed out) and
    those it handed out that the cache still keeps, least recent first."""

    def __init__(self, size_of: list[int], order: list[int]) -> None:
        self.size_of, self.order = size_of, order
        self.buffer: list[int] = []
        self.held: dict[int, int] = {}  # file: copies in the buffer
        self.handed: OrderedDict[int, None] = OrderedDict()
        self.held_bytes = self.handed_bytes = self.reads = 0

    def read(self) -> float:
        """The next file in order into the buffer: the bytes it takes from storage."""
        f = self.order[self.reads % len(self.order)]
        self.reads += 1
        hit = f in self.held or f in self.handed
        if f in self.handed:
            del self.handed[f]
            self.handed_bytes -= self.size_of[f]
        if f not in self.held:
            self.held_bytes += self.size_of[f]
        self.held[f] = self.held.get(f, 0) + 1
        self.buffer.append(f)
        return 0.0 if hit else float(self.size_of[f])

    def hand_out(self, j: int) -> None:
        """The buffer's j-th file handed out: no longer held once its last copy goes."""
        buffer = self.buffer
        buffer[j], buffer[-1] = buffer[-1], buffer[j]
        f = buffer.pop()
        self.held[f] -= 1
        if not self.held[f]:
            del self.held[f]
            self.held_bytes -= self.size_of[f]
            self.handed[f] = None
            self.handed_bytes += self.size_of[f]

    def keep_within(self, cap: int) -> None:
        """Drop the files handed out longest ago until what is kept fits in `cap`."""
        while self.handed and self.held_bytes + self.handed_bytes > cap:
            old, _ = self.handed.popitem(last=False)
            self.handed_bytes -= self.size_of[old]


def naive_hit(cache_bytes: int | None, dataset_bytes: int) -> float:
    """DS-Analyzer's assumption: the hit rate is the cached fraction, min(1, C / D)."""
    if cache_bytes is None or dataset_bytes <= 0:
        return 1.0
    return min(1.0, max(0, cache_bytes) / dataset_bytes)


def sizes_from_quantiles(quantiles: Sequence[float], n_files: int) -> np.ndarray:
    """`n_files` sizes spread over a recorded size distribution (equally spaced quantiles)."""
    q = np.asarray(quantiles, dtype=float)
    if q.size < 2 or n_files < 1:
        raise ConfigError("a size distribution needs at least two quantiles and one file")
    positions = (np.arange(n_files) + 0.5) / n_files
    return np.rint(np.interp(positions, np.linspace(0, 1, q.size), q)).astype(np.int64)
