"""The broker, topic provisioning and the producer CLI against the real broker."""

from __future__ import annotations

import contextlib
import subprocess
import sys

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from infra.connection import KafkaConnection, arrived
from infra.topics import ensure_topics
from schemas.topics import TOPICS
from streaming.readers import read_topic

pytestmark = pytest.mark.kafka


def test_topics_are_created_once_with_their_declared_layout(kafka_conn: KafkaConnection) -> None:
    prefix = "infra-test."
    first = ensure_topics(kafka_conn, prefix)
    again = ensure_topics(kafka_conn, prefix)
    assert sum(line.startswith("created") for line in first) == len(TOPICS)
    assert all(line.startswith("exists") for line in again)
    admin = AdminClient(kafka_conn.confluent())
    meta = admin.list_topics(timeout=10).topics
    for spec in TOPICS.values():
        assert len(meta[prefix + spec.name].partitions) == spec.partitions
    resources = [ConfigResource("topic", prefix + t) for t in ("siftstream.subscriptions.v1", "siftstream.events.v1")]
    configs = {r.name: f.result() for r, f in admin.describe_configs(resources).items()}
    assert configs[prefix + "siftstream.subscriptions.v1"]["cleanup.policy"].value == "compact"
    assert configs[prefix + "siftstream.events.v1"]["cleanup.policy"].value == "delete"


def test_produce_command_delivers_and_reports(kafka_conn: KafkaConnection, topic_prefix: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "streaming.cli",
            "produce",
            "events",
            "--count",
            "2500",
            "--rate",
            "5000",
            "--bootstrap-servers",
            kafka_conn.bootstrap_servers,
            "--topic-prefix",
            topic_prefix,
            "--quiet",
            "--seed",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "2500 of 2500 records delivered" in done.stdout
    records = read_topic(kafka_conn, topic_prefix + "siftstream.events.v1", "Event")
    assert len(records) == 2500
    assert len({r.value["event_id"] for r in records if r.value}) == 2500
    assert {r.key.decode() for r in records} == {f"p{i}" for i in range(8)}


def test_producer_reports_failures_instead_of_dropping_them(kafka_conn: KafkaConnection) -> None:
    from producers.kafka_writer import KafkaWriter

    writer = KafkaWriter(kafka_conn, **{"message.timeout.ms": 3000})
    for i in range(5):
        writer.send("siftstream.no-such-topic-and-auto-create-is-off", str(i), b"x")
    report = writer.flush(30)
    assert report.delivered == 0 and report.failed == 5
    assert report.errors


def test_a_preset_writes_subscriptions_and_events_to_kafka(kafka_conn: KafkaConnection, topic_prefix: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "streaming.cli",
            "produce",
            "gryphon",
            "--count",
            "3000",
            "--param",
            "brokers=2",
            "--bootstrap-servers",
            kafka_conn.bootstrap_servers,
            "--topic-prefix",
            topic_prefix,
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    subs = read_topic(kafka_conn, topic_prefix + "siftstream.subscriptions.v1", "Subscription")
    events = read_topic(kafka_conn, topic_prefix + "siftstream.events.v1", "Event")
    assert len(subs) == 2 * 25 * 5 and len(events) == 3000
    assert {r.key.decode() for r in subs} == {r.value["subscription_id"] for r in subs}
    assert all(len(r.value["attributes"]) == 15 for r in events)


def test_parallel_producer_workers_write_disjoint_events(kafka_conn: KafkaConnection, topic_prefix: str) -> None:
    from producers.produce import ProduceConfig, produce_events

    topic = topic_prefix + "siftstream.events.v1"
    result = produce_events(kafka_conn, ProduceConfig(topic, 3001, bad_fraction=0.1, seed=2, progress=False, workers=2))
    assert result.report.delivered == 3001 and result.report.failed == 0
    assert result.good + sum(result.faults.values()) == 3001
    # the good events (bad ones do not decode) carry distinct ids across the two workers
    from confluent_kafka import Consumer, TopicPartition

    from schemas.codec import DecodeError, decode

    consumer = Consumer(kafka_conn.confluent(**{"group.id": "w", "enable.auto.commit": False}))
    consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
    ids, seen = [], 0
    while seen < 3001:
        for msg in arrived(consumer, 1000, 2.0):
            seen += 1
            with contextlib.suppress(DecodeError):  # deliberately undecodable records
                ids.append(decode(msg.value(), "Event")[1]["event_id"])
    consumer.close()
    ids = [i for i in ids if i]  # the empty_event_id fault
    assert len(ids) == len(set(ids)) >= result.good


def test_a_throwaway_broker_removes_its_data(jars, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """``broker_or`` without a home starts a broker in a temporary folder and deletes the folder
    with its data when it stops (benchmarks write gigabytes); a given home is kept."""
    import tempfile

    from infra import kafka

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with kafka.broker_or(None, jars) as conn:
        ensure_topics(conn, "gone.")
        (folder,) = tmp_path.glob("siftstream-kafka-*")
        assert (folder / "data").is_dir()
    assert not folder.exists()
    home = tmp_path / "kept"
    with kafka.broker_or(None, jars, home=home):
        pass
    assert (home / "data").is_dir()
