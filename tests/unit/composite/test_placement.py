"""Composite detection placement (routing.composite.placement, docs/reference/placement.md; Li & Jacobsen §4)."""

from __future__ import annotations

import copy
import itertools
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from routing.composite.placement import (
    PlacementError,
    PlacementInstance,
    delay_cost,
    place,
    place_adaptive,
    place_joint_point,
    place_optimal,
    plan_placement,
    traffic_cost,
)
from tests.strategies import placement_docs

ROOT = Path(__file__).resolve().parents[3]


def _links(pairs: list[tuple[str, str, float]], **extra: float) -> list[dict[str, Any]]:
    """Links both ways with equal cost."""
    out = []
    for u, v, c in pairs:
        out += [{"from": u, "to": v, "cost": c, **extra}, {"from": v, "to": u, "cost": c, **extra}]
    return out


def _and(*leaves: str, op: str = "and", id: str = "n1") -> dict[str, Any]:
    return {"id": id, "op": op, "children": [{"leaf": leaf} for leaf in leaves]}


# docs/reference/placement.md's example, its links filled in: b1 (subscriber) - b2 - {b3, b4}, with b3 - b4 too.
# The costs make the example's numbers hold exactly: the joint point is b2 (247.0), detecting at
# b3 costs 3.5 * (D[b4, b3] + D[b3, b1]) = 3.5 * (0.75 + 2.25) = 10.5.
SPEC_DOC: dict[str, Any] = {
    "brokers": ["b1", "b2", "b3", "b4"],
    "links": _links([("b1", "b2", 0.25), ("b2", "b3", 2.0), ("b2", "b4", 1.75), ("b3", "b4", 0.75)]),
    "sources": [{"leaf": "L1", "broker": "b3", "rate": 120.0}, {"leaf": "L2", "broker": "b4", "rate": 3.5}],
    "subscription": {"id": "cs1", "broker": "b1", "tree": _and("L1", "L2")},
}
SPEC_OUTPUT: dict[str, Any] = {
    "method": "optimal",
    "placement": {"n1": "b3"},
    "cost": 10.5,
    "baseline": {"placement": {"n1": "b2"}, "cost": 247.0},
    "reasons": {"n1": "L1 carries 120/s against 3.5/s for L2: detecting at b3 saves 236.5/s of traffic"},
}


def _star(rate_a: float, rate_b: float, op: str = "and") -> dict[str, Any]:
    """s (subscriber) - j - {a, b}: A enters at a, B at b; unit costs both ways."""
    return {
        "brokers": ["s", "j", "a", "b"],
        "links": _links([("s", "j", 1.0), ("j", "a", 1.0), ("j", "b", 1.0)]),
        "sources": [{"leaf": "A", "broker": "a", "rate": rate_a}, {"leaf": "B", "broker": "b", "rate": rate_b}],
        "subscription": {"id": "cs", "broker": "s", "tree": _and("A", "B", op=op)},
    }


def _brute_force(inst: PlacementInstance) -> float:
    """The oracle: the least traffic cost over every placement."""
    ids = [n.id for n in inst.operators]
    return min(
        traffic_cost(inst, dict(zip(ids, combo, strict=True)))
        for combo in itertools.product(inst.brokers, repeat=len(ids))
    )


# ---- docs/reference/placement.md's example ------------------------------------------------------------------------


def test_spec_example_output_is_exact() -> None:
    assert plan_placement(SPEC_DOC) == SPEC_OUTPUT
    assert plan_placement(SPEC_DOC, "optimal") == SPEC_OUTPUT


def test_spec_example_relations() -> None:
    inst = PlacementInstance.from_json(SPEC_DOC)
    assert inst.rates == {"L1": 120.0, "L2": 3.5, "n1": 3.5}  # Definition 2: and = min
    jp = plan_placement(SPEC_DOC, "joint-point")
    ad = plan_placement(SPEC_DOC, "adaptive")
    assert jp["placement"] == jp["baseline"]["placement"] == {"n1": "b2"}
    assert jp["cost"] == 247.0 == 120 * inst.distance("b3", "b2") + 3.5 * (inst.distance("b4", "b2") + 0.25)
    # the saving quoted in the reason is the baseline's cost minus the placement's
    assert SPEC_OUTPUT["baseline"]["cost"] - SPEC_OUTPUT["cost"] == 236.5
    assert ad["placement"] == {"n1": "b3"} and ad["cost"] == 10.5
    assert "saves 236.5/s" in ad["reasons"]["n1"] and "route b1 -> b2 -> b3" in ad["reasons"]["n1"]
    assert set(jp["reasons"]) == set(ad["reasons"]) == {"n1"}


