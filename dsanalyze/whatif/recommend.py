"""The recommendation: the what-if grid and the free knobs, put to `decision.decide`.

    d = recommend(model, preds, results, max_stall_pct=5, epochs=None, validation=doc)

Beside every combination of the grid, the free software knob is predicted on
the measured hardware: DataLoader workers per rank (DALI threads with
`--loader dali`) at 1, 2, 4, 8, 16 and the grid's values. `decide` ranks
them against the measured table (its rules, and the one cost order: the
measured worker count before another on equal hardware, so a worker count on
the CPUs you have comes before asking for more CPUs). The end-of-run advice
(`whatif/advice.py`) and `dsanalyze whatif --recommend` both call this.

Stalls are those of a job of `epochs` epochs (None: as many as the disk runs
measured): the cold first epoch, then steady ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from dsanalyze.analysis.summary import Summary, summarize
from dsanalyze.config import Mode, unlimited_last
from dsanalyze.errors import ConfigError
from dsanalyze.records import RunResult
from dsanalyze.whatif.api import Prediction, predict
from dsanalyze.whatif.calibrate import base_runs
from dsanalyze.whatif.decision import (
    MAX_STALL_PCT,
    TOLERANCE,
    Decision,
    Facts,
    cold_measured,
    decide,
    measured_epochs,
    predicted_option,
)
from dsanalyze.whatif.decision import cost as decision_cost
from dsanalyze.whatif.documents import ValidationDoc
from dsanalyze.whatif.laws import run_config, workers_for
from dsanalyze.whatif.model import Config, HeldOut, Model, run_cpus

WORKER_CHOICES = (1, 2, 4, 8, 16)


def baseline_run(results: Sequence[RunResult]) -> RunResult | None:
    """The measured configuration: the base job's disk run with the most of everything
    (else its cached run)."""
    ok = [r for r in results if r.ok and r.ranks]
    if not ok:
        return None
    base = base_runs(ok)
    runs = [r for r in base if r.mode is Mode.DISK] or [r for r in base if r.mode is Mode.CACHED]
    if not runs:
        return None
    return max(runs, key=lambda r: (run_cpus(r),
                                    unlimited_last(r.spec.resources.cache.cache_bytes),
                                    unlimited_last(r.spec.resources.storage_read_bps)))


def software(model: Model, results: Sequence[RunResult],
             preds: Sequence[Prediction]) -> list[Prediction]:
    """Worker counts on the measured hardware (the baseline run's), in the grid's scenario
    (its GPU speed-up and ranks, when every combination shares them)."""
    run = baseline_run(results)
    if run is None:
        return []
    base = run_config(model, HeldOut.of(run))
    if run.mode is not Mode.DISK:
        base = base.with_cache()
    counts = sorted(set(WORKER_CHOICES) | {model.workers} |
                    {p.config.workers for p in preds if p.config.workers is not None})
    speedups = {p.config.gpu_speedup for p in preds}
    ranks = {p.config.nproc for p in preds}
    if len(speedups) == 1 and len(ranks) == 1:
        base = replace(base, gpu_speedup=speedups.pop(), nproc=ranks.pop())
    return [predict(model, replace(base, workers=w)) for w in counts]


def facts(model: Model, results: Sequence[RunResult], summary: Summary,
          max_stall_pct: float = MAX_STALL_PCT, epochs: int | None = None) -> Facts:
    """What the decision needs of the model and the runs besides the table."""
    if epochs is not None and epochs < 1:
        raise ConfigError("--epochs must be 1 or more")
    cpus = [run_cpus(r) for r in results if r.ok and r.ranks]
    return Facts(epochs or measured_epochs(summary), max_stall_pct, model.workers,
                 max(cpus, default=None), model.ranks, model.loader,
                 cpu_step_runs=cpu_step_runs(model, results), cold=cold_measured(summary))


def cpu_step_runs(model: Model, results: Sequence[RunResult]
                  ) -> tuple[tuple[int, int], ...] | None:
    """A step on the CPU: the (CPUs, workers per rank) of its cached runs, where the fit
    measured how the step shares the cores with the loader (`fit_loop.fit_stretch`); None
    for a step off the CPU."""
    if not model.step_on_cpu:
        return None
    cfgs = [run_config(model, HeldOut.of(r)) for r in results
            if r.ok and r.ranks and r.mode is Mode.CACHED]
    return tuple(sorted({(c.cpus, workers_for(model, c)) for c in cfgs}))


def recommend(model: Model, preds: Sequence[Prediction], results: Sequence[RunResult],
              max_stall_pct: float = MAX_STALL_PCT, epochs: int | None = None,
              validation: ValidationDoc | None = None, max_cpus: int | None = None
              ) -> Decision:
    """The decision over the grid's predictions and the worker counts on the measured
    hardware, against the runs' table; with `max_cpus`, over the predictions of at most
    that many CPUs only (what a machine of `max_cpus` CPUs can run)."""
    if not preds:
        raise ConfigError("nothing to recommend from: give --cpus and --cache values")
    summary = summarize(list(results))
    # worker counts on the measured hardware by the disk's law; a network grid has its own
    local = not any(p.config.resources.remote for p in preds)
    cands = [*preds, *(p for p in (software(model, results, preds) if local else [])
                       if all(p.config != q.config for q in preds))]
    cands = [p for p in cands if max_cpus is None or p.config.cpus <= max_cpus]
    known = replace(facts(model, results, summary, max_stall_pct, epochs), max_cpus=max_cpus)
    return decide(summary, cands, known, validation)


def pick_of(d: Decision | None) -> Config | None:
    """The predicted configuration a decision recommends (None: a measured one, or none)."""
    return d.prediction.config if d is not None and d.prediction is not None else None


# ---- for --adaptive (`nextrun.py`): the decision's cost order and tie rule over predictions ----

def cost(p: Prediction) -> tuple:
    """A prediction's place in the one cost order (`decision.cost`)."""
    return decision_cost(predicted_option(p, 1))


def rank(preds: Sequence[Prediction], max_stall_pct: float, epochs: int,
         tolerance: float = TOLERANCE) -> tuple[Prediction | None, Prediction | None]:
    """(the cheapest prediction under the budget, or None; that one, else the cheapest within
    `tolerance` of the shortest job): the decision's rules over predictions alone."""
    if not preds:
        return None, None
    ok = [p for p in preds if p.job_stall_pct(epochs) <= max_stall_pct]
    chosen = min(ok, key=cost) if ok else None
    best = min(p.job_s(epochs) for p in preds)
    return chosen, chosen or min((p for p in preds if p.job_s(epochs) <= best * (1 + tolerance)),
                                 key=cost)
