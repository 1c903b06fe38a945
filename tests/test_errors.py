"""Bad input: one line, exit code 2 (1 for a failed run), runs already measured kept."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from conftest import harness

from dsanalyze import cli, launch
from dsanalyze.errors import CorruptSampleError, FailureKind
from dsanalyze.instrument import rank as rankenv
from dsanalyze.instrument.rank import RankFailure
from dsanalyze.store import load_runs


def error_lines(err: str) -> list[str]:
    """stderr without the progress lines (`[i/n] run-id: ...`, one per run)."""
    return [line for line in err.strip().splitlines() if not re.match(r"\[\d+/\d+\] ", line)]


def one_line_error(capsys) -> str:
    err = error_lines(capsys.readouterr().err)
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert "Traceback" not in err[0]
    return err[0]


@pytest.mark.parametrize("argv,code,match", [
    (["--data", "/nonexistent/dir"], 2, "does not exist"),
    (["--bogus-option"], 2, "unrecognized arguments: --bogus-option"),
    (["--data", "{data}", "--cpus", "64"], 2, "only"),
    (["--data", "{data}", "--cache", "lots"], 2, "cannot read cache size"),
    (["--data", "{data}", "--modes", "fast"], 2, "unknown mode 'fast'"),
    (["--data", "{data}", "no_such_train.py"], 2, "training script no_such_train.py not found"),
    (["--config", "/nonexistent.toml"], 2, "not found"),
])
def test_bad_input(small_dataset, tmp_path, capsys, argv, code, match):
    argv = [a.replace("{data}", str(small_dataset)) for a in argv]
    assert harness(*argv, "--prefix", tmp_path / "r", "--no-plots") == code
    assert match in one_line_error(capsys)
    assert not (tmp_path / "r" / "runs").exists()


@pytest.mark.parametrize("argv,match", [
    (["--storage-bw", "fast"], "cannot read storage bandwidth 'fast': write bytes such as"),
    (["--cache", "5x"], "cannot read cache size '5x': write 50%, 2G or none"),
])
def test_a_grid_value_that_does_not_parse_is_refused_before_the_discovery_run(tmp_path, capsys,
                                                                              argv, match):
    """A user's script without --data: its discovery run (seconds to minutes) came first,
    then the one-line error for a bandwidth that does not parse. Every value of the grid is
    read before anything slow."""
    script = Path(__file__).parent / "scripts" / "train_csv.py"
    prefix = tmp_path / "r"
    assert harness(*argv, "--prefix", prefix, "--no-plots", script, "--csv", tmp_path / "x.csv",
                   "--root", tmp_path) == 2
    assert match in one_line_error(capsys)
    assert not (prefix / "logs" / "discover.log").exists() and not (prefix / "runs").exists()


def test_empty_dataset(tmp_path, capsys):
    (tmp_path / "empty" / "class_a").mkdir(parents=True)
    assert harness("--data", tmp_path / "empty", "--prefix", tmp_path / "r") == 2
    assert "holds no image files" in one_line_error(capsys)


def truncated_jpeg(dataset: Path) -> bytes:
    """The first half of a real JPEG of the dataset: its header reads, its pixels do not."""
    data = next(dataset.rglob("*.jpg")).read_bytes()
    return data[:len(data) // 2]


@pytest.mark.parametrize("content", [b"\xff\xd8\xff\xe0 this is not a jpeg", truncated_jpeg])
def test_undecodable_image_is_a_corrupt_sample(small_dataset, tmp_path, content):
    from dsanalyze.jobs.image_classification import load_rgb

    bad = tmp_path / "bad.jpg"
    bad.write_bytes(content(small_dataset) if callable(content) else content)
    with pytest.raises(CorruptSampleError, match=rf"cannot decode image {bad}: .*replace it") as e:
        load_rgb(str(bad))
    assert FailureKind.of(e.value) is FailureKind.CORRUPT_SAMPLE


@pytest.mark.slow
def test_corrupt_jpeg_is_named_and_earlier_runs_kept(small_dataset, tmp_path, capsys):
    data = tmp_path / "data"
    shutil.copytree(small_dataset, data)
    bad = data / "class_001" / "broken.jpg"
    bad.write_bytes(truncated_jpeg(small_dataset))
    prefix = tmp_path / "r"
    # synthetic replays one batch (may or may not hit the file); cached reads every file
    rc = harness("--data", data, "--prefix", prefix, "--modes", "cached,disk", "-b", 8, "-j", 1,
                 "--epochs", 1, "--warmup", 0, "--sim-step-ms", 1, "--no-plots")
    assert rc == 2
    line = one_line_error(capsys)
    assert "cannot decode image" in line and str(bad) in line
    runs = load_runs(prefix)
    assert [r.run_id for r in runs] == ["cached-cpusall"] and runs[0].status == "failed"
    assert runs[0].failure is FailureKind.CORRUPT_SAMPLE
    assert line == f"error: {runs[0].error}" and "remove or replace it" in line


@pytest.mark.slow
def test_crashing_rank_fails_the_run(small_dataset, tmp_path, capsys):
    prefix = tmp_path / "r"
    rc = harness("--data", small_dataset, "--prefix", prefix, "--modes", "synthetic",
                 "--nproc_per_node", 2, "--device", "cpu", "-a", "no_such_model", "-b", 2,
                 "-j", 0, "--iters", 2, "--no-plots", "--timeout", 120)
    assert rc == 1
    out = capsys.readouterr()
    err = error_lines(out.err)
    # both ranks fail the same way; the first to crash is named, and the sweep stops: the
    # script failed before its first batch, as it would in every mode
    assert len(err) == 1 and re.search(r"synthetic-cpusall: rank [01] crashed", err[0])
    assert "before its first batch" in err[0]
    assert "no_such_model" in err[0] or "Unknown model" in err[0]
    (run,) = load_runs(prefix)
    assert run.status == "failed" and Path(run.log_path).is_file()


def test_dsanalyze_unknown_subcommand(capsys):
    assert cli.main(["frobnicate"]) == 2
    assert "invalid choice" in one_line_error(capsys)


def test_profile_subcommand_takes_harness_options(tmp_path, capsys):
    assert cli.main(["profile", "--data", str(tmp_path / "missing"), "--prefix",
                     str(tmp_path / "r")]) == 2
    assert "does not exist" in one_line_error(capsys)


CRASHING_SCRIPT = """
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

