"""The driver jobs' fast paths (``TopicReader`` with ``schemas.columnar``: flat telemetry, and
events) against their JVM path: the same Arrow table, good rows and dead-letter rows alike."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from schemas.codec import codec_for
from streaming.driver_batch import TopicReader

pytestmark = pytest.mark.spark

LINKS = "siftstream.telemetry.links.v1"
BROKERS = "siftstream.telemetry.brokers.v1"
EVENTS = "siftstream.events.v1"


def _values(n_good: int, seed: int) -> list[tuple[str, bytes | None, bytes | None]]:
    """(topic, key, value): good link and broker samples, and bad ones of every kind the fast
    path must refer (broken rules, damaged bytes, tombstone, old framing, non-ASCII text)."""
    rng = random.Random(seed)
    link, broker = codec_for("LinkSample"), codec_for("BrokerSample")
    out: list[tuple[str, bytes | None, bytes | None]] = []
    for i in range(n_good):
        lost = rng.random() < 0.1
        rec = {
            "from": f"b{rng.randrange(20)}",
            "to": f"b{rng.randrange(20)}",
            "seq": i,
            "sent_at": 1_700_000_000_000 + i,
            "delay_ms": None if lost else rng.expovariate(0.5),
            "lost": lost,
            "event_id": None if rng.random() < 0.5 else f"e{i}",
        }
        out.append((LINKS, f"{rec['from']}->{rec['to']}".encode(), link.encode(rec)))
        b = {
            "broker_id": f"b{i % 7}",
            "event_id": f"e{i}",
            "arrived_at": 1_700_000_000_000 + i,
            "wait_ms": rng.random(),
            "service_ms": rng.random(),
            "queue_length": rng.randrange(5),
        }
        out.append((BROKERS, None if i % 3 else b"k", broker.encode(b)))
    good = link.encode({"from": "a", "to": "b", "seq": 1, "sent_at": 5, "delay_ms": 1.0, "lost": False})
    bad = [
        link.encode({"from": "a", "to": "b", "seq": 1, "sent_at": 5, "delay_ms": -1.0, "lost": False}),
        link.encode({"from": "a", "to": "b", "seq": 1, "sent_at": 5, "delay_ms": None, "lost": False}),
        link.encode({"from": "", "to": "b", "seq": -1, "sent_at": 5, "delay_ms": float("nan"), "lost": False}),
        link.encode({"from": "a\u00e9", "to": "b", "seq": 1, "sent_at": 5, "delay_ms": 2.0, "lost": False}),
        good[:-3],
        good[:4],
        None,
        codec_for("Receipt").encode({"subscriber_id": "u", "event_id": "e", "received_at": 1}),
    ]
    out += [(LINKS, b"bad", v) for v in bad]
    out.append((LINKS, "k\u00e9".encode(), good))  # a non-ASCII key: the JVM turns it into key_text
    rng.shuffle(out)
    return out


def _raw(rows: list[tuple[str, bytes | None, bytes | None]], topic: str) -> Any:
    """The rows of ``topic`` as the driver jobs collect a batch (``RAW_SCHEMA``)."""
    import pyarrow as pa

    mine = [(i, k, v) for i, (t, k, v) in enumerate(rows) if t == topic]
    return pa.table(
        {
            "topic": pa.array([topic] * len(mine), pa.string()),
            "partition": pa.array([i % 2 for i, _k, _v in mine], pa.int32()),
            "offset": pa.array([i for i, _k, _v in mine], pa.int64()),
            "ts_ms": pa.array([1_767_225_600_000 + i for i, _k, _v in mine], pa.int64()),
            "key": pa.array([k for _i, k, _v in mine], pa.binary()),
            "value": pa.array([v for _i, _k, v in mine], pa.binary()),
        }
    )


def _same_as_jvm(reader: TopicReader, batch: Any) -> list[dict[str, Any]]:
    """Decode ``batch`` by ``reader``'s fast path and by its JVM path, assert the same table, and
    return the JVM path's rows."""
    got = reader.collect(batch)
    want = reader.decoded(batch)
    assert got.schema == want.schema
    assert _sorted(got) == _sorted(want)
    return list(want.to_pylist())


def _sorted(table: Any) -> list[dict[str, Any]]:
    """The rows in partition/offset order, NaN spelled out (NaN != NaN would fail equal rows)."""
    rows = [
        {k: "NaN" if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()} for r in table.to_pylist()
    ]
    return sorted(rows, key=lambda r: (r["partition"], r["offset"]))


