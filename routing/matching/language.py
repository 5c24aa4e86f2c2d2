"""The filter language of atomic subscriptions (docs/reference/filters.md): parse, match, cover, overlap.

An atomic subscription is a conjunction of predicates over event attributes::

    symbol = 'IBM' and price < 120.5 and volume >= 1000

``parse_filter`` turns text into a ``Filter`` (a tuple of ``Predicate``); ``Filter.matches``
evaluates it on one event's attributes; ``str(filter)`` is a canonical text that parses back to
an equal filter. ``covers``, ``overlaps`` and their witness-returning forms decide, exactly,
whether every event matching one filter matches another and whether two filters share an event.

Semantics (docs/reference/filters.md)
-----------------------------
- A predicate on an attribute the event does not carry is false, ``!=`` and ``not in`` included;
  "don't care" is no predicate on that attribute.
- Values have three kinds: numbers (``int`` and ``float``, compared numerically with each
  other; ``bool`` is not a number), strings (ordered by Unicode code point) and booleans (only
  ``=`` and ``!=``). A predicate whose literal is of another kind than the value is false,
  whatever its operator. Values of no kind (``None``, lists) satisfy only ``exists``.
- NaN is a number that compares with nothing: every predicate but ``exists`` is false on it,
  ``!=`` and ``not in`` included (this module's decision; the wire format forbids NaN anyway).
- Booleans take only ``=`` and ``!=``: ``flag in (true)``, like ``flag < true``, is rejected.

Covering and overlap
--------------------
Covering is the relation of content-based routing (Carzaniga, Rosenblum and Wolf, "Design and
evaluation of a wide-area event notification service", ACM TOCS 19(3), 2001, section 3): ``f1``
is covered by ``f2`` when every event that matches ``f1`` matches ``f2``. Both questions reduce
to satisfiability of one attribute's constraints, because an event is any mapping of names to
values, so a conjunctive filter is a product of per-attribute value sets (with "absent" a value
every predicate rejects). ``f1`` is covered by ``f2`` when ``f1`` matches
nothing, or when for every predicate ``p`` of ``f2`` on attribute ``a`` the constraints of ``f1``
on ``a`` together with *not p* have no solution ("absent" is a solution when ``f1`` says nothing
about ``a``). Two filters overlap when every attribute's joint constraints have a solution. The
per-attribute solver (``_solve``) is a decision procedure with a constructive witness:

- numbers: the constraints become an interval, an optional finite set of allowed values and a
  finite set of excluded values (a negated ``between`` is tried as its two halves). The domain
  is every Python ``int`` and non-NaN ``float`` (infinities included), the values ``matches``
  can see. To find a value in an interval avoiding ``k`` excluded points, the solver walks the
  ``k + 1`` smallest floats and the ``k + 1`` smallest integers in the interval (from the upper
  end when it is unbounded below): either ``k + 1`` distinct values turn up, so one escapes the
  exclusions, or every representable value of the interval has been seen. So ``x > 1 and
  x < 1.0000000000000002`` is empty (adjacent doubles), while ``x > 2**53 and x < 2.0**53 + 2``
  holds the integer ``2**53 + 1``.
- strings: every predicate, and its negation, is a small complete deterministic automaton over
  code points (a prefix matcher for ``startswith``; Knuth-Morris-Pratt automata, SIAM J.
  Comput. 6(2), 1977, for ``endswith`` and ``contains``; a trie for ``=`` and ``in``; a
  lexicographic comparator for the orderings); a negation flips acceptance. The conjunction is
  their product, searched breadth first for an accepting state, which yields a shortest
  witness; states from which acceptance can no longer change are not expanded. The alphabet is
  finite without loss: code points are grouped into the characters that occur in the literals
  and the gaps between them (one representative each, a letter or digit where the gap has one),
  and every character of a gap steps every automaton alike. The domain is every Python ``str``.
  The product has at most the product of (literal length + 2) states, so the cost grows with
  the number of string predicates on one attribute; filters have few.
- booleans: both values are tried.
- an attribute constrained only by ``exists``: a number, string or boolean escaping the
  negations; failing those, NaN (it fails every numeric predicate, so escapes all negations).

Every answer is exact over these domains. The wire format carries only 64-bit integers, finite
doubles and valid Unicode (no lone surrogates); answers can differ only when every solution lies
outside it (``x > 1.7976931348623157e308`` holds ``inf``; ``s >= '\\ud800' and s < '\\ue000'`` holds
only strings that start with a lone surrogate), and then in the safe direction: "covered" here
implies covered on the wire, and "no overlap" here implies no overlap on the wire.

Examples
--------
>>> f = parse_filter("symbol = 'IBM' and price < 120.5")
>>> f.matches({"symbol": "IBM", "price": 100})
True
>>> covers(parse_filter("price < 200"), f)
True
>>> cover_counterexample(parse_filter("price < 100"), f)
{'symbol': 'IBM', 'price': 100}
"""

from __future__ import annotations

import enum
import math
import numbers
import re
import string
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import product
from operator import itemgetter
from typing import Any, Final, NamedTuple, TypeAlias, TypeGuard, cast

__all__ = [
    "END_OF_INPUT",
    "Event",
    "Filter",
    "FilterError",
    "Kind",
    "Op",
    "Predicate",
    "Value",
    "cover_counterexample",
    "covers",
    "kind_of",
    "matching_event",
    "overlap_witness",
    "overlaps",
    "parse_filter",
    "validate_filter",
]

Value: TypeAlias = bool | int | float | str
"""A literal or attribute value: a number (``int``, ``float``), a string or a boolean."""

Event: TypeAlias = dict[str, Value]
"""The attributes of one event, as the witnesses of this module return them."""

END_OF_INPUT: Final = "end of input"
"""``FilterError.found`` when the text ended where something else was expected."""


class Kind(enum.Enum):
    """The three kinds of values; a predicate never matches a value of another kind."""

    NUMBER = "number"
    STRING = "string"
    BOOLEAN = "boolean"


class Op(enum.Enum):
    """The operators of the language; the value is the canonical spelling."""

    EQ = "="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    BETWEEN = "between"
    IN = "in"
    NOT_IN = "not in"
    STARTSWITH = "startswith"
    ENDSWITH = "endswith"
    CONTAINS = "contains"
    EXISTS = "exists"


_NUMBER_TYPES: Final = (int, float)
_ORDERINGS: Final = frozenset({Op.LT, Op.LE, Op.GT, Op.GE, Op.BETWEEN})
_LISTS: Final = frozenset({Op.IN, Op.NOT_IN})
_STRING_OPS: Final = frozenset({Op.STARTSWITH, Op.ENDSWITH, Op.CONTAINS})
_BOOLEAN_OPS: Final = frozenset({Op.EQ, Op.NE})


def _is_number(value: object) -> TypeGuard[float]:
    """True for ``int``, ``float`` and other real numbers (numpy scalars), never for ``bool``."""
    if type(value) in _NUMBER_TYPES:
        return True
    return not isinstance(value, bool | str) and isinstance(value, numbers.Real)


