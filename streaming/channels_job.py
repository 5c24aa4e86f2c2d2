"""The channels job: subscriptions and matches -> planned channel assignment versions.

One streaming query reads the compacted subscriptions topic and the matches
(``SUBSCRIPTIONS_TOPIC``, ``MATCHES_TOPIC`` of ``schemas.topics``). Each micro-batch
(``streaming.driver_batch``: decode, collect per topic as Arrow, dead letters, state per batch)
feeds the driver's :class:`routing.monitors.channels.ChannelMonitor`:

1. subscription changes first, in partition/offset order (new subscriptions are placed by the
   join rule at once; composites and removals drop out);
2. the batch's ``Match`` records (event id and the subscriptions it matched) enter the recent
   sample;
3. the monitor's step at the largest ``published_at`` of the matches so far (event time; before
   the first match, the subscription records' Kafka timestamps) returns the planned versions,
   each written as a ``ChannelAssignment`` record keyed by the version in decimal to
   ``CHANNELS_TOPIC`` (docs/reference/delivery.md §3).

The monitor's state is saved per batch beside Spark's checkpoint, so a replayed batch writes
identical records. docs/guide/channels.md describes the settings and how to read the output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from threadpoolctl import threadpool_limits

from infra.connection import KafkaConnection
from routing.monitors.channels import ChannelMonitor, ChannelMonitorConfig
from schemas.codec import codec_for
from schemas.topics import CHANNELS_TOPIC, MATCHES_TOPIC, SUBSCRIPTIONS_TOPIC, TOPICS
from streaming.driver_batch import BatchStats, DriverBatch, column, good_rows, subscription_records
from streaming.session import await_query

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

__all__ = ["INPUTS", "ChannelsBatch", "ChannelsConfig", "build_query", "run"]

INPUTS = (SUBSCRIPTIONS_TOPIC, MATCHES_TOPIC)


@dataclass(frozen=True)
class ChannelsConfig:
    """Settings of the channels query.

    Attributes
    ----------
    conn : KafkaConnection
    checkpoint : Path
        Local folder: Spark's checkpoint (``query/``) and the monitor's state (``monitor/``).
    monitor : ChannelMonitorConfig
        K, ψ, the sample, the method and the re-clustering thresholds
        (:class:`routing.monitors.channels.ChannelMonitorConfig`).
    topic_prefix : str
    available_now : bool
        Process what is in the topics now, then stop.
    trigger_interval : str
    max_offsets_per_trigger : int, optional
    stats_file : Path, optional
        One JSON line per micro-batch.
    """

    conn: KafkaConnection
    checkpoint: Path
    monitor: ChannelMonitorConfig = field(default_factory=ChannelMonitorConfig)
    topic_prefix: str = ""
    available_now: bool = False
    trigger_interval: str = "5 seconds"
    max_offsets_per_trigger: int | None = None
    stats_file: Path | None = None

    def topic(self, name: str) -> str:
        return self.topic_prefix + name


class ChannelsBatch(DriverBatch):
    """The ``foreachBatch`` function: feeds the monitor, writes planned versions and dead letters."""

    job = "channels"
    # a planned version lists every subscription (about 2 MB at 100,000): the topic allows 64 MB
    write_options = (("kafka.max.request.size", str(64 << 20)), ("kafka.compression.type", "lz4"))

    def __init__(self, spark: SparkSession, cfg: ChannelsConfig, quiet: bool = True) -> None:
        names = {topic: cfg.topic(topic) for topic in INPUTS}
        super().__init__(spark, cfg.conn, names, cfg.checkpoint / "monitor", cfg.topic_prefix, cfg.stats_file, quiet)
        self.cfg = cfg
        self.monitor = ChannelMonitor(cfg.monitor)
        self.codec = codec_for(TOPICS[CHANNELS_TOPIC].schema)

    def new_state(self) -> None:
        self.monitor = ChannelMonitor(self.cfg.monitor)

    def load_state(self, blob: bytes) -> None:
        self.monitor = ChannelMonitor.from_bytes(blob)

    def dump_state(self) -> bytes:
        return self.monitor.to_bytes()

    def rows(self, batch: DataFrame, batch_id: int) -> DataFrame:
        """The batch's subscription records and only each matches partition's last
        ``sample_events`` records of the batch: the sample keeps no more, and fetching every
        ``Match`` record (about 13 MB/s at 10,000 events/s and 220 ids each) would take CPU from
        the jobs beside this one. Both are read by offset range (``streaming.session.kafka_range``:
        only those records are fetched, ``batch`` itself is never read); the batch's start and end
        offsets come from Spark's offset log (this batch's entry and the previous one's)."""
        from streaming.matching_job import read_offset_log
        from streaming.session import EARLIEST, kafka_range

        folder = self.cfg.checkpoint / "query"
        ends = read_offset_log(folder, batch_id)
        starts = read_offset_log(folder, batch_id - 1) if batch_id > 0 else {}
        if not ends or starts is None:
            return batch
        frames = []
        for name in INPUTS:
            topic = self.cfg.topic(name)
            end, start = ends.get(topic, {}), dict(starts.get(topic, {}))
            if name == MATCHES_TOPIC:
                for p, o in end.items():
                    tail = o - self.cfg.monitor.sample_events
                    if tail > max(start.get(p, EARLIEST), 0):
                        start[p] = tail
            frame = kafka_range(self.spark, self.cfg.conn, topic, start, end)
            if frame is not None:
                frames.append(frame.select(*batch.columns))
        if not frames:
            return batch.limit(0)
        out = frames[0]
        for frame in frames[1:]:
            out = out.unionByName(frame)
        return out

    def step(self, tables: dict[str, Any], stats: BatchStats) -> list[tuple[str, bytes, bytes]]:
        mon = self.monitor
        sub_time = -np.inf
        table = tables[SUBSCRIPTIONS_TOPIC]
        idx = good_rows(table)
        stats.records[SUBSCRIPTIONS_TOPIC] = len(idx)
        if len(idx):
            rows = table.take(idx).to_pylist()
            mon.apply_subscriptions(subscription_records(rows))
            sub_time = float(column(table, "ts_ms", idx).max())
        table = tables[MATCHES_TOPIC]
        idx = good_rows(table)
        stats.records[MATCHES_TOPIC] = len(idx)
        if len(idx):
            at = column(table, "m_at", idx).astype(np.int64)
            self.max_time_ms = max(self.max_time_ms, float(at.max()))
            # only the batch's last sample_events events: the older ones would leave the sample's
            # ring within this very batch, so the state is the same and a busy batch costs no more
            tail = slice(max(0, len(idx) - mon.config.sample_events), len(idx))
            mon.add_matches(
                column(table, "m_event", idx[tail]).astype(str).tolist(),
                table.column("m_subscriptions").take(idx[tail]).to_pylist(),
                at[tail].tolist(),
            )
        # the clock is the matches' event time; before the first match, the subscription records' time
        now = self.max_time_ms if np.isfinite(self.max_time_ms) else sub_time
        # one BLAS thread: the re-clustering's eigensolver shares the machine with the other jobs,
        # and a pool of BLAS threads on two busy cores takes many times longer
        # (docs/decisions/channels-recluster-at-scale.md)
        with threadpool_limits(1):
            versions = mon.step(now) if np.isfinite(now) else []
        stats.watermark_ms = now if np.isfinite(now) else None
        waste = mon.last_waste_ratio
        stats.extra = {
            "versions": len(versions),
            "live_subscriptions": len(mon.subscribers),
            "sample_events": mon.sample_size,
            **({} if waste is None else {"waste_ratio": round(waste, 3)}),
            "reclusters": mon.counters["reclusters"],
            "rejected": mon.counters["rejected"],
            "decision": [mon.decision],  # a list: in the stats file, not in the log line
        }
        topic = self.cfg.topic(CHANNELS_TOPIC)
        return [(topic, str(v["version"]).encode(), self.codec.encode(v)) for v in versions]


def build_query(spark: SparkSession, cfg: ChannelsConfig, quiet: bool = True) -> tuple[StreamingQuery, ChannelsBatch]:
    """Wire Kafka (subscriptions and matches) -> ``ChannelsBatch`` -> Kafka and start the query."""
    handler = ChannelsBatch(spark, cfg, quiet)
    query = handler.start(
        cfg.checkpoint / "query", cfg.available_now, cfg.trigger_interval, cfg.max_offsets_per_trigger
    )
    return query, handler


def run(spark: SparkSession, cfg: ChannelsConfig, quiet: bool = False) -> list[BatchStats]:
    """Run until done (available-now) or interrupted; raise RuntimeError when the query failed."""
    query, handler = build_query(spark, cfg, quiet)
    await_query(query, "channels")
    return handler.history
