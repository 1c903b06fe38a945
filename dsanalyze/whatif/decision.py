"""The decision: one answer to "what should this job run on?", from the table and the model.

    d = decide(summary, candidates, Facts(epochs, max_stall_pct, workers, all_cpus), validation)

Pure: the typed summary (`analysis.summary.Summary`: the measured table), the
model's predictions and the validation (`documents.ValidationDoc`) in, a `Decision` out;
`report/advice.py` words it. The end-of-run advice, `dsanalyze whatif
--recommend` and the report all come from this one function.

Every configuration is judged over a job of `epochs` epochs, the first cold
(`coldepoch.job_s`): a measured one by its measured numbers and the table's
stalls, a prediction only where no run measured its configuration. Like with
like: when no disk run measured a cold epoch (`cold_measured`: cached runs
alone), the measured spans are steady epochs, and so are the predictions'
(`Facts.cold`); a prediction's cold start against a measurement without one
would count its first batches' wait against the change.

With `Facts.max_cpus`, every configuration, measured or predicted, has at most
that many CPUs: the decision a machine of that size can check (`--verify`).

1. A measured configuration meets the budget when its job stalls at most
   `max_stall_pct` and no stall interval of the table reaches above it: one
   the table calls prep- or fetch-bound (or within noise) at the default 5%
   never does. The cheapest such is the answer (`MEASURED`, no change
   needed): the model is not asked to undercut a measurement.
2. Else only predictions faster than the fastest measured configuration (its
   measured job, less `tolerance`) count, and faster beyond their own noise: the
   job at the slow end of the prediction's interval (`slow_span_s`) is shorter
   too (`surely_faster`). A pick whose interval holds the measured rate is a
   coin toss, and a sweep measured again tipped the demo's advice from "keep"
   to "4 CPUs" and back (predicted 358.5 samples/s, interval 301.3-426.5,
   against 342 measured). Of those: the cheapest under the budget, else the
   least stalled (jobs within `tolerance` of the shortest tie, broken by the
   fewest knobs changed from the fastest measured, then cost), with the reason
   the stall stays (`CHANGE`).
3. None surely faster: keep the fastest measured configuration (`KEEP`); the
   fastest prediction faster than it by its point alone is named (`unsure`). Where
   the kept configuration stalls over the budget, the reason given is that of the
   least stalled prediction (`stalled`, named with it), when it too stalls over the
   budget; a prediction within the budget that is not faster leaves none (the stall
   is then not what holds the job back: `unsure` says how close it came).
4. A predicted pick whose validation split (below) rejects the model's intervals
   (`failed`: more held-out runs outside them than their level allows, a binomial test)
   is not advised: the fastest measured configuration stands, and the pick is named with
   the check it failed (`REFUSED`, `Refusal.FAILED_CHECK`). So is a pick of a job whose
   step runs on the CPU at a CPU count and worker count no cached run had
   (`unmeasured_sharing`, `Refusal.CPU_SHARING`): how the step's threads share the cores
   with that many workers is then taken from another count (`fit_loop.fit_stretch`), and
   it missed by 22% outside its interval on a CPU-trained script (bench/verify_scripts.py,
   pytorch/examples style, 1 worker measured at 2 CPUs, 2 advised). One run settles it:
   the pick measured (`dsanalyze verify` measures a refused pick of this kind).

The cost order (`cost`): fewest CPUs, least page cache, least bandwidth (no
limit last), then the measured worker count, then the fewest workers. The
error quoted with a predicted pick is the validation's extrapolation split
when the pick lies beyond the measured range (more CPUs, workers, cache or
bandwidth than any run had, other ranks, nodes or step), else leave-one-out.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from dsanalyze.analysis import coldepoch
from dsanalyze.analysis.summary import ConfigSummary, Summary
from dsanalyze.analysis.verdict import Bound
from dsanalyze.config import Mode, unlimited_last
from dsanalyze.plain import fields_from_plain, fields_to_plain
from dsanalyze.settings import SETTINGS
from dsanalyze.whatif.assumptions import Assumption
from dsanalyze.whatif.documents import Unmade, UnmadeWhy, ValidationDoc

# the defaults of a decision's stall limit and its ties (SETTINGS.input_bound_pct, .tie_tolerance)
MAX_STALL_PCT = SETTINGS.input_bound_pct
TOLERANCE = SETTINGS.tie_tolerance
REJECT = 0.05  # a validation split whose misses are this improbable fails the model (`failed`)
LOO, EXTRAPOLATION = "leave-one-out", "extrapolation"  # validation's split names


class DecisionKind(enum.Enum):
    MEASURED = "measured"  # a measured configuration meets the budget: no change needed
    CHANGE = "change"  # a configuration no run measured, predicted faster than every measured one
    KEEP = "keep"  # nothing predicted faster than the fastest measured configuration
    REFUSED = "refused"  # a predicted pick, but the model failed its own held-out check
    NONE = "none"  # nothing measured to compare, and nothing predicted


class Refusal(enum.Enum):
    """Why a predicted pick is not advised (`REFUSED`)."""

    FAILED_CHECK = "failed_check"  # its validation split rejects the model's intervals
    CPU_SHARING = "cpu_sharing"  # a step on the CPU: no cached run at the pick's CPUs, workers


class StallReason(enum.Enum):
    """Why the pick's stall stays over the budget."""

    FETCH = "fetch"  # its fetch stall dominates: more cache or bandwidth
    WORKERS = "workers"  # its prep stall, with every worker on a core of its own
    PREP = "prep"  # its prep stall dominates: more CPUs


