"""What-if: predict, recommend and validate, as pure functions over stored runs.

    model = fit(results, sizes)                      # analysis/calibrate.py over analysis/model.py
    preds = grid(model, configs(...), results)       # one Prediction per combination
    rec = recommend(preds, results, max_stall_pct=5)  # fewest CPUs, least cache, least bandwidth
    val = validate(results, sizes)                   # fit on part of the runs, predict the rest

A prediction is the steady state of a disk run of whole epochs (the epochs
after the first, at least two; the cold first epoch is predicted on its own),
split as in the differential table: compute N / G, prep stall N / X_cached -
N / G, fetch stall N / X - N / X_cached. `bound_sps` is docs/design.md's
min(G, P, B / ((1 - h) s)), the rate if every stage overlapped perfectly.
`whatif_document` and `validation_document` are the JSON written to
`whatif.json` and printed by `validate --json`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dsanalyze.analysis import cachesim, pipeline, stalls
from dsanalyze.analysis.calibrate import fit
from dsanalyze.analysis.model import (
    Config,
    Model,
    mean_rates,
    predict_run,
    prep_cpu_for,
    read_bps_for,
    run_cache,
    run_cpus,
    run_layout,
    workers_for,
)
from dsanalyze.config import CacheBudget, Mode
from dsanalyze.errors import ConfigError
from dsanalyze.store import RunResult

__all__ = ["Config", "Model", "Prediction", "Recommendation", "Validation", "cache_check",
           "configs", "fit", "grid", "predict", "recommend", "run_cpus", "split_runs", "validate",
           "validation_document", "whatif_document"]


@dataclass(frozen=True)
class Prediction:
    """Predicted steady state of one configuration, per epoch of N samples."""

    config: Config
    nproc: int
    rate_sps: float
    epoch_s: float
    compute_s: float
    prep_stall_s: float
    fetch_stall_s: float
    epoch1_s: float | None  # the cold first epoch
    hit_rate: float | None  # byte hit rate of the page cache in the steady epochs
    cache_effective_bytes: float | None  # the budget plus the calibrated slack
    bound_sps: float  # min(G, P, B / ((1 - h) s)): perfect overlap
    measured_run: str | None = None
    measured_sps: float | None = None  # the run's steady rate (None: it had no steady epochs)
    measured_epoch1_sps: float | None = None  # its cold first epoch

    @property
    def stall_pct(self) -> float:
        return 100 * (self.prep_stall_s + self.fetch_stall_s) / self.epoch_s

    def to_dict(self, recommended: bool = False) -> dict[str, Any]:
        c = self.config
        return {"cpus": c.cpus, "cache_spec": c.cache_spec, "cache_bytes": c.cache_bytes,
                "storage_read_bps": c.storage_read_bps, "gpu_speedup": c.gpu_speedup,
                "nproc": self.nproc, "workers": c.workers, "rate_sps": self.rate_sps, "epoch_s": self.epoch_s,
                "compute_s": self.compute_s, "prep_stall_s": self.prep_stall_s,
                "fetch_stall_s": self.fetch_stall_s, "stall_pct": self.stall_pct,
                "epoch1_s": self.epoch1_s, "hit_rate": self.hit_rate,
                "cache_effective_bytes": self.cache_effective_bytes,
                "bound_sps": self.bound_sps, "measured": self.measured_run is not None,
                "measured_run": self.measured_run, "measured_sps": self.measured_sps,
                "measured_epoch1_sps": self.measured_epoch1_sps, "recommended": recommended}


def configs(cpus: Sequence[int], caches: Sequence[str], bandwidths: Sequence[int | None],
            dataset_bytes: int, gpu_speedup: float = 1.0, nproc: int | None = None,
            workers: Sequence[int | None] = (None,)) -> list[Config]:
    """Every combination; cache percentages are of the dataset's bytes, as in harness.py;
    `workers` None: the DataLoader workers per rank the runs had."""
    if gpu_speedup <= 0 or (nproc is not None and nproc < 1) or any(c < 1 for c in cpus):
        raise ConfigError("--cpus, --nproc and --gpu-speedup must be positive")
    if any(w is not None and w < 0 for w in workers):
        raise ConfigError("--workers must be 0 or more")
    out = []
    for c in cpus:
        for spec in caches:
            budget = CacheBudget.parse(spec, dataset_bytes)
            for bw in bandwidths:
                out += [Config(int(c), budget.spec, budget.cache_bytes, bw, gpu_speedup, nproc, w)
                        for w in workers]
    return out


def _layout_for(model: Model, ranks: int) -> tuple[pipeline.Layout, int]:
    """The disk runs' layout for another rank count, and the samples of one epoch."""
    if ranks == model.ranks:
        return model.layout, model.samples_per_epoch
    batches = len(model.file_bytes) // ranks // model.batch_size
    if batches < 1:
        raise ConfigError(f"{ranks} ranks of {model.batch_size} samples need more files than "
                          f"the dataset's {len(model.file_bytes)}")
    lay = model.layout
    return (replace(lay, batches=batches, iters=lay.epochs * batches,
                    warmup=min(lay.warmup, batches - 1)), batches * model.batch_size * ranks)


