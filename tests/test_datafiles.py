"""What a training loader declares it reads, and per-file read accounting (in-process)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
import torchvision
from torch.utils.data import DataLoader, Dataset, Subset

from dsanalyze.instrument import datafiles, filereads


class Listed(Dataset):
    """A dataset over a list of files, as many custom datasets are."""

    def __init__(self, files: list[str]) -> None:
        self.files = files

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> bytes:
        return Path(self.files[i]).read_bytes()[:4]


def test_an_imagefolder_declares_its_root(small_dataset):
    ds = torchvision.datasets.ImageFolder(small_dataset)
    found = datafiles.declared(DataLoader(Subset(ds, range(10)), batch_size=4))
    assert found == {"source": "ImageFolder.root", "paths": [str(small_dataset)]}


def test_a_list_of_files_is_declared(small_dataset):
    files = sorted(str(p) for p in small_dataset.glob("*/*.jpg"))[:5]
    found = datafiles.declared(DataLoader(Listed(files), batch_size=2))
    assert found == {"source": "Listed.files", "paths": files}


def test_nothing_declared_is_none():
    assert datafiles.declared(DataLoader(list(range(8)), batch_size=2)) is None


def test_webdataset_urls_are_declared_and_shard_reads_counted(small_dataset, tmp_path):
    wds = pytest.importorskip("webdataset")
    shard = tmp_path / "shard-0.tar"
    with tarfile.open(shard, "w") as tar:
        for f in sorted(small_dataset.glob("*/*.jpg"))[:6]:
            tar.add(f, arcname=f"{f.stem}.jpg")
            info = tarfile.TarInfo(f"{f.stem}.cls")
            info.size = 1
            tar.addfile(info, io.BytesIO(b"0"))
    loader = wds.WebLoader(wds.WebDataset(str(shard), shardshuffle=False).to_tuple("jpg", "cls"),
                           batch_size=None, num_workers=0)
    found = datafiles.declared(loader)
    assert found == {"source": "SimpleShardList.urls", "paths": [str(shard)]}
    import webdataset.cache
    undo = filereads.patch_streaming_open(webdataset.cache, None)
    try:
        assert sum(1 for _ in loader) == 6
    finally:
        undo()
    rows = [r for r in filereads.table(None) if r["file"] == str(shard)]
    assert len(rows) == 1 and rows[0]["opens"] == 1 and rows[0]["read_s"] > 0
    assert rows[0]["read_bytes"] == shard.stat().st_size  # the tar read to its end