@dataclass(frozen=True)
class Option:
    """One configuration over a job of the decision's epochs: measured (a run's figures, the
    table's bound) or predicted (the model's, with its interval and untested assumptions)."""

    cpus: int | None  # as asked (None: every CPU, measured only)
    cpus_used: int | None  # the CPUs it had or would have
    cache_spec: str
    cache_bytes: int | None
    storage_read_bps: int | None
    workers: int | None
    rate_sps: float  # steady state
    span_s: float  # the job, the cold first epoch included
    stall_pct: float  # share of span_s stalled
    measured: bool = False
    rate_sps_low: float | None = None  # measured: the run's interval; predicted: the model's
    rate_sps_high: float | None = None
    bound: str | None = None  # measured: the table's `Bound` value
    run_id: str | None = None
    untested: tuple[Assumption, ...] = ()
    fetch_dominates: bool = False  # its fetch stall exceeds its prep stall
    gpu_speedup: float = 1.0
    nproc: int | None = None
    nnodes: int = 1
    net_bw_bps: int | None = None  # remote data: the link (None: unshaped)
    net_latency_s: float | None = None  # None: the data is local

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "untested": [u.to_dict() for u in self.untested]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Option:
        return fields_from_plain(cls, d)


@dataclass(frozen=True)
class ErrorQuote:
    """One validation split's figures, as the decision quotes them."""

    split: str  # LOO or EXTRAPOLATION
    held_out: int
    median_abs_error_pct: float | None
    max_abs_error_pct: float | None
    coverage: float | None
    nominal: float | None
    unmade: Unmade | None = None  # why the split was not made

    def to_dict(self) -> dict[str, Any]:
        return fields_to_plain(self)


@dataclass(frozen=True)
class Facts:
    """What the decision needs besides the table and the predictions."""

    epochs: int  # of the job judged, the first cold (see `cold`)
    max_stall_pct: float = MAX_STALL_PCT
    workers: int | None = None  # DataLoader workers (DALI threads) per rank the runs had
    all_cpus: int | None = None  # what `--cpus all` was, in CPUs
    ranks: int | None = None  # ranks per node the runs had
    loader: str = "pytorch"  # pytorch (DataLoader workers) or dali (its threads)
    tolerance: float = TOLERANCE
    # a step on the CPU: the (CPUs, workers per rank) its cached runs had; None: off the CPU
    cpu_step_runs: tuple[tuple[int, int], ...] | None = None
    max_cpus: int | None = None  # the decision confined to a machine of this many CPUs
    cold: bool = True  # the spans' first epoch is cold (False: no disk run measured one)


