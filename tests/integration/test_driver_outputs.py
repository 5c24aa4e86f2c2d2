"""streaming.driver_batch.DriverBatch's outputs sent from the driver (``driver_producer``: the QoS,
routes and composites jobs) land as a Spark write lands them: the same keys and values, each key
on the partition Spark's Kafka sink picks (Java's murmur2 partitioner), in the order sent."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from infra.connection import KafkaConnection
from infra.topics import ensure_topics
from schemas.topics import COMPOSITES_TOPIC, TOPICS
from streaming.driver_batch import BatchStats, DriverBatch
from streaming.readers import watermarks


class Writer(DriverBatch):
    job = "writer"

    def new_state(self) -> None:
        pass

    def load_state(self, blob: bytes) -> None:
        pass

    def dump_state(self) -> bytes:
        return b""

    def step(self, tables: dict[str, Any], stats: BatchStats) -> list[tuple[str, bytes, bytes]]:
        return []


def _records(conn: KafkaConnection, topic: str) -> dict[int, list[tuple[bytes, bytes]]]:
    """Every record of ``topic``: per partition, (key, value) in offset order."""
    consumer = Consumer(conn.confluent(**{"group.id": f"t{uuid.uuid4().hex}", "enable.auto.commit": False}))
    try:
        out: dict[int, list[tuple[bytes, bytes]]] = {}
        for p in range(TOPICS[COMPOSITES_TOPIC].partitions):
            low, high = watermarks(consumer, topic, p)
            consumer.assign([TopicPartition(topic, p, low)])
            rows: list[tuple[bytes, bytes]] = []
            while len(rows) < high - low:
                for msg in consumer.consume(1000, 1.0):
                    assert msg.error() is None, msg.error()
                    rows.append((msg.key(), msg.value()))
            out[p] = rows
        return out
    finally:
        consumer.close()


def test_outputs_sent_from_the_driver_land_where_a_spark_write_puts_them(
    spark: Any, kafka_conn: KafkaConnection, tmp_path: Path
) -> None:
    sent, written = f"a{uuid.uuid4().hex[:8]}.", f"b{uuid.uuid4().hex[:8]}."
    ensure_topics(kafka_conn, sent)
    ensure_topics(kafka_conn, written)
    # 300 records, 120 keys (a key's later records must stay after its earlier ones)
    rows = [(f"detection-{i % 120}".encode(), f"value {i}".encode() * (1 + i % 7)) for i in range(300)]
    by_driver = Writer(spark, kafka_conn, {}, tmp_path / "a", sent)
    by_driver._produce([(sent + COMPOSITES_TOPIC, k, v) for k, v in rows])
    by_spark = Writer(spark, kafka_conn, {}, tmp_path / "b", written)
    frame = by_spark._frame([], [(written + COMPOSITES_TOPIC, k, v) for k, v in rows])
    frame.write.format("kafka").options(**kafka_conn.spark_options()).save()

    got, want = _records(kafka_conn, sent + COMPOSITES_TOPIC), _records(kafka_conn, written + COMPOSITES_TOPIC)
    assert all(want.values()), "every partition holds records: the partitioner is put to the test"
    assert got == want
    assert sorted(r for part in got.values() for r in part) == sorted(rows)


class Reader(Writer):
    """Collects each batch both ways: read on the driver by offset range, and the streaming batch."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.seen: list[tuple[Any, Any]] = []

    def __call__(self, batch: Any, batch_id: int) -> None:
        from streaming.driver_batch import _RAW_EXPRS

        self.seen.append((self._consume(batch_id), batch.selectExpr(*_RAW_EXPRS).toArrow()))


def test_a_batch_read_by_its_offset_range_is_the_streaming_batch(
    spark: Any, kafka_conn: KafkaConnection, tmp_path: Path
) -> None:
    """``DriverBatch._consume`` (the QoS, routes and composites jobs' read) gives each micro-batch's
    records as the streaming batch holds them: the same rows (null keys, tombstones and the
    record timestamps included), from the earliest offset in the first batch, across batches
    that ``maxOffsetsPerTrigger`` splits."""
    from producers.kafka_writer import KafkaWriter
    from schemas.topics import EVENTS_TOPIC, SUBSCRIPTIONS_TOPIC

    prefix = f"r{uuid.uuid4().hex[:8]}."
    ensure_topics(kafka_conn, prefix)
    writer = KafkaWriter(kafka_conn)
    for i in range(150):
        writer.send(prefix + EVENTS_TOPIC, None if i % 10 == 0 else f"p{i % 7}", f"event {i}".encode())
    for i in range(40):
        writer.send(prefix + SUBSCRIPTIONS_TOPIC, f"s{i % 15}", None if i % 4 == 3 else f"sub {i}".encode())
    assert writer.flush(60).failed == 0
    names = {EVENTS_TOPIC: prefix + EVENTS_TOPIC, SUBSCRIPTIONS_TOPIC: prefix + SUBSCRIPTIONS_TOPIC}
    reader = Reader(spark, kafka_conn, names, tmp_path / "state", prefix)
    reader.start(tmp_path / "query", True, "1 second", 50).awaitTermination(300)
    assert len(reader.seen) >= 4  # 190 records, at most 50 a batch

    def rows(table: Any) -> list[tuple[Any, ...]]:
        return sorted(zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True))

    for got, want in reader.seen:
        assert got is not None and got.schema == want.schema
        assert rows(got) == rows(want)
    everything = [r for got, _ in reader.seen for r in rows(got)]
    assert len(everything) == len(set(everything)) == 190
    assert any(r[4] is None for r in everything) and any(r[5] is None for r in everything)
