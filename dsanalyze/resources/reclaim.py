"""The machine's own reclaim of memory nobody touched for a while: DAMON schemes.

A kernel with DAMON's sysfs interface (`/sys/kernel/mm/damon/admin/kdamonds`) may run
schemes that act on memory left idle for a given time, whatever the free memory: a cloud
VM's proactive reclaim. The development VM runs one (`kdamond.0`): `pageout` of physical
pages other than anonymous ones that nobody accessed for 12 aggregation intervals of 5 s,
at most 128 MiB a second. It evicts the dataset's pages a cached run warmed and the job's
libraries between runs, which a cached run's window then reads back
(`analysis/measured.not_cached`).

    schemes()   # the running kdamonds' schemes, as records.ReclaimScheme; () without DAMON

Read only: nothing is written to the interface (not even a request to refresh its stats).
A file that cannot be read leaves its field None.
"""

from __future__ import annotations

from pathlib import Path

from dsanalyze.records import ReclaimScheme

ADMIN = Path("/sys/kernel/mm/damon/admin/kdamonds")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _int(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _numbered(path: Path) -> list[Path]:
    """The numbered entries of a DAMON sysfs directory, in order."""
    try:
        return sorted((p for p in path.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    except OSError:
        return []


def _excluded(scheme: Path) -> tuple[str, ...]:
    """The filter types a scheme leaves alone (matching, not allowed: `anon`, `memcg` ...)."""
    out = []
    for group in ("filters", "core_filters", "ops_filters"):
        for f in _numbered(scheme / group):
            if _read(f / "matching") == "Y" and _read(f / "allow") == "N":
                out.append(_read(f / "type") or "?")
    return tuple(out)


def schemes(admin: Path = ADMIN) -> tuple[ReclaimScheme, ...]:
    """The schemes of every kdamond whose state is on."""
    out = []
    for kd in _numbered(admin):
        if _read(kd / "state") != "on":
            continue
        for ctx in _numbered(kd / "contexts"):
            aggr_us = _int(ctx / "monitoring_attrs" / "intervals" / "aggr_us")
            for scheme in _numbered(ctx / "schemes"):
                age = _int(scheme / "access_pattern" / "age" / "min")
                quota = _int(scheme / "quotas" / "bytes")
                reset_ms = _int(scheme / "quotas" / "reset_interval_ms")
                out.append(ReclaimScheme(
                    int(kd.name), _read(scheme / "action") or "?", _read(ctx / "operations"),
                    age * aggr_us / 1e6 if age is not None and aggr_us is not None else None,
                    quota * 1000 / reset_ms if quota and reset_ms else None,
                    _excluded(scheme)))
    return tuple(out)
