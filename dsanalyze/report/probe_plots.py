"""The endpoint probe's figure: GET throughput against requests in flight, one line per link.

Every point is a `ProbePoint` of a run's `LinkRecord.probe` (`remote/probe.py`),
drawn as stored: throughput (MB/s, 10^6 bytes) at each concurrency, and the
median time to first byte as its label. A curve that still rises at 64 is
latency-bound (more requests in flight would help); one flat from 4 on is
bandwidth-bound.
"""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

from dsanalyze.linkrecords import EndpointProbe, LinkShape  # noqa: E402
from dsanalyze.records import RunResult  # noqa: E402
from dsanalyze.report.text import Knobs, remote_text  # noqa: E402


def probes(runs: list[RunResult]) -> dict[str, EndpointProbe]:
    """Each distinct probe of the runs, by the link it was measured on, in words."""
    out: dict[str, EndpointProbe] = {}
    for r in runs:
        if r.link is not None and r.link.probe is not None:
            out.setdefault(link_label(r.link.shape, r.link.served), r.link.probe)
    return out


def link_label(shape: LinkShape, served: bool) -> str:
    if not served:
        return "the endpoint"
    return remote_text(Knobs(net_bw_bps=shape.bw_bps, net_latency_s=shape.latency_s)) or ""


def probe_curve(runs: list[RunResult]) -> Figure | None:
    """Throughput vs concurrency per probed link; None when no run holds a probe."""
    found = probes(runs)
    if not found:
        return None
    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.subplots()
    for label, probe in sorted(found.items()):
        xs = [p.concurrency for p in probe.points]
        ys = [p.throughput_bps / 1e6 for p in probe.points]
        ax.plot(xs, ys, marker="o", label=label)
        for p, y in zip(probe.points, ys):
            _ttfb_label(ax, p.concurrency, y, p.ttfb_median_s)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({p.concurrency for pr in found.values() for p in pr.points}),
                  [str(c) for c in sorted({p.concurrency for pr in found.values()
                                           for p in pr.points})])
    ax.set_xlabel("GET requests in flight")
    ax.set_ylabel("throughput (MB/s)")
    ax.set_ymargin(0.2)
    ax.set_title("Endpoint probe: the dataset's own objects", fontsize=11)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8.5, frameon=False)
    return fig


def _ttfb_label(ax: Any, x: int, y: float, ttfb_s: float | None) -> None:
    if ttfb_s is not None:
        ax.annotate(f"{ttfb_s * 1000:.0f} ms", (x, y), xytext=(0, 5), textcoords="offset points",
                    ha="center", fontsize=7.5)
