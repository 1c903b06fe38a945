"""The use cases, one function each: what `harness.py` and `dsanalyze` do, without printing.

    outcome = app.profile(sweep, dataset, progress)   # measure: harness.py
    summary = app.summarize(prefix)                    # the stall table's document
    answer = app.whatif(WhatIfRequest(prefix, ...))    # predict other hardware
    checked = app.validate(prefix)                     # the model, out of sample
    advice = app.advise(prefix)                        # the answer printed after the table
    paths = app.plot(prefix) ; app.report(prefix) ; app.trace(prefix)

This module owns the store's I/O for the analysis (reading runs, writing
`summary.json`, `whatif.json`, `validation.json`, the figures and the
report), stale-result detection (a stored document older than a run is not
used), dataset rescans and the defaults of each query. `analysis/` computes
and `report/` draws from the values passed to them; neither reads a file.
`cli.py` turns argv into calls here and prints what they return
(docs/design.md, "Module map").

A model is fitted only where a use case asks for one: `whatif`, `validate`,
`advise`, `report`, and `plot` (which fits only when no fresh `whatif.json`
is stored and `fit` is true). `harness.py` draws its figures with `fit=False`,
from the advice it already computed or from a stored `whatif.json`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsanalyze import config, nodes, store
from dsanalyze.config import Sweep
from dsanalyze.errors import ConfigError, DsAnalyzeError, StoreError
from dsanalyze.fingerprint import check_consistent
from dsanalyze.records import RunResult
from dsanalyze.report.whatif_docs import WhatIfDocs, recommended_text
from dsanalyze.whatif.advice import DEFAULT_CACHES

WHATIF_JSON, VALIDATION_JSON, SUMMARY_JSON = "whatif.json", "validation.json", "summary.json"
ADAPTIVE_JSON = "adaptive.json"  # --adaptive: every decision, runs and seconds against the grid
DEFAULT_CACHE_GRID = DEFAULT_CACHES  # `dsanalyze whatif --cache`, as the advice's grid


# ---- measuring ------------------------------------------------------------------------------

def find_data(sweep: Sweep) -> tuple[Any, str]:
    """The sweep's dataset (`jobs.datasets.DatasetInfo`) and a line saying where it came from."""
    from dsanalyze.datafind import dataset_for

    return dataset_for(sweep.job, Path(sweep.prefix))


def profile(sweep: Sweep, dataset: Any = None, progress: Callable[[str], None] | None = None,
            lock_wait_s: float = 0.0) -> Any:
    """Measure every run of the sweep not already complete; `summary.json` is written even
    when the sweep stops half-way. Returns `sweep.SweepOutcome` with its summary document."""
    from dsanalyze.sweep import run_sweep

    try:
        outcome = run_sweep(sweep, progress=progress, dataset=dataset, lock_wait_s=lock_wait_s)
    finally:
        doc = _write_summary(Path(sweep.prefix))
    if outcome.adaptive is not None:
        store.write_json_atomic(Path(sweep.prefix) / ADAPTIVE_JSON, outcome.adaptive.to_dict())
    from dsanalyze.analysis import stalls

    outcome.summary = doc if doc is not None else stalls.summary([])
    return outcome


# ---- the stall table ------------------------------------------------------------------------

@dataclass(frozen=True)
class Summary:
    document: dict[str, Any]  # the `summary.json` document (`analysis.stalls.summary`)
    merged_runs: int = 0  # runs joined with other nodes' ranks (`--merge`)
    unreadable: tuple[str, ...] = ()  # "PATH (why)" of run files left out


def summarize(prefix: str | Path, merge: Sequence[str | Path] = ()) -> Summary:
    """Recompute `PREFIX/summary.json` from the stored runs (after joining other nodes'
    prefixes, when `merge` names them)."""
    prefix = Path(prefix)
    merged = nodes.merge_into_prefix(prefix, [Path(d) for d in merge]) if merge else []
    doc = _write_summary(prefix)
    if doc is None:
        raise ConfigError(f"no runs under {prefix}: run harness.py --prefix {prefix} first")
    return Summary(doc, len(merged), tuple(doc.get("unreadable_runs", ())))


def _write_summary(prefix: Path) -> dict[str, Any] | None:
    from dsanalyze.analysis import stalls

    if not store.runs_dir(prefix).is_dir():
        return None
    runs, unreadable = store.load_readable_runs(prefix)
    if not runs:
        return None
    check_consistent(runs)
    doc = stalls.summary(runs)
    if unreadable:
        doc["unreadable_runs"] = unreadable
    store.write_json_atomic(prefix / SUMMARY_JSON, doc)
    return doc


# ---- what-if --------------------------------------------------------------------------------

