"""The matching job's output, a whole batch at once: ``Match`` records and dead letters as Kafka rows.

For one Arrow batch of the events topic's Kafka rows, decoded by ``schemas.event_records``, and
the batch's matches (each event's subscriptions as ranks of their ids in plain string order, and
the ids in rank order, as ``routing.matching.index.Matches.sorted_ranks`` gives them):

- :func:`match_values` lays out every row's ``Match`` record, single-object Avro, for the whole
  batch at once (``schemas.segments``): the header, the event's ``event_id``, ``publisher_id`` and
  ``published_at`` copied from the decoded batch, and ``subscription_ids`` from each subscription
  id's encoded Avro string, kept per index version (the ids in rank order are the same array for
  every batch of one version), in rank order, which is plain string order (docs/reference/matching-log.md);
- :func:`delivery_batch` returns the rows of delivery through channels (docs/reference/delivery.md):
  per channel one ``ChannelEvents`` record with every good event of the batch that it carries
  (once, as published), keyed by the first one's event id, to the channel's topic;
- :func:`output_batches` returns the rows that Spark's Kafka sink writes as they are
  (:data:`OUTPUT_SCHEMA`: topic, key, value): each good row's ``Match`` keyed by its event id, each
  bad row's ``DeadLetter`` (``schemas.rules.dead_letter``, the validation job's bytes) keyed
  ``topic/partition/offset``, in pieces whose values fit an Arrow binary column.

Invariants: a ``Match`` value is byte for byte what ``schemas.codec`` writes for the record
``{event_id, publisher_id, published_at, subscription_ids}`` (ids sorted); a dead letter is what
the validation job writes for the same Kafka row. Pure code: numpy and pyarrow, no Spark.

>>> import pyarrow as pa
>>> from schemas.codec import codec_for, decode
>>> from schemas.event_records import decode_rows
>>> ev = {"event_id": "e1", "publisher_id": "p", "published_at": 5, "lifetime_ms": 0, "attributes": {}}
>>> events = decode_rows(pa.array([codec_for("Event").encode(ev)], pa.binary()))
>>> by_rank = np.array(["s1", "s2"], dtype=object)
>>> data, row_off = match_values(events, np.array([0, 2]), np.array([0, 1]), by_rank)
>>> decode(data[row_off[0] : row_off[1]].tobytes(), "Match")[1]["subscription_ids"]
['s1', 's2']
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pyarrow as pa

from schemas.codec import codec_for
from schemas.columnar import binary_buffers, gather_spans
from schemas.event_records import DecodedEvents
from schemas.fastenc import zigzag
from schemas.rules import dead_letter
from schemas.segments import Segments, assemble, const, entry_runs, len_prefixed, slotted, table, varints

__all__ = [
    "CHANNEL_RECORD_BYTES",
    "OUTPUT_NAMES",
    "OUTPUT_SCHEMA",
    "Targets",
    "delivery_batch",
    "delivery_pairs",
    "delivery_pairs_by_sets",
    "match_values",
    "output_batches",
]

OUTPUT_SCHEMA = "topic string, key binary, value binary"  # what Spark's Kafka sink writes
OUTPUT_NAMES = [f.split()[0] for f in OUTPUT_SCHEMA.split(", ")]
_MAX_CHUNK_BYTES = (1 << 31) - 1  # an Arrow binary column's int32 offsets
CHANNEL_RECORD_BYTES = 512 * 1024
"""The most bytes of events one ``ChannelEvents`` record holds (more than one event only when they
fit): half of the Kafka producer's default ``max.request.size`` (1 MiB) and the topics' default
``max.message.bytes``, so that a large micro-batch (a backlog read after an overload) is written as
several records instead of failing the query with ``RecordTooLargeException``."""


@dataclass(frozen=True)
class Targets:
    """The topics of one query: where its events come from (named in their dead letters), where
    the matches and the dead letters go."""

    events_topic: str
    matches_topic: str
    deadletter_topic: str


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


def match_values(
    events: DecodedEvents, offsets: np.ndarray, ranks: np.ndarray, by_rank: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Every row's ``Match`` record, single-object Avro: the bytes of all rows and the ``n + 1`` row
    offsets into them (rows that are not good get bytes too, from empty fields:
    :func:`output_batches` puts their dead letters in their place).

    Parameters
    ----------
    events : DecodedEvents
        The batch, decoded.
    offsets, ranks, by_rank : arrays
        The matches (``Matches.sorted_ranks``): row ``i``'s subscription ids are
        ``by_rank[ranks[offsets[i] : offsets[i + 1]]]``, ascending. ``by_rank`` is the same array
        for every batch of one index version; the ids' encoded strings are kept while it is.
    """
    n = len(events.good)
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
    """The Kafka rows of one input batch (:data:`OUTPUT_SCHEMA`): each good row's ``Match`` (``data``
    between ``row_off``, from :func:`match_values`) keyed by its event id, each other row's
    ``DeadLetter`` keyed ``topic/partition/offset``; in pieces whose values fit an Arrow binary
    column.

    ``rb`` holds the events topic's Kafka rows (``partition``, ``offset``, ``timestamp``, ``key``,
    ``value``) that ``events`` was decoded from: the dead letters carry them.
    """
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


