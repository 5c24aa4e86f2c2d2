"""A secured local Kafka broker: TLS, SASL/SCRAM-SHA-512, ACLs per role, and a client profile per role.

The model (docs/guide/security.md): clients reach the broker only on one ``SASL_SSL`` listener
(TLS with a certificate signed by a CA made here, then SCRAM-SHA-512 with a user name and
password); the controller listener takes only the broker itself (SASL PLAIN as ``admin``, on
loopback). The broker runs Kafka's ``StandardAuthorizer`` with ``admin`` the one super user and
``allow.everyone.if.no.acl.found=false``: a principal may do only what an ACL grants it. The ACLs
come from one table, :func:`role_grants` (a pure function from a role and the topic names to
grants), which the docs and the tests share.

Roles and their principals (SCRAM user names):

- ``publisher``: writes the events topic, nothing else;
- ``subscriber-<id>``: reads the channel assignments topic and its own channel topics, writes
  receipts and subscriptions, uses the consumer groups of its own subscriptions;
- ``jobs``: reads the project's topics, writes the jobs' outputs and the channel topics (and
  creates those), uses Spark's and the jobs' consumer groups;
- ``admin``: the super user (creates topics, users and ACLs; the broker's own identity).

What runs beside the jobs (:class:`AccessService`, started by ``siftstream serve --gateway``): the
subscription gateway (:func:`forward_subscriptions`, as ``jobs``: each subscriber's inbox to the
subscriptions table, only the subscriptions it owns) and the channel grants
(:func:`follow_channel_grants`, as ``admin``: each subscriber may read the channels its
subscriptions are planned on, and loses a channel they were moved off once their clients passed
the hand-over marker there, or after a grace period).

Everything lives under one home (a ``BrokerConfig.home``): ``security/`` holds the CA, the
broker's PKCS12 keystore, ``ca.pem`` (the clients' trust) and ``users.json`` (the generated
passwords, mode 0600); ``profiles/<role>.properties`` are the ``--kafka-config`` files.

>>> [str(g) for g in role_grants("publisher", prefix="t.")]
['User:publisher WRITE topic t.siftstream.events.v1', 'User:publisher DESCRIBE topic t.siftstream.events.v1']
>>> profile_text("publisher", "pw", Path("/h/ca.pem")).splitlines()[:2]
['security.protocol=SASL_SSL', 'sasl.mechanism=SCRAM-SHA-512']
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from infra import kafka
from infra.connection import KafkaConnection, arrived
from infra.jars import JarSets
from routing.channels.assignment import LOBBY
from schemas.topics import (
    CHANNEL_TOPIC_PREFIX,
    CHANNELS_TOPIC,
    EVENTS_TOPIC,
    OUTPUT_TOPICS,
    RECEIPTS_TOPIC,
    SUBSCRIPTIONS_TOPIC,
    TOPICS,
    channel_topic,
)

__all__ = [
    "ADMIN",
    "DEFAULT_REVOKE_GRACE_S",
    "MECHANISM",
    "AccessCounts",
    "AccessService",
    "ChannelMove",
    "Grant",
    "SecureHome",
    "add_users",
    "apply_grants",
    "channel_grants",
    "channel_moves",
    "channel_revocations",
    "committed_positions",
    "follow_channel_grants",
    "forward_subscriptions",
    "grant_subscriber",
    "inbox_topic",
    "ownership_error",
    "profile_text",
    "remove_grants",
    "role_grants",
    "secure_properties",
    "subscriber_principal",
    "up",
]

MECHANISM = "SCRAM-SHA-512"
ADMIN = "admin"
INBOX_PREFIX = SUBSCRIPTIONS_TOPIC + ".inbox."
"""A subscriber's own subscriptions topic is ``INBOX_PREFIX + <subscriber id>`` (:func:`inbox_topic`)."""
JOB_GROUPS = (
    ("spark-kafka-source-", "prefixed"),
    ("siftstream-delivery", "literal"),
    ("siftstream-serve", "literal"),
    ("siftstream-reader", "literal"),
    ("siftstream-gateway", "literal"),
)
"""The consumer groups the jobs use: Spark's Kafka source makes ``spark-kafka-source-<uuid>...``
groups; the delivery stage, ``serve`` and the readers have fixed ones (their consumers assign
partitions and commit nothing, but a group id is still authorised)."""

_SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"
_PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def subscriber_principal(subscriber_id: str) -> str:
    """The SCRAM user name of subscriber ``subscriber_id`` (its role name).

    >>> subscriber_principal("alice")
    'subscriber-alice'
    """
    return f"subscriber-{subscriber_id}"


def inbox_topic(subscriber_id: str, prefix: str = "") -> str:
    """The topic subscriber ``subscriber_id`` writes its subscriptions to (only it may).

    >>> inbox_topic("alice", "t.")
    't.siftstream.subscriptions.v1.inbox.alice'
    """
    return f"{prefix}{INBOX_PREFIX}{subscriber_id}"


def grant_subscriber(admin_conn: KafkaConnection, role: str, prefix: str = "", channels: Sequence[int] = ()) -> int:
    """Create subscriber ``role``'s inbox topic (compacted, as the table) and its ACLs; return how many."""
    import dataclasses

    from infra.topics import ensure_topics

    inbox = inbox_topic(role.removeprefix("subscriber-"))
    ensure_topics(admin_conn, prefix, specs=(dataclasses.replace(TOPICS[SUBSCRIPTIONS_TOPIC], name=inbox),))
    return apply_grants(admin_conn, role_grants(role, prefix, channels))


