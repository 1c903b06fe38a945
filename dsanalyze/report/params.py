"""The what-if model's parameters in words: how each was obtained (`whatif.provenance`).

    how_text(ReceiveWait(runs=2, low_s=0.001, high_s=0.003))
        -> "measured: median wait for a batch in the 2 compute-bound cached run(s), ..."

Every number is the provenance's; which rule applied is the fit's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dsanalyze.config import format_bytes
from dsanalyze.whatif.bounds import PREP_CPU_S
from dsanalyze.whatif.provenance import (
    Contention,
    CpuStep,
    CpuStretch,
    DeviceProbe,
    Dropped,
    EpochEndMedian,
    Fixed,
    MainLoop,
    MainRestart,
    OutsideWork,
    PrepAlone,
    PrepLaw,
    PrepUnfitted,
    ProbedContention,
    Provenance,
    ReadAmplification,
    ReadCpu,
    ReadCpuDropped,
    Reason,
    ReceiveWait,
    RingLaw,
    Said,
    SampleSizes,
    SigmaDefault,
    SigmaResidual,
    Sizes,
    SizeShare,
    Slack,
    StepMedian,
    StorageSigma,
    Throttle,
    WorkerRestart,
)

REASONS = {
    Reason.NOTHING_TO_PREDICT: "default: nothing to predict",
    Reason.NO_TRANSFORM_TIMING: "not measured: no per-transform timing recorded; every "
                                "sample's prep taken as the mean",
    Reason.PREP_COMPUTE_BOUND: "not measured: the cached runs are compute-bound, so prep is "
                               "faster than they show; run harness.py --modes loader",
    Reason.MAIN_UNMEASURED: "not measured (needs a synthetic and a cached run): taken as 0",
    Reason.NO_COMPUTE_BOUND_RUN: "not measured: no compute-bound cached run (its loader ahead "
                                 "of the step); a ready batch is taken at once (untested)",
    Reason.NO_STARTUP_RUN: "not measured: no cached or loader run",
    Reason.STARTUP_WAIT: "first iteration's wait beyond the simulated one (DataLoader worker "
                         "start-up)",
    Reason.WORKERS_KEPT: "none: the workers are persistent (or there are none), so they do not "
                         "start again at each epoch",
    Reason.NO_RESTART_RUN: "not measured: no cached run of two epochs or more; workers taken to "
                           "start again at no cost",
    Reason.OTHERS_PREDATE: "not measured: the runs predate the machine-wide CPU samples; work "
                           "outside the job's cgroup taken to take none of its cores",
    Reason.OTHERS_FROM_CACHED: "not measured on these runs: the loader and cached runs' figure",
    Reason.DEVICE_PREDATES_PROBE: "not measured: the disk runs predate the storage probe "
                                  "(re-run them); unthrottled storage is taken as never limiting",
    Reason.DEVICE_LATENCY: "median cold 4 KiB read per request",
    Reason.THROTTLE_SLICE: "blk-throttle's slice on the disk under the data, as the storage probe "
                           "read it (20 ms non-rotational, 100 ms rotational): a throttle's "
                           "budget left unused for up to this long is spent by the reads after",
    Reason.THROTTLE_SLICE_DEFAULT: "not recorded (the runs predate it): the kernel's slice for a "
                                   "non-rotational disk taken; a throttle's budget left unused "
                                   "for up to this long is spent by the reads after",
    Reason.ONE_WORKER_COUNT: "not fitted: no CPU count had unthrottled disk runs of two "
                             "worker counts, which alone tell a read's wait from its CPU; the "
                             "device's latency alone",
    Reason.NO_WAIT_SHOWN: "not fitted: the unthrottled disk runs of fewer workers did not lie "
                          "further under their cached twins than those of more, as a wait "
                          "makes them; the device's latency alone",
    Reason.NO_UNTHROTTLED_RUN: "not measured: no unthrottled disk run; reads are taken to cost "
                               "no CPU",
    Reason.NO_STORAGE_BOUND_RUN: "not measured: no throttled disk run whose rate its storage "
                                 "set; a rate the storage sets is taken to be as sure as one "
                                 "run on this machine (the noise floor)",
    Reason.NO_BINDING_CACHE: "not measured: no disk run with a binding cache limit and cgroup "
                             "counters; budgets taken at face value",
    Reason.NO_AMPLIFICATION_RUN: "not measured: no disk run with a recorded read counter "
                                 "and a cache under 10% of the dataset; each training "
                                 "sample taken to read its file once",
    Reason.NO_SYNTHETIC_RUN: "not measured: no synthetic run",
    Reason.ONE_RANK_COUNT: "not measured: synthetic runs of one rank count only; other rank "
                           "counts are taken to add no all-reduce time (untested)",
    Reason.SAMPLES_PER_EPOCH: "batches per epoch x batch size x ranks",
    Reason.DATASET_BYTES: "page-rounded bytes of every file",
}

# why each physical bound (`whatif/bounds.py`, by name) is where it is
BOUND_WHY = {
    "throttle_efficiency": "a throttle gives about what it says; far below or above it is a "
                           "window the throttle did not hold",
    "read_cpu_bps": "a read costs at least the memory copy of its bytes, about 20 GB/s per core",
    "read_amplification": "a job reads each file once per training sample or a few times "
                          "more (a validation pass, a test pass); under half the bytes its "
                          "loader missed, the page cache held more than its budget; over "
                          "10x, the counter saw another process's reads",
    "contention": "above 1 each extra busy core would lower the loader's total rate",
    "restart_cpu_s": "a worker starting again copies at most the main process's memory, "
                     "seconds of a core; a value at the solver's limits means the waits did not "
                     "determine it",
    "prep_cpu_s_per_sample": "no sample's read, decode and collation takes under 10 us or over "
                             "5 s of a core; a value at the solver's limits means the runs did "
                             "not determine it",
}


def _ms(x: float) -> str:
    return f"{x * 1e3:.2f} ms"


FLOORED = (f"held at its floor, {_ms(PREP_CPU_S.low)}: the runs were as fast as the step and "
           "the main process alone allow, or faster (the step's synthetic run at that CPU count "
           "then ran slow), so the prep is at most nil where")


def _ms_range(low_s: float, high_s: float) -> str:
    return f"{low_s * 1e3:.2f} to {_ms(high_s)}"


def dropped_text(d: Dropped) -> str:
    """`fitted 2.384e+05 on run-a, outside 0.05 to 1.5 (why): dropped`."""
    return (f"fitted {d.value:.4g} on {', '.join(d.runs) or 'no run'}, outside {d.low:.4g} to "
            f"{d.high:.4g} ({BOUND_WHY[d.bound]}): dropped")


def _sizes(h: SampleSizes) -> str:
    where = {Sizes.SCANNED: f"mean of the {h.files} files of {h.root or 'the dataset'}",
             Sizes.QUANTILES: "mean of the size quantiles recorded with the run",
             Sizes.MEAN: "not measured: no size distribution recorded and the dataset is gone; "
                         "every file taken as the mean size"}[h.source]
    return f"{where}; p5/p50/p95 {h.p5_bytes}/{h.p50_bytes}/{h.p95_bytes} B"


def _sigma_default(h: SigmaDefault) -> str:
    return (f"default {h.default:.0%}, at least the fit runs' median measured noise "
            f"({h.noise:.1%}): {h.runs} fit run(s) for {h.calibrated} calibrated number(s) leave "
            "too few degrees of freedom to size the intervals")


def _sigma_residual(h: SigmaResidual) -> str:
    return (f"residual log error of {h.runs} fit runs over {h.dof} degrees of freedom, at least "
            f"their median measured noise ({h.noise:.1%}, block bootstrap) and {h.floor:.0%}: "
            f"intervals are rate x exp(+-{h.z:g} sigma), {h.level:.0%} nominal")


def _storage_sigma(h: StorageSigma) -> str:
    return (f"residual log error of the steady rates of {h.runs} throttled fit run(s) whose "
            f"rate the storage set, pooled with one run at {h.prior:.0%} (a prior), at least "
            f"{h.floor:.0%}: the interval of a rate the storage sets is rate x "
            f"exp(+-{h.z:g} sigma), {h.level:.0%} nominal")


def _size_share(h: SizeShare) -> str:
    steps = ", ".join(f"{name} {_ms(s)}" for name, s in h.steps_s)
    return (f"measured: the image loader's share of the timed prep per sample (median of "
            f"{h.runs} run(s); e.g. {steps}); that share of a sample's prep scales with its "
            "file's bytes, the rest is the same for every sample")


def _probed(h: ProbedContention) -> str:
    return (f"measured by the machine's parallel decode probe: {h.work} of the dataset's files "
            f"took {_ms(h.solo_cpu_s)} CPU per item alone on one core, {_ms(h.parallel_cpu_s)} "
            f"on each of {h.cpus} cores at once (the runs measured one busy-core count, so the "
            "job's own law is untested)")


def _law(h: PrepLaw) -> str:
    cores = list(h.cores)
    return {
        Contention.PROBED: f"contention {h.contention:.3f} per extra busy core from the "
                           "machine's parallel decode probe (one busy-core count measured)",
        Contention.FITTED: f"contention {h.contention:.3f} per extra busy core, fitted across "
                           f"busy cores {cores}; each core beyond {max(cores)} adds "
                           f"{h.beyond:.3f} (the machine's parallel decode probe's, at most the "
                           "fitted; 0 without a probe)",
        Contention.ONE_COUNT: f"contention 0: one busy-core count measured ({cores[0]}), so each "
                              "extra core is taken to add a full core of prep (untested)",
        Contention.LINEAR: f"contention fitted as 0 across busy cores {cores} (cores add prep "
                           "linearly)",
        Contention.REFITTED: f"contention {dropped_text(h.dropped) if h.dropped else ''}; c_prep "
                             f"from busy cores {cores[0]} alone, contention 0",
    }[h.law]


def _prep_law(h: PrepLaw) -> str:
    return (f"c_prep: worker CPU per sample on one busy core ({1 / h.prep_cpu_s:.1f} samples/s "
            f"per core); {_law(h)}")


def _prep_unfitted(h: PrepUnfitted) -> str:
    if not h.timed_runs:
        return f"not measured: {dropped_text(h.dropped)}"
    return (f"the workers' per-transform timing, summed per sample (median of {h.timed_runs} "
            f"run(s)), contention 0 (untested); from the rates: {dropped_text(h.dropped)}")


def _outside(h: OutsideWork) -> str:
    text = (f"measured: CPU outside the job's cgroup on any of the machine's {h.machine_cpus} "
            "cores (kernel I/O and reclaim, the harness's monitor and limiter) per sample of the "
            "steady iterations, less the synthetic runs' outside work per second (other "
            f"tenants: {h.background_cores:.2f} cores), median of {h.runs} run(s); it takes the "
            "job's cores where the job wants more than the machine has free of it")
    if h.foreign:
        text += (f"; left out, as another process's load rather than the job's (over "
                 f"{h.foreign_factor:g}x the median of every run): " +
                 ", ".join(f"{i} {_ms(x)}" for i, x in h.foreign))
    return text


def _read_cpu(h: ReadCpu) -> str:
    if h.wait_fitted:
        return ("calibrated with the wait a missed read holds its worker (two numbers): how far "
                "each unthrottled disk run without a page cache lies under its cached twins "
                f"(the same CPUs and workers), at {h.cpus} CPU(s) and up"
                + ("" if h.measurable else "; reading costs no measurable CPU"))
    where = (f"the change of rate with the bytes missed across the cache budgets of the "
             f"unthrottled disk runs at {h.cpus} CPU(s)" if h.contrast else
             f"the unthrottled disk runs without a page cache at {h.cpus} CPU(s)")
    return (f"calibrated, one number: bytes read per CPU second (page-cache fill, reclaim), from "
            f"{where}" if h.measurable else f"calibrated: reading costs no measurable CPU ({where})")


def _throttle(h: Throttle) -> str:
    dropped = "".join(f"; {dropped_text(d)}" for d in h.dropped)
    if h.low is None or h.high is None:
        why = "every throttled fit out of bounds" if h.dropped else \
            "no throttled disk run held by its throttle"
        return (f"not measured: {why}; a throttle is taken at face value (capped by the "
                f"device){dropped}")
    return (f"one number for every throttle: cold epochs (every read misses) got {h.low:.1%} to "
            f"{h.high:.1%} of their throttle; the median is used{dropped}")


WORDS: dict[type[Provenance], Callable[[Any], str]] = {
    Said: lambda h: h.text,
    Fixed: lambda h: REASONS[h.reason],
    SampleSizes: _sizes,
    SigmaDefault: _sigma_default,
    SigmaResidual: _sigma_residual,
    StorageSigma: _storage_sigma,
    SizeShare: _size_share,
    ProbedContention: _probed,
    PrepLaw: _prep_law,
    PrepUnfitted: _prep_unfitted,
    PrepAlone: lambda h: ((dropped_text(h.dropped) + "; c_prep used where") if h.dropped else
                          FLOORED if h.floored else "calibrated: where") +
                         " the step on the CPU runs one thread a rank and takes turns with the "
                         "workers, the prep per sample (on one busy core) that makes each cached "
                         f"such run's simulated rate its measured one; median of {h.runs}: "
                         f"{_ms_range(h.low_s, h.high_s)}",
    MainLoop: lambda h: (f"measured: each cached run's loop time (iteration - wait, median of "
                         "its steady iterations) beyond its step, as the simulation shares the "
                         f"cores among the job's processes; median of {h.runs}: "
                         f"{_ms_range(h.low_s, h.high_s)}"),
    CpuStretch: lambda h: (f"calibrated: a step on the CPU beside its loader; at {h.cpus} CPU(s) "
                           f"and {h.workers} worker(s) the job's CPU work stretched so that each cached run's simulated "
                           f"rate is its measured one; median of {h.runs}: {h.low:.2f}x to "
                           f"{h.high:.2f}x" + ("" if h.cores_busy is None else
                                               f"; {h.cores_busy:.2f} of its {h.cpus} cores "
                                               "busy")),
    WorkerRestart: lambda h: ("not measured: workers taken to start again at no cost; "
                              + dropped_text(h.dropped) if h.dropped else
                              "calibrated: each worker's CPU at every epoch start after the "
                              "first (a worker forked again touches the main process's grown "
                              "heap) that makes a cached run's simulated first waits of its "
                              "steady epochs its measured ones, less its first epoch's start "
                              f"beyond the simulated one; median of {h.runs}: "
                              f"{_ms_range(h.low_s, h.high_s)}"),
    MainRestart: lambda h: ("not measured: the main process taken to pay nothing when its "
                            "workers start again; " + dropped_text(h.dropped) if not h.runs else
                            "calibrated: the main process's CPU in its first iteration of every "
                            "epoch after the first (its writes to the heap the new workers "
                            "share copy the pages, once whatever their number) that makes a "
                            "cached run's simulated first iterations of its steady epochs "
                            "its measured ones, given each worker's share (their waits); "
                            f"median of {h.runs}: {_ms_range(h.low_s, h.high_s)}"
                            + (f"; {dropped_text(h.dropped)}" if h.dropped else "")),
    ReceiveWait: lambda h: (f"measured: median wait for a batch in the {h.runs} compute-bound "
                            f"cached run(s), whose loader is ahead: "
                            f"{_ms_range(h.low_s, h.high_s)}"),
    OutsideWork: _outside,
    DeviceProbe: lambda h: (f"cold reads of the dataset's own files by one reader before each "
                            f"disk run (median of {h.runs}: {format_bytes(h.low_bps)}/s to "
                            f"{format_bytes(h.high_bps)}/s); unthrottled storage is this device"),
    ReadCpu: _read_cpu,
    ReadCpuDropped: lambda h: ("not measured: reads taken to cost no CPU; "
                               + dropped_text(h.dropped)),
    Throttle: _throttle,
    ReadAmplification: lambda h: (
        "not measured: each training sample taken to read its file once; "
        + dropped_text(h.dropped) if h.dropped else
        f"measured: the cgroup's storage reads over the bytes the cache simulator says the "
        f"training loader missed, on {h.runs} disk run(s) with almost no page cache "
        f"({h.low:.2f} to {h.high:.2f}); where a cache holds part of the dataset, the other "
        "reads are taken to hit in the share it holds (untested)"),
    Slack: lambda h: (f"page cache (shared memory excluded) the fit runs had over their budget "
                      f"in their steady epochs: {format_bytes(h.low_bytes)} to "
                      f"{format_bytes(h.high_bytes)}"),
    StepMedian: lambda h: f"median of {h.runs} synthetic run(s): step {_ms(h.step_s)}",
    RingLaw: lambda h: (f"ring law t(n) = t_compute + t_allreduce * 2(n-1)/n fitted on ranks "
                        f"{list(h.ranks)}"),
    CpuStep: lambda h: (f"the step runs on the CPU (the script's device): measured at {h.cpus} "
                        f"CPU(s) by {h.runs} synthetic run(s); it shares the cores with the "
                        "loader's workers, and other CPU counts are not predicted"),
    EpochEndMedian: lambda h: (f"the work between epochs (the script's validation, a checkpoint): "
                         f"the median of what {h.epochs} epoch-ending iteration(s) of {h.runs} "
                         f"synthetic run(s) at {h.cpus} CPU(s) took beyond the run's median "
                         "iteration; the loader's workers have nothing to prepare meanwhile, "
                         "so it adds to every epoch"),
}


def how_text(how: Provenance) -> str:
    """How one parameter was obtained, in one line."""
    return WORDS[type(how)](how)
