"""Bad endpoints are refused before any run starts: one line, exit 2, nothing measured.

A real S3 server (moto_server in a namespace, `remote/served.py`) answers for the bucket
that exists; the refusals come from botocore and the socket layer, not from a mock.
"""

from __future__ import annotations

import socket

import pytest
from conftest import harness
from test_remote import needs_netns

from dsanalyze.remote.served import Backend, ServedData

AWS_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
            "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION")


@pytest.fixture(scope="module")
def s3_env(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("bucket")
    (root / "a.bin").write_bytes(b"x" * 4096)
    with ServedData.start(root, Backend.S3) as served:
        yield served.job_env()


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path):
    """No AWS settings but those a test sets: no profile, no instance metadata."""
    for key in AWS_KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return monkeypatch


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def refuse(small_dataset, tmp_path, capsys, endpoint: str) -> str:
    """The harness's one error line for `--endpoint`; asserts exit 2 and no run stored."""
    rc = harness("--data", small_dataset, "--prefix", tmp_path / "p", "--modes", "cached",
                 "--iters", 2, "--no-plots", "--no-cgroups", "--endpoint", endpoint)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert not (tmp_path / "p" / "runs").exists() or not any((tmp_path / "p" / "runs").iterdir())
    assert len(err) == 1 and err[0].startswith("error: ")
    return err[0]


@needs_netns
def test_a_missing_bucket(small_dataset, tmp_path, capsys, s3_env, aws):
    for key, value in s3_env.items():
        aws.setenv(key, value)
    line = refuse(small_dataset, tmp_path, capsys, "s3://no-such-bucket/train/")
    assert "bucket 'no-such-bucket' not found" in line


@needs_netns
def test_no_objects_under_the_prefix(small_dataset, tmp_path, capsys, s3_env, aws):
    for key, value in s3_env.items():
        aws.setenv(key, value)
    line = refuse(small_dataset, tmp_path, capsys, f"s3://{s3_env['DSANALYZE_BUCKET']}/nothing/")
    assert "no objects under" in line


def test_missing_credentials(small_dataset, tmp_path, capsys, aws):
    aws.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed_port()}")
    line = refuse(small_dataset, tmp_path, capsys, "s3://bucket/train/")
    assert "no S3 credentials" in line and "AWS_ACCESS_KEY_ID" in line


def test_an_unreachable_s3_endpoint(small_dataset, tmp_path, capsys, aws):
    aws.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed_port()}")
    aws.setenv("AWS_ACCESS_KEY_ID", "k")
    aws.setenv("AWS_SECRET_ACCESS_KEY", "s")
    aws.setenv("AWS_DEFAULT_REGION", "us-east-1")
    line = refuse(small_dataset, tmp_path, capsys, "s3://bucket/train/")
    assert "cannot reach the S3 endpoint" in line


def test_an_unreachable_http_endpoint(small_dataset, tmp_path, capsys):
    line = refuse(small_dataset, tmp_path, capsys,
                  f"http://127.0.0.1:{closed_port()}/shard-{{000..003}}.tar")
    assert "cannot reach http://127.0.0.1:" in line and "shard-000.tar" in line


def test_an_endpoint_that_is_no_url(small_dataset, tmp_path, capsys):
    assert "write s3://bucket/prefix" in refuse(small_dataset, tmp_path, capsys, "bucket/train")
