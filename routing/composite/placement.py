"""Where to detect a composite subscription on a broker overlay (docs/reference/placement.md).

Li and Jacobsen, *Adaptive content-based routing in general overlay topologies* (Middleware
2008), §4 "Adaptive Composite Subscription Routing". A composite subscription is a tree whose
leaves are atomic subscriptions and whose operator nodes (``and``, ``or``, ``seq``) are detected
at some broker; publications matching a leaf enter the overlay at its source brokers. The
symbols, as in the paper and docs/reference/placement.md:

- ``D[u, v]``: shortest-path cost from broker u to broker v over the directed links (the paper's
  hops; docs/reference/placement.md allows any positive link ``cost``);
- ``r_s``: the rate (events/s) at which a leaf's matching publications enter at source s, the
  data set size of Definition 1, already estimated;
- ``rate(n)``: the output rate of a node, Definition 2: a leaf's is the sum of its source rates,
  ``or`` sums its children's, ``and`` and ``seq`` take their minimum (the paper has only ``&``
  and ``||``; ``seq`` emits no more detections than ``and`` over the same inputs, so it is
  estimated like ``and``);
- ``P[n]``: the broker where operator n is detected (a placement).

The traffic cost of a placement (docs/reference/placement.md, the traffic-based model of §4.2 summed over the tree):

    cost(P) = Σ_n [ Σ_{leaf ℓ under n} Σ_{s ∈ sources(ℓ)} r_s D[s, P[n]]
                    + Σ_{operator child c of n} rate(c) D[P[c], P[n]] ]
              + rate(root) D[P[root], subscriber's broker]

A term whose route does not exist (``D = inf``) is infinite whatever its rate.

Three placements (:func:`place`):

- ``joint-point`` (the topology-only baseline, [4] in the paper, docs/reference/placement.md): every operator at the
  lowest common ancestor of its leaves' source brokers in the shortest-path tree of the
  subscriber's broker (see :meth:`PlacementInstance.spt_parent` for the direction and ties);
- ``optimal``: the exact minimum of ``cost``. The cost is a sum of one term per node (its leaf
  inputs, the root's output) and one term per operator-tree edge (``rate(c) D[P[c], P[n]]``): a
  pairwise objective on a tree, so the min-sum dynamic programme

      f_n(b) = Σ_{leaf terms of n at b} + Σ_{operator child c} min_{b'} ( f_c(b') + rate(c) D[b', b] )

  evaluated bottom-up, then ``min_b f_root(b) + rate(root) D[b, subscriber]``, is exact: given
  ``P[n] = b`` the children's subtrees share no variable, so each is minimised on its own (by
  induction on the height of n). Time O(operators × B²), memory O(B²) for B brokers; ties go to
  the operator's joint point, then to the smaller broker id;
- ``adaptive``: Algorithm 2 of §4.3 run hop by hop from the subscriber's broker (see
  :func:`place_adaptive` for how its vague points are read).

:func:`delay_cost` is the QoS-based model of §4.2 for links that carry ``bandwidth`` and
``delay_ms``. :func:`plan_placement` is the whole offline command (``siftstream plan placement``).

An operator with more than two children (docs/reference/composites.md allows it; Algorithm 2 assumes binary trees)
is read as the left fold ``((c1 op c2) op c3) ...`` of binary operators that all carry its id
and so sit at one broker: Definition 2's sum and minimum are associative, so the fold's rate is
the n-ary node's, and the cost has no term between folded nodes (their distance is 0).

>>> doc = {"brokers": ["b1", "b2", "b3"],
...        "links": [{"from": a, "to": b, "cost": 1.0} for a, b in
...                  [("b1", "b2"), ("b2", "b1"), ("b2", "b3"), ("b3", "b2")]],
...        "sources": [{"leaf": "A", "broker": "b3", "rate": 10.0},
...                    {"leaf": "B", "broker": "b2", "rate": 1.0}],
...        "subscription": {"id": "cs", "broker": "b1",
...                         "tree": {"id": "n1", "op": "and", "children": [{"leaf": "A"}, {"leaf": "B"}]}}}
>>> out = plan_placement(doc, "optimal")
>>> out["placement"], out["cost"], out["baseline"]
({'n1': 'b3'}, 3.0, {'placement': {'n1': 'b2'}, 'cost': 11.0})
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import pairwise
from typing import Any

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra

from routing.common import json_fields as jsondoc

__all__ = [
    "METHODS",
    "OPS",
    "Decision",
    "FloatVector",
    "Leaf",
    "Link",
    "Node",
    "Operator",
    "PlacementError",
    "PlacementInstance",
    "PlacementResult",
    "delay_cost",
    "place",
    "place_adaptive",
    "place_joint_point",
    "place_optimal",
    "plan_placement",
    "traffic_cost",
]

METHODS = ("optimal", "adaptive", "joint-point")
OPS = ("and", "or", "seq")

_REL_TOL = 1e-9  # two path costs within this relative distance are a tie (floating-point sums)

FloatVector = np.ndarray[Any, np.dtype[np.float64]]


class PlacementError(ValueError):
    """A placement document or placement that is not valid (docs/reference/placement.md); the message names the item
    and says what would be valid."""


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Leaf:
    """An atomic subscription in the tree; ``name`` keys its entries in ``sources``."""

    name: str


@dataclass(frozen=True)
class Operator:
    """An operator node of the composite subscription tree.

    Attributes
    ----------
    id : str
        The node's id, unique in the tree; the key of the placement.
    op : {"and", "or", "seq"}
        The operator.
    children : tuple of Leaf or Operator
        Two or more children, in order (``seq`` detects them in this order).
    """

    id: str
    op: str
    children: tuple[Leaf | Operator, ...]


Node = Leaf | Operator


@dataclass(frozen=True)
class Link:
    """A directed overlay link: its routing ``cost`` (> 0) and, for the QoS-based model of §4.2,
    optional ``bandwidth`` (events/s, > 0) and ``delay_ms`` (>= 0)."""

    cost: float
    bandwidth: float | None = None
    delay_ms: float | None = None


@dataclass(frozen=True)
class PlacementInstance:
    """docs/reference/placement.md's input: an overlay, each leaf's sources, one composite subscription.

    Build it with :meth:`from_json`, which checks every reference and value and raises
    :class:`PlacementError` naming the offending item.

    Attributes
    ----------
    brokers : tuple of str
        Broker ids, in input order (matrix index = position).
    links : mapping of (str, str) to Link
        Directed links.
    sources : mapping of str to tuple of (str, float)
        Leaf name to its (source broker, rate r_s) pairs, in input order.
    subscription_id : str
        The composite subscription's id.
    subscriber : str
        The broker of the subscriber (where detections must be delivered).
    tree : Operator
        The composite subscription's tree (its root is an operator).
    """

    brokers: tuple[str, ...]
    links: Mapping[tuple[str, str], Link]
    sources: Mapping[str, tuple[tuple[str, float], ...]]
    subscription_id: str
    subscriber: str
    tree: Operator
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    # ---- parsing --------------------------------------------------------------------------

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> PlacementInstance:
        """Parse and check docs/reference/placement.md's input document.

        Raises
        ------
        PlacementError
            When a key is missing, a value has the wrong type or range, an id is unknown or
            repeated, a tree leaf has no sources, or a source cannot reach the subscriber's
            broker; the message says which item and what would be valid.
        """
        if not isinstance(doc, Mapping):
            raise PlacementError(
                f"an instance is a JSON object with brokers, links, sources and subscription (got {_kind(doc)})"
            )
        raw_brokers = doc.get("brokers")
        if not isinstance(raw_brokers, list) or not raw_brokers:
            raise PlacementError(f"brokers must be a non-empty list of broker ids (got {raw_brokers!r})")
        brokers: dict[str, None] = {}
        for i, b in enumerate(raw_brokers):
            if not isinstance(b, str) or not b:
                raise PlacementError(f"brokers[{i}]: a broker id is a non-empty string (got {b!r})")
            if b in brokers:
                raise PlacementError(f"brokers[{i}]: duplicate broker id {b!r}")
            brokers[b] = None

        links: dict[tuple[str, str], Link] = {}
        for i, item in enumerate(_items(doc, "links")):
            where = f"links[{i}]"
            u, v = _text(item, "from", where), _text(item, "to", where)
            where = f"links[{i}] ({u}->{v})"
            for end in (u, v):
                if end not in brokers:
                    raise PlacementError(f"{where}: unknown broker {end!r} (brokers: {_list(brokers)})")
            if u == v:
                raise PlacementError(f"{where}: a link joins two different brokers")
            if (u, v) in links:
                raise PlacementError(f"{where}: duplicate link {u}->{v}")
            cost = _number(item, "cost", where, lowest=0.0, strict=True)
            bandwidth = delay = None
            if item.get("bandwidth") is not None:
                bandwidth = _number(item, "bandwidth", where, lowest=0.0, strict=True)
            if item.get("delay_ms") is not None:
                delay = _number(item, "delay_ms", where, lowest=0.0, strict=False)
            links[(u, v)] = Link(cost, bandwidth, delay)

        sub = doc.get("subscription")
        if not isinstance(sub, Mapping):
            raise PlacementError(f"subscription must be an object with id, broker and tree (got {_kind(sub)})")
        sub_id = _text(sub, "id", "subscription")
        subscriber = _text(sub, "broker", f"subscription {sub_id}")
        if subscriber not in brokers:
            raise PlacementError(
                f"subscription {sub_id}: the subscriber's broker {subscriber!r} is unknown (brokers: {_list(brokers)})"
            )
        if "tree" not in sub:
            raise PlacementError(f"subscription {sub_id}: missing 'tree' (an operator node {{id, op, children}})")
        op_ids: set[str] = set()
        leaf_names: dict[str, None] = {}
        tree = _parse_node(sub["tree"], "subscription.tree", op_ids, leaf_names)
        if not isinstance(tree, Operator):
            raise PlacementError(
                "subscription.tree: the root must be an operator node {id, op, children} "
                "(a single leaf is an atomic subscription: there is nothing to place)"
            )

        sources: dict[str, list[tuple[str, float]]] = {}
        for i, item in enumerate(_items(doc, "sources")):
            where = f"sources[{i}]"
            leaf = _text(item, "leaf", where)
            broker = _text(item, "broker", where)
            where = f"sources[{i}] ({leaf} at {broker})"
            if leaf not in leaf_names:
                raise PlacementError(f"{where}: unknown leaf {leaf!r}: the tree's leaves are {_list(leaf_names)}")
            if broker not in brokers:
                raise PlacementError(f"{where}: unknown broker {broker!r} (brokers: {_list(brokers)})")
            rate = _number(item, "rate", where, lowest=0.0, strict=False)
            if any(b == broker for b, _ in sources.get(leaf, ())):
                raise PlacementError(f"{where}: leaf {leaf} already has a source at {broker}")
            sources.setdefault(leaf, []).append((broker, rate))
        for leaf in leaf_names:
            if leaf not in sources:
                raise PlacementError(
                    f'leaf {leaf!r} has no sources: add {{"leaf": "{leaf}", "broker": ..., "rate": ...}} '
                    "to sources for every broker where its publications enter"
                )

        inst = cls(
            tuple(brokers),
            links,
            {leaf: tuple(sources[leaf]) for leaf in leaf_names},
            sub_id,
            subscriber,
            tree,
        )
        to_sub = inst.distances[:, inst.index[subscriber]]
        for leaf, pairs in inst.sources.items():
            for broker, _ in pairs:
                if not math.isfinite(to_sub[inst.index[broker]]):
                    raise PlacementError(
                        f"disconnected: source {broker} of leaf {leaf} cannot reach the subscriber's broker "
                        f"{subscriber} over the directed links (add links so that a path {broker} -> ... -> "
                        f"{subscriber} exists)"
                    )
        return inst

    # ---- structure ------------------------------------------------------------------------

    @cached_property
    def index(self) -> dict[str, int]:
        """Broker id to its matrix index."""
        return {b: i for i, b in enumerate(self.brokers)}

    @cached_property
    def distances(self) -> FloatVector:
        """``D[u, v]``: shortest-path costs over the directed links (Dijkstra), ``inf`` where v is
        unreachable from u; a B × B array indexed like :attr:`brokers`."""
        n = len(self.brokers)
        if not self.links:
            d = np.full((n, n), np.inf)
            np.fill_diagonal(d, 0.0)
            return d
        rows = [self.index[u] for u, _ in self.links]
        cols = [self.index[v] for _, v in self.links]
        costs = [link.cost for link in self.links.values()]
        graph = csr_matrix((costs, (rows, cols)), shape=(n, n))
        return np.asarray(dijkstra(graph, directed=True), dtype=np.float64)

    def distance(self, u: str, v: str) -> float:
        """``D[u, v]`` by broker id."""
        return float(self.distances[self.index[u], self.index[v]])

    @cached_property
    def _in_links(self) -> dict[str, list[tuple[str, float]]]:
        into: dict[str, list[tuple[str, float]]] = {b: [] for b in self.brokers}
        for (u, v), link in self.links.items():
            into[v].append((u, link.cost))
        return into

    @cached_property
    def _out_links(self) -> dict[str, list[tuple[str, float]]]:
        out: dict[str, list[tuple[str, float]]] = {b: [] for b in self.brokers}
        for (u, v), link in self.links.items():
            out[u].append((v, link.cost))
        return out

    @cached_property
    def spt_parent(self) -> dict[str, str]:
        """The shortest-path tree of the subscriber's broker, as each broker's parent.

        The tree is rooted at the subscriber's broker and built on distances *to* it: the
        parent of broker x is the next hop of a shortest path x -> subscriber, i.e. the
        out-neighbour y with ``cost(x, y) + D[y, sub] == D[x, sub]`` (within a relative 1e-9);
        among several such y, the smallest id in plain string order. Brokers that cannot reach
        the subscriber's broker have no parent.

        Why this direction: publications flow from the sources to the subscriber, and the cost
        counts ``D[source, P[n]]`` and ``D[P[n], sub]``; the paper routes the subscription from
        the subscriber towards the publishers along the reverse of the paths the advertisements
        took, so the paths publications then travel are exactly the shortest paths source ->
        subscriber, whose union is this tree. On an overlay whose links come in pairs of equal
        cost it is the same tree as the one built on distances *from* the subscriber's broker
        (the same tie rule picks the same parent).
        """
        sub = self.subscriber
        to_sub = self.distances[:, self.index[sub]]
        parent: dict[str, str] = {}
        for x in self.brokers:
            dx = float(to_sub[self.index[x]])
            if x == sub or not math.isfinite(dx):
                continue
            best: str | None = None
            for y, c in self._out_links[x]:
                dy = float(to_sub[self.index[y]])
                if dy < dx and _close(c + dy, dx) and (best is None or y < best):
                    best = y
            if best is not None:
                parent[x] = best
        return parent

    def next_hop(self, at: str, source: str) -> str | None:
        """The SRT's next hop from broker ``at`` towards ``source`` (Li & Jacobsen §3-§4).

        The SRT of ``at`` records, per source, the neighbour over which the source's
        advertisement arrived first: the predecessor of ``at`` on a shortest path
        source -> ``at`` (the in-neighbour y with ``D[source, y] + cost(y, at) == D[source, at]``,
        ties to the smallest id). ``at`` itself when the source is local; ``None`` when the
        source cannot reach ``at``. Publications from ``source`` arrive over this hop.
        """
        if source == at:
            return at
        key = f"hop:{at}:{source}"
        if key in self._cache:
            return self._cache[key]  # type: ignore[no-any-return]
        row = self.distances[self.index[source]]
        d_at = float(row[self.index[at]])
        best: str | None = None
        if math.isfinite(d_at):
            for y, c in self._in_links[at]:
                dy = float(row[self.index[y]])
                if dy < d_at and _close(dy + c, d_at) and (best is None or y < best):
                    best = y
        self._cache[key] = best
        return best

    def path(self, u: str, v: str) -> list[str]:
        """The routing path u -> v (brokers, both ends included) that :meth:`next_hop` follows:
        built backwards from v by SRT predecessors. Raises :class:`PlacementError` when v is
        unreachable from u."""
        hops = [v]
        cur = v
        while cur != u:
            prev = self.next_hop(cur, u)
            if prev is None:
                raise PlacementError(f"no route {u} -> {v} over the directed links")
            hops.append(prev)
            cur = prev
        hops.reverse()
        return hops

    @cached_property
    def operators(self) -> tuple[Operator, ...]:
        """The operator nodes in preorder (root first, children in order)."""
        out: list[Operator] = []
        stack: list[Operator] = [self.tree]
        while stack:
            n = stack.pop()
            out.append(n)
            stack.extend(c for c in reversed(n.children) if isinstance(c, Operator))
        return tuple(out)

    @cached_property
    def parent_of(self) -> dict[str, str | None]:
        """Operator id to its parent operator's id (``None`` for the root)."""
        parents: dict[str, str | None] = {self.tree.id: None}
        for n in self.operators:
            for c in n.children:
                if isinstance(c, Operator):
                    parents[c.id] = n.id
        return parents

    @cached_property
    def rates(self) -> dict[str, float]:
        """Output rate of every node (Definition 2, docs/reference/placement.md): operator id or leaf name to events/s.
        A leaf's is the sum of its source rates, ``or`` sums its children's, ``and`` and ``seq``
        take their minimum."""
        out: dict[str, float] = {leaf: math.fsum(r for _, r in pairs) for leaf, pairs in self.sources.items()}
        for n in reversed(self.operators):  # children before parents
            kids = [out[_name(c)] for c in n.children]
            out[n.id] = math.fsum(kids) if n.op == "or" else min(kids)
        return out

    def rate(self, node: Node) -> float:
        """Output rate of ``node`` (Definition 2)."""
        return self.rates[_name(node)]

    def source_brokers(self, node: Node) -> list[str]:
        """The source brokers of all leaves below ``node`` (first-seen order, no repeats)."""
        seen: dict[str, None] = {}
        for leaf in _leaves(node):
            for b, _ in self.sources[leaf.name]:
                seen[b] = None
        return list(seen)

    def to_json(self) -> dict[str, Any]:
        """docs/reference/placement.md's input document (``PlacementInstance.from_json(i.to_json()) == i``)."""
        links: list[dict[str, Any]] = []
        for (u, v), link in self.links.items():
            item: dict[str, Any] = {"from": u, "to": v, "cost": link.cost}
            if link.bandwidth is not None:
                item["bandwidth"] = link.bandwidth
            if link.delay_ms is not None:
                item["delay_ms"] = link.delay_ms
            links.append(item)
        return {
            "brokers": list(self.brokers),
            "links": links,
            "sources": [
                {"leaf": leaf, "broker": b, "rate": r} for leaf, pairs in self.sources.items() for b, r in pairs
            ],
            "subscription": {"id": self.subscription_id, "broker": self.subscriber, "tree": _node_json(self.tree)},
        }


