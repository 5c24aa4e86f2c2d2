"""Events as columns, encoded a whole batch at a time.

A generator that builds one Python dict per event spends most of its time on the dicts and then
on encoding them one by one (docs/decisions/producer-columns.md). Here a batch of events is a
set of numpy columns (:class:`EventColumns`), and its JSON Lines text and its Avro
single-object frames are assembled for the whole batch with a few numpy operations: every field
of every row becomes a byte segment (a constant, an entry of a small vocabulary, a number's text,
a varint), and one gather lays the segments out row after row (:func:`assemble`).

The bytes are exactly those of the record-at-a-time encoders: ``orjson.dumps(record) + b"\\n"``
and ``codec_for("Event").encode(record)`` for each ``record`` of :meth:`EventColumns.records`
(tests hold them to both).

>>> cols = EventColumns(
...     event_id=Text(("e", np.array([7, 8]))),
...     publisher_id=Text((Vocab(("p1", "p2"), np.array([0, 1])),)),
...     published_at=np.array([1000, 1001]),
...     lifetime_ms=500,
...     attributes=(Attr("price", "double", np.array([1.5, 2.0])), Attr("urgent", "boolean", np.array([True, False]))),
... )
>>> cols.jsonl().decode().splitlines()[1]
'{"event_id":"e8","publisher_id":"p2","published_at":1001,"lifetime_ms":500,"attributes":{"price":2.0,"urgent":false}}'
>>> cols.records()[0]["attributes"]
{'price': 1.5, 'urgent': True}
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import orjson

from schemas.codec import codec_for
from schemas.segments import Segments, assemble, const, doubles_le, len_prefixed, split_rows, table, varints

__all__ = [
    "Attr",
    "EventColumns",
    "Text",
    "Vocab",
    "number_text",
]

Kind = Literal["long", "double", "string", "boolean"]
KINDS: tuple[Kind, ...] = ("long", "double", "string", "boolean")  # the order of the wire's maps


# --- JSON number text -----------------------------------------------------------------------------


def number_text(values: np.ndarray) -> Segments:
    """Each number as orjson writes it (integers in decimal, doubles as the shortest round trip).

    One ``orjson.dumps`` of the whole column, cut at its commas (numbers have none).
    """
    raw = orjson.dumps(values.tolist())
    data = np.frombuffer(raw, np.uint8)
    n = len(values)
    starts = np.empty(n, np.int64)
    ends = np.empty(n, np.int64)
    commas = np.flatnonzero(data == ord(","))
    starts[0], ends[-1] = 1, len(raw) - 1
    starts[1:] = commas + 1
    ends[:-1] = commas
    return Segments(data, starts, ends - starts)


# --- columns --------------------------------------------------------------------------------------


def _json_inner(text: str) -> bytes:
    """The JSON string literal of ``text`` without its quotes."""
    return orjson.dumps(text)[1:-1]


@dataclass(frozen=True)
class Vocab:
    """A string column over a small vocabulary: row ``i`` is ``words[codes[i]]``."""

    words: Sequence[str]
    codes: np.ndarray

    @classmethod
    def numbered(cls, prefix: str, count: int, codes: np.ndarray, first: int = 0) -> Vocab:
        """Words ``prefix<first>`` .. ``prefix<first + count - 1>``, e.g. publisher ids."""
        return cls(tuple(f"{prefix}{first + i}" for i in range(count)), codes)

    @classmethod
    def of(cls, strings: Sequence[str]) -> Vocab:
        """Code a list of strings (first appearance order)."""
        index: dict[str, int] = {}
        codes = np.fromiter((index.setdefault(s, len(index)) for s in strings), np.int64, len(strings))
        return cls(tuple(index), codes)


Part = str | Vocab | np.ndarray  # a constant, a vocabulary column, or integers written in decimal


@dataclass(frozen=True)
class Text:
    """A string column made of parts, concatenated per row: constants (``str``), vocabulary
    columns (:class:`Vocab`) and integer columns (written in decimal). E.g. event ids
    ``Text(("p", publisher, "-", sequence))``."""

    parts: tuple[Part, ...]

    def segments(self, json: bool) -> list[Segments]:
        """The parts' bytes: UTF-8, or escaped for inside a JSON string literal."""
        enc = _json_inner if json else str.encode
        out = []
        for p in self.parts:
            if isinstance(p, str):
                out.append(const(enc(p)))
            elif isinstance(p, Vocab):
                out.append(table([enc(w) for w in p.words], p.codes))
            else:
                out.append(number_text(p))
        return out

    def strings(self, n: int) -> list[str]:
        if n == 0:
            return []
        if len(self.parts) == 1 and isinstance(self.parts[0], Vocab):
            words = self.parts[0].words
            return [words[c] for c in self.parts[0].codes.tolist()]
        if all(isinstance(p, str) for p in self.parts):
            return ["".join(self.parts)] * n  # type: ignore[arg-type]
        data, offsets = assemble(self.segments(json=False), n)
        return [s.decode() for s in split_rows(data, offsets)]


