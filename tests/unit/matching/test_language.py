"""The filter language (docs/reference/filters.md): parser and its errors, matching against an oracle read
straight from the spec, canonical text round trip, and covering and overlap against brute force."""

from __future__ import annotations

import copy
import dataclasses
import math
import operator
import pickle
from collections.abc import Iterator, Mapping
from itertools import pairwise, product
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from routing.matching.language import (
    END_OF_INPUT,
    Filter,
    FilterError,
    Kind,
    Op,
    Predicate,
    cover_counterexample,
    covers,
    kind_of,
    matching_event,
    overlap_witness,
    overlaps,
    parse_filter,
)
from tests.strategies import (
    SMALL_NAMES,
    attribute_values,
    cover_pairs,
    filter_events,
    filter_predicates,
    filters,
    respellings,
    small_filters,
    small_numbers,
    small_strings,
    string_filters,
    string_predicates,
    tight_filters,
    tight_predicates,
)

PROPERTY = settings(max_examples=100, deadline=None)  # brute-force checks
LIGHT = settings(max_examples=75, deadline=None)  # generation dominates: fewer examples

# --------------------------------------------------------------------------------------------
# The oracle: docs/reference/filters.md read directly, sharing nothing with routing.matching.language but the
# Predicate fields.
# --------------------------------------------------------------------------------------------


def oracle_kind(value: object) -> str | None:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return None


