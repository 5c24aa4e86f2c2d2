"""The placement replay (routing.composite.replay) against a message-by-message oracle."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any

import numpy as np
import pytest

from routing.composite.detection import detect_reference
from routing.composite.placement import PlacementInstance, place
from routing.composite.replay import (
    Composite,
    Network,
    component_matches,
    detect,
    detect_in_arrival_order,
    replay,
    subtree_doc,
)
from routing.composite.trees import Leaf, Operator, parse_composite, to_placement_tree
from routing.planning.topology import Topology, flat_random, random_tree

MS_PER_COST = 5.0
SHAPES: tuple[dict[str, Any], ...] = (
    {"op": "and", "within_ms": 300, "children": ["a = 1", "b = 1"]},
    {"op": "and", "within_ms": 300, "children": ["a = 1", {"op": "or", "children": ["b = 1", "c = 1"]}]},
    {"op": "or", "children": [{"op": "and", "within_ms": 300, "children": ["a = 1", "b = 1"]}, "c = 1"]},
    {
        "op": "and",
        "within_ms": 400,
        "children": [{"op": "and", "within_ms": 200, "children": ["a = 1", "b = 1"]}, "c = 1"],
    },
)


def _workload(topo: Topology, seed: int, count: int = 6, span_ms: int = 5000) -> list[Composite]:
    rng = np.random.default_rng(seed)
    brokers = topo.ids()
    out = []
    for i in range(count):
        tree = parse_composite(SHAPES[i % len(SHAPES)])
        sources = {leaf.id: brokers[int(rng.integers(len(brokers)))] for leaf in tree.leaf_nodes}
        times = {
            leaf.id: np.sort(rng.integers(0, span_ms, int(rng.integers(0, 40)))).astype(np.int64)
            for leaf in tree.leaf_nodes
        }
        out.append(Composite(f"c{i}", tree, brokers[int(rng.integers(len(brokers)))], sources, times))
    return out


def _instance(topo: Topology, comp: Composite) -> PlacementInstance:
    return PlacementInstance.from_json(
        {
            "brokers": list(topo.ids()),
            "links": [{"from": k.src, "to": k.dst, "cost": k.cost} for k in topo.links],
            "sources": [
                {"leaf": leaf, "broker": b, "rate": float(len(comp.times_ms[leaf]) + 1)}
                for leaf, b in comp.sources.items()
            ],
            "subscription": {
                "id": comp.subscription_id,
                "broker": comp.subscriber,
                "tree": to_placement_tree(comp.tree),
            },
        }
    )


def _leaves(node: Operator | Leaf) -> list[str]:
    return [node.id] if isinstance(node, Leaf) else [x for c in node.children for x in _leaves(c)]


def _oracle(topo: Topology, comp: Composite, placement: Mapping[str, str]) -> tuple[int, float, list[float], int]:
    """Walk every message hop by hop; operator outputs from detect_reference on each subtree.

    Returns (transmissions, cost-weighted traffic, root detection delays, root detections).
    """
    inst = _instance(topo, comp)
    cost = {(k.src, k.dst): k.cost for k in topo.links}

    def walk(u: str, v: str) -> tuple[int, float]:
        path = inst.path(u, v)
        return len(path) - 1, sum(cost[(a, b)] for a, b in pairwise(path))

    pub = {(leaf, str(i)): int(t) for leaf, ts in comp.times_ms.items() for i, t in enumerate(ts)}
    # each operator's detections, as frozensets of (leaf id, event index)
    dets: dict[str, list[frozenset[tuple[str, str]]]] = {}
    for n in comp.tree.operators():
        local = _leaves(n)
        sub = parse_composite(subtree_doc(n))
        matches = [
            (f"L{k + 1}", f"{leaf}:{i}", int(t))
            for k, leaf in enumerate(local)
            for i, t in enumerate(comp.times_ms[leaf])
        ]
        res = detect_reference(sub, matches)
        dets[n.id] = [frozenset((e.split(":")[0], e.split(":")[1]) for _, e, _ in d) for d in res.detections]
    tx, weighted = 0, 0.0
    wall: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for n in reversed(comp.tree.operators()):
        at = placement[n.id]
        for kid in n.children:
            if isinstance(kid, Leaf):
                h, w = walk(comp.sources[kid.id], at)
                tx += h * len(comp.times_ms[kid.id])
                weighted += w * len(comp.times_ms[kid.id])
            else:
                h, w = walk(placement[kid.id], at)
                tx += h * len(dets[kid.id])
                weighted += w * len(dets[kid.id])
        for d in dets[n.id]:
            arrivals = []
            for kid in n.children:
                part = frozenset(x for x in d if x[0] in _leaves(kid))
                if not part:
                    continue
                if isinstance(kid, Leaf):
                    (only,) = part
                    arrivals.append(pub[only] + MS_PER_COST * walk(comp.sources[kid.id], at)[1])
                else:
                    arrivals.append(wall[(kid.id, part)] + MS_PER_COST * walk(placement[kid.id], at)[1])
            wall[(n.id, d)] = max(arrivals)
    root = comp.tree.root
    h, w = walk(placement[root.id], comp.subscriber)
    tx += h * len(dets[root.id])
    weighted += w * len(dets[root.id])
    delays = [wall[(root.id, d)] + MS_PER_COST * w - max(pub[x] for x in d) for d in dets[root.id]]
    return tx, weighted, delays, len(dets[root.id])


def _network(topo: Topology) -> Network:
    return Network.from_links(topo.ids(), [(k.src, k.dst, k.cost, MS_PER_COST * k.cost) for k in topo.links])


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("method", ["joint-point", "adaptive", "optimal"])
def test_replay_matches_the_oracle_on_a_tree(seed: int, method: str) -> None:
    topo = random_tree(15, seed=seed, cost_range=(1, 3))  # unique paths: hops agree exactly
    comps = _workload(topo, seed)
    placements = [dict(place(_instance(topo, c), method).placement) for c in comps]
    res = replay(_network(topo), comps, detect(comps), placements)
    delays: list[float] = []
    for i, (c, p) in enumerate(zip(comps, placements, strict=True)):
        tx, weighted, d, _ = _oracle(topo, c, p)
        assert res.transmissions[i] == tx
        assert res.weighted[i] == pytest.approx(weighted)
        delays.extend(d)
    assert res.delays_ms == pytest.approx(delays)


@pytest.mark.parametrize("seed", range(3))
def test_weighted_traffic_and_delay_match_the_oracle_on_a_graph(seed: int) -> None:
    topo = flat_random(14, 24, seed=seed, cost_range=(1, 4))  # ties: only cost and delay are path-independent
    comps = _workload(topo, seed + 10)
    placements = [dict(place(_instance(topo, c), "adaptive").placement) for c in comps]
    res = replay(_network(topo), comps, detect(comps), placements)
    delays: list[float] = []
    for i, (c, p) in enumerate(zip(comps, placements, strict=True)):
        _, weighted, d, _ = _oracle(topo, c, p)
        assert res.weighted[i] == pytest.approx(weighted)
        delays.extend(d)
    assert res.delays_ms == pytest.approx(delays)


def test_unit_costs_make_transmissions_the_cost() -> None:
    topo = flat_random(20, 40, seed=3, cost_range=(1, 1))
    net = _network(topo)
    assert np.array_equal(net.hops, net.cost.astype(np.int64))
    assert np.allclose(net.delay_ms, MS_PER_COST * net.cost)


@pytest.mark.parametrize("seed", range(3))
def test_detections_do_not_depend_on_the_placement(seed: int) -> None:
    topo = flat_random(14, 24, seed=seed, cost_range=(1, 4))
    comps = _workload(topo, seed, count=8, span_ms=3000)
    matches = component_matches(comps)
    ref = detect(comps, matches)
    for method in ("joint-point", "optimal"):
        placements = [dict(place(_instance(topo, c), method).placement) for c in comps]
        out = detect_in_arrival_order(_network(topo), comps, placements, matches, bucket_ms=37.0)
        assert out.detection_ids == ref.detection_ids
        assert out.stats.late == 0


def _counts(comps: Sequence[Composite]) -> int:
    return sum(len(t) for c in comps for t in c.times_ms.values())


def test_hand_example() -> None:
    # a - b - c, subscriber at c; L1 at a (3 events), L2 at b (1 event) detected at b
    net = Network.from_links(
        ["a", "b", "c"],
        [("a", "b", 1.0, 5.0), ("b", "a", 1.0, 5.0), ("b", "c", 1.0, 5.0), ("c", "b", 1.0, 5.0)],
    )
    tree = parse_composite({"op": "and", "within_ms": 100, "children": ["x = 1", "y = 1"]})
    comp = Composite("cs", tree, "c", {"L1": "a", "L2": "b"}, {"L1": np.array([0, 10, 500]), "L2": np.array([12])})
    assert _counts([comp]) == 4
    out = detect([comp])
    at_b = replay(net, [comp], out, [{"n1": "b"}])
    at_a = replay(net, [comp], out, [{"n1": "a"}])
    # at b: 3 events a->b, 1 detection b->c; L2 at 12 is last, L1 at 10 arrived at 15: wall 15, +5 -> 20 - 12
    assert (at_b.transmissions.tolist(), at_b.delays_ms.tolist()) == ([4], [8.0])
    # at a: 1 event b->a, 1 detection a->c (2 hops): L2 arrives at 17, reaches c at 27
    assert (at_a.transmissions.tolist(), at_a.delays_ms.tolist()) == ([3], [15.0])
    assert at_a.input_transmissions.tolist() == [1]