@pytest.mark.parametrize("raw", [False, True])
def test_fast_path_gives_the_jvm_table(spark: Any, raw: bool) -> None:
    """The fast path (its referred rows decoded by the JVM) gives the JVM path's table, with and
    without the raw bytes of every record."""
    rows = _values(300, seed=7)
    for topic in (LINKS, BROKERS):
        reader = TopicReader(spark, topic, topic, raw=raw)
        assert reader.flat is not None
        batch = _raw(rows, topic)
        got = reader.collect(batch)
        want = reader.decoded(batch)
        assert got.schema == want.schema
        assert _sorted(got) == _sorted(want)
        if topic == LINKS:  # 7 bad; the non-ASCII "from" and key are good, decoded by the JVM
            found = want.to_pylist()
            assert sum(r["error_code"] is not None for r in found) == 7
            assert {r["key_text"] for r in found if r["l_from"] == "a\u00e9" or r["key_text"] == "k\u00e9"} == {
                "bad",
                "k\u00e9",
            }
        assert reader.collect(batch.slice(0, 0)).schema == want.schema


def _events(seed: int) -> list[tuple[str, bytes | None, bytes | None]]:
    """(topic, key, value): good events of every attribute kind (none, one, several maps; odd
    doubles; text), and bad ones of every fault kind, bad names, a tombstone, a non-ASCII key."""
    from producers.events import EventGenerator
    from producers.faults import FAULTS, corrupt

    rng = random.Random(seed)
    codec = codec_for("Event")
    events = EventGenerator(publishers=4, seed=seed).batch(200, 1_700_000_000_000)
    events[0] = {**events[0], "attributes": {}}
    events[1] = {**events[1], "attributes": {"x": 1, "p": -0.0, "big": 2**62, "s": "IBM", "ok": False}}
    events[2] = {**events[2], "attributes": {"d": 2.5, "t": "caf\u00e9", "e": ""}}
    out: list[tuple[str, bytes | None, bytes | None]] = [
        (EVENTS, str(e["publisher_id"]).encode(), codec.encode(e)) for e in events[:180]
    ]
    for i, kind in enumerate(sorted(FAULTS) * 2):
        out.append((EVENTS, b"f", corrupt(kind, rng, events[180 + i % 20])[0]))
    for extra in ({"a\x01b": 1}, {"\u00e9": 1}, {"1a": 1}, {"a b": 1}):
        out.append((EVENTS, b"n", codec.encode({**events[3], "attributes": {**events[3]["attributes"], **extra}})))
    out.append((EVENTS, b"t", None))
    out.append((EVENTS, "k\u00e9".encode(), codec.encode(events[4])))  # good, its key for the JVM
    rng.shuffle(out)
    return out


@pytest.mark.parametrize("raw", [False, True])
def test_event_fast_path_gives_the_jvm_table(spark: Any, raw: bool) -> None:
    """Events decoded by the compiled pass (its referred rows by the JVM) give the JVM path's
    table: head fields, the four attribute maps entry for entry, verdicts and dead-letter bytes."""
    rows = _events(seed=11)
    reader = TopicReader(spark, EVENTS, EVENTS, raw=raw)
    assert reader.flat is None and reader.compiled is not None
    batch = _raw(rows, EVENTS)
    got = reader.collect(batch)
    want = reader.decoded(batch)
    assert got.schema == want.schema
    maps = [f"e_{kind}" for kind in ("longs", "doubles", "strings", "booleans")]

    def entries(v: list[tuple[str, Any]]) -> list[tuple[str, Any]]:  # order is not content; NaN spelled out
        return sorted((k, "NaN" if isinstance(x, float) and math.isnan(x) else x) for k, x in v)

    def as_mappings(table: Any) -> list[dict[str, Any]]:
        return [{k: entries(v) if k in maps and v is not None else v for k, v in r.items()} for r in _sorted(table)]

    assert as_mappings(got) == as_mappings(want)
    found = want.to_pylist()
    assert sum(r["error_code"] is None for r in found) == 181
    assert any(sorted(r["e_strings"] or []) == [("e", ""), ("t", "caf\u00e9")] for r in found)
    assert reader.collect(batch.slice(0, 0)).schema == want.schema


SUBSCRIPTIONS = "siftstream.subscriptions.v1"


def _subscriptions(seed: int) -> list[tuple[str, bytes | None, bytes | None]]:
    """(topic, key, value) of the compacted subscriptions topic: subscribes (filter, composite),
    unsubscribes, tombstones (an ASCII and a non-ASCII key), and bad records of each rule."""
    rng = random.Random(seed)
    codec = codec_for("Subscription")
    out: list[tuple[str, bytes | None, bytes | None]] = []
    for i in range(200):
        sid = f"s{i}"
        kind = rng.random()
        if kind < 0.6:
            rec = {"type": "subscribe", "subscription_id": sid, "subscriber_id": f"u{i % 9}", "filter": f"x > {i}",
                   "deadline_ms": rng.choice([None, 250]), "min_reliability": rng.choice([None, 0.9])}  # fmt: skip
        elif kind < 0.7:
            rec = {"type": "subscribe", "subscription_id": sid, "subscriber_id": "u", "composite": '{"op": "or"}'}
        else:
            rec = {"type": "unsubscribe", "subscription_id": sid}
        out.append((SUBSCRIPTIONS, sid.encode(), codec.encode(rec)))
    good = {"type": "subscribe", "subscription_id": "g", "subscriber_id": "u", "filter": "y = 1"}
    bad = [
        {**good, "composite": '{"op": "and"}'},  # both
        {**good, "filter": None},  # neither
        {**good, "subscriber_id": None},
        {**good, "min_reliability": 1.5},
        {**good, "deadline_ms": -1},
        {**good, "filter": ""},
        {**good, "filter": "caf\u00e9 = 1"},  # non-ASCII text: referred, good by the JVM
    ]
    out += [(SUBSCRIPTIONS, b"b", codec.encode(r)) for r in bad]
    raw = codec.encode(good)
    out += [(SUBSCRIPTIONS, b"d", v) for v in (raw[:-2], raw[:5], raw[:10] + b"\x09" + raw[11:])]
    out.append(
        (SUBSCRIPTIONS, b"r", codec_for("Receipt").encode({"subscriber_id": "u", "event_id": "e", "received_at": 1}))
    )
    out += [(SUBSCRIPTIONS, b"s7", None), (SUBSCRIPTIONS, "k\u00e9".encode(), None), (SUBSCRIPTIONS, None, None)]
    rng.shuffle(out)
    return out


