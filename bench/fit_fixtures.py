#!/usr/bin/env python3
"""The what-if fit of every committed fixture, and of each of its leave-one-out subsets, kept.

    .venv/bin/python bench/fit_fixtures.py OUT.json [--compare BEFORE.json]

A refactor of the fit (`whatif/calibrate.py`, the fitters) must leave every
fitted number where it was: run this before the change (OUT = before.json),
then after it with `--compare before.json`. Each fit is every field of the
`Model` by `repr` (floats to the last bit, every `Param` with its wording and
runs) or the error it raised, for tests/data/*/runs and each subset with one
run left out (67 fits on 9 fixtures; about a minute of CPU). Prints each
difference, then the figure last: the number of fits that differ.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dsanalyze import store  # noqa: E402
from dsanalyze.errors import DsAnalyzeError  # noqa: E402
from dsanalyze.whatif.api import fit  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"


def fits() -> dict[str, dict[str, str] | str]:
    out: dict[str, dict[str, str] | str] = {}
    for fixture in sorted(p for p in DATA.iterdir() if (p / "runs").is_dir()):
        runs = store.load_runs(fixture)
        subsets = [("all", runs)] + [(f"-{r.run_id}", [x for x in runs if x is not r])
                                     for r in runs]
        for name, subset in subsets:
            try:
                model = fit(subset)
            except DsAnalyzeError as e:
                out[f"{fixture.name}/{name}"] = f"error {type(e).__name__}: {e}"
                continue
            out[f"{fixture.name}/{name}"] = {f.name: repr(getattr(model, f.name))
                                             for f in fields(model)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--compare", type=Path)
    args = parser.parse_args()
    now = fits()
    args.out.write_text(json.dumps(now, indent=1, sort_keys=True))
    if args.compare is None:
        print(f"fits: {len(now)}")
        return
    before = json.loads(args.compare.read_text())
    differ = sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k))
    for key in differ:
        a, b = before.get(key), now.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            print(key, [f for f in a if a[f] != b.get(f)])
        else:
            print(key, a, "->", b)
    print(f"fits that differ: {len(differ)} of {len(now)}")


if __name__ == "__main__":
    main()
