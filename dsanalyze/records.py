"""What one run asked for and measured, as typed values: `RunResult` and its parts.

Frozen dataclasses with `to_dict`/`from_dict`; `store.py` writes and reads
them as JSON, `analysis/` and `report/` read them. No I/O here, so the pure
layers can import this module without the store (docs/design.md, "Module map").

Categories are enums, never prose: how each knob was enforced (`How`), what
was done to the page cache (`CacheAction`), how a run ended (`Status`). The
human wording is produced at the edge (`report/text.py`). Run JSONs written
before these types (plain dicts, enforcement as sentences) still load.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field, fields
from typing import Any

from dsanalyze.config import Mode, RunSpec
from dsanalyze.errors import FailureKind
from dsanalyze.linkrecords import LinkRecord
from dsanalyze.plain import PlainJson

SCHEMA_VERSION = 2  # 2: typed dataset, enforcement and io records (1 still loads)


class Status(str, enum.Enum):
    """How a run ended. A str, so that run JSONs keep the plain words."""

    OK = "ok"
    FAILED = "failed"
    OOM = "oom"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
    STALLED = "stalled"  # no iteration for --stall-timeout seconds: stopped (`StallRecord`)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class ProcessState:
    """One process of a job when it was seen: `/proc/<pid>/stat`'s name and state letter
    (R running, S sleeping, D uninterruptible: waiting on I/O, Z zombie) and the kernel
    function it waits in (`/proc/<pid>/wchan`, "" when running or hidden)."""

    pid: int
    name: str
    state: str
    wchan: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "name": self.name, "state": self.state, "wchan": self.wchan}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ProcessState:
        return cls(int(d["pid"]), d["name"], d["state"], d.get("wchan", ""))


@dataclass(frozen=True)
class StallRecord:
    """What a stalled run was doing when the watchdog stopped it (`progress.py`).

    `still_s`: seconds with no iteration; `iterations`: each rank's count then (rank ->
    iterations); `processes`: the job's processes; `read_bytes`: the cgroup's bytes read
    (through the throttle, if any) by then; `memory_bytes` / `cache_bytes`: the cgroup's
    memory use and page cache then (None without cgroups); `log_exception`: the last
    exception the job's log shows by then (`progress.last_exception`), None without one: a
    thread of the job that raised and ended while the rest waits for it (a DataLoader
    worker's queue feeder that could not send a batch hangs its rank)."""

    still_s: float
    iterations: dict[int, int]
    processes: tuple[ProcessState, ...]
    read_bytes: int | None = None
    memory_bytes: int | None = None
    cache_bytes: int | None = None
    log_exception: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"still_s": self.still_s, "iterations": {str(k): v for k, v in
                                                         self.iterations.items()},
                "processes": [p.to_dict() for p in self.processes],
                "read_bytes": self.read_bytes, "memory_bytes": self.memory_bytes,
                "cache_bytes": self.cache_bytes, "log_exception": self.log_exception}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StallRecord:
        return cls(float(d["still_s"]), {int(k): int(v) for k, v in d["iterations"].items()},
                   tuple(ProcessState.from_dict(p) for p in d["processes"]),
                   d.get("read_bytes"), d.get("memory_bytes"), d.get("cache_bytes"),
                   d.get("log_exception"))


class CacheAction(str, enum.Enum):
    """What was done to the page cache before a run (`IoRecord.cache_state["action"]`)."""

    WARMED = "warmed"  # every dataset file read (cached, synthetic, loader runs)
    EVICTED_PER_FILE = "evicted_per_file"  # the dataset's pages alone, nothing else touched
    DROPPED_ALL = "dropped_all"  # per-file eviction left pages: whole cache dropped, libs re-read
    EVICTED_INCOMPLETE = "evicted_incomplete"  # pages left and no permission to drop the cache
    EVICTED = "evicted"  # run files from before per-file and global eviction were told apart


class How(str, enum.Enum):
    """How a knob of a run was enforced."""

    CGROUP = "cgroup"  # by a cgroup controller (cpuset, memory limit, read throttle)
    EVICTION = "eviction"  # the cache budget: the harness evicts dataset pages (datacache.py)
    AFFINITY = "affinity"  # CPU affinity alone (--no-cgroups)
    NOT_ENFORCED = "not_enforced"  # asked for, but nothing here could enforce it (see `why`)


