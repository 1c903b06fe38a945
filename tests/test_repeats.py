"""Repeats and interference: the order of repeats, `--target-ci` on real runs, the probe.

The end-to-end tests run the real harness (sim device, real JPEGs, real
cgroups) and inject noise with CPU-burning processes pinned to the run's CPU.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from conftest import argv_of, copy_of, harness, needs_cgroups

from dsanalyze import launch, store, sweep
from dsanalyze.analysis import stalls
from dsanalyze.analysis.jobrun import shares_cores
from dsanalyze.config import Job, Mode, RunSpec, Sweep
from dsanalyze.errors import ConfigError
from dsanalyze.instrument import rank as rankenv
from dsanalyze.monitor import InterferenceProbe
from dsanalyze.resources import cgroups

# Burns CPU `cpu` in phases: busy for 0.3-`longest` s, idle for as long, from a
# seeded schedule (all burners of one seed switch together); `longest` 0: always busy.
SCRIPTS = Path(__file__).parent / "scripts"

BURNER = """
import os, random, sys, time
cpu, seed, longest = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
os.sched_setaffinity(0, {cpu})
rng = random.Random(seed)
while True:
    end = time.monotonic() + (rng.uniform(0.3, longest) if longest else 3600)
    while time.monotonic() < end:
        pass
    time.sleep(rng.uniform(0.3, longest))
