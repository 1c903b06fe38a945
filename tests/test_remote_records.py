"""Remote configurations as values: ids, labels, records' JSON round-trip, the breakdown, the
probe figure. No servers: hand-made runs whose answer is known."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_stalls import JOB, make_run

from dsanalyze.analysis.stalls import breakdowns
from dsanalyze.analysis.summary import ConfigSummary, Summary
from dsanalyze.analysis.window import steady_window
from dsanalyze.config import Mode, Resources, RunSpec, Sweep
from dsanalyze.errors import ConfigError
from dsanalyze.linkrecords import (
    EndpointProbe,
    LinkCounts,
    LinkRecord,
    LinkShape,
    LocalCacheAction,
    LocalCacheState,
    ProbePoint,
)
from dsanalyze.records import RunResult
from dsanalyze.report import probe_plots, summary
from dsanalyze.report.text import config_label

points = st.builds(ProbePoint, st.sampled_from([1, 4, 16, 64]), st.integers(0, 10**6),
                   st.integers(0, 10**12), st.floats(0.001, 1e4),
                   st.lists(st.floats(0, 100), max_size=8).map(tuple), st.integers(0, 64))
probes = st.builds(EndpointProbe, st.text(min_size=1), st.integers(1, 10**10),
                   st.integers(0, 10**6), st.lists(points, max_size=4).map(tuple))
links = st.builds(LinkRecord, st.sampled_from(["s3", "http"]), st.text(), st.booleans(),
                  st.builds(LinkShape, st.none() | st.integers(1, 10**11), st.floats(0, 10)),
                  st.none() | st.integers(0, 10**9), st.none() | st.integers(0, 10**9),
                  st.none() | st.integers(0, 10**12), st.none() | st.integers(0, 10**12),
                  st.none() | probes, st.none() | st.floats(0, 1e6),
                  st.none() | st.builds(LocalCacheState, st.text(),
                                        st.sampled_from(LocalCacheAction), st.integers(0, 10**12)),
                  st.none() | st.builds(LinkCounts, st.integers(1, 10**9), st.integers(0, 10**9),
                                        st.integers(0, 10**12), st.floats(0, 1e6),
                                        st.none() | st.tuples(st.floats(0, 2e9),
                                                              st.floats(0, 2e9)),
                                        st.none() | st.floats(0, 1e9)))


@given(links)
def test_a_link_record_survives_its_json(link):
    assert LinkRecord.from_dict(link.to_dict()) == link


@given(links)
def test_a_run_keeps_its_link(link):
    run = dataclasses.replace(make_run(Mode.DISK, 0.1), link=link)
    assert RunResult.from_dict(run.to_dict()).link == link


@given(links)
def test_a_link_record_without_a_window_loads_as_before(link):
    """Records written before the steady window's counts load, the window absent."""
    d = link.to_dict()
    d.pop("window")
    assert LinkRecord.from_dict(d) == dataclasses.replace(link, window=None)


def test_the_link_window_of_a_disk_run_is_its_whole_steady_epochs():
    """10 iterations an epoch, 25 run, 2 of warm-up: the steady window is epochs 1 and 2
    (the first is the cold one); epoch 2 was cut short by the run's end, where the loader
    had read ahead what was never consumed, so the link's window is epoch 1 alone."""
    epochs = [0] * 10 + [1] * 10 + [2] * 5
    run = make_run(Mode.DISK, 0.1, n=25, epochs=epochs, cache="0")
    run = dataclasses.replace(run, ranks=tuple(dataclasses.replace(k, start_unix_s=1000.0)
                                               for k in run.ranks))
    steady = steady_window(run)
    whole = steady.whole_epochs()
    assert steady.chosen == (tuple(range(10, 25)),) and whole.chosen == (tuple(range(10, 20)),)
    assert whole.span_unix_s() == pytest.approx((1001.0, 1002.0))
    assert whole.samples() == 100
    cached = make_run(Mode.CACHED, 0.1, n=25, epochs=epochs)  # no cold epoch: begins mid-epoch
    assert steady_window(cached).whole_epochs() == steady_window(cached)
    short = make_run(Mode.DISK, 0.1, n=15, epochs=[0] * 10 + [1] * 5, cache="0")
    assert steady_window(short).whole_epochs() == steady_window(short)  # no whole epoch


