"""The demo's live feeds (``siftstream serve --demo``) without Kafka: their records, as the QoS job
reads them, through the pure QoS monitor.

The demo once showed an alert on nearly every overlay subscriber, with predicted reliability 0 and
broker utilisation 2-3: the stocks feed's publishers (``p0`` ... ``p8``) shared the overlay's
publisher names, so the monitor took every trade for an overlay publication; each round also
restarted every link's sequence numbers (hiding the losses) and left the overlay idle while its
queues drained (lowering the measured load).
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np
import pytest

from routing.matching.table import SubscriptionRecord
from routing.monitors.qos import QosMonitor, QosMonitorConfig
from schemas.topics import (
    BROKER_TELEMETRY_TOPIC,
    EVENTS_TOPIC,
    LINK_TELEMETRY_TOPIC,
    RECEIPTS_TOPIC,
    SUBSCRIPTIONS_TOPIC,
    TOPOLOGY_TOPIC,
)
from streaming.feeds import ROUND_S, demo_overlay_system, demo_workload, overlay_round

ROUNDS = 5  # 150 s of overlay time: a report over half the monitor's 5-minute window
STOCKS_RATE = 20.0  # the integration test's --demo-rate

Row = tuple[float, str, str, dict[str, Any]]


def overlay_rows(system: dict[str, Any], rounds: int) -> list[Row]:
    """The overlay feed's rows for ``rounds`` rounds, in the order the feed writes them."""
    seq: dict[str, int] = {}
    rows: list[Row] = []
    for r in range(rounds):
        rows = list(heapq.merge(rows, overlay_round(system, r, 0, 0, seq), key=lambda row: row[0]))
    return rows


def stocks_rows(rate: float, until_ms: float) -> list[Row]:
    workload = demo_workload("stocks", rate, 0)
    workload._clock.t = 0.0  # the feed sets the wall clock; the overlay rows count from 0 here
    out = []
    for rec in workload.columns(int(rate * until_ms / 1000.0)).records():
        if rec["published_at"] < until_ms:
            out.append((float(rec["published_at"]), EVENTS_TOPIC, rec["publisher_id"], rec))
    return out


def feed(monitor: QosMonitor, rows: list[Row]) -> None:
    """Every row to the monitor, topic by topic as one QoS job batch hands them over."""
    by: dict[str, list[dict[str, Any]]] = {}
    for _t, topic, key, rec in rows:
        by.setdefault(topic, []).append({"_key": key, **rec})
    monitor.apply_topology([(r["_key"], r) for r in by.get(TOPOLOGY_TOPIC, [])])
    subs = by.get(SUBSCRIPTIONS_TOPIC, [])
    monitor.apply_subscriptions(
        [
            SubscriptionRecord(key=r["_key"], op="subscribe", subscription_id=r["subscription_id"], filter=r["filter"])
            for r in subs
        ],
        subs,
    )
    ev = by[EVENTS_TOPIC]
    monitor.add_events(
        [r["event_id"] for r in ev],
        [r["publisher_id"] for r in ev],
        [r["published_at"] for r in ev],
        [r["lifetime_ms"] for r in ev],
        [r["attributes"] for r in ev],
    )
    lk = by[LINK_TELEMETRY_TOPIC]
    monitor.add_link_samples(
        [r["from"] for r in lk],
        [r["to"] for r in lk],
        [r["seq"] for r in lk],
        [r["sent_at"] for r in lk],
        [np.nan if r["delay_ms"] is None else r["delay_ms"] for r in lk],
        [r["lost"] for r in lk],
    )
    bk = by[BROKER_TELEMETRY_TOPIC]
    monitor.add_broker_samples(
        [r["broker_id"] for r in bk],
        [r["arrived_at"] for r in bk],
        [r["wait_ms"] for r in bk],
        [r["service_ms"] for r in bk],
    )
    rc = by[RECEIPTS_TOPIC]
    monitor.add_receipts([r["subscriber_id"] for r in rc], [r["event_id"] for r in rc], [r["received_at"] for r in rc])


