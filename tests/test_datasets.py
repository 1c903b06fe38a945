from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from dsanalyze.dataset import scan_dataset
from dsanalyze.errors import DatasetError
from dsanalyze.jobs.datasets import make_dataset, parse_size


def digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.jpg")):
        h.update(p.relative_to(root).as_posix().encode() + p.read_bytes())
    return h.hexdigest()


def test_generated_dataset_is_real_varied_and_deterministic(tmp_path):
    from PIL import Image

    n, total = make_dataset(tmp_path / "a", 12, 3, (120, 90), size_jitter=0.3, seed=5, workers=2)
    make_dataset(tmp_path / "b", 12, 3, (120, 90), size_jitter=0.3, seed=5, workers=1)
    make_dataset(tmp_path / "c", 12, 3, (120, 90), size_jitter=0.3, seed=6, workers=2)
    info = scan_dataset(tmp_path / "a")
    assert (n, total) == (info.num_files, info.total_bytes) == (12, sum(info.file_bytes))
    assert len(info.classes) == 3
    assert digest(tmp_path / "a") == digest(tmp_path / "b") != digest(tmp_path / "c")
    sizes = {Image.open(f).size for f in info.files}
    assert len(sizes) > 3 and all(84 <= w <= 156 and 63 <= h <= 117 for w, h in sizes)
    assert len(set(info.file_bytes)) > 6
    q = info.size_quantiles(5)
    assert q[0] == min(info.file_bytes) and q[-1] == max(info.file_bytes) and q == sorted(q)


@pytest.mark.parametrize("layout,match", [
    ({}, "does not exist"),
    ({"x.jpg": b"1"}, "no class folders"),
    ({"cls/readme.txt": b"1"}, "holds no image files"),
])
def test_scan_rejects(tmp_path, layout, match):
    root = tmp_path / "d"
    for rel, data in layout.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    with pytest.raises(DatasetError, match=match):
        scan_dataset(root)


@pytest.mark.parametrize("text,ok", [("500x375", (500, 375)), ("5x5", None), ("big", None)])
def test_parse_size(text, ok):
    if ok:
        assert parse_size(text) == ok
    else:
        with pytest.raises(DatasetError):
            parse_size(text)


def test_every_make_dataset_option_is_described_in_help(capsys):
    from dsanalyze import cli

    with pytest.raises(SystemExit):
        cli.main_parser().parse_args(["make-dataset", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for option, words in (("dir", "folder to write"), ("--images", "JPEG files in all"),
                          ("--classes", "class folders"), ("--size", "WIDTHxHEIGHT in pixels"),
                          ("--size-jitter", "scaled by"), ("--seed", "the same seed writes")):
        assert option in text and words in text, option
