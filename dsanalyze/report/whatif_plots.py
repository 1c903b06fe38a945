"""The what-if figures: the predicted-throughput heatmap, the curves against CPUs
and against cache, and the validation of held-out runs.

Drawn from the what-if grid (`whatif.json`: one row per combination) and the
validation document (`validation.json`), with matplotlib's object-oriented API
on the Agg backend, as in `report/plots.py`, which saves them with the others.
Every number drawn is read from those documents; the only arithmetic here is
layout.
"""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")
from matplotlib.colors import Normalize  # noqa: E402  (after choosing the backend)
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402

from dsanalyze.config import format_bytes, unlimited_last  # noqa: E402
from dsanalyze.report.text import knob_text  # noqa: E402
from dsanalyze.report.whatif_docs import is_recommended  # noqa: E402

RECOMMEND_COLOR = "#D55E00"


SLICE_KNOBS = ("storage_read_bps", "gpu_speedup", "nproc", "workers")
MEASURED_OF = {"rate_sps": "measured_sps"}  # a metric -> the row's measured figure of that kind
METRIC_LABELS = {"rate_sps": "predicted throughput (samples/s)", "epoch_s": "epoch time (s)"}


MAX_PANELS = 4


def whatif_planes(rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """The CPUs x cache planes of the grid: one per storage bandwidth, GPU speed-up, ranks,
    DataLoader workers.

    Ordered by bandwidth (the slowest first, unthrottled last); at most
    MAX_PANELS, the recommended one always among them.
    """
    planes: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        planes.setdefault(tuple(r.get(k) for k in SLICE_KNOBS), []).append(r)
    keys = sorted(planes, key=lambda k: tuple(unlimited_last(x) for x in k))
    rec = [k for k in keys if any(is_recommended(r) for r in planes[k])]
    keys = (rec + [k for k in keys if k not in rec])[:MAX_PANELS] if rec else keys[:MAX_PANELS]
    keys.sort(key=lambda k: tuple(unlimited_last(x) for x in k))
    return [(dict(zip(SLICE_KNOBS, k)), planes[k]) for k in keys]


def _cache_axis(rows: list[dict[str, Any]]) -> tuple[list[Any], list[str]]:
    keys = sorted({r["cache_bytes"] for r in rows}, key=unlimited_last)
    spec = {r["cache_bytes"]: r.get("cache_spec") for r in rows}
    labels = []
    for k in keys:
        s = spec[k] or ""
        labels.append("unlimited" if k is None else "0" if k == 0 else
                      f"{s}\n{format_bytes(k)}" if s.endswith("%") else format_bytes(k))
    return keys, labels


def _slice_title(fixed: dict[str, Any], sep: str = ", ") -> str:
    parts = [knob_text("bw", {"storage_read_bps": fixed.get("storage_read_bps")})]
    if fixed.get("gpu_speedup") not in (None, 1, 1.0):
        parts.append(f"GPU x{fixed['gpu_speedup']:g}")
    if fixed.get("nproc") is not None:
        parts.append(f"{fixed['nproc']} rank" + "s" * (fixed["nproc"] > 1))
    if fixed.get("workers") is not None:
        parts.append(f"{fixed['workers']} worker" + "s" * (fixed["workers"] != 1) + " per rank")
    return sep.join(parts)


def heatmap_grid(rows: list[dict[str, Any]], metric: str = "rate_sps"
                 ) -> tuple[list[int], list[Any], list[list[float]]]:
    """(cpus, cache_bytes, values[cpu][cache]) of a slice; NaN where not predicted."""
    cpus = sorted({r["cpus"] for r in rows}, key=unlimited_last)
    caches, _ = _cache_axis(rows)
    cell = {(r["cpus"], r["cache_bytes"]): r.get(metric) for r in rows}
    grid = [[float("nan") if cell.get((c, k)) is None else float(cell[(c, k)]) for k in caches]
            for c in cpus]
    return cpus, caches, grid


def whatif_heatmap(rows: list[dict[str, Any]], metric: str = "rate_sps") -> Figure:
    """Predicted `metric` over CPUs (rows) x cache (columns), one panel per storage bandwidth.

    One colour scale from 0 for every panel, each cell labelled with its value;
    dashed: a measured configuration, with its measured figure of the same kind
    (`measured_sps`, the steady state: a run of one cold epoch has none and is
    not boxed); orange: the recommendation.
    """
    planes = whatif_planes(rows)
    n_cache = max((len(_cache_axis(p)[0]) for _, p in planes), default=1)
    n_cpu = max((len({r["cpus"] for r in p}) for _, p in planes), default=1)
    fig = Figure(figsize=(max(5.5, (0.72 * n_cache + 0.6) * len(planes) + 1.6),
                          max(3.6, 0.55 * n_cpu + 2.4)), layout="constrained")
    axes = fig.subplots(1, max(1, len(planes)), sharey=True, squeeze=False)[0]
    values = [r[metric] for _, p in planes for r in p if r.get(metric) is not None]
    norm = Normalize(0.0, max(values, default=1.0) or 1.0)
    styles = {"measured": dict(edgecolor="white", linestyle="--", linewidth=1.6),
              "recommended": dict(edgecolor=RECOMMEND_COLOR, linewidth=3.0)}
    drawn: set[str] = set()
    for ax, (fixed, plane) in zip(axes, planes):
        im = _heatmap_panel(ax, plane, metric, norm, styles, drawn)
        ax.set_title(_slice_title(fixed, "\n"), fontsize=9)  # one knob a line: panels are narrow
    axes[0].set_ylabel("CPUs")
    if planes:
        fig.colorbar(im, ax=list(axes), label=METRIC_LABELS.get(metric, metric))
    fig.suptitle(f"What-if: {METRIC_LABELS.get(metric, metric)}", fontsize=11)
    handles = [Patch(fill=False, label=k, **{**v, "edgecolor": "black"} if k == "measured" else v)
               for k, v in styles.items() if k in drawn]
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncol=2, frameon=False,
                   fontsize=9)
    return fig


