"""The `summary.json` document: the stall breakdown of every configuration and what the runs
measured, assembled from the measuring modules (`stalls`, `coldepoch`, `measured`, `pernode`).

Its own module so that `stalls` imports none of the modules that build on it.
"""

from __future__ import annotations

from typing import Any

from dsanalyze.analysis import coldepoch, measured, pernode
from dsanalyze.analysis.stalls import breakdowns, run_rate
from dsanalyze.records import RunResult


def summarize(results: list[RunResult]) -> dict[str, Any]:
    """The `summary.json` document: job, dataset, one entry per configuration (its cold
    first epoch included), what the runs measured against what was asked."""
    ok = [r for r in results if r.ok]
    first = (ok or results)[0] if results else None
    return {
        "job": first.spec.job.to_dict() if first else None,
        "dataset": first.dataset.to_dict() if first else None,
        "configs": [coldepoch.with_cold_epoch(b.to_dict()) for b in breakdowns(results)],
        "measured": measured.window_summary(results),
        "runs": [run_rate(r, interval=True).to_dict() for r in results],
        "failed_runs": [{"run_id": r.run_id, "status": r.status, "error": r.error}
                        for r in results if not r.ok],
        "nodes": pernode.breakdown(results),
    }