@dataclass(frozen=True)
class Decision:
    kind: DecisionKind
    epochs: int
    max_stall_pct: float
    choice: Option | None  # the answer (KEEP: the fastest measured)
    best_measured: Option | None  # the fastest measured configuration
    beyond: tuple[str, ...] = ()  # knobs of a predicted choice beyond the measured range
    error: ErrorQuote | None = None  # the validation split that speaks for a predicted choice
    reason: StallReason | None = None  # why the stall stays over the budget
    workers: int | None = None  # as measured
    loader: str = "pytorch"
    prediction: Any = field(default=None, compare=False)  # whatif Prediction of a CHANGE
    refusal: Refusal | None = None  # REFUSED: why the pick (`prediction`) is not advised
    cold: bool = True  # the spans' first epoch is cold (`Facts.cold`)
    # KEEP: the fastest prediction faster than the kept one by its point, not beyond its
    # interval (`surely_faster`): within the model's noise of it
    unsure: Option | None = None
    # KEEP: the least stalled prediction, when its stall is what `reason` speaks of (it still
    # stalls over the budget); None where the reason is the kept configuration's own
    stalled: Option | None = None
    unsure_prediction: Any = field(default=None, compare=False)  # whatif Prediction of `unsure`

    @property
    def meets_budget(self) -> bool:
        return self.choice is not None and self.choice.stall_pct <= self.max_stall_pct

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "epochs": self.epochs,
                "max_stall_pct": self.max_stall_pct, "workers": self.workers,
                "loader": self.loader,
                "choice": self.choice.to_dict() if self.choice else None,
                "best_measured": self.best_measured.to_dict() if self.best_measured else None,
                "beyond": list(self.beyond), "error": self.error.to_dict() if self.error else None,
                "reason": self.reason.value if self.reason else None,
                "refusal": self.refusal.value if self.refusal else None, "cold": self.cold,
                "unsure": self.unsure.to_dict() if self.unsure else None,
                "stalled": self.stalled.to_dict() if self.stalled else None}


# ---- the measured table's configurations ----------------------------------------------------

def measured_epochs(summary: Summary) -> int:
    """Epochs per disk run (the first one cold): 1 when a disk run measured a single epoch."""
    disk = [r for r in summary.runs if r.mode == Mode.DISK.value and r.rate_sps]
    return max((r.steady_epochs + 1 for r in disk), default=1)


def cold_measured(summary: Summary) -> bool:
    """A disk run measured a cold first epoch: the measured spans include one."""
    return any(r.mode == Mode.DISK.value and r.rate_sps for r in summary.runs)


def _stalled_s(cfg: ConfigSummary) -> tuple[float, float | None]:
    """The table's stall seconds of a steady epoch (each clamped at 0, as drawn), and of the
    cold first epoch (None without one)."""
    steady = (cfg.prep_stall_s or 0.0) + (cfg.fetch_stall_s or 0.0)
    cold = cfg.cold_epoch
    return steady, None if not cold else (cold.prep_stall_s or 0.0) + (cold.fetch_stall_s or 0.0)


def _measured(summary: Summary) -> list[ConfigSummary]:
    """The table's configurations with an epoch time (the others measured no rate)."""
    return [c for c in summary.configs if c.total_s is not None]


