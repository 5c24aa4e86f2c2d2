"""MICPICE (Chen et al. 2004): the model (parsing, Proposition 2.3, random instances), the greedy and
enhanced heuristics, and the dispatcher that picks a planner by name."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from routing.planning.distribution import plan
from routing.planning.heuristics import _Enhanced, _Graph, plan_enhanced, plan_greedy
from routing.planning.model import Instance, InstanceError, Plan, chen_events, chen_instance
from routing.planning.named_topologies import chen_transit_stub_100


def _doc(
    nodes: dict[str, str],
    links: list[tuple[str, str, float]],
    events: list[dict[str, Any]],
    interests: list[tuple[str, str]],
    forbidden: list[tuple[str, str, str]] = (),  # type: ignore[assignment]
) -> dict[str, Any]:
    return {
        "nodes": [{"id": n, "role": r} for n, r in nodes.items()],
        "links": [{"from": u, "to": v, "cost": c} for u, v, c in links],
        "events": events,
        "interests": [{"subscriber": s, "event": e} for s, e in interests],
        "forbidden": [{"from": u, "to": v, "event": e} for u, v, e in forbidden],
    }


def _both_ways(*edges: tuple[str, str, float]) -> list[tuple[str, str, float]]:
    return [x for u, v, c in edges for x in ((u, v, c), (v, u, c))]


def figure3() -> Instance:
    """Figure 3's lesson: s1 wants e1, s2 wants e3 = e1 & e2. Once e1 runs p1 -> b1 -> s1, sending it
    on from b1 to b2 (cost 1) beats the separate path p1 -> b2 (cost 1.5) that the greedy
    heuristic, costing each event on its own, picks."""
    nodes = {
        "p1": "publisher",
        "p2": "publisher",
        "b1": "broker",
        "b2": "broker",
        "s1": "subscriber",
        "s2": "subscriber",
    }
    links = [
        ("p1", "b1", 1.0),
        ("b1", "s1", 1.0),
        ("p1", "b2", 1.5),
        ("b1", "b2", 1.0),
        ("p2", "b2", 1.0),
        ("b2", "s2", 1.0),
    ]
    events = [
        {"id": "e1", "rate": 1.0, "publisher": "p1"},
        {"id": "e2", "rate": 1.0, "publisher": "p2"},
        {"id": "e3", "rate": 0.5, "components": ["e1", "e2"]},
    ]
    return Instance.from_json(_doc(nodes, links, events, [("s1", "e1"), ("s2", "e3")]))


def figure6() -> Instance:
    """Figure 6's lesson: the order subscribers are served in changes the cost."""
    nodes = {"p1": "publisher", "b1": "broker", "s1": "subscriber", "s2": "subscriber"}
    links = [("p1", "s1", 2.0), ("p1", "b1", 1.5), ("b1", "s2", 1.5), ("b1", "s1", 1.0)]
    events = [{"id": "e", "rate": 1.0, "publisher": "p1"}]
    return Instance.from_json(_doc(nodes, links, events, [("s1", "e"), ("s2", "e")]))


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------


def test_round_trips_through_json() -> None:
    inst = chen_instance(seed=5, p_c=0.3)
    again = Instance.from_json(json.loads(json.dumps(inst.to_json())))
    assert again == inst
    assert plan_enhanced(again) == plan_enhanced(inst)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("links"), "missing key 'links'"),
        (lambda d: d["nodes"].append({"id": "b1", "role": "broker"}), "node id 'b1' appears twice"),
        (lambda d: d["nodes"].append({"id": "x", "role": "router"}), "role must be one of"),
        (lambda d: d["links"].append({"from": "b1", "to": "zz", "cost": 1}), "unknown node 'zz'"),
        (lambda d: d["links"].append({"from": "b1", "to": "b1", "cost": 1}), "two different nodes"),
        (lambda d: d["links"].append(dict(d["links"][0])), "appears twice"),
        (lambda d: d["links"][0].update(cost=-1), "'cost' must be >= 0"),
        (lambda d: d["links"][0].update(cost=float("nan")), "finite number"),
        (lambda d: d["events"][0].update(rate=0), "'rate' must be > 0"),
        (lambda d: d["events"][0].update(publisher="b1"), "not a node with role publisher"),
        (lambda d: d["events"][0].update(components=["e2"]), "exactly one of 'publisher'"),
        (lambda d: d["events"][2].update(components=["e1", "e9"]), "unknown component event 'e9'"),
        (lambda d: d["events"][2].update(components="e1"), "components must be a list"),
        (lambda d: d["interests"].append({"subscriber": "b1", "event": "e1"}), "not a node with role subscriber"),
        (lambda d: d["interests"].append({"subscriber": "s1", "event": "e7"}), "unknown event 'e7'"),
        (lambda d: d["forbidden"].append({"from": "s1", "to": "p1", "event": "e1"}), "no link s1->p1"),
        (lambda d: d.update(nodes="p1"), "nodes must be a list"),
    ],
)
def test_malformed_instances_are_refused_with_the_item_named(mutate: Any, message: str) -> None:
    doc = figure3().to_json()
    mutate(doc)
    with pytest.raises(InstanceError, match=message):
        Instance.from_json(doc)


