"""The one declaration of every SiftStream topic: name, record schema, key, and Kafka settings.

``infra`` creates topics from it, producers and jobs look up a topic's schema in it, and a test
checks that it names exactly the topics of DESIGN.md.

>>> TOPICS["siftstream.events.v1"].schema
'Event'
>>> [t.name for t in INPUT_TOPICS][:2]
['siftstream.events.v1', 'siftstream.subscriptions.v1']
"""

from __future__ import annotations

from dataclasses import dataclass

DAY_MS = 24 * 3600 * 1000


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

    def config(self) -> dict[str, str]:
        """Topic-level Kafka configuration."""
        if self.compacted:
            return {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"}
        return {"cleanup.policy": "delete", "retention.ms": str(self.retention_ms)}


_ALL = (
    TopicSpec("siftstream.events.v1", "Event", "publisher_id", "input"),
    TopicSpec("siftstream.subscriptions.v1", "Subscription", "subscription_id", "input", compacted=True),
    TopicSpec("siftstream.telemetry.links.v1", "LinkSample", "from->to", "input", retention_ms=DAY_MS),
    TopicSpec("siftstream.telemetry.brokers.v1", "BrokerSample", "broker_id", "input", retention_ms=DAY_MS),
    TopicSpec("siftstream.topology.v1", "TopologyElement", "element_id", "input", partitions=1, compacted=True),
    TopicSpec("siftstream.receipts.v1", "Receipt", "subscriber_id", "input", retention_ms=DAY_MS),
    TopicSpec("siftstream.matches.v1", "Match", "event_id", "output"),
    TopicSpec("siftstream.routes.v1", "RoutePlan", "plan_id", "output", partitions=1),
    TopicSpec("siftstream.placements.v1", "Placement", "subscription_id", "output", partitions=1),
    TopicSpec("siftstream.composites.v1", "CompositeDetection", "detection_id", "output"),
    TopicSpec("siftstream.channels.v1", "Channel", "channel_id", "output", partitions=1),
    TopicSpec("siftstream.qos.v1", "QosReport", "<kind>:<id>", "output", partitions=1),
    TopicSpec("siftstream.deadletter.v1", "DeadLetter", "dead_letter_id", "output", retention_ms=30 * DAY_MS),
)

TOPICS: dict[str, TopicSpec] = {t.name: t for t in _ALL}
INPUT_TOPICS: tuple[TopicSpec, ...] = tuple(t for t in _ALL if t.role == "input")
OUTPUT_TOPICS: tuple[TopicSpec, ...] = tuple(t for t in _ALL if t.role == "output")
DEADLETTER_TOPIC = "siftstream.deadletter.v1"