def bound_sps(model: Model, cfg: Config, hit_rate: float | None) -> float:
    """docs/design.md's min(G, P, B / ((1 - h) s)) with the fitted rates."""
    ranks = cfg.nproc or model.ranks
    g = ranks * model.batch_size * cfg.gpu_speedup / model.step_s
    p = min(cfg.cpus, ranks * max(1, workers_for(model, cfg))) / prep_cpu_for(model, cfg.cpus)
    f = math.inf
    if cfg.storage_read_bps is not None and hit_rate is not None and hit_rate < 1:
        s = model.dataset_bytes / len(model.file_bytes)
        f = read_bps_for(model, cfg.storage_read_bps) / ((1 - hit_rate) * s)
    return min(g, p, f)


def predict(model: Model, cfg: Config) -> Prediction:
    """The steady-state rate of `cfg` and its split into compute, prep stall and fetch stall."""
    cfg = replace(cfg, workers=workers_for(model, cfg))
    ranks = cfg.nproc or model.ranks
    layout, n = _layout_for(model, ranks)
    cache = None
    if cfg.cache_bytes is not None:
        cache = cfg.cache_bytes + model.cache_slack_bytes
    disk = mean_rates(model, cfg, layout, Mode.DISK,
                      None if cache is not None and cache >= model.dataset_bytes else cache)
    cached = mean_rates(model, cfg, layout, Mode.CACHED, None, cold_first=True)
    g = ranks * model.batch_size * cfg.gpu_speedup / model.step_s
    epoch_s, cached_s, compute_s = n / disk.rate_sps, n / cached.rate_sps, n / g
    return Prediction(
        cfg, ranks, disk.rate_sps, epoch_s, compute_s, max(0.0, cached_s - compute_s),
        max(0.0, epoch_s - cached_s), n / disk.epoch1_sps if disk.epoch1_sps else None,
        disk.hit_rate, cache, bound_sps(model, cfg, disk.hit_rate))


def _measured_key(run: RunResult) -> tuple:
    res = run.spec.resources
    return (run_cpus(run), res.cache.cache_bytes, res.storage_read_bps, 1.0, None,
            run.spec.job.workers)


def grid(model: Model, cfgs: Sequence[Config], results: Sequence[RunResult]) -> list[Prediction]:
    """Predict every configuration; mark the ones a disk run measured."""
    measured = {_measured_key(r): r for r in results if r.ok and r.mode is Mode.DISK}
    out = []
    for cfg in cfgs:
        p = predict(model, cfg)
        nproc = None if cfg.nproc == model.ranks else cfg.nproc
        run = measured.get((cfg.cpus, cfg.cache_bytes, cfg.storage_read_bps, cfg.gpu_speedup,
                            nproc, p.config.workers))
        if run is not None:
            rate = stalls.run_rate(run)
            steady = run_layout(run).epochs >= 2
            p = replace(p, measured_run=run.run_id, measured_sps=rate.rate_sps if steady else None,
                        measured_epoch1_sps=rate.epoch1_rate_sps if steady else rate.rate_sps)
        out.append(p)
    return out


@dataclass(frozen=True)
class Recommendation:
    """The cheapest configuration whose stalls stay under `max_stall_pct`."""

    max_stall_pct: float
    chosen: Prediction | None  # None: no configuration qualifies
    closest: Prediction  # the least stalled, when none qualifies (else the chosen one)
    baseline_run: str | None  # the measured configuration compared with
    baseline_sps: float | None
    speedup: float | None  # predicted rate of the choice / measured rate of the baseline
    hint: str = ""  # why the stall stays, when no configuration qualifies


def _cost(p: Prediction) -> tuple:
    c = p.config
    big = float("inf")
    return (c.cpus, big if c.cache_bytes is None else c.cache_bytes,
            big if c.storage_read_bps is None else c.storage_read_bps, c.workers)