@dataclass(frozen=True)
class WhatIfRequest:
    """A what-if query: the grid of hardware to predict, from the runs of `prefix`.

    `cpus` None: the measured counts, 2x and 4x the largest. `cache`: budgets
    as written (`50%`, `2G`, `none`). `storage_bps`: None is the measured
    device. `nproc`/`workers` None: as measured.
    """

    prefix: str
    cpus: tuple[int, ...] | None = None
    cache: tuple[str, ...] = DEFAULT_CACHE_GRID
    storage_bps: tuple[float | None, ...] = (None,)
    gpu_speedup: float = 1.0
    nproc: int | None = None
    nnodes: int = 1
    workers: tuple[int | None, ...] = (None,)
    cache_policy: str = "pagecache"
    recommend: bool = False
    max_stall_pct: float = 5.0
    epochs: int = 1


@dataclass(frozen=True)
class WhatIfAnswer:
    model: Any  # whatif.model.Model
    predictions: list[Any]  # whatif.api.Prediction, one per configuration
    recommendation: Any  # whatif.recommend.Recommendation, or None
    document: dict[str, Any]  # what `whatif.json` holds
    path: Path


def whatif(req: WhatIfRequest) -> WhatIfAnswer:
    """Fit the model on the prefix's runs, predict the request's grid, write `whatif.json`."""
    from dsanalyze.whatif import api as model_whatif
    from dsanalyze.whatif import recommend
    from dsanalyze.whatif.advice import default_cpus

    runs, sizes = runs_and_sizes(req.prefix)
    model = model_whatif.fit(runs, sizes, req.cache_policy)
    cpus = req.cpus or tuple(default_cpus(runs))
    dataset_bytes = next(r.dataset.total_bytes for r in runs if r.ok)
    cfgs = model_whatif.configs(cpus, list(req.cache), list(req.storage_bps), dataset_bytes,
                                req.gpu_speedup, req.nproc, list(req.workers), req.nnodes)
    preds = model_whatif.grid(model, cfgs, runs)
    rec = recommend.recommend(model, preds, runs, req.max_stall_pct, req.epochs) \
        if req.recommend else None
    doc = model_whatif.whatif_document(preds, rec)
    path = Path(req.prefix) / WHATIF_JSON
    store.write_json_atomic(path, doc)
    return WhatIfAnswer(model, preds, rec, doc, path)


@dataclass(frozen=True)
class Validation:
    validation: Any  # whatif.validation's result: both splits, errors, coverage
    cache_checks: list[Any]  # the cache simulator against each disk run's read counter
    document: dict[str, Any]  # what `validation.json` holds
    path: Path


def validate(prefix: str | Path, cache_policy: str = "pagecache") -> Validation:
    """The model judged out of sample (leave-one-out and extrapolation); `validation.json`."""
    from dsanalyze.whatif import api as model_whatif

    runs, sizes = runs_and_sizes(prefix)
    val = model_whatif.validate(runs, sizes, cache_policy)
    doc = model_whatif.validation_document(val)
    path = Path(prefix) / VALIDATION_JSON
    store.write_json_atomic(path, doc)
    return Validation(val, model_whatif.cache_check(val.model, runs), doc, path)


def advise(prefix: str | Path, runs: list[RunResult] | None = None) -> WhatIfDocs:
    """The answer printed after the table: the advice's own what-if query over its default
    grid (`whatif/advice.py`), its validation, and the answer in words."""
    from dsanalyze.report.advice import advice_text
    from dsanalyze.whatif.advice import advise as advice_of

    runs = store.load_runs(prefix) if runs is None else runs
    a = advice_of(runs, dataset_sizes(runs))
    notes = [] if a.rows else [f"What-if: no model fitted on these runs: {a.note}"]
    if a.rows and a.validation is None:
        notes.append(f"Validation: {a.validation_note}")
    return WhatIfDocs(a.rows, a.validation, [advice_text(a)], " ".join(notes) or None, a)


def stored_whatif(prefix: str | Path, runs: list[RunResult]) -> WhatIfDocs | None:
    """The last `dsanalyze whatif` answer of the prefix, if it is newer than every run;
    its `validation.json` too when that is fresh."""
    rows = _fresh(Path(prefix), WHATIF_JSON)
    if rows is None:
        return None
    recommendation = [f"Recommended by `dsanalyze whatif` ({WHATIF_JSON}): {recommended_text(r)}"
                      for r in rows if r.get("recommended")]
    return WhatIfDocs(rows, _fresh(Path(prefix), VALIDATION_JSON), recommendation)


def _fresh(prefix: Path, name: str) -> Any:
    """A JSON document of the prefix, if it is newer than every run file; else None."""
    path = prefix / name
    runs = list(store.runs_dir(prefix).glob("*.json"))
    if not path.is_file() or any(r.stat().st_mtime > path.stat().st_mtime for r in runs):
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # half-written by a killed command: as if there were none