def delivery_pairs(
    good: np.ndarray, offsets: np.ndarray, ranks: np.ndarray, channel_by_rank: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The (row, channel) pairs of delivery: for each good row, each channel of its matched
    subscriptions once; channels ascending, and rows ascending within a channel (the order of
    :func:`delivery_batch`'s records).

    ``channel_by_rank[r]`` is the channel of the subscription of rank ``r`` (the ranks of
    ``Matches.sorted_ranks``). Up to 64 channels, each row's channels are one 64-bit mask, the
    OR of its subscriptions' channel bits (one gather and one ``bitwise_or.reduceat``, no Python
    object per row or match); beyond 64, a row x channel scatter. :func:`delivery_pairs_by_sets`
    is the plain twin.

    >>> rows, chans = delivery_pairs(np.array([True, True, False]), np.array([0, 2, 3, 4]),
    ...                              np.array([0, 1, 1, 0]), np.array([3, 1]))
    >>> rows.tolist(), chans.tolist()
    ([0, 1, 0], [1, 1, 3])
    """
    n = len(offsets) - 1
    k = int(channel_by_rank.max(initial=0)) + 1
    counts = np.diff(offsets)
    if k <= 64:
        bits = np.left_shift(np.uint64(1), channel_by_rank.astype(np.uint64))[ranks]
        masks = np.zeros(n, dtype=np.uint64)
        nonempty = counts > 0
        if bits.size:  # each non-empty run ends where the next non-empty one starts
            masks[nonempty] = np.bitwise_or.reduceat(bits, offsets[:-1][nonempty])
        masks[~good] = 0
        carried = (masks[None, :] >> np.arange(k, dtype=np.uint64)[:, None]) & np.uint64(1) != 0
    else:
        rows = np.repeat(np.arange(n, dtype=np.int64), counts)
        carried = np.zeros((k, n), dtype=bool)
        carried[channel_by_rank[ranks], rows] = True
        carried &= good[None, :]
    pair_chans, pair_rows = np.nonzero(carried)
    return pair_rows.astype(np.int64), pair_chans.astype(np.int64)


def delivery_pairs_by_sets(
    good: np.ndarray, offsets: np.ndarray, ranks: np.ndarray, channel_by_rank: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`delivery_pairs`, one row at a time with Python sets (the oracle).

    >>> rows, chans = delivery_pairs_by_sets(np.array([True, True, False]), np.array([0, 2, 3, 4]),
    ...                                      np.array([0, 1, 1, 0]), np.array([3, 1]))
    >>> rows.tolist(), chans.tolist()
    ([0, 1, 0], [1, 1, 3])
    """
    pairs = sorted(
        {
            (int(channel_by_rank[r]), i)
            for i in range(len(offsets) - 1)
            if good[i]
            for r in ranks[offsets[i] : offsets[i + 1]]
        }
    )
    return np.array([i for _, i in pairs], dtype=np.int64), np.array([c for c, _ in pairs], dtype=np.int64)


def delivery_batch(
    rb: pa.RecordBatch,
    events: DecodedEvents,
    rows: np.ndarray,
    chans: np.ndarray,
    topics: list[str],
    max_bytes: int = CHANNEL_RECORD_BYTES,
) -> pa.RecordBatch:
    """The Kafka rows (:data:`OUTPUT_SCHEMA`) of the pairs of :func:`delivery_pairs`: per channel
    ``ChannelEvents`` records holding its rows' values as published (``rb``'s ``value``), in row
    order, each keyed by its first event's id, to ``topics[channel]``. One record per channel and
    batch rather than one per event (the Kafka sink's cost is per record), split where its events
    pass ``max_bytes`` (:data:`CHANNEL_RECORD_BYTES`; an event larger than that alone), so no
    record passes Kafka's size limits; a reader sees the channel's events in the same order.

    >>> from schemas.codec import codec_for, decode
    >>> from schemas.event_records import decode_rows
    >>> evs = [{"event_id": e, "publisher_id": "p", "published_at": 5, "lifetime_ms": 0, "attributes": {}}
    ...        for e in ("e1", "e2")]
    >>> rb = pa.RecordBatch.from_arrays([pa.array([codec_for("Event").encode(e) for e in evs], pa.binary())], ["value"])
    >>> events = decode_rows(rb.column("value"))
    >>> out = delivery_batch(rb, events, np.array([0, 0, 1]), np.array([0, 2, 2]), ["c0", "c1", "c2"])
    >>> out.column("topic").to_pylist(), out.column("key").to_pylist()
    (['c0', 'c2'], [b'e1', b'e1'])
    >>> [decode(v, "Event")[1]["event_id"] for v in decode(out.column("value")[1].as_py())[1]["events"]]
    ['e1', 'e2']
    """
    header = codec_for("ChannelEvents").header
    value_off, value_data, _ = binary_buffers(rb.column("value"))
    value_off = value_off.astype(np.int64)
    starts, lens = events.event_id
    # each row once as an array item (its length as Avro's zigzag varint, then its bytes as
    # published), as one Arrow column: a channel's items are then one take, whose data buffer
    # is their concatenation
    n = len(value_off) - 1
    value_lens = np.diff(value_off)
    item_data, item_off = assemble([varints(value_lens), Segments(value_data, value_off[:-1], value_lens)], n)
    items = pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(item_off), pa.py_buffer(item_data)])
    order = np.lexsort((rows, chans))  # by channel, rows ascending within one
    rows, chans = rows[order], chans[order]
    cuts = np.flatnonzero(np.diff(chans)) + 1
    out_topics, keys, out_values = [], [], []
    for part_rows, part_chans in zip(np.split(rows, cuts), np.split(chans, cuts), strict=True):
        part = items.take(pa.array(part_rows, pa.int64()))
        offsets = np.frombuffer(part.buffers()[1], dtype=np.int64, count=len(part) + 1, offset=part.offset * 8)
        data = memoryview(part.buffers()[2])
        begin = 0
        while begin < len(part):  # greedy: as many whole events as fit in max_bytes, at least one
            end = max(begin + 1, int(np.searchsorted(offsets, offsets[begin] + max_bytes, side="right")) - 1)
            first = int(part_rows[begin])
            keys.append(events.data[starts[first] : starts[first] + lens[first]].tobytes())
            out_topics.append(topics[int(part_chans[0])])
            body = data[offsets[begin] : offsets[end]]
            out_values.append(b"".join((header, zigzag(end - begin), body, b"\x00")))
            begin = end
    return pa.RecordBatch.from_arrays(
        [pa.array(out_topics, pa.string()), pa.array(keys, pa.binary()), pa.array(out_values, pa.binary())],
        names=OUTPUT_NAMES,
    )
