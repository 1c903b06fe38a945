"""A script's dataset as a set of files: the files the harness warms, evicts and measures.

For a user script, `--data` only names the files the job reads, in any layout:

    --data /data/shards                   every file under the directory
    --data '/data/shards/train-*.tar'     a glob (`**` recurses)
    --data '/data/train-{000..127}.tar'   webdataset's brace notation
    --data /data/train_files.txt          a file list: one path a line (relative to the list)
    --data /data/train-000.tar            one file

`scan_files` lists them, sorted, with their sizes, as the `DatasetInfo` the
sweep uses for an ImageFolder (`classes` is empty; `root` is the deepest
directory holding every file). The built-in job still needs an ImageFolder
(`dataset.scan_dataset`).
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from dsanalyze.dataset import DatasetInfo
from dsanalyze.errors import DatasetError

GLOB_CHARS = re.compile(r"[*?\[]")
BRACE_RANGE = re.compile(r"\{(\d+)\.\.(\d+)\}")
BRACE_LIST = re.compile(r"\{([^{}]*,[^{}]*)\}")
LIST_MAX_BYTES = 64 << 20  # a file list larger than this is taken as a data file


def expand_braces(pattern: str) -> list[str]:
    """`a-{000..002}.tar` -> a-000.tar, a-001.tar, a-002.tar; `{a,b}` -> a, b (as webdataset)."""
    m = BRACE_RANGE.search(pattern)
    if m:
        lo, hi, width = int(m[1]), int(m[2]), len(m[1])
        return [p for i in range(lo, hi + 1)
                for p in expand_braces(pattern[:m.start()] + f"{i:0{width}d}" + pattern[m.end():])]
    m = BRACE_LIST.search(pattern)
    if m:
        return [p for alt in m[1].split(",")
                for p in expand_braces(pattern[:m.start()] + alt + pattern[m.end():])]
    return [pattern]


def _walk(root: Path, extensions: tuple[str, ...] | None) -> Iterable[str]:
    for dirpath, dirnames, names in os.walk(root, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(names):
            if name.startswith("."):
                continue
            if extensions is None or name.lower().endswith(extensions):
                yield os.path.join(dirpath, name)


def _file_list(path: Path) -> list[str] | None:
    """The paths a file list names, or None if `path` is not a list of existing files."""
    if path.stat().st_size > LIST_MAX_BYTES:
        return None
    try:
        lines = [ln.strip() for ln in path.read_text().splitlines()]
    except (UnicodeDecodeError, OSError):
        return None
    lines = [ln for ln in lines if ln and not ln.startswith("#")]
    paths = [str((path.parent / ln).resolve()) if not os.path.isabs(ln) else ln for ln in lines]
    return paths if paths and all(os.path.isfile(p) for p in paths) else None


def _expand(spec: str, extensions: tuple[str, ...] | None) -> list[str]:
    """Every file one `--data` value names."""
    if GLOB_CHARS.search(spec) or BRACE_RANGE.search(spec) or BRACE_LIST.search(spec):
        return [f for p in expand_braces(spec) for f in sorted(glob.glob(p, recursive=True))
                if os.path.isfile(f)]
    path = Path(spec)
    if path.is_dir():
        return list(_walk(path, extensions))
    if path.is_file():
        return _file_list(path) or [str(path)]
    return []


def scan_files(specs: str | Sequence[str], extensions: Sequence[str] | None = None) -> DatasetInfo:
    """The files `specs` name (directories, globs, brace patterns, file lists, files).

    `extensions` (such as `[".jpg"]`) keeps only those files under a directory.
    Raises DatasetError, naming the value, when nothing is found.
    """
    specs = [specs] if isinstance(specs, str) else list(specs)
    exts = tuple(e.lower() for e in extensions) if extensions else None
    files: dict[str, int] = {}
    for spec in specs:
        found = _expand(str(spec), exts)
        if not found:
            raise DatasetError(f"--data {spec}: no such file, or no file matches: pass a "
                               "directory, a glob ('shards/*.tar'), a file list or a file")
        for f in found:
            f = os.path.abspath(f)
            files.setdefault(f, os.stat(f).st_size)
    ordered = sorted(files)
    return DatasetInfo(common_root(ordered), (), tuple(ordered),
                       tuple(files[f] for f in ordered))


def common_root(files: Sequence[str]) -> str:
    """The deepest directory that holds every file."""
    return os.path.commonpath([os.path.dirname(f) for f in files]) if files else ""
