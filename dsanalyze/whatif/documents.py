"""The what-if's stored documents as typed values: `whatif.json`'s rows and `validation.json`.

    rows = [GridRow.from_dict(d) for d in json.load(whatif_json)]
    doc = ValidationDoc.from_dict(json.load(validation_json))

`whatif/api.py` writes a `GridRow` per prediction, `whatif/validation.py` a
`ValidationDoc`; the report draws and words them by attribute. Frozen
dataclasses with the documents' own key names, so that `to_dict` writes the
JSON the files always held and `from_dict` reads back an older file (a key it
lacks takes the field's default).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Self

from dsanalyze.plain import PlainJson
from dsanalyze.whatif.assumptions import Assumption


@dataclass(frozen=True)
class GridRow(PlainJson):
    """One combination of the what-if grid: the prediction, its interval and stall split (s per
    epoch), and whether a run measured it or the advice recommends it."""

    cpus: int | None
    cache_spec: str | None
    cache_bytes: int | None
    storage_read_bps: int | None
    rate_sps: float
    gpu_speedup: float = 1.0
    net_bw_bps: float | None = None  # a remote configuration's link (None: unshaped, or local)
    net_latency_s: float | None = None  # None: the data is local
    nproc: int | None = None
    workers: int | None = None
    loader: str = "pytorch"
    rate_sps_low: float | None = None
    rate_sps_high: float | None = None
    interval_level: float | None = None
    epoch_s: float | None = None
    compute_s: float | None = None
    prep_stall_s: float | None = None
    fetch_stall_s: float | None = None
    prep_stall_s_low: float | None = None
    prep_stall_s_high: float | None = None
    fetch_stall_s_low: float | None = None
    fetch_stall_s_high: float | None = None
    stall_s_low: float | None = None
    stall_s_high: float | None = None
    stall_pct: float | None = None  # of the epoch (None: a row written before it was stored)
    epoch1_s: float | None = None
    hit_rate: float | None = None
    cache_effective_bytes: float | None = None
    bound_sps: float | None = None
    untested: tuple[Assumption, ...] = ()
    measured: bool = False
    measured_run: str | None = None
    measured_sps: float | None = None  # the run's steady rate (None: one cold epoch only)
    measured_epoch1_sps: float | None = None
    recommended: bool = False
    # False: a row written before `measured_sps` was stored; the summary's rate stands for it
    measured_sps_stored: bool = True

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        return super().from_dict({"measured_sps_stored": "measured_sps" in d, **d})

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in super().to_dict().items() if k != "measured_sps_stored"}

    def half_width_sps(self) -> float | None:
        """Half the width of the prediction interval (samples/s); None without one."""
        lo, hi = self.rate_sps_low, self.rate_sps_high
        return (hi - lo) / 2 if lo is not None and hi is not None and hi > 0 else None


@dataclass(frozen=True)
class CheckRow(PlainJson):
    """One held-out configuration of `validation.json`: measured against predicted."""

    run_id: str
    measured_sps: float
    predicted_sps: float
    split: str = "loo"  # loo, extrapolation
    mode: str = "disk"
    predicted_sps_low: float | None = None
    predicted_sps_high: float | None = None
    covered: bool = False
    error_pct: float = 0.0
    measured_epoch1_sps: float | None = None
    predicted_epoch1_sps: float | None = None
    cache_bytes: float | None = None
    untested: tuple[Assumption, ...] = ()
    repeats: int = 1


class UnmadeWhy(enum.Enum):
    """Why a validation split was not made (`Unmade`)."""

    ONE_CONFIG = "one_config"  # every run has the fewest CPUs, one rank and the slowest step
    REFUSED = "refused"  # the model refused the held-out configurations: `error` says how
    MISSING = "missing"  # the validation has no such split
    SAID = "said"  # a document written before the reason was typed: `error` holds its words


@dataclass(frozen=True)
class Unmade(PlainJson):
    """Why a validation split was not made (`report/whatif_text.py` words it)."""

    why: UnmadeWhy
    error: str = ""


@dataclass(frozen=True)
class SplitFigures(PlainJson):
    """One validation split: its fit runs, and figures over its held-out runs, or why it
    was not made (`unmade`). Its rule is its name's (`report/whatif_text.py` words it)."""

    name: str
    fit_runs: tuple[str, ...] = ()
    unmade: Unmade | None = None
    held_out: int = 0
    median_abs_error_pct: float | None = None
    max_abs_error_pct: float | None = None
    coverage: float | None = None
    nominal: float | None = None


@dataclass(frozen=True)
class ValidationDoc(PlainJson):
    """`validation.json` (`validate --json`): every check of both splits and their figures."""

    runs: tuple[CheckRow, ...] = ()
    median_abs_error_pct: float | None = None
    max_abs_error_pct: float | None = None
    coverage: float | None = None
    nominal: float = 0.9
    splits: tuple[SplitFigures, ...] = ()
    policy: str | None = None
    model: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ValidationDoc:
        """Reads a document written before the splits' reasons were typed (a `note` in
        words) with each note as `Unmade(SAID, note)`."""
        splits = [{**s, "unmade": {"why": UnmadeWhy.SAID.value, "error": s["note"]}}
                  if s.get("note") and "unmade" not in s else s for s in d.get("splits", [])]
        return super().from_dict({**d, "splits": splits})

    def split(self, name: str) -> SplitFigures | None:
        return next((s for s in self.splits if s.name == name), None)
