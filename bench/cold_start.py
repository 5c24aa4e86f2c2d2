"""Cold start of the matching job through Kafka: N live W1 subscriptions -> the first Match record.

Workload (printed with the numbers): ``--subs`` W1 subscriptions (default 1,000,000; the shape
of ``bench/churn.py``'s ``w1_texts``, in chunks of 50,000 with seed 21 + the chunk's first index: 20 attributes over
[0, 10^6], each filter 10 ``between`` predicates of width 5 * 10^5 on 10 distinct attributes),
subscribe records ``c<i>`` in single-object Avro on the compacted subscriptions topic (2
partitions, keyed by id); W1 events (20 integer attributes uniform on [0, 10^6]).

1. **Setup** (not the measurement): a local broker (``infra.kafka``, ports ``--port`` and
   ``--port`` + 1, its own temporary home, removed at the end), the topics, and the N records
   published as fast as the producer takes them (the time is printed).
2. **Each run**: ``siftstream match-job`` is started as a child process (``--mode`` exact, the
   default, or direct; Spark ``--master``, ``local[2]`` by default) on its checkpoint; from its start a thread publishes
   one event every 100 ms (``event_id`` ``<run>-<seq>``, keyed by event id, so both partitions
   get events and, under ``local[2]``, both Python workers load the subscriptions; ``--master
   local[1]`` has one worker load them, half the memory). The time measured is from
   the child's start to the first ``Match`` record of an event of this run: as read by the
   bench, and by the record's Kafka timestamp (set by Spark's producer when it sent it). At that
   moment the resident memory of the job's processes is read from ``/proc``: its driver (the
   Python process), its JVM and its Python workers (every other process below it), and printed
   with bytes per subscription. The exact mode's per-batch stats (``--stats``:
   ``streaming.matching_job.BatchStats``) give the phases of the batches up to the first match:
   the table's restore from the checkpoint, the Kafka read and JVM decode of the subscription
   records, their plan and the table (of the records that a fresh start's head start,
   which reads and plans while Spark starts, did not already take; their number is printed), the
   checkpoint write, the driver's ship (the
   broadcasts, and the digest of a run's first snapshot), the slowest worker's sync and
   first flush (``worker_ready_ms``: at a restart, the load of the compiled index a worker of the
   earlier run saved, docs/decisions/compiled-index.md), the batch's write; and the compiled
   indexes in the checkpoint after the run. The job is then stopped (SIGTERM; in the
   exact mode once the batch that wrote the record has ended, so that a restart does not replay it).
3. **Restart**: the same again on the same checkpoint (``--restarts``, default 1).

Run: ``OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/cold_start.py [--subs 1000000] [--modes
exact,direct] [--restarts 1] [--master local[2]]``; ``--subs 100000`` for a quick check. Readings:
docs/results/matching.md ("Cold start through Kafka").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from bench.churn import w1_texts
from bench.matching import DOMAIN
from bench.matching_e2e import match_head
from bench.soak import descendants, parent_map, rss_mb
from infra.connection import KafkaConnection, arrived
from schemas.codec import codec_for
from schemas.topics import EVENTS_TOPIC, MATCHES_TOPIC, SUBSCRIPTIONS_TOPIC

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("restore_ms", "read_ms", "plan_ms", "store_ms", "ship_ms", "worker_ready_ms", "write_ms", "duration_ms")
"""The exact mode's ``BatchStats`` timings that the report sums over the batches up to the first match."""


def subscription_values(texts: Sequence[str], first: int = 0) -> tuple[list[str], list[bytes]]:
    """Keys and single-object Avro values of subscribe records ``c<first + i>`` with ``texts``.

    >>> keys, values = subscription_values(["a0 between 1 and 2"], 5)
    >>> from schemas.codec import decode
    >>> keys, decode(values[0], "Subscription")[1]["filter"]
    (['c5'], 'a0 between 1 and 2')
    """
    codec = codec_for("Subscription")
    keys = [f"c{first + i}" for i in range(len(texts))]
    values = [
        codec.encode({"type": "subscribe", "subscription_id": k, "subscriber_id": "cold", "filter": t})
        for k, t in zip(keys, texts, strict=True)
    ]
    return keys, values


