"""The cache simulator against cases small enough to work out by hand."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsanalyze.errors import ConfigError
from dsanalyze.whatif import cachesim

PAGE = 4096


@dataclass(frozen=True)
class Replay:
    name: str
    policy: str
    sizes: tuple[int, ...]
    cache_bytes: int
    orders: tuple[tuple[int, ...], ...]
    hit_rates: tuple[float, ...]  # byte hit rate of each epoch
    read_bytes: tuple[int, ...]


# Four one-page files, a cache of two pages.
# lru: epoch 3 reads 2 and 3, evicting 0 and 1, so epoch 4 misses both.
# pagecache: epoch 2's second reads promote 0 and 1 to the active list; in epoch 3
#   the new files 2 and 3 only pass through the inactive list (0 is deactivated and
#   evicted, 1 stays active); in epoch 4, 0 refaults within the active list's size
#   and is re-activated (a miss) and 1 is still cached (a hit): 1/2.
# noevict: 0 and 1 fill the cache for good; 2 and 3 are never admitted.
SCAN = ((0, 1), (0, 1), (2, 3), (0, 1))
REPLAYS = [
    Replay("lru thrashes on a scan", "lru", (PAGE,) * 4, 2 * PAGE, SCAN,
           (0.0, 1.0, 0.0, 0.0), (2 * PAGE, 0, 2 * PAGE, 2 * PAGE)),
    Replay("page cache protects its active list", "pagecache", (PAGE,) * 4, 2 * PAGE, SCAN,
           (0.0, 1.0, 0.0, 0.5), (2 * PAGE, 0, 2 * PAGE, PAGE)),
    Replay("no-evict keeps the first files", "noevict", (PAGE,) * 4, 2 * PAGE, SCAN,
           (0.0, 1.0, 0.0, 1.0), (2 * PAGE, 0, 2 * PAGE, 0)),
    # the same order every epoch, one file too many: LRU evicts each file just before its turn
    Replay("lru cyclic, C = D - 1 file", "lru", (PAGE,) * 3, 2 * PAGE, ((0, 1, 2),) * 3,
           (0.0, 0.0, 0.0), (3 * PAGE,) * 3),
    Replay("noevict cyclic, C = D - 1 file", "noevict", (PAGE,) * 3, 2 * PAGE, ((0, 1, 2),) * 3,
           (0.0, 2 / 3, 2 / 3), (3 * PAGE, PAGE, PAGE)),
    # the second epoch in reverse: LRU keeps the most recent file (2), which is read first
    Replay("lru reversed, C = D - 1 file", "lru", (PAGE,) * 3, 2 * PAGE, ((0, 1, 2), (2, 1, 0)),
           (0.0, 2 / 3), (3 * PAGE, PAGE)),
    # byte-weighted: the large file misses, the small one hits
    Replay("byte weighted", "lru", (PAGE, 3 * PAGE), 3 * PAGE, ((0, 1), (0, 1)),
           (0.0, 0.0), (4 * PAGE, 4 * PAGE)),
    Replay("file larger than the cache is never kept", "pagecache", (PAGE, 4 * PAGE), 3 * PAGE,
           ((0, 1), (0, 1)), (0.0, 0.2), (5 * PAGE, 4 * PAGE)),
]


@pytest.mark.parametrize("case", REPLAYS, ids=[c.name for c in REPLAYS])
def test_replay(case: Replay) -> None:
    stats = cachesim.simulate(case.sizes, case.cache_bytes, case.policy, case.orders)
    assert [s.hit_rate for s in stats] == pytest.approx(case.hit_rates)
    assert [s.read_bytes for s in stats] == list(case.read_bytes)


def test_miss_bytes_match_simulate() -> None:
    misses = cachesim.miss_bytes((PAGE,) * 4, 2 * PAGE, "pagecache", SCAN)
    assert [m.tolist() for m in misses] == [[PAGE, PAGE], [0, 0], [PAGE, PAGE], [PAGE, 0]]
    assert [m.sum() for m in cachesim.miss_bytes((PAGE,) * 4, None, "lru", SCAN)] == \
        [2 * PAGE, 0, 2 * PAGE, 0]


def steady(sizes: list[int], cache_bytes: int, policy: str, epochs: int = 8, bins: int = 10,
           batch_size: int = 1) -> tuple[cachesim.EpochStats, list[cachesim.EpochStats]]:
    """A cold epoch, then `epochs` steady ones in fresh permutations."""
    rng = np.random.default_rng(0)
    orders = [cachesim.epoch_order(len(sizes), rng, 1, batch_size) for _ in range(epochs + 1)]
    stats = cachesim.simulate(sizes, cache_bytes, policy, orders, bins)
    return stats[0], stats[1:]


def steady_hit(rest: list[cachesim.EpochStats]) -> float:
    return sum(s.hit_bytes for s in rest) / sum(s.accessed_bytes for s in rest)


@pytest.mark.parametrize("policy", ["lru", "pagecache", "noevict"])
@pytest.mark.parametrize("fraction, steady_rate", [(0.0, 0.0), (1.0, 1.0), (2.0, 1.0)])
def test_hit_rates_at_the_extremes(policy: str, fraction: float, steady_rate: float) -> None:
    sizes = [PAGE * (1 + i % 5) for i in range(200)]
    first, rest = steady(sizes, int(fraction * sum(sizes)), policy, batch_size=4)
    assert first.hit_rate == 0.0 and first.read_bytes == first.accessed_bytes == sum(sizes)
    assert steady_hit(rest) == pytest.approx(steady_rate)


@pytest.mark.parametrize("fraction", [0.25, 0.5, 0.75])
def test_random_permutations_order_the_policies(fraction: float) -> None:
    """No-evict keeps exactly the admitted bytes; LRU thrashes; the page cache lies between."""
    sizes = [PAGE * 10] * 400
    cap = int(fraction * sum(sizes))
    rates = {p: steady_hit(steady(sizes, cap, p, epochs=20)[1])
             for p in ("lru", "pagecache", "noevict")}
    assert rates["noevict"] == pytest.approx(fraction, abs=1e-9)
    assert rates["lru"] < rates["pagecache"] < rates["noevict"]
    assert rates["lru"] < 0.6 * fraction  # far below the cached fraction


def test_lru_hits_come_early_in_the_epoch() -> None:
    """LRU serves the previous epoch's tail: hits fall off along the epoch."""
    sizes = [PAGE] * 500
    rest = steady(sizes, 250 * PAGE, "lru", epochs=20)[1]
    profile = [sum(s.profile[b] for s in rest) / len(rest) for b in range(10)]
    assert profile[0] > 0.4 and profile[-1] == 0.0
    assert profile == sorted(profile, reverse=True)


