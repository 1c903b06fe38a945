"""The import graph: analysis, whatif and report are pure, and never pull in the measuring side."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent

# Import dsanalyze.report, dsanalyze.analysis, dsanalyze.whatif and every module in them, then
# list what else got imported.
PROBE = """
import importlib, json, pkgutil, sys
import dsanalyze.analysis, dsanalyze.report, dsanalyze.whatif
for pkg in (dsanalyze.analysis, dsanalyze.report, dsanalyze.whatif):
    for m in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"{pkg.__name__}.{m.name}")
print(json.dumps(sorted(sys.modules)))
"""
# The measuring side, the store's I/O and the facade above them: the pure layers reach none.
FORBIDDEN = ("torch", "torchvision", "nvidia", "dsanalyze.launch", "dsanalyze.sweep",
             "dsanalyze.jobs", "dsanalyze.resources", "dsanalyze.monitor", "dsanalyze.cli",
             "dsanalyze.store", "dsanalyze.app", "dsanalyze.nodes", "dsanalyze.datafind",
             "dsanalyze.fileset", "dsanalyze.fingerprint", "dsanalyze.instrument.api",
             "dsanalyze.instrument.loader", "dsanalyze.instrument.bootstrap",
             "dsanalyze.remote.served", "dsanalyze.remote.netlink", "dsanalyze.remote.runlink",
             "dsanalyze.remote.probe", "dsanalyze.remote.endpoint")


def test_analysis_whatif_and_report_import_neither_torch_nor_the_measuring_side():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120, check=True)
    modules = json.loads(out.stdout)
    assert "dsanalyze.report.plots" in modules and "dsanalyze.whatif.api" in modules
    leaked = [m for m in modules if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]
    assert leaked == []


# What runs inside each rank, and what launches it: the measuring side.
RANK_PROBE = """
import importlib, json, pkgutil, sys
import dsanalyze.instrument, dsanalyze.jobs, dsanalyze.resources
for pkg in (dsanalyze.instrument, dsanalyze.jobs, dsanalyze.resources):
    for m in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"{pkg.__name__}.{m.name}")
import dsanalyze.launch
print(json.dumps(sorted(sys.modules)))
"""


def test_the_measuring_side_imports_neither_analysis_nor_report():
    out = subprocess.run([sys.executable, "-c", RANK_PROBE], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300, check=True)
    modules = json.loads(out.stdout)
    assert "dsanalyze.instrument.transforms" in modules and "dsanalyze.launch" in modules
    leaked = [m for m in modules if m.split(".")[:2] in (["dsanalyze", "analysis"],
                                                         ["dsanalyze", "report"],
                                                         ["dsanalyze", "whatif"],
                                                         ["dsanalyze", "app"])]
    assert leaked == []
