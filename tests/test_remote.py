"""Real servers in a network namespace behind a shaped veth: bandwidth, delay, cleanup.

Every figure is checked against what the link was set to, not against a copy of the
tool's output: a token bucket at R bytes/s carries R × (payload / frame) of payload
(TCP/IP and Ethernet headers: 1448 of every 1514 bytes), and a request held d seconds
by the proxy reaches its first byte d seconds later.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_lifeline import running

from dsanalyze.config import parse_duration_s
from dsanalyze.remote import netlink
from dsanalyze.remote.endpoint import Endpoint
from dsanalyze.remote.probe import probe
from dsanalyze.remote.served import Backend, ServedData

PAYLOAD_SHARE = 1448 / 1514  # TCP payload per Ethernet frame, timestamps on


def can_make_namespaces() -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, "needs root for network namespaces"
    try:
        netlink.NetLink.create().close()
    except Exception as e:  # any failure: not permitted here
        return False, f"network namespaces not usable here: {e}"
    return True, ""


_NS_OK, _NS_WHY = can_make_namespaces()
needs_netns = pytest.mark.skipif(not _NS_OK, reason=_NS_WHY or "netns usable")


@pytest.fixture(scope="module")
def served_http(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("served")
    (root / "blob.bin").write_bytes(os.urandom(2 << 20))
    (root / "small.bin").write_bytes(os.urandom(1024))
    for i in range(16):
        (root / f"obj{i:02d}.bin").write_bytes(os.urandom(32 << 10))
    with ServedData.start(root, Backend.HTTP) as served:
        yield served


def _get(url: str) -> tuple[float, float, int]:
    """(time to first byte, total time, bytes) of one GET."""
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as r:
        first = r.read(1)
        t1 = time.perf_counter()
        n = len(first) + len(r.read())
    return t1 - t0, time.perf_counter() - t0, n


@needs_netns
def test_the_token_bucket_sets_the_download_rate(served_http):
    rate_bps = 4_000_000
    served_http.shape(rate_bps, 0.0)
    ttfb_s, total_s, n = _get(f"{served_http.endpoint_url}/blob.bin")
    served_http.shape(None, 0.0)
    assert n == 2 << 20
    # from the first byte on: the server's and the proxy's own time (a busy machine) left out
    assert (n - 1) / (total_s - ttfb_s) == pytest.approx(rate_bps * PAYLOAD_SHARE, rel=0.08)


@needs_netns
def test_the_proxy_delays_each_request_by_the_latency_set(served_http):
    url = f"{served_http.endpoint_url}/small.bin"

    def median_ttfb(delay_s: float) -> float:
        served_http.shape(None, delay_s)
        return statistics.median(_get(url)[0] for _ in range(5))

    before = served_http.stats()
    base, delayed = median_ttfb(0.0), median_ttfb(0.1)
    held_s = served_http.stats()["held_s"] - before["held_s"]
    served_http.shape(None, 0.0)
    assert delayed - base == pytest.approx(0.1, abs=0.02)
    assert 5 * 0.1 <= held_s < 5 * 0.1 + 0.05  # five requests held, each at least the delay


@needs_netns
def test_the_proxy_counts_requests_and_bytes(served_http):
    before = served_http.stats()
    for _ in range(3):
        _get(f"{served_http.endpoint_url}/small.bin")
    after = served_http.stats()
    assert after["requests"] - before["requests"] == 3  # HTTP/1.0: one request a connection
    assert after["connections"] - before["connections"] == 3
    assert 3 * 1024 < after["bytes_down"] - before["bytes_down"] < 3 * 1024 + 3 * 1024


@needs_netns
def test_the_proxy_counts_a_window_of_wall_clock_time_alone(served_http):
    """Requests before and after a span are in the totals, not in the span's counts; those
    in it come with every byte of their responses and the time each was held."""
    url = f"{served_http.endpoint_url}/small.bin"
    _get(url)
    served_http.shape(None, 0.05)
    start = time.time()
    for _ in range(4):
        _get(url)
    end = time.time()
    served_http.shape(None, 0.0)
    _get(url)
    got = served_http.window(start, end)
    assert got["complete"] and got["requests"] == 4
    assert 4 * 1024 < got["bytes_down"] < 4 * 1024 + 4 * 1024  # the body and its headers
    assert 4 * 0.05 <= got["held_s"] < 4 * 0.05 + 0.05
    assert served_http.window(end + 60, end + 120)["requests"] == 0


@needs_netns
def test_s3_objects_come_through_the_shaped_link(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "obj.bin").write_bytes(data := os.urandom(1 << 20))
    with ServedData.start(tmp_path, Backend.S3) as served:
        served.shape(4_000_000, 0.0)
        import boto3

        env = served.job_env()
        s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name=env["AWS_REGION"],
                          aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
        body = s3.get_object(Bucket=env["DSANALYZE_BUCKET"], Key="d/obj.bin")["Body"]
        first = body.read(1)
        t0 = time.perf_counter()  # after the first byte: the server's own time left out
        got = first + body.read()
        elapsed_s = time.perf_counter() - t0
    assert got == data
    assert len(got) / elapsed_s == pytest.approx(4_000_000 * PAYLOAD_SHARE, rel=0.1)


@needs_netns
@pytest.mark.timing(reason=(
    "a loaded machine delays each request by its proxy, server and client waiting for a CPU: "
    "the tolerances are that delay as the same requests measure it unshaped, and as the "
    "shaped requests' own first bytes show it"))
def test_the_probe_sees_the_latency_alone_and_the_bandwidth_at_64(served_http):
    """At 1 request at a time each waits the delay; at 64 the bucket is the limit."""
    rate_bps, delay_s = 2_000_000, 0.05
    names = [f"{served_http.endpoint_url}/obj{i:02d}.bin" for i in range(16)]
    # the machine's own time to the first byte, with no delay on the link
    (unshaped,) = probe(Endpoint.parse(names[0]), 1 << 20, levels=(1,), names=names).points
    machine_s = statistics.quantiles(unshaped.ttfb_s, n=10)[-1]  # its 90th percentile
    served_http.shape(rate_bps, delay_s)
    record = probe(Endpoint.parse(names[0]), 1 << 20, levels=(1, 64), names=names)
    served_http.shape(None, 0.0)
    one, many = record.points
    assert [p.concurrency for p in record.points] == [1, 64] and record.objects == 16
    assert one.requests >= 2 and one.bytes_read == one.requests * (32 << 10)
    # one request: never before the delay; after it by what the machine itself takes
    assert delay_s < min(one.ttfb_s) and one.ttfb_median_s < delay_s + 0.05 + machine_s
    # then 32 KiB at the bucket's rate; the bucket refills to its depth while the request is
    # held, so up to that many bytes of it pass at once. A loaded machine holds the body up
    # about as long as the first byte beyond the delay (as these requests measured it).
    burst = netlink.tbf_burst_bytes(rate_bps)
    late_s = statistics.fmean(one.ttfb_s) - delay_s
    slowest = (32 << 10) / (delay_s + 2 * late_s + (32 << 10) / rate_bps)
    fastest = (32 << 10) / (delay_s + ((32 << 10) - burst) / rate_bps)
    assert slowest * 0.95 < one.throughput_bps < fastest * 1.05
    # 64 at once: the delay overlaps, the bucket's rate is the bound
    assert one.throughput_bps < many.throughput_bps < rate_bps * PAYLOAD_SHARE * 1.05
    assert many.bytes_read >= 1 << 20
    # and nothing but the bucket: the server and the proxy accept all 64 at once. A connection
    # its listening queue had no room for waits out a SYN retransmission, a second at least
    # (Linux's first RTO): `python -m http.server` queued 5, overflowed 10-60 times a probe,
    # and this level read 1.2-1.4 MB/s where it now reads 1.84 (the bucket's 1.91, less the
    # delay). The count, not the rate, is asserted: a loaded machine slows the rate too.
    assert _listen_overflows(served_http.link) == 0


def _listen_overflows(link: netlink.NetLink) -> int:
    """Connections the namespace's listening sockets had no room for (TcpExt ListenOverflows)."""
    lines = subprocess.run(link.exec_argv(["cat", "/proc/net/netstat"]),
                           capture_output=True, text=True, check=True).stdout.splitlines()
    names, values = (line.split() for line in lines if line.startswith("TcpExt:"))
    return int(dict(zip(names, values))["ListenOverflows"])