@pytest.mark.parametrize("n, ranks, batch, used", [(10, 1, 4, 8), (10, 2, 2, 8), (11, 3, 1, 9),
                                                    (7, 2, 4, 0)])
def test_epoch_order_follows_the_samplers(n: int, ranks: int, batch: int, used: int) -> None:
    order = cachesim.epoch_order(n, np.random.default_rng(0), ranks, batch)
    assert len(order) == used and len(set(order.tolist())) == used
    assert all(len(order[r::ranks]) == used // ranks for r in range(ranks))


@pytest.mark.parametrize("sizes, rounded", [([1, 4096, 4097, 0], [4096, 4096, 8192, 0])])
def test_page_rounding(sizes: list[int], rounded: list[int]) -> None:
    assert cachesim.page_rounded(sizes).tolist() == rounded


@pytest.mark.parametrize("cache, data, hit", [(None, 100, 1.0), (0, 100, 0.0), (25, 100, 0.25),
                                              (300, 100, 1.0)])
def test_naive_hit_is_the_cached_fraction(cache: int | None, data: int, hit: float) -> None:
    assert cachesim.naive_hit(cache, data) == hit


def test_sizes_from_quantiles() -> None:
    assert cachesim.sizes_from_quantiles([100, 200], 2).tolist() == [125, 175]
    assert cachesim.sizes_from_quantiles([100, 200, 400], 4).tolist() == [125, 175, 250, 350]


@pytest.mark.parametrize("bad", ["mru", ""])
def test_unknown_policy(bad: str) -> None:
    with pytest.raises(ConfigError, match="use lru, pagecache or noevict"):
        cachesim.Policy.parse(bad)


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 5 * PAGE), min_size=2, max_size=120),
       share=st.floats(0.0, 1.0), ranks=st.integers(1, 3), batch=st.integers(1, 4))
def test_the_same_order_every_epoch_hits_an_lru_all_or_nothing(
        sizes: list[int], share: float, ranks: int, batch: int) -> None:
    """A cyclic scan (DALI's file reader without shuffle_after_epoch): each file was last
    read one whole epoch ago, after every other file. An LRU admits the files that fit it;
    if those all fit together, every later epoch hits each of them; if not, each was
    evicted before its turn came again and no later epoch hits at all."""
    rng = np.random.default_rng(0)
    orders = [cachesim.epoch_order(len(sizes), rng, ranks, batch, same_order=True)
              for _ in range(3)]
    assert all(np.array_equal(o, orders[0]) for o in orders)
    cap = int(share * sum(sizes))
    admitted = sum(sizes[i] for i in np.unique(orders[0]) if sizes[i] <= cap)
    stats = cachesim.simulate(sizes, cap, "lru", orders)
    expected = admitted if admitted <= cap else 0
    assert [e.hit_bytes for e in stats[1:]] == [expected] * 2


