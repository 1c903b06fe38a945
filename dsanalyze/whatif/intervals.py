"""How sure a prediction is: its relative standard error, split by what the rate depends on,
its interval at the nominal level, and the assumptions it rests on that no fit run tested.

A predicted rate depends on two sides of the model: the loop's costs (the step, the prep
per sample, the main process, the CPU per byte read, the work outside the job: what the
fit's residual `Model.rel_sigma` is about) and the storage (the bandwidth a throttle or the
device gives: `Model.storage_rel_sigma`, the residual of the runs the storage held). How
much each moves the prediction is its sensitivity, d ln(rate) / d ln(that side's costs):
the rate is homogeneous in time (every cost, the storage's time per byte included, k times
longer gives a rate k times lower), so the two sensitivities sum to 1, and one simulation
gives both (`loop_share`: a secant as far as the loop's own interval reaches, so that
near the kink the interval is that of the lesser of the two rates, `probe_factor`). The
delta method then gives (`Spread.sigma`)

    sigma^2 = (s * rel_sigma * loop)^2 + (max(k * storage_rel_sigma, f) * (1 - loop))^2
              + (c * loop)^2 [a step on the CPU] + sum over the untested assumptions of
              (weight * u)^2 + held_rel^2 + sharing_rel^2

with s = `SETTINGS.fit_sigma_scale`, k = `SETTINGS.storage_sigma_scale`, f =
`SETTINGS.storage_sigma_floor` where a throttle's efficiency was fitted (its steady rate is
never known closer than the efficiency the fit's cold windows gave: a floor no residual of
the fit runs narrows; a throttle at face value carries `SETTINGS.throttle_sigma` instead,
and no floor: bench45's lay within 0.5%), else 0, c =
`SETTINGS.cpu_step_sigma`, u = `SETTINGS.untested_sigma` (a throttle at face value's:
`SETTINGS.throttle_sigma`); an assumption about the loop (CPUs, workers, the step) weighs
`loop`, one about the storage (a throttle, the device, re-reads) `1 - loop`, any other
(ranks, nodes, DALI, storage not measured) 1. A rate set by the throttle alone gets the
throttle's narrow interval; a CPU-bound one the fit's full one. The constants are calibrated
per side: on the scripts bench's tuning grids a held-out run the throttle held lay within 2%
of its prediction nine times in ten, and one the loop held, of a step sharing the cores with
its loader, within 16% (`bench/interval_tuning.py` scores each side apart).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from dsanalyze.config import Mode
from dsanalyze.settings import SETTINGS, Settings
from dsanalyze.whatif import pipeline
from dsanalyze.whatif.assumptions import Assume, Assumption, Law
from dsanalyze.whatif.laws import (
    binding_cache,
    cores_beyond_fit,
    job_ranks,
    read_bps_for,
    stretch_from,
    uncached_share,
    workers_for,
)
from dsanalyze.whatif.model import Config, Model, Z
from dsanalyze.whatif.rates import mean_rates

# the side of the model each untested assumption is about (`Spread`'s weights)
LOOP_SIDE = frozenset({Assume.BEYOND_CPUS, Assume.ONE_CPU_COUNT, Assume.MACHINE_CPUS,
                       Assume.WORKERS, Assume.SHARING, Assume.FASTER_STEP})
STORAGE_SIDE = frozenset({Assume.THROTTLE, Assume.ABOVE_DEVICE, Assume.REREADS})


@dataclass(frozen=True)
class Spread:
    """What one prediction's relative sigma is made of (the module's law)."""

    loop: float  # d ln(rate) / d ln(the loop's costs), 0..1; the storage's is 1 - loop
    fit_rel: float  # the fit's residual relative sigma (`Model.rel_sigma`)
    storage_rel: float  # the storage's (`Model.storage_rel_sigma`, else the noise floor)
    weights: tuple[float, ...] = ()  # each untested assumption's weight, the throttle's aside
    held_rel: float = 0.0  # the step held by the outside work (`Rates.held_rel`)
    sharing_rel: float = 0.0  # a carried sharing of the cores (`carried_sharing_rel`)
    throttle_weight: float = 0.0  # `Assume.THROTTLE`'s weight (1 - loop); 0 without it
    step_on_cpu: bool = False  # the step shares the cores with the loader (`Model.step_on_cpu`)
    efficiency_fitted: bool = False  # a throttle whose efficiency the fit's cold windows gave

    @property
    def side(self) -> str:
        """Which side of the model holds the rate: "storage" (the loop's share under 1/2) or
        "loop" (the tuning bench calibrates each apart)."""
        return "storage" if self.loop < 0.5 else "loop"

    def sigma(self, settings: Settings = SETTINGS) -> float:
        """The relative sigma at `settings`' constants (another's: the tuning bench)."""
        u = settings.untested_sigma
        parts = [settings.fit_sigma_scale * self.fit_rel * self.loop,
                 max(settings.storage_sigma_scale * self.storage_rel,
                     settings.storage_sigma_floor if self.efficiency_fitted else 0.0)
                 * (1 - self.loop),
                 settings.cpu_step_sigma * self.loop if self.step_on_cpu else 0.0,
                 self.held_rel, self.sharing_rel, self.throttle_weight * settings.throttle_sigma,
                 *(w * u for w in self.weights)]
        return math.hypot(*parts)  # no underflow where a part is tiny (a 1e-253 floor)

    def interval(self, rate_sps: float, settings: Settings = SETTINGS) -> tuple[float, float]:
        """The rate's interval at the nominal level: rate x exp(-+z sigma)."""
        k = math.exp(Z * self.sigma(settings))
        return rate_sps / k, rate_sps * k


