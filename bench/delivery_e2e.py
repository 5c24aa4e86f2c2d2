"""End-to-end benchmark of delivery through channels: publisher -> matching job (with delivery)
and channels job -> channel topics -> subscribers, on this machine (docs/reference/delivery.md).

Workload: the Gryphon preset (Opyrchal et al. 2000) at ``--decay`` (default 0.88) with
``--subscriptions`` subscriptions (default 100,000), K = ``--k`` channels (default 32). Both jobs
run continuously in one local Spark application; the channels job plans versions (the first places
every subscription, later ones re-cluster as the sample fills) and the matching job installs them
and delivers. Then:

1. **Load.** After a warm-up, a producer process publishes ``--rate`` events/s for ``--seconds`` s
   with ``published_at`` = the wall clock at send.
2. **Subscribers, all of them.** 100,000 client objects are not needed: a reader process reads
   every channel topic and acts for all of a channel's members at once, as each member's client
   would: it follows the markers (the version each delivery was made by), applies each member's
   filter (one ``MatchIndex`` over every subscription: an event is matched once, then each
   channel keeps the matching members it carries by that version) and counts per delivery
   (member, event) whether it was wanted. It also reads the ``Match`` records' id counts.
3. **Real clients.** ``--clients`` ``streaming.client.Subscriber`` objects (their own
   subscriptions, copies of workload filters) run in another process beside them, each with its
   own receipts.

Reported: the rate at which events reached subscribers, latency from ``published_at`` to the
reader's receipt of a delivery that a member wanted (p50, p99, after ``--warmup`` s), the waste
ratio in flight (deliveries not wanted / deliveries), the installed versions, and the counts:
for every event, the wanted deliveries across all channels equal the number of ids in its ``Match``
record (none lost, none twice, nothing a member's filter rejects counted as wanted), and each real
client received exactly the events the reader kept for its subscription (which, with every count
equal, are the events whose ``Match`` names it).

Run: ``.venv/bin/python bench/delivery_e2e.py [--subscriptions 100000] [--decay 0.88] [--k 32]
[--rate 10000] [--seconds 60] [--warmup 20] [--clients 4] [--quick]``; ``--worker-steps 6000`` times
only the workers' side in this process (``worker_steps``). Readings:
docs/results/delivery.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import sys
import tempfile
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from bench.matching_e2e import _paced_producer, _varint, load_subscriptions, match_head, new_topics, workload
from bench.procs import CpuByRole
from infra import kafka
from infra.connection import arrived
from infra.jars import ensure_jars
from producers.columns import EventColumns
from producers.sinks import KafkaSink
from routing.monitors.channels import JOB_METHOD
from schemas.topics import CHANNELS_TOPIC, EVENTS_TOPIC, MATCHES_TOPIC, channel_topic

_HEAD = 10  # single-object header: marker (2 bytes) + fingerprint (8)


def match_count(value: bytes) -> int:
    """The number of ids in an encoded ``Match`` (its array's block counts), without the ids."""
    n, pos = _varint(value, _HEAD)
    pos += n  # event_id
    n, pos = _varint(value, pos)
    pos += n  # publisher_id
    _, pos = _varint(value, pos)  # published_at
    total = 0
    while True:
        count, pos = _varint(value, pos)
        if count == 0:
            return total
        if count < 0:  # a block with its byte size: skip it
            size, pos = _varint(value, pos)
            total -= count
            pos += size
            continue
        total += count
        for _ in range(count):
            n, pos = _varint(value, pos)
            pos += n


def _reader(
    bootstrap: str, prefix: str, k: int, filters: dict[str, str], watch: list[str], expected: int, deadline_s: float
) -> dict:
    """Step 2 of the module docstring: act for every subscriber by reading every channel topic;
    also lists the events that the subscriptions in ``watch`` (the real clients') should get."""
    import pyarrow as pa
    from confluent_kafka import Consumer, TopicPartition

    from routing.channels.assignment import Assignment
    from routing.matching.index import EventBatch, MatchIndex
    from schemas.codec import codec_for, decode
    from schemas.event_records import decode_rows

    index = MatchIndex()
    for sid, text in filters.items():
        index.add(sid, text)
    index.flush()
    marker_fp = codec_for("ChannelMarker").header
    batch_fp = codec_for("ChannelEvents").header
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 16 << 20,
        }
    )
    topics = {channel_topic(c, prefix): c for c in range(k)}
    parts = [TopicPartition(t, 0, 0) for t in topics]
    parts += [TopicPartition(prefix + MATCHES_TOPIC, p, 0) for p in range(2)]
    parts += [TopicPartition(prefix + CHANNELS_TOPIC, 0, 0)]
    consumer.assign(parts)
    plans: dict[int, Assignment] = {0: Assignment(0, k)}
    version = dict.fromkeys(range(k), 0)
    pending: dict[int, deque[Any]] = {c: deque() for c in range(k)}
    by_rank: np.ndarray | None = None
    chan_cache: dict[int, np.ndarray] = {}
    members: dict[int, np.ndarray] = {}
    seen: dict[bytes, tuple[int, np.ndarray]] = {}  # event id -> (published_at, ranks of its matches)
    wanted: dict[bytes, int] = {}
    job_counts: dict[bytes, int] = {}
    latencies: list[tuple[int, int]] = []  # (published_at, ms) of deliveries some member wanted
    written: list[tuple[int, int]] = []  # (published_at, ms to the delivery's Kafka timestamp), same deliveries
    channel_records = 0
    kafka_records = 0
    deliveries = useful = events_delivered = 0
    first_receipt: dict[bytes, int] = {}
    first_written: dict[bytes, int] = {}  # event id -> Kafka timestamp of its first wanted channel write
    watched: dict[str, set[str]] = {sid: set() for sid in watch}
    watch_ranks: dict[int, str] = {}

    def channel_by_rank(v: int) -> np.ndarray:
        if v not in chan_cache:
            assert by_rank is not None
            plan = plans[v]
            chan_cache[v] = np.fromiter((plan.channel(s) for s in by_rank.tolist()), np.int64, len(by_rank))
            members[v] = np.bincount(chan_cache[v], minlength=k)
        return chan_cache[v]

    def events_of(values: list[bytes], now_ms: int) -> list[tuple[bytes, int, np.ndarray]]:
        nonlocal by_rank
        new = [i for i, v in enumerate(values) if _event_id(v) not in seen]
        if new:
            decoded = decode_rows(pa.array([values[i] for i in new], pa.binary()))
            matched = index.match(EventBatch.from_columns(len(new), decoded.columns()))
            offsets, ranks, ids = matched.sorted_ranks()
            if by_rank is None or len(ids) != len(by_rank):
                by_rank = ids
                chan_cache.clear()
                rank_of = {sid: r for r, sid in enumerate(by_rank.tolist())}
                watch_ranks.clear()
                watch_ranks.update({rank_of[sid]: sid for sid in watch if sid in rank_of})
            for j, i in enumerate(new):
                eid = _event_id(values[i])
                seen[eid] = (_published_at(values[i]), ranks[offsets[j] : offsets[j + 1]])
        return [(eid, *seen[eid]) for eid in map(_event_id, values)]

    def deliver(c: int, batch: list[tuple[bytes, int]], now_ms: int) -> None:
        nonlocal deliveries, useful, events_delivered, channel_records
        if not batch:
            return
        v = version[c]
        channel_records += len(batch)
        stamps = [ts for _, ts in batch]
        for (eid, published_at, ranks), ts in zip(events_of([b for b, _ in batch], now_ms), stamps, strict=True):
            chans = channel_by_rank(v)
            mine = ranks[chans[ranks] == c] if len(ranks) else ranks
            kept = len(mine)
            for r in mine.tolist():
                if r in watch_ranks:
                    watched[watch_ranks[r]].add(eid.decode())
            deliveries += int(members[v][c])
            useful += kept
            events_delivered += 1
            if kept:
                wanted[eid] = wanted.get(eid, 0) + kept
                if not eid.startswith(b"warm-"):
                    latencies.append((published_at, now_ms - published_at))
                    written.append((published_at, ts - published_at))
                    first_receipt.setdefault(eid, now_ms)
                    first_written.setdefault(eid, ts)

    def drain(c: int, now_ms: int) -> None:
        batch: list[tuple[bytes, int]] = []
        while pending[c]:
            value, ts = pending[c][0]
            if value[:_HEAD] == marker_fp:
                _, marker = decode(value, "ChannelMarker")
                if marker["version"] not in plans:
                    break  # its planned record has not been read yet
                deliver(c, batch, now_ms)
                batch = []
                version[c] = max(version[c], marker["version"])
            else:
                batch.append((value, ts))
            pending[c].popleft()
        deliver(c, batch, now_ms)

    stop = time.time() + deadline_s
    try:
        matched_seen, last_delivery = 0, time.time()
        # until every event has its Match record and no delivery came for 5 s (or the deadline)
        while time.time() < stop and (matched_seen < expected or time.time() - last_delivery < 5):
            msgs = arrived(consumer, 20_000, 0.2)
            now_ms = int(time.time() * 1000)
            if any(m.error() is None and m.topic() in topics for m in msgs):
                last_delivery = time.time()
            touched = set()
            for msg in msgs:
                if msg.error() is not None:
                    continue
                topic = msg.topic()
                if topic in topics:
                    c = topics[topic]
                    value, ts = msg.value(), msg.timestamp()[1]
                    kafka_records += 1
                    if value[:_HEAD] == batch_fp:  # a ChannelEvents record: its events, in order
                        pending[c].extend((raw, ts) for raw in decode(value, "ChannelEvents")[1]["events"])
                    else:
                        pending[c].append((value, ts))
                    touched.add(c)
                elif topic.endswith(MATCHES_TOPIC):
                    eid, _ = match_head(msg.value())
                    if eid not in job_counts and not eid.startswith(b"warm-"):
                        matched_seen += 1
                    job_counts[eid] = match_count(msg.value())
                else:
                    _, rec = decode(msg.value(), "ChannelAssignment")
                    if rec["stage"] == "planned":
                        plans[rec["version"]] = Assignment.from_record(rec)
                        touched.update(range(k))
            for c in sorted(touched):
                drain(c, now_ms)
    finally:
        consumer.close()
    measured = [e for e in job_counts if not e.startswith(b"warm-")]
    equal = sum(1 for e in measured if wanted.get(e, 0) == job_counts[e])
    lost = sum(1 for e in measured if wanted.get(e, 0) < job_counts[e])
    extra = sum(1 for e in measured if wanted.get(e, 0) > job_counts[e])
    return {
        "latencies": latencies,
        "written": written,
        "channel_records": channel_records,
        "kafka_records": kafka_records,
        "deliveries": deliveries,
        "useful": useful,
        "events_delivered": events_delivered,
        "events_with_matches": sum(1 for e in measured if job_counts[e] > 0),
        "match_records": len(measured),
        "equal": equal,
        "lost": lost,
        "extra": extra,
        "versions": sorted(v for v in plans if v),
        "first_receipts": sorted(first_receipt.values()),
        "first_written": sorted(first_written.values()),
        "watched": watched,
    }


