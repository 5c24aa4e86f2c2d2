"""The secured broker (infra/security.py): TLS + SASL/SCRAM-SHA-512 on loopback, ACLs per role.

One broker for the module, started here on free ports with certificates made here (the JDK's
keytool); every client reaches it through a role's ``--kafka-config`` profile, read back from the
file as the commands do. What is refused is checked by the error Kafka returns, and every refusal
has a twin that is allowed, so that a broken setup (nothing works) fails the test too.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from infra import kafka, security
from infra.connection import KafkaConnection
from infra.topics import ensure_topics
from producers.kafka_writer import KafkaWriter
from producers.produce import ProduceConfig, produce_events
from routing.channels.assignment import LOBBY
from schemas.codec import codec_for
from schemas.topics import (
    BROKER_TELEMETRY_TOPIC,
    CHANNELS_TOPIC,
    COMPOSITES_TOPIC,
    DEADLETTER_TOPIC,
    EVENTS_TOPIC,
    MATCHES_TOPIC,
    QOS_TOPIC,
    RECEIPTS_TOPIC,
    ROUTES_TOPIC,
    SUBSCRIPTIONS_TOPIC,
    TOPOLOGY_TOPIC,
    channel_spec,
    channel_topic,
)
from streaming.client import Publisher, Subscriber, subscription_record
from streaming.matching_job import MatchingConfig
from streaming.matching_job import run as run_matching
from streaming.readers import read_topic
from streaming.validation_job import ValidationConfig, read_stats, run

pytestmark = pytest.mark.kafka

PREFIX = f"s{uuid.uuid4().hex[:8]}."
ALICE, BOB = security.subscriber_principal("alice"), security.subscriber_principal("bob")
CAROL = security.subscriber_principal("carol")
ROLES = ("publisher", "jobs", ALICE, BOB)
CHANNELS = {ALICE: 0, BOB: 1}


@pytest.fixture(scope="module")
def secured(jars, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[kafka.BrokerConfig, security.SecureHome]]:  # type: ignore[no-untyped-def]
    port, controller_port = kafka.free_ports(2)
    cfg = kafka.BrokerConfig(home=tmp_path_factory.mktemp("kafka-secure"), port=port, controller_port=controller_port)
    print(security.up(cfg, jars, roles=("publisher", "jobs"), prefix=PREFIX))
    try:
        sec = security.SecureHome(cfg.home)
        sec.ensure(ROLES)
        admin = sec.connection(cfg.bootstrap, security.ADMIN)
        security.add_users(admin, {r: sec.password(r) for r in (ALICE, BOB)})
        for role, channel in CHANNELS.items():
            security.grant_subscriber(admin, role, PREFIX, [channel])
        ensure_topics(admin, PREFIX)
        ensure_topics(admin, PREFIX, specs=tuple(channel_spec(c) for c in CHANNELS.values()))
        yield cfg, sec
    finally:
        print(kafka.down(cfg))


def _conn(secured: tuple[kafka.BrokerConfig, security.SecureHome], role: str) -> KafkaConnection:
    cfg, sec = secured
    return sec.connection(cfg.bootstrap, role)


def _produce(conn: KafkaConnection, topic: str, key: str = "k", value: bytes = b"v") -> KafkaError | None:
    """Write one record and return the delivery error (None when acknowledged)."""
    errors: list[KafkaError | None] = []
    producer = Producer(conn.confluent(**{"message.timeout.ms": 15000, "acks": "all"}))
    producer.produce(topic, value, key, on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(20)
    assert len(errors) == 1, "no delivery report within 20 s"
    return errors[0]


def _read(conn: KafkaConnection, topic: str, group: str, want: int = 1) -> tuple[list[bytes], KafkaError | None]:
    """The values read from ``topic`` partition 0 from the start, or the first error (a record's,
    the client's, or the topic's in the metadata)."""
    errors: list[KafkaError] = []
    consumer = Consumer(conn.confluent(**{"group.id": group, "enable.auto.commit": False, "error_cb": errors.append}))
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    if meta.error is not None:
        consumer.close()
        return [], meta.error
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        for _ in range(15):
            msg = consumer.poll(1.0)
            if errors:
                return values, errors[0]
            if msg is None:
                continue
            if msg.error() is not None:
                return values, msg.error()
            values.append(msg.value())
            if len(values) >= want:
                break
    finally:
        consumer.close()
    return values, None


def _refused(err: KafkaError | None) -> bool:
    return err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_publisher_writes_events_only(secured) -> None:  # type: ignore[no-untyped-def]
    publisher = _conn(secured, "publisher")
    assert _produce(publisher, PREFIX + EVENTS_TOPIC) is None
    assert _refused(_produce(publisher, PREFIX + MATCHES_TOPIC))
    assert _refused(_produce(publisher, PREFIX + SUBSCRIPTIONS_TOPIC))
    _, err = _read(publisher, PREFIX + EVENTS_TOPIC, "publisher-reads")
    assert err is not None  # a publisher reads nothing, not even its own events


def test_subscriber_reads_its_channel_only_and_writes_receipts_and_subscriptions(secured) -> None:  # type: ignore[no-untyped-def]
    jobs, alice = _conn(secured, "jobs"), _conn(secured, ALICE)
    for role, channel in CHANNELS.items():  # the delivery stage (the jobs' role) fills both channels
        assert _produce(jobs, channel_topic(channel, PREFIX), value=role.encode()) is None

    values, err = _read(alice, channel_topic(0, PREFIX), "siftstream-client-alice-1")
    assert err is None and values == [ALICE.encode()]
    values, err = _read(alice, channel_topic(1, PREFIX), "siftstream-client-alice-1")
    assert values == [] and _refused(err), err  # bob's channel
    _, err = _read(alice, channel_topic(0, PREFIX), "siftstream-client-bob-1")
    assert err is not None and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED  # bob's group

    assert _produce(alice, PREFIX + RECEIPTS_TOPIC, key="alice") is None
    own = codec_for("Subscription").encode(subscription_record("alice-s0", "alice", "price < 5"))
    assert _produce(alice, security.inbox_topic("alice", PREFIX), key="alice-s0", value=own) is None
    for topic in (EVENTS_TOPIC, MATCHES_TOPIC, channel_topic(0, ""), SUBSCRIPTIONS_TOPIC, security.inbox_topic("bob")):
        assert _refused(_produce(alice, PREFIX + topic)), topic


def test_only_a_subscribers_own_subscriptions_reach_the_table(secured) -> None:  # type: ignore[no-untyped-def]
    """Kafka cannot tell which keys a principal writes, so subscribers write their own inbox topic
    and the gateway (as jobs) forwards to the table only the subscriptions they own."""
    alice, jobs = _conn(secured, ALICE), _conn(secured, "jobs")
    codec, inbox = codec_for("Subscription"), security.inbox_topic("alice", PREFIX)
    writes = [
        ("alice-a1", subscription_record("alice-a1", "alice", "price < 10")),  # hers: forwarded
        ("bob-b1", subscription_record("bob-b1", "bob", "price < 1")),  # bob's id: refused
        ("alice-a2", subscription_record("alice-a2", "bob", "price < 2")),  # names bob: refused
        ("bob-b1", None),  # deleting bob's: refused
        ("alice-a3", None),  # deleting her own: forwarded
    ]
    for key, record in writes:
        assert _produce(alice, inbox, key=key, value=None if record is None else codec.encode(record)) is None
    # the client library: refused the table, it subscribes (and unsubscribes) through its inbox
    table_refused = pytest.raises(RuntimeError, match="Topic authorization failed")
    with table_refused, Subscriber(conn=alice, topic_prefix=PREFIX, subscriber_id="alice") as client:
        client.subscribe("price < 3")
    with Subscriber(conn=alice, topic_prefix=PREFIX, subscriber_id="alice", inbox=True) as client:
        sid = client.subscribe("price < 4").subscription_id.encode()
    forwarded, rejected = security.forward_subscriptions(jobs, PREFIX, idle_s=3.0)
    assert forwarded >= 4 and rejected == 3  # (and the other test's own subscription alice-s0, if it ran)
    table = read_topic(jobs, PREFIX + SUBSCRIPTIONS_TOPIC, "Subscription")
    ours = sorted((r.key, r.value is None) for r in table if r.key != b"alice-s0")
    assert ours == sorted([(b"alice-a1", False), (b"alice-a3", True), (sid, False), (sid, True)])
    letters = [r.value for r in read_topic(jobs, PREFIX + DEADLETTER_TOPIC, "DeadLetter")]
    refused = sorted(d["key"] for d in letters if d["source_topic"] == inbox)
    assert refused == [b"alice-a2", b"bob-b1", b"bob-b1"]
    assert {d["error_code"] for d in letters if d["source_topic"] == inbox} == {"not_owner"}


def _connect_error(conf: dict[str, Any]) -> list[KafkaError]:
    """The errors a client with ``conf`` reports while trying to list the topics."""
    errors: list[KafkaError] = []
    client = Producer({**conf, "error_cb": errors.append, "log_level": 3})  # not the refusals at info level
    with pytest.raises(KafkaException):
        client.list_topics(timeout=8)
    for _ in range(5):  # error callbacks are served by poll
        client.poll(0.5)
    return errors


def test_wrong_password_and_plaintext_are_refused(secured) -> None:  # type: ignore[no-untyped-def]
    cfg, _ = secured
    good = _conn(secured, "publisher").confluent()
    assert _produce(_conn(secured, "publisher"), PREFIX + EVENTS_TOPIC) is None
    errors = _connect_error({**good, "sasl.password": "not-the-password"})
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    errors = _connect_error({"bootstrap.servers": cfg.bootstrap, "security.protocol": "PLAINTEXT"})
    assert errors and all(e.code() != KafkaError._AUTHENTICATION for e in errors)  # no handshake at all


def test_validation_job_runs_with_the_jobs_profile(spark, secured, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A real Spark job: its Kafka source and sink get the profile's ``java.`` keys (SCRAM login,
    PEM truststore); events come from the publisher's profile, dead letters are read back as jobs."""
    publisher, jobs = _conn(secured, "publisher"), _conn(secured, "jobs")
    events = PREFIX + EVENTS_TOPIC
    produced = produce_events(publisher, ProduceConfig(events, 400, bad_fraction=0.1, seed=3, progress=False))
    cfg = ValidationConfig(
        conn=jobs,
        checkpoint=tmp_path / "ckpt",
        topic_prefix=PREFIX,
        available_now=True,
        stats_file=tmp_path / "stats.jsonl",
    )
    run(spark, cfg, quiet=True)
    letters = [r.value for r in read_topic(jobs, PREFIX + DEADLETTER_TOPIC, "DeadLetter")]
    # the other tests' one-record probes (value b"v") are dead letters too
    events_letters = Counter(d["error_code"] for d in letters if d["source_topic"] == events and d["value"] != b"v")
    assert events_letters == produced.expected_errors
    assert read_stats(cfg.stats_file)[f"ok|{events}"] == produced.good


