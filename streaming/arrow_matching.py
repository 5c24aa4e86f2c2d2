"""The executor side of the matching job: Arrow batches of decoded events in, matched ids out.

``match_batches`` is what ``mapInArrow`` runs in each Python worker. It

1. brings the worker's ``IndexReplica`` up to the table version that the driver shipped with
   this micro-batch (``ShipState``): replicas live in this module, one per job, so they survive
   from task to task and from batch to batch in a reused Python worker, and only the deltas since
   the worker's last batch are applied; a new worker rebuilds from the snapshot broadcast (a
   broadcast is fetched from the driver only by the workers that read its value);
2. turns the four typed attribute maps of the ``Event`` record (``longs``, ``doubles``,
   ``strings``, ``booleans``: Arrow ``map<string, T>`` columns) into ``EventBatch`` columns with
   numpy, without a Python loop over events or attributes: each map column is flattened (keys,
   values and the row of each entry from the offsets), its keys are dictionary-encoded, the
   entries are grouped by key with one stable argsort, and each group is scattered into a
   column of ``n`` values with a presence mask. A name that comes with two value kinds in one
   batch (``price`` a long in one event and a double in another) becomes one object column, so
   ints stay exact;
3. matches the batch and returns the input's pass-through columns plus ``match_value``: the
   event's whole ``Match`` record, single-object Avro (``subscription_ids`` sorted, per SPEC.md),
   null for rows the decoder rejected, which carry no attributes. The records are laid out for
   the whole batch at once (``schemas.segments``) from each subscription id's encoded bytes,
   kept per index version, in the order of the events' ids sorted by rank (``Matches.sorted_ranks``):
   a Python string per id and Spark's ``to_avro`` of an ``array<string>`` cost several times the
   matching at Gryphon's ~2% match rate (thousands of ids per event).

No pyspark here: the module is tested with plain pyarrow as well as through Spark.

>>> import pyarrow as pa
>>> maps = {"longs": pa.array([[("x", 1)], None, []], type=pa.map_(pa.string(), pa.int64())),
...         "strings": pa.array([[("s", "a")], [("x", "b")], []], type=pa.map_(pa.string(), pa.string()))}
>>> batch = event_batch(maps, 3)
>>> [batch.event(i) for i in range(3)]
[{'x': 1, 's': 'a'}, {'x': 'b'}, {}]
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from routing.matching import BruteForceIndex, EventBatch, Matches, MatchIndex
from routing.subscriptions import Delta, IndexReplica
from schemas.codec import codec_for
from schemas.fastenc import zigzag
from schemas.segments import Segments, assemble, const, entry_runs, len_prefixed, table, varints

VALUE_KINDS = ("longs", "doubles", "strings", "booleans")
PASS_THROUGH = (
    "error_code",
    "reason",
    "key",
    "value",
    "topic",
    "partition",
    "offset",
    "timestamp",
    "event_id",
    "publisher_id",
    "published_at",
)
OUTPUT_SCHEMA = (
    "error_code string, reason string, key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, event_id string, publisher_id string, published_at long, match_value binary"
)
INDEX_KINDS = {"match": MatchIndex, "brute-force": BruteForceIndex}
_MAX_CHUNK_BYTES = (1 << 31) - 1  # an Arrow binary column's int32 offsets


@dataclass(frozen=True)
class ShipState:
    """What the driver ships to executors with one micro-batch: how to reach table ``version``.

    Attributes
    ----------
    job : str
        Identifies the query run; a worker keeps one replica per job.
    index_kind : str
        ``match`` (``MatchIndex``) or ``brute-force`` (``BruteForceIndex``, the oracle).
    base_version : int
        The version of the snapshot in ``base``.
    base : object
        Anything with a ``value`` attribute holding the snapshot, ``{id: filter text}`` (a Spark
        broadcast on a cluster): read only by workers that must rebuild.
    deltas : tuple of (version, id, filter or None)
        The table's changes over ``(base_version, version]``.
    version : int
        The table version this micro-batch's events are matched against.
    counters : object, optional
        Anything with ``add((events, rejected events, matches))`` (a Spark accumulator).
    """

    job: str
    index_kind: str
    base_version: int
    base: Any
    deltas: tuple[Delta, ...]
    version: int
    counters: Any = None


_REPLICAS: OrderedDict[str, IndexReplica] = OrderedDict()
_MAX_REPLICAS = 2  # jobs whose replicas a worker keeps (tests run several queries in one session)


def replica_for(ship: ShipState) -> IndexReplica:
    """This worker's replica for ``ship.job``, synced to ``ship.version``."""
    replica = _REPLICAS.get(ship.job)
    if replica is None:
        replica = IndexReplica(INDEX_KINDS[ship.index_kind])
        _REPLICAS[ship.job] = replica
        while len(_REPLICAS) > _MAX_REPLICAS:
            _REPLICAS.popitem(last=False)
    _REPLICAS.move_to_end(ship.job)
    replica.sync(ship.base_version, lambda: ship.base.value.items(), ship.deltas, ship.version)
    return replica


def _flat_entries(arr: pa.Array) -> tuple[np.ndarray, pa.Array, pa.Array]:
    """(row of each entry, keys, values) of a map column, nulls (maps or values) left out."""
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
    return rows, keys, items