def _event_id(value: bytes) -> bytes:
    n, pos = _varint(value, _HEAD)
    return value[pos : pos + n]


def _published_at(value: bytes) -> int:
    n, pos = _varint(value, _HEAD)
    pos += n
    n, pos = _varint(value, pos)
    return _varint(value, pos + n)[0]


def _clients(bootstrap: str, prefix: str, filters: dict[str, str], seconds: float) -> dict[str, Any]:
    """Step 3: real ``Subscriber`` clients, one thread each; what each yielded (event ids)."""
    import threading

    from streaming.client import Subscriber

    got: dict[str, list[str]] = {sid: [] for sid in filters}
    lags: list[tuple[int, int]] = []  # (published_at, ms until the client yielded it)
    ready = threading.Barrier(len(filters) + 1)

    def run(sid: str, text: str) -> None:
        with Subscriber(bootstrap_servers=bootstrap, topic_prefix=prefix, subscriber_id=f"bench-{sid}") as sub:
            stream = sub.subscribe(text, subscription_id=sid, timeout_s=seconds)
            ready.wait()
            for event in stream:
                if not event["event_id"].startswith("warm-"):
                    got[sid].append(event["event_id"])
                    lags.append((event["published_at"], int(time.time() * 1000) - event["published_at"]))

    threads = [threading.Thread(target=run, args=item, daemon=True) for item in filters.items()]
    for t in threads:
        t.start()
    ready.wait()
    for t in threads:
        t.join(seconds + 60)
    return {"got": got, "lags": lags}