def test_invalid_composition_matrix_is_infeasible_with_reasons() -> None:
    doc = figure3().to_json()
    doc["events"].append({"id": "e4", "rate": 0.1, "components": ["e5"]})
    doc["events"].append({"id": "e5", "rate": 0.1, "components": ["e4", "e1"]})
    doc["events"].append({"id": "e6", "rate": 0.1, "components": []})
    inst = Instance.from_json(doc)
    reasons = inst.infeasibility()
    assert "composite event e6 has no components" in reasons
    assert any("cycle: e4 -> e5 -> e4" in r for r in reasons)
    for method in ("greedy", "enhanced"):
        p = plan(inst, method)
        assert not p.feasible and p.to_json() == {"feasible": False, "reasons": reasons}


def test_infeasibility_names_the_subscriber_the_event_and_the_cause() -> None:
    forbidden = [("p2", "b2", "e2")]  # p2's only link
    doc = figure3().to_json()
    doc["forbidden"] = [{"from": u, "to": v, "event": e} for u, v, e in forbidden]
    doc["interests"].append({"subscriber": "s2", "event": "e2"})
    inst = Instance.from_json(doc)
    assert inst.infeasibility() == [
        "s2 cannot receive e3: it cannot be generated anywhere (no node can hold all of e1, e2)",
        "s2 cannot receive e2: no policy-allowed path from p2",
    ]
    doc["interests"].pop()
    # e3 can be made at b2 (and b2 only) but not sent on, and s2 may not get its components either
    doc["forbidden"] = [{"from": "b2", "to": "s2", "event": e} for e in ("e1", "e2", "e3")]
    assert Instance.from_json(doc).infeasibility() == [
        "s2 cannot receive e3: no policy-allowed path for e3 from a node that can generate it (b2)"
    ]


def test_a_composite_made_upstream_may_cross_links_its_components_may_not() -> None:
    """Proposition 2.3 read literally would call this infeasible: e1 may not cross b1 -> s1."""
    nodes = {"p1": "publisher", "b1": "broker", "s1": "subscriber"}
    events = [{"id": "e1", "rate": 1.0, "publisher": "p1"}, {"id": "e2", "rate": 0.5, "components": ["e1"]}]
    doc = _doc(nodes, [("p1", "b1", 1.0), ("b1", "s1", 1.0)], events, [("s1", "e2")], [("b1", "s1", "e1")])
    inst = Instance.from_json(doc)
    assert inst.infeasibility() == []
    for method in ("greedy", "enhanced"):
        p = plan(inst, method)
        _assert_serves(inst, p)
        assert ("b1", "s1", "e2") in p.transmissions


def test_originals_and_topological_order_follow_the_composition_graph() -> None:
    doc = figure3().to_json()
    doc["events"].insert(0, {"id": "e4", "rate": 0.2, "components": ["e3", "e1"]})
    inst = Instance.from_json(doc)
    order = inst.topological_order
    assert order.index("e3") < order.index("e4") and order.index("e1") < order.index("e3")
    assert set(inst.originals("e4")) == {"e1", "e2"}


# ---------------------------------------------------------------------------------------------
# The heuristics
# ---------------------------------------------------------------------------------------------


def _holds(inst: Instance, p: Plan) -> dict[str, set[str]]:
    """Availability from sources only (a fixpoint over the plan), for the tests' own checks."""
    holds = {e: ({ev.publisher} if ev.publisher else set()) for e, ev in inst.events.items()}
    changed = True
    while changed:
        changed = False
        for node, e in p.generated:
            if node not in holds[e] and all(node in holds[c] for c in inst.events[e].components):
                holds[e].add(node)
                changed = True
        for u, v, e in p.transmissions:
            if u in holds[e] and v not in holds[e]:
                holds[e].add(v)
                changed = True
    return holds


