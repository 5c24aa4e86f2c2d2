"""Hypothesis strategies for SiftStream's Avro records.

``records_for(schema)`` generates complete records (every field present, defaults not relied
on) for any Avro schema of the project, old versions included; ``valid_records(name)`` generates
records of a current schema that also pass ``schemas.rules.validate``, built constructively from
the declared rules so that Hypothesis rarely has to throw a draw away.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from hypothesis import strategies as st

from schemas.codec import codec_for
from schemas.rules import EXACTLY_ONE, Rule, field_value, rules_for, validate

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
_SIZE = 4  # most elements per generated array, map, string of bytes


@dataclass(frozen=True)
class Limits:
    """What the declared rules demand of one top-level field (applied to every branch of it)."""

    lo: float | None = None  # inclusive lower bound
    hi: float | None = None  # inclusive upper bound
    exclude_lo: bool = False
    non_empty: bool = False
    key_pattern: str | None = None
    not_null: bool = False


def _limits(rules: list[Rule]) -> Limits:
    limits = Limits()
    for rule in rules:
        if rule.when is not None:
            continue  # conditional rules are repaired after drawing (see valid_records)
        if rule.kind in ("min", "gt"):
            limits = replace(limits, lo=rule.bound, exclude_lo=rule.kind == "gt")
        elif rule.kind == "max":
            limits = replace(limits, hi=rule.bound)
        elif rule.kind == "non_empty":
            limits = replace(limits, non_empty=True)
        elif rule.kind == "map_keys_match":
            limits = replace(limits, key_pattern=rule.pattern)
        elif rule.kind == "required":
            limits = replace(limits, not_null=True)
    return limits


class _Builder:
    def __init__(self, allow_nonfinite: bool) -> None:
        self.allow_nonfinite = allow_nonfinite
        self.named: dict[str, st.SearchStrategy[Any]] = {}  # full and short name -> strategy

    def build(self, schema: Any, limits: Limits | None = None, namespace: str = "") -> st.SearchStrategy[Any]:
        limits = limits or Limits()
        if isinstance(schema, list):
            branches = [b for b in schema if not (limits.not_null and b == "null")]
            return st.one_of(*[self.build(b, limits, namespace) for b in branches])
        if isinstance(schema, str):
            for key in (schema, f"{namespace}.{schema}", schema.rsplit(".", 1)[-1]):
                if key in self.named:
                    return self.named[key]
            return self.primitive(schema, limits)
        kind = schema["type"]
        if not isinstance(kind, str) or kind not in ("record", "error", "enum", "fixed", "array", "map"):
            return self.build(kind, limits, namespace)  # {"type": "long", ...} or a wrapped schema
        if kind == "array":
            return st.lists(self.build(schema["items"], Limits(), namespace), max_size=_SIZE)
        if kind == "map":
            keys = st.from_regex(limits.key_pattern, fullmatch=True) if limits.key_pattern else st.text(max_size=8)
            return st.dictionaries(keys, self.build(schema["values"], Limits(), namespace), max_size=_SIZE)
        name = schema["name"]
        full = name if "." in name else ".".join(p for p in (schema.get("namespace", namespace), name) if p)
        if kind == "enum":
            strategy: st.SearchStrategy[Any] = st.sampled_from(schema["symbols"])
        elif kind == "fixed":
            strategy = st.binary(min_size=schema["size"], max_size=schema["size"])
        else:
            inner = full.rpartition(".")[0]
            later: dict[str, st.SearchStrategy[Any]] = {}
            strategy = st.deferred(lambda: st.fixed_dictionaries(later))
            self.named[full] = self.named[name.rsplit(".", 1)[-1]] = strategy  # before the fields: recursion
            for field in schema["fields"]:
                nested = Limits(key_pattern=limits.key_pattern)  # key rules reach maps inside a record
                later[field["name"]] = self.build(field["type"], nested, inner)
        self.named[full] = self.named[name.rsplit(".", 1)[-1]] = strategy
        return strategy

    def primitive(self, kind: str, limits: Limits) -> st.SearchStrategy[Any]:
        if kind == "null":
            return st.none()
        if kind == "boolean":
            return st.booleans()
        if kind in ("int", "long"):
            lo, hi = INT32 if kind == "int" else INT64
            if limits.lo is not None:
                lo = max(lo, int(limits.lo) + (1 if limits.exclude_lo and limits.lo == int(limits.lo) else 0))
            if limits.hi is not None:
                hi = min(hi, int(limits.hi))
            return st.integers(lo, hi)
        if kind in ("float", "double"):
            bounded = limits.lo is not None or limits.hi is not None
            return st.floats(
                min_value=limits.lo,
                max_value=limits.hi,
                exclude_min=limits.exclude_lo and limits.lo is not None,
                allow_nan=self.allow_nonfinite and not bounded,
                allow_infinity=self.allow_nonfinite and not bounded,
                width=32 if kind == "float" else 64,
            )
        if kind == "string":
            return st.text(min_size=1 if limits.non_empty else 0, max_size=12)
        if kind == "bytes":
            return st.binary(max_size=_SIZE * 4)
        raise ValueError(f"unknown Avro type {kind!r}")


def records_for(schema: dict[str, Any], allow_nonfinite: bool = False) -> st.SearchStrategy[dict[str, Any]]:
    """Complete records of ``schema``: strings as text, ints in int32, longs in int64, doubles
    finite (NaN and infinities too with ``allow_nonfinite``), named types by reference."""
    return _Builder(allow_nonfinite).build(schema)


def _rules_under(rules: tuple[Rule, ...], field: str) -> list[Rule]:
    """Rules on ``field`` itself, plus key patterns of maps nested in it (``attributes.longs``),
    which the builder applies to every map inside the field."""
    return [r for r in rules if r.field == field or (r.field.startswith(field + ".") and r.kind == "map_keys_match")]


@cache
def valid_records(name: str) -> st.SearchStrategy[dict[str, Any]]:
    """Complete records of the current schema ``name`` that ``schemas.rules.validate`` accepts."""
    schema = codec_for(name).schema
    rules = rules_for(name)
    builder = _Builder(allow_nonfinite=False)
    namespace = schema.get("namespace", "")
    fields = {
        f["name"]: builder.build(f["type"], _limits(_rules_under(rules, f["name"])), namespace)
        for f in schema["fields"]
    }
    types = {f["name"]: f["type"] for f in schema["fields"]}

    def present(field: str) -> st.SearchStrategy[Any]:
        """A non-null value of ``field`` that keeps its unconditional rules."""
        return builder.build(
            types[field], replace(_limits([r for r in rules if r.field == field]), not_null=True), namespace
        )

    @st.composite
    def repaired(draw: st.DrawFn) -> dict[str, Any]:
        record = draw(st.fixed_dictionaries(fields))
        for rule in rules:
            if rule.when is None or not rule.applies(record) or rule.ok(field_value(record, rule.field)):
                continue
            if rule.kind == "required":
                record[rule.field] = draw(present(rule.field))
            elif rule.kind == "absent":
                record[rule.field] = None
        if name in EXACTLY_ONE:
            (a, b), (field, value) = EXACTLY_ONE[name]
            if record.get(field) == value and (record.get(a) is None) == (record.get(b) is None):
                keep, drop = (a, b) if draw(st.booleans()) else (b, a)
                record[drop] = None
                if record.get(keep) is None:
                    record[keep] = draw(present(keep))
        return record

    return repaired().filter(lambda record: not validate(name, record))


# --- The filter language (routing.matching.language) -----------------------------------------------------
# An appended section: its imports sit here so that the code above stays as it was.

import math  # noqa: E402
import random  # noqa: E402

from routing.matching.language import Filter, Op, Predicate  # noqa: E402

FILTER_KEYWORDS = ("and", "between", "in", "not", "startswith", "endswith", "contains", "exists", "true", "false")

# any attribute name, keywords included (the grammar reads them as names where a name is due)
_NAME_START = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_"
attribute_names: st.SearchStrategy[str] = st.one_of(
    st.builds(
        str.__add__,
        st.sampled_from(_NAME_START),
        st.text(alphabet=_NAME_START + "0123456789.", max_size=6),
    ),
    st.sampled_from((*FILTER_KEYWORDS, "AND", "Not", "IN", "TRUE")),
)
filter_numbers: st.SearchStrategy[int | float] = st.one_of(
    st.integers(), st.floats(allow_nan=False, allow_infinity=False)
)

# Small pools for semantic checks: few names, literals that collide often, boundary values.
SMALL_NAMES = ("a", "b")
SMALL_NUMBERS = (-1, 0, 0.5, 1, 1.0, 1.5, 2, 3)
SMALL_STRINGS = ("", "a", "b", "ab", "ba", "aa", "abb", "b'")
filter_strings: st.SearchStrategy[str] = st.text(max_size=6)
small_numbers: st.SearchStrategy[Any] = st.sampled_from(SMALL_NUMBERS)
small_strings: st.SearchStrategy[str] = st.sampled_from(SMALL_STRINGS)


def filter_predicates(
    names: st.SearchStrategy[str] = attribute_names,
    numbers: st.SearchStrategy[Any] = filter_numbers,
    strings: st.SearchStrategy[str] = filter_strings,
    ops: tuple[Op, ...] = tuple(Op),
    max_list: int = 3,
    kinds: tuple[str, ...] = ("number", "string", "boolean"),
) -> st.SearchStrategy[Predicate]:
    """Valid predicates with literals of the given ``kinds``: literals of one kind, strings for
    the string operators, booleans only with = and != (``exists`` where no kind fits ``op``)."""
    literal_of = {"number": numbers, "string": strings, "boolean": st.booleans()}

    @st.composite
    def build(draw: st.DrawFn) -> Predicate:
        name = draw(names)
        op = draw(st.sampled_from(ops))
        if op in (Op.STARTSWITH, Op.ENDSWITH, Op.CONTAINS):
            fitting = [k for k in kinds if k == "string"]
        elif op in (Op.EQ, Op.NE):
            fitting = list(kinds)
        else:
            fitting = [k for k in kinds if k != "boolean"]
        if op is Op.EXISTS or not fitting:
            return Predicate(name, Op.EXISTS)
        literal = literal_of[draw(st.sampled_from(fitting))]
        if op is Op.BETWEEN:
            count = 2
        elif op in (Op.IN, Op.NOT_IN):
            count = draw(st.integers(1, max_list))
        else:
            count = 1
        return Predicate(name, op, tuple(draw(literal) for _ in range(count)))

    return build()


def filters(
    names: st.SearchStrategy[str] = attribute_names,
    numbers: st.SearchStrategy[Any] = filter_numbers,
    strings: st.SearchStrategy[str] = filter_strings,
    ops: tuple[Op, ...] = tuple(Op),
    max_predicates: int = 4,
    max_list: int = 3,
    kinds: tuple[str, ...] = ("number", "string", "boolean"),
) -> st.SearchStrategy[Filter]:
    """Valid filters of 1 to ``max_predicates`` predicates."""
    predicates = filter_predicates(names, numbers, strings, ops, max_list, kinds)
    return st.lists(predicates, min_size=1, max_size=max_predicates).map(lambda ps: Filter(tuple(ps)))


def small_filters(
    names: tuple[str, ...] = SMALL_NAMES, ops: tuple[Op, ...] = tuple(Op), max_predicates: int = 3
) -> st.SearchStrategy[Filter]:
    """Filters over few names and a small pool of colliding literals (for brute-force oracles)."""
    return filters(
        st.sampled_from(names),
        small_numbers,
        small_strings,
        ops,
        max_predicates,
        max_list=2,
    )


def attribute_values(
    numbers: st.SearchStrategy[Any] = small_numbers,
    strings: st.SearchStrategy[str] = small_strings,
) -> st.SearchStrategy[object]:
    """Event attribute values of every kind, plus NaN, infinities and values of no kind."""
    return st.one_of(
        numbers,
        strings,
        st.booleans(),
        st.sampled_from([float("nan"), float("inf"), float("-inf"), None, 0.25, 2.5, -0.0]),
        st.text(alphabet="ab'\x00", max_size=3),
    )


def filter_events(
    names: tuple[str, ...] = SMALL_NAMES, values: st.SearchStrategy[object] | None = None
) -> st.SearchStrategy[dict[str, object]]:
    """Event attributes over ``names`` (some names left out)."""
    return st.dictionaries(
        st.sampled_from(names), values if values is not None else attribute_values(), max_size=len(names)
    )


def respellings(f: Filter) -> st.SearchStrategy[str]:
    """Other spellings of ``f``: random keyword case, whitespace and number forms."""

    def spell(seed: int) -> str:
        rng = random.Random(seed)  # one draw: much cheaper than a draw per choice

        def keyword(word: str) -> str:
            return "".join(c.upper() if rng.random() < 0.5 else c for c in word)

        def literal(v: object) -> str:
            if isinstance(v, bool):
                return keyword("true" if v else "false")
            if isinstance(v, str):
                return "'" + v.replace("'", "''") + "'"
            if isinstance(v, float):
                return rng.choice([repr(v), f"{v:.17e}", f"{v:.17E}"])
            return str(v)

        tokens: list[str] = []
        for i, p in enumerate(f.predicates):
            if i:
                tokens.append(keyword("and"))
            tokens.append(p.attribute)
            if p.op is Op.BETWEEN:
                tokens += [keyword("between"), literal(p.values[0]), keyword("and"), literal(p.values[1])]
            elif p.op in (Op.IN, Op.NOT_IN):
                tokens += [keyword(w) for w in p.op.value.split()] + ["("]
                tokens += [*[t for v in p.values for t in (literal(v), ",")][:-1], ")"]
            elif p.op is Op.EXISTS:
                tokens.append(keyword("exists"))
            else:
                tokens += [keyword(p.op.value), literal(p.values[0])]
        gaps = [" ", "  ", "\t", "\n", " \r\n "]
        return rng.choice(gaps).lstrip() + "".join(t + rng.choice(gaps) for t in tokens)

    return st.integers(0, 2**32).map(spell)


@st.composite
def cover_pairs(
    draw: st.DrawFn, base: st.SearchStrategy[Filter], extra: st.SearchStrategy[Predicate]
) -> tuple[Filter, Filter]:
    """(f2, f1): half the time independent, half the time f2 keeps some of f1's predicates and
    maybe adds one (so that covering holds often enough to exercise a brute-force check)."""
    f1 = draw(base)
    if draw(st.booleans()):
        return draw(base), f1
    kept = [p for p in f1.predicates if draw(st.booleans())]
    kept += draw(st.lists(extra, min_size=0 if kept else 1, max_size=1))
    return Filter(tuple(kept)), f1


# One string attribute ``s``, string literals only: for checks against every short string.
STRING_FILTER_OPS: tuple[Op, ...] = (Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE, Op.BETWEEN, Op.IN, Op.NOT_IN)
STRING_FILTER_OPS += (Op.STARTSWITH, Op.ENDSWITH, Op.CONTAINS)
string_pool: st.SearchStrategy[str] = st.sampled_from(("", "a", "b", "ab", "ba", "aab", "bab", "a'"))


def string_predicates() -> st.SearchStrategy[Predicate]:
    return filter_predicates(st.just("s"), st.just(0), string_pool, STRING_FILTER_OPS, 2, ("string",))


def string_filters() -> st.SearchStrategy[Filter]:
    return filters(st.just("s"), st.just(0), string_pool, STRING_FILTER_OPS, 3, 2, ("string",))


# One number attribute ``x`` with literals where doubles are sparse or adjacent: 2**53 + 1 is no
# double; 1.0 and its successor are adjacent doubles, with no number between them.
TIGHT_NUMBERS = (1, 1.0, math.nextafter(1.0, 2.0), 2**53, 2**53 + 1, 2.0**53 + 2, -(2**53) - 1)
NUMBER_FILTER_OPS = tuple(op for op in Op if op not in (Op.STARTSWITH, Op.ENDSWITH, Op.CONTAINS))
tight_numbers: st.SearchStrategy[Any] = st.sampled_from(TIGHT_NUMBERS)


def tight_predicates() -> st.SearchStrategy[Predicate]:
    return filter_predicates(st.just("x"), tight_numbers, st.just(""), NUMBER_FILTER_OPS, 2, ("number",))


def tight_filters() -> st.SearchStrategy[Filter]:
    return filters(st.just("x"), tight_numbers, st.just(""), NUMBER_FILTER_OPS, 3, 2, ("number",))


# --- The subscription index (routing.matching.index) -------------------------------------------------
# A small shared vocabulary, so that generated subscriptions and events meet often: matches,
# identical filters, values equal to literals, missing attributes, values of the wrong kind, None,
# NaN, -0.0, integers beyond 2**53 (2**53 + 1 is no double), booleans (not numbers), and strings
# that are prefixes, suffixes or infixes of each other, code points beyond the BMP included.

import numpy as np  # noqa: E402

INDEX_NAMES = ("a", "b", "c", "d", "e")
INDEX_NUMBERS = (-1, -0.0, 0, 0.5, 1, 1.0, 1.5, 2, 3, 2**53, 2**53 + 1, 2.0**53, 2**53 + 2, 2.0**63, -(2**53) - 1)
INDEX_STRINGS = ("", "a", "ab", "abc", "b", "ba", "bc", "ab'", "é", "\U0001f600")
INDEX_IDS = (*(f"s{i}" for i in range(40)), "S", "_", "a.b", "é", "s")  # plain string order != numeric
_INDEX_ALPHABET = "abc'é\U0001f600"
# Event values beyond the literals: neighbours, non-finite numbers, integers past 2**53 (odd: no double),
# a double next to 1.0, numpy scalars whose comparisons are exact, and values of no kind.
_INDEX_EXTRA_VALUES: tuple[object, ...] = (
    0.25,
    2.5,
    0.0,
    math.nextafter(1.0, 2.0),
    2**53 - 1,
    2**53 + 3,
    2.0**53 + 2,
    2**63 - 1,
    math.nan,
    math.inf,
    -math.inf,
    None,
    [1],
    np.float64(1.5),
    np.int64(2),
    np.str_("ab"),
    "xab",
    "abx",
    "\uffff",
)

index_numbers: st.SearchStrategy[Any] = st.sampled_from(INDEX_NUMBERS)
index_strings: st.SearchStrategy[str] = st.sampled_from(INDEX_STRINGS)
index_event_strings: st.SearchStrategy[str] = st.one_of(index_strings, st.text(alphabet=_INDEX_ALPHABET, max_size=4))


def index_filters(
    names: tuple[str, ...] = INDEX_NAMES,
    ops: tuple[Op, ...] = tuple(Op),
    max_predicates: int = 3,
    kinds: tuple[str, ...] = ("number", "string", "boolean"),
) -> st.SearchStrategy[Filter]:
    """Filters over the index vocabulary: few names, literals that collide and sit on boundaries."""
    return filters(st.sampled_from(names), index_numbers, index_strings, ops, max_predicates, 3, kinds)


def index_values() -> st.SearchStrategy[object]:
    """Event values of every kind for the index: the literals themselves half the time, then
    strings built from the literals' characters, booleans and the extra values above."""
    return st.one_of(
        index_numbers,
        index_event_strings,
        st.booleans(),
        st.sampled_from(_INDEX_EXTRA_VALUES),
    )


