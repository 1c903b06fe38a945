"""The what-if figures: the predicted-throughput heatmap, the curves against CPUs
and against cache (the validation of held-out runs: `report/validation_figure.py`).

Drawn from the what-if grid (`whatif.json`: one row per combination) and the
validation document (`validation.json`), with matplotlib's object-oriented API
on the Agg backend, as in `report/plots.py`, which saves them with the others.
Every number drawn is read from those documents; the only arithmetic here is
layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import matplotlib

matplotlib.use("Agg")
from matplotlib.colors import Normalize  # noqa: E402  (after choosing the backend)
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402

from dsanalyze.analysis.summary import Summary  # noqa: E402
from dsanalyze.config import Mode, format_bytes, unlimited_last  # noqa: E402
from dsanalyze.report.text import Knobs, knob_text  # noqa: E402
from dsanalyze.report.whatif_docs import is_recommended  # noqa: E402
from dsanalyze.whatif.documents import GridRow  # noqa: E402

RECOMMEND_COLOR = "#D55E00"


class Slice(NamedTuple):
    """What one panel of the grid holds fixed (its CPUs x cache plane varies)."""

    storage_read_bps: float | None
    gpu_speedup: float | None
    nproc: int | None
    workers: int | None

    @classmethod
    def of(cls, row: GridRow) -> Slice:
        return cls(*(getattr(row, k) for k in cls._fields))


def _value(row: GridRow, metric: str) -> float | None:
    """A row's figure by its name in `whatif.json` (rate_sps, epoch_s, rate_sps_low, ...)."""
    return getattr(row, metric)

MEASURED_OF = {"rate_sps": "measured_sps"}  # a metric -> the row's measured figure of that kind
METRIC_LABELS = {"rate_sps": "predicted throughput (samples/s)", "epoch_s": "epoch time (s)"}


MAX_PANELS = 4


def whatif_planes(rows: Sequence[GridRow]) -> list[tuple[Slice, list[GridRow]]]:
    """The CPUs x cache planes of the grid: one per storage bandwidth, GPU speed-up, ranks,
    DataLoader workers.

    Ordered by bandwidth (the slowest first, unthrottled last); at most
    MAX_PANELS, the recommended one always among them.
    """
    planes: dict[Slice, list[GridRow]] = {}
    for r in rows:
        planes.setdefault(Slice.of(r), []).append(r)
    keys = sorted(planes, key=lambda k: tuple(unlimited_last(x) for x in k))
    rec = [k for k in keys if any(is_recommended(r) for r in planes[k])]
    keys = (rec + [k for k in keys if k not in rec])[:MAX_PANELS] if rec else keys[:MAX_PANELS]
    keys.sort(key=lambda k: tuple(unlimited_last(x) for x in k))
    return [(k, planes[k]) for k in keys]


def _cache_axis(rows: Sequence[GridRow]) -> tuple[list[Any], list[str]]:
    keys = sorted({r.cache_bytes for r in rows}, key=unlimited_last)
    spec = {r.cache_bytes: r.cache_spec for r in rows}
    labels = []
    for k in keys:
        s = spec[k] or ""
        labels.append("unlimited" if k is None else "0" if k == 0 else
                      f"{s}\n{format_bytes(k)}" if s.endswith("%") else format_bytes(k))
    return keys, labels


def _slice_title(fixed: Slice, sep: str = ", ") -> str:
    parts = [knob_text("bw", Knobs(storage_read_bps=fixed.storage_read_bps))]
    if fixed.gpu_speedup not in (None, 1, 1.0):
        parts.append(f"GPU x{fixed.gpu_speedup:g}")
    if fixed.nproc is not None:
        parts.append(f"{fixed.nproc} rank" + "s" * (fixed.nproc > 1))
    if fixed.workers is not None:
        parts.append(f"{fixed.workers} worker" + "s" * (fixed.workers != 1) + " per rank")
    return sep.join(parts)


