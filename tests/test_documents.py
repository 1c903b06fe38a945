"""The typed documents analysis and the what-if hand the report: `summary.json` (`Summary`,
schema 4), `whatif.json`'s rows (`GridRow`) and `validation.json` (`ValidationDoc`), read
back into the same values; and the verdict the report words from the typed one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsanalyze import store
from dsanalyze.analysis.notes import Said
from dsanalyze.analysis.summary import SCHEMA_VERSION, Summary, summarize
from dsanalyze.analysis.uncertainty import Significance, StallInterval
from dsanalyze.analysis.verdict import Bound, verdict
from dsanalyze.report.assumptions import assumption_text
from dsanalyze.report.notes import notes
from dsanalyze.report.verdicts import verdict_text
from dsanalyze.report.whatif_text import unmade_text
from dsanalyze.settings import SETTINGS
from dsanalyze.whatif.assumptions import Assume, Assumption, Law
from dsanalyze.whatif.documents import (
    CheckRow,
    GridRow,
    SplitFigures,
    Unmade,
    UnmadeWhy,
    ValidationDoc,
)

DATA = Path(__file__).parent / "data"
FIXTURES = ("report_sweep", "report_2ranks")


def as_json(value: dict) -> dict:
    return json.loads(json.dumps(value))


@pytest.mark.parametrize("name", FIXTURES)
def test_summary_reads_back_into_the_same_values(name):
    summary = summarize(store.load_runs(DATA / name))
    doc = as_json(summary.to_dict())
    assert doc["schema"] == SCHEMA_VERSION == 4
    assert Summary.from_dict(doc) == summary


def _said(m: dict | None) -> str | None:
    """A rate's method as schema 3 stored it: a sentence."""
    if m is None:
        return None
    if m["repeats"] > 1:
        return f"circular block bootstrap over iterations and over {m['repeats']} repeats"
    return f"circular block bootstrap over iterations (block {m['block']} of {m['iterations']})"


def test_a_summary_stored_before_the_typed_rate_method_reads_back_the_same_numbers():
    summary = summarize(store.load_runs(DATA / "report_sweep"))
    doc = as_json(summary.to_dict())
    old = {**doc, "schema": 3,
           "runs": [{**r, "rate_method": _said(r["rate_method"])} for r in doc["runs"]],
           "configs": [{**c, "modes": {k: {**m, "rate_method": _said(m["rate_method"])}
                                       for k, m in c["modes"].items()}}
                       for c in doc["configs"]]}
    back = Summary.from_dict(old)
    assert any(r.rate_method for r in back.runs)
    assert back.runs == summary.runs and back.configs == summary.configs


@pytest.mark.parametrize("name", FIXTURES)
def test_a_summary_stored_before_the_typed_verdict_keeps_what_it_classified(name):
    doc = as_json(summarize(store.load_runs(DATA / name)).to_dict())
    # schema 1 stored the verdict as its sentence
    old = {**doc, "schema": 1,
           "configs": [{**c, "verdict": "likely prep-bound: 12% ±7 of time is prep stall"}
                       for c in doc["configs"]]}
    back = Summary.from_dict(old)
    assert back.schema == 1
    for cfg, stored in zip(back.configs, doc["configs"]):
        assert cfg.verdict.bound.value == stored["bound"]
        assert verdict_text(cfg.verdict).startswith(WORDS[cfg.verdict.bound])


def test_a_summary_stored_before_the_typed_notes_still_prints_its_sentences():
    """Schema 2 stored a configuration's notes as sentences under `warnings`: they read back
    as `Said` notes and print as they were written."""
    doc = as_json(summarize(store.load_runs(DATA / "report_sweep")).to_dict())
    written = ["synthetic: iteration times spread widely (IQR 31% of median)",
               "cache 0 does not bind: the dataset (10 MiB) fits in the budget"]
    old = {**doc, "schema": 2,
           "configs": [{**{k: v for k, v in c.items() if k != "notes"}, "warnings": written}
                       for c in doc["configs"]]}
    back = Summary.from_dict(old)
    assert all(cfg.notes == (Said(written[0]), Said(written[1])) for cfg in back.configs)
    said = notes(back)
    assert said.count(written[0]) == 1 and said.count(written[1]) == 1  # once, not per config
    assert Summary.from_dict(as_json(back.to_dict())) == back


# what the table's words begin with, by the bound the analysis classified
WORDS = {Bound.PREP: "likely ", Bound.FETCH: "likely ", Bound.COMPUTE: "compute-bound",
         Bound.NOISE: "within noise", Bound.UNKNOWN: "unknown"}
SIGNIFICANCE = st.sampled_from([Significance.LIKELY, Significance.WITHIN_NOISE,
                                Significance.INVERTED, Significance.SUSPECT])


