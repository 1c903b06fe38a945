"""Ground truth for resource control: do the limits do what they say?

    python bench/ground_truth.py [--workdir /tmp/dsa-gt] [--throttle 20M]

(a) disk mode, --cache 0, --storage-bw 20M, a cheap step: the job's read
    throughput (rate x mean sample bytes) against the throttle (target: within 10%).
(b) cached-mode prep rate with 2 CPUs against 1 CPU.
(c) bytes read from storage in a cached run (target ~0) and in a disk run with
    --cache 0 (target ~ the bytes of the samples read).
Needs root (real cgroups). The last line is the headline figure.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dsanalyze.analysis.stalls import run_rate  # noqa: E402
from dsanalyze.config import parse_bytes  # noqa: E402
from dsanalyze.jobs.datasets import make_dataset  # noqa: E402
from dsanalyze.store import load_runs  # noqa: E402


def harness(*args: str) -> None:
    subprocess.run([sys.executable, str(ROOT / "harness.py"), *args, "--no-plots"], check=True,
                   stdout=subprocess.DEVNULL)


def read_during_iterations(run) -> float:
    """Bytes read after the first iteration started (process start-up excluded)."""
    start = min(r.start_unix_s for r in run.ranks)
    before = [s["read_bytes"] for s in run.monitor if s["unix_s"] <= start]
    return run.io.read_bytes - (before[-1] if before else 0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", default="/tmp/dsa-gt")
    p.add_argument("--throttle", default="20M")
    args = p.parse_args()
    work = Path(args.workdir)
    data = work / "data"
    if not data.is_dir():
        make_dataset(data, images=1200, classes=8, size=(900, 700), seed=7, quality=95)
    prefix = work / "r"
    subprocess.run(["rm", "-rf", str(prefix)], check=True)
    throttle = parse_bytes(args.throttle)
    harness("--data", str(data), "--prefix", str(prefix), "--modes", "cached,disk",
            "--cpus", "1,2", "--cache", "0", "--storage-bw", args.throttle,
            "-b", "8", "-j", "2", "--iters", "80", "--warmup", "20", "--sim-step-ms", "1")
    runs = {r.run_id: r for r in load_runs(prefix)}
    mean_bytes = runs["cached-cpus2"].dataset.mean_file_bytes

    disk = runs[f"disk-cpus2-cache0B-bw{args.throttle}"]
    rate = run_rate(disk).rate_sps
    seen_bps = rate * mean_bytes
    print(f"(a) disk, cache 0, throttle {throttle / 2**20:.0f} MiB/s: {rate:.1f} samples/s x "
          f"{mean_bytes / 1024:.0f} KiB = {seen_bps / 2**20:.2f} MiB/s "
          f"(ratio to throttle {seen_bps / throttle:.3f})")

    c1, c2 = run_rate(runs["cached-cpus1"]).rate_sps, run_rate(runs["cached-cpus2"]).rate_sps
    print(f"(b) cached prep rate: 1 CPU {c1:.1f}, 2 CPUs {c2:.1f} samples/s "
          f"(2 CPUs / 1 CPU = {c2 / c1:.2f})")

    cached_read = statistics.mean(read_during_iterations(runs[f"cached-cpus{n}"]) for n in (1, 2))
    startup = statistics.mean(runs[f"cached-cpus{n}"].io.read_bytes for n in (1, 2)) - cached_read
    samples_read = sum(sum(r.samples) for r in disk.ranks)
    expected = samples_read * mean_bytes
    print(f"(c) bytes read: cached run {cached_read / 2**20:.2f} MiB while iterating "
          f"(+{startup / 2**20:.1f} MiB of libraries at start-up); disk run "
          f"{disk.io.read_bytes / 2**20:.1f} MiB for {samples_read} samples iterated "
          f"(~{expected / 2**20:.1f} MiB; ratio {disk.io.read_bytes / expected:.3f}, "
          "the excess is the loader's prefetch beyond the last iteration)")
    print(f"ground truth: throttle ratio {seen_bps / throttle:.3f}, CPU scaling {c2 / c1:.2f}, "
          f"cached read {cached_read / 2**20:.2f} MiB, disk read ratio "
          f"{disk.io.read_bytes / expected:.3f}")


if __name__ == "__main__":
    main()
