#!/usr/bin/env python3
"""The advice on CPU-trained user scripts, checked by measuring it (`dsanalyze verify`).

    .venv/bin/python bench/verify_scripts.py [--from /tmp/dsa-scripts-bench2]
                                             [--dir /tmp/dsa-verify-scripts]
                                             [--scripts examples,timm,lightning]

Issue 24's check of the advice on the user's own script: "either right within its interval
when checked with --verify, or refused with the reason; never the silent miss". For each
script, the sweep that bench/scripts_accuracy.py measured at its fewest workers (synthetic,
cached and disk runs at every CPU count and bandwidth, under `--from`) is copied under
`--dir`, and `app.verify` advises on it and measures the recommended configuration: a
predicted pick as the advice names it (its workers through the script's own `-j` or
`--workers`, into `verify-workersN/`), a measured one run again (into `verify-repeat/`: its
own run is in the fit), a refused one as `dsanalyze verify` settles it: the pick measured
when refused for a step on the CPU at an unmeasured (CPUs, workers), else the kept
configuration run again. The model fitted before the run predicts that
run from its spec alone.

Printed per script: the outcome, the decision, the verify line. The figure, last: how many
checks came inside their 90% interval, refused (the advice not given; the line says why
and how the check measured), not run (the
line says why), inconclusive (others disturbed the run: the line says how), and the silent
misses, outside with the advice standing (issue 24: none).
A single run lies outside a 90% interval one time in ten by design, so an outside check is
reported with its error, to be read against the scripts bench's coverage.
Runtime: one disk run per script (about 30 s each on 2 quiet cores) plus the fits.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dsanalyze import app  # noqa: E402
from dsanalyze.report.advice import advice_text  # noqa: E402
from dsanalyze.whatif.decision import DecisionKind  # noqa: E402


def check(source: Path, target: Path, lock_wait_s: float) -> tuple[str, str]:
    """Verify the advice on a copy of `source`: (the lines printed, the outcome: inside,
    refused, outside, not run, or inconclusive when others disturbed the run)."""
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("verify-*"))
    v = app.verify(target, lock_wait_s=lock_wait_s)
    kind = v.advice.decision.kind if v.advice and v.advice.decision else None
    lines = (f"  decision {kind.value if kind else 'none'}: "
             f"{advice_text(v.advice) if v.advice else ''}\n  {v.text}")
    if v.plan.refused:  # the advice refused its pick, and the line says how the pick measured
        return lines, "refused"
    if v.result is None:
        return lines, "not run"
    if not v.result.conclusive:
        return lines, "inconclusive"
    return lines, ("inside" if v.result.inside else
                   "refused" if kind is DecisionKind.REFUSED else "outside")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="source", type=Path, default=Path("/tmp/dsa-scripts-bench2"),
                    help="a bench/scripts_accuracy.py --dir")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/dsa-verify-scripts"))
    ap.add_argument("--scripts", default="examples,timm,lightning")
    ap.add_argument("--lock-wait", type=float, default=600.0,
                    help="seconds to wait for another harness measuring the same data")
    args = ap.parse_args(argv)
    outcomes: dict[str, str] = {}
    for name in args.scripts.split(","):
        prefixes = sorted(args.source.glob(f"{name}-w*"), key=lambda p: int(p.name.rsplit("w")[-1]))
        if not prefixes:
            print(f"{name}: no sweep under {args.source}: run bench/scripts_accuracy.py first")
            return 2
        lines, outcomes[name] = check(prefixes[0], args.dir / prefixes[0].name,
                                        args.lock_wait)
        print(f"{name} ({prefixes[0].name}): {outcomes[name]}\n{lines}", flush=True)
    count = {k: [n for n, o in outcomes.items() if o == k]
             for k in ("inside", "refused", "not run", "inconclusive", "outside")}
    print(f"{len(outcomes)} scripts: " + ", ".join(
        f"{k} {len(v)}" + (f" ({', '.join(v)})" if v else "") for k, v in count.items())
        + f"; silent misses (outside, not refused): {len(count['outside'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
