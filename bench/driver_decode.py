"""Decoding one batch of the driver jobs' inputs: the Python fast path against the JVM path.

The driver-state jobs (QoS, routes, composites; ``streaming.driver_batch``) collect a batch's raw
Kafka rows as Arrow and decode each topic with ``TopicReader``: the events and the matches by
the compiled columnar passes of ``schemas.columnar`` (``TopicReader.collect``), or, as before
those, in the JVM (``TopicReader.decoded``: ``createDataFrame`` of the rows, a local checkpoint, the
decode plan, ``toArrow``). This times both on the same batch, alternating, so that a shared
machine's load falls on both alike.

Workload: the soak's (``bench/soak.py``): Gryphon events (Opyrchal et al. 2000) at decay 0.88,
``--batch`` of them (default 20,000: one micro-batch of the soak at 2,000 events/s), and their
``Match`` records against 10,000 subscriptions (about 23 ids each). Spark ``local[2]``.

Run: ``OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/driver_decode.py [--batch 20000] [--repeat 3]``.
Readings: docs/results/soak.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _raw(topic: str, values: list[bytes]) -> Any:
    """``values`` as the driver jobs collect a batch (``streaming.driver_batch.RAW_SCHEMA``)."""
    import pyarrow as pa

    n = len(values)
    return pa.table(
        {
            "topic": pa.array([topic] * n, pa.string()),
            "partition": pa.array(np.arange(n) % 3, pa.int32()),
            "offset": pa.array(np.arange(n), pa.int64()),
            "ts_ms": pa.array(np.full(n, 1_795_000_000_000), pa.int64()),
            "key": pa.array([b"k"] * n, pa.binary()),
            "value": pa.array(values, pa.binary()),
        }
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=20_000, help="records per batch (default: %(default)s)")
    ap.add_argument("--repeat", type=int, default=3, help="alternations per topic (default: %(default)s)")
    args = ap.parse_args()

    from bench.matching_e2e import workload
    from infra.jars import ensure_jars
    from routing.matching import MatchIndex
    from schemas.codec import codec_for
    from schemas.topics import EVENTS_TOPIC, MATCHES_TOPIC
    from streaming.driver_batch import TopicReader
    from streaming.session import SparkConfig, build_session

    w = workload(10_000, 0.88)
    events = w.columns(args.batch)
    records = events.records()
    index = MatchIndex()
    for s in w.subscriptions():
        index.add(s["subscription_id"], s["filter"])
    offsets, ranks, by_rank = index.match([e["attributes"] for e in records]).sorted_ranks()
    ids = by_rank[ranks].tolist()
    codec = codec_for("Match")
    matches = [
        codec.encode(
            {**{k: e[k] for k in ("event_id", "publisher_id", "published_at")}, "subscription_ids": sorted(ids[a:b])}
        )
        for e, a, b in zip(records, offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)
    ]
    print(
        f"workload: {args.batch:,} Gryphon events (decay 0.88) and their Match records against 10,000 subscriptions "
        f"({len(ids) / args.batch:.1f} ids each); Spark local[2]",
        flush=True,
    )
    spark = build_session(SparkConfig(app_name="driver-decode", master="local[2]"), ensure_jars())
    try:
        for topic, values in ((EVENTS_TOPIC, events.avro()), (MATCHES_TOPIC, matches)):
            reader = TopicReader(spark, topic, topic)
            batch = _raw(topic, values)
            reader.collect(batch.slice(0, 100))  # compiles, plans: neither is timed
            reader.decoded(batch.slice(0, 100))
            for _ in range(args.repeat):
                for path, decode in (("python", reader.collect), ("jvm", reader.decoded)):
                    started = time.perf_counter()
                    out = decode(batch)
                    print(
                        f"{topic}: {path:6s} {len(values):,} records in {time.perf_counter() - started:.2f} s "
                        f"({out.num_rows:,} good)",
                        flush=True,
                    )
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
