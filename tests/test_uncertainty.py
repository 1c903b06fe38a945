"""Intervals of rates and stalls: coverage on simulated series, and committed runs.

tests/data/uncertainty_pair holds three runs at cpus=1 with 120 measured
iterations whose times are AR(1) (rho 0.5, sd 8% of the mean): synthetic
30.0 ms, cached 30.3 ms (1% slower, less than the noise), disk 45 ms (clearly
fetch-bound).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from conftest import DATA_DIR
from hypothesis import given, settings
from hypothesis import strategies as st

from dsanalyze import store
from dsanalyze.analysis import stalls, uncertainty
from dsanalyze.analysis.summary import summarize
from dsanalyze.analysis.uncertainty import RateInterval, RateMethod, Significance
from dsanalyze.config import Job, Mode, Resources, RunSpec
from dsanalyze.records import RankRecord, RunResult
from dsanalyze.report import summary as report
from dsanalyze.report.verdicts import verdict_text

PAIR = DATA_DIR / "uncertainty_pair"


def ar1(rng: np.random.Generator, n: int, rho: float, mean: float, sd: float) -> np.ndarray:
    x = np.empty(n)
    x[0] = rng.normal(0, sd)
    noise = rng.normal(0, sd * np.sqrt(1 - rho * rho), n)
    for i in range(1, n):
        x[i] = rho * x[i - 1] + noise[i]
    return mean + x


def run_of(iter_s: np.ndarray, samples: int = 10, mode: Mode = Mode.CACHED,
           repeat: int = 1) -> RunResult:
    n = len(iter_s)
    rank = RankRecord(0, (0.0,) * n, tuple(float(t) for t in iter_s), (0,) * n, (samples,) * n)
    return RunResult(RunSpec(Job(data_dir="/d"), mode, Resources(1), repeat), "ok", ranks=(rank,))


def binomial_band(p: float, n: int, z: float = 3.0) -> tuple[float, float]:
    """Where a share of `n` independent trials, each a success with chance `p`, falls
    but for a chance of about 0.3% (z = 3 standard deviations of the binomial share)."""
    half = z * math.sqrt(p * (1 - p) / n)
    return p - half, p + half


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.8])
def test_block_bootstrap_covers_the_true_rate_of_autocorrelated_series(rho):
    """200 AR(1) series of 200 iterations of mean 0.1 s, 10 samples each: the true rate is
    100 samples/s. Two-sided: the 95% and the 80% intervals cover it as often as their level
    says, within the binomial spread of 200 series (too wide fails as too narrow does), and
    their misses fall on both sides as a fair coin would (an interval shifted off the rate
    would miss on one side)."""
    rng = np.random.default_rng(7)
    covered = {0.95: 0, 0.8: 0}
    below = above = 0
    for _ in range(200):
        samples = uncertainty.run_samples(run_of(ar1(rng, 200, rho, 0.1, 0.02)))
        for level in covered:
            ci = samples.interval(level)
            covered[level] += ci.low_sps <= 100.0 <= ci.high_sps
        ci = samples.interval(0.8)
        below += ci.high_sps < 100.0
        above += ci.low_sps > 100.0
    for level, hits in covered.items():
        low, high = binomial_band(level, 200)
        assert low <= hits / 200 <= high, (level, hits)
    low, high = binomial_band(0.5, below + above)
    assert low <= below / (below + above) <= high, (below, above)


def epochs_run(epochs: list[np.ndarray], samples: int = 10) -> RunResult:
    """A cached run of these epochs' iteration times, one after another, no warm-up."""
    iter_s = np.concatenate(epochs)
    n = len(iter_s)
    labels = tuple(e for e, times in enumerate(epochs) for _ in times)
    rank = RankRecord(0, (0.0,) * n, tuple(map(float, iter_s)), labels, (samples,) * n)
    return RunResult(RunSpec(Job(data_dir="/d"), Mode.CACHED, Resources(1), 1), "ok",
                     ranks=(rank,))


