"""The independent policy check (routing.planning.policy) fails on plans that break a link's
policy, and passes the routes planner's own plans over overlays whose policies bind."""

from __future__ import annotations

from typing import Any

import pytest

from routing.monitors.routes import PlannerConfig, RoutePlanner
from routing.planning.policy import check_policy, link_policies
from routing.planning.topology import attach_clients, flat_random


def link(src: str, dst: str, *forbidden: str) -> tuple[str, dict[str, Any]]:
    return f"{src}->{dst}", {"kind": "link", "from": src, "to": dst, "cost": 1.0, "forbidden_events": list(forbidden)}


def plan(*sent: tuple[str, str, str], version: int = 1) -> dict[str, Any]:
    return {"version": version, "transmissions": [{"from": u, "to": v, "event": e} for u, v, e in sent]}


def test_a_transmission_of_a_forbidden_event_fails() -> None:
    verdict = check_policy([link("b1", "b2", "p1|price < 5")], [plan(("b1", "b2", "p1|price < 5"))])
    assert not verdict.ok
    assert verdict.violations == ("plan v1 sends p1|price < 5 over b1->b2, whose policy forbids p1|price < 5",)


def test_a_forbidden_publisher_forbids_each_of_its_events() -> None:
    sent = [("b1", "b2", "p1|a = 1"), ("b1", "b2", "p2|a = 1"), ("b2", "b1", "p1|a = 1")]
    verdict = check_policy([link("b1", "b2", "p1"), link("b2", "b1")], [plan(*sent)])
    assert verdict.violations == ("plan v1 sends p1|a = 1 over b1->b2, whose policy forbids p1",)
    assert (verdict.plans, verdict.transmissions, verdict.constrained) == (1, 3, 2)


def test_every_plan_record_is_checked_not_only_the_last() -> None:
    topology = [link("b1", "b2", "p1")]
    verdict = check_policy(topology, [plan(("b1", "b2", "p1|x"), version=1), plan(version=2)])
    assert [v.split()[1] for v in verdict.violations] == ["v1"]


def test_the_topology_is_read_as_a_compacted_table() -> None:
    lifted = [link("b1", "b2", "p1"), link("b1", "b2")]  # the latest record of an element wins
    assert check_policy(lifted, [plan(("b1", "b2", "p1|x"))]).ok
    removed = [link("b1", "b2", "p1"), ("b1->b2", None)]
    assert link_policies(removed) == {}
    imposed = [link("b1", "b2"), link("b1", "b2", "p1|x")]
    assert not check_policy(imposed, [plan(("b1", "b2", "p1|x"))]).ok
    # a link that the topology does not list has no policy (the planner's subscriber links)
    assert check_policy(imposed, [plan(("b2", "s1", "p1|x"))]).ok


def _planner_run(records: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """The routes planner over an overlay, four subscriptions and steady matches: its plan records."""
    subscribers = sorted(r["element_id"] for r in records if r["kind"] == "subscriber")
    homes = {r["element_id"]: r["broker"] for r in records if r["kind"] in ("subscriber", "publisher")}
    publishers = sorted(r["element_id"] for r in records if r["kind"] == "publisher")
    filters = ["price < 50", "symbol = 'IBM'", "volume > 10", "price < 50"]
    planner = RoutePlanner(PlannerConfig(check_period_ms=1000, rate_window_ms=10_000))
    planner.apply_topology([(r["element_id"], r) for r in records])
    subs = [(f"sub{i}", subscribers[i % len(subscribers)], f) for i, f in enumerate(filters)]
    planner.apply_subscriptions([(sid, s, homes[s], f) for sid, s, f in subs])
    pubs, times, ids = [], [], []
    for k in range(40):
        for j, pub in enumerate(publishers):
            pubs.append(pub)
            times.append(250.0 * k + j)
            ids.append([sid for i, (sid, _, _) in enumerate(subs) if (i + j + seed) % 2 == 0])
    planner.add_matches(pubs, times, ids)
    return planner.advance(10_000)


@pytest.mark.parametrize("seed", range(6))
def test_the_planner_obeys_policies_that_bind_and_the_check_sees_it(seed: int) -> None:
    records = attach_clients(flat_random(7, 11, seed=seed, cost_range=(1, 5)), 2, 3, seed=seed).topology_records()
    free = _planner_run(records, seed)
    assert free and free[0]["feasible"] and check_policy(records_as_items(records), free).ok
    # forbid, on broker links, the events (one by id, one by publisher) that the free plan sends there
    brokers = {r["element_id"] for r in records if r["kind"] == "broker"}
    used = [t for t in free[0]["transmissions"] if t["from"] in brokers and t["to"] in brokers]
    assert used
    banned: dict[str, list[str]] = {}
    first, last = used[0], used[-1]
    banned.setdefault(f"{first['from']}->{first['to']}", []).append(first["event"])
    banned.setdefault(f"{last['from']}->{last['to']}", []).append(last["event"].split("|", 1)[0])
    constrained = [
        {**r, "forbidden_events": banned.get(r["element_id"], [])} if r["kind"] == "link" else r for r in records
    ]
    topology = records_as_items(constrained)
    assert not check_policy(topology, free).ok  # the free plan breaks the new policy
    plans = _planner_run(constrained, seed)
    verdict = check_policy(topology, plans)
    assert verdict.ok, verdict.violations
    assert plans[0]["feasible"] is False or verdict.transmissions > 0


def records_as_items(records: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(r["element_id"], r) for r in records]
