"""The decision in words: after the table, heading the report's what-if, and after
`dsanalyze whatif --recommend`'s grid.

    advice_text(advise(runs, sizes))
    -> "Advice: give the job 4 CPUs (2 measured): predicted 370 samples/s (90% interval
        340-402), 2 epochs in 1.90 s, 3% stalled, first epoch included, against 3.40 s
        measured at cpus=2 cache=unlimited bw=unthrottled (41% stalled, likely prep-bound).
        Untested: 4 CPUs: beyond the 2 measured; .... From the what-if model fitted on the 6
        runs of this sweep; beyond the measured range (CPUs), its extrapolation error on
        held-out runs: median 4.1%, maximum 9.0%, 67% inside their 90% intervals."

Every number is the `Advice` value's (`whatif/advice.py`, `whatif/decision.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dsanalyze.analysis.verdict import Bound
from dsanalyze.report.assumptions import assumption_text
from dsanalyze.report.notes import note_text
from dsanalyze.report.text import bandwidth_text, cache_text, number
from dsanalyze.report.verdicts import REPEAT_HINT
from dsanalyze.report.whatif_text import unmade_text
from dsanalyze.whatif.advice import Advice, ModelFailure
from dsanalyze.whatif.decision import (
    Decision,
    DecisionKind,
    ErrorQuote,
    Option,
    Refusal,
    StallReason,
    predicted_option,
    slow_span_s,
)
from dsanalyze.whatif.verification import REPEAT, WORKER_FLAGS, NotRun, Unrunnable


def option_label(o: Option) -> str:
    """`cpus=2 cache=unlimited bw=8M/s`, as the table's first column."""
    return (f"cpus={'all' if o.cpus is None else o.cpus} "
            f"cache={cache_text(o.cache_spec, o.cache_bytes)} "
            f"bw={bandwidth_text(o.storage_read_bps)}")


def worker_word(loader: str, n: int | None = None) -> str:
    word = "DALI threads" if loader == "dali" else "DataLoader workers"
    return word[:-1] if n == 1 else word


def change_text(choice: Option, base: Option | None, loader: str = "pytorch") -> str:
    """What differs from `base`, in words: `4 CPUs (2 measured), cache 50% (25M) (unlimited)`."""
    parts = []
    if base is None or choice.cpus_used != base.cpus_used:
        parts.append(f"{choice.cpus} CPU" + "s" * (choice.cpus != 1)
                     + (f" ({base.cpus or 'all'} measured)" if base else ""))
    if base is None or choice.cache_bytes != base.cache_bytes:
        parts.append(f"a page cache of {cache_text(choice.cache_spec, choice.cache_bytes)}"
                     + (f" ({cache_text(base.cache_spec, base.cache_bytes)} measured)"
                        if base else ""))
    if base is None or choice.storage_read_bps != base.storage_read_bps:
        disk = bandwidth_text(choice.storage_read_bps, "this machine's disk, unthrottled")
        parts.append(f"storage at {disk}" + (f" ({bandwidth_text(base.storage_read_bps)} "
                                             "measured)" if base else ""))
    if choice.net_latency_s is not None and (base is None or choice.net_bw_bps != base.net_bw_bps):
        parts.append(f"a link of {bandwidth_text(choice.net_bw_bps, 'no limit')}" + (
            f" ({bandwidth_text(base.net_bw_bps, 'no limit')} measured)" if base else ""))
    if base is not None and choice.workers != base.workers:
        parts.append(f"{choice.workers} {worker_word(loader, choice.workers)} per rank "
                     f"({base.workers} measured)")
    if choice.gpu_speedup != 1:
        parts.append(f"a step {choice.gpu_speedup:g}x faster")
    if base is not None and choice.nproc not in (None, base.nproc):
        parts.append(f"{choice.nproc} ranks ({base.nproc} measured)")
    if choice.nnodes > 1:
        parts.append(f"{choice.nnodes} nodes")
    return ", ".join(parts) or option_label(choice)


def _epochs(d: Decision) -> str:
    """The job judged: `1 epoch (cold)`, `3 epochs`; `1 epoch` when its spans are steady
    epochs (no disk run measured a cold one)."""
    return f"{d.epochs} epochs" if d.epochs > 1 else "1 epoch (cold)" if d.cold else "1 epoch"


def _first_included(d: Decision) -> str:
    return ", first epoch included" if d.epochs > 1 and d.cold else ""


def _bound_text(o: Option) -> str:
    """What the table calls a measured configuration."""
    if o.bound in (Bound.PREP.value, Bound.FETCH.value):
        return f"likely {o.bound}-bound"
    return {Bound.COMPUTE.value: "compute-bound", Bound.NOISE.value: "stalls within noise"}.get(
        o.bound or "", "not split")