_ORACLE_COMPARE = {
    "=": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def oracle_predicate(p: Predicate, attributes: Mapping[str, object]) -> bool:
    if p.attribute not in attributes:
        return False  # a missing attribute fails every predicate, != and not in included
    value: Any = attributes[p.attribute]
    op = p.op.value
    if op == "exists":
        return True
    if oracle_kind(value) is None or oracle_kind(value) != oracle_kind(p.values[0]):
        return False  # different kinds: false whatever the operator
    if value != value:
        return False  # NaN compares with nothing
    literal: Any = p.values[0]
    if op == "startswith":
        return bool(value.startswith(literal))
    if op == "endswith":
        return bool(value.endswith(literal))
    if op == "contains":
        return literal in value
    if op == "in":
        return any(value == v for v in p.values)
    if op == "not in":
        return all(value != v for v in p.values)
    if op == "between":
        high: Any = p.values[1]
        return bool(literal <= value <= high)
    return bool(_ORACLE_COMPARE[op](value, literal))


def oracle_matches(f: Filter, attributes: Mapping[str, object]) -> bool:
    return all(oracle_predicate(p, attributes) for p in f.predicates)


_ABSENT = object()
_EXTRA_CHARS = ("\x00", "a", "b", "c")


def brute_domain(name: str, *fs: Filter) -> list[object]:
    """Values for one attribute: one of every kind, NaN, 'absent', and the filters' literals with
    their neighbours (numbers +-0.25, 0.5, 1 and midpoints; strings' prefixes, one-character
    extensions either side, neighbours of the last character, and concatenations)."""
    literals = [v for f in fs for p in f.predicates if p.attribute == name for v in p.values]
    numbers: list[Any] = sorted({v for v in literals if oracle_kind(v) == "number"})
    strings: list[str] = sorted({v for v in literals if isinstance(v, str)})
    values: list[object] = [_ABSENT, 0, 1.5, "", "a", True, False, math.nan]
    for x in numbers:
        values += [x + d for d in (-1, -0.5, -0.25, 0, 0.25, 0.5, 1)] + [float(x)]
    values += [(x + y) / 2 for x, y in pairwise(numbers)]
    for s in strings:
        values += [s[:i] for i in range(len(s) + 1)]
        values += [s + c for c in _EXTRA_CHARS] + [c + s for c in _EXTRA_CHARS] + [s + t for t in strings]
        if s:
            values += [s[:-1] + chr(ord(s[-1]) + 1)] + ([s[:-1] + chr(ord(s[-1]) - 1)] if ord(s[-1]) else [])
    unique: dict[tuple[type, str], object] = {}
    for v in values:
        unique.setdefault((type(v), repr(v)), v)
    return list(unique.values())


def brute_events(*fs: Filter, domain: list[object] | None = None) -> Iterator[dict[str, object]]:
    names = sorted({p.attribute for f in fs for p in f.predicates})
    domains = [domain if domain is not None else brute_domain(n, *fs) for n in names]
    for combination in product(*domains):
        yield {n: v for n, v in zip(names, combination, strict=True) if v is not _ABSENT}


# strings over a small alphabet, every one up to length 4 (for one-attribute string checks)
STRING_DOMAIN: list[object] = [
    "".join(cs) for n in range(5) for cs in product(("\x00", "a", "b", "c", "'"), repeat=n) if n < 4 or "'" not in cs
]


def test_oracle_reads_the_spec() -> None:
    p = Predicate("x", Op.NE, (1,))
    assert oracle_predicate(p, {"x": 2}) and not oracle_predicate(p, {}) and not oracle_predicate(p, {"x": True})
    assert not oracle_predicate(p, {"x": math.nan}) and not oracle_predicate(p, {"x": "2"})
    assert oracle_predicate(Predicate("x", Op.EXISTS), {"x": None})


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------


def test_the_spec_examples_parse() -> None:
    f = parse_filter("symbol = 'IBM' and price < 120.5 and volume >= 1000")
    assert f.predicates == (
        Predicate("symbol", Op.EQ, ("IBM",)),
        Predicate("price", Op.LT, (120.5,)),
        Predicate("volume", Op.GE, (1000,)),
    )
    f = parse_filter("region in ('eu', 'us') and price between 10 and 20 and not_before exists")
    assert [p.op for p in f.predicates] == [Op.IN, Op.BETWEEN, Op.EXISTS]
    f = parse_filter("name startswith 'air' and name endswith 'port' and note contains 'late' and kind != 'test'")
    assert [p.op for p in f.predicates] == [Op.STARTSWITH, Op.ENDSWITH, Op.CONTAINS, Op.NE]
    assert f.attributes() == ("name", "note", "kind")


def test_literals_keywords_and_names() -> None:
    f = parse_filter("a = 1.5 AND b = -2e3 aNd c = 'it''s' and d = TRUE and e = false and f NOT IN (-0, 7)")
    assert [p.values for p in f.predicates] == [(1.5,), (-2000.0,), ("it's",), (True,), (False,), (0, 7)]
    assert type(f.predicates[1].values[0]) is float and type(f.predicates[5].values[0]) is int
    assert parse_filter("x = 12345678901234567890123").predicates[0].values == (12345678901234567890123,)
    assert parse_filter("x='a'and y<=2").predicates[1] == Predicate("y", Op.LE, (2,))
    assert parse_filter("s = ''").predicates[0].values == ("",)
    assert parse_filter("s = ''''").predicates[0].values == ("'",)
    # keywords are names where a name is due
    f = parse_filter("and = 1 and not not in (2) and exists exists and in In ('x') and true = true")
    assert [(p.attribute, p.op) for p in f.predicates] == [
        ("and", Op.EQ),
        ("not", Op.NOT_IN),
        ("exists", Op.EXISTS),
        ("in", Op.IN),
        ("true", Op.EQ),
    ]
    assert parse_filter("a.b_1.c between 'a' and 'b'").predicates[0].attribute == "a.b_1.c"
    assert parse_filter("_x exists").attributes() == ("_x",)


OPERATORS = "an operator (=, !=, <, <=, >, >=, between, in, not in, startswith, endswith, contains, exists)"
LITERAL = "a literal (number, 'string', true or false)"
NOT_BOOLEAN = "a number or a 'string' (booleans take only = and !=)"

ERRORS = [
    # (text, position, found, expected)
    ("", 0, END_OF_INPUT, "an attribute name"),
    ("   ", 3, END_OF_INPUT, "an attribute name"),
    ("1x = 2", 0, "1x", "an attribute name"),
    ("price 5", 6, "5", OPERATORS),
    ("price # 5", 6, "#", OPERATORS),
    ("price ! 5", 6, "!", OPERATORS),
    ("price", 5, END_OF_INPUT, OPERATORS),
    ("prïce = 1", 2, "ï", OPERATORS),
    ("price <", 7, END_OF_INPUT, LITERAL),
    ("price < )", 8, ")", LITERAL),
    ("price < abc", 8, "abc", LITERAL),
    ("price < -", 8, "-", LITERAL),
    ("price < 1.2.3", 8, "1.2.3", LITERAL),
    ("price < 1e", 8, "1e", LITERAL),
    ("price < 12abc", 8, "12abc", LITERAL),
    ("price < 1e999", 8, "1e999", "a number within the range of a double (about ±1.8e308)"),
    pytest.param("price < " + "9" * 4001, 8, "9" * 4001, "an integer of at most 4000 digits", id="4001 digits"),
    ("s = 'abc", 8, END_OF_INPUT, "a quote (') closing the string opened at position 4"),
    ("s = 'it''s", 10, END_OF_INPUT, "a quote (') closing the string opened at position 4"),
    ("x between 1 2", 12, "2", "'and' after the lower bound (between 1 and ...)"),
    ("x between 1 and", 15, END_OF_INPUT, LITERAL),
    ("x in 1", 5, "1", "'(' opening the list of values"),
    ("x in ()", 6, ")", LITERAL),
    ("region in ('eu', )", 17, ")", LITERAL),
    ("x in (1 2)", 8, "2", "',' or ')'"),
    ("x in (1", 7, END_OF_INPUT, "',' or ')'"),
    ("x not 5", 6, "5", "'in' (as in 'not in')"),
    ("x = 1 y = 2", 6, "y", "'and' or end of input"),
    ("x = 1 and", 9, END_OF_INPUT, "an attribute name"),
    ("x = 1 and and", 13, END_OF_INPUT, OPERATORS),
    ("x = 1 )", 6, ")", "'and' or end of input"),
    ("x = 1 and y = 2 $", 16, "$", "'and' or end of input"),
    # type errors
    ("flag < true", 7, "true", NOT_BOOLEAN),
    ("flag >= FALSE", 8, "FALSE", NOT_BOOLEAN),
    ("flag between true and false", 13, "true", NOT_BOOLEAN),
    ("flag in (true)", 9, "true", NOT_BOOLEAN),
    ("flag not in (false, true)", 13, "false", NOT_BOOLEAN),
    ("x in (1, 'a')", 9, "'a'", "a number like the first value 1"),
    ("x in ('a', 'b', 3)", 16, "3", "a 'string' like the first value 'a'"),
    ("x not in (1, true)", 13, "true", "a number like the first value 1"),
    ("x between 1 and 'b'", 16, "'b'", "a number like the lower bound 1"),
    ("x between 'a' and 2.5", 18, "2.5", "a 'string' like the lower bound 'a'"),
    ("name startswith 5", 16, "5", "a 'string' (startswith takes a string)"),
    ("name endswith true", 14, "true", "a 'string' (endswith takes a string)"),
    ("name contains -1.5", 14, "-1.5", "a 'string' (contains takes a string)"),
]


@pytest.mark.parametrize(("text", "position", "found", "expected"), ERRORS)
def test_every_error_names_position_found_and_expected(text: str, position: int, found: str, expected: str) -> None:
    with pytest.raises(FilterError) as caught:
        parse_filter(text)
    error = caught.value
    assert (error.position, error.found, error.expected) == (position, found, expected)
    assert isinstance(error, ValueError) and error.text == text
    shown = found if found == END_OF_INPUT else repr(found)
    assert str(error).splitlines()[0] == f"at position {position}: expected {expected}, found {shown}"
    assert error.found == END_OF_INPUT or text[position:].startswith(found)


def test_error_message_points_a_caret_at_the_position() -> None:
    with pytest.raises(FilterError) as caught:
        parse_filter("region in ('eu', )")
    assert str(caught.value) == (
        "at position 17: expected a literal (number, 'string', true or false), found ')'\n"
        "  region in ('eu', )\n"
        "                   ^"
    )
    with pytest.raises(FilterError) as caught:  # several lines: the line of the position, tabs kept
        parse_filter("a = 1 and\n\tb < #\nand c = 2")
    assert caught.value.position == 15
    assert str(caught.value).splitlines()[1:] == ["  \tb < #", "  \t    ^"]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=" ab=<>!'(),.-1eE_\tnotiadxsw", max_size=30))
