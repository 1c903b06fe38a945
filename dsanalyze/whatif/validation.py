"""Out-of-sample validation of the what-if model: two splits, errors and interval coverage.

- leave-one-configuration-out: each disk configuration (and each cached one of
  a job other than the base one) predicted by a model fitted on every other
  run;
- extrapolation: fitted on the base job at the fewest CPUs (one rank, the
  slowest step), every other such configuration predicted.

A configuration is a run and its repeats (`--repeats`, `--target-ci`): they
are held out together, so that no repeat of the predicted configuration is in
the fit, and the figure predicted is their mean rate (as the stall table pools
them). A held-out configuration is predicted from its spec and iteration
layout only (`spec_only`: a `HeldOut`, which holds nothing it measured);
its measured rate is read afterwards, to score the prediction and its interval.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from dsanalyze.analysis import runrate
from dsanalyze.config import Mode, RunSpec
from dsanalyze.errors import ConfigError
from dsanalyze.records import RunResult
from dsanalyze.whatif import cachesim
from dsanalyze.whatif.assumptions import Assumption
from dsanalyze.whatif.calibrate import base_runs, fit
from dsanalyze.whatif.documents import SplitFigures, Unmade, UnmadeWhy, ValidationDoc
from dsanalyze.whatif.intervals import Spread, carried_sharing_rel, loop_share, spread, untested
from dsanalyze.whatif.laws import run_cache, run_config
from dsanalyze.whatif.model import LEVEL, HeldOut, Model, run_cpus
from dsanalyze.whatif.rates import predict_run

LOO = "leave-one-out"
EXTRAPOLATION = "extrapolation"


def configurations(runs: Sequence[RunResult]) -> list[tuple[RunResult, ...]]:
    """The runs grouped by configuration (job, mode, resources): a run and its repeats,
    first repeat first, in the order the configurations first appear."""
    groups: dict[RunSpec, list[RunResult]] = {}
    for r in sorted(runs, key=lambda r: r.spec.repeat):
        groups.setdefault(replace(r.spec, repeat=1), []).append(r)
    return [tuple(g) for g in groups.values()]


def _targets(ok: list[RunResult]) -> list[tuple[RunResult, ...]]:
    """Configurations a validation predicts: disk ones, and cached ones of other jobs than
    the base one (other rank counts, other step times); cached ones when there is no disk run."""
    base = {id(r) for r in base_runs(ok)}
    disk = [r for r in ok if r.mode is Mode.DISK]
    if not disk:
        return configurations([r for r in ok if r.mode is Mode.CACHED])
    return configurations(disk + [r for r in ok if r.mode is Mode.CACHED and id(r) not in base])


def run_label(model: Model, run: RunResult) -> str:
    """The run's id, and its job where it is not the base job (ids repeat across jobs)."""
    job, extra = run.spec.job, []
    if job.world_size != model.ranks:
        extra.append(f"{job.world_size} ranks")
    if model.step_ms and job.device == "sim" and job.sim_step_ms != model.step_ms:
        extra.append(f"step {job.sim_step_ms:g} ms")
    workers = HeldOut.of(run).job.workers
    if workers != model.workers:
        extra.append(f"{workers} workers")
    return run.run_id + (f" [{', '.join(extra)}]" if extra else "")


def spec_only(run: RunResult) -> HeldOut:
    """The held-out run as a prediction may see it (`HeldOut`): its spec, CPUs as resolved
    at sweep time, the job's knobs as run, and its iteration layout; nothing it measured."""
    return HeldOut.of(run)


@dataclass(frozen=True)
class Check:
    """One held-out run: measured against predicted, with the predicted interval."""

    run_id: str
    mode: str
    split: str
    measured_sps: float
    predicted_sps: float
    low_sps: float
    high_sps: float
    measured_epoch1_sps: float | None
    predicted_epoch1_sps: float | None
    cache_bytes: float | None  # the page cache it was predicted with (None: no limit)
    untested: tuple[Assumption, ...] = ()
    repeats: int = 1  # runs of the configuration; the measured figures are their mean
    spread: Spread | None = None  # what the interval's sigma is made of (the tuning bench)

    @property
    def error_pct(self) -> float:
        return 100 * (self.predicted_sps / self.measured_sps - 1)

    @property
    def covered(self) -> bool:
        return self.low_sps <= self.measured_sps <= self.high_sps

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "mode": self.mode, "split": self.split,
                "measured_sps": self.measured_sps, "predicted_sps": self.predicted_sps,
                "predicted_sps_low": self.low_sps, "predicted_sps_high": self.high_sps,
                "covered": self.covered, "error_pct": self.error_pct,
                "measured_epoch1_sps": self.measured_epoch1_sps,
                "predicted_epoch1_sps": self.predicted_epoch1_sps,
                "cache_bytes": self.cache_bytes, "untested": [u.to_dict() for u in self.untested],
                "repeats": self.repeats}