def w1_event(event_id: str, values: Sequence[int], published_at: int) -> bytes:
    """One W1 event (attributes ``a0`` ... ``a19``) as single-object Avro.

    >>> from schemas.codec import decode
    >>> decode(w1_event("e1", [7] * 20, 5), "Event")[1]["attributes"]["a19"]
    7
    """
    attributes = {f"a{j}": int(v) for j, v in enumerate(values)}
    record = {"event_id": event_id, "publisher_id": "cold", "published_at": published_at, "lifetime_ms": 3_600_000}
    return codec_for("Event").encode({**record, "attributes": attributes})


def job_memory(parents: Mapping[int, tuple[int, str]], pid: int, rss: Any = rss_mb) -> dict[str, Any]:
    """The job's resident memory in MB: its driver (``pid``), its JVM(s) and each Python worker
    (every other process below it; Spark's daemon included), largest first.

    >>> tree = {10: (1, "python"), 11: (10, "java"), 12: (11, "python3"), 13: (12, "python3")}
    >>> job_memory(tree, 10, rss=lambda pid: float(pid))
    {'driver': 10.0, 'jvm': 11.0, 'workers': [13.0, 12.0]}
    """
    jvm, workers = 0.0, []
    for child in descendants(parents, pid):
        mb = rss(child) or 0.0
        if parents[child][1] == "java":
            jvm += mb
        else:
            workers.append(round(mb, 1))
    return {"driver": round(rss(pid) or 0.0, 1), "jvm": round(jvm, 1), "workers": sorted(workers, reverse=True)}


def phase_sums(stats: Sequence[Mapping[str, Any]], until_ms: float | None) -> dict[str, float]:
    """Each of ``PHASES`` summed over the batches that started before ``until_ms`` (epoch ms; None:
    all), with ``batches`` their number; ``worker_ready_ms`` is a batch's slowest task, so summed.

    >>> rows = [{"started_at_ms": 0, "read_ms": 5.0, "duration_ms": 9.0}, {"started_at_ms": 50, "read_ms": 1.0}]
    >>> s = phase_sums(rows, 10)
    >>> s["batches"], s["read_ms"], s["duration_ms"], s["plan_ms"]
    (1, 5.0, 9.0, 0.0)
    """
    picked = [r for r in stats if until_ms is None or r.get("started_at_ms", 0) < until_ms]
    out = {k: float(sum(r.get(k, 0.0) for r in picked)) for k in PHASES}
    return {"batches": len(picked), **out}


@dataclass
class Watch:
    """What a run saw: the first Match record of its events, and the events it published."""

    tag: str
    published: int = 0
    first_seen_s: float | None = None
    first_record_ms: int | None = None
    first_event: str | None = None
    first_ids: int = 0
    errors: list[str] = field(default_factory=list)


def _publish(conn: KafkaConnection, topic: str, watch: Watch, stop: threading.Event, period_s: float) -> None:
    """One W1 event every ``period_s`` until ``stop``."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": conn.bootstrap_servers, "linger.ms": 0, "acks": "all"})
    rng = np.random.default_rng(zlib.crc32(watch.tag.encode()))
    start = time.monotonic()
    while not stop.is_set():
        eid = f"{watch.tag}-{watch.published}"
        value = w1_event(eid, rng.integers(0, DOMAIN + 1, 20).tolist(), int(time.time() * 1000))
        producer.produce(topic, value, eid.encode())
        producer.poll(0)
        watch.published += 1
        stop.wait(max(0.0, start + watch.published * period_s - time.monotonic()))
    producer.flush(10)


def _first_match(conn: KafkaConnection, topic: str, watch: Watch, t0: float, proc: Any, timeout_s: float) -> None:
    """Read the matches topic until a record of ``watch.tag``'s events arrives (or the timeout,
    or the job exits)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": conn.bootstrap_servers, "group.id": f"cold-{watch.tag}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(2)])
    prefix = f"{watch.tag}-".encode()
    try:
        while time.monotonic() - t0 < timeout_s and proc.poll() is None:
            for msg in arrived(consumer, 1000, 0.2):
                if msg.error() is not None:
                    continue
                eid, _ = match_head(msg.value())
                if eid.startswith(prefix):
                    from schemas.codec import decode

                    watch.first_seen_s = time.monotonic() - t0
                    watch.first_record_ms = msg.timestamp()[1]
                    watch.first_event = eid.decode()
                    watch.first_ids = len(decode(msg.value(), "Match")[1]["subscription_ids"])
                    return
    finally:
        consumer.close()


