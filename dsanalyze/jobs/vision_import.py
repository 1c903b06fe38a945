"""torchvision imported without torch._dynamo, for a rank that compiles nothing.

`import torchvision` imports all of it (models, ops, transforms), and its
`ops.roi_align` takes one name from torch._dynamo at import time,
`torch._dynamo.utils.is_compile_supported`, to call when a box is pooled. That
one name costs the whole of dynamo and sympy: 1.5 CPU-s of the 3.4 that
`import torchvision` takes (torch 2.14, torchvision 0.29), in every rank of every
run, while a built-in job on the sim device never compiles, never pools a box,
and never builds a DistributedDataParallel model (which imports dynamo itself).

`import_torchvision()` imports torchvision with stand-ins for the package
`torch._dynamo` (no names: any other import of dynamo in the window fails) and
its `utils` (that one name, a function that imports the real one when called),
then removes them: whatever imports torch._dynamo afterwards (DDP, torch.compile,
a pooled box) gets the real one. A torchvision that needs more of dynamo at
import fails on a stand-in, and is imported as it is, dynamo and all.
"""

from __future__ import annotations

import sys
import types

DYNAMO, DYNAMO_UTILS = "torch._dynamo", "torch._dynamo.utils"


def is_compile_supported(device_type: str) -> bool:
    """torch._dynamo.utils.is_compile_supported, imported when first called."""
    from torch._dynamo.utils import is_compile_supported as real

    return real(device_type)


def import_torchvision() -> types.ModuleType:
    """The torchvision module; torch._dynamo is imported only if something else needs it."""
    if "torchvision" in sys.modules or DYNAMO in sys.modules:
        import torchvision

        return torchvision
    package, utils = types.ModuleType(DYNAMO), types.ModuleType(DYNAMO_UTILS)
    package.__path__ = []
    utils.is_compile_supported = is_compile_supported  # type: ignore[attr-defined]
    sys.modules.update({DYNAMO: package, DYNAMO_UTILS: utils})
    try:
        import torchvision
    except ImportError:
        torchvision = None  # a stand-in was not enough: imported below as it is
    finally:
        for name, stand_in in ((DYNAMO, package), (DYNAMO_UTILS, utils)):
            if sys.modules.get(name) is stand_in:
                del sys.modules[name]
    if torchvision is None:
        import torchvision
    return torchvision