def kind_of(value: object) -> Kind | None:
    """The kind of ``value``, or None for a value of no kind (``None``, a list).

    Examples
    --------
    >>> kind_of(3), kind_of(2.5), kind_of("a"), kind_of(True), kind_of(None)
    (<Kind.NUMBER: 'number'>, <Kind.NUMBER: 'number'>, <Kind.STRING: 'string'>, <Kind.BOOLEAN: 'boolean'>, None)
    """
    if isinstance(value, bool):
        return Kind.BOOLEAN
    if isinstance(value, str):
        return Kind.STRING
    if _is_number(value):
        return Kind.NUMBER
    return None


# ---------------------------------------------------------------------------------------------
# Data model
# ---------------------------------------------------------------------------------------------

_NAME_START: Final = frozenset(string.ascii_letters + "_")
_NAME_REST: Final = _NAME_START | frozenset(string.digits + ".")
_NAME_PATTERN: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


def _is_attribute_name(name: str) -> bool:
    return _NAME_PATTERN.fullmatch(name) is not None


def _literal_text(value: Value) -> str:
    """The canonical spelling of a literal: it parses back to an equal value of the same type."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, int):
        return str(value)
    return repr(float(value))  # shortest round-tripping form: 1.5, -2000.0, 1e+16


def _arity_ok(op: Op, count: int) -> bool:
    if op is Op.EXISTS:
        return count == 0
    if op is Op.BETWEEN:
        return count == 2
    if op in _LISTS:
        return count >= 1
    return count == 1


def _always(value: object) -> bool:
    return True


_NUMBER_TESTS: Final[dict[str, Callable[[Any, Any], Callable[[object], bool]]]] = {
    "=": lambda v, _: lambda x: _is_number(x) and x == v,
    "!=": lambda v, _: lambda x: _is_number(x) and x == x and x != v,  # x == x: not NaN
    "<": lambda v, _: lambda x: _is_number(x) and x < v,
    "<=": lambda v, _: lambda x: _is_number(x) and x <= v,
    ">": lambda v, _: lambda x: _is_number(x) and x > v,
    ">=": lambda v, _: lambda x: _is_number(x) and x >= v,
    "between": lambda v, hi: lambda x: _is_number(x) and v <= x <= hi,
}
"""The number tests by operator spelling (``Op.value``; a dict keyed by the Op itself would hash
it with a Python call), each made from the first and last literal."""


def _compile(op: Op, kind: Kind | None, values: tuple[Value, ...]) -> Callable[[object], bool]:
    """A test of one present value, specialised to the operator and the literal kind."""
    if kind is Kind.NUMBER:
        make = _NUMBER_TESTS.get(op._value_)
        if make is not None:
            return make(values[0], values[-1])
    if op is Op.EXISTS:
        return _always
    if op is Op.IN or op is Op.NOT_IN:  # not `in _LISTS`: an Enum's hash is a Python call
        members = frozenset(values)
        if kind is Kind.NUMBER:
            if op is Op.IN:
                return lambda x: _is_number(x) and x in members
            return lambda x: _is_number(x) and x == x and x not in members  # x == x: not NaN
        if kind is Kind.STRING:
            if op is Op.IN:
                return lambda x: isinstance(x, str) and x in members
            return lambda x: isinstance(x, str) and x not in members
        raise AssertionError("booleans take only = and !=")  # pragma: no cover
    if kind is Kind.BOOLEAN:
        flag = values[0]
        if op is Op.EQ:
            return lambda x: type(x) is bool and x == flag
        return lambda x: type(x) is bool and x != flag
    if kind is Kind.STRING:
        s = cast(str, values[0])
        s_hi = cast(str, values[-1])
        if op is Op.EQ:
            return lambda x: isinstance(x, str) and x == s
        if op is Op.NE:
            return lambda x: isinstance(x, str) and x != s
        if op is Op.LT:
            return lambda x: isinstance(x, str) and x < s
        if op is Op.LE:
            return lambda x: isinstance(x, str) and x <= s
        if op is Op.GT:
            return lambda x: isinstance(x, str) and x > s
        if op is Op.GE:
            return lambda x: isinstance(x, str) and x >= s
        if op is Op.BETWEEN:
            return lambda x: isinstance(x, str) and s <= x <= s_hi
        if op is Op.STARTSWITH:
            return lambda x: isinstance(x, str) and x.startswith(s)
        if op is Op.ENDSWITH:
            return lambda x: isinstance(x, str) and x.endswith(s)
        return lambda x: isinstance(x, str) and s in x  # contains
    raise AssertionError(f"{op.value} has no test for {kind}")  # pragma: no cover


def _equality_key(value: Value) -> tuple[Kind | None, Value]:
    return kind_of(value), value


@dataclass(frozen=True, eq=False)
class Predicate:
    """One predicate: ``attribute op values``.

    Parameters
    ----------
    attribute : str
        An attribute name, ``[A-Za-z_][A-Za-z0-9_.]*``.
    op : Op
        The operator.
    values : tuple of Value
        The literals: none for ``exists``, two bounds for ``between``, one or more for ``in``
        and ``not in``, one otherwise; all of one kind, finite numbers, strings for
        ``startswith``, ``endswith`` and ``contains``, booleans only for ``=`` and ``!=``.

    Equality compares kinds too (``x = 1`` differs from ``x = true``; ``x = 1`` equals
    ``x = 1.0``, which matches the same values).

    Examples
    --------
    >>> p = Predicate("price", Op.BETWEEN, (10, 20))
    >>> str(p), p.matches(True, 15), p.matches(True, "15"), p.matches(False, None)
    ('price between 10 and 20', True, False, False)
    """

    attribute: str
    op: Op
    values: tuple[Value, ...] = ()
    _kind: Kind | None = field(init=False, repr=False)
    _test: Callable[[object], bool] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.values, tuple):
            object.__setattr__(self, "values", tuple(self.values))
        if not isinstance(self.attribute, str) or not _is_attribute_name(self.attribute):
            raise ValueError(f"attribute name {self.attribute!r} does not match [A-Za-z_][A-Za-z0-9_.]*")
        if not isinstance(self.op, Op):
            raise ValueError(f"operator {self.op!r} is not an Op")
        if not _arity_ok(self.op, len(self.values)):
            raise ValueError(f"{self.op.value} cannot take {len(self.values)} value(s)")
        kinds = {kind_of(v) for v in self.values}
        if None in kinds:
            raise ValueError(f"{self.values!r}: literals are numbers, strings or booleans")
        if len(kinds) > 1:
            raise ValueError(f"{self.op.value}: the literals {self.values!r} are not of one kind")
        kind = kinds.pop() if kinds else None
        if kind is Kind.NUMBER and not all(isinstance(v, int) or math.isfinite(cast(float, v)) for v in self.values):
            raise ValueError(f"{self.values!r}: number literals must be finite")
        if kind is Kind.BOOLEAN and self.op not in _BOOLEAN_OPS:
            raise ValueError(f"{self.op.value}: booleans take only = and !=")
        if self.op in _STRING_OPS and kind is not Kind.STRING:
            raise ValueError(f"{self.op.value} takes a string")
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_test", _compile(self.op, kind, self.values))

    @property
    def kind(self) -> Kind | None:
        """The kind of the literals (None for ``exists``): the only kind this predicate matches."""
        return self._kind

    def matches(self, value_present: bool, value: object = None) -> bool:
        """Whether an event satisfies this predicate.

        Parameters
        ----------
        value_present : bool
            Whether the event carries the attribute; when not, the predicate is false.
        value : object
            The attribute's value (ignored when not present).
        """
        return value_present and self._test(value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Predicate):
            return NotImplemented
        return (
            self.attribute == other.attribute
            and self.op is other.op
            and tuple(map(_equality_key, self.values)) == tuple(map(_equality_key, other.values))
        )

    def __hash__(self) -> int:
        return hash((self.attribute, self.op, tuple(map(_equality_key, self.values))))

    def __reduce__(self) -> tuple[type[Predicate], tuple[str, Op, tuple[Value, ...]]]:
        return Predicate, (self.attribute, self.op, self.values)  # the compiled test is rebuilt

    def __str__(self) -> str:
        if self.op is Op.EXISTS:
            return f"{self.attribute} exists"
        if self.op is Op.BETWEEN:
            low, high = self.values
            return f"{self.attribute} between {_literal_text(low)} and {_literal_text(high)}"
        if self.op in _LISTS:
            return f"{self.attribute} {self.op.value} ({', '.join(map(_literal_text, self.values))})"
        return f"{self.attribute} {self.op.value} {_literal_text(self.values[0])}"


_MISSING: Final = object()


@dataclass(frozen=True)
class Filter:
    """An atomic subscription: the conjunction of one or more predicates.

    ``str(f)`` is the canonical text (lower-case keywords, one space between tokens, shortest
    round-tripping numbers, quotes doubled inside strings); ``parse_filter(str(f)) == f``.

    Examples
    --------
    >>> f = parse_filter("region IN ('eu', 'us') AND price BETWEEN 10 AND 2e1 and note exists")
    >>> str(f)
    "region in ('eu', 'us') and price between 10 and 20.0 and note exists"
    >>> f.attributes()
    ('region', 'price', 'note')
    >>> f.matches({"region": "eu", "price": 20, "note": None})
    True
    >>> f.matches({"region": "eu", "price": 20})
    False
    """

    predicates: tuple[Predicate, ...]
    _checks: tuple[tuple[str, Callable[[object], bool]], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.predicates, tuple):
            object.__setattr__(self, "predicates", tuple(self.predicates))
        if not self.predicates:
            raise ValueError("a filter needs at least one predicate")
        if not all(isinstance(p, Predicate) for p in self.predicates):
            raise ValueError("a filter's predicates must be Predicate objects")
        object.__setattr__(self, "_checks", tuple((p.attribute, p._test) for p in self.predicates))

    def matches(self, attributes: Mapping[str, object]) -> bool:
        """Whether an event with these attributes satisfies every predicate.

        Parameters
        ----------
        attributes : Mapping[str, object]
            Attribute name to value; a missing name makes every predicate on it false.
        """
        for name, test in self._checks:
            value = attributes.get(name, _MISSING)
            if value is _MISSING or not test(value):
                return False
        return True

    def __reduce__(self) -> tuple[type[Filter], tuple[tuple[Predicate, ...]]]:
        return Filter, (self.predicates,)  # pickles without the compiled tests

    def attributes(self) -> tuple[str, ...]:
        """The attribute names constrained, in order of first appearance."""
        return tuple(dict.fromkeys(p.attribute for p in self.predicates))

    def __str__(self) -> str:
        return " and ".join(map(str, self.predicates))


# ---------------------------------------------------------------------------------------------
# Errors, tokenizer and parser
# ---------------------------------------------------------------------------------------------


class FilterError(ValueError):
    """A filter that does not parse or mixes kinds impossibly.

    Attributes
    ----------
    text : str
        The filter text.
    position : int
        0-based character offset of the problem in ``text``.
    found : str
        The offending text, or ``END_OF_INPUT``.
    expected : str
        What would have been valid there.
    reason : str
        The first line of the message, without the caret lines.
    """

    def __init__(self, text: str, position: int, expected: str, found: str) -> None:
        self.text = text
        self.position = position
        self.expected = expected
        self.found = found
        shown = found if found == END_OF_INPUT else repr(found)
        self.reason = f"at position {position}: expected {expected}, found {shown}"
        start = text.rfind("\n", 0, position) + 1
        end = text.find("\n", position)
        line = text[start : len(text) if end < 0 else end]
        pad = "".join("\t" if c == "\t" else " " for c in line[: position - start])
        super().__init__(f"{self.reason}\n  {line}\n  {pad}^")


_WORD, _NUMBER, _STRING, _SYMBOL, _END, _BAD = "word", "number", "string", "symbol", "end", "bad"
_DIGITS: Final = frozenset(string.digits)
_MAX_DIGITS: Final = 4000  # below Python's default limit on int <-> str conversion (4300)
_COMPARISONS: Final = {"=": Op.EQ, "!=": Op.NE, "<": Op.LT, "<=": Op.LE, ">": Op.GT, ">=": Op.GE}
_KEYWORD_OPS: Final = {"between": Op.BETWEEN, "in": Op.IN, "not": Op.NOT_IN, "exists": Op.EXISTS}
_KEYWORD_OPS.update({op.value: op for op in _STRING_OPS})

_EXPECT_ATTRIBUTE: Final = "an attribute name"
_EXPECT_OPERATOR: Final = (
    "an operator (=, !=, <, <=, >, >=, between, in, not in, startswith, endswith, contains, exists)"
)
_EXPECT_LITERAL: Final = "a literal (number, 'string', true or false)"
_EXPECT_AND_OR_END: Final = "'and' or end of input"
_EXPECT_NOT_BOOLEAN: Final = "a number or a 'string' (booleans take only = and !=)"


class _Token(NamedTuple):  # a tuple: made for every token of every filter, and a frozen dataclass is slow to make
    kind: str
    text: str
    position: int
    value: Value = 0
    expected: str = ""  # set on a lexical error that says itself what was expected


_SPACES: Final = re.compile(r"\s*")  # as str.isspace
_WORD_AT: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")  # _NAME_START, then _NAME_REST


def _number_end(text: str, start: int) -> int:
    """The end of ``-?digits(.digits)?([eE][+-]?digits)?`` at ``start``."""
    n = len(text)
    i = start + 1 if text[start] == "-" else start
    while i < n and text[i] in _DIGITS:
        i += 1
    if i + 1 < n and text[i] == "." and text[i + 1] in _DIGITS:
        i += 2
        while i < n and text[i] in _DIGITS:
            i += 1
    if i < n and text[i] in "eE":
        j = i + 1
        if j < n and text[j] in "+-":
            j += 1
        if j < n and text[j] in _DIGITS:
            i = j
            while i < n and text[i] in _DIGITS:
                i += 1
    return i


def _tokenize(text: str) -> Iterator[_Token]:
    """Tokens of ``text``, ending with one END token; a bad token stops the stream."""
    i, n = 0, len(text)
    while True:
        i = _SPACES.match(text, i).end()  # type: ignore[union-attr]  # \s* always matches
        if i >= n:
            yield _Token(_END, END_OF_INPUT, n)
            return
        c = text[i]
        if c in _NAME_START:
            j = _WORD_AT.match(text, i).end()  # type: ignore[union-attr]  # c starts a word
            yield _Token(_WORD, text[i:j], i)
            i = j
        elif c in _DIGITS or (c == "-" and i + 1 < n and text[i + 1] in _DIGITS):
            j = _number_end(text, i)
            if j < n and (text[j] in _NAME_REST or text[j] in "+-"):  # 1.2.3, 1e, 12abc
                while j < n and (text[j] in _NAME_REST or text[j] in "+-"):
                    j += 1
                yield _Token(_BAD, text[i:j], i)
                return
            spelled = text[i:j]
            if any(ch in spelled for ch in ".eE"):
                yield _Token(_NUMBER, spelled, i, float(spelled))
            elif len(spelled) <= _MAX_DIGITS:
                yield _Token(_NUMBER, spelled, i, int(spelled))
            else:  # beyond what int() and str() convert (sys.get_int_max_str_digits)
                yield _Token(_BAD, spelled, i, expected=f"an integer of at most {_MAX_DIGITS} digits")
                return
            i = j
        elif c == "'":
            parts, j = [], i + 1
            while True:
                k = text.find("'", j)
                if k < 0:
                    yield _Token(
                        _BAD, END_OF_INPUT, n, expected=f"a quote (') closing the string opened at position {i}"
                    )
                    return
                parts.append(text[j:k])
                if k + 1 < n and text[k + 1] == "'":
                    parts.append("'")
                    j = k + 2
                else:
                    break
            yield _Token(_STRING, text[i : k + 1], i, "".join(parts))
            i = k + 1
        elif text.startswith(("<=", ">=", "!="), i):
            yield _Token(_SYMBOL, text[i : i + 2], i)
            i += 2
        elif c in "=<>(),":
            yield _Token(_SYMBOL, c, i)
            i += 1
        else:
            yield _Token(_BAD, c, i)
            return


_KIND_NOUN: Final = {Kind.NUMBER: "a number", Kind.STRING: "a 'string'", Kind.BOOLEAN: "true or false"}


_PREDICATES: dict[tuple[object, ...], Predicate] = {}
_MAX_PREDICATES = 1 << 16


def _predicate(name: str, op: Op, values: tuple[Value, ...]) -> Predicate:
    """``Predicate(name, op, values)``, the same (immutable) object for the same text: filters
    share most of their predicates (a workload of 100k subscriptions over 15 attributes with 4
    values each has 60 distinct equalities), and building one (its checks and compiled test) is
    a large part of parsing (docs/decisions/filter-parser.md)."""
    key = (name, op, *((type(v), v) for v in values))  # 1, 1.0 and True stay apart
    found = _PREDICATES.get(key)
    if found is None:
        if len(_PREDICATES) >= _MAX_PREDICATES:
            _PREDICATES.clear()
        found = _PREDICATES[key] = Predicate(name, op, values)
    return found


# One predicate of the common shapes and the separator after it: a comparison with an integer, a
# plain string (no doubled quote) or a boolean, or ``between`` two integers; then ``and`` or the
# end. Every boundary is as the tokenizer draws it (a number runs into no name character, sign
# or dot; a keyword is a whole word of ASCII letters), so what this accepts the grammar parses to
# the same predicate; other whitespace than ASCII's goes to the parser.
_SIMPLE_PREDICATE: Final = re.compile(
    r"\s*([A-Za-z_][A-Za-z0-9_.]*)(?:"
    r"\s*(<=|>=|!=|=|<|>)\s*(?:(-?[0-9]{1,18})(?![0-9A-Za-z_.+-])|'([^']*)'(?!')"
    r"|((?i:true|false))(?![A-Za-z0-9_.]))"
    r"|\s+(?i:between)\s+(-?[0-9]{1,18})\s+(?i:and)\s+(-?[0-9]{1,18})(?![0-9A-Za-z_.+-]))"
    r"(?:\s+(?i:and)(?=\s)|\s*\Z)",
    re.ASCII,  # case folding and whitespace as the tokenizer's words: 'ſ' is no 's' here
)

# A whole filter of those shapes, booleans only with = and != (what ``_parse_simple`` accepts):
# each predicate's match from a given position is unique (a name ends where no name character
# follows, every literal and keyword at a boundary), so a full match of the repetition is the
# same split into predicates that ``_parse_simple`` makes.
_SIMPLE_FILTER: Final = re.compile(
    r"(?:\s*[A-Za-z_][A-Za-z0-9_.]*(?:"
    r"\s*(?:<=|>=|!=|=|<|>)\s*(?:-?[0-9]{1,18}(?![0-9A-Za-z_.+-])|'[^']*'(?!'))"
    r"|\s*!?=\s*(?i:true|false)(?![A-Za-z0-9_.])"
    r"|\s+(?i:between)\s+-?[0-9]{1,18}\s+(?i:and)\s+-?[0-9]{1,18}(?![0-9A-Za-z_.+-]))"
    r"(?:\s+(?i:and)(?=\s)|\s*\Z))+",
    re.ASCII,
)

# The numeric form: ``between`` and comparison predicates alone on integers of at most 15 digits
# (exact doubles), written canonically (single spaces, lower-case keywords, nothing before or
# after), as range-heavy and numeric equality subscriptions are. A part of what _SIMPLE_FILTER
# accepts (its words and boundaries are those), tried first where it is common; the matching
# index and the job's driver read a batch of such texts from their bytes at once
# (``routing.matching.numeric_form``, which accepts exactly what this pattern matches whole).
_NUMERIC_PREDICATE: Final = (
    r"[A-Za-z_][A-Za-z0-9_.]* (?:between -?[0-9]{1,15} and -?[0-9]{1,15}|(?:<=|>=|!=|=|<|>) -?[0-9]{1,15})"
)
_NUMERIC_FILTER: Final = re.compile(rf"{_NUMERIC_PREDICATE}(?: and {_NUMERIC_PREDICATE})*", re.ASCII)

_SimpleGroups: TypeAlias = tuple[str | None, ...]
_Check: TypeAlias = tuple[str, Callable[[object], bool]]
_SIMPLE_PREDICATES: dict[_SimpleGroups, tuple[Predicate, _Check]] = {}
_BETWEEN_TEST: Final = _NUMBER_TESTS["between"]
_FIRST_OF: Final = itemgetter(0)
_SECOND_OF: Final = itemgetter(1)


def _simple_parts(groups: _SimpleGroups) -> tuple[str, Op, tuple[Value, ...], Kind] | None:
    """The attribute, operator, literals and kind of the predicate that :data:`_SIMPLE_PREDICATE`
    matched with these ``groups``, or None for a boolean ordered (the parser says why not)."""
    name, symbol, number, quoted, flag, low, high = groups
    if symbol is None:
        return cast(str, name), Op.BETWEEN, (int(cast(str, low)), int(cast(str, high))), Kind.NUMBER
    if number is not None:
        return cast(str, name), _COMPARISONS[symbol], (int(number),), Kind.NUMBER
    if quoted is not None:
        return cast(str, name), _COMPARISONS[symbol], (quoted,), Kind.STRING
    if symbol == "=" or symbol == "!=":
        return cast(str, name), _COMPARISONS[symbol], (cast(str, flag).lower() == "true",), Kind.BOOLEAN
    return None


def _simple_predicate(groups: _SimpleGroups) -> tuple[Predicate, _Check] | None:
    """The predicate that :data:`_SIMPLE_PREDICATE` matched with these ``groups`` (and its
    ``Filter`` check), cached under the groups (plain strings: a key holding an ``Op`` would be
    hashed by a Python call), or None for a boolean ordered (the parser says why not).

    The predicate is made without the checks of ``Predicate.__post_init__``: the pattern has
    made them (a valid name, the operator's arity, one kind of finite literals, booleans only
    with = and !=). Spellings of one predicate (``x=1``, ``x = 01``) are equal objects, not one.
    """
    parts = _simple_parts(groups)
    if parts is None:
        return None
    name, op, values, kind = parts
    test = _BETWEEN_TEST(*values) if op is Op.BETWEEN else _compile(op, kind, values)
    found = object.__new__(Predicate)
    vars(found).update(attribute=name, op=op, values=values, _kind=kind, _test=test)
    if len(_SIMPLE_PREDICATES) >= _MAX_PREDICATES:
        _SIMPLE_PREDICATES.clear()
    made = _SIMPLE_PREDICATES[groups] = (found, (name, test))
    return made


def _parse_simple(text: str) -> Filter | None:
    """The filter of ``text`` when every predicate has one of the common shapes of
    :data:`_SIMPLE_PREDICATE`, else None (the full parser decides, errors included). Equal to
    ``_Parser(text).filter()`` whenever it returns a filter (tests/unit/matching: a property test
    against the parser); a fraction of its cost, as it skips the token stream: per predicate one
    pattern match and one cache lookup by the matched groups (docs/decisions/filter-parser.md)."""
    made: list[tuple[Predicate, _Check]] = []
    append, get = made.append, _SIMPLE_PREDICATES.get
    match, pos, n = _SIMPLE_PREDICATE.match, 0, len(text)
    while pos < n or not made:
        m = match(text, pos)
        if m is None:
            return None
        groups = m.groups()
        pair = get(groups) or _simple_predicate(groups)
        if pair is None:
            return None  # a boolean ordered: the parser says why not
        append(pair)
        pos = m.end()
    found = object.__new__(Filter)
    vars(found).update(predicates=tuple(map(_FIRST_OF, made)), _checks=tuple(map(_SECOND_OF, made)))
    return found


def validate_filter(text: str) -> None:
    """Raise what ``parse_filter(text)`` raises, if anything, without building the filter when
    the text has only the common shapes of the simple path (one pattern match in C); the
    matching job's driver validates every subscribe record this way.

    Raises
    ------
    FilterError
        As ``parse_filter``: the same position, found and expected.

    Examples
    --------
    >>> validate_filter("a between 1 and 5 and s = 'x'")
    >>> try:
    ...     validate_filter("a between 1 and")
    ... except FilterError as error:
    ...     print(error.reason)
    at position 15: expected a literal (number, 'string', true or false), found end of input
    """
    if _NUMERIC_FILTER.fullmatch(text) is None and _SIMPLE_FILTER.fullmatch(text) is None:
        _Parser(text).filter()


class _Parser:
    """Recursive descent over the grammar::

    filter    := predicate ("and" predicate)* END
    predicate := NAME ( ("=" | "!=" | "<" | "<=" | ">" | ">=") literal
                      | "between" literal "and" literal
                      | ["not"] "in" "(" literal ("," literal)* ")"
                      | ("startswith" | "endswith" | "contains") literal
                      | "exists" )
    literal   := NUMBER | STRING | "true" | "false"
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.current = next(self.tokens)

    def peek(self) -> _Token:
        if self.current.expected:  # a lexical error that names its own expectation
            raise self.error(self.current, self.current.expected)
        return self.current

    def advance(self) -> _Token:
        token = self.peek()
        if token.kind not in (_END, _BAD):  # the stream stops at either
            self.current = next(self.tokens)
        return token

    def error(self, token: _Token, expected: str) -> FilterError:
        return FilterError(self.text, token.position, expected, token.text)

    def is_keyword(self, token: _Token, word: str) -> bool:
        return token.kind == _WORD and token.text.lower() == word

    def expect_keyword(self, word: str, expected: str) -> None:
        if not self.is_keyword(self.peek(), word):
            raise self.error(self.peek(), expected)
        self.advance()

    def filter(self) -> Filter:
        predicates = [self.predicate()]
        while True:
            token = self.peek()
            if token.kind == _END:
                return Filter(tuple(predicates))
            if not self.is_keyword(token, "and"):
                raise self.error(token, _EXPECT_AND_OR_END)
            self.advance()
            predicates.append(self.predicate())

    def predicate(self) -> Predicate:
        token = self.peek()
        if token.kind != _WORD:
            raise self.error(token, _EXPECT_ATTRIBUTE)
        name = self.advance().text
        token = self.advance()
        if token.kind == _SYMBOL and token.text in _COMPARISONS:
            op = _COMPARISONS[token.text]
            value, at = self.literal()
            if op not in _BOOLEAN_OPS and isinstance(value, bool):
                raise self.error(at, _EXPECT_NOT_BOOLEAN)
            return _predicate(name, op, (value,))
        keyword_op = _KEYWORD_OPS.get(token.text.lower()) if token.kind == _WORD else None
        if keyword_op is None:
            raise self.error(token, _EXPECT_OPERATOR)
        if keyword_op is Op.EXISTS:
            return _predicate(name, Op.EXISTS, ())
        if keyword_op is Op.BETWEEN:
            low, low_at = self.literal()
            if isinstance(low, bool):
                raise self.error(low_at, _EXPECT_NOT_BOOLEAN)
            self.expect_keyword("and", f"'and' after the lower bound (between {low_at.text} and ...)")
            high, high_at = self.literal()
            if kind_of(high) is not kind_of(low):
                raise self.error(high_at, f"{_KIND_NOUN[_kind(low)]} like the lower bound {low_at.text}")
            return _predicate(name, Op.BETWEEN, (low, high))
        if keyword_op in _LISTS:
            if keyword_op is Op.NOT_IN:
                self.expect_keyword("in", "'in' (as in 'not in')")
            return _predicate(name, keyword_op, self.literal_list())
        value, at = self.literal()
        if not isinstance(value, str):
            raise self.error(at, f"a 'string' ({keyword_op.value} takes a string)")
        return _predicate(name, keyword_op, (value,))

    def literal(self) -> tuple[Value, _Token]:
        token = self.peek()
        if token.kind == _NUMBER:
            if isinstance(token.value, float) and not math.isfinite(token.value):
                raise self.error(token, "a number within the range of a double (about ±1.8e308)")
        elif token.kind == _WORD and token.text.lower() in ("true", "false"):
            self.advance()
            return token.text.lower() == "true", token
        elif token.kind != _STRING:
            raise self.error(token, _EXPECT_LITERAL)
        self.advance()
        return token.value, token

    def literal_list(self) -> tuple[Value, ...]:
        token = self.peek()
        if not (token.kind == _SYMBOL and token.text == "("):
            raise self.error(token, "'(' opening the list of values")
        self.advance()
        first, first_at = self.literal()
        if isinstance(first, bool):
            raise self.error(first_at, _EXPECT_NOT_BOOLEAN)
        values = [first]
        while True:
            token = self.advance()
            if token.kind == _SYMBOL and token.text == ")":
                return tuple(values)
            if not (token.kind == _SYMBOL and token.text == ","):
                raise self.error(token, "',' or ')'")
            value, at = self.literal()
            if kind_of(value) is not kind_of(first):
                raise self.error(at, f"{_KIND_NOUN[_kind(first)]} like the first value {first_at.text}")
            values.append(value)


