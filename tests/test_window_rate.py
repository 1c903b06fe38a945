"""A run's steady rate counts each place in the epoch once (`window.per_epoch`): a window whose
first epoch lost its first places to the warm-up still pays every epoch's start once.

The runs are made by hand: 10 samples an iteration, epochs of B iterations, an iteration of
`step` seconds and `start` seconds more at each epoch's first (the workers forked again, the
prefetch queue filled again).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsanalyze.analysis.runrate import run_rate
from dsanalyze.analysis.stalls import breakdowns
from dsanalyze.analysis.window import per_epoch
from dsanalyze.config import CacheBudget, Job, Mode, Resources, RunSpec
from dsanalyze.records import RankRecord, RunResult

JOB = Job(data_dir="/d", batch_size=10)


def run(mode: Mode, epochs: int, batches: int, step: float, start: float,
        warmup: int) -> RunResult:
    iters = [step + (start if i % batches == 0 else 0.0) for i in range(epochs * batches)]
    res = Resources(1, CacheBudget.parse("none")) if mode is Mode.DISK else Resources(1)
    rank = RankRecord(0, (0.0,) * len(iters), tuple(iters),
                      tuple(i // batches for i in range(len(iters))), (10,) * len(iters),
                      warmup, extra={"batches_per_epoch": batches})
    return RunResult(RunSpec(JOB, mode, res), "ok", ranks=(rank,), dataset={"files": 10 * batches})


@pytest.mark.parametrize("epochs,warmup", [(2, 5), (3, 5), (2, 1), (1, 5)])
def test_every_epochs_start_counts_once_an_epoch(epochs, warmup):
    # 32 batches of 40 ms and 0.1 s more at each epoch's start: an epoch of 1.38 s, whatever
    # the warm-up took from the first epoch (a one-epoch window has no later start to count)
    r = run_rate(run(Mode.CACHED, epochs, 32, 0.04, 0.1, warmup))
    epoch_s = 32 * 0.04 + (0.1 if epochs > 1 else 0.0)
    assert r.rate_sps == pytest.approx(320 / epoch_s)


def test_a_cached_and_a_disk_run_of_one_loop_have_no_fetch_stall_between_them():
    """The demo's layout: a cached run of 2 epochs after 5 warm-up iterations and a disk run's
    second epoch, the same loop in both. Counted plainly, the cached window paid the second
    epoch's start once in 59 iterations, the disk window once in 32: a fetch stall of 2.8%
    of the epoch that was the window's shape, not the storage."""
    (b,) = breakdowns([run(Mode.SYNTHETIC, 2, 32, 0.04, 0.0, 5),
                       run(Mode.CACHED, 2, 32, 0.045, 0.1, 5),
                       run(Mode.DISK, 2, 32, 0.045, 0.1, 0)])
    assert b.fetch_stall_s == pytest.approx(0.0, abs=1e-9)
    assert b.fetch_stall_significance == "within_noise"
    # prep: the 5 ms an iteration and the epoch's start, of an epoch of 1.54 s
    assert b.prep_stall_s == pytest.approx(32 * 0.005 + 0.1)


@given(st.integers(1, 5), st.integers(2, 12),
       st.lists(st.floats(0.001, 1.0), min_size=60, max_size=60))
def test_whole_epochs_give_the_plain_mean_epoch(epochs, batches, times):
    """Over whole epochs (every place held as often), an epoch's sum is the plain sum over
    the window divided by the epochs."""
    n = epochs * batches
    values = times[:n] if n <= len(times) else (times * (n // len(times) + 1))[:n]
    epoch = [i // batches for i in range(n)]
    assert per_epoch(values, epoch, list(range(n))) == pytest.approx(sum(values) / epochs)


@given(st.integers(2, 5), st.integers(2, 12), st.data())
def test_identical_epochs_give_one_epoch_whatever_the_window_leaves_out(epochs, batches, data):
    """Epochs alike place by place: an epoch's sum is one epoch's, from any window that holds
    every place at least once (a warm-up cut from the first epoch, the last cut short)."""
    one = data.draw(st.lists(st.floats(0.001, 1.0), min_size=batches, max_size=batches))
    n = epochs * batches
    warmup = data.draw(st.integers(0, batches - 1))
    cut = data.draw(st.integers(0, batches - 1 - warmup))
    chosen = list(range(warmup, n - cut))
    values = [one[i % batches] for i in range(n)]
    epoch = [i // batches for i in range(n)]
    assert per_epoch(values, epoch, chosen) == pytest.approx(sum(one))
