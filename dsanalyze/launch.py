"""Run one RunSpec: cache state, cgroup, `torch.distributed.run`, results.

    result = run_one(spec, context)

1. Page cache: `cached`/`synthetic`/`loader` warm every dataset file from the
   harness (outside the job's cgroup); `disk` evicts every dataset file and
   reads back the job's libraries that were evicted meanwhile.
2. Resources: a cgroup with the CPU set and (disk) the read throttle, turned
   on when the training loader starts (`resources/throttle.py`); or, with
   `--no-cgroups`, CPU affinity alone, the throttle recorded as not
   enforced. No memory limit: a disk run's cache budget is held on the
   dataset's pages alone by the harness (`resources/datacache.py`).
3. The job: a wrapper joins the cgroup and execs `python -m
   torch.distributed.run ...`; output goes to a per-run log file; the run has
   a timeout; whatever is left in the cgroup is killed afterwards.
4. The ranks' records, the cgroup's counters, the monitor samples and the
   dataset's residency are assembled into a `RunResult`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import IO, Any

from dsanalyze import progress
from dsanalyze.config import Job, Mode, RunSpec, format_bytes
from dsanalyze.dataset import DatasetInfo
from dsanalyze.errors import ConfigError, FailureKind
from dsanalyze.instrument import rank as rankenv
from dsanalyze.monitor import InterferenceProbe, Monitor, diskstats_read_bytes
from dsanalyze.records import (
    Enforcement,
    How,
    IoRecord,
    Knob,
    RankRecord,
    Residency,
    RunResult,
    StallRecord,
    Status,
    ThrottleStart,
)
from dsanalyze.remote.runlink import RemoteData
from dsanalyze.resources import (
    cgroups,
    interrupts,
    libmaps,
    memroom,
    pagecache,
    reclaim,
    scratch,
    storage,
)
from dsanalyze.resources.cacheproc import LimiterProcess
from dsanalyze.resources.libmaps import MapsRecorder, tree_pids
from dsanalyze.resources.lifeline import Lifeline
from dsanalyze.resources.throttle import ThrottleGate

EVICT_TOLERANCE = 0.01  # fraction of the dataset allowed to stay resident before a disk run
BUILTIN_JOB = "dsanalyze.jobs.image_classification"  # run under the bootstrap, as a script
UNTIL_CI_MAX_ITERS = 1000  # the built-in job's most iterations with --until-ci and no --iters
BUILTIN_ITERS = 50  # the built-in job's measured iterations when neither --iters nor --epochs
NO_BLOCK_DEVICE = "the dataset is on a filesystem with no block device (overlay, tmpfs, NFS or FUSE)"
BOOTSTRAP = "dsanalyze.instrument.bootstrap"
WAIT_POLL_S = 0.5  # the wait on the job checks for a stop signal, an abort, a stall this often


@dataclass
class LaunchContext:
    """What every run of a sweep shares."""

    prefix: Path
    dataset: DatasetInfo
    hierarchy: cgroups.Hierarchy | None  # None: --no-cgroups or not permitted
    no_cgroup_reason: str = ""
    monitor_interval_s: float = 0.2
    hold_cache_budget: bool = True  # a disk run's budget held by the LimiterProcess
    drop_caches_globally: bool = False  # --drop-caches-globally: pages eviction left, dropped
    library_files: tuple[str, ...] = ()  # what the runs' processes mapped: warmed before disk
    # Several nodes (dsanalyze.nodes): called once the run is prepared, just
    # before the job starts, to wait for the other nodes; and polled while it
    # runs, returning why it must stop (another node lost or failed) or None.
    start_gate: Callable[[], None] | None = None
    should_abort: Callable[[], str | None] | None = None
    job_memory_seen_bytes: int | None = None  # the largest job memory of any run so far
    # the machine's parallel efficiency (`records.CpuScaling`), measured once per sweep
    # (`resources/cpuscale.py`) and stored with every run
    cpu_scaling: dict[str, Any] | None = None
    # data across a network (`remote/runlink.py`): shaped per run, counted, recorded
    remote: RemoteData | None = None
    # batches of an epoch of the training loader, counted by a run of the real loader: what
    # a synthetic run replays when the loader has no len() (a webdataset pipeline)
    epoch_batches: int | None = None


def cpu_ids(cpus: int | None) -> tuple[int, ...] | None:
    available = sorted(os.sched_getaffinity(0))
    if cpus is None:
        return None
    if cpus > len(available):
        raise ConfigError(f"--cpus {cpus} but only {len(available)} CPUs are available here: "
                          f"use at most {len(available)}")
    return tuple(available[:cpus])


def thread_budget(spec: RunSpec) -> int:
    budget = spec.resources.cpus or len(os.sched_getaffinity(0))
    return max(1, budget // spec.job.nproc_per_node)


def job_argv(spec: RunSpec) -> list[str]:
    """`python -m torch.distributed.run ... <job>`: never a home-made launcher."""
    job = spec.job
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node",
            str(job.nproc_per_node), "--max_restarts", "0", "--monitor_interval", "0.2"]
    if job.nnodes == 1 and job.master_addr is None and job.master_port is None:
        argv += ["--standalone"]
    else:
        argv += ["--nnodes", str(job.nnodes), "--node_rank", str(job.node_rank),
                 "--master_addr", job.master_addr or "127.0.0.1",
                 "--master_port", str(job.master_port or 29500)]
    # Each rank starts as the `enter` wrapper, which raises its own OOM score
    # before Python imports torch, so that under a memory limit the kernel
    # kills a rank, never the torchrun agent (whose survivors would hang).
    # "--": torchrun's argparse rejects a script option that abbreviates
    # several of its own (`--log`, `--max`, `--start`) even after the module.
    # Bound to the agent's life too: a rank runs in a session of its own, where
    # no signal to the agent's process group reaches it.
    argv += ["--no-python", "--", sys.executable, "-m", "dsanalyze.resources.enter",
             "--oom-score-adj", "1000", "--bind-to-parent", "any", "--", sys.executable]
    if job.script is None:
        argv += ["-m", BOOTSTRAP, "-m", BUILTIN_JOB, *builtin_args(job)]
    else:
        argv += ["-m", BOOTSTRAP, job.script, *job.script_args]
    return argv


def builtin_args(job: Job) -> list[str]:
    """The built-in job's own options; the mode and the measured window are in `job_env`."""
    args = ["--data", str(job.data_dir), "-a", job.arch, "-b", str(job.batch_size),
            "-j", str(job.workers), "--device", job.device,
            "--sim-step-ms", str(job.sim_step_ms), "--loader", job.loader, "--seed", str(job.seed)]
    if job.amp:
        args.append("--amp")
    return args


