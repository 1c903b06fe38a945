"""The registry of fitters: what each reads, its rule, its degrees of freedom, its bounds.

`calibrate.fit` builds the job's model (`jobfit.job_model`: the layout, the
file sizes and the step law), then applies `FITTERS` in order, each to the
runs it declares (`runs`, then only the `modes` it names), and sizes the
intervals last (`fit_sigma`) over the degrees of freedom the fitters declare
they took: a number calibrated against the fit runs' rates takes one, a
number measured directly on a timeline or a probe takes none. `bounds` are
the plausible ranges (`whatif/bounds.py`) a rule checks its value against.
`SHOWN` is the order the parameters are listed in.
"""

from __future__ import annotations

import enum
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace

from dsanalyze.analysis import runrate
from dsanalyze.config import Mode
from dsanalyze.records import RunResult
from dsanalyze.settings import SETTINGS
from dsanalyze.whatif import bounds, fit_loop, fit_prep, fit_reads, fit_storage
from dsanalyze.whatif.bounds import Bound
from dsanalyze.whatif.fitruns import residual, residual_of
from dsanalyze.whatif.intervals import loop_share
from dsanalyze.whatif.laws import run_cache, run_config
from dsanalyze.whatif.model import LEVEL, HeldOut, Model, Param, Z
from dsanalyze.whatif.provenance import (
    Fixed,
    Reason,
    SigmaDefault,
    SigmaResidual,
    StorageSigma,
)
from dsanalyze.whatif.rates import predict_run

Rule = Callable[[Model, list[RunResult]], tuple[Model, list[Param]]]
Dof = Callable[[Model, list[Param]], int]
EVERY_MODE = tuple(Mode)


class Runs(enum.Enum):
    """Which of the prefix's completed runs a fitter reads."""

    ALL = "every job's runs"
    BASE = "the base job's runs"
    BASE_DISK = "the base job's disk runs"


@dataclass(frozen=True)
class Fitter:
    """One group of parameters: what it reads, how it fits, what it costs the intervals."""

    name: str
    runs: Runs
    modes: tuple[Mode, ...]  # of those runs, the modes the rule is given
    rule: Rule
    dof: Dof  # numbers the rule calibrated against the fit runs' rates
    bounds: tuple[Bound, ...] = ()
    needs_prep: bool = False  # applied only once c_prep and the step are known

    def inputs(self, runs: dict[Runs, list[RunResult]]) -> list[RunResult]:
        return [r for r in runs[self.runs] if r.mode in self.modes]


def measured(model: Model, params: list[Param]) -> int:
    """A number read off a timeline or a probe: no degree of freedom taken."""
    return 0


def _prep_dof(model: Model, params: list[Param]) -> int:
    # c_prep, the contention where the runs (not the machine's probe) fitted it, the prep
    # where a step on the CPU takes turns with the workers, the
    # workers' restart where the waits gave one, the main process's share where the first
    # iterations did
    return 1 + int(model.contention > 0 and not model.contention_probed) + \
        (max(1, len(model.prep_alone_by_workers)) if model.prep_alone_cpu_s is not None
         else 0) + \
        int(model.restart_cpu_s > 0) + int(model.restart_main_cpu_s > 0)


def _one(model: Model, params: list[Param]) -> int:
    return 1  # the start-up: the first waits against the simulated ones


def _read_dof(model: Model, params: list[Param]) -> int:
    return int(bool(model.miss_cpu_s_per_byte)) + int(model.read_wait_s > 0)


def _throttle_dof(model: Model, params: list[Param]) -> int:
    # one where any throttled run was fitted, also when every fit fell out of bounds (as the
    # fit always counted it; 2 of the fixtures' leave-one-out fits have such a case)
    return int(bool(params and params[0].runs))


def _slack_dof(model: Model, params: list[Param]) -> int:
    # read off the cgroup's counters, but it shifts every budget the rates are predicted at
    return int(params[0].value is not None)


