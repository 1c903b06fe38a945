"""Framework scripts profile unmodified: timm, Lightning, Hugging Face, accelerate,
torchdata.nodes, webdataset (tests/scripts/), end to end through the real harness.

One harness invocation per pattern and rank count, a tiny model and a few iterations;
the asserts read its stored run JSONs. Every pattern runs at 1 and 2 ranks in all four
modes. `make test` (which must stay within 10 minutes on 2 cores) runs the short ones;
`make test-long` (marked LONG; CI runs it after `make test`) one run of each pattern;
`make test-extended` the others (marked EXTENDED), each of whose code paths a LONG test
or test_bootstrap.py also takes. Among the LONG runs only webdataset runs the disk mode
(CORE modes for the others): a rank runs the same code in a disk run as in a cached one,
whatever its loader, and the harness's eviction does not depend on the loader; the
EXTENDED variants run all four modes.

| pattern                     | make test          | make test-long                  | extended         |
| timm PrefetchLoader         |                    | 1 rank                          | 2 ranks          |
| timm DataLoader             |                    | (a DataLoader: test_bootstrap)  | 1 rank, 2 ranks  |
| Lightning Trainer.fit       |                    | 2 ranks (DDP, sanity check)     | 1 rank           |
| LightningCLI + DataModule   | 1 rank, max_steps  |                                 | 1 rank, 2 ranks  |
| Hugging Face Trainer        |                    | 1 rank (accelerate's shard)     | 2 ranks          |
| accelerate loop             |                    | (accelerate's shard: HF)        | 1 rank, 2 ranks  |
| torchdata.nodes             |                    | 1 rank, no --data               | 2 ranks, --data  |
| webdataset                  | 1 rank, --epochs   | 2 ranks, no --data; the report  | 1 rank, --data   |
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import harness, write_shards

from dsanalyze import app, store
from dsanalyze.analysis import shards, stalls
from dsanalyze.analysis.summary import summarize
from dsanalyze.report import document
from dsanalyze.report import shards as shard_report
from dsanalyze.report.text import number

SCRIPTS = Path(__file__).parent / "scripts"
ALL = "synthetic,cached,disk,loader"
CORE = "synthetic,cached,loader"  # the modes check_prep_bound compares
# 10 measured batches after 2 of warm-up: enough that the prefetched batches a cached run
# starts with do not make it look faster than its loader.
ITERS, WARMUP, BATCH = 10, 2, 8
IMAGES = 96  # small_dataset

# Variants that repeat a pattern already covered: `make test-extended` runs them. The
# patterns' own runs, half a minute to two minutes each: `make test-long`, which CI runs
# after `make test` (which must stay within 10 minutes on 2 cores).
EXTENDED = pytest.mark.extended
LONG = pytest.mark.long


@pytest.fixture(autouse=True)
def one_thread_per_rank(monkeypatch):
    # Two cores shared by ranks, workers and other tests: OpenMP spinning would swamp timings.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def shard_dir(small_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 96 JPEGs as 8 webdataset shards: `<key>.jpg` and `<key>.cls` per sample."""
    return write_shards(small_dataset, tmp_path_factory.mktemp("shards"))


SHARDS = "shard-{000000..000007}.tar"


def profile(prefix: Path, script: str, *args: object, world: int = 1, data: object = None,
            modes: str = ALL, iters: int = ITERS) -> dict[str, store.RunResult]:
    """Run the harness on a script of tests/scripts; the runs by mode."""
    data_opt = ["--data", data] if data is not None else []
    rc = harness(*data_opt, "--prefix", prefix, "--nproc_per_node", world, "--iters", iters,
                 "--warmup", WARMUP, "--modes", modes, "--no-plots", SCRIPTS / script, *args)
    assert rc == 0
    return {r.mode.value: r for r in store.load_runs(prefix)}


def check_runs(runs: dict[str, store.RunResult], world: int, kind: str = "DataLoader",
               steps: tuple[str, ...] = (), iters: int = ITERS, modes: str = ALL) -> None:
    """Every mode ran, every rank stopped at the window, measured training batches only."""
    assert sorted(runs) == sorted(modes.split(","))
    for mode, run in runs.items():
        assert run.ok, run.error
        assert [len(r.iter_s) for r in run.ranks] == [iters + WARMUP] * world, mode
        assert all(set(r.samples) == {BATCH} for r in run.ranks), mode
        assert [r.extra["stopped"] for r in run.ranks] == [f"{iters} iterations measured"] * world
        extra = run.ranks[0].extra
        assert [d["kind"] for d in extra["loaders"] if d["role"] == "training"] == [kind]
        names = [t["name"] for t in extra["transforms"]]
        if mode == "synthetic":
            assert names == []
        else:
            assert set(steps) <= set(names) and names, (mode, names)
        assert stalls.run_rate(run).rate_sps > 0


