"""One cgroup per run, on cgroup v2 or v1, behind one small interface.

    with RunCgroup.create("cached-cpus2", Limits(cpus=(0,), memory_bytes=...)) as cg:
        argv = cg.join_argv() + job_argv     # the job joins before it starts
        ...
        cg.counters()                         # cpu, read bytes, memory, OOM kills
    # every process left is killed and the cgroup removed, also on exceptions

The hierarchy is detected from /proc/self/mountinfo. A machine may be hybrid
(this one: v1 cpuset, memory and blkio; a v2 mount with only hugetlb): v2 is
used when it offers cpuset, memory and io, else v1. Names start with
`dsanalyze-<harness pid>-`, so `clean_stale` can remove what a killed
harness left behind.

On v2 a cgroup's children get a controller only when its `cgroup.subtree_control`
lists it, and a cgroup other than the root may list one only while it holds no
process of its own (the no-internal-process rule). The harness's own cgroup holds
the harness, so the run cgroups go under the deepest of its ancestors that hands
cpuset, memory and io to its children, or can (`_v2_parent`): on a systemd server
that is usually the root, whose `cgroup.subtree_control` lacks cpuset unless a unit
asked for it. A controller the harness enables there for its run cgroups is disabled
again when the last of them is removed (`RunCgroup.remove`). Where none can (the
namespaced root of a container, holding the container's processes), the one-line
refusal says so. What a run cgroup listed is also written down (`LISTED_DIR/NAME.json`:
the parent and the controllers) until it is unlisted: a harness killed with its reaper
(`resources/lifeline.py`) leaves the record, and `clean_stale` at the next start unlists
what it names once no run cgroup is left under that parent. Without a record nothing is
unlisted: a controller listed by the machine's owner is not the harness's to take away.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsanalyze.errors import ResourceError

PREFIX = "dsanalyze-"
V1_CONTROLLERS = ("cpuset", "memory", "blkio", "cpuacct")
REQUIRED_V1 = ("cpuset", "memory", "blkio")
REQUIRED_V2 = ("cpuset", "memory", "io")
ACCOUNTING_ONLY_BPS = 1 << 50  # 1 PiB/s
# v2: what each run cgroup listed in its parent's cgroup.subtree_control, until unlisted
# (the environment variable: another folder, which the reaper inherits; tests use one)
LISTED_DIR = Path(os.environ.get("DSANALYZE_LISTED_DIR") or "/run/dsanalyze/listed")


@dataclass(frozen=True)
class Limits:
    """What to enforce; None: no limit on that knob."""

    cpus: tuple[int, ...] | None = None
    memory_bytes: int | None = None
    read_bps: int | None = None
    device: str | None = None  # "MAJ:MIN" of the whole disk to throttle and count reads on


@dataclass(frozen=True)
class Hierarchy:
    """Where the cgroup controllers are mounted: v2 root, or one dir per v1 controller."""

    version: int  # 1 or 2; 0: none usable
    roots: dict[str, Path]  # controller -> directory under which run cgroups go
    # v2: controllers to list in the parent's cgroup.subtree_control before a run cgroup
    enable: tuple[str, ...] = ()
    why: str = ""  # version 0: why no hierarchy is usable

    @property
    def usable(self) -> bool:
        return self.version in (1, 2)


def _own_cgroup_paths() -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                out[c] = path
    except OSError:
        pass
    return out


def detect(mountinfo: str | None = None, own: dict[str, str] | None = None) -> Hierarchy:
    """Find the cgroup controllers from mountinfo text (default: this process's)."""
    if mountinfo is None:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    own = _own_cgroup_paths() if own is None else own
    v1: dict[str, Path] = {}
    v2_root: Path | None = None
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(fields) < 5 or len(rfields) < 3:
            continue
        mount_point, fstype, super_opts = fields[4], rfields[0], rfields[2].split(",")
        if fstype == "cgroup2":
            v2_root = Path(mount_point)
        elif fstype == "cgroup":
            for c in V1_CONTROLLERS:
                if c in super_opts:
                    v1[c] = Path(mount_point) / own.get(c, "/").lstrip("/")
    why = ""
    if v2_root is not None:
        base = v2_root / own.get("", "/").lstrip("/")
        parent = _v2_parent(v2_root, base)
        if parent is not None:
            return Hierarchy(2, {c: parent[0] for c in REQUIRED_V2 + ("cpu",)}, parent[1])
        if all(c in _read(v2_root / "cgroup.controllers").split() for c in REQUIRED_V2):
            why = (f"cgroup v2: no cgroup from this process's ({base}) up to the mount can "
                   "give child cgroups cpuset, memory and io (one other than the root that "
                   "holds processes cannot): run the harness in a cgroup of its own under one "
                   "that can, or pass --no-cgroups (limits will not be enforced)")
    if all(c in v1 for c in REQUIRED_V1):
        return Hierarchy(1, v1)
    return Hierarchy(0, {}, why=why)


def _v2_parent(mount: Path, own: Path) -> tuple[Path, tuple[str, ...]] | None:
    """The cgroup the run cgroups go under on v2, with the controllers of REQUIRED_V2 to
    list in its `cgroup.subtree_control` first; None where none can have them.

    The deepest of `own` and its ancestors up to the mount whose `cgroup.controllers` has
    all of them and that lists them all in its `cgroup.subtree_control` already, or may:
    it is the root (no `cgroup.type` file) or holds no process of its own."""
    chain = [own, *own.parents]
    for cg in chain[:chain.index(mount) + 1] if mount in chain else [own]:
        if not all(c in _read(cg / "cgroup.controllers").split() for c in REQUIRED_V2):
            continue
        missing = _unlisted(cg, REQUIRED_V2)
        if not missing:
            return cg, ()
        if not (cg / "cgroup.type").exists() or not _read(cg / "cgroup.procs").strip():
            return cg, missing
    return None


def _unlisted(cg: Path, controllers: tuple[str, ...]) -> tuple[str, ...]:
    """The `controllers` the v2 cgroup `cg` does not list in its `cgroup.subtree_control`
    (does not hand to its children)."""
    listed = _read(cg / "cgroup.subtree_control").split()
    return tuple(c for c in controllers if c not in listed)


def unlist_unused(parent: Path, controllers: tuple[str, ...]) -> bool:
    """v2: unlist `controllers` from `parent`'s `cgroup.subtree_control`, unless a run cgroup
    (`dsanalyze-*`, this harness's or another's) is still there and may use them. True when
    they were unlisted."""
    if any(d.name.startswith(PREFIX) and d.is_dir() for d in parent.iterdir()):
        return False
    try:
        (parent / "cgroup.subtree_control").write_text(" ".join(f"-{c}" for c in controllers))
    except OSError:
        return False
    return True


def remember_listed(name: str, parent: Path, controllers: tuple[str, ...]) -> None:
    """Write down that run cgroup `name` listed `controllers` in `parent` (best effort: a
    harness that cannot leaves the unlisting to itself and its reaper, as before)."""
    with contextlib.suppress(OSError):
        LISTED_DIR.mkdir(parents=True, exist_ok=True)
        (LISTED_DIR / f"{name}.json").write_text(
            json.dumps({"parent": str(parent), "controllers": list(controllers)}))


def forget_listed(name: str) -> None:
    with contextlib.suppress(OSError):
        (LISTED_DIR / f"{name}.json").unlink()


def unlist_stale() -> list[str]:
    """Unlist what the records of harnesses that are gone name, under parents no run
    cgroup is left in (`unlist_unused`), and drop those records; a record whose parent
    still holds a run cgroup stays for a later start. The records unlisted, by name."""
    done = []
    for record in sorted(LISTED_DIR.glob(f"{PREFIX}*.json")) if LISTED_DIR.is_dir() else []:
        if not _harness_gone(record.name):
            continue
        try:
            found = json.loads(record.read_text())
            parent, controllers = Path(found["parent"]), tuple(found["controllers"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not parent.is_dir() or unlist_unused(parent, controllers):
            with contextlib.suppress(OSError):
                record.unlink()
            done.append(record.stem)
    return done


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError as e:
        raise ResourceError(f"cannot write {value.strip()!r} to {path} ({e.strerror}): run as root "
                            "or pass --no-cgroups (limits will not be enforced)") from None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _kv(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


class RunCgroup:
    """A cgroup made for one run (one directory per controller on v1)."""

    def __init__(self, hierarchy: Hierarchy, name: str) -> None:
        self.hierarchy = hierarchy
        self.name = name
        self.dirs: dict[str, Path] = {c: root / name for c, root in hierarchy.roots.items()}
        self._unique = sorted(set(self.dirs.values()))
        self._enabled: tuple[str, ...] = ()  # v2: listed in the parent's subtree_control here

    @classmethod
    def create(cls, label: str, limits: Limits, hierarchy: Hierarchy | None = None) -> RunCgroup:
        hierarchy = hierarchy or detect()
        if not hierarchy.usable:
            raise ResourceError(hierarchy.why or "no writable cgroup v1/v2 hierarchy with cpuset, "
                                "memory and io: pass --no-cgroups (limits will not be enforced)")
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", label)
        cg = cls(hierarchy, f"{PREFIX}{os.getpid()}-{safe}")
        try:
            cg._enable_controllers()
            for d in cg._unique:
                try:
                    d.mkdir()
                except FileExistsError:
                    pass
                except OSError as e:
                    raise ResourceError(f"cannot create cgroup {d} ({e.strerror}): run as root or "
                                        "pass --no-cgroups (limits will not be enforced)") from None
            cg._apply(limits)
        except BaseException:
            cg.remove()
            raise
        return cg

    @property
    def _parent(self) -> Path:
        """v2: the one cgroup the run cgroup is made under (`_v2_parent`)."""
        return self._unique[0].parent

    def _enable_controllers(self) -> None:
        """v2: list the controllers the parent does not hand to its children yet in its
        `cgroup.subtree_control` (`_v2_parent` chose a parent that may)."""
        if self.hierarchy.version != 2 or not self.hierarchy.enable:
            return
        missing = _unlisted(self._parent, self.hierarchy.enable)
        if missing:
            _write(self._parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in missing))
            self._enabled = missing
            remember_listed(self.name, self._parent, missing)

    @property
    def listed(self) -> tuple[Path, tuple[str, ...], str] | None:
        """v2: the parent and the controllers this cgroup had it list (`_enable_controllers`),
        and the name of its record (`remember_listed`), for a reaper to unlist should the
        harness be killed; None where it listed none."""
        return (self._parent, self._enabled, self.name) if self._enabled else None

    def _disable_controllers(self) -> None:
        """Unlist what `_enable_controllers` listed, once no run cgroup is left under the
        parent (`unlist_unused`)."""
        if self._enabled and unlist_unused(self._parent, self._enabled):
            forget_listed(self.name)
        self._enabled = ()

    def __enter__(self) -> RunCgroup:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()

    def _apply(self, limits: Limits) -> None:
        v1 = self.hierarchy.version == 1
        cpuset = self.dirs["cpuset"]
        parent = cpuset.parent
        cpus = ",".join(map(str, limits.cpus)) if limits.cpus else (
            _read(parent / "cpuset.cpus").strip() or _read(parent / "cpuset.cpus.effective").strip())
        if v1:
            # v1 cpusets start empty: both cpus and mems must be set before a task joins.
            _write(cpuset / "cpuset.mems", _read(parent / "cpuset.mems").strip() or "0")
        if cpus:
            _write(cpuset / "cpuset.cpus", cpus)
        if limits.memory_bytes is not None:
            mem = self.dirs["memory"]
            _write(self.memory_limit_file, str(limits.memory_bytes))
            if not v1 and (mem / "memory.swap.max").exists():
                _write(mem / "memory.swap.max", "0")  # the budget is RAM, not RAM + swap
            if v1:
                # reclaim at the limit (and the trims) takes page cache, not the job's
                # memory; best effort: without it a machine with swap may swap instead
                with contextlib.suppress(OSError):
                    (mem / "memory.swappiness").write_text("0")
        if limits.read_bps is None and limits.device and v1:
            # v1 blk-throttle counts bytes only for devices that have a rule: a
            # rule no job can reach turns the read counter on without limiting.
            _write(self.dirs["blkio"] / "blkio.throttle.read_bps_device",
                   f"{limits.device} {ACCOUNTING_ONLY_BPS}")
        if limits.read_bps is not None:
            self.set_read_bps(limits.device, limits.read_bps)

    def set_read_bps(self, device: str | None, read_bps: int) -> None:
        """Throttle reads from the whole disk `device` ("MAJ:MIN") to `read_bps` bytes/s."""
        if not device:
            raise ResourceError("a storage bandwidth limit needs the disk's MAJ:MIN")
        if self.hierarchy.version == 1:
            _write(self.dirs["blkio"] / "blkio.throttle.read_bps_device", f"{device} {read_bps}")
        else:
            _write(self.dirs["io"] / "io.max", f"{device} rbps={read_bps}")

    def join_argv(self) -> list[str]:
        """Argv prefix of the wrapper that joins this cgroup, then execs the rest."""
        argv = [sys.executable, "-m", "dsanalyze.resources.enter"]
        for d in self._unique:
            argv += ["--procs", str(d / "cgroup.procs")]
        return argv + ["--"]

    def pids(self) -> set[int]:
        out: set[int] = set()
        for d in self._unique:
            out.update(int(p) for p in _read(d / "cgroup.procs").split())
        return out

    def kill(self, timeout_s: float = 5.0) -> int:
        """SIGKILL every process in the cgroup until none is left; return how many."""
        killed: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)
        return len(killed)

    def remove(self) -> None:
        """Kill what is left, then remove the directories (retrying while they drain), and
        unlist the controllers this cgroup had the parent hand out."""
        self.kill()
        for d in self._unique:
            for _ in range(100):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)
        self._disable_controllers()

    @property
    def memory_limit_file(self) -> Path:
        v1 = self.hierarchy.version == 1
        return self.dirs["memory"] / ("memory.limit_in_bytes" if v1 else "memory.max")

    def counters(self) -> dict[str, int | float]:
        """Cumulative CPU seconds, bytes read from storage, memory now and at peak, OOM kills."""
        if self.hierarchy.version == 1:
            return self._counters_v1()
        return self._counters_v2()

    def _counters_v1(self) -> dict[str, int | float]:
        mem = self.dirs["memory"]
        stat = _kv(_read(mem / "memory.stat"))
        read_bytes = 0
        for line in _read(self.dirs["blkio"] / "blkio.throttle.io_service_bytes").splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] == "Read":
                read_bytes += int(parts[2])
        out: dict[str, int | float] = {
            "read_bytes": read_bytes,
            "memory_bytes": int(_read(mem / "memory.usage_in_bytes") or 0),
            "memory_peak_bytes": int(_read(mem / "memory.max_usage_in_bytes") or 0),
            "cache_bytes": stat.get("cache", 0),
            "anon_bytes": stat.get("rss", 0),
            "shmem_bytes": stat.get("shmem", 0),
            "oom_kills": _kv(_read(mem / "memory.oom_control")).get("oom_kill", 0),
        }
        if "cpuacct" in self.dirs:
            out["cpu_usage_s"] = int(_read(self.dirs["cpuacct"] / "cpuacct.usage") or 0) / 1e9
        return out

    def _counters_v2(self) -> dict[str, int | float]:
        d = self.dirs["memory"]
        stat = _kv(_read(d / "memory.stat"))
        read_bytes = 0
        for line in _read(d / "io.stat").splitlines():
            for field in line.split()[1:]:
                if field.startswith("rbytes="):
                    read_bytes += int(field[7:])
        return {
            "read_bytes": read_bytes,
            "memory_bytes": int(_read(d / "memory.current") or 0),
            "memory_peak_bytes": int(_read(d / "memory.peak") or 0),
            "cache_bytes": stat.get("file", 0),
            "anon_bytes": stat.get("anon", 0),
            "shmem_bytes": stat.get("shmem", 0),
            "oom_kills": _kv(_read(d / "memory.events")).get("oom_kill", 0),
            "cpu_usage_s": _kv(_read(d / "cpu.stat")).get("usage_usec", 0) / 1e6,
        }


