"""Fitting the what-if model to stored runs: each parameter measured or calibrated once.

`fit` picks the base job (the fewest ranks, then the slowest sim step),
builds its model (`jobfit.job_model`: layout, file sizes, the step law), then
applies the registry of fitters (`fitters.FITTERS`) in order, each to the runs
it declares: the storage device, the work outside the job's cgroup, the
size-following share of the prep, the main process with c_prep and its
contention law (fitted together: each needs the other),
the DataLoader start-up, the CPU per byte read, one throttle efficiency for
every throttle, the page cache runs had beyond their budget. Last, the
residual error that sizes the intervals, over the degrees of freedom the
fitters declare they took, and the storage's own (`fitters.fit_storage_sigma`). Calibrations minimise the squared log error of the
steady rates `rates.predict_run` gives (`fitruns.log_error`), each run weighted
by its measured uncertainty (`rate_rel_sigma`). Every parameter names its
runs. None is solved for one configuration alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from dsanalyze.analysis import uncertainty
from dsanalyze.config import Mode
from dsanalyze.errors import ConfigError
from dsanalyze.records import RunResult
from dsanalyze.whatif import cachesim
from dsanalyze.whatif.fitruns import base_runs, by_mode
from dsanalyze.whatif.fitters import FITTERS, SHOWN, Runs, fit_sigma, fit_storage_sigma, ready
from dsanalyze.whatif.jobfit import job_model
from dsanalyze.whatif.model import Model, Param
from dsanalyze.whatif.provenance import Fixed, Reason

__all__ = ["base_runs", "fit"]


def _completed(results: list[RunResult]) -> list[RunResult]:
    ok = [r for r in results if r.ok and r.ranks]
    if not ok:
        raise ConfigError("no completed runs to fit the model on: run harness.py first")
    if any(r.spec.job.nnodes > 1 for r in ok):
        raise ConfigError("the what-if model is fitted on one node's runs: fit it on a one-node "
                          "sweep and ask for several nodes with --nnodes")
    return ok


def fit(results: list[RunResult], sizes: Sequence[int] | None = None,
        policy: str = cachesim.Policy.PAGECACHE.value,
        rate_rel_sigma: Mapping[str, float] | None = None) -> Model:
    """Fit the model on the completed runs of one job; `sizes`: the dataset's file sizes.

    `rate_rel_sigma`: each run's measured relative uncertainty of its rate (run id ->
    sigma / rate); by default the block bootstrap's (`uncertainty.rel_sigmas`). Runs are
    weighted by 1 / sigma^2 in the calibrations, and a prediction's interval is never
    narrower than the fit runs' median measured noise.
    """
    ok = _completed(results)
    if rate_rel_sigma is None:
        rate_rel_sigma = uncertainty.rel_sigmas(ok)
    base = base_runs(ok)
    cachesim.Policy.parse(policy)
    model, step, layout = job_model(ok, base, sizes, policy, rate_rel_sigma)
    runs = {Runs.ALL: ok, Runs.BASE: base, Runs.BASE_DISK: by_mode(base, Mode.DISK)}
    found: dict[str, list[Param]] = {"step": step, "layout": layout}
    calibrated = 0
    for fitter in FITTERS:
        if fitter.needs_prep and not ready(model):
            found[fitter.name] = []
            continue
        model, found[fitter.name] = fitter.rule(model, fitter.inputs(runs))
        calibrated += fitter.dof(model, found[fitter.name])
    model, found["sigma"] = _sigmas(model, base, runs[Runs.BASE_DISK], found["throttle"],
                                    calibrated)
    return replace(model, params=tuple(p for name in SHOWN for p in found[name]))


def _sigmas(model: Model, base: list[RunResult], disk: list[RunResult], throttle: list[Param],
            calibrated: int) -> tuple[Model, list[Param]]:
    """The intervals' sigmas: the fit's (`fit_sigma`) and the storage's (the runs the
    throttle efficiency was fitted on, `fit_storage_sigma`)."""
    if not ready(model):
        return model, [Param("rel_sigma", model.rel_sigma, "", (),
                             Fixed(Reason.NOTHING_TO_PREDICT))]
    model, sigma = fit_sigma(model, base, calibrated)
    throttled = throttle[0].runs if throttle and model.throttle_measured else ()
    model, storage = fit_storage_sigma(model, disk, throttled)
    return model, [sigma, storage]