@pytest.mark.parametrize("raw", [False, True])
def test_subscription_fast_path_gives_the_jvm_table(spark: Any, raw: bool) -> None:
    """The compacted subscriptions topic by the flat fast path (the enum, the pair rule, and
    tombstones with an ASCII key without the JVM) gives the JVM path's table."""
    rows = _subscriptions(seed=17)
    reader = TopicReader(spark, SUBSCRIPTIONS, SUBSCRIPTIONS, raw=raw)
    assert reader.flat is not None and reader.compacted
    found = _same_as_jvm(reader, _raw(rows, SUBSCRIPTIONS))
    assert sum(r["tombstone"] for r in found) == 3 and {r["s_op"] for r in found} >= {"subscribe", "unsubscribe"}
    assert sum(r["error_code"] is not None for r in found) >= 9


def test_the_schema_is_the_one_the_jvm_path_collects(spark: Any) -> None:
    """``TopicReader.schema``, made without a Spark job, is the schema ``toArrow`` gives the JVM
    path's plan over a frame, for every input topic and with the raw bytes."""
    from pyspark.sql import functions as F

    from schemas.topics import TOPICS
    from streaming.driver_batch import FIELDS, RAW_SCHEMA

    empty = spark.createDataFrame([], RAW_SCHEMA).withColumn("timestamp", F.timestamp_millis("ts_ms"))
    for topic in FIELDS:
        for raw in (False, True):
            reader = TopicReader(spark, topic, topic, raw=raw)
            assert reader.schema == reader.plan(empty).toArrow().schema, (topic, raw)
    assert SUBSCRIPTIONS in FIELDS and all(t in TOPICS for t in FIELDS)


def test_table_topics_and_rich_records_keep_the_jvm_path(spark: Any) -> None:
    assert TopicReader(spark, "siftstream.events.v1", "e").flat is None
    assert TopicReader(spark, "siftstream.topology.v1", "t").compiled is None
    assert TopicReader(spark, "siftstream.topology.v1", "t").flat is None
    assert TopicReader(spark, "siftstream.receipts.v1", "r").flat is not None


MATCHES = "siftstream.matches.v1"


def test_match_fast_path_gives_the_jvm_table(spark: Any) -> None:
    """Match records decoded by the compiled pass (its referred rows by the JVM) give the JVM
    path's table: lists of every length (none, one, many, in several blocks' worth), text the
    fast path refers, damaged bytes, a tombstone, another record."""
    rng = random.Random(13)
    codec = codec_for("Match")
    rows: list[tuple[str, bytes | None, bytes | None]] = []
    for i in range(300):
        ids = sorted(f"g{rng.randrange(10_000)}" for _ in range(rng.choice([0, 1, 3, 23, 200])))
        rec = {"event_id": f"s{i}", "publisher_id": f"gp{i % 8}", "published_at": 1_795_000_000_000 + i}
        rows.append((MATCHES, f"s{i}".encode(), codec.encode({**rec, "subscription_ids": ids})))
    good = codec.encode({"event_id": "e", "publisher_id": "p", "published_at": 1, "subscription_ids": ["a", "b"]})
    odd = {"event_id": "\u00e9", "publisher_id": "", "published_at": -3, "subscription_ids": ["x\u00df", ""]}
    rows += [(MATCHES, b"m", v) for v in (codec.encode(odd), good[:-2], good[:3], good + b"\x00", None)]
    rows.append((MATCHES, b"r", codec_for("Receipt").encode({"subscriber_id": "u", "event_id": "e", "received_at": 1})))
    rows.append((MATCHES, "k\u00e9".encode(), good))
    rng.shuffle(rows)
    reader = TopicReader(spark, MATCHES, MATCHES)
    assert reader.flat is None and reader.compiled is not None
    found = _same_as_jvm(reader, _raw(rows, MATCHES))
    assert sum(r["error_code"] is None for r in found) >= 302  # the 300, the odd text, the odd key
    assert max(len(r["m_subscriptions"] or []) for r in found) == 200
