#!/usr/bin/env python3
"""How much this machine's own speed drifts, with no job running: the floor under any
comparison of single runs (issue 24's maximum on single runs).

    python bench/machine_drift.py [--cpu 0] [--windows 24] [--window-s 20] [--images N]

A fixed CPU load, JPEG decodes (PIL, the work a DataLoader worker does), back to back on
one core for `--windows` windows of `--window-s` seconds; decodes per second per window.
The JPEGs are made here (`dsanalyze.jobs.datasets.make_dataset`, seed 0, the demo's size), so
every machine decodes the same bytes. Run it on an idle machine: another process on the
core is drift too, but not the machine's.

On the 2-core development VM (stop 43, 24 windows of 20 s): 353-418 decodes/s, -8.2% to
+8.7% around the median, steal time near 0. Two single runs of one CPU-bound
configuration can differ by that much before any model is involved.

Printed last: the median rate and the largest deviation from it, in %.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import tempfile
import time
from pathlib import Path

from PIL import Image

from dsanalyze.jobs.datasets import make_dataset


def decode_rates(blobs: list[bytes], windows: int, window_s: float) -> list[float]:
    """Decodes per second of `blobs`, back to back, in each of `windows` windows."""
    rates = []
    for _ in range(windows):
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < window_s:
            for b in blobs:
                Image.open(io.BytesIO(b)).convert("RGB")
            n += len(blobs)
        rates.append(n / (time.perf_counter() - t0))
    return rates


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu", type=int, default=0, help="the core the load runs on")
    p.add_argument("--windows", type=int, default=24)
    p.add_argument("--window-s", type=float, default=20.0)
    p.add_argument("--images", type=int, default=8, help="JPEGs decoded in turn")
    args = p.parse_args()
    os.sched_setaffinity(0, {args.cpu})
    with tempfile.TemporaryDirectory() as tmp:
        make_dataset(Path(tmp) / "data", images=args.images, classes=1, size=(500, 375),
                     size_jitter=0.3, seed=0)
        blobs = [f.read_bytes() for f in sorted((Path(tmp) / "data").rglob("*.jpg"))]
    rates = decode_rates(blobs, args.windows, args.window_s)
    for i, r in enumerate(rates):
        print(f"window {i}: {r:.1f} decodes/s")
    median = statistics.median(rates)
    low, high = 100 * (min(rates) / median - 1), 100 * (max(rates) / median - 1)
    print(f"range {low:+.1f}% .. {high:+.1f}% around the median")
    print(f"median {median:.1f} decodes/s; largest deviation {max(-low, high):.1f}%")


if __name__ == "__main__":
    main()
