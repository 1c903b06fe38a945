"""Command line: `harness.py` (profile a job) and the `dsanalyze` subcommands.

The only module that prints, exits or reads the terminal. Every
`DsAnalyzeError` becomes a one-line `error: ...` message and its exit code
(2 for bad input, 1 for a failed run); nothing already measured is lost,
because each run is stored as soon as it ends.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dsanalyze import app, config
from dsanalyze.errors import ConfigError, DsAnalyzeError, Interrupted
from dsanalyze.options import HarnessOptions

HARNESS_USAGE = "python harness.py [options] [SCRIPT [script args]]"


class _Parser(argparse.ArgumentParser):
    """argparse that raises ConfigError (one line, exit 2) instead of printing usage."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(f"{message} (see --help)")


def _job_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("job")
    g.add_argument("--data", dest="data_dir",
                   help="the built-in job's ImageFolder; for a script, the files it reads: a "
                   "directory, a glob, a file list (default: found by a discovery run)")
    g.add_argument("-a", "--arch", help="torchvision model of the built-in job (resnet18)")
    g.add_argument("-b", "--batch-size", dest="batch_size", type=int, help="batch size per rank (32)")
    g.add_argument("-j", "--workers", type=int,
                   help="per rank: DataLoader workers, or DALI threads (2)")
    w = g.add_mutually_exclusive_group()
    w.add_argument("--iters", type=int, help="measured iterations per rank after warm-up (50)")
    w.add_argument("--epochs", type=int, help="measured whole epochs")
    g.add_argument("--warmup", type=int, help="iterations discarded first (5)")
    g.add_argument("--until-ci", dest="until_ci_pct", type=config.parse_percent,
                   help="stop each run once its steady rate is within ± this, e.g. 2%%; "
                        "--iters / --epochs are then the most it runs")
    g.add_argument("--min-iters", dest="min_iters", type=int,
                   help="with --until-ci: measured iterations before it may stop (30)")
    g.add_argument("--device", choices=config.DEVICES, help="cuda, cpu or sim (sim)")
    g.add_argument("--sim-step-ms", dest="sim_step_ms", type=float,
                   help="sim device: milliseconds per training step (50)")
    g.add_argument("--amp", action="store_true", default=None, help="mixed precision on cuda")
    g.add_argument("--loader", choices=config.LOADERS, help="pytorch or dali (pytorch)")
    g.add_argument("--seed", type=int, help="sampler seed (0)")
    g.add_argument("--timeout", dest="timeout_s", type=float, help="seconds per run (1800)")
    g.add_argument("--stall-timeout", dest="stall_timeout_s", type=float,
                   help="stop a run (status stalled) after this many seconds without an "
                        "iteration (120)")
    g.add_argument("--startup-timeout", dest="startup_timeout_s", type=float,
                   help="... or without its first iteration: imports, data scan, workers (600)")
    g.add_argument("--cached-subset", dest="cached_subset",
                   help="data larger than memory: the part cached runs warm and read, 40%%, "
                        "2G, off or auto (auto: what fits the page cache's room, with headroom)")
    g.add_argument("--loader-index", dest="loader_index", type=int,
                   help="user script: time its K-th loader created (0-based) as the training "
                        "loader (default: the first shuffled loader iterated)")
    d = p.add_argument_group("distributed (passed to torch.distributed.run)")
    d.add_argument("--nproc_per_node", "--nproc-per-node", dest="nproc_per_node", type=int)
    d.add_argument("--nnodes", type=int)
    d.add_argument("--node_rank", "--node-rank", dest="node_rank", type=int)
    d.add_argument("--master_addr", "--master-addr", dest="master_addr")
    d.add_argument("--master_port", "--master-port", dest="master_port", type=int)


