"""The model's job before any calibration: its layout, file sizes and step law.

`job_model` builds the `Model` the fitters (`whatif/fitters.py`) refine: the
base job's ranks, batch, workers and layout (a cold epoch, then steady ones),
the dataset's page-rounded file sizes, and the step: on a GPU (or the sim
device) the ring law t(n) = t_compute + t_allreduce * 2(n-1)/n fitted on the
synthetic runs of each rank count; on the CPU its time at each CPU count a
synthetic run measured. Each run's fit weight is 1 / its measured relative
variance, floored at `SETTINGS.noise_floor`.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from dsanalyze.analysis import runrate
from dsanalyze.analysis.jobrun import SAME_ORDER, job_as_run
from dsanalyze.config import Mode
from dsanalyze.records import RunResult
from dsanalyze.settings import SETTINGS
from dsanalyze.whatif import pipeline
from dsanalyze.whatif.cachesim import PAGE_BYTES
from dsanalyze.whatif.epochend import EpochEnd
from dsanalyze.whatif.fitruns import by_mode, job_key, per_iter
from dsanalyze.whatif.model import Model, Param, run_cpus, run_layout
from dsanalyze.whatif.provenance import (
    CpuStep,
    EpochEndMedian,
    Fixed,
    Reason,
    RingLaw,
    StepMedian,
)
from dsanalyze.whatif.runsizes import file_sizes


def _fit_step(results: list[RunResult], base: tuple[int, float | None]
              ) -> tuple[float | None, float, list[Param]]:
    """(step at the base ranks, t_allreduce, params): synthetic runs of the base step."""
    by_n: dict[int, list[RunResult]] = {}
    for r in by_mode(results, Mode.SYNTHETIC):
        if job_key(r)[1] == base[1] and runrate.run_rate(r).rate_sps:
            by_n.setdefault(r.spec.job.world_size, []).append(r)
    if base[0] not in by_n:
        return None, 0.0, [Param("ingest_sps", None, "samples/s", (),
                                 Fixed(Reason.NO_SYNTHETIC_RUN))]
    steps = {n: statistics.median(EpochEnd.of(r).step_s for r in runs)
             for n, runs in by_n.items()}
    params = [Param(f"ingest_sps[ranks={n}]", per_iter(runs[0]) / steps[n],
                    "samples/s", tuple(r.run_id for r in runs),
                    StepMedian(len(runs), steps[n]))
              for n, runs in sorted(by_n.items())]
    ring = {n: 2 * (n - 1) / n for n in steps}
    others = [n for n in steps if n != base[0]]
    allreduce = 0.0
    if others:  # t(n) - t(base) = a (ring(n) - ring(base)), least squares through the origin
        x = [ring[n] - ring[base[0]] for n in others]
        y = [steps[n] - steps[base[0]] for n in others]
        allreduce = max(0.0, sum(a * b for a, b in zip(x, y)) / sum(a * a for a in x))
    how = RingLaw(tuple(sorted(steps))) if others else Fixed(Reason.ONE_RANK_COUNT)
    params.append(Param("allreduce_s", allreduce, "s",
                        tuple(r.run_id for n in sorted(by_n) for r in by_n[n]) if others else (),
                        how))
    return steps[base[0]], allreduce, params


def _synthetic_by_cpus(base: list[RunResult]) -> dict[int, list[RunResult]]:
    """The base job's synthetic runs with a rate, by CPU count, fewest first."""
    by: dict[int, list[RunResult]] = {}
    for r in by_mode(base, Mode.SYNTHETIC):
        if runrate.run_rate(r).rate_sps:
            by.setdefault(run_cpus(r), []).append(r)
    return dict(sorted(by.items()))


def _fit_cpu_step(base: list[RunResult]) -> tuple[tuple[tuple[int, float], ...], list[Param]]:
    """A step on the CPU: its time per iteration at each CPU count a synthetic run of the
    base job measured (the step's threads take every core; no law across counts)."""
    by = _synthetic_by_cpus(base)
    steps = {k: statistics.median(EpochEnd.of(r).step_s for r in runs) for k, runs in by.items()}
    return tuple(steps.items()), [Param(
        f"step_s[cpus={k}]", steps[k], "s", tuple(r.run_id for r in by[k]),
        CpuStep(k, len(by[k]))) for k in steps]


