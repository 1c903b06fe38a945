from __future__ import annotations

import mmap
import os

import pytest

from dsanalyze.resources import cgroups, pagecache


def test_evict_warm_and_residency(tmp_path):
    if cgroups.whole_disk(tmp_path) is None:
        pytest.skip("the temporary directory is on tmpfs or similar: its pages cannot be evicted")
    path = tmp_path / "f.bin"
    path.write_bytes(os.urandom(4 << 20))
    files = [str(path)]
    pagecache.evict(files)
    assert pagecache.resident_bytes(files) == 0
    assert pagecache.warm(files) == 4 << 20
    assert pagecache.resident_bytes(files) == 4 << 20
    pagecache.evict(files)
    assert pagecache.resident_bytes(files) == 0


def test_empty_file_has_no_residency(tmp_path):
    (tmp_path / "e").write_bytes(b"")
    assert pagecache.resident_bytes([str(tmp_path / "e")]) == 0


def written_now(tmp_path, n: int, size: int) -> list[str]:
    """Files just written: their pages are resident and were dirty a moment ago."""
    if cgroups.whole_disk(tmp_path) is None:
        pytest.skip("the temporary directory is on tmpfs or similar: its pages cannot be evicted")
    paths = []
    for i in range(n):
        p = tmp_path / f"f{i}.bin"
        p.write_bytes(os.urandom(size))
        paths.append(str(p))
    return paths


def test_fresh_files_are_evicted_per_file_without_a_global_drop(tmp_path):
    files = written_now(tmp_path, 8, 256 << 10)
    assert pagecache.resident_bytes(files) == 8 * (256 << 10)
    state = pagecache.evict_dataset(files, tolerance_bytes=0, drop=lambda: pytest.fail("dropped"))
    assert state["action"] == "evicted_per_file" and state["global_drop"] is False
    assert state["resident_before_bytes"] == 0 and pagecache.resident_bytes(files) == 0


def test_mapped_pages_are_recorded_and_never_dropped_machine_wide(tmp_path):
    files = written_now(tmp_path, 3, 64 << 10)
    with open(files[0], "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
        m[:]  # faulted in and mapped: POSIX_FADV_DONTNEED leaves mapped pages alone
        state = pagecache.evict_dataset(files, tolerance_bytes=0,
                                        drop=lambda: pytest.fail("dropped"))
    assert state["action"] == "evicted_incomplete" and state["global_drop"] is False
    assert state["evict_attempts"] == pagecache.EVICT_ATTEMPTS
    assert state["files_left_resident"] == 1 and state["resident_files_sample"] == [files[0]]
    assert state["resident_before_bytes"] == 64 << 10
    assert pagecache.resident_bytes(files[1:]) == 0


def test_the_global_drop_only_when_asked(tmp_path):
    files = written_now(tmp_path, 2, 64 << 10)
    dropped = []
    with open(files[0], "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
        m[:]
        # a real drop_caches would disturb every other process on this shared machine:
        # the stand-in records the call
        state = pagecache.evict_dataset(files, tolerance_bytes=0, drop_globally=True,
                                        drop=lambda: dropped.append(1))
    assert dropped == [1]
    assert state["action"] == "dropped_all" and state["global_drop"] is True


def test_cachestat_and_mincore_agree(tmp_path):
    (path,) = written_now(tmp_path, 1, (1 << 20) + 100)
    pagecache.evict([path])
    with open(path, "rb") as f:
        f.read(300 << 10)  # part of it, readahead included
    fd = os.open(path, os.O_RDONLY)
    try:
        pages = pagecache.cachestat_pages(fd)
    finally:
        os.close(fd)
    if pages is None:
        pytest.skip("no cachestat(2) before Linux 6.5")
    pagecache._cachestat_works = False  # mincore, as on an older kernel
    try:
        by_mincore = pagecache.file_resident_bytes(path)
    finally:
        pagecache._cachestat_works = True
    assert min((1 << 20) + 100, pages * 4096) == by_mincore >= 300 << 10