def job_env(spec: RunSpec, run_dir: Path) -> tuple[dict[str, str], dict[str, Any]]:
    """Environment of the job, and the thread settings recorded with the run."""
    env = dict(os.environ)
    threads = thread_budget(spec)
    user_omp = "OMP_NUM_THREADS" in os.environ
    # elastic_launch does not set OMP_NUM_THREADS, and torch sizes its pool from
    # the affinity at start-up: set it from the CPU budget unless the user did.
    if not user_omp:
        env["OMP_NUM_THREADS"] = str(threads)
    env.update({
        rankenv.ENV_RUN_DIR: str(run_dir),
        rankenv.ENV_MODE: spec.mode.value,
        rankenv.ENV_WARMUP: str(spec.job.warmup),
        rankenv.ENV_THREADS: env["OMP_NUM_THREADS"],
        "PYTHONUNBUFFERED": "1",
    })
    iters = spec.job.iters
    if iters is None and spec.job.epochs is None and spec.job.script is None:
        # the built-in job trains until it is stopped; --until-ci: at most UNTIL_CI_MAX_ITERS
        iters = BUILTIN_ITERS if spec.job.until_ci_pct is None else UNTIL_CI_MAX_ITERS
    if spec.job.until_ci_pct is not None:
        env[rankenv.ENV_UNTIL_CI] = str(spec.job.until_ci_pct)
        env[rankenv.ENV_MIN_ITERS] = str(spec.job.min_iters)
    if iters is not None:
        env[rankenv.ENV_ITERS] = str(iters)
    if spec.job.epochs is not None:
        env[rankenv.ENV_EPOCHS] = str(spec.job.epochs)
    if spec.job.loader_index is not None:
        env[rankenv.ENV_LOADER_INDEX] = str(spec.job.loader_index)
    # OMP_WAIT_POLICY as the job inherits it (None: unset, where OpenMP threads spin a while
    # before they sleep): the note on a step that shares its cores reads it
    return env, {"omp_num_threads": int(env["OMP_NUM_THREADS"]), "omp_set_by_user": user_omp,
                 "thread_budget_per_rank": threads,
                 "omp_wait_policy": env.get("OMP_WAIT_POLICY")}


