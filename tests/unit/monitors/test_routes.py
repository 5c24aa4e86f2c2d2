"""The routes job's planner: instance from the stream, first plan, drift, hysteresis, policy, state."""

from __future__ import annotations

from typing import Any

import pytest

from routing.monitors.routes import PlannerConfig, RoutePlanner
from routing.planning.check import check_plan
from routing.planning.model import Plan

PERIOD = 1_000


def ring(costs: dict[tuple[str, str], float] | None = None) -> list[tuple[str, dict[str, Any] | None]]:
    """Four brokers in a ring (b1-b2-b3-b4-b1), publisher p1 at b1, subscribers s1 at b3 and s2 at b2."""
    costs = costs or {}
    records: list[tuple[str, dict[str, Any] | None]] = [(b, {"kind": "broker"}) for b in ("b1", "b2", "b3", "b4")]
    records += [("p1", {"kind": "publisher", "broker": "b1"}), ("s1", {"kind": "subscriber", "broker": "b3"})]
    edges = [("b1", "b2"), ("b2", "b3"), ("b3", "b4"), ("b4", "b1")]
    for u, v in edges + [(v, u) for u, v in edges] + [("p1", "b1"), ("b3", "s1")]:
        records.append((f"{u}->{v}", {"kind": "link", "from": u, "to": v, "cost": costs.get((u, v), 1.0)}))
    return records


def planner(**overrides: Any) -> RoutePlanner:
    cfg = {"check_period_ms": PERIOD, "rate_window_ms": PERIOD, "drift": 0.25, "sustain": 2, "min_saving": 0.05}
    p = RoutePlanner(PlannerConfig(**{**cfg, **overrides}))
    p.apply_topology(ring())
    p.apply_subscriptions([("sub-1", "s1", "b3", "price < 10"), ("sub-2", "s2", "b2", "price < 10")])
    return p


def feed(p: RoutePlanner, start_s: int, seconds: int, per_s: int, sids: list[str] | None = None) -> None:
    """``per_s`` matched events a second from p1 for ``seconds`` seconds starting at ``start_s``."""
    n = seconds * per_s
    times = [start_s * 1000 + i * 1000 / per_s for i in range(n)]
    p.add_matches(["p1"] * n, times, [sids or ["sub-1", "sub-2"]] * n)


def test_first_plan_serves_every_subscriber_at_its_cost() -> None:
    p = planner()
    feed(p, 0, 1, 4)
    records = p.advance(PERIOD)
    assert [r["version"] for r in records] == [1]
    rec = records[0]
    assert rec["reasons"] == ["first plan"] and rec["previous_cost"] is None and rec["feasible"]
    inputs = p.inputs(PERIOD)
    assert inputs.rates == {"p1|price < 10": pytest.approx(4.0)}
    plan = Plan.from_json(rec)
    assert check_plan(inputs.instance, plan).ok
    # p1->b1, b1->b2, b2->s2 (cost 0, s2 is known only from its subscription), b2->b3, b3->s1:
    # 4 events/s over 4 unit links
    assert rec["cost"] == pytest.approx(16.0)
    assert {(t["from"], t["to"]) for t in rec["transmissions"]} >= {("p1", "b1"), ("b1", "b2"), ("b2", "b3")}


def test_stable_rates_do_not_replan() -> None:
    p = planner()
    out = []
    for s in range(10):
        feed(p, s, 1, 4 + (s % 2))  # 4 or 5 a second: within the 25% drift
        out += p.advance((s + 1) * PERIOD)
    assert [r["version"] for r in out] == [1]


def test_a_one_period_spike_does_not_replan_but_a_sustained_change_does() -> None:
    p = planner()
    out = []
    rates = [4, 4, 12, 4, 4, 12, 12, 12]
    for s, rate in enumerate(rates):
        feed(p, s, 1, rate)
        out += p.advance((s + 1) * PERIOD)
    assert [r["version"] for r in out] == [1, 2]
    replan = out[1]
    assert replan["planned_at"] == 7 * PERIOD  # the second 12/s period in a row
    assert "rate of p1|price < 10 moved +200%" in replan["reasons"][0]
    # the same routes carry three times the flow: kept, and re-costed
    assert any("kept the current routes" in r for r in replan["reasons"])
    assert replan["previous_cost"] == pytest.approx(48.0) and replan["cost"] == pytest.approx(48.0)
    assert replan["transmissions"] == out[0]["transmissions"]


