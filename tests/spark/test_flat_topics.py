"""The driver jobs' fast path for flat telemetry (``TopicReader`` with ``schemas.columnar``)
against their JVM path: the same Arrow table, good rows and dead-letter rows alike."""

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


def test_table_topics_and_rich_records_keep_the_jvm_path(spark: Any) -> None:
    assert TopicReader(spark, "siftstream.events.v1", "e").flat is None
    assert TopicReader(spark, "siftstream.topology.v1", "t").flat is None
    assert TopicReader(spark, "siftstream.receipts.v1", "r").flat is not None
