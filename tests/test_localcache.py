"""A streaming library's local cache around the modes (`remote/localcache.py`): real files in
a real directory; the cache dir named on the harness or found in the script's arguments."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from test_stalls import JOB

from dsanalyze.config import Mode, Resources, RunSpec, Sweep
from dsanalyze.errors import ConfigError
from dsanalyze.linkrecords import LocalCacheAction
from dsanalyze.remote.localcache import LocalCache, from_script_args

REMOTE = Resources(net_bw_bps=1 << 20, net_latency_s=0.0)


@pytest.mark.parametrize("args, expected", [
    (["--remote", "s3://b/", "--local", "/tmp/c"], "/tmp/c"),
    (["--local=/tmp/c", "-b", "4"], "/tmp/c"),
    (["--cache-dir", "/x"], "/x"),
    (["--local-dir=/y"], "/y"),
    (["--remote", "s3://b/", "-b", "4"], None),
    (["--local"], None),  # no value follows
    (["--localized", "/x"], None),  # another flag that starts the same way
])
def test_the_cache_dir_a_script_is_given(args, expected):
    assert from_script_args(args) == expected


def _served(tmp_path: Path) -> tuple[Path, list[Path]]:
    root = tmp_path / "data"
    (root / "sub").mkdir(parents=True)
    files = [root / "index.json", root / "shard.00000.mds", root / "sub" / "shard.00001.mds"]
    for i, f in enumerate(files):
        f.write_bytes(bytes([i]) * (100 + 1000 * i))
    return root, files


def test_cached_fills_and_remote_empties_only_the_served_files(tmp_path):
    root, files = _served(tmp_path)
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    (cache_dir / "shard.00000.mds").write_bytes(b"partial")  # a download cut short
    (cache_dir / "mine.txt").write_text("the user's own file")
    cache = LocalCache(cache_dir, root, tuple(files))

    filled = cache.prepare(RunSpec(JOB, Mode.CACHED, REMOTE))
    assert filled.action is LocalCacheAction.FILLED
    assert filled.bytes_held == sum(f.stat().st_size for f in files)
    for f in files:
        assert (cache_dir / f.relative_to(root)).read_bytes() == f.read_bytes()

    emptied = cache.prepare(RunSpec(JOB, Mode.DISK, REMOTE))
    assert emptied.action is LocalCacheAction.EMPTIED and emptied.bytes_held == 0
    assert sorted(p.name for p in cache_dir.rglob("*") if p.is_file()) == ["mine.txt"]


def test_local_cache_needs_served_data():
    with pytest.raises(ConfigError, match="--local-cache .* --serve"):
        Sweep(dataclasses.replace(JOB, script="/s.py"), local_cache="/tmp/c")
