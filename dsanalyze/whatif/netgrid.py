"""The what-if grid of a sweep whose data is across a network: links and concurrency.

    preds = predictions(model, results)     # [] when no remote run has a link record

For each CPU count of the remote runs, each latency measured, each bandwidth of
`bandwidths` (the measured ones, 2x and 4x the largest, unshaped) and each
DataLoader worker count (as measured, 2x, 4x), a `Prediction` whose rate is the
network law (`network.NetModel.rate_sps`): the request streams are the ranks'
workers (the loaders tested have no parallelism of their own), the per-request
and per-byte costs are fitted on the remote runs (`network.fit`), each sample's
requests and bytes are the proxy's counts, and the rate on this side of the link
(`streams / P_cached`) is the main model's cached prediction at that worker
count. Its interval is rate x exp(-+z sigma), sigma the fit's leave-one-out error
over the remote runs of a kind measured twice or more (`loo_sigma`; in-sample
with fewer than 2 such runs, said untested), widened as
the disk's for each untested assumption. So the decision (`decision.decide`)
can find that more workers hide the latency at the bandwidth paid for, before
it buys a faster link (bandwidth costs before workers in its order).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from dsanalyze.config import Mode, Resources
from dsanalyze.records import RunResult
from dsanalyze.settings import SETTINGS
from dsanalyze.whatif import network
from dsanalyze.whatif.api import Prediction, predict
from dsanalyze.whatif.assumptions import NETWORK, Assume, Assumption
from dsanalyze.whatif.heldout import run_cpus
from dsanalyze.whatif.laws import job_ranks, layout_for
from dsanalyze.whatif.model import Config, Model, Z

MIN_SIGMA = 0.02  # a fit that explains its runs exactly still has the runs' own noise


def _remote(results: Sequence[RunResult]) -> list[RunResult]:
    return [r for r in results if r.ok and r.ranks and r.mode is Mode.DISK
            and r.spec.resources.remote]


def bandwidths(results: Sequence[RunResult]) -> list[int | None]:
    """The measured link bandwidths, 2x and 4x the largest, and unshaped (None) last."""
    bws = {r.spec.resources.net_bw_bps for r in _remote(results)} - {None}
    top = max(bws, default=None)
    return sorted(bws | ({2 * top, 4 * top} if top else set())) + [None]


def loo_sigma(obs: Sequence[network.NetObservation]) -> tuple[float, bool]:
    """The law's relative error on runs left out of its fit (RMS of log ratios), and whether
    it was out of sample (2 runs or more left out; else the in-sample error). A run is left
    out only while another of its kind (with a delay, or without) stays in the fit: the one
    run with a delay is the fit's only evidence of the endpoint's cost a request, and the
    grid never predicts without it."""
    def err(fit_on: Sequence[network.NetObservation], o: network.NetObservation) -> float:
        m = network.fit(list(fit_on))
        pred = m.rate_sps(o.cached_rate_sps, o.streams, o.requests_per_sample,
                          o.bytes_per_sample, o.bw_bps, o.latency_s)
        return math.log(o.rate_sps / pred)
    kinds = Counter(o.latency_s > 0 for o in obs)
    left_out = [o for o in obs if kinds[o.latency_s > 0] >= 2]
    out = len(left_out) >= 2
    logs = ([err([p for p in obs if p is not o], o) for o in left_out] if out
            else [err(obs, o) for o in obs])
    return max(MIN_SIGMA, math.sqrt(statistics.fmean(x * x for x in logs))), out


def spread(sigma: float, untested: int) -> float:
    """The factor k of a 90% interval [rate / k, rate × k]: the law's out-of-sample error
    `sigma` and `untested` assumptions' each, in quadrature."""
    return math.exp(Z * math.sqrt(sigma ** 2 + untested * SETTINGS.untested_sigma ** 2))


def predictions(model: Model, results: Sequence[RunResult], cpus: Sequence[int] | None = None,
                workers: Sequence[int | None] | None = None,
                bws: Sequence[int | None] | None = None,
                latencies: Sequence[float] | None = None) -> list[Prediction]:
    """The grid of the module docstring, each knob given replacing its default (`dsanalyze
    whatif --cpus --workers --net-bw --net-latency`); [] without remote runs to fit on."""
    obs = network.observations(list(results))
    if not obs:
        return []
    net, (sigma, out_of_sample) = network.fit(obs), loo_sigma(obs)
    r = statistics.median(o.requests_per_sample for o in obs)
    b = statistics.median(o.bytes_per_sample for o in obs)
    runs = _remote(results)
    lats = latencies or sorted({r.spec.resources.net_latency_s or 0.0 for r in runs})
    w = model.workers
    out = []
    for c in cpus or sorted({run_cpus(x) for x in runs}):
        for j in sorted({x if x is not None else w for x in workers or (w, 2 * w or 1, 4 * w or 2)}):
            here = predict(model, Config.of(c, workers=j))
            for lat in lats:
                for bw in bws or bandwidths(results):
                    cfg = Config(Resources(c, net_bw_bps=bw, net_latency_s=lat), workers=j)
                    out.append(_at_link(model, net, here, cfg, r, b, sigma, out_of_sample))
    return out


def _at_link(model: Model, net: network.NetModel, here: Prediction, cfg: Config, r: float,
             b: float, sigma: float, out_of_sample: bool) -> Prediction:
    """`here` (the configuration with its data on this side) across `cfg`'s link."""
    res = cfg.resources
    ranks = job_ranks(model, replace(cfg, nproc=cfg.nproc or model.ranks))
    _, n = layout_for(model, ranks)
    streams = ranks * max(1, cfg.workers or 0)
    rate = net.rate_sps(n / here.cached_s, streams, r, b, res.net_bw_bps,
                        res.net_latency_s or 0.0)
    untested = [*here.untested, *NETWORK]
    if not out_of_sample:
        untested.append(Assumption(Assume.NET_IN_SAMPLE, runs=net.runs))
    k = spread(sigma, len(untested))
    link_sps = 1 / network.link_s(b, res.net_bw_bps) if res.net_bw_bps and b else math.inf
    return replace(here, config=cfg, rate_sps=rate, epoch_s=n / rate,
                   fetch_stall_s=max(0.0, n / rate - here.cached_s), epoch1_s=None,
                   hit_rate=None, cache_effective_bytes=None,
                   bound_sps=min(here.bound_sps, link_sps), rate_sps_low=rate / k,
                   rate_sps_high=rate * k, untested=tuple(untested))
