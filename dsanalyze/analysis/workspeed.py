"""The machine's speed during a run, read from the job's own work: the CPU seconds one sample
cost in the dataset's transforms (`work_cpu_s`), against its fastest repeat's (`slowed`).

    for run, pct in workspeed.slowed(sweep_runs, SETTINGS.work_slow_pct):
        ...     # measured again (`sweep._measure_slowed_again`): over its fastest repeat

The host probe (`resources/hostspeed.py`) reads the machine only between runs. On a VM whose
host runs other tenants, a neighbour slows a whole run or a stretch inside it with both probes
normal: over bench/scripts_accuracy.py's bench21-31, a repeat's rate lay up to 28% under its
configuration's others while its probes lay within 10% of the sweep's, and its job's CPU seconds
a sample lay as far over (correlation -0.98 over 216 repeated runs). The work got slower, not
the scheduling.

The transforms' CPU time is that same work, timed in every DataLoader worker by the clock of
the thread that runs it (`instrument/transforms.py`): a core lent to another process, a wait
for storage or for a throttled read does not count. It is not the same in every configuration
of a job, though: on bench32 a pytorch/examples-style script's transforms cost 20-25% more in
its disk runs without a page cache than in its cached runs (the kernel reclaims the cache while
they allocate) and 20% more at 2 CPUs than at 1 (the step's OpenMP threads beside the workers).
So a run is judged only among the runs of its own configuration (`configuration`: its repeats,
`--repeats` or `--shared-core-runs`), at least `MIN_RUNS` of them. Within each configuration of
a timm-style and a Lightning-style sweep (3 repeats each), the rate fell as this reading rose,
every time. The loader's read + decode is left out (a disk run's reads add kernel work to it).

The reference is the configuration's cheapest reading, not its median: a neighbour only ever
makes the work cost more, and a spell that outlasts one run slows most of a configuration's
repeats (bench33: Lightning's 3-worker cached runs at 2 CPUs read 0.616, 0.880 and 0.927 ms a
sample at 344.9, 281.9 and 272.5 samples/s; their median is a slowed run, which judges neither).
Over bench33/34 and /tmp/gauge, every repeat within 5% of its configuration's fastest rate read
within 6.6% of its cheapest (`SETTINGS.work_slow_pct`).
A job without timed transforms (DALI, a custom dataset) has no reading: nothing is judged.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence

from dsanalyze.analysis.transforms import run_table
from dsanalyze.records import LOADER_STAGE, RunResult, pct_over

MIN_RUNS = 3  # readings of a configuration before any of its runs is judged


def work_cpu_s(run: RunResult) -> float | None:
    """CPU seconds one sample cost in the run's transforms, its ranks together; None without
    transforms timed by their thread's CPU clock (runs stored before it, DALI, no Compose)."""
    rows = [r for r in run_table(run) if r["stage"] != LOADER_STAGE]
    if not rows or any(r.get("mean_cpu_s_per_sample") is None for r in rows):
        return None
    total = sum(r["mean_cpu_s_per_sample"] for r in rows)
    return total if total > 0 else None


def reading(run: RunResult) -> float | None:
    """A successful run's `work_cpu_s`; None for a failed one (its work is no reading)."""
    return work_cpu_s(run) if run.ok else None


def cheapest(tries: Sequence[RunResult]) -> RunResult:
    """Of one run's tries, the one whose transforms cost the least CPU a sample: a neighbour
    only ever makes the work dearer. A failed try or one without a reading is never chosen over
    one with a reading; among none with one, the first."""
    def cost(run: RunResult) -> float:
        found = reading(run)
        return math.inf if found is None else found
    return min(tries, key=cost)


def configuration(run: RunResult) -> str:
    """What a run's repeats share: its job, mode and resources (the repeat number aside)."""
    return json.dumps(dataclasses.replace(run.spec, repeat=1).to_dict(), sort_keys=True)


def slowed(runs: Sequence[RunResult], limit_pct: float,
           reference: Sequence[RunResult] = ()) -> list[tuple[RunResult, float]]:
    """The successful runs whose transforms cost more than `limit_pct` % over the cheapest
    reading of their configuration's runs among `runs` and `reference` (other runs of the
    job, never judged; one with the id of one of `runs` is that run's earlier measurement,
    left out), each with that %; slowest first."""
    every = _with_reference(runs, reference)
    read = {id(r): reading(r) for r in every}
    config = {id(r): configuration(r) for r in every}
    seen: dict[str, list[float]] = {}
    for r in every:
        if read[id(r)]:
            seen.setdefault(config[id(r)], []).append(read[id(r)])
    found = []
    for run in runs:
        own, of_config = read[id(run)], seen.get(config[id(run)], [])
        if own is None or len(of_config) < MIN_RUNS:
            continue
        if (pct := pct_over(own, min(of_config))) > limit_pct:
            found.append((run, pct))
    return sorted(found, key=lambda x: -x[1])


def over_the_sweep(runs: Sequence[RunResult], limit_pct: float,
                   reference: Sequence[RunResult] = ()) -> list[tuple[RunResult, float]]:
    """The successful runs without a throttle (storage or link) whose transforms cost more than
    `limit_pct` % over the cheapest reading of such runs among `runs` and `reference`, whatever
    their configuration (at least `MIN_RUNS` readings), each with that %; slowest first.

    A configuration's only run has no repeats to judge it, and configurations' readings differ
    by up to 30-46% (an examples-style script's disk runs and 2-CPU runs against its 1-CPU cached
    run), so this limit is far wider than the repeats'. A throttled run is left out: its rate is
    the throttle's, whatever its work cost."""
    read = {id(r): g for r in _with_reference(runs, reference)
            if _unthrottled(r) and (g := reading(r))}
    if len(read) < MIN_RUNS:
        return []
    low = min(read.values())
    found = [(run, pct) for run in runs if id(run) in read
             and (pct := pct_over(read[id(run)], low)) > limit_pct]
    return sorted(found, key=lambda x: -x[1])


def _with_reference(runs: Sequence[RunResult], reference: Sequence[RunResult]
                    ) -> list[RunResult]:
    """`runs`, then the `reference` runs of other ids (one with the id of one of `runs` is that
    run's earlier measurement: left out)."""
    ids = {r.run_id for r in runs}
    return [*runs, *(r for r in reference if r.run_id not in ids)]


def _unthrottled(run: RunResult) -> bool:
    res = run.spec.resources
    return res.storage_read_bps is None and res.net_bw_bps is None