def probe(hierarchy: Hierarchy | None = None) -> Hierarchy:
    """Check that run cgroups can be made and limited here; raise ResourceError if not."""
    hierarchy = hierarchy or detect()
    with RunCgroup.create("probe", Limits(cpus=None, memory_bytes=1 << 40), hierarchy):
        pass
    return hierarchy


def clean_stale(hierarchy: Hierarchy | None = None) -> list[str]:
    """Remove `dsanalyze-<pid>-*` cgroups whose harness is gone, then (v2) unlist what their
    records name (`unlist_stale`); return the cgroups' names."""
    hierarchy = hierarchy or detect()
    removed = []
    for root in set(hierarchy.roots.values()):
        if not root.is_dir():
            continue
        for d in root.iterdir():
            if not (_harness_gone(d.name) and d.is_dir()):
                continue
            cg = RunCgroup(Hierarchy(hierarchy.version, {"x": root}), d.name)
            cg.remove()
            removed.append(str(d))
    if hierarchy.version == 2:
        unlist_stale()
    return removed


def _harness_gone(name: str) -> bool:
    """`name` is one of a harness's (`dsanalyze-<pid>-...`) whose process is gone."""
    m = re.match(rf"{PREFIX}(\d+)-", name)
    return m is not None and not pid_alive(int(m.group(1)))


def pid_alive(pid: int) -> bool:
    """A process of that pid exists (this one counts; one of another user too)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def whole_disk(path: str | Path) -> str | None:
    """MAJ:MIN of the whole disk holding `path`, or None if it cannot be throttled.

    Throttling applies to whole disks, not partitions; major 0 (overlay, tmpfs,
    NFS, FUSE) has no block device at all.
    """
    st = os.stat(path)
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    if major == 0:
        return None
    sys_dev = Path(f"/sys/dev/block/{major}:{minor}")
    if (sys_dev / "partition").exists():
        parent_dev = _read(sys_dev.resolve().parent / "dev").strip()
        return parent_dev or None
    return f"{major}:{minor}" if sys_dev.exists() else None
