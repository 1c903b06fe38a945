"""What was asked: the job, the resources, the mode, and the runs of a sweep.

Everything here is a frozen dataclass with a JSON round-trip (`to_dict` /
`from_dict`), so that a stored run can be re-analysed without re-running it.
Sizes are bytes, bandwidths bytes per second, times seconds, unless a name
says otherwise (`sim_step_ms`).
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsanalyze.errors import ConfigError


class Mode(str, enum.Enum):
    """The differential modes (docs/design.md)."""

    SYNTHETIC = "synthetic"  # one device-resident batch replayed: compute bound
    CACHED = "cached"  # real loader, every file in the page cache
    DISK = "disk"  # real loader, page cache dropped and confined to the budget
    LOADER = "loader"  # the loader alone, no compute: raw pipeline rate

    @property
    def cache_independent(self) -> bool:
        """Runs with every file cached and no limit: cache and bandwidth do not apply."""
        return self is not Mode.DISK

    @classmethod
    def parse(cls, text: str) -> Mode:
        """A mode's name; `remote` is the disk mode of served data (its runs read across the
        link: `Resources.remote`)."""
        if text.strip().lower() == "remote":
            return cls.DISK
        try:
            return cls(text.strip().lower())
        except ValueError:
            names = ", ".join(m.value for m in cls)
            raise ConfigError(f"unknown mode {text!r}: use one of {names}") from None


DEVICES = ("cuda", "cpu", "sim")
LOADERS = ("pytorch", "dali")

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)
_NONE_WORDS = ("none", "unlimited", "inf", "off")


def parse_bytes(text: str | int, what: str = "size") -> int:
    """Parse `512M`, `2G`, `1.5GiB`, `4096` into bytes (binary multiples)."""
    if isinstance(text, int):
        return text
    match = _SIZE_RE.match(str(text))
    if not match:
        raise ConfigError(f"cannot read {what} {text!r}: write bytes such as 4096, 512M or 2G")
    number, unit = match.groups()
    return int(float(number) * _UNITS[unit.upper()])


def format_bytes(n: float | None) -> str:
    """Human-readable binary size, for display only: 1.5G, 512M, 300K."""
    if n is None:
        return "none"
    for unit in ("T", "G", "M", "K"):
        if abs(n) >= _UNITS[unit]:
            value = n / _UNITS[unit]
            return f"{value:.3g}{unit}"
    return f"{int(n)}B"


@dataclass(frozen=True)
class CacheBudget:
    """A page-cache budget as asked (`50%`, `2G`, `none`) and resolved to bytes.

    `cache_bytes` None means no limit. A percentage is of the dataset's bytes.
    """

    spec: str = "none"
    cache_bytes: int | None = None

    @classmethod
    def parse(cls, text: str, dataset_bytes: int | None = None) -> CacheBudget:
        spec = str(text).strip()
        if spec.lower() in _NONE_WORDS:
            return cls("none", None)
        if spec.endswith("%"):
            try:
                pct = float(spec[:-1])
            except ValueError:
                raise ConfigError(f"cannot read cache size {text!r}: write 50%, 2G or none") from None
            if pct < 0:
                raise ConfigError(f"cache size {text!r} is negative")
            resolved = None if dataset_bytes is None else int(dataset_bytes * pct / 100)
            return cls(spec, resolved)
        try:
            return cls(spec, parse_bytes(spec, "cache size"))
        except ConfigError:
            raise ConfigError(f"cannot read cache size {text!r}: write 50%, 2G or none") from None

    @property
    def label(self) -> str:
        if self.cache_bytes is None:
            return "none"
        return self.spec if self.spec.endswith("%") else format_bytes(self.cache_bytes)


def parse_bandwidth(text: str | int | None, what: str = "storage bandwidth") -> int | None:
    """`none` -> None; `40M` -> bytes per second."""
    if text is None or str(text).strip().lower() in _NONE_WORDS:
        return None
    bps = parse_bytes(text, what)
    if bps <= 0:
        raise ConfigError(f"{what} {text!r} must be positive, or none")
    return bps


_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?(?:e[-+]?\d+)?)\s*(us|ms|s)?\s*$", re.IGNORECASE)
_DURATION_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, None: 1.0}


def parse_duration_s(text: str | float, what: str = "network latency") -> float:
    """`20ms`, `0.5s`, `0` -> seconds."""
    if isinstance(text, (int, float)):
        return float(text)
    match = _DURATION_RE.match(str(text))
    if not match:
        raise ConfigError(f"cannot read {what} {text!r}: write a time such as 0, 20ms or 0.1s")
    number, unit = match.groups()
    return float(number) * _DURATION_UNITS[unit.lower() if unit else None]


def unlimited_last(x: float | None) -> float:
    """Sort key of a resource amount: None (no limit: every CPU, no cache limit, no throttle)
    after every number."""
    return float("inf") if x is None else float(x)


@dataclass(frozen=True)
class Resources:
    """One resource configuration: CPUs, page-cache budget, storage read bandwidth; and for
    data across a network (`Sweep.serve`), the link's download bandwidth and added latency.

    `net_latency_s` None: the data is local (no link); a number (0 too): a remote
    configuration, whose disk run reads across the link (`remote`)."""

    cpus: int | None = None  # None: every CPU the harness may use
    cache: CacheBudget = field(default_factory=CacheBudget)
    storage_read_bps: int | None = None
    net_bw_bps: int | None = None  # None: unshaped
    net_latency_s: float | None = None  # None: not remote

    @property
    def remote(self) -> bool:
        return self.net_latency_s is not None

    @property
    def key(self) -> str:
        """Stable label used in run ids and tables: `cpus2-cache25%-bw40M`, and for a remote
        configuration `-net100M-lat20ms` after it."""
        cpus = "all" if self.cpus is None else str(self.cpus)
        bw = "none" if self.storage_read_bps is None else format_bytes(self.storage_read_bps)
        key = f"cpus{cpus}-cache{self.cache.label}-bw{bw}"
        if self.remote:
            net = "none" if self.net_bw_bps is None else format_bytes(self.net_bw_bps)
            key += f"-net{net}-lat{(self.net_latency_s or 0) * 1000:g}ms"
        return key

    def to_dict(self) -> dict[str, Any]:
        d = {"cpus": self.cpus, "cache_spec": self.cache.spec,
             "cache_bytes": self.cache.cache_bytes, "storage_read_bps": self.storage_read_bps}
        if self.remote:  # local configurations' files unchanged
            d.update(net_bw_bps=self.net_bw_bps, net_latency_s=self.net_latency_s)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Resources:
        return cls(d.get("cpus"), CacheBudget(d.get("cache_spec", "none"), d.get("cache_bytes")),
                   d.get("storage_read_bps"), d.get("net_bw_bps"), d.get("net_latency_s"))


@dataclass(frozen=True)
class Job:
    """The training job and how it is launched. Same for every run of a sweep."""

    script: str | None = None  # None: the built-in image-classification job
    script_args: tuple[str, ...] = ()
    data_dir: str | None = None
    arch: str = "resnet18"
    batch_size: int = 32
    workers: int = 2
    iters: int | None = None  # measured iterations per rank (after warm-up)
    epochs: int | None = None  # or whole measured epochs
    warmup: int = 5
    device: str = "sim"
    sim_step_ms: float = 50.0
    amp: bool = False
    loader: str = "pytorch"
    nproc_per_node: int = 1
    nnodes: int = 1
    node_rank: int = 0
    # Where the nodes meet, not what the job is: a resumed sweep may meet elsewhere.
    master_addr: str | None = field(default=None, compare=False)
    master_port: int | None = field(default=None, compare=False)
    seed: int = 0
    timeout_s: float = 1800.0
    # no iteration for this long (before the first: startup_timeout_s): stopped as stalled
    stall_timeout_s: float = field(default=120.0, compare=False)
    startup_timeout_s: float = field(default=600.0, compare=False)
    # data larger than memory: the share of it cached runs warm (resources/memroom.py)
    cached_subset: str = field(default="auto", compare=False)
    loader_index: int | None = None  # user script: its K-th loader created is the training one
    # `--until-ci P%`: each run stops once its steady rate is within ± P% (instrument/untilci.py),
    # after at least `min_iters` iterations; `iters` / `epochs` are then the most it runs
    until_ci_pct: float | None = None
    min_iters: int = 30

    def __post_init__(self) -> None:
        object.__setattr__(self, "script_args", tuple(self.script_args))
        if self.device not in DEVICES:
            raise ConfigError(f"unknown --device {self.device!r}: use one of {', '.join(DEVICES)}")
        if self.loader not in LOADERS:
            raise ConfigError(f"unknown --loader {self.loader!r}: use one of {', '.join(LOADERS)}")
        for name in ("batch_size", "nproc_per_node", "nnodes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.workers < 0 or self.warmup < 0:
            raise ConfigError("workers and warmup must be zero or more")
        if self.iters is not None and self.epochs is not None:
            raise ConfigError("give --iters or --epochs, not both")
        if (self.iters or 1) < 1 or (self.epochs or 1) < 1:
            raise ConfigError("--iters and --epochs must be at least 1")
        if self.sim_step_ms <= 0:
            raise ConfigError("--sim-step-ms must be positive")
        if self.until_ci_pct is not None and not 0 < self.until_ci_pct < 100:
            raise ConfigError(f"--until-ci must be between 0 and 100%, got {self.until_ci_pct:g}%")
        if self.min_iters < 1:
            raise ConfigError(f"--min-iters must be at least 1, got {self.min_iters}")
        if min(self.stall_timeout_s, self.startup_timeout_s) <= 0:
            raise ConfigError("--stall-timeout and --startup-timeout must be positive, got "
                              f"{self.stall_timeout_s} and {self.startup_timeout_s}")
        if self.cached_subset not in ("auto", "off"):
            CacheBudget.parse(self.cached_subset)  # a bad size: its one-line error
        if self.loader_index is not None and self.loader_index < 0:
            raise ConfigError(f"--loader-index must be 0 or more, got {self.loader_index}")

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["script_args"] = list(self.script_args)
        if self.until_ci_pct is None:  # old files unchanged: the early stop's settings if asked
            del d["until_ci_pct"], d["min_iters"]
        for name in ("stall_timeout_s", "startup_timeout_s", "cached_subset"):  # when set: old
            if d[name] == Job.__dataclass_fields__[name].default:  # files read back unchanged
                del d[name]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Job:
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in known}
        kwargs["script_args"] = tuple(kwargs.get("script_args", ()))
        return cls(**kwargs)


@dataclass(frozen=True)
class RunSpec:
    """One measured run: a job, in one mode, under one resource configuration."""

    job: Job
    mode: Mode
    resources: Resources
    repeat: int = 1  # 1-based: the N-th measurement of this very run (--repeats, --target-ci)

    @property
    def run_id(self) -> str:
        """Synthetic and cached runs do not depend on the cache budget or the
        storage bandwidth (no limit, everything cached), so their id names only
        the CPUs and they are shared by every configuration of a sweep. A
        repeat after the first ends in `-r<N>`."""
        cpus = "all" if self.resources.cpus is None else str(self.resources.cpus)
        if self.mode.cache_independent:
            base = f"{self.mode.value}-cpus{cpus}"
        else:
            mode = "remote" if self.resources.remote else self.mode.value
            base = f"{mode}-{self.resources.key}".replace("%", "pct")
        return base if self.repeat == 1 else f"{base}-r{self.repeat}"

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode.value, "resources": self.resources.to_dict(),
                "job": self.job.to_dict(),
                **({"repeat": self.repeat} if self.repeat != 1 else {})}  # old files unchanged

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSpec:
        return cls(Job.from_dict(d["job"]), Mode(d["mode"]), Resources.from_dict(d["resources"]),
                   int(d.get("repeat", 1)))


SWEEP_KEYS = ("prefix", "modes", "cpus", "cache", "storage_bw", "combos", "resume", "use_cgroups",
              "drop_caches_globally", "plots", "repeats", "target_ci", "max_repeats",
              "shared_core_runs", "host_retries", "serve", "net_bw", "net_latency", "endpoint", "probe_budget",
              "local_cache", "adaptive", "budget")
BACKENDS = ("s3", "http")


@dataclass(frozen=True)
class Sweep:
    """What `harness.py` was asked: one job, its modes, and the resource grid."""

    job: Job
    prefix: str = "results/run"
    modes: tuple[Mode, ...] = (Mode.SYNTHETIC, Mode.CACHED, Mode.DISK)
    cpus: tuple[int | None, ...] = (None,)
    cache: tuple[str, ...] = ("none",)
    storage_bw: tuple[str, ...] = ("none",)
    combos: tuple[tuple[int | None, str, str], ...] = ()  # explicit list overrides the product
    resume: bool = False
    use_cgroups: bool = True
    # pages per-file eviction leaves before a disk run dropped machine-wide (every process's)
    drop_caches_globally: bool = False
    plots: bool = True
    repeats: int = 1  # every run this many times, interleaved: all modes, then again
    target_ci_pct: float | None = None  # or repeat until each stall is within ± this many points
    max_repeats: int = 5  # the bound on --target-ci's repeats
    # runs of a cached configuration whose step on the CPU shares its cores with the workers
    # (`analysis.jobrun.shares_cores`): its rate varies from run to run more than the model errs
    shared_core_runs: int = 3
    # a run that ended with the machine itself slowed (`resources/hostspeed.py`'s probe over
    # `SETTINGS.host_slow_pct`) is measured again, up to this many times, once the machine is
    # back; 0: the probe's readings are recorded and nothing waits or measures again
    host_retries: int = 2
    # Data across a network: `serve` ("s3", "http") serves --data from a server behind a
    # shaped link, and disk runs become remote runs at each `net_bw` x `net_latency`;
    # `endpoint` names the data's own endpoint (s3://bucket/prefix, http://...), checked
    # and probed before the runs (`probe_budget` bytes per concurrency level).
    serve: str | None = None
    net_bw: tuple[str, ...] = ("none",)
    net_latency: tuple[str, ...] = ("0",)
    endpoint: str | None = None
    probe_budget: str = "8M"
    # a streaming library's local cache of the served data (None: the script's --local
    # value, if any): filled before cached runs, emptied before remote ones
    local_cache: str | None = None
    adaptive: bool = False  # measure only the runs that change the recommendation (adaptive.py)
    budget_s: float | None = None  # --adaptive: stop before the runs' durations pass this

    def __post_init__(self) -> None:
        if self.serve is not None and self.serve not in BACKENDS:
            raise ConfigError(f"unknown --serve {self.serve!r}: use one of {', '.join(BACKENDS)}")
        if self.serve is not None and self.job.data_dir is None:
            raise ConfigError("--serve needs --data DIR: the directory to serve")
        if self.local_cache is not None and self.serve is None:
            raise ConfigError("--local-cache is filled from served data: add --serve s3|http")
        if self.repeats < 1 or self.max_repeats < 1 or self.shared_core_runs < 1:
            raise ConfigError("--repeats, --max-repeats and --shared-core-runs must be at least 1")
        if self.host_retries < 0:
            raise ConfigError(f"--host-retries must be 0 or more, got {self.host_retries}")
        if self.budget_s is not None and not self.adaptive:
            raise ConfigError("--budget bounds an adaptive sweep: add --adaptive")
        if self.target_ci_pct is not None and self.target_ci_pct <= 0:
            raise ConfigError(f"--target-ci must be positive, got {self.target_ci_pct:g}%")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sweep:
        """A sweep from its settings laid out as a config file's tables: `job` (the fields
        of `Job`) and `sweep` (`SWEEP_KEYS`); lists, or comma-separated text as on the
        command line."""
        try:
            job = Job(**dict(data.get("job", {})))
        except TypeError as e:
            raise ConfigError(f"bad job settings: {e}") from None
        sw = dict(data.get("sweep", {}))
        unknown = sorted(set(sw) - set(SWEEP_KEYS))
        if unknown:
            raise ConfigError(f"unknown [sweep] setting(s) {', '.join(unknown)}: use "
                              + ", ".join(SWEEP_KEYS))
        kwargs: dict[str, Any] = {"job": job}
        if "prefix" in sw:
            kwargs["prefix"] = str(sw["prefix"])
        if "modes" in sw:
            kwargs["modes"] = tuple(Mode.parse(m) for m in split_list(sw["modes"]))
        if "cpus" in sw:
            kwargs["cpus"] = parse_cpus_list(",".join(split_list(sw["cpus"])))
        for key in ("cache", "storage_bw", "net_bw", "net_latency"):
            if key in sw:
                kwargs[key] = split_list(sw[key])
        for key in ("serve", "endpoint", "probe_budget", "local_cache"):
            if sw.get(key) is not None:
                kwargs[key] = str(sw[key])
        if "combos" in sw:
            kwargs["combos"] = tuple((c.get("cpus"), str(c.get("cache", "none")),
                                      str(c.get("storage_bw", "none"))) for c in sw["combos"])
        if "budget" in sw:
            kwargs["budget_s"] = parse_duration(sw["budget"])
        for key in ("resume", "use_cgroups", "plots", "drop_caches_globally", "adaptive"):
            if key in sw:
                kwargs[key] = bool(sw[key])
        for key in ("repeats", "max_repeats", "shared_core_runs", "host_retries"):
            if key in sw:
                kwargs[key] = int(sw[key])
        if "target_ci" in sw:
            kwargs["target_ci_pct"] = parse_target_ci(sw["target_ci"])
        return cls(**kwargs)

    def resource_grid(self, dataset_bytes: int) -> list[Resources]:
        """Every resource configuration: `combos` if given, else the cross product."""
        triples = self.combos or tuple(itertools.product(self.cpus, self.cache, self.storage_bw))
        grid = []
        for cpus, cache, bw in triples:
            if cpus is not None and int(cpus) < 1:
                raise ConfigError(f"--cpus values must be at least 1, got {cpus}")
            local = Resources(None if cpus is None else int(cpus),
                              CacheBudget.parse(cache, dataset_bytes), parse_bandwidth(bw))
            for res in self._links(local):
                if res not in grid:
                    grid.append(res)
        return grid

    def _links(self, local: Resources) -> list[Resources]:
        """`local` at every link of `net_bw` x `net_latency` when the data is served."""
        if self.serve is None:
            return [local]
        return [dataclasses.replace(local, net_bw_bps=parse_bandwidth(bw, "network bandwidth"),
                                    net_latency_s=parse_duration_s(lat))
                for bw, lat in itertools.product(self.net_bw, self.net_latency)]

    def run_specs(self, dataset_bytes: int) -> list[RunSpec]:
        """The runs to do, in order, each once (shared runs are not repeated)."""
        specs: dict[str, RunSpec] = {}
        for res in self.resource_grid(dataset_bytes):
            for mode in self.modes:
                spec = RunSpec(self.job, mode, Resources(res.cpus) if mode.cache_independent else res)
                specs.setdefault(spec.run_id, spec)
        return list(specs.values())


def parse_target_ci(text: str | float) -> float:
    """`5%` or `5` -> 5.0: the half-width, in points of the epoch, each stall's interval must reach."""
    return parse_percent(text, "--target-ci")


