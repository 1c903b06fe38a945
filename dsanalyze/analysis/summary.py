"""The summary of a prefix's runs, typed: the stall breakdown of every configuration and what
the runs measured, assembled from the measuring modules (`stalls`, `coldepoch`, `measured`,
`pernode`). Stored as `summary.json` (`Summary.to_dict`, with `schema`) and read back into the
same types (`Summary.from_dict`).

Its own module so that `stalls` imports none of the modules that build on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsanalyze.analysis import measured, pernode
from dsanalyze.analysis.coldepoch import ColdEpoch, cold_epoch, cold_only
from dsanalyze.analysis.measured import MeasuredWindow
from dsanalyze.analysis.notes import said
from dsanalyze.analysis.pernode import NodeRun
from dsanalyze.analysis.runrate import RunRate, run_rate
from dsanalyze.analysis.stalls import Breakdown, breakdowns
from dsanalyze.analysis.verdict import Bound
from dsanalyze.config import Job
from dsanalyze.plain import PlainJson
from dsanalyze.records import DatasetRecord, RunResult

# 4: a rate's interval method typed (`uncertainty.RateMethod`; before, a sentence it parses);
# 3: a configuration's notes typed (`notes.Note`, stored as `notes`), worded by the report;
# 2: the verdicts typed (`verdict.Verdict`, `ColdEpoch.bound`), worded by the report;
# 1: typed (this module), the verdicts in words; documents without `schema` are the untyped
# dict of before, with the keys of 1. Before 2, a verdict reads back as its bound alone;
# before 3, the notes are the sentences stored as `warnings` (read back as `notes.Said`).
SCHEMA_VERSION = 4


@dataclass(frozen=True)
class ConfigSummary(Breakdown):
    """A configuration's steady-state breakdown and its cold first epoch."""

    cold_epoch: ColdEpoch | None = None
    cold_only: bool = False  # its disk figures are the cold first epoch (one epoch measured)

    @classmethod
    def of(cls, b: Breakdown) -> ConfigSummary:
        return cls(**{name: getattr(b, name) for name in b.__dataclass_fields__},
                   cold_epoch=cold_epoch(b), cold_only=cold_only(b))


@dataclass(frozen=True)
class FailedRun(PlainJson):
    run_id: str
    status: str
    error: str | None = None


@dataclass(frozen=True)
class Summary(PlainJson):
    """Job, dataset, one entry per configuration, the runs' rates, what was measured."""

    job: Job | None
    dataset: DatasetRecord | None
    configs: tuple[ConfigSummary, ...] = ()
    measured: MeasuredWindow = MeasuredWindow("unknown (no completed run)")
    runs: tuple[RunRate, ...] = ()
    failed_runs: tuple[FailedRun, ...] = ()
    nodes: tuple[NodeRun, ...] = ()
    unreadable_runs: tuple[str, ...] = ()  # "PATH (why)" of run files left out
    schema: int = SCHEMA_VERSION

    @property
    def samples_per_epoch(self) -> int | None:
        """The epoch the table's figures are per (the first configuration's)."""
        return self.configs[0].samples_per_epoch if self.configs else None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Summary:
        schema = d.get("schema", 0)
        configs = d.get("configs", [])
        if schema < 2:  # the verdict was a sentence: keep what it classified
            configs = [{**c, "verdict": {"bound": c.get("bound", Bound.UNKNOWN.value)}}
                       for c in configs]
        if schema < 3:  # the notes were sentences (a copy read back and stored again has both)
            configs = [c if "notes" in c else {**c, "notes": said(c.get("warnings", []))}
                       for c in configs]
        return super().from_dict({**d, "configs": configs, "schema": schema})


def summarize(results: list[RunResult]) -> Summary:
    """The summary of the runs: each configuration (its cold first epoch included), each
    run's rate, what the runs measured against what was asked."""
    ok = [r for r in results if r.ok]
    first = (ok or results)[0] if results else None
    return Summary(
        job=first.spec.job if first else None,
        dataset=first.dataset if first else None,
        configs=tuple(ConfigSummary.of(b) for b in breakdowns(results)),
        measured=measured.window_summary(results),
        runs=tuple(run_rate(r, interval=True) for r in results),
        failed_runs=tuple(FailedRun(r.run_id, r.status, r.error) for r in results if not r.ok),
        nodes=tuple(pernode.breakdown(results)),
    )