def test_any_text_parses_or_fails_with_a_true_position(text: str) -> None:
    try:
        f = parse_filter(text)
    except FilterError as error:
        assert 0 <= error.position <= len(text)
        assert error.found == END_OF_INPUT or text[error.position :].startswith(error.found)
        assert error.found != END_OF_INPUT or text[error.position :].strip() == ""
    else:
        assert parse_filter(str(f)) == f


# --------------------------------------------------------------------------------------------
# Data model and canonical text
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attribute", "op", "values", "message"),
    [
        ("1x", Op.EQ, (1,), "does not match"),
        ("a-b", Op.EQ, (1,), "does not match"),
        ("x", "=", (1,), "is not an Op"),
        ("x", Op.EXISTS, (1,), "cannot take 1"),
        ("x", Op.EQ, (), "cannot take 0"),
        ("x", Op.BETWEEN, (1,), "cannot take 1"),
        ("x", Op.IN, (), "cannot take 0"),
        ("x", Op.EQ, (None,), "numbers, strings or booleans"),
        ("x", Op.IN, (1, "a"), "not of one kind"),
        ("x", Op.IN, (1, True), "not of one kind"),
        ("x", Op.EQ, (math.nan,), "finite"),
        ("x", Op.LT, (math.inf,), "finite"),
        ("x", Op.LT, (True,), "booleans take only"),
        ("x", Op.IN, (True,), "booleans take only"),
        ("x", Op.STARTSWITH, (5,), "takes a string"),
    ],
)
def test_invalid_predicates_are_refused(attribute: str, op: Any, values: tuple[Any, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Predicate(attribute, op, values)


def test_a_filter_needs_a_predicate() -> None:
    with pytest.raises(ValueError, match="at least one predicate"):
        Filter(())


def test_equality_keeps_kinds_apart() -> None:
    assert Predicate("x", Op.EQ, (1,)) != Predicate("x", Op.EQ, (True,))
    assert hash(Predicate("x", Op.EQ, (1,))) != hash(Predicate("x", Op.EQ, (True,)))
    assert Predicate("x", Op.EQ, (1,)) == Predicate("x", Op.EQ, (1.0,))  # same values match
    assert parse_filter("x in (1)") == Filter((Predicate("x", Op.IN, [1]),))  # type: ignore[arg-type]
    assert len({parse_filter("x = 1 and y exists"), parse_filter("x  =  1 AND y EXISTS")}) == 1


def test_filters_pickle_and_copy() -> None:
    f = parse_filter("x between 1 and 2 and s startswith 'a' and flag = true")
    for again in (pickle.loads(pickle.dumps(f)), copy.deepcopy(f), copy.copy(f)):
        assert again == f and again.matches({"x": 1.5, "s": "ab", "flag": True})
    assert dataclasses.replace(f.predicates[0], values=(5, 6)).matches(True, 5.5)


@LIGHT
@given(filters())
def test_canonical_text_round_trips(f: Filter) -> None:
    text = str(f)
    again = parse_filter(text)
    assert again == f
    assert str(again) == text
    assert [type(v) for p in again.predicates for v in p.values] == [type(v) for p in f.predicates for v in p.values]


@LIGHT
@given(filters().flatmap(lambda f: st.tuples(st.just(f), respellings(f))))
def test_keywords_any_case_and_any_whitespace(pair: tuple[Filter, str]) -> None:
    f, text = pair
    assert parse_filter(text) == f


def _spelled(f: Filter) -> list[tuple[str, object, tuple[tuple[type, object], ...]]]:
    """A filter's predicates with each literal's type: what the fast path must reproduce exactly."""
    return [(p.attribute, p.op, tuple((type(v), v) for v in p.values)) for p in f.predicates]


def _by_the_parser(text: str) -> Filter | None:
    from routing.matching.language import _Parser

    try:
        return _Parser(text).filter()
    except (FilterError, ValueError):
        return None


@LIGHT
@given(filters().flatmap(lambda f: st.tuples(st.just(f), respellings(f))))
def test_the_simple_path_parses_what_the_parser_does_or_leaves_it(pair: tuple[Filter, str]) -> None:
    from routing.matching.language import _parse_simple

    f, text = pair
    for spelling in (text, str(f)):
        fast = _parse_simple(spelling)
        event("simple path" if fast is not None else "parser")
        if fast is not None:
            assert _spelled(fast) == _spelled(f)
            assert fast.matches({}) is False


_PIECES = st.sampled_from(
    [
        "a",
        "x.y",
        "_b",
        "and",
        "AND",
        "between",
        "Between",
        "true",
        "FALSE",
        "in",
        "not",
        "exists",
        "=",
        "!=",
        "<",
        "<=",
        ">",
        ">=",
        "==",
        "=<",
        "(",
        ")",
        ",",
        "'",
        "''",
        "'a b'",
        "'and'",
        "0",
        "-0",
        "007",
        "-12",
        "1.5",
        "1e3",
        "123456789012345678",
        "1234567890123456789",
        "9" * 40,
        "-",
        "+1",
        "1_0",
        "1.",
        "a1",
        "x'y'",
        "falſe",
        "\u212a",
        "ANd",
    ]
)
_GAPS = st.sampled_from(["", " ", "  ", "\t", "\n", "\u00a0", "\u2003"])


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.tuples(_PIECES, _GAPS), min_size=1, max_size=12))
def test_the_simple_path_never_accepts_what_the_parser_refuses_or_reads_differently(
    pieces: list[tuple[str, str]],
) -> None:
    """Token soup, with and without gaps: whatever the simple path accepts, the parser parses to a
    filter with the same predicates and literal types."""
    from routing.matching.language import _parse_simple

    text = "".join(piece + gap for piece, gap in pieces)
    fast = _parse_simple(text)
    if fast is not None:
        slow = _by_the_parser(text)
        assert slow is not None, text
        assert _spelled(fast) == _spelled(slow), text


