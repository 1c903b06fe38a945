"""Laws that hold for every input, checked with hypothesis.

- The stall split telescopes: compute + prep stall + fetch stall = the epoch,
  for any runs whose slower mode is slower, and it scales with time.
- The cache simulator's LRU against a brute-force LRU written from its
  definition (the cache holds the most recently read files that fit).
- Pooling repeats: the pooled rate is the repeats' mean, whatever their order.
- The simulation's chunk sums (summed once, vectorized) are the sums over the samples
  the sample order puts in each chunk of each rank's batch, counted one by one.
- Every record survives its JSON round trip (`to_dict`, `json`, `from_dict`).
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsanalyze.analysis import uncertainty
from dsanalyze.analysis.coldepoch import ColdEpoch
from dsanalyze.analysis.interference import Interference
from dsanalyze.analysis.measured import MeasuredWindow, ShortRun
from dsanalyze.analysis.notes import (
    CacheUnbound,
    Cause,
    Disturbed,
    EvictionIncomplete,
    InvertedStall,
    ReadAheadMoved,
    RunNotOk,
    Said,
    SpinningStep,
    StuckPages,
    SuspectStall,
    WideSpread,
)
from dsanalyze.analysis.pernode import NodeRun, NodeShare
from dsanalyze.analysis.runrate import RunRate
from dsanalyze.analysis.stalls import Breakdown, KnobHold, ModeRate, breakdowns
from dsanalyze.analysis.summary import ConfigSummary, FailedRun, Summary
from dsanalyze.analysis.verdict import Bound, StallShare, Verdict
from dsanalyze.config import CacheBudget, Job, Mode, Resources, RunSpec
from dsanalyze.records import (
    CpuScaling,
    DatasetRecord,
    Enforcement,
    How,
    IoRecord,
    Knob,
    RankRecord,
    RunResult,
    Status,
)
from dsanalyze.whatif import cachesim, pipeline

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
JOB = Job(data_dir="/d", batch_size=10)
WARMUP = 2


def _run(mode: Mode, iter_s: list[float], repeat: int = 1) -> RunResult:
    n = len(iter_s)
    res = Resources(1, CacheBudget.parse("none", 1000)) if mode is Mode.DISK else Resources(1)
    rank = RankRecord(0, (0.0,) * n, tuple(iter_s), (0,) * n, (10,) * n, WARMUP,
                      extra={"batches_per_epoch": n})
    return RunResult(RunSpec(JOB, mode, res, repeat), "ok", ranks=(rank,))


times = st.lists(st.floats(0.01, 1.0), min_size=WARMUP + 4, max_size=WARMUP + 12)
slowdowns = st.floats(0.0, 3.0)


# ---- the stall arithmetic --------------------------------------------------------------------

@FAST
@given(times, slowdowns, slowdowns, slowdowns)
def test_the_stalls_and_the_compute_add_up_to_the_epoch(g, c_extra, d_extra, jitter):
    """Each iteration of the slower mode at least as long as the faster one's: no stall is
    clamped, so the three parts telescope to the disk epoch, and the shares to 100%."""
    c = [t * (1 + c_extra) + jitter * 0.001 for t in g]
    d = [t * (1 + d_extra) for t in c]
    (b,) = breakdowns([_run(Mode.SYNTHETIC, g), _run(Mode.CACHED, c), _run(Mode.DISK, d)])
    assert b.prep_stall_s >= 0 and b.fetch_stall_s >= 0
    assert b.compute_s + b.prep_stall_s + b.fetch_stall_s == pytest.approx(b.total_s, rel=1e-9)
    assert b.prep_stall_pct + b.fetch_stall_pct + 100 * b.compute_s / b.total_s == \
        pytest.approx(100.0, rel=1e-9)


@FAST
@given(times, slowdowns, slowdowns, st.floats(0.1, 10.0))
def test_the_split_scales_with_time_and_its_shares_do_not(g, c_extra, d_extra, k):
    c = [t * (1 + c_extra) for t in g]
    d = [t * (1 + d_extra) for t in c]
    (b,) = breakdowns([_run(Mode.SYNTHETIC, g), _run(Mode.CACHED, c), _run(Mode.DISK, d)])
    (s,) = breakdowns([_run(Mode.SYNTHETIC, [k * t for t in g]),
                       _run(Mode.CACHED, [k * t for t in c]), _run(Mode.DISK, [k * t for t in d])])
    for name in ("compute_s", "prep_stall_s", "fetch_stall_s", "total_s"):
        assert getattr(s, name) == pytest.approx(k * getattr(b, name), rel=1e-9, abs=1e-12)
    for name in ("prep_stall_pct", "fetch_stall_pct"):
        assert getattr(s, name) == pytest.approx(getattr(b, name), rel=1e-9, abs=1e-9)


@FAST
@given(times, st.floats(0.05, 0.9))
def test_a_faster_slower_mode_is_clamped_to_no_stall(g, shrink):
    """A cached run faster than the synthetic one: the stall drawn is 0, never negative, and
    never called likely (inverted, or within noise when the runs are noisy, or suspect when
    the two rates' intervals are apart)."""
    (b,) = breakdowns([_run(Mode.SYNTHETIC, g), _run(Mode.CACHED, [t * shrink for t in g])])
    assert b.prep_stall_s == 0.0 and b.prep_stall_pct == 0.0
    assert b.prep_stall_significance in ("inverted", "within_noise", "suspect")
    synthetic, cached = b.modes["synthetic"], b.modes["cached"]
    apart = cached.rate_sps_low > synthetic.rate_sps_high
    assert (b.prep_stall_significance == "suspect") == (apart and b.prep_stall_s_high < 0)


# ---- the cache simulator against a brute-force LRU ---------------------------------------------

def brute_force_lru_misses(sizes: list[int], capacity: int, reads: list[int]) -> list[int]:
    """Bytes each read takes from storage under LRU by bytes, from the definition: before each
    read the cache holds the most recently read distinct files, newest first, as long as their
    sizes fit together (a file larger than the cache is never held)."""
    out = []
    for t, f in enumerate(reads):
        held, used = set(), 0
        for g in dict.fromkeys(reversed(reads[:t])):  # distinct, most recent first
            if sizes[g] > capacity:
                continue
            if used + sizes[g] > capacity:
                break
            held.add(g)
            used += sizes[g]
        out.append(0 if f in held else sizes[f])
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=8).flatmap(
    lambda sizes: st.tuples(st.just(sizes), st.integers(0, sum(sizes) + 2),
                            st.lists(st.lists(st.integers(0, len(sizes) - 1), max_size=12),
                                     min_size=1, max_size=4))))