def _assert_serves(inst: Instance, p: Plan) -> None:
    assert p.feasible
    holds = _holds(inst, p)
    for s, e in inst.interests:
        assert s in holds[e], f"{s} does not get {e}"
    for u, v, e in p.transmissions:
        assert inst.allowed(u, v, e)
        assert u in holds[e], f"{u} sends {e} it does not have"
    assert p.cost == pytest.approx(inst.cost_of(p.transmissions))


def test_figure3_enhanced_reuses_a_delivered_component() -> None:
    inst = figure3()
    greedy, enhanced = plan_greedy(inst), plan_enhanced(inst)
    _assert_serves(inst, greedy)
    _assert_serves(inst, enhanced)
    assert ("p1", "b2", "e1") in greedy.transmissions
    assert ("b1", "b2", "e1") in enhanced.transmissions and ("p1", "b2", "e1") not in enhanced.transmissions
    assert enhanced.cost == pytest.approx(greedy.cost - 0.5)
    assert enhanced.generated == (("b2", "e3"),)


def test_figure6_longest_distance_order_beats_min_cost_here() -> None:
    inst = figure6()
    m, lng = plan_enhanced(inst, "min-cost"), plan_enhanced(inst, "longest")
    _assert_serves(inst, m)
    _assert_serves(inst, lng)
    assert m.cost == pytest.approx(5.0)  # s1 first, straight from p1; then s2 via b1
    assert lng.cost == pytest.approx(4.0)  # s2 first via b1; then s1 from b1
    assert ("b1", "s1", "e") in lng.transmissions


def test_random_order_is_seeded() -> None:
    inst = chen_instance(chen_transit_stub_100(1, overlay=True), composites=10, seed=2)
    costs = {plan_enhanced(inst, "random", seed=k).cost for k in range(6)}
    assert plan_enhanced(inst, "random", seed=3) == plan_enhanced(inst, "random", seed=3)
    assert len(costs) > 1  # different seeds try different orders


def test_unknown_method_or_order_is_refused() -> None:
    with pytest.raises(ValueError, match="order must be one of"):
        plan_enhanced(figure6(), "fastest")
    with pytest.raises(ValueError, match="method must be one of"):
        plan(figure6(), "magic")


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    p_c=st.sampled_from([0.0, 0.1, 0.3, 0.5, 0.7]),
    composites=st.integers(0, 4),
    method=st.sampled_from(["greedy", "min-cost", "longest", "random"]),
)
def test_heuristics_serve_every_interest_exactly_when_proposition_2_3_allows(
    seed: int, p_c: float, composites: int, method: str
) -> None:
    inst = chen_instance(composites=composites, p_c=p_c, seed=seed, p_unp=0.3)
    p = plan_greedy(inst) if method == "greedy" else plan_enhanced(inst, method, seed)
    assert p.feasible == (not inst.infeasibility())
    if p.feasible:
        _assert_serves(inst, p)
        for _node, e in p.generated:  # generation only of composites
            assert not inst.events[e].primitive
    else:
        assert p.reasons and p.cost is None


def _figure4_costs(g: _Graph, holds: list[set[int]]) -> list[list[float]]:
    """Fig. 4 as printed, the oracle: relax every edge until nothing changes, event by event in
    topological order, with cost 0 wherever the event already is."""
    n = len(g.ids)
    out: list[list[float]] = []
    for k in range(len(g.order)):
        if g.publisher[k] >= 0:
            cost = [0.0 if v in holds[k] or v == g.publisher[k] else float("inf") for v in range(n)]
        else:
            cost = [0.0 if v in holds[k] else sum(out[c][v] for c in g.comps[k]) for v in range(n)]
        changed = True
        while changed:
            changed = False
            for u in range(n):
                for v, w in g.eligible[k][u]:
                    if cost[u] + g.lam[k] * w < cost[v] - 1e-12:
                        cost[v] = cost[u] + g.lam[k] * w
                        changed = True
        out.append(cost)
    return out


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), p_c=st.sampled_from([0.0, 0.2, 0.4]), steps=st.integers(1, 8))
def test_incremental_costs_equal_figure4_recomputed_from_scratch(seed: int, p_c: float, steps: int) -> None:
    inst = chen_instance(composites=3, p_c=p_c, seed=seed, p_unp=0.5)
    g = _Graph(inst)
    state = _Enhanced(g, longest=False)
    reachable = [
        (k, v) for k in range(len(g.order)) for v in range(len(g.ids)) if state.costs.cost[k][v] < float("inf")
    ]
    for i in range(steps):
        k, v = reachable[(seed * 7919 + i * 104729) % len(reachable)]
        state.deliver(k, v)
    for k in range(len(g.order)):
        state.costs.fresh(k)
    expected = _figure4_costs(g, state.holds)
    for k in range(len(g.order)):
        assert state.costs.cost[k] == pytest.approx(expected[k], abs=1e-9)


