"""An assumption a prediction rests on that no fit run tested, typed: its kind and the
numbers its words quote (`report/assumptions.py` words it). `intervals.untested` lists a
configuration's; each widens the prediction's interval (`intervals.rel_sigma_for`).

Stored in `whatif.json` and `validation.json` as its fields; a document written before the
assumptions were typed holds sentences, read back as `Assumption(Assume.SAID, said=...)`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Self

from dsanalyze.plain import PlainJson


class Assume(enum.Enum):
    BEYOND_CPUS = "beyond_cpus"  # `cpus` above the `measured_cpus` most measured; prep by `law`
    ONE_CPU_COUNT = "one_cpu_count"  # `cpus` unmeasured, one count (`measured_cpus`) was; `law`
    MACHINE_CPUS = "machine_cpus"  # `cpus` more than this machine's `machine_cpus`
    NODES = "nodes"  # `nodes` nodes, none measured: each as this one, the ring all-reduce
    RANKS = "ranks"  # `ranks` ranks, none measured; `ring`: the all-reduce by the ring law
    FASTER_STEP = "faster_step"  # a step `speedup` x faster: the compute part divided
    DALI = "dali"  # DALI's threads simulated as DataLoader workers
    WORKERS = "workers"  # `workers` per rank, `measured_workers` measured
    # a step on the CPU beside `workers` workers at `cpus` CPUs: how its threads share the
    # cores taken from the cached run(s) with `measured_workers` (`laws.stretch_from`)
    SHARING = "sharing"
    THROTTLE = "throttle"  # a throttle at face value: no run held by its throttle measured
    NO_DEVICE = "no_device"  # the storage device not measured: unthrottled reads never limit
    ABOVE_DEVICE = "above_device"  # a throttle above the measured device's bandwidth
    REREADS = "rereads"  # the job's `amplification` x reads hit in the share a cache holds
    NET_STREAMS = "net_streams"  # request streams slow each other only through the link
    NET_ENDPOINT = "net_endpoint"  # the endpoint's own costs the same at every link
    NET_IN_SAMPLE = "net_in_sample"  # the network law's error from `runs` remote runs
    SAID = "said"  # a document written before the assumptions were typed: `said`


class Law(enum.Enum):
    """How prep is taken to scale with CPUs beyond those measured."""

    PROBED = "probed"  # contention from the machine's parallel decode probe
    CONTENTION = "contention"  # the fitted contention law
    LINEAR = "linear"  # linear scaling: contention not fitted
    # the fitted law up to the busy cores it was fitted on, each core beyond adding the
    # machine's parallel decode probe's contention (`laws.contention_factor`)
    BEYOND = "beyond"


@dataclass(frozen=True)
class Assumption(PlainJson):
    """One untested assumption (see `Assume` for the fields each kind sets)."""

    kind: Assume
    cpus: int | None = None
    measured_cpus: int | None = None
    law: Law | None = None
    machine_cpus: int | None = None
    nodes: int | None = None
    ranks: int | None = None
    ring: bool = False
    speedup: float | None = None
    workers: int | None = None
    measured_workers: int | None = None
    runs: int | None = None
    amplification: float | None = None
    said: str = ""

    @classmethod
    def from_dict(cls, d: dict[str, Any] | str) -> Self:
        if isinstance(d, str):  # written before the assumptions were typed
            return cls(Assume.SAID, said=d)
        return super().from_dict(d)


NETWORK = (Assumption(Assume.NET_STREAMS), Assumption(Assume.NET_ENDPOINT))
