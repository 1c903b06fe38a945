from __future__ import annotations

from pathlib import Path

import pytest

from dsanalyze.config import (
    CacheBudget,
    Job,
    Mode,
    Resources,
    RunSpec,
    Sweep,
    load_toml,
    parse_bandwidth,
    parse_bytes,
    parse_cpus_list,
)
from dsanalyze.errors import ConfigError


@pytest.mark.parametrize("text,expected", [
    ("4096", 4096), ("512M", 512 << 20), ("2G", 2 << 30), ("1.5GiB", int(1.5 * (1 << 30))),
    ("10k", 10 << 10), (123, 123), ("0", 0),
])
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["abc", "-1G", "1Q", ""])
def test_parse_bytes_rejects(text):
    with pytest.raises(ConfigError, match="write bytes"):
        parse_bytes(text)


@pytest.mark.parametrize("text,dataset,spec,cache_bytes,label", [
    ("none", 1000, "none", None, "none"),
    ("50%", 1000, "50%", 500, "50%"),
    ("100%", 1000, "100%", 1000, "100%"),
    ("0", 1000, "0", 0, "0B"),
    ("2G", 1000, "2G", 2 << 30, "2G"),
])
def test_cache_budget(text, dataset, spec, cache_bytes, label):
    c = CacheBudget.parse(text, dataset)
    assert (c.spec, c.cache_bytes, c.label) == (spec, cache_bytes, label)


@pytest.mark.parametrize("text,bps", [("none", None), ("40M", 40 << 20), ("1G", 1 << 30)])
def test_parse_bandwidth(text, bps):
    assert parse_bandwidth(text) == bps


def test_parse_cpus_list():
    assert parse_cpus_list("1,2,all") == (1, 2, None)
    with pytest.raises(ConfigError):
        parse_cpus_list("1,x")
    with pytest.raises(ConfigError):
        parse_cpus_list("0")


@pytest.mark.parametrize("kwargs,match", [
    ({"device": "tpu"}, "unknown --device"),
    ({"batch_size": 0}, "batch_size must be at least 1"),
    ({"iters": 5, "epochs": 2}, "not both"),
    ({"sim_step_ms": 0}, "positive"),
])
def test_job_rejects(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        Job(**kwargs)


def test_sweep_shares_cache_independent_runs():
    sweep = Sweep(Job(data_dir="/d"), cpus=(1, 2), cache=("0", "50%"), storage_bw=("none", "8M"))
    specs = sweep.run_specs(dataset_bytes=1000)
    ids = [s.run_id for s in specs]
    # 2 CPU counts x (synthetic + cached) + 2 x 2 x 2 disk runs, each once
    assert len(ids) == len(set(ids)) == 4 + 8
    assert "synthetic-cpus1" in ids and "cached-cpus2" in ids
    assert "disk-cpus2-cache50pct-bw8M" in ids
    cached = next(s for s in specs if s.run_id == "cached-cpus1")
    assert cached.resources == Resources(1)


def test_runspec_round_trip():
    spec = RunSpec(Job(data_dir="/d", script_args=("--x", "1")), Mode.DISK,
                   Resources(2, CacheBudget.parse("25%", 400), 8 << 20))
    again = RunSpec.from_dict(spec.to_dict())
    assert again == spec and again.run_id == "disk-cpus2-cache25pct-bw8M"


def test_load_toml_rejects_unknown_keys(tmp_path: Path):
    p = tmp_path / "c.toml"
    p.write_text("[job]\nbatchsize = 3\n")
    with pytest.raises(ConfigError, match="unknown \\[job\\] key"):
        load_toml(p)
    with pytest.raises(ConfigError, match="not found"):
        load_toml(tmp_path / "missing.toml")