def check_prep_bound(runs: dict[str, store.RunResult]) -> None:
    """Few workers, real decoding, a tiny model: the step alone is faster than the loader,
    and the loader alone bounds the cached rate."""
    rate = {m: stalls.run_rate(r).rate_sps for m, r in runs.items()}
    # 1.2: the cached run no longer carries the harness's code-Pss walks (85 ms of CPU a second
    # on the one CPU a test worker's job shares with its harness): timm with 1 worker measured
    # 259 against 197 (1.32), where 1.5 held with them
    assert rate["synthetic"] > 1.2 * rate["cached"], rate
    assert rate["cached"] < 1.5 * rate["loader"], rate  # at most the loader's own rate, + noise


@pytest.mark.slow
@pytest.mark.parametrize("prefetcher,world,modes", [
    pytest.param(True, 1, CORE, marks=LONG), pytest.param(False, 2, ALL, marks=EXTENDED),
    pytest.param(False, 1, ALL, marks=EXTENDED), pytest.param(True, 2, ALL, marks=EXTENDED)])
def test_timm_create_loader(tmp_path, small_dataset, prefetcher, world, modes):
    args = ["--prefetcher"] if prefetcher else []
    runs = profile(tmp_path / "r", "train_timm.py", small_dataset, "-j", 0, "-b", BATCH, *args,
                   world=world, data=small_dataset, modes=modes)
    kind = "timm PrefetchLoader" if prefetcher else "DataLoader"
    check_runs(runs, world, kind, steps=("RandomResizedCropAndInterpolation", "ColorJitter"),
               modes=modes)
    check_prep_bound(runs)
    for run in runs.values():  # the prefetcher's inner DataLoader is left alone
        assert len(run.ranks[0].extra["loaders"]) == (2 if prefetcher else 1)


@pytest.mark.slow
@pytest.mark.parametrize("world,modes", [pytest.param(1, ALL, marks=EXTENDED),
                                         pytest.param(2, CORE, marks=LONG)])
