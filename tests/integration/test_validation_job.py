"""The validation job end to end: real broker, Spark's Kafka source and sink, restarts."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from infra.connection import KafkaConnection, arrived
from producers.kafka_writer import KafkaWriter
from producers.produce import ProduceConfig, produce_events
from schemas.codec import codec_for
from schemas.topics import TOPICS
from streaming.readers import read_topic
from streaming.validation_job import ValidationConfig, read_stats, run

pytestmark = pytest.mark.kafka


def _side_inputs(conn: KafkaConnection, prefix: str, seed: int) -> tuple[Counter[str], Counter[str]]:
    """Good and bad records on the other input topics; returns (accepted per topic, errors per code)."""
    rng = random.Random(seed)
    writer = KafkaWriter(conn)
    ok: Counter[str] = Counter()
    bad: Counter[str] = Counter()
    link, sub = codec_for("LinkSample"), codec_for("Subscription")
    for i in range(200):
        delay = -1.0 if i % 40 == 0 else rng.random() * 10
        writer.send(
            prefix + "siftstream.telemetry.links.v1",
            "b1->b2",
            link.encode({"from": "b1", "to": "b2", "seq": i, "sent_at": i, "delay_ms": delay}),
        )
        (bad.update(["invalid_value"]) if delay < 0 else ok.update(["siftstream.telemetry.links.v1"]))
    for i in range(30):
        missing = i % 10 == 0
        record = {
            "type": "subscribe",
            "subscription_id": f"s{i}",
            "subscriber_id": None if missing else "u1",
            "filter": f"price < {i}",
        }
        writer.send(prefix + "siftstream.subscriptions.v1", f"s{i}", sub.encode(record))
        (bad.update(["invalid_value"]) if missing else ok.update(["siftstream.subscriptions.v1"]))
    writer.send(prefix + "siftstream.subscriptions.v1", "s1", None)  # tombstone: a valid deletion
    ok.update(["siftstream.subscriptions.v1"])
    writer.send(prefix + "siftstream.receipts.v1", "u1", b"\x00\x01garbage")
    bad.update(["bad_framing"])
    report = writer.flush()
    assert report.failed == 0, report.errors
    return ok, bad


def _dead_letters(conn: KafkaConnection, prefix: str) -> list[dict]:
    return [r.value for r in read_topic(conn, prefix + TOPICS["siftstream.deadletter.v1"].name, "DeadLetter")]


def test_every_good_record_accepted_and_every_bad_one_dead_lettered_across_a_restart(
    spark, kafka_conn: KafkaConnection, topic_prefix: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    events = topic_prefix + "siftstream.events.v1"
    cfg = ValidationConfig(
        conn=kafka_conn,
        checkpoint=tmp_path / "ckpt",
        topic_prefix=topic_prefix,
        available_now=True,
        stats_file=tmp_path / "stats.jsonl",
    )

    # first run: events with every fault kind, plus good and bad records on other input topics
    first = produce_events(kafka_conn, ProduceConfig(events, 3000, bad_fraction=0.1, seed=1, progress=False))
    side_ok, side_bad = _side_inputs(kafka_conn, topic_prefix, 1)
    run(spark, cfg, quiet=True)
    letters = _dead_letters(kafka_conn, topic_prefix)
    expected_bad = first.expected_errors + side_bad
    assert Counter(d["error_code"] for d in letters) == expected_bad
    stats = read_stats(cfg.stats_file)
    assert stats[f"ok|{events}"] == first.good
    for topic, n in side_ok.items():
        assert stats[f"ok|{topic_prefix}{topic}"] == n

    # every dead letter carries its source coordinates and the exact raw bytes
    produced = _raw(kafka_conn, events)
    for d in letters:
        if d["source_topic"] == events:
            assert d["value"] == produced[(d["source_partition"], d["source_offset"])]
            assert d["reason"]

    # restart on the same checkpoint with new input: nothing lost, nothing duplicated
    second = produce_events(kafka_conn, ProduceConfig(events, 2000, bad_fraction=0.05, seed=2, progress=False))
    run(spark, cfg, quiet=True)
    letters = _dead_letters(kafka_conn, topic_prefix)
    keys = [d["dead_letter_id"] for d in letters]
    assert len(keys) == len(set(keys)), "a restart duplicated dead letters"
    assert Counter(d["error_code"] for d in letters) == expected_bad + second.expected_errors
    assert read_stats(cfg.stats_file)[f"ok|{events}"] == first.good + second.good


def _raw(conn: KafkaConnection, topic: str) -> dict[tuple[int, int], bytes | None]:
    """Raw values of a topic by (partition, offset): bad ones cannot be decoded, so no codec here."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(conn.confluent(**{"group.id": "raw-reader", "enable.auto.commit": False}))
    try:
        out: dict[tuple[int, int], bytes | None] = {}
        for p in (0, 1):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            consumer.assign([TopicPartition(topic, p, low)])
            while sum(1 for (q, _) in out if q == p) < high - low:
                for msg in arrived(consumer, 5000, 2.0):
                    out[(msg.partition(), msg.offset())] = msg.value()
        return out
    finally:
        consumer.close()
