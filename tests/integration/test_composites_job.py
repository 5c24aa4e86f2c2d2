"""The composites job end to end: events and composite subscriptions through the real broker and
Spark, to detections on ``siftstream.composites.v1`` and placements on ``siftstream.placements.v1``.

Events arrive out of order within the lateness bound. The job's detections must equal the
brute-force detector's over the same component matches, a bad composite and a garbage event must
reach the dead-letter topic without losing valid records, the placement must sit beside the heavy
component's publisher, and after a restart from the checkpoint the detections continue without a
duplicate or a gap.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from infra.connection import KafkaConnection
from producers.kafka_writer import KafkaWriter
from routing.composite.detection import detect_reference, detection_id
from routing.composite.trees import parse_composite
from routing.matching.language import parse_filter
from routing.monitors.composites import CompositeMonitorConfig
from schemas.codec import codec_for
from streaming.composites_job import CompositesConfig, run
from streaming.readers import read_topic

pytestmark = pytest.mark.kafka

EPOCH_MS = 1_760_000_000_000
TREES = {
    "trip": {"op": "and", "within_ms": 2000, "children": ["kind = 'flight' and price < 400", "kind = 'hotel'"]},
    "order": {"op": "seq", "within_ms": 3000, "children": ["kind = 'hotel'", "kind = 'flight'"]},
}


def topology() -> list[dict[str, Any]]:
    recs: list[dict[str, Any]] = [{"element_id": b, "kind": "broker"} for b in ("b1", "b2", "b3")]
    for u, v in (("b1", "b2"), ("b2", "b3")):
        for a, b in ((u, v), (v, u)):
            recs.append({"element_id": f"{a}->{b}", "kind": "link", "from": a, "to": b, "cost": 1.0})
    recs += [
        {"element_id": "pf", "kind": "publisher", "broker": "b3"},
        {"element_id": "ph", "kind": "publisher", "broker": "b1"},
    ]
    return recs


def events(start_s: int, stop_s: int, seed: int) -> list[dict[str, Any]]:
    """Flights at 10/s from pf (a third too dear), hotels at 1/s from ph; sent shuffled within 1 s."""
    rng = random.Random(seed)
    out = []
    for t in range(start_s * 1000, stop_s * 1000, 100):
        out.append(
            {
                "event_id": f"f{t}",
                "publisher_id": "pf",
                "published_at": EPOCH_MS + t,
                "lifetime_ms": 60_000,
                "attributes": {"kind": "flight", "price": rng.choice([300, 350, 900])},
            }
        )
        if t % 1000 == 500:
            out.append(
                {
                    "event_id": f"h{t}",
                    "publisher_id": "ph",
                    "published_at": EPOCH_MS + t + 7,
                    "lifetime_ms": 60_000,
                    "attributes": {"kind": "hotel"},
                }
            )
    chunks = [out[i : i + 30] for i in range(0, len(out), 30)]  # ~1 s of events each
    for chunk in chunks:
        rng.shuffle(chunk)
    return [e for chunk in chunks for e in chunk]


def send(conn: KafkaConnection, prefix: str, topic: str, schema: str, records: list[dict[str, Any]], key: str) -> None:
    writer = KafkaWriter(conn)
    codec = codec_for(schema)
    for r in records:
        writer.send(prefix + topic, str(r[key]), codec.encode(r))
    assert not writer.flush().failed


def reference(all_events: list[dict[str, Any]], watermark: int) -> set[str]:
    """Detection ids of the brute-force detector over the same component matches."""
    out: set[str] = set()
    for sid, doc in TREES.items():
        tree = parse_composite(doc)
        instances = [
            (leaf.id, e["event_id"], e["published_at"])
            for e in all_events
            if e["published_at"] < watermark
            for leaf in tree.leaf_nodes
            if parse_filter(leaf.text).matches(e["attributes"])
        ]
        for det in detect_reference(tree, instances, max_instances=1000).detections:
            out.add(detection_id(sid, [c[0] for c in det], [c[1] for c in det]))
    return out


def test_composites_job_detects_places_dead_letters_and_resumes(
    spark: Any, kafka_conn: KafkaConnection, topic_prefix: str, tmp_path: Path
) -> None:
    send(kafka_conn, topic_prefix, "siftstream.topology.v1", "TopologyElement", topology(), "element_id")
    subs = [
        {
            "type": "subscribe",
            "subscription_id": sid,
            "subscriber_id": f"user-{sid}",
            "broker": "b1",
            "composite": json.dumps(t),
        }
        for sid, t in TREES.items()
    ]
    subs.append(
        {
            "type": "subscribe",
            "subscription_id": "bad",
            "subscriber_id": "u",
            "broker": "b1",
            "composite": '{"op": "and", "children": ["a = 1", "b = 2"]}',
        }
    )
    send(kafka_conn, topic_prefix, "siftstream.subscriptions.v1", "Subscription", subs, "subscription_id")
    first = events(0, 60, seed=1)
    send(kafka_conn, topic_prefix, "siftstream.events.v1", "Event", first, "event_id")
    writer = KafkaWriter(kafka_conn)
    writer.send(topic_prefix + "siftstream.events.v1", "x", b"not avro at all")
    assert not writer.flush().failed

    cfg = CompositesConfig(
        conn=kafka_conn,
        checkpoint=tmp_path / "ckpt",
        monitor=CompositeMonitorConfig(check_period_ms=10_000, rate_window_ms=30_000, sustain=2),
        topic_prefix=topic_prefix,
        available_now=True,
        lateness_ms=2_000,
    )
    history = run(spark, cfg, quiet=True)
    assert sum(sum(b.records.values()) for b in history) == len(first) + len(topology()) + len(subs)
    dead = read_topic(kafka_conn, topic_prefix + "siftstream.deadletter.v1", "DeadLetter")
    codes = sorted(d.value["error_code"] for d in dead)
    assert codes == ["bad_framing", "invalid_composite"]
    assert any("within_ms" in d.value["reason"] for d in dead)

    found = read_topic(kafka_conn, topic_prefix + "siftstream.composites.v1", "CompositeDetection")
    watermark = max(e["published_at"] for e in first) - 2_000
    assert {r.value["detection_id"] for r in found} == reference(first, watermark)
    assert {r.value["subscription_id"] for r in found} == {"trip", "order"}
    assert all(r.value["subscriber_id"] == f"user-{r.value['subscription_id']}" for r in found)

    placements = {
        r.value["subscription_id"]: r.value
        for r in read_topic(kafka_conn, topic_prefix + "siftstream.placements.v1", "Placement")
    }
    assert set(placements) == {"trip", "order"}
    for p in placements.values():  # flights (b3) outweigh hotels (b1): detect at b3
        assert p["placement"] == {"n1": "b3"} and p["cost"] < p["baseline_cost"]

    # restart: the next minute; detections continue, none repeated, none lost
    second = events(60, 120, seed=2)
    send(kafka_conn, topic_prefix, "siftstream.events.v1", "Event", second, "event_id")
    history = run(spark, cfg, quiet=True)
    assert history and not any(b.dead_letters for b in history)
    found = read_topic(kafka_conn, topic_prefix + "siftstream.composites.v1", "CompositeDetection")
    ids = [r.value["detection_id"] for r in found]
    assert len(ids) == len(set(ids))
    watermark = max(e["published_at"] for e in second) - 2_000
    assert set(ids) == reference(first + second, watermark)