def _weight(a: Assumption, loop: float) -> float:
    return loop if a.kind in LOOP_SIDE else 1 - loop if a.kind in STORAGE_SIDE else 1.0


def spread(model: Model, cfg: Config, held_rel: float = 0.0, loop: float = 1.0,
           sharing_rel: float = 0.0) -> Spread:
    """The sigma's parts for `cfg`, whose rate moves `loop` with the loop's costs."""
    storage = model.storage_rel_sigma or SETTINGS.noise_floor
    assumed = untested(model, cfg)
    throttle = [_weight(a, loop) for a in assumed if a.kind is Assume.THROTTLE]
    # a throttle not at face value (`_storage_assumptions`): its efficiency was fitted
    fitted = cfg.storage_read_bps is not None and not throttle
    return Spread(loop, model.rel_sigma, storage,
                  tuple(_weight(a, loop) for a in assumed if a.kind is not Assume.THROTTLE),
                  held_rel, sharing_rel, sum(throttle), model.step_on_cpu, fitted)


def rel_sigma_for(model: Model, cfg: Config, loop: float = 1.0) -> float:
    """The relative standard error of a prediction for `cfg` (held step aside)."""
    return spread(model, cfg, loop=loop).sigma()


def interval(model: Model, cfg: Config, rate_sps: float, held_rel: float = 0.0,
             loop: float = 1.0, sharing_rel: float = 0.0) -> tuple[float, float]:
    """The rate's interval at the nominal level: rate x exp(-+z sigma); a step held by the
    outside work (`Rates.held_rel`) adds the size of that effect to sigma, in quadrature:
    the runs measure it loosely (the scripts bench's disk runs at every core of the machine
    were held from nil to twice as long as the law says); so does a carried sharing of the
    cores (`carried_sharing_rel`)."""
    return spread(model, cfg, held_rel, loop, sharing_rel).interval(rate_sps)


def loop_sigma(model: Model, cfg: Config) -> float:
    """The relative sigma of `cfg`'s rate were the loop alone to set it: the fit's, a step on
    the CPU's and each untested assumption about the loop's (`Spread.sigma` at a loop share
    of 1, where the storage's parts are nil)."""
    about_loop = tuple(1.0 for a in untested(model, cfg) if a.kind in LOOP_SIDE)
    return Spread(1.0, model.rel_sigma, 0.0, about_loop,
                  step_on_cpu=model.step_on_cpu).sigma()