def index_events(names: tuple[str, ...] = INDEX_NAMES) -> st.SearchStrategy[dict[str, object]]:
    """Events over the index vocabulary plus a name no filter uses (some names left out)."""
    return st.dictionaries(st.sampled_from((*names, "zz")), index_values(), max_size=len(names))


# from_columns forms: each column a numpy array of one dtype, with or without a presence mask.
COLUMN_FLOATS = (-1.0, -0.0, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 2.0**53, 2.0**53 + 2, math.nextafter(1.0, 2.0))
COLUMN_FLOATS += (0.25, 1e300, math.nan, math.inf, -math.inf)
COLUMN_INTS = (-1, 0, 1, 2, 3, 2**53 - 1, 2**53, 2**53 + 1, -(2**53) - 1, 2**63 - 1, -(2**63))
_COLUMN_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "float64": st.sampled_from(COLUMN_FLOATS),
    "int64": st.sampled_from(COLUMN_INTS),
    "bool": st.booleans(),
    # numpy strips trailing NULs from unicode arrays; the pool has none
    "unicode": index_event_strings,
    "object": index_values(),
}
COLUMN_DTYPES = tuple(_COLUMN_VALUES)


def _column_array(dtype: str, values: list[Any]) -> np.ndarray[Any, Any]:
    if dtype == "object":
        arr = np.empty(len(values), dtype=object)
        for i, v in enumerate(values):  # element by element: a list value stays one element
            arr[i] = v
        return arr
    if dtype == "unicode":
        return np.array(values, dtype=np.str_)
    return np.array(values, dtype={"float64": np.float64, "int64": np.int64, "bool": np.bool_}[dtype])


