#!/usr/bin/env python3
"""Disk mode's matrix (issue 25): every combination, interrupted and resumed, checked from
the stored records.

    python bench/disk_matrix.py [--dir /tmp/dsanalyze-matrix] [--images 400]
                                [--stall-timeout 300] [--only builtin|script]

A dataset of `--images` JPEGs (make-dataset, `--size`, 4 classes); each sweep on its own
copy, `--parallel` side by side. The built-in job (`--device sim`, 2 ms steps): one sweep
per modes `disk` and `synthetic,cached,disk` and `-j 1` and `-j 4` (-j takes one value),
each with `--cache 0,25%,100% --storage-bw 2M,none --repeats 2 --epochs 2`. A user-style
script, tests/scripts/train_examples.py (pytorch/examples' ImageFolder + resnet18, 16 px,
its own -j): `--script-sweeps` (default `disk` at -j 4) with `--cache 25%,100%
--storage-bw 2M` (a CPU model on a 2-core machine: its whole matrix would take hours). Each
sweep is started, SIGINTed once `--interrupt-after` of its runs are stored, and then run
again with `--resume` to completion.

Checked from the records: every run of the matrix stored and ok; none OOM-killed
(`io.counters.oom_kills` 0, status not oom) nor stalled; every disk run's dataset
residency (`io.residency`, sampled by the harness's limiter) within ±5% of its budget
from the sample that first reached 95% of it on (the cache full; a budget of 0 holds
only the files the job has open: their bytes are printed, not a percentage); and
/proc/vmstat's `drop_pagecache` unchanged across the whole matrix. A table per run, then
the figure line, last.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dsanalyze.store import load_runs, runs_dir  # noqa: E402

SCRIPT = ROOT / "tests" / "scripts" / "train_examples.py"
MODES = ("disk", "synthetic,cached,disk")
WORKERS = (1, 4)
CELLS = {"builtin": ("0,25%,100%", "2M,none"), "script": ("25%,100%", "2M")}  # --cache, -bw
MATRIX = ["--repeats", "2",
          "--epochs", "2", "--warmup", "2", "-b", "8", "--no-plots", "--no-advice"]


def drop_pagecache_count() -> int:
    """Times anyone dropped the machine's whole page cache (/proc/vmstat)."""
    counts = dict(line.split() for line in Path("/proc/vmstat").read_text().splitlines())
    return int(counts.get("drop_pagecache", 0))


def make_data(data: Path, images: int, size: str) -> None:
    if data.is_dir() and len(list(data.rglob("*.jpg"))) == images:
        return
    subprocess.run([sys.executable, "-m", "dsanalyze.cli", "make-dataset", str(data),
                    "--images", str(images), "--classes", "4", "--size", size,
                    "--seed", "25"], check=True)


def stored(prefix: Path) -> int:
    d = runs_dir(prefix)
    return len(list(d.glob("*.json"))) if d.is_dir() else 0


def harness_argv(prefix: Path, data: Path, job: str, modes: str, workers: int,
                 stall_timeout_s: float) -> list[str]:
    argv = [sys.executable, str(ROOT / "harness.py"), "--prefix", str(prefix), "--data",
            str(data), "--modes", modes, "-j", str(workers), "--stall-timeout",
            str(stall_timeout_s), "--cache", CELLS[job][0], "--storage-bw", CELLS[job][1],
            *MATRIX]
    if job == "builtin":
        return [*argv, "--device", "sim", "--sim-step-ms", "2"]
    return [*argv, str(SCRIPT), str(data), "-a", "resnet18", "--img-size", "16", "-b", "8",
            "-j", str(workers)]


