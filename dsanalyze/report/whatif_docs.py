"""What the what-if model says about a prefix, gathered for the plots and the report.

The stored `whatif.json` and `validation.json` when they are newer than every
run (as `dsanalyze whatif` and `validate` wrote them), else the model fitted
here over a default grid. Only gathering: the numbers come from
`analysis/whatif.py`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsanalyze import store
from dsanalyze.analysis import stalls
from dsanalyze.errors import DsAnalyzeError
from dsanalyze.report.text import knob_text
from dsanalyze.store import RunResult

INF = float("inf")


def unlimited_last(x: float | None) -> float:
    """Sort key: None (no cache limit, no throttle) after every number."""
    return INF if x is None else x


def is_recommended(row: dict[str, Any]) -> bool:
    return bool(row.get("recommended"))


@dataclass(frozen=True)
class WhatIfDocs:
    """What the what-if model says about a prefix, as the plots and the report need it."""

    rows: list[dict[str, Any]] = field(default_factory=list)  # whatif.json: one per combination
    validation: dict[str, Any] | None = None  # the `validate --json` document
    recommendation: list[str] = field(default_factory=list)  # the answer in words, per line
    note: str | None = None  # why something is missing


DEFAULT_CACHES = ("0", "25%", "50%", "75%", "100%")  # as `dsanalyze whatif`
MAX_STALL_PCT = stalls.INPUT_BOUND_PCT  # the recommendation's stall budget


def whatif_documents(prefix: str | Path, runs: list[RunResult]) -> WhatIfDocs:
    """The what-if grid, validation and recommendation of a prefix, when the model is there.

    `PREFIX/whatif.json` and `validation.json` as `dsanalyze whatif` and
    `validate` wrote them, when they are newer than every run; else the model
    fitted here on the runs, over the measured CPU counts and 2x and 4x the
    largest, the caches of `dsanalyze whatif`, and the measured bandwidths.
    """
    from dsanalyze.analysis import recommend, whatif
    prefix = Path(prefix)
    notes = []
    rows, recommendation = _stored(prefix, "whatif.json"), []
    val = _stored(prefix, "validation.json")
    sizes = dataset_sizes(runs) if rows is None or val is None else None
    if rows is None:
        try:
            rows, recommendation = _fit_grid(whatif, recommend, runs, sizes)
        except DsAnalyzeError as e:
            rows, notes = [], [f"What-if: no model fitted on these runs: {e}"]
    else:
        recommendation = [f"Recommended by `dsanalyze whatif` (whatif.json): "
                          f"{_recommended_text(r)}" for r in rows if is_recommended(r)]
    if val is None:
        try:
            val = whatif.validation_document(whatif.validate(runs, sizes))
        except DsAnalyzeError as e:
            notes.append(f"Validation: {e}")
    return WhatIfDocs(rows, val, recommendation, " ".join(notes) or None)


def _stored(prefix: Path, name: str) -> Any:
    """A JSON document of the prefix, if it is newer than every run file."""
    path = prefix / name
    runs = list(store.runs_dir(prefix).glob("*.json"))
    if not path.is_file() or any(r.stat().st_mtime > path.stat().st_mtime for r in runs):
        return None
    return json.loads(path.read_text())


def dataset_sizes(runs: list[RunResult]) -> list[int] | None:
    """The file sizes of the runs' dataset while it is still there (as `dsanalyze whatif`)."""
    from dsanalyze.jobs.datasets import scan_dataset

    ok = [r for r in runs if r.ok]
    root = ok[0].dataset.get("root") if ok else None
    if not root or not Path(root).is_dir():
        return None
    try:
        sizes = list(scan_dataset(root).file_bytes)
    except DsAnalyzeError:
        return None
    return sizes if len(sizes) == ok[0].dataset.get("files") else None


def _fit_grid(whatif: Any, recommend: Any, runs: list[RunResult], sizes: list[int] | None
              ) -> tuple[list[dict[str, Any]], list[str]]:
    model = whatif.fit(runs, sizes)
    measured = sorted({whatif.run_cpus(r) for r in runs if r.ok and r.ranks})
    cpus = sorted(set(measured) | {2 * measured[-1], 4 * measured[-1]})
    bws = sorted({r.spec.resources.storage_read_bps for r in runs if r.ok and r.mode.value
                  == "disk"}, key=unlimited_last) or [None]
    ok = [r for r in runs if r.ok]
    caches = [*DEFAULT_CACHES, *sorted({r.spec.resources.cache.spec for r in ok
                                        if r.mode.value == "disk"} - set(DEFAULT_CACHES))]
    cfgs = whatif.configs(cpus, caches, bws, int(ok[0].dataset["bytes"]))
    preds = whatif.grid(model, cfgs, runs)
    rec = recommend.recommend(model, preds, runs, MAX_STALL_PCT)
    return whatif.whatif_document(preds, rec), [f"Recommendation (a job of one epoch, stalls "
                                                f"under {MAX_STALL_PCT:g}%): {rec.reason}."]


def _recommended_text(row: dict[str, Any]) -> str:
    """A what-if row in words; every number is the row's."""
    cfg = {"cpus": row["cpus"], "cache_bytes": row["cache_bytes"],
           "cache_spec": row["cache_spec"], "storage_read_bps": row["storage_read_bps"]}
    what = ", ".join(knob_text(k, cfg) for k in ("cpus", "cache", "bw"))
    stall = f"stalls {row['stall_pct']:.1f}% of the epoch, " if "stall_pct" in row else ""
    return (f"**{what}**: {stall}{row['rate_sps']:.1f} samples/s, an epoch in "
            f"{row['epoch_s']:.2f} s (compute {row['compute_s']:.2f} s, prep stall "
            f"{row['prep_stall_s']:.2f} s, fetch stall {row['fetch_stall_s']:.2f} s)")
