#!/usr/bin/env python3
"""Accuracy of the what-if model on this machine, against DS-Analyzer's assumption.

    .venv/bin/python bench/whatif_accuracy.py [--dir DIR] [--fresh] [--lock /tmp/dsa.lock]

1. Measures a grid with harness.py (resumable: completed runs are kept): the
   built-in job on the sim device (60 ms steps, batch 8, 2 workers, 3 epochs),
   CPUs {1, 2}, page-cache budgets {0, 25%, 50%, 100%}, storage {none, 24 MiB/s}
   (24 MiB/s makes the cold epoch fetch-bound at about 46 samples/s, against a
   prep rate of about 86 (1 CPU) and a compute rate of 133 samples/s), in the
   modes synthetic, cached, loader and disk, over 500 generated JPEGs of about
   530 KB (260 MB: far more than the few tens of MB by which a cgroup memory
   limit misses its cache budget). About 10 minutes on 2 CPUs, plus 2 to
   generate the dataset the first time. The grid is measured in four harness
   calls (CPUs x storage); `--lock` holds a flock only during each.
2. Fits the model on a subset (FIT_RULE, `fit_subset`) and predicts every other
   disk run's steady-state rate (the epochs after the cold first one).
3. Prints, per held-out run and as median / maximum absolute error:
   - model: the calibrated pipeline simulation with the Linux page-cache
     simulator, given the page cache each run really had (its cgroup's file
     cache during the steady epochs);
   - model, budget: the same, given the budget plus the slack calibrated on
     the fit runs (adds the harness's error in enforcing the budget);
   - DS-Analyzer h: the same simulation with DS-Analyzer's assumption that
     the hit rate is the cached fraction (a no-evict cache, h = C / D);
   - DS-Analyzer formula: min(G, P, B / ((1 - h) s)) with h = C / D.
   Then the cache simulator against the bytes each disk run read, and, last,
   the figure.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dsanalyze import store  # noqa: E402
from dsanalyze.analysis import cachesim, whatif  # noqa: E402
from dsanalyze.analysis.model import run_cache, run_cpus  # noqa: E402
from dsanalyze.config import Mode, format_bytes  # noqa: E402
from dsanalyze.jobs.datasets import make_dataset, scan_dataset  # noqa: E402
from dsanalyze.store import RunResult  # noqa: E402

IMAGES, CLASSES, SIZE, JITTER, SEED = 500, 4, (1200, 900), 0.3, 5
THROTTLE = "24M"
JOB_ARGS = ["-b", "8", "-j", "2", "--epochs", "3", "--warmup", "2", "--sim-step-ms", "60",
            "--cache", "0,25%,50%,100%", "--modes", "synthetic,cached,loader,disk", "--resume",
            "--no-plots"]
PARTS = [(cpus, bw) for cpus in ("1", "2") for bw in ("none", THROTTLE)]  # one harness call each
FIT_RULE = ("fit on every synthetic, cached and loader run (1 and 2 CPUs) and, for each storage "
            "setting, on the disk runs with 1 CPU at the smallest and the largest completed cache "
            "budget; predict every other disk run")
TARGET_MEDIAN_PCT, TARGET_MAX_PCT = 3.0, 10.0


def fit_subset(results: list[RunResult]) -> tuple[list[RunResult], list[RunResult]]:
    """FIT_RULE: (runs to fit on, runs to predict)."""
    ok = [r for r in results if r.ok and r.ranks]
    fit = [r for r in ok if r.mode is not Mode.DISK]
    disk = [r for r in ok if r.mode is Mode.DISK]
    for bw in {r.spec.resources.storage_read_bps for r in disk}:
        one_cpu = sorted((r for r in disk if r.spec.resources.storage_read_bps == bw
                          and run_cpus(r) == 1),
                         key=lambda r: r.spec.resources.cache.cache_bytes or 0)
        fit += {id(r): r for r in (one_cpu[:1] + one_cpu[-1:])}.values()
    chosen = {r.run_id for r in fit}
    return fit, [r for r in disk if r.run_id not in chosen]


def measure(base: Path, fresh: bool, lock: str | None) -> Path:
    data, prefix = base / "data", base / "runs"
    if fresh:
        shutil.rmtree(prefix, ignore_errors=True)
    if not data.is_dir() or len(scan_dataset(data).files) != IMAGES:
        shutil.rmtree(data, ignore_errors=True)
        with _locked(lock):  # uses every core
            n, total = make_dataset(data, IMAGES, CLASSES, SIZE, JITTER, SEED)
        print(f"dataset: {n} JPEGs, {format_bytes(total)} in {data}", flush=True)
    t0 = time.monotonic()
    for cpus, bw in PARTS:  # the grid in parts, so that a shared lock is held minutes, not more
        argv = [sys.executable, str(REPO / "harness.py"), "--data", str(data), "--prefix",
                str(prefix), "--cpus", cpus, "--storage-bw", bw, *JOB_ARGS]
        with _locked(lock):
            rc = subprocess.run(argv, cwd=REPO, stdout=subprocess.DEVNULL).returncode
        print(f"  cpus {cpus}, storage {bw}: harness exit status {rc}", flush=True)
    print(f"grid measured in {time.monotonic() - t0:.0f} s")
    return prefix


@contextlib.contextmanager
def _locked(path: str | None) -> Iterator[None]:
    """Hold an exclusive flock on `path` (machines shared by several benchmarks)."""
    if path is None:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _err(pred: float, meas: float) -> float:
    return 100 * (pred / meas - 1)


def _summary(errors: list[float]) -> str:
    a = [abs(e) for e in errors]
    return f"median {statistics.median(a):4.1f}%  max {max(a):5.1f}%"


def _warn_runs(runs: list[RunResult]) -> None:
    for r in runs:
        if not r.ok:
            print(f"run {r.run_id} {r.status}: {r.error}")
        loose = {k: v for k, v in r.enforced.items() if "not enforced" in str(v)}
        if loose:
            print(f"run {r.run_id}: limits not enforced: {loose}")


def _print_calibration(val: whatif.Validation) -> None:
    print(f"\nrule: {FIT_RULE}\nfitted on {len(val.fit_runs)} runs: {', '.join(val.fit_runs)}")
    print("calibration:")
    for p in val.model.params:
        print(f"  {p.name:32s} {'-' if p.value is None else f'{p.value:.4g}'} {p.unit}: {p.how}")


def _formula(model: whatif.Model, run: RunResult, cache: float | None) -> float:
    """DS-Analyzer: min(G, P, B / ((1 - h) s)) with h = C / D."""
    res = run.spec.resources
    cfg = whatif.Config(run_cpus(run), res.cache.spec, res.cache.cache_bytes, res.storage_read_bps)
    return whatif.bound_sps(model, cfg, cachesim.naive_hit(cache, model.dataset_bytes))


def compare(runs: list[RunResult], sizes: list[int]) -> tuple[whatif.Validation, dict]:
    """Each held-out run predicted four ways; prints a row per run; returns the errors."""
    val = whatif.validate(runs, sizes, split=fit_subset, rule=FIT_RULE)
    nominal = whatif.validate(runs, sizes, nominal_cache=True, split=fit_subset, rule=FIT_RULE)
    naive = whatif.validate(runs, sizes, policy="noevict", split=fit_subset, rule=FIT_RULE)
    by_id = {r.run_id: r for r in runs}
    cols: dict[str, list[float]] = {"model": [], "model, budget": [], "DS-Analyzer h": [],
                                    "DS-Analyzer formula": []}
    print(f"\n{'held-out run':30s} {'meas/s':>7s} {'cache had':>9s} {'model':>14s} "
          f"{'model, budget':>14s} {'DS-An. h':>14s} {'DS-An. formula':>14s}")
    for c, n, d in zip(val.checks, nominal.checks, naive.checks):
        run = by_id[c.run_id]
        cache = run_cache(val.model, run)[0]
        preds = [c.predicted_sps, n.predicted_sps, d.predicted_sps,
                 _formula(val.model, run, cache)]
        line = f"{c.run_id:30s} {c.measured_sps:7.1f} {format_bytes(cache):>9s}"
        for col, p in zip(cols, preds):
            cols[col].append(_err(p, c.measured_sps))
            line += f" {p:6.1f} {cols[col][-1]:+5.1f}%"
        print(line)
    print()
    for col, errs in cols.items():
        print(f"{col:20s} {_summary(errs)}  over {len(errs)} held-out disk runs")
    cold = [_err(c.predicted_epoch1_sps, c.measured_epoch1_sps) for c in val.checks
            if c.predicted_epoch1_sps and c.measured_epoch1_sps]
    if cold:
        print(f"{'cold first epoch':20s} {_summary(cold)}")
    return val, cols


def check_cache(model: whatif.Model, runs: list[RunResult]) -> None:
    print("\ncache simulator: bytes read from storage over each disk run, simulated with the page "
          "cache the run had, against the cgroup's read counter (which also counts other files)")
    for policy in ("pagecache", "lru", "noevict"):
        checks = whatif.cache_check(replace(model, policy=policy), runs)
        errs = [_err(c.predicted_read_bytes, c.measured_read_bytes) for c in checks
                if c.measured_read_bytes]
        if errs:
            print(f"  {policy:10s} read bytes {_summary(errs)} over {len(errs)} disk runs")


def report(prefix: Path) -> None:
    runs = store.load_runs(prefix)
    sizes = list(scan_dataset(runs[0].dataset["root"]).file_bytes)
    _warn_runs(runs)
    val, cols = compare(runs, sizes)
    _print_calibration(val)
    check_cache(val.model, runs)
    a = [abs(e) for e in cols["model"]]
    b = [abs(e) for e in cols["DS-Analyzer h"]]
    verdict = "meets" if statistics.median(a) <= TARGET_MEDIAN_PCT and max(a) <= TARGET_MAX_PCT \
        else "misses"
    print(f"\nFIGURE what-if model error on {len(a)} held-out disk runs: median "
          f"{statistics.median(a):.1f}%, max {max(a):.1f}% ({verdict} the target of "
          f"{TARGET_MEDIAN_PCT:g}% / {TARGET_MAX_PCT:g}%); DS-Analyzer assumption h = C/D: "
          f"median {statistics.median(b):.1f}%, max {max(b):.1f}%")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/dsanalyze-whatif-bench",
                    help="dataset and runs live here (kept between runs)")
    ap.add_argument("--fresh", action="store_true", help="re-measure every run")
    ap.add_argument("--no-measure", dest="measure", action="store_false",
                    help="only analyse the runs already there")
    ap.add_argument("--lock", help="flock this file around each harness call (e.g. /tmp/dsa.lock)")
    ns = ap.parse_args()
    base = Path(ns.dir)
    prefix = measure(base, ns.fresh, ns.lock) if ns.measure else base / "runs"
    with _locked(ns.lock):  # the analysis is light, but keep the machine quiet for others' timings
        report(prefix)
    return 0


if __name__ == "__main__":
    sys.exit(main())
