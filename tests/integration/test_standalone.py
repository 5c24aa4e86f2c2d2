"""Scale-out proof: the unchanged validation job on a Spark standalone cluster on loopback."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from infra.connection import KafkaConnection
from producers.produce import ProduceConfig, produce_events
from streaming.readers import read_topic

pytestmark = [pytest.mark.kafka, pytest.mark.standalone]


def test_validation_job_runs_on_a_standalone_cluster(
    kafka_conn: KafkaConnection, topic_prefix: str, tmp_path: Path, standalone_cluster: Any
) -> None:
    cluster = standalone_cluster
    produced = produce_events(
        kafka_conn,
        ProduceConfig(topic_prefix + "siftstream.events.v1", 2000, bad_fraction=0.1, seed=9, progress=False),
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "streaming.cli",
            "validate",
            "--available-now",
            "--master",
            cluster.master_url,
            "--bootstrap-servers",
            kafka_conn.bootstrap_servers,
            "--topic-prefix",
            topic_prefix,
            "--checkpoint",
            str(tmp_path / "ckpt"),
            "--stats",
            str(tmp_path / "stats.jsonl"),
            "--home",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # the work ran on the cluster's executor, not in the driver
    assert list((tmp_path / "spark" / "work").glob("app-*")), "no application ran on the standalone worker"
    letters = read_topic(kafka_conn, topic_prefix + "siftstream.deadletter.v1", "DeadLetter")
    assert Counter(r.value["error_code"] for r in letters) == produced.expected_errors
