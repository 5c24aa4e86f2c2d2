"""The composites job's step object: leaf matching, detection, placement with hysteresis, state."""

from __future__ import annotations

import json
from typing import Any

from routing.matching.table import SubscriptionRecord
from routing.monitors.composites import CompositeMonitor, CompositeMonitorConfig

PERIOD = 1_000
AND = {"op": "and", "within_ms": 500, "children": ["kind = 'flight' and price < 400", "kind = 'hotel'"]}


def line() -> list[tuple[str, dict[str, Any] | None]]:
    """b1 - b2 - b3, unit costs both ways; the flight publisher at b3, the hotel publisher at b1."""
    records: list[tuple[str, dict[str, Any] | None]] = [(b, {"kind": "broker"}) for b in ("b1", "b2", "b3")]
    for u, v in (("b1", "b2"), ("b2", "b3")):
        for a, b in ((u, v), (v, u)):
            records.append((f"{a}->{b}", {"kind": "link", "from": a, "to": b, "cost": 1.0}))
    records += [("pf", {"kind": "publisher", "broker": "b3"}), ("ph", {"kind": "publisher", "broker": "b1"})]
    return records


def subscribe(mon: CompositeMonitor, sid: str, tree: Any, broker: str = "b1") -> list[Any]:
    text = tree if isinstance(tree, str) else json.dumps(tree)
    rec = SubscriptionRecord(op="subscribe", subscription_id=sid, composite=text, subscriber_id=f"user-{sid}")
    return mon.apply_subscriptions([rec], [broker])


def monitor(**overrides: Any) -> CompositeMonitor:
    cfg = {"check_period_ms": PERIOD, "rate_window_ms": PERIOD, "min_saving": 0.1, "sustain": 2}
    mon = CompositeMonitor(CompositeMonitorConfig(**{**cfg, **overrides}))
    mon.apply_topology(line())
    return mon


def feed(mon: CompositeMonitor, second: int, flights: int, hotels: int) -> None:
    """``flights`` matching flights and ``hotels`` hotels spread over one second."""
    ids, pubs, times, attrs = [], [], [], []
    for i in range(flights):
        ids.append(f"f{second}-{i}")
        pubs.append("pf")
        times.append(second * 1000 + int(i * 1000 / flights))
        attrs.append({"kind": "flight", "price": 300})
    for i in range(hotels):
        ids.append(f"h{second}-{i}")
        pubs.append("ph")
        times.append(second * 1000 + int(i * 1000 / hotels) + 1)
        attrs.append({"kind": "hotel"})
    mon.add_events(ids, pubs, times, attrs)


def test_components_are_matched_and_detected_naming_their_events() -> None:
    mon = monitor()
    assert subscribe(mon, "c1", AND) == []
    mon.add_events(
        ["x", "f", "h"],
        ["pf", "pf", "ph"],
        [100, 200, 300],
        [{"kind": "flight", "price": 900}, {"kind": "flight", "price": 350}, {"kind": "hotel"}],
    )
    detections, _ = mon.advance(1_000)
    assert len(detections) == 1
    det = detections[0]
    assert det["subscription_id"] == "c1" and det["subscriber_id"] == "user-c1"
    assert [c["event_id"] for c in det["components"]] == ["f", "h"]  # the 900 flight matched no leaf
    assert det["detected_at"] == 300


def test_invalid_composites_are_rejected_and_unsubscribe_or_an_atomic_filter_stops_detection() -> None:
    mon = monitor()
    rejected = subscribe(mon, "bad", '{"op": "and", "children": ["a = 1", "b = 2"]}')
    assert rejected and rejected[0][1][0] == "invalid_composite" and "within_ms" in rejected[0][1][1]
    subscribe(mon, "c1", AND)
    subscribe(mon, "c2", AND)
    mon.apply_subscriptions([SubscriptionRecord(op="unsubscribe", subscription_id="c1")], [None])
    mon.apply_subscriptions([SubscriptionRecord(op="subscribe", subscription_id="c2", filter="kind = 'x'")], [None])
    assert len(mon.index) == 0
    feed(mon, 0, 2, 2)
    assert mon.advance(1_000) == ([], [])


