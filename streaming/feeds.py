"""The live feeds of ``siftstream serve --demo``: each runs until SIGTERM or Ctrl-C, at a modest rate.

``stocks`` and ``sensors``
    The demo workloads of :mod:`producers.workloads` (``StocksWorkload``, ``SensorsWorkload``):
    their subscriptions once, then events at ``--rate`` per second, stamped with the wall clock.
    The stocks publishers are numbered from :data:`STOCKS_FIRST_PUBLISHER` (``p100`` ...), apart
    from the overlay's publishers ``p1`` ... ``p8``: the QoS job takes every event of a publisher
    of the topology as that publisher's, so a shared name would load the overlay's model with
    the stocks feed's rate.
``overlay``
    The overlay simulator (:mod:`producers.overlay`) on the demo overlay
    (:func:`demo_overlay_system`: the reliability paper's 20-broker tree, with one broker
    deliberately saturated), in rounds of ``ROUND_S`` simulated seconds played in real time
    (:func:`overlay_round`): the topology and the subscriptions (with the reliability wish
    :data:`WISH`) once, then each round's events, link and broker telemetry and receipts, its
    event ids tagged with the round so that no two rounds share one, and each link's sequence
    numbers continuing from the previous round's (a link numbers its transmissions once, as the
    loss estimate of docs/reference/reliability-model.md §6.5 assumes: numbers restarting at 0
    would fill one round's gaps with another round's numbers and hide the loss).
    Its rate is the simulated overlay's (a few hundred records per second), not ``--rate``.
``clients``
    A few :class:`streaming.client.Subscriber` clients with stocks and sensors filters, following
    their delivery channels and writing receipts; one line per minute with what each received.

Run one: ``python -m streaming.feeds stocks --bootstrap-servers 127.0.0.1:9092 --rate 50``.
"""

from __future__ import annotations

import argparse
import heapq
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from infra.connection import KafkaConnection
from streaming import logs

__all__ = [
    "CLIENT_FILTERS",
    "ROUND_S",
    "SATURATED_RHO",
    "STOCKS_FIRST_PUBLISHER",
    "WISH",
    "demo_overlay_system",
    "demo_workload",
    "main",
    "overlay_round",
    "run_clients",
    "run_overlay",
    "run_workload_feed",
]

ROUND_S = 30.0
"""Simulated seconds per overlay round."""

STOCKS_FIRST_PUBLISHER = 100
"""The stocks feed's first publisher number (``p100``): apart from the overlay's ``p1`` ... ``p8``."""

WISH = 0.8
"""The overlay subscribers' ``min_reliability``."""

SATURATED_RHO = 1.2
"""Utilisation given to the demo overlay's one saturated broker (:func:`demo_overlay_system`)."""

CLIENT_FILTERS = (
    "symbol = 'IBM'",
    "price < 60",
    "kind = 'co2' and value > 650",
)
"""The demo clients' filters: two over the stocks feed, one over the sensors feed."""


def _say(feed: str, text: str) -> None:
    logs.get(f"feed.{feed}").info(text)


def demo_workload(kind: str, rate: float, seed: int) -> Any:
    """The ``stocks`` or ``sensors`` feed's workload at ``rate`` events per second (stocks
    publishers from :data:`STOCKS_FIRST_PUBLISHER`).

    Examples
    --------
    >>> sorted(set(demo_workload("stocks", 10.0, 0).columns(16).records()[i]["publisher_id"] for i in range(16)))[:2]
    ['p100', 'p101']
    """
    from producers.workloads import SensorsWorkload, StocksWorkload

    if kind == "stocks":
        return StocksWorkload(rate_per_s=rate, seed=seed, first_publisher=STOCKS_FIRST_PUBLISHER)
    return SensorsWorkload(rate_per_s=rate, seed=seed)


def run_workload_feed(kind: str, conn: KafkaConnection, prefix: str, rate: float, seed: int, stop: Any) -> int:
    """Subscriptions once, then events at ``rate`` per second until ``stop`` is set; returns the
    number of events written."""
    from producers.sinks import KafkaSink

    workload = demo_workload(kind, rate, seed)
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


def demo_overlay_system(seed: int) -> dict[str, Any]:
    """The demo's overlay: :func:`routing.reliability.evaluation_system.reliability_tree_system`
    (``seed + 1``, lifetime 4 s) with one broker deliberately saturated.

    The saturated broker is the leaf broker (one tree neighbour, no publisher) with the most local
    subscribers (ties: the first); its mean service time is scaled so that the model's utilisation
    (:func:`routing.reliability.prediction.predict`) is :data:`SATURATED_RHO`. Its subscribers are
    the demo's expected alerts; every other broker keeps the tree's load (rho below 0.8).

    Examples
    --------
    >>> system = demo_overlay_system(0)
    >>> [b["id"] for b in system["brokers"] if b["service_ms"]["mean"] != 100.0]
    ['b19']
    """
    from routing.reliability.evaluation_system import reliability_tree_system
    from routing.reliability.prediction import predict

    system = reliability_tree_system(seed + 1, lifetime_ms=4000.0)
    ids = {b["id"] for b in system["brokers"]}
    neighbours = {b: sum(1 for link in system["links"] if link["from"] == b and link["to"] in ids) for b in ids}
    homes = {p["broker"] for p in system["publishers"]}
    local = {b: sum(1 for s in system["subscribers"] if s["broker"] == b) for b in ids}
    leaves = [b["id"] for b in system["brokers"] if neighbours[b["id"]] == 1 and b["id"] not in homes]
    hot = max(leaves, key=lambda b: local[b])  # max keeps the first of equals
    rho = predict(system, model="gg1").brokers[hot].rho
    for b in system["brokers"]:
        if b["id"] == hot:
            b["service_ms"] = {**b["service_ms"], "mean": b["service_ms"]["mean"] * SATURATED_RHO / rho}
    return system


