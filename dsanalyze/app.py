"""The use cases, one function each: what `harness.py` and `dsanalyze` do, without printing.

    outcome = app.harness(HarnessRequest(options))     # harness.py: measure, table, advice
    measured = app.profile(sweep, dataset, progress)  # measure only
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

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsanalyze import config, nodemerge, store
from dsanalyze.config import Sweep
from dsanalyze.errors import ConfigError, DsAnalyzeError, RunFailed, StoreError
from dsanalyze.fingerprint import check_consistent
from dsanalyze.options import HarnessOptions, build_sweep
from dsanalyze.records import RunResult
from dsanalyze.report.whatif_docs import WhatIfDocs, recommended_text

if TYPE_CHECKING:  # types only: the measuring side is imported by the use cases that run it
    from dsanalyze.analysis.summary import Summary
    from dsanalyze.dataset import DatasetInfo
    from dsanalyze.sweep import SweepOutcome
    from dsanalyze.whatif.advice import Advice
    from dsanalyze.whatif.api import CacheCheck, Prediction
    from dsanalyze.whatif.model import Model
    from dsanalyze.whatif.validation import Validation as ModelValidation

WHATIF_JSON, VALIDATION_JSON, SUMMARY_JSON = "whatif.json", "validation.json", "summary.json"
ADAPTIVE_JSON = "adaptive.json"  # --adaptive: every decision, runs and seconds against the grid


# ---- measuring ------------------------------------------------------------------------------

@dataclass(frozen=True)
class HarnessRequest:
    """What `harness.py` asks: its options (over the config file and the scheduler's
    environment), whether to fit the advice after the table, how long to wait for the
    dataset's lock."""

    options: HarnessOptions
    advice: bool = True
    lock_wait_s: float = 0.0
    verify: bool = False  # after the advice, measure its pick (`verify`)


@dataclass(frozen=True)
class ProfileOutcome:
    """What `profile` measured: the sweep's runs, and `summary.json` written after them."""

    sweep: SweepOutcome
    summary: Summary  # what `summary.json` holds


@dataclass(frozen=True)
class HarnessOutcome:
    """The whole answer of `harness.py`, in the order it is printed."""

    sweep: Sweep  # as run: command line over config file over scheduler
    profile: ProfileOutcome
    table: str  # the stall table (`report.summary.render_table`)
    node_note: str | None  # a node other than 0: its table covers its own ranks only
    recommendation: tuple[str, ...] | None  # the advice in words; None: not asked, or no runs
    summary_path: Path
    figures: tuple[Path, ...]  # PNG and SVG files drawn; empty with --no-plots
    failure: RunFailed | None  # the runs that failed, raised once the answer is out
    verified: str | None = None  # `--verify`: the pick measured against its prediction, in words


def harness(req: HarnessRequest, progress: Callable[[str], None] | None = None,
            announce: Callable[[str], None] | None = None) -> HarnessOutcome:
    """The profile use case whole: find the data, measure, table, advice, figures.

    `progress` gets one line per run as it ends; `announce` the line saying which files
    were measured (part of the answer, before the sweep starts).
    """
    from dsanalyze.report.summary import render_table

    sweep = build_sweep(req.options)
    dataset, chosen = find_data(sweep)
    if chosen and announce is not None:
        announce(chosen)
    measured = profile(sweep, dataset, progress, req.lock_wait_s)
    docs = advise(sweep.prefix) if req.advice and measured.summary.runs else None
    verified = _verified(sweep, docs, progress, req.lock_wait_s) if req.verify else None
    figures = plot(sweep.prefix, docs=docs, fit=False) \
        if sweep.plots and measured.summary.configs else []
    return HarnessOutcome(
        sweep, measured, render_table(measured.summary), _node_note(sweep),
        tuple(docs.recommendation) if docs is not None else None,
        Path(sweep.prefix) / SUMMARY_JSON, tuple(figures), _failure(measured.sweep), verified)


def _verified(sweep: Sweep, docs: WhatIfDocs | None, progress: Callable[[str], None] | None,
              lock_wait_s: float) -> str:
    return verify(sweep.prefix, docs.advice if docs else None, progress, sweep.use_cgroups,
                  lock_wait_s).text


def _node_note(sweep: Sweep) -> str | None:
    job = sweep.job
    if job.node_rank == 0:
        return None
    return (f"node {job.node_rank} of {job.nnodes}: this table covers this node's ranks only; "
            "node 0's prefix holds the whole job")


