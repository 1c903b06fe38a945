"""The DALI loader: settings, sharding and shuffling, batches, timing, and the harness end to end.

Everything runs the real DALI CPU pipeline (`device_id=None`) on the
generated JPEGs of `small_dataset` (96 files, 4 classes). The `mixed`
(nvJPEG) path needs a GPU and is not exercised here.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

dali_pipeline = pytest.importorskip("dsanalyze.jobs.dali_pipeline")

from conftest import DATA_DIR as DATA  # noqa: E402
from conftest import harness, needs_cgroups  # noqa: E402
from nvidia.dali import fn, pipeline_def  # noqa: E402
from nvidia.dali.plugin.pytorch import DALIClassificationIterator, LastBatchPolicy  # noqa: E402

from dsanalyze import store  # noqa: E402
from dsanalyze.analysis import stalls  # noqa: E402
from dsanalyze.analysis.jobrun import (  # noqa: E402
    PERMUTATION,
    SAME_ORDER,
    JobAsRun,
    job_as_run,
)
from dsanalyze.errors import CorruptSampleError, DatasetError  # noqa: E402
from dsanalyze.instrument import datafiles  # noqa: E402
from dsanalyze.instrument import rank as rankenv  # noqa: E402
from dsanalyze.instrument.api import loader_settings, shuffles  # noqa: E402
from dsanalyze.instrument.loader import IterationRecorder, TimedLoader  # noqa: E402
from dsanalyze.jobs.dali_pipeline import DaliSettings  # noqa: E402
from dsanalyze.records import RankRecord  # noqa: E402
from dsanalyze.whatif import api as whatif  # noqa: E402

FILES = 96
CLASSES = 4
# Normalised pixel range: (0 - mean) / std .. (1 - mean) / std over the three channels.
PIXEL_MIN = min((0 - m) / s for m, s in zip((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)))
PIXEL_MAX = max((1 - m) / s for m, s in zip((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)))


def cpu_settings(batch_size: int, shard_id: int = 0, num_shards: int = 1,
                 threads: int = 2) -> DaliSettings:
    return DaliSettings(batch_size=batch_size, num_threads=threads, threads_requested=threads,
                        thread_budget=None, device_id=None, decoder_device="cpu",
                        shard_id=shard_id, num_shards=num_shards, seed=0)


@pytest.mark.parametrize("requested,budget,expected", [
    (2, None, 2),  # no budget given: -j as asked
    (0, None, 1),  # -j 0 (DataLoader in the main process): DALI still needs a thread
    (4, 2, 2),  # capped by the CPU budget
    (1, 4, 1),  # fewer than the budget: as asked
    (0, 1, 1),
    (3, 1, 1),
])
def test_thread_count(requested: int, budget: int | None, expected: int) -> None:
    assert dali_pipeline.thread_count(requested, budget) == expected


@pytest.mark.parametrize("device,env_threads,workers,expected", [
    (torch.device("cpu"), None, 2, (None, "cpu", 2, None)),
    (torch.device("cpu"), "1", 4, (None, "cpu", 1, 1)),
    (torch.device("cuda", 1), "8", 4, (1, "mixed", 4, 8)),  # settings only: no GPU touched
])
def test_settings_from_args(monkeypatch: pytest.MonkeyPatch, device: torch.device,
                            env_threads: str | None, workers: int,
                            expected: tuple[int | None, str, int, int | None]) -> None:
    if env_threads is None:
        monkeypatch.delenv(rankenv.ENV_THREADS, raising=False)
    else:
        monkeypatch.setenv(rankenv.ENV_THREADS, env_threads)
    args = argparse.Namespace(batch_size=16, workers=workers, seed=3)
    s = dali_pipeline.settings_from_args(args, world=2, rank=1, device=device)
    assert (s.device_id, s.decoder_device, s.num_threads, s.thread_budget) == expected
    assert (s.shard_id, s.num_shards, s.seed, s.threads_requested) == (1, 2, 3, workers)
    assert s.to_dict()["kind"] == "dali"
    assert s.to_dict()["prefetch_queue_depth"] == 2
    assert DaliSettings.from_dict(s.to_dict()) == s


@pipeline_def
def _names_pipeline(root: str, s: DaliSettings):  # noqa: ANN202
    jpegs, labels = dali_pipeline.file_reader(root, s)
    return fn.get_property(jpegs, key="source_info"), labels


def _epoch_files(root: Path, shard_id: int, num_shards: int, batch: int, epochs: int
                 ) -> list[list[str]]:
    """The files the job's reader gives one shard, per epoch, in order."""
    s = cpu_settings(batch, shard_id, num_shards)
    pipe = _names_pipeline(str(root), s, batch_size=batch, num_threads=1, device_id=None, seed=0)
    pipe.build()
    per_epoch = FILES // num_shards // batch
    out = []
    for _ in range(epochs):
        names: list[str] = []
        for _ in range(per_epoch):
            info, _ = pipe.run()
            names += [bytes(info.at(i)).decode() for i in range(len(info))]
        out.append(names)
    return out


