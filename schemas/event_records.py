"""``Event`` records of a column of Kafka values, decoded for matching: verdicts, heads, attributes.

What the matching job's Python workers read from each Arrow batch of the events topic:

- :func:`decode_rows` decodes a column of Kafka values (Arrow binary). The compiled columnar
  pass (``schemas.columnar.decode_events``) accepts the values it is sure of (all of them in a
  clean stream); the reference decoder and rules (``schemas.rules.checked``) decide the others one
  by one, so every row gets the validation job's verdict and reason (``DecodedEvents``);
- the good rows' ``Match`` head fields stay byte spans into the batch's bytes
  (``DecodedEvents.event_id``, ``publisher_id``), for ``schemas.match_records`` to copy;
- the attribute entries (row, name, value per map kind) become columns with numpy, without a
  Python loop over events or attributes (:func:`attribute_columns`): the names are
  dictionary-encoded, the entries grouped by name with one stable argsort, and each group
  scattered into a column of ``n`` values with a presence mask. A name that comes with two value
  kinds in one batch (``price`` a long in one event and a double in another) becomes one object
  column, so ints stay exact. The columns are what ``routing.matching.index.EventBatch.from_columns``
  takes.

:func:`map_entries` reads the same entries from typed map columns (``longs``, ``doubles``,
``strings``, ``booleans``) of events that the JVM decoded (the composites job).

Invariants: a row is good exactly when ``schemas.rules.classify`` says so; a good row's fields and
attributes are those of ``schemas.codec.decode_wire``. Pure code: numpy and pyarrow, no Spark.

>>> import pyarrow as pa
>>> from schemas.codec import codec_for
>>> ev = {"event_id": "e1", "publisher_id": "p", "published_at": 5, "lifetime_ms": 0, "attributes": {"x": 2}}
>>> events = decode_rows(pa.array([codec_for("Event").encode(ev), b"junk"], pa.binary()))
>>> events.good.tolist(), events.error_code
([True, False], [None, 'bad_framing'])
>>> values, present = events.columns()["x"]
>>> values.tolist(), present.tolist()
([2, 0], [True, False])
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.columnar import binary_buffers, decode_events
from schemas.rules import VALUE_KINDS, checked

__all__ = ["DecodedEvents", "Entries", "attribute_columns", "decode_rows", "map_entries"]

Entries = tuple[np.ndarray, pa.Array, np.ndarray]
"""The attribute entries of one map kind: (row of each entry, names as Arrow strings, values)."""


def map_entries(arr: pa.Array) -> Entries:
    """The entries of an Arrow ``map`` column (``rows``, names, values as numpy), nulls (maps or
    values) left out.

    >>> col = pa.array([[("x", 1)], None, [("y", 2), ("z", None)]], type=pa.map_(pa.string(), pa.int64()))
    >>> rows, names, values = map_entries(col)
    >>> rows.tolist(), names.to_pylist(), values.tolist()
    ([0, 2], ['x', 'y'], [1, 2])
    """
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    offsets = arr.offsets.to_numpy()
    start, end = int(offsets[0]), int(offsets[-1])
    keys, items = arr.keys.slice(start, end - start), arr.items.slice(start, end - start)
    lengths = np.diff(offsets)
    rows = np.repeat(np.arange(len(arr), dtype=np.int64), lengths)
    keep = None
    if arr.null_count:
        keep = np.repeat(arr.is_valid().to_numpy(zero_copy_only=False), lengths)
    if items.null_count:
        valid = items.is_valid().to_numpy(zero_copy_only=False)
        keep = valid if keep is None else keep & valid
    if keep is not None and not keep.all():
        mask = pa.array(keep)
        rows, keys, items = rows[keep], keys.filter(mask), items.filter(mask)
    return rows, keys, items.to_numpy(zero_copy_only=False)


def attribute_columns(entries: Iterable[Entries], n: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``name -> (values, present)`` (what ``EventBatch.from_columns`` takes) from attribute entries.

    Parameters
    ----------
    entries : iterable of (rows, names, values)
        Per map kind (or any other split), each entry's event (0 to ``n - 1``), its name (an Arrow
        string array) and its value (numpy). A name may appear once per event.
    n : int
        The number of events.

    >>> longs = (np.array([0, 1]), pa.array(["x", "x"]), np.array([1, 2]))
    >>> doubles = (np.array([2]), pa.array(["x"]), np.array([0.5]))
    >>> values, present = attribute_columns([longs, doubles], 4)["x"]
    >>> values.tolist(), present.tolist()
    ([1, 2, 0.5, None], [True, True, True, False])
    """
    pieces: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for rows, keys, values in entries:
        if len(keys) == 0:
            continue
        encoded = pc.dictionary_encode(keys)
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        names = encoded.dictionary.to_pylist()
        order = np.argsort(codes, kind="stable")
        bounds = np.concatenate(([0], np.cumsum(np.bincount(codes, minlength=len(names)))))
        for j, name in enumerate(names):
            sel = order[bounds[j] : bounds[j + 1]]
            pieces.setdefault(name, []).append((rows[sel], values[sel]))
    columns: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name, parts in pieces.items():
        present = np.zeros(n, dtype=bool)
        if len(parts) == 1:
            rows, vals = parts[0]
            column = np.zeros(n, dtype=vals.dtype) if vals.dtype != object else np.full(n, None, dtype=object)
            column[rows] = vals
        elif len({vals.dtype for _, vals in parts}) == 1 and parts[0][1].dtype != object:  # one kind, several pieces
            column = np.zeros(n, dtype=parts[0][1].dtype)
            for rows, vals in parts:
                column[rows] = vals
        else:  # one name, several value kinds in this batch: Python objects keep ints exact
            column = np.full(n, None, dtype=object)
            for rows, vals in parts:
                column[rows] = vals.astype(object)
        for rows, _ in parts:
            present[rows] = True
        columns[name] = (column, present)
    return columns