# --------------------------------------------------------------------------------------------
# Costs
# --------------------------------------------------------------------------------------------


def _flow(rate: float, dist: float) -> float:
    """``rate * dist``, infinite when the route does not exist whatever the rate."""
    return math.inf if math.isinf(dist) else rate * dist


def _flow_vec(rate: float, dist: FloatVector) -> FloatVector:
    return np.where(np.isinf(dist), np.inf, rate * np.where(np.isinf(dist), 0.0, dist))


def _flows(instance: PlacementInstance, placement: Mapping[str, str]) -> Iterator[tuple[str, str, float]]:
    """The (from broker, to broker, rate) flows of a placement: the terms of docs/reference/placement.md's cost."""
    for n in instance.operators:
        at = placement[n.id]
        for c in n.children:
            if isinstance(c, Leaf):
                for s, r in instance.sources[c.name]:
                    yield s, at, r
            else:
                yield placement[c.id], at, instance.rates[c.id]
    yield placement[instance.tree.id], instance.subscriber, instance.rates[instance.tree.id]


def _check_placement(instance: PlacementInstance, placement: Mapping[str, str]) -> None:
    ids = {n.id for n in instance.operators}
    missing = [i for i in (n.id for n in instance.operators) if i not in placement]
    if missing:
        raise PlacementError(f"the placement has no broker for operator(s) {', '.join(missing)}")
    extra = sorted(set(placement) - ids)
    if extra:
        raise PlacementError(f"the placement names unknown operator(s) {', '.join(extra)}")
    for op_id, b in placement.items():
        if b not in instance.index:
            raise PlacementError(f"placement of {op_id}: unknown broker {b!r} (brokers: {_list(instance.brokers)})")


