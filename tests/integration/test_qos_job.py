"""The QoS job end to end: a simulated overlay's records through the real broker and Spark.

The overlay simulator (producers.overlay) emits what a real overlay would: its topology, one
subscription per subscriber (with a wish of 0.999), events, link and broker telemetry, and
receipts. The job must report, per subscriber, a predicted R'_s close to the measured R_s and
the simulator's ground truth, raise critical alerts naming real brokers and links, send broken
telemetry to the dead-letter topic without losing valid records, and resume from its state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from infra.connection import KafkaConnection
from producers import overlay
from producers.kafka_writer import KafkaWriter
from routing.reliability.evaluation_system import reliability_tree_system
from schemas.codec import codec_for
from streaming.qos_job import QosConfig, run
from streaming.readers import read_topic

pytestmark = pytest.mark.kafka

EPOCH_MS = 1_760_000_000_000
SECONDS = 240.0


def system() -> dict[str, Any]:
    return reliability_tree_system(
        5, brokers=6, publishers=4, subscribers=15, rate_per_s=4.0, ms_per_subscription=3.0, content_entries=12
    )


def send(conn: KafkaConnection, prefix: str, rows: list[tuple[float, str, str, dict[str, Any]]]) -> int:
    writer = KafkaWriter(conn)
    codecs = {t: codec_for(s) for t, s in overlay.SCHEMA_OF.items()}
    for _t, topic, key, record in rows:
        writer.send(prefix + topic, key, codecs[topic].encode(record))
    report = writer.flush()
    assert not report.failed, report.errors
    return len(rows)


def latest(records: list[Any], kind: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for r in records:
        v = r.value
        if v["kind"] == kind and (v["id"] not in out or v["window_end"] >= out[v["id"]]["window_end"]):
            out[v["id"]] = v
    return out


def test_qos_job_predicts_measures_alerts_and_resumes(
    spark: Any, kafka_conn: KafkaConnection, topic_prefix: str, tmp_path: Path
) -> None:
    sysdoc = system()
    result = overlay.run(sysdoc, SECONDS, seed=4, telemetry=True)
    assert result.telemetry is not None
    rows = list(overlay.records(sysdoc, result.telemetry, EPOCH_MS, min_reliability=0.999))
    half = EPOCH_MS + SECONDS * 500.0
    first = [r for r in rows if r[0] + EPOCH_MS < half]
    second = [r for r in rows if r[0] + EPOCH_MS >= half]
    send(kafka_conn, topic_prefix, first)

    # broken telemetry: garbage bytes and a record that breaks a rule
    writer = KafkaWriter(kafka_conn)
    writer.send(topic_prefix + "siftstream.telemetry.links.v1", "x", b"not avro at all")
    bad_receipt = codec_for("Receipt").encode({"subscriber_id": "s1", "event_id": "e", "received_at": -5})
    writer.send(topic_prefix + "siftstream.receipts.v1", "s1", bad_receipt)
    assert not writer.flush().failed

    cfg = QosConfig(
        conn=kafka_conn,
        checkpoint=tmp_path / "ckpt",
        topic_prefix=topic_prefix,
        available_now=True,
        update_period_ms=10_000,
        window_buckets=30,
        lateness_ms=5_000,
    )
    history = run(spark, cfg, quiet=True)
    assert sum(b.dead_letters for b in history) == 2
    assert sum(sum(b.records.values()) for b in history) == len(first)  # every valid record was read
    dead = read_topic(kafka_conn, topic_prefix + "siftstream.deadletter.v1", "DeadLetter")
    assert sorted(d.value["error_code"] for d in dead) == ["bad_framing", "invalid_value"]
    first_reports = read_topic(kafka_conn, topic_prefix + "siftstream.qos.v1", "QosReport")
    assert first_reports

    # resume: the second half of the run, the same checkpoint
    send(kafka_conn, topic_prefix, second)
    history = run(spark, cfg, quiet=True)
    assert history and not any(b.dead_letters for b in history)
    reports = read_topic(kafka_conn, topic_prefix + "siftstream.qos.v1", "QosReport")
    ends = sorted({r.value["window_end"] for r in reports})
    assert ends[-1] >= EPOCH_MS + (SECONDS - 20) * 1000  # reports kept coming after the restart
    assert np.all(np.diff(ends) == 10_000)  # one window per period, none skipped or repeated

    subs = latest(reports, "subscriber")
    brokers = latest(reports, "broker")
    assert set(subs) == {s["id"] for s in sysdoc["subscribers"]}
    assert set(brokers) == {b["id"] for b in sysdoc["brokers"]}
    judged = [
        (v["reliability"], v["measured_reliability"], result.subscribers[sid].reliability)
        for sid, v in subs.items()
        if v["reliability"] is not None and v["measured_reliability"] is not None
    ]
    assert len(judged) >= 10
    predicted, measured, truth = (np.array(x) for x in zip(*judged, strict=True))
    assert np.mean(np.abs(predicted - measured)) < 0.06
    assert np.mean(np.abs(measured - truth)) < 0.06
    names = {b["id"] for b in sysdoc["brokers"]} | {f"{x['from']}->{x['to']}" for x in sysdoc["links"]}
    alerts = [v["alert"] for v in subs.values() if v["alert"] is not None]
    assert any(a["severity"] == "critical" for a in alerts)
    for a in alerts:
        assert "0.999" in a["message"]
        assert {c["element"] for c in a["contributors"]} <= names
    for bid, v in brokers.items():
        assert v["rho"] == pytest.approx(result.brokers[bid].rho, abs=0.06)
