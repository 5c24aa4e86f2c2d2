"""The live feeds of ``siftstream serve --demo``: each runs until SIGTERM or Ctrl-C, at a modest rate.

``stocks`` and ``sensors``
    The demo workloads of :mod:`producers.workloads` (``StocksWorkload``, ``SensorsWorkload``):
    their subscriptions once, then events at ``--rate`` per second, stamped with the wall clock.
``overlay``
    The overlay simulator (:mod:`producers.overlay`) on the reliability paper's 20-broker tree,
    in rounds of ``ROUND_S`` simulated seconds played in real time: the topology and the
    subscriptions (with a reliability wish) once, then each round's events, link and broker
    telemetry and receipts, its event ids tagged with the round so that no two rounds share one.
    Its rate is the simulated overlay's (a few hundred records per second), not ``--rate``.
``clients``
    A few :class:`streaming.client.Subscriber` clients with stocks and sensors filters, following
    their delivery channels and writing receipts; one line per minute with what each received.

Run one: ``python -m streaming.feeds stocks --bootstrap-servers 127.0.0.1:9092 --rate 50``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from infra.connection import KafkaConnection
from streaming import logs

__all__ = ["CLIENT_FILTERS", "ROUND_S", "main", "run_clients", "run_overlay", "run_workload_feed"]

ROUND_S = 30.0
"""Simulated seconds per overlay round."""

CLIENT_FILTERS = (
    "symbol = 'IBM'",
    "price < 60",
    "kind = 'co2' and value > 650",
)
"""The demo clients' filters: two over the stocks feed, one over the sensors feed."""


def _say(feed: str, text: str) -> None:
    logs.get(f"feed.{feed}").info(text)


def run_workload_feed(kind: str, conn: KafkaConnection, prefix: str, rate: float, seed: int, stop: Any) -> int:
    """Subscriptions once, then events at ``rate`` per second until ``stop`` is set; returns the
    number of events written."""
    from producers.sinks import KafkaSink
    from producers.workloads import SensorsWorkload, StocksWorkload

    workload: Any = (StocksWorkload if kind == "stocks" else SensorsWorkload)(rate_per_s=rate, seed=seed)
    # the workload's clock starts at a fixed date; the live feed publishes at the wall clock
    workload._clock.t = time.time() * 1000.0
    sink = KafkaSink(conn, prefix)
    sink.subscriptions(workload.subscriptions())
    sink.close()
    sent, started, chunk = 0, time.monotonic(), max(1, int(rate / 5))
    while not stop.is_set():
        sink.events(workload.columns(chunk))
        sent += chunk
        ahead = sent / rate - (time.monotonic() - started)
        if ahead > 0:
            stop.wait(ahead)
        if sent % max(chunk, int(rate * 60)) < chunk:
            sink.writer.flush()
    sink.close()
    return sent


def run_overlay(conn: KafkaConnection, prefix: str, seed: int, stop: Any) -> int:
    """Rounds of the simulated overlay in real time until ``stop`` is set; returns records written."""
    from producers import overlay
    from producers.kafka_writer import KafkaWriter
    from routing.reliability.evaluation_system import reliability_tree_system
    from schemas.codec import codec_for
    from schemas.topics import SUBSCRIPTIONS_TOPIC, TOPOLOGY_TOPIC

    system = reliability_tree_system(seed + 1, lifetime_ms=4000.0)
    codecs = {t: codec_for(name) for t, name in overlay.SCHEMA_OF.items()}
    writer = KafkaWriter(conn)
    sent, round_no = 0, 0
    while not stop.is_set():
        result = overlay.run(system, ROUND_S, seed + round_no, telemetry=True)
        assert result.telemetry is not None
        rows = overlay.records(system, result.telemetry, int(time.time() * 1000), min_reliability=0.9)
        started, first = time.monotonic(), None
        for t, topic, key, record in rows:
            if round_no and topic in (TOPOLOGY_TOPIC, SUBSCRIPTIONS_TOPIC):
                continue  # the overlay's shape is written once
            if record.get("event_id") is not None:
                record = {**record, "event_id": f"r{round_no}-{record['event_id']}"}
            first = t if first is None else first
            wait = (t - first) / 1000.0 - (time.monotonic() - started)
            if wait > 0 and stop.wait(wait):
                break
            writer.send(prefix + topic, key, codecs[topic].encode(record))
            sent += 1
        writer.flush()
        round_no += 1
    return sent


def run_clients(conn: KafkaConnection, prefix: str, stop: Any, report_s: float = 60.0) -> dict[str, int]:
    """One :class:`streaming.client.Subscriber` per filter of :data:`CLIENT_FILTERS`, each on its own
    thread, until ``stop`` is set; returns the events each received."""
    from streaming.client import Subscriber

    received = {f"demo-client{i}": 0 for i in range(len(CLIENT_FILTERS))}

    def client(sid: str, text: str) -> None:
        with Subscriber(conn=conn, topic_prefix=prefix, subscriber_id=sid) as sub:
            stream = sub.subscribe(text, subscription_id=f"{sid}-sub")
            while not stop.is_set():
                if stream.poll(0.5) is not None:
                    received[sid] += 1

    threads = [
        threading.Thread(target=client, args=(sid, text), daemon=True)
        for sid, text in zip(received, CLIENT_FILTERS, strict=True)
    ]
    for t in threads:
        t.start()
    while not stop.wait(report_s):
        _say("clients", ", ".join(f"{sid}: {n:,} events" for sid, n in received.items()))
    for t in threads:
        t.join(10)
    return received


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m streaming.feeds", description=__doc__.splitlines()[0])
    parser.add_argument("feed", choices=["stocks", "sensors", "overlay", "clients"])
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--kafka-config", help="client properties file (as every siftstream command takes)")
    parser.add_argument("--topic-prefix", default="")
    parser.add_argument("--rate", type=float, default=100.0, help="events per second (stocks, sensors)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    # the level and format of the serve process that started this one (streaming.logs.environment)
    logs.setup(os.environ.get(logs.LOG_LEVEL_ENV, "info"), os.environ.get(logs.LOG_FORMAT_ENV, "text"))
    conn = KafkaConnection.from_file(args.bootstrap_servers, args.kafka_config)
    stop = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.set())
    if args.feed in ("stocks", "sensors"):
        n = run_workload_feed(args.feed, conn, args.topic_prefix, args.rate, args.seed, stop)
        _say(args.feed, f"stopped after {n:,} events")
    elif args.feed == "overlay":
        n = run_overlay(conn, args.topic_prefix, args.seed, stop)
        _say("overlay", f"stopped after {n:,} records")
    else:
        run_clients(conn, args.topic_prefix, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
