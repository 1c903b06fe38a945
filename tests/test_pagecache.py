from __future__ import annotations

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