@functools.cache
def versions() -> dict[str, str]:
    """Package versions and dsanalyze's git SHA: the same for every run of a harness."""
    out = {"python": sys.version.split()[0]}
    for pkg in ("torch", "torchvision", "nvidia-dali-cuda120", "nvidia-ml-py", "dsanalyze"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5)
        if sha.returncode == 0:
            out["dsanalyze_git_sha"] = sha.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def prepare_cache(spec: RunSpec, dataset: DatasetInfo, library_files: tuple[str, ...] = (),
                  drop_globally: bool = False) -> dict[str, Any]:
    """Warm (cached modes) or evict (disk) the dataset; record what stayed resident. Before
    a disk run, the job's libraries evicted since an earlier run are read back. A remote
    run's data is warm on the server's side: the link is what it reads across."""
    t0 = time.perf_counter()
    if spec.mode is not Mode.DISK or spec.resources.remote:
        pagecache.warm(dataset.files)
        return {"action": pagecache.CacheAction.WARMED.value, "prepare_s": time.perf_counter() - t0,
                "resident_before_bytes": pagecache.resident_bytes(dataset.files),
                "warmed_bytes": dataset.total_bytes}
    device = storage.probe(dataset.files)  # the device's own speed, for the what-if model
    state = pagecache.evict_dataset(dataset.files, int(EVICT_TOLERANCE * dataset.total_bytes),
                                    drop_globally)
    libs, lib_bytes = libmaps.warm_missing(library_files, dataset.files)
    return {**state, "prepare_s": time.perf_counter() - t0, "storage_device": device,
            "libraries_warmed_files": libs, "libraries_warmed_bytes": lib_bytes}


def subset_for(spec: RunSpec, ctx: LaunchContext, run_dir: Path) -> memroom.Subset | None:
    """Data larger than the page cache's room: the files a run of another mode than disk
    warms (and, cached and loader runs, reads alone), listed in the run's directory."""
    if spec.mode is Mode.DISK:
        return None
    return memroom.subset(ctx.dataset, memroom.page_cache_room(), ctx.job_memory_seen_bytes,
                          spec.job.cached_subset, run_dir)


def plan_limits(spec: RunSpec, ctx: LaunchContext) -> tuple[cgroups.Limits, Enforcement]:
    """The limits to enforce, and how each knob is held (`records.Enforcement`)."""
    res = spec.resources
    ids = cpu_ids(res.cpus)
    device = cgroups.whole_disk(ctx.dataset.root)
    read_bps = res.storage_read_bps if spec.mode is Mode.DISK else None
    cache = None
    if spec.mode is Mode.DISK and res.cache.cache_bytes is not None:
        cache = Knob(How.EVICTION) if ctx.hold_cache_budget else Knob(
            How.NOT_ENFORCED, "the cache limiter was turned off")
    if ctx.hierarchy is None:
        off = Knob(How.NOT_ENFORCED, ctx.no_cgroup_reason or "--no-cgroups")
        return cgroups.Limits(cpus=ids, device=device), Enforcement(
            cpus=Knob(How.AFFINITY) if ids else None, cache=cache,
            storage_bw=off if read_bps is not None else None, dataset_disk=device)
    bw = None
    if read_bps is not None:
        bw = Knob(How.CGROUP) if device else Knob(How.NOT_ENFORCED, NO_BLOCK_DEVICE)
        read_bps = read_bps if device else None
    return (cgroups.Limits(cpus=ids, read_bps=read_bps, device=device),
            Enforcement(cpus=Knob(How.CGROUP) if ids else None, cache=cache, storage_bw=bw,
                        cgroup_version=ctx.hierarchy.version, dataset_disk=device))