@dataclass(frozen=True)
class Knob:
    """How one knob (CPUs, cache budget, storage bandwidth) was enforced, and why not."""

    how: How
    why: str | None = None  # for NOT_ENFORCED: "--no-cgroups", "no block device", ...

    @property
    def enforced(self) -> bool:
        return self.how is not How.NOT_ENFORCED

    def to_dict(self) -> dict[str, Any]:
        return {"how": self.how.value, **({"why": self.why} if self.why else {})}

    @classmethod
    def from_value(cls, v: Any) -> Knob | None:
        """A stored knob: the dict `to_dict` writes, or a version-1 sentence."""
        if v is None or v == "none":
            return None
        if isinstance(v, dict):
            return cls(How(v["how"]), v.get("why"))
        text = str(v)
        if text.startswith("not enforced"):
            return cls(How.NOT_ENFORCED, text.partition(": ")[2] or None)
        return cls(How.AFFINITY if text == "affinity" else How.CGROUP)


# Version-1 run JSONs kept enforcement as sentences and limiter figures side by side.
_LIMITER_KEYS = ("memory_limit_raises", "memory_limit_final_bytes", "page_cache_trim_at_bytes",
                 "page_cache_trims", "page_cache_trimmed_bytes", "page_cache_trims_refused",
                 "page_cache_max_bytes", "page_cache_check_interval_s")