def attribute_columns(maps: Mapping[str, pa.Array], n: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``name -> (values, present)`` for ``EventBatch.from_columns`` from the typed map columns.

    Parameters
    ----------
    maps : mapping of kind -> Arrow map array
        Some of ``longs``, ``doubles``, ``strings``, ``booleans``; each ``n`` long, null for
        events that carry no map (rejected ones).
    n : int
        The number of events.
    """
    pieces: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for kind in VALUE_KINDS:
        arr = maps.get(kind)
        if arr is None:
            continue
        rows, keys, items = _flat_entries(arr)
        if len(keys) == 0:
            continue
        encoded = pc.dictionary_encode(keys)
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        names = encoded.dictionary.to_pylist()
        values = items.to_numpy(zero_copy_only=False)
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
        else:  # one name, several value kinds in this batch: Python objects keep ints exact
            column = np.full(n, None, dtype=object)
            for rows, vals in parts:
                column[rows] = vals.astype(object)
        for rows, _ in parts:
            present[rows] = True
        columns[name] = (column, present)
    return columns


def event_batch(maps: Mapping[str, pa.Array], n: int) -> EventBatch:
    """The ``EventBatch`` of ``n`` events given as typed attribute map columns."""
    return EventBatch.from_columns(n, attribute_columns(maps, n))


def _string_segments(arr: pa.Array) -> Segments:
    """The bytes of each value of an Arrow (large) string or binary array, without a copy."""
    _, off_buf, data_buf = arr.buffers()
    dtype = np.int64 if pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type) else np.int32
    off = np.frombuffer(off_buf, dtype)[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return Segments(data, off[:-1], np.diff(off))


_ID_TABLE: list[Any] = [None, None]  # (the ids in rank order it was made for, their Avro strings)


def _id_strings(by_rank: np.ndarray) -> Segments:
    """Each subscription id as an Avro string (length varint, UTF-8), in rank order: ``data``
    holds them one after another, entry ``r`` at ``starts[r]`` (kept while the index version is)."""
    if _ID_TABLE[0] is by_rank:
        return cast(Segments, _ID_TABLE[1])
    raw = [sid.encode() for sid in by_rank.tolist()]
    ids = table([zigzag(len(b)) + b for b in raw], np.arange(len(raw)))
    _ID_TABLE[:] = [by_rank, ids]
    return ids


def match_values(rb: pa.RecordBatch, matches: Matches) -> tuple[np.ndarray, np.ndarray]:
    """Every row's ``Match`` record, single-object Avro: the bytes of all rows and the ``n + 1`` row
    offsets into them (rows the decoder rejected get bytes too, from their null fields: the caller
    masks them)."""
    n = rb.num_rows
    offsets, ranks, by_rank = matches.sorted_ranks()
    ids = entry_runs(_id_strings(by_rank), ranks, offsets)
    counts = np.diff(offsets)
    published = pc.fill_null(rb.column("published_at"), 0).to_numpy(zero_copy_only=False)
    parts = [const(codec_for("Match").header)]
    parts += len_prefixed([_string_segments(rb.column("event_id"))], n)
    parts += len_prefixed([_string_segments(rb.column("publisher_id"))], n)
    parts += [varints(published), varints(counts).masked(counts > 0)]  # an empty array: its end marker only
    parts += [ids, const(b"\x00")]
    return assemble(parts, n)


def _with_values(rb: pa.RecordBatch, data: np.ndarray, row_off: np.ndarray, bad: pa.Array) -> Iterator[pa.RecordBatch]:
    """``rb``'s pass-through columns plus ``match_value`` (null where ``bad``), in pieces whose values
    fit an Arrow binary column."""
    n = rb.num_rows
    lo = 0
    while lo < n:
        hi = int(np.searchsorted(row_off, row_off[lo] + _MAX_CHUNK_BYTES, side="right")) - 1
        hi = min(n, max(hi, lo + 1))
        if int(row_off[hi] - row_off[lo]) > _MAX_CHUNK_BYTES:
            raise ValueError(f"a Match record of {int(row_off[hi] - row_off[lo]):,} bytes does not fit a binary column")
        off = (row_off[lo : hi + 1] - row_off[lo]).astype(np.int32)
        payload = data[int(row_off[lo]) : int(row_off[hi])]
        values = pa.Array.from_buffers(pa.binary(), hi - lo, [None, pa.py_buffer(off), pa.py_buffer(payload)])
        values = pc.if_else(bad.slice(lo, hi - lo), pa.scalar(None, pa.binary()), values)
        part = rb.slice(lo, hi - lo)
        arrays = [part.column(name) for name in PASS_THROUGH]
        yield pa.RecordBatch.from_arrays([*arrays, values], names=[*PASS_THROUGH, "match_value"])
        lo = hi


def match_batches(ship: ShipState, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: each input batch with its ``match_value`` (see the module docstring)."""
    replica: IndexReplica | None = None
    for rb in batches:
        n = rb.num_rows
        if n == 0:
            continue
        if replica is None:  # sync lazily: tasks of partitions without events never build an index
            replica = replica_for(ship)
        cols = {kind: rb.column(kind) for kind in VALUE_KINDS}
        matches = replica.index.match(event_batch(cols, n))
        bad = rb.column("error_code").is_valid()
        good = ~bad.to_numpy(zero_copy_only=False)
        if ship.counters is not None:
            good_count = int(good.sum())
            ship.counters.add((good_count, n - good_count, int(matches.counts()[good].sum())))
        data, row_off = match_values(rb, matches)
        yield from _with_values(rb, data, row_off, bad)
