"""Create every SiftStream topic from the one declaration in ``schemas.topics``, idempotently."""

from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from infra.connection import KafkaConnection
from schemas.topics import TOPICS, TopicSpec

__all__ = ["ensure_topics"]


def ensure_topics(
    conn: KafkaConnection,
    prefix: str = "",
    replication: int | None = None,
    specs: tuple[TopicSpec, ...] | None = None,
) -> list[str]:
    """Create the topics that do not exist yet; return one line per topic saying what happened.

    Parameters
    ----------
    conn : KafkaConnection
        The cluster.
    prefix : str
        Prepended to every topic name (tests give each test its own topics this way).
    replication : int, optional
        Replication factor for new topics; by default the cluster's own ``default.replication.factor``
        (Kafka's -1): 1 on the local single broker, 3 on the local 3-node cluster
        (docs/guide/faults.md). With a node of three down, creation is refused rather than made with
        fewer replicas.
    """
    admin = AdminClient(conn.confluent())
    existing = admin.list_topics(timeout=15).topics
    if replication is None:
        replication = -1
    wanted = specs if specs is not None else tuple(TOPICS.values())
    new = [
        NewTopic(prefix + t.name, t.partitions, replication, config=t.config())
        for t in wanted
        if prefix + t.name not in existing
    ]
    lines = [f"exists   {prefix + t.name}" for t in wanted if prefix + t.name in existing]
    if new:
        for name, fut in admin.create_topics(new, request_timeout=30).items():
            try:
                fut.result(30)
                lines.append(f"created  {name}")
            except KafkaException as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise RuntimeError(f"could not create topic {name}: {exc}") from exc
                lines.append(f"exists   {name}")
    if new:
        _wait_for_leaders(admin, [t.topic for t in new])
    return sorted(lines, key=lambda line: line.split()[-1])


def _wait_for_leaders(admin: AdminClient, topics: list[str], timeout_s: float = 30.0) -> None:
    """New topics are usable once every partition has a leader (before that, clients get
    NOT_LEADER_FOR_PARTITION); wait for it so callers can produce and read offsets at once."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        meta = admin.list_topics(timeout=10).topics
        ready = all(
            name in meta
            and meta[name].error is None
            and meta[name].partitions
            and all(p.leader >= 0 and p.error is None for p in meta[name].partitions.values())
            for name in topics
        )
        if ready:
            return
        time.sleep(0.2)
    raise TimeoutError(f"new topics got no partition leaders within {timeout_s:.0f}s: {topics}")