@pytest.mark.parametrize(
    "text",
    [
        "a = 1",
        "a=1 and b!=-2 AND c between 3 and 4",
        "and = 1 and between between 1 and 2",
        "s = 'x and y' and t != '' and f = TRUE and g != false",
        "  a >= 0  ",
        "a between -5 and -10",
    ],
)
def test_common_shapes_take_the_simple_path_and_equal_the_parser(text: str) -> None:
    from routing.matching.language import _parse_simple

    fast = _parse_simple(text)
    slow = _by_the_parser(text)
    assert fast is not None and slow is not None
    assert _spelled(fast) == _spelled(slow) and fast == slow and str(fast) == str(slow)
    assert fast.matches({p.attribute: p.values[0] for p in fast.predicates}) == slow.matches(
        {p.attribute: p.values[0] for p in fast.predicates}
    )


@pytest.mark.parametrize(
    "text",
    ["a < true", "a = 1.5", "a = 'it''s'", "a in (1)", "a = 1and b = 2", "a = 1 and", "a = 1 or b = 2", ""],
)
def test_other_shapes_go_to_the_parser(text: str) -> None:
    from routing.matching.language import _parse_simple

    assert _parse_simple(text) is None


# --------------------------------------------------------------------------------------------
# Matching
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", list(Op))
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_every_operator_matches_like_the_oracle(op: Op, data: st.DataObject) -> None:
    p = data.draw(filter_predicates(st.just("a"), ops=(op,), numbers=st.sampled_from((-1, 0, 0.5, 1, 2))))
    values = attribute_values(strings=st.sampled_from(("", "a", "ab", "b", "ba", "abc")))
    attributes = data.draw(filter_events(("a",), values))
    expected = oracle_predicate(p, attributes)
    assert p.matches("a" in attributes, attributes.get("a")) == expected
    assert Filter((p,)).matches(attributes) == expected


