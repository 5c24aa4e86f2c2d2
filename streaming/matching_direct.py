"""The matching job's direct mode: Kafka (events) -> ``mapInArrow`` -> Kafka, no driver step.

``siftstream match-job --mode direct`` (docs/reference/commands.md, match-job; why the mode
exists and what it gives up: docs/decisions/direct-matching.md). Two streaming queries in one
Spark application:

1. **Matching.** Spark's Kafka source reads the events topic only; one ``mapInArrow``
   (:func:`direct_batches`) turns each task's Arrow batches of Kafka rows into the Kafka rows to
   write, and Spark's Kafka sink writes them, with ``asyncProgressTrackingEnabled`` (the offset and
   commit logs are written beside the micro-batches instead of before and after each one; Spark
   allows it only for a stateless query into the Kafka sink under a processing-time trigger). At
   the first Arrow batch of each task, the task's Python worker brings its own
   ``SubscriptionFollower`` (``streaming.subscription_follower``) up to the subscriptions topic's
   current ends; then, as in the exact mode (``streaming.arrow_matching``), the events are decoded
   (``schemas.event_records``), matched with one ``index.match`` per Arrow batch and encoded
   (``schemas.match_records``): each valid event's ``Match`` record keyed by ``event_id``, each bad
   event's ``DeadLetter`` keyed ``topic/partition/offset`` through the sink's ``topic`` column.
2. **Rejected subscriptions.** A second query reads the subscriptions topic (processing-time
   trigger ``rejections_interval``, ``foreachBatch``): each micro-batch's records are decoded by
   the driver jobs' ``streaming.driver_batch.TopicReader`` (its columnar fast path, the JVM for
   the values it refers), judged by ``routing.matching.table.plan_columns`` on the driver and
   the rejected ones (values that do not decode or break a rule, filters that do not parse,
   with the parser's message) go to the dead-letter topic, exactly as the exact mode writes them
   (``streaming.matching_job.subscription_dead_letters``). The workers only count rejections, so
   each bad record gets one dead letter (a replay after a crash rewrites it, same key).

Guarantees (docs/decisions/direct-matching.md)
----------------------------------------------
- **Which subscriptions an event sees.** An event is matched against the subscriptions its
  worker had read when its task reached its first batch of events: every subscription record
  whose write was acknowledged (below the topic's high watermark) before that moment, applied in
  (partition, offset) order. A task starts after its micro-batch was planned, and a batch is
  planned after its events were written, so an event sees every subscription change acknowledged
  before the event itself was written, and possibly later ones.
- **No replays of the same set.** A micro-batch that runs again after a crash reads the
  subscriptions anew and may see a newer set than the first run did; with asynchronous progress
  tracking its offset range may differ too. Duplicates after a crash are therefore ``Match``
  records with the same key (``event_id``) whose ids may differ. Nothing is lost: Spark's Kafka
  sink is at least once.
- **Delivery** (``ChannelEvents`` on the channel topics) is left to the exact mode.
- **Start.** Every Python worker reads the whole compacted subscriptions topic at its first task
  (a cold worker); Spark stops a Python worker that stays idle for a minute, and its successor
  starts cold again.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from routing.matching.index import EventBatch
from schemas.event_records import decode_rows
from schemas.match_records import OUTPUT_SCHEMA, Targets, match_values, output_batches
from schemas.topics import SUBSCRIPTIONS_TOPIC
from streaming import logs
from streaming.subscription_follower import FollowSpec, follower_for

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from streaming.matching_job import MatchingConfig

__all__ = ["MODES", "DirectRun", "RejectionBatch", "build_queries", "direct_batches", "run"]

MODES = ("exact", "direct")
"""The matching job's modes: ``exact`` (``streaming.matching_job``) and ``direct`` (this module)."""

_log = logs.get("matching")


