"""Per-transform step tables: merge the ranks' tables, sum a sample's cost.

A step table is a list of rows `{stage, index, name, calls, total_s,
mean_s_per_sample}` in pipeline order (the image loader first), written by
`instrument/transforms.py` in each rank from its DataLoader workers' totals
(`records.step_table`).
Pure functions over stored values: no torch.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple, Self

from dsanalyze.records import step_table


class StepTime(NamedTuple):
    """One row of a step table, typed: a preprocessing step and the worker time it cost."""

    stage: str  # loader (read+decode), transform, target_transform, ...
    index: int  # its place in its stage's pipeline
    name: str
    calls: int
    total_s: float  # worker seconds, summed over the calls
    mean_s_per_sample: float

    @classmethod
    def of(cls, row: dict[str, Any]) -> Self:
        return cls(**{k: row[k] for k in cls._fields})


def merge_tables(tables: Iterable[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One table from several ranks' tables: calls and seconds summed per step; CPU seconds
    too where every row has them (runs stored before they were timed have not)."""
    totals: dict[str, list[int]] = {}
    timed_cpu: dict[str, bool] = {}
    for table in tables:
        for row in table or ():
            key = f"{row['stage']}\t{row['index']}\t{row['name']}"
            t = totals.setdefault(key, [0, 0, 0])
            t[0] += int(row["calls"])
            t[1] += round(float(row["total_s"]) * 1e9)
            cpu_s = row.get("cpu_s")
            timed_cpu[key] = timed_cpu.get(key, True) and cpu_s is not None
            t[2] += round(float(cpu_s or 0.0) * 1e9)
    return step_table({k: t if timed_cpu[k] else t[:2] for k, t in totals.items()})


def run_table(result: Any) -> list[dict[str, Any]]:
    """The step table of a stored run (a `RunResult`): its ranks' tables merged."""
    return merge_tables(r.extra.get("transforms") or [] for r in result.ranks)


def step_times(result: Any) -> list[StepTime]:
    """`run_table` as typed rows, in pipeline order."""
    return [StepTime.of(row) for row in run_table(result)]


def sum_s_per_sample(table: list[dict[str, Any]]) -> float:
    """Worker seconds one sample costs in the timed steps: the sum of the means."""
    return sum(r["mean_s_per_sample"] for r in table)