def ownership_error(owner: str, key: bytes | None, record: dict[str, Any] | None) -> str | None:
    """Why a record in ``owner``'s inbox may not enter the subscriptions table (None: it may).

    A subscriber owns the subscription ids ``<its id>-<tail>`` with no ``-`` in the tail (the
    client's own ids, ``streaming/client.py``), so that ``alice`` cannot name ``alice-2``'s
    subscriptions; a record (not a tombstone) must also carry ``subscriber_id == owner``.

    >>> ownership_error("alice", b"alice-3f2a", {"subscriber_id": "alice"}) is None
    True
    >>> ownership_error("alice", b"alice-2-3f2a", None)
    "subscription id 'alice-2-3f2a' is not one of alice's (alice-<id without '-'>)"
    >>> ownership_error("alice", b"alice-x", {"subscriber_id": "bob"})
    "subscription alice-x names subscriber 'bob', but was written by alice"
    """
    sid = (key or b"").decode("utf-8", "replace")
    tail = sid.removeprefix(f"{owner}-")
    if tail == sid or not tail or "-" in tail:
        return f"subscription id {sid!r} is not one of {owner}'s ({owner}-<id without '-'>)"
    if record is not None and record.get("subscriber_id") != owner:
        return f"subscription {sid} names subscriber {record.get('subscriber_id')!r}, but was written by {owner}"
    return None


def forward_subscriptions(
    jobs_conn: KafkaConnection,
    prefix: str = "",
    idle_s: float = 5.0,
    follow: bool = False,
    stop: threading.Event | None = None,
    counts: AccessCounts | None = None,
) -> tuple[int, int]:
    """The subscription gateway: copy every inbox's records that :func:`ownership_error` passes
    and that are valid ``Subscription`` records (or tombstones) to the subscriptions table, and
    dead-letter the rest (``error_code`` ``not_owner`` or the validator's); return (forwarded,
    dead-lettered). Runs as ``jobs`` (the only writer of the table) until no record came for
    ``idle_s`` after it joined (with ``follow``, until interrupted or ``stop`` is set); it commits
    each record's offset once handled (group ``siftstream-gateway``), so a rerun goes on from
    there. ``counts`` (``forwarded``, ``rejected``) is kept up to date as records are handled."""
    import re

    from confluent_kafka import Consumer

    from producers.kafka_writer import KafkaWriter
    from schemas.rules import checked, dead_letter
    from schemas.topics import DEADLETTER_TOPIC

    consumer = Consumer(
        jobs_conn.confluent(
            **{
                "group.id": "siftstream-gateway",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "topic.metadata.refresh.interval.ms": 2000,
            }
        )
    )
    consumer.subscribe([f"^{re.escape(prefix + INBOX_PREFIX)}.+"])
    writer = KafkaWriter(jobs_conn)
    forwarded = rejected = 0
    start = last = time.monotonic()
    try:
        while stop is None or not stop.is_set():
            msg = consumer.poll(0.5)
            now = time.monotonic()
            if msg is None:  # idle: stop once the group gave it the inboxes (or after a minute without)
                if not follow and now - last > idle_s and (consumer.assignment() or now - start > 60):
                    break
                continue
            last = now
            if msg.error() is not None:
                continue
            topic, key, value = str(msg.topic()), msg.key(), msg.value()
            owner = topic.removeprefix(prefix + INBOX_PREFIX)
            code, reason, record = checked(value, "Subscription", table=True)
            if code is None:
                reason = ownership_error(owner, key, record)
                code = None if reason is None else "not_owner"
            if code is None:
                writer.send(prefix + SUBSCRIPTIONS_TOPIC, key, value)
                forwarded += 1
            else:
                _, stamp = msg.timestamp()
                where = (int(msg.partition() or 0), int(msg.offset() or 0))
                dl_key, dl_value = dead_letter(topic, *where, stamp * 1000, code, str(reason), key, value)
                writer.send(prefix + DEADLETTER_TOPIC, dl_key.decode(), dl_value)
                rejected += 1
            report = writer.flush(30.0)
            if report.failed:
                raise RuntimeError(f"the gateway could not write: {report.errors[-3:]}")
            consumer.commit(message=msg, asynchronous=False)
            if counts is not None and code is None:
                counts.forwarded += 1
            elif counts is not None:
                counts.rejected += 1
    finally:
        consumer.close()
    return forwarded, rejected


@dataclass(frozen=True)
class Grant:
    """One ACL: ``principal`` may do ``operation`` on the resource ``(kind, name, pattern)``.

    ``kind`` is ``topic``, ``group`` or ``cluster``; ``pattern`` is ``literal`` (the exact name)
    or ``prefixed`` (every name starting with ``name``), as Kafka's resource patterns.
    """

    principal: str
    operation: str
    kind: str
    name: str
    pattern: str = "literal"

    def __str__(self) -> str:
        star = "*" if self.pattern == "prefixed" else ""
        return f"{self.principal} {self.operation} {self.kind} {self.name}{star}"


def _topic(principal: str, name: str, *operations: str, pattern: str = "literal") -> list[Grant]:
    return [Grant(principal, op, "topic", name, pattern) for op in operations]