@LIGHT
@given(small_filters(max_predicates=4), filter_events())
def test_filters_match_like_the_oracle(f: Filter, attributes: dict[str, object]) -> None:
    assert f.matches(attributes) == oracle_matches(f, attributes)


@LIGHT
@given(filters(), st.dictionaries(st.sampled_from(["a", "b", "and"]), attribute_values(), max_size=3))
def test_any_filter_matches_like_the_oracle(f: Filter, attributes: dict[str, object]) -> None:
    assert f.matches(attributes) == oracle_matches(f, attributes)


@pytest.mark.parametrize("text", ["x = 1", "x != 1", "x not in (1, 2)", "x != 'a'", "x not in ('a')", "x != true"])
def test_a_missing_attribute_fails_even_negations(text: str) -> None:
    f = parse_filter(text)
    assert not f.matches({}) and not f.matches({"y": 1})
    assert not f.predicates[0].matches(False, None)


def test_kinds_do_not_mix() -> None:
    assert kind_of(True) is Kind.BOOLEAN and kind_of(1) is Kind.NUMBER and kind_of(1.5) is Kind.NUMBER
    assert not parse_filter("x = 1").matches({"x": True})  # bool is not a number
    assert not parse_filter("x != 1").matches({"x": True})  # different kinds: false, != included
    assert not parse_filter("x not in (1, 2)").matches({"x": "a"})
    assert not parse_filter("flag = true").matches({"flag": 1})
    assert parse_filter("flag != true").matches({"flag": False})
    assert parse_filter("x = 1").matches({"x": 1.0}) and parse_filter("x < 1.5").matches({"x": 1})
    assert parse_filter("x > 9007199254740992").matches({"x": 9007199254740993})  # exact int/float order
    assert not parse_filter("x > 9007199254740992").matches({"x": float(2**53)})
    assert not parse_filter("x < 'abc'").matches({"x": 1})
    for text in ("s startswith '1'", "s endswith '1'", "s contains '1'"):
        assert not parse_filter(text).matches({"s": 1}) and parse_filter(text).matches({"s": "1"})
    for value in (None, [1], {"a": 1}, b"a"):
        assert parse_filter("x exists").matches({"x": value})
        assert not parse_filter("x != 1 and x != 'a'").matches({"x": value})


def test_strings_order_by_code_point() -> None:
    assert parse_filter("s < 'a'").matches({"s": "Z"})  # 'Z' (90) < 'a' (97)
    assert parse_filter("s > 'z'").matches({"s": "é"})
    assert parse_filter("s < 'ab'").matches({"s": "a"}) and parse_filter("s < 'ab'").matches({"s": "aa\uffff"})
    assert parse_filter("s between 'a' and 'b'").matches({"s": "b"})
    assert not parse_filter("s between 'a' and 'b'").matches({"s": "ba"})


@pytest.mark.parametrize(
    "text",
    ["x = 1", "x != 1", "x < 1", "x <= 1", "x > 1", "x >= 1", "x between 0 and 2", "x in (1, 2)", "x not in (1, 2)"],
)
def test_nan_compares_with_nothing(text: str) -> None:
    assert not parse_filter(text).matches({"x": math.nan})
    assert parse_filter("x exists").matches({"x": math.nan})


def test_infinities_are_ordinary_numbers() -> None:
    assert parse_filter("x > 1e308").matches({"x": math.inf})
    assert parse_filter("x != 1 and x < 0").matches({"x": -math.inf})


# --------------------------------------------------------------------------------------------
# Covering and overlap
# --------------------------------------------------------------------------------------------

