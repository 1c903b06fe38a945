"""Shared fixtures: a small generated JPEG dataset and in-process harness runs."""

from __future__ import annotations

import functools
import io
import multiprocessing.util
import os
import shutil
import tarfile
from pathlib import Path

import psutil
import pytest

from dsanalyze import cli
from dsanalyze.jobs.datasets import make_dataset
from dsanalyze.resources import cgroups

ROOT = Path(__file__).parent.parent
DATA_DIR = Path(__file__).parent / "data"


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (`make test` runs `-n 2`), each worker gets its own share of the
    CPUs: a test's runs then see a quiet machine of that many CPUs, as on a machine of their
    own, not a share of CPUs that the other worker's runs are also using. Tests marked
    `whole_machine` need every CPU; `make test` runs them afterwards, without -n."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    cpus = sorted(os.sched_getaffinity(0))
    if worker and count and int(count) > 1 and len(cpus) >= int(count):
        os.sched_setaffinity(0, cpus[int(worker.removeprefix("gw")) :: int(count)])
    # multiprocessing's temporary directory (`pymp-*`), made now, which its finalizer
    # removes at this process's exit: the DataLoader workers the tests start in this process
    # inherit it and bind their resource-sharer sockets there, where each would otherwise
    # make one of its own, which its end by SIGTERM leaves in /tmp
    multiprocessing.util.get_temp_dir()


# The modules whose tests take longest in all, heaviest first (seconds of each test, its
# fixtures and its processes in `make test`'s selection, --durations=0 at 5c521d1; the
# largest units first: test_datacache.py and test_verify.py are one unit each, made around a
# module-scoped fixture): `make test` starts them first and hands the two pytest-xdist
# workers one unit at a time, in this order (--dist loadscope --no-loadscope-reorder, and
# pytest_xdist_make_scheduler below), so that the short tests at the end even out the
# workers' finish. `make test-long` orders its own selection (the tests marked long) by
# LONGEST_LONG_MODULES: test_nodes.py is one unit of about 180 s there.
LONGEST_MODULES = ("test_advice.py", "test_harness.py", "test_datacache.py", "test_verify.py",
                   "test_measured.py", "test_errors.py", "test_plots.py", "test_frameworks.py",
                   "test_untilci.py", "test_dali.py", "test_fingerprint.py", "test_whatif.py",
                   "test_transforms.py", "test_fit_reads.py", "test_progress.py",
                   "test_resources.py", "test_memroom.py", "test_nodes.py", "test_netlaw.py")
LONGEST_LONG_MODULES = ("test_nodes.py", "test_frameworks.py", "test_workspeed.py",
                        "test_repeats.py", "test_advice.py", "test_bootstrap.py",
                        "test_remote_loaders.py", "test_verify.py", "test_dali.py",
                        "test_coldepoch.py", "test_harness.py", "test_hostspeed.py",
                        "test_datacache.py", "test_untilci.py")


def only_long(config: pytest.Config) -> bool:
    """Whether the selection is `make test-long`'s: -m 'long and ...'."""
    return config.getoption("markexpr", "").startswith("long")


def longest_first(order: tuple[str, ...], item: pytest.Item) -> int:
    """An item's module's place in `order`, the selection's list of the longest modules (the
    others after, in their order): a module's tests stay together, so its module-scoped
    fixtures are made once per worker."""
    name = item.path.name
    return order.index(name) if name in order else len(order)


