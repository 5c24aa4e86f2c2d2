"""Throughput of the QoS job: telemetry records per second it digests, Kafka -> Spark -> Kafka.

Workload: the reliability paper's 20-broker tree (``reliability_tree_system``), 8 publishers at
``--rate`` events/s each (default 250: about 100,000 telemetry records per simulated second, the
target's rate, so that a 10 s report period falls once per ~1M records as it would in real time),
matching ``1 / rate`` ms per stored subscription (so brokers stay below saturation, at the same
utilisation at any rate), simulated for ``--seconds`` s. Every record the overlay would emit
(topology, subscriptions, events, one link sample per transmission, one broker sample per
processed event, one receipt per delivery) goes to a local 1-node KRaft broker first; then the
QoS job (Spark local[2] on this 2-core machine, update period 10 s, window 5 min) drains the
backlog available-now with ``--per-batch`` records per micro-batch. "Sustained" is records over
batch time in the second half of the batches (the first ones pay for start-up), as in
``bench/ingest.py``; the split of each batch (Arrow collect, monitor, write) is printed, and the
CPU time of the whole drain, driver (Python) and Spark JVM apart: on a shared 2-core machine the
wall clock depends on the load, CPU-s per 100k records much less (under 2 is needed to keep up
with 100k records/s here).

Target: keep up with 100,000 telemetry records/s at an update period of 10 s.

Run: ``.venv/bin/python bench/qos_job.py [--quick] [--rate 250] [--seconds 120] [--per-batch 500000]``.
Readings: docs/results/qos-job.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from infra import kafka
from infra.jars import ensure_jars
from infra.topics import ensure_topics
from producers import overlay
from producers.kafka_writer import KafkaWriter
from routing.reliability.evaluation_system import reliability_tree_system
from schemas.codec import codec_for


def _jvm_pid(spark: Any) -> int:
    """The process id of the Spark JVM (driver and executors: local mode)."""
    return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())


def _cpu_s(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=250.0, help="events/s per publisher")
    ap.add_argument("--seconds", type=float, default=120.0, help="simulated seconds")
    ap.add_argument("--per-batch", type=int, default=500_000, help="maxOffsetsPerTrigger")
    ap.add_argument("--bootstrap-servers")
    ap.add_argument("--quick", action="store_true", help="30 simulated seconds")
    args = ap.parse_args()
    if args.quick:
        args.seconds = 30.0

    from streaming.qos_job import QosConfig, run
    from streaming.session import SparkConfig, build_session

    system = reliability_tree_system(1, rate_per_s=args.rate, ms_per_subscription=1.0 / args.rate)
    t0 = time.perf_counter()
    result = overlay.run(system, args.seconds, seed=1, telemetry=True)
    assert result.telemetry is not None
    rows = list(overlay.records(system, result.telemetry, int(time.time() * 1000) - int(args.seconds * 1000), 0.99))
    counts = Counter(topic for _t, topic, _k, _r in rows)
    telemetry = sum(v for k, v in counts.items() if "telemetry" in k or "receipts" in k)
    per_topic = ", ".join(f"{v:,} {k.split('.')[1]}" for k, v in counts.items())
    print(
        f"workload: 20-broker tree, 8 publishers x {args.rate:g} events/s, 100 subscribers, {args.seconds:g} s "
        f"simulated in {time.perf_counter() - t0:.1f} s: {len(rows):,} records "
        f"({per_topic}); {telemetry:,} telemetry records "
        f"= {telemetry / args.seconds:,.0f} per simulated second; max broker rho "
        f"{max(b.rho for b in result.brokers.values()):.2f}",
        flush=True,
    )
    jars = ensure_jars()
    with kafka.broker_or(args.bootstrap_servers, jars, heap="1g") as conn:
        prefix = f"bq{uuid.uuid4().hex[:6]}."
        ensure_topics(conn, prefix)
        writer = KafkaWriter(conn)
        codecs = {t: codec_for(s) for t, s in overlay.SCHEMA_OF.items()}
        t0 = time.perf_counter()
        for _t, topic, key, record in rows:
            writer.send(prefix + topic, key, codecs[topic].encode(record))
        report = writer.flush()
        assert not report.failed, report.errors
        print(f"  produced to Kafka in {time.perf_counter() - t0:.1f} s", flush=True)

        spark = build_session(SparkConfig(app_name="bench-qos"), jars)
        cfg = QosConfig(
            conn=conn,
            checkpoint=Path(tempfile.mkdtemp(prefix="bench-qos-")),
            topic_prefix=prefix,
            available_now=True,
            max_offsets_per_trigger=args.per_batch,
        )
        jvm = _jvm_pid(spark)
        load = os.getloadavg()[0]
        cpu0 = (time.process_time(), _cpu_s(jvm))
        t0 = time.perf_counter()
        history = run(spark, cfg, quiet=True)
        wall = time.perf_counter() - t0
        cpu = (time.process_time() - cpu0[0], _cpu_s(jvm) - cpu0[1])
        load = (load, os.getloadavg()[0])  # the machine is shared: numbers depend on it
        spark.stop()
    n = [sum(b.records.values()) for b in history]
    half = history[len(history) // 2 :]
    sustained = sum(sum(b.records.values()) for b in half) / (sum(b.duration_ms for b in half) / 1000)
    reports = sum(b.extra["reports"] for b in history)
    alerts = sum(b.extra["alerts"] for b in history)
    windows = sum(len(b.extra["windows"]) for b in history)
    print(
        f"  QoS job: {len(history)} batches, {sum(n):,} records, {reports:,} reports "
        f"({alerts:,} alerts) over {windows} windows; "
        f"wall {wall:.1f} s incl. start-up ({sum(n) / wall:,.0f} records/s overall)"
    )
    print(
        f"  sustained (second half of the batches): {sustained:,.0f} records/s "
        f"(target: 100,000 telemetry records/s); median batch: read "
        f"{statistics.median(b.read_ms for b in half):,.0f} ms, decode "
        f"{statistics.median(b.decode_ms for b in half):,.0f} ms, monitor "
        f"{statistics.median(b.step_ms for b in half):,.0f} ms (of which reports "
        f"{statistics.median(b.extra['report_ms'] for b in half):,.0f} ms), write "
        f"{statistics.median(b.write_ms for b in half):,.0f} ms, "
        f"total {statistics.median(b.duration_ms for b in half):,.0f} ms"
    )
    print(
        f"  CPU over the whole drain: driver (Python) {cpu[0]:.1f} s + Spark JVM {cpu[1]:.1f} s = "
        f"{sum(cpu):.1f} s, i.e. {sum(cpu) / sum(n) * 1e5:.2f} CPU-s per 100k records "
        f"(driver {cpu[0] / sum(n) * 1e5:.2f}, JVM {cpu[1] / sum(n) * 1e5:.2f}); this machine has "
        f"{os.cpu_count()} CPU-s per second, so keeping up with 100k records/s needs well under {os.cpu_count()}"
    )
    print("  batches (records; ms: total = read + decode + monitor (reports) + write):")
    for x, b in zip(n, history, strict=True):
        print(
            f"    {x:>9,}; {b.duration_ms:6,.0f} = {b.read_ms:5,.0f} + {b.decode_ms:5,.0f} + {b.step_ms:5,.0f} "
            f"({b.extra['report_ms']:5,.0f}, {len(b.extra['windows'])} windows) + {b.write_ms:4,.0f}"
        )
    print(f"  load average (1 min) at the job's start and end: {load[0]:.1f}, {load[1]:.1f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