@pytest.mark.parametrize("n_epochs", [2, 4])
def test_what_happens_once_an_epoch_is_resampled_in_step_with_the_epochs(n_epochs):
    """200 runs of epochs of 30 iterations (0.1 s, sd 0.02, 10 samples each) whose last
    iteration also saves a checkpoint (0.7 s more), as a Lightning script does at every
    epoch's end: the true rate is 300 / (30 x 0.1 + 0.7) = 81.08 samples/s. The 95% and
    80% intervals cover it as often as their level says, two-sided (drawing iterations
    alone gave windows with 0 to 4 checkpoints an epoch: intervals several times too wide,
    covering every time)."""
    rng = np.random.default_rng(11)
    true_sps = 300 / (30 * 0.1 + 0.7)
    covered = {0.95: 0, 0.8: 0}
    for _ in range(200):
        epochs = [rng.normal(0.1, 0.02, 30) + np.r_[np.zeros(29), 0.7] for _ in range(n_epochs)]
        samples = uncertainty.run_samples(epochs_run(epochs))
        assert samples.method.epochs == n_epochs
        for level in covered:
            ci = samples.interval(level)
            covered[level] += ci.low_sps <= true_sps <= ci.high_sps
    for level, hits in covered.items():
        low, high = binomial_band(level, 200)
        assert low <= hits / 200 <= high, (level, hits)


@given(epoch=st.lists(st.floats(0.001, 2.0), min_size=3, max_size=40),
       n_epochs=st.integers(2, 5))
@settings(max_examples=30, deadline=None)
def test_epochs_alike_give_a_rate_without_spread(epoch, n_epochs):
    """Every epoch the same iteration times, whatever they are: each replicate draws each
    place in the epoch from an epoch like the others, so every replicate is the rate."""
    samples = uncertainty.run_samples(epochs_run([np.array(epoch)] * n_epochs))
    ci = samples.interval(0.95)
    assert ci.low_sps == pytest.approx(ci.rate_sps) == pytest.approx(ci.high_sps)
    assert ci.rate_sps == pytest.approx(10 * len(epoch) / sum(epoch))


def test_the_block_grows_with_the_autocorrelation():
    rng = np.random.default_rng(3)
    lengths = [uncertainty.block_length(ar1(rng, 400, rho, 0.1, 0.02)) for rho in (0.0, 0.5, 0.9)]
    assert lengths[0] <= 2 < lengths[1] < lengths[2] <= 400 // 3


def test_rate_interval_round_trips_and_is_reproducible():
    run = store.read_run(PAIR / "runs" / "cached-cpus1.json")
    ci = uncertainty.rate_interval(run, level=0.9)
    assert ci == uncertainty.rate_interval(run, level=0.9)  # seeded from the run id
    assert RateInterval.from_dict(ci.to_dict()) == ci
    assert ci.low_sps < ci.rate_sps < ci.high_sps
    assert ci.rate_sps == pytest.approx(stalls.run_rate(run).rate_sps)
    assert ci.level == 0.9 and ci.method.block and ci.method.iterations and ci.method.repeats == 1
    wider = uncertainty.rate_interval(run, level=0.99)
    assert wider.low_sps < ci.low_sps and wider.high_sps > ci.high_sps


def test_rates_closer_than_their_noise_are_within_noise():
    doc = summarize(store.load_runs(PAIR))
    (cfg,) = doc.configs
    synthetic, cached = cfg.modes["synthetic"], cfg.modes["cached"]
    # the two intervals overlap: the cached run is not measurably slower
    assert cached.rate_sps_low < synthetic.rate_sps_high
    assert cfg.prep_stall_significance == "within_noise"
    assert cfg.prep_stall_pct_low < 0 < cfg.prep_stall_pct_high
    cell = report.table_rows(doc)[0][report.COLUMNS.index("prep stall")]
    half = (cfg.prep_stall_pct_high - cfg.prep_stall_pct_low) / 2
    assert cell == f"within noise (±{half:.1f}%)"


