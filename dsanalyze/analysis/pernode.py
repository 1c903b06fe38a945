"""Per-node breakdown of a run that spans several nodes: whose loader holds the job.

Under DDP every rank waits for the slowest at each all-reduce, so the job's
rate is the same on every node; what differs is *where* each node waits. A
node whose input pipeline is too slow waits in the loader (`wait_s`); the
others wait inside the step, for it. So the node with the largest share of
time blocked on data is the one whose loader holds the job:

    wait_pct(node) = sum(wait_s) / sum(iter_s) over that node's ranks' measured iterations

The node is named when its share exceeds every other node's by
`SETTINGS.holds_margin_pct` points and by `SETTINGS.holds_ratio` times; otherwise the nodes wait
alike (ranks of one node differ by several points from run to run: 28.7% and
20.8% in the committed 2-rank fixture).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from dsanalyze.analysis.runrate import run_rate
from dsanalyze.plain import PlainJson
from dsanalyze.records import RunResult
from dsanalyze.settings import SETTINGS


@dataclass(frozen=True)
class NodeShare(PlainJson):
    node: int
    ranks: tuple[int, ...]
    wait_pct: float | None
    rate_sps: float | None  # this node's samples over its ranks' measured time
    host: str | None = None


@dataclass(frozen=True)
class NodeRun(PlainJson):
    """A multi-node run's nodes, and the one whose loader holds the job (None: alike)."""

    run_id: str
    mode: str
    nodes: tuple[NodeShare, ...]
    holding_node: int | None


def _node(rank_extra: dict[str, Any], rank: int, nproc: int) -> int:
    return int(rank_extra.get("node", rank // max(1, nproc)))


def node_shares(result: RunResult) -> list[NodeShare]:
    """One entry per node of the run, in node order; empty for a one-node run."""
    nproc = result.spec.job.nproc_per_node
    by_node: dict[int, list] = {}
    for r in result.ranks:
        by_node.setdefault(_node(r.extra, r.rank, nproc), []).append(r)
    if len(by_node) < 2:
        return []
    hosts = {int(k): v.get("host") for k, v in result.io.nodes.items()}
    out = []
    for node in sorted(by_node):
        rate = run_rate(dataclasses.replace(result, ranks=tuple(by_node[node])))
        out.append(NodeShare(node, tuple(r.rank for r in by_node[node]), rate.wait_pct,
                             rate.rate_sps, hosts.get(node)))
    return out


def holding_node(shares: list[NodeShare]) -> int | None:
    """The node whose loader holds the job, or None when the nodes wait alike."""
    known = sorted((s for s in shares if s.wait_pct is not None), key=lambda s: -s.wait_pct)
    if len(known) < 2:
        return None
    top, second = known[0].wait_pct, known[1].wait_pct
    if top - second < SETTINGS.holds_margin_pct or top < SETTINGS.holds_ratio * second:
        return None
    return known[0].node


def breakdown(results: list[RunResult]) -> list[NodeRun]:
    """summary.json's `nodes`: for each multi-node run, its nodes and the one that holds it."""
    out = []
    for result in results:
        shares = node_shares(result) if result.ok else []
        if shares:
            out.append(NodeRun(result.run_id, result.mode.value, tuple(shares),
                               holding_node(shares)))
    return out
