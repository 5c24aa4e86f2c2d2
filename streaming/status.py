"""``siftstream status``: the topics, each job's committed progress and lag, subscriptions, alerts.

Sources: the topics' end offsets (the cluster's high watermarks), each job's Spark checkpoint
(``<checkpoint dir>/<job><topic prefix>``, the layout every job command and ``siftstream serve``
use: ``query/`` for the matching, channels, QoS, routes and composites jobs, one folder per input
topic for the validation job), the compacted subscriptions topic and the QoS topic.

A query's committed progress is its latest batch ``n`` in ``commits/`` and that batch's end
offsets in ``offsets/n`` (Spark writes ``offsets/n`` before batch ``n`` runs and ``commits/n``
after its output is written, so these offsets are fully processed). A job's lag is the sum over
its queries of :func:`streaming.metrics.lag_records` against the topics' end offsets now; a
query that never committed counts every record of its input topics (:data:`JOB_INPUTS`). A job
is *unhealthy* when no query of it committed a batch, or when its lag exceeds ``max_lag``: then
the command exits :data:`EXIT_UNHEALTHY` (3), so that it serves as a health check.

>>> jobs = [JobStatus("matching", 1, 1, 7, 1_700_000_000_000, 12), JobStatus("qos", 1, 0, None, None, 0)]
>>> [problem(j, max_lag=10) for j in jobs]
['12 records behind (more than 10)', 'no committed batch yet']
>>> exit_code(jobs, max_lag=100)
3
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from infra.connection import KafkaConnection, arrived
from schemas.topics import (
    BROKER_TELEMETRY_TOPIC,
    CHANNELS_TOPIC,
    EVENTS_TOPIC,
    INPUT_TOPICS,
    LINK_TELEMETRY_TOPIC,
    MATCHES_TOPIC,
    QOS_TOPIC,
    RECEIPTS_TOPIC,
    SUBSCRIPTIONS_TOPIC,
    TOPICS,
    TOPOLOGY_TOPIC,
    channel_topic,
)
from streaming.metrics import lag_records

__all__ = [
    "DEFAULT_MAX_LAG",
    "EXIT_HEALTHY",
    "EXIT_UNHEALTHY",
    "JOBS",
    "JOB_INPUTS",
    "JobStatus",
    "QueryCheckpoint",
    "QueryProgress",
    "collect",
    "exit_code",
    "job_status",
    "problem",
    "query_dirs",
    "read_checkpoint",
    "render",
]

JOBS = ("validation", "matching", "channels", "qos", "routes", "composites")
"""Every job ``siftstream serve`` runs, in the order it starts them."""

JOB_INPUTS: dict[str, tuple[str, ...]] = {
    "validation": tuple(t.name for t in INPUT_TOPICS),
    "matching": (EVENTS_TOPIC, SUBSCRIPTIONS_TOPIC, CHANNELS_TOPIC),
    "channels": (SUBSCRIPTIONS_TOPIC, MATCHES_TOPIC),
    "qos": (
        TOPOLOGY_TOPIC,
        SUBSCRIPTIONS_TOPIC,
        EVENTS_TOPIC,
        LINK_TELEMETRY_TOPIC,
        BROKER_TELEMETRY_TOPIC,
        RECEIPTS_TOPIC,
    ),
    "routes": (TOPOLOGY_TOPIC, SUBSCRIPTIONS_TOPIC, MATCHES_TOPIC, LINK_TELEMETRY_TOPIC),
    "composites": (TOPOLOGY_TOPIC, SUBSCRIPTIONS_TOPIC, EVENTS_TOPIC, LINK_TELEMETRY_TOPIC),
}
"""Each job's input topics (unprefixed), as its module's source subscribes to them: what a query
that has not committed a batch yet is behind by."""

EXIT_HEALTHY = 0
EXIT_UNHEALTHY = 3
DEFAULT_MAX_LAG = 100_000
"""Records a job may be behind before it counts as unhealthy (``--max-lag``): many batches of the
demo feeds' input, so that only a job that stopped keeping up crosses it."""

Offsets = dict[str, dict[int, int]]


@dataclass(frozen=True)
class QueryProgress:
    """One query's committed progress, from its checkpoint folder."""

    path: Path
    batch_id: int
    offsets: Offsets
    batch_ms: int | None


def _latest(folder: Path) -> int | None:
    ids = [int(p.name) for p in folder.glob("[0-9]*") if p.name.isdigit()] if folder.is_dir() else []
    return max(ids) if ids else None


