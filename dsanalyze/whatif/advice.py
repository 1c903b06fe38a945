"""The answer at the end of a run: the decision (`decision.py`) over the advice's own grid.

    advice = advise(results, sizes)       # Advice: the Decision, the grid's rows, validation

The what-if model is fitted on these runs (and validated out of sample, when
some runs can be held out), predicts `default_grid` around them (the grid
`dsanalyze whatif` predicts when no values are given), and `recommend.recommend`
decides over it and the measured table: `dsanalyze whatif --recommend` with
its defaults gives the same answer. Without a model the table alone decides.

This module is the only place that fits the what-if model for the advice
(`_fit_and_predict`, `validation`): re-point them to change models.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dsanalyze.analysis.jobrun import job_as_run
from dsanalyze.analysis.summary import summarize
from dsanalyze.config import Mode
from dsanalyze.errors import DsAnalyzeError
from dsanalyze.plain import PlainJson, to_plain
from dsanalyze.records import RunResult
from dsanalyze.whatif.decision import (
    MAX_STALL_PCT,
    Decision,
    Facts,
    cold_measured,
    decide,
    measured_epochs,
)
from dsanalyze.whatif.documents import GridRow, ValidationDoc

DEFAULT_CACHES = ("0", "25%", "50%", "75%", "100%")  # the what-if's budgets, with the measured


@dataclass(frozen=True)
class ModelFailure(PlainJson):
    """Why the model could not speak: a refusal of ours (`DsAnalyzeError`, `ours`: its message
    says what to do) or a bug of the model on data it was never tried on (any other
    exception: its type and message). `report/advice.py` words it."""

    error_type: str
    message: str
    ours: bool

    @classmethod
    def of(cls, e: Exception) -> ModelFailure:
        return cls(type(e).__name__, str(e), isinstance(e, DsAnalyzeError))


@dataclass(frozen=True)
class Advice:
    decision: Decision
    fitted_runs: int = 0
    note: ModelFailure | None = None  # why no model
    validation_note: ModelFailure | None = None  # why the model was not validated
    rows: list[GridRow] = field(default_factory=list)  # the grid, as `whatif.json` holds it
    validation: ValidationDoc | None = None  # the `validate --json` document
    model: Any = field(default=None, compare=False)  # the fitted whatif Model (None: no model)
    # the predictions `rows` are of: the grid's, and a configuration the decision names that
    # the grid lacks (a worker count of the free knob: its pick, or the fastest prediction)
    shown: list[Any] = field(default_factory=list, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {**self.decision.to_dict(), "fitted_runs": self.fitted_runs,
                "note": to_plain(self.note), "validation_note": to_plain(self.validation_note)}


def advise(results: Sequence[RunResult], sizes: Sequence[int] | None = None,
           max_stall_pct: float = MAX_STALL_PCT) -> Advice:
    """The advice for the runs of one prefix (see the module docstring)."""
    from dsanalyze.whatif import api as whatif

    results = list(results)
    try:
        model, preds = _fit_and_predict(results, sizes)
        val, why = validation(results, sizes)
        return conclude(model, preds, results, val, why, max_stall_pct, None,
                        rows_of=whatif.grid_rows)
    except Exception as e:  # noqa: BLE001 - a failed model is a line of the answer, not a crash
        return table_only(results, max_stall_pct, ModelFailure.of(e))


def table_only(results: Sequence[RunResult], max_stall_pct: float, why: ModelFailure
               ) -> Advice:
    """The decision of the measured table alone, when the model cannot speak (`why`)."""
    summary = summarize(list(results))
    ok = [r for r in results if r.ok and r.ranks]
    workers = job_as_run(ok[0]).workers if ok else None
    facts = Facts(measured_epochs(summary), max_stall_pct, workers, _cpus_of_all(results),
                  cold=cold_measured(summary))
    return Advice(decide(summary, [], facts), note=why)


def conclude(model: Any, preds: Sequence[Any], results: Sequence[RunResult],
             val: ValidationDoc | None, why: ModelFailure | None, max_stall_pct: float,
             epochs: int | None, rows_of: Any) -> Advice:
    """The decision over `preds` (and the free knobs) against the runs' table, with the grid's
    rows marked where they hold the answer."""
    from dsanalyze.whatif import recommend

    d = recommend.recommend(model, preds, results, max_stall_pct, epochs, val)
    # a configuration the advice names (its pick, or the fastest prediction it kept the
    # measured one against) is a row, also a worker count of the free knob the grid lacks
    shown = list(preds)
    for named in (d.prediction, d.unsure_prediction):
        if named is not None and all(p.config != named.config for p in shown):
            shown.append(named)
    rows = [replace(row, recommended=_holds(row, d)) for row in rows_of(shown, d.prediction)]
    fitted = sum(1 for r in results if r.ok and r.ranks)
    return Advice(d, fitted, None, why, rows, val, model, shown)


def _holds(row: GridRow, d: Decision) -> bool:
    """A grid row is the decision's answer (a measured answer marks the row that measured it)."""
    o = d.choice
    if o is None:
        return False
    return (row.cpus, row.cache_bytes, row.storage_read_bps, row.workers, row.gpu_speedup,
            row.nproc, row.net_bw_bps, row.net_latency_s) == \
        (o.cpus_used, o.cache_bytes, o.storage_read_bps, o.workers, o.gpu_speedup,
         o.nproc or row.nproc, o.net_bw_bps, o.net_latency_s)


