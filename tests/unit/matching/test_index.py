"""The subscription index (routing.matching.index.MatchIndex) against plain models of docs/reference/filters.md.

Expectations never come from ``MatchIndex``: the stateful test keeps a ``dict`` of ``Filter``
evaluated with ``Filter.matches`` (docs/conventions.md §7), the parity tests ask ``BruteForceIndex``
with the events as plain Python dicts, and the spot checks are written out by hand from the spec.
The inputs are chosen to break a bucketed index: few attribute names and colliding literals (so
that identical filters share state), values equal to literals, integers past 2**53, -0.0, NaN,
booleans next to numbers, prefix/suffix-related strings, hundreds of literals on one attribute,
thousands of subscriptions added and removed in rounds (capacity growth, slot reuse), and every
input form of ``EventBatch``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from routing.matching.index import BruteForceIndex, EventBatch, Matches, MatchIndex
from routing.matching.language import Filter, FilterError, Op, Predicate, parse_filter
from tests.strategies import (
    COLUMN_DTYPES,
    INDEX_IDS,
    INDEX_NAMES,
    column_batches,
    index_events,
    index_filters,
)

PARITY = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
FORMS = ("list", "from_events", "object_columns")

# --------------------------------------------------------------------------------------------
# Models and helpers
# --------------------------------------------------------------------------------------------


def model_ids(model: Mapping[str, Filter], events: Sequence[Mapping[str, object]]) -> list[list[str]]:
    """Per event, the sorted ids of the model's filters that match it (``Filter.matches``). Each
    distinct filter is evaluated once per event (equal filters match the same events)."""
    by_filter: dict[Filter, list[str]] = {}
    for sid, f in model.items():
        by_filter.setdefault(f, []).append(sid)
    return [sorted(sid for f, sids in by_filter.items() if f.matches(ev) for sid in sids) for ev in events]


def oracle_ids(model: Mapping[str, Filter | str], events: Sequence[Mapping[str, object]]) -> list[list[str]]:
    """What ``BruteForceIndex`` answers for the events as plain Python dicts."""
    oracle = BruteForceIndex()
    for sid, f in model.items():
        oracle.add(sid, f)
    return oracle.match(list(events)).all_ids()


def object_columns(events: Sequence[Mapping[str, object]]) -> EventBatch:
    """The same events as ``EventBatch.from_columns`` with one object column (and mask) per name."""
    names = dict.fromkeys(name for ev in events for name in ev)
    n = len(events)
    columns: dict[str, tuple[Any, Any]] = {}
    for name in names:
        values = np.empty(n, dtype=object)
        present = np.zeros(n, dtype=bool)
        for i, ev in enumerate(events):
            if name in ev:
                values[i] = ev[name]
                present[i] = True
            else:
                values[i] = "ab"  # under a false mask: must be ignored
        columns[name] = (values, present)
    return EventBatch.from_columns(n, columns)


def as_input(events: Sequence[Mapping[str, object]], form: str) -> Any:
    if form == "list":
        return list(events)
    if form == "from_events":
        return EventBatch.from_events(list(events))
    return object_columns(events)


def apply_to_model(model: dict[str, Filter], changes: Sequence[tuple[str, Filter | str | None]]) -> None:
    """``changes`` applied one by one to a plain ``dict`` of ``Filter`` (texts parsed)."""
    for sid, f in changes:
        if f is None:
            model.pop(sid, None)
        else:
            model[sid] = parse_filter(f) if isinstance(f, str) else f


def check_matches(result: Matches, expected: list[list[str]]) -> None:
    """``result`` names exactly ``expected`` and its arrays are consistent with each other."""
    n = len(expected)
    assert len(result) == n
    assert result.all_ids() == expected
    offsets = np.asarray(result.offsets)
    slots = np.asarray(result.slots)
    assert offsets.dtype == np.int64 and slots.dtype == np.int32
    assert offsets.shape == (n + 1,)
    assert offsets[0] == 0 and offsets[-1] == len(slots)
    assert np.all(np.diff(offsets) >= 0)
    assert result.counts().tolist() == [len(ids) for ids in expected]
    for i in range(n):
        event_slots = slots[offsets[i] : offsets[i + 1]].tolist()
        assert len(set(event_slots)) == len(event_slots), f"event {i}: a slot reported twice"
    if n:
        assert result.ids(n - 1) == expected[-1]


def build(model: Mapping[str, Filter | str]) -> MatchIndex:
    index = MatchIndex()
    for sid, f in model.items():
        index.add(sid, f)
    return index


# --------------------------------------------------------------------------------------------
# 1. Stateful: MatchIndex against a dict of Filter
# --------------------------------------------------------------------------------------------


class IndexMachine(RuleBasedStateMachine):
    """Adds, replaces and removes in any order, one at a time (queued until the next match) or in
    batches, with matches in between (or not: lazily applied changes pile up), compared after
    every step with a plain ``dict`` of ``Filter``."""

    def __init__(self) -> None:
        super().__init__()
        self.index = MatchIndex()
        self.model: dict[str, Filter] = {}

    def free_ids(self) -> list[str]:
        return [sid for sid in INDEX_IDS if sid not in self.model]

    @precondition(lambda self: len(self.model) < len(INDEX_IDS))
    @rule(data=st.data(), f=index_filters(), as_text=st.booleans())
    def add(self, data: st.DataObject, f: Filter, as_text: bool) -> None:
        sid = data.draw(st.sampled_from(self.free_ids()), label="new id")
        self.index.add(sid, str(f) if as_text else f)
        self.model[sid] = f

    @precondition(lambda self: self.model and len(self.model) < len(INDEX_IDS))
    @rule(data=st.data(), how=st.sampled_from(("same object", "reparsed", "reordered")))
    def add_identical(self, data: st.DataObject, how: str) -> None:
        """A new id with a filter some subscription already has (shared state after dedup)."""
        f = self.model[data.draw(st.sampled_from(sorted(self.model)), label="copied id")]
        if how == "reparsed":
            f = parse_filter(str(f))
        elif how == "reordered":
            f = Filter(tuple(reversed(f.predicates)))  # same events, maybe a different dedup key
        sid = data.draw(st.sampled_from(self.free_ids()), label="new id")
        self.index.add(sid, f)
        self.model[sid] = f

    @precondition(lambda self: self.model)
    @rule(data=st.data(), f=index_filters())
    def replace(self, data: st.DataObject, f: Filter) -> None:
        sid = data.draw(st.sampled_from(sorted(self.model)), label="replaced id")
        self.index.add(sid, f)
        self.model[sid] = f

    @precondition(lambda self: self.model)
    @rule(data=st.data(), reparse=st.booleans())
    def replace_by_identical(self, data: st.DataObject, reparse: bool) -> None:
        sid = data.draw(st.sampled_from(sorted(self.model)), label="replaced id")
        f = parse_filter(str(self.model[sid])) if reparse else self.model[sid]
        self.index.add(sid, f)
        self.model[sid] = f

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from(sorted(self.model)), label="removed id")
        self.index.remove(sid)
        del self.model[sid]

    @rule(data=st.data())
    def remove_unknown(self, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from([*self.free_ids(), "never added"]), label="unknown id")
        with pytest.raises(KeyError):
            self.index.remove(sid)
        with pytest.raises(KeyError):
            del self.model[sid]

    @rule(
        changes=st.lists(
            st.tuples(st.sampled_from(INDEX_IDS), st.one_of(st.none(), index_filters(), index_filters().map(str))),
            max_size=12,
        )
    )
    def apply_batch(self, changes: list[tuple[str, Filter | str | None]]) -> None:
        """A batch of adds, replaces and removes (of known and unknown ids, an id several times)."""
        self.index.apply(changes)
        apply_to_model(self.model, changes)

    @rule(events=st.lists(index_events(), min_size=1, max_size=20), form=st.sampled_from(FORMS))
    def match(self, events: list[dict[str, object]], form: str) -> None:
        check_matches(self.index.match(as_input(events, form)), model_ids(self.model, events))

    @invariant()
    def same_ids(self) -> None:
        assert len(self.index) == len(self.model)
        for sid in (*INDEX_IDS, "never added"):
            assert (sid in self.index) == (sid in self.model), sid


class SmallCapsIndexMachine(IndexMachine):
    """The same with at most one numeric cut and one string row per attribute: most literals
    are no bucket boundary, so most candidates go through exact verification."""

    def __init__(self) -> None:
        super().__init__()
        self.index = MatchIndex(max_cuts=1, max_strings=1)


def _range_predicates() -> st.SearchStrategy[Predicate]:
    """W1-like predicates: ``between`` (mostly) and the orderings, integer bounds from a range
    wide enough that most literals are no cut of a small index."""
    bound = st.integers(-60, 60)
    between = st.tuples(bound, st.integers(0, 40)).map(lambda t: (Op.BETWEEN, (t[0], t[0] + t[1])))
    ordering = st.tuples(st.sampled_from((Op.LT, Op.LE, Op.GT, Op.GE)), bound.map(lambda x: (x,)))
    return st.tuples(st.sampled_from(INDEX_NAMES), st.one_of(between, between, ordering)).map(
        lambda t: Predicate(t[0], t[1][0], t[1][1])
    )


RANGE_FILTERS = st.lists(_range_predicates(), min_size=1, max_size=4).map(lambda ps: Filter(tuple(ps)))
RANGE_EVENTS = st.dictionaries(
    st.sampled_from(INDEX_NAMES), st.one_of(st.integers(-70, 110), st.floats(-70, 110)), max_size=len(INDEX_NAMES)
)


class RangeChurnMachine(RuleBasedStateMachine):
    """Range-heavy churn (W1's shape: ``between`` on several attributes, nearly every bound
    distinct) in batches from text or ``Filter``, with flushes and matches in between, against a
    plain ``dict`` of ``Filter``; the index has 4 cuts per attribute, so most bounds fall inside
    buckets and most candidates are verified."""

    def __init__(self) -> None:
        super().__init__()
        self.index = MatchIndex(max_cuts=4)
        self.model: dict[str, Filter] = {}

    @rule(
        changes=st.lists(
            st.tuples(st.sampled_from(INDEX_IDS), st.one_of(st.none(), RANGE_FILTERS, RANGE_FILTERS.map(str))),
            max_size=16,
        ),
        flush=st.booleans(),
    )
    def apply_batch(self, changes: list[tuple[str, Filter | str | None]], flush: bool) -> None:
        self.index.apply(changes)
        apply_to_model(self.model, changes)
        if flush:
            self.index.flush()

    @rule(events=st.lists(RANGE_EVENTS, min_size=1, max_size=20))
    def match(self, events: list[dict[str, object]]) -> None:
        check_matches(self.index.match(events), model_ids(self.model, events))

    @invariant()
    def same_ids(self) -> None:
        assert len(self.index) == len(self.model)
        assert all(sid in self.index for sid in self.model)


RangeChurnMachine.TestCase.settings = settings(
    max_examples=25, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestRangeChurnMachine = RangeChurnMachine.TestCase

IndexMachine.TestCase.settings = settings(
    max_examples=50, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestIndexMachine = IndexMachine.TestCase
SmallCapsIndexMachine.TestCase.settings = settings(
    max_examples=25, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestSmallCapsIndexMachine = SmallCapsIndexMachine.TestCase


# --------------------------------------------------------------------------------------------
# 2. Parity with the oracle: every operator, every type rule, every input form
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", list(Op), ids=lambda op: op.name)
@PARITY
@given(data=st.data())
def test_each_operator_against_the_oracle(op: Op, data: st.DataObject) -> None:
    """Many subscriptions using one operator (literals of every kind it takes), many events."""
    fs = data.draw(st.lists(index_filters(ops=(op,), max_predicates=2), min_size=1, max_size=40), label="filters")
    events = data.draw(st.lists(index_events(), min_size=1, max_size=20), label="events")
    form = data.draw(st.sampled_from(FORMS), label="form")
    model = {f"s{i}": f for i, f in enumerate(fs)}
    check_matches(build(model).match(as_input(events, form)), oracle_ids(model, events))


@PARITY
@given(
    fs=st.lists(index_filters(), min_size=1, max_size=60),
    events=st.lists(index_events(), min_size=1, max_size=25),
    form=st.sampled_from(FORMS),
)
def test_mixed_filters_against_the_oracle(fs: list[Filter], events: list[dict[str, object]], form: str) -> None:
    model = {f"s{i}": f for i, f in enumerate(fs)}
    check_matches(build(model).match(as_input(events, form)), oracle_ids(model, events))


@PARITY
@given(
    fs=st.lists(index_filters(), min_size=1, max_size=40),
    batch=column_batches(),
)
def test_from_columns_against_the_oracle(
    fs: list[Filter], batch: tuple[int, dict[str, tuple[Any, Any]], list[dict[str, object]]]
) -> None:
    """float64 / int64 / bool / numpy unicode / object columns, with and without masks; the
    oracle sees the drawn Python values, never the arrays."""
    n, columns, events = batch
    model = {f"s{i}": f for i, f in enumerate(fs)}
    index = build(model)
    expected = oracle_ids(model, events)
    check_matches(index.match(EventBatch.from_columns(n, columns)), expected)
    check_matches(index.match(EventBatch.from_events(events)), expected)


@pytest.mark.parametrize("dtype", COLUMN_DTYPES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_each_column_dtype_against_the_oracle(dtype: str, data: st.DataObject) -> None:
    """One dtype at a time, so that a failure names the column form that breaks."""
    fs = data.draw(st.lists(index_filters(), min_size=1, max_size=40), label="filters")
    n, columns, events = data.draw(column_batches(dtypes=(dtype,)), label="batch")
    model = {f"s{i}": f for i, f in enumerate(fs)}
    check_matches(build(model).match(EventBatch.from_columns(n, columns)), oracle_ids(model, events))


@pytest.mark.parametrize(
    "caps", [{"max_cuts": 0, "max_strings": 0}, {"max_cuts": 1, "max_strings": 1}, {"max_cuts": 3, "max_strings": 2}]
)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fs=st.lists(index_filters(), min_size=1, max_size=40),
    events=st.lists(index_events(), min_size=1, max_size=20),
    form=st.sampled_from(FORMS),
)
def test_small_bucket_caps_against_the_oracle(
    caps: dict[str, int], fs: list[Filter], events: list[dict[str, object]], form: str
) -> None:
    """Few or no literals become bucket boundaries: the exact verification answers alone."""
    model = {f"s{i}": f for i, f in enumerate(fs)}
    index = MatchIndex(**caps)
    for sid, f in model.items():
        index.add(sid, f)
    check_matches(index.match(as_input(events, form)), oracle_ids(model, events))


# Every type rule, exhaustively: each operator with a literal of each kind it takes, against one
# value of every kind (and the awkward numbers and strings), plus "absent".
_TYPE_LITERALS: dict[str, tuple[Any, ...]] = {
    "number": (1, 1.5, 0, -0.0, 2**53, 2**53 + 1),
    "string": ("", "a", "ab", "1"),
    "boolean": (True, False),
}
_TYPE_VALUES: tuple[object, ...] = (
    1,
    1.0,
    1.5,
    0,
    0.0,
    -0.0,
    2**53,
    2**53 + 1,
    2.0**53,
    2**64 + 1,
    math.nan,
    math.inf,
    -math.inf,
    np.float64(1.0),
    np.int64(1),
    "",
    "a",
    "ab",
    "ba",
    "1",
    "True",
    np.str_("a"),
    True,
    False,
    None,
    [1],
    (),
)


def _type_rule_filters() -> dict[str, Filter]:
    model: dict[str, Filter] = {}
    for op in Op:
        if op is Op.EXISTS:
            model["exists"] = Filter((Predicate("x", op),))
            continue
        for kind, literals in _TYPE_LITERALS.items():
            if kind == "boolean" and op not in (Op.EQ, Op.NE):
                continue
            if kind != "string" and op in (Op.STARTSWITH, Op.ENDSWITH, Op.CONTAINS):
                continue
            for i, lit in enumerate(literals):
                if op is Op.BETWEEN:
                    values: tuple[Any, ...] = (lit, literals[(i + 1) % len(literals)])
                elif op in (Op.IN, Op.NOT_IN):
                    values = (lit, literals[(i + 1) % len(literals)])
                else:
                    values = (lit,)
                model[f"{op.name}.{kind}.{i}"] = Filter((Predicate("x", op, values),))
    return model


@pytest.mark.parametrize("form", FORMS)
def test_every_type_rule_against_the_oracle(form: str) -> None:
    model = _type_rule_filters()
    events: list[dict[str, object]] = [{"x": v} for v in _TYPE_VALUES] + [{}, {"y": 1}]
    check_matches(build(model).match(as_input(events, form)), oracle_ids(model, events))


# Spot checks written out from docs/reference/filters.md (no oracle at all).
SPEC_CASES: list[tuple[str, dict[str, object], bool]] = [
    ("x = 1", {"x": True}, False),  # True is not the number 1
    ("x = 1", {"x": 1.0}, True),
    ("x = true", {"x": 1}, False),
    ("x != true", {"x": 0}, False),  # different kinds: false, != included
    ("x != true", {"x": False}, True),
    ("x != 1", {}, False),  # missing attribute: false, != included
    ("x != 1", {"x": "1"}, False),
    ("x != 1", {"x": math.nan}, False),
    ("x not in (1, 2)", {"x": math.nan}, False),
    ("x not in (1, 2)", {"x": 3}, True),
    ("x not in (1, 2)", {"x": None}, False),
    ("x >= 0", {"x": False}, False),
    ("x < 0", {"x": -0.0}, False),
    ("x <= -0.0", {"x": 0}, True),
    ("x = 0", {"x": -0.0}, True),
    ("x = 9007199254740992", {"x": 2**53 + 1}, False),
    ("x < 9007199254740993", {"x": 2.0**53}, True),
    ("x > 9007199254740992.0", {"x": 2**53 + 1}, True),
    ("x >= 9007199254740993", {"x": 2**53 + 1}, True),
    ("x >= 9007199254740993", {"x": 2.0**53}, False),
    ("x between 1 and 2", {"x": 2}, True),
    ("x between 1 and 2", {"x": 1.0}, True),
    ("x between 2 and 1", {"x": 1.5}, False),
    ("x exists", {"x": None}, True),
    ("x exists", {"x": math.nan}, True),
    ("x exists", {}, False),
    ("s startswith ''", {"s": ""}, True),
    ("s startswith ''", {"s": 0}, False),
    ("s startswith 'ab'", {"s": "abc"}, True),
    ("s startswith 'abc'", {"s": "ab"}, False),
    ("s endswith 'bc'", {"s": "abc"}, True),
    ("s contains 'b'", {"s": "abc"}, True),
    ("s contains 'd'", {"s": "abc"}, False),
    ("s < 'b'", {"s": "ab"}, True),
    ("s < 'b'", {"s": "b"}, False),
    ("s > '\uffff'", {"s": "\U0001f600"}, True),  # code point order, not UTF-16
    ("s < 'a'", {"s": 0}, False),
    ("s in ('a', 'b')", {"s": "b"}, True),
    ("s in ('a', 'b')", {"s": "ab"}, False),
    ("s not in ('a', 'b')", {"s": "ab"}, True),
    ("s not in ('a')", {"s": 1}, False),
    ("s = '1'", {"s": 1}, False),
    ("x = 1 and y = 'a'", {"x": 1}, False),
    ("x = 1 and y = 'a'", {"x": 1, "y": "a"}, True),
    ("x > 1 and x < 1.0000000000000002", {"x": 1.0000000000000002}, False),
]


@pytest.mark.parametrize("form", FORMS)
def test_spec_spot_checks(form: str) -> None:
    model = {f"c{i:02d}": text for i, (text, _, _) in enumerate(SPEC_CASES)}
    events = [ev for _, ev, _ in SPEC_CASES]
    got = build(model).match(as_input(events, form)).all_ids()
    for i, (text, ev, want) in enumerate(SPEC_CASES):
        assert (f"c{i:02d}" in got[i]) == want, f"{text!r} on {ev!r}: expected {want}"


def test_spot_checks_from_columns() -> None:
    """The same kind of checks with typed columns: bool arrays are booleans (not 0/1), int64
    holds 2**53 + 1 exactly, float32 values are what they are, masked values are ignored."""
    index = MatchIndex()
    index.add("flag_is_1", "flag = 1")
    index.add("flag_true", "flag = true")
    index.add("flag_ne_true", "flag != true")
    index.add("flag_ge_0", "flag >= 0")
    index.add("big_eq", "n = 9007199254740993")
    index.add("big_gt_float", "n > 9007199254740992.0")
    index.add("f_gt", "f > 0.1")
    index.add("f_eq", "f = 0.1")
    index.add("u_lt", "u < 'b'")
    index.add("u_sw", "u startswith 'é'")
    n = 3
    batch = EventBatch.from_columns(
        n,
        {
            "flag": (np.array([True, False, True]), np.array([True, True, False])),
            "n": (np.array([2**53 + 1, 2**53, 2**53 + 1], dtype=np.int64), np.array([True, True, False])),
            "f": (np.array([0.1, 0.1, 0.1], dtype=np.float32), None),  # float32(0.1) > 0.1
            "u": (np.array(["a", "éa", "\U0001f600"]), None),
        },
    )
    got = index.match(batch).all_ids()
    assert got[0] == sorted(["flag_true", "big_eq", "big_gt_float", "f_gt", "u_lt"])
    assert got[1] == sorted(["flag_ne_true", "f_gt", "u_sw"])
    assert got[2] == ["f_gt"]


@pytest.mark.parametrize(
    ("dtype", "values"),
    [
        (np.float32, [0.1, 1 / 3, 16777216.0, 16777218.0, math.nan, -0.0]),
        (np.int32, [-1, 0, 1, 2**31 - 1, -(2**31)]),
        (np.int8, [-128, -1, 0, 1, 127]),
        (np.uint8, [0, 1, 255]),
        (np.uint64, [0, 1, 2**53 + 1, 2**63, 2**64 - 1]),
        (np.int64, [2**63 - 1, -(2**63), 2**53 + 1, -(2**53) - 1]),
        (np.float64, [2.0**63, 2.0**64, 1e308, -1e308, 5e-324]),
    ],
    ids=lambda v: getattr(v, "__name__", None) or "values",
)
def test_other_numeric_column_dtypes(dtype: Any, values: list[Any]) -> None:
    """Narrow and unsigned dtypes, compared exactly with literals next to their values."""
    arr = np.array(values, dtype=dtype)
    events = [{"x": v.item()} for v in arr]  # the numbers the column holds, as Python numbers
    literals = sorted({v for ev in events for v in (ev["x"],) if v == v} | {0.1, 1 / 3, 2**53, 2**63, 2**64 - 1})
    literals += [float(v) for v in literals] + [-1, 16777217, 2**64, 2**31]
    model: dict[str, Filter] = {}
    for i, lit in enumerate(literals):
        for op in (Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE):
            model[f"{op.name}{i}"] = Filter((Predicate("x", op, (lit,)),))
    model["in"] = Filter((Predicate("x", Op.IN, tuple(literals)),))
    model["not_in"] = Filter((Predicate("x", Op.NOT_IN, tuple(literals[:3])),))
    model["string"] = Filter((Predicate("x", Op.EQ, ("1",)),))
    model["bool"] = Filter((Predicate("x", Op.NE, (True,)),))
    batch = EventBatch.from_columns(len(arr), {"x": (arr, None)})
    check_matches(build(model).match(batch), oracle_ids(model, events))


def test_integers_beyond_int64() -> None:
    """Python ints past 64 bits, as literals and as values (from_events and object columns)."""
    big = 2**64
    model = {
        "eq": f"x = {big + 1}",
        "gt": f"x > {big}",
        "ge_float": f"x >= {float(big)}",
        "lt_neg": f"x < {-(2**70)}",
        "between": f"x between {big - 1} and {big + 1}",
        "in": f"x in ({big + 1}, {2**100})",
        "not_in": f"x not in ({big + 1})",
        "ne": f"x != {big}",
    }
    events: list[dict[str, object]] = [
        {"x": v} for v in (big, big + 1, float(big), 2**100, -(2**70) - 1, 2**63, 0, math.inf)
    ]
    expected = model_ids({k: parse_filter(v) for k, v in model.items()}, events)
    assert expected[1] == sorted(["eq", "gt", "ge_float", "between", "in", "ne"])  # the model itself
    for form in FORMS:
        check_matches(build(model).match(as_input(events, form)), expected)


def test_integers_beyond_the_double_range() -> None:
    """Integers too large for a double (``float(x)`` raises OverflowError) are still numbers,
    as literals and as values."""
    huge = 10**400
    model = {
        "gt_one": "x > 1",
        "lt_one": "x < 1",
        "eq_huge": f"x = {huge}",
        "lt_huge": f"x < {huge}",
        "ge_neg_huge": f"x >= {-huge}",
        "in": f"x in (1, {huge})",
        "not_in": f"x not in ({huge})",
        "between": f"x between 0 and {huge}",
        "ne_float": "x != 1.5",
    }
    events: list[dict[str, object]] = [{"x": huge}, {"x": -huge}, {"x": 1}, {"x": 1e308}, {"x": math.inf}]
    expected = model_ids({k: parse_filter(v) for k, v in model.items()}, events)
    assert expected[0] == sorted(["gt_one", "eq_huge", "ge_neg_huge", "in", "between", "ne_float"])
    for form in FORMS:
        check_matches(build(model).match(as_input(events, form)), expected)


def test_numpy_scalars_in_events_mean_their_python_values() -> None:
    """``np.bool_`` is a boolean, ``np.float32(0.1)`` the number it holds exactly, ``np.int64``
    past 2**53 the integer it holds: the index answers as for ``.item()`` of each, whatever the
    input form (``EventBatch.event`` converts numpy scalars of columns the same way)."""
    model = {
        "true": "v = true",
        "ne_false": "v != false",
        "one": "v = 1",
        "gt_tenth": "v > 0.1",
        "eq_tenth": "v = 0.1",
        "gt_2_53": "v > 9007199254740992.0",
        "eq_2_53_1": "v = 9007199254740993",
        "str": "v = 'ab'",
        "str_sw": "v startswith 'a'",
    }
    scalars: list[Any] = [np.bool_(True), np.bool_(False), np.float32(0.1), np.int64(2**53 + 1), np.str_("ab")]
    raw: list[dict[str, object]] = [{"v": x} for x in [*scalars, np.int8(1)]]
    plain = [{"v": x.item()} for x in [*scalars, np.int8(1)]]
    expected = oracle_ids(model, plain)
    for form in FORMS:
        check_matches(build(model).match(as_input(raw, form)), expected)


def test_bytes_column_values_are_of_no_kind() -> None:
    """A numpy bytes ("S") column holds ``bytes``: no number, string or boolean, so only
    ``exists`` holds (never the text of ``str(b'a')``)."""
    model = {
        "eq_a": "x = 'a'",
        "ne_zz": "x != 'zz'",
        "repr": "x = 'b''a'''",
        "sw": "x startswith 'b'",
        "lt": "x < 'z'",
        "exists": "x exists",
    }
    arr = np.array([b"a", b"ab", b""], dtype="S")
    expected = oracle_ids(model, [{"x": v.item()} for v in arr])
    assert expected == [["exists"]] * 3  # bytes are of no kind
    batch = EventBatch.from_columns(3, {"x": (arr, None)})
    check_matches(build(model).match(batch), expected)


# --------------------------------------------------------------------------------------------
# Scale: capacity growth, slot reuse, shared filters, many literals on one attribute
# --------------------------------------------------------------------------------------------


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    pool=st.lists(index_filters(), min_size=40, max_size=80),
    events=st.lists(index_events(), min_size=20, max_size=25),
    seed=st.integers(0, 2**32),
)
def test_thousands_of_subscriptions_in_rounds(pool: list[Filter], events: list[dict[str, object]], seed: int) -> None:
    """~2,500 subscriptions over a pool of few dozen filters (so most share one), added,
    replaced and removed in rounds: the index grows, empties almost completely (slots freed) and
    grows again (slots reused), and is checked after every round, sometimes twice in a row."""
    rng = random.Random(seed)
    index = MatchIndex()
    model: dict[str, Filter] = {}
    sizes = [2500, 2600, 60, 1, 1800, 2600, 0, 900]  # targets: grow, churn, shrink, regrow
    ids = [f"sub{i}" for i in range(4000)]
    for target in sizes:
        for _ in range(3):  # a few changes per target, each a batch of adds, replaces, removes
            live = list(model)
            if len(model) < target:
                fresh = rng.sample([i for i in ids if i not in model], min(target - len(model), 1500))
                for sid in fresh:
                    f = rng.choice(pool)
                    index.add(sid, f)
                    model[sid] = f
            elif len(model) > target:
                for sid in rng.sample(live, len(model) - target):
                    index.remove(sid)
                    del model[sid]
            for sid in rng.sample(list(model), min(len(model), 100)):  # replaces
                f = rng.choice(pool)
                index.add(sid, f)
                model[sid] = f
            if rng.random() < 0.7:
                check_matches(index.match(as_input(events, rng.choice(FORMS))), model_ids(model, events))
        assert len(index) == len(model)
        check_matches(index.match(events), model_ids(model, events))


def test_attribute_first_seen_after_matching() -> None:
    """An attribute that no subscription used when events were matched; one that events carried
    before any subscription named it; a subscription moved from one attribute to another."""
    index = MatchIndex()
    index.add("a", "a > 1")
    events: list[dict[str, object]] = [{"a": 2, "late": "x"}, {"late": "x"}, {"a": 0, "newer": 5}]
    assert index.match(events).all_ids() == [["a"], [], []]
    index.add("late", "late = 'x'")
    assert index.match(events).all_ids() == [["a", "late"], ["late"], []]
    index.add("newer", "newer >= 5 and newer exists")
    assert index.match(events).all_ids() == [["a", "late"], ["late"], ["newer"]]
    index.add("a", "never_seen exists")  # replace: moves to an attribute no event carries
    assert index.match(events).all_ids() == [["late"], ["late"], ["newer"]]
    index.add("b", "late != 'y' and a < 3")
    assert index.match(events).all_ids() == [["b", "late"], ["late"], ["newer"]]
    assert index.match([{"never_seen": None}]).all_ids() == [["a"]]


def _many_numbers(count: int, rng: random.Random) -> list[int | float]:
    values: set[int | float] = set()
    while len(values) < count:
        kind = rng.random()
        if kind < 0.4:
            values.add(rng.randint(-1000, 1000))
        elif kind < 0.8:
            values.add(round(rng.uniform(-1000, 1000), rng.randint(0, 3)))
        else:
            values.add(2**53 + rng.randint(-50, 50))
    return sorted(values)


def _many_strings(count: int, rng: random.Random) -> list[str]:
    values: set[str] = set()
    while len(values) < count:
        values.add("".join(rng.choice("abc") for _ in range(rng.randint(1, 6))))
    return sorted(values)


def test_hundreds_of_literals_on_one_attribute() -> None:
    """300 distinct numeric cut points on ``x`` and 300 distinct string literals on ``s``, with
    every operator, plus ``in`` / ``not in`` lists of all of them: more than any bucket cap."""
    rng = random.Random(20240607)
    numbers = _many_numbers(300, rng)
    strings = _many_strings(300, rng)
    model: dict[str, Filter] = {}
    number_ops = (Op.LT, Op.LE, Op.EQ, Op.GT, Op.GE, Op.NE, Op.BETWEEN, Op.IN, Op.NOT_IN)
    for i, v in enumerate(numbers):
        op = number_ops[i % len(number_ops)]
        values: tuple[Any, ...] = (v,)
        if op is Op.BETWEEN:
            values = (v, numbers[min(i + 7, len(numbers) - 1)])
        elif op in (Op.IN, Op.NOT_IN):
            values = (v, numbers[(i + 3) % len(numbers)])
        model[f"x{i:03d}"] = Filter((Predicate("x", op, values),))
        model[f"xe{i:03d}"] = Filter((Predicate("x", Op.EQ, (v,)),))  # every literal is a point too
    string_ops = (*number_ops, Op.STARTSWITH, Op.ENDSWITH, Op.CONTAINS)
    for i, w in enumerate(strings):
        op = string_ops[i % len(string_ops)]
        values = (w,)
        if op is Op.BETWEEN:
            values = (w, strings[min(i + 7, len(strings) - 1)])
        elif op in (Op.IN, Op.NOT_IN):
            values = (w, strings[(i + 3) % len(strings)])
        model[f"s{i:03d}"] = Filter((Predicate("s", op, values),))
        model[f"se{i:03d}"] = Filter((Predicate("s", Op.STARTSWITH, (w[:3],)),))
    model["x_in_all"] = Filter((Predicate("x", Op.IN, tuple(numbers)),))
    model["x_not_in_all"] = Filter((Predicate("x", Op.NOT_IN, tuple(numbers)),))
    model["s_in_all"] = Filter((Predicate("s", Op.IN, tuple(strings)),))
    model["s_not_in_all"] = Filter((Predicate("s", Op.NOT_IN, tuple(strings)),))
    model["both"] = Filter((Predicate("x", Op.GE, (numbers[150],)), Predicate("s", Op.LT, (strings[150],))))

    events: list[dict[str, object]] = []
    for v in numbers[::2]:
        events += [{"x": v}, {"x": float(v)}, {"x": math.nextafter(float(v), math.inf)}]
        events += [{"x": v + 1 if isinstance(v, int) else math.nextafter(v, -math.inf)}, {"x": v - 0.5}]
    for w in strings[::2]:
        events += [{"s": w}, {"s": w + "a"}, {"s": w[:-1]}, {"s": "c" + w}, {"s": w[:-1] + chr(ord(w[-1]) + 1)}]
    events += [{"x": numbers[200], "s": strings[10]}, {"x": math.nan, "s": 1}, {"x": "1", "s": None}, {}]
    index = build(model)
    expected = model_ids(model, events)
    assert sum(map(len, expected)) > len(events)  # the workload matches a lot
    check_matches(index.match(events), expected)
    # and again after removing half of the literals' subscriptions (cut points go away)
    for sid in list(model)[::2]:
        index.remove(sid)
        del model[sid]
    check_matches(index.match(object_columns(events)), model_ids(model, events))


def test_thousands_of_distinct_filters_over_many_attributes() -> None:
    """1,500 distinct filters over 40 attributes, each attribute with dozens of numeric and string
    literals: many bitset words and many buckets at once (an index that walks its filters in
    cache-sized blocks needs several blocks here)."""
    rng = random.Random(7)
    names = [f"a{j}" for j in range(40)]
    numbers = {name: sorted(rng.sample(range(-500, 500), 40)) for name in names}
    strings = {name: [f"w{k}" for k in rng.sample(range(1000), 70)] for name in names}
    model: dict[str, Filter] = {}
    ops = (Op.LT, Op.LE, Op.EQ, Op.GT, Op.GE, Op.NE, Op.BETWEEN, Op.IN, Op.NOT_IN)
    for i in range(1500):
        predicates = []
        for name in rng.sample(names, rng.choice((1, 1, 2, 3))):
            if rng.random() < 0.5:
                op = rng.choice(ops)
                count = {Op.BETWEEN: 2, Op.IN: 3, Op.NOT_IN: 2}.get(op, 1)
                predicates.append(Predicate(name, op, tuple(sorted(rng.sample(numbers[name], count)))))
            else:
                op = rng.choice((Op.EQ, Op.NE, Op.IN, Op.STARTSWITH))
                count = 2 if op is Op.IN else 1
                predicates.append(Predicate(name, op, tuple(rng.sample(strings[name], count))))
        model[f"f{i:04d}"] = Filter(tuple(predicates))
    for i in range(300):  # and many subscriptions of a few broad filters
        model[f"broad{i:03d}"] = Filter((Predicate(names[i % 3], Op.EXISTS),))
    events: list[dict[str, object]] = []
    for _ in range(150):
        ev: dict[str, object] = {}
        for name in rng.sample(names, 25):
            r = rng.random()
            ev[name] = rng.choice(numbers[name]) if r < 0.45 else rng.choice(strings[name]) if r < 0.9 else 0.5
        events.append(ev)
    expected = model_ids(model, events)
    index = build(model)
    check_matches(index.match(events), expected)
    for sid in rng.sample(list(model), 900):
        index.remove(sid)
        del model[sid]
    check_matches(index.match(object_columns(events)), model_ids(model, events))


def test_batches_with_very_many_matches() -> None:
    """After a batch that matched nothing, batches where every event matches thousands of
    subscriptions, and hundreds of filters that need a string check (``startswith``,
    orderings): any output buffer sized from earlier batches must grow."""
    index = MatchIndex()
    model: dict[str, Filter] = {}
    for i in range(3000):
        model[f"n{i:04d}"] = parse_filter(["x exists", "x >= 0", f"x != {i % 7}"][i % 3])
    for i in range(600):
        model[f"s{i:03d}"] = parse_filter(f"s startswith 'k' and s < 'k{i:03d}'")
    for sid, f in model.items():
        index.add(sid, f)
    quiet: list[dict[str, object]] = [{"y": 1}] * 50
    check_matches(index.match(quiet), [[] for _ in quiet])
    events: list[dict[str, object]] = [{"x": i % 10, "s": f"k{(37 * i) % 650:03d}"} for i in range(120)]
    expected = model_ids(model, events)
    assert min(map(len, expected)) > 2000
    check_matches(index.match(events), expected)
    check_matches(index.match(quiet), [[] for _ in quiet])
    check_matches(index.match(object_columns(events[:7])), expected[:7])


def test_ranks_spread_over_a_large_index() -> None:
    """``sorted_ranks`` orders each event's ids through a bitmap over all ranks and a summary
    bitmap over its words when an event has many ids: here 20,000 subscriptions (313 words, 5
    summary words), events whose ids lie in every summary word, few or many per word, next to
    events with too few ids for the bitmap (sorted instead), in one batch and batch after batch."""
    model: dict[str, Filter] = {}
    for i in range(20_000):
        model[f"s{i:05d}"] = parse_filter(f"x = {i % 1000}" if i % 7 else f"y = {i % 3}")
    index = build(model)
    events: list[dict[str, object]] = [
        {"x": 5},  # 17 ids, one every 1,000 ranks: the sort path
        {"x": 5, "y": 0},  # ~970 ids over every summary word
        {"y": 2},
        {"x": 999, "y": 1},  # up to the last rank
        {"x": 0, "y": 0},  # from the first rank
        {},
    ]
    expected = model_ids(model, events)
    assert len(expected[1]) > 900 and expected[4][0] == "s00000" and expected[3][-1] == "s19999"
    for _ in range(2):  # the bitmaps must be left clear for the next batch
        check_matches(index.match(events), expected)
        check_matches(index.match(events[::-1]), expected[::-1])


# --------------------------------------------------------------------------------------------
# 3. Edges
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_empty_index(form: str) -> None:
    index = MatchIndex()
    assert len(index) == 0 and "s" not in index
    events: list[dict[str, object]] = [{}, {"a": 1}, {"b": None}]
    check_matches(index.match(as_input(events, form)), [[], [], []])
    index.add("s", "a = 1")
    index.remove("s")
    check_matches(index.match(as_input(events, form)), [[], [], []])
    with pytest.raises(KeyError):
        index.remove("s")


def test_empty_batch() -> None:
    index = MatchIndex()
    check_matches(index.match([]), [])
    index.add("s", "a exists")
    for batch in (
        [],
        EventBatch.from_events([]),
        EventBatch.from_columns(0, {}),
        EventBatch.from_columns(0, {"a": (np.array([], dtype=np.float64), None)}),
        EventBatch.from_columns(0, {"a": (np.array([], dtype=object), np.array([], dtype=bool))}),
    ):
        result = index.match(batch)
        check_matches(result, [])
        assert result.offsets.tolist() == [0] and result.counts().tolist() == []
    check_matches(index.match([{"a": 1}]), [["s"]])


def test_columns_present_nowhere_or_unknown() -> None:
    index = MatchIndex()
    index.add("a", "a exists")
    index.add("not_a", "a != 1")
    batch = EventBatch.from_columns(
        3,
        {
            "a": (np.array([1.0, 2.0, np.nan]), np.array([False, False, False])),
            "zz": (np.array(["x", "y", "z"]), None),
        },
    )
    check_matches(index.match(batch), [[], [], []])


@pytest.mark.parametrize("reparse", [False, True])
def test_replace_by_identical_filter(reparse: bool) -> None:
    index = MatchIndex()
    f = parse_filter("a >= 1 and b startswith 'ab'")
    index.add("s1", f)
    index.add("s2", f)
    index.add("other", "a < 1")
    events: list[dict[str, object]] = [{"a": 1, "b": "abc"}, {"a": 0, "b": "abc"}]
    for _ in range(3):
        index.add("s1", parse_filter(str(f)) if reparse else f)
        assert len(index) == 3
        check_matches(index.match(events), [["s1", "s2"], ["other"]])
    index.remove("s2")  # s1's copy must survive the removal of the other
    check_matches(index.match(events), [["s1"], ["other"]])
    index.add("s1", f)
    index.remove("s1")
    check_matches(index.match(events), [[], ["other"]])
    assert len(index) == 1


def test_removing_subscriptions_of_a_shared_filter_one_by_one() -> None:
    index = MatchIndex()
    shared = "a between 1 and 2 and c != 'x'"
    sids = [f"s{i}" for i in range(6)]
    for sid in sids:
        index.add(sid, shared if sid != "s3" else parse_filter(shared))  # text and Filter alike
    index.add("other", "a exists")
    events: list[dict[str, object]] = [{"a": 1.5, "c": "y"}, {"a": 1.5}, {"a": 3, "c": "y"}]
    remaining = list(sids)
    for sid in [sids[2], sids[0], sids[5], sids[1], sids[4]]:
        index.remove(sid)
        remaining.remove(sid)
        check_matches(index.match(events), [sorted([*remaining, "other"]), ["other"], ["other"]])
    index.remove(remaining.pop())  # the last subscription of the shared filter
    check_matches(index.match(events), [["other"], ["other"], ["other"]])
    index.add("again", shared)  # the filter comes back under a new id (a freed slot)
    check_matches(index.match(events), [["again", "other"], ["other"], ["other"]])
    index.add("s0", shared)  # and under an id removed earlier
    check_matches(index.match(events), [["again", "other", "s0"], ["other"], ["other"]])


def test_changes_without_matching_in_between() -> None:
    """Lazily applied changes: several changes to one id before the next match."""
    index = MatchIndex()
    events: list[dict[str, object]] = [{"a": 1}, {"a": 2}, {"b": "x"}]
    index.add("s", "a = 1")
    index.remove("s")
    index.add("s", "a = 2")
    index.add("t", "b = 'x'")
    index.add("s", "a = 1")
    index.remove("t")
    index.add("t", "a = 1")
    index.add("u", "a exists")
    index.remove("u")
    with pytest.raises(KeyError):
        index.remove("u")
    assert len(index) == 2 and "u" not in index and "s" in index
    check_matches(index.match(events), [["s", "t"], [], []])
    index.add("s", "b = 'x'")
    index.add("s", "b = 'x'")
    check_matches(index.match(events), [["t"], [], ["s"]])
    for sid in ("s", "t"):
        index.remove(sid)
    index.add("s", "a = 2")
    check_matches(index.match(events), [[], ["s"], []])


def test_a_failed_add_changes_nothing() -> None:
    index = MatchIndex()
    index.add("s", "a = 1")
    with pytest.raises(FilterError):
        index.add("s", "a = ")
    with pytest.raises(FilterError):
        index.add("new", "flag < true")
    assert len(index) == 1 and "new" not in index
    check_matches(index.match([{"a": 1}]), [["s"]])


def test_matches_counts_and_offsets() -> None:
    index = MatchIndex()
    for i in range(10):
        index.add(f"ge{i}", f"x >= {i}")
    index.add("dup", "x >= 0")
    events: list[dict[str, object]] = [{"x": v} for v in (-1, 0, 4.5, 9, 100)] + [{}]
    result = index.match(events)
    expected_counts = [0, 2, 6, 11, 11, 0]
    assert result.counts().tolist() == expected_counts
    assert result.offsets.tolist() == [0, *np.cumsum(expected_counts).tolist()]
    assert len(result.slots) == sum(expected_counts)
    assert [len(result.ids(i)) for i in range(len(result))] == expected_counts
    assert result.ids(2) == sorted(["dup", "ge0", "ge1", "ge2", "ge3", "ge4"])
    model = {f"ge{i}": parse_filter(f"x >= {i}") for i in range(10)} | {"dup": parse_filter("x >= 0")}
    check_matches(result, model_ids(model, events))


def test_flat_ids_equal_ids_and_refuse_a_changed_index() -> None:
    """``flat_ids`` (one vectorized sort) names the same ids, in the same order, as ``ids(i)``; after a
    change the slots may name other subscriptions, so it refuses instead of answering wrongly."""
    import random

    rng = random.Random(5)
    index = MatchIndex()
    ids = ["b", "a", "a\x00", "B", "é", "s10", "s9", "s1", ""]
    for i, sid in enumerate(ids):
        index.add(sid, f"x >= {i % 4}")
    events = [{"x": rng.randint(-1, 4)} for _ in range(50)]
    result = index.match(events)
    offsets, flat = result.flat_ids()
    expected = [sorted(sid for i, sid in enumerate(ids) if e["x"] >= i % 4) for e in events]
    assert [flat[offsets[i] : offsets[i + 1]].tolist() for i in range(len(events))] == expected
    assert [result.ids(i) for i in range(len(events))] == expected
    index.remove("a")
    with pytest.raises(RuntimeError, match="changed"):
        result.flat_ids()


@pytest.mark.parametrize("cache_bytes", [1 << 18, 64])
def test_equality_filters_in_sorted_blocks_and_runs(cache_bytes: int) -> None:
    """Gryphon-style equality and don't-care filters (many identical ones: runs of subscriptions),
    walked in one block or in many tiny ones (``cache_bytes``), with ids asked for before and after
    the slots are spelled out, and a change after the match that must not alter its answer."""
    rng = random.Random(3)
    model: dict[str, Filter] = {}
    for i in range(2500):
        preds = [f"a{j} = {rng.choice((1, 1, 1, 2, 3))}" for j in range(6) if rng.random() < 0.9 * 0.7**j]
        model[f"g{i:04d}"] = parse_filter(" and ".join(preds or ["a0 = 1"]))
    index = build(model)
    index.cache_bytes = cache_bytes
    events: list[dict[str, object]] = [{f"a{j}": rng.choice((1, 1, 2, 3)) for j in range(6)} for _ in range(60)]
    expected = model_ids(model, events)
    result = index.match(events)
    assert [result.ids(i) for i in range(len(events))] == expected  # from the runs alone
    assert result.counts().tolist() == [len(ids) for ids in expected]
    check_matches(result, expected)
    runs_only = index.match(events)  # nothing spelled out before the change
    index.apply([(sid, None) for sid in list(model)[::3]] + [("new", "a0 = 1")])
    index.flush()
    assert np.array_equal(runs_only.slots, result.slots)  # the member table it reads is left alone
    for sid in list(model)[::3]:
        del model[sid]
    model["new"] = parse_filter("a0 = 1")
    check_matches(index.match(events), model_ids(model, events))


def test_listed_and_whole_row_paths_in_one_batch_while_summaries_change() -> None:
    """Clustered equality filters (few words can match an event: the summary-listed path) beside
    range filters that an event with ``z`` matches all over (the whole-row path), in the same
    batches; the per-word summaries must follow removals that empty words, fids reused by
    another literal's filters, new literals (new rows) and a growing number of distinct filters
    (more words), or the listed path would miss matches."""
    rng = random.Random(11)
    model: dict[str, Filter] = {}
    for i in range(2310):  # distinct equality filters (every a0, a1, a2 triple), clustered by a0
        model[f"eq{i:04d}"] = parse_filter(f"a0 = {i % 30} and a1 = {i % 7} and a2 = {i % 11}")
    for i in range(6000):  # ranges, numbered after them (and enough words that few changed ones are refreshed alone)
        model[f"rg{i:04d}"] = parse_filter(f"z > {i}")
    index = build(model)

    def events(n: int, a0: int | None = None, z: bool = True) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        for _ in range(n):
            ev: dict[str, object] = {"a0": rng.randrange(32) if a0 is None else a0}
            ev |= {"a1": rng.randrange(7), "a2": rng.randrange(11)}
            if z and rng.random() < 0.5:
                ev["z"] = rng.choice((700, 5000))  # the range filters' fids: candidates everywhere
            out.append(ev)
        return out

    def check(evs: list[dict[str, object]]) -> dict[str, int]:
        check_matches(index.match(evs), model_ids(model, evs))
        return dict(index.stats()["paths"])

    paths = check(events(60))
    assert paths["listed"] > 0 and paths["dense"] + paths["sparse"] > 0, paths
    for sid in [s for s in model if s.startswith("eq") and int(s[2:]) % 30 in (3, 4, 5)]:
        index.remove(sid)  # empties the words of a0 = 3, 4, 5
        del model[sid]
    check(events(60))
    rows = index.stats()["rows"]
    for i in range(231):  # new filters of a0 = 7 take the freed fids: words its row did not hold
        a1, a2 = ("!=" if i // 77 != 1 else "=", i % 7), ("!=" if i // 77 != 0 else "=", i % 11)
        model[f"re{i}"] = parse_filter(f"a0 = 7 and a1 {a1[0]} {a1[1]} and a2 {a2[0]} {a2[1]}")
        index.add(f"re{i}", model[f"re{i}"])
    evs = events(40, a0=7, z=False)
    assert check(evs)["listed"] == len(evs)
    assert index.stats()["rows"] == rows  # (existing literals only: no new row)
    for i in range(200):  # new literals: new rows, copied from existing ones
        model[f"new{i}"] = parse_filter(f"a0 = {100 + i % 7} and a1 = {i % 3}")
        index.add(f"new{i}", model[f"new{i}"])
    for i in range(6000):  # many more distinct filters: more words (the rows grow)
        model[f"more{i}"] = parse_filter(f"a0 = {i % 30} and a1 = {i % 7} and a2 = {i}")
        index.add(f"more{i}", model[f"more{i}"])
    assert check(events(60))["listed"] > 0
    check([{"a0": 100 + i % 7, "a1": i % 3, "a2": i} for i in range(20)])


def test_an_empty_change_list_keeps_the_index_version_and_its_ranks() -> None:
    """Nothing to apply starts no new version: later Matches share by_rank with earlier ones (the
    matching workers key their per-rank tables on it); a real change makes a new one."""
    index = MatchIndex()
    index.apply([("a", "x > 1"), ("b", "x > 0")])
    first = index.match([{"x": 2}]).sorted_ranks()[2]
    index.apply([])
    index.apply(iter(()))
    again = index.match([{"x": 2}])
    assert again.sorted_ranks()[2] is first
    assert again.all_ids() == [["a", "b"]]
    index.apply([("c", "x > 5")])
    assert index.match([{"x": 2}]).sorted_ranks()[2] is not first
