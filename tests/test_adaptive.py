"""The adaptive sweep: the pure choice (`whatif/nextrun.py`) and the search (`adaptive.py`).

The search is driven over a committed sweep of the demo's grid (1 and 2 CPUs x unthrottled and
8 MB/s, tests/data/report_sweep): each run it asks for is that sweep's measured run, put in
the prefix as the harness would store it. So its choices, its stop and its resume are
checked on real measurements, in seconds."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from conftest import DATA_DIR
from hypothesis import given
from hypothesis import strategies as st

from dsanalyze import adaptive, store
from dsanalyze.config import Mode, Sweep, parse_duration
from dsanalyze.errors import ConfigError
from dsanalyze.report.adaptive import decision_text, pick_text
from dsanalyze.settings import SETTINGS
from dsanalyze.whatif import nextrun
from dsanalyze.whatif.api import Prediction
from dsanalyze.whatif.model import Config
from dsanalyze.whatif.nextrun import (
    Budget,
    Candidate,
    Decision,
    Verdict,
    choose,
    faster_chance,
    stall_chance,
)
from dsanalyze.whatif.recommend import TOLERANCE

N, G = 512, 400.0  # samples per epoch; the compute bound (samples/s)


def pred(cpus: int, rate: float, rel: float, bw: int | None = None) -> Prediction:
    """A prediction of `rate` samples/s, interval rate x exp(+-rel), stalled above G."""
    k = 2.718281828 ** rel
    return Prediction(Config.of(cpus, storage_read_bps=bw, workers=2), 1, rate, N / rate, N / G,
                      N / rate - N / G, 0.0, None, None, None, G, rate / k, rate * k)


def cand(key: str, p: Prediction, measured_rel: float | None = None, runs: int = 1) -> Candidate:
    if measured_rel is None:
        return Candidate(key, p)
    k = 2.718281828 ** measured_rel
    return Candidate(key, p, p.rate_sps, p.rate_sps / k, p.rate_sps * k, runs)


def at_cached(p: Prediction, cached_rate: float) -> Prediction:
    """`p` with its cached epoch (prep and compute, every file cached) at `cached_rate`."""
    return dataclasses.replace(p, cached_s=N / cached_rate)


@dataclasses.dataclass(frozen=True)
class TC:
    name: str
    candidates: tuple
    verdict: Verdict
    next_key: str | None
    tried: frozenset = frozenset()


CASES = [
    TC("the pick unmeasured and wide: measured first",
       (cand("c1", pred(1, 200, 0.03), 0.01), cand("c2", pred(2, 300, 0.2))), Verdict.MEASURE, "c2"),
    TC("the pick measured and narrow; a cheaper rival near the limit: measured",
       (cand("c1", pred(1, 370, 0.15)), cand("c2", pred(2, 395, 0.2), 0.01)),
       Verdict.MEASURE, "c1"),
    TC("the pick measured and narrow; rivals far below: confident",
       (cand("c1", pred(1, 100, 0.05)), cand("c2", pred(2, 395, 0.2), 0.01)),
       Verdict.CONFIDENT, None),
    TC("the pick measured but wider than the target; rivals far below: run again",
       (cand("c1", pred(1, 100, 0.05)), cand("c2", pred(2, 395, 0.2), 0.2, runs=2)),
       Verdict.REPEAT, "c2"),
    TC("the pick still noisy after MAX_PICK_RUNS runs; rivals far below: settled",
       (cand("c1", pred(1, 100, 0.05)), cand("c2", pred(2, 395, 0.2), 0.2, SETTINGS.max_pick_runs)),
       Verdict.SETTLED, None),
    TC("a rival likely to change the answer is measured before the pick is run again",
       (cand("c1", pred(1, 370, 0.15)), cand("c2", pred(2, 395, 0.2), 0.2)),
       Verdict.MEASURE, "c1"),
    TC("the pick prep-bound; a rival differing only in storage cannot beat it: confident",
       (cand("c2", at_cached(pred(2, 300, 0.2), 300), 0.01),
        cand("c2-16M", at_cached(pred(2, 290, 0.2, bw=16 << 20), 300))),
       Verdict.CONFIDENT, None),
    TC("the pick fetch-stalled; the rival with other storage could beat it: measured",
       (cand("c2", at_cached(pred(2, 300, 0.2), 380), 0.01),
        cand("c2-16M", at_cached(pred(2, 290, 0.2, bw=16 << 20), 380))),
       Verdict.MEASURE, "c2-16M"),
    TC("the pick prep-bound; a rival with more CPUs may beat it: measured",
       (cand("c2", at_cached(pred(2, 300, 0.2), 300), 0.01),
        cand("c3", at_cached(pred(3, 290, 0.2), 290))),
       Verdict.MEASURE, "c3"),
    TC("the pick predicted within the target but never measured: measured before any stop",
       (cand("c1", pred(1, 100, 0.05)), cand("c2", pred(2, 395, 0.01))), Verdict.MEASURE, "c2"),
    TC("the pick stalled and measured, noisy; a rival likely faster than the tie but not "
       "beyond the pick's noise: equivalent, not measured",
       (cand("c2", at_cached(pred(2, 300, 0.2), 300), 0.2),
        cand("c3", at_cached(pred(3, 290, 0.15), 290))), Verdict.EQUIVALENT, None),
    TC("the same rival beside a pick measured within the tie: measured",
       (cand("c2", at_cached(pred(2, 300, 0.2), 300), 0.005),
        cand("c3", at_cached(pred(3, 290, 0.15), 290))), Verdict.MEASURE, "c3"),
    TC("a failed run is not tried again",
       (cand("c1", pred(1, 200, 0.03), 0.01), cand("c2", pred(2, 300, 0.2))),
       Verdict.SETTLED, None, frozenset({"c2"})),
]


@pytest.mark.parametrize("tc", CASES, ids=lambda tc: tc.name)
def test_choose(tc):
    d = choose(tc.candidates, 5.0, 1, 5.0, tc.tried)
    said = decision_text(d)
    assert (d.verdict, d.next_key) == (tc.verdict, tc.next_key), said
    assert said.startswith(f"pick {d.pick_key} (") and f"±{d.pick_half_width_pct:.1f}%; " in said
    if d.verdict is Verdict.MEASURE and d.next_key != d.pick_key:  # a rival: its chance said
        assert said.endswith(f"{d.next_key} has a {d.rival_chance:.0%} chance to "
                             + ("be cheaper under the limit" if d.under_limit else "do better")
                             + ": measuring it")
    if d.verdict is Verdict.EQUIVALENT:  # the rivals named, with the noise they lie within
        assert d.equivalent and f"equivalent to {', '.join(d.equivalent)}: " in said
        assert f"(±{d.margin_pct:.1f}%;" in said
    # adaptive.json's round trip
    assert Decision.from_dict(json.loads(json.dumps(d.to_dict()))) == d


def test_a_budget_stop_says_what_was_spent_and_what_the_next_run_would_take():
    d = choose(CASES[0].candidates, 5.0, 1, 5.0, CASES[0].tried)
    stop = dataclasses.replace(d, verdict=Verdict.BUDGET, next_key=None,
                               budget=Budget(12.4, 10.0, 5.2, "cpus2-cachenone-bwnone"))
    assert decision_text(stop) == (f"{pick_text(d)}; budget: 12 s of 10 s spent, the next run "
                                   "(cpus2-cachenone-bwnone) would take about 5 s more: stopping")
    assert Decision.from_dict(json.loads(json.dumps(stop.to_dict()))) == stop


@given(rate=st.floats(50, 399), rel=st.floats(0.005, 0.5), other=st.floats(50, 399))
def test_chances_are_probabilities_that_follow_the_rate(rate, rel, other):
    a, b = cand("a", pred(1, rate, rel)), cand("b", pred(1, other, rel))
    for x in (stall_chance(a, 5.0, 1), faster_chance(a, b, 1)):
        assert 0.0 <= x <= 1.0
    # a faster prediction is likelier under the limit; both cannot be likely faster than the other
    assert (stall_chance(a, 5.0, 1) >= stall_chance(b, 5.0, 1)) == (rate >= other) or \
        abs(stall_chance(a, 5.0, 1) - stall_chance(b, 5.0, 1)) < 1e-12
    assert faster_chance(a, b, 1) + faster_chance(b, a, 1) <= 1.0 + 1e-9


@given(pick_rel=st.floats(0.001, 0.4), rate=st.floats(150, 390), rival_rel=st.floats(0.01, 0.4),
       cpus=st.integers(1, 3))
def test_equivalent_rivals_could_beat_the_pick_only_within_its_measured_noise(
        pick_rel, rate, rival_rel, cpus):
    """Whatever the pick's measured noise and the rival's prediction: a rival named equivalent
    has the chance to beat the pick by more than the tie, and not by more than the pick's
    interval; a pick measured within the tie has no equivalents, its rivals are measured."""
    pick = cand("p", at_cached(pred(2, 300, 0.2), 300), pick_rel)
    rival = cand("r", at_cached(pred(cpus, rate, rival_rel), rate))
    d = choose((pick, rival), 5.0, 1, 5.0)
    tie = faster_chance(rival, pick, 1)
    beyond = faster_chance(rival, pick, 1, pick.half_width_pct() / 100)
    if d.pick_key != "p" or d.under_limit:
        return  # the rival ranked first, or a pick under the limit: no noise margin applies
    if d.verdict is Verdict.EQUIVALENT:
        assert d.equivalent == ("r",) and pick.half_width_pct() > 100 * TOLERANCE
        assert tie >= SETTINGS.chance_min > beyond
        assert d.margin_pct == pytest.approx(pick.half_width_pct(), rel=1e-12)  # a float sum
    if pick.half_width_pct() <= 100 * TOLERANCE:
        assert d.verdict is not Verdict.EQUIVALENT
        assert d.margin_pct == pytest.approx(100 * TOLERANCE, rel=1e-12)
    if max(tie, stall_chance(rival, 5.0, 1)) >= SETTINGS.chance_min and \
            not nextrun.cannot_beat(rival, pick, 1):
        assert d.verdict in (Verdict.MEASURE, Verdict.EQUIVALENT)


# ---- the search, over a committed sweep -------------------------------------------------------

SOURCE = DATA_DIR / "report_sweep"


def demo_sweep(prefix: Path, source: Path = SOURCE, bw: str = "8M", **kw
               ) -> tuple[Sweep, list[int]]:
    run = store.load_runs(source)[0]
    sizes = [run.dataset.total_bytes // run.dataset.num_files] * run.dataset.num_files
    return Sweep(run.spec.job, str(prefix), cpus=(1, 2), storage_bw=("none", bw),
                 adaptive=True, **kw), sizes


class Interrupted(Exception):
    """The search's process ended in the middle (Ctrl-C, a lost machine)."""