def role_grants(role: str, prefix: str = "", channels: Sequence[int] = ()) -> list[Grant]:
    """The ACLs of ``role`` over the topics of a deployment with topic prefix ``prefix``.

    Parameters
    ----------
    role : str
        ``publisher``, ``jobs``, ``admin`` (none: the super user) or ``subscriber-<id>``.
    prefix : str
        The deployment's ``--topic-prefix``.
    channels : sequence of int
        For a subscriber: the channel numbers it may read (its subscriptions' channels under
        the installed assignment; the operator grants a new channel when an assignment moves it).

    Returns
    -------
    list of Grant
        Kafka allows exactly these operations and nothing else (no ACL, no access).

    Examples
    --------
    >>> for g in role_grants("subscriber-alice", channels=[2]): print(g)
    User:subscriber-alice READ topic siftstream.channels.v1
    User:subscriber-alice DESCRIBE topic siftstream.channels.v1
    User:subscriber-alice READ topic siftstream.channel.v1.2
    User:subscriber-alice DESCRIBE topic siftstream.channel.v1.2
    User:subscriber-alice WRITE topic siftstream.receipts.v1
    User:subscriber-alice DESCRIBE topic siftstream.receipts.v1
    User:subscriber-alice WRITE topic siftstream.subscriptions.v1.inbox.alice
    User:subscriber-alice DESCRIBE topic siftstream.subscriptions.v1.inbox.alice
    User:subscriber-alice READ group siftstream-client-alice-*
    >>> [str(g) for g in role_grants("jobs") if g.operation == "CREATE"]
    ['User:jobs CREATE topic siftstream.channel.v1.*']
    """
    principal = f"User:{role}"
    if role == ADMIN:
        return []
    if role == "publisher":
        return _topic(principal, prefix + EVENTS_TOPIC, "WRITE", "DESCRIBE")
    if role.startswith("subscriber-"):
        subscriber_id = role.removeprefix("subscriber-")
        grants = _topic(principal, prefix + CHANNELS_TOPIC, "READ", "DESCRIBE")
        for c in channels:
            grants += _topic(principal, channel_topic(c, prefix), "READ", "DESCRIBE")
        grants += _topic(principal, prefix + RECEIPTS_TOPIC, "WRITE", "DESCRIBE")
        grants += _topic(principal, inbox_topic(subscriber_id, prefix), "WRITE", "DESCRIBE")
        # the client's groups are siftstream-client-<subscription id>, and its subscription ids
        # start with '<subscriber id>-' (streaming/client.py)
        grants.append(Grant(principal, "READ", "group", f"siftstream-client-{subscriber_id}-", "prefixed"))
        return grants
    if role == "jobs":
        outputs = {t.name for t in OUTPUT_TOPICS}
        grants = []
        for name in TOPICS:
            grants += _topic(principal, prefix + name, "READ", "DESCRIBE")
            if name in outputs:
                grants += _topic(principal, prefix + name, "WRITE")
        grants += _topic(
            principal, prefix + CHANNEL_TOPIC_PREFIX, "READ", "WRITE", "DESCRIBE", "CREATE", pattern="prefixed"
        )
        # the subscription gateway: reads every inbox, writes what passes to the subscriptions table
        grants += _topic(principal, prefix + INBOX_PREFIX, "READ", "DESCRIBE", pattern="prefixed")
        grants += _topic(principal, prefix + SUBSCRIPTIONS_TOPIC, "WRITE")
        grants += [Grant(principal, "READ", "group", g, pattern) for g, pattern in JOB_GROUPS]
        return grants
    raise ValueError(f"unknown role {role!r}: expected publisher, jobs, admin or subscriber-<id>")


def _acl_fields(g: Grant) -> tuple[Any, ...]:
    """The fields of ``g``'s ACL in the order of confluent-kafka's ``AclBinding`` (and ``AclBindingFilter``)."""
    from confluent_kafka.admin import AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    return (
        ResourceType[g.kind.upper()],
        g.name,
        ResourcePatternType[g.pattern.upper()],
        g.principal,
        "*",
        AclOperation[g.operation],
        AclPermissionType.ALLOW,
    )


def apply_grants(admin_conn: KafkaConnection, grants: Iterable[Grant], timeout_s: float = 30.0) -> int:
    """Create ``grants`` as ACLs with the Admin API (as a super user); return how many."""
    from confluent_kafka.admin import AclBinding, AdminClient

    bindings = [AclBinding(*_acl_fields(g)) for g in grants]
    if not bindings:
        return 0
    admin = AdminClient(admin_conn.confluent())
    for fut in admin.create_acls(bindings, request_timeout=timeout_s).values():
        fut.result(timeout_s)
    return len(bindings)


def channel_grants(subscriber_of: Mapping[str, str], channel_of: Mapping[str, int]) -> set[tuple[str, int]]:
    """The ``(subscriber id, channel)`` pairs whose channel topic the subscriber must read: each
    subscription's channel under the assignment ``channel_of`` (subscription id -> channel), the
    lobby for a subscription it does not place (docs/reference/delivery.md).

    Parameters
    ----------
    subscriber_of : mapping
        Subscription id -> subscriber id, the subscriptions table as it stands.
    channel_of : mapping
        Subscription id -> channel, the members of the newest planned assignment.

    >>> sorted(channel_grants({"alice-1": "alice", "alice-2": "alice", "bob-1": "bob"}, {"alice-1": 2, "carl-1": 1}))
    [('alice', 0), ('alice', 2), ('bob', 0)]
    """
    return {(subscriber, channel_of.get(sid, LOBBY)) for sid, subscriber in subscriber_of.items()}


DEFAULT_REVOKE_GRACE_S = 3600.0
"""How long after a version moved a subscription off a channel its subscriber keeps reading it at
most, passed the hand-over marker or not (a client that is gone or never commits)."""


@dataclass(frozen=True)
class ChannelMove:
    """Subscription ``subscription_id`` left ``channel`` when the version installed at ``at_ms``
    (ms since the epoch) moved it; that version's hand-over marker is at offset ``marker`` of the
    channel's topic (None: the version wrote none there)."""

    subscription_id: str
    channel: int
    marker: int | None
    at_ms: int