def traffic_cost(instance: PlacementInstance, placement: Mapping[str, str]) -> float:
    """Traffic cost of a placement (docs/reference/placement.md; Li & Jacobsen §4.2, traffic-based model).

    Parameters
    ----------
    instance : PlacementInstance
        The overlay, sources and subscription.
    placement : mapping of str to str
        Operator id to broker, for every operator of the tree.

    Returns
    -------
    float
        Σ over leaf inputs of ``r_s D[s, P[n]]``, over operator-tree edges of
        ``rate(c) D[P[c], P[n]]``, plus ``rate(root) D[P[root], sub]``: events/s times path cost.
        ``inf`` when a needed route does not exist.

    Examples
    --------
    >>> inst = PlacementInstance.from_json({"brokers": ["a", "b"],
    ...     "links": [{"from": "a", "to": "b", "cost": 2.0}, {"from": "b", "to": "a", "cost": 2.0}],
    ...     "sources": [{"leaf": "X", "broker": "a", "rate": 3.0}, {"leaf": "Y", "broker": "b", "rate": 1.0}],
    ...     "subscription": {"id": "s", "broker": "b",
    ...                      "tree": {"id": "n", "op": "or", "children": [{"leaf": "X"}, {"leaf": "Y"}]}}})
    >>> traffic_cost(inst, {"n": "a"}), traffic_cost(inst, {"n": "b"})
    (10.0, 6.0)
    """
    _check_placement(instance, placement)
    return math.fsum(_flow(r, instance.distance(u, v)) for u, v, r in _flows(instance, placement))


