"""The dataset's fingerprint: which files, how big, last changed when.

    fp = Fingerprint.of(dataset)        # count, total bytes, sha256 of names, sizes, mtimes

Each run records the fingerprint of the data it read (`run.dataset.fingerprint`).
Runs over different data must not be mixed in one stall table: `--resume`
refuses to add to a prefix whose runs saw other data, a sweep stops when its
data changes between two runs, and `summary` refuses a prefix that mixes
them. Runs stored before fingerprints existed carry none and are not judged.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dsanalyze.dataset import DatasetInfo, scan_dataset
from dsanalyze.errors import DatasetError, StoreError


@dataclass(frozen=True)
class Fingerprint:
    files: int
    bytes: int
    sha256: str  # over "relative name, size, mtime in ns" of every file, in sorted order

    @classmethod
    def of(cls, dataset: DatasetInfo) -> Fingerprint:
        h = hashlib.sha256()
        total = 0
        for path in dataset.files:
            st = os.stat(path)
            total += st.st_size
            h.update(f"{os.path.relpath(path, dataset.root)}\0{st.st_size}\0{st.st_mtime_ns}\n"
                     .encode())
        return cls(len(dataset.files), total, h.hexdigest())

    @classmethod
    def of_root(cls, root: str) -> Fingerprint:
        return cls.of(scan_dataset(root))

    def to_dict(self) -> dict[str, Any]:
        return {"files": self.files, "bytes": self.bytes, "sha256": self.sha256}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Fingerprint:
        return cls(int(d["files"]), int(d["bytes"]), str(d["sha256"]))

    def describe(self) -> str:
        return f"{self.files} files, {self.bytes} bytes, {self.sha256[:12]}"


def of_run(run: Any) -> Fingerprint | None:
    """The fingerprint a stored run recorded, or None (runs from before fingerprints)."""
    d = run.dataset.fingerprint
    return Fingerprint.from_dict(d) if d else None


def _ids(runs: Iterable[Any]) -> str:
    return ", ".join(sorted(r.run_id for r in runs))


def check_resumable(stored: list[Any], now: Fingerprint, rerun_ids: set[str],
                    resume: bool) -> None:
    """Refuse to add runs over `now` to a prefix whose kept runs saw other data.

    Without `--resume` the runs of this sweep are measured again and replace the
    stored ones; only the others would mix.
    """
    kept = [r for r in stored if resume or r.run_id not in rerun_ids]
    other = [r for r in kept if (fp := of_run(r)) is not None and fp != now]
    if other:
        was = of_run(other[0])
        raise DatasetError(f"the dataset changed since runs {_ids(other)} were measured (then "
                           f"{was.describe()}; now {now.describe()}): restore it, or pass "
                           "another --prefix, or delete those runs to measure them again")


def check_unchanged(current: DatasetInfo, start: Fingerprint) -> Fingerprint:
    """The fingerprint of the data scanned again now (`current`); DatasetError if it moved
    since the sweep started."""
    now = Fingerprint.of(current)
    if now != start:
        raise DatasetError(f"the dataset {current.root} changed during the sweep (was "
                           f"{start.describe()}; "
                           f"now {now.describe()}): runs measured so far are kept; restore the "
                           "data, or start again with another --prefix")
    return now


def check_consistent(runs: list[Any]) -> None:
    """StoreError naming the runs when they were measured over different data."""
    groups: dict[Fingerprint, list[Any]] = {}
    for r in runs:
        if (fp := of_run(r)) is not None:
            groups.setdefault(fp, []).append(r)
    if len(groups) > 1:
        parts = "; ".join(f"{_ids(rs)} on {fp.describe()}" for fp, rs in groups.items())
        raise StoreError(f"runs measured on different data cannot be summarised together: "
                         f"{parts}: measure them again on one dataset, or split the prefix")