def test_output_is_json_and_round_trips() -> None:
    inst = PlacementInstance.from_json(SPEC_DOC)
    assert PlacementInstance.from_json(inst.to_json()) == inst
    for method in ("optimal", "adaptive", "joint-point"):
        out = plan_placement(SPEC_DOC, method)
        assert json.loads(json.dumps(out)) == out
        assert list(out) == ["method", "placement", "cost", "baseline", "reasons"]


# ---- optimal: exact, against a brute-force oracle ----------------------------------------------


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(placement_docs(max_brokers=4, max_leaves=4))
def test_optimal_equals_brute_force(doc: dict[str, Any]) -> None:
    inst = PlacementInstance.from_json(doc)
    best = place(inst, "optimal")
    assert best.cost == pytest.approx(_brute_force(inst), rel=1e-9, abs=1e-12)
    assert best.cost == traffic_cost(inst, place_optimal(inst))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(placement_docs(max_brokers=6, max_leaves=6))
def test_optimal_is_never_worse_than_adaptive_or_joint_point(doc: dict[str, Any]) -> None:
    inst = PlacementInstance.from_json(doc)
    optimal = place(inst, "optimal")
    adaptive = place(inst, "adaptive")
    joint = place(inst, "joint-point")
    tol = 1e-9 * max(1.0, joint.cost)
    assert math.isfinite(adaptive.cost) and math.isfinite(joint.cost)
    assert optimal.cost <= adaptive.cost + tol
    assert optimal.cost <= joint.cost + tol
    assert optimal.baseline_cost == adaptive.baseline_cost == joint.cost
    for result in (optimal, adaptive, joint):
        assert list(result.placement) == [n.id for n in inst.operators]
        assert set(result.reasons) == set(result.placement)
        assert all(isinstance(r, str) and r for r in result.reasons.values())


def test_nary_operator_is_one_node() -> None:
    doc = {
        "brokers": ["s", "j", "a", "b", "c"],
        "links": _links([("s", "j", 1.0), ("j", "a", 1.0), ("j", "b", 1.0), ("j", "c", 1.0)]),
        "sources": [
            {"leaf": "A", "broker": "a", "rate": 40.0},
            {"leaf": "B", "broker": "b", "rate": 2.0},
            {"leaf": "C", "broker": "c", "rate": 1.0},
        ],
        "subscription": {"id": "cs", "broker": "s", "tree": _and("A", "B", "C")},
    }
    inst = PlacementInstance.from_json(doc)
    assert inst.rates["n1"] == 1.0  # min over the fold ((A and B) and C)
    out = plan_placement(doc)
    # at a: 0 + 2*2 + 1*2 + 1*2 = 8; at j: 40 + 2 + 1 + 1 = 44
    assert out["placement"] == {"n1": "a"} and out["cost"] == 8.0 == _brute_force(inst)
    assert out["reasons"]["n1"].startswith("A carries 40/s against 2/s for B and 1/s for C: detecting at a saves 36/s")


# ---- joint point ---------------------------------------------------------------------------------