def _kind(value: Value) -> Kind:
    kind = kind_of(value)
    assert kind is not None
    return kind


def parse_filter(text: str) -> Filter:
    """Parse the text of an atomic subscription (docs/reference/filters.md).

    Parameters
    ----------
    text : str
        Predicates joined by ``and``; keywords are case-insensitive.

    Returns
    -------
    Filter

    Raises
    ------
    FilterError
        With the 0-based ``position`` of the problem, what was ``found`` there and what was
        ``expected``; its message shows the offending line with a caret.

    Examples
    --------
    >>> parse_filter("name startswith 'air' and kind != 'test'").predicates[0]
    Predicate(attribute='name', op=<Op.STARTSWITH: 'startswith'>, values=('air',))
    >>> try:
    ...     parse_filter("region in ('eu', )")
    ... except FilterError as error:
    ...     print(error)
    at position 17: expected a literal (number, 'string', true or false), found ')'
      region in ('eu', )
                       ^
    >>> try:
    ...     parse_filter("flag < true")
    ... except FilterError as error:
    ...     print(error.position, error.found, "|", error.expected)
    7 true | a number or a 'string' (booleans take only = and !=)
    """
    return _parse_simple(text) or _Parser(text).filter()


# ---------------------------------------------------------------------------------------------
# Satisfiability of one attribute's constraints, with a witness
# ---------------------------------------------------------------------------------------------


