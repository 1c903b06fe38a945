"""The markdown and HTML report: every number is the summary's, every figure embedded."""

from __future__ import annotations

import base64
import re
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import copy_of

from dsanalyze import cli, store
from dsanalyze.analysis.summary import Summary, summarize
from dsanalyze.report import summary as report
from dsanalyze.report.document import render_html, render_markdown
from dsanalyze.report.text import Knobs, bandwidth_text, cache_text, fixed_width
from dsanalyze.report.verdicts import verdict_text
from dsanalyze.whatif.documents import ValidationDoc

DATA = Path(__file__).parent / "data"
SWEEP, TWO_RANKS = DATA / "report_sweep", DATA / "report_2ranks"
MIB = 1 << 20


def summary_of(prefix: Path) -> Summary:
    return summarize(store.load_runs(prefix))


@pytest.mark.parametrize("knob,cfg,text", [
    ("cpus", {"cpus": None}, "all CPUs"),
    ("cpus", {"cpus": 1}, "1 CPU"),
    ("cpus", {"cpus": 8}, "8 CPUs"),
    ("cache", {"cache_bytes": None, "cache_spec": "none"}, "cache unlimited"),
    ("cache", {"cache_bytes": 6 * MIB + MIB // 2, "cache_spec": "50%"}, "cache 50% (6.5M)"),
    ("cache", {"cache_bytes": 2 << 30, "cache_spec": "2G"}, "cache 2G"),
    ("cache", {"cache_bytes": 0, "cache_spec": "0"}, "cache 0"),
    ("bw", {"storage_read_bps": None}, "disk unthrottled"),
    ("bw", {"storage_read_bps": 40 * MIB}, "disk 40M/s"),
])
def test_knob_text(knob, cfg, text):
    assert report.knob_text(knob, Knobs(**cfg)) == text


@pytest.mark.parametrize("spec,cache_bytes,text", [
    ("none", None, "unlimited"), ("25%", 44 * MIB, "25% (44M)"), ("2G", 2 << 30, "2G"), ("0", 0, "0"),
    ("1000M", 1000 * MIB, "1000M"),  # as the user wrote it, not re-rounded to 0.977G
])
def test_cache_text_is_the_budget_as_asked(spec, cache_bytes, text):
    assert cache_text(spec, cache_bytes) == text


def test_one_label_for_a_configuration_in_every_view():
    cfg = Knobs(cpus=2, cache_spec="25%", cache_bytes=44 * MIB, storage_read_bps=8 * MIB,
                modes=("disk",))
    assert report.config_label(cfg) == "cpus=2 cache=25% (44M) bw=8M/s"
    assert report.knob_text("cache", cfg) == "cache 25% (44M)"
    assert bandwidth_text(None, "as measured") == "as measured"
    assert report.config_label(replace(cfg, modes=("cached",))) == "cpus=2"


def test_fixed_width_aligns_numbers_right_and_chosen_columns_left():
    lines = fixed_width(("name", "rate/s"), [["a", "1.5"], ["long name", "120.0"]],
                        left=frozenset({0}))
    assert lines == ["name       rate/s", "---------  ------", "a             1.5",
                     "long name   120.0"]
    assert fixed_width(("x", "y"), []) == ["x  y", "-  -"]


def test_markdown_report_reads_every_number_from_the_summary():
    summary = summary_of(SWEEP)
    md = render_markdown(report.report_blocks(summary, ["stall_breakdown.png"]))
    for row in report.table_rows(summary):
        assert "| " + " | ".join(row) + " |" in md
    for cfg in summary.configs:
        assert f"- **{report.config_label(cfg)}**: {verdict_text(cfg.verdict)}" in md
    assert "- **CPUs**: 1 CPU, 2 CPUs" in md
    assert "- **Storage**: disk unthrottled, disk 8M/s" in md
    assert "- **Enforced** storage bw: cgroup v1 read throttle on 254:0" in md
    assert "- **Dataset**: 128 files, 12.7M" in md
    # the built-in job keeps its workers (jobs/image_classification.py: persistent_workers)
    assert "2 workers per rank, batch 8 per rank, prefetch 2, 1 rank(s), persistent workers, " \
        "device sim (30 ms per step)" in md
    assert "Per epoch of 128 samples" in md
    assert "![Seconds per epoch" in md and "](stall_breakdown.png)" in md
    assert [h for h in re.findall(r"^#+ .*$", md, re.M)] == [
        "# Data-stall report", "## Configuration", "## Stall breakdown", "## Verdict",
        "## What-if", "## Figures"]


def test_cold_epoch_is_reported_beside_the_verdict():
    summary = summary_of(TWO_RANKS)
    (cfg,) = summary.configs
    disk = cfg.modes["disk"]
    md = render_markdown(report.report_blocks(summary))
    assert f"the first (cold) epoch took {disk.epoch1_s:.2f} s, the steady-state epochs " \
           f"{disk.time_s:.2f} s" in md
    assert "2 rank(s)" in md


def test_whatif_section():
    summary = summary_of(SWEEP)
    validation = ValidationDoc.from_dict(
        {"runs": [{"run_id": "a", "measured_sps": 1.0, "predicted_sps": 1.0,
                   "error_pct": 0.0}] * 3, "median_abs_error_pct": 2.04, "max_abs_error_pct": 7.5})
    md = render_markdown(report.report_blocks(
        summary, recommendation=["2 CPUs and 50% cache: stalls 3%, 1.8x faster"],
        validation=validation, whatif_note="storage not varied"))
    section = md.split("## What-if")[1]
    assert "- 2 CPUs and 50% cache: stalls 3%, 1.8x faster" in section
    assert "3 held-out run(s): median 2.0%, maximum 7.5%" in section
    assert "storage not varied" in section


def test_html_embeds_the_images_and_escapes_text(tmp_path):
    png = b"\x89PNG\r\n\x1a\n not really a png"
    blocks = [("h1", "a <b> & c"), ("p", "**bold** and `code`"),
              ("table", ["x", "y"], [["1<2", "3"]]), ("img", "f.png", "caption"),
              ("img", "missing.png", "skipped")]
    page = render_html(blocks, {"f.png": png})
    assert "<h1>a &lt;b&gt; &amp; c</h1>" in page
    assert "<p><b>bold</b> and <code>code</code></p>" in page
    assert "<td>1&lt;2</td>" in page
    (data,) = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page)
    assert base64.b64decode(data) == png
    assert "missing.png" not in page


def test_terminal_table_layout():
    summary = summary_of(SWEEP)
    lines = report.render_table(summary).splitlines()
    assert lines[0] == ("Stall breakdown per epoch (128 samples) on device sim (30 ms per step); "
                        "rates in samples/s; CPUs busy: cores the cached run kept busy, of its CPUs")
    assert lines[1].split() == ["config", "synthetic/s", "cached/s", "disk/s", "epoch", "s",
                                "compute", "s", "CPUs", "busy", "prep", "stall", "fetch", "stall",
                                "verdict"]
    assert len(lines) == 3 + len(summary.configs) + len(report.notes(summary))
    assert report.render_markdown_table(summary).splitlines()[2].startswith("| cpus=1 ")


def test_cpus_busy_column_is_within_the_cpus_given():
    """A cgroup confined to C CPUs cannot keep more than C cores busy; its workers decode
    JPEGs while the sim step sleeps, so a cached run keeps some core busy."""
    summary = summary_of(SWEEP)
    rows = [r for r in report.table_rows(summary) if r[0] != report.COLD_LABEL]
    assert len(rows) == len(summary.configs)
    for cfg, row in zip(summary.configs, rows):
        busy, given = row[report.COLUMNS.index("CPUs busy")].split("/")
        assert int(given) == cfg.cpus
        assert 0.1 < float(busy) <= 1.02 * cfg.cpus


@pytest.fixture()
def prefix(tmp_path: Path) -> Path:
    return copy_of("report_sweep", tmp_path)


def test_write_report(prefix, capsys):
    assert cli.main(["report", str(prefix)]) == 0
    out = capsys.readouterr().out
    assert f"report: {prefix / 'report.md'}" in out and f"report: {prefix / 'report.html'}" in out
    md = (prefix / "report.md").read_text()
    linked = re.findall(r"\]\(([^)]+\.png)\)", md)
    assert {"stall_breakdown.png", "timeline.png"} <= set(linked)
    page = (prefix / "report.html").read_text()
    embedded = [base64.b64decode(d) for d in
                re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page)]
    assert embedded == [(prefix / name).read_bytes() for name in linked]
    # A throttled configuration reads the whole dataset cold at 8M/s: its epoch lasts at least
    # bytes / bandwidth, and all of that beyond the cached epoch waits on storage.
    summary = summary_of(prefix)
    throttled = [c for c in summary.configs if c.storage_read_bps]
    assert len(throttled) == 2
    for cfg in throttled:
        floor_s = summary.dataset.total_bytes / cfg.storage_read_bps
        share_pct = 100 * (1 - cfg.modes["cached"].time_s / floor_s)
        said = re.search(rf"\*\*{re.escape(report.config_label(cfg))}\*\*: likely highly "
                         r"fetch-bound: (\d+)% ±\d+ of time is fetch stall", md)
        assert said is not None and abs(int(said.group(1)) - share_pct) <= 3


def test_headline_names_the_most_and_least_stalled():
    summary = summary_of(SWEEP)
    md = render_markdown(report.report_blocks(summary))
    by_stall = sorted(summary.configs, key=lambda c: c.prep_stall_pct + c.fetch_stall_pct)
    most, least = by_stall[-1], by_stall[0]
    assert most.storage_read_bps == 8 * MIB and least.cpus == 2
    assert f"Most stalled: **{report.config_label(most)}**, {verdict_text(most.verdict)}. " \
           f"Least stalled: **{report.config_label(least)}**, {verdict_text(least.verdict)}." in md
