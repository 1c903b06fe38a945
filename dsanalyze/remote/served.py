"""A dataset directory served across a shaped link: what a remote-data run reads.

    with ServedData.start(root, Backend.S3) as served:
        served.shape(100_000_000, 0.020)     # 100 MB/s to the job, 20 ms per request
        env = served.job_env()               # AWS_ENDPOINT_URL=http://10.231.0.2:<port>, ...
        ...                                  # the job runs in the root namespace
        served.stats()                       # requests and bytes that crossed the link

Inside a fresh namespace (`netlink.NetLink`): the server (`s3server` or
`httpserver`) on the namespace's loopback, and the delay proxy
(`delayproxy`) on the namespace's veth address, which is the only way in.
So every byte the job reads crosses the token bucket on the namespace's
veth and every request waits the proxy's delay. Unshaped (`shape(None, 0)`),
the same path carries the cached-side runs: the proxy's own cost is in both.

The servers run in sessions of their own, watched by a `Lifeline` reaper that
kills them and deletes the namespace if the harness dies; `close` does it
otherwise.
"""

from __future__ import annotations

import enum
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any

from dsanalyze.errors import ResourceError
from dsanalyze.linkrecords import LinkShape
from dsanalyze.remote import httpserver, s3server
from dsanalyze.remote.netlink import NetLink
from dsanalyze.resources.lifeline import Lifeline

READY_TIMEOUT_S = 60.0


class Backend(str, enum.Enum):
    S3 = "s3"
    HTTP = "http"

    @property
    def module(self) -> Any:
        return s3server if self is Backend.S3 else httpserver


class ServedData:
    """A running server of one directory behind its own link; `close` removes everything."""

    def __init__(self, root: Path, backend: Backend) -> None:
        self.root, self.backend = Path(root), backend
        self.link = NetLink.create()
        self._line = Lifeline()
        self._line.undo_with(["ip", "link", "del", self.link.host_dev])
        self._line.undo_with(["ip", "netns", "del", self.link.netns])
        self._procs: list[subprocess.Popen] = []
        self.shape_now = LinkShape()
        self.endpoint_url = ""

    @classmethod
    def start(cls, root: Path, backend: Backend, files: list[Path] | None = None) -> ServedData:
        """Serve `root` (its `files`, or all of them: uploaded to S3) over a new link."""
        served = cls(root, backend)
        try:
            served._start_servers()
            if backend is Backend.S3:
                files = files if files is not None else sorted(p for p in Path(root).rglob("*")
                                                               if p.is_file())
                s3server.upload(served.endpoint_url, served.root, files)
        except BaseException:
            served.close()
            raise
        return served

    def _spawn(self, argv: list[str], stdin: int | None = None,
               stdout: int | None = subprocess.DEVNULL) -> subprocess.Popen:
        proc = subprocess.Popen(self.link.exec_argv(argv), stdin=stdin or subprocess.DEVNULL,
                                stdout=stdout, stderr=subprocess.DEVNULL, start_new_session=True,
                                text=True)
        self._procs.append(proc)
        self._line.watch_group(proc.pid)
        return proc

    def _start_servers(self) -> None:
        module = self.backend.module
        self._spawn(module.argv(self.root))
        self._proxy = self._spawn(
            [sys.executable, "-m", "dsanalyze.remote.delayproxy", "--listen",
             f"{self.link.server_addr}:0", "--upstream", f"127.0.0.1:{module.PORT}"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        ready = self._proxy_line()
        if not ready.startswith("ready "):
            raise ResourceError(f"the delay proxy did not start in {self.link.netns}: {ready!r}")
        self.endpoint_url = f"http://{self.link.server_addr}:{ready.split()[1]}"
        wait_ready(self.endpoint_url, READY_TIMEOUT_S)

    def _proxy_line(self) -> str:
        out: IO[str] = self._proxy.stdout  # type: ignore[assignment]
        return out.readline().strip()

    def _tell(self, line: str) -> None:
        stdin: IO[str] = self._proxy.stdin  # type: ignore[assignment]
        stdin.write(line + "\n")
        stdin.flush()

    def shape(self, bw_bps: int | None, latency_s: float = 0.0) -> None:
        """The link for the next run: a token bucket at `bw_bps` (None: none) and each
        request held `latency_s`."""
        self.link.shape(bw_bps)
        self._tell(f"delay {latency_s}")
        self.shape_now = LinkShape(bw_bps, latency_s)

    def stats(self) -> dict[str, Any]:
        """Connections, requests, bytes and seconds held through the proxy since it started."""
        self._tell("stats")
        return json.loads(self._proxy_line())

    def window(self, start_unix_s: float, end_unix_s: float) -> dict[str, Any]:
        """Requests, bytes and seconds held of the requests that began in the span
        (`complete`: false when the proxy's log no longer reaches back to its start)."""
        self._tell(f"window {start_unix_s!r} {end_unix_s!r}")
        return json.loads(self._proxy_line())

    def url_of(self, relpath: str) -> str:
        """The URL of one served file, as the job names it (`s3://bucket/key`, `http://...`)."""
        return self.backend.module.url_of(self.endpoint_url, relpath)

    def job_env(self) -> dict[str, str]:
        """What the job needs to reach the server: the endpoint, and S3's region and keys."""
        env = {"DSANALYZE_ENDPOINT_URL": self.endpoint_url}
        if self.backend is Backend.S3:
            env.update({"AWS_ENDPOINT_URL": self.endpoint_url, "AWS_REGION": s3server.REGION,
                        "AWS_DEFAULT_REGION": s3server.REGION,
                        "AWS_ACCESS_KEY_ID": s3server.ACCESS_KEY,
                        "AWS_SECRET_ACCESS_KEY": s3server.ACCESS_KEY,
                        "DSANALYZE_BUCKET": s3server.BUCKET})
        return env

    def close(self) -> None:
        """Stop the servers, delete the namespace and its link."""
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self._procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.link.close()
        self._line.release()

    def __enter__(self) -> ServedData:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def wait_ready(url: str, timeout_s: float) -> None:
    """Until the server answers `GET /` through the proxy (any HTTP status will do)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(url + "/", timeout=5).close()
            return
        except urllib.error.HTTPError:
            return  # it answered
        except (urllib.error.URLError, OSError) as e:
            if time.monotonic() > deadline:
                raise ResourceError(f"the server at {url} did not answer in {timeout_s:.0f} s: "
                                    f"{e}") from None
            time.sleep(0.2)
