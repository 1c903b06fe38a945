"""The untested assumptions of a prediction in words (`whatif.assumptions.Assumption`).

    assumption_text(Assumption(Assume.BEYOND_CPUS, cpus=4, measured_cpus=2, law=Law.LINEAR))
        -> "4 CPUs: beyond the 2 measured; prep by the linear scaling (contention not fitted)"
"""

from __future__ import annotations

from collections.abc import Callable

from dsanalyze.whatif.assumptions import Assume, Assumption, Law

LAWS = {Law.PROBED: "contention from the machine's parallel decode probe",
        Law.CONTENTION: "contention law", Law.LINEAR: "linear scaling (contention not fitted)",
        Law.BEYOND: "contention law up to the busy cores measured, each core beyond them adding "
                    "the machine's parallel decode probe's contention (none without a probe)"}


def _one_count(a: Assumption) -> str:
    law = LAWS[Law.PROBED] if a.law is Law.PROBED else "contention not fitted"
    return f"{a.cpus} CPUs: only {a.measured_cpus} measured; {law}"


def _ranks(a: Assumption) -> str:
    how = "all-reduce by the ring law" if a.ring else \
        "no all-reduce time added, each rank's loader as measured"
    return f"{a.ranks} ranks: none measured; {how}"


def _workers(n: int | None) -> str:
    return f"{n} worker" + "s" * (n != 1)


WORDS: dict[Assume, Callable[[Assumption], str]] = {
    Assume.BEYOND_CPUS: lambda a: f"{a.cpus} CPUs: beyond the {a.measured_cpus} measured; prep "
                                  f"by the {LAWS[a.law or Law.LINEAR]}",
    Assume.ONE_CPU_COUNT: _one_count,
    Assume.MACHINE_CPUS: lambda a: f"{a.cpus} CPUs: more than this machine's {a.machine_cpus}",
    Assume.NODES: lambda a: f"{a.nodes} nodes: none measured; each node as this one (its CPUs, "
                            "cache and storage), the all-reduce by the ring law over every "
                            "node's ranks (the network between nodes not measured)",
    Assume.RANKS: _ranks,
    Assume.FASTER_STEP: lambda a: f"a step {a.speedup:g}x faster: the compute part divided, "
                                  "taking no CPU",
    Assume.DALI: lambda a: "DALI: its threads simulated as DataLoader workers (one batch each, "
                           "in order); a shuffling reader's buffer as the order the page cache "
                           "sees, not as read-ahead the training draws down",
    Assume.WORKERS: lambda a: f"{_workers(a.workers)} per rank: {a.measured_workers} measured; a "
                              "worker's CPU per sample taken as independent of the count",
    Assume.SHARING: lambda a: f"{_workers(a.workers)} beside the step on the CPU at {a.cpus} "
                              f"CPUs: how its threads share the cores taken from the cached "
                              f"run with {a.measured_workers}",
    Assume.THROTTLE: lambda a: "a throttle taken at face value: no throttled run held by its "
                               "throttle was measured",
    Assume.NO_DEVICE: lambda a: "storage device not measured: unthrottled reads taken as never "
                                "limiting",
    Assume.ABOVE_DEVICE: lambda a: "a throttle above the measured device: the device's "
                                   "bandwidth used",
    Assume.REREADS: lambda a: f"the job reads {a.amplification:.2f}x the bytes its loader "
                              "misses (measured without a page cache): its other reads taken "
                              "to hit in the share of the dataset this cache holds",
    Assume.NET_STREAMS: lambda a: "request streams slow each other only through the link",
    Assume.NET_ENDPOINT: lambda a: "the endpoint's own costs the same at every bandwidth and "
                                   "latency",
    Assume.NET_IN_SAMPLE: lambda a: f"the network law's error from {a.runs} remote runs, in "
                                    "sample",
    Assume.SAID: lambda a: a.said,
}


def assumption_text(a: Assumption) -> str:
    """One untested assumption in words."""
    return WORDS[a.kind](a)