def delay_cost(instance: PlacementInstance, placement: Mapping[str, str]) -> float:
    """QoS-based cost of a placement (Li & Jacobsen §4.2, QoS-based model).

    The paper scores moving detection over link (i, j) as ``traffic / bd_ij + d_ij``. Summed over
    a whole placement: every flow of docs/reference/placement.md's cost (rate r from broker u to broker v) follows
    the routing path u -> v (:meth:`PlacementInstance.path`, the shortest path by ``cost``) and
    on each of its links e adds ``r / bandwidth_e + delay_ms_e``. As in the paper the two terms
    are added as numbers (``bandwidth`` in events/s, so ``r / bandwidth`` is the flow's share of
    the link; ``delay_ms`` in milliseconds): the result ranks placements, it is not a latency.

    Parameters
    ----------
    instance : PlacementInstance
        Every link a flow crosses needs ``bandwidth`` and ``delay_ms`` (optional link fields,
        not part of docs/reference/placement.md's required input).
    placement : mapping of str to str
        Operator id to broker.

    Raises
    ------
    PlacementError
        When a link on a used path lacks ``bandwidth`` or ``delay_ms``, or a route is missing.

    Examples
    --------
    >>> inst = PlacementInstance.from_json({"brokers": ["a", "b"],
    ...     "links": [{"from": "a", "to": "b", "cost": 1.0, "bandwidth": 100.0, "delay_ms": 5.0}],
    ...     "sources": [{"leaf": "X", "broker": "a", "rate": 20.0}, {"leaf": "Y", "broker": "a", "rate": 10.0}],
    ...     "subscription": {"id": "s", "broker": "b",
    ...                      "tree": {"id": "n", "op": "and", "children": [{"leaf": "X"}, {"leaf": "Y"}]}}})
    >>> delay_cost(inst, {"n": "a"})  # only the 10/s of detections cross a->b
    5.1
    """
    _check_placement(instance, placement)
    total: list[float] = []
    for u, v, r in _flows(instance, placement):
        hops = instance.path(u, v)
        for a, b in pairwise(hops):
            link = instance.links[(a, b)]
            if link.bandwidth is None or link.delay_ms is None:
                raise PlacementError(
                    f"link {a}->{b}: the QoS-based cost needs 'bandwidth' (> 0, events/s) and 'delay_ms' (>= 0)"
                )
            total.append(r / link.bandwidth + link.delay_ms)
    return math.fsum(total)


