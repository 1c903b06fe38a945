"""A plain HTTP server of a directory: webdataset `.tar` shard URLs (`http://.../{000..099}.tar`).

Python's own `http.server` (threaded, HTTP/1.0: one request per connection), run
inside the link's namespace on its loopback address; the job reaches it through
the delay proxy (`served.py`). The files are read from the harness's disk: the
harness warms them first, so that the link, not the disk, is what a run measures.
"""

from __future__ import annotations

import sys
from pathlib import Path

PORT = 8000  # inside a namespace of its own: always free
BUCKET = None


def argv(root: Path) -> list[str]:
    """The server's command line, serving `root`."""
    return [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(root),
            str(PORT)]


def url_of(endpoint_url: str, relpath: str) -> str:
    return f"{endpoint_url}/{relpath}"