def _sweep_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sweep")
    g.add_argument("--config", help="TOML file with [job] and [sweep] tables")
    g.add_argument("--prefix", help="results directory (results/run)")
    g.add_argument("--modes", help="comma list of synthetic,cached,disk,loader (remote: the "
                   "disk mode of --serve)")
    g.add_argument("--cpus", help="CPU counts, e.g. 1,2,4")
    g.add_argument("--cache", help="page-cache budgets for disk runs: 0,50%%,2G,none "
                   "(none: unlimited)")
    g.add_argument("--storage-bw", dest="storage_bw",
                   help="read bandwidths: none,40M (none: unthrottled)")
    g.add_argument("--resume", action="store_true", default=None, help="skip completed runs")
    g.add_argument("--no-cgroups", dest="use_cgroups", action="store_false", default=None,
                   help="no cgroups: CPU affinity only; cache and bandwidth not enforced")
    g.add_argument("--drop-caches-globally", dest="drop_caches_globally", action="store_true",
                   default=None,
                   help="root: when per-file eviction leaves dataset pages before a disk run "
                        "(mapped by another process), drop the WHOLE page cache (echo 1 > "
                        "/proc/sys/vm/drop_caches): every other process on the machine loses "
                        "its cached files and reads them again. Off: those pages are recorded")
    g.add_argument("--no-plots", dest="plots", action="store_false", default=None,
                   help="do not draw the figures")
    g.add_argument("--no-advice", dest="advice", action="store_false", default=True,
                   help="do not fit the what-if model for the answer printed after the table")
    g.add_argument("--verify", action="store_true",
                   help="after the advice, measure the recommended configuration when this "
                   "machine can run it, and print predicted against measured")
    g.add_argument("--lock-wait", dest="lock_wait", type=float, default=0.0, metavar="SECONDS",
                   help="wait this long for another harness measuring the same dataset (0: "
                        "refuse at once)")
    _measure_again_options(g)


def _measure_again_options(g: argparse._ArgumentGroup) -> None:
    """How often each run is measured: repeats, the ones a job or the machine calls for, and
    the adaptive search that picks them."""
    g.add_argument("--repeats", type=int,
                   help="run every configuration N times, interleaved across modes (1)")
    g.add_argument("--target-ci", dest="target_ci",
                   help="repeat a configuration until its stall intervals are within ± this "
                        "share of the epoch, e.g. 5%%; at least 2 runs each")
    g.add_argument("--max-repeats", dest="max_repeats", type=int,
                   help="most runs per configuration with --target-ci (5)")
    g.add_argument("--shared-core-runs", dest="shared_core_runs", type=int, metavar="N",
                   help="measure N times the cached runs of a step on the CPU that shares its "
                        "cores with the DataLoader workers: their rate varies from run to run "
                        "by up to a third (3; 1: once)")
    g.add_argument("--host-retries", dest="host_retries", type=int, metavar="N",
                   help="measure again, up to N times, a run the machine itself slowed (a "
                        "neighbour on the VM's host): a decode timed after it 30%% over its "
                        "median (at once, once the machine is back), or the job's own "
                        "transforms 8%% more CPU a sample than its fastest repeat (after the "
                        "sweep) (2; 0: never)")
    g.add_argument("--adaptive", action="store_true", default=None,
                   help="measure the grid's configurations one at a time, each where it could "
                        "change the recommendation, until it is sure (within ±5%%)")
    g.add_argument("--budget", help="with --adaptive: stop before the runs take longer, e.g. 10m")


def _network_options(p: argparse.ArgumentParser) -> None:
    r = p.add_argument_group("data across a network")
    r.add_argument("--serve", choices=config.BACKENDS,
                   help="serve --data from an S3 (moto) or HTTP server behind a shaped link; "
                        "disk runs become remote runs; the script finds the server at "
                        "{endpoint} in its arguments, or AWS_ENDPOINT_URL")
    r.add_argument("--net-bw", dest="net_bw", help="the link's bandwidths: 100M,1G,none")
    r.add_argument("--net-latency", dest="net_latency",
                   help="latency added to each request: 0,20ms")
    r.add_argument("--endpoint", help="the data's own endpoint (s3://bucket/prefix, http://"
                   "host/shard-{000..099}.tar): checked and probed before the runs")
    r.add_argument("--probe-budget", dest="probe_budget",
                   help="bytes the endpoint probe reads at each concurrency (8M)")
    r.add_argument("--local-cache", dest="local_cache",
                   help="the streaming library's local cache dir (default: the script's --local "
                        "value): filled with --data for cached runs, emptied for remote runs")


def harness_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="harness.py", usage=HARNESS_USAGE,
                description="Profile a training job in synthetic, cached and disk modes.")
    _job_options(p)
    _sweep_options(p)
    _network_options(p)
    p.add_argument("script", nargs="?", help="training script (default: the built-in job)")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments of the script")
    return p


