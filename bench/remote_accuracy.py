"""Remote data: does a remote run measure the link it was given, and does the network what-if
predict a link it was not fitted on? Three figures per loader.

For each loader of tests/scripts (s3torchconnector, s3fs, webdataset over HTTP; and
mosaicml-streaming's StreamingDataset over MDS shards with `--loaders streaming`, whose
imports take about a minute a run, so it is not in the default set), two
sweeps through the real harness against a server it starts behind a shaped link
(`--serve`), each with one cached run (the link unshaped) and several remote runs:

- bandwidth: `--net-bw 1M,2M,4M --net-latency 0`, 4 workers (`--bw-workers`), JPEGs of
  about 100 KB. Bandwidth-bound only if the link never idles: a worker's GETs are serial
  and it decodes between them, so a link is kept busy by enough requests in flight (4
  here, each 100 KB, for at most 4M/s against a loader that reads several times that
  unshaped). `bw ratio` = rate × the dataset's bytes per sample (its files' size over
  its samples) / BW. `wire B/sample`, the server's bytes (HTTP headers included) that
  crossed the link in the run's steady window per sample the ranks consumed in it
  (`RunResult.link.window`), is shown beside it, and `read-ahead`, how far the loader's
  read-ahead moved over the window: the samples those bytes carried (over the served
  data's bytes a sample) less those consumed, as a share of those consumed
  (`window.read_ahead_drift`). A loader that drained its read-ahead in the window (the
  epoch's fetching over, or a window short beside a deep read-ahead: webdataset's 4
  workers each hold a shuffle buffer of 32, about 190 samples with the DataLoader's
  prefetch) handed out more than the link carried, its rate is not the link's: beyond
  `read_ahead_drift` (10%) the row is marked and not scored, and the what-if leaves the
  run out (`network.observations`). The tbf
  rate is the line rate and TCP/IP and Ethernet headers take 66 of each 1514-byte frame
  (`network.PAYLOAD_SHARE`, 0.956), so `bw err` = bw ratio / 0.956 − 1, target within
  10% (a bw ratio of 0.86 or more). `link busy`: the share of the link the loader's own
  pace can fill (`fair_share_busy`: the cached run's time a sample a worker, the
  streams queueing for the link as under a fair share, the pessimistic case); a row
  under 0.95 is bound by the loader, not the link, is marked `loader binds` and is not
  scored. The dataset (`IMAGES` samples) is larger than a run reads and than webdataset
  reads ahead (136 consumed + about 190 ahead): a DataLoader restarts its workers each
  epoch and drains its last batches with fewer of them, and a loader whose epoch's
  fetching ends hands out its read-ahead with the link idle, costs of a tiny epoch, not of
  the link.
- latency: `--net-bw none --net-latency 20ms,50ms`, 1 worker. Each request waits the
  delay, so the fetch stall (remote − cached, s per epoch) should be latency × requests
  per epoch, the requests counted by the proxy per sample the ranks consumed, both over
  the run's steady window (`RunResult.link.window`: no warm-up, no read-ahead left unused). `lat ratio` = measured stall / explained stall, target within 15%
  at 20 ms (50 ms shown). `held ratio` explains it with the time the proxy actually held
  requests (`RunResult.link.window.held_s`): on a busy machine its event loop wakes late. webdataset
  reads shards of 2 samples (one request per shard), so latency counts once a shard.
- what-if out of sample: `whatif/network.py` fitted on 1M and 4M (bandwidth sweep) and
  20 ms (latency sweep) predicts the held-out 2M and 50 ms runs, with the interval the
  what-if grid gives (`whatif/netgrid.py`: the leave-one-out error of the fit runs,
  widened for each untested assumption, 90% nominal). `pred err` = predicted / measured
  − 1, target within 10%; coverage over every held-out run.

    .venv/bin/python bench/remote_accuracy.py                 # about 8 minutes on 2 cores
    .venv/bin/python bench/remote_accuracy.py --loaders s3torch --iters 20
    .venv/bin/python bench/remote_accuracy.py --prefix P --reuse   # score P's runs again

Needs root (network namespaces). Prints a table; the last line is the figure.
"""

from __future__ import annotations

