"""The QoS job: telemetry, receipts and the overlay's shape -> ``siftstream.qos.v1``, continuously.

One streaming query reads six topics in one pass: the compacted ``siftstream.topology.v1`` and
``siftstream.subscriptions.v1`` (the overlay's shape and the subscribers' wishes), and
``siftstream.events.v1``, ``siftstream.telemetry.links.v1``, ``siftstream.telemetry.brokers.v1``
and ``siftstream.receipts.v1``. Decoding and validation run in the JVM
(``streaming.decode.decode_topics``, each row with its own topic's schema, built once into the
streaming plan). ``foreachBatch`` then:

1. writes every record that did not decode or validate to the dead-letter topic (keyed
   ``topic/partition/offset``, as every job does), so broken telemetry never stops the job;
2. collects the good rows as one Arrow table and hands them to the driver's
   :class:`routing.qos_monitor.QosMonitor`: topology and subscription changes first (in
   partition/offset order), then events (matched against the live subscriptions for the
   denominator of R_s, and counted for each publisher's content mix), link and broker samples,
   and receipts, all as numpy columns;
3. moves the monitor's clock to the watermark (the largest time seen in the telemetry, minus
   ``lateness_ms``) and, for every update period that ended (default 10 s), writes one
   ``QosReport`` per subscriber and per broker (key ``<kind>:<id>``), with alerts;
4. saves the monitor's state as ``<checkpoint>/monitor/<batch id>.npz`` before the write.

Restart: on start the state of the batch before the first one this run executes is loaded, so a
batch that crashed before Spark committed it is replayed from the same state over the same
offsets and writes the same records (duplicates after a crash are identical records with
identical keys). Without a state file (a new checkpoint, or one whose files were deleted) the
monitor starts empty and rebuilds its estimates over the next window; the compacted topology and
subscriptions topics are read from the earliest offset on a new checkpoint.

Limits: the checkpoint must be a local (driver-side) path; telemetry is aggregated on the driver
(numpy, vectorised), which keeps up with the telemetry rates measured in ``bench/qos_job.py``.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from infra.connection import KafkaConnection
from routing.estimation import EstimationConfig
from routing.qos_monitor import MonitorConfig, QosMonitor
from routing.subscriptions import SubscriptionRecord
from schemas.topics import DEADLETTER_TOPIC, TOPICS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

TOPOLOGY = "siftstream.topology.v1"
SUBSCRIPTIONS = "siftstream.subscriptions.v1"
EVENTS = "siftstream.events.v1"
LINKS = "siftstream.telemetry.links.v1"
BROKERS = "siftstream.telemetry.brokers.v1"
RECEIPTS = "siftstream.receipts.v1"
QOS = "siftstream.qos.v1"
INPUTS = (TOPOLOGY, SUBSCRIPTIONS, EVENTS, LINKS, BROKERS, RECEIPTS)
KEEP_STATES = 3  # state files kept besides the newest


@dataclass(frozen=True)
class QosConfig:
    """Settings of the QoS query.

    Attributes
    ----------
    conn : KafkaConnection
    checkpoint : Path
        Local folder: Spark's checkpoint (``query/``) and the monitor's state (``monitor/``).
    topic_prefix : str
    available_now : bool
        Process what is in the topics now, then stop.
    trigger_interval : str
        Processing-time trigger otherwise.
    update_period_ms : int
        A report per subscriber and broker for every multiple of this (default 10 s).
    window_buckets : int
        Estimates cover this many update periods (default 30: 5 minutes at 10 s).
    lateness_ms : int
        Telemetry and receipts may arrive this late; the reports of a period wait for it.
    model : str
        ``gg1`` or ``mm1``.
    max_offsets_per_trigger : int, optional
    stats_file : Path, optional
        One JSON line per micro-batch.
    """

    conn: KafkaConnection
    checkpoint: Path
    topic_prefix: str = ""
    available_now: bool = False
    trigger_interval: str = "5 seconds"
    update_period_ms: int = 10_000
    window_buckets: int = 30
    lateness_ms: int = 5_000
    model: str = "gg1"
    max_offsets_per_trigger: int | None = None
    stats_file: Path | None = None

    def topic(self, name: str) -> str:
        return self.topic_prefix + name

    @property
    def query_checkpoint(self) -> Path:
        return self.checkpoint / "query"

    @property
    def state_folder(self) -> Path:
        return self.checkpoint / "monitor"

    def monitor_config(self) -> MonitorConfig:
        estimation = EstimationConfig(
            bucket_ms=self.update_period_ms, buckets=self.window_buckets, grace_ms=float(self.lateness_ms)
        )
        return MonitorConfig(update_period_ms=self.update_period_ms, estimation=estimation, model=self.model)


# ---- the streaming plan: one decode of all six topics, flattened -----------------------------


def input_columns(decoded: DataFrame, names: dict[str, str]) -> list[Column]:
    """The flat projection the driver collects: Kafka coordinates, the verdict, and per topic
    the fields the monitor reads (null on other topics' rows). ``names`` maps each input topic to
    the name it has on the cluster (with the prefix)."""
    from pyspark.sql import functions as F

    order = list(names.values())

    def rec(topic: str) -> Column:
        return F.col(f"rec_{order.index(names[topic])}")

    t, s, e, lk, b, r = (rec(x) for x in INPUTS)
    return [
        F.col("topic"),
        F.col("partition"),
        F.col("offset"),
        F.col("key").cast("string").alias("key_text"),
        F.col("value").isNull().alias("tombstone"),
        F.col("error_code"),
        F.col("reason"),
        t["kind"].cast("string").alias("t_kind"),
        t["broker"].alias("t_broker"),
        t["from"].alias("t_from"),
        t["to"].alias("t_to"),
        t["reliability"].alias("t_reliability"),
        s["type"].cast("string").alias("s_op"),
        s["subscription_id"].alias("s_id"),
        s["subscriber_id"].alias("s_subscriber"),
        s["broker"].alias("s_broker"),
        s["filter"].alias("s_filter"),
        s["composite"].alias("s_composite"),
        s["deadline_ms"].alias("s_deadline"),
        s["min_reliability"].alias("s_min_reliability"),
        e["event_id"].alias("e_id"),
        e["publisher_id"].alias("e_publisher"),
        e["published_at"].alias("e_at"),
        e["lifetime_ms"].alias("e_lifetime"),
        *[e["attributes"][k].alias(f"e_{k}") for k in ("longs", "doubles", "strings", "booleans")],
        lk["from"].alias("l_from"),
        lk["to"].alias("l_to"),
        lk["seq"].alias("l_seq"),
        lk["sent_at"].alias("l_sent"),
        lk["delay_ms"].alias("l_delay"),
        lk["lost"].alias("l_lost"),
        b["broker_id"].alias("b_id"),
        b["arrived_at"].alias("b_at"),
        b["wait_ms"].alias("b_wait"),
        b["service_ms"].alias("b_service"),
        r["subscriber_id"].alias("r_subscriber"),
        r["event_id"].alias("r_event"),
        r["received_at"].alias("r_at"),
    ]


# ---- the micro-batch --------------------------------------------------------------------------


@dataclass
class QosBatchStats:
    """What one micro-batch did (one JSON line of the stats file)."""

    batch_id: int
    records: dict[str, int] = field(default_factory=dict)
    dead_letters: int = 0
    reports: int = 0
    alerts: int = 0
    windows: list[int] = field(default_factory=list)
    watermark_ms: float | None = None
    collect_ms: float = 0.0
    monitor_ms: float = 0.0
    write_ms: float = 0.0
    duration_ms: float = 0.0


def _attributes(table: Any, rows: np.ndarray) -> list[dict[str, object]]:
    """Per event row, its attributes as one mapping (the four typed maps merged)."""
    out: list[dict[str, object]] = [{} for _ in rows]
    for kind in ("longs", "doubles", "strings", "booleans"):
        col = table.column(f"e_{kind}").take(rows).to_pylist()
        for i, entries in enumerate(col):
            if entries:
                out[i].update(entries)
    return out


class QosBatch:
    """The ``foreachBatch`` function: feeds the monitor and writes reports and dead letters."""

    def __init__(self, spark: SparkSession, cfg: QosConfig, quiet: bool = True) -> None:
        self.spark, self.cfg, self.quiet = spark, cfg, quiet
        self.names = {topic: cfg.topic(topic) for topic in INPUTS}
        self.kind_of = {v: k for k, v in self.names.items()}
        self.monitor: QosMonitor | None = None
        self.max_time_ms = -np.inf
        self.history: list[QosBatchStats] = []

    # -- state ----------------------------------------------------------------------------

    def _state_path(self, batch_id: int) -> Path:
        return self.cfg.state_folder / f"{batch_id}.npz"

    def _restore(self, batch_id: int) -> None:
        path = self._state_path(batch_id - 1)
        if batch_id > 0 and path.exists():
            blob = path.read_bytes()
            self.monitor = QosMonitor.from_bytes(blob[8:])
            self.max_time_ms = float(np.frombuffer(blob[:8], dtype=np.float64)[0])
            return
        if batch_id > 0:
            print(
                f"[qos] warning: no monitor state for batch {batch_id - 1} in {self.cfg.state_folder}; "
                "starting empty (estimates rebuild over the next window)",
                file=sys.stderr,
            )
        self.monitor = QosMonitor(self.cfg.monitor_config())

    def _save(self, batch_id: int) -> None:
        assert self.monitor is not None
        folder = self.cfg.state_folder
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{batch_id}.tmp"
        tmp.write_bytes(np.float64(self.max_time_ms).tobytes() + self.monitor.to_bytes())
        tmp.replace(self._state_path(batch_id))
        for old in folder.glob("*.npz"):
            if old.stem.isdigit() and int(old.stem) < batch_id - KEEP_STATES:
                old.unlink(missing_ok=True)

    # -- feeding --------------------------------------------------------------------------

    def _feed(self, table: Any, stats: QosBatchStats) -> None:
        import pyarrow.compute as pc

        monitor = self.monitor
        assert monitor is not None
        topic = np.asarray(table.column("topic").to_numpy(zero_copy_only=False)).astype(str)
        order = np.lexsort(
            (table.column("offset").to_numpy(zero_copy_only=False), table.column("partition").to_numpy())
        )

        def rows(kind: str) -> np.ndarray:
            mine = order[topic[order] == self.names[kind]]
            stats.records[kind] = len(mine)
            return mine

        def col(name: str, idx: np.ndarray) -> np.ndarray:
            return np.asarray(table.column(name).take(idx).to_numpy(zero_copy_only=False))

        times: list[float] = []
        idx = rows(TOPOLOGY)
        if len(idx):
            sub = table.take(idx).to_pylist()
            monitor.apply_topology(
                [
                    (
                        r["key_text"],
                        None
                        if r["tombstone"]
                        else {
                            "kind": r["t_kind"],
                            "broker": r["t_broker"],
                            "from": r["t_from"],
                            "to": r["t_to"],
                            "reliability": r["t_reliability"],
                        },
                    )
                    for r in sub
                ]
            )
        idx = rows(SUBSCRIPTIONS)
        if len(idx):
            sub = table.take(idx).to_pylist()
            monitor.apply_subscriptions(
                [
                    SubscriptionRecord(
                        key=r["key_text"],
                        tombstone=bool(r["tombstone"]),
                        op=r["s_op"],
                        subscription_id=r["s_id"],
                        filter=r["s_filter"],
                        composite=r["s_composite"],
                    )
                    for r in sub
                ],
                [
                    {
                        "subscriber_id": r["s_subscriber"],
                        "broker": r["s_broker"],
                        "deadline_ms": r["s_deadline"],
                        "min_reliability": r["s_min_reliability"],
                    }
                    for r in sub
                ],
            )
        idx = rows(EVENTS)
        if len(idx):
            at = col("e_at", idx).astype(np.float64)
            monitor.add_events(
                col("e_id", idx).tolist(),
                col("e_publisher", idx).tolist(),
                at,
                col("e_lifetime", idx).astype(np.float64),
                _attributes(table, idx),
            )
            times.append(float(at.max()))
        idx = rows(LINKS)
        if len(idx):
            sent = col("l_sent", idx).astype(np.float64)
            delay = table.column("l_delay").take(idx)
            delay_np = np.asarray(pc.fill_null(delay, float("nan")).to_numpy(zero_copy_only=False), dtype=np.float64)
            monitor.add_link_samples(
                col("l_from", idx).astype(str),
                col("l_to", idx).astype(str),
                col("l_seq", idx).astype(np.int64),
                sent,
                delay_np,
                col("l_lost", idx).astype(bool),
            )
            times.append(float(sent.max()))
        idx = rows(BROKERS)
        if len(idx):
            arrived = col("b_at", idx).astype(np.float64)
            monitor.add_broker_samples(
                col("b_id", idx).astype(str),
                arrived,
                col("b_wait", idx).astype(np.float64),
                col("b_service", idx).astype(np.float64),
            )
            times.append(float(arrived.max()))
        idx = rows(RECEIPTS)
        if len(idx):
            received = col("r_at", idx).astype(np.float64)
            monitor.add_receipts(col("r_subscriber", idx).astype(str).tolist(), col("r_event", idx).tolist(), received)
            times.append(float(received.max()))
        if times:
            self.max_time_ms = max(self.max_time_ms, *times)

    # -- the batch --------------------------------------------------------------------------

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        from pyspark.sql import functions as F

        from streaming.decode import dead_letter_columns

        started = time.monotonic()
        stats = QosBatchStats(batch_id)
        if self.monitor is None:
            self._restore(batch_id)
        assert self.monitor is not None
        batch.persist()
        try:
            good = batch.where(F.col("error_code").isNull()).drop("key", "value", "timestamp")
            table = good.toArrow()
            stats.collect_ms = (time.monotonic() - started) * 1000
            t0 = time.monotonic()
            self._feed(table, stats)
            records: list[dict[str, Any]] = []
            if np.isfinite(self.max_time_ms):
                watermark = self.max_time_ms - self.cfg.lateness_ms
                stats.watermark_ms = watermark
                for end in self.monitor.advance(watermark):
                    reports, problems = self.monitor.report(end)
                    records += reports
                    stats.windows.append(end)
                    if problems and not self.quiet:
                        print(f"[qos] window {end}: {len(problems)} notes, e.g. {problems[0]}", file=sys.stderr)
            stats.monitor_ms = (time.monotonic() - t0) * 1000
            stats.reports = len(records)
            stats.alerts = sum(1 for r in records if r["alert"] is not None)
            self._save(batch_id)

            t0 = time.monotonic()
            key, value = dead_letter_columns()
            bad = batch.where(F.col("error_code").isNotNull())
            deadletter = F.lit(self.cfg.topic(DEADLETTER_TOPIC)).alias("topic")
            out = bad.select(deadletter, key.alias("key"), value.alias("value"))
            if records:
                out = out.unionByName(self._reports_frame(records))
            stats.dead_letters = bad.count()
            out.write.format("kafka").options(**self.cfg.conn.spark_options()).save()
            stats.write_ms = (time.monotonic() - t0) * 1000
        finally:
            batch.unpersist()
        stats.duration_ms = (time.monotonic() - started) * 1000
        self._report(stats)

    def _reports_frame(self, records: list[dict[str, Any]]) -> DataFrame:
        from schemas.codec import codec_for

        codec = codec_for(TOPICS[QOS].schema)
        topic = self.cfg.topic(QOS)
        rows = [(topic, f"{r['kind']}:{r['id']}".encode(), codec.encode(r)) for r in records]
        return self.spark.createDataFrame(rows, "topic string, key binary, value binary")

    def _report(self, stats: QosBatchStats) -> None:
        self.history.append(stats)
        if self.cfg.stats_file is not None:
            self.cfg.stats_file.parent.mkdir(parents=True, exist_ok=True)
            with self.cfg.stats_file.open("a") as f:
                f.write(json.dumps(stats.__dict__) + "\n")
        if not self.quiet:
            counts = ", ".join(f"{v:,} {k.split('.')[-2]}" for k, v in stats.records.items() if v)
            print(
                f"[qos] batch {stats.batch_id}: {counts or 'no records'}; {stats.dead_letters:,} dead letters; "
                f"{len(stats.windows)} windows, {stats.reports} reports, {stats.alerts} alerts; "
                f"{stats.duration_ms:.0f} ms",
                file=sys.stderr,
                flush=True,
            )


def build_query(spark: SparkSession, cfg: QosConfig, quiet: bool = True) -> tuple[StreamingQuery, QosBatch]:
    """Wire Kafka (the six inputs) -> ``QosBatch`` -> Kafka and start the query."""
    from streaming.decode import decode_topics

    handler = QosBatch(spark, cfg, quiet)
    reader = spark.readStream.format("kafka").options(**cfg.conn.spark_options())
    reader = reader.option("subscribe", ",".join(handler.names.values()))
    reader = reader.option("startingOffsets", "earliest")  # topology and subscriptions are tables
    reader = reader.option("failOnDataLoss", "false")  # retention and compaction delete records; never stop
    if cfg.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(cfg.max_offsets_per_trigger))
    specs = {handler.names[t]: TOPICS[t] for t in INPUTS}
    decoded = decode_topics(reader.load(), specs)
    flat = decoded.select(*input_columns(decoded, handler.names), "key", "value", "timestamp")
    writer = (
        flat.writeStream.foreachBatch(handler)
        .option("checkpointLocation", str(cfg.query_checkpoint))
        .queryName(f"siftstream-qos-{cfg.topic_prefix or 'default'}")
    )
    writer = (
        writer.trigger(availableNow=True) if cfg.available_now else writer.trigger(processingTime=cfg.trigger_interval)
    )
    return writer.start(), handler


def run(spark: SparkSession, cfg: QosConfig, quiet: bool = False) -> list[QosBatchStats]:
    """Run until done (available-now) or interrupted; raise RuntimeError when the query failed."""
    from pyspark.errors import StreamingQueryException

    query, handler = build_query(spark, cfg, quiet)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        print("[qos] stopping ...", file=sys.stderr)
    except StreamingQueryException as exc:
        raise RuntimeError(f"the QoS query failed: {exc}") from exc
    finally:
        if query.isActive:
            query.stop()
    return handler.history
