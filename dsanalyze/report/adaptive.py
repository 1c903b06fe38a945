"""The adaptive sweep's decisions in words (`whatif.nextrun.Decision`), and its answer.

    decision_text(d) -> "pick cpus2-cachenone-bwnone (2 CPUs, page cache unlimited, storage
                         the measured device, 2 DataLoader workers per rank; under 5% stalls):
                         predicted 180.0 samples/s ±12.0%; wider than ±5%: measuring it"
"""

from __future__ import annotations

from typing import Any

from dsanalyze.config import format_bytes
from dsanalyze.whatif.nextrun import Decision, Setup, Verdict


def setup_text(s: Setup) -> str:
    """`2 CPUs, page cache 50M, storage 8M/s, 2 DataLoader workers per rank`."""
    cache = "unlimited" if s.cache_bytes is None else format_bytes(s.cache_bytes)
    bw = "the measured device" if s.storage_read_bps is None else \
        f"{format_bytes(s.storage_read_bps)}/s"
    word = "DALI threads" if s.loader == "dali" else "DataLoader workers"
    return (f"{s.cpus} CPU{'s' if s.cpus > 1 else ''}, page cache {cache}, storage {bw}, "
            f"{s.workers} {word[:-1] if s.workers == 1 else word} per rank")


def pick_text(d: Decision) -> str:
    """The pick, with its rate and interval."""
    how = "measured" if d.pick_measured else "predicted"
    limit = f"under {d.max_stall_pct:g}% stalls" if d.under_limit else "the least stalled"
    setup = f"{setup_text(d.pick)}; " if d.pick is not None else ""
    return (f"pick {d.pick_key} ({setup}{limit}): {how} {d.pick_rate_sps:.1f} samples/s "
            f"±{d.pick_half_width_pct:.1f}%")


def why_text(d: Decision) -> str:
    """Why the verdict (`Decision`'s docstring)."""
    target = f"±{d.target_pct:g}%"
    if d.verdict is Verdict.BUDGET and d.budget is not None:
        b = d.budget
        return (f"budget: {b.spent_s:.0f} s of {b.budget_s:.0f} s spent, the next run "
                f"({b.skipped_key}) would take about {b.expected_s:.0f} s more: stopping")
    if d.verdict is Verdict.MEASURE and d.next_key == d.pick_key:
        return (f"wider than {target}: measuring it" if d.pick_half_width_pct > d.target_pct
                else "a prediction only: measuring it (the answer rests on a measurement)")
    if d.verdict is Verdict.MEASURE:
        aim = "be cheaper under the limit" if d.under_limit else "do better"
        return f"{d.rival_key} has a {d.rival_chance:.0%} chance to {aim}: measuring it"
    if d.verdict is Verdict.REPEAT:
        return (f"wider than {target} after {d.pick_runs} run(s): measuring it again "
                f"(run {d.pick_runs + 1})")
    left = (f"no configuration left to measure has a {d.chance_min:.0%} chance to change it"
            + (f" (likeliest {d.rival_key}: {d.rival_chance:.1%})" if d.rival_key else ""))
    if d.verdict is Verdict.EQUIVALENT:
        return (f"equivalent to {', '.join(d.equivalent)}: each could do better only within "
                f"the pick's own noise (±{d.margin_pct:.1f}%; by more than that: "
                f"{d.rival_chance:.1%} at most), which more runs of them cannot tell apart")
    if d.verdict is Verdict.CONFIDENT:
        return f"within {target} and {left}"
    return (f"wider than {target} "
            + (f"after {d.pick_runs} runs of it" if d.pick_measured else "(not measurable)")
            + f", but {left}")


def decision_text(d: Decision) -> str:
    """One decision in one line: the pick, then why."""
    return f"{pick_text(d)}; {why_text(d)}"


def adaptive_text(a: Any) -> str:
    """The adaptive sweep's answer (`adaptive.AdaptiveAnswer`): its last decision, and what
    it cost against the grid."""
    d = a.final
    return (f"Adaptive: {d.verdict.value} after {len(a.decisions)} decision(s): "
            f"{decision_text(d)}.\n"
            f"  {a.runs} run(s), {a.seconds / 60:.1f} min of runs; the full grid: {a.grid_runs} "
            f"run(s), about {a.grid_seconds / 60:.1f} min (at the measured runs' durations)")
