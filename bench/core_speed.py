"""The host probe's work timed on chosen cores, once a second, beside a sweep: is a slow
reading the machine's, or the probe's core's?

On the H200 (stop 60) the host probe, pinned to the harness's first CPU (which the job's runs
share), read 31-57% over its median right after some runs and came back within a minute; the
runs beside those readings were no slower than their twins. A 1 Hz sample of /proc/stat showed
that core idle between runs. Run this beside the sweep, on the probe's core and on one the sweep
never uses (the machine's last), and lay the readings against the runs' start and end:

    python bench/core_speed.py DATA --cpus 0,15 --seconds 300 > cores.tsv &
    python harness.py --data DATA ... ; kill %1

Each line: unix seconds, then per core the CPU milliseconds one item of the probe's work took
(the faster of two phases of 0.1 s, as `resources/hostspeed.py` reads it). The last line is
the figure: per core, the median and the largest reading over the median, in %.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import time
from pathlib import Path

from dsanalyze.dataset import scan_dataset
from dsanalyze.resources.hostspeed import HostProbe


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", type=Path, help="the dataset the sweep reads (its files are the work)")
    ap.add_argument("--cpus", default="0", help="cores to time, e.g. 0,15")
    ap.add_argument("--seconds", type=float, default=300.0, help="how long to sample")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between readings")
    args = ap.parse_args()
    cpus = [int(c) for c in args.cpus.split(",")]
    files = scan_dataset(args.data).files
    probes = [HostProbe.start(files, cpu_ids=[c]) for c in cpus]
    for cpu, probe in zip(cpus, probes):
        if probe.proc is None:
            print(f"error: the probe on CPU {cpu} did not start: {probe.why}", file=sys.stderr)
            return 1
    stopped = []
    signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
    readings: list[list[float]] = [[] for _ in cpus]
    t_end = time.monotonic() + args.seconds
    try:
        while time.monotonic() < t_end and not stopped:
            t0 = time.monotonic()
            row = [p.measure() for p in probes]
            print("\t".join([f"{time.time():.1f}", *(f"{1e3 * r:.3f}" if r else "-" for r in row)]),
                  flush=True)
            for seen, r in zip(readings, row):
                if r:
                    seen.append(r)
            time.sleep(max(0.0, args.interval - (time.monotonic() - t0)))
    except KeyboardInterrupt:
        pass
    finally:
        for p in probes:
            p.close()
    parts = []
    for cpu, seen in zip(cpus, readings):
        if seen:
            med = statistics.median(seen)
            parts.append(f"CPU {cpu}: median {1e3 * med:.3f} ms an item, at most "
                         f"{100 * (max(seen) / med - 1):+.0f}% over it ({len(seen)} readings)")
    print("figure: " + "; ".join(parts) if parts else "figure: no readings")
    return 0


if __name__ == "__main__":
    sys.exit(main())
