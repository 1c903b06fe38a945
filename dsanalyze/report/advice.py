"""The advice in words: one or two sentences, after the table and at the head of the report's
What-if section.

    advice_text(advise(runs, sizes))
    -> "Advice: give the job 4 CPUs (2 measured): predicted 2 epochs in 1.9 s, 3% stalled,
        first epoch included, against 3.4 s measured at cpus=2 cache=unlimited bw=unthrottled
        (41% stalled). From the what-if model fitted on the 6 runs just made; its median
        error on held-out runs: 4.1%."

Every number is the `Advice` value's (`whatif/advice.py`).
"""

from __future__ import annotations

from dsanalyze.report.text import bandwidth_text, cache_text, number
from dsanalyze.whatif.advice import Advice, AdviceKind, Option


def option_label(o: Option) -> str:
    """`cpus=2 cache=unlimited bw=8M/s`, as the table's first column."""
    return (f"cpus={'all' if o.cpus is None else o.cpus} "
            f"cache={cache_text(o.cache_spec, o.cache_bytes)} "
            f"bw={bandwidth_text(o.storage_read_bps)}")


def change_text(choice: Option, base: Option | None) -> str:
    """What differs from `base`, in words: `4 CPUs (2 measured), cache 50% (25M) (unlimited)`."""
    parts = []
    if base is None or choice.cpus != base.cpus:
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
    if base is not None and choice.workers != base.workers:
        parts.append(f"{choice.workers} DataLoader workers per rank ({base.workers} measured)")
    return ", ".join(parts) or option_label(choice)


def _epochs(n: int) -> str:
    return "1 epoch (cold)" if n == 1 else f"{n} epochs"


def _first_included(a: Advice) -> str:
    return ", first epoch included" if a.epochs > 1 else ""


def _model_text(a: Advice) -> str:
    error = f"its median error on held-out runs: {number(a.validation_error_pct)}%" \
        if a.validation_error_pct is not None else \
        f"not validated ({a.validation_note or 'no run held out'})"
    return f"From the what-if model fitted on the {a.fitted_runs} runs of this sweep; {error}."


def advice_text(a: Advice) -> str:
    """The advice in one or two sentences."""
    best = a.best_measured
    if a.kind is AdviceKind.NO_CHANGE and a.choice is not None:
        return (f"Advice: no change needed: {option_label(a.choice)} stalls "
                f"{number(a.choice.stall_pct, '{:.0f}')}% of {_epochs(a.epochs)}"
                f"{_first_included(a)}; the job is compute-bound there.")
    if a.kind is AdviceKind.NO_MODEL or best is None:
        return f"Advice: none: the what-if model could not be fitted on these runs ({a.note})."
    if a.kind is AdviceKind.KEEP or a.choice is None:
        return (f"Advice: keep {option_label(best)}: no configuration of the what-if grid is "
                f"predicted faster than its measured {_epochs(a.epochs)} in "
                f"{number(best.span_s, '{:.2f}')} s ({number(best.stall_pct, '{:.0f}')}% "
                f"stalled){' (' + a.note + ')' if a.note else ''}. {_model_text(a)}")
    c = a.choice
    return (f"Advice: give the job {change_text(c, best)}: predicted {_epochs(a.epochs)} in "
            f"{number(c.span_s, '{:.2f}')} s, {number(c.stall_pct, '{:.0f}')}% stalled"
            f"{_first_included(a)} ({number(c.rate_sps)} samples/s steady), against "
            f"{number(best.span_s, '{:.2f}')} s measured at {option_label(best)} "
            f"({number(best.stall_pct, '{:.0f}')}% stalled). {_model_text(a)}")
