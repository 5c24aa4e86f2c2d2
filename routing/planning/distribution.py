"""Min-cost event distribution under policy constraints and composite events (MICPICE).

Chen, Ge, Kurose and Towsley, *Optimizing event distribution in publish/subscribe systems in the
presence of policy-constraints and composite events* (2004), §2-§3. The model (SPEC §5):

- a directed network G = (V, L, C): publishers P, subscribers S and brokers B; ``C(u, v)`` is the
  cost of sending a unit-rate event flow over link (u, v);
- events E = E_p ∪ E_c: a primitive event has one publisher (the source function 𝒮, Eq. 1); a
  composite event lists its components (the composition matrix ℳ, Eq. 2) and can be generated
  at any node that holds all of them (SPEC §5, and Eq. 8's min term; the paper's prose has
  brokers generate composites, §2.1.2 and §3.3.1, which :meth:`Instance.with_composers` models
  and the Fig. 8 benchmark uses); ``lam`` (λ(e)) is its rate;
- interests ℐ(s, e) (a subscriber must receive every event it is interested in:
  no-false-exclusion) and policy constraints 𝒫((u, v), e) = 0 (``forbidden``, Eq. 3);
- a plan is a transmission assignment η((u, v), e) ∈ {0, 1} plus the nodes that generate each
  composite event; its cost is Σ λ(e) C(u, v) η((u, v), e) (Eq. 4).

What lives here:

- :class:`Instance` (parsing and checking SPEC §5's JSON, the composition matrix's validity and
  Proposition 2.3's feasibility test with reasons) and :class:`Plan` (SPEC §5's output);
- :func:`plan_greedy`: the greedy heuristic of §3.3.1 (Figs. 4 and 5);
- :func:`plan_enhanced`: the enhanced heuristic of §3.3.2, where nodes that already receive an
  event become its sources, with the subscriber orders Φ_M, Φ_L and Φ_R, and an optional local
  search over the sequence of interests (``improve``, not in the paper);
- :func:`chen_instance`: random instances as in §4.2 (composition in three levels, popular and
  unpopular events, per-link-and-event policy constraints with probability ``p_c``).

The exact optimum is :func:`routing.planning.exact.plan_exact`; the independent checker of any
plan is :func:`routing.planning.check.check_plan`.

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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from routing.common import json_fields as jsondoc
from routing.planning.topology import Topology, chen_flat_12, to_micpice_nodes_links

NODE_ROLES = ("publisher", "broker", "subscriber")
METHODS = ("greedy", "enhanced", "exact")
ORDERS = ("min-cost", "longest", "random")
"""Subscriber orders of the enhanced heuristic (§3.3.2): Φ_M (``min-cost``), Φ_L (``longest``,
the subscriber farthest from the event's current sources first) and Φ_R (``random``, seeded)."""

_INF = math.inf
Transmission = tuple[str, str, str]
"""(from, to, event): event e is sent over link (from, to)."""
Generation = tuple[str, str]
"""(node, event): composite event generated at node."""


class InstanceError(ValueError):
    """A MICPICE document that is not a well-formed instance (SPEC §5); the message names the item."""


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """One event type: primitive (``publisher`` set) or composite (``components`` set).

    Attributes
    ----------
    id : str
        Event id.
    lam : float
        Generation rate λ(e) > 0.
    publisher : str or None
        The node that generates a primitive event (𝒮(p, e) = 1).
    components : tuple of str
        The component events of a composite event (ℳ(d, e) = 1); empty for a primitive one.
    """

    id: str
    lam: float
    publisher: str | None = None
    components: tuple[str, ...] = ()

    @property
    def primitive(self) -> bool:
        return self.publisher is not None


@dataclass(frozen=True)
class Instance:
    """A MICPICE instance (Chen et al. 2004, Definition 2.1; SPEC §5's input).

    Build it with :meth:`from_json`, which checks every reference and value and raises
    :class:`InstanceError` naming the offending item. Structural problems that make the problem
    infeasible rather than malformed (a cyclic composition graph, a composite with no components,
    an interest no policy-allowed path can serve) are reported by :meth:`infeasibility`.

    Attributes
    ----------
    roles : mapping of str to str
        Node id to role (``publisher``, ``broker`` or ``subscriber``), in input order.
    links : mapping of (str, str) to float
        Directed link (u, v) to its cost C(u, v) >= 0.
    events : mapping of str to Event
        Event id to event, in input order.
    interests : tuple of (str, str)
        (subscriber, event) pairs with ℐ(s, e) = 1, without repeats.
    forbidden : frozenset of (str, str, str)
        (u, v, e) with 𝒫((u, v), e) = 0.
    composers : frozenset of str or None
        The nodes allowed to generate composite events; None (SPEC §5's contract, and what
        :meth:`from_json` gives) lets every node that holds all components generate. Chen et al.
        §2.1.2 and §3.3.1 have *brokers* generate composites ("composite events are generated by
        brokers", "e may be generated by one or more broker nodes, each of which receives all
        component events"), while Eq. 8's min term lets any node; :meth:`with_composers` gives the
        broker-only reading used for Fig. 8. It is not part of SPEC §5's JSON (:meth:`to_json`
        drops it).
    """

    roles: Mapping[str, str]
    links: Mapping[tuple[str, str], float]
    events: Mapping[str, Event]
    interests: tuple[tuple[str, str], ...]
    forbidden: frozenset[Transmission] = field(default_factory=frozenset)
    composers: frozenset[str] | None = None

    # ---- parsing --------------------------------------------------------------------------

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Instance:
        """Parse SPEC §5's input document.

        Raises
        ------
        InstanceError
            When a key is missing, a value has the wrong type or range, or an id is unknown or
            repeated; the message says which item and what would be valid.
        """
        if not isinstance(doc, Mapping):
            raise InstanceError(f"an instance is a JSON object with nodes, links, events, interests (got {_kind(doc)})")
        roles: dict[str, str] = {}
        for i, item in enumerate(_items(doc, "nodes")):
            node_id = _text(item, "id", f"nodes[{i}]")
            role = _text(item, "role", f"nodes[{i}]")
            if role not in NODE_ROLES:
                raise InstanceError(
                    f"nodes[{i}] ({node_id}): role must be one of {', '.join(NODE_ROLES)} (got {role!r})"
                )
            if node_id in roles:
                raise InstanceError(f"nodes[{i}]: node id {node_id!r} appears twice")
            roles[node_id] = role
        links: dict[tuple[str, str], float] = {}
        for i, item in enumerate(_items(doc, "links")):
            where = f"links[{i}]"
            u, v = _text(item, "from", where), _text(item, "to", where)
            for end in (u, v):
                if end not in roles:
                    raise InstanceError(f"{where} ({u}->{v}): unknown node {end!r}")
            if u == v:
                raise InstanceError(f"{where}: a link joins two different nodes (got {u}->{v})")
            if (u, v) in links:
                raise InstanceError(f"{where}: link {u}->{v} appears twice")
            links[(u, v)] = _number(item, "cost", f"{where} ({u}->{v})", positive=False)
        events: dict[str, Event] = {}
        for i, item in enumerate(_items(doc, "events")):
            event_id = _text(item, "id", f"events[{i}]")
            where = f"events[{i}] ({event_id})"
            if event_id in events:
                raise InstanceError(f"events[{i}]: event id {event_id!r} appears twice")
            lam = _number(item, "rate", where, positive=True)
            has_pub, has_comp = item.get("publisher") is not None, item.get("components") is not None
            if has_pub == has_comp:
                raise InstanceError(f"{where}: give exactly one of 'publisher' (primitive) or 'components' (composite)")
            if has_pub:
                pub = _text(item, "publisher", where)
                if roles.get(pub) != "publisher":
                    raise InstanceError(f"{where}: publisher {pub!r} is not a node with role publisher")
                events[event_id] = Event(event_id, lam, publisher=pub)
            else:
                comps = item["components"]
                if not isinstance(comps, list) or not all(isinstance(c, str) for c in comps):
                    raise InstanceError(f"{where}: components must be a list of event ids (got {comps!r})")
                if len(set(comps)) != len(comps):
                    raise InstanceError(f"{where}: components repeat an event ({comps})")
                events[event_id] = Event(event_id, lam, components=tuple(comps))
        for event in events.values():
            for comp in event.components:
                if comp not in events:
                    raise InstanceError(f"event {event.id}: unknown component event {comp!r}")
        interests: dict[tuple[str, str], None] = {}
        for i, item in enumerate(_items(doc, "interests")):
            where = f"interests[{i}]"
            s, e = _text(item, "subscriber", where), _text(item, "event", where)
            if roles.get(s) != "subscriber":
                raise InstanceError(f"{where}: {s!r} is not a node with role subscriber")
            if e not in events:
                raise InstanceError(f"{where}: unknown event {e!r}")
            interests[(s, e)] = None
        forbidden: set[Transmission] = set()
        for i, item in enumerate(_items(doc, "forbidden", required=False)):
            where = f"forbidden[{i}]"
            u, v, e = _text(item, "from", where), _text(item, "to", where), _text(item, "event", where)
            if (u, v) not in links:
                raise InstanceError(f"{where}: no link {u}->{v}")
            if e not in events:
                raise InstanceError(f"{where}: unknown event {e!r}")
            forbidden.add((u, v, e))
        return cls(roles, links, events, tuple(interests), frozenset(forbidden))

    def to_json(self) -> dict[str, Any]:
        """SPEC §5's input document (``Instance.from_json(i.to_json()) == i``)."""
        events: list[dict[str, Any]] = []
        for ev in self.events.values():
            if ev.primitive:
                events.append({"id": ev.id, "rate": ev.lam, "publisher": ev.publisher})
            else:
                events.append({"id": ev.id, "rate": ev.lam, "components": list(ev.components)})
        return {
            "nodes": [{"id": n, "role": r} for n, r in self.roles.items()],
            "links": [{"from": u, "to": v, "cost": c} for (u, v), c in self.links.items()],
            "events": events,
            "interests": [{"subscriber": s, "event": e} for s, e in self.interests],
            "forbidden": [{"from": u, "to": v, "event": e} for u, v, e in sorted(self.forbidden)],
        }

    def with_composers(self, nodes: Iterable[str] | None) -> Instance:
        """This instance with composite generation allowed only at ``nodes`` (None: at any node).

        >>> inst = chen_instance(seed=1).with_composers(chen_instance(seed=1).nodes_with_role("broker"))
        >>> sorted(inst.roles[n] for n in inst.roles if inst.can_compose(n)) == ["broker"] * 6
        True
        """
        if nodes is None:
            return replace(self, composers=None)
        chosen = frozenset(nodes)
        unknown = sorted(chosen - set(self.roles))
        if unknown:
            raise InstanceError(f"composers: unknown node(s) {', '.join(unknown)}")
        return replace(self, composers=chosen)

    def nodes_with_role(self, role: str) -> tuple[str, ...]:
        """The nodes with ``role`` (``publisher``, ``broker`` or ``subscriber``), in input order."""
        return tuple(n for n, r in self.roles.items() if r == role)

    def can_compose(self, node: str) -> bool:
        """Whether ``node`` may generate composite events (see ``composers``)."""
        return self.composers is None or node in self.composers

    # ---- structure ------------------------------------------------------------------------

    def allowed(self, u: str, v: str, event: str) -> bool:
        """𝒫((u, v), e) = 1: the link exists and the policy lets ``event`` cross it."""
        return (u, v) in self.links and (u, v, event) not in self.forbidden

    def composition_problems(self) -> list[str]:
        """Why the composition matrix ℳ is not valid (Chen §2.3: acyclic composition graph,
        every composite with in-degree > 0); empty when it is valid."""
        problems = [
            f"composite event {e.id} has no components"
            for e in self.events.values()
            if not e.primitive and not e.components
        ]
        cycle = self._composition_cycle()
        if cycle:
            problems.append(f"the composition graph has a cycle: {' -> '.join(cycle)}")
        return problems

    def _composition_cycle(self) -> list[str]:
        state: dict[str, int] = {}
        for start in self.events:
            if state.get(start):
                continue
            stack: list[tuple[str, int]] = [(start, 0)]
            path: list[str] = []
            while stack:
                node, k = stack.pop()
                if k == 0:
                    if state.get(node) == 1:
                        return [*path[path.index(node) :], node]
                    if state.get(node) == 2:
                        continue
                    state[node] = 1
                    path.append(node)
                comps = self.events[node].components
                if k < len(comps):
                    stack.append((node, k + 1))
                    stack.append((comps[k], 0))
                else:
                    state[node] = 2
                    path.pop()
        return []

    @cached_property
    def topological_order(self) -> tuple[str, ...]:
        """Events with every component before the events it composes (Definition 3.2); ties keep
        input order. Raises :class:`InstanceError` when the composition graph has a cycle."""
        users: dict[str, list[str]] = {e: [] for e in self.events}
        indegree = {e.id: len(e.components) for e in self.events.values()}
        for ev in self.events.values():
            for comp in ev.components:
                users[comp].append(ev.id)
        rank = {e: i for i, e in enumerate(self.events)}
        ready = [(rank[e], e) for e, k in indegree.items() if k == 0]
        heapq.heapify(ready)
        order: list[str] = []
        while ready:
            _, e = heapq.heappop(ready)
            order.append(e)
            for user in users[e]:
                indegree[user] -= 1
                if indegree[user] == 0:
                    heapq.heappush(ready, (rank[user], user))
        if len(order) != len(self.events):
            raise InstanceError("; ".join(self.composition_problems()) or "the composition graph has a cycle")
        return tuple(order)

    def originals(self, event: str) -> tuple[str, ...]:
        """The primitive events with a path to ``event`` in the composition graph (its original
        events, §2.3), in first-seen order; a primitive event is its own original."""
        seen: dict[str, None] = {}
        stack = [event]
        visited: set[str] = set()
        while stack:
            e = stack.pop()
            if e in visited:
                continue
            visited.add(e)
            ev = self.events[e]
            if ev.primitive:
                seen[e] = None
            stack.extend(reversed(ev.components))
        return tuple(seen)

    def reachable(self, event: str, source: str, stop: set[str] | frozenset[str] = frozenset()) -> set[str]:
        """Nodes reachable from ``source`` over links that allow ``event`` (the eligible graph G_e),
        not entering the nodes of ``stop`` (already known to be reached)."""
        out = self._out
        seen = {source}
        stack = [source]
        check = bool(self.forbidden)
        while stack:
            u = stack.pop()
            for v, _ in out.get(u, ()):
                if v not in seen and v not in stop and not (check and (u, v, event) in self.forbidden):
                    seen.add(v)
                    stack.append(v)
        return seen

    @cached_property
    def _out(self) -> dict[str, list[tuple[str, float]]]:
        out: dict[str, list[tuple[str, float]]] = {}
        for (u, v), c in self.links.items():
            out.setdefault(u, []).append((v, c))
        return out

    def availability(self) -> dict[str, set[str]]:
        """Where each event can be made available at all: the nodes reached when every
        policy-allowed transmission is made and every composite is generated wherever all its
        components are (events in topological order; needs a valid composition matrix)."""
        avail: dict[str, set[str]] = {}
        for e in self.topological_order:
            ev = self.events[e]
            if ev.publisher is not None:
                sources = {ev.publisher}
            else:
                sources = set.intersection(*(avail[c] for c in ev.components)) if ev.components else set()
                sources = {v for v in sources if self.can_compose(v)}
            reached: set[str] = set()
            for src in sorted(sources):
                if src not in reached:
                    reached |= self.reachable(e, src, stop=reached)
            avail[e] = reached
        return avail

    def infeasibility(self) -> list[str]:
        """Why no feasible plan exists; empty when one does (Chen et al. §2.3).

        Proposition 2.3 states the condition as a valid ℳ plus, for every interest ℐ(s, e) = 1 and
        every original event e' of e, a policy-allowed path from e''s publisher to s. That is
        sufficient (generate every composite at s itself) but not necessary: a composite made
        upstream may cross links its components may not. The test used here is exact: ℳ is valid
        and every interested subscriber is among the nodes :meth:`availability` reaches.
        """
        problems = self.composition_problems()
        if problems:
            return problems
        avail = self.availability()
        reasons: list[str] = []
        for s, e in self.interests:
            if s in avail[e]:
                continue
            ev = self.events[e]
            if ev.publisher is not None:
                reasons.append(f"{s} cannot receive {e}: no policy-allowed path from {ev.publisher}")
                continue
            holders = set.intersection(*(avail[c] for c in ev.components))
            makers = {v for v in holders if self.can_compose(v)}
            if not makers:
                missing = [c for c in ev.components if not avail[c]]
                why = (
                    f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} available nowhere"
                    if missing
                    else f"no node allowed to generate composites can hold all of {', '.join(ev.components)}"
                    if holders
                    else f"no node can hold all of {', '.join(ev.components)}"
                )
                reasons.append(f"{s} cannot receive {e}: it cannot be generated anywhere ({why})")
            else:
                shown = ", ".join(sorted(makers)[:5]) + (", ..." if len(makers) > 5 else "")
                reasons.append(
                    f"{s} cannot receive {e}: no policy-allowed path for {e} from a node that can generate it ({shown})"
                )
        return reasons

    def cost_of(self, transmissions: Iterable[Transmission]) -> float:
        """Eq. 4: Σ λ(e) C(u, v) over the distinct transmissions (u, v, e)."""
        return float(sum(self.events[e].lam * self.links[(u, v)] for u, v, e in set(transmissions)))

    def size(self) -> dict[str, int]:
        """Counts of nodes, links, events, interests and forbidden pairs."""
        return {
            "nodes": len(self.roles),
            "links": len(self.links),
            "events": len(self.events),
            "interests": len(self.interests),
            "forbidden": len(self.forbidden),
        }


