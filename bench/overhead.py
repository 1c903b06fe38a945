#!/usr/bin/env python3
"""Overhead of the instrumentation: one cached-mode job, plain vs instrumented vs torch.profiler.

    python bench/overhead.py --data DIR [-b 16] [-j 2] [--iters 60] [--warmup 5]
                             [--sim-step-ms 50] [--rounds 5]

The built-in job's training loop (ImageFolder with the standard transforms, a
DataLoader with persistent workers, the `sim` step) runs in this one process
with every file of the dataset in the page cache (cached mode), in three
variants, each with its own loader:

    plain         for batch in loader: step(batch)
    instrumented  the same loop over dsanalyze.instrument(loader): per-iteration
                  timing, and per-transform timing in every worker writing its
                  totals under a run directory, as in a profiled user script
    profiler      the plain loop under torch.profiler.profile(activities=[CPU])

Throughput = samples / wall time of the measured iterations (after the warm-up).
The variants are interleaved, round by round, in an order rotated each round,
so that drift on a shared machine and position in the round affect them alike; each ratio is taken against the same round's plain rate,
and the median over rounds is printed, with its range. Target:
instrumented / plain >= 0.995.

A micro-benchmark then prices the instrumentation directly, free of that
noise: nanoseconds per iteration (on an in-memory loader) and per timed
transform call, and the ratio they imply for this job.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import dsanalyze  # noqa: E402
from dsanalyze.analysis import transforms as step_tables  # noqa: E402
from dsanalyze.dataset import scan_dataset  # noqa: E402
from dsanalyze.instrument import api  # noqa: E402
from dsanalyze.instrument import rank as rankenv  # noqa: E402
from dsanalyze.instrument import transforms as step_timing  # noqa: E402
from dsanalyze.instrument.loader import batch_size_of  # noqa: E402
from dsanalyze.jobs import image_classification as job  # noqa: E402
from dsanalyze.resources import pagecache  # noqa: E402

TARGET = 0.995
VARIANTS = ("plain", "instrumented", "profiler")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="ImageFolder root")
    p.add_argument("-b", "--batch-size", type=int, default=16)
    p.add_argument("-j", "--workers", type=int, default=2)
    p.add_argument("--iters", type=int, default=60, help="measured iterations per round")
    p.add_argument("--warmup", type=int, default=5, help="iterations discarded per round")
    p.add_argument("--sim-step-ms", type=float, default=50.0)
    p.add_argument("--rounds", type=int, default=5)
    return p.parse_args(argv)


def forever(loader: Iterable[Any]) -> Iterator[Any]:
    while True:
        yield from loader


def measure(loader: Iterable[Any], step: Callable[[Any], None], warmup: int, iters: int) -> float:
    """Samples per second over `iters` iterations, after `warmup`."""
    batches = forever(loader)
    for _ in range(warmup):
        step(next(batches))
    samples = 0
    t0 = time.perf_counter()
    for _ in range(iters):
        batch = next(batches)
        step(batch)
        samples += batch_size_of(batch)
    rate = samples / (time.perf_counter() - t0)
    batches.close()
    return rate


def under_profiler(fn: Callable[[], float]) -> float:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]):
        return fn()


def per_call_ns(fn: Callable[[], None], n: int) -> float:
    t0 = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - t0) / n


def micro(n: int = 200_000) -> tuple[float, float]:
    """(ns per instrumented iteration, ns per timed transform call), each minus the plain cost."""
    items = list(range(n))
    session = api.Session(api.Settings(mode="cached"))
    session.choose(items, explicit=True)
    timed = api.InstrumentedLoader(items, session)

    def loop(it: Iterable[Any]) -> Callable[[], None]:
        def run() -> None:
            for _ in it:
                pass
        return run
    iter_ns = per_call_ns(loop(timed), n) - per_call_ns(loop(items), n)
    step = step_timing.TimedStep(abs, "transform", 0, "abs", None)

    def calls(fn: Callable[[int], Any]) -> Callable[[], None]:
        def run() -> None:
            for i in items:
                fn(i)
        return run
    call_ns = per_call_ns(calls(step), n) - per_call_ns(calls(abs), n)
    return iter_ns, call_ns


def build(args: argparse.Namespace) -> tuple[dict[str, Any], Callable[[Any], None]]:
    ns = job.parse_args(["--data", args.data, "-b", str(args.batch_size), "-j", str(args.workers),
                         "--sim-step-ms", str(args.sim_step_ms)])
    device = torch.device("cpu")
    loaders = {v: job.build_loader(ns, 1, 0, device) for v in VARIANTS}
    loaders["instrumented"] = dsanalyze.instrument(loaders["instrumented"])
    return loaders, job.make_step(ns, device, 1)


def run_rounds(args: argparse.Namespace) -> tuple[dict[str, list[float]], list[dict[str, Any]]]:
    pagecache.warm(scan_dataset(args.data).files)  # cached mode: every file in memory
    run_dir = tempfile.mkdtemp(prefix="dsanalyze-overhead-")
    os.environ.update({rankenv.ENV_RUN_DIR: run_dir, rankenv.ENV_MODE: "cached"})
    for var in (rankenv.ENV_ITERS, rankenv.ENV_EPOCHS, rankenv.ENV_WARMUP):
        os.environ.pop(var, None)
    api.start_session()
    loaders, step = build(args)
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for i in range(args.rounds):
        for v in VARIANTS[i % 3:] + VARIANTS[:i % 3]:  # rotated: no variant always goes first
            def fn(v: str = v) -> float:
                return measure(loaders[v], step, args.warmup, args.iters)
            rates[v].append(under_profiler(fn) if v == "profiler" else fn())
    table = step_timing.finish(loaders["instrumented"].loader, api.current_session().sink)
    return rates, table


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rates, table = run_rounds(args)
    print(f"job: built-in image classification, cached, -b {args.batch_size} -j {args.workers}, "
          f"sim step {args.sim_step_ms:g} ms, {args.rounds} rounds x {args.iters} iterations "
          f"(+{args.warmup} warm-up), torch {torch.__version__}")
    width = max(20, 8 * args.rounds)
    print(f"{'variant':<13} {'samples/s per round':<{width}} {'median':>8}  ratio to plain")
    for v in VARIANTS:
        ratios = [r / p for r, p in zip(rates[v], rates["plain"])]
        shown = " ".join(f"{r:7.1f}" for r in rates[v])
        line = f"{v:<13} {shown:<{width}} {statistics.median(rates[v]):8.1f}"
        if v != "plain":
            line += (f"  {statistics.median(ratios):.4f} "
                     f"(min {min(ratios):.4f}, max {max(ratios):.4f})")
        print(line)
    iter_ns, call_ns = micro()
    iter_s = args.batch_size / statistics.median(rates["plain"])
    expected = 1 - iter_ns * 1e-9 / iter_s
    per_sample_s = step_tables.sum_s_per_sample(table)
    worker_share = len(table) * call_ns * 1e-9 / per_sample_s if per_sample_s else 0.0
    print(f"instrumentation cost: {iter_ns / 1e3:.2f} us per iteration -> expected "
          f"instrumented/plain {expected:.5f} at {iter_s * 1e3:.1f} ms per iteration; "
          f"{call_ns:.0f} ns per timed transform call -> {worker_share * 100:.3f}% of a "
          f"worker's {per_sample_s * 1e3:.2f} ms per sample in the {len(table)} timed steps")
    median_ratio = statistics.median(r / p for r, p in zip(rates["instrumented"], rates["plain"]))
    verdict = "meets" if median_ratio >= TARGET else "misses"
    print(f"instrumented/plain median {median_ratio:.4f}: {verdict} the target {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
