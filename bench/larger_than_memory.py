#!/usr/bin/env python3
"""Data larger than memory: the prep stall measured on the subset that fits, against the
same job's prep stall on that subset with memory to spare.

    python bench/larger_than_memory.py [--dir /tmp/ltm] [--files 600] [--limit 1200M]
                                       [--repeats 3] [--storage-bw 5000000]
    python bench/larger_than_memory.py --machine [--fits 2G] [--repeats 3]

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

`--machine`: data larger than this machine's RAM (1.1 x MemTotal of 1 MiB samples, by
default; refused unless `MIN_FREE_AFTER_BYTES` of the disk stays free), no cgroup.
A: the harness on the whole machine, `--cached-subset auto`: the subset is sized from
`MemAvailable` less the job's measured memory (`memroom`: 80% of that, the rest left to
the machine's other processes); every cached run is checked resident at its start and at
its end; the disk run as above. B: the same job with `--cached-subset --fits` (a subset
that surely fits). The prep stalls per epoch of the whole dataset are compared as above.
The samples are a shared random pool at a per-file offset behind a unique header (written
at disk speed, not urandom's); the decode's CPU cost is per byte, not per content. The
dataset is deleted at the end, also on failure or SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "scripts" / "train_folder_bins.py"
V1 = Path("/sys/fs/cgroup/memory")
MiB = 1 << 20
MIN_FREE_AFTER_BYTES = 20 * 10 ** 9  # the disk is shared: never fill it


def make_data(root: Path, files: int) -> None:
    """`files` 1 MiB samples in 4 class folders: a unique header, then 1 MiB of a random pool
    from a per-file offset (no two files alike, written at the disk's speed)."""
    if len(list(root.rglob("*.bin"))) == files:
        return
    pool = memoryview(os.urandom(64 * MiB))
    for i in range(files):
        d = root / f"c{i % 4}"
        d.mkdir(parents=True, exist_ok=True)
        at = (i * 7919 * 4096) % (len(pool) - MiB)
        with open(d / f"s{i:05d}.bin", "wb") as f:
            f.write(i.to_bytes(8, "little") + os.urandom(56))
            f.write(pool[at + 64:at + MiB])
            f.flush()
            os.fsync(f.fileno())  # written back now, not by the kernel during A's first runs


def sweep(prefix: Path, data: Path, subset: str, cgroup: Path | None, repeats: int,
          disk: list[str], iters: int = 40) -> dict:
    modes = "synthetic,cached,disk" if disk else "synthetic,cached"
    argv = [sys.executable, str(ROOT / "harness.py"), "--prefix", str(prefix), "--data",
            str(data), "--modes", modes, *disk, "--iters", str(iters), "--warmup", "3",
            "-b", "4", "-j", "2", "--cached-subset", subset, "--repeats", str(repeats),
            "--no-plots", "--no-advice", str(SCRIPT), str(data), "-j", "2"]
    if cgroup is not None:  # join the cgroup, then become the harness
        argv = [sys.executable, "-c", f"import os, sys; open({str(cgroup / 'cgroup.procs')!r}, "
                "'w').write('0'); os.execv(sys.executable, [sys.executable] + sys.argv[1:])",
                *argv[1:]]
    shutil.rmtree(prefix, ignore_errors=True)  # an earlier run's: a fresh sweep each time
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
    read_bps = rate * MiB  # every sample is one 1 MiB file
    return (f"A's disk run (cache 0, {throttle_bps / 1e6:.0f} MB/s): fetch stall "
            f"{c['fetch_stall_s']:.1f} s per epoch of {files} files; {rate:.2f} samples/s x "
            f"1 MiB = {read_bps / 1e6:.2f} MB/s, {100 * (read_bps / throttle_bps - 1):+.1f}% "
            "of the throttle (target: within 5%)")


def residency_line(prefix: Path) -> str:
    """The cached runs' check: the least share of the bytes each warmed that was resident at
    its start and at its end (the dataset's resident bytes after it, the subset's and no
    other's: the disk runs at cache 0 evict)."""
    starts, ends = [], []
    for path in sorted((prefix / "runs").glob("cached-*.json")):
        io = json.loads(path.read_text())["io"]
        warmed = io["cache_state"]["warmed_bytes"]
        starts.append(io["cache_state"]["resident_before_bytes"] / warmed)
        ends.append(io["resident_after_bytes"] / warmed)
    return (f"A's {len(starts)} cached runs: resident at start >= {100 * min(starts):.1f}%, at "
            f"end >= {100 * min(ends):.1f}% of the subset warmed (flagged below 95%)")


def compare(a_label: str, inside: dict, b_label: str, outside: dict, fetch: str) -> None:
    """A's and B's prep stalls, A's fetch stall against the throttle, and the figure (last)."""
    (a_s, a_half), (b_s, b_half) = prep(inside), prep(outside)
    noise = (a_half ** 2 + b_half ** 2) ** 0.5 / b_s
    print(f"{a_label}: prep stall {a_s:.2f} s per epoch; not cached: "
          f"{inside['measured'].get('not_cached') or 'none'}")
    print(f"{b_label}: prep stall {b_s:.2f} s; not cached: "
          f"{outside['measured'].get('not_cached') or 'none'}")
    print(fetch)
    diff = (a_s - b_s) / b_s
    print(f"prep stall of data larger than memory (A) vs the same job on a subset that fits "
          f"(B): {100 * diff:+.1f}% (target: within 5%: "
          f"{'yes' if abs(diff) <= 0.05 else 'no'}; the runs' own noise: ±{100 * noise:.1f}%)")


def in_cgroup(a: argparse.Namespace) -> None:
    """A in a memory cgroup smaller than the dataset; B outside it, on A's subset."""
    work = Path(a.dir)
    make_data(work / "data", a.files or 600)
    limit = int(a.limit[:-1]) << 20 if a.limit.endswith("M") else int(a.limit)
    cg = V1 / f"dsanalyze-bench-ltm-{os.getpid()}"
    cg.mkdir()
    try:
        (cg / "memory.limit_in_bytes").write_text(str(limit))
        disk = ["--cache", "0", "--storage-bw", str(a.storage_bw)]
        inside = sweep(work / "a", work / "data", "auto", cg, a.repeats, disk, a.iters)
    finally:
        remove(cg)
    sub = inside["measured"]["subsets"][0]
    outside = sweep(work / "b", work / "data", str(sub["bytes"]), None, a.repeats, [], a.iters)
    compare(f"A (in a {limit >> 20} MiB cgroup, {sub['files']} of {sub['of_files']} files "
            "warmed)", inside, f"B (outside, the same {sub['bytes'] >> 20} MiB subset)",
            outside, fetch_line(inside, a.files or 600, a.storage_bw))


def mem_total_bytes() -> int:
    line = next(x for x in Path("/proc/meminfo").read_text().splitlines()
                if x.startswith("MemTotal:"))
    return int(line.split()[1]) * 1024


def on_machine(a: argparse.Namespace) -> None:
    """A on the whole machine over data larger than its RAM, B on a subset that surely fits;
    the dataset deleted whatever happens."""
    work = Path(a.dir + "-machine")
    ram = mem_total_bytes()
    files = a.files or -(-int(1.1 * ram) // MiB)
    work.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(work).free
    if free - files * MiB < MIN_FREE_AFTER_BYTES:
        sys.exit(f"{files} MiB of data would leave {(free - files * MiB) / 1e9:.0f} GB of the "
                 f"disk free (under {MIN_FREE_AFTER_BYTES / 1e9:.0f} GB): lower --files")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that `finally` runs
    try:
        t0 = time.monotonic()
        make_data(work / "data", files)
        print(f"dataset: {files} x 1 MiB = {files / 1024:.1f} GiB, {files * MiB / ram:.2f} x "
              f"RAM ({ram / 2 ** 30:.1f} GiB), written in {time.monotonic() - t0:.0f} s",
              flush=True)
        disk = ["--cache", "0", "--storage-bw", str(a.storage_bw)]
        inside = sweep(work / "a", work / "data", "auto", None, a.repeats, disk, a.iters)
        outside = sweep(work / "b", work / "data", a.fits, None, a.repeats, [], a.iters)
    finally:
        shutil.rmtree(work / "data", ignore_errors=True)
    if not inside["measured"]["subsets"] or not outside["measured"]["subsets"]:
        sys.exit("A's or B's cached runs warmed the whole dataset: nothing to compare")
    sub = inside["measured"]["subsets"][0]
    b_sub = outside["measured"]["subsets"][0]
    print(f"A's subset: {sub['files']} of {sub['of_files']} files ({sub['bytes'] / 2 ** 30:.1f} "
          f"GiB); room {sub['room_bytes'] / 2 ** 30:.1f} GiB ({sub['room_why']})")
    print(residency_line(work / "a"))
    compare("A (the whole machine, --cached-subset auto)", inside,
            f"B (--cached-subset {a.fits}: {b_sub['files']} files, "
            f"{b_sub['bytes'] / 2 ** 30:.1f} GiB)", outside,
            fetch_line(inside, files, a.storage_bw))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", default="/tmp/dsanalyze-ltm")
    p.add_argument("--files", type=int,
                   help="1 MiB samples (--machine: 1.1 x RAM unless given)")
    p.add_argument("--limit", default=str(1200 << 20))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--iters", type=int, default=40,
                   help="iterations a run (4 samples each): on a quiet machine the decode runs "
                        "at about 160 samples/s, and 40 are one second of it; 300 or more for "
                        "a figure within 5% (with a --storage-bw that keeps the disk run short)")
    p.add_argument("--storage-bw", type=int, default=5_000_000,
                   help="A's disk run, B/s (slower than the decode, even on a loaded CPU)")
    p.add_argument("--machine", action="store_true",
                   help="data larger than this machine's RAM, no cgroup (deleted at the end)")
    p.add_argument("--fits", default="2G", help="--machine: B's subset, one that surely fits")
    a = p.parse_args()
    on_machine(a) if a.machine else in_cgroup(a)


if __name__ == "__main__":
    main()
