"""The channels job end to end: subscriptions and ``Match`` records through the real broker and
Spark, to planned ``ChannelAssignment`` versions on ``siftstream.channels.v1``.

Eight subscriptions in two groups of disjoint load are clustered into two clean channels
(``initial``); the load then drifts so that the groups mix, and the job re-clusters
(``reclustered``) after a restart from its checkpoint; a removed subscription gives a ``left``
version. Members and waste ratios are checked against ``plan_metrics`` on the same sample and
against the pure monitor fed the same records; a garbage match record reaches the dead letter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from infra.connection import KafkaConnection
from producers.kafka_writer import KafkaWriter
from routing.channels import Assignment, plan_metrics
from routing.matching.table import SubscriptionRecord
from routing.monitors.channels import ChannelMonitor, ChannelMonitorConfig
from schemas.codec import codec_for
from streaming.channels_job import ChannelsConfig, run
from streaming.readers import read_topic

pytestmark = pytest.mark.kafka

EPOCH_MS = 1_760_000_000_000
A = ["a1", "a2", "a3", "a4"]
B = ["b1", "b2", "b3", "b4"]
X = ["a1", "a2", "b1", "b2"]  # the groups after the drift
Y = ["a3", "a4", "b3", "b4"]
CONFIG = ChannelMonitorConfig(k=2, sample_events=200, min_interval_ms=10_000, method="spectral-ncut")


def send(conn: KafkaConnection, topic: str, schema: str, records: list[dict[str, Any]], key: str) -> None:
    writer = KafkaWriter(conn)
    codec = codec_for(schema)
    for r in records:
        writer.send(topic, str(r[key]), codec.encode(r))
    assert not writer.flush().failed


def matches(groups: list[list[str]], n: int, start_ms: int, tag: str) -> list[dict[str, Any]]:
    """``n`` Match records 100 ms apart, event i matched by exactly ``groups[i % len(groups)]``."""
    return [
        {
            "event_id": f"{tag}{i}",
            "publisher_id": "p1",
            "published_at": EPOCH_MS + start_ms + 100 * i,
            "subscription_ids": sorted(groups[i % len(groups)]),
        }
        for i in range(n)
    ]


def check_ratios(version: dict[str, Any], sample: list[dict[str, Any]], previous: dict[str, Any] | None) -> None:
    """The version's ratios are plan_metrics of its members over ``sample`` (its last events)."""
    channel_of = Assignment.from_record(version).channel_of
    ids = sorted(channel_of)
    hits = np.array([[s in m["subscription_ids"] for m in sample] for s in ids], dtype=bool)
    assert version["sample_events"] == len(sample)
    assert version["waste_ratio"] == plan_metrics(hits, np.array([channel_of[s] for s in ids])).waste_ratio
    flooding = plan_metrics(hits, np.zeros(len(ids), dtype=np.int64)).waste_ratio
    assert version["flooding_waste_ratio"] == flooding
    if previous is not None:
        prev = Assignment.from_record(previous)
        labels = np.array([prev.channel(s) for s in ids])
        assert version["previous_waste_ratio"] == plan_metrics(hits, labels).waste_ratio