def test_the_lru_cache_is_the_brute_force_lru(case):
    sizes, capacity, epochs = case
    simulated = np.concatenate(cachesim.miss_bytes(sizes, capacity, "lru", epochs))
    reads = [i for epoch in epochs for i in epoch]
    assert simulated.tolist() == brute_force_lru_misses(sizes, capacity, reads)


# ---- pooling repeats ---------------------------------------------------------------------------

@settings(max_examples=100, deadline=None)
@given(st.integers(1, 3), st.integers(1, 13), st.integers(1, 4), st.integers(1, 6),
       st.integers(0, 5), st.integers(0, 2**32 - 1))
def test_chunk_sums_are_the_sums_over_each_chunks_samples(ranks, batch, batches, max_chunks,
                                                          extra, seed):
    """Sample t of rank r's batch j is `(j * batch + t) * ranks + r` (`cachesim.epoch_order`);
    a chunk is `ceil(batch / max_chunks)` consecutive samples of a batch, the last one
    shorter. Each chunk's sum, written as that definition reads, sample by sample."""
    need = ranks * batch * batches
    # whole numbers: every order of summing them gives the same float
    values = np.random.default_rng(seed).integers(0, 10**6, need + extra).astype(float)
    p = pipeline.Pipeline(ranks, 1, batch, 1, 0.0, 0.0, 1e-3, None)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pipeline, "SETTINGS", replace(pipeline.SETTINGS, max_chunks=max_chunks))
        sim = pipeline._Sim(p, [values], batches)
    chunk = -(-batch // max_chunks)
    got = sim._chunk_sums(values, batches)
    for j in range(batches):
        starts = range(0, batch, chunk)
        assert len(got[j]) == len(starts)
        for c, first in enumerate(starts):
            for r in range(ranks):
                want = sum(values[(j * batch + t) * ranks + r]
                           for t in range(first, min(first + chunk, batch)))
                assert got[j][c][r] == want


@settings(max_examples=10, deadline=None)
@given(st.lists(times, min_size=2, max_size=3), st.randoms(use_true_random=False))
def test_pooled_rate_is_the_repeats_mean_in_any_order(series, rnd):
    runs = [_run(Mode.CACHED, s, repeat=i + 1) for i, s in enumerate(series)]
    own = [uncertainty.run_samples(r).rate_sps for r in runs]
    pooled = uncertainty.combined_samples(runs)
    assert pooled.rate_sps == pytest.approx(float(np.mean(own)), rel=1e-12)
    shuffled = list(runs)
    rnd.shuffle(shuffled)
    again = uncertainty.combined_samples(shuffled)
    assert again.rate_sps == pytest.approx(pooled.rate_sps, rel=1e-12)
    np.testing.assert_allclose(np.sort(again.replicates), np.sort(pooled.replicates))
    assert min(own) - 1e-9 <= pooled.rate_sps <= max(own) + 1e-9


# ---- JSON round trips ------------------------------------------------------------------------

finite = st.floats(-1e9, 1e9, allow_nan=False)
maybe = st.none() | finite
words = st.text("abcdefgh-_ ", max_size=8)
ints = st.integers(0, 1 << 40)

jobs = st.builds(Job, data_dir=st.none() | words, batch_size=st.integers(1, 512),
                 workers=st.integers(0, 16), iters=st.none() | st.integers(1, 1000),
                 warmup=st.integers(0, 10), nproc_per_node=st.integers(1, 8),
                 nnodes=st.integers(1, 4), seed=st.integers(0, 99),
                 script_args=st.lists(words, max_size=3).map(tuple))
budgets = st.sampled_from(["none", "0", "25%", "50%", "2G"]).flatmap(
    lambda spec: st.builds(CacheBudget.parse, st.just(spec), st.just(1 << 30)))
resources = st.builds(Resources, st.none() | st.integers(1, 64), budgets,
                      st.none() | st.integers(1, 1 << 34))
specs = st.builds(RunSpec, jobs, st.sampled_from(list(Mode)), resources, st.integers(1, 5))
# a reason is text or none (an empty reason is stored as none)
knobs = st.none() | st.builds(Knob, st.sampled_from(list(How)), st.none() | words.filter(bool))
enforcements = st.builds(Enforcement, knobs, knobs, knobs, st.none() | st.sampled_from([1, 2]),
                         st.none() | st.just("254:0"), st.none() | ints)
datasets = st.builds(DatasetRecord, st.none() | words, st.integers(0, 100), ints, ints,
                     st.lists(ints, max_size=5).map(tuple))
ranks = st.integers(1, 6).flatmap(lambda n: st.builds(
    RankRecord, st.integers(0, 7), st.lists(finite, min_size=n, max_size=n).map(tuple),
    st.lists(finite, min_size=n, max_size=n).map(tuple),
    st.lists(st.integers(0, 3), min_size=n, max_size=n).map(tuple),
    st.lists(st.integers(1, 64), min_size=n, max_size=n).map(tuple), st.integers(0, 3), finite))
ios = st.builds(IoRecord, st.none() | ints, st.none() | st.just("cgroup"), st.none() | ints)
runs = st.builds(RunResult, specs, st.sampled_from(list(Status)), st.none() | words,
                 ranks=st.lists(ranks, max_size=2).map(tuple), dataset=datasets,
                 enforced=enforcements, io=ios, started_unix_s=finite, duration_s=finite)

methods = st.builds(uncertainty.RateMethod, st.none() | st.integers(1, 99),
                    st.none() | st.integers(1, 9999), st.integers(1, 9))
mode_rates = st.builds(ModeRate, words, st.lists(words, max_size=3).map(tuple),
                       st.integers(1, 5), words, maybe, maybe, maybe, st.none() | methods, maybe,
                       maybe, maybe, maybe, maybe, maybe, st.lists(words, max_size=2).map(tuple))
holds = st.builds(KnobHold, st.sampled_from([h.value for h in How]), st.none() | words,
                  st.none() | st.sampled_from([1, 2]), st.none() | words)
colds = st.builds(ColdEpoch, finite, maybe, maybe, maybe, finite, maybe, finite,
                  st.sampled_from(list(Bound)), st.booleans())
verdicts = st.builds(Verdict, st.sampled_from(list(Bound)),
                     st.lists(st.builds(StallShare, st.sampled_from(["prep", "fetch"]), finite,
                                        finite), max_size=2).map(tuple),
                     st.booleans(), maybe, st.booleans(), st.none() | words)
modes = st.sampled_from([m.value for m in Mode])
stall_kinds = st.sampled_from(["prep", "fetch"])
notes = st.one_of(
    st.builds(Said, words), st.builds(WideSpread, modes, finite),
    st.builds(RunNotOk, modes, words, words, st.none() | words),
    st.builds(Disturbed, modes, words, st.lists(st.sampled_from(list(Interference)), max_size=3)
              .map(tuple), maybe, maybe, st.none() | ints),
    st.builds(SuspectStall, stall_kinds, modes, modes, maybe, maybe, st.sampled_from(list(Cause)),
              maybe, maybe),
    st.builds(InvertedStall, stall_kinds, modes, modes, finite, finite),
    st.builds(CacheUnbound, words, ints, ints), st.builds(EvictionIncomplete, words, ints, ints),
    st.builds(StuckPages, words, ints), st.builds(ReadAheadMoved, words, ints, finite),
    st.builds(SpinningStep, words, ints, ints, ints, st.none() | words))
configs = st.builds(ConfigSummary, words, st.none() | st.integers(1, 64), words,
                    st.none() | ints, st.none() | ints, st.none() | ints,
                    st.dictionaries(st.sampled_from([m.value for m in Mode]), mode_rates, max_size=3),
                    st.dictionaries(st.sampled_from(list(Enforcement.KNOBS)), holds, max_size=3),
                    maybe, maybe, maybe, maybe, maybe, maybe, verdicts,
                    notes=st.lists(notes, max_size=3).map(tuple), cold_epoch=st.none() | colds,
                    cold_only=st.booleans())
rates = st.builds(RunRate, words, st.sampled_from([m.value for m in Mode]), words, maybe,
                  st.integers(0, 10_000), finite, maybe,
                  disturbed=st.lists(words, max_size=2).map(tuple))
shorts = st.builds(ShortRun, words, st.integers(0, 99), st.integers(0, 99), st.integers(0, 99),
                   st.sampled_from(["iterations", "epochs"]), st.integers(0, 9))
nodes = st.builds(NodeRun, words, words,
                  st.lists(st.builds(NodeShare, st.integers(0, 3),
                                     st.lists(st.integers(0, 7), max_size=3).map(tuple),
                                     maybe, maybe, st.none() | words), max_size=3).map(tuple),
                  st.none() | st.integers(0, 3))
summaries = st.builds(
    Summary, st.none() | jobs, st.none() | datasets, st.lists(configs, max_size=2).map(tuple),
    st.builds(MeasuredWindow, words, st.none() | st.integers(0, 99),
              st.lists(shorts, max_size=2).map(tuple)),
    st.lists(rates, max_size=2).map(tuple),
    st.lists(st.builds(FailedRun, words, words, st.none() | words), max_size=2).map(tuple),
    st.lists(nodes, max_size=2).map(tuple), st.lists(words, max_size=2).map(tuple))

RECORDS = {
    "RunResult": runs, "RunSpec": specs, "Job": jobs, "Resources": resources,
    "Enforcement": enforcements, "DatasetRecord": datasets, "RankRecord": ranks, "IoRecord": ios,
    "CpuScaling": st.builds(CpuScaling, st.integers(1, 64), maybe, st.none() | words, maybe),
    "Summary": summaries, "Breakdown": configs.map(
        lambda c: Breakdown(**{f: getattr(c, f) for f in Breakdown.__dataclass_fields__})),
    "RateInterval": st.builds(uncertainty.RateInterval, finite, finite, finite, methods, finite),
    "RateMethod": methods,
    "Note": notes,
}


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_every_record_survives_its_json_round_trip(name):
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(RECORDS[name])
    def round_trip(value):
        doc = json.loads(json.dumps(value.to_dict()))
        back = type(value).from_dict(doc)
        assert back == value
        assert back.to_dict() == doc
    round_trip()
