"""The routes job: the overlay, subscriptions, matches and link telemetry -> the routes topic (``ROUTES_TOPIC``).

One streaming query reads the compacted topology and subscriptions topics, the matching job's
matches and the link telemetry (``TOPOLOGY_TOPIC``, ``SUBSCRIPTIONS_TOPIC``, ``MATCHES_TOPIC``,
``LINK_TELEMETRY_TOPIC`` of ``schemas.topics``). Each micro-batch (``streaming.driver_batch``: decode in the
JVM, collect per topic as Arrow, dead letters, state per batch) hands the good rows to the
driver's :class:`routing.monitors.routes.RoutePlanner`: topology and subscription changes first (in
partition/offset order), then the matches (the observed rate of every publisher/filter flow) and
the link delays. The planner's clock is the watermark (the largest match or telemetry time, minus
``lateness_ms``); at every check period it compares the inputs with the current plan's and, on a
structural change or a sustained drift, re-plans with MICPICE (Chen et al. 2004; the enhanced
heuristic by default) and writes a ``RoutePlan`` (key: the plan id; latest wins on the topic)
with its cost, the cost of the plan it replaces and the reasons. See
:mod:`routing.monitors.routes` for the mapping and the hysteresis.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow.compute as pc

from infra.connection import KafkaConnection
from routing.matching.table import plan_change
from routing.monitors.routes import PlannerConfig, RoutePlanner
from schemas.codec import codec_for
from schemas.topics import (
    LINK_TELEMETRY_TOPIC,
    MATCHES_TOPIC,
    ROUTES_TOPIC,
    SUBSCRIPTIONS_TOPIC,
    TOPICS,
    TOPOLOGY_TOPIC,
)
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

__all__ = ["INPUTS", "RoutesBatch", "RoutesConfig", "build_query", "run", "subscription_changes"]

INPUTS = (TOPOLOGY_TOPIC, SUBSCRIPTIONS_TOPIC, MATCHES_TOPIC, LINK_TELEMETRY_TOPIC)


@dataclass(frozen=True)
class RoutesConfig:
    """Settings of the routes query.

    Attributes
    ----------
    conn : KafkaConnection
    checkpoint : Path
        Local folder: Spark's checkpoint (``query/``) and the planner's state (``planner/``).
    planner : PlannerConfig
        Method, check period, rate window, drift thresholds (:class:`routing.monitors.routes.PlannerConfig`).
    topic_prefix : str
    available_now : bool
        Process what is in the topics now, then stop.
    trigger_interval : str
    lateness_ms : int
        Matches and telemetry may arrive this late; a check period waits for them.
    max_offsets_per_trigger : int, optional
    stats_file : Path, optional
        One JSON line per micro-batch.
    """

    conn: KafkaConnection
    checkpoint: Path
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    topic_prefix: str = ""
    available_now: bool = False
    trigger_interval: str = "5 seconds"
    lateness_ms: int = 5_000
    max_offsets_per_trigger: int | None = None
    stats_file: Path | None = None

    def topic(self, name: str) -> str:
        return self.topic_prefix + name


def subscription_changes(table: Any, idx: np.ndarray) -> list[tuple[str, str | None, str | None, str | None]]:
    """The subscriptions topic's rows as ``(id, subscriber, broker, filter or None)`` changes, with
    the matching job's rules (``routing.matching.table.plan_change``: tombstones and unsubscribes
    remove, composites are not atomic, invalid filters are skipped here)."""
    out: list[tuple[str, str | None, str | None, str | None]] = []
    rows = table.take(idx).to_pylist()
    for r, rec in zip(rows, subscription_records(rows), strict=True):
        change = plan_change(rec).change
        if change is not None:
            out.append((change[0], r["s_subscriber"], r["s_broker"], change[1]))
    return out


class RoutesBatch(DriverBatch):
    """The ``foreachBatch`` function: feeds the planner and writes its plans and dead letters."""

    job = "routes"
    driver_producer = True  # the outputs are encoded on the driver: they are sent from there
    driver_consumer = True  # every record of the batch is decoded on the driver: read there

    def __init__(self, spark: SparkSession, cfg: RoutesConfig, quiet: bool = True) -> None:
        names = {topic: cfg.topic(topic) for topic in INPUTS}
        state = cfg.checkpoint / "planner"
        super().__init__(spark, cfg.conn, names, state, cfg.topic_prefix, cfg.stats_file, quiet)
        self.cfg = cfg
        self.planner = RoutePlanner(cfg.planner)
        self.codec = codec_for(TOPICS[ROUTES_TOPIC].schema)

    def new_state(self) -> None:
        self.planner = RoutePlanner(self.cfg.planner)

    def load_state(self, blob: bytes) -> None:
        self.planner = RoutePlanner.from_bytes(blob)

    def dump_state(self) -> bytes:
        blob = self.planner.to_bytes()
        self.planner.mark_saved()
        return blob

    def dump_changes(self) -> bytes | None:
        blob = self.planner.changes_to_bytes()
        self.planner.mark_saved()
        return blob

    def load_changes(self, blob: bytes) -> None:
        self.planner.apply_changes(blob)

    def step(self, tables: dict[str, Any], stats: BatchStats) -> list[tuple[str, bytes, bytes]]:
        planner = self.planner
        times: list[float] = []
        idx = good_rows(tables[TOPOLOGY_TOPIC])
        stats.records[TOPOLOGY_TOPIC] = len(idx)
        if len(idx):
            planner.apply_topology(topology_changes(tables[TOPOLOGY_TOPIC], idx))
        idx = good_rows(tables[SUBSCRIPTIONS_TOPIC])
        stats.records[SUBSCRIPTIONS_TOPIC] = len(idx)
        if len(idx):
            planner.apply_subscriptions(subscription_changes(tables[SUBSCRIPTIONS_TOPIC], idx))
        table = tables[MATCHES_TOPIC]
        idx = good_rows(table)
        stats.records[MATCHES_TOPIC] = len(idx)
        if len(idx):
            at = column(table, "m_at", idx).astype(np.float64)
            lists = table.column("m_subscriptions").take(idx).combine_chunks()
            ids = pc.dictionary_encode(lists.flatten())  # each distinct id once, as Python text
            planner.add_match_columns(
                column(table, "m_publisher", idx).astype(str).tolist(),
                at,
                np.asarray(pc.fill_null(lists.value_lengths(), 0).to_numpy(zero_copy_only=False), dtype=np.int64),
                ids.dictionary.to_pylist(),
                np.asarray(ids.indices.to_numpy(zero_copy_only=False), dtype=np.int64),
            )
            times.append(float(at.max()))
        table = tables[LINK_TELEMETRY_TOPIC]
        idx = good_rows(table)
        stats.records[LINK_TELEMETRY_TOPIC] = len(idx)
        if len(idx):
            src, dst, sent, delay = link_samples(table, idx)
            planner.add_link_samples(src, dst, sent, delay)
            times.append(float(sent.max()))
        if times:
            self.max_time_ms = max(self.max_time_ms, *times)
        plans: list[dict[str, Any]] = []
        if np.isfinite(self.max_time_ms):
            stats.watermark_ms = self.max_time_ms - self.cfg.lateness_ms
            plans = planner.advance(stats.watermark_ms)
        stats.extra = {
            "plans": len(plans),
            "versions": [p["version"] for p in plans],
            "costs": [p["cost"] for p in plans],
        }
        for p in plans:
            cost = "infeasible" if p["cost"] is None else f"cost {p['cost']:.4g}"
            self.log.log(
                logging.DEBUG if self.quiet else logging.INFO,
                f"plan v{p['version']}: {cost}; {'; '.join(p['reasons'])}",
            )
        topic = self.cfg.topic(ROUTES_TOPIC)
        return [(topic, p["plan_id"].encode(), self.codec.encode(p)) for p in plans]


def build_query(spark: SparkSession, cfg: RoutesConfig, quiet: bool = True) -> tuple[StreamingQuery, RoutesBatch]:
    """Wire Kafka (the four inputs) -> ``RoutesBatch`` -> Kafka and start the query."""
    handler = RoutesBatch(spark, cfg, quiet)
    query = handler.start(
        cfg.checkpoint / "query", cfg.available_now, cfg.trigger_interval, cfg.max_offsets_per_trigger
    )
    return query, handler


def run(spark: SparkSession, cfg: RoutesConfig, quiet: bool = False) -> list[BatchStats]:
    """Run until done (available-now) or interrupted; raise RuntimeError when the query failed."""
    query, handler = build_query(spark, cfg, quiet)
    await_query(query, "routes")
    return handler.history
