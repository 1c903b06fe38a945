"""The what-if fitted on one prefix's runs, scored on another's: runs measured after the fit,
never seen by it (another worker count, CPU count, machine day), single runs, two-sided.

    python bench/heldout_score.py FIT_PREFIX HELD_PREFIX [HELD_PREFIX ...]

For each cached and disk run of the held prefixes: measured, predicted, the 90% interval,
inside or not, the error, and the law the prediction rests on beyond the measured CPUs. The
last line is the figure: median and maximum |error| and the share inside, with the targets
(<= 5%, <= 15%, 80-97%). The rules were tuned on tests/data/cuda_examples_wide (stop 60): a
grid scored here must be measured after, on other data or another machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from dsanalyze import store
from dsanalyze.config import Mode
from dsanalyze.errors import ConfigError, StoreError
from dsanalyze.whatif.api import fit
from dsanalyze.whatif.assumptions import Assume
from dsanalyze.whatif.validation import check


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("fit_prefix", type=Path)
    ap.add_argument("held_prefixes", type=Path, nargs="+")
    args = ap.parse_args()
    try:
        return score(args.fit_prefix, args.held_prefixes)
    except (StoreError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def score(fit_prefix: Path, held_prefixes: list[Path]) -> int:
    fit_runs = [r for r in store.load_runs(fit_prefix) if r.ok]
    if not fit_runs:
        print(f"error: no completed runs under {fit_prefix}: run harness.py there first",
              file=sys.stderr)
        return 2
    model = fit(fit_runs)
    held = [r for p in held_prefixes for r in store.load_runs(p)
            if r.ok and r.mode in (Mode.CACHED, Mode.DISK)]
    if not held:
        print("error: no completed cached or disk runs in the held prefixes", file=sys.stderr)
        return 2
    errors, inside = [], 0
    for run in held:
        c = check(model, (run,), "held")
        inside += c.covered
        errors.append(abs(c.error_pct))
        laws = [u.law.value for u in c.untested if u.kind is Assume.BEYOND_CPUS and u.law]
        print(f"{c.run_id:45s} measured {c.measured_sps:8.1f}  predicted {c.predicted_sps:8.1f} "
              f"[{c.low_sps:8.1f}, {c.high_sps:8.1f}] {'in ' if c.covered else 'OUT'} "
              f"{c.error_pct:+6.1f}%  {' '.join(laws)}")
    share = 100 * inside / len(held)
    median = statistics.median(errors)
    met = median <= 5 and max(errors) <= 15 and 80 <= share <= 97
    print(f"figure: fitted on {len(fit_runs)} run(s) of {fit_prefix}, {len(held)} held-out "
          f"single run(s): median |error| {median:.1f}%, max "
          f"{max(errors):.1f}%; 90% intervals cover {share:.0f}% "
          f"[{'meets' if met else 'misses'} <= 5% / 15% / 80%-97%]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
