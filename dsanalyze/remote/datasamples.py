"""How many samples the served data holds, and so its bytes a sample: what turns the bytes
the link carried into the samples it carried.

    bytes_per_sample(files) -> float | None

An image file is one sample; a tar shard (webdataset) one a key (a member's name up to
the first dot of its base name, as webdataset groups `key.jpg` and `key.cls`); a
mosaicml-streaming directory the samples its `index.json` lists (its `.mds` shards then
count none of their own). Any other file leaves the count unknown (None): the link's bytes
are then not turned into samples.
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Sequence
from pathlib import Path

from dsanalyze.dataset import IMAGE_EXTENSIONS

MDS_INDEX = "index.json"


def _tar_keys(path: Path) -> int:
    with tarfile.open(path) as tar:
        names = (m.name for m in tar.getmembers() if m.isfile())
        return len({n.rpartition("/")[0] + "/" + n.rpartition("/")[2].split(".", 1)[0]
                    for n in names})


def _mds_samples(index: Path) -> int:
    return sum(int(s.get("samples", 0)) for s in json.loads(index.read_text())["shards"])


def samples_in(path: Path) -> int | None:
    """Samples one served file holds (an `.mds` shard: 0, its index counts them); None:
    a kind of file this does not know."""
    name = path.name.lower()
    if name.endswith(IMAGE_EXTENSIONS):
        return 1
    if name.endswith(".tar"):
        return _tar_keys(path)
    if name == MDS_INDEX:
        return _mds_samples(path)
    if ".mds" in name:
        return 0
    return None


def bytes_per_sample(files: Sequence[Path]) -> float | None:
    """The served files' bytes over their samples; None when a file's samples are unknown,
    or there are none."""
    counts = [samples_in(f) for f in files]
    known = [c for c in counts if c is not None]
    if len(known) < len(counts) or not sum(known):
        return None
    return sum(f.stat().st_size for f in files) / sum(known)