@dataclass(frozen=True)
class Enforcement:
    """How the run's resources were held, in numbers and `How`s.

    A knob is None when nothing was asked of it (all CPUs, no cache budget,
    no throttle). The memory figures are those of a disk run with a budget:
    limit = budget + the job's own memory + margin.
    """

    cpus: Knob | None = None
    cache: Knob | None = None
    storage_bw: Knob | None = None
    cgroup_version: int | None = None
    dataset_disk: str | None = None  # "MAJ:MIN" of the dataset's disk; None: no block device
    memory_limit_bytes: int | None = None
    job_memory_bytes: int | None = None
    job_memory_measured: bool | None = None  # False: a default estimate, no cached run had it
    memory_margin_bytes: int | None = None
    trims_page_cache: bool = False  # the cache limiter trims the page cache to the budget
    limiter: dict[str, Any] = field(default_factory=dict)  # runs before the dataset-only budget: the old memory limiter's counts

    KNOBS = ("cpus", "cache", "storage_bw")

    def knobs(self) -> dict[str, Knob]:
        """The knobs that were asked for, by name."""
        return {k: v for k in self.KNOBS if (v := getattr(self, k)) is not None}

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {k: v.to_dict() for k, v in self.knobs().items()}
        for f in fields(self):
            if f.name not in self.KNOBS and f.name != "limiter":
                d[f.name] = getattr(self, f.name)
        return {**d, "limiter": dict(self.limiter)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Enforcement:
        if "limiter" not in d:
            d = _from_v1(d)
        known = {f.name for f in fields(cls)} - set(cls.KNOBS)
        return cls(**{k: Knob.from_value(d.get(k)) for k in cls.KNOBS},
                   **{k: v for k, v in d.items() if k in known})


def _from_v1(d: dict[str, Any]) -> dict[str, Any]:
    """A version-1 `enforced` dict: knobs as sentences, the limiter's figures beside them."""
    out = {k: v for k, v in d.items() if k not in _LIMITER_KEYS}
    out["limiter"] = {k: d[k] for k in _LIMITER_KEYS if k in d}
    texts = [str(d.get(k, "")) for k in Enforcement.KNOBS]
    version = next((int(m.group(1)) for t in texts if (m := re.match(r"cgroup v(\d)", t))), None)
    out["cgroup_version"] = version
    out["trims_page_cache"] = "trimmed" in str(d.get("cache", ""))
    disk = d.get("dataset_disk")
    if isinstance(disk, str) and not re.fullmatch(r"\d+:\d+", disk):
        out["dataset_disk"] = None  # "none (no block device: ...)"
    source = out.pop("job_memory_source", None)
    if source is not None:
        out["job_memory_measured"] = source.startswith("cached run")
    return out


@dataclass(frozen=True)
class DatasetRecord:
    """The data a run read, as recorded with it (the file list itself is not kept)."""

    root: str | None = None
    classes: int = 0  # class folders of an ImageFolder; 0 for a file set or shards
    num_files: int = 0
    total_bytes: int = 0
    file_bytes_quantiles: tuple[int, ...] = ()  # 101 sizes, 0% .. 100%: the cache simulator's
    fingerprint: dict[str, Any] | None = None  # fingerprint.Fingerprint.to_dict()

    @property
    def mean_file_bytes(self) -> float:
        return self.total_bytes / max(1, self.num_files)

    def to_dict(self) -> dict[str, Any]:
        d = {"root": self.root, "classes": self.classes, "files": self.num_files,
             "bytes": self.total_bytes, "mean_file_bytes": self.mean_file_bytes,
             "file_bytes_quantiles": list(self.file_bytes_quantiles)}
        return {**d, "fingerprint": self.fingerprint} if self.fingerprint else d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DatasetRecord:
        return cls(d.get("root"), int(d.get("classes") or 0), int(d.get("files") or 0),
                   int(d.get("bytes") or 0), tuple(int(x) for x in d.get("file_bytes_quantiles", ())),
                   d.get("fingerprint"))


@dataclass(frozen=True)
class Residency:
    """The dataset's pages in the page cache through a disk run with a cache budget, as the
    harness's limiter held them (`resources/datacache.py`).

    `sample_bytes[k]`: the dataset's resident bytes at `sample_unix_s[k]` (one sample per
    `interval_s`, taken before that pass of the limiter evicted anything); `peak_bytes`: the
    most seen before any pass evicted (what the job read since the pass before, on top of
    the budget, for a few ms). `watch`: how the limiter saw the job's
    reads: `fanotify` (opens and closes) or `scan` (residency polled). `stuck_*`: pages the
    limiter could not evict (mapped by a process); `over_budget_s`: time spent above the
    budget because the files the job had open held more than it. `gated`: the job's opens
    waited for room (fanotify permission events), so the residency never ran ahead of the
    limiter. `cpu_s`: the limiter's own CPU time through the run.
    """

    budget_bytes: int
    watch: str
    interval_s: float
    sample_unix_s: tuple[float, ...] = ()
    sample_bytes: tuple[int, ...] = ()
    evictions: int = 0
    evicted_bytes: int = 0
    peak_bytes: int = 0
    stuck_files: int = 0
    stuck_bytes: int = 0
    over_budget_s: float = 0.0
    gated: bool = False
    cpu_s: float = 0.0

    def filled(self, share: float = 0.95) -> tuple[int, ...]:
        """The samples from the first that reached `share` of the budget on (the cache full)."""
        first = next((k for k, b in enumerate(self.sample_bytes)
                      if b >= share * self.budget_bytes), len(self.sample_bytes))
        return self.sample_bytes[first:]

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**d, "sample_unix_s": list(self.sample_unix_s),
                "sample_bytes": list(self.sample_bytes)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Residency:
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        kw["sample_unix_s"] = tuple(float(x) for x in d.get("sample_unix_s", ()))
        kw["sample_bytes"] = tuple(int(x) for x in d.get("sample_bytes", ()))
        return cls(**kw)


@dataclass(frozen=True)
class ThrottleStart:
    """A throttled disk run's throttle, turned on as its training loader started
    (`resources/throttle.py`): when, the job's bytes read through it to the end of the run
    (the cgroup's counter), and the job's mapped files the harness read whole just before
    (so that no page of the job's code is read through it)."""

    started_unix_s: float
    throttled_read_bytes: int | None
    code_files_warmed: int = 0
    code_bytes_warmed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ThrottleStart:
        return cls(**{k: v for k, v in d.items() if k in {f.name for f in fields(cls)}})


@dataclass(frozen=True)
class IoRecord:
    """What the run read and held: bytes, page-cache residency, memory peaks.

    `cache_state`: what was done before the run (`action`, a `CacheAction`
    value; a disk run's `storage_device` probe: cold `read_bps`, `latency_s`).
    `counters`: the cgroup's at the end. `interference`: others' CPU and reads
    (`monitor.InterferenceProbe`). `nodes`: per node of a multi-node job.
    """

    read_bytes: int | None = None  # by the job, from the cgroup's counter
    read_bytes_source: str | None = None  # "cgroup", or None: not measured
    resident_after_bytes: int | None = None  # dataset pages in the page cache after the run
    dataset_bytes: int | None = None
    disk_read_bytes_machine: int | None = None  # the dataset disk's reads by anyone
    memory_peak_bytes: int | None = None
    job_memory_peak_bytes: int | None = None  # anon + shmem: what a cache budget must leave
    cache_state: dict[str, Any] = field(default_factory=dict)
    counters: dict[str, Any] = field(default_factory=dict)
    interference: dict[str, Any] | None = None
    mapped_files: tuple[str, ...] | None = None  # files the job's processes mapped (libraries)
    residency: Residency | None = None  # the dataset's pages through a disk run with a budget
    throttle: ThrottleStart | None = None  # a throttled disk run: reads through the throttle
    nodes: dict[str, Any] = field(default_factory=dict)  # node -> its own io, host, offset
    extra: dict[str, Any] = field(default_factory=dict)  # any other figure, kept as stored

    @property
    def cache_action(self) -> CacheAction | None:
        action = self.cache_state.get("action")
        return CacheAction(action) if action else None

    @property
    def storage_device(self) -> dict[str, Any] | None:
        """The disk run's cold probe of the dataset's device (`resources/storage.py`)."""
        return self.cache_state.get("storage_device")

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        if self.mapped_files is None:
            del d["mapped_files"]
        else:
            d["mapped_files"] = list(self.mapped_files)
        for name in ("residency", "throttle"):
            value = getattr(self, name)
            if value is None:
                del d[name]
            else:
                d[name] = value.to_dict()
        return {**self.extra, **d}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> IoRecord:
        known = {f.name for f in fields(cls)} - {"extra"}
        kw = {k: v for k, v in d.items() if k in known and v is not None}
        if "mapped_files" in kw:
            kw["mapped_files"] = tuple(kw["mapped_files"])
        if "residency" in kw:
            kw["residency"] = Residency.from_dict(kw["residency"])
        if "throttle" in kw:
            kw["throttle"] = ThrottleStart.from_dict(kw["throttle"])
        return cls(**kw, extra={k: v for k, v in d.items() if k not in known})


# DAMON actions that take memory away from where it is (`resources/reclaim.py`)
RECLAIM_ACTIONS = frozenset({"pageout", "cold", "lru_deprio"})


@dataclass(frozen=True)
class ReclaimScheme(PlainJson):
    """One DAMON scheme a running kdamond applies (`resources/reclaim.py`), stored in each
    run's `environment["page_reclaim"]`: its `action` on the memory its context monitors
    (`operations`: paddr, the physical memory), left idle `min_idle_s` or longer, at most
    `quota_bps`, sparing the filter types in `excludes` (`anon`: anonymous pages)."""

    kdamond: int
    action: str
    operations: str | None = None
    min_idle_s: float | None = None
    quota_bps: float | None = None
    excludes: tuple[str, ...] = ()

    @property
    def reclaims(self) -> bool:
        """It takes memory away: the page cache may be reclaimed by it."""
        return self.action in RECLAIM_ACTIONS

    @classmethod
    def of_run(cls, run: RunResult) -> tuple[ReclaimScheme, ...]:
        """The schemes a run recorded (none for runs before the record existed)."""
        return tuple(cls.from_dict(d) for d in run.environment.get("page_reclaim") or ()
                     if isinstance(d, dict))


def pct_over(value: float, base: float) -> float:
    """How much more `value` is than `base`, in % (negative: less)."""
    return 100 * (value / base - 1)


@dataclass(frozen=True)
class HostSpeed(PlainJson):
    """The machine's own speed around one run (`resources/hostspeed.py`), stored in its
    `environment["host_speed"]`: CPU seconds per item of a fixed piece of the dataset's work
    (`work`: decode or checksum), on one CPU, just before the run started (`before_cpu_s`)
    and just after it ended (`after_cpu_s`); None where not measured, with `why`. The
    sweep's median reading the run was judged by (`baseline_cpu_s`), and the runs of it
    measured before, each set aside with the machine slowed after it (`measured_again`)."""

    work: str | None = None
    before_cpu_s: float | None = None
    after_cpu_s: float | None = None
    why: str | None = None
    baseline_cpu_s: float | None = None
    measured_again: int = 0

    @property
    def slowed_after_pct(self) -> float | None:
        """How much longer the probe after the run took than the median it was judged by, in %
        (None: either not measured)."""
        if not self.after_cpu_s or not self.baseline_cpu_s:
            return None
        return pct_over(self.after_cpu_s, self.baseline_cpu_s)

    @property
    def cpu_s(self) -> float | None:
        """The mean of the two probes that answered (None: neither)."""
        found = [x for x in (self.before_cpu_s, self.after_cpu_s) if x]
        return sum(found) / len(found) if found else None

    @classmethod
    def of_run(cls, run: RunResult) -> HostSpeed | None:
        """What a run recorded (None for runs before the probe existed)."""
        d = run.environment.get("host_speed")
        return cls.from_dict(d) if isinstance(d, dict) else None


@dataclass(frozen=True)
class CpuScaling:
    """The machine's parallel efficiency, measured once per sweep by the harness
    (`resources/cpuscale.py`) and stored in each run's `environment["cpu_scaling"]`.

    CPU seconds per item of the dataset's own work (`work`: decode, a PIL decode and resize
    of a few of its images; checksum, a read of other files from memory and a CRC), first
    by one process pinned to one CPU (`solo_cpu_s`), then by `cpus` processes at once,
    each pinned to its own (`parallel_cpu_s`). contention = (parallel / solo - 1) /
    (cpus - 1), at least 0: the CPU per item each extra busy core adds (shared caches,
    SMT siblings). None, with `why`, where it was not measured (one CPU, no files).
    """

    cpus: int
    contention: float | None
    work: str | None = None
    solo_cpu_s: float | None = None
    parallel_cpu_s: float | None = None
    items: int = 0  # decoded (or checksummed) in all, both phases
    probe_s: float = 0.0  # wall time the probe took
    why: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CpuScaling:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    @classmethod
    def of_run(cls, run: RunResult) -> CpuScaling | None:
        """The probe a run recorded, None for runs before it existed."""
        d = run.environment.get("cpu_scaling")
        return cls.from_dict(d) if isinstance(d, dict) else None


@dataclass(frozen=True)
class RankRecord:
    """Per-iteration timings of one rank, in the order they happened.

    `wait_s[i]`: time blocked in the loader's `next()` for iteration i.
    `iter_s[i]`: from the start of iteration i's `next()` to the start of
    iteration i+1's (so it includes the wait and the compute).
    `epoch[i]`: 0-based epoch of iteration i; `samples[i]`: samples in it.
    The first `warmup` iterations are discarded by the analysis.
    """

    rank: int
    wait_s: tuple[float, ...]
    iter_s: tuple[float, ...]
    epoch: tuple[int, ...]
    samples: tuple[int, ...]
    warmup: int = 0
    start_unix_s: float = 0.0  # wall-clock time of the first iteration's start
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "warmup": self.warmup, "start_unix_s": self.start_unix_s,
                "wait_s": list(self.wait_s), "iter_s": list(self.iter_s),
                "epoch": list(self.epoch), "samples": list(self.samples), "extra": self.extra}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RankRecord:
        return cls(int(d["rank"]), tuple(d["wait_s"]), tuple(d["iter_s"]), tuple(d["epoch"]),
                   tuple(d["samples"]), int(d.get("warmup", 0)), float(d.get("start_unix_s", 0.0)),
                   dict(d.get("extra", {})))


