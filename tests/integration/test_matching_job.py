"""The matching job end to end: real broker, Spark's Kafka source and sink, restarts and replays.

Expectations are built independently of the job: the subscription model is a dict updated by the
rules of docs/reference/filters.md (and routing.matching.table's module docstring) written out below; events are read
back raw from the topic and judged by ``schemas.rules.classify`` (the Python twin of the JVM
decoder); matches come from ``BruteForceIndex`` over the model.
"""

from __future__ import annotations

import dataclasses
import random
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from infra.connection import KafkaConnection, arrived
from producers.events import EventGenerator
from producers.faults import FAULTS, corrupt
from producers.kafka_writer import KafkaWriter
from routing.matching.index import BruteForceIndex
from routing.matching.language import FilterError, parse_filter
from schemas.codec import codec_for, decode
from schemas.rules import classify
from streaming.head_start import HeadStart, fresh
from streaming.matching_job import MatchingConfig, run
from streaming.readers import partition_ends, read_topic, watermarks
from streaming.subscription_store import TableStore

pytestmark = pytest.mark.kafka

SUB = codec_for("Subscription")
Op = tuple[str, bytes | None]  # (key, raw value); None is a tombstone


def subscribe(sid: str, filt: str | None = None, **extra: Any) -> Op:
    record = {"type": "subscribe", "subscription_id": sid, "subscriber_id": "u1", "filter": filt, **extra}
    return sid, SUB.encode(record)


def unsubscribe(sid: str) -> Op:
    return sid, SUB.encode({"type": "unsubscribe", "subscription_id": sid})


def apply_ops(model: dict[str, str], ops: list[Op]) -> Counter[str]:
    """The model's answer to a list of subscription records; returns the expected rejections."""
    rejected: Counter[str] = Counter()
    for key, raw in ops:
        if raw is None:
            model.pop(key, None)
            continue
        code, _ = classify(raw, "Subscription", table=True)
        if code is not None:
            rejected[code] += 1
            continue
        _, rec = decode(raw, "Subscription")
        if rec["type"] == "unsubscribe" or rec["filter"] is None:  # composites leave the atomic set
            model.pop(rec["subscription_id"], None)
            continue
        try:
            parse_filter(rec["filter"])
        except FilterError:
            rejected["invalid_filter"] += 1
            continue
        model[rec["subscription_id"]] = rec["filter"]
    return rejected


def base_subscriptions() -> list[Op]:
    """Atomic filters over the built-in generator's attributes (symbol, price, volume, exchange,
    sector, region, urgent, venue_ts), some of them invalid, one composite, then changes."""
    rng = random.Random(1)
    ops = [subscribe("s0", "symbol = 'IBM'"), subscribe("s1", "price < 120 and urgent = true")]
    ops += [subscribe("s2", "sector in ('tech', 'retail') and volume >= 2000"), subscribe("s3", "region exists")]
    ops += [subscribe(f"r{i}", f"price between {rng.randint(0, 300)} and {rng.randint(300, 600)}") for i in range(20)]
    ops += [subscribe(f"x{i}", f"exchange = '{x}' and sector != 'energy'") for i, x in enumerate(("NYSE", "LSE"))]
    ops += [
        subscribe("bad1", "price <"),  # invalid filter
        subscribe("bad2", "urgent < true"),  # booleans take only = and !=
        subscribe("bad3", "price < 1", subscriber_id=None),  # invalid value: subscriber_id is required
        ("bad4", b"\x7bnot avro"),  # bad framing
        subscribe("c1", composite='{"op": "or", "children": ["price < 1", "price > 999"]}'),  # skipped
        subscribe("s0", "symbol = 'IBM' or"),  # an invalid update keeps the old s0
        unsubscribe("r1"),
        ("r2", None),  # tombstone
        subscribe("r3", "price > 550"),  # replaces
        unsubscribe("never-there"),
    ]
    return ops


