"""The answer at the end of a run: the cheapest change that removes most of the stall.

    advice = advise(results, sizes)       # Advice: no change needed, a change, or keep

Every configuration is judged by the time of the epochs the runs measured,
the cold first epoch included (`span_s`): for E epochs, the first epoch plus
E - 1 steady ones; its stall is that time less E compute epochs. In order:

1. A measured configuration stalls at most `max_stall_pct` (5%, the verdict's
   input-bound threshold) of that time: no change needed (the cheapest such).
2. Else the what-if model is fitted on these runs (and validated out of
   sample, when some runs can be held out) and predicts a grid around them;
   only configurations predicted faster than every measured one count, and
   only changes that add resources to the fastest measured configuration
   (none taken away: cutting a knob that does not matter is no answer). Those
   are ranked by the recommendation's own ranking (`recommend.rank`: the
   cheapest under the stall budget; if none is under it, the cheapest of the
   fastest): the advice is the recommendation in this mode.
3. None predicted faster: keep the fastest measured configuration.

This module is the only place that calls the what-if model for the advice
(`_fit_and_predict`, `_validation`): re-point them to change models.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from dsanalyze.analysis import stalls
from dsanalyze.analysis.jobrun import job_as_run
from dsanalyze.analysis.summary import summarize
from dsanalyze.config import Mode, unlimited_last
from dsanalyze.errors import DsAnalyzeError
from dsanalyze.records import RunResult

MAX_STALL_PCT = stalls.INPUT_BOUND_PCT
DEFAULT_CACHES = ("0", "25%", "50%", "75%", "100%")  # as `dsanalyze whatif`


class AdviceKind(enum.Enum):
    NO_CHANGE = "no change"  # a measured configuration is not stalled
    CHANGE = "change"  # a configuration predicted faster than every measured one
    KEEP = "keep"  # stalled, but nothing predicted faster than the fastest measured
    NO_MODEL = "no model"  # stalled, and the model could not be fitted


@dataclass(frozen=True)
class Option:
    """One configuration, measured or predicted, over the measured number of epochs."""

    cpus: int | None
    cache_spec: str
    cache_bytes: int | None
    storage_read_bps: int | None
    workers: int | None
    rate_sps: float  # steady state
    span_s: float  # the measured number of epochs, the cold first one included
    stall_pct: float  # share of span_s stalled

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Advice:
    kind: AdviceKind
    epochs: int  # epochs compared (the first one cold)
    best_measured: Option | None  # the fastest measured configuration
    choice: Option | None = None  # NO_CHANGE: the measured one; CHANGE: the predicted one
    fitted_runs: int = 0
    validation_error_pct: float | None = None  # median |error| on held-out runs
    note: str = ""  # why no model / why the stall stays
    validation_note: str = ""  # why the model was not validated
    rows: list[dict[str, Any]] = field(default_factory=list)  # the grid, whatif.json-style
    validation: dict[str, Any] | None = None  # the `validate --json` document

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "epochs": self.epochs,
                "best_measured": self.best_measured.to_dict() if self.best_measured else None,
                "choice": self.choice.to_dict() if self.choice else None,
                "fitted_runs": self.fitted_runs, "validation_error_pct": self.validation_error_pct,
                "note": self.note, "validation_note": self.validation_note}


def _span(epoch_s: float, epoch1_s: float | None, epochs: int) -> float:
    return (epoch1_s if epoch1_s is not None else epoch_s) + (epochs - 1) * epoch_s


def _stall_pct(span_s: float, compute_s: float | None, epochs: int) -> float:
    return max(0.0, 100 * (1 - epochs * (compute_s or 0.0) / span_s)) if span_s > 0 else 0.0


def measured_epochs(summary: dict[str, Any]) -> int:
    """Epochs per disk run (the first one cold): 1 when a disk run measured a single epoch."""
    disk = [r for r in summary["runs"] if r["mode"] == Mode.DISK.value and r["rate_sps"]]
    return max((r["steady_epochs"] + 1 for r in disk), default=1)


def measured_options(summary: dict[str, Any], epochs: int) -> list[Option]:
    """Each measured configuration of `summary.json` over `epochs` epochs."""
    out = []
    workers = (summary.get("job") or {}).get("workers")
    for cfg in summary["configs"]:
        if cfg["total_s"] is None:
            continue
        disk = cfg["modes"].get("disk") or {}
        n = cfg["samples_per_epoch"]
        span = cfg["total_s"] if cfg.get("cold_only") else \
            _span(cfg["total_s"], disk.get("epoch1_s"), epochs if disk else 1)
        rate = disk.get("rate_sps") or (cfg["modes"].get("cached") or {}).get("rate_sps")
        out.append(Option(cfg["cpus"], cfg["cache_spec"], cfg["cache_bytes"],
                          cfg["storage_read_bps"], workers, rate or n / cfg["total_s"], span,
                          _stall_pct(span, cfg["compute_s"], epochs if disk and not
                                     cfg.get("cold_only") else 1)))
    return out


def _cost(o: Option) -> tuple:
    """A measured configuration's cost, as `recommend.cost` ranks predictions."""
    return (unlimited_last(o.cpus), unlimited_last(o.cache_bytes),
            unlimited_last(o.storage_read_bps), o.workers or 0)


