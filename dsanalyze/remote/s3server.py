"""An S3-compatible server: `moto_server` (moto[server]), the one s3fs's own tests use.

It keeps objects in its memory; `upload` puts every file of a directory into one
bucket, keyed by its path relative to the directory, through the unshaped link.
Any access key is accepted: the job gets `ACCESS_KEY` in its environment
(`served.ServedData.job_env`).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from dsanalyze.errors import ConfigError

PORT = 5000  # inside a namespace of its own: always free
BUCKET = "dsanalyze"
REGION = "us-east-1"
ACCESS_KEY = "testing"


def argv(root: Path) -> list[str]:
    """The server's command line (`root` is uploaded afterwards, by `upload`)."""
    beside = Path(sys.executable).parent / "moto_server"  # this environment's, not another's
    exe = str(beside) if beside.is_file() else shutil.which("moto_server")
    if exe is None:
        raise ConfigError("moto_server not found: pip install 'moto[server]' (the test extra)")
    return [exe, "-H", "127.0.0.1", "-p", str(PORT)]


def client(endpoint_url: str):  # boto3 is imported only where an S3 server is used
    import boto3

    return boto3.client("s3", endpoint_url=endpoint_url, region_name=REGION,
                        aws_access_key_id=ACCESS_KEY, aws_secret_access_key=ACCESS_KEY)


def upload(endpoint_url: str, root: Path, files: list[Path]) -> None:
    """Create the bucket and put every file under its path relative to `root`."""
    s3 = client(endpoint_url)
    s3.create_bucket(Bucket=BUCKET)
    for f in files:
        s3.upload_file(str(f), BUCKET, f.relative_to(root).as_posix())


def url_of(endpoint_url: str, relpath: str) -> str:
    return f"s3://{BUCKET}/{relpath}"