def search(sweep: Sweep, sizes: list[int], asked: list[str], stop_after: int | None = None,
           source: Path = SOURCE):
    """The search with each run it asks for replayed from the committed sweep (a repeat: the
    same measurement under the repeat's id); `stop_after` runs measured, it is interrupted."""
    def measure(spec):
        asked.append(spec.run_id)
        if store.run_path(Path(sweep.prefix), spec.run_id).exists():
            return None  # complete already: as --resume skips it
        if stop_after is not None and len(list(store.runs_dir(sweep.prefix).glob("*.json"))) \
                == stop_after:
            raise Interrupted(spec.run_id)
        run = next(
            r for r in store.load_runs(source) if r.run_id == dataclasses.replace(
                spec, repeat=1).run_id)
        store.write_run(sweep.prefix, dataclasses.replace(run, spec=dataclasses.replace(
            run.spec, repeat=spec.repeat)))
        return run
    return adaptive.search(sweep, sweep.run_specs(sum(sizes)), measure, sizes, lambda c: c or 2)


@pytest.mark.slow
def test_search_measures_what_changes_the_answer_and_resumes(tmp_path):
    sweep, sizes = demo_sweep(tmp_path / "p")
    asked: list[str] = []
    a = search(sweep, sizes, asked)
    assert asked[:3] == ["synthetic-cpus1", "cached-cpus1", "disk-cpus1-cachenone-bwnone"]
    measured = [d.next_key for d in a.decisions if d.verdict is Verdict.MEASURE]
    assert [f"disk-{k}" for k in measured] == asked[3:]  # each decision's run, nothing else
    assert a.final.verdict in (Verdict.CONFIDENT, Verdict.SETTLED)
    assert a.runs == len(asked) < a.grid_runs == 8
    # the same pick as a search over the full grid's runs, which measured everything
    full = adaptive.candidates(store.load_runs(SOURCE), sweep.resource_grid(sum(sizes)), sizes,
                               lambda c: c or 2)
    assert a.final.pick_key == choose(full, 5.0, 1, 5.0).pick_key
    # the grid's estimate: the stored durations, the median of the mode for the runs it lacks
    assert a.grid_seconds > a.seconds
    again: list[str] = []
    b = search(dataclasses.replace(sweep, resume=True), sizes, again)  # continues from the runs
    # the stored runs are its state: it starts where the first search ended, measuring nothing
    assert b.final == a.final and again == asked[:3] and len(b.decisions) == 1
    assert len(list(store.runs_dir(tmp_path / "p").glob("*.json"))) == a.runs


