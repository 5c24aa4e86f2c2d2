"""The JVM decoder/validator (streaming.decode) against the Python one (schemas.rules.classify)."""

from __future__ import annotations

import random

import pytest

from producers.events import EventGenerator
from producers.faults import FAULTS, corrupt
from schemas.codec import codec_for
from schemas.rules import classify
from schemas.topics import INPUT_TOPICS, TOPICS

pytestmark = pytest.mark.spark


def _kafka_rows(values: list[tuple[str, bytes | None]]) -> list[tuple]:
    import datetime

    ts = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    return [(b"k", v, t, 0, i, ts) for i, (t, v) in enumerate(values)]


def _frame(spark, values):  # type: ignore[no-untyped-def]
    schema = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
    return spark.createDataFrame(_kafka_rows(values), schema)


def _hand_made_inputs() -> list[tuple[str, bytes | None]]:
    """Good and bad values for every input topic, including every fault kind on events."""
    rng = random.Random(3)
    events = EventGenerator(publishers=3, seed=3).batch(40, 1_700_000_000_000)
    out: list[tuple[str, bytes | None]] = [("siftstream.events.v1", codec_for("Event").encode(e)) for e in events[:20]]
    for i, kind in enumerate(sorted(FAULTS) * 2):
        out.append(("siftstream.events.v1", corrupt(kind, rng, events[20 + i % 20])[0]))
    out.append(("siftstream.events.v1", None))  # a tombstone on a non-table topic is bad
    # names that join into a valid-looking list: the JVM joins keys with \x01 before its regex
    # and names at the edges of the name class, which the JVM tests as [\w.] (ASCII only)
    odd = ({"\u00e9": 1}, {"a\u00df": 1.5}, {"a\u0663": 1}, {"1a": 1}, {".a": 1}, {"a b": 1}, {"a.b_9": 1, "_Z": 2.0})
    for extra in ({"a\x01b": 1}, {"a": 1, "b\x01": 2.0}, *odd):
        bad_names = {**events[0], "attributes": {**events[0]["attributes"], **extra}}
        out.append(("siftstream.events.v1", codec_for("Event").encode(bad_names)))
    sub = codec_for("Subscription")
    out += [
        (
            "siftstream.subscriptions.v1",
            sub.encode({"type": "subscribe", "subscription_id": "s1", "subscriber_id": "u1", "filter": "price < 10"}),
        ),
        (
            "siftstream.subscriptions.v1",
            sub.encode({"type": "subscribe", "subscription_id": "s2", "subscriber_id": None, "filter": "price < 10"}),
        ),
        (
            "siftstream.subscriptions.v1",
            sub.encode(
                {
                    "type": "subscribe",
                    "subscription_id": "s3",
                    "subscriber_id": "u",
                    "filter": "a = 1",
                    "composite": '{"op": "or"}',
                }
            ),
        ),
        ("siftstream.subscriptions.v1", sub.encode({"type": "unsubscribe", "subscription_id": "s1"})),
        (
            "siftstream.subscriptions.v1",
            sub.encode(
                {
                    "type": "subscribe",
                    "subscription_id": "s4",
                    "subscriber_id": "u",
                    "filter": "a = 1",
                    "min_reliability": 1.5,
                }
            ),
        ),
        ("siftstream.subscriptions.v1", None),  # tombstone on a table: a valid deletion
    ]
    link = codec_for("LinkSample")
    base = {"from": "b1", "to": "b2", "seq": 1, "sent_at": 5, "delay_ms": 2.5, "lost": False}
    out += [
        ("siftstream.telemetry.links.v1", link.encode(base)),
        ("siftstream.telemetry.links.v1", link.encode({**base, "delay_ms": None, "lost": True})),
        ("siftstream.telemetry.links.v1", link.encode({**base, "delay_ms": None})),
        ("siftstream.telemetry.links.v1", link.encode({**base, "delay_ms": -1.0})),
        ("siftstream.telemetry.links.v1", link.encode({**base, "delay_ms": float("inf")})),
        ("siftstream.telemetry.links.v1", link.encode({**base, "from": ""})),
    ]
    broker = codec_for("BrokerSample")
    out += [
        ("siftstream.telemetry.brokers.v1", broker.encode({"broker_id": "b1", "arrived_at": 1, "service_ms": 0.5})),
        (
            "siftstream.telemetry.brokers.v1",
            broker.encode({"broker_id": "b1", "arrived_at": 1, "service_ms": float("nan")}),
        ),
        (
            "siftstream.telemetry.brokers.v1",
            broker.encode({"broker_id": "b1", "arrived_at": 1, "service_ms": 1.0, "queue_length": -2}),
        ),
    ]
    topo = codec_for("TopologyElement")
    out += [
        (
            "siftstream.topology.v1",
            topo.encode(
                {"element_id": "b1->b2", "kind": "link", "from": "b1", "to": "b2", "cost": 1.0, "reliability": 0.99}
            ),
        ),
        ("siftstream.topology.v1", topo.encode({"element_id": "b1->b2", "kind": "link", "from": "b1"})),
        ("siftstream.topology.v1", topo.encode({"element_id": "b9", "kind": "broker", "bandwidth_mbps": 0.0})),
        ("siftstream.topology.v1", None),
    ]
    receipt = codec_for("Receipt")
    out += [
        ("siftstream.receipts.v1", receipt.encode({"subscriber_id": "u1", "event_id": "e1", "received_at": 3})),
        ("siftstream.receipts.v1", receipt.encode({"subscriber_id": "u1", "event_id": "e1", "received_at": -3})),
        ("siftstream.receipts.v1", codec_for("Event").encode(events[0])),  # another topic's schema
    ]
    return out