"""


class Burners:
    """`n` burner processes on one CPU, stopped (by their own pids) on exit."""

    def __init__(self, cpu: int, n: int, longest_s: float, seed: int = 0) -> None:
        self.argv = [sys.executable, "-c", BURNER, str(cpu), str(seed), str(longest_s)]
        self.n = n
        self.procs: list[subprocess.Popen] = []
        self.stopped = threading.Event()
        self._lock = threading.Lock()

    def __enter__(self) -> Burners:
        # each in its own session: with autogroup scheduling a session shares one slice
        self.procs = [subprocess.Popen(self.argv, start_new_session=True) for _ in range(self.n)]
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:  # from the test and from the thread that stops them
            for p in self.procs:
                p.kill()
                p.wait()
            self.stopped.set()


def test_repeats_are_interleaved_across_modes():
    job = Job(data_dir="/d")
    sw = Sweep(job, modes=(Mode.SYNTHETIC, Mode.CACHED, Mode.DISK), cpus=(1, 2), repeats=2)
    specs = sw.run_specs(1000)
    second = sweep.next_repeat(sw, specs, 2)
    assert [s.run_id for s in second] == [f"{s.run_id}-r2" for s in specs]
    assert [s.mode for s in second] == [s.mode for s in specs]  # synthetic, cached, disk again
    assert sweep.next_repeat(sw, specs, 3) == []
    spec = second[0]
    assert RunSpec.from_dict(spec.to_dict()) == spec and spec.repeat == 2


@pytest.mark.parametrize("target,again", [(5.0, False), (1.0, True)])
def test_target_ci_repeats_only_configurations_still_too_wide(tmp_path, target, again):
    """The committed pair has stall intervals of about ±2.3 points: narrower than 5, not than 1."""
    prefix = copy_of("uncertainty_pair", tmp_path)
    runs = store.load_runs(prefix)
    for r in runs:  # a second repeat, so that --target-ci may stop
        store.write_run(prefix, dataclasses.replace(r, spec=dataclasses.replace(r.spec, repeat=2)))
    sw = Sweep(runs[0].spec.job, prefix=str(prefix), target_ci_pct=target, max_repeats=4)
    specs = [r.spec for r in runs]
    assert len(sweep.next_repeat(sw, specs, 2)) == 3  # at least two repeats, whatever the width
    third = sweep.next_repeat(sw, specs, 3)
    assert [s.run_id for s in third] == ([f"{r.run_id}-r3" for r in runs] if again else [])
    assert sweep.next_repeat(sw, specs, 5) == []  # --max-repeats 4


def test_a_repeat_resumes_like_any_run(tmp_path):
    prefix = copy_of("uncertainty_pair", tmp_path)
    (run,) = [r for r in store.load_runs(prefix) if r.mode is Mode.CACHED]
    spec2 = RunSpec(run.spec.job, run.spec.mode, run.spec.resources, 2)
    assert store.completed(prefix, spec2) is None
    store.write_run(prefix, dataclasses.replace(run, spec=spec2))
    assert store.completed(prefix, spec2).run_id == "cached-cpus1-r2"
    assert store.completed(prefix, run.spec).run_id == "cached-cpus1"


@needs_cgroups
def test_probe_sees_cpu_time_of_processes_outside_the_cgroup():
    cpu = launch.cpu_ids(1)[0]
    with cgroups.RunCgroup.create("probe-test", cgroups.Limits(cpus=(cpu,))) as cg:
        probe = InterferenceProbe((cpu,), None, cg.dirs.get("cpuacct"))
        probe.start()
        inside = subprocess.Popen(cg.join_argv() + [sys.executable, "-c", BURNER, str(cpu), "0",
                                                    "0"])
        with Burners(cpu, 3, 0):
            time.sleep(2.0)
        inside.kill()
        inside.wait()
        found = probe.stop(None)
    # four busy processes share the CPU (with whatever else runs on this machine): the
    # one inside gets at most about a quarter of it, the burners the rest
    assert 0 < found["cgroup_cpu_s"] < 0.4 * found["window_s"]
    assert found["others_cpu_pct"] > 50
    assert found["others_cpu_s"] + found["cgroup_cpu_s"] == pytest.approx(found["cpu_busy_s"])
    assert found["cpu_busy_s"] == pytest.approx(found["window_s"], rel=0.2)
    # machine-wide: every online CPU, the burners among the others (ticks of 10 ms)
    assert found["machine_cpus"] == os.cpu_count()
    assert found["machine_busy_s"] >= found["cpu_busy_s"] - 0.05
    assert found["machine_others_cpu_s"] >= found["others_cpu_s"] - 0.05


def _repeats(prefix: Path) -> int:
    return sum(1 for r in store.load_runs(prefix) if r.mode is Mode.CACHED)


def _loader_workers(mode: str) -> list[psutil.Process]:
    """The DataLoader workers of this test's built-in job rank in `mode` (none before its
    loader starts iterating): the children of the rank, the bootstrap process that
    torch.distributed.run started (its own argv names the job too, and its child is the rank).
    A worker is forked: it keeps the rank's argv. Any other child (a short-lived helper a
    library spawns) is not one: the burners once stopped 0.2 s after starting on such a
    child, and the run they were to disturb was not."""
    for p in psutil.Process().children(recursive=True):
        try:
            # the built-in job runs under the bootstrap; its mode is in its environment
            argv = p.cmdline()
            if "dsanalyze.instrument.bootstrap" in argv \
                    and "torch.distributed.run" in p.parent().cmdline() \
                    and p.environ().get(rankenv.ENV_MODE) == mode:
                return [c for c in p.children() if argv_of(c) == argv]
        except (psutil.Error, AttributeError):  # ended meanwhile (its parent too: None)
            pass
    return []


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _confirmed(children: list[psutil.Process]) -> list[psutil.Process]:
    """Those of `children` that still run with the argv they had 0.5 s ago. On CI the burners
    once started on a child with the rank's argv and stopped 0.12 s later, before the run
    they were to disturb had begun to load: that child ended or changed within 0.12 s, most
    likely a helper between its fork and its exec (not reproduced here), a window a loaded
    machine widens."""
    argvs = {c.pid: argv_of(c) for c in children}
    time.sleep(0.5)
    return [c for c in children if _running(c) and argv_of(c) == argvs[c.pid]]


def _burn_while_loading(mode: str, burners: Burners, burned: list[float]) -> threading.Thread:
    """Start the burners once the first `mode` run's loader has a worker, stop them once those
    workers are gone: they starve its measured iterations, not the job's start-up. The
    workers are watched by their own handles (a scan of the process tree that misses them
    once would stop the burners early); `burned` gets the burners' start and stop (unix s)."""
    def wait() -> None:
        workers: list[psutil.Process] = []
        while not workers and not burners.stopped.wait(0.05):
            workers = _confirmed(_loader_workers(mode))
        if burners.stopped.is_set():
            return
        burners.__enter__()
        burned.append(time.time())
        while any(_running(w) for w in workers) and not burners.stopped.wait(0.1):
            pass
        burners.__exit__()
        burned.append(time.time())
    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