@dataclass(frozen=True)
class Attr:
    """One attribute column.

    Attributes
    ----------
    name : str or Text
        The attribute's name; a :class:`Text` where it differs from row to row.
    kind : {"long", "double", "string", "boolean"}
        Which map of the wire record it goes to.
    values : ndarray or Text
        Its values (a :class:`Text` for strings).
    present : ndarray of bool, optional
        The rows that have the attribute (default: all).
    """

    name: str | Text
    kind: Kind
    values: np.ndarray | Text
    present: np.ndarray | None = None


_PY = {"long": int, "double": float, "boolean": bool, "string": str}


@dataclass(frozen=True)
class EventColumns:
    """A batch of events as columns (the ``Event`` schema's fields; attributes in order).

    Within a row, attribute names must be distinct.
    """

    event_id: Text
    publisher_id: Text
    published_at: np.ndarray
    lifetime_ms: int | np.ndarray
    attributes: tuple[Attr, ...] = field(default_factory=tuple)

    def __len__(self) -> int:
        return len(self.published_at)

    # - views -

    def records(self) -> list[dict[str, Any]]:
        """The events in docs/reference/topics.md §1.3 (plain Python values)."""
        n = len(self)
        ids, pubs = self.event_id.strings(n), self.publisher_id.strings(n)
        times = self.published_at.tolist()
        life = self.lifetime_ms.tolist() if isinstance(self.lifetime_ms, np.ndarray) else [self.lifetime_ms] * n
        cols = []
        for a in self.attributes:
            names = [a.name] * n if isinstance(a.name, str) else a.name.strings(n)
            vals = a.values.strings(n) if isinstance(a.values, Text) else a.values.tolist()
            if a.kind == "boolean":
                vals = [bool(v) for v in vals]
            elif a.kind == "double":
                vals = [float(v) for v in vals]
            cols.append((names, vals, None if a.present is None else a.present.tolist()))
        out = []
        for i in range(n):
            attrs = {}
            for names, vals, present in cols:
                if present is None or present[i]:
                    attrs[names[i]] = vals[i]
            out.append(
                {
                    "event_id": ids[i],
                    "publisher_id": pubs[i],
                    "published_at": times[i],
                    "lifetime_ms": life[i],
                    "attributes": attrs,
                }
            )
        return out

    def keys(self) -> list[str]:
        """Publisher ids, the events topic's keys."""
        return self.publisher_id.strings(len(self))

    @classmethod
    def from_records(cls, records: Sequence[dict[str, Any]]) -> EventColumns:
        """Columns of events given in JSON form (any attributes; ``ValueError`` on a value of
        no allowed kind)."""
        n = len(records)
        columns: dict[tuple[str, Kind], tuple[list[Any], np.ndarray]] = {}
        kinds: dict[type, Kind] = {bool: "boolean", int: "long", float: "double", str: "string"}
        for i, r in enumerate(records):
            for name, value in r["attributes"].items():
                kind = kinds.get(type(value))
                if kind is None:
                    raise ValueError(
                        f"event {r.get('event_id')!r}: attribute {name!r} has a {type(value).__name__};"
                        " allowed: long, double, string, boolean"
                    )
                vals, present = columns.setdefault((name, kind), ([_PY[kind]()] * n, np.zeros(n, bool)))
                vals[i] = value
                present[i] = True
        attrs = tuple(
            Attr(
                name,
                kind,
                Text((Vocab.of(vals),)) if kind == "string" else np.array(vals, dtype=_DTYPES[kind]),
                None if present.all() else present,
            )
            for (name, kind), (vals, present) in columns.items()
        )
        return cls(
            Text((Vocab.of([r["event_id"] for r in records]),)),
            Text((Vocab.of([r["publisher_id"] for r in records]),)),
            np.array([r["published_at"] for r in records], dtype=np.int64),
            np.array([r["lifetime_ms"] for r in records], dtype=np.int64),
            attrs,
        )

    # - encodings -

    def jsonl(self) -> bytes:
        """One JSON object per line, each exactly ``orjson.dumps(record) + b"\\n"``."""
        n = len(self)
        if n == 0:
            return b""
        q = const(b'"')
        parts = [const(b'{"event_id":"'), *self.event_id.segments(json=True)]
        parts += [const(b'","publisher_id":"'), *self.publisher_id.segments(json=True)]
        parts += [const(b'","published_at":'), number_text(self.published_at), const(b',"lifetime_ms":')]
        parts += [
            const(str(self.lifetime_ms).encode())
            if isinstance(self.lifetime_ms, int)
            else number_text(self.lifetime_ms),
            const(b',"attributes":{'),
        ]
        seen: np.ndarray | bool = False  # whether an earlier attribute of the row was written
        for a in self.attributes:
            present = a.present
            if seen is not False:  # a comma where this entry and an earlier one are written
                both = present if seen is True else seen if present is None else seen & present
                parts.append(const(b",").masked(both))
            if isinstance(a.name, str):
                parts.append(const(orjson.dumps(a.name) + b":").masked(present))
            else:
                parts += [s.masked(present) for s in (q, *a.name.segments(json=True), const(b'":'))]
            if isinstance(a.values, Text):
                parts += [s.masked(present) for s in (q, *a.values.segments(json=True), q)]
            elif a.kind == "boolean":
                parts.append(table([b"false", b"true"], a.values.astype(np.int64)).masked(present))
            else:
                parts.append(number_text(a.values).masked(present))
            if present is None:
                seen = True
            elif seen is not True:
                seen = present if seen is False else (seen | present)
        parts.append(const(b"}}\n"))
        data, _ = assemble(parts, n)
        return data.tobytes()

    def avro(self) -> list[bytes]:
        """Each event as an Avro single-object frame of the ``Event`` schema."""
        n = len(self)
        if n == 0:
            return []
        parts = [const(codec_for("Event").header)]
        parts += len_prefixed(self.event_id.segments(json=False), n)
        parts += len_prefixed(self.publisher_id.segments(json=False), n)
        parts += [varints(self.published_at), varints(self.lifetime_ms)]
        for kind in KINDS:
            attrs = [a for a in self.attributes if a.kind == kind]
            if not attrs:
                parts.append(const(b"\x00"))
                continue
            count = np.zeros(n, np.int64)
            for a in attrs:
                count += 1 if a.present is None else a.present
            parts.append(varints(count).masked(count > 0))  # an empty map is only its end marker
            for a in attrs:
                key = [const(a.name.encode())] if isinstance(a.name, str) else a.name.segments(json=False)
                entry = len_prefixed(key, n)
                if isinstance(a.values, Text):
                    entry += len_prefixed(a.values.segments(json=False), n)
                elif kind == "boolean":
                    entry.append(table([b"\x00", b"\x01"], a.values.astype(np.int64)))
                elif kind == "double":
                    entry.append(doubles_le(a.values))
                else:
                    entry.append(varints(a.values))
                parts += [s.masked(a.present) for s in entry]
            parts.append(const(b"\x00"))
        data, offsets = assemble(parts, n)
        return split_rows(data, offsets)


_DTYPES = {"long": np.int64, "double": np.float64, "boolean": np.bool_}
