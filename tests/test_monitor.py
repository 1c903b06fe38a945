"""The monitor's per-process sample (monitor.tree_sample): a run's processes listed from its
cgroup are those of its process tree. Real cgroups, real processes."""

from __future__ import annotations

import subprocess
import sys
import time

from conftest import needs_cgroups

from dsanalyze.monitor import tree_sample
from dsanalyze.resources import cgroups

# A parent that burns 0.3 s of CPU, with two sleeping children: three processes.
TREE = """\
import subprocess, sys, time
kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
end = time.process_time() + 0.3
while time.process_time() < end:
    pass
print("ready", flush=True)
time.sleep(60)
"""


@needs_cgroups
def test_a_runs_processes_from_its_cgroup_are_its_process_tree():
    """Listed from the cgroup (cheap) or as the root's descendants (every process of the
    machine read): the same three processes, their CPU time (at least the parent's 0.3 s
    burn) and memory alike."""
    with cgroups.RunCgroup.create("montree", cgroups.Limits(), cgroups.detect()) as cg:
        proc = subprocess.Popen([*cg.join_argv(), sys.executable, "-c", TREE],
                                stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
            deadline = time.monotonic() + 10
            while len(cg.pids()) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            by_tree, by_cgroup = tree_sample(proc.pid), tree_sample(proc.pid, cg.pids())
        finally:
            proc.kill()
            proc.wait()
    assert by_tree["procs"] == by_cgroup["procs"] == 3
    assert by_cgroup["tree_cpu_s"] >= 0.3
    assert abs(by_cgroup["tree_cpu_s"] - by_tree["tree_cpu_s"]) <= 0.05
    assert abs(by_cgroup["tree_rss_bytes"] - by_tree["tree_rss_bytes"]) \
        <= 0.1 * by_tree["tree_rss_bytes"]


# A parent whose child burns 0.3 s of CPU and ends, reaped by the parent (as a DataLoader's
# main process joins a worker that is not persistent at each epoch's end).
REAPED = """\
import subprocess, sys, time
burn = "import time\\nend = time.process_time() + 0.3\\nwhile time.process_time() < end: pass"
subprocess.run([sys.executable, "-c", burn], check=True)
print("ready", flush=True)
time.sleep(60)
"""


def test_the_tree_keeps_the_cpu_time_of_the_children_that_ended():
    """The child is gone when the tree is sampled: its 0.3 s burn is counted in the parent,
    which reaped it (cutime), so the tree's count never falls when a worker ends. The
    parent itself spins on nothing: counted alone it held well under 0.3 s."""
    proc = subprocess.Popen([sys.executable, "-c", REAPED], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        sample = tree_sample(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert sample["procs"] == 1
    assert sample["tree_cpu_s"] >= 0.3