import argparse
import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from conftest import write_shards  # noqa: E402

from dsanalyze import store  # noqa: E402
from dsanalyze.analysis import stalls  # noqa: E402
from dsanalyze.analysis.window import read_ahead_drift, read_ahead_steady  # noqa: E402
from dsanalyze.config import parse_bytes, parse_duration_s  # noqa: E402
from dsanalyze.jobs.datasets import make_dataset  # noqa: E402
from dsanalyze.linkrecords import LinkCounts  # noqa: E402
from dsanalyze.whatif import netgrid, network  # noqa: E402
from dsanalyze.whatif.assumptions import NETWORK  # noqa: E402

LOADER_BINDS = 0.95  # a link the loader keeps busier than this tests the link
ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "scripts"
IMAGES, SHARDS = 480, 240  # more than a run reads (34 batches of 4) and reads ahead
# loader -> (backend, script, its data argument, data layout)
LOADERS = {  # name: (server, script, its arguments ({local}: a cache dir), the data served)
    "s3torch": ("s3", "train_s3torch.py", ("s3://dsanalyze/",), "images"),
    "s3fs": ("s3", "train_s3fs.py", ("s3://dsanalyze/",), "images"),
    "webdataset": ("http", "train_webdataset.py",
                   (f"{{endpoint}}/shard-{{000000..{SHARDS - 1:06d}}}.tar",), "shards"),
    # mosaicml-streaming: the harness fills its --local cache for cached runs, empties it for
    # remote ones; its imports take about a minute a run, so it is asked for by name
    # shuffled in blocks of 20 samples (4 shards): with streaming's default block (millions),
    # a shuffled epoch touches every shard early and reads the others' samples ahead, so that
    # no window shorter than the epoch is steady (the first sweep: read-ahead +158%)
    "streaming": ("s3", "train_streaming.py",
                  ("--remote", "s3://dsanalyze/", "--local", "{local}",
                   "--shuffle-block-size", "20"), "mds"),
}
DEFAULT_LOADERS = "s3torch,s3fs,webdataset"
MDS_SHARD_BYTES = 512 << 10  # about 5 samples a shard: a request fetches a shard


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prefix", default="results/bench-remote")
    p.add_argument("--loaders", default=DEFAULT_LOADERS, help=f"of {','.join(LOADERS)}")
    p.add_argument("--bws", default="1M,4M", help="the bandwidths the what-if is fitted on")
    p.add_argument("--held-bw", default="2M", help="the bandwidth it predicts")
    p.add_argument("--latency", default="20ms", help="the latency it is fitted on")
    p.add_argument("--held-latency", default="50ms", help="the latency it predicts")
    # A DataLoader hands out its workers' batches in turn and they fetch side by side, so the
    # read-ahead at an iteration's end depends on its place in the round: a window of a whole
    # number of rounds (the warm-up one too) has the same at both edges. At 30 iterations of
    # 4 workers the window ended two batches into a round: every row's read-ahead +5 to +11%.
    p.add_argument("--iters", type=int, default=32, help="a multiple of --bw-workers")
    p.add_argument("--bw-workers", type=int, default=4, help="-j of the bandwidth sweep")
    p.add_argument("-b", "--batch-size", type=int, default=4)
    p.add_argument("--reuse", action="store_true",
                   help="score the runs already under --prefix (a law changed), run nothing")
    p.add_argument("--image-size", default="500x375",
                   help="JPEG size (about 100 KB at 500x375, 16 KB at 200x150): larger objects "
                        "spend less of the link on each request's own cost")
    return p.parse_args(argv)


def datasets(prefix: Path, size: str) -> dict[str, Path]:
    images = prefix / "data" / "images"
    if not images.is_dir():
        width, height = (int(x) for x in size.split("x"))
        make_dataset(images, images=IMAGES, classes=4, size=(width, height), size_jitter=0.2,
                     seed=3)
    shards = prefix / "data" / "shards"
    if not shards.is_dir():
        shards.mkdir(parents=True)
        write_shards(images, shards, n=SHARDS)
    mds = prefix / "data" / "mds"
    if not mds.is_dir():
        write_mds(images, mds)
    return {"images": images, "shards": shards, "mds": mds}