def test_chen_events_build_three_levels_with_rates_below_their_components() -> None:
    import numpy as np

    events = chen_events([f"p{i}" for i in range(10)], 10, np.random.default_rng(7))
    by_id = {e.id: e for e in events}
    level: dict[str, int] = {}
    for e in events:
        level[e.id] = 1 if e.primitive else 1 + max(level[c] for c in e.components)
        assert 0 < e.lam < 1
        if not e.primitive:
            assert 1 <= len(e.components) <= 3
            assert e.lam <= sum(by_id[c].lam for c in e.components)
    assert max(level.values()) == 3
    assert sum(not e.primitive for e in events) == 10


def test_chen_events_below_reading_takes_components_from_the_level_just_below_only() -> None:
    import numpy as np

    for seed in range(20):
        events = chen_events([f"p{i}" for i in range(5)], 6, np.random.default_rng(seed), components_from="below")
        level: dict[str, int] = {}
        for e in events:
            level[e.id] = 1 if e.primitive else 1 + max(level[c] for c in e.components)
            assert all(level[c] == level[e.id] - 1 for c in e.components)
    with pytest.raises(ValueError, match="components_from"):
        chen_events(["p0"], 1, np.random.default_rng(0), components_from="any")


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), p_c=st.sampled_from([0.0, 0.3]), steps=st.integers(0, 8))
def test_longest_distance_order_tracks_the_current_sources(seed: int, p_c: float, steps: int) -> None:
    """Φ_L's d(v, M_e), kept incrementally, equals a recomputation from M_e: the nodes that hold
    e, and for a composite the nodes that hold all its components."""
    inst = chen_instance(composites=3, p_c=p_c, seed=seed, p_unp=0.5)
    g = _Graph(inst)
    state = _Enhanced(g, longest=True)
    reachable = [
        (k, v) for k in range(len(g.order)) for v in range(len(g.ids)) if state.costs.cost[k][v] < float("inf")
    ]
    for i in range(steps):
        k, v = reachable[(seed * 31 + i * 7919) % len(reachable)]
        state.deliver(k, v)
    n = len(g.ids)
    for k in range(len(g.order)):
        sources = set(state.holds[k])
        if g.publisher[k] < 0:
            sources |= {v for v in range(n) if all(v in state.holds[c] for c in g.comps[k])}
        expected = [0.0 if v in sources else float("inf") for v in range(n)]
        changed = True
        while changed:
            changed = False
            for u in range(n):
                for v, w in g.eligible[k][u]:
                    if expected[u] + w < expected[v] - 1e-12:
                        expected[v] = expected[u] + w
                        changed = True
        assert state.distances(k) == pytest.approx(expected, abs=1e-9)


# ---------------------------------------------------------------------------------------------
# The greedy heuristic against Figs. 4 and 5 as printed
# ---------------------------------------------------------------------------------------------


def _figures4_5_greedy(inst: Instance) -> tuple[set[tuple[str, str, str]], set[tuple[str, str]]]:
    """Figs. 4 and 5 line by line, the oracle of :func:`plan_greedy`: per event in topological
    order, c_e(v) := 0 at the publisher (primitive) or Σ_d c_d(v) at a node that may compose
    (composite), predecessor(e, v) := v, then relax every edge of G_e until nothing changes
    (Fig. 4, lines 4-6); then trace every interest (Fig. 5), reading its ``while (u != v)`` as
    "if": a hop sets η((u, v), e) and traces u unless η was already set; at a root of a composite
    (u == v) each component is traced to that node."""
    order = inst.topological_order
    cost: dict[str, dict[str, float]] = {}
    pred: dict[str, dict[str, str]] = {}
    for e in order:
        ev = inst.events[e]
        if ev.publisher is not None:
            c = {v: 0.0 if v == ev.publisher else float("inf") for v in inst.roles}
        else:
            c = {v: sum(cost[d][v] for d in ev.components) if inst.can_compose(v) else float("inf") for v in inst.roles}
        p = {v: v for v in inst.roles}
        changed = True
        while changed:
            changed = False
            for u, v in inst.links:
                if inst.allowed(u, v, e) and c[u] + ev.lam * inst.links[(u, v)] < c[v]:
                    c[v] = c[u] + ev.lam * inst.links[(u, v)]
                    p[v] = u
                    changed = True
        cost[e], pred[e] = c, p
    eta: set[tuple[str, str, str]] = set()
    gens: set[tuple[str, str]] = set()

    def trace(e: str, v: str) -> None:
        u = pred[e][v]
        if u != v:
            if (u, v, e) not in eta:
                eta.add((u, v, e))
                trace(e, u)
        elif inst.events[e].publisher is None and (v, e) not in gens:
            gens.add((v, e))
            for d in inst.events[e].components:
                trace(d, v)

    for s, e in inst.interests:
        trace(e, s)
    return eta, gens


