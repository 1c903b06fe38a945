"""The report's per-shard reads: streaming datasets (webdataset), where the shard is the
unit of fetch.

For each disk run whose ranks counted reads per data file, paired with the
cached run of the same CPUs, one table of `analysis.shards.shard_reads`'s
rows: bytes read and time blocked reading in each run, and the disk run's
extra read time per shard (`fetch_s`, worker time) with its share of the
total. The shards with the most fetch time come first; the table stops at
`most` rows and says how many it left out. Every number is read from the
analysis; nothing is computed here. No shard counted (an ImageFolder job,
no disk run): no section.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsanalyze.analysis.shards import ShardReads, shard_reads
from dsanalyze.config import Mode, format_bytes
from dsanalyze.records import RunResult
from dsanalyze.report.text import number

COLUMNS = ("shard", "cached read", "disk read", "cached read s", "disk read s", "fetch s",
           "fetch share")


def _pairs(runs: list[RunResult]) -> list[tuple[RunResult, RunResult]]:
    """(cached, disk) of the same CPUs, first repeats, disk runs in their stored order."""
    first = [r for r in runs if r.ok and r.spec.repeat == 1]
    cached = {r.spec.resources.cpus: r for r in first if r.mode is Mode.CACHED}
    return [(cached[r.spec.resources.cpus], r) for r in first
            if r.mode is Mode.DISK and r.spec.resources.cpus in cached]


def table_rows(rows: list[ShardReads], most: int = 10) -> list[list[str]]:
    """`shard_reads` rows as table cells, most fetch time first, at most `most` of them."""
    ranked = sorted(rows, key=lambda r: (-r.fetch_s, r.file))[:most]
    return [[Path(r.file).name, format_bytes(r.cached_read_bytes),
             format_bytes(r.disk_read_bytes), number(r.cached_read_s, "{:.2f}"),
             number(r.disk_read_s, "{:.2f}"), number(r.fetch_s, "{:.2f}"),
             number(100 * r.fetch_share, "{:.0f}%")] for r in ranked]


def shard_blocks(runs: list[RunResult], most: int = 10) -> list[tuple[Any, ...]]:
    """The report's "Reads per shard" section (report blocks), or [] when no shard was counted."""
    blocks: list[tuple[Any, ...]] = []
    for cached, disk in _pairs(runs):
        rows = shard_reads(cached, disk)
        if not rows:
            continue
        more = len(rows) - most
        left = f" ({more} more shard{'s' if more > 1 else ''} not shown)" if more > 0 else ""
        blocks += [("p", f"**{disk.run_id}** against **{cached.run_id}**: {len(rows)} shards "
                         f"read{left}. `fetch s` is the disk run's read time minus the cached "
                         "run's, summed over its workers: worker time, which becomes loop "
                         "stall only where the workers could not hide it."),
                   ("table", list(COLUMNS), table_rows(rows, most))]
    return [("h2", "Reads per shard"), *blocks] if blocks else []
