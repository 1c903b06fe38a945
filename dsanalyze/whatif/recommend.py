"""The recommendation: the cheapest change that keeps a job's stalls under a limit.

    rec = recommend(model, preds, results, max_stall_pct=5, epochs=E)

1. Free software knobs are searched on the measured hardware: DataLoader
   workers per rank (DALI threads with `--loader dali`), at 1, 2, 4, 8, 16 and
   the grid's values, beside every combination of the grid.
2. The cheapest of those that bring the stalls under the limit wins: fewest
   CPUs, then least page cache, then least storage bandwidth; on the measured
   hardware the measured worker count first, then the fewest workers. So a
   worker count on the CPUs you have beats asking for more CPUs.
3. Else the least stalled; predictions within `tolerance` of the fastest are
   ties, broken by the same cost (never by float noise).

`rank` is that ranking alone; the advice at the end of a run
(`whatif/advice.py`) is its other mode: the same ranking over the
predictions that add resources to the fastest measured configuration.

Stalls are those of a job of `epochs` epochs: the cold first epoch, then
steady ones (`Prediction.job_stall_pct`). The speed-up compares predictions
with predictions: the measured configuration (the baseline run) is predicted
the same way; its measured rate is reported beside.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dsanalyze.analysis import stalls
from dsanalyze.config import Mode, format_bytes, unlimited_last
from dsanalyze.errors import ConfigError
from dsanalyze.records import RunResult
from dsanalyze.whatif.api import Prediction, predict
from dsanalyze.whatif.calibrate import base_runs
from dsanalyze.whatif.model import Config, HeldOut, Model, run_config, run_cpus

TOLERANCE = 0.02  # job times closer than this (relative) are ties, broken by cost
WORKER_CHOICES = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class Recommendation:
    """What to change, with its predicted rate (and interval) and the baseline's prediction."""

    max_stall_pct: float
    epochs: int
    chosen: Prediction | None  # the cheapest under the limit (None: none qualifies)
    closest: Prediction  # the least stalled, when none qualifies (else the chosen one)
    software: bool  # the answer changes only free knobs (workers / DALI threads)
    baseline: Prediction | None  # the measured configuration, predicted the same way
    baseline_run: str | None
    baseline_sps: float | None  # measured
    speedup: float | None  # baseline's predicted job time / the pick's
    hint: str = ""  # why the stall stays, when nothing qualifies
    reason: str = ""  # the answer in one sentence

    @property
    def pick(self) -> Prediction:
        return self.chosen or self.closest


def cost(p: Prediction) -> tuple:
    """Fewest CPUs, least cache, least bandwidth (the device last), fewest workers."""
    c = p.config
    return (c.cpus, unlimited_last(c.cache_bytes), unlimited_last(c.storage_read_bps),
            c.workers or 0)


def rank(preds: Sequence[Prediction], max_stall_pct: float, epochs: int,
         tolerance: float = TOLERANCE, key: Callable[[Prediction], Any] = cost
         ) -> tuple[Prediction | None, Prediction | None]:
    """(the cheapest by `key` whose stalls stay under the limit, or None; the cheapest of
    those within `tolerance` of the shortest job): the one ranking of the recommendation
    and of the advice."""
    if not preds:
        return None, None
    ok = [p for p in preds if p.job_stall_pct(epochs) <= max_stall_pct]
    chosen = min(ok, key=key) if ok else None
    return chosen, chosen or _fastest(preds, epochs, tolerance)


def baseline_run(results: Sequence[RunResult]) -> RunResult | None:
    """The measured configuration: the base job's disk run with the most of everything
    (else its cached run)."""
    ok = [r for r in results if r.ok and r.ranks]
    if not ok:
        return None
    base = base_runs(ok)
    runs = [r for r in base if r.mode is Mode.DISK] or [r for r in base if r.mode is Mode.CACHED]
    if not runs:
        return None
    return max(runs, key=lambda r: (run_cpus(r),
                                    unlimited_last(r.spec.resources.cache.cache_bytes),
                                    unlimited_last(r.spec.resources.storage_read_bps)))


def _fastest(preds: Sequence[Prediction], epochs: int, tolerance: float) -> Prediction:
    """The cheapest of the predictions within `tolerance` of the shortest job."""
    best = min(p.job_s(epochs) for p in preds)
    return min((p for p in preds if p.job_s(epochs) <= best * (1 + tolerance)), key=cost)


def _software(model: Model, base: Config, preds: Sequence[Prediction]) -> list[Prediction]:
    """Worker counts on the measured hardware, in the grid's scenario (its GPU speed-up and
    ranks, when every combination shares them)."""
    counts = sorted(set(WORKER_CHOICES) | {model.workers} |
                    {p.config.workers for p in preds if p.config.workers is not None})
    speedups = {p.config.gpu_speedup for p in preds}
    ranks = {p.config.nproc for p in preds}
    if len(speedups) == 1 and len(ranks) == 1:
        base = replace(base, gpu_speedup=speedups.pop(), nproc=ranks.pop())
    return [predict(model, replace(base, workers=w)) for w in counts]


