"""The client library (streaming.client) and siftstream subscribe / publish against the real broker.

The matching job's delivery stage is played here by :class:`DeliveryStage`, written from
docs/reference/delivery.md alone: it writes each event, byte for byte as published, once to every
channel that carries one of its matched subscriptions under the installed version (the lobby for
unplaced ones); to install a version it writes a marker to every channel topic, waits for the
acknowledgements and writes the ``installed`` record with the markers' real offsets. The
expectations come from the filters and the event lists of each test, not from the client.
"""

from __future__ import annotations

import json
import math
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from infra.connection import KafkaConnection
from infra.topics import ensure_topics
from routing.channels.assignment import LOBBY, Assignment
from routing.matching.language import parse_filter
from schemas.codec import codec_for
from schemas.topics import (
    CHANNELS_TOPIC,
    EVENTS_TOPIC,
    RECEIPTS_TOPIC,
    SUBSCRIPTIONS_TOPIC,
    channel_spec,
    channel_topic,
)
from streaming.client import Publisher, Subscriber, Subscription
from streaming.readers import read_topic

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
EVENT, MARKER, PLAN = codec_for("Event"), codec_for("ChannelMarker"), codec_for("ChannelAssignment")


class DeliveryStage:
    """The delivery stage of the matching job, by the protocol (docs/reference/delivery.md §4)."""

    def __init__(self, conn: KafkaConnection, prefix: str, k: int) -> None:
        self.prefix, self.k = prefix, k
        ensure_topics(conn, prefix, specs=tuple(channel_spec(c) for c in range(k)))
        self.producer = Producer(conn.confluent(**{"enable.idempotence": True, "acks": "all", "linger.ms": 0}))
        self.filters: dict[str, Any] = {}  # the live subscriptions: id -> parsed filter
        self.installed = Assignment(0, k, {})
        self.written: Counter[int] = Counter()  # events written per channel

    def _write(self, topic: str, key: str, value: bytes) -> int:
        """Write one record and wait for it; its offset."""
        got: list[Any] = []
        self.producer.produce(topic, value, key, on_delivery=lambda err, msg: got.append((err, msg)))
        self.producer.flush(30)
        assert got and got[0][0] is None, got
        return int(got[0][1].offset())

    def add(self, subscription_id: str, filter_text: str) -> None:
        self.filters[subscription_id] = parse_filter(filter_text)

    def plan(self, version: int, channel_of: dict[str, int], reason: str = "reclustered") -> None:
        """The channels job's planned record of ``version``."""
        members: dict[int, list[str]] = {c: [] for c in range(self.k)}
        for sid, c in channel_of.items():
            members[c].append(sid)
        record = {
            "version": version,
            "stage": "planned",
            "created_at": int(time.time() * 1000),
            "k": self.k,
            "reason": reason,
            "channels": [
                {"channel": c, "subscription_ids": sorted(ids), "subscriber_ids": sorted({f"u-{s}" for s in ids})}
                for c, ids in members.items()
            ],
        }
        self._write(self.prefix + CHANNELS_TOPIC, str(version), PLAN.encode(record))
        self._planned = getattr(self, "_planned", {})
        self._planned[version] = Assignment(version, self.k, channel_of)

    def marker(self, version: int, channel: int) -> int:
        record = {"channel": channel, "version": version, "installed_at": int(time.time() * 1000)}
        return self._write(channel_topic(channel, self.prefix), f"marker/{version}", MARKER.encode(record))

    def install(self, version: int, pause_s: float = 0.0) -> dict[int, int]:
        """Markers of ``version`` in every channel, then (after ``pause_s``) the installed record."""
        offsets = {c: self.marker(version, c) for c in range(self.k)}
        time.sleep(pause_s)
        record = {
            "version": version,
            "stage": "installed",
            "created_at": int(time.time() * 1000),
            "k": self.k,
            "reason": "reclustered",
            "handover": [{"channel": c, "offset": o} for c, o in offsets.items()],
        }
        self._write(self.prefix + CHANNELS_TOPIC, str(version), PLAN.encode(record))
        self.installed = self._planned[version]
        return offsets

    def deliver(self, event: dict[str, Any]) -> list[int]:
        """Write the event once to each channel carrying one of its matched subscriptions."""
        matched = [sid for sid, f in self.filters.items() if f.matches(event["attributes"])]
        raw = EVENT.encode(event)
        channels = self.installed.carriers(matched)
        for c in channels:
            self.raw(c, event["event_id"], raw)
        return channels

    def raw(self, channel: int, key: str, value: bytes) -> int:
        self.written[channel] += 1
        return self._write(channel_topic(channel, self.prefix), key, value)