COVERS = [
    # (f2, f1, f1 covered by f2)
    ("name >= 'ab' and name < 'ac'", "name startswith 'ab'", True),
    ("name startswith 'ab'", "name >= 'ab' and name < 'ac'", True),  # the same set of strings
    ("name startswith 'ab'", "name >= 'ab' and name <= 'ac'", False),
    ("s > 'a'", "s startswith 'a' and s != 'a'", True),
    ("s > 'a'", "s >= 'a\x00'", True),
    ("s contains 'a'", "s > 'a' and s < 'b'", True),
    ("s startswith 'a'", "s > 'a' and s < 'b'", True),
    ("s startswith 'a'", "s > 'a' and s <= 'b'", False),
    ("s contains 'ab'", "s startswith 'a' and s endswith 'b'", False),
    ("s contains 'ab'", "s startswith 'ab'", True),
    ("s contains 'ab'", "s contains 'xaby'", True),
    ("s endswith 'b'", "s in ('ab', 'b')", True),
    ("s endswith 'b'", "s in ('ab', 'ba')", False),
    ("s contains 'aa'", "s contains 'a' and s not in ('a')", False),
    ("s != 'a'", "s exists", False),
    ("s != 'a'", "s = 'b'", True),
    ("s not in ('a', 'b')", "s > 'a' and s < 'b'", True),
    ("x != 3", "x > 1 and x < 2", True),
    ("x exists", "x = 1", True),
    ("x exists", "x exists and x != 1", True),
    ("x = 1", "x exists", False),
    ("x < 5", "y = 1", False),  # f1 matches events without x
    ("x < 5", "x = 'a'", False),
    ("x = 1", "x = 1 and x = 2", True),  # f1 matches nothing
    ("x = 1 and y = 2", "x = 1 and x != 1", True),
    ("x between 1 and 2", "x in (1, 1.5, 2)", True),
    ("x in (1, 2)", "x between 1 and 2", False),
    ("x in (1, 2)", "x between 1 and 2 and x != 1.5", False),
    ("x = 1.0", "x between 1 and 1", True),
    ("x >= 1", "x > 1", True),
    ("x > 1", "x >= 1", False),
    ("x < 1 and x > 0", "x between 0.25 and 0.75", True),
    ("x = 5", "x > 1 and x < 1.0000000000000002", True),  # no float or int between adjacent doubles
    ("x = 9007199254740993", "x > 9007199254740992 and x < 9007199254740994.0", True),  # only 2**53 + 1
    ("x != 9007199254740993", "x > 9007199254740992 and x < 9007199254740994.0", False),
    ("flag = true", "flag != false", True),
    ("flag = true", "flag exists", False),
    ("flag != true", "flag = true", False),
]


@pytest.mark.parametrize(("general", "specific", "expected"), COVERS)
def test_covering_cases(general: str, specific: str, expected: bool) -> None:
    f2, f1 = parse_filter(general), parse_filter(specific)
    assert covers(f2, f1) is expected
    counterexample = cover_counterexample(f2, f1)
    if expected:
        assert counterexample is None
    else:
        assert counterexample is not None
        assert oracle_matches(f1, counterexample) and not oracle_matches(f2, counterexample)


OVERLAPS = [
    ("s > 'a'", "s < 'a\x00'", False),
    ("x > 1", "x < 1.0000000000000002", False),
    ("x > 9007199254740992", "x < 9007199254740994.0", True),
    ("s startswith 'ab'", "s endswith 'ba'", True),
    ("s startswith 'ab' and s endswith 'ba'", "s not in ('aba', 'abba')", True),
    ("s startswith 'ab' and s endswith 'ba'", "s < 'ab\x00'", False),  # only 'ab' is below 'ab\x00'
    ("s startswith 'b'", "s < 'b'", False),
    ("s contains 'abc'", "s <= 'ab'", True),
    ("s contains 'b' and s < 'b'", "s startswith 'a'", True),
    ("s contains 'b'", "s between 'a' and 'a'", False),
    ("s endswith 'ab' and s startswith 'ba'", "s contains 'bab' and s < 'bab'", True),  # 'baabab'
    ("flag = true", "flag != true", False),
    ("x = 1", "x = 1.0", True),
    ("x = 1", "x = '1'", False),
    ("x = 1", "y = 1", True),
    ("x != 1", "x != 'a'", False),  # a value has one kind
    ("x between 1 and 2 and x != 1.5", "x in (1.5, 3)", False),
    ("x > 1.7976931348623157e308", "x exists", True),  # an int beyond every double (or inf)
]


@pytest.mark.parametrize(("left", "right", "expected"), OVERLAPS)
def test_overlap_cases(left: str, right: str, expected: bool) -> None:
    f1, f2 = parse_filter(left), parse_filter(right)
    assert overlaps(f1, f2) is expected and overlaps(f2, f1) is expected
    witness = overlap_witness(f1, f2)
    assert (witness is not None) is expected
    if witness is not None:
        assert oracle_matches(f1, witness) and oracle_matches(f2, witness)


def test_witnesses_are_readable() -> None:
    assert matching_event(parse_filter("x > 3 and x < 5 and s startswith 'air' and s endswith 'port'")) == {
        "x": 4,
        "s": "airport",
    }
    assert matching_event(parse_filter("x > 1 and x < 2")) == {"x": 1.5}
    assert cover_counterexample(parse_filter("flag = true"), parse_filter("flag exists")) == {"flag": 0}


def test_only_exists_falls_back_to_nan_when_every_kind_is_excluded() -> None:
    from routing.matching.language import _solve

    literals = [(Predicate("x", Op.EXISTS), False)]
    literals += [(parse_filter(t).predicates[0], True) for t in ("x < 1", "x >= 1", "x < 'a'", "x >= 'a'")]
    literals += [(parse_filter(t).predicates[0], True) for t in ("x = true", "x = false")]
    value = _solve(literals)
    assert isinstance(value, float) and math.isnan(value)


