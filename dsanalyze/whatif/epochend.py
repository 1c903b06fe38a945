"""The work between epochs, read off a synthetic run: what a script does once an epoch
after its last training step (Lightning's validation pass and checkpoint, a `validate()`
call, a scheduler's epoch hook).

The harness times the training loader's iterations; that work falls inside the epoch's
last one. It is not the step: the loader's workers have nothing left to prepare while it
runs (the epoch's batches are all consumed, and the next epoch's start only after it), so
it adds to every epoch instead of overlapping the workers' prep as the step does. A
Lightning script whose steps took 1 ms and whose validation 0.6 s an epoch had that 0.6 s
spread over its 20 steps as a 30 ms step its one worker could hide behind; fitted so, the
model put its 3 workers at 2 CPUs 29% under what they measured.

`EpochEnd.of(run)`: the median, over the epoch-ending iterations in the run's window (the
run's own last one included where it closes a whole epoch), of what each took beyond the
window's median iteration; nil where that is under `SETTINGS.noise_floor` of an epoch's
time (an iteration at an epoch's end as long as the others). `step_s`: the run's time per
iteration without it, at least the window's fastest iteration.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from dsanalyze.analysis import runrate
from dsanalyze.analysis.window import places, steady_window
from dsanalyze.records import RunResult
from dsanalyze.settings import SETTINGS
from dsanalyze.whatif.fitruns import per_iter
from dsanalyze.whatif.heldout import run_layout


@dataclass(frozen=True)
class EpochEnd:
    """One synthetic run's work between epochs, and its step without it."""

    epoch_end_s: float  # seconds an epoch, once at its end
    ends: int  # epoch-ending iterations it was read off
    step_s: float  # seconds an iteration, the work between epochs taken out

    @classmethod
    def of(cls, run: RunResult) -> EpochEnd:
        rate = runrate.run_rate(run).rate_sps or 1.0
        mean_s = per_iter(run) / rate
        window = steady_window(run)
        if window is None:
            return cls(0.0, 0, mean_s)
        r0, chosen = window.ranks[0], window.chosen[0]
        batches = run_layout(run).batches
        ends = [i for i in chosen if _closes_epoch(r0.epoch, i, batches)]
        if not ends or len(chosen) < 2:
            return cls(0.0, 0, mean_s)
        median_s = statistics.median(r0.iter_s[i] for i in chosen)
        extra_s = max(0.0, statistics.median(r0.iter_s[i] - median_s for i in ends))
        if extra_s < SETTINGS.noise_floor * (batches * median_s + extra_s):
            return cls(0.0, len(ends), mean_s)
        # never faster than the window's fastest iteration: where the passes differ (Lightning's
        # three of 2.0-2.4 s in 238 iterations of 1 ms), the median one times three is more
        # than the window's whole excess and left a step of nil, then a division by it
        # the rate counts each place in the epoch once (`window.per_epoch`): the work between
        # epochs once in the epoch's places
        n = len(set(places(r0.epoch, chosen)))
        return cls(extra_s, len(ends), max(mean_s - extra_s / n,
                                           min(r0.iter_s[i] for i in chosen)))


def _closes_epoch(epoch: tuple[int, ...], i: int, batches: int) -> bool:
    """Iteration i is its epoch's last: the next one starts another epoch, or it is the
    run's last and its epoch is whole."""
    if i + 1 < len(epoch):
        return epoch[i + 1] != epoch[i]
    return epoch.count(epoch[i]) == batches
