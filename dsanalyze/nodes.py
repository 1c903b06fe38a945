"""Several nodes: the harnesses of one job, kept in step through torch's TCPStore.

One harness runs on each node (`--nnodes N --node_rank R --master_addr A
--master_port P`, or the same taken from a scheduler's environment, see
`scheduler.from_environment`). Node 0's harness hosts a `torch.distributed.TCPStore` on
port P + 1 (torchrun's own rendezvous of each run uses P); the others connect
to it. Through that store, for the i-th run of the sweep:

1. every node says whether its copy of the run is already complete; the run
   is skipped only where every node has it (`agree_skip`);
2. every node prepares the run (cgroup, warm or evict) and waits until all
   have (`start_gate`), so that torchrun's agents meet at once;
3. after the run, nodes 1..N-1 publish their `RunResult`; node 0 merges every
   rank's record into one result for the job (`nodemerge.merge_results`).

Each harness bumps a heartbeat counter every `HEARTBEAT_S`; a node whose
counter has not moved for `lost_after_s` (by the watcher's own monotonic
clock: no cross-node clock is involved) is lost, and the others stop the run
in progress and name it. Clock offsets against node 0 are measured once at
join (the NTP estimate over store round trips, the one with the shortest
round trip kept) and applied to the merged ranks' `start_unix_s`.

torch is imported only here, and only when a sweep spans several nodes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from dsanalyze.config import Job, RunSpec
from dsanalyze.errors import ConfigError, NodeLost
from dsanalyze.nodemerge import merge_results
from dsanalyze.records import RunResult, Status

HEARTBEAT_S = 0.5
LOST_AFTER_S = 10.0
CLOCK_PINGS = 8
POLL_S = 0.1
STORE_PORT_OFFSET = 1  # the harnesses' store: master_port + 1; torchrun uses master_port
FAIL_LINGER_S = 15.0  # a node 0 that fails before the others read it keeps its store this long


def plan_key(specs: Sequence[RunSpec]) -> str:
    """What every node must agree on: the run ids in order and the job, less the node's rank."""
    job = specs[0].job.to_dict() if specs else {}
    job.pop("node_rank", None)
    job.pop("data_dir", None)  # each node reads its own copy of the data
    job.pop("script", None)  # ... and may keep the script at its own path
    return json.dumps({"runs": [s.run_id for s in specs], "job": job}, sort_keys=True)