def read_checkpoint(query_dir: Path) -> QueryProgress | None:
    """The latest committed batch of the Spark checkpoint ``query_dir`` and its end offsets (every
    Kafka source's, merged), or None when no batch was committed.

    The offset log entry is ``v1``, a metadata line (``batchTimestampMs``), then one line per
    source: ``{"topic": {"partition": offset}}`` for a Kafka source.
    """
    batch = _latest(query_dir / "commits")
    if batch is None:
        return None
    path = query_dir / "offsets" / str(batch)
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return None
    meta = json.loads(lines[1]) if len(lines) > 1 and lines[1].startswith("{") else {}
    offsets: Offsets = {}
    for line in lines[2:]:
        try:
            doc = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(doc, dict):
            for topic, parts in doc.items():
                if isinstance(parts, dict):
                    offsets.setdefault(topic, {}).update({int(p): int(o) for p, o in parts.items()})
    stamp = meta.get("batchTimestampMs")
    return QueryProgress(query_dir, batch, offsets, None if stamp is None else int(stamp))


@dataclass(frozen=True)
class QueryCheckpoint:
    """Where one query keeps its checkpoint and which (prefixed) topics it reads."""

    folder: Path
    topics: tuple[str, ...]


def query_dirs(checkpoint_dir: Path, topic_prefix: str) -> dict[str, dict[str, QueryCheckpoint]]:
    """Each job's queries, name -> checkpoint: the validation job's one per input topic (named by
    the prefixed topic), every other job's ``query`` over its :data:`JOB_INPUTS`."""
    out: dict[str, dict[str, QueryCheckpoint]] = {}
    for job in JOBS:
        root = checkpoint_dir / f"{job}{topic_prefix}"
        if job == "validation":
            out[job] = {
                topic_prefix + t.name: QueryCheckpoint(root / t.name, (topic_prefix + t.name,)) for t in INPUT_TOPICS
            }
        else:
            out[job] = {"query": QueryCheckpoint(root / "query", tuple(topic_prefix + t for t in JOB_INPUTS[job]))}
    return out


@dataclass(frozen=True)
class JobStatus:
    """What ``status`` says about one job."""

    job: str
    queries: int
    committed: int
    batch_id: int | None
    last_batch_ms: int | None
    lag_records: int


def job_status(job: str, queries: Mapping[str, QueryCheckpoint], ends: Mapping[str, Mapping[int, int]]) -> JobStatus:
    """The job's status from its queries' checkpoints and the topics' end offsets ``ends``: a query
    that never committed a batch is behind by everything in its topics."""
    lag, committed, batch, last = 0, 0, None, None
    for query in queries.values():
        progress = read_checkpoint(query.folder)
        if progress is None:
            lag += sum(sum(ends.get(t, {}).values()) for t in query.topics)
            continue
        committed += 1
        lag += lag_records(progress.offsets, ends)
        batch = progress.batch_id if batch is None else max(batch, progress.batch_id)
        if progress.batch_ms is not None:
            last = progress.batch_ms if last is None else max(last, progress.batch_ms)
    return JobStatus(job, len(queries), committed, batch, last, lag)


def problem(status: JobStatus, max_lag: int) -> str | None:
    """Why the job is unhealthy, or None."""
    if status.committed == 0:
        return "no committed batch yet"
    if status.lag_records > max_lag:
        return f"{status.lag_records:,} records behind (more than {max_lag:,})"
    return None


def exit_code(jobs: Sequence[JobStatus], max_lag: int) -> int:
    """:data:`EXIT_UNHEALTHY` when any job has a :func:`problem`, else :data:`EXIT_HEALTHY`."""
    return EXIT_UNHEALTHY if any(problem(j, max_lag) for j in jobs) else EXIT_HEALTHY


# ---- reading the cluster ---------------------------------------------------------------------


def _latest_values(conn: KafkaConnection, topic: str, schema: str, timeout_s: float = 30.0) -> dict[bytes, Any]:
    """The last value per key of ``topic`` up to its current end (None for a tombstone); records
    that do not decode are skipped (an input topic may hold bad ones)."""
    from confluent_kafka import Consumer, TopicPartition

    from schemas.codec import DecodeError, decode
    from streaming.readers import watermarks

    consumer = Consumer(conn.confluent(**{"group.id": "siftstream-status", "enable.auto.commit": False}))
    latest: dict[bytes, Any] = {}
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            return latest
        ends, assignment = {}, []
        for p in meta.partitions:
            low, high = watermarks(consumer, topic, p)
            if high > low:
                ends[p] = high
                assignment.append(TopicPartition(topic, p, low))
        consumer.assign(assignment)
        done: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(done) < len(ends) and time.monotonic() < deadline:
            for msg in arrived(consumer, 10_000, 1.0):
                if msg.error() is not None:
                    continue
                if msg.offset() >= ends[msg.partition()] - 1:
                    done.add(msg.partition())
                try:
                    value = None if msg.value() is None else decode(msg.value(), schema)[1]
                except DecodeError:
                    continue
                latest[msg.key() or b""] = value
        if len(done) < len(ends):
            raise TimeoutError(f"reading {topic} did not reach its end within {timeout_s:.0f}s")
        return latest
    finally:
        consumer.close()