# --------------------------------------------------------------------------------------------
# Placements
# --------------------------------------------------------------------------------------------


def place_joint_point(instance: PlacementInstance) -> dict[str, str]:
    """The topology-only baseline (Li & Jacobsen §4, the *joint point* of [4]; docs/reference/placement.md).

    Every operator goes to the lowest common ancestor, in :attr:`PlacementInstance.spt_parent`'s
    tree, of the source brokers of all leaves below it: the first broker, coming from the
    subscriber, at which those sources lie in different directions (or the common source
    broker itself when they all enter at one broker, or one lies on the others' paths).

    Examples
    --------
    >>> inst = PlacementInstance.from_json({"brokers": ["s", "j", "a", "b"],
    ...     "links": [{"from": x, "to": y, "cost": 1.0} for x, y in
    ...               [("s", "j"), ("j", "s"), ("j", "a"), ("a", "j"), ("j", "b"), ("b", "j")]],
    ...     "sources": [{"leaf": "X", "broker": "a", "rate": 1.0}, {"leaf": "Y", "broker": "b", "rate": 1.0}],
    ...     "subscription": {"id": "c", "broker": "s",
    ...                      "tree": {"id": "n", "op": "and", "children": [{"leaf": "X"}, {"leaf": "Y"}]}}})
    >>> place_joint_point(inst)
    {'n': 'j'}
    """
    parent = instance.spt_parent

    def chain(b: str) -> list[str]:
        out = [b]
        while out[-1] in parent:
            out.append(parent[out[-1]])
        return out

    placement: dict[str, str] = {}
    for n in instance.operators:
        brokers = instance.source_brokers(n)
        first = chain(brokers[0])
        others = [set(chain(b)) for b in brokers[1:]]
        placement[n.id] = next(a for a in first if all(a in o for o in others))
    return placement


def place_optimal(instance: PlacementInstance, prefer: Mapping[str, str] | None = None) -> dict[str, str]:
    """A placement of minimum traffic cost: the tree DP of the module docstring.

    ``f_n(b)`` (the cost of n's subtree with n at broker b) is computed bottom-up over the
    operator tree, with ``rate(c) D[b', b]`` minimised over the child's broker b' as a B × B
    array per operator edge; the choices are then read top-down. Among equal-cost brokers
    (relative 1e-9) an operator goes to ``prefer[n]`` (default: its joint point), else to the
    smallest broker id.

    Examples
    --------
    >>> inst = PlacementInstance.from_json({"brokers": ["s", "j", "a", "b"],
    ...     "links": [{"from": x, "to": y, "cost": 1.0} for x, y in
    ...               [("s", "j"), ("j", "s"), ("j", "a"), ("a", "j"), ("j", "b"), ("b", "j")]],
    ...     "sources": [{"leaf": "X", "broker": "a", "rate": 10.0}, {"leaf": "Y", "broker": "b", "rate": 1.0}],
    ...     "subscription": {"id": "c", "broker": "s",
    ...                      "tree": {"id": "n", "op": "and", "children": [{"leaf": "X"}, {"leaf": "Y"}]}}})
    >>> place_optimal(inst)
    {'n': 'a'}
    """
    if prefer is None:
        prefer = place_joint_point(instance)
    d = instance.distances
    idx = instance.index
    f: dict[str, FloatVector] = {}
    for n in reversed(instance.operators):  # children before parents
        acc = np.zeros(len(instance.brokers))
        for c in n.children:
            if isinstance(c, Leaf):
                for s, r in instance.sources[c.name]:
                    acc = acc + _flow_vec(r, d[idx[s]])
            else:
                acc = acc + (f[c.id][:, None] + _flow_vec(instance.rates[c.id], d)).min(axis=0)
        f[n.id] = acc
    root = instance.tree
    total = f[root.id] + _flow_vec(instance.rates[root.id], d[:, idx[instance.subscriber]])
    placement: dict[str, str] = {root.id: _argmin(instance, total, prefer.get(root.id))}
    for n in instance.operators:  # parents before children
        b = idx[placement[n.id]]
        for c in n.children:
            if isinstance(c, Operator):
                vec = f[c.id] + _flow_vec(instance.rates[c.id], d[:, b])
                placement[c.id] = _argmin(instance, vec, prefer.get(c.id))
    return {n.id: placement[n.id] for n in instance.operators}