def _run_env(spec: RunSpec, ctx: LaunchContext, limits: cgroups.Limits, run_dir: Path,
             subset: memroom.Subset | None) -> tuple[dict[str, str], dict[str, Any]]:
    """The ranks' environment (`job_env`) and threads, with what this run adds: the served
    data's endpoint, the epoch length an earlier run counted, the cached subset, the gate
    that holds the loader until the throttle is on."""
    env, threads = job_env(spec, run_dir)
    env.update(ctx.remote.env() if ctx.remote is not None else {})
    if ctx.epoch_batches is not None:
        env[rankenv.ENV_EPOCH_BATCHES] = str(ctx.epoch_batches)
    if subset is not None and spec.mode in (Mode.CACHED, Mode.LOADER):
        env[rankenv.ENV_SUBSET] = str(subset.list_path)  # prep measured on the subset alone
    if limits.read_bps is not None and ctx.hierarchy is not None:
        env[rankenv.ENV_THROTTLE_GATE] = "1"  # the throttle comes on at the loader's start
    return env, threads


def run_one(spec: RunSpec, ctx: LaunchContext) -> RunResult:
    """Measure one run and return its result (failed runs too). Never leaves a cgroup."""
    run_dir, log_path = _run_paths(spec, ctx)
    limits, enforced = plan_limits(spec, ctx)
    subset = subset_for(spec, ctx, run_dir)
    cache_state = prepare_cache(spec, subset.dataset if subset else ctx.dataset,
                                ctx.library_files, ctx.drop_caches_globally)
    if subset is not None:
        cache_state["subset"] = subset.to_dict()
    shape = ctx.remote.prepare(spec) if ctx.remote is not None else None
    env, threads = _run_env(spec, ctx, limits, run_dir, subset)
    disk_before = diskstats_read_bytes(limits.device)
    link_before = ctx.remote.counts() if ctx.remote is not None else {}
    started, t0 = time.time(), time.perf_counter()
    ex = execute(spec, ctx, limits, env, log_path, run_dir)
    job_peak = _job_memory_peak(ex.monitor.samples)
    # a disk run's code is not measured (no Pss there): the other modes' runs measure it
    _note_job_memory(ctx, job_peak, None if spec.mode is Mode.DISK else ex.mapped_files,
                     ex.code_pss_bytes)
    disk_after = diskstats_read_bytes(limits.device)
    link = ctx.remote.record(shape, link_before) if ctx.remote is not None and shape is not None \
        else None
    ranks, rank_errors = collect_ranks(run_dir, local_ranks(spec.job))
    status, error, failure = classify(spec, ex, ranks, rank_errors, log_path)
    io = IoRecord(
        cache_state=cache_state, resident_after_bytes=pagecache.resident_bytes(ctx.dataset.files),
        dataset_bytes=ctx.dataset.total_bytes, counters=ex.counters,
        read_bytes=ex.counters.get("read_bytes"),
        read_bytes_source="cgroup" if "read_bytes" in ex.counters else None,
        disk_read_bytes_machine=(disk_after - disk_before) if disk_before is not None
        and disk_after is not None else None,
        memory_peak_bytes=ex.counters.get("memory_peak_bytes") or ex.monitor.peak("tree_rss_bytes"),
        job_memory_peak_bytes=job_peak, interference=ex.interference,
        mapped_files=ex.mapped_files, residency=ex.residency, throttle=ex.throttle)
    result = RunResult(
        spec=spec, status=status, error=error, failure=failure, ranks=tuple(ranks),
        dataset=ctx.dataset.record(), enforced=enforced,
        environment=_environment(spec, ctx, ex, threads, ranks, rank_errors, log_path), io=io,
        monitor=tuple(ex.monitor.samples), started_unix_s=started,
        duration_s=time.perf_counter() - t0, log_path=str(log_path), stall=ex.stall, link=link)
    _remove_run_dir(run_dir)
    return result


def _run_paths(spec: RunSpec, ctx: LaunchContext) -> tuple[Path, Path]:
    """(the run's scratch directory, emptied; its log's path), both made."""
    run_dir = ctx.prefix / "tmp" / spec.run_id
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    log_path = ctx.prefix / "logs" / f"{spec.run_id}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    return run_dir, log_path


