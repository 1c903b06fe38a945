"""The differential breakdown on hand-made runs whose answer is known."""

from __future__ import annotations

import pytest

from dsanalyze.analysis.notes import CacheUnbound
from dsanalyze.analysis.runrate import run_rate
from dsanalyze.analysis.stalls import breakdowns
from dsanalyze.analysis.summary import summarize
from dsanalyze.analysis.uncertainty import Significance, StallInterval
from dsanalyze.analysis.verdict import bound, verdict
from dsanalyze.config import CacheBudget, Job, Mode, Resources, RunSpec
from dsanalyze.records import RankRecord, RunResult
from dsanalyze.report.notes import note_text
from dsanalyze.report.verdicts import verdict_text

JOB = Job(data_dir="/d", batch_size=10)


def make_run(mode: Mode, iter_s: float, wait_s: float = 0.0, n: int = 20, warmup: int = 2,
             cpus: int | None = 1, cache: str = "none", ranks: int = 1,
             epochs: list[int] | None = None, status: str = "ok") -> RunResult:
    res = Resources(cpus) if mode is not Mode.DISK else Resources(cpus, CacheBudget.parse(cache, 1000))
    recs = tuple(RankRecord(r, (wait_s,) * n, (iter_s,) * n, tuple(epochs or [0] * n), (10,) * n,
                            warmup, extra={"batches_per_epoch": 10}) for r in range(ranks))
    return RunResult(RunSpec(JOB, mode, res), status, ranks=recs, dataset={"files": 100})


@pytest.mark.parametrize("g_iter,c_iter,d_iter,prep_pct,fetch_pct,word", [
    (0.1, 0.1, 0.1, 0.0, 0.0, "compute-bound"),       # no stall at all
    (0.1, 0.2, 0.2, 50.0, 0.0, "likely highly prep-bound"),  # cached twice as slow
    (0.1, 0.1, 0.4, 0.0, 75.0, "likely highly fetch-bound"),
    (0.1, 0.11, 0.12, 100 * 0.01 / 0.12, 100 * 0.01 / 0.12, "likely prep-bound"),
])
def test_breakdown(g_iter, c_iter, d_iter, prep_pct, fetch_pct, word):
    runs = [make_run(Mode.SYNTHETIC, g_iter), make_run(Mode.CACHED, c_iter),
            make_run(Mode.DISK, d_iter, cache="0")]
    (b,) = breakdowns(runs)
    n = 100  # 10 batches of 10 samples
    assert b.samples_per_epoch == n
    assert b.compute_s == pytest.approx(n / (10 / g_iter))
    assert b.total_s == pytest.approx(n / (10 / d_iter))
    assert b.prep_stall_pct == pytest.approx(prep_pct)
    assert b.fetch_stall_pct == pytest.approx(fetch_pct)
    assert verdict_text(b.verdict).startswith(word)


def test_two_ranks_are_combined():
    r = run_rate(make_run(Mode.SYNTHETIC, 0.1, ranks=2))
    assert r.rate_sps == pytest.approx(2 * 10 / 0.1)
    assert r.measured_samples == 2 * 18 * 10 and r.samples_per_epoch == 200


def test_disk_steady_state_excludes_the_cold_first_epoch():
    run = make_run(Mode.DISK, 0.1, n=20, warmup=0, epochs=[0] * 10 + [1] * 10, cache="50%")
    run = RunResult(run.spec, "ok", ranks=(RankRecord(
        0, (0.0,) * 20, (0.5,) * 10 + (0.1,) * 10, tuple([0] * 10 + [1] * 10), (10,) * 20, 0,
        extra={"batches_per_epoch": 10}),))
    r = run_rate(run)
    assert r.rate_sps == pytest.approx(100.0) and r.steady_epochs == 1
    assert r.epoch1_s == pytest.approx(5.0) and r.epoch1_rate_sps == pytest.approx(20.0)


def test_failed_run_is_reported_not_rated():
    runs = [make_run(Mode.SYNTHETIC, 0.1), make_run(Mode.CACHED, 0.1, status="failed")]
    doc = summarize(runs)
    assert doc.failed_runs[0].run_id == "cached-cpus1"
    (cfg,) = doc.configs
    assert cfg.prep_stall_s is None and cfg.modes["cached"].rate_sps is None


def stall(pct: float, half: float) -> StallInterval:
    """A stall of `pct`% ± `half` of a 10 s epoch."""
    lo, hi = pct - half, pct + half
    sig = Significance.LIKELY if lo > 0 else \
        Significance.INVERTED if hi < 0 else Significance.WITHIN_NOISE
    return StallInterval(pct / 10, lo / 10, hi / 10, pct, lo, hi, sig)


@pytest.mark.parametrize("prep,fetch,text", [
    ((41, 3), (2, 1), "likely highly prep-bound: 41% ±3 of time is prep stall"),
    ((10, 2), (12, 2), "likely fetch-bound: 12% ±2 of time is fetch stall, 10% ±2 prep stall"),
    ((2, 1), (2, 1), "compute-bound: stalls are 4% of time"),
    ((1, 2), (0, 1), "compute-bound: stalls are 1% of time (within noise)"),
    ((15, 20), (2, 1), "within noise: prep stall 15% ±20 cannot be told from 0; repeat the runs "
                       "(--repeats, --target-ci)"),
    ((30, 3), (12, 20), "likely highly prep-bound: 30% ±3 of time is prep stall"),
    (None, None, "unknown: no synthetic and cached runs to compare"),
])
def test_verdict(prep, fetch, text):
    """The typed verdict, worded by the report: the sentence the table has always printed."""
    v = verdict(prep and stall(*prep), fetch and stall(*fetch))
    assert verdict_text(v) == text
    assert v.bound is bound(prep and stall(*prep), fetch and stall(*fetch))


@pytest.mark.parametrize("dataset_bytes,cache,warned", [
    (10 << 20, "0", True),     # 10 MiB fits in the 32 MiB margin
    (500 << 20, "0", False),
    (500 << 20, "none", False),
])
def test_warns_when_the_cache_budget_cannot_bind(dataset_bytes, cache, warned):
    disk = make_run(Mode.DISK, 0.1, cache=cache)
    disk = RunResult(disk.spec, "ok", ranks=disk.ranks, dataset={"bytes": dataset_bytes},
                     enforced={"memory_margin_bytes": 32 << 20} if cache != "none" else {})
    (b,) = breakdowns([make_run(Mode.SYNTHETIC, 0.1), make_run(Mode.CACHED, 0.1), disk])
    unbound = [n for n in b.notes if isinstance(n, CacheUnbound)]
    assert unbound == ([CacheUnbound("0B", dataset_bytes, 32 << 20)] if warned else [])
    assert all("does not bind: the dataset (10 MiB) fits in the budget plus the memory-limit "
               "margin" in note_text(n) for n in unbound)