@needs_cgroups
@pytest.mark.parametrize("noisy", [
    # steady only on a quiet machine: other load widens the first two repeats' interval past
    # ±8% and a third is run, as the rule says it should be (make test-extended, not make test)
    pytest.param(False, marks=[pytest.mark.extended, pytest.mark.timing(
        reason="two repeats within ±8% need a machine quieter than the job's own 100 ms step "
               "noise; under load a third repeat is the right answer")]),
    pytest.param(True, marks=[pytest.mark.long, pytest.mark.timing(
        reason="a third repeat needs the burners' run to be the only disturbed one: when "
               "outside load disturbs the runs it is compared with as well, the two repeats "
               "can agree, and the stop is held to their own measured interval instead")])],
    ids=["steady", "noisy"])
def test_target_ci_stops_early_on_a_steady_job_and_repeats_a_noisy_one(small_dataset, tmp_path,
                                                                       noisy):
    """One image per 100 ms step: one worker keeps up, so cached and synthetic agree
    run after run and two repeats bring the prep stall within ±8%. Noisy: 12 CPU
    burners on the run's CPU while the first cached run's loader works (not during the
    job's start-up, which they would slow 13-fold) starve it, so the first cached run
    stalls far more than the second: the interval stays wider than ±8% and a third
    repeat is run (the most --max-repeats allows). On a loaded machine the runs it is
    compared with can be disturbed too (their own interference records say so), and two
    repeats may then agree: the stop is held to the interval of those two repeats. `make
    test-long` runs the noisy sweep (the stop after two repeats is also checked on committed
    runs, above, in `make test`); the steady sweep is in `make test-extended`."""
    argv = ["--data", small_dataset, "--modes", "synthetic,cached", "--cpus", 1, "-b", 1,
            "-j", 1, "--iters", 24, "--warmup", 3, "--sim-step-ms", 100, "--no-plots",
            "--target-ci", "8%", "--max-repeats", 3]
    prefix = tmp_path / "r"
    if not noisy:
        assert harness(*argv, "--prefix", prefix) == 0
        assert _repeats(prefix) == 2
        narrow = json.loads((prefix / "summary.json").read_text())["configs"][0]
        assert (narrow["prep_stall_pct_high"] - narrow["prep_stall_pct_low"]) / 2 <= 8
        return
    burners = Burners(launch.cpu_ids(1)[0], 12, 0)
    burned: list[float] = []
    stopper = _burn_while_loading("cached", burners, burned)  # the first cached run only
    try:
        assert harness(*argv, "--prefix", prefix) == 0
    finally:
        burners.__exit__()
        stopper.join()
    rates = {(r.spec.mode, r.spec.repeat): stalls.run_rate(r) for r in store.load_runs(prefix)}
    # the monitor saw the burners: the first cached run was disturbed on its CPU (during its
    # loading, about half of its wall time)
    first = rates[(Mode.CACHED, 1)]
    assert len(burned) == 2, f"the burners did not start and stop with its workers: {burned}"
    assert "cpu" in first.disturbed and first.others_cpu_pct > 30, (burned, first)
    compared = [k for k, r in rates.items() if k != (Mode.CACHED, 1) and k[1] <= 2
                and "cpu" in r.disturbed]
    if not compared:  # the burners' run alone was disturbed: it stands out, a third is run
        assert _repeats(prefix) == 3
        wide = json.loads((prefix / "summary.json").read_text())["configs"][0]
        assert (wide["prep_stall_pct_high"] - wide["prep_stall_pct_low"]) / 2 > 8
        return
    # outside load disturbed the runs it is compared with too (make test on a loaded
    # machine): the stop follows the interval of the first two repeats, as measured
    (two,) = stalls.breakdowns([r for r in store.load_runs(prefix) if r.spec.repeat <= 2])
    assert _repeats(prefix) == (3 if two.widest_pct() > 8 else 2), (compared, two.widest_pct())


def _rewritten(prefix: Path, run_id: str, **extra: object) -> None:
    """The stored run `run_id` with rank 0's `extra` keys replaced (`loader` merged)."""
    run = next(r for r in store.load_runs(prefix) if r.run_id == run_id)
    r0 = run.ranks[0]
    loader = {**r0.extra.get("loader", {}), **extra.pop("loader", {})}
    rank = dataclasses.replace(r0, extra={**r0.extra, **extra, "loader": loader})
    store.write_run(prefix, dataclasses.replace(run, ranks=[rank, *run.ranks[1:]]))


