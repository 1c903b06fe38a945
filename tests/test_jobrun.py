"""The job as it ran: the script's own loader knobs and device, read from its runs, and the
what-if model, the report and the advice built on them.

tests/data/script_cpu holds the runs of tests/scripts/train_examples.py (pytorch/examples
style: resnet18 trained on the CPU, pinned memory), 192 JPEGs of about 16 KB, with its own
`-j 3 -b 12` and the harness's defaults left as they are (`-j 2 -b 32 --device sim`):

    harness.py --data DATA --epochs 2 --warmup 2 --cpus 1,2 --storage-bw none,2M --no-plots \\
        tests/scripts/train_examples.py DATA -j 3 -b 12 --epochs 2 --img-size 32

measured on this shared machine under heavy load (other processes used 70-90% of the
runs' CPUs; at 2 CPUs the step's two threads ran at 1.5 samples/s), monitor samples thinned
to about 40 per run (the counters are cumulative).
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import harness

from dsanalyze import store
from dsanalyze.analysis import stalls
from dsanalyze.analysis.jobrun import PERMUTATION, SAME_ORDER, JobAsRun, job_as_run
from dsanalyze.analysis.notes import SetEpochMissing
from dsanalyze.analysis.summary import summarize
from dsanalyze.errors import ConfigError
from dsanalyze.instrument.api import loader_settings
from dsanalyze.jobs.datasets import make_dataset
from dsanalyze.report import summary as report
from dsanalyze.report import whatif_text
from dsanalyze.report.notes import notes as report_notes
from dsanalyze.whatif import advice
from dsanalyze.whatif import api as whatif
from dsanalyze.whatif.documents import UnmadeWhy

DATA = Path(__file__).parent / "data"
SCRIPTS = Path(__file__).parent / "scripts"


@pytest.fixture(scope="module")
def runs() -> list:
    return store.load_runs(DATA / "script_cpu")


def test_the_script_s_own_knobs_not_the_harness_defaults(runs) -> None:
    job = runs[0].spec.job
    assert (job.workers, job.batch_size, job.device) == (2, 32, "sim")  # harness defaults
    for run in runs:
        ran = job_as_run(run)
        assert (ran.workers, ran.batch_size, ran.device, ran.ranks) == (3, 12, "cpu", 1)
        assert ran.pin_memory and not ran.persistent_workers and ran.prefetch_factor == 2
        assert ran.step_uses_cpu and ran.script
        assert JobAsRun.from_dict(ran.to_dict()) == ran


def test_a_dataloader_records_every_knob_the_model_reads() -> None:
    loader = torch.utils.data.DataLoader(list(range(10)), batch_size=5, num_workers=2,
                                         prefetch_factor=3, persistent_workers=True)
    assert loader_settings(loader) == {"kind": "pytorch", "workers": 2, "batch_size": 5,
                                       "prefetch_factor": 3, "pin_memory": False,
                                       "persistent_workers": True, "same_order": True}


class _Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(range(10))


@pytest.mark.parametrize("make, order", [
    (lambda d: torch.utils.data.DataLoader(d, batch_size=2), SAME_ORDER),  # shuffle=False
    (lambda d: torch.utils.data.DataLoader(d, batch_size=2, shuffle=True), PERMUTATION),
    (lambda d: torch.utils.data.DataLoader(d, sampler=torch.utils.data.DistributedSampler(
        d, num_replicas=2, rank=0, shuffle=False)), SAME_ORDER),
    (lambda d: torch.utils.data.DataLoader(d, sampler=torch.utils.data.DistributedSampler(
        d, num_replicas=2, rank=0)), PERMUTATION),
    (lambda d: torch.utils.data.DataLoader(_Stream(), batch_size=2), PERMUTATION),  # its own
])
def test_a_loader_that_does_not_shuffle_reads_the_same_order_every_epoch(make, order) -> None:
    """The order the cache simulation replays (`cachesim.epoch_order(same_order=...)`), read
    from the training loader's sampler as the run recorded it."""
    run = store.load_runs(DATA / "script_cpu")[0]
    loader = make(list(range(40)))
    epochs = []
    for epoch in range(2):  # as a training loop runs them (a DistributedSampler told its epoch)
        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)
        epochs.append([int(x) for b in loader for x in b])
    assert (epochs[0] == epochs[1]) == (order == SAME_ORDER) or isinstance(loader.dataset, _Stream)
    rank = replace(run.ranks[0], extra={**run.ranks[0].extra, "loader": loader_settings(loader)})
    assert job_as_run(replace(run, ranks=[rank])).read_order == order


def test_the_built_in_job_keeps_its_sim_device() -> None:
    """The built-in job's step is the sim device whatever torch device its ranks record."""
    run = store.load_runs(DATA / "report_sweep")[0]
    assert run.ranks[0].extra["device"] == "cpu"
    assert job_as_run(run).device == "sim" and not job_as_run(run).step_uses_cpu


