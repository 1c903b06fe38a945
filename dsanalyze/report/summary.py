"""The stall table for the terminal, and the report (markdown and HTML).

Pure formatting over the typed summary (`analysis.summary.summarize`) and the
what-if documents (`whatif.documents`): every number shown is read from them, none is
computed here. The verdicts are worded in `report/verdicts.py`; their thresholds
(input-bound above 5% of the time stalled, highly above 20%) live with the
classification in `analysis/stalls.py`.
"""

from __future__ import annotations

from collections.abc import Sequence

from dsanalyze.analysis.jobrun import JobAsRun
from dsanalyze.analysis.summary import ConfigSummary, Summary
from dsanalyze.config import Job, format_bytes
from dsanalyze.report.document import Block, render_markdown
from dsanalyze.report.notes import notes
from dsanalyze.report.text import (
    config_label,
    enforcement_text,
    fixed_width,
    knob_text,
    number,
    storage_word,
)
from dsanalyze.report.verdicts import cold_text, verdict_text
from dsanalyze.whatif.documents import ValidationDoc

COLUMNS = ("config", "synthetic/s", "cached/s", "disk/s", "epoch s", "compute s",
           "CPUs busy", "prep stall", "fetch stall", "verdict")
# what the "CPUs busy" column holds, said under the table
CPUS_BUSY_TEXT = ("CPUs busy: the cores the cached run's processes (main process and workers) "
                  "kept busy in its steady window, of the CPUs it was given")


def columns(summary: Summary) -> list[str]:
    """The table's header: `remote/s` for the third mode where the data is remote."""
    return [f"{storage_word(summary)}/s" if c == "disk/s" else c for c in COLUMNS]


