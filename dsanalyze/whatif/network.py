"""What-if over a network link: a remote run's rate at another bandwidth, latency, concurrency.

Each of `streams` request streams (DataLoader workers × the library's own
parallelism, which is 1 for the loaders tested) reads its samples one after
another, and prepares each after reading it, so a sample costs one stream

    t_sample = streams / P_cached                         (prep, from the cached run)
             + r × (latency + request_s)                  (r requests a sample, each one delay
                                                           and the endpoint's own time)
             + b × (1 / bw + byte_s)                      (b bytes a sample through the link,
                                                           and the endpoint's own time per byte)

and the job gets `rate = min(streams / t_sample, bw / b)`: the streams overlap
their requests, the link carries at most `bw`. `request_s` and `byte_s` are
fitted (non-negative least squares over every remote run) on each run's
per-sample fetch time `streams / rate − streams / P_cached − r × latency − b / bw`;
`r` and `b` are the proxy's counts over the run (`LinkRecord`) per sample the
ranks consumed. Assumptions, untested here: the request streams do not slow
each other down but through the link; the endpoint's own costs do not change
with the bandwidth or the latency; a request's delay is one latency (HTTP/1.1,
one request a turn).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from dsanalyze.analysis.runrate import run_rate
from dsanalyze.config import Mode
from dsanalyze.records import RunResult


@dataclass(frozen=True)
class NetObservation:
    """One remote run as the model sees it, with its cached run's rate."""

    bw_bps: float | None  # None: unshaped
    latency_s: float
    streams: int
    requests_per_sample: float
    bytes_per_sample: float
    rate_sps: float
    cached_rate_sps: float

    def fetch_s(self) -> float:
        """The run's per-sample fetch time left once prep, the delay and the link are taken
        out: what `request_s` and `byte_s` explain."""
        link_s = self.bytes_per_sample / self.bw_bps if self.bw_bps else 0.0
        return (self.streams / self.rate_sps - self.streams / self.cached_rate_sps
                - self.requests_per_sample * self.latency_s - link_s)


@dataclass(frozen=True)
class NetModel:
    """The endpoint's own cost per request (s) and per byte (s/byte), fitted."""

    request_s: float
    byte_s: float
    runs: int = 0  # observations fitted on

    def rate_sps(self, cached_rate_sps: float, streams: int, requests_per_sample: float,
                 bytes_per_sample: float, bw_bps: float | None, latency_s: float) -> float:
        """Predicted samples/s of the job with its data across a link of `bw_bps` (None:
        unlimited) and `latency_s`."""
        per_byte_s = self.byte_s + (1.0 / bw_bps if bw_bps else 0.0)
        t_sample = (streams / cached_rate_sps + requests_per_sample * (latency_s + self.request_s)
                    + bytes_per_sample * per_byte_s)
        link_sps = bw_bps / bytes_per_sample if bw_bps and bytes_per_sample else float("inf")
        return min(streams / t_sample, link_sps)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NetModel:
        return cls(float(d["request_s"]), float(d["byte_s"]), int(d.get("runs", 0)))


def fit(observations: list[NetObservation]) -> NetModel:
    """Least squares of `fetch_s = r × request_s + b × byte_s` over the observations, each
    coefficient held at 0 or more (a negative cost is noise: the other one is refitted)."""
    if not observations:
        return NetModel(0.0, 0.0, 0)
    a = np.array([[o.requests_per_sample, o.bytes_per_sample] for o in observations], float)
    y = np.array([o.fetch_s() for o in observations], float)
    coef = np.linalg.lstsq(a, y, rcond=None)[0]
    if coef.min() < 0:  # the better of the two one-parameter fits
        single = [max(0.0, float(a[:, i] @ y / (a[:, i] @ a[:, i]))) if a[:, i].any() else 0.0
                  for i in range(2)]
        errs = [float(np.sum((y - a[:, i] * single[i]) ** 2)) for i in range(2)]
        coef = np.array([single[0], 0.0] if errs[0] <= errs[1] else [0.0, single[1]])
    return NetModel(float(coef[0]), float(coef[1]), len(observations))


def observations(results: list[RunResult]) -> list[NetObservation]:
    """Every completed remote run with a link record and a cached run of its CPU count."""
    cached = {r.spec.resources.cpus: run_rate(r).rate_sps for r in results
              if r.ok and r.mode is Mode.CACHED}
    out = []
    for r in results:
        res, link = r.spec.resources, r.link
        rate, base = run_rate(r).rate_sps if r.ok else None, cached.get(res.cpus)
        if (r.mode is not Mode.DISK or not res.remote or link is None or not rate or not base
                or not link.requests or not link.bytes_down):
            continue
        consumed = sum(sum(k.samples) for k in r.ranks)
        out.append(NetObservation(res.net_bw_bps, res.net_latency_s or 0.0, streams(r),
                                  link.requests / consumed, link.bytes_down / consumed,
                                  rate, base))
    return out


def streams(run: RunResult) -> int:
    """Request streams of a run: its training loader's workers (the main process when 0),
    as its ranks recorded them, over every rank."""
    per_rank = [max(1, int((k.extra.get("loader") or {}).get("workers") or 0)) for k in run.ranks]
    return sum(per_rank) or 1
