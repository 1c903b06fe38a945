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
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, copy_of
from matplotlib.collections import PathCollection, PolyCollection
from matplotlib.container import BarContainer
from matplotlib.image import imread
from matplotlib.patches import Rectangle

from dsanalyze import app, cli, store
from dsanalyze.analysis import stalls
from dsanalyze.analysis.summary import summarize
from dsanalyze.report import plots, whatif_plots

DATA = Path(__file__).parent / "data"
SWEEP, TWO_RANKS = DATA / "report_sweep", DATA / "report_2ranks"
MIB = 1 << 20


def summary_of(prefix: Path) -> dict:
    return summarize(store.load_runs(prefix)).to_dict()  # the figures read summary.json's keys


def bars(fig) -> dict[str, BarContainer]:
    ax = fig.axes[0]
    return {c.get_label(): c for c in ax.containers if isinstance(c, BarContainer)}


# ---- stall breakdown ------------------------------------------------------------------------

def test_stall_breakdown_bars_and_labels_equal_the_summary():
    summary = summary_of(SWEEP)
    fig = plots.stall_breakdown(summary)
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
        assert heights == pytest.approx({"compute": cfg["compute_s"],
                                         "prep stall": cfg["prep_stall_s"],
                                         "fetch stall": cfg["fetch_stall_s"]}, rel=1e-12)
        # stacked: each segment starts where the one below ends
        assert drawn["prep stall"].patches[i].get_y() == pytest.approx(cfg["compute_s"])
        assert drawn["fetch stall"].patches[i].get_y() == \
            pytest.approx(cfg["compute_s"] + cfg["prep_stall_s"])
    labels = [t.get_text() for t in ax.texts]
    assert labels == [f"prep {by_key[k]['prep_stall_pct']:.0f}%\n"
                      f"fetch {by_key[k]['fetch_stall_pct']:.0f}%" for k in order]
    # the throttled disk is fetch-bound at both CPU counts, the fast one is not
    assert labels[0].endswith("fetch 66%") and labels[1] == "prep 12%\nfetch 1%"
    assert "128 samples" in ax.get_title() and "cache unlimited" in ax.get_title()
    assert ax.get_ylabel() == "seconds per epoch"


def test_stall_breakdown_marks_the_cold_first_epoch():
    summary = summary_of(TWO_RANKS)
    (cfg,) = summary["configs"]
    ax = plots.stall_breakdown(summary).axes[0]
    (cold,) = [c for c in ax.collections if isinstance(c, PathCollection)]
    assert cold.get_offsets().tolist() == [[0, pytest.approx(cfg["modes"]["disk"]["epoch1_s"])]]
    assert cold.get_label() == "cold 1st epoch (disk)"


def cfg(cpus, cache_bytes, bps, spec=None):
    return {"cpus": cpus, "cache_bytes": cache_bytes, "storage_read_bps": bps,
            "cache_spec": spec or ("none" if cache_bytes is None else str(cache_bytes))}


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
    ordered, knobs = plots.ordered_configs(configs)
    assert knobs == varying
    got = [tuple(plots._KNOBS[k](c) for k in knobs) for c in ordered]
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
    (ax,) = panels(whatif_plots.whatif_heatmap(rows))
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
    fig = whatif_plots.whatif_heatmap(rows)
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
    titles = [ax.get_title() for ax in panels(whatif_plots.whatif_heatmap(rows))]
    assert titles == ["disk 1B/s\n1 rank", "disk 2B/s\n1 rank", "disk 3B/s\n1 rank",
                      "disk unthrottled\n1 rank"]


def test_heatmap_leaves_missing_cells_empty():
    rows = [r for r in whatif_rows() if (r["cpus"], r["cache_bytes"]) != (4, 0)]
    grid = np.ma.filled(whatif_plots.whatif_heatmap(rows).axes[0].images[0].get_array(), np.nan)
    assert math.isnan(grid[2, 0]) and grid[2, 1] == 450.0


def test_curves_draw_predictions_and_measured_points():
    rows = whatif_rows(bps_list=(None,), recommended=(2, 50), measured=((1, None), (2, None)))
    summary = summary_of(SWEEP)
    fig = whatif_plots.whatif_curves(rows, summary)
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
    (pts,) = [c for c in whatif_plots.whatif_curves(old, summary).axes[0].collections
              if c.get_gid() == "measured"]
    measured = {(c["cpus"]): c["modes"]["disk"]["rate_sps"] for c in summary["configs"]
                if c["storage_read_bps"] is None}
    assert pts.get_offsets().tolist() == [[0, pytest.approx(measured[1])],
                                          [1, pytest.approx(measured[2])]]


def test_validation_points_identity_and_errors():
    doc = {"runs": [{"run_id": "disk-a", "measured_sps": 80.0, "predicted_sps": 82.0,
                     "error_pct": 2.5},
                    {"run_id": "disk-b", "measured_sps": 240.0, "predicted_sps": 230.0,
                     "error_pct": -4.2}],
           "median_abs_error_pct": 3.35, "max_abs_error_pct": 4.2}
    ax = whatif_plots.validation(doc).axes[0]
    (pts,) = [c for c in ax.collections if isinstance(c, PathCollection)]
    assert pts.get_offsets().tolist() == [[80.0, 82.0], [240.0, 230.0]]
    identity = ax.lines[0]
    assert list(identity.get_xdata()) == list(identity.get_ydata())
    title = ax.get_title()
    assert "2 held-out runs" in title and "median |error| 3.4%" in title
    assert "max |error| 4.2%" in title
    assert [t.get_text() for t in ax.texts] == ["1", "2"]
    (listing,) = ax.figure.legends
    assert [t.get_text() for t in listing.get_texts()] == ["1: disk-a (+2.5%)",
                                                            "2: disk-b (-4.2%)"]
    lo, hi = ax.get_xlim()
    assert lo <= 80.0 and hi >= 240.0 and ax.get_ylim() == (lo, hi)


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
    assert plots.timeline_run(summary, runs).run_id == worst["run_id"]
    assert worst["run_id"].endswith("bw8M")


