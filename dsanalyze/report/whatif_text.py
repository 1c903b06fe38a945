"""The terminal text of `dsanalyze whatif` and `dsanalyze validate`.

Pure formatting over what `whatif/api.py` returns: the model's parameters
with their provenance, the prediction grid, the recommendation in words, and
the validation of held-out runs. The CLI prints these lines.
"""

from __future__ import annotations

from typing import Any

from dsanalyze.config import format_bytes
from dsanalyze.report.assumptions import assumption_text
from dsanalyze.report.params import how_text
from dsanalyze.report.text import bandwidth_text, cache_text, fixed_width, number
from dsanalyze.whatif.documents import Unmade, UnmadeWhy
from dsanalyze.whatif.validation import EXTRAPOLATION, LOO, split_figures

PARAMS_TITLE = "Model parameters (value, runs it came from, how)"


def _paragraph(*lines: str) -> list[str]:
    """A blank line, then `lines`: one paragraph of the terminal text."""
    return list(("", *lines))


def _dash(x: float | None, fmt: str) -> str:
    return "-" if x is None else number(x, fmt)  # never "-0.00"


def params_lines(model: Any) -> list[str]:
    """Each fitted parameter: value, how it was obtained, and the runs it came from."""
    lines = [PARAMS_TITLE]
    for p in model.params:
        if p.value is None:
            value = "-"
        elif p.unit in ("B", "B/s"):
            value = format_bytes(p.value) + ("/s" if p.unit == "B/s" else "")
        else:
            value = f"{p.value:.4g} {p.unit}"
        runs = ", ".join(p.runs[:3]) + (f" +{len(p.runs) - 3}" if len(p.runs) > 3 else "")
        lines.append(f"  {p.name:34s} {value:>14s}  {how_text(p.how)}" + (f" [{runs}]" if runs else ""))
    return lines


def slack_lines(model: Any) -> list[str]:
    """What a prediction for a cache budget assumes about how well budgets are kept."""
    if not model.cache_slack_bytes:
        return []
    return [f"note: cache budgets are predicted with the {format_bytes(model.cache_slack_bytes)} "
            "of page cache the measured runs had beyond their budget (see cache_slack_bytes)"]


def assumptions(model: Any) -> str:
    """What every prediction assumes, the step's CPU as the job ran it."""
    step = ("the step runs on the CPU (the script's device), in each rank's main process at "
            "its measured time per CPU count, sharing the cores with the workers; other CPU "
            "counts are not predicted" if model.step_on_cpu else
            "the step takes no CPU (sim or GPU device)")
    return ("the model assumes: a worker reads a sample, then decodes it (readahead overlaps the "
            f"two); batches arrive in order from a prefetch queue of {model.prefetch_factor} per "
            "worker that drains at each epoch end; every process needing CPU shares the cores "
            f"equally (a worker at most one); {step}; storage bandwidth is shared by the "
            "readers, each read after the device's per-request latency; the page cache behaves "
            "as Linux's two-list LRU at the budget plus the fitted slack"
            + ("; the files are read in the same order every epoch (a loader that does not "
               "shuffle, or DALI's file reader without shuffle_after_epoch), so a page cache "
               "smaller than the dataset keeps none of them for the next epoch"
               if model.same_order else ""))


def rate_text(p: Any) -> str:
    """"331 ± 14": the rate and the half-width of its interval."""
    return f"{p.rate_sps:.1f} ± {(p.rate_sps_high - p.rate_sps_low) / 2:.1f}"


def untested_lines(preds: list[Any]) -> list[str]:
    """Each assumption some prediction rests on that no run tested, once."""
    seen = list(dict.fromkeys(assumption_text(u) for p in preds for u in p.untested))
    return _paragraph("untested by any run (predictions rest on these assumptions):",
                      *(f"  - {u}" for u in seen)) if seen else []


def range_text(caches: Any) -> str:
    """`0% (0B) to unlimited`: the budgets a folded row covers (`whatif.fold.CacheRange`)."""
    low, high = caches.low, caches.high
    text = cache_text(low.spec, low.cache_bytes)
    return text if low == high else f"{text} to {cache_text(high.spec, high.cache_bytes)}"


def whatif_lines(preds: list[Any], advice: Any | None, level: float = 0.9) -> list[str]:
    """The prediction grid (budgets that do not change a prediction folded into one row,
    `whatif.fold`), the recommended row marked `<-`, the untested assumptions, then the
    decision in the advice's words (`advice`: a `whatif.advice.Advice`, or None)."""
    from dsanalyze.report.advice import advice_text
    from dsanalyze.whatif.fold import fold

    if advice is not None and advice.shown:
        preds = advice.shown  # with the configurations the advice names that the grid lacks
    marked = [p for p, row in zip(preds, advice.rows) if row.recommended] if advice else []
    grid = fold(preds)
    rows = [_grid_row(r, marked) for r in grid]
    lines = fixed_width(("cpus", "cache", "storage", "gpu", "ranks", "-j",
                         f"rate/s ({level:.0%})", "epoch s", "compute s", "prep stall",
                         "fetch stall", "stall", "hit", "measured/s", "epoch1 s",
                         "epoch1 meas/s", ""), rows)
    folded = len(preds) - len(grid)
    if folded:
        lines.append(f"note: {folded} row(s) folded: a row with a cache range stands for every "
                     "budget in it, the page cache not changing its prediction")
    lines += untested_lines(preds)
    return lines + (_paragraph("recommendation: " + advice_text(advice)) if advice else [])


