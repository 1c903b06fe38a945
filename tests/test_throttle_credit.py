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

from dsanalyze.errors import ResourceError
from dsanalyze.resources import cgroups, pagecache, storage
from dsanalyze.whatif.heldout import HeldOut
from dsanalyze.whatif.pipeline import Pipeline, simulate

SAMPLES = 400
STEADY = 50  # the last iterations: the budget of the run's first slice long spent
LONG = 2000  # samples a rate over a whole run is taken on


def steady_s(tl) -> float:
    """The median of the last iterations' times (one sample each)."""
    return float(np.median(tl.iter_s[-STEADY:])) / tl.samples_per_iter


def per_sample_s(nbytes: float, cpu_s: float, bps: float, credit_s: float) -> float:
    """One worker, one sample a batch: the steady time per sample the simulation gives
    where its reads may bank `credit_s` of the throttle."""
    p = Pipeline(ranks=1, workers=1, batch_size=1, cpus=1, step_s=0.0, main_cpu_s=0.0,
                 prep_cpu_s=0.0, read_bps=bps, miss_cpu_s_per_byte=cpu_s / nbytes,
                 read_credit_bytes=bps * credit_s)
    return steady_s(simulate(p, [np.full(SAMPLES, float(nbytes))], SAMPLES))


def law_s(nbytes: float, cpu_s: float, bps: float, slice_s: float) -> float:
    return max(cpu_s, nbytes / bps + max(0.0, cpu_s - slice_s))


@settings(max_examples=40, deadline=None)
@given(nbytes=st.floats(4e3, 4e6), read_ms=st.floats(1.0, 1000.0),
       cpu_ms=st.floats(0.1, 300.0), slice_ms=st.sampled_from([20.0, 100.0]))
def test_a_reader_banks_the_budget_it_left_unused_up_to_one_slice(nbytes, read_ms, cpu_ms,
                                                                  slice_ms):
    """The run's first slice starts with its budget (the kernel rounds the slice up): it is
    spent by the last iterations, within slice / (SAMPLES - STEADY) of a sample's time."""
    bps, cpu_s, slice_s = nbytes / (read_ms / 1000), cpu_ms / 1000, slice_ms / 1000
    assert per_sample_s(nbytes, cpu_s, bps, slice_s) == pytest.approx(
        law_s(nbytes, cpu_s, bps, slice_s), rel=0.01, abs=slice_s / (SAMPLES - STEADY))
    # a device, not a throttle: nothing is banked
    assert per_sample_s(nbytes, cpu_s, bps, 0.0) == pytest.approx(nbytes / bps + cpu_s,
                                                                  rel=0.01)


@settings(max_examples=15, deadline=None)
@given(workers=st.integers(1, 6), cpu_ms=st.floats(0.1, 60.0))
def test_a_banked_budget_never_reads_faster_than_the_throttle(workers, cpu_ms):
    """Several workers: the budget they bank grows only while none reads, at the
    throttle's rate, so their rate stays the throttle's at most; and it is never slower
    than without it."""
    nbytes, bps = 64e3, 2e6
    rates = []
    for credit_s in (0.0, 0.02):
        p = Pipeline(ranks=1, workers=workers, batch_size=1, cpus=workers, step_s=0.0,
                     main_cpu_s=0.0, prep_cpu_s=0.0, read_bps=bps,
                     miss_cpu_s_per_byte=cpu_ms / 1000 / nbytes,
                     read_credit_bytes=bps * credit_s)
        tl = simulate(p, [np.full(LONG, nbytes)], LONG)
        rates.append(LONG / sum(tl.iter_s))  # the first slice's budget: 1 sample in 2000
    assert rates[1] <= bps / nbytes * 1.002
    assert rates[1] >= rates[0] * 0.99


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
@pytest.mark.parametrize("cpu_s", [0.008, 0.045])
def test_the_kernel_s_throttle_banks_a_reader_s_unused_budget(tmp_path: Path,
                                                              cpu_s: float) -> None:
    """A real blk-throttle (cgroup v1 blkio or v2 io.max) on the disk under tmp_path, a
    reader of cold 40 KB files that spins on the CPU after each: at 2 MB/s a file is 20 ms
    of the throttle. Spinning 8 ms, under a slice, the reader gets the throttle's rate (50
    files a second), not the 36 a reader that could not bank would get; spinning 45 ms,
    over a slice, it banks one slice (20 ms on a non-rotational disk: 22.2 a second,
    against 15.4 unbanked)."""
    device = cgroups.whole_disk(tmp_path)
    if device is None:
        pytest.skip("no block device under tmp_path to throttle")
    try:
        hierarchy = cgroups.probe()
    except ResourceError as e:
        pytest.skip(f"no writable cgroup hierarchy: {e}")
    slice_s = storage.throttle_slice_s(str(tmp_path))
    assert slice_s in (0.02, 0.1)
    nbytes, bps = 40_000, 2_000_000
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
    assert rate > 1.2 * unbanked



def _with_slices(runs: list, slices: dict):
    """The runs, each disk run's storage probe recording its CPU count's slice in `slices`
    (absent: nothing, as a run before the slice's probe)."""
    from dataclasses import replace
    out = []
    for r in runs:
        if r.io.storage_device:
            device = {k: v for k, v in r.io.storage_device.items() if k != "throttle_slice_s"}
            if (s := slices.get(HeldOut.of(r).cpus)) is not None:
                device["throttle_slice_s"] = s
            state = {**r.io.cache_state, "storage_device": device}
            r = replace(r, io=replace(r.io, cache_state=state))
        out.append(r)
    return out


@pytest.mark.parametrize("slices, expect_s, reason", [
    ({1: 0.1}, 0.1, "throttle_slice"),  # a rotational disk's, as the 1-CPU runs' probes read it
    ({1: 0.02, 2: 0.1}, 0.1, "throttle_slice"),  # the longest a probe read: the most banked
    ({}, 0.02, "throttle_slice_default"),  # runs before the probe: the kernel's default
])
def test_the_fit_takes_the_throttle_s_slice_the_storage_probe_read(slices, expect_s, reason):
    from dsanalyze import store
    from dsanalyze.whatif import api as whatif

    runs = _with_slices(store.load_runs(Path(__file__).parent / "data" / "script_lightning"),
                        slices)
    model = whatif.fit(runs)
    param = next(p for p in model.params if p.name == "throttle_slice_s")
    assert model.throttle_slice_s == param.value == expect_s
    assert param.how.reason.value == reason
    # the runs named are those whose probe read it: none where the default was taken
    assert set(param.runs) == {r.run_id for r in runs if r.io.storage_device
                               and HeldOut.of(r).cpus in slices}