def advise(results: Sequence[RunResult], sizes: Sequence[int] | None = None,
           max_stall_pct: float = MAX_STALL_PCT) -> Advice:
    """The advice for the runs of one prefix (see the module docstring)."""
    results = list(results)
    summary = summarize(results).to_dict()  # measured_options reads summary.json's keys
    epochs = measured_epochs(summary)
    measured = measured_options(summary, epochs)
    best = min(measured, key=lambda o: o.span_s, default=None)
    calm = sorted((o for o in measured if o.stall_pct <= max_stall_pct), key=_cost)
    try:
        preds, rows, hint = _fit_and_predict(results, sizes, max_stall_pct)
    except Exception as e:  # noqa: BLE001 - a failed fit is a line of the answer, not a crash
        kind = AdviceKind.NO_CHANGE if calm else AdviceKind.NO_MODEL
        return Advice(kind, epochs, best, calm[0] if calm else None, note=failure_note(e))
    fitted = sum(1 for r in results if r.ok and r.ranks)
    validation, why = _validation(results, sizes)
    error = validation["median_abs_error_pct"] if validation else None
    if calm:
        return Advice(AdviceKind.NO_CHANGE, epochs, best, calm[0], fitted, error, "", why, rows,
                      validation)
    from dsanalyze.whatif.recommend import rank

    base = best and replace(best, cpus=best.cpus or _cpus_of_all(results))
    faster = [p for p in preds if p.measured_run is None and (base is None or (
        p.job_s(epochs) < base.span_s and _adds(_predicted_option(p, epochs), base)))]
    chosen, closest = rank(faster, max_stall_pct, epochs)
    choice = _predicted_option(closest, epochs) if closest is not None else None
    kind = AdviceKind.CHANGE if choice is not None else AdviceKind.KEEP
    marked = [{**row, "recommended": choice is not None and _same(row, choice)} for row in rows]
    return Advice(kind, epochs, best, choice, fitted, error, "" if chosen else hint, why, marked,
                  validation)


def _adds(o: Option, base: Option) -> bool:
    """`o` has at least every resource of `base` (None: all CPUs, no cache limit, no throttle)."""
    def at_least(x: float | None, y: float | None) -> bool:
        return x is None or (y is not None and x >= y)
    return (at_least(o.cpus, base.cpus) and at_least(o.cache_bytes, base.cache_bytes)
            and at_least(o.storage_read_bps, base.storage_read_bps)
            and (o.workers or 0) >= (base.workers or 0))


def _same(row: dict[str, Any], o: Option) -> bool:
    return (row["cpus"], row["cache_bytes"], row["storage_read_bps"], row["workers"]) == \
        (o.cpus, o.cache_bytes, o.storage_read_bps, o.workers)