def test_joint_point_is_the_lca_on_a_tree_overlay() -> None:
    #        r (subscriber)
    #       / \
    #      a   b
    #     / \   \
    #    c   d   e
    doc = {
        "brokers": ["r", "a", "b", "c", "d", "e"],
        "links": _links([("r", "a", 1.0), ("r", "b", 2.0), ("a", "c", 1.0), ("a", "d", 3.0), ("b", "e", 1.0)]),
        "sources": [
            {"leaf": "L1", "broker": "c", "rate": 1.0},
            {"leaf": "L2", "broker": "d", "rate": 1.0},
            {"leaf": "L3", "broker": "e", "rate": 1.0},
            {"leaf": "L4", "broker": "a", "rate": 1.0},
            {"leaf": "L5", "broker": "c", "rate": 1.0},
            {"leaf": "L5", "broker": "d", "rate": 1.0},
        ],
        "subscription": {
            "id": "cs",
            "broker": "r",
            "tree": {
                "id": "top",
                "op": "and",
                "children": [
                    {"id": "cd", "op": "or", "children": [{"leaf": "L1"}, {"leaf": "L2"}]},
                    {"leaf": "L3"},
                    {"id": "ac", "op": "seq", "children": [{"leaf": "L4"}, {"leaf": "L1"}]},
                    {"id": "cc", "op": "and", "children": [{"leaf": "L1"}, {"leaf": "L1"}]},
                    {"id": "l5", "op": "and", "children": [{"leaf": "L5"}, {"leaf": "L4"}]},
                ],
            },
        },
    }
    inst = PlacementInstance.from_json(doc)
    assert inst.spt_parent == {"a": "r", "b": "r", "c": "a", "d": "a", "e": "b"}
    # by hand: LCA(c, d) = a; LCA(a, c) = a (a is on c's path); LCA(c) = c; LCA(c, d, a) = a;
    # the root covers c, d, e, a: r
    assert place_joint_point(inst) == {"top": "r", "cd": "a", "ac": "a", "cc": "c", "l5": "a"}


def test_joint_point_ties_go_to_the_smaller_id() -> None:
    # s <- x <- t and s <- y <- t cost the same: t's parent is x, the smaller id
    doc = {
        "brokers": ["s", "y", "x", "t", "u"],
        "links": _links([("s", "x", 1.0), ("s", "y", 1.0), ("x", "t", 1.0), ("y", "t", 1.0), ("y", "u", 1.0)]),
        "sources": [{"leaf": "A", "broker": "t", "rate": 1.0}, {"leaf": "B", "broker": "u", "rate": 1.0}],
        "subscription": {"id": "cs", "broker": "s", "tree": _and("A", "B")},
    }
    inst = PlacementInstance.from_json(doc)
    assert inst.spt_parent["t"] == "x" and inst.spt_parent["u"] == "y"
    assert place_joint_point(inst) == {"n1": "s"}


def test_joint_point_follows_the_direction_of_publications() -> None:
    # one-way links: a -> m -> s and b -> m -> s carry publications to the subscriber s; the way
    # back (s -> a, s -> b) is direct. Distances *to* s give m; distances *from* s would give s.
    doc = {
        "brokers": ["s", "m", "a", "b"],
        "links": [
            {"from": "a", "to": "m", "cost": 1.0},
            {"from": "b", "to": "m", "cost": 1.0},
            {"from": "m", "to": "s", "cost": 1.0},
            {"from": "s", "to": "a", "cost": 1.0},
            {"from": "s", "to": "b", "cost": 1.0},
        ],
        "sources": [{"leaf": "A", "broker": "a", "rate": 1.0}, {"leaf": "B", "broker": "b", "rate": 1.0}],
        "subscription": {"id": "cs", "broker": "s", "tree": _and("A", "B")},
    }
    inst = PlacementInstance.from_json(doc)
    assert place_joint_point(inst) == {"n1": "m"}
    assert traffic_cost(inst, {"n1": "m"}) == 3.0 < traffic_cost(inst, {"n1": "s"}) == 4.0


# ---- adaptive (Algorithm 2) ----------------------------------------------------------------------


def test_adaptive_beats_joint_point_when_imbalanced() -> None:
    out = plan_placement(_star(10.0, 1.0), "adaptive")
    # joint point j: 10 + 1 + 1 = 12; at a: 0 + 1*2 + 1*2 = 4
    assert out["baseline"] == {"placement": {"n1": "j"}, "cost": 12.0}
    assert out["placement"] == {"n1": "a"} and out["cost"] == 4.0
    assert out["cost"] < out["baseline"]["cost"]
    assert plan_placement(_star(10.0, 1.0), "optimal")["cost"] == 4.0


@pytest.mark.parametrize("op", ["and", "seq", "or"])
def test_adaptive_equals_joint_point_when_balanced(op: str) -> None:
    out = plan_placement(_star(1.0, 1.0, op), "adaptive")
    assert out["placement"] == out["baseline"]["placement"] == {"n1": "j"}
    assert out["cost"] == out["baseline"]["cost"]
    assert out["reasons"]["n1"].endswith(", the joint point")


def test_adaptive_or_splits_at_the_joint_point_even_when_imbalanced() -> None:
    out = plan_placement(_star(10.0, 1.0, "or"), "adaptive")
    assert out["placement"] == {"n1": "j"}
    assert "an or is split where its inputs part ways (towards a and b), at j" in out["reasons"]["n1"]


