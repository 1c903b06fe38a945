"""The dataset of a run as found on disk: an ImageFolder's files, in sorted order, and their sizes.

A core value: the harness scans the data before every run (`scan_dataset`),
`fileset` builds the same value from a script's `--data`, and
`fingerprint`, `launch`, `sweep` and `resources.cpuscale` read it. What a run
stores of it is `records.DatasetRecord` (`DatasetInfo.record`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from dsanalyze.errors import DatasetError
from dsanalyze.records import DatasetRecord

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


@dataclass(frozen=True)
class DatasetInfo:
    """An ImageFolder as found on disk: files in sorted order and their sizes."""

    root: str
    classes: tuple[str, ...]
    files: tuple[str, ...]
    file_bytes: tuple[int, ...]

    @property
    def total_bytes(self) -> int:
        return sum(self.file_bytes)

    @property
    def num_files(self) -> int:
        return len(self.files)

    def size_quantiles(self, n: int = 101) -> list[int]:
        """File sizes at n equally spaced quantiles (0% .. 100%), for the cache simulator."""
        ordered = sorted(self.file_bytes)
        last = len(ordered) - 1
        return [ordered[round(i * last / (n - 1))] for i in range(n)]

    def record(self) -> DatasetRecord:
        """What a run stores of it: counts, bytes and the size distribution, not the list."""
        return DatasetRecord(self.root, len(self.classes), self.num_files, self.total_bytes,
                             tuple(self.size_quantiles()))


def scan_dataset(root: str | Path) -> DatasetInfo:
    """List an ImageFolder (`root/<class>/<image>`); raise DatasetError if unusable."""
    root = Path(root)
    if not root.exists():
        raise DatasetError(f"dataset directory {root} does not exist: pass --data DIR, "
                           f"or create one with `dsanalyze make-dataset {root}`")
    if not root.is_dir():
        raise DatasetError(f"dataset path {root} is not a directory")
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
    if not classes:
        raise DatasetError(f"dataset directory {root} has no class folders: "
                           "an ImageFolder is DIR/<class>/<image>.jpg")
    files: list[str] = []
    sizes: list[int] = []
    for cls in classes:
        for dirpath, _, names in sorted(os.walk(root / cls, followlinks=True)):
            for name in sorted(names):
                if name.lower().endswith(IMAGE_EXTENSIONS):
                    path = os.path.join(dirpath, name)
                    files.append(path)
                    sizes.append(os.stat(path).st_size)
    if not files:
        raise DatasetError(f"dataset directory {root} holds no image files "
                           f"({', '.join(IMAGE_EXTENSIONS[:3])}, ...) under its class folders")
    return DatasetInfo(str(root), tuple(classes), tuple(files), tuple(sizes))
