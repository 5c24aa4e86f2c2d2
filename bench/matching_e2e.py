"""End-to-end benchmark of the matching job: Kafka -> Spark (local[2]) -> Kafka on this machine.

For each Gryphon decay (0.78: ~2% match rate, 0.88: ~0.2%), with ``--subscriptions`` Gryphon
subscriptions (default 100,000):

1. **Subscription load.** The subscriptions go to the compacted topic; the job runs available-now
   once on them alone: reading, validating (parsing) every filter on the driver, persisting the
   table and building the index in the Python workers.
2. **Sustained throughput.** A backlog of ``--events`` events goes to the events topic; the job
   restarts on the same checkpoint (so the table is restored from its snapshot and every worker
   rebuilds its index from the broadcast) and drains the backlog available-now with
   ``--per-batch`` records per micro-batch. "Sustained" is events over batch time in the second
   half of the batches (the first ones pay for start-up), as in ``bench/ingest.py``. The default
   backlog (``DEFAULT_BACKLOG``) is sized for a minute and a half of work: the Spark JVM's JIT
   compilers keep compiling Spark's per-batch code (planning, scheduling, the sinks) for a minute
   or more after a start, on the same two cores, so a backlog of a few seconds measures the
   warm-up, not the job. The report also prints the rate in each third of the run after the
   first batch (the restart), which shows the warm-up.
3. **Ceiling.** Pre-encoded ``Match`` records of the throughput run's average size go to the
   broker from librdkafka in a tight loop (lz4, as the job writes): what this machine can take in
   at all, with no matching and no Spark; the job cannot write faster.
4. **Latency at an offered load.** On fresh topics with the same subscriptions, the job runs
   continuously (trigger "0 seconds"); after 2,000 warm-up events (which make the Python workers
   build their indexes) a producer process publishes ``--rate`` events/s for
   ``--seconds`` s with ``published_at`` = the wall clock at send (in chunks of 1/20 s, generated
   before the clock starts and encoded columnar as sent, so that the producer takes little of
   the 2 cores the job runs on); a consumer process reads every
   ``Match`` record and takes its Kafka timestamp (set when Spark's producer sent it) minus the
   event's ``published_at``. p50 and p99 are over events published after ``--warmup`` s (the
   steady state); the same for the events published before that (start-up) is printed too.
   ``--modes exact,direct`` runs this phase once per mode of the matching job, one after the
   other on fresh topics: ``exact`` (the default) and ``direct`` (``streaming.matching_direct``,
   without delivery; docs/decisions/direct-matching.md). Before the first of them, one run of
   ``--jvm-warmup`` s of the first mode at the same rate is made and only summarised ("JVM
   warm-up run"): the Spark JVM compiles its per-batch code during its first minutes, so without
   it whichever mode runs first reads slower (docs/results/latency.md).
5. **Oracle.** ``BruteForceIndex`` over the same subscriptions is timed on a few events and its
   answers compared with the job's ``Match`` records for those events.

Output volume matters: every valid event gets one ``Match`` record naming every matching id, so at
2% of 100k subscriptions a record carries ~2,200 ids (~15 kB); the report prints matches/s and
the estimated bytes/s the job writes.

Run: ``.venv/bin/python bench/matching_e2e.py [--subscriptions 100000] [--decays 0.78,0.88]
[--events N] [--per-batch 100000] [--rate 10000] [--seconds 90] [--warmup 30] [--modes exact,direct]
[--quick]``; the latency of both modes alone: ``--decays 0.88 --skip throughput,ceiling,oracle --modes
exact,direct``.
Readings and their history: docs/results/matching.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import itertools
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from infra import kafka
from infra.connection import KafkaConnection, arrived
from infra.jars import ensure_jars
from infra.topics import ensure_topics
from producers.columns import EventColumns
from producers.kafka_writer import KafkaWriter
from producers.sinks import KafkaSink
from producers.workloads import GryphonWorkload
from schemas.codec import codec_for
from schemas.topics import EVENTS_TOPIC, MATCHES_TOPIC

BROKERS, SUBS_PER_CLIENT = 80, 5
# Backlog of the throughput run per decay when --events is not given: sized for about 90 s of
# draining at the job's rate for that decay (docs/results/matching.md)
DEFAULT_BACKLOG = {0.78: 500_000, 0.88: 3_000_000}


def default_backlog(decay: float) -> int:
    """``DEFAULT_BACKLOG`` for the nearest listed decay at or below ``decay``, 500,000 below all.

    >>> default_backlog(0.88), default_backlog(0.9), default_backlog(0.8), default_backlog(0.5)
    (3000000, 3000000, 500000, 500000)
    """
    below = [d for d in DEFAULT_BACKLOG if d <= decay]
    return DEFAULT_BACKLOG[max(below)] if below else 500_000


def thirds(batches: list[tuple[int, float]]) -> list[float]:
    """Events/s (events over batch time) in each third of ``(events, ms)`` batches, in order.

    >>> thirds([(100, 1000), (100, 500), (100, 250)])
    [100.0, 200.0, 400.0]
    """
    n = len(batches)
    cuts = [0, n // 3, 2 * n // 3, n]
    out = []
    for a, b in itertools.pairwise(cuts):
        part = batches[a:b]
        ms = sum(m for _, m in part)
        out.append(sum(e for e, _ in part) / (ms / 1000) if ms else float("nan"))
    return out


def workload(subscriptions: int, decay: float, seed: int = 0) -> GryphonWorkload:
    clients = max(1, subscriptions // (BROKERS * SUBS_PER_CLIENT))
    return GryphonWorkload(
        decay=decay, brokers=BROKERS, clients_per_broker=clients, subs_per_client=SUBS_PER_CLIENT, seed=seed
    )


def match_rate(w: GryphonWorkload, events: int = 200) -> float:
    rng = np.random.default_rng(12345)
    vals = rng.choice(np.arange(1, w.v + 1), size=(events, w.k), p=w.p)
    region = rng.integers(1, w.regions + 1, events)
    return float(w.match_counts(vals, region).sum()) / (events * len(w.sub_matrix))


def new_topics(conn: KafkaConnection) -> str:
    prefix = f"bench{uuid.uuid4().hex[:6]}."
    ensure_topics(conn, prefix)
    return prefix


def load_subscriptions(conn: KafkaConnection, prefix: str, w: GryphonWorkload) -> float:
    sink = KafkaSink(conn, prefix)
    start = time.monotonic()
    sink.subscriptions(w.subscriptions())
    sink.close()
    return time.monotonic() - start


def produce_backlog(conn: KafkaConnection, prefix: str, w: GryphonWorkload, n: int) -> tuple[float, int]:
    sink = KafkaSink(conn, prefix)
    start = time.monotonic()
    done = 0
    while done < n:
        chunk = w.columns(min(20_000, n - done))
        sink.events(chunk)
        done += len(chunk)
    written = sink.close()
    return time.monotonic() - start, int(written["bytes"])


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def match_head(value: bytes) -> tuple[bytes, int]:
    """(event_id, published_at) of an encoded Match, without decoding the id list."""
    n, pos = _varint(value, 10)
    eid = value[pos : pos + n]
    pos += n
    n, pos = _varint(value, pos)
    published_at, _ = _varint(value, pos + n)
    return eid, published_at


def _paced_producer(
    bootstrap: str, topic: str, params: dict[str, Any], rate: float, seconds: float, sample_every: int
) -> dict[str, Any]:
    """Publish ``rate * seconds`` events at ``rate``/s, ``published_at`` = now; return what was sent
    and the attributes of every ``sample_every``-th event."""
    w = GryphonWorkload(**params)
    writer = KafkaWriter(KafkaConnection(bootstrap), **{"linger.ms": 1})
    total, chunk = int(rate * seconds), max(1, int(rate / 20))
    # The events are generated before the clock starts and encoded (columnar) as each chunk is
    # sent, with published_at = now, so that the producer takes little of the 2 cores the job
    # runs on (docs/results/matching.md)
    chunks = [w.columns(min(chunk, total - lo)) for lo in range(0, total, chunk)]
    chunks[0].avro()  # compiles the encoder
    samples: dict[str, dict[str, Any]] = {}
    start = time.time()
    sent = 0
    for cols in chunks:
        ahead = start + sent / rate - time.time()
        if ahead > 0:
            time.sleep(ahead)
        n = len(cols)
        cols = dataclasses.replace(cols, published_at=np.full(n, int(time.time() * 1000), np.int64))
        writer.send_many(topic, cols.keys(), cols.avro())
        picked = [j for j in range(n) if (sent + j) % sample_every == 0]
        if picked:
            records = cols.records()
            samples.update({records[j]["event_id"]: records[j]["attributes"] for j in picked})
        sent += n
    report = writer.flush()
    return {"sent": sent, "failed": report.failed, "seconds": time.time() - start, "samples": samples}


def _latency_consumer(bootstrap: str, topic: str, expected: int, deadline_s: float) -> dict[str, Any]:
    """Read Match records until ``expected`` distinct events were seen (or the deadline): per event
    its ``published_at`` and latency (first record), and the records and bytes read."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 16 << 20,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
    seen: dict[bytes, tuple[int, int]] = {}
    nbytes = records = 0
    stop = time.time() + deadline_s
    try:
        while len(seen) < expected and time.time() < stop:
            for msg in arrived(consumer, 10_000, 0.5):
                if msg.error() is not None:
                    continue
                value = msg.value()
                records += 1
                nbytes += len(value)
                eid, published_at = match_head(value)
                if eid not in seen and not eid.startswith(b"warm-"):
                    seen[eid] = (published_at, msg.timestamp()[1] - published_at)
    finally:
        consumer.close()
    return {
        "seen": len(seen),
        "records": records,
        "bytes": nbytes,
        "published_latency": list(seen.values()),
    }