def _heatmap_panel(ax: Any, plane: list[dict[str, Any]], metric: str, norm: Normalize,
                   styles: dict[str, dict[str, Any]], drawn: set[str]) -> Any:
    cpus, caches, grid = heatmap_grid(plane, metric)
    im = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis", norm=norm)
    index = {(c, k): (j, i) for i, c in enumerate(cpus) for j, k in enumerate(caches)}
    key = MEASURED_OF.get(metric, "")
    seen = {index[(r["cpus"], r["cache_bytes"])]: r[key] for r in plane
            if r.get(key) is not None}
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            if v == v:  # not NaN
                text = f"{v:.0f}" + (f"\nmeas. {seen[(j, i)]:.0f}" if (j, i) in seen else "")
                ax.text(j, i, text, ha="center", va="center", fontsize=8 if (j, i) not in seen
                        else 7, color="white" if norm(v) < 0.55 else "black")
    for label, pick in (("measured", lambda r: r.get(key) is not None),
                        ("recommended", is_recommended)):
        for r in plane:
            if pick(r):
                j, i = index[(r["cpus"], r["cache_bytes"])]
                style = dict(styles[label])
                if label == "measured" and norm(grid[i][j]) >= 0.55:
                    style["edgecolor"] = "black"  # as the cell's text: visible on a light cell
                ax.add_patch(Rectangle((j - 0.44, i - 0.42), 0.88, 0.84, fill=False, gid=label,
                                       **style))
                drawn.add(label)
    ax.set_xticks(range(len(caches)), _cache_axis(plane)[1], fontsize=7.5)
    ax.set_yticks(range(len(cpus)), ["all" if c is None else str(c) for c in cpus])
    ax.set_xlabel("page cache")
    return im


def measured_rate(summary: dict[str, Any] | None, cpus: Any, cache_bytes: Any,
                  storage_read_bps: Any) -> float | None:
    """The measured steady-state rate of a configuration: its disk run, else its cached run."""
    for cfg in (summary or {}).get("configs", []):
        if (cfg["cpus"], cfg["cache_bytes"], cfg["storage_read_bps"]) == \
                (cpus, cache_bytes, storage_read_bps):
            mode = cfg["modes"].get("disk") or cfg["modes"].get("cached") or {}
            return mode.get("rate_sps")
    return None


def whatif_curves(rows: list[dict[str, Any]], summary: dict[str, Any] | None = None) -> Figure:
    """Predicted throughput vs CPUs (a line per cache) and vs cache (a line per CPU count).

    One row of two panels per storage bandwidth (as the heatmap's panels).
    Circles: the measured rate of every row marked measured (the row's
    `measured_sps`, else the summary's), in the colour of the line it belongs on.
    """
    planes = whatif_planes(rows)
    fig = Figure(figsize=(10, 0.6 + 3.7 * max(1, len(planes))), layout="constrained")
    axes = fig.subplots(max(1, len(planes)), 2, sharey=True, squeeze=False)
    for (ax_cpu, ax_cache), (fixed, plane) in zip(axes, planes):
        _curves_row(ax_cpu, ax_cache, plane, fixed, summary)
    axes[0][0].set_ylim(bottom=0)
    fig.suptitle("What-if: predicted throughput (lines), measured (circles)", fontsize=11)
    return fig


