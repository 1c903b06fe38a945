"""The answer at the end of every run: `whatif/advice.py` and its words in `report/advice.py`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import harness

from dsanalyze import store
from dsanalyze.analysis.summary import summarize
from dsanalyze.dataset import scan_dataset
from dsanalyze.report.advice import advice_text
from dsanalyze.whatif.advice import Advice, AdviceKind, Option, advise, measured_options

DATA = Path(__file__).parent / "data"
MIB = 1 << 20

BASE = Option(cpus=1, cache_spec="none", cache_bytes=None, storage_read_bps=8 * MIB, workers=2,
              rate_sps=80.0, span_s=6.0, stall_pct=70.0)
FASTER = Option(cpus=4, cache_spec="none", cache_bytes=None, storage_read_bps=None, workers=2,
                rate_sps=370.0, span_s=1.5, stall_pct=3.2)


@pytest.mark.parametrize("advice,text", [
    (Advice(AdviceKind.NO_CHANGE, 2, BASE, BASE),
     "Advice: no change needed: cpus=1 cache=unlimited bw=8M/s stalls 70% of 2 epochs, first "
     "epoch included; the job is compute-bound there."),
    (Advice(AdviceKind.CHANGE, 2, BASE, FASTER, fitted_runs=6, validation_error_pct=4.14),
     "Advice: give the job 4 CPUs (1 measured), storage at this machine's disk, unthrottled "
     "(8M/s measured): predicted 2 epochs in 1.50 s, 3% stalled, first epoch included (370.0 "
     "samples/s steady), against 6.00 s measured at cpus=1 cache=unlimited bw=8M/s (70% "
     "stalled). From the what-if model fitted on the 6 runs of this sweep; its median error on "
     "held-out runs: 4.1%."),
    (Advice(AdviceKind.KEEP, 1, BASE, None, fitted_runs=3, validation_note="nothing left",
            note="fetch stall dominates"),
     "Advice: keep cpus=1 cache=unlimited bw=8M/s: no configuration of the what-if grid is "
     "predicted faster than its measured 1 epoch (cold) in 6.00 s (70% stalled) (fetch stall "
     "dominates). From the what-if model fitted on the 3 runs of this sweep; not validated "
     "(nothing left)."),
    (Advice(AdviceKind.NO_MODEL, 2, BASE, note="no completed runs"),
     "Advice: none: the what-if model could not be fitted on these runs (no completed runs)."),
])
def test_advice_in_words(advice, text):
    assert advice_text(advice) == text


def test_measured_configurations_count_the_cold_epoch():
    """Two epochs of the committed 2-rank run: its cold first epoch plus one steady epoch."""
    summary = summarize(store.load_runs(DATA / "report_2ranks"))
    (cfg,) = summary.configs
    (o,) = measured_options(summary.to_dict(), 2)
    disk = cfg.modes["disk"]
    assert o.span_s == pytest.approx(disk.epoch1_s + disk.time_s)
    assert o.stall_pct == pytest.approx(100 * (1 - 2 * cfg.compute_s / o.span_s))
    assert o.stall_pct > cfg.prep_stall_pct + cfg.fetch_stall_pct  # the cold epoch counts


def sweep(prefix: Path, data: Path, *options: object) -> int:
    return harness("--data", data, "--prefix", prefix, "--modes", "synthetic,cached",
                   "--iters", 6, "--warmup", 2, "--no-plots", *options)


@pytest.mark.slow
def test_prep_bound_sweep_ends_with_a_change_predicted_faster_than_every_measured_one(
        small_dataset, tmp_path, capsys):
    prefix = tmp_path / "prep"
    # one CPU, 16 JPEGs per 5 ms step: decoding cannot keep up
    assert sweep(prefix, small_dataset, "--cpus", 1, "-b", 16, "-j", 2, "--sim-step-ms", 5) == 0
    out = capsys.readouterr().out.splitlines()
    (line,) = [s for s in out if s.startswith("Advice: ")]
    assert out.index(line) > max(i for i, s in enumerate(out) if s.startswith("cpus=1 "))
    runs = store.load_runs(prefix)
    advice = advise(runs, list(scan_dataset(small_dataset).file_bytes))  # as the harness
    assert advice.kind is AdviceKind.CHANGE and line.startswith("Advice: give the job ")
    measured = measured_options(summarize(runs).to_dict(), advice.epochs)
    assert advice.choice.span_s < min(o.span_s for o in measured)
    # the printed claim: a predicted time under the measured one, at the one CPU asked for
    claim = re.search(r": predicted \d+ epochs? (?:\(cold\) )?in ([\d.]+) s, .* against "
                      r"([\d.]+) s measured at cpus=1\b", line)
    assert claim is not None, line
    predicted_s, measured_s = float(claim.group(1)), float(claim.group(2))
    assert predicted_s < measured_s
    assert measured_s == pytest.approx(min(o.span_s for o in measured), abs=0.006)
    # more of what the prep stall lacks: CPUs or workers, nothing taken away
    assert advice.choice.cpus > 1 or advice.choice.workers > 2
    assert "fitted on the 2 runs of this sweep" in line


@pytest.mark.slow
def test_compute_bound_sweep_needs_no_change_and_no_advice_turns_it_off(
        small_dataset, tmp_path, capsys):
    # two samples per 300 ms step: the loader keeps up easily, even on a loaded machine
    options = ("-b", 2, "-j", 2, "--sim-step-ms", 300)
    assert sweep(tmp_path / "compute", small_dataset, *options) == 0
    out = capsys.readouterr().out
    assert "Advice: no change needed: cpus=all " in out
    assert "the job is compute-bound there." in out
    assert sweep(tmp_path / "compute", small_dataset, *options, "--resume", "--no-advice") == 0
    assert "Advice" not in capsys.readouterr().out
