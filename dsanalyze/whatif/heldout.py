"""What a prediction may see of a stored run: `HeldOut`, its own type.

A prediction of a run (a fit run's residual, a held-out run's check) reads
the run's configuration and the shape of its iterations, never what it
measured. `HeldOut` holds exactly that: the spec, the iteration layout (how
many epochs, batches and iterations, not how long they took), the CPU count
resolved at sweep time (`--cpus all` is the machine's count when the run
ran), and the job as the script ran it (`analysis/jobrun.py`: its workers,
batch size, device). `rates.predict_run` accepts only this type, so that a
leak of a measured timing into a prediction is a type error, not a test to
remember.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from dsanalyze.analysis.jobrun import JobAsRun, job_as_run, run_cpus
from dsanalyze.config import Mode, RunSpec
from dsanalyze.records import RunResult
from dsanalyze.whatif import pipeline


def run_layout(result: RunResult) -> pipeline.Layout:
    """Epochs, batches per epoch, iterations and warm-up rank 0 ran (no timings)."""
    r0 = result.ranks[0]
    epochs = max(r0.epoch) - min(r0.epoch) + 1
    return pipeline.Layout(epochs, _batches_per_epoch(result), len(r0.iter_s), r0.warmup)


def _batches_per_epoch(result: RunResult) -> int:
    """The loader's `len()` as the rank recorded it; for a loader without one (an iterable
    dataset), the iterations of the first epoch when a second one started, else the dataset's
    files over a step's samples, at least the iterations recorded (never the epoch count)."""
    r0 = result.ranks[0]
    if r0.extra.get("batches_per_epoch"):
        return int(r0.extra["batches_per_epoch"])
    if len(set(r0.epoch)) > 1:
        return r0.epoch.count(r0.epoch[0])
    per_step = max(1, int(statistics.median(r0.samples or [1]))) * len(result.ranks)
    return max(len(r0.iter_s), (result.dataset.num_files or 0) // per_step, 1)


@dataclass(frozen=True)
class HeldOut:
    """A stored run as a prediction may see it: configuration and layout only."""

    run_id: str
    spec: RunSpec
    layout: pipeline.Layout
    cpus: int  # resolved at sweep time
    job: JobAsRun

    @property
    def mode(self) -> Mode:
        return self.spec.mode

    @classmethod
    def of(cls, run: RunResult) -> HeldOut:
        return cls(run.run_id, run.spec, run_layout(run), run_cpus(run), job_as_run(run))
