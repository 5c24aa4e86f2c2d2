"""The MICPICE model: instances, plans, and random instances as in the paper.

Chen, Ge, Kurose and Towsley, *Optimizing event distribution in publish/subscribe systems in the
presence of policy-constraints and composite events* (2004), §2 and §4.2; the JSON form is
docs/reference/distribution.md's. The symbols:

- a directed network G = (V, L, C): publishers P, subscribers S and brokers B; ``C(u, v)`` is the
  cost of sending a unit-rate event flow over link (u, v);
- events E = E_p ∪ E_c: a primitive event has one publisher (the source function 𝒮, Eq. 1); a
  composite event lists its components (the composition matrix ℳ, Eq. 2) and can be generated
  at any node that holds all of them (docs/reference/distribution.md, and Eq. 8's min term; the paper's prose has
  brokers generate composites, §2.1.2 and §3.3.1, which :meth:`Instance.with_composers` models);
  ``lam`` (λ(e)) is its rate;
- interests ℐ(s, e) (a subscriber must receive every event it is interested in:
  no-false-exclusion) and policy constraints 𝒫((u, v), e) = 0 (``forbidden``, Eq. 3);
- a plan is a transmission assignment η((u, v), e) ∈ {0, 1} plus the nodes that generate each
  composite event; its cost is Σ λ(e) C(u, v) η((u, v), e) (Eq. 4).

What lives here:

- :class:`Instance`: parsing and checking the instance document (:class:`InstanceError` names
  the bad item), the composition matrix's validity, and the exact feasibility test with reasons
  (:meth:`Instance.infeasibility`, Proposition 2.3);
- :class:`Plan` (the output document) and :func:`infeasible_plan`, the answer of every planner to an
  instance without a plan;
- :func:`chen_events` and :func:`chen_instance`: random instances as in §4.2 (composition in
  three levels, popular and unpopular events, per-link-and-event policy constraints with
  probability ``p_c``).

The planners that read this model are :mod:`routing.planning.heuristics` (greedy, enhanced) and
:mod:`routing.planning.exact`; :mod:`routing.planning.distribution` picks one by name and
:mod:`routing.planning.check` judges any plan.

Invariants: an :class:`Instance` built by :meth:`Instance.from_json` refers only to known nodes
and events and round-trips (``Instance.from_json(i.to_json()) == i``); a feasible :class:`Plan`
lists its transmissions and generations sorted and without repeats.

>>> doc = {"nodes": [{"id": "p1", "role": "publisher"}, {"id": "b1", "role": "broker"},
...                  {"id": "s1", "role": "subscriber"}],
...        "links": [{"from": "p1", "to": "b1", "cost": 1.0}],
...        "events": [{"id": "e1", "rate": 0.5, "publisher": "p1"}],
...        "interests": [{"subscriber": "s1", "event": "e1"}]}
>>> inst = Instance.from_json(doc)
>>> inst.infeasibility()
['s1 cannot receive e1: no policy-allowed path from p1']
>>> infeasible_plan(inst, "greedy").to_json()
{'feasible': False, 'reasons': ['s1 cannot receive e1: no policy-allowed path from p1']}
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
from routing.planning.named_topologies import chen_flat_12
from routing.planning.topology import Topology, to_micpice_nodes_links

__all__ = [
    "NODE_ROLES",
    "Event",
    "Generation",
    "Instance",
    "InstanceError",
    "Plan",
    "Transmission",
    "chen_events",
    "chen_instance",
    "infeasible_plan",
]

NODE_ROLES = ("publisher", "broker", "subscriber")
Transmission = tuple[str, str, str]
"""(from, to, event): event e is sent over link (from, to)."""
Generation = tuple[str, str]
"""(node, event): composite event generated at node."""


class InstanceError(ValueError):
    """A MICPICE document that is not a well-formed instance (docs/reference/distribution.md);
    the message names the item."""


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
    """A MICPICE instance (Chen et al. 2004, Definition 2.1; docs/reference/distribution.md's input).

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
        The nodes allowed to generate composite events; None (docs/reference/distribution.md's contract, and what
        :meth:`from_json` gives) lets every node that holds all components generate. Chen et al.
        §2.1.2 and §3.3.1 have *brokers* generate composites ("composite events are generated by
        brokers", "e may be generated by one or more broker nodes, each of which receives all
        component events"), while Eq. 8's min term lets any node; :meth:`with_composers` gives the
        broker-only reading used for Fig. 8. It is not part of docs/reference/distribution.md's JSON (:meth:`to_json`
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
        """Parse docs/reference/distribution.md's input document.

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
        """docs/reference/distribution.md's input document (``Instance.from_json(i.to_json()) == i``)."""
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
        """Eq. 4: Σ λ(e) C(u, v) over the distinct transmissions (u, v, e), summed in sorted order:
        the same plan costs the same bits in every process (a set's order follows the process's
        string hashing), so a job that replays a batch after a restart writes the same record."""
        return float(sum(self.events[e].lam * self.links[(u, v)] for u, v, e in sorted(set(transmissions))))

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
    """A distribution plan (docs/reference/distribution.md's output).

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
        """docs/reference/distribution.md's output document."""
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
        """Read docs/reference/distribution.md's output document (for checking a plan made elsewhere).

        Raises
        ------
        InstanceError
            When the document is not an object, ``feasible`` is not a boolean, a transmission or
            generation is not an object with non-empty string ids, ``reasons`` is not a list, or
            ``cost`` is present and not a finite number; the message names the item.
        """
        if not isinstance(doc, Mapping):
            raise InstanceError(f"a plan is a JSON object with feasible, cost, transmissions (got {_kind(doc)})")
        feasible = doc.get("feasible")
        if not isinstance(feasible, bool):
            raise InstanceError(f"a plan's 'feasible' must be true or false (got {feasible!r})")
        method = doc.get("method", "")
        if not isinstance(method, str):
            raise InstanceError(f"a plan's 'method' must be a string (got {method!r})")
        if not feasible:
            reasons = doc.get("reasons", [])
            if not isinstance(reasons, list):
                raise InstanceError(f"an infeasible plan's 'reasons' must be a list (got {_kind(reasons)})")
            return cls(False, method, reasons=tuple(map(str, reasons)))
        note = "a feasible plan has cost, method, transmissions and generated"
        trans = tuple(
            sorted(
                (
                    _text(t, "from", f"transmissions[{i}]"),
                    _text(t, "to", f"transmissions[{i}]"),
                    _text(t, "event", f"transmissions[{i}]"),
                )
                for i, t in enumerate(jsondoc.items(doc, "transmissions", InstanceError, note, required=False))
            )
        )
        gens = tuple(
            sorted(
                (_text(g, "node", f"generated[{i}]"), _text(g, "event", f"generated[{i}]"))
                for i, g in enumerate(jsondoc.items(doc, "generated", InstanceError, note, required=False))
            )
        )
        cost = None if doc.get("cost") is None else jsondoc.number(doc, "cost", "plan", InstanceError, -math.inf)
        return cls(True, method, cost, trans, gens)


def infeasible_plan(instance: Instance, method: str) -> Plan | None:
    """The infeasible :class:`Plan` with Proposition 2.3's reasons, or None when the instance is feasible."""
    reasons = instance.infeasibility()
    return Plan(False, method, reasons=tuple(reasons)) if reasons else None


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
        with costs). Default: a fresh :func:`routing.planning.named_topologies.chen_flat_12` drawn from ``seed``
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
