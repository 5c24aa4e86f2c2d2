"""The client library of programs that use SiftStream: publish events, subscribe to a filter.

:class:`Publisher` writes events to ``siftstream.events.v1`` as the producers do (single-object
Avro ``Event`` records keyed by ``publisher_id``), after checking them with the project's rules
(``schemas.rules``). :class:`Subscriber` registers a subscription on
``siftstream.subscriptions.v1`` and follows its delivery channel as docs/reference/delivery.md §5
says: it reads one channel topic ``siftstream.channel.v1.<c>`` at a time, applies its own filter
to each event (``Filter.matches``, the project's single-event matcher), drops events it already
yielded (a bounded memory of recent ids), hands over between channels at version markers with
:class:`routing.channels.assignment.Follower`, and writes a ``Receipt`` for every event it
yields. Closing it writes the subscription's tombstone. How to use both, from Python and from
``siftstream publish`` / ``siftstream subscribe``: docs/guide/clients.md.

Events are dicts in the JSON view of docs/reference/topics.md §1.3: ``event_id``,
``publisher_id``, ``published_at`` (ms since the epoch), ``lifetime_ms`` and ``attributes``
(name -> long, double, string or boolean).

Examples
--------
An event is checked before anything is written (no broker is needed to see that):

>>> event_record({"price": 1.5, "symbol": "IBM"}, "p1", event_id="e1", published_at=5, lifetime_ms=100)
... # doctest: +NORMALIZE_WHITESPACE
{'event_id': 'e1', 'publisher_id': 'p1', 'published_at': 5, 'lifetime_ms': 100,
 'attributes': {'price': 1.5, 'symbol': 'IBM'}}
>>> event_record({"bad name": 1}, "p1", event_id="e1", published_at=5, lifetime_ms=100)
Traceback (most recent call last):
...
ValueError: invalid event e1: attributes keys must match [A-Za-z_][A-Za-z0-9_.]*
>>> ids = RecentIds(2)
>>> [ids.add(x) for x in ("a", "b", "a", "c", "a")]
[True, True, False, True, True]
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any, TextIO

import numpy as np
import pyarrow as pa
from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from infra.connection import KafkaConnection, arrived
from producers.kafka_writer import DeliveryReport, KafkaWriter
from routing.channels.assignment import LOBBY, Assignment, Follower, resume_point
from routing.matching.index import EventBatch, MatchIndex
from routing.matching.language import Filter, parse_filter
from schemas.codec import DecodeError, codec_for, decode
from schemas.event_records import decode_rows
from schemas.rules import validate
from schemas.topics import CHANNELS_TOPIC, EVENTS_TOPIC, RECEIPTS_TOPIC, SUBSCRIPTIONS_TOPIC, channel_topic

__all__ = [
    "DEFAULT_LIFETIME_MS",
    "ClientCounters",
    "Publisher",
    "RecentIds",
    "Subscriber",
    "Subscription",
    "event_record",
    "now_ms",
    "subscription_record",
]

DEFAULT_LIFETIME_MS = 60_000  # an event's default deadline: one minute after publication
_EVENT_FIELDS = ("event_id", "publisher_id", "published_at", "lifetime_ms", "attributes")


def now_ms() -> int:
    """Wall-clock time in ms since the Unix epoch."""
    return time.time_ns() // 1_000_000


def _connect(bootstrap_servers: str | None, conn: KafkaConnection | None) -> KafkaConnection:
    if (bootstrap_servers is None) == (conn is None):
        raise ValueError("give exactly one of bootstrap_servers and conn")
    return conn if conn is not None else KafkaConnection(str(bootstrap_servers))


def _new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def event_record(
    attributes: Mapping[str, Any],
    publisher_id: str,
    *,
    event_id: str,
    published_at: int,
    lifetime_ms: int,
) -> dict[str, Any]:
    """The ``Event`` record (JSON view) of one event, checked by ``schemas.rules``.

    Raises ``ValueError`` naming the event and every problem: an attribute value that is not a
    long, double, string or boolean, a name outside ``[A-Za-z_][A-Za-z0-9_.]*``, a NaN or
    infinite double, an empty id, a negative time or lifetime.
    """
    if not isinstance(attributes, Mapping):
        raise ValueError(f"invalid event {event_id}: attributes must be an object, got {type(attributes).__name__}")
    for name, value in (("event_id", event_id), ("publisher_id", publisher_id)):
        if not isinstance(value, str):
            raise ValueError(f"invalid event {event_id}: {name} must be a string, got {value!r}")
    for name, ms in (("published_at", published_at), ("lifetime_ms", lifetime_ms)):
        if isinstance(ms, bool) or not isinstance(ms, int):
            raise ValueError(f"invalid event {event_id}: {name} must be an integer (ms), got {ms!r}")
    record = {
        "event_id": event_id,
        "publisher_id": publisher_id,
        "published_at": published_at,
        "lifetime_ms": lifetime_ms,
        "attributes": dict(attributes),
    }
    try:
        wire = codec_for("Event").to_wire(record)
    except ValueError as exc:
        raise ValueError(f"invalid event {event_id}: {exc}") from None
    problems = validate("Event", wire)
    if problems:
        raise ValueError(f"invalid event {event_id}: {'; '.join(problems)}")
    return record


def subscription_record(
    subscription_id: str,
    subscriber_id: str,
    filter_text: str,
    *,
    broker: str | None = None,
    deadline_ms: int | None = None,
    min_reliability: float | None = None,
    issued_at: int | None = None,
) -> dict[str, Any]:
    """The ``subscribe`` record of an atomic subscription, checked: the filter must parse
    (``ValueError`` with the parser's message and caret) and the record must pass
    ``schemas.rules`` (non-empty ids, ``deadline_ms >= 0``, ``min_reliability`` in [0, 1])."""
    if not isinstance(filter_text, str):
        raise ValueError(f"a filter is text, got {type(filter_text).__name__}")
    parse_filter(filter_text)  # FilterError is a ValueError: the position, what was found and expected
    record = {
        "type": "subscribe",
        "subscription_id": subscription_id,
        "subscriber_id": subscriber_id,
        "broker": broker,
        "filter": filter_text,
        "composite": None,
        "deadline_ms": deadline_ms,
        "min_reliability": min_reliability,
        "issued_at": now_ms() if issued_at is None else issued_at,
    }
    problems = validate("Subscription", record)
    if problems:
        raise ValueError(f"invalid subscription {subscription_id}: {'; '.join(problems)}")
    return record


class RecentIds:
    """The ``capacity`` most recently added ids: :meth:`add` is False for one still remembered.

    Parameters
    ----------
    capacity : int
        How many ids are remembered; the oldest is forgotten first.
    """

    def __init__(self, capacity: int = 100_000) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()

    def add(self, event_id: str) -> bool:
        """Remember ``event_id``; True when it was new (not among the remembered ids)."""
        if event_id in self._ids:
            return False
        self._ids[event_id] = None
        if len(self._ids) > self.capacity:
            self._ids.popitem(last=False)
        return True

    def __len__(self) -> int:
        return len(self._ids)


class Publisher:
    """Publishes events to ``siftstream.events.v1`` (after the topic prefix).

    Parameters
    ----------
    bootstrap_servers : str, optional
        The cluster; or give ``conn``.
    conn : KafkaConnection, optional
        The cluster with its client properties (SASL/TLS; ``KafkaConnection.from_file``).
    topic_prefix : str
        The deployment's topic prefix.
    publisher_id : str, optional
        The key of this publisher's events (default: ``pub-`` and a random hex id).

    Examples
    --------
    ``with Publisher("127.0.0.1:9092") as pub: pub.publish({"symbol": "IBM", "price": 101.5})``
    returns the new event's id; leaving the block waits until every event is acknowledged.
    """

    def __init__(
        self,
        bootstrap_servers: str | None = None,
        *,
        conn: KafkaConnection | None = None,
        topic_prefix: str = "",
        publisher_id: str | None = None,
    ) -> None:
        self.conn = _connect(bootstrap_servers, conn)
        self.publisher_id = publisher_id or _new_id("pub")
        if not self.publisher_id:
            raise ValueError("publisher_id must be a non-empty string")
        self.topic = topic_prefix + EVENTS_TOPIC
        self._codec = codec_for("Event")
        self._writer = KafkaWriter(self.conn, **{"linger.ms": 5})
        self.published = 0

    def publish(
        self,
        attributes: Mapping[str, Any],
        event_id: str | None = None,
        lifetime_ms: int = DEFAULT_LIFETIME_MS,
        published_at: int | None = None,
        *,
        publisher_id: str | None = None,
    ) -> str:
        """Queue one event; return its ``event_id`` (a random UUID when not given).

        ``published_at`` defaults to now (ms since the epoch); ``publisher_id`` overrides the
        publisher's own id for this event (replaying recorded events). Raises ``ValueError``
        with the problems when the event breaks the rules of ``schemas.rules``; nothing is
        written then. Delivery is asynchronous: :meth:`flush` waits for it.
        """
        eid = uuid.uuid4().hex if event_id is None else event_id
        pid = self.publisher_id if publisher_id is None else publisher_id
        record = event_record(
            attributes,
            pid,
            event_id=eid,
            published_at=now_ms() if published_at is None else published_at,
            lifetime_ms=lifetime_ms,
        )
        value = self._codec.encode(record)
        self._writer.send(self.topic, pid, value)
        self._writer.poll()
        self.published += 1
        return eid

    def publish_json(self, doc: Mapping[str, Any]) -> str:
        """Publish one event given in its JSON view (a line of ``siftstream publish``):
        ``attributes`` is required; ``event_id``, ``publisher_id``, ``published_at`` and
        ``lifetime_ms`` are optional and filled in as :meth:`publish` does. Any other key, or a
        missing ``attributes``, raises ``ValueError``."""
        if not isinstance(doc, Mapping):
            raise ValueError(f"an event is a JSON object, got {type(doc).__name__}")
        unknown = sorted(set(doc) - set(_EVENT_FIELDS))
        if unknown:
            raise ValueError(f"unknown event fields {unknown}; an event has {list(_EVENT_FIELDS)}")
        if "attributes" not in doc:
            raise ValueError("an event needs attributes (an object of name -> value)")
        return self.publish(
            doc["attributes"],
            event_id=doc.get("event_id"),
            lifetime_ms=doc.get("lifetime_ms", DEFAULT_LIFETIME_MS),
            published_at=doc.get("published_at"),
            publisher_id=doc.get("publisher_id"),
        )

    def flush(self, timeout_s: float = 60.0) -> DeliveryReport:
        """Wait until every queued event is acknowledged; ``RuntimeError`` when some were not."""
        report = self._writer.flush(timeout_s)
        if report.failed:
            raise RuntimeError(
                f"{report.failed} of {report.sent} events were not delivered to {self.topic}: {report.errors}"
            )
        return report

    def close(self) -> None:
        """Flush (see :meth:`flush`)."""
        self.flush()

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class ClientCounters:
    """What a subscription's client has seen.

    Attributes
    ----------
    received : int
        ``Event`` records read from the channel topics.
    yielded : int
        Events handed to the program (each with a receipt).
    dropped_by_filter : int
        Events of the channel that the subscription's filter rejects: the channel's waste
        (docs/reference/channels.md), false positives of the shared channel.
    duplicates : int
        Matching events already yielded (a replayed micro-batch), dropped.
    moves : int
        Hand-overs to another channel.
    markers : int
        Version markers read; ``stale_markers`` of them were of versions already applied
        (replays), skipped.
    undecodable : int
        Records of the channel that are not SiftStream records, skipped.
    """

    received: int = 0
    yielded: int = 0
    dropped_by_filter: int = 0
    duplicates: int = 0
    moves: int = 0
    markers: int = 0
    stale_markers: int = 0
    undecodable: int = 0

    @property
    def waste_ratio(self) -> float | None:
        """``dropped_by_filter / received`` (None before any event)."""
        return self.dropped_by_filter / self.received if self.received else None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "waste_ratio": self.waste_ratio}


class _Versions:
    """The assignment versions read from ``siftstream.channels.v1``, for one subscription: the
    planned assignment (only this subscription's channel kept) and the installed hand-over of
    each version not yet applied."""

    def __init__(self, consumer: Consumer, topic: str, subscription_id: str) -> None:
        self._consumer, self.topic, self.subscription_id = consumer, topic, subscription_id
        self.planned: dict[int, Assignment] = {}
        self.installed: dict[int, dict[int, int]] = {}

    def take(self, msg: Message) -> None:
        if msg.value() is None:
            return
        try:
            _, record = decode(msg.value(), "ChannelAssignment")
        except DecodeError:
            return  # not ours to judge: the validation of output topics is the jobs' tests' work
        version = int(record["version"])
        if record["stage"] == "planned":
            full = Assignment.from_record(record)
            mine = (
                {self.subscription_id: full.channel_of[self.subscription_id]}
                if self.subscription_id in full.channel_of
                else {}
            )
            self.planned[version] = Assignment(version, full.k, mine)
        elif record["stage"] == "installed":
            self.installed[version] = {int(h["channel"]): int(h["offset"]) for h in record["handover"]}

    def read_to_end(self, timeout_s: float = 30.0) -> None:
        """Read every record now in the topic (up to its high watermark at this call)."""
        from streaming.readers import watermarks

        low, high = watermarks(self._consumer, self.topic, 0, timeout_s)
        deadline = time.monotonic() + timeout_s
        while high > low and self._position() < high:  # (nothing to read when retention emptied it)
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {self.topic} to offset {high} within {timeout_s:.0f}s")
            self.read(0.5)

    def _position(self) -> int:
        pos = self._consumer.position([TopicPartition(self.topic, 0)])[0].offset
        return max(int(pos), 0)

    def read(self, timeout_s: float) -> None:
        for msg in arrived(self._consumer, 1000, max(timeout_s, 0.0)):
            if msg.error() is None:
                self.take(msg)

    def newest_installed(self) -> int:
        return max(self.installed, default=0)

    def ready(self, version: int) -> bool:
        return version in self.planned and version in self.installed

    def forget_through(self, version: int) -> None:
        for table in (self.planned, self.installed):
            for v in [v for v in table if v <= version]:
                del table[v]


class Subscription:
    """One subscription being followed: iterate it for its matching events (JSON view dicts).

    Made by :meth:`Subscriber.subscribe`. Iterating stops after ``max_events`` events or
    ``timeout_s`` seconds when those were given, else never; :meth:`poll` returns the next
    event or None after a timeout; :meth:`close` unsubscribes (writes the tombstone).

    Attributes
    ----------
    subscription_id, subscriber_id : str
        The ids written in the subscription record and the receipts.
    filter : Filter
        The parsed filter, applied to every event of the channel.
    counters : ClientCounters
        What was read, yielded, dropped.
    channel, version : int
        The channel topic read now and the newest assignment version applied.
    start_offset : int
        Where reading the channel started.
    resumed : bool
        Whether that was the position an earlier life committed (``resume=True``).
    """

    def __init__(
        self,
        owner: Subscriber,
        subscription_id: str,
        filt: Filter,
        record: dict[str, Any],
        *,
        max_events: int | None,
        timeout_s: float | None,
        dedupe_window: int,
        resume: bool = False,
    ) -> None:
        self._owner = owner
        self.subscription_id, self.subscriber_id = subscription_id, owner.subscriber_id
        self.filter, self.record = filt, record
        self.max_events, self.timeout_s = max_events, timeout_s
        self.counters = ClientCounters()
        self._recent = RecentIds(dedupe_window)
        self._pending: deque[Message] = deque()
        self._last: Message | None = None  # the channel record handed out last (its offset is stored once done)
        self._passed: list[TopicPartition] = []  # positions of the last move not committed yet (_commit_passed)
        self._passed_retry_at = 0.0
        self._inner: deque[bytes] = deque()  # matching events of the ChannelEvents record being read
        self._index = MatchIndex()  # the filter once more, to match a ChannelEvents record's events at once
        self._index.add(subscription_id, filt)
        self.closed = False
        prefix = owner.topic_prefix
        group = f"siftstream-client-{subscription_id}"
        settings: dict[str, str | int | bool] = {
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
        }
        self._channels_consumer = Consumer(owner.conn.confluent(**settings))
        # the channel's position: stored once a record was fully handed out (the program came back
        # for the next event), committed every second and on close; resume=True starts there
        position = {"enable.auto.commit": True, "enable.auto.offset.store": False, "auto.commit.interval.ms": 1000}
        self._consumer = Consumer(owner.conn.confluent(**{**settings, **position, "fetch.wait.max.ms": 50}))
        try:
            self._start(prefix, resume)
        except BaseException:
            self._channels_consumer.close()
            self._consumer.close()
            raise

    # ---- subscribing (docs/reference/delivery.md §5, "Subscribing") ---------------------------

    def _start(self, prefix: str, resume: bool) -> None:
        from streaming.readers import watermarks

        channels_topic = prefix + CHANNELS_TOPIC
        self._channels_consumer.assign([TopicPartition(channels_topic, 0, 0)])
        self._versions = _Versions(self._channels_consumer, channels_topic, self.subscription_id)
        # 1. the newest installed version v0 and this subscription's channel under it
        self._versions.read_to_end()
        point = self._resume_point(prefix) if resume else None
        if point is not None:  # an earlier life's position, possibly before a move it had not reached
            version, channel, start = point
            self.follower = Follower(self.subscription_id, channel=channel, version=version)
            self._versions.forget_through(version)
            self.resumed = True
            self._owner._write_subscription(self.subscription_id, self.record)
            self._read_from(channel, start)
            self.start_offset = start
            return
        v0 = self._versions.newest_installed()
        planned = self._versions.planned.get(v0)
        channel = planned.channel(self.subscription_id) if planned is not None else LOBBY
        self.follower = Follower(self.subscription_id, channel=channel, version=v0)
        self._versions.forget_through(v0)
        # 2. the end offset of that channel (0 while the delivery stage has not made its topic)
        topic = channel_topic(channel, prefix)
        meta = self._consumer.list_topics(topic, timeout=10).topics.get(topic)
        exists = meta is not None and meta.error is None and bool(meta.partitions)
        start = watermarks(self._consumer, topic, 0)[1] if exists else 0
        self.resumed = False
        if resume and exists:  # the position an earlier life of this subscription committed there
            committed = self._consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
            if committed >= 0:
                start, self.resumed = min(int(committed), start), True
        # 3. publish the subscription (acknowledged), 4. read from that offset
        self._owner._write_subscription(self.subscription_id, self.record)
        self._read_from(channel, start)
        self.start_offset = start

    def _resume_point(self, prefix: str) -> tuple[int, int, int] | None:
        """Where an earlier life stopped (``routing.channels.assignment.resume_point`` over the
        versions read and the group's committed positions in their channels), or None."""
        versions = self._versions
        channels = sorted({a.channel(self.subscription_id) for a in versions.planned.values()} | {LOBBY})
        parts = [TopicPartition(channel_topic(c, prefix), 0) for c in channels]
        committed = {
            c: int(tp.offset)
            for c, tp in zip(channels, self._consumer.committed(parts, timeout=10), strict=True)
            if tp.error is None and tp.offset >= 0
        }
        return resume_point(self.subscription_id, versions.planned, versions.installed, committed)

    def _read_from(self, channel: int, offset: int) -> None:
        self._pending.clear()
        self._inner.clear()
        self._last = None
        start = TopicPartition(channel_topic(channel, self._owner.topic_prefix), 0, offset)
        self._consumer.assign([start])
        self._consumer.store_offsets(offsets=[start])  # a restart resumes in this channel from here

    @property
    def channel(self) -> int:
        return self.follower.channel

    @property
    def version(self) -> int:
        return self.follower.version

    # ---- following the channel (docs/reference/delivery.md §5) --------------------------------

    def _install(self, deadline: float) -> bool:
        """Apply the version the follower waits for, reading ``siftstream.channels.v1`` for its
        planned and installed records until ``deadline``; False when they did not come in time."""
        needed = self.follower.needs
        assert needed is not None
        while not self._versions.ready(needed):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._versions.read(min(left, 0.5))
        old, handover = self.follower.channel, self._versions.installed[needed]
        moved = self.follower.install(needed, self._versions.planned[needed], handover)
        self._versions.forget_through(needed)
        if moved is not None:
            self.counters.moves += 1
            after_marker = self._left(old, handover.get(old))
            self._read_from(*moved)
            start = TopicPartition(channel_topic(moved[0], self._owner.topic_prefix), 0, moved[1])
            self._passed = [start] if after_marker is None else [after_marker, start]
            self._commit_passed()
        return True

    def _left(self, channel: int, marker: int | None) -> TopicPartition | None:
        """The position after the hand-over marker in ``channel`` (the channel being left), stored
        for it; None when there is none (a channel never read).

        Committed with the new channel's start (:meth:`_commit_passed`), it is the durable sign
        that this subscription passed the marker, which the channel grants read to take the old
        channel's grant away (docs/guide/security.md); stored too, so that the commit Kafka's
        client makes for a partition leaving the assignment repeats it rather than the marker's
        own offset."""
        topic = channel_topic(channel, self._owner.topic_prefix)
        last = self._last if self._last is not None and self._last.topic() == topic else None
        after = max(-1 if last is None else int(last.offset() or 0), -1 if marker is None else marker) + 1
        if after <= 0:
            return None
        tp = TopicPartition(topic, 0, after)
        self._consumer.store_offsets(offsets=[tp])
        return tp

    def _commit_passed(self) -> None:
        """Commit the positions of the last move (the old channel's after its marker, the new
        one's start) at once, so that neither waits for the periodic commit; a failed commit is
        tried again with a later record handed out, at most every 5 s."""
        if not self._passed or time.monotonic() < self._passed_retry_at:
            return
        try:
            self._consumer.commit(offsets=self._passed, asynchronous=False)
            self._passed = []
        except KafkaException:  # the broker away: a later record handed out tries again
            self._passed_retry_at = time.monotonic() + 5.0

    def _next_record(self, deadline: float) -> Message | None:
        if self._last is not None:  # done with it: a restart with resume=True starts after it
            last, self._last = self._last, None
            self._consumer.store_offsets(offsets=[TopicPartition(last.topic(), last.partition(), last.offset() + 1)])
        self._commit_passed()
        while not self._pending:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            for msg in arrived(self._consumer, 500, min(left, 0.5)):
                error = msg.error()
                if error is None:
                    self._pending.append(msg)
                elif error.fatal():  # others (a topic not made yet, a broker away) are retried
                    raise RuntimeError(f"reading channel {self.channel}: {error}")
        self._last = self._pending.popleft()
        return self._last

    def poll(self, timeout_s: float = 1.0) -> dict[str, Any] | None:
        """The next matching event not yielded before, or None when none came within ``timeout_s``."""
        if self.closed:
            raise RuntimeError(f"subscription {self.subscription_id} is closed")
        deadline = time.monotonic() + timeout_s
        while True:
            if self.follower.needs is not None and not self._install(deadline):
                return None
            if self._inner:  # the rest of a ChannelEvents record: events its filter matched
                value = self._inner.popleft()
                record = decode(value, "Event")[1]
                if self._yield(record):
                    return record
                continue
            msg = self._next_record(deadline)
            if msg is None:
                self._owner._writer.poll()
                return None
            value = msg.value()
            try:
                name, record = decode(value)
            except DecodeError:
                self.counters.undecodable += 1
                continue
            if name == "ChannelEvents":
                self._inner.extend(self._matching(record["events"]))
                continue
            if name == "ChannelMarker":
                self.counters.markers += 1
                if self.follower.on_marker(int(record["version"])):
                    self.counters.stale_markers += 1
                continue
            if name != "Event":
                self.counters.undecodable += 1
                continue
            self.counters.received += 1
            if not self.filter.matches(record["attributes"]):
                self.counters.dropped_by_filter += 1
                continue
            if self._yield(record):
                return record

    def _matching(self, values: list[bytes]) -> list[bytes]:
        """The events of one ``ChannelEvents`` record that the filter matches, in order: decoded
        and matched as columns (``schemas.event_records.decode_rows``, ``MatchIndex``), so that
        only the matching ones are decoded one by one; the others are counted as received and
        dropped (or undecodable) here."""
        if not values:
            return []
        decoded = decode_rows(pa.array(values, pa.binary()))
        counts = self._index.match(EventBatch.from_columns(len(values), decoded.columns())).counts()
        good = int(decoded.good.sum())
        kept = np.flatnonzero((counts > 0) & decoded.good)
        self.counters.received += good
        self.counters.undecodable += len(values) - good
        self.counters.dropped_by_filter += good - len(kept)
        return [values[i] for i in kept.tolist()]

    def _yield(self, record: dict[str, Any]) -> bool:
        """Whether a matching event goes to the program (not a duplicate); writes its receipt."""
        if not self._recent.add(record["event_id"]):
            self.counters.duplicates += 1
            return False
        self.counters.yielded += 1
        self._owner._write_receipt(record["event_id"])
        return True

    def events(self, max_events: int | None = None, timeout_s: float | None = None) -> Iterator[dict[str, Any]]:
        """Matching events as they arrive, until ``max_events`` were yielded or ``timeout_s``
        seconds passed (either may be None: no limit)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        count = 0
        while max_events is None or count < max_events:
            left = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
            if left <= 0:
                return
            event = self.poll(left)
            if event is not None:
                count += 1
                yield event

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self.events(self.max_events, self.timeout_s)

    def close(self) -> None:
        """Unsubscribe: write the subscription's tombstone, flush the receipts, stop reading."""
        if self.closed:
            return
        self.closed = True
        try:
            self._owner._write_tombstone(self.subscription_id)
        finally:
            self._consumer.close()
            self._channels_consumer.close()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Subscriber:
    """A subscriber: registers subscriptions and follows their delivery channels.

    Parameters
    ----------
    bootstrap_servers : str, optional
        The cluster; or give ``conn``.
    conn : KafkaConnection, optional
        The cluster with its client properties (SASL/TLS).
    topic_prefix : str
        The deployment's topic prefix.
    subscriber_id : str, optional
        The subscriber's id, written in its subscriptions and receipts (default: ``sub-`` and a
        random hex id).
    home_broker : str, optional
        The subscriber's home broker in the overlay (the subscription's ``broker`` field).
    dedupe_window : int
        How many recently yielded event ids each subscription remembers to drop duplicates.
    log : file, optional
        Where to write diagnostics (one line per subscribe, move and close); None: silent.
    inbox : bool
        Write subscription records and tombstones to the subscriber's own inbox topic
        (``siftstream.subscriptions.v1.inbox.<subscriber id>``) instead of the subscriptions table:
        a secured deployment's subscribers may write only there (docs/guide/security.md).

    Examples
    --------
    ``with Subscriber("127.0.0.1:9092") as sub: for e in sub.subscribe("price < 120"): ...``;
    leaving the block unsubscribes every subscription it made.
    """

    def __init__(
        self,
        bootstrap_servers: str | None = None,
        *,
        conn: KafkaConnection | None = None,
        topic_prefix: str = "",
        subscriber_id: str | None = None,
        home_broker: str | None = None,
        dedupe_window: int = 100_000,
        log: TextIO | None = None,
        inbox: bool = False,
    ) -> None:
        self.conn = _connect(bootstrap_servers, conn)
        self.topic_prefix = topic_prefix
        self.subscriber_id = subscriber_id or _new_id("sub")
        self.home_broker = home_broker
        self.dedupe_window = dedupe_window
        self.log = log
        self.subscriptions: list[Subscription] = []
        self._subs_codec, self._receipt_codec = codec_for("Subscription"), codec_for("Receipt")
        self._writer_made: KafkaWriter | None = None
        self._subscriptions_topic = self.topic_prefix + SUBSCRIPTIONS_TOPIC
        if inbox:
            from infra.security import inbox_topic

            self._subscriptions_topic = inbox_topic(self.subscriber_id, self.topic_prefix)

    @property
    def _writer(self) -> KafkaWriter:
        """The producer of subscriptions and receipts, made at the first write (an invalid filter
        is refused before any connection is opened)."""
        if self._writer_made is None:
            self._writer_made = KafkaWriter(self.conn, **{"linger.ms": 5})
        return self._writer_made

    def _say(self, text: str) -> None:
        if self.log is not None:
            print(text, file=self.log, flush=True)

    def subscribe(
        self,
        filter_text: str,
        deadline_ms: int | None = None,
        min_reliability: float | None = None,
        subscription_id: str | None = None,
        *,
        max_events: int | None = None,
        timeout_s: float | None = None,
        resume: bool = False,
    ) -> Subscription:
        """Register an atomic subscription and return it, ready to iterate.

        The filter is parsed and the record checked first: an invalid one raises
        ``ValueError`` (the parser's message with the position) before anything is written.
        Then, as docs/reference/delivery.md §5 says, the newest installed version and the end
        offset of the subscription's channel under it are read, the subscription record is
        written and acknowledged, and reading starts at that offset. ``max_events`` and
        ``timeout_s`` bound iterating the returned :class:`Subscription`.

        ``resume=True`` (a program restarted after a crash, with the same ``subscription_id``)
        starts at the position that an earlier life committed in that channel instead of its
        end: the record after the last one whose events the program had taken (it asked for the
        next event), committed every second. Nothing delivered meanwhile is lost; events of the
        last second before the crash may come again (same ``event_id``, same content: at least
        once, duplicates identified by ``event_id``).
        """
        sid = subscription_id or _new_id(self.subscriber_id)
        record = subscription_record(
            sid,
            self.subscriber_id,
            filter_text,
            broker=self.home_broker,
            deadline_ms=deadline_ms,
            min_reliability=min_reliability,
        )
        filt = parse_filter(filter_text)
        sub = Subscription(
            self,
            sid,
            filt,
            record,
            max_events=max_events,
            timeout_s=timeout_s,
            dedupe_window=self.dedupe_window,
            resume=resume,
        )
        self.subscriptions.append(sub)
        self._say(
            f"[subscribe] {sid} of {self.subscriber_id}: {filt} on channel {sub.channel} "
            f"(version {sub.version}) from offset {sub.start_offset}" + (" (resumed)" if sub.resumed else "")
        )
        return sub

    @property
    def counters(self) -> ClientCounters:
        """The counters of every subscription made here, summed."""
        total = ClientCounters()
        for sub in self.subscriptions:
            for name, value in asdict(sub.counters).items():
                setattr(total, name, getattr(total, name) + value)
        return total

    def _write_subscription(self, subscription_id: str, record: dict[str, Any]) -> None:
        self._send_acknowledged(self._subscriptions_topic, subscription_id, self._subs_codec.encode(record))

    def _write_tombstone(self, subscription_id: str) -> None:
        self._send_acknowledged(self._subscriptions_topic, subscription_id, None)
        self._say(f"[subscribe] {subscription_id} unsubscribed (tombstone written)")

    def _write_receipt(self, event_id: str) -> None:
        receipt = {"subscriber_id": self.subscriber_id, "event_id": event_id, "received_at": now_ms()}
        self._writer.send(self.topic_prefix + RECEIPTS_TOPIC, self.subscriber_id, self._receipt_codec.encode(receipt))
        self._writer.poll()

    def _send_acknowledged(self, topic: str, key: str, value: bytes | None) -> None:
        failed = self._writer.report.failed
        self._writer.send(topic, key, value)
        report = self._writer.flush(30.0)
        if report.failed > failed:
            raise RuntimeError(f"could not write to {topic}: {report.errors[-3:]}")

    def close(self) -> None:
        """Close every subscription (each writes its tombstone) and flush the receipts."""
        try:
            for sub in self.subscriptions:
                sub.close()
        finally:
            report = self._writer_made.flush(30.0) if self._writer_made is not None else DeliveryReport()
            if report.failed:
                raise RuntimeError(
                    f"{report.failed} receipts or subscription records were not delivered: {report.errors}"
                )

    def __enter__(self) -> Subscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
