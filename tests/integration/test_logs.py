"""Logs of a real job (docs/guide/logs.md): with ``--log-format json`` every line on standard error
is one JSON object (the JVM's one launcher warning aside), a batch line carries its fields as
numbers, and Spark's per-batch "locally checkpointed" warning is hidden."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from infra.connection import KafkaConnection

# printed by the JVM itself before any logging exists: Spark's launcher always adds the module
JVM_LAUNCHER_LINE = "WARNING: Using incubator modules: jdk.incubator.vector"


def _siftstream(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streaming.cli", *argv], capture_output=True, text=True, timeout=600, check=False
    )


def _json_lines(stderr: str) -> list[dict[str, object]]:
    docs = []
    for line in stderr.splitlines():
        if line == JVM_LAUNCHER_LINE:
            continue
        docs.append(json.loads(line))  # fails the test on a line that is not JSON
    return docs


def test_a_job_logs_json_lines_with_its_batch_fields(
    kafka_conn: KafkaConnection, topic_prefix: str, tmp_path: Path
) -> None:
    common = ["--bootstrap-servers", kafka_conn.bootstrap_servers, "--topic-prefix", topic_prefix]
    common += ["--home", str(tmp_path)]
    simulated = _siftstream("--log-format", "json", "simulate", "--seconds", "5", *common)
    assert simulated.returncode == 0, simulated.stderr[-3000:]
    assert any(d["logger"] == "siftstream.simulate" for d in _json_lines(simulated.stderr))

    done = _siftstream("--log-format", "json", "qos-job", "--available-now", *common)
    assert done.returncode == 0, done.stderr[-3000:]
    docs = _json_lines(done.stderr)
    batches = [d for d in docs if d.get("job") == "qos" and "batch_id" in d]
    assert batches, done.stderr[-3000:]
    for d in batches:
        assert d["level"] == "INFO" and str(d["ts"]).endswith("Z")
        assert isinstance(d["reports"], int) and isinstance(d["duration_ms"], float)
        assert str(d["message"]).startswith(f"batch {d['batch_id']}: ")
    assert not [d for d in docs if "locally checkpointed" in str(d["message"])]