def verdict(df, specs):  # type: ignore[no-untyped-def]
    """Rows of several topics through streaming.decode.decode, topic by topic, as the job does."""
    from functools import reduce

    from streaming.decode import decode

    parts = [decode(df.where(df.topic == topic), spec).drop("record") for topic, spec in specs.items()]
    return reduce(lambda a, b: a.unionByName(b), parts)


def _python_codes(values: list[tuple[str, bytes | None]]) -> list[str | None]:
    return [classify(v, TOPICS[t].schema, TOPICS[t].compacted)[0] for t, v in values]


def test_jvm_verdicts_equal_python_verdicts_on_every_input_topic(spark) -> None:  # type: ignore[no-untyped-def]
    values = _hand_made_inputs()
    specs = {t.name: t for t in INPUT_TOPICS}
    rows = verdict(_frame(spark, values), specs).orderBy("offset").collect()
    got = [r.error_code for r in rows]
    assert got == _python_codes(values)
    # every error class occurs, so the comparison above covers them all
    assert {"bad_framing", "unknown_schema", "malformed_body", "invalid_value", None} <= set(got)
    for row in rows:
        assert (row.reason is None) == (row.error_code is None)


def test_reasons_name_the_field_and_the_rule(spark) -> None:  # type: ignore[no-untyped-def]
    values = _hand_made_inputs()
    rows = verdict(_frame(spark, values), {t.name: t for t in INPUT_TOPICS}).orderBy("offset").collect()
    by_text = [r.reason for r in rows if r.error_code == "invalid_value"]
    assert any("delay_ms is required when lost is False" in t for t in by_text)
    assert any("min_reliability must be <= 1 (got 1.5)" in t for t in by_text)
    assert any("exactly one of filter and composite" in t for t in by_text)
    assert any("queue_length must be >= 0 (got -2)" in t for t in by_text)
    wrong = [r.reason for r in rows if r.topic == "siftstream.receipts.v1" and r.error_code == "unknown_schema"]
    assert wrong == ["record is a Event, this topic carries Receipt"]


