"""The overlay simulator at the edge: runs ``routing.reliability.simulator`` with the real filter language and
turns its column tables into SiftStream records (events, link and broker telemetry, receipts)
for Kafka or JSON Lines files, in simulated time or time-scaled real time."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from routing.matching.language import parse_filter
from routing.planning.topology import element_record
from routing.reliability.simulator import SimulationResult, Telemetry, simulate
from schemas.topics import (
    BROKER_TELEMETRY_TOPIC,
    EVENTS_TOPIC,
    LINK_TELEMETRY_TOPIC,
    RECEIPTS_TOPIC,
    SUBSCRIPTIONS_TOPIC,
    TOPOLOGY_TOPIC,
)

__all__ = [
    "SCHEMA_OF",
    "emit",
    "filter_matcher",
    "records",
    "run",
    "setup_records",
    "summary",
]


def filter_matcher() -> Any:
    """``(filter text, attributes) -> bool`` with each filter parsed once."""
    parsed: dict[str, Any] = {}

    def match(text: str, attributes: Mapping[str, object]) -> bool:
        f = parsed.get(text)
        if f is None:
            f = parsed[text] = parse_filter(text)
        return bool(f.matches(attributes))

    return match


def run(system: dict[str, Any], seconds: float, seed: int, telemetry: bool = False) -> SimulationResult:
    return simulate(system, seconds, seed, filter_matcher(), collect_telemetry=telemetry)


def setup_records(
    system: dict[str, Any], epoch_ms: int, min_reliability: float | None = None
) -> list[tuple[str, str, dict[str, Any]]]:
    """The overlay's shape as ``(topic, key, record)``: its topology elements (brokers, links with
    their reliability, publishers and subscribers with their home broker) and one subscription
    per subscriber (id = the subscriber's id, its filter, ``min_reliability`` as its wish)."""
    out: list[tuple[str, str, dict[str, Any]]] = []

    def element(element_id: str, kind: str, **fields: Any) -> None:
        out.append((TOPOLOGY_TOPIC, element_id, element_record(element_id, kind, epoch_ms, **fields)))

    for b in system["brokers"]:
        element(b["id"], "broker")
    for p in system["publishers"]:
        element(p["id"], "publisher", broker=p["broker"])
    for s in system["subscribers"]:
        element(s["id"], "subscriber", broker=s["broker"])
    for link in system["links"]:
        name = f"{link['from']}->{link['to']}"
        element(name, "link", **{"from": link["from"], "to": link["to"], "reliability": float(link["reliability"])})
    for s in system["subscribers"]:
        record = {
            "type": "subscribe",
            "subscription_id": s["id"],
            "subscriber_id": s["id"],
            "broker": s["broker"],
            "filter": s["filter"],
            "composite": None,
            "deadline_ms": None,
            "min_reliability": min_reliability,
            "issued_at": epoch_ms,
        }
        out.append((SUBSCRIPTIONS_TOPIC, s["id"], record))
    return out


def records(
    system: dict[str, Any], tel: Telemetry, epoch_ms: int, min_reliability: float | None = None
) -> Iterator[tuple[float, str, str, dict[str, Any]]]:
    """Every row as ``(time ms, topic name, key, record)``, in time order: first the overlay's
    shape (:func:`setup_records`, at the earliest time), then events, telemetry and receipts.

    Simulated times (ms from the start of the counting window) are shifted by ``epoch_ms``.
    Event ids are ``<publisher>-<index>``; an event's attributes are those of its content entry.
    """
    content = {p["id"]: [c["attributes"] for c in p["content"]] for p in system["publishers"]}
    ev = tel.events
    event_ids = [f"{tel.publisher_ids[p]}-{i}" for i, p in enumerate(ev.publisher.tolist())]
    start = float(ev.published_at_ms.min()) if len(ev.published_at_ms) else 0.0
    rows: list[tuple[float, str, str, dict[str, Any]]] = [
        (start - 1.0, topic, key, record) for topic, key, record in setup_records(system, epoch_ms, min_reliability)
    ]
    for i, (p, c, t, life) in enumerate(
        zip(
            ev.publisher.tolist(),
            ev.content.tolist(),
            ev.published_at_ms.tolist(),
            ev.lifetime_ms.tolist(),
            strict=True,
        )
    ):
        pub = tel.publisher_ids[p]
        rows.append(
            (
                t,
                EVENTS_TOPIC,
                pub,
                {
                    "event_id": event_ids[i],
                    "publisher_id": pub,
                    "published_at": epoch_ms + int(t),
                    "lifetime_ms": int(life),
                    "attributes": dict(content[pub][c]),
                },
            )
        )
    ls = tel.links
    for link, seq, sent, delay, lost, e in zip(
        ls.link.tolist(),
        ls.seq.tolist(),
        ls.sent_at_ms.tolist(),
        ls.delay_ms.tolist(),
        ls.lost.tolist(),
        ls.event.tolist(),
        strict=True,
    ):
        src, dst = tel.link_from[link], tel.link_to[link]
        rows.append(
            (
                sent,
                LINK_TELEMETRY_TOPIC,
                f"{src}->{dst}",
                {
                    "from": src,
                    "to": dst,
                    "seq": seq,
                    "sent_at": epoch_ms + int(sent),
                    "delay_ms": None if lost else float(delay),
                    "lost": bool(lost),
                    "event_id": event_ids[e],
                },
            )
        )
    bs = tel.brokers
    for b, e, arrived, wait, service, queue in zip(
        bs.broker.tolist(),
        bs.event.tolist(),
        bs.arrived_at_ms.tolist(),
        bs.wait_ms.tolist(),
        bs.service_ms.tolist(),
        bs.queue_length.tolist(),
        strict=True,
    ):
        broker = tel.broker_ids[b]
        rows.append(
            (
                arrived,
                BROKER_TELEMETRY_TOPIC,
                broker,
                {
                    "broker_id": broker,
                    "event_id": event_ids[e],
                    "arrived_at": epoch_ms + int(arrived),
                    "wait_ms": float(wait),
                    "service_ms": float(service),
                    "queue_length": int(queue),
                },
            )
        )
    rc = tel.receipts
    for s, e, at in zip(rc.subscriber.tolist(), rc.event.tolist(), rc.received_at_ms.tolist(), strict=True):
        sub = tel.subscriber_ids[s]
        rows.append(
            (
                at,
                RECEIPTS_TOPIC,
                sub,
                {"subscriber_id": sub, "event_id": event_ids[e], "received_at": epoch_ms + int(at)},
            )
        )
    rows.sort(key=lambda r: r[0])  # stable: the setup rows stay first, in order
    yield from rows


SCHEMA_OF = {
    TOPOLOGY_TOPIC: "TopologyElement",
    SUBSCRIPTIONS_TOPIC: "Subscription",
    EVENTS_TOPIC: "Event",
    LINK_TELEMETRY_TOPIC: "LinkSample",
    BROKER_TELEMETRY_TOPIC: "BrokerSample",
    RECEIPTS_TOPIC: "Receipt",
}


def emit(rows: Iterator[tuple[float, str, str, dict[str, Any]]], send: Any, time_scale: float = 0.0) -> int:
    """Hand every row to ``send(topic, key, record)``; with ``time_scale`` > 0 pace them in real time
    (1.0: as simulated, 10.0: ten times faster). Returns the number of rows."""
    start = time.monotonic()
    first: float | None = None
    n = 0
    for t, topic, key, record in rows:
        if time_scale > 0:
            first = t if first is None else first
            wait = (t - first) / 1000.0 / time_scale - (time.monotonic() - start)
            if wait > 0:
                time.sleep(wait)
        send(topic, key, record)
        n += 1
    return n


def summary(result: SimulationResult) -> dict[str, Any]:
    rel = [
        s.reliability for s in result.subscribers.values() if s.reliability is not None and not np.isnan(s.reliability)
    ]
    return {
        "subscribers": len(result.subscribers),
        "brokers": len(result.brokers),
        "event_hops": result.event_hops,
        "events": result.events,
        "mean_reliability": float(np.mean(rel)) if rel else None,
    }
