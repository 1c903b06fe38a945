"""A memory-mapped, sharded dataset end to end: a Hugging Face `datasets` Arrow dataset saved
in 2 shards of 48 samples, read by a real script through its memory map (page faults, not
read()), under the harness's cached and disk modes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import harness, needs_cgroups

SCRIPTS = Path(__file__).parent / "scripts"


def arrow_dataset(images: Path, out: Path) -> Path:
    datasets = pytest.importorskip("datasets")
    files = sorted(images.rglob("*.jpg"))
    classes = sorted({f.parent.name for f in files})
    data = datasets.Dataset.from_dict({"jpeg": [f.read_bytes() for f in files],
                                       "label": [classes.index(f.parent.name) for f in files]})
    data.save_to_disk(str(out), num_shards=2)
    return out


@pytest.mark.extended
@needs_cgroups
def test_arrow_shards_are_evicted_and_read_once_per_cold_epoch(small_dataset, tmp_path) -> None:
    """The disk run starts with none of the shards resident (evicted per file: nothing maps
    them between runs), and its cold epoch faults in the dataset once: the cgroup's bytes read
    are the shards' bytes (±30%: readahead around each sample, page rounding), 1/96 of them
    per sample; the cached run, over the warmed shards, reads almost nothing from storage."""
    data = arrow_dataset(small_dataset, tmp_path / "arrow")
    prefix = tmp_path / "p"
    rc = harness("--prefix", prefix, "--data", data, "--modes", "cached,disk", "--cache", "0",
                 "--epochs", 1, "--warmup", 1, "-b", 8, "--no-plots", "--no-advice",
                 str(SCRIPTS / "train_hf_arrow.py"), data)
    assert rc == 0
    runs = {p.stem: json.loads(p.read_text()) for p in (prefix / "runs").glob("*.json")}
    disk, cached = runs["disk-cpusall-cache0B-bwnone"], runs["cached-cpusall"]
    shards = sum(p.stat().st_size for p in data.glob("*.arrow"))
    assert disk["io"]["cache_state"]["resident_before_bytes"] <= 0.01 * shards
    samples = sum(sum(r["samples"]) for r in disk["ranks"])
    assert samples == 96
    assert 0.95 * shards <= disk["io"]["read_bytes"] <= 1.3 * shards
    assert disk["io"]["read_bytes"] / samples == pytest.approx(shards / 96, rel=0.3)
    assert cached["io"]["read_bytes"] <= 0.05 * shards
