"""The exact optimum of a MICPICE instance, as a mixed-integer linear program solved by HiGHS.

Chen, Ge, Kurose and Towsley 2004, §2 (Definition 2.1, Eq. 4-8) state MICPICE as an integer
program with big-N availability levels X(u, e). :func:`plan_exact` solves a tighter program of
the same problem with :func:`scipy.optimize.milp` (HiGHS) and returns a *proven* optimum, or
refuses (:class:`ExactTooLarge`) or fails loudly (:class:`ExactNotProven`); it never returns an
unproven plan. The heuristics it is compared with live in :mod:`routing.planning.heuristics`; every plan
it returns passes :func:`routing.planning.check.check_plan`.

>>> from routing.planning.heuristics import plan_enhanced
>>> from routing.planning.model import chen_instance
>>> inst = chen_instance(seed=4)
>>> best = plan_exact(inst)
>>> best.method, best.cost is not None and best.cost <= plan_enhanced(inst).cost + 1e-9
('exact', True)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import numpy as np

from routing.planning.model import Generation, Instance, Plan, Transmission, infeasible_plan

__all__ = ["MAX_FLOW_SIZE", "MIP_REL_GAP", "ExactNotProven", "ExactTooLarge", "commodity_count", "plan_exact"]

MAX_FLOW_SIZE = 50_000
"""Largest |L| x K that :func:`plan_exact` accepts: directed links times flow commodities
(:func:`commodity_count`), an upper bound on the program's flow variables. Beyond it solve times
grow quickly and unpredictably (MICPICE is NP-hard, Theorem 3.1); the solve times that chose the
bound are in docs/decisions/exact-solver-size-limit.md."""

MIP_REL_GAP = 1e-9
"""HiGHS's relative optimality gap: the returned cost is within this factor (and HiGHS's absolute
gap, 1e-6) of the proven lower bound."""


class ExactTooLarge(ValueError):
    """The instance is larger than :data:`MAX_FLOW_SIZE`; the message states the limit."""


class ExactNotProven(RuntimeError):
    """HiGHS stopped (time limit or another status) without proving a plan optimal."""


def plan_exact(instance: Instance, time_limit_s: float = 60.0) -> Plan:
    r"""A proven minimum-cost plan for a MICPICE instance (Chen et al. 2004, Definition 2.1).

    Infeasible instances give ``infeasible_plan(instance, "exact")`` (Proposition 2.3's reasons).
    An instance is feasible when its composition graph is valid (Proposition 2.3, condition 1) and
    every interested subscriber s could hold its event e if every policy-allowed transmission were
    made and every composite generated wherever its components are (availability only grows with
    the transmissions made). Proposition 2.3's condition 2, a policy-allowed path for each
    original event e' of e from its publisher to s *under e''s policy*, is sufficient but not
    necessary: a composite can be generated upstream and cross links that forbid its components.
    So an instance that :meth:`~routing.planning.model.Instance.infeasibility` calls infeasible can have a
    plan, and then this function returns its optimum. Otherwise the mixed-integer program below is
    solved by HiGHS (``scipy.optimize.milp``) and the plan is read from it.

    **Symbols.** Directed links (u, v) ∈ L with cost C(u, v); events e with rate λ(e) (``lam``),
    the publisher p(e) of a primitive event (𝒮, Eq. 1) and the components D(e) of a composite one
    (ℳ(d, e) = 1, Eq. 2); interests ℐ(s, e); the policy 𝒫((u, v), e) (0 on ``forbidden``, Eq. 3);
    G_e is the graph of the links with 𝒫((u, v), e) = 1.

    **Commodities.** Each interest ℐ(s, e) = 1 is unfolded along the composition graph into a
    tree of commodities q, each with an event e_q: the root has e_q = e and must deliver one unit
    to s; a commodity q of a composite event is *supplied* at generation sites w (amount y_q[w])
    and each component d of e_q has a child commodity of event d that must deliver y_q[w] to every
    w; a commodity of a primitive event is supplied by its publisher. K (:func:`commodity_count`) is
    the number of commodities.

    **Variables.** η[u, v, e] ∈ {0, 1} (Definition 2.1's transmission assignment); per
    commodity q, flows f_q[u, v] ∈ [0, 1] on the links of G_{e_q} and supplies y_q[w] ∈ [0, 1].

    **Program.**

    .. math::

        \min \sum_{e} \sum_{(u, v) \in L} \lambda(e) C(u, v)\, \eta[u, v, e]          \quad (\text{Eq. 4})

    subject to, for every commodity q with event e = e_q:

    - f_q[u, v] <= η[u, v, e], and η only exists where 𝒫((u, v), e) = 1 (Eq. 7);
    - flow conservation at every node v other than p(e): inflow - outflow + y_q[v] = demand_q[v],
      where demand_q[s] = 1 at the root (Eq. 6, no-false-exclusion) and
      demand_q[w] = y_{parent(q)}[w] for a child commodity.

    A flow of e leaves a node only after entering it or being supplied there (Eq. 5, feasibility,
    and Eq. 8's max term); a composite is supplied at w only as much as each of its components is
    delivered to w (Eq. 8's min term); supply of a primitive event starts at its publisher only
    (Eq. 8's N 𝒮(u, e) term). A flow cycle carries no demand, so circular support never counts,
    which is what Eq. 8's levels X(v, e) (decreasing by one per hop) ensure in the paper's program.
    The program is exact: with η integral and a feasible flow, every site with y_q > 0 really holds
    e_q (induction from the leaves, by flow decomposition), so every interest is served; and any
    valid plan's η carries these flows along its derivation. Flows and supplies need not be
    integral. It is tighter than Eq. 5-8 with big N: per commodity it is the multi-commodity-flow
    formulation of the directed Steiner tree (Theorem 3.1), and a commodity's component flows must
    reach all the sites its supply is spread over.

    Reductions: a commodity only uses nodes that could ever hold e_q (reachable in G_e from p(e),
    or from nodes that could hold every component) and that have a G_e path to its demand nodes;
    the root commodity sends nothing out of s, and nothing is sent into p(e).

    After solving, η is rounded and a justification forest rebuilt from it (events in
    topological order; roots are the publisher and the nodes holding every component; each other
    holder gets one sender by breadth-first search); only the transmissions and generations that
    some interest needs through it are returned (this drops zero-cost transmissions the solver
    set but no one uses).

    Parameters
    ----------
    instance : Instance
        The MICPICE instance; |L| x K must be at most :data:`MAX_FLOW_SIZE`.
    time_limit_s : float
        HiGHS's wall-clock limit in seconds.

    Returns
    -------
    Plan
        ``method="exact"``; feasible with the optimal cost, or infeasible with Proposition 2.3's
        reasons.

    Raises
    ------
    ExactTooLarge
        When |L| x K > :data:`MAX_FLOW_SIZE` (checked before building the program; an
        infeasible instance is reported as such whatever its size).
    ExactNotProven
        When HiGHS hits ``time_limit_s`` or otherwise stops without proving optimality.

    Examples
    --------
    Chen et al.'s Figure 3 situation: the composite e3 = e1 + e2 is cheapest made at s1 from the
    e1 that s1 receives anyway, which costing e3 on its own (the greedy heuristic) misses.

    >>> from routing.planning.heuristics import plan_greedy
    >>> from routing.planning.model import Instance
    >>> doc = {"nodes": [{"id": "p1", "role": "publisher"}, {"id": "p2", "role": "publisher"},
    ...                  {"id": "b1", "role": "broker"}, {"id": "s1", "role": "subscriber"}],
    ...        "links": [{"from": "p1", "to": "s1", "cost": 3}, {"from": "p1", "to": "b1", "cost": 2},
    ...                  {"from": "p2", "to": "b1", "cost": 1}, {"from": "b1", "to": "s1", "cost": 2}],
    ...        "events": [{"id": "e1", "rate": 1, "publisher": "p1"}, {"id": "e2", "rate": 1, "publisher": "p2"},
    ...                   {"id": "e3", "rate": 1, "components": ["e1", "e2"]}],
    ...        "interests": [{"subscriber": "s1", "event": "e1"}, {"subscriber": "s1", "event": "e3"}]}
    >>> inst = Instance.from_json(doc)
    >>> plan_greedy(inst).cost, plan_exact(inst).cost
    (8.0, 6.0)
    >>> plan_exact(inst).generated
    (('s1', 'e3'),)
    """
    if not time_limit_s > 0:
        raise ValueError(f"time_limit_s must be > 0 seconds (got {time_limit_s})")
    if instance.composition_problems():
        return _infeasible(instance)
    model = _Model(instance)
    if any(s not in model.possible[e] for s, e in instance.interests):
        return _infeasible(instance)
    size = len(instance.links) * commodity_count(instance)
    if size > MAX_FLOW_SIZE:
        raise ExactTooLarge(
            f"plan_exact solves instances with |L| x K <= {MAX_FLOW_SIZE} (directed links times flow commodities, "
            f"K = Σ over interests of the unfolded composition tree's size); this one has "
            f"{len(instance.links)} x {commodity_count(instance)} = {size}: use the greedy or enhanced heuristic"
        )
    model.build()
    transmissions, generated = _needed(instance, model.solve(time_limit_s))
    return Plan(True, "exact", instance.cost_of(transmissions), transmissions, generated)


def _infeasible(instance: Instance) -> Plan:
    """``infeasible_plan(instance, "exact")`` for an instance this module found infeasible."""
    plan = infeasible_plan(instance, "exact")
    if plan is None:  # Proposition 2.3's condition is sufficient for feasibility
        raise RuntimeError("internal error: an instance with a feasible plan by Proposition 2.3 found infeasible")
    return plan


class _Commodity:
    """One node q of an interest's unfolded composition tree: event ``event`` must flow from its
    roots (its publisher, or the generation sites ``sites``) to ``sinks``."""

    def __init__(self, event: str, sinks: set[str], parent: _Commodity | None) -> None:
        self.event = event
        self.sinks = sinks
        self.parent = parent
        self.nodes: set[str] = set()
        self.sites: set[str] = set()
        self.supply: dict[str, int] = {}  # site -> column of y_q[site]


def commodity_count(instance: Instance) -> int:
    """K: the number of flow commodities of :func:`plan_exact`'s program, Σ over interests (s, e)
    of the size of e's composition tree unfolded into a tree (1 for a primitive event, 1 + the
    sum over its components for a composite one). Needs a valid composition graph."""
    size: dict[str, int] = {}
    for e in instance.topological_order:
        size[e] = 1 + sum(size[d] for d in instance.events[e].components)
    return sum(size[e] for _, e in instance.interests)


class _Model:
    """The MILP of :func:`plan_exact`: variable layout, constraint rows, and the solve."""

    def __init__(self, instance: Instance) -> None:
        self.instance = instance
        self.order = instance.topological_order
        self.out: dict[str, list[str]] = {}
        self.into: dict[str, list[str]] = {}
        for u, v in instance.links:
            self.out.setdefault(u, []).append(v)
            self.into.setdefault(v, []).append(u)
        self.possible, self.can_generate = self._possible_nodes()
        # variable layout
        self.cost: list[float] = []
        self.upper: list[float] = []
        self.integral: list[int] = []
        self.eta: dict[Transmission, int] = {}
        # constraint rows: (column, coefficient) lists with bounds
        self.rows: list[list[tuple[int, float]]] = []
        self.row_lo: list[float] = []
        self.row_hi: list[float] = []

    def build(self) -> None:
        """Make the variables and rows: one commodity tree per interest."""
        for s, e in self.instance.interests:
            self._unfold(_Commodity(e, {s}, None))

    # ---- reductions ------------------------------------------------------------------------

    def _reach(self, event: str, starts: Iterable[str], forward: bool) -> set[str]:
        """Nodes reachable from ``starts`` in G_e (``forward``) or reaching them (not ``forward``)."""
        inst = self.instance
        adj = self.out if forward else self.into
        seen = set(starts)
        queue = deque(seen)
        while queue:
            x = queue.popleft()
            for y in adj.get(x, ()):
                link = (x, y, event) if forward else (y, x, event)
                if y not in seen and link not in inst.forbidden:
                    seen.add(y)
                    queue.append(y)
        return seen

    def _possible_nodes(self) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
        """Per event, the nodes that could ever hold it, and (composites) the nodes that could
        ever hold all of its components."""
        inst = self.instance
        possible: dict[str, set[str]] = {}
        can_generate: dict[str, set[str]] = {}
        for e in self.order:
            ev = inst.events[e]
            if ev.publisher is not None:
                possible[e] = self._reach(e, [ev.publisher], forward=True)
            else:
                sets = [possible[d] for d in ev.components]
                can_generate[e] = {v for v in set.intersection(*sets) if inst.can_compose(v)} if sets else set()
                possible[e] = self._reach(e, can_generate[e], forward=True)
        return possible, can_generate

    # ---- model -----------------------------------------------------------------------------

    def _var(self, cost: float, integral: bool) -> int:
        self.cost.append(cost)
        self.upper.append(1.0)
        self.integral.append(1 if integral else 0)
        return len(self.cost) - 1

    def _row(self, terms: list[tuple[int, float]], lo: float, hi: float) -> None:
        self.rows.append(terms)
        self.row_lo.append(lo)
        self.row_hi.append(hi)

    def _transmission(self, u: str, v: str, e: str) -> int:
        """The column of η[u, v, e], made on first use."""
        col = self.eta.get((u, v, e))
        if col is None:
            col = self.eta[(u, v, e)] = self._var(self.instance.events[e].lam * self.instance.links[(u, v)], True)
        return col

    def _unfold(self, q: _Commodity) -> None:
        """Flow variables and conservation rows of commodity q, then of its components."""
        inst = self.instance
        e = q.event
        ev = inst.events[e]
        q.nodes = self._reach(e, q.sinks & self.possible[e], forward=False) & self.possible[e]
        if ev.publisher is None:
            q.sites = self.can_generate[e] & q.nodes
            q.supply = {w: self._var(0.0, False) for w in sorted(q.sites)}
        balance: dict[str, list[tuple[int, float]]] = {v: [] for v in q.nodes}
        for (u, v), _ in inst.links.items():
            if u not in q.nodes or v not in q.nodes or v == ev.publisher or (u, v, e) in inst.forbidden:
                continue
            if q.parent is None and u in q.sinks:
                continue  # nothing need leave the interested subscriber
            f = self._var(0.0, False)
            self._row([(f, 1.0), (self._transmission(u, v, e), -1.0)], -np.inf, 0.0)  # f <= η
            balance[v].append((f, 1.0))
            balance[u].append((f, -1.0))
        for v, terms in balance.items():
            if v == ev.publisher:
                continue  # the publisher supplies whatever leaves it
            if v in q.supply:
                terms.append((q.supply[v], 1.0))
            if q.parent is None:
                self._row(terms, 1.0 if v in q.sinks else 0.0, 1.0 if v in q.sinks else 0.0)
            elif v in q.sinks:
                self._row([*terms, (q.parent.supply[v], -1.0)], 0.0, 0.0)
            else:
                self._row(terms, 0.0, 0.0)
        for d in ev.components:
            self._unfold(_Commodity(d, set(q.sites), q))

    def solve(self, time_limit_s: float) -> set[Transmission]:
        """Solve with HiGHS; the transmissions of the optimum (η rounded)."""
        # loaded on the first solve, not on import: scipy.optimize is slow to import and only this needs it
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import coo_array

        n = len(self.cost)
        if n == 0:
            return set()
        data = [(r, col, coef) for r, terms in enumerate(self.rows) for col, coef in terms]
        rows, cols, vals = zip(*data, strict=True)
        matrix = coo_array((vals, (rows, cols)), shape=(len(self.rows), n)).tocsr()
        res = milp(
            np.array(self.cost),
            integrality=np.array(self.integral),
            bounds=Bounds(np.zeros(n), np.array(self.upper)),
            constraints=[LinearConstraint(matrix, np.array(self.row_lo), np.array(self.row_hi))],
            options={"time_limit": float(time_limit_s), "mip_rel_gap": MIP_REL_GAP},
        )
        if res.status != 0 or res.x is None:
            raise ExactNotProven(
                f"HiGHS did not prove an optimum within {time_limit_s} s (status {res.status}: {res.message}); "
                "no plan is returned as exact: raise time_limit_s or use a heuristic"
            )
        x = np.asarray(res.x)
        return {t for t, i in self.eta.items() if x[i] > 0.5}


def _needed(instance: Instance, eta: set[Transmission]) -> tuple[tuple[Transmission, ...], tuple[Generation, ...]]:
    """The transmissions and generations some interest needs, through one justification forest.

    Events in topological order: the roots of e are its publisher, or the nodes that hold every
    component of e (generation is free); breadth-first search over the chosen transmissions of e
    gives each other holder one parent. Then, from every interest back to the roots,
    the parents' transmissions are kept, and at a generation root the components are needed.
    """
    sends: dict[tuple[str, str], list[str]] = {}
    for u, v, e in eta:
        sends.setdefault((u, e), []).append(v)
    parent: dict[tuple[str, str], str | None] = {}  # (node, event) -> sender, None at a root
    for e in instance.topological_order:
        ev = instance.events[e]
        if ev.publisher is not None:
            roots = [ev.publisher]
        else:
            roots = sorted(
                v for v in instance.roles if instance.can_compose(v) and all((v, d) in parent for d in ev.components)
            )
        queue = deque(roots)
        for v in roots:
            parent[(v, e)] = None
        while queue:
            u = queue.popleft()
            for v in sorted(sends.get((u, e), ())):
                if (v, e) not in parent:
                    parent[(v, e)] = u
                    queue.append(v)
    kept: set[Transmission] = set()
    made: set[Generation] = set()
    need = list(instance.interests)
    seen: set[tuple[str, str]] = set()
    while need:
        v, e = need.pop()
        if (v, e) in seen:
            continue
        seen.add((v, e))
        if (v, e) not in parent:
            raise RuntimeError(f"internal error: the solver's plan does not bring {e} to {v}")
        sender = parent[(v, e)]
        if sender is not None:
            kept.add((sender, v, e))
            need.append((sender, e))
        elif instance.events[e].publisher is None:
            made.add((v, e))
            need.extend((v, d) for d in instance.events[e].components)
    return tuple(sorted(kept)), tuple(sorted(made))
