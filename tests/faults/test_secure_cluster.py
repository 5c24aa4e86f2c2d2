"""The secured 3-node cluster (``siftstream infra up --secure --brokers 3``): TLS and SASL/SCRAM
between every client and the brokers and between the brokers, ACLs per role, replication factor 3
with ``min.insync.replicas`` 2, and a node killed with kill -9 while a publisher writes.

The cluster is started, inspected and restarted through the CLI, as an operator would
(docs/guide/security.md, docs/guide/faults.md); every client reaches it through a role's
``--kafka-config`` profile. Each refusal has a twin that is allowed, so that a broken setup (where
nothing works) fails the test too. The test prints what it injected and what it counted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from infra import kafka, security
from infra.connection import KafkaConnection
from infra.topics import ensure_topics
from schemas.topics import EVENTS_TOPIC, MATCHES_TOPIC

pytestmark = [pytest.mark.faults, pytest.mark.timeout(420)]

PREFIX = f"sc{uuid.uuid4().hex[:6]}."


def cli(home: Path, port: int, controller_port: int, *args: str) -> subprocess.CompletedProcess[str]:
    where = ["--home", str(home), "--port", str(port), "--controller-port", str(controller_port)]
    done = subprocess.run(
        [sys.executable, "-m", "streaming.cli", "infra", *args, "--topic-prefix", PREFIX, *where],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def secure_cluster(jars, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int, int]]:  # type: ignore[no-untyped-def]
    home = tmp_path_factory.mktemp("secure-cluster")
    base = kafka._free_run(6)
    port, controller_port = base, base + 3
    try:
        print(cli(home, port, controller_port, "up", "--secure", "--brokers", "3").stdout)
        yield home, port, controller_port
    finally:
        print(cli(home, port, controller_port, "down").stdout)


def profile(home: Path, role: str) -> Path:
    return home / "kafka-secure-cluster" / "profiles" / f"{role}.properties"


def status(home: Path, port: int, controller_port: int) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(cli(home, port, controller_port, "status", "--secure", "--json").stdout)
    return doc


def produce(conn: KafkaConnection, topic: str, keys: list[str]) -> list[KafkaError | None]:
    """Write one record per key with acks=all and an idempotent producer; the delivery errors."""
    errors: list[KafkaError | None] = []
    producer = Producer(conn.confluent(**{"acks": "all", "enable.idempotence": True, "message.timeout.ms": 60000}))
    for key in keys:
        producer.produce(topic, key.encode(), key, on_delivery=lambda err, _msg: errors.append(err))
        producer.poll(0)
    producer.flush(90)
    assert len(errors) == len(keys), f"{len(errors)} delivery reports for {len(keys)} records"
    return errors


def read_all(conn: KafkaConnection, topic: str, want: int) -> tuple[list[bytes], KafkaError | None]:
    """Every value of ``topic``'s partitions from the start (until ``want`` or 30 s), or the first
    error; in the readers' group ``siftstream-reader``, which the jobs' role may use."""
    errors: list[KafkaError] = []
    consumer = Consumer(
        conn.confluent(**{"group.id": "siftstream-reader", "enable.auto.commit": False, "error_cb": errors.append})
    )
    meta = consumer.list_topics(topic, timeout=15).topics[topic]
    if meta.error is not None:
        consumer.close()
        return [], meta.error
    consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(values) < want and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if errors:
                return values, errors[0]
            if msg is None:
                continue
            if msg.error() is not None:
                return values, msg.error()
            values.append(msg.value())
    finally:
        consumer.close()
    return values, None


def test_secured_cluster_survives_a_node_kill_and_keeps_its_acls(secure_cluster) -> None:  # type: ignore[no-untyped-def]
    home, port, controller_port = secure_cluster
    nodes = status(home, port, controller_port)
    assert [b["node_id"] for b in nodes["brokers"]] == [1, 2, 3] and all(b["pid"] for b in nodes["brokers"])
    bootstrap = nodes["cluster"]["bootstrap"]
    admin = KafkaConnection.from_file(bootstrap, profile(home, security.ADMIN))
    publisher = KafkaConnection.from_file(bootstrap, profile(home, "publisher"))
    jobs = KafkaConnection.from_file(bootstrap, profile(home, "jobs"))
    ensure_topics(admin, PREFIX, replication=3)
    events = PREFIX + EVENTS_TOPIC

    # plaintext to a TLS + SASL listener gets nowhere: no metadata within the timeout
    plain = Consumer({"bootstrap.servers": bootstrap, "group.id": "plain", "socket.timeout.ms": 3000})
    try:
        with pytest.raises(KafkaException):
            plain.list_topics(events, timeout=5)
    finally:
        plain.close()

    before = [f"before-{i}" for i in range(200)]
    assert produce(publisher, events, before) == [None] * len(before)

    victim = next(b for b in nodes["brokers"] if b["node_id"] != nodes["active_controller"])
    os.kill(int(victim["pid"]), signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and kafka.port_open(int(victim["port"])):
        time.sleep(0.2)
    during = [f"during-{i}" for i in range(200)]
    errors = produce(publisher, events, during)  # two of three replicas in sync: acks=all still holds
    print(
        f"injected: kill -9 of node {victim['node_id']} (pid {victim['pid']}); acknowledged while down: "
        f"{errors.count(None)} of {len(during)}"
    )
    assert errors == [None] * len(during)

    print(cli(home, port, controller_port, "up", "--secure", "--brokers", "3").stdout)  # restarts just that node
    back = status(home, port, controller_port)
    assert all(b["pid"] for b in back["brokers"])

    values, err = read_all(jobs, events, len(before) + len(during))
    assert err is None, err
    counted = sorted(v.decode() for v in values)
    print(f"counted: {len(counted)} records read back as jobs, {len(set(counted))} distinct")
    assert counted == sorted(before + during)

    # ACLs hold on every node: a publisher writes events only and reads nothing
    assert produce(publisher, PREFIX + MATCHES_TOPIC, ["m"])[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    _, refused = read_all(publisher, events, 1)
    assert refused is not None
    assert produce(jobs, PREFIX + MATCHES_TOPIC, ["m"]) == [None]
