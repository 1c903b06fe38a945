"""The data's link for every run of a sweep: shaped per run, counted, probed, recorded.

    with RemoteData.open(sweep, dataset) as remote:   # None: local data
        shape = remote.prepare(spec)                  # the link as the run needs it
        env.update(remote.env()); argv = remote.argv(argv)
        before = remote.counts()
        ...                                           # the run
        link = remote.record(shape, before)           # records.RunResult.link
        link = remote.windowed(link, span, samples)   # and its steady window's counts

Served data (`--serve s3|http`): the sweep's `--data` is served from a namespace
behind a shaped link (`served.py`); a remote run (the disk mode of a remote
configuration, `Resources.remote`) has the link at its `net_bw` and
`net_latency`, every other run has it unshaped (the server local: `cached`).
Each remote shape's probe (`probe.py`) is measured once, before its first run.
A user's own endpoint (`--endpoint`) is checked and probed once, before any run,
and its probe is stored with every run. A script names the served data with
`{endpoint}` in its arguments (replaced by `http://<address>:<port>`) or reads
the environment (`AWS_ENDPOINT_URL`, `DSANALYZE_ENDPOINT_URL`). A streaming
library's local cache of the served data (`localcache.py`) is filled before each
run on this side of the link and emptied before each remote run.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsanalyze.config import Mode, RunSpec, Sweep, parse_bytes
from dsanalyze.dataset import DatasetInfo
from dsanalyze.linkrecords import (
    EndpointProbe,
    LinkCounts,
    LinkRecord,
    LinkShape,
    LocalCacheState,
)
from dsanalyze.remote import datasamples, localcache, netlink, s3server
from dsanalyze.remote.endpoint import Endpoint
from dsanalyze.remote.probe import probe
from dsanalyze.remote.served import Backend, ServedData

PLACEHOLDER = "{endpoint}"


def shape_of(spec: RunSpec) -> LinkShape:
    """The link a run reads across: shaped for a remote run, unshaped for every other."""
    res = spec.resources
    if spec.mode is Mode.DISK and res.remote:
        return LinkShape(res.net_bw_bps, res.net_latency_s or 0.0)
    return LinkShape()


@dataclass
class RemoteData:
    """What the runs of one sweep share about their data's endpoint."""

    endpoint: Endpoint
    budget_bytes: int
    served: ServedData | None = None
    names: list[str] | None = None  # the objects to probe (served HTTP: the files' URLs)
    probes: dict[LinkShape, EndpointProbe] = field(default_factory=dict)
    local_cache: localcache.LocalCache | None = None
    cache_state: LocalCacheState | None = None  # as `prepare` left it for the run
    data_bytes_per_sample: float | None = None  # the served files' (`datasamples`)

    @classmethod
    @contextlib.contextmanager
    def open(cls, sweep: Sweep, dataset: DatasetInfo) -> Iterator[RemoteData | None]:
        """Serve the data (`sweep.serve`) or take the user's endpoint; check it before any
        run (EndpointError, exit 2); stop the servers at the end."""
        budget = parse_bytes(sweep.probe_budget, "probe budget")
        if sweep.serve is None:
            if sweep.endpoint is None:
                yield None
                return
            remote = cls(Endpoint.parse(sweep.endpoint), budget)
            remote.endpoint.check()
            remote.probes[LinkShape()] = probe(remote.endpoint, budget)
            yield remote
            return
        netlink.clean_stale()
        root = Path(dataset.root)
        files = [Path(f) for f in dataset.files]
        cache_dir = sweep.local_cache or localcache.from_script_args(sweep.job.script_args)
        with ServedData.start(root, Backend(sweep.serve), files) as served:
            remote = cls.of_served(served, root, files, budget)
            if cache_dir is not None:
                remote.local_cache = localcache.LocalCache(Path(cache_dir), root, tuple(files))
            yield remote

    @classmethod
    def of_served(cls, served: ServedData, root: Path, files: list[Path],
                  budget_bytes: int) -> RemoteData:
        rel = [f.relative_to(root).as_posix() for f in files]
        if served.backend is Backend.S3:
            endpoint = Endpoint.parse(f"s3://{s3server.BUCKET}/")
            names = rel
        else:
            names = [served.url_of(r) for r in rel]
            endpoint = Endpoint.parse(names[0])
        with _environment(served.job_env()):
            endpoint.check()
        return cls(endpoint, budget_bytes, served, names,
                   data_bytes_per_sample=datasamples.bytes_per_sample(files))

    def prepare(self, spec: RunSpec) -> LinkShape:
        """Shape the link for the run; probe a remote shape the first time it is set."""
        shape = shape_of(spec)
        if self.served is None:
            return shape
        if self.local_cache is not None:
            self.cache_state = self.local_cache.prepare(spec)
        self.served.shape(shape.bw_bps, shape.latency_s)
        if shape != LinkShape() and shape not in self.probes:
            with _environment(self.served.job_env()):
                self.probes[shape] = probe(self.endpoint, self.budget_bytes, names=self.names)
        return shape

    def env(self) -> dict[str, str]:
        return self.served.job_env() if self.served is not None else {}

    def argv(self, argv: list[str]) -> list[str]:
        if self.served is None:
            return argv
        return [a.replace(PLACEHOLDER, self.served.endpoint_url) for a in argv]

    def counts(self) -> dict[str, Any]:
        return self.served.stats() if self.served is not None else {}

    def record(self, shape: LinkShape, before: dict[str, Any]) -> LinkRecord:
        """The run's link record: its shape, the proxy's counts since `before`, the probe."""
        after = self.counts()
        delta = {k: after[k] - before[k] for k in after} if after else {}
        backend = "s3" if self.endpoint.is_s3 else "http"
        url = self.served.endpoint_url if self.served is not None else self.endpoint.url
        return LinkRecord(backend, url, self.served is not None, shape,
                          delta.get("requests"), delta.get("connections"),
                          delta.get("bytes_down"), delta.get("bytes_up"),
                          self.probes.get(shape) or self.probes.get(LinkShape()),
                          delta.get("held_s"), self.cache_state)


    def windowed(self, link: LinkRecord, span_unix_s: tuple[float, float],
                 samples: int) -> LinkRecord:
        """`link` with the proxy's counts over the run's steady window (`samples` consumed in
        it, and the samples the bytes that crossed in it carried), asked before the next run;
        unchanged when the harness serves nothing or the proxy's log no longer reaches back
        to the window's start."""
        if self.served is None or samples <= 0:
            return link
        got = self.served.window(*span_unix_s)
        if not got["complete"]:
            return link
        per_sample = self.data_bytes_per_sample
        counts = LinkCounts(samples, int(got["requests"]), int(got["bytes_down"]),
                            float(got["held_s"]), span_unix_s,
                            got["bytes_down"] / per_sample if per_sample else None)
        return dataclasses.replace(link, window=counts)


@contextlib.contextmanager
def _environment(env: dict[str, Any]) -> Iterator[None]:
    """`env` set in this process for the block (boto3 reads the endpoint and keys there)."""
    import os

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
