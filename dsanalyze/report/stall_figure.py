"""The stall-breakdown figure: per configuration, an epoch's compute, prep stall and fetch stall,
each with the interval the table prints.

A bar stands at the table's epoch time (`total_s`: N / the disk rate, else
the cached one) and is split at the compute time (N / the synthetic rate) and
the cached epoch; a stall whose interval holds 0 (`within_noise`) is hatched
and labelled "noise", one below 0 (`inverted`: the slower mode measured
faster) has no segment and is labelled "inverted". Error bars: the compute
time and the epoch time from their runs' rate intervals, each stall's
interval in seconds from where its segment starts. A disk run's cold first
epoch is a black tick; each bar's label sits above the highest of all these,
so nothing strikes through it.

Every read of the summary (`analysis.summary.Summary`) is in `bar_of`: the figure draws
`Bar`s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from dsanalyze.analysis.stalls import ModeRate  # noqa: E402
from dsanalyze.analysis.summary import ConfigSummary, Summary  # noqa: E402
from dsanalyze.config import Mode, unlimited_last  # noqa: E402
from dsanalyze.report.text import config_label, knob_text  # noqa: E402

# Okabe-Ito colours: distinguishable with the common colour-vision deficiencies.
COMPUTE_COLOR, PREP_COLOR, FETCH_COLOR = "#999999", "#E69F00", "#0072B2"
COLORS = {"compute": COMPUTE_COLOR, "prep stall": PREP_COLOR, "fetch stall": FETCH_COLOR}
NOISE_HATCH = "////"
INTERVAL_COLOR = "black"
MAX_WIDTH_IN = 12.8  # 1920 px at the saved 150 dpi: a screen's width
# x offsets inside a bar (width 0.62) of the four error bars: compute, prep, fetch, epoch
OFFSETS = {"compute": -0.21, "prep stall": -0.07, "fetch stall": 0.07, "epoch": 0.21}


@dataclass(frozen=True)
class Stall:
    """A stall as the table prints it: seconds, share, interval, significance."""

    s: float
    pct: float
    s_low: float | None
    s_high: float | None
    half_pct: float | None  # half the interval's width, in points of the epoch
    significance: str | None  # a `Significance` value; None: no interval stored

    def label(self, kind: str) -> str:
        if self.significance == "within_noise":
            return f"{kind} noise ±{self.half_pct:.0f}%"
        if self.significance in ("inverted", "suspect"):  # the notes say why
            return f"{kind} {self.significance}"
        if self.significance == "unread":  # its window ran from the page cache: the notes say
            return f"{kind} 0"
        spread = f" ±{self.half_pct:.0f}" if self.half_pct is not None else ""
        return f"{kind} {self.pct:.0f}%{spread}"


class Heights(NamedTuple):
    """A bar's segments (s), bottom to top, in the order of COLORS."""

    compute: float
    prep: float
    fetch: float

    def starts(self) -> dict[str, float]:
        """Where each stall's segment starts."""
        return {"prep stall": self.compute, "fetch stall": self.compute + self.prep}


@dataclass(frozen=True)
class Bar:
    """One configuration's bar, read from the summary (`bar_of`)."""

    cfg: ConfigSummary  # the summary's configuration: its knobs, for the tick label
    compute_s: float | None
    compute_interval: tuple[float, float] | None
    prep: Stall | None
    fetch: Stall | None
    epoch_s: float | None  # the table's "epoch s"
    epoch_interval: tuple[float, float] | None
    epoch1_s: float | None  # a disk run's cold first epoch
    level: float = 0.95  # the intervals' confidence level

    def heights(self) -> Heights:
        """Segment heights that stack to the epoch time: compute, then each stall cut to what
        is left (an inverted stall is stored as 0; the other segments still end at the epoch)."""
        total = self.epoch_s or 0.0
        compute = min(self.compute_s or 0.0, total)
        prep = min(self.prep.s if self.prep else 0.0, total - compute)
        fetch = total - compute - prep if self.fetch else 0.0
        return Heights(compute, prep, fetch)

    def label(self) -> str:
        parts = [s.label(k) for k, s in (("prep", self.prep), ("fetch", self.fetch)) if s]
        return "\n".join(parts) or "no stall data"

    def top(self) -> float:
        """The highest thing drawn in this bar's column: where its label goes."""
        ends = [self.epoch_s or 0.0, self.epoch1_s or 0.0,
                *(i[1] for i in (self.compute_interval, self.epoch_interval) if i)]
        base = self.heights().starts()
        ends += [base[k] + s.s_high for k, s in (("prep stall", self.prep),
                                                 ("fetch stall", self.fetch))
                 if s is not None and s.s_high is not None]
        return max(ends)