def baseline_run(results: Sequence[RunResult]) -> RunResult | None:
    """The measured configuration: the disk run with the most of everything (else cached)."""
    runs = [r for r in results if r.ok and r.mode is Mode.DISK and r.ranks] or \
        [r for r in results if r.ok and r.mode is Mode.CACHED and r.ranks]
    if not runs:
        return None
    big = float("inf")
    return max(runs, key=lambda r: (run_cpus(r), big if r.spec.resources.cache.cache_bytes is None
                                    else r.spec.resources.cache.cache_bytes,
                                    big if r.spec.resources.storage_read_bps is None
                                    else r.spec.resources.storage_read_bps))


def recommend(preds: Sequence[Prediction], results: Sequence[RunResult],
              max_stall_pct: float = 5.0) -> Recommendation:
    """Fewest CPUs, then least cache, then least bandwidth with stalls <= max_stall_pct."""
    if not preds:
        raise ConfigError("nothing to recommend from: give --cpus and --cache values")
    ok = sorted((p for p in preds if p.stall_pct <= max_stall_pct), key=_cost)
    chosen = ok[0] if ok else None
    closest = chosen or min(preds, key=lambda p: (p.stall_pct, _cost(p)))
    base = baseline_run(results)
    base_sps = stalls.run_rate(base).rate_sps if base else None
    pick = chosen or closest
    return Recommendation(max_stall_pct, chosen, closest, base.run_id if base else None, base_sps,
                          pick.rate_sps / base_sps if base_sps else None,
                          "" if chosen else _hint(closest, preds, results))


def _hint(p: Prediction, preds: Sequence[Prediction], results: Sequence[RunResult]) -> str:
    if not any(r.ok for r in results):
        return ""
    workers = p.nproc * max(1, p.config.workers)
    if p.prep_stall_s >= p.fetch_stall_s and p.config.cpus >= workers:
        tried_more = any(q.config.workers > p.config.workers for q in preds)
        return (f"the prep stall left does not shrink with more CPUs: {workers} DataLoader "
                f"worker(s) use at most {workers} core(s), and each epoch starts with an empty "
                "prefetch queue" + ("" if tried_more else
                                    "; more workers might help: give --workers values"))
    if p.fetch_stall_s > p.prep_stall_s:
        return "fetch stall dominates: give more --cache or --storage-bw values"
    return "prep stall dominates: give more --cpus values"


def whatif_document(preds: Sequence[Prediction],
                    rec: Recommendation | None = None) -> list[dict[str, Any]]:
    """`whatif.json`: one object per combination, the recommended one marked."""
    pick = rec.chosen if rec else None
    return [p.to_dict(recommended=p is pick) for p in preds]


# ---- validation -----------------------------------------------------------------------------

SPLIT_RULE = ("fit on every synthetic, loader and cached run, and, for each storage bandwidth, "
              "on the disk runs at the fewest CPUs with the smallest and the largest cache "
              "budget; predict every other disk run (without disk runs: fit on the synthetic "
              "and loader runs, predict the cached runs)")


def split_runs(results: Sequence[RunResult]) -> tuple[list[RunResult], list[RunResult]]:
    """(fit, held out) by SPLIT_RULE."""
    ok = [r for r in results if r.ok and r.ranks]
    disk = [r for r in ok if r.mode is Mode.DISK]
    if not disk:
        fit_runs = [r for r in ok if r.mode in (Mode.SYNTHETIC, Mode.LOADER)]
        return fit_runs, [r for r in ok if r.mode is Mode.CACHED]
    fit_runs = [r for r in ok if r.mode is not Mode.DISK]
    big = float("inf")
    for bw in {r.spec.resources.storage_read_bps for r in disk}:
        same = [r for r in disk if r.spec.resources.storage_read_bps == bw]
        fewest = min(run_cpus(r) for r in same)
        same = sorted((r for r in same if run_cpus(r) == fewest),
                      key=lambda r: big if r.spec.resources.cache.cache_bytes is None
                      else r.spec.resources.cache.cache_bytes)
        fit_runs += [same[0], same[-1]] if len(same) > 1 else same
    ids = {r.run_id for r in fit_runs}
    return fit_runs, [r for r in disk if r.run_id not in ids]


