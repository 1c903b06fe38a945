"""The model's parameters carry typed provenance (`whatif/provenance.py`) that round-trips
through JSON; `report/params.py` words every kind of it."""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsanalyze import store
from dsanalyze.report import whatif_text
from dsanalyze.report.params import BOUND_WHY, REASONS, WORDS, how_text
from dsanalyze.whatif import api as whatif
from dsanalyze.whatif import bounds
from dsanalyze.whatif.model import Param
from dsanalyze.whatif.provenance import Dropped, Provenance, Reason, Said

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def fitted() -> list[Param]:
    """Every parameter of the fits of three fixtures (prep-, compute- and fetch-bound)."""
    return [p for name in ("whatif_prep", "whatif_compute", "whatif_fetch")
            for p in whatif.fit(store.load_runs(DATA / name)).params]


def test_every_kind_of_provenance_and_every_reason_and_bound_has_words() -> None:
    assert set(WORDS) == set(Provenance.KINDS.values())
    assert set(REASONS) == set(Reason)
    every_bound = [b for b in vars(bounds).values() if isinstance(b, bounds.Bound)]
    assert {b.name for b in every_bound} == set(BOUND_WHY)  # a new bound needs its reason


def test_a_parameter_round_trips_through_json_to_the_same_value_and_words(fitted) -> None:
    assert len({type(p.how) for p in fitted}) >= 8  # many kinds, not one
    for p in fitted:
        back = Param.from_dict(json.loads(json.dumps(p.to_dict())))
        assert back == p and how_text(back.how) == how_text(p.how)


def test_the_printed_line_quotes_the_provenance_s_numbers() -> None:
    """Each number a provenance carries (in its own unit) is in its printed line."""
    model = whatif.fit(store.load_runs(DATA / "whatif_prep"))
    lines = whatif_text.params_lines(model)
    for p in model.params:
        line = next(x for x in lines if x.split()[0] == p.name)
        if hasattr(p.how, "runs") and isinstance(p.how.runs, int):
            assert f"{p.how.runs} " in line  # how many runs the rule used
        assert how_text(p.how) in line


def test_a_sentence_stored_before_provenance_was_typed_reads_back_as_said() -> None:
    old = {"name": "startup_s", "value": 0.2, "unit": "s", "runs": ["cached-cpus1"],
           "how": "first iteration's wait beyond the simulated one"}
    p = Param.from_dict(old)
    assert p.how == Said(old["how"]) and how_text(p.how) == old["how"]
    assert p.runs == ("cached-cpus1",)


def _values(tp: typing.Any) -> st.SearchStrategy[typing.Any]:
    """Any value of a provenance field's type (finite floats: JSON has no NaN)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(st.none() if a is type(None) else _values(a) for a in args))
    if origin is tuple:
        return st.lists(_values(args[0]), max_size=3).map(tuple) if args[-1] is Ellipsis \
            else st.tuples(*map(_values, args))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return st.sampled_from(tp)
    if tp is Dropped or (isinstance(tp, type) and dataclasses.is_dataclass(tp)):
        return _of(tp)
    return {float: st.floats(allow_nan=False, allow_infinity=False), int: st.integers(),
            str: st.text(max_size=8), bool: st.booleans()}[tp]


def _of(cls: type) -> st.SearchStrategy[typing.Any]:
    hints = typing.get_type_hints(cls)
    return st.builds(cls, **{f.name: _values(hints[f.name]) for f in dataclasses.fields(cls)})


@pytest.mark.parametrize("kind", sorted(Provenance.KINDS))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_provenance_round_trips_through_json(kind, data) -> None:
    # too_slow: drawing nested tuples on a loaded 2-core machine, not the code under test
    how = data.draw(_of(Provenance.KINDS[kind]))
    assert Provenance.from_dict(json.loads(json.dumps(how.to_dict()))) == how