def _failure(outcome: SweepOutcome) -> RunFailed | None:
    if not outcome.failed:
        return None
    first = outcome.failed[0]
    return RunFailed(f"{len(outcome.failed)} run(s) failed; first: {first.run_id} "
                     f"{first.status}: {first.error}")


def find_data(sweep: Sweep) -> tuple[DatasetInfo, str]:
    """The sweep's dataset and a line saying where it came from ("" when `--data` named it)."""
    from dsanalyze.datafind import dataset_for
    from dsanalyze.sweep import before_meeting, check_cpus

    def find() -> tuple[Any, str]:
        check_cpus(sweep)  # before the scan or the discovery run: they can take minutes
        return dataset_for(sweep.job, Path(sweep.prefix))
    return before_meeting(sweep, find)


def profile(sweep: Sweep, dataset: DatasetInfo | None = None,
            progress: Callable[[str], None] | None = None,
            lock_wait_s: float = 0.0, known_runs: Sequence[RunResult] = ()) -> ProfileOutcome:
    """Measure every run of the sweep not already complete; `summary.json` is written even
    when the sweep stops half-way. `known_runs`: runs of the job stored elsewhere
    (`run_sweep`)."""
    from dsanalyze.analysis.summary import summarize
    from dsanalyze.sweep import run_sweep

    try:
        outcome = run_sweep(sweep, progress=progress, dataset=dataset, lock_wait_s=lock_wait_s,
                            known_runs=known_runs)
    finally:
        summary = _write_summary(Path(sweep.prefix))
    if outcome.adaptive is not None:
        store.write_json_atomic(Path(sweep.prefix) / ADAPTIVE_JSON, outcome.adaptive.to_dict())
    return ProfileOutcome(outcome, summary if summary is not None else summarize([]))


# ---- the stall table ------------------------------------------------------------------------

@dataclass(frozen=True)
class SummaryOutcome:
    summary: Summary  # what `summary.json` holds
    table: str  # the stall table in words (`report.summary.render_table`)
    merged_runs: int = 0  # runs joined with other nodes' ranks (`--merge`)

    @property
    def unreadable(self) -> tuple[str, ...]:
        """"PATH (why)" of run files left out."""
        return self.summary.unreadable_runs


def summarize(prefix: str | Path, merge: Sequence[str | Path] = ()) -> SummaryOutcome:
    """Recompute `PREFIX/summary.json` from the stored runs (after joining other nodes'
    prefixes, when `merge` names them)."""
    from dsanalyze.report.summary import render_table

    prefix = Path(prefix)
    merged = nodemerge.merge_into_prefix(prefix, [Path(d) for d in merge]) if merge else []
    summary = _write_summary(prefix)
    if summary is None:
        raise ConfigError(f"no runs under {prefix}: run harness.py --prefix {prefix} first")
    return SummaryOutcome(summary, render_table(summary), len(merged))


def _write_summary(prefix: Path) -> Summary | None:
    from dsanalyze.analysis.summary import summarize

    if not store.runs_dir(prefix).is_dir():
        return None
    runs, unreadable = store.load_readable_runs(prefix)
    if not runs:
        return None
    check_consistent(runs)
    summary = dataclasses.replace(summarize(runs), unreadable_runs=tuple(unreadable))
    store.write_json_atomic(prefix / SUMMARY_JSON, summary.to_dict())
    return summary


# ---- what-if --------------------------------------------------------------------------------

@dataclass(frozen=True)
class WhatIfRequest:
    """A what-if query: the grid of hardware to predict, from the runs of `prefix`.

    A knob left None takes the advice's grid (`whatif.advice.default_grid`):
    `cpus` the measured counts, 2x and 4x the largest; `cache` 0, 25%, ...,
    100%, the measured budgets and none; `storage_bps` the measured bandwidths
    and the device (None in the tuple); `workers` as measured, 2x and 4x. So
    `--recommend` with no values gives the advice's answer. `cache`: budgets
    as written (`50%`, `2G`, `none`). `nproc` None: as measured. `epochs`
    None: as many as the disk runs measured. With remote runs the grid is
    links and concurrency instead (`whatif.netgrid`: `net_bw_bps`,
    `net_latency_s`, `cpus`, `workers`).
    """

    prefix: str
    cpus: tuple[int, ...] | None = None
    cache: tuple[str, ...] | None = None
    storage_bps: tuple[float | None, ...] | None = None
    gpu_speedup: float = 1.0
    nproc: int | None = None
    nnodes: int = 1
    workers: tuple[int | None, ...] | None = None
    net_bw_bps: tuple[int | None, ...] | None = None  # remote data: links (None: unshaped)
    net_latency_s: tuple[float, ...] | None = None
    cache_policy: str = "pagecache"
    recommend: bool = False
    max_stall_pct: float = 5.0
    epochs: int | None = None


