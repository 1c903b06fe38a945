"""The machine's parallel efficiency: does a core do as much of the job's work when the
other cores are busy too?

    scaling = measure(dataset.files)      # records.CpuScaling, about 2 s

A few of the dataset's own files are decoded in a loop (PIL decode and a resize to
224 x 224, like the job's prep; files that are not images are checksummed from memory
instead), first by one process pinned to the first CPU the harness may use, then by one
process per CPU at once, each pinned to its own, in alternating phases (solo, parallel,
solo, parallel: drift hits both alike). Each process times its own CPU (`process_time`)
over whole passes over its files, so a core lent to another process meanwhile does not
count. contention = (parallel CPU per item / solo - 1) / (CPUs - 1): on SMT siblings or
cores that share a cache, two decodes at once each take more CPU than one alone. The
what-if model takes it as the contention law's default when the runs measured one CPU
count only.

The workers are this module run as argv subprocesses (`python -m
dsanalyze.resources.cpuscale --cpu C --work decode -- FILE...`), driven over their
stdin: `go SECONDS` runs one phase and answers one JSON line. Outside any job cgroup,
before the sweep's runs. A probe that cannot run says why and never stops the sweep.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dsanalyze.records import CpuScaling

PHASE_S = 0.3  # wall seconds of one phase
ROUNDS = 2  # solo then parallel phases, each this many times
FILES = 3  # files of the dataset each process cycles over
CHECKSUM_BYTES = 4 << 20  # at most this much of a file that is not an image
START_TIMEOUT_S = 30.0


def measure(files: Sequence[str], cpu_ids: Sequence[int] | None = None,
            phase_s: float = PHASE_S, rounds: int = ROUNDS) -> CpuScaling:
    """Solo and parallel CPU per item on the given CPUs (default: the harness's affinity)."""
    # imported here: the workers run this module and need it not (they start faster)
    from dsanalyze.records import CpuScaling

    cpus = sorted(cpu_ids if cpu_ids is not None else os.sched_getaffinity(0))
    if len(cpus) < 2:
        return CpuScaling(len(cpus), None, why="one CPU: nothing runs in parallel")
    picked, work = probe_files(files)
    if not picked:
        return CpuScaling(len(cpus), None, why="no dataset files to decode")
    t0 = time.perf_counter()
    procs = [start_worker(c, work, picked) for c in cpus]
    try:
        for p in procs:
            expect_ready(p)
        solo, parallel = [0.0, 0], [0.0, 0]  # CPU seconds, items
        for _ in range(rounds):
            _add(solo, phase(procs[:1], phase_s))
            _add(parallel, phase(procs, phase_s))
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        return CpuScaling(len(cpus), None, work, why=f"the probe failed: {e}",
                          probe_s=time.perf_counter() - t0)
    finally:
        stop(procs)
    t1, tn = solo[0] / solo[1], parallel[0] / parallel[1]
    return CpuScaling(len(cpus), max(0.0, (tn / t1 - 1) / (len(cpus) - 1)), work, t1, tn,
                      int(solo[1] + parallel[1]), time.perf_counter() - t0)


def probe_files(files: Sequence[str]) -> tuple[list[str], str]:
    """The files a worker cycles over (`FILES` of them, spread over the list) and its work:
    decode where they are all images, else checksum."""
    from dsanalyze.dataset import IMAGE_EXTENSIONS  # not for the workers: they start faster

    picked = [files[i * len(files) // FILES] for i in range(min(FILES, len(files)))]
    work = "decode" if all(f.lower().endswith(IMAGE_EXTENSIONS) for f in picked) else "checksum"
    return picked, work


def start_worker(cpu: int, work: str, files: Sequence[str]) -> subprocess.Popen:
    """One worker (this module run as an argv subprocess), pinned to `cpu`, driven over its
    stdin (`phase`); `expect_ready` waits for it."""
    return subprocess.Popen([sys.executable, "-m", __name__, "--cpu", str(cpu), "--work", work,
                             "--", *files], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def expect_ready(p: subprocess.Popen) -> None:
    line = p.stdout.readline().strip() if p.stdout else ""
    if line != "ready":
        err = (p.stderr.read() if p.poll() is not None and p.stderr else "").strip()
        raise ValueError(f"a worker did not start: {err.splitlines()[-1] if err else line!r}")


def phase(procs: list[subprocess.Popen], seconds: float) -> list[dict[str, float]]:
    """Release every process for one phase at once, then collect their answers."""
    for p in procs:
        p.stdin.write(f"go {seconds}\n")
        p.stdin.flush()
    return [json.loads(p.stdout.readline()) for p in procs]


def _add(total: list, answers: list[dict[str, float]]) -> None:
    total[0] += sum(a["cpu_s"] for a in answers)
    total[1] += sum(a["items"] for a in answers)


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        try:
            p.stdin.close()
            p.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            p.kill()
            p.wait()


# ---- the worker ------------------------------------------------------------------------------

def _decode(data: bytes) -> None:
    from PIL import Image

    Image.open(io.BytesIO(data)).convert("RGB").resize((224, 224))


def _checksum(data: bytes) -> None:
    zlib.crc32(data)


def _worker(cpu: int, work: str, files: list[str]) -> None:
    """Pinned to `cpu`: a phase per `go SECONDS` line, whole passes over the files until
    SECONDS passed; answers the CPU seconds and items of the phase."""
    os.sched_setaffinity(0, {cpu})
    do = _decode if work == "decode" else _checksum
    data = [Path(f).read_bytes()[:None if work == "decode" else CHECKSUM_BYTES] for f in files]
    for d in data:  # warm: imports, the decoder's tables, the caches
        do(d)
    print("ready", flush=True)
    for line in sys.stdin:
        seconds = float(line.split()[1])
        c0, t0, n = time.process_time(), time.perf_counter(), 0
        while n == 0 or time.perf_counter() - t0 < seconds:
            for d in data:
                do(d)
            n += len(data)
        print(json.dumps({"cpu_s": time.process_time() - c0, "items": n}), flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu", type=int, required=True)
    ap.add_argument("--work", choices=("decode", "checksum"), required=True)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args(argv)
    _worker(args.cpu, args.work, args.files)


if __name__ == "__main__":
    main()
