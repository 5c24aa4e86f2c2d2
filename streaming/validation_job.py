"""The validation job: decode and validate every input record, dead-letter the bad ones.

Spark's Kafka source reads all input topics; :func:`streaming.decode.verdict` classifies every
record; bad ones go through Spark's Kafka sink to ``siftstream.deadletter.v1``, keyed by
``topic/partition/offset`` (a replay after a crash rewrites identical records with identical
keys, so duplicates are detectable). Per micro-batch the job observes how many records of each
topic it accepted and rejected per error class; a listener appends those counts to a JSON Lines
stats file and reports progress. Progress is checkpointed: a restart resumes where it stopped.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infra.connection import KafkaConnection
from schemas.topics import DEADLETTER_TOPIC, INPUT_TOPICS, TopicSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

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


def metric_columns(specs: dict[str, TopicSpec]) -> list[Any]:
    """Per-batch counters: ``ok|<topic>`` and ``bad|<topic>|<error code>``."""
    from pyspark.sql import functions as F

    cols = []
    for topic in specs:
        is_topic = F.col("topic") == topic
        cols.append(F.sum(F.when(is_topic & F.col("error_code").isNull(), 1).otherwise(0)).alias(f"ok|{topic}"))
        for code in ERROR_CODES:
            hit = is_topic & (F.col("error_code") == code)
            cols.append(F.sum(F.when(hit, 1).otherwise(0)).alias(f"bad|{topic}|{code}"))
    return cols


def read_inputs(spark: SparkSession, cfg: ValidationConfig) -> DataFrame:
    reader = spark.readStream.format("kafka").options(**cfg.conn.spark_options())
    reader = reader.option("subscribe", ",".join(cfg.input_specs())).option("startingOffsets", cfg.starting_offsets)
    reader = reader.option("failOnDataLoss", "false")  # retention may delete unread records; never stop for it
    if cfg.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(cfg.max_offsets_per_trigger))
    return reader.load()


def build_query(spark: SparkSession, cfg: ValidationConfig) -> StreamingQuery:
    """Wire source -> verdict -> (observed counts) -> dead letters -> Kafka sink, and start it."""
    from streaming.decode import dead_letters, verdict

    specs = cfg.input_specs()
    checked = verdict(read_inputs(spark, cfg), specs).observe(METRICS_NAME, *metric_columns(specs))
    writer = (
        dead_letters(checked).writeStream.format("kafka").options(**cfg.conn.spark_options())
        .option("topic", cfg.deadletter_topic)
        .option("checkpointLocation", str(cfg.checkpoint))
        .queryName("siftstream-validation")
    )
    writer = writer.trigger(availableNow=True) if cfg.available_now else writer.trigger(processingTime=cfg.trigger_interval)
    return writer.start()


def batch_summary(progress: Any) -> dict[str, Any] | None:
    """One JSON-able line from a StreamingQueryProgress: the batch and its observed counts."""
    row = progress.observedMetrics.get(METRICS_NAME)
    if row is None:
        return None
    counts = {k: int(v or 0) for k, v in row.asDict().items() if v}
    return {
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
            if not quiet:
                ok = sum(v for k, v in line["counts"].items() if k.startswith("ok|"))
                bad = sum(v for k, v in line["counts"].items() if k.startswith("bad|"))
                print(f"[validation] batch {line['batch_id']}: {line['input_rows']} records, {ok} accepted,"
                      f" {bad} dead-lettered, {line['duration_ms']} ms", file=sys.stderr, flush=True)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    listener = _Listener()
    spark.streams.addListener(listener)
    return listener


def read_stats(stats_file: Path) -> dict[str, int]:
    """Sum the counts of a stats file, counting each batch id once (a replayed batch overwrites)."""
    by_batch: dict[int, dict[str, int]] = {}
    if stats_file.exists():
        for line in stats_file.read_text().splitlines():
            entry = json.loads(line)
            by_batch[entry["batch_id"]] = entry["counts"]
    total: dict[str, int] = {}
    for counts in by_batch.values():
        for k, v in counts.items():
            total[k] = total.get(k, 0) + v
    return total


def run(spark: SparkSession, cfg: ValidationConfig, quiet: bool = False) -> None:
    """Run the job until it finishes (available-now) or is interrupted."""
    listener = attach_stats(spark, cfg.stats_file, quiet)
    query = build_query(spark, cfg)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        print("[validation] stopping ...", file=sys.stderr)
        query.stop()
    finally:
        # listener events are delivered asynchronously: give the last one a moment to land
        time.sleep(0.5)
        spark.streams.removeListener(listener)
    if query.exception() is not None:
        raise RuntimeError(f"validation query failed: {query.exception()}")
