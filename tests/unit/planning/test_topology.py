"""Topologies: the papers' setups, generator properties, exporters and the Avro topology records."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse.csgraph import dijkstra

from routing.planning.named_topologies import (
    GENERATORS,
    NAMED,
    chen_flat_12,
    chen_flat_100,
    chen_transit_stub_100,
    generate,
    opyrchal_fig5,
    reliability_tree,
)
from routing.planning.topology import (
    DEFAULT_TS_COSTS,
    OPYRCHAL_BANDWIDTH_MBPS,
    Link,
    Node,
    Topology,
    application_overlay,
    attach_clients,
    flat_random,
    pure_random,
    random_tree,
    to_micpice_nodes_links,
    to_qos_links,
    transit_stub,
    tree,
    waxman,
)
from schemas.codec import codec_for
from schemas.rules import validate

PROPERTY = settings(max_examples=60, deadline=None)
SEEDS = (0, 1, 7)

# Strategies stay here rather than in tests/strategies.py: they build routing inputs, not Avro records.


@st.composite
def flat_params(draw: st.DrawFn) -> tuple[int, int, int]:
    n = draw(st.integers(1, 22))
    m = draw(st.integers(n - 1 if n > 1 else 0, n * (n - 1) // 2))
    return n, m, draw(st.integers(0, 2**32 - 1))


@st.composite
def directed_topologies(draw: st.DrawFn) -> Topology:
    """Any small directed graph with positive costs (not necessarily symmetric or connected)."""
    n = draw(st.integers(1, 9))
    ids = [f"v{i}" for i in range(n)]
    pairs = [(a, b) for a in ids for b in ids if a != b]
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=len(pairs))) if pairs else []
    costs = draw(st.lists(st.floats(0.01, 100.0), min_size=len(chosen), max_size=len(chosen)))
    links = tuple(Link(a, b, c) for (a, b), c in zip(chosen, costs, strict=True))
    return Topology(tuple(Node(i) for i in ids), links, "drawn")


def is_forest(topo: Topology) -> bool:
    """No undirected cycle: union-find over the undirected edges."""
    parent = {n.id: n.id for n in topo.nodes}

    def find(x: str) -> str:
        while parent[x] != x:
            x = parent[x]
        return x

    for u, v in topo.undirected_edges():
        ru, rv = find(u), find(v)
        if ru == rv:
            return False
        parent[ru] = rv
    return True


def depth_of(topo: Topology, root: str) -> int:
    return int(max(topo.shortest_paths(root).values()))


# ---- the papers' setups ---------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_chen_flat_12_has_12_nodes_18_links_and_the_paper_roles(seed: int) -> None:
    topo = chen_flat_12(seed)
    assert len(topo.nodes) == 12
    assert len(topo.undirected_edges()) == 18  # Chen §4.3.1: |L| = 18 (undirected)
    assert len(topo.links) == 36
    assert Counter(n.role for n in topo.nodes) == {"publisher": 3, "subscriber": 3, "broker": 6}
    assert {k.cost for k in topo.links} == {1.0}  # Chen §4.2: physical links cost one


@pytest.mark.parametrize("seed", SEEDS)
def test_chen_transit_stub_100_has_4_transit_nodes_and_12_stub_domains(seed: int) -> None:
    topo = chen_transit_stub_100(seed)
    assert len(topo.nodes) == 100
    transit = topo.ids("transit")
    assert len(transit) == 4 and {topo.node(t).domain for t in transit} == {"T0"}
    stub_domains = Counter(n.domain for n in topo.nodes if n.role == "stub")
    assert len(stub_domains) == 12 and set(stub_domains.values()) == {8}
    # each stub domain hangs off one transit node by one transit-stub edge; 3 stub domains per transit node
    ts_edges = [
        (u, v) for u, v in topo.undirected_edges() if {topo.node(u).role, topo.node(v).role} == {"transit", "stub"}
    ]
    assert len(ts_edges) == 12
    assert Counter(u if topo.node(u).role == "transit" else v for u, v in ts_edges) == dict.fromkeys(transit, 3)
    assert {k.cost for k in topo.links} == {1.0}
    assert topo.is_connected()


@pytest.mark.parametrize("seed", SEEDS)
def test_chen_flat_100_is_gt_itm_pure_random_with_alpha_0_3(seed: int) -> None:
    topo = chen_flat_100(seed)
    assert len(topo.nodes) == 100 and topo.ids("router") == topo.ids()
    # Binomial(4950, 0.3): mean 1485, sd 32; +-5 sd
    assert 1325 < len(topo.undirected_edges()) < 1645
    assert {k.cost for k in topo.links} == {1.0}


@pytest.mark.parametrize("make", [chen_transit_stub_100, chen_flat_100])
def test_chen_100_overlays_have_the_section_4_3_2_application_nodes(make: Callable[..., Topology]) -> None:
    topo = make(3, overlay=True)
    assert Counter(n.role for n in topo.nodes) == {"publisher": 10, "subscriber": 10, "broker": 20}
    assert topo.is_connected() and topo.is_symmetric()


@pytest.mark.parametrize("seed", SEEDS)
def test_opyrchal_fig5_has_100_routers_88_brokers_and_three_link_classes(seed: int) -> None:
    topo = opyrchal_fig5(seed)
    assert len(topo.ids("router")) == 100
    brokers = topo.ids("broker")
    assert len(brokers) == 88
    assert sum(b.startswith("pb") for b in brokers) == 8 and sum(b.startswith("sb") for b in brokers) == 80
    for k in topo.links:
        assert k.bandwidth_mbps == OPYRCHAL_BANDWIDTH_MBPS[str(k.link_class)]
        assert k.cost == pytest.approx(622.0 / k.bandwidth_mbps)
        ends = {topo.node(k.src).role, topo.node(k.dst).role}
        if k.link_class == "fringe":
            assert ends == {"router", "broker"}
        else:
            assert ends == {"router"}
    hosts = []
    for b in brokers:
        (link,) = topo.out_links(b)  # each broker hangs off one router by one fringe link
        assert link.link_class == "fringe"
        hosts.append(link.dst)
    assert len(set(hosts)) == 88  # one broker per stub router
    backbone = [k for k in topo.links if k.link_class == "backbone"]
    assert backbone and all(k.src.startswith("t") and k.dst.startswith("t") for k in backbone)
    assert topo.is_connected()
    assert {k.cost for k in opyrchal_fig5(seed, cost="hops").links} == {1.0}


def test_reliability_tree_is_a_balanced_20_broker_tree() -> None:
    topo = reliability_tree()
    assert len(topo.nodes) == 20 and topo.ids("broker") == topo.ids()
    assert len(topo.undirected_edges()) == 19 and is_forest(topo) and topo.is_connected()
    assert depth_of(topo, "b0") == 4  # complete binary tree: floor(log2 20)
    with_clients = reliability_tree(seed=2, clients=True)
    assert Counter(n.role for n in with_clients.nodes) == {"broker": 20, "publisher": 8, "subscriber": 100}
    assert is_forest(with_clients)


@pytest.mark.parametrize("kind", sorted(NAMED))
@pytest.mark.parametrize("seed", SEEDS)
def test_every_named_setup_is_connected_and_symmetric(kind: str, seed: int) -> None:
    topo = generate(kind, seed=seed)
    assert topo.is_connected()
    assert topo.is_symmetric()
    assert len(topo.links) == 2 * len(topo.undirected_edges())


# ---- determinism -------------------------------------------------------------------------------

SEEDED: dict[str, Callable[[int], Topology]] = {
    "chen-flat-12": chen_flat_12,
    "chen-ts-100": chen_transit_stub_100,
    "chen-flat-100": chen_flat_100,
    "opyrchal-fig5": opyrchal_fig5,
    "reliability-tree-20+clients": lambda s: reliability_tree(s, clients=True),
    "flat-random": lambda s: flat_random(15, 25, s),
    "pure-random": lambda s: pure_random(15, 0.3, s),
    "waxman": lambda s: waxman(15, 0.6, 0.3, s),
    "transit-stub": lambda s: transit_stub(2, 3, 2, 4, s),
    "tree-costs": lambda s: tree(15, 3, s, cost_range=(1, 9)),
    "random-tree": lambda s: random_tree(15, s),
    "overlay": lambda s: application_overlay(pure_random(30, 0.2, 0), 3, 3, 6, s),
    "clients": lambda s: attach_clients(tree(7, 2), 4, 4, s),
}


@pytest.mark.parametrize("kind", sorted(SEEDED))
def test_same_seed_same_topology_and_other_seeds_differ(kind: str) -> None:
    make = SEEDED[kind]
    assert make(5) == make(5)
    assert make(5).to_json() == make(5).to_json()
    assert len({json.dumps(make(s).to_json()["links"]) for s in range(5)}) > 1


def test_reliability_tree_without_clients_does_not_depend_on_the_seed() -> None:
    assert reliability_tree(0) == reliability_tree(9)


# ---- generator properties --------------------------------------------------------------------


@PROPERTY
@given(flat_params(), st.sampled_from([0, 100]))
def test_flat_random_has_exactly_m_edges_and_is_connected(params: tuple[int, int, int], max_tries: int) -> None:
    n, m, seed = params
    topo = flat_random(n, m, seed, cost_range=(2, 5), max_tries=max_tries)
    assert len(topo.nodes) == n
    assert len(topo.undirected_edges()) == m
    assert len(topo.links) == 2 * m
    assert topo.is_connected() and topo.is_symmetric()
    assert all(k.cost in (2.0, 3.0, 4.0, 5.0) for k in topo.links)


@PROPERTY
@given(st.integers(1, 40), st.integers(1, 5), st.integers(0, 2**32 - 1))
def test_trees_have_n_minus_1_edges_and_are_connected_and_acyclic(n: int, branching: int, seed: int) -> None:
    for topo in (tree(n, branching, seed), random_tree(n, seed)):
        assert len(topo.nodes) == n
        assert len(topo.undirected_edges()) == n - 1
        assert topo.is_connected() and is_forest(topo) and topo.is_symmetric()
    assert all(len(set(tree(n, branching).neighbors(f"b{i}"))) <= branching + 1 for i in range(n))


@PROPERTY
@given(st.integers(1, 3), st.integers(1, 3), st.integers(0, 3), st.integers(1, 5), st.integers(0, 2**32 - 1))
def test_transit_stub_node_count_domains_and_connectivity(t: int, nt: int, k: int, ns: int, seed: int) -> None:
    topo = transit_stub(t, nt, k, ns, seed)
    assert len(topo.nodes) == t * nt * (1 + k * ns)
    assert len(topo.ids("transit")) == t * nt
    assert len({n.domain for n in topo.nodes if n.role == "stub"}) == t * nt * k
    assert topo.is_connected() and topo.is_symmetric()
    for link in topo.links:
        assert link.cost == DEFAULT_TS_COSTS[str(link.link_class)]


def test_transit_stub_extra_edges_and_class_costs() -> None:
    costs = {"transit": 9.0, "transit-stub": 4.0, "stub": 2.0, "stub-stub": 3.0}
    base = transit_stub(2, 2, 2, 3, seed=1, costs=costs)
    more = transit_stub(2, 2, 2, 3, seed=1, costs=costs, extra_transit_stub=3, extra_stub_stub=4)
    count = Counter(k.link_class for k in more.links)
    assert count["stub-stub"] == 8
    assert count["transit-stub"] == Counter(k.link_class for k in base.links)["transit-stub"] + 6
    assert all(k.cost == costs[str(k.link_class)] for k in more.links)
    for k in more.links:
        if k.link_class == "stub-stub":
            assert more.node(k.src).domain != more.node(k.dst).domain
    with pytest.raises(ValueError, match="unknown link class 'core'"):
        transit_stub(costs={"core": 1.0})


@PROPERTY
@given(st.integers(2, 30), st.floats(0.05, 1.0), st.floats(0.05, 1.0), st.integers(0, 2**32 - 1))
def test_waxman_is_connected_with_euclidean_costs(n: int, alpha: float, beta: float, seed: int) -> None:
    topo = waxman(n, alpha, beta, seed, max_tries=3)
    assert topo.is_connected() and topo.is_symmetric()
    assert all(0 <= k.cost <= math.sqrt(2) for k in topo.links)
    assert {k.cost for k in waxman(n, alpha, beta, seed, hops=True, max_tries=3).links} == {1.0}


@PROPERTY
@given(st.integers(1, 30), st.floats(0.0, 1.0), st.integers(0, 2**32 - 1))
def test_pure_random_is_connected_even_when_sparse(n: int, alpha: float, seed: int) -> None:
    topo = pure_random(n, alpha, seed, max_tries=2)
    assert len(topo.nodes) == n and topo.is_connected()


# ---- queries: shortest paths against scipy ------------------------------------------------------


def scipy_distances(topo: Topology, source: str) -> dict[str, float]:
    index = {n.id: i for i, n in enumerate(topo.nodes)}
    matrix = np.zeros((len(index), len(index)))
    for k in topo.links:
        matrix[index[k.src], index[k.dst]] = k.cost
    row = dijkstra(matrix, directed=True, indices=index[source])
    return {node: float(row[i]) for node, i in index.items() if np.isfinite(row[i])}


@PROPERTY
@given(directed_topologies(), st.data())
def test_shortest_paths_match_scipy_dijkstra_on_directed_graphs(topo: Topology, data: st.DataObject) -> None:
    source = data.draw(st.sampled_from(topo.ids()))
    ours = topo.shortest_paths(source)
    theirs = scipy_distances(topo, source)
    assert ours.keys() == theirs.keys()
    assert all(ours[v] == pytest.approx(theirs[v], rel=1e-12) for v in ours)
    assert topo.is_connected() == all(len(topo.shortest_paths(v)) == len(topo.nodes) for v in topo.ids())


@PROPERTY
@given(flat_params())
def test_shortest_paths_match_scipy_on_flat_random_with_float_costs(params: tuple[int, int, int]) -> None:
    n, m, seed = params
    topo = flat_random(n, m, seed, cost_range=(0.5, 10.0), integer_costs=False)
    for source in topo.ids()[:3]:
        ours = topo.shortest_paths(source)
        theirs = scipy_distances(topo, source)
        assert ours.keys() == theirs.keys() == set(topo.ids())
        assert all(ours[v] == pytest.approx(theirs[v], rel=1e-12) for v in ours)


def test_neighbors_follow_link_order_and_unknown_nodes_are_named() -> None:
    topo = tree(4, 3)
    assert topo.neighbors("b0") == ("b1", "b2", "b3")
    assert topo.neighbors("b3") == ("b0",)
    with pytest.raises(KeyError, match="no node 'zz'"):
        topo.neighbors("zz")


# ---- JSON ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(SEEDED))
def test_json_round_trip(kind: str) -> None:
    topo = SEEDED[kind](3)
    doc = json.loads(json.dumps(topo.to_json()))
    assert Topology.from_json(doc) == topo
    assert {"from", "to", "cost"} <= set(doc["links"][0])


def test_from_json_reads_a_spec_5_instance_and_names_bad_entries() -> None:
    instance = {
        "nodes": [
            {"id": "p1", "role": "publisher"},
            {"id": "b1", "role": "broker"},
            {"id": "s1", "role": "subscriber"},
        ],
        "links": [{"from": "p1", "to": "b1", "cost": 1.0}, {"from": "b1", "to": "s1", "cost": 2.0}],
        "events": [{"id": "e1", "rate": 0.5, "publisher": "p1"}],
    }
    topo = Topology.from_json(instance)
    assert topo.shortest_paths("p1") == {"p1": 0.0, "b1": 1.0, "s1": 3.0}
    assert not topo.is_connected()  # directed: nothing flows back to p1
    with pytest.raises(ValueError, match=r"links\[0\]: missing key 'to'"):
        Topology.from_json({"nodes": [{"id": "a"}], "links": [{"from": "a"}]})
    with pytest.raises(ValueError, match=r"links\[0\].*cost must be a finite number >= 0"):
        Topology.from_json({"nodes": [{"id": "a"}, {"id": "b"}], "links": [{"from": "a", "to": "b", "cost": -1}]})
    with pytest.raises(ValueError, match=r"nodes\[0\].*role 'king'"):
        Topology.from_json({"nodes": [{"id": "a", "role": "king"}]})


def test_model_rejects_inconsistent_topologies_with_reasons() -> None:
    with pytest.raises(ValueError, match="node id 'a' appears twice"):
        Topology((Node("a"), Node("a")), ())
    with pytest.raises(ValueError, match="names unknown node 'c'"):
        Topology((Node("a"),), (Link("a", "c"),))
    with pytest.raises(ValueError, match="link a->b appears twice"):
        Topology((Node("a"), Node("b")), (Link("a", "b"), Link("a", "b", 2.0)))
    with pytest.raises(ValueError, match="two different nodes"):
        Link("a", "a")
    with pytest.raises(ValueError, match="bandwidth_mbps must be a finite number > 0"):
        Link("a", "b", bandwidth_mbps=0.0)
    with pytest.raises(ValueError, match=r"between n-1=4 and n\(n-1\)/2=10 edges \(got m=11\)"):
        flat_random(5, 11)


# ---- Avro topology records --------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(SEEDED))
def test_topology_records_encode_and_validate_as_topology_elements(kind: str) -> None:
    topo = SEEDED[kind](1)
    codec = codec_for("TopologyElement")
    records = topo.topology_records(updated_at=1_700_000_000_000, reliability=0.99)
    assert len(records) == len(topo.nodes) + len(topo.links)
    assert len({r["element_id"] for r in records}) == len(records)
    for record in records:
        codec.encode(record)
        assert validate("TopologyElement", record) == []
    links = [r for r in records if r["kind"] == "link"]
    assert [(r["from"], r["to"]) for r in links] == [(k.src, k.dst) for k in topo.links]
    assert all(r["element_id"] == f"{r['from']}->{r['to']}" for r in links)


def test_client_records_name_their_home_broker() -> None:
    topo = attach_clients(tree(5, 2), 3, 4, seed=2)
    records = {r["element_id"]: r for r in topo.topology_records()}
    for client in topo.ids("publisher", "subscriber"):
        (home,) = topo.neighbors(client)
        assert records[client]["broker"] == home
        assert records[client]["kind"] == topo.node(client).role
    fig5 = opyrchal_fig5()
    routers = {r["kind"] for r in fig5.topology_records() if r["element_id"] in fig5.ids("router")}
    assert routers == {"broker"}  # the Avro enum has no router kind


# ---- overlays, clients, exporters ---------------------------------------------------------------


def test_overlay_of_all_nodes_with_unit_costs_is_the_physical_graph() -> None:
    physical = flat_random(12, 18, seed=4, cost_range=(1, 1))
    overlay = application_overlay(physical, 3, 3, 6, seed=4)
    assert len(overlay.undirected_edges()) == 18
    degrees = sorted(len(overlay.neighbors(v)) for v in overlay.ids())
    assert degrees == sorted(len(physical.neighbors(v)) for v in physical.ids())


@settings(max_examples=30, deadline=None)
@given(flat_params(), st.data())
def test_overlay_links_cost_physical_shortest_paths(params: tuple[int, int, int], data: st.DataObject) -> None:
    n, m, seed = params
    physical = flat_random(n, m, seed, cost_range=(1, 6))
    picked = data.draw(st.lists(st.sampled_from(physical.ids()), min_size=1, max_size=n, unique=True))
    overlay = application_overlay(physical, 0, 0, len(picked), chosen=picked)
    assert overlay.ids() == tuple(f"b{i}" for i in range(len(picked)))
    assert overlay.is_connected() and overlay.is_symmetric()
    physical_id = dict(zip(overlay.ids(), picked, strict=True))
    for u in overlay.ids():
        far = physical.shortest_paths(physical_id[u])
        for link in overlay.out_links(u):
            assert link.cost == far[physical_id[link.dst]]
        # logical links keep every distance between application nodes
        near = overlay.shortest_paths(u)
        assert all(near[v] == pytest.approx(far[physical_id[v]]) for v in overlay.ids())


def test_attach_clients_skips_taken_ids_and_needs_a_home() -> None:
    base = chen_flat_12(0)  # already has p0..p2, s0..s2
    topo = attach_clients(base, 2, 1, seed=0)
    assert topo.ids("publisher")[-2:] == ("p3", "p4") and topo.ids("subscriber")[-1] == "s3"
    for client in ("p3", "p4", "s3"):
        (home,) = topo.neighbors(client)
        assert topo.node(home).role == "broker"
    stubbed = attach_clients(transit_stub(seed=1), 1, 1, at_roles=("stub",))
    assert all(stubbed.node(stubbed.neighbors(c)[0]).role == "stub" for c in ("p0", "s0"))
    with pytest.raises(ValueError, match="no node with role broker"):
        attach_clients(transit_stub(seed=1), 1, 0)


def test_micpice_export_has_spec_5_roles_and_directed_links() -> None:
    topo = chen_flat_12(2)
    part = to_micpice_nodes_links(topo)
    assert Counter(n["role"] for n in part["nodes"]) == {"publisher": 3, "subscriber": 3, "broker": 6}
    assert len(part["links"]) == 36 and set(part["links"][0]) == {"from", "to", "cost"}
    assert [(k.src, k.dst, k.cost) for k in Topology.from_json(part).links] == [
        (k.src, k.dst, k.cost) for k in topo.links
    ]
    routers = to_micpice_nodes_links(chen_transit_stub_100(0))
    assert {n["role"] for n in routers["nodes"]} == {"broker"}


def test_qos_links_follow_event_flow_with_spec_4_dists() -> None:
    topo = reliability_tree(seed=1, clients=True)
    dist = {"kind": "lognormal", "mean": 40.0, "cv": 0.5}
    links = to_qos_links(topo, 0.97, dist)
    assert len(links) == 2 * 19 + 8 + 100
    assert all(k["reliability"] == 0.97 and k["delay_ms"] == dist for k in links)
    assert not any(k["to"].startswith("p") or k["from"].startswith("s") for k in links)
    per_link = {(k.src, k.dst): 0.5 for k in topo.links}
    assert {k["reliability"] for k in to_qos_links(topo, per_link, dist)} == {0.5}
    timed = Topology((Node("a"), Node("b")), (Link("a", "b", delay_ms=12.5),), "t")
    assert to_qos_links(timed)[0]["delay_ms"] == {"kind": "deterministic", "value": 12.5}
    with pytest.raises(ValueError, match="has no delay_ms; pass delay_ms_dist"):
        to_qos_links(topo)
    with pytest.raises(ValueError, match="kind must be one of"):
        to_qos_links(topo, 0.9, {"kind": "pareto"})
    with pytest.raises(ValueError, match=r"reliability must be in \[0, 1\]"):
        to_qos_links(topo, 1.5, dist)


# ---- generate -----------------------------------------------------------------------------


def test_generate_covers_every_kind_and_converts_command_line_strings() -> None:
    assert set(NAMED) == {"chen-flat-12", "chen-ts-100", "chen-flat-100", "opyrchal-fig5", "reliability-tree-20"}
    assert generate("chen-ts-100", seed="4") == chen_transit_stub_100(4)
    assert generate("reliability-tree-20", clients="true", seed="1") == reliability_tree(1, clients=True)
    assert generate("flat-random", n="9", m="12", seed="3", cost_range="2,4") == flat_random(9, 12, 3, (2, 4))
    assert generate("waxman", n="10", alpha="0.5", beta="0.3", name="none") == waxman(10, 0.5, 0.3)
    smallest: dict[str, dict[str, Any]] = {
        "flat-random": {"n": 6, "m": 7},
        "pure-random": {"n": 6, "alpha": 0.5},
        "transit-stub": {},
    }
    for kind in GENERATORS:
        assert generate(kind, **smallest.get(kind, {"n": 6})).is_connected()


def test_generate_rejects_unknown_kinds_parameters_and_values() -> None:
    with pytest.raises(ValueError, match="unknown topology kind 'ring'; valid: chen-flat-12"):
        generate("ring")
    with pytest.raises(ValueError, match="chen-flat-12 takes no parameter 'n'; valid: seed"):
        generate("chen-flat-12", n=3)
    with pytest.raises(ValueError, match="flat-random needs parameter 'm'"):
        generate("flat-random", n=3)
    with pytest.raises(ValueError, match="parameter n='x' is not a valid int"):
        generate("tree", n="x")