@st.composite
def column_batches(
    draw: st.DrawFn,
    names: tuple[str, ...] = INDEX_NAMES,
    max_events: int = 20,
    dtypes: tuple[str, ...] = COLUMN_DTYPES,
) -> tuple[int, dict[str, tuple[Any, Any]], list[dict[str, object]]]:
    """``(n, columns, events)``: arguments of ``EventBatch.from_columns`` and the same events as
    plain dicts, built from the drawn Python values (not read back from the arrays). Values under
    a false mask are drawn too: the index must ignore them."""
    n = draw(st.integers(0, max_events))
    events: list[dict[str, object]] = [{} for _ in range(n)]
    columns: dict[str, tuple[Any, Any]] = {}
    for name in draw(st.lists(st.sampled_from((*names, "zz")), unique=True, max_size=len(names))):
        dtype = draw(st.sampled_from(dtypes))
        values = draw(st.lists(_COLUMN_VALUES[dtype], min_size=n, max_size=n))
        if draw(st.booleans()):
            present, mask = [True] * n, None
        else:
            present = draw(st.lists(st.booleans(), min_size=n, max_size=n))
            mask = np.array(present, dtype=bool)
        for i in range(n):
            if present[i]:
                events[i][name] = values[i]
        columns[name] = (_column_array(dtype, values), mask)
    return n, columns, events