def measured_options(summary: Summary, facts: Facts) -> list[Option]:
    """Each configuration of the table over a job of `facts.epochs` epochs, by its measured
    numbers: the span from its cold and steady epochs, the stall from the table's."""
    out = []
    for cfg in _measured(summary):
        disk = cfg.modes.get(Mode.DISK.value)
        mode = disk or cfg.modes.get(Mode.CACHED.value)
        steady_s, cold_s = _stalled_s(cfg)
        # one measured epoch (cold only, or cached runs alone) stands for every epoch
        epoch1 = disk.epoch1_s if disk is not None and not cfg.cold_only else None
        span = coldepoch.job_s(cfg.total_s, epoch1, facts.epochs)
        stalled = (cold_s if epoch1 is not None and cold_s is not None else steady_s) + \
            (facts.epochs - 1) * steady_s
        out.append(Option(
            cfg.cpus, cfg.cpus or facts.all_cpus, cfg.cache_spec, cfg.cache_bytes,
            cfg.storage_read_bps, facts.workers,
            (mode.rate_sps if mode else None) or cfg.samples_per_epoch / cfg.total_s, span,
            coldepoch.stall_pct(span, stalled), True, mode.rate_sps_low if mode else None,
            mode.rate_sps_high if mode else None, cfg.bound, mode.run_id if mode else None,
            fetch_dominates=(cfg.fetch_stall_s or 0.0) > (cfg.prep_stall_s or 0.0),
            nproc=facts.ranks, net_bw_bps=cfg.net_bw_bps, net_latency_s=cfg.net_latency_s))
    return out


def meets_budget(o: Option, cfg: ConfigSummary | None, max_stall_pct: float) -> bool:
    """A measured configuration meets the budget: its job's stall, and the upper end of each
    of the table's stall intervals, at most `max_stall_pct`."""
    if o.stall_pct > max_stall_pct or o.bound in (None, Bound.UNKNOWN.value):
        return False
    if cfg is None:
        return True
    highs = [high for pct, high in ((cfg.prep_stall_pct, cfg.prep_stall_pct_high),
                                    (cfg.fetch_stall_pct, cfg.fetch_stall_pct_high))
             if pct is not None]
    return all(h is None or h <= max_stall_pct for h in highs)


# ---- predictions ----------------------------------------------------------------------------

def predicted_option(p: Any, epochs: int, cold: bool = True) -> Option:
    """A whatif `Prediction` over a job of `epochs` epochs, the first cold unless `cold` is
    False (steady epochs only)."""
    c = p.config
    return Option(c.cpus, c.cpus, c.cache_spec, c.cache_bytes, c.storage_read_bps, c.workers,
                  p.rate_sps, p.job_s(epochs, cold), p.job_stall_pct(epochs, cold), False,
                  p.rate_sps_low, p.rate_sps_high, untested=tuple(p.untested),
                  fetch_dominates=p.fetch_stall_s > p.prep_stall_s,
                  gpu_speedup=c.gpu_speedup, nproc=p.nproc, nnodes=c.nnodes,
                  net_bw_bps=c.resources.net_bw_bps, net_latency_s=c.resources.net_latency_s)


def cost(o: Option, workers: int | None = None) -> tuple:
    """The one cost order: fewest CPUs, least cache, least bandwidth (storage, then the
    network link; no limit last), then the measured worker count (`workers`), then the
    fewest workers."""
    return (unlimited_last(o.cpus_used), unlimited_last(o.cache_bytes),
            unlimited_last(o.storage_read_bps), unlimited_last(o.net_bw_bps),
            o.workers != workers, o.workers or 0)


def _hardware(o: Option) -> tuple:
    return (o.cpus_used, o.cache_bytes, o.storage_read_bps, o.workers, round(o.gpu_speedup, 6),
            o.nproc, o.nnodes, o.net_bw_bps, o.net_latency_s)


