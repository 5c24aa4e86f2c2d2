"""The controller quorum loses one member: kill -9 a voter that is not the active controller.

With three voters, two are a majority: the cluster must keep its active controller, accept
``acks=all`` writes to topics with 3 replicas (``min.insync.replicas`` 2) and metadata changes (a
new topic, a changed topic configuration), and take the node back on its own data. The node is
found and brought back the way an operator would: ``siftstream infra status --json`` for its pid,
``siftstream infra up --brokers 3`` to restart it (docs/guide/faults.md). The test prints what it
injected and what it counted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from infra import kafka
from infra.connection import KafkaConnection
from infra.kafka import KafkaClusterConfig
from producers.kafka_writer import KafkaWriter

pytestmark = [pytest.mark.faults, pytest.mark.timeout(240)]


def cli(cluster: KafkaClusterConfig, *args: str) -> subprocess.CompletedProcess[str]:
    where = ["--home", str(cluster.home.parent), "--port", str(cluster.port)]
    where += ["--controller-port", str(cluster.controller_port)]
    done = subprocess.run(
        [sys.executable, "-m", "streaming.cli", "infra", *args, *where],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def status(cluster: KafkaClusterConfig) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(cli(cluster, "status", "--json").stdout)
    return doc


def write(conn: KafkaConnection, topic: str, n: int, tag: str) -> int:
    writer = KafkaWriter(conn)
    for i in range(n):
        writer.send(topic, f"{tag}-{i}", f"{tag}-{i}".encode())
    report = writer.flush(60)
    assert report.failed == 0, report.errors
    return report.delivered


def in_sync(admin: AdminClient, topics: list[str]) -> bool:
    meta = admin.list_topics(timeout=10).topics
    return all(len(p.isrs) == len(p.replicas) for t in topics if t in meta for p in meta[t].partitions.values())


def fresh_admin(conn: KafkaConnection) -> AdminClient:
    """An admin client that refreshes its metadata every second. A KRaft broker names a live broker
    as the "controller" that admin requests go to, and librdkafka keeps the one it learnt (for five
    minutes by default): named before the kill, it can be the killed node, and every request then
    waits for it ("Failed while waiting for controller")."""
    return AdminClient(conn.confluent(**{"topic.metadata.refresh.interval.ms": 1000}))


def create_topic_retrying(conn: KafkaConnection, topic: NewTopic, within_s: float) -> int:
    """Create ``topic``, retrying a request that timed out (a controller request can time out
    while the quorum notices the lost voter; Kafka's own clients retry it too) with a new admin
    client each time (:func:`fresh_admin`) until ``within_s``; a retry that finds the topic made by
    the timed-out request counts as done. Returns the retries."""
    deadline, retries = time.monotonic() + within_s, 0
    while True:
        admin = fresh_admin(conn)
        try:
            for fut in admin.create_topics([topic], request_timeout=30).values():
                fut.result(35)
            return retries
        except KafkaException as exc:
            code = exc.args[0].code() if exc.args and isinstance(exc.args[0], KafkaError) else None
            if code == KafkaError.TOPIC_ALREADY_EXISTS and retries:
                return retries
            if code not in (KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT) or time.monotonic() > deadline:
                raise
            retries += 1


def test_the_cluster_keeps_working_without_one_controller_voter(
    kafka_cluster: tuple[KafkaConnection, KafkaClusterConfig],
) -> None:
    conn, cluster = kafka_cluster
    admin = AdminClient(conn.confluent())
    before = status(cluster)
    assert [b["node_id"] for b in before["brokers"]] == [1, 2, 3] and all(b["listening"] for b in before["brokers"])
    leader = before["active_controller"]
    assert leader in (1, 2, 3)
    victim = next(b for b in before["brokers"] if b["node_id"] != leader)

    topic = f"q{uuid.uuid4().hex[:8]}.writes"
    for fut in admin.create_topics([NewTopic(topic, 2, 3)], request_timeout=30).values():
        fut.result(30)
    written = write(conn, topic, 500, "before")

    os.kill(victim["pid"], signal.SIGKILL)
    killed_at = time.monotonic()
    while kafka.port_open(victim["port"]):
        time.sleep(0.1)
    during = status(cluster)
    assert [b["pid"] is None for b in during["brokers"]] == [
        b["node_id"] == victim["node_id"] for b in before["brokers"]
    ]

    written += write(conn, topic, 500, "down")  # acks=all: the two live replicas are a quorum of the ISR
    # metadata changes go through the controller quorum: a new topic (2 replicas: only two nodes
    # live) and a topic configuration change
    created = f"q{uuid.uuid4().hex[:8]}.created"
    injected_retries = create_topic_retrying(conn, NewTopic(created, 1, 2), within_s=180.0)
    admin = fresh_admin(conn)
    resource = ConfigResource(
        "topic",
        topic,
        incremental_configs=[ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)],
    )
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(30)
    check = ConfigResource("topic", topic)
    assert admin.describe_configs([check])[check].result()["retention.ms"].value == "3600000"
    assert created in admin.list_topics(timeout=10).topics
    written += write(conn, created, 200, "new")
    leader_while_down = kafka.quorum_leader(cluster)
    assert leader_while_down is not None and leader_while_down != victim["node_id"]

    up = cli(cluster, "up", "--brokers", "3").stdout
    down_s = time.monotonic() - killed_at
    after = status(cluster)
    assert all(b["pid"] is not None and b["listening"] for b in after["brokers"])
    restarted = [b["node_id"] for a, b in zip(before["brokers"], after["brokers"], strict=True) if a["pid"] != b["pid"]]
    assert restarted == [victim["node_id"]], up
    deadline = time.monotonic() + 90
    while not in_sync(admin, [topic]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert in_sync(admin, [topic]), "the restarted node did not rejoin the ISR"
    written += write(conn, topic, 500, "after")
    ends = sum(records_in(conn, topic, p) for p in admin.list_topics(timeout=10).topics[topic].partitions) + records_in(
        conn, created, 0
    )
    print(
        f"\ninjected: kill -9 of node {victim['node_id']} (pid {victim['pid']}), a controller voter, not the active "
        f"controller (node {leader}); down {down_s:.1f} s; restarted by 'siftstream infra up --brokers 3'"
        f"\ncounted: {written} records acknowledged (acks=all) before, during and after; {ends} in the topics; "
        f"while down: topic {created} created ({injected_retries} timed-out tries retried), "
        f"retention.ms of {topic} changed, active controller node "
        f"{leader_while_down}; after: every partition of {topic} back in sync on 3 replicas"
    )
    assert ends == written


def records_in(conn: KafkaConnection, topic: str, partition: int) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(conn.confluent(**{"group.id": "quorum-test", "enable.auto.commit": False}))
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return int(high - low)
    finally:
        consumer.close()
