"""The one declaration of every SiftStream topic: name, record schema, key, and Kafka settings.

``infra`` creates topics from it, producers and jobs look up a topic's schema in it, and a test
checks that it names exactly docs/reference/topics.md. Code names a topic by its constant
(``EVENTS_TOPIC``, ``MATCHES_TOPIC``, ...), never by a literal; a deployment's prefix
(``topic_prefix`` of the jobs) goes in front of the name.

>>> TOPICS[EVENTS_TOPIC].schema
'Event'
>>> [t.name for t in INPUT_TOPICS][:2]
['siftstream.events.v1', 'siftstream.subscriptions.v1']
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BROKER_TELEMETRY_TOPIC",
    "CHANNELS_TOPIC",
    "CHANNEL_TOPIC_PREFIX",
    "COMPOSITES_TOPIC",
    "DAY_MS",
    "DEADLETTER_TOPIC",
    "EVENTS_TOPIC",
    "INPUT_TOPICS",
    "LINK_TELEMETRY_TOPIC",
    "MATCHES_TOPIC",
    "OUTPUT_TOPICS",
    "PLACEMENTS_TOPIC",
    "QOS_TOPIC",
    "RECEIPTS_TOPIC",
    "ROUTES_TOPIC",
    "SUBSCRIPTIONS_TOPIC",
    "TOPICS",
    "TOPOLOGY_TOPIC",
    "TopicSpec",
    "channel_spec",
    "channel_topic",
]

DAY_MS = 24 * 3600 * 1000

EVENTS_TOPIC = "siftstream.events.v1"
SUBSCRIPTIONS_TOPIC = "siftstream.subscriptions.v1"
LINK_TELEMETRY_TOPIC = "siftstream.telemetry.links.v1"
BROKER_TELEMETRY_TOPIC = "siftstream.telemetry.brokers.v1"
TOPOLOGY_TOPIC = "siftstream.topology.v1"
RECEIPTS_TOPIC = "siftstream.receipts.v1"
MATCHES_TOPIC = "siftstream.matches.v1"
ROUTES_TOPIC = "siftstream.routes.v1"
PLACEMENTS_TOPIC = "siftstream.placements.v1"
COMPOSITES_TOPIC = "siftstream.composites.v1"
CHANNELS_TOPIC = "siftstream.channels.v1"
QOS_TOPIC = "siftstream.qos.v1"
DEADLETTER_TOPIC = "siftstream.deadletter.v1"
CHANNEL_TOPIC_PREFIX = "siftstream.channel.v1."  # + the channel number: one delivery topic per channel


@dataclass(frozen=True)
class TopicSpec:
    """How one topic is laid out.

    Parameters
    ----------
    name : str
        Versioned topic name.
    schema : str
        Record name of its Avro schema in ``schemas/*.avsc``.
    key : str
        What the Kafka key holds (documentation; producers follow it).
    role : str
        ``input`` (written by publishers, subscribers, the overlay) or ``output`` (written by jobs).
    partitions : int
        Partition count used when SiftStream creates the topic.
    compacted : bool
        Log compaction instead of time retention: the topic is a table keyed by ``key``.
    retention_ms : int
        Time retention for non-compacted topics (ignored when compacted).
    """

    name: str
    schema: str
    key: str
    role: str
    partitions: int = 2
    compacted: bool = False
    retention_ms: int = 7 * DAY_MS
    max_message_bytes: int | None = None

    def config(self) -> dict[str, str]:
        """Topic-level Kafka configuration."""
        extra = {} if self.max_message_bytes is None else {"max.message.bytes": str(self.max_message_bytes)}
        if self.compacted:
            return {"cleanup.policy": "compact", "min.compaction.lag.ms": "0", **extra}
        return {"cleanup.policy": "delete", "retention.ms": str(self.retention_ms), **extra}


_ALL = (
    TopicSpec(EVENTS_TOPIC, "Event", "publisher_id", "input"),
    TopicSpec(SUBSCRIPTIONS_TOPIC, "Subscription", "subscription_id", "input", compacted=True),
    TopicSpec(LINK_TELEMETRY_TOPIC, "LinkSample", "from->to", "input", retention_ms=DAY_MS),
    TopicSpec(BROKER_TELEMETRY_TOPIC, "BrokerSample", "broker_id", "input", retention_ms=DAY_MS),
    TopicSpec(TOPOLOGY_TOPIC, "TopologyElement", "element_id", "input", partitions=1, compacted=True),
    TopicSpec(RECEIPTS_TOPIC, "Receipt", "subscriber_id", "input", retention_ms=DAY_MS),
    TopicSpec(MATCHES_TOPIC, "Match", "event_id", "output"),
    TopicSpec(ROUTES_TOPIC, "RoutePlan", "plan_id", "output", partitions=1),
    TopicSpec(PLACEMENTS_TOPIC, "Placement", "subscription_id", "output", partitions=1),
    TopicSpec(COMPOSITES_TOPIC, "CompositeDetection", "detection_id", "output"),
    # a planned version lists every subscription (about 2 MB at 100,000): room for 64 MB
    TopicSpec(CHANNELS_TOPIC, "ChannelAssignment", "version", "output", partitions=1, max_message_bytes=64 << 20),
    TopicSpec(QOS_TOPIC, "QosReport", "<kind>:<id>", "output", partitions=1),
    TopicSpec(DEADLETTER_TOPIC, "DeadLetter", "dead_letter_id", "output", retention_ms=30 * DAY_MS),
)

TOPICS: dict[str, TopicSpec] = {t.name: t for t in _ALL}
INPUT_TOPICS: tuple[TopicSpec, ...] = tuple(t for t in _ALL if t.role == "input")
OUTPUT_TOPICS: tuple[TopicSpec, ...] = tuple(t for t in _ALL if t.role == "output")


def channel_topic(channel: int, prefix: str = "") -> str:
    """The topic that carries delivery channel ``channel`` (docs/reference/delivery.md).

    >>> channel_topic(3, "t.")
    't.siftstream.channel.v1.3'
    """
    return f"{prefix}{CHANNEL_TOPIC_PREFIX}{channel}"


def channel_spec(channel: int) -> TopicSpec:
    """How a channel topic is laid out: one partition (one order for events and version
    markers), a day's retention; values are ``ChannelEvents`` records (events as published, a
    batch at a time) and ``ChannelMarker`` records.

    >>> channel_spec(0).partitions, channel_spec(0).schema
    (1, 'Event')
    """
    return TopicSpec(channel_topic(channel), "Event", "event_id", "output", partitions=1, retention_ms=DAY_MS)
