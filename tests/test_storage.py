"""The storage probe on real files: cold reads of the dataset, pages evicted again after."""

from __future__ import annotations

from pathlib import Path

from dsanalyze.jobs.datasets import scan_dataset
from dsanalyze.resources import pagecache, storage


def test_probe_reads_cold_files_and_leaves_them_evicted(small_dataset: Path) -> None:
    files = scan_dataset(small_dataset).files
    pagecache.warm(files)  # resident first: the probe must evict before it times
    got = storage.probe(files, n_files=16)
    assert got["files"] == 16 and got["resident_bytes"] == 0
    sample = storage._sample(files, 16)
    assert got["bytes"] == sum(Path(p).stat().st_size for p in sample[8:])
    # any real device: faster than 1 MB/s, a request under a second
    assert got["read_bps"] > 1e6 and 0 < got["latency_s"] < 1.0
    assert pagecache.resident_bytes(sample) <= 0.05 * sum(Path(p).stat().st_size for p in sample)