class _Absent(enum.Enum):
    ABSENT = "absent"


_ABSENT: Final = _Absent.ABSENT
_Literal: TypeAlias = tuple[Predicate, bool]  # a predicate, negated when the flag is set
_Solution: TypeAlias = Value | _Absent | None  # None: no solution


def _solve(literals: Sequence[_Literal]) -> _Solution:
    """A value of one attribute satisfying every literal, ``_ABSENT`` when leaving the attribute
    out does, or None when nothing does (the decision procedure of the module docstring)."""
    positive = [p for p, negated in literals if not negated]
    if not positive:
        return _ABSENT
    negative = [p for p, negated in literals if negated]
    if any(p.op is Op.EXISTS for p in negative):
        return None
    kinds = list(dict.fromkeys(p.kind for p in positive if p.kind is not None))
    if len(kinds) > 1:
        return None
    for kind in kinds or [Kind.NUMBER, Kind.STRING, Kind.BOOLEAN]:
        solver = _SOLVERS[kind]
        value = solver([p for p in positive if p.kind is kind], [p for p in negative if p.kind is kind])
        if value is not None:
            return value
    # only `exists` constrains the value, and no number, string or boolean escapes the
    # negations: NaN fails every numeric predicate, so it escapes every one of them
    return math.nan if not kinds else None


