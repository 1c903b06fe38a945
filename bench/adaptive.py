#!/usr/bin/env python3
"""An answer in minutes: the adaptive sweep against the full grid, early stop against full runs.

    PYTHONPATH=. .venv/bin/python bench/adaptive.py [--dir DIR] [--only demo,prep,fetch,early]
        [--reuse]

Part 1, the adaptive sweep (`--adaptive --until-ci 2%`) against the full grid
on the same job, each measured by harness.py in its own prefix under DIR:
- `demo`: configs/demo.toml on its data as the Makefile makes it (512 JPEGs,
  ~50 MB; 1, 2 CPUs x unthrottled, 8 MB/s: 8 runs of 2 epochs). The adaptive
  sweep may run 3 epochs (a disk run's steady window starts after its cold
  epoch). Done when: at most 6 runs, 3 minutes, its pick within ±5%, and
  the same pick as the grid.
- `prep` (our own, prep-bound): the built-in job, 10 ms step, 1 DataLoader
  worker, batch 8, on the demo data; 1, 2 CPUs x cache none, 25%, 50% x
  storage none, 16M, 32M (22 runs of 2 epochs, the adaptive ones as long).
- `fetch` (our own, fetch-bound): tests/scripts/train_imagefolder.py, a
  user-style PyTorch script, 30 ms step, 2 workers, on 256 larger JPEGs
  (~190 KB each); 1, 2 CPUs x cache 0, 25%, 50% x storage 8M, 16M, 32M (22
  runs of 2 epochs, the adaptive ones as long). Done when: the adaptive
  sweep takes at most a third of the grid's wall time.
Both recommendations are for a job of as many epochs as the runs (the first
cold): the adaptive one is its last decision (`adaptive.json`); the grid's is
the same choice (`whatif/nextrun.choose`) over a model fitted on all its runs.
They match when they name the same configuration, or when the grid cannot
tell them apart: the grid's own measurement of the adaptive pick lies inside
the interval of the grid's pick.

Part 2 (`early`), the early stop against full-length runs. The rule
(`instrument/untilci.RankStop`) is a function of rank 0's iteration times up
to the point where it stops, so the rate an `--until-ci 2%` run reports is
the rate of the same process's first iterations up to that point. Each
full-length run (`--iters 400`, no early stop) is cut where the rule would
have stopped it (the rule replayed over its own iteration times, at the
decision points of the live rule) and the cut rate compared with the same
run's full-length rate: the rule's own error, with no run-to-run drift
between the two. Jobs: tests/scripts/train_periodic.py (a checkpoint and
60 ms more every 7 batches: a periodic stall) in synthetic, cached and disk
modes at 1 and 2 CPUs, and the built-in job (an epoch-boundary stall every
32 batches) cached at 1 CPU. For reference, part 1's early-stopped runs
against the grid's runs of the same configurations (two runs: the drift of a
shared machine between them included) are printed too.

Prints per workload runs, wall seconds and both recommendations, then the
early-stop tables; the figure last. About 15 minutes on a quiet 2-core
machine; `--reuse` re-reads the prefixes already measured (their wall.json).

`--replay` measures nothing in part 1: the adaptive search is driven over each
workload's full grid already measured under DIR (each run it asks for is the
grid's measurement of it; a repeat, the same measurement again), so its
decisions, runs and seconds (the replayed runs' durations against the grid's)
are the rule's alone, free of the machine's load between two sweeps.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
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
from dsanalyze.cli import harness_parser  # noqa: E402
from dsanalyze.config import Sweep  # noqa: E402
from dsanalyze.dataset import scan_dataset  # noqa: E402
from dsanalyze.instrument.untilci import RankStop  # noqa: E402
from dsanalyze.jobs.datasets import make_dataset  # noqa: E402
from dsanalyze.options import HarnessOptions, build_sweep  # noqa: E402
from dsanalyze.records import RunResult  # noqa: E402
from dsanalyze.report.adaptive import decision_text  # noqa: E402
from dsanalyze.settings import SETTINGS  # noqa: E402
from dsanalyze.whatif import nextrun  # noqa: E402

DEMO_DATA = REPO / "results" / "demo" / "data"
ADAPTIVE = ("--adaptive", "--until-ci", "2%")
QUIET = ("--no-plots", "--no-advice")
PERIODIC = REPO / "tests" / "scripts" / "train_periodic.py"


@dataclass(frozen=True)
class Workload:
    name: str
    data: Path
    grid: tuple[str, ...]  # the job and its grid, as the full grid runs it
    adaptive: tuple[str, ...]  # what the adaptive sweep adds
    job: tuple[str, ...] = ()  # a user's script and its arguments, last on the command line


def workloads(root: Path, only: set[str]) -> list[Workload]:
    if not DEMO_DATA.is_dir():  # as `make demo` makes it
        make_dataset(DEMO_DATA, 512, 8, (500, 375), 0.3, 0)
    big = root / "data-fetch"
    if "fetch" in only and not big.is_dir():
        make_dataset(big, 256, 4, (900, 700), 0.3, 3)
    two = ("--epochs", "2", "--warmup", "5", "-b", "8", "--cpus", "1,2")
    return [
        Workload("demo", DEMO_DATA, ("--config", str(REPO / "configs" / "demo.toml")),
                 (*ADAPTIVE, "--epochs", "3")),
        Workload("prep", DEMO_DATA, (*two, "--device", "sim", "-j", "1", "--sim-step-ms", "10",
                                     "--cache", "none,25%,50%", "--storage-bw", "none,16M,32M"),
                 ADAPTIVE),
        Workload("fetch", big, (*two, "--cache", "0,25%,50%", "--storage-bw", "8M,16M,32M"),
                 ADAPTIVE, (str(PERIODIC), str(big), "-b", "8", "-j", "2", "--step-ms", "30",
                            "--every", "1000000"))]


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
    if rc != 0:
        sys.exit(f"harness.py failed (exit {rc}): see {log}")
    wall.write_text(json.dumps({"wall_s": wall_s, "exit": rc}))
    return wall_s


def full_pick(prefix: Path, sweep: Sweep, epochs: int) -> tuple[nextrun.Decision, dict]:
    """The full grid's recommendation (the adaptive sweep's choice over all its runs), and
    its candidates by key."""
    runs = [r for r in store.load_runs(prefix) if r.ok]
    sizes = list(scan_dataset(sweep.job.data_dir).file_bytes)
    grid = sweep.resource_grid(sum(sizes))
    cands = adaptive.candidates(runs, grid, sizes, lambda c: c or len(os.sched_getaffinity(0)))
    pick = nextrun.choose(cands, SETTINGS.input_bound_pct, epochs, SETTINGS.target_pct)
    return pick, {c.key: c for c in cands}


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
    full_s = harness(*data, *w.grid, *QUIET, "--prefix", str(full_p), *w.job,
                     log=full_p / "log")
    adapt_s = harness(*data, *w.grid, *w.adaptive, *QUIET, "--prefix", str(adapt_p), *w.job,
                      log=adapt_p / "log")
    answer = json.loads((adapt_p / "adaptive.json").read_text())
    mine = nextrun.Decision.from_dict(answer["decisions"][-1])
    theirs, cands = full_pick(full_p, sweep_of(full_p), answer["epochs"])
    match = same_answer(mine, theirs, cands)
    return {"name": w.name, "full_runs": len(store.load_runs(full_p)), "full_s": full_s,
            "adaptive_runs": answer["runs"], "adaptive_s": adapt_s, "mine": mine,
            "theirs": theirs, "match": match, "full": full_p, "adaptive": adapt_p}


def replay(w: Workload, root: Path) -> dict:
    """The adaptive search over the full grid's stored runs (the module's `--replay`)."""
    full_p, out = root / w.name / "full", root / w.name / "replay"
    shutil.rmtree(out, ignore_errors=True)
    argv = ["--data", str(w.data), *w.grid, *w.adaptive, *QUIET, "--prefix", str(out), *w.job]
    sweep = build_sweep(HarnessOptions.from_flat(vars(harness_parser().parse_args(argv))))
    sizes = list(scan_dataset(sweep.job.data_dir).file_bytes)
    stored = {r.run_id: r for r in store.load_runs(full_p)}

    def measure(spec):
        run = stored[dataclasses.replace(spec, repeat=1).run_id]
        store.write_run(out, dataclasses.replace(run, spec=dataclasses.replace(
            run.spec, repeat=spec.repeat)))
        return run
    answer = adaptive.search(sweep, sweep.run_specs(sum(sizes)), measure, sizes,
                             lambda c: c or len(os.sched_getaffinity(0)),
                             lambda line: print(f"  {w.name}: {line}", flush=True))
    theirs, cands = full_pick(full_p, sweep_of(full_p), answer.epochs)
    return {"name": w.name, "full_runs": len(stored), "adaptive_runs": answer.runs,
            "full_s": sum(r.duration_s for r in stored.values()), "adaptive_s": answer.seconds,
            "mine": answer.final, "theirs": theirs,
            "match": same_answer(answer.final, theirs, cands), "full": full_p, "adaptive": out}


def same_answer(mine: nextrun.Decision, theirs: nextrun.Decision, cands: dict) -> bool:
    """The issue's criterion: the same pick, or the grid's measurement of the adaptive pick
    inside the interval of the grid's pick."""
    low = theirs.pick_rate_sps * (1 - theirs.pick_half_width_pct / 100)
    high = theirs.pick_rate_sps * (1 + theirs.pick_half_width_pct / 100)
    grid_of_mine = cands[mine.pick_key]
    return mine.pick_key == theirs.pick_key or (
        grid_of_mine.measured and low <= grid_of_mine.measured_sps <= high)