FITTERS = (
    Fitter("device", Runs.BASE_DISK, (Mode.DISK,), fit_storage.fit_device, measured),
    Fitter("reads", Runs.BASE_DISK, (Mode.DISK,), fit_reads.fit_reads, measured,
           (bounds.READ_AMPLIFICATION,)),
    # every mode: the machine's CPU count and its decode probe may come with any run
    Fitter("others", Runs.ALL, EVERY_MODE, fit_loop.fit_others, measured),
    Fitter("size_share", Runs.BASE, (Mode.LOADER, Mode.CACHED), fit_prep.fit_size_share,
           measured),
    # the main process (its cached runs' loops, measured) and c_prep (calibrated) together:
    # each run's rate gives c_prep given the main, a step on the CPU's loop the main given c_prep
    Fitter("main_cpu", Runs.ALL, EVERY_MODE, fit_loop.fit_main_and_prep, _prep_dof,
           (bounds.CONTENTION, bounds.PREP_CPU_S)),
    # a step on the CPU: per CPU count, one number calibrated on that count's cached runs
    Fitter("cpu_stretch", Runs.ALL, (Mode.CACHED,), fit_loop.fit_stretch,
           lambda model, params: len(params)),
    Fitter("startup", Runs.BASE, (Mode.LOADER, Mode.CACHED), fit_loop.fit_startup, _one),
    # cached runs too: a disk run's cached twins (the same CPUs and workers) where the wait is fitted
    Fitter("read_cpu", Runs.BASE, (Mode.CACHED, Mode.DISK), fit_storage.fit_read_cpu, _read_dof,
           (bounds.READ_CPU_BPS,), needs_prep=True),
    Fitter("throttle", Runs.BASE_DISK, (Mode.DISK,), fit_storage.fit_throttles, _throttle_dof,
           (bounds.THROTTLE_EFFICIENCY,), needs_prep=True),
    Fitter("slack", Runs.BASE_DISK, (Mode.DISK,), fit_storage.fit_slack, _slack_dof),
)
# "step" and "layout": the job's model (`jobfit`); "sigma": the intervals
SHOWN = ("step", "size_share", "main_cpu", "cpu_stretch", "others", "layout", "startup", "device",
         "reads", "read_cpu", "throttle", "slack", "sigma")


def ready(model: Model) -> bool:
    """Whether the model can predict a rate: c_prep and the step known."""
    return model.prep_cpu_s is not None and model.step_s is not None


def fit_sigma(model: Model, runs: list[RunResult], calibrated: int) -> tuple[Model, Param]:
    """The relative standard error of a prediction: the fit runs' residual log error over
    their degrees of freedom (runs - calibrated numbers), at least `SETTINGS.noise_floor`."""
    rated = [r for r in runs if r.mode is not Mode.SYNTHETIC and runrate.run_rate(r).rate_sps]
    dof = len(rated) - calibrated
    ids = tuple(r.run_id for r in rated)
    measured = [model.measured_sigma[r.run_id] for r in rated if r.run_id in model.measured_sigma]
    noise = statistics.median(measured) if measured else 0.0
    if dof < 2:
        sigma = max(SETTINGS.default_rel_sigma, noise)
        return replace(model, rel_sigma=sigma), Param(
            "rel_sigma", sigma, "", ids,
            SigmaDefault(SETTINGS.default_rel_sigma, noise, len(rated), calibrated))
    res = [residual(model, r) for r in rated]
    sigma = max(SETTINGS.noise_floor, noise, math.sqrt(sum(x * x for x in res) / dof))
    return replace(model, rel_sigma=sigma), Param(
        "rel_sigma", sigma, "", ids,
        SigmaResidual(len(rated), dof, noise, SETTINGS.noise_floor, Z, LEVEL))


def _storage_residual(model: Model, run: RunResult) -> float | None:
    """`run`'s residual log error (`fitruns.residual`) where the model has the storage set its
    steady rate (`loop_share` under 1/2), else None: one prediction serves both."""
    held = HeldOut.of(run)
    predicted = predict_run(model, held).rate_sps
    if loop_share(model, run_config(model, held), held.layout, held.mode,
                  run_cache(model, held), predicted) >= 0.5:
        return None
    return residual_of(predicted, run)


def fit_storage_sigma(model: Model, disk: list[RunResult], throttled: tuple[str, ...]
                      ) -> tuple[Model, Param]:
    """The relative standard error of a rate the storage sets: the steady rates' residual
    log error of the `throttled` runs (those the throttle efficiency was fitted on) whose
    rate the storage sets, pooled with one pseudo-run at `SETTINGS.default_rel_sigma` (a
    stated prior: one or two such runs say little of the next one), at least
    `SETTINGS.noise_floor`. The efficiency was solved on their cold windows, not on these
    steady rates: it takes no degree of freedom from them."""
    # (run, residual): runs of one id from two prefixes stay apart
    found = [(r, res) for r in disk if r.run_id in throttled and runrate.run_rate(r).rate_sps
             and (res := _storage_residual(model, r)) is not None]
    runs = [r for r, _ in found]
    if not runs:
        return model, Param("storage_rel_sigma", None, "", (), Fixed(Reason.NO_STORAGE_BOUND_RUN))
    squares = sum(res ** 2 for _, res in found) + SETTINGS.default_rel_sigma ** 2
    sigma = max(SETTINGS.noise_floor, math.sqrt(squares / (len(runs) + 1)))
    return replace(model, storage_rel_sigma=sigma), Param(
        "storage_rel_sigma", sigma, "", tuple(r.run_id for r in runs),
        StorageSigma(len(runs), SETTINGS.default_rel_sigma, SETTINGS.noise_floor, Z, LEVEL))
