"""The pure parts of the live service: the restart backoff, the status verdicts and table, reading
a Spark checkpoint, and the job metrics fed from progress documents (no broker, no Spark)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from rich.console import Console

from infra.connection import KafkaConnection
from streaming.metrics import JobMetrics, committed_offsets, lag_records
from streaming.serve import Backoff, JobRun, ServeConfig, Supervisor, job_config
from streaming.status import (
    EXIT_HEALTHY,
    EXIT_UNHEALTHY,
    JOB_INPUTS,
    JOBS,
    JobStatus,
    exit_code,
    job_status,
    problem,
    query_dirs,
    read_checkpoint,
    render,
)


def test_backoff_doubles_up_to_its_cap() -> None:
    b = Backoff(initial_s=2, factor=2, max_s=60)
    assert b.schedule(7) == [2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
    assert b.delay(0) == 2.0  # no failure counted yet: the first wait
    assert Backoff(initial_s=1, factor=3, max_s=5).schedule(3) == [1.0, 3.0, 5.0]


def write_checkpoint(folder: Path, batches: dict[int, dict[str, dict[str, int]]], committed: list[int]) -> None:
    """A Spark checkpoint as Spark lays it out: ``offsets/<n>`` (v1, metadata, source offsets) and
    ``commits/<n>``."""
    (folder / "offsets").mkdir(parents=True)
    (folder / "commits").mkdir()
    for n, offsets in batches.items():
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1_700_000_000_000 + n, "conf": {}}
        (folder / "offsets" / str(n)).write_text(f"v1\n{json.dumps(meta)}\n{json.dumps(offsets)}")
    for n in committed:
        (folder / "commits" / str(n)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_read_checkpoint_takes_the_latest_committed_batch(tmp_path: Path) -> None:
    q = tmp_path / "q"
    assert read_checkpoint(q) is None
    write_checkpoint(q, {0: {"t": {"0": 5}}, 1: {"t": {"0": 9, "1": 2}}, 2: {"t": {"0": 12, "1": 2}}}, [0, 1])
    progress = read_checkpoint(q)
    assert progress is not None
    # batch 2 is planned (offsets written) but not committed: its output may not exist yet
    assert (progress.batch_id, progress.offsets, progress.batch_ms) == (1, {"t": {0: 9, 1: 2}}, 1_700_000_000_001)


def test_job_status_sums_lag_over_queries_and_counts_an_uncommitted_validation_topic(tmp_path: Path) -> None:
    dirs = query_dirs(tmp_path, "p.")
    assert list(dirs) == list(JOBS)
    assert dirs["matching"]["query"].folder == tmp_path / "matchingp." / "query"
    events, subs = list(dirs["validation"].items())[:2]
    write_checkpoint(events[1].folder, {0: {events[0]: {"0": 10, "1": 10}}}, [0])
    ends = {events[0]: {0: 15, 1: 10}, subs[0]: {0: 3, 1: 4}}
    status = job_status("validation", dirs["validation"], ends)
    assert (status.queries, status.committed, status.batch_id) == (6, 1, 0)
    assert status.lag_records == 5 + 7  # 5 behind on events; the subscriptions query never committed
    qos = job_status("qos", dirs["qos"], ends)
    assert (qos.committed, qos.lag_records) == (0, 25 + 7)  # no batch yet: behind by all of its inputs


@pytest.mark.parametrize("job", JOBS)
def test_serve_gives_every_job_its_max_offsets_per_trigger(job: str, tmp_path: Path) -> None:
    """Each job serve runs reads at most --max-offsets-per-trigger records per micro-batch (a
    backlog after an overload is worked off in bounded batches), and none is capped without it."""
    conn = KafkaConnection("127.0.0.1:9")
    capped = job_config(ServeConfig(conn, tmp_path, tmp_path, topic_prefix="p.", max_offsets_per_trigger=1234), job)
    assert capped.max_offsets_per_trigger == 1234
    assert (capped.checkpoint, capped.topic_prefix) == (tmp_path / f"{job}p.", "p.")
    assert job_config(ServeConfig(conn, tmp_path, tmp_path), job).max_offsets_per_trigger is None


def test_serve_takes_a_trigger_and_a_cap_per_job_from_its_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--job-trigger-interval JOB=INTERVAL`` and ``--job-max-offsets-per-trigger JOB=N`` (each
    repeatable) set one job's trigger and cap; the other jobs keep serve's own; a bad job, interval
    or number stops the command line with the reason."""
    from streaming.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(
        [
            "serve",
            "--trigger-interval",
            "5 seconds",
            "--max-offsets-per-trigger",
            "50000",
            "--job-trigger-interval",
            "qos=10 seconds",
            "--job-trigger-interval",
            "routes = 15 seconds",
            "--job-max-offsets-per-trigger",
            "routes=150000",
        ]
    )
    cfg = ServeConfig(
        KafkaConnection("127.0.0.1:9"),
        tmp_path,
        tmp_path,
        trigger_interval=args.trigger_interval,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        job_trigger_intervals=dict(args.job_trigger_interval),
        job_max_offsets=dict(args.job_max_offsets_per_trigger),
    )
    got = {job: (job_config(cfg, job).trigger_interval, job_config(cfg, job).max_offsets_per_trigger) for job in JOBS}
    assert got.pop("qos") == ("10 seconds", 50000)
    assert got.pop("routes") == ("15 seconds", 150000)
    assert set(got.values()) == {("5 seconds", 50000)}
    assert parser.parse_args(["serve"]).job_max_offsets_per_trigger == []
    for bad, reason in [
        (["--job-trigger-interval", "nojob=5 seconds"], "JOB one of validation"),
        (["--job-trigger-interval", "qos=soon"], "is no interval"),
        (["--job-max-offsets-per-trigger", "qos=0"], "not a positive integer"),
        (["--job-max-offsets-per-trigger", "qos"], "expected JOB=VALUE"),
    ]:
        with pytest.raises(SystemExit):
            parser.parse_args(["serve", *bad])
        assert reason in capsys.readouterr().err


