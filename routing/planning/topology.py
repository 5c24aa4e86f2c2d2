"""Broker and router topologies: a frozen data model, GT-ITM-style generators, the papers' setups.

Every experiment of SiftStream runs on a network of brokers (and, for some papers, routers,
publishers and subscribers). This module builds those networks and writes them in the shapes the
rest of the project reads:

- the data model: :class:`Node`, :class:`Link` and :class:`Topology`. Generators work on
  undirected graphs, but a :class:`Topology` holds *directed* links: every undirected edge becomes
  two links, one each way, with the same attributes;
- generators, all seeded (``numpy.random.default_rng(seed)``; the same seed gives an equal
  :class:`Topology`) and all connected: :func:`flat_random` (exactly ``m`` edges),
  :func:`pure_random` and :func:`waxman` (GT-ITM's flat models), :func:`transit_stub` (GT-ITM's
  hierarchical model), :func:`tree` and :func:`random_tree`;
- overlays: :func:`application_overlay` (Chen §4.2: logical links between chosen application
  nodes of a physical network) and :func:`attach_clients` (publishers and subscribers hung on
  brokers);
- exporters: :meth:`Topology.to_json` / :meth:`Topology.from_json`,
  :meth:`Topology.topology_records` (Avro ``TopologyElement`` records for the compacted topic
  ``siftstream.topology.v1``), :func:`to_micpice_nodes_links` (docs/reference/distribution.md) and :func:`to_qos_links`
  (docs/reference/qos-predict.md);
- the papers' setups by name, and :func:`generate`, live in :mod:`routing.planning.named_topologies`.

How connectivity is guaranteed
------------------------------
GT-ITM itself regenerates a random graph until it is connected (up to 100 tries). The random
generators here do the same (``max_tries``, default 100); when every try is disconnected they
repair the last draw deterministically, as each docstring says: :func:`flat_random` falls back to
a uniform random spanning tree plus uniformly chosen extra edges, :func:`pure_random`,
:func:`waxman` and the domains of :func:`transit_stub` add one edge per extra component (for
:func:`waxman` the geometrically shortest one).

>>> topo = flat_random(12, 18, seed=3)
>>> len(topo.nodes), len(topo.undirected_edges()), len(topo.links), topo.is_connected()
(12, 18, 36, True)
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np

__all__ = [
    "CLIENT_ROLES",
    "DEFAULT_TS_COSTS",
    "DIST_KINDS",
    "OPYRCHAL_BANDWIDTH_MBPS",
    "ROLES",
    "Link",
    "Node",
    "Topology",
    "application_overlay",
    "attach_clients",
    "element_record",
    "flat_random",
    "pure_random",
    "random_tree",
    "to_micpice_nodes_links",
    "to_qos_links",
    "transit_stub",
    "tree",
    "waxman",
]

ROLES = ("broker", "router", "publisher", "subscriber", "transit", "stub")
"""Node roles: overlay brokers, physical routers (``transit`` and ``stub`` are routers of a
GT-ITM transit-stub graph), and the clients ``publisher`` and ``subscriber``."""

CLIENT_ROLES = ("publisher", "subscriber")

DIST_KINDS = ("exponential", "deterministic", "uniform", "lognormal", "gamma", "empirical")
"""The delay distributions (``DIST``) of docs/reference/qos-predict.md."""

DEFAULT_TS_COSTS: dict[str, float] = {"transit": 10.0, "transit-stub": 5.0, "stub": 1.0, "stub-stub": 5.0}
"""Default cost of each link class of :func:`transit_stub`.

