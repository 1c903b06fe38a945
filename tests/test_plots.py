"""The figures checked by what they draw: bar heights, cells, lines, spans, labels.

Real runs from a sweep on this machine (tests/data/report_sweep: CPUs 1 and 2,
disk unthrottled and throttled to 8 MiB/s, one epoch of 128 samples;
tests/data/report_2ranks: two ranks, a disk run of two epochs), and
hand-made what-if documents in the shape of `whatif.json` and `validate --json`.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, copy_of
from matplotlib.collections import PathCollection, PolyCollection
from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.image import imread
from matplotlib.patches import Rectangle

from dsanalyze import app, cli, store
from dsanalyze.analysis import stalls
from dsanalyze.analysis.summary import ConfigSummary, Summary, summarize
from dsanalyze.report import plots, stall_figure, validation_figure, whatif_plots
from dsanalyze.report import summary as report_summary
from dsanalyze.report.text import Knobs, knob_text
from dsanalyze.whatif.documents import GridRow, ValidationDoc

DATA = Path(__file__).parent / "data"
SWEEP, TWO_RANKS = DATA / "report_sweep", DATA / "report_2ranks"
TWELVE = DATA / "report_12configs"  # CPUs 1, 2 x cache 0, 50%, none x disk 8M/s, unthrottled
MIB = 1 << 20


def summary_of(prefix: Path) -> dict:
    """The summary as `summary.json` holds it: what the tests read their expectations from."""
    return summarize(store.load_runs(prefix)).to_dict()


def typed(summary: dict) -> Summary:
    """A summary document as the figures take it (`summary.json` read back)."""
    return Summary.from_dict({"job": None, "dataset": None, **summary})


def grid_of(rows: list[dict]) -> list[GridRow]:
    """`whatif.json` rows as the figures take them."""
    return [GridRow.from_dict(r) for r in rows]


def validation_doc(doc: dict) -> ValidationDoc:
    return ValidationDoc.from_dict(doc)


def bars(fig) -> dict[str, BarContainer]:
    ax = fig.axes[0]
    return {c.get_label(): c for c in ax.containers if isinstance(c, BarContainer)}


# ---- stall breakdown ------------------------------------------------------------------------

def test_stall_breakdown_bars_and_labels_equal_the_summary():
    summary = summary_of(SWEEP)
    fig = plots.stall_breakdown(typed(summary))
    ax = fig.axes[0]
    by_key = {(c["cpus"], c["storage_read_bps"]): c for c in summary["configs"]}
    # ordered so that the trend shows: CPUs outer, then the slower disk before the faster
    order = [(1, 8 * MIB), (1, None), (2, 8 * MIB), (2, None)]
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "1 CPU\ndisk 8M/s", "1 CPU\ndisk unthrottled", "2 CPUs\ndisk 8M/s",
        "2 CPUs\ndisk unthrottled"]
    drawn = bars(fig)
    assert list(drawn) == ["compute", "prep stall", "fetch stall"]
    for i, key in enumerate(order):
        cfg = by_key[key]
        heights = {name: c.patches[i].get_height() for name, c in drawn.items()}
        # the bar stands at the table's epoch time, split at its compute time
        assert sum(heights.values()) == pytest.approx(cfg["total_s"], rel=1e-12)
        assert heights["compute"] == pytest.approx(cfg["compute_s"], rel=1e-12)
        # where the table's stalls add up to its epoch, each is drawn at its value; the
        # unthrottled disk at 2 CPUs measured a little faster than the cached run (a fetch
        # stall within noise, stored as 0): its fetch segment is 0 and prep ends at the epoch,
        # where before the bar stood at compute + prep, above the table's epoch time
        stored = cfg["compute_s"] + cfg["prep_stall_s"] + cfg["fetch_stall_s"]
        if stored == pytest.approx(cfg["total_s"], rel=1e-9):
            assert heights["fetch stall"] == pytest.approx(cfg["fetch_stall_s"], rel=1e-9)
            assert heights["prep stall"] == pytest.approx(cfg["prep_stall_s"], rel=1e-9)
        else:
            assert stored > cfg["total_s"] and key == (2, None)
            assert heights["fetch stall"] == pytest.approx(0, abs=1e-12)
        # stacked: each segment starts where the one below ends
        assert drawn["prep stall"].patches[i].get_y() == pytest.approx(cfg["compute_s"])
        assert drawn["fetch stall"].patches[i].get_y() == \
            pytest.approx(cfg["compute_s"] + heights["prep stall"])
    # each label says what the table's stall columns say, in fewer digits
    labels = [t.get_text() for t in ax.texts]
    assert labels == [f"prep {table_words(by_key[k], 'prep')}\n"
                      f"fetch {table_words(by_key[k], 'fetch')}" for k in order]
    assert labels[0] == "prep 4% ±3\nfetch 66% ±17" and labels[1] == "prep 12% ±7\nfetch noise ±8%"
    assert "128 samples" in ax.get_title() and "cache unlimited" in ax.get_title()
    assert ax.get_ylabel() == "seconds per epoch"


def table_words(cfg: dict, kind: str) -> str:
    """The table's stall cell (`0.1s 12.3% ±6.7`, `within noise (±8.0%)`) in the label's words."""
    cell = report_summary._stall(ConfigSummary.from_dict(cfg), kind)
    if cell.startswith("within noise"):
        return f"noise ±{float(cell.split('±')[1].rstrip('%)')):.0f}%"
    _, pct, half = cell.split()
    return f"{float(pct.rstrip('%')):.0f}% ±{float(half.lstrip('±')):.0f}"


def intervals(ax) -> dict[str, list[tuple[float, float, float]]]:
    """Each error bar drawn, by what it is: (x, low, high) in data units."""
    out = {}
    for c in ax.containers:
        if isinstance(c, ErrorbarContainer) and c.get_label().startswith("_"):
            (lines,) = c.lines[2]
            out[c.get_label()[1:]] = sorted((seg[0][0], seg[0][1], seg[1][1])
                                            for seg in lines.get_segments())
    return out


def test_stall_breakdown_draws_the_tables_intervals_and_hatches_noise():
    summary = summary_of(SWEEP)
    fig = plots.stall_breakdown(typed(summary))
    ax = fig.axes[0]
    configs, _ = plots.ordered_configs(typed(summary).configs)
    configs = [c.to_dict() for c in configs]
    drawn, got = bars(fig), intervals(ax)
    n = configs[0]["samples_per_epoch"]
    for i, cfg in enumerate(configs):
        compute_top = drawn["compute"].patches[i].get_height()
        prep_top = compute_top + drawn["prep stall"].patches[i].get_height()
        synthetic, disk = cfg["modes"]["synthetic"], cfg["modes"]["disk"]
        expected = {
            "compute interval": (n / synthetic["rate_sps_high"], n / synthetic["rate_sps_low"]),
            "prep stall interval": (compute_top + cfg["prep_stall_s_low"],
                                    compute_top + cfg["prep_stall_s_high"]),
            "fetch stall interval": (prep_top + cfg["fetch_stall_s_low"],
                                     prep_top + cfg["fetch_stall_s_high"]),
            "epoch interval": (n / disk["rate_sps_high"], n / disk["rate_sps_low"])}
        for name, (lo, hi) in expected.items():
            x, y0, y1 = got[name][i]
            assert i - 0.31 < x < i + 0.31  # inside its own bar
            assert (y0, y1) == pytest.approx((lo, hi), rel=1e-9), name
        # a stall the table calls within noise is hatched, a likely one is solid
        for kind in ("prep", "fetch"):
            patch = drawn[f"{kind} stall"].patches[i]
            noise = cfg[f"{kind}_stall_significance"] == "within_noise"
            assert (patch.get_hatch() == stall_figure.NOISE_HATCH) == noise
            assert (patch.get_gid() == "within noise") == noise
    assert sum(p.get_gid() == "within noise" for c in drawn.values() for p in c.patches) == 2
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "stall within noise (interval holds 0)" in legend
    # the segments' keys are plain: only the within-noise key is hatched
    keys = dict(zip(legend, fig.legends[0].legend_handles))
    assert not keys["fetch stall"].get_hatch() and not keys["prep stall"].get_hatch()
    assert keys["stall within noise (interval holds 0)"].get_hatch()
    assert "95% intervals: compute, prep, fetch, epoch" in legend


def test_stall_breakdown_marks_the_cold_first_epoch():
    summary = summary_of(TWO_RANKS)
    (cfg,) = summary["configs"]
    ax = plots.stall_breakdown(typed(summary)).axes[0]
    (cold,) = [c for c in ax.collections if isinstance(c, PathCollection)]
    assert cold.get_offsets().tolist() == [[0, pytest.approx(cfg["modes"]["disk"]["epoch1_s"])]]
    assert cold.get_label() == "cold 1st epoch (disk)"


@pytest.mark.parametrize("prefix", [TWO_RANKS, TWELVE])
def test_the_cold_epoch_tick_never_strikes_through_a_label(prefix):
    """The tick marked the cold epoch across the "fetch 0%" label; now each label sits above
    the highest thing drawn in its column."""
    fig = plots.stall_breakdown(typed(summary_of(prefix)))
    ax = fig.axes[0]
    text_boxes(fig)  # laid out at the figure's own size
    (cold,) = [c for c in ax.collections if isinstance(c, PathCollection)]
    ticks = ax.transData.transform(cold.get_offsets())
    labels = [t for t in ax.texts if t.get_gid() == "stall label"]
    for x, y in ticks:
        (label,) = [t for t in labels if abs(ax.transData.transform((t.xy[0], 0))[0] - x) < 1]
        assert label.get_window_extent().y0 > y + 2  # above the tick, which is 2 pt thick


def cfg(cpus, cache_bytes, bps, spec=None):
    return {"cpus": cpus, "cache_bytes": cache_bytes, "storage_read_bps": bps,
            "cache_spec": spec or ("none" if cache_bytes is None else str(cache_bytes))}


def knobs(cfg: dict) -> Knobs:
    return Knobs(**cfg)


@pytest.mark.parametrize("configs,order,varying", [
    # one knob: least resource first, "all CPUs" (None) last
    ([cfg(None, None, None), cfg(4, None, None), cfg(1, None, None)], [1, 4, None], ["cpus"]),
    # cache has more values than CPUs: it varies fastest, unlimited cache last
    ([cfg(2, None, None), cfg(1, 50, None), cfg(2, 0, None), cfg(1, None, None), cfg(1, 0, None),
      cfg(2, 50, None)], [(1, 0), (1, 50), (1, None), (2, 0), (2, 50), (2, None)],
     ["cpus", "cache"]),
    # bandwidth: the slowest disk first, the unthrottled one last
    ([cfg(1, 0, None), cfg(1, 0, 100), cfg(1, 0, 10)], [10, 100, None], ["bw"]),
])
def test_ordered_configs(configs, order, varying):
    ordered, varied = plots.ordered_configs([knobs(c) for c in configs])
    assert varied == varying
    got = [tuple(stall_figure._KNOBS[k](c) for k in varied) for c in ordered]
    assert got == [o if isinstance(o, tuple) else (o,) for o in order]


# ---- what-if ---------------------------------------------------------------------------------

def whatif_rows(bps_list=(None,), recommended=(2, 50), measured=((1, None), (2, None))):
    """A whatif.json in the shape the spec fixes; rate = 100 * cpus + cache share."""
    rows = []
    for bps in bps_list:
        for cpus in (1, 2, 4):
            for spec, cache in (("0", 0), ("50%", 50), ("none", None)):
                rate = 100.0 * cpus + (cache if cache is not None else 100) + (bps or 0) / 10
                rows.append({"cpus": cpus, "cache_spec": spec, "cache_bytes": cache,
                             "storage_read_bps": bps, "gpu_speedup": 1.0, "nproc": 1,
                             "rate_sps": rate, "epoch_s": 1000 / rate, "compute_s": 1.0,
                             "prep_stall_s": 0.5, "fetch_stall_s": 0.25,
                             "measured": (cpus, cache) in measured,
                             # measured steady rate; 2 CPUs ran one cold epoch only: none
                             "measured_sps": rate - 7 if (cpus, cache) in measured and cpus != 2
                             else None,
                             "recommended": (cpus, cache) == recommended and bps == bps_list[-1]})
    return rows


def test_heatmap_cells_equal_whatif_json():
    rows = whatif_rows()
    (ax,) = panels(whatif_plots.whatif_heatmap(grid_of(rows)))
    (im,) = ax.images
    grid = im.get_array()
    cpus, caches = [1, 2, 4], [0, 50, None]
    for r in rows:
        assert grid[cpus.index(r["cpus"]), caches.index(r["cache_bytes"])] == r["rate_sps"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["1", "2", "4"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "50%\n50B", "unlimited"]
    texts = sorted(float(t.get_text().split("\n")[0]) for t in ax.texts)
    assert texts == sorted(round(r["rate_sps"]) for r in rows)
    # a measured cell shows the measured steady figure beside the predicted one
    boxed = [t.get_text() for t in ax.texts if "\n" in t.get_text()]
    assert boxed == [f"{200:.0f}\nmeas. {193:.0f}"]

    def cells(gid):
        return sorted((round(p.get_x() + p.get_width() / 2), round(p.get_y() + p.get_height() / 2))
                      for p in ax.patches if isinstance(p, Rectangle) and p.get_gid() == gid)
    # (cache column, cpu row); 2 CPUs measured only a cold epoch: not a steady figure, no box
    assert cells("measured") == [(2, 0)]
    assert cells("recommended") == [(1, 1)]


def panels(fig) -> list:
    return [ax for ax in fig.axes if ax.images]


def test_heatmap_has_a_panel_per_bandwidth_on_one_scale():
    rows = whatif_rows(bps_list=(None, 10 * MIB))
    fig = whatif_plots.whatif_heatmap(grid_of(rows))
    slow, fast = panels(fig)
    assert slow.get_title() == "disk 10M/s\n1 rank" and fast.get_title() == "disk unthrottled\n1 rank"
    assert slow.images[0].get_array()[0, 0] == 100.0 + 0 + 10 * MIB / 10
    assert fast.images[0].get_array()[0, 0] == 100.0
    top = max(r["rate_sps"] for r in rows)
    for ax in (slow, fast):  # one colour scale, from zero
        assert ax.images[0].get_clim() == (0.0, top)
    # the recommendation is on the 10M/s panel only
    assert [p.get_gid() for p in slow.patches].count("recommended") == 1
    assert "recommended" not in [p.get_gid() for p in fast.patches]


def test_heatmap_panels_are_capped_and_keep_the_recommendation():
    rows = whatif_rows(bps_list=(1, 2, 3, 4, 5, None))  # the recommendation is at None
    titles = [ax.get_title() for ax in panels(whatif_plots.whatif_heatmap(grid_of(rows)))]
    assert titles == ["disk 1B/s\n1 rank", "disk 2B/s\n1 rank", "disk 3B/s\n1 rank",
                      "disk unthrottled\n1 rank"]


def test_heatmap_leaves_missing_cells_empty():
    rows = [r for r in whatif_rows() if (r["cpus"], r["cache_bytes"]) != (4, 0)]
    grid = np.ma.filled(whatif_plots.whatif_heatmap(grid_of(rows)).axes[0].images[0].get_array(), np.nan)
    assert math.isnan(grid[2, 0]) and grid[2, 1] == 450.0


def test_curves_draw_predictions_and_measured_points():
    rows = whatif_rows(bps_list=(None,), recommended=(2, 50), measured=((1, None), (2, None)))
    summary = summary_of(SWEEP)
    fig = whatif_plots.whatif_curves(grid_of(rows), typed(summary))
    ax_cpu, ax_cache = fig.axes
    assert ax_cpu.get_title() == "disk unthrottled, 1 rank\nvs CPUs (a line per cache)"
    lines = {ln.get_label(): list(ln.get_ydata()) for ln in ax_cpu.lines}
    assert lines == {"0": [100.0, 200.0, 400.0], "50% 50B": [150.0, 250.0, 450.0],
                     "unlimited": [200.0, 300.0, 500.0]}
    lines = {ln.get_label(): list(ln.get_ydata()) for ln in ax_cache.lines}
    assert lines["2 CPUs"] == [200.0, 250.0, 300.0]
    # the measured steady rate of 1 CPU; 2 CPUs measured a cold epoch only: no point
    (pts,) = [c for c in ax_cpu.collections if c.get_gid() == "measured"]
    assert pts.get_offsets().tolist() == [[0, 200.0 - 7]]
    (pts,) = [c for c in ax_cache.collections if c.get_gid() == "measured"]
    assert pts.get_offsets()[:, 0].tolist() == [2]  # the unlimited-cache column
    # rows without measured_sps (an older whatif.json): the summary's measured rate
    old = [{k: v for k, v in r.items() if k != "measured_sps"} for r in rows]
    (pts,) = [c for c in whatif_plots.whatif_curves(grid_of(old), typed(summary)).axes[0].collections
              if c.get_gid() == "measured"]
    measured = {(c["cpus"]): c["modes"]["disk"]["rate_sps"] for c in summary["configs"]
                if c["storage_read_bps"] is None}
    assert pts.get_offsets().tolist() == [[0, pytest.approx(measured[1])],
                                          [1, pytest.approx(measured[2])]]


def test_curves_fold_alike_lines_and_draw_their_intervals():
    """Caches of 50% and more predict the same (the data fits): one line named by its range,
    as six identical cache lines were drawn over each other with six legend entries."""
    rows = twelve_rows(3, 6)
    for r in rows:
        if r["cache_bytes"] is None or r["cache_bytes"] >= 50 << 20:
            r.update(rate_sps=100.0 * r["cpus"] + 50, rate_sps_low=80.0 * r["cpus"] + 40,
                     rate_sps_high=125.0 * r["cpus"] + 62.5)
    ax_cpu, ax_cache = whatif_plots.whatif_curves(grid_of(rows)).axes
    lines = {ln.get_label(): list(ln.get_ydata()) for ln in ax_cpu.lines
             if not ln.get_label().startswith("_")}  # the error bars' caps are lines too
    assert lines == {"0": [100.0, 200.0, 400.0], "25% 25M": [125.0, 225.0, 425.0],
                     "50% 50M to unlimited (alike)": [150.0, 250.0, 450.0]}
    legend = [t.get_text() for t in ax_cpu.get_legend().get_texts()]
    assert legend[:3] == list(lines)
    # the 90% interval of every point, read back from the error bars
    (bars,) = [c for c in ax_cpu.containers if isinstance(c, ErrorbarContainer)
               and c.get_label() == "_50% 50M to unlimited (alike) interval"]
    segs = [(s[0][1], s[1][1]) for s in bars.lines[2][0].get_segments()]
    assert segs == [(80.0 * c + 40, 125.0 * c + 62.5) for c in (1, 2, 4)]
    # against cache, CPU counts differ everywhere: three lines
    assert [ln.get_label() for ln in ax_cache.lines if not ln.get_label().startswith("_")] == \
        ["1 CPU", "2 CPUs", "4 CPUs"]


def test_fold_series_names_neighbours_as_a_range_and_others_as_a_list():
    same = [1.0, 2.0]
    assert whatif_plots.fold_series(["a", "b", "c", "d"], [same, [5.0, 6.0], same, same]) == [
        ("a, c, d (alike)", [0, 2, 3]), ("b", [1])]
    assert whatif_plots.fold_series(["a", "b"], [[100.0], [100.4]]) == [("a to b (alike)", [0, 1])]
    assert whatif_plots.fold_series(["a", "b"], [[100.0], [101.0]]) == [("a", [0]), ("b", [1])]


def test_heatmap_cells_give_the_interval_half_width_and_fit_a_screen():
    rows = twelve_rows(4, 6, bps_list=(4 << 20, 8 << 20, 16 << 20, None))
    fig = whatif_plots.whatif_heatmap(grid_of(rows))
    assert fig.get_size_inches()[0] * plots.DPI <= 1920  # was 3192 px for the demo's grid
    for ax in panels(fig):
        plane = [r for r in rows if ax.get_title().startswith(
            knob_text("bw", Knobs(storage_read_bps=r["storage_read_bps"])))]
        assert sorted(t.get_text().split("\n")[0] for t in ax.texts) == sorted(
            f"{r['rate_sps']:.0f} ±{(r['rate_sps_high'] - r['rate_sps_low']) / 2:.0f}"
            for r in plane)
    assert "±: half its 90% interval" in fig._suptitle.get_text()


def check(run_id, split, measured, predicted, lo, hi):
    return {"run_id": run_id, "split": split, "measured_sps": measured,
            "predicted_sps": predicted, "predicted_sps_low": lo, "predicted_sps_high": hi,
            "covered": lo <= measured <= hi, "error_pct": 100 * (predicted / measured - 1)}


# two runs held out in both splits, one in leave-one-out only: 3 runs, 5 predictions
VALIDATION = {"runs": [check("disk-a", "loo", 80.0, 82.0, 70.0, 96.0),
                       check("disk-b", "loo", 240.0, 230.0, 200.0, 260.0),
                       check("disk-c", "loo", 150.0, 120.0, 110.0, 131.0),
                       check("disk-b", "extrapolation", 240.0, 300.0, 250.0, 350.0),
                       check("disk-c", "extrapolation", 150.0, 160.0, 140.0, 180.0)],
              "median_abs_error_pct": 4.2, "max_abs_error_pct": 25.0, "nominal": 0.9}


def test_validation_counts_runs_labels_splits_and_draws_intervals():
    fig = validation_figure.validation(validation_doc(VALIDATION))
    ax = fig.axes[0]
    by_split = {c.get_gid(): c.get_offsets().tolist() for c in ax.collections
                if isinstance(c, PathCollection)}
    assert by_split == {"loo": [[80.0, 82.0], [240.0, 230.0], [150.0, 120.0]],
                        "extrapolation": [[240.0, 300.0], [150.0, 160.0]]}
    # 3 distinct runs held out (the old title said 5, counting predictions as runs)
    title = ax.get_title()
    assert title.startswith("What-if model validation: 3 held-out runs, 5 predictions\n")
    assert "leave-one-out 3, extrapolation 2" in title and "3 of 5 inside their 90% interval" in title
    assert "median |error| 4.2%, max 25.0%" in title
    # each point's tag names its split; the listing says it in words
    assert [t.get_text() for t in ax.texts] == ["L1", "L2", "L3", "E1", "E2"]
    (listing,) = fig.legends
    lines = [t.get_text() for t in listing.get_texts()]
    assert lines[0] == "L1 leave-one-out: disk-a (+2.5%, 90% [70, 96])"
    assert lines[3] == "E1 extrapolation: disk-b (+25.0%, 90% [250, 350])"
    # the 90% intervals, read back from the error bars' segments
    for code in ("loo", "extrapolation"):
        (bars,) = [c for c in ax.containers if isinstance(c, ErrorbarContainer)
                   and c.get_label() == f"_{code} interval"]
        segs = [(s[0][0], s[0][1], s[1][1]) for s in bars.lines[2][0].get_segments()]
        assert segs == [(r["measured_sps"], r["predicted_sps_low"], r["predicted_sps_high"])
                        for r in VALIDATION["runs"] if r["split"] == code]
    identity = ax.lines[0]
    assert list(identity.get_xdata()) == list(identity.get_ydata())
    lo, hi = ax.get_xlim()
    assert lo <= 70.0 and hi >= 350.0 and ax.get_ylim() == (lo, hi)


# ---- timeline --------------------------------------------------------------------------------

@pytest.mark.parametrize("prefix,run_id", [(SWEEP, "disk-cpus1-cachenone-bw8M"),
                                           (TWO_RANKS, "disk-cpusall-cachenone-bw8M"),
                                           (TWO_RANKS, "synthetic-cpusall")])
def test_timeline_spans_sum_to_the_recorded_times(prefix, run_id):
    run = store.read_run(store.run_path(prefix, run_id))
    ax = plots.timeline(run).axes[0]
    widths: dict[tuple[str, int], float] = {}
    for c in ax.collections:
        if isinstance(c, PolyCollection):
            name, _warm, rank = c.get_gid().split("|")
            key = (name, int(rank))
            widths[key] = widths.get(key, 0.0) + sum(float(np.ptp(p.vertices[:, 0]))
                                                     for p in c.get_paths())
    for rank in run.ranks:
        assert widths[("data wait", rank.rank)] == pytest.approx(sum(rank.wait_s), rel=1e-9)
        assert widths[("compute", rank.rank)] == \
            pytest.approx(sum(rank.iter_s) - sum(rank.wait_s), rel=1e-9)
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"rank {r.rank}" for r in run.ranks]
    assert f"{stalls.run_rate(run).wait_pct:.0f}% of measured time" in ax.get_title()


def test_timeline_run_is_the_one_that_waited_most():
    runs = store.load_runs(SWEEP)
    summary = summarize(runs).to_dict()
    worst = max(summary["runs"], key=lambda r: r["wait_pct"])
    assert plots.timeline_run(typed(summary), runs).run_id == worst["run_id"]
    assert worst["run_id"].endswith("bw8M")


# ---- files -----------------------------------------------------------------------------------

@pytest.fixture()
def prefix(tmp_path: Path) -> Path:
    return copy_of("report_sweep", tmp_path)


GRID = ["--cpus", "1,2,4", "--cache", "0,50%,none", "--storage-bw", "none,8M", "--workers", "2"]


@pytest.fixture(scope="session")
def answered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """report_sweep with `dsanalyze whatif`'s answer to GRID stored (whatif.json, newer than
    every run): fitted once per pytest-xdist worker (seconds of CPU); tests take a copy."""
    prefix = copy_of("report_sweep", tmp_path_factory.mktemp("answered"))
    assert cli.main(["whatif", str(prefix), *GRID, "--recommend", "--max-stall", "100%"]) == 0
    return prefix


@pytest.fixture()
def answered_prefix(answered: Path, tmp_path: Path) -> Path:
    """A writable copy of `answered`, its files' times kept (whatif.json stays fresh)."""
    return Path(shutil.copytree(answered, tmp_path / answered.name))


