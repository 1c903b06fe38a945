"""The network what-if on observations made by its own law with known costs: the fit finds
the costs, the prediction never exceeds the link, and runs become observations."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_stalls import JOB, make_run

from dsanalyze.config import Mode, Resources, RunSpec
from dsanalyze.linkrecords import LinkRecord, LinkShape
from dsanalyze.whatif.network import NetModel, NetObservation, fit, observations

LINKS = [(128_000, 0.0), (1_000_000, 0.0), (None, 0.02), (512_000, 0.01)]


def observe(model: NetModel, bw: float | None, latency_s: float, streams: int = 2,
            r: float = 1.0, b: float = 16_000, cached: float = 30.0) -> NetObservation:
    rate = model.rate_sps(cached, streams, r, b, bw, latency_s)
    return NetObservation(bw, latency_s, streams, r, b, rate, cached)


@given(st.floats(0, 0.05), st.floats(0, 1e-6), st.integers(1, 8))
def test_the_fit_finds_the_costs_the_runs_were_made_with(request_s, byte_s, streams):
    truth = NetModel(request_s, byte_s)
    obs = [observe(truth, bw, lat, streams, r=r) for (bw, lat), r in zip(LINKS, (1, 2, 1, 3))]
    # a run held at the link's rate says nothing about the costs: the law only where it did not
    obs = [o for o in obs if not o.bw_bps or o.rate_sps < o.bw_bps / o.bytes_per_sample * 0.999]
    model = fit(obs)
    for o in obs:
        assert model.rate_sps(o.cached_rate_sps, o.streams, o.requests_per_sample,
                              o.bytes_per_sample, o.bw_bps, o.latency_s) == \
            pytest.approx(o.rate_sps, rel=1e-6)


@given(st.floats(0, 0.05), st.floats(0, 1e-6), st.integers(1, 64), st.floats(1e3, 1e9),
       st.floats(0, 0.2))
def test_no_prediction_beats_the_link_or_the_cached_rate(request_s, byte_s, streams, bw, lat):
    rate = NetModel(request_s, byte_s).rate_sps(30.0, streams, 1.0, 16_000, bw, lat)
    assert rate <= bw / 16_000 * (1 + 1e-9) and rate <= 30.0 * (1 + 1e-9)


def test_more_streams_hide_latency():
    model = NetModel(0.005, 0.0)
    one, four = (model.rate_sps(30.0, s, 1.0, 16_000, None, 0.05) for s in (1, 4))
    # each sample's fetch wait beyond the cached time is shared by the streams
    assert 1 / four - 1 / 30.0 == pytest.approx((1 / one - 1 / 30.0) / 4)


def test_a_remote_run_and_its_cached_run_make_an_observation():
    cached = make_run(Mode.CACHED, 0.1)  # 10 samples an iteration: 100 samples/s
    disk = make_run(Mode.DISK, 0.2)
    res = Resources(1, net_bw_bps=1 << 20, net_latency_s=0.02)
    ranks = tuple(dataclasses.replace(k, extra={**k.extra, "loader": {"workers": 3}})
                  for k in disk.ranks)
    consumed = sum(sum(k.samples) for k in ranks)
    disk = dataclasses.replace(disk, spec=RunSpec(JOB, Mode.DISK, res), ranks=ranks,
                               link=LinkRecord("s3", "http://x", True, LinkShape(1 << 20, 0.02),
                                               requests=2 * consumed,
                                               bytes_down=1000 * consumed))
    (o,) = observations([cached, disk])
    assert (o.bw_bps, o.latency_s, o.streams) == (1 << 20, 0.02, 3)
    assert (o.requests_per_sample, o.bytes_per_sample) == (2, 1000)
    assert (o.rate_sps, o.cached_rate_sps) == pytest.approx((50, 100))
