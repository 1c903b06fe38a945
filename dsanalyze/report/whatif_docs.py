"""What the what-if model says about a prefix, as the plots and the report take it.

A value (`WhatIfDocs`) that `app.py` fills from a stored `whatif.json` or from
the advice's own query; the numbers come from `whatif/api.py`. Nothing
here fits, reads a file or scans a dataset.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dsanalyze.report.text import knob_text
from dsanalyze.whatif.documents import GridRow, ValidationDoc


def is_recommended(row: GridRow) -> bool:
    return row.recommended


@dataclass(frozen=True)
class WhatIfDocs:
    """What the what-if model says about a prefix, as the plots and the report need it."""

    rows: list[GridRow] = field(default_factory=list)  # whatif.json: one per combination
    validation: ValidationDoc | None = None  # the `validate --json` document
    recommendation: list[str] = field(default_factory=list)  # the answer in words, per line
    note: str | None = None  # why something is missing
    advice: Any = None  # whatif.advice.Advice, when the model was fitted here


def recommended_text(row: GridRow) -> str:
    """A what-if row in words; every number is the row's."""
    what = ", ".join(knob_text(k, row) for k in ("cpus", "cache", "bw"))
    stall = f"stalls {row.stall_pct:.1f}% of the epoch, " if row.stall_pct is not None else ""
    return (f"**{what}**: {stall}{row.rate_sps:.1f} samples/s, an epoch in "
            f"{row.epoch_s:.2f} s (compute {row.compute_s:.2f} s, prep stall "
            f"{row.prep_stall_s:.2f} s, fetch stall {row.fetch_stall_s:.2f} s)")