def _diamond() -> Instance:
    """e3 = e1 & e2 and e4 = e3 & e1 (a "diamond": e1 reaches e4 twice); s1 wants e1 and e4.

    Hand-traced Fig. 4 (costs λ x path length): c_e1 = {p1: 0, b1: 1, b2: 3, s1: 3, p2: 4};
    c_e2 = {p2: 0, b2: 1, b1: 3.2, s1: 3.5, p1: 4}; c_e3 starts at Σ_d c_d(v) = {p1: 4, p2: 4,
    b1: 4.2, b2: 4, s1: 6.5} and relaxes s1 to 5.2 via b1; c_e4 starts at c_e3 + c_e1 = {p1: 4,
    b1: 5.2, s1: 8.2, ...} and relaxes to b1: 4.25 (from p1), s1: 4.75 (from b1). So e4 is made at
    p1 and sent p1 -> b1 -> s1; e3 is made at p1 from e2 sent p2 -> b2 -> p1 (e1 is already at
    p1); e1 goes p1 -> b1 -> s1. Cost 0.25 x 3 + 1 x 4 + 1 x 3 = 7.75, against an optimum of 6.5
    (both composites made at s1 from e1 and e2 delivered there: 3 + 3.5)."""
    nodes = {"p1": "publisher", "p2": "publisher", "b1": "broker", "b2": "broker", "s1": "subscriber"}
    links = _both_ways(
        ("p1", "b1", 1.0), ("p1", "b2", 3.0), ("p2", "b1", 4.0), ("p2", "b2", 1.0),
        ("b1", "s1", 2.0), ("b2", "s1", 2.5), ("b1", "b2", 2.2),
    )  # fmt: skip
    events = [
        {"id": "e1", "rate": 1.0, "publisher": "p1"},
        {"id": "e2", "rate": 1.0, "publisher": "p2"},
        {"id": "e3", "rate": 0.5, "components": ["e1", "e2"]},
        {"id": "e4", "rate": 0.25, "components": ["e3", "e1"]},
    ]
    return Instance.from_json(_doc(nodes, links, events, [("s1", "e4"), ("s1", "e1")]))


def test_greedy_on_a_diamond_follows_figures_4_and_5_traced_by_hand() -> None:
    inst = _diamond()
    p = plan_greedy(inst)
    assert set(p.transmissions) == {
        ("p1", "b1", "e4"), ("b1", "s1", "e4"),
        ("p2", "b2", "e2"), ("b2", "p1", "e2"),
        ("p1", "b1", "e1"), ("b1", "s1", "e1"),
    }  # fmt: skip
    assert set(p.generated) == {("p1", "e4"), ("p1", "e3")}
    assert p.cost == pytest.approx(7.75)
    assert (set(p.transmissions), set(p.generated)) == _figures4_5_greedy(inst)
    assert plan_enhanced(inst).cost == pytest.approx(6.5)  # e2 to s1, both composites made there


def _tie_free_instance(seed: int, p_c: float, brokers_compose: bool) -> Instance:
    """A §4.2 instance on a 12-node graph with real-valued link costs: no two paths cost the same,
    so the shortest-path predecessors, and hence the greedy plan, are unique."""
    from routing.planning.topology import application_overlay, flat_random

    physical = flat_random(12, 18, seed=seed, cost_range=(1, 10), integer_costs=False, role="router")
    inst = chen_instance(application_overlay(physical, 3, 3, 6, seed=seed), composites=3, p_c=p_c, seed=seed, p_unp=0.4)
    return inst.with_composers(inst.nodes_with_role("broker")) if brokers_compose else inst


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), p_c=st.sampled_from([0.0, 0.2, 0.4]), brokers_compose=st.booleans())
def test_greedy_equals_figures_4_and_5_as_printed(seed: int, p_c: float, brokers_compose: bool) -> None:
    inst = _tie_free_instance(seed, p_c, brokers_compose)
    p = plan_greedy(inst)
    if not p.feasible:
        return
    assert (set(p.transmissions), set(p.generated)) == _figures4_5_greedy(inst)