@dataclass
class DecodedEvents:
    """One Arrow batch of Kafka values decoded as events: the verdict of every row, the ``Match``
    head fields of the good ones (as byte spans, for ``schemas.match_records.match_values``) and
    their attributes.

    Attributes
    ----------
    good : bool array
        The row is a valid ``Event``.
    error_code, reason : list of str or None
        The verdict of each row (None for good rows), as ``schemas.rules.classify`` gives it.
    data : uint8 array
        The bytes the spans point into.
    event_id, publisher_id : (starts, lengths)
        Byte spans in ``data`` (length 0 where not good).
    published_at : int64 array
    entries : list of (rows, names, values)
        The good rows' attribute entries (:func:`attribute_columns`).
    """

    good: np.ndarray
    error_code: list[str | None]
    reason: list[str | None]
    data: np.ndarray
    event_id: tuple[np.ndarray, np.ndarray]
    publisher_id: tuple[np.ndarray, np.ndarray]
    published_at: np.ndarray
    entries: list[Entries]

    def columns(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """The attributes of every row as ``name -> (values, present)`` (rows that are not good
        carry none)."""
        return attribute_columns(self.entries, len(self.good))


_KIND_DTYPES = {"longs": np.int64, "doubles": np.float64, "booleans": np.bool_}  # strings: Python objects


def decode_rows(values: pa.Array) -> DecodedEvents:
    """Decode a column of Kafka values (Arrow binary) as ``Event`` records.

    The columnar fast path (``schemas.columnar.decode_events``) accepts the values it is sure of
    (all of them in a clean stream); the others are decided by the reference decoder
    (``schemas.rules.checked``: ``schemas.codec`` and the rules, which the JVM decoder of the other
    jobs is held equal to), one by one, so their verdicts and reasons are the validation job's.
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    n = len(values)
    offsets, data, valid = binary_buffers(values)
    fast = decode_events(offsets, data, valid)
    good = fast.accepted.copy()
    codes: list[str | None] = [None] * n
    reasons: list[str | None] = [None] * n
    eid_start, eid_len = fast.string_span("event_id")
    pid_start, pid_len = fast.string_span("publisher_id")
    eid_len, pid_len = np.where(good, eid_len, 0), np.where(good, pid_len, 0)
    published = np.where(good, fast.longs("published_at"), 0)
    entries: list[Entries] = [fast.attributes(kind) for kind in VALUE_KINDS]
    referred = np.flatnonzero(~good).tolist()
    if referred:
        raw = values.take(pa.array(referred, pa.int64())).to_pylist()
        extra: list[bytes] = []
        base = len(data)
        by_kind: dict[str, tuple[list[int], list[str], list[Any]]] = {k: ([], [], []) for k in VALUE_KINDS}
        for i, value in zip(referred, raw, strict=True):
            code, reason, record = checked(value, "Event")
            if code is not None or record is None:
                codes[i], reasons[i] = code, reason
                continue
            good[i] = True
            published[i] = record["published_at"]
            for field, (starts, lens) in (("event_id", (eid_start, eid_len)), ("publisher_id", (pid_start, pid_len))):
                b = record[field].encode()
                starts[i], lens[i] = base, len(b)
                extra.append(b)
                base += len(b)
            for kind in VALUE_KINDS:
                rows, names, vals = by_kind[kind]
                for name, v in record["attributes"][kind].items():
                    rows.append(i)
                    names.append(name)
                    vals.append(v)
        if extra:
            data = np.concatenate([data, np.frombuffer(b"".join(extra), np.uint8)])
        for kind, (rows, names, vals) in by_kind.items():
            if rows:
                column: np.ndarray = np.array(vals, dtype=object if kind == "strings" else _KIND_DTYPES[kind])
                entries.append((np.array(rows, np.int64), pa.array(names, pa.string()), column))
    return DecodedEvents(good, codes, reasons, data, (eid_start, eid_len), (pid_start, pid_len), published, entries)
