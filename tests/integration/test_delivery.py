"""Delivery through channels (docs/reference/delivery.md), end to end on the real broker.

The matching job runs continuously while the test publishes events in waves and, between waves,
plans new assignment versions (playing the channels job) that move subscriptions between
channels. Afterwards every channel topic is read back and judged independently of the job:

- each matched event is in exactly the channels its version's assignment says (the lobby for
  subscriptions no installed version places), once each, and in no other;
- every version's markers are in every channel, at the offsets of its installed record, including
  the channels a version with a smaller K drops (their subscriptions learn of the move there);
- a reader that follows one subscription from the lobby through every marker with
  ``routing.channels.Follower`` receives exactly the events whose Match record names the
  subscription, each once, although the subscription moved mid-stream.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from infra.connection import KafkaConnection, arrived
from producers.events import EventGenerator
from producers.kafka_writer import KafkaWriter
from routing.channels import LOBBY, Assignment, Follower
from schemas.codec import codec_for, decode
from schemas.topics import CHANNELS_TOPIC, EVENTS_TOPIC, MATCHES_TOPIC, SUBSCRIPTIONS_TOPIC, channel_topic
from streaming.matching_job import MatchingConfig, build_query
from streaming.readers import read_topic, watermarks

pytestmark = pytest.mark.kafka

K = 3  # channel topics: the most any version uses
FILTERS = {  # over EventGenerator's attributes (price 0..200, volume, symbol)
    "s-cheap": "price < 60",
    "s-mid": "price >= 50 and price < 140",
    "s-dear": "price >= 120",
    "s-all": "price >= 0",
    "s-none": "price < 0",
}
# the versions the test plans between waves: subscription -> channel (absent: the lobby)
PLANS = [
    {"s-cheap": 0, "s-mid": 1, "s-dear": 2, "s-all": 1},
    {"s-cheap": 2, "s-mid": 1, "s-dear": 0, "s-all": 0, "s-none": 1},  # s-cheap, s-dear, s-all move
    {"s-cheap": 1, "s-mid": 2, "s-dear": 0, "s-all": 2, "s-none": 1},  # s-cheap, s-mid, s-all move again
    {"s-cheap": 1, "s-mid": 0, "s-dear": 0, "s-all": 1, "s-none": 1},  # K = 2: channel 2's s-mid and s-all move
]
KS = [K, K, K, 2]  # each plan's K
WAVE = 300


def planned(version: int, plan: dict[str, int], k: int) -> bytes:
    members: dict[int, list[str]] = defaultdict(list)
    for sid, c in plan.items():
        members[c].append(sid)
    record = {
        "version": version,
        "stage": "planned",
        "created_at": int(time.time() * 1000),
        "k": k,
        "reason": "initial" if version == 1 else "reclustered",
        "detail": "planned by the test",
        "method": "test",
        "sample_events": 0,
        "waste_ratio": None,
        "flooding_waste_ratio": None,
        "previous_waste_ratio": None,
        "channels": [
            {
                "channel": c,
                "subscription_ids": sorted(members[c]),
                "subscriber_ids": ["u1"] if members[c] else [],
                "deliveries": 0,
                "waste_ratio": None,
            }
            for c in range(k)
        ],
        "handover": [],
    }
    return codec_for("ChannelAssignment").encode(record)


def channel_records(conn: KafkaConnection, topic: str) -> list[tuple[int, str, dict[str, Any]]]:
    """(offset, record name, record) of every record in a one-partition topic, in order; a
    ``ChannelEvents`` record gives one ``Event`` entry per event it holds, all at its offset."""
    consumer = Consumer(conn.confluent(**{"group.id": "judge", "enable.auto.commit": False}))
    out: list[tuple[int, str, dict[str, Any]]] = []
    try:
        low, high = watermarks(consumer, topic, 0)
        consumer.assign([TopicPartition(topic, 0, low)])
        read = 0
        while read < high - low:
            for msg in arrived(consumer, 1000, 2.0):
                name, record = decode(msg.value())
                read += 1
                if name == "ChannelEvents":
                    out += [(msg.offset(), *decode(raw, "Event")) for raw in record["events"]]
                else:
                    out.append((msg.offset(), name, record))
    finally:
        consumer.close()
    return out


def follow(
    sid: str,
    channels: dict[int, list[tuple[int, str, dict[str, Any]]]],
    plans: dict[int, Assignment],
    handovers: dict[int, dict[int, int]],
) -> list[str]:
    """The event ids a client of ``sid`` reads, following markers from the lobby's start."""
    follower, got = Follower(sid), []
    channel, i = LOBBY, 0  # i: position in channels[channel], whose entries are in offset order
    while i < len(channels[channel]):
        _, name, rec = channels[channel][i]
        i += 1
        if name == "ChannelMarker":
            if not follower.on_marker(rec["version"]):
                moved = follower.install(rec["version"], plans[rec["version"]], handovers[rec["version"]])
                if moved is not None:
                    channel, offset = moved
                    i = next((j for j, e in enumerate(channels[channel]) if e[0] >= offset), len(channels[channel]))
        else:
            got.append(rec["event_id"])
    return got


