"""The QoS job: telemetry, receipts and the overlay's shape -> ``siftstream.qos.v1``, continuously.

One streaming query reads six topics: the compacted ``siftstream.topology.v1`` and
``siftstream.subscriptions.v1`` (the overlay's shape and the subscribers' wishes), and
``siftstream.events.v1``, ``siftstream.telemetry.links.v1``, ``siftstream.telemetry.brokers.v1``
and ``siftstream.receipts.v1``. ``foreachBatch`` caches the batch's raw Kafka rows, then:

1. decodes and validates each topic's rows in the JVM (``streaming.decode.TopicDecoder``, its
   columns built once per job; one small plan per topic keeps Spark's generated code small: the
   job digested 36k records/s this way against 20k/s with one CASE over all six schemas in one
   plan, ``bench/qos_job.py --quick``) and collects them as one Arrow table
   per topic: the fields the monitor reads for good records, raw key and value for rejected ones;
2. hands the good rows to the driver's :class:`routing.qos_monitor.QosMonitor`: topology and
   subscription changes first (in partition/offset order), then events (matched against the live
   subscriptions for the denominator of R_s, and counted for each publisher's content mix), link
   and broker samples, and receipts, all as numpy columns;
3. moves the monitor's clock to the watermark (the largest time seen in the telemetry, minus
   ``lateness_ms``) and, for every update period that ended (default 10 s), writes one
   ``QosReport`` per subscriber and per broker (key ``<kind>:<id>``), with alerts;
4. saves the monitor's state as ``<checkpoint>/monitor/<batch id>.npz``, then writes the reports
   and a dead letter (keyed ``topic/partition/offset``, as every job writes it) for every record
   that did not decode or validate, in one Kafka write: broken telemetry never stops the job.

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
from streaming.session import await_query, kafka_stream, start_batches

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
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


# ---- per-topic projections, built once -------------------------------------------------------

FIELDS: dict[str, list[tuple[str, str]]] = {
    TOPOLOGY: [
        ("kind", "t_kind"),
        ("broker", "t_broker"),
        ("from", "t_from"),
        ("to", "t_to"),
        ("reliability", "t_reliability"),
    ],
    SUBSCRIPTIONS: [
        ("type", "s_op"),
        ("subscription_id", "s_id"),
        ("subscriber_id", "s_subscriber"),
        ("broker", "s_broker"),
        ("filter", "s_filter"),
        ("composite", "s_composite"),
        ("deadline_ms", "s_deadline"),
        ("min_reliability", "s_min_reliability"),
    ],
    EVENTS: [
        ("event_id", "e_id"),
        ("publisher_id", "e_publisher"),
        ("published_at", "e_at"),
        ("lifetime_ms", "e_lifetime"),
    ]
    + [(f"attributes.{k}", f"e_{k}") for k in ("longs", "doubles", "strings", "booleans")],
    LINKS: [
        ("from", "l_from"),
        ("to", "l_to"),
        ("seq", "l_seq"),
        ("sent_at", "l_sent"),
        ("delay_ms", "l_delay"),
        ("lost", "l_lost"),
    ],
    BROKERS: [("broker_id", "b_id"), ("arrived_at", "b_at"), ("wait_ms", "b_wait"), ("service_ms", "b_service")],
    RECEIPTS: [("subscriber_id", "r_subscriber"), ("event_id", "r_event"), ("received_at", "r_at")],
}


class TopicReader:
    """One input topic's decoder and projection: its good records' fields, and for rejected
    records what a dead letter needs (raw key and value, coordinates, the verdict)."""

    def __init__(self, topic: str, name: str) -> None:
        from pyspark.sql import functions as F

        from streaming.decode import TopicDecoder

        self.topic, self.name = topic, name
        self.decoder = TopicDecoder(TOPICS[topic])
        self.where = F.col("topic") == name
        bad = F.col("error_code").isNotNull()
        rec = F.col("record")
        fields = []
        for path, alias in FIELDS[topic]:
            c = rec
            for part in path.split("."):
                c = c[part]
            fields.append((c.cast("string") if alias in ("t_kind", "s_op") else c).alias(alias))
        self.columns = [
            F.col("topic"),
            F.col("partition"),
            F.col("offset"),
            F.unix_millis("timestamp").alias("ts_ms"),
            F.col("error_code"),
            F.col("reason"),
            F.col("key").cast("string").alias("key_text"),
            F.col("value").isNull().alias("tombstone"),
            F.when(bad, F.col("key")).alias("bad_key"),
            F.when(bad, F.col("value")).alias("bad_value"),
            *fields,
        ]

    def collect(self, batch: DataFrame) -> Any:
        """This topic's rows of ``batch`` as an Arrow table."""
        return self.decoder(batch.where(self.where)).select(*self.columns).toArrow()


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
    decode_ms: float = 0.0
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
        self.readers = {topic: TopicReader(topic, name) for topic, name in self.names.items()}
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

    def _feed(self, tables: dict[str, Any], stats: QosBatchStats) -> None:
        """Good records to the monitor: the overlay's shape first, then the measurements."""
        import pyarrow.compute as pc

        monitor = self.monitor
        assert monitor is not None
        times: list[float] = []

        def good(topic: str) -> tuple[Any, np.ndarray]:
            table = tables[topic]
            ok = np.asarray(pc.is_null(table.column("error_code")).to_numpy(zero_copy_only=False), dtype=bool)
            order = np.lexsort(
                (table.column("offset").to_numpy(zero_copy_only=False), table.column("partition").to_numpy())
            )
            idx = order[ok[order]]
            stats.records[topic] = len(idx)
            return table, idx

        def col(table: Any, name: str, idx: np.ndarray) -> np.ndarray:
            return np.asarray(table.column(name).take(idx).to_numpy(zero_copy_only=False))

        table, idx = good(TOPOLOGY)
        if len(idx):
            rows = table.take(idx).to_pylist()
            monitor.apply_topology(
                [
                    (
                        r["key_text"],
                        None
                        if r["tombstone"]
                        else {k: r[f"t_{k}"] for k in ("kind", "broker", "from", "to", "reliability")},
                    )
                    for r in rows
                ]
            )
        table, idx = good(SUBSCRIPTIONS)
        if len(idx):
            rows = table.take(idx).to_pylist()
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
                    for r in rows
                ],
                [
                    {
                        "subscriber_id": r["s_subscriber"],
                        "broker": r["s_broker"],
                        "deadline_ms": r["s_deadline"],
                        "min_reliability": r["s_min_reliability"],
                    }
                    for r in rows
                ],
            )
        table, idx = good(EVENTS)
        if len(idx):
            at = col(table, "e_at", idx).astype(np.float64)
            monitor.add_events(
                col(table, "e_id", idx).tolist(),
                col(table, "e_publisher", idx).tolist(),
                at,
                col(table, "e_lifetime", idx).astype(np.float64),
                _attributes(table, idx),
            )
            times.append(float(at.max()))
        table, idx = good(LINKS)
        if len(idx):
            sent = col(table, "l_sent", idx).astype(np.float64)
            delay = pc.fill_null(table.column("l_delay").take(idx), float("nan"))
            monitor.add_link_samples(
                col(table, "l_from", idx).astype(str),
                col(table, "l_to", idx).astype(str),
                col(table, "l_seq", idx).astype(np.int64),
                sent,
                np.asarray(delay.to_numpy(zero_copy_only=False), dtype=np.float64),
                col(table, "l_lost", idx).astype(bool),
            )
            times.append(float(sent.max()))
        table, idx = good(BROKERS)
        if len(idx):
            arrived = col(table, "b_at", idx).astype(np.float64)
            monitor.add_broker_samples(
                col(table, "b_id", idx).astype(str),
                arrived,
                col(table, "b_wait", idx).astype(np.float64),
                col(table, "b_service", idx).astype(np.float64),
            )
            times.append(float(arrived.max()))
        table, idx = good(RECEIPTS)
        if len(idx):
            received = col(table, "r_at", idx).astype(np.float64)
            monitor.add_receipts(
                col(table, "r_subscriber", idx).astype(str).tolist(), col(table, "r_event", idx).tolist(), received
            )
            times.append(float(received.max()))
        if times:
            self.max_time_ms = max(self.max_time_ms, *times)

    def _dead_letters(self, tables: dict[str, Any]) -> list[tuple[Any, ...]]:
        """Rejected records of every topic, as rows for ``_output``'s dead-letter frame."""
        out: list[tuple[Any, ...]] = []
        for table in tables.values():
            bad = table.filter(table.column("error_code").is_valid())
            if bad.num_rows:
                cols = ["topic", "partition", "offset", "ts_ms", "bad_key", "bad_value", "error_code", "reason"]
                out += list(zip(*(bad.column(c).to_pylist() for c in cols), strict=True))
        return out

    # -- the batch --------------------------------------------------------------------------

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        stats = QosBatchStats(batch_id)
        if self.monitor is None:
            self._restore(batch_id)
        assert self.monitor is not None
        batch.persist()
        try:
            batch.count()  # read once, into the cache
            stats.decode_ms = (time.monotonic() - started) * 1000
            t0 = time.monotonic()
            tables = {topic: reader.collect(batch) for topic, reader in self.readers.items()}
            stats.collect_ms = (time.monotonic() - t0) * 1000
        finally:
            batch.unpersist()
        t0 = time.monotonic()
        self._feed(tables, stats)
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
        dead = self._dead_letters(tables)
        stats.dead_letters = len(dead)
        if dead or records:
            self._output(dead, records).write.format("kafka").options(**self.cfg.conn.spark_options()).save()
        stats.write_ms = (time.monotonic() - t0) * 1000
        stats.duration_ms = (time.monotonic() - started) * 1000
        self._report(stats)

    def _output(self, dead: list[tuple[Any, ...]], records: list[dict[str, Any]]) -> DataFrame:
        """One frame for one Kafka write: dead letters (encoded as every job does) and reports."""
        from pyspark.sql import functions as F

        from streaming.decode import dead_letter_columns

        schema = (
            "topic string, partition int, offset long, ts_ms long, key binary, value binary, "
            "error_code string, reason string"
        )
        df = self.spark.createDataFrame(dead, schema).withColumn("timestamp", F.timestamp_millis("ts_ms"))
        key, value = dead_letter_columns()
        deadletter = F.lit(self.cfg.topic(DEADLETTER_TOPIC)).alias("topic")
        out = df.select(deadletter, key.alias("key"), value.alias("value"))
        return out.unionByName(self._reports_frame(records)) if records else out

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
    handler = QosBatch(spark, cfg, quiet)
    topics = list(handler.names.values())
    source = kafka_stream(spark, cfg.conn, topics, cfg.max_offsets_per_trigger)
    source = source.select("topic", "partition", "offset", "key", "value", "timestamp")
    query = start_batches(
        source,
        handler,
        cfg.query_checkpoint,
        f"siftstream-qos-{cfg.topic_prefix or 'default'}",
        cfg.available_now,
        cfg.trigger_interval,
    )
    return query, handler


def run(spark: SparkSession, cfg: QosConfig, quiet: bool = False) -> list[QosBatchStats]:
    """Run until done (available-now) or interrupted; raise RuntimeError when the query failed."""
    query, handler = build_query(spark, cfg, quiet)
    await_query(query, "qos")
    return handler.history