def probe_factor(model: Model, cfg: Config) -> float:
    """How much faster `loop_share` makes the storage: the loop's costs at the end of the
    loop's own interval (`loop_sigma` at the nominal level), at least 10% (a secant, not a
    derivative: the simulation's rates step where a worker's share of the cores does).
    Reaching that far is what makes the interval of a rate near the kink the interval of a
    minimum: a throttled rate S whose loop alone would run at L, S < L < k S, takes the
    share 1 - ln(L / S) / ln k, and its interval's lower end, S exp(-z share loop_sigma)
    before the storage's own parts widen it, is L / k: the loop's own lower end (the loop
    may bind there, and no throttle lifts a rate above it). With the fit's sigma alone (the
    step's and the untested assumptions' left out) a throttled run near its loop's rate took
    the storage's narrow interval: bench41's examples at 4 MB/s, about 60 samples/s against
    73 unthrottled, measured 3-11% under their +-1-3%."""
    return max(1.1, math.exp(Z * loop_sigma(model, cfg)))


def loop_share(model: Model, cfg: Config, layout: pipeline.Layout, mode: Mode,
               cache_bytes: float | None, rate_sps: float) -> float:
    """d ln(rate) / d ln(the loop's costs) of `cfg` simulated at `rate_sps` (one node's):
    1 - the rate's gain with the storage k times faster (`probe_factor`) over ln k. By the
    rate's homogeneity in time that is the secant of every loop cost k times longer: 1 where
    the CPU or the step sets the rate, 0 where the throttle alone does, in between near the
    kink (storage-bound, a loop slower within its own interval would bind). A run without
    storage reads (cached, loader, synthetic) or with reads that cost no time (the device
    not measured): 1, without a simulation."""
    if mode is not Mode.DISK or read_bps_for(model, cfg.storage_read_bps) is None \
            or not rate_sps or not math.isfinite(rate_sps):
        return 1.0
    k = probe_factor(model, cfg)
    faster = replace(model, throttle_efficiency=model.throttle_efficiency * k,
                     device_read_bps=model.device_read_bps * k if model.device_read_bps
                     else None, device_latency_s=model.device_latency_s / k,
                     read_wait_s=model.read_wait_s / k)
    got = mean_rates(faster, cfg, layout, mode, cache_bytes).rate_sps
    return min(1.0, max(0.0, 1 - math.log(got / rate_sps) / math.log(k)))


def carried_sharing_rel(model: Model, cfg: Config, layout: pipeline.Layout, mode: Mode,
                        cache_bytes: float | None, rate_sps: float) -> float:
    """Where `cfg`'s workers beside a step on the CPU take the sharing of another worker count
    (`laws.stretch_from`), how far that count's own rate lies from `rate_sps`, as a relative
    sigma: |ln(ratio)| / sqrt(3), the root mean square distance from one end of a uniform
    range; 0 elsewhere. A cached run cannot tell whether its rate was held by its workers (more
    of them are faster, as the model has it) or by how the step's threads share the cores
    (they are not), and the scripts bench has both (lightning gains from more workers at every
    core, timm does not): the truth lies anywhere between the two."""
    carried = stretch_from(model, cfg) if mode in (Mode.CACHED, Mode.DISK) else None
    if carried is None or not rate_sps:
        return 0.0
    other = mean_rates(model, replace(cfg, workers=carried), layout, mode, cache_bytes)
    return abs(math.log(rate_sps / other.rate_sps)) / math.sqrt(3.0)


def _law_beyond(model: Model, cfg: Config) -> Law:
    """How prep is taken to scale to `cfg`'s CPUs, beyond those measured."""
    if model.contention_probed:
        return Law.PROBED
    if cores_beyond_fit(model, cfg):
        return Law.BEYOND
    return Law.CONTENTION if model.contention else Law.LINEAR


def _cpu_assumptions(model: Model, cfg: Config) -> list[Assumption]:
    top = max(model.measured_cpus, default=0)
    out = []
    if cfg.cpus > top:
        out.append(Assumption(Assume.BEYOND_CPUS, cpus=cfg.cpus, measured_cpus=top,
                              law=_law_beyond(model, cfg)))
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
    if (carried := stretch_from(model, cfg)) is not None:
        out.append(Assumption(Assume.SHARING, cpus=cfg.cpus, workers=workers_for(model, cfg),
                              measured_workers=carried))
    return tuple(out + _storage_assumptions(model, cfg))
