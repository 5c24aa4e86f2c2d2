"""The composites job: events and composite subscriptions -> detections and their placement.

One streaming query reads the compacted topology and subscriptions topics, the events and the
link telemetry (``TOPOLOGY_TOPIC``, ``SUBSCRIPTIONS_TOPIC``, ``EVENTS_TOPIC``,
``LINK_TELEMETRY_TOPIC`` of ``schemas.topics``). Each micro-batch (``streaming.driver_batch``:
decode in the JVM, collect per topic as Arrow, dead letters, state per batch) feeds the driver's
:class:`routing.monitors.composites.CompositeMonitor`:

1. topology and subscription changes first, in partition/offset order; a composite tree that
   does not parse goes to the dead-letter topic as ``invalid_composite`` with the parser's
   message (the path in the tree, what was wrong, what would be valid), and an existing
   subscription of that id stays;
2. the batch's events, matched in one vectorised call against every leaf filter of every live
   composite subscription, feed the detector (event time: ``published_at``); link telemetry feeds
   the placement's link delays;
3. the watermark (the largest event or telemetry time seen, minus ``lateness_ms``) makes
   detections final: one ``CompositeDetection`` per detection on ``COMPOSITES_TOPIC``, keyed by
   its deterministic ``detection_id`` (subscription and component events), so a replayed batch
   writes identical records (encoded column by column from the detector's compact output by
   ``schemas.detection_records.encode_detections``, byte for byte what the schema's codec
   writes); and at every check period the placement of each composite's detection is
   reconsidered, writing a ``Placement`` (keyed by subscription id, on ``PLACEMENTS_TOPIC``) when
   it is first decided or moves (Li & Jacobsen §4, with hysteresis: ``routing.monitors.composites``).

The selection and consumption policy and the state bound are ``routing.composite.detection``'s.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from infra.connection import KafkaConnection
from routing.composite.detection import Detections
from routing.monitors.composites import CompositeMonitor, CompositeMonitorConfig
from schemas.codec import codec_for
from schemas.detection_records import encode_detections
from schemas.topics import (
    COMPOSITES_TOPIC,
    EVENTS_TOPIC,
    LINK_TELEMETRY_TOPIC,
    PLACEMENTS_TOPIC,
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

__all__ = ["INPUTS", "CompositesBatch", "CompositesConfig", "build_query", "run"]

INPUTS = (TOPOLOGY_TOPIC, SUBSCRIPTIONS_TOPIC, EVENTS_TOPIC, LINK_TELEMETRY_TOPIC)


@dataclass(frozen=True)
class CompositesConfig:
    """Settings of the composites query.

    Attributes
    ----------
    conn : KafkaConnection
    checkpoint : Path
        Local folder: Spark's checkpoint (``query/``) and the monitor's state (``monitor/``).
    monitor : CompositeMonitorConfig
        Detector bound and placement settings (:class:`routing.monitors.composites.CompositeMonitorConfig`).
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
    monitor: CompositeMonitorConfig = field(default_factory=CompositeMonitorConfig)
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
    driver_producer = True  # the outputs are encoded on the driver: they are sent from there
    driver_consumer = True  # every record of the batch is decoded on the driver: read there
    raw_topics = (SUBSCRIPTIONS_TOPIC,)

    def __init__(self, spark: SparkSession, cfg: CompositesConfig, quiet: bool = True) -> None:
        names = {topic: cfg.topic(topic) for topic in INPUTS}
        state = cfg.checkpoint / "monitor"
        super().__init__(spark, cfg.conn, names, state, cfg.topic_prefix, cfg.stats_file, quiet)
        self.cfg = cfg
        self.monitor = CompositeMonitor(cfg.monitor)
        self.detection_codec = codec_for(TOPICS[COMPOSITES_TOPIC].schema)
        self.placement_codec = codec_for(TOPICS[PLACEMENTS_TOPIC].schema)

    def new_state(self) -> None:
        self.monitor = CompositeMonitor(self.cfg.monitor)

    def load_state(self, blob: bytes) -> None:
        self.monitor = CompositeMonitor.from_bytes(blob)

    def dump_state(self) -> bytes:
        return self.monitor.to_bytes()

    def step(self, tables: dict[str, Any], stats: BatchStats) -> list[tuple[str, bytes, bytes]]:
        # A batch makes millions of tuples and lists (component matches, partial matches,
        # detections) and no reference cycles; the cyclic collector, run every 700 allocations,
        # walks more and more of them as the survivors pile up, so it is off during the step
        # (docs/decisions/composites-step-without-cyclic-gc.md) and resumes after it.
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._step(tables, stats)
        finally:
            if enabled:
                gc.enable()

    def _step(self, tables: dict[str, Any], stats: BatchStats) -> list[tuple[str, bytes, bytes]]:
        mon = self.monitor
        times: list[float] = []
        component_matches = 0
        match_ms = detect_ms = 0.0
        table = tables[TOPOLOGY_TOPIC]
        idx = good_rows(table)
        stats.records[TOPOLOGY_TOPIC] = len(idx)
        if len(idx):
            mon.apply_topology(topology_changes(table, idx))
        table = tables[SUBSCRIPTIONS_TOPIC]
        idx = good_rows(table)
        stats.records[SUBSCRIPTIONS_TOPIC] = len(idx)
        if len(idx):
            rows = table.take(idx).to_pylist()
            records = subscription_records(rows)
            for pos, (code, reason) in mon.apply_subscriptions(records, [r["s_broker"] for r in rows]):
                self.reject(table, int(idx[pos]), code, reason)
        table = tables[EVENTS_TOPIC]
        idx = good_rows(table)
        stats.records[EVENTS_TOPIC] = len(idx)
        if len(idx):
            at = column(table, "e_at", idx).astype(np.int64)
            maps = {
                kind: table.column(f"e_{kind}").take(idx).combine_chunks()
                for kind in ("longs", "doubles", "strings", "booleans")
            }
            started = time.perf_counter()
            component_matches = mon.add_events(
                column(table, "e_id", idx).astype(str).tolist(),
                column(table, "e_publisher", idx).astype(str).tolist(),
                at.tolist(),
                event_batch(maps, len(idx)),
            )
            times.append(float(at.max()))
            match_ms = (time.perf_counter() - started) * 1000
        table = tables[LINK_TELEMETRY_TOPIC]
        idx = good_rows(table)
        stats.records[LINK_TELEMETRY_TOPIC] = len(idx)
        if len(idx):
            src, dst, sent, delay = link_samples(table, idx)
            mon.add_link_samples(src, dst, sent, delay)
            times.append(float(sent.max()))
        if times:
            self.max_time_ms = max(self.max_time_ms, *times)
        detections = Detections()
        placements: list[dict[str, Any]] = []
        started = time.perf_counter()
        if np.isfinite(self.max_time_ms):
            stats.watermark_ms = self.max_time_ms - self.cfg.lateness_ms
            detections = mon.detect(stats.watermark_ms)
            detect_ms = (time.perf_counter() - started) * 1000
            placements = mon.place(stats.watermark_ms)
        place_ms = (time.perf_counter() - started) * 1000 - detect_ms
        started = time.perf_counter()
        keys, values = encode_detections(detections, self.detection_codec)
        out = list(zip(repeat(self.cfg.topic(COMPOSITES_TOPIC)), keys, values))
        out += [
            (self.cfg.topic(PLACEMENTS_TOPIC), p["subscription_id"].encode(), self.placement_codec.encode(p))
            for p in placements
        ]
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
            # where the step's time went (ms): matching and buffering, detection, placement, encoding
            "match_ms": round(match_ms),
            "detect_ms": round(detect_ms),
            "place_ms": round(place_ms),
            "encode_ms": round((time.perf_counter() - started) * 1000),
        }
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
