"""`--data` for a script: any set of files; and the choice made from a discovery record."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsanalyze import datafind
from dsanalyze.errors import DatasetError
from dsanalyze.fileset import expand_braces, scan_files


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """shards/s-000.tar .. s-003.tar (sizes 100..103), a hidden file, a label file."""
    d = tmp_path / "shards"
    d.mkdir()
    for i in range(4):
        (d / f"s-{i:03d}.tar").write_bytes(b"x" * (100 + i))
    (d / ".lock").write_text("")
    (d / "labels.txt").write_text("a\nb\n")
    return d


@pytest.mark.parametrize("spec,names", [
    ("{d}", ["labels.txt", "s-000.tar", "s-001.tar", "s-002.tar", "s-003.tar"]),
    ("{d}/*.tar", ["s-000.tar", "s-001.tar", "s-002.tar", "s-003.tar"]),
    ("{d}/s-{{001..002}}.tar", ["s-001.tar", "s-002.tar"]),
    ("{d}/s-00{{0,3}}.tar", ["s-000.tar", "s-003.tar"]),
    ("{d}/s-002.tar", ["s-002.tar"]),
    ("{list}", ["s-001.tar", "s-003.tar"]),
], ids=["directory", "glob", "brace range", "brace list", "one file", "file list"])
def test_any_set_of_files(tree, spec, names):
    listing = tree.parent / "train.lst"
    listing.write_text("# train shards\nshards/s-001.tar\n\n" + str(tree / "s-003.tar") + "\n")
    data = scan_files(spec.format(d=tree, list=listing))
    assert [Path(f).name for f in data.files] == names
    assert data.root == str(tree) and data.classes == ()
    assert data.total_bytes == sum(Path(f).stat().st_size for f in data.files)


def test_nothing_matches_names_the_value(tree):
    with pytest.raises(DatasetError, match=r"--data .*/nope-\*\.tar: no such file"):
        scan_files(str(tree / "nope-*.tar"))


def test_brace_expansion_keeps_the_width():
    assert expand_braces("a-{08..10}-{x,y}") == ["a-08-x", "a-08-y", "a-09-x", "a-09-y",
                                                 "a-10-x", "a-10-y"]


def test_discovery_record_declared_paths_win(tree):
    found = {"declared": {"source": "SimpleShardList.urls", "paths": [str(tree / "s-000.tar")]},
             "opened": [str(tree / "labels.txt")]}
    data, how = datafind.choose(found)
    assert data.files == (str(tree / "s-000.tar"),) and "SimpleShardList.urls" in how


def test_discovery_widens_opened_files_to_their_extensions(tree):
    opened = [str(tree / "s-001.tar"), str(tree / "s-003.tar")]
    data, how = datafind.choose({"declared": None, "opened": opened})
    assert [Path(f).name for f in data.files] == [f"s-{i:03d}.tar" for i in range(4)]
    assert "widened to every .tar file under" in how


def test_discovery_with_nothing_found_says_pass_data():
    with pytest.raises(DatasetError, match="pass --data"):
        datafind.choose({"declared": None, "opened": []})
