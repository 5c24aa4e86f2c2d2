"""The dashboard's feed: reads SiftStream's output topics (and the subscription and topology
tables that give them meaning) from the beginning of their retained data, decodes every record
with ``schemas.codec`` and folds it into a :class:`~streaming.dashboard.state.DashboardState`,
in a background thread, then follows the topics as they grow.

Source: the topics of docs/reference/topics.md (:data:`FEED_TOPICS` names the record each one
carries). A topic that does not exist yet is looked for again every ``rescan_s`` seconds, and a
partition added later is read from its beginning too.

Invariants: the consumer commits nothing (it is a reader, not a group member: a fresh start
reads from the beginning again); a record that does not decode is counted by topic with its
error (``DashboardState.skip``), never fatal; of a busy matches topic only the last
``match_sample`` records of each poll are decoded (the rest are counted), which bounds the
feed's cost at the matching job's full rate; ``caught_up`` turns true once every partition has
been read to the end it had when the feed started.

>>> sorted(FEED_TOPICS)[:2]
['siftstream.channels.v1', 'siftstream.composites.v1']
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from infra.connection import KafkaConnection, arrived
from schemas.codec import DecodeError, decode
from schemas.topics import (
    BROKER_TELEMETRY_TOPIC,
    CHANNELS_TOPIC,
    COMPOSITES_TOPIC,
    DEADLETTER_TOPIC,
    LINK_TELEMETRY_TOPIC,
    MATCHES_TOPIC,
    PLACEMENTS_TOPIC,
    QOS_TOPIC,
    ROUTES_TOPIC,
    SUBSCRIPTIONS_TOPIC,
    TOPICS,
    TOPOLOGY_TOPIC,
)
from streaming.dashboard.state import DashboardState

__all__ = ["FEED_TOPICS", "Feed"]

FEED_TOPICS: dict[str, str] = {
    name: TOPICS[name].schema
    for name in (
        QOS_TOPIC,
        SUBSCRIPTIONS_TOPIC,
        BROKER_TELEMETRY_TOPIC,
        LINK_TELEMETRY_TOPIC,
        TOPOLOGY_TOPIC,
        CHANNELS_TOPIC,
        PLACEMENTS_TOPIC,
        COMPOSITES_TOPIC,
        ROUTES_TOPIC,
        DEADLETTER_TOPIC,
        MATCHES_TOPIC,
    )
}
"""Topic (without prefix) -> the record it carries, for every topic the dashboard reads."""


class Feed:
    """A background reader of the dashboard's topics into one state.

    Parameters
    ----------
    conn : KafkaConnection
        The cluster.
    topic_prefix : str
        The deployment's topic prefix.
    state : DashboardState
        The state to fold records into; every change is made holding ``lock``.
    lock : threading.Condition
        Held while the state changes; notified after each poll that changed it.
    poll_s : float
        Longest wait for records in one poll.
    rescan_s : float
        How often topics and partitions that were missing are looked for again.
    match_sample : int
        Match records decoded per poll (the last ones); the others are only counted.
    on_tick : callable, optional
        Called (holding nothing) after every poll, with or without records.
    """

    def __init__(
        self,
        conn: KafkaConnection,
        topic_prefix: str,
        state: DashboardState,
        lock: threading.Condition,
        poll_s: float = 0.5,
        rescan_s: float = 5.0,
        match_sample: int = 200,
        on_tick: Callable[[], None] | None = None,
    ) -> None:
        self.conn, self.prefix, self.state, self.lock = conn, topic_prefix, state, lock
        self.poll_s, self.rescan_s, self.match_sample = poll_s, rescan_s, match_sample
        self.on_tick = on_tick
        self.schemas = {topic_prefix + name: schema for name, schema in FEED_TOPICS.items()}
        self.assigned: set[tuple[str, int]] = set()
        self.start_ends: dict[tuple[str, int], int] = {}
        self.positions: dict[tuple[str, int], int] = {}
        self.missing: list[str] = sorted(self.schemas)
        self.caught_up = False
        self.error: str | None = None
        self.warnings: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """The reader thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the reader thread (once)."""
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="siftstream-dashboard-feed", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask the reader to stop and wait for it to close its consumer."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
        self._thread = None

    def backlog(self) -> int:
        """Records between the feed's positions and the ends the partitions had at start."""
        return sum(max(0, end - self.positions.get(tp, 0)) for tp, end in self.start_ends.items())

    # ---- the reader --------------------------------------------------------------------------

    def _run(self) -> None:
        consumer = Consumer(
            self.conn.confluent(
                **{
                    "group.id": f"siftstream-dashboard-{uuid.uuid4().hex[:8]}",
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                    "fetch.max.bytes": 16 << 20,
                    "max.partition.fetch.bytes": 64 << 20,  # a planned channel version can be large
                }
            )
        )
        try:
            next_scan = 0.0
            while not self._stop.is_set():
                if time.monotonic() >= next_scan:
                    try:
                        self._scan(consumer)
                    except KafkaException as exc:  # the cluster unreachable for now: the next scan retries
                        self.warnings = [*self.warnings[-9:], f"listing topics: {exc}"]
                    next_scan = time.monotonic() + self.rescan_s
                if not self.assigned:
                    self._stop.wait(self.poll_s)
                    self._tick()
                    continue
                messages = arrived(consumer, 2000, self.poll_s)
                if messages:
                    self._fold(messages)
                self._check_caught_up(consumer)
                self._tick()
        except Exception as exc:  # the page and /healthz show it; the server keeps running
            self.error = f"{type(exc).__name__}: {exc}"
            with self.lock:
                self.lock.notify_all()
        finally:
            consumer.close()

    def _tick(self) -> None:
        if self.on_tick is not None:
            self.on_tick()

    def _scan(self, consumer: Consumer) -> None:
        """Assign every partition not yet assigned of every topic that exists, from its beginning."""
        meta = consumer.list_topics(timeout=10)
        new: list[TopicPartition] = []
        missing = []
        for topic in sorted(self.schemas):
            found = meta.topics.get(topic)
            if found is None or found.error is not None:
                missing.append(topic)
                continue
            for partition in sorted(found.partitions):
                if (topic, partition) in self.assigned:
                    continue
                try:
                    low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
                except Exception:
                    continue  # a new topic's leader still settling: the next scan takes it
                with self.lock:  # the web server's threads read these
                    self.assigned.add((topic, partition))
                    self.start_ends[(topic, partition)] = int(high)
                    self.positions[(topic, partition)] = int(low)
                new.append(TopicPartition(topic, partition, OFFSET_BEGINNING))
        self.missing = missing
        if new:
            consumer.incremental_assign(new)

    def _fold(self, messages: list[Any]) -> None:
        matches = [m for m in messages if m.error() is None and self.schemas.get(m.topic()) == "Match"]
        decode_from = max(0, len(matches) - self.match_sample)
        sampled = {id(m) for m in matches[decode_from:]}
        with self.lock:
            if decode_from:
                self.state.count_matches(decode_from)
            for msg in messages:
                error = msg.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        self.warnings = [*self.warnings[-9:], str(error)]
                    continue
                tp = (msg.topic(), msg.partition())
                self.positions[tp] = msg.offset() + 1
                schema = self.schemas.get(msg.topic())
                if schema is None or (schema == "Match" and id(msg) not in sampled):
                    continue
                raw = msg.value()
                key = msg.key()
                key_text = key.decode("utf-8", "replace") if key is not None else None
                if raw is None:
                    self.state.apply(schema, None, key_text)
                    continue
                try:
                    _name, record = decode(raw, schema)
                except DecodeError as exc:
                    self.state.skip(msg.topic(), str(exc))
                    continue
                self.state.apply(schema, record, key_text)
            self.lock.notify_all()

    def _check_caught_up(self, consumer: Consumer) -> None:
        if self.caught_up:
            return
        # the consumer's position passes offsets that carry no record (compaction, markers)
        positions = consumer.position([TopicPartition(t, p) for t, p in self.assigned])
        with self.lock:
            self._advance(positions)

    def _advance(self, positions: list[TopicPartition]) -> None:
        for tp in positions:
            if tp.offset >= 0:
                self.positions[(tp.topic, tp.partition)] = max(
                    self.positions.get((tp.topic, tp.partition), 0), tp.offset
                )
        self.caught_up = all(self.positions.get(tp, 0) >= end for tp, end in self.start_ends.items())
