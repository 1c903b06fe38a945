"""A network link to a namespace: the storage side of a remote-data run.

    with NetLink.create() as link:             # namespace, veth pair, addresses
        link.shape(4_000_000)                  # tbf on the namespace side: 4 MB/s to the job
        Popen(link.exec_argv(["moto_server", ...]))   # a server inside the namespace
        ...                                    # the job connects to link.server_addr
    # the namespace (and with it the veth pair) is deleted

The job stays in the root namespace; a server started with `exec_argv` runs
in the namespace and is reached at `server_addr` through the veth pair. What
flows from the server to the job leaves by the namespace's veth, whose root
qdisc is a token bucket (`tc tbf`) at the rate asked: the job's download
bandwidth. Delay is not shaped here (this kernel has no `netem`): see
`delayproxy.py`. Every name starts with `dsa-<harness pid>-` so that
`clean_stale` removes what a killed harness left, and `lifeline.Lifeline`
deletes the namespace when the harness dies (`watch_netns`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

from dsanalyze.errors import ResourceError

PREFIX = "dsa-"
SUBNET = "10.231"  # /30 blocks: .1 the root side, .2 the namespace side
# How long a packet may queue in the bucket before it is dropped. A short queue on a slow
# link drops the first windows of many parallel connections, whose retransmission timeouts
# then back off for tens of seconds (64 probe requests on a 128K/s link stalled).
TBF_LATENCY_MS = 1000
MIN_BURST_BYTES = 16 << 10  # several MTU-sized packets (tbf segments GSO packets)
_seq = itertools.count()


def _ip(*args: str, netns: str | None = None) -> None:
    argv = (["ip", "netns", "exec", netns] if netns else []) + list(args)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except FileNotFoundError:
        raise ResourceError(f"{argv[0]} not found: install iproute2 (apt-get install -y "
                            "iproute2)") from None
    if done.returncode != 0:
        raise ResourceError(f"{' '.join(argv)} failed: {done.stderr.strip()} (needs root: "
                            "network namespaces and tc)")


def tbf_burst_bytes(rate_bps: int) -> int:
    """The bucket's depth: 5 ms of the rate, at least a few packets. A deeper bucket lets a
    short transfer run ahead of the rate."""
    return max(MIN_BURST_BYTES, rate_bps // 200)


def _used_blocks() -> set[int]:
    out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True,
                         timeout=10).stdout
    found = re.findall(rf"inet {re.escape(SUBNET)}\.(\d+)\.(\d+)/", out)
    return {int(a) * 64 + int(b) // 4 for a, b in found}


@dataclass(frozen=True)
class NetLink:
    """A namespace with one veth pair to the root namespace; addresses in `SUBNET`."""

    netns: str
    host_dev: str
    ns_dev: str
    host_addr: str
    server_addr: str

    @classmethod
    def create(cls) -> NetLink:
        """A fresh namespace `dsa-<pid>-<n>` and its link; removed by `close`."""
        if shutil.which("ip") is None or shutil.which("tc") is None:
            raise ResourceError("ip or tc not found: install iproute2 (apt-get install -y iproute2)")
        n = next(_seq)
        name = f"{PREFIX}{os.getpid()}-{n}"
        used = _used_blocks()
        # Start the search at a block of this process's own: two harnesses (or pytest-xdist
        # workers) creating links at once would otherwise both take the first free block.
        start = (os.getpid() * 131 + n) % ((1 << 14) - 1)
        block = next(b for b in ((start + i) % ((1 << 14) - 1) + 1 for i in range(1 << 14))
                     if b not in used)
        base = f"{SUBNET}.{block // 64}.{block % 64 * 4}"
        stem = base.rsplit(".", 1)[0]
        link = cls(name, f"dsa{os.getpid()}h{n}", f"dsa{os.getpid()}n{n}",
                   f"{stem}.{block % 64 * 4 + 1}", f"{stem}.{block % 64 * 4 + 2}")
        _ip("ip", "netns", "add", name)
        try:
            link._wire()
        except BaseException:
            link.close()
            raise
        return link

    def _wire(self) -> None:
        _ip("ip", "link", "add", self.host_dev, "type", "veth", "peer", "name", self.ns_dev,
            "netns", self.netns)
        _ip("ip", "addr", "add", f"{self.host_addr}/30", "dev", self.host_dev)
        _ip("ip", "link", "set", self.host_dev, "up")
        _ip("ip", "addr", "add", f"{self.server_addr}/30", "dev", self.ns_dev, netns=self.netns)
        _ip("ip", "link", "set", self.ns_dev, "up", netns=self.netns)
        _ip("ip", "link", "set", "lo", "up", netns=self.netns)

    def exec_argv(self, argv: list[str]) -> list[str]:
        """`argv` run inside the namespace."""
        return ["ip", "netns", "exec", self.netns, *argv]

    def shape(self, rate_bps: int | None) -> None:
        """Limit what the namespace sends to `rate_bps` bytes per second (None: no limit)."""
        if rate_bps is None:
            with contextlib.suppress(ResourceError):  # no qdisc to delete: already unshaped
                _ip("tc", "qdisc", "del", "dev", self.ns_dev, "root", netns=self.netns)
            return
        _ip("tc", "qdisc", "replace", "dev", self.ns_dev, "root", "tbf", "rate",
            f"{int(rate_bps) * 8}bit", "burst", str(tbf_burst_bytes(rate_bps)), "latency",
            f"{TBF_LATENCY_MS}ms", netns=self.netns)

    def close(self) -> None:
        """Delete the namespace and the root side of the veth pair (each may be gone)."""
        remove(self.netns, self.host_dev)

    def __enter__(self) -> NetLink:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def to_dict(self) -> dict[str, Any]:
        return {"netns": self.netns, "host_addr": self.host_addr, "server_addr": self.server_addr}


def remove(netns: str, host_dev: str | None = None) -> None:
    """Delete a namespace and a veth's root end, quietly where they are already gone."""
    for argv in (["ip", "link", "del", host_dev] if host_dev else None,
                 ["ip", "netns", "del", netns]):
        if argv:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run(argv, capture_output=True, timeout=10)


def clean_stale() -> list[str]:
    """Delete the namespaces of harnesses that are no longer running; returns their names."""
    try:
        names = os.listdir("/run/netns")
    except OSError:
        return []
    stale = []
    for name in names:
        match = re.fullmatch(rf"{re.escape(PREFIX)}(\d+)-(\d+)", name)
        if match and not os.path.exists(f"/proc/{match.group(1)}"):
            remove(name, f"dsa{match.group(1)}h{match.group(2)}")
            stale.append(name)
    return stale