def test_placement_follows_the_heavy_leaf_and_moves_only_after_a_sustained_saving() -> None:
    mon = monitor()
    subscribe(mon, "c1", AND)
    placements = []
    # flights (at b3) 20/s against hotels (at b1) 2/s: detect beside the flights
    for s in range(3):
        feed(mon, s, 20, 2)
        placements += mon.advance((s + 1) * PERIOD)[1]
    assert [p["placement"] for p in placements] == [{"n1": "b3"}]
    first = placements[0]
    assert first["cost"] < first["baseline_cost"] and first["reasons"]["n1"]
    # one second of reversed rates: no move (the saving must last two checks)
    feed(mon, 3, 2, 20)
    assert mon.advance(4 * PERIOD)[1] == []
    feed(mon, 4, 20, 2)
    assert mon.advance(5 * PERIOD)[1] == []
    # reversed for good: the detection moves next to the hotels after two checks
    moved = []
    for s in range(5, 8):
        feed(mon, s, 2, 20)
        moved += mon.advance((s + 1) * PERIOD)[1]
    assert [(p["decided_at"], p["placement"]) for p in moved] == [(7 * PERIOD, {"n1": "b1"})]
    assert "for 2 checks in a row" in moved[0]["reasons"]["moved"]


def test_no_placement_until_every_leaf_has_been_seen() -> None:
    mon = monitor()
    subscribe(mon, "c1", AND)
    feed(mon, 0, 5, 0)
    assert mon.advance(PERIOD)[1] == []
    assert mon.counters["waiting"] == 1


def test_state_round_trip_continues_identically() -> None:
    a = monitor()
    subscribe(a, "c1", AND)
    subscribe(a, "c2", {"op": "seq", "within_ms": 800, "children": ["kind = 'hotel'", "kind = 'flight'"]})
    feed(a, 0, 10, 3)
    a.advance(PERIOD - 100)  # partial matches pending across the save
    b = CompositeMonitor.from_bytes(a.to_bytes())
    outs = []
    for mon in (a, b):
        for s in range(1, 4):
            feed(mon, s, 10 if s < 2 else 1, 3 if s < 2 else 30)
        outs.append(mon.advance(4 * PERIOD))
    assert outs[0] == outs[1]
    assert outs[0][0] and outs[0][1]


def forbid(mon: CompositeMonitor, u: str, v: str, events: list[str]) -> None:
    mon.apply_topology([(f"{u}->{v}", {"kind": "link", "from": u, "to": v, "cost": 1.0, "forbidden_events": events})])


def test_policy_constraints_place_the_detection_with_micpice() -> None:
    mon = monitor()
    subscribe(mon, "c1", AND)
    forbid(mon, "b3", "b2", ["c1"])  # detections may not leave b3 towards the subscriber
    feed(mon, 0, 20, 2)
    record = mon.advance(PERIOD)[1][0]
    assert record["method"].startswith("micpice-")
    assert record["placement"]["n1"] in ("b1", "b2")  # not b3, the optimum without the policy
    assert "policy constraints on 1 links" in record["reasons"]["n1"]
    # flights 20/s over b3->b2 (and b2->b1 when detected at b1); hotels 2/s; detections stay cheap
    assert record["cost"] >= 20.0


def test_policy_constraints_with_no_allowed_placement_write_nothing() -> None:
    mon = monitor()
    subscribe(mon, "c1", AND)
    forbid(mon, "b3", "b2", ["c1", "c1#L1"])  # neither flights nor detections may leave b3
    feed(mon, 0, 20, 2)
    assert mon.advance(PERIOD)[1] == []
    assert mon.counters["infeasible"] == 1 and "no policy-allowed placement" in mon.notes[-1]


def test_micpice_costing_equals_the_spec_6_cost_without_policy() -> None:
    from itertools import product

    from routing.composite.placement import PlacementInstance, traffic_cost
    from routing.monitors.composites import micpice_cost, policy_instance

    mon = monitor()
    tree = {"op": "or", "children": [AND, "kind = 'weather'"]}
    subscribe(mon, "c1", tree)
    mon.apply_topology([("pw", {"kind": "publisher", "broker": "b2"})])
    feed(mon, 0, 20, 2)
    mon.add_events(["w1", "w2"], ["pw", "pw"], [300, 600], [{"kind": "weather"}, {"kind": "weather"}])
    doc = mon.instance("c1", PERIOD)
    assert not isinstance(doc, str)
    inst = PlacementInstance.from_json(doc)
    micpice = policy_instance(inst, "c1", {})
    for where in product(("b1", "b2", "b3"), repeat=2):
        placement = dict(zip(("n1", "n2"), where, strict=True))
        assert micpice_cost(micpice, placement) == traffic_cost(inst, placement)
