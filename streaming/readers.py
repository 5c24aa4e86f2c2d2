"""Read a topic from the beginning to its current end and decode it (CLI summaries, tests)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, TopicPartition

from infra.connection import KafkaConnection, arrived
from schemas.codec import DecodeError, decode

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "RANGE_READER",
    "DecodeError",
    "KafkaRecord",
    "end_offsets",
    "partition_ends",
    "read_range",
    "read_ranges",
    "read_topic",
    "summarize_dead_letters",
    "watermarks",
]


@dataclass(frozen=True)
class KafkaRecord:
    """One record as read: coordinates, raw key, and the decoded value (None for a tombstone)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: dict[str, Any] | None
    timestamp_ms: int


def watermarks(consumer: Consumer, topic: str, partition: int, timeout_s: float = 30.0) -> tuple[int, int]:
    """(low, high) offsets of a partition, retried while a new topic's leader is still settling
    (a broker answers NOT_LEADER_FOR_PARTITION for a moment after the metadata shows a leader)."""
    import time

    from confluent_kafka import KafkaError, KafkaException

    settling = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.UNKNOWN_TOPIC_OR_PART}
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            return int(low), int(high)
        except KafkaException as exc:
            error = exc.args[0]
            if not (error.retriable() or error.code() in settling) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def read_topic(conn: KafkaConnection, topic: str, schema: str, timeout_s: float = 30.0) -> list[KafkaRecord]:
    """Every record now in ``topic`` (all partitions, up to the high watermarks), decoded.

    Raises ``DecodeError`` for a record that is not a valid ``schema`` record: output topics
    are written by SiftStream's own jobs, so a bad one there is a bug, not input to tolerate.
    """
    import time

    consumer = Consumer(conn.confluent(**{"group.id": "siftstream-reader", "enable.auto.commit": False}))
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            raise RuntimeError(f"topic {topic} does not exist")
        ends: dict[int, int] = {}
        assignment = []
        for p in meta.partitions:
            low, high = watermarks(consumer, topic, p)
            if high > low:
                ends[p] = high
                assignment.append(TopicPartition(topic, p, low))
        consumer.assign(assignment)
        out: list[KafkaRecord] = []
        deadline = time.monotonic() + timeout_s
        done: set[int] = set()
        while len(done) < len(ends) and time.monotonic() < deadline:
            for msg in arrived(consumer, 10_000, 1.0):
                if msg.error() is not None:
                    raise RuntimeError(f"reading {topic}: {msg.error()}")
                value = None if msg.value() is None else decode(msg.value(), schema)[1]
                out.append(
                    KafkaRecord(msg.topic(), msg.partition(), msg.offset(), msg.key(), value, msg.timestamp()[1])
                )
                if msg.offset() >= ends[msg.partition()] - 1:
                    done.add(msg.partition())
        if len(done) < len(ends):
            raise TimeoutError(f"reading {topic} did not reach its end within {timeout_s:.0f}s")
        return out
    finally:
        consumer.close()


RANGE_READER = {
    "group.id": "siftstream-reader",  # the readers' group (infra.security.JOB_GROUPS); nothing committed
    "enable.auto.commit": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "earliest",
}
"""The settings of a consumer for :func:`read_ranges` (assign only: nothing is committed)."""


def read_ranges(
    consumer: Consumer, wanted: Mapping[tuple[str, int], tuple[int, int]], stall_s: float = 120.0
) -> pa.Table:
    """The raw records of each ``(topic, partition)`` of ``wanted`` in its ``[start, end)`` (a
    start of ``OFFSET_BEGINNING``: the earliest), read by ``consumer`` (made with
    :data:`RANGE_READER`; assigned here, unassigned after), as an Arrow table of
    ``streaming.driver_batch.RAW_SCHEMA``'s columns (topic, partition, offset, ts_ms, key, value)
    in the order read, each partition by offset; empty when ``wanted`` is.

    What Spark's batch read by offsets gives, without the JVM: gaps that compaction or retention
    left are skipped (a partition is done at its first record at or past ``end - 1``, or at its
    end of partition), and a start below the log's start reads from it. Raises ``RuntimeError``
    when no record arrives for ``stall_s`` while a partition is still below its end (the broker
    is gone), or on a read error.
    """
    import time

    import pyarrow as pa
    from confluent_kafka import KafkaError

    chunks: list[pa.Table] = []
    behind = set(wanted)
    consumer.assign([TopicPartition(t, p, start) for (t, p), (start, _end) in wanted.items()])
    try:
        stalled_at = time.monotonic()
        while behind:
            msgs = arrived(consumer, 100_000, 0.5)
            if msgs:
                stalled_at = time.monotonic()
            elif time.monotonic() - stalled_at > stall_s:
                raise RuntimeError(f"no record for {stall_s:.0f} s while {sorted(behind)} are below their ends")
            kept = []
            for msg in msgs:
                tp, err = (msg.topic(), msg.partition()), msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"reading {tp}: {err}")
                    behind.discard(tp)  # the partition's end: nothing more to read
                    continue
                end = wanted[tp][1]
                if msg.offset() < end:
                    kept.append(msg)
                if msg.offset() >= end - 1:
                    behind.discard(tp)
            if kept:  # columns a fetch at a time: a cold start's whole topic never sits as messages
                chunks.append(
                    pa.table(
                        {
                            "topic": pa.array([m.topic() for m in kept], pa.string()),
                            "partition": pa.array([m.partition() for m in kept], pa.int32()),
                            "offset": pa.array([m.offset() for m in kept], pa.int64()),
                            "ts_ms": pa.array([m.timestamp()[1] for m in kept], pa.int64()),
                            "key": pa.array([m.key() for m in kept], pa.binary()),
                            "value": pa.array([m.value() for m in kept], pa.binary()),
                        }
                    )
                )
    finally:
        consumer.unassign()
    if not chunks:
        return pa.table({"topic": pa.array([], pa.string()), "partition": pa.array([], pa.int32()),
                         "offset": pa.array([], pa.int64()), "ts_ms": pa.array([], pa.int64()),
                         "key": pa.array([], pa.binary()), "value": pa.array([], pa.binary())})  # fmt: skip
    return pa.concat_tables(chunks).combine_chunks()


