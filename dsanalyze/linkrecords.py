"""What a remote-data run had between the job and its data, typed: values, no I/O.

`LinkRecord` is stored with every run of a sweep whose data is on the other side
of a network (`RunResult.link`): the link's shape as set for the run, the
requests and bytes that crossed it (counted by the delay proxy for served
data), and the endpoint's probe (`EndpointProbe`: GET throughput and time to
first byte at several concurrencies, `remote/probe.py`).
"""

from __future__ import annotations

import enum
import statistics
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ProbePoint:
    """`concurrency` GETs at a time over the dataset's own objects, until the level's
    byte budget is read. `ttfb_s`: each completed request's time to its first byte (sorted);
    `errors`: requests that failed (timed out, reset)."""

    concurrency: int
    requests: int
    bytes_read: int
    wall_s: float
    ttfb_s: tuple[float, ...] = ()
    errors: int = 0

    @property
    def throughput_bps(self) -> float:
        return self.bytes_read / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def ttfb_median_s(self) -> float | None:
        return statistics.median(self.ttfb_s) if self.ttfb_s else None

    def to_dict(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "requests": self.requests,
                "bytes_read": self.bytes_read, "wall_s": self.wall_s,
                "ttfb_s": list(self.ttfb_s), "errors": self.errors}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ProbePoint:
        return cls(int(d["concurrency"]), int(d["requests"]), int(d["bytes_read"]),
                   float(d["wall_s"]), tuple(float(t) for t in d.get("ttfb_s", ())),
                   int(d.get("errors", 0)))


@dataclass(frozen=True)
class EndpointProbe:
    """The endpoint as the harness measured it before the runs (`budget_bytes` per level)."""

    url: str
    budget_bytes: int
    objects: int  # distinct objects the probe could read
    points: tuple[ProbePoint, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "budget_bytes": self.budget_bytes, "objects": self.objects,
                "points": [p.to_dict() for p in self.points]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EndpointProbe:
        return cls(str(d["url"]), int(d["budget_bytes"]), int(d["objects"]),
                   tuple(ProbePoint.from_dict(p) for p in d.get("points", ())))


@dataclass(frozen=True)
class LinkShape:
    """The link as set for a run: download bandwidth (None: unshaped) and the latency
    added to each request (0: none)."""

    bw_bps: int | None = None
    latency_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"bw_bps": self.bw_bps, "latency_s": self.latency_s}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LinkShape:
        return cls(d.get("bw_bps"), float(d.get("latency_s", 0.0)))


class LocalCacheAction(str, enum.Enum):
    FILLED = "filled"  # every served file copied in: the data on this side
    EMPTIED = "emptied"  # every served file deleted: the library fetches across the link


@dataclass(frozen=True)
class LocalCacheState:
    """A library's local cache as the harness left it before a run (`remote/localcache.py`):
    its directory, what was done, and the served bytes it then held."""

    dir: str
    action: LocalCacheAction
    bytes_held: int

    def to_dict(self) -> dict[str, Any]:
        return {"dir": self.dir, "action": self.action.value, "bytes_held": self.bytes_held}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LocalCacheState:
        return cls(str(d["dir"]), LocalCacheAction(d["action"]), int(d["bytes_held"]))