def _solve_booleans(positive: list[Predicate], negative: list[Predicate]) -> Value | None:
    for value in (True, False):
        if all(p.matches(True, value) for p in positive) and not any(p.matches(True, value) for p in negative):
            return value
    return None


# --- numbers ---------------------------------------------------------------------------------

_Bound: TypeAlias = tuple[float, bool] | None  # (value, closed); ints are typed as float


@dataclass
class _NumberSet:
    """``{x : low < x < high (or <= where closed), x in allowed (when set), x not in excluded}``."""

    low: _Bound = None
    high: _Bound = None
    allowed: list[float] | None = None
    excluded: set[float] = field(default_factory=set)

    def raise_low(self, value: float, closed: bool) -> None:
        if self.low is None or value > self.low[0] or (value == self.low[0] and not closed):
            self.low = (value, closed)

    def lower_high(self, value: float, closed: bool) -> None:
        if self.high is None or value < self.high[0] or (value == self.high[0] and not closed):
            self.high = (value, closed)

    def bound(self, low: float, high: float) -> None:
        self.raise_low(low, True)
        self.lower_high(high, True)

    def allow(self, values: Iterable[float]) -> None:
        members = list(dict.fromkeys(values))
        if self.allowed is not None:
            keep = set(members)
            members = [v for v in self.allowed if v in keep]
        self.allowed = members

    def in_range(self, x: float) -> bool:
        if self.low is not None and not (x > self.low[0] or (self.low[1] and x == self.low[0])):
            return False
        return self.high is None or x < self.high[0] or (self.high[1] and x == self.high[0])

    def witness(self) -> float | None:
        if self.allowed is not None:
            return next((x for x in self.allowed if self.in_range(x) and x not in self.excluded), None)
        return next((x for x in self.candidates() if self.in_range(x) and x not in self.excluded), None)

    def candidates(self) -> Iterator[float]:
        """Readable values first, then the exhaustive walk that makes ``witness`` exact."""
        k = len(self.excluded)
        low, high = self.low, self.high
        if low is None and high is None:
            yield from range(k + 1)  # k + 1 distinct integers: one is not excluded
            return
        for bound in (low, high):
            if bound is not None and bound[1]:
                yield bound[0]
        if low is not None:
            ints, floats = _walk_up(low[0], strict=not low[1], count=k + 1)
        else:
            assert high is not None
            ints, floats = _walk_up(-high[0], strict=not high[1], count=k + 1)
            ints, floats = [-x for x in ints], [-x for x in floats]
        yield from ints
        if low is not None and high is not None:
            yield from _midpoint(low[0], high[0])
        yield from floats


