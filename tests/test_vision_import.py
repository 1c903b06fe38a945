"""The built-in job imports torchvision without torch._dynamo, and dynamo still works after."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent

# In a fresh interpreter: import the built-in job, note what it imported, then use what the
# stand-ins stood for: torchvision's roi_align (which calls is_compile_supported) and the real
# dynamo, imported on demand.
AFTER_THE_JOB = """
import json, sys
import dsanalyze.jobs.image_classification as job
seen = {m: m in sys.modules for m in ("torchvision", "torch._dynamo", "sympy")}
import torch
from torchvision.ops import roi_align
image = torch.full((1, 1, 8, 8), 3.0)
pooled = roi_align(image, torch.tensor([[0.0, 1.0, 1.0, 5.0, 5.0]]), output_size=2)
import torch._dynamo.utils
print(json.dumps({"seen": seen, "pooled": pooled.flatten().tolist(),
                  "real": torch._dynamo.utils.is_compile_supported("cpu"),
                  "dynamo_is_package": hasattr(torch._dynamo, "optimize"),
                  "transforms": job.transforms.__name__}))
"""


def run_python(code: str, path: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, env=dict(os.environ, PYTHONPATH=path), check=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_the_builtin_job_imports_torchvision_without_dynamo_and_dynamo_works_after():
    got = run_python(AFTER_THE_JOB, str(ROOT))
    assert got["seen"] == {"torchvision": True, "torch._dynamo": False, "sympy": False}
    assert got["pooled"] == [3.0] * 4  # a constant image pools to its constant
    assert got["real"] is True and got["dynamo_is_package"] is True
    assert got["transforms"] == "torchvision.transforms"


def test_a_torchvision_that_needs_more_of_dynamo_is_imported_as_it_is(tmp_path):
    """A torchvision that takes another name from torch._dynamo at import fails on the
    stand-in, and is imported again with the real dynamo."""
    fake = tmp_path / "torchvision"
    fake.mkdir()
    (fake / "__init__.py").write_text("from torch._dynamo.utils import is_compile_supported, "
                                      "istype\nNEEDS = istype\n")
    code = ("import json, sys\nfrom dsanalyze.jobs.vision_import import import_torchvision\n"
            "tv = import_torchvision()\nimport torch._dynamo.utils as u\n"
            "print(json.dumps({'file': tv.__file__, 'real': tv.NEEDS is u.istype}))")
    got = run_python(code, f"{tmp_path}{os.pathsep}{ROOT}")
    assert got == {"file": str(fake / "__init__.py"), "real": True}
