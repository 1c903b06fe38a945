"""The figures: stall breakdown, timeline, per-transform times, and `figures` for a prefix.

Each `Figure` is built with matplotlib's object-oriented API on the Agg
backend (no pyplot state, no display), from the values passed in: the
`summary.json` document, the runs, the what-if documents. Every number drawn
is read from those; the only arithmetic here is layout. `figures` gathers
every figure of a prefix, the what-if ones of `report/whatif_plots.py` too;
`app.plot` saves them as PNG and SVG (`save`).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

from dsanalyze.analysis import runrate  # noqa: E402
from dsanalyze.analysis import transforms as step_timing  # noqa: E402
from dsanalyze.analysis.summary import Summary  # noqa: E402
from dsanalyze.analysis.transforms import StepTime  # noqa: E402
from dsanalyze.records import RunResult  # noqa: E402
from dsanalyze.report import probe_plots, stall_figure, trace, validation_figure, whatif_plots  # noqa: E402
from dsanalyze.report.whatif_docs import WhatIfDocs  # noqa: E402

# Okabe-Ito colours (stall_figure.py): distinguishable with common colour-vision deficiencies.
COLORS = stall_figure.COLORS
PREP_COLOR = stall_figure.PREP_COLOR
WAIT_COLOR, COMPUTE_COLOR = "#D55E00", "#999999"
DPI = 150
FORMATS = ("png", "svg")


# ---- stall breakdown: report/stall_figure.py ---------------------------------------------

stall_breakdown, ordered_configs = stall_figure.stall_breakdown, stall_figure.ordered_configs


# ---- timeline --------------------------------------------------------------------------------

def timeline(run: RunResult) -> Figure:
    """Per rank, each iteration's data wait and compute against wall time (s from start).

    Warm-up iterations (discarded by the analysis) are drawn pale; dotted
    vertical lines mark where rank 0 starts an epoch (counted from 1).
    """
    rows = [(rank, trace.iteration_spans(rank)) for rank in run.ranks]
    t0 = min(r.start_unix_s for r in run.ranks)
    fig = Figure(figsize=(10, 1.9 + 0.55 * len(rows)), layout="constrained")
    ax = fig.subplots()
    for y, (rank, spans) in enumerate(rows):
        for name, color in ((trace.WAIT, WAIT_COLOR), (trace.COMPUTE, COMPUTE_COLOR)):
            for warm in (False, True):
                bars = [(rank.start_unix_s - t0 + s.start_s, s.dur_s) for s in spans
                        if s.name == name and s.warmup == warm]
                if bars:
                    ax.broken_barh(bars, (y - 0.35, 0.7), facecolors=color,
                                   alpha=0.35 if warm else 1.0, gid=f"{name}|{warm}|{rank.rank}",
                                   edgecolor="white", linewidth=0.6 if len(spans) < 600 else 0,
                                   label=(f"{name} (warm-up)" if warm else name) if y == 0
                                   else None)
    rank0, first = rows[0] if rows else (None, [])
    for e in sorted({s.epoch for s in first})[1:]:
        start = rank0.start_unix_s - t0 + next(s.start_s for s in first if s.epoch == e)
        ax.axvline(start, color="black", linewidth=0.8, linestyle=":")
        ax.annotate(f"epoch {e + 1}", (start, len(rows) - 0.5), xytext=(2, 0),
                    textcoords="offset points", fontsize=8, va="bottom")
    ax.set_yticks(range(len(rows)), [f"rank {r.rank}" for r, _ in rows])
    ax.set_ylim(-0.6, len(rows) - 0.3)
    ax.set_xlabel("seconds since the first iteration")
    rate = runrate.run_rate(run)
    waiting = f"{rate.wait_pct:.0f}% of measured time waiting for data" \
        if rate.wait_pct is not None else "no measured iterations"
    if rate.epoch1_s is not None:
        waiting += f"\n(measured: the epochs after the first, cold one of {rate.epoch1_s:.1f} s)"
    ax.set_title(f"Timeline of {run.run_id}: {waiting}", fontsize=11)
    fig.legend(loc="outside lower center", ncol=4, frameon=False, fontsize=9)
    return fig


# ---- per-transform times ---------------------------------------------------------------------

def transform_times(rows: list[StepTime], run_id: str = "") -> Figure:
    """Worker time per sample of each preprocessing step (ms), in pipeline order.

    `rows`: a run's step table (`analysis.transforms.step_times`): read+decode,
    then each step of the training pipeline. The bars add up to the worker
    time one sample costs in these steps; the title gives that sum.
    """
    labels = [r.name if r.stage in ("loader", "transform") else f"{r.stage}: {r.name}"
              for r in rows]
    ms = [r.mean_s_per_sample * 1e3 for r in rows]
    total = sum(ms)
    fig = Figure(figsize=(7, 1.5 + 0.4 * len(rows)), layout="constrained")
    ax = fig.subplots()
    bars = ax.barh(range(len(rows)), ms, color=PREP_COLOR, gid="transform_times")
    for bar, v in zip(bars, ms):
        ax.annotate(f"{v:.2f} ms ({100 * v / total:.0f}%)" if total else f"{v:.2f} ms",
                    (bar.get_width(), bar.get_y() + bar.get_height() / 2), xytext=(3, 0),
                    textcoords="offset points", va="center", fontsize=8)
    ax.set_yticks(range(len(rows)), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, max(ms, default=1) * 1.3)
    ax.set_xlabel("worker time per sample (ms)")
    where = f" of {run_id}" if run_id else ""
    ax.set_title(f"Preprocessing steps{where}: {total:.2f} ms per sample", fontsize=11)
    ax.grid(axis="x", alpha=0.3)
    return fig


def transform_run(runs: list[RunResult]) -> RunResult | None:
    """The run whose step table to draw: a cached run (no I/O in read+decode), else any."""
    timed = [r for r in runs if r.ok and step_timing.step_times(r)]
    order = {"cached": 0, "loader": 1, "disk": 2}
    return min(timed, key=lambda r: (order.get(r.mode.value, 3), r.run_id), default=None)


# ---- all figures of a prefix -----------------------------------------------------------------

def save(fig: Figure, prefix: str | Path, name: str) -> list[Path]:
    """Write `PREFIX/<name>.png` and `.svg`; returns the paths."""
    paths = []
    for fmt in FORMATS:
        path = Path(prefix) / f"{name}.{fmt}"
        fig.savefig(path, dpi=DPI, format=fmt)
        paths.append(path)
    return paths


def timeline_run(summary: Summary, runs: list[RunResult]) -> RunResult | None:
    """The completed run that waited most for data (by the summary's `wait_pct`)."""
    rated = [r for r in summary.runs if r.wait_pct is not None]
    if not rated:
        return None
    worst = max(rated, key=lambda r: r.wait_pct).run_id
    return next(r for r in runs if r.run_id == worst)


def figures(summary: Summary, runs: list[RunResult], docs: WhatIfDocs,
            run_id: str | None = None) -> dict[str, Figure]:
    """Every figure of a prefix, by file name: the stall breakdown; the timeline of `run_id`,
    or of the run that waited most for data; the per-transform times; the endpoint probe's
    throughput curve (remote data); and, when `docs` holds
    a what-if grid and its validation, their heatmap, curves and validation plot."""
    run = next((r for r in runs if r.run_id == run_id), None) if run_id else \
        timeline_run(summary, runs)
    steps_run = transform_run(runs)
    curve = probe_plots.probe_curve(runs)
    drawn = (  # (file name, whether there is something to draw, how)
        ("stall_breakdown", any(c.total_s is not None for c in summary.configs),
         lambda: stall_breakdown(summary)),
        ("timeline", run is not None and bool(run.ranks), lambda: timeline(run)),
        ("transform_times", steps_run is not None,
         lambda: transform_times(step_timing.step_times(steps_run), steps_run.run_id)),
        ("endpoint_probe", curve is not None, lambda: curve),
        ("whatif_heatmap", bool(docs.rows), lambda: whatif_plots.whatif_heatmap(docs.rows)),
        ("whatif_curves", bool(docs.rows), lambda: whatif_plots.whatif_curves(docs.rows, summary)),
        ("validation", bool(docs.validation and docs.validation.runs),
         lambda: validation_figure.validation(docs.validation)))
    return {name: draw() for name, wanted, draw in drawn if wanted}
