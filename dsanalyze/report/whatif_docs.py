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
from dsanalyze.errors import DsAnalyzeError
from dsanalyze.records import RunResult
from dsanalyze.report.text import knob_text

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
    advice: Any = None  # analysis.advice.Advice, when the model was fitted here


def whatif_documents(prefix: str | Path, runs: list[RunResult], own_query: bool = False
                     ) -> WhatIfDocs:
    """The what-if grid, validation and recommendation of a prefix.

    `PREFIX/whatif.json` and `validation.json` as `dsanalyze whatif` and
    `validate` wrote them, when they are newer than every run and not
    `own_query`; else the advice's own query (`analysis/advice.py`): the
    model fitted here on the runs over its default grid, its choice marked.
    """
    prefix = Path(prefix)
    rows = None if own_query else _stored(prefix, "whatif.json")
    val = None if own_query else _stored(prefix, "validation.json")
    if rows is not None:
        recommendation = [f"Recommended by `dsanalyze whatif` (whatif.json): "
                          f"{_recommended_text(r)}" for r in rows if is_recommended(r)]
        note = None
        if val is None:
            from dsanalyze.analysis import whatif
            try:
                val = whatif.validation_document(whatif.validate(runs, dataset_sizes(runs)))
            except DsAnalyzeError as e:
                note = f"Validation: {e}"
        return WhatIfDocs(rows, val, recommendation, note)
    return advice_documents(runs)


def advice_documents(runs: list[RunResult]) -> WhatIfDocs:
    """The advice's query of the runs: its grid, validation and answer."""
    from dsanalyze.analysis.advice import advise
    from dsanalyze.report.advice import advice_text

    a = advise(runs, dataset_sizes(runs))
    notes = [] if a.rows else [f"What-if: no model fitted on these runs: {a.note}"]
    if a.rows and a.validation is None:
        notes.append(f"Validation: {a.validation_note}")
    return WhatIfDocs(a.rows, a.validation, [advice_text(a)], " ".join(notes) or None, a)


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


def _recommended_text(row: dict[str, Any]) -> str:
    """A what-if row in words; every number is the row's."""
    cfg = {"cpus": row["cpus"], "cache_bytes": row["cache_bytes"],
           "cache_spec": row["cache_spec"], "storage_read_bps": row["storage_read_bps"]}
    what = ", ".join(knob_text(k, cfg) for k in ("cpus", "cache", "bw"))
    stall = f"stalls {row['stall_pct']:.1f}% of the epoch, " if "stall_pct" in row else ""
    return (f"**{what}**: {stall}{row['rate_sps']:.1f} samples/s, an epoch in "
            f"{row['epoch_s']:.2f} s (compute {row['compute_s']:.2f} s, prep stall "
            f"{row['prep_stall_s']:.2f} s, fetch stall {row['fetch_stall_s']:.2f} s)")
