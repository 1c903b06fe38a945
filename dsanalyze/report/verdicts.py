"""The table's verdicts in words: the steady state's (`analysis.verdict.Verdict`) and the cold
first epoch's (`analysis.coldepoch.ColdEpoch`).

    verdict_text(v)      -> "likely highly prep-bound: 41% ±3 of time is prep stall"
    cold_text(cold)      -> "highly fetch-bound, 4.5 s of 5.5 s waiting on storage"

Every number is the value's; the classification is the analysis's.
"""

from __future__ import annotations

from dsanalyze.analysis.coldepoch import ColdEpoch
from dsanalyze.analysis.verdict import Bound, StallShare, Verdict

REPEAT_HINT = "repeat the runs (--repeats, --target-ci)"
WAITING_ON = {Bound.FETCH: "storage", Bound.PREP: "pre-processing"}


def _share(s: StallShare) -> str:
    return f"{s.pct:.0f}% ±{s.half_width_pct:.0f}"


def verdict_text(v: Verdict) -> str:
    """A configuration's verdict in one line: `likely fetch-bound: 12% ±2 of time is fetch
    stall, 10% ±2 prep stall`, `compute-bound: stalls are 4% of time`, `within noise: ...`."""
    if v.bound in (Bound.PREP, Bound.FETCH) and not v.stalls:  # a summary stored before 2
        return f"likely {v.bound.value}-bound"
    if v.bound in (Bound.PREP, Bound.FETCH):
        first, *rest = v.stalls
        level = "highly " if v.highly else ""
        text = f"likely {level}{first.kind}-bound: {_share(first)} of time is {first.kind} stall"
        return text + "".join(f", {_share(s)} {s.kind} stall" for s in rest)
    if v.bound is Bound.COMPUTE and v.stalled_pct is None:
        return "compute-bound"
    if v.bound is Bound.COMPUTE:
        noise = " (within noise)" if v.within_noise else ""
        return f"compute-bound: stalls are {v.stalled_pct:.0f}% of time{noise}"
    if v.bound is Bound.NOISE and not v.stalls:
        return f"within noise; {REPEAT_HINT}"
    if v.bound is Bound.NOISE:
        (s,) = v.stalls
        return f"within noise: {s.kind} stall {_share(s)} cannot be told from 0; {REPEAT_HINT}"
    if v.suspect is not None:
        return f"unknown: the {v.suspect} stall is suspect (see the note)"
    return "unknown: no synthetic and cached runs to compare"


def cold_text(cold: ColdEpoch) -> str:
    """The cold first epoch's verdict: `fetch-bound, 4.5 s of 5.5 s waiting on storage`."""
    prep_s, fetch_s, epoch_s = cold.prep_stall_s or 0.0, cold.fetch_stall_s, cold.epoch_s
    if cold.bound is Bound.COMPUTE:
        return f"compute-bound, {prep_s + fetch_s:.1f} s of {epoch_s:.1f} s stalled"
    if cold.bound not in WAITING_ON:
        return "not classified (a summary stored before the cold epoch's bound was)"
    stall_s = fetch_s if cold.bound is Bound.FETCH else prep_s
    level = "highly " if cold.highly else ""
    return (f"{level}{cold.bound.value}-bound, {stall_s:.1f} s of {epoch_s:.1f} s waiting on "
            f"{WAITING_ON[cold.bound]}")