LOADER_STAGE = "loader"  # the step table's stage of the dataset's own read + decode


def step_table(totals: dict[str, list[int]]) -> list[dict[str, Any]]:
    """A rank's per-transform table (`RankRecord.extra["transforms"]`), rows in pipeline order
    (the loader first), from key "stage\tindex\tname" -> [calls, nanoseconds, CPU nanoseconds
    of the threads that made the calls]. `cpu_s` is the steps' own work, without the time
    their process waited for a core or for storage (`analysis/workspeed.work_cpu_s`)."""
    rows = []
    for key, (calls, ns, *cpu) in totals.items():
        stage, index, name = key.split("\t", 2)
        cpu_s = cpu[0] / 1e9 if cpu else None
        rows.append({"stage": stage, "index": int(index), "name": name, "calls": calls,
                     "total_s": ns / 1e9, "mean_s_per_sample": ns / 1e9 / calls if calls else 0.0,
                     "cpu_s": cpu_s,
                     "mean_cpu_s_per_sample": cpu_s / calls if calls and cpu_s is not None
                     else None})
    rows.sort(key=lambda r: (r["stage"] != LOADER_STAGE, r["stage"], r["index"]))
    return rows


def _typed(value: Any, cls: Any) -> Any:
    return cls.from_dict(value) if isinstance(value, dict) else value


