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
sigma its `intervals.Spread` at constants (s, u): the fit's own sigma scaled by s =
SETTINGS.fit_sigma_scale times the rate's sensitivity to the loop's costs, the storage's
sigma times its sensitivity to the storage, and u = SETTINGS.untested_sigma per untested
assumption, weighted by the side it is about.
Well-sized 90% intervals hold 90% of the |z| under 1.645 and have a median |z| of 0.674 (a
normal error's). Prints every held-out run, then the coverage and median |z| at the
constants in dsanalyze/settings.py and the (s, u) of a grid search that come closest
to both (coverage weighted first). The figure, last.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import scripts_accuracy  # noqa: E402  (this directory's bench: its splits)

from dsanalyze import store  # noqa: E402
from dsanalyze.settings import SETTINGS  # noqa: E402
from dsanalyze.whatif import api as whatif  # noqa: E402
from dsanalyze.whatif.intervals import Spread  # noqa: E402
from dsanalyze.whatif.model import Z  # noqa: E402

FIT_SIGMA_SCALE, UNTESTED_SIGMA = SETTINGS.fit_sigma_scale, SETTINGS.untested_sigma

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


def score(points: list[tuple[float, Spread]], s: float, u: float) -> tuple[float, float]:
    """(coverage, median |z|) of the points at constants (s, u)."""
    z = [abs(e) / sp.sigma(s, u) for e, sp in points]
    return sum(x <= Z for x in z) / len(z), statistics.median(z)


def best(points: list[tuple[float, Spread]]) -> tuple[float, float]:
    """The (s, u) of a grid (s 0.2..1.0 by 0.05, u 0.02..0.12 by 0.01) closest to 90%
    coverage, then to the normal median |z|."""
    def loss(su: tuple[float, float]) -> float:
        cov, med = score(points, *su)
        return (cov - 0.9) ** 2 + (med - MEDIAN_Z) ** 2 / 4
    grid = [(s / 20, u / 100) for s in range(4, 21) for u in range(2, 13)]
    return min(grid, key=loss)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim", type=Path, nargs="*", default=[])
    ap.add_argument("--scripts", type=Path, nargs="*", default=[])
    ns = ap.parse_args(argv)
    checks = held_out(ns.sim, ns.scripts)
    if not checks:
        ap.error("no held-out run: name recorded prefixes with --sim or --scripts")
    points = [components(c) for _, c in checks]
    for (where, c), (e, sp) in zip(checks, points):
        print(f"  {where:12s} {c.split:13s} {c.run_id:42s} error {100 * e:+6.1f}%  fit sigma "
              f"{100 * sp.fit_rel:5.1f}% x loop {sp.loop:.2f}, storage "
              f"{100 * sp.storage_rel:4.1f}%, untested {len(sp.weights)}")
    cov, med = score(points, FIT_SIGMA_SCALE, UNTESTED_SIGMA)
    s, u = best(points)
    cov_best, med_best = score(points, s, u)
    print(f"\ntuning grid: {', '.join(map(str, ns.sim + ns.scripts))} ({len(points)} held-out "
          "single runs); the scoring grid is bench/scripts_accuracy.py's own runs")
    print(f"figure: at FIT_SIGMA_SCALE {FIT_SIGMA_SCALE:g}, UNTESTED_SIGMA {UNTESTED_SIGMA:g}: "
          f"coverage {cov:.0%}, median |z| {med:.2f}; closest on the grid: {s:g}, {u:g} "
          f"(coverage {cov_best:.0%}, median |z| {med_best:.2f}); target 90%, {MEDIAN_Z:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