def channel_moves(
    before: Mapping[str, int], after: Mapping[str, int], handover: Mapping[int, int], at_ms: int
) -> list[ChannelMove]:
    """The moves that installing a version makes: each subscription whose channel under the
    installed members ``before`` differs from the one under the new version's ``after`` (the
    lobby where a mapping does not place it), with the marker's offset in the channel left
    (``handover``: channel -> offset) and the installation time ``at_ms``.

    >>> channel_moves({}, {"carol-1": 2, "carol-2": 0}, {0: 7, 1: 4, 2: 9}, 50)
    [ChannelMove(subscription_id='carol-1', channel=0, marker=7, at_ms=50)]
    """
    moves = []
    for sid in sorted(set(before) | set(after)):
        old, new = before.get(sid, LOBBY), after.get(sid, LOBBY)
        if old != new:
            moves.append(ChannelMove(sid, old, handover.get(old), at_ms))
    return moves


def channel_revocations(
    needed: set[tuple[str, int]],
    moves: Iterable[ChannelMove],
    owner_of: Mapping[str, str],
    committed: Mapping[tuple[str, int], int],
    live: Iterable[str],
    now_ms: int,
    grace_ms: int,
) -> set[tuple[str, int]]:
    """The ``(subscriber id, channel)`` read grants to take away (docs/guide/security.md).

    A pair is a candidate when one of the subscriber's subscriptions was moved off the channel
    (``moves``, the newest move of each subscription and channel; ``owner_of``: subscription id ->
    subscriber id, kept after a tombstone; a move of a subscription whose owner is not known yet
    waits). It is revoked when the
    subscriber no longer needs the channel (the pair is not in ``needed``: :func:`channel_grants`
    under the newest planned and the installed assignment) and each of those moves is done: the
    subscription is gone (not in ``live``, the subscriptions table), or its client committed a
    position after the marker in that channel (``committed[(subscription id, channel)]`` >
    ``marker``, consumer group ``siftstream-client-<subscription id>``), or ``grace_ms`` passed
    since the move (``now_ms - at_ms >= grace_ms``: a client that is gone keeps nothing forever).

    >>> move, owner = ChannelMove("carol-1", 0, 7, at_ms=1_000), {"carol-1": "carol"}
    >>> channel_revocations(set(), [move], owner, {("carol-1", 0): 7}, {"carol-1"}, 2_000, 60_000)
    set()
    >>> channel_revocations(set(), [move], owner, {("carol-1", 0): 8}, {"carol-1"}, 2_000, 60_000)
    {('carol', 0)}
    >>> channel_revocations({("carol", 0)}, [move], owner, {("carol-1", 0): 8}, {"carol-1"}, 2_000, 60_000)
    set()
    >>> channel_revocations(set(), [move], owner, {}, {"carol-1"}, 61_000, 60_000)
    {('carol', 0)}
    """
    alive = set(live)
    blocked: set[tuple[str, int]] = set()
    candidates: set[tuple[str, int]] = set()
    for m in moves:
        if m.subscription_id not in owner_of:
            continue
        pair = (owner_of[m.subscription_id], m.channel)
        candidates.add(pair)
        passed = m.marker is not None and committed.get((m.subscription_id, m.channel), -1) > m.marker
        if m.subscription_id in alive and not passed and now_ms - m.at_ms < grace_ms:
            blocked.add(pair)
    return candidates - needed - blocked


def committed_positions(
    admin_conn: KafkaConnection, keys: Iterable[tuple[str, int]], prefix: str = "", timeout_s: float = 10.0
) -> dict[tuple[str, int], int]:
    """The positions that subscriptions' clients committed in channels: ``(subscription id,
    channel)`` -> offset, read with the Admin API from consumer group ``siftstream-client-<id>``
    (streaming/client.py); a pair without a committed offset is left out."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    wanted: dict[str, list[int]] = {}
    for sid, channel in sorted(set(keys)):
        wanted.setdefault(sid, []).append(channel)
    if not wanted:
        return {}
    admin = AdminClient(admin_conn.confluent())
    found: dict[tuple[str, int], int] = {}
    for sid, channels in sorted(wanted.items()):  # the Admin API takes one group per request
        request = ConsumerGroupTopicPartitions(
            f"siftstream-client-{sid}", [TopicPartition(channel_topic(c, prefix), 0) for c in channels]
        )
        [future] = admin.list_consumer_group_offsets([request], request_timeout=timeout_s).values()
        channel_of = {channel_topic(c, prefix): c for c in channels}
        for tp in future.result(timeout_s).topic_partitions:
            if tp.error is None and tp.offset >= 0 and tp.topic in channel_of:
                found[(sid, channel_of[tp.topic])] = int(tp.offset)
    return found


def remove_grants(admin_conn: KafkaConnection, grants: Iterable[Grant], timeout_s: float = 30.0) -> int:
    """Delete the ACLs of ``grants`` with the Admin API (as a super user); return how many existed."""
    from confluent_kafka.admin import AclBindingFilter, AdminClient

    filters = [AclBindingFilter(*_acl_fields(g)) for g in grants]
    if not filters:
        return 0
    admin = AdminClient(admin_conn.confluent())
    return sum(len(fut.result(timeout_s)) for fut in admin.delete_acls(filters, request_timeout=timeout_s).values())


@dataclass
class AccessCounts:
    """What the access service (:class:`AccessService`) did so far: records the gateway forwarded
    and dead-lettered, channel read grants it added and took away (one per subscriber and
    channel), and the errors it recovered from, with the last one's text."""

    forwarded: int = 0
    rejected: int = 0
    granted: int = 0
    revoked: int = 0
    errors: int = 0
    last_error: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def failed(self, text: str) -> None:
        with self.lock:
            self.errors += 1
            self.last_error = text

    def as_dict(self) -> dict[str, Any]:
        with self.lock:
            return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "lock"}


def _channel_acls(subscriber: str, channel: int, prefix: str) -> list[Grant]:
    return _topic(f"User:{subscriber_principal(subscriber)}", channel_topic(channel, prefix), "READ", "DESCRIBE")