@dataclass(frozen=True)
class RunResult:
    """Everything one run measured, plus what is needed to re-analyse it.

    `status`, `dataset`, `enforced` and `io` may be given as their stored
    forms (a string, dicts): they are converted to `Status`, `DatasetRecord`,
    `Enforcement` and `IoRecord`.
    """

    spec: RunSpec
    status: Status
    error: str | None = None
    failure: FailureKind | None = None  # why a failed run's first rank failed
    ranks: tuple[RankRecord, ...] = ()
    dataset: DatasetRecord = field(default_factory=DatasetRecord)
    enforced: Enforcement = field(default_factory=Enforcement)
    environment: dict[str, Any] = field(default_factory=dict)  # versions, threads, git sha, host
    io: IoRecord = field(default_factory=IoRecord)
    monitor: tuple[dict[str, Any], ...] = ()
    started_unix_s: float = 0.0
    duration_s: float = 0.0
    log_path: str | None = None
    link: LinkRecord | None = None  # data across a network: the link and what crossed it
    stall: StallRecord | None = None  # status stalled: what the job was doing

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", Status(self.status))
        object.__setattr__(self, "dataset", _typed(self.dataset, DatasetRecord))
        object.__setattr__(self, "enforced", _typed(self.enforced, Enforcement))
        object.__setattr__(self, "io", _typed(self.io, IoRecord))

    @property
    def run_id(self) -> str:
        return self.spec.run_id

    @property
    def mode(self) -> Mode:
        return self.spec.mode

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA_VERSION,
            "run_id": self.run_id,
            "spec": self.spec.to_dict(),
            "status": self.status.value,
            "error": self.error,
            "failure": self.failure.value if self.failure else None,
            "started_unix_s": self.started_unix_s,
            "duration_s": self.duration_s,
            "log_path": self.log_path,
            "dataset": self.dataset.to_dict(),
            "enforced": self.enforced.to_dict(),
            "environment": self.environment,
            "io": self.io.to_dict(),
            "ranks": [r.to_dict() for r in self.ranks],
            "monitor": list(self.monitor),
            **({"link": self.link.to_dict()} if self.link is not None else {}),
            **({"stall": self.stall.to_dict()} if self.stall else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunResult:
        return cls(
            spec=RunSpec.from_dict(d["spec"]),
            status=Status(d["status"]),
            error=d.get("error"),
            failure=FailureKind(d["failure"]) if d.get("failure") else None,
            ranks=tuple(RankRecord.from_dict(r) for r in d.get("ranks", [])),
            dataset=DatasetRecord.from_dict(d.get("dataset", {})),
            enforced=Enforcement.from_dict(d.get("enforced", {})),
            environment=dict(d.get("environment", {})),
            io=IoRecord.from_dict(d.get("io", {})),
            monitor=tuple(d.get("monitor", [])),
            started_unix_s=float(d.get("started_unix_s", 0.0)),
            duration_s=float(d.get("duration_s", 0.0)),
            log_path=d.get("log_path"),
            link=LinkRecord.from_dict(d["link"]) if d.get("link") else None,
            stall=StallRecord.from_dict(d["stall"]) if d.get("stall") else None,
        )