def test_a_local_run_file_has_no_link_and_no_net_fields():
    run = make_run(Mode.DISK, 0.1)
    d = run.to_dict()
    assert "link" not in d and "net_bw_bps" not in d["spec"]["resources"]
    assert RunResult.from_dict(d).link is None


def test_serve_makes_every_disk_configuration_remote_at_each_link():
    sweep = Sweep(dataclasses.replace(JOB, script="/s.py"), serve="s3", net_bw=("100M", "1G"),
                  net_latency=("0", "20ms"),
                  modes=(Mode.SYNTHETIC, Mode.CACHED, Mode.parse("remote")))
    ids = [s.run_id for s in sweep.run_specs(1000)]
    assert ids == ["synthetic-cpusall", "cached-cpusall",
                   "remote-cpusall-cachenone-bwnone-net100M-lat0ms",
                   "remote-cpusall-cachenone-bwnone-net100M-lat20ms",
                   "remote-cpusall-cachenone-bwnone-net1G-lat0ms",
                   "remote-cpusall-cachenone-bwnone-net1G-lat20ms"]
    remote = sweep.run_specs(1000)[3]
    assert remote.resources.net_bw_bps == 100 << 20 and remote.resources.net_latency_s == 0.02
    assert RunSpec.from_dict(remote.to_dict()) == remote


def test_serve_needs_the_data_it_serves():
    with pytest.raises(ConfigError, match="--serve needs --data"):
        Sweep(dataclasses.replace(JOB, data_dir=None), serve="http")


def remote_run(mode: Mode, iter_s: float) -> RunResult:
    run = make_run(mode, iter_s)
    if mode is Mode.DISK:
        res = Resources(1, net_bw_bps=100 << 20, net_latency_s=0.02)
        run = dataclasses.replace(run, spec=RunSpec(JOB, mode, res))
    return run


def test_the_fetch_stall_of_a_remote_configuration_and_its_words():
    runs = [remote_run(Mode.SYNTHETIC, 0.1), remote_run(Mode.CACHED, 0.1),
            remote_run(Mode.DISK, 0.3)]
    (b,) = breakdowns(runs)
    assert b.fetch_stall_pct == pytest.approx(100 * 0.2 / 0.3)
    assert (b.net_bw_bps, b.net_latency_s) == (100 << 20, 0.02)
    cfg = ConfigSummary.of(b)
    assert config_label(cfg) == "cpus=1 remote (100M/s, 20 ms)"
    assert summary.columns(Summary(None, None, configs=(cfg,)))[3] == "remote/s"
    assert summary.columns(Summary(None, None, configs=(make_local_cfg(),)))[3] == "disk/s"


def make_local_cfg() -> ConfigSummary:
    (b,) = breakdowns([make_run(Mode.CACHED, 0.1), make_run(Mode.DISK, 0.2, cache="0")])
    return ConfigSummary.of(b)


def test_the_probe_curve_draws_the_stored_throughputs():
    pts = tuple(ProbePoint(c, 10, 10 * c * 1_000_000, 2.0, (0.02,) * 10) for c in (1, 4, 16, 64))
    link = LinkRecord("s3", "http://x", True, LinkShape(100 << 20, 0.02),
                      probe=EndpointProbe("s3://b/", 1 << 20, 10, pts))
    run = dataclasses.replace(remote_run(Mode.DISK, 0.2), link=link)
    fig = probe_plots.probe_curve([run, remote_run(Mode.CACHED, 0.1)])
    (line,) = fig.axes[0].get_lines()
    assert list(line.get_xdata()) == [1, 4, 16, 64]
    assert list(line.get_ydata()) == pytest.approx([5 * c for c in (1, 4, 16, 64)])
    assert line.get_label() == "remote (100M/s, 20 ms)"
    assert probe_plots.probe_curve([remote_run(Mode.CACHED, 0.1)]) is None