def _time_interval(n: int | None, mode: ModeRate | None) -> tuple[float, float] | None:
    """An epoch's time interval (s) from a mode's rate interval: N / high, N / low."""
    lo, hi = (mode.rate_sps_low, mode.rate_sps_high) if mode else (None, None)
    return (n / hi, n / lo) if n and lo and hi else None


def _stall_of(cfg: ConfigSummary, kind: str) -> Stall | None:
    s, pct = getattr(cfg, f"{kind}_stall_s"), getattr(cfg, f"{kind}_stall_pct")
    if s is None:
        return None
    lo, hi = getattr(cfg, f"{kind}_stall_pct_low"), getattr(cfg, f"{kind}_stall_pct_high")
    return Stall(s, pct, getattr(cfg, f"{kind}_stall_s_low"), getattr(cfg, f"{kind}_stall_s_high"),
                 (hi - lo) / 2 if lo is not None and hi is not None else None,
                 getattr(cfg, f"{kind}_stall_significance"))


def bar_of(cfg: ConfigSummary) -> Bar:
    """A configuration of the summary as a bar: the figure's only reads of the summary."""
    modes, n = cfg.modes, cfg.samples_per_epoch
    disk = modes.get(Mode.DISK.value)
    anchor = disk or modes.get(Mode.CACHED.value)
    return Bar(cfg, cfg.compute_s, _time_interval(n, modes.get(Mode.SYNTHETIC.value)),
               _stall_of(cfg, "prep"), _stall_of(cfg, "fetch"), cfg.total_s,
               _time_interval(n, anchor), disk.epoch1_s if disk else None, cfg.level)


_KNOBS: dict[str, Callable[[ConfigSummary], Any]] = {
    "cpus": lambda c: c.cpus,
    "cache": lambda c: c.cache_bytes,
    "bw": lambda c: c.storage_read_bps,
    "net_bw": lambda c: c.net_bw_bps,
    "net_latency": lambda c: c.net_latency_s,
}


def ordered_configs(configs: Sequence[ConfigSummary]) -> tuple[list[ConfigSummary], list[str]]:
    """Configurations so that a trend shows, and the knobs that vary among them.

    The knob with the most distinct values varies fastest; each knob runs
    from the least resource to the most (unlimited last), so within a group
    the stall should shrink from left to right.
    """
    distinct = {k: len({f(c) for c in configs}) for k, f in _KNOBS.items()}
    varying = sorted((k for k, n in distinct.items() if n > 1), key=lambda k: distinct[k])
    ordered = sorted(configs, key=lambda c: tuple(unlimited_last(_KNOBS[k](c)) for k in varying))
    return ordered, varying


def stall_breakdown(summary: Summary) -> Figure:
    """Stacked bars per configuration: compute, prep stall, fetch stall (s per epoch), with
    their intervals, each bar labelled with its stalls as the table words them."""
    configs, varying = ordered_configs(summary.configs)
    bars = [bar_of(c) for c in configs]
    width = min(MAX_WIDTH_IN, max(6.0, 1.0 * len(bars) + 2.2))
    fig = Figure(figsize=(width, 5.0), layout="constrained")
    ax = fig.subplots()
    small = len(bars) > 8  # narrower columns: smaller text, so that labels keep apart
    _draw_segments(ax, bars)
    _draw_intervals(ax, bars)
    cold = [(x, b.epoch1_s) for x, b in enumerate(bars) if b.epoch1_s is not None]
    if cold:
        ax.scatter(*zip(*cold), marker="_", s=500, linewidths=2, color="black", zorder=3,
                   label="cold 1st epoch (disk)")
    tops = [b.top() for b in bars]
    for x, (b, top) in enumerate(zip(bars, tops)):
        ax.annotate(b.label(), (x, top), xytext=(0, 4), textcoords="offset points",
                    ha="center", va="bottom", fontsize=7 if small else 8.5, gid="stall label")
    ax.set_ylim(0, max(tops, default=1.0) * 1.3 or 1.0)  # room for the two-line labels
    ax.set_xlim(-0.6, len(bars) - 0.4)
    ax.set_xticks(range(len(bars)), [_tick(b.cfg, varying) for b in bars],
                  fontsize=7 if small else 8.5)
    ax.set_ylabel("seconds per epoch")
    ax.set_title(_title(configs, varying), fontsize=11)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    fig.legend(handles=_legend(ax, bars), loc="outside lower center", ncol=2, frameon=False,
               fontsize=8.5)
    return fig


