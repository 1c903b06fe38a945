"""The read amplification: storage bytes per byte the training loader missed.

whatif_caches (tests/test_whatif.py's docstring) holds real disk runs of the built-in job,
which reads each file once per sample: 3 epochs at cache 0 (two repeats), 25% and 100%.
A job with a validation pass over its training files (the scripts bench's Lightning
script) reads each file twice per epoch; its runs are those runs with the cgroup's
counter doubled, the one number the validation pass changes in what the fit reads.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsanalyze import store
from dsanalyze.config import CacheBudget, Mode
from dsanalyze.report.params import how_text
from dsanalyze.whatif import api as whatif
from dsanalyze.whatif import bounds, pipeline
from dsanalyze.whatif.assumptions import Assume
from dsanalyze.whatif.fit_reads import simulated_reads

CASE = Path(__file__).parent / "data" / "whatif_caches"


def _param(model, name):
    return next(p for p in model.params if p.name == name)


def _counted(runs, factor: float):
    """The runs with the cgroup's read counter times `factor`."""
    return [replace(r, io=replace(r.io, read_bytes=int(r.io.read_bytes * factor)))
            if r.mode is Mode.DISK else r for r in runs]


@settings(max_examples=20, deadline=None)
@given(st.floats(min_value=0.0, max_value=3.0))
def test_a_throttle_carries_the_rereads_too(reread: float) -> None:
    """Reads bound by the bandwidth B, every sample missing its s bytes and reading them
    (1 + r) times: B / ((1 + r) s) samples per second."""
    bps, size, batch = 1e6, 1e4, 4
    p = pipeline.Pipeline(1, 2, batch, 2, 0.0, 0.0, 1e-6, bps, reread_share=reread)
    tl = pipeline.simulate(p, [np.full(60 * batch, size)], 60)
    assert tl.rate_sps(first=6) == pytest.approx(bps / ((1 + reread) * size), rel=0.02)


def test_the_built_in_job_reads_each_file_once() -> None:
    model = whatif.fit(store.load_runs(CASE))
    p = _param(model, "read_amplification")
    # the two cache-0 runs only: the 25% and 100% budgets hold too much to tell
    assert set(p.runs) == {"disk-cpus1-cache0B-bwnone", "disk-cpus1-cache0B-bwnone-r2"}
    assert model.read_amplification == pytest.approx(1.0, abs=0.03)


def test_a_validation_pass_doubles_the_bytes_a_throttle_carries() -> None:
    runs = store.load_runs(CASE)
    once, twice = whatif.fit(runs), whatif.fit(_counted(runs, 2.0))
    assert twice.read_amplification == pytest.approx(2 * once.read_amplification, rel=0.02)
    throttled = whatif.Config.of(1, CacheBudget.parse("0"), storage_read_bps=4 << 20)
    slow, fast = (whatif.predict(m, throttled).rate_sps for m in (twice, once))
    # 4 MB/s for samples of 530 KB: the throttle binds; twice the bytes, half the rate
    assert slow == pytest.approx(fast / 2, rel=0.1)
    # the simulated reads the cache check compares with the counter follow it
    disk = next(r for r in _counted(runs, 2.0) if r.run_id == "disk-cpus1-cache0B-bwnone")
    check = next(c for c in whatif.cache_check(twice, [disk]))
    assert check.predicted_read_bytes == pytest.approx(disk.io.read_bytes, rel=0.05)
    assert simulated_reads(twice, disk)[0] == pytest.approx(disk.io.read_bytes / 2, rel=0.05)


@pytest.mark.parametrize("cache,untested", [("0", False), ("50%", True), (None, False)])
def test_a_cache_that_holds_part_of_the_data_rests_on_the_rereads_hitting(
        cache: str | None, untested: bool) -> None:
    """Measured without a page cache; at a budget that holds half the dataset the re-reads'
    hits are the model's rule, untested; with no limit the steady epochs read nothing."""
    model = whatif.fit(_counted(store.load_runs(CASE), 2.0))
    cfg = whatif.Config.of(1, CacheBudget.parse(cache, model.dataset_bytes) if cache else None)
    kinds = [a.kind for a in whatif.predict(model, cfg).untested]
    assert (Assume.REREADS in kinds) == untested


def test_a_counter_far_beyond_the_misses_is_dropped_and_its_runs_named() -> None:
    model = whatif.fit(_counted(store.load_runs(CASE), 50.0))
    p = _param(model, "read_amplification")
    assert model.read_amplification == p.value == 1.0
    assert p.how.dropped.value == pytest.approx(50.0, rel=0.05)
    assert "disk-cpus1-cache0B-bwnone-r2" in p.how.dropped.runs
    assert "dropped" in how_text(p.how)  # and said so, with the bound's reason
    assert not bounds.READ_AMPLIFICATION.holds(50.0)
