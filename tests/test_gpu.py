"""The cuda path, where a GPU exists: `make test-gpu` (pytest -m gpu).

- the iteration boundary synchronises the device before the clock is read, so
  a step's GPU time is charged to compute, not to the next data wait;
- two ranks over NCCL through the harness (needs two GPUs: NCCL refuses two
  ranks on one device);
- NVML samples of GPU utilisation and memory in the run's monitor;
- DALI `mixed` decoding (nvJPEG, output on the GPU) in every mode.

Every test is skipped, with the reason, where torch sees no CUDA device.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from conftest import harness

from dsanalyze.instrument.loader import IterationRecorder, TimedLoader
from dsanalyze.store import load_runs

CUDA = torch.cuda.is_available()
GPUS = torch.cuda.device_count() if CUDA else 0
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU: torch.cuda.is_available() "
                                 "is false on this machine")]
STEP_S = 0.05  # GPU time of one step in the sync test


def gpu_spin(seconds: float) -> Callable[[], None]:
    """A step that keeps the GPU busy for about `seconds` and returns at once on the host.

    `_sleep` counts clock cycles, and the clock rises under load: an idle H200 clocks
    345 MHz and a busy one 1980. Timed once on an idle GPU, the spin came out 2.8 times too
    short (18 ms for 50). The spin is timed until two timings agree within 5%, at the clock
    the loop will run at."""
    cycles = 10_000_000
    per_cycle_s = math.inf
    for _ in range(50):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.cuda._sleep(cycles)
        torch.cuda.synchronize()
        last, per_cycle_s = per_cycle_s, (time.perf_counter() - t0) / cycles
        if abs(per_cycle_s - last) < 0.05 * per_cycle_s:
            break
    n = int(seconds / per_cycle_s)
    return lambda: torch.cuda._sleep(n)


def small_batches(n: int):
    """A loader whose every batch is copied to the GPU on the legacy default stream:
    the copy waits for the GPU work queued before it."""
    for _ in range(n):
        yield torch.ones(256).cuda()


@pytest.mark.parametrize("sync", [True, False])
def test_iteration_boundary_charges_gpu_time_to_compute(sync):
    from dsanalyze.instrument.api import cuda_sync

    spin = gpu_spin(STEP_S)
    rec = IterationRecorder(sync=cuda_sync if sync else None)
    t0 = time.perf_counter()
    for _ in TimedLoader(small_batches(8), rec):
        launched = time.perf_counter()
        spin()
        assert time.perf_counter() - launched < STEP_S / 5  # asynchronous launch
    total_s = time.perf_counter() - t0
    waits, iters = rec.wait_s[1:], rec.iter_s[1:]
    assert sum(rec.iter_s) == pytest.approx(total_s, rel=0.05)
    assert min(iters) > 0.8 * STEP_S  # each iteration holds one step of GPU time
    if sync:  # synchronised before the clock: the step is compute, the wait is the copy
        assert max(waits) < 0.2 * STEP_S
    else:  # the unsynchronised boundary charges the GPU backlog to the next wait
        assert min(waits) > 0.6 * STEP_S


def cuda_job(*extra) -> tuple:
    return ("--device", "cuda", "-a", "resnet18", "-j", "2", "--warmup", "3", "--no-plots",
            "--timeout", "300", *extra)


@pytest.mark.skipif(GPUS < 2, reason=f"NCCL with 2 ranks needs 2 GPUs; this machine has {GPUS}")
def test_nccl_two_ranks_through_the_harness(small_dataset, tmp_path, monkeypatch):
    monkeypatch.setenv("NCCL_DEBUG", "INFO")  # the ranks' logs then name NCCL and its version
    prefix = tmp_path / "r"
    assert harness("--data", small_dataset, "--prefix", prefix, "--modes", "synthetic,cached",
                   "--nproc_per_node", 2, "-b", 16, "--iters", 10, *cuda_job()) == 0
    for run in load_runs(prefix):
        assert run.ok, run.error
        assert sorted(r.extra["device"] for r in run.ranks) == ["cuda:0", "cuda:1"]
        assert all(r.extra["world_size"] == 2 and len(r.iter_s) == 13 for r in run.ranks)
        assert "NCCL INFO" in Path(run.log_path).read_text()
        # the ranks step together: DDP's all-reduce holds the faster one
        ends = [r.start_unix_s + sum(r.iter_s) for r in run.ranks]
        assert abs(ends[0] - ends[1]) < 0.5


def test_nvml_samples_in_the_run_monitor(small_dataset, tmp_path):
    prefix = tmp_path / "r"
    assert harness("--data", small_dataset, "--prefix", prefix, "--modes", "synthetic",
                   "-b", 32, "--iters", 150, *cuda_job()) == 0
    (run,) = load_runs(prefix)
    assert run.ok, run.error
    # NVML sees every GPU of the machine, whatever CUDA_VISIBLE_DEVICES says
    assert re.fullmatch(r"[1-9]\d* GPU\(s\) sampled with NVML", run.environment["gpu"])
    gpu = [s["gpu"][0] for s in run.monitor if "gpu" in s]
    assert len(gpu) >= 5  # 0.2 s samples over a run of several seconds
    assert max(g["util_pct"] for g in gpu) > 20  # resnet18 training keeps the GPU busy
    assert min(g["mem_used_bytes"] for g in gpu) > 0
    assert max(g["mem_used_bytes"] for g in gpu) > 200e6  # model, activations, batch


def test_dali_mixed_decoding_in_all_modes(small_dataset, tmp_path):
    pytest.importorskip("nvidia.dali", reason="NVIDIA DALI is not installed (pip install "
                        "nvidia-dali-cuda120; make install does)")
    prefix = tmp_path / "r"
    batch = 16
    assert harness("--data", small_dataset, "--prefix", prefix, "--loader", "dali", "-b", batch,
                   "--modes", "synthetic,cached,disk,loader", "--iters", 8, *cuda_job()) == 0
    runs = {r.mode.value: r for r in load_runs(prefix)}
    assert sorted(runs) == ["cached", "disk", "loader", "synthetic"]
    for mode, run in runs.items():
        assert run.ok, (mode, run.error)
        (rank,) = run.ranks
        loader = rank.extra["loader"]
        assert (loader["kind"], loader["decoder_device"], loader["device_id"]) == \
            ("dali", "mixed", 0)
        assert rank.extra["device"] == "cuda:0"
        assert rank.samples == (batch,) * 11
    assert runs["disk"].io.cache_state["action"] == "evicted_per_file"
    # replay needs no decode: its waits are far below those of the decoding modes
    replay = max(runs["synthetic"].ranks[0].wait_s[3:])
    decode = sum(runs["loader"].ranks[0].wait_s[3:]) / 8
    assert replay < 0.005 and decode > replay