def _curves_row(ax_cpu: Any, ax_cache: Any, plane: list[dict[str, Any]], fixed: dict[str, Any],
                summary: dict[str, Any] | None) -> None:
    cpus, caches, grid = heatmap_grid(plane, "rate_sps")
    _, cache_labels = _cache_axis(plane)
    cpu_x = list(range(len(cpus)))
    cache_lines = [ax_cpu.plot(cpu_x, [g[j] for g in grid], marker=".",
                               label=label.replace("\n", " "))[0]
                   for j, label in enumerate(cache_labels)]
    cpu_lines = [ax_cache.plot(range(len(caches)), grid[i], marker=".",
                               label=f"{knob_text('cpus', {'cpus': c})}")[0]
                 for i, c in enumerate(cpus)]
    # the steady state, as the lines: a run of one cold epoch has no point (measured_sps None)
    pts = [(r, r["measured_sps"] if "measured_sps" in r else
            measured_rate(summary, r["cpus"], r["cache_bytes"], fixed.get("storage_read_bps")))
           for r in plane if r.get("measured")]
    pts = [(cpus.index(r["cpus"]), caches.index(r["cache_bytes"]), m) for r, m in pts
           if m is not None]
    for ax, xs, lines in ((ax_cpu, [i for i, _, _ in pts], [cache_lines[j] for _, j, _ in pts]),
                          (ax_cache, [j for _, j, _ in pts], [cpu_lines[i] for i, _, _ in pts])):
        if pts:
            ax.scatter(xs, [m for _, _, m in pts], marker="o", s=70, facecolors="none",
                       edgecolors=[line.get_color() for line in lines], linewidths=1.8,
                       zorder=3, gid="measured")
            ax.scatter([], [], marker="o", s=70, facecolors="none", edgecolors="black",
                       linewidths=1.8, label="measured")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7.5, frameon=False, loc="best")
    where = _slice_title(fixed)
    ax_cpu.set_xticks(cpu_x, ["all" if c is None else str(c) for c in cpus])
    ax_cpu.set(xlabel="CPUs", ylabel="throughput (samples/s)",
               title=f"{where}\nvs CPUs (a line per cache)")
    ax_cache.set_xticks(range(len(caches)), cache_labels, fontsize=8)
    ax_cache.set(xlabel="page cache", title=f"{where}\nvs cache (a line per CPU count)")
    for ax in (ax_cpu, ax_cache):
        ax.title.set_fontsize(10)


def validation(doc: dict[str, Any]) -> Figure:
    """Predicted vs measured throughput of the held-out runs, with the identity line.

    Each point holds its number; the numbers are listed under the axes with the
    run id and its error. The axes span the points (not from zero) so that
    a few percent of error stays visible.
    """
    runs = doc["runs"]
    fig = Figure(figsize=(5.8, 5.4 + 0.17 * len(runs)), layout="constrained")
    ax = fig.subplots()
    measured = [r["measured_sps"] for r in runs]
    predicted = [r["predicted_sps"] for r in runs]
    lo, hi = min([*measured, *predicted]) * 0.85, max([*measured, *predicted]) * 1.1
    ax.plot([lo, hi], [lo, hi], color="black", linewidth=1, label="predicted = measured")
    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="#999999",
                    alpha=0.2, label="within 10%")
    ax.scatter(measured, predicted, s=150, color="#0072B2", alpha=0.85, zorder=3,
               label="held-out run")
    for i, r in enumerate(runs, 1):  # the number inside its own marker: no doubt which is which
        ax.annotate(str(i), (r["measured_sps"], r["predicted_sps"]), ha="center", va="center",
                    fontsize=7, color="white", fontweight="bold", zorder=4)
        ax.plot([], [], " ", label=f"{i}: {r['run_id']} ({r['error_pct']:+.1f}%)")
    ax.set(xlim=(lo, hi), ylim=(lo, hi), xlabel="measured (samples/s)",
           ylabel="predicted (samples/s)", aspect="equal")
    ax.set_title(f"What-if model validation: {len(runs)} held-out runs\nmedian |error| "
                 f"{doc['median_abs_error_pct']:.1f}%, max |error| "
                 f"{doc['max_abs_error_pct']:.1f}%", fontsize=11)
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[:3], labels[:3], loc="upper left", fontsize=8, frameon=False)
    fig.legend(handles[3:], labels[3:], loc="outside lower center", fontsize=7.5, frameon=False,
               handlelength=0, ncol=1)
    return fig