def follow_channel_grants(
    admin_conn: KafkaConnection,
    prefix: str = "",
    stop: threading.Event | None = None,
    counts: AccessCounts | None = None,
    poll_s: float = 0.5,
    grace_s: float = DEFAULT_REVOKE_GRACE_S,
    check_s: float = 2.0,
    max_asks: int = 256,
) -> set[tuple[str, int]]:
    """Grant every subscriber READ and DESCRIBE on the channel topics its subscriptions are
    delivered on, as the channels job moves them, and take a channel away once no subscription
    of the subscriber needs it; run until ``stop`` is set and return the pairs granted.

    It reads the subscriptions table (who owns each subscription) and the channel assignments
    topic from their start, and acts once it has read what they held when it started (a restart
    neither grants an old channel again nor forgets one to take away). Grants: the
    :func:`channel_grants` pairs of the newest planned version (the one the delivery stage
    installs next) not granted yet, as ``admin`` (creating an ACL that exists is a no-op), so a
    moved subscriber can read its new channel when it reaches the hand-over marker. Revocations:
    each installed version's moves (:func:`channel_moves`, the markers' offsets from its
    installed record); every ``check_s`` seconds, the clients' committed positions in the
    channels left (:func:`committed_positions`: one Admin request per subscription, at most
    ``max_asks`` of them per round, in turn; a position seen past the marker is not asked again)
    and :func:`channel_revocations` with grace ``grace_s`` say which pairs' ACLs to delete
    (:func:`remove_grants`). ``counts`` (``granted``, ``revoked``) is kept up to date.
    """
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from schemas.codec import DecodeError, decode

    subs_topic, channels_topic = prefix + SUBSCRIPTIONS_TOPIC, prefix + CHANNELS_TOPIC
    consumer = Consumer(admin_conn.confluent(**{"group.id": "siftstream-channel-grants", "enable.auto.commit": False}))
    subscriber_of: dict[str, str] = {}  # the live subscriptions' owners
    owner_of: dict[str, str] = {}  # every subscription's owner, also after its tombstone
    planned: dict[int, dict[str, int]] = {}  # members of the planned versions not installed yet
    installed_version, installed_of = 0, dict[str, int]()
    moves: dict[tuple[str, int], ChannelMove] = {}
    passed: dict[tuple[str, int], int] = {}  # moves whose client committed a position past the marker
    granted = set[tuple[str, int]]()
    checked_at, rounds = 0.0, 0
    try:
        topics = consumer.list_topics(timeout=10).topics
        missing = [t for t in (subs_topic, channels_topic) if t not in topics]
        if missing:
            raise RuntimeError(f"channel grants: no topic {', '.join(missing)}")
        parts = [TopicPartition(t, p) for t in (subs_topic, channels_topic) for p in topics[t].partitions]
        ends = {}  # where each partition ended at the start (those that held records)
        for tp in parts:
            low, high = consumer.get_watermark_offsets(tp, timeout=10)
            if high > low:
                ends[(tp.topic, tp.partition)] = high
        consumer.assign([TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING) for tp in parts])
        while stop is None or not stop.is_set():
            for msg in arrived(consumer, 1000, poll_s):
                if msg.error() is not None:
                    continue
                key = (msg.key() or b"").decode("utf-8", "replace")
                try:
                    record = None if msg.value() is None else decode(msg.value())[1]
                except DecodeError:
                    continue  # the jobs dead-letter what does not decode
                if msg.topic() == subs_topic:
                    if record is None or record.get("type") == "unsubscribe":
                        subscriber_of.pop(key, None)
                    elif record.get("subscriber_id"):
                        subscriber_of[key] = owner_of[key] = str(record["subscriber_id"])
                    continue
                if record is None or int(record["version"]) <= installed_version:
                    continue
                version = int(record["version"])
                if record.get("stage") == "planned":
                    planned[version] = {s: int(c["channel"]) for c in record["channels"] for s in c["subscription_ids"]}
                elif record.get("stage") == "installed" and version in planned:
                    after = planned[version]
                    handover = {int(h["channel"]): int(h["offset"]) for h in record["handover"]}
                    for m in channel_moves(installed_of, after, handover, int(record["created_at"])):
                        moves[(m.subscription_id, m.channel)] = m
                        passed.pop((m.subscription_id, m.channel), None)
                    for sid, channel in after.items():  # back on a channel it left: that move is void
                        moves.pop((sid, channel), None)
                    installed_version, installed_of = version, after
                    planned = {v: members for v, members in planned.items() if v > version}
            if ends:  # still reading what the topics held at the start
                at = consumer.position([TopicPartition(t, p) for t, p in ends])
                ends = {
                    (tp.topic, tp.partition): ends[(tp.topic, tp.partition)]
                    for tp in at
                    if tp.offset < ends[(tp.topic, tp.partition)]
                }
                if ends:
                    continue
            newest = planned[max(planned)] if planned else installed_of
            needed = channel_grants(subscriber_of, newest) | channel_grants(subscriber_of, installed_of)
            new = needed - granted
            if new:
                apply_grants(
                    admin_conn, [g for subscriber, c in sorted(new) for g in _channel_acls(subscriber, c, prefix)]
                )
                granted |= new
                if counts is not None:
                    counts.granted += len(new)
            if moves and time.monotonic() - checked_at >= check_s:
                checked_at = time.monotonic()
                now_ms = int(time.time() * 1000)
                asked = [
                    key
                    for key, m in moves.items()
                    if (subscriber_of.get(m.subscription_id), m.channel) not in needed
                    and m.marker is not None
                    and key[0] in subscriber_of
                    and key not in passed
                ]
                first = rounds * max_asks % len(asked) if asked else 0
                rounds += 1
                turn = (asked[first:] + asked[:first])[:max_asks]  # each at most once, in turn
                for key, offset in committed_positions(admin_conn, turn, prefix).items():
                    if offset > (moves[key].marker or 0):
                        passed[key] = offset  # (a position past the marker stays past it)
                revoke = channel_revocations(
                    needed, moves.values(), owner_of, passed, subscriber_of, now_ms, int(grace_s * 1000)
                )
                if revoke:
                    removed = [
                        pair for pair in sorted(revoke) if remove_grants(admin_conn, _channel_acls(*pair, prefix))
                    ]
                    granted -= revoke
                    moves = {k: m for k, m in moves.items() if (owner_of.get(k[0]), m.channel) not in revoke}
                    passed = {k: o for k, o in passed.items() if k in moves}
                    if counts is not None:  # ACLs deleted (a restart decides again on what it took before)
                        counts.revoked += len(removed)
    finally:
        consumer.close()
    return granted


