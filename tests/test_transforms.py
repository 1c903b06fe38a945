"""Per-transform timing: real ImageFolder datasets, real DataLoader workers."""

from __future__ import annotations

import pickle
import time
from pathlib import Path

import pytest
import torch
import torchvision
from conftest import harness
from torch.utils.data import ConcatDataset, DataLoader, Subset
from torchvision import transforms as T
from torchvision.transforms import v2

from dsanalyze import store
from dsanalyze.analysis import stalls
from dsanalyze.analysis import transforms as step_tables
from dsanalyze.instrument import transforms as steps


class Sleep:
    """A transform that takes a known time (picklable, for workers)."""

    def __init__(self, s: float) -> None:
        self.s = s

    def __call__(self, x):
        time.sleep(self.s)
        return x


def v1_pipeline():
    return T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize((0.5,) * 3, (0.25,) * 3)])


def v2_pipeline():
    return v2.Compose([v2.PILToTensor(), v2.RandomResizedCrop(64, antialias=True),
                       v2.ToDtype(torch.float32, scale=True), v2.Normalize((0.5,) * 3, (0.25,) * 3)])


@pytest.mark.parametrize("pipeline,names", [
    (v1_pipeline, ["RandomResizedCrop", "RandomHorizontalFlip", "ToTensor", "Normalize"]),
    (v2_pipeline, ["PILToTensor", "RandomResizedCrop", "ToDtype", "Normalize"]),
])
@pytest.mark.parametrize("workers", [0, 2])
def test_every_sample_is_timed_in_every_worker(small_dataset, tmp_path, pipeline, names, workers):
    ds = torchvision.datasets.ImageFolder(small_dataset, transform=pipeline())
    sink = steps.sink_dir(tmp_path, rank=0)
    wrapped = steps.instrument_dataset(ds, sink)
    assert wrapped == ["loader/read+decode"] + [f"transform/{n}" for n in names]
    loader = DataLoader(ds, batch_size=8, num_workers=workers, shuffle=True)
    images = sum(len(x) for x, _ in loader)  # one full epoch: workers exit, and write
    table = steps.finish(loader, sink)
    assert [r["name"] for r in table] == ["read+decode"] + names
    assert [r["calls"] for r in table] == [images] * (1 + len(names)) and images == len(ds)
    for r in table:
        assert r["total_s"] > 0 and r["mean_s_per_sample"] == pytest.approx(r["total_s"] / images)
    if workers:
        assert len(list(Path(sink).glob("pid*.json"))) == workers


def test_persistent_workers_write_their_totals_at_shutdown(small_dataset, tmp_path):
    ds = torchvision.datasets.ImageFolder(
        small_dataset, transform=T.Compose([Sleep(0.002), T.Resize((32, 32)), T.PILToTensor()]))
    sink = steps.sink_dir(tmp_path, rank=3)
    steps.instrument_dataset(ds, sink)
    loader = DataLoader(ds, batch_size=16, num_workers=2, persistent_workers=True)
    taken = 0
    for _ in range(2):  # two epochs, the second stopped early as the harness stops a script
        for x, _ in loader:
            taken += len(x)
            if taken >= len(ds) + 32:
                break
    table = {r["name"]: r for r in steps.finish(loader, sink)}
    # Workers prefetch ahead of the loop: at least what was taken, at most one epoch more.
    assert taken <= table["Sleep"]["calls"] <= 2 * len(ds)
    assert table["Sleep"]["calls"] == table["read+decode"]["calls"]
    assert 0.002 <= table["Sleep"]["mean_s_per_sample"] < 0.004


@pytest.mark.parametrize("wrap", [
    lambda ds: ds,
    lambda ds: Subset(ds, range(10)),
    lambda ds: ConcatDataset([Subset(ds, range(5)), Subset(ds, range(5, 10))]),
])
def test_wrapped_datasets_and_a_single_transform(small_dataset, tmp_path, wrap):
    base = torchvision.datasets.ImageFolder(small_dataset, transform=Sleep(0.001),
                                            target_transform=T.Compose([int, Sleep(0.0)]))
    ds = wrap(base)
    sink = steps.sink_dir(tmp_path, rank=0)
    assert steps.instrument_dataset(ds, sink) == [
        "loader/read+decode", "transform/Sleep", "target_transform/int",
        "target_transform/Sleep"]
    assert steps.instrument_dataset(ds, sink) == []  # idempotent: nothing wrapped twice
    for i in range(10):
        ds[i]
    table = steps.collect(sink)
    assert [(r["stage"], r["name"], r["calls"]) for r in table] == [
        ("loader", "read+decode", 10), ("target_transform", "int", 10),
        ("target_transform", "Sleep", 10), ("transform", "Sleep", 10)]


