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
3. matches the batch and returns the input's pass-through columns plus ``subscription_ids``
   (sorted, per SPEC.md; null for rows the decoder rejected, which carry no attributes).

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
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from routing.matching import BruteForceIndex, EventBatch, MatchIndex
from routing.subscriptions import Delta, IndexReplica

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
    "timestamp timestamp, event_id string, publisher_id string, published_at long, subscription_ids array<string>"
)
INDEX_KINDS = {"match": MatchIndex, "brute-force": BruteForceIndex}
_IDS_TYPE = pa.list_(pa.string())


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


def match_batches(ship: ShipState, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: each input batch with its ``subscription_ids`` (see the module docstring)."""
    replica: IndexReplica | None = None
    for rb in batches:
        n = rb.num_rows
        if n == 0:
            continue
        if replica is None:  # sync lazily: tasks of partitions without events never build an index
            replica = replica_for(ship)
        cols = {kind: rb.column(kind) for kind in VALUE_KINDS}
        matches = replica.index.match(event_batch(cols, n))
        good = rb.column("error_code").is_null().to_numpy(zero_copy_only=False)
        offsets, flat = matches.flat_ids()
        ids = pa.ListArray.from_arrays(
            pa.array(offsets, type=pa.int32()), pa.array(flat, type=pa.string()), mask=pa.array(~good)
        )
        if ship.counters is not None:
            good_count = int(good.sum())
            ship.counters.add((good_count, n - good_count, int(matches.counts()[good].sum())))
        arrays = [rb.column(name) for name in PASS_THROUGH]
        arrays.append(ids.cast(_IDS_TYPE))
        yield pa.RecordBatch.from_arrays(arrays, names=[*PASS_THROUGH, "subscription_ids"])
