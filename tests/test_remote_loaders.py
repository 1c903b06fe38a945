"""The loaders people use for remote data, unmodified (tests/scripts/), through the harness
against a served endpoint behind the shaped link: s3torchconnector, s3fs, webdataset over
HTTP, mosaicml-streaming (installed without its pins, which ask for transformers<5 and
numpy<2.2: the Makefile installs it with --no-deps and the compressors it imports).

Each run's link record is checked against what the link was set to, and the remote run's
rate against a law no tool output decides: a link of B bytes/s carries at most B of
payload, so rate × bytes per sample stays below B.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import harness, write_shards
from test_remote import PAYLOAD_SHARE, needs_netns

from dsanalyze import store
from dsanalyze.analysis import stalls
from dsanalyze.jobs.datasets import make_dataset
from dsanalyze.remote.probe import LEVELS

SCRIPTS = Path(__file__).parent / "scripts"
BW = 128 << 10  # 128K/s: below what the loaders reach unshaped, even on a busy machine
ITERS, WARMUP, BATCH, WORKERS = 20, 2, 4, 1
PREFETCH = 2  # DataLoader's prefetch_factor: batches per worker read before they are asked for


@pytest.fixture(autouse=True)
def one_thread_per_rank(monkeypatch):
    # Two cores shared by ranks, workers, servers and other tests (as in test_frameworks.py).
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="module")
def tiny_images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """48 JPEGs of about 16 KB in 4 classes (class_000 .. class_003)."""
    root = tmp_path_factory.mktemp("remote") / "data"
    make_dataset(root, images=48, classes=4, size=(200, 150), size_jitter=0.2, seed=3)
    return root


@pytest.fixture(scope="module")
def tiny_shards(tiny_images: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_shards(tiny_images, tmp_path_factory.mktemp("remote_shards"))


def profile_remote(prefix: Path, data: Path, serve: str, script: str, *args: object,
                   modes: str = "cached,remote", latency: str = "0") -> dict[str, store.RunResult]:
    rc = harness("--data", data, "--serve", serve, "--net-bw", BW, "--net-latency", latency,
                 "--probe-budget", "64K", "--prefix", prefix, "--modes", modes, "--iters", ITERS,
                 "--warmup", WARMUP, "--no-plots", "--no-advice", SCRIPTS / script, *args,
                 "-b", BATCH, "-j", WORKERS)
    assert rc == 0
    return {r.mode.value: r for r in store.load_runs(prefix)}


def check_link(runs: dict[str, store.RunResult], data_bytes: int, samples: int,
               requests_per_sample: float) -> None:
    cached, remote = runs["cached"], runs["disk"]
    assert cached.ok and remote.ok, (cached.error, remote.error)
    assert remote.run_id.startswith("remote-") and remote.spec.resources.net_bw_bps == BW
    assert cached.link.shape.bw_bps is None and cached.link.shape.latency_s == 0
    assert remote.link.shape.bw_bps == BW
    consumed = (WARMUP + ITERS) * BATCH
    assert remote.link.requests >= consumed * requests_per_sample
    assert remote.link.bytes_down >= consumed * data_bytes / samples
    assert [p.concurrency for p in remote.link.probe.points] == list(LEVELS)
    # In the measured window the loader can hand out what the link carried in it, and the
    # batches it had read ahead before the window began (and the one in flight).
    rate_sps = stalls.run_rate(remote).rate_sps
    window_s = ITERS * BATCH / rate_sps
    ahead = (PREFETCH * WORKERS + 1) * BATCH
    assert rate_sps * data_bytes / samples < (BW * PAYLOAD_SHARE * 1.05
                                              + ahead * data_bytes / samples / window_s)


def check_window(remote: store.RunResult, requests_per_sample: int) -> None:
    """A fixed number of requests a sample (s3torchconnector: a GET; s3fs: a HEAD for the
    size, then the GET): over the whole run the proxy also counts the listing of the
    prefix and what the loader read ahead and the run never consumed; over the steady
    window (the second epoch's iterations: the first is the cold one) its requests are
    that many a sample of the window, to within one request (the next batch's first,
    begun as the window's last iteration computes)."""
    consumed = (WARMUP + ITERS) * BATCH
    epoch_batches = 48 // BATCH
    window = remote.link.window
    assert window is not None and window.samples == (WARMUP + ITERS - epoch_batches) * BATCH
    assert remote.link.requests > consumed * requests_per_sample
    assert window.requests_per_sample == pytest.approx(requests_per_sample, rel=0.05)
    assert window.bytes_down < remote.link.bytes_down * window.samples / consumed * 1.05
    # The bytes that crossed in the window carried what the ranks consumed in it: it begins
    # at an epoch's start, where a DataLoader holds nothing ahead, and ends with at most the
    # link-bound worker's batch under way (and the responses' headers: under 2 samples' worth)
    assert window.fetched_samples is not None
    assert -1 <= window.read_ahead_change <= BATCH + 2


@pytest.fixture(scope="module")
def tiny_mds(tiny_images: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The JPEGs as MDS shards of at most 64 KiB (about 4 samples each), with index.json."""
    from streaming import MDSWriter

    out = tmp_path_factory.mktemp("remote_mds") / "mds"
    classes = sorted(p.name for p in tiny_images.iterdir())
    with MDSWriter(out=str(out), columns={"image": "bytes", "label": "int"},
                   size_limit=64 << 10) as writer:
        for f in sorted(tiny_images.glob("*/*.jpg")):
            writer.write({"image": f.read_bytes(), "label": classes.index(f.parent.name)})
    return out


def _bytes(root: Path, pattern: str) -> tuple[int, int]:
    files = sorted(root.glob(pattern))
    return sum(f.stat().st_size for f in files), len(files)


@needs_netns
@pytest.mark.long
def test_s3torchconnector_map_dataset(tiny_images, tmp_path):
    runs = profile_remote(tmp_path / "p", tiny_images, "s3", "train_s3torch.py", "s3://dsanalyze/")
    check_link(runs, *_bytes(tiny_images, "*/*.jpg"), requests_per_sample=1)
    check_window(runs["disk"], 1)


@pytest.mark.extended
@needs_netns
def test_s3fs_map_dataset(tiny_images, tmp_path):
    runs = profile_remote(tmp_path / "p", tiny_images, "s3", "train_s3fs.py", "s3://dsanalyze/",
                          modes="synthetic,cached,remote")
    assert runs["synthetic"].ok
    check_link(runs, *_bytes(tiny_images, "*/*.jpg"), requests_per_sample=1)
    check_window(runs["disk"], 2)


@pytest.mark.extended
@needs_netns
def test_webdataset_over_http(tiny_shards, tmp_path):
    runs = profile_remote(tmp_path / "p", tiny_shards, "http", "train_webdataset.py",
                          "{endpoint}/shard-{000000..000007}.tar", modes="synthetic,cached,remote")
    assert runs["synthetic"].ok
    total, _ = _bytes(tiny_shards, "*.tar")
    check_link(runs, total, 48, requests_per_sample=1 / 6)


@pytest.mark.extended  # streaming's imports and two runs: about 3 minutes on a busy machine
@needs_netns
def test_mosaic_streaming_local_cache(tiny_mds, tmp_path):
    """cached: the harness fills the script's --local cache, so the library fetches nothing
    across the link; remote: the harness empties it, so every shard the library needs
    crosses the link once (the library keeps each in its cache after)."""
    pytest.importorskip("streaming")
    cache = tmp_path / "cache"
    runs = profile_remote(tmp_path / "p", tiny_mds, "s3", "train_streaming.py",
                          "--remote", "s3://dsanalyze/", "--local", cache)
    cached, remote = runs["cached"], runs["disk"]
    assert cached.ok and remote.ok, (cached.error, remote.error)
    total, shards = _bytes(tiny_mds, "shard.*.mds")
    index = (tiny_mds / "index.json").stat().st_size
    assert cached.link.local_cache.action.value == "filled"
    assert cached.link.local_cache.bytes_held == total + index
    assert remote.link.local_cache.action.value == "emptied"
    assert cached.link.bytes_down < total / shards  # not one shard's worth crossed
    # Each shard once (the run reads past the 48-sample epoch), each GET's headers besides.
    assert total + index <= remote.link.bytes_down <= total + index + remote.link.requests * 2048
    assert remote.link.requests >= shards + 1
    assert sorted(p.name for p in cache.glob("shard.*.mds")) == sorted(
        p.name for p in tiny_mds.glob("shard.*.mds"))
