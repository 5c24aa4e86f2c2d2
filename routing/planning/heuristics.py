"""The greedy and enhanced heuristics of MICPICE (Chen et al. 2004, §3.3).

Both take an :class:`~routing.planning.model.Instance` and return a
:class:`~routing.planning.model.Plan` (an infeasible one, with Proposition 2.3's reasons, when no
plan exists; otherwise Proposition 3.3 says they find one):

- :func:`plan_greedy`: the greedy heuristic of §3.3.1 (Figs. 4 and 5): each event's receiving
  costs c_e(v) by Dijkstra on its policy-allowed graph, then predecessor tracing from every
  interest;
- :func:`plan_enhanced`: the enhanced heuristic of §3.3.2, where nodes that already receive an
  event become its sources, with the subscriber orders of :data:`ORDERS` (Φ_M, Φ_L and Φ_R), and
  an optional local search over the sequence of interests (``improve``, not in the paper).

Symbols as in :mod:`routing.planning.model`: λ(e) (``lam``) an event's rate, C(u, v) a link's
cost, G_e the graph of the links that allow event e, c_e(v) the cheapest cost of making e
available at node v. Invariant: every plan returned serves every interest, sends an event only
from a node that holds it, and states the cost Σ λ(e) C(u, v) of its transmissions
(:func:`routing.planning.check.check_plan` accepts it).

>>> from routing.planning.model import Instance
>>> doc = {"nodes": [{"id": "p1", "role": "publisher"}, {"id": "b1", "role": "broker"},
...                  {"id": "s1", "role": "subscriber"}],
...        "links": [{"from": "p1", "to": "b1", "cost": 1.0}, {"from": "b1", "to": "s1", "cost": 2.0}],
...        "events": [{"id": "e1", "rate": 0.5, "publisher": "p1"}],
...        "interests": [{"subscriber": "s1", "event": "e1"}], "forbidden": []}
>>> plan = plan_enhanced(Instance.from_json(doc))
>>> plan.cost, plan.transmissions
(1.5, (('b1', 's1', 'e1'), ('p1', 'b1', 'e1')))
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence

import numpy as np

from routing.planning.model import Generation, Instance, Plan, Transmission, infeasible_plan

__all__ = ["ORDERS", "plan_enhanced", "plan_greedy"]

ORDERS = ("min-cost", "longest", "random")
"""Subscriber orders of the enhanced heuristic (§3.3.2): Φ_M (``min-cost``), Φ_L (``longest``,
the subscriber farthest from the event's current sources first) and Φ_R (``random``, seeded)."""

_INF = math.inf


def _plan(instance: Instance, method: str, eta: Iterable[Transmission], gens: Iterable[Generation]) -> Plan:
    trans = tuple(sorted(set(eta)))
    return Plan(True, method, instance.cost_of(trans), trans, tuple(sorted(set(gens))))


class _Graph:
    """Integer-indexed view of an instance for the heuristics' inner loops."""

    def __init__(self, instance: Instance) -> None:
        self.ids = list(instance.roles)
        self.index = {n: i for i, n in enumerate(self.ids)}
        self.order = instance.topological_order
        self.ev = {e: i for i, e in enumerate(self.order)}
        self.lam = [instance.events[e].lam for e in self.order]
        self.comps = [[self.ev[c] for c in instance.events[e].components] for e in self.order]
        self.users: list[list[int]] = [[] for _ in self.order]
        for k, comps in enumerate(self.comps):
            for c in comps:
                self.users[c].append(k)
        self.publisher = [
            -1 if instance.events[e].publisher is None else self.index[str(instance.events[e].publisher)]
            for e in self.order
        ]
        self.composer = [instance.can_compose(v) for v in self.ids]
        n = len(self.ids)
        self.out: list[list[tuple[int, float]]] = [[] for _ in range(n)]
        self.link_cost: dict[tuple[int, int], float] = {}
        for (u, v), link_cost in instance.links.items():
            self.out[self.index[u]].append((self.index[v], link_cost))
            self.link_cost[(self.index[u], self.index[v])] = link_cost
        blocked: list[set[tuple[int, int]]] = [set() for _ in self.order]
        for u, v, e in instance.forbidden:
            blocked[self.ev[e]].add((self.index[u], self.index[v]))
        # per event: adjacency of its eligible graph G_e (links with P((u, v), e) = 1)
        self.eligible: list[list[list[tuple[int, float]]]] = []
        for k in range(len(self.order)):
            if blocked[k]:
                bad = blocked[k]
                self.eligible.append([[(v, c) for v, c in adj if (u, v) not in bad] for u, adj in enumerate(self.out)])
            else:
                self.eligible.append(self.out)


class _Costs:
    """Per event e: the receiving cost c_e(v) and predecessor(e, v) of Fig. 4 for every node.

    ``pred[k][v] == -1`` marks a root: the publisher, a node that already holds e (enhanced), or a
    node where a composite e is generated at cost Σ_d c_d(v). Costs only ever decrease. A drop is
    queued (:meth:`lower`) and applied when the event's costs are next read (:meth:`fresh`):
    Dijkstra re-runs from the nodes whose cost dropped, and the composites that use the event
    queue those nodes, since their generation cost Σ_d c_d(v) dropped there too. Batching the
    drops this way re-runs each composite's Dijkstra once per use instead of once per delivery.
    """

    def __init__(self, g: _Graph) -> None:
        self.g = g
        n = len(g.ids)
        self.cost: list[list[float]] = []
        self.pred: list[list[int]] = []
        self._seeds: list[list[tuple[float, int]]] = [[] for _ in g.order]
        self._dropped: list[set[int]] = [set() for _ in g.order]  # nodes where a component's cost dropped
        for k in range(len(g.order)):
            self.cost.append([_INF] * n)
            self.pred.append([-1] * n)
            if g.publisher[k] >= 0:
                self._relax(k, [(0.0, g.publisher[k])])
            else:
                self._relax(k, self._generation(k, range(n)))

    def _generation(self, k: int, nodes: Iterable[int]) -> list[tuple[float, int]]:
        """(Σ_d c_d(v), v) for the nodes where composite k could be generated more cheaply than now."""
        comp_costs = [self.cost[c] for c in self.g.comps[k]]
        current, composer = self.cost[k], self.g.composer
        return [(s, v) for v in nodes if composer[v] and (s := sum(cc[v] for cc in comp_costs)) < current[v]]

    def _relax(self, k: int, seeds: list[tuple[float, int]]) -> list[int]:
        """Multi-source Dijkstra on G_e from ``seeds`` (cost, node) whose cost is below the
        current one; returns the nodes whose cost dropped."""
        cost, pred, lam, adj = self.cost[k], self.pred[k], self.g.lam[k], self.g.eligible[k]
        heap: list[tuple[float, int]] = []
        for c, v in seeds:
            if c < cost[v]:
                cost[v] = c
                pred[v] = -1
                heap.append((c, v))
        heapq.heapify(heap)
        changed: list[int] = []
        while heap:
            c, u = heapq.heappop(heap)
            if c > cost[u]:
                continue
            changed.append(u)
            for v, w in adj[u]:
                nc = c + lam * w
                if nc < cost[v]:
                    cost[v] = nc
                    pred[v] = u
                    heapq.heappush(heap, (nc, v))
        return changed

    def lower(self, k: int, seeds: list[tuple[float, int]]) -> None:
        """Queue a drop of event k's costs to ``seeds`` (cost, node), e.g. to 0 where k now is."""
        self._seeds[k].extend(seeds)

    def fresh(self, k: int) -> None:
        """Apply every queued drop that affects event k (its components' first), so that
        ``cost[k]`` and ``pred[k]`` are exact for the current holders."""
        for c in self.g.comps[k]:
            self.fresh(c)
        seeds = self._seeds[k]
        if self._dropped[k]:
            seeds.extend(self._generation(k, self._dropped[k]))
            self._dropped[k] = set()
        if not seeds:
            return
        self._seeds[k] = []
        changed = self._relax(k, seeds)
        for user in self.g.users[k]:
            self._dropped[user].update(changed)


def plan_greedy(instance: Instance) -> Plan:
    """The greedy heuristic of Chen et al. 2004, §3.3.1 (Figs. 4 and 5).

    Events are taken in topological order (Definition 3.2). For each event e, c_e(v) is the
    cheapest cost of making e available at v: for a primitive event a shortest-path cost λ(e) d(p, v)
    from its publisher p in the eligible graph G_e (links with 𝒫 = 1), for a composite event
    min_g [Σ_{d: ℳ(d, e) = 1} c_d(g) + λ(e) d(g, v)] over generation nodes g (Fig. 4, run as
    multi-source Dijkstra, which gives the fixed point of Fig. 4's relaxation loop). Then every
    interest is traced back along predecessor(e, ·) (Fig. 5), and at a generation node each
    component is traced to it in turn. Components are costed independently, so shared deliveries
    are not exploited (that is the enhanced heuristic's job).

    Returns an infeasible :class:`Plan` with Proposition 2.3's reasons when no plan exists
    (Proposition 3.3: otherwise this finds one).

    >>> from routing.planning.model import chen_instance
    >>> inst = chen_instance(seed=4)
    >>> p = plan_greedy(inst)
    >>> p.feasible, p.cost == inst.cost_of(p.transmissions)
    (True, True)
    """
    bad = infeasible_plan(instance, "greedy")
    if bad is not None:
        return bad
    g = _Graph(instance)
    costs = _Costs(g)
    eta: set[tuple[int, int, int]] = set()
    gens: set[tuple[int, int]] = set()
    for s, e in instance.interests:
        stack = [(g.ev[e], g.index[s])]
        while stack:
            k, v = stack.pop()
            u = costs.pred[k][v]
            if u >= 0:
                if (u, v, k) not in eta:
                    eta.add((u, v, k))
                    stack.append((k, u))
            elif g.publisher[k] < 0 and (v, k) not in gens:
                gens.add((v, k))
                stack.extend((c, v) for c in g.comps[k])
    return _plan(
        instance,
        "greedy",
        ((g.ids[u], g.ids[v], g.order[k]) for u, v, k in eta),
        ((g.ids[v], g.order[k]) for v, k in gens),
    )


class _Enhanced:
    """State of the enhanced heuristic: costs, the nodes that hold each event, and (for Φ_L)
    distances to each event's current source set M_e."""

    def __init__(self, g: _Graph, longest: bool) -> None:
        self.g = g
        self.costs = _Costs(g)
        n = len(g.ids)
        self.holds: list[set[int]] = [set() for _ in g.order]
        self.eta: set[tuple[int, int, int]] = set()
        self.gens: set[tuple[int, int]] = set()
        self.dist: list[list[float]] | None = None
        self._dist_seeds: list[list[int]] = [[] for _ in g.order]  # new sources of e, not yet applied
        for k, p in enumerate(g.publisher):
            if p >= 0:
                self.holds[k].add(p)
        if longest:
            self.dist = [[_INF] * n for _ in g.order]
            for k, comps in enumerate(g.comps):
                if comps:  # nodes that already hold every component (a publisher of them all)
                    both = set.intersection(*(self.holds[c] for c in comps))
                    self._dist_seeds[k].extend(v for v in both if g.composer[v])

    def distances(self, k: int) -> list[float]:
        """d(v, M_e) for Φ_L: the link-cost distance in G_e from the nearest source node of e
        (new sources are queued as they appear and applied here, when the distances are read)."""
        assert self.dist is not None
        if self.g.publisher[k] >= 0:  # a primitive event's sources are its holders: c_e(v) = λ d(v, M_e)
            self.costs.fresh(k)
            lam = self.g.lam[k]
            return [c / lam for c in self.costs.cost[k]]
        sources, self._dist_seeds[k] = self._dist_seeds[k], []
        dist, adj = self.dist[k], self.g.eligible[k]
        heap = [(0.0, v) for v in sources if dist[v] > 0.0]
        for _, v in heap:
            dist[v] = 0.0
        heapq.heapify(heap)
        while heap:
            c, u = heapq.heappop(heap)
            if c > dist[u]:
                continue
            for v, w in adj[u]:
                if c + w < dist[v]:
                    dist[v] = c + w
                    heapq.heappush(heap, (c + w, v))
        return dist

    def _receive(self, k: int, nodes: list[int]) -> None:
        """``nodes`` now hold event k: they become sources of k at cost 0."""
        fresh = [v for v in nodes if v not in self.holds[k]]
        if not fresh:
            return
        self.holds[k].update(fresh)
        self.costs.lower(k, [(0.0, v) for v in fresh])
        if self.dist is not None:
            if self.g.publisher[k] < 0:  # (a primitive event's distances come from its costs)
                self._dist_seeds[k].extend(fresh)
            for user in self.g.users[k]:  # a node holding every component is a source of the composite
                self._dist_seeds[user].extend(
                    v for v in fresh if self.g.composer[v] and all(v in self.holds[c] for c in self.g.comps[user])
                )

    def deliver(self, k: int, target: int) -> None:
        """Fix the cheapest current way of getting event k to ``target`` (Fig. 5's tracing), then
        make every node on it a source of k."""
        self.costs.fresh(k)
        pred = self.costs.pred[k]
        path = [target]
        v = target
        while pred[v] >= 0:
            u = pred[v]
            self.eta.add((u, v, k))
            path.append(u)
            v = u
        if v not in self.holds[k]:  # a generation node of composite k
            self.gens.add((v, k))
            for c in self.g.comps[k]:
                self.deliver(c, v)
        self._receive(k, path)


def plan_enhanced(
    instance: Instance, order: str = "min-cost", seed: int = 0, improve: bool = False, max_rounds: int = 3
) -> Plan:
    """The enhanced heuristic of Chen et al. 2004, §3.3.2.

    As :func:`plan_greedy`, but subscribers are served one at a time and every node that receives
    an event (or generates it) becomes a source of that event at cost 0 ("nodes b1 and s1 receive
    e1 and consequently can generate e1"), so later deliveries of the event, and of composites
    that need it, branch off what is already sent. The costs are kept up to date incrementally
    (only decreases are propagated). Events are taken in topological order; within an event the
    interested subscribers are taken in ``order``:

    - ``min-cost`` (Φ_M): the subscriber with the smallest current receiving cost c_e(s) next;
    - ``longest`` (Φ_L): the subscriber farthest from M_e, the current source nodes of e (its
      holders and, for a composite, the nodes holding all its components), next; Φ_M while
      M_e is empty;
    - ``random`` (Φ_R): a random permutation drawn from ``seed``.

    Ties are broken by node order. Delivering a composite event to a generation node g first
    delivers its components to g (recursively, by the same rule).

    ``improve`` adds a local search that is *not* in the paper (whose pseudo code for the
    enhanced heuristic is in a technical report, its reference [6]): the run above fixes a
    sequence of interests; the same delivery rule can serve interests in any sequence (a
    composite before its components too, which then branch off the components sent to its
    generation node). Each round tries moving every interest to the front and to the back of the
    sequence, replays the rule, and keeps the cheapest sequence while that is strictly cheaper;
    at most ``max_rounds`` rounds (each replays at most 2 |ℐ| sequences). The result is never
    dearer than without ``improve``, and it is still a heuristic.

    >>> from routing.planning.model import chen_instance
    >>> inst = chen_instance(seed=4)
    >>> plan_enhanced(inst).cost <= plan_greedy(inst).cost
    True
    >>> plan_enhanced(inst, improve=True).cost <= plan_enhanced(inst).cost
    True
    """
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)} (got {order!r})")
    if max_rounds < 0:
        raise ValueError(f"max_rounds must be >= 0 (got {max_rounds})")
    bad = infeasible_plan(instance, "enhanced")
    if bad is not None:
        return bad
    g = _Graph(instance)
    state = _Enhanced(g, longest=order == "longest")
    rng = np.random.default_rng(seed)
    wanted: list[list[int]] = [[] for _ in g.order]
    for s, e in instance.interests:
        wanted[g.ev[e]].append(g.index[s])
    sequence: list[tuple[int, int]] = []
    for k, subs in enumerate(wanted):
        pending = sorted(set(subs))
        if order == "random":
            pending = [pending[i] for i in rng.permutation(len(pending))]
        while pending:
            state.costs.fresh(k)
            cost = state.costs.cost[k]
            if order == "random":
                target = pending[0]
            elif order == "longest" and any((dist := state.distances(k))[s] < _INF for s in pending):
                target = max(pending, key=lambda s: (dist[s] if dist[s] < _INF else -1.0, -cost[s], -s))
            else:
                target = min(pending, key=lambda s: (cost[s], s))
            pending.remove(target)
            state.deliver(k, target)
            sequence.append((k, target))
    if improve:
        state = _improve(g, state, sequence, max_rounds)
    return _plan(
        instance,
        "enhanced",
        ((g.ids[u], g.ids[v], g.order[k]) for u, v, k in state.eta),
        ((g.ids[v], g.order[k]) for v, k in state.gens),
    )