def _remove_run_dir(run_dir: Path) -> None:
    shutil.rmtree(run_dir, ignore_errors=True)
    with contextlib.suppress(OSError):  # no empty tmp/ left in the prefix (kept if not empty)
        run_dir.parent.rmdir()


@dataclass(frozen=True)
class Execution:
    """What the job's process tree did, as seen from outside it."""

    rc: int | None  # exit status of torchrun; None: killed (timeout, another node lost)
    status: Status
    error: str | None
    counters: dict[str, Any]  # the cgroup's at the end ({} without cgroups)
    interference: dict[str, Any] | None
    monitor: Monitor
    mapped_files: tuple[str, ...] | None  # what the job's processes mapped (libraries)
    residency: Residency | None  # the dataset's pages, held by the cache limiter (disk)
    throttle: ThrottleStart | None  # when the throttle came on, what was read after (disk)
    stall: StallRecord | None = None  # what a stalled job was doing when it was stopped
    code_pss_bytes: int | None = None  # the job's share of the mapped files' pages, at peak


def execute(spec: RunSpec, ctx: LaunchContext, limits: cgroups.Limits, env: dict[str, str],
            log_path: Path, run_dir: Path) -> Execution:
    """Start the job in its cgroup (or under affinity), wait for it, and stop what is left."""
    with ExitStack() as stack:
        # Exits in reverse: the limiter stops, then the cgroup is removed, then the reaper goes.
        line = stack.enter_context(Lifeline())
        # removed after the cgroup (entered before it): once every process of the job is gone
        env = scratch.job_env(env, stack.enter_context(scratch.job_tmpdir(line)))
        cg, gate = _enter_cgroup(stack, spec, ctx, limits, line, run_dir)
        log = stack.enter_context(open(log_path, "w"))
        if ctx.start_gate is not None:
            ctx.start_gate()
        limiter = stack.enter_context(cache_limiter(spec, ctx))  # watching before the job opens
        probe = InterferenceProbe(limits.cpus, limits.device, cg.dirs.get("cpuacct") if cg else None)
        probe.start()
        argv = job_argv(spec) if ctx.remote is None else ctx.remote.argv(job_argv(spec))
        proc = start_bound(argv, env, log, line, cg, limits)
        beats = Path(env[rankenv.ENV_RUN_DIR])  # the ranks' heartbeats (`progress`)
        maps = stack.enter_context(MapsRecorder(cg.pids if cg else lambda: tree_pids(proc.pid),
                                                file_pss=_pss_while(spec, beats)))
        monitor = Monitor(proc.pid, cg.counters if cg else None, ctx.monitor_interval_s,
                          pids=cg.pids if cg else None)
        watchdog = progress.Watchdog(beats, spec.job.stall_timeout_s, spec.job.startup_timeout_s,
                                      log_path=log_path)
        try:
            with monitor:
                rc, status, error, stall = _wait_watched(proc, spec, ctx, watchdog, cg, log_path)
        finally:
            _kill_group(proc)
            counters = cg.counters() if cg else {}
            # the gate's warm of the job's code: the tool's reads, not another process's
            interference = probe.stop(counters.get("read_bytes"),
                                      gate.harness_read_bytes if gate is not None else 0)
            if cg:
                cg.kill()
    return Execution(rc, status, error, counters, interference, monitor, tuple(maps.files),
                     limiter.record() if limiter is not None else None,
                     gate.record(counters.get("read_bytes")) if gate else None, stall,
                     maps.file_pss_peak_bytes)


def start_bound(argv: list[str], env: dict[str, str], log: IO[str], line: Lifeline,
                cg: cgroups.RunCgroup | None = None, limits: cgroups.Limits | None = None
                ) -> subprocess.Popen:
    """Start the job's `argv` in a session of its own, output to `log`, in its cgroup (or CPU
    set) and bound to the harness's life (`bound_argv`), its process group watched by `line`'s
    reaper: a measured run's and a script's discovery run's (`datafind`)."""
    proc = subprocess.Popen(bound_argv(cg, limits or cgroups.Limits(), line) + argv,
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=env, start_new_session=True)
    line.watch_group(proc.pid)
    return proc