# ---- files -----------------------------------------------------------------------------------

@pytest.fixture()
def prefix(tmp_path: Path) -> Path:
    return copy_of("report_sweep", tmp_path)


def test_plot_writes_png_and_svg(prefix):
    paths = app.plot(prefix)
    names = {p.name for p in paths}
    assert {"stall_breakdown.png", "stall_breakdown.svg", "timeline.png", "timeline.svg"} <= names
    img = imread(prefix / "stall_breakdown.png")
    assert img.shape[1] >= 900 and img.shape[0] >= 600  # 150 dpi: readable in a paper
    assert (prefix / "stall_breakdown.svg").read_text().lstrip().startswith("<?xml")
    docs = app.advise(prefix)  # no whatif.json stored: the plot fitted the advice's query
    assert docs.rows and ("whatif_heatmap.png" in names)
    assert ("validation.png" in names) == bool(docs.validation and docs.validation["runs"])
    # without `fit`, and no whatif.json: no what-if figure, nothing fitted
    for p in paths:
        p.unlink()
    names = {p.name for p in app.plot(prefix, fit=False)}
    assert "stall_breakdown.png" in names and not any(n.startswith("whatif") for n in names)


def test_cli_plot_with_a_chosen_run(prefix, capsys):
    assert cli.main(["plot", str(prefix), "--run", "synthetic-cpus2"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith(f"figures: {prefix}/ (") and "timeline" in out
    assert (prefix / "timeline.png").is_file()
    assert cli.main(["plot", str(prefix), "--run", "nope"]) == 2
    assert "no run 'nope'" in capsys.readouterr().err


def test_heatmap_cells_equal_the_whatif_json_of_the_real_model(prefix, capsys):
    """`dsanalyze whatif` writes whatif.json; the redrawn heatmap shows exactly its numbers."""
    assert cli.main(["whatif", str(prefix), "--cpus", "1,2,4", "--cache", "0,50%,none",
                     "--storage-bw", "none,8M", "--recommend", "--max-stall", "100%"]) == 0
    capsys.readouterr()
    doc = json.loads((prefix / "whatif.json").read_text())
    docs = app.stored_whatif(prefix, store.load_runs(prefix))
    assert docs.rows == doc  # newer than every run: read, not refitted
    # any stall allowed: the cheapest of all, whatever the model predicts
    (chosen,) = [r for r in doc if r["recommended"]]
    assert (chosen["cpus"], chosen["cache_bytes"], chosen["storage_read_bps"]) == (1, 0, 8 * MIB)
    assert docs.recommendation == [
        "Recommended by `dsanalyze whatif` (whatif.json): **1 CPU, cache 0, disk 8M/s**: "
        f"stalls {chosen['stall_pct']:.1f}% of the epoch, {chosen['rate_sps']:.1f} samples/s, "
        f"an epoch in {chosen['epoch_s']:.2f} s (compute {chosen['compute_s']:.2f} s, prep stall "
        f"{chosen['prep_stall_s']:.2f} s, fetch stall {chosen['fetch_stall_s']:.2f} s)"]
    fig = whatif_plots.whatif_heatmap(doc)
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
      "fetch_stall_pct": None}, "prep 33%"),  # no disk run: no fetch stall measured
    ({"compute_s": None, "prep_stall_s": None, "fetch_stall_s": None, "prep_stall_pct": None,
      "fetch_stall_pct": None}, "no stall data"),  # the synthetic run failed
])
def test_stall_breakdown_with_missing_modes(values, label):
    config = {**cfg(2, None, None), "samples_per_epoch": 100, "modes": {}, **values}
    fig = plots.stall_breakdown({"configs": [config]})
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
    validation = {"runs": [{"run_id": f"disk-cpus{i}-cachenone-bw8M", "measured_sps": 80.0 + i,
                            "predicted_sps": 82.0 + i, "error_pct": 2.0} for i in (1, 2)],
                  "median_abs_error_pct": 2.0, "max_abs_error_pct": 2.0}
    figures = {"curves": whatif_plots.whatif_curves(rows, summary_of(SWEEP)),
               "heatmap": whatif_plots.whatif_heatmap(rows),
               "validation": whatif_plots.validation(validation),
               "stall_breakdown": plots.stall_breakdown(summary_of(SWEEP))}
    for name, fig in figures.items():
        boxes = title_boxes(fig)
        assert len(boxes) >= 1
        width = fig.get_size_inches()[0] * fig.dpi
        for i, (a, box_a) in enumerate(boxes):
            assert box_a.x0 >= 0 and box_a.x1 <= width, (name, a)
            for b, box_b in boxes[i + 1:]:
                assert not box_a.overlaps(box_b), (name, a, b)