dist.init_process_group("gloo")
loader = DataLoader(TensorDataset(torch.arange(64.0)), batch_size=4, shuffle=True)
for i, (x,) in enumerate(loader):
    if dist.get_rank() == 1 and i == 2:
        raise RuntimeError("boom on rank 1")
    dist.all_reduce(torch.ones(1))  # rank 0 would wait here forever for rank 1
"""


@pytest.mark.slow
def test_one_crashing_rank_stops_the_other(small_dataset, tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(CRASHING_SCRIPT)
    prefix = tmp_path / "r"
    rc = harness("--data", small_dataset, "--prefix", prefix, "--modes", "cached",
                 "--nproc_per_node", 2, "--iters", 20, "--warmup", 1, "--no-plots",
                 "--timeout", 120, script)
    assert rc == 1
    err = error_lines(capsys.readouterr().err)
    assert len(err) == 1 and "rank 1 crashed: RuntimeError: boom on rank 1" in err[0]
    (run,) = load_runs(prefix)
    assert run.status == "failed" and run.duration_s < 60  # the other rank was stopped


@pytest.mark.slow
def test_timeout_is_recorded_and_kills_the_job(small_dataset, tmp_path, capsys):
    prefix = tmp_path / "r"
    rc = harness("--data", small_dataset, "--prefix", prefix, "--modes", "synthetic",
                 "--iters", 100000, "--sim-step-ms", 50, "-j", 1, "--timeout", 8, "--no-plots")
    assert rc == 1
    assert "timed out after 8 s" in one_line_error(capsys)
    (run,) = load_runs(prefix)
    assert run.status == "timeout" and run.duration_s < 20


class CorruptAt:
    """A dataset whose sample 3 is a file that cannot be decoded."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> int:
        if i == 3:
            raise CorruptSampleError("cannot decode image /data/x/3.jpg: truncated; remove or "
                                     "replace it")
        return i


def _fail_in_rank(tmp_path, monkeypatch, main) -> RankFailure:
    monkeypatch.setenv(rankenv.ENV_RUN_DIR, str(tmp_path))
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(BaseException):  # noqa: B017 (whatever main raises is re-raised)
        rankenv.run_reporting_errors(main)
    return RankFailure.from_dict(json.loads((tmp_path / "rank1.error").read_text()))


@pytest.mark.parametrize("workers", [0, 1])
def test_corrupt_sample_is_recorded_as_its_kind(tmp_path, monkeypatch, workers):
    """Also when a DataLoader worker raised it (torch re-raises it with the
    worker's traceback as its text): the record keeps the original message."""
    from torch.utils.data import DataLoader

    def main() -> None:
        for _ in DataLoader(CorruptAt(), batch_size=2, num_workers=workers):
            pass
    failure = _fail_in_rank(tmp_path, monkeypatch, main)
    assert failure.rank == 1 and failure.kind is FailureKind.CORRUPT_SAMPLE
    assert failure.exception == "CorruptSampleError"
    assert failure.message == "cannot decode image /data/x/3.jpg: truncated; remove or replace it"
    assert "Traceback" in failure.traceback


