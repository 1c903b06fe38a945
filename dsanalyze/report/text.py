"""Words and tables shared by every view: the stall table, the report, the
figures and the what-if output name a resource configuration the same way.

    cache_text("25%", 44 << 20)  -> "25% (44M)"   the budget as asked, and its bytes
    cache_text("2G", 2 << 30)    -> "2G"          as asked
    cache_text("none", None)     -> "unlimited"   no memory limit
    bandwidth_text(8 << 20)      -> "8M/s"
    remote_text(cfg)             -> "remote (100M/s, 20 ms)"  data across a network link
    number(-0.001, "{:.2f}")     -> "0.00"        never a negative zero
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dsanalyze.analysis.stalls import KnobHold
from dsanalyze.config import format_bytes
from dsanalyze.records import How


def cache_text(spec: str, cache_bytes: int | None) -> str:
    """A page-cache budget as the user wrote it; a percentage also in bytes."""
    if cache_bytes is None:
        return "unlimited"
    return f"{spec} ({format_bytes(cache_bytes)})" if spec.endswith("%") else spec


def number(x: float, fmt: str = "{:.1f}") -> str:
    """`x` formatted with `fmt`, a negative zero (`-0.00`, from -0.001 or -0.0) written `0.00`."""
    text = fmt.format(x)
    return text[1:] if re.fullmatch(r"-[0.]*(%|\D*)", text) and any(c == "0" for c in text) \
        else text


def bandwidth_text(bps: float | None, unthrottled: str = "unthrottled") -> str:
    """A storage read bandwidth; `unthrottled` names the absence of a throttle."""
    return unthrottled if bps is None else f"{format_bytes(bps)}/s"


_CGROUP_CONTROLLER = {"cpus": "cpuset", "cache": "memory limit", "storage_bw": "read throttle"}


def enforcement_text(knob: str, how: KnobHold) -> str:
    """How a knob was held, in words: `cgroup v1 cpuset`, `affinity`, `not enforced: why`.

    `how`: the summary's per-knob entry (`analysis.stalls.enforcement`)."""
    if not how.enforced:
        return f"not enforced: {how.why or 'unknown reason'}"
    if how.how == How.AFFINITY.value:
        return "CPU affinity"
    if how.how == How.EVICTION.value:
        return "dataset pages evicted by the harness (LRU, posix_fadvise)"
    version, device = how.cgroup_version, how.device
    on = f" on {device}" if knob == "storage_bw" and device else ""
    return f"cgroup{f' v{version}' if version else ''} {_CGROUP_CONTROLLER[knob]}{on}"


@dataclass(frozen=True)
class Knobs:
    """Some knobs of a configuration, for the words below where no `ConfigSummary` or what-if
    `GridRow` holds them (a figure's panel, an axis value, the probe's link)."""

    cpus: int | None = None
    cache_spec: str | None = None
    cache_bytes: int | None = None
    storage_read_bps: float | None = None
    net_bw_bps: float | None = None
    net_latency_s: float | None = None
    modes: tuple[str, ...] = ()  # the modes measured (a `ConfigSummary`'s keys)


def _field(cfg: Any, name: str) -> Any:
    """A configuration's knob: of a `ConfigSummary`, a what-if `GridRow` or `Knobs` (None where
    the value has no such knob)."""
    return getattr(cfg, name, None)


def remote_text(cfg: Any) -> str | None:
    """A remote configuration's link, where a local one says "disk": `remote (100M/s, 20 ms)`;
    None for local data."""
    latency_s = _field(cfg, "net_latency_s")
    if latency_s is None:
        return None
    return f"remote ({bandwidth_text(_field(cfg, 'net_bw_bps'), 'unshaped')}, {latency_s * 1000:g} ms)"


def storage_word(summary: Any) -> str:
    """What the table's third mode is called: `remote` when every configuration's data is."""
    configs = _field(summary, "configs") or []
    return "remote" if configs and all(remote_text(c) for c in configs) else "disk"


def config_label(cfg: Any) -> str:
    """A configuration of the summary in one token per knob: `cpus=1 cache=25% (44M) bw=8M/s`;
    a remote one `cpus=1 remote (100M/s, 20 ms)`."""
    cpus = "all" if _field(cfg, "cpus") is None else _field(cfg, "cpus")
    parts = [f"cpus={cpus}"]
    if (remote := remote_text(cfg)) is not None:
        parts.append(remote)
    elif "disk" in (_field(cfg, "modes") or ()):
        parts += [f"cache={cache_text(_field(cfg, 'cache_spec'), _field(cfg, 'cache_bytes'))}",
                  f"bw={bandwidth_text(_field(cfg, 'storage_read_bps'))}"]
    return " ".join(parts)


def knob_text(knob: str, cfg: Any) -> str:
    """One resource knob of a configuration in words: `2 CPUs`, `cache 50% (6.3M)`, `disk 8M/s`."""
    if knob == "cpus":
        n = _field(cfg, "cpus")
        return "all CPUs" if n is None else f"{n} CPU" + "s" * (n > 1)
    if knob == "cache":
        if _field(cfg, "cache_bytes") is None:
            return "cache unlimited"
        return f"cache {cache_text(_field(cfg, 'cache_spec'), _field(cfg, 'cache_bytes'))}"
    if knob == "net_bw":
        return f"remote {bandwidth_text(_field(cfg, 'net_bw_bps'), 'unshaped')}"
    if knob == "net_latency":
        return f"latency {(_field(cfg, 'net_latency_s') or 0) * 1000:g} ms"
    return f"disk {bandwidth_text(_field(cfg, 'storage_read_bps'), 'unthrottled')}"


def fixed_width(header: Sequence[str], rows: Sequence[Sequence[str]],
                left: frozenset[int] = frozenset()) -> list[str]:
    """Header, rule and rows in aligned columns: numbers to the right, `left` columns to the left."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i in left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    return [line(header), line([w * "-" for w in widths]), *(line(r) for r in rows)]