# --- Events as the wire carries them (schemas.event_records, streaming.arrow_matching) ----------
# Values the Event schema allows (64-bit longs, finite doubles, strings, booleans) over the index
# vocabulary, so one name often comes with several value kinds across the events of one batch.
WIRE_VALUES: tuple[object, ...] = tuple(
    v for v in (*INDEX_NUMBERS, *_INDEX_EXTRA_VALUES) if type(v) in (int, float) and math.isfinite(v)
)
WIRE_VALUES += (2**63 - 1, -(2**63), True, False)


def wire_values() -> st.SearchStrategy[object]:
    return st.one_of(st.sampled_from(WIRE_VALUES), index_strings, index_event_strings)


def wire_events(names: tuple[str, ...] = INDEX_NAMES, max_events: int = 12) -> st.SearchStrategy[list[dict[str, Any]]]:
    """Events in their JSON view (``schemas.codec``), with unique ids, valid for the Event rules."""
    attributes = st.dictionaries(st.sampled_from((*names, "zz")), wire_values(), max_size=len(names))
    return st.lists(attributes, max_size=max_events).map(
        lambda attrs: [
            {"event_id": f"e{i}", "publisher_id": "p", "published_at": i, "lifetime_ms": 0, "attributes": a}
            for i, a in enumerate(attrs)
        ]
    )


