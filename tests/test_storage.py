"""The storage probe on real files: cold reads of the dataset, pages evicted again after."""

from __future__ import annotations

from pathlib import Path

from dsanalyze.dataset import scan_dataset
from dsanalyze.resources import pagecache, storage


def test_probe_reads_cold_files_and_leaves_them_evicted(small_dataset: Path) -> None:
    files = scan_dataset(small_dataset).files
    pagecache.warm(files)  # resident first: the probe must evict before it times
    got = storage.probe(files, n_files=16)
    assert got["files"] == 16 and got["resident_bytes"] == 0
    sample = storage._sample(files, 16)
    assert got["bytes"] == sum(Path(p).stat().st_size for p in sample[8:])
    # any real device: faster than 1 MB/s, a request under a second
    assert got["read_bps"] > 1e6 and 0 <= got["latency_s"] < 1.0
    assert got["latency_s"] > 0 or got["latency_in_bandwidth"]
    assert pagecache.resident_bytes(sample) <= 0.05 * sum(Path(p).stat().st_size for p in sample)


def test_every_disk_run_records_the_device(small_dataset: Path) -> None:
    """launch.prepare_cache probes the device before a disk run (and leaves the dataset
    evicted); a cached run warms and records no probe."""
    from dsanalyze import launch
    from dsanalyze.config import Job, Mode, Resources, RunSpec

    dataset = scan_dataset(small_dataset)
    job = Job(data_dir=str(small_dataset))
    disk = launch.prepare_cache(RunSpec(job, Mode.DISK, Resources()), dataset)
    assert disk["storage_device"]["read_bps"] > 1e6 and disk["storage_device"]["files"] > 0
    assert disk["resident_before_bytes"] <= 0.01 * dataset.total_bytes
    cached = launch.prepare_cache(RunSpec(job, Mode.CACHED, Resources()), dataset)
    assert "storage_device" not in cached