def runs_and_sizes(prefix: str | Path) -> tuple[list[RunResult], list[int] | None]:
    """The runs of a prefix (some completed), and their dataset's file sizes if it is there."""
    runs = store.load_runs(prefix)
    if not any(r.ok for r in runs):
        raise ConfigError(f"no completed runs under {prefix}: run harness.py --prefix {prefix}")
    return runs, dataset_sizes(runs)


def dataset_sizes(runs: list[RunResult]) -> list[int] | None:
    """The file sizes of the runs' data, scanned again the way the harness found it (an
    ImageFolder, or the `--data` file set); None when it is gone or changed, or was found by
    a discovery run (the size quantiles recorded with each run serve then)."""
    from dsanalyze.fileset import scan_files
    from dsanalyze.jobs.datasets import scan_dataset

    ok = [r for r in runs if r.ok]
    if not ok:
        return None
    job = ok[0].spec.job
    if job.data_dir is None:
        return None
    try:
        data = scan_dataset(job.data_dir) if job.script is None else scan_files(job.data_dir)
    except (DsAnalyzeError, OSError):
        return None
    sizes = list(data.file_bytes)
    return sizes if len(sizes) == ok[0].dataset.num_files else None


# ---- figures, report, trace -----------------------------------------------------------------

def plot(prefix: str | Path, run_id: str | None = None, docs: WhatIfDocs | None = None,
         fit: bool = True) -> list[Path]:
    """Draw every figure of the prefix as PNG and SVG; returns the files written.

    The what-if figures come from `docs` when given, else from a fresh
    `whatif.json`, else (only when `fit`) from the advice's query fitted here.
    """
    from dsanalyze.analysis import stalls

    prefix = Path(prefix)
    runs = store.load_runs(prefix)
    if run_id is not None and not any(r.run_id == run_id for r in runs):
        raise StoreError(f"no run {run_id!r} under {prefix}: pick one of "
                         + ", ".join(r.run_id for r in runs))
    docs = docs or stored_whatif(prefix, runs) or (advise(prefix, runs) if fit else WhatIfDocs())
    return _draw(prefix, runs, stalls.summary(runs), docs, run_id)


def _draw(prefix: Path, runs: list[RunResult], summary: dict[str, Any], docs: WhatIfDocs,
          run_id: str | None = None) -> list[Path]:
    """Save every figure of runs already loaded and summarised, as PNG and SVG."""
    from dsanalyze.report import plots

    figures = plots.figures(summary, runs, docs, run_id)
    return [p for name, fig in figures.items() for p in plots.save(fig, prefix, name)]


def report(prefix: str | Path) -> list[Path]:
    """Write `PREFIX/report.md` and the self-contained `report.html`, figures redrawn.

    Its what-if section is the advice's own query, fitted here (not the last
    `whatif` query, whose grid may answer another question)."""
    from dsanalyze.analysis import stalls
    from dsanalyze.report import summary as report_text
    from dsanalyze.report.shards import shard_blocks

    prefix = Path(prefix)
    runs = store.load_runs(prefix)
    docs = advise(prefix, runs)
    summary = stalls.summary(runs)
    pngs = [p for p in _draw(prefix, runs, summary, docs) if p.suffix == ".png"]
    blocks = report_text.report_blocks(summary, [p.name for p in pngs],
                                       docs.recommendation, docs.validation, docs.note,
                                       title=f"Data-stall report: {prefix.name}")
    blocks += shard_blocks(runs)  # streaming datasets: reads per shard
    md, page = prefix / "report.md", prefix / "report.html"
    md.write_text(report_text.render_markdown(blocks))
    page.write_text(report_text.render_html(blocks, {p.name: p.read_bytes() for p in pngs}))
    return [md, page]


def trace(prefix: str | Path, run_id: str | None = None,
          output: str | Path | None = None) -> Path:
    """Write `PREFIX/trace.json` (or `output`) for one run, or for every run of the prefix."""
    from dsanalyze.report.trace import chrome_trace

    every = sorted(store.load_runs(prefix), key=lambda r: r.started_unix_s)
    runs = [r for r in every if run_id is None or r.run_id == run_id]
    if not runs:
        raise StoreError(f"no run {run_id!r} under {prefix}: pick one of "
                         + ", ".join(r.run_id for r in every))
    path = Path(output) if output else Path(prefix) / "trace.json"
    store.write_json_atomic(path, chrome_trace(runs))
    return path


# ---- data -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class MadeDataset:
    files: int
    total_bytes: int
    root: str
    size_text: str = field(default="")


def make_dataset(root: str, images: int, classes: int, size: str, jitter: float,
                 seed: int) -> MadeDataset:
    """Write a JPEG ImageFolder (`jobs/datasets.py`)."""
    from dsanalyze.jobs.datasets import make_dataset as write_images
    from dsanalyze.jobs.datasets import parse_size

    n, total = write_images(root, images, classes, parse_size(size), jitter, seed)
    return MadeDataset(n, total, root, config.format_bytes(total))