def _wait_watched(proc: subprocess.Popen, spec: RunSpec, ctx: LaunchContext,
                  watchdog: progress.Watchdog, cg: cgroups.RunCgroup | None, log_path: Path
                  ) -> tuple[int | None, Status, str | None, StallRecord | None]:
    """Wait for the job (`_wait_job`); a stalled one's record (`progress.stall_record`) taken
    before anything is killed, and its facts added to the error."""
    rc, status, error = _wait_job(proc, spec.job.timeout_s, ctx.should_abort, watchdog.check)
    if status is not Status.STALLED:
        return rc, status, error, None
    stall = progress.stall_record(watchdog, cg.pids() if cg else tree_pids(proc.pid),
                                  cg.counters() if cg else {}, log_path)
    return rc, status, f"{error}: {progress.stall_text(stall)}", stall


def _pss_while(spec: RunSpec, beats: Path) -> Callable[[], bool] | None:
    """When the job's code Pss may be read (`libmaps.MapsRecorder`): while no rank has begun
    an iteration past its warm-up (each rank's heartbeat counts the batches it took), so that
    the page-table walks stay out of the window every mode's rate is read on; never in a
    disk run, whose cold epoch is reported on its own (its code is measured by the others)."""
    if spec.mode is Mode.DISK:
        return None
    return lambda: max(progress.read_progress(beats).values(), default=0) <= spec.job.warmup


def _enter_cgroup(stack: ExitStack, spec: RunSpec, ctx: LaunchContext, limits: cgroups.Limits,
                  line: Lifeline, run_dir: Path
                  ) -> tuple[cgroups.RunCgroup | None, ThrottleGate | None]:
    """The run's cgroup (None without a hierarchy) and its throttle gate (None without a
    throttle), entered on `stack`; the lifeline watches the cgroup's directories."""
    if ctx.hierarchy is None:
        return None, None
    # the throttle comes on when the training loader starts (ThrottleGate)
    cg = stack.enter_context(cgroups.RunCgroup.create(
        spec.run_id, replace(limits, read_bps=None), ctx.hierarchy))
    line.watch_cgroups(sorted(set(cg.dirs.values())))
    if cg.listed:
        line.unlist_after(*cg.listed)
    if limits.read_bps is None or not limits.device:
        return cg, None
    return cg, stack.enter_context(ThrottleGate(cg, limits.device, limits.read_bps, run_dir,
                                                ctx.dataset.files))


def bound_argv(cg: cgroups.RunCgroup | None, limits: cgroups.Limits, line: Lifeline
               ) -> list[str]:
    """argv prefix that puts the job in its cgroup (or CPU set), bound to the harness's life."""
    if cg is not None:
        wrapper = cg.join_argv()
    else:
        wrapper = [sys.executable, "-m", "dsanalyze.resources.enter"]
        wrapper += ["--cpus", ",".join(map(str, limits.cpus))] if limits.cpus else []
        wrapper += ["--"]
    wrapper[-1:-1] = line.bind_args()  # before the "--": the job dies with the harness
    return wrapper


def cache_limiter(spec: RunSpec, ctx: LaunchContext
                  ) -> contextlib.AbstractContextManager[LimiterProcess | None]:
    """The dataset's page-cache limiter of a disk run with a budget, or a context that does
    nothing."""
    budget = spec.resources.cache.cache_bytes
    if spec.mode is not Mode.DISK or budget is None or not ctx.hold_cache_budget:
        return contextlib.nullcontext()
    return LimiterProcess(ctx.dataset.files, budget)


def classify(spec: RunSpec, ex: Execution, ranks: list[RankRecord],
             rank_errors: dict[int, rankenv.RankFailure], log_path: Path) -> tuple[Status, str | None, FailureKind | None]:
    """How the run ended: the wait's verdict, unless the kernel OOM-killed or a rank failed."""
    if ex.status != Status.OK:
        return ex.status, ex.error, None
    if ex.counters.get("oom_kills", 0) > 0:
        # dsanalyze sets no memory limit: the kernel ran out of memory for the job itself
        peak = format_bytes(ex.counters.get("memory_peak_bytes"))
        return Status.OOM, (f"the job ran out of memory (its own: dsanalyze sets no memory "
                            f"limit; peak {peak}): lower -j or the batch size"), None
    if ex.rc != 0 or len(ranks) < spec.job.nproc_per_node:
        failure = next(iter(rank_errors.values())).kind if rank_errors else FailureKind.CRASH
        return Status.FAILED, _failure_message(ex.rc, rank_errors, log_path), failure
    return Status.OK, None, None