def test_a_secured_subscriber_receives_its_events_through_the_matching_job(spark, secured, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """End to end with every client on its own profile: the publisher publishes, the matching job
    (jobs: Spark's source and sink, the delivery stage's Python clients) matches and delivers, and
    a subscriber's client (subscribed through its inbox and the gateway) reads its channel."""
    publisher, jobs, alice = _conn(secured, "publisher"), _conn(secured, "jobs"), _conn(secured, ALICE)
    with Subscriber(conn=alice, topic_prefix=PREFIX, subscriber_id="alice", inbox=True) as client:
        sub = client.subscribe("secured_tag = 'alice'")
        assert security.forward_subscriptions(jobs, PREFIX, idle_s=3.0)[0] >= 1
        with Publisher(conn=publisher, topic_prefix=PREFIX, publisher_id="p-secured") as pub:
            wanted = [pub.publish({"secured_tag": "alice", "n": i}) for i in range(10)]
            for i in range(10):
                pub.publish({"secured_tag": "bob", "n": i})
        history = run_matching(
            spark, MatchingConfig(conn=jobs, checkpoint=tmp_path / "ckpt", topic_prefix=PREFIX, available_now=True)
        )
        assert sum(b.events for b in history) >= 20
        got = [e["event_id"] for e in sub.events(max_events=len(wanted), timeout_s=60)]
    assert sorted(got) == sorted(wanted)
    matched = {r.value["event_id"] for r in read_topic(jobs, PREFIX + MATCHES_TOPIC, "Match")}
    assert set(wanted) <= matched


def _wait(condition: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        time.sleep(0.2)
    return value


def _planned(
    version: int,
    k: int,
    members: dict[int, list[str]],
    subscribers: dict[int, list[str]],
    handover: dict[int, int] | None = None,
) -> bytes:
    """A planned ``ChannelAssignment`` (the channels job's record) placing ``members`` per channel;
    with ``handover`` (channel -> marker offset), the version's installed record instead (the
    delivery stage's: no members)."""
    record = {
        "version": version,
        "stage": "planned" if handover is None else "installed",
        "created_at": int(time.time() * 1000),
        "k": k,
        "reason": "reclustered",
        "detail": "planned by the test",
        "method": "test",
        "sample_events": 0,
        "waste_ratio": None,
        "flooding_waste_ratio": None,
        "previous_waste_ratio": None,
        "channels": [
            {
                "channel": c,
                "subscription_ids": sorted(members.get(c, [])),
                "subscriber_ids": sorted(subscribers.get(c, [])),
                "deliveries": 0,
                "waste_ratio": None,
            }
            for c in range(k)
            if handover is None
        ],
        "handover": [{"channel": c, "offset": o} for c, o in sorted((handover or {}).items())],
    }
    return codec_for("ChannelAssignment").encode(record)


def test_a_subscriber_moved_to_another_channel_is_granted_it_and_keeps_receiving(
    spark, secured, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """serve's access service (the gateway and the channel grants, ``serve --gateway``) runs.
    carol, given only the lobby when her user was made, subscribes through her inbox and gets her
    events in the lobby; then an assignment (the channels job's record, written as jobs) moves her
    subscription to channel 2 and the matching job's delivery stage installs it: she goes on
    receiving there with no grant made by hand, and still cannot read bob's channel 1."""
    _, sec = secured
    sec.ensure((CAROL,))
    admin, jobs = _conn(secured, security.ADMIN), _conn(secured, "jobs")
    security.add_users(admin, {CAROL: sec.password(CAROL)})
    security.grant_subscriber(admin, CAROL, PREFIX, [LOBBY])  # as the operator makes a subscriber
    publisher, carol = _conn(secured, "publisher"), _conn(secured, CAROL)
    service = security.AccessService(jobs, admin, PREFIX)  # (the default grace: only the marker frees the lobby)
    service.start()
    matching = MatchingConfig(conn=jobs, checkpoint=tmp_path / "ckpt", topic_prefix=PREFIX, available_now=True)
    try:
        with Subscriber(conn=carol, topic_prefix=PREFIX, subscriber_id="carol", inbox=True) as client:
            sub = client.subscribe("carol_tag = 'c'")
            _wait(lambda: service.counts.forwarded >= 1, 60, "the gateway to forward carol's subscription")
            with Publisher(conn=publisher, topic_prefix=PREFIX, publisher_id="p-carol") as pub:
                lobby = [pub.publish({"carol_tag": "c", "n": i}) for i in range(5)]
            run_matching(spark, matching)
            got = [e["event_id"] for e in sub.events(max_events=len(lobby), timeout_s=60)]
            assert sorted(got) == sorted(lobby) and sub.channel == LOBBY

            # the channels job moves her subscription to channel 2 (k = 3); the delivery stage
            # installs that version in the matching job's next batch
            writer = KafkaWriter(jobs)
            writer.send(PREFIX + CHANNELS_TOPIC, "99", _planned(99, 3, {2: [sub.subscription_id]}, {2: ["carol"]}))
            assert not writer.flush(30).failed
            with Publisher(conn=publisher, topic_prefix=PREFIX, publisher_id="p-carol") as pub:
                moved = [pub.publish({"carol_tag": "c", "n": i}) for i in range(5, 10)]
            run_matching(spark, matching)
            got = [e["event_id"] for e in sub.events(max_events=len(moved), timeout_s=90)]
            assert sorted(got) == sorted(moved)
            assert (sub.channel, sub.version) == (2, 99)
            # she passed the lobby's marker (her client committed the offset after it) while still
            # subscribed: the service takes the lobby away from her, and from no one else
            _wait(lambda: service.counts.revoked >= 1, 60, "the channel grants to revoke carol's lobby")
            values, err = _read(carol, channel_topic(LOBBY, PREFIX), "siftstream-client-carol-r")
            assert values == [] and _refused(err), err
            values, err = _read(_conn(secured, BOB), channel_topic(1, PREFIX), "siftstream-client-bob-r")
            assert err is None and values  # bob's channel: untouched
            values, err = _read(_conn(secured, ALICE), channel_topic(LOBBY, PREFIX), "siftstream-client-alice-r")
            assert err is None and values  # alice's (the lobby, hers since the start): untouched
        status = service.status()
    finally:
        assert service.stop()
    print(f"\naccess service: {status}")
    assert status["up"] and status["errors"] == 0, status
    assert status["granted"] >= 2  # carol's channel 2, and every subscriber's lobby
    assert status["revoked"] == 1  # carol's lobby
    values, err = _read(carol, channel_topic(2, PREFIX), "siftstream-client-carol-r")
    assert err is None and values  # granted by the service
    values, err = _read(carol, channel_topic(1, PREFIX), "siftstream-client-carol-r")
    assert values == [] and _refused(err), err  # bob's channel: not hers


def _offsets(conn: KafkaConnection, records: list[tuple[str, str, bytes]]) -> list[int]:
    """Write ``(topic, key, value)`` records, each acknowledged; return their offsets."""
    got: dict[int, int] = {}
    producer = Producer(conn.confluent(**{"acks": "all"}))
    for i, (topic, key, value) in enumerate(records):
        producer.produce(
            topic, value, key, on_delivery=lambda err, msg, i=i: got.update({i: -1 if err else msg.offset()})
        )
    producer.flush(30)
    assert len(got) == len(records) and min(got.values(), default=0) >= 0, got
    return [got[i] for i in range(len(records))]


def test_a_late_grant_holds_a_moved_client_at_its_new_channel_and_the_old_one_is_revoked(secured) -> None:  # type: ignore[no-untyped-def]
    """The delivery stage's records written by hand as jobs, on a deployment of its own: dave's
    client, in the lobby, reaches the marker of a version that moves it to channel 2 before anyone
    granted him channel 2. It commits the offset after the lobby's marker, then waits (reading
    nothing, no error); once the grant comes it goes on with every event of channel 2, each once.
    Then the channel grants (with a grace long enough not to matter) take his lobby away: he is
    subscribed and past the marker."""
    _, sec = secured
    dave = security.subscriber_principal("dave")
    sec.ensure((dave,))
    admin, jobs = _conn(secured, security.ADMIN), _conn(secured, "jobs")
    prefix = f"d{uuid.uuid4().hex[:8]}."
    ensure_topics(admin, prefix)
    ensure_topics(admin, prefix, specs=tuple(channel_spec(c) for c in range(3)))
    security.apply_grants(admin, security.role_grants("jobs", prefix))
    security.add_users(admin, {dave: sec.password(dave)})
    security.grant_subscriber(admin, dave, prefix, [LOBBY])
    event_codec, marker_codec = codec_for("Event"), codec_for("ChannelMarker")

    def events(channel: int, first: int, count: int) -> list[str]:
        records = [
            {"event_id": f"ev{i}", "publisher_id": "p", "published_at": int(time.time() * 1000),
             "lifetime_ms": 60_000, "attributes": {"dave_tag": "d", "n": i}}
            for i in range(first, first + count)
        ]  # fmt: skip
        _offsets(jobs, [(channel_topic(channel, prefix), r["event_id"], event_codec.encode(r)) for r in records])
        return [r["event_id"] for r in records]

    stop = threading.Event()
    counts = security.AccessCounts()
    with Subscriber(conn=_conn(secured, dave), topic_prefix=prefix, subscriber_id="dave", inbox=True) as client:
        sub = client.subscribe("dave_tag = 'd'")
        assert security.forward_subscriptions(jobs, prefix, idle_s=3.0)[0] == 1
        lobby = events(LOBBY, 0, 5)
        assert sorted(e["event_id"] for e in sub.events(max_events=5, timeout_s=60)) == sorted(lobby)

        # version 1 moves dave to channel 2: the planned record, the markers, the installed record
        sid = sub.subscription_id
        _offsets(jobs, [(prefix + CHANNELS_TOPIC, "1", _planned(1, 3, {2: [sid]}, {2: ["dave"]}))])
        markers = _offsets(
            jobs,
            [
                (
                    channel_topic(c, prefix),
                    "marker/1",
                    marker_codec.encode({"channel": c, "version": 1, "installed_at": 0}),
                )
                for c in range(3)
            ],
        )
        handover = dict(enumerate(markers))
        _offsets(jobs, [(prefix + CHANNELS_TOPIC, "1", _planned(1, 3, {}, {}, handover=handover))])
        moved = events(2, 5, 5)
        assert list(sub.events(max_events=1, timeout_s=15)) == []  # not granted channel 2 yet: waits
        assert (sub.channel, sub.version) == (2, 1)
        passed = security.committed_positions(admin, [(sid, LOBBY)], prefix)  # (channel 2's is refused yet)
        assert passed == {(sid, LOBBY): handover[LOBBY] + 1}, (passed, handover)

        security.apply_grants(
            admin,
            [security.Grant(f"User:{dave}", op, "topic", channel_topic(2, prefix)) for op in ("READ", "DESCRIBE")],
        )
        got = [e["event_id"] for e in sub.events(max_events=len(moved), timeout_s=60)]
        assert got == moved and sub.counters.duplicates == 0  # in order, each once
        more = events(2, 10, 3)
        assert [e["event_id"] for e in sub.events(max_events=3, timeout_s=60)] == more
        _wait(
            lambda: security.committed_positions(admin, [(sid, 2)], prefix).get((sid, 2), 0) > handover[2],
            30,
            "dave's client to commit its position in channel 2",
        )

        def follow() -> None:  # as the access service runs it: a failure is counted
            try:
                security.follow_channel_grants(admin, prefix, stop, counts, check_s=0.5)
            except Exception as exc:
                counts.failed(repr(exc))

        grants = threading.Thread(target=follow)
        grants.start()
        try:
            _wait(lambda: counts.revoked >= 1 or counts.errors, 60, "the channel grants to revoke dave's lobby")
        finally:
            stop.set()
            grants.join(10)
        assert counts.as_dict()["revoked"] == 1 and counts.errors == 0, counts
        values, err = _read(_conn(secured, dave), channel_topic(LOBBY, prefix), f"siftstream-client-{sid}")
        assert values == [] and _refused(err), err
        values, err = _read(_conn(secured, dave), channel_topic(2, prefix), f"siftstream-client-{sid}")
        assert err is None and values


def test_the_qos_routes_composites_and_channels_jobs_run_with_the_jobs_profile(  # type: ignore[no-untyped-def]
    spark, secured, tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Each job on a deployment of its own (a topic prefix with the jobs ACLs of ``role_grants``),
    inputs written as admin (no role writes topology or telemetry), run available-now as ``jobs``:
    each writes its output, and neither Spark's Kafka clients nor the Python ones log an
    authorisation failure."""
    from routing.monitors.channels import ChannelMonitorConfig
    from streaming import channels_job, composites_job, qos_job, routes_job
    from streaming.client import subscription_record as sub_record
    from tests.integration import test_channels_job as ch
    from tests.integration import test_routes_job as rt

    admin, jobs = _conn(secured, security.ADMIN), _conn(secured, "jobs")
    writer = KafkaWriter(admin)
    epoch = 1_760_000_000_000

    def deployment() -> str:
        prefix = f"j{uuid.uuid4().hex[:8]}."
        ensure_topics(admin, prefix)
        security.apply_grants(admin, security.role_grants("jobs", prefix))
        return prefix

    def send(prefix: str, topic: str, schema: str, records: list[dict[str, Any]], key: str) -> None:
        codec = codec_for(schema)
        for r in records:
            writer.send(prefix + topic, str(r[key]), codec.encode(r))
        assert not writer.flush(60).failed

    caplog.set_level(logging.INFO)
    outputs: dict[str, int] = {}
    common = {"conn": jobs, "available_now": True}

    # QoS: a subscription, events, receipts, and a broker sample past every deadline
    p = deployment()
    send(
        p,
        SUBSCRIPTIONS_TOPIC,
        "Subscription",
        [sub_record("qa-1", "qa", "price < 50", broker="b1", deadline_ms=1000)],
        "subscription_id",
    )
    events = [
        {"event_id": f"ev{i}", "publisher_id": "p1", "published_at": epoch + 100 * i, "lifetime_ms": 60_000,
         "attributes": {"price": float(i % 100)}}
        for i in range(40)
    ]  # fmt: skip
    send(p, EVENTS_TOPIC, "Event", events, "publisher_id")
    receipts = [
        {"subscriber_id": "qa", "event_id": e["event_id"], "received_at": e["published_at"] + 50} for e in events
    ]
    send(p, RECEIPTS_TOPIC, "Receipt", receipts, "subscriber_id")
    sample = {"broker_id": "b1", "event_id": None, "arrived_at": epoch + 200_000, "wait_ms": 0.0, "service_ms": 1.0,
              "queue_length": 0}  # fmt: skip
    send(p, BROKER_TELEMETRY_TOPIC, "BrokerSample", [sample], "broker_id")
    qos_job.run(spark, qos_job.QosConfig(checkpoint=tmp_path / "qos", topic_prefix=p, **common), quiet=True)
    outputs["qos"] = len(read_topic(jobs, p + QOS_TOPIC, "QosReport"))

    # routes: the overlay, its subscriptions and two minutes of matches
    p = deployment()
    topo = rt.overlay()
    send(p, TOPOLOGY_TOPIC, "TopologyElement", topo.topology_records(), "element_id")
    send(p, SUBSCRIPTIONS_TOPIC, "Subscription", rt.subscriptions(topo), "subscription_id")
    send(p, MATCHES_TOPIC, "Match", rt.matches(0, 120), "event_id")
    routes_job.run(spark, routes_job.RoutesConfig(checkpoint=tmp_path / "routes", topic_prefix=p, **common), quiet=True)
    outputs["routes"] = len(read_topic(jobs, p + ROUTES_TOPIC, "RoutePlan"))

    # composites: a hotel, then a flight within 3 s
    p = deployment()
    topology = [{"element_id": "b1", "kind": "broker"}, {"element_id": "pf", "kind": "publisher", "broker": "b1"}]
    send(p, TOPOLOGY_TOPIC, "TopologyElement", topology, "element_id")
    tree = {"op": "seq", "within_ms": 3000, "children": ["kind = 'hotel'", "kind = 'flight'"]}
    order = {"type": "subscribe", "subscription_id": "order", "subscriber_id": "u-order", "broker": "b1",
             "composite": json.dumps(tree)}  # fmt: skip
    send(p, SUBSCRIPTIONS_TOPIC, "Subscription", [order], "subscription_id")
    trips = [
        {"event_id": f"{kind}{t}", "publisher_id": "pf", "published_at": epoch + t, "lifetime_ms": 60_000,
         "attributes": {"kind": kind}}
        for t in range(0, 20_000, 1000)
        for kind in ("hotel", "flight")
    ]  # fmt: skip
    send(p, EVENTS_TOPIC, "Event", trips, "event_id")
    cfg = composites_job.CompositesConfig(
        checkpoint=tmp_path / "composites", topic_prefix=p, lateness_ms=1000, **common
    )
    composites_job.run(spark, cfg, quiet=True)
    outputs["composites"] = len(read_topic(jobs, p + COMPOSITES_TOPIC, "CompositeDetection"))

    # channels: two groups of four subscriptions with disjoint load
    p = deployment()
    subs = [
        {"type": "subscribe", "subscription_id": s, "subscriber_id": f"user-{s[0]}", "filter": f"g = '{s[0]}'"}
        for s in ch.A + ch.B
    ]
    send(p, SUBSCRIPTIONS_TOPIC, "Subscription", subs, "subscription_id")
    send(p, MATCHES_TOPIC, "Match", ch.matches([ch.A, ch.B], 200, 0, "e"), "event_id")
    monitor = ChannelMonitorConfig(k=2, sample_events=200, min_interval_ms=10_000, method="spectral-ncut")
    channels_job.run(
        spark,
        channels_job.ChannelsConfig(checkpoint=tmp_path / "channels", monitor=monitor, topic_prefix=p, **common),
        quiet=True,
    )
    outputs["channels"] = len(read_topic(jobs, p + CHANNELS_TOPIC, "ChannelAssignment"))

    out, err = capfd.readouterr()
    logged = out + err + caplog.text
    print(f"\noutput records written as jobs: {outputs}")
    assert all(n > 0 for n in outputs.values()), outputs
    for refusal in ("AUTHORIZATION_FAILED", "AuthorizationException", "Authorization failed"):
        assert refusal not in logged, logged[logged.index(refusal) - 500 :][:1500]


def test_serve_runs_the_gateway_with_its_counts_in_the_metrics_and_stops_it(secured, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``siftstream serve --gateway`` (no job, as the jobs profile, the admin profile for the
    grants): a subscription written to an inbox reaches the table, ``/metrics`` and the log count
    it, and SIGTERM stops the service with exit code 0."""
    import signal
    import subprocess
    import urllib.request

    cfg, sec = secured
    jobs, alice = _conn(secured, "jobs"), _conn(secured, ALICE)
    [port] = kafka.free_ports(1)
    log = tmp_path / "serve.log"
    command = [
        *("serve", "--bootstrap-servers", cfg.bootstrap, "--kafka-config", str(sec.profile("jobs"))),
        *("--gateway", str(sec.profile(security.ADMIN)), "--jobs", "none", "--topic-prefix", PREFIX),
        *("--http-port", str(port), "--no-dashboard", "--home", str(tmp_path / "home")),
    ]
    root = Path(__file__).resolve().parents[2]
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(root / ".venv" / "bin" / "siftstream"), *command], stdout=out, stderr=out, cwd=root
        )
    try:

        def forwarded() -> float:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                    text = response.read().decode()
            except OSError:
                return 0.0
            line = 'siftstream_gateway_records_total{outcome="forwarded"} '
            return sum(float(x.removeprefix(line)) for x in text.splitlines() if x.startswith(line))

        _wait(
            lambda: proc.poll() is not None or "gateway and the channel grants started" in log.read_text(), 60, "serve"
        )
        assert proc.poll() is None, log.read_text()[-3000:]
        before = forwarded()
        with Subscriber(conn=alice, topic_prefix=PREFIX, subscriber_id="alice", inbox=True) as client:
            sid = client.subscribe("served = true").subscription_id
            _wait(lambda: forwarded() > before, 90, "the served gateway to forward the subscription")
        table = read_topic(jobs, PREFIX + SUBSCRIPTIONS_TOPIC, "Subscription")
        assert sid.encode() in {r.key for r in table}
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
        # the moved-subscriber test's revocation is not this service's (it took carol's lobby away before)
        assert "siftstream_gateway_channel_revocations_total 0.0" in text.splitlines()
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
    text = log.read_text()
    print(f"\nserve --gateway exit code {rc}; gateway lines: {[x for x in text.splitlines() if 'gateway:' in x][-2:]}")
    assert rc == 0, text[-3000:]
    assert "subscription records forwarded" in text and "stopped in" in text