def beyond_measured(o: Option, measured: Sequence[Option], facts: Facts) -> tuple[str, ...]:
    """The knobs of `o` beyond every measured configuration's (None: no limit, the most)."""
    if not measured:
        return ("every knob: no configuration measured",)
    out = []
    for name, get in (("CPUs", lambda x: x.cpus_used), ("page cache", lambda x: x.cache_bytes),
                      ("storage bandwidth", lambda x: x.storage_read_bps),
                      ("network bandwidth", lambda x: x.net_bw_bps)):
        if unlimited_last(get(o)) > max(unlimited_last(get(m)) for m in measured):
            out.append(name)
    if facts.workers is not None and (o.workers or 0) > facts.workers:
        out.append("workers")
    if round(o.gpu_speedup, 6) != 1.0:
        out.append("step")
    if facts.ranks is not None and o.nproc not in (None, facts.ranks):
        out.append("ranks")
    if o.nnodes > 1:
        out.append("nodes")
    return tuple(out)


def error_quote(validation: ValidationDoc | None, beyond: bool) -> ErrorQuote | None:
    """The validation split that speaks for a prediction: extrapolation beyond the measured
    range, leave-one-out within it."""
    if validation is None:
        return None
    name = EXTRAPOLATION if beyond else LOO
    split = validation.split(name)
    if split is None:
        return ErrorQuote(name, 0, None, None, None, None, Unmade(UnmadeWhy.MISSING))
    return ErrorQuote(name, split.held_out, split.median_abs_error_pct,
                      split.max_abs_error_pct, split.coverage, split.nominal, split.unmade)


def _reason(o: Option) -> StallReason:
    if o.fetch_dominates:
        return StallReason.FETCH
    ranks = (o.nproc or 1) * o.nnodes
    if o.cpus_used is not None and o.cpus_used >= ranks * max(1, o.workers or 0):
        return StallReason.WORKERS
    return StallReason.PREP


# ---- the decision ---------------------------------------------------------------------------

def decide(summary: Summary, candidates: Sequence[Any], facts: Facts,
           validation: ValidationDoc | None = None) -> Decision:
    """The one answer (the module docstring's rules) over the measured table `summary`, the
    model's predictions `candidates` and the validation document."""
    measured = measured_options(summary, facts)
    cfgs = {o.run_id: c for o, c in zip(measured, _measured(summary))}
    measured = [o for o in measured if facts.max_cpus is None or o.cpus_used is None
                or o.cpus_used <= facts.max_cpus]
    best = min(measured, key=lambda o: o.span_s, default=None)
    common = dict(epochs=facts.epochs, max_stall_pct=facts.max_stall_pct, workers=facts.workers,
                  loader=facts.loader, best_measured=best, cold=facts.cold)
    calm = [o for o in measured if meets_budget(o, cfgs.get(o.run_id), facts.max_stall_pct)]
    if calm:
        pick = min(calm, key=lambda o: cost(o, facts.workers))
        return Decision(DecisionKind.MEASURED, choice=pick, **common)
    seen = {_hardware(o) for o in measured if Mode.DISK.value in cfgs[o.run_id].modes}
    preds = [(p, predicted_option(p, facts.epochs, facts.cold)) for p in candidates]
    preds = [(p, o) for p, o in preds if _hardware(o) not in seen]
    ahead = [o for _, o in preds
             if best is not None and o.span_s < best.span_s * (1 - facts.tolerance)]
    faster = [(p, o) for p, o in preds
              if best is None or surely_faster(o, best, facts.tolerance)]
    if not faster:
        return _keep(best, preds, ahead, facts, common)
    under = [po for po in faster if po[1].stall_pct <= facts.max_stall_pct]
    p, pick = min(under, key=lambda po: cost(po[1], facts.workers)) if under else \
        next(po for po in faster if po[1] is _least_stalled([o for _, o in faster], facts, best))
    beyond = beyond_measured(pick, measured, facts)
    # the validation scores the disk's law; a link's prediction has its own error in its interval
    error = error_quote(validation, bool(beyond)) if pick.net_latency_s is None else None
    refusal = Refusal.FAILED_CHECK if failed(error) else \
        Refusal.CPU_SHARING if unmeasured_sharing(pick, facts) else None
    if refusal is not None:  # the table's answer stands; the pick is named with the refusal
        return Decision(DecisionKind.REFUSED, choice=best, beyond=beyond, error=error,
                        reason=None if best is None or best.stall_pct <= facts.max_stall_pct
                        else _reason(best), prediction=p, refusal=refusal, **common)
    return Decision(DecisionKind.CHANGE, choice=pick, beyond=beyond, error=error,
                    reason=None if under else _reason(pick), prediction=p, **common)