class AccessService:
    """The secured deployment's running part: the subscription gateway
    (:func:`forward_subscriptions`, as ``jobs``) and the channel grants
    (:func:`follow_channel_grants`, as ``admin``), each in a thread of its own, from
    :meth:`start` until :meth:`stop`. A thread whose loop fails (the broker away, a refused
    request) counts the error, waits ``retry_s`` and starts its loop again; both go on from
    where they were (the gateway's committed position; the grants read again from the start).
    ``revoke_grace_s`` is the channel grants' grace period (:func:`follow_channel_grants`).
    ``siftstream serve --gateway`` and ``python -m infra.security gateway --follow`` run it."""

    def __init__(
        self,
        jobs_conn: KafkaConnection,
        admin_conn: KafkaConnection,
        prefix: str = "",
        retry_s: float = 5.0,
        revoke_grace_s: float = DEFAULT_REVOKE_GRACE_S,
    ):
        self.jobs_conn, self.admin_conn, self.prefix, self.retry_s = jobs_conn, admin_conn, prefix, retry_s
        self.revoke_grace_s = revoke_grace_s
        self.counts = AccessCounts()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        loops = {
            "gateway": lambda: forward_subscriptions(
                self.jobs_conn, self.prefix, follow=True, stop=self._stop, counts=self.counts
            ),
            "channel-grants": lambda: follow_channel_grants(
                self.admin_conn, self.prefix, self._stop, self.counts, grace_s=self.revoke_grace_s
            ),
        }
        for name, loop in loops.items():
            thread = threading.Thread(target=self._keep, args=(name, loop), name=f"siftstream-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _keep(self, name: str, loop: Any) -> None:
        while not self._stop.is_set():
            try:
                loop()
            except Exception as exc:
                self.counts.failed(f"{name}: {type(exc).__name__}: {str(exc)[:300]}")
                self._stop.wait(self.retry_s)

    def alive(self) -> bool:
        """Whether both threads run."""
        return bool(self._threads) and all(t.is_alive() for t in self._threads)

    def status(self) -> dict[str, Any]:
        """The counts (:class:`AccessCounts`) and whether both threads run (``up``)."""
        return {**self.counts.as_dict(), "up": self.alive()}

    def stop(self, timeout_s: float = 10.0) -> bool:
        """Stop both threads (each ends its poll, at most a second); True when both ended in time."""
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)