def write_mds(images: Path, out: Path) -> None:
    """The JPEGs as mosaicml-streaming MDS shards of `MDS_SHARD_BYTES`, with index.json."""
    from streaming import MDSWriter

    classes = sorted(p.name for p in images.iterdir())
    with MDSWriter(out=str(out), columns={"image": "bytes", "label": "int"},
                   size_limit=MDS_SHARD_BYTES) as writer:
        for f in sorted(images.glob("*/*.jpg")):
            writer.write({"image": f.read_bytes(), "label": classes.index(f.parent.name)})


def sweep(ns: argparse.Namespace, out: Path, data: Path, loader: str, bws: str,
          latencies: str, workers: int) -> list[store.RunResult]:
    """One harness sweep: its cached run and a remote run at each link of bws x latencies."""
    backend, script, args, _ = LOADERS[loader]
    if ns.reuse:
        return store.load_runs(out)
    shutil.rmtree(out, ignore_errors=True)
    argv = [sys.executable, str(ROOT / "harness.py"), "--data", str(data), "--serve", backend,
            "--net-bw", bws, "--net-latency", latencies, "--probe-budget", "64K",
            "--modes", "cached,remote", "--iters", str(ns.iters), "--warmup", "4",
            "--prefix", str(out), "--no-plots", "--no-advice", str(SCRIPTS / script),
            *(a.replace("{local}", str(out.parent / f"{out.name}-local")) for a in args),
            "-b", str(ns.batch_size), "-j", str(workers)]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return store.load_runs(out)


def _steady(run: store.RunResult) -> LinkCounts:
    """The proxy's counts over the run's steady window (the whole run's for older records)."""
    counts = run.link.steady(sum(sum(k.samples) for k in run.ranks)) if run.link else None
    assert counts is not None, f"{run.run_id}: no link counts"
    return counts


def _remote_at(runs: list[store.RunResult], bw: int | None, latency_s: float) -> store.RunResult:
    return next(r for r in runs if r.spec.resources.remote and r.ok
                and r.spec.resources.net_bw_bps == bw
                and math.isclose(r.spec.resources.net_latency_s or 0.0, latency_s))


def fair_share_busy(streams: int, think_s: float, link_s: float) -> float:
    """The link's busy share with `streams` streams thinking `think_s` between transfers of
    `link_s`, were they to queue as under a fair share (mean value analysis of processor
    sharing): the pessimistic case, so a row it keeps `LOADER_BINDS` busy tests the link."""
    queued = rate = 0.0
    for n in range(1, streams + 1):
        residence_s = link_s * (1 + queued)
        rate = n / (think_s + residence_s)
        queued = rate * residence_s
    return rate * link_s


def bandwidth_rows(runs: list[store.RunResult], bws: list[int],
                   data_bytes: float) -> list[dict[str, Any]]:
    """Each remote run's rate × the dataset's bytes per sample against its link; `feed`:
    what the cached run's rate would ask of the link; `busy`: the share of the link the
    loader's own pace keeps busy (below `LOADER_BINDS`: the row does not test the link);
    `drift`: how far the loader's read-ahead moved over the window (beyond the setting: its
    rate is not the link's, the row is not scored)."""
    cached = stalls.run_rate(next(r for r in runs if r.mode.value == "cached" and r.ok)).rate_sps
    out = []
    for bw in bws:
        run = _remote_at(runs, bw, 0.0)
        rate, streams = stalls.run_rate(run).rate_sps, network.streams(run)
        busy = fair_share_busy(streams, streams / cached, network.link_s(data_bytes, bw))
        ratio = rate * data_bytes / bw
        why = ("loader binds" if busy < LOADER_BINDS else
               "read-ahead moved" if not read_ahead_steady(run) else None)
        out.append({"bw": bw, "rate_sps": rate, "wire_bytes": _steady(run).bytes_per_sample,
                    "data_bytes": data_bytes, "ratio": ratio,
                    "err": ratio / network.PAYLOAD_SHARE - 1, "feed": cached * data_bytes / bw,
                    "busy": busy, "drift": read_ahead_drift(run), "scored": why is None,
                    "why": why})
    return out


