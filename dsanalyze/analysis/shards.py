"""Read bytes and fetch stall per shard: streaming datasets, where the file is the unit of fetch.

Each rank of a cached or disk run records, per data file its loader read
through webdataset (`instrument/filereads.py`), `opens`, `read_bytes` and
`read_s` (time blocked in its reads, in every worker). Here:

- `file_reads(run)`: the run's rows summed over its ranks;
- `shard_reads(cached, disk)` (as JSON rows: `shard_table`): per file, bytes read and read time in both
  runs, and `fetch_s = disk read_s - cached read_s`: the time the disk run's
  workers spent waiting on storage for that shard beyond what reading it
  from the page cache costs. It is worker time, not loop time: it becomes
  loop stall only where the workers could not hide it (the run's fetch stall,
  T_disk - T_cached, is the loop-side total). `fetch_share` is each shard's
  part of the summed `fetch_s` (clamped at zero), to split that total.

Pure functions over stored runs: no torch.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from dsanalyze.records import RunResult


def file_reads(run: RunResult) -> dict[str, dict[str, Any]]:
    """file -> {"opens", "read_bytes", "read_s"}, summed over the run's ranks."""
    out: dict[str, dict[str, Any]] = {}
    for rank in run.ranks:
        for row in rank.extra.get("files") or ():
            acc = out.setdefault(row["file"], {"opens": 0, "read_bytes": 0, "read_s": 0.0})
            acc["opens"] += int(row["opens"])
            acc["read_bytes"] += int(row["read_bytes"])
            acc["read_s"] += float(row["read_s"])
    return out


class ShardReads(NamedTuple):
    """One shard's reads in a cached and a disk run, and the disk run's extra read time."""

    file: str
    cached_read_bytes: int
    disk_read_bytes: int
    cached_read_s: float
    disk_read_s: float
    fetch_s: float  # disk_read_s - cached_read_s: worker time waiting on storage
    fetch_share: float  # of the summed fetch_s (each clamped at 0)


def shard_reads(cached: RunResult, disk: RunResult) -> list[ShardReads]:
    """Per shard read by either run: reads in both, and the disk run's extra read time."""
    c, d = file_reads(cached), file_reads(disk)
    empty = {"opens": 0, "read_bytes": 0, "read_s": 0.0}
    both = [(path, c.get(path, empty), d.get(path, empty)) for path in sorted(set(c) | set(d))]
    fetch = [rd["read_s"] - rc["read_s"] for _, rc, rd in both]
    total = sum(max(0.0, f) for f in fetch)
    return [ShardReads(path, rc["read_bytes"], rd["read_bytes"], rc["read_s"], rd["read_s"], f,
                       max(0.0, f) / total if total > 0 else 0.0)
            for (path, rc, rd), f in zip(both, fetch)]


def shard_table(cached: RunResult, disk: RunResult) -> list[dict[str, Any]]:
    """`shard_reads` as JSON rows."""
    return [r._asdict() for r in shard_reads(cached, disk)]
