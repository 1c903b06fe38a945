"""A step on the CPU in the pipeline simulation: its threads meet at barriers.

The independent reason: a step of T threads measured alone at C cores takes t; beside k
processes that never stop (workers with far more prep than the step), each core holds
one of its threads and ceil(k / C) of the others, so a thread runs 1 / (1 + ceil(k / C))
of the time and the step, at its slowest thread's pace, takes t x (1 + ceil(k / C)).
Alone (no busy worker) it takes t. These hold for any t, C and k.
"""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsanalyze.whatif.pipeline import Pipeline, simulate

BATCHES, BATCH = 80, 2  # many batches a worker: none runs out of work mid-run


def step_times(cpus: int, workers: int, step_s: float, prep_s: float) -> list[float]:
    """Each steady iteration's time beyond its wait (the step: the main process has no CPU
    work of its own here)."""
    p = Pipeline(ranks=1, workers=workers, batch_size=BATCH, cpus=cpus, step_s=0.0,
                 main_cpu_s=0.0, prep_cpu_s=prep_s, read_bps=None, gang_step_s=step_s,
                 gang_threads=cpus)
    tl = simulate(p, [np.zeros(BATCHES * BATCH)], BATCHES)
    return [it - w for it, w in zip(tl.iter_s[2:40], tl.wait_s[2:40], strict=True)]


@settings(max_examples=30, deadline=None)
@given(cpus=st.sampled_from([1, 2, 4, 8]), workers=st.integers(1, 9),
       step_s=st.floats(0.01, 0.2))
def test_beside_busy_workers_the_step_runs_at_its_slowest_thread_s_pace(cpus, workers,
                                                                       step_s):
    # each sample's prep a hundred steps: every worker is busy through every step
    times = step_times(cpus, workers, step_s, prep_s=100 * step_s)
    expected = step_s * (1 + math.ceil(workers / cpus))
    assert statistics.median(times) == pytest.approx(expected, rel=1e-3)


@settings(max_examples=20, deadline=None)
@given(cpus=st.sampled_from([1, 2, 4]), step_s=st.floats(0.01, 0.2))
def test_alone_the_step_takes_its_measured_time(cpus, step_s):
    # a sample's prep a thousandth of the step: the worker is busy for a batch's 2 ms of
    # the step's 1000 (at most 1% slower), then idle
    times = step_times(cpus, 1, step_s, prep_s=step_s / 1000)
    assert statistics.median(times) == pytest.approx(step_s, rel=0.01)