def add_users(admin_conn: KafkaConnection, users: dict[str, str], timeout_s: float = 30.0) -> None:
    """Create or update the SCRAM-SHA-512 credentials of ``users`` (name -> password)."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialAlteration,
        UserScramCredentialUpsertion,
    )

    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    upserts: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(name, info, password.encode()) for name, password in users.items()
    ]
    admin = AdminClient(admin_conn.confluent())
    for fut in admin.alter_user_scram_credentials(upserts, request_timeout=timeout_s).values():
        fut.result(timeout_s)


def profile_text(user: str, password: str, ca_pem: Path) -> str:
    """The ``--kafka-config`` properties of ``user``: SASL_SSL with SCRAM-SHA-512 for both clients
    (infra/connection.py: plain keys go to both, ``java.`` only to Spark's Kafka client,
    ``librdkafka.`` only to confluent-kafka)."""
    return "".join(
        f"{line}\n"
        for line in (
            "security.protocol=SASL_SSL",
            f"sasl.mechanism={MECHANISM}",
            f'java.sasl.jaas.config={_SCRAM_LOGIN} required username="{user}" password="{password}";',
            "java.ssl.truststore.type=PEM",
            f"java.ssl.truststore.location={ca_pem}",
            f"librdkafka.sasl.username={user}",
            f"librdkafka.sasl.password={password}",
            f"librdkafka.ssl.ca.location={ca_pem}",
        )
    )


@dataclass(frozen=True)
class SecureHome:
    """The security files of a broker home: certificates, passwords and role profiles."""

    home: Path

    @property
    def folder(self) -> Path:
        return self.home / "security"

    @property
    def ca_pem(self) -> Path:
        return self.folder / "ca.pem"

    @property
    def keystore(self) -> Path:
        return self.folder / "broker.p12"

    @property
    def users_file(self) -> Path:
        return self.folder / "users.json"

    def profile(self, role: str) -> Path:
        return self.home / "profiles" / f"{role}.properties"

    def users(self) -> dict[str, str]:
        """Every user's password (made once, kept in ``users.json``); the keystore's under ``"keystore"``."""
        return dict(json.loads(self.users_file.read_text()))

    def password(self, user: str) -> str:
        return self.users()[user]

    def ensure(self, roles: Iterable[str] = ("publisher", "jobs"), java: str = "java") -> None:
        """Make the certificates (once) and a password and profile for ``admin`` and each role."""
        self.folder.mkdir(parents=True, exist_ok=True)
        users = self.users() if self.users_file.exists() else {"keystore": secrets.token_hex(16)}
        for role in (ADMIN, *roles):
            users.setdefault(role, secrets.token_hex(16))
        self.users_file.touch(mode=0o600)
        self.users_file.write_text(json.dumps(users, indent=1) + "\n")
        if not self.ca_pem.exists():
            _make_certificates(self.folder, users["keystore"], _keytool(java))
        for role, password in users.items():
            if role != "keystore":
                path = self.profile(role)
                path.parent.mkdir(exist_ok=True)
                path.write_text(profile_text(role, password, self.ca_pem))

    def connection(self, bootstrap: str, role: str) -> KafkaConnection:
        """A connection as ``role`` (its profile read back, as ``--kafka-config`` would)."""
        return KafkaConnection.from_file(bootstrap, self.profile(role))


def _keytool(java: str) -> str:
    beside = Path(shutil.which(java) or java).resolve().parent / "keytool"
    if beside.exists():
        return str(beside)
    home = os.environ.get("JAVA_HOME")
    found = shutil.which("keytool") or (str(Path(home) / "bin" / "keytool") if home else None)
    if not found:
        raise RuntimeError("keytool (the JDK's) not found beside java, on PATH or in $JAVA_HOME/bin")
    return found


def _make_certificates(folder: Path, password: str, keytool: str) -> None:
    """A CA and a broker key pair it signs (for 127.0.0.1 and localhost), with the JDK's keytool:
    ``ca.pem`` for the clients' trust, ``broker.p12`` (key, certificate, CA) for the broker."""
    ca, broker = folder / "ca.p12", folder / "broker.p12"
    store = ["-storetype", "PKCS12", "-storepass", password]
    san = "SAN=dns:localhost,ip:127.0.0.1"
    steps = [
        ["-genkeypair", "-alias", "ca", "-keyalg", "RSA", "-keysize", "2048", "-dname", "CN=siftstream-local-ca",
         "-ext", "bc:c", "-validity", "365", "-keystore", str(ca), *store],
        ["-exportcert", "-rfc", "-alias", "ca", "-keystore", str(ca), *store, "-file", str(folder / "ca.pem")],
        ["-genkeypair", "-alias", "broker", "-keyalg", "RSA", "-keysize", "2048", "-dname", "CN=localhost",
         "-ext", san, "-validity", "365", "-keystore", str(broker), *store],
        ["-certreq", "-alias", "broker", "-keystore", str(broker), *store, "-file", str(folder / "broker.csr")],
        ["-gencert", "-alias", "ca", "-keystore", str(ca), *store, "-infile", str(folder / "broker.csr"),
         "-outfile", str(folder / "broker.pem"), "-rfc", "-ext", san, "-ext", "EKU=serverAuth,clientAuth",
         "-validity", "365"],
        ["-importcert", "-noprompt", "-alias", "ca", "-keystore", str(broker), *store, "-file", str(folder / "ca.pem")],
        ["-importcert", "-alias", "broker", "-keystore", str(broker), *store, "-file", str(folder / "broker.pem")],
    ]  # fmt: skip
    for step in steps:
        done = subprocess.run([keytool, *step], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"keytool {step[0]} failed: {done.stdout[-1000:]}{done.stderr[-1000:]}")


def secure_properties(cfg: kafka.BrokerConfig, sec: SecureHome, plain: str | None = None) -> str:
    """The broker's ``server.properties``: the plain broker's (``plain``, default the single
    broker's; a cluster node's for :func:`cluster_up`), with the client and inter-broker listener
    SASL_SSL (SCRAM-SHA-512), the controller listener SASL_PLAINTEXT (PLAIN, the broker's own
    ``admin`` only: KRaft controllers cannot check SCRAM, whose credentials live in the metadata
    they serve), and the StandardAuthorizer with ``admin`` the only super user."""
    users = sec.users()
    admin_pw, store_pw = users[ADMIN], users["keystore"]
    base = kafka._server_properties(cfg) if plain is None else plain
    props = dict(line.split("=", 1) for line in base.splitlines())
    props.update(
        {
            "listeners": f"SASL_SSL://127.0.0.1:{cfg.port},CONTROLLER://127.0.0.1:{cfg.controller_port}",
            "advertised.listeners": f"SASL_SSL://127.0.0.1:{cfg.port}",
            "inter.broker.listener.name": "SASL_SSL",
            "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": MECHANISM,
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                f'{_SCRAM_LOGIN} required username="{ADMIN}" password="{admin_pw}";'
            ),
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": (
                f'{_PLAIN_LOGIN} required username="{ADMIN}" password="{admin_pw}" user_{ADMIN}="{admin_pw}";'
            ),
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(sec.keystore),
            "ssl.keystore.password": store_pw,
            "ssl.key.password": store_pw,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(sec.ca_pem),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{ADMIN}",
            "allow.everyone.if.no.acl.found": "false",
        }
    )
    return "".join(f"{k}={v}\n" for k, v in props.items())


def up(
    cfg: kafka.BrokerConfig,
    jars: JarSets,
    roles: Sequence[str] = ("publisher", "jobs"),
    prefix: str = "",
    timeout_s: float = 120.0,
) -> str:
    """Start the secured broker of ``cfg`` (certificates, users and profiles made on first use),
    create the users and ACLs of ``roles`` and return a status line; ``kafka.down(cfg)`` stops it.
    A subscriber's channels are granted apart (``apply_grants(role_grants(role, prefix, channels))``)."""
    sec = SecureHome(cfg.home)
    sec.ensure(roles, cfg.java)
    admin_pw = sec.password(ADMIN)
    admin_client = sec.connection(cfg.bootstrap, ADMIN).confluent()
    admin_client.pop("bootstrap.servers")
    pid = kafka._pid(cfg)
    if pid is None:
        scram = f"{MECHANISM}=[name={ADMIN},password={admin_pw}]"
        proc = kafka._launch(cfg, jars, secure_properties(cfg, sec), format_args=("--add-scram", scram))
        try:
            waited = kafka.wait_ready(cfg.bootstrap, timeout_s, client=admin_client)
        except Exception:
            exited = proc.poll() is not None
            kafka.down(cfg)
            if exited:
                raise kafka._exited(cfg, proc) from None
            raise
        line = f"secured Kafka started (pid {proc.pid}) at {cfg.bootstrap}, ready in {waited:.1f}s"
    else:
        kafka.wait_ready(cfg.bootstrap, timeout_s, client=admin_client)
        line = f"secured Kafka already running (pid {pid}) at {cfg.bootstrap}"
    count = _add_roles(sec, cfg.bootstrap, roles, prefix)
    return f"{line}; users {', '.join(roles)} with {count} ACLs; profiles in {cfg.home / 'profiles'}"


