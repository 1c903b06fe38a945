#!/usr/bin/env python3
"""An answer in minutes: the adaptive sweep against the full grid, early stop against full runs.

    .venv/bin/python bench/adaptive.py [--dir DIR] [--only demo,prep,fetch,periodic] [--reuse]

Workloads (each measured twice with harness.py, in its own prefixes under DIR):
- `demo`: configs/demo.toml on its data made as the Makefile makes it (512 JPEGs,
  ~50 MB; 1 and 2 CPUs x unthrottled and 8 MB/s).
- `prep`: the built-in job, 10 ms step, 1 DataLoader worker, on the demo data:
  decoding holds it at any CPU count; 1, 2 CPUs x cache none, 50% x bw none, 32M.
- `fetch`: the built-in job, 60 ms step, 2 workers, on 256 larger JPEGs (~190 KB):
  1, 2 CPUs x cache 0, 50% x bw 8M, 32M: storage holds it.
The full grid runs every configuration for `--epochs 2`; the adaptive sweep is
`--adaptive --until-ci 2% --epochs 3` (at most 3 epochs, each run stopping
when sure). Both recommendations are for a job of 3 epochs (the first cold):
the adaptive one is its last decision (`adaptive.json`); the full grid's is the
same choice (`whatif/nextrun.choose`) over a model fitted on all its runs.
They match when they name the same configuration, or when the full grid's
model cannot tell them apart (the adaptive pick's rate inside the full
grid's pick's interval).
- `periodic`: tests/scripts/train_periodic.py (a checkpoint and 60 ms more
  every 7 batches, real DataLoader) in cached mode at 1 and 2 CPUs, run for
  240 iterations, then with `--until-ci 2%` (at most 240).
Early stop, two ways: each early-stopped run's steady rate against the
full-length run of the same configuration (demo, prep, fetch: the full grid's;
periodic), which includes the drift between two runs on a shared machine; and
the rule replayed over each full-length run's own iteration times (where
`RankStop` would have stopped it), which is the rule's own error.
Prints per workload runs, wall seconds and both recommendations, then the
early-stop table; the figure last.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dsanalyze import adaptive, store  # noqa: E402
from dsanalyze.analysis import stalls  # noqa: E402
from dsanalyze.config import Sweep  # noqa: E402
from dsanalyze.dataset import scan_dataset  # noqa: E402
from dsanalyze.instrument.untilci import RankStop  # noqa: E402
from dsanalyze.jobs.datasets import make_dataset  # noqa: E402
from dsanalyze.records import RunResult  # noqa: E402
from dsanalyze.settings import SETTINGS  # noqa: E402
from dsanalyze.whatif import nextrun  # noqa: E402

DEMO_DATA = REPO / "results" / "demo" / "data"
FULL = ["--epochs", "2"]
ADAPTIVE = ["--adaptive", "--until-ci", "2%", "--epochs", "3"]
QUIET = ["--no-plots", "--no-advice"]


@dataclass(frozen=True)
class Workload:
    name: str
    args: tuple[str, ...]  # the job and its grid
    data: Path


def workloads(root: Path, only: set[str]) -> list[Workload]:
    if not DEMO_DATA.is_dir():  # as `make demo` makes it
        make_dataset(DEMO_DATA, 512, 8, (500, 375), 0.3, 0)
    big = root / "data-fetch"
    if "fetch" in only and not big.is_dir():
        make_dataset(big, 256, 4, (900, 700), 0.3, 3)
    common = ("-b", "16", "--warmup", "5", "--device", "sim")
    return [
        Workload("demo", ("--config", str(REPO / "configs" / "demo.toml")), DEMO_DATA),
        Workload("prep", (*common, "-j", "1", "--sim-step-ms", "10", "--cpus", "1,2",
                          "--cache", "none,50%", "--storage-bw", "none,32M"), DEMO_DATA),
        Workload("fetch", (*common, "-j", "2", "--sim-step-ms", "60", "--cpus", "1,2",
                           "--cache", "0,50%", "--storage-bw", "8M,32M"), big)]


REUSE = False  # --reuse: a prefix with its wall.json is read, not measured again


def harness(*argv: str, log: Path) -> float:
    """Run harness.py; returns its wall seconds (kept in the prefix's wall.json)."""
    wall = log.parent / "wall.json"
    if REUSE and wall.is_file():
        return float(json.loads(wall.read_text())["wall_s"])
    env = dict(os.environ, PYTHONPATH=str(REPO))
    t = time.monotonic()
    with log.open("w") as f:
        rc = subprocess.run([sys.executable, str(REPO / "harness.py"), *argv], stdout=f,
                            stderr=subprocess.STDOUT, env=env, cwd=REPO).returncode
    wall_s = time.monotonic() - t
    print(f"  harness {' '.join(argv[-6:])}: exit {rc}, {wall_s:.0f} s (log {log})", flush=True)
    wall.write_text(json.dumps({"wall_s": wall_s, "exit": rc}))
    return wall_s


def full_pick(prefix: Path, sweep: Sweep, epochs: int) -> nextrun.Decision:
    """The full grid's recommendation: the adaptive sweep's choice over all its runs."""
    runs = [r for r in store.load_runs(prefix) if r.ok]
    sizes = list(scan_dataset(sweep.job.data_dir).file_bytes)
    grid = sweep.resource_grid(sum(sizes))
    cands = adaptive.candidates(runs, grid, sizes, lambda c: c or len(os.sched_getaffinity(0)))
    return nextrun.choose(cands, SETTINGS.input_bound_pct, epochs, SETTINGS.target_pct)


def sweep_of(prefix: Path) -> Sweep:
    """The grid the full sweep measured, rebuilt from its runs."""
    runs = store.load_runs(prefix)
    disk = [r.spec.resources for r in runs if r.mode.value == "disk"]
    combos = tuple((r.cpus, r.cache.spec, str(r.storage_read_bps or "none")) for r in disk)
    return Sweep(runs[0].spec.job, str(prefix), combos=combos)


def compare(w: Workload, root: Path) -> dict:
    full_p, adapt_p = root / w.name / "full", root / w.name / "adaptive"
    for p in (full_p, adapt_p):
        p.mkdir(parents=True, exist_ok=True)
    data = ("--data", str(w.data))
    full_s = harness(*w.args, *data, *FULL, *QUIET, "--prefix", str(full_p), log=full_p / "log")
    adapt_s = harness(*w.args, *data, *ADAPTIVE, *QUIET, "--prefix", str(adapt_p),
                      log=adapt_p / "log")
    answer = json.loads((adapt_p / "adaptive.json").read_text())
    mine = nextrun.Decision.from_dict(answer["decisions"][-1])
    theirs = full_pick(full_p, sweep_of(full_p), answer["epochs"])
    low = theirs.pick_rate_sps * (1 - theirs.pick_half_width_pct / 100)
    high = theirs.pick_rate_sps * (1 + theirs.pick_half_width_pct / 100)
    match = mine.pick_key == theirs.pick_key or low <= mine.pick_rate_sps <= high
    return {"name": w.name, "full_runs": len(store.load_runs(full_p)), "full_s": full_s,
            "adaptive_runs": answer["runs"], "adaptive_s": adapt_s, "mine": mine,
            "theirs": theirs, "match": match, "full": full_p, "adaptive": adapt_p}


def periodic(root: Path) -> tuple[Path, Path]:
    """The checkpointing script, full length then early-stopped, cached, 1 and 2 CPUs."""
    script = REPO / "tests" / "scripts" / "train_periodic.py"
    args = ("--modes", "cached", "--cpus", "1,2", "--warmup", "5", "--iters", "240", *QUIET)
    job = (str(script), str(DEMO_DATA), "-b", "8", "-j", "2", "--step-ms", "30", "--every",
           "7", "--stall-ms", "60")
    out = []
    for name, extra in (("full", ()), ("early", ("--until-ci", "2%"))):
        prefix = root / "periodic" / name
        prefix.mkdir(parents=True, exist_ok=True)
        harness("--data", str(DEMO_DATA), *args, *extra, "--prefix", str(prefix), *job,
                log=prefix / "log")
        out.append(prefix)
    return out[0], out[1]


def early_rows(full: Path, early: Path, tag: str) -> list[tuple[str, float, float, int, int]]:
    """(run, full-length rate, early-stopped rate, iterations each) for every shared run."""
    ref = {r.run_id: r for r in store.load_runs(full) if r.ok}
    rows = []
    for r in store.load_runs(early):
        if r.ok and r.run_id in ref and r.ranks:
            a, b = stalls.run_rate(ref[r.run_id]).rate_sps, stalls.run_rate(r).rate_sps
            if a and b:
                rows.append((f"{tag}/{r.run_id}", a, b, len(ref[r.run_id].ranks[0].iter_s),
                             len(r.ranks[0].iter_s)))
    return rows


def replayed(run: RunResult, target_pct: float = 2.0) -> RunResult | None:
    """The run cut where `--until-ci` would have stopped it, the rule replayed over rank 0's
    own iteration times (`untilci.RankStop`, as in the rank); None if it would not have."""
    rec = SimpleNamespace(iter_s=[], samples=[], epoch=[], warmup=run.ranks[0].warmup)
    stop = RankStop(target_pct, 30, run.mode.value, 0, 1, None)
    r0 = run.ranks[0]
    for i in range(len(r0.iter_s)):
        rec.iter_s.append(r0.iter_s[i])
        rec.samples.append(r0.samples[i])
        rec.epoch.append(r0.epoch[i])
        if stop(rec):
            n = i + 1
            ranks = [dataclasses.replace(r, wait_s=r.wait_s[:n], iter_s=r.iter_s[:n],
                                         epoch=r.epoch[:n], samples=r.samples[:n])
                     for r in run.ranks]
            return dataclasses.replace(run, ranks=ranks)
    return None


def replay_rows(prefix: Path, tag: str) -> list[tuple[str, float, float, int, int]]:
    """Each full-length run against itself cut by the rule: the rule's own error, free of
    the drift between two runs."""
    rows = []
    for r in store.load_runs(prefix):
        cut = replayed(r) if r.ok and r.ranks else None
        if cut is not None:
            a, b = stalls.run_rate(r).rate_sps, stalls.run_rate(cut).rate_sps
            if a and b:
                rows.append((f"{tag}/{r.run_id}", a, b, len(r.ranks[0].iter_s),
                             len(cut.ranks[0].iter_s)))
    return rows


def print_rows(title: str, rows: list[tuple[str, float, float, int, int]]) -> int:
    print(f"\n{title}: run, rates (samples/s), iterations")
    for name, a, b, n_full, n_early in rows:
        print(f"  {name:45} full {a:7.1f} ({n_full:4d})  early {b:7.1f} ({n_early:4d})  "
              f"{100 * (b - a) / a:+6.1f}%")
    return sum(abs(b - a) / a <= 0.02 for _, a, b, _, _ in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=str(REPO / "results" / "bench-adaptive"))
    ap.add_argument("--only", default="demo,prep,fetch,periodic")
    ap.add_argument("--reuse", action="store_true",
                    help="read the prefixes already measured (their wall.json) instead of "
                         "measuring them again")
    ns = ap.parse_args()
    global REUSE
    REUSE = ns.reuse
    root, only = Path(ns.dir), set(ns.only.split(","))
    root.mkdir(parents=True, exist_ok=True)
    results, rows, replays = [], [], []
    for w in workloads(root, only):
        if w.name in only:
            res = compare(w, root)
            results.append(res)
            rows += early_rows(res["full"], res["adaptive"], w.name)
            replays += replay_rows(res["full"], w.name)
    if "periodic" in only:
        full, early = periodic(root)
        rows += early_rows(full, early, "periodic")
        replays += replay_rows(full, "periodic")
    print("\nworkload  grid: runs  wall s  |  adaptive: runs  wall s  share  |  recommendations")
    for r in results:
        print(f"{r['name']:8}  {r['full_runs']:10d}  {r['full_s']:6.0f}  |  {r['adaptive_runs']:14d}"
              f"  {r['adaptive_s']:6.0f}  {r['adaptive_s'] / r['full_s']:5.2f}  |  "
              f"grid {r['theirs'].pick_key} {r['theirs'].pick_rate_sps:.1f} "
              f"±{r['theirs'].pick_half_width_pct:.1f}%; adaptive {r['mine'].pick_key} "
              f"{r['mine'].pick_rate_sps:.1f} ±{r['mine'].pick_half_width_pct:.1f}% "
              f"({r['mine'].verdict.value}); {'match' if r['match'] else 'DIFFER'}")
        print(f"          adaptive's last step: {r['mine'].reason}")
    within = print_rows("early-stopped runs against full-length runs of the same "
                        "configuration (two runs: the machine's drift included)", rows)
    same = print_rows("the rule replayed over each full-length run (one run: the rule's own "
                      "error)", replays)
    print("\nFIGURE: " + "; ".join(
        f"{r['name']}: {r['adaptive_runs']} runs {r['adaptive_s']:.0f} s vs grid "
        f"{r['full_runs']} runs {r['full_s']:.0f} s ({r['adaptive_s'] / r['full_s']:.2f}), "
        f"{'match' if r['match'] else 'differ'}" for r in results)
        + f"; early-stop rates within 2% of full length: {within} of {len(rows)} (two runs), "
        f"{same} of {len(replays)} (replayed)")


if __name__ == "__main__":
    main()
