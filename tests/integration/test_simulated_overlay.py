"""The overlay simulator feeding the real broker: its telemetry passes the validation job untouched."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from infra.connection import KafkaConnection
from streaming.readers import read_topic
from streaming.validation_job import ValidationConfig, read_stats, run

pytestmark = pytest.mark.kafka


def test_simulated_telemetry_flows_through_kafka_and_validates(
    spark, kafka_conn: KafkaConnection, topic_prefix: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "streaming.cli",
            "simulate",
            "--seconds",
            "20",
            "--seed",
            "2",
            "--bootstrap-servers",
            kafka_conn.bootstrap_servers,
            "--topic-prefix",
            topic_prefix,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    receipts = read_topic(kafka_conn, topic_prefix + "siftstream.receipts.v1", "Receipt")
    links = read_topic(kafka_conn, topic_prefix + "siftstream.telemetry.links.v1", "LinkSample")
    assert receipts and links
    assert all((r.value["delay_ms"] is None) == r.value["lost"] for r in links)  # a delay exactly when delivered
    cfg = ValidationConfig(
        conn=kafka_conn,
        checkpoint=tmp_path / "ckpt",
        topic_prefix=topic_prefix,
        available_now=True,
        stats_file=tmp_path / "stats.jsonl",
    )
    run(spark, cfg, quiet=True)
    stats = read_stats(cfg.stats_file)
    assert not any(v for k, v in stats.items() if k.startswith("bad|")), stats
    assert stats[f"ok|{topic_prefix}siftstream.receipts.v1"] == len(receipts)
    assert stats[f"ok|{topic_prefix}siftstream.telemetry.links.v1"] == len(links)