def test_adaptive_moves_hop_by_hop_until_a_broker_splits() -> None:
    # the paper's Fig. 6: CS = (S1 & S2) || S3 split at b2; S1 & S2 goes on from the joint
    # point b3 to b4 and then b5, where S1's publications enter
    inst = PlacementInstance.from_json(_doc_examples()[1][0])
    placement, decisions = place_adaptive(inst)
    assert placement == {"n1": "b2", "n2": "b5"}
    assert place_joint_point(inst) == {"n1": "b2", "n2": "b3"}
    assert decisions["n1"].rule == "or" and decisions["n1"].hops == ("b1", "b2")
    assert decisions["n2"].rule == "cost" and decisions["n2"].hops == ("b2", "b3", "b4", "b5")


def test_adaptive_overhead_is_the_papers_formula_at_a_joint_point() -> None:
    # unit hops, joint point j: Traffic Cost(S1) = DS(S2) - DS(S1) + DS(CS) against staying at j
    placement, notes = place_adaptive(PlacementInstance.from_json(_star(4.0, 3.0)))
    assert placement == {"n1": "j"}
    assert notes["n1"].rule == "cost" and notes["n1"].hops == ("s", "j")
    assert dict(notes["n1"].overheads) == {"a": 3 - 4 + 3, "b": 4 - 3 + 3}
    placement, notes = place_adaptive(PlacementInstance.from_json(_star(7.0, 3.0)))
    assert placement == {"n1": "a"}  # 3 - 7 + 3 < 0: moving to a saves
    assert notes["n1"].hops == ("s", "j", "a") and notes["n1"].directions == ("a", "j")


# ---- QoS-based model -----------------------------------------------------------------------------


def test_delay_cost_sums_share_plus_delay_per_link() -> None:
    doc = copy.deepcopy(_star(10.0, 2.0))
    doc["links"] = [dict(link, bandwidth=100.0, delay_ms=5.0) for link in doc["links"]]
    for link in doc["links"]:
        if (link["from"], link["to"]) == ("j", "s"):
            link.update(bandwidth=10.0, delay_ms=20.0)
    inst = PlacementInstance.from_json(doc)
    # at j: A over a->j (10/100 + 5), B over b->j (2/100 + 5), n1 (2/s) over j->s (2/10 + 20)
    assert delay_cost(inst, {"n1": "j"}) == pytest.approx(0.1 + 5 + 0.02 + 5 + 0.2 + 20)
    # at a: B over b->j->a (2 * (2/100 + 5)), n1 over a->j->s (2/100 + 5 + 2/10 + 20)
    assert delay_cost(inst, {"n1": "a"}) == pytest.approx(0.04 + 10 + 0.02 + 5 + 0.2 + 20)
    assert inst.path("b", "s") == ["b", "j", "s"]


def test_delay_cost_needs_the_qos_fields() -> None:
    inst = PlacementInstance.from_json(_star(1.0, 1.0))
    with pytest.raises(PlacementError, match=r"link a->j: the QoS-based cost needs 'bandwidth'"):
        delay_cost(inst, {"n1": "j"})


# ---- errors ----------------------------------------------------------------------------------


def _mutated(change: Any) -> dict[str, Any]:
    doc = copy.deepcopy(SPEC_DOC)
    change(doc)
    return doc


