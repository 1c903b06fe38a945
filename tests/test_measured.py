"""What a user script measured against what was asked (`analysis/window.py`), and a script
that stops at once with its own usage error."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
from conftest import harness

from dsanalyze import cli, store
from dsanalyze.analysis import measured
from dsanalyze.analysis.jobrun import JobAsRun
from dsanalyze.analysis.summary import summarize

pytestmark = pytest.mark.slow

# An ordinary first script: argparse, ImageFolder, a shuffled DataLoader, a small model on the CPU.
SCRIPT = '''
import argparse
import torch
import torchvision.datasets as datasets
import torchvision.transforms as T

parser = argparse.ArgumentParser()
parser.add_argument("data")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("-b", "--batch-size", type=int, default=16)
args = parser.parse_args()
dataset = datasets.ImageFolder(args.data, T.Compose([T.RandomResizedCrop(32), T.ToTensor()]))
loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                                     num_workers=1)
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 4))
optimizer = torch.optim.SGD(model.parameters(), 0.1)
for epoch in range(args.epochs):
    for images, target in loader:
        loss = torch.nn.functional.cross_entropy(model(images.to("cpu")), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
'''


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(SCRIPT))
    return path


def test_a_harness_option_after_the_script_stops_the_sweep_at_the_first_run(
        small_dataset, tmp_path, script, capsys):
    prefix = tmp_path / "r"
    rc = harness("--data", small_dataset, "--prefix", prefix, "--iters", 4, script,
                 small_dataset, "--cpus", "1,2")
    assert rc == 2
    err = capsys.readouterr().err
    assert "train.py: error: unrecognized arguments: --cpus 1,2" in err
    assert "options for the harness go before the script" in err
    (run,) = store.load_runs(prefix)  # the first of 3 runs, no other
    assert run.environment["script_exit"]["code"] == 2
    assert not list(prefix.glob("*.png"))  # no figure drawn from no data


def test_a_harness_option_after_the_script_without_data_is_named_by_the_discovery(
        small_dataset, tmp_path, script, capsys):
    """No --data: the discovery run meets the script's usage error and says what it means,
    as a measured run does (not "could not find the training data")."""
    prefix = tmp_path / "r"
    rc = harness("--prefix", prefix, "--iters", 4, script, small_dataset, "--cpus", "1")
    assert rc == 2
    err = capsys.readouterr().err
    assert "train.py: error: unrecognized arguments: --cpus 1" in err
    assert "options for the harness go before the script" in err
    assert "could not find the training data" not in err
    assert not (prefix / "runs").exists()  # nothing measured


def test_a_script_that_raises_at_start_stops_the_sweep_after_one_run(
        small_dataset, tmp_path, capsys):
    """It would raise the same way in the cached and disk runs: one run, then the error."""
    script = tmp_path / "broken.py"
    script.write_text(SCRIPT.replace("args = parser.parse_args()\n",
                                     "args = parser.parse_args()\nimport missing_module_xyz\n"))
    prefix = tmp_path / "r"
    rc = harness("--data", small_dataset, "--prefix", prefix, "--iters", 4, "--no-advice",
                 script, small_dataset)
    assert rc == 1
    err = capsys.readouterr().err
    assert "No module named 'missing_module_xyz'" in err
    assert "failed before its first batch, as it would in every mode" in err
    (run,) = store.load_runs(prefix)  # synthetic only: cached and disk were not started
    assert run.mode.value == "synthetic" and run.environment["first_failure"]["batches"] == 0


@pytest.mark.extended
def test_a_crash_after_the_first_batch_does_not_stop_the_sweep(small_dataset, tmp_path):
    """A failure after batches were yielded may belong to the mode: every mode still runs."""
    script = tmp_path / "late.py"
    script.write_text(SCRIPT.replace("        optimizer.step()\n",
                                     "        optimizer.step()\n        raise ValueError('late')\n"))
    prefix = tmp_path / "r"
    harness("--data", small_dataset, "--prefix", prefix, "--iters", 4, "--modes",
            "synthetic,cached", "--no-advice", "--no-plots", script, small_dataset)
    runs = store.load_runs(prefix)
    assert sorted(r.mode.value for r in runs) == ["cached", "synthetic"]
    assert all(r.environment["first_failure"]["batches"] >= 1 for r in runs)


def test_cpus_beyond_the_machine_are_refused_before_the_data_is_looked_at(tmp_path, capsys):
    """The path does not exist: had the scan come first, the error would be about it."""
    n = len(os.sched_getaffinity(0))
    rc = harness("--data", tmp_path / "no-such-data", "--prefix", tmp_path / "r", "--cpus",
                 f"1,{n + 2}", "--device", "sim")
    assert rc == 2
    err = capsys.readouterr().err
    assert f"--cpus {n + 2} but only {n} CPUs are available here" in err
    assert "no-such-data" not in err


def test_iters_beyond_the_script_and_the_device_it_used(small_dataset, tmp_path, script, capsys):
    prefix = tmp_path / "r"
    # 96 images, 16 per batch, 2 epochs: the script ends after 12 iterations
    rc = harness("--data", small_dataset, "--prefix", prefix, "--modes", "cached",
                 "--iters", 100, "--warmup", 2, "--no-plots", "--no-advice", script,
                 small_dataset)
    assert rc == 0
    said = "the script ended after 12 of 102 iterations (2 warm-up + 100 asked): measured 10"
    captured = capsys.readouterr()
    assert "[1/1] cached-cpusall: " in captured.err and said in captured.err  # the run
    assert f"note: {said} iteration(s) (every run)" in captured.out  # the table's notes
    assert "per epoch (96 samples) on device cpu;" in captured.out
    (run,) = store.load_runs(prefix)
    assert measured.short_run(run) == measured.ShortRun("cached-cpusall", 100, 12, 10, "iterations", 2)
    summary = summarize([run])
    # the job as the script ran it: its own DataLoader (batch 16, 1 worker), on the CPU
    ran = JobAsRun(ranks=1, batch_size=16, workers=1, prefetch_factor=2, pin_memory=False,
                   persistent_workers=False, device="cpu", loader="pytorch", script=True)
    assert summary.measured == measured.MeasuredWindow("cpu", 10, (measured.short_run(run),),
                                                       ran)
    assert cli.main(["report", str(prefix)]) == 0
    md = (prefix / "report.md").read_text()
    assert "device cpu" in md and "device sim" not in md
    assert "**Measured**: 10 iterations (100 iterations asked; the script ended first)" in md
    assert said in md and "None" not in md