@dataclass(frozen=True)
class WhatIfAnswer:
    model: Model
    predictions: list[Prediction]  # one per configuration
    advice: Advice | None  # with `--recommend`: the decision (the advice's own), else None
    document: dict[str, Any]  # what `whatif.json` holds
    path: Path
    text: str  # the answer in words (`report.whatif_text.answer_text`)


def whatif(req: WhatIfRequest) -> WhatIfAnswer:
    """Fit the model on the prefix's runs, predict the request's grid, write `whatif.json`;
    with `recommend`, the decision over it (`whatif.advice.conclude`, the advice's own)."""
    from dsanalyze.report.whatif_text import answer_text
    from dsanalyze.whatif import advice as advice_of
    from dsanalyze.whatif import api as model_whatif
    from dsanalyze.whatif import netgrid

    runs, sizes = runs_and_sizes(req.prefix)
    model = model_whatif.fit(runs, sizes, req.cache_policy)
    cpus, caches, bws, workers = advice_of.default_grid(runs)
    dataset_bytes = next(r.dataset.total_bytes for r in runs if r.ok)
    cfgs = model_whatif.configs(
        req.cpus or cpus, list(req.cache or caches), list(req.storage_bps or bws),
        dataset_bytes, req.gpu_speedup, req.nproc, list(req.workers or workers), req.nnodes)
    preds = netgrid.predictions(model, runs, req.cpus, req.workers, req.net_bw_bps,
                                req.net_latency_s) or model_whatif.grid(model, cfgs, runs)
    answer = None
    if req.recommend:
        val, why = advice_of.validation(runs, sizes, req.cache_policy)
        answer = advice_of.conclude(model, preds, runs, val, why, req.max_stall_pct,
                                    req.epochs, model_whatif.grid_rows)
    doc = [r.to_dict() for r in (answer.rows if answer else model_whatif.grid_rows(preds))]
    path = Path(req.prefix) / WHATIF_JSON
    store.write_json_atomic(path, doc)
    return WhatIfAnswer(model, preds, answer, doc, path, answer_text(model, preds, answer))


@dataclass(frozen=True)
class Validation:
    validation: ModelValidation  # both splits, errors, coverage
    cache_checks: list[CacheCheck]  # the cache simulator against each disk run's read counter
    document: dict[str, Any]  # what `validation.json` holds
    path: Path
    text: str  # in words (`report.whatif_text.validation_text`)


def validate(prefix: str | Path, cache_policy: str = "pagecache") -> Validation:
    """The model judged out of sample (leave-one-out and extrapolation); `validation.json`."""
    from dsanalyze.report.whatif_text import validation_text
    from dsanalyze.whatif import api as model_whatif

    runs, sizes = runs_and_sizes(prefix)
    val = model_whatif.validate(runs, sizes, cache_policy)
    doc = model_whatif.validation_document(val)
    path = Path(prefix) / VALIDATION_JSON
    store.write_json_atomic(path, doc)
    checks = model_whatif.cache_check(val.model, runs)
    return Validation(val, checks, doc, path, validation_text(val, checks))


def advise(prefix: str | Path, runs: list[RunResult] | None = None) -> WhatIfDocs:
    """The answer printed after the table: the advice's own what-if query over its default
    grid (`whatif/advice.py`), its validation, and the answer in words."""
    from dsanalyze.report.advice import advice_failed_text
    from dsanalyze.whatif.advice import ModelFailure
    from dsanalyze.whatif.advice import advise as advice_of

    runs = store.load_runs(prefix) if runs is None else runs
    try:
        a = advice_of(runs, dataset_sizes(runs))
    except Exception as e:  # noqa: BLE001 - the advice never crashes a finished sweep
        line = advice_failed_text(ModelFailure.of(e))
        return WhatIfDocs(recommendation=[f"Advice: none: {line}."], note=f"What-if: {line}")
    return advice_docs(a)