def overlay_round(
    system: dict[str, Any], round_no: int, seed: int, epoch_ms: int, next_seq: dict[str, int]
) -> list[tuple[float, str, str, dict[str, Any]]]:
    """One round of the simulated overlay as ``(time ms, topic name, key, record)`` rows in time
    order, as the feed writes them: round ``round_no`` covers ``[round_no, round_no + 1) x ROUND_S``
    seconds after ``epoch_ms`` (the times of the rows count from ``epoch_ms``).

    Kept: the events published in the round's counting window ``[0, ROUND_S)`` and all their
    telemetry and receipts, whose tail (the drain of the queues) overlaps the next round's start;
    the simulator's warm-up and cool-down events (:func:`routing.reliability.simulator.simulate`)
    only load its queues, so that the rounds abut into one stationary stream (played one after
    the other with their warm-up and drain, the overlay would be idle for part of every round
    and the QoS job's rates averaged over those gaps). Round 0 carries the topology and the
    subscriptions (wish :data:`WISH`); every round's event ids are tagged ``r<round>-``; each
    link's sequence numbers go on from ``next_seq`` (``"from->to"`` -> the next number), which
    is updated: the kept transmissions of a link are numbered consecutively in sending order.

    Examples
    --------
    >>> system, seq = demo_overlay_system(0), {}
    >>> first = overlay_round(system, 0, 0, 0, seq)
    >>> second = overlay_round(system, 1, 0, 0, seq)
    >>> def seqs(rows):  # p1's access link, over both rounds: 0, 1, 2, ... with no gap or repeat
    ...     return [r["seq"] for _t, _topic, key, r in rows if key == "p1->b20" and "seq" in r]
    >>> both = seqs(first) + seqs(second)
    >>> min(seqs(second)) == max(seqs(first)) + 1 and sorted(both) == list(range(len(both)))
    True
    >>> min(t for t, *_ in second) >= 30_000.0
    True
    """
    from producers import overlay
    from schemas.topics import EVENTS_TOPIC, LINK_TELEMETRY_TOPIC, SUBSCRIPTIONS_TOPIC, TOPOLOGY_TOPIC

    result = overlay.run(system, ROUND_S, seed + round_no, telemetry=True)
    assert result.telemetry is not None
    shift = round_no * ROUND_S * 1000.0
    rows = list(overlay.records(system, result.telemetry, epoch_ms + int(shift), min_reliability=WISH))
    kept = {r["event_id"] for t, topic, _k, r in rows if topic == EVENTS_TOPIC and 0.0 <= t < ROUND_S * 1000.0}
    out: list[tuple[float, str, str, dict[str, Any]]] = []
    links: dict[str, list[int]] = {}  # link -> positions in out of its kept samples
    for t, topic, key, record in rows:
        if topic in (TOPOLOGY_TOPIC, SUBSCRIPTIONS_TOPIC):
            if round_no == 0:  # the overlay's shape is written once
                out.append((t + shift, topic, key, record))
            continue
        if record["event_id"] not in kept:
            continue
        if topic == LINK_TELEMETRY_TOPIC:
            links.setdefault(key, []).append(len(out))
        out.append((t + shift, topic, key, {**record, "event_id": f"r{round_no}-{record['event_id']}"}))
    for key, at in links.items():
        at.sort(key=lambda i: out[i][3]["seq"])
        base = next_seq.get(key, 0)
        for n, i in enumerate(at):
            t, topic, k, record = out[i]
            out[i] = (t, topic, k, {**record, "seq": base + n})
        next_seq[key] = base + len(at)
    return out


def run_overlay(conn: KafkaConnection, prefix: str, seed: int, stop: Any) -> int:
    """Rounds of the simulated overlay (:func:`overlay_round`) in real time until ``stop`` is
    set, each round's rows merged in time order with the next round's once its window ended;
    returns records written."""
    from producers import overlay
    from producers.kafka_writer import KafkaWriter
    from schemas.codec import codec_for

    system = demo_overlay_system(seed)
    codecs = {t: codec_for(name) for t, name in overlay.SCHEMA_OF.items()}
    writer = KafkaWriter(conn)
    epoch_ms, started = int(time.time() * 1000), time.monotonic()
    sent, round_no, next_seq = 0, 0, dict[str, int]()
    pending: deque[tuple[float, str, str, dict[str, Any]]] = deque()
    while not stop.is_set():
        # the next round's rows start at its window's start: merge them before passing it
        pending = deque(heapq.merge(pending, overlay_round(system, round_no, seed, epoch_ms, next_seq), key=_first))
        round_no += 1
        window_end = round_no * ROUND_S * 1000.0
        while pending and pending[0][0] < window_end:
            t, topic, key, record = pending.popleft()
            wait = t / 1000.0 - (time.monotonic() - started)
            if wait > 0 and stop.wait(wait):
                break
            writer.send(prefix + topic, key, codecs[topic].encode(record))
            sent += 1
        writer.flush()
    return sent


def _first(row: tuple[float, str, str, dict[str, Any]]) -> float:
    return row[0]


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