def _midpoint(low: float, high: float) -> list[float]:
    try:
        return [(low + high) / 2]
    except OverflowError:  # huge integers
        return []


def _first_float_above(x: float, strict: bool) -> float:
    """The least float ``f`` with ``f > x`` (``f >= x`` unless strict); ``x`` may be a huge int."""
    try:
        f = float(x)
    except OverflowError:
        f = math.inf if x > 0 else -sys.float_info.max
    while f < x or (strict and f == x):
        f = math.nextafter(f, math.inf)
    while True:
        g = math.nextafter(f, -math.inf)
        if g > x or (not strict and g == x):
            f = g
        else:
            return f


def _walk_up(x: float, strict: bool, count: int) -> tuple[list[int], list[float]]:
    """The ``count`` least integers and the ``count`` least floats above ``x`` (or at it unless
    strict). Within an interval starting at ``x``, either every representable number is among
    those of them inside the interval, or at least ``count`` distinct ones are."""
    n = math.floor(x)
    if n < x or (strict and n == x):
        n += 1
    floats = [_first_float_above(x, strict)]
    while len(floats) < count and floats[-1] != math.inf:
        floats.append(math.nextafter(floats[-1], math.inf))
    return list(range(n, n + count)), floats


def _number_alternatives(p: Predicate, negated: bool) -> list[Callable[[_NumberSet], None]]:
    """What ``p`` (or not p) asks of a number, as alternatives (a negated ``between`` has two)."""
    vs = cast(tuple[float, ...], p.values)
    v = vs[0]
    op = p.op
    if negated:
        if op is Op.BETWEEN:
            return [lambda s: s.lower_high(vs[0], False), lambda s: s.raise_low(vs[1], False)]
        op = {
            Op.EQ: Op.NE,
            Op.NE: Op.EQ,
            Op.LT: Op.GE,
            Op.LE: Op.GT,
            Op.GT: Op.LE,
            Op.GE: Op.LT,
            Op.IN: Op.NOT_IN,
            Op.NOT_IN: Op.IN,
        }[op]
    actions: dict[Op, Callable[[_NumberSet], None]] = {
        Op.EQ: lambda s: s.allow([v]),
        Op.IN: lambda s: s.allow(vs),
        Op.NE: lambda s: s.excluded.add(v),
        Op.NOT_IN: lambda s: s.excluded.update(vs),
        Op.LT: lambda s: s.lower_high(v, False),
        Op.LE: lambda s: s.lower_high(v, True),
        Op.GT: lambda s: s.raise_low(v, False),
        Op.GE: lambda s: s.raise_low(v, True),
        Op.BETWEEN: lambda s: s.bound(vs[0], vs[1]),
    }
    return [actions[op]]


