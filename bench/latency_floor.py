"""The latency floor of Kafka -> Spark -> Kafka on this machine, by query shape and trigger.

What sets the matching job's p99 from ``published_at`` to its ``Match`` record: Spark's execution
model, or the job's work? This benchmark takes the job's work out. Each run starts a fresh local
broker (``infra/``) with two one-partition topics, a ``local[2]`` Spark session built like the
jobs' (``streaming.session.build_session``), and one query that copies ``in`` to ``out``, in
one of these shapes:

- ``jvm``: ``select(key, value)`` (no Python at all);
- ``arrow``: the same through an identity ``mapInArrow`` (a Python worker on the path, as the
  matching job's workers are);
- ``batch``: ``foreachBatch`` running ``mapInArrow`` and a batch Kafka write per micro-batch (the
  matching job's shape, minus decoding, the index and the ``Match`` encoding);

under one of these triggers:

- ``micro``: micro-batches back to back (``processingTime="0 seconds"``, the jobs' default);
- ``micro-async``: the same with ``asyncProgressTrackingEnabled`` (the offset and commit logs
  written off the batch's path; Kafka sink only, so not the ``batch`` shape);
- ``realtime``: Spark's real-time mode (``trigger(realTime="5 seconds")``, the duration being the
  checkpoint interval), ``outputMode("update")``; Spark refuses Python operators
  (``STREAMING_REAL_TIME_MODE.OPERATOR_OR_SINK_NOT_IN_ALLOWLIST``) and ``foreachBatch``, and
  the run prints the refusal;
- ``realtime-unchecked``: the same with ``spark.sql.streaming.realTimeMode.allowlistCheck`` off
  (at one's own risk, Spark says) to see what a Python operator would do there.

A producer thread publishes ``--rate`` records per second for ``--seconds`` s (each value is the
send time in ns); a consumer takes each output record's Kafka timestamp (set when Spark's
producer sent it) minus that send time. p50/p99/max are over records sent after ``--warmup`` s.
The readings and what they mean: docs/results/latency.md.

Run: ``.venv/bin/python bench/latency_floor.py [--shapes jvm,arrow,batch] [--triggers
micro,realtime,realtime-unchecked] [--rate 1000] [--seconds 30] [--warmup 10]``; ``--quick`` for
a smoke run (one shape, 8 s).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from infra.connection import arrived
from infra.jars import ensure_jars
from infra.kafka import BrokerConfig, down, free_ports, up

SHAPES = ("jvm", "arrow", "batch")
TRIGGERS = ("micro", "micro-async", "realtime", "realtime-unchecked")


def _identity(batches: Iterator[Any]) -> Iterator[Any]:
    yield from batches


def _query(spark: Any, bootstrap: str, shape: str, trigger: str, checkpoint: str) -> Any:
    """Start the copying query ``in`` -> ``out`` in ``shape`` under ``trigger``."""
    source = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "in")
        .option("startingOffsets", "latest")
        .load()
        .select("key", "value")
    )
    spark.conf.set("spark.sql.streaming.realTimeMode.allowlistCheck", str(trigger != "realtime-unchecked").lower())
    if shape == "batch":

        def write(batch: Any, _batch_id: int) -> None:
            out = batch.mapInArrow(_identity, batch.schema)
            out.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", "out").save()

        writer = source.writeStream.foreachBatch(write)
    else:
        frame = source.mapInArrow(_identity, source.schema) if shape == "arrow" else source
        writer = frame.writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", "out")
    writer = writer.option("checkpointLocation", checkpoint)
    if trigger.startswith("micro"):
        writer = writer.trigger(processingTime="0 seconds")
        if trigger == "micro-async":
            writer = writer.option("asyncProgressTrackingEnabled", "true")
    else:
        writer = writer.outputMode("update").trigger(realTime="5 seconds")
    return writer.start()


def _run(spark: Any, bootstrap: str, shape: str, trigger: str, args: argparse.Namespace, work: Path) -> str:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name in ("in", "out"):
        admin.delete_topics([name])
    time.sleep(1.0)
    for future in admin.create_topics([NewTopic("in", 1, 1), NewTopic("out", 1, 1)]).values():
        future.result()
    query = _query(spark, bootstrap, shape, trigger, str(work / f"ck-{shape}-{trigger}-{time.time_ns()}"))
    time.sleep(6.0)  # the first (empty) batch or the real-time tasks are running
    if query.exception() is not None:
        reason = str(query.exception()).splitlines()[0]
        return f"{shape:6} {trigger:19} refused: {reason[:160]}"
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"floor-{time.time_ns()}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe(["out"])
    latencies: list[tuple[float, float]] = []  # (sent, latency ms)
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            for msg in arrived(consumer, 1000, 0.1):
                if msg.error() is None:
                    sent = int(msg.value())
                    latencies.append((sent / 1e9, msg.timestamp()[1] - sent / 1e6))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    start = time.time()
    sent = 0
    while (now := time.time()) < start + args.seconds:
        due = int((now - start) * args.rate)
        while sent < due:
            producer.produce("in", value=str(time.time_ns()).encode())
            sent += 1
        producer.poll(0)
        time.sleep(0.002)
    producer.flush()
    time.sleep(8.0)  # a real-time batch ends at most 5 s after its last record
    stop.set()
    reader.join()
    consumer.close()
    query.stop()
    steady = sorted(ms for at, ms in latencies if at >= start + args.warmup)
    if not steady:
        return f"{shape:6} {trigger:19} no output in {args.seconds} s ({sent} sent)"

    def pct(q: float) -> float:
        return steady[min(len(steady) - 1, int(q * len(steady)))]

    return (
        f"{shape:6} {trigger:19} sent {sent:6d} received {len(latencies):6d}  "
        f"p50 {pct(0.5):7.1f}  p99 {pct(0.99):7.1f}  max {steady[-1]:7.1f} ms"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--triggers", default=",".join(TRIGGERS))
    parser.add_argument("--rate", type=float, default=1000.0, help="records per second offered")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--quick", action="store_true", help="one shape (jvm, micro) for 8 s")
    args = parser.parse_args(argv)
    if args.quick:
        args.shapes, args.triggers, args.seconds, args.warmup = "jvm", "micro", 8.0, 3.0
    shapes = [s for s in args.shapes.split(",") if s]
    triggers = [t for t in args.triggers.split(",") if t]
    for name in shapes + triggers:
        if name not in SHAPES + TRIGGERS:
            parser.error(f"unknown shape or trigger {name!r}; shapes {SHAPES}, triggers {TRIGGERS}")
    jars = ensure_jars(log=False)
    work = Path(tempfile.mkdtemp(prefix="siftstream-floor-"))
    port, controller = free_ports(2)
    broker = BrokerConfig(home=work / "kafka", port=port, controller_port=controller)
    print(up(broker, jars))
    from streaming.session import SparkConfig, build_session

    spark = build_session(SparkConfig(), jars)
    print(
        f"workload: {args.rate:.0f} records/s of ~19-byte values for {args.seconds:.0f} s, one partition in and out, "
        f"percentiles over records sent after {args.warmup:.0f} s; local[2], pyspark {spark.version}, "
        f"{os.cpu_count()} cores"
    )
    try:
        for shape in shapes:
            for trigger in triggers:
                if shape == "batch" and trigger != "micro":
                    print(f"{shape:6} {trigger:19} skipped: foreachBatch is not a Kafka sink")
                    continue
                print(_run(spark, broker.bootstrap, shape, trigger, args, work), flush=True)
    finally:
        spark.stop()
        print(down(broker))
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