def adaptive_text(answer: Any) -> str:
    """The adaptive sweep's answer (`adaptive.AdaptiveAnswer`) in words (`report/adaptive.py`)."""
    from dsanalyze.report.adaptive import adaptive_text as words

    return words(answer)


def advice_docs(a: Any) -> WhatIfDocs:
    """An `Advice` as the plots and the report take it: its rows, validation and words."""
    from dsanalyze.report.advice import advice_text, missing_note

    return WhatIfDocs(a.rows, a.validation, [advice_text(a)], missing_note(a), a)


@dataclass(frozen=True)
class Verified:
    advice: Any  # whatif.advice.Advice: the decision checked
    plan: Any  # whatif.verification.VerifyPlan
    result: Any = None  # whatif.verification.Verification, when the run was made
    failed: str = ""  # the run's status and error, when it did not complete
    # where an earlier check's run of the configuration went, set aside because the prefix's
    # runs are newer than it (`_set_aside_older`); "" when there was none
    superseded: str = ""

    @property
    def text(self) -> str:
        """The check in one line (`report.advice.verify_text`)."""
        from dsanalyze.report.advice import verify_text

        return verify_text(self.plan, self.result, self.failed, self.superseded)


def verify(prefix: str | Path, advice: Any = None, progress: Callable[[str], None] | None = None,
           use_cgroups: bool = True, lock_wait_s: float = 0.0,
           machine_cpus: int | None = None) -> Verified:
    """Measure the recommended configuration when this machine can run it (`machine_cpus`:
    the CPUs the harness may use, its affinity's by default), else the best one it can run
    in its place: one disk run through the sweep into the prefix (a sub-prefix when its
    workers change the job), then the model fitted before it against what it measured
    (`whatif/verification.py`)."""
    from dsanalyze.config import Mode, RunSpec
    from dsanalyze.whatif.verification import NotRun, Unrunnable, VerifyPlan, verification

    prefix = Path(prefix)
    runs = store.load_runs(prefix)
    if advice is None:
        from dsanalyze.whatif.advice import ModelFailure
        from dsanalyze.whatif.advice import advise as advice_of

        try:
            advice = advice_of(runs, dataset_sizes(runs))
        except Exception as e:  # noqa: BLE001 - as the advice: a line, not a crash
            return Verified(None, VerifyPlan(None, reason=NotRun(Unrunnable.ADVICE_FAILED,
                                                                 ModelFailure.of(e))))
    plan = _verify_plan(advice, runs, prefix, machine_cpus)
    if not plan.runnable or advice.model is None:
        return Verified(advice, plan)
    target = prefix / plan.sub_prefix if plan.sub_prefix else prefix
    run_id = RunSpec(plan.job, Mode.DISK, plan.resources).run_id
    superseded = _set_aside_older(target, run_id, runs) if plan.sub_prefix else None
    sweep = Sweep(plan.job, str(target), modes=(Mode.DISK,), cpus=(plan.resources.cpus,),
                  cache=(plan.resources.cache.spec,),
                  storage_bw=(str(plan.resources.storage_read_bps or "none"),), resume=True,
                  use_cgroups=use_cgroups, plots=False)
    # measured as the sweep's disk runs were: the job's code its runs mapped read back first
    # where it was evicted since (a sub-prefix holds none of those runs to learn it from)
    profile(sweep, None, progress, lock_wait_s, known_runs=runs)
    run = next(r for r in store.load_runs(target) if r.run_id == run_id)
    aside = str(superseded.relative_to(prefix)) if superseded else ""
    if not run.ok:
        return Verified(advice, plan, failed=f"{run.run_id} {run.status}: {run.error}",
                        superseded=aside)
    return Verified(advice, plan, verification(advice.model, plan, run), superseded=aside)


def _set_aside_older(target: Path, run_id: str, runs: list[RunResult]) -> Path | None:
    """An earlier check's run of the configuration in a check's sub-prefix that started
    before the prefix's newest run ended: it measured the machine, the data and the job
    before these runs (a sweep measured again since, `make demo` run again), so it checks
    nothing of the model fitted on them. It moves to SUB/superseded/RUN_ID-STARTED.json
    (`store.set_aside`: kept, not read as a run), and the check measures the configuration
    again; None where there is no such run. A check's run newer than every run of the prefix
    is the check itself, made after the fit: `verify` again reads it back (`--resume`)."""
    path = store.run_path(target, run_id)
    if not path.is_file():
        return None
    older = store.read_run(path)
    newest = max((r.started_unix_s + (r.duration_s or 0.0) for r in runs if r.started_unix_s),
                 default=None)
    if older.started_unix_s is None or newest is None or older.started_unix_s >= newest:
        return None
    return store.set_aside(target, store.SUPERSEDED, older)


