#!/usr/bin/env python3
"""Data larger than memory: the prep stall measured on the subset that fits, against the
same job's prep stall on that subset with memory to spare.

    python bench/larger_than_memory.py [--dir /tmp/ltm] [--files 600] [--limit 1200M]
                                       [--repeats 3] [--storage-bw 5000000]

A dataset of `--files` raw 1 MiB samples in 4 class folders, read by
tests/scripts/train_folder_bins.py (a torchvision DatasetFolder, a CPU-bound decode).

A: the harness runs inside a cgroup-v1 memory cgroup of `--limit` (smaller than the
   dataset plus the job's memory): `--cached-subset auto` sizes the subset from the room
   (the room less the job's anonymous memory and its code's pages). A also runs `disk`
   at cache 0 through a `--storage-bw` throttle: its fetch stall must be the throttle's,
   its rate x the mean file size within 5% of the throttle.
B: the harness outside it, `--cached-subset` the bytes A chose: the same subset, with
   memory to spare.
Each sweep: `--modes synthetic,cached` (A: `,disk`), 40 iterations, `--repeats` of each,
in the same order, so that both stalls have an interval from their runs' own noise.
Printed last: A's and B's prep stall per epoch of the whole dataset, their relative
difference against the issue's 5%, and the noise (the two intervals' half-widths,
combined, relative to B's): a difference within the noise and above 5% means more
repeats, not a wrong method.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "scripts" / "train_folder_bins.py"
V1 = Path("/sys/fs/cgroup/memory")


def make_data(root: Path, files: int) -> None:
    if len(list(root.rglob("*.bin"))) == files:
        return
    for i in range(files):
        d = root / f"c{i % 4}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"s{i:05d}.bin").write_bytes(os.urandom(1 << 20))


def sweep(prefix: Path, data: Path, subset: str, cgroup: Path | None, repeats: int,
          disk: list[str]) -> dict:
    modes = "synthetic,cached,disk" if disk else "synthetic,cached"
    argv = [sys.executable, str(ROOT / "harness.py"), "--prefix", str(prefix), "--data",
            str(data), "--modes", modes, *disk, "--iters", "40", "--warmup", "3",
            "-b", "4", "-j", "2", "--cached-subset", subset, "--repeats", str(repeats),
            "--no-plots", "--no-advice", str(SCRIPT), str(data), "-j", "2"]
    if cgroup is not None:  # join the cgroup, then become the harness
        argv = [sys.executable, "-c", f"import os, sys; open({str(cgroup / 'cgroup.procs')!r}, "
                "'w').write('0'); os.execv(sys.executable, [sys.executable] + sys.argv[1:])",
                *argv[1:]]
    subprocess.run(argv, check=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return json.loads((prefix / "summary.json").read_text())


def remove(cg: Path) -> None:
    """rmdir the memory cgroup once the harness's last helper processes in it are gone."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return cg.rmdir()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def prep(summary: dict) -> tuple[float, float]:
    """The prep stall per epoch of the whole dataset, and its interval's half-width."""
    c = summary["configs"][0]
    return c["prep_stall_s"], (c["prep_stall_s_high"] - c["prep_stall_s_low"]) / 2


def fetch_line(summary: dict, files: int, throttle_bps: int) -> str:
    """The disk run's fetch stall, and its rate x the mean file size against the throttle."""
    c = summary["configs"][0]
    rate = c["modes"]["disk"]["rate_sps"]
    read_bps = rate * (1 << 20)  # every sample is one 1 MiB file
    return (f"A's disk run (cache 0, {throttle_bps / 1e6:.0f} MB/s): fetch stall "
            f"{c['fetch_stall_s']:.1f} s per epoch of {files} files; {rate:.2f} samples/s x "
            f"1 MiB = {read_bps / 1e6:.2f} MB/s, {100 * (read_bps / throttle_bps - 1):+.1f}% "
            "of the throttle (target: within 5%)")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", default="/tmp/dsanalyze-ltm")
    p.add_argument("--files", type=int, default=600)
    p.add_argument("--limit", default=str(1200 << 20))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--storage-bw", type=int, default=5_000_000,
                   help="A's disk run, B/s (slower than the decode, even on a loaded CPU)")
    a = p.parse_args()
    work = Path(a.dir)
    make_data(work / "data", a.files)
    limit = int(a.limit[:-1]) << 20 if a.limit.endswith("M") else int(a.limit)
    cg = V1 / f"dsanalyze-bench-ltm-{os.getpid()}"
    cg.mkdir()
    try:
        (cg / "memory.limit_in_bytes").write_text(str(limit))
        disk = ["--cache", "0", "--storage-bw", str(a.storage_bw)]
        inside = sweep(work / "a", work / "data", "auto", cg, a.repeats, disk)
    finally:
        remove(cg)
    sub = inside["measured"]["subsets"][0]
    outside = sweep(work / "b", work / "data", str(sub["bytes"]), None, a.repeats, [])
    (a_s, a_half), (b_s, b_half) = prep(inside), prep(outside)
    noise = (a_half ** 2 + b_half ** 2) ** 0.5 / b_s
    print(f"A (in a {limit >> 20} MiB cgroup, {sub['files']} of {sub['of_files']} files "
          f"warmed): prep stall {a_s:.2f} s per epoch; not cached: "
          f"{inside['measured'].get('not_cached') or 'none'}")
    print(f"B (outside, the same {sub['bytes'] >> 20} MiB subset): prep stall {b_s:.2f} s")
    print(fetch_line(inside, a.files, a.storage_bw))
    diff = (a_s - b_s) / b_s
    print(f"prep stall of data larger than memory (A) vs the same job on a subset that fits "
          f"(B): {100 * diff:+.1f}% (target: within 5%: "
          f"{'yes' if abs(diff) <= 0.05 else 'no'}; the runs' own noise: ±{100 * noise:.1f}%)")


if __name__ == "__main__":
    main()
