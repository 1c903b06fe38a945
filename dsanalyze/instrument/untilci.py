"""`--until-ci P%`: a run stops once its steady rate is known within ±P%.

Rank 0 decides at every iteration boundary, from its own iteration times
(ranks advance together through DDP's all-reduce); every rank stops at the
same iteration (`RankStop`). The rule, over rank 0's window:

- **window**: the iterations after the warm-up; in disk mode, only those of
  the second epoch on, so that the cold first epoch is measured whole (the
  disk figures report it on its own, `analysis/coldepoch.py`): a disk run
  that never reaches its second epoch runs to its maximum. In the other modes,
  when the training loader's epoch is at most `SETTINGS.epoch_seen_max_iters` batches,
  the run may not stop before its second epoch has begun: the boundary's
  stall (workers restarted, their first batches) is in the window at least
  once, where a window ending before it would count none. A longer epoch's
  boundary costs a smaller share of the epoch and is not waited for.
- **at least `min_iters`** iterations in the window.
- **periods**: a stall is an iteration longer than `SETTINGS.stall_factor` x the
  window's median. The longest gap between two consecutive stalls (with a
  single stall, its distance from the window's start: the period is at least
  that) is the period of the slowest recurring stall seen: a stall every K
  batches, an epoch boundary, a periodic checkpoint.
- **batch means**: blocks of m = max(the block bootstrap's block length
  (`blockstats.block_length`, the rule the run's reported interval uses),
  the period + 1; where an epoch's first iteration in the window is a stall,
  the loader's epoch is a period too: `boundary_period`) consecutive iterations; the last k = n // m of the window,
  k at least `SETTINGS.min_blocks`: the window spans several periods of any stall
  seen, so a stall that has not yet recurred cannot end the run.
- **interval**: per block, seconds per sample; the 95% half-width t_{k-1}
  s / sqrt(k) relative to their mean (t/z as `blockstats.small_sample_factor`).
- **drift**: the rate of the window's last third (its last ceil(k/3) blocks,
  at least 2) must agree with the whole window's within P%. A rate still
  moving (a slow start averaged in, a page cache filling, a device warming)
  can give batch means a narrow interval while the window's rate is not yet
  the one the job runs at; the run goes on until the start's share is under
  P% (or to its maximum).
- The run stops once the interval is at most P% and no drift is seen. The
  run's reported interval is still the circular block bootstrap's, computed
  later over the same window.

Pure (numpy, no torch): `estimate` takes the series and returns a value.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dsanalyze.blockstats import DEFAULT_LEVEL, block_length, small_sample_factor
from dsanalyze.settings import SETTINGS

STOP_FILE = "stop-at.json"
Z95 = 1.959964


@dataclass(frozen=True)
class Estimate:
    """The rule's reading of a window: its rate, the interval's half-width, and why."""

    iters: int  # in the window
    rate_sps: float
    half_width_pct: float  # 95%, relative to the rate; inf while too few blocks
    block: int  # iterations per batch-means block
    blocks: int
    period: int  # longest gap between recurring stalls seen (0: none)
    stop: bool
    drift: bool = False  # the blocks' rate has a significant trend

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["half_width_pct"] = None if math.isinf(self.half_width_pct) else self.half_width_pct
        return d


CUT_BAND = 0.8  # iterations between this share of the stall cut and the cut: just under it


def stall_period(iter_s: np.ndarray) -> int:
    """The longest gap, in iterations, between consecutive stalls (iterations over
    SETTINGS.stall_factor x the median); one stall: its index (the period is at least that);
    0: none. Where as many iterations lie just under the cut (within `CUT_BAND` of it) as over
    it, the cut runs through one population (a slower step every K batches, just under the cut,
    its noise crossing it at random places), and the gaps between its crossings are no period:
    0, the block length alone sizes the blocks."""
    cut = SETTINGS.stall_factor * float(np.median(iter_s))
    stalls = np.flatnonzero(iter_s > cut)
    if len(stalls) == 0 or np.count_nonzero((iter_s > CUT_BAND * cut) & (iter_s <= cut)) \
            >= len(stalls) > 1:
        return 0
    if len(stalls) == 1:
        return int(stalls[0]) + 1
    return int(np.diff(stalls).max())


def estimate(iter_s: Any, samples: Any, target_pct: float, min_iters: int,
             epoch_period: int = 0) -> Estimate:
    """The batch-means interval of the window's rate (samples / second) and whether it is
    within ±`target_pct`% (see the module's docstring); `epoch_period`: the loader's epoch
    in batches where its boundary is a stall (`boundary_period`), a period as any other."""
    x, s = np.asarray(iter_s, dtype=float), np.asarray(samples, dtype=float)
    n = len(x)
    rate = float(s.sum() / x.sum()) if n and x.sum() > 0 else 0.0
    if n < max(min_iters, SETTINGS.min_blocks, 4):
        return Estimate(n, rate, math.inf, 0, 0, 0, False)
    period = max(stall_period(x), epoch_period)
    m = max(block_length(x), period + 1 if period else 1)
    k = n // m
    if k < SETTINGS.min_blocks:
        return Estimate(n, rate, math.inf, m, k, period, False)
    tail_x, tail_s = x[n - k * m:].reshape(k, m), s[n - k * m:].reshape(k, m)
    per_sample = tail_x.sum(axis=1) / tail_s.sum(axis=1)
    t = Z95 * small_sample_factor(k, DEFAULT_LEVEL)
    half = 100 * t * float(per_sample.std(ddof=1)) / math.sqrt(k) / float(per_sample.mean())
    late = max(2, math.ceil(k / 3))  # blocks: the window's last third
    late_rate = float(tail_s[-late:].sum() / tail_x[-late:].sum())
    drift = abs(late_rate / rate - 1) * 100 > target_pct
    return Estimate(n, rate, half, m, k, period, half <= target_pct and not drift, drift)


def boundary_period(iter_s: Any, epoch: Any, epoch_batches: int | None) -> int:
    """The loader's epoch (`epoch_batches`) when an epoch's first iteration in the window is a
    stall (over SETTINGS.stall_factor x the median: workers restarted, their first batches),
    else 0. Its period is known before it recurs, and a checkpoint's shorter stalls between
    two boundaries would otherwise size the blocks alone."""
    x, e = np.asarray(iter_s, dtype=float), np.asarray(epoch)
    if not epoch_batches or len(x) < 2:
        return 0
    firsts = np.flatnonzero(np.diff(e)) + 1
    stalled = x[firsts] > SETTINGS.stall_factor * float(np.median(x))
    return int(epoch_batches) if stalled.any() else 0


def window_start(epoch: list[int], warmup: int, mode: str) -> int | None:
    """Index of the window's first iteration; None while a disk run is in its first epoch."""
    if mode != "disk":
        return warmup
    for i in range(warmup, len(epoch)):
        if epoch[i] >= 1:
            return i
    return None


class RankStop:
    """The stopper of one rank (`IterationRecorder.stopper`): rank 0 applies the rule; with
    several ranks it writes the iteration to stop at (`SETTINGS.lead_iters` ahead) to the run's
    directory, and every rank stops there."""

    def __init__(self, target_pct: float, min_iters: int, mode: str, rank: int,
                 world_size: int, run_dir: Path | None) -> None:
        self.target_pct, self.min_iters, self.mode = target_pct, min_iters, mode
        self.rank, self.world_size = rank, world_size
        self.path = run_dir / STOP_FILE if run_dir is not None and world_size > 1 else None
        self.stop_at: int | None = None
        self.last: Estimate | None = None  # rank 0's latest reading
        self.epoch_batches: int | None = None  # the training loader's len(), once known

    def __call__(self, rec: Any) -> bool:
        done = len(rec.iter_s)
        if self.stop_at is None:
            if self.rank == 0:
                self._decide(rec)
            elif self.path is not None and self.path.exists():
                self.stop_at = int(json.loads(self.path.read_text())["iteration"])
        return self.stop_at is not None and done >= self.stop_at

    def _decide(self, rec: Any) -> None:
        start = window_start(rec.epoch, rec.warmup, self.mode)
        if start is None or self._before_first_boundary(rec.epoch):
            return
        n = len(rec.iter_s) - start
        if n < self.min_iters or n % max(1, n // 50):
            return  # past 50 iterations, read the window every n/50 iterations
        before = max(0, start - 1)  # a boundary at the window's first iteration is one too
        boundary = boundary_period(rec.iter_s[before:], rec.epoch[before:], self.epoch_batches)
        self.last = estimate(rec.iter_s[start:], rec.samples[start:], self.target_pct,
                             self.min_iters, boundary)
        if not self.last.stop:
            return
        self.stop_at = len(rec.iter_s) + (SETTINGS.lead_iters if self.path is not None else 0)
        if self.path is not None:
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"iteration": self.stop_at}))
            os.replace(tmp, self.path)

    def _before_first_boundary(self, epoch: list[int]) -> bool:
        """A short epoch not yet ended: its boundary's stall is not in the window yet."""
        short = self.epoch_batches is not None and self.epoch_batches <= SETTINGS.epoch_seen_max_iters
        return short and bool(epoch) and epoch[-1] < 1

    def record(self) -> dict[str, Any]:
        """What the rank's record says (`extra["until_ci"]`)."""
        return {"target_pct": self.target_pct, "min_iters": self.min_iters,
                "stopped_at": self.stop_at,
                "estimate": self.last.to_dict() if self.last is not None else None}