@dataclass(frozen=True)
class LinkCounts:
    """What crossed the link for `samples` consumed samples: requests, response bytes and
    the time the proxy held them. `span_unix_s`: the run's steady window, None for the whole
    run; over a window, the requests (and their hold) are those that began in it and the
    bytes those that crossed in it.

    `fetched_samples`: the samples' worth of data those bytes carried (the bytes over the
    served data's bytes a sample, `remote/datasamples.py`; None where that is unknown). A
    loader's read-ahead (its prefetched batches, a shuffle buffer) that is as full at the
    window's end as at its start has fetched in it what it consumed; one that drained
    handed out, beside what the link carried, what it had fetched before the window, and
    its consumed rate is then not the rate the link sustains."""

    samples: int
    requests: int
    bytes_down: int
    held_s: float = 0.0
    span_unix_s: tuple[float, float] | None = None
    fetched_samples: float | None = None

    @property
    def requests_per_sample(self) -> float:
        return self.requests / self.samples

    @property
    def bytes_per_sample(self) -> float:
        return self.bytes_down / self.samples

    @property
    def held_s_per_sample(self) -> float:
        return self.held_s / self.samples

    @property
    def read_ahead_change(self) -> float | None:
        """Samples the loader's read-ahead grew by over the counts' span: fetched − consumed
        (negative: it drained); None where the fetched samples are unknown."""
        return None if self.fetched_samples is None else self.fetched_samples - self.samples

    def to_dict(self) -> dict[str, Any]:
        return {"samples": self.samples, "requests": self.requests,
                "bytes_down": self.bytes_down, "held_s": self.held_s,
                "span_unix_s": list(self.span_unix_s) if self.span_unix_s else None,
                "fetched_samples": self.fetched_samples}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LinkCounts:
        span, fetched = d.get("span_unix_s"), d.get("fetched_samples")
        return cls(int(d["samples"]), int(d["requests"]), int(d["bytes_down"]),
                   float(d.get("held_s", 0.0)), (float(span[0]), float(span[1])) if span else None,
                   float(fetched) if fetched is not None else None)


@dataclass(frozen=True)
class LinkRecord:
    """One run's link: its shape, what crossed it, and the endpoint's probe.

    `requests`, `connections`, `bytes_down` (server to job) and `bytes_up` are the
    delay proxy's counts over the run, `held_s` the time it actually held the run's
    requests (None for an endpoint the harness does not serve). `window`: the counts
    over the run's steady window alone (records before it have none): the whole run's
    also hold the warm-up and what the loader read ahead and the run never consumed.
    Its `fetched_samples` against its `samples` say whether the window's rate is the
    link's at all (`LinkCounts`).
    """

    backend: str  # "s3" or "http"
    endpoint_url: str
    served: bool  # True: a server the harness started behind its shaped link
    shape: LinkShape = field(default_factory=LinkShape)
    requests: int | None = None
    connections: int | None = None
    bytes_down: int | None = None
    bytes_up: int | None = None
    probe: EndpointProbe | None = None
    held_s: float | None = None
    local_cache: LocalCacheState | None = None  # the library's local cache, when it has one
    window: LinkCounts | None = None

    def steady(self, consumed_samples: int) -> LinkCounts | None:
        """The counts a sample's requests and bytes are read from: the steady window's, else
        the whole run's over the `consumed_samples`; None when nothing was counted."""
        if self.window is not None and self.window.samples and self.window.requests:
            return self.window
        if not self.requests or not self.bytes_down or consumed_samples <= 0:
            return None
        return LinkCounts(consumed_samples, self.requests, self.bytes_down, self.held_s or 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "endpoint_url": self.endpoint_url, "held_s": self.held_s,
                "served": self.served, "shape": self.shape.to_dict(),
                "requests": self.requests, "connections": self.connections,
                "bytes_down": self.bytes_down, "bytes_up": self.bytes_up,
                "probe": self.probe.to_dict() if self.probe else None,
                "local_cache": self.local_cache.to_dict() if self.local_cache else None,
                "window": self.window.to_dict() if self.window else None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LinkRecord:
        return cls(str(d["backend"]), str(d["endpoint_url"]), bool(d["served"]),
                   LinkShape.from_dict(d.get("shape", {})), d.get("requests"),
                   d.get("connections"), d.get("bytes_down"), d.get("bytes_up"),
                   EndpointProbe.from_dict(d["probe"]) if d.get("probe") else None,
                   d.get("held_s"),
                   LocalCacheState.from_dict(d["local_cache"]) if d.get("local_cache") else None,
                   LinkCounts.from_dict(d["window"]) if d.get("window") else None)