def test_a_step_sharing_its_cores_has_its_cached_runs_measured_three_times(tmp_path):
    """tests/data/script_cpu: pytorch/examples' script trained on the CPU with 3 workers at 1
    and 2 CPUs. At 1 CPU its step has one thread; at 2 its threads share both cores with the
    workers, and only that cached run is measured again, twice, unless told otherwise."""
    prefix = copy_of("script_cpu", tmp_path)
    runs = store.load_runs(prefix)
    specs = [r.spec for r in runs]
    sw = Sweep(runs[0].spec.job, prefix=str(prefix))
    assert [s.run_id for s in sweep.next_repeat(sw, specs, 2)] == ["cached-cpus2-r2"]
    assert [s.run_id for s in sweep.next_repeat(sw, specs, 3)] == ["cached-cpus2-r3"]
    assert sweep.next_repeat(sw, specs, 4) == []
    once = dataclasses.replace(sw, shared_core_runs=1)
    assert sweep.next_repeat(once, specs, 2) == []
    every = dataclasses.replace(sw, repeats=2)  # --repeats 2: every run twice, then a third
    assert len(sweep.next_repeat(every, specs, 2)) == len(specs)
    assert [s.run_id for s in sweep.next_repeat(every, specs, 3)] == ["cached-cpus2-r3"]
    two_nodes = dataclasses.replace(sw, job=dataclasses.replace(sw.job, nnodes=2))
    assert sweep.next_repeat(two_nodes, specs, 2) == []  # each node would judge its own runs
    with pytest.raises(ConfigError, match="--shared-core-runs"):
        dataclasses.replace(sw, shared_core_runs=0)


@pytest.mark.parametrize("extra", [{"device": "cuda:0"}, {"loader": {"workers": 0}},
                                   {"world_size": 2}])
def test_a_step_that_does_not_share_its_cores_is_measured_once(tmp_path, extra):
    """The same runs, had the step run on a GPU, the batches been loaded in the main process,
    or the step had a rank per CPU (one thread each, taking turns with the loader)."""
    prefix = copy_of("script_cpu", tmp_path)
    if "world_size" in extra:
        for r in store.load_runs(prefix):
            job = dataclasses.replace(r.spec.job, nproc_per_node=2)
            store.write_run(prefix, dataclasses.replace(r, spec=dataclasses.replace(r.spec,
                                                                                    job=job)))
    _rewritten(prefix, "cached-cpus2", **extra)
    runs = store.load_runs(prefix)
    sw = Sweep(runs[0].spec.job, prefix=str(prefix))
    assert sweep.next_repeat(sw, [r.spec for r in runs], 2) == []
    assert shares_cores(next(r for r in runs if r.run_id == "cached-cpus1")) is False


def test_the_built_in_job_on_the_sim_device_is_measured_once(tmp_path):
    prefix = copy_of("uncertainty_pair", tmp_path)
    runs = store.load_runs(prefix)
    sw = Sweep(runs[0].spec.job, prefix=str(prefix))
    assert sweep.next_repeat(sw, [r.spec for r in runs], 2) == []


@pytest.mark.slow
# 2 CPUs, more than a pytest-xdist worker of `make test` has here, and 21 s alone past its 10
# minutes: in `make test-extended` (no workers: every CPU); `make test` checks the rule on
# recorded runs (above) and the flag in every in-process harness run (conftest)
@pytest.mark.extended
def test_a_script_trained_on_the_cpu_gets_three_cached_runs_where_it_shares_its_cores(
        small_dataset, tmp_path, capsys):
    """The real harness on pytorch/examples' script (a step on the CPU, 1 worker): its cached
    run at 2 CPUs three times, each its own run, and the progress says why (1 CPU once: the
    rule on recorded runs, above)."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs")
    prefix = tmp_path / "r"
    assert harness("--data", small_dataset, "--prefix", prefix, "--modes", "cached", "--cpus",
                   2, "--iters", 4, "--warmup", 1, "--no-plots", "--no-advice",
                   "--shared-core-runs", 3, SCRIPTS / "train_examples.py", small_dataset,
                   "-j", 1, "-b", 8, "--img-size", 32) == 0
    runs = store.load_runs(prefix)
    assert sorted(r.run_id for r in runs) == ["cached-cpus2", "cached-cpus2-r2", "cached-cpus2-r3"]
    assert all(r.ok for r in runs)
    assert len({r.started_unix_s for r in runs}) == 3  # three measurements, none copied
    assert "the step runs on the CPU beside the workers" in capsys.readouterr().err