def early(root: Path) -> list[Path]:
    """Full-length runs (400 iterations, no early stop) of the checkpointing script in every
    mode at 1 and 2 CPUs, and of the built-in job cached at 1 CPU."""
    common = ("--data", str(DEMO_DATA), "--warmup", "5", "--iters", "400", *QUIET)
    jobs = {"periodic": ("--cpus", "1,2", str(PERIODIC), str(DEMO_DATA), "-b", "8", "-j", "2",
                         "--step-ms", "30", "--every", "7", "--stall-ms", "60"),
            "builtin": ("--modes", "cached", "--cpus", "1", "--device", "sim", "-b", "16",
                        "-j", "2", "--sim-step-ms", "40")}
    out = []
    for name, job in jobs.items():
        prefix = root / "early" / name
        prefix.mkdir(parents=True, exist_ok=True)
        harness(*common, "--prefix", str(prefix), *job, log=prefix / "log")
        out.append(prefix)
    return out


def early_rows(full: Path, early: Path, tag: str) -> list[tuple[str, float, float, int, int]]:
    """(run, full-length rate, early-stopped rate, iterations each) for every run of `early`
    that the rule stopped (not those that ran to their maximum) and `full` measured too."""
    ref = {r.run_id: r for r in store.load_runs(full) if r.ok}
    rows = []
    for r in store.load_runs(early):
        if r.ok and r.run_id in ref and r.ranks and \
                (r.ranks[0].extra.get("until_ci") or {}).get("stopped"):
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
    stop.epoch_batches = run.ranks[0].extra.get("batches_per_epoch")  # as the rank knew it
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