def _replay(g: _Graph, sequence: Sequence[tuple[int, int]]) -> _Enhanced:
    """The enhanced delivery rule applied to the interests (event, subscriber) in ``sequence``."""
    state = _Enhanced(g, longest=False)
    for k, target in sequence:
        state.deliver(k, target)
    return state


def _eta_cost(g: _Graph, state: _Enhanced) -> float:
    lam, link = g.lam, g.link_cost
    return math.fsum(lam[k] * link[(u, v)] for u, v, k in state.eta)


def _improve(g: _Graph, state: _Enhanced, sequence: list[tuple[int, int]], max_rounds: int) -> _Enhanced:
    """:func:`plan_enhanced`'s ``improve`` pass: move-to-front / move-to-back local search over
    the sequence of interests, first improvement kept, at most ``max_rounds`` rounds."""
    best, best_cost = state, _eta_cost(g, state)
    for _ in range(max_rounds):
        improved = False
        for i in range(len(sequence)):
            item, rest = sequence[i], sequence[:i] + sequence[i + 1 :]
            for candidate in ([item, *rest], [*rest, item]):
                if candidate == sequence:
                    continue
                trial = _replay(g, candidate)
                trial_cost = _eta_cost(g, trial)
                if trial_cost < best_cost - 1e-12 * max(1.0, best_cost):
                    best, best_cost, sequence, improved = trial, trial_cost, candidate, True
                    break
        if not improved:
            break
    return best
