"""The network what-if on observations made by its own law with known costs: the fit finds
the costs, the prediction never exceeds the link, and runs become observations."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_stalls import JOB, make_run

from dsanalyze.analysis.notes import ReadAheadMoved, budget_notes
from dsanalyze.config import Mode, Resources, RunSpec
from dsanalyze.linkrecords import LinkCounts, LinkRecord, LinkShape
from dsanalyze.report.notes import WORDS
from dsanalyze.settings import SETTINGS
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


@given(st.floats(0.05, 1.0), st.integers(1, 8))
def test_a_loader_that_hides_part_of_each_delay_is_fitted_its_share(share, streams):
    """Runs made by a loader that waits `share` of each delay (its own download thread beside
    its prep) and has no cost of its own are fitted that share, and the law then predicts a
    delay it was not fitted on."""
    truth = NetModel(0.0, 0.0, delay_share=share)
    obs = [observe(truth, bw, lat, streams, r=r) for (bw, lat), r in zip(LINKS, (1, 2, 1, 3))]
    obs = [o for o in obs if not o.bw_bps or o.rate_sps < o.bw_bps / o.bytes_per_sample * 0.999]
    model = fit(obs)
    assert model.delay_share == pytest.approx(share, rel=1e-6, abs=1e-9)
    far = observe(truth, None, 0.08, streams)
    assert model.rate_sps(far.cached_rate_sps, streams, 1.0, far.bytes_per_sample, None,
                          0.08) == pytest.approx(far.rate_sps, rel=1e-6)


@given(st.floats(0.001, 0.05), st.integers(1, 8))
def test_a_loader_that_waits_each_delay_whole_keeps_a_share_of_one(request_s, streams):
    """A cost a request above zero is the endpoint's, never a share of the delay above 1."""
    obs = [observe(NetModel(request_s, 0.0), None, lat, streams, r=r)
           for lat, r in ((0.02, 1.0), (0.05, 2.0))]
    model = fit(obs)
    assert model.delay_share == 1.0 and model.request_s == pytest.approx(request_s, rel=1e-6)


def test_the_share_survives_a_json_round_trip():
    m = NetModel(0.0, 2e-9, 3, delay_share=0.9)
    assert NetModel.from_dict(m.to_dict()) == m
    assert NetModel.from_dict({"request_s": 0.0, "byte_s": 0.0}).delay_share == 1.0


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
    # with the steady window's counts, a sample's requests and bytes are the window's alone
    steady = LinkCounts(40, 41, 41_000, 0.9, (1.0, 2.0))
    disk = dataclasses.replace(disk, link=dataclasses.replace(disk.link, window=steady))
    (o,) = observations([cached, disk])
    assert (o.requests_per_sample, o.bytes_per_sample) == (41 / 40, 1025)
    # a window in which the loader handed out more than the link carried (it drained what it
    # had read ahead before) measured no rate of the link: no observation; within the
    # setting's share of the window's samples, one
    for fetched, kept in ((40 * (1 - 1.5 * SETTINGS.read_ahead_drift), 0),
                          (40 * (1 - 0.5 * SETTINGS.read_ahead_drift), 1),
                          (40 * (1 + 1.5 * SETTINGS.read_ahead_drift), 0)):
        window = dataclasses.replace(steady, fetched_samples=fetched)
        moved = dataclasses.replace(disk, link=dataclasses.replace(disk.link, window=window))
        assert len(observations([cached, moved])) == kept
        # and the report names it, with the samples the link carried and those consumed
        notes = [n for n in budget_notes(moved) if isinstance(n, ReadAheadMoved)]
        assert [(n.run_id, n.consumed_samples, n.fetched_samples) for n in notes] == (
            [] if kept else [(disk.run_id, 40, fetched)])
        assert all(f"carried {fetched:.0f} samples, the ranks consumed 40" in WORDS[type(n)](n)
                   for n in notes)


# ---- the grid and the advice over a network (whatif/netgrid.py) --------------------------------

SAMPLE_BYTES = 4_000  # latency-bound: 8 streams keep a 1M/s link about 6% busy


def _remote_sweep(links: list[tuple[int | None, float]], truth: NetModel) -> list:
    """whatif_compute's real synthetic, loader and cached runs (1 CPU, 2 workers, an 80 ms
    step) and its disk run made remote at each link: its iterations stretched to the rate
    `truth` gives there, its link record one GET of SAMPLE_BYTES a sample."""
    from pathlib import Path

    from dsanalyze import store
    from dsanalyze.analysis.stalls import run_rate
    from dsanalyze.whatif.network import streams

    runs = store.load_runs(Path(__file__).parent / "data" / "whatif_compute")
    cached = run_rate(next(r for r in runs if r.mode is Mode.CACHED)).rate_sps
    disk = next(r for r in runs if r.mode is Mode.DISK)
    out = [r for r in runs if r.mode is not Mode.DISK]
    for bw, lat in links:
        k = run_rate(disk).rate_sps / truth.rate_sps(cached, streams(disk), 1.0, SAMPLE_BYTES,
                                                     bw, lat)
        ranks = tuple(dataclasses.replace(rk, iter_s=[t * k for t in rk.iter_s],
                                          wait_s=[t * k for t in rk.wait_s]) for rk in disk.ranks)
        consumed = sum(sum(rk.samples) for rk in ranks)
        res = Resources(disk.spec.resources.cpus, net_bw_bps=bw, net_latency_s=lat)
        out.append(dataclasses.replace(
            disk, spec=RunSpec(disk.spec.job, Mode.DISK, res), ranks=ranks,
            link=LinkRecord("s3", "http://x", True, LinkShape(bw, lat), requests=consumed,
                            bytes_down=SAMPLE_BYTES * consumed)))
    return out