def test_moved_subscriptions_lose_nothing_and_receive_nothing_twice(
    kafka_conn: KafkaConnection, topic_prefix: str, spark: Any, tmp_path: Path
) -> None:
    writer = KafkaWriter(kafka_conn)
    sub_codec, event_codec = codec_for("Subscription"), codec_for("Event")
    for sid, filt in FILTERS.items():
        record = {"type": "subscribe", "subscription_id": sid, "subscriber_id": "u1", "filter": filt}
        writer.send(topic_prefix + SUBSCRIPTIONS_TOPIC, sid, sub_codec.encode(record))
    assert writer.flush().failed == 0
    cfg = MatchingConfig(conn=kafka_conn, checkpoint=tmp_path / "ckpt", topic_prefix=topic_prefix)
    query, handler = build_query(spark, cfg)
    generator = EventGenerator(publishers=3, seed=7)
    try:
        for wave in range(len(PLANS) + 1):
            if wave:
                # a new version mid-stream: wait until the job delivers by it before the next wave
                writer.send(topic_prefix + CHANNELS_TOPIC, str(wave), planned(wave, PLANS[wave - 1], KS[wave - 1]))
                assert writer.flush().failed == 0
                deadline = time.monotonic() + 120
                while handler.delivery is not None and handler.delivery.assignment.version < wave:
                    assert time.monotonic() < deadline, f"version {wave} was not installed"
                    assert query.exception() is None, query.exception()
                    time.sleep(0.2)
            for event in generator.batch(WAVE, 1_700_000_000_000 + wave * 60_000):
                event["event_id"] = f"w{wave}-{event['event_id']}"
                writer.send(topic_prefix + EVENTS_TOPIC, event["publisher_id"], event_codec.encode(event))
            assert writer.flush().failed == 0
            time.sleep(1.0)  # let a batch or two of this wave through under the current version
        deadline = time.monotonic() + 180
        while sum(b.events for b in handler.history) < WAVE * (len(PLANS) + 1):
            assert time.monotonic() < deadline, "the job did not match every event"
            assert query.exception() is None, query.exception()
            time.sleep(0.5)
    finally:
        query.stop()
        if handler.delivery is not None:
            handler.delivery.close()

    matches = {r.value["event_id"]: r.value for r in read_topic(kafka_conn, topic_prefix + MATCHES_TOPIC, "Match")}
    assert len(matches) == WAVE * (len(PLANS) + 1)
    channels = {c: channel_records(kafka_conn, channel_topic(c, topic_prefix)) for c in range(K)}
    installed = [
        r.value
        for r in read_topic(kafka_conn, topic_prefix + CHANNELS_TOPIC, "ChannelAssignment")
        if r.value is not None and r.value["stage"] == "installed"
    ]
    assert [r["version"] for r in installed] == [1, 2, 3, 4]
    handovers = {r["version"]: {h["channel"]: h["offset"] for h in r["handover"]} for r in installed}
    plans = {v: Assignment(v, KS[v - 1], PLANS[v - 1]) for v in handovers}
    plans[0] = Assignment(0, K)

    # markers: every version in every channel, exactly at its installed offset
    for c, recs in channels.items():
        markers = {rec["version"]: off for off, name, rec in recs if name == "ChannelMarker"}
        assert markers == {v: handovers[v][c] for v in handovers}, f"channel {c}"

    # deliveries: each event once in each channel its version's assignment says, nowhere else
    version_at: dict[int, list[tuple[int, int]]] = {
        c: sorted((o, v) for v, o in ((v, h[c]) for v, h in handovers.items())) for c in range(K)
    }
    delivered: Counter[tuple[str, int]] = Counter()
    by_version: dict[str, set[int]] = defaultdict(set)
    for c, recs in channels.items():
        for off, name, rec in recs:
            if name != "Event":
                continue
            delivered[(rec["event_id"], c)] += 1
            by_version[rec["event_id"]].add(max((v for o, v in version_at[c] if o < off), default=0))
    assert all(n == 1 for n in delivered.values()), "an event delivered twice to one channel"
    for eid, match in matches.items():
        versions = by_version.get(eid, set())
        assert len(versions) <= 1, f"{eid} delivered by two versions: {versions}"
        version = versions.pop() if versions else 0
        want = set(plans[version].carriers(match["subscription_ids"]))
        got = {c for (e, c) in delivered if e == eid}
        assert got == want, f"{eid} (version {version}, matched {match['subscription_ids']}): {got} != {want}"

    # following each subscription through its moves: every matched event once, nothing else
    for sid in FILTERS:
        got = follow(sid, channels, plans, handovers)
        want = {eid for eid, m in matches.items() if sid in m["subscription_ids"]}
        wanted = [e for e in got if e in want]
        assert len(wanted) == len(set(wanted)), f"{sid} received an event twice"
        assert set(wanted) == want, f"{sid} lost {len(want - set(wanted))} events"
    assert sum(1 for h in handler.history if h.deliveries) > 0
