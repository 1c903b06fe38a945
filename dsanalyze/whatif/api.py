"""What-if: predict, recommend and validate, as pure functions over stored runs.

    model = fit(results, sizes)                      # whatif/calibrate.py over whatif/model.py
    preds = grid(model, configs(...), results)       # one Prediction per combination
    rec = recommend(model, preds, results, max_stall_pct=5, epochs=1)
    val = validate(results, sizes)                   # both splits, out of sample

A prediction is the steady state of a disk run of whole epochs (the epochs
after the first, at least two; the cold first epoch is predicted on its own),
split as in the differential table: compute N / G, prep stall N / X_cached -
N / G, fetch stall N / X - N / X_cached. Every rate carries an interval:
rate x exp(+-z sigma), sigma the model's relative error propagated by what the rate
depends on (`intervals.py`: the loop's costs, the storage, the untested assumptions),
z for the nominal level `LEVEL`; the stalls' intervals follow from it.
`untested` names each assumption of a prediction that no fit run tested.
`bound_sps` is docs/design.md's min(G, P, B / ((1 - h) s)), the rate if every stage
overlapped perfectly. `whatif_document` and `validation_document` are the
JSON written to `whatif.json` and printed by `validate --json`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from dsanalyze.analysis import coldepoch, runrate
from dsanalyze.config import CacheBudget, Mode, Resources
from dsanalyze.errors import ConfigError
from dsanalyze.records import RunResult
from dsanalyze.whatif import fit_reads
from dsanalyze.whatif.assumptions import Assumption
from dsanalyze.whatif.calibrate import fit
from dsanalyze.whatif.documents import GridRow
from dsanalyze.whatif.intervals import carried_sharing_rel, interval, loop_share, untested
from dsanalyze.whatif.laws import (
    binding_cache,
    compute_sps,
    job_ranks,
    layout_for,
    prep_cpu_for,
    read_bps_for,
    reread_share,
    run_cache,
    run_config,
    workers_for,
)
from dsanalyze.whatif.model import LEVEL, Config, HeldOut, Model, run_cpus, run_layout
from dsanalyze.whatif.rates import Rates, mean_rates

__all__ = ["Check", "Config", "Model", "Prediction", "Split", "Validation", "cache_check",
           "configs", "configurations", "fit", "grid", "grid_rows", "predict", "run_cpus",
           "spec_only", "split_summary", "untested", "validate", "validation_doc", "validation_document", "whatif_document"]


@dataclass(frozen=True)
class Prediction:
    """Predicted steady state of one configuration, per epoch of N samples, with intervals."""

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
    rate_sps_low: float = 0.0
    rate_sps_high: float = 0.0
    cached_s: float = 0.0  # the epoch with every file cached (compute + prep stall)
    untested: tuple[Assumption, ...] = ()  # assumptions of this prediction no fit run tested
    loader: str = "pytorch"
    measured_run: str | None = None
    measured_sps: float | None = None  # the run's steady rate (None: it had no steady epochs)
    measured_epoch1_sps: float | None = None  # its cold first epoch

    @property
    def stall_pct(self) -> float:
        return 100 * (self.prep_stall_s + self.fetch_stall_s) / self.epoch_s

    def job_s(self, epochs: int = 1, cold: bool = True) -> float:
        """A job of `epochs` epochs: the cold first, then steady ones (every one steady
        where `cold` is False: to weigh against a measurement without a cold epoch)."""
        return coldepoch.job_s(self.epoch_s, self.epoch1_s if cold else None, epochs)

    def job_stall_pct(self, epochs: int = 1, cold: bool = True) -> float:
        """Share of a job of `epochs` epochs spent stalled (`job_s`'s epochs)."""
        total = self.job_s(epochs, cold)
        return coldepoch.stall_pct(total, total - epochs * self.compute_s)

    def stall_intervals(self) -> dict[str, float]:
        """Prep, fetch and total stall seconds at the ends of the rate interval."""
        n = self.rate_sps * self.epoch_s
        k = self.rate_sps_high / self.rate_sps if self.rate_sps else 1.0
        lo_cached, hi_cached = self.cached_s / k, self.cached_s * k
        lo_epoch, hi_epoch = n / self.rate_sps_high, n / self.rate_sps_low
        return {"prep_stall_s_low": max(0.0, lo_cached - self.compute_s),
                "prep_stall_s_high": max(0.0, hi_cached - self.compute_s),
                "fetch_stall_s_low": max(0.0, lo_epoch - self.cached_s),
                "fetch_stall_s_high": max(0.0, hi_epoch - self.cached_s),
                "stall_s_low": max(0.0, lo_epoch - self.compute_s),
                "stall_s_high": max(0.0, hi_epoch - self.compute_s)}

    def row(self, recommended: bool = False) -> GridRow:
        """This prediction as a row of `whatif.json`."""
        return GridRow.from_dict(self.to_dict(recommended))

    def to_dict(self, recommended: bool = False) -> dict[str, Any]:
        c = self.config
        return {"cpus": c.cpus, "cache_spec": c.cache_spec, "cache_bytes": c.cache_bytes,
                "storage_read_bps": c.storage_read_bps, "gpu_speedup": c.gpu_speedup,
                "net_bw_bps": c.resources.net_bw_bps, "net_latency_s": c.resources.net_latency_s,
                "nproc": self.nproc, "workers": c.workers, "loader": self.loader,
                "rate_sps": self.rate_sps, "rate_sps_low": self.rate_sps_low,
                "rate_sps_high": self.rate_sps_high, "interval_level": LEVEL,
                "epoch_s": self.epoch_s, "compute_s": self.compute_s,
                "prep_stall_s": self.prep_stall_s, "fetch_stall_s": self.fetch_stall_s,
                **self.stall_intervals(), "stall_pct": self.stall_pct,
                "epoch1_s": self.epoch1_s, "hit_rate": self.hit_rate,
                "cache_effective_bytes": self.cache_effective_bytes,
                "bound_sps": self.bound_sps, "untested": [u.to_dict() for u in self.untested],
                "measured": self.measured_run is not None,
                "measured_run": self.measured_run, "measured_sps": self.measured_sps,
                "measured_epoch1_sps": self.measured_epoch1_sps, "recommended": recommended}


def configs(cpus: Sequence[int], caches: Sequence[str], bandwidths: Sequence[int | None],
            dataset_bytes: int, gpu_speedup: float = 1.0, nproc: int | None = None,
            workers: Sequence[int | None] = (None,), nnodes: int = 1) -> list[Config]:
    """Every combination; cache percentages are of the dataset's bytes, as in harness.py;
    `workers` None: the DataLoader workers per rank the runs had."""
    if gpu_speedup <= 0 or (nproc is not None and nproc < 1) or any(c < 1 for c in cpus) \
            or nnodes < 1:
        raise ConfigError("--cpus, --nproc, --nnodes and --gpu-speedup must be positive")
    if any(w is not None and w < 0 for w in workers):
        raise ConfigError("--workers must be 0 or more")
    out = []
    for c in cpus:
        for spec in caches:
            budget = CacheBudget.parse(spec, dataset_bytes)
            for bw in bandwidths:
                out += [Config(Resources(int(c), budget, bw), gpu_speedup, nproc, w, nnodes)
                        for w in workers]
    return out


def bound_sps(model: Model, cfg: Config, hit_rate: float | None) -> float:
    """docs/design.md's min(G, P, B / ((1 - h) s)) with the fitted rates."""
    ranks = cfg.nproc or model.ranks
    g = compute_sps(model, cfg)
    p = min(cfg.cpus, ranks * max(1, workers_for(model, cfg))) / prep_cpu_for(model, cfg)
    f = math.inf
    bps = read_bps_for(model, cfg.storage_read_bps)
    if bps is not None and hit_rate is not None and hit_rate < 1:
        s = model.dataset_bytes / len(model.file_bytes)
        f = bps / ((1 - hit_rate) * s)
    return min(g, p, f) * cfg.nnodes  # per node, and the nodes in lock step


def predict(model: Model, cfg: Config) -> Prediction:
    """The steady-state rate of `cfg` and its split into compute, prep stall and fetch stall."""
    cfg = replace(cfg, workers=workers_for(model, cfg), nproc=cfg.nproc or model.ranks)
    ranks = job_ranks(model, cfg)
    layout, n = layout_for(model, ranks)
    cache = None if cfg.cache_bytes is None else cfg.cache_bytes + model.cache_slack_bytes
    node = mean_rates(model, cfg, layout, Mode.DISK, binding_cache(model, cache))
    loop = loop_share(model, cfg, layout, Mode.DISK, binding_cache(model, cache), node.rate_sps)
    disk = _job_rates(node, cfg.nnodes)
    cached = _job_rates(mean_rates(model, cfg, layout, Mode.CACHED, None, cold_first=True),
                        cfg.nnodes)
    g = compute_sps(model, cfg) * cfg.nnodes
    epoch_s, cached_s, compute_s = n / disk.rate_sps, n / cached.rate_sps, n / g
    shared = carried_sharing_rel(model, cfg, layout, Mode.DISK, binding_cache(model, cache),
                                 node.rate_sps)
    low, high = interval(model, cfg, disk.rate_sps, disk.held_rel, loop, shared)
    return Prediction(
        cfg, ranks, disk.rate_sps, epoch_s, compute_s, max(0.0, cached_s - compute_s),
        max(0.0, epoch_s - cached_s), n / disk.epoch1_sps if disk.epoch1_sps else None,
        disk.hit_rate, cache, bound_sps(model, cfg, disk.hit_rate),
        low, high, max(cached_s, compute_s), untested(model, cfg), model.loader)


def _job_rates(node: Rates, nodes: int) -> Rates:
    """A node's simulated rates as the job's: the nodes advance in lock step (DDP)."""
    return replace(node, rate_sps=node.rate_sps * nodes,
                   epoch1_sps=node.epoch1_sps * nodes if node.epoch1_sps else None)


def comparable(model: Model, cfg: Config) -> Config:
    """`cfg` as a value equal to a measured run's configuration when they are the same: the
    cache by its bytes (`25%` and its bytes alike), the ranks and workers as run when left
    unset, the speed-up rounded."""
    cache = CacheBudget("none" if cfg.cache_bytes is None else str(cfg.cache_bytes),
                        cfg.cache_bytes)
    return Config(replace(cfg.resources, cache=cache), round(cfg.gpu_speedup, 6),
                  cfg.nproc or model.ranks, workers_for(model, cfg), cfg.nnodes)


def grid(model: Model, cfgs: Sequence[Config], results: Sequence[RunResult]) -> list[Prediction]:
    """Predict every configuration; mark the ones a disk run measured."""
    measured = {comparable(model, run_config(model, HeldOut.of(r))): r for r in results
                if r.ok and r.mode is Mode.DISK and r.ranks}
    out = []
    for cfg in cfgs:
        p = predict(model, cfg)
        run = measured.get(comparable(model, cfg))
        if run is not None:
            rate = runrate.run_rate(run)
            steady = run_layout(run).epochs >= 2
            p = replace(p, measured_run=run.run_id, measured_sps=rate.rate_sps if steady else None,
                        measured_epoch1_sps=rate.epoch1_rate_sps if steady else rate.rate_sps)
        out.append(p)
    return out


def grid_rows(preds: Sequence[Prediction], pick: Prediction | None = None) -> list[GridRow]:
    """`whatif.json`'s rows: one per combination, the recommended prediction `pick` marked
    (appended when it is a worker count the grid did not hold)."""
    rows = list(preds)
    if pick is not None and all(p.config != pick.config for p in rows):
        rows.append(pick)
    return [p.row(recommended=pick is not None and p.config == pick.config) for p in rows]


def whatif_document(preds: Sequence[Prediction],
                    pick: Prediction | None = None) -> list[dict[str, Any]]:
    """`whatif.json`: `grid_rows` as JSON."""
    return [r.to_dict() for r in grid_rows(preds, pick)]


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
    """cachesim over each disk run's epochs, with its budget plus the fitted slack, and the
    job's other reads of its files (the read amplification, `reread_share`), against the
    cgroup's read counter (a diagnosis of the cache model; no prediction reads it)."""
    out = []
    for run in (r for r in results if r.ok and r.mode is Mode.DISK and r.ranks):
        missed, read, resident = fit_reads.simulated_reads(model, run, seeds)
        rereads = reread_share(model, run_cache(model, HeldOut.of(run)))
        out.append(CacheCheck(run.run_id, run_cache(model, HeldOut.of(run)),
                              max(0.0, missed + rereads * read), run.io.read_bytes or None,
                              resident, run.io.resident_after_bytes))
    return out


# the validation lives in its own module; re-exported here, the what-if facade
from dsanalyze.whatif.validation import (  # noqa: E402
    Check,
    Split,
    Validation,
    check,  # noqa: E402,F401  (one held-out configuration: tests, benches)
    configurations,
    spec_only,
    split_summary,
    validate,
    validation_doc,
    validation_document,
)


def check_run(model: Model, run: RunResult) -> Check:
    """A run no fit saw (`verify`), predicted from its spec and iteration layout alone, against
    what it measured."""
    return check(model, (run,), "verify")