_ENGINE_STEPS = ("latestOffset", "walCommit", "queryPlanning", "getBatch", "addBatch", "commitOffsets")
_JOB_STEPS = (
    "subscriptions_ms",
    "prepare_ms",
    "write_ms",
    "worker_decode_ms",
    "worker_match_ms",
    "worker_encode_ms",
    "worker_deliver_ms",
    "worker_write_ms",
)


def batch_breakdown(history: list[Any], progress: list[dict[str, Any]], since_ms: int) -> dict[str, Any]:
    """Where the matching job's busy micro-batches (some events, started at ``since_ms`` or later)
    spent their time: Spark's ``durationMs`` per step of each trigger (its progress reports, as
    dicts), the job's ``BatchStats`` steps, each as the median per batch and as ms per 1,000
    events over all of them; and the events per second of trigger time beside those of the
    ``foreachBatch`` alone."""
    busy = [b for b in history if b.events and b.started_at_ms >= since_ms]
    ids = {b.batch_id for b in busy}
    reports = [p for p in progress if p.get("batchId") in ids]
    events = sum(b.events for b in busy)

    def summary(values: list[float]) -> dict[str, float]:
        if not values:
            return {"median_ms": float("nan"), "ms_per_1000_events": float("nan")}
        return {"median_ms": float(np.median(values)), "ms_per_1000_events": 1000 * sum(values) / max(1, events)}

    engine = {step: summary([float(p["durationMs"].get(step, 0)) for p in reports]) for step in _ENGINE_STEPS}
    trigger = [float(p["durationMs"].get("triggerExecution", 0)) for p in reports]
    engine["triggerExecution"] = summary(trigger)
    engine["outside addBatch"] = summary(
        [float(p["durationMs"].get("triggerExecution", 0) - p["durationMs"].get("addBatch", 0)) for p in reports]
    )
    # getattr with a default: the same bench also reads commits whose BatchStats lack some steps
    job = {step: summary([float(getattr(b, step, 0.0)) for b in busy]) for step in ("duration_ms", *_JOB_STEPS)}
    trigger_events = sum(b.events for b in busy if b.batch_id in {p["batchId"] for p in reports})
    return {
        "batches": len(busy),
        "events": events,
        "progress_reports": len(reports),
        "events_per_trigger_s": 1000 * trigger_events / sum(trigger) if sum(trigger) else 0.0,
        "spark": engine,
        "job": job,
    }