def kafka_ceiling(conn: KafkaConnection, w: GryphonWorkload, ids_per_event: float, records: int = 40_000) -> dict:
    """The rate at which this machine takes ``Match`` records of this workload's size into the
    broker with nothing else to do: pre-encoded records (``ids_per_event`` ids) sent by
    librdkafka in a tight loop, compressed as the job compresses (lz4). No job can write faster
    than this on the same machine."""
    from confluent_kafka import Producer

    rng = np.random.default_rng(7)
    k = max(0, min(len(w.sub_matrix), round(ids_per_event)))
    codec = codec_for("Match")
    pool = []
    for j in range(200):
        ids = sorted(f"g{i}" for i in rng.choice(len(w.sub_matrix), k, replace=False))
        pool.append(
            codec.encode({"event_id": f"c-{j}", "publisher_id": "gp0", "published_at": 1, "subscription_ids": ids})
        )
    topic = new_topics(conn) + MATCHES_TOPIC
    producer = Producer(
        {
            "bootstrap.servers": conn.bootstrap_servers,
            "compression.type": "lz4",
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "queue.buffering.max.kbytes": 1 << 20,
        }
    )
    start = time.monotonic()
    nbytes = 0
    for i in range(records):
        value = pool[i % len(pool)]
        nbytes += len(value)
        while True:
            try:
                producer.produce(topic, value, f"c-{i}".encode())
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush()
    wall = time.monotonic() - start
    return {"records_per_s": records / wall, "mb_per_s": nbytes / wall / 1e6, "record_bytes": nbytes / records}