def test_structural_change_replans_at_once_and_a_broken_route_is_replaced() -> None:
    p = planner()
    feed(p, 0, 1, 4)
    first = p.advance(PERIOD)[0]
    p.apply_topology([("b2->b3", None)])  # the link the plan uses to reach s1
    feed(p, 1, 1, 4)
    second = p.advance(2 * PERIOD)
    assert [r["version"] for r in second] == [2]
    rec = second[0]
    assert any(r.startswith("links changed (+0 / -1)") for r in rec["reasons"])
    assert "the current routes no longer serve every interest" in rec["reasons"]
    assert ("b2", "b3") not in {(t["from"], t["to"]) for t in rec["transmissions"]}
    assert check_plan(p.inputs(2 * PERIOD).instance, Plan.from_json(rec)).ok
    assert rec["cost"] > first["cost"]


def test_new_subscription_replans_and_unsubscribe_drops_its_flow() -> None:
    p = planner()
    feed(p, 0, 1, 4, ["sub-1"])
    p.advance(PERIOD)
    p.apply_subscriptions([("sub-3", "s3", "b4", "price > 100")])
    feed(p, 1, 1, 4, ["sub-1"])
    p.add_matches(["p1"] * 2, [1100.0, 1600.0], [["sub-3"]] * 2)
    rec = p.advance(2 * PERIOD)[0]
    assert "p1|price > 100" in {t["event"] for t in rec["transmissions"]}
    p.apply_subscriptions([("sub-3", None, None, None)])
    feed(p, 2, 1, 4, ["sub-1"])
    rec = p.advance(3 * PERIOD)[0]
    assert "p1|price > 100" not in {t["event"] for t in rec["transmissions"]}


def test_policy_forbids_a_publishers_events_on_a_link_and_can_make_the_plan_infeasible() -> None:
    p = planner()
    p.apply_topology([("b1->b2", {"kind": "link", "from": "b1", "to": "b2", "cost": 1.0, "forbidden_events": ["p1"]})])
    feed(p, 0, 1, 4)
    rec = p.advance(PERIOD)[0]
    assert rec["feasible"] and ("b1", "b2") not in {(t["from"], t["to"]) for t in rec["transmissions"]}
    p.apply_topology([("b4->b1", None), ("b1->b4", None)])  # now b1's only way out is forbidden
    feed(p, 1, 1, 4)
    rec = p.advance(2 * PERIOD)[0]
    assert not rec["feasible"] and rec["cost"] is None
    assert any("no policy-allowed path from p1" in r for r in rec["reasons"])


def test_measured_delays_steer_routes_when_links_cost_their_delay() -> None:
    p = planner(link_cost="delay", sustain=1)
    feed(p, 0, 1, 4, ["sub-1"])
    first = p.advance(PERIOD)[0]
    used = {(t["from"], t["to"]) for t in first["transmissions"]}
    # the route via b2 gets slow; via b4 stays fast
    slow = ("b1", "b2") if ("b1", "b2") in used else ("b1", "b4")
    fast = ("b1", "b4") if slow == ("b1", "b2") else ("b1", "b2")
    feed(p, 1, 1, 4, ["sub-1"])
    p.add_link_samples([slow[0], fast[0]], [slow[1], fast[1]], [1500.0, 1500.0], [50.0, 1.0])
    rec = p.advance(2 * PERIOD)[0]
    assert f"cost of link {slow[0]}->{slow[1]} moved" in " ".join(rec["reasons"])
    assert fast in {(t["from"], t["to"]) for t in rec["transmissions"]}


def test_state_round_trip_continues_identically() -> None:
    a = planner()
    feed(a, 0, 3, 4)
    a.advance(3 * PERIOD)
    b = RoutePlanner.from_bytes(a.to_bytes())
    outs = []
    for p in (a, b):
        feed(p, 3, 4, 12)
        outs.append(p.advance(7 * PERIOD))
    assert outs[0] == outs[1] and outs[0]


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="multiple of"):
        PlannerConfig(check_period_ms=1000, rate_window_ms=1500)
    with pytest.raises(ValueError, match="method must be one of"):
        PlannerConfig(method="fast")


