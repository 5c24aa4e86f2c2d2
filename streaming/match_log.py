"""The matching log, offline (docs/reference/matching-log.md): ``siftstream match``.

A matching log is JSON Lines, one operation per line, applied in order::

    {"type": "subscribe", "subscription_id": "s1", "subscriber_id": "u1", "filter": "price < 120"}
    {"type": "event", "event_id": "e1", "attributes": {"symbol": "IBM", "price": 100.5}}
    {"type": "unsubscribe", "subscription_id": "s1"}

``run_match_log`` writes one line per event, in input order, naming the subscriptions active at
that point that the event matches, sorted by plain string order::

    {"event_id": "e1", "subscription_ids": ["s1"]}

(spaced as in docs/reference/matching-log.md and as Python's ``json.dumps`` writes it; non-ASCII text is written as
UTF-8, not escaped).

Problems go to ``err``, one report per line, each starting with ``line N:``; the returned
``MatchLogSummary`` counts what happened and gives the command's exit code.

Decisions where docs/reference/matching-log.md leaves room
---------------------------------------------
- **Unknown unsubscribe.** ``unsubscribe`` of an id that is not active is reported
  (``line N: ignored: ...``) and ignored, and it is a *valid* line: it is well formed and its
  meaning is defined by docs/reference/matching-log.md, so it does not make the exit code 2. Only invalid lines do.
- **Blank lines** (empty or only whitespace) are skipped silently. They are neither operations
  nor invalid (a trailing blank line is common in hand-written logs).
- **Invalid lines** are reported (``line N: invalid: ...``) and skipped, so they change
  nothing: an invalid ``subscribe`` leaves any existing subscription of that id as it was. A
  line is invalid when it is not one JSON object (orjson's reading: the bytes must be UTF-8,
  strings may not hold lone surrogates, numbers must be finite), when ``type`` is missing or
  not one of ``subscribe``, ``event``, ``unsubscribe``, when a field that its type needs is
  missing or is not a non-empty string (``subscription_id``; ``subscriber_id`` and ``filter``
  for subscribe; ``event_id`` for event; empty ids are invalid as in ``schemas/rules.py``), when
  ``attributes`` is not a JSON object, when the filter does not parse (the parser's message,
  with the position and what was expected), or when a subscribe carries a composite tree
  (docs/reference/composites.md) instead of an atomic filter: ``siftstream match`` matches atomic
  subscriptions only.
- **Extra fields** (``broker``, ``publisher_id``, ...) are allowed and ignored: docs/reference/topics.md's JSON
  forms may gain fields.
- **Attribute values** are taken as they are: numbers, strings and booleans match per docs/reference/filters.md
  section 1; ``null``, arrays and objects are values of no kind, which satisfy only ``exists``.
  Integers beyond 64 bits (which the wire format cannot carry) are read as the nearest double,
  as orjson reads them.
- **Counting.** ``operations`` counts the valid lines (subscribes, unsubscribes, unknown ones
  included, and events); ``matches`` counts (event, subscription) pairs in the output;
  ``events/s`` is events over the wall time of the whole run (reading, matching, writing).

Speed
-----
Events are not matched one at a time: consecutive event lines are buffered and matched with
one ``index.match`` call per run of events (at most ``batch_size`` per call). The buffer is
flushed before every subscribe or unsubscribe, so each event sees exactly the subscriptions
active at its point in the log.

Examples
--------
>>> import io
>>> log = [
...     '{"type": "subscribe", "subscription_id": "s1", "subscriber_id": "u1", "filter": "price < 120"}',
...     '{"type": "event", "event_id": "e1", "attributes": {"symbol": "IBM", "price": 100.5}}',
...     '{"type": "unsubscribe", "subscription_id": "s1"}',
...     '{"type": "event", "event_id": "e2", "attributes": {"price": 100.5}}',
...     '{"type": "unsubscribe", "subscription_id": "s1"}',
... ]
>>> out, err = io.StringIO(), io.StringIO()
>>> summary = run_match_log(log, out, err)
>>> print(out.getvalue(), end="")
{"event_id": "e1", "subscription_ids": ["s1"]}
{"event_id": "e2", "subscription_ids": []}
>>> print(err.getvalue(), end="")
line 5: ignored: unsubscribe of unknown subscription_id 's1'
>>> summary.events, summary.operations, summary.matches, summary.invalid_lines, summary.exit_code
(2, 5, 1, 0, 0)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol, TextIO, cast

import orjson

from routing.matching.index import EventBatch, Matches, MatchIndex
from routing.matching.language import Filter, FilterError, parse_filter

__all__ = ["DEFAULT_BATCH_SIZE", "MatchLogSummary", "run_match_log"]

DEFAULT_BATCH_SIZE = 4096
"""Most events per ``match`` call."""

OPERATION_TYPES = ("subscribe", "event", "unsubscribe")


class Index(Protocol):
    """What ``run_match_log`` needs of an index (``MatchIndex``, ``BruteForceIndex``)."""

    def add(self, subscription_id: str, filt: Filter | str) -> None: ...

    def remove(self, subscription_id: str) -> None: ...

    def __contains__(self, subscription_id: object) -> bool: ...

    def match(self, events: EventBatch | Sequence[Mapping[str, object]]) -> Matches: ...


@dataclass(frozen=True)
class MatchLogSummary:
    """What one run did.

    Attributes
    ----------
    events : int
        Valid event lines (one output line each).
    operations : int
        Valid lines of every type.
    subscribes, unsubscribes : int
        Valid subscribe and unsubscribe lines (``unsubscribes`` includes unknown ids).
    unknown_unsubscribes : int
        Unsubscribes of an id that was not active (reported and ignored; valid lines).
    matches : int
        (event, subscription) pairs written.
    invalid_lines : int
        Lines reported and skipped.
    blank_lines : int
        Empty or whitespace-only lines (skipped silently).
    seconds : float
        Wall time of the run.
    """

    events: int
    operations: int
    subscribes: int
    unsubscribes: int
    unknown_unsubscribes: int
    matches: int
    invalid_lines: int
    blank_lines: int
    seconds: float

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0

    @property
    def exit_code(self) -> int:
        """0 when every line was valid, 2 otherwise (docs/reference/matching-log.md)."""
        return 2 if self.invalid_lines else 0

    def describe(self) -> str:
        """The one-line summary the command prints on stderr."""
        text = (
            f"siftstream match: {self.events:,} events, {self.operations:,} operations "
            f"({self.subscribes:,} subscribe, {self.unsubscribes:,} unsubscribe), {self.matches:,} matches "
            f"in {self.seconds:.3f}s ({self.events_per_s:,.0f} events/s)"
        )
        notes = []
        if self.invalid_lines:
            notes.append(f"{self.invalid_lines:,} invalid line{'s' * (self.invalid_lines != 1)} skipped")
        if self.unknown_unsubscribes:
            n = self.unknown_unsubscribes
            notes.append(f"{n:,} unsubscribe{'s' * (n != 1)} of an unknown id ignored")
        return text + ("; " + ", ".join(notes) if notes else "")


class _Invalid(Exception):
    """A line that is reported and skipped; the message says what was wrong."""


def _shown(value: Any) -> str:
    """A JSON value, briefly, for a message."""
    if value is None:
        return "null"
    text = orjson.dumps(value).decode() if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _id_field(op: Mapping[str, Any], name: str) -> str:
    value = op.get(name)
    if name not in op:
        raise _Invalid(f"{op['type']} needs {name!r} (a non-empty string)")
    if not isinstance(value, str) or not value:
        raise _Invalid(f"{name} must be a non-empty string, got {_shown(value)}")
    return value


def _subscription(op: Mapping[str, Any], parse: Callable[[str], Filter]) -> tuple[str, Filter]:
    sid = _id_field(op, "subscription_id")
    _id_field(op, "subscriber_id")
    filt, composite = op.get("filter"), op.get("composite")
    if composite is not None:
        if filt is not None:
            raise _Invalid("exactly one of filter and composite may be set for subscribe")
        raise _Invalid(
            f"subscription {sid!r} is composite (docs/reference/composites.md); siftstream match takes atomic filters "
            "only: give the filter text (docs/reference/filters.md) in 'filter'"
        )
    if filt is None:
        raise _Invalid("subscribe needs 'filter' (the text of an atomic filter, docs/reference/filters.md)")
    if isinstance(filt, dict | list):
        raise _Invalid(
            f"filter of subscription {sid!r} is a JSON {'object' if isinstance(filt, dict) else 'array'} "
            "(a composite tree?); siftstream match takes the text of an atomic filter (docs/reference/filters.md)"
        )
    if not isinstance(filt, str):
        raise _Invalid(f"filter must be the text of an atomic filter (docs/reference/filters.md), got {_shown(filt)}")
    try:
        return sid, parse(filt)
    except FilterError as exc:
        hint = " (a composite tree? siftstream match takes atomic filters only)" if filt.lstrip()[:1] == "{" else ""
        raise _Invalid(f"filter of subscription {sid!r}{hint}: {exc}") from None


def _event(op: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    eid = _id_field(op, "event_id")
    if "attributes" not in op:
        raise _Invalid("event needs 'attributes' (an object of attribute name -> value)")
    attributes = op["attributes"]
    if not isinstance(attributes, dict):
        raise _Invalid(f"attributes must be a JSON object of attribute name -> value, got {_shown(attributes)}")
    return eid, attributes


def _id_list(sids: list[str]) -> bytes:
    """``sids`` as a JSON array spaced like ``json.dumps``: ``["a", "b"]``.

    One ``orjson.dumps`` of the list, with ``", "`` put between its strings, rather than a call
    per id (docs/decisions/match-log-id-lists.md). It is exact when the text has no backslash (so
    every quote delimits a string) and exactly one comma per gap (so no id holds a comma): then
    every ``","`` is a gap.
    """
    text = orjson.dumps(sids)
    if b"\\" not in text and text.count(b",") == len(sids) - 1:
        return text.replace(b'","', b'", "')
    return b"[" + b", ".join([orjson.dumps(s) for s in sids]) + b"]"


def _byte_writer(out: TextIO) -> Callable[[bytes], object]:
    """Write UTF-8 bytes to ``out``: straight to its byte buffer when it is a UTF-8 text file
    (skips a decode and an encode of every output line), else decoded."""
    buffer = getattr(out, "buffer", None)
    encoding = (getattr(out, "encoding", None) or "").lower().replace("-", "").replace("_", "")
    if buffer is not None and encoding == "utf8":
        out.flush()  # whatever was written as text goes first
        return cast(Callable[[bytes], object], buffer.write)
    return lambda data: out.write(data.decode())


def _decode(line: str) -> dict[str, Any]:
    try:
        op = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise _Invalid(f"not valid JSON: {exc}") from None
    if not isinstance(op, dict):
        raise _Invalid(f"expected a JSON object (one operation), got {_shown(op)}")
    kind = op.get("type")
    if kind not in OPERATION_TYPES:
        if "type" not in op:
            raise _Invalid("missing 'type' (subscribe, event or unsubscribe)")
        raise _Invalid(f"unknown type {_shown(kind)}; expected subscribe, event or unsubscribe")
    return op


def run_match_log(
    lines: Iterable[str],
    out: TextIO,
    err: TextIO,
    *,
    index: Index | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    clock: Callable[[], float] = time.perf_counter,
) -> MatchLogSummary:
    """Apply a matching log in order and write one output line per event (docs/reference/matching-log.md).

    Parameters
    ----------
    lines : Iterable[str]
        The log, one operation per line (trailing newlines allowed); line numbers count from 1.
    out : TextIO
        Receives ``{"event_id": ..., "subscription_ids": [...]}`` per event, in input order.
    err : TextIO
        Receives one ``line N: invalid: ...`` or ``line N: ignored: ...`` report per problem.
    index : Index, optional
        The index to match with (default: a new ``MatchIndex``); it is changed in place.
    batch_size : int
        Most events per ``index.match`` call.
    clock : callable
        Seconds, for the summary's timing.

    Returns
    -------
    MatchLogSummary
        Counts, timing and the exit code.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    started = clock()
    idx: Index = MatchIndex() if index is None else index
    ids: list[str] = []
    attrs: list[dict[str, Any]] = []
    events = operations = subscribes = unsubscribes = unknown = matches = invalid = blank = 0
    dumps = orjson.dumps
    write = _byte_writer(out)
    parse = lru_cache(maxsize=1 << 16)(parse_filter)  # logs repeat filter texts; a Filter is immutable

    def flush() -> None:
        nonlocal matches
        if not ids:
            return
        result = idx.match(attrs)
        matches += int(result.counts().sum())
        chunk = b"".join(
            b'{"event_id": ' + dumps(eid) + b', "subscription_ids": ' + _id_list(result.ids(i)) + b"}\n"
            for i, eid in enumerate(ids)
        )
        write(chunk)
        ids.clear()
        attrs.clear()

    for number, line in enumerate(lines, 1):
        if not line or line.isspace():
            blank += 1
            continue
        try:
            op = _decode(line)
            kind = op["type"]
            if kind == "event":
                eid, attributes = _event(op)
                ids.append(eid)
                attrs.append(attributes)
                events += 1
                if len(ids) >= batch_size:
                    flush()
            elif kind == "subscribe":
                sid, filt = _subscription(op, parse)
                flush()
                idx.add(sid, filt)
                subscribes += 1
            else:
                sid = _id_field(op, "subscription_id")
                flush()
                unsubscribes += 1
                if sid in idx:
                    idx.remove(sid)
                else:
                    unknown += 1
                    err.write(f"line {number}: ignored: unsubscribe of unknown subscription_id {sid!r}\n")
            operations += 1
        except _Invalid as exc:
            invalid += 1
            err.write(f"line {number}: invalid: {exc}\n")
    flush()
    return MatchLogSummary(
        events=events,
        operations=operations,
        subscribes=subscribes,
        unsubscribes=unsubscribes,
        unknown_unsubscribes=unknown,
        matches=matches,
        invalid_lines=invalid,
        blank_lines=blank,
        seconds=clock() - started,
    )
