"""The executor side of the matching job: Arrow batches of Kafka rows in, verdicts and matches out.

``match_batches`` is what ``mapInArrow`` runs in each Python worker. It

1. brings the worker's ``IndexReplica`` up to the table version that the driver shipped with
   this micro-batch (``ShipState``): replicas live in this module, one per job, so they survive
   from task to task and from batch to batch in a reused Python worker, and only the deltas since
   the worker's last batch are applied; a new worker rebuilds from the snapshot broadcast (a
   broadcast is fetched from the driver only by the workers that read its value);
2. decodes the batch's values as ``Event`` records (:func:`decode_rows`): one compiled pass over
   the Arrow buffers (``schemas.columnar.decode_events``) accepts the values it is sure of, the
   reference decoder and rules (``schemas.rules.checked``) decide the rest, so every row gets the
   validation job's verdict and reason;
3. turns the attribute entries (row, name, value per map kind) into ``EventBatch`` columns with
   numpy, without a Python loop over events or attributes (:func:`attribute_columns`): the names
   are dictionary-encoded, the entries grouped by name with one stable argsort, and each group
   scattered into a column of ``n`` values with a presence mask. A name that comes with two value
   kinds in one batch (``price`` a long in one event and a double in another) becomes one object
   column, so ints stay exact;
4. matches the batch and returns the Kafka rows to write, ready for Spark's Kafka sink (topic,
   key, value): for a good row its whole ``Match`` record, single-object Avro
   (``subscription_ids`` sorted, per SPEC.md), keyed by event id; for a bad row its
   ``DeadLetter`` (``schemas.rules.dead_letter``, the validation job's bytes), keyed
   ``topic/partition/offset``. The ``Match`` records are laid out for the whole batch at once
   (``schemas.segments``) from each subscription id's encoded bytes, kept per index version, in
   the order of the events' ids sorted by rank (``Matches.sorted_ranks``): a Python string per id
   and Spark's ``to_avro`` of an ``array<string>`` cost several times the matching at Gryphon's
   ~2% match rate (thousands of ids per event). Returning the finished rows, rather than
   verdicts and parts for a projection in the JVM to route and encode, spares the JVM a copy of
   every record into an ``UnsafeRow`` and out again (a prototype: 48.0k -> 50.8k events/s at 0.88).

The composites job reads events decoded by the JVM, as typed map columns: :func:`event_batch`
makes its ``EventBatch`` from those.

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
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from routing.matching.index import BruteForceIndex, EventBatch, Matches, MatchIndex
from routing.matching.table import Delta, IndexReplica
from schemas.codec import codec_for
from schemas.columnar import binary_buffers, decode_events, gather_spans
from schemas.fastenc import zigzag
from schemas.rules import VALUE_KINDS, checked, dead_letter
from schemas.segments import Segments, assemble, const, entry_runs, len_prefixed, slotted, table, varints

INPUT_COLUMNS = ("key", "value", "partition", "offset", "timestamp")  # of the events topic's Kafka rows
OUTPUT_SCHEMA = "topic string, key binary, value binary"  # what Spark's Kafka sink writes
OUTPUT_NAMES = [f.split()[0] for f in OUTPUT_SCHEMA.split(", ")]
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


@dataclass(frozen=True)
class Targets:
    """The topics of one query: where its events come from (named in their dead letters), where
    the matches and the dead letters go."""

    events_topic: str
    matches_topic: str
    deadletter_topic: str


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


Entries = tuple[np.ndarray, pa.Array, np.ndarray]  # one map kind: (row of each entry, names, values)


def map_entries(arr: pa.Array) -> Entries:
    """The entries of an Arrow ``map`` column (``rows``, names, values as numpy), nulls (maps or
    values) left out."""
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
    """``name -> (values, present)`` for ``EventBatch.from_columns`` from attribute entries.

    Parameters
    ----------
    entries : iterable of (rows, names, values)
        Per map kind (or any other split), each entry's event (0 to ``n - 1``), its name (an Arrow
        string array) and its value (numpy). A name may appear once per event.
    n : int
        The number of events.
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