def test_lightning_sanity_check_and_validation_are_not_measured(tmp_path, small_dataset, world,
                                                                modes):
    """Trainer.fit, loaders on the LightningModule, DDP under torchrun at 2 ranks."""
    val_log = tmp_path / "val.log"
    per_epoch = IMAGES // world // BATCH
    iters = per_epoch + 3  # the window spans one validation pass after the first epoch
    runs = profile(tmp_path / "r", "train_lightning.py", small_dataset, "-b", BATCH,
                   "--val-log", val_log, world=world, data=small_dataset, iters=iters,
                   modes=modes)
    check_runs(runs, world, steps=("read+decode", "RandomResizedCrop"), iters=iters, modes=modes)
    for mode, run in runs.items():
        # One training loader (under DDP Lightning re-creates each loader with its sampler):
        # the validation loaders, iterated first in the sanity check, are left alone.
        loaders = run.ranks[0].extra["loaders"]
        training = [d for d in loaders if d["role"] == "training"]
        assert len(training) == 1 and training[0]["shuffles"] and training[0]["epochs"] == (
            1 if mode == "loader" else 2)
        assert {d["role"] for d in loaders} == {"training", "other"} | (
            {"never iterated"} if world > 1 else set())
        assert run.ranks[0].extra["batches_per_epoch"] == per_epoch
        epochs = list(run.ranks[0].epoch)
        assert epochs == [0] * per_epoch + [1] * (iters + WARMUP - per_epoch), mode
    passes = [tuple(map(int, line.split())) for line in val_log.read_text().splitlines()]
    val_batches = -(-IMAGES // world // 5)  # VAL_BATCH = 5
    sanity = [p for p in passes if p[1] == 1]
    full = [p for p in passes if p[1] == 0]
    assert len(sanity) == len(runs) * world and all(b == 2 for _, _, b in sanity)  # every mode
    # one full pass after the first epoch, in every mode that steps (not loader mode)
    stepping = len(runs) - 1  # every mode but loader
    assert len(full) == stepping * world and all(b == val_batches for _, _, b in full)


def lightning_cli(tmp_path: Path, data: Path, world: int = 1) -> list[object]:
    """`fit` with Lightning's ImageNet-template options, on the CPU, DDP at 2 ranks."""
    pytest.importorskip("jsonargparse", reason="LightningCLI needs jsonargparse (the test extra)")
    ddp = ["--trainer.devices", world, "--trainer.strategy", "ddp"] if world > 1 else []
    return ["fit", "--data.data_dir", data, "--data.batch_size", BATCH,
            "--trainer.accelerator", "cpu", *ddp, "--trainer.logger", "false",
            "--trainer.enable_checkpointing", "false", "--trainer.enable_progress_bar", "false",
            "--trainer.default_root_dir", tmp_path]


@pytest.mark.slow
@pytest.mark.parametrize("world", [pytest.param(1, marks=EXTENDED),
                                   pytest.param(2, marks=EXTENDED)])
def test_lightning_cli_with_a_datamodule(tmp_path, small_dataset, world):
    runs = profile(tmp_path / "r", "train_lightning_cli.py",
                   *lightning_cli(tmp_path, small_dataset, world), world=world, data=small_dataset)
    check_runs(runs, world, steps=("read+decode", "RandomResizedCrop", "Normalize"))
    for run in runs.values():  # Lightning's own sampler under DDP: each rank its half
        assert run.ranks[0].extra["batches_per_epoch"] == IMAGES // world // BATCH


@pytest.mark.slow
@pytest.mark.parametrize("limit,value,measured", [
    ("--trainer.max_steps", 3, 3), pytest.param("--trainer.max_epochs", 1, 12, marks=EXTENDED)])
def test_lightning_ending_before_the_window(tmp_path, small_dataset, limit, value, measured):
    """max_steps/max_epochs shorter than --iters: the script ends itself, the run is kept
    (LightningCLI with its DataModule; all four modes in test_lightning_cli_with_a_datamodule)."""
    runs = profile(tmp_path / "r", "train_lightning_cli.py",
                   *lightning_cli(tmp_path, small_dataset), limit, value, data=small_dataset,
                   modes="cached", iters=20)
    run = runs["cached"]
    assert run.ok, run.error
    assert len(run.ranks[0].iter_s) == measured
    assert run.ranks[0].extra["stopped"] == "the script ended"


@pytest.mark.slow
@pytest.mark.parametrize("world,modes", [pytest.param(1, CORE, marks=LONG),
                                         pytest.param(2, ALL, marks=EXTENDED)])
def test_huggingface_trainer(tmp_path, small_dataset, world, modes):
    runs = profile(tmp_path / "r", "train_hf.py", small_dataset, "-b", BATCH,
                   "--output-dir", tmp_path / "out", world=world, data=small_dataset, modes=modes)
    check_runs(runs, world, steps=("read+decode", "RandomResizedCrop", "ToTensor"), modes=modes)
    check_prep_bound(runs)


@pytest.mark.slow
@pytest.mark.parametrize("world", [pytest.param(1, marks=EXTENDED),
                                   pytest.param(2, marks=EXTENDED)])
def test_accelerate_loop(tmp_path, small_dataset, world):
    runs = profile(tmp_path / "r", "train_accelerate.py", small_dataset, "-b", BATCH,
                   world=world, data=small_dataset)
    check_runs(runs, world, steps=("read+decode", "RandomResizedCrop"))
    check_prep_bound(runs)


@pytest.mark.slow
@pytest.mark.parametrize("world,given,modes", [
    pytest.param(1, False, CORE, marks=LONG), pytest.param(2, True, ALL, marks=EXTENDED)])
def test_torchdata_nodes(tmp_path, small_dataset, capsys, world, given, modes):
    """No --data: the discovery run sees the graph open JPEGs and widens to all of them."""
    runs = profile(tmp_path / "r", "train_torchdata.py", small_dataset, "-b", BATCH, "-j", 1,
                   world=world, data=small_dataset if given else None, modes=modes)
    check_runs(runs, world, kind="torchdata.nodes Loader", steps=("read+decode", "ToTensor"),
               modes=modes)
    check_prep_bound(runs)
    assert {r.dataset.num_files for r in runs.values()} == {IMAGES}
    if not given:
        assert "widened to every .jpg file under" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("world,given", [pytest.param(2, False, marks=LONG),
                                         pytest.param(1, True, marks=EXTENDED)])
def test_webdataset_shards(tmp_path, shard_dir, world, given, capsys):
    """Shards found from WebDataset's urls (or --data wins); warmed, evicted, read per shard."""
    runs = profile(tmp_path / "r", "train_webdataset.py", shard_dir / SHARDS, "-b", BATCH,
                   "-j", 1, world=world, data=shard_dir if given else None)
    check_runs(runs, world, steps=("RandomResizedCrop", "ToTensor"))
    check_prep_bound(runs)
    out = capsys.readouterr().out
    assert "data: 8 files" in out
    assert (f"(--data {shard_dir})" if given else "SimpleShardList.urls") in out
    sizes = {str(p): p.stat().st_size for p in shard_dir.glob("*.tar")}
    cached, disk = runs["cached"], runs["disk"]
    assert cached.io.cache_state["resident_before_bytes"] == sum(sizes.values())
    assert disk.io.cache_state["resident_before_bytes"] <= 0.01 * sum(sizes.values())
    table = shards.shard_table(cached, disk)
    assert table and all(r["file"] in sizes for r in table)
    read = [r for r in table if r["disk_read_bytes"]]  # shard order is shuffled in each run
    assert sum(r["disk_read_bytes"] for r in read) >= (ITERS + WARMUP) * BATCH * world * min(
        sizes.values()) / 12  # at least the measured samples' bytes (12 samples a shard)
    opens = shards.file_reads(disk)
    for r in read:  # each open reads the shard once, whole (unless the run stopped inside it)
        assert r["disk_read_bytes"] <= opens[r["file"]]["opens"] * sizes[r["file"]]
        assert r["disk_read_s"] > 0
    assert sum(r["fetch_share"] for r in table) == pytest.approx(1.0)
    # the report's "Reads per shard" section: these rows, most fetch time first
    md = document.render_markdown(shard_report.shard_blocks(list(runs.values())))
    assert md.startswith("## Reads per shard") and f"{len(table)} shards read" in md
    lines = [ln for ln in md.splitlines() if ln.startswith("| shard-")]
    top = max(table, key=lambda r: r["fetch_s"])
    assert len(lines) == len(table) and lines[0].startswith(f"| {Path(top['file']).name} |")
    assert f"| {number(top['fetch_s'], '{:.2f}')} |" in lines[0]
    if not given:  # and `dsanalyze report` writes it
        report = app.report(tmp_path / "r")[0].read_text()
        assert report.index("## Reads per shard") > report.index("## Stall breakdown")


@pytest.mark.long  # 30 s or more on this VM: make test-long
@pytest.mark.slow
def test_webdataset_with_epochs_replays_the_epoch_the_real_loader_counted(tmp_path, shard_dir):
    """An IterableDataset has no len(): the synthetic run used to fail ("pass --iters").
    The cached run goes first, counts the epoch's batches, and synthetic replays that many."""
    prefix = tmp_path / "r"
    rc = harness("--data", shard_dir, "--prefix", prefix, "--epochs", 1, "--warmup", WARMUP,
                 "--modes", "synthetic,cached", "--no-plots", "--no-advice",
                 SCRIPTS / "train_webdataset.py", shard_dir / SHARDS, "-b", BATCH, "-j", 1,
                 "--epochs", 1)
    assert rc == 0
    runs = {r.mode.value: r for r in store.load_runs(prefix)}
    assert runs["synthetic"].ok and runs["cached"].ok, runs["synthetic"].error
    # 96 samples in batches of BATCH per worker's shards: the cached run's own count
    cached = runs["cached"].ranks[0]
    seen = cached.extra["epoch_batches_seen"]
    assert seen == len(cached.iter_s) and sum(cached.samples) == IMAGES
    synthetic = runs["synthetic"].ranks[0]
    assert len(synthetic.iter_s) == seen and synthetic.extra["batches_per_epoch"] == seen
    assert runs["cached"].started_unix_s < runs["synthetic"].started_unix_s  # real loader first
    assert summarize(list(runs.values())).configs[0].samples_per_epoch == seen * BATCH
