"""A validation pass over the training files, at each epoch's end, pays the reads its misses
make (`pipeline.pass_reads_s`), in the pass's own workers.

The independent reasons, worked out by hand:
- one worker (or the main process) with a core of its own reads its files one after
  another: each miss costs it its wait and then its CPU, nothing overlaps, so the pass is
  longer by every miss's wait plus every byte's CPU;
- W workers on at least W cores each take 1/W of the misses and pay them in turn: the
  pass is longer by (wait + CPU) / W (W = 1: the case above);
- on k = min(W, cores) cores the CPU alone takes CPU / k at least; and a worker's wait
  can at most add itself over the workers: never more than CPU / k + wait / W.
- in the pipeline, the work between epochs follows the epoch's last step with the
  workers idle (tests/test_epoch_end.py): a pass that reads N missed files of B bytes on
  one worker, unthrottled, ends each epoch later by end + N x (latency + B x CPU/byte).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsanalyze.whatif.pipeline import Pipeline, pass_reads_s, simulate

BATCHES, BATCH, EPOCHS = 10, 3, 3
seconds = st.floats(0.0, 5.0)


@settings(max_examples=300, deadline=None)
@given(pass_s=st.floats(0.01, 5.0), cpu_s=seconds, wait_s=seconds,
       workers=st.integers(0, 8), cores=st.floats(0.25, 8.0))
def test_a_pass_pays_its_reads_between_its_cpu_and_its_serial_waits(
        pass_s, cpu_s, wait_s, workers, cores):
    extra_s = pass_reads_s(pass_s, cpu_s, wait_s, workers, cores)
    lanes = max(workers, 1)
    k = min(lanes, cores)
    tol = 1e-9 * (1 + pass_s + cpu_s + wait_s)
    assert cpu_s / k - tol <= extra_s <= cpu_s / k + wait_s / lanes + tol
    if lanes <= cores:
        assert extra_s == pytest.approx((cpu_s + wait_s) / lanes, abs=tol)


def test_workers_past_the_cores_hide_the_waits_behind_each_others_work():
    """Two workers on one core, a pass of 1 s and waits of 0.3 s in all: a worker waits
    while the other works, so the pass is longer by its CPU alone; with waits of 3 s (more
    than the pass's work) by half of work and waits, less the pass: (1 + 0.2 + 3) / 2 - 1."""
    assert pass_reads_s(1.0, 0.2, 0.3, 2, 1.0) == pytest.approx(0.2)
    assert pass_reads_s(1.0, 0.2, 3.0, 2, 1.0) == pytest.approx(1.1)


@settings(max_examples=30, deadline=None)
@given(end_s=st.floats(0.01, 1.0), latency_s=st.floats(0.0, 0.005),
       cpu_per_byte=st.floats(0.0, 2e-8), share=st.sampled_from([0.5, 1.0]))
def test_one_worker_ends_each_epoch_later_by_its_passes_waits_and_cpu(
        end_s, latency_s, cpu_per_byte, share):
    sample_bytes = 20_000.0
    files = BATCHES * BATCH
    base = Pipeline(ranks=1, workers=1, batch_size=BATCH, cpus=2, step_s=0.01,
                    main_cpu_s=0.001, prep_cpu_s=0.004, read_bps=1e12,
                    miss_cpu_s_per_byte=cpu_per_byte, read_latency_s=latency_s)
    misses = [np.full(files, sample_bytes) for _ in range(EPOCHS)]
    plain = simulate(base, misses, BATCHES, misses)
    ended = simulate(replace(base, epoch_end_s=end_s, reread_share=share,
                             epoch_read_bytes=files * sample_bytes,
                             epoch_read_misses=share * files), misses, BATCHES, misses)
    work_s = end_s + share * files * (latency_s + sample_bytes * cpu_per_byte)
    for i, t in enumerate(plain.iter_s):
        last = i + 1 == len(plain.epoch) or plain.epoch[i + 1] != plain.epoch[i]
        assert ended.iter_s[i] == pytest.approx(t + work_s * last, rel=1e-9, abs=1e-9)