@dataclass
class NodeGroup:
    """This node's view of the job's harnesses (see the module docstring)."""

    job: Job
    store: Any
    beat_store: Any
    lost_after_s: float = LOST_AFTER_S
    clock_offset_s: float = 0.0  # add to this node's unix time to get node 0's
    clock_rtt_s: float = 0.0
    seq: int | None = None  # the run of the sweep in progress
    _stop: threading.Event = dataclasses.field(default_factory=threading.Event)
    _beats: dict[int, tuple[int, float]] = dataclasses.field(default_factory=dict)

    @property
    def node(self) -> int:
        return self.job.node_rank

    @property
    def others(self) -> list[int]:
        return [n for n in range(self.job.nnodes) if n != self.node]

    @classmethod
    def join(cls, job: Job, specs: Sequence[RunSpec], timeout_s: float = 300.0,
             lost_after_s: float = LOST_AFTER_S) -> NodeGroup:
        """Connect to (node 0: host) the store, check the plans match, measure the clock."""
        from torch.distributed import TCPStore

        host = job.master_addr or "127.0.0.1"
        port = (job.master_port or 29500) + STORE_PORT_OFFSET
        wait = timedelta(seconds=timeout_s)
        try:
            store = TCPStore(host, port, job.nnodes, job.node_rank == 0, wait,
                             wait_for_workers=False)
            beat = TCPStore(host, port, job.nnodes, False, timedelta(seconds=lost_after_s))
        except (RuntimeError, OSError) as e:
            if job.node_rank == 0:
                raise NodeLost(f"node 0 cannot host the harnesses' store at {host}:{port} "
                               f"({str(e).splitlines()[0]}): pick another --master_port"
                               ) from None
            raise NodeLost(f"node {job.node_rank} cannot reach the harnesses' store at "
                           f"{host}:{port} within {timeout_s:.0f} s: node 0's harness hosts "
                           "it; is it running, or did it stop with an error (see its output)? "
                           "Every node needs the same --master_addr/--master_port") from None
        group = cls(job, store, beat, lost_after_s)
        reason = group.abort_reason()  # a node that failed before this one came
        if reason is not None:
            group.close()
            raise NodeLost(f"{reason}; this node stops too") from None
        group._start_heartbeat()
        group._check_plan(plan_key(specs), timeout_s)
        try:
            group._measure_clock(timeout_s)
        except (RuntimeError, OSError) as e:
            group.close()
            raise NodeLost(f"node {job.node_rank}: timing the clock against node 0 failed "
                           f"({str(e).splitlines()[0]}): is every node's harness running?"
                           ) from None
        return group

    # -- liveness -------------------------------------------------------------
    def _start_heartbeat(self) -> None:
        def beat() -> None:
            while not self._stop.wait(HEARTBEAT_S):
                try:
                    self.beat_store.add(f"beat/{self.node}", 1)
                except (RuntimeError, OSError):
                    return  # node 0 is gone: the watchers say so
        self.beat_store.add(f"beat/{self.node}", 1)
        threading.Thread(target=beat, name="dsanalyze-heartbeat", daemon=True).start()

    def lost_node(self) -> int | None:
        """A node whose heartbeat stopped, or None. Node 0 unreachable counts as lost."""
        now = time.monotonic()
        for n in self.others:
            try:
                count = int(self.beat_store.add(f"beat/{n}", 0))
            except (RuntimeError, OSError):
                return 0
            last = self._beats.get(n)
            if last is None or count != last[0]:
                self._beats[n] = (count, now)
            elif now - last[1] > self.lost_after_s:
                return n
        return None

    def abort_reason(self) -> str | None:
        """Why the run in progress must stop, or None: for `LaunchContext.should_abort`."""
        for n in self.others:  # a node that stopped with an error before or between runs
            try:
                if self.store.check([f"failed/{n}"]):
                    self.store.set(f"seen/{self.node}", "1")
                    return f"node {n} stopped: {self.store.get(f'failed/{n}').decode()}"
            except (RuntimeError, OSError):
                return "node 0 stopped responding: its harness was killed or lost its network"
        n = self.lost_node()
        if n is not None:
            return (f"node {n} stopped responding (no heartbeat for {self.lost_after_s:.0f} s): "
                    "its harness was killed or lost its network")
        if self.seq is None:
            return None
        for n in self.others:
            key = f"run/{self.seq}/failed/{n}"
            try:
                if self.store.check([key]):
                    return f"node {n}'s part of the run failed: {self.store.get(key).decode()}"
            except (RuntimeError, OSError):
                return "node 0 stopped responding: its harness was killed or lost its network"
        return None

    def _wait(self, keys: list[str], timeout_s: float, what: str) -> None:
        """Wait for keys, polling, so that a lost node ends the wait at once."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if self.store.check(keys):
                    return
            except (RuntimeError, OSError):
                raise NodeLost(f"node 0 stopped responding while {what}: its harness was "
                               "killed or lost its network; restart every node with --resume") from None
            reason = self.abort_reason()
            if reason is not None:
                raise NodeLost(f"{reason}, while {what}; restart every node with --resume")
            if time.monotonic() > deadline:
                raise NodeLost(f"timed out after {timeout_s:.0f} s {what}: "
                               "start every node's harness, with the same options")
            time.sleep(POLL_S)

    def fail(self, reason: str) -> None:
        """This node stops with `reason` before the runs are done: every other node stops at
        once with it (`abort_reason`). Node 0, which hosts the store, waits until each has
        read it (at most FAIL_LINGER_S)."""
        try:
            self.store.set(f"failed/{self.node}", reason)
        except (RuntimeError, OSError):
            return
        _linger_until_seen(self.store, self.node, self.others)

    def meet(self, data_root: str, timeout_s: float) -> None:
        """Every node says which host it runs on and which data it reads. Two nodes on one
        host over one dataset are refused on every node at once: they would share one page
        cache (one node's disk run evicts what another's cached run warmed), and only one
        harness may measure a dataset (`resources/datalock.py`)."""
        here = {"host": socket.gethostname(), "data": os.path.realpath(data_root)}
        self.store.set(f"where/{self.node}", json.dumps(here))
        keys = [f"where/{n}" for n in range(self.job.nnodes)]
        self._wait(keys, timeout_s, "waiting for every node to say where it runs")
        seen: dict[tuple[str, str], int] = {}
        for n in range(self.job.nnodes):
            w = json.loads(self.store.get(keys[n]))
            first = seen.setdefault((w["host"], w["data"]), n)
            if first != n:
                raise ConfigError(
                    f"nodes {first} and {n} run on one host ({w['host']}) over the same data "
                    f"({w['data']}): they would share one page cache (one node's disk run "
                    "evicts what another's cached run warmed) and one harness measures a "
                    "dataset at a time: run one node per host, or give each node its own copy "
                    "of the data (--data)")

    # -- join -----------------------------------------------------------------
    def _check_plan(self, plan: str, timeout_s: float) -> None:
        self.store.set(f"plan/{self.node}", plan)
        if self.node != 0:
            return
        keys = [f"plan/{n}" for n in self.others]
        self._wait(keys, timeout_s, "waiting for every node to join")
        for n in self.others:
            if self.store.get(f"plan/{n}").decode() != plan:
                self.store.set("plan/verdict", f"node {n} was started with a different sweep")
                raise ConfigError(f"node {n} was started with a different sweep or job than "
                                  "node 0: give every node the same options")
        self.store.set("plan/verdict", "ok")

    def _measure_clock(self, timeout_s: float) -> None:
        """NTP-style offset of this node's wall clock against node 0's."""
        # The store's blocking wait, not `_wait`'s polling: a poll's delay on
        # one leg of the round trip would bias the offset by up to POLL_S.
        wait = timedelta(seconds=timeout_s)
        if self.node == 0:
            for n in self.others:
                for i in range(CLOCK_PINGS):
                    self.store.wait([f"clock/{n}/{i}/ping"], wait)
                    self.store.set(f"clock/{n}/{i}/pong", repr(time.time()))
            return
        self._wait(["plan/verdict"], timeout_s, "waiting for node 0 to check the plans")
        verdict = self.store.get("plan/verdict").decode()
        if verdict != "ok":
            raise ConfigError(f"{verdict} than node {self.node}: give every node the same options")
        best: tuple[float, float] | None = None
        for i in range(CLOCK_PINGS):
            t1 = time.time()
            self.store.set(f"clock/{self.node}/{i}/ping", "1")
            self.store.wait([f"clock/{self.node}/{i}/pong"], wait)
            t0 = float(self.store.get(f"clock/{self.node}/{i}/pong"))
            t2 = time.time()
            if best is None or t2 - t1 < best[1]:
                best = (t0 - (t1 + t2) / 2, t2 - t1)
        self.clock_offset_s, self.clock_rtt_s = best or (0.0, 0.0)

    # -- per run --------------------------------------------------------------
    def agree_skip(self, seq: int, complete_here: bool, timeout_s: float) -> bool:
        """True when every node already holds a complete copy of run `seq`."""
        self.store.set(f"run/{seq}/complete/{self.node}", "1" if complete_here else "0")
        keys = [f"run/{seq}/complete/{n}" for n in range(self.job.nnodes)]
        self._wait(keys, timeout_s, f"agreeing on run {seq + 1} of the sweep")
        return all(self.store.get(k).decode() == "1" for k in keys)

    def start_gate(self, seq: int, timeout_s: float) -> None:
        """Return once every node has prepared run `seq` (cgroup, cache state)."""
        self.seq = seq
        self.store.set(f"run/{seq}/ready/{self.node}", "1")
        keys = [f"run/{seq}/ready/{n}" for n in range(self.job.nnodes)]
        self._wait(keys, timeout_s, f"waiting for every node to prepare run {seq + 1}")

    def exchange(self, seq: int, result: RunResult, timeout_s: float) -> RunResult:
        """Nodes > 0 publish their result; node 0 returns the merged result of the job."""
        self.seq = None
        if not result.ok:
            self.store.set(f"run/{seq}/failed/{self.node}", str(result.error))
        doc = result.to_dict()
        doc["environment"]["clock_offset_s"] = self.clock_offset_s
        doc["environment"]["clock_rtt_s"] = self.clock_rtt_s
        if self.node != 0:
            self.store.set(f"run/{seq}/result/{self.node}", json.dumps(doc))
            return result
        others: dict[int, RunResult] = {}
        for n in self.others:
            key = f"run/{seq}/result/{n}"
            try:
                self._wait([key], timeout_s, f"gathering node {n}'s result")
            except NodeLost as e:
                # Name the lost node first: this node's own failure (a collective
                # whose peer vanished) is the consequence, not the cause.
                here = f"; on node 0: {result.error}" if result.error else ""
                return dataclasses.replace(result, status=Status.FAILED, error=f"{e}{here}")
            others[n] = RunResult.from_dict(json.loads(self.store.get(key)))
        return merge_results(RunResult.from_dict(doc), others)

    def close(self) -> None:
        self._stop.set()


def _linger_until_seen(store: Any, node: int, others: Sequence[int]) -> None:
    """Node 0 keeps its store up until every other node has read its failure."""
    if node != 0:
        return
    deadline = time.monotonic() + FAIL_LINGER_S
    while time.monotonic() < deadline:
        try:
            if all(store.check([f"seen/{n}"]) for n in others):
                return
        except (RuntimeError, OSError):
            return
        time.sleep(POLL_S)


def announce_failure(job: Job, reason: str, connect_s: float = 5.0) -> None:
    """A node that fails before joining (its data missing, --cpus beyond its machine) tells
    the others, so that they stop at once with its reason rather than wait for it: node 0
    hosts the store for them to read it; another node leaves it in node 0's store, if
    that is up within `connect_s`. Best effort: nothing is raised."""
    from torch.distributed import TCPStore

    host = job.master_addr or "127.0.0.1"
    port = (job.master_port or 29500) + STORE_PORT_OFFSET
    wait = timedelta(seconds=FAIL_LINGER_S if job.node_rank == 0 else connect_s)
    try:
        store = TCPStore(host, port, job.nnodes, job.node_rank == 0, wait,
                         wait_for_workers=False)
        store.set(f"failed/{job.node_rank}", reason)
    except (RuntimeError, OSError):
        return
    _linger_until_seen(store, job.node_rank, [n for n in range(job.nnodes) if n != job.node_rank])