def _batch_done(stats_file: Path, record_ms: int, proc: Any, timeout_s: float) -> None:
    """Wait until the exact mode's stats file has a batch that ended after ``record_ms`` (the batch
    that wrote that record, or a later one), then a few seconds for Spark to commit it; or until
    the job exits, or the timeout."""
    stop = time.monotonic() + timeout_s
    while time.monotonic() < stop and proc.poll() is None:
        if stats_file.exists():
            rows = [json.loads(line) for line in stats_file.read_text().splitlines() if line.strip()]
            if any(r.get("started_at_ms", 0) + r.get("duration_ms", 0) >= record_ms for r in rows):
                time.sleep(5)
                return
        time.sleep(0.5)


def run_job(conn: KafkaConnection, args: argparse.Namespace, mode: str, label: str, work: Path) -> dict[str, Any]:
    """Start ``siftstream match-job`` in ``mode`` on ``work``'s checkpoint, time its first Match
    record, read its memory, stop it; return the numbers."""
    ckpt, stats_file, log_file = work / f"ckpt-{mode}", work / f"stats-{mode}.jsonl", work / f"{label}.log"
    stats_file.unlink(missing_ok=True)
    cmd = [
        str(ROOT / ".venv" / "bin" / "siftstream"),
        "--log-format",
        "json",
        "match-job",
        "--bootstrap-servers",
        conn.bootstrap_servers,
        "--home",
        str(work / "home"),
        "--checkpoint",
        str(ckpt),
        "--stats",
        str(stats_file),
        "--mode",
        mode,
        "--master",
        args.master,
    ]
    watch = Watch(tag=label)
    stop = threading.Event()
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    with log_file.open("wb") as log:
        t0_wall, t0 = time.time(), time.monotonic()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        publisher = threading.Thread(target=_publish, args=(conn, EVENTS_TOPIC, watch, stop, 0.1), daemon=True)
        publisher.start()
        memory: dict[str, Any] = {}
        try:
            _first_match(conn, MATCHES_TOPIC, watch, t0, proc, args.timeout)
            if watch.first_seen_s is not None:
                memory = job_memory(parent_map(), proc.pid)
                if mode == "exact":  # its batch commits after the write: stop after it, so a restart does not replay it
                    _batch_done(stats_file, watch.first_record_ms or 0, proc, args.timeout)
        finally:
            stop.set()
            publisher.join(15)
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    rows = [json.loads(line) for line in stats_file.read_text().splitlines()] if stats_file.exists() else []
    until = None if watch.first_record_ms is None else watch.first_record_ms
    return {
        "label": label,
        "mode": mode,
        "first_seen_s": watch.first_seen_s,
        "first_record_s": None if until is None else until / 1000 - t0_wall,
        "first_event": watch.first_event,
        "first_ids": watch.first_ids,
        "published": watch.published,
        "memory": memory,
        "phases": phase_sums(rows, until) if rows else None,
        "head_start_records": sum(r.get("head_start_records", 0) for r in rows),
        "exit": proc.returncode,
        "log": str(log_file),
        "compiled": {
            f.name: f.stat().st_size / 2**20 for f in sorted((ckpt / "subscriptions" / "compiled").glob("*.npz"))
        },
    }