def _rate_text(o: Option, what: str) -> str:
    if o.rate_sps_low is None or o.rate_sps_high is None:
        return f"{number(o.rate_sps)} samples/s {what}"
    return (f"{number(o.rate_sps)} samples/s {what} (interval {number(o.rate_sps_low)}-"
            f"{number(o.rate_sps_high)})")


def _reason_text(d: Decision) -> str:
    o = d.stalled or d.choice  # the configuration whose stall the reason speaks of
    if d.reason is StallReason.FETCH:
        return "the fetch stall dominates: measure more cache or storage bandwidth"
    if d.reason is StallReason.WORKERS and o is not None:
        return (f"the prep stall left does not shrink with more CPUs: {o.workers} "
                f"{worker_word(d.loader, o.workers)} per rank use at most {o.workers} core(s) "
                "each, and each epoch starts with an empty prefetch queue")
    return "the prep stall dominates: measure more CPUs"


def failure_text(f: ModelFailure) -> str:
    """One line for a failure of the model: our refusal's message (it says what to do); any
    other exception (a bug of the model on data it was never tried on) its type and first
    line, so that a sweep that measured everything still ends with its table and this line."""
    if f.ours:
        return f.message
    return f"{f.error_type}: {(f.message.strip().splitlines() or [''])[0]}"


def why_not_validated(f: ModelFailure | None) -> str:
    """Why the model was not validated, short: our refusal's first clause (before its ':')."""
    if f is None:
        return "no run held out"
    return f.message.split(":")[0] if f.ours else failure_text(f)


def advice_failed_text(f: ModelFailure) -> str:
    """The advice itself failed on the runs: `the advice failed on these runs (...)`."""
    return f"the advice failed on these runs ({failure_text(f)})"


def missing_note(a: Advice) -> str | None:
    """What the report lacks and why: no model fitted, or the model not validated."""
    notes = [] if a.rows or a.note is None else \
        [f"What-if: no model fitted on these runs: {failure_text(a.note)}"]
    if a.rows and a.validation is None:
        notes.append(f"Validation: {why_not_validated(a.validation_note)}")
    return " ".join(notes) or None


def error_text(e: ErrorQuote | None, beyond: tuple[str, ...], why_not: ModelFailure | None
               ) -> str:
    """The validation split that speaks for a prediction, in words."""
    where = f"beyond the measured range ({', '.join(beyond)}), " if beyond else ""
    if e is None:
        return f"{where}not validated ({why_not_validated(why_not)})"
    if e.median_abs_error_pct is None:
        why = unmade_text(e.unmade) if e.unmade else "no run held out"
        return f"{where}its {e.split} error is unknown ({why})"
    return (f"{where}its {e.split} error on {e.held_out} held-out configuration(s): median "
            f"{number(e.median_abs_error_pct)}%, maximum {number(e.max_abs_error_pct)}%, "
            f"{e.coverage:.0%} inside their {e.nominal:.0%} intervals")


def _measured_text(a: Advice) -> str:
    d = a.decision
    o = d.choice
    assert o is not None
    there = "; the job is compute-bound there" if o.bound == Bound.COMPUTE.value else \
        f"; within the {d.max_stall_pct:g}% stall budget (the table: {_bound_text(o)})"
    return (f"Advice: no change needed: {option_label(o)} stalls {number(o.stall_pct, '{:.0f}')}"
            f"% of {_epochs(d)}{_first_included(d)}, {_rate_text(o, 'measured')}"
            f"{there}.")


def _change_text(a: Advice) -> str:
    d = a.decision
    c, best = d.choice, d.best_measured
    assert c is not None
    against = "" if best is None else (
        f", against {number(best.span_s, '{:.2f}')} s measured at {option_label(best)} "
        f"({number(best.stall_pct, '{:.0f}')}% stalled, {_bound_text(best)})")
    over = "" if d.meets_budget else \
        f" Nothing predicted keeps the stalls under {d.max_stall_pct:g}%: {_reason_text(d)}."
    untested = f" Untested: {'; '.join(map(assumption_text, c.untested))}." if c.untested else ""
    return (f"Advice: give the job {change_text(c, best, d.loader)}: predicted "
            f"{_rate_text(c, 'steady')}, {_epochs(d)} in {number(c.span_s, '{:.2f}')} s, "
            f"{number(c.stall_pct, '{:.0f}')}% stalled{_first_included(d)}{against}.{over}"
            f"{untested} From the what-if model fitted on the {a.fitted_runs} runs of this "
            f"sweep; {error_text(d.error, d.beyond, a.validation_note)}.")