def heatmap_grid(rows: Sequence[GridRow], metric: str = "rate_sps"
                 ) -> tuple[list[int], list[Any], list[list[float]]]:
    """(cpus, cache_bytes, values[cpu][cache]) of a slice; NaN where not predicted."""
    cpus = sorted({r.cpus for r in rows}, key=unlimited_last)
    caches, _ = _cache_axis(rows)
    cell = {(r.cpus, r.cache_bytes): _value(r, metric) for r in rows}
    grid = [[float("nan") if cell.get((c, k)) is None else float(cell[(c, k)]) for k in caches]
            for c in cpus]
    return cpus, caches, grid


def interval_level(rows: Sequence[GridRow]) -> float:
    """The prediction intervals' level (0.9), as the rows say."""
    return next((r.interval_level for r in rows if r.interval_level), 0.9)


MAX_WIDTH_IN = 12.8  # 1920 px at the saved 150 dpi: a screen's width
PANEL_COLS = 2  # panels a row when one row would be wider than a screen


def panel_layout(n_panels: int, n_cache: int) -> tuple[int, int, float]:
    """(rows, columns, panel width in inches) for `n_panels` heatmap panels of `n_cache`
    columns: one row while it fits a screen, else PANEL_COLS a row."""
    width = 0.78 * n_cache + 0.9
    cols = n_panels if width * n_panels + 1.6 <= MAX_WIDTH_IN else min(PANEL_COLS, n_panels)
    return -(-n_panels // max(1, cols)), max(1, cols), width


def whatif_heatmap(rows: Sequence[GridRow], metric: str = "rate_sps") -> Figure:
    """Predicted `metric` over CPUs (rows) x cache (columns), one panel per storage bandwidth.

    One colour scale from 0 for every panel, each cell labelled with its value
    and (throughput) the half-width of its prediction interval, `±h`; dashed:
    a measured configuration, with its measured figure of the same kind
    (`measured_sps`, the steady state: a run of one cold epoch has none and is
    not boxed); a thick orange box: the recommendation, when there is one.
    """
    planes = whatif_planes(rows)
    n_cache = max((len(_cache_axis(p)[0]) for _, p in planes), default=1)
    n_cpu = max((len({r.cpus for r in p}) for _, p in planes), default=1)
    n_rows, n_cols, panel_w = panel_layout(len(planes), n_cache)
    fig = Figure(figsize=(min(MAX_WIDTH_IN, max(5.5, panel_w * n_cols + 1.6)),
                          n_rows * max(2.6, 0.62 * n_cpu + 1.6) + 1.0), layout="constrained")
    grid_axes = fig.subplots(n_rows, n_cols, sharey=True, squeeze=False)
    axes = [ax for row in grid_axes for ax in row]
    for ax in axes[len(planes):]:
        ax.set_visible(False)
    values = [v for _, p in planes for r in p if (v := _value(r, metric)) is not None]
    norm = Normalize(0.0, max(values, default=1.0) or 1.0)
    styles = {"measured": dict(edgecolor="white", linestyle="--", linewidth=1.6),
              "recommended": dict(edgecolor=RECOMMEND_COLOR, linewidth=3.0)}
    drawn: set[str] = set()
    for ax, (fixed, plane) in zip(axes, planes):
        im = _heatmap_panel(ax, plane, metric, norm, styles, drawn)
        ax.set_title(_slice_title(fixed, "\n"), fontsize=9)  # one knob a line: panels are narrow
    for row in grid_axes:
        row[0].set_ylabel("CPUs")
    if planes:
        fig.colorbar(im, ax=[ax for ax in axes if ax.get_visible()],
                     label=METRIC_LABELS.get(metric, metric))
    spread = f"; ±: half its {interval_level(rows):.0%} interval" if metric == "rate_sps" else ""
    fig.suptitle(f"What-if: {METRIC_LABELS.get(metric, metric)}{spread}", fontsize=11)
    handles = [Patch(fill=False, label=k, **{**v, "edgecolor": "black"} if k == "measured" else v)
               for k, v in styles.items() if k in drawn]
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncol=2, frameon=False,
                   fontsize=9)
    return fig


