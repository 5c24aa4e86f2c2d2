"""Decode and validate a column of framed Avro values at once: the fast path for flat records.

The jobs whose state lives on the driver (``streaming.driver_batch``) read telemetry and
receipts by the million: records of a few scalar fields (``LinkSample``, ``BrokerSample``,
``Receipt``). Rather than decoding them in the JVM (``streaming.decode``) and collecting the
decoded columns (docs/decisions/jvm-decoding-plans.md), the jobs collect the raw values, which
are decoded here in one compiled pass over the Arrow buffers (offsets and bytes), and the rules
of ``schemas.rules`` are checked as numpy comparisons.

This is a fast path, not a third verdict: a value is *accepted* only when it certainly is a good
record, i.e. it is framed with the current version of the schema, its body decodes, every string
in it is ASCII and every rule holds. Anything else (a tombstone, another version, a malformed
body, a broken rule, a non-ASCII string, an unusual encoding) is *referred* to the reference
decoder, which gives the verdict and the reason (the JVM twin in the jobs). Values that both
accept decode to the same fields: a parity test holds this path to ``schemas.codec`` and
``schemas.rules.classify`` on generated records.

Supported schemas (:func:`supports`): records whose fields are ``string``, ``long``, ``int``,
``double``, ``boolean`` or an enum defined in place, or a union of ``null`` with one of them, and
whose rules are of the kinds ``required``, ``absent``, ``non_empty``, ``finite``, ``min``, ``max``
and ``gt`` on those fields (``required`` and ``absent`` only on an enum), with a ``when``
condition on a boolean or numeric field compared with a number, or on an enum field compared with
one of its symbols, plus an ``EXACTLY_ONE`` pair of fields under such a condition. An enum is
decoded to its symbol's index (an index outside the symbols is referred): ``Subscription``,
``LinkSample``, ``BrokerSample`` and ``Receipt`` are supported.

>>> from schemas.codec import codec_for
>>> raw = [codec_for("Receipt").encode({"subscriber_id": "u1", "event_id": "e9", "received_at": 5}),
...        codec_for("Receipt").encode({"subscriber_id": "u1", "event_id": "e9", "received_at": -5}), None]
>>> out = FlatDecoder("Receipt").decode_values(raw)
>>> out.accepted.tolist(), out.strings("event_id", out.accepted), out.values("received_at")[:1].tolist()
([True, False, False], ['e9'], [5])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numba
import numpy as np
from numpy.typing import NDArray

from schemas.codec import HEADER_LEN, codec_for
from schemas.rules import EXACTLY_ONE, VALUE_KINDS, Rule, rules_for
from schemas.segments import copy_bytes

__all__ = [
    "T_BOOLEAN",
    "T_DOUBLE",
    "T_ENUM",
    "T_INT",
    "T_LONG",
    "T_STRING",
    "EventFields",
    "Field",
    "FlatColumns",
    "FlatDecoder",
    "MatchFields",
    "ascii_rows",
    "binary_buffers",
    "decode_events",
    "decode_matches",
    "fields_of",
    "gather_spans",
    "supports",
]

T_STRING, T_LONG, T_INT, T_DOUBLE, T_BOOLEAN, T_ENUM = 0, 1, 2, 3, 4, 5
_TYPES = {"string": T_STRING, "long": T_LONG, "int": T_INT, "double": T_DOUBLE, "boolean": T_BOOLEAN}
_RULE_KINDS = frozenset({"required", "absent", "non_empty", "finite", "min", "max", "gt"})


@dataclass(frozen=True)
class Field:
    """One field of a flat record: its name, type code (``T_*``), the union branch of null (-1
    when the field is not nullable) and, for an enum, its symbols (index order)."""

    name: str
    type: int
    null_branch: int
    symbols: tuple[str, ...] = ()


def _type_of(t: Any) -> tuple[int, tuple[str, ...]] | None:
    """The type code and symbols of a field's (non-union) type, None when unsupported. An enum
    counts only where it is defined (a reference to a named type is not followed)."""
    if isinstance(t, str):
        return (_TYPES[t], ()) if t in _TYPES else None
    if isinstance(t, dict) and t.get("type") == "enum":
        symbols = tuple(t["symbols"])
        return (T_ENUM, symbols) if symbols and all(isinstance(s, str) for s in symbols) else None
    return None


def _field(spec: dict[str, Any]) -> Field | None:
    t = spec["type"]
    if isinstance(t, list):
        if len(t) != 2 or "null" not in t:
            return None
        null_branch = t.index("null")
        found = _type_of(t[1 - null_branch])
    else:
        null_branch = -1
        found = _type_of(t)
    return None if found is None else Field(spec["name"], found[0], null_branch, found[1])


def _when_supported(when: tuple[str, Any] | None, fields: dict[str, Field]) -> bool:
    """Whether a ``when`` condition can be decided exactly from the columns: a boolean or numeric
    field compared with a number, or an enum field compared with one of its symbols."""
    if when is None:
        return True
    name, value = when
    f = fields.get(name)
    if f is None or f.type == T_STRING:
        return False
    if f.type == T_ENUM:
        return isinstance(value, str) and value in f.symbols
    return isinstance(value, bool | int | float)


def _rule_supported(rule: Rule, fields: dict[str, Field]) -> bool:
    if rule.kind not in _RULE_KINDS or rule.field not in fields:
        return False
    t = fields[rule.field].type
    if t == T_ENUM and rule.kind not in ("required", "absent"):
        return False
    if rule.kind == "non_empty" and t != T_STRING:
        return False
    if rule.kind in ("finite", "min", "max", "gt") and t == T_STRING:
        return False
    return _when_supported(rule.when, fields)


@cache
def fields_of(name: str) -> tuple[Field, ...] | None:
    """The fields of record ``name`` when :class:`FlatDecoder` supports it, else None."""
    schema = codec_for(name).schema
    fields = tuple(_field(f) for f in schema["fields"])
    if any(f is None for f in fields):
        return None
    out = tuple(f for f in fields if f is not None)
    by_name = {f.name: f for f in out}
    if not all(_rule_supported(r, by_name) for r in rules_for(name)):
        return None
    if name in EXACTLY_ONE:
        (a, b), when = EXACTLY_ONE[name]
        if a not in by_name or b not in by_name or not _when_supported(when, by_name):
            return None
    return out


def supports(name: str) -> bool:
    """Whether the values of record ``name`` can take the columnar fast path."""
    return fields_of(name) is not None


@numba.njit(cache=True, nogil=True)
def _varint(data: NDArray[np.uint8], pos: int, end: int, max_bytes: int) -> tuple[int, int, bool]:
    """Avro zig-zag varint at ``pos``: (value, next position, ok). Not ok when it runs past
    ``end`` or is longer than ``max_bytes`` (or its last byte carries bits a long cannot hold)."""
    acc = np.uint64(0)
    shift = np.uint64(0)
    for k in range(max_bytes):
        if pos >= end:
            return 0, pos, False
        b = np.uint64(data[pos])
        pos += 1
        if k == 9 and b > 1:
            return 0, pos, False
        acc |= (b & np.uint64(0x7F)) << shift
        if b < 0x80:
            value = np.int64(acc >> np.uint64(1)) ^ -np.int64(acc & np.uint64(1))
            return int(value), pos, True
        shift += np.uint64(7)
    return 0, pos, False


@numba.njit(cache=True, nogil=True)
def _block(data: NDArray[np.uint8], pos: int, end: int) -> tuple[int, int, bool]:
    """The item count of the Avro array or map block at ``pos`` (0: the end of the items; a
    negative count is followed by the block's size in bytes, read and skipped): (count, next
    position, ok)."""
    count, pos, ok = _varint(data, pos, end, 10)
    if ok and count < 0:
        count = -count
        _, pos, ok = _varint(data, pos, end, 10)
    return count, pos, ok


@numba.njit(cache=True, nogil=True)
def _body_start(data: NDArray[np.uint8], pos: int, end: int, header: NDArray[np.uint8]) -> int:
    """Where the body of the value ``data[pos:end]`` starts when it is framed with ``header``,
    else -1."""
    hl = len(header)
    if end - pos < hl:
        return -1
    for k in range(hl):
        if data[pos + k] != header[k]:
            return -1
    return pos + hl


@numba.njit(cache=True, nogil=True)
def _double_bits(data: NDArray[np.uint8], pos: int) -> int:
    """The 8 little-endian bytes at ``pos`` as a signed 64-bit integer (a double's bits)."""
    bits = np.uint64(0)
    for k in range(8):
        bits |= np.uint64(data[pos + k]) << np.uint64(8 * k)
    return int(np.int64(bits))


@numba.njit(cache=True, nogil=True)
def _ascii_span(data: NDArray[np.uint8], pos: int, length: int) -> bool:
    """Whether ``data[pos : pos + length]`` is ASCII: the bytes OR-ed together, a loop without an
    exit that the compiler vectorizes (a long ASCII text, e.g. a filter, is the common case)."""
    acc = np.uint8(0)
    for k in range(pos, pos + length):
        acc |= data[k]
    return bool(acc < 0x80)


@numba.njit(cache=True, nogil=True)
def _decode(
    offsets: NDArray[np.int64],
    data: NDArray[np.uint8],
    valid: NDArray[np.bool_],
    header: NDArray[np.uint8],
    types: NDArray[np.int64],
    null_branch: NDArray[np.int64],
    n_symbols: NDArray[np.int64],
    ints: NDArray[np.int64],
    lens: NDArray[np.int64],
    present: NDArray[np.bool_],
    decoded: NDArray[np.bool_],
) -> None:
    """Decode every value ``data[offsets[i]:offsets[i + 1]]`` (``valid[i]``: not null).

    Per field ``f`` and row ``i``: ``ints[f, i]`` holds a long, int or boolean's value, an enum's
    index (in ``[0, n_symbols[f])``), a double's bits, or a string's start in ``data``
    (``lens[f, i]`` its length); ``present[f, i]`` is false for a null. ``decoded[i]`` says the
    whole record decoded from the current version with ASCII strings and enum indices in range;
    the other rows' fields are garbage.
    """
    n = len(valid)
    nf = len(types)
    for i in range(n):
        decoded[i] = False
        if not valid[i]:
            continue
        end = offsets[i + 1]
        pos = _body_start(data, offsets[i], end, header)
        if pos < 0:
            continue
        good = True
        for f in range(nf):
            present[f, i] = True
            if null_branch[f] >= 0:
                branch, pos, ok = _varint(data, pos, end, 10)
                if not ok or (branch != 0 and branch != 1):
                    good = False
                    break
                if branch == null_branch[f]:
                    present[f, i] = False
                    ints[f, i] = 0
                    continue
            t = types[f]
            if t == 1 or t == 2:  # long, int
                value, pos, ok = _varint(data, pos, end, 10 if t == 1 else 5)
                if not ok or (t == 2 and (value < -2147483648 or value > 2147483647)):
                    good = False
                    break
                ints[f, i] = value
            elif t == 3:  # double: its 8 little-endian bytes
                if pos + 8 > end:
                    good = False
                    break
                ints[f, i] = _double_bits(data, pos)
                pos += 8
            elif t == 4:  # boolean: one byte, 0 or 1
                if pos >= end or data[pos] > 1:
                    good = False
                    break
                ints[f, i] = data[pos]
                pos += 1
            elif t == 5:  # enum: the symbol's index, an int
                value, pos, ok = _varint(data, pos, end, 5)
                if not ok or value < 0 or value >= n_symbols[f]:
                    good = False
                    break
                ints[f, i] = value
            else:  # string: length, then ASCII bytes
                length, pos, ok = _varint(data, pos, end, 10)
                if not ok or length < 0 or pos + length > end:
                    good = False
                    break
                if not _ascii_span(data, pos, length):
                    good = False
                    break
                ints[f, i] = pos
                lens[f, i] = length
                pos += length
        decoded[i] = good


@numba.njit(cache=True, nogil=True)
def _gather(
    data: NDArray[np.uint8], starts: NDArray[np.int64], lengths: NDArray[np.int64]
) -> tuple[NDArray[np.int32], NDArray[np.uint8]]:
    """The byte ranges ``data[starts[j] : starts[j] + lengths[j]]`` packed: Arrow offsets, bytes."""
    m = len(starts)
    out_offsets = np.empty(m + 1, dtype=np.int32)
    out_offsets[0] = 0
    total = 0
    for j in range(m):
        total += lengths[j]
        out_offsets[j + 1] = total
    out = np.empty(total, dtype=np.uint8)
    p = 0
    for j in range(m):
        copy_bytes(out, p, data, starts[j], lengths[j])
        p += lengths[j]
    return out_offsets, out


@numba.njit(cache=True, nogil=True)
def _ascii(
    offsets: NDArray[np.int64], data: NDArray[np.uint8], valid: NDArray[np.bool_], out: NDArray[np.bool_]
) -> None:
    for i in range(len(valid)):
        ok = True
        if valid[i]:
            for k in range(offsets[i], offsets[i + 1]):
                if data[k] >= 0x80:
                    ok = False
                    break
        out[i] = ok
    return


def gather_spans(
    data: NDArray[np.uint8], starts: NDArray[np.int64], lengths: NDArray[np.int64]
) -> tuple[NDArray[np.int32], NDArray[np.uint8]]:
    """The byte ranges ``data[starts[j] : starts[j] + lengths[j]]`` packed: Arrow's offsets and bytes.

    >>> offsets, blob = gather_spans(np.frombuffer(b"abcdef", np.uint8), np.array([4, 0]), np.array([2, 1]))
    >>> offsets.tolist(), blob.tobytes()
    ([0, 2, 3], b'efa')
    """
    return _gather(data, np.ascontiguousarray(starts, dtype=np.int64), np.ascontiguousarray(lengths, dtype=np.int64))


def binary_buffers(array: Any) -> tuple[NDArray[Any], NDArray[np.uint8], NDArray[np.bool_]]:
    """An Arrow binary (or string) array's offsets, bytes and validity as numpy, without a copy of
    the bytes: what :meth:`FlatDecoder.decode`, :func:`decode_events` and :func:`ascii_rows` take."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(array)
    bufs = array.buffers()
    wide = pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type)
    if n == 0 or bufs[1] is None:
        offsets = np.zeros(n + 1, dtype=np.int64)
    else:
        offsets = np.frombuffer(
            bufs[1], dtype=np.int64 if wide else np.int32, count=n + 1, offset=(8 if wide else 4) * array.offset
        )
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, dtype=np.uint8)
    valid = np.asarray(pc.is_valid(array).to_numpy(zero_copy_only=False), dtype=np.bool_)
    return offsets, data, valid


def ascii_rows(offsets: NDArray[Any], data: NDArray[np.uint8], valid: NDArray[np.bool_]) -> NDArray[np.bool_]:
    """Per value of a binary column (Arrow's layout), whether it is null or ASCII: text that
    every reader decodes alike (e.g. a Kafka key that the fast path passes on as a string).

    >>> ascii_rows(np.array([0, 2, 4, 4]), np.frombuffer("abé".encode(), dtype=np.uint8),
    ...            np.array([True, True, False])).tolist()
    [True, False, True]
    """
    out = np.empty(len(valid), dtype=np.bool_)
    _ascii(np.ascontiguousarray(offsets, dtype=np.int64), data, np.ascontiguousarray(valid, dtype=np.bool_), out)
    return out


@dataclass
class FlatColumns:
    """What :meth:`FlatDecoder.decode` found: ``accepted[i]`` (row ``i`` is a good record, its
    fields below are right), and the fields of every row (meaningful where accepted)."""

    fields: tuple[Field, ...]
    data: NDArray[np.uint8]
    accepted: NDArray[np.bool_]
    _ints: NDArray[np.int64]
    _lens: NDArray[np.int64]
    _present: NDArray[np.bool_]

    def _at(self, name: str) -> int:
        for k, f in enumerate(self.fields):
            if f.name == name:
                return k
        raise KeyError(name)

    def present(self, name: str) -> NDArray[np.bool_]:
        """Per row, whether field ``name`` holds a value (false for a null)."""
        return np.asarray(self._present[self._at(name)], dtype=np.bool_)

    def values(self, name: str) -> NDArray[Any]:
        """The numbers of field ``name``: int64 (long, int, and an enum's symbol index), float64
        (double) or bool (boolean); 0 where null."""
        k = self._at(name)
        t = self.fields[k].type
        if t == T_STRING:
            raise TypeError(f"{name} is a string: use strings() or string_buffers()")
        if t == T_DOUBLE:
            return np.asarray(self._ints[k].view(np.float64))
        if t == T_BOOLEAN:
            return np.asarray(self._ints[k] != 0)
        return np.asarray(self._ints[k])

    def symbols(self, name: str) -> tuple[str, ...]:
        """The symbols of enum field ``name``, in index order (what :meth:`values` indexes).

        >>> from schemas.codec import codec_for
        >>> import pyarrow as pa
        >>> sub = {"type": "unsubscribe", "subscription_id": "s1", "issued_at": 5}
        >>> out = FlatDecoder("Subscription").decode_values([codec_for("Subscription").encode(sub)])
        >>> out.symbols("type"), out.values("type").tolist(), out.arrow("type", np.array([0]), pa.string()).to_pylist()
        (('subscribe', 'unsubscribe'), [1], ['unsubscribe'])
        """
        f = self.fields[self._at(name)]
        if f.type != T_ENUM:
            raise TypeError(f"{name} is not an enum")
        return f.symbols

    def lengths(self, name: str) -> NDArray[np.int64]:
        """Per row, the length of string field ``name`` (garbage where null)."""
        return np.asarray(self._lens[self._at(name)])

    def string_buffers(self, name: str, rows: NDArray[Any]) -> tuple[NDArray[np.int32], NDArray[np.uint8]]:
        """String field ``name`` at ``rows`` (indices or a mask) as Arrow's offsets and bytes; a
        null is an empty string there (see :meth:`present`)."""
        k = self._at(name)
        keep = self._present[k][rows]
        starts = np.where(keep, self._ints[k][rows], 0)
        return _gather(self.data, starts, np.where(keep, self._lens[k][rows], 0))

    def arrow(self, name: str, rows: NDArray[Any], kind: Any) -> Any:
        """Field ``name`` at ``rows`` as an Arrow array of type ``kind`` (a string or numeric
        Arrow type), null where the field is null. An enum as a string type is its symbols' text
        (as a numeric type, their indices).

        >>> from schemas.codec import codec_for
        >>> import pyarrow as pa
        >>> raw = [codec_for("LinkSample").encode({"from": "a", "to": "b", "seq": 1, "sent_at": 2,
        ...         "delay_ms": None, "lost": True, "event_id": None})]
        >>> out = FlatDecoder("LinkSample").decode_values(raw)
        >>> rows = np.array([0])
        >>> out.arrow("to", rows, pa.string()).to_pylist(), out.arrow("delay_ms", rows, pa.float64()).to_pylist()
        (['b'], [None])
        """
        import pyarrow as pa

        present = self.present(name)[rows]
        if self.fields[self._at(name)].type == T_ENUM and (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            index = pa.array(self.values(name)[rows], type=pa.int32(), mask=None if present.all() else ~present)
            return pa.array(self.symbols(name), type=kind).take(index)
        if pa.types.is_string(kind):
            offsets, data = self.string_buffers(name, rows)
            validity = None if present.all() else pa.py_buffer(np.packbits(present, bitorder="little"))
            return pa.Array.from_buffers(kind, len(rows), [validity, pa.py_buffer(offsets), pa.py_buffer(data)])
        return pa.array(self.values(name)[rows], type=kind, mask=None if present.all() else ~present)

    def strings(self, name: str, rows: NDArray[Any]) -> list[str | None]:
        """String (or enum) field ``name`` at ``rows`` as Python strings (slow: for tests and examples)."""
        if self.fields[self._at(name)].type == T_ENUM:
            import pyarrow as pa

            return list(self.arrow(name, rows, pa.string()).to_pylist())
        offsets, data = self.string_buffers(name, rows)
        blob = data.tobytes().decode("ascii")
        keep = self._present[self._at(name)][rows]
        return [blob[offsets[j] : offsets[j + 1]] if keep[j] else None for j in range(len(keep))]


class FlatDecoder:
    """The columnar decoder and checker of one supported record (module docstring).

    Parameters
    ----------
    name : str
        A record name that :func:`supports` accepts (``ValueError`` otherwise).
    """

    def __init__(self, name: str) -> None:
        fields = fields_of(name)
        if fields is None:
            raise ValueError(f"{name} is not a flat record of scalar or enum fields with scalar rules")
        self.name = name
        self.fields = fields
        self.rules = rules_for(name)
        self._header = np.frombuffer(codec_for(name).header, dtype=np.uint8)
        self._types = np.array([f.type for f in fields], dtype=np.int64)
        self._null = np.array([f.null_branch for f in fields], dtype=np.int64)
        self._n_symbols = np.array([len(f.symbols) for f in fields], dtype=np.int64)
        self._pair = EXACTLY_ONE.get(name)
        assert len(self._header) == HEADER_LEN

    def decode(self, offsets: NDArray[Any], data: NDArray[np.uint8], valid: NDArray[np.bool_]) -> FlatColumns:
        """Decode and check the values ``data[offsets[i] : offsets[i + 1]]`` (null where not
        ``valid[i]``): Arrow's binary layout."""
        n = len(valid)
        nf = len(self.fields)
        ints = np.zeros((nf, n), dtype=np.int64)
        lens = np.zeros((nf, n), dtype=np.int64)
        present = np.zeros((nf, n), dtype=np.bool_)
        decoded = np.zeros(n, dtype=np.bool_)
        _decode(
            np.ascontiguousarray(offsets, dtype=np.int64),
            data,
            np.ascontiguousarray(valid, dtype=np.bool_),
            self._header,
            self._types,
            self._null,
            self._n_symbols,
            ints,
            lens,
            present,
            decoded,
        )
        out = FlatColumns(self.fields, data, decoded, ints, lens, present)
        for rule in self.rules:
            out.accepted &= ~self._broken(rule, out)
        if self._pair is not None:
            (a, b), when = self._pair
            out.accepted &= ~(_holds(when, out) & (out.present(a) == out.present(b)))
        return out

    def decode_values(self, values: Sequence[bytes | None]) -> FlatColumns:
        """:meth:`decode` of Python values (tests and examples)."""
        lengths = [0 if v is None else len(v) for v in values]
        offsets = np.concatenate(([0], np.cumsum(lengths, dtype=np.int64)))
        data = np.frombuffer(b"".join(v for v in values if v is not None), dtype=np.uint8)
        return self.decode(offsets, data, np.array([v is not None for v in values], dtype=np.bool_))

    @staticmethod
    def _broken(rule: Rule, cols: FlatColumns) -> NDArray[np.bool_]:
        """Rows where ``rule`` is broken: as ``Rule.ok`` (and the JVM's checks) decide, with
        numbers compared as doubles and NaN failing every bound."""
        present = cols.present(rule.field)
        if rule.kind == "required":
            bad = ~present
        elif rule.kind == "absent":
            bad = present
        elif rule.kind == "non_empty":
            bad = present & (cols.lengths(rule.field) == 0)
        else:
            num = cols.values(rule.field).astype(np.float64)
            with np.errstate(invalid="ignore"):
                if rule.kind == "finite":
                    bad = present & ~np.isfinite(num)
                elif rule.kind == "min":
                    bad = present & ~(num >= rule.bound)
                elif rule.kind == "max":
                    bad = present & ~(num <= rule.bound)
                else:  # gt
                    bad = present & ~(num > rule.bound)
        if rule.when is not None:
            bad &= _holds(rule.when, cols)
        return np.asarray(bad, dtype=np.bool_)


def _holds(when: tuple[str, Any], cols: FlatColumns) -> NDArray[np.bool_]:
    """Rows where the condition ``when`` (field, value) holds, as ``Rule.applies`` decides: never
    where the field is null; an enum field is compared by its symbol's index."""
    name, value = when
    f = cols.fields[cols._at(name)]
    if f.type == T_ENUM:
        value = f.symbols.index(value)
    return np.asarray(cols.present(name) & (cols.values(name) == value), dtype=np.bool_)


# ---- events: the typed attribute maps ---------------------------------------------------------

_K_LONG, _K_DOUBLE, _K_STRING, _K_BOOLEAN = 0, 1, 2, 3  # VALUE_KINDS, in wire order
_EXP_MASK = np.int64(0x7FF0000000000000)


@numba.njit(cache=True, nogil=True)
def _name_ok(data: NDArray[np.uint8], pos: int, length: int) -> bool:
    """``[A-Za-z_][A-Za-z0-9_.]*`` (``schemas.rules.ATTRIBUTE_NAME``), fully."""
    if length == 0:
        return False
    for k in range(length):
        c = data[pos + k]
        letter = (c >= 65 and c <= 90) or (c >= 97 and c <= 122) or c == 95
        if not (letter or (k > 0 and ((c >= 48 and c <= 57) or c == 46))):
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _decode_events(
    offsets: NDArray[np.int64],
    data: NDArray[np.uint8],
    valid: NDArray[np.bool_],
    header: NDArray[np.uint8],
    heads: NDArray[np.int64],
    accepted: NDArray[np.bool_],
    entries: NDArray[np.int64],
) -> int:
    """Decode and check every value as an ``Event``; return how many attribute entries the
    accepted rows hold (only the first ``entries.shape[1]`` are written: the caller retries with
    room for all of them when the answer is larger).

    ``heads[:, i]``: event_id start, length, publisher_id start, length, published_at,
    lifetime_ms. ``entries[:, j]``: row, kind (``_K_*``), key start, key length, value (a long,
    a double's bits, a boolean, a string's start) and a string value's length. A row is accepted
    when it is the current version, decodes to its end, has ASCII strings, non-empty ids,
    non-negative times, finite doubles, and distinct attribute names that are valid names.
    """
    n = len(valid)
    room = entries.shape[1]
    m = 0
    for i in range(n):
        accepted[i] = False
        if not valid[i]:
            continue
        end = offsets[i + 1]
        pos = _body_start(data, offsets[i], end, header)
        if pos < 0:
            continue
        good = True
        for f in range(2):  # event_id, publisher_id: non-empty ASCII
            length, pos, ok = _varint(data, pos, end, 10)
            if not ok or length <= 0 or pos + length > end or not _ascii_span(data, pos, length):
                good = False
                break
            heads[2 * f, i] = pos
            heads[2 * f + 1, i] = length
            pos += length
        if not good:
            continue
        for f in range(2):  # published_at, lifetime_ms: >= 0
            value, pos, ok = _varint(data, pos, end, 10)
            if not ok or value < 0:
                good = False
                break
            heads[4 + f, i] = value
        if not good:
            continue
        first = m
        for kind in range(4):
            while good:
                count, pos, ok = _block(data, pos, end)
                if not ok:
                    good = False
                    break
                if count == 0:
                    break
                for _e in range(count):
                    klen, pos, ok = _varint(data, pos, end, 10)
                    if not ok or klen < 0 or pos + klen > end or not _name_ok(data, pos, klen):
                        good = False
                        break
                    kstart = pos
                    pos += klen
                    vlen = 0
                    if kind == _K_LONG:
                        value, pos, ok = _varint(data, pos, end, 10)
                        if not ok:
                            good = False
                            break
                    elif kind == _K_DOUBLE:
                        if pos + 8 > end:
                            good = False
                            break
                        value = _double_bits(data, pos)
                        if (value & _EXP_MASK) == _EXP_MASK:  # NaN or infinite
                            good = False
                            break
                        pos += 8
                    elif kind == _K_STRING:
                        vlen, pos, ok = _varint(data, pos, end, 10)
                        if not ok or vlen < 0 or pos + vlen > end or not _ascii_span(data, pos, vlen):
                            good = False
                            break
                        value = pos
                        pos += vlen
                    else:
                        if pos >= end or data[pos] > 1:
                            good = False
                            break
                        value = data[pos]
                        pos += 1
                    for j in range(first, m):  # a name once per event, across the maps
                        if j < room and entries[3, j] == klen:
                            o = entries[2, j]
                            same = True
                            for k in range(klen):
                                if data[o + k] != data[kstart + k]:
                                    same = False
                                    break
                            if same:
                                good = False
                                break
                    if not good:
                        break
                    if m < room:
                        entries[0, m] = i
                        entries[1, m] = kind
                        entries[2, m] = kstart
                        entries[3, m] = klen
                        entries[4, m] = value
                        entries[5, m] = vlen
                    m += 1
        if good and pos == end:
            accepted[i] = True
        else:
            m = first
    return m


@dataclass
class EventFields:
    """What :func:`decode_events` found: ``accepted[i]`` (row ``i`` is a good ``Event``), its head
    fields (meaningful where accepted) and the attribute entries of the accepted rows, in row
    order and, within a row, in wire order (longs, doubles, strings, booleans)."""

    data: NDArray[np.uint8]
    accepted: NDArray[np.bool_]
    heads: NDArray[np.int64]
    entries: NDArray[np.int64]

    def string_span(self, name: str) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """``event_id`` or ``publisher_id``: each row's start in ``data`` and length."""
        k = ("event_id", "publisher_id").index(name)
        return self.heads[2 * k], self.heads[2 * k + 1]

    def longs(self, name: str) -> NDArray[np.int64]:
        """``published_at`` or ``lifetime_ms`` of each row."""
        return np.asarray(self.heads[4 + ("published_at", "lifetime_ms").index(name)])

    def attributes(self, kind: str) -> tuple[NDArray[np.int64], Any, NDArray[Any]]:
        """The entries of map ``kind``: (row of each, names as an Arrow string array, values as
        numpy: int64, float64, bool, or Python strings)."""
        import pyarrow as pa

        e = self.entries[:, self.entries[1] == VALUE_KINDS.index(kind)]
        offsets, blob = _gather(self.data, e[2], e[3])
        names = pa.Array.from_buffers(pa.string(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(blob)])
        raw = e[4]
        values: NDArray[Any]
        if kind == "longs":
            values = raw
        elif kind == "doubles":
            values = raw.view(np.float64)
        elif kind == "booleans":
            values = raw != 0
        else:
            voff, vblob = _gather(self.data, raw, e[5])
            strings = pa.Array.from_buffers(pa.string(), len(voff) - 1, [None, pa.py_buffer(voff), pa.py_buffer(vblob)])
            values = strings.to_numpy(zero_copy_only=False)
        return e[0], names, values


_EVENT_ROOM = [16]  # attribute entries per row to make room for (grows to the largest batch's)


def decode_events(offsets: NDArray[Any], data: NDArray[np.uint8], valid: NDArray[np.bool_]) -> EventFields:
    """Decode and check the values ``data[offsets[i] : offsets[i + 1]]`` (null where not
    ``valid[i]``, Arrow's binary layout) as ``Event`` records: the fast path of the matching job.
    A row that is not accepted is referred to the reference decoder (``schemas.codec`` and
    ``schemas.rules.classify``), as for flat records.

    >>> from schemas.codec import codec_for
    >>> ev = {"event_id": "e1", "publisher_id": "p", "published_at": 5, "lifetime_ms": 0,
    ...       "attributes": {"x": 2, "s": "IBM", "ok": True, "p": 1.5}}
    >>> raw = [codec_for("Event").encode(ev), codec_for("Event").encode({**ev, "published_at": -1})]
    >>> offsets = np.array([0, len(raw[0]), len(raw[0]) + len(raw[1])])
    >>> out = decode_events(offsets, np.frombuffer(b"".join(raw), np.uint8), np.array([True, True]))
    >>> out.accepted.tolist(), out.longs("published_at")[:1].tolist()
    ([True, False], [5])
    >>> rows, names, values = out.attributes("strings")
    >>> rows.tolist(), names.to_pylist(), values.tolist()
    ([0], ['s'], ['IBM'])
    """
    accepted, heads, entries = _run_kernel(_decode_events, "Event", 6, 6, _EVENT_ROOM, offsets, data, valid)
    return EventFields(data, accepted, heads, entries)


@numba.njit(cache=True, nogil=True)
def _decode_matches(
    offsets: NDArray[np.int64],
    data: NDArray[np.uint8],
    valid: NDArray[np.bool_],
    header: NDArray[np.uint8],
    heads: NDArray[np.int64],
    accepted: NDArray[np.bool_],
    items: NDArray[np.int64],
) -> int:
    """Decode every value as a ``Match``; return how many subscription ids the accepted rows
    hold (only the first ``items.shape[1]`` are written: the caller retries with room for all).

    ``heads[:, i]``: event_id start, length, publisher_id start, length, published_at, the row's
    first id in ``items`` and its number of ids. ``items[:, j]``: an id's start and length. A row
    is accepted when it is the current version, decodes to its end and has ASCII strings (the
    record has no rules).
    """
    n = len(valid)
    room = items.shape[1]
    m = 0
    for i in range(n):
        accepted[i] = False
        heads[5, i] = m
        heads[6, i] = 0
        if not valid[i]:
            continue
        end = offsets[i + 1]
        pos = _body_start(data, offsets[i], end, header)
        if pos < 0:
            continue
        good = True
        for f in range(2):  # event_id, publisher_id
            length, pos, ok = _varint(data, pos, end, 10)
            if not ok or length < 0 or pos + length > end or not _ascii_span(data, pos, length):
                good = False
                break
            heads[2 * f, i] = pos
            heads[2 * f + 1, i] = length
            pos += length
        if not good:
            continue
        value, pos, ok = _varint(data, pos, end, 10)
        if not ok:
            continue
        heads[4, i] = value
        first = m
        while good:  # subscription_ids: blocks of strings
            count, pos, ok = _block(data, pos, end)
            if not ok:
                good = False
                break
            if count == 0:
                break
            for _e in range(count):
                length, pos, ok = _varint(data, pos, end, 10)
                if not ok or length < 0 or pos + length > end or not _ascii_span(data, pos, length):
                    good = False
                    break
                if m < room:
                    items[0, m] = pos
                    items[1, m] = length
                m += 1
                pos += length
        if good and pos == end:
            accepted[i] = True
            heads[6, i] = m - first
        else:
            m = first
    return m


@dataclass
class MatchFields:
    """What :func:`decode_matches` found: ``accepted[i]`` (row ``i`` is a ``Match`` this path is
    sure of), its head fields and its subscription ids (meaningful where accepted)."""

    data: NDArray[np.uint8]
    accepted: NDArray[np.bool_]
    heads: NDArray[np.int64]
    items: NDArray[np.int64]

    def string_span(self, name: str) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """``event_id`` or ``publisher_id``: each row's start in ``data`` and length."""
        k = ("event_id", "publisher_id").index(name)
        return self.heads[2 * k], self.heads[2 * k + 1]

    def published_at(self) -> NDArray[np.int64]:
        return np.asarray(self.heads[4])

    def ids(self, rows: NDArray[np.int64]) -> tuple[NDArray[np.int32], Any]:
        """The subscription ids of the accepted ``rows``: Arrow list offsets (int32) and the ids
        end to end as an Arrow string array."""
        import pyarrow as pa

        first, count = self.heads[5][rows], self.heads[6][rows]
        offsets = np.zeros(len(rows) + 1, dtype=np.int32)
        np.cumsum(count, out=offsets[1:])
        take = np.repeat(first - offsets[:-1], count) + np.arange(int(offsets[-1]), dtype=np.int64)
        spans, blob = _gather(self.data, self.items[0][take], self.items[1][take])
        strings = pa.Array.from_buffers(pa.string(), len(take), [None, pa.py_buffer(spans), pa.py_buffer(blob)])
        return offsets, strings


_MATCH_ROOM = [32]  # subscription ids per row to make room for (grows to the largest batch's)


def decode_matches(offsets: NDArray[Any], data: NDArray[np.uint8], valid: NDArray[np.bool_]) -> MatchFields:
    """Decode the values ``data[offsets[i] : offsets[i + 1]]`` (null where not ``valid[i]``,
    Arrow's binary layout) as ``Match`` records (the routes job's input), in one compiled pass. A
    row that is not accepted is referred to the reference decoder, as for flat records.

    >>> from schemas.codec import codec_for
    >>> m = {"event_id": "e1", "publisher_id": "p", "published_at": 5, "subscription_ids": ["s1", "s2"]}
    >>> raw = [codec_for("Match").encode(m), codec_for("Match").encode({**m, "subscription_ids": []}), b"x"]
    >>> offsets = np.cumsum([0] + [len(r) for r in raw])
    >>> out = decode_matches(offsets, np.frombuffer(b"".join(raw), np.uint8), np.ones(3, dtype=bool))
    >>> out.accepted.tolist(), out.published_at()[:2].tolist()
    ([True, True, False], [5, 5])
    >>> lists, ids = out.ids(np.array([0, 1]))
    >>> lists.tolist(), ids.to_pylist()
    ([0, 2, 2], ['s1', 's2'])
    """
    accepted, heads, items = _run_kernel(_decode_matches, "Match", 7, 2, _MATCH_ROOM, offsets, data, valid)
    return MatchFields(data, accepted, heads, items)


def _run_kernel(
    kernel: Any,
    record: str,
    head_rows: int,
    item_rows: int,
    room: list[int],
    offsets: NDArray[Any],
    data: NDArray[np.uint8],
    valid: NDArray[np.bool_],
) -> tuple[NDArray[np.bool_], NDArray[np.int64], NDArray[np.int64]]:
    """Run a compiled decoder of ``record`` (``_decode_events``, ``_decode_matches``): its
    verdicts, head rows and item rows. Room is made for ``room[0]`` items per value; when the
    kernel reports more, ``room[0]`` grows to this batch's need and the kernel runs again."""
    n = len(valid)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    valid = np.ascontiguousarray(valid, dtype=np.bool_)
    header = np.frombuffer(codec_for(record).header, dtype=np.uint8)
    heads = np.zeros((head_rows, n), dtype=np.int64)
    accepted = np.zeros(n, dtype=np.bool_)
    items = np.empty((item_rows, max(1, n * room[0])), dtype=np.int64)
    m = kernel(offsets, data, valid, header, heads, accepted, items)
    if m > items.shape[1]:
        room[0] = -(-m // max(1, n))
        items = np.empty((item_rows, m), dtype=np.int64)
        m = kernel(offsets, data, valid, header, heads, accepted, items)
    return accepted, heads, items[:, :m]
