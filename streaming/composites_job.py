"""The composites job: events and composite subscriptions -> detections and their placement.

One streaming query reads the compacted ``siftstream.topology.v1`` and
``siftstream.subscriptions.v1``, ``siftstream.events.v1`` and ``siftstream.telemetry.links.v1``.
Each micro-batch (``streaming.driver_batch``: decode in the JVM, collect per topic as Arrow, dead
letters, state per batch) feeds the driver's :class:`routing.composite_monitor.CompositeMonitor`:

1. topology and subscription changes first, in partition/offset order; a composite tree that
   does not parse goes to the dead-letter topic as ``invalid_composite`` with the parser's
   message (the path in the tree, what was wrong, what would be valid), and an existing
   subscription of that id stays;
2. the batch's events, matched in one vectorised call against every leaf filter of every live
   composite subscription, feed the detector (event time: ``published_at``); link telemetry feeds
   the placement's link delays;
3. the watermark (the largest event or telemetry time seen, minus ``lateness_ms``) makes
   detections final: one ``CompositeDetection`` per detection on ``siftstream.composites.v1``,
   keyed by its deterministic ``detection_id`` (subscription and component events), so a replayed
   batch writes identical records; and at every check period the placement of each composite's
   detection is reconsidered, writing a ``Placement`` (keyed by subscription id) when it is first
   decided or moves (Li & Jacobsen §4, with hysteresis: ``routing.composite_monitor``).

The selection and consumption policy and the state bound are ``routing.detection``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from infra.connection import KafkaConnection
from routing.composite_monitor import CompositeMonitor, MonitorConfig
from routing.subscriptions import SubscriptionRecord
from schemas.codec import codec_for
from schemas.topics import TOPICS
from streaming.arrow_matching import event_batch
from streaming.driver_batch import BatchStats, DriverBatch, column, good_rows, link_samples, topology_changes
from streaming.session import await_query

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

TOPOLOGY = "siftstream.topology.v1"
SUBSCRIPTIONS = "siftstream.subscriptions.v1"
EVENTS = "siftstream.events.v1"
LINKS = "siftstream.telemetry.links.v1"
COMPOSITES = "siftstream.composites.v1"
PLACEMENTS = "siftstream.placements.v1"
INPUTS = (TOPOLOGY, SUBSCRIPTIONS, EVENTS, LINKS)


@dataclass(frozen=True)
class CompositesConfig:
    """Settings of the composites query.

    Attributes
    ----------
    conn : KafkaConnection
    checkpoint : Path
        Local folder: Spark's checkpoint (``query/``) and the monitor's state (``monitor/``).
    monitor : MonitorConfig
        Detector bound and placement settings (:class:`routing.composite_monitor.MonitorConfig`).
    topic_prefix : str
    available_now : bool
    trigger_interval : str
    lateness_ms : int
        Events may arrive this late (event time); later ones are dropped and counted.
    max_offsets_per_trigger : int, optional
    stats_file : Path, optional
    """

    conn: KafkaConnection
    checkpoint: Path
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    topic_prefix: str = ""
    available_now: bool = False
    trigger_interval: str = "5 seconds"
    lateness_ms: int = 5_000
    max_offsets_per_trigger: int | None = None
    stats_file: Path | None = None

    def topic(self, name: str) -> str:
        return self.topic_prefix + name


class CompositesBatch(DriverBatch):
    """The ``foreachBatch`` function: feeds the monitor, writes detections, placements, dead letters."""

    job = "composites"
    raw_topics = (SUBSCRIPTIONS,)

    def __init__(self, spark: SparkSession, cfg: CompositesConfig, quiet: bool = True) -> None:
        names = {topic: cfg.topic(topic) for topic in INPUTS}
        state = cfg.checkpoint / "monitor"
        super().__init__(spark, cfg.conn, names, state, cfg.topic_prefix, cfg.stats_file, quiet)
        self.cfg = cfg
        self.monitor = CompositeMonitor(cfg.monitor)
        self.detection_codec = codec_for(TOPICS[COMPOSITES].schema)
        self.placement_codec = codec_for(TOPICS[PLACEMENTS].schema)

    def new_state(self) -> None:
        self.monitor = CompositeMonitor(self.cfg.monitor)

    def load_state(self, blob: bytes) -> None:
        self.monitor = CompositeMonitor.from_bytes(blob)

    def dump_state(self) -> bytes:
        return self.monitor.to_bytes()

    def step(self, tables: dict[str, Any], stats: BatchStats) -> list[tuple[str, bytes, bytes]]:
        mon = self.monitor
        times: list[float] = []
        component_matches = 0
        table = tables[TOPOLOGY]
        idx = good_rows(table)
        stats.records[TOPOLOGY] = len(idx)
        if len(idx):
            mon.apply_topology(topology_changes(table, idx))
        table = tables[SUBSCRIPTIONS]
        idx = good_rows(table)
        stats.records[SUBSCRIPTIONS] = len(idx)
        if len(idx):
            rows = table.take(idx).to_pylist()
            records = [
                SubscriptionRecord(
                    key=r["key_text"],
                    tombstone=bool(r["tombstone"]),
                    op=r["s_op"],
                    subscription_id=r["s_id"],
                    filter=r["s_filter"],
                    composite=r["s_composite"],
                    subscriber_id=r["s_subscriber"],
                )
                for r in rows
            ]
            for pos, (code, reason) in mon.apply_subscriptions(records, [r["s_broker"] for r in rows]):
                self.reject(table, int(idx[pos]), code, reason)
        table = tables[EVENTS]
        idx = good_rows(table)
        stats.records[EVENTS] = len(idx)
        if len(idx):
            at = column(table, "e_at", idx).astype(np.int64)
            maps = {
                kind: table.column(f"e_{kind}").take(idx).combine_chunks()
                for kind in ("longs", "doubles", "strings", "booleans")
            }
            component_matches = mon.add_events(
                column(table, "e_id", idx).astype(str).tolist(),
                column(table, "e_publisher", idx).astype(str).tolist(),
                at.tolist(),
                event_batch(maps, len(idx)),
            )
            times.append(float(at.max()))
        table = tables[LINKS]
        idx = good_rows(table)
        stats.records[LINKS] = len(idx)
        if len(idx):
            src, dst, sent, delay = link_samples(table, idx)
            mon.add_link_samples(src, dst, sent, delay)
            times.append(float(sent.max()))
        if times:
            self.max_time_ms = max(self.max_time_ms, *times)
        detections: list[Any] = []
        placements: list[dict[str, Any]] = []
        if np.isfinite(self.max_time_ms):
            stats.watermark_ms = self.max_time_ms - self.cfg.lateness_ms
            detections, placements = mon.advance(stats.watermark_ms)
        det_stats = mon.detector.stats
        stats.extra = {
            "component_matches": component_matches,
            "detections": len(detections),
            "placements": len(placements),
            "pending": det_stats.pending,
            "stored": det_stats.stored,
            "late": det_stats.late,
            "expired": det_stats.expired,
            "evicted": det_stats.evicted,
        }
        out = [
            (self.cfg.topic(COMPOSITES), d["detection_id"].encode(), self.detection_codec.encode(dict(d)))
            for d in detections
        ]
        out += [
            (self.cfg.topic(PLACEMENTS), p["subscription_id"].encode(), self.placement_codec.encode(p))
            for p in placements
        ]
        return out


def build_query(
    spark: SparkSession, cfg: CompositesConfig, quiet: bool = True
) -> tuple[StreamingQuery, CompositesBatch]:
    """Wire Kafka (the four inputs) -> ``CompositesBatch`` -> Kafka and start the query."""
    handler = CompositesBatch(spark, cfg, quiet)
    checkpoint = cfg.checkpoint / "query"
    query = handler.start(checkpoint, cfg.available_now, cfg.trigger_interval, cfg.max_offsets_per_trigger)
    return query, handler


def run(spark: SparkSession, cfg: CompositesConfig, quiet: bool = False) -> list[BatchStats]:
    """Run until done (available-now) or interrupted; raise RuntimeError when the query failed."""
    query, handler = build_query(spark, cfg, quiet)
    await_query(query, "composites")
    return handler.history
