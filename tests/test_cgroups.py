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


@pytest.mark.parametrize("controllers,own,v1_too,version", [
    ("cpuset cpu io memory pids", "/", False, 2),
    ("cpuset cpu io memory pids", "/jobs/a", False, 2),  # under this process's own cgroup
    ("cpuset cpu io memory pids", "/", True, 2),  # v2 preferred when it has every controller
    ("hugetlb", "/", True, 1),  # this machine: a v2 mount with only hugetlb
    ("cpuset memory pids", "/", False, 0),  # no io controller, no v1: nothing usable
])
def test_detect_v2_from_a_real_hierarchy(tmp_path, controllers, own, v1_too, version):
    """A v2 mount is used when the `cgroup.controllers` of this process's cgroup
    lists cpuset, memory and io; then every controller's root is that cgroup."""
    base = tmp_path / own.lstrip("/")
    base.mkdir(parents=True, exist_ok=True)
    (base / "cgroup.controllers").write_text(controllers + "\n")
    text = f"29 23 0:26 / {tmp_path} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    if v1_too:  # the v1 controllers of HYBRID, without its own v2 mount
        text += "".join(ln for ln in HYBRID.splitlines(True) if "cgroup2" not in ln)
    h = cgroups.detect(text, {"": own, "memory": "/"})
    assert h.version == version
    if version == 2:
        assert h.roots == {c: base for c in ("cpuset", "memory", "io", "cpu")}
    elif version == 1:
        assert h.roots["memory"] == Path("/sys/fs/cgroup/memory")


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
        assert int(cg.memory_limit_file.read_text()) == 256 << 20
        if h.version == 1:  # reclaim takes page cache, never swaps the job out
            assert (memory_dir / "memory.swappiness").read_text().strip() == "0"
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
