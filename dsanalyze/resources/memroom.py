"""The memory the page cache can have, and the part of a dataset a cached run warms.

    room = page_cache_room()                       # Room(bytes, why)
    files = cached_subset(dataset, room, spec)     # None: the whole dataset fits

The page cache the harness warms is charged to the harness's own memory cgroup and to every
ancestor's (the run cgroups are children of it on v1, of one of its ancestors on v2:
`cgroups._v2_parent`), and on the machine it takes what is
available. So the room is the least of `MemAvailable` (/proc/meminfo) and, for the
harness's memory cgroup and each ancestor with a limit (v1 `memory.limit_in_bytes`, v2
`memory.max`, found through /proc/self/cgroup), the limit less what it holds that is not
page cache (anonymous memory and shared memory cannot be pushed out to make room).

DS-Analyzer's method for data larger than memory: prep is measured on a subset that fits.
The subset is every k-th file in the dataset's sorted order (every class kept), as many as
fit in `SUBSET_SHARE` of the room less the job's own memory (which lives in the same
cgroups), or what `--cached-subset` says (`40%` of the dataset, `2G`, `off`).
On a machine with no memory limit (a shared server), the room is `MemAvailable`: other
processes' anonymous and shared memory are left to them, their page cache is room (the kernel
reclaims it first); the subset takes SUBSET_SHARE of what the job leaves, the rest is headroom
for the machine's other processes and the harness. The job's memory is the largest a run of
the sweep measured; before any did, an estimate (UNKNOWN_JOB_MEMORY_BYTES) that never takes
more than 3/4 of the room. A measured job that leaves no room gets a one-file subset.

The job's own memory is its anonymous and shared memory and its code: the resident pages of
the files it maps, or its share of the pages it maps where less (`code_bytes`). Code is page cache too, but hot: a subset that took its
room would have the kernel reclaim the subset's pages or the job's code during the cached
run, and that run would measure reads from disk as prep (bench/larger_than_memory.py: a
prep stall 26% above the same subset's with memory to spare, before code was counted).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dsanalyze.dataset import DatasetInfo
from dsanalyze.resources import pagecache
from dsanalyze.resources.cgroups import _kv, _own_cgroup_paths, _read

SUBSET_SHARE = 0.8  # of the room left for cache: the rest is headroom (the job's page tables,
# the harness's own growth, readahead beyond a file's end)
UNKNOWN_JOB_MEMORY_BYTES = 2 << 30  # the job's memory before any run of the sweep measured it
V1_MEMORY = Path("/sys/fs/cgroup/memory")
V2_ROOT = Path("/sys/fs/cgroup")
NO_LIMIT = 1 << 60  # v1 writes 0x7ffffffffffff000 for "none"


@dataclass(frozen=True)
class Room:
    """Bytes of page cache the machine or the harness's cgroup leaves, and which bound it."""

    room_bytes: int
    why: str  # "MemAvailable", or the cgroup file that binds


def mem_available(meminfo: str | None = None) -> int:
    text = Path("/proc/meminfo").read_text() if meminfo is None else meminfo
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return NO_LIMIT


def _cgroup_rooms() -> list[tuple[int, str]]:
    """(limit less non-cache usage, the limit's file) of the harness's memory cgroup and each
    ancestor that has a limit: v1 `memory` first, else v2."""
    own = _own_cgroup_paths()
    if "memory" in own and V1_MEMORY.is_dir():
        base, limit_name, usage_name, cache_key = V1_MEMORY, "memory.limit_in_bytes", \
            "memory.usage_in_bytes", "cache"
        path = own["memory"]
    elif "" in own:
        base, limit_name, usage_name, cache_key = V2_ROOT, "memory.max", "memory.current", "file"
        path = own[""]
    else:
        return []
    out = []
    d = base / path.lstrip("/")
    while True:
        text = _read(d / limit_name).strip()
        if text and text != "max" and int(text) < NO_LIMIT:
            stat = _kv(_read(d / "memory.stat"))
            held = int(_read(d / usage_name) or 0) - stat.get(cache_key, 0) + stat.get("shmem", 0)
            out.append((int(text) - max(0, held), str(d / limit_name)))
        if d == base or d.parent == d:
            return out
        d = d.parent


