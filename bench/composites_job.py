"""Throughput of the composites job: component matches per second, Kafka -> Spark -> Kafka.

Workload: a 15-broker tree; ``--subscriptions`` composite subscriptions (``and`` of two leaves,
``within_ms`` 5 s; a quarter ``seq``), each leaf ``kind = '<k>'`` over ``--kinds`` event kinds, so
every event is a component of about ``2 * subscriptions / kinds`` leaves; ``--events`` events from
10 publishers (Poisson, 2,000 events/s of event time, kinds uniform). Everything goes to a local
1-node KRaft broker first; then the composites job (Spark local[2] on this 2-core machine)
drains the backlog available-now with ``--per-batch`` records per micro-batch. "Sustained" is
component matches over batch time in the second half of the batches (the first ones pay for
start-up), as in the other job benchmarks; the detector's state bound is printed beside it.

With uniform kinds every component instance finds a partner within the window, so about half of
the component matches complete a detection (the worst case for the job's output); ``--zipf 1``
draws kinds Zipf-distributed (Gryphon's content model), where a popular kind's instances mostly
wait for a rare partner and expire.

Target: >= 50,000 component matches/s through the detection job, state bounded.

Run: ``.venv/bin/python bench/composites_job.py [--events 400000] [--per-batch 100000]``.
Readings: docs/results/composites-job.md.
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

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from infra import kafka
from infra.jars import ensure_jars
from infra.topics import ensure_topics
from producers.kafka_writer import KafkaWriter
from routing.planning.topology import element_record, tree
from schemas.codec import codec_for
from schemas.topics import EVENTS_TOPIC, SUBSCRIPTIONS_TOPIC, TOPOLOGY_TOPIC
from streaming.driver_batch import BatchStats

STEP_PARTS = ("match", "detect", "place", "encode")  # the composites job's step, timed in BatchStats.extra


def workload(args: argparse.Namespace) -> dict[str, list[dict[str, object]]]:
    rng = np.random.default_rng(args.seed)
    topology = tree(15, 2).topology_records()
    topology += [element_record(f"p{i}", "publisher", 0, broker=f"b{int(rng.integers(15))}") for i in range(10)]
    subs = []
    for i in range(args.subscriptions):
        a, b = rng.choice(args.kinds, size=2, replace=False)
        op = "seq" if i % 4 == 3 else "and"
        tree_doc = {"op": op, "within_ms": 5000, "children": [f"kind = 'k{a}'", f"kind = 'k{b}'"]}
        subs.append(
            {
                "type": "subscribe",
                "subscription_id": f"c{i}",
                "subscriber_id": f"u{i}",
                "broker": f"b{int(rng.integers(15))}",
                "composite": json.dumps(tree_doc),
            }
        )
    start = int(time.time() * 1000) - int(args.events / 2.0)
    times = start + np.cumsum(rng.exponential(0.5, args.events)).astype(np.int64)
    if args.zipf > 0:  # kind k (0-based) with probability proportional to 1 / (k + 1)^s
        weights = 1.0 / np.arange(1, args.kinds + 1) ** args.zipf
        kinds = rng.choice(args.kinds, size=args.events, p=weights / weights.sum())
    else:
        kinds = rng.integers(args.kinds, size=args.events)
    pubs = rng.integers(10, size=args.events)
    events = [
        {
            "event_id": f"e{i}",
            "publisher_id": f"p{pubs[i]}",
            "published_at": int(times[i]),
            "lifetime_ms": 60_000,
            "attributes": {"kind": f"k{kinds[i]}", "value": float(i % 100)},
        }
        for i in range(args.events)
    ]
    return {TOPOLOGY_TOPIC: topology, SUBSCRIPTIONS_TOPIC: subs, EVENTS_TOPIC: events}


def _other_ms(b: BatchStats) -> float:
    """A batch's time outside its timed phases: the state save, dead letters, the report."""
    return b.duration_ms - b.read_ms - b.decode_ms - b.step_ms - b.write_ms


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=400_000)
    ap.add_argument("--subscriptions", type=int, default=1_000)
    ap.add_argument("--kinds", type=int, default=100)
    ap.add_argument("--per-batch", type=int, default=100_000, help="maxOffsetsPerTrigger")
    ap.add_argument(
        "--zipf", type=float, default=0.0, help="event kinds Zipf-distributed with this exponent (0: uniform)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bootstrap-servers")
    ap.add_argument("--quick", action="store_true", help="100,000 events")
    args = ap.parse_args()
    if args.quick:
        args.events = 100_000

    from routing.monitors.composites import CompositeMonitorConfig
    from streaming.composites_job import CompositesConfig, run
    from streaming.session import SparkConfig, build_session

    data = workload(args)
    print(
        f"workload: 15-broker tree, {args.subscriptions:,} composite subscriptions (and/seq of 2 of "
        f"{args.kinds} kinds, within 5 s), {args.events:,} events from 10 publishers at 2,000/s of event time, "
        f"kinds {'Zipf ' + format(args.zipf, 'g') if args.zipf else 'uniform'} "
        f"(~{2 * args.subscriptions / args.kinds:.0f} component matches per event)",
        flush=True,
    )
    jars = ensure_jars()
    with kafka.broker_or(args.bootstrap_servers, jars, heap="1g") as conn:
        prefix = f"bc{uuid.uuid4().hex[:6]}."
        ensure_topics(conn, prefix)
        writer = KafkaWriter(conn)
        keys = {
            TOPOLOGY_TOPIC: ("TopologyElement", "element_id"),
            SUBSCRIPTIONS_TOPIC: ("Subscription", "subscription_id"),
            EVENTS_TOPIC: ("Event", "event_id"),
        }
        t0 = time.perf_counter()
        for topic, records in data.items():
            schema, key = keys[topic]
            codec = codec_for(schema)
            for r in records:
                writer.send(prefix + topic, str(r[key]), codec.encode(r))
        assert not writer.flush().failed
        print(f"  produced to Kafka in {time.perf_counter() - t0:.1f} s", flush=True)
        spark = build_session(SparkConfig(app_name="bench-composites"), jars)
        cfg = CompositesConfig(
            conn=conn,
            checkpoint=Path(tempfile.mkdtemp(prefix="bench-composites-")),
            monitor=CompositeMonitorConfig(),
            topic_prefix=prefix,
            available_now=True,
            max_offsets_per_trigger=args.per_batch,
        )
        t0 = time.perf_counter()
        history = run(spark, cfg, quiet=True)
        wall = time.perf_counter() - t0
        spark.stop()
    half = history[len(history) // 2 :]
    matches = [b.extra.get("component_matches", 0) for b in history]
    sustained = sum(b.extra.get("component_matches", 0) for b in half) / (sum(b.duration_ms for b in half) / 1000)
    last = history[-1].extra
    print(
        f"  composites job: {len(history)} batches, {sum(matches):,} component matches, "
        f"{sum(b.extra.get('detections', 0) for b in history):,} detections, "
        f"{sum(b.extra.get('placements', 0) for b in history)} placements; wall {wall:.1f} s incl. start-up"
    )
    parts = ", ".join(f"{k} {statistics.median(b.extra.get(f'{k}_ms', 0) for b in half):,.0f}" for k in STEP_PARTS)
    print(
        f"  sustained (second half of the batches): {sustained:,.0f} component matches/s (target: 50,000); "
        f"median batch: read {statistics.median(b.read_ms for b in half):,.0f} ms, decode "
        f"{statistics.median(b.decode_ms for b in half):,.0f} ms, "
        f"step {statistics.median(b.step_ms for b in half):,.0f} ms "
        f"({parts}), "
        f"write {statistics.median(b.write_ms for b in half):,.0f} ms, other (state save, report) "
        f"{statistics.median(_other_ms(b) for b in half):,.0f} ms"
    )
    print(
        f"  detector state at the end: {last.get('stored', 0):,} partial matches stored (bound: 1,000 per operator "
        f"child per subscription), {last.get('expired', 0):,} expired, {last.get('evicted', 0):,} evicted, "
        f"{last.get('late', 0):,} late"
    )
    print("  batches: component matches, detections: ms = read, decode, step (match, detect, place, encode),")
    print("  write, other")
    for m, b in zip(matches, history, strict=True):
        step = ", ".join(str(b.extra.get(f"{k}_ms", 0)) for k in STEP_PARTS)
        print(
            f"    {m:,}, {b.extra.get('detections', 0):,}: {b.duration_ms:,.0f} = {b.read_ms:,.0f}, "
            f"{b.decode_ms:,.0f}, {b.step_ms:,.0f} ({step}), {b.write_ms:,.0f}, {_other_ms(b):,.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