def _argmin(instance: PlacementInstance, vec: FloatVector, prefer: str | None) -> str:
    best = float(vec.min())
    if not math.isfinite(best):
        raise PlacementError("no placement has a finite cost: some route is missing")  # excluded by from_json
    tied = [instance.brokers[i] for i in np.flatnonzero(vec <= best + _REL_TOL * max(1.0, abs(best)))]
    if prefer is not None and prefer in tied:
        return prefer
    return min(tied)


@dataclass(frozen=True)
class Decision:
    """Why Algorithm 2 put an operator where it did (see :func:`place_adaptive`).

    Attributes
    ----------
    rule : {"inherit", "or", "cost", "revisit"}
        ``inherit``: all children's destinations were this broker; ``or``: an ``or`` whose
        children's destinations differ is split here; ``cost``: an ``and``/``seq`` whose children's
        destinations differ, and this broker had the least overhead; ``revisit``: the destination
        was a broker the subscription had already left (see :func:`place_adaptive`).
    broker : str
        Where the operator was placed.
    directions : tuple of str
        The children's destinations at that broker, in child order.
    overheads : mapping of str to float
        ``cost`` only: each candidate's overhead against this broker (``local(c) - local(broker)``).
    hops : tuple of str
        The brokers the subscription part rooted here visited, ending at ``broker``.
    """

    rule: str
    broker: str
    directions: tuple[str, ...] = ()
    overheads: Mapping[str, float] = field(default_factory=dict)
    hops: tuple[str, ...] = ()


def place_adaptive(instance: PlacementInstance) -> tuple[dict[str, str], dict[str, Decision]]:
    """Algorithm 2 (Li & Jacobsen §4.3), run hop by hop from the subscriber's broker.

    At a broker x holding a subscription part (a *unit*: an operator and its subtree), the
    destination tree is computed bottom-up as in Algorithm 2:

    - a leaf's destination is the SRT's next hop from x towards its sources
      (:meth:`PlacementInstance.next_hop`; x itself for a source at x); when its sources lie in
      different directions, x (the atomic subscription is split here);
    - an operator whose children's destinations are all equal inherits that destination;
    - otherwise an ``or`` gets x (split here), and an ``and``/``seq`` gets the candidate of
      least overhead among x and its children's destinations (n-ary: all of them). The overhead
      is the traffic-based model of §4.2 generalised to docs/reference/placement.md's cost restricted to this node:
      ``local(c) = Σ_{leaf children} Σ_s r_s D[s, c] + Σ_{operator children k} rate(k) D[dest(k), c]
      + rate(n) D[c, t]``, where t is the broker that receives n's output: x for a node inside
      the unit, the parent's broker (the subscriber's for the root) for the unit's own root.
      With unit hops at a joint point this is the paper's ``DS(S2) - DS(S1) + DS(CS)``.
      Ties keep x (the paper moves only to a broker cheaper than the joint point), then the
      smallest id.

    The unit's root then either has destination x, and x *splits* it: the root is placed at x,
    every operator child whose destination is also x is placed at x the same way, and every
    other operator child is forwarded with its subtree to its destination as a new unit (its
    output target is x); or the whole unit is forwarded to its root's destination and the
    algorithm re-runs there ("the dynamic evaluation happens at each broker until a broker
    decides to split", §4.3). The first unit is the whole subscription at the subscriber's
    broker. Leaves need no placement: they are routed to their sources.

    Where the paper is silent: ``seq`` is treated like ``and`` (Definition 2 has no ``seq``);
    an operator child's data are costed as if they came from its destination (the paper
    "estimates the overhead cost at children's destinations"); and a unit never returns to a
    broker it has left: the root's candidates exclude those brokers, and if all its children
    lead back to one, it is split where it is (rule ``revisit``). Algorithm 2 on the paper's
    loop-free SRT never does this; with arbitrary costs the generalised overhead could otherwise
    send a unit back and forth. Each unit visits each broker at most once, so the run ends.

    Returns
    -------
    placement : dict of str to str
        Operator id to broker, in preorder.
    decisions : dict of str to Decision
        Operator id to the rule that placed it.
    """
    placement: dict[str, str] = {}
    decisions: dict[str, Decision] = {}
    # a unit: (its root, the broker it is at, the broker receiving its output, brokers visited)
    units: list[tuple[Operator, str, str, list[str]]] = [
        (instance.tree, instance.subscriber, instance.subscriber, [instance.subscriber])
    ]
    while units:
        root, x, target, visited = units.pop()
        while True:
            dest, notes = _destination_tree(instance, root, x, target, set(visited) - {x})
            d = dest[root.id]
            if d == x:
                break
            if d in visited:
                notes[root.id] = replace(notes[root.id], rule="revisit", broker=x)
                break
            x = d
            visited.append(x)
        # split at x: place the root and every operator below it whose destination is x too
        stack: list[Operator] = [root]
        while stack:
            n = stack.pop()
            placement[n.id] = x
            decisions[n.id] = replace(notes[n.id], broker=x, hops=tuple(visited) if n is root else (x,))
            for c in n.children:
                if isinstance(c, Operator):
                    if dest[c.id] == x:
                        stack.append(c)
                    else:
                        units.append((c, dest[c.id], x, [x, dest[c.id]]))
    return {n.id: placement[n.id] for n in instance.operators}, decisions