def test_timed_step_pickles_and_keeps_the_transform_attributes(tmp_path):
    crop = T.RandomResizedCrop(32)
    compose = T.Compose([crop, T.RandomHorizontalFlip(p=0.25)])
    steps._wrap_compose(compose, "transform", str(tmp_path))
    clone = pickle.loads(pickle.dumps(compose))
    assert clone.transforms[0].size == (32, 32) and clone.transforms[1].p == 0.25
    assert repr(compose.transforms[0]) == repr(crop)


def test_repeated_classes_get_numbered_names():
    compose = T.Compose([T.Resize(40), T.Resize(32), T.CenterCrop(32), T.Resize(30)])
    assert steps._wrap_compose(compose, "transform", None) == [
        "transform/Resize", "transform/Resize#2", "transform/CenterCrop", "transform/Resize#3"]


@pytest.mark.parametrize("tables,expected", [
    ([], []),
    ([[{"stage": "transform", "index": 1, "name": "B", "calls": 4, "total_s": 0.4}],
      [{"stage": "transform", "index": 1, "name": "B", "calls": 6, "total_s": 0.2},
       {"stage": "loader", "index": 0, "name": "read+decode", "calls": 10, "total_s": 1.0}]],
     [("read+decode", 10, 1.0, 0.1), ("B", 10, 0.6, 0.06)]),
])
def test_merge_tables_sums_ranks(tables, expected):
    got = [(r["name"], r["calls"], r["total_s"], r["mean_s_per_sample"])
           for r in step_tables.merge_tables(tables)]
    assert got == [(n, c, pytest.approx(t), pytest.approx(m)) for n, c, t, m in expected]
    assert step_tables.sum_s_per_sample(step_tables.merge_tables(tables)) == pytest.approx(
        sum(m for *_, m in expected))


@pytest.mark.slow
def test_builtin_job_transform_times_account_for_the_prep_rate(small_dataset, tmp_path):
    """Loader mode, one worker: the worker prepares samples one after another, so
    1 / rate (seconds per sample) = the timed steps + what is not timed (collation,
    sampler, IPC). The timed steps must be most of it, and cannot exceed it."""
    prefix = tmp_path / "r"
    rc = harness("--data", small_dataset, "--prefix", prefix, "-b", 8, "-j", 1, "--iters", 24,
                 "--warmup", 3, "--modes", "loader,cached", "--sim-step-ms", 20,
                 "--no-cgroups", "--no-plots")
    assert rc == 0
    runs = {r.mode.value: r for r in store.load_runs(prefix)}
    loader_run = runs["loader"]
    table = step_tables.run_table(loader_run)
    assert [r["name"] for r in table] == ["read+decode", "RandomResizedCrop",
                                          "RandomHorizontalFlip", "ToTensor", "Normalize"]
    rate = stalls.run_rate(loader_run).rate_sps
    share = step_tables.sum_s_per_sample(table) * rate
    assert 0.6 <= share <= 1.02, (share, table, rate)
    assert loader_run.environment["rank_extra"]["transforms"] == table
    assert step_tables.run_table(runs["cached"])[0]["calls"] >= (24 + 3) * 8


ROWS = [
    {"stage": "loader", "index": 0, "name": "read+decode", "calls": 100, "total_s": 0.15,
     "mean_s_per_sample": 0.0015},
    {"stage": "transform", "index": 0, "name": "RandomResizedCrop", "calls": 100,
     "total_s": 0.08, "mean_s_per_sample": 0.0008},
    {"stage": "target_transform", "index": 0, "name": "int", "calls": 100, "total_s": 0.001,
     "mean_s_per_sample": 0.00001},
]


@pytest.mark.parametrize("rows", [ROWS, ROWS[:1]])
def test_transform_times_plot_draws_the_table(rows):
    from dsanalyze.report import plots

    fig = plots.transform_times([step_tables.StepTime.of(r) for r in rows], "cached-cpusall")
    ax = fig.axes[0]
    bars = [p for p in ax.patches if p.get_gid() == "transform_times"] or ax.containers[0]
    assert [b.get_width() for b in bars] == pytest.approx([r["mean_s_per_sample"] * 1e3
                                                           for r in rows])
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "read+decode", "RandomResizedCrop", "target_transform: int"][:len(rows)]
    total_ms = sum(r["mean_s_per_sample"] for r in rows) * 1e3
    assert f"{total_ms:.2f} ms per sample" in ax.get_title()