def test_plot_writes_png_and_svg(prefix):
    paths = app.plot(prefix)
    names = {p.name for p in paths}
    assert {"stall_breakdown.png", "stall_breakdown.svg", "timeline.png", "timeline.svg"} <= names
    img = imread(prefix / "stall_breakdown.png")
    assert img.shape[1] >= 900 and img.shape[0] >= 600  # 150 dpi: readable in a paper
    assert (prefix / "stall_breakdown.svg").read_text().lstrip().startswith("<?xml")
    docs = app.advise(prefix)  # no whatif.json stored: the plot fitted the advice's query
    assert docs.rows and ("whatif_heatmap.png" in names)
    assert ("validation.png" in names) == bool(docs.validation and docs.validation.runs)
    # without `fit`, and no whatif.json: no what-if figure, nothing fitted
    for p in paths:
        p.unlink()
    names = {p.name for p in app.plot(prefix, fit=False)}
    assert "stall_breakdown.png" in names and not any(n.startswith("whatif") for n in names)


def test_cli_plot_with_a_chosen_run(answered_prefix, capsys):
    """`plot --run` draws that run's timeline (the what-if figures from the stored
    whatif.json; the plot that fits is test_plot_writes_png_and_svg)."""
    prefix = answered_prefix
    assert cli.main(["plot", str(prefix), "--run", "synthetic-cpus2"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith(f"figures: {prefix}/ (") and "timeline" in out
    assert (prefix / "timeline.png").is_file()
    assert cli.main(["plot", str(prefix), "--run", "nope"]) == 2
    assert "no run 'nope'" in capsys.readouterr().err


def test_heatmap_cells_equal_the_whatif_json_of_the_real_model(answered_prefix):
    """`dsanalyze whatif` writes whatif.json; the redrawn heatmap shows exactly its numbers."""
    prefix = answered_prefix
    doc = json.loads((prefix / "whatif.json").read_text())
    docs = app.stored_whatif(prefix, store.load_runs(prefix))
    assert [r.to_dict() for r in docs.rows] == doc  # newer than every run: read, not refitted
    # any stall allowed: the cheapest measured configuration, by its measured numbers (no
    # prediction undercuts a measurement)
    (chosen,) = [r for r in doc if r["recommended"]]
    assert (chosen["cpus"], chosen["cache_bytes"], chosen["storage_read_bps"]) == \
        (1, None, 8 * MIB) and chosen["measured"]
    assert docs.recommendation == [
        "Recommended by `dsanalyze whatif` (whatif.json): **1 CPU, cache unlimited, disk "
        f"8M/s**: stalls {chosen['stall_pct']:.1f}% of the epoch, {chosen['rate_sps']:.1f} samples/s, "
        f"an epoch in {chosen['epoch_s']:.2f} s (compute {chosen['compute_s']:.2f} s, prep stall "
        f"{chosen['prep_stall_s']:.2f} s, fetch stall {chosen['fetch_stall_s']:.2f} s)"]
    fig = whatif_plots.whatif_heatmap(grid_of(doc))
    for ax, bps in zip(panels(fig), (8 * MIB, None)):
        grid = ax.images[0].get_array()
        plane = [r for r in doc if r["storage_read_bps"] == bps]
        caches = sorted({r["cache_bytes"] for r in plane}, key=lambda c: math.inf if c is None
                        else c)
        for r in plane:
            assert grid[[1, 2, 4].index(r["cpus"]), caches.index(r["cache_bytes"])] == \
                r["rate_sps"]
        measured = {(r["cpus"], r["cache_bytes"]) for r in plane if r["measured"]}
        assert measured == {(1, None), (2, None)}
        # these runs measured one (cold) epoch: no steady figure to show, so no box
        assert all(r["measured_sps"] is None for r in plane if r["measured"])
        assert len([p for p in ax.patches if p.get_gid() == "measured"]) == 0
    assert app.plot(prefix, fit=False)[-1].name == "whatif_curves.svg"  # no validation.json yet
    assert cli.main(["validate", str(prefix)]) == 0
    assert app.plot(prefix, fit=False)[-1].name == "validation.svg"


@pytest.mark.parametrize("values,label", [
    ({"compute_s": 1.0, "prep_stall_s": 0.5, "fetch_stall_s": None, "prep_stall_pct": 33.3,
      "fetch_stall_pct": None, "total_s": 1.5}, "prep 33%"),  # no disk run: no fetch stall measured
    ({"compute_s": None, "prep_stall_s": None, "fetch_stall_s": None, "prep_stall_pct": None,
      "fetch_stall_pct": None, "total_s": None}, "no stall data"),  # the synthetic run failed
])
def test_stall_breakdown_with_missing_modes(values, label):
    config = {**cfg(2, None, None), "key": "cpus2", "samples_per_epoch": 100, "modes": {},
              "enforced": {}, "verdict": "", **values}
    fig = plots.stall_breakdown(typed({"configs": [config]}))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.texts] == [label]
    assert [c.patches[0].get_height() for c in bars(fig).values()] == \
        [values[k] or 0.0 for k in ("compute_s", "prep_stall_s", "fetch_stall_s")]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["cpus=2"]


# Runs a dsanalyze entry point in a fresh interpreter, then says whether the what-if
# model's fitting module was ever imported: a fit cannot have happened without it.
FIT_PROBE = """
import sys
from dsanalyze import cli
main = cli.harness_main if sys.argv[1] == "harness" else cli.main
code = main(sys.argv[2:])
print("model fitted:", "dsanalyze.whatif.calibrate" in sys.modules)
sys.exit(code)
"""


def _probe(*argv: object) -> str:
    out = subprocess.run([sys.executable, "-c", FIT_PROBE, *map(str, argv)], capture_output=True,
                         text=True, timeout=600, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.slow
@pytest.mark.long
def test_harness_draws_the_figures_without_fitting_and_report_fits(small_dataset, tmp_path):
    """harness.py with plots (and no advice) on a fresh prefix draws the measured figures and
    fits no model; `dsanalyze report` fits one and draws the what-if figures."""
    prefix = tmp_path / "r"
    out = _probe("harness", "--data", small_dataset, "--prefix", prefix, "--modes",
                 "synthetic,cached", "-b", 8, "-j", 1, "--iters", 6, "--warmup", 1,
                 "--sim-step-ms", 10, "--no-cgroups", "--no-advice")
    assert "model fitted: False" in out
    for name in ("stall_breakdown.png", "stall_breakdown.svg", "timeline.png", "timeline.svg"):
        assert (prefix / name).is_file()
    assert not list(prefix.glob("whatif*")) and not (prefix / "validation.json").exists()
    # one line names the folder (not one per file)
    assert "figure: " not in out and f"figures: {prefix}/ (" in out
    out = _probe("main", "report", prefix)
    assert "model fitted: True" in out and (prefix / "report.md").is_file()
    assert "## What-if" in (prefix / "report.md").read_text()


# A caption word that names something drawn, and how to find it in the figure
FEATURES = {
    "orange": lambda fig: any(p.get_gid() == "recommended" for ax in fig.axes for p in ax.patches),
    "recommend": lambda fig: any(p.get_gid() == "recommended" for ax in fig.axes
                                 for p in ax.patches),
    "dashed": lambda fig: any(p.get_gid() == "measured" for ax in fig.axes for p in ax.patches),
    "circles": lambda fig: any(c.get_gid() == "measured" for ax in fig.axes
                               for c in ax.collections),
    "hatch": lambda fig: any(p.get_hatch() for ax in fig.axes for p in ax.patches),
    "cold": lambda fig: any(c.get_label().startswith("cold") for ax in fig.axes
                            for c in ax.collections),
    "interval": lambda fig: any(isinstance(c, ErrorbarContainer) for ax in fig.axes
                                for c in ax.containers)
    or any("±" in t.get_text() for ax in fig.axes for t in ax.texts),  # a heatmap cell's ±h
}


def test_report_captions_name_only_what_the_figure_draws():
    """The heatmap of a grid with no recommendation and no measured cell: its caption must not
    speak of an orange recommendation (as it did) or of dashed boxes."""
    rows = [{**r, "recommended": False, "measured": False, "measured_sps": None,
             "rate_sps_low": r["rate_sps"] * 0.9, "rate_sps_high": r["rate_sps"] * 1.1}
            for r in whatif_rows()]
    figures = {"whatif_heatmap": whatif_plots.whatif_heatmap(grid_of(rows)),
               "whatif_curves": whatif_plots.whatif_curves(grid_of(rows)),
               "validation": validation_figure.validation(validation_doc(VALIDATION)),
               "stall_breakdown": plots.stall_breakdown(typed(summary_of(TWO_RANKS)))}
    for name, fig in figures.items():
        caption = report_summary.FIGURE_CAPTIONS[name].lower()
        for word, drawn in FEATURES.items():
            if word in caption:
                assert drawn(fig), (name, word)


def text_boxes(fig) -> list:
    """(text, extent in pixels) of every visible text the renderer lays out at the figure's own
    (default) size: titles, labels, tick labels, annotations, legends, cell values."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    ticks, drawn = set(), set()  # tick labels, and those inside the view (the ones drawn)
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                ticks |= {id(tick.label1), id(tick.label2)}
            for tick in axis._update_ticks():
                drawn |= {id(tick.label1), id(tick.label2)}
    out = []
    for t in fig.findobj(Text):
        shown = t.get_visible() and t.get_text().strip() and \
            (id(t) not in ticks or id(t) in drawn) and \
            (t.axes is None or t.axes.get_visible()) and \
            all(a.get_visible() for a in (getattr(t, "_legend", None),) if a is not None)
        if shown:
            box = t.get_window_extent(renderer)
            if box.width > 0 and box.height > 0:
                out.append((t.get_text(), box))
    return out


def assert_no_text_overlaps(fig, name: str) -> None:
    boxes = text_boxes(fig)
    assert boxes, name
    width, height = fig.get_size_inches() * fig.dpi
    for i, (a, box_a) in enumerate(boxes):
        assert box_a.x0 >= -1 and box_a.x1 <= width + 1, (name, a, "outside the figure")
        assert box_a.y0 >= -1 and box_a.y1 <= height + 1, (name, a, "outside the figure")
        for b, box_b in boxes[i + 1:]:
            assert not box_a.overlaps(box_b), (name, a, b)


def summary_of_first(n: int) -> dict:
    """The 12-configuration sweep's summary cut to its first n configurations."""
    summary = summary_of(TWELVE)
    return {**summary, "configs": summary["configs"][:n]}


@pytest.mark.parametrize("n", [n if n in (1, 2, 5, 9, 12) else
                               pytest.param(n, marks=pytest.mark.extended) for n in range(1, 13)])
def test_stall_breakdown_text_never_overlaps(n):
    fig = plots.stall_breakdown(typed(summary_of_first(n)))
    assert len(bars(fig)["compute"].patches) == n
    assert_no_text_overlaps(fig, f"stall_breakdown of {n}")
    assert fig.get_size_inches()[0] * plots.DPI <= 1920  # a screen's width, saved


def twelve_rows(n_cpus: int, n_caches: int, bps_list=(None,)) -> list[dict]:
    """What-if rows over n_cpus x n_caches configurations, with intervals."""
    rows = []
    caches = [("0", 0), ("25%", 25 << 20), ("50%", 50 << 20), ("75%", 75 << 20),
              ("100%", 100 << 20), ("none", None)][:n_caches]
    for bps in bps_list:
        for cpus in (1, 2, 4, 8, 16, 32)[:n_cpus]:
            for spec, cache in caches:
                rate = 100.0 * cpus + (cache if cache is not None else 200 << 20) / (1 << 20)
                rows.append({"cpus": cpus, "cache_spec": spec, "cache_bytes": cache,
                             "storage_read_bps": bps, "gpu_speedup": 1.0, "nproc": 1,
                             "workers": 4, "rate_sps": rate, "rate_sps_low": rate * 0.8,
                             "rate_sps_high": rate * 1.25, "interval_level": 0.9,
                             "measured": cpus == 1, "measured_sps": rate - 3 if cpus == 1
                             else None, "recommended": (cpus, spec) == (2, "50%")})
    return rows


@pytest.mark.parametrize("shape,panels", [
    ((1, 1), 1), ((2, 6), 1), ((2, 6), 4),
    pytest.param((2, 3), 1, marks=pytest.mark.extended),
    pytest.param((3, 4), 4, marks=pytest.mark.extended),
    pytest.param((4, 6), 4, marks=pytest.mark.extended)])
def test_whatif_figures_text_never_overlaps(shape, panels):
    """1 to 24 configurations a panel, one or four bandwidths: every text apart, on a screen."""
    for bps_list in [(4 << 20, 8 << 20, 16 << 20, None)[-panels:]]:
        rows = twelve_rows(*shape, bps_list=bps_list)
        for name, fig in (("heatmap", whatif_plots.whatif_heatmap(grid_of(rows))),
                          ("curves", whatif_plots.whatif_curves(grid_of(rows)))):
            assert_no_text_overlaps(fig, f"{name} {shape} {len(bps_list)} panels")
            assert fig.get_size_inches()[0] * plots.DPI <= 1920, name


def test_validation_text_never_overlaps():
    runs = [check(f"disk-cpus{c}-cache{k}-bwnone", split, 50.0 + 10 * c + k, 55.0 + 9 * c + k,
                  40.0 + 9 * c, 70.0 + 9 * c + k)
            for c in (1, 2, 4) for k in (0, 1) for split in ("loo", "extrapolation")]
    fig = validation_figure.validation(validation_doc({**VALIDATION, "runs": runs}))
    assert_no_text_overlaps(fig, "validation of 12 predictions")


def title_boxes(fig) -> list:
    """(text, extent in pixels) of every axes title and the suptitle, as the renderer lays
    them out at the figure's own (default) size."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    texts = [t for ax in fig.axes for t in (ax.title, ax._left_title, ax._right_title)]
    texts += [fig._suptitle] if fig._suptitle is not None else []
    return [(t.get_text(), t.get_window_extent(renderer)) for t in texts if t.get_text()]


def test_figure_titles_never_overlap():
    """Three bandwidths, 2 ranks and 4 workers each: the long panel titles of the demo and of
    a heatmap with every knob named."""
    rows = whatif_rows(bps_list=(4 * MIB, 8 * MIB, None))
    rows = [{**r, "nproc": 2, "workers": 4} for r in rows]
    validation = VALIDATION
    figures = {"curves": whatif_plots.whatif_curves(grid_of(rows), typed(summary_of(SWEEP))),
               "heatmap": whatif_plots.whatif_heatmap(grid_of(rows)),
               "validation": validation_figure.validation(validation_doc(validation)),
               "stall_breakdown": plots.stall_breakdown(typed(summary_of(SWEEP)))}
    for name, fig in figures.items():
        boxes = title_boxes(fig)
        assert len(boxes) >= 1
        width = fig.get_size_inches()[0] * fig.dpi
        for i, (a, box_a) in enumerate(boxes):
            assert box_a.x0 >= 0 and box_a.x1 <= width, (name, a)
            for b, box_b in boxes[i + 1:]:
                assert not box_a.overlaps(box_b), (name, a, b)