def direct_batches(spec: FollowSpec, targets: Targets, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: Kafka rows of events in (``streaming.arrow_matching.INPUT_COLUMNS``),
    the Kafka rows to write out (``schemas.match_records.OUTPUT_SCHEMA``). The worker's follower
    catches up once per task, at its first non-empty batch (module docstring, Guarantees)."""
    index = None
    for rb in batches:
        n = rb.num_rows
        if n == 0:
            continue
        if index is None:
            follower = follower_for(spec)
            follower.catch_up()
            index = follower.index
        events = decode_rows(rb.column("value"))
        matches = index.match(EventBatch.from_columns(n, events.columns()))
        data, row_off = match_values(events, *matches.sorted_ranks())
        yield from output_batches(rb, events, data, row_off, targets)


class RejectionBatch:
    """The rejected-subscriptions query's ``foreachBatch`` function (module docstring, 2.)."""

    def __init__(self, spark: SparkSession, cfg: MatchingConfig) -> None:
        self.spark, self.cfg = spark, cfg
        self.records = self.rejected = 0
        self._writer: Any = None  # the KafkaWriter of the dead letters, made on first use
        self._reader: Any = None  # the subscriptions topic's TopicReader, made on first use

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        from streaming.driver_batch import RAW_EXPRS, TopicReader
        from streaming.subscription_rows import PlannedRecords, SubscriptionRows, subscription_dead_letters

        if self._reader is None:
            self._reader = TopicReader(self.spark, SUBSCRIPTIONS_TOPIC, "matching", raw=True)
        rows = SubscriptionRows(self._reader.collect(batch.selectExpr(*RAW_EXPRS).toArrow()))
        rejected = PlannedRecords.of(rows).rejected
        if rejected:
            if self._writer is None:
                from producers.kafka_writer import KafkaWriter

                self._writer = KafkaWriter.like_spark(self.cfg.conn)
            self._writer.write_rows(subscription_dead_letters(rejected, self.cfg.deadletter_topic), "matching")
        self.records += len(rows)
        self.rejected += len(rejected)


class DirectRun:
    """The two running queries of the direct mode and the rejections' counts."""

    def __init__(self, matching: StreamingQuery, rejections: StreamingQuery, handler: RejectionBatch) -> None:
        self.matching, self.rejections, self.handler = matching, rejections, handler

    def events(self) -> int:
        """Events the matching query has read so far (its progress reports)."""
        return sum(int(p.get("numInputRows", 0)) for p in self.matching.recentProgress)

    def stop(self) -> None:
        for q in (self.matching, self.rejections):
            if q.isActive:
                q.stop()


def build_queries(
    spark: SparkSession, cfg: MatchingConfig, rejections_interval: str = "1 second", progress_interval_ms: int = 1000
) -> DirectRun:
    """Start the direct mode's two queries (module docstring) for ``cfg``, whose ``available_now``
    and ``deliver`` must be off; checkpoints ``<checkpoint>/direct`` and
    ``<checkpoint>/direct-rejections``; ``progress_interval_ms`` is
    ``asyncProgressTrackingCheckpointIntervalMs`` (how often the offset and commit logs are
    written; a restart replays at most that much)."""
    from streaming.matching_job import event_rows
    from streaming.session import kafka_stream, start_batches

    if cfg.available_now:
        raise ValueError(
            "the direct mode runs continuously: Spark's asynchronous progress tracking refuses available-now"
        )
    if cfg.deliver:
        raise ValueError("the direct mode does not deliver through the channel topics; use the exact mode")
    prefix = cfg.topic_prefix or "default"
    events = kafka_stream(spark, cfg.conn, [cfg.events_topic], cfg.max_offsets_per_trigger)
    spec = FollowSpec(cfg.conn, cfg.subscriptions_topic, cfg.index)
    targets = Targets(cfg.events_topic, cfg.matches_topic, cfg.deadletter_topic)
    out = event_rows(events, cfg.events_topic).mapInArrow(
        functools.partial(direct_batches, spec, targets), OUTPUT_SCHEMA
    )
    matching = (
        out.writeStream.format("kafka")
        .options(**cfg.conn.spark_options())
        # heavy output: large batches, compressed (ids repeat), as the exact mode writes
        .option("kafka.compression.type", "lz4")
        .option("kafka.linger.ms", "5")
        .option("kafka.batch.size", str(1 << 20))
        .option("asyncProgressTrackingEnabled", "true")
        .option("asyncProgressTrackingCheckpointIntervalMs", str(progress_interval_ms))
        .option("checkpointLocation", str(cfg.checkpoint / "direct"))
        .queryName(f"siftstream-matching-direct-{prefix}")
        .trigger(processingTime=cfg.trigger_interval)
        .start()
    )
    handler = RejectionBatch(spark, cfg)
    subs = kafka_stream(spark, cfg.conn, [cfg.subscriptions_topic], None)
    name = f"siftstream-matching-rejections-{prefix}"
    try:
        rejections = start_batches(
            subs, handler, cfg.checkpoint / "direct-rejections", name, False, rejections_interval
        )
    except Exception:
        matching.stop()
        raise
    return DirectRun(matching, rejections, handler)


def run(spark: SparkSession, cfg: MatchingConfig) -> dict[str, Any]:
    """Run until interrupted; raise RuntimeError when a query failed. Returns the totals: events
    read, subscription records judged and rejected."""
    from streaming.session import await_query

    direct = build_queries(spark, cfg)
    try:
        await_query(direct.matching, "matching")
        if direct.rejections.exception() is not None:
            raise RuntimeError(f"the rejected-subscriptions query failed: {direct.rejections.exception()}")
    finally:
        events = direct.events()
        direct.stop()
    totals = {
        "events": events,
        "subscription_records": direct.handler.records,
        "dead_lettered_subscription_records": direct.handler.rejected,
    }
    _log.debug(json.dumps(totals))
    return totals