def _check_cover(f2: Filter, f1: Filter, domain: list[object] | None = None) -> None:
    counterexample = cover_counterexample(f2, f1)
    assert covers(f2, f1) is (counterexample is None)
    if counterexample is None:
        event("covered" if matching_event(f1) is not None else "covered: f1 matches nothing")
        for attributes in brute_events(f1, f2, domain=domain):
            assert not oracle_matches(f1, attributes) or oracle_matches(f2, attributes), attributes
    else:
        event("not covered")
        assert oracle_matches(f1, counterexample) and not oracle_matches(f2, counterexample)


def _check_overlap(f1: Filter, f2: Filter, domain: list[object] | None = None) -> None:
    witness = overlap_witness(f1, f2)
    assert overlaps(f1, f2) is (witness is not None) is overlaps(f2, f1)
    if witness is None:
        event("disjoint")
        for attributes in brute_events(f1, f2, domain=domain):
            assert not (oracle_matches(f1, attributes) and oracle_matches(f2, attributes)), attributes
    else:
        event("overlap")
        assert oracle_matches(f1, witness) and oracle_matches(f2, witness)


@PROPERTY
@given(cover_pairs(small_filters(), filter_predicates(st.sampled_from(SMALL_NAMES), small_numbers, small_strings)))
def test_covering_against_brute_force(pair: tuple[Filter, Filter]) -> None:
    _check_cover(*pair)


@PROPERTY
@given(small_filters(), small_filters())
def test_overlap_against_brute_force(f1: Filter, f2: Filter) -> None:
    _check_overlap(f1, f2)


@PROPERTY
@given(cover_pairs(string_filters(), string_predicates()))
def test_string_covering_against_every_short_string(pair: tuple[Filter, Filter]) -> None:
    _check_cover(*pair, domain=[_ABSENT, *STRING_DOMAIN])


@PROPERTY
@given(string_filters(), string_filters())
def test_string_overlap_against_every_short_string(f1: Filter, f2: Filter) -> None:
    _check_overlap(f1, f2, domain=[_ABSENT, *STRING_DOMAIN])


@PROPERTY
@given(small_filters(max_predicates=4))
def test_matching_event_against_brute_force(f: Filter) -> None:
    witness = matching_event(f)
    if witness is None:
        assert not any(oracle_matches(f, attributes) for attributes in brute_events(f))
    else:
        assert oracle_matches(f, witness)
    assert covers(f, f)
    assert overlaps(f, f) is (witness is not None)


@LIGHT
@given(filters(max_predicates=3), filters(max_predicates=3))
def test_witnesses_hold_for_any_literals(f1: Filter, f2: Filter) -> None:
    for f in (f1, f2):
        witness = matching_event(f)
        assert witness is None or oracle_matches(f, witness)
    counterexample = cover_counterexample(f2, f1)
    assert counterexample is None or (oracle_matches(f1, counterexample) and not oracle_matches(f2, counterexample))
    witness = overlap_witness(f1, f2)
    assert witness is None or (oracle_matches(f1, witness) and oracle_matches(f2, witness))


def tight_domain(*fs: Filter) -> list[object]:
    """Every literal with its neighbouring doubles and integers: within one gap between
    literals, these hit a representable number whenever there is one."""
    literals: set[Any] = {v for f in fs for p in f.predicates for v in p.values}
    values: list[object] = [_ABSENT, "a", True, math.nan]
    for x in literals:
        f = float(x)
        values += [x, f, math.nextafter(f, math.inf), math.nextafter(f, -math.inf)]
        values += [math.nextafter(math.nextafter(f, math.inf), math.inf), math.nextafter(math.nextafter(f, 0), 0)]
        values += [math.floor(x) + d for d in (-2, -1, 0, 1, 2)]
    return list({(type(v), repr(v)): v for v in values}.values())


@PROPERTY
@given(cover_pairs(tight_filters(), tight_predicates()))
def test_numeric_covering_where_doubles_are_sparse(pair: tuple[Filter, Filter]) -> None:
    _check_cover(*pair, domain=tight_domain(*pair))


@PROPERTY
@given(tight_filters(), tight_filters())
def test_numeric_overlap_where_doubles_are_sparse(f1: Filter, f2: Filter) -> None:
    _check_overlap(f1, f2, domain=tight_domain(f1, f2))


def test_parsed_predicates_are_shared_but_kinds_stay_apart() -> None:
    """The parser reuses one Predicate per (name, operator, typed literals): 1, 1.0 and true
    are three different literals, and a shared predicate answers as a fresh one."""
    a, b = parse_filter("x = 1 and y = 'a'"), parse_filter("y = 'a' and x = 1")
    assert a.predicates[0] is b.predicates[1] and a.predicates[1] is b.predicates[0]
    one, one_f, true = (parse_filter(f"x = {v}").predicates[0] for v in ("1", "1.0", "true"))
    assert one is not one_f and one.values == (1,) and type(one_f.values[0]) is float and true.values == (True,)
    assert not true.matches(True, 1) and one.matches(True, 1.0) and one_f.matches(True, 1)
    assert parse_filter("x = 1").predicates[0] == Predicate("x", Op.EQ, (1,))


# --------------------------------------------------------------------------------------------
# Validation without building the filter
# --------------------------------------------------------------------------------------------


