"""What runs inside each rank: timed loaders, the user-script bootstrap, transform timing.

The package itself is callable: `dsanalyze.instrument(loader)` is
`dsanalyze.instrument.api.instrument(loader)` (see there). A package and a
function cannot share the name `dsanalyze.instrument` otherwise, because
importing any submodule sets the package as that attribute of `dsanalyze`.
Nothing heavy is imported until it is called.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallablePackage(types.ModuleType):
    def __call__(self, loader: Any) -> Any:
        from dsanalyze.instrument.api import instrument

        return instrument(loader)


sys.modules[__name__].__class__ = _CallablePackage
