"""A loader's read-ahead against the link's counts: webdataset (in this process, its own
shuffle buffer and its own curl fetches) reading tar shards from a real HTTP server behind
a shaped link, handing its samples to a consumer that notes when it took each.

The independent reason is the shuffle buffer: it holds `BUFFER` samples once filled, so
a window of the steady part (the shards still coming) fetches what it consumes, and a
window that ends with the epoch hands out the buffer's `BUFFER` samples beyond what the
link carried in it. The link's bytes become samples through the served shards' bytes a
sample (`remote/datasamples.py`: a tar holds one sample a key); the window's bytes are
those that crossed in it (`delayproxy`), so a shard under way at an edge counts its share.
"""

from __future__ import annotations

import io
import os
import tarfile
import time
from pathlib import Path

import pytest
from test_remote import needs_netns

from dsanalyze.linkrecords import LinkRecord
from dsanalyze.remote import datasamples
from dsanalyze.remote.runlink import RemoteData
from dsanalyze.remote.served import Backend, ServedData

SHARDS, PER_SHARD, SAMPLE_BYTES = 60, 2, 12 << 10
BUFFER = 24  # the shuffle buffer, in samples
BW = 2_000_000  # about 150 samples/s through the token bucket


def write_tars(root: Path) -> list[Path]:
    """SHARDS tar shards of PER_SHARD samples: `<key>.bin` of SAMPLE_BYTES and `<key>.cls`."""
    out = []
    for s in range(SHARDS):
        path = root / f"shard-{s:06d}.tar"
        with tarfile.open(path, "w") as tar:
            for k in range(PER_SHARD):
                for ext, data in (("bin", os.urandom(SAMPLE_BYTES)), ("cls", b"1")):
                    info = tarfile.TarInfo(f"s{s:04d}k{k}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        out.append(path)
    return out


def test_a_tar_holds_a_sample_a_key(tmp_path):
    files = write_tars(tmp_path)
    per_sample = datasamples.bytes_per_sample(files)
    assert per_sample == sum(f.stat().st_size for f in files) / (SHARDS * PER_SHARD)
    assert datasamples.bytes_per_sample([*files, tmp_path / "notes.txt"]) is None


@pytest.fixture(scope="module")
def consumed(tmp_path_factory: pytest.TempPathFactory):
    """The served shards, their RemoteData, and the wall-clock time the consumer took each
    sample of one epoch (index 0: before the first)."""
    wds = pytest.importorskip("webdataset")
    root = tmp_path_factory.mktemp("readahead")
    files = write_tars(root)
    with ServedData.start(root, Backend.HTTP) as served:
        remote = RemoteData.of_served(served, root, files, 64 << 10)
        served.shape(BW, 0.0)
        urls = f"{served.endpoint_url}/shard-{{000000..{SHARDS - 1:06d}}}.tar"
        loader = wds.WebDataset(urls, shardshuffle=False, empty_check=False).shuffle(
            BUFFER, initial=BUFFER)
        times = [time.time()]
        for _sample in loader:
            times.append(time.time())
        yield remote, times
        served.shape(None, 0.0)


def window_of(remote: RemoteData, times: list[float], first: int, last: int):
    """The link's counts over the span in which the consumer took samples first..last."""
    link = LinkRecord("http", remote.served.endpoint_url, True)
    span = (times[first - 1], times[last])
    return remote.windowed(link, span, last - first + 1).window


@needs_netns
def test_the_epoch_crosses_the_link_once(consumed):
    remote, times = consumed
    assert len(times) - 1 == SHARDS * PER_SHARD
    whole = remote.windowed(LinkRecord("http", "", True), (times[0], times[-1] + 1),
                            SHARDS * PER_SHARD).window
    # every shard's bytes and its response headers (a few hundred bytes a shard)
    assert whole.fetched_samples == pytest.approx(SHARDS * PER_SHARD, rel=0.03)
    assert whole.requests == SHARDS


@needs_netns
def test_a_steady_window_fetches_what_it_consumes(consumed):
    remote, times = consumed
    n = SHARDS * PER_SHARD
    window = window_of(remote, times, BUFFER + 10, n - BUFFER - 10)
    assert window.samples == n - 2 * BUFFER - 19
    # the buffer is as full at both edges; a shard (and curl's pipe) may be under way at each
    assert window.read_ahead_change == pytest.approx(0, abs=2 * PER_SHARD + 1)


@needs_netns
def test_a_window_that_ends_the_epoch_drains_the_buffer(consumed):
    remote, times = consumed
    n = SHARDS * PER_SHARD
    window = window_of(remote, times, n - BUFFER - 30, n)
    assert window.samples == BUFFER + 31
    # the consumer handed out the buffer beyond what the link carried in the window
    assert window.read_ahead_change == pytest.approx(-BUFFER, abs=2 * PER_SHARD + 1)
