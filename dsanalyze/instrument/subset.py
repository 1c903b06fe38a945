"""Cached runs of data larger than memory: the script's dataset narrowed to the warmed subset.

The harness warms a subset of the dataset that fits the page cache (`resources/memroom.py`)
and lists it in `$DSANALYZE_SUBSET`, one path a line. A torchvision `DatasetFolder` (so
`ImageFolder`, and the built-in job) then lists only those files: `make_dataset` is wrapped
when torchvision's folder module is imported, before the script builds its dataset and its
sampler, so lengths and samplers agree. Another dataset type cannot be narrowed from outside:
its cached run reads files that were not warmed, and the rank's record says that nothing was
narrowed (`narrowed` stays 0), which the table flags as a cached run that was not cached.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dsanalyze.instrument.loader import patch_attr

FOLDER_MODULE = "torchvision.datasets.folder"


class Narrowing:
    """The subset's paths, and how many samples the datasets kept and dropped."""

    def __init__(self, list_path: str) -> None:
        self.paths = {os.path.realpath(p) for p in Path(list_path).read_text().splitlines() if p}
        self.kept = 0
        self.dropped = 0

    def keep(self, samples: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
        out = [s for s in samples if os.path.realpath(s[0]) in self.paths]
        self.kept += len(out)
        self.dropped += len(samples) - len(out)
        return out or samples  # nothing of it warmed: not the dataset the harness scanned

    def patch_folder(self, module: types.ModuleType) -> Callable[[], None]:
        """Wrap `DatasetFolder.make_dataset`; returns the function that puts it back."""
        folder = module.DatasetFolder
        original = folder.make_dataset

        def make_dataset(*args: Any, **kwargs: Any) -> list[tuple[str, Any]]:
            return self.keep(original(*args, **kwargs))
        return patch_attr(folder, "make_dataset", staticmethod(make_dataset))

    def to_dict(self) -> dict[str, int]:
        return {"subset_files": len(self.paths), "kept": self.kept, "dropped": self.dropped}