def test_a_step_on_the_cpu_is_timed_at_every_cpu_count_before_the_first_decision(tmp_path):
    """A script that trains on the CPU (its recorded device): the model times its step per
    CPU count and refuses a count without a synthetic run, so the seeds include the synthetic
    run of each CPU count of the grid, and the search decides instead of stopping."""
    source = DATA_DIR / "script_cpu"
    assert {r.spec.job.script is not None for r in store.load_runs(source)} == {True}
    sweep, sizes = demo_sweep(tmp_path / "p", source=source, bw="2M")
    asked: list[str] = []
    a = search(sweep, sizes, asked, source=source)
    assert asked[:4] == ["synthetic-cpus1", "cached-cpus1", "disk-cpus1-cachenone-bwnone",
                         "synthetic-cpus2"]
    assert a.decisions and a.final.verdict is not Verdict.MEASURE


@pytest.mark.slow
def test_an_interrupted_search_with_repeats_resumes_where_it_stopped(tmp_path):
    """Killed after 4 of its runs (`--repeats 2`), the search resumed asks for the runs it had
    (skipped, complete), measures only the rest, and ends as the search never interrupted."""
    whole, sizes = demo_sweep(tmp_path / "whole", repeats=2)
    asked: list[str] = []
    a = search(whole, sizes, asked)
    assert all(f"{x}-r2" == y for x, y in zip(asked[::2], asked[1::2]))  # each run, then again
    cut, _ = demo_sweep(tmp_path / "cut", repeats=2)
    first: list[str] = []
    with pytest.raises(Interrupted):
        search(cut, sizes, first, stop_after=4)
    assert first == asked[:5]  # the fifth run was being measured when it stopped
    again: list[str] = []
    b = search(dataclasses.replace(cut, resume=True), sizes, again)
    assert again == asked  # the same search, the first 4 runs skipped as complete
    assert sorted(r.run_id for r in store.load_runs(tmp_path / "cut")) == sorted(asked)
    assert b.final == a.final and b.runs == a.runs == len(asked)


