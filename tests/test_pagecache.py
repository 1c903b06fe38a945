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


def test_mapped_pages_force_the_recorded_drop_and_the_libraries_are_read_back(tmp_path):
    files = written_now(tmp_path, 3, 64 << 10)
    libs = [files.pop()]  # stands for torch's libraries, mapped by the cached run
    with open(files[0], "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
        m[:]  # faulted in and mapped: POSIX_FADV_DONTNEED leaves mapped pages alone
        # A real drop_caches would disturb every other process on this shared
        # machine; the libraries' pages are what it takes from the run, so the
        # stand-in evicts exactly those.
        state = pagecache.evict_dataset(files, tolerance_bytes=0, library_files=libs + files,
                                        drop=lambda: pagecache.evict(libs))
    assert state["action"] == "dropped_all" and state["global_drop"] is True
    assert state["evict_attempts"] == pagecache.EVICT_ATTEMPTS
    assert state["files_left_resident"] == 1  # the mapped one
    # the libraries, not the dataset files, were read back
    assert state["rewarmed_library_files"] == 1 and state["rewarmed_library_bytes"] == 64 << 10
    assert pagecache.resident_bytes(libs) == 64 << 10
    assert pagecache.resident_bytes(files[1:]) == 0
