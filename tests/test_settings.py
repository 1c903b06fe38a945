"""The tuned constants: one documented value, and the code reads it.

Each setting says what it is, its unit and where it was tuned (a grid, a bench, or the
convention it follows, with the commit that introduced it); a module that kept its own
copy of one (a module-level number of the same value under the old upper-case name)
would be a second copy of the rule.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from dsanalyze.settings import SETTINGS, Settings

ROOT = Path(__file__).parent.parent


def test_every_setting_says_what_its_unit_and_where_it_was_tuned():
    described = SETTINGS.describe()
    assert [d["name"] for d in described] == [f.name for f in dataclasses.fields(Settings)]
    for d in described:
        assert d["what"] and "unit" in d and d["tuned"], d
        assert re.search(r"\([0-9a-f]{7}\)$", d["tuned"]), d  # the commit that introduced it
        assert isinstance(d["value"], int | float), d


def test_settings_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        SETTINGS.noise_floor = 0.5  # type: ignore[misc]


def test_no_module_keeps_a_copy_of_a_setting():
    """No module-level upper-case name in the analysis, the what-if or the adaptive runs is
    bound to a number literal that is the value of a setting of the same meaning (its name
    the setting's, upper-cased, or the old name of one)."""
    names = {f.name.upper() for f in dataclasses.fields(Settings)} | {
        "PREP_BOUND", "CACHE_BINDS", "NOISE_FLOOR", "BINDS", "FOREIGN_FACTOR", "SETTLED",
        "CHANCE_MIN", "TOLERANCE", "SAME_REL", "SAME_S", "MAX_CHUNKS", "CPU_PCT",
        "MACHINE_PCT", "READ_SHARE", "READ_FLOOR_BYTES", "STALL_FACTOR", "MIN_BLOCKS",
        "LEAD_ITERS", "TARGET_PCT", "MAX_STALL_PCT", "MEMORY_BPS", "SEEDS", "SIM_SAMPLES",
        "RATED_BATCHES", "UNTESTED_SIGMA", "DEFAULT_REL_SIGMA", "RESIDENT_SHARE"}
    paths = [*(ROOT / "dsanalyze" / "analysis").glob("*.py"),
             *(ROOT / "dsanalyze" / "whatif").glob("*.py"),
             ROOT / "dsanalyze" / "adaptive.py", ROOT / "dsanalyze" / "instrument" / "untilci.py"]
    copies = []
    for path in paths:
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name) and target.id in names and \
                            isinstance(node.value, ast.Constant):
                        copies.append(f"{path.name}: {target.id}")
    assert copies == []