def test_shards_disjoint_and_reshuffled_each_epoch(small_dataset: Path) -> None:
    shards = [_epoch_files(small_dataset, r, 2, 8, epochs=2) for r in range(2)]
    everything = sorted(str(p.relative_to(small_dataset)) for p in small_dataset.rglob("*.jpg"))
    for epoch in range(2):
        a, b = shards[0][epoch], shards[1][epoch]
        assert len(a) == len(b) == FILES // 2
        assert not set(a) & set(b)  # disjoint shards
        assert sorted(a + b) == everything  # together: the whole dataset, once
    assert shards[0][0] != sorted(shards[0][0])  # epoch 1 is shuffled too
    assert set(shards[0][0]) != set(shards[0][1])  # a fresh global permutation per epoch


@pytest.mark.parametrize("num_shards,batch,expected_batches", [
    (1, 16, 6),  # 96 / 16
    (2, 8, 6),  # 48 per shard / 8
    (2, 10, 4),  # 48 // 10: the padded partial batch is dropped
    (3, 7, 4),  # 32 // 7
])
def test_iterator_batches(small_dataset: Path, num_shards: int, batch: int,
                          expected_batches: int) -> None:
    it = dali_pipeline.build_iterator(str(small_dataset), cpu_settings(batch, 0, num_shards))
    assert len(it) == expected_batches
    for _ in range(2):  # each epoch a full pass, reset by iter()
        batches = list(it)
        assert len(batches) == expected_batches
        for b in batches:
            images, labels = dali_pipeline.images_labels(b)
            assert images.shape == (batch, 3, 224, 224) and images.dtype == torch.float32
            assert labels.shape == (batch,) and labels.dtype == torch.int64
            assert 0 <= int(labels.min()) and int(labels.max()) < CLASSES
            assert PIXEL_MIN - 1e-3 <= float(images.min()) < float(images.max()) <= PIXEL_MAX + 1e-3


def test_too_few_images_per_rank(small_dataset: Path) -> None:
    with pytest.raises(DatasetError, match="fewer than one batch of 64 per rank"):
        dali_pipeline.build_iterator(str(small_dataset), cpu_settings(64, 0, 2))


@pytest.mark.parametrize("every", [2, FILES])  # half the files (the first batch), or one file
def test_corrupt_file_is_a_dataset_error(small_dataset: Path, tmp_path: Path, every: int) -> None:
    root = tmp_path / "data"
    shutil.copytree(small_dataset, root)
    for path in sorted(root.rglob("*.jpg"))[::every]:
        path.write_bytes(b"not a jpeg" * 100)
    with pytest.raises(CorruptSampleError, match="cannot decode an image under"):
        for _ in dali_pipeline.build_iterator(str(root), cpu_settings(16)):
            pass


def test_user_classification_iterator_is_timed(small_dataset: Path) -> None:
    """A user's loop over a DALIClassificationIterator, reset() by hand, under TimedLoader."""
    batch, step_s, warmup = 16, 0.02, 1
    pipe = dali_pipeline.build_pipeline(str(small_dataset), cpu_settings(batch))
    user_it = DALIClassificationIterator([pipe], reader_name=dali_pipeline.READER_NAME,
                                         last_batch_policy=LastBatchPolicy.DROP)
    per_epoch = len(user_it)
    recorder = IterationRecorder(rank=0, warmup=warmup)
    timed = TimedLoader(user_it, recorder)
    seen = []
    for _ in range(2):
        for data in timed:
            seen.append(int(data[0]["label"].shape[0]))
            time.sleep(step_s)  # the training step
        timed.reset()  # as NVIDIA's examples do: delegated to the DALI iterator
    recorder.finish()
    rec = RankRecord.from_dict(recorder.to_dict())
    assert per_epoch == FILES // batch == 6
    assert seen == [batch] * 2 * per_epoch
    assert rec.samples == (batch,) * 2 * per_epoch
    assert rec.epoch == (0,) * per_epoch + (1,) * per_epoch
    assert rec.warmup == warmup
    assert all(0 <= w <= it for w, it in zip(rec.wait_s, rec.iter_s))
    assert all(it >= step_s for it in rec.iter_s)