def test_the_grid_reproduces_its_runs_and_more_workers_hide_latency():
    from dsanalyze.analysis.stalls import run_rate
    from dsanalyze.whatif import api, netgrid

    runs = _remote_sweep([(1 << 20, 0.3), (2 << 20, 0.3)], NetModel(0.002, 0.0))
    model = api.fit(runs)
    preds = netgrid.predictions(model, runs)
    assert netgrid.bandwidths(runs) == [1 << 20, 2 << 20, 4 << 20, 8 << 20, None]
    for run in (r for r in runs if r.spec.resources.remote):
        (p,) = [p for p in preds if p.config.resources.net_bw_bps == run.spec.resources.net_bw_bps
                and p.config.workers == model.workers]
        assert p.rate_sps == pytest.approx(run_rate(run).rate_sps, rel=0.05)
        assert p.rate_sps_low < run_rate(run).rate_sps < p.rate_sps_high
    at = {(p.config.resources.net_bw_bps, p.config.workers): p.rate_sps for p in preds}
    w = model.workers
    # latency-bound (300 ms a request, 2 streams): doubling the link barely helps, doubling
    # the streams nearly doubles the rate, up to the 50 samples/s of the step
    assert at[(2 << 20, w)] < 1.1 * at[(1 << 20, w)] < at[(1 << 20, 2 * w)]


def test_the_advice_names_more_workers_before_a_faster_link():
    from dsanalyze.whatif.advice import advise
    from dsanalyze.whatif.decision import DecisionKind

    runs = _remote_sweep([(1 << 20, 0.3), (2 << 20, 0.3)], NetModel(0.002, 0.0))
    d = advise(runs).decision
    assert d.kind is DecisionKind.CHANGE, d
    # no pick meets the budget (8 workers still wait): the least stalled, a measured link kept
    assert d.choice.net_bw_bps in (1 << 20, 2 << 20) and d.choice.net_latency_s == 0.3
    assert d.choice.workers > 2 and "network bandwidth" not in d.beyond
    assert d.error is None  # the disk law's validation does not speak for a link


def test_whatif_takes_the_links_and_workers_asked(tmp_path, capsys):
    import json

    from dsanalyze import cli, store

    for run in _remote_sweep([(1 << 20, 0.3), (2 << 20, 0.3)], NetModel(0.002, 0.0)):
        store.write_run(tmp_path, run)
    assert cli.main(["whatif", str(tmp_path), "--net-bw", "1M,none", "--net-latency",
                     "300ms,0", "--workers", "2,8", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted({(r["net_bw_bps"], r["net_latency_s"], r["workers"]) for r in rows},
                  key=str) == sorted({(bw, lat, w) for bw in (1 << 20, None)
                                      for lat in (0.3, 0.0) for w in (2, 8)}, key=str)
    at = {(r["net_bw_bps"], r["net_latency_s"], r["workers"]): r for r in rows}
    # no delay and no limit: the rate on this side of the link, whatever the workers
    assert at[(None, 0.0, 2)]["rate_sps"] > at[(1 << 20, 0.3, 2)]["rate_sps"]
    # 300 ms a request against 40 ms of the step a stream: 4x the streams, about 3x the rate
    assert at[(1 << 20, 0.3, 8)]["rate_sps"] > 2.5 * at[(1 << 20, 0.3, 2)]["rate_sps"]


def test_a_faster_link_is_named_in_words():
    from dsanalyze.report.advice import change_text
    from dsanalyze.whatif.decision import Option

    base = Option(1, 1, "none", None, None, 2, 5.0, 10.0, 50.0, True, net_bw_bps=1 << 20,
                  net_latency_s=0.3)
    faster = dataclasses.replace(base, net_bw_bps=4 << 20, measured=False)
    more = dataclasses.replace(base, workers=8, measured=False)
    assert "a link of 4M/s (1M/s measured)" in change_text(faster, base)
    assert "link" not in change_text(more, base) and "8 DataLoader workers" in change_text(more, base)


def test_the_one_run_with_a_delay_is_not_left_out_of_the_error():
    """Two runs held at their links and one at 50 ms: predicting the delayed run without it
    (no evidence of the cost a request) is not what the grid is asked, so the leave-one-out
    error is the link-bound runs' (exact here: the noise floor), out of sample."""
    from dsanalyze.whatif import netgrid

    truth = NetModel(0.01, 0.0)
    obs = [observe(truth, bw, lat, streams=8) for bw, lat in ((128_000, 0.0), (256_000, 0.0),
                                                              (None, 0.05))]
    assert [o.weight() == 0 for o in obs] == [True, True, False]  # the first two at the link
    assert netgrid.loo_sigma(obs) == (netgrid.MIN_SIGMA, True)
    assert fit(obs).request_s == pytest.approx(0.01)