def _solve_numbers(positive: list[Predicate], negative: list[Predicate]) -> Value | None:
    choices = [_number_alternatives(p, False) for p in positive]
    choices += [_number_alternatives(p, True) for p in negative]
    for combination in product(*choices):
        numbers_set = _NumberSet()
        for apply in combination:
            apply(numbers_set)
        found = numbers_set.witness()
        if found is not None:
            return found
    return None


# --- strings ---------------------------------------------------------------------------------

_MAX_CODE_POINT: Final = sys.maxunicode
_LESS, _GREATER = -1, -2  # comparator states once the order is decided


class _Automaton:
    """A complete deterministic automaton over code points; states are hashable."""

    start: object = 0

    def step(self, state: object, char: str) -> object:
        raise NotImplementedError

    def accepts(self, state: object) -> bool:
        raise NotImplementedError

    def settled(self, state: object) -> bool:
        """Whether acceptance can no longer change from ``state``, whatever follows."""
        return False


class _Prefix(_Automaton):
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def step(self, state: object, char: str) -> object:
        i = cast(int, state)
        if i < 0 or i == len(self.prefix):
            return i
        return i + 1 if self.prefix[i] == char else -1

    def accepts(self, state: object) -> bool:
        return state == len(self.prefix)

    def settled(self, state: object) -> bool:
        return state == -1 or state == len(self.prefix)


class _Pattern(_Automaton):
    """Knuth-Morris-Pratt automaton: state = length of the longest prefix of the pattern that is
    a suffix of the input. ``endswith`` accepts in the full state; ``contains`` stays there."""

    def __init__(self, pattern: str, sticky: bool) -> None:
        self.pattern = pattern
        self.sticky = sticky
        self.fail = [0] * len(pattern)
        k = 0
        for i in range(1, len(pattern)):
            while k and pattern[i] != pattern[k]:
                k = self.fail[k - 1]
            if pattern[i] == pattern[k]:
                k += 1
            self.fail[i] = k
        self.memo: dict[tuple[int, str], int] = {}

    def step(self, state: object, char: str) -> object:
        q = cast(int, state)
        m = len(self.pattern)
        if self.sticky and q == m:
            return q
        key = (q, char)
        if key not in self.memo:
            r = q
            while True:
                if r < m and self.pattern[r] == char:
                    r += 1
                    break
                if r == 0:
                    break
                r = self.fail[r - 1]
            self.memo[key] = r
        return self.memo[key]

    def accepts(self, state: object) -> bool:
        return state == len(self.pattern)

    def settled(self, state: object) -> bool:
        return self.sticky and state == len(self.pattern)


class _Comparator(_Automaton):
    """Lexicographic comparison with ``bound``: state ``i`` >= 0 means equal to ``bound[:i]``."""

    def __init__(self, bound: str, results: frozenset[int]) -> None:
        self.bound = bound
        self.results = results  # accepted outcomes among _LESS, 0 (equal) and _GREATER

    def step(self, state: object, char: str) -> object:
        i = cast(int, state)
        if i < 0:
            return i
        if i == len(self.bound) or char > self.bound[i]:
            return _GREATER
        return i + 1 if char == self.bound[i] else _LESS

    def outcome(self, state: object) -> int:
        i = cast(int, state)
        if i < 0:
            return i
        return 0 if i == len(self.bound) else _LESS  # a proper prefix of the bound is less

    def accepts(self, state: object) -> bool:
        return self.outcome(state) in self.results

    def settled(self, state: object) -> bool:
        return cast(int, state) < 0


class _Members(_Automaton):
    """Membership in a finite set of strings: a trie; state = the prefix read, or None (dead)."""

    def __init__(self, words: Iterable[str]) -> None:
        self.words = frozenset(words)
        self.prefixes = frozenset(w[:i] for w in self.words for i in range(len(w) + 1))
        self.start = ""

    def step(self, state: object, char: str) -> object:
        if state is None:
            return None
        longer = cast(str, state) + char
        return longer if longer in self.prefixes else None

    def accepts(self, state: object) -> bool:
        return state in self.words

    def settled(self, state: object) -> bool:
        return state is None


class _All(_Automaton):
    """The product of automata that must all accept."""

    def __init__(self, parts: Sequence[_Automaton]) -> None:
        self.parts = tuple(parts)
        self.start = tuple(a.start for a in self.parts)

    def step(self, state: object, char: str) -> object:
        return tuple(a.step(s, char) for a, s in zip(self.parts, cast(tuple[object, ...], state), strict=True))

    def accepts(self, state: object) -> bool:
        return all(a.accepts(s) for a, s in zip(self.parts, cast(tuple[object, ...], state), strict=True))

    def settled(self, state: object) -> bool:
        parts = zip(self.parts, cast(tuple[object, ...], state), strict=True)
        pairs = list(parts)
        return all(a.settled(s) for a, s in pairs) or any(a.settled(s) and not a.accepts(s) for a, s in pairs)


class _Not(_Automaton):
    def __init__(self, inner: _Automaton) -> None:
        self.inner = inner
        self.start = inner.start

    def step(self, state: object, char: str) -> object:
        return self.inner.step(state, char)

    def accepts(self, state: object) -> bool:
        return not self.inner.accepts(state)

    def settled(self, state: object) -> bool:
        return self.inner.settled(state)


_COMPARATOR_RESULTS: Final = {
    Op.LT: frozenset({_LESS}),
    Op.LE: frozenset({_LESS, 0}),
    Op.GT: frozenset({_GREATER}),
    Op.GE: frozenset({_GREATER, 0}),
}


def _string_automaton(p: Predicate) -> _Automaton:
    vs = cast(tuple[str, ...], p.values)
    if p.op in _COMPARATOR_RESULTS:
        return _Comparator(vs[0], _COMPARATOR_RESULTS[p.op])
    if p.op is Op.BETWEEN:
        return _All([_Comparator(vs[0], _COMPARATOR_RESULTS[Op.GE]), _Comparator(vs[1], _COMPARATOR_RESULTS[Op.LE])])
    if p.op is Op.STARTSWITH:
        return _Prefix(vs[0])
    if p.op is Op.ENDSWITH:
        return _Pattern(vs[0], sticky=False)
    if p.op is Op.CONTAINS:
        return _Pattern(vs[0], sticky=True)
    members = _Members(vs)
    return _Not(members) if p.op in (Op.NE, Op.NOT_IN) else members


