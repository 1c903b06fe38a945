"""The most a disk run's steady window can have waited on storage: the time the storage took
to serve what the window read.

A disk run's fetch stall is its epoch time less its cached run's, two separate runs. The
storage can keep the job waiting no longer than it took to serve the reads. Those are
the bytes the run's cgroup read in its steady window (`window.window_read_bytes`). They are
served at the slower of the device's cold rate (the run's storage probe,
`cache_state.storage_device`) and the run's throttle, with the device's latency once per
page, as if every page were a request of its own and none overlapped another:

    service_s = read_bytes / min(device_bps, throttle_bps) + ceil(read_bytes / PAGE) * latency_s

Over the window's wall time, that is the largest fetch stall the run can hold
(`FetchBound.bound_pct`). A window whose bound is at most `SETTINGS.noise_floor` of its time
ran from the page cache, as its cached run did (`FetchBound.unread`). Its fetch stall is 0;
whatever separates the two runs' rates is drift between two runs, which neither rate's
interval (a bootstrap over one run's iterations) holds.

No bound (None) where the run is not a completed local disk run of one node, the cgroup did
not count its reads, or its storage probe is missing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dsanalyze.analysis.window import steady_window, window_read_bytes
from dsanalyze.config import Mode
from dsanalyze.plain import PlainJson
from dsanalyze.records import RunResult
from dsanalyze.settings import SETTINGS

PAGE = 4096  # bytes: the smallest read a page cache miss makes


@dataclass(frozen=True)
class FetchBound(PlainJson):
    """What a disk run's steady window read from storage and the most it can have waited."""

    run_id: str
    window_read_bytes: int
    window_s: float  # the window's wall time
    service_s: float  # the storage's time to serve the window's reads (the module's law)

    @property
    def bound_pct(self) -> float:
        """The largest fetch stall the window can hold, in % of its time."""
        return 100 * self.service_s / self.window_s

    @property
    def unread(self) -> bool:
        """The window ran from the page cache: its storage time is within the noise floor."""
        return self.bound_pct <= 100 * SETTINGS.noise_floor


def service_s(read_bytes: int, device_bps: float, latency_s: float,
              throttle_bps: float | None = None) -> float:
    """Seconds the storage takes to serve `read_bytes`, one page per request, serially."""
    bps = device_bps if throttle_bps is None else min(device_bps, throttle_bps)
    return read_bytes / bps + math.ceil(read_bytes / PAGE) * latency_s


def fetch_bound(result: RunResult) -> FetchBound | None:
    """The bound of `result`'s steady window (the module's law), or None."""
    res = result.spec.resources
    if result.mode is not Mode.DISK or not result.ok or res.net_latency_s is not None \
            or result.io.nodes:
        return None
    probe = (result.io.cache_state or {}).get("storage_device") or {}
    device_bps, latency_s = probe.get("read_bps"), probe.get("latency_s")
    window = steady_window(result)
    span = window.span_unix_s() if window is not None else None
    read = window_read_bytes(result, window)
    if not device_bps or latency_s is None or span is None or read is None or span[1] <= span[0]:
        return None
    return FetchBound(result.run_id, read, span[1] - span[0],
                      service_s(read, device_bps, latency_s, res.storage_read_bps))
