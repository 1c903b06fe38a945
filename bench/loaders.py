"""PyTorch DataLoader vs NVIDIA DALI: prep rate on the same generated data, by CPU count.

Each figure is one `loader`-mode run of the built-in job through the real
harness: the loader alone with no training step, every file in the page
cache, c CPUs through a cpuset (or CPU affinity with --no-cgroups), and
`-j c`: c DataLoader worker processes, or c DALI threads (a CPU pipeline,
decoder on the CPU). Both do the same work per sample: decode a JPEG, a
random-resized crop to 224 x 224, a random horizontal flip, normalise to
float32 CHW. The rate is the steady state after the warm-up, in samples/s
(the what-if model's P(c)); `iqr` is the spread of the iteration times,
IQR / median. c DataLoader workers deliver their batches about c at a time,
so with c > 1 its iteration times alternate long/short and its IQR is wide
even when its rate is steady: compare the rates, and the repeats in the JSON.

    .venv/bin/python bench/loaders.py                 # 512 JPEGs, 1 and 2 CPUs
    .venv/bin/python bench/loaders.py --cpus 1,2,4 --iters 60 --repeats 3

Prints the table; the figures are also written to PREFIX/loaders.json.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

from dsanalyze import store
from dsanalyze.analysis import stalls
from dsanalyze.config import Job, Mode, Sweep, parse_cpus_list
from dsanalyze.errors import DsAnalyzeError
from dsanalyze.jobs.datasets import make_dataset
from dsanalyze.sweep import run_sweep

LOADERS = ("pytorch", "dali")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prefix", default="results/bench-loaders", help="data and runs go here")
    p.add_argument("--images", type=int, default=512, help="JPEGs to generate (500x375 +-30%%)")
    p.add_argument("--cpus", default="1,2", help="CPU counts; -j follows (1,2)")
    p.add_argument("-b", "--batch-size", type=int, default=32)
    p.add_argument("--iters", type=int, default=30, help="measured iterations per run")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=1, help="runs per cell; the median is shown")
    p.add_argument("--no-cgroups", dest="use_cgroups", action="store_false")
    return p.parse_args(argv)


def ensure_dataset(root: Path, images: int) -> Path:
    if not root.is_dir() or sum(1 for _ in root.rglob("*.jpg")) != images:
        make_dataset(root, images=images, classes=8, size=(500, 375), size_jitter=0.3, seed=0)
    return root


def measure(ns: argparse.Namespace, data: Path, loader: str, cpus: int) -> dict[str, Any]:
    """Median rate of `repeats` loader-mode runs of one loader at one CPU count."""
    job = Job(data_dir=str(data.resolve()), batch_size=ns.batch_size, workers=cpus,
              iters=ns.iters, warmup=ns.warmup, device="sim", loader=loader)
    prefix = Path(ns.prefix) / f"{loader}-cpus{cpus}"
    shutil.rmtree(prefix, ignore_errors=True)  # this bench's own runs of an earlier invocation
    rates, iqrs = [], []
    for _ in range(ns.repeats):
        sweep = Sweep(job=job, prefix=str(prefix), modes=(Mode.LOADER,), cpus=(cpus,),
                      use_cgroups=ns.use_cgroups, plots=False)
        result = run_sweep(sweep).results[0]
        rate = stalls.run_rate(result)
        if rate.rate_sps is None:
            raise SystemExit(f"{loader} at {cpus} CPUs failed: {result.error}")
        rates.append(rate.rate_sps)
        iqrs.append(rate.iter_iqr_pct or 0.0)
    settings = result.ranks[0].extra.get("loader", {})
    return {"loader": loader, "cpus": cpus, "rate_sps": statistics.median(rates),
            "rates_sps": rates, "iter_iqr_pct": statistics.median(iqrs),
            "cpus_enforced": result.enforced.cpus.how.value if result.enforced.cpus else "none", "loader_settings": settings}


def table(cells: list[dict[str, Any]], cpus: tuple[int, ...]) -> str:
    by = {(c["loader"], c["cpus"]): c for c in cells}
    lines = [f"{'cpus':>4}  {'DataLoader samples/s':>22}  {'DALI samples/s':>18}  {'DALI/DL':>7}"]
    for c in cpus:
        pt, dali = by[("pytorch", c)], by[("dali", c)]
        lines.append(f"{c:>4}  {pt['rate_sps']:>10.1f} (iqr {pt['iter_iqr_pct']:>4.1f}%)  "
                     f"{dali['rate_sps']:>6.1f} (iqr {dali['iter_iqr_pct']:>4.1f}%)  "
                     f"{dali['rate_sps'] / pt['rate_sps']:>6.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ns = parse_args(argv)
    try:
        return run(ns)
    except DsAnalyzeError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code


def run(ns: argparse.Namespace) -> int:
    cpus = tuple(c for c in parse_cpus_list(ns.cpus) if c is not None)
    data = ensure_dataset(Path(ns.prefix) / "data", ns.images)
    cells = [measure(ns, data, loader, c) for c in cpus for loader in LOADERS]
    store.write_json_atomic(Path(ns.prefix) / "loaders.json", {"cells": cells, "args": vars(ns)})
    print(f"prep rate, loader mode, {ns.images} JPEGs 500x375 +-30%, batch {ns.batch_size}, "
          f"{ns.iters} iterations after {ns.warmup} warm-up, median of {ns.repeats}; "
          f"-j = cpus; CPUs by {cells[0]['cpus_enforced']}")
    print(table(cells, cpus))
    return 0


if __name__ == "__main__":
    sys.exit(main())