def interrupted_then_resumed(argv: list[str], prefix: Path, after: int) -> tuple[int, int]:
    """Start the sweep, SIGINT it once `after` runs are stored, then `--resume` it.
    Returns (runs stored when interrupted, the resumed sweep's exit status)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    log = open(prefix.parent / f"{prefix.name}.log", "w")  # noqa: SIM115 (both runs)
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    while proc.poll() is None and stored(prefix) < after:
        time.sleep(0.5)
    at = stored(prefix)
    if proc.poll() is None:
        time.sleep(1.0)  # into the next run: interrupted mid-run
        proc.send_signal(signal.SIGINT)
    proc.wait()
    with log:
        resume = [*argv[:2], "--resume", *argv[2:]]  # before the script: not one of its args
        return at, subprocess.run(resume, env=env, stdout=log,
                                  stderr=subprocess.STDOUT).returncode


def residency_error(run) -> tuple[float | None, int | None]:
    """(worst |resident - budget| / budget over the full-cache samples, or None; for a
    budget of 0, the most bytes seen resident, else None)."""
    held = run.io.residency
    if held is None:
        return None, None
    if held.budget_bytes == 0:
        return None, max(held.sample_bytes, default=0)
    filled = held.filled()
    if not filled:
        return None, None
    return max(abs(b - held.budget_bytes) for b in filled) / held.budget_bytes, None


def check(prefix: Path, expected: int) -> tuple[list[str], list[str], list[float], list[float]]:
    """Rows of the table, failures, residency errors of the disk runs with a budget, the
    limiter's CPU seconds in each run it held."""
    rows, failures, errors, cpu = [], [], [], []
    runs = load_runs(prefix)
    if len(runs) != expected:
        failures.append(f"{prefix.name}: {len(runs)} runs stored, {expected} expected")
    for run in sorted(runs, key=lambda r: r.run_id):
        oom = int(run.io.counters.get("oom_kills", 0) or 0)
        err, zero_bytes = residency_error(run)
        disk = run.spec.mode.value == "disk"
        held = run.io.residency
        rows.append(f"{prefix.name:28s} {run.run_id:40s} {run.status.value:8s} {oom:3d} "
                    + (f"{100 * err:6.2f}%" if err is not None else
                       f"{zero_bytes / 1024:5.0f}Ki" if zero_bytes is not None else "      -")
                    + (f" {len(held.filled()):4d} {held.cpu_s:5.2f}s {'gated' if held.gated else ''}"
                       if held else "    -"))
        if held:
            cpu.append(held.cpu_s)
        if oom or run.status.value == "oom":
            failures.append(f"OOM {run.run_id}: {run.status.value} oom_kills={oom} {run.error}")
        elif run.status.value == "stalled":
            failures.append(f"STALLED {run.run_id}: {run.error}")
        elif not run.ok:
            failures.append(f"FAILED {run.run_id}: {run.status.value} {run.error}")
        if disk and held is None and run.spec.resources.cache.cache_bytes is not None:
            failures.append(f"{run.run_id}: no residency recorded")
        if err is not None:
            errors.append(err)
            if err > 0.05:
                failures.append(f"{run.run_id}: residency {100 * err:.1f}% off the budget")
        elif disk and zero_bytes is None and held is not None:
            failures.append(f"{run.run_id}: the cache never filled ({held.sample_bytes[-3:]})")
    return rows, failures, errors, cpu


def expected_runs(job: str, modes: str) -> int:
    """Runs of a sweep: its cache x throttle cells (+ synthetic and cached), twice."""
    cache, bw = CELLS[job]
    cells = len(cache.split(",")) * len(bw.split(","))
    return 2 * (cells + (0 if modes == "disk" else 2))