def _environment(spec: RunSpec, ctx: LaunchContext, ex: Execution, threads: dict[str, Any],
                 ranks: list[RankRecord], rank_errors: dict[int, rankenv.RankFailure],
                 log_path: Path) -> dict[str, Any]:
    """Versions, threads, host, GPU and argv of the run; the script's own exit if it called one."""
    environment = {"versions": dict(versions()), "threads": threads, "host": socket.gethostname(),
                   "cpus_available": len(os.sched_getaffinity(0)), "gpu": ex.monitor.gpu_status,
                   "cgroup_version": ctx.hierarchy.version if ctx.hierarchy else None,
                   "argv": job_argv(spec),
                   "page_reclaim": [s.to_dict() for s in reclaim.schemes()]}
    if ctx.cpu_scaling is not None:
        environment["cpu_scaling"] = ctx.cpu_scaling
    if ranks:
        environment["rank_extra"] = ranks[0].extra
    exit_code = script_exit_code(rank_errors)
    if exit_code is not None:
        environment["script_exit"] = {"code": exit_code, "lines": script_error_lines(log_path)}
    first = next(iter(rank_errors.values()), None)
    if first is not None:  # the first rank to fail: what it raised, how far its loader got
        environment["first_failure"] = {"rank": first.rank, "exception": first.exception,
                                        "batches": first.batches}
    return environment


def _wait_job(proc: subprocess.Popen, timeout_s: float,
              should_abort: Callable[[], str | None] | None,
              stalled: Callable[[], str | None] | None = None, poll_s: float = WAIT_POLL_S
              ) -> tuple[int | None, Status, str | None]:
    """Wait for the job: (exit status, run status, error). Polls `should_abort` and `stalled`
    (the progress watchdog) every `poll_s`. Ctrl-C or SIGTERM meanwhile is raised between two
    waits, never inside `Popen.wait` (`resources/interrupts.py`: the lock it would leave held
    would hang the job's stop)."""
    deadline = time.monotonic() + timeout_s
    with interrupts.deferred():
        while True:
            interrupts.check()
            try:
                return proc.wait(timeout=min(poll_s, max(0.0, deadline - time.monotonic()))), \
                    Status.OK, None
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() >= deadline:
                return None, Status.TIMEOUT, (f"timed out after {timeout_s:.0f} s: "
                                              "raise timeout_s or lower --iters")
            for why, status in ((should_abort, Status.FAILED), (stalled, Status.STALLED)):
                reason = why() if why is not None else None
                if reason is not None:
                    return None, status, reason


def local_ranks(job: Job) -> range:
    """Global ranks of this node's processes (torchrun numbers them node by node)."""
    return range(job.node_rank * job.nproc_per_node, (job.node_rank + 1) * job.nproc_per_node)


def _note_job_memory(ctx: LaunchContext, job_peak: int | None,
                     mapped: tuple[str, ...] | None, code_pss: int | None) -> None:
    """The largest memory of the job so far, its code's pages included (what a cached subset
    must leave room for: `memroom.code_bytes`)."""
    job_memory = (job_peak or 0) + memroom.code_bytes(mapped, ctx.dataset.files, code_pss)
    ctx.job_memory_seen_bytes = max(ctx.job_memory_seen_bytes or 0, job_memory) or None


def _job_memory_peak(samples: list[dict[str, Any]]) -> int | None:
    """Peak of the job's own (not reclaimable) memory: anonymous + shared memory.

    Page cache charged to the cgroup (libraries read for the first time) is
    left out: the kernel reclaims it under a limit; anon and shmem it cannot.
    """
    peaks = [s["anon_bytes"] + s.get("shmem_bytes", 0) for s in samples if "anon_bytes" in s]
    if peaks:
        return int(max(peaks))
    rss = [s["tree_rss_bytes"] for s in samples if "tree_rss_bytes" in s]
    return int(max(rss)) if rss else None