_NUMERIC_OPS = frozenset({Op.BETWEEN, Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE})


def _check_validation(text: str) -> None:
    """``validate_filter`` raises exactly what ``parse_filter`` raises (or neither raises), and its
    pattern accepts exactly what the simple path parses."""
    from routing.matching.language import _NUMERIC_FILTER, _SIMPLE_FILTER, _parse_simple, validate_filter
    from routing.matching.numeric_form import read_numeric_form

    assert (_SIMPLE_FILTER.fullmatch(text) is not None) == (_parse_simple(text) is not None), text
    numeric = _NUMERIC_FILTER.fullmatch(text) is not None
    assert (read_numeric_form([text])[0][0] >= 0) == numeric, text  # the bytes reader is the pattern
    if numeric:  # the numeric form is a part of the simple shapes
        assert _SIMPLE_FILTER.fullmatch(text) is not None, text
        assert all(p.op in _NUMERIC_OPS and p._kind is Kind.NUMBER for p in parse_filter(text).predicates), text
    try:
        parse_filter(text)
    except (FilterError, ValueError) as error:
        with pytest.raises(type(error)) as raised:
            validate_filter(text)
        assert str(raised.value) == str(error)
    else:
        validate_filter(text)


@LIGHT
@given(filters().flatmap(lambda f: st.tuples(st.just(f), respellings(f))))
def test_validation_of_any_filter_and_its_respellings(pair: tuple[Filter, str]) -> None:
    f, text = pair
    _check_validation(text)
    _check_validation(str(f))


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.tuples(_PIECES, _GAPS), min_size=1, max_size=12))
def test_validation_of_token_soup(pieces: list[tuple[str, str]]) -> None:
    _check_validation("".join(piece + gap for piece, gap in pieces))


_BETWEEN_GAP = st.one_of(st.just(" "), st.just(" "), st.just(" "), st.sampled_from(["  ", "\t", "", "\n"]))
_BETWEEN_NAME = st.one_of(
    st.sampled_from(["a", "x.y", "_b", "a1", "and", "between"]), st.sampled_from(["1a", "'s'", "a-b", ""])
)
_BETWEEN_LITERAL = st.one_of(
    st.sampled_from(["1", "-2", "007", "-0", "123456789012345", "-12345678901234"]),
    st.sampled_from(["-", "1.5", "1234567890123456", "x", "1e3", ""]),
)


@st.composite
def _between_near_misses(draw: st.DrawFn) -> str:
    """Texts of the numeric form (``name between low and high and name op literal ...``) and near
    misses: other names, literals, operators, keywords and gaps in its places."""

    def pick(options: list[str]) -> str:
        return draw(st.sampled_from(options))

    parts = []
    for k in range(draw(st.integers(1, 4))):
        if k:
            parts += [draw(_BETWEEN_GAP), pick(["and"] * 6 + ["AND", "or"]), draw(_BETWEEN_GAP)]
        if draw(st.booleans()):  # a comparison
            ops = ["=", "!=", "<", "<=", ">", ">=", "==", "=<", "<>", "!", "between"]
            parts += [draw(_BETWEEN_NAME), draw(_BETWEEN_GAP), pick(ops), draw(_BETWEEN_GAP), draw(_BETWEEN_LITERAL)]
            continue
        parts += [draw(_BETWEEN_NAME), draw(_BETWEEN_GAP), pick(["between"] * 6 + ["Between", "<"])]
        parts += [draw(_BETWEEN_GAP), draw(_BETWEEN_LITERAL), draw(_BETWEEN_GAP), pick(["and"] * 6 + ["AND"])]
        parts += [draw(_BETWEEN_GAP), draw(_BETWEEN_LITERAL)]
    return pick(["", "", "", " "]) + "".join(parts) + pick(["", "", "", " ", " and"])


@settings(max_examples=1500, deadline=None)
@given(_between_near_misses())
def test_validation_of_between_near_misses(text: str) -> None:
    """Validated as the parser decides; the numeric pattern (and the bytes reader) accepts only
    texts that the simple path parses, each predicate a ``between`` or comparison of numbers."""
    from routing.matching.language import _NUMERIC_FILTER

    event(f"numeric form: {_NUMERIC_FILTER.fullmatch(text) is not None}")
    _check_validation(text)


@pytest.mark.parametrize(
    "text",
    [
        "a between 1 and 2 and b between -0 and 007",
        "between between 1 and 2 and and between 3 and 4",
        "a between 1 and 2 and",
        "a between 1 and 1234567890123456",
        "a between 1 and 2and b between 3 and 4",
        "a < true",
        "a <= FALSE",
        "a = 1.5",
        "a = 'it''s'",
        "a = 1and b = 2",
        "a = 1 and",
        "",
        "a between 1 and",
        "a = 1 and b != true and c between -1 and 2 and s = 'x and y'",
        "a = 12345678901234567890",
    ],
)
def test_validation_of_fixed_cases(text: str) -> None:
    _check_validation(text)
