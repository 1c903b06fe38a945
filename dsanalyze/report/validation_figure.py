"""The what-if validation figure: predicted against measured throughput of the held-out runs,
by split (leave-one-out, extrapolation), with each prediction's interval.

Drawn from the `validate --json` document (`validation.json`), on the Agg
backend as every figure (`report/plots.py` saves it). Every number drawn is
read from that document; the only arithmetic here is layout.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import matplotlib

matplotlib.use("Agg")
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402  (after the backend)
from matplotlib.figure import Figure  # noqa: E402

from dsanalyze.whatif.documents import CheckRow, ValidationDoc  # noqa: E402

SPLITS = {"loo": ("leave-one-out", "L", "o", "#0072B2"),
          "extrapolation": ("extrapolation", "E", "s", "#D55E00")}  # name, tag, marker, colour


def _split_of(code: str) -> tuple[str, str, str, str]:
    return SPLITS.get(code, (code, code[:1].upper(), "D", "#009E73"))


def validation(doc: ValidationDoc) -> Figure:
    """Predicted vs measured throughput of the held-out runs, with the identity line.

    A marker per prediction, its shape and tag (L1, E1) by split (leave-one-out,
    extrapolation): a run held out in both splits is two points. A vertical bar:
    the prediction's interval (`predicted_sps_low`/`_high`). The numbers are
    listed under the axes with the run id, its split and its error. The axes
    span the points and intervals (not from zero) so that a few percent of
    error stays visible.
    """
    runs = doc.runs
    fig = Figure(figsize=(6.4, 5.6 + 0.19 * len(runs)), layout="constrained")
    ax = fig.subplots()
    ends = [v for r in runs for v in (r.measured_sps, r.predicted_sps, r.predicted_sps_low,
                                      r.predicted_sps_high) if v is not None]
    lo, hi = min(ends) * 0.9, max(ends) * 1.08
    ax.plot([lo, hi], [lo, hi], color="black", linewidth=1, label="predicted = measured")
    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="#999999",
                    alpha=0.2, label="within 10%")
    listing = _validation_points(ax, runs, doc.nominal)
    ax.set(xlim=(lo, hi), ylim=(lo, hi), xlabel="measured (samples/s)",
           ylabel="predicted (samples/s)", aspect="equal")
    ax.set_title(_validation_title(doc), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8, framealpha=0.85)
    fig.legend(handles=[ax.plot([], [], " ", label=t)[0] for t in listing],
               loc="outside lower center", fontsize=7.5, frameon=False, handlelength=0, ncol=1)
    _keep_tags_apart(fig, [t for t in ax.texts if t.get_gid() == "tag"])
    return fig


# Where a tag goes when its marker's place is taken (points: beside the marker, then further)
TAG_OFFSETS = [(0, 0)] + [(dx * k, dy * k) for k in (1, 2, 3) for dx, dy in
                          ((9, 9), (9, -9), (-9, 9), (-9, -9), (13, 0), (-13, 0), (0, 12),
                           (0, -12))]


def _keep_tags_apart(fig: Figure, tags: list[Any]) -> None:
    """Two held-out runs measured and predicted alike put their markers on one spot: each
    tag in turn takes the first offset where it overlaps no tag placed before it, drawn
    dark beside its marker rather than white inside it."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # the final layout: the tags' extents in pixels
    renderer = canvas.get_renderer()
    placed: list[Any] = []
    for tag in tags:
        for dx, dy in TAG_OFFSETS:
            tag.xyann = (dx, dy)
            if (dx, dy) != (0, 0):
                tag.set_color("black")
            box = tag.get_window_extent(renderer)
            if not any(box.overlaps(p) for p in placed):
                break
        placed.append(tag.get_window_extent(renderer))


def _validation_points(ax: Any, runs: tuple[CheckRow, ...], level: float) -> list[str]:
    """A marker, tag and interval per prediction, by split; returns the listing's lines."""
    listing: list[str] = []
    for code in dict.fromkeys(r.split for r in runs):
        mine = [r for r in runs if r.split == code]
        name, tag, marker, color = _split_of(code)
        xs, ys = [r.measured_sps for r in mine], [r.predicted_sps for r in mine]
        ax.scatter(xs, ys, s=190, marker=marker, color=color, alpha=0.85, zorder=3,
                   label=f"{name} ({len(mine)})", gid=code)
        bounded = [r for r in mine if r.predicted_sps_low is not None]
        if bounded:
            ax.errorbar([r.measured_sps for r in bounded], [r.predicted_sps for r in bounded],
                        yerr=[[r.predicted_sps - r.predicted_sps_low for r in bounded],
                              [r.predicted_sps_high - r.predicted_sps for r in bounded]],
                        fmt="none", ecolor=color, elinewidth=1.2, capsize=3, zorder=2,
                        label=f"_{code} interval")
        for i, r in enumerate(mine, 1):  # the tag inside its own marker: no doubt which is which
            ax.annotate(f"{tag}{i}", (r.measured_sps, r.predicted_sps), ha="center",
                        va="center", fontsize=6.5, color="white", fontweight="bold", zorder=4,
                        xytext=(0, 0), textcoords="offset points", gid="tag")
            band = (f", {level:.0%} [{r.predicted_sps_low:.0f}, {r.predicted_sps_high:.0f}]"
                    if r.predicted_sps_low is not None else "")
            listing.append(f"{tag}{i} {name}: {r.run_id} ({r.error_pct:+.1f}%{band})")
    ax.errorbar([], [], yerr=[], fmt="none", ecolor="black", capsize=3,
                label=f"{level:.0%} prediction interval")
    return listing


def _validation_title(doc: ValidationDoc) -> str:
    runs = doc.runs
    held = len({r.run_id for r in runs})
    per = ", ".join(f"{_split_of(c)[0]} {n}" for c, n in Counter(r.split for r in runs).items())
    cover = sum(r.covered for r in runs)
    return (f"What-if model validation: {held} held-out run{'s' * (held != 1)}, "
            f"{len(runs)} prediction{'s' * (len(runs) != 1)}\n{per}; {cover} of {len(runs)} "
            f"inside their {doc.nominal:.0%} interval\nmedian |error| "
            f"{doc.median_abs_error_pct:.1f}%, max {doc.max_abs_error_pct:.1f}%")