_PREFERRED: Final = string.ascii_lowercase + string.digits + string.ascii_uppercase


def _gap_representative(low: int, high: int) -> str:
    """One code point of ``[low, high]``: a letter or digit if any, else avoiding surrogates."""
    for c in _PREFERRED:
        if low <= ord(c) <= high:
            return c
    if 0xD800 <= low <= 0xDFFF and high > 0xDFFF:
        return chr(0xE000)
    return chr(low)


def _alphabet(chars: Iterable[str]) -> list[str]:
    """The literals' characters plus one character from each gap between them: code points in
    one gap compare alike with every literal character, so they step every automaton alike."""
    points = sorted({ord(c) for c in chars})
    result: list[str] = []
    previous = -1
    for point in [*points, _MAX_CODE_POINT + 1]:
        if point - previous > 1:
            result.append(_gap_representative(previous + 1, point - 1))
        if point <= _MAX_CODE_POINT:
            result.append(chr(point))
        previous = point
    return sorted(result)


def _solve_strings(positive: list[Predicate], negative: list[Predicate]) -> Value | None:
    finite = next((p for p in positive if p.op in (Op.EQ, Op.IN)), None)
    if finite is not None:  # few candidates: try each
        for value in dict.fromkeys(finite.values):
            if all(p.matches(True, value) for p in positive) and not any(p.matches(True, value) for p in negative):
                return value
        return None
    machine = _All([_string_automaton(p) for p in positive] + [_Not(_string_automaton(p)) for p in negative])
    chars = [c for p in (*positive, *negative) for v in p.values for c in cast(str, v)]
    alphabet = _alphabet(chars)
    start = machine.start
    if machine.accepts(start):
        return ""
    parents: dict[object, tuple[object, str]] = {}
    seen = {start}
    queue = deque([start])
    while queue:  # breadth first: the shortest witness
        state = queue.popleft()
        if machine.settled(state):
            continue  # not accepting now, so never
        for char in alphabet:
            after = machine.step(state, char)
            if after in seen:
                continue
            seen.add(after)
            parents[after] = (state, char)
            if machine.accepts(after):
                letters = []
                while after != start:
                    after, letter = parents[after]
                    letters.append(letter)
                return "".join(reversed(letters))
            queue.append(after)
    return None


_SOLVERS: Final[dict[Kind, Callable[[list[Predicate], list[Predicate]], Value | None]]] = {
    Kind.NUMBER: _solve_numbers,
    Kind.STRING: _solve_strings,
    Kind.BOOLEAN: _solve_booleans,
}


# ---------------------------------------------------------------------------------------------
# Covering and overlap
# ---------------------------------------------------------------------------------------------


def _by_attribute(f: Filter) -> dict[str, list[Predicate]]:
    grouped: dict[str, list[Predicate]] = {}
    for p in f.predicates:
        grouped.setdefault(p.attribute, []).append(p)
    return grouped


def _event(solutions: Iterable[tuple[str, _Solution]]) -> Event | None:
    event: Event = {}
    for name, value in solutions:
        if value is None:
            return None
        if value is not _ABSENT:
            event[name] = value
    return event


def matching_event(f: Filter) -> Event | None:
    """An event that ``f`` matches, or None when ``f`` matches nothing.

    Examples
    --------
    >>> matching_event(parse_filter("name startswith 'air' and name endswith 'port' and x > 3"))
    {'name': 'airport', 'x': 4}
    >>> matching_event(parse_filter("x > 3 and x < 3.5 and x != 3.25")) is None
    False
    >>> print(matching_event(parse_filter("s > 'a' and s < 'a\\x00'")))
    None
    """
    return _event((name, _solve([(p, False) for p in ps])) for name, ps in _by_attribute(f).items())


def cover_counterexample(f2: Filter, f1: Filter) -> Event | None:
    """An event that ``f1`` matches and ``f2`` does not, or None when ``f2`` covers ``f1``.

    Exact for every filter of the language (see the module docstring for the method).

    Parameters
    ----------
    f2 : Filter
        The covering (more general) filter.
    f1 : Filter
        The covered (more specific) filter.

    Examples
    --------
    >>> general = parse_filter("name >= 'ab' and name < 'ac'")
    >>> cover_counterexample(general, parse_filter("name startswith 'ab' and x = 1"))  # covered
    >>> cover_counterexample(general, parse_filter("name startswith 'a'"))
    {'name': 'a'}
    >>> cover_counterexample(parse_filter("x exists"), parse_filter("name = 'a'"))
    {'name': 'a'}
    """
    base = matching_event(f1)
    if base is None:
        return None
    constraints1 = _by_attribute(f1)
    for name, predicates2 in _by_attribute(f2).items():
        predicates1 = constraints1.get(name, [])
        literals: list[_Literal] = [(p, False) for p in predicates1]
        for p in predicates2:
            if p in predicates1:
                continue
            value = _solve([*literals, (p, True)])
            if value is None:
                continue
            event = dict(base)
            if value is _ABSENT:
                event.pop(name, None)
            else:
                event[name] = value
            return event
    return None


def covers(f2: Filter, f1: Filter) -> bool:
    """Whether every event matching ``f1`` matches ``f2`` ("f1 is covered by f2").

    A filter that matches nothing is covered by every filter; ``f2`` never covers ``f1`` when
    it constrains an attribute that a satisfiable ``f1`` leaves free (``f1`` then matches events
    without it).

    Examples
    --------
    >>> covers(parse_filter("price < 200"), parse_filter("price between 10 and 20 and symbol = 'IBM'"))
    True
    >>> covers(parse_filter("price < 200 and volume > 0"), parse_filter("price < 100"))
    False
    >>> covers(parse_filter("x != 3"), parse_filter("x > 1 and x < 2"))
    True
    """
    return cover_counterexample(f2, f1) is None


def overlap_witness(f1: Filter, f2: Filter) -> Event | None:
    """An event that both filters match, or None when they share none.

    Examples
    --------
    >>> overlap_witness(parse_filter("x > 3 and s contains 'ab'"), parse_filter("x < 5 and s endswith 'b'"))
    {'x': 4, 's': 'ab'}
    >>> print(overlap_witness(parse_filter("flag = true"), parse_filter("flag != true")))
    None
    """
    constraints2 = _by_attribute(f2)
    joint = _by_attribute(f1)
    for name, ps in constraints2.items():
        joint.setdefault(name, []).extend(ps)
    return _event((name, _solve([(p, False) for p in ps])) for name, ps in joint.items())


def overlaps(f1: Filter, f2: Filter) -> bool:
    """Whether some event matches both filters.

    Examples
    --------
    >>> overlaps(parse_filter("x in (1, 2)"), parse_filter("x > 1.5"))
    True
    >>> overlaps(parse_filter("x = 1"), parse_filter("x = '1'"))
    False
    """
    return overlap_witness(f1, f2) is not None
