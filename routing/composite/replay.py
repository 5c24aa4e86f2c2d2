"""Trace-driven replay of composite detection on a broker overlay (Li & Jacobsen §4).

``routing.composite.placement`` decides where each operator of a composite subscription is detected from
a *model* (docs/reference/placement.md's traffic cost over estimated rates). This module measures a placement
instead: it replays the component events of many composite subscriptions over the overlay and
counts what actually crosses links, and how long detections take to reach the subscriber.

The model of the replay (one source broker per leaf, as in the benchmark):

- every event of leaf ℓ (an operator n's leaf child) travels from ℓ's source broker to ``P[n]``,
  n's broker, along a shortest path: it is sent over ``H[src, P[n]]`` links (transmissions) and
  arrives ``Δ[src, P[n]]`` ms after its publication;
- every detection of operator c (an operator n's child) travels from ``P[c]`` to ``P[n]``; every
  detection of the root travels from ``P[root]`` to the subscriber's broker;
- which detections there are comes from :class:`routing.composite.detection.CompositeDetector` with event
  time = publication time, so it does not depend on the placement (checked by
  :func:`detect_in_arrival_order`). A detection is made at its broker when its last input has
  arrived there: ``wall_n = max over inputs of (input's time at its broker + dly[that broker, P[n]])``,
  a leaf input's time being its publication time. The watermark and processing wait is left
  out: this is the network part of the delay.
- the *detection delay* of a root detection is the time it reaches the subscriber's broker minus
  the publication time of its last component.

Symbols: ``D[u, v]`` the shortest-path cost (docs/reference/placement.md's distance), ``H[u, v]`` the number of links
and ``Δ[u, v]`` the summed link delay (ms) of the routing path u -> v (the shortest-path tree
of scipy's Dijkstra; with unit costs every shortest path has ``H = D``). The traffic of a replay
weighted by link cost is ``Σ_messages D[from, to]``: with the observed rates in place of the
estimated ones it is docs/reference/placement.md's ``traffic_cost`` exactly (see :func:`replay`).

Every operator n of a composite ``s`` is registered in the detector as its own subscription
``"s/n"`` whose tree is n's subtree: an operator's detections do not depend on what its parent
does with them (the parent only consumes them), so the subtree's detections are n's outputs,
and ``"s/n1"``'s are the composite's detections.

Examples
--------
>>> from routing.composite.trees import parse_composite
>>> import numpy as np
>>> net = Network.from_links(["a", "b", "c"], [("a", "b", 1.0, 5.0), ("b", "a", 1.0, 5.0),
...                                             ("b", "c", 1.0, 5.0), ("c", "b", 1.0, 5.0)])
>>> tree = parse_composite({"op": "and", "within_ms": 100, "children": ["x = 1", "y = 1"]})
>>> comp = Composite("cs", tree, "c", {"L1": "a", "L2": "b"},
...                  {"L1": np.array([0, 500]), "L2": np.array([30])})
>>> outputs = detect([comp])
>>> res = replay(net, [comp], outputs, [{"n1": "b"}])
>>> res.transmissions.tolist(), res.delays_ms.tolist()  # 2 x a->b, 1 detection b->c
([3], [5.0])
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra

from routing.composite.detection import CompositeDetector, DetectionRecord, DetectorStats
from routing.composite.trees import CompositeTree, Leaf, Operator, parse_composite

__all__ = [
    "Composite",
    "Network",
    "Outputs",
    "Replay",
    "component_matches",
    "detect",
    "detect_in_arrival_order",
    "replay",
    "subtree_doc",
]

FloatMatrix = np.ndarray[Any, np.dtype[np.float64]]
IntMatrix = np.ndarray[Any, np.dtype[np.int64]]
IntVector = np.ndarray[Any, np.dtype[np.int64]]


# --------------------------------------------------------------------------------------------
# The overlay
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Network:
    """All-pairs routing matrices of a broker overlay, indexed like ``brokers``.

    Attributes
    ----------
    brokers : tuple of str
        Broker ids (matrix index = position).
    cost : ndarray
        ``D[u, v]``: shortest-path cost over the directed links (inf when unreachable).
    hops : ndarray of int
        ``H[u, v]``: links on the routing path u -> v (-1 when unreachable).
    delay_ms : ndarray
        ``Δ[u, v]``: summed ``delay_ms`` of those links (inf when unreachable).
    """

    brokers: tuple[str, ...]
    cost: FloatMatrix
    hops: IntMatrix
    delay_ms: FloatMatrix

    @classmethod
    def from_links(cls, brokers: Sequence[str], links: Iterable[tuple[str, str, float, float]]) -> Network:
        """Build the matrices from directed links ``(src, dst, cost, delay_ms)`` (cost > 0).

        The routing path u -> v is the one in the shortest-path tree of u that scipy's Dijkstra
        returns; ``H`` and ``Δ`` are summed along it from u outwards in order of distance.

        >>> net = Network.from_links(["a", "b", "c"], [("a", "b", 2.0, 1.0), ("b", "c", 1.0, 4.0)])
        >>> net.cost[0].tolist(), net.hops[0].tolist(), net.delay_ms[0].tolist()
        ([0.0, 2.0, 3.0], [0, 1, 2], [0.0, 1.0, 5.0])
        >>> net.hops[2].tolist()  # c reaches nothing
        [-1, -1, 0]
        """
        brokers = tuple(brokers)
        index = {b: i for i, b in enumerate(brokers)}
        n = len(brokers)
        link_cost = np.full((n, n), np.inf)
        link_delay = np.zeros((n, n))
        for src, dst, c, delay in links:
            if not c > 0:
                raise ValueError(f"link {src}->{dst}: cost must be > 0 (got {c!r})")
            link_cost[index[src], index[dst]] = c
            link_delay[index[src], index[dst]] = delay
        rows, cols = np.nonzero(np.isfinite(link_cost))
        graph = csr_matrix((link_cost[rows, cols], (rows, cols)), shape=(n, n))
        dist, pred = dijkstra(graph, directed=True, return_predecessors=True)
        hops = np.full((n, n), -1, dtype=np.int64)
        delay_ms = np.full((n, n), np.inf)
        for u in range(n):
            hops[u, u] = 0
            delay_ms[u, u] = 0.0
            for v in np.argsort(dist[u], kind="stable"):  # a predecessor is nearer than its successor
                p = pred[u, v]
                if v == u or p < 0:
                    continue
                hops[u, v] = hops[u, p] + 1
                delay_ms[u, v] = delay_ms[u, p] + link_delay[p, v]
        return cls(brokers, np.asarray(dist, dtype=np.float64), hops, delay_ms)

    def index(self, broker: str) -> int:
        """The matrix index of ``broker``."""
        return self.brokers.index(broker)


# --------------------------------------------------------------------------------------------
# The workload and its detections
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Composite:
    """One composite subscription with its event streams.

    Attributes
    ----------
    subscription_id : str
        Its id (no ``/``: the detector keys are ``"id/n1"``, ...).
    tree : CompositeTree
        The parsed tree (leaf ids ``L1``, ... name the streams).
    subscriber : str
        The subscriber's broker.
    sources : mapping of str to str
        Leaf id to its source broker.
    times_ms : mapping of str to ndarray of int
        Leaf id to the publication times (ms) of its matching events, sorted.
    """

    subscription_id: str
    tree: CompositeTree
    subscriber: str
    sources: Mapping[str, str]
    times_ms: Mapping[str, IntVector]


def subtree_doc(node: Operator) -> dict[str, object]:
    """The composite document (docs/reference/composites.md) of the subtree rooted at ``node``.

    >>> tree = parse_composite({"op": "and", "within_ms": 9,
    ...                         "children": ["a = 1", {"op": "or", "children": ["b = 1", "c = 1"]}]})
    >>> subtree_doc(tree.root.children[1])
    {'op': 'or', 'children': ['b = 1', 'c = 1']}
    """
    doc: dict[str, object] = {"op": node.op}
    if node.within_ms is not None:
        doc["within_ms"] = node.within_ms
    doc["children"] = [c.text if isinstance(c, Leaf) else subtree_doc(c) for c in node.children]
    return doc


def _leaves_under(node: Operator | Leaf) -> list[str]:
    if isinstance(node, Leaf):
        return [node.id]
    return [leaf for c in node.children for leaf in _leaves_under(c)]


def _parents(tree: CompositeTree) -> dict[str, Operator]:
    """Node id (leaf or operator) to its parent operator."""
    return {c.id: n for n in tree.operators() for c in n.children}


@dataclass(frozen=True)
class _Matches:
    """The component matches of a workload, one row per (event, operator above its leaf)."""

    rows: list[tuple[str, str, str, int]]  # (detector subscription id, subtree leaf id, event id, time)
    row_event: IntVector  # global event index of each row
    pub_ms: IntVector  # per global event: publication time
    composite: IntVector  # per global event: composite index
    leaf: list[str]  # per global event: leaf id


def component_matches(composites: Sequence[Composite]) -> _Matches:
    """Every event of every leaf, as component matches of each ``"s/n"`` whose subtree holds the leaf.

    Event ids are global event indices (``"0"``, ``"1"``, ...), numbered composite by
    composite, leaf by leaf (document order), in time order.
    """
    rows: list[tuple[str, str, str, int]] = []
    row_event: list[int] = []
    pub: list[IntVector] = []
    comp: list[IntVector] = []
    leaf_of: list[str] = []
    base = 0
    for ci, c in enumerate(composites):
        # per leaf: the (detector id, subtree-local leaf id) pairs of every operator above it
        targets: dict[str, list[tuple[str, str]]] = {leaf.id: [] for leaf in c.tree.leaf_nodes}
        for n in c.tree.operators():
            for k, leaf_id in enumerate(_leaves_under(n)):
                targets[leaf_id].append((f"{c.subscription_id}/{n.id}", f"L{k + 1}"))
        for leaf in c.tree.leaf_nodes:
            times = np.asarray(c.times_ms[leaf.id], dtype=np.int64)
            pub.append(times)
            comp.append(np.full(len(times), ci, dtype=np.int64))
            leaf_of.extend([leaf.id] * len(times))
            for key, local in targets[leaf.id]:
                rows.extend((key, local, str(base + i), int(t)) for i, t in enumerate(times.tolist()))
                row_event.extend(range(base, base + len(times)))
            base += len(times)
    empty = np.zeros(0, dtype=np.int64)
    return _Matches(
        rows,
        np.asarray(row_event, dtype=np.int64),
        np.concatenate(pub) if pub else empty,
        np.concatenate(comp) if comp else empty,
        leaf_of,
    )


def _register(detector: CompositeDetector, composites: Sequence[Composite]) -> None:
    for c in composites:
        if "/" in c.subscription_id:
            raise ValueError(f"subscription id {c.subscription_id!r}: '/' is reserved for the operator keys")
        for n in c.tree.operators():
            detector.add(f"{c.subscription_id}/{n.id}", parse_composite(subtree_doc(n)), c.subscriber)


@dataclass(frozen=True)
class Outputs:
    """The detections of every operator, in the shape :func:`replay` needs.

    Attributes
    ----------
    detection_ids : frozenset of str
        Every detection id (of every ``"s/n"``); equal sets mean equal results.
    per_operator : list of dict
        Per composite: operator id to ``(leaf_events, child_rows)``: for each leaf child (in child
        order) the global event index of its component per detection (-1 when absent, in an
        ``or``), and for each operator child the row of its detection in that child's table.
    last_pub_ms : list of dict
        Per composite: operator id to the publication time of the last component per detection.
    event_counts : list of dict
        Per composite: leaf id to its number of events.
    pub_ms : ndarray of int
        Publication time of every global event.
    stats : DetectorStats
        The detector's counters.
    """

    detection_ids: frozenset[str]
    per_operator: list[dict[str, tuple[IntMatrix, IntMatrix]]]
    last_pub_ms: list[dict[str, IntVector]]
    event_counts: list[dict[str, int]]
    pub_ms: IntVector
    stats: DetectorStats


def _outputs(
    composites: Sequence[Composite], matches: _Matches, records: list[DetectionRecord], stats: DetectorStats
) -> Outputs:
    by_key: dict[str, list[list[int]]] = {}
    for r in records:
        by_key.setdefault(r["subscription_id"], []).append([int(x["event_id"]) for x in r["components"]])
    per_operator: list[dict[str, tuple[IntMatrix, IntMatrix]]] = []
    last_pub: list[dict[str, IntVector]] = []
    counts: list[dict[str, int]] = []
    for c in composites:
        tables: dict[str, tuple[IntMatrix, IntMatrix]] = {}
        lasts: dict[str, IntVector] = {}
        rows_of: dict[str, dict[tuple[int, ...], int]] = {}
        for n in reversed(c.tree.operators()):  # children before parents
            dets = by_key.get(f"{c.subscription_id}/{n.id}", [])
            rows_of[n.id] = {tuple(sorted(d)): i for i, d in enumerate(dets)}
            leaf_kids = [k for k in n.children if isinstance(k, Leaf)]
            op_kids = [k for k in n.children if isinstance(k, Operator)]
            under = {k.id: set(_leaves_under(k)) for k in op_kids}
            leaf_ev = np.full((len(dets), len(leaf_kids)), -1, dtype=np.int64)
            child_row = np.full((len(dets), len(op_kids)), -1, dtype=np.int64)
            last = np.zeros(len(dets), dtype=np.int64)
            for i, d in enumerate(dets):
                last[i] = max(int(matches.pub_ms[e]) for e in d)
                for j, k in enumerate(leaf_kids):
                    hit = [e for e in d if matches.leaf[e] == k.id]
                    if hit:
                        leaf_ev[i, j] = hit[0]
                for j, ok in enumerate(op_kids):
                    part = tuple(sorted(e for e in d if matches.leaf[e] in under[ok.id]))
                    if part:
                        child_row[i, j] = rows_of[ok.id][part]
            tables[n.id] = (leaf_ev, child_row)
            lasts[n.id] = last
        per_operator.append(tables)
        last_pub.append(lasts)
        counts.append({leaf.id: len(c.times_ms[leaf.id]) for leaf in c.tree.leaf_nodes})
    ids = frozenset(r["detection_id"] for r in records)
    if len(ids) != len(records):
        raise AssertionError("two detections share a detection id")
    return Outputs(ids, per_operator, last_pub, counts, matches.pub_ms, stats)


def detect(composites: Sequence[Composite], matches: _Matches | None = None) -> Outputs:
    """The detections of every operator: the detector fed in publication order, one watermark at the end.

    This is the reference run: event time order, nothing late.
    """
    matches = matches or component_matches(composites)
    det = CompositeDetector()
    _register(det, composites)
    det.update(matches.rows)
    end = int(matches.pub_ms.max()) + 1 if len(matches.pub_ms) else 0
    records = det.advance(end)
    return _outputs(composites, matches, records, det.stats)


def detect_in_arrival_order(
    network: Network,
    composites: Sequence[Composite],
    placements: Sequence[Mapping[str, str]],
    matches: _Matches | None = None,
    bucket_ms: float = 100.0,
) -> Outputs:
    """The detections when the detector sees the component matches as a placement delivers them.

    Every component match is fed at the time it arrives at the broker of the leaf's operator
    (publication time + ``Δ[source, P[operator]]``), in buckets of ``bucket_ms``; after each
    bucket ending at wall time ``a`` the watermark moves to ``a - lag`` with ``lag`` the largest
    finite ``Δ``: a match still to come arrives after ``a``, so it was published after
    ``a - lag`` and is never late. The result must equal :func:`detect`'s (with
    ``stats.late == 0``): detection does not depend on the placement.
    """
    matches = matches or component_matches(composites)
    if len(matches.row_event) == 0:
        return detect(composites, matches)
    offset = np.zeros(len(matches.pub_ms))
    for ci, (c, placement) in enumerate(zip(composites, placements, strict=True)):
        parent = _parents(c.tree)
        sel = matches.composite == ci
        leaves = np.asarray(matches.leaf, dtype=object)[sel]
        delays = {
            leaf.id: network.delay_ms[network.index(c.sources[leaf.id]), network.index(placement[parent[leaf.id].id])]
            for leaf in c.tree.leaf_nodes
        }
        offset[sel] = [delays[x] for x in leaves]
    arrival = matches.pub_ms[matches.row_event] + offset[matches.row_event]
    order = np.argsort(arrival, kind="stable")
    finite = network.delay_ms[np.isfinite(network.delay_ms)]
    lag = math.ceil(float(finite.max())) if finite.size else 0
    det = CompositeDetector()
    _register(det, composites)
    records: list[DetectionRecord] = []
    ends = np.arange(float(arrival.min()) + bucket_ms, float(arrival.max()) + bucket_ms, bucket_ms)
    cuts = np.searchsorted(arrival[order], ends, side="right")
    start = 0
    rows = matches.rows
    for end, cut in zip(ends.tolist(), cuts.tolist(), strict=True):
        det.update([rows[i] for i in order[start:cut].tolist()])
        start = cut
        records.extend(det.advance(math.floor(end) - lag))
    records.extend(det.advance(int(matches.pub_ms.max()) + 1))
    return _outputs(composites, matches, records, det.stats)


# --------------------------------------------------------------------------------------------
# The replay
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Replay:
    """What a placement costs when its composites' events are replayed.

    Attributes
    ----------
    transmissions : ndarray of int
        Per composite: link transmissions (events and detections), ``Σ_messages H``.
    weighted : ndarray
        Per composite: the same weighted by link cost, ``Σ_messages D``.
    input_transmissions : ndarray of int
        Per composite: the part carried by leaf events (the rest is operator outputs).
    delays_ms : ndarray
        Per root detection (composite by composite): arrival at the subscriber's broker minus
        the publication time of its last component.
    """

    transmissions: IntVector
    weighted: FloatMatrix
    input_transmissions: IntVector
    delays_ms: FloatMatrix


def replay(
    network: Network, composites: Sequence[Composite], outputs: Outputs, placements: Sequence[Mapping[str, str]]
) -> Replay:
    """Replay the events and detections of ``outputs`` under ``placements`` (one per composite).

    Messages: each event of a leaf goes from its source to its operator's broker; each
    detection of a non-root operator goes to its parent's broker; each root detection goes to
    the subscriber's broker. ``weighted`` is docs/reference/placement.md's traffic cost of the placement with every
    rate (leaf events and, unlike Definition 2, operator detections) replaced by its observed
    count.
    """
    idx = {b: i for i, b in enumerate(network.brokers)}
    hops, dist, dly = network.hops, network.cost, network.delay_ms
    tx = np.zeros(len(composites), dtype=np.int64)
    tx_in = np.zeros(len(composites), dtype=np.int64)
    weighted = np.zeros(len(composites))
    delays: list[FloatMatrix] = []
    for ci, (c, placement) in enumerate(zip(composites, placements, strict=True)):
        tables, lasts = outputs.per_operator[ci], outputs.last_pub_ms[ci]
        counts = outputs.event_counts[ci]
        wall: dict[str, FloatMatrix] = {}
        total, inputs, w = 0, 0, 0.0
        for n in reversed(c.tree.operators()):
            at = idx[placement[n.id]]
            leaf_ev, child_row = tables[n.id]
            best = np.full(len(leaf_ev), -np.inf)
            j = k = 0
            for kid in n.children:
                if isinstance(kid, Leaf):
                    src = idx[c.sources[kid.id]]
                    inputs += counts[kid.id] * int(hops[src, at])
                    w += counts[kid.id] * float(dist[src, at])
                    ev = leaf_ev[:, j]
                    pub = outputs.pub_ms[np.maximum(ev, 0)] if len(outputs.pub_ms) else np.zeros(len(ev))
                    arrive = np.where(ev >= 0, pub + dly[src, at], -np.inf)
                    j += 1
                else:
                    frm = idx[placement[kid.id]]
                    m = len(tables[kid.id][0])
                    total += m * int(hops[frm, at])
                    w += m * float(dist[frm, at])
                    row = child_row[:, k]
                    kid_wall = np.append(wall[kid.id], -np.inf)  # row -1 (absent) reads the -inf
                    arrive = kid_wall[row] + dly[frm, at]
                    k += 1
                best = np.maximum(best, arrive)
            wall[n.id] = best
        root = c.tree.root
        at, sub = idx[placement[root.id]], idx[c.subscriber]
        m = len(tables[root.id][0])
        total += m * int(hops[at, sub]) + inputs
        w += m * float(dist[at, sub])
        delays.append(wall[root.id] + dly[at, sub] - lasts[root.id])
        tx[ci], tx_in[ci], weighted[ci] = total, inputs, w
    return Replay(tx, weighted, tx_in, np.concatenate(delays) if delays else np.zeros(0))