@pytest.fixture(scope="module")
def system() -> dict[str, Any]:
    return demo_overlay_system(0)


def test_stocks_and_sensors_publishers_are_not_the_overlays(system: dict[str, Any]) -> None:
    overlay_publishers = {p["id"] for p in system["publishers"]}
    for kind in ("stocks", "sensors"):
        names = {r["publisher_id"] for r in demo_workload(kind, 50.0, 0).columns(2000).records()}
        assert names and not names & overlay_publishers, (kind, sorted(names & overlay_publishers))


def test_rounds_abut_and_each_link_numbers_its_transmissions_once(system: dict[str, Any]) -> None:
    rows = overlay_rows(system, 3)
    published = [r["published_at"] for _t, topic, _k, r in rows if topic == EVENTS_TOPIC]
    assert min(published) >= 0 and max(published) < 3 * ROUND_S * 1000
    # no idle gap between rounds: 8 publishers at 1/s leave gaps of about 1 s at most
    assert np.diff(np.sort(published)).max() < 3000 and min(published) < 3000 and max(published) > 87_000
    seqs: dict[str, list[int]] = {}
    for _t, topic, key, r in rows:
        if topic == LINK_TELEMETRY_TOPIC:
            seqs.setdefault(key, []).append(r["seq"])
    for key, numbers in seqs.items():
        assert sorted(numbers) == list(range(len(numbers))), key
    ids = [r["event_id"] for _t, topic, _k, r in rows if topic == EVENTS_TOPIC]
    assert len(ids) == len(set(ids))


def test_demo_brokers_are_stable_but_one_and_healthy_subscribers_are_predicted(system: dict[str, Any]) -> None:
    """The demo's first 150 s of overlay telemetry and stocks events through the monitor: every
    broker but the saturated one has rho < 1, every subscriber elsewhere gets a prediction that
    agrees with its measurement, and the alerts are the saturated broker's subscribers and a few."""
    rows = overlay_rows(system, ROUNDS)
    end_ms = ROUNDS * ROUND_S * 1000.0
    monitor = QosMonitor(QosMonitorConfig(bootstrap=5))
    feed(monitor, sorted(rows + stocks_rows(STOCKS_RATE, end_ms), key=lambda row: row[0]))
    reports, _notes = monitor.report(int(end_ms - 10_000))
    brokers = {r["id"]: r for r in reports if r["kind"] == "broker"}
    subscribers = {r["id"]: r for r in reports if r["kind"] == "subscriber"}

    hot = [b["id"] for b in system["brokers"] if b["service_ms"]["mean"] != 100.0]
    assert len(hot) == 1
    assert brokers[hot[0]]["rho"] > 1.0
    assert all(0.0 < r["rho"] < 0.9 for b, r in brokers.items() if b != hot[0]), {
        b: r["rho"] for b, r in brokers.items()
    }

    behind = {s["id"] for s in system["subscribers"] if s["broker"] == hot[0]}
    assert behind and all(subscribers[s]["alert"] is not None for s in behind)
    # every subscriber that some event matched; one whose filter no content matches has neither number
    healthy = [r for s, r in subscribers.items() if s not in behind and r["measured_reliability"] is not None]
    assert len(healthy) >= 0.9 * (len(subscribers) - len(behind))
    predicted = np.array([r["reliability"] for r in healthy], dtype=float)
    measured = np.array([r["measured_reliability"] for r in healthy], dtype=float)
    assert not np.isnan(predicted).any() and predicted.min() > 0.5
    assert abs(np.mean(predicted - measured)) < 0.03 and np.mean(np.abs(predicted - measured)) < 0.05
    disagree = [r["id"] for r in healthy if any("disagree" in w for w in r["warnings"])]
    assert len(disagree) <= 0.05 * len(healthy), disagree
    alerted = [r["id"] for r in healthy if r["alert"] is not None]
    assert len(alerted) <= 0.1 * len(healthy), alerted