@functools.cache
def shares_module_fixtures(module: str) -> bool:
    """Whether a test module defines a module-scoped fixture (a sweep made once for its tests)."""
    path = ROOT / module
    return path.is_file() and 'scope="module"' in path.read_text()


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """--dist loadscope, where a unit is one test, or a whole module whose tests share a
    module-scoped fixture (one worker makes it once); the units go out in collection order.
    (Not --dist loadgroup: pytest-xdist 3.8 groups by renaming `item._nodeid`, which pytest 9
    no longer reads.)"""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class TestOrModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if shares_module_fixtures(module) else nodeid

    return TestOrModule(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    order = LONGEST_LONG_MODULES if only_long(config) else LONGEST_MODULES
    # stable: the collection's order within each module
    items.sort(key=functools.partial(longest_first, order))
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    why = pytest.mark.skip(reason="needs every CPU of the machine, and this pytest-xdist worker "
                                  "has a share of them: run it without -n (make test does)")
    for item in items:
        if item.get_closest_marker("whole_machine"):
            item.add_marker(why)


def drop_pagecache_count() -> int:
    """/proc/vmstat's `drop_pagecache`: how many times anyone dropped the whole page cache."""
    for line in Path("/proc/vmstat").read_text().splitlines():
        name, _, value = line.partition(" ")
        if name == "drop_pagecache":
            return int(value)
    return 0


@pytest.fixture(scope="session", autouse=True)
def no_global_page_cache_drop():
    """The suite never empties the machine's page cache (docs/design.md: nothing global):
    fails the session if `drop_pagecache` moved while it ran (by this suite or, against the
    rules of a shared machine, by anyone)."""
    before = drop_pagecache_count()
    yield
    after = drop_pagecache_count()
    if after != before:
        pytest.fail(f"/proc/vmstat drop_pagecache went from {before} to {after} during the "
                    "suite: something wrote /proc/sys/vm/drop_caches", pytrace=False)


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """96 real JPEGs (about 100 KB each) in 4 classes."""
    root = tmp_path_factory.mktemp("dataset") / "data"
    make_dataset(root, images=96, classes=4, size=(500, 375), size_jitter=0.2, seed=1)
    return root


def write_shards(images: Path, out: Path, n: int = 8) -> Path:
    """An ImageFolder's JPEGs as `n` webdataset shards `shard-000000.tar`...: `<key>.jpg` and
    `<key>.cls` (the class index) per sample."""
    files = sorted(images.glob("*/*.jpg"))
    classes = sorted(p.name for p in images.iterdir())
    for s in range(n):
        with tarfile.open(out / f"shard-{s:06d}.tar", "w") as tar:
            for f in files[s::n]:
                tar.add(f, arcname=f"{f.stem}.jpg")
                label = str(classes.index(f.parent.name)).encode()
                info = tarfile.TarInfo(f"{f.stem}.cls")
                info.size = len(label)
                tar.addfile(info, io.BytesIO(label))
    return out


def copy_of(name: str, tmp_path: Path) -> Path:
    """A writable copy of the committed results under tests/data/<name>."""
    return Path(shutil.copytree(DATA_DIR / name, tmp_path / name))


def harness(*argv: str) -> int:
    """Run harness.py in-process; returns its exit code. Each configuration is measured once:
    a script on the CPU beside its workers is not measured three times (`--shared-core-runs`),
    nor a run again after which the probe read the machine slow (`--host-retries`: on 2 cores
    the other test's jobs slow it), unless the test asks for it (the last value given wins)."""
    return cli.harness_main(["--shared-core-runs", "1", "--host-retries", "0",
                             *(str(a) for a in argv)])


STEP_BOUND = pytest.mark.timing(reason=(
    "a sim-device rate is that of a sleep: on a loaded machine the sleep wakes late, so the "
    "rate only drops; the tolerance is the run's own spread of iteration times"))


def assert_step_bound_rate(mode: dict, expected_sps: float) -> None:
    """A mode's rate (a `summary.json` mode entry) of a job bound by the sim step's sleep.

    A sleep never wakes early: the rate is at most `expected_sps` (1% for the clock and the
    loop's own work). It wakes late by as much as the machine's other processes delay it,
    which the run's own iteration times show: the rate may fall short by 1.5 times their
    IQR over the median, at least 3% (the quiet machine's tolerance), or 6% when the run
    itself notes it was disturbed (other processes busy on its CPUs or the ones beside
    them: a few late wakes among a short run's iterations move its mean, not their IQR;
    `make test`'s other worker kept the CPU beside a 2-rank run 99% busy and its 16
    iterations came 3.5% short of the sleep)."""
    rate = mode["rate_sps"]
    floor = 0.06 if mode.get("disturbed") else 0.03
    tolerance = max(floor, 1.5 * (mode.get("iter_iqr_pct") or 0.0) / 100)
    assert rate <= expected_sps * 1.01, (rate, expected_sps)
    assert rate >= expected_sps * (1 - tolerance), (rate, expected_sps, tolerance)


def cgroups_writable() -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, "needs root to write cgroups"
    try:
        cgroups.probe()
    except Exception as e:  # any failure means: not permitted on this machine
        return False, f"cgroups not writable here: {e}"
    return True, ""


_CG_OK, _CG_WHY = cgroups_writable()
needs_cgroups = pytest.mark.skipif(not _CG_OK, reason=_CG_WHY or "cgroups writable")


def timed_by(model, run):
    """A cached run with its rank's iterations replaced by the simulation's of the what-if
    `model`: a run whose parameters are known."""
    from dataclasses import replace

    from dsanalyze.config import Mode
    from dsanalyze.whatif.laws import run_config
    from dsanalyze.whatif.model import HeldOut
    from dsanalyze.whatif.rates import simulate_run
    held = HeldOut.of(run)
    tl = simulate_run(model, run_config(model, held), held.layout, Mode.CACHED)
    r0 = run.ranks[0]
    return replace(run, ranks=[replace(r0, iter_s=tl.iter_s, wait_s=tl.wait_s, epoch=tl.epoch,
                                       samples=r0.samples[:len(tl.iter_s)])])


def argv_of(p: psutil.Process) -> list[str]:
    """A process's argv; ["(ended)"] where it ended meanwhile (no live process's argv)."""
    try:
        return p.cmdline()
    except psutil.Error:
        return ["(ended)"]


def slower(run, factor: float):
    """`run` with every rank's iterations `factor` times longer (its waits as they were)."""
    from dataclasses import replace
    return replace(run, ranks=tuple(replace(k, iter_s=tuple(t * factor for t in k.iter_s))
                                    for k in run.ranks))


def with_probed_contention(runs, contention: float, cpus: int):
    """`runs` as if the sweep's parallel decode probe (`resources/cpuscale.py`) had read
    `contention` on `cpus` cores: 10 ms a decode alone, 10 ms x (1 + contention (cpus - 1))
    on each core at once."""
    from dataclasses import replace

    from dsanalyze.records import CpuScaling
    scaling = CpuScaling(cpus, contention, "decode", 0.010,
                         0.010 * (1 + contention * (cpus - 1)), 100, 1.5)
    return [replace(r, environment={**r.environment, "cpu_scaling": scaling.to_dict()})
            for r in runs]