def event_batch(maps: Mapping[str, pa.Array], n: int) -> EventBatch:
    """The ``EventBatch`` of ``n`` events given as typed attribute map columns (``longs``, ...;
    each ``n`` long, null for events that carry no map)."""
    return EventBatch.from_columns(n, attribute_columns((map_entries(maps[k]) for k in VALUE_KINDS if k in maps), n))


_ID_TABLE: list[Any] = [None, None, None]  # (the ids in rank order it was made for, their Avro strings, slotted)


def _id_strings(by_rank: np.ndarray) -> tuple[Segments, np.ndarray | None]:
    """Each subscription id as an Avro string (length varint, UTF-8), in rank order: ``data``
    holds them one after another, entry ``r`` at ``starts[r]``; and the same in fixed slots
    (``schemas.segments.slotted``) when they fit. Kept while the index version is."""
    if _ID_TABLE[0] is by_rank:
        return cast(Segments, _ID_TABLE[1]), _ID_TABLE[2]
    raw = [sid.encode() for sid in by_rank.tolist()]
    ids = table([zigzag(len(b)) + b for b in raw], np.arange(len(raw)))
    _ID_TABLE[:] = [by_rank, ids, slotted(ids)]
    return ids, _ID_TABLE[2]


@dataclass
class DecodedEvents:
    """One Arrow batch of Kafka rows decoded as events: the verdict of every row, the ``Match``
    head fields of the good ones (as byte spans, for :func:`match_values`) and their attributes.

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
        The good rows' attribute entries (``attribute_columns``).
    """

    good: np.ndarray
    error_code: list[str | None]
    reason: list[str | None]
    data: np.ndarray
    event_id: tuple[np.ndarray, np.ndarray]
    publisher_id: tuple[np.ndarray, np.ndarray]
    published_at: np.ndarray
    entries: list[Entries]

    def batch(self) -> EventBatch:
        n = len(self.good)
        return EventBatch.from_columns(n, attribute_columns(self.entries, n))


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
                column = np.array(vals, dtype=object if kind == "strings" else _KIND_DTYPES[kind])
                entries.append((np.array(rows, np.int64), pa.array(names, pa.string()), column))
    return DecodedEvents(good, codes, reasons, data, (eid_start, eid_len), (pid_start, pid_len), published, entries)


def match_values(events: DecodedEvents, matches: Matches) -> tuple[np.ndarray, np.ndarray]:
    """Every row's ``Match`` record, single-object Avro: the bytes of all rows and the ``n + 1`` row
    offsets into them (rows that are not good get bytes too, from empty fields: ``output_batches``
    puts their dead letters in their place)."""
    n = len(events.good)
    offsets, ranks, by_rank = matches.sorted_ranks()
    table_of_ids, slots = _id_strings(by_rank)
    ids = entry_runs(table_of_ids, ranks, offsets, slots)
    counts = np.diff(offsets)
    parts = [const(codec_for("Match").header)]
    parts += len_prefixed([Segments(events.data, *events.event_id)], n)
    parts += len_prefixed([Segments(events.data, *events.publisher_id)], n)
    parts += [varints(events.published_at), varints(counts).masked(counts > 0)]  # an empty array: its end marker only
    parts += [ids, const(b"\x00")]
    return assemble(parts, n)


def _dead_letters(rb: pa.RecordBatch, events: DecodedEvents, topic: str) -> tuple[np.ndarray, list[bytes], list[bytes]]:
    """The rows that are not good, and their dead letters' Kafka keys and values
    (``schemas.rules.dead_letter``: as the validation job writes them)."""
    bad = np.flatnonzero(~events.good)
    picked = pa.array(bad, pa.int64())
    columns = [rb.column(name).take(picked) for name in ("partition", "offset", "timestamp", "key", "value")]
    columns[2] = columns[2].cast(pa.int64())  # microseconds
    keys, values = [], []
    for i, partition, offset, ts_us, key, value in zip(bad.tolist(), *(c.to_pylist() for c in columns), strict=True):
        code, reason = events.error_code[i], events.reason[i]
        assert code is not None and reason is not None
        k, v = dead_letter(topic, partition, offset, ts_us, code, reason, key, value)
        keys.append(k)
        values.append(v)
    return bad, keys, values