def _destination_tree(
    instance: PlacementInstance, root: Operator, x: str, target: str, avoid: set[str]
) -> tuple[dict[str, str], dict[str, Decision]]:
    """Algorithm 2 at broker x for the unit rooted at ``root``: every node's destination."""
    dest: dict[str, str] = {}
    notes: dict[str, Decision] = {}

    def visit(node: Node, t: str) -> str:
        if isinstance(node, Leaf):
            hops = {instance.next_hop(x, s) for s, _ in instance.sources[node.name]}
            hop = hops.pop() if len(hops) == 1 else x
            return x if hop is None else hop
        kids = [visit(c, x) for c in node.children]
        if len(set(kids)) == 1:
            d, note = kids[0], Decision("inherit", kids[0], tuple(kids))
        elif node.op == "or":
            d, note = x, Decision("or", x, tuple(kids))
        else:
            skip = avoid if node is root else set()
            candidates = [x, *sorted({k for k in kids if k != x and k not in skip})]
            local = {c: _local_cost(instance, node, kids, c, t) for c in candidates}
            base = local[x]
            overheads = {c: local[c] - base for c in candidates if c != x}
            best = min(local.values())
            tol = _REL_TOL * max(1.0, abs(best)) if math.isfinite(best) else 0.0
            d = x if local[x] <= best + tol else min(c for c in candidates if local[c] <= best + tol)
            note = Decision("cost", d, tuple(kids), overheads)
        dest[node.id] = d
        notes[node.id] = note
        return d

    visit(root, target)
    return dest, notes


def _local_cost(instance: PlacementInstance, n: Operator, kids: Sequence[str], c: str, t: str) -> float:
    """docs/reference/placement.md's cost restricted to operator n placed at c: its inputs and its output to t."""
    terms: list[float] = []
    for child, k in zip(n.children, kids, strict=True):
        if isinstance(child, Leaf):
            terms.extend(_flow(r, instance.distance(s, c)) for s, r in instance.sources[child.name])
        else:
            terms.append(_flow(instance.rates[child.id], instance.distance(k, c)))
    terms.append(_flow(instance.rates[n.id], instance.distance(c, t)))
    return math.fsum(terms)


# --------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlacementResult:
    """One run of :func:`place`: docs/reference/placement.md's output document via :meth:`to_json`.

    Attributes
    ----------
    method : str
        ``optimal``, ``adaptive`` or ``joint-point``.
    placement : mapping of str to str
        Operator id to broker (preorder).
    cost : float
        Its traffic cost.
    baseline_placement : mapping of str to str
        The joint-point placement.
    baseline_cost : float
        Its traffic cost.
    reasons : mapping of str to str
        Operator id to one sentence explaining the choice.
    """

    method: str
    placement: Mapping[str, str]
    cost: float
    baseline_placement: Mapping[str, str]
    baseline_cost: float
    reasons: Mapping[str, str]

    def to_json(self) -> dict[str, Any]:
        """docs/reference/placement.md's output: method, placement, cost, baseline {placement, cost}, reasons."""
        return {
            "method": self.method,
            "placement": dict(self.placement),
            "cost": _round(self.cost),
            "baseline": {"placement": dict(self.baseline_placement), "cost": _round(self.baseline_cost)},
            "reasons": dict(self.reasons),
        }


def place(instance: PlacementInstance, method: str = "optimal") -> PlacementResult:
    """Place every operator of the subscription by ``method`` (docs/reference/placement.md).

    Parameters
    ----------
    instance : PlacementInstance
        A checked instance.
    method : {"optimal", "adaptive", "joint-point"}
        ``optimal``: minimum traffic cost (:func:`place_optimal`); ``adaptive``: Algorithm 2 of
        Li & Jacobsen §4.3 (:func:`place_adaptive`); ``joint-point``: the baseline
        (:func:`place_joint_point`).

    Returns
    -------
    PlacementResult
        The placement, its cost, the joint-point baseline and a reason per operator.

    Raises
    ------
    PlacementError
        For an unknown method.
    """
    if method not in METHODS:
        raise PlacementError(f"unknown method {method!r}: use one of {', '.join(METHODS)}")
    baseline = place_joint_point(instance)
    decisions: dict[str, Decision] = {}
    if method == "optimal":
        placement = place_optimal(instance, prefer=baseline)
    elif method == "adaptive":
        placement, decisions = place_adaptive(instance)
    else:
        placement = dict(baseline)
    cost = traffic_cost(instance, placement)
    reasons = {
        n.id: _reason(instance, method, n, placement, cost, baseline, decisions.get(n.id)) for n in instance.operators
    }
    return PlacementResult(method, placement, cost, baseline, traffic_cost(instance, baseline), reasons)


def plan_placement(doc: Mapping[str, Any], method: str = "optimal") -> dict[str, Any]:
    """``siftstream plan placement``: docs/reference/placement.md's input document in, its output document out.

    Raises
    ------
    PlacementError
        When the document is not a valid instance or the method is unknown.
    """
    if method not in METHODS:
        raise PlacementError(f"unknown method {method!r}: use one of {', '.join(METHODS)}")
    return place(PlacementInstance.from_json(doc), method).to_json()


# --------------------------------------------------------------------------------------------
# Reasons
# --------------------------------------------------------------------------------------------


