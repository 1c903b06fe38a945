"""What the fit reads off a run besides its timings: the page cache it had in its steady
epochs and its dataset's file sizes, page-rounded as the page cache holds them."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np

from dsanalyze.analysis.window import steady_window
from dsanalyze.errors import ConfigError
from dsanalyze.records import RunResult
from dsanalyze.whatif import cachesim
from dsanalyze.whatif.model import Param
from dsanalyze.whatif.provenance import SampleSizes, Sizes


def effective_cache(result: RunResult, dataset_bytes: int) -> float | None:
    """Page cache the run had, averaged over its steady epochs (`window.steady_window`, the
    iterations the rate counts): the dataset's resident bytes the harness's limiter sampled
    (`io.residency`), else (runs from before it) the cgroup's file cache less shared memory
    (DataLoader batches in /dev/shm, which v1 `cache` and v2 `file` count). Only fit runs
    are read this way. None when not recorded.
    """
    window = steady_window(result)
    span = window.span_unix_s() if window is not None else None
    if span is None:
        return None
    lo, hi = span
    held = result.io.residency  # the dataset's own pages, where the harness held the budget
    if held is not None:
        values = [b for t, b in zip(held.sample_unix_s, held.sample_bytes) if lo <= t <= hi]
        return float(statistics.fmean(values)) if values else None
    values = [m["cache_bytes"] - m.get("shmem_bytes", 0) for m in result.monitor
              if "cache_bytes" in m and lo <= m.get("unix_s", 0.0) <= hi]
    return float(statistics.fmean(values)) if values else None


def file_sizes(result: RunResult, sizes: Sequence[int] | None) -> tuple[tuple[int, ...], Param]:
    """Page-rounded file sizes: given (scanned by the caller), recorded quantiles, or the mean."""
    ds = result.dataset
    n = ds.num_files
    if sizes:
        source, files = Sizes.SCANNED, len(sizes)
    elif ds.file_bytes_quantiles and n:
        sizes = cachesim.sizes_from_quantiles(list(ds.file_bytes_quantiles), n).tolist()
        source, files = Sizes.QUANTILES, 0
    elif n and ds.total_bytes:
        sizes = [int(ds.total_bytes / n)] * n
        source, files = Sizes.MEAN, 0
    else:
        raise ConfigError(f"run {result.run_id} records no dataset size: re-run it with harness.py")
    if not any(sizes):
        raise ConfigError(f"the dataset's {len(sizes)} file(s) hold no bytes: the what-if "
                          "weighs each sample's reads and prep by its file's size; profile "
                          "the files the job really reads")
    rounded = tuple(int(x) for x in cachesim.page_rounded(sizes))
    q = np.percentile(sizes, [5, 50, 95]).astype(int).tolist()
    how = SampleSizes(source, files, ds.root, q[0], q[1], q[2])
    return rounded, Param("sample_bytes", float(np.mean(sizes)), "B", (result.run_id,), how)