def _keep(best: Option | None, preds: list[tuple[Any, Option]], ahead: list[Option],
          facts: Facts, common: dict[str, Any]) -> Decision:
    """Rule 3: nothing surely faster; the fastest measured configuration kept (`NONE`
    without one), the fastest prediction ahead by its point named, and where the kept one
    stalls over the budget, the reason: its own with nothing predicted, else the least
    stalled prediction's while that one still stalls over it."""
    kind = DecisionKind.KEEP if best is not None else DecisionKind.NONE
    unsure = min(ahead, key=lambda o: o.span_s, default=None)
    named = dict(unsure=unsure, unsure_prediction=next(
        (p for p, o in preds if o is unsure), None), **common)
    if best is None or best.stall_pct <= facts.max_stall_pct:
        return Decision(kind, choice=best, **named)
    if not preds:  # nothing predicted: the kept configuration's own stall
        return Decision(kind, choice=best, reason=_reason(best), **named)
    closest = _least_stalled([o for _, o in preds], facts, best)
    # a prediction within the budget is not faster: the stall is not what holds the job
    # back, and no stall stays to give a reason for (`unsure` names the fastest one)
    stays = closest.stall_pct > facts.max_stall_pct
    return Decision(kind, choice=best, reason=_reason(closest) if stays else None,
                    stalled=closest if stays else None, **named)


def slow_span_s(o: Option) -> float:
    """A prediction's job at the slow end of its rate's interval: its span scaled by rate /
    low (the cold epoch taken to scale as the steady ones); its span without an interval."""
    if o.measured or not o.rate_sps_low or o.rate_sps_low <= 0:
        return o.span_s
    return o.span_s * o.rate_sps / o.rate_sps_low


def surely_faster(o: Option, best: Option, tolerance: float) -> bool:
    """`o`'s job is shorter than `best`'s by more than `tolerance`, at the slow end of its
    interval too (rule 2)."""
    return slow_span_s(o) < best.span_s * (1 - tolerance)


def failed(error: ErrorQuote | None) -> bool:
    """The split that speaks for a prediction rejects the model's intervals: so many of its
    held-out runs fell outside them that intervals of their nominal level would do so less
    than `REJECT` of the time (a one-sided binomial test: 2 of 2 outside 90% intervals,
    3 of 4, 3 of 8)."""
    if error is None or not error.held_out or error.coverage is None or error.nominal is None:
        return False
    n, p = error.held_out, 1 - error.nominal
    outside = round(n * (1 - error.coverage))
    tail = sum(math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(outside, n + 1))
    return outside > 0 and tail < REJECT


def unmeasured_sharing(o: Option, facts: Facts) -> bool:
    """The job's step runs on the CPU and no cached run had `o`'s CPU count and workers per
    rank (the module docstring's rule 4)."""
    if facts.cpu_step_runs is None:
        return False
    workers = o.workers if o.workers is not None else facts.workers
    return (o.cpus_used, workers) not in facts.cpu_step_runs


def _least_stalled(options: Sequence[Option], facts: Facts, best: Option | None) -> Option:
    """Of the options within `tolerance` of the shortest job, the one changing the fewest
    knobs of `best` (a knob that does not matter stays as measured), then the cheapest."""
    shortest = min(o.span_s for o in options)

    def changes(o: Option) -> int:
        return 0 if best is None else sum(a != b for a, b in zip(_hardware(o), _hardware(best)))
    return min((o for o in options if o.span_s <= shortest * (1 + facts.tolerance)),
               key=lambda o: (changes(o), cost(o, facts.workers)))