def _kill_group(proc: subprocess.Popen) -> None:
    """Stop the launcher's whole session: torchrun, ranks and workers."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=5)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def collect_ranks(run_dir: Path, expected: range
                   ) -> tuple[list[RankRecord], dict[int, rankenv.RankFailure]]:
    """This node's rank records, and the failures of crashed ranks, the first to crash first."""
    import json

    ranks, errors, when = [], {}, {}
    for r in expected:
        rec = run_dir / f"rank{r}.json"
        if rec.is_file():
            ranks.append(RankRecord.from_dict(json.loads(rec.read_text())))
        err = run_dir / f"rank{r}.error"
        if err.is_file():
            errors[r] = rankenv.RankFailure.from_dict(json.loads(err.read_text()))
            when[r] = err.stat().st_mtime_ns
    # The root cause is the earliest crash: the others often fail after it
    # (a collective whose peer is gone), with a less useful message.
    return ranks, {r: errors[r] for r in sorted(errors, key=lambda r: (when[r], r))}


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def script_exit_code(rank_errors: dict[int, rankenv.RankFailure]) -> int | None:
    """The code of the first crashed rank's `SystemExit` (the script's own `sys.exit`), if any."""
    first = next(iter(rank_errors.values()), None)
    if first is None or first.exception != "SystemExit":
        return None
    return int(first.message) if re.fullmatch(r"-?\d+", first.message.strip()) else None


def script_error_lines(log_path: Path, most: int = 4) -> list[str]:
    """The script's own error lines in the run's log: argparse's `prog: error: ...`, else its
    `usage:` line, else lines that say error (torchrun's report of the failure left out)."""
    try:
        lines = [ln.rstrip() for ln in log_path.read_text(errors="replace").splitlines()]
    except OSError:
        return []
    own = [ln for ln in lines if re.match(r"\S+: error: ", ln)] or \
        [ln for ln in lines if ln.startswith("usage: ")]
    if not own:
        own = [ln for ln in lines if re.search(r"\berror\b", ln, re.I)
               and "torch.distributed" not in ln and "ChildFailedError" not in ln]
    return own[-most:]


DEVICE_ASSERT = "device-side assert triggered"  # torch's CUDA error for a kernel's assert


def device_assertions(log_path: Path, most: int = 1) -> list[str]:
    """The kernels' own assertion lines in the run's log (`file:line: kernel: block: [..],
    thread: [..] Assertion `cond` failed.`), the condition alone: a CUDA error says only
    that a device-side assert fired; which one is on the job's stderr (a class index out of
    range: `t >= 0 && t < n_classes`)."""
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return []
    found = re.findall(r"(Assertion `.*?` failed)", text)
    return list(dict.fromkeys(found))[-most:]


def usage_error(job: Job, lines: list[str], log_path: Path | str | None) -> ConfigError:
    """The script stopped at once with its own usage error (argparse, exit 2): most often a
    harness option written after the script, which the script was given instead."""
    said = "; ".join(lines) or "no message"
    args = " ".join(job.script_args)
    return ConfigError(f"the script {Path(job.script or '').name} stopped at once with its own "
                       f"usage error: {said} (its arguments: {args or 'none'}; options for the "
                       "harness go before the script: python harness.py [options] SCRIPT "
                       f"[script args]; log: {log_path})")


def _failure_message(rc: int | None, rank_errors: dict[int, rankenv.RankFailure],
                     log_path: Path) -> str:
    if rank_errors:
        first = next(iter(rank_errors.values()))  # the first to crash
        if first.kind is FailureKind.CORRUPT_SAMPLE:  # names the file and what to do
            return f"{first.message} (log: {log_path})"
        said = script_error_lines(log_path, 1) if script_exit_code(rank_errors) else \
            device_assertions(log_path, 1) if DEVICE_ASSERT in first.message else []
        return (f"rank {first.rank} crashed: {first.line}"
                + "".join(f": {line}" for line in said) + f" (log: {log_path})")
    tail = ""
    try:
        tail = _last_line(log_path.read_text()[-4000:])
    except OSError:
        pass
    return f"the job exited with status {rc}: {tail} (log: {log_path})"
