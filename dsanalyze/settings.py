"""The tuned constants of the analysis, the what-if model and the adaptive runs, in one value.

Each field of `Settings` is one number a rule compares against or a size a
simulation uses. Its metadata says what it is (`what`), its unit (`unit`,
"" for a ratio) and where it comes from (`tuned`): the grid or the bench it
was tuned on, or the convention it follows when it was not tuned, with the
commit that introduced it. The code reads `SETTINGS.<name>`; a bench that
tries another value builds `replace(SETTINGS, name=value)` and passes it
where a function takes one. Tuning grid != scoring grid: the what-if's
constants were tuned on bench/whatif_accuracy.py's grid and are scored on
bench/scripts_accuracy.py's scripts.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

ACCURACY_GRID = "bench/whatif_accuracy.py's grid (500 JPEGs of 530 KB, batch 8, 60 ms step, " \
    "1-2 CPUs, cache 0-100%, throttles 2-16 MB/s)"


INTERVAL_GRID = "bench/interval_tuning.py's tuning grid (recorded sweeps of the built-in job " \
    "and of examples and timm at 1 CPU): 90% coverage, median |error| / sigma 0.67"


SCRIPTS_GRID = "kept under the propagated law (sigma by what sets the rate) on that grid and " \
    "bench/scripts_accuracy.py's four recorded directories /tmp/dsa-scripts-bench{,2,3,4} " \
    "(tuning grids now): 88% coverage, median |z| 0.63 over 191 held-out single runs; " \
    "leave-one-out 83-88% and extrapolation 83-94% on each directory"


SIDES_GRID = "bench/interval_tuning.py --search on bench/scripts_accuracy.py's tuning grids " \
    "bench30, 31 and 33-39 (364 held-out single runs under d5f2115's model): each side (runs " \
    "the storage held, runs the loop held) of each split toward 90% coverage and a median |z| " \
    "of 0.674 apart; at the constants before (storage 1, throttle 6%, no step part) the " \
    "storage side covered 100% (median |z| 0.07-0.19) and the loop side 70-75%; now 95-97% " \
    "and 83-88% (median |z| 0.53-0.66)"


KINK_GRID = "bench/scripts_accuracy.py's bench42 (seed 173, 4 MB/s) and bench43 (seed 179, " \
    "10 MB/s), tuning grids: their 44 held-out single runs the storage held lay within 2.0-2.1% " \
    "of their predictions nine times in ten (bench21-39's: 1.7-2.0%), in one sign within a " \
    "script and throttle, where the storage's scaled sigma gave them +-1-1.6%"


def _tuned(value: float, unit: str, what: str, tuned: str) -> Any:
    return field(default=value, metadata={"unit": unit, "what": what, "tuned": tuned})


@dataclass(frozen=True)
class Settings:
    """The tuned constants; `describe()` lists them with their unit and provenance."""

    # ---- the what-if fit (whatif/calibrate.py and its fitters) ----
    default_rel_sigma: float = _tuned(
        0.05, "", "relative standard error of a prediction when the fit runs leave fewer than 2 "
        "degrees of freedom", f"a stated prior, checked on {ACCURACY_GRID} (6b66655)")
    noise_floor: float = _tuned(
        0.02, "", "run-to-run spread of one configuration on this kind of machine: the "
        "smallest relative sigma of an interval and of a run's fit weight",
        f"the repeats' spread of {ACCURACY_GRID} (6b66655)")
    foreign_factor: float = _tuned(
        3.0, "x", "outside work per sample above this times every run's median is another "
        "process's load, not the job's",
        "the repeats of bench/whatif_accuracy.py --repeats 2 (5360af0)")
    throttle_slice_s: float = _tuned(
        0.02, "s", "blk-throttle's slice where the device's kind was not recorded: a throttle's "
        "budget unused for up to this long is the readers' later (the kernel's "
        "DFL_THROTL_SLICE_SSD, HZ / 50; a rotational disk's is HZ / 10, 0.1 s)",
        "not tuned: the kernel's constant for a non-rotational device, which the runs' storage "
        "probe records (`storage.throttle_slice_s`) (80a67ad)")
    throttle_binds: float = _tuned(
        0.5, "", "a throttled cold window reading under this share of its throttle is not held "
        "by it (no efficiency fitted on it)", f"{ACCURACY_GRID} (bffe67f)")
    prep_bound: float = _tuned(
        0.9, "", "a cached run under this share of its compute rate G is prep-bound enough to "
        "solve c_prep on; at or above it, compute-bound (its loader is ahead)",
        f"{ACCURACY_GRID} (ef446db)")
    memory_bps: float = _tuned(
        20e9, "B/s", "bytes a core copies per second: no read costs less CPU (the read CPU "
        "bound)", "a physical figure (memcpy on a server core), not tuned (ba92cab)")
    read_wait_max_s: float = _tuned(
        20e-3, "s", "the longest wait a read that misses may be fitted to hold its worker "
        "(`fit_storage.fit_read_cpu`): the fit's upper end", "not tuned: a local device "
        "answers a cold read in well under a millisecond and the scripts bench's fits land "
        "under 0.5 ms (bench50: timm 0.24, Lightning 0.10); 20 ms leaves room for a network "
        "disk (883a44e)")
    read_fit_step_s: float = _tuned(
        1e-4, "s", "the finite difference the read cost and wait fit steps by (per sample)",
        "not tuned: 0.1 ms, a fraction of the waits the loader's own timing shows on the "
        "scripts bench (0.2-1.4 ms a sample with one worker) (883a44e)")
    read_fit_steps: int = _tuned(
        4, "", "Gauss-Newton steps of the read cost and wait fit (each simulates every run "
        "three times)", "not tuned: four keep the fit within a main fit's time (bench50: "
        "5.0-7.6 s a script against 4.8-6.5 s) (883a44e)")
    reread_uncached: float = _tuned(
        0.9, "", "a disk run whose cache leaves at least this share of the dataset uncached "
        "measures the read amplification: the job's other reads of a file then miss as its "
        "training reads do", "not tuned: physics (a cache holding under a tenth of the data "
        "leaves any pass over it missing); the scripts bench's cache-0 runs leave 99% (77af013)")
    read_ahead_drift: float = _tuned(
        0.1, "", "a remote run whose loader's read-ahead grew or drained by more than this share "
        "of the samples its steady window consumed measured no steady rate: not fitted, named "
        "in the report", "not tuned: the accuracy issue 22 asks of a remote run's rate (its "
        "rate x bytes a sample within 10% of the link) (0ca6434)")
    # ---- the what-if model (whatif/model.py, laws.py, rates.py, intervals.py, pipeline.py) ----
    cache_binds: float = _tuned(
        0.97, "", "a page cache under this share of the dataset limits the hits; at or above "
        "it, the cache holds everything", f"{ACCURACY_GRID} (ef446db)")
    untested_sigma: float = _tuned(
        0.06, "", "relative error (one sigma) of a law or knob no fit run tested, added in "
        "quadrature per assumption, weighted by the rate's sensitivity to the side of the "
        "model it is about (`intervals.py`)", f"{INTERVAL_GRID} (9974e67); {SCRIPTS_GRID} "
        "(3364bb2)")
    fit_sigma_scale: float = _tuned(
        0.5, "x", "share of the fit's own relative sigma (residual, bootstrap noise, default) "
        "a held-out single run's error shows: the interval's sigma is this times it times the "
        "rate's sensitivity to the loop's costs, in quadrature with the storage's and the "
        "untested assumptions'", f"{INTERVAL_GRID} (9974e67); {SCRIPTS_GRID} (3364bb2)")
    storage_sigma_scale: float = _tuned(
        0.3, "x", "share of the storage's relative sigma (`Model.storage_rel_sigma`, else "
        "the noise floor) a held-out single run the storage holds shows: the interval's "
        "sigma is this times it times the rate's sensitivity to the storage",
        f"{SIDES_GRID} (d5f2115)")
    storage_sigma_floor: float = _tuned(
        0.0125, "", "the least relative error (one sigma) of a rate the storage sets: a "
        "throttle's steady rate against the efficiency the fit's cold windows gave it, which no "
        "fit's residual narrows; where the fit measured the throttle, the storage's part of "
        "the interval's sigma is at least this times the rate's sensitivity to the storage (a "
        "throttle at face value carries `throttle_sigma` alone)",
        f"{KINK_GRID} (4d7123c); face value spared: bench42-45 (4f5b2e1)")
    throttle_sigma: float = _tuned(
        0.005, "", "relative error (one sigma) of a throttle taken at face value where no "
        "fit run was held by one (`Assume.THROTTLE`), weighted by the rate's sensitivity to "
        "the storage", f"{SIDES_GRID} (d5f2115)")
    cpu_step_sigma: float = _tuned(
        0.07, "", "relative error (one sigma) of a rate the loop sets where the step runs on the "
        "CPU beside the loader (`Model.step_on_cpu`): how the step's threads and the workers "
        "share the cores, which no law of the model pins, weighted by the rate's sensitivity "
        "to the loop's costs", f"{SIDES_GRID} (d5f2115)")
    settled: float = _tuned(
        0.01, "", "cores left to the job, found within this share, are simulated no further",
        "no grid recorded: the simulation's own noise (ec56db1)")
    stretch_steps: int = _tuned(
        3, "steps", "secant steps (log rate against log stretch) solving a CPU count's "
        "stretch of a step on the CPU (`fit_loop.fit_stretch`; the first takes the cached rate "
        "as inversely proportional to it)",
        "no grid recorded: the third step moves the scripts' stretches by under 1% (1598aa5)")
    saturated_share: float = _tuned(
        0.9, "", "a cached run of a step on the CPU that kept at least this share of its cores "
        "busy had them full: more workers than it had share the same cores (`laws.held_gain`)",
        "cores busy at 2 CPUs on /tmp/dsa-scripts-bench21 and bench22 (scripts bench, tuning "
        "grids): full 0.95-0.99 (timm, examples: more workers gained -1% to +2% cached), "
        "0.70-0.72 (lightning with 1 worker: +15% to +65%) (b59844c)")
    seeds: int = _tuned(3, "permutations", "permutations averaged per disk prediction",
                        "no grid recorded; run time against the permutations' spread (ef446db)")
    sim_samples: int = _tuned(
        6000, "samples", "samples per simulated epoch; larger epochs are simulated on a sample",
        "no grid recorded; run time of a prediction (ef446db)")
    rated_batches: int = _tuned(
        20000, "batches", "iterations per epoch a simulated timeline is stretched to, at most",
        "no grid recorded; a prediction on 128 shards x 1M samples (a4c7fb3)")
    max_chunks: int = _tuned(
        8, "runs", "a batch is simulated as at most this many runs of consecutive samples",
        "no grid recorded; run time of a prediction (ef446db)")
    # ---- the what-if's decisions (whatif/decision.py, nextrun.py, fold.py) ----
    tie_tolerance: float = _tuned(
        0.02, "", "job times closer than this (relative) are ties, broken by cost",
        "not tuned: the noise floor's size (6b66655)")
    chance_min: float = _tuned(
        0.02, "", "a configuration less likely than this to change the answer is not measured "
        "next", "no grid recorded; judged by bench/adaptive.py (0a89001)")
    same_rel: float = _tuned(
        0.01, "", "budgets whose predictions differ by less than this are folded into one row",
        "the simulated permutations' difference between budgets (2ab4ddd)")
    same_s: float = _tuned(0.005, "s", "stalls closer than this are the same in a folded row",
                           "the table's rounding: 0.00 is 0.00 (2ab4ddd)")
    # ---- the measurement (analysis/) ----
    input_bound_pct: float = _tuned(
        5.0, "% of time", "a job is input-bound when more than this of its time waits for data",
        "TF profiler's convention, not tuned (9ac3a24)")
    highly_input_bound_pct: float = _tuned(
        20.0, "% of time", "a job is highly input-bound above this",
        "TF profiler's convention, not tuned (9ac3a24)")
    wide_spread_pct: float = _tuned(
        10.0, "% of median", "an IQR of the iteration times wider than this is warned about",
        "torch.utils.benchmark's convention, not tuned (9ac3a24)")
    others_cpu_pct: float = _tuned(
        10.0, "% of the run's CPU", "others' share of the run's CPU capacity above which the run "
        "was disturbed", "no grid recorded (507397a)")
    host_drift_pct: float = _tuned(
        10.0, "%", "the machine's own speed (a decode timed on one CPU around each run, "
        "`resources/hostspeed.py`) differing between a configuration's runs by more than this "
        "is named beside the table",
        "the probe's spread on the 2-core VM: 2.18-2.24 ms a decode (3%) around back-to-back "
        "runs, a single 0.1-s phase up to 50% slow now and then, the faster of two counted; "
        "bench/machine_drift.py's 20-s windows within +-9% (d17d92c)")
    host_slow_pct: float = _tuned(
        30.0, "%", "a probe (`resources/hostspeed.py`) this much slower than the sweep's median "
        "reading so far: the machine was slowed, the run before it is measured again after the "
        "machine comes back (`--host-retries`)",
        "bench/scripts_accuracy.py's bench23-28 (324 runs, 2 probes each): every reading within "
        "+18% of its sweep's median but three, 57-70% over it, each after a run 20-40% slower "
        "than its configuration's other runs (bench25, bench26, bench28) (74c6496)")
    work_slow_pct: float = _tuned(
        8.0, "%", "a run whose dataset transforms cost this much more CPU a sample than the "
        "cheapest of its configuration's runs (its repeats; `analysis/workspeed.py`): the machine "
        "was slowed during it, the run is measured again after the sweep (`--host-retries`)",
        "a timm-style and a Lightning-style script, 4 configurations x 3 repeats each over 1-2 "
        "CPUs, cached and disk (/tmp/gauge, 2026-11-29): with the probe quiet, timm's repeats "
        "lay within -1/+9% of their configuration's median, Lightning's within -13/+23%, and in "
        "every configuration the rate fell as the reading rose (runs 10-13% slower at +10..+23%); "
        "across configurations the readings differ by 20-25% (bench32's examples-style script, "
        "disk against cached, 2 CPUs against 1), so only repeats are compared (41f2127); "
        "against their cheapest, not their median: bench33's Lightning 3-worker cached repeats "
        "at 2 CPUs read +43% and +50% over their first (the median a slowed run); over the 20 "
        "repeated configurations of bench33/34 and /tmp/gauge, every repeat within 5% of its "
        "configuration's fastest rate read within 6.6% of its cheapest, and every repeat over "
        "8% was 7-26% slower (e1b8de2)")
    work_outlier_pct: float = _tuned(
        40.0, "%", "a run without a throttle whose dataset transforms cost this much more CPU a "
        "sample than the sweep's cheapest such run, whatever its configuration "
        "(`analysis/workspeed.over_the_sweep`): a configuration's only run, slowed, is measured "
        "again after the sweep (`--host-retries`)",
        "bench/scripts_accuracy.py's bench32-36, 27 sweeps, about 108 first tries: configurations' "
        "readings lay up to +39% over their sweep's cheapest where the rates said no run was "
        "slowed (an examples-style script's 2-CPU disk run); three lay over 40%, +43, +46 and "
        "+62%, each 8-33% slower than its configuration with the other worker count (bench36's "
        "Lightning 1-worker unthrottled disk run at 1 CPU: 161.3 samples/s, leave-one-out +39.3%) "
        "(ed8b6c1)")
    others_machine_pct: float = _tuned(
        40.0, "% of the other CPUs", "others' share of the CPUs the run was not given above which "
        "a neighbour was busy (the harness's own work takes a few percent)",
        "no grid recorded: the harness's own load against a busy neighbour (68f99b8)")
    others_read_share: float = _tuned(
        0.10, "", "others' reads on the dataset's disk, as a share of the run's own, above which "
        "the run was disturbed", "no grid recorded (507397a)")
    others_read_floor_bytes: int = _tuned(
        4 << 20, "B", "reads by others under this do not matter", "not tuned (507397a)")
    holds_margin_pct: float = _tuned(
        10.0, "percentage points", "a node's share of time waiting for data must exceed every "
        "other node's by this to name its loader as holding the job",
        "the committed 2-rank fixture: ranks of one node differ by 8 points (b3176ad)")
    holds_ratio: float = _tuned(
        1.5, "x", "... and be this many times every other node's share",
        "the committed 2-rank fixture (b3176ad)")
    n_resamples: int = _tuned(
        1000, "resamples", "block bootstrap resamples per interval",
        "not tuned: a common bootstrap size (507397a)")
    cached_read_share: float = _tuned(
        0.05, "", "of the data a cached run's measured window went through: read from storage "
        "beyond this, the run was not cached", "not tuned: a twentieth of the data, well above "
        "the job's own lazily read code (at most 1.85% of the data in the windows of the 191 "
        "cached runs of bench14-20, the committed fixtures and the demo) (8208211)")
    resident_share: float = _tuned(
        0.95, "", "of the warmed bytes: less resident when a cached run starts is not cached",
        "no grid recorded (bdf23b6)")
    # ---- the adaptive runs (instrument/untilci.py, adaptive.py) ----
    stall_factor: float = _tuned(
        2.0, "x median", "an iteration this many times the median is a stall (its period "
        "sizes the batch-means blocks)", "no grid recorded (0a89001)")
    min_blocks: int = _tuned(
        5, "blocks", "batch means: at least this many blocks, each longer than a stall period",
        "no grid recorded: the batch-means t-interval needs a few blocks (0a89001)")
    lead_iters: int = _tuned(
        3, "iterations", "several ranks: rank 0 names an iteration this far ahead, all stop there",
        "no grid recorded (0a89001)")
    target_pct: float = _tuned(
        5.0, "% of rate", "the adaptive recommendation's interval, plus or minus",
        "no grid recorded; judged by bench/adaptive.py (0a89001)")
    max_pick_runs: int = _tuned(
        3, "runs", "a measured pick still wider than the target is run again up to this many "
        "times", "no grid recorded; the demo's pick reached ±5% in 2 runs (fa1079f)")
    epoch_seen_max_iters: int = _tuned(
        1000, "batches", "an epoch this short is seen to its end before a run may stop early",
        "no grid recorded; the checkpoint script's 64-batch epochs (e69622e)")

    def describe(self) -> list[dict[str, Any]]:
        """Every setting: name, value, unit, what it is, where it was tuned."""
        return [{"name": f.name, "value": getattr(self, f.name), **f.metadata}
                for f in fields(self)]


SETTINGS = Settings()