# --- TID routing on cyclic broker overlays (routing.planning.loop_free) -------------------------------
# Connected cyclic broker graphs (a random spanning tree plus extra links), a few link delays, and
# filters and events over a small vocabulary, so that subscriptions overlap several advertisements
# and publications match often. Link delays change between advertisements, which is what gives a
# subscription different last hops on different trees (with fixed delays they all agree).

from dataclasses import field as _field  # noqa: E402

TID_SYMBOLS = ("A", "B", "C")
TID_PREDICATES = (
    "sym = 'A'",
    "sym = 'B'",
    "sym != 'C'",
    "sym in ('A', 'C')",
    "x < 2",
    "x >= 2",
    "x = 3",
    "x between 1 and 3",
    "x exists",
)
TID_DELAYS = (1.0, 2.0, 3.0, 5.0, 8.0, 13.0)


def tid_filters() -> st.SearchStrategy[str]:
    """Filter texts of one or two predicates over ``sym`` (strings) and ``x`` (numbers)."""
    return st.lists(st.sampled_from(TID_PREDICATES), min_size=1, max_size=2, unique=True).map(" and ".join)


def tid_events() -> st.SearchStrategy[dict[str, object]]:
    """Publication attributes over ``sym`` and ``x`` (``sym`` sometimes missing)."""
    return st.fixed_dictionaries({"x": st.integers(0, 4)}, optional={"sym": st.sampled_from(TID_SYMBOLS)})


_TID_FILTERS = tid_filters()
_TID_EVENTS = tid_events()