ERRORS = [
    (lambda d: d.update(brokers=["b1", "b2", "b2", "b4"]), r"brokers\[2\]: duplicate broker id 'b2'"),
    (
        lambda d: d["links"].append({"from": "b1", "to": "b9", "cost": 1.0}),
        r"links\[8\] \(b1->b9\): unknown broker 'b9'",
    ),
    (lambda d: d["links"][0].update(cost=0), r"links\[0\] \(b1->b2\): 'cost' must be > 0 \(got 0\)"),
    (lambda d: d["links"][1].update(cost=-2.0), r"links\[1\] \(b2->b1\): 'cost' must be > 0"),
    (lambda d: d["links"].append(dict(d["links"][0])), r"links\[8\] \(b1->b2\): duplicate link b1->b2"),
    (lambda d: d["links"][0].update(to="b1"), r"links\[0\] \(b1->b1\): a link joins two different brokers"),
    (lambda d: d["links"][0].update(bandwidth=0), r"links\[0\] \(b1->b2\): 'bandwidth' must be > 0"),
    (lambda d: d["sources"].pop(), r"leaf 'L2' has no sources"),
    (
        lambda d: d["sources"].append({"leaf": "L9", "broker": "b1", "rate": 1.0}),
        r"sources\[2\] \(L9 at b1\): unknown leaf 'L9'",
    ),
    (lambda d: d["sources"][0].update(broker="bx"), r"sources\[0\] \(L1 at bx\): unknown broker 'bx'"),
    (lambda d: d["sources"][0].update(rate=-1), r"sources\[0\] \(L1 at b3\): 'rate' must be >= 0"),
    (lambda d: d["sources"].append({"leaf": "L1", "broker": "b3", "rate": 1.0}), r"leaf L1 already has a source at b3"),
    (lambda d: d["subscription"].update(broker="b7"), r"subscription cs1: the subscriber's broker 'b7' is unknown"),
    (lambda d: d["subscription"]["tree"].pop("op"), r"subscription.tree \(n1\): missing 'op': one of and, or, seq"),
    (lambda d: d["subscription"]["tree"].update(op="xor"), r"'op' must be one of and, or, seq \(got 'xor'\)"),
    (lambda d: d["subscription"]["tree"].pop("id"), r"subscription.tree: missing 'id'"),
    (lambda d: d["subscription"]["tree"]["children"].pop(), r"'children' must be a list of at least two nodes"),
    (
        lambda d: d["subscription"]["tree"]["children"].append(_and("L1", "L2")),
        r"subscription.tree \(n1\).children\[2\] \(n1\): duplicate operator id 'n1'",
    ),
    (lambda d: d["subscription"].update(tree={"leaf": "L1"}), r"the root must be an operator node"),
    (lambda d: d["subscription"]["tree"]["children"].append(3), r"children\[2\]: a tree node is an object"),
    (lambda d: d.pop("links"), r"missing key 'links'"),
    (
        lambda d: d.update(links=[x for x in d["links"] if x["from"] != "b3"]),
        r"disconnected: source b3 of leaf L1 cannot reach the subscriber's broker b1",
    ),
]


@pytest.mark.parametrize(("change", "message"), ERRORS)
def test_errors_name_the_item(change: Any, message: str) -> None:
    with pytest.raises(PlacementError, match=message):
        plan_placement(_mutated(change))


def test_more_errors() -> None:
    with pytest.raises(PlacementError, match="an instance is a JSON object"):
        PlacementInstance.from_json([])  # type: ignore[arg-type]
    with pytest.raises(PlacementError, match="unknown method 'best': use one of optimal, adaptive, joint-point"):
        plan_placement(SPEC_DOC, "best")
    inst = PlacementInstance.from_json(SPEC_DOC)
    with pytest.raises(PlacementError, match="no broker for operator"):
        traffic_cost(inst, {})
    with pytest.raises(PlacementError, match="placement of n1: unknown broker 'b9'"):
        traffic_cost(inst, {"n1": "b9"})
    assert isinstance(PlacementError("x"), ValueError)  # the CLI reports ValueErrors, exit 2


# ---- docs/reference/placement.md ---------------------------------------------------------------


def _doc_examples() -> list[tuple[dict[str, Any], str, dict[str, Any]]]:
    """(instance, method, printed output) for every command in docs/reference/placement.md: the json block
    before a console block holding the command, and the json block after it."""
    text = (ROOT / "docs" / "reference" / "placement.md").read_text()
    blocks = re.findall(r"^```(\w+)\n(.*?)^```$", text, flags=re.M | re.S)
    examples = []
    for i, (lang, body) in enumerate(blocks):
        if lang == "console" and "siftstream plan placement" in body:
            assert blocks[i - 1][0] == "json" and blocks[i + 1][0] == "json"
            method = re.search(r"--method (\S+)", body)
            examples.append(
                (json.loads(blocks[i - 1][1]), method.group(1) if method else "optimal", json.loads(blocks[i + 1][1]))
            )
    return examples


def test_the_docs_examples_are_what_the_code_prints() -> None:
    examples = _doc_examples()
    assert len(examples) >= 2
    for instance, method, output in examples:
        assert plan_placement(instance, method) == output
    assert examples[0][2] == SPEC_OUTPUT  # the first one is docs/reference/placement.md's example