@dataclass(frozen=True)
class Plan:
    """A distribution plan (SPEC §5's output).

    Attributes
    ----------
    feasible : bool
        False when no plan serves every interest; ``reasons`` then says why.
    method : str
        ``greedy``, ``enhanced`` or ``exact``.
    cost : float or None
        Eq. 4's cost; None when infeasible.
    transmissions : tuple of (from, to, event)
        η((u, v), e) = 1, sorted.
    generated : tuple of (node, event)
        Where composite events are generated, sorted.
    reasons : tuple of str
        Why the instance is infeasible.
    """

    feasible: bool
    method: str
    cost: float | None = None
    transmissions: tuple[Transmission, ...] = ()
    generated: tuple[Generation, ...] = ()
    reasons: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """SPEC §5's output document."""
        if not self.feasible:
            return {"feasible": False, "reasons": list(self.reasons)}
        return {
            "feasible": True,
            "cost": self.cost,
            "method": self.method,
            "transmissions": [{"from": u, "to": v, "event": e} for u, v, e in self.transmissions],
            "generated": [{"node": n, "event": e} for n, e in self.generated],
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Plan:
        """Read SPEC §5's output document (for checking a plan made elsewhere)."""
        if not doc.get("feasible"):
            return cls(False, str(doc.get("method", "")), reasons=tuple(map(str, doc.get("reasons", []))))
        trans = tuple(sorted((str(t["from"]), str(t["to"]), str(t["event"])) for t in doc.get("transmissions", [])))
        gens = tuple(sorted((str(g["node"]), str(g["event"])) for g in doc.get("generated", [])))
        cost = doc.get("cost")
        return cls(True, str(doc.get("method", "")), None if cost is None else float(cost), trans, gens)


def _plan(instance: Instance, method: str, eta: Iterable[Transmission], gens: Iterable[Generation]) -> Plan:
    trans = tuple(sorted(set(eta)))
    return Plan(True, method, instance.cost_of(trans), trans, tuple(sorted(set(gens))))


def infeasible_plan(instance: Instance, method: str) -> Plan | None:
    """The infeasible :class:`Plan` with Proposition 2.3's reasons, or None when the instance is feasible."""
    reasons = instance.infeasibility()
    return Plan(False, method, reasons=tuple(reasons)) if reasons else None


# --------------------------------------------------------------------------------------------
# Heuristics (§3.3)
# --------------------------------------------------------------------------------------------


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


def plan(instance: Instance, method: str = "enhanced", order: str = "min-cost", seed: int = 0) -> Plan:
    """Plan ``instance`` with ``method`` (``greedy``, ``enhanced`` or ``exact``): the one entry
    point of ``siftstream plan distribution`` and the routes job.

    >>> plan(chen_instance(seed=4), "greedy").method
    'greedy'
    """
    if method == "greedy":
        return plan_greedy(instance)
    if method == "enhanced":
        return plan_enhanced(instance, order, seed)
    if method == "exact":
        from routing.planning.exact import plan_exact  # the exact solver loads scipy.optimize

        return plan_exact(instance)
    raise ValueError(f"method must be one of {', '.join(METHODS)} (got {method!r})")


# --------------------------------------------------------------------------------------------
# Random instances (§4.2)
# --------------------------------------------------------------------------------------------


def chen_events(
    publishers: Sequence[str],
    composites: int,
    rng: np.random.Generator,
    levels: int = 3,
    max_components: int = 3,
    components_from: str = "lower",
) -> list[Event]:
    """The composition graph of Chen et al. 2004, §4.2.

    One primitive event per publisher (``e1`` ...), then ``composites`` composite events spread
    as evenly as possible over levels 2 .. ``levels``; each has 1 to ``max_components``
    components drawn without replacement. The paper says "all edges are from events in a lower
    level to those in a higher level", which reads two ways (``components_from``):

    - ``lower``: from any lower level, at least one from the level just below (so the graph
      really has ``levels`` levels); a level-3 event may then need a primitive event both
      directly and through a level-2 component (a "diamond");
    - ``below``: only from the level just below (no diamonds with |E_c| = 2).

    Rates: primitive λ uniform in (0, 1); composite λ uniform in (0, min(1, Σ component rates))
    (§4.2: 0 < λ < 1 and λ(e) <= Σ_d λ(d)).

    >>> evs = chen_events(["p1", "p2", "p3"], 2, np.random.default_rng(0))
    >>> [(e.id, e.publisher or e.components) for e in evs]
    [('e1', 'p1'), ('e2', 'p2'), ('e3', 'p3'), ('e4', ('e1',)), ('e5', ('e4', 'e3'))]
    """
    if components_from not in ("lower", "below"):
        raise ValueError(f"components_from must be lower or below (got {components_from!r})")
    events = [Event(f"e{i + 1}", _open_unit(rng), publisher=p) for i, p in enumerate(publishers)]
    by_level: list[list[Event]] = [list(events)]
    sizes = [composites // (levels - 1) + (1 if j < composites % (levels - 1) else 0) for j in range(levels - 1)]
    for size in sizes:
        below = by_level[-1]
        lower = [e for level in by_level[:-1] for e in level]
        level: list[Event] = []
        for _ in range(size):
            if not below:
                break
            k = int(rng.integers(1, max_components + 1))
            first = below[int(rng.integers(len(below)))]
            pool = [e for e in (below + lower if components_from == "lower" else below) if e is not first]
            rest = [pool[int(i)] for i in rng.choice(len(pool), size=min(k - 1, len(pool)), replace=False)]
            comps = (first, *rest)
            top = min(1.0, sum(c.lam for c in comps))
            level.append(Event(f"e{len(events) + 1}", top * _open_unit(rng), components=tuple(c.id for c in comps)))
            events.append(level[-1])
        by_level.append(level)
    return events


def chen_instance(
    topology: Topology | None = None,
    composites: int = 2,
    alpha: float = 0.2,
    p_pop: float = 0.6,
    p_unp: float = 0.1,
    p_c: float = 0.0,
    seed: int = 0,
    components_from: str = "lower",
) -> Instance:
    """A random MICPICE instance as in Chen et al. 2004, §4.2.

    Parameters
    ----------
    topology : routing.planning.topology.Topology, optional
        The application network (nodes with roles publisher, subscriber, broker; directed links
        with costs). Default: a fresh :func:`routing.planning.topology.chen_flat_12` drawn from ``seed``
        (the §4.3.1 setting: 12 nodes, 18 links, |P| = |S| = 3, |B| = 6, unit costs).
    composites : int
        |E_c|; |E_p| = |P| (each publisher one primitive event).
    alpha : float
        Probability that an event is popular.
    p_pop, p_unp : float
        Probability that a subscriber is interested in a popular / an unpopular event.
    p_c : float
        Probability that a (link, event) pair is forbidden by policy.
    seed : int
        Seed of every random choice.
    components_from : str
        ``lower`` or ``below``: the two readings of §4.2's composition graph (:func:`chen_events`).

    >>> inst = chen_instance(seed=1)
    >>> inst.size()["nodes"], inst.size()["links"], inst.size()["events"]
    (12, 36, 5)
    """
    for name, p in (("alpha", alpha), ("p_pop", p_pop), ("p_unp", p_unp), ("p_c", p_c)):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"{name} must be in [0, 1] (got {p})")
    rng = np.random.default_rng([seed, 2004])
    topo = chen_flat_12(seed) if topology is None else topology
    part = to_micpice_nodes_links(topo)
    publishers = [n["id"] for n in part["nodes"] if n["role"] == "publisher"]
    subscribers = [n["id"] for n in part["nodes"] if n["role"] == "subscriber"]
    events = chen_events(publishers, composites, rng, components_from=components_from)
    popular = rng.random(len(events)) < alpha
    want = rng.random((len(subscribers), len(events))) < np.where(popular, p_pop, p_unp)
    forbid = rng.random((len(part["links"]), len(events))) < p_c
    doc = {
        "nodes": part["nodes"],
        "links": part["links"],
        "events": [
            {"id": e.id, "rate": e.lam, "publisher": e.publisher}
            if e.primitive
            else {"id": e.id, "rate": e.lam, "components": list(e.components)}
            for e in events
        ],
        "interests": [
            {"subscriber": s, "event": e.id}
            for i, s in enumerate(subscribers)
            for j, e in enumerate(events)
            if want[i, j]
        ],
        "forbidden": [
            {"from": link["from"], "to": link["to"], "event": e.id}
            for i, link in enumerate(part["links"])
            for j, e in enumerate(events)
            if forbid[i, j]
        ],
    }
    return Instance.from_json(doc)


def _open_unit(rng: np.random.Generator) -> float:
    """Uniform in the open interval (0, 1)."""
    x = 0.0
    while x == 0.0:
        x = float(rng.random())
    return x


# --------------------------------------------------------------------------------------------
# JSON helpers
# --------------------------------------------------------------------------------------------


def _kind(value: object) -> str:
    return jsondoc.kind(value)


def _items(doc: Mapping[str, Any], key: str, required: bool = True) -> list[Mapping[str, Any]]:
    note = "an instance has nodes, links, events and interests (and optionally forbidden)"
    return jsondoc.items(doc, key, InstanceError, note, required)


def _text(item: Mapping[str, Any], key: str, where: str) -> str:
    return jsondoc.text(item, key, where, InstanceError)


def _number(item: Mapping[str, Any], key: str, where: str, positive: bool) -> float:
    return jsondoc.number(item, key, where, InstanceError, 0.0, strict=positive)