def event(i: int, **attributes: Any) -> dict[str, Any]:
    return {
        "event_id": f"e{i}",
        "publisher_id": "p1",
        "published_at": 1000 + i,
        "lifetime_ms": 500,
        "attributes": attributes,
    }


def collect(sub: Subscription, n: int, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    return list(sub.events(max_events=n, timeout_s=timeout_s))


def drain(sub: Subscription, quiet_s: float = 2.0) -> list[dict[str, Any]]:
    """Whatever else arrives until ``quiet_s`` pass without an event."""
    out = []
    while (e := sub.poll(quiet_s)) is not None:
        out.append(e)
    return out


def subscription_log(conn: KafkaConnection, prefix: str) -> list[tuple[str, dict[str, Any] | None]]:
    return [(r.key.decode(), r.value) for r in read_topic(conn, prefix + SUBSCRIPTIONS_TOPIC, "Subscription")]


IBM = "price < 120 and symbol = 'IBM'"


def test_a_subscriber_receives_exactly_its_matching_events(kafka_conn: KafkaConnection, topic_prefix: str) -> None:
    stage = DeliveryStage(kafka_conn, topic_prefix, k=3)
    stage.raw(LOBBY, "e-before", EVENT.encode(event(0, symbol="IBM", price=1)))  # before subscribing: not seen
    with Subscriber(conn=kafka_conn, topic_prefix=topic_prefix, subscriber_id="u1", home_broker="b3") as client:
        sub = client.subscribe(IBM, deadline_ms=250, min_reliability=0.9, subscription_id="s1")
        assert (sub.channel, sub.version, sub.start_offset) == (LOBBY, 0, 1)
        stage.add("s1", IBM)
        stage.add("other", "symbol = 'IBM'")  # shares the lobby: its matches are s1's waste
        events = [
            event(1, symbol="IBM", price=100.5),
            event(2, symbol="IBM", price=130),  # other only: waste for s1
            event(3, symbol="HP", price=99),  # nobody
            event(4, symbol="IBM", price=119),
            event(5, symbol="IBM", price=120),  # other only (120 is not < 120)
            event(6, symbol="IBM", price=3, note="x"),
        ]
        for e in events:
            stage.deliver(e)
        stage.raw(2, "e-elsewhere", EVENT.encode(event(7, symbol="IBM", price=1)))  # another channel: not seen
        got = collect(sub, 3)
        assert got == [events[0], events[3], events[5]]
        assert drain(sub) == []
        assert (sub.counters.received, sub.counters.yielded, sub.counters.dropped_by_filter) == (5, 3, 2)
        assert sub.counters.waste_ratio == pytest.approx(2 / 5)
        assert sub.counters.duplicates == 0 and sub.counters.moves == 0
    # the subscription as written, then its tombstone
    log = subscription_log(kafka_conn, topic_prefix)
    assert [k for k, _ in log] == ["s1", "s1"] and log[1][1] is None
    written = log[0][1]
    assert written is not None
    assert {k: written[k] for k in ("type", "subscriber_id", "broker", "filter", "deadline_ms", "min_reliability")} == {
        "type": "subscribe",
        "subscriber_id": "u1",
        "broker": "b3",
        "filter": IBM,
        "deadline_ms": 250,
        "min_reliability": 0.9,
    }
    # one receipt per yielded event, keyed by the subscriber
    receipts = read_topic(kafka_conn, topic_prefix + RECEIPTS_TOPIC, "Receipt")
    assert sorted(r.value["event_id"] for r in receipts if r.value) == ["e1", "e4", "e6"]
    assert {r.key for r in receipts} == {b"u1"}
    assert all(r.value and r.value["subscriber_id"] == "u1" and r.value["received_at"] > 0 for r in receipts)


def test_a_channel_events_record_is_matched_as_columns_like_single_events(
    kafka_conn: KafkaConnection, topic_prefix: str
) -> None:
    """A ChannelEvents record (what the delivery stage writes) yields and counts exactly what the
    same events written one by one do; a value in it that is not an Event is counted undecodable."""
    stage = DeliveryStage(kafka_conn, topic_prefix, k=2)
    events = [
        event(1, symbol="IBM", price=100.5),
        event(2, symbol="IBM", price=130),
        event(3, symbol="HP", price=99),
        event(4, symbol="IBM", price=119),
        event(5, symbol="IBM", price=120.0, volume=7),
        event(6, symbol="IBM", price=3, note="x"),
    ]
    batch = codec_for("ChannelEvents").encode(
        {"events": [EVENT.encode(e) for e in events[:3]] + [b"not an event"] + [EVENT.encode(e) for e in events[3:]]}
    )
    with Subscriber(conn=kafka_conn, topic_prefix=topic_prefix, subscriber_id="u1") as client:
        sub = client.subscribe(IBM, subscription_id="s1")
        stage.raw(LOBBY, "e1", batch)
        for e in events:  # the same events again, one record each: duplicates of the yielded ones
            stage.raw(LOBBY, e["event_id"], EVENT.encode(e))
        got = collect(sub, 3)
        assert got == [events[0], events[3], events[5]]
        assert drain(sub) == []
        c = sub.counters
        assert (c.received, c.yielded, c.dropped_by_filter, c.undecodable, c.duplicates) == (12, 3, 6, 1, 3)


def test_a_subscriber_moved_mid_stream_receives_every_event_once(
    kafka_conn: KafkaConnection, topic_prefix: str
) -> None:
    stage = DeliveryStage(kafka_conn, topic_prefix, k=3)
    # versions planned before s1 existed leave it in the lobby; one is installed before it subscribes
    stage.add("a", "kind = 'a'")
    stage.plan(1, {"a": 2}, reason="initial")
    stage.install(1)
    filt = "n >= 0 and n < 1000"
    with Subscriber(conn=kafka_conn, topic_prefix=topic_prefix, subscriber_id="u1") as client:
        sub = client.subscribe(filt, subscription_id="s1")
        assert (sub.channel, sub.version) == (LOBBY, 1)
        stage.add("s1", filt)
        stage.add("b", "n >= 500")  # shares whatever channel: waste for s1 above 1000
        stream = [event(i, n=(i * 37) % 1300, kind="a" if i % 3 == 0 else "b") for i in range(500)]
        expected = [e["event_id"] for e in stream if e["attributes"]["n"] < 1000]
        got: list[dict[str, Any]] = []
        reader = threading.Thread(target=lambda: got.extend(collect(sub, len(expected), timeout_s=120)))
        reader.start()

        def send(lo: int, hi: int) -> None:
            for e in stream[lo:hi]:
                stage.deliver(e)

        send(0, 100)  # version 1: s1 in the lobby
        stage.plan(2, {"a": 2, "s1": 1, "b": 1})
        stage.install(2)  # s1 moves 0 -> 1
        send(100, 200)
        stage.plan(3, {"a": 0, "s1": 1, "b": 2})
        stage.install(3)  # s1 stays on 1, b moves away
        send(200, 300)
        stage.plan(4, {"a": 1, "s1": 2, "b": 0})
        stage.install(4, pause_s=1.5)  # s1 moves 1 -> 2; its installed record comes late
        send(300, 500)
        reader.join(150)
        assert not reader.is_alive()
        ids = [e["event_id"] for e in got]
        assert Counter(ids) == Counter(expected), "every matching event exactly once"
        assert drain(sub) == []
        assert (sub.channel, sub.version, sub.counters.moves) == (2, 4, 2)
        assert sub.counters.duplicates == 0 and sub.counters.stale_markers == 0
        # it read on each channel only what that channel carried for it after its hand-over
        assert sub.counters.received == sub.counters.yielded + sub.counters.dropped_by_filter
        assert sub.counters.markers == 3


def test_replayed_markers_are_skipped_and_duplicates_dropped(kafka_conn: KafkaConnection, topic_prefix: str) -> None:
    stage = DeliveryStage(kafka_conn, topic_prefix, k=2)
    with Subscriber(conn=kafka_conn, topic_prefix=topic_prefix, subscriber_id="u1", dedupe_window=1000) as client:
        sub = client.subscribe("x > 0", subscription_id="s1")
        stage.add("s1", "x > 0")
        stage.plan(1, {"s1": 1})
        stage.install(1)  # s1: 0 -> 1
        batch = [event(i, x=i) for i in range(1, 6)]
        for e in batch:
            stage.deliver(e)
        # a replayed micro-batch after a crash: markers of version 1 again, the batch again
        for c in range(2):
            stage.marker(1, c)
        for e in batch:
            stage.deliver(e)
        stage.deliver(event(6, x=6))
        got = collect(sub, 6)
        assert drain(sub) == []
        assert [e["event_id"] for e in got] == [f"e{i}" for i in range(1, 7)]
        c = sub.counters
        assert (c.moves, c.markers, c.stale_markers, c.duplicates, c.yielded) == (1, 2, 1, 5, 6)
        # an old version's marker after a newer one is skipped too
        stage.plan(2, {"s1": 1})
        stage.install(2)
        stage.marker(1, 1)
        stage.deliver(event(7, x=7))
        assert [e["event_id"] for e in collect(sub, 1)] == ["e7"]
        assert (sub.version, sub.counters.stale_markers, sub.counters.moves) == (2, 2, 1)
    receipts = read_topic(kafka_conn, topic_prefix + RECEIPTS_TOPIC, "Receipt")
    assert sorted(r.value["event_id"] for r in receipts if r.value) == [f"e{i}" for i in range(1, 8)]


def test_an_invalid_subscription_is_refused_before_anything_is_written(
    kafka_conn: KafkaConnection, topic_prefix: str
) -> None:
    with Subscriber(conn=kafka_conn, topic_prefix=topic_prefix, subscriber_id="u1") as client:
        with pytest.raises(ValueError, match=r"at position 8: expected a literal"):
            client.subscribe("price < ", subscription_id="s1")
        with pytest.raises(ValueError, match=r"min_reliability must be <= 1"):
            client.subscribe("price < 3", min_reliability=1.5, subscription_id="s2")
        assert client.subscriptions == []
    assert subscription_log(kafka_conn, topic_prefix) == []


def test_published_events_decode_with_the_codec(kafka_conn: KafkaConnection, topic_prefix: str) -> None:
    with Publisher(conn=kafka_conn, topic_prefix=topic_prefix, publisher_id="pub1") as pub:
        first = pub.publish({"symbol": "IBM", "price": 101.5, "volume": 7, "urgent": False}, event_id="x1")
        second = pub.publish({"symbol": "HP"}, lifetime_ms=5, published_at=42)
        for bad, reason in [
            ({"bad name": 1}, "keys must match"),
            ({"p": math.nan}, "finite"),
            ({"p": [1, 2]}, "allowed: long, double, string, boolean"),
            ({"p": None}, "allowed"),
        ]:
            with pytest.raises(ValueError, match=reason):
                pub.publish(bad)
        with pytest.raises(ValueError, match="lifetime_ms must be >= 0"):
            pub.publish({"p": 1}, lifetime_ms=-1)
        with pytest.raises(ValueError, match="event_id must be a non-empty string"):
            pub.publish({"p": 1}, event_id="")
    assert first == "x1" and second and pub.published == 2
    records = read_topic(kafka_conn, topic_prefix + EVENTS_TOPIC, "Event")
    assert [r.key for r in records] == [b"pub1", b"pub1"]
    by_id = {r.value["event_id"]: r.value for r in records if r.value}
    assert by_id["x1"]["attributes"] == {"symbol": "IBM", "price": 101.5, "volume": 7, "urgent": False}
    assert by_id["x1"]["lifetime_ms"] == 60_000 and by_id["x1"]["published_at"] > 1_700_000_000_000
    assert by_id[second] == {
        "event_id": second,
        "publisher_id": "pub1",
        "published_at": 42,
        "lifetime_ms": 5,
        "attributes": {"symbol": "HP"},
    }


def _cli(*args: str) -> list[str]:
    return [str(ROOT / ".venv" / "bin" / "siftstream"), *args]


def test_the_publish_and_subscribe_commands(kafka_conn: KafkaConnection, topic_prefix: str, tmp_path: Path) -> None:
    conn_flags = ["--bootstrap-servers", kafka_conn.bootstrap_servers, "--topic-prefix", topic_prefix]
    stage = DeliveryStage(kafka_conn, topic_prefix, k=2)
    proc = subprocess.Popen(
        _cli(
            "subscribe",
            "--filter",
            IBM,
            "--subscriber",
            "u9",
            "--subscription",
            "s9",
            "--max-events",
            "2",
            "--timeout-s",
            "90",
            *conn_flags,
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        seen = [proc.stderr.readline()]
        while not seen[-1].startswith("[subscribe]") and seen[-1] and len(seen) < 50:
            seen.append(proc.stderr.readline())  # librdkafka may log first
        assert seen[-1].startswith("[subscribe] s9 of u9"), seen  # the client says where it reads, once subscribed
        stage.add("s9", IBM)
        stage.add("x", "symbol exists")
        # publish through the command line, then play the matching job on what reached the events topic
        lines = [
            json.dumps({"attributes": {"symbol": "IBM", "price": 100}, "event_id": "c1"}),
            "{not json",
            json.dumps({"attributes": {"symbol": "IBM", "price": 500}, "event_id": "c2"}),
            json.dumps({"event_id": "c3"}),
            json.dumps({"attributes": {"symbol": "IBM", "price": 1}, "event_id": "c4", "publisher_id": "other"}),
            json.dumps({"attributes": {"symbol": "IBM", "bad name": 1}}),
            "",
            json.dumps({"attributes": {"symbol": "IBM"}, "colour": "red"}),
        ]
        source = tmp_path / "events.jsonl"
        source.write_text("\n".join(lines) + "\n")
        done = subprocess.run(
            _cli("publish", "--file", str(source), "--publisher", "cli-pub", *conn_flags),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 2, done.stderr
        assert f"3 events published to {topic_prefix}{EVENTS_TOPIC} as cli-pub; 4 bad lines skipped" in done.stdout
        bad = [ln for ln in done.stderr.splitlines() if ln.startswith("siftstream: ")]
        assert [ln.split(":")[2] for ln in bad] == ["2", "4", "6", "8"], done.stderr
        assert "needs attributes" in bad[1] and "keys must match" in bad[2] and "colour" in bad[3]
        published = read_topic(kafka_conn, topic_prefix + EVENTS_TOPIC, "Event")
        assert sorted((r.key, r.value["event_id"]) for r in published if r.value) == [
            (b"cli-pub", "c1"),
            (b"cli-pub", "c2"),
            (b"other", "c4"),
        ]
        for r in sorted(published, key=lambda r: r.value["event_id"] if r.value else ""):
            assert r.value is not None
            stage.deliver(r.value)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    got = [json.loads(ln) for ln in out.splitlines()]
    assert [(e["event_id"], e["publisher_id"], e["attributes"]) for e in got] == [
        ("c1", "cli-pub", {"symbol": "IBM", "price": 100}),
        ("c4", "other", {"symbol": "IBM", "price": 1}),
    ]
    assert '"yielded": 2' in err and '"dropped_by_filter": 1' in err
    assert subscription_log(kafka_conn, topic_prefix)[-1] == ("s9", None)
    # an invalid filter: the parser's message, exit 2
    bad_filter = subprocess.run(
        _cli("subscribe", "--filter", "price <", *conn_flags), capture_output=True, text=True, timeout=60, check=False
    )
    assert bad_filter.returncode == 2
    assert bad_filter.stderr.startswith("siftstream: error: at position 7: expected a literal")


def test_a_placed_subscription_resumes_on_its_channel_and_a_missing_lobby_reads_from_its_start(
    kafka_conn: KafkaConnection, topic_prefix: str
) -> None:
    # no channel topic yet: the subscriber reads the lobby from offset 0 once the delivery stage makes it
    with Subscriber(conn=kafka_conn, topic_prefix=topic_prefix, subscriber_id="u1") as client:
        early = client.subscribe("x > 0", subscription_id="s-early")
        assert (early.channel, early.start_offset) == (LOBBY, 0)
        stage = DeliveryStage(kafka_conn, topic_prefix, k=2)
        stage.add("s-early", "x > 0")
        stage.deliver(event(1, x=1))
        assert [e["event_id"] for e in collect(early, 1)] == ["e1"]
    # a subscription id that the newest installed version places: subscribing again reads its channel
    stage.add("s1", "x > 0")
    stage.plan(1, {"s1": 1})
    stage.install(1)
    stage.deliver(event(2, x=2))  # before subscribing again: not read
    with Subscriber(conn=kafka_conn, topic_prefix=topic_prefix, subscriber_id="u1") as client:
        sub = client.subscribe("x > 0", subscription_id="s1")
        assert (sub.channel, sub.version, sub.start_offset) == (1, 1, 2)  # after the marker and e2
        stage.deliver(event(3, x=3))
        assert [e["event_id"] for e in collect(sub, 1)] == ["e3"]
        assert drain(sub, 1.0) == [] and sub.counters.moves == 0


def test_clients_through_the_matching_jobs_delivery_stage(
    kafka_conn: KafkaConnection, topic_prefix: str, spark: Any, tmp_path: Path
) -> None:
    """Publisher -> the matching job (its real delivery stage) -> Subscriber, with a move."""
    from streaming.matching_job import MatchingConfig, build_query

    cheap, dear = "price < 60", "price >= 120 and symbol = 'IBM'"
    subscriber = Subscriber(conn=kafka_conn, topic_prefix=topic_prefix, subscriber_id="u1")
    s_cheap = subscriber.subscribe(cheap, subscription_id="s-cheap")
    s_dear = subscriber.subscribe(dear, subscription_id="s-dear")
    cfg = MatchingConfig(conn=kafka_conn, checkpoint=tmp_path / "ckpt", topic_prefix=topic_prefix)
    query, handler = build_query(spark, cfg)
    published: list[dict[str, Any]] = []
    try:
        with Publisher(conn=kafka_conn, topic_prefix=topic_prefix, publisher_id="p1") as pub:
            for wave in range(2):
                if wave:  # the channels job's version 1 moves both out of the lobby: the job installs it
                    # before the next batch's deliveries, so wave 1 is delivered by it
                    DeliveryStage(kafka_conn, topic_prefix, k=3).plan(1, {"s-cheap": 1, "s-dear": 2})
                for i in range(150):
                    attributes = {"price": (i * 7) % 200, "symbol": "IBM" if i % 2 else "HP"}
                    eid = pub.publish(attributes, event_id=f"w{wave}-{i}")
                    published.append({"event_id": eid, "attributes": attributes})
                pub.flush()
                deadline = time.monotonic() + 120
                while sum(b.events for b in handler.history) < len(published):
                    assert time.monotonic() < deadline, "the job did not match every event"
                    assert query.exception() is None, query.exception()
                    time.sleep(0.3)
        assert handler.delivery is not None and handler.delivery.assignment.version == 1
    finally:
        query.stop()
        if handler.delivery is not None:
            handler.delivery.close()
    try:
        for sub, text in ((s_cheap, cheap), (s_dear, dear)):
            want = [e["event_id"] for e in published if parse_filter(text).matches(e["attributes"])]
            got = [e["event_id"] for e in collect(sub, len(want), timeout_s=120)] + [
                e["event_id"] for e in drain(sub, 2.0)
            ]
            assert sorted(got) == sorted(want), sub.subscription_id
            assert (sub.channel, sub.version, sub.counters.moves, sub.counters.duplicates) == (
                {"s-cheap": 1, "s-dear": 2}[sub.subscription_id],
                1,
                1,
                0,
            )
        # in the lobby (wave 0) each one's events were the other's waste
        assert s_cheap.counters.dropped_by_filter > 0 and s_dear.counters.dropped_by_filter > 0
    finally:
        subscriber.close()
    receipts = read_topic(kafka_conn, topic_prefix + RECEIPTS_TOPIC, "Receipt")
    assert len(receipts) == s_cheap.counters.yielded + s_dear.counters.yielded


def test_a_kafka_client_error_ends_a_command_with_its_reason(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A command that meets an unreachable cluster exits 2 with the client's reason in one line."""
    from confluent_kafka import KafkaError, KafkaException

    from streaming import cli

    def unreachable(args: object) -> int:
        raise KafkaException(
            KafkaError(KafkaError._TRANSPORT, "Failed to get metadata: Local: Broker transport failure")
        )

    monkeypatch.setattr(cli, "cmd_deadletter", unreachable)
    assert cli.main(["deadletter", "--bootstrap-servers", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "siftstream: error: the Kafka cluster: Failed to get metadata" in err and "Traceback" not in err


# a program that follows one subscription with resume=True, appending each event's id to a file
RESUMING_CHILD = """
import sys
from streaming.client import Subscriber
bootstrap, prefix, out, filt = sys.argv[1:5]
sub = Subscriber(bootstrap, topic_prefix=prefix, subscriber_id="u-r", log=sys.stderr)
with open(out, "a") as f:
    for event in sub.subscribe(filt, subscription_id="s-r", resume=True):
        f.write(event["event_id"] + "\\n")
        f.flush()
"""


def test_a_client_killed_before_a_move_resumes_on_the_old_channel_and_follows_it(
    kafka_conn: KafkaConnection, topic_prefix: str, tmp_path: Path
) -> None:
    """A client killed with SIGKILL while its subscription sits in the lobby; a version that moves it
    to channel 1 is installed while it is down. Restarted with ``resume=True`` it must read the
    rest of the lobby up to the marker, then channel 1 after its marker: every matching event once
    across the lives but for the last second's repeats (not the new channel from its end)."""
    import os
    import signal
    import sys

    from confluent_kafka import Consumer, TopicPartition

    stage = DeliveryStage(kafka_conn, topic_prefix, k=2)
    stage.plan(1, {}, reason="initial")
    stage.install(1)  # nothing placed: s-r reads the lobby under version 1
    filt = "n < 1000"
    stage.add("s-r", filt)
    out, log = tmp_path / "ids.txt", tmp_path / "client.log"

    def start() -> subprocess.Popen[bytes]:
        with log.open("a") as err:
            cmd = [sys.executable, "-c", RESUMING_CHILD, kafka_conn.bootstrap_servers, topic_prefix, str(out), filt]
            return subprocess.Popen(cmd, stderr=err, stdout=subprocess.DEVNULL, cwd=ROOT, start_new_session=True)

    def handed() -> list[str]:
        return out.read_text().split() if out.exists() else []

    def wait(condition: Any, what: str, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {log.read_text()[-2000:]}"
            time.sleep(0.1)

    group = Consumer(kafka_conn.confluent(**{"group.id": "siftstream-client-s-r", "enable.auto.commit": False}))
    lobby = channel_topic(LOBBY, topic_prefix)
    stream = [event(i, n=(i * 37) % 1300) for i in range(300)]
    first = start()
    second: subprocess.Popen[bytes] | None = None
    try:
        wait(lambda: "[subscribe] s-r" in log.read_text(), "the first subscription")
        for e in stream[:100]:
            stage.deliver(e)
        wait(lambda: len(handed()) >= 50, "50 events handed over")
        wait(lambda: group.committed([TopicPartition(lobby, 0)], timeout=10)[0].offset > 0, "a committed position")
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
        first_life = handed()
        seen_committed = group.committed([TopicPartition(lobby, 0)], timeout=10)[0].offset
        for e in stream[100:200]:  # while it is down: more in the lobby, then the move, then channel 1
            stage.deliver(e)
        stage.plan(2, {"s-r": 1})
        stage.install(2)
        for e in stream[200:]:
            stage.deliver(e)
        second = start()
        expected = {e["event_id"] for e in stream if e["attributes"]["n"] < 1000}
        wait(lambda: set(handed()) >= expected, "every matching event")
    finally:
        group.close()
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
    second_life = handed()[len(first_life) :]
    subscribes = [ln for ln in log.read_text().splitlines() if ln.startswith("[subscribe] s-r")]
    print(f"\nfirst life {len(first_life)} events, second {len(second_life)}; {subscribes}")
    assert subscribes[1].endswith("(resumed)") and " on channel 0 (version 1) " in subscribes[1], subscribes
    assert max(Counter(second_life).values()) == 1 and max(Counter(first_life).values()) == 1
    assert set(first_life) | set(second_life) == expected
    assert set(second_life) >= expected - set(first_life)
    # it went on from the position committed before the kill, not from the lobby's start
    assert int(subscribes[1].split(" from offset ")[1].split()[0]) == seen_committed > 0