def _predicted_option(p: Any, epochs: int) -> Option:
    c = p.config
    return Option(c.cpus, c.cache_spec, c.cache_bytes, c.storage_read_bps, c.workers,
                  p.rate_sps, p.job_s(epochs), p.job_stall_pct(epochs))


# ---- the what-if model: the one place the advice calls it -----------------------------------

def default_grid(results: Sequence[RunResult]
                 ) -> tuple[list[int], list[str], list[int | None], list[int]]:
    """CPUs: the measured counts, 2x and 4x the largest; caches: those of `dsanalyze whatif`,
    the measured ones and none; storage: the measured bandwidths and the device unthrottled;
    DataLoader workers per rank: as measured, 2x and 4x."""
    ok = [r for r in results if r.ok and r.ranks]
    cpus = default_cpus(ok)
    disk = [r for r in ok if r.mode is Mode.DISK]
    caches = [*DEFAULT_CACHES, *sorted({r.spec.resources.cache.spec for r in disk}
                                       - set(DEFAULT_CACHES) - {"none"}), "none"]
    bws = sorted({r.spec.resources.storage_read_bps for r in disk} - {None}) + [None]
    w = job_as_run(ok[0]).workers
    return cpus, caches, bws, sorted({w, 2 * w or 1, 4 * w or 2})


def default_cpus(results: Sequence[RunResult]) -> list[int]:
    """The what-if CPU counts when none are asked: the measured ones, 2x and 4x the largest
    (the measured ones alone where the step runs on the CPU: others are not predicted)."""
    from dsanalyze.whatif import api as whatif

    ok = [r for r in results if r.ok and r.ranks]
    measured = sorted({whatif.run_cpus(r) for r in ok})
    if ok and job_as_run(ok[0]).step_uses_cpu:
        return measured
    return sorted(set(measured) | {2 * measured[-1], 4 * measured[-1]})


def _cpus_of_all(results: Sequence[RunResult]) -> int | None:
    """What `--cpus all` was, in CPUs (the most any completed run had)."""
    from dsanalyze.whatif import api as whatif

    return max((whatif.run_cpus(r) for r in results if r.ok and r.ranks), default=None)


def _fit_and_predict(results: list[RunResult], sizes: Sequence[int] | None,
                     max_stall_pct: float) -> tuple[list[Any], list[dict[str, Any]], str]:
    """The model fitted on every run, its predictions over `default_grid`, whatif.json rows,
    and the model's own hint when nothing meets the budget."""
    from dsanalyze.whatif import api as whatif
    from dsanalyze.whatif import recommend

    model = whatif.fit(results, sizes)
    cpus, caches, bws, workers = default_grid(results)
    dataset_bytes = next(r.dataset.total_bytes for r in results if r.ok)
    preds = whatif.grid(model, whatif.configs(cpus, caches, bws, dataset_bytes, workers=workers),
                        results)
    rec = recommend.recommend(model, preds, results, max_stall_pct)
    return preds, whatif.whatif_document(preds), rec.reason


def _validation(results: list[RunResult], sizes: Sequence[int] | None
                ) -> tuple[dict[str, Any] | None, str]:
    """The model validated on held-out runs (`validate --json`), or None and why not."""
    from dsanalyze.whatif import api as whatif

    try:
        return whatif.validation_document(whatif.validate(results, sizes)), ""
    except DsAnalyzeError as e:
        return None, str(e).split(":")[0]
    except Exception as e:  # noqa: BLE001 - as a failed fit
        return None, failure_note(e)


def failure_note(e: Exception) -> str:
    """One line for a failure of the model: a DsAnalyzeError's message; any other exception
    (a bug of the model on data it was never tried on) its type and first line, so that a
    sweep that measured everything still ends with its table and this line."""
    if isinstance(e, DsAnalyzeError):
        return str(e)
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"
