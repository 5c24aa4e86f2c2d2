"""A Python worker's own copy of the live subscriptions, read straight from the compacted topic.

The matching job's direct mode (``streaming.matching_direct``; docs/decisions/direct-matching.md)
has no driver step between micro-batches, so nothing ships the subscription table to the
workers. Each Python worker process follows the subscriptions topic itself instead: a
:class:`SubscriptionFollower` kept in this module (one per topic and index kind; Spark reuses a
Python worker from task to task, ``spark.python.worker.reuse``, so it lives as long as the
process) holds

- a confluent-kafka consumer assigned every partition of the topic (no consumer group, nothing
  committed), and the next offset to read per partition;
- the index (``MatchIndex``, or the oracle ``BruteForceIndex``) of the active atomic filters.

:meth:`SubscriptionFollower.catch_up` asks the broker for each partition's end (its high
watermark: the records whose write was acknowledged) and reads every record below it: each record
is judged and decoded as the validation job does (``schemas.rules.checked``), turned into a
change by ``routing.matching.table.plan_changes`` (the rules the driver of the exact mode
applies: tombstones and ``unsubscribe`` remove, a composite removes the atomic subscription of its
id, a record that does not decode or whose filter does not parse changes nothing), and the
changes reach the index as one ``apply``. A new follower reads the topic from the beginning; its
first build ends with ``gc.freeze()`` (``routing.matching.collector``), as the exact mode's
replicas do. Rejected records are only counted here: the direct mode writes their dead letters
once, from a query of its own.

Invariant: after ``catch_up`` returns, the index equals ``plan_changes`` applied to every record
the topic held below the ends it read, in (partition, offset) order; a subscription id's records
share a partition (the topic is keyed by id), so each id ends at its latest record.

No pyspark here: a test drives a follower with a real broker and no Spark.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from infra.connection import KafkaConnection, arrived
from routing.matching.collector import collector_paused
from routing.matching.table import SubscriptionRecord, plan_changes
from schemas.rules import checked
from streaming.arrow_matching import INDEX_KINDS

__all__ = ["FollowSpec", "SubscriptionFollower", "follower_for", "subscription_record"]


@dataclass(frozen=True)
class FollowSpec:
    """Which topic a worker follows, shipped to the workers in the task closure.

    Attributes
    ----------
    conn : KafkaConnection
        The cluster (its ``confluent()`` settings build the consumer).
    topic : str
        The compacted subscriptions topic.
    index_kind : str
        ``match`` (``MatchIndex``) or ``brute-force`` (``BruteForceIndex``, the oracle).
    stall_s : float
        ``catch_up`` raises ``RuntimeError`` when no record arrives for this long while some
        partition is still below its end (the broker is unreachable): the task fails, and Spark
        retries it.
    """

    conn: KafkaConnection
    topic: str
    index_kind: str = "match"
    stall_s: float = 120.0


def subscription_record(key: bytes | None, value: bytes | None) -> SubscriptionRecord:
    """A subscriptions-topic record as ``plan_change`` takes it: judged and decoded by
    ``schemas.rules.checked`` (the validation job's verdict), the key as text (None when absent or
    not UTF-8).

    >>> from schemas.codec import codec_for
    >>> raw = codec_for("Subscription").encode({"type": "subscribe", "subscription_id": "s1",
    ...                                          "subscriber_id": "u", "filter": "x > 1"})
    >>> r = subscription_record(b"s1", raw)
    >>> r.op, r.subscription_id, r.filter, subscription_record(b"s1", None).tombstone
    ('subscribe', 's1', 'x > 1', True)
    >>> subscription_record(b"s2", b"junk").error_code
    'bad_framing'
    """
    try:
        text = None if key is None else key.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if value is None:
        return SubscriptionRecord(key=text, tombstone=True)
    code, reason, rec = checked(value, "Subscription", table=True)
    if code is not None or rec is None:
        return SubscriptionRecord(key=text, error_code=code or "malformed_body", reason=reason)
    return SubscriptionRecord(
        key=text,
        op=rec["type"],
        subscription_id=rec["subscription_id"],
        filter=rec["filter"],
        composite=rec["composite"],
        subscriber_id=rec["subscriber_id"],
    )


@dataclass
class SubscriptionFollower:
    """The index of one worker process, kept equal to the subscriptions topic up to the ends it
    last read (module docstring).

    Attributes
    ----------
    spec : FollowSpec
        What is followed.
    freeze_first_build : bool
        End the first load with ``gc.freeze()`` (a long-lived worker process, as
        :func:`follower_for` makes; off by default so that a follower made in any other process
        leaves the collector as it found it).
    index : MatchIndex or BruteForceIndex
        The active atomic filters.
    offsets : dict
        Partition -> the next offset to read.
    records, rejected, catch_ups : int
        Records read, records rejected (bad values, bad filters), calls of ``catch_up``.
    """

    spec: FollowSpec
    freeze_first_build: bool = False
    index: Any = None
    offsets: dict[int, int] = field(default_factory=dict)
    records: int = 0
    rejected: int = 0
    catch_ups: int = 0
    _consumer: Any = None
    _asker: Any = None
    _partitions: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.index is None:
            self.index = INDEX_KINDS[self.spec.index_kind]()

    def _open(self) -> Any:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        consumer = Consumer(
            self.spec.conn.confluent(
                **{
                    "group.id": "siftstream-direct-follower",  # required by librdkafka; nothing is committed
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                    "fetch.max.bytes": 32 << 20,
                    "max.partition.fetch.bytes": 8 << 20,
                }
            )
        )
        meta = consumer.list_topics(self.spec.topic, timeout=30)
        topic = meta.topics.get(self.spec.topic)
        if topic is None or topic.error is not None or not topic.partitions:
            consumer.close()
            raise RuntimeError(f"the subscriptions topic {self.spec.topic} is not there: {topic and topic.error}")
        self._partitions = sorted(topic.partitions)
        consumer.assign([TopicPartition(self.spec.topic, p, OFFSET_BEGINNING) for p in self._partitions])
        return consumer

    def ends(self) -> dict[int, int]:
        """Each partition's end now (its high watermark), asked of the broker.

        The question goes through a second consumer with no assignment, on its own connection: a
        broker answers one connection's requests in order, and the reading consumer's connection
        usually holds a fetch that waits at the end of the partition (``fetch.wait.max.ms``), so
        asked there the answer would wait for it."""
        from confluent_kafka import Consumer

        from streaming.readers import watermarks

        if self._consumer is None:
            self._consumer = self._open()
            self._asker = Consumer(self.spec.conn.confluent(**{"group.id": "siftstream-direct-follower"}))
        return {p: watermarks(self._asker, self.spec.topic, p)[1] for p in self._partitions}

    def catch_up(self) -> int:
        """Read every record below the topic's current ends and apply it; return how many were read."""
        from confluent_kafka import KafkaError

        ends = self.ends()
        behind = {p for p, end in ends.items() if self.offsets.get(p, 0) < end}
        self.catch_ups += 1
        if not behind:
            return 0
        first = self.records == 0
        records: list[SubscriptionRecord] = []
        stalled_at = time.monotonic()
        while behind:
            msgs = arrived(self._consumer, 10_000, 0.5)
            if msgs:
                stalled_at = time.monotonic()
            elif time.monotonic() - stalled_at > self.spec.stall_s:
                raise RuntimeError(
                    f"{self.spec.topic}: no record for {self.spec.stall_s:.0f} s while partitions "
                    f"{sorted(behind)} are below their ends {ends}"
                )
            for msg in msgs:
                p = msg.partition()
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"{self.spec.topic}: {err}")
                    # the end of the partition: records compaction removed leave no gap to wait for
                    self.offsets[p] = max(self.offsets.get(p, 0), int(msg.offset()))
                else:
                    self.offsets[p] = int(msg.offset()) + 1
                    records.append(subscription_record(msg.key(), msg.value()))
                if self.offsets.get(p, 0) >= ends[p]:
                    behind.discard(p)
        self._apply(records, first)
        return len(records)

    def _apply(self, records: Iterable[SubscriptionRecord], first: bool) -> None:
        with collector_paused(freeze=first and self.freeze_first_build):
            outcomes = plan_changes(records)
            self.index.apply([o.change for o in outcomes if o.change is not None])
        self.records += len(outcomes)
        self.rejected += sum(o.rejection is not None for o in outcomes)

    def close(self) -> None:
        for client in (self._consumer, self._asker):
            if client is not None:
                client.close()
        self._consumer = self._asker = None


_FOLLOWERS: OrderedDict[FollowSpec, SubscriptionFollower] = OrderedDict()
_MAX_FOLLOWERS = 2  # topics whose followers a worker keeps (tests run several queries in one session)


def follower_for(spec: FollowSpec) -> SubscriptionFollower:
    """This worker process's follower of ``spec`` (made on first use; the least recently used one
    beyond :data:`_MAX_FOLLOWERS` is closed)."""
    follower = _FOLLOWERS.get(spec)
    if follower is None:
        follower = SubscriptionFollower(spec, freeze_first_build=True)
        _FOLLOWERS[spec] = follower
        while len(_FOLLOWERS) > _MAX_FOLLOWERS:
            _FOLLOWERS.popitem(last=False)[1].close()
    _FOLLOWERS.move_to_end(spec)
    return follower
