#!/usr/bin/env python3
"""Accuracy of the what-if model on this machine, out of sample only.

    .venv/bin/python bench/whatif_accuracy.py [--dir DIR] [--fresh] [--repeats R]
                                              [--lock /tmp/dsa.lock]

1. Measures a grid with harness.py (resumable: completed runs are kept; one
   prefix per job under DIR): the built-in job on the sim device (batch 8,
   2 workers, 3 epochs) over 500 generated JPEGs of about 530 KB (260 MB):
   - the base job (60 ms step, 1 rank) at 1 CPU: cache {0, 25%, 50%, 100%}
     on the device, and 16, 24 and 40 MiB/s at cache 0; at 2 CPUs: cache
     {0, 50%} on the device and 24 MiB/s at cache 0;
   - a step twice as fast (30 ms: `--gpu-speedup 2`) at 1 and 2 CPUs, cache 0;
   - 2 ranks (60 ms) at 2 CPUs, cache 0, the device and 24 MiB/s.
   26 runs: about 14 minutes on 2 quiet CPUs per pass (`--no-advice`).
   Every disk run records the storage device's cold bandwidth and latency.
   `--repeats R` (default 2) measures the whole grid R times, one pass after
   the other, so that the host's drift (this VM's CPUs slow down and speed up
   by 10-20% over minutes) falls on every configuration alike rather than on
   whichever job ran in a slow minute; a configuration's figure is the mean
   over its repeats, as in the stall table.
2. `whatif.validate` over every run: leave-one-configuration-out (each disk
   configuration, and each cached one of the other jobs, with its repeats,
   predicted by a model fitted on every other run) and extrapolation (fitted on the base job at 1 CPU only:
   2 CPUs, the faster step and 2 ranks predicted). 24 MiB/s at cache 0 lies
   between the measured 16 and 40 MiB/s; 50% between 25% and 100%.
3. Prints each held-out run (measured, predicted, 90% interval), the
   parameters, the cache simulator against the cgroup's read counter, and,
   last, the figure: median and maximum |error| over both splits and the
   interval coverage against its nominal level.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dsanalyze import store  # noqa: E402
from dsanalyze.analysis import stalls  # noqa: E402
from dsanalyze.config import format_bytes  # noqa: E402
from dsanalyze.dataset import scan_dataset  # noqa: E402
from dsanalyze.jobs.datasets import make_dataset  # noqa: E402
from dsanalyze.records import RunResult  # noqa: E402
from dsanalyze.report.params import how_text  # noqa: E402
from dsanalyze.report.whatif_text import RULES, unmade_text  # noqa: E402
from dsanalyze.whatif import api as whatif  # noqa: E402

IMAGES, CLASSES, SIZE, JITTER, SEED = 500, 4, (1200, 900), 0.3, 5
COMMON = ["-b", "8", "-j", "2", "--epochs", "3", "--warmup", "2", "--resume", "--no-plots",
          "--no-advice"]  # the advice fits the model after every part: minutes, and not asked
ALL_MODES = "synthetic,cached,loader,disk"


@dataclass(frozen=True)
class Part:
    """One harness call of the grid: a job (sim step, ranks) at one CPU count."""

    job: str  # the prefix under DIR: one job per prefix
    job_args: tuple[str, ...]
    cpus: str
    storage_bw: str
    cache: str
    modes: str = ALL_MODES


S60, S30, N2 = ("--sim-step-ms", "60"), ("--sim-step-ms", "30"), \
    ("--sim-step-ms", "60", "--nproc_per_node", "2")
# The smallest resources (1 CPU, 1 rank, the 60 ms step) are what the extrapolation split
# fits on; 24M lies between the measured 16M and 40M, 50% between 25% and 100%.
PARTS = [
    Part("s60-n1", S60, "1", "none", "0,25%,50%,100%"),
    Part("s60-n1", S60, "1", "16M,24M,40M", "0", "cached,disk"),
    Part("s60-n1", S60, "2", "none", "0,50%"),
    Part("s60-n1", S60, "2", "24M", "0", "cached,disk"),
    Part("s30-n1", S30, "1,2", "none", "0", "synthetic,cached,disk"),
    Part("s60-n2", N2, "2", "none,24M", "0", "synthetic,cached,disk"),
]
TARGET_MEDIAN_PCT, TARGET_MAX_PCT, TARGET_COVERAGE_PTS = 3.0, 10.0, 10.0


def measure(base: Path, fresh: bool, lock: str | None, repeats: int) -> list[Path]:
    """Measure every part of the grid not measured yet, `repeats` passes; the job prefixes."""
    data = base / "data"
    if fresh:
        for part in PARTS:
            shutil.rmtree(base / part.job, ignore_errors=True)
    if not data.is_dir() or len(scan_dataset(data).files) != IMAGES:
        shutil.rmtree(data, ignore_errors=True)
        with _locked(lock):  # uses every core
            n, total = make_dataset(data, IMAGES, CLASSES, SIZE, JITTER, SEED)
        print(f"dataset: {n} JPEGs, {format_bytes(total)} in {data}", flush=True)
    t0 = time.monotonic()
    # pass k asks for k repeats with --resume: the earlier passes' runs are kept, so each
    # pass measures only its own repeat, after the whole grid's previous one
    for k in range(1, repeats + 1):
        for part in PARTS:  # the grid in parts, so that a shared lock is held minutes, not more
            argv = [sys.executable, str(REPO / "harness.py"), "--data", str(data), "--prefix",
                    str(base / part.job), "--cpus", part.cpus, "--storage-bw", part.storage_bw,
                    "--cache", part.cache, "--modes", part.modes, "--repeats", str(k),
                    *part.job_args, *COMMON]
            with _locked(lock):
                rc = subprocess.run(argv, cwd=REPO, stdout=subprocess.DEVNULL).returncode
            print(f"  pass {k}: {part.job} cpus {part.cpus}, storage {part.storage_bw}, cache "
                  f"{part.cache}: harness exit status {rc}", flush=True)
    print(f"grid measured in {time.monotonic() - t0:.0f} s", flush=True)
    return sorted({base / part.job for part in PARTS})


@contextlib.contextmanager
def _locked(path: str | None) -> Iterator[None]:
    """Hold an exclusive flock on `path` (machines shared by several benchmarks)."""
    if path is None:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _warn_runs(runs: list[RunResult]) -> None:
    for r in runs:
        if not r.ok:
            print(f"run {r.run_id} {r.status}: {r.error}")
        loose = {k: v.why for k, v in r.enforced.knobs().items() if not v.enforced}
        if loose:
            print(f"run {r.run_id}: limits not enforced: {loose}")


def _print_checks(val: whatif.Validation) -> None:
    for split in val.splits:
        print(f"\n{split.name}: {RULES[split.name]}"
              + (f"\n  {unmade_text(split.unmade)}" if split.unmade else ""))
        if split.fit_runs:
            print(f"  fitted on {len(split.fit_runs)} runs: {', '.join(split.fit_runs)}")
        for c in split.checks:
            label = c.run_id + (f" x{c.repeats}" if c.repeats > 1 else "")
            print(f"  {label:51s} measured {c.measured_sps:6.1f}  predicted "
                  f"{c.predicted_sps:6.1f} [{c.low_sps:6.1f}, {c.high_sps:6.1f}] "
                  f"{c.error_pct:+6.1f}% {'' if c.covered else 'OUTSIDE'}")


def check_cache(model: whatif.Model, runs: list[RunResult]) -> None:
    """The cache simulator's bytes read against the cgroup's read counter, per disk run with a
    cache budget (the budget plus the fitted slack; a diagnosis, not a prediction)."""
    print("\ncache simulator against the cgroup's read counter (which also counts library reads)")
    base = [r for r in runs if r.spec.job.world_size == model.ranks
            and r.spec.job.sim_step_ms == model.step_ms]
    for c in whatif.cache_check(model, base):
        if c.measured_read_bytes and c.cache_bytes is not None:
            print(f"  {c.run_id:36s} cache {format_bytes(c.cache_bytes):>6s}: read simulated "
                  f"{format_bytes(c.predicted_read_bytes):>6s}, measured "
                  f"{format_bytes(c.measured_read_bytes):>6s} "
                  f"({100 * (c.predicted_read_bytes / c.measured_read_bytes - 1):+.0f}%)")


def check_noise(runs: list[RunResult]) -> None:
    """What no model can beat: how far the repeats of one configuration lie apart, and the
    machine's decode probe (its contention between 2 busy cores) at each sweep's start."""
    spreads = []
    for config in whatif.configurations([r for r in runs if r.ok and r.ranks]):
        rates = [stalls.run_rate(r).rate_sps for r in config]
        if len(rates) > 1 and all(rates):
            spreads.append((100 * (max(rates) - min(rates)) / statistics.fmean(rates),
                            validation_label(config[0])))
    if spreads:
        spreads.sort()
        print(f"\nrun-to-run noise: the repeats of one configuration lie apart by (max - min) / "
              f"mean: median {statistics.median(s for s, _ in spreads):.1f}%, max "
              f"{spreads[-1][0]:.1f}% ({spreads[-1][1]}) over {len(spreads)} configurations")
    probes = sorted({(r.environment.get("cpu_scaling") or {}).get("contention") or 0.0
                     for r in runs if r.environment.get("cpu_scaling")})
    if probes:
        print(f"decode probe at each sweep's start: contention {', '.join(f'{c:.2f}' for c in probes)}"
              " (CPU per item added by a second busy core)")


def validation_label(run: RunResult) -> str:
    """The configuration's id (its first repeat's) and its job."""
    job = run.spec.job
    return f"{dataclasses.replace(run.spec, repeat=1).run_id} [{job.world_size} rank(s), " \
           f"step {job.sim_step_ms:g} ms]"


def report(prefixes: list[Path]) -> None:
    runs = [r for p in prefixes if (p / "runs").is_dir() for r in store.load_runs(p)]
    sizes = list(scan_dataset(runs[0].dataset.root).file_bytes)
    _warn_runs(runs)
    t0 = time.monotonic()
    val = whatif.validate(runs, sizes)
    print(f"validated in {time.monotonic() - t0:.0f} s")
    _print_checks(val)
    print("\nparameters of the model fitted on every run:")
    for p in val.model.params:
        print(f"  {p.name:32s} {'-' if p.value is None else f'{p.value:.4g}'} {p.unit}: "
              f"{how_text(p.how)}")
    check_cache(val.model, runs)
    check_noise(runs)
    lines = []
    for split in val.splits:
        if split.checks:
            f = whatif.split_summary(split.checks)
            lines.append(f"{split.name}: median {f['median_abs_error_pct']:.1f}%, max "
                         f"{f['max_abs_error_pct']:.1f}% over {f['held_out']} runs, coverage "
                         f"{f['coverage']:.0%}")
    f = whatif.split_summary(val.checks)
    ok = (f["median_abs_error_pct"] <= TARGET_MEDIAN_PCT and f["max_abs_error_pct"] <=
          TARGET_MAX_PCT and abs(f["coverage"] - f["nominal"]) * 100 <= TARGET_COVERAGE_PTS)
    print("\n" + "; ".join(lines))
    print(f"FIGURE what-if model, out of sample (both splits, {f['held_out']} held-out "
          f"configurations, {max(c.repeats for c in val.checks)} repeat(s) each): "
          f"median |error| {f['median_abs_error_pct']:.1f}%, max {f['max_abs_error_pct']:.1f}%, "
          f"interval coverage {f['coverage']:.0%} at {f['nominal']:.0%} nominal "
          f"({'meets' if ok else 'misses'} the target {TARGET_MEDIAN_PCT:g}% / "
          f"{TARGET_MAX_PCT:g}% / ±{TARGET_COVERAGE_PTS:g} points)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/dsanalyze-whatif-bench",
                    help="dataset and runs live here (kept between runs)")
    ap.add_argument("--fresh", action="store_true", help="re-measure every run")
    ap.add_argument("--no-measure", dest="measure", action="store_false",
                    help="only analyse the runs already there")
    ap.add_argument("--repeats", type=int, default=2,
                    help="passes over the grid; each configuration's figure is their mean")
    ap.add_argument("--lock", help="flock this file around each harness call (e.g. /tmp/dsa.lock)")
    ap.add_argument("--measure-only", dest="analyse", action="store_false",
                    help="measure the grid, do not analyse it")
    ns = ap.parse_args()
    base = Path(ns.dir)
    prefixes = measure(base, ns.fresh, ns.lock, ns.repeats) if ns.measure else \
        sorted({base / part.job for part in PARTS})
    if not ns.analyse:
        return 0
    with _locked(ns.lock):  # the analysis is light, but keep the machine quiet for others' timings
        report(prefixes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