def _hits_text(hits: tuple[float | None, ...]) -> str:
    """`0.45`, or over a folded row's budgets `0.00-1.00`."""
    known = [h for h in hits if h is not None]
    lo, hi = _dash(min(known, default=None), "{:.2f}"), _dash(max(known, default=None), "{:.2f}")
    return lo if lo == hi else f"{lo}-{hi}"


def _grid_row(row: Any, marked: list[Any]) -> list[str]:
    p = row.prediction
    return [str(p.config.cpus), range_text(row.caches),
            bandwidth_text(p.config.storage_read_bps, "device"),
            f"{p.config.gpu_speedup:g}x", str(p.nproc), str(p.config.workers),
            rate_text(p), number(p.epoch_s, "{:.2f}"), number(p.compute_s, "{:.2f}"),
            number(p.prep_stall_s, "{:.2f}"), number(p.fetch_stall_s, "{:.2f}"),
            number(p.stall_pct, "{:.0f}%"),
            _hits_text(row.hit_rates), _dash(p.measured_sps, "{:.1f}"),
            _dash(p.epoch1_s, "{:.2f}"), _dash(p.measured_epoch1_sps, "{:.1f}"),
            "<-" if any(row.covers(p) for p in marked) else ""]


RULES = {
    LOO: "each configuration held out in turn, with its repeats: each disk configuration (and "
         "each cached one of a job other than the base one) predicted by a model fitted on "
         "every other run",
    EXTRAPOLATION: "fitted on the base job's runs (one rank, the slowest step) at the fewest "
                   "CPUs; every other disk configuration (and cached one of another job) "
                   "predicted",
}


def unmade_text(u: Unmade) -> str:
    """Why a validation split was not made, in words."""
    if u.why is UnmadeWhy.ONE_CONFIG:
        return ("not made: every run has the fewest CPUs, one rank and the slowest step; "
                "measure more CPUs (harness.py --cpus 1,2) to test extrapolation")
    if u.why is UnmadeWhy.REFUSED:
        return f"not made: {u.error}"
    return u.error if u.why is UnmadeWhy.SAID else "not made"


def _split_lines(split: Any) -> list[str]:
    lines = _paragraph(f"{split.name}: {RULES.get(split.name, '')}")
    if split.fit_runs:
        lines.append(f"fitted on: {', '.join(split.fit_runs)}")
    if split.unmade:
        return lines + [unmade_text(split.unmade)]
    rows = [[c.run_id + (f" (mean of {c.repeats})" if c.repeats > 1 else ""), f"{c.measured_sps:.1f}", f"{c.predicted_sps:.1f}",
             f"{c.low_sps:.1f}-{c.high_sps:.1f}", "yes" if c.covered else "NO",
             f"{c.error_pct:+.1f}%", _dash(c.measured_epoch1_sps, "{:.1f}"),
             _dash(c.predicted_epoch1_sps, "{:.1f}"),
             "none" if c.cache_bytes is None else format_bytes(c.cache_bytes),
             str(len(c.untested))] for c in split.checks]
    return lines + fixed_width(("run", "measured/s", "predicted/s", "interval", "inside",
                                "error", "epoch1 meas/s", "epoch1 pred/s", "cache (budget+slack)",
                                "untested"), rows)


def validation_lines(val: Any, cache_checks: list[Any]) -> list[str]:
    """Both splits' held-out runs measured against predicted, the cache simulator against
    the disk runs, and the error and coverage figures last (`validation.split_summary`)."""
    lines: list[str] = []
    for split in val.splits:
        lines += _split_lines(split)
    if cache_checks:
        lines += _paragraph("cache simulator against the disk runs (bytes read from storage; "
                            "dataset resident at the end; a diagnosis, no prediction reads these)")
        lines += fixed_width(("run", "cache", "read sim", "read measured", "resident sim",
                              "resident measured"),
                             [[c.run_id, format_bytes(c.cache_bytes),
                               format_bytes(c.predicted_read_bytes),
                               format_bytes(c.measured_read_bytes),
                               format_bytes(c.predicted_resident_bytes),
                               format_bytes(c.measured_resident_bytes)] for c in cache_checks])
    lines.append("")
    for split in val.splits:
        if split.checks:
            f = split_figures(split.name, split.checks)
            lines.append(f"{split.name}: median absolute error {f.median_abs_error_pct:.1f}%, "
                         f"maximum {f.max_abs_error_pct:.1f}% over {f.held_out} held-out "
                         f"configuration(s); {f.coverage:.0%} inside their {f.nominal:.0%} interval")
    f = split_figures("both splits", val.checks)
    lines.append(f"both splits: median absolute error {f.median_abs_error_pct:.1f}%, maximum "
                 f"{f.max_abs_error_pct:.1f}% over {f.held_out} held-out configuration(s); coverage "
                 f"{f.coverage:.0%} (nominal {f.nominal:.0%})")
    return lines


def answer_text(model: Any, preds: list[Any], advice: Any | None) -> str:
    """What `dsanalyze whatif` prints: the parameters, their slack, the assumptions, the grid."""
    return "\n".join([*params_lines(model), *slack_lines(model), "", assumptions(model), "",
                      *whatif_lines(preds, advice)])


def validation_text(val: Any, cache_checks: list[Any]) -> str:
    """What `dsanalyze validate` prints: the parameters, then `validation_lines`."""
    return "\n".join([*params_lines(val.model), *validation_lines(val, cache_checks)])