def _format_breakdown(b: dict[str, Any]) -> str:
    def line(parts: dict[str, dict[str, float]]) -> str:
        return ", ".join(f"{k} {v['median_ms']:,.0f} ({v['ms_per_1000_events']:,.1f}/1k ev)" for k, v in parts.items())

    return (
        f"  where the matching job's {b['batches']} busy batches went (median ms per batch, and ms per 1,000 "
        f"events); {b['events_per_trigger_s']:,.0f} events per second of trigger time "
        f"({b['progress_reports']} progress reports):\n"
        f"    Spark's durationMs: {line(b['spark'])}\n"
        f"    the job's foreachBatch: {line(b['job'])} (worker_*: summed over the batch's tasks)"
    )


def worker_steps(subscriptions: int, decay: float, k: int, batch: int, batches: int) -> dict[str, Any]:
    """The matching job's worker side alone, in this process (no Spark, no Kafka): what
    ``streaming.arrow_matching.match_batches`` does per Arrow batch of ``batch`` events with
    delivery to ``k`` channels, split into its steps as the job's stats split them (CPU ms per
    1,000 events, the best of ``batches`` batches of the workload, after one to warm up). The
    channels are a ``spectral-ncut`` plan of the subscriptions' matches on 2,000 events, as the
    channels job re-clusters (the same method and sample size)."""
    import dataclasses

    import pyarrow as pa
    from scipy import sparse

    from routing.channels.planner import recluster
    from routing.matching.index import EventBatch
    from routing.matching.table import SubscriptionTable
    from schemas.event_records import decode_rows
    from schemas.match_records import Targets
    from streaming.arrow_matching import INPUT_COLUMNS, DeliveryShip, ShipState, match_batches, replica_for

    class Held:  # what a Spark broadcast gives a worker
        def __init__(self, value: Any) -> None:
            self.value = value

    class Steps:  # the accumulator's part: the last batch's ShipState.counters tuple
        def __init__(self) -> None:
            self.last: tuple[float, ...] = ()

        def add(self, value: tuple[float, ...]) -> None:
            self.last = value

    w = workload(subscriptions, decay)
    table = SubscriptionTable()
    table.apply((s["subscription_id"], s["filter"]) for s in w.subscriptions())
    table.snapshot()
    base = ShipState("bench", "match", table.version, Held(dict(table.filters)), (), table.version)
    index = replica_for(base).index
    sample = decode_rows(pa.array(list(w.columns(2000).avro()), pa.binary()))
    offsets, ranks, by_rank = index.match(EventBatch.from_columns(2000, sample.columns())).sorted_ranks()
    rows = np.repeat(np.arange(2000), np.diff(offsets))
    hits = sparse.csr_matrix((np.ones(len(ranks), bool), (ranks, rows)), shape=(len(by_rank), 2000))
    labels, _ = recluster(hits, tuple(by_rank.tolist()), k, "spectral-ncut")
    members = dict(zip(by_rank.tolist(), labels.tolist(), strict=True))
    steps = Steps()
    ship = dataclasses.replace(
        base, counters=steps, delivery=DeliveryShip(1, tuple(f"c{c}" for c in range(k)), Held(members))
    )
    targets = Targets("events", "matches", "deadletter")
    rates: list[tuple[float, ...]] = []
    for i in range(batches + 1):
        cols = w.columns(batch)
        values, keys = pa.array(list(cols.avro()), pa.binary()), pa.array(list(cols.keys()), pa.binary())
        n = len(values)
        ts = pa.array(np.full(n, int(time.time() * 1e6)), pa.timestamp("us"))
        rb = pa.RecordBatch.from_arrays(
            [keys, values, pa.array(np.zeros(n, np.int32)), pa.array(np.arange(n) + i * n), ts], list(INPUT_COLUMNS)
        )
        cpu = time.process_time()
        out = list(match_batches(ship, targets, iter([rb])))
        cpu = time.process_time() - cpu
        if i:  # the first batch warms up (the ids' strings and channels are kept per index version)
            split = steps.last[5:9] if len(steps.last) >= 9 else (float("nan"),) * 4  # older commits: no split
            rates.append((1000 * cpu, *split, steps.last[3], sum(o.nbytes for o in out)))
    best = min(rates)
    per_k = 1000 / batch
    return {
        "batch": batch,
        "cpu_ms_per_1000_events": best[0] * per_k,
        "decode": best[1] * per_k,
        "match": best[2] * per_k,
        "encode": best[3] * per_k,
        "deliver": best[4] * per_k,
        "channel_pairs_per_event": best[5] / batch,
        "output_bytes_per_event": best[6] / batch,
        "events_per_cpu_s": 1000 * batch / best[0],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subscriptions", type=int, default=100_000)
    ap.add_argument("--decay", type=float, default=0.88)
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--rate", type=float, default=10_000, help="offered load, events/s")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--warmup", type=float, default=20, help="seconds reported apart as start-up")
    ap.add_argument("--min-interval-s", type=float, default=10, help="channels job: least time between re-clusterings")
    ap.add_argument(
        "--reader-after",
        action="store_true",
        help="start the reader acting for every subscriber after the load (it takes a core of the two)",
    )
    ap.add_argument("--clients", type=int, default=4, help="real Subscriber clients beside the reader")
    ap.add_argument(
        "--method", default=JOB_METHOD, help="channels job: re-clustering method (default: the job's, %(default)s)"
    )
    ap.add_argument("--quick", action="store_true", help="5k subscriptions, 2,000 events/s for 15 s")
    ap.add_argument(
        "--worker-steps",
        type=int,
        metavar="EVENTS",
        help="only time the workers' side in this process, in batches of EVENTS events (worker_steps)",
    )
    ap.add_argument("--bootstrap-servers", help="use this cluster instead of starting a broker")
    ap.add_argument("--verbose", action="store_true", help="print the jobs' per-batch lines")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    if args.quick:
        args.subscriptions, args.rate, args.seconds, args.warmup = 5_000, 2_000, 15, 5
    if args.worker_steps:
        r = worker_steps(args.subscriptions, args.decay, args.k, args.worker_steps, 5)
        print(
            f"workers' side in-process: Gryphon, {args.subscriptions:,} subscriptions, decay {args.decay}, K = "
            f"{args.k} (a spectral-ncut plan), batches of {r['batch']:,} events, best of 5 (CPU): "
            f"{r['events_per_cpu_s']:,.0f} events per CPU second; per 1,000 events "
            f"{r['cpu_ms_per_1000_events']:.1f} ms "
            f"(decode {r['decode']:.1f}, match {r['match']:.1f}, encode {r['encode']:.1f}, deliver "
            f"{r['deliver']:.1f} ms wall); {r['channel_pairs_per_event']:.1f} channels and "
            f"{r['output_bytes_per_event']:,.0f} output bytes per event",
            flush=True,
        )
        return 0
    from routing.monitors import ChannelMonitorConfig
    from streaming.channels_job import ChannelsConfig
    from streaming.channels_job import build_query as channels_query
    from streaming.matching_job import MatchingConfig
    from streaming.matching_job import build_query as matching_query
    from streaming.session import SparkConfig, build_session

    jars = ensure_jars()
    work = tempfile.TemporaryDirectory(prefix="bench-delivery-")
    w = workload(args.subscriptions, args.decay)
    subs = w.subscriptions()
    filters = {s["subscription_id"]: s["filter"] for s in subs}
    print(
        f"workload: Gryphon (Opyrchal et al. 2000), {len(subs):,} subscriptions, decay {args.decay}, K = {args.k}; "
        f"{args.rate:,.0f} events/s for {args.seconds:g} s; matching job (with delivery) and channels job in one "
        "Spark application, local[2] on this 2-core machine; one local KRaft broker",
        flush=True,
    )
    results: dict[str, Any] = {}
    with work, kafka.broker_or(args.bootstrap_servers, jars, heap="1g") as conn:
        spark = build_session(SparkConfig(app_name="bench-delivery"), jars)
        # every trigger's progress report of the run (Spark keeps 100 by default), for batch_breakdown
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "5000")
        prefix = new_topics(conn)
        load_subscriptions(conn, prefix, w)
        root = Path(work.name)
        m_query, m_handler = matching_query(
            spark, MatchingConfig(conn=conn, checkpoint=root / "matching", topic_prefix=prefix), quiet=not args.verbose
        )
        monitor = ChannelMonitorConfig(k=args.k, min_interval_ms=args.min_interval_s * 1000, method=args.method)
        c_cfg = ChannelsConfig(
            conn=conn, checkpoint=root / "channels", topic_prefix=prefix, monitor=monitor, trigger_interval="2 seconds"
        )
        c_query, c_handler = channels_query(spark, c_cfg, quiet=not args.verbose)
        queries = (m_query, c_query)
        try:
            started = time.monotonic()

            def wait(done: Any, what: str, limit: float = 900) -> None:
                deadline = time.monotonic() + limit
                while not done():
                    for q in queries:
                        if not q.isActive:
                            raise RuntimeError(f"a job stopped while waiting for {what}: {q.exception()}")
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"timed out waiting for {what}")
                    time.sleep(0.5)

            wait(lambda: m_handler.history and m_handler.history[-1].subscriptions >= len(subs), "the table")
            warm = w.batch(2000)
            for e in warm:  # published now: the channels job's clock is the events' time
                e["event_id"] = "warm-" + e["event_id"]
                e["published_at"] = int(time.time() * 1000)
            sink = KafkaSink(conn, prefix)
            sink.events(EventColumns.from_records(warm))
            sink.close()
            wait(lambda: sum(b.events for b in m_handler.history) >= len(warm), "the warm-up events")
            # steady state: the warm-up's matches re-clustered the join placements, and the matching
            # job delivers by that version before the load starts
            wait(lambda: c_handler.monitor.counters["reclusters"] >= 1, "the first re-clustering")
            target = c_handler.monitor.version
            wait(lambda: m_handler.delivery is not None and m_handler.delivery.assignment.version >= target, "install")
            print(
                f"  start-up (table, warm-up, re-clustered version {target} installed): "
                f"{time.monotonic() - started:.0f} s",
                flush=True,
            )
            run_started_ms = int(time.time() * 1000)
            client_filters = {f"client-{i}": subs[i * 997 % len(subs)]["filter"] for i in range(args.clients)}
            ctx = multiprocessing.get_context("spawn")
            expected = int(args.rate * args.seconds)
            with concurrent.futures.ProcessPoolExecutor(3, mp_context=ctx) as pool:
                clients = (
                    pool.submit(_clients, conn.bootstrap_servers, prefix, client_filters, args.seconds + 60)
                    if args.clients
                    else None
                )
                reader_args = (
                    _reader,
                    conn.bootstrap_servers,
                    prefix,
                    args.k,
                    {**filters, **client_filters},
                    list(client_filters),
                    expected,
                    args.seconds + 600,
                )
                reader = None if args.reader_after else pool.submit(*reader_args)
                time.sleep(10)  # the reader builds its index, the clients subscribe
                cpu = CpuByRole(os.getpid())
                cpu.start()
                producer = pool.submit(
                    _paced_producer,
                    conn.bootstrap_servers,
                    prefix + EVENTS_TOPIC,
                    dict(w.params, lifetime_ms=2000),
                    args.rate,
                    args.seconds,
                    max(1, expected),
                )
                while not producer.done():
                    for q in queries:
                        if not q.isActive:
                            raise RuntimeError(f"a job stopped during the run: {q.exception()}")
                    time.sleep(1)
                cpu.stop()
                if reader is None:  # read everything now: the jobs had the 2 cores to themselves
                    reader = pool.submit(*reader_args)
                sent = producer.result()
                got = reader.result()
                client_out = clients.result() if clients is not None else {"got": {}, "lags": []}
                client_got = client_out["got"]
            progress = [json.loads(p.json) for p in m_query.recentProgress]
        finally:
            for q in queries:
                q.stop()
            if m_handler.delivery is not None:
                m_handler.delivery.close()
        channels_counters = dict(c_handler.monitor.counters)
        channels_counters["method"] = c_handler.monitor.method
        m_history = list(m_handler.history)
        spark.stop()
    # what each client should have received: the events the reader kept for its subscription,
    # which (when every count below agrees) are exactly those whose Match record names it
    match_sids = {sid: {e for e in got["watched"][sid] if not e.startswith("warm-")} for sid in client_filters}

    def steady_and_early(pairs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
        cut = min((p for p, _ in pairs), default=0) + args.warmup * 1000
        steady = np.array([ms for p, ms in pairs if p >= cut], dtype=float)
        return steady, np.array([ms for p, ms in pairs if p < cut], dtype=float)

    def pct(a: np.ndarray, q: float) -> float:
        return float(np.percentile(a, q)) if len(a) else float("nan")

    steady, early = steady_and_early(got["latencies"])
    written, _ = steady_and_early(got["written"])
    client_lat, _ = steady_and_early(client_out["lags"])
    receipts = np.array(got["first_receipts"], dtype=float)
    span_s = (receipts[-1] - receipts[0]) / 1000 if len(receipts) > 1 else float("nan")
    arrivals = np.array(got["first_written"], dtype=float)
    arrival_span_s = (arrivals[-1] - arrivals[0]) / 1000 if len(arrivals) > 1 else float("nan")
    waste = 1 - got["useful"] / max(1, got["deliveries"])
    busy = [b for b in m_history if b.events and b.started_at_ms >= run_started_ms]
    job_s = sum(b.duration_ms for b in busy) / 1000
    results = {
        "sent": sent["sent"],
        "producer_s": sent["seconds"],
        "versions": got["versions"],
        "channels_job": channels_counters,
        "match_records": got["match_records"],
        "events_with_matches": got["events_with_matches"],
        "equal": got["equal"],
        "lost": got["lost"],
        "extra": got["extra"],
        "deliveries": got["deliveries"],
        "useful": got["useful"],
        "waste_ratio": waste,
        "channel_records": got["channel_records"],
        "channel_records_per_event": got["channel_records"] / max(1, got["events_with_matches"]),
        "channel_kafka_records": got["kafka_records"],
        "matching_job_events_per_busy_s": sum(b.events for b in busy) / job_s if job_s else 0.0,
        "matching_job_median_batch": (
            float(np.median([b.events for b in busy])) if busy else 0.0,
            float(np.median([b.duration_ms for b in busy])) if busy else 0.0,
        ),
        "breakdown": batch_breakdown(m_history, progress, run_started_ms),
        "events_reaching_subscribers_per_s": (
            len(arrivals) / arrival_span_s if arrival_span_s == arrival_span_s and arrival_span_s > 0 else 0.0
        ),
        "reader_events_per_s": len(receipts) / span_s if span_s == span_s and span_s > 0 else 0.0,
        "written_p50_ms": pct(written, 50),
        "written_p99_ms": pct(written, 99),
        "p50_ms": pct(steady, 50),
        "p99_ms": pct(steady, 99),
        "startup_p99_ms": pct(early, 99),
        "client_p50_ms": pct(client_lat, 50),
        "client_p99_ms": pct(client_lat, 99),
        "client_events": len(client_lat),
        "cores_during_load": {k: round(v, 3) for k, v in cpu.cores().items()},
        "clients": {
            sid: {
                "received": len(ids),
                "distinct": len(set(ids)),
                "matched": len(match_sids[sid]),
                "same": set(ids) == match_sids[sid],
            }
            for sid, ids in client_got.items()
        },
    }
    r = results
    print(
        f"  sent {r['sent']:,} events in {r['producer_s']:.1f} s; versions planned: {r['versions']} "
        f"(channels job: {channels_counters})\n"
        f"  matching job with delivery: {r['matching_job_events_per_busy_s']:,.0f} events per second of batch time; "
        f"median batch {r['matching_job_median_batch'][0]:,.0f} events in {r['matching_job_median_batch'][1]:,.0f} ms; "
        f"{r['channel_records_per_event']:.1f} channel deliveries per matched event "
        f"(in {r['channel_kafka_records']:,} Kafka records with the markers)\n"
        f"  latency after {args.warmup:g} s, published_at -> the delivery's Kafka timestamp (written to the channel): "
        f"p50 {r['written_p50_ms']:,.0f} ms, p99 {r['written_p99_ms']:,.0f} ms\n"
        f"  latency published_at -> the real clients' yield: p50 {r['client_p50_ms']:,.0f} ms, p99 "
        f"{r['client_p99_ms']:,.0f} ms over {r['client_events']:,} events\n"
        f"  latency published_at -> the reader acting for every subscriber (one process): p50 {r['p50_ms']:,.0f} ms, "
        f"p99 {r['p99_ms']:,.0f} ms (start-up p99 {r['startup_p99_ms']:,.0f} ms), "
        f"reading {r['reader_events_per_s']:,.0f} events/s\n"
        f"  events reaching subscribers (some member wanted them; by their first channel write's Kafka "
        f"timestamp): {r['events_reaching_subscribers_per_s']:,.0f}/s\n"
        f"  waste in flight: {r['useful']:,} wanted of {r['deliveries']:,} member deliveries "
        f"(waste ratio {waste:.3f})\n"
        f"  counts: {r['equal']:,} of {r['match_records']:,} events delivered exactly as their Match "
        f"record says ({r['lost']:,} short, {r['extra']:,} over)\n"
        f"  real clients: {r['clients']}\n"
        f"  cores used during the load, by role (of the machine's {os.cpu_count()}): "
        + ", ".join(f"{k} {v:.2f}" for k, v in r["cores_during_load"].items())
        + "\n"
        f"{_format_breakdown(r['breakdown'])}",
        flush=True,
    )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    ok = results["lost"] == 0 and results["extra"] == 0 and all(c["same"] for c in results["clients"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
