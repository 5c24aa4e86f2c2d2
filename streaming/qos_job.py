"""The QoS job: telemetry, receipts and the overlay's shape -> the QoS topic (``QOS_TOPIC``), continuously.

One streaming query reads six topics (names from ``schemas.topics``): the compacted topology and
subscriptions topics (``TOPOLOGY_TOPIC``, ``SUBSCRIPTIONS_TOPIC``: the overlay's shape and the
subscribers' wishes), and the events, link telemetry, broker telemetry and receipts
(``EVENTS_TOPIC``, ``LINK_TELEMETRY_TOPIC``, ``BROKER_TELEMETRY_TOPIC``, ``RECEIPTS_TOPIC``).
``foreachBatch`` reads the batch's raw Kafka rows once (one Arrow table, read on the driver by the
batch's offset range), then:

1. decodes and validates each topic's rows (``streaming.driver_batch.TopicReader``): the
   telemetry, the receipts and the events, the bulk of the records, by the columnar fast paths
   (``schemas.columnar``), the other topics (and any record those paths refer) in the JVM
   (``streaming.decode.TopicDecoder``), into one Arrow table per topic: the fields the monitor
   reads for good records, raw key and value for rejected ones;
2. hands the good rows to the driver's :class:`routing.monitors.qos.QosMonitor`: topology and
   subscription changes first (in partition/offset order), then events (their attribute maps as
   ``EventBatch`` columns: matched against the live subscriptions for the denominator of R_s, and
   counted for each publisher's content mix), link and broker samples, and receipts, all as numpy
   columns;
3. moves the monitor's clock to the watermark (the largest time seen in the telemetry, minus
   ``lateness_ms``) and, for every update period that ended (default 10 s), writes one
   ``QosReport`` per subscriber and per broker (key ``<kind>:<id>``), with alerts;
4. saves the monitor's state as ``<checkpoint>/monitor/<batch id>.npz``, then writes the reports
   and a dead letter (keyed ``topic/partition/offset``, as every job writes it) for every record
   that did not decode or validate: the reports from the driver by one idempotent producer, the
   dead letters by a Spark write; broken telemetry never stops the job.

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

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from infra.connection import KafkaConnection
from routing.monitors.qos import QosMonitor, QosMonitorConfig
from routing.reliability.estimation import EstimationConfig
from schemas.codec import codec_for
from schemas.rules import VALUE_KINDS
from schemas.topics import (
    BROKER_TELEMETRY_TOPIC,
    EVENTS_TOPIC,
    LINK_TELEMETRY_TOPIC,
    QOS_TOPIC,
    RECEIPTS_TOPIC,
    SUBSCRIPTIONS_TOPIC,
    TOPICS,
    TOPOLOGY_TOPIC,
)
from streaming.arrow_matching import event_batch
from streaming.driver_batch import (
    BatchStats,
    DriverBatch,
    column,
    good_rows,
    link_samples,
    subscription_records,
    topology_changes,
)
from streaming.session import await_query

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

__all__ = ["INPUTS", "QosBatch", "QosConfig", "build_query", "run"]

INPUTS = (
    TOPOLOGY_TOPIC,
    SUBSCRIPTIONS_TOPIC,
    EVENTS_TOPIC,
    LINK_TELEMETRY_TOPIC,
    BROKER_TELEMETRY_TOPIC,
    RECEIPTS_TOPIC,
)


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

    def monitor_config(self) -> QosMonitorConfig:
        estimation = EstimationConfig(
            bucket_ms=self.update_period_ms, buckets=self.window_buckets, grace_ms=float(self.lateness_ms)
        )
        return QosMonitorConfig(update_period_ms=self.update_period_ms, estimation=estimation, model=self.model)


class QosBatch(DriverBatch):
    """The ``foreachBatch`` function: feeds the monitor and writes reports and dead letters."""

    job = "qos"
    driver_producer = True  # the outputs are encoded on the driver: they are sent from there
    driver_consumer = True  # every record of the batch is decoded on the driver: read there

    def __init__(self, spark: SparkSession, cfg: QosConfig, quiet: bool = True) -> None:
        names = {topic: cfg.topic(topic) for topic in INPUTS}
        super().__init__(spark, cfg.conn, names, cfg.state_folder, cfg.topic_prefix, cfg.stats_file, quiet)
        self.cfg = cfg
        self.monitor: QosMonitor | None = None

    def new_state(self) -> None:
        self.monitor = QosMonitor(self.cfg.monitor_config())

    def load_state(self, blob: bytes) -> None:
        self.monitor = QosMonitor.from_bytes(blob)

    def dump_state(self) -> bytes:
        assert self.monitor is not None
        return self.monitor.to_bytes()

    def _feed(self, tables: dict[str, Any], stats: BatchStats) -> None:
        """Good records to the monitor: the overlay's shape first, then the measurements."""

        monitor = self.monitor
        assert monitor is not None
        times: list[float] = []

        def good(topic: str) -> tuple[Any, np.ndarray]:
            idx = good_rows(tables[topic])
            stats.records[topic] = len(idx)
            return tables[topic], idx

        col = column
        table, idx = good(TOPOLOGY_TOPIC)
        if len(idx):
            monitor.apply_topology(topology_changes(table, idx))
        table, idx = good(SUBSCRIPTIONS_TOPIC)
        if len(idx):
            rows = table.take(idx).to_pylist()
            monitor.apply_subscriptions(
                subscription_records(rows),
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
        table, idx = good(EVENTS_TOPIC)
        if len(idx):
            at = col(table, "e_at", idx).astype(np.float64)
            monitor.add_events(
                col(table, "e_id", idx).tolist(),
                col(table, "e_publisher", idx).tolist(),
                at,
                col(table, "e_lifetime", idx).astype(np.float64),
                event_batch(
                    {kind: table.column(f"e_{kind}").take(idx).combine_chunks() for kind in VALUE_KINDS}, len(idx)
                ),
            )
            times.append(float(at.max()))
        table, idx = good(LINK_TELEMETRY_TOPIC)
        if len(idx):
            src, dst, sent, delay = link_samples(table, idx)
            monitor.add_link_samples(
                src, dst, col(table, "l_seq", idx).astype(np.int64), sent, delay, col(table, "l_lost", idx).astype(bool)
            )
            times.append(float(sent.max()))
        table, idx = good(BROKER_TELEMETRY_TOPIC)
        if len(idx):
            arrived = col(table, "b_at", idx).astype(np.float64)
            monitor.add_broker_samples(
                col(table, "b_id", idx).astype(str),
                arrived,
                col(table, "b_wait", idx).astype(np.float64),
                col(table, "b_service", idx).astype(np.float64),
            )
            times.append(float(arrived.max()))
        table, idx = good(RECEIPTS_TOPIC)
        if len(idx):
            received = col(table, "r_at", idx).astype(np.float64)
            monitor.add_receipts(
                col(table, "r_subscriber", idx).astype(str).tolist(), col(table, "r_event", idx).tolist(), received
            )
            times.append(float(received.max()))
        if times:
            self.max_time_ms = max(self.max_time_ms, *times)

    def step(self, tables: dict[str, Any], stats: BatchStats) -> list[tuple[str, bytes, bytes]]:
        """Feed the monitor, move its clock to the watermark, encode every period's reports."""
        assert self.monitor is not None
        self._feed(tables, stats)
        records: list[dict[str, Any]] = []
        windows: list[int] = []
        notes = 0
        fed = time.monotonic()
        if np.isfinite(self.max_time_ms):
            watermark = self.max_time_ms - self.cfg.lateness_ms
            stats.watermark_ms = watermark
            for end in self.monitor.advance(watermark):
                reports, problems = self.monitor.report(end)
                records += reports
                windows.append(end)
                notes += len(problems)
                if problems:  # the count is in the batch's line
                    self.log.debug(f"window ending {end}: {len(problems)} notes, e.g. {problems[0]}")
        stats.extra = {
            "reports": len(records),
            "alerts": sum(1 for r in records if r["alert"] is not None),
            "notes": notes,
            "windows": windows,
            "report_ms": (time.monotonic() - fed) * 1000,  # of step_ms: the windows' reports
        }
        codec = codec_for(TOPICS[QOS_TOPIC].schema)
        topic = self.cfg.topic(QOS_TOPIC)
        return [(topic, f"{r['kind']}:{r['id']}".encode(), codec.encode(r)) for r in records]


def build_query(spark: SparkSession, cfg: QosConfig, quiet: bool = True) -> tuple[StreamingQuery, QosBatch]:
    """Wire Kafka (the six inputs) -> ``QosBatch`` -> Kafka and start the query."""
    handler = QosBatch(spark, cfg, quiet)
    query = handler.start(cfg.query_checkpoint, cfg.available_now, cfg.trigger_interval, cfg.max_offsets_per_trigger)
    return query, handler


def run(spark: SparkSession, cfg: QosConfig, quiet: bool = False) -> list[BatchStats]:
    """Run until done (available-now) or interrupted; raise RuntimeError when the query failed."""
    query, handler = build_query(spark, cfg, quiet)
    await_query(query, "qos")
    return handler.history
