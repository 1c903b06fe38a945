#!/usr/bin/env python3
"""The what-if intervals' width rule, calibrated on a tuning grid of recorded runs.

    .venv/bin/python bench/interval_tuning.py [--sim PREFIX ...] [--scripts DIR ...]

The TUNING grid, never the scoring grid (bench/scripts_accuracy.py scores on runs of its
own, measured after the constants were set): recorded runs only, nothing is measured.
- `--sim PREFIX`: a sweep of the built-in job (sim device), held out by `whatif.validate`
  (leave-one-out and extrapolation);
- `--scripts DIR`: a bench/scripts_accuracy.py directory (prefixes NAME-wW), each script's
  runs held out by that bench's two splits.

A held-out single run's standardised error is z = log(measured / predicted) / sigma, with
sigma its `intervals.Spread` at a `Settings`' constants: the fit's own sigma scaled by
`fit_sigma_scale` times the rate's sensitivity to the loop's costs, the storage's sigma
scaled by `storage_sigma_scale` (at least `storage_sigma_floor` for a throttle the fit
measured) times its sensitivity to the storage, `cpu_step_sigma` times the loop's
sensitivity where the step runs on the CPU, `untested_sigma` per untested assumption
(a throttle at face value: `throttle_sigma`), weighted by the side it is about.
Well-sized 90% intervals hold 90% of the |z| under 1.645 and have a median |z| of 0.674 (a
normal error's), on each side: the runs the storage holds (loop share under 1/2) and the
runs the loop holds, in each split. A pooled coverage can meet 90% with one side at 100%
and the other at 70%; that is two misses. Prints every held-out run, then each side's
coverage and median |z| at the constants in dsanalyze/settings.py, and with `--search` the
constants of a grid that come closest on every side at once (coverage weighted first). The
figure, last.
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import scripts_accuracy  # noqa: E402  (this directory's bench: its splits)

from dsanalyze import store  # noqa: E402
from dsanalyze.settings import SETTINGS, Settings  # noqa: E402
from dsanalyze.whatif import api as whatif  # noqa: E402
from dsanalyze.whatif.intervals import Spread  # noqa: E402
from dsanalyze.whatif.model import Z  # noqa: E402

MEDIAN_Z = 0.6745  # the median |z| of a normal error


def held_out(sim: list[Path], scripts: list[Path]) -> list[tuple[str, whatif.Check]]:
    """Every held-out single run of the tuning grid, named by where it came from."""
    out = []
    for prefix in sim:
        runs = [r for r in store.load_runs(prefix) if r.ok and r.ranks]
        out += [(prefix.name, c) for c in whatif.validate(runs).checks]
    for base in scripts:
        for name, runs in scripts_accuracy.recorded(base).items():
            out += [(name, c) for c in whatif.validate(runs).splits[0].checks]
            out += [(name, c) for c in scripts_accuracy.extrapolation(runs)[0]]
    return out


def components(c: whatif.Check) -> tuple[float, Spread]:
    """(log error, what its sigma is made of) of one check."""
    assert c.spread is not None  # every check of `whatif.check` carries its parts
    return math.log(c.measured_sps / c.predicted_sps), c.spread


Point = tuple[str, float, Spread]  # (split, log error, what its sigma is made of)


Scores = dict[tuple[str, str], tuple[float, float, int]]  # (split, side): coverage, median |z|, n


def score(points: list[Point], settings: Settings) -> Scores:
    """(coverage, median |z|, runs) per (split, side) and per split ("all") at `settings`."""
    out = {}
    for split in sorted({p[0] for p in points}):
        for part in ("storage", "loop", "all"):
            z = [abs(e) / sp.sigma(settings) for s, e, sp in points
                 if s == split and part in ("all", sp.side)]
            if z:
                out[(split, part)] = (sum(x <= Z for x in z) / len(z), statistics.median(z), len(z))
    return out


def loss(points: list[Point], settings: Settings) -> float:
    """Distance of every (split, side) from 90% coverage, then from the normal median |z|."""
    return sum((cov - 0.9) ** 2 + (med - MEDIAN_Z) ** 2 / 4
               for (_, part), (cov, med, _) in score(points, settings).items() if part != "all")


GRID = {"fit_sigma_scale": (0.5, 0.75, 1.0), "storage_sigma_scale": (0.3, 0.4, 0.5, 0.75, 1.0),
        "throttle_sigma": (0.005, 0.01, 0.015, 0.02, 0.03, 0.06),
        "cpu_step_sigma": (0.0, 0.04, 0.06, 0.07, 0.08, 0.10, 0.12)}


def best(points: list[Point]) -> Settings:
    """The `GRID`'s constants closest to 90% coverage and the normal median |z| on every side
    (`untested_sigma` held: the built-in job's grid set it, and no side here is about it alone)."""
    names = list(GRID)
    return min((replace(SETTINGS, **dict(zip(names, values)))
                for values in itertools.product(*GRID.values())),
               key=lambda st: loss(points, st))


def _scores_line(points: list[Point], settings: Settings) -> str:
    return "; ".join(f"{split} {part} {cov:.0%} (median |z| {med:.2f}, {n} runs)"
                     for (split, part), (cov, med, n) in score(points, settings).items())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim", type=Path, nargs="*", default=[])
    ap.add_argument("--scripts", type=Path, nargs="*", default=[])
    ap.add_argument("--search", action="store_true", help="search GRID for the closest constants")
    ns = ap.parse_args(argv)
    checks = held_out(ns.sim, ns.scripts)
    if not checks:
        ap.error("no held-out run: name recorded prefixes with --sim or --scripts")
    points = [(c.split, *components(c)) for _, c in checks]
    for (where, c), (_, e, sp) in zip(checks, points):
        print(f"  {where:12s} {c.split:13s} {c.run_id:42s} error {100 * e:+6.1f}%  fit sigma "
              f"{100 * sp.fit_rel:5.1f}% x loop {sp.loop:.2f}, storage "
              f"{100 * sp.storage_rel:4.1f}%, untested {len(sp.weights)}"
              f"{' + throttle' if sp.throttle_weight else ''}, sigma {100 * sp.sigma():4.1f}%")
    print(f"\ntuning grid: {', '.join(map(str, ns.sim + ns.scripts))} ({len(points)} held-out "
          "single runs); the scoring grid is bench/scripts_accuracy.py's own runs")
    if ns.search:
        found = best(points)
        print("closest on the grid: " + ", ".join(f"{k} {getattr(found, k):g}" for k in GRID)
              + f": {_scores_line(points, found)}")
    print(f"figure: at dsanalyze/settings.py's constants: {_scores_line(points, SETTINGS)}; "
          f"target 90% and {MEDIAN_Z:.2f} on each side")
    return 0


if __name__ == "__main__":
    sys.exit(main())