def one_sweep(work: Path, job: str, modes: str, j: int, a: argparse.Namespace
              ) -> tuple[list[str], list[str], list[float], list[float]]:
    """A sweep on its own copy of the data (sweeps run side by side: one's limiter must not
    see another's reads), interrupted, resumed, and checked."""
    name = f"{job}-{modes.replace(',', '+')}-j{j}"
    data, prefix = work / f"data-{name}", work / name
    if not data.is_dir():
        shutil.copytree(work / "data", data)
    shutil.rmtree(prefix, ignore_errors=True)
    argv = harness_argv(prefix, data, job, modes, j, a.stall_timeout)
    at, rc = interrupted_then_resumed(argv, prefix, a.interrupt_after)
    print(f"# {name}: SIGINT with {at} runs stored; --resume exit {rc}", flush=True)
    rows, failures, errors, cpu = check(prefix, expected_runs(job, modes))
    if at >= expected_runs(job, modes):
        failures.append(f"{name}: finished before the SIGINT")
    if rc != 0:
        failures.append(f"{name}: the resumed sweep exited {rc}")
    return rows, failures, errors, cpu


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", default="/tmp/dsanalyze-matrix")
    p.add_argument("--images", type=int, default=400)
    p.add_argument("--size", default="160x120", help="JPEGs of about 10 KB: a 25%% budget "
                   "holds 100 of them, so that a file the job has open is 1%% of it")
    p.add_argument("--stall-timeout", type=float, default=300.0,
                   help="generous: a run starved of CPU (nice 19) is not a stalled one")
    p.add_argument("--interrupt-after", type=int, default=2)
    p.add_argument("--only", choices=("builtin", "script"))
    p.add_argument("--script-sweeps", default="disk:4",
                   help="the user script's sweeps, MODES:J,... ('+' for ',' in MODES)")
    p.add_argument("--script-cells", choices=("short", "full"), default="short",
                   help="the script's --cache and --storage-bw: short (25%%,100%% at 2M) or "
                        "full (the built-in job's 0,25%%,100%% x 2M,none)")
    p.add_argument("--parallel", type=int, default=4, help="sweeps side by side")
    p.add_argument("--check-only", action="store_true",
                   help="run nothing: check the sweeps stored under --dir")
    a = p.parse_args()
    if a.script_cells == "full":
        CELLS["script"] = CELLS["builtin"]
    # a shell's background job starts with SIGINT ignored, and a child inherits that: the
    # harness must see the SIGINT this bench sends
    signal.signal(signal.SIGINT, signal.default_int_handler)
    work = Path(a.dir)
    make_data(work / "data", a.images, a.size)
    sweeps = [("builtin", modes, j) for modes in MODES for j in WORKERS
              if a.only in (None, "builtin")]
    sweeps += [("script", m.replace("+", ","), int(j)) for m, j in
               (s.split(":") for s in a.script_sweeps.split(",") if s)
               if a.only in (None, "script")]
    drops = drop_pagecache_count()
    started = time.monotonic()
    rows, failures, errors, cpu = [], [], [], []
    def sweep(job: str, modes: str, j: int
              ) -> tuple[list[str], list[str], list[float], list[float]]:
        if a.check_only:
            return check(work / f"{job}-{modes.replace(',', '+')}-j{j}", expected_runs(job, modes))
        return one_sweep(work, job, modes, j, a)

    with ThreadPoolExecutor(a.parallel) as pool:
        for r, f, e, c in pool.map(lambda s: sweep(*s), sweeps):
            rows += r
            failures += f
            errors += e
            cpu += c
    total = sum(expected_runs(job, modes) for job, modes, _ in sweeps)
    dropped = drop_pagecache_count() - drops
    if dropped:
        failures.append(f"/proc/vmstat drop_pagecache moved by {dropped}")
    print(f"{'sweep':28s} {'run':40s} {'status':8s} oom resid.err filled-samples limiter-cpu")
    print("\n".join(rows))
    print(json.dumps({"failures": failures}, indent=1))
    ooms = sum(1 for f in failures if f.startswith("OOM "))
    stalls = sum(1 for f in failures if f.startswith("STALLED "))
    print(f"{total} runs in {len(sweeps)} sweeps ({(time.monotonic() - started) / 60:.1f} min), "
          f"{ooms} OOM, {stalls} stalled, {len(failures)} failures, drop_pagecache "
          f"+{dropped}, worst residency error {100 * max(errors, default=0):.2f}% of budget "
          f"over {len(errors)} disk runs with a budget > 0, limiter CPU median "
          f"{statistics.median(cpu) if cpu else 0:.2f} s a run")


if __name__ == "__main__":
    main()
