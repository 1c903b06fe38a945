"""A throttle's budget, banked while no read is in flight (blk-throttle's slice).

The independent reason: blk-throttle lets a cgroup dispatch, at any moment, the bytes
its rate allows since its slice began (rounded up to a whole slice), less what it
dispatched. A reader that reads B bytes, then works c seconds on the CPU, then reads
again therefore reads the first c (at most one slice s) of its next B from the budget
it left unused: each sample takes T = max(c, B / bw + max(0, c - s)), where a reader
that could not bank would take B / bw + c. The simulation must give T for any B, c, bw
and s; the kernel must too, which the last test measures through a real cgroup.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsanalyze.resources import cgroups, pagecache, storage
from dsanalyze.whatif.pipeline import Pipeline, simulate

SAMPLES = 120


def per_sample_s(nbytes: float, cpu_s: float, bps: float, credit_s: float) -> float:
    """One worker, one sample a batch: the steady time per sample the simulation gives
    where its reads may bank `credit_s` of the throttle."""
    p = Pipeline(ranks=1, workers=1, batch_size=1, cpus=1, step_s=0.0, main_cpu_s=0.0,
                 prep_cpu_s=0.0, read_bps=bps, miss_cpu_s_per_byte=cpu_s / nbytes,
                 read_credit_bytes=bps * credit_s)
    tl = simulate(p, [np.full(SAMPLES, float(nbytes))], SAMPLES)
    return 1 / tl.rate_sps(first=SAMPLES // 4)


def law_s(nbytes: float, cpu_s: float, bps: float, slice_s: float) -> float:
    return max(cpu_s, nbytes / bps + max(0.0, cpu_s - slice_s))


@settings(max_examples=40, deadline=None)
@given(nbytes=st.floats(4e3, 4e6), cpu_ms=st.floats(0.1, 300.0), bps=st.floats(1e5, 1e8),
       slice_ms=st.sampled_from([20.0, 100.0]))
def test_a_reader_banks_the_budget_it_left_unused_up_to_one_slice(nbytes, cpu_ms, bps,
                                                                  slice_ms):
    cpu_s, slice_s = cpu_ms / 1000, slice_ms / 1000
    assert per_sample_s(nbytes, cpu_s, bps, slice_s) == pytest.approx(
        law_s(nbytes, cpu_s, bps, slice_s), rel=0.01)
    # a device, not a throttle: nothing is banked
    assert per_sample_s(nbytes, cpu_s, bps, 0.0) == pytest.approx(nbytes / bps + cpu_s,
                                                                  rel=0.01)


@settings(max_examples=15, deadline=None)
@given(workers=st.integers(2, 6), cpu_ms=st.floats(0.1, 20.0))
def test_readers_that_keep_the_throttle_busy_get_its_rate_and_no_more(workers, cpu_ms):
    """Several workers keep a read in flight at all times: nothing is left unused, and the
    rate is the throttle's, banked or not (the budget never exceeds the rate over time)."""
    nbytes, bps = 64e3, 2e6
    rates = []
    for credit_s in (0.0, 0.02):
        p = Pipeline(ranks=1, workers=workers, batch_size=1, cpus=workers, step_s=0.0,
                     main_cpu_s=0.0, prep_cpu_s=0.0, read_bps=bps,
                     miss_cpu_s_per_byte=cpu_ms / 1000 / nbytes,
                     read_credit_bytes=bps * credit_s)
        tl = simulate(p, [np.full(SAMPLES, nbytes)], SAMPLES)
        rates.append(tl.rate_sps(first=SAMPLES // 4))
    assert rates[1] <= bps / nbytes * 1.01
    assert rates[0] == pytest.approx(rates[1], rel=0.02)


READER = """
import os, sys, time
paths, cpu_s = sys.argv[2:], float(sys.argv[1])
def spin(s):
    end = time.perf_counter() + s
    while time.perf_counter() < end:
        pass
start = time.perf_counter()
for p in paths:
    with open(p, "rb", buffering=0) as f:
        while f.read(1 << 20):
            pass
    spin(cpu_s)
print(len(paths) / (time.perf_counter() - start))
"""


@pytest.mark.whole_machine
def test_the_kernel_s_throttle_banks_a_reader_s_unused_budget(tmp_path: Path) -> None:
    """A real blk-throttle (cgroup v1 blkio or v2 io.max) on the disk under tmp_path, a
    reader of cold 40 KB files that spins 8 ms on the CPU after each: at 2 MB/s a file is
    20 ms of the throttle, so the reader gets the throttle's rate (the law above, 50 files
    a second), not the 36 a reader that could not bank would get."""
    device = cgroups.whole_disk(tmp_path)
    hierarchy = cgroups.probe()
    if device is None or not hierarchy.usable:
        pytest.skip("no block device under tmp_path, or no writable cgroup hierarchy")
    slice_s = storage.throttle_slice_s(str(tmp_path))
    assert slice_s in (0.02, 0.1)
    nbytes, bps, cpu_s = 40_000, 2_000_000, 0.008
    paths = []
    for i in range(60):
        path = tmp_path / f"f{i:03d}"
        path.write_bytes(os.urandom(nbytes))
        paths.append(str(path))
    pagecache.evict(paths)
    with cgroups.RunCgroup.create("credit-test", cgroups.Limits(read_bps=bps, device=device),
                                  hierarchy) as cg:
        out = subprocess.run([*cg.join_argv(), sys.executable, "-c", READER, str(cpu_s),
                              *paths], check=True, capture_output=True, text=True, timeout=60)
    rate = float(out.stdout.strip())
    banked = 1 / law_s(nbytes, cpu_s, bps, slice_s)
    unbanked = 1 / (nbytes / bps + cpu_s)
    assert rate == pytest.approx(banked, rel=0.12)
    assert rate > 1.15 * unbanked
