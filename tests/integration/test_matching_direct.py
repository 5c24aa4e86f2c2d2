"""The matching job's direct mode end to end: real broker, Spark's Kafka source and sink.

The expectations are built as in ``test_matching_job`` (whose helpers this reuses): the
subscription model is a dict updated by the documented rules, events are read back raw and
judged by ``schemas.rules.classify``, matches come from ``BruteForceIndex`` over the model. The
direct mode's guarantee (docs/decisions/direct-matching.md) is that an event sees every
subscription change acknowledged before the event was written: each phase writes its
subscription records, waits for their acknowledgement, then writes its events.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from infra.connection import KafkaConnection
from routing.matching.index import BruteForceIndex
from streaming.matching_direct import build_queries
from streaming.matching_job import MatchingConfig
from streaming.readers import read_topic
from streaming.subscription_follower import FollowSpec, SubscriptionFollower
from tests.integration.test_matching_job import (
    Op,
    apply_ops,
    base_subscriptions,
    check_phase,
    dead_letters,
    matches_by_event,
    produce,
    raw_events,
    subscribe,
    unsubscribe,
)

pytestmark = pytest.mark.kafka


def _write(conn: KafkaConnection, topic: str, ops: list[Op]) -> None:
    from producers.kafka_writer import KafkaWriter

    writer = KafkaWriter(conn)
    for key, raw in ops:
        writer.send(topic, key, raw)
    assert writer.flush().failed == 0


def _same_answers(follower: SubscriptionFollower, model: dict[str, str], events: list[dict[str, Any]]) -> None:
    oracle = BruteForceIndex()
    for sid, filt in model.items():
        oracle.add(sid, filt)
    assert follower.index.match(events).all_ids() == oracle.match(events).all_ids()


def test_a_follower_reads_the_topic_to_its_ends(kafka_conn: KafkaConnection, topic_prefix: str) -> None:
    topic = topic_prefix + "siftstream.subscriptions.v1"
    follower = SubscriptionFollower(FollowSpec(kafka_conn, topic))
    assert follower.catch_up() == 0 and len(follower.index) == 0  # an empty topic
    first = base_subscriptions()
    _write(kafka_conn, topic, first)
    model: dict[str, str] = {}
    rejected = apply_ops(model, first)
    events = [{"price": p, "symbol": "IBM", "urgent": True, "region": "eu", "exchange": "LSE"} for p in (5, 250, 560)]
    assert follower.catch_up() == len(first)
    assert follower.offsets == follower.ends()
    assert follower.rejected == sum(rejected.values())
    _same_answers(follower, model, events)
    assert follower.catch_up() == 0  # nothing new: no read

    changes = [unsubscribe("s0"), subscribe("r4", "price < 10"), ("s1", None), subscribe("s2", "price exists")]
    _write(kafka_conn, topic, changes)
    apply_ops(model, changes)
    assert follower.catch_up() == len(changes)
    _same_answers(follower, model, events)
    follower.close()


def test_python_workers_are_reused_between_tasks(spark) -> None:  # type: ignore[no-untyped-def]
    """The followers live in the workers' module state: Spark must hand a later task a worker
    process that an earlier one used (``spark.python.worker.reuse``, on by default)."""
    assert spark.sparkContext.getConf().get("spark.python.worker.reuse", "true") == "true"
    rdd = spark.sparkContext.parallelize(range(2), 2)
    first = set(rdd.map(lambda _: os.getpid()).collect())
    second = set(rdd.map(lambda _: os.getpid()).collect())
    assert first & second


def _wait_for(conn: KafkaConnection, prefix: str, events: int, letters: int, timeout_s: float = 240.0) -> None:
    """Until the matches topic names ``events`` events and the dead-letter topic holds ``letters``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(matches_by_event(conn, prefix)) >= events and len(dead_letters(conn, prefix)) >= letters:
            return
        time.sleep(2.0)
    got = (len(matches_by_event(conn, prefix)), len(dead_letters(conn, prefix)))
    raise AssertionError(f"after {timeout_s:.0f} s: (events matched, dead letters) {got}, want ({events}, {letters})")


def test_direct_matches_and_dead_letters_equal_the_oracle(
    spark, kafka_conn: KafkaConnection, topic_prefix: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    cfg = MatchingConfig(conn=kafka_conn, checkpoint=tmp_path / "ckpt", topic_prefix=topic_prefix, deliver=False)
    first = base_subscriptions()
    model: dict[str, str] = {}
    bad_subs = apply_ops(model, first)
    direct = build_queries(spark, cfg, rejections_interval="0 seconds")
    try:
        # phase a: the subscriptions, acknowledged, then the events (every 25th one bad)
        bad_events = produce(kafka_conn, topic_prefix, first, "a", 300, seed=1)
        valid = len(raw_events(kafka_conn, topic_prefix + "siftstream.events.v1"))
        _wait_for(kafka_conn, topic_prefix, valid, sum(bad_events.values()) + sum(bad_subs.values()))
        before = dict(model)
        # phase b, mid-stream: a removal, a replacement, an addition, a tombstone, a bad filter
        changes = [unsubscribe("s0"), subscribe("s2", "volume < 1000"), subscribe("all", "price exists"), ("s3", None)]
        changes.append(subscribe("bad5", "price > 'x' and"))
        bad_subs += apply_ops(model, changes)
        bad_events += produce(kafka_conn, topic_prefix, changes, "b", 200, seed=3)
        valid = len(raw_events(kafka_conn, topic_prefix + "siftstream.events.v1"))
        _wait_for(kafka_conn, topic_prefix, valid, sum(bad_events.values()) + sum(bad_subs.values()))
        time.sleep(3.0)  # anything written twice would be there by now
    finally:
        direct.stop()

    events = raw_events(kafka_conn, topic_prefix + "siftstream.events.v1")
    matches = matches_by_event(kafka_conn, topic_prefix)
    assert len(matches) == len(events) and all(len(v) == 1 for v in matches.values())
    assert check_phase(matches, events, before, "a") > 0
    check_phase(matches, events, model, "b")
    assert before != model  # the changes changed the answers' source

    letters = dead_letters(kafka_conn, topic_prefix)
    by_topic: dict[str, Counter[str]] = {}
    for d in letters:
        by_topic.setdefault(d["source_topic"].split(".", 1)[1], Counter())[d["error_code"]] += 1
    assert by_topic == {"siftstream.events.v1": bad_events, "siftstream.subscriptions.v1": bad_subs}
    assert len({d["dead_letter_id"] for d in letters}) == len(letters)  # each exactly once
    bad_filter = [d for d in letters if d["error_code"] == "invalid_filter" and d["key"] == b"bad1"]
    assert "at position 7" in bad_filter[0]["reason"] and "expected a literal" in bad_filter[0]["reason"]
    assert direct.handler.rejected == sum(bad_subs.values())
    assert read_topic(kafka_conn, topic_prefix + "siftstream.matches.v1", "Match")  # written by the Kafka sink
