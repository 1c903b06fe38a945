"""`python -m dsanalyze` is the `dsanalyze` command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import copy_of

from dsanalyze import cli

ROOT = Path(__file__).parent.parent


def python_m_dsanalyze(*argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "dsanalyze", *argv], capture_output=True,
                          text=True, env=env, timeout=120)


def test_python_m_dsanalyze_prints_what_the_command_prints(tmp_path, capsys):
    prefix = str(copy_of("report_sweep", tmp_path))  # summary writes summary.json
    assert cli.main(["summary", prefix]) == 0
    expected = capsys.readouterr().out
    out = python_m_dsanalyze("summary", prefix)
    assert out.returncode == 0, out.stderr
    assert out.stdout == expected and "fetch-bound" in expected


def test_python_m_dsanalyze_errors_in_one_line_with_exit_2(tmp_path):
    out = python_m_dsanalyze("summary", str(tmp_path / "missing"))
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"error: no runs under {tmp_path / 'missing'}: run harness.py --prefix "
        f"{tmp_path / 'missing'} first"]
