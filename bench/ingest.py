"""Ingest benchmark: producer throughput to the local broker, and the validation job's sustained rate.

Starts its own broker on free ports (or uses --bootstrap-servers), prints the workload and
the numbers. Run: ``make bench`` or ``.venv/bin/python bench/ingest.py [--events N]``.
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

from infra import kafka  # noqa: E402
from infra.connection import KafkaConnection  # noqa: E402
from infra.jars import ensure_jars  # noqa: E402
from infra.topics import ensure_topics  # noqa: E402
from producers.events import EventGenerator  # noqa: E402
from producers.kafka_writer import KafkaWriter  # noqa: E402
from producers.produce import ProduceConfig, produce_events  # noqa: E402
from schemas.codec import codec_for  # noqa: E402


def bench_producer(conn: KafkaConnection, prefix: str, n: int, note_len: int) -> dict[str, float]:
    topic = prefix + "siftstream.events.v1"
    # (a) what `siftstream produce events` does: generate, encode (single-object Avro), produce, count reports
    cfg = ProduceConfig(topic, n, seed=1, progress=False)
    full = produce_events(conn, cfg, writer=None) if note_len == 0 else _produce_sized(conn, topic, n, note_len)
    # (b) the Kafka path alone: pre-encoded events through the same writer
    codec = codec_for("Event")
    payloads = [codec.encode(e) for e in EventGenerator(seed=2, note_len=note_len).batch(50_000, 0)]
    writer = KafkaWriter(conn)
    start = time.monotonic()
    for i in range(n):
        writer.send(topic, b"p%d" % (i % 8), payloads[i % len(payloads)])
    report = writer.flush()
    secs = time.monotonic() - start
    return {
        "event_bytes": sum(map(len, payloads)) / len(payloads),
        "full_events_per_s": full.events_per_s, "full_mb_per_s": full.mb_per_s, "full_failed": full.report.failed,
        "raw_events_per_s": report.delivered / secs, "raw_mb_per_s": report.bytes_delivered / secs / 1e6,
        "raw_failed": report.failed,
    }


def _produce_sized(conn: KafkaConnection, topic: str, n: int, note_len: int):  # type: ignore[no-untyped-def]
    """produce_events with sized events: the same loop, the generator given a note attribute."""
    import producers.produce as produce_mod

    original = produce_mod.EventGenerator
    produce_mod.EventGenerator = lambda p, lt, seed: original(p, lt, seed, note_len=note_len)  # type: ignore[assignment,misc]
    try:
        return produce_events(conn, ProduceConfig(topic, n, seed=1, progress=False))
    finally:
        produce_mod.EventGenerator = original  # type: ignore[misc]


def bench_validation(conn: KafkaConnection, prefix: str, n: int, per_batch: int, jars) -> dict[str, float]:  # type: ignore[no-untyped-def]
    from streaming.session import SparkConfig, build_session
    from streaming.validation_job import ValidationConfig, build_query

    topic = prefix + "siftstream.events.v1"
    produced = produce_events(conn, ProduceConfig(topic, n, bad_fraction=0.01, seed=3, progress=False))
    spark = build_session(SparkConfig(app_name="bench-ingest"), jars)
    tmp = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    cfg = ValidationConfig(conn=conn, checkpoint=tmp / "ckpt", topic_prefix=prefix, available_now=True,
                           max_offsets_per_trigger=per_batch)
    start = time.monotonic()
    query = build_query(spark, cfg)
    query.awaitTermination()
    wall = time.monotonic() - start
    batches = [p for p in query.recentProgress if p.numInputRows > 0]
    rows = sum(p.numInputRows for p in batches)
    durations = [p.batchDuration for p in batches]
    # the first batch pays for query start-up (planning, codegen, first Kafka fetch): report it apart
    steady = batches[1:] if len(batches) > 1 else batches
    steady_rows = sum(p.numInputRows for p in steady)
    steady_ms = sum(p.batchDuration for p in steady)
    spark.stop()
    return {
        "records": rows, "produced": produced.report.delivered, "batches": len(batches),
        "wall_s": wall, "overall_per_s": rows / wall,
        "sustained_per_s": steady_rows / (steady_ms / 1000) if steady_ms else float("nan"),
        "median_batch_ms": statistics.median(durations), "first_batch_ms": durations[0],
        "dead_letters_expected": sum(produced.expected_errors.values()),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=500_000, help="events for the producer runs")
    ap.add_argument("--validation-events", type=int, default=2_000_000, help="backlog the validation job drains")
    ap.add_argument("--per-batch", type=int, default=500_000, help="maxOffsetsPerTrigger of the validation run")
    ap.add_argument("--note-len", type=int, default=75, help="extra text per event; 75 gives ~200-byte events")
    ap.add_argument("--bootstrap-servers", help="use this cluster instead of starting a broker")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()

    jars = ensure_jars()
    broker = None
    if args.bootstrap_servers:
        conn = KafkaConnection(args.bootstrap_servers)
    else:
        broker = kafka.BrokerConfig(home=Path(tempfile.mkdtemp(prefix="bench-kafka-")), port=kafka.free_port(),
                                    controller_port=kafka.free_port(), heap="1g")
        print(kafka.up(broker, jars), file=sys.stderr)
        conn = KafkaConnection(broker.bootstrap)
    try:
        prefix = f"bench{uuid.uuid4().hex[:6]}."
        ensure_topics(conn, prefix)
        print("workload: built-in event generator (8 publishers, 9 attributes incl. a "
              f"{args.note_len}-char note), single-object Avro, topic with 2 partitions, local KRaft broker "
              "(1 node), idempotent producer acks=all lz4 linger 20 ms; 2-core machine")
        p = bench_producer(conn, prefix, args.events, args.note_len)
        print(f"producer, generate+encode+produce ({args.events:,} events of {p['event_bytes']:.0f} B): "
              f"{p['full_events_per_s']:,.0f} events/s, {p['full_mb_per_s']:.1f} MB/s, failed {p['full_failed']}")
        print(f"producer, pre-encoded events     ({args.events:,} events of {p['event_bytes']:.0f} B): "
              f"{p['raw_events_per_s']:,.0f} events/s, {p['raw_mb_per_s']:.1f} MB/s, failed {p['raw_failed']}")
        prefix2 = f"bench{uuid.uuid4().hex[:6]}."
        ensure_topics(conn, prefix2)
        v = bench_validation(conn, prefix2, args.validation_events, args.per_batch, jars)
        print(f"validation job (Kafka -> decode+validate -> dead letter to Kafka), backlog of {v['records']:,} "
              f"events (1% bad), maxOffsetsPerTrigger {args.per_batch:,}, local[2]:")
        print(f"  sustained {v['sustained_per_s']:,.0f} events/s over batches 2..{v['batches']}; "
              f"overall incl. start-up {v['overall_per_s']:,.0f} events/s ({v['wall_s']:.1f} s)")
        print(f"  median micro-batch {v['median_batch_ms']:.0f} ms; first batch {v['first_batch_ms']:.0f} ms")
        if args.json:
            Path(args.json).write_text(json.dumps({"producer": p, "validation": v}, indent=2))
    finally:
        if broker is not None:
            print(kafka.down(broker), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