``transit``: between transit nodes (inside a transit domain or between two); ``transit-stub``: a
transit node to a stub domain; ``stub``: inside a stub domain; ``stub-stub``: GT-ITM's optional
extra edges between two stub domains. The values are this project's choice, not a paper's: they
keep the order of GT-ITM's geographic edge lengths (transit domains spread over half of the plane,
stub domains are small), so that long-haul links cost most and local links least.
"""

OPYRCHAL_BANDWIDTH_MBPS: dict[str, float] = {"backbone": 622.0, "intermediate": 155.0, "fringe": 100.0}
"""Link classes of Opyrchal et al. 2000, §3.1 (Fig. 5): backbone links are OC-12 (622 Mbit/s),
intermediate (router to router) links OC-3 (155 Mbit/s), fringe (router to broker) links
high-speed LAN (100 Mbit/s)."""

_Edge = tuple[int, int]


# --------------------------------------------------------------------------------------------
# Data model
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    """One node of a topology.

    Attributes
    ----------
    id : str
        Unique, non-empty name.
    role : str
        One of :data:`ROLES`.
    domain : str or None
        The routing domain it belongs to (GT-ITM transit-stub graphs: ``T0`` for transit domain 0,
        ``S0.1.2`` for stub domain 2 of transit node 1 of domain 0); None for flat graphs.

    >>> Node("b1", "broker")
    Node(id='b1', role='broker', domain=None)
    """

    id: str
    role: str = "broker"
    domain: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"node id must be a non-empty string (got {self.id!r})")
        if self.role not in ROLES:
            raise ValueError(f"node {self.id}: role {self.role!r} is not one of {', '.join(ROLES)}")


@dataclass(frozen=True)
class Link:
    """One directed link ``src -> dst``.

    Attributes
    ----------
    src, dst : str
        Sending and receiving node ids (distinct).
    cost : float
        Cost per unit of event rate sent over the link (Chen et al. 2004, §2.1.1: C(u, v)); finite, >= 0.
    bandwidth_mbps : float or None
        Capacity in Mbit/s, finite and > 0.
    delay_ms : float or None
        One-way propagation delay in milliseconds, finite and >= 0.
    link_class : str or None
        The generator's class of the link (``transit``, ``stub``, ``backbone``, ``fringe``, ...).

    >>> Link("a", "b", 2.0).reversed()
    Link(src='b', dst='a', cost=2.0, bandwidth_mbps=None, delay_ms=None, link_class=None)
    """

    src: str
    dst: str
    cost: float = 1.0
    bandwidth_mbps: float | None = None
    delay_ms: float | None = None
    link_class: str | None = None

    def __post_init__(self) -> None:
        where = f"link {self.src}->{self.dst}"
        if self.src == self.dst:
            raise ValueError(f"{where}: a link must join two different nodes")
        if not _finite(self.cost) or self.cost < 0:
            raise ValueError(f"{where}: cost must be a finite number >= 0 (got {self.cost!r})")
        if self.bandwidth_mbps is not None and (not _finite(self.bandwidth_mbps) or self.bandwidth_mbps <= 0):
            raise ValueError(f"{where}: bandwidth_mbps must be a finite number > 0 (got {self.bandwidth_mbps!r})")
        if self.delay_ms is not None and (not _finite(self.delay_ms) or self.delay_ms < 0):
            raise ValueError(f"{where}: delay_ms must be a finite number >= 0 (got {self.delay_ms!r})")

    def reversed(self) -> Link:
        """The same link in the other direction."""
        return replace(self, src=self.dst, dst=self.src)


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class Topology:
    """A network of nodes joined by directed links.

    Attributes
    ----------
    nodes : tuple of Node
        Node ids are unique.
    links : tuple of Link
        Directed; at most one link per ordered pair of nodes; both ends are nodes of the topology.
        The generators emit every undirected edge as two links, ``u -> v`` then ``v -> u``.
    name : str
        What the topology is (e.g. ``chen-flat-12(seed=0)``).

    >>> topo = Topology((Node("a"), Node("b"), Node("c")),
    ...                 (Link("a", "b", 1.0), Link("b", "a", 1.0), Link("b", "c", 2.0), Link("c", "b", 2.0)), "line")
    >>> topo.neighbors("b"), topo.shortest_paths("a"), topo.is_connected()
    (('a', 'c'), {'a': 0.0, 'b': 1.0, 'c': 3.0}, True)
    """

    nodes: tuple[Node, ...]
    links: tuple[Link, ...]
    name: str = "topology"

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple(self.nodes))
        object.__setattr__(self, "links", tuple(self.links))
        seen: set[str] = set()
        for node in self.nodes:
            if node.id in seen:
                raise ValueError(f"topology {self.name}: node id {node.id!r} appears twice; ids must be unique")
            seen.add(node.id)
        pairs: set[tuple[str, str]] = set()
        for link in self.links:
            for end in (link.src, link.dst):
                if end not in seen:
                    raise ValueError(f"topology {self.name}: link {link.src}->{link.dst} names unknown node {end!r}")
            if (link.src, link.dst) in pairs:
                raise ValueError(f"topology {self.name}: link {link.src}->{link.dst} appears twice")
            pairs.add((link.src, link.dst))

    # --- queries ---------------------------------------------------------------------------

    @cached_property
    def _by_id(self) -> dict[str, Node]:
        return {node.id: node for node in self.nodes}

    @cached_property
    def _out(self) -> dict[str, tuple[Link, ...]]:
        out: dict[str, list[Link]] = {node.id: [] for node in self.nodes}
        for link in self.links:
            out[link.src].append(link)
        return {node: tuple(links) for node, links in out.items()}

    def node(self, node_id: str) -> Node:
        """The node named ``node_id`` (``KeyError`` naming it when there is none)."""
        try:
            return self._by_id[node_id]
        except KeyError:
            raise KeyError(f"topology {self.name} has no node {node_id!r}") from None

    def out_links(self, node_id: str) -> tuple[Link, ...]:
        """The links leaving ``node_id``, in link order."""
        self.node(node_id)
        return self._out[node_id]

    def neighbors(self, node_id: str) -> tuple[str, ...]:
        """The nodes that ``node_id`` has a link to, in link order."""
        return tuple(link.dst for link in self.out_links(node_id))

    def ids(self, *roles: str) -> tuple[str, ...]:
        """Ids of the nodes with one of ``roles`` (all nodes when none is given), in node order."""
        return tuple(n.id for n in self.nodes if not roles or n.role in roles)

    def undirected_edges(self) -> tuple[tuple[str, str], ...]:
        """The node pairs joined by a link in either direction, each once as ``(u, v)`` with ``u < v``, sorted."""
        return tuple(sorted({(min(k.src, k.dst), max(k.src, k.dst)) for k in self.links}))

    def is_symmetric(self) -> bool:
        """Whether every link has a reverse link with the same cost, bandwidth, delay and class."""
        index = {(k.src, k.dst): k for k in self.links}
        return all(index.get((k.dst, k.src)) == k.reversed() for k in self.links)

    def is_connected(self) -> bool:
        """Whether every node can reach every other along directed links (strong connectivity).

        For the symmetric topologies the generators make, this is ordinary connectivity.
        """
        if not self.nodes:
            return True
        reverse: dict[str, list[str]] = {node.id: [] for node in self.nodes}
        for link in self.links:
            reverse[link.dst].append(link.src)
        forward = {node: [k.dst for k in links] for node, links in self._out.items()}
        start = self.nodes[0].id
        return all(len(_reachable(adj, start)) == len(self.nodes) for adj in (forward, reverse))

    def shortest_paths(self, source: str) -> dict[str, float]:
        """Dijkstra's shortest-path costs from ``source`` along directed links.

        Parameters
        ----------
        source : str
            The start node.

        Returns
        -------
        dict of str to float
            The cost of a cheapest path to every node reachable from ``source`` (itself at 0.0),
            in order of increasing cost. Unreachable nodes are absent.
        """
        self.node(source)
        return _dijkstra(self._weighted, source)

    @cached_property
    def _weighted(self) -> dict[str, list[tuple[str, float]]]:
        return {node: [(k.dst, k.cost) for k in links] for node, links in self._out.items()}

    # --- exports -----------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The JSON view: ``{"name", "nodes": [{"id", "role", "domain"?}], "links": [{"from", "to", "cost", ...}]}``.

        Optional fields that are None are left out. Link keys are ``from`` and ``to`` as in the
        offline commands' documents (docs/reference/qos-predict.md, distribution.md and
        placement.md), so the ``nodes`` and ``links`` of a docs/reference/distribution.md
        instance read back with :meth:`from_json`.

        >>> topo = Topology((Node("a"), Node("b", "stub", "S0")), (Link("a", "b", 2.5, link_class="fringe"),), "t")
        >>> doc = topo.to_json()
        >>> doc["nodes"]
        [{'id': 'a', 'role': 'broker'}, {'id': 'b', 'role': 'stub', 'domain': 'S0'}]
        >>> doc["links"]
        [{'from': 'a', 'to': 'b', 'cost': 2.5, 'link_class': 'fringe'}]
        """
        nodes = [
            {"id": n.id, "role": n.role} | ({"domain": n.domain} if n.domain is not None else {}) for n in self.nodes
        ]
        links = []
        for k in self.links:
            entry: dict[str, Any] = {"from": k.src, "to": k.dst, "cost": k.cost}
            for key in ("bandwidth_mbps", "delay_ms", "link_class"):
                value = getattr(k, key)
                if value is not None:
                    entry[key] = value
            links.append(entry)
        return {"name": self.name, "nodes": nodes, "links": links}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Topology:
        """Read the JSON view written by :meth:`to_json` (other keys, e.g. the ``events`` of
        docs/reference/distribution.md, are ignored).

        A node without ``role`` is a broker; a link without ``cost`` costs 1. Raises ``ValueError``
        saying which entry is wrong and why.

        >>> doc = {"nodes": [{"id": "p1", "role": "publisher"}, {"id": "b1", "role": "broker"}],
        ...        "links": [{"from": "p1", "to": "b1", "cost": 1.0}], "events": []}
        >>> Topology.from_json(doc).links
        (Link(src='p1', dst='b1', cost=1.0, bandwidth_mbps=None, delay_ms=None, link_class=None),)
        """
        if not isinstance(doc, Mapping):
            raise ValueError(f"a topology document must be a JSON object (got {type(doc).__name__})")
        nodes: list[Node] = []
        for i, entry in enumerate(_list_of_objects(doc, "nodes")):
            try:
                nodes.append(Node(entry["id"], entry.get("role", "broker"), entry.get("domain")))
            except (KeyError, ValueError) as exc:
                raise ValueError(f"nodes[{i}]: {_why(exc)}") from None
        links: list[Link] = []
        for i, entry in enumerate(_list_of_objects(doc, "links")):
            try:
                links.append(
                    Link(
                        entry["from"],
                        entry["to"],
                        _required_number(entry.get("cost", 1.0), "cost"),
                        _number(entry.get("bandwidth_mbps")),
                        _number(entry.get("delay_ms")),
                        entry.get("link_class"),
                    )
                )
            except (KeyError, ValueError) as exc:
                raise ValueError(f"links[{i}]: {_why(exc)}") from None
        return cls(tuple(nodes), tuple(links), str(doc.get("name", "topology")))

    def topology_records(self, updated_at: int = 0, reliability: float | None = None) -> list[dict[str, Any]]:
        """The topology as Avro ``TopologyElement`` records for the compacted topic ``siftstream.topology.v1``.

        One record per node, then one per directed link (``element_id`` ``from->to``), every field
        of ``schemas/topology_element.avsc`` present. A publisher's or subscriber's ``broker`` is its
        cheapest neighbour that is not a client (ties to the smaller id; None if it has none).
        ``kind`` has no router value: routers (``router``, ``transit``, ``stub``) are written as
        ``broker``.

        Parameters
        ----------
        updated_at : int
            ``updated_at`` of every record, ms since the Unix epoch.
        reliability : float or None
            ``reliability`` of every link record (None: unknown).

        >>> topo = attach_clients(tree(1, 2), publishers=1, subscribers=0)
        >>> [(r["element_id"], r["kind"], r["broker"]) for r in topo.topology_records()]
        [('b0', 'broker', None), ('p0', 'publisher', 'b0'), ('p0->b0', 'link', None), ('b0->p0', 'link', None)]
        """
        records: list[dict[str, Any]] = []
        for node in self.nodes:
            kind = node.role if node.role in CLIENT_ROLES else "broker"
            broker = self._home_broker(node.id) if kind in CLIENT_ROLES else None
            records.append(element_record(node.id, kind, updated_at, broker=broker))
        for k in self.links:
            records.append(
                element_record(
                    f"{k.src}->{k.dst}",
                    "link",
                    updated_at,
                    **{"from": k.src, "to": k.dst},
                    cost=float(k.cost),
                    bandwidth_mbps=None if k.bandwidth_mbps is None else float(k.bandwidth_mbps),
                    reliability=reliability,
                )
            )
        return records

    def _home_broker(self, node_id: str) -> str | None:
        candidates = [(k.cost, k.dst) for k in self._out[node_id] if self._by_id[k.dst].role not in CLIENT_ROLES]
        return min(candidates)[1] if candidates else None


