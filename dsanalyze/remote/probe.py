"""Probe an endpoint: GET throughput and time to first byte at 1, 4, 16 and 64 requests at once.

    record = probe(Endpoint.parse("s3://bucket/prefix/"), budget_bytes=8 << 20)

At each concurrency c, c threads GET the dataset's own objects (`Endpoint.objects`,
in turn, round the list again if it is short) until the level has read
`budget_bytes`: the last requests in flight finish, so a level reads at most
`budget_bytes` plus c objects. A level also stops issuing requests after
`LEVEL_S` seconds, so that a slow link costs at most about 4 × LEVEL_S. Throughput is the level's bytes over its wall
time; each request's time to first byte is kept (`ProbePoint.ttfb_s`). Latency
is the median at c = 1, where no request queues behind another.
"""

from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from dsanalyze.linkrecords import EndpointProbe, ProbePoint
from dsanalyze.remote.endpoint import Endpoint

LEVELS = (1, 4, 16, 64)
MAX_OBJECTS = 1024
LEVEL_S = 5.0


class _Level:
    """One concurrency level's shared state: the next object, the bytes read, the lock."""

    def __init__(self, names: list[str], budget_bytes: int, time_s: float) -> None:
        self._names = itertools.cycle(names)
        self._deadline = time.monotonic() + time_s
        self._lock = threading.Lock()
        self.budget_bytes = budget_bytes
        self.bytes_read = 0
        self.errors = 0
        self.ttfb_s: list[float] = []

    def take(self) -> str | None:
        with self._lock:
            done = self.bytes_read >= self.budget_bytes or time.monotonic() > self._deadline
            return None if done else next(self._names)

    def add(self, ttfb_s: float, nbytes: int) -> None:
        with self._lock:
            self.bytes_read += nbytes
            self.ttfb_s.append(ttfb_s)


    def fail(self) -> None:
        with self._lock:
            self.errors += 1


def _worker(endpoint: Endpoint, client: object, level: _Level) -> None:
    while (name := level.take()) is not None:
        try:
            level.add(*endpoint.fetch(name, client))
        except Exception:  # a timeout, a reset: counted, the probe goes on
            level.fail()


def probe_level(endpoint: Endpoint, names: list[str], concurrency: int,
                budget_bytes: int, client: object = None, time_s: float = LEVEL_S) -> ProbePoint:
    """One level; `client` (S3: thread-safe, pooled for 64 connections) is shared."""
    level = _Level(names, budget_bytes, time_s)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        for f in [pool.submit(_worker, endpoint, client, level) for _ in range(concurrency)]:
            f.result()
    return ProbePoint(concurrency, len(level.ttfb_s), level.bytes_read,
                      time.perf_counter() - t0, tuple(sorted(level.ttfb_s)), level.errors)


def probe(endpoint: Endpoint, budget_bytes: int, levels: tuple[int, ...] = LEVELS,
          names: list[str] | None = None) -> EndpointProbe:
    """Every level in turn over the same objects (`names`, or the endpoint's own)."""
    names = names or endpoint.objects(limit=MAX_OBJECTS)
    client = endpoint.client()
    points = tuple(probe_level(endpoint, names, c, budget_bytes, client) for c in levels)
    return EndpointProbe(endpoint.url, budget_bytes, len(names), points)