@pytest.mark.parametrize("job", [j for j in JOBS if j not in ("validation", "matching")])
def test_job_inputs_are_what_each_job_reads(job: str) -> None:
    import importlib

    assert JOB_INPUTS[job] == importlib.import_module(f"streaming.{job}_job").INPUTS


def test_health_verdicts_and_exit_code() -> None:
    ok = JobStatus("matching", 1, 1, 4, 1_700_000_000_000, 10)
    behind = JobStatus("qos", 1, 1, 4, 1_700_000_000_000, 500)
    idle = JobStatus("routes", 1, 0, None, None, 0)
    assert problem(ok, max_lag=100) is None
    assert problem(behind, max_lag=100) == "500 records behind (more than 100)"
    assert problem(idle, max_lag=100) == "no committed batch yet"
    assert exit_code([ok], 100) == EXIT_HEALTHY == 0
    assert exit_code([ok, behind], 100) == EXIT_UNHEALTHY == 3
    assert exit_code([ok, behind], 1000) == EXIT_HEALTHY
    assert exit_code([ok, idle], 1000) == EXIT_UNHEALTHY


def test_render_shows_jobs_lag_alerts_and_the_verdict() -> None:
    doc = {
        "checked_at_ms": 1_700_000_010_000,
        "checkpoint_dir": "/x",
        "max_lag": 100,
        "topics": [{"topic": "siftstream.events.v1", "end_offset": 1234, "partitions": 2}],
        "jobs": [
            {"job": "matching", "queries": 1, "committed": 1, "batch_id": 7, "last_batch_ms": 1_700_000_000_000,
             "lag_records": 5, "problem": None},
            {"job": "qos", "queries": 1, "committed": 0, "batch_id": None, "last_batch_ms": None,
             "lag_records": 0, "problem": "no committed batch yet"},
        ],
        "subscriptions": 42,
        "alerts": [{"subscriber": "s1", "severity": "warning", "message": "measured 0.8 below 0.9"}],
        "healthy": False,
    }  # fmt: skip
    console = Console(record=True, width=140)
    render(doc, console)
    text = console.export_text()
    assert "1,234" in text and "22:13:20 (10 s ago)" in text
    assert "no committed batch yet" in text and "live subscriptions: 42; open alerts: 1" in text
    assert "s1 [warning] measured 0.8 below 0.9" in text and "UNHEALTHY (exit 3)" in text


