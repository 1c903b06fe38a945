"""The closed loop: the recommended configuration measured, against its prediction.

    plan = verify_plan(decision, job, machine_cpus)      # VerifyPlan: what to run, or why not
    v = verification(model, decision, run)               # Verification: predicted vs measured

Pure: `app.verify` runs the plan (one disk run through the sweep machinery,
into the prefix, or a sub-prefix when the job itself changes) and hands the
run back here. The prediction checked is the model's for that run as it ran
(its spec and iteration layout, `validation.spec_only`), by the model fitted
before it: out of sample, as `dsanalyze validate` predicts a held-out run.

What this machine can run: CPUs up to those the harness may use, any page
cache budget and storage throttle (enforced as the sweep's were), and another
worker count for the built-in job (`-j`) or a script that takes a workers
flag in its arguments (`--workers`, `-j`, `--num-workers`, `--num_workers`).
A faster step, other ranks or more nodes cannot be measured here.

A pick the advice refused because no cached run had its CPUs and workers
(`Refusal.CPU_SHARING`) is measured itself: that one run settles it. A pick
needing more CPUs than this machine's is checked by the decision confined to
them (`app.verify`, `recommend(max_cpus=)`): its plan `stands_for` the pick.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any

from dsanalyze.analysis.notes import Disturbed, disturbed
from dsanalyze.analysis.stalls import run_rate
from dsanalyze.config import CacheBudget, Job, Resources
from dsanalyze.plain import fields_from_plain, fields_to_plain
from dsanalyze.records import RunResult
from dsanalyze.whatif.advice import ModelFailure
from dsanalyze.whatif.decision import Decision, DecisionKind, Option, Refusal, predicted_option

WORKER_FLAGS = ("--workers", "-j", "--num-workers", "--num_workers")
REPEAT = "verify-repeat"  # a measured pick run again: a fresh run the fit never saw


class Unrunnable(enum.Enum):
    """Why no check is run here (`NotRun`; `report/advice.py` words it)."""

    NO_CHOICE = "no_choice"  # no recommendation; `note`: the advice's why
    ADVICE_FAILED = "advice_failed"  # the advice itself failed; `note`: how
    MEASURED = "measured"  # a measured pick over a network: `run_id` (runs here are local)
    FASTER_STEP = "faster_step"  # a step `gpu_speedup` x faster
    NODES = "nodes"  # several nodes: each node's own harness verifies
    RANKS = "ranks"  # `nproc` ranks other than the job's
    CPUS = "cpus"  # it needs `cpus` CPUs, the harness may use `machine_cpus`
    NO_WORKERS_FLAG = "no_workers_flag"  # the script's arguments cannot set `workers`


@dataclass(frozen=True)
class NotRun:
    """Why the check of a decision is not run here, with the numbers that say it."""

    why: Unrunnable
    note: ModelFailure | None = None
    run_id: str | None = None
    gpu_speedup: float | None = None
    nproc: int | None = None
    cpus: int | None = None
    machine_cpus: int | None = None
    workers: int | None = None


@dataclass(frozen=True)
class VerifyPlan:
    """The run that checks a decision, or why none can be made here."""

    choice: Option | None
    job: Job | None = None  # the job to run (its workers as recommended)
    resources: Resources | None = None
    sub_prefix: str | None = None  # a run not of the prefix's grid goes there (`REPEAT`, ...)
    reason: NotRun | None = None  # why it cannot be run here (or there is nothing to run)
    refused: bool = False  # `choice` is the pick the advice refused (`Refusal.CPU_SHARING`)
    # the advice's pick this machine cannot run (`reason` then says why) when `choice`,
    # the best configuration it can run, is checked here instead
    stands_for: Option | None = None
    # the measured configuration the advice kept against `choice`, the fastest prediction,
    # within the model's noise of it: the advice said to measure it before changing
    kept: Option | None = None

    @property
    def runnable(self) -> bool:
        return self.job is not None


@dataclass(frozen=True)
class Verification:
    """The recommended configuration: predicted (for the run as it ran) against measured."""

    choice: Option
    run_id: str
    predicted_sps: float
    low_sps: float
    high_sps: float
    measured_sps: float
    level: float
    advised_sps: float  # the advice's steady rate for the configuration
    where: str = ""  # the sub-prefix holding the run, when not the prefix itself
    disturbed: Disturbed | None = None  # others took its CPUs or disk: the check is not fair
    stands_for: Option | None = None  # the advice's pick, beyond this machine, `choice` checks
    refused: bool = False  # `choice` is a pick the advice refused, measured to settle it
    kept: Option | None = None  # the measured configuration kept against `choice` (the plan's)

    @property
    def inside(self) -> bool:
        return self.low_sps <= self.measured_sps <= self.high_sps

    @property
    def conclusive(self) -> bool:
        """The run measured the configuration, not the other processes beside it."""
        return self.disturbed is None

    @property
    def error_pct(self) -> float:
        return 100 * (self.predicted_sps / self.measured_sps - 1)

    def to_dict(self) -> dict[str, Any]:
        return {**fields_to_plain(self), "inside": self.inside, "error_pct": self.error_pct,
                "conclusive": self.conclusive}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Verification:
        return fields_from_plain(cls, d)


def with_workers(job: Job, workers: int) -> Job | NotRun:
    """The job with `workers` DataLoader workers per rank, or why it cannot be set."""
    if job.script is None:
        return replace(job, workers=workers)
    args = list(job.script_args)
    for i, a in enumerate(args):
        flag, eq, _ = a.partition("=")
        if flag in WORKER_FLAGS and eq:
            args[i] = f"{flag}={workers}"
            return replace(job, script_args=tuple(args))
        if a in WORKER_FLAGS and i + 1 < len(args):
            args[i + 1] = str(workers)
            return replace(job, script_args=tuple(args))
    return NotRun(Unrunnable.NO_WORKERS_FLAG, workers=workers)


def verify_plan(decision: Decision | None, job: Job, machine_cpus: int,
                note: ModelFailure | None = None) -> VerifyPlan:
    """What to run to check `decision` on this machine (`machine_cpus`: the CPUs the
    harness may use), or why nothing is run."""
    if decision is None or decision.choice is None:
        return VerifyPlan(None, reason=NotRun(Unrunnable.NO_CHOICE, note))
    if decision.kind is DecisionKind.KEEP and decision.unsure is not None:
        # "measure it before changing": the fastest prediction, when it can run here
        plan = _plan(decision, job, machine_cpus, decision.unsure, True, False)
        if plan.runnable:
            return replace(plan, kept=decision.choice)
    o, predicted = decision.choice, decision.kind is DecisionKind.CHANGE
    refused = decision.refusal is Refusal.CPU_SHARING and decision.prediction is not None
    if refused:  # the one run that settles the refusal: the pick itself
        o, predicted = predicted_option(decision.prediction, decision.epochs, decision.cold), True
    return _plan(decision, job, machine_cpus, o, predicted, refused)


def _plan(decision: Decision, job: Job, machine_cpus: int, o: Option, predicted: bool,
          refused: bool) -> VerifyPlan:
    """The run of `o` (a prediction, else a measured configuration measured again)."""
    if not predicted and o.net_latency_s is not None:
        return VerifyPlan(o, reason=NotRun(Unrunnable.MEASURED, run_id=o.run_id))
    why = _unrunnable(o, job, machine_cpus)
    if why is not None:
        return VerifyPlan(o, reason=why, refused=refused)
    resources = Resources(o.cpus_used, CacheBudget(o.cache_spec, o.cache_bytes),
                          o.storage_read_bps)
    if not predicted:  # its run is in the fit: measure it again
        return VerifyPlan(o, job, resources, sub_prefix=REPEAT)
    if decision.workers is None or o.workers in (None, decision.workers):
        return VerifyPlan(o, job, resources, refused=refused)
    changed = with_workers(job, o.workers)
    if isinstance(changed, NotRun):
        return VerifyPlan(o, reason=changed, refused=refused)
    # run ids do not name the workers and a prefix holds one job: another folder
    return VerifyPlan(o, changed, resources, sub_prefix=f"verify-workers{o.workers}",
                      refused=refused)


def _unrunnable(o: Option, job: Job, machine_cpus: int) -> NotRun | None:
    if round(o.gpu_speedup, 6) != 1.0:
        return NotRun(Unrunnable.FASTER_STEP, gpu_speedup=o.gpu_speedup)
    if o.nnodes > 1 or job.nnodes > 1:
        return NotRun(Unrunnable.NODES)
    if o.nproc not in (None, job.nproc_per_node):
        return NotRun(Unrunnable.RANKS, nproc=o.nproc)
    if o.cpus_used is None or o.cpus_used > machine_cpus:
        return NotRun(Unrunnable.CPUS, cpus=o.cpus_used, machine_cpus=machine_cpus)
    return None


def verification(model: Any, plan: VerifyPlan, run: RunResult) -> Verification:
    """The run of a plan against the model's prediction for it (fitted before it ran)."""
    from dsanalyze.whatif import api as whatif

    check = whatif.check_run(model, run)
    o = plan.choice
    assert o is not None  # a plan runs only for a choice
    return Verification(o, run.run_id, check.predicted_sps, check.low_sps, check.high_sps,
                        check.measured_sps, whatif.LEVEL, o.rate_sps, plan.sub_prefix or "",
                        disturbed(run_rate(run)), plan.stands_for, plan.refused, plan.kept)