def test_generated_records_have_identical_verdicts(spark) -> None:  # type: ignore[no-untyped-def]
    """Hypothesis-generated records of every input schema (valid and not) through both twins."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from tests.strategies import records_for

    specs = {t.name: t for t in INPUT_TOPICS}
    collected: list[tuple[str, bytes | None]] = []

    @settings(max_examples=60, suppress_health_check=list(HealthCheck), deadline=None)
    @given(st.data())
    def gather(data: st.DataObject) -> None:
        spec = data.draw(st.sampled_from(INPUT_TOPICS))
        codec = codec_for(spec.schema)
        record = data.draw(records_for(codec.schema, allow_nonfinite=True))
        collected.append((spec.name, codec.encode_wire(record)))

    gather()
    rows = verdict(_frame(spark, collected), specs).orderBy("offset").collect()
    assert [r.error_code for r in rows] == _python_codes(collected)


def test_decode_gives_the_record_and_dead_letters_round_trip(spark) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    from schemas.codec import decode
    from streaming.decode import dead_letters, good
    from streaming.decode import decode as spark_decode

    values = [(t, v) for t, v in _hand_made_inputs() if t == "siftstream.events.v1"]
    decoded = spark_decode(_frame(spark, values), TOPICS["siftstream.events.v1"])
    ok = (
        good(decoded)
        .select(
            "offset",
            F.col("record.event_id").alias("event_id"),
            F.col("record.attributes.doubles")["price"].alias("price"),
        )
        .collect()
    )
    expected_ok = [i for i, code in enumerate(_python_codes(values)) if code is None]
    assert [r.offset for r in ok] == expected_ok
    for r in ok:
        _, rec = decode(values[r.offset][1], "Event")
        assert (r.event_id, r.price) == (rec["event_id"], rec["attributes"]["price"])
    letters = dead_letters(decoded).collect()
    assert len(letters) == len(values) - len(expected_ok)
    for letter in letters:
        _, rec = decode(bytes(letter.value), "DeadLetter")
        assert rec["dead_letter_id"] == bytes(letter.key).decode() == f"siftstream.events.v1/0/{rec['source_offset']}"
        assert rec["value"] == values[rec["source_offset"]][1]
        assert rec["error_code"] == _python_codes(values)[rec["source_offset"]]


def test_attribute_names_and_repeats_have_identical_verdicts(spark) -> None:  # type: ignore[no-untyped-def]
    """Names at every edge of the JVM's regex-free name check (streaming.decode._names_broken):
    the characters URLEncoder keeps or turns into '+', the separator, characters just below and
    above 'A', non-ASCII, empty names; and names repeated across the typed maps."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    codec = codec_for("Event")
    name = st.text(alphabet="aZ_9.-* +%\x01\x00@[`{~\u00e9\u0663\U0001f600", max_size=4)
    valid = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.]{0,3}", fullmatch=True)
    names = st.one_of(name, valid, valid, valid)
    collected: list[tuple[str, bytes | None]] = []

    kinds_ = st.sampled_from(("longs", "doubles", "strings", "booleans"))

    @settings(max_examples=300, suppress_health_check=list(HealthCheck), deadline=None)
    @given(st.lists(names, max_size=5), st.lists(kinds_, max_size=5))
    def gather(keys: list[str], kinds: list[str]) -> None:
        maps: dict[str, dict] = {"longs": {}, "doubles": {}, "strings": {}, "booleans": {}}
        values = {"longs": 1, "doubles": 1.5, "strings": "x", "booleans": True}
        for key, kind in zip(keys, kinds + ["longs"] * len(keys), strict=False):
            maps[kind][key] = values[kind]
        if keys and kinds:  # now and then one name in two maps
            other = "strings" if kinds[0] != "strings" else "longs"
            if len(keys) % 2:
                maps[other][keys[0]] = values[other]
        record = {"event_id": "e", "publisher_id": "p", "published_at": 1, "lifetime_ms": 5, "attributes": maps}
        collected.append(("siftstream.events.v1", codec.encode_wire(record)))

    gather()
    codes = _python_codes(collected)
    assert {None, "invalid_value"} <= set(codes)  # both outcomes occur
    rows = verdict(_frame(spark, collected), {"siftstream.events.v1": TOPICS["siftstream.events.v1"]})
    assert [r.error_code for r in rows.orderBy("offset").collect()] == codes


def test_every_record_is_decoded_once_per_schema_version(spark) -> None:  # type: ignore[no-untyped-def]
    """The optimizer may inline the decoded record into every rule that reads it (a filter on the
    verdict pushed below the decoding did so 63 times): in the plan of each way the jobs read
    decoded rows, each schema version's from_avro must occur once, or decoding runs once per rule."""
    from schemas.codec import versions_of
    from streaming.decode import dead_letters, decode, good
    from streaming.driver_batch import FIELDS, TopicReader

    def decodings(df) -> int:  # type: ignore[no-untyped-def]
        return str(df._jdf.queryExecution().executedPlan().toString()).count("from_avro(")

    df = _frame(spark, [("t", b"")])
    for spec in INPUT_TOPICS:
        versions = len(versions_of(spec.schema))
        assert decodings(good(decode(df, spec))) == versions, spec.name
        assert decodings(dead_letters(decode(df, spec))) == versions, spec.name
    framed = df.selectExpr("*", "unix_millis(timestamp) AS ts_ms")
    for topic in FIELDS:
        reader = TopicReader(spark, topic, topic)
        assert decodings(reader.plan(framed)) == len(versions_of(TOPICS[topic].schema)), topic
