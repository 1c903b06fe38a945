"""The declared layers (pyproject.toml's `[tool.importlinter]` contracts) hold, and can fail.

`make lint` runs `lint-imports` itself; this test runs it too, so a plain
`pytest` sees a broken layer, and proves the contracts are not vacuous: the
same check over a copy of the package with one wrong-way import must fail,
naming that import.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
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
    ("dsanalyze/settings.py", "dsanalyze.whatif.model"),  # the settings are a value
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


def _diagram_lines() -> list[set[str]]:
    """docs/design.md's layer drawing: each line's module names, commentary (text in
    parentheses) left out."""
    text = (ROOT / "docs" / "design.md").read_text()
    block = text.split("### The one-way flow", 1)[1].split("```", 2)[1]
    names = {p.stem for p in (ROOT / "dsanalyze").iterdir()
             if not p.name.startswith("_") and (p.suffix == ".py" or p.is_dir())}
    return [set(re.findall(r"[a-z_]+", re.sub(r"\([^)]*\)", "", line))) & names
            for line in block.splitlines()]


def _layers_contracts() -> dict[str, list[list[str]]]:
    """Each "layers" contract of pyproject.toml: its layers, top first, as module names."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["id"]: [[m.strip().removeprefix("dsanalyze.") for m in layer.split(":")]
                      for layer in c["layers"]]
            for c in config["contracts"] if c["type"] == "layers"}


def test_the_design_diagram_draws_the_contracts():
    """Every layer of every "layers" contract is one line of the drawing, in the contract's
    order, and the drawing names no module that no contract declares: they cannot drift."""
    lines = _diagram_lines()
    declared = set()
    for contract, layers in _layers_contracts().items():
        rows = []
        for layer in layers:
            found = {i for i, names in enumerate(lines) for m in layer if m in names}
            assert len(found) == 1, (contract, layer, sorted(found))
            (row,) = found
            assert set(layer) <= lines[row], (contract, layer, lines[row])
            rows.append(row)
            declared |= set(layer)
        assert rows == sorted(rows) and len(set(rows)) == len(rows), (contract, rows)
    drawn = set().union(*lines)
    assert drawn <= declared, drawn - declared
    for names in lines:  # each module is drawn once
        for m in names:
            assert sum(m in other for other in lines) == 1, m
