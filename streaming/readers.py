"""Read a topic from the beginning to its current end and decode it (CLI summaries, tests)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from infra.connection import KafkaConnection, arrived
from schemas.codec import DecodeError, decode

__all__ = ["DecodeError", "KafkaRecord", "end_offsets", "read_topic", "summarize_dead_letters", "watermarks"]


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


def end_offsets(conn: KafkaConnection, topics: list[str]) -> str:
    """The current end of every partition of ``topics``, as Spark's ``startingOffsets`` JSON."""
    import json

    consumer = Consumer(conn.confluent(**{"group.id": "siftstream-reader", "enable.auto.commit": False}))
    try:
        out: dict[str, dict[str, int]] = {}
        for topic in topics:
            meta = consumer.list_topics(topic, timeout=10).topics[topic]
            out[topic] = {str(p): watermarks(consumer, topic, p)[1] for p in meta.partitions}
        return json.dumps(out)
    finally:
        consumer.close()


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
