"""An independent checker of MICPICE plans (Chen et al. 2004, Definition 2.1 and Proposition 2.3).

:func:`check_plan` re-derives, from an :class:`~routing.planning.model.Instance`'s data fields alone,
whether a :class:`~routing.planning.model.Plan` is valid and what it costs. It shares no code with the
planners (:func:`~routing.planning.heuristics.plan_greedy`, :func:`~routing.planning.heuristics.plan_enhanced`,
:func:`~routing.planning.exact.plan_exact`), so it can judge them: availability comes from its own
fixpoint started at the publishers only, feasibility from its own path search.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass

from routing.planning.model import Instance, Plan

__all__ = ["PlanCheck", "check_plan"]


@dataclass(frozen=True)
class PlanCheck:
    """The verdict of :func:`check_plan`.

    Attributes
    ----------
    ok : bool
        True when ``problems`` is empty.
    problems : tuple of str
        One sentence per defect, naming the transmission, generation, interest or event.
    cost : float or None
        Eq. 4's cost recomputed over the plan's distinct transmissions; None for a plan that
        claims infeasibility or has a transmission that cannot be priced (no such link or event).
    """

    ok: bool
    problems: tuple[str, ...]
    cost: float | None


def check_plan(instance: Instance, plan: Plan, tol: float = 1e-9) -> PlanCheck:
    """Check a plan against Chen et al. 2004, Definition 2.1 (Eq. 4-8) and Proposition 2.3.

    For a plan that claims to be feasible:

    - every transmission (u, v, e) names an existing link (u, v) and a known event, and the policy
      allows it, 𝒫((u, v), e) = 1 (Eq. 7); every generation (v, e) names a known node and a
      composite event; nothing is listed twice;
    - availability X(v, e) >= 1 is recomputed by a fixpoint that starts from the publishers only
      (𝒮(p, e) = 1): a listed generation (v, e) makes v hold e once v holds every component of e
      (Eq. 8's min term); a transmission (u, v, e) makes v hold e once u holds e (Eq. 8's max
      term). A composite is held only through a listed generation or a reception, never
      implicitly. Support is never circular: two nodes sending e to each other with no source
      hold nothing;
    - a transmission whose sender never holds its event violates Eq. 5 (feasibility); a listed
      generation at a node that never holds all components is a problem;
    - every interest ℐ(s, e) = 1 is served: s holds e (Eq. 6, no-false-exclusion);
    - the plan's cost equals Σ λ(e) C(u, v) over its distinct transmissions (Eq. 4), within
      ``tol`` relative to the recomputed cost (absolute ``tol`` below 1).

    For a plan that claims infeasibility: its reasons are non-empty and the instance really is
    infeasible, by a search of this module's own: Proposition 2.3's condition 1 (the composition
    graph is acyclic and every composite has a component) fails, or some interest (s, e) is not
    served even by the plan that makes every policy-allowed transmission and generates every
    composite wherever its components are. (Proposition 2.3's condition 2, a policy-allowed path
    to s for each original event of e under that event's own policy, is sufficient for
    feasibility but not necessary: a composite generated upstream can cross links that forbid its
    components. The search decides feasibility exactly instead.)

    Parameters
    ----------
    instance : Instance
        The MICPICE instance (only its data fields are used).
    plan : Plan
        The plan to check.
    tol : float
        Relative tolerance of the cost comparison.

    Returns
    -------
    PlanCheck
        ``ok``, the problems found, and the recomputed cost.

    Examples
    --------
    >>> from routing.planning.model import Instance, Plan
    >>> doc = {"nodes": [{"id": "p1", "role": "publisher"}, {"id": "b1", "role": "broker"},
    ...                  {"id": "s1", "role": "subscriber"}],
    ...        "links": [{"from": "p1", "to": "b1", "cost": 1.0}, {"from": "b1", "to": "s1", "cost": 2.0},
    ...                  {"from": "s1", "to": "b1", "cost": 2.0}],
    ...        "events": [{"id": "e1", "rate": 0.5, "publisher": "p1"}],
    ...        "interests": [{"subscriber": "s1", "event": "e1"}]}
    >>> inst = Instance.from_json(doc)
    >>> good = Plan(True, "hand", 1.5, (("b1", "s1", "e1"), ("p1", "b1", "e1")))
    >>> check_plan(inst, good)
    PlanCheck(ok=True, problems=(), cost=1.5)
    >>> circular = Plan(True, "hand", 2.0, (("b1", "s1", "e1"), ("s1", "b1", "e1")))
    >>> for problem in check_plan(inst, circular).problems:
    ...     print(problem)
    transmission b1->s1 of e1: b1 never holds e1, so it cannot send it (Eq. 5 feasibility)
    transmission s1->b1 of e1: s1 never holds e1, so it cannot send it (Eq. 5 feasibility)
    interest (s1, e1): s1 never holds e1 (Eq. 6 no-false-exclusion)
    """
    if not plan.feasible:
        return _check_infeasible(instance, plan)
    problems: list[str] = []
    events, links, nodes = instance.events, instance.links, instance.roles

    # ---- well-formed items ----------------------------------------------------------------
    for item, count in sorted(Counter(plan.transmissions).items()):
        if count > 1:
            problems.append(f"transmission {item[0]}->{item[1]} of {item[2]} is listed {count} times")
    for gen_item, count in sorted(Counter(plan.generated).items()):
        if count > 1:
            problems.append(f"generation of {gen_item[1]} at {gen_item[0]} is listed {count} times")
    priced: list[tuple[str, str, str]] = []
    unpriced = False
    for u, v, e in sorted(set(plan.transmissions)):
        name = f"transmission {u}->{v} of {e}"
        bad = False
        if (u, v) not in links:
            problems.append(f"{name}: there is no link {u}->{v}")
            bad = True
        if e not in events:
            problems.append(f"{name}: unknown event {e}")
            bad = True
        if bad:
            unpriced = True
            continue
        if (u, v, e) in instance.forbidden:
            problems.append(f"{name}: the policy forbids {e} on {u}->{v} (Eq. 7)")
        priced.append((u, v, e))
    generations: list[tuple[str, str]] = []
    for v, e in sorted(set(plan.generated)):
        name = f"generation of {e} at {v}"
        if v not in nodes:
            problems.append(f"{name}: unknown node {v}")
        elif e not in events:
            problems.append(f"{name}: unknown event {e}")
        elif events[e].publisher is not None:
            problems.append(f"{name}: {e} is a primitive event, published by {events[e].publisher}, not generated")
        elif instance.composers is not None and v not in instance.composers:
            problems.append(f"{name}: {v} is not among the nodes allowed to generate composites")
        else:
            generations.append((v, e))

    # ---- availability fixpoint, from the publishers only (Eq. 5 and 8) -----------------------
    sends: dict[tuple[str, str], list[str]] = {}
    for u, v, e in priced:
        sends.setdefault((u, e), []).append(v)
    waiting: dict[tuple[str, str], list[tuple[str, str]]] = {}  # (node, component) -> generations
    missing: dict[tuple[str, str], int] = {}
    held: set[tuple[str, str]] = set()
    queue: deque[tuple[str, str]] = deque()

    def hold(v: str, e: str) -> None:
        if (v, e) not in held:
            held.add((v, e))
            queue.append((v, e))

    for v, e in generations:
        comps = set(events[e].components)
        missing[(v, e)] = len(comps)
        for d in comps:
            waiting.setdefault((v, d), []).append((v, e))
    for ev in events.values():
        if ev.publisher is not None:
            hold(ev.publisher, ev.id)
    while queue:
        u, e = queue.popleft()
        for v in sends.get((u, e), ()):
            hold(v, e)
        for gen in waiting.get((u, e), ()):
            missing[gen] -= 1
            if missing[gen] == 0:
                hold(*gen)

    for u, v, e in priced:
        if (u, e) not in held:
            problems.append(
                f"transmission {u}->{v} of {e}: {u} never holds {e}, so it cannot send it (Eq. 5 feasibility)"
            )
    for v, e in generations:
        lacking = [d for d in events[e].components if (v, d) not in held]
        if not events[e].components:
            problems.append(f"generation of {e} at {v}: {e} has no components")
        elif lacking:
            problems.append(f"generation of {e} at {v}: {v} never holds component(s) {', '.join(lacking)}")
    for s, e in instance.interests:
        if (s, e) not in held:
            problems.append(f"interest ({s}, {e}): {s} never holds {e} (Eq. 6 no-false-exclusion)")

    # ---- cost (Eq. 4) ------------------------------------------------------------------------
    cost = None if unpriced else math.fsum(events[e].lam * links[(u, v)] for u, v, e in priced)
    if plan.cost is None:
        problems.append("the plan claims to be feasible but states no cost")
    elif cost is not None and not abs(plan.cost - cost) <= tol * max(1.0, abs(cost)):
        problems.append(f"stated cost {plan.cost!r} differs from the recomputed Eq. 4 cost {cost!r}")
    infeasible = _infeasibility(instance)
    if infeasible:
        problems.append("the plan claims to be feasible but the instance is not: " + "; ".join(infeasible))
    return PlanCheck(not problems, tuple(problems), cost)


def _check_infeasible(instance: Instance, plan: Plan) -> PlanCheck:
    problems: list[str] = []
    if not plan.reasons:
        problems.append("the plan claims infeasibility but gives no reasons")
    if not _infeasibility(instance):
        problems.append(
            "the plan claims infeasibility but the instance is feasible (Proposition 2.3: the composition "
            "graph is valid and every original event of every interest has a policy-allowed path)"
        )
    return PlanCheck(not problems, tuple(problems), None)


def _infeasibility(instance: Instance) -> list[str]:
    """Why no plan exists (empty when one does), by this module's own search.

    Proposition 2.3: the composition graph must be valid (acyclic, every composite with a
    component) and every interest servable. Its condition 2 (a path for each original event under
    that event's policy) is sufficient but not necessary when the policy differs per event: a
    composite made upstream can cross links that forbid its components. So servability is decided
    exactly, by availability when every policy-allowed transmission is made.
    """
    events = instance.events
    reasons = [
        f"composite event {e.id} has no components" for e in events.values() if e.publisher is None and not e.components
    ]
    # a cycle in the composition graph: depth-first search with colours
    colour: dict[str, int] = {}
    for start in events:
        if colour.get(start):
            continue
        colour[start] = 1
        stack: list[tuple[str, int]] = [(start, 0)]
        while stack:
            e, i = stack.pop()
            comps = events[e].components
            if i < len(comps):
                stack.append((e, i + 1))
                d = comps[i]
                if colour.get(d) == 1:
                    reasons.append(f"the composition graph has a cycle through {d}")
                elif not colour.get(d):
                    colour[d] = 1
                    stack.append((d, 0))
            else:
                colour[e] = 2
    if reasons:
        return reasons
    # the most a plan can do: every policy-allowed transmission, every composite generated
    # wherever its components are; availability only grows with it, so this decides feasibility
    out: dict[str, list[str]] = {}
    for u, v in instance.links:
        out.setdefault(u, []).append(v)
    users: dict[str, list[str]] = {}
    for ev in events.values():
        for d in set(ev.components):
            users.setdefault(d, []).append(ev.id)
    held: set[tuple[str, str]] = set()
    todo: list[tuple[str, str]] = []
    for ev in events.values():
        if ev.publisher is not None:
            held.add((ev.publisher, ev.id))
            todo.append((ev.publisher, ev.id))
    while todo:
        u, e = todo.pop()
        found = [(v, e) for v in out.get(u, ()) if (u, v, e) not in instance.forbidden]
        if instance.composers is None or u in instance.composers:
            found += [(u, c) for c in users.get(e, ()) if all((u, d) in held for d in events[c].components)]
        for item in found:
            if item not in held:
                held.add(item)
                todo.append(item)
    for s, e in instance.interests:
        if (s, e) not in held:
            reasons.append(
                f"{s} cannot receive {e}: not even every policy-allowed transmission, with every composite "
                "generated wherever its components are, brings it there"
            )
    return reasons
