"""``streaming.readers.read_range`` against the real broker: the records of each partition in
``[start, end)`` as Arrow columns, what Spark's batch read by offsets gives the driver jobs."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from infra.connection import KafkaConnection
from schemas.topics import SUBSCRIPTIONS_TOPIC
from streaming.readers import read_range

pytestmark = pytest.mark.kafka

T0 = 1_767_268_800_000


def _write(conn: KafkaConnection, topic: str, per_partition: dict[int, int]) -> dict[int, list[tuple]]:
    """``per_partition[p]`` records on partition ``p`` (every fifth a tombstone); what was sent."""
    producer = Producer(conn.confluent())
    sent: dict[int, list[tuple]] = {}
    for p, n in per_partition.items():
        for i in range(n):
            key, value = f"s{p}-{i % 4}".encode(), None if i % 5 == 4 else f"v{p}-{i}".encode()
            producer.produce(topic, value=value, key=key, partition=p, timestamp=T0 + 10 * i + p)
            sent.setdefault(p, []).append((key, value, T0 + 10 * i + p))
    assert producer.flush(30) == 0
    return sent


def _rows(table) -> list[tuple]:  # type: ignore[no-untyped-def]
    cols = [table.column(c).to_pylist() for c in ("topic", "partition", "offset", "ts_ms", "key", "value")]
    return list(zip(*cols, strict=True))


def test_read_range_gives_each_partition_from_its_start_to_its_end(
    kafka_conn: KafkaConnection, topic_prefix: str
) -> None:
    topic = topic_prefix + SUBSCRIPTIONS_TOPIC
    sent = _write(kafka_conn, topic, {0: 12, 1: 9})

    whole = read_range(kafka_conn, topic, {}, {0: 12, 1: 9})
    assert whole is not None
    assert whole.schema.field("partition").type == "int32" and whole.schema.field("value").type == "binary"
    rows = sorted(_rows(whole), key=lambda r: (r[1], r[2]))
    assert rows == [(topic, p, i, ts, k, v) for p in (0, 1) for i, (k, v, ts) in enumerate(sent[p])]
    assert any(r[5] is None for r in rows)  # tombstones come through as null values

    part = read_range(kafka_conn, topic, {0: 5}, {0: 8, 1: 3})
    assert part is not None
    got = sorted((r[1], r[2]) for r in _rows(part))
    assert got == [(0, 5), (0, 6), (0, 7), (1, 0), (1, 1), (1, 2)]


def test_read_range_is_none_when_no_partition_moved(kafka_conn: KafkaConnection, topic_prefix: str) -> None:
    topic = topic_prefix + SUBSCRIPTIONS_TOPIC
    _write(kafka_conn, topic, {0: 3})
    assert read_range(kafka_conn, topic, {0: 3}, {0: 3, 1: 0}) is None
    assert read_range(kafka_conn, topic, {}, {}) is None