@dataclass(frozen=True)
class Split:
    """One split's held-out runs, or why it could not be made (`unmade`)."""

    name: str  # LOO or EXTRAPOLATION (the module's docstring gives each one's rule)
    checks: tuple[Check, ...]
    fit_runs: tuple[str, ...] = ()  # the extrapolation's fit runs (LOO: every other run)
    unmade: Unmade | None = None


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def check(model: Model, config: tuple[RunResult, ...], split: str) -> Check:
    """Predict a held-out configuration from its spec; only then read the figures its runs
    measured (the mean over its repeats)."""
    run = config[0]
    blind = spec_only(run)
    del run  # from here on only the blind view, until the measured figures are read
    pred = predict_run(model, blind)
    cfg = run_config(model, blind)
    cache = run_cache(model, blind) if blind.mode is Mode.DISK else None
    parts = spread(model, cfg, pred.held_rel,
                   loop_share(model, cfg, blind.layout, blind.mode, cache, pred.rate_sps),
                   carried_sharing_rel(model, cfg, blind.layout, blind.mode, cache, pred.rate_sps))
    low, high = parts.interval(pred.rate_sps)
    rates = [runrate.run_rate(r) for r in config]
    return Check(run_label(model, config[0]), blind.mode.value, split,
                 _mean([r.rate_sps for r in rates]) or 0.0, pred.rate_sps, low, high,
                 _mean([r.epoch1_rate_sps for r in rates]), pred.epoch1_sps, cache,
                 untested(model, cfg), len(config), parts)


def _loo(ok: list[RunResult], sizes: Sequence[int] | None, policy: str,
         weights: dict[str, float] | None) -> Split:
    checks = []
    for config in _targets(ok):
        held = {id(r) for r in config}
        rest = [r for r in ok if id(r) not in held]
        try:
            model = fit(rest, sizes, policy, weights)
        except ConfigError:
            continue  # the configuration alone gave a parameter: nothing to predict it with
        checks.append(check(model, config, "loo"))
    return Split(LOO, tuple(checks))


def _extrapolation(ok: list[RunResult], sizes: Sequence[int] | None, policy: str,
                   weights: dict[str, float] | None) -> Split:
    base = base_runs(ok)
    fewest = min(run_cpus(r) for r in base)
    fit_runs = [r for r in base if run_cpus(r) == fewest]
    ids = {id(r) for r in fit_runs}
    held = [c for c in _targets(ok) if id(c[0]) not in ids]
    if not held:
        return Split(EXTRAPOLATION, (), unmade=Unmade(UnmadeWhy.ONE_CONFIG))
    model = fit(fit_runs, sizes, policy, weights)
    try:
        checks = tuple(check(model, c, "extrapolation") for c in held)
    except ConfigError as e:  # the model refuses these configurations (a step on the CPU)
        return Split(EXTRAPOLATION, (), tuple(r.run_id for r in fit_runs),
                     Unmade(UnmadeWhy.REFUSED, str(e)))
    return Split(EXTRAPOLATION, checks, tuple(r.run_id for r in fit_runs))


def _abs_errors(checks: Sequence[Check]) -> list[float]:
    return [abs(c.error_pct) for c in checks]


@dataclass(frozen=True)
class Validation:
    """Both splits, and the model fitted on every run (for its parameters)."""

    model: Model
    splits: tuple[Split, ...]

    @property
    def checks(self) -> tuple[Check, ...]:
        return tuple(c for s in self.splits for c in s.checks)

    @property
    def median_abs_error_pct(self) -> float:
        return statistics.median(_abs_errors(self.checks))

    @property
    def max_abs_error_pct(self) -> float:
        return max(_abs_errors(self.checks))

    @property
    def coverage(self) -> float:
        """Share of held-out measurements inside their predicted interval."""
        return statistics.fmean(c.covered for c in self.checks)


def validate(results: Sequence[RunResult], sizes: Sequence[int] | None = None,
             policy: str = cachesim.Policy.PAGECACHE.value,
             rate_rel_sigma: dict[str, float] | None = None) -> Validation:
    """Out of sample, two splits: leave-one-configuration-out and extrapolation.

    A held-out run is never in the fit, and is predicted from its spec and
    iteration layout only (`spec_only`); its measured rate is read afterwards.
    """
    ok = [r for r in results if r.ok and r.ranks]
    model = fit(ok, sizes, policy, rate_rel_sigma)
    splits = (_loo(ok, sizes, policy, rate_rel_sigma),
              _extrapolation(ok, sizes, policy, rate_rel_sigma))
    if not any(s.checks for s in splits):
        raise ConfigError("nothing left to validate on: measure more configurations, e.g. "
                          "harness.py --cpus 1,2 --cache 0,50%,100% --modes synthetic,cached,"
                          "loader,disk")
    return Validation(model, splits)


def split_summary(checks: Sequence[Check]) -> dict[str, Any]:
    errs = _abs_errors(checks)
    return {"held_out": len(checks),
            "median_abs_error_pct": statistics.median(errs) if errs else None,
            "max_abs_error_pct": max(errs) if errs else None,
            "coverage": statistics.fmean(c.covered for c in checks) if checks else None,
            "nominal": LEVEL}


def validation_doc(v: Validation) -> ValidationDoc:
    """`validation_document` as the typed value the decision and the report read."""
    return ValidationDoc.from_dict(validation_document(v))


def validation_document(v: Validation) -> dict[str, Any]:
    """The `validate --json` document: every check of both splits, and each split's figures."""
    return {"runs": [c.to_dict() for c in v.checks],
            "median_abs_error_pct": v.median_abs_error_pct,
            "max_abs_error_pct": v.max_abs_error_pct, "coverage": v.coverage, "nominal": LEVEL,
            "splits": [{"name": s.name, "fit_runs": list(s.fit_runs),
                        "unmade": s.unmade.to_dict() if s.unmade else None,
                        **split_summary(s.checks)} for s in v.splits],
            "policy": v.model.policy, "model": v.model.to_dict()}


def split_figures(name: str, checks: Sequence[Check]) -> SplitFigures:
    """`split_summary` as the typed figures the report words."""
    return SplitFigures.from_dict({"name": name, **split_summary(checks)})