@pytest.mark.slow
def test_a_spent_budget_stops_the_search_after_the_seeds(tmp_path):
    sweep, sizes = demo_sweep(tmp_path / "p", budget_s=1.0)
    asked: list[str] = []
    a = search(sweep, sizes, asked)
    assert len(asked) == 3 and a.final.verdict is Verdict.BUDGET
    b = a.final.budget
    assert b.spent_s + b.expected_s > b.budget_s == 1.0
    assert decision_text(a.final).endswith(f"budget: {b.spent_s:.0f} s of 1 s spent, the next "
                                           f"run ({b.skipped_key}) would take about "
                                           f"{b.expected_s:.0f} s more: stopping")


def test_bad_adaptive_settings_say_what_to_do():
    job = store.load_runs(SOURCE)[0].spec.job
    with pytest.raises(ConfigError, match="--adaptive"):
        Sweep(job, budget_s=60)
    with pytest.raises(ConfigError, match="--modes synthetic,cached,disk"):
        adaptive.check(Sweep(job, modes=(Mode.CACHED, Mode.DISK), adaptive=True))
    with pytest.raises(ConfigError, match="--budget"):
        parse_duration("ten minutes")
    assert parse_duration("10m") == 600 and parse_duration("90s") == 90


def test_the_command_line_asks_for_both(tmp_path):
    from dsanalyze import cli
    from dsanalyze.options import HarnessOptions, build_sweep

    def sweep_of(*argv: str) -> Sweep:
        return build_sweep(HarnessOptions.from_flat(vars(cli.harness_parser().parse_args(argv))))
    sweep = sweep_of("--data", str(tmp_path), "--adaptive", "--budget", "10m", "--until-ci", "2%",
                     "--min-iters", "40")
    assert sweep.adaptive and sweep.budget_s == 600
    assert (sweep.job.until_ci_pct, sweep.job.min_iters) == (2.0, 40)
    with pytest.raises(ConfigError, match="--until-ci"):
        sweep_of("--until-ci", "150%")


@pytest.mark.extended
@pytest.mark.slow
def test_harness_adaptive_resumes_with_early_stopped_runs(tmp_path, small_dataset, capsys):
    """End to end: the seeds stop early, the budget (or the first decision) ends the search;
    resumed, the search continues from the stored runs (no run again) and ends the same way."""
    from conftest import harness

    args = ("--data", small_dataset, "--prefix", tmp_path / "p", "-b", 8, "--warmup", 2,
            "--iters", 60, "--until-ci", "5%", "--min-iters", 10, "--sim-step-ms", 20,
            "--storage-bw", "none,4M", "--adaptive", "--budget", "1s", "--no-plots",
            "--no-advice")
    assert harness(*args) == 0
    first = capsys.readouterr()
    # after the seeds, the budget stops whatever the next run would be
    assert "adaptive step 1: " in first.err and "after 1 decision(s)" in first.out
    runs = store.load_runs(tmp_path / "p")
    assert sorted(r.run_id for r in runs) == ["cached-cpusall", "disk-cpusall-cachenone-bwnone",
                                              "synthetic-cpusall"]
    for run in runs:  # each run stopped once sure, or ran to its maximum
        until = run.ranks[0].extra["until_ci"]
        assert until["target_pct"] == 5.0
        if until["stopped"]:
            assert until["estimate"]["half_width_pct"] <= 5.0 and len(run.ranks[0].iter_s) < 62
        else:
            assert len(run.ranks[0].iter_s) == 62
    assert harness(*args, "--resume") == 0
    again = capsys.readouterr()
    assert "resumed: 3 run(s) already complete" in again.out and "[adaptive run" not in again.err
    assert len(store.load_runs(tmp_path / "p")) == 3
