"""cgroup detection (from mountinfo text) and real cgroups where permitted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import needs_cgroups
from test_lifeline import running

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


ALL_V2 = "cpuset cpu io memory pids"
SYSTEMD_V2 = "cpu io memory pids"  # what systemd hands its slices unless a unit asks cpuset


def v2_tree(mount: Path, cgroups_: dict[str, tuple[str, str, str]]) -> None:
    """A cgroup v2 tree as its files read, written under `mount` (this machine's v2 mount
    has no cpuset, memory or io: the kernel's side of v2 cannot be run here). Per cgroup:
    (cgroup.controllers, cgroup.subtree_control, cgroup.procs); every cgroup but the root
    has a `cgroup.type`, as the kernel's do."""
    for path, (controllers, subtree, procs) in cgroups_.items():
        d = mount / path.lstrip("/")
        d.mkdir(parents=True, exist_ok=True)
        (d / "cgroup.controllers").write_text(controllers + "\n")
        (d / "cgroup.subtree_control").write_text(subtree + "\n")
        (d / "cgroup.procs").write_text(procs)
        if path != "/":
            (d / "cgroup.type").write_text("domain\n")


@pytest.mark.parametrize("tree,own,v1_too,version,parent,enable", [
    # root on a systemd server: the harness in a session scope; its slices get no cpuset,
    # and a scope holding processes cannot hand any controller down: the root can
    ({"/": (ALL_V2, SYSTEMD_V2, "1\n"), "/user.slice": (SYSTEMD_V2, SYSTEMD_V2, ""),
      "/user.slice/session-1.scope": (SYSTEMD_V2, "", "4242\n")},
     "/user.slice/session-1.scope", False, 2, "/", ("cpuset",)),
    # a delegated parent that already hands all three down (a batch system's job slice)
    ({"/": (ALL_V2, ALL_V2, "1\n"), "/jobs": (ALL_V2, "cpuset io memory", ""),
      "/jobs/a": (ALL_V2, "", "4242\n")}, "/jobs/a", False, 2, "/jobs", ()),
    # an ancestor with no process of its own may list them: it is the nearest
    ({"/": (ALL_V2, ALL_V2, "1\n"), "/batch": (ALL_V2, "pids", ""),
      "/batch/job": (ALL_V2, "", "4242\n")}, "/batch/job", False, 2, "/batch",
     ("cpuset", "memory", "io")),
    # the harness in the root cgroup (exempt from the no-internal-process rule)
    ({"/": (ALL_V2, "", "1\n4242\n")}, "/", True, 2, "/", ("cpuset", "memory", "io")),
    # this machine: a v2 mount with only hugetlb, v1 for the rest
    ({"/": ("hugetlb", "", "1\n")}, "/", True, 1, None, ()),
    # no io controller on v2 and no v1: nothing usable
    ({"/": ("cpuset memory pids", "", "1\n")}, "/", False, 0, None, ()),
])
def test_detect_v2_puts_run_cgroups_under_a_cgroup_that_can_hand_down_controllers(
        tmp_path, tree, own, v1_too, version, parent, enable):
    """On v2 the run cgroups go under the deepest of this process's cgroup and its
    ancestors that lists cpuset, memory and io in its cgroup.subtree_control, or may
    (the root, or a cgroup with no process of its own), with the ones to list first."""
    v2_tree(tmp_path, tree)
    text = f"29 23 0:26 / {tmp_path} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    if v1_too:  # the v1 controllers of HYBRID, without its own v2 mount
        text += "".join(ln for ln in HYBRID.splitlines(True) if "cgroup2" not in ln)
    h = cgroups.detect(text, {"": own, "memory": "/"})
    assert h.version == version
    if version == 2:
        root = tmp_path / parent.lstrip("/")
        assert h.roots == {c: root for c in ("cpuset", "memory", "io", "cpu")}
        assert h.enable == enable
    elif version == 1:
        assert h.roots["memory"] == Path("/sys/fs/cgroup/memory")


def test_a_container_whose_cgroup_holds_its_processes_is_refused_with_the_reason(tmp_path):
    """A container's namespaced root is not the root: holding the container's processes it
    cannot hand controllers down, and nothing above it is visible. The refusal says so."""
    v2_tree(tmp_path, {"/": (ALL_V2, "", "1\n57\n")})
    (tmp_path / "cgroup.type").write_text("domain\n")  # a namespace's root is not the root
    h = cgroups.detect(f"29 23 0:26 / {tmp_path} rw - cgroup2 cgroup2 rw\n", {"": "/"})
    assert h.version == 0 and "cgroup v2" in h.why
    with pytest.raises(ResourceError, match="holds processes cannot.*--no-cgroups"):
        cgroups.RunCgroup.create("x", cgroups.Limits(), h)


@pytest.fixture(autouse=True)
def listed_records(tmp_path, monkeypatch) -> Path:
    """Where run cgroups write down what they listed on v2 (`cgroups.LISTED_DIR`): a folder
    of the test's, here and in the processes it starts (the reaper reads the variable)."""
    d = tmp_path / "listed-records"
    monkeypatch.setattr(cgroups, "LISTED_DIR", d)
    monkeypatch.setenv("DSANALYZE_LISTED_DIR", str(d))
    return d


def test_v2_controllers_listed_for_the_runs_are_unlisted_after_the_last(tmp_path,
                                                                        listed_records):
    """The writes to the parent's cgroup.subtree_control, on the tree's files (not the
    kernel's): cpuset listed before the run cgroup is made, unlisted once it is removed,
    and left listed while another harness's run cgroup is still there. What was listed is
    written down while it is (`LISTED_DIR`), and the record dropped once unlisted."""
    v2_tree(tmp_path, {"/": (ALL_V2, SYSTEMD_V2, "1\n"),
                       "/user.slice": (SYSTEMD_V2, SYSTEMD_V2, ""),
                       "/user.slice/s.scope": (SYSTEMD_V2, "", "4242\n")})
    h = cgroups.detect(f"29 23 0:26 / {tmp_path} rw - cgroup2 cgroup2 rw\n",
                       {"": "/user.slice/s.scope"})
    control = tmp_path / "cgroup.subtree_control"
    (tmp_path / "cpuset.cpus.effective").write_text("0-1\n")
    cg = cgroups.RunCgroup.create("a", cgroups.Limits(), h)
    assert control.read_text() == "+cpuset" and cg.dirs["cpuset"].parent == tmp_path
    assert (cg.dirs["cpuset"] / "cpuset.cpus").read_text() == "0-1"  # the parent's CPUs
    record = listed_records / f"{cg.name}.json"
    assert json.loads(record.read_text()) == {"parent": str(tmp_path), "controllers": ["cpuset"]}
    for f in cg.dirs["cpuset"].iterdir():  # what the kernel would remove with the directory
        f.unlink()
    cg.remove()
    assert control.read_text() == "-cpuset" and not cg.dirs["cpuset"].exists()
    assert not record.exists()
    control.write_text(SYSTEMD_V2)
    other = tmp_path / f"{cgroups.PREFIX}1-run"  # another harness's run cgroup
    other.mkdir()
    cg = cgroups.RunCgroup.create("b", cgroups.Limits(), h)
    for f in cg.dirs["cpuset"].iterdir():
        f.unlink()
    cg.remove()
    assert control.read_text() == "+cpuset"  # still listed: the other run uses it


# A harness on the tree of files `v2_tree` wrote, its run cgroup made (argv: the tree, the
# harness's own cgroup); what follows is each test's.
HARNESS_ON_TREE = """
import sys, time
from dsanalyze.resources import cgroups, lifeline
mount, own = sys.argv[1:]
h = cgroups.detect(f"29 23 0:26 / {mount} rw - cgroup2 cgroup2 rw\\n", {"": own})
cg = cgroups.RunCgroup.create("a", cgroups.Limits(), h)
for f in cg.dirs["cpuset"].iterdir():  # what the kernel would remove with the directory
    f.unlink()
"""
# ... its reaper told what to watch and unlist, then SIGKILLed
KILLED_HARNESS = HARNESS_ON_TREE + """
line = lifeline.Lifeline()
line.watch_cgroups([cg.dirs["cpuset"]])
line.unlist_after(*cg.listed)
print(line.reaper_pid, cg.dirs["cpuset"], flush=True)
time.sleep(60)
"""
# ... no reaper (killed with it): what it leaves for `clean_stale`
KILLED_WITH_ITS_REAPER = HARNESS_ON_TREE + """
print(cg.dirs["cpuset"], flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("case", ["alone", "other_run", "owner_listed"])
def test_clean_stale_unlists_what_a_harness_killed_with_its_reaper_listed(tmp_path,
                                                                          listed_records, case):
    """A harness and its reaper both SIGKILLed: the run cgroup stays, cpuset stays listed at
    the root, and the record says who listed it. The next start's `clean_stale` removes the
    cgroup and unlists cpuset; with another (live) harness's run cgroup there, cpuset stays
    listed and so does the record, for a later start. Listed by the machine's owner (no
    record): the cgroup goes, the listing stays."""
    v2_tree(tmp_path, {"/": (ALL_V2, ALL_V2 if case == "owner_listed" else SYSTEMD_V2, "1\n"),
                       "/user.slice": (SYSTEMD_V2, SYSTEMD_V2, ""),
                       "/user.slice/s.scope": (SYSTEMD_V2, "", "4242\n")})
    (tmp_path / "cpuset.cpus.effective").write_text("0-1\n")
    h = cgroups.detect(f"29 23 0:26 / {tmp_path} rw - cgroup2 cgroup2 rw\n",
                       {"": "/user.slice/s.scope"})
    harness = subprocess.Popen([sys.executable, "-c", KILLED_WITH_ITS_REAPER, str(tmp_path),
                                "/user.slice/s.scope"], stdout=subprocess.PIPE, text=True)
    run_dir = Path(harness.stdout.readline().strip())
    harness.kill()
    harness.wait(timeout=10)
    control = tmp_path / "cgroup.subtree_control"
    records = list(listed_records.glob("*.json"))
    assert run_dir.is_dir() and len(records) == (0 if case == "owner_listed" else 1)
    if case == "other_run":  # this process is alive: its run cgroup is not stale
        (tmp_path / f"{cgroups.PREFIX}{os.getpid()}-run").mkdir()
    listing = control.read_text()
    assert cgroups.clean_stale(h) == [str(run_dir)] and not run_dir.exists()
    if case == "alone":
        assert control.read_text() == "-cpuset" and not records[0].exists()
    elif case == "other_run":
        assert control.read_text() == listing == "+cpuset" and records[0].exists()
    else:
        assert control.read_text() == listing  # not the harness's to unlist


@pytest.mark.parametrize("other_run", [False, True])
def test_the_reaper_of_a_killed_harness_unlists_what_it_listed_on_v2(tmp_path, other_run,
                                                                   listed_records):
    """SIGKILL of a harness that listed cpuset at the root for its run cgroup: its reaper
    removes the run cgroup and unlists cpuset, as the harness itself would have; with
    another harness's run cgroup still there, cpuset stays listed."""
    v2_tree(tmp_path, {"/": (ALL_V2, SYSTEMD_V2, "1\n"),
                       "/user.slice": (SYSTEMD_V2, SYSTEMD_V2, ""),
                       "/user.slice/s.scope": (SYSTEMD_V2, "", "4242\n")})
    (tmp_path / "cpuset.cpus.effective").write_text("0-1\n")
    if other_run:
        (tmp_path / f"{cgroups.PREFIX}1-run").mkdir()
    harness = subprocess.Popen([sys.executable, "-c", KILLED_HARNESS, str(tmp_path),
                                "/user.slice/s.scope"], stdout=subprocess.PIPE, text=True)
    reaper, run_dir = harness.stdout.readline().split()
    control = tmp_path / "cgroup.subtree_control"
    assert control.read_text() == "+cpuset" and Path(run_dir).is_dir()
    harness.kill()
    harness.wait(timeout=10)
    deadline = time.monotonic() + 20
    while running(int(reaper)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(run_dir).exists()
    assert control.read_text() == ("+cpuset" if other_run else "-cpuset")
    # the reaper drops the record of what it unlisted; one it could not unlist stays
    assert len(list(listed_records.glob("*.json"))) == (1 if other_run else 0)


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
