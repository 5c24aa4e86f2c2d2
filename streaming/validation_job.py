"""The validation job: decode and validate every input record, dead-letter the bad ones.

One streaming query per input topic (each plan stays small enough for Spark's whole-stage code
generation; one plan over all six schemas does not compile and runs interpreted:
docs/decisions/jvm-decoding-plans.md): Spark's Kafka source reads the topic,
:func:`streaming.decode.decode` classifies every record, and bad ones go through Spark's Kafka
sink to the dead-letter topic (``schemas.topics.DEADLETTER_TOPIC``), keyed by
``topic/partition/offset`` (a replay after a crash rewrites identical records with identical
keys, so duplicates are detectable). Per micro-batch each query observes how many records it
accepted and rejected per error class; a listener appends those counts to a JSON Lines stats
file and reports progress. Progress is checkpointed per topic: a restart resumes where it stopped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infra.connection import KafkaConnection
from schemas.topics import DEADLETTER_TOPIC, INPUT_TOPICS, TopicSpec
from streaming import logs

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

__all__ = [
    "ERROR_CODES",
    "METRICS_NAME",
    "ValidationConfig",
    "attach_stats",
    "batch_summary",
    "build_queries",
    "metric_columns",
    "read_stats",
    "read_topic_stream",
    "run",
]

_log = logs.get("validation")

ERROR_CODES = ("bad_framing", "unknown_schema", "malformed_body", "invalid_value")
METRICS_NAME = "validation"


@dataclass(frozen=True)
class ValidationConfig:
    """Settings of one validation query.

    Attributes
    ----------
    checkpoint : Path
        Checkpoint folder; keep it to resume, delete it to start over.
    topic_prefix : str
        Prepended to every topic name (tests and side-by-side deployments).
    available_now : bool
        Process what is in the topics now, then stop (tests, catch-up, the demo).
    max_offsets_per_trigger : int, optional
        Cap on records per micro-batch (smooths latency under a backlog).
    """

    conn: KafkaConnection
    checkpoint: Path
    topic_prefix: str = ""
    available_now: bool = False
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    trigger_interval: str = "0 seconds"
    stats_file: Path | None = None

    def input_specs(self) -> dict[str, TopicSpec]:
        return {self.topic_prefix + t.name: t for t in INPUT_TOPICS}

    @property
    def deadletter_topic(self) -> str:
        return self.topic_prefix + DEADLETTER_TOPIC


def metric_columns(topic: str) -> list[Any]:
    """Per-batch counters of one topic's query: ``ok|<topic>`` and ``bad|<topic>|<error code>``."""
    from pyspark.sql import functions as F

    cols = [F.sum(F.when(F.col("error_code").isNull(), 1).otherwise(0)).alias(f"ok|{topic}")]
    for code in ERROR_CODES:
        cols.append(F.sum(F.when(F.col("error_code") == code, 1).otherwise(0)).alias(f"bad|{topic}|{code}"))
    return cols


def read_topic_stream(spark: SparkSession, cfg: ValidationConfig, topic: str) -> DataFrame:
    reader = spark.readStream.format("kafka").options(**cfg.conn.spark_options())
    reader = reader.option("subscribe", topic).option("startingOffsets", _starting(cfg.starting_offsets, topic))
    reader = reader.option("failOnDataLoss", "false")  # retention may delete unread records; never stop for it
    # the consumer's default 1 MB per-partition fetch makes a 500k-record batch many round trips
    reader = reader.option("kafka.max.partition.fetch.bytes", str(8 << 20)).option(
        "kafka.fetch.max.bytes", str(32 << 20)
    )
    if cfg.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(cfg.max_offsets_per_trigger))
    return reader.load()


def _starting(offsets: str, topic: str) -> str:
    """``earliest``/``latest``, or the part of a per-topic offsets JSON that concerns ``topic``."""
    if offsets in ("earliest", "latest"):
        return offsets
    return json.dumps({topic: json.loads(offsets)[topic]})


def build_queries(spark: SparkSession, cfg: ValidationConfig) -> list[StreamingQuery]:
    """Wire source -> decode/validate -> (observed counts) -> dead letters -> Kafka sink, per input
    topic, and start the queries."""
    from streaming.decode import dead_letters, decode

    queries = []
    for topic, spec in cfg.input_specs().items():
        checked = decode(read_topic_stream(spark, cfg, topic), spec).observe(
            f"{METRICS_NAME}:{topic}", *metric_columns(topic)
        )
        writer = (
            dead_letters(checked)
            .writeStream.format("kafka")
            .options(**cfg.conn.spark_options())
            .option("topic", cfg.deadletter_topic)
            .option("checkpointLocation", str(cfg.checkpoint / spec.name))
            .queryName(f"siftstream-validation-{topic}")
        )
        writer = (
            writer.trigger(availableNow=True)
            if cfg.available_now
            else writer.trigger(processingTime=cfg.trigger_interval)
        )
        queries.append(writer.start())
    return queries