def _add_roles(sec: SecureHome, bootstrap: str, roles: Sequence[str], prefix: str) -> int:
    """Create the users of ``roles`` (their passwords from ``sec``) and their ACLs, as ``admin``;
    the number of ACLs created."""
    admin = sec.connection(bootstrap, ADMIN)
    users = sec.users()
    add_users(admin, {r: users[r] for r in roles})
    return apply_grants(admin, [g for r in roles for g in role_grants(r, prefix)])


def cluster_up(
    cluster: kafka.KafkaClusterConfig,
    jars: JarSets,
    roles: Sequence[str] = ("publisher", "jobs"),
    prefix: str = "",
    timeout_s: float = 180.0,
) -> str:
    """Start the secured cluster of ``cluster``: every node as :func:`up`'s broker (TLS and
    SCRAM for clients and between brokers, PLAIN for the controller quorum, ACLs), with the
    plain cluster's replication (factor 3, ``min.insync.replicas`` 2); one certificate, one set
    of users and profiles for all nodes under ``cluster.home``. Idempotent as
    ``kafka.cluster_up``; ``kafka.cluster_down(cluster)`` stops it.

    Example: ``siftstream infra up --secure --brokers 3`` (HOME/kafka-secure-cluster)."""
    sec = SecureHome(cluster.home)
    sec.ensure(roles, cluster.java)
    admin_client = sec.connection(cluster.bootstrap, ADMIN).confluent()
    admin_client.pop("bootstrap.servers")
    scram = f"{MECHANISM}=[name={ADMIN},password={sec.password(ADMIN)}]"
    lines = kafka.cluster_up(
        cluster,
        jars,
        timeout_s,
        properties=lambda c, node: secure_properties(node, sec, kafka._node_properties(c, node)),
        format_args=("--add-scram", scram),
        client=admin_client,
    )
    count = _add_roles(sec, cluster.bootstrap, roles, prefix)
    return f"{lines}\nsecured: users {', '.join(roles)} with {count} ACLs; profiles in {cluster.home / 'profiles'}"


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """``python -m infra.security up|down|grant|gateway``: the secured local broker (docs/guide/security.md)."""
    parser = argparse.ArgumentParser(prog="python -m infra.security", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=("up", "down", "grant", "gateway"))
    parser.add_argument("--home", type=Path, default=Path(".siftstream/kafka-secure"))
    parser.add_argument("--port", type=int, default=9192)
    parser.add_argument("--controller-port", type=int, default=9193)
    parser.add_argument("--topic-prefix", default="")
    parser.add_argument("--role", action="append", default=[], help="grant: a role (subscriber-<id> too)")
    parser.add_argument("--channel", type=int, action="append", default=[], help="grant: a subscriber's channel")
    parser.add_argument(
        "--follow", action="store_true", help="gateway: keep forwarding, and granting channels, until Ctrl-C"
    )
    parser.add_argument(
        "--revoke-grace-s",
        type=float,
        default=DEFAULT_REVOKE_GRACE_S,
        help="gateway --follow: seconds after a move until the old channel is taken away even from a client that "
        "did not pass its marker (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    cfg = kafka.BrokerConfig(home=args.home.resolve(), port=args.port, controller_port=args.controller_port)
    if args.action == "down":
        print(kafka.down(cfg))
    elif args.action == "up":
        from infra.jars import ensure_jars

        print(up(cfg, ensure_jars(), prefix=args.topic_prefix))
    elif args.action == "gateway":
        sec = SecureHome(cfg.home)
        jobs = sec.connection(cfg.bootstrap, "jobs")
        if args.follow:  # the gateway and the channel grants until Ctrl-C or SIGTERM (exit 130)
            admin = sec.connection(cfg.bootstrap, ADMIN)
            service = AccessService(jobs, admin, args.topic_prefix, revoke_grace_s=args.revoke_grace_s)
            signal.signal(signal.SIGTERM, _interrupt)  # a service manager's stop ends it as Ctrl-C does
            service.start()
            try:
                while True:
                    time.sleep(1.0)
            except KeyboardInterrupt:  # every record handled was committed
                service.stop()
                print(f"access service: {service.status()}")
                return 130
        forwarded, rejected = forward_subscriptions(jobs, args.topic_prefix)
        print(f"subscription gateway: {forwarded} forwarded, {rejected} dead-lettered (not the owner's or invalid)")
    else:
        sec = SecureHome(cfg.home)
        sec.ensure(args.role, cfg.java)
        admin = sec.connection(cfg.bootstrap, ADMIN)
        add_users(admin, {r: sec.password(r) for r in args.role})
        count = 0
        for role in args.role:
            if role.startswith("subscriber-"):
                count += grant_subscriber(admin, role, args.topic_prefix, args.channel)
            else:
                count += apply_grants(admin, role_grants(role, args.topic_prefix, args.channel))
        print(f"{count} ACLs for {', '.join(args.role)}; profiles in {cfg.home / 'profiles'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
