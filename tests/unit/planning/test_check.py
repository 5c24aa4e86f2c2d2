"""The independent MICPICE plan checker (routing.planning.check)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from routing.planning.check import PlanCheck, check_plan
from routing.planning.exact import plan_exact
from routing.planning.heuristics import ORDERS, plan_enhanced, plan_greedy
from routing.planning.model import Instance, Plan, chen_instance, infeasible_plan


def _doc() -> dict[str, Any]:
    """p1 publishes e1, p2 publishes e2, e3 = e1 + e2; s1 wants e3, s2 wants e1; e1 may not use p1->s1."""
    return {
        "nodes": [
            {"id": "p1", "role": "publisher"},
            {"id": "p2", "role": "publisher"},
            {"id": "b1", "role": "broker"},
            {"id": "s1", "role": "subscriber"},
            {"id": "s2", "role": "subscriber"},
        ],
        "links": [
            {"from": "p1", "to": "b1", "cost": 1.0},
            {"from": "p2", "to": "b1", "cost": 2.0},
            {"from": "b1", "to": "s1", "cost": 1.0},
            {"from": "b1", "to": "s2", "cost": 3.0},
            {"from": "s1", "to": "s2", "cost": 1.0},
            {"from": "s2", "to": "s1", "cost": 1.0},
            {"from": "p1", "to": "s1", "cost": 5.0},
        ],
        "events": [
            {"id": "e1", "rate": 0.5, "publisher": "p1"},
            {"id": "e2", "rate": 0.25, "publisher": "p2"},
            {"id": "e3", "rate": 1.0, "components": ["e1", "e2"]},
        ],
        "interests": [{"subscriber": "s1", "event": "e3"}, {"subscriber": "s2", "event": "e1"}],
        "forbidden": [{"from": "p1", "to": "s1", "event": "e1"}],
    }


INSTANCE = Instance.from_json(_doc())
# e3 made at b1: 0.5 * 1 + 0.25 * 2 + 1.0 * 1 + 0.5 * 3 = 3.5
AT_B1 = (("b1", "s1", "e3"), ("b1", "s2", "e1"), ("p1", "b1", "e1"), ("p2", "b1", "e2"))
# e3 made at s1, e1 forwarded from s1 to s2: 0.5 + 0.5 + 0.5 + 0.25 + 0.5 = 2.25
AT_S1 = (("b1", "s1", "e1"), ("b1", "s1", "e2"), ("p1", "b1", "e1"), ("p2", "b1", "e2"), ("s1", "s2", "e1"))


def _plan(transmissions: tuple[tuple[str, str, str], ...], generated: tuple[tuple[str, str], ...]) -> Plan:
    """A feasible-claiming plan with its true Eq. 4 cost (over the links that exist)."""
    priced = [t for t in set(transmissions) if (t[0], t[1]) in INSTANCE.links and t[2] in INSTANCE.events]
    return Plan(True, "hand", INSTANCE.cost_of(priced), tuple(sorted(transmissions)), tuple(sorted(generated)))


def _problems(plan: Plan, instance: Instance = INSTANCE) -> str:
    check = check_plan(instance, plan)
    assert not check.ok and check.problems
    return "\n".join(check.problems)


# ---- valid plans --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("transmissions", "generated", "cost"),
    [(AT_B1, (("b1", "e3"),), 3.5), (AT_S1, (("s1", "e3"),), 2.25)],
)
def test_accepts_valid_hand_made_plans(
    transmissions: tuple[tuple[str, str, str], ...], generated: tuple[tuple[str, str], ...], cost: float
) -> None:
    check = check_plan(INSTANCE, Plan(True, "hand", cost, transmissions, generated))
    assert (check.ok, check.problems) == (True, ())
    assert check.cost == pytest.approx(cost)


def test_accepts_a_cost_within_the_relative_tolerance() -> None:
    plan = Plan(True, "hand", 2.25 * (1 + 1e-12), AT_S1, (("s1", "e3"),))
    assert check_plan(INSTANCE, plan).ok
    assert not check_plan(INSTANCE, plan, tol=1e-14).ok


def test_accepts_a_generation_at_a_node_that_also_receives_the_event() -> None:
    plan = _plan((*AT_B1, ("b1", "s2", "e3"), ("s2", "s1", "e3")), (("b1", "e3"), ("s2", "e3")))
    assert not check_plan(INSTANCE, plan).ok  # s2 lacks e2: the generation there is a defect
    plan = _plan((*AT_B1, ("b1", "s2", "e2"), ("s2", "s1", "e3")), (("b1", "e3"), ("s2", "e3")))
    check = check_plan(INSTANCE, plan)
    assert check.ok, check.problems


# ---- each kind of defect ---------------------------------------------------------------------


def test_rejects_a_missing_transmission_no_false_exclusion() -> None:
    problems = _problems(_plan(AT_B1[:1] + AT_B1[2:], (("b1", "e3"),)))
    assert problems == "interest (s2, e1): s2 never holds e1 (Eq. 6 no-false-exclusion)"


def test_rejects_a_missing_upstream_transmission() -> None:
    problems = _problems(_plan(tuple(t for t in AT_B1 if t != ("p1", "b1", "e1")), (("b1", "e3"),)))
    assert "transmission b1->s2 of e1: b1 never holds e1" in problems
    assert "generation of e3 at b1: b1 never holds component(s) e1" in problems
    assert "interest (s1, e3): s1 never holds e3" in problems


def test_rejects_a_transmission_from_a_node_that_lacks_the_event() -> None:
    problems = _problems(_plan((*AT_B1, ("s2", "s1", "e2")), (("b1", "e3"),)))
    assert problems == "transmission s2->s1 of e2: s2 never holds e2, so it cannot send it (Eq. 5 feasibility)"


def test_rejects_a_forbidden_transmission() -> None:
    plan = _plan((*AT_B1[:3], ("p2", "b1", "e2"), ("p1", "s1", "e1")), (("b1", "e3"),))
    assert _problems(plan) == "transmission p1->s1 of e1: the policy forbids e1 on p1->s1 (Eq. 7)"


def test_rejects_an_unknown_link_and_event() -> None:
    plan = _plan((*AT_B1, ("p2", "s1", "e2"), ("p1", "b1", "e9")), (("b1", "e3"),))
    problems = _problems(plan)
    assert "transmission p2->s1 of e2: there is no link p2->s1" in problems
    assert "transmission p1->b1 of e9: unknown event e9" in problems
    assert check_plan(INSTANCE, plan).cost is None  # cannot be priced


def test_rejects_circular_support() -> None:
    """s1 and s2 send e3 to each other, but nobody generates it: neither holds it."""
    plan = _plan((*AT_B1[1:], ("s1", "s2", "e3"), ("s2", "s1", "e3")), (("b1", "e3"),))
    problems = _problems(plan)
    assert "transmission s1->s2 of e3: s1 never holds e3" in problems
    assert "transmission s2->s1 of e3: s2 never holds e3" in problems
    assert "interest (s1, e3): s1 never holds e3" in problems


def test_rejects_circular_support_of_a_primitive_event() -> None:
    plan = _plan((*AT_B1[:1], ("p2", "b1", "e2"), ("s1", "s2", "e1"), ("s2", "s1", "e1")), (("b1", "e3"),))
    problems = _problems(plan)
    assert "transmission b1->s1 of e3: b1 never holds e3" in problems
    assert "transmission s1->s2 of e1: s1 never holds e1" in problems
    assert "interest (s2, e1): s2 never holds e1" in problems


def test_rejects_a_generation_without_components() -> None:
    plan = _plan((*AT_B1, ("s1", "s2", "e3")), (("b1", "e3"), ("s2", "e3")))
    assert _problems(plan) == "generation of e3 at s2: s2 never holds component(s) e2"


def test_rejects_a_composite_held_without_a_listed_generation() -> None:
    """b1 holds e1 and e2, but a composite is only held where a generation is listed."""
    problems = _problems(_plan(AT_B1, ()))
    assert "transmission b1->s1 of e3: b1 never holds e3" in problems


def test_rejects_a_generation_of_a_primitive_event_or_at_an_unknown_node() -> None:
    problems = _problems(_plan(AT_B1, (("b1", "e3"), ("b1", "e1"), ("x9", "e3"))))
    assert "generation of e1 at b1: e1 is a primitive event, published by p1, not generated" in problems
    assert "generation of e3 at x9: unknown node x9" in problems


def test_rejects_a_wrong_or_missing_cost() -> None:
    assert _problems(Plan(True, "hand", 3.6, AT_B1, (("b1", "e3"),))) == (
        "stated cost 3.6 differs from the recomputed Eq. 4 cost 3.5"
    )
    assert _problems(Plan(True, "hand", None, AT_B1, (("b1", "e3"),))) == (
        "the plan claims to be feasible but states no cost"
    )


def test_rejects_repeated_items() -> None:
    plan = Plan(True, "hand", 3.5, tuple(sorted((*AT_B1, AT_B1[0]))), (("b1", "e3"), ("b1", "e3")))
    problems = _problems(plan)
    assert "transmission b1->s1 of e3 is listed 2 times" in problems
    assert "generation of e3 at b1 is listed 2 times" in problems


# ---- infeasible instances -------------------------------------------------------------------


def _infeasible_instance() -> Instance:
    doc = _doc()
    doc["forbidden"].append({"from": "p2", "to": "b1", "event": "e2"})  # e2 cannot leave p2
    return Instance.from_json(doc)


def test_infeasible_instance_rejects_a_feasible_claim_and_accepts_the_infeasible_plan() -> None:
    instance = _infeasible_instance()
    problems = _problems(Plan(True, "hand", 0.0), instance)
    assert "the plan claims to be feasible but the instance is not: s1 cannot receive e3" in problems
    bad = infeasible_plan(instance, "greedy")
    assert bad is not None
    assert check_plan(instance, bad) == PlanCheck(True, (), None)
    assert check_plan(instance, plan_exact(instance)).ok


def test_infeasible_claim_needs_reasons_and_an_infeasible_instance() -> None:
    assert _problems(Plan(False, "hand"), _infeasible_instance()) == (
        "the plan claims infeasibility but gives no reasons"
    )
    assert "the plan claims infeasibility but the instance is feasible" in _problems(
        Plan(False, "hand", reasons=("made up",))
    )


def test_invalid_composition_graph_is_infeasible() -> None:
    """Proposition 2.3, condition 1: a cycle in the composition graph."""
    doc = _doc()
    doc["events"] += [{"id": "e4", "rate": 1.0, "components": ["e5"]}, {"id": "e5", "rate": 1.0, "components": ["e4"]}]
    instance = Instance.from_json(doc)
    bad = infeasible_plan(instance, "exact")
    assert bad is not None and check_plan(instance, bad).ok
    assert "the composition graph has a cycle" in _problems(Plan(True, "hand", 2.25, AT_S1, (("s1", "e3"),)), instance)


def _composite_upstream_instance() -> Instance:
    """e2 = composite of e1 may cross b1->s1, e1 may not: s1 can only get e2 if b1 makes it.
    Feasible, though no policy-allowed path brings e1 itself to s1."""
    return Instance.from_json(
        {
            "nodes": [
                {"id": "p1", "role": "publisher"},
                {"id": "b1", "role": "broker"},
                {"id": "s1", "role": "subscriber"},
            ],
            "links": [{"from": "p1", "to": "b1", "cost": 1.0}, {"from": "b1", "to": "s1", "cost": 1.0}],
            "events": [
                {"id": "e1", "rate": 1.0, "publisher": "p1"},
                {"id": "e2", "rate": 0.5, "components": ["e1"]},
            ],
            "interests": [{"subscriber": "s1", "event": "e2"}],
            "forbidden": [{"from": "b1", "to": "s1", "event": "e1"}],
        }
    )


def test_composite_generated_upstream_makes_the_instance_feasible() -> None:
    instance = _composite_upstream_instance()
    plan = Plan(True, "hand", 1.5, (("b1", "s1", "e2"), ("p1", "b1", "e1")), (("b1", "e2"),))
    assert check_plan(instance, plan).ok
    assert "the plan claims infeasibility but the instance is feasible" in _problems(
        Plan(False, "hand", reasons=("s1 cannot receive e2",)), instance
    )
    best = (("b1", "s1", "e2"), ("p1", "b1", "e2"))  # cheaper still: make e2 at its original's publisher
    assert plan_exact(instance) == Plan(True, "exact", 1.0, best, (("p1", "e2"),))


def test_heuristics_find_a_plan_whenever_one_exists() -> None:
    for instance in (_composite_upstream_instance(), chen_instance(seed=4, p_c=0.2)):
        assert plan_exact(instance).feasible
        assert plan_greedy(instance).feasible


# ---- the planners' plans ----------------------------------------------------------------------


@pytest.mark.parametrize("p_c", [0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9])
def test_planners_plans_pass_the_checker(p_c: float) -> None:
    for seed in range(30):
        instance = chen_instance(seed=seed, p_c=p_c)
        exact = plan_exact(instance)
        plans = [plan_greedy(instance), exact, *(plan_enhanced(instance, order, seed=seed) for order in ORDERS)]
        for plan in plans:
            assert plan.feasible == exact.feasible, (seed, plan.method)
            check = check_plan(instance, plan)
            assert check.ok, (seed, plan.method, check.problems)
            if plan.feasible:
                assert check.cost == pytest.approx(plan.cost)


def test_plans_read_back_from_json_pass_the_checker() -> None:
    instance = chen_instance(seed=3)
    plan = plan_exact(instance)
    assert check_plan(instance, Plan.from_json(plan.to_json())).ok


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ([], "a plan is a JSON object"),
        ({"cost": 3}, "'feasible' must be true or false"),
        ({"feasible": "yes"}, "'feasible' must be true or false"),
        ({"feasible": True, "transmissions": [1]}, "transmissions[0] must be an object"),
        ({"feasible": True, "transmissions": [{"from": "a", "to": "b"}]}, "transmissions[0]: 'event'"),
        ({"feasible": True, "transmissions": {"from": "a"}}, "transmissions must be a list"),
        ({"feasible": True, "generated": [{"node": 5, "event": "e"}]}, "generated[0]: 'node'"),
        ({"feasible": True, "cost": "12"}, "'cost' must be a finite number"),
        ({"feasible": True, "cost": float("nan")}, "'cost' must be a finite number"),
        ({"feasible": True, "method": 3}, "'method' must be a string"),
        ({"feasible": False, "reasons": "none"}, "'reasons' must be a list"),
    ],
)
def test_a_malformed_plan_document_is_a_clear_error(doc: Any, says: str) -> None:
    from routing.planning.model import InstanceError

    with pytest.raises(InstanceError, match=re.escape(says)):
        Plan.from_json(doc)