def recommend(model: Model, preds: Sequence[Prediction], results: Sequence[RunResult],
              max_stall_pct: float = 5.0, epochs: int = 1,
              tolerance: float = TOLERANCE) -> Recommendation:
    """The cheapest change keeping a job of `epochs` epochs under `max_stall_pct` stalls."""
    if not preds:
        raise ConfigError("nothing to recommend from: give --cpus and --cache values")
    if epochs < 1:
        raise ConfigError("--epochs must be 1 or more")
    run = baseline_run(results)
    base_cfg = run_config(model, HeldOut.of(run)) if run is not None else preds[0].config
    if run is not None and run.mode is not Mode.DISK:
        base_cfg = base_cfg.with_cache()
    baseline = predict(model, base_cfg)
    soft = _software(model, base_cfg, preds)
    # on equal hardware the measured worker count first (no change), then the fewest
    key = lambda p: (cost(p)[:3], p.config.workers != baseline.config.workers,  # noqa: E731
                     p.config.workers)
    chosen, closest = rank([*soft, *preds], max_stall_pct, epochs, tolerance, key)
    assert closest is not None
    software = cost(closest)[:3] == cost(baseline)[:3]
    measured = stalls.run_rate(run).rate_sps if run is not None else None
    speedup = baseline.job_s(epochs) / closest.job_s(epochs)
    rec = Recommendation(max_stall_pct, epochs, chosen, closest, software, baseline,
                         run.run_id if run is not None else None, measured, speedup,
                         "" if chosen else _hint(closest, preds, model))
    return replace(rec, reason=reason_text(rec))


def _hint(p: Prediction, preds: Sequence[Prediction], model: Model) -> str:
    if p.fetch_stall_s > p.prep_stall_s:
        return "fetch stall dominates: give more --cache or --storage-bw values"
    if p.config.cpus >= p.nproc * max(1, p.config.workers or 0):
        total = p.nproc * max(1, p.config.workers or 0)
        return (f"the prep stall left does not shrink with more CPUs: "
                f"{workers_text(p.config.workers, model.loader)} per rank ({total} in all) use "
                f"at most {total} core(s), and each epoch starts with an empty prefetch queue")
    return "prep stall dominates: give more --cpus values"


def worker_word(loader: str) -> str:
    return "DALI threads" if loader == "dali" else "DataLoader workers"


def workers_text(n: int | None, loader: str) -> str:
    word = worker_word(loader)
    return f"{n} {word[:-1] if n == 1 else word}"


def config_text(c: Config, loader: str) -> str:
    cache = "unlimited" if c.cache_bytes is None else format_bytes(c.cache_bytes)
    bw = "the measured device" if c.storage_read_bps is None else \
        f"{format_bytes(c.storage_read_bps)}/s"
    return (f"{c.cpus} CPU{'s' if c.cpus > 1 else ''}, page cache {cache}, storage {bw}, "
            f"{workers_text(c.workers, loader)} per rank")


def reason_text(rec: Recommendation) -> str:
    """The answer in one sentence, every number the recommendation's."""
    p, b = rec.pick, rec.baseline
    job = f"a job of {rec.epochs} epoch{'s' if rec.epochs > 1 else ''} (the first cold)"
    rate = (f"{p.rate_sps:.0f} ± {(p.rate_sps_high - p.rate_sps_low) / 2:.0f} samples/s, "
            f"stalls {p.job_stall_pct(rec.epochs):.1f}% of {job}")
    if rec.chosen is not None and b is not None and p.config == b.config:
        text = (f"the measured configuration already keeps the stalls under "
                f"{rec.max_stall_pct:g}%: {rate}")
    elif rec.chosen is not None and rec.software and b is not None:
        text = (f"{workers_text(p.config.workers, p.loader)} instead of {b.config.workers} "
                f"keep the stalls under "
                f"{rec.max_stall_pct:g}% on the hardware you have: {rate}")
    elif rec.chosen is not None:
        text = (f"{config_text(p.config, p.loader)} is the cheapest change that keeps the stalls "
                f"under {rec.max_stall_pct:g}%: {rate}")
    else:
        text = (f"nothing tried keeps the stalls under {rec.max_stall_pct:g}%; the least stalled "
                f"is {config_text(p.config, p.loader)}: {rate}; {rec.hint}")
    if b is not None and rec.speedup is not None:
        measured = f", measured {rec.baseline_sps:.1f}" if rec.baseline_sps else ""
        text += (f"; {rec.speedup:.2f}x the measured configuration {rec.baseline_run}, both "
                 f"predicted ({b.rate_sps:.1f} samples/s predicted{measured})")
    return text