def test_match_columns_count_as_match_lists_do() -> None:
    """``add_match_columns`` (ids numbered in any order, unknown ids mixed in) leaves the state
    ``add_matches`` leaves, byte for byte, batch after batch."""
    import numpy as np

    lists = [["sub-1", "sub-2"], ["sub-2"], [], ["nobody", "sub-1"], ["sub-1", "sub-2", "nobody"]] * 40
    a, b = planner(), planner()
    for k in range(3):
        pubs = ["p1", "p2", "p1", "p3", "p1"] * 40
        times = [k * PERIOD + 5.0 * i for i in range(len(lists))]
        a.add_matches(pubs, times, lists)
        ids = sorted({s for sids in lists for s in sids}, reverse=True)
        number = {s: i for i, s in enumerate(ids)}
        index = np.array([number[s] for sids in lists for s in sids], dtype=np.int64)
        b.add_match_columns(pubs, np.array(times), np.array([len(s) for s in lists]), ids, index)
    assert a.to_bytes() == b.to_bytes()
    assert a.counters["unknown_subscriptions"] == b.counters["unknown_subscriptions"] == 3 * 80
    assert a._rates.query("p1|price < 10", 3 * PERIOD) is not None


def _batches(seed: int) -> list[dict[str, Any]]:
    """Eight batches of matches (some late, some a backlog of several periods), link samples and a
    subscription change, each with the watermark the job would move to."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out, end = [], 0.0
    for b in range(8):
        span = float(rng.choice([700.0, 1500.0, 4200.0]))
        n = int(rng.integers(5, 60))
        times = end + rng.uniform(-900.0, span, n)  # some before the previous batch's end: late
        times = np.maximum(times, 0.0)
        sids = [["sub-1", "sub-2"], ["sub-1"], ["sub-2"], ["sub-1", "nobody"]]
        out.append(
            {
                "pubs": ["p1"] * n,
                "times": times.tolist(),
                "ids": [sids[i % 4] for i in rng.integers(0, 4, n)],
                "links": (["b1", "b2"], ["b2", "b3"], [end + 10.0, end + 20.0], [3.0, float(rng.uniform(1, 9))]),
                "subscriptions": [("sub-3", "s1", "b3", "price < 20")] if b == 3 else [],
                "watermark": end + span - 300.0,
            }
        )
        end += span
    return out


def _run_batch(p: RoutePlanner, batch: dict[str, Any]) -> list[dict[str, Any]]:
    if batch["subscriptions"]:
        p.apply_subscriptions(batch["subscriptions"])
    p.add_matches(batch["pubs"], batch["times"], batch["ids"])
    p.add_link_samples(*batch["links"])
    return p.advance(batch["watermark"])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_state_saved_as_changes_restores_the_planner_of_every_batch(seed: int) -> None:
    """The routes job saves the planner's changes after each batch and its whole state now and
    then: a whole state followed by the changes of every later batch, applied in order, gives the
    live planner byte for byte (``to_bytes``, the format read before changes were saved) after each
    batch, and the restored planner plans the next batches as the live one does."""
    live = planner(rate_window_ms=3 * PERIOD, link_cost="delay")
    batches = _batches(seed)
    whole: bytes | None = None
    changes: list[bytes] = []
    for i, batch in enumerate(batches):
        _run_batch(live, batch)
        if i in (0, 5):  # a whole state now and then
            whole, changes = live.to_bytes(), []
        else:
            changes.append(live.changes_to_bytes())
        live.mark_saved()
        assert whole is not None
        restored = RoutePlanner.from_bytes(whole)
        for blob in changes:
            restored.apply_changes(blob)
        assert restored.to_bytes() == live.to_bytes(), f"batch {i}"
        if i + 1 < len(batches):
            twin = RoutePlanner.from_bytes(live.to_bytes())
            assert _run_batch(restored, batches[i + 1]) == _run_batch(twin, batches[i + 1])


def test_dropping_the_buckets_no_check_reads_changes_no_plan() -> None:
    """After each ``advance`` the planner drops the buckets older than the last check's window:
    over batches with late matches and backlogs it plans exactly what the same planner keeping
    every bucket its ``retain`` allows plans."""
    for seed in range(4):
        dropping, keeping = planner(rate_window_ms=3 * PERIOD), planner(rate_window_ms=3 * PERIOD)
        keeping._rates.drop_before = keeping._delays.drop_before = lambda bucket: None  # type: ignore[method-assign]
        got, want = [], []
        for batch in _batches(seed):
            got += _run_batch(dropping, batch)
            want += _run_batch(keeping, batch)
        kept = sum(len(ring) for ring in keeping._rates._data.values())
        assert got == want and len(want) >= 2
        assert sum(len(ring) for ring in dropping._rates._data.values()) < kept
