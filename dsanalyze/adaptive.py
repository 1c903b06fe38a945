"""`harness.py --adaptive [--budget 10m]`: measure only what changes the answer.

    answer = search(sweep, specs, measure, file_bytes, progress)

1. Seeds: the synthetic, cached and disk runs of the grid's first
   configuration, the fewest the what-if model fits on; for a step that runs
   on the CPU (the recorded device), also the synthetic run of every other CPU
   count, since the model times such a step per CPU count rather than scaling it.
2. Then, in turn: fit the model on the runs so far (`whatif.api.fit`), predict
   every configuration of the grid, and let `whatif.nextrun.choose` name the
   next configuration to measure (its disk run), or the measured pick to run
   once more while its interval is wider than the target, or say why to stop: the
   recommendation's interval within ±`SETTINGS.target_pct`, no configuration left that
   could change it, or the budget (the runs' summed durations; a run is not
   started when the median run's duration would overrun it).
3. The answer: the last decision, every decision on the way (each printed as
   it is made), runs and seconds spent, and the full grid's runs and an
   estimate of its seconds (each run it lacks at the median duration of the
   measured runs of its mode).

State is the stored runs only: a resumed search (`--resume`) skips the runs
already in the prefix and continues from them, rather than starting over;
without `--resume` a search counts only the runs it measured itself.
With `--repeats N`, each run is followed by its repeats, as in a plain sweep.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsanalyze import store
from dsanalyze.analysis import uncertainty
from dsanalyze.analysis.jobrun import job_as_run
from dsanalyze.config import Mode, Resources, RunSpec, Sweep
from dsanalyze.errors import ConfigError, DsAnalyzeError
from dsanalyze.records import RunResult
from dsanalyze.report.adaptive import decision_text
from dsanalyze.settings import SETTINGS
from dsanalyze.whatif import api, nextrun
from dsanalyze.whatif.model import Config
from dsanalyze.whatif.nextrun import Budget, Candidate, Decision, Verdict


@dataclass(frozen=True)
class AdaptiveAnswer:
    """Where an adaptive sweep ended: its decisions, and what it cost against the full grid."""

    decisions: tuple[Decision, ...]
    runs: int  # completed runs the answer rests on
    seconds: float  # their summed durations
    grid_runs: int  # the full grid's runs
    grid_seconds: float  # estimated: measured durations, and the median per mode for the rest
    epochs: int  # the recommendation is for a job of this many epochs (the first cold)

    @property
    def final(self) -> Decision:
        return self.decisions[-1]

    def to_dict(self) -> dict[str, Any]:
        return {"decisions": [d.to_dict() for d in self.decisions], "runs": self.runs,
                "seconds": self.seconds, "grid_runs": self.grid_runs,
                "grid_seconds": self.grid_seconds, "epochs": self.epochs}


def check(sweep: Sweep) -> None:
    """Refuse what the search cannot do, with what to do instead."""
    if not {Mode.SYNTHETIC, Mode.CACHED, Mode.DISK} <= set(sweep.modes):
        raise ConfigError("--adaptive fits the what-if model: give --modes synthetic,cached,disk")
    if sweep.target_ci_pct is not None:
        raise ConfigError("--adaptive picks runs itself: give --repeats N, not --target-ci")
    if sweep.job.nnodes > 1:
        raise ConfigError("--adaptive needs one node: with several, give the grid")


def candidates(runs: Sequence[RunResult], grid: Sequence[Resources], file_bytes: Sequence[int],
               cpu_count: Callable[[int | None], int]) -> list[Candidate]:
    """The model fitted on the completed `runs`, each configuration of the grid predicted, and
    the measured ones moved onto their runs (repeats pooled): `as_measured`. Each candidate
    counts its disk runs, failed ones included (a failed repeat is not asked for again)."""
    done = [r for r in runs if r.ok]
    model = api.fit(done, list(file_bytes))
    cfgs = [Config(dataclasses.replace(r, cpus=cpu_count(r.cpus))) for r in grid]
    preds = api.grid(model, cfgs, done)
    out = []
    for res, p in zip(grid, preds):
        tried = [r for r in runs if r.mode is Mode.DISK and r.spec.resources == res]
        mine = [r for r in tried if r.ok]
        rate = uncertainty.combined_samples(mine) if mine else None
        if rate is None:
            out.append(Candidate(res.key, p, runs=len(tried)))
            continue
        iv = rate.interval()
        out.append(Candidate(res.key, as_measured(p, iv.rate_sps, iv.low_sps, iv.high_sps),
                             iv.rate_sps, iv.low_sps, iv.high_sps, len(tried)))
    return out


def as_measured(p: api.Prediction, rate_sps: float, low_sps: float,
                high_sps: float) -> api.Prediction:
    """A measured configuration's prediction moved onto its measurement, so that the ranking
    compares what was measured where it was: the steady rate and its interval measured, the
    steady epoch (and its fetch stall) scaled to it, the cold epoch the run's own when it
    measured one apart from its steady epochs (a run of two or more epochs: `measured_sps`
    set), else scaled alike: a one-epoch run's rate is rated after its warm-up, and the
    model's cold epoch from its first batch, so only the scaled one compares with the
    cold epochs predicted for the configurations not measured."""
    n = p.rate_sps * p.epoch_s
    epoch_s = n / rate_sps
    epoch1_s = n / p.measured_epoch1_sps if p.measured_epoch1_sps and p.measured_sps else \
        (p.epoch1_s * p.rate_sps / rate_sps if p.epoch1_s is not None else None)
    return dataclasses.replace(p, rate_sps=rate_sps, rate_sps_low=low_sps,
                               rate_sps_high=high_sps, epoch_s=epoch_s, epoch1_s=epoch1_s,
                               fetch_stall_s=max(0.0, epoch_s - max(p.cached_s, p.compute_s)))


def recommendation_epochs(sweep: Sweep) -> int:
    """The job the recommendation is for: as many epochs as the runs measure (the first
    cold), one when they measure iterations."""
    return sweep.job.epochs or 1


@dataclass
class _Search:
    sweep: Sweep
    specs: list[RunSpec]
    measure: Callable[[RunSpec], RunResult | None]  # None: complete already (resume)
    file_bytes: Sequence[int]
    cpu_count: Callable[[int | None], int]
    progress: Callable[[str], None]
    tried: set[str] = dataclasses.field(default_factory=set)
    made: set[str] = dataclasses.field(default_factory=set)  # run ids measured by this search

    def runs(self) -> list[RunResult]:
        """The stored runs of this sweep's specs, repeats included: with `--resume` every one,
        else those this search measured (an earlier search's runs are not its state)."""
        ids = {s.run_id for s in self.specs}
        return [r for r in store.load_readable_runs(Path(self.sweep.prefix))[0]
                if dataclasses.replace(r.spec, repeat=1).run_id in ids
                and (self.sweep.resume or r.run_id in self.made)]

    def measure_with_repeats(self, spec: RunSpec) -> None:
        for repeat in range(1, self.sweep.repeats + 1):
            again = dataclasses.replace(spec, repeat=repeat)
            self.measure(again)
            self.made.add(again.run_id)

    def measure_again(self, spec: RunSpec) -> None:
        """One more run of a measured configuration: the repeat after its last stored one."""
        last = max((r.spec.repeat for r in self.runs()
                    if dataclasses.replace(r.spec, repeat=1).run_id == spec.run_id), default=0)
        again = dataclasses.replace(spec, repeat=last + 1)
        self.measure(again)
        self.made.add(again.run_id)

    def decide(self, grid: list[Resources]) -> Decision:
        try:
            cands = candidates(self.runs(), grid, self.file_bytes, self.cpu_count)
        except DsAnalyzeError as e:
            raise ConfigError(f"--adaptive: the what-if model cannot be fitted on the seed runs "
                              f"({e}): measure the grid without --adaptive") from None
        return nextrun.choose(cands, SETTINGS.input_bound_pct, recommendation_epochs(self.sweep),
                              SETTINGS.target_pct, frozenset(self.tried))

    def over_budget(self, decision: Decision) -> Decision | None:
        """The decision to stop when the next run would overrun the budget, else None."""
        budget = self.sweep.budget_s
        if budget is None:
            return None
        durations = [r.duration_s for r in self.runs()]
        spent = sum(durations)
        times = 1 if decision.verdict is Verdict.REPEAT else self.sweep.repeats
        expected = statistics.median(durations) * times if durations else 0.0
        if spent + expected <= budget:
            return None
        return dataclasses.replace(decision, verdict=Verdict.BUDGET, next_key=None,
                                   budget=Budget(spent, budget, expected, decision.next_key))


def search(sweep: Sweep, specs: list[RunSpec], measure: Callable[[RunSpec], RunResult | None],
           file_bytes: Sequence[int], cpu_count: Callable[[int | None], int],
           progress: Callable[[str], None] | None = None) -> AdaptiveAnswer:
    """Seed runs, then one configuration at a time until `nextrun.choose` says stop."""
    s = _Search(sweep, specs, measure, file_bytes, cpu_count, progress or (lambda line: None))
    grid = sweep.resource_grid(_dataset_bytes(file_bytes))
    disk = {sp.resources.key: sp for sp in specs if sp.mode is Mode.DISK}
    for spec in specs:
        if spec.resources in (grid[0], Resources(grid[0].cpus)):
            s.measure_with_repeats(spec)  # the seeds
    if any(job_as_run(r).step_uses_cpu for r in s.runs() if r.spec.mode is Mode.SYNTHETIC):
        for spec in specs:  # a step on the CPU is timed, not modelled, at each CPU count
            if spec.mode is Mode.SYNTHETIC and spec.resources.cpus != grid[0].cpus:
                s.measure_with_repeats(spec)
    decisions: list[Decision] = []
    while True:
        decision = s.decide(grid)
        if decision.next_key is not None:
            decision = s.over_budget(decision) or decision
        decisions.append(decision)
        s.progress(f"adaptive step {len(decisions)}: {decision_text(decision)}")
        if decision.next_key is None:
            break
        if decision.verdict is Verdict.REPEAT:
            s.measure_again(disk[decision.next_key])
            continue
        s.tried.add(decision.next_key)
        s.measure_with_repeats(disk[decision.next_key])
    return answer(tuple(decisions), s.runs(), sweep.run_specs(_dataset_bytes(file_bytes)),
                  sweep.repeats, recommendation_epochs(sweep))


def _dataset_bytes(file_bytes: Sequence[int]) -> int:
    return int(sum(file_bytes))


def answer(decisions: tuple[Decision, ...], runs: Sequence[RunResult], grid: Sequence[RunSpec],
           repeats: int, epochs: int) -> AdaptiveAnswer:
    """Runs and seconds spent; the full grid's runs and seconds, each run it lacks at the
    median duration of the measured runs of its mode (of every mode, if none)."""
    have = {r.run_id: r.duration_s for r in runs}
    every = statistics.median(have.values()) if have else 0.0
    by_mode = {m: statistics.median(d) for m in Mode
               if (d := [r.duration_s for r in runs if r.mode is m])}
    full = [dataclasses.replace(sp, repeat=k) for sp in grid for k in range(1, repeats + 1)]
    grid_s = sum(have.get(sp.run_id, by_mode.get(sp.mode, every)) for sp in full)
    return AdaptiveAnswer(decisions, len(runs), sum(have.values()), len(full), grid_s, epochs)