def progress(batch: int, second: int, rows: int, ms: int, end: int, ran: bool = True) -> dict[str, object]:
    return {
        "batchId": batch,
        "timestamp": f"2026-01-01T00:00:{second:02d}.000Z",
        "numInputRows": rows,
        "inputRowsPerSecond": rows / 2,
        "batchDuration": ms,
        "durationMs": {"addBatch": ms - 10, "triggerExecution": ms} if ran else {"triggerExecution": 1},
        "sources": [{"endOffset": json.dumps({"t": {"0": end}})}],
    }


def test_job_metrics_count_each_batch_once_and_skip_idle_reports() -> None:
    m = JobMetrics(CollectorRegistry())
    m.register("matching")
    assert m.observe("matching", "query", progress(0, 1, 100, 1500, 100))
    assert not m.observe("matching", "query", progress(0, 1, 100, 1500, 100))  # the same report again
    assert m.observe("matching", "query", progress(1, 3, 40, 500, 140))
    assert not m.observe("matching", "query", progress(2, 5, 0, 1, 140, ran=False))  # idle: no batch ran
    assert not m.observe("matching", "query", progress(0, 1, 100, 1500, 100))  # older than the newest seen
    assert m.observe("qos", "query", progress(0, 2, 7, 300, 7))  # another job's query of the same name

    def value(name: str, **labels: str) -> float | None:
        return m.registry.get_sample_value(name, {"job": "matching", **labels})

    assert value("siftstream_job_processed_records_total") == 140
    assert value("siftstream_job_batches_total") == 2
    assert value("siftstream_job_batch_duration_seconds_count") == 2
    assert value("siftstream_job_batch_duration_seconds_sum") == pytest.approx(2.0)
    assert value("siftstream_job_last_batch_timestamp_seconds") == pytest.approx(1_767_225_603.0)
    assert value("siftstream_job_input_records_per_second") == 0.0  # the idle report resets the rate
    m.matched(events=40, matches=100)
    assert m.registry.get_sample_value("siftstream_matching_matches_per_event") == 2.5
    assert m.set_lag("matching", {"query": committed_offsets(progress(1, 3, 40, 500, 140))}, {"t": {0: 190}}) == 50
    assert value("siftstream_job_consumer_lag_records") == 50


def test_lag_ignores_topics_and_partitions_past_their_end() -> None:
    assert lag_records({"t": {0: 10}}, {"t": {0: 8}}) == 0  # a compacted or recreated topic: never negative
    assert lag_records({}, {"t": {0: 8}}) == 0


class StandInQuery:
    """What the supervisor reads of a streaming query: activity, its error, status, progress, stop."""

    def __init__(self) -> None:
        self.isActive = True
        self.error: Exception | None = None
        self.status = {"isTriggerActive": False}
        self.kept: list[dict[str, object]] = []  # the reports Spark keeps, oldest first
        self.full_reads = 0

    @property
    def recentProgress(self) -> list[dict[str, object]]:
        self.full_reads += 1
        return list(self.kept)

    @property
    def lastProgress(self) -> dict[str, object] | None:
        return self.kept[-1] if self.kept else None

    def exception(self) -> Exception | None:
        return self.error

    def stop(self) -> None:
        self.isActive = False