def _verify_plan(advice: Any, runs: list[RunResult], prefix: Path,
                 machine_cpus: int | None) -> Any:
    """The advice's check (`verify_plan`); when its pick needs more CPUs than this machine's,
    the check of the advice confined to them (`whatif.advice.within`) standing for it."""
    import os

    from dsanalyze.whatif.advice import within
    from dsanalyze.whatif.verification import Unrunnable, verify_plan

    job = next((r.spec.job for r in runs if r.ok), runs[0].spec.job if runs else None)
    if job is None:
        raise ConfigError(f"no runs under {prefix}: run harness.py --prefix {prefix} first")
    machine = machine_cpus or len(os.sched_getaffinity(0))
    plan = verify_plan(advice.decision, job, machine, advice.note)
    if plan.reason is None or plan.reason.why is not Unrunnable.CPUS or advice.model is None:
        return plan
    here = verify_plan(within(advice, runs, machine), job, machine, advice.note)
    return dataclasses.replace(here, stands_for=plan.choice, reason=plan.reason) \
        if here.runnable else plan


def stored_whatif(prefix: str | Path, runs: list[RunResult]) -> WhatIfDocs | None:
    """The last `dsanalyze whatif` answer of the prefix, if it is newer than every run;
    its `validation.json` too when that is fresh."""
    from dsanalyze.whatif.documents import GridRow, ValidationDoc

    doc = _fresh(Path(prefix), WHATIF_JSON)
    if doc is None:
        return None
    rows = [GridRow.from_dict(d) for d in doc]
    recommendation = [f"Recommended by `dsanalyze whatif` ({WHATIF_JSON}): {recommended_text(r)}"
                      for r in rows if r.recommended]
    validation = _fresh(Path(prefix), VALIDATION_JSON)
    return WhatIfDocs(rows, ValidationDoc.from_dict(validation) if validation else None,
                      recommendation)


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
    from dsanalyze.dataset import scan_dataset
    from dsanalyze.fileset import scan_files

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
    from dsanalyze.analysis.summary import summarize

    prefix = Path(prefix)
    runs = store.load_runs(prefix)
    if run_id is not None and not any(r.run_id == run_id for r in runs):
        raise StoreError(f"no run {run_id!r} under {prefix}: pick one of "
                         + ", ".join(r.run_id for r in runs))
    docs = docs or stored_whatif(prefix, runs) or (advise(prefix, runs) if fit else WhatIfDocs())
    return _draw(prefix, runs, summarize(runs), docs, run_id)


def _draw(prefix: Path, runs: list[RunResult], summary: Summary, docs: WhatIfDocs,
          run_id: str | None = None) -> list[Path]:
    """Save every figure of runs already loaded and summarised, as PNG and SVG."""
    from dsanalyze.report import plots

    figures = plots.figures(summary, runs, docs, run_id)
    return [p for name, fig in figures.items() for p in plots.save(fig, prefix, name)]


def report(prefix: str | Path, docs: WhatIfDocs | None = None) -> list[Path]:
    """Write `PREFIX/report.md` and the self-contained `report.html`, figures redrawn.

    Its what-if section is the advice (`docs`, else the advice's own query fitted
    here; not the last `whatif` query, whose grid may answer another question)."""
    from dsanalyze.analysis.summary import summarize
    from dsanalyze.report import document
    from dsanalyze.report import summary as report_text
    from dsanalyze.report.shards import shard_blocks

    prefix = Path(prefix)
    runs = store.load_runs(prefix)
    docs = docs or advise(prefix, runs)
    summary = summarize(runs)
    pngs = [p for p in _draw(prefix, runs, summary, docs) if p.suffix == ".png"]
    blocks = report_text.report_blocks(summary, [p.name for p in pngs],
                                       docs.recommendation, docs.validation, docs.note,
                                       title=f"Data-stall report: {prefix.name}")
    blocks += shard_blocks(runs)  # streaming datasets: reads per shard
    md, page = prefix / "report.md", prefix / "report.html"
    md.write_text(document.render_markdown(blocks))
    page.write_text(document.render_html(blocks, {p.name: p.read_bytes() for p in pngs}))
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