def _num(x: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else number(x, fmt)


def _stall(cfg: ConfigSummary, kind: str) -> str:
    """`1.2s 12.3% ±2.1` for a likely stall; `within noise (±2.1%)` when its interval holds 0."""
    s, pct = getattr(cfg, f"{kind}_stall_s"), getattr(cfg, f"{kind}_stall_pct")
    if s is None:
        return "-"
    significance = getattr(cfg, f"{kind}_stall_significance")
    low, high = getattr(cfg, f"{kind}_stall_pct_low"), getattr(cfg, f"{kind}_stall_pct_high")
    if significance is None or low is None or high is None:  # written before intervals
        return _plain_stall(s, pct)
    half = (high - low) / 2
    if significance == "within_noise":
        return f"within noise (±{half:.1f}%)"
    if significance == "inverted":  # the slower mode measured faster, beyond noise: see the notes
        return f"inverted (±{half:.1f}%)"
    if significance == "unread":  # the disk run's window ran from the page cache: see the notes
        return "0 (page cache)"
    if significance == "suspect":  # ... beyond both rates' intervals: the note says what it suspects
        return "suspect (see note)"
    return f"{number(s)}s {number(pct)}% ±{half:.1f}"


def _plain_stall(s: float | None, pct: float | None) -> str:
    return "-" if s is None else f"{number(s)}s {number(pct, '{:.0f}')}%"


COLD_LABEL = "  first epoch (cold)"


def _verdict(cfg: ConfigSummary) -> str:
    """The steady state's verdict, said to be the steady state's when a cold epoch follows."""
    text = verdict_text(cfg.verdict)
    return f"steady: {text}" if cfg.cold_epoch else text


def _cold_rows(cfg: ConfigSummary) -> list[list[str]]:
    """A second line under a configuration whose disk run had a cold first epoch."""
    cold = cfg.cold_epoch
    if not cold:
        return []
    return [[COLD_LABEL, "", "", _num(cold.rate_sps), _num(cold.epoch_s),
             _num(cold.compute_s), "", _plain_stall(cold.prep_stall_s, cold.prep_stall_pct),
             _plain_stall(cold.fetch_stall_s, cold.fetch_stall_pct),
             f"first epoch: {cold_text(cold)}"]]


def _cores_busy(cfg: ConfigSummary) -> str:
    """`1.34/2`: the cores the cached run kept busy, of its CPUs (`-` where not counted)."""
    entry = cfg.modes.get("cached")
    if entry is None or entry.cores_busy is None or entry.cpus is None:
        return "-"
    return f"{entry.cores_busy:.2f}/{entry.cpus}"


def _mode_rate(cfg: ConfigSummary, mode: str) -> float | None:
    entry = cfg.modes.get(mode)
    return entry.rate_sps if entry else None


def table_rows(summary: Summary) -> list[list[str]]:
    rows = []
    for cfg in summary.configs:
        rates = [_num(_mode_rate(cfg, m)) for m in ("synthetic", "cached", "disk")]
        rows.append([config_label(cfg), *rates, _num(cfg.total_s), _num(cfg.compute_s),
                     _cores_busy(cfg), _stall(cfg, "prep"), _stall(cfg, "fetch"),
                     _verdict(cfg)])
        rows += _cold_rows(cfg)
    return rows


def _device_text(summary: Summary) -> str:
    """`sim (40 ms per step)`, or the device a user script used (`cpu`, `cuda`)."""
    job = summary.job
    device = summary.measured.device or (job.device if job else "")
    if job is not None and device == "sim" and not job.script:
        return f"sim ({job.sim_step_ms:g} ms per step)"
    return device


def job_text(job: JobAsRun) -> str:
    """`2 workers per rank, batch 16 per rank, prefetch 2, 1 rank(s), device cpu`."""
    extras = [w for w, on in (("pinned memory", job.pin_memory),
                              ("persistent workers", job.persistent_workers)) if on]
    return (f"{job.loader} loader, {job.workers} workers per rank, batch {job.batch_size} per "
            f"rank, prefetch {job.prefetch_factor}, {job.ranks} rank(s)"
            + "".join(f", {e}" for e in extras))


def render_table(summary: Summary) -> str:
    """Fixed-width text table with a header, then notes."""
    n = summary.samples_per_epoch
    device = f" on device {_device_text(summary)}" if summary.job else ""
    lines = [f"Stall breakdown per epoch ({n} samples){device}; rates in samples/s; CPUs busy: "
             "cores the cached run kept busy, of its CPUs" if n else
             "Stall breakdown", *fixed_width(columns(summary), table_rows(summary),
                                             left=frozenset({0, len(COLUMNS) - 1}))]
    lines += node_lines(summary)
    lines += [f"note: {n_}" for n_ in notes(summary)]
    return "\n".join(lines)


def node_lines(summary: Summary) -> list[str]:
    """Per node, for each multi-node run: its wait share, and whose loader holds the job."""
    out = []
    for run in summary.nodes:
        parts = ", ".join(f"node {n.node} waits {_num(n.wait_pct, '{:.0f}')}%" for n in run.nodes)
        held = run.holding_node
        tail = (f": node {held}'s loader holds the job" if held is not None
                else ": the nodes wait alike")
        out.append(f"nodes, {run.run_id}: {parts}{tail}")
    return out


def render_markdown_table(summary: Summary) -> str:
    return render_markdown([("table", columns(summary), table_rows(summary))]).strip()


# ---- the report's content (blocks rendered by `report/document.py`) ---------------------------

FIGURE_CAPTIONS = {  # only what every figure of its kind draws: the legends name the rest
    "stall_breakdown": "Seconds per epoch per configuration, each bar at the table's epoch time: "
                       "compute, prep stall and fetch stall, with their intervals, labelled "
                       "with each stall's share of the epoch as the table gives it.",
    "whatif_heatmap": "Predicted throughput over CPUs and page cache, a panel per storage "
                      "bandwidth, each cell with the half-width of its prediction interval.",
    "whatif_curves": "Predicted throughput against CPUs and against cache (lines, with their "
                     "prediction intervals), a row per storage bandwidth; lines alike are drawn "
                     "as one.",
    "validation": "The what-if model's predictions of held-out runs, by split, against their "
                  "measurements, with each prediction's interval.",
    "timeline": "Per rank, every iteration's wait for data and compute, in wall time.",
    "transform_times": "Worker time per sample of each preprocessing step, in pipeline order.",
}


def _job_lines(summary: Summary) -> list[str]:
    job, ds = summary.job, summary.dataset
    lines = []
    if job:
        what = f"script `{job.script}`" if job.script else \
            f"built-in image classification ({job.arch})"
        lines += [f"**Job**: {what}, {_knobs_text(summary, job)}, device "
                  f"{_device_text(summary)}",
                  f"**Measured**: {_window_text(summary, job)} per run after {job.warmup} "
                  "warm-up iteration(s)"]
    if ds:
        lines.append(f"**Dataset**: {ds.num_files} files, {format_bytes(ds.total_bytes)}, "
                     f"mean {format_bytes(ds.mean_file_bytes)} per file, `{ds.root}`")
    return lines


def _knobs_text(summary: Summary, job: Job) -> str:
    """The loader's knobs as the job ran them (a script's own), else as the harness asked."""
    if summary.measured.job_as_run is not None:
        return job_text(summary.measured.job_as_run)
    return (f"{job.loader} loader, {job.workers} workers per rank, batch {job.batch_size} per "
            f"rank, {job.nproc_per_node * job.nnodes} rank(s)")


def _window_text(summary: Summary, job: Job) -> str:
    """What each run measured: as asked, or as far as the script's own length went."""
    iters = summary.measured.iters_per_run
    counted = f"{iters} iterations" if iters is not None else "iterations"
    if summary.measured.short_runs:
        asked = f"{job.epochs} epoch(s)" if job.epochs else f"{job.iters} iterations"
        return f"{counted} ({asked} asked; the script ended first)"
    if job.epochs:
        return f"{job.epochs} epoch(s)"
    if job.iters:
        return f"{job.iters} iterations"
    return f"{counted}, the script's whole length" if iters is not None else \
        "the script's whole length"


def _grid_lines(summary: Summary) -> list[str]:
    configs = summary.configs
    lines = []
    for knob, name in (("cpus", "CPUs"), ("cache", "Page cache"), ("bw", "Storage")):
        seen: list[str] = []
        for cfg in configs:
            text = knob_text(knob, cfg)
            if text not in seen:
                seen.append(text)
        if seen:
            lines.append(f"**{name}**: " + ", ".join(seen))
    how: dict[str, list[str]] = {}
    for cfg in configs:
        for knob, value in cfg.enforced.items():
            text = enforcement_text(knob, value)
            if text not in how.setdefault(knob, []):
                how[knob].append(text)
    lines += [f"**Enforced** {knob.replace('_', ' ')}: {'; '.join(v)}" for knob, v in how.items()]
    return lines


def _verdict_lines(summary: Summary) -> list[str]:
    out = []
    for cfg in summary.configs:
        line = f"**{config_label(cfg)}**: {_verdict(cfg)}"
        disk, cold = cfg.modes.get("disk"), cfg.cold_epoch
        if cold and disk is not None and disk.time_s is not None:
            line += (f"; first epoch: {cold_text(cold)} (the first (cold) epoch took "
                     f"{cold.epoch_s:.2f} s, the steady-state epochs {disk.time_s:.2f} s)")
        out.append(line)
    return out


def _headline(summary: Summary) -> list[Block]:
    """The most and the least stalled configurations, when there are several."""
    rated = [c for c in summary.configs
             if c.prep_stall_pct is not None or c.fetch_stall_pct is not None]
    if len(rated) < 2:
        return []

    def stalled(cfg: ConfigSummary) -> float:
        return (cfg.prep_stall_pct or 0.0) + (cfg.fetch_stall_pct or 0.0)
    most, least = max(rated, key=stalled), min(rated, key=stalled)
    return [("p", f"Most stalled: **{config_label(most)}**, {verdict_text(most.verdict)}. "
                  f"Least stalled: **{config_label(least)}**, {verdict_text(least.verdict)}.")]


def _whatif_blocks(recommendation: list[str] | None, validation: ValidationDoc | None,
                   why_not: str | None) -> list[Block]:
    blocks: list[Block] = [("h2", "What-if")]
    if recommendation:
        blocks.append(("ul", recommendation))
    if validation:
        blocks.append(("p", f"Model error on {len(validation.runs)} held-out run(s): median "
                            f"{validation.median_abs_error_pct:.1f}%, maximum "
                            f"{validation.max_abs_error_pct:.1f}% (absolute)."))
    if why_not:
        blocks.append(("p", why_not))
    return blocks


def report_blocks(summary: Summary, figures: Sequence[str] = (),
                  recommendation: list[str] | None = None,
                  validation: ValidationDoc | None = None,
                  whatif_note: str | None = None, title: str = "Data-stall report") -> list[Block]:
    """The report's content: configuration, stall table, verdicts, what-if, figures.

    `figures` are image file names (PNG) beside the report; `recommendation`
    the what-if model's answer in words, one line each; `whatif_note` why the
    what-if section is missing or partial.
    """
    n = summary.samples_per_epoch
    blocks: list[Block] = [("h1", title), ("h2", "Configuration"),
                           ("ul", _job_lines(summary) + _grid_lines(summary)),
                           ("h2", "Stall breakdown"),
                           ("p", f"Per epoch of {n} samples: rates in samples/s, times in "
                                 "seconds; a stall's percentage is its share of the epoch. "
                                 f"{CPUS_BUSY_TEXT}."),
                           ("table", columns(summary), table_rows(summary))]
    if notes(summary):
        blocks.append(("ul", [f"note: {line}" for line in notes(summary)]))
    blocks += [("h2", "Verdict"), *_headline(summary), ("ul", _verdict_lines(summary))]
    blocks += _whatif_blocks(recommendation, validation, whatif_note)
    if figures:
        blocks.append(("h2", "Figures"))
        blocks += [("img", f, FIGURE_CAPTIONS.get(f.rsplit(".", 1)[0], "")) for f in figures]
    return blocks