@st.composite
def stalls(draw) -> StallInterval | None:
    """A stall of a 10 s epoch: its share, an interval around it, a significance."""
    if draw(st.booleans()):
        return None
    pct = draw(st.floats(-30, 90))
    lo, hi = pct - draw(st.floats(0, 40)), pct + draw(st.floats(0, 40))
    return StallInterval(pct / 10, lo / 10, hi / 10, pct, lo, hi, draw(SIGNIFICANCE))


@given(stalls(), stalls())
def test_the_words_name_the_bound_and_quote_the_numbers(prep, fetch):
    v = verdict(prep, fetch)
    text = verdict_text(v)
    assert text.startswith(WORDS[v.bound])
    if v.bound in (Bound.PREP, Bound.FETCH):
        first = {"prep": prep, "fetch": fetch}[v.bound.value]
        assert first.significance is Significance.LIKELY and first.pct > 5
        assert text.startswith(f"likely {'highly ' * (first.pct > SETTINGS.highly_input_bound_pct)}"
                               f"{v.bound.value}-bound: {first.pct:.0f}% ±"
                               f"{(first.pct_high - first.pct_low) / 2:.0f} of time")
    if v.bound is Bound.COMPUTE:
        known = [s for s in (prep, fetch) if s is not None]
        assert all(s.pct_high <= 5 for s in known)
        assert f"stalls are {sum(max(s.pct, 0) for s in known):.0f}% of time" in text


FINITE = st.floats(0, 1e9, allow_nan=False)
OPTIONAL = st.none() | FINITE


@given(cpus=st.none() | st.integers(1, 64), cache=st.none() | st.integers(0, 1 << 40),
       rate=FINITE, low=OPTIONAL, measured_sps=OPTIONAL, recommended=st.booleans(),
       untested=st.lists(st.builds(Assumption, st.sampled_from(list(Assume)),
                                   cpus=st.none() | st.integers(1, 64),
                                   law=st.none() | st.sampled_from(list(Law)),
                                   said=st.text(max_size=8)), max_size=3))
def test_a_grid_row_reads_back_from_its_json(cpus, cache, rate, low, measured_sps, recommended,
                                             untested):
    row = GridRow(cpus, "50%", cache, None, rate, rate_sps_low=low, measured=True,
                  measured_sps=measured_sps, recommended=recommended, untested=tuple(untested))
    doc = as_json(row.to_dict())
    assert "measured_sps_stored" not in doc  # the file keeps the keys it always had
    assert GridRow.from_dict(doc) == row
    # a row written before the assumptions were typed holds their words
    old = GridRow.from_dict({**doc, "untested": ["4 CPUs: beyond the 1 measured"]})
    assert old.untested == (Assumption(Assume.SAID, said="4 CPUs: beyond the 1 measured"),)
    assert assumption_text(old.untested[0]) == "4 CPUs: beyond the 1 measured"


def test_a_row_written_before_measured_sps_says_so():
    old = {"cpus": 2, "cache_spec": "none", "cache_bytes": None, "storage_read_bps": None,
           "rate_sps": 100.0, "measured": True}
    assert not GridRow.from_dict(old).measured_sps_stored
    assert GridRow.from_dict({**old, "measured_sps": None}).measured_sps_stored


@given(st.lists(st.tuples(st.sampled_from(["loo", "extrapolation"]), FINITE, FINITE),
                max_size=4))
def test_a_validation_document_reads_back_and_finds_its_splits(checks):
    doc = ValidationDoc(
        tuple(CheckRow(f"disk-{i}", m, p, split) for i, (split, m, p) in enumerate(checks)),
        splits=(SplitFigures("leave-one-out", held_out=len(checks)),
                SplitFigures("extrapolation", unmade=Unmade(UnmadeWhy.REFUSED, "no step law"))))
    back = ValidationDoc.from_dict(as_json(doc.to_dict()))
    assert back == doc
    assert back.split("extrapolation").unmade.error == "no step law"
    assert back.split("other") is None


def test_a_validation_document_with_the_splits_notes_in_words_still_says_them():
    """Before the reasons were typed, a split stored its rule and its note as sentences."""
    written = "not made: every run has the fewest CPUs"
    old = {"splits": [{"name": "leave-one-out", "rule": "each held out", "note": "",
                       "held_out": 2},
                      {"name": "extrapolation", "rule": "fitted on", "note": written}]}
    back = ValidationDoc.from_dict(old)
    assert back.split("leave-one-out").unmade is None
    assert back.split("extrapolation").unmade == Unmade(UnmadeWhy.SAID, written)
    assert unmade_text(back.split("extrapolation").unmade) == written