def parse_duration(text: str | float) -> float:
    """`10m`, `90s`, `1h`, `600` -> seconds."""
    match = re.match(r"^\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*$", str(text).lower())
    if not match or float(match.group(1)) <= 0:
        raise ConfigError(f"cannot read --budget {text!r}: write a duration such as 10m, 90s or 1h")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


def parse_percent(text: str | float, what: str = "--until-ci") -> float:
    """`2%` or `2` -> 2.0."""
    try:
        return float(str(text).strip().rstrip("%"))
    except ValueError:
        raise ConfigError(f"cannot read {what} {text!r}: write a percentage such as 5%") from None


def parse_cpus_list(text: str) -> tuple[int | None, ...]:
    out: list[int | None] = []
    for part in str(text).split(","):
        part = part.strip()
        if part.lower() in ("all", "none", ""):
            out.append(None)
            continue
        try:
            out.append(int(part))
        except ValueError:
            raise ConfigError(f"cannot read --cpus {text!r}: write a list such as 1,2,4") from None
        if out[-1] < 1:
            raise ConfigError(f"--cpus values must be at least 1, got {part}")
    return tuple(out)


def split_list(value: Any) -> tuple[str, ...]:
    """A TOML list or a comma-separated string -> tuple of strings."""
    if isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value)
    return tuple(p.strip() for p in str(value).split(",") if p.strip())


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a config file: `[job]` keys are Job fields, `[sweep]` keys Sweep fields."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {path} not found: give the path of a .toml file")
    try:
        with p.open("rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"cannot parse {path}: {e}") from None
    unknown = set(data) - {"job", "sweep"}
    if unknown:
        raise ConfigError(f"{path}: unknown section(s) {sorted(unknown)}: use [job] and [sweep]")
    job_fields = {f.name for f in dataclasses.fields(Job)}
    bad = set(data.get("job", {})) - job_fields
    if bad:
        raise ConfigError(f"{path}: unknown [job] key(s) {sorted(bad)}")
    bad = set(data.get("sweep", {})) - set(SWEEP_KEYS)
    if bad:
        raise ConfigError(f"{path}: unknown [sweep] key(s) {sorted(bad)}")
    return data
