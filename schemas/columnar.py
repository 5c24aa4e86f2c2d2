"""Decode and validate a column of framed Avro values at once: the fast path for flat records.

The jobs whose state lives on the driver (``streaming.driver_batch``) read telemetry and
receipts by the million: records of a few scalar fields (``LinkSample``, ``BrokerSample``,
``Receipt``). Decoding them in the JVM (``streaming.decode``) and collecting the decoded
columns cost about three times what collecting the raw values does; here the raw values are
decoded in one compiled pass over the Arrow buffers (offsets and bytes), and the rules of
``schemas.rules`` are checked as numpy comparisons.

This is a fast path, not a third verdict: a value is *accepted* only when it certainly is a good
record, i.e. it is framed with the current version of the schema, its body decodes, every string
in it is ASCII and every rule holds. Anything else (a tombstone, another version, a malformed
body, a broken rule, a non-ASCII string, an unusual encoding) is *referred* to the reference
decoder, which gives the verdict and the reason (the JVM twin in the jobs). Values that both
accept decode to the same fields: a parity test holds this path to ``schemas.codec`` and
``schemas.rules.classify`` on generated records.

Supported schemas (:func:`supports`): records whose fields are ``string``, ``long``, ``int``,
``double`` or ``boolean``, or a union of ``null`` with one of them, and whose rules are of the
kinds ``required``, ``absent``, ``non_empty``, ``finite``, ``min``, ``max`` and ``gt`` on those
fields (a ``when`` condition on a boolean or numeric field).

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
from schemas.rules import EXACTLY_ONE, Rule, rules_for

T_STRING, T_LONG, T_INT, T_DOUBLE, T_BOOLEAN = 0, 1, 2, 3, 4
_TYPES = {"string": T_STRING, "long": T_LONG, "int": T_INT, "double": T_DOUBLE, "boolean": T_BOOLEAN}
_RULE_KINDS = frozenset({"required", "absent", "non_empty", "finite", "min", "max", "gt"})


@dataclass(frozen=True)
class Field:
    """One field of a flat record: its name, type code (``T_*``) and the union branch of null
    (-1 when the field is not nullable)."""

    name: str
    type: int
    null_branch: int


def _field(spec: dict[str, Any]) -> Field | None:
    t = spec["type"]
    if isinstance(t, str):
        return Field(spec["name"], _TYPES[t], -1) if t in _TYPES else None
    if isinstance(t, list) and len(t) == 2 and "null" in t:
        other = t[1 - t.index("null")]
        if isinstance(other, str) and other in _TYPES:
            return Field(spec["name"], _TYPES[other], t.index("null"))
    return None


def _rule_supported(rule: Rule, types: dict[str, int]) -> bool:
    if rule.kind not in _RULE_KINDS or rule.field not in types:
        return False
    if rule.kind == "non_empty" and types[rule.field] != T_STRING:
        return False
    if rule.kind in ("finite", "min", "max", "gt") and types[rule.field] == T_STRING:
        return False
    if rule.when is not None:
        name, value = rule.when
        if types.get(name) in (None, T_STRING) or not isinstance(value, bool | int | float):
            return False
    return True


@cache
def fields_of(name: str) -> tuple[Field, ...] | None:
    """The fields of record ``name`` when :class:`FlatDecoder` supports it, else None."""
    schema = codec_for(name).schema
    fields = tuple(_field(f) for f in schema["fields"])
    if any(f is None for f in fields) or name in EXACTLY_ONE:
        return None
    out = tuple(f for f in fields if f is not None)
    types = {f.name: f.type for f in out}
    if not all(_rule_supported(r, types) for r in rules_for(name)):
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
def _decode(
    offsets: NDArray[np.int64],
    data: NDArray[np.uint8],
    valid: NDArray[np.bool_],
    header: NDArray[np.uint8],
    types: NDArray[np.int64],
    null_branch: NDArray[np.int64],
    ints: NDArray[np.int64],
    lens: NDArray[np.int64],
    present: NDArray[np.bool_],
    decoded: NDArray[np.bool_],
) -> None:
    """Decode every value ``data[offsets[i]:offsets[i + 1]]`` (``valid[i]``: not null).

    Per field ``f`` and row ``i``: ``ints[f, i]`` holds a long, int or boolean's value, a double's
    bits, or a string's start in ``data`` (``lens[f, i]`` its length); ``present[f, i]`` is false
    for a null. ``decoded[i]`` says the whole record decoded from the current version with ASCII
    strings; the other rows' fields are garbage.
    """
    n = len(valid)
    nf = len(types)
    hl = len(header)
    for i in range(n):
        decoded[i] = False
        if not valid[i]:
            continue
        pos = offsets[i]
        end = offsets[i + 1]
        if end - pos < hl:
            continue
        same = True
        for k in range(hl):
            if data[pos + k] != header[k]:
                same = False
                break
        if not same:
            continue
        pos += hl
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
                bits = np.uint64(0)
                for k in range(8):
                    bits |= np.uint64(data[pos + k]) << np.uint64(8 * k)
                ints[f, i] = np.int64(bits)
                pos += 8
            elif t == 4:  # boolean: one byte, 0 or 1
                if pos >= end or data[pos] > 1:
                    good = False
                    break
                ints[f, i] = data[pos]
                pos += 1
            else:  # string: length, then ASCII bytes
                length, pos, ok = _varint(data, pos, end, 10)
                if not ok or length < 0 or pos + length > end:
                    good = False
                    break
                for k in range(pos, pos + length):
                    if data[k] >= 0x80:
                        good = False
                        break
                if not good:
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
        s = starts[j]
        for k in range(lengths[j]):
            out[p] = data[s + k]
            p += 1
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
        """The numbers of field ``name``: int64 (long, int), float64 (double) or bool (boolean);
        0 where null."""
        k = self._at(name)
        t = self.fields[k].type
        if t == T_STRING:
            raise TypeError(f"{name} is a string: use strings() or string_buffers()")
        if t == T_DOUBLE:
            return np.asarray(self._ints[k].view(np.float64))
        if t == T_BOOLEAN:
            return np.asarray(self._ints[k] != 0)
        return np.asarray(self._ints[k])

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

    def strings(self, name: str, rows: NDArray[Any]) -> list[str | None]:
        """String field ``name`` at ``rows`` as Python strings (slow: for tests and examples)."""
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
            raise ValueError(f"{name} is not a flat record of scalar fields with scalar rules")
        self.name = name
        self.fields = fields
        self.rules = rules_for(name)
        self._header = np.frombuffer(codec_for(name).header, dtype=np.uint8)
        self._types = np.array([f.type for f in fields], dtype=np.int64)
        self._null = np.array([f.null_branch for f in fields], dtype=np.int64)
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
            ints,
            lens,
            present,
            decoded,
        )
        out = FlatColumns(self.fields, data, decoded, ints, lens, present)
        for rule in self.rules:
            out.accepted &= ~self._broken(rule, out)
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
            name, value = rule.when
            bad &= cols.present(name) & (cols.values(name) == value)
        return np.asarray(bad, dtype=np.bool_)