def _runs(prefix: Path) -> dict[str, store.RunResult]:
    return {r.mode.value: r for r in store.load_runs(prefix)}


@pytest.mark.slow
@pytest.mark.parametrize("nproc,batch,window", [
    pytest.param(1, 16, ("--iters", "5"), marks=pytest.mark.long),  # 40 s on this VM
    pytest.param(2, 8, ("--epochs", "2"), marks=pytest.mark.long),  # two fresh passes over each rank's shard
])
def test_harness_dali_all_modes(small_dataset: Path, tmp_path: Path, nproc: int, batch: int,
                                window: tuple[str, str]) -> None:
    prefix = tmp_path / "r"
    rc = harness("--data", small_dataset, "--prefix", prefix, "--loader", "dali", "-b", batch,
                 "-j", "2", *window, "--warmup", "2", "--device", "sim", "--sim-step-ms", "20",
                 "--modes", "synthetic,cached,disk", "--nproc_per_node", nproc, "--no-plots")
    assert rc == 0
    runs = _runs(prefix)
    assert sorted(runs) == ["cached", "disk", "synthetic"]
    per_epoch = FILES // nproc // batch
    iters = 2 + 5 if window[0] == "--iters" else 2 * per_epoch
    for mode, run in runs.items():
        assert run.ok, (mode, run.error)
        assert run.spec.job.loader == "dali"
        assert len(run.ranks) == nproc
        for r in run.ranks:
            loader = r.extra["loader"]
            assert (loader["kind"], loader["decoder_device"], loader["device_id"]) == \
                ("dali", "cpu", None)
            assert loader["num_threads"] == min(2, loader["thread_budget"])
            assert (loader["shard_id"], loader["num_shards"]) == (r.rank, nproc)
            assert r.extra["batches_per_epoch"] == per_epoch
            assert r.samples == (batch,) * iters
            if window[0] == "--epochs":
                assert r.epoch == (0,) * per_epoch + (1,) * per_epoch
        rate = stalls.run_rate(run)
        assert rate.samples_per_epoch == per_epoch * batch * nproc
        assert rate.rate_sps is not None and rate.rate_sps > 0
    # synthetic replays a batch already in memory: no wait worth the name
    assert max(w for r in runs["synthetic"].ranks for w in r.wait_s[2:]) < 0.005


SCRIPT = Path(__file__).parent / "scripts" / "train_dali.py"