def _reason(
    instance: PlacementInstance,
    method: str,
    n: Operator,
    placement: Mapping[str, str],
    cost: float,
    baseline: Mapping[str, str],
    decision: Decision | None,
) -> str:
    at, jp = placement[n.id], baseline[n.id]
    kids = sorted(((instance.rate(c), i, _name(c)) for i, c in enumerate(n.children)), key=lambda k: (-k[0], k[1]))
    others = [f"{_num(r)}/s for {name}" for r, _, name in kids[1:]]
    against = others[0] if len(others) == 1 else ", ".join(others[:-1]) + " and " + others[-1]
    prefix = f"{kids[0][2]} carries {_num(kids[0][0])}/s against {against}"
    saving = traffic_cost(instance, {**placement, n.id: jp}) - cost
    tol = _REL_TOL * max(1.0, abs(cost))
    if at == jp:
        versus = ""
    elif saving > tol:
        versus = f"saves {_num(saving)}/s of traffic"
        if method == "adaptive":
            versus += f" against the joint point {jp}"
    elif saving < -tol:
        versus = f"costs {_num(-saving)}/s more than the joint point {jp}"
    else:
        versus = f"costs the same as the joint point {jp}"

    if method == "joint-point":
        sources = instance.source_brokers(n)
        if len(sources) == 1:
            return f"{prefix}: all its inputs enter at {at}, its joint point"
        return (
            f"{prefix}: {at} is the joint point, where the shortest paths from {_and(sources)} "
            f"to the subscriber's broker {instance.subscriber} meet"
        )
    if method == "optimal":
        if at == jp:
            return f"{prefix}: the joint point {at} is already the cheapest place to detect it"
        return f"{prefix}: detecting at {at} {versus}"
    assert decision is not None
    tail = f"; that {versus}" if versus else ", the joint point"
    if decision.rule == "or":
        why = f"an or is split where its inputs part ways (towards {_and(sorted(set(decision.directions)))}), at {at}"
    elif decision.rule == "inherit":
        why = f"all its inputs meet at {at}"
    elif decision.rule == "revisit":
        why = f"its inputs lead back to {decision.directions[0]}, which it has left, so it is detected at {at}"
    elif decision.overheads:
        alt, extra = min(decision.overheads.items(), key=lambda kv: (kv[1], kv[0]))
        why = (
            f"at {at} its inputs part ways and moving detection to {alt} would add {_num(extra)}/s of traffic, "
            f"so it is detected at {at}"
        )
    else:
        back = sorted({d for d in decision.directions if d != at})
        why = (
            f"at {at} its inputs part ways and {_and(back)} {'is' if len(back) == 1 else 'are'} the way it came, "
            f"so it is detected at {at}"
        )
    if len(decision.hops) > 2:
        why += f" (route {' -> '.join(decision.hops)})"
    return f"{prefix}: {why}{tail}"


# --------------------------------------------------------------------------------------------
# Parsing helpers
# --------------------------------------------------------------------------------------------


def _parse_node(raw: Any, where: str, op_ids: set[str], leaves: dict[str, None]) -> Node:
    if not isinstance(raw, Mapping):
        raise PlacementError(
            f'{where}: a tree node is an object, {{"leaf": name}} or {{"id", "op", "children"}} (got {_kind(raw)})'
        )
    if "leaf" in raw:
        name = raw["leaf"]
        if not isinstance(name, str) or not name:
            raise PlacementError(f"{where}: 'leaf' must be a non-empty string naming the leaf (got {name!r})")
        if "op" in raw or "children" in raw:
            raise PlacementError(f"{where} ({name}): a node is either a leaf or an operator, not both")
        leaves[name] = None
        return Leaf(name)
    if "id" not in raw:
        raise PlacementError(f"{where}: missing 'id': every operator node has an id (or give 'leaf' for a leaf)")
    op_id = _text(raw, "id", where)
    where = f"{where} ({op_id})"
    if "op" not in raw:
        raise PlacementError(f"{where}: missing 'op': one of {', '.join(OPS)}")
    op = raw["op"]
    if op not in OPS:
        raise PlacementError(f"{where}: 'op' must be one of {', '.join(OPS)} (got {op!r})")
    if op_id in op_ids:
        raise PlacementError(f"{where}: duplicate operator id {op_id!r}")
    op_ids.add(op_id)
    children = raw.get("children")
    if not isinstance(children, list) or len(children) < 2:
        raise PlacementError(f"{where}: 'children' must be a list of at least two nodes (got {children!r})")
    kids = tuple(_parse_node(c, f"{where}.children[{i}]", op_ids, leaves) for i, c in enumerate(children))
    return Operator(op_id, op, kids)


def _kind(value: object) -> str:
    return jsondoc.kind(value)


def _list(names: Mapping[str, None] | Sequence[str]) -> str:
    shown = list(names)
    return ", ".join(shown[:10]) + (f", ... ({len(shown)} in all)" if len(shown) > 10 else "")


def _items(doc: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    return jsondoc.items(doc, key, PlacementError, "an instance has brokers, links, sources and subscription")


def _text(item: Mapping[str, Any], key: str, where: str) -> str:
    return jsondoc.text(item, key, where, PlacementError)


def _number(item: Mapping[str, Any], key: str, where: str, lowest: float, strict: bool) -> float:
    return jsondoc.number(item, key, where, PlacementError, lowest, strict)


def _name(node: Node) -> str:
    return node.name if isinstance(node, Leaf) else node.id


def _leaves(node: Node) -> Iterator[Leaf]:
    if isinstance(node, Leaf):
        yield node
    else:
        for c in node.children:
            yield from _leaves(c)


def _node_json(node: Node) -> dict[str, Any]:
    if isinstance(node, Leaf):
        return {"leaf": node.name}
    return {"id": node.id, "op": node.op, "children": [_node_json(c) for c in node.children]}


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= _REL_TOL * max(1.0, abs(a), abs(b))


def _and(names: Sequence[str]) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _num(x: float) -> str:
    """A rate or cost for a sentence: 120, 3.5, 236.5 (up to 6 significant digits, no exponent)."""
    text = f"{x:.6g}"
    if "e" in text:
        text = f"{x:.6f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _round(x: float) -> float:
    """A cost for the output: 12 significant digits, so float noise of the sums does not show."""
    if not math.isfinite(x):
        raise PlacementError("the placement's cost is infinite: some route it needs does not exist")
    return float(f"{x:.12g}")