def _namespaces() -> set[str]:
    return set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()


# the owner sleeps (a signal ends a sleep at once): waiting on a threading.Event instead,
# CPython 3.11's Ctrl-C now and then left it hung in a futex at its exit, for hours (seen
# twice under load), which this test then took for a cleanup that did not happen
# Ctrl-C's own disposition: a process started in the background by a shell without job
# control (`make test &` from a script) inherits SIGINT ignored, and would sleep through it
SERVE_AND_WAIT = """
import signal, sys, time
from pathlib import Path
from dsanalyze.remote.served import Backend, ServedData
signal.signal(signal.SIGINT, signal.default_int_handler)
served = ServedData.start(Path(sys.argv[1]), Backend.HTTP)
print(served.link.netns, *(p.pid for p in served._procs), flush=True)
while True:
    time.sleep(60)
"""


@needs_netns
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_a_killed_owner_leaves_no_namespace_and_no_server(tmp_path, sig):
    """SIGKILL: the lifeline's reaper cleans up; SIGTERM and Ctrl-C: the same (the owner
    here installs no handler, so it dies at once, as after a crash)."""
    owner = subprocess.Popen([sys.executable, "-c", SERVE_AND_WAIT, str(tmp_path)],
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    netns, *pids = owner.stdout.readline().split()
    assert netns in _namespaces() and all(running(int(p)) for p in pids)
    owner.send_signal(sig)
    owner.wait(timeout=10)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (netns in _namespaces()
                                           or any(running(int(p)) for p in pids)):
        time.sleep(0.1)
    assert netns not in _namespaces()
    assert not any(running(int(p)) for p in pids)


@needs_netns
def test_the_served_cli_stops_on_sigterm(tmp_path):
    cli = subprocess.Popen([sys.executable, "-m", "dsanalyze.remote", str(tmp_path)],
                           stdout=subprocess.PIPE, text=True)
    first = cli.stdout.readline()
    assert first.startswith("DSANALYZE_ENDPOINT_URL=http://")
    before = _namespaces()
    cli.send_signal(signal.SIGTERM)
    assert cli.wait(timeout=20) == 0
    assert not [n for n in before if n.startswith(f"{netlink.PREFIX}{cli.pid}-")
                and n in _namespaces()]


@needs_netns
def test_stale_namespaces_of_dead_harnesses_are_removed():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    name = f"{netlink.PREFIX}{dead.pid}-0"
    subprocess.run(["ip", "netns", "add", name], check=True)
    assert name in netlink.clean_stale()
    assert name not in _namespaces()


@given(st.floats(min_value=0, max_value=10, allow_nan=False),
       st.sampled_from([("ms", 1e-3), ("s", 1.0), ("", 1.0), ("us", 1e-6)]))
def test_durations_read_in_their_unit(value, unit):
    word, scale = unit
    assert parse_duration_s(f"{value!r}{word}") == pytest.approx(value * scale)


@pytest.mark.parametrize("rate_bps", [1_000, 4_000_000, 100_000_000, 10**10])
def test_the_bucket_holds_several_packets_and_little_time(rate_bps):
    burst = netlink.tbf_burst_bytes(rate_bps)
    assert burst >= 10 * 1514
    assert burst <= max(netlink.MIN_BURST_BYTES, rate_bps * 0.01)
