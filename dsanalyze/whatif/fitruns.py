"""The runs a fitter reads, and the calibrations' objective.

`base_runs` picks the base job (the fewest ranks, then the slowest sim step);
`by_mode` the completed runs of one mode; `residual` a run's log error of the
steady rate `rates.predict_run` gives, and `log_error` their weighted sum of
squares, which every calibration minimises.
"""

from __future__ import annotations

import math

from dsanalyze.analysis import runrate
from dsanalyze.analysis.jobrun import job_as_run
from dsanalyze.config import Mode
from dsanalyze.records import RunResult
from dsanalyze.whatif.laws import run_config, workers_for
from dsanalyze.whatif.model import HeldOut, Model
from dsanalyze.whatif.rates import predict_run


def by_mode(results: list[RunResult], mode: Mode) -> list[RunResult]:
    return [r for r in results if r.ok and r.mode is mode and r.ranks]


def job_key(run: RunResult) -> tuple[int, float | None]:
    job = run.spec.job  # the sim step is the built-in job's alone (a script's device is its own)
    return job.world_size, job.sim_step_ms if job_as_run(run).device == "sim" else None


def base_runs(results: list[RunResult]) -> list[RunResult]:
    """The runs of the base job: the fewest ranks, then the slowest sim step."""
    key = min({job_key(r) for r in results}, key=lambda k: (k[0], -(k[1] or 0)))
    return [r for r in results if job_key(r) == key]


def cores_and_workers(model: Model, run: RunResult) -> tuple[int, int]:
    """A stored run's CPU count and workers as the model sees them (the groups the cached runs'
    CPU stretch is fitted per, and a disk run's cached twins share)."""
    cfg = run_config(model, HeldOut.of(run))
    return cfg.cpus, workers_for(model, cfg)


def per_iter(run: RunResult) -> int:
    """Samples per iteration of the whole job, as the script ran it."""
    ran = job_as_run(run)
    return ran.ranks * ran.batch_size


def residual(model: Model, run: RunResult) -> float:
    return residual_of(predict_run(model, HeldOut.of(run)).rate_sps, run)


def residual_of(predicted_sps: float, run: RunResult) -> float:
    """The log error of `predicted_sps` against `run`'s steady rate (`residual`'s)."""
    return math.log(predicted_sps / (runrate.run_rate(run).rate_sps or 1.0))


def log_error(model: Model, runs: list[RunResult]) -> float:
    """Sum of squared log errors of the predicted steady rates: the calibration's objective,
    each run weighted by 1 / its measured relative variance where `model.fit_weights` has it."""
    w = model.fit_weights
    return sum(residual(model, r) ** 2 * w.get(r.run_id, 1.0) for r in runs)