def latency_row(runs: list[store.RunResult], latency_s: float) -> dict[str, Any]:
    """The fetch stall at `latency_s` against latency × requests (and the time held)."""
    remote = _remote_at(runs, None, latency_s)
    b = _breakdown_of(runs, remote)
    counts = _steady(remote)
    per_sample = counts.requests_per_sample
    explained = latency_s * per_sample * b.samples_per_epoch
    held = counts.held_s_per_sample * b.samples_per_epoch
    stall = b.fetch_stall_s or 0.0
    return {"latency_s": latency_s, "requests_per_sample": per_sample, "fetch_stall_s": stall,
            "fetch_low": b.fetch_stall_s_low, "fetch_high": b.fetch_stall_s_high,
            "explained_s": explained, "lat_ratio": stall / explained, "held_s": held,
            "held_ratio": stall / held if held else float("nan"),
            "drift": read_ahead_drift(remote), "scored": read_ahead_steady(remote)}


def _breakdown_of(runs: list[store.RunResult], remote: store.RunResult) -> Any:
    """The breakdown of `remote`'s configuration (the cached run with it alone)."""
    return stalls.breakdowns([r for r in runs if not r.spec.resources.remote or r is remote])[0]


def heldout_rows(fit_obs: list[network.NetObservation],
                 held_obs: list[network.NetObservation]) -> list[dict[str, Any]]:
    """The network law fitted on `fit_obs` predicting each of `held_obs`, with the what-if
    grid's interval (`netgrid`). A run whose read-ahead moved over its window is no
    observation (`network.observations`): it is neither fitted nor predicted."""
    net = network.fit(fit_obs)
    sigma, out_of_sample = netgrid.loo_sigma(fit_obs)
    untested = len(NETWORK) + (0 if out_of_sample else 1)
    k = netgrid.spread(sigma, untested)
    rows = []
    for o in held_obs:
        pred = net.rate_sps(o.cached_rate_sps, o.streams, o.requests_per_sample,
                            o.bytes_per_sample, o.bw_bps, o.latency_s)
        bw = f"{o.bw_bps >> 10}K/s" if o.bw_bps else "unshaped"
        rows.append({"link": f"{bw}, {o.latency_s * 1000:g} ms",
                     "measured": o.rate_sps, "predicted": pred, "err": pred / o.rate_sps - 1,
                     "low": pred / k, "high": pred * k,
                     "covered": pred / k <= o.rate_sps <= pred * k,
                     "fit": f"request {net.request_s * 1e3:.1f} ms, byte {net.byte_s * 1e9:.0f} "
                            f"ns, delay share {net.delay_share:.2f}, sigma {sigma:.3f}"
                            + ("" if out_of_sample else " in sample")})
    return rows


def _obs_at(obs: list[network.NetObservation], bw: int | None,
            latency_s: float) -> list[network.NetObservation]:
    """The observation of that link, none when the run's read-ahead moved."""
    return [o for o in obs if o.bw_bps == bw and math.isclose(o.latency_s, latency_s)][:1]


def figures(ns: argparse.Namespace, prefix: Path, loader: str, data: Path) -> dict[str, Any]:
    fit_bws = [parse_bytes(b) for b in ns.bws.split(",")]
    held_bw = parse_bytes(ns.held_bw)
    lat, held_lat = parse_duration_s(ns.latency), parse_duration_s(ns.held_latency)
    bw_runs = sweep(ns, prefix / loader / "bw", data, loader, f"{ns.bws},{ns.held_bw}", "0",
                    ns.bw_workers)
    lat_runs = sweep(ns, prefix / loader / "lat", data, loader, "none",
                     f"{ns.latency},{ns.held_latency}", 1)
    bw_obs, lat_obs = network.observations(bw_runs), network.observations(lat_runs)
    fit_obs = [o for b in fit_bws for o in _obs_at(bw_obs, b, 0.0)] + _obs_at(lat_obs, None, lat)
    held = _obs_at(bw_obs, held_bw, 0.0) + _obs_at(lat_obs, None, held_lat)
    samples = len(list((prefix / "data" / "images").glob("*/*.jpg")))
    data_bytes = sum(f.stat().st_size for f in data.rglob("*") if f.is_file()) / samples
    return {"loader": loader, "bw": bandwidth_rows(bw_runs, [*fit_bws, held_bw], data_bytes),
            "lat": [latency_row(lat_runs, x) for x in (lat, held_lat)],
            # no fit run steady (every one's read-ahead moved): nothing to fit, nothing predicted
            "heldout": heldout_rows(fit_obs, held) if fit_obs else [],
            "held_missing": 2 - len(held) if fit_obs else 2}


