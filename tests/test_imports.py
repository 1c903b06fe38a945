"""The declared layers (pyproject.toml's `[tool.importlinter]` contracts) hold, and can fail.

`make lint` runs `lint-imports` itself; this test runs it too, so a plain
`pytest` sees a broken layer, and proves the contracts are not vacuous: the
same check over a copy of the package with one wrong-way import must fail,
naming that import.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT_IMPORTS), "--config", str(root / "pyproject.toml"),
                           "--no-cache"], cwd=root, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(root)))


def test_the_declared_layers_hold():
    out = _lint_imports(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


# (module that gains the import, the import: one per contract, each against its direction)
WRONG_WAY = [
    ("dsanalyze/analysis/window.py", "torch"),  # pure: no torch
    ("dsanalyze/report/text.py", "dsanalyze.store"),  # pure: no store I/O
    ("dsanalyze/analysis/window.py", "dsanalyze.report.text"),  # analysis below report
    ("dsanalyze/launch.py", "dsanalyze.analysis.stalls"),  # measuring: no analysis
    ("dsanalyze/store.py", "dsanalyze.sweep"),  # the store below the sweep
    ("dsanalyze/app.py", "dsanalyze.cli"),  # the facade below the command line
    ("dsanalyze/cli.py", "dsanalyze.launch"),  # the command line reaches the rest through app
]


@pytest.mark.parametrize(("module", "imported"), WRONG_WAY)
def test_a_wrong_way_import_breaks_a_contract(tmp_path, module, imported):
    shutil.copytree(ROOT / "dsanalyze", tmp_path / "dsanalyze",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    path = tmp_path / module
    path.write_text(path.read_text() + f"\nimport {imported}  # noqa\n")
    out = _lint_imports(tmp_path)
    assert out.returncode == 1, out.stdout
    importer = module.removesuffix(".py").replace("/", ".")
    assert f"{importer} -> {imported} (l." in out.stdout, out.stdout
