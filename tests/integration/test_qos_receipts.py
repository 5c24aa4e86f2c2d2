"""Measured reliability from real clients' receipts: the QoS job agrees with what the clients counted.

Three :class:`streaming.client.Subscriber` clients, each in its own thread with its own filter and
deadline wish, follow their delivery channel (the lobby: no channels job runs) while a
:class:`streaming.client.Publisher` publishes events of two kinds: most live two minutes (they
arrive on time), the others live 0 or 1 ms (late by construction). The matching job (available
now) matches them and delivers them through the channel topics; every client reads until it has
every event its filter matches, writing a ``Receipt`` for each. Then the QoS job runs over
everything (docs/reference/delivery.md §6, docs/reference/reliability-model.md §6.7).

The QoS job resolves an event at its deadline (``published_at + lifetime_ms``) by its own clock,
the largest time seen in its inputs minus ``lateness_ms``, and reports a window once that clock
has passed its end. The receipts come seconds after publication, long before the two-minute
deadlines, so one broker telemetry sample stamped after the last deadline moves the job's clock
past them, as the overlay's steady telemetry would. Nothing else is needed for a measured R_s: no
topology (that serves the prediction), no other telemetry.

For each subscriber the test counts, from the clients alone, the events it yielded with the
arrival time it took right after each, and judges them on time when that time is at or before
the event's deadline. It checks:

- the events the client yielded are exactly those whose ``Match`` record names its subscription,
  each once, and the receipts topic holds exactly one receipt per yielded event, whose own time
  gives the same on-time verdict as the client's;
- the QoS job's ``measured_reliability`` for the subscriber equals the clients' on time / yielded.

The QoS job runs before the clients close: closing writes the subscriptions' tombstones, and a
QoS micro-batch applies its subscription changes before its events, so in one batch with the
tombstones the events would match no one.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from infra.connection import KafkaConnection
from producers.kafka_writer import KafkaWriter
from routing.matching.language import parse_filter
from schemas.codec import codec_for
from schemas.topics import BROKER_TELEMETRY_TOPIC, MATCHES_TOPIC, QOS_TOPIC, RECEIPTS_TOPIC
from streaming import matching_job, qos_job
from streaming.client import Publisher, Subscriber, Subscription, now_ms
from streaming.readers import read_topic

pytestmark = pytest.mark.kafka

ON_TIME_LIFETIME_MS = 120_000  # far above the delivery time (the readers give up after 90 s)
PERIOD_MS, LATENESS_MS = 10_000, 5_000  # the QoS job's defaults
SUBSCRIBERS = {  # subscriber id -> (filter, deadline wish ms)
    "qa": ("price < 40", 500),
    "qb": ("price >= 25 and price < 80", 1_000),
    "qc": ("symbol != 'IBM' and price >= 30", 2_000),
}
SYMBOLS = ("IBM", "MSFT", "ORCL")
N_EVENTS = 60


def attributes(i: int) -> dict[str, Any]:
    return {"price": float((i * 37) % 100), "symbol": SYMBOLS[i % len(SYMBOLS)]}


def lifetime(i: int) -> int:
    return (i // 4) % 2 if i % 4 == 1 else ON_TIME_LIFETIME_MS  # every fourth event: 0 or 1 ms


def follow(sub: Subscription, expected: int, out: dict[str, Any]) -> None:
    """Read until ``expected`` events came (or 90 s passed); keep each with the time it arrived."""
    try:
        got = []
        for event in sub.events(max_events=expected, timeout_s=90.0):
            got.append((event, now_ms()))  # after the client's receipt, so never before its time
        out["events"] = got
        out["extra"] = sub.poll(1.0)  # nothing more is delivered for it
    except BaseException as exc:  # re-raised by the test thread
        out["error"] = exc


def test_measured_reliability_equals_what_the_clients_counted(
    spark: Any, kafka_conn: KafkaConnection, topic_prefix: str, tmp_path: Path
) -> None:
    expected = {
        s: {i for i in range(N_EVENTS) if parse_filter(f).matches(attributes(i))} for s, (f, _d) in SUBSCRIBERS.items()
    }
    for s, ids in expected.items():  # both outcomes occur for every subscriber
        assert {lifetime(i) == ON_TIME_LIFETIME_MS for i in ids} == {True, False}, s

    clients = {
        s: Subscriber(conn=kafka_conn, topic_prefix=topic_prefix, subscriber_id=s, home_broker="b1")
        for s in SUBSCRIBERS
    }
    try:
        subs = {
            s: clients[s].subscribe(f, deadline_ms=d, min_reliability=0.9, subscription_id=f"{s}-1")
            for s, (f, d) in SUBSCRIBERS.items()
        }
        results: dict[str, dict[str, Any]] = {s: {} for s in SUBSCRIBERS}
        threads = [
            threading.Thread(target=follow, args=(subs[s], len(expected[s]), results[s]), daemon=True)
            for s in SUBSCRIBERS
        ]
        for t in threads:
            t.start()

        with Publisher(conn=kafka_conn, topic_prefix=topic_prefix, publisher_id="p1") as pub:
            event_ids = [
                pub.publish(attributes(i), event_id=f"ev{i:03d}", lifetime_ms=lifetime(i)) for i in range(N_EVENTS)
            ]
        matching_job.run(
            spark,
            matching_job.MatchingConfig(
                conn=kafka_conn, checkpoint=tmp_path / "matching", topic_prefix=topic_prefix, available_now=True
            ),
            quiet=True,
        )
        for t in threads:
            t.join(120.0)
            assert not t.is_alive(), "a client did not finish reading"

        # what the clients counted
        counted: dict[str, dict[str, Any]] = {}
        for s, res in results.items():
            assert "error" not in res, res["error"]
            assert res["extra"] is None, f"{s} received an unexpected event {res['extra']}"
            yielded = [e["event_id"] for e, _at in res["events"]]
            on_time = {e["event_id"] for e, at in res["events"] if at <= e["published_at"] + e["lifetime_ms"]}
            deadline = {e["event_id"]: e["published_at"] + e["lifetime_ms"] for e, _at in res["events"]}
            counted[s] = {"yielded": yielded, "on_time": on_time, "deadline": deadline}
            assert len(set(yielded)) == len(yielded), f"{s} yielded an event twice"
            assert set(yielded) == {event_ids[i] for i in expected[s]}, s
            assert subs[s].counters.yielded == len(yielded)
            assert 0 < len(on_time) < len(yielded), f"{s}: the count must hold both outcomes"

        # the Match records name each subscription for exactly the events its client yielded
        named: dict[str, set[str]] = {f"{s}-1": set() for s in SUBSCRIBERS}
        for r in read_topic(kafka_conn, topic_prefix + MATCHES_TOPIC, "Match"):
            assert r.value is not None
            for sid in r.value["subscription_ids"]:
                named[sid].add(r.value["event_id"])
        for s, c in counted.items():
            assert named[f"{s}-1"] == set(c["yielded"]), s

        # one receipt per yielded event, with the same verdict (the receipts are sent in the
        # background: wait until they are all in)
        total = sum(len(c["yielded"]) for c in counted.values())
        receipts = read_topic(kafka_conn, topic_prefix + RECEIPTS_TOPIC, "Receipt")
        for _ in range(30):
            if len(receipts) >= total:
                break
            time.sleep(1.0)
            receipts = read_topic(kafka_conn, topic_prefix + RECEIPTS_TOPIC, "Receipt")
        assert len(receipts) == total
        for s, c in counted.items():
            mine = {r.value["event_id"]: r.value["received_at"] for r in receipts if r.value["subscriber_id"] == s}
            assert sorted(mine) == sorted(c["yielded"]), s
            assert {e for e, at in mine.items() if at <= c["deadline"][e]} == c["on_time"], s

        # the QoS job's clock past every deadline: one broker sample stamped after the last one
        last_deadline = max(max(c["deadline"].values()) for c in counted.values())
        sample = {
            "broker_id": "b1",
            "event_id": None,
            "arrived_at": last_deadline + LATENESS_MS + 2 * PERIOD_MS,
            "wait_ms": 0.0,
            "service_ms": 1.0,
            "queue_length": 0,
        }
        writer = KafkaWriter(kafka_conn)
        writer.send(topic_prefix + BROKER_TELEMETRY_TOPIC, "b1", codec_for("BrokerSample").encode(sample))
        assert not writer.flush().failed

        cfg = qos_job.QosConfig(
            conn=kafka_conn,
            checkpoint=tmp_path / "qos",
            topic_prefix=topic_prefix,
            available_now=True,
            update_period_ms=PERIOD_MS,
            lateness_ms=LATENESS_MS,
        )
        history = qos_job.run(spark, cfg, quiet=True)
        assert not any(b.dead_letters for b in history)
    finally:
        for client in clients.values():
            client.close()

    reports: dict[str, dict[str, Any]] = {}
    for r in read_topic(kafka_conn, topic_prefix + QOS_TOPIC, "QosReport"):
        v = r.value
        assert v is not None
        if v["kind"] == "subscriber" and (v["id"] not in reports or v["window_end"] > reports[v["id"]]["window_end"]):
            reports[v["id"]] = v
    assert set(reports) == set(SUBSCRIBERS)
    for s, c in counted.items():
        report = reports[s]
        assert report["window_end"] >= max(c["deadline"].values())  # every event resolved in it
        client_r = len(c["on_time"]) / len(c["yielded"])
        alert = report["alert"]["severity"] if report["alert"] else None
        print(
            f"{s}: clients counted {len(c['on_time'])} on time of {len(c['yielded'])} matching "
            f"(R = {client_r:.4f}); QoS job measured {report['measured_reliability']} "
            f"(p50 {report['measured_p50_delay_ms']} ms, p95 {report['measured_p95_delay_ms']} ms, alert {alert})"
        )
        assert report["measured_reliability"] == client_r, s
