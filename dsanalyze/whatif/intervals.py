"""How sure a prediction is: its relative standard error (the fit's, scaled), its
interval at the nominal level, and the assumptions it rests on that no fit run tested,
each of which widens it (`SETTINGS.untested_sigma`)."""

from __future__ import annotations

import math

from dsanalyze.settings import SETTINGS
from dsanalyze.whatif.assumptions import Assume, Assumption, Law
from dsanalyze.whatif.laws import (
    binding_cache,
    job_ranks,
    uncached_share,
    workers_for,
)
from dsanalyze.whatif.model import Config, Model, Z


def rel_sigma_for(model: Model, cfg: Config) -> float:
    """The relative standard error of a prediction for `cfg`: the fit's own sigma scaled by
    `SETTINGS.fit_sigma_scale`, widened by `SETTINGS.untested_sigma` for each assumption of
    `untested` (both calibrated by bench/interval_tuning.py)."""
    return math.sqrt((SETTINGS.fit_sigma_scale * model.rel_sigma) ** 2
                     + len(untested(model, cfg)) * SETTINGS.untested_sigma ** 2)


def interval(model: Model, cfg: Config, rate_sps: float, held_rel: float = 0.0
             ) -> tuple[float, float]:
    """The rate's interval at the nominal level: rate x exp(-+z sigma); a step held by the
    outside work (`Rates.held_rel`) adds the size of that effect to sigma, in quadrature:
    the runs measure it loosely (the scripts bench's disk runs at every core of the machine
    were held from nil to twice as long as the law says)."""
    k = math.exp(Z * math.hypot(rel_sigma_for(model, cfg), held_rel))
    return rate_sps / k, rate_sps * k


def _cpu_assumptions(model: Model, cfg: Config) -> list[Assumption]:
    top = max(model.measured_cpus, default=0)
    out = []
    if cfg.cpus > top:
        law = Law.PROBED if model.contention_probed else Law.CONTENTION if model.contention \
            else Law.LINEAR
        out.append(Assumption(Assume.BEYOND_CPUS, cpus=cfg.cpus, measured_cpus=top, law=law))
    elif cfg.cpus not in model.measured_cpus and len(model.measured_cpus) == 1:
        out.append(Assumption(Assume.ONE_CPU_COUNT, cpus=cfg.cpus, measured_cpus=top,
                              law=Law.PROBED if model.contention_probed else None))
    if model.machine_cpus and cfg.cpus > model.machine_cpus:
        out.append(Assumption(Assume.MACHINE_CPUS, cpus=cfg.cpus,
                              machine_cpus=model.machine_cpus))
    return out


def _storage_assumptions(model: Model, cfg: Config) -> list[Assumption]:
    bps = cfg.storage_read_bps
    out = []
    if bps is not None and not model.throttle_measured:
        out.append(Assumption(Assume.THROTTLE))
    if model.device_read_bps is None and (bps is None):
        out.append(Assumption(Assume.NO_DEVICE))
    elif model.device_read_bps is not None and bps is not None and bps > model.device_read_bps:
        out.append(Assumption(Assume.ABOVE_DEVICE))
    # a cache that holds part of the dataset: the re-reads' hits there were not measured; they
    # matter where they move the bytes read by more than the run-to-run noise
    cache = binding_cache(model, None if cfg.cache_bytes is None else
                          cfg.cache_bytes + model.cache_slack_bytes)
    uncached = uncached_share(model, cache)
    if uncached < SETTINGS.reread_uncached and \
            abs(model.read_amplification - 1) * uncached > SETTINGS.noise_floor:
        out.append(Assumption(Assume.REREADS, amplification=model.read_amplification))
    return out


def untested(model: Model, cfg: Config) -> tuple[Assumption, ...]:
    """The assumptions a prediction for `cfg` rests on that no fit run tested
    (`report/assumptions.py` words them)."""
    out = _cpu_assumptions(model, cfg)
    if cfg.nnodes > 1:
        out.append(Assumption(Assume.NODES, nodes=cfg.nnodes))
    ranks = job_ranks(model, cfg)
    if ranks not in model.measured_ranks:
        out.append(Assumption(Assume.RANKS, ranks=ranks, ring=bool(model.allreduce_s)))
    if round(cfg.gpu_speedup, 3) not in {round(x, 3) for x in model.measured_speedups}:
        out.append(Assumption(Assume.FASTER_STEP, speedup=cfg.gpu_speedup))
    if model.loader == "dali":
        out.append(Assumption(Assume.DALI))
    if workers_for(model, cfg) != model.workers:
        out.append(Assumption(Assume.WORKERS, workers=workers_for(model, cfg),
                              measured_workers=model.workers))
    return tuple(out + _storage_assumptions(model, cfg))