def bench_throughput(spark: Any, conn: KafkaConnection, w: GryphonWorkload, args: argparse.Namespace) -> dict:
    from streaming.matching_job import MatchingConfig, run

    prefix = new_topics(conn)
    out: dict[str, Any] = {"subs_produce_s": load_subscriptions(conn, prefix, w)}
    ckpt = Path(tempfile.mkdtemp(prefix="throughput-", dir=args.workdir))
    cfg = MatchingConfig(conn=conn, checkpoint=ckpt, topic_prefix=prefix, available_now=True)
    start = time.monotonic()
    first = run(spark, cfg, quiet=True)
    out["subs_load_s"] = time.monotonic() - start
    out["subs_load_batches"] = [(b.subscription_records, round(b.duration_ms)) for b in first]
    backlog = args.events if args.events is not None else default_backlog(w.params["decay"])
    out["backlog_produce_s"], out["backlog_bytes"] = produce_backlog(conn, prefix, w, backlog)
    cfg = MatchingConfig(
        conn=conn, checkpoint=ckpt, topic_prefix=prefix, available_now=True, max_offsets_per_trigger=args.per_batch
    )
    start = time.monotonic()
    history = run(spark, cfg, quiet=not args.verbose)
    wall = time.monotonic() - start
    batches = [b for b in history if b.events]
    steady = batches[len(batches) // 2 :]
    steady_ms = sum(b.duration_ms for b in steady)
    events = sum(b.events for b in batches)
    out.update(
        {
            "events": events,
            "matches": sum(b.matches for b in batches),
            "batches": len(batches),
            "wall_s": wall,
            "overall_per_s": events / wall,
            "sustained_per_s": sum(b.events for b in steady) / (steady_ms / 1000) if steady_ms else float("nan"),
            "sustained_matches_per_s": sum(b.matches for b in steady) / (steady_ms / 1000) if steady_ms else 0.0,
            "median_batch_ms": statistics.median(b.duration_ms for b in batches) if batches else 0.0,
            "thirds_per_s": thirds([(b.events, b.duration_ms) for b in batches[1:]]),
            "batch_rows_ms": [(b.events, round(b.duration_ms), round(b.write_ms)) for b in batches],
        }
    )
    return out


def bench_latency(
    spark: Any, conn: KafkaConnection, w: GryphonWorkload, args: argparse.Namespace, mode: str = "exact"
) -> dict:
    """The latency phase (module docstring, 4.) with the matching job in ``mode``: ``exact``
    (``streaming.matching_job``) or ``direct`` (``streaming.matching_direct``, no delivery)."""
    from streaming import matching_direct
    from streaming.matching_job import BatchStats, MatchingConfig, build_query

    prefix = new_topics(conn)
    load_subscriptions(conn, prefix, w)
    ckpt = Path(tempfile.mkdtemp(prefix="latency-", dir=args.workdir))
    history: list[BatchStats] = []  # the exact mode's micro-batches
    if mode == "direct":
        cfg = MatchingConfig(conn=conn, checkpoint=ckpt, topic_prefix=prefix, deliver=False)
        direct = matching_direct.build_queries(spark, cfg)
        query, stop = direct.matching, direct.stop

        def loaded(n: int) -> bool:  # the rejections query has judged them (the workers load on first use)
            return direct.handler.records >= n

        def matched() -> int:
            return direct.events()

    else:
        cfg = MatchingConfig(conn=conn, checkpoint=ckpt, topic_prefix=prefix)
        query, handler = build_query(spark, cfg, quiet=not args.verbose)
        stop, history = query.stop, handler.history

        def loaded(n: int) -> bool:
            return bool(history and history[-1].subscriptions >= n)

        def matched() -> int:
            return sum(b.events for b in history)

    try:
        deadline = time.monotonic() + 900
        while not loaded(len(w.sub_matrix)):
            if not query.isActive or time.monotonic() > deadline:
                raise RuntimeError(f"the job did not load the subscriptions: {query.exception()}")
            time.sleep(0.5)
        # warm-up: the first events after a start make every Python worker build its index from the
        # snapshot (tens of seconds at 100k subscriptions); that is start-up, not steady-state latency
        warm = w.batch(2000)
        for e in warm:
            e["event_id"] = "warm-" + e["event_id"]
        sink = KafkaSink(conn, prefix)
        sink.events(EventColumns.from_records(warm))
        sink.close()
        while matched() < len(warm):
            if not query.isActive or time.monotonic() > deadline:
                raise RuntimeError(f"the job did not match the warm-up events: {query.exception()}")
            time.sleep(0.5)
        warmup_batches = len(history)
        ctx = multiprocessing.get_context("spawn")
        expected = int(args.rate * args.seconds)
        samples = args.oracle_events
        with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
            consumer = pool.submit(
                _latency_consumer,
                conn.bootstrap_servers,
                prefix + MATCHES_TOPIC,
                expected,
                args.seconds + 300,
            )
            producer = pool.submit(
                _paced_producer,
                conn.bootstrap_servers,
                prefix + EVENTS_TOPIC,
                dict(w.params, lifetime_ms=1000),
                args.rate,
                args.seconds,
                max(1, expected // max(1, samples)),
            )
            sent = producer.result()
            got = consumer.result()
    finally:
        stop()
    start_ms = min(p for p, _ in got["published_latency"]) if got["published_latency"] else 0
    cut = start_ms + args.warmup * 1000
    lat = np.array([lat for p, lat in got["published_latency"] if p >= cut], dtype=float)
    early = np.array([lat for p, lat in got["published_latency"] if p < cut], dtype=float)
    batches = [b for b in history[warmup_batches:] if b.events]
    return {
        "sent": sent["sent"],
        "producer_s": sent["seconds"],
        "received_events": got["seen"],
        "records": got["records"],
        "bytes": got["bytes"],
        "p50_ms": float(np.percentile(lat, 50)) if len(lat) else float("nan"),
        "p99_ms": float(np.percentile(lat, 99)) if len(lat) else float("nan"),
        "max_ms": float(lat.max()) if len(lat) else float("nan"),
        "measured": len(lat),
        "startup_p50_ms": float(np.percentile(early, 50)) if len(early) else float("nan"),
        "startup_p99_ms": float(np.percentile(early, 99)) if len(early) else float("nan"),
        "startup_events": len(early),
        "median_batch_ms": statistics.median(b.duration_ms for b in batches) if batches else 0.0,
        "median_batch_events": statistics.median(b.events for b in batches) if batches else 0,
        "samples": sent["samples"],
        "matches_topic": prefix + MATCHES_TOPIC,
    }


def bench_oracle(w: GryphonWorkload, samples: dict[str, dict[str, Any]], args: argparse.Namespace) -> dict:
    """Time ``BruteForceIndex`` on the sampled events; check the job's Match records against it."""
    from routing.matching.index import BruteForceIndex

    oracle = BruteForceIndex()
    start = time.monotonic()
    for s in w.subscriptions():
        oracle.add(s["subscription_id"], s["filter"])
    build_s = time.monotonic() - start
    ids = list(samples)[: args.oracle_events]
    if not ids:
        return {"build_s": build_s, "events": 0}
    start = time.monotonic()
    answers = oracle.match([samples[i] for i in ids]).all_ids()
    per_event = (time.monotonic() - start) / len(ids)
    return {
        "build_s": build_s,
        "events": len(ids),
        "s_per_event": per_event,
        "answers": dict(zip(ids, answers, strict=True)),
    }


def check_against_oracle(job: dict[str, list[str]], answers: dict[str, list[str]]) -> str:
    wrong = [eid for eid, ids in answers.items() if eid in job and job[eid] != ids]
    checked = sum(1 for eid in answers if eid in job)
    return f"{checked} checked, {len(wrong)} differ" + (f" (e.g. {wrong[0]})" if wrong else "")


def read_matches_for(
    conn: KafkaConnection, topic: str, wanted: set[str], timeout_s: float = 300
) -> dict[str, list[str]]:
    """The subscription ids of the wanted events, scanning the matches topic (minimal parse)."""
    from confluent_kafka import Consumer, TopicPartition

    from schemas.codec import decode
    from streaming.readers import watermarks

    consumer = Consumer({"bootstrap.servers": conn.bootstrap_servers, "group.id": "bench-oracle"})
    found: dict[str, list[str]] = {}
    try:
        ends = {p: watermarks(consumer, topic, p)[1] for p in (0, 1)}
        consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
        done: set[int] = {p for p, e in ends.items() if e == 0}
        stop = time.time() + timeout_s
        while len(done) < 2 and len(found) < len(wanted) and time.time() < stop:
            for msg in arrived(consumer, 10_000, 0.5):
                eid = match_head(msg.value())[0].decode()
                if eid in wanted:
                    found[eid] = decode(msg.value(), "Match")[1]["subscription_ids"]
                if msg.offset() >= ends[msg.partition()] - 1:
                    done.add(msg.partition())
    finally:
        consumer.close()
    return found


def jvm_warmup(spark: Any, conn: KafkaConnection, w: GryphonWorkload, args: argparse.Namespace, mode: str) -> None:
    """One latency run of ``mode`` for ``--jvm-warmup`` s whose numbers are only summarised
    (module docstring, 4.): the JVM's first minutes of micro-batches, kept out of every reading."""
    warm = argparse.Namespace(**{**vars(args), "seconds": args.jvm_warmup, "warmup": 0, "oracle_events": 1})
    lat = bench_latency(spark, conn, w, warm, mode)
    print(
        f"  JVM warm-up run ({mode} mode, {args.jvm_warmup:g} s at {args.rate:,.0f} events/s, not a reading): "
        f"p50 {lat['p50_ms']:,.0f} ms, p99 {lat['p99_ms']:,.0f} ms; {lat['received_events']:,} of "
        f"{lat['sent']:,} events matched",
        flush=True,
    )


def latency_phase(
    spark: Any, conn: KafkaConnection, w: GryphonWorkload, args: argparse.Namespace, mode: str, oracle: bool, res: dict
) -> None:
    """Run, print and record (in ``res``) the latency phase in ``mode``, then the oracle check."""
    lat = bench_latency(spark, conn, w, args, mode)
    res[f"latency-{mode}"] = {k: v for k, v in lat.items() if k != "samples"}
    batches = (
        f"; median batch {lat['median_batch_events']:,.0f} events in {lat['median_batch_ms']:,.0f} ms"
        if lat["median_batch_ms"]
        else ""
    )
    print(
        f"  latency ({mode} mode) at {args.rate:,.0f} events/s offered for {args.seconds:g} s "
        f"(published_at -> Match record's Kafka timestamp, after {args.warmup:g} s warm-up): "
        f"p50 {lat['p50_ms']:,.0f} ms, p99 {lat['p99_ms']:,.0f} ms, max {lat['max_ms']:,.0f} ms over "
        f"{lat['measured']:,} events (start-up, the first {args.warmup:g} s: p50 "
        f"{lat['startup_p50_ms']:,.0f} ms, p99 {lat['startup_p99_ms']:,.0f} ms over "
        f"{lat['startup_events']:,} events); {lat['received_events']:,} of {lat['sent']:,} events matched; "
        f"{lat['bytes'] / max(lat['producer_s'], 1e-9) / 1e6:,.1f} MB/s of Match records{batches}",
        flush=True,
    )
    if not oracle:
        return
    o = bench_oracle(w, lat["samples"], args)
    res[f"oracle-{mode}"] = {k: v for k, v in o.items() if k != "answers"}
    if o["events"]:
        job = read_matches_for(conn, lat["matches_topic"], set(o["answers"]))
        print(
            f"  oracle (BruteForceIndex, Filter.matches on every subscription): "
            f"{o['s_per_event'] * 1000:,.0f} ms per event = {1 / o['s_per_event']:,.1f} events/s "
            f"(built in {o['build_s']:.1f} s); job ({mode} mode) vs oracle on {o['events']} sampled events: "
            f"{check_against_oracle(job, o['answers'])}",
            flush=True,
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subscriptions", type=int, default=100_000)
    ap.add_argument("--decays", default="0.78,0.88", help="Gryphon decays to run (default: %(default)s)")
    ap.add_argument(
        "--events", type=int, help="backlog of the throughput run (default: DEFAULT_BACKLOG, ~90 s of draining)"
    )
    ap.add_argument("--per-batch", type=int, default=100_000, help="maxOffsetsPerTrigger of the throughput run")
    ap.add_argument("--rate", type=float, default=10_000, help="offered load of the latency run, events/s")
    ap.add_argument("--seconds", type=float, default=90, help="length of the latency run")
    ap.add_argument(
        "--warmup", type=float, default=30, help="latency run: seconds reported apart as start-up (JIT warm-up)"
    )
    ap.add_argument(
        "--modes",
        default="exact",
        help="matching job modes of the latency phase, side by side: exact, direct (docs/decisions/"
        "direct-matching.md) (default: %(default)s)",
    )
    ap.add_argument(
        "--jvm-warmup",
        type=float,
        default=60,
        help="seconds of an unreported latency run of the first mode before the readings, 0 for none "
        "(default: %(default)s)",
    )
    ap.add_argument("--oracle-events", type=int, default=5, help="events timed and checked with the oracle")
    ap.add_argument("--skip", default="", help="comma-separated phases to skip: throughput, ceiling, latency, oracle")
    ap.add_argument("--quick", action="store_true", help="small sizes: 5k subscriptions, 20k events, 10 s")
    ap.add_argument("--bootstrap-servers", help="use this cluster instead of starting a broker")
    ap.add_argument("--verbose", action="store_true", help="print the job's per-batch lines")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    if args.quick:
        args.subscriptions, args.events, args.seconds, args.warmup, args.per_batch = 5_000, 20_000, 10, 3, 10_000
        args.jvm_warmup = min(args.jvm_warmup, 5)
    skip = set(filter(None, args.skip.split(",")))

    from streaming.session import SparkConfig, build_session

    jars = ensure_jars()
    results: dict[str, Any] = {}
    work = tempfile.TemporaryDirectory(prefix="bench-matching-")  # the jobs' checkpoints
    args.workdir = work.name
    with work, kafka.broker_or(args.bootstrap_servers, jars, heap="1g") as conn:
        spark = build_session(SparkConfig(app_name="bench-matching"), jars)
        warmed = False
        for decay in (float(d) for d in args.decays.split(",")):
            w = workload(args.subscriptions, decay)
            rate = match_rate(w)
            print(
                f"\nworkload: Gryphon (Opyrchal et al. 2000), {len(w.sub_matrix):,} subscriptions "
                f"({BROKERS} brokers x {w.params['clients_per_broker']} clients x {SUBS_PER_CLIENT}), 15 attributes x "
                f"4 Zipf values, decay {decay}: match rate {rate:.3%} (~{rate * len(w.sub_matrix):,.0f} ids per "
                "event); single-object Avro; topics with 2 partitions on a local 1-node KRaft broker; Spark local[2] "
                "on this 2-core machine",
                flush=True,
            )
            res: dict[str, Any] = {"match_rate": rate}
            if "throughput" not in skip:
                t = bench_throughput(spark, conn, w, args)
                res["throughput"] = t
                ids_per_event = t["matches"] / max(1, t["events"])
                id_bytes = 1 + statistics.mean(len(f"g{i}") for i in range(len(w.sub_matrix)))  # length + text
                print(
                    f"  subscription load (compacted topic -> validated table -> worker indexes): "
                    f"{t['subs_load_s']:.1f} s (batches: records, ms {t['subs_load_batches']})"
                )
                print(
                    f"  throughput, backlog of {t['events']:,} events, maxOffsetsPerTrigger {args.per_batch:,}: "
                    f"sustained {t['sustained_per_s']:,.0f} events/s ({t['sustained_matches_per_s']:,.0f} matches/s, "
                    f"~{t['sustained_matches_per_s'] * id_bytes / 1e6:,.1f} MB/s of Match records) over the second "
                    f"half of {t['batches']} batches; overall incl. restart {t['overall_per_s']:,.0f} events/s "
                    f"({t['wall_s']:.1f} s); {ids_per_event:,.0f} ids per event"
                )
                if t["batches"] > 3:  # a third of the batches after the restart batch: one or more
                    print(
                        "  events/s in each third of the run after the restart batch (JIT warm-up): "
                        + ", ".join(f"{r:,.0f}" for r in t["thirds_per_s"])
                    )
                print(f"  batches (events, ms, write ms): {t['batch_rows_ms']}", flush=True)
                if "ceiling" not in skip:
                    c = kafka_ceiling(conn, w, ids_per_event)
                    res["ceiling"] = c
                    print(
                        f"  ceiling: pre-encoded Match records of this size ({c['record_bytes']:,.0f} bytes) sent to "
                        f"the broker by librdkafka alone (lz4, no matching, no Spark): {c['records_per_s']:,.0f} "
                        f"records/s ({c['mb_per_s']:,.0f} MB/s)",
                        flush=True,
                    )
            if "latency" not in skip:
                if args.jvm_warmup > 0 and not warmed:
                    jvm_warmup(spark, conn, w, args, args.modes.split(",")[0])
                    warmed = True
                for mode in args.modes.split(","):
                    latency_phase(spark, conn, w, args, mode, "oracle" not in skip, res)
            results[str(decay)] = res
        spark.stop()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