def page_cache_room() -> Room:
    """The least room for page cache the machine and the harness's cgroups leave."""
    rooms = [(mem_available(), "MemAvailable"), *_cgroup_rooms()]
    room, why = min(rooms)
    return Room(max(0, room), why)


def code_bytes(mapped: Iterable[str] | None, dataset_files: Iterable[str],
               pss_bytes: int | None = None) -> int:
    """The job's code: the resident bytes of the files it mapped, the dataset's own left out
    (a memory-mapped dataset is data, not code), or its share of the pages it mapped
    (`pss_bytes`, `libmaps.file_pss_bytes`) where less. Resident bytes count a whole library
    that the machine's other processes keep in the page cache (torch's hundreds of MB, in a
    shared venv) as the job's; its share counts the pages it maps, those it shares in part."""
    if not mapped:
        return 0
    data = set(dataset_files)
    resident = pagecache.resident_bytes(f for f in mapped if f not in data)
    return resident if pss_bytes is None else min(resident, pss_bytes)


def subset_bytes(total_bytes: int, room: Room, job_memory_bytes: int | None,
                 asked: str | None = None) -> int | None:
    """Bytes of the dataset a cached run warms: None for all of it. `asked`: `--cached-subset`
    (None or "auto": all if it fits in the room less the job's memory, else SUBSET_SHARE of
    that; "off": all; "40%": that share of the dataset; "2G": those bytes).
    `job_memory_bytes`: as a run of the sweep measured it, None before any did."""
    from dsanalyze.config import CacheBudget

    if asked == "off":
        return None
    if asked not in (None, "auto"):
        want = CacheBudget.parse(asked, total_bytes).cache_bytes
        return None if want is None or want >= total_bytes else int(want)
    if job_memory_bytes is None:  # an estimate never takes more than 3/4 of the room
        free = max(room.room_bytes - UNKNOWN_JOB_MEMORY_BYTES, room.room_bytes // 4)
    else:  # measured: the job keeps all of it, the subset shrinks (to one file at least)
        free = max(0, room.room_bytes - job_memory_bytes)
    if total_bytes <= SUBSET_SHARE * free:
        return None
    return int(SUBSET_SHARE * free)


def pick_files(files: tuple[str, ...], sizes: tuple[int, ...], budget_bytes: int
               ) -> tuple[str, ...]:
    """Every k-th file in sorted order, k the smallest stride whose files fit the budget (at
    least one file): spread over the whole dataset, so every class keeps its share."""
    total = sum(sizes)
    stride = max(1, -(-total // max(1, budget_bytes)))
    while stride < len(files) and sum(sizes[::stride]) > budget_bytes:
        stride += 1
    return tuple(files[::stride])


@dataclass(frozen=True)
class Subset:
    """The part of the dataset a cached run warms and reads, and why (`io.cache_state`)."""

    dataset: DatasetInfo  # the subset, as a dataset of its own
    of_files: int
    of_bytes: int
    room: Room
    asked: str  # --cached-subset
    list_path: Path  # one path a line: what the ranks narrow their dataset to

    def to_dict(self) -> dict[str, Any]:
        return {"files": self.dataset.num_files, "bytes": self.dataset.total_bytes,
                "of_files": self.of_files, "of_bytes": self.of_bytes,
                "room_bytes": self.room.room_bytes, "room_why": self.room.why,
                "asked": self.asked}


def subset(dataset: DatasetInfo, room: Room, job_memory_bytes: int | None, asked: str,
           run_dir: Path) -> Subset | None:
    """The subset a cached run of `dataset` uses, its list written to `run_dir`; None: all."""
    budget = subset_bytes(dataset.total_bytes, room, job_memory_bytes, asked)
    if budget is None:
        return None
    files = pick_files(dataset.files, dataset.file_bytes, budget)
    size = dict(zip(dataset.files, dataset.file_bytes))
    part = replace(dataset, files=files, file_bytes=tuple(size[f] for f in files))
    path = run_dir / "subset.txt"
    path.write_text("".join(f"{os.path.abspath(f)}\n" for f in files))
    return Subset(part, dataset.num_files, dataset.total_bytes, room, asked, path)
