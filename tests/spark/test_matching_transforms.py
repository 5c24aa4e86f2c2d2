"""The matching job's DataFrame pieces on a local SparkSession, without Kafka: Kafka rows of events
through ``event_rows`` -> ``mapInArrow(match_batches)`` (the Kafka rows to write), and the subscription rows
the driver plans from. Expected matches come from ``BruteForceIndex``; expected dead letters from
``streaming.decode.dead_letters``, the validation job's encoder."""

from __future__ import annotations

import datetime
import functools
import random
from types import SimpleNamespace
from typing import Any

import pytest

from producers.events import EventGenerator
from producers.faults import FAULTS, corrupt
from routing.matching.index import BruteForceIndex
from routing.matching.table import SubscriptionTable
from schemas.codec import codec_for, decode
from schemas.rules import classify
from schemas.topics import TOPICS

pytestmark = pytest.mark.spark

EVENTS, SUBS = TOPICS["siftstream.events.v1"], TOPICS["siftstream.subscriptions.v1"]
FILTERS = {
    "s1": "symbol = 'IBM'",
    "s2": "price < 100",
    "s3": "sector in ('tech', 'retail') and volume >= 500",
    "s4": "urgent = true",
    "s5": "exchange startswith 'N' and price >= 50",
    "s6": "region exists and volume < 0",
    "s7": "mixed = 3",  # event 3 carries the long 3, event 6 the double 3.0
}


def _frame(spark, topic: str, rows: list[tuple[bytes | None, bytes | None]]):  # type: ignore[no-untyped-def]
    ts = datetime.datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=datetime.UTC)  # dead letters: ms, truncated
    data = [(k, v, topic, i % 2, i, ts) for i, (k, v) in enumerate(rows)]
    schema = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
    return spark.createDataFrame(data, schema)


def _events() -> list[tuple[bytes | None, bytes | None]]:
    """Good events (one name with two value kinds across events), then one of every fault kind."""
    rng = random.Random(5)
    codec = codec_for("Event")
    events = EventGenerator(publishers=3, seed=5).batch(60, 1_700_000_000_000)
    for i, e in enumerate(events):
        e["attributes"]["mixed"] = i if i % 2 else float(i) / 2  # long here, double there
    events[5]["attributes"]["note"] = "naïve"  # non-ASCII: the fast path refers it, the reference takes it
    out: list[tuple[bytes | None, bytes | None]] = [(e["publisher_id"].encode(), codec.encode(e)) for e in events]
    out += [(b"bad", corrupt(kind, rng, events[i])[0]) for i, kind in enumerate(sorted(FAULTS))]
    return out


def _ship(filters: dict[str, str]) -> Any:
    from streaming.arrow_matching import ShipState

    table = SubscriptionTable()
    table.apply(filters.items())
    return ShipState("spark-test", "match", 0, SimpleNamespace(value={}), table.deltas(), table.version)


def test_every_event_becomes_a_match_or_the_validation_jobs_dead_letter(spark) -> None:  # type: ignore[no-untyped-def]
    from schemas.match_records import OUTPUT_SCHEMA, Targets
    from streaming.arrow_matching import match_batches
    from streaming.decode import dead_letters
    from streaming.decode import decode as spark_decode
    from streaming.matching_job import event_rows

    values = _events()
    frame = _frame(spark, "ev", values).unionByName(_frame(spark, "other", values[:3]))
    body = functools.partial(match_batches, _ship(FILTERS), Targets("ev", "matches", "dead"))
    rows = event_rows(frame, "ev").mapInArrow(body, OUTPUT_SCHEMA).collect()
    assert len(rows) == len(values)

    oracle = BruteForceIndex()
    for sid, text in FILTERS.items():
        oracle.add(sid, text)
    good = [(i, decode(v, "Event")[1]) for i, (_, v) in enumerate(values) if classify(v, "Event")[0] is None]
    expected = {
        rec["event_id"]: {
            "event_id": rec["event_id"],
            "publisher_id": rec["publisher_id"],
            "published_at": rec["published_at"],
            "subscription_ids": ids,
        }
        for (_, rec), ids in zip(good, oracle.match([r["attributes"] for _, r in good]).all_ids(), strict=True)
    }
    matches = {bytes(r.key).decode(): decode(bytes(r.value), "Match")[1] for r in rows if r.topic == "matches"}
    assert matches == expected
    assert sum(len(m["subscription_ids"]) for m in matches.values()) > len(matches)  # a real test: many match
    assert any(m["subscription_ids"] == [] for m in matches.values())
    assert [k for k, m in sorted(matches.items()) if "s7" in m["subscription_ids"]] == ["p0-1", "p0-2"]

    letters = sorted((bytes(r.key), bytes(r.value)) for r in rows if r.topic == "dead")
    ev = frame.where("topic = 'ev'")
    reference = sorted((bytes(r.key), bytes(r.value)) for r in dead_letters(spark_decode(ev, EVENTS)).collect())
    assert letters == reference and len(letters) == len(FAULTS)