def element_record(element_id: str, kind: str, updated_at: int, **fields: Any) -> dict[str, Any]:
    """A ``TopologyElement`` record (topology topic): every field null or empty but ``fields``."""
    record: dict[str, Any] = {
        "element_id": element_id,
        "kind": kind,
        "broker": None,
        "from": None,
        "to": None,
        "cost": None,
        "bandwidth_mbps": None,
        "reliability": None,
        "forbidden_events": [],
        "updated_at": int(updated_at),
    }
    record.update(fields)
    return record


def _list_of_objects(doc: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = doc.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise ValueError(f"{key} must be a list of JSON objects")
    return value


def _number(value: Any) -> float | None:
    if value is None:
        return None
    if not _finite(value):
        raise ValueError(f"expected a finite number (got {value!r})")
    return float(value)


def _required_number(value: Any, key: str) -> float:
    number = _number(value)
    if number is None:
        raise ValueError(f"{key} must be a number, not null")
    return number


def _why(exc: Exception) -> str:
    return f"missing key {exc.args[0]!r}" if isinstance(exc, KeyError) else str(exc)


def _reachable(adj: Mapping[str, Sequence[str]], start: str) -> set[str]:
    seen = {start}
    stack = [start]
    while stack:
        for nxt in adj[stack.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def _dijkstra(
    adj: Mapping[str, Sequence[tuple[str, float]]], source: str, through: Callable[[str], bool] | None = None
) -> dict[str, float]:
    """Textbook Dijkstra with a binary heap; ``through(v)`` False keeps paths from passing v (v is still reached)."""
    dist: dict[str, float] = {}
    heap: list[tuple[float, str]] = [(0.0, source)]
    while heap:
        d, u = heapq.heappop(heap)
        if u in dist:
            continue
        dist[u] = d
        if u != source and through is not None and not through(u):
            continue
        for v, cost in adj[u]:
            if v not in dist:
                heapq.heappush(heap, (d + cost, v))
    return dist


# --------------------------------------------------------------------------------------------
# Building blocks (all take a numpy Generator; the public functions make it from ``seed``)
# --------------------------------------------------------------------------------------------


def _components(n: int, edges: Iterable[_Edge]) -> list[list[int]]:
    """Connected components of the undirected graph on 0..n-1, each sorted, ordered by smallest node."""
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for u, v in edges:
        parent[find(u)] = find(v)
    groups: dict[int, list[int]] = {}
    for x in range(n):
        groups.setdefault(find(x), []).append(x)
    return sorted(groups.values(), key=lambda g: g[0])


def _join_components(
    n: int, edges: list[_Edge], rng: np.random.Generator, pos: np.ndarray[Any, Any] | None = None
) -> list[_Edge]:
    """Add one edge from each component but the first to the union of those before it.

    The edge joins a uniformly random node on each side, or, when node positions ``pos`` are
    given, the geometrically closest pair.
    """
    comps = _components(n, edges)
    joined = list(comps[0])
    out = list(edges)
    for comp in comps[1:]:
        if pos is None:
            a = joined[int(rng.integers(len(joined)))]
            b = comp[int(rng.integers(len(comp)))]
        else:
            d = np.linalg.norm(pos[joined][:, None, :] - pos[comp][None, :, :], axis=2)
            i, j = np.unravel_index(int(np.argmin(d)), d.shape)
            a, b = joined[int(i)], comp[int(j)]
        out.append((min(a, b), max(a, b)))
        joined.extend(comp)
    return out


def _prufer_tree(n: int, rng: np.random.Generator) -> list[_Edge]:
    """A uniformly random labelled tree on 0..n-1 (Cayley's n^(n-2) trees), decoded from a random Prüfer sequence."""
    if n <= 1:
        return []
    if n == 2:
        return [(0, 1)]
    seq = [int(x) for x in rng.integers(0, n, size=n - 2)]
    degree = [1] * n
    for x in seq:
        degree[x] += 1
    leaves = [i for i in range(n) if degree[i] == 1]
    heapq.heapify(leaves)
    edges: list[_Edge] = []
    for x in seq:
        leaf = heapq.heappop(leaves)
        edges.append((min(leaf, x), max(leaf, x)))
        degree[x] -= 1
        if degree[x] == 1:
            heapq.heappush(leaves, x)
    u, v = heapq.heappop(leaves), heapq.heappop(leaves)
    edges.append((min(u, v), max(u, v)))
    return edges


def _all_pairs(n: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    iu, ju = np.triu_indices(n, 1)
    return iu, ju


def _gnp(n: int, p: float, rng: np.random.Generator) -> list[_Edge]:
    """GT-ITM's pure random graph (edge method 3): each of the n(n-1)/2 pairs is an edge with probability p."""
    iu, ju = _all_pairs(n)
    keep = rng.random(len(iu)) < p
    return [(int(a), int(b)) for a, b in zip(iu[keep], ju[keep], strict=True)]


def _connected_gnp(n: int, p: float, rng: np.random.Generator, max_tries: int) -> list[_Edge]:
    edges: list[_Edge] = []
    for _ in range(max(1, max_tries)):
        edges = _gnp(n, p, rng)
        if len(_components(n, edges)) <= 1:
            return edges
    return _join_components(n, edges, rng)


def _connected_gnm(n: int, m: int, rng: np.random.Generator, max_tries: int) -> list[_Edge]:
    """A connected graph with exactly m edges on 0..n-1 (see :func:`flat_random`)."""
    total = n * (n - 1) // 2
    if n < 1 or not n - 1 <= m <= total:
        raise ValueError(
            f"a connected graph on n={n} nodes has between n-1={n - 1} and n(n-1)/2={total} edges (got m={m})"
        )
    if n == 1:
        return []
    iu, ju = _all_pairs(n)
    for _ in range(max_tries):
        pick = np.sort(rng.choice(total, size=m, replace=False))
        edges = [(int(iu[i]), int(ju[i])) for i in pick]
        if len(_components(n, edges)) == 1:
            return edges
    tree_edges = _prufer_tree(n, rng)
    in_tree = set(tree_edges)
    rest = [i for i in range(total) if (int(iu[i]), int(ju[i])) not in in_tree]
    extra = np.sort(rng.choice(len(rest), size=m - (n - 1), replace=False))
    return sorted(tree_edges + [(int(iu[rest[i]]), int(ju[rest[i]])) for i in extra])


def _costs(rng: np.random.Generator, k: int, cost_range: tuple[float, float], integer_costs: bool) -> list[float]:
    lo, hi = float(cost_range[0]), float(cost_range[1])
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 <= lo <= hi):
        raise ValueError(f"cost_range must be (low, high) with 0 <= low <= high, both finite (got {cost_range!r})")
    if integer_costs:
        if lo != int(lo) or hi != int(hi):
            raise ValueError(f"integer_costs needs whole-number bounds (got cost_range={cost_range!r})")
        return [float(c) for c in rng.integers(int(lo), int(hi), size=k, endpoint=True)]
    return [float(c) for c in rng.uniform(lo, hi, size=k)]


def _undirected(name: str, nodes: Sequence[Node], edges: Iterable[Link]) -> Topology:
    """A topology with each undirected edge ``e`` as the two links ``e`` and ``e.reversed()``."""
    links: list[Link] = []
    for e in edges:
        links.extend((e, e.reversed()))
    return Topology(tuple(nodes), tuple(links), name)


def _flat(
    name: str, ids: Sequence[str], role: str, edges: Sequence[_Edge], costs: Sequence[float], link_class: str | None
) -> Topology:
    nodes = [Node(i, role) for i in ids]
    links = (Link(ids[u], ids[v], c, link_class=link_class) for (u, v), c in zip(edges, costs, strict=True))
    return _undirected(name, nodes, links)


def _ids(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def _check_n(n: int, least: int = 1) -> None:
    if not isinstance(n, int) or n < least:
        raise ValueError(f"n must be an integer >= {least} (got {n!r})")


def _check_prob(name: str, p: float) -> None:
    if not (_finite(p) and 0 <= p <= 1):
        raise ValueError(f"{name} must be a probability in [0, 1] (got {p!r})")


_PREFIX = {"broker": "b", "router": "r", "transit": "t", "stub": "s", "publisher": "p", "subscriber": "s"}


# --------------------------------------------------------------------------------------------
# Flat generators
# --------------------------------------------------------------------------------------------


def flat_random(
    n: int,
    m: int,
    seed: int = 0,
    cost_range: tuple[float, float] = (1, 10),
    integer_costs: bool = True,
    role: str = "broker",
    max_tries: int = 100,
    name: str | None = None,
) -> Topology:
    """A connected flat random graph with exactly ``n`` nodes and ``m`` undirected edges.

    The flat random graph of Chen et al. 2004, §4.3.1 (|V| = 12, |L| = 18), without GT-ITM's
    fixed edge probability: the edge count is exact. Edges: a uniformly random set of ``m`` of the
    n(n-1)/2 node pairs, redrawn until connected (rejection sampling, so the result is uniform
    over connected graphs with m edges, as GT-ITM redraws); after ``max_tries`` disconnected draws,
    a uniformly random spanning tree (random Prüfer sequence) plus ``m - (n-1)`` uniformly chosen
    other pairs. Costs are drawn afterwards, one per edge, uniform in ``cost_range``.

    Parameters
    ----------
    n : int
        Number of nodes (ids ``b0`` ... for brokers, ``r0`` ... for routers), >= 1.
    m : int
        Number of undirected edges, n-1 <= m <= n(n-1)/2.
    seed : int
        Seed of ``numpy.random.default_rng``.
    cost_range : (float, float)
        Inclusive bounds of the uniform edge cost.
    integer_costs : bool
        Whole-number costs (``cost_range`` must then have whole-number bounds).
    role : str
        Role of every node.
    max_tries : int
        Rejection-sampling draws before the spanning-tree fallback.
    name : str, optional
        Name of the topology.

    Returns
    -------
    Topology
        2m directed links, each edge both ways with the same cost.

    >>> topo = flat_random(8, 10, seed=1)
    >>> len(topo.nodes), len(topo.undirected_edges()), topo.is_connected(), topo.is_symmetric()
    (8, 10, True, True)
    >>> flat_random(8, 10, seed=1) == topo, flat_random(8, 10, seed=2) == topo
    (True, False)
    """
    _check_n(n)
    rng = np.random.default_rng(seed)
    edges = _connected_gnm(n, m, rng, max_tries)
    costs = _costs(rng, len(edges), cost_range, integer_costs)
    return _flat(name or f"flat-random(n={n},m={m},seed={seed})", _ids(_PREFIX[role], n), role, edges, costs, None)


def pure_random(
    n: int,
    alpha: float,
    seed: int = 0,
    cost_range: tuple[float, float] = (1, 1),
    integer_costs: bool = True,
    role: str = "broker",
    max_tries: int = 100,
    name: str | None = None,
) -> Topology:
    """GT-ITM's "pure random" flat graph (``geo``, edge method 3): each node pair is an edge with probability ``alpha``.

    Source: the GT-ITM documentation (``itm-doc.txt``; Zegura, Calvert and Bhattacharjee, "How to
    model an internetwork", 1996), used by Chen et al. 2004, §4.3.2 with ``alpha = 0.3``. GT-ITM's
    ``scale`` only places nodes in the plane and does not change the edges of this method. Redrawn
    until connected, up to ``max_tries`` times; then one random edge is added per extra component.

    Parameters
    ----------
    n : int
        Number of nodes, >= 1.
    alpha : float
        Edge probability, in [0, 1].
    seed, cost_range, integer_costs, role, max_tries, name
        As in :func:`flat_random`; the cost defaults to 1 (one hop).

    >>> topo = pure_random(30, 0.3, seed=0)
    >>> len(topo.nodes), topo.is_connected(), 90 < len(topo.undirected_edges()) < 170
    (30, True, True)
    """
    _check_n(n)
    _check_prob("alpha", alpha)
    rng = np.random.default_rng(seed)
    edges = _connected_gnp(n, alpha, rng, max_tries)
    costs = _costs(rng, len(edges), cost_range, integer_costs)
    return _flat(
        name or f"pure-random(n={n},alpha={alpha},seed={seed})", _ids(_PREFIX[role], n), role, edges, costs, None
    )


def waxman(
    n: int,
    alpha: float = 0.4,
    beta: float = 0.1,
    seed: int = 0,
    hops: bool = False,
    role: str = "broker",
    max_tries: int = 100,
    name: str | None = None,
) -> Topology:
    """GT-ITM's Waxman flat graph (``geo`` with edge method 1; Waxman 1988).

    The ``n`` nodes are placed uniformly at random in the unit square; each pair at Euclidean
    distance d is an edge with probability ``alpha * exp(-d / (beta * L))``, where L = sqrt(2) is
    the largest possible distance (GT-ITM: scale * sqrt(2)). Redrawn (positions and edges) until
    connected, up to ``max_tries`` times; then each extra component is joined to the rest by its
    geometrically shortest edge.

    Parameters
    ----------
    n : int
        Number of nodes, >= 1.
    alpha : float
        Maximal edge probability, in [0, 1]; larger means more edges.
    beta : float
        > 0; larger means more long edges relative to short ones.
    seed : int
        Seed of ``numpy.random.default_rng``.
    hops : bool
        Cost 1 per link instead of the Euclidean length (in unit-square units).
    role, max_tries, name
        As in :func:`flat_random`.

    >>> topo = waxman(40, alpha=0.6, beta=0.2, seed=4)
    >>> len(topo.nodes), topo.is_connected(), all(0 < k.cost <= 2 ** 0.5 for k in topo.links)
    (40, True, True)
    """
    _check_n(n)
    _check_prob("alpha", alpha)
    if not (_finite(beta) and beta > 0):
        raise ValueError(f"beta must be a finite number > 0 (got {beta!r})")
    rng = np.random.default_rng(seed)
    iu, ju = _all_pairs(n)
    big_l = math.sqrt(2.0)
    pos = np.zeros((n, 2))
    edges: list[_Edge] = []
    for _ in range(max(1, max_tries)):
        pos = rng.random((n, 2))
        d = np.linalg.norm(pos[iu] - pos[ju], axis=1)
        keep = rng.random(len(iu)) < alpha * np.exp(-d / (beta * big_l))
        edges = [(int(a), int(b)) for a, b in zip(iu[keep], ju[keep], strict=True)]
        if len(_components(n, edges)) <= 1:
            break
    else:
        edges = _join_components(n, edges, rng, pos)
    costs = [1.0 if hops else float(np.linalg.norm(pos[u] - pos[v])) for u, v in edges]
    label = name or f"waxman(n={n},alpha={alpha},beta={beta},seed={seed})"
    return _flat(label, _ids(_PREFIX[role], n), role, edges, costs, None)


# --------------------------------------------------------------------------------------------
# Transit-stub
# --------------------------------------------------------------------------------------------


def transit_stub(
    transit_domains: int = 1,
    transit_nodes_per_domain: int = 4,
    stubs_per_transit_node: int = 3,
    stub_nodes: int = 8,
    seed: int = 0,
    top_alpha: float = 0.5,
    transit_alpha: float = 0.6,
    stub_alpha: float = 0.42,
    extra_transit_stub: int = 0,
    extra_stub_stub: int = 0,
    costs: Mapping[str, float] | None = None,
    max_tries: int = 100,
    name: str | None = None,
) -> Topology:
    """A transit-stub graph in the style of GT-ITM (Zegura, Calvert and Bhattacharjee 1996; ``ts``).

    Construction, as GT-ITM's ``ts.c`` does it, with fixed instead of randomised domain sizes:

    1. a connected pure random graph over the ``transit_domains`` domains (edge probability
       ``top_alpha``); each of its edges joins a random transit node of each of the two domains;
    2. each transit domain: a connected pure random graph over its ``transit_nodes_per_domain``
       transit nodes (``transit_alpha``);
    3. each transit node gets ``stubs_per_transit_node`` stub domains, each a connected pure
       random graph over ``stub_nodes`` stub nodes (``stub_alpha``), attached by one edge from the
       transit node to a random node of the stub domain;
    4. ``extra_transit_stub`` extra edges between a random transit node and a random stub node not
       yet adjacent, and ``extra_stub_stub`` between random nodes of two different stub domains.

    Every random graph is redrawn until connected (up to ``max_tries``; then one random edge per
    extra component is added), so the whole graph is connected. Node count:
    ``transit_domains * transit_nodes_per_domain * (1 + stubs_per_transit_node * stub_nodes)``.

    Ids and domains: transit node k of domain d is ``t{d}.{k}`` in domain ``T{d}``; node i of stub
    domain j of that transit node is ``s{d}.{k}.{j}.{i}`` in domain ``S{d}.{k}.{j}`` (GT-ITM names
    them ``T:d.k`` and ``S:d.k/j.i``). Roles are ``transit`` and ``stub``.

    Link classes and costs (``costs``, default :data:`DEFAULT_TS_COSTS`): ``transit`` (transit to
    transit, within or between domains) high, ``transit-stub`` medium, ``stub`` (within a stub
    domain) low, ``stub-stub`` (extra edges between stub domains) medium.

    Parameters
    ----------
    transit_domains, transit_nodes_per_domain, stubs_per_transit_node, stub_nodes : int
        Sizes, each >= 1 (``stubs_per_transit_node`` may be 0).
    seed : int
        Seed of ``numpy.random.default_rng``.
    top_alpha, transit_alpha, stub_alpha : float
        Edge probabilities of the top-level, transit-domain and stub-domain graphs.
    extra_transit_stub, extra_stub_stub : int
        GT-ITM's ``#t-s edges`` and ``#s-s edges``.
    costs : mapping of str to float, optional
        Cost of each link class; missing classes take the default.
    max_tries : int
        Draws per random graph before the repair.
    name : str, optional
        Name of the topology.

    >>> topo = transit_stub(2, 3, 2, 4, seed=5)
    >>> len(topo.nodes), len(topo.ids("transit")), topo.is_connected()
    (54, 6, True)
    >>> sorted({k.link_class for k in topo.links})
    ['stub', 'transit', 'transit-stub']
    """
    sizes = {
        "transit_domains": transit_domains,
        "transit_nodes_per_domain": transit_nodes_per_domain,
        "stub_nodes": stub_nodes,
    }
    for key, value in sizes.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{key} must be an integer >= 1 (got {value!r})")
    for key, value in {
        "stubs_per_transit_node": stubs_per_transit_node,
        "extra_transit_stub": extra_transit_stub,
        "extra_stub_stub": extra_stub_stub,
    }.items():
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"{key} must be an integer >= 0 (got {value!r})")
    for key, p in (("top_alpha", top_alpha), ("transit_alpha", transit_alpha), ("stub_alpha", stub_alpha)):
        _check_prob(key, p)
    cost = {**DEFAULT_TS_COSTS, **(costs or {})}
    unknown = sorted(set(cost) - set(DEFAULT_TS_COSTS))
    if unknown:
        raise ValueError(f"unknown link class {unknown[0]!r} in costs; classes: {', '.join(DEFAULT_TS_COSTS)}")
    rng = np.random.default_rng(seed)

    nodes: list[Node] = []
    edges: list[tuple[str, str, str]] = []  # (u, v, class)
    transit: list[list[str]] = []  # transit node ids per domain
    stub_domains: list[list[str]] = []
    for d in range(transit_domains):
        ids = [f"t{d}.{k}" for k in range(transit_nodes_per_domain)]
        transit.append(ids)
        nodes.extend(Node(i, "transit", f"T{d}") for i in ids)
        edges.extend((ids[u], ids[v], "transit") for u, v in _connected_gnp(len(ids), transit_alpha, rng, max_tries))
    for d, k in _connected_gnp(transit_domains, top_alpha, rng, max_tries):
        a = transit[d][int(rng.integers(transit_nodes_per_domain))]
        b = transit[k][int(rng.integers(transit_nodes_per_domain))]
        edges.append((a, b, "transit"))
    for d in range(transit_domains):
        for k in range(transit_nodes_per_domain):
            for j in range(stubs_per_transit_node):
                domain = f"S{d}.{k}.{j}"
                ids = [f"s{d}.{k}.{j}.{i}" for i in range(stub_nodes)]
                stub_domains.append(ids)
                nodes.extend(Node(i, "stub", domain) for i in ids)
                edges.extend(
                    (ids[u], ids[v], "stub") for u, v in _connected_gnp(stub_nodes, stub_alpha, rng, max_tries)
                )
                edges.append((transit[d][k], ids[int(rng.integers(stub_nodes))], "transit-stub"))
    edges.extend(_extra_edges(rng, transit, stub_domains, extra_transit_stub, extra_stub_stub, edges))
    label = name or (
        f"transit-stub(T={transit_domains},Nt={transit_nodes_per_domain},K={stubs_per_transit_node},"
        f"Ns={stub_nodes},seed={seed})"
    )
    return _undirected(label, nodes, (Link(u, v, cost[c], link_class=c) for u, v, c in edges))


def _extra_edges(
    rng: np.random.Generator,
    transit: list[list[str]],
    stub_domains: list[list[str]],
    n_ts: int,
    n_ss: int,
    existing: list[tuple[str, str, str]],
) -> list[tuple[str, str, str]]:
    """GT-ITM's extra transit-stub and stub-stub edges, avoiding pairs already joined."""
    if (n_ts or n_ss) and not stub_domains:
        raise ValueError("extra transit-stub or stub-stub edges need stub domains (stubs_per_transit_node >= 1)")
    if n_ss and len(stub_domains) < 2:
        raise ValueError("extra stub-stub edges need at least two stub domains")
    taken = {frozenset((u, v)) for u, v, _ in existing}
    all_transit = [t for dom in transit for t in dom]
    all_stub = [s for dom in stub_domains for s in dom]
    if n_ts > len(all_transit) * len(all_stub) - sum(1 for *_, c in existing if c == "transit-stub"):
        raise ValueError(f"extra_transit_stub={n_ts} is more than the transit-stub pairs left")
    out: list[tuple[str, str, str]] = []
    while len(out) < n_ts:
        a = all_transit[int(rng.integers(len(all_transit)))]
        b = all_stub[int(rng.integers(len(all_stub)))]
        if frozenset((a, b)) not in taken:
            taken.add(frozenset((a, b)))
            out.append((a, b, "transit-stub"))
    tries = 0
    added = 0
    while added < n_ss:
        tries += 1
        if tries > 1000 * (n_ss + 1):
            raise ValueError(f"could not place extra_stub_stub={n_ss} edges between distinct stub domains")
        x, y = (int(i) for i in rng.choice(len(stub_domains), size=2, replace=False))
        a = stub_domains[x][int(rng.integers(len(stub_domains[x])))]
        b = stub_domains[y][int(rng.integers(len(stub_domains[y])))]
        if frozenset((a, b)) not in taken:
            taken.add(frozenset((a, b)))
            out.append((a, b, "stub-stub"))
            added += 1
    return out


# --------------------------------------------------------------------------------------------
# Trees
# --------------------------------------------------------------------------------------------


def tree(
    n: int,
    branching: int = 2,
    seed: int = 0,
    cost_range: tuple[float, float] = (1, 1),
    integer_costs: bool = True,
    role: str = "broker",
    name: str | None = None,
) -> Topology:
    """The complete ``branching``-ary tree on ``n`` nodes in heap order: node i's parent is ``(i - 1) // branching``.

    Levels fill left to right, so the tree is balanced (depths differ by at most one). The shape
    is fixed; ``seed`` only draws the edge costs (uniform in ``cost_range``, default 1).

    >>> topo = tree(7, 2)
    >>> topo.neighbors("b0"), topo.neighbors("b2"), len(topo.undirected_edges())
    (('b1', 'b2'), ('b0', 'b5', 'b6'), 6)
    """
    _check_n(n)
    if not isinstance(branching, int) or branching < 1:
        raise ValueError(f"branching must be an integer >= 1 (got {branching!r})")
    rng = np.random.default_rng(seed)
    edges = [((i - 1) // branching, i) for i in range(1, n)]
    costs = _costs(rng, len(edges), cost_range, integer_costs)
    return _flat(name or f"tree(n={n},branching={branching})", _ids(_PREFIX[role], n), role, edges, costs, None)


def random_tree(
    n: int,
    seed: int = 0,
    cost_range: tuple[float, float] = (1, 1),
    integer_costs: bool = True,
    role: str = "broker",
    name: str | None = None,
) -> Topology:
    """A uniformly random labelled tree on ``n`` nodes: from a random Prüfer sequence, all n^(n-2) trees equally likely.

    >>> topo = random_tree(10, seed=7)
    >>> len(topo.undirected_edges()), topo.is_connected()
    (9, True)
    """
    _check_n(n)
    rng = np.random.default_rng(seed)
    edges = sorted(_prufer_tree(n, rng))
    costs = _costs(rng, len(edges), cost_range, integer_costs)
    return _flat(name or f"random-tree(n={n},seed={seed})", _ids(_PREFIX[role], n), role, edges, costs, None)


# --------------------------------------------------------------------------------------------
# Overlays and clients
# --------------------------------------------------------------------------------------------


def application_overlay(
    physical: Topology,
    publishers: int,
    subscribers: int,
    brokers: int,
    seed: int = 0,
    chosen: Sequence[str] | None = None,
    name: str | None = None,
) -> Topology:
    """The application-level network that Chen et al. 2004, §4.2 build over a physical network.

    Picks ``publishers + subscribers + brokers`` distinct physical nodes uniformly at random
    (the first become publishers ``p0`` ..., the next subscribers ``s0`` ..., the rest brokers
    ``b0`` ...; each keeps its physical node's domain) and joins application nodes u and v by a
    logical link iff a cheapest physical path from u to v passes through no other application node;
    the link's cost is that path's cost (Chen: "the length of the shortest path between u and v in
    the underlying G_P"). When every physical node is chosen and all costs are 1, the overlay is the
    physical graph itself (Chen §4.3.1: G = G_P). A connected physical network gives a connected
    overlay.

    Parameters
    ----------
    physical : Topology
        A connected network; its links' costs are the physical costs C_P.
    publishers, subscribers, brokers : int
        How many application nodes of each role (|P|, |S|, |B|).
    seed : int
        Seed of ``numpy.random.default_rng``.
    chosen : sequence of str, optional
        The physical ids of the application nodes instead of a random choice: publishers first,
        then subscribers, then brokers (``publishers + subscribers + brokers`` distinct ids).
    name : str, optional
        Name of the overlay.

    >>> over = application_overlay(tree(7, 2), publishers=2, subscribers=2, brokers=1, seed=0)
    >>> len(over.nodes), over.is_connected(), len(over.ids("publisher"))
    (5, True, 2)
    """
    counts = {"publishers": publishers, "subscribers": subscribers, "brokers": brokers}
    for key, value in counts.items():
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"{key} must be an integer >= 0 (got {value!r})")
    total = publishers + subscribers + brokers
    if total > len(physical.nodes):
        raise ValueError(
            f"{total} application nodes asked for, but {physical.name} has only {len(physical.nodes)} nodes"
        )
    if not physical.is_connected():
        raise ValueError(f"{physical.name} is not connected; an overlay needs a connected physical network")
    if chosen is None:
        rng = np.random.default_rng(seed)
        picked = [physical.nodes[int(i)] for i in rng.permutation(len(physical.nodes))[:total]]
    else:
        picked = [physical.node(i) for i in chosen]
        if len(picked) != total or len(set(chosen)) != total:
            raise ValueError(f"chosen must name {total} distinct nodes of {physical.name} (got {len(picked)})")
    roles = ["publisher"] * publishers + ["subscriber"] * subscribers + ["broker"] * brokers
    counter = dict.fromkeys(("publisher", "subscriber", "broker"), 0)
    new_id: dict[str, str] = {}
    nodes: list[Node] = []
    for phys, role in zip(picked, roles, strict=True):
        new_id[phys.id] = f"{_PREFIX[role]}{counter[role]}"
        counter[role] += 1
        nodes.append(Node(new_id[phys.id], role, phys.domain))
    links: list[Link] = []
    weighted = physical._weighted
    for phys in picked:
        full = _dijkstra(weighted, phys.id)
        local = _dijkstra(weighted, phys.id, through=lambda v: v not in new_id)
        for other in picked:
            if other.id == phys.id or other.id not in local:
                continue
            if math.isclose(local[other.id], full[other.id], rel_tol=1e-12, abs_tol=1e-12):
                links.append(Link(new_id[phys.id], new_id[other.id], full[other.id], link_class="logical"))
    label = name or f"overlay({physical.name},P={publishers},S={subscribers},B={brokers},seed={seed})"
    return Topology(tuple(nodes), tuple(links), label)


def attach_clients(
    topology: Topology,
    publishers: int,
    subscribers: int,
    seed: int = 0,
    at_roles: Sequence[str] = ("broker",),
    cost: float = 1.0,
    name: str | None = None,
) -> Topology:
    """``topology`` with publishers and subscribers added, each linked (both ways) to one uniformly random broker.

    For docs/reference/qos-predict.md systems (each client has one home broker,
    Pongthawornkamol et al. §2.1) and docs/reference/distribution.md
    MICPICE instances. New ids are ``p{i}`` and ``s{i}``, numbered from 0 and skipping ids already
    taken; new links have class ``access``.

    Parameters
    ----------
    topology : Topology
        The broker network.
    publishers, subscribers : int
        How many of each to add.
    seed : int
        Seed of ``numpy.random.default_rng``; home brokers are drawn independently, publishers first.
    at_roles : sequence of str
        Roles a home broker may have (``("stub",)`` for a bare transit-stub graph).
    cost : float
        Cost of each access link.
    name : str, optional
        Name of the result.

    >>> topo = attach_clients(tree(3, 2), publishers=1, subscribers=2, seed=0)
    >>> topo.ids("publisher"), topo.ids("subscriber"), len(topo.links)
    (('p0',), ('s0', 's1'), 10)
    """
    for key, value in (("publishers", publishers), ("subscribers", subscribers)):
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"{key} must be an integer >= 0 (got {value!r})")
    homes = topology.ids(*at_roles)
    if not homes and publishers + subscribers:
        raise ValueError(f"{topology.name} has no node with role {' or '.join(at_roles)} to attach clients to")
    rng = np.random.default_rng(seed)
    taken = {node.id for node in topology.nodes}
    nodes = list(topology.nodes)
    links = list(topology.links)
    for role, count in (("publisher", publishers), ("subscriber", subscribers)):
        index = 0
        for _ in range(count):
            while f"{_PREFIX[role]}{index}" in taken:
                index += 1
            client = f"{_PREFIX[role]}{index}"
            taken.add(client)
            home = topology.node(homes[int(rng.integers(len(homes)))])
            nodes.append(Node(client, role, home.domain))
            link = Link(client, home.id, cost, link_class="access")
            links.extend((link, link.reversed()))
    return Topology(
        tuple(nodes), tuple(links), name or f"{topology.name}+clients(P={publishers},S={subscribers},seed={seed})"
    )


# --------------------------------------------------------------------------------------------
# Exporters for the offline commands
# --------------------------------------------------------------------------------------------


def to_micpice_nodes_links(topology: Topology) -> dict[str, list[dict[str, Any]]]:
    """The ``nodes`` and ``links`` of a MICPICE instance (docs/reference/distribution.md; Chen et al.
    2004, §2.1.1: G = (V, L, C)).

    Every node becomes ``{"id", "role"}`` with role ``publisher``, ``subscriber`` or ``broker``
    (routers, ``transit`` and ``stub`` nodes are written as brokers: in MICPICE every other node
    forwards); every directed link becomes ``{"from", "to", "cost"}``. Links are kept as they are
    (the model lets events cross any node; merge with ``events``, ``interests`` and ``forbidden``
    to make an instance).

    >>> part = to_micpice_nodes_links(attach_clients(tree(1, 2), 1, 0))
    >>> part["nodes"]
    [{'id': 'b0', 'role': 'broker'}, {'id': 'p0', 'role': 'publisher'}]
    >>> part["links"]
    [{'from': 'p0', 'to': 'b0', 'cost': 1.0}, {'from': 'b0', 'to': 'p0', 'cost': 1.0}]
    """
    nodes = [{"id": n.id, "role": n.role if n.role in CLIENT_ROLES else "broker"} for n in topology.nodes]
    links = [{"from": k.src, "to": k.dst, "cost": float(k.cost)} for k in topology.links]
    return {"nodes": nodes, "links": links}


def to_qos_links(
    topology: Topology,
    reliability: float | Mapping[tuple[str, str], float] = 0.99,
    delay_ms_dist: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The ``links`` list of a reliability-prediction system (docs/reference/qos-predict.md;
    Pongthawornkamol et al., §2-§4).

    Links in the direction events flow: links into a publisher and out of a subscriber are left
    out (a client has one home broker and does not forward). Each entry is
    ``{"from", "to", "reliability", "delay_ms": DIST}``.

    Parameters
    ----------
    topology : Topology
        An acyclic broker network with its clients (docs/reference/qos-predict.md assumes a tree).
    reliability : float or mapping of (from, to) to float
        Probability that a transmission arrives, in [0, 1]: one for every link, or per link (every
        exported link must be present).
    delay_ms_dist : mapping, optional
        One docs/reference/qos-predict.md ``DIST`` for every link (e.g. ``{"kind": "exponential", "mean": 20}``); when
        None, each link's own ``delay_ms`` as ``{"kind": "deterministic", "value": delay_ms}``.

    >>> links = to_qos_links(attach_clients(tree(1, 2), 1, 1), 0.9, {"kind": "exponential", "mean": 5})
    >>> [(k["from"], k["to"]) for k in links], links[0]["reliability"], links[0]["delay_ms"]
    ([('p0', 'b0'), ('b0', 's0')], 0.9, {'kind': 'exponential', 'mean': 5})
    """
    if delay_ms_dist is not None and delay_ms_dist.get("kind") not in DIST_KINDS:
        raise ValueError(
            f"delay_ms_dist kind must be one of {', '.join(DIST_KINDS)} (got {delay_ms_dist.get('kind')!r})"
        )
    out: list[dict[str, Any]] = []
    for k in topology.links:
        if topology.node(k.dst).role == "publisher" or topology.node(k.src).role == "subscriber":
            continue
        where = f"link {k.src}->{k.dst}"
        if isinstance(reliability, Mapping):
            if (k.src, k.dst) not in reliability:
                raise ValueError(f"{where}: no reliability given for it")
            r = reliability[(k.src, k.dst)]
        else:
            r = reliability
        if not (_finite(r) and 0 <= r <= 1):
            raise ValueError(f"{where}: reliability must be in [0, 1] (got {r!r})")
        if delay_ms_dist is not None:
            dist = dict(delay_ms_dist)
        elif k.delay_ms is not None:
            dist = {"kind": "deterministic", "value": float(k.delay_ms)}
        else:
            raise ValueError(f"{where}: has no delay_ms; pass delay_ms_dist")
        out.append({"from": k.src, "to": k.dst, "reliability": float(r), "delay_ms": dist})
    return out
