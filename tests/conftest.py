"""Shared fixtures: a small generated JPEG dataset and in-process harness runs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from dsanalyze import cli
from dsanalyze.jobs.datasets import make_dataset
from dsanalyze.resources import cgroups

ROOT = Path(__file__).parent.parent
DATA_DIR = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """96 real JPEGs (about 100 KB each) in 4 classes."""
    root = tmp_path_factory.mktemp("dataset") / "data"
    make_dataset(root, images=96, classes=4, size=(500, 375), size_jitter=0.2, seed=1)
    return root


def copy_of(name: str, tmp_path: Path) -> Path:
    """A writable copy of the committed results under tests/data/<name>."""
    return Path(shutil.copytree(DATA_DIR / name, tmp_path / name))


def harness(*argv: str) -> int:
    """Run harness.py in-process; returns its exit code."""
    return cli.harness_main([str(a) for a in argv])


def cgroups_writable() -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, "needs root to write cgroups"
    try:
        cgroups.probe()
    except Exception as e:  # any failure means: not permitted on this machine
        return False, f"cgroups not writable here: {e}"
    return True, ""


_CG_OK, _CG_WHY = cgroups_writable()
needs_cgroups = pytest.mark.skipif(not _CG_OK, reason=_CG_WHY or "cgroups writable")
