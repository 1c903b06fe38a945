"""Chrome trace event export of stored runs, for Perfetto and chrome://tracing.

Layout (Trace Event Format, JSON object form):

- one process (pid) per rank of each run, named `<run id> rank <r>`; its
  thread 1 holds one `data wait` and one `compute` complete event ("ph": "X")
  per iteration (`args.epoch`: the stored 0-based epoch), its thread 0 one span
  per epoch, named from 1 as the report counts them. Epochs and iterations are on
  separate threads because Perfetto requires events on one thread to nest
  exactly, and an epoch span built from rounded microseconds could end a
  fraction of a microsecond after its last iteration.
- one more process per run, `<run id> job`, holding the counter tracks
  ("ph": "C") sampled by the monitor: CPU cores busy, storage read bandwidth,
  page cache and memory of the job's cgroup (the process tree's CPU and RSS
  when the run had no cgroup), and GPU utilisation where there are GPUs.

Iteration i of a rank starts `sum(iter_s[:i])` after its `start_unix_s` (the
iterations of a rank are back to back, docs/design.md), waits `wait_s[i]` for its
batch, then computes for `iter_s[i] - wait_s[i]`. Timestamps `ts` and
durations `dur` are microseconds since the earliest run's start.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dsanalyze.analysis.samples import MonitorSample, monitor_samples
from dsanalyze.errors import StoreError
from dsanalyze.records import RankRecord, RunResult

WAIT = "data wait"
COMPUTE = "compute"
US = 1e6  # microseconds per second
_MIB = float(1 << 20)


@dataclass(frozen=True)
class Span:
    """One phase of one iteration of one rank, `start_s` after the rank's first iteration began.

    Relative times, because a Unix time in seconds carries only about 0.2 us
    of resolution: sums of durations stay exact, offsets from it would not.
    """

    name: str  # WAIT or COMPUTE
    rank: int
    iteration: int
    epoch: int
    start_s: float
    dur_s: float
    warmup: bool


def iteration_spans(rank: RankRecord) -> list[Span]:
    """The wait and compute spans of every iteration of a rank, warm-up included."""
    spans = []
    starts = itertools.accumulate(rank.iter_s, initial=0.0)
    for i, (t0, wait_s, iter_s) in enumerate(zip(starts, rank.wait_s, rank.iter_s)):
        common = {"rank": rank.rank, "iteration": i, "epoch": rank.epoch[i],
                  "warmup": i < rank.warmup}
        spans.append(Span(WAIT, start_s=t0, dur_s=wait_s, **common))
        spans.append(Span(COMPUTE, start_s=t0 + wait_s, dur_s=max(0.0, iter_s - wait_s),
                          **common))
    return spans


def _origin_unix_s(run: RunResult) -> float:
    starts = [r.start_unix_s for r in run.ranks if r.start_unix_s]
    if run.started_unix_s:
        starts.append(run.started_unix_s)
    starts += [m.unix_s for m in monitor_samples(run.monitor[:1])]
    return min(starts) if starts else 0.0


def _us(unix_s: float, origin_s: float, offset_s: float = 0.0) -> float:
    return round(((unix_s - origin_s) + offset_s) * US, 3)


def _meta(pid: int, name: str, sort: int, threads: dict[int, str]) -> list[dict[str, Any]]:
    events = [{"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": name}},
              {"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index",
               "args": {"sort_index": sort}}]
    events += [{"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": n}}
               for tid, n in threads.items()]
    return events


def _node_label(rank: RankRecord) -> str:
    """`node N ` for the ranks of a merged multi-node run, else nothing."""
    return f"node {rank.extra['node']} " if "node" in rank.extra else ""


def rank_events(rank: RankRecord, pid: int, origin_s: float) -> list[dict[str, Any]]:
    """Iteration spans on thread 1 and epoch spans on thread 0 of one rank's process."""
    spans = iteration_spans(rank)
    events = [{"ph": "X", "pid": pid, "tid": 1, "name": s.name, "cat": "iteration",
               "ts": _us(rank.start_unix_s, origin_s, s.start_s), "dur": round(s.dur_s * US, 3),
               "args": {"iteration": s.iteration, "epoch": s.epoch, "warmup": s.warmup}}
              for s in spans]
    for epoch, group in itertools.groupby(spans, key=lambda s: s.epoch):
        group = list(group)
        end_s = group[-1].start_s + group[-1].dur_s
        events.append({"ph": "X", "pid": pid, "tid": 0, "name": f"epoch {epoch + 1}",
                       "cat": "epoch", "ts": _us(rank.start_unix_s, origin_s, group[0].start_s),
                       "dur": round((end_s - group[0].start_s) * US, 3),
                       "args": {"iterations": len(group) // 2}})
    return events


def _rate(prev: MonitorSample, cur: MonitorSample, counter: str) -> float | None:
    """d(counter) / d(wall seconds) between two samples; None where either lacks it."""
    a, b = getattr(prev, counter), getattr(cur, counter)
    dt = cur.unix_s - prev.unix_s
    if a is None or b is None or dt <= 0:
        return None
    return max(0.0, b - a) / dt


def counter_values(prev: MonitorSample, cur: MonitorSample) -> dict[str, dict[str, float]]:
    """Counter tracks at one monitor sample, in display units, from the cgroup when it has them.

    CPU: cores busy = d(cpu seconds) / d(wall seconds) since the previous sample;
    read bandwidth: MB/s (10^6 bytes) read from storage; page cache and memory: MiB;
    each GPU's utilisation (%) and memory (MiB) where NVML sampled them.
    """
    tracks: list[tuple[str, dict[str, float]]] = []
    cgroup = cur.in_cgroup
    cpu = _rate(prev, cur, "cpu_usage_s" if cgroup else "tree_cpu_s")
    if cpu is not None:
        tracks.append(("CPU", {"cores busy": round(cpu, 4)}))
    storage = cur.read_bytes is not None
    read = _rate(prev, cur, "read_bytes" if storage else "tree_read_chars")
    if read is not None:
        name = "read bandwidth" if storage else "read calls (incl. cache hits)"
        tracks.append((name, {"MB/s": round(read / 1e6, 4)}))
    if cur.cache_bytes is not None:
        tracks.append(("page cache", {"MiB": round(cur.cache_bytes / _MIB, 3)}))
    mem = cur.memory_bytes if cur.memory_bytes is not None else \
        None if cgroup else cur.tree_rss_bytes
    if mem is not None:
        tracks.append(("memory", {"MiB": round(mem / _MIB, 3)}))
    for i, gpu in enumerate(cur.gpu):  # NVML, on a machine with GPUs
        tracks.append((f"GPU {i}", {"util %": gpu.util_pct,
                                    "memory MiB": round(gpu.mem_used_bytes / _MIB, 3)}))
    return dict(tracks)


def counter_events(samples: Iterable[MonitorSample], pid: int,
                   origin_s: float) -> list[dict[str, Any]]:
    """One "C" event per track per monitor sample (rates from the second sample on)."""
    events = []
    samples = list(samples)
    # the first sample against itself at its own time: levels only, no rate yet
    for prev, cur in zip([MonitorSample(unix_s=s.unix_s) for s in samples[:1]] + samples,
                         samples):
        for name, args in counter_values(prev, cur).items():
            events.append({"ph": "C", "pid": pid, "tid": 0, "name": name,
                           "ts": _us(cur.unix_s, origin_s), "args": args})
    return events


def run_events(run: RunResult, first_pid: int, origin_s: float) -> list[dict[str, Any]]:
    """Every event of one run; pids first_pid.. for its ranks, then one for its counters."""
    events: list[dict[str, Any]] = []
    pid = first_pid
    for rank in run.ranks:
        events += _meta(pid, f"{run.run_id} {_node_label(rank)}rank {rank.rank}", pid,
                        {0: "epochs", 1: "iterations"})
        events += rank_events(rank, pid, origin_s)
        pid += 1
    if run.monitor:
        events += _meta(pid, f"{run.run_id} job", pid, {0: "counters"})
        events += counter_events(monitor_samples(run.monitor), pid, origin_s)
    return events


def chrome_trace(runs: list[RunResult]) -> dict[str, Any]:
    """The trace document of some runs, in the order given, on one time axis."""
    runs = [r for r in runs if r.ranks or r.monitor]
    if not runs:
        raise StoreError("no run with iterations or monitor samples to trace: "
                         "run harness.py first, or pick a run that completed")
    origin_s = min(_origin_unix_s(r) for r in runs)
    events: list[dict[str, Any]] = []
    pid = 1
    for run in runs:
        events += run_events(run, pid, origin_s)
        pid += len(run.ranks) + 1
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"origin_unix_s": origin_s, "runs": [r.run_id for r in runs],
                          "spans": f"{WAIT!r} and {COMPUTE!r} per iteration; ts/dur in us"}}
