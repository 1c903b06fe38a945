"""The terminal text of `dsanalyze whatif` and `dsanalyze validate`.

Pure formatting over what `analysis/whatif.py` returns: the model's parameters
with their provenance, the prediction grid, the recommendation in words, and
the validation of held-out runs. The CLI prints these lines.
"""

from __future__ import annotations

from typing import Any

from dsanalyze.config import format_bytes
from dsanalyze.report.text import bandwidth_text, cache_text, fixed_width


def _dash(x: float | None, fmt: str) -> str:
    return "-" if x is None else fmt.format(x)


def params_lines(model: Any) -> list[str]:
    """Each fitted parameter: value, how it was obtained, and the runs it came from."""
    lines = ["Model parameters (value, runs it came from, how)"]
    for p in model.params:
        if p.value is None:
            value = "-"
        elif p.unit in ("B", "B/s"):
            value = format_bytes(p.value) + ("/s" if p.unit == "B/s" else "")
        else:
            value = f"{p.value:.4g} {p.unit}"
        runs = ", ".join(p.runs[:3]) + (f" +{len(p.runs) - 3}" if len(p.runs) > 3 else "")
        lines.append(f"  {p.name:34s} {value:>14s}  {p.how}" + (f" [{runs}]" if runs else ""))
    return lines


def slack_lines(model: Any) -> list[str]:
    """What a prediction for a cache budget assumes about how well budgets are kept."""
    if not model.cache_slack_bytes:
        return []
    return [f"note: cache budgets are predicted with the {format_bytes(model.cache_slack_bytes)} "
            "of page cache the measured runs had beyond their budget (see cache_slack_bytes)"]


def whatif_lines(preds: list[Any], rec: Any | None) -> list[str]:
    """The prediction grid, the recommended row marked `<-`, then the recommendation."""
    rows = [[str(p.config.cpus), cache_text(p.config.cache_spec, p.config.cache_bytes),
             bandwidth_text(p.config.storage_read_bps, "as measured"),
             f"{p.config.gpu_speedup:g}x", str(p.nproc), str(p.config.workers),
             f"{p.rate_sps:.1f}", f"{p.epoch_s:.2f}", f"{p.compute_s:.2f}",
             f"{p.prep_stall_s:.2f}", f"{p.fetch_stall_s:.2f}", f"{p.stall_pct:.0f}%",
             _dash(p.hit_rate, "{:.2f}"), _dash(p.measured_sps, "{:.1f}"),
             _dash(p.epoch1_s, "{:.2f}"), _dash(p.measured_epoch1_sps, "{:.1f}"),
             "<-" if rec and p is rec.chosen else ""] for p in preds]
    lines = fixed_width(("cpus", "cache", "storage", "gpu", "ranks", "-j", "rate/s", "epoch s",
                         "compute s", "prep stall", "fetch stall", "stall", "hit", "measured/s",
                         "epoch1 s", "epoch1 meas/s", ""), rows)
    return lines + (["", recommendation_text(rec)] if rec is not None else [])


def recommendation_text(rec: Any) -> str:
    """The cheapest combination under the stall limit (or the least stalled), in one line."""
    pick = rec.chosen or rec.closest
    c = pick.config
    what = (f"{c.cpus} CPU{'s' if c.cpus > 1 else ''}, page cache "
            f"{cache_text(c.cache_spec, c.cache_bytes)}, storage "
            f"{bandwidth_text(c.storage_read_bps, 'as measured')}, {c.workers} DataLoader "
            "worker(s) per rank")
    numbers = (f"{pick.rate_sps:.1f} samples/s, an epoch in {pick.epoch_s:.1f} s (prep stall "
               f"{pick.prep_stall_s:.1f} s, fetch stall {pick.fetch_stall_s:.1f} s)")
    if rec.chosen is not None:
        text = (f"recommendation: {what} is the cheapest combination that keeps stalls at "
                f"{pick.stall_pct:.1f}% of the epoch (limit {rec.max_stall_pct:g}%): {numbers}")
    else:
        text = (f"recommendation: no combination brings stalls under {rec.max_stall_pct:g}%; "
                f"the least stalled is {what}, at {pick.stall_pct:.1f}%: {numbers}; {rec.hint}")
    if rec.speedup is not None:
        text += (f"; predicted {rec.speedup:.2f}x the measured configuration {rec.baseline_run} "
                 f"({rec.baseline_sps:.1f} samples/s)")
    return text


def validation_lines(val: Any, cache_checks: list[Any]) -> list[str]:
    """Held-out runs measured against predicted, the cache simulator against the disk
    runs, and the error figures last."""
    lines = ["", f"rule: {val.rule}", f"fitted on: {', '.join(val.fit_runs)}", ""]
    rows = [[c.run_id, f"{c.measured_sps:.1f}", f"{c.predicted_sps:.1f}", f"{c.error_pct:+.1f}%",
             _dash(c.measured_epoch1_sps, "{:.1f}"), _dash(c.predicted_epoch1_sps, "{:.1f}"),
             "none" if c.cache_bytes is None else
             f"{format_bytes(c.cache_bytes)} ({c.cache_source})"] for c in val.checks]
    lines += fixed_width(("run", "measured/s", "predicted/s", "error", "epoch1 meas/s",
                          "epoch1 pred/s", "page cache"), rows)
    if cache_checks:
        lines += ["", "cache simulator against the disk runs (bytes read from storage; dataset "
                      "resident at the end)"]
        lines += fixed_width(("run", "cache", "read sim", "read measured", "resident sim",
                              "resident measured"),
                             [[c.run_id, format_bytes(c.cache_bytes),
                               format_bytes(c.predicted_read_bytes),
                               format_bytes(c.measured_read_bytes),
                               format_bytes(c.predicted_resident_bytes),
                               format_bytes(c.measured_resident_bytes)] for c in cache_checks])
    lines += ["", f"median absolute error {val.median_abs_error_pct:.1f}%, maximum "
                  f"{val.max_abs_error_pct:.1f}% over {len(val.checks)} held-out run(s)"]
    return lines
