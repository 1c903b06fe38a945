"""Remote data: does a remote run measure the link it was given? One figure per loader.

For each loader of tests/scripts (s3torchconnector, s3fs, webdataset over HTTP), two
sweeps through the real harness against a server it starts behind a shaped link
(`--serve`), each with a cached run (the link unshaped) and a remote run:

- bandwidth: `--net-bw BW --net-latency 0`, 2 workers (`--bw-workers`: with one, the
  link idles while the worker decodes and waits for the server between its serial
  GETs). Bandwidth-bound (the loader is faster unshaped), the remote run's rate × bytes per sample should be the link's
  bandwidth: `bw ratio` = rate × bytes per sample / BW (1.0 is exact; the TCP/IP
  headers take 4.4% of a frame, so about 0.96 is the most a link can give).
- latency: `--net-bw none --net-latency 20ms`, 1 worker. Each request waits 20 ms, so
  the fetch stall (remote − cached, s per epoch) should be latency × requests per
  epoch, the requests counted by the proxy over the run
  (`RunResult.link.requests`) per sample the ranks consumed. `lat ratio` = measured
  stall / explained stall, with the stall's interval. `held ratio` explains it instead
  with the time the proxy actually held the requests (`RunResult.link.held_s`): on a busy
  machine its event loop wakes late, so a request waits more than the delay set.

    .venv/bin/python bench/remote_accuracy.py               # 48 JPEGs, 128K/s, 20 ms
    .venv/bin/python bench/remote_accuracy.py --loaders s3torch --iters 80

Needs root (network namespaces). Prints a table; the last line is the figure.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from conftest import write_shards  # noqa: E402

from dsanalyze import store  # noqa: E402
from dsanalyze.analysis import stalls  # noqa: E402
from dsanalyze.config import parse_bytes, parse_duration_s  # noqa: E402
from dsanalyze.jobs.datasets import make_dataset  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "scripts"
# loader -> (backend, script, its data argument, data layout)
LOADERS = {
    "s3torch": ("s3", "train_s3torch.py", "s3://dsanalyze/", "images"),
    "s3fs": ("s3", "train_s3fs.py", "s3://dsanalyze/", "images"),
    "webdataset": ("http", "train_webdataset.py", "{endpoint}/shard-{000000..000007}.tar",
                   "shards"),
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prefix", default="results/bench-remote")
    p.add_argument("--loaders", default=",".join(LOADERS))
    p.add_argument("--bw", default="128K", help="the bandwidth-bound sweep's link")
    p.add_argument("--latency", default="20ms", help="the latency sweep's delay")
    p.add_argument("--iters", type=int, default=40)
    p.add_argument("--bw-workers", type=int, default=2, help="-j of the bandwidth sweep")
    p.add_argument("--skip-latency", action="store_true", help="the bandwidth sweep alone")
    p.add_argument("-b", "--batch-size", type=int, default=4)
    p.add_argument("--image-size", default="200x150",
                   help="JPEG size (about 16 KB at 200x150, 100 KB at 500x375): larger objects "
                        "spend less of the link on each request's own cost")
    return p.parse_args(argv)


def datasets(prefix: Path, size: str) -> dict[str, Path]:
    images = prefix / "data" / "images"
    if not images.is_dir():
        width, height = (int(x) for x in size.split("x"))
        make_dataset(images, images=48, classes=4, size=(width, height), size_jitter=0.2, seed=3)
    shards = prefix / "data" / "shards"
    if not shards.is_dir():
        shards.mkdir(parents=True)
        write_shards(images, shards)
    return {"images": images, "shards": shards}


def sweep(ns: argparse.Namespace, out: Path, data: Path, loader: str, bw: str,
          latency: str, workers: int) -> dict[str, store.RunResult]:
    backend, script, arg, _ = LOADERS[loader]
    shutil.rmtree(out, ignore_errors=True)
    argv = [sys.executable, str(ROOT / "harness.py"), "--data", str(data), "--serve", backend,
            "--net-bw", bw, "--net-latency", latency, "--probe-budget", "64K",
            "--modes", "cached,remote", "--iters", str(ns.iters), "--warmup", "4",
            "--prefix", str(out), "--no-plots", "--no-advice", str(SCRIPTS / script), arg,
            "-b", str(ns.batch_size), "-j", str(workers)]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return {r.mode.value: r for r in store.load_runs(out)}


def bytes_per_sample(data: Path) -> float:
    files = [f for f in data.rglob("*") if f.is_file()]
    return sum(f.stat().st_size for f in files) / 48


def figures(ns: argparse.Namespace, prefix: Path, loader: str, data: Path) -> dict[str, Any]:
    bw = sweep(ns, prefix / loader / "bw", data, loader, ns.bw, "0", ns.bw_workers)
    rate_sps = stalls.run_rate(bw["disk"]).rate_sps
    bw_ratio = rate_sps * bytes_per_sample(data) / parse_bytes(ns.bw)
    if ns.skip_latency:
        return {"loader": loader, "bw_rate_sps": rate_sps, "bw_ratio": bw_ratio}
    lat = sweep(ns, prefix / loader / "lat", data, loader, "none", ns.latency, 1)
    remote = lat["disk"]
    consumed = sum(sum(r.samples) for r in remote.ranks)
    per_sample = remote.link.requests / consumed
    b = stalls.breakdowns(list(lat.values()))[0]
    explained_s = parse_duration_s(ns.latency) * per_sample * b.samples_per_epoch
    held_s = remote.link.held_s / consumed * b.samples_per_epoch
    return {"held_s": held_s, "held_ratio": (b.fetch_stall_s or 0) / held_s,"loader": loader, "bw_rate_sps": rate_sps, "bw_ratio": bw_ratio,
            "requests_per_sample": per_sample, "fetch_stall_s": b.fetch_stall_s,
            "fetch_low": b.fetch_stall_s_low, "fetch_high": b.fetch_stall_s_high,
            "explained_s": explained_s, "lat_ratio": (b.fetch_stall_s or 0) / explained_s}


def main(argv: list[str] | None = None) -> int:
    ns = parse_args(argv)
    prefix = Path(ns.prefix)
    data = datasets(prefix, ns.image_size)
    rows = [figures(ns, prefix, name, data[LOADERS[name][3]]) for name in ns.loaders.split(",")]
    print(f"{'loader':<11} {'rate/s':>7} {'bw ratio':>8} {'req/sample':>10} "
          f"{'fetch stall s [interval]':>26} {'explained s':>11} {'lat ratio':>9} "
          f"{'held s':>7} {'held ratio':>10}")
    for r in rows:
        if "lat_ratio" not in r:
            print(f"{r['loader']:<11} {r['bw_rate_sps']:>7.1f} {r['bw_ratio']:>8.2f}")
            continue
        interval = f"{r['fetch_stall_s']:.2f} [{r['fetch_low']:.2f}, {r['fetch_high']:.2f}]"
        print(f"{r['loader']:<11} {r['bw_rate_sps']:>7.1f} {r['bw_ratio']:>8.2f} "
              f"{r['requests_per_sample']:>10.2f} {interval:>26} {r['explained_s']:>11.2f} "
              f"{r['lat_ratio']:>9.2f} {r['held_s']:>7.2f} {r['held_ratio']:>10.2f}")
    worst_bw = max(abs(r["bw_ratio"] - 1) for r in rows)
    worst_lat = max((abs(r["lat_ratio"] - 1) for r in rows if "lat_ratio" in r), default=0.0)
    print(f"worst bandwidth error {worst_bw:.0%} (target 10%), worst latency error "
          f"{worst_lat:.0%} (target 15%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
