"""What-if over a network link: a remote run's rate at another bandwidth, latency, concurrency.

Each of `streams` request streams (DataLoader workers × the library's own
parallelism, which is 1 for the loaders tested) reads its samples one after
another: it spends, a sample, off the link

    think_s = streams / P_cached                          (prep, from the cached run)
            + r × (latency + request_s)                   (r requests a sample, each one delay
                                                           and the endpoint's own time)
            + b × byte_s                                  (the endpoint's own time per byte)

and then its b bytes a sample cross the link, which every stream shares:
`link_s = b / (bw × PAYLOAD_SHARE)` of the link's time. The job's rate is that
loop's (`loop_sps`): `streams / (think_s + link_s)` while the streams leave the
link spare time, `1 / link_s` (the link's payload rate) once they fill it. The
latency and the link are inputs (the proxy's counts `r` and `b` per sample the
ranks consumed, over the steady window: `LinkRecord.steady`; a run whose loader
drained or filled its read-ahead in that window is no observation, its rate not
the link's: `window.read_ahead_steady`), never fitted: a
stream's requests wait `r × latency` a sample, `streams` of them at a time. Only what is left, `request_s`
and `byte_s`, is fitted (`fit`), and a run held at the link's rate says
nothing of it.

No queueing below the link's rate: the streams' transfers take turns (a small
object's response is sent whole, first come first served, by the bucket's
queue). A fair share of the link for long transfers (TCP's) queues the streams
near the knee `streams × link_s = think_s + link_s` (mean value analysis of
processor sharing: 20% slower at 4 streams and think = 3 link_s), where the
law is at its least sure; a real server's 32 KiB GETs through a token bucket
follow this law there (tests/test_netlaw.py).

A loader that requests in threads of its own beside its prep (mosaicml-streaming's
download thread) hides part of each delay: a stream then waits `delay_share × latency` a
request. The share is 1 for a loader that requests in turn with its prep; it is fitted
(at most 1) only where the runs with a delay want a cost a request below zero, which no
endpoint has (`fit`).

Assumptions, untested here: the streams slow each other only through the link
(and there only once they fill it); the endpoint's own costs are the same
at every link; a request's delay is one latency (HTTP/1.1, one request a turn);
frames of 1500 bytes (`PAYLOAD_SHARE`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from dsanalyze.analysis.runrate import run_rate
from dsanalyze.analysis.window import read_ahead_steady
from dsanalyze.config import Mode
from dsanalyze.records import RunResult
from dsanalyze.settings import SETTINGS

# TCP payload per Ethernet frame of a 1500-byte MTU, timestamps on (1448 of 1514 bytes): the
# share of a link's line rate the job's bytes get. A physical figure, not fitted.
PAYLOAD_SHARE = 1448 / 1514


def link_s(bytes_per_sample: float, bw_bps: float | None) -> float:
    """The link's time a sample: its bytes at the payload rate of `bw_bps` (None: unlimited)."""
    return bytes_per_sample / (bw_bps * PAYLOAD_SHARE) if bw_bps else 0.0


def loop_sps(streams: int, think_s: float, link_s: float) -> float:
    """Samples/s of `streams` streams, each spending `think_s` a sample off the link and then
    `link_s` on it: their own pace, at most the link's."""
    cycle_s = think_s + link_s
    own_sps = streams / cycle_s if cycle_s > 0 else math.inf
    return min(own_sps, 1 / link_s) if link_s > 0 else own_sps


def held_at_link(rate_sps: float, link_s: float) -> bool:
    """A rate within the runs' noise (`noise_floor`) of the link's: its think time is not in it."""
    return link_s > 0 and rate_sps * link_s >= 1 - SETTINGS.noise_floor


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

    def link_s(self) -> float:
        return link_s(self.bytes_per_sample, self.bw_bps)

    def known_think_s(self) -> float:
        """A stream's time a sample off the link that the inputs explain: prep and delay."""
        return (self.streams / self.cached_rate_sps
                + self.requests_per_sample * self.latency_s)

    def think_s(self) -> float:
        """A stream's time a sample off the link, as the run's rate says."""
        return self.streams / self.rate_sps - self.link_s()

    def fetch_s(self) -> float:
        """The run's think time a stream left once prep and the delay are taken out: what
        `request_s` and `byte_s` explain."""
        return self.think_s() - self.known_think_s()

    def weight(self) -> float:
        """What the run's log rate says of its `fetch_s`: d log(rate) / d think, times the
        share of the time the link idles (0 for a run held at the link's rate): near the
        knee the streams may queue for the link, and a rate short of it is then queueing
        as much as think time (a link's rate is its busy share over `link_s`, and think
        time moves it only through the idle share)."""
        if held_at_link(self.rate_sps, self.link_s()):
            return 0.0
        return self.rate_sps / self.streams * (1 - self.rate_sps * self.link_s())