def _tick(cfg: ConfigSummary, varying: list[str]) -> str:
    """A bar's tick label: the knobs that vary, one a line (else the whole configuration)."""
    return "\n".join(knob_text(k, cfg) for k in varying) or config_label(cfg)


def _title(configs: list[ConfigSummary], varying: list[str]) -> str:
    n = configs[0].samples_per_epoch if configs else None
    fixed = [knob_text(k, configs[0]) for k in _KNOBS
             if k not in varying and configs and _applies(k, configs[0])]
    return ("Where each epoch's time goes" + (f" ({n} samples)" if n else "")
            + ("\n" + ", ".join(fixed) if fixed else ""))


def _applies(knob: str, cfg: ConfigSummary) -> bool:
    """Whether a knob describes the configuration: the link for remote data, the disk's
    throttle for local data."""
    remote = cfg.net_latency_s is not None
    return remote if knob.startswith("net") else not (remote and knob == "bw")


def _draw_segments(ax: Any, bars: list[Bar]) -> None:
    """The stacked segments; a stall within noise hatched and paler (its gid says so)."""
    bottom = [0.0] * len(bars)
    for k, name in enumerate(COLORS):  # the order of `Heights`
        heights = [b.heights()[k] for b in bars]
        drawn = ax.bar(range(len(bars)), heights, 0.62, bottom=bottom, label=name,
                       color=COLORS[name], edgecolor="white", linewidth=0.5)
        for patch, b in zip(drawn.patches, bars):
            stall = {"prep stall": b.prep, "fetch stall": b.fetch}.get(name)
            if stall is not None and stall.significance == "within_noise":
                patch.set(hatch=NOISE_HATCH, alpha=0.45, edgecolor="black", gid="within noise")
        bottom = [y + h for y, h in zip(bottom, heights)]


def _interval_points(x: int, b: Bar) -> list[tuple[str, float, float, float]]:
    """(what, y, low, high) of each error bar in a bar's column."""
    out = []
    if b.compute_interval and b.compute_s is not None:
        out.append(("compute", b.compute_s, *b.compute_interval))
    starts = b.heights().starts()
    for name, stall in (("prep stall", b.prep), ("fetch stall", b.fetch)):
        if stall is not None and stall.s_low is not None and stall.s_high is not None:
            # from where the segment starts; centred on the stall's value, which a
            # percentile interval may leave just outside it
            y0, mid = starts[name], min(max(stall.s, stall.s_low), stall.s_high)
            out.append((name, y0 + mid, y0 + stall.s_low, y0 + stall.s_high))
    if b.epoch_interval and b.epoch_s is not None:
        out.append(("epoch", b.epoch_s, *b.epoch_interval))
    return out


def _draw_intervals(ax: Any, bars: list[Bar]) -> None:
    """Error bars, each an ErrorbarContainer labelled `_<what> interval` (not in the legend)."""
    points = [(x, p) for x, b in enumerate(bars) for p in _interval_points(x, b)]
    for name, offset in OFFSETS.items():
        pts = [(x, y, lo, hi) for x, (what, y, lo, hi) in points if what == name]
        if pts:
            xs, ys, lo, hi = zip(*pts)
            ax.errorbar([x + offset for x in xs], ys,
                        yerr=[[y - a for y, a in zip(ys, lo)], [b - y for y, b in zip(ys, hi)]],
                        fmt="none", ecolor=INTERVAL_COLOR, elinewidth=0.9, capsize=2.5,
                        zorder=4, label=f"_{name} interval")


def _legend(ax: Any, bars: list[Bar]) -> list[Any]:
    # a segment's key is its plain colour: a bar container's handle would take its first
    # patch, which is hatched when that bar's stall is within noise
    handles = [Patch(facecolor=COLORS[label], label=label) if label in COLORS else h
               for h, label in zip(*ax.get_legend_handles_labels())]
    level = max((b.level for b in bars), default=0.95) * 100
    handles.append(ax.errorbar([], [], yerr=[], fmt="none", ecolor=INTERVAL_COLOR,
                               capsize=2.5, label=f"{level:.0f}% intervals: compute, prep, fetch, epoch"))
    if any(s is not None and s.significance == "within_noise" for b in bars
           for s in (b.prep, b.fetch)):
        handles.append(Patch(facecolor="white", edgecolor="black", hatch=NOISE_HATCH,
                             label="stall within noise (interval holds 0)"))
    return handles