def test_other_exceptions_are_crashes(tmp_path, monkeypatch):
    """Named by the first line of a message of several lines: what went wrong, before the
    hints (`test_a_cuda_assert_is_named_by_what_failed_not_by_its_last_hint`)."""
    def main() -> None:
        raise RuntimeError("boom\na hint on the last line")
    failure = _fail_in_rank(tmp_path, monkeypatch, main)
    assert failure.kind is FailureKind.CRASH and failure.line == "RuntimeError: boom"


def test_read_only_prefix_is_one_line_and_keeps_the_runs(small_dataset, tmp_path, capsys):
    prefix = tmp_path / "r"
    (prefix / "runs").mkdir(parents=True)
    kept = prefix / "runs" / "note.txt"
    kept.write_text("measured before")
    # root ignores mode bits: a read-only bind mount denies root too
    mounted = subprocess.run(["mount", "-o", "bind,ro", str(prefix), str(prefix)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot bind-mount read-only here: {mounted.stderr.strip()}")
    try:
        assert harness("--data", small_dataset, "--prefix", prefix, "--modes", "synthetic",
                       "--no-plots") == 2
        line = one_line_error(capsys)
        assert f"cannot write {prefix} (Read-only file system)" in line and "--prefix" in line
    finally:
        subprocess.run(["umount", str(prefix)], check=True)
    assert kept.read_text() == "measured before" and sorted(prefix.iterdir()) == [prefix / "runs"]


def test_full_disk_while_writing_a_run_keeps_the_runs_written(tmp_path):
    from dsanalyze.errors import StoreError
    from dsanalyze.store import write_json_atomic

    runs = tmp_path / "runs"
    runs.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(runs)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        write_json_atomic(runs / "a.json", {"x": 1})
        with pytest.raises(StoreError, match=r"cannot write .*b.json \(No space left on device\)"):
            write_json_atomic(runs / "b.json", {"x": "y" * (256 << 10)})
        assert [p.name for p in runs.iterdir()] == ["a.json"]  # no half-written file left
        assert (runs / "a.json").read_text() == '{\n "x": 1\n}'
    finally:
        subprocess.run(["umount", str(runs)], check=True)


class _Failing(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int):
        raise ValueError(f"sample {i} is broken")


def test_a_workers_exception_is_named_by_its_own_last_line() -> None:
    """A DataLoader worker's exception reaches the rank as its whole traceback in text: the
    original `ValueError: ...` line is what went wrong (a real worker process)."""
    loader = torch.utils.data.DataLoader(_Failing(), batch_size=2, num_workers=1)
    with pytest.raises(ValueError) as info:
        next(iter(loader))
    assert "Traceback (most recent call last)" in str(info.value)
    assert rankenv.failure_message(info.value) == "sample 0 is broken"


# torch's text for a failed kernel assert (c10's CUDA check), as a run on an H200 raised it
CUDA_ASSERT = ("CUDA error: device-side assert triggered\nSearch for `cudaErrorAssert' in "
               "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more "
               "information.\nCUDA kernel errors might be asynchronously reported at some other "
               "API call, so the stacktrace below might be incorrect.\nFor debugging consider "
               "passing CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable "
               "device-side assertions.\n")


def test_a_cuda_assert_is_named_by_what_failed_not_by_its_last_hint(tmp_path) -> None:
    """A message of several lines leads with what went wrong; the crash line adds the kernel's
    own assertion from the job's log (a class index past the model's classes)."""
    e = torch.AcceleratorError(CUDA_ASSERT)
    message = rankenv.failure_message(e)
    assert message == "CUDA error: device-side assert triggered"
    log = tmp_path / "run.log"
    log.write_text(
        "[rank0]: Traceback (most recent call last):\n"
        "/pytorch/aten/src/ATen/native/cuda/Loss.cu:245: nll_loss_forward_reduce_cuda_kernel_2d: "
        "block: [0,0,0], thread: [5,0,0] Assertion `t >= 0 && t < n_classes` failed.\n"
        "/pytorch/aten/src/ATen/native/cuda/Loss.cu:245: nll_loss_forward_reduce_cuda_kernel_2d: "
        "block: [0,0,0], thread: [9,0,0] Assertion `t >= 0 && t < n_classes` failed.\n"
        f"[rank0]: torch.AcceleratorError: {CUDA_ASSERT}")
    failure = RankFailure(0, FailureKind.CRASH, "AcceleratorError", message, "")
    said = launch._failure_message(1, {0: failure}, log)
    assert said.startswith("rank 0 crashed: AcceleratorError: CUDA error: device-side assert "
                           "triggered: Assertion `t >= 0 && t < n_classes` failed (log: ")
    assert "TORCH_USE_CUDA_DSA" not in said
    # another crash reads no assertion from the log
    other = RankFailure(0, FailureKind.CRASH, "RuntimeError", "boom", "")
    assert "Assertion" not in launch._failure_message(1, {0: other}, log)