def test_a_clearly_fetch_bound_pair_has_an_interval_excluding_zero():
    doc = summarize(store.load_runs(PAIR))
    (cfg,) = doc.configs
    # disk 45 ms against cached 30.3 ms per iteration: fetch is 1 - 30.3/45 = 33% of the epoch
    assert 0 < cfg.fetch_stall_pct_low < 33 < cfg.fetch_stall_pct_high < 40
    assert cfg.fetch_stall_s_low > 0 and cfg.fetch_stall_significance == "likely"
    assert verdict_text(cfg.verdict).startswith("likely highly fetch-bound: 34% ±")
    half = (cfg.fetch_stall_pct_high - cfg.fetch_stall_pct_low) / 2
    assert report.table_rows(doc)[0][report.COLUMNS.index("fetch stall")] == \
        f"{cfg.fetch_stall_s:.1f}s {cfg.fetch_stall_pct:.1f}% ±{half:.1f}"
    assert "stalls within noise" not in report.render_table(doc)
    run = next(r for r in doc.runs if r.run_id == "disk-cpus1-cachenone-bwnone")
    assert run.rate_sps_low < run.rate_sps < run.rate_sps_high


def test_repeats_that_disagree_widen_the_interval():
    """Two repeats 10% apart: the pooled interval spans both, wider than either run's own."""
    rng = np.random.default_rng(5)
    a = run_of(ar1(rng, 150, 0.3, 0.100, 0.005))
    b = run_of(ar1(rng, 150, 0.3, 0.110, 0.005), repeat=2)
    own = [uncertainty.rate_interval(r) for r in (a, b)]
    pooled = uncertainty.combined_samples([a, b]).interval()
    assert pooled.rate_sps == pytest.approx((own[0].rate_sps + own[1].rate_sps) / 2)
    assert pooled.high_sps - pooled.low_sps > 3 * max(o.high_sps - o.low_sps for o in own)
    assert pooled.method == RateMethod(None, None, 2)


def test_repeats_are_pooled_into_their_configuration():
    runs = store.load_runs(PAIR)
    again = [dataclasses.replace(r, spec=dataclasses.replace(r.spec, repeat=2)) for r in runs]
    (cfg,) = summarize(runs + again).configs
    assert cfg.modes["disk"].run_ids == ("disk-cpus1-cachenone-bwnone",
                                         "disk-cpus1-cachenone-bwnone-r2")
    assert cfg.modes["cached"].repeats == 2


@pytest.mark.parametrize("slower_ms,significance", [(45.0, "likely"), (30.3, "within_noise"),
                                                     (20.0, "inverted")])
def test_significance_of_a_difference(slower_ms, significance):
    rng = np.random.default_rng(9)
    fast = uncertainty.run_samples(run_of(ar1(rng, 120, 0.5, 0.030, 0.0024)))
    slow = uncertainty.run_samples(run_of(ar1(rng, 120, 0.5, slower_ms / 1000, 0.0024),
                                          mode=Mode.DISK))
    t_slow, t_fast = uncertainty.epoch_time(128, slow), uncertainty.epoch_time(128, fast)
    stall = uncertainty.stall_interval(t_slow, t_fast, t_slow)
    assert stall.significance is Significance(significance)
    assert stall.pct_low <= stall.pct <= stall.pct_high


@pytest.mark.parametrize("said,method", [
    ("circular block bootstrap over iterations (block 4 of 100)", RateMethod(4, 100)),
    ("circular block bootstrap over iterations and over 3 repeats", RateMethod(None, None, 3)),
])
def test_a_method_stored_as_a_sentence_reads_back_typed(said, method):
    """summary.json of schema < 4 stored the method as a sentence: its numbers are kept."""
    assert RateMethod.from_dict(said) == method
    assert RateMethod.from_dict(method.to_dict()) == method
