"""Scale-out proof on a Spark standalone cluster on loopback: the unchanged validation job and
``siftstream serve`` submitted with the real spark-submit (``siftstream submit``), the project
shipped to the executors as the zip of ``siftstream package`` (docs/guide/cluster.md). The
``--master spark://...`` path of a job command: tests/integration/test_matching_job.py."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from infra.connection import KafkaConnection
from infra.submit import ZIP_NAME, submit_env
from producers.produce import ProduceConfig, produce_events
from streaming.readers import read_topic
from tests.integration.test_matching_job import (
    apply_ops,
    base_subscriptions,
    check_phase,
    dead_letters,
    matches_by_event,
    produce,
    raw_events,
)
from tests.integration.test_serve import wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.standalone]

ROOT = Path(__file__).resolve().parents[2]


def test_validation_job_submitted_to_a_standalone_cluster(
    kafka_conn: KafkaConnection, topic_prefix: str, tmp_path: Path, standalone_cluster: Any
) -> None:
    """The unchanged validation job through ``siftstream submit`` (which becomes spark-submit):
    the dead letters are the producer's deliberate errors, the work ran in the cluster's executor,
    and the command's exit code is the job's."""
    cluster = standalone_cluster
    produced = produce_events(
        kafka_conn,
        ProduceConfig(topic_prefix + "siftstream.events.v1", 2000, bad_fraction=0.1, seed=9, progress=False),
    )
    command = [sys.executable, "-m", "streaming.cli", "submit", "--master", cluster.master_url]
    command += ["--dist", str(tmp_path / "dist"), "--driver-memory", "1g", "--", "validate", "--available-now"]
    command += ["--bootstrap-servers", kafka_conn.bootstrap_servers, "--topic-prefix", topic_prefix]
    command += ["--checkpoint", str(tmp_path / "ckpt"), "--stats", str(tmp_path / "stats.jsonl")]
    command += ["--home", str(tmp_path)]
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}  # the loopback cluster reaches the driver there
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    # the work ran on the cluster's executor, not in the driver
    assert list((tmp_path / "spark" / "work").glob("app-*/*/" + ZIP_NAME)), "no executor of the cluster ran it"
    # spark-submit passes on the Python driver's standard error in its standard output
    assert f"executors of {cluster.master_url}: " in done.stdout, done.stdout[-3000:]
    letters = read_topic(kafka_conn, topic_prefix + "siftstream.deadletter.v1", "DeadLetter")
    assert Counter(r.value["error_code"] for r in letters) == produced.expected_errors


def master_state(cluster: Any) -> dict[str, Any]:
    """The standalone master's JSON status page (applications, workers)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{cluster.webui_port}/json/", timeout=5) as resp:
        return json.load(resp)  # type: ignore[no-any-return]


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def test_serve_submitted_with_spark_submit_matches_on_the_cluster(
    kafka_conn: KafkaConnection, topic_prefix: str, tmp_path: Path, standalone_cluster: Any
) -> None:
    """``siftstream submit --dry-run`` prints the spark-submit command; run as printed, ``serve
    --jobs matching`` against the test's broker (outside Spark: --bootstrap-servers, with a
    --kafka-config file) writes the oracle's Match records and dead letters, the application holds
    the worker's cores, its Python workers import the project from the shipped zip, and SIGTERM to
    the driver stops it with exit 0."""
    cluster = standalone_cluster
    subs = base_subscriptions()
    bad_events = produce(kafka_conn, topic_prefix, subs, "a", 300, seed=11)

    # a client properties file as for a secured cluster: one key for both clients, one for Spark's only
    client = tmp_path / "client.properties"
    client.write_text("security.protocol=PLAINTEXT\njava.metadata.max.age.ms=60000\n")
    serve = ["serve", "--jobs", "matching", "--bootstrap-servers", kafka_conn.bootstrap_servers]
    serve += ["--kafka-config", str(client)]
    serve += ["--topic-prefix", topic_prefix, "--home", str(tmp_path / "home"), "--http-port", "-1"]
    serve += ["--checkpoint-dir", str(tmp_path / "checkpoints"), "--trigger-interval", "2 seconds"]
    submit = [sys.executable, "-m", "streaming.cli", "submit", "--master", cluster.master_url, "--dry-run"]
    submit += ["--dist", str(tmp_path / "dist"), "--driver-memory", "1g"]
    # numba caches the kernels it compiles from the zip per application folder: keep them in tmp_path
    submit += ["--conf", f"spark.executorEnv.XDG_CACHE_HOME={tmp_path / 'cache'}", "--", *serve]
    printed = subprocess.run(
        submit,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=True,
    )
    command = shlex.split(printed.stdout.strip())
    assert Path(command[0]).name == "spark-submit" and command[-len(serve) :] == serve
    assert command[command.index("--py-files") + 1] == str(tmp_path / "dist" / ZIP_NAME)

    log = tmp_path / "submit.log"
    env = {**submit_env(), "SPARK_LOCAL_IP": "127.0.0.1"}  # the loopback cluster reaches the driver there
    with log.open("ab") as out:
        # from another folder: nothing of the project is importable from the working directory
        proc = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
    try:
        model: dict[str, str] = {}
        bad_subs = apply_ops(model, subs)
        events = raw_events(kafka_conn, topic_prefix + "siftstream.events.v1")
        matches = wait_for(
            f"Match records for all {len(events)} valid events",
            lambda: m if len(m := matches_by_event(kafka_conn, topic_prefix)) >= len(events) else None,
            180,  # the first batch compiles the matching kernels in the executors (docs/guide/cluster.md, Limits)
            proc,
            log,
        )
        assert len(matches) == len(events)
        assert check_phase(matches, events, model, "a") > 0
        codes = Counter(d["error_code"] for d in dead_letters(kafka_conn, topic_prefix))
        assert codes == bad_events + bad_subs

        # the application runs on the cluster with the worker's cores ...
        apps = [a for a in master_state(cluster)["activeapps"] if a["name"] == "siftstream"]
        assert len(apps) == 1 and apps[0]["cores"] == cluster.worker_cores, apps
        # ... its executor fetched the package, and the Python workers imported SiftStream from it
        executor_dirs = list((tmp_path / "spark" / "work" / apps[0]["id"]).iterdir())
        assert executor_dirs and all((d / ZIP_NAME).is_file() for d in executor_dirs), executor_dirs
        said = [line for line in log.read_text().splitlines() if f"executors of {cluster.master_url}: " in line]
        assert said and f"SiftStream from {executor_dirs[0] / ZIP_NAME}" in said[0], said
        # a --conf of submit reached the executors: their numba cache is where it said
        assert list((tmp_path / "cache" / "numba").iterdir())

        # SIGTERM to the Python driver (spark-submit's child) stops serve as Ctrl-C does
        drivers = [pid for pid in children(proc.pid) if b"submit_main.py" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert len(drivers) == 1, drivers
        os.kill(drivers[0], signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()[-4000:]
        finished = [a for a in master_state(cluster)["completedapps"] if a["id"] == apps[0]["id"]]
        assert finished and finished[0]["state"] == "FINISHED", finished
    finally:
        if proc.poll() is None:
            for pid in children(proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            proc.kill()
            proc.wait()