def test_the_model_uses_the_script_s_knobs_and_a_step_per_cpu_count(runs) -> None:
    """The step on the CPU is fitted at each CPU count on that count's synthetic run (3
    workers, batch 12: samples per iteration 12 / its rate), not a median across counts."""
    model = whatif.fit(runs)
    assert (model.workers, model.batch_size, model.prefetch_factor) == (3, 12, 2)
    assert model.step_on_cpu
    synthetic = {whatif.run_cpus(r): r for r in runs if r.mode.value == "synthetic"}
    steps = dict(model.step_s_by_cpus)
    assert sorted(steps) == [1, 2]
    for cpus, run in synthetic.items():
        assert steps[cpus] == pytest.approx(12 / stalls.run_rate(run).rate_sps)
    assert "step runs on the CPU" in whatif_text.assumptions(model)
    assert "step takes no CPU" not in whatif_text.assumptions(model)


def test_a_cpu_step_at_an_unmeasured_cpu_count_is_refused_with_the_reason(runs) -> None:
    model = whatif.fit(runs)
    with pytest.raises(ConfigError, match=r"measured at \[1, 2\] CPU\(s\) only: its time at "
                                          r"4 CPUs is not known.*--cpus 4"):
        whatif.predict(model, whatif.Config.of(4))
    assert whatif.predict(model, whatif.Config.of(2)).rate_sps > 0
    assert advice.default_cpus(runs) == [1, 2]  # the advice asks only what it can answer
    assert advice.default_grid(runs)[3] == [3, 6, 12]  # workers: as run, 2x, 4x


def test_the_cpu_step_competes_with_the_workers(runs) -> None:
    """At 1 CPU, on a quiet machine (the fit's outside load set to 0), the step and the
    workers share the one core: a sample costs its share of the step plus its prep, and its
    share of the workers' restarts at each epoch start (not persistent), in series (within
    10%: the receive delay and the epoch ends add a little), not the slower of the two as
    with a step that leaves the CPU free."""
    model = whatif.fit(runs)
    quiet = replace(model, others_cpu_s_per_sample=0.0, others_disk_cpu_s_per_sample=0.0)
    one = whatif.predict(quiet, whatif.Config.of(1))
    step_per_sample = dict(model.step_s_by_cpus)[1] / 12
    restarts = (model.workers * model.restart_cpu_s + model.restart_main_cpu_s) \
        / model.samples_per_epoch
    serial = step_per_sample + model.prep_cpu_s + model.main_cpu_s / 12 + restarts
    assert 1 / one.rate_sps == pytest.approx(serial, rel=0.10)
    assert 1 / one.rate_sps > 1.3 * max(step_per_sample, model.prep_cpu_s)
    # the machine's other load, measured with the runs, never gives the job more
    assert whatif.predict(model, whatif.Config.of(1)).rate_sps <= one.rate_sps


def _tenant(run, cores: float):
    """The run with another tenant busy on `cores` of the machine all along: every monitor
    sample's machine-wide busy time grows by cores x the time since the first sample."""
    t0 = run.monitor[0]["unix_s"] if run.monitor else 0.0
    return replace(run, monitor=[{**m, "machine_busy_s": m["machine_busy_s"]
                                  + cores * (m["unix_s"] - t0)} if "machine_busy_s" in m else m
                                 for m in run.monitor])


@pytest.mark.parametrize("cores", [0.3, 0.9])
def test_another_tenant_s_load_is_not_charged_to_the_job(runs, cores) -> None:
    """A load the job's data does not cause, the same in every run (the synthetic ones too),
    leaves the job's outside work per sample and its predictions where they were: only the
    outside work beyond the synthetic runs' (reads, decode, the limiter) is the job's."""
    model = whatif.fit(runs)
    loaded = whatif.fit([_tenant(r, cores) for r in runs])
    assert loaded.others_cpu_s_per_sample == pytest.approx(model.others_cpu_s_per_sample,
                                                           abs=2e-4)
    assert loaded.others_disk_cpu_s_per_sample == pytest.approx(
        model.others_disk_cpu_s_per_sample, abs=2e-4)
    for cpus in (1, 2):
        assert whatif.predict(loaded, whatif.Config.of(cpus)).rate_sps == pytest.approx(
            whatif.predict(model, whatif.Config.of(cpus)).rate_sps, rel=0.01)


def test_the_report_names_the_script_s_batch_and_workers(runs) -> None:
    md = report.render_markdown(report.report_blocks(summarize(runs), []))
    assert "3 workers per rank, batch 12 per rank, prefetch 2, 1 rank(s), pinned memory, " \
        "device cpu" in md
    assert "batch 32" not in md and "2 workers per rank" not in md


