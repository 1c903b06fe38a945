"""The sweep a `harness.py` command asks for: what the command line gave, laid over the config
file's tables and a scheduler's node settings.

    built-in defaults < a scheduler's environment < config file < command line

`HarnessOptions` holds the command line's values (None: not given), so that
the harness can be called from Python without argparse (`app.harness`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsanalyze import config, scheduler
from dsanalyze.config import Job, Sweep
from dsanalyze.errors import ConfigError


@dataclass(frozen=True)
class HarnessOptions:
    """What the command line gave: `Job` fields and `config.SWEEP_KEYS` (None: not given)."""

    job: Mapping[str, Any] = field(default_factory=dict)
    sweep: Mapping[str, Any] = field(default_factory=dict)
    config_file: str | None = None  # TOML with [job] and [sweep] tables
    script: str | None = None  # None: the built-in job
    script_args: tuple[str, ...] = ()

    @classmethod
    def from_flat(cls, values: Mapping[str, Any]) -> HarnessOptions:
        """From one flat mapping of option values (argparse's namespace as a dict)."""
        job = {f.name: values[f.name] for f in dataclasses.fields(Job)
               if values.get(f.name) is not None and f.name not in ("script", "script_args")}
        sweep = {k: values[k] for k in config.SWEEP_KEYS if values.get(k) is not None}
        return cls(job, sweep, values.get("config"), values.get("script"),
                   tuple(values.get("script_args") or ()))


def build_sweep(options: HarnessOptions, env: Mapping[str, str] | None = None) -> Sweep:
    """`Sweep.from_dict` of the config file's tables with the command line laid over them; a
    scheduler's node settings (from `env`, default this process's environment) fill the node
    options neither gave."""
    data = config.load_toml(options.config_file) if options.config_file else {}
    job = _job_table(data.get("job", {}), options,
                     scheduler.from_environment(os.environ if env is None else env))
    sweep: dict[str, Any] = {**data.get("sweep", {}), **options.sweep}
    if any(options.sweep.get(k) for k in ("cpus", "cache", "storage_bw")):
        sweep.pop("combos", None)  # a grid on the command line replaces the file's list
    return Sweep.from_dict({"job": job, "sweep": sweep})


def _job_table(table: Mapping[str, Any], options: HarnessOptions,
               node_settings: Mapping[str, Any]) -> dict[str, Any]:
    job: dict[str, Any] = {**table, **options.job}
    for key, value in node_settings.items():
        job.setdefault(key, value)  # a scheduler's node settings, where no option gave them
    if options.job.get("iters") is not None:
        job.pop("epochs", None)
    if options.job.get("epochs") is not None:
        job.pop("iters", None)
    if options.script:
        if not Path(options.script).is_file():
            raise ConfigError(f"training script {options.script} not found")
        job["script"] = str(Path(options.script).resolve())
        job["script_args"] = tuple(options.script_args)
    if job.get("data_dir"):
        job["data_dir"] = str(Path(job["data_dir"]).resolve())
    return job