def print_rows(rows: list[dict[str, Any]]) -> None:
    print(f"{'loader':<11} {'link':>8} {'rate/s':>7} {'data B/sample':>13} "
          f"{'wire B/sample':>13} {'read-ahead':>10} {'bw ratio':>8} {'bw err':>6} "
          f"{'cached feed/link':>16} {'link busy':>9}")
    for r in rows:
        for b in r["bw"]:
            print(f"{r['loader']:<11} {b['bw'] >> 10:>6}K/s {b['rate_sps']:>7.1f} "
                  f"{b['data_bytes']:>13.0f} {b['wire_bytes']:>13.0f} {_pct(b['drift']):>10} "
                  f"{b['ratio']:>8.2f} {b['err']:>+6.0%} {b['feed']:>16.2f} {b['busy']:>9.2f}"
                  + ("" if b["scored"] else f"  {b['why']}: not scored"))
    print(f"\n{'loader':<11} {'latency':>7} {'req/sample':>10} {'read-ahead':>10} "
          f"{'fetch stall s [interval]':>26} {'explained s':>11} {'lat ratio':>9} {'held s':>7} "
          f"{'held ratio':>10}")
    for r in rows:
        for x in r["lat"]:
            interval = f"{x['fetch_stall_s']:.2f} [{x['fetch_low']:.2f}, {x['fetch_high']:.2f}]"
            print(f"{r['loader']:<11} {x['latency_s'] * 1000:>5g}ms "
                  f"{x['requests_per_sample']:>10.2f} {_pct(x['drift']):>10} "
                  f"{interval:>26} {x['explained_s']:>11.2f} {x['lat_ratio']:>9.2f} "
                  f"{x['held_s']:>7.2f} {x['held_ratio']:>10.2f}"
                  + ("" if x["scored"] else "  read-ahead moved: not scored"))
    print(f"\n{'loader':<11} {'held-out link':>18} {'measured/s':>10} {'predicted/s [90%]':>24} "
          f"{'pred err':>8}  the law fitted on the other links")
    for r in rows:
        for h in r["heldout"]:
            pred = f"{h['predicted']:.1f} [{h['low']:.1f}, {h['high']:.1f}]"
            print(f"{r['loader']:<11} {h['link']:>18} {h['measured']:>10.1f} {pred:>24} "
                  f"{h['err']:>+8.0%}  {h['fit']}")


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{share:+.0%}"


def main(argv: list[str] | None = None) -> int:
    ns = parse_args(argv)
    prefix = Path(ns.prefix)
    data = datasets(prefix, ns.image_size)
    rows = [figures(ns, prefix, name, data[LOADERS[name][3]]) for name in ns.loaders.split(",")]
    print_rows(rows)
    scored = [b for r in rows for b in r["bw"] if b["scored"]]
    worst_bw = max((abs(b["err"]) for b in scored), default=math.nan)
    worst_lat = max((abs(r["lat"][0]["lat_ratio"] - 1) for r in rows if r["lat"][0]["scored"]),
                    default=math.nan)
    held = [h for r in rows for h in r["heldout"]]
    worst_pred = max((abs(h["err"]) for h in held), default=math.nan)
    covered = sum(h["covered"] for h in held)
    missing = sum(r["held_missing"] for r in rows)
    print(f"worst bandwidth error {worst_bw:.0%} of the payload rate over {len(scored)} "
          f"bandwidth-bound rows (target 10%), worst latency error "
          f"{worst_lat:.0%} (target 15%), worst held-out what-if error {worst_pred:.0%} "
          f"(target 10%), coverage {covered}/{len(held)} (90% nominal)"
          + (f", {missing} held-out runs whose read-ahead moved not predicted" if missing else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