# ---- the what-if model: the one place the advice calls it -----------------------------------

def default_grid(results: Sequence[RunResult]
                 ) -> tuple[list[int], list[str], list[int | None], list[int]]:
    """CPUs: the measured counts, 2x and 4x the largest; caches: `DEFAULT_CACHES`, the
    measured ones and none; storage: the measured bandwidths and the device unthrottled;
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


def _fit_and_predict(results: list[RunResult], sizes: Sequence[int] | None
                     ) -> tuple[Any, list[Any]]:
    """The model fitted on every run and its predictions (`predictions`)."""
    from dsanalyze.whatif import api as whatif

    model = whatif.fit(results, sizes)
    return model, predictions(model, results)


def predictions(model: Any, results: list[RunResult]) -> list[Any]:
    """The model's predictions over `default_grid`, or over the links and worker counts of
    `netgrid` when the data was across a network."""
    from dsanalyze.whatif import api as whatif
    from dsanalyze.whatif import netgrid

    if remote := netgrid.predictions(model, results):
        return remote
    cpus, caches, bws, workers = default_grid(results)
    dataset_bytes = next(r.dataset.total_bytes for r in results if r.ok)
    return whatif.grid(model, whatif.configs(cpus, caches, bws, dataset_bytes, workers=workers),
                       results)


def within(a: Advice, results: Sequence[RunResult], machine_cpus: int) -> Decision:
    """The advice's decision confined to what a machine of `machine_cpus` CPUs can run: the
    same decision (`recommend.recommend`) over the same model, grid and validation, its
    predictions of at most `machine_cpus` CPUs only."""
    from dsanalyze.whatif import recommend

    results = list(results)
    return recommend.recommend(a.model, predictions(a.model, results), results,
                               a.decision.max_stall_pct, None, a.validation,
                               max_cpus=machine_cpus)


def validation(results: Sequence[RunResult], sizes: Sequence[int] | None,
               policy: str = "pagecache") -> tuple[ValidationDoc | None, ModelFailure | None]:
    """The model validated on held-out runs (`validate --json`), or None and why not."""
    from dsanalyze.whatif import api as whatif

    try:
        return whatif.validation_doc(whatif.validate(results, sizes, policy)), None
    except Exception as e:  # noqa: BLE001 - as a failed fit
        return None, ModelFailure.of(e)
