"""Kill -9 one broker of three while the matching job runs and events are published; bring it back.

Invariants (issue 25's first fault test; docs/guide/faults.md): every published event has its
``Match`` record; no event is matched twice with different content; duplicates in the output are
only identical records under the same key (``event_id``); each record names the subscriptions
that the oracle (``BruteForceIndex`` over the same filters) finds. The events topic itself holds
each event once (the idempotent ``acks=all`` producer does not duplicate across the failover).
The test prints what it injected and what it counted.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from infra import kafka
from infra.connection import KafkaConnection
from infra.kafka import KafkaClusterConfig
from infra.topics import ensure_topics
from producers.events import EventGenerator
from producers.kafka_writer import KafkaWriter
from schemas.codec import codec_for
from schemas.topics import EVENTS_TOPIC, MATCHES_TOPIC, SUBSCRIPTIONS_TOPIC
from streaming.matching_job import MatchingConfig, build_query
from streaming.readers import read_topic
from tests.faults.conftest import expected_matches

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

FILTERS = {
    "s0": "symbol = 'IBM'",
    "s1": "price < 120 and urgent = true",
    "s2": "sector in ('tech', 'retail') and volume >= 2000",
    "s3": "region exists",
    "s4": "exchange = 'NYSE' and sector != 'energy'",
    **{f"r{i}": f"price between {50 * i} and {50 * i + 120}" for i in range(8)},
}
PHASES = (("before", 1200), ("down", 1200), ("after", 1200))  # events published in each phase


class Publisher(threading.Thread):
    """Publishes each phase's events in slices of 100 every 0.2 s; waits for ``go[phase]`` first."""

    def __init__(self, conn: KafkaConnection, topic: str) -> None:
        super().__init__(daemon=True)
        self.writer = KafkaWriter(conn)
        self.topic = topic
        self.go = {name: threading.Event() for name, _ in PHASES}
        self.done = {name: threading.Event() for name, _ in PHASES}
        self.events: list[dict[str, Any]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            codec, gen, t0 = codec_for("Event"), EventGenerator(publishers=4, seed=25), 1_700_000_000_000
            for name, n in PHASES:
                self.go[name].wait()
                batch = gen.batch(n, t0 + len(self.events))
                for i, event in enumerate(batch):
                    event["event_id"] = f"{name}-{i}"
                    self.writer.send(self.topic, event["publisher_id"], codec.encode(event))
                    if i % 100 == 99:
                        self.writer.poll()
                        time.sleep(0.2)
                self.events += batch
                self.done[name].set()
        except BaseException as exc:  # reported by the test
            self.error = exc
            for ev in self.done.values():
                ev.set()


def _leader(conn: KafkaConnection, topic: str, partition: int) -> int:
    meta = AdminClient(conn.confluent()).list_topics(topic, timeout=10).topics[topic]
    return int(meta.partitions[partition].leader)


def _wait(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_matching_survives_a_broker_killed_mid_run(
    spark,  # type: ignore[no-untyped-def]
    jars,
    kafka_cluster: tuple[KafkaConnection, KafkaClusterConfig],
    tmp_path: Path,
) -> None:
    conn, cluster = kafka_cluster
    prefix = f"f{uuid.uuid4().hex[:8]}."
    ensure_topics(conn, prefix)
    events_topic = prefix + EVENTS_TOPIC
    admin = AdminClient(conn.confluent())
    layout = admin.list_topics(events_topic, timeout=10).topics[events_topic].partitions
    assert all(len(p.replicas) == 3 for p in layout.values())
    resource = ConfigResource("topic", events_topic)
    assert admin.describe_configs([resource])[resource].result()["min.insync.replicas"].value == "2"

    sub_codec, writer = codec_for("Subscription"), KafkaWriter(conn)
    for sid, filt in FILTERS.items():
        record = {"type": "subscribe", "subscription_id": sid, "subscriber_id": "u1", "filter": filt}
        writer.send(prefix + SUBSCRIPTIONS_TOPIC, sid, sub_codec.encode(record))
    assert writer.flush().failed == 0

    cfg = MatchingConfig(
        conn=conn,
        checkpoint=tmp_path / "ckpt",
        topic_prefix=prefix,
        max_offsets_per_trigger=400,
        trigger_interval="0 seconds",
        deliver=False,
    )
    publisher = Publisher(conn, events_topic)
    publisher.start()
    query, handler = build_query(spark, cfg, quiet=True)
    injected: dict[str, Any] = {}
    try:
        # events only once the table holds every subscription: maxOffsetsPerTrigger spreads the
        # subscription records over several batches, and an event is matched against the table of
        # its own batch (the job's order), not against subscriptions of later batches
        _wait(lambda: any(b.subscriptions == len(FILTERS) for b in handler.history), 120, "every subscription")
        publisher.go["before"].set()
        # kill only once the job is really running: a batch with events is done
        _wait(lambda: any(b.events for b in handler.history), 120, "the matching job's first batch")
        victim = _leader(conn, events_topic, 0)
        injected["node"], injected["was_active_controller"] = victim, kafka.quorum_leader(cluster) == victim
        injected["batches_before"] = len(handler.history)
        injected["pid"] = kafka.kill_node(cluster, victim)
        killed_at = time.monotonic()
        publisher.go["down"].set()
        publisher.done["down"].wait(120)
        # stay down past the controller's fencing of the node (broker.session.timeout.ms, 6 s)
        time.sleep(max(0.0, 8.0 - (time.monotonic() - killed_at)))
        injected["batches_while_down"] = len(handler.history) - injected["batches_before"]
        kafka.cluster_up(cluster, jars)
        injected["down_s"] = round(time.monotonic() - killed_at, 1)
        publisher.go["after"].set()
        publisher.join(180)
        assert publisher.error is None, publisher.error
        report = publisher.writer.flush(60)
        assert report.failed == 0, report.errors
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        for ev in publisher.go.values():
            ev.set()
        query.stop()

    published = {e["event_id"]: e for e in publisher.events}
    in_topic = Counter(r.value["event_id"] for r in read_topic(conn, events_topic, "Event", timeout_s=60))  # type: ignore[index]
    matches: dict[str, list[dict[str, Any]]] = {}
    for r in read_topic(conn, prefix + MATCHES_TOPIC, "Match", timeout_s=60):
        assert r.value is not None and r.key == r.value["event_id"].encode()
        matches.setdefault(r.value["event_id"], []).append(r.value)
    want = expected_matches(FILTERS, published)

    records = sum(len(v) for v in matches.values())
    print(
        f"\ninjected: kill -9 of node {injected['node']} (pid {injected['pid']}, leader of {events_topic}[0], "
        f"active controller: {injected['was_active_controller']}) after {injected['batches_before']} batches; "
        f"down {injected['down_s']} s ({injected['batches_while_down']} batches ran meanwhile), then restarted"
        f"\ncounted: {len(published)} events published and acknowledged, {sum(in_topic.values())} records in the "
        f"events topic ({len(in_topic)} distinct); {records} Match records for {len(matches)} events "
        f"({records - len(matches)} identical duplicates); {len(handler.history)} batches"
    )
    assert set(in_topic) == set(published) and all(n == 1 for n in in_topic.values())
    assert set(matches) == set(published), f"lost: {sorted(set(published) - set(matches))[:10]}"
    for eid, recs in matches.items():
        assert all(r == recs[0] for r in recs), f"differing duplicates for {eid}"
        assert recs[0]["subscription_ids"] == want[eid], (eid, recs[0]["subscription_ids"], want[eid])
    assert sum(len(ids) for ids in want.values()) > len(published)  # the filters are not trivial
