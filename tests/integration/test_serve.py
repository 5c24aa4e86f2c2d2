"""``siftstream serve --demo`` end to end on the test broker: every job and the live feeds start as
one service, output topics fill, ``/metrics`` counters move between two scrapes, ``siftstream
status --json`` lists every job and topic, SIGTERM stops it within 30 s, and a second start
resumes from the checkpoints (the matching job's batches continue its offset log instead of
starting over from batch 0 and the earliest offsets).

Every wait has a deadline and says what it was waiting for when it runs out.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from infra.connection import KafkaConnection
from infra.kafka import free_ports
from schemas.topics import EVENTS_TOPIC, MATCHES_TOPIC, QOS_TOPIC, TOPICS
from streaming.readers import end_offsets
from streaming.status import JOBS, read_checkpoint

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]


def wait_for(what: str, check: Callable[[], Any], timeout_s: float, proc: subprocess.Popen[bytes], log: Path) -> Any:
    """Poll ``check`` until it returns something truthy; fail with ``what`` and the log's tail at the
    deadline, or at once when the service exited."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"serve exited ({proc.returncode}) while waiting for {what}:\n{tail(log)}")
        result = check()
        if result:
            return result
        time.sleep(1.0)
    pytest.fail(f"no {what} within {timeout_s:.0f} s:\n{tail(log)}")


def tail(log: Path, lines: int = 40) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def scrape(port: int) -> dict[str, float]:
    """The ``siftstream_`` samples of ``/metrics``: ``name{labels}`` -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line.startswith("siftstream_"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def ended(conn: KafkaConnection, topic: str) -> int:
    return sum(json.loads(end_offsets(conn, [topic]))[topic].values())


def start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "streaming.cli", "serve", *args], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
        )


def stop(proc: subprocess.Popen[bytes], log: Path) -> float:
    """SIGTERM, then the seconds until the process exited (killed and failed past 30 s)."""
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"serve did not stop within 30 s of SIGTERM:\n{tail(log)}")
    assert code == 0, f"serve exited {code} after SIGTERM:\n{tail(log)}"
    return time.monotonic() - started


def test_serve_demo_runs_every_job_reports_metrics_and_status_stops_and_resumes(
    kafka_conn: KafkaConnection, topic_prefix: str, tmp_path: Path
) -> None:
    (http_port,) = free_ports(1)
    checkpoints = tmp_path / "checkpoints"
    args = [
        "--demo",
        "--bootstrap-servers",
        kafka_conn.bootstrap_servers,
        "--topic-prefix",
        topic_prefix,
        "--home",
        str(tmp_path / "home"),
        "--checkpoint-dir",
        str(checkpoints),
        "--http-port",
        str(http_port),
        "--trigger-interval",
        "2 seconds",
        "--demo-rate",
        "20",
    ]
    log = tmp_path / "serve.log"
    proc = start(args, log)
    try:
        matches, qos = topic_prefix + MATCHES_TOPIC, topic_prefix + QOS_TOPIC
        wait_for("Match records", lambda: ended(kafka_conn, matches) > 0, 180, proc, log)
        wait_for("QoS reports", lambda: ended(kafka_conn, qos) > 0, 90, proc, log)

        first = scrape(http_port)
        wait_for(
            "more matching records processed on a second scrape",
            lambda: (
                scrape(http_port).get('siftstream_job_processed_records_total{job="matching"}', 0)
                > first.get('siftstream_job_processed_records_total{job="matching"}', 0)
            ),
            60,
            proc,
            log,
        )
        second = scrape(http_port)
        for job in JOBS:
            assert f'siftstream_job_batches_total{{job="{job}"}}' in second
            assert second[f'siftstream_job_up{{job="{job}"}}'] == 1.0
        assert second['siftstream_job_batches_total{job="validation"}'] > 0
        assert second["siftstream_matching_events_total"] > 0

        status = subprocess.run(
            [
                *[sys.executable, "-m", "streaming.cli", "status", "--json"],
                *["--bootstrap-servers", kafka_conn.bootstrap_servers, "--topic-prefix", topic_prefix],
                *["--checkpoint-dir", str(checkpoints), "--max-lag", "1000000000"],
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        doc = json.loads(status.stdout)
        assert [j["job"] for j in doc["jobs"]] == list(JOBS)
        topics = {t["topic"]: t["end_offset"] for t in doc["topics"]}
        assert set(topics) >= {topic_prefix + name for name in TOPICS}
        assert topics[matches] > 0
        by_job = {j["job"]: j for j in doc["jobs"]}
        assert by_job["matching"]["committed"] == 1 and by_job["matching"]["batch_id"] is not None
        assert doc["subscriptions"] > 0
        assert status.returncode == (0 if doc["healthy"] else 3), status.stderr

        seconds = stop(proc, log)
        print(f"serve stopped {seconds:.1f} s after SIGTERM")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    query = checkpoints / f"matching{topic_prefix}" / "query"
    before = read_checkpoint(query)
    assert before is not None
    proc = start([*args, "--jobs", "matching"], log)  # the matching job alone resumes sooner on 2 cores
    try:
        after = wait_for(
            "a matching batch committed after the restart",
            lambda: (p := read_checkpoint(query)) is not None and p.batch_id > before.batch_id and p,
            180,
            proc,
            log,
        )
        # the batches continue the offset log: batch 0 was not redone, and no offset went back
        assert (query / "offsets" / "0").exists() and after.batch_id > before.batch_id
        events = topic_prefix + EVENTS_TOPIC
        for partition, offset in before.offsets[events].items():
            assert after.offsets[events][partition] >= offset
        stop(proc, log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
