"""The network what-if's law (whatif/network.py) against a real server behind a real link.

Client threads play a loader's request streams: each GETs an object, sleeps its "prep",
and GETs the next. Their unshaped rate is the cached run's; the law, told only the link
(bandwidth, delay) and the proxy's counts of requests and bytes, predicts the rate across
the shaped link. The independent reasons: a token bucket shared by streams queues them
(neither each stream alone nor the bucket's rate is the answer), and a delay of d seconds
costs each stream d a request, the streams overlapping.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from dataclasses import replace

import pytest
from test_remote import needs_netns, served_http  # noqa: F401 (the fixture)

from dsanalyze.whatif import network

WARMUP_S = 0.4


def loop_sps(served, streams: int, think_s: float, duration_s: float) -> tuple[float, float,
                                                                             float]:
    """`streams` threads each GETting the 32 KiB objects in turn, sleeping `think_s` after
    each, for `duration_s`: (GETs a second after a warm-up, and the proxy's requests and
    bytes per GET)."""
    done: list[float] = []
    lock, t0 = threading.Lock(), time.perf_counter()
    stop = t0 + WARMUP_S + duration_s

    def stream(k: int) -> None:
        i = k
        while time.perf_counter() < stop:
            with urllib.request.urlopen(f"{served.endpoint_url}/obj{i % 16:02d}.bin",
                                        timeout=30) as r:
                r.read()
            with lock:
                done.append(time.perf_counter())
            i += streams
            time.sleep(think_s)

    before = served.stats()
    threads = [threading.Thread(target=stream, args=(k,)) for k in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after = served.stats()
    measured = sorted(t for t in done if t >= t0 + WARMUP_S)
    rate = (len(measured) - 1) / (measured[-1] - measured[0])
    return (rate, (after["requests"] - before["requests"]) / len(done),
            (after["bytes_down"] - before["bytes_down"]) / len(done))


def observe(served, bw_bps: int | None, latency_s: float, streams: int, think_s: float,
            cached_sps: float, duration_s: float = 2.0) -> network.NetObservation:
    served.shape(bw_bps, latency_s)
    try:
        rate, r, b = loop_sps(served, streams, think_s, duration_s)
    finally:
        served.shape(None, 0.0)
    return network.NetObservation(bw_bps, latency_s, streams, r, b, rate, cached_sps)


def predict(model: network.NetModel, o: network.NetObservation) -> float:
    return model.rate_sps(o.cached_rate_sps, o.streams, o.requests_per_sample,
                          o.bytes_per_sample, o.bw_bps, o.latency_s)


@needs_netns
@pytest.mark.parametrize("bw_bps, think_s, busy", [(1 << 20, 0.15, (0.5, 0.85)),
                                                   (256 << 10, 0.4, (0.95, 1.0))])
def test_streams_share_a_link_up_to_its_payload_rate(served_http, bw_bps, think_s,  # noqa: F811
                                                    busy):
    """4 streams, 32 KiB a GET: on a 1 MiB/s bucket they leave it about a third idle (each
    stream's 31 ms transfer per 150 ms of prep: 4 x 31 / 181 = 69% busy, less on a slow
    machine) and overlap their transfers with each other's prep; on 256 KiB/s they fill it,
    and get its rate less the headers (TCP/IP and Ethernet: 1448 of each 1514 bytes). The
    unshaped loop is measured before and after the shaped one: on a loaded machine (the
    other pytest-xdist worker) its rate moves between the two, and the shaped run is judged
    against the predictions from both, 10% either side (one reading before alone missed by
    11% under load, measured 23.6 against 21.2 samples/s)."""
    streams = 4
    before_sps = loop_sps(served_http, streams, think_s, 1.5)[0]
    o = observe(served_http, bw_bps, 0.0, streams, think_s, before_sps, 2.5)
    after_sps = loop_sps(served_http, streams, think_s, 1.5)[0]
    assert o.requests_per_sample == pytest.approx(1.0)  # HTTP/1.0: one GET, one request
    payload_sps = bw_bps * 1448 / 1514 / o.bytes_per_sample
    lo, hi = (share * 1448 / 1514 for share in busy)  # the regime asked for
    laws, predicted = [], []
    for cached_sps in (before_sps, after_sps):
        own_sps = streams / (streams / cached_sps + o.bytes_per_sample / bw_bps)
        laws.append(min(own_sps, payload_sps))
        predicted.append(predict(network.NetModel(0.0, 0.0),
                                 replace(o, cached_rate_sps=cached_sps)))
    assert lo <= min(laws) * o.bytes_per_sample / bw_bps and \
        max(laws) * o.bytes_per_sample / bw_bps <= hi
    assert 0.9 * min(predicted) <= o.rate_sps <= 1.1 * max(predicted)
    assert 0.9 * min(laws) <= o.rate_sps <= 1.1 * max(laws)


@needs_netns
def test_a_fit_at_one_delay_and_a_full_link_predicts_another_delay(served_http):  # noqa: F811
    """Fitted on 20 ms and on a full 256 KiB/s bucket, the law predicts 60 ms: the delay is
    an input, each stream waits it once a request, and the full link says nothing of the
    endpoint's own costs (its streams queue for the bucket, which no endpoint cost is)."""
    streams, think_s = 2, 0.02
    cached_sps = loop_sps(served_http, streams, think_s, 1.5)[0]
    full = observe(served_http, 256 << 10, 0.0, streams, think_s, cached_sps, 2.0)
    before = served_http.stats()
    at20 = observe(served_http, None, 0.02, streams, think_s, cached_sps, 1.5)
    after = served_http.stats()
    at60 = observe(served_http, None, 0.06, streams, think_s, cached_sps, 1.5)
    model = network.fit([full, at20])
    assert full.rate_sps * full.bytes_per_sample / (256 << 10) > 0.9 * 1448 / 1514  # full
    # the delay explains the stall, not a fitted cost; a loaded machine wakes the proxy
    # late, and that lateness (its held time beyond 20 ms a request) is a request's cost
    late_s = max(0.0, (after["held_s"] - before["held_s"])
                 / max(1, after["requests"] - before["requests"]) - 0.02)
    assert model.request_s < 0.25 * 0.02 + late_s
    assert predict(model, at60) == pytest.approx(at60.rate_sps, rel=0.1)
    # and the delay costs what it says: two streams, 40 ms more a request each
    assert 1 / at60.rate_sps - 1 / at20.rate_sps == pytest.approx(0.04 / streams, rel=0.2)