def _progress_printer() -> Callable[[str], None]:
    """One line per run, on a terminal or not (a log file gets the same lines)."""
    return lambda line: print(line, file=sys.stderr, flush=True)


def harness_main(argv: list[str] | None = None) -> int:
    return _guard(lambda: _harness(argv))


def _harness(argv: list[str] | None) -> int:
    ns = harness_parser().parse_args(argv)
    req = app.HarnessRequest(HarnessOptions.from_flat(vars(ns)), ns.advice, ns.lock_wait,
                             ns.verify)
    out = app.harness(req, _progress_printer(), lambda line: print(line, flush=True))
    _print_profile_notes(out.profile)
    print(out.table)
    if out.node_note:
        print(out.node_note)
    if out.recommendation is not None:
        print("\n".join(out.recommendation))
    if out.verified is not None:
        print(out.verified)
    if out.profile.sweep.adaptive is not None:
        print(app.adaptive_text(out.profile.sweep.adaptive))
    print(f"results: {out.summary_path}")
    _print_figures(Path(out.sweep.prefix), list(out.figures))
    if out.failure is not None:
        raise out.failure
    return 0


def _print_profile_notes(measured: app.ProfileOutcome) -> None:
    outcome = measured.sweep
    for line in outcome.unreadable:
        print(f"warning: unreadable run file {line}: measured again", file=sys.stderr)
    if outcome.cgroup_note and outcome.cgroup_note != "--no-cgroups":
        print(f"warning: {outcome.cgroup_note}: CPU affinity only; cache and storage "
              "bandwidth are not enforced", file=sys.stderr)
    if outcome.skipped:
        print(f"resumed: {len(outcome.skipped)} run(s) already complete, skipped")
    if outcome.host_slowed:
        print(f"measured again: {len(outcome.host_slowed)} run(s) the machine itself slowed (the "
              "probe after it, or the job's own transforms' CPU a sample), kept in "
              f"{Path(outcome.host_slowed[0]).parent}")
    if outcome.superseded:
        print(f"set aside {len(outcome.superseded)} repeat run(s) of an earlier sweep "
              f"({', '.join(outcome.superseded)}) to {outcome.superseded_dir}: measured afresh "
              "without --resume")


def _cmd_verify(ns: argparse.Namespace) -> int:
    v = app.verify(ns.prefix, None, _progress_printer(), ns.use_cgroups, ns.lock_wait)
    if v.advice is not None:
        print("\n".join(app.advice_docs(v.advice).recommendation))
    print(v.text)
    return 0


def _print_figures(prefix: Path, paths: list[Path]) -> None:
    names = sorted({p.stem for p in paths})
    if names:
        formats = "/".join(sorted({p.suffix.lstrip(".") for p in paths}))
        print(f"figures: {prefix}/ ({', '.join(names)}; {formats})")


def _guard(fn: Callable[[], int]) -> int:
    try:
        return fn()
    except DsAnalyzeError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("error: interrupted; completed runs are kept (rerun with --resume)", file=sys.stderr)
        return 130
    except Interrupted:
        print("error: terminated; completed runs are kept (rerun with --resume)", file=sys.stderr)
        return 143


# ---- dsanalyze subcommands ------------------------------------------------------------------

def _cmd_make_dataset(ns: argparse.Namespace) -> int:
    made = app.make_dataset(ns.dir, ns.images, ns.classes, ns.size, ns.size_jitter, ns.seed)
    print(f"wrote {made.files} images, {made.total_bytes} bytes ({made.size_text}) to {ns.dir}")
    return 0


def _cmd_summary(ns: argparse.Namespace) -> int:
    result = app.summarize(ns.prefix, ns.merge or ())
    if ns.merge:
        print(f"merged: {result.merged_runs} run(s) joined with the other nodes' ranks")
    for line in result.unreadable:
        print(f"warning: unreadable run file {line} left out: harness.py --resume "
              "measures it again", file=sys.stderr)
    print(result.table)
    return 0


def _cmd_plot(ns: argparse.Namespace) -> int:
    _print_figures(Path(ns.prefix), app.plot(ns.prefix, ns.run))
    return 0