def test_the_same_order_every_epoch_thrashes_the_page_cache_as_a_dali_reader_did() -> None:
    """The two-list page cache at half of 3000 JPEGs (tests/scripts/train_dali.py's reader
    without shuffle_after_epoch) keeps next to none of a cyclic scan; measured with the
    budget at 50%, the job read 87.8 MB where at 0 it read 90.4 MB (hits of about 3%), not
    the 15-21% a fresh permutation gets."""
    rng = np.random.default_rng(1)
    sizes = rng.integers(8 * 1024, 14 * 1024, 3000)
    cap = sum(sizes) // 2
    cyclic = [cachesim.epoch_order(3000, rng, 1, 16, same_order=True) for _ in range(3)]
    shuffled = [cachesim.epoch_order(3000, rng, 1, 16) for _ in range(3)]
    assert steady_hit(cachesim.simulate(sizes, cap, "pagecache", cyclic)[1:]) < 0.05
    assert steady_hit(cachesim.simulate(sizes, cap, "pagecache", shuffled)[1:]) > 0.10


def _steady_hits(missed: list[np.ndarray], sizes: np.ndarray) -> float:
    """The share of the steady epochs' bytes (all but the first) that hit."""
    return 1 - sum(float(m.sum()) for m in missed[1:]) / (len(missed[1:]) * float(sizes.sum()))


@settings(max_examples=30, deadline=None)
@given(n=st.integers(20, 120), share=st.floats(0.0, 0.97), seed=st.integers(0, 1000))
def test_a_buffer_of_one_is_a_cyclic_scan(n: int, share: float, seed: int) -> None:
    """A reader whose buffer holds one file hands out each file as it reads it: the same
    order every epoch, a cyclic scan, which an LRU under the dataset never hits (each file
    comes back after every other one) and one that holds it always does."""
    sizes = np.full(n, PAGE)
    below = cachesim.buffered_miss_bytes(sizes, int(share * (n - 1)) * PAGE, 3, 1,
                                         np.random.default_rng(seed))
    assert _steady_hits(below, sizes) == 0.0
    whole = cachesim.buffered_miss_bytes(sizes, n * PAGE, 3, 1, np.random.default_rng(seed))
    assert _steady_hits(whole, sizes) == 1.0


@settings(max_examples=25, deadline=None)
@given(n=st.integers(30, 200), window=st.integers(1, 60), seed=st.integers(0, 1000),
       shares=st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 1.0)))
def test_more_cache_never_misses_more_with_a_held_buffer(n, window, seed, shares) -> None:
    """The hand-outs, and so the reads, are the same draws at any budget (the same seed);
    an LRU keeps a larger budget's files a superset of a smaller one's, so no read that
    hits at the smaller budget misses at the larger."""
    sizes = np.asarray([PAGE * (1 + i % 3) for i in range(n)])
    small, large = sorted(int(s * sizes.sum()) for s in shares)
    a = cachesim.buffered_miss_bytes(sizes, small, 3, window, np.random.default_rng(seed))
    b = cachesim.buffered_miss_bytes(sizes, large, 3, window, np.random.default_rng(seed))
    assert all((y <= x).all() for x, y in zip(a, b))


def test_a_held_buffer_keeps_the_files_it_hands_out_a_lap_late() -> None:
    """At a budget of 0 the cache holds only what the buffer holds. A read hits only where
    the file read a lap (n files) before is still in the buffer: each step hands out one of
    the W files at random, so a file stays more than n steps with probability
    (1 - 1/W)^n (2400 files, 1024 in the buffer: 9.6%), and the steady epochs hit that
    share. The file reader of tests/scripts/train_dali.py held so: at cache 0 it read
    707 samples/s through a throttle that carries 683 of its files a second."""
    n, window = 2400, 1024
    sizes = np.full(n, 3 * PAGE)
    missed = cachesim.buffered_miss_bytes(sizes, 0, 4, window, np.random.default_rng(3))
    assert _steady_hits(missed, sizes) == pytest.approx((1 - 1 / window) ** n, abs=0.02)