def sub(sid: str, **fields: Any) -> tuple[bytes, bytes]:
    """A subscribe record of ``sid`` (key, single-object Avro value) with ``fields`` over the defaults."""
    record = {"type": "subscribe", "subscription_id": sid, "subscriber_id": "u1", **fields}
    return sid.encode(), codec_for("Subscription").encode(record)


def test_subscription_rows_plan_the_changes_and_their_dead_letters(spark) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    from streaming.decode import dead_letters
    from streaming.decode import decode as spark_decode
    from streaming.driver_batch import RAW_EXPRS, TopicReader
    from streaming.subscription_rows import PlannedRecords, SubscriptionRows, subscription_dead_letters

    codec = codec_for("Subscription")

    values: list[tuple[bytes | None, bytes | None]] = [
        sub("s1", filter="price < 10"),
        sub("s2", filter="price <"),  # invalid filter
        sub("s3", composite='{"op": "or", "children": ["a = 1", "b = 2"]}'),  # skipped
        sub("s4", filter="a = 1", subscriber_id=None),  # invalid value (rules)
        (b"s5", b"\x00garbage"),  # bad framing
        sub("s6", filter="b = 'x'"),
        (b"s6", None),  # tombstone
        (b"s1", codec.encode({"type": "unsubscribe", "subscription_id": "s1"})),
        sub("s7", filter="c exists"),
    ]
    frame = _frame(spark, "subs", values).withColumn("partition", F.lit(0))  # one partition: one order
    reader = TopicReader(spark, "siftstream.subscriptions.v1", "matching", raw=True)
    raw = frame.selectExpr(*RAW_EXPRS).toArrow()
    rows = SubscriptionRows(reader.collect(raw))
    planned = PlannedRecords.of(rows)
    table = SubscriptionTable()
    table.apply(planned.changes)
    rejected = planned.rejected
    assert dict(table.filters) == {"s7": "c exists"} and planned.skipped == 1
    assert [(r["offset"], code) for r, (code, _) in rejected] == [
        (1, "invalid_filter"),
        (3, "invalid_value"),
        (4, "bad_framing"),
    ]

    written = subscription_dead_letters(rejected, "dead")
    assert {topic for topic, _, _ in written} == {"dead"}
    letters = dict((key, value) for _, key, value in written)
    # the decoder's own rejects are byte-identical to the validation job's dead letters
    reference = {bytes(r.key): bytes(r.value) for r in dead_letters(spark_decode(frame, SUBS)).collect()}
    assert {k: letters[k] for k in reference} == reference
    bad_filter = decode(letters[b"subs/0/1"], "DeadLetter")[1]
    assert bad_filter["error_code"] == "invalid_filter" and "at position 7" in bad_filter["reason"]
    assert bad_filter["value"] == values[1][1] and bad_filter["source_timestamp"] == 1767268800123


def test_fast_subscription_rows_are_the_readers_rows_below_the_first_record_it_refers(spark) -> None:  # type: ignore[no-untyped-def]
    """The head start's decode without Spark gives, below the cut it lowers, the rows (and so the
    plan) that the TopicReader gives with the JVM; the records from the cut on are those the fast
    path cannot decide alone."""
    from pyspark.sql import functions as F

    from streaming.driver_batch import RAW_EXPRS, TopicReader
    from streaming.subscription_rows import PlannedRecords, SubscriptionRows, fast_subscription_rows

    codec = codec_for("Subscription")

    head = [
        sub("s1", filter="price < 10"),
        sub("s2", filter="price <"),
        (b"s1", None),
        sub("s3", composite='{"op": "or", "children": ["a = 1", "b = 2"]}'),
        (b"s4", codec.encode({"type": "unsubscribe", "subscription_id": "s4"})),
        sub("s5", filter="a between 1 and 9 and b = 3"),
    ]
    tail = [(b"s6", b"\x00garbage"), sub("s7", filter="c exists")]
    for p, values in enumerate([head + tail, head]):  # partition 0 has a record to refer, 1 has none
        frame = _frame(spark, "subs", values).withColumn("partition", F.lit(p))
        raw = frame.selectExpr(*RAW_EXPRS).toArrow()
        rows, cut = fast_subscription_rows(raw, {p: len(values)})
        assert cut == {p: len(head)}
        reader = TopicReader(spark, "siftstream.subscriptions.v1", "matching", raw=True)
        reference = SubscriptionRows(reader.collect(raw).filter(_offset_below(len(head))))
        assert rows.columns() == reference.columns()
        ours, theirs = PlannedRecords.of(rows), PlannedRecords.of(reference)
        assert ours.changes == theirs.changes and ours.skipped == theirs.skipped == 1
        assert [(r["offset"], why) for r, why in ours.rejected] == [(r["offset"], why) for r, why in theirs.rejected]


def _offset_below(n: int) -> Any:
    import pyarrow.compute as pc

    return pc.field("offset") < n