def whole_epochs(run: RunResult) -> RunResult:
    """The run without its last epoch when that one is partial: a job trains whole epochs,
    and a run that ends 16 steps into its last counts that epoch's boundary stall (workers
    restarted) four times over."""
    r0 = run.ranks[0]
    per_epoch = r0.extra.get("batches_per_epoch")
    last = r0.epoch.index(r0.epoch[-1]) if r0.epoch else 0
    if not per_epoch or last == 0 or len(r0.epoch) - last >= per_epoch:
        return run
    return dataclasses.replace(run, ranks=[dataclasses.replace(
        r, wait_s=r.wait_s[:last], iter_s=r.iter_s[:last], epoch=r.epoch[:last],
        samples=r.samples[:last]) for r in run.ranks])


def replay_rows(prefix: Path, tag: str) -> list[tuple[str, float, float, int, int]]:
    """Each full-length run against itself cut by the rule: the rule's own error, free of
    the drift between two runs. Each row twice: against the whole run, and against its
    whole epochs (`whole_epochs`, tagged `/epochs`)."""
    rows = []
    for r in store.load_runs(prefix):
        cut = replayed(r) if r.ok and r.ranks else None
        if cut is None:
            print(f"  {tag}/{r.run_id}: the rule would not have stopped it in "
                  f"{len(r.ranks[0].iter_s) if r.ranks else 0} iterations ({r.error or 'ok'})")
            continue
        b = stalls.run_rate(cut).rate_sps
        for name, ref in ((r.run_id, r), (f"{r.run_id}/epochs", whole_epochs(r))):
            a = stalls.run_rate(ref).rate_sps
            if a and b:
                rows.append((f"{tag}/{name}", a, b, len(ref.ranks[0].iter_s),
                             len(cut.ranks[0].iter_s)))
    return rows