def _keep_text(a: Advice) -> str:
    d = a.decision
    best = d.best_measured
    assert best is not None
    over = "" if d.reason is None else f" ({_reason_text(d)})" if d.stalled is None else (
        f" (the least stalled prediction, {change_text(d.stalled, best, d.loader)}, still stalls "
        f"{number(d.stalled.stall_pct, '{:.0f}')}%; {_reason_text(d)})")
    # a throttle is the sweep's, not a setting of the machine's: say what keeping it means
    throttle = "" if best.storage_read_bps is None else (
        f" Its bw={bandwidth_text(best.storage_read_bps)} is a throttle the sweep put on the "
        "storage: no run with faster storage measured faster, so faster storage bought "
        "nothing in these runs.")
    surely = " beyond its interval" if d.unsure is not None else ""
    return (f"Advice: keep {option_label(best)}: no configuration of the what-if grid is "
            f"predicted faster{surely} than its measured {_epochs(d)} in "
            f"{number(best.span_s, '{:.2f}')} s ({number(best.stall_pct, '{:.0f}')}% "
            f"stalled, {_bound_text(best)}){over}.{_unsure_text(d)}{throttle} From the what-if "
            f"model fitted on the {a.fitted_runs} runs of this sweep.")


def _unsure_text(d: Decision) -> str:
    """The fastest prediction a kept configuration was not changed for: faster by its point,
    not at the slow end of its interval (`decision.surely_faster`)."""
    o = d.unsure
    if o is None:
        return ""
    return (f" The fastest prediction, {change_text(o, d.best_measured, d.loader)}, is "
            f"predicted {_rate_text(o, 'steady')}, {_epochs(d)} in {number(o.span_s, '{:.2f}')} s, but "
            f"{number(slow_span_s(o), '{:.2f}')} s at its interval's slow end: within the "
            "model's noise of the measured run, so measure it before changing.")


def _refused_text(a: Advice) -> str:
    d = a.decision
    best, pick = d.best_measured, d.prediction
    assert best is not None and pick is not None
    o = predicted_option(pick, d.epochs, d.cold)
    measured = (f"({number(best.span_s, '{:.2f}')} s measured for {_epochs(d)}, "
                f"{number(best.stall_pct, '{:.0f}')}% stalled, {_bound_text(best)})")
    change = change_text(o, best, d.loader)
    if d.refusal is Refusal.CPU_SHARING:
        # Not "keep": the measured configuration may be badly stalled; what to do is measure.
        workers = o.workers if o.workers is not None else d.workers
        return (f"Advice: measure the what-if model's pick before changing; until then keep "
                f"{option_label(best)} {measured}. The pick, {change}, is predicted "
                f"{_rate_text(o, 'steady')}, but it is not advised untested: the job's step "
                f"runs on the CPU and no cached run had {o.cpus_used} CPU(s) with {workers} "
                f"{worker_word(d.loader, workers)} per rank, so how the step shares those "
                "cores with its loader is taken from another count. One run settles it: "
                "`dsanalyze verify PREFIX` (or harness.py --verify) measures the pick against "
                "this prediction.")
    return (f"Advice: keep {option_label(best)} {measured}: the what-if model's pick, {change}, "
            "is not advised: the model failed its own check, "
            f"{error_text(d.error, d.beyond, a.validation_note)}. Measure more configurations "
            "(more CPU counts, worker counts or bandwidths) and ask again.")


def _unfitted_text(a: Advice) -> str:
    """No model, and no measured configuration met the budget. Where the fastest measured one
    missed it only because the table cannot tell its stall from 0 (a slow step or two widened
    the interval), what settles it is its runs again, as the table's verdict says, not the
    model's want of a prep-bound run."""
    unfitted = f"the what-if model could not be fitted on these runs ({failure_text(a.note)})"
    best = a.decision.best_measured
    if best is None or best.bound != Bound.NOISE.value:
        return f"Advice: none: {unfitted}."
    return (f"Advice: none yet: {option_label(best)} stalls "
            f"{number(best.stall_pct, '{:.0f}')}% of {_epochs(a.decision)}, but the table "
            "cannot tell its stall from 0 nor hold it under the "
            f"{a.decision.max_stall_pct:g}% budget (within noise): {REPEAT_HINT}; "
            f"{unfitted}.")


