#!/usr/bin/env python3
"""Accuracy of the what-if model's DataLoader-workers knob (`whatif --workers`).

    .venv/bin/python bench/workers_accuracy.py [--dir DIR] [--fresh | --no-measure]

1. Needs the grid of `bench/whatif_accuracy.py` under DIR (the same --dir;
   measured with 2 workers per rank) and measures, next to it, the same job
   with 1 and with 4 workers: modes cached and disk (no cache, no throttle),
   1 and 2 CPUs. About 4 minutes on 2 CPUs.
2. Fits the model on the whole 2-worker grid and predicts every 1- and
   4-worker run from its CPUs and worker count alone (`rates.predict_run`).
3. Prints measured vs predicted per run, then the median and maximum
   absolute error last.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dsanalyze import store  # noqa: E402
from dsanalyze.analysis.stalls import run_rate  # noqa: E402
from dsanalyze.dataset import scan_dataset  # noqa: E402
from dsanalyze.whatif import api as whatif  # noqa: E402
from dsanalyze.whatif.model import HeldOut  # noqa: E402
from dsanalyze.whatif.rates import predict_run  # noqa: E402

WORKERS = (1, 4)
JOB_ARGS = ["-b", "8", "--epochs", "3", "--warmup", "2", "--sim-step-ms", "60", "--cpus", "1,2",
            "--cache", "0", "--storage-bw", "none", "--modes", "cached,disk", "--resume",
            "--no-plots"]


def measure(base: Path, fresh: bool) -> list[Path]:
    prefixes = []
    for w in WORKERS:
        prefix = base / f"workers{w}"
        if fresh:
            shutil.rmtree(prefix, ignore_errors=True)
        argv = [sys.executable, str(REPO / "harness.py"), "--data", str(base / "data"),
                "--prefix", str(prefix), "-j", str(w), *JOB_ARGS]
        rc = subprocess.run(argv, cwd=REPO, stdout=subprocess.DEVNULL).returncode
        print(f"  {w} worker(s): harness exit status {rc}", flush=True)
        prefixes.append(prefix)
    return prefixes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/dsanalyze-whatif-bench",
                    help="where bench/whatif_accuracy.py keeps its dataset and runs")
    ap.add_argument("--fresh", action="store_true", help="re-measure the 1- and 4-worker runs")
    ap.add_argument("--no-measure", dest="measure", action="store_false",
                    help="only analyse the 1- and 4-worker runs already there")
    ns = ap.parse_args()
    base = Path(ns.dir)
    if not (base / "s60-n1" / "summary.json").exists():
        print(f"error: no grid under {base}/s60-n1: run bench/whatif_accuracy.py --dir {base}",
              file=sys.stderr)
        return 2
    grid = store.load_runs(base / "s60-n1")  # the base job of bench/whatif_accuracy.py
    sizes = list(scan_dataset(grid[0].dataset.root).file_bytes)
    model = whatif.fit(grid, sizes)
    print(f"fitted on the {sum(r.ok for r in grid)} runs of the 2-worker grid")
    prefixes = measure(base, ns.fresh) if ns.measure else \
        [base / f"workers{w}" for w in WORKERS if (base / f"workers{w}" / "runs").is_dir()]
    errors = []
    print(f"\n{'run':34s} {'workers':>7s} {'measured/s':>10s} {'predicted/s':>11s} {'error':>7s}")
    for prefix in prefixes:
        for run in store.load_runs(prefix):
            measured = run_rate(run).rate_sps
            if not run.ok or not measured:
                print(f"{run.run_id:34s} {run.spec.job.workers:7d} {run.status}")
                continue
            predicted = predict_run(model, HeldOut.of(run)).rate_sps
            errors.append(100 * (predicted - measured) / measured)
            print(f"{run.run_id:34s} {run.spec.job.workers:7d} {measured:10.1f} "
                  f"{predicted:11.1f} {errors[-1]:+6.1f}%")
    if not errors:
        print("error: no completed run to compare", file=sys.stderr)
        return 1
    a = [abs(e) for e in errors]
    print(f"\nFIGURE workers knob: predicted vs measured rate over {len(a)} runs with "
          f"{' and '.join(map(str, WORKERS))} workers (model fitted with 2): median "
          f"{statistics.median(a):.1f}%, max {max(a):.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
