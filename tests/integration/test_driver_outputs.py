"""Rows sent by the project's own producer (``KafkaWriter.like_spark``) land as a Spark write lands
them: the same keys and values, each key on the partition Spark's Kafka sink picks (Java's murmur2
partitioner), in the order sent. Two senders use it: ``streaming.driver_batch.DriverBatch``'s
``driver_producer`` (the QoS, routes and composites jobs' outputs, from the driver) and the
matching job's Python workers (``streaming.arrow_matching.write_batches``). A row the broker
refuses fails the write, and the writer goes on with a fresh producer."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from infra.connection import KafkaConnection, arrived
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
                for msg in arrived(consumer, 1000, 1.0):
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
        from streaming.driver_batch import RAW_EXPRS

        self.seen.append((self._consume(batch_id), batch.selectExpr(*RAW_EXPRS).toArrow()))


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


def test_the_matching_workers_send_what_the_kafka_sink_would_write(
    spark: Any, kafka_conn: KafkaConnection, tmp_path: Path
) -> None:
    """``write_batches`` (the worker sends, the ``noop`` sink drives the tasks) against
    ``match_batches``'s rows through Spark's Kafka sink: the same records on the same partitions of
    the matches and dead-letter topics, in the same order per key."""
    import functools
    from types import SimpleNamespace

    from producers.events import EventGenerator
    from routing.matching.table import SubscriptionTable
    from schemas.codec import codec_for
    from schemas.match_records import OUTPUT_SCHEMA, Targets
    from schemas.topics import DEADLETTER_TOPIC, MATCHES_TOPIC
    from streaming.arrow_matching import INPUT_COLUMNS, ShipState, match_batches, write_batches

    codec = codec_for("Event")
    events = EventGenerator(publishers=4, seed=11).batch(400, 1_700_000_000_000)
    values = [codec.encode(e) for e in events] + [b"\x00not an event"] * 5
    frame = (
        spark.createDataFrame(
            [(f"k{i}".encode(), v, i % 3, i, None) for i, v in enumerate(values)],
            "key binary, value binary, partition int, offset long, timestamp timestamp",
        )
        .select(*INPUT_COLUMNS)
        .repartition(3)
    )
    table = SubscriptionTable()
    table.apply([(f"s{i}", f"price < {20 * i}") for i in range(1, 30)] + [("sym", "symbol = 'IBM'")])
    ship = ShipState(f"w{uuid.uuid4().hex}", "match", 0, SimpleNamespace(value={}), table.deltas(), table.version)

    def targets(prefix: str) -> Targets:
        ensure_topics(kafka_conn, prefix)
        return Targets("events", prefix + MATCHES_TOPIC, prefix + DEADLETTER_TOPIC)  # dead letters name it

    sent, written = targets(f"w{uuid.uuid4().hex[:8]}."), targets(f"s{uuid.uuid4().hex[:8]}.")
    body = functools.partial(write_batches, kafka_conn, ship, sent)
    frame.mapInArrow(body, OUTPUT_SCHEMA).write.format("noop").mode("overwrite").save()
    rows = frame.mapInArrow(functools.partial(match_batches, ship, written), OUTPUT_SCHEMA)
    rows.write.format("kafka").options(**kafka_conn.spark_options()).save()

    for got_topic, want_topic, n in ((sent.matches_topic, written.matches_topic, 400),
                                     (sent.deadletter_topic, written.deadletter_topic, 5)):  # fmt: skip
        got, want = _records(kafka_conn, got_topic), _records(kafka_conn, want_topic)
        assert {p: sorted(r) for p, r in got.items()} == {p: sorted(r) for p, r in want.items()}
        assert sum(map(len, got.values())) == n


def test_a_row_the_broker_refuses_fails_the_write_and_the_writer_goes_on(kafka_conn: KafkaConnection) -> None:
    import os

    from confluent_kafka.admin import AdminClient, NewTopic

    from producers.kafka_writer import KafkaWriter

    topic = f"small{uuid.uuid4().hex[:8]}"
    admin = AdminClient(kafka_conn.confluent())
    admin.create_topics([NewTopic(topic, 1, 1, config={"max.message.bytes": "2000"})])[topic].result(30)
    writer = KafkaWriter.like_spark(kafka_conn)
    too_big = os.urandom(20_000)  # random bytes: lz4 cannot shrink them under the topic's limit
    try:
        writer.write_rows([(topic, b"a", b"fits"), (topic, b"b", too_big)], "test")
    except RuntimeError as e:
        assert "records not written" in str(e) and "too large" in str(e)  # the batch holding it
    else:
        raise AssertionError("the refused row did not fail the write")
    writer.write_rows([(topic, b"c", b"fits too")], "test")  # a fresh producer: the next batch goes through
    consumer = Consumer(kafka_conn.confluent(**{"group.id": f"t{uuid.uuid4().hex}", "enable.auto.commit": False}))
    try:
        assert watermarks(consumer, topic, 0)[1] >= 1  # at least the row after the failure
    finally:
        consumer.close()