def _report(r: Mapping[str, Any], n: int) -> None:
    if r["first_seen_s"] is None:
        print(f"  {r['label']}: NO Match record within the timeout (exit {r['exit']}; log {r['log']})", flush=True)
        return
    m = r["memory"]
    driver_b, worker_b = m["driver"] * 2**20 / n, (m["workers"][0] if m["workers"] else 0.0) * 2**20 / n
    print(
        f"  {r['label']}: first Match record {r['first_seen_s']:.1f} s after the job's start (its Kafka timestamp "
        f"{r['first_record_s']:.1f} s; event {r['first_event']}, {r['first_ids']:,} ids); resident memory then: "
        f"driver {m['driver']:,.0f} MB, JVM {m['jvm']:,.0f} MB, Python workers {m['workers']} MB; per subscription: "
        f"driver {driver_b:,.0f} B, largest worker {worker_b:,.0f} B, driver + largest worker "
        f"{driver_b + worker_b:,.0f} B (whole processes, baselines included)",
        flush=True,
    )
    p = r["phases"]
    if p:
        print(
            f"     batches up to the first match: {p['batches']}; restore {p['restore_ms'] / 1e3:.1f} s, Kafka read + "
            f"JVM decode + collect {p['read_ms'] / 1e3:.1f} s, plan + table {p['plan_ms'] / 1e3:.1f} s, "
            f"checkpoint write {p['store_ms'] / 1e3:.1f} s, ship (broadcasts, first snapshot's digest) "
            f"{p['ship_ms'] / 1e3:.1f} s, slowest worker's sync + first flush "
            f"{p['worker_ready_ms'] / 1e3:.1f} s, write {p['write_ms'] / 1e3:.1f} s; batches' time "
            f"{p['duration_ms'] / 1e3:.1f} s; records read and planned by the head start while Spark started "
            f"{r['head_start_records']:,} (not in the read and plan above)",
            flush=True,
        )
    files = ", ".join(f"{name} {mb:,.0f} MB" for name, mb in r["compiled"].items()) or "none"
    print(f"     compiled indexes in the checkpoint after the run: {files}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subs", type=int, default=1_000_000, help="live W1 subscriptions (default: %(default)s)")
    ap.add_argument(
        "--modes", default="exact,direct", help="match-job modes, one after the other (default: %(default)s)"
    )
    ap.add_argument("--restarts", type=int, default=1, help="restarts on the same checkpoint per mode")
    ap.add_argument(
        "--master",
        default="local[2]",
        help="the job's Spark master (default: %(default)s); local[1] runs one Python worker, which alone "
        "builds the index, where local[2]'s two each build one",
    )
    ap.add_argument("--port", type=int, default=39100, help="broker port; the controller's is the next one")
    ap.add_argument("--timeout", type=float, default=900, help="seconds a run may take to its first Match record")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (logs, checkpoints) and print it")
    args = ap.parse_args(argv)

    from infra.jars import ensure_jars
    from infra.kafka import BrokerConfig, down, up
    from infra.topics import ensure_topics
    from producers.kafka_writer import KafkaWriter

    work = Path(tempfile.mkdtemp(prefix="bench-cold-start-"))
    broker = BrokerConfig(home=work / "kafka", port=args.port, controller_port=args.port + 1, heap="1g")
    print(
        f"== matching job cold start through Kafka: {args.subs:,} W1 subscriptions (bench/churn.py's w1_texts, "
        f"20 attributes over [0, 10^6], 10 `between` predicates of width 5 * 10^5 each) on the compacted "
        f"subscriptions topic (2 partitions, 1 local broker); one W1 event every 100 ms from the job's start; Spark "
        f"{args.master} on {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    print(up(broker, ensure_jars()), file=sys.stderr)
    try:
        conn = KafkaConnection(broker.bootstrap)
        ensure_topics(conn, "")
        t = time.monotonic()
        writer = KafkaWriter(conn)
        record_bytes = 0
        for lo in range(0, args.subs, 50_000):
            keys, values = subscription_values(w1_texts(min(50_000, args.subs - lo), 21 + lo), lo)
            record_bytes += sum(map(len, values))
            writer.send_many(SUBSCRIPTIONS_TOPIC, keys, values)
        report = writer.flush()
        print(
            f"  setup: {args.subs:,} subscribe records ({record_bytes / max(1, args.subs):.0f} bytes each) generated, "
            f"encoded and published in {time.monotonic() - t:.1f} s ({report.failed} failed)",
            flush=True,
        )
        results = []
        for mode in [m for m in args.modes.split(",") if m]:
            for k in range(args.restarts + 1):
                label = f"{mode}-{'fresh' if k == 0 else f'restart{k}'}"
                print(f"  {label}: load average {os.getloadavg()[0]:.1f} at the start", flush=True)
                r = run_job(conn, args, mode, label, work)
                results.append(r)
                _report(r, args.subs)
        (work / "results.json").write_text(json.dumps(results, indent=2))
    finally:
        print(down(broker), file=sys.stderr)
        if args.keep:
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