@dataclass(frozen=True)
class Check:
    """One held-out run: measured against predicted."""

    run_id: str
    mode: str
    measured_sps: float
    predicted_sps: float
    measured_epoch1_sps: float | None
    predicted_epoch1_sps: float | None
    cache_bytes: float | None  # the page cache it was predicted with (None: no limit)
    cache_source: str

    @property
    def error_pct(self) -> float:
        return 100 * (self.predicted_sps / self.measured_sps - 1)

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "mode": self.mode, "measured_sps": self.measured_sps,
                "predicted_sps": self.predicted_sps, "error_pct": self.error_pct,
                "measured_epoch1_sps": self.measured_epoch1_sps,
                "predicted_epoch1_sps": self.predicted_epoch1_sps,
                "cache_bytes": self.cache_bytes, "cache_source": self.cache_source}


@dataclass(frozen=True)
class Validation:
    """The model fitted on `fit_runs`, checked on every other run."""

    model: Model
    fit_runs: tuple[str, ...]
    checks: tuple[Check, ...]
    rule: str

    @property
    def median_abs_error_pct(self) -> float:
        return statistics.median(abs(c.error_pct) for c in self.checks)

    @property
    def max_abs_error_pct(self) -> float:
        return max(abs(c.error_pct) for c in self.checks)


Splitter = Callable[[Sequence[RunResult]], tuple[list[RunResult], list[RunResult]]]


def validate(results: Sequence[RunResult], sizes: Sequence[int] | None = None,
             policy: str = cachesim.Policy.PAGECACHE.value, nominal_cache: bool = False,
             split: Splitter = split_runs, rule: str = SPLIT_RULE) -> Validation:
    """Fit on one part of the runs, predict each of the others.

    A held-out disk run is predicted with the page cache it really had
    (cgroup counters), unless `nominal_cache`: then with its budget plus the
    slack calibrated on the fit runs.
    """
    fit_runs, held = split(results)
    if not held:
        raise ConfigError("nothing left to validate on: measure more configurations, e.g. "
                          "harness.py --cpus 1,2 --cache 0,50%,100% --modes synthetic,cached,"
                          "loader,disk")
    model = fit(list(fit_runs), sizes, policy)
    checks = []
    for run in held:
        rate, pred = stalls.run_rate(run), predict_run(model, run, nominal_cache)
        cache, how = run_cache(model, run, nominal_cache) if run.mode is Mode.DISK else \
            (None, "everything cached")
        checks.append(Check(run.run_id, run.mode.value, rate.rate_sps or 0.0, pred.rate_sps,
                            rate.epoch1_rate_sps, pred.epoch1_sps, cache, how))
    return Validation(model, tuple(r.run_id for r in fit_runs), tuple(checks), rule)


def validation_document(v: Validation) -> dict[str, Any]:
    """The `validate --json` document."""
    return {"runs": [c.to_dict() for c in v.checks],
            "median_abs_error_pct": v.median_abs_error_pct,
            "max_abs_error_pct": v.max_abs_error_pct, "fit_runs": list(v.fit_runs),
            "rule": v.rule, "policy": v.model.policy, "model": v.model.to_dict()}


# ---- the cache simulator against the measured runs -------------------------------------------

@dataclass(frozen=True)
class CacheCheck:
    """Read bytes and residency of one disk run: simulated against measured."""

    run_id: str
    cache_bytes: float | None
    predicted_read_bytes: float
    measured_read_bytes: float | None  # the cgroup's storage reads (None: not recorded)
    predicted_resident_bytes: float
    measured_resident_bytes: float | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def cache_check(model: Model, results: Sequence[RunResult], seeds: int = 3) -> list[CacheCheck]:
    """cachesim over each disk run's epochs, with the page cache the run had."""
    out = []
    sizes = np.asarray(model.file_bytes)
    for run in (r for r in results if r.ok and r.mode is Mode.DISK and r.ranks):
        layout, cache = run_layout(run), run_cache(model, run)[0]
        cap = model.dataset_bytes + 1 if cache is None else int(cache)
        share = layout.iters / (layout.epochs * layout.batches)
        reads, resident = [], []
        for seed in range(seeds):
            rng = np.random.default_rng(seed)
            orders = [cachesim.epoch_order(len(sizes), rng, model.ranks, model.batch_size)
                      for _ in range(layout.epochs)]
            stats = cachesim.simulate(sizes, cap, model.policy, orders)
            reads.append(sum(s.read_bytes for s in stats) * share)
            resident.append(stats[-1].resident_bytes)
        out.append(CacheCheck(run.run_id, cache, statistics.fmean(reads),
                              run.io.get("read_bytes") or None, statistics.fmean(resident),
                              run.io.get("resident_after_bytes")))
    return out


