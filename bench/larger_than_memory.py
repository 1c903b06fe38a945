#!/usr/bin/env python3
"""Data larger than memory: the prep stall measured on the subset that fits, against the
same job's prep stall on that subset with memory to spare.

    python bench/larger_than_memory.py [--dir /tmp/ltm] [--files 600] [--limit 1200M]

A dataset of `--files` raw 1 MiB samples in 4 class folders, read by
tests/scripts/train_folder_bins.py (a torchvision DatasetFolder, a CPU-bound decode).

A: the harness runs inside a cgroup-v1 memory cgroup of `--limit` (smaller than the
   dataset plus the job's memory): `--cached-subset auto` sizes the subset from the room.
B: the harness outside it, `--cached-subset` the bytes A chose: the same subset, with
   memory to spare.
Each sweep: `--modes synthetic,cached`, 40 iterations. Printed last: A's and B's prep stall
per epoch of the whole dataset, and their relative difference.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
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


def sweep(prefix: Path, data: Path, subset: str, cgroup: Path | None) -> dict:
    argv = [sys.executable, str(ROOT / "harness.py"), "--prefix", str(prefix), "--data",
            str(data), "--modes", "synthetic,cached", "--iters", "40", "--warmup", "3",
            "-b", "4", "-j", "1", "--cached-subset", subset, "--no-plots", "--no-advice",
            str(SCRIPT), str(data)]
    if cgroup is not None:  # join the cgroup, then become the harness
        argv = [sys.executable, "-c", f"import os, sys; open({str(cgroup / 'cgroup.procs')!r}, "
                "'w').write('0'); os.execv(sys.executable, [sys.executable] + sys.argv[1:])",
                *argv[1:]]
    subprocess.run(argv, check=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return json.loads((prefix / "summary.json").read_text())


def prep(summary: dict) -> float:
    return summary["configs"][0]["prep_stall_s"]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", default="/tmp/dsanalyze-ltm")
    p.add_argument("--files", type=int, default=600)
    p.add_argument("--limit", default=str(1200 << 20))
    a = p.parse_args()
    work = Path(a.dir)
    make_data(work / "data", a.files)
    limit = int(a.limit[:-1]) << 20 if a.limit.endswith("M") else int(a.limit)
    cg = V1 / f"dsanalyze-bench-ltm-{os.getpid()}"
    cg.mkdir()
    try:
        (cg / "memory.limit_in_bytes").write_text(str(limit))
        inside = sweep(work / "a", work / "data", "auto", cg)
    finally:
        cg.rmdir()
    sub = inside["measured"]["subsets"][0]
    outside = sweep(work / "b", work / "data", str(sub["bytes"]), None)
    a_s, b_s = prep(inside), prep(outside)
    print(f"A (in a {limit >> 20} MiB cgroup, {sub['files']} of {sub['of_files']} files "
          f"warmed): prep stall {a_s:.2f} s per epoch; not cached: "
          f"{inside['measured'].get('not_cached') or 'none'}")
    print(f"B (outside, the same {sub['bytes'] >> 20} MiB subset): prep stall {b_s:.2f} s")
    print(f"prep stall A vs B: {100 * (a_s - b_s) / b_s:+.1f}%")


if __name__ == "__main__":
    main()