def batch_summary(progress: Any) -> dict[str, Any] | None:
    """One JSON-able line from a StreamingQueryProgress: the batch and its observed counts."""
    rows = [v for k, v in progress.observedMetrics.items() if k.startswith(METRICS_NAME)]
    if not rows:
        return None
    row = rows[0]
    counts = {k: int(v or 0) for k, v in row.asDict().items() if v}
    return {
        "query": progress.name,
        "batch_id": progress.batchId,
        "timestamp": progress.timestamp,
        "input_rows": progress.numInputRows,
        "input_rows_per_s": progress.inputRowsPerSecond,
        "processed_rows_per_s": progress.processedRowsPerSecond,
        "duration_ms": progress.batchDuration,
        "counts": counts,
    }


def attach_stats(spark: SparkSession, stats_file: Path | None, quiet: bool = False) -> Any:
    """Register a listener that appends every batch's counts to ``stats_file`` and reports progress."""
    from pyspark.sql.streaming import StreamingQueryListener

    class _Listener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            line = batch_summary(event.progress)
            if line is None or line["input_rows"] == 0:
                return
            if stats_file is not None:
                stats_file.parent.mkdir(parents=True, exist_ok=True)
                with stats_file.open("a") as f:
                    f.write(json.dumps(line) + "\n")
            ok = sum(v for k, v in line["counts"].items() if k.startswith("ok|"))
            bad = sum(v for k, v in line["counts"].items() if k.startswith("bad|"))
            fields = {
                "records": line["input_rows"],
                "accepted": ok,
                "dead_lettered": bad,
                "records_per_s": line["processed_rows_per_s"],  # the input rate is 0 in a query's first batch
                "duration_ms": line["duration_ms"],
            }
            topic = line["query"].removeprefix("siftstream-validation-")  # one query per input topic
            logs.log_batch(_log, line["batch_id"], fields, quiet, {"topic": topic}, what=f"{topic} batch")

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    listener = _Listener()
    spark.streams.addListener(listener)
    return listener


def read_stats(stats_file: Path) -> dict[str, int]:
    """Sum the counts of a stats file, counting each (query, batch id) once (a replayed batch overwrites)."""
    by_batch: dict[tuple[str, int], dict[str, int]] = {}
    if stats_file.exists():
        for line in stats_file.read_text().splitlines():
            entry = json.loads(line)
            by_batch[(entry["query"], entry["batch_id"])] = entry["counts"]
    total: dict[str, int] = {}
    for counts in by_batch.values():
        for k, v in counts.items():
            total[k] = total.get(k, 0) + v
    return total


def run(spark: SparkSession, cfg: ValidationConfig, quiet: bool = False) -> None:
    """Run the job until it finishes (available-now) or is interrupted; a failed query stops all."""
    listener = attach_stats(spark, cfg.stats_file, quiet)
    queries = build_queries(spark, cfg)
    failed = None
    try:
        while any(q.isActive for q in queries):
            spark.streams.awaitAnyTermination()
            spark.streams.resetTerminated()
            failed = next((q for q in queries if q.exception() is not None), None)
            if failed is not None:
                break
    except KeyboardInterrupt:
        _log.info("stopping ...")
    finally:
        for q in queries:
            if q.isActive:
                q.stop()
        spark.streams.removeListener(listener)
        # Listener events arrive asynchronously and may still be on their way (a loaded machine
        # delays them by seconds): write every batch the queries remember, synchronously.
        # read_stats counts each (query, batch id) once, so a batch the listener wrote too is fine.
        if cfg.stats_file is not None:
            lines = [batch_summary(p) for q in queries for p in q.recentProgress]
            cfg.stats_file.parent.mkdir(parents=True, exist_ok=True)
            with cfg.stats_file.open("a") as f:
                for line in lines:
                    if line is not None and line["input_rows"]:
                        f.write(json.dumps(line) + "\n")
    if failed is not None:
        raise RuntimeError(f"validation query {failed.name} failed: {failed.exception()}")
