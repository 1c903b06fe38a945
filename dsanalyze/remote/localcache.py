"""A streaming library's local cache of served data: pre-filled for `cached`, emptied for
`remote`.

Libraries such as mosaicml-streaming (`StreamingDataset(remote=..., local=DIR)`) copy
each shard they read from the remote into a local directory, with the remote's layout,
and read it from there afterwards. Over a network the modes mean:

- `cached` (and `loader`): the data on this side, so the cache holds every file of the
  served `--data` directory at its relative path, as the library would have left it;
- `remote`: nothing on this side, so those files are deleted from the cache first and
  the library fetches every shard it needs across the shaped link.

Only the served data's own paths are written or deleted: a directory the user named is
never emptied wholesale. The directory is `--local-cache DIR`, or the value the script
is given for `--local` (StreamingDataset's own parameter name), `--local-cache`,
`--local-dir` or `--cache-dir`.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dsanalyze.config import Mode, RunSpec
from dsanalyze.linkrecords import LocalCacheAction, LocalCacheState

SCRIPT_FLAGS = ("--local", "--local-cache", "--local-dir", "--cache-dir")


def from_script_args(args: Sequence[str]) -> str | None:
    """The local cache directory a script is given (`--local DIR` or `--local=DIR`)."""
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag in SCRIPT_FLAGS:
            if eq:
                return value
            if i + 1 < len(args) and "{" not in args[i + 1]:
                return args[i + 1]
    return None


@dataclass(frozen=True)
class LocalCache:
    """The cache directory `dir` of the served data under `root` (its `files`)."""

    dir: Path
    root: Path
    files: tuple[Path, ...]

    def _targets(self) -> list[tuple[Path, Path]]:
        return [(f, self.dir / f.relative_to(self.root)) for f in self.files]

    def prepare(self, spec: RunSpec) -> LocalCacheState:
        """Fill the cache for a run on this side of the link, empty it for a remote run."""
        if spec.mode is Mode.DISK and spec.resources.remote:
            for _, target in self._targets():
                target.unlink(missing_ok=True)
            return LocalCacheState(str(self.dir), LocalCacheAction.EMPTIED, 0)
        copied = 0
        for source, target in self._targets():
            size = source.stat().st_size
            if not target.is_file() or target.stat().st_size != size:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)
            copied += size
        return LocalCacheState(str(self.dir), LocalCacheAction.FILLED, copied)
