"""Kill -9 a job's Spark driver (its whole process group: the Python driver, the JVM, the Python
workers) mid-run and start the same command again on the same checkpoint.

Invariants (issue 25's driver fault; docs/guide/faults.md): every published event has its output
record; duplicates are only identical records under the same key (a replayed micro-batch); the
job's state comes back from what it saved beside Spark's checkpoint instead of being rebuilt from
its input topics. The jobs run as real OS processes (``siftstream match-job ...``), on the fault
tier's 3-node cluster. Each test prints what it injected and what it counted.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from infra.connection import KafkaConnection
from infra.kafka import KafkaClusterConfig
from infra.topics import ensure_topics
from producers.events import EventGenerator
from producers.kafka_writer import KafkaWriter
from schemas.codec import codec_for, decode
from schemas.topics import (
    BROKER_TELEMETRY_TOPIC,
    CHANNELS_TOPIC,
    COMPOSITES_TOPIC,
    EVENTS_TOPIC,
    LINK_TELEMETRY_TOPIC,
    MATCHES_TOPIC,
    QOS_TOPIC,
    RECEIPTS_TOPIC,
    ROUTES_TOPIC,
    SUBSCRIPTIONS_TOPIC,
    TOPOLOGY_TOPIC,
)
from streaming.readers import read_topic
from tests.faults.conftest import expected_matches

pytestmark = [pytest.mark.faults, pytest.mark.timeout(420)]

ROOT = Path(__file__).resolve().parents[2]
FILTERS = {
    "s0": "symbol = 'IBM'",
    "s1": "price < 120 and urgent = true",
    "s2": "sector in ('tech', 'retail') and volume >= 2000",
    "s3": "region exists",
    **{f"r{i}": f"price between {60 * i} and {60 * i + 100}" for i in range(6)},
}
PHASES = (("before", 1500), ("down", 600), ("after", 600))  # events published in each phase


def wait_for(condition: Callable[[], Any], timeout_s: float, what: str, every_s: float = 0.5) -> Any:
    """Poll ``condition`` every ``every_s`` until it returns something true; that value."""
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        time.sleep(every_s)
    return value


class JobProcess:
    """``siftstream ARGS`` as a process group of its own (the driver, Spark's JVM and its Python
    workers are all in it), its output in ``log``."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.log = log
        with log.open("w") as out:
            self.proc = subprocess.Popen(
                [str(ROOT / ".venv" / "bin" / "siftstream"), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: killpg reaches the JVM and workers
                cwd=ROOT,
            )

    def alive(self) -> bool:
        """Whether any process of the group still runs."""
        return _group_has_members(self.proc.pid)

    def kill9(self) -> list[str]:
        """``kill -9`` the whole group and wait until none of it runs; the commands it had."""
        out = subprocess.run(["ps", "-o", "comm=", "-g", str(self.proc.pid)], capture_output=True, text=True)
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        wait_for(lambda: not _group_has_members(self.proc.pid), 30, "the killed job's processes to go")
        return out.stdout.split()

    def stop(self) -> int | None:
        """SIGTERM to the driver (a clean stop), then SIGKILL to whatever of the group is left."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(60)
        if _group_has_members(self.proc.pid):
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        return self.proc.returncode

    def text(self) -> str:
        return self.log.read_text(errors="replace")


def _group_members(pgid: int) -> list[int]:
    out = subprocess.run(["ps", "-eo", "pid=,pgid=,stat="], capture_output=True, text=True, check=True).stdout
    rows = [line.split() for line in out.splitlines()]
    return [int(r[0]) for r in rows if len(r) >= 3 and int(r[1]) == pgid and not r[2].startswith("Z")]


def _group_has_members(pgid: int) -> bool:
    return bool(_group_members(pgid))


def stats_lines(path: Path) -> list[dict[str, Any]]:
    """The job's per-batch stats file (JSON Lines), [] before its first batch."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def uncommitted(query_checkpoint: Path) -> list[int]:
    """The batch ids in Spark's offset log without a commit (those a restart runs again)."""
    ids = {
        name: {int(p.name) for p in (query_checkpoint / name).iterdir() if p.name.isdigit()}
        for name in ("offsets", "commits")
    }
    return sorted(ids["offsets"] - ids["commits"])


def job_command(job: str, conn: KafkaConnection, prefix: str, folder: Path, *options: str) -> list[str]:
    """``siftstream JOB``'s arguments: the cluster, the topic prefix, and its home, checkpoint
    (``folder/ckpt``) and stats file (``folder/stats.jsonl``) under ``folder``; then ``options``."""
    paths = [
        "--home",
        str(folder / "home"),
        "--checkpoint",
        str(folder / "ckpt"),
        "--stats",
        str(folder / "stats.jsonl"),
    ]
    return [job, "--bootstrap-servers", conn.bootstrap_servers, "--topic-prefix", prefix, *paths, *options]


def test_the_matching_job_survives_its_driver_killed(
    jars,  # type: ignore[no-untyped-def]
    kafka_cluster: tuple[KafkaConnection, KafkaClusterConfig],
    tmp_path: Path,
) -> None:
    conn, _ = kafka_cluster
    prefix = f"d{uuid.uuid4().hex[:8]}."
    ensure_topics(conn, prefix)
    writer = KafkaWriter(conn)
    sub_codec, event_codec = codec_for("Subscription"), codec_for("Event")
    for sid, filt in FILTERS.items():  # only before the first start: never written again
        record = {"type": "subscribe", "subscription_id": sid, "subscriber_id": "u1", "filter": filt}
        writer.send(prefix + SUBSCRIPTIONS_TOPIC, sid, sub_codec.encode(record))
    assert writer.flush(60).failed == 0
    gen, published = EventGenerator(publishers=4, seed=26), {}

    def publish(phase: str, n: int) -> None:
        for i, event in enumerate(gen.batch(n, 1_700_000_000_000 + len(published))):
            event["event_id"] = f"{phase}-{i}"
            published[event["event_id"]] = event
            writer.send(prefix + EVENTS_TOPIC, event["publisher_id"], event_codec.encode(event))
        report = writer.flush(60)
        assert report.failed == 0, report.errors

    stats = tmp_path / "stats.jsonl"
    args = job_command("match-job", conn, prefix, tmp_path, "--max-offsets-per-trigger", "150", "--no-delivery")
    first = JobProcess(args, tmp_path / "life1.log")
    injected: dict[str, Any] = {}
    second: JobProcess | None = None
    try:
        # the records per trigger are shared among partitions: the events start once the job holds
        # every subscription, so that the oracle over all filters is each event's expectation
        wait_for(lambda: any(b["subscriptions"] == len(FILTERS) for b in stats_lines(stats)), 240, "the table")
        publish(*PHASES[0])
        # kill once some batches with events are done and a backlog is left (mid-run), as soon as
        # a batch reports (its foreachBatch is done; Spark may not have committed it yet)
        wait_for(lambda: sum(1 for b in stats_lines(stats) if b["events"]) >= 2, 120, "two batches", every_s=0.02)
        before = stats_lines(stats)
        injected["batches"], injected["events"] = len(before), sum(b["events"] for b in before)
        injected["processes"] = first.kill9()
        assert first.proc.returncode == -signal.SIGKILL
        injected["uncommitted"] = uncommitted(tmp_path / "ckpt" / "query")
        injected["last_batch"] = max(b["batch_id"] for b in stats_lines(stats))
        publish(*PHASES[1])  # while no driver runs
        second = JobProcess(args, tmp_path / "life2.log")
        wait_for(lambda: len(stats_lines(stats)) > len(before), 240, "the restarted job's first batch")
        publish(*PHASES[2])

        def all_matched() -> dict[str, list[dict[str, Any]]] | None:
            got: dict[str, list[dict[str, Any]]] = {}
            for r in read_topic(conn, prefix + MATCHES_TOPIC, "Match", timeout_s=30):
                assert r.value is not None and r.key == r.value["event_id"].encode()
                got.setdefault(r.value["event_id"], []).append(r.value)
            return got if set(got) >= set(published) else None

        matches = wait_for(all_matched, 240, "a Match record for every event")
        assert second.alive(), second.text()[-3000:]
    finally:
        rc = second.stop() if second is not None else None
        first.stop()

    after = stats_lines(stats)[len(before) :]
    log2 = second.text()
    want = expected_matches(FILTERS, published)
    records = sum(len(v) for v in matches.values())
    replayed = [b["batch_id"] for b in after if b["batch_id"] <= injected["last_batch"]]
    assert set(injected["uncommitted"]) <= {b["batch_id"] for b in after}  # Spark ran them again
    print(
        f"\ninjected: kill -9 of the match-job process group ({', '.join(injected['processes'])}) after "
        f"{injected['batches']} batches ({injected['events']} events), batches {injected['uncommitted']} "
        "planned but not committed; "
        f"{PHASES[1][1]} events published while it was down; the same command restarted on the same checkpoint"
        f"\ncounted: {len(published)} events published; {records} Match records for {len(matches)} events "
        f"({records - len(matches)} identical duplicates); after the restart {len(after)} batches, "
        f"replayed batch ids {replayed}, first batch read {after[0]['subscription_records']} subscription records "
        f"and held {after[0]['subscriptions']} subscriptions (table version {after[0]['table_version']}); "
        f"restarted driver exit code on SIGTERM {rc}"
    )
    assert set(matches) == set(published), f"lost: {sorted(set(published) - set(matches))[:10]}"
    for eid, recs in matches.items():
        assert all(r == recs[0] for r in recs), f"differing duplicates for {eid}"
        assert recs[0]["subscription_ids"] == want[eid], (eid, recs[0]["subscription_ids"], want[eid])
    assert sum(len(ids) for ids in want.values()) > len(published)  # the filters are not trivial
    # the table was restored from the saved snapshot + deltas, not rebuilt from the subscriptions
    # topic: no warning, and the first batch after the restart read no subscription record yet held them all
    assert "rebuilding it from" not in log2, log2[-3000:]
    assert after[0]["subscription_records"] == 0 and after[0]["subscriptions"] == len(FILTERS), after[0]
    assert after[0]["table_version"] == before[-1]["table_version"]


def _channel_versions(conn: KafkaConnection, prefix: str) -> list[dict[str, Any]]:
    """Every ``ChannelAssignment`` record, each checked to be keyed by its version."""
    found = read_topic(conn, prefix + CHANNELS_TOPIC, "ChannelAssignment", timeout_s=30)
    assert all(r.value is not None and r.key == str(r.value["version"]).encode() for r in found)
    return [r.value for r in found if r.value is not None]


def test_the_channels_job_keeps_its_assignment_version_across_a_driver_kill(
    jars,  # type: ignore[no-untyped-def]
    kafka_cluster: tuple[KafkaConnection, KafkaClusterConfig],
    tmp_path: Path,
) -> None:
    """Two groups of four subscriptions with disjoint load give version 1 (``initial``); the job
    is killed; while it is down the load drifts (the groups mix); the restarted job must go on
    from its saved monitor (the subscriptions, the sample, the installed version) and plan
    version 2 (``reclustered``), not start again at version 1."""
    conn, _ = kafka_cluster
    prefix = f"d{uuid.uuid4().hex[:8]}."
    ensure_topics(conn, prefix)
    groups = {"a": [f"a{i}" for i in range(1, 5)], "b": [f"b{i}" for i in range(1, 5)]}
    mixed = [groups["a"][:2] + groups["b"][:2], groups["a"][2:] + groups["b"][2:]]
    writer, sub_codec, match_codec = KafkaWriter(conn), codec_for("Subscription"), codec_for("Match")
    for g, ids in groups.items():
        for sid in ids:
            record = {"type": "subscribe", "subscription_id": sid, "subscriber_id": f"user-{g}", "filter": f"g = '{g}'"}
            writer.send(prefix + SUBSCRIPTIONS_TOPIC, sid, sub_codec.encode(record))

    def publish(load: list[list[str]], n: int, start_ms: int, tag: str) -> None:
        for i in range(n):
            ids = sorted(load[i % len(load)])
            record = {"event_id": f"{tag}{i}", "publisher_id": "p1", "published_at": start_ms + 100 * i}
            writer.send(
                prefix + MATCHES_TOPIC, record["event_id"], match_codec.encode({**record, "subscription_ids": ids})
            )
        assert writer.flush(60).failed == 0

    stats = tmp_path / "stats.jsonl"
    args = job_command(
        "channels-job",
        conn,
        prefix,
        tmp_path,
        "--trigger-interval",
        "1 second",
        "--k",
        "2",
        "--sample-events",
        "200",
        "--min-interval-s",
        "10",
        "--method",
        "spectral-ncut",
    )
    publish(list(groups.values()), 200, 1_760_000_000_000, "e")
    first = JobProcess(args, tmp_path / "life1.log")
    second: JobProcess | None = None
    injected: dict[str, Any] = {}
    try:
        [initial] = wait_for(lambda: _channel_versions(conn, prefix), 240, "version 1")
        injected["batches"] = len(stats_lines(stats))
        injected["processes"] = first.kill9()
        injected["uncommitted"] = uncommitted(tmp_path / "ckpt" / "query")
        publish(mixed, 200, 1_760_000_030_000, "f")  # 30 s of event time later, while it is down
        second = JobProcess(args, tmp_path / "life2.log")
        versions = wait_for(
            lambda: (found := _channel_versions(conn, prefix))[-1]["version"] > 1 and found,
            240,
            "a version after 1",
        )
        assert second.alive(), second.text()[-3000:]
    finally:
        rc = second.stop() if second is not None else None
        first.stop()

    log2 = second.text()
    by_version: dict[int, list[dict[str, Any]]] = {}
    for v in versions:
        by_version.setdefault(v["version"], []).append(v)
    print(
        f"\ninjected: kill -9 of the channels-job process group ({', '.join(injected['processes'])}) once version 1 "
        f"was written, after {injected['batches']} batches, batches {injected['uncommitted']} planned but not "
        f"committed; 200 drifted Match records written while it was down; the same command restarted"
        f"\ncounted: {len(versions)} ChannelAssignment records, versions "
        f"{[(n, recs[0]['reason'], len(recs)) for n, recs in sorted(by_version.items())]} (number, reason, copies); "
        f"restarted driver exit code on SIGTERM {rc}"
    )
    assert (initial["version"], initial["reason"]) == (1, "initial")
    assert sorted(c["subscription_ids"] for c in initial["channels"]) == sorted(groups.values())
    for recs in by_version.values():
        assert all(r == recs[0] for r in recs), "differing records under one version"
    assert sorted(by_version) == [1, 2], sorted(by_version)  # went on from 1: not a second "initial"
    reclustered = by_version[2][0]
    assert reclustered["reason"] == "reclustered"
    assert sorted(c["subscription_ids"] for c in reclustered["channels"]) == sorted(sorted(m) for m in mixed)
    assert "starting empty" not in log2, log2[-3000:]  # the monitor came back from its saved state


def test_the_composites_job_completes_a_pattern_across_a_driver_kill(
    jars,  # type: ignore[no-untyped-def]
    kafka_cluster: tuple[KafkaConnection, KafkaClusterConfig],
    tmp_path: Path,
) -> None:
    """A sequence (a hotel, then a flight within 3 s): the job sees the first ten seconds of
    events and is killed; the next ten seconds are published while it is down. Patterns whose
    hotel came before the kill and whose flight after must be detected by the restarted job from
    its saved detector state; the detections equal the brute-force detector's, none repeated
    with other content."""
    from routing.composite.detection import detect_reference, detection_id
    from routing.composite.trees import parse_composite
    from routing.matching.language import parse_filter

    conn, _ = kafka_cluster
    prefix = f"d{uuid.uuid4().hex[:8]}."
    ensure_topics(conn, prefix)
    epoch, tree_doc = (
        1_760_000_000_000,
        {"op": "seq", "within_ms": 3000, "children": ["kind = 'hotel'", "kind = 'flight'"]},
    )
    writer = KafkaWriter(conn)
    topology = [{"element_id": b, "kind": "broker"} for b in ("b1", "b2")] + [
        {"element_id": "b1->b2", "kind": "link", "from": "b1", "to": "b2", "cost": 1.0},
        {"element_id": "b2->b1", "kind": "link", "from": "b2", "to": "b1", "cost": 1.0},
        {"element_id": "pf", "kind": "publisher", "broker": "b2"},
        {"element_id": "ph", "kind": "publisher", "broker": "b1"},
    ]
    codec = codec_for("TopologyElement")
    for element in topology:
        writer.send(prefix + TOPOLOGY_TOPIC, element["element_id"], codec.encode(element))
    record = {
        "type": "subscribe",
        "subscription_id": "order",
        "subscriber_id": "user-order",
        "broker": "b1",
        "composite": json.dumps(tree_doc),
    }
    writer.send(prefix + SUBSCRIPTIONS_TOPIC, "order", codec_for("Subscription").encode(record))
    event_codec = codec_for("Event")

    def publish(start_s: int, stop_s: int) -> list[dict[str, Any]]:
        """Flights every 500 ms, hotels every 2 s (1,750 ms past: the last one of the first ten seconds
        is followed by a flight only in the next ten), from two publishers."""
        out = []
        for t in range(start_s * 1000, stop_s * 1000, 250):
            kind = "flight" if t % 500 == 0 else "hotel" if t % 2000 == 1750 else None
            if kind is not None:
                out.append(
                    {
                        "event_id": f"{kind[0]}{t}",
                        "publisher_id": "pf" if kind == "flight" else "ph",
                        "published_at": epoch + t,
                        "lifetime_ms": 60_000,
                        "attributes": {"kind": kind},
                    }
                )
        for e in out:
            writer.send(prefix + EVENTS_TOPIC, e["event_id"], event_codec.encode(e))
        assert writer.flush(60).failed == 0
        return out

    stats = tmp_path / "stats.jsonl"
    args = job_command("composites-job", conn, prefix, tmp_path, "--trigger-interval", "1 second", "--lateness-s", "1")
    first_half = publish(0, 10)
    first = JobProcess(args, tmp_path / "life1.log")
    second: JobProcess | None = None
    injected: dict[str, Any] = {}

    def events_read() -> int:
        return sum(b["records"].get(EVENTS_TOPIC, 0) for b in stats_lines(stats))

    def detections() -> list[dict[str, Any]]:
        found = read_topic(conn, prefix + COMPOSITES_TOPIC, "CompositeDetection", timeout_s=30)
        return [r.value for r in found if r.value is not None]

    try:
        wait_for(lambda: events_read() >= len(first_half), 240, "the job to read the first ten seconds")
        injected["batches"], injected["detections"] = len(stats_lines(stats)), len(detections())
        injected["processes"] = first.kill9()
        injected["uncommitted"] = uncommitted(tmp_path / "ckpt" / "query")
        second_half = publish(10, 20)  # while it is down
        everything = first_half + second_half
        watermark = max(e["published_at"] for e in everything) - 1000
        tree = parse_composite(tree_doc)
        instances = [
            (leaf.id, e["event_id"], e["published_at"])
            for e in everything
            if e["published_at"] < watermark
            for leaf in tree.leaf_nodes
            if parse_filter(leaf.text).matches(e["attributes"])
        ]
        want = {
            detection_id("order", [c[0] for c in det], [c[1] for c in det])
            for det in detect_reference(tree, instances, max_instances=1000).detections
        }
        second = JobProcess(args, tmp_path / "life2.log")
        found = wait_for(lambda: (d := detections()) and {x["detection_id"] for x in d} >= want and d, 240, "them")
        assert second.alive(), second.text()[-3000:]
    finally:
        rc = second.stop() if second is not None else None
        first.stop()

    later = {e["event_id"] for e in second_half}
    across = [
        d
        for d in found
        if {c["event_id"] for c in d["components"]} & later and {c["event_id"] for c in d["components"]} - later
    ]
    by_id: dict[str, dict[str, Any]] = {}
    for d in found:
        by_id.setdefault(d["detection_id"], d)
    print(
        f"\ninjected: kill -9 of the composites-job process group ({', '.join(injected['processes'])}) once it "
        f"had read the first {len(first_half)} events, after {injected['batches']} batches "
        f"({injected['detections']} detections written), batches {injected['uncommitted']} planned but not "
        f"committed; {len(second_half)} events published while it was down; the same command restarted"
        f"\ncounted: {len(found)} detection records, {len(by_id)} distinct ({len(want)} by the brute-force "
        f"detector), {len({d['detection_id'] for d in across})} with a hotel before the kill and a flight after; "
        f"restarted driver exit code on SIGTERM {rc}"
    )
    assert set(by_id) == want
    assert all(d == by_id[d["detection_id"]] for d in found), "differing records under one detection id"
    assert across, "no pattern spans the kill: the test would not see a lost partial match"
    assert "starting empty" not in second.text()


def test_the_qos_job_keeps_its_windows_across_a_driver_kill(
    jars,  # type: ignore[no-untyped-def]
    kafka_cluster: tuple[KafkaConnection, KafkaClusterConfig],
    tmp_path: Path,
) -> None:
    """One subscriber's subscription, 40 events and the receipts of part of its matching events
    are read, then the job is killed; more receipts and a telemetry sample that moves the job's
    clock past every deadline come while it is down. The restarted job's report for the
    subscriber must count the receipts from before the kill: its measured reliability is all
    receipts over all matching events, which a job that lost its window (or its subscription
    and events) cannot report."""
    from streaming.client import subscription_record

    conn, _ = kafka_cluster
    prefix = f"d{uuid.uuid4().hex[:8]}."
    ensure_topics(conn, prefix)
    epoch, period_ms, lateness_ms = 1_760_000_000_000, 10_000, 5_000
    writer = KafkaWriter(conn)
    sub = subscription_record("qa-1", "qa", "price < 50", broker="b1", deadline_ms=1000, min_reliability=0.9)
    writer.send(prefix + SUBSCRIPTIONS_TOPIC, "qa-1", codec_for("Subscription").encode(sub))
    events = [
        {
            "event_id": f"ev{i:03d}",
            "publisher_id": "p1",
            "published_at": epoch + 100 * i,
            "lifetime_ms": 60_000,
            "attributes": {"price": float((i * 37) % 100)},
        }
        for i in range(40)
    ]
    event_codec, receipt_codec = codec_for("Event"), codec_for("Receipt")
    for e in events:
        writer.send(prefix + EVENTS_TOPIC, "p1", event_codec.encode(e))
    matching = [e for e in events if e["attributes"]["price"] < 50]
    before, down = matching[: len(matching) // 2], matching[len(matching) // 2 : len(matching) // 2 + 5]

    def receipts(those: list[dict[str, Any]]) -> None:
        for e in those:
            receipt = {"subscriber_id": "qa", "event_id": e["event_id"], "received_at": e["published_at"] + 50}
            writer.send(prefix + RECEIPTS_TOPIC, "qa", receipt_codec.encode(receipt))
        assert writer.flush(60).failed == 0

    receipts(before)
    stats = tmp_path / "stats.jsonl"
    args = job_command(
        "qos-job",
        conn,
        prefix,
        tmp_path,
        "--trigger-interval",
        "1 second",
        "--update-period-s",
        str(period_ms / 1000),
        "--lateness-s",
        str(lateness_ms / 1000),
    )

    def read(topic: str) -> int:
        return sum(b["records"].get(topic, 0) for b in stats_lines(stats))

    def report() -> dict[str, Any] | None:
        found = [r.value for r in read_topic(conn, prefix + QOS_TOPIC, "QosReport", timeout_s=30) if r.value]
        mine = [v for v in found if v["kind"] == "subscriber" and v["id"] == "qa" and v["window_end"] >= last]
        return max(mine, key=lambda v: v["window_end"]) if mine else None

    last = max(e["published_at"] + e["lifetime_ms"] for e in events)
    first = JobProcess(args, tmp_path / "life1.log")
    second: JobProcess | None = None
    injected: dict[str, Any] = {}
    try:
        wait_for(lambda: read(EVENTS_TOPIC) == 40 and read(RECEIPTS_TOPIC) == len(before), 240, "the first inputs")
        injected["batches"] = len(stats_lines(stats))
        injected["processes"] = first.kill9()
        injected["uncommitted"] = uncommitted(tmp_path / "ckpt" / "query")
        receipts(down)  # while it is down, with the sample that moves the job's clock past every deadline
        sample = {
            "broker_id": "b1",
            "event_id": None,
            "arrived_at": last + lateness_ms + 2 * period_ms,
            "wait_ms": 0.0,
            "service_ms": 1.0,
            "queue_length": 0,
        }
        writer.send(prefix + BROKER_TELEMETRY_TOPIC, "b1", codec_for("BrokerSample").encode(sample))
        assert writer.flush(60).failed == 0
        second = JobProcess(args, tmp_path / "life2.log")
        got = wait_for(report, 240, "the subscriber's report past every deadline")
        assert second.alive(), second.text()[-3000:]
    finally:
        rc = second.stop() if second is not None else None
        first.stop()

    want = (len(before) + len(down)) / len(matching)
    print(
        f"\ninjected: kill -9 of the qos-job process group ({', '.join(injected['processes'])}) once it had read "
        f"the subscription, 40 events and {len(before)} receipts ({injected['batches']} batches, batches "
        f"{injected['uncommitted']} planned but not committed); {len(down)} receipts and a telemetry sample past "
        f"every deadline written while it was down; the same command restarted"
        f"\ncounted: {len(matching)} matching events, {len(before) + len(down)} receipts on time; the report for qa "
        f"(window ending {got['window_end'] - epoch} ms after the first event) measured "
        f"{got['measured_reliability']} (want {want}); restarted driver exit code on SIGTERM {rc}"
    )
    assert got["measured_reliability"] == want
    assert "starting empty" not in second.text()


@pytest.mark.timeout(600)  # two Spark starts and about ten batches, on a loaded machine
def test_the_routes_job_goes_on_from_its_planner_across_a_driver_kill(
    jars,  # type: ignore[no-untyped-def]
    kafka_cluster: tuple[KafkaConnection, KafkaClusterConfig],
    tmp_path: Path,
) -> None:
    """The overlay, subscriptions and link telemetry of ``tests/integration/test_routes_job.py``,
    then two minutes of matches at steady rates, read 200 records a batch; the job is killed as
    soon as a batch wrote a plan (a backlog of matches left); the next 80 s, with one flow's rate
    tripled, are written while it is down. The restarted job must write exactly the plans of one
    uninterrupted planner over the same inputs (``RoutePlanner`` fed everything at once, the
    oracle): the first plan, then the two re-plans of the sustained drift with the version
    numbers going on; duplicates only identical records of one version. The topology and the
    subscriptions are read by the first life only, so a restarted job without its saved planner
    would plan nothing or start again at version 1."""
    from routing.monitors.routes import PlannerConfig, RoutePlanner
    from tests.integration.test_routes_job import EPOCH_MS, matches, overlay, subscriptions

    conn, _ = kafka_cluster
    prefix = f"d{uuid.uuid4().hex[:8]}."
    ensure_topics(conn, prefix)
    topo = overlay()
    topology, subs = topo.topology_records(), subscriptions(topo)
    # telemetry before the first match: it moves no check period (the watermark follows the matches)
    samples = [
        {"from": k.src, "to": k.dst, "seq": i, "sent_at": EPOCH_MS - 1000 + i, "delay_ms": 2.0}
        for i, k in enumerate(topo.links)
    ]
    first_half = sorted(matches(0, 120), key=lambda m: m["published_at"])
    second_half = sorted(matches(120, 200, boost=3.0), key=lambda m: m["published_at"])
    writer = KafkaWriter(conn)

    def send(topic: str, schema: str, records: list[dict[str, Any]], key: str) -> None:
        codec = codec_for(schema)
        for r in records:
            writer.send(prefix + topic, str(r[key]), codec.encode(r))
        report = writer.flush(60)
        assert report.failed == 0, report.errors

    send(TOPOLOGY_TOPIC, "TopologyElement", topology, "element_id")
    send(SUBSCRIPTIONS_TOPIC, "Subscription", subs, "subscription_id")
    send(LINK_TELEMETRY_TOPIC, "LinkSample", samples, "from")

    lateness_ms, planner_cfg = 5_000, PlannerConfig(check_period_ms=10_000, rate_window_ms=60_000)
    oracle = RoutePlanner(planner_cfg)
    oracle.apply_topology([(r["element_id"], r) for r in topology])
    oracle.apply_subscriptions([(s["subscription_id"], s["subscriber_id"], s["broker"], s["filter"]) for s in subs])
    oracle.add_link_samples(
        [s["from"] for s in samples],
        [s["to"] for s in samples],
        [float(s["sent_at"]) for s in samples],
        [s["delay_ms"] for s in samples],
    )
    everything = first_half + second_half
    oracle.add_matches(
        [m["publisher_id"] for m in everything],
        [float(m["published_at"]) for m in everything],
        [m["subscription_ids"] for m in everything],
    )
    final_watermark = max(m["published_at"] for m in everything) - lateness_ms
    # each as the topic gives it back (Avro's view of the record)
    want = {p["version"]: decode(codec_for("RoutePlan").encode(p))[1] for p in oracle.advance(final_watermark)}

    stats = tmp_path / "stats.jsonl"
    args = job_command(
        "routes-job",
        conn,
        prefix,
        tmp_path,
        "--trigger-interval",
        "1 second",
        "--max-offsets-per-trigger",
        "200",
        "--check-period-s",
        str(planner_cfg.check_period_ms / 1000),
        "--window-periods",
        str(planner_cfg.rate_window_ms // planner_cfg.check_period_ms),
        "--lateness-s",
        str(lateness_ms / 1000),
    )

    def read(topic: str, lines: list[dict[str, Any]] | None = None) -> int:
        return sum(b["records"].get(topic, 0) for b in (stats_lines(stats) if lines is None else lines))

    def plans() -> list[dict[str, Any]]:
        found = read_topic(conn, prefix + ROUTES_TOPIC, "RoutePlan", timeout_s=30)
        assert all(r.value is not None and r.key == r.value["plan_id"].encode() for r in found)
        return [r.value for r in found if r.value is not None]

    first = JobProcess(args, tmp_path / "life1.log")
    second: JobProcess | None = None
    injected: dict[str, Any] = {}
    try:
        # the matches only once the overlay and the subscriptions are read: a batch holds a share of
        # every topic, and matches read before their subscriptions would count for no flow
        wait_for(
            lambda: read(TOPOLOGY_TOPIC) == len(topology) and read(SUBSCRIPTIONS_TOPIC) == len(subs),
            240,
            "the overlay and the subscriptions",
        )
        send(MATCHES_TOPIC, "Match", first_half, "event_id")
        wait_for(lambda: any(b["extra"]["plans"] for b in stats_lines(stats)), 240, "a plan", every_s=0.02)
        before = stats_lines(stats)
        injected["batches"], injected["matches"] = len(before), read(MATCHES_TOPIC, before)
        injected["processes"] = first.kill9()
        assert first.proc.returncode == -signal.SIGKILL
        injected["uncommitted"] = uncommitted(tmp_path / "ckpt" / "query")
        injected["last_batch"] = max(b["batch_id"] for b in stats_lines(stats))
        injected["plans"] = sorted({p["version"] for p in plans()})
        send(MATCHES_TOPIC, "Match", second_half, "event_id")  # while no driver runs
        second = JobProcess(args, tmp_path / "life2.log")
        wait_for(
            lambda: (
                (lines := stats_lines(stats))[-1].get("watermark_ms") is not None
                and lines[-1]["watermark_ms"] >= final_watermark
            ),
            300,
            "the restarted job to read every match",
        )
        found = plans()
        assert second.alive(), second.text()[-3000:]
    finally:
        rc = second.stop() if second is not None else None
        first.stop()

    after = stats_lines(stats)[len(before) :]
    by_version: dict[int, list[dict[str, Any]]] = {}
    for p in found:
        by_version.setdefault(p["version"], []).append(p)
    replayed = [b["batch_id"] for b in after if b["batch_id"] <= injected["last_batch"]]
    print(
        f"\ninjected: kill -9 of the routes-job process group ({', '.join(injected['processes'])}) once a batch "
        f"wrote a plan: after {injected['batches']} batches ({injected['matches']} of {len(first_half)} matches "
        f"read, plan versions {injected['plans']} on the topic), batches {injected['uncommitted']} planned but not "
        f"committed; {len(second_half)} matches (one flow's rate tripled) written while it was down; the same "
        f"command restarted on the same checkpoint"
        f"\ncounted: {len(found)} RoutePlan records, versions "
        f"{[(v, recs[0]['planned_at'] - EPOCH_MS, len(recs)) for v, recs in sorted(by_version.items())]} "
        f"(version, planned_at - epoch in ms, copies), the oracle's {sorted(want)}; after the restart "
        f"{len(after)} batches, replayed batch ids {replayed}, {read(MATCHES_TOPIC, after)} matches and "
        f"{read(TOPOLOGY_TOPIC, after)} topology / {read(SUBSCRIPTIONS_TOPIC, after)} subscription records read; "
        f"restarted driver exit code on SIGTERM {rc}"
    )
    assert sorted(want) == [1, 2, 3]  # the scenario: a first plan and two re-plans of the drift
    assert injected["plans"] and max(injected["plans"]) < 3, "the kill came after every plan: nothing to go on from"
    assert set(injected["uncommitted"]) <= {b["batch_id"] for b in after}  # Spark ran them again
    for version, recs in by_version.items():
        assert all(r == recs[0] for r in recs), f"differing records of version {version}"
    assert sorted(by_version) == sorted(want)
    for version, recs in by_version.items():
        differing = {k: (recs[0][k], want[version][k]) for k in want[version] if recs[0][k] != want[version][k]}
        assert not differing, f"version {version} (job, oracle): {differing}"
    # the planner came back from its saved state: the overlay and subscriptions were not read again
    assert read(TOPOLOGY_TOPIC, after) == 0 and read(SUBSCRIPTIONS_TOPIC, after) == 0
    assert "starting empty" not in second.text()