def _spliced(
    data: np.ndarray, starts: np.ndarray, lens: np.ndarray, rows: np.ndarray, extra: list[bytes]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Byte spans ``(data, starts, lens)`` with the spans of ``rows`` replaced by ``extra``."""
    extra_lens = np.fromiter(map(len, extra), np.int64, len(extra))
    starts, lens = starts.copy(), lens.copy()
    starts[rows] = len(data) + np.cumsum(extra_lens) - extra_lens
    lens[rows] = extra_lens
    return np.concatenate([data, np.frombuffer(b"".join(extra), np.uint8)]), starts, lens


def output_batches(
    rb: pa.RecordBatch, events: DecodedEvents, data: np.ndarray, row_off: np.ndarray, targets: Targets
) -> Iterator[pa.RecordBatch]:
    """The Kafka rows of one input batch (``OUTPUT_SCHEMA``): each good row's ``Match`` (``data``
    between ``row_off``) keyed by its event id, each other row's ``DeadLetter`` keyed
    ``topic/partition/offset``; in pieces whose values fit an Arrow binary column."""
    n = rb.num_rows
    key_data, (key_starts, key_lens) = events.data, events.event_id
    if not events.good.all():
        bad, dl_keys, dl_values = _dead_letters(rb, events, targets.events_topic)
        key_data, key_starts, key_lens = _spliced(key_data, key_starts, key_lens, bad, dl_keys)
        spans = _spliced(data, row_off[:-1], np.diff(row_off), bad, dl_values)
        data, row_off = assemble([Segments(*spans)], n)
    key_off, key_blob = gather_spans(key_data, key_starts, key_lens)
    keys = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(key_off), pa.py_buffer(key_blob)])
    which = pa.array((~events.good).astype(np.int32))
    topics = pa.DictionaryArray.from_arrays(which, pa.array([targets.matches_topic, targets.deadletter_topic]))
    topic = topics.cast(pa.string())
    lo = 0
    while lo < n:
        hi = int(np.searchsorted(row_off, row_off[lo] + _MAX_CHUNK_BYTES, side="right")) - 1
        hi = min(n, max(hi, lo + 1))
        if int(row_off[hi] - row_off[lo]) > _MAX_CHUNK_BYTES:
            raise ValueError(f"a Match record of {int(row_off[hi] - row_off[lo]):,} bytes does not fit a binary column")
        off = (row_off[lo : hi + 1] - row_off[lo]).astype(np.int32)
        payload = data[int(row_off[lo]) : int(row_off[hi])]
        values = pa.Array.from_buffers(pa.binary(), hi - lo, [None, pa.py_buffer(off), pa.py_buffer(payload)])
        yield pa.RecordBatch.from_arrays(
            [topic.slice(lo, hi - lo), keys.slice(lo, hi - lo), values], names=OUTPUT_NAMES
        )
        lo = hi


def match_batches(ship: ShipState, targets: Targets, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: Kafka rows of events in (``INPUT_COLUMNS``), the Kafka rows to write out
    (``OUTPUT_SCHEMA``; see the module docstring)."""
    replica: IndexReplica | None = None
    for rb in batches:
        n = rb.num_rows
        if n == 0:
            continue
        if replica is None:  # sync lazily: tasks of partitions without events never build an index
            replica = replica_for(ship)
        events = decode_rows(rb.column("value"))
        matches = replica.index.match(events.batch())
        if ship.counters is not None:
            good_count = int(events.good.sum())
            ship.counters.add((good_count, n - good_count, int(matches.counts()[events.good].sum())))
        data, row_off = match_values(events, matches)
        yield from output_batches(rb, events, data, row_off, targets)
