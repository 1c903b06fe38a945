"""cgroup detection (from mountinfo text) and real cgroups where permitted."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import needs_cgroups

from dsanalyze.errors import ResourceError
from dsanalyze.resources import cgroups

HYBRID = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
V1_NO_BLKIO = """\
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
"""
V2_ONLY = "29 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


@pytest.mark.parametrize("text,own,version,memory_root", [
    (HYBRID, {"memory": "/"}, 1, "/sys/fs/cgroup/memory"),
    (HYBRID, {"memory": "/jobs/a"}, 1, "/sys/fs/cgroup/memory/jobs/a"),
    (V1_NO_BLKIO, {}, 0, None),
    # the v2 mount is read through its cgroup.controllers file, which does not
    # exist under this fake path: no usable controllers
    (V2_ONLY.replace("/sys/fs/cgroup", "/nonexistent"), {"": "/"}, 0, None),
])
def test_detect(text, own, version, memory_root):
    h = cgroups.detect(text, own)
    assert h.version == version
    if memory_root:
        assert h.roots["memory"] == Path(memory_root)


def test_whole_disk_of_a_partitionless_root_and_of_proc():
    assert cgroups.whole_disk("/proc") is None  # major 0: no block device


@needs_cgroups
def test_real_cgroup_limits_counters_and_removal(tmp_path):
    h = cgroups.detect()
    cpu = sorted(os.sched_getaffinity(0))[0]
    limits = cgroups.Limits(cpus=(cpu,), memory_bytes=256 << 20)
    with cgroups.RunCgroup.create("unit", limits, h) as cg:
        out = subprocess.run(cg.join_argv() + [sys.executable, "-c",
                             "import os; print(sorted(os.sched_getaffinity(0)))"],
                             capture_output=True, text=True, check=True)
        assert out.stdout.strip() == f"[{cpu}]"
        memory_dir = cg.dirs["memory"]
        limit_file = "memory.limit_in_bytes" if h.version == 1 else "memory.max"
        assert int((memory_dir / limit_file).read_text()) == 256 << 20
        assert cg.counters()["cpu_usage_s"] > 0
        sleeper = subprocess.Popen(cg.join_argv() + ["sleep", "60"])
        for _ in range(200):
            if sleeper.pid in cg.pids():
                break
            time.sleep(0.05)
        assert sleeper.pid in cg.pids()  # exec keeps the pid: `sleep` itself is inside
    sleeper.wait(timeout=10)
    assert not any(d.exists() for d in cg.dirs.values())


@needs_cgroups
def test_clean_stale_removes_cgroups_of_dead_harnesses():
    h = cgroups.detect()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = cgroups.RunCgroup(h, f"{cgroups.PREFIX}{dead.pid}-leftover")
    for d in stale.dirs.values():
        d.mkdir(exist_ok=True)
    removed = cgroups.clean_stale(h)
    assert any("leftover" in r for r in removed)
    assert not any(d.exists() for d in stale.dirs.values())


def test_create_without_hierarchy_says_what_to_do():
    with pytest.raises(ResourceError, match="--no-cgroups"):
        cgroups.RunCgroup.create("x", cgroups.Limits(), cgroups.Hierarchy(0, {}))


def test_cache_limiter_target_follows_the_recent_peak():
    from dsanalyze.resources.cachelimit import CacheLimiter

    lim = CacheLimiter(cgroup=None, budget_bytes=100, margin_bytes=10, job_bytes=0, window_s=2.0)
    assert lim.target(0.0, 500) == 610
    assert lim.target(1.0, 300) == 610  # the peak of the last 2 s still counts
    assert lim.target(2.5, 300) == 410  # the 500 has left the window
    assert lim.target(2.6, 900) == 1010


@needs_cgroups
def test_cache_limiter_trims_page_cache_the_job_leaves_room_for(tmp_path):
    """A static limit with 128 MiB of room for the job's memory would let a reader
    that uses none of it keep 128 MiB cached; the limiter trims to the budget."""
    from dsanalyze.resources import pagecache
    from dsanalyze.resources.cachelimit import CacheLimiter

    files = []
    for i in range(6):
        path = tmp_path / f"f{i}"
        path.write_bytes(os.urandom(16 << 20))
        files.append(str(path))
    pagecache.evict(files)
    budget, margin, job = 16 << 20, 16 << 20, 128 << 20
    limits = cgroups.Limits(memory_bytes=budget + job + margin)
    with cgroups.RunCgroup.create("trim", limits, cgroups.detect()) as cg:
        with CacheLimiter(cg, budget, margin, job_bytes=job) as limiter:
            reader = ("import sys, time\n"
                      "for p in sys.argv[1:]:\n"
                      "    with open(p, 'rb') as f:\n"
                      "        while f.read(1 << 20):\n"
                      "            time.sleep(0.005)\n")
            subprocess.run(cg.join_argv() + [sys.executable, "-c", reader, *files], check=True)
            time.sleep(0.2)
        report = limiter.report()
    assert report["page_cache_trims"] > 0
    assert report["page_cache_trim_at_bytes"] == budget + margin // 2
    assert pagecache.resident_bytes(files) <= budget + margin
