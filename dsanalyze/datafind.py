"""The dataset of a sweep: given with `--data`, or found by a discovery run of the script.

The sweep needs the file set before its first run: the cache budget `50%`
is a share of its bytes, cached runs warm it and disk runs evict it. So:

- built-in job: `--data` is required and is an ImageFolder (`scan_dataset`);
- a script with `--data`: any set of files (`fileset.scan_files`); it wins;
- a script without `--data`: one **discovery run** first, not measured and
  not stored: the script under the bootstrap in `loader` mode, 1 rank, no
  cgroup (bound to the harness's life and given a TMPDIR of its own, as a
  measured run is), `DISCOVER_WARMUP` + `DISCOVER_ITERS` batches of its training
  loader, with `DSANALYZE_DISCOVER=1` (`instrument/datafiles.py`). Its rank
  reports what the training loader declares (an ImageFolder's root, a list
  of samples, webdataset urls) and every file it opened. Declared paths are
  used as they are; opened files are widened to every file with their
  extensions under the deepest directory that holds them all (a few batches
  open a few files of the dataset, not all of them). Its log is
  `<prefix>/logs/discover.log`.

`dataset_for` returns the dataset and one line saying what was chosen and how,
which the CLI prints.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from dsanalyze import launch
from dsanalyze.config import Job, Mode, Resources, RunSpec, format_bytes
from dsanalyze.dataset import DatasetInfo, scan_dataset
from dsanalyze.errors import ConfigError, DatasetError
from dsanalyze.fileset import common_root, scan_files
from dsanalyze.instrument import rank as rankenv
from dsanalyze.resources import scratch
from dsanalyze.resources.lifeline import Lifeline

DISCOVER_ITERS = 2
DISCOVER_WARMUP = 1


def dataset_for(job: Job, prefix: Path) -> tuple[DatasetInfo, str]:
    """The sweep's dataset and a line saying where it came from."""
    if job.script is None:
        if job.data_dir is None:
            raise ConfigError("no dataset: pass --data DIR (an ImageFolder for the built-in job)")
        return scan_dataset(job.data_dir), ""
    if job.data_dir is not None:
        data = scan_files(job.data_dir)
        return data, f"data: {describe(data)} (--data {job.data_dir})"
    t0 = time.perf_counter()
    found = discover(job, prefix)
    data, how = choose(found)
    return data, (f"data: {describe(data)}, from {how} (found by a discovery run of the script, "
                  f"{time.perf_counter() - t0:.0f} s; pass --data to choose the files)")


def rescan(job: Job, data: DatasetInfo) -> DatasetInfo:
    """The sweep's data scanned again, the way it was found: the ImageFolder or the `--data`
    file set (files added or removed show); a discovered set: the same files (rewritten or
    removed ones show, added ones do not)."""
    if job.script is None:
        return scan_dataset(job.data_dir)
    return scan_files(job.data_dir if job.data_dir is not None else list(data.files))


def describe(data: DatasetInfo) -> str:
    return f"{data.num_files} files, {format_bytes(data.total_bytes)} under {data.root}"


def choose(found: dict[str, Any]) -> tuple[DatasetInfo, str]:
    """The file set from a discovery record: declared paths first, else widened opened files."""
    declared = found.get("declared")
    if declared and declared.get("paths"):
        return scan_files(declared["paths"]), f"the training loader's {declared['source']}"
    opened = found.get("opened") or []
    if not opened:
        raise DatasetError("could not find the training data: its loader declared no files "
                           "and opened none in the discovery run: pass --data")
    root = common_root(opened)
    exts = sorted({os.path.splitext(f)[1].lower() for f in opened} - {""})
    if root in ("", "/") or not exts:  # nothing to widen to safely: the files themselves
        return scan_files(opened), f"the {len(opened)} files its loader opened"
    return (scan_files([root], exts),
            f"the files its loader opened ({len(opened)}), widened to every "
            f"{', '.join(exts)} file under {root}")


def discover(job: Job, prefix: Path) -> dict[str, Any]:
    """Run the script once in loader mode, 1 rank; the `data` its rank reported."""
    one = dataclasses.replace(job, nproc_per_node=1, nnodes=1, node_rank=0, master_addr=None,
                              master_port=None, iters=DISCOVER_ITERS, epochs=None,
                              warmup=DISCOVER_WARMUP, data_dir=None)
    spec = RunSpec(one, Mode.LOADER, Resources())
    run_dir = prefix / "tmp" / "discover"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    log_path = prefix / "logs" / "discover.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env, _ = launch.job_env(spec, run_dir)
    env[rankenv.ENV_DISCOVER] = "1"
    try:
        rc = _run(launch.job_argv(spec), env, log_path, job.timeout_s)
        record = run_dir / "rank0.json"
        if rc != 0 or not record.is_file():
            raise _discovery_failed(job, rc, run_dir, log_path)
        return json.loads(record.read_text())["extra"].get("data") or {}
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def _discovery_failed(job: Job, rc: int | None, run_dir: Path, log_path: Path) -> Exception:
    """Why the discovery run failed, as a sweep's run would say it: the script's own usage
    error (a harness option after the script) names that; anything else points at the log."""
    _, errors = launch.collect_ranks(run_dir, range(1))
    if launch.script_exit_code(errors) == 2:
        return launch.usage_error(job, launch.script_error_lines(log_path), log_path)
    first = next(iter(errors.values()), None)
    said = f": {first.line}" if first is not None else ""
    return DatasetError(f"could not find the training data: the discovery run of the script "
                        f"failed (exit {rc}{said}; log: {log_path}): fix it or pass --data")


def _run(argv: list[str], env: dict[str, str], log_path: Path, timeout_s: float) -> int | None:
    """Run argv in its own session, output to the log, bound to the harness's life as a
    measured run is (a reaper kills it and removes its TMPDIR if the harness is killed,
    `launch.start_bound`); kill the session when done."""
    with Lifeline() as line, scratch.job_tmpdir(line) as tmp, open(log_path, "w") as log:
        proc = launch.start_bound(argv, scratch.job_env(env, tmp), log, line)
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
