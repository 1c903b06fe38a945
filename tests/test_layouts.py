"""Datasets that are not one file per sample, seen by the what-if model: shards (or
memory-mapped Arrow files) of many samples each, loaders without `len()`, and the
end-of-run advice when the model fails on such data.

The runs are the committed what-if fixtures (tests/data/whatif_*); the sharded
datasets are those runs' model with its files replaced by a few big ones.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dsanalyze import store
from dsanalyze.config import Mode
from dsanalyze.report.advice import advice_text, failure_text
from dsanalyze.whatif import api as whatif
from dsanalyze.whatif import pipeline
from dsanalyze.whatif.advice import ModelFailure, advise
from dsanalyze.whatif.heldout import HeldOut
from dsanalyze.whatif.laws import run_config
from dsanalyze.whatif.model import run_layout
from dsanalyze.whatif.rates import _misses, mean_rates

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def model() -> whatif.Model:
    return whatif.fit(store.load_runs(DATA / "whatif_prep"))


def sharded(model: whatif.Model, files: int, samples_per_file: int, file_bytes: int
            ) -> tuple[whatif.Model, pipeline.Layout]:
    samples = files * samples_per_file
    layout = pipeline.Layout(2, samples // (model.ranks * model.batch_size), 10 ** 6, 2)
    return replace(model, file_bytes=(file_bytes,) * files, samples_per_epoch=samples,
                   layout=layout), layout


def test_128_shards_of_a_million_samples_read_a_share_of_a_shard_per_sample(model) -> None:
    """The ImageNet-of-shards case that raised a raw ValueError: with no cache every sample
    misses, and the bytes it reads are its shard's over the shard's samples."""
    m, layout = sharded(model, 128, 10 ** 6, 1 << 30)
    misses, reads, batches = _misses(m, m.ranks, m.workers, layout, 0, Mode.DISK, seed=0)
    per_sample = (1 << 30) / 10 ** 6
    assert 0 < batches < layout.batches  # simulated on a miniature of the epoch
    for miss, read in zip(misses, reads):
        assert len(miss) == batches * m.batch_size * m.ranks
        assert miss.mean() == pytest.approx(per_sample, rel=0.01)
        assert np.array_equal(miss, read)  # cache 0: every byte read is a miss


@pytest.mark.parametrize("share", [0.25, 0.5])
def test_hit_rate_of_a_sharded_dataset_follows_the_cache_share(model, share: float) -> None:
    """Random access over equal samples hits the page cache as often whether the samples are
    files of their own or parts of shards: the sharded dataset's steady hit rate matches the
    same model's over as many small files, and never exceeds the share of the data cached."""
    big, layout = sharded(model, 16, 1000, 1 << 24)
    small = replace(big, file_bytes=((1 << 24) // 1000,) * 16000)
    cfg = run_config(model, HeldOut.of(store.load_runs(DATA / "whatif_prep")[0]))

    def hit(m: whatif.Model) -> float:
        return mean_rates(m, cfg, layout, Mode.DISK, share * m.dataset_bytes).hit_rate
    assert hit(big) == pytest.approx(hit(small), abs=0.05)
    assert 0 < hit(big) <= share + 0.02


def test_a_loader_without_len_gets_its_epochs_length_from_the_epochs_it_ran() -> None:
    """`batches_per_epoch` is the loader's len() as the rank recorded it; without one (an
    iterable dataset), the layout counts the first epoch's iterations, never the epochs."""
    run = next(r for r in store.load_runs(DATA / "whatif_caches") if r.mode is Mode.CACHED)
    r0 = run.ranks[0]
    recorded = r0.extra["batches_per_epoch"]
    assert len(set(r0.epoch)) == 3 and recorded > 3
    extra = {k: v for k, v in r0.extra.items() if k != "batches_per_epoch"}
    unsized = replace(run, ranks=[replace(r, extra=extra) for r in run.ranks])
    assert run_layout(unsized) == run_layout(run)
    assert run_layout(unsized).batches == recorded


def test_a_dataset_of_empty_files_is_one_line_of_advice_that_says_why() -> None:
    """The end-of-run advice never crashes a sweep that measured everything: a dataset of empty
    files (no bytes to weigh a sample's prep by) is refused by the fit with what to do, and the
    advice is that one line; the table alone decides."""
    runs = store.load_runs(DATA / "whatif_fetch")
    a = advise(runs, [0] * runs[0].dataset.num_files)
    assert a.model is None and a.note and a.note.ours and a.rows == []
    text = advice_text(a)
    assert "\n" not in text and text.startswith("Advice: none")
    assert f"{runs[0].dataset.num_files} file(s) hold no bytes" in text and "Error" not in text


def test_a_model_that_fails_unexpectedly_is_named_by_its_exception_in_one_line() -> None:
    """Any other exception of the model (a bug on data it was never tried on) is worded by its
    type and first line only, not as a refusal of ours."""
    failure = ModelFailure.of(ZeroDivisionError("float division by zero\nmore"))
    assert not failure.ours
    assert failure_text(failure) == "ZeroDivisionError: float division by zero"