def _cell_text(value: float, half: float | None, measured: float | None) -> str:
    text = f"{value:.0f}" + (f" ±{half:.0f}" if half is not None else "")
    return text + (f"\nmeas. {measured:.0f}" if measured is not None else "")


def _heatmap_panel(ax: Any, plane: list[GridRow], metric: str, norm: Normalize,
                   styles: dict[str, dict[str, Any]], drawn: set[str]) -> Any:
    cpus, caches, grid = heatmap_grid(plane, metric)
    im = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis", norm=norm)
    index = {(c, k): (j, i) for i, c in enumerate(cpus) for j, k in enumerate(caches)}
    def measured(r: GridRow) -> float | None:
        return _value(r, MEASURED_OF[metric]) if metric in MEASURED_OF else None
    seen = {index[(r.cpus, r.cache_bytes)]: m for r in plane if (m := measured(r)) is not None}
    halves = {index[(r.cpus, r.cache_bytes)]: r.half_width_sps() for r in plane
              if metric == "rate_sps"}
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            if v == v:  # not NaN
                ax.text(j, i, _cell_text(v, halves.get((j, i)), seen.get((j, i))),
                        ha="center", va="center", fontsize=8,
                        color="white" if norm(v) < 0.55 else "black")
    for label, pick in (("measured", lambda r: measured(r) is not None),
                        ("recommended", is_recommended)):
        for r in plane:
            if pick(r):
                j, i = index[(r.cpus, r.cache_bytes)]
                style = dict(styles[label])
                if label == "measured" and norm(grid[i][j]) >= 0.55:
                    style.update(edgecolor="black")  # as the cell's text: visible on a light cell
                ax.add_patch(Rectangle((j - 0.44, i - 0.42), 0.88, 0.84, fill=False, gid=label,
                                       **style))
                drawn.add(label)
    ax.set_xticks(range(len(caches)), _cache_axis(plane)[1], fontsize=7.5)
    ax.set_yticks(range(len(cpus)), [cpu_tick(c) for c in cpus])
    ax.set_xlabel("page cache")
    return im


def cpu_tick(cpus: int | None) -> str:
    return "all" if cpus is None else str(cpus)


def measured_rate(summary: Summary | None, cpus: Any, cache_bytes: Any,
                  storage_read_bps: Any) -> float | None:
    """The measured steady-state rate of a configuration: its disk run, else its cached run."""
    for cfg in summary.configs if summary else ():
        if (cfg.cpus, cfg.cache_bytes, cfg.storage_read_bps) == \
                (cpus, cache_bytes, storage_read_bps):
            mode = cfg.modes.get(Mode.DISK.value) or cfg.modes.get(Mode.CACHED.value)
            return mode.rate_sps if mode else None
    return None


FOLD_SHARE = 0.005  # series apart by less than this share of the panel's top: drawn as one


def fold_series(labels: list[str], series: list[list[float]]) -> list[tuple[str, list[int]]]:
    """Series that differ at every point by less than FOLD_SHARE of the largest value drawn
    (under 1.5 px on a 300 px panel: one line on the page), folded into one: (legend label,
    members). The label names the members' range in axis order (`25% to unlimited`), or
    lists them when they are not neighbours; a lone series keeps its own label.
    """
    top = max((abs(v) for ys in series for v in ys if v == v), default=0.0)
    groups: list[list[int]] = []
    for k, ys in enumerate(series):
        for g in groups:
            if all((a != a and b != b) or abs(a - b) <= FOLD_SHARE * top
                   for a, b in zip(ys, series[g[0]])):
                g.append(k)
                break
        else:
            groups.append([k])
    out = []
    for g in groups:
        if len(g) == 1:
            out.append((labels[g[0]], g))
        elif g == list(range(g[0], g[-1] + 1)):
            out.append((f"{labels[g[0]]} to {labels[g[-1]]} (alike)", g))
        else:
            out.append((", ".join(labels[k] for k in g) + " (alike)", g))
    return out