def test_validation_of_a_cpu_step_says_why_it_does_not_extrapolate(runs) -> None:
    val = whatif.validate(runs)
    loo, extrapolation = val.splits
    assert loo.checks
    assert not extrapolation.checks and extrapolation.unmade.why is UnmadeWhy.REFUSED
    assert "step runs on the CPU" in extrapolation.unmade.error


def test_a_prep_cost_the_rates_cannot_determine_falls_back_to_the_workers_timing(runs) -> None:
    """Cached runs slower than their step alone allows even with free prep (here made 3x
    slower; a machine's other load did it to this fixture while that load was charged to
    the job): the solver ends at its limit (1 us a sample). That is no finding: the fit
    takes the workers' own per-transform timing, and says which value it dropped and from
    which run. Unaltered, the rates give a prep cost within 10% of that timing."""
    from dsanalyze.analysis import transforms
    from dsanalyze.whatif import bounds

    timed = statistics.median(transforms.sum_s_per_sample(transforms.run_table(r))
                              for r in runs if r.mode.value == "cached")
    assert whatif.fit(runs).prep_cpu_s == pytest.approx(timed, rel=0.10)
    slow = [_slower(r, 3.0) if r.mode.value == "cached" else r for r in runs]
    model = whatif.fit(slow)
    p = next(p for p in model.params if p.name == "prep_cpu_s_per_sample")
    assert bounds.PREP_CPU_S.holds(model.prep_cpu_s)
    assert model.prep_cpu_s == pytest.approx(timed)
    # dropped: the value at the solver's limit, fitted on the cached runs
    assert set(p.how.dropped.runs) == {r.run_id for r in slow if r.mode.value == "cached"}
    assert f"{p.how.dropped.value:.4g}" == "1e-06"


def _slower(run, factor: float):
    return replace(run, ranks=tuple(replace(k, iter_s=tuple(t * factor for t in k.iter_s),
                                            wait_s=tuple(w * factor for w in k.wait_s))
                                    for k in run.ranks))


def test_workers_that_do_not_persist_start_again_at_every_epoch(runs) -> None:
    """The script's DataLoader has no persistent workers (recorded): each steady epoch pays
    the workers' start-up again, and their restart CPU (its W workers share the C cores
    while nothing else runs: W X / min(W, C)), then the main process's share M on the one
    core in its first iteration, which a loader keeping them does not."""
    model = whatif.fit(runs)
    assert not model.persistent_workers and model.startup_s > 0
    kept = replace(model, persistent_workers=True)
    quiet = {"others_cpu_s_per_sample": 0.0, "others_disk_cpu_s_per_sample": 0.0}
    cfg = whatif.Config.of(1)
    again = whatif.predict(replace(model, **quiet), cfg).epoch_s
    once = whatif.predict(replace(kept, **quiet), cfg).epoch_s
    restart = model.restart_cpu_s * model.workers / min(model.workers, cfg.cpus) \
        + model.restart_main_cpu_s
    assert again - once == pytest.approx(model.startup_s + restart, rel=0.1)


@pytest.fixture(scope="module")
def sampled_images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """64 JPEGs of 160x120 pixels in 4 classes."""
    root = tmp_path_factory.mktemp("sampled") / "data"
    make_dataset(root, images=64, classes=4, size=(160, 120), seed=7)
    return root


@pytest.mark.parametrize("set_epoch", [False, True])
def test_a_sampler_whose_set_epoch_the_script_never_calls_reads_the_same_order(
        sampled_images, tmp_path, set_epoch) -> None:
    """tests/scripts/train_ddp_sampler.py shards an ImageFolder with a shuffling
    DistributedSampler. That sampler draws its permutation from `seed + epoch`, and only the
    script's `set_epoch` moves its epoch on (PyTorch's documentation of DistributedSampler),
    so a script that never calls it reads the same permutation every epoch. Measured over two
    epochs, the run records that order (the order the what-if simulates) and the report says
    what to call; the same script calling `set_epoch` permutes afresh and gets no note."""
    prefix = tmp_path / "r"
    assert harness("--data", sampled_images, "--prefix", prefix, "--modes", "cached",
                   "--epochs", 2, "--warmup", 1, "--no-plots", "--no-advice",
                   SCRIPTS / "train_ddp_sampler.py", sampled_images, "--epochs", 2,
                   *(["--set-epoch"] if set_epoch else [])) == 0
    (run,) = store.load_runs(prefix)
    loader = run.ranks[0].extra["loader"]
    assert loader.get("set_epoch_missing", False) is not set_epoch
    assert job_as_run(run).read_order == (PERMUTATION if set_epoch else SAME_ORDER)
    notes = [n for b in stalls.breakdowns([run]) for n in b.notes]
    unset = [n for n in notes if isinstance(n, SetEpochMissing)]
    assert len(unset) == (0 if set_epoch else 1)
    lines = report_notes(summarize([run]))
    assert any("set_epoch(epoch)" in line for line in lines) is not set_epoch