def advice_text(a: Advice) -> str:
    """The advice in one or a few sentences."""
    kind = a.decision.kind
    if kind is DecisionKind.MEASURED:
        return _measured_text(a)
    if a.note:  # no model
        return _unfitted_text(a)
    if kind is DecisionKind.CHANGE:
        return _change_text(a)
    if kind is DecisionKind.KEEP:
        return _keep_text(a)
    if kind is DecisionKind.REFUSED:
        return _refused_text(a)
    return "Advice: none: no configuration was measured with its stalls split."


NOT_RUN: dict[Unrunnable, Callable[[NotRun], str]] = {
    Unrunnable.NO_CHOICE: lambda r: "no recommendation to check"
                                    + (f": {failure_text(r.note)}" if r.note else ""),
    Unrunnable.ADVICE_FAILED: lambda r: f"no recommendation to check: the advice failed "
                                        f"({failure_text(r.note) if r.note else ''})",
    Unrunnable.MEASURED: lambda r: f"the recommended configuration was measured ({r.run_id}) "
                                   "over a network: verify runs local data only",
    Unrunnable.FASTER_STEP: lambda r: f"a step {r.gpu_speedup:g}x faster cannot be measured on "
                                      "this machine",
    Unrunnable.NODES: lambda r: "several nodes: verify from the nodes' own harnesses",
    Unrunnable.RANKS: lambda r: f"{r.nproc} ranks: measure them with harness.py "
                                f"--nproc_per_node {r.nproc}",
    Unrunnable.CPUS: lambda r: f"it needs {r.cpus} CPUs; the harness may use {r.machine_cpus} "
                               "here: measure it on a larger machine",
    Unrunnable.NO_WORKERS_FLAG: lambda r: f"the script's arguments name no workers flag "
                                          f"({', '.join(WORKER_FLAGS)}) that harness.py could "
                                          f"set: run it with {r.workers} workers yourself",
}


def not_run_text(reason: NotRun) -> str:
    """Why the check was not run, in words (`whatif.verification.NotRun`)."""
    return NOT_RUN[reason.why](reason)


def verify_text(plan: Any, result: Any = None, failed: str = "", superseded: str = "") -> str:
    """The closed loop in one line: `whatif.verification`'s plan and, when it ran, its
    `Verification` (predicted for the run as it ran, measured, the interval); a check made
    in place of a pick this machine cannot run says so first, and which pick it stands for;
    an earlier check's run older than the sweep's runs, set aside (`superseded`), last."""
    line = _verify_line(plan, result, failed)
    return (f"{line} An earlier check's run of it, older than the sweep's runs, was set "
            f"aside in {superseded}." if superseded else line)


def _verify_line(plan: Any, result: Any, failed: str) -> str:
    if not plan.runnable:
        return f"Verify: not run: {not_run_text(plan.reason)}."
    head = "Verify: "
    if plan.stands_for is not None:
        head = (f"Verify: the advice's pick, {option_label(plan.stands_for)} workers="
                f"{plan.stands_for.workers}, cannot run here ({not_run_text(plan.reason)}); "
                "checked here instead: the advice confined to this machine's CPUs, ")
    if plan.refused:
        head += "the pick not advised, measured to settle it: "
    if plan.kept is not None:
        head += "the fastest prediction, which the advice said to measure before changing: "
    if failed or result is None:
        return f"{head}the run of {option_label(plan.choice)} failed: {failed}."
    v = result
    again = v.where == REPEAT
    workers = f" workers={v.choice.workers}" if plan.sub_prefix and not again else ""
    where = (f" (in {v.where}/: measured again, a run the fit never saw)" if again else
             f" (in {v.where}/: the job's workers differ)" if v.where else "")
    return (f"{head}{option_label(v.choice)}{workers}, run {v.run_id}{where}: predicted "
            f"{number(v.predicted_sps)} samples/s for the run as it ran ({v.level:.0%} interval "
            f"{number(v.low_sps)}-{number(v.high_sps)}; the advice: {number(v.advised_sps)} "
            f"steady), measured {number(v.measured_sps)}: "
            f"{'inside' if v.inside else 'OUTSIDE'} the interval ({v.error_pct:+.1f}%)."
            + _kept_text(v)
            + ("" if v.conclusive else f" Not conclusive: the {note_text(v.disturbed)}: "
               "verify again when the machine is quiet."))


def _kept_text(v: Any) -> str:
    """The measured configuration the advice kept, against the prediction measured now."""
    k = v.kept
    if k is None or not k.rate_sps:
        return ""
    pct = 100 * (v.measured_sps / k.rate_sps - 1)
    return (f" The kept {option_label(k)} measured {number(k.rate_sps)} steady: this one ran "
            f"{abs(pct):.1f}% {'faster' if pct > 0 else 'slower'}.")