def print_rows(title: str, rows: list[tuple[str, float, float, int, int]]) -> int:
    print(f"\n{title}: run, rates (samples/s), iterations")
    for name, a, b, n_full, n_early in rows:
        print(f"  {name:45} full {a:7.1f} ({n_full:4d})  early {b:7.1f} ({n_early:4d})  "
              f"{100 * (b - a) / a:+6.1f}%")
    return sum(abs(b - a) / a <= 0.02 for _, a, b, _, _ in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--dir", default=str(REPO / "results" / "bench-adaptive"))
    ap.add_argument("--only", default="demo,prep,fetch,early")
    ap.add_argument("--replay", action="store_true",
                    help="part 1: drive the adaptive search over the full grids already "
                         "measured under --dir instead of measuring it")
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
            res = replay(w, root) if ns.replay else compare(w, root)
            results.append(res)
            if not ns.replay:
                rows += early_rows(res["full"], res["adaptive"], w.name)
    tried = [0]  # full-length runs replayed
    if "early" in only:
        for prefix in early(root):
            replays += replay_rows(prefix, prefix.name)
            tried[0] += len(store.load_runs(prefix))
    if ns.replay:
        print("\n(replayed over the grids measured: seconds are the runs' summed durations)")
    print_results(results)
    within = print_rows("for reference, part 1's early-stopped runs against the grid's runs of "
                        "the same configuration (two runs: a shared machine's drift included)",
                        rows)
    print_rows("part 2: the early stop against the same run at full length (400 iterations; "
               "the rule's own error; /epochs: its whole epochs only)", replays)

    def within_2pct(rows: list) -> int:
        return sum(abs(b - a) / a <= 0.02 for _, a, b, _, _ in rows)
    whole = [r for r in replays if not r[0].endswith("/epochs")]
    epochs = [r for r in replays if r[0].endswith("/epochs")]
    parts = [f"{r['name']}: adaptive {r['adaptive_runs']} runs {r['adaptive_s']:.0f} s, "
             f"±{r['mine'].pick_half_width_pct:.1f}% vs grid {r['full_runs']} runs "
             f"{r['full_s']:.0f} s ({r['adaptive_s'] / r['full_s']:.2f} of its time), "
             f"{'same answer' if r['match'] else 'DIFFERENT answer'}" for r in results]
    if tried[0]:
        parts.append(
            f"early stop within 2% of the same run at full length: {within_2pct(whole)} of "
            f"{len(whole)} configurations it stopped, of {tried[0]} "
            f"({within_2pct([r for r in whole if r[0].startswith('periodic/')])} of "
            f"{sum(r[0].startswith('periodic/') for r in whole)} with a periodic checkpoint "
            f"stall); of its whole epochs: {within_2pct(epochs)} of {len(epochs)}")
    if rows:
        parts.append(f"against a separate full-length run: {within} of {len(rows)}")
    print("\nFIGURE: " + "; ".join(parts))


def print_results(results: list[dict]) -> None:
    print("\nworkload  grid: runs  wall s  |  adaptive: runs  wall s  share  |  recommendations")
    for r in results:
        print(f"{r['name']:8}  {r['full_runs']:10d}  {r['full_s']:6.0f}  |  {r['adaptive_runs']:14d}"
              f"  {r['adaptive_s']:6.0f}  {r['adaptive_s'] / r['full_s']:5.2f}  |  "
              f"grid {r['theirs'].pick_key} {r['theirs'].pick_rate_sps:.1f} "
              f"±{r['theirs'].pick_half_width_pct:.1f}%; adaptive {r['mine'].pick_key} "
              f"{r['mine'].pick_rate_sps:.1f} ±{r['mine'].pick_half_width_pct:.1f}% "
              f"({r['mine'].verdict.value}); {'match' if r['match'] else 'DIFFER'}")
        print(f"          adaptive's last step: {decision_text(r['mine'])}")


if __name__ == "__main__":
    main()