def _user_iterator(root: Path, threads: int, batch: int) -> Any:
    """tests/scripts/train_dali.py's pipeline and iterator, built as the script builds them."""
    spec = importlib.util.spec_from_file_location("train_dali", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    pipe = script.create_dali_pipeline(
        batch_size=batch, num_threads=threads, device_id=None, seed=12, data_dir=str(root),
        crop=32, size=32, dali_cpu=True, shard_id=0, num_shards=1)
    pipe.build()
    return DALIClassificationIterator(pipe, reader_name="Reader",
                                      last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=True)


def test_a_user_s_dali_iterator_is_read_as_it_was_built(small_dataset: Path) -> None:
    """The script's own threads, batch and shard, not the harness's -j/-b; its reader's
    folder is the data it declares (DALI reads in C++, past Python's audit hook); its threads
    last as long as the pipeline, as persistent workers do."""
    it = _user_iterator(small_dataset, threads=3, batch=12)
    assert loader_settings(it) == {
        "kind": "dali", "pipelines": 1, "num_threads": 3, "batch_size": 12,
        "prefetch_queue_depth": 2, "device_id": None, "decoder_device": "cpu",
        "shard_id": 0, "num_shards": 1, "random_shuffle": True, "shuffle_after_epoch": False,
        "dont_use_mmap": False, "initial_fill": 1024}
    assert shuffles(it) is True
    assert datafiles.declared(it) == {"source": "DALI readers.file(file_root=...)",
                                      "paths": [str(small_dataset)]}
    run = store.load_runs(DATA / "report_sweep")[0]
    rank = replace(run.ranks[0], extra={**run.ranks[0].extra, "loader": loader_settings(it)})
    ran = job_as_run(replace(run, ranks=[rank]))
    assert (ran.loader, ran.workers, ran.batch_size, ran.prefetch_factor) == ("dali", 3, 12, 2)
    assert ran.persistent_workers
    # random_shuffle mixes a buffer of samples; the files are read in the same order
    assert ran.read_order == SAME_ORDER
    # a shuffling reader fills its buffer (DALI's default 1024 samples) before its first batch;
    # mapping its files, it holds each until it hands it out (the order the cache sees)
    assert ran.read_ahead_samples == ran.held_buffer == 1024
    # reading them, it closes each at its read: the cache sees the cyclic read (measured: at
    # 75% of 3000 files, 690.1 samples/s against 690.8 at cache 0; mapped, 863.4 and 707.1)
    read = {**loader_settings(it), "dont_use_mmap": True}
    unmapped = job_as_run(replace(run, ranks=[replace(rank, extra={**rank.extra,
                                                                   "loader": read})]))
    assert (unmapped.read_ahead_samples, unmapped.held_buffer) == (1024, 0)
    assert JobAsRun.from_dict(ran.to_dict()) == ran
    built_in = dali_pipeline.DaliSettings.from_dict(cpu_settings(12).to_dict())
    rank = replace(rank, extra={**rank.extra, "loader": built_in.to_dict()})
    built = job_as_run(replace(run, ranks=[rank]))
    assert built.read_order == PERMUTATION and built.read_ahead_samples == 0


@pytest.mark.long  # 28 s on this VM
@pytest.mark.slow
@needs_cgroups
def test_a_user_s_dali_script_reads_its_data_through_the_throttle(
        small_dataset: Path, tmp_path: Path) -> None:
    """DALI's iterator runs its pipeline's first batches as it is built, and a file reader
    with `random_shuffle` first fills a buffer of 1024 samples: here, all 96 files. The
    throttle comes on before the iterator is built, so every byte of the dataset goes
    through it and the first wait holds that read (at 4 MiB/s, 9.6 MB: over a second);
    turned on at the first iteration, none did, and the disk run measured the page cache."""
    prefix = tmp_path / "r"
    rc = harness("--prefix", prefix, "--data", small_dataset, "--iters", "3", "--warmup", "1",
                 "--modes", "disk", "--cache", "none", "--storage-bw", "4M", "--no-plots",
                 SCRIPT, small_dataset, "-j", "2", "-b", "8", "--crop-size", "32",
                 "--dali_cpu")
    assert rc == 0
    (run,) = store.load_runs(prefix)
    assert run.ok, run.error
    dataset_bytes = sum(f.stat().st_size for f in small_dataset.rglob("*.jpg"))
    assert run.io.throttle.throttled_read_bytes >= dataset_bytes
    rank = run.ranks[0]
    assert rank.extra["loader"]["num_threads"] == 2
    (built,) = [li for li in rank.extra["loaders"] if li["role"] == "training"]
    # that read is the first batch's wait: at least the bytes over the throttle's rate
    assert rank.wait_s[0] >= built["build_s"] >= 0.5 * dataset_bytes / (4 << 20)


def test_a_dali_reader_s_held_buffer_is_modelled_as_it_read() -> None:
    """tests/data/script_dali_cache: train_dali.py (-j 2 -b 16, 3000 JPEGs of 12 KiB in
    pages, one CPU, 8 MiB/s, 2 epochs) fitted at cache 0 and 100%, single runs held out at
    50% and 75% (`heldout`). Its reader shuffles its file list once and reads it in that
    order every epoch into a 1024-sample buffer, filled before the first batch, holding each
    file (mapped) until it hands it out at random. Measured: its storage read most of a
    buffer besides its two epochs; the fill's bytes over the first
    wait are the throttle's rate; and a budget under the dataset kept some files (the ones
    handed out late), 4% faster at 50% and 22% at 75% than at cache 0. The model counts the
    buffer out of the read amplification, fits the throttle on the fill, and simulates the
    buffer's order: each held-out run within 15% and inside its 90% interval (when it
    read a cyclic scan, fitted on the cold epoch: 589 samples/s for all three against 707,
    735 and 863)."""
    fit = store.load_runs(DATA / "script_dali_cache")
    held = store.load_runs(DATA / "script_dali_cache" / "heldout")
    zero = next(r for r in fit if r.spec.resources.cache.spec == "0")
    page_bytes = 12288  # every file of this dataset is three pages
    read_files = zero.io.throttle.throttled_read_bytes / page_bytes
    # two epochs of its 3000 files, and its buffer (less what the training drew down of it,
    # reading slower than it trained) with the two batches its pipeline holds
    assert 800 <= read_files - 2 * zero.dataset.num_files <= 1024 + 2 * 16
    rate = {r.spec.resources.cache.spec: stalls.run_rate(r).rate_sps for r in fit + held}
    assert rate["75%"] > 1.15 * rate["0"]  # the budget kept the files handed out late
    # an epoch is its 3000 files (the last batch PARTIAL: 8 of 16), not 188 full batches,
    # though the synthetic run replays whole ones
    assert {b.samples_per_epoch for b in stalls.breakdowns(fit)} == {zero.dataset.num_files}
    model = whatif.fit(fit)
    assert model.held_buffer == model.read_ahead_samples == 1024
    assert model.read_amplification == pytest.approx(1.0, abs=0.05)
    (build,) = [li["build_s"] for li in zero.ranks[0].extra["loaders"]]
    fill = (1024 + 2 * 16) * page_bytes / build / (8 << 20)
    assert fill == pytest.approx(1.0, abs=0.1)  # the fill ran at the throttle's rate
    for run in held:
        check = whatif.check_run(model, run)
        assert check.low_sps <= check.measured_sps <= check.high_sps, check
        assert abs(check.predicted_sps / check.measured_sps - 1) < 0.15, check
    # the same model reading a cyclic scan keeps nothing at 75%: 22% short
    cyclic = replace(model, held_buffer=0)
    (r75,) = [r for r in held if r.spec.resources.cache.spec == "75%"]
    assert whatif.check_run(cyclic, r75).predicted_sps < 0.9 * rate["75%"]


@pipeline_def
def _read_only(root: str, dont_use_mmap: bool) -> Any:
    jpegs, labels = fn.readers.file(file_root=root, name="Reader", dont_use_mmap=dont_use_mmap)
    return fn.resize(fn.decoders.image(jpegs), resize_x=8, resize_y=8), labels


@pytest.mark.parametrize("dont_use_mmap", [False, True])
def test_a_dali_reader_s_dont_use_mmap_is_read_from_its_pipeline(
        small_dataset: Path, dont_use_mmap: bool) -> None:
    """The reader's `dont_use_mmap`, as a real pipeline was built with it, is recorded with
    the loader's settings (a knob of the job as it ran)."""
    pipe = _read_only(str(small_dataset), dont_use_mmap, batch_size=4, num_threads=1,
                      device_id=None)
    pipe.build()
    it = DALIClassificationIterator(pipe, reader_name="Reader")
    assert loader_settings(it)["dont_use_mmap"] is dont_use_mmap
    assert shuffles(it) is False  # its reader neither shuffles nor permutes each epoch


@pytest.mark.parametrize("dont_use_mmap", [False, True])
def test_a_shuffling_reader_reads_its_buffer_ahead_of_the_batches(
        tmp_path: Path, dont_use_mmap: bool) -> None:
    """`random_shuffle` reads `initial_fill` samples (1024) into a buffer before the first
    batch and reads the next file each time it hands one out: from a cold page cache, after
    k batches of 16 the files resident are 1024 + 16k and up to the two batches the
    pipeline runs ahead, mapped or read alike, the read order (not the hand-out) deciding which
    (what `JobAsRun.read_ahead_samples` and `cachesim.buffered_miss_bytes` take)."""
    from dsanalyze.jobs.datasets import make_dataset
    from dsanalyze.resources import cgroups, pagecache

    if cgroups.whole_disk(tmp_path) is None:
        pytest.skip("the temporary directory is on tmpfs: its pages cannot be evicted")
    root = tmp_path / "data"
    make_dataset(root, images=1400, classes=2, size=(32, 24), seed=2)
    files = [str(p) for p in root.rglob("*.jpg")]
    assert pagecache.evict_verified(files).resident_bytes == 0
    pipe = _shuffling(str(root), dont_use_mmap, batch_size=16, num_threads=1, device_id=None,
                      prefetch_queue_depth=2)
    pipe.build()
    seen = {}
    for k in range(1, 12):
        pipe.run()
        if k in (1, 11):
            time.sleep(0.3)  # the reader refills in a thread of its own
            seen[k] = sum(pagecache.file_resident_bytes(f) > 0 for f in files)
    for k, resident in seen.items():
        # the fill and the batches taken, and at most the two batches the pipeline runs ahead
        # (under load the reader lags the hand-outs a little: 1213 after 11 batches)
        assert 1024 + 16 * k - 16 <= resident <= 1024 + 16 * (k + 2) + 16, seen


@pipeline_def
def _shuffling(root: str, dont_use_mmap: bool) -> Any:
    jpegs, labels = fn.readers.file(file_root=root, name="Reader", random_shuffle=True,
                                    dont_use_mmap=dont_use_mmap)
    return fn.resize(fn.decoders.image(jpegs), resize_x=8, resize_y=8), labels