_RANGE_FETCH = {
    "fetch.max.bytes": 64 << 20,
    "max.partition.fetch.bytes": 32 << 20,
    "queued.max.messages.kbytes": 256 << 10,
}
"""librdkafka's fetch sizes for :func:`read_range`: a cold start reads a whole compacted topic."""


def read_range(
    conn: KafkaConnection, topic: str, start: Mapping[int, int], end: Mapping[int, int], stall_s: float = 120.0
) -> pa.Table | None:
    """:func:`read_ranges` of ``topic``'s partitions of ``end`` from ``start`` (a missing start:
    the earliest offset) with a consumer of its own; None when no partition has a record in range.

    Example: ``read_range(conn, "siftstream.subscriptions.v1", {}, {0: 500, 1: 480})`` reads both
    partitions from their start.
    """
    from confluent_kafka import OFFSET_BEGINNING

    wanted = {(topic, p): (start.get(p, OFFSET_BEGINNING), o) for p, o in sorted(end.items())}
    wanted = {tp: (s, e) for tp, (s, e) in wanted.items() if e > 0 and s != e}
    if not wanted:
        return None
    consumer = Consumer(conn.confluent(**RANGE_READER, **_RANGE_FETCH))
    try:
        table = read_ranges(consumer, wanted, stall_s)
    finally:
        consumer.close()
    return table if table.num_rows else None


def partition_ends(
    conn: KafkaConnection, topics: Sequence[str], group: str = "siftstream-reader"
) -> dict[str, dict[int, int]]:
    """The current end (high watermark) of every partition of each of ``topics``; a topic that
    does not exist is left out. ``group``: the consumer's group id (nothing is committed).

    Example: ``partition_ends(conn, ["siftstream.subscriptions.v1"])`` gives
    ``{"siftstream.subscriptions.v1": {0: 5012, 1: 4988}}``.
    """
    consumer = Consumer(conn.confluent(**{"group.id": group, "enable.auto.commit": False}))
    try:
        out: dict[str, dict[int, int]] = {}
        for topic in topics:
            meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
            if meta is None or meta.error is not None:
                continue
            out[topic] = {p: watermarks(consumer, topic, p)[1] for p in sorted(meta.partitions)}
        return out
    finally:
        consumer.close()


def end_offsets(conn: KafkaConnection, topics: list[str]) -> str:
    """The current end of every partition of ``topics``, as Spark's ``startingOffsets`` JSON."""
    import json

    ends = partition_ends(conn, topics)
    missing = [t for t in topics if t not in ends]
    if missing:
        raise RuntimeError(f"topics {missing} do not exist")
    return json.dumps({t: {str(p): o for p, o in parts.items()} for t, parts in ends.items()})


def summarize_dead_letters(records: list[KafkaRecord]) -> dict[str, Any]:
    """Counts by error class, with one example reason each."""
    by_code: Counter[str] = Counter()
    examples: dict[str, str] = {}
    keys = set()
    for r in records:
        assert r.value is not None
        by_code[r.value["error_code"]] += 1
        examples.setdefault(r.value["error_code"], r.value["reason"])
        keys.add(r.value["dead_letter_id"])
    return {
        "total": len(records),
        "distinct": len(keys),
        "by_code": {c: {"count": n, "example": examples[c]} for c, n in by_code.most_common()},
    }