@st.composite
def cyclic_broker_graphs(
    draw: st.DrawFn, min_brokers: int = 3, max_brokers: int = 12, max_extra: int = 4
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """``(brokers, links)``: a connected graph with at least one cycle; ids ``b0``, ``b1``, ..."""
    n = draw(st.integers(min_brokers, max_brokers))
    brokers = tuple(f"b{i}" for i in range(n))
    links = {(brokers[draw(st.integers(0, i - 1))], brokers[i]) for i in range(1, n)}
    spare = sorted((u, v) for i, u in enumerate(brokers) for v in brokers[i + 1 :] if (u, v) not in links)
    spare = [(u, v) for u, v in spare if (v, u) not in links]
    links |= set(draw(st.lists(st.sampled_from(spare), min_size=1, max_size=max_extra, unique=True)))
    return brokers, tuple(sorted(links))


@dataclass(frozen=True)
class TidScenario:
    """A broker graph, where each client sits, and a script of overlay operations.

    ``ops`` items: ``("delay", u, v, d)``, ``("advertise", adv_id, publisher, filter_text)``,
    ``("subscribe", sub_id, subscriber, filter_text)``, ``("unsubscribe", sub_id)`` and
    ``("observe", broker, neighbour, d)``; ``publications`` are ``(publisher, attributes)``."""

    brokers: tuple[str, ...]
    links: tuple[tuple[str, str], ...]
    delays: dict[tuple[str, str], float]
    publishers: dict[str, str]
    subscribers: dict[str, str]
    ops: tuple[tuple[Any, ...], ...]
    publications: tuple[tuple[str, dict[str, object]], ...] = _field(default=())


@st.composite
def tid_scenarios(
    draw: st.DrawFn,
    max_brokers: int = 12,
    max_ops: int = 30,
    unsubscribe: bool = True,
    max_publications: int = 6,
) -> TidScenario:
    """A random overlay script: advertisements by up to 3 publishers, subscriptions by up to 5
    subscribers, link delay changes and Link Delay Table observations, in any order (so some
    subscriptions come before the advertisements they overlap), and publications to check."""
    brokers, links = draw(cyclic_broker_graphs(max_brokers=max_brokers))
    delays = {link: draw(st.sampled_from(TID_DELAYS)) for link in links}
    publishers = {f"P{i}": draw(st.sampled_from(brokers)) for i in range(draw(st.integers(1, 3)))}
    subscribers = {f"S{i}": draw(st.sampled_from(brokers)) for i in range(draw(st.integers(1, 5)))}
    # weights by repetition: mostly advertisements and subscriptions, with delays redrawn between them
    weighted = ["advertise"] * 3 + ["subscribe"] * 4 + ["delays", "observe"] + (["unsubscribe"] if unsubscribe else [])
    kinds = st.sampled_from(weighted)
    pick_publisher, pick_subscriber = st.sampled_from(sorted(publishers)), st.sampled_from(sorted(subscribers))
    pick_link, pick_delay = st.sampled_from(links), st.sampled_from(TID_DELAYS)
    ops: list[tuple[Any, ...]] = []
    live: list[str] = []
    for k in range(draw(st.integers(1, max_ops))):
        kind = draw(kinds)
        if kind == "advertise":
            ops.append(("advertise", f"a{k}", draw(pick_publisher), draw(_TID_FILTERS)))
        elif kind == "subscribe":
            ops.append(("subscribe", f"s{k}", draw(pick_subscriber), draw(_TID_FILTERS)))
            live.append(f"s{k}")
        elif kind == "unsubscribe" and live:
            ops.append(("unsubscribe", live.pop(draw(st.integers(0, len(live) - 1)))))
        elif kind == "delays":  # redraw some links' delays at once, so that later trees differ
            for u, v in draw(st.lists(pick_link, min_size=1, max_size=len(links), unique=True)):
                ops.append(("delay", u, v, draw(pick_delay)))
        elif kind == "observe":
            ends = draw(pick_link)
            u, v = ends if draw(st.booleans()) else ends[::-1]
            ops.append(("observe", u, v, draw(pick_delay)))
    advertised = sorted({op[2] for op in ops if op[0] == "advertise"}) or sorted(publishers)
    pick_advertiser = st.sampled_from(advertised)  # mostly publishers that advertised
    publications = tuple(
        (draw(st.one_of(pick_advertiser, pick_advertiser, pick_publisher)), draw(_TID_EVENTS))
        for _ in range(draw(st.integers(1, max_publications)))
    )
    return TidScenario(brokers, links, delays, publishers, subscribers, tuple(ops), publications)


# --- MICPICE instances (routing.planning.distribution, routing.planning.exact) --------------------------------
# Tiny instances for the exact planner's brute-force oracle: 3-5 nodes, 1-3 events (composites
# built from earlier events, so up to three levels), random links, costs (zero included), policy
# and interests. At most ``max_pairs`` (link, event) pairs are policy-allowed, so an oracle that
# enumerates every subset of them stays under 2**max_pairs subsets.

from routing.planning.model import Instance as _MicpiceInstance  # noqa: E402

MICPICE_COSTS = (0.0, 0.5, 1.0, 2.0, 3.0)
MICPICE_RATES = (0.25, 0.5, 1.0, 2.0)


@st.composite
def micpice_tiny_instances(draw: st.DrawFn, max_pairs: int = 12) -> _MicpiceInstance:
    """A small MICPICE instance with at most ``max_pairs`` policy-allowed (link, event) pairs."""
    n = draw(st.integers(3, 5))
    names = [f"n{i}" for i in range(n)]
    roles = ["publisher"] + [draw(st.sampled_from(("publisher", "broker", "subscriber"))) for _ in range(n - 2)]
    roles.append("subscriber")
    publishers = [v for v, r in zip(names, roles, strict=True) if r == "publisher"]
    subscribers = [v for v, r in zip(names, roles, strict=True) if r == "subscriber"]
    events: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 2))):
        rate, publisher = draw(st.sampled_from(MICPICE_RATES)), draw(st.sampled_from(publishers))
        events.append({"id": f"e{i + 1}", "rate": rate, "publisher": publisher})
    for _ in range(draw(st.integers(0, 3 - len(events)))):
        ids = [e["id"] for e in events]
        comps = draw(st.lists(st.sampled_from(ids), min_size=1, max_size=min(2, len(ids)), unique=True))
        events.append({"id": f"e{len(events) + 1}", "rate": draw(st.sampled_from(MICPICE_RATES)), "components": comps})
    pairs = [(u, v) for u in names for v in names if u != v]
    chosen = draw(st.lists(st.sampled_from(pairs), min_size=1, max_size=min(len(pairs), 8), unique=True))
    links = [{"from": u, "to": v, "cost": draw(st.sampled_from(MICPICE_COSTS))} for u, v in chosen]
    link_events = [(u, v, e["id"]) for u, v in chosen for e in events]
    forbidden = set(draw(st.lists(st.sampled_from(link_events), max_size=len(link_events) // 2, unique=True)))
    allowed = [t for t in link_events if t not in forbidden]
    forbidden.update(allowed[max_pairs:])  # keep the enumeration small
    wants = [(s, e["id"]) for s in subscribers for e in events]
    interests = draw(st.lists(st.sampled_from(wants), min_size=1, max_size=4, unique=True))
    return _MicpiceInstance.from_json(
        {
            "nodes": [{"id": v, "role": r} for v, r in zip(names, roles, strict=True)],
            "links": links,
            "events": events,
            "interests": [{"subscriber": s, "event": e} for s, e in interests],
            "forbidden": [{"from": u, "to": v, "event": e} for u, v, e in sorted(forbidden)],
        }
    )


# --- Composite detection placement (routing.composite.placement, docs/reference/placement.md) ---------------
# docs/reference/placement.md documents (plain dicts, as the command reads them): 2-``max_brokers`` brokers on a
# chain with a link each way (costs drawn per direction, so distances are asymmetric), extra
# one-way links, sometimes a dead-end broker that no source can use (it cannot reach the
# subscriber: placements there cost infinity); a tree of 2-``max_leaves`` leaf occurrences
# (a leaf name may repeat) merged by and/or/seq operators of 2-3 children, so at most
# max_leaves - 1 operators and brokers**operators placements for a brute-force oracle.

PLACEMENT_COSTS = (0.25, 0.5, 1.0, 2.0, 3.0)  # exact in binary: sums compare exactly
PLACEMENT_RATES = (0.0, 0.5, 1.0, 3.5, 10.0, 120.0)


@st.composite
def placement_docs(draw: st.DrawFn, max_brokers: int = 4, max_leaves: int = 4) -> dict[str, Any]:
    """A valid docs/reference/placement.md placement instance document."""
    n = draw(st.integers(2, max_brokers))
    brokers = [f"b{i}" for i in range(n)]
    order = draw(st.permutations(brokers))
    costs = st.sampled_from(PLACEMENT_COSTS)
    links: dict[tuple[str, str], float] = {}
    for i in range(n - 1):
        u, v = order[i], order[i + 1]
        links[(u, v)] = draw(costs)
        links[(v, u)] = draw(costs)
    pairs = [(u, v) for u in brokers for v in brokers if u != v and (u, v) not in links]
    for u, v in draw(st.lists(st.sampled_from(pairs), max_size=3, unique=True)) if pairs else []:
        links[(u, v)] = draw(costs)
    live = list(brokers)
    if draw(st.booleans()):
        dead = f"b{n}"
        brokers.append(dead)
        links[(draw(st.sampled_from(live)), dead)] = draw(costs)
    k = draw(st.integers(2, max_leaves))
    names = [f"L{i + 1}" for i in range(k)]
    nodes: list[dict[str, Any]] = [{"leaf": draw(st.sampled_from(names[: i + 1]))} for i in range(k)]
    ops = 0
    while len(nodes) > 1:
        width = draw(st.integers(2, min(3, len(nodes))))
        at = draw(st.integers(0, len(nodes) - width))
        ops += 1
        op = draw(st.sampled_from(("and", "or", "seq")))
        nodes[at : at + width] = [{"id": f"n{ops}", "op": op, "children": nodes[at : at + width]}]
    used = sorted({leaf["leaf"] for leaf in _placement_leaves(nodes[0])})
    sources = []
    for leaf in used:
        for broker in draw(st.lists(st.sampled_from(live), min_size=1, max_size=2, unique=True)):
            sources.append({"leaf": leaf, "broker": broker, "rate": draw(st.sampled_from(PLACEMENT_RATES))})
    return {
        "brokers": brokers,
        "links": [{"from": u, "to": v, "cost": c} for (u, v), c in links.items()],
        "sources": sources,
        "subscription": {"id": "cs", "broker": draw(st.sampled_from(live)), "tree": nodes[0]},
    }


def _placement_leaves(node: dict[str, Any]) -> list[dict[str, Any]]:
    if "leaf" in node:
        return [node]
    return [leaf for child in node["children"] for leaf in _placement_leaves(child)]


# --- Composite subscriptions and their detection (routing.composite.trees, routing.composite.detection) -------
# An appended section: its imports sit here so that the code above stays as it was.

from routing.composite.trees import CompositeTree, parse_composite  # noqa: E402

COMPOSITE_LEAF_TEXTS = ("a = 1", "b > 2", "kind = 'x'", "c exists", "A  =  1", "n between 1 and 2")
COMPOSITE_WINDOWS = (1, 2, 3, 5, 8)  # small windows against small event times: expiry happens often


@st.composite
def composite_docs(
    draw: st.DrawFn, max_depth: int = 3, max_children: int = 3, windows: tuple[int, ...] = COMPOSITE_WINDOWS
) -> dict[str, Any]:
    """A valid composite tree document (docs/reference/composites.md) of at most ``max_depth`` operator
    levels; ``or`` nodes get a ``within_ms`` a third of the time, ``and``/``seq`` always."""

    def node(depth: int) -> dict[str, Any]:
        op = draw(st.sampled_from(("and", "or", "seq")))
        least = 1 if op == "or" else 2
        children: list[Any] = []
        for _ in range(draw(st.integers(least, max_children))):
            if depth < max_depth and draw(st.integers(0, 3)) == 0:
                children.append(node(depth + 1))
            else:
                children.append(draw(st.sampled_from(COMPOSITE_LEAF_TEXTS)))
        doc: dict[str, Any] = {"op": draw(st.sampled_from((op, op.upper()))) if op == "or" else op}
        if op != "or" or draw(st.integers(0, 2)) == 0:
            doc["within_ms"] = draw(st.sampled_from(windows))
        doc["children"] = children
        return doc

    return node(1)


def composite_trees(max_depth: int = 3, max_children: int = 3) -> st.SearchStrategy[CompositeTree]:
    """Parsed ``composite_docs``."""
    return composite_docs(max_depth, max_children).map(parse_composite)


@st.composite
def component_matches(
    draw: st.DrawFn, tree: CompositeTree, max_events: int = 14, max_time: int = 20
) -> list[tuple[str, str, int]]:
    """Component matches ``(leaf_id, event_id, event_time_ms)`` of one subscription: events with
    small, often equal times, each matching one leaf or (sometimes) several. Event ids are drawn
    so that their order is not the time order (ties in time are broken by id)."""
    leaf_ids = [leaf.id for leaf in tree.leaf_nodes]
    n = draw(st.integers(0, max_events))
    ids = draw(st.permutations([f"e{i:02d}" for i in range(n)]))
    out: list[tuple[str, str, int]] = []
    for eid in ids:
        t = draw(st.integers(0, max_time))
        if len(leaf_ids) > 1 and draw(st.integers(0, 4)) == 0:
            matched = draw(st.lists(st.sampled_from(leaf_ids), min_size=2, max_size=3, unique=True))
        else:
            matched = [draw(st.sampled_from(leaf_ids))]
        out.extend((leaf, eid, t) for leaf in matched)
    return out


@st.composite
def out_of_order_deliveries(
    draw: st.DrawFn, items: list[tuple[Any, ...]], time_of: int = -1
) -> list[tuple[list[tuple[Any, ...]], int]]:
    """``items`` delivered in a random order in chunks, each chunk followed by a watermark that
    never passes an undelivered item's time (``item[time_of]``) and never goes back.

    Returns ``[(chunk, watermark after it), ...]``; every item is in exactly one chunk. The
    arrival order differs from the event order wherever the watermark allows it.
    """
    order = draw(st.permutations(items))
    cuts = sorted(draw(st.lists(st.integers(0, len(order)), max_size=5)))
    bounds = [0, *cuts, len(order)]
    out: list[tuple[list[tuple[Any, ...]], int]] = []
    wm = -(10**9)
    for k in range(len(bounds) - 1):
        lo, hi = bounds[k], bounds[k + 1]
        rest = [item[time_of] for item in order[hi:]]
        ceiling = min(rest) if rest else 10**6
        if ceiling > wm:
            wm = draw(st.integers(wm, ceiling))
        out.append((list(order[lo:hi]), wm))
    return out


# --- event columns (producers.columns) ------------------------------------------------------------

from producers.columns import Attr, EventColumns, Text, Vocab  # noqa: E402

_WORDS = st.text(min_size=0, max_size=6)  # any Unicode, quotes, control characters, empty


@st.composite
def texts(draw: st.DrawFn, n: int) -> Text:
    """A string column of ``n`` rows from constants, vocabularies and integers."""
    parts: list[str | Vocab | np.ndarray[Any, Any]] = []
    for kind in draw(st.lists(st.sampled_from(("const", "vocab", "int")), min_size=1, max_size=4)):
        if kind == "const":
            parts.append(draw(_WORDS))
        elif kind == "vocab":
            words = draw(st.lists(_WORDS, min_size=1, max_size=5))
            parts.append(
                Vocab(
                    tuple(words),
                    np.array(draw(st.lists(st.integers(0, len(words) - 1), min_size=n, max_size=n)), dtype=np.int64),
                )
            )
        else:
            parts.append(np.array(draw(st.lists(st.integers(0, 10**12), min_size=n, max_size=n)), dtype=np.int64))
    return Text(tuple(parts))


@st.composite
def event_columns(draw: st.DrawFn, max_rows: int = 20) -> EventColumns:
    """Batches of events as columns: every kind of value, names fixed or varying by row, attributes
    present in some rows only (names may repeat across attributes only where rows never hold both)."""
    n = draw(st.integers(1, max_rows))

    def ints(lo: int, hi: int) -> np.ndarray[Any, Any]:
        return np.array(draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n)), dtype=np.int64)

    attrs = []
    for j, kind in enumerate(draw(st.lists(st.sampled_from(("long", "double", "string", "boolean")), max_size=6))):
        values: np.ndarray[Any, Any] | Text
        if kind == "long":
            values = ints(-(2**63), 2**63 - 1)
        elif kind == "double":
            floats = st.floats(allow_nan=False, allow_infinity=False)
            values = np.array(draw(st.lists(floats, min_size=n, max_size=n)), dtype=np.float64)
        elif kind == "string":
            values = draw(texts(n))
        else:
            values = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
        # names are unique per attribute (a row never holds a name twice)
        name: str | Text = (
            Text((Vocab((f"v{j}a", f"v{j}b"), ints(0, 1)),)) if draw(st.booleans()) else f"n{j}_{draw(_WORDS)}"
        )
        present = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n))) if draw(st.booleans()) else None
        attrs.append(Attr(name, kind, values, present))
    lifetime = draw(st.integers(0, 10**9)) if draw(st.booleans()) else ints(0, 10**9)
    return EventColumns(draw(texts(n)), draw(texts(n)), ints(-(2**62), 2**62), lifetime, tuple(attrs))