def _fit_epoch_end(base: list[RunResult]) -> tuple[tuple[tuple[int, float], ...], list[Param]]:
    """The work between epochs at each CPU count a synthetic run of the base job measured
    (`whatif/epochend.py`); none where no run has any."""
    runs = _synthetic_by_cpus(base)
    found = {k: [EpochEnd.of(r) for r in rs] for k, rs in runs.items()}
    ends = {k: statistics.median(e.epoch_end_s for e in fs) for k, fs in found.items()}
    if not any(ends.values()):
        return (), []
    return tuple(ends.items()), [Param(
        f"epoch_end_s[cpus={k}]", ends[k], "s", tuple(r.run_id for r in runs[k]),
        EpochEndMedian(k, len(found[k]), sum(e.ends for e in found[k]))) for k in ends]


def _speedups(runs: list[RunResult], base: RunResult) -> tuple[float, ...]:
    """Base step / the sim step of each run: the GPU speed-ups some run measured."""
    if job_key(base)[1] is None:
        return (1.0,)
    return tuple(sorted({base.spec.job.sim_step_ms / step for r in runs
                         if (step := job_key(r)[1])}))


def _raw_bytes(run: RunResult, file_bytes: Sequence[int]) -> int:
    """The dataset's own bytes as the run recorded them, where they are the files of
    `file_bytes` (as many, and under their pages by less than a page each); else 0."""
    ds = run.dataset
    raw, pages = ds.total_bytes or 0, sum(file_bytes)
    if ds.num_files != len(file_bytes) or not 0 < raw <= pages \
            or pages - raw >= len(file_bytes) * PAGE_BYTES:
        return 0
    return int(raw)


def job_model(ok: list[RunResult], base: list[RunResult], sizes: Sequence[int] | None,
               policy: str, rate_rel_sigma: Mapping[str, float]
              ) -> tuple[Model, list[Param], list[Param]]:
    """The model's job and layout (the base job's), its step law, and what it measured:
    the step's params, and the layout's (samples per epoch, dataset bytes, sample bytes)."""
    job, ran = base[0].spec.job, job_as_run(base[0])
    file_bytes, size_param = file_sizes(base[0], sizes)
    # the whole dataset's epoch: a cached run of data larger than memory ran on a subset
    n_samples = max(runrate.samples_per_epoch(r) or 0 for r in base) or len(file_bytes)
    batches = max(run_layout(r).batches for r in base)
    epochs = max([3] + [run_layout(r).epochs for r in by_mode(base, Mode.DISK)])
    # a cold epoch, then steady ones
    layout = pipeline.Layout(epochs, batches, epochs * batches, min(job.warmup, batches - 1))
    step, allreduce, g_params = _fit_step(ok, job_key(base[0]))
    by_cpus, cpu_params = _fit_cpu_step(base) if ran.step_uses_cpu else ((), [])
    epoch_end, end_params = _fit_epoch_end(base)
    weights = {k: 1 / max(v, SETTINGS.noise_floor) ** 2 * SETTINGS.noise_floor ** 2
               for k, v in rate_rel_sigma.items()}
    model = Model(ranks=ran.ranks, batch_size=ran.batch_size, workers=ran.workers,
                  samples_per_epoch=n_samples, file_bytes=file_bytes, layout=layout, step_s=step,
                  raw_dataset_bytes=_raw_bytes(base[0], file_bytes),
                  policy=policy, allreduce_s=allreduce,
                  step_ms=job_key(base[0])[1],
                  measured_cpus=tuple(sorted({run_cpus(r) for r in base})),
                  measured_ranks=tuple(sorted({r.spec.job.world_size for r in ok})),
                  measured_speedups=_speedups(ok, base[0]),
                  machine_cpus=base[0].environment.get("cpus_available"), loader=ran.loader,
                  prefetch_factor=ran.prefetch_factor, step_on_cpu=ran.step_uses_cpu,
                  persistent_workers=ran.persistent_workers,
                  same_order=ran.read_order == SAME_ORDER,
                  read_ahead_samples=ran.read_ahead_samples, held_buffer=ran.held_buffer,
                  step_s_by_cpus=by_cpus, epoch_end_s_by_cpus=epoch_end,
                  fit_weights=weights, measured_sigma=dict(rate_rel_sigma))
    fixed = [Param("samples_per_epoch", float(n_samples), "samples", (base[0].run_id,),
                   Fixed(Reason.SAMPLES_PER_EPOCH)),
             Param("dataset_bytes", float(model.dataset_bytes), "B", (base[0].run_id,),
                   Fixed(Reason.DATASET_BYTES)), size_param]
    return model, [*g_params, *cpu_params, *end_params], fixed