def test_supervisor_restarts_a_failed_job_after_a_growing_backoff(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="siftstream.serve")
    starts: list[JobRun] = []

    def starter(spark: object, cfg: ServeConfig, job: str) -> JobRun:
        starts.append(JobRun(job, {"a": StandInQuery(), "b": StandInQuery()}))
        return starts[-1]

    cfg = ServeConfig(
        conn=KafkaConnection("127.0.0.1:9"), checkpoint_dir=tmp_path, stats_dir=tmp_path, jobs=("qos", "routes")
    )
    metrics = JobMetrics(CollectorRegistry())
    supervisor = Supervisor(None, cfg, metrics, starter)
    try:
        supervisor.start_all()
        first = supervisor.runs["qos"]
        first.queries["a"].isActive, first.queries["a"].error = False, RuntimeError("boom\nthe JVM's trace")
        t0 = time.monotonic()
        supervisor.reap(t0)
        assert "qos" not in supervisor.runs and "routes" in supervisor.runs  # the other job runs on
        assert not first.queries["b"].isActive  # the job's other queries were stopped with it
        assert supervisor.retry_at == {"qos": t0 + 2.0}
        assert "qos: query a failed: boom; restart 1 in 2 s" in caplog.messages
        supervisor.restart_due(t0 + 1.0)
        assert len(starts) == 2  # not yet
        supervisor.restart_due(t0 + 2.0)
        assert len(starts) == 3 and supervisor.runs["qos"] is starts[-1]
        starts[-1].queries["b"].isActive = False  # stopped without an error: restarted all the same
        supervisor.reap(t0 + 3.0)
        assert supervisor.retry_at == {"qos": t0 + 3.0 + 4.0}  # the second failure in a row waits twice as long
        assert "qos: query b stopped; restart 2 in 4 s" in caplog.messages
        assert metrics.registry.get_sample_value("siftstream_job_restarts_total", {"job": "qos"}) == 1
        assert metrics.registry.get_sample_value("siftstream_job_up", {"job": "qos"}) == 0
    finally:
        supervisor.stop(grace_s=0)


def test_supervisor_reads_the_last_progress_and_all_kept_ones_only_after_a_gap(tmp_path: Path) -> None:
    query = StandInQuery()

    def starter(spark: object, cfg: ServeConfig, job: str) -> JobRun:
        return JobRun(job, {"query": query})

    cfg = ServeConfig(conn=KafkaConnection("127.0.0.1:9"), checkpoint_dir=tmp_path, stats_dir=tmp_path, jobs=("qos",))
    metrics = JobMetrics(CollectorRegistry())
    supervisor = Supervisor(None, cfg, metrics, starter)

    def batches() -> float | None:
        return metrics.registry.get_sample_value("siftstream_job_batches_total", {"job": "qos"})

    try:
        supervisor.start_all()
        run = supervisor.runs["qos"]
        supervisor._observe(run)  # no report yet
        query.kept += [progress(0, 1, 100, 1500, 100), progress(1, 3, 40, 500, 140)]
        supervisor._observe(run)  # the first read takes every kept report
        assert (batches(), query.full_reads) == (2, 1)
        query.kept.append(progress(2, 5, 10, 400, 150))
        supervisor._observe(run)
        supervisor._observe(run)  # nothing new: the same last report, counted once
        assert (batches(), query.full_reads) == (3, 1)
        query.kept.append(progress(3, 7, 0, 1, 150, ran=False))  # idle
        supervisor._observe(run)
        query.kept += [progress(4, 9, 5, 300, 155), progress(5, 11, 5, 300, 160)]  # two batches between polls
        supervisor._observe(run)
        assert (batches(), query.full_reads) == (5, 2)  # the gap read every kept report: none missed
    finally:
        supervisor.stop(grace_s=0)