def test_channels_job_plans_reclusters_on_drift_and_resumes(
    spark: Any, kafka_conn: KafkaConnection, topic_prefix: str, tmp_path: Path
) -> None:
    subs = [
        {"type": "subscribe", "subscription_id": s, "subscriber_id": f"user-{s[0]}", "filter": f"g = '{s[0]}'"}
        for s in A + B
    ]
    send(kafka_conn, topic_prefix + "siftstream.subscriptions.v1", "Subscription", subs, "subscription_id")
    first = matches([A, B], 200, 0, "e")
    send(kafka_conn, topic_prefix + "siftstream.matches.v1", "Match", first, "event_id")
    writer = KafkaWriter(kafka_conn)
    writer.send(topic_prefix + "siftstream.matches.v1", "x", b"not avro at all")
    assert not writer.flush().failed

    cfg = ChannelsConfig(
        conn=kafka_conn,
        checkpoint=tmp_path / "ckpt",
        monitor=CONFIG,
        topic_prefix=topic_prefix,
        available_now=True,
    )
    history = run(spark, cfg, quiet=True)
    assert sum(sum(b.records.values()) for b in history) == len(subs) + len(first)
    dead = read_topic(kafka_conn, topic_prefix + "siftstream.deadletter.v1", "DeadLetter")
    assert [d.value["error_code"] for d in dead] == ["bad_framing"]

    def versions() -> list[dict[str, Any]]:
        found = read_topic(kafka_conn, topic_prefix + "siftstream.channels.v1", "ChannelAssignment")
        assert [r.key for r in found] == [str(r.value["version"]).encode() for r in found]
        return [r.value for r in found]

    [initial] = versions()
    assert (initial["version"], initial["stage"], initial["reason"]) == (1, "planned", "initial")
    assert initial["method"] == "spectral-ncut" and initial["k"] == 2
    assert sorted(c["subscription_ids"] for c in initial["channels"]) == [A, B]
    assert sorted(c["subscriber_ids"] for c in initial["channels"]) == [["user-a"], ["user-b"]]
    assert initial["waste_ratio"] == 0.0
    check_ratios(initial, first, None)

    # the pure monitor fed the same records plans the same channels
    mon = ChannelMonitor(CONFIG)
    mon.apply_subscriptions(
        [SubscriptionRecord(op="subscribe", subscription_id=s["subscription_id"], filter=s["filter"],
                            subscriber_id=s["subscriber_id"]) for s in subs]
    )  # fmt: skip
    mon.add_matches([m["event_id"] for m in first], [m["subscription_ids"] for m in first], [0] * len(first))
    [pure] = mon.step(initial["created_at"])
    assert pure == initial

    # the load drifts (the groups mix), 30 s later: after a restart from the checkpoint the job
    # re-clusters, and a removed subscription is planned out afterwards
    drift = matches([X, Y], 200, 30_000, "f")
    send(kafka_conn, topic_prefix + "siftstream.matches.v1", "Match", drift, "event_id")
    history = run(spark, cfg, quiet=True)
    assert history and not any(b.dead_letters for b in history)
    assert sum(b.extra["reclusters"] for b in history[-1:]) == 1
    _, reclustered = versions()
    assert (reclustered["version"], reclustered["reason"]) == (2, "reclustered")
    assert sorted(c["subscription_ids"] for c in reclustered["channels"]) == [X, Y]
    assert reclustered["waste_ratio"] == 0.0 and reclustered["previous_waste_ratio"] == pytest.approx(0.5)
    check_ratios(reclustered, drift, initial)

    writer = KafkaWriter(kafka_conn)
    writer.send(topic_prefix + "siftstream.subscriptions.v1", "b4", None)  # a tombstone
    assert not writer.flush().failed
    run(spark, cfg, quiet=True)
    *_, left = versions()
    assert (left["version"], left["reason"]) == (3, "left")
    assert "b4" not in Assignment.from_record(left).channel_of
    assert sorted(c["subscription_ids"] for c in left["channels"]) == [X, ["a3", "a4", "b3"]]
    assert left["method"] == reclustered["method"]
    check_ratios(left, drift, reclustered)


def test_batches_read_only_each_partitions_tail_of_matches(
    spark: Any, kafka_conn: KafkaConnection, topic_prefix: str, tmp_path: Path
) -> None:
    """``kafka_range`` fetches exactly the offsets asked for, and a channels batch reads only the
    last ``sample_events`` Match records of each partition (and every subscription record)."""
    from collections import Counter

    from streaming.session import kafka_range

    topic = topic_prefix + "siftstream.matches.v1"
    subs = [
        {"type": "subscribe", "subscription_id": s, "subscriber_id": f"user-{s[0]}", "filter": f"g = '{s[0]}'"}
        for s in A + B
    ]
    send(kafka_conn, topic_prefix + "siftstream.subscriptions.v1", "Subscription", subs, "subscription_id")
    send(kafka_conn, topic, "Match", matches([A, B], 300, 0, "e"), "event_id")
    per_partition = Counter(r.partition for r in read_topic(kafka_conn, topic, "Match"))
    assert len(per_partition) > 1 and sum(per_partition.values()) == 300
    ends = dict(per_partition)  # a fresh topic: offsets 0 .. n - 1 in each partition

    def offsets(start: dict[int, int], end: dict[int, int]) -> list[tuple[int, int]]:
        frame = kafka_range(spark, kafka_conn, topic, start, end)
        return [] if frame is None else sorted((r.partition, r.offset) for r in frame.collect())

    assert offsets({}, ends) == sorted((p, o) for p, n in ends.items() for o in range(n))
    first = min(ends)
    tail = {first: ends[first] - 7}
    assert offsets(tail, {first: ends[first]}) == [(first, o) for o in range(ends[first] - 7, ends[first])]
    assert kafka_range(spark, kafka_conn, topic, ends, ends) is None  # nothing in range

    config = ChannelMonitorConfig(k=2, sample_events=20, min_interval_ms=10_000, method="spectral-ncut")
    cfg = ChannelsConfig(
        conn=kafka_conn, checkpoint=tmp_path / "ckpt", monitor=config, topic_prefix=topic_prefix, available_now=True
    )
    history = run(spark, cfg, quiet=True)
    read = sum(b.records.get("siftstream.matches.v1", 0) for b in history)
    assert read == sum(min(20, n) for n in ends.values())
    assert sum(b.records.get("siftstream.subscriptions.v1", 0) for b in history) == len(subs)
