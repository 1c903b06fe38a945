"""The sweep a harness command asks for: defaults < config file < scheduler < command line."""

from __future__ import annotations

import pytest

from dsanalyze.errors import ConfigError
from dsanalyze.options import HarnessOptions, build_sweep

POD = {"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456"}


def _toml(tmp_path, text):
    path = tmp_path / "sweep.toml"
    path.write_text(text)
    return str(path)


def test_each_source_wins_over_the_one_below(tmp_path):
    file = _toml(tmp_path, '[job]\nbatch_size = 8\nworkers = 3\nnnodes = 4\n'
                           '[sweep]\ncpus = "1,2"\nmodes = "cached"\n')
    given = HarnessOptions(job={"workers": 5}, sweep={"modes": "synthetic"}, config_file=file)
    sweep = build_sweep(given, env=POD)
    job = sweep.job
    assert job.batch_size == 8  # the file over the default (32)
    assert job.workers == 5  # the command line over the file
    assert job.nnodes == 4 and job.node_rank == 1  # the file over the scheduler; the scheduler
    assert job.master_addr == "job-master-0"  # over the defaults
    assert [m.value for m in sweep.modes] == ["synthetic"]


def test_iters_on_the_command_line_replaces_the_files_epochs(tmp_path):
    file = _toml(tmp_path, "[job]\nepochs = 3\n")
    sweep = build_sweep(HarnessOptions(job={"iters": 7}, config_file=file), env={})
    assert (sweep.job.iters, sweep.job.epochs) == (7, None)


def test_a_missing_script_is_one_line_to_fix(tmp_path):
    with pytest.raises(ConfigError, match="training script .* not found"):
        build_sweep(HarnessOptions(script=str(tmp_path / "train.py")), env={})


def test_from_flat_keeps_only_what_was_given():
    options = HarnessOptions.from_flat({"batch_size": 4, "workers": None, "cpus": "1,2",
                                        "advice": True, "script": None, "script_args": []})
    assert dict(options.job) == {"batch_size": 4} and dict(options.sweep) == {"cpus": "1,2"}