@dataclass(frozen=True)
class NetModel:
    """The endpoint's own cost per request (s) and per byte (s/byte), fitted."""

    request_s: float
    byte_s: float
    runs: int = 0  # observations fitted on
    delay_share: float = 1.0  # of a request's delay a stream waits (under 1: the loader hides it)

    def rate_sps(self, cached_rate_sps: float, streams: int, requests_per_sample: float,
                 bytes_per_sample: float, bw_bps: float | None, latency_s: float) -> float:
        """Predicted samples/s of the job with its data across a link of `bw_bps` (None:
        unlimited) and `latency_s`."""
        think_s = (streams / cached_rate_sps
                   + requests_per_sample * (self.delay_share * latency_s + self.request_s)
                   + bytes_per_sample * self.byte_s)
        return loop_sps(streams, think_s, link_s(bytes_per_sample, bw_bps))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NetModel:
        return cls(float(d["request_s"]), float(d["byte_s"]), int(d.get("runs", 0)),
                   float(d.get("delay_share", 1.0)))


def fit(observations: list[NetObservation]) -> NetModel:
    """`fetch_s = r × request_s + b × byte_s` over the observations, each weighted by what its
    rate says of its think time (`weight`: least squares of the log rates, to first order),
    each coefficient held at 0 or more (a negative cost is noise: the other is refitted).
    Runs that cannot tell the two apart (one ratio of bytes to requests) get the cost a
    request: the least squares' smallest solution would split it by the units. Where the
    runs want a cost a request below zero, the loader waited less than the delay:
    `delay_share` is fitted then (`_delay_share`), never beside a cost a request (runs at
    one delay cannot tell a share of it from a cost a request)."""
    w = np.array([o.weight() for o in observations], float)
    if not w.any():
        return NetModel(0.0, 0.0, len(observations))
    a = np.array([[o.requests_per_sample, o.bytes_per_sample] for o in observations], float)
    a, y = a * w[:, None], np.array([o.fetch_s() for o in observations], float) * w
    coef = np.linalg.lstsq(a, y, rcond=None)[0]
    if coef.min() < 0 or np.linalg.matrix_rank(a) < 2:  # the better one-parameter fit
        single = [max(0.0, float(a[:, i] @ y / (a[:, i] @ a[:, i]))) if a[:, i].any() else 0.0
                  for i in range(2)]
        errs = [float(np.sum((y - a[:, i] * single[i]) ** 2)) for i in range(2)]
        coef = np.array([single[0], 0.0] if errs[0] <= errs[1] else [0.0, single[1]])
    below_zero = coef[0] == 0 and float(a[:, 0] @ (y - a[:, 1] * coef[1])) < 0
    share = _delay_share(observations, w, float(coef[1])) if below_zero else 1.0
    return NetModel(float(coef[0]), float(coef[1]), len(observations), share)


def _delay_share(observations: list[NetObservation], w: np.ndarray, byte_s: float) -> float:
    """The share of each request's delay the streams wait, from the runs with a delay: their
    think time less prep and the bytes' cost, over `r × latency` (least squares, weighted as
    `fit`), between 0 and 1."""
    x, y = [], []
    for wi, o in zip(w, observations):
        if wi > 0 and o.latency_s > 0:
            x.append(wi * o.requests_per_sample * o.latency_s)
            y.append(wi * (o.think_s() - o.streams / o.cached_rate_sps
                           - o.bytes_per_sample * byte_s))
    xs = np.array(x, float)
    if not xs.any():
        return 1.0
    return float(np.clip(xs @ np.array(y, float) / (xs @ xs), 0.0, 1.0))


def observations(results: list[RunResult]) -> list[NetObservation]:
    """Every completed remote run with a link record and a cached run of its CPU count, but
    one whose loader drained or filled its read-ahead over its steady window (its rate is not
    the link's: `window.read_ahead_steady`)."""
    cached = {r.spec.resources.cpus: run_rate(r).rate_sps for r in results
              if r.ok and r.mode is Mode.CACHED}
    out = []
    for r in results:
        res, link = r.spec.resources, r.link
        rate, base = run_rate(r).rate_sps if r.ok else None, cached.get(res.cpus)
        counts = link.steady(sum(sum(k.samples) for k in r.ranks)) if link else None
        if (r.mode is not Mode.DISK or not res.remote or counts is None or not rate or not base
                or not read_ahead_steady(r)):
            continue
        out.append(NetObservation(res.net_bw_bps, res.net_latency_s or 0.0, streams(r),
                                  counts.requests_per_sample, counts.bytes_per_sample,
                                  rate, base))
    return out


def streams(run: RunResult) -> int:
    """Request streams of a run: its training loader's workers (the main process when 0),
    as its ranks recorded them, over every rank."""
    per_rank = [max(1, int((k.extra.get("loader") or {}).get("workers") or 0)) for k in run.ranks]
    return sum(per_rank) or 1
