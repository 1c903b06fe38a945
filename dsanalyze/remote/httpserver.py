"""A plain HTTP server of a directory: webdataset `.tar` shard URLs (`http://.../{000..099}.tar`).

    python -m dsanalyze.remote.httpserver --directory ROOT --port 8000

Python's own `http.server` handler (threaded, HTTP/1.0: one request per connection), run
inside the link's namespace on its loopback address; the job reaches it through
the delay proxy (`served.py`). The files are read from the harness's disk: the
harness warms them first, so that the link, not the disk, is what a run measures.

Not `python -m http.server`: its listening socket queues 5 connections. The proxy opens
one to the server for each of the job's, and 64 at once overflowed that queue dozens of
times a probe (`nstat TcpExtListenOverflows` in the namespace); each overflowed
connection waited out a SYN retransmission of a second or more, a stall of the server's
accept queue that a run would have charged to the link.
"""

from __future__ import annotations

import argparse
import functools
import sys
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PORT = 8000  # inside a namespace of its own: always free
BUCKET = None
LISTEN_BACKLOG = 1024  # connections queued before the server accepts them (Linux caps it)


class _Server(ThreadingHTTPServer):
    request_queue_size = LISTEN_BACKLOG


def argv(root: Path) -> list[str]:
    """The server's command line, serving `root`."""
    return [sys.executable, "-m", "dsanalyze.remote.httpserver", "--directory", str(root),
            "--port", str(PORT)]


def url_of(endpoint_url: str, relpath: str) -> str:
    return f"{endpoint_url}/{relpath}"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # one line a request: none
        pass


def main(args: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--directory", required=True, help="the directory served")
    p.add_argument("--port", type=int, default=PORT)
    p.add_argument("--bind", default="127.0.0.1")
    a = p.parse_args(args)
    handler = functools.partial(_Quiet, directory=a.directory)
    with _Server((a.bind, a.port), handler) as server:
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
