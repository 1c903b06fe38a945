"""One result for a job that ran on several nodes: every node's ranks joined into node 0's run.

During a sweep node 0 merges the results the others publish (`nodes.NodeGroup.exchange`);
afterwards `dsanalyze summary --merge` joins prefixes that no shared filesystem gathered.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dsanalyze import store
from dsanalyze.records import RankRecord, RunResult, Status


def _tag(ranks: Sequence[RankRecord], node: int, offset_s: float) -> list[RankRecord]:
    """Ranks of one node, on node 0's clock, each saying which node it ran on."""
    return [dataclasses.replace(
        r, start_unix_s=r.start_unix_s + offset_s if r.start_unix_s else 0.0,
        extra={**r.extra, "node": node, "clock_offset_s": offset_s}) for r in ranks]


def merge_results(primary: RunResult, others: Mapping[int, RunResult]) -> RunResult:
    """One result for the job: node 0's run plus every other node's ranks.

    Ranks move onto node 0's clock by each node's recorded offset; the status
    is the first failure (by node), with the node named; bytes read add up;
    each node's I/O, enforcement and environment are kept under `nodes`.
    """
    node0 = primary.spec.job.node_rank
    ranks = _tag(primary.ranks, node0, 0.0)
    status, error = primary.status, primary.error
    per_node = {str(node0): _node_facts(primary)}
    read = primary.io.read_bytes
    for n in sorted(others):
        other = others[n]
        ranks += _tag(other.ranks, n, float(other.environment.get("clock_offset_s", 0.0)))
        per_node[str(n)] = _node_facts(other)
        if status == Status.OK and other.status != Status.OK:
            status, error = other.status, f"node {n}: {other.error}"
        other_read = other.io.read_bytes
        read = read + other_read if read is not None and other_read is not None else None
    io = dataclasses.replace(primary.io, read_bytes=read, nodes=per_node)
    expected = primary.spec.job.world_size
    if status == Status.OK and len(ranks) < expected:
        status, error = Status.FAILED, f"{len(ranks)} of {expected} ranks reported"
    return dataclasses.replace(primary, status=status, error=error,
                               ranks=tuple(sorted(ranks, key=lambda r: r.rank)), io=io)


def _node_facts(result: RunResult) -> dict[str, Any]:
    env = result.environment
    return {"host": env.get("host"), "status": result.status.value, "error": result.error,
            "clock_offset_s": env.get("clock_offset_s", 0.0),
            "clock_rtt_s": env.get("clock_rtt_s"), "read_bytes": result.io.read_bytes,
            "enforced": result.enforced.to_dict(), "ranks": [r.rank for r in result.ranks]}


def merge_prefixes(primary: Sequence[RunResult], others: Sequence[Sequence[RunResult]]
                   ) -> list[RunResult]:
    """`summary --merge`: node 0's runs, each joined with the same run of the other nodes.

    A run already holding every rank of the job is kept as it is.
    """
    by_node: list[dict[str, RunResult]] = [{r.run_id: r for r in runs} for runs in others]
    merged = []
    for run in primary:
        if len(run.ranks) >= run.spec.job.world_size:
            merged.append(run)
            continue
        peers = {}
        for runs in by_node:
            peer = runs.get(run.run_id)
            if peer is not None:
                peers[peer.spec.job.node_rank] = peer
        merged.append(merge_results(run, peers))
    return merged


def merge_into_prefix(prefix: Path, other_prefixes: Sequence[Path]) -> list[str]:
    """Join the other nodes' copies of each run into `prefix`'s; the run ids rewritten."""
    primary = store.load_runs(prefix)
    others = [store.load_runs(p) for p in other_prefixes]
    changed = []
    for before, after in zip(primary, merge_prefixes(primary, others)):
        if after is not before:
            store.write_run(prefix, after)
            changed.append(after.run_id)
    return changed