def produce(conn: KafkaConnection, prefix: str, subs: list[Op], phase: str, events: int, seed: int) -> Counter[str]:
    """Write the subscription records, then ``events`` events (every 25th one bad, cycling through
    the fault kinds) with ids unique to ``phase``; returns the expected event dead letters."""
    writer = KafkaWriter(conn)
    for key, raw in subs:
        writer.send(prefix + "siftstream.subscriptions.v1", key, raw)
    assert writer.flush().failed == 0  # subscriptions first: they are in the same batch or earlier
    rng, codec, kinds = random.Random(seed), codec_for("Event"), sorted(FAULTS)
    bad: Counter[str] = Counter()
    for i, event in enumerate(EventGenerator(publishers=4, seed=seed).batch(events, 1_700_000_000_000)):
        event["event_id"] = f"{phase}-{event['event_id']}"
        if i % 25 == 24:
            raw, code = corrupt(kinds[(i // 25) % len(kinds)], rng, event)
            bad[code] += 1
        else:
            raw = codec.encode(event)
        writer.send(prefix + "siftstream.events.v1", event["publisher_id"], raw)
    report = writer.flush()
    assert report.failed == 0, report.errors
    return bad


def raw_events(conn: KafkaConnection, topic: str) -> dict[str, dict[str, Any]]:
    """Every valid event now in ``topic`` (judged by the Python twin), by event id."""
    consumer = Consumer(conn.confluent(**{"group.id": "oracle", "enable.auto.commit": False}))
    out: dict[str, dict[str, Any]] = {}
    try:
        for p in (0, 1):
            low, high = watermarks(consumer, topic, p)
            consumer.assign([TopicPartition(topic, p, low)])
            seen = 0
            while seen < high - low:
                for msg in arrived(consumer, 5000, 2.0):
                    seen += 1
                    if classify(msg.value(), "Event")[0] is None:
                        _, rec = decode(msg.value(), "Event")
                        out[rec["event_id"]] = rec
    finally:
        consumer.close()
    return out


def expected_ids(model: dict[str, str], events: list[dict[str, Any]]) -> dict[str, list[str]]:
    oracle = BruteForceIndex()
    for sid, filt in model.items():
        oracle.add(sid, filt)
    ids = oracle.match([e["attributes"] for e in events]).all_ids()
    return {e["event_id"]: i for e, i in zip(events, ids, strict=True)}


def matches_by_event(conn: KafkaConnection, prefix: str) -> dict[str, list[dict[str, Any]]]:
    """Every Match record by event id (a list: a replay may have written one twice)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in read_topic(conn, prefix + "siftstream.matches.v1", "Match"):
        assert r.value is not None and r.key == r.value["event_id"].encode()
        out.setdefault(r.value["event_id"], []).append(r.value)
    return out


def dead_letters(conn: KafkaConnection, prefix: str) -> list[dict[str, Any]]:
    return [r.value for r in read_topic(conn, prefix + "siftstream.deadletter.v1", "DeadLetter")]  # type: ignore[misc]


def check_phase(
    matches: dict[str, list[dict[str, Any]]], events: dict[str, dict[str, Any]], model: dict[str, str], phase: str
) -> int:
    """Every valid event of ``phase`` has Match records, all identical, naming the model's answer."""
    mine = [e for eid, e in events.items() if eid.startswith(phase + "-")]
    want = expected_ids(model, mine)
    for e in mine:
        records = matches.get(e["event_id"])
        assert records, f"event {e['event_id']} was lost"
        assert all(r == records[0] for r in records), f"differing duplicates for {e['event_id']}"
        assert records[0]["subscription_ids"] == want[e["event_id"]], e["event_id"]
        assert (records[0]["publisher_id"], records[0]["published_at"]) == (e["publisher_id"], e["published_at"])
    return sum(len(v) for v in want.values())


def _cfg(conn: KafkaConnection, prefix: str, tmp_path: Path) -> MatchingConfig:
    # pack_from=1: the table packs its texts after every batch, so that the later batches ship,
    # save and compare packed texts (the default waits for 4,096 new ones)
    return MatchingConfig(conn=conn, checkpoint=tmp_path / "ckpt", topic_prefix=prefix, available_now=True, pack_from=1)


def test_matches_and_dead_letters_equal_the_oracle(
    spark, kafka_conn: KafkaConnection, topic_prefix: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    subs = base_subscriptions()
    bad_events = produce(kafka_conn, topic_prefix, subs, "a", 300, seed=1)
    history = run(spark, _cfg(kafka_conn, topic_prefix, tmp_path), quiet=True)

    model: dict[str, str] = {}
    bad_subs = apply_ops(model, subs)
    events = raw_events(kafka_conn, topic_prefix + "siftstream.events.v1")
    matches = matches_by_event(kafka_conn, topic_prefix)
    assert len(matches) == len(events) and all(len(v) == 1 for v in matches.values())
    total = check_phase(matches, events, model, "a")
    assert total > len(events)  # the set is not trivial: events match several subscriptions

    letters = dead_letters(kafka_conn, topic_prefix)
    by_topic: dict[str, Counter[str]] = {}
    for d in letters:
        by_topic.setdefault(d["source_topic"].split(".", 1)[1], Counter())[d["error_code"]] += 1
    assert by_topic == {"siftstream.events.v1": bad_events, "siftstream.subscriptions.v1": bad_subs}
    assert len({d["dead_letter_id"] for d in letters}) == len(letters)
    bad_filter = [d for d in letters if d["error_code"] == "invalid_filter" and d["key"] == b"bad1"]
    assert "at position 7" in bad_filter[0]["reason"] and "expected a literal" in bad_filter[0]["reason"]

    assert sum(b.events for b in history) == len(events)
    assert sum(b.rejected_subscriptions for b in history) == sum(bad_subs.values())
    assert sum(b.skipped_composites for b in history) == 1
    assert history[-1].subscriptions == len(model)


def test_a_fresh_start_takes_its_head_start_and_reads_the_records_after_its_cut(
    spark, kafka_conn: KafkaConnection, topic_prefix: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    topic = topic_prefix + "siftstream.subscriptions.v1"
    first = base_subscriptions()
    produce(kafka_conn, topic_prefix, first, "a", 100, seed=4)
    cut = partition_ends(kafka_conn, [topic])[topic]
    later = [unsubscribe("s2"), subscribe("late", "price exists"), subscribe("bad5", "price >")]
    produce(kafka_conn, topic_prefix, later, "b", 100, seed=5)
    cfg = _cfg(kafka_conn, topic_prefix, tmp_path)
    assert fresh(cfg.query_checkpoint)  # an empty checkpoint
    history = run(spark, cfg, quiet=True, head_start=HeadStart(kafka_conn, topic, cut))
    assert not fresh(cfg.query_checkpoint) and HeadStart.begin(cfg) is None  # the checkpoint has batches now

    model: dict[str, str] = {}
    bad_subs = apply_ops(model, first + later)
    # below the cut: all but the records from the first one the fast path refers to the JVM on
    # (bad framing, a rule broken), which the batch read with the later ones
    assert sum(cut.values()) == len(first) and 0 < history[0].head_start_records < len(first)
    assert history[0].subscription_records == len(first) + len(later)
    assert sum(b.rejected_subscriptions for b in history) == sum(bad_subs.values())
    assert history[-1].subscriptions == len(model)
    events = raw_events(kafka_conn, topic_prefix + "siftstream.events.v1")
    matches = matches_by_event(kafka_conn, topic_prefix)
    assert len(matches) == len(events)
    check_phase(matches, events, model, "a")
    check_phase(matches, events, model, "b")
    letters = [d for d in dead_letters(kafka_conn, topic_prefix) if d["source_topic"] == topic]
    assert Counter(d["error_code"] for d in letters) == bad_subs
    assert {d["key"] for d in letters if d["error_code"] == "invalid_filter"} == {b"bad1", b"bad2", b"s0", b"bad5"}
    restored = TableStore(cfg.table_folder).load(history[-1].batch_id)  # what a restart starts from
    assert restored is not None and dict(restored[0].filters) == model


def test_a_head_start_past_the_first_batch_is_not_used(
    spark, kafka_conn: KafkaConnection, topic_prefix: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    subs = base_subscriptions()
    produce(kafka_conn, topic_prefix, subs, "a", 60, seed=6)
    cfg = dataclasses.replace(_cfg(kafka_conn, topic_prefix, tmp_path), max_offsets_per_trigger=20)
    history = run(spark, cfg, quiet=True, head_start=HeadStart.begin(cfg))
    assert history[0].subscription_records < len(subs)  # the first batch ended below the cut
    assert all(b.head_start_records == 0 for b in history)
    model: dict[str, str] = {}
    bad_subs = apply_ops(model, subs)
    assert sum(b.subscription_records for b in history) == len(subs)
    assert sum(b.rejected_subscriptions for b in history) == sum(bad_subs.values())
    events = raw_events(kafka_conn, topic_prefix + "siftstream.events.v1")
    matches = matches_by_event(kafka_conn, topic_prefix)
    assert len(matches) == len(events) and all(len(v) == 1 for v in matches.values())


def test_batches_with_many_subscription_records_read_their_events_by_range(
    spark, kafka_conn: KafkaConnection, topic_prefix: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    subs = base_subscriptions()
    produce(kafka_conn, topic_prefix, subs, "a", 120, seed=7)
    cfg = dataclasses.replace(
        _cfg(kafka_conn, topic_prefix, tmp_path), max_offsets_per_trigger=50, events_by_range_from=1
    )
    first = run(spark, cfg, quiet=True)
    produce(kafka_conn, topic_prefix, [], "b", 60, seed=8)  # events only
    cfg = dataclasses.replace(cfg, max_offsets_per_trigger=None)
    second = run(spark, cfg, quiet=True)
    later = [unsubscribe("s2"), subscribe("late", "price exists")]
    produce(kafka_conn, topic_prefix, later, "c", 80, seed=9)
    third = run(spark, cfg, quiet=True)
    # batches with subscription records read their events by range, the others from Spark's batch
    batches = first + second + third
    assert all(b.events_by_range == (b.subscription_records > 0) for b in batches)
    assert not any(b.events_by_range for b in second) and sum(b.events for b in second) > 0
    assert third[0].events_by_range and third[0].events > 0  # the restart's range starts at the last batch's end
    model: dict[str, str] = {}
    apply_ops(model, subs + later)
    events = raw_events(kafka_conn, topic_prefix + "siftstream.events.v1")
    matches = matches_by_event(kafka_conn, topic_prefix)
    assert len(matches) == len(events) and all(len(v) == 1 for v in matches.values())  # none lost, none twice
    assert sum(b.events for b in batches) == len(events)
    check_phase(matches, events, model, "c")


def test_a_second_run_sees_the_changed_subscriptions(
    spark, kafka_conn: KafkaConnection, topic_prefix: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    cfg = _cfg(kafka_conn, topic_prefix, tmp_path)
    first = base_subscriptions()
    produce(kafka_conn, topic_prefix, first, "a", 150, seed=2)
    run(spark, cfg, quiet=True)
    changes = [unsubscribe("s0"), subscribe("s2", "volume < 1000"), subscribe("all", "price exists"), ("s3", None)]
    produce(kafka_conn, topic_prefix, changes, "b", 150, seed=3)
    history = run(spark, cfg, quiet=True)
    assert history[0].batch_id > 0  # the second run resumed from the checkpoint

    before: dict[str, str] = {}
    apply_ops(before, first)
    after = dict(before)
    apply_ops(after, changes)
    events = raw_events(kafka_conn, topic_prefix + "siftstream.events.v1")
    matches = matches_by_event(kafka_conn, topic_prefix)
    assert all(len(v) == 1 for v in matches.values())
    check_phase(matches, events, before, "a")
    check_phase(matches, events, after, "b")


@pytest.mark.parametrize("lost", ["commit", "commit-and-table"])
def test_a_replayed_batch_sees_the_subscriptions_it_saw_the_first_time(
    spark, kafka_conn: KafkaConnection, topic_prefix: str, tmp_path: Path, lost: str
) -> None:  # type: ignore[no-untyped-def]
    """A crash after batch 1's output was written but before Spark committed it (simulated by
    deleting the commit, and for the second case also the job's table files): on restart batch 1
    runs again and must match against the subscriptions of batch 0 plus its own changes, not the
    changes written since; no event is lost and duplicates are identical records."""
    cfg = _cfg(kafka_conn, topic_prefix, tmp_path)
    a = base_subscriptions()
    b = [subscribe("new1", "price < 300"), unsubscribe("s1"), subscribe("r0", "urgent = false")]
    c = [subscribe("new2", "volume exists"), unsubscribe("new1"), subscribe("r0", "urgent = true"), ("x0", None)]
    produce(kafka_conn, topic_prefix, a, "a", 100, seed=4)
    run(spark, cfg, quiet=True)  # batch 0
    produce(kafka_conn, topic_prefix, b, "b", 100, seed=5)
    run(spark, cfg, quiet=True)  # batch 1
    (cfg.query_checkpoint / "commits" / "1").unlink()  # Spark's commit log entry (no .crc: session.py)
    assert not (cfg.query_checkpoint / "commits" / ".1.crc").exists()
    if lost == "commit-and-table":
        shutil.rmtree(cfg.table_folder)
    produce(kafka_conn, topic_prefix, c, "c", 100, seed=6)
    history = run(spark, cfg, quiet=True)
    assert [h.batch_id for h in history] == [1, 2]

    model: dict[str, str] = {}
    apply_ops(model, a)
    at_a = dict(model)
    apply_ops(model, b)
    at_b = dict(model)
    apply_ops(model, c)
    events = raw_events(kafka_conn, topic_prefix + "siftstream.events.v1")
    matches = matches_by_event(kafka_conn, topic_prefix)
    check_phase(matches, events, at_a, "a")
    check_phase(matches, events, at_b, "b")
    check_phase(matches, events, model, "c")
    assert any(len(v) == 2 for eid, v in matches.items() if eid.startswith("b-"))  # batch 1 did run twice
    letters = dead_letters(kafka_conn, topic_prefix)
    by_id: dict[str, dict[str, Any]] = {}
    for d in letters:  # replayed dead letters are identical too
        assert by_id.setdefault(d["dead_letter_id"], d) == d


def test_no_event_is_lost_when_the_driver_is_killed(
    spark, kafka_conn: KafkaConnection, topic_prefix: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """``siftstream match-job`` runs continuously in small micro-batches and is killed (SIGKILL, the
    whole process group) in the middle; a restart on the same checkpoint finishes the work. Every
    valid event has Match records, and where a batch ran twice the records are identical."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    subs = base_subscriptions()
    writer = KafkaWriter(kafka_conn)
    for key, raw in subs:
        writer.send(topic_prefix + "siftstream.subscriptions.v1", key, raw)
    assert writer.flush().failed == 0
    stats = tmp_path / "stats.jsonl"
    command = [sys.executable, "-m", "streaming.cli", "match-job", "--max-offsets-per-trigger", "200", "--quiet"]
    command += ["--bootstrap-servers", kafka_conn.bootstrap_servers, "--topic-prefix", topic_prefix]
    command += ["--checkpoint", str(tmp_path / "ckpt"), "--stats", str(stats), "--home", str(tmp_path)]
    log = tmp_path / "job.log"
    with log.open("wb") as out:  # a file, not a pipe: a full pipe would block the job's logging
        job = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def batches() -> list[dict[str, Any]]:
        return [json.loads(line) for line in stats.read_text().splitlines()] if stats.exists() else []

    def wait_for(done: Any, what: str) -> None:
        deadline = time.monotonic() + 300
        while not done():
            assert job.poll() is None, f"the job exited early: {log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.2)

    try:
        model: dict[str, str] = {}
        bad_subs = apply_ops(model, subs)
        wait_for(lambda: any(b["subscriptions"] == len(model) for b in batches()), "the subscriptions")
        bad_events = produce(kafka_conn, topic_prefix, [], "k", 1000, seed=8)
        wait_for(lambda: sum(b["events"] for b in batches()) >= 200, "a batch of events")
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    history = run(spark, _cfg(kafka_conn, topic_prefix, tmp_path), quiet=True)
    assert sum(b.events for b in history) > 0, "the job had finished before it was killed: no test"

    events = raw_events(kafka_conn, topic_prefix + "siftstream.events.v1")
    matches = matches_by_event(kafka_conn, topic_prefix)
    assert len(matches) == len(events)
    check_phase(matches, events, model, "k")
    letters = dead_letters(kafka_conn, topic_prefix)
    by_id: dict[str, dict[str, Any]] = {}
    for d in letters:
        assert by_id.setdefault(d["dead_letter_id"], d) == d
    assert Counter(d["error_code"] for d in by_id.values()) == bad_events + bad_subs


@pytest.mark.standalone
def test_the_cli_runs_the_job_on_a_standalone_cluster(
    kafka_conn: KafkaConnection, topic_prefix: str, tmp_path: Path, standalone_cluster: Any
) -> None:
    """The unchanged job via ``siftstream match-job --master spark://...``: the matching runs in the
    cluster's executor (its Python workers import the project from the same environment)."""
    import subprocess
    import sys

    cluster = standalone_cluster
    subs = base_subscriptions()
    bad_events = produce(kafka_conn, topic_prefix, subs, "a", 200, seed=7)
    command = [sys.executable, "-m", "streaming.cli", "match-job", "--available-now"]
    command += ["--master", cluster.master_url, "--bootstrap-servers", kafka_conn.bootstrap_servers]
    command += ["--topic-prefix", topic_prefix, "--checkpoint", str(tmp_path / "ckpt"), "--home", str(tmp_path)]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert list((tmp_path / "spark" / "work").glob("app-*")), "no application ran on the standalone worker"
    model: dict[str, str] = {}
    bad_subs = apply_ops(model, subs)
    events = raw_events(kafka_conn, topic_prefix + "siftstream.events.v1")
    matches = matches_by_event(kafka_conn, topic_prefix)
    assert len(matches) == len(events)
    check_phase(matches, events, model, "a")
    codes = Counter(d["error_code"] for d in dead_letters(kafka_conn, topic_prefix))
    assert codes == bad_events + bad_subs
    assert "micro-batches" in done.stderr and "events matched" in done.stderr