def whatif_curves(rows: Sequence[GridRow], summary: Summary | None = None) -> Figure:
    """Predicted throughput vs CPUs (a line per cache) and vs cache (a line per CPU count).

    One row of two panels per storage bandwidth (as the heatmap's panels).
    Lines alike (FOLD_SHARE) are one line whose legend names their range;
    each point's prediction interval is an error bar. Circles: the measured
    rate of every row marked measured (the row's `measured_sps`, else the
    summary's), in the colour of the line it belongs on.
    """
    planes = whatif_planes(rows)
    fig = Figure(figsize=(10, 0.6 + 3.3 * max(1, len(planes))), layout="constrained")
    axes = fig.subplots(max(1, len(planes)), 2, sharey=True, squeeze=False)
    for (ax_cpu, ax_cache), (fixed, plane) in zip(axes, planes):
        _curves_row(ax_cpu, ax_cache, plane, fixed, summary)
    axes[0][0].set_ylim(bottom=0)
    fig.suptitle(f"What-if: predicted throughput (lines, with {interval_level(rows):.0%} "
                 "intervals), measured (circles)", fontsize=11)
    return fig


def _lines(ax: Any, xs: list[int], labels: list[str], series: list[list[float]],
           bands: list[tuple[list[float], list[float]]]) -> list[Any]:
    """Draw the folded series, each point with its interval as an error bar (dodged a little
    sideways per line, so that bars of nearby lines stay apart); returns, per original
    series, its line."""
    line_of: list[Any] = [None] * len(series)
    folded = fold_series(labels, series)
    for n, (label, members) in enumerate(folded):
        ys, (lo, hi) = series[members[0]], bands[members[0]]
        (line,) = ax.plot(xs, ys, marker=".", label=label)
        for k in members:
            line_of[k] = line
        dodge = (n - (len(folded) - 1) / 2) * min(0.06, 0.3 / len(folded))
        if all(v != v for v in (*lo, *hi)):  # no interval in these rows (an older whatif.json)
            continue
        ax.errorbar([x + dodge for x in xs], ys, yerr=[[y - a for y, a in zip(ys, lo)],
                                                       [b - y for y, b in zip(ys, hi)]],
                    fmt="none", ecolor=line.get_color(), elinewidth=0.9, capsize=2, alpha=0.7,
                    label=f"_{label} interval")
    return line_of


def _curves_row(ax_cpu: Any, ax_cache: Any, plane: list[GridRow], fixed: Slice,
                summary: Summary | None) -> None:
    cpus, caches, grid = heatmap_grid(plane, "rate_sps")
    lows, highs = (heatmap_grid(plane, k)[2] for k in ("rate_sps_low", "rate_sps_high"))
    _, cache_labels = _cache_axis(plane)
    cpu_x = list(range(len(cpus)))
    cache_lines = _lines(ax_cpu, cpu_x, [c.replace("\n", " ") for c in cache_labels],
                         [[g[j] for g in grid] for j in range(len(caches))],
                         [([g[j] for g in lows], [g[j] for g in highs])
                          for j in range(len(caches))])
    cpu_lines = _lines(ax_cache, list(range(len(caches))),
                       [knob_text("cpus", Knobs(cpus=c)) for c in cpus], grid,
                       list(zip(lows, highs)))
    # the steady state, as the lines: a run of one cold epoch has no point (measured_sps None)
    pts = [(r, r.measured_sps if r.measured_sps_stored else
            measured_rate(summary, r.cpus, r.cache_bytes, fixed.storage_read_bps))
           for r in plane if r.measured]
    pts = [(cpus.index(r.cpus), caches.index(r.cache_bytes), m) for r, m in pts
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
    ax_cpu.set_xticks(cpu_x, [cpu_tick(c) for c in cpus])
    ax_cpu.set(xlabel="CPUs", ylabel="throughput (samples/s)",
               title=f"{where}\nvs CPUs (a line per cache)")
    ax_cache.set_xticks(range(len(caches)), cache_labels, fontsize=8)
    ax_cache.set(xlabel="page cache", title=f"{where}\nvs cache (a line per CPU count)")
    for ax in (ax_cpu, ax_cache):
        ax.title.set_fontsize(10)