def _cmd_report(ns: argparse.Namespace) -> int:
    for path in app.report(ns.prefix):
        print(f"report: {path}")
    return 0


def _cmd_trace(ns: argparse.Namespace) -> int:
    path = app.trace(ns.prefix, ns.run, ns.output)
    print(f"trace: {path} (open it in https://ui.perfetto.dev or chrome://tracing)")
    return 0


# ---- what-if and validate (computed in whatif/api.py, worded in report/whatif_text.py) --

def _workers(text: str | None) -> tuple[int | None, ...] | None:
    if not text:
        return None
    try:
        return tuple(int(w) for w in config.split_list(text))
    except ValueError:
        raise ConfigError(f"cannot read --workers {text!r}: write counts such as 1,2,4") from None


def _pct(text: str) -> float:
    try:
        return float(str(text).strip().rstrip("%"))
    except ValueError:
        raise ConfigError(f"cannot read {text!r}: write a percentage such as 5%") from None


def whatif_request(ns: argparse.Namespace) -> app.WhatIfRequest:
    """The what-if query the command line asks."""
    cpus = config.parse_cpus_list(ns.cpus) if ns.cpus else None
    if cpus is not None and any(c is None for c in cpus):
        raise ConfigError("--cpus needs numbers for a what-if, such as 1,2,4,8")
    return app.WhatIfRequest(
        prefix=ns.prefix, cpus=cpus, cache=config.split_list(ns.cache) if ns.cache else None,
        storage_bps=tuple(config.parse_bandwidth(b) for b in config.split_list(ns.storage_bw))
        if ns.storage_bw else None,
        gpu_speedup=ns.gpu_speedup, nproc=ns.nproc, nnodes=ns.nnodes, workers=_workers(ns.workers),
        net_bw_bps=tuple(config.parse_bandwidth(b, "network bandwidth")
                         for b in config.split_list(ns.net_bw)) if ns.net_bw else None,
        net_latency_s=tuple(config.parse_duration_s(x) for x in config.split_list(ns.net_latency))
        if ns.net_latency else None,
        cache_policy=ns.cache_policy, recommend=ns.recommend, max_stall_pct=_pct(ns.max_stall),
        epochs=ns.epochs)


def _cmd_whatif(ns: argparse.Namespace) -> int:
    answer = app.whatif(whatif_request(ns))
    print(json.dumps(answer.document, indent=1) if ns.json else answer.text)
    if not ns.json:
        print(f"results: {answer.path}")
    return 0


def _cmd_validate(ns: argparse.Namespace) -> int:
    checked = app.validate(ns.prefix, ns.cache_policy)
    print(json.dumps(checked.document, indent=1) if ns.json else checked.text)
    if not ns.json:
        print(f"results: {checked.path}")
    return 0


def _whatif_parsers(sub: Any) -> None:
    policies = ("pagecache", "lru", "noevict")
    w = sub.add_parser("whatif", help="predict throughput and stalls for other CPUs, cache, "
                       "storage, GPU speed, ranks")
    w.add_argument("prefix")
    w.add_argument("--cpus", help="CPU counts (default: the measured ones, 2x and 4x the largest)")
    w.add_argument("--cache", help="page-cache budgets, %% of the dataset's bytes or sizes "
                   "(default: 0,25%%,50%%,75%%,100%%, the measured ones and none)")
    w.add_argument("--storage-bw", dest="storage_bw",
                   help="storage read bandwidths: none (the measured device),100M,1G (default: "
                   "the measured ones and none)")
    w.add_argument("--gpu-speedup", dest="gpu_speedup", type=float, default=1.0,
                   help="the accelerator k times faster (compute step / k)")
    w.add_argument("--nproc", type=int, help="ranks per node (default: as measured)")
    w.add_argument("--nnodes", type=int, default=1,
                   help="nodes, each with the CPUs, cache and storage given (default 1)")
    w.add_argument("--workers", help="DataLoader workers per rank (-j), e.g. 1,2,4,8 "
                   "(default: as measured, 2x and 4x)")
    w.add_argument("--net-bw", dest="net_bw", help="remote data: link bandwidths, e.g. "
                   "100M,1G,none (default: the measured ones, 2x and 4x the largest, none)")
    w.add_argument("--net-latency", dest="net_latency",
                   help="remote data: latencies, e.g. 0,20ms (default: the measured ones)")
    w.add_argument("--cache-policy", dest="cache_policy", choices=policies, default="pagecache",
                   help="pagecache: Linux's two-list LRU (default); lru: textbook LRU; "
                   "noevict: MinIO-style, admit until full")
    w.add_argument("--recommend", action="store_true",
                   help="name the cheapest combination with stalls under --max-stall")
    w.add_argument("--max-stall", dest="max_stall", default="5%", help="stall budget (5%%)")
    w.add_argument("--epochs", type=int,
                   help="epochs of your real job: the recommendation weighs the cold first "
                   "epoch against the steady ones (default: as many as the disk runs measured)")
    w.add_argument("--json", action="store_true", help="print whatif.json instead of tables")
    v = sub.add_parser("validate", help="out of sample: leave-one-out and extrapolation splits, "
                       "errors and interval coverage")
    v.add_argument("prefix")
    v.add_argument("--cache-policy", dest="cache_policy", choices=policies, default="pagecache")
    v.add_argument("--json", action="store_true", help="print the validation JSON")


SUBCOMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "make-dataset": _cmd_make_dataset,
    "summary": _cmd_summary,
    "plot": _cmd_plot,
    "report": _cmd_report,
    "trace": _cmd_trace,
    "whatif": _cmd_whatif,
    "validate": _cmd_validate,
    "verify": _cmd_verify,
}


def main_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="dsanalyze", description="Differential data-stall analyzer.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    m = sub.add_parser("make-dataset", help="write a JPEG ImageFolder")
    m.add_argument("dir", help="folder to write (DIR/<class>/<image>.jpg)")
    m.add_argument("--images", type=int, default=1000, help="JPEG files in all (1000)")
    m.add_argument("--classes", type=int, default=10,
                   help="class folders, the images spread evenly over them (10)")
    m.add_argument("--size", default="500x375", help="image WIDTHxHEIGHT in pixels (500x375)")
    m.add_argument("--size-jitter", dest="size_jitter", type=float, default=0.0,
                   help="each side scaled by 1 +- up to this fraction (0)")
    m.add_argument("--seed", type=int, default=0,
                   help="random seed: the same seed writes the same files (0)")
    s = sub.add_parser("summary", help="recompute and print the stall table of a prefix")
    s.add_argument("prefix")
    s.add_argument("--merge", nargs="+", metavar="DIR",
                   help="other nodes' prefixes: join their ranks into PREFIX's runs (when the "
                        "nodes share no filesystem and the store could not gather them)")
    pr = sub.add_parser("profile", help="the same as harness.py", add_help=False)
    pr.add_argument("rest", nargs=argparse.REMAINDER)
    pl = sub.add_parser("plot", help="redraw the figures of a prefix (PNG and SVG)")
    pl.add_argument("prefix")
    pl.add_argument("--run", help="run id for the timeline (default: the one that waited most)")
    rp = sub.add_parser("report", help="write PREFIX/report.md and report.html")
    rp.add_argument("prefix")
    tr = sub.add_parser("trace", help="write a Chrome/Perfetto trace of the runs of a prefix")
    tr.add_argument("prefix")
    tr.add_argument("--run", help="one run id (default: every run of the prefix)")
    tr.add_argument("-o", "--output", help="file to write (default: PREFIX/trace.json)")
    _whatif_parsers(sub)
    ve = sub.add_parser("verify", help="measure the advice's recommended configuration (one "
                        "more run into PREFIX) and print predicted against measured")
    ve.add_argument("prefix")
    ve.add_argument("--no-cgroups", dest="use_cgroups", action="store_false",
                    help="CPU affinity only, as a sweep run with --no-cgroups")
    ve.add_argument("--lock-wait", dest="lock_wait", type=float, default=0.0, metavar="SECONDS")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["profile"]:
        # argparse cannot hand a sub-command options it does not know: pass them through whole
        return harness_main(argv[1:])

    def run() -> int:
        ns = main_parser().parse_args(argv)
        return SUBCOMMANDS[ns.command](ns)
    return _guard(run)


if __name__ == "__main__":
    sys.exit(main())