def collect(
    conn: KafkaConnection, topic_prefix: str, checkpoint_dir: Path, max_lag: int = DEFAULT_MAX_LAG
) -> dict[str, Any]:
    """The whole status as one JSON-able document (what ``status --json`` prints); RuntimeError
    when the cluster cannot be reached."""
    from confluent_kafka import KafkaException

    try:
        return _collect(conn, topic_prefix, checkpoint_dir, max_lag)
    except KafkaException as exc:
        raise RuntimeError(f"cannot read the cluster at {conn.bootstrap_servers}: {exc.args[0]}") from None


def _collect(conn: KafkaConnection, topic_prefix: str, checkpoint_dir: Path, max_lag: int) -> dict[str, Any]:
    from confluent_kafka import Consumer

    from streaming.readers import partition_ends

    consumer = Consumer(conn.confluent(**{"group.id": "siftstream-status", "enable.auto.commit": False}))
    try:
        existing = set(consumer.list_topics(timeout=10).topics)
    finally:
        consumer.close()
    names = [topic_prefix + name for name in TOPICS]
    channels = sorted(
        (t for t in existing if t.startswith(channel_topic(0, topic_prefix)[:-1]) and t.rsplit(".", 1)[-1].isdigit()),
        key=lambda t: int(t.rsplit(".", 1)[-1]),
    )
    ends = partition_ends(conn, names + channels, "siftstream-status")
    jobs = [job_status(job, dirs, ends) for job, dirs in query_dirs(checkpoint_dir, topic_prefix).items()]
    subs = _latest_values(conn, topic_prefix + SUBSCRIPTIONS_TOPIC, TOPICS[SUBSCRIPTIONS_TOPIC].schema)
    live = sum(1 for v in subs.values() if v is not None and v.get("type", "subscribe") == "subscribe")
    reports = _latest_values(conn, topic_prefix + QOS_TOPIC, TOPICS[QOS_TOPIC].schema)
    alerts = sorted(
        (
            {
                "subscriber": r["id"],
                "severity": r["alert"].get("severity"),
                "message": r["alert"].get("message"),
                "window_end_ms": r.get("window_end"),
            }
            for r in reports.values()
            if r is not None and r.get("kind") == "subscriber" and r.get("alert") is not None
        ),
        key=lambda a: (str(a["severity"]), str(a["subscriber"])),
    )
    return {
        "checked_at_ms": int(time.time() * 1000),
        "checkpoint_dir": str(checkpoint_dir),
        "topic_prefix": topic_prefix,
        "max_lag": max_lag,
        "topics": [{"topic": t, "end_offset": sum(p.values()), "partitions": len(p)} for t, p in ends.items()],
        "jobs": [{**asdict(j), "problem": problem(j, max_lag)} for j in jobs],
        "subscriptions": live,
        "alerts": alerts,
        "healthy": exit_code(jobs, max_lag) == EXIT_HEALTHY,
    }


def _when(ms: int | None, now_ms: int) -> str:
    if ms is None:
        return "-"
    ago = max(0.0, (now_ms - ms) / 1000)
    return time.strftime("%H:%M:%S", time.gmtime(ms / 1000)) + f" ({ago:,.0f} s ago)"


def render(doc: Mapping[str, Any], console: Any, alerts_shown: int = 10) -> None:
    """The status document as rich tables: topics, jobs, then subscriptions and open alerts."""
    from rich.markup import escape
    from rich.table import Table

    topics = Table(title="Topics")
    topics.add_column("topic")
    topics.add_column("end offset", justify="right")
    topics.add_column("partitions", justify="right")
    for t in doc["topics"]:
        topics.add_row(t["topic"], f"{t['end_offset']:,}", str(t["partitions"]))
    console.print(topics)
    jobs = Table(title=f"Jobs (checkpoints under {doc['checkpoint_dir']})")
    for col in ("job", "queries committed", "batch", "last batch (UTC)", "lag (records)", "health"):
        jobs.add_column(col, justify="right" if col in ("batch", "lag (records)") else "left")
    for j in doc["jobs"]:
        jobs.add_row(
            j["job"],
            f"{j['committed']} of {j['queries']}",
            "-" if j["batch_id"] is None else str(j["batch_id"]),
            _when(j["last_batch_ms"], doc["checked_at_ms"]),
            f"{j['lag_records']:,}",
            "ok" if j["problem"] is None else j["problem"],
        )
    console.print(jobs)
    console.print(f"live subscriptions: {doc['subscriptions']:,}; open alerts: {len(doc['alerts']):,}")
    for a in doc["alerts"][:alerts_shown]:
        message = str(a["message"])
        message = message if len(message) <= 160 else message[:157] + "..."
        console.print(escape(f"  {a['subscriber']} [{a['severity']}] {message}"))
    if len(doc["alerts"]) > alerts_shown:
        console.print(f"  ... and {len(doc['alerts']) - alerts_shown:,} more (--json lists them all)")
    verdict = "healthy" if doc["healthy"] else f"UNHEALTHY (exit {EXIT_UNHEALTHY})"
    console.print(f"{verdict}: a job is unhealthy without a committed batch or more than {doc['max_lag']:,} behind")
