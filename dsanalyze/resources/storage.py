"""The storage device under the dataset: read bandwidth and per-request latency, cold.

`probe` is called by the harness before every disk run (from the harness's
own process, so no throttle applies): it evicts a deterministic sample of the
dataset's own files, then

- times a 4 KiB `pread` at the start of each file of one half of the sample:
  the per-request latency (the median), a cold seek and the first page;
- reads each file of the other half whole (readahead as a loader gets it):
  the bandwidth is their bytes over their time less one latency per file.

It also records blk-throttle's slice on that disk (`throttle_slice_s`): how long
a throttle's unused budget stays the readers'. The sample's pages are evicted
again afterwards. Where the files are so small that one latency per file is more
than half their read time, the two cannot be told apart: the latency is then
reported as 0 and left inside the bandwidth. The what-if model uses these as
"storage as measured": an unthrottled disk is this device, never infinitely
fast, and a throttle is min(throttle, device). The bandwidth is that of one
reader; parallel readers may get more from a device with several queues (an
assumption the model states).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dsanalyze.resources import cgroups, pagecache

PROBE_FILES = 32  # files read per probe (half for the latency, half for the bandwidth)
LATENCY_READ_BYTES = 4096


def _sample(files: Sequence[str], n: int) -> list[str]:
    """Every k-th file (deterministic, spread over the classes)."""
    step = max(1, len(files) // n)
    return list(files[::step][:n])


def _latency_s(path: str) -> float:
    fd = os.open(path, os.O_RDONLY)
    try:
        t0 = time.perf_counter()
        os.pread(fd, LATENCY_READ_BYTES, 0)
        return time.perf_counter() - t0
    finally:
        os.close(fd)


def _read_s(path: str) -> tuple[int, float]:
    t0 = time.perf_counter()
    n = pagecache.warm([path])
    return n, time.perf_counter() - t0


def throttle_slice_s(path: str) -> float | None:
    """blk-throttle's slice on the disk holding `path`: the time a throttle's unused budget
    stays the readers' (the kernel's DFL_THROTL_SLICE_HD, HZ / 10, on a rotational disk;
    DFL_THROTL_SLICE_SSD, HZ / 50, otherwise); None where no block device holds it."""
    device = cgroups.whole_disk(path)
    if device is None:
        return None
    flag = Path(f"/sys/dev/block/{device}/queue/rotational")
    if not flag.exists():
        return None
    return 0.1 if flag.read_text().strip() == "1" else 0.02


def probe(files: Sequence[str], n_files: int = PROBE_FILES) -> dict[str, Any]:
    """{"read_bps", "latency_s", "latency_in_bandwidth", "files", "bytes", "resident_bytes",
    "throttle_slice_s"} of the device, cold.

    `read_bps` None when the sample is too small to time. `resident_bytes`: of
    the sample after eviction, before the reads (pages another process kept).
    """
    sample = _sample(files, n_files)
    pagecache.evict(sample)
    resident = pagecache.resident_bytes(sample)
    half = len(sample) // 2
    latencies = [_latency_s(p) for p in sample[:half]]
    reads = [_read_s(p) for p in sample[half:]]
    pagecache.evict(sample)
    latency = statistics.median(latencies) if latencies else 0.0
    nbytes = sum(n for n, _ in reads)
    total = sum(t for _, t in reads)
    busy = total - latency * len(reads)
    separable = busy >= 0.5 * total
    if not separable:  # small files on a fast device: the latency is part of the bandwidth
        busy, latency = total, 0.0
    return {"read_bps": nbytes / busy if nbytes and busy > 0 else None, "latency_s": latency,
            "latency_in_bandwidth": not separable, "files": len(sample), "bytes": nbytes,
            "resident_bytes": resident,
            "throttle_slice_s": throttle_slice_s(sample[0]) if sample else None}
