"""Ingest benchmark: producer throughput to the local broker, and the validation job's sustained rate.

Producers: the built-in event generator through ``siftstream produce events``' path (generate,
encode as single-object Avro, produce) with 1 and 2 processes, and pre-encoded events through the
same writer (the Kafka path alone). Validation: a backlog of ``--validation-events`` events
(1% bad, every fault kind) drained available-now by the validation job with ``--per-batch``
records per micro-batch; "sustained" is events over batch time in the second half of the batches
(the early ones pay for query start-up and the JIT warm-up of the generated code).

Starts its own broker on free ports (or uses --bootstrap-servers), prints the workload and
the numbers. Run: ``make bench`` or ``.venv/bin/python bench/ingest.py [--events N]``.
Readings: docs/results/ingest.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from infra import kafka
from infra.connection import KafkaConnection
from infra.jars import ensure_jars
from infra.topics import ensure_topics
from producers.events import EventGenerator
from producers.kafka_writer import KafkaWriter
from producers.produce import ProduceConfig, produce_events
from schemas.codec import codec_for
from schemas.topics import EVENTS_TOPIC


def bench_producer(conn: KafkaConnection, prefix: str, n: int, note_len: int) -> dict[str, float]:
    topic = prefix + EVENTS_TOPIC
    out: dict[str, float] = {}
    # what `siftstream produce events` does: generate, encode (single-object Avro), produce, count reports
    for workers in (1, 2):
        full = produce_events(conn, ProduceConfig(topic, n, seed=1, progress=False, workers=workers, note_len=note_len))
        out[f"full{workers}_events_per_s"] = full.events_per_s
        out[f"full{workers}_mb_per_s"] = full.mb_per_s
        out[f"full{workers}_failed"] = full.report.failed
    # the Kafka path alone: pre-encoded events through the same writer
    codec = codec_for("Event")
    payloads = [codec.encode(e) for e in EventGenerator(seed=2, note_len=note_len).batch(50_000, 0)]
    writer = KafkaWriter(conn)
    start = time.monotonic()
    for i in range(n):
        writer.send(topic, b"p%d" % (i % 8), payloads[i % len(payloads)])
    report = writer.flush()
    secs = time.monotonic() - start
    out.update(
        {
            "event_bytes": sum(map(len, payloads)) / len(payloads),
            "raw_events_per_s": report.delivered / secs,
            "raw_mb_per_s": report.bytes_delivered / secs / 1e6,
            "raw_failed": report.failed,
        }
    )
    return out


def bench_validation(conn: KafkaConnection, prefix: str, n: int, per_batch: int, jars) -> dict[str, float]:  # type: ignore[no-untyped-def]
    from streaming.session import SparkConfig, build_session
    from streaming.validation_job import ValidationConfig, build_queries

    topic = prefix + EVENTS_TOPIC
    # the backlog: a pool of 50k encoded records (1% bad, every fault kind) sent round and round,
    # so loading millions of records takes seconds, not minutes of Python generation
    import random

    from producers.faults import FAULTS, corrupt

    rng, codec, kinds = random.Random(3), codec_for("Event"), sorted(FAULTS)
    pool, bad = [], 0
    for i, event in enumerate(EventGenerator(seed=3, note_len=75).batch(50_000, int(time.time() * 1000))):
        if i % 100 == 0:
            pool.append(corrupt(kinds[bad % len(kinds)], rng, event)[0])
            bad += 1
        else:
            pool.append(codec.encode(event))
    writer = KafkaWriter(conn)
    for i in range(n):
        writer.send(topic, b"p%d" % (i % 8), pool[i % len(pool)])
    loaded = writer.flush()
    spark = build_session(SparkConfig(app_name="bench-ingest"), jars)
    tmp = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    cfg = ValidationConfig(
        conn=conn, checkpoint=tmp / "ckpt", topic_prefix=prefix, available_now=True, max_offsets_per_trigger=per_batch
    )
    start = time.monotonic()
    queries = build_queries(spark, cfg)
    for query in queries:
        query.awaitTermination()
    wall = time.monotonic() - start
    batches = [p for q in queries for p in q.recentProgress if p.numInputRows > 0]
    rows = sum(p.numInputRows for p in batches)
    durations = [p.batchDuration for p in batches]
    # early batches pay for query start-up and JIT warm-up of the generated code, so "sustained"
    # is over the second half of a run long enough to get past it (docs/results/ingest.md)
    steady = batches[len(batches) // 2 :]
    steady_rows = sum(p.numInputRows for p in steady)
    steady_ms = sum(p.batchDuration for p in steady)
    spark.stop()
    return {
        "records": rows,
        "produced": loaded.delivered,
        "batches": len(batches),
        "wall_s": wall,
        "overall_per_s": rows / wall,
        "sustained_per_s": steady_rows / (steady_ms / 1000) if steady_ms else float("nan"),
        "median_batch_ms": statistics.median(durations),
        "first_batch_ms": durations[0],
        "batch_rows_ms": [(p.numInputRows, p.batchDuration, p.durationMs.get("addBatch")) for p in batches],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=500_000, help="events for the producer runs")
    ap.add_argument(
        "--validation-events", type=int, default=12_000_000, help="backlog the validation job drains (24 batches)"
    )
    ap.add_argument("--per-batch", type=int, default=500_000, help="maxOffsetsPerTrigger of the validation run")
    ap.add_argument("--note-len", type=int, default=75, help="extra text per event; 75 gives ~200-byte events")
    ap.add_argument("--bootstrap-servers", help="use this cluster instead of starting a broker")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()

    jars = ensure_jars()
    with kafka.broker_or(args.bootstrap_servers, jars, heap="1g") as conn:
        prefix = f"bench{uuid.uuid4().hex[:6]}."
        ensure_topics(conn, prefix)
        print(
            "workload: built-in event generator (8 publishers, 9 attributes incl. a "
            f"{args.note_len}-char note), single-object Avro, topic with 2 partitions, local KRaft broker "
            "(1 node), idempotent producer acks=all lz4 linger 20 ms; 2-core machine"
        )
        p = bench_producer(conn, prefix, args.events, args.note_len)
        for w in (1, 2):
            rate, mbs, failed = p[f"full{w}_events_per_s"], p[f"full{w}_mb_per_s"], p[f"full{w}_failed"]
            print(
                f"producer, generate+encode+produce, {w} process(es) ({args.events:,} events of "
                f"{p['event_bytes']:.0f} B): {rate:,.0f} events/s, {mbs:.1f} MB/s, failed {failed}"
            )
        print(
            f"producer, pre-encoded events     ({args.events:,} events of {p['event_bytes']:.0f} B): "
            f"{p['raw_events_per_s']:,.0f} events/s, {p['raw_mb_per_s']:.1f} MB/s, failed {p['raw_failed']}"
        )
        prefix2 = f"bench{uuid.uuid4().hex[:6]}."
        ensure_topics(conn, prefix2)
        v = bench_validation(conn, prefix2, args.validation_events, args.per_batch, jars)
        print(
            f"validation job (Kafka -> decode+validate -> dead letter to Kafka), backlog of {v['records']:,} "
            f"events (1% bad), maxOffsetsPerTrigger {args.per_batch:,}, local[2]:"
        )
        print(
            f"  sustained {v['sustained_per_s']:,.0f} events/s over the second half of {v['batches']} batches; "
            f"overall incl. start-up {v['overall_per_s']:,.0f} events/s ({v['wall_s']:.1f} s)"
        )
        print(f"  median micro-batch {v['median_batch_ms']:.0f} ms; first batch {v['first_batch_ms']:.0f} ms")
        print(f"  batches (rows, ms, addBatch ms): {v['batch_rows_ms']}")
        if args.json:
            Path(args.json).write_text(json.dumps({"producer": p, "validation": v}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
