"""Discrete-event simulation of the SPEC §4 broker network, vectorised with numpy.

This is the ``siftstream qos simulate`` twin of the reliability predictor: it measures the
subscriber real-time reliability R_s that the predictor estimates. The model is the one of
Pongthawornkamol, Nahrstedt and Wang, "Towards Timeliness and Reliability Analysis of
Distributed Content-based Publish/Subscribe Systems over Best-effort Networks" (§2, §4.1;
``seeds/pongthawornkamol-timeliness-reliability-analysis.txt``), as SPEC §4 states it:

- publishers emit events at renewal times (``interarrival_ms``); each event draws one
  ``content`` entry (attributes and lifetime) with probability ``p``, and goes to the home broker;
- each broker is one FIFO single server; every event it receives, from a publisher or a
  neighbour, takes one ``service_ms`` draw;
- a broker forwards an event once over each outgoing link on which some subscription downstream
  matches it (the link to a matching local subscriber included), never back over the link the
  event came in on (the paper's up(l), eq. 2);
- links do not queue: each transmission draws its own delay (messages may overtake each other)
  and is lost with probability 1 - ``reliability``; a lost transmission drops the event for
  everything behind that link;
- R_s = (events published in [0, seconds) that match s and reach s within their lifetime) /
  (events published in [0, seconds) that match s), the paper's definition in §2.2.

Algorithm
---------
Routing does not depend on time, so every random input is drawn first (:func:`draw_inputs`):
publication times and contents, then for every *potential* transmission (a hop of the content's
route, the paper's filter propagation §4.1 unrolled per content entry) its loss, its delay and,
at a broker, its service time. Timing is then a function of those draws (:func:`solve`):

- A broker's departures follow the FIFO (Lindley) recursion D_n = max(A_n, D_{n-1}) + S_n over
  its arrivals in time order, which numpy evaluates at once as
  ``D = cumsum(S) + maximum.accumulate(A - (cumsum(S) - S))`` (:func:`fifo_departures`).
- Brokers are taken in topological order of the strongly connected components of the broker
  graph. A lone broker needs one pass once its upstream brokers are done. But a broker pair
  linked both ways (any tree that carries events both ways, such as the paper's) is a cycle of
  queues, and no broker order works: such a component is solved by *windowed relaxation*
  (:func:`_relax_component`). Visits are admitted in order of a lower bound on their arrival
  time, a few hundred at a time; vectorised Jacobi sweeps of the recursion over all brokers of
  the component then run until no departure changes, and every visit that arrives before the
  window's end is then final, with its exact time (the proof is in that function). A sweep
  extends the settled horizon by at least one hop, so the number of sweeps grows with simulated
  time over hop time, while the work per sweep is vectorised over the events in flight.
- Times are integer nanoseconds (:data:`TICKS_PER_MS`): the sums and maxima are exact, so the
  batching cannot change the result.
- :func:`solve_reference` is the textbook event-driven simulation (one heap, one event at a
  time) over the same draws, the oracle of the parity tests (CONVENTIONS 6): both give
  identical times, bit for bit.

Warm-up: publishers start at -``warmup_s`` with a uniformly random phase and run until
``seconds + warmup_s``; only events published in [0, seconds) are counted, and broker statistics
cover [0, seconds). Events published outside that window still load the queues.

Examples
--------
>>> dist = lambda mean: {"kind": "exponential", "mean": mean}
>>> system = {
...     "brokers": [{"id": "b1", "service_ms": dist(5)}],
...     "links": [{"from": "p1", "to": "b1", "reliability": 1.0, "delay_ms": dist(1)},
...               {"from": "b1", "to": "s1", "reliability": 0.9, "delay_ms": dist(1)}],
...     "publishers": [{"id": "p1", "broker": "b1", "interarrival_ms": dist(10),
...                     "content": [{"p": 1.0, "lifetime_ms": 1000, "attributes": {"t": 1}}]}],
...     "subscribers": [{"id": "s1", "broker": "b1", "filter": "t = 1"}]}
>>> result = simulate(system, seconds=100, seed=1, matcher=lambda text, attributes: True)
>>> s1 = result.subscribers["s1"]
>>> s1.matching > 9000, abs(s1.reliability - 0.9) < 0.02, round(result.brokers["b1"].rho, 1)
(True, True, 0.5)
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np
from numpy.typing import NDArray
from scipy import stats

from routing.stats.distributions import Distribution, parse_distribution

__all__ = [
    "TICKS_PER_MS",
    "BrokerSamples",
    "BrokerStats",
    "BulkMatcher",
    "Draws",
    "EventTable",
    "LinkSamples",
    "Matcher",
    "Matching",
    "Network",
    "Overlay",
    "Receipts",
    "RouteTree",
    "Schedule",
    "SimulationResult",
    "SubscriberStats",
    "Telemetry",
    "compile_routes",
    "compile_system",
    "draw_inputs",
    "fifo_departures",
    "match_content",
    "measure",
    "reliability_tree_system",
    "simulate",
    "solve",
    "solve_reference",
    "to_spec_output",
    "validate_system",
    "wilson_interval",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]
_T = TypeVar("_T", bound=np.number[Any])

Matcher = Callable[[str, Mapping[str, object]], bool]
"""``matcher(filter_text, attributes) -> bool``: does an event with these attributes match the
SPEC §1 filter? It must raise (any exception) for a filter it cannot parse."""

_PROB_TOLERANCE = 1e-6  # how far a publisher's content p values may sum from 1 (JSON rounding)
_MAX_ROUTE_HOPS = 200_000  # potential hops of one content entry; more means a DAG with too many paths
_WILSON_LEVEL = 0.90  # SPEC §4: reliability_low/high form a 90% interval
_RHO_WARNING = 0.95  # QUEUEING-NOTES §7: rho >= 0.95 marks a broker saturated


# --------------------------------------------------------------------------------------------
# The compiled network: the validated system, its matching and its routes
# --------------------------------------------------------------------------------------------


@runtime_checkable
class BulkMatcher(Protocol):
    """A :data:`Matcher` that can also match many filters against many events in one call.

    :func:`match_content` uses ``match_many`` when the matcher has it (``routing.reliability.qos.filter_matcher``
    does, through :class:`routing.matching.index.MatchIndex`) and calls the matcher once per (distinct
    filter, distinct attribute set) otherwise.
    """

    def __call__(self, text: str, attributes: Mapping[str, object]) -> bool: ...

    def match_many(self, texts: Sequence[str], events: Sequence[Mapping[str, object]]) -> BoolArray:
        """``out[e, f]``: event ``events[e]`` matches filter ``texts[f]``, exactly as ``self(texts[f], events[e])``."""
        ...


@dataclass(frozen=True, eq=False)
class Overlay:
    """A validated SPEC §4 system, before filter propagation (:func:`validate_system`).

    Nodes are indexed per kind (brokers, publishers, subscribers) in document order. Content
    entries of all publishers are flattened into one index ``k`` ("content key"): publisher
    ``content_publisher[k]``, entry ``content_index[k]`` of that publisher's ``content`` list.

    Attributes
    ----------
    broker_ids, publisher_ids, subscriber_ids : tuple of str
    service : tuple of Distribution
        Per broker, the service (matching) time.
    interarrival : tuple of Distribution
        Per publisher, the time between publications.
    link_from, link_to : tuple of str
        Per directed link, its end node ids.
    link_reliability : float array
        Per link, r_l.
    link_delay : tuple of Distribution
        Per link, D_l.
    link_broker : int array
        Per link, the index of the broker it ends at, or -1 when it ends at a subscriber.
    link_subscriber : int array
        Per link, the index of the subscriber it ends at, or -1.
    link_source_broker : int array
        Per link, the index of the broker it starts at, or -1 for a publisher's link.
    link_reverse : int array
        Per link, the link in the opposite direction, or -1 (events never go back over it: the
        paper's up(l), eq. 2).
    publisher_link : int array
        Per publisher, its link to its home broker.
    subscriber_link : int array
        Per subscriber, its link from its home broker.
    subscriber_filter : tuple of str
        Per subscriber, its SPEC §1 filter text.
    content_publisher, content_index : int array
        Per content key, the publisher and the entry's position in its ``content``.
    content_p, content_lifetime_ms : float array
        Per content key, its probability within the publisher and the event lifetime.
    content_attributes : tuple of mapping
        Per content key, the event attributes.
    """

    broker_ids: tuple[str, ...]
    publisher_ids: tuple[str, ...]
    subscriber_ids: tuple[str, ...]
    service: tuple[Distribution, ...]
    interarrival: tuple[Distribution, ...]
    link_from: tuple[str, ...]
    link_to: tuple[str, ...]
    link_reliability: FloatArray
    link_delay: tuple[Distribution, ...]
    link_broker: IntArray
    link_subscriber: IntArray
    link_source_broker: IntArray
    link_reverse: IntArray
    publisher_link: IntArray
    subscriber_link: IntArray
    subscriber_filter: tuple[str, ...]
    content_publisher: IntArray
    content_index: IntArray
    content_p: FloatArray
    content_lifetime_ms: FloatArray
    content_attributes: tuple[Mapping[str, object], ...]


@dataclass(frozen=True, eq=False)
class Network(Overlay):
    """An :class:`Overlay` with its filter propagation done densely (the paper's §4.1): the
    simulator's input (:func:`compile_system`).

    Attributes
    ----------
    match : bool array, shape (keys, subscribers)
        ``match[k, s]``: an event with content k matches subscriber s's filter.
    downstream : bool array, shape (links, subscribers)
        ``downstream[l, s]``: s is reachable through link l (the paper's f_l holds f_s).
    route_offset : int array, shape (keys + 1,)
        Content key k's potential route is hops ``route_offset[k]:route_offset[k + 1]`` of the
        ``route_*`` arrays, parents before children (hop 0 is the publisher's link).
    route_link, route_parent, route_depth : int array
        Per hop: its link, its parent hop (relative to the route start, -1 for hop 0), its
        number of links from the publisher (0 for hop 0).
    components : tuple of tuple of int
        Strongly connected components of the broker graph (links that some route uses), in
        topological order; a component with one broker needs one FIFO pass.
    """

    match: BoolArray
    downstream: BoolArray
    route_offset: IntArray
    route_link: IntArray
    route_parent: IntArray
    route_depth: IntArray
    components: tuple[tuple[int, ...], ...]


@dataclass(frozen=True, eq=False)
class Matching:
    """Which subscribers each content entry matches (:func:`match_content`), kept factored
    through the distinct attribute sets and the distinct filter texts: content key k matches
    subscriber s iff ``table[key_class[k], filter_class[s]]``.

    Examples
    --------
    >>> m = Matching(np.array([0, 1, 0]), np.array([1, 0]), np.array([[True, False], [False, True]]))
    >>> m.dense().astype(int).tolist()  # keys 0 and 2 share their attributes
    [[0, 1], [1, 0], [0, 1]]
    """

    key_class: IntArray
    filter_class: IntArray
    table: BoolArray

    def dense(self) -> BoolArray:
        """``match[k, s]``, shape (keys, subscribers)."""
        out: BoolArray = self.table[self.key_class][:, self.filter_class]
        return out


@dataclass(frozen=True, eq=False)
class RouteTree:
    """The potential routes of all content entries, shared per publisher (:func:`compile_routes`).

    The paper's filter propagation (§4.1) sends content key k of publisher p over link l iff
    some subscriber downstream of l matches k. Every route of p is then a subtree of one tree of
    paths: a *node* is a path of links from p to a broker that some event of p can travel (for a
    tree overlay, one node per (publisher, broker) reached), a *leaf* is a node's link on to a
    subscriber that matches some content of p. Key k crosses node n's last link iff k is among
    ``node_key[node_key_offset[n]:node_key_offset[n + 1]]`` (every key of p crosses p's own
    link), and crosses leaf (n, s)'s link iff s matches k. Unlike :class:`Network` nothing here
    is per (link, subscriber) or per (content key, hop), so a system with 10^5 subscribers
    stays small.

    Attributes
    ----------
    node_publisher, node_link, node_broker, node_parent, node_depth : int array
        Per node: its publisher, its last link, the broker that link ends at, the node it
        extends (-1 for the publisher's own link) and its number of links after the first.
        Nodes are ordered by depth, so parents come before children.
    node_key_offset, node_key : int array
        The content keys that cross each node's last link, in CSR form.
    leaf_node, leaf_subscriber : int array
        Per leaf: its node and its subscriber (the leaf's link is that subscriber's link).
        Leaves are ordered by node.
    """

    node_publisher: IntArray
    node_link: IntArray
    node_broker: IntArray
    node_parent: IntArray
    node_depth: IntArray
    node_key_offset: IntArray
    node_key: IntArray
    leaf_node: IntArray
    leaf_subscriber: IntArray


def _fail(where: str, message: str) -> ValueError:
    return ValueError(f"{where}: {message}")


def _list(obj: Mapping[str, object], key: str, where: str) -> list[object]:
    value = obj.get(key, [])
    if not isinstance(value, list):
        raise _fail(where, f"'{key}' must be a list (got {type(value).__name__})")
    return value


def _object(value: object, where: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise _fail(where, f"must be an object (got {value!r})")
    return value


def _string(obj: Mapping[str, object], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise _fail(where, f"'{key}' must be a non-empty string (got {value!r})")
    return value


def _number(obj: Mapping[str, object], key: str, where: str, low: float, high: float = math.inf) -> float:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _fail(where, f"'{key}' must be a finite number (got {value!r})")
    if not low <= value <= high:
        bounds = f">= {low:g}" if high == math.inf else f"in [{low:g}, {high:g}]"
        raise _fail(where, f"'{key}' must be {bounds} (got {value!r})")
    return float(value)


def _dist_key(spec: dict[object, object]) -> tuple[object, ...]:
    return tuple(spec.items()), tuple(map(type, spec.values()))


def _distribution(spec: object, where: str, cache: dict[object, Distribution]) -> Distribution:
    """:func:`parse_distribution`, memoised on the DIST's items and their types (so that 1, 1.0
    and True stay apart); a DIST with an unhashable value (an empirical list) is parsed anew."""
    if type(spec) is not dict:
        return parse_distribution(spec, where)
    key = _dist_key(spec)
    try:
        found = cache.get(key)
    except TypeError:
        return parse_distribution(spec, where)
    if found is None:
        found = cache[key] = parse_distribution(spec, where)
    return found


def _check_link_cycles(
    link_from: Sequence[str], link_to: Sequence[str], broker_index: Mapping[str, int], reverse: Sequence[int]
) -> None:
    """Reject link cycles that events could travel: l' feeds l when l' ends where l starts and l
    is not l''s reverse (the paper's up(l), eq. 2). Kahn's algorithm over the links that end at
    brokers (a link to a subscriber feeds nothing, so it lies on no cycle); a left-over link lies
    on or behind a cycle, and walking predecessors from the first left-over link finds the cycle
    to report (a link to a subscriber behind a cycle counts as left over: the walk then starts at
    the first left-over link into its broker)."""
    n = len(link_from)
    inner = [i for i in range(n) if link_to[i] in broker_index]
    starting: dict[str, list[int]] = {}
    for i in inner:
        starting.setdefault(link_from[i], []).append(i)
    successors = {i: [j for j in starting.get(link_to[i], []) if j != reverse[i]] for i in inner}
    indegree = dict.fromkeys(inner, 0)
    for succ in successors.values():
        for j in succ:
            indegree[j] += 1
    ready = [i for i in inner if indegree[i] == 0]
    done = 0
    while ready:
        i = ready.pop()
        done += 1
        for j in successors[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                ready.append(j)
    if done == len(inner):
        return
    left = [i for i in inner if indegree[i] > 0]
    predecessors: dict[int, list[int]] = {}
    for i in left:
        for j in successors[i]:
            predecessors.setdefault(j, []).append(i)
    start = left[0]
    ends = {link_to[i] for i in left}
    behind = next((i for i in range(start) if link_to[i] not in broker_index and link_from[i] in ends), None)
    if behind is not None:
        start = next(i for i in left if link_to[i] == link_from[behind])
    seen: dict[int, int] = {}
    path: list[int] = []
    node = start
    while node not in seen:
        seen[node] = len(path)
        path.append(node)
        node = predecessors[node][0]
    cycle = path[seen[node] :][::-1]
    first = cycle.index(min(cycle))  # start at the first listed link, so the message is stable
    cycle = cycle[first:] + cycle[:first]
    hops = " -> ".join([link_from[i] for i in cycle] + [link_to[cycle[-1]]])
    raise ValueError(
        f"links: events could circulate forever on the cycle {hops}; the broker network must be acyclic "
        "apart from the two directions of one broker pair (SPEC §4)"
    )


def _strong_components(n: int, edges: Sequence[set[int]]) -> list[list[int]]:
    """Tarjan's strongly connected components, iteratively; returns them in topological order."""
    index = [-1] * n
    low = [0] * n
    on_stack = [False] * n
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    for root in range(n):
        if index[root] >= 0:
            continue
        work: list[tuple[int, list[int]]] = [(root, sorted(edges[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        while work:
            v, todo = work[-1]
            if todo:
                w = todo.pop(0)
                if index[w] < 0:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack[w] = True
                    work.append((w, sorted(edges[w])))
                elif on_stack[w]:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    component.append(w)
                    if w == v:
                        break
                out.append(sorted(component))
    return out[::-1]


def validate_system(system: Mapping[str, object], matcher: Matcher) -> Overlay:
    """Validate a SPEC §4 system document (the first step of :func:`compile_system` and of
    ``routing.reliability.qos.predict``).

    Parameters
    ----------
    system : mapping
        The JSON document: ``brokers``, ``links``, ``publishers``, ``subscribers``.
    matcher : callable
        ``matcher(filter_text, attributes) -> bool``; called once per distinct filter text with
        empty attributes, to validate it.

    Returns
    -------
    Overlay

    Raises
    ------
    ValueError
        Naming the element (``links[3]``, ``publishers[0] ('p1')``), what is wrong and what would
        be valid: unknown node ids, duplicate ids or links, a link between the wrong kinds of
        node, a publisher without exactly one link to its home broker, a subscriber without
        exactly one link from its home broker, a cycle events could travel, content ``p`` not
        summing to 1, a bad DIST, or a filter the matcher rejects.

    Examples
    --------
    >>> zero = {"kind": "deterministic", "value": 0}
    >>> system = {"brokers": [{"id": "b1", "service_ms": zero}],
    ...           "links": [{"from": "p1", "to": "b9", "reliability": 1, "delay_ms": zero}],
    ...           "publishers": [], "subscribers": []}
    >>> validate_system(system, lambda text, attributes: True)
    Traceback (most recent call last):
    ...
    ValueError: links[0]: 'from' names no publisher or broker ('p1'); known: b1
    """
    root = _object(system, "system")
    unknown = sorted(set(root) - {"brokers", "links", "publishers", "subscribers"})
    if unknown:
        raise _fail(
            "system", f"unknown section(s) {', '.join(unknown)}; valid: brokers, links, publishers, subscribers"
        )
    brokers_raw = _list(root, "brokers", "system")
    links_raw = _list(root, "links", "system")
    publishers_raw = _list(root, "publishers", "system")
    subscribers_raw = _list(root, "subscribers", "system")
    dists: dict[object, Distribution] = {}

    kind_of: dict[str, str] = {}

    def register(node_id: str, kind: str, where: str) -> None:
        if node_id in kind_of:
            raise _fail(where, f"id {node_id!r} is already used by a {kind_of[node_id]}; ids must be unique")
        kind_of[node_id] = kind

    broker_ids: list[str] = []
    service: list[Distribution] = []
    for i, raw in enumerate(brokers_raw):
        where = f"brokers[{i}]"
        obj = _object(raw, where)
        bid = _string(obj, "id", where)
        register(bid, "broker", where)
        broker_ids.append(bid)
        service.append(_distribution(obj.get("service_ms"), f"{where} ('{bid}').service_ms", dists))
    broker_index = {b: i for i, b in enumerate(broker_ids)}

    publisher_ids: list[str] = []
    publisher_home: list[int] = []
    interarrival: list[Distribution] = []
    content_rows: list[tuple[int, int, float, float, Mapping[str, object]]] = []
    for i, raw in enumerate(publishers_raw):
        where = f"publishers[{i}]"
        obj = _object(raw, where)
        pid = _string(obj, "id", where)
        register(pid, "publisher", where)
        where = f"{where} ('{pid}')"
        home = _string(obj, "broker", where)
        if home not in broker_index:
            raise _fail(where, f"'broker' names no broker ({home!r}); known: {', '.join(broker_ids) or 'none'}")
        dist = _distribution(obj.get("interarrival_ms"), f"{where}.interarrival_ms", dists)
        if dist.mean <= 0.0:
            raise _fail(where, "interarrival_ms must have a mean > 0 (a publisher cannot publish infinitely often)")
        content = _list(obj, "content", where)
        if not content:
            raise _fail(where, "'content' must list at least one {p, lifetime_ms, attributes} entry")
        total = 0.0
        for j, entry_raw in enumerate(content):
            cwhere = f"{where}.content[{j}]"
            entry = _object(entry_raw, cwhere)
            p = _number(entry, "p", cwhere, 0.0, 1.0)
            lifetime = _number(entry, "lifetime_ms", cwhere, 0.0)
            attributes = _object(entry.get("attributes", {}), f"{cwhere}.attributes")
            total += p
            content_rows.append((i, j, p, lifetime, dict(attributes)))
        if abs(total - 1.0) > _PROB_TOLERANCE:
            raise _fail(where, f"content p values must sum to 1 (got {total:.6g})")
        publisher_ids.append(pid)
        publisher_home.append(broker_index[home])
        interarrival.append(dist)

    subscriber_ids: list[str] = []
    subscriber_home: list[int] = []
    filters: list[str] = []
    accepted: set[str] = set()  # filter texts the matcher has validated
    for i, raw in enumerate(subscribers_raw):
        # Fast paths for well-formed entries; the helpers raise the messages for the others.
        obj = raw if type(raw) is dict else _object(raw, f"subscribers[{i}]")
        sid = obj.get("id")
        if type(sid) is not str or not sid:
            sid = _string(obj, "id", f"subscribers[{i}]")
        if sid in kind_of:
            register(sid, "subscriber", f"subscribers[{i}]")
        kind_of[sid] = "subscriber"
        at = obj.get("broker")
        if type(at) is not str or not at:
            at = _string(obj, "broker", f"subscribers[{i}] ('{sid}')")
        b = broker_index.get(at)
        if b is None:
            raise _fail(
                f"subscribers[{i}] ('{sid}')",
                f"'broker' names no broker ({at!r}); known: {', '.join(broker_ids) or 'none'}",
            )
        text = obj.get("filter")
        if type(text) is not str or not text:
            text = _string(obj, "filter", f"subscribers[{i}] ('{sid}')")
        if text not in accepted:
            try:
                matcher(text, {})
            except Exception as exc:
                raise _fail(f"subscribers[{i}] ('{sid}')", f"filter {text!r} rejected: {exc}") from exc
            accepted.add(text)
        subscriber_ids.append(sid)
        subscriber_home.append(b)
        filters.append(text)
    subscriber_index = {sid: i for i, sid in enumerate(subscriber_ids)}

    link_from: list[str] = []
    link_to: list[str] = []
    reliability: list[float] = []
    delay: list[Distribution] = []
    link_broker: list[int] = []
    link_subscriber: list[int] = []
    link_source_broker: list[int] = []
    pair_index: dict[tuple[str, str], int] = {}
    from_publisher: dict[str, int] = {}  # a publisher's (first) link
    to_subscriber: dict[str, int] = {}  # a subscriber's (first) link
    repeated: set[str] = set()  # publishers and subscribers with more than one link
    for i, raw in enumerate(links_raw):
        obj = raw if type(raw) is dict else _object(raw, f"links[{i}]")
        src, dst = obj.get("from"), obj.get("to")
        if type(src) is not str or not src:
            src = _string(obj, "from", f"links[{i}]")
        if type(dst) is not str or not dst:
            dst = _string(obj, "to", f"links[{i}]")
        src_kind, dst_kind = kind_of.get(src), kind_of.get(dst)
        if src_kind != "publisher" and src_kind != "broker":
            known = ", ".join(publisher_ids + broker_ids) or "none"
            raise _fail(f"links[{i}]", f"'from' names no publisher or broker ({src!r}); known: {known}")
        if dst_kind != "broker" and dst_kind != "subscriber":
            known = ", ".join(broker_ids + subscriber_ids) or "none"
            raise _fail(f"links[{i}]", f"'to' names no broker or subscriber ({dst!r}); known: {known}")
        if src == dst:
            raise _fail(f"links[{i}]", f"a link from {src!r} to itself")
        if src_kind == "publisher" and dst_kind != "broker":
            raise _fail(f"links[{i}]", f"publisher {src!r} may only link to its home broker, not to subscriber {dst!r}")
        pair = (src, dst)
        if pair in pair_index:
            raise _fail(f"links[{i}]", f"duplicate link {src} -> {dst} (first at links[{pair_index[pair]}])")
        pair_index[pair] = i
        link_from.append(src)
        link_to.append(dst)
        r = obj.get("reliability")
        if type(r) is not float or not 0.0 <= r <= 1.0:
            r = _number(obj, "reliability", f"links[{i}]", 0.0, 1.0)
        reliability.append(r)
        spec = obj.get("delay_ms")
        cached = None
        if type(spec) is dict:  # the memo of _distribution, inline
            try:
                cached = dists.get((tuple(spec.items()), tuple(map(type, spec.values()))))
            except TypeError:
                cached = None
        delay.append(
            cached if cached is not None else _distribution(spec, f"links[{i}] ({src} -> {dst}).delay_ms", dists)
        )
        if src_kind == "broker":
            link_source_broker.append(broker_index[src])
        else:
            link_source_broker.append(-1)
            if src in from_publisher:
                repeated.add(src)
            from_publisher.setdefault(src, i)
        if dst_kind == "broker":
            link_broker.append(broker_index[dst])
            link_subscriber.append(-1)
        else:
            link_broker.append(-1)
            link_subscriber.append(subscriber_index[dst])
            if dst in to_subscriber:
                repeated.add(dst)
            to_subscriber.setdefault(dst, i)
    n_links = len(link_from)

    publisher_link = np.full(len(publisher_ids), -1, dtype=np.int64)
    for p, pid in enumerate(publisher_ids):
        home = broker_ids[publisher_home[p]]
        first = from_publisher.get(pid)
        if first is None or pid in repeated or link_to[first] != home:
            mine = [i for i in range(n_links) if link_from[i] == pid]
            got = ", ".join(f"{pid} -> {link_to[i]}" for i in mine) or "none"
            raise _fail(
                f"publishers[{p}] ('{pid}')",
                f"needs exactly one link, to its home broker {home!r} (links from it: {got}); "
                f'add {{"from": "{pid}", "to": "{home}", "reliability": ..., "delay_ms": ...}}',
            )
        publisher_link[p] = first
    subscriber_link = np.full(len(subscriber_ids), -1, dtype=np.int64)
    for s, sid in enumerate(subscriber_ids):
        first = to_subscriber.get(sid)
        if first is None or sid in repeated or link_source_broker[first] != subscriber_home[s]:
            home = broker_ids[subscriber_home[s]]
            mine = [i for i in range(n_links) if link_to[i] == sid]
            got = ", ".join(f"{link_from[i]} -> {sid}" for i in mine) or "none"
            raise _fail(
                f"subscribers[{s}] ('{sid}')",
                f"needs exactly one link, from its home broker {home!r} (links to it: {got}); "
                f'add {{"from": "{home}", "to": "{sid}", "reliability": ..., "delay_ms": ...}}',
            )
        subscriber_link[s] = first

    reverse = [pair_index.get((link_to[i], link_from[i]), -1) for i in range(n_links)]
    _check_link_cycles(link_from, link_to, broker_index, reverse)

    return Overlay(
        broker_ids=tuple(broker_ids),
        publisher_ids=tuple(publisher_ids),
        subscriber_ids=tuple(subscriber_ids),
        service=tuple(service),
        interarrival=tuple(interarrival),
        link_from=tuple(link_from),
        link_to=tuple(link_to),
        link_reliability=np.array(reliability, dtype=np.float64),
        link_delay=tuple(delay),
        link_broker=np.array(link_broker, dtype=np.int64),
        link_subscriber=np.array(link_subscriber, dtype=np.int64),
        link_source_broker=np.array(link_source_broker, dtype=np.int64),
        link_reverse=np.array(reverse, dtype=np.int64),
        publisher_link=publisher_link,
        subscriber_link=subscriber_link,
        subscriber_filter=tuple(filters),
        content_publisher=np.array([r[0] for r in content_rows], dtype=np.int64),
        content_index=np.array([r[1] for r in content_rows], dtype=np.int64),
        content_p=np.array([r[2] for r in content_rows], dtype=np.float64),
        content_lifetime_ms=np.array([r[3] for r in content_rows], dtype=np.float64),
        content_attributes=tuple(r[4] for r in content_rows),
    )


def _attributes_key(attributes: Mapping[str, object]) -> object:
    """A hashable stand-in for an attribute mapping, telling 1, 1.0 and True apart; None when a
    value is unhashable (such a content entry gets an attribute class of its own)."""
    key = tuple(sorted(((name, type(value), value) for name, value in attributes.items()), key=lambda t: str(t[0])))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def match_content(overlay: Overlay, matcher: Matcher) -> Matching:
    """Which subscribers each content entry matches, with every distinct filter text matched once
    against every distinct attribute set.

    A :class:`BulkMatcher` does it in one ``match_many`` call; any other matcher is called once
    per (distinct attribute set, distinct filter), and its first failure, in (content key,
    subscriber) order, is reported naming that subscriber.

    Examples
    --------
    >>> zero = {"kind": "deterministic", "value": 0}
    >>> system = {"brokers": [{"id": "b", "service_ms": zero}],
    ...           "links": [{"from": "p", "to": "b", "reliability": 1, "delay_ms": zero}]
    ...                    + [{"from": "b", "to": s, "reliability": 1, "delay_ms": zero} for s in "xyz"],
    ...           "publishers": [{"id": "p", "broker": "b", "interarrival_ms": zero | {"value": 1},
    ...                           "content": [{"p": 0.5, "lifetime_ms": 1, "attributes": {"t": t}} for t in (1, 2)]}],
    ...           "subscribers": [{"id": s, "broker": "b", "filter": f} for s, f in zip("xyz", ["1", "2", "1"])]}
    >>> overlay = validate_system(system, lambda text, attributes: True)
    >>> m = match_content(overlay, lambda text, attributes: attributes["t"] == int(text))
    >>> m.dense().astype(int).tolist(), m.table.shape
    ([[1, 0, 1], [0, 1, 0]], (2, 2))
    """
    texts: dict[str, int] = {}
    first_subscriber: list[int] = []
    filter_class = np.empty(len(overlay.subscriber_filter), dtype=np.int64)
    for s, text in enumerate(overlay.subscriber_filter):
        f = texts.get(text)
        if f is None:
            f = texts[text] = len(first_subscriber)
            first_subscriber.append(s)
        filter_class[s] = f
    classes: dict[object, int] = {}
    events: list[Mapping[str, object]] = []
    key_class = np.empty(len(overlay.content_attributes), dtype=np.int64)
    for k, attributes in enumerate(overlay.content_attributes):
        key = _attributes_key(attributes)
        c = classes.get(key) if key is not None else None
        if c is None:
            c = len(events)
            events.append(attributes)
            if key is not None:
                classes[key] = c
        key_class[k] = c
    text_list = list(texts)
    if isinstance(matcher, BulkMatcher):
        table = np.asarray(matcher.match_many(text_list, events), dtype=np.bool_)
        if table.shape != (len(events), len(text_list)):
            raise ValueError(f"match_many returned shape {table.shape}, expected {(len(events), len(text_list))}")
    else:
        table = np.zeros((len(events), len(text_list)), dtype=np.bool_)
        for a, attributes in enumerate(events):
            for f, text in enumerate(text_list):
                try:
                    table[a, f] = bool(matcher(text, attributes))
                except Exception as exc:
                    s = first_subscriber[f]
                    raise _fail(
                        f"subscribers[{s}] ('{overlay.subscriber_ids[s]}')",
                        f"matcher failed on filter {text!r} with attributes {dict(attributes)!r}: {exc}",
                    ) from exc
    return Matching(key_class=key_class, filter_class=filter_class, table=table)


def _out_links(overlay: Overlay) -> list[list[int]]:
    """Per broker, the links leaving it, in document order."""
    out: list[list[int]] = [[] for _ in overlay.broker_ids]
    for i, b in enumerate(overlay.link_source_broker.tolist()):
        if b >= 0:
            out[b].append(i)
    return out


def _children_first(overlay: Overlay, out_links: Sequence[list[int]]) -> list[int]:
    """The links that end at brokers, each after all such links an event crossing it can go on
    to (a reverse topological order of the link relation, acyclic once :func:`validate_system`
    has passed; links to subscribers feed nothing and are left out)."""
    link_broker = overlay.link_broker.tolist()
    reverse = overlay.link_reverse.tolist()
    ahead = [[j for j in links if link_broker[j] >= 0] for links in out_links]
    state = bytearray(len(link_broker))  # 0 new, 1 on the stack, 2 done
    order: list[int] = []
    for start in range(len(link_broker)):
        if state[start] or link_broker[start] < 0:
            continue
        stack = [start]
        while stack:
            i = stack[-1]
            if state[i] == 0:
                state[i] = 1
                stack.extend(j for j in ahead[link_broker[i]] if j != reverse[i] and state[j] == 0)
                continue
            stack.pop()
            if state[i] == 1:
                state[i] = 2
                order.append(i)
    return order


def _key_bits(mask: int, n_keys: int) -> IntArray:
    """The content keys whose bits ``mask`` sets, ascending."""
    raw = np.frombuffer(mask.to_bytes((n_keys + 7) // 8, "little"), dtype=np.uint8)
    out: IntArray = np.flatnonzero(np.unpackbits(raw, bitorder="little")[:n_keys]).astype(np.int64)
    return out


def _link_key_masks(overlay: Overlay, matching: Matching, out_links: Sequence[list[int]]) -> list[int]:
    """Filter propagation (the paper's §4.1) as bit sets: per link, bit k is set iff some
    subscriber downstream of the link matches content key k."""
    n_keys = len(matching.key_class)
    if n_keys:
        packed = np.packbits(matching.table[matching.key_class], axis=0, bitorder="little").T.copy()
        filter_mask = [int.from_bytes(row.tobytes(), "little") for row in packed]
    else:
        filter_mask = [0] * matching.table.shape[1]
    link_broker = overlay.link_broker.tolist()
    reverse = overlay.link_reverse.tolist()
    mask = [0] * len(link_broker)
    for s, f in enumerate(matching.filter_class.tolist()):
        mask[int(overlay.subscriber_link[s])] = filter_mask[f]
    local = [0] * len(overlay.broker_ids)  # per broker: the keys its own subscribers match
    ahead: list[list[int]] = []
    for b, links in enumerate(out_links):
        m = 0
        for j in links:
            if link_broker[j] < 0:
                m |= mask[j]
        local[b] = m
        ahead.append([j for j in links if link_broker[j] >= 0])
    for i in _children_first(overlay, out_links):
        b = link_broker[i]
        m = local[b]
        for j in ahead[b]:
            if j != reverse[i]:
                m |= mask[j]
        mask[i] = m
    return mask


def compile_routes(overlay: Overlay, matching: Matching) -> RouteTree:
    """The potential routes of every content entry as one tree of paths per publisher, with no
    per-(link, subscriber) or per-(content key, hop) arrays (see :class:`RouteTree`).

    Raises
    ------
    ValueError
        When a publisher's events could travel more than 200,000 distinct paths to brokers (a
        DAG with too many paths; a tree has at most one path per broker).

    Examples
    --------
    >>> zero = {"kind": "deterministic", "value": 0}
    >>> link = lambda a, b: {"from": a, "to": b, "reliability": 1, "delay_ms": zero}
    >>> system = {"brokers": [{"id": b, "service_ms": zero} for b in ("b1", "b2", "b3")],
    ...           "links": [link("p", "b1"), link("b1", "b2"), link("b2", "b1"), link("b1", "b3"),
    ...                     link("b2", "x"), link("b3", "y")],
    ...           "publishers": [{"id": "p", "broker": "b1", "interarrival_ms": zero | {"value": 1},
    ...                           "content": [{"p": 1, "lifetime_ms": 1, "attributes": {"t": 1}}]}],
    ...           "subscribers": [{"id": "x", "broker": "b2", "filter": "yes"},
    ...                           {"id": "y", "broker": "b3", "filter": "no"}]}
    >>> overlay = validate_system(system, lambda text, attributes: True)
    >>> tree = compile_routes(overlay, match_content(overlay, lambda text, attributes: text == "yes"))
    >>> tree.node_broker.tolist(), tree.node_parent.tolist(), tree.leaf_subscriber.tolist()  # b3 leads to no match
    ([0, 1], [-1, 0], [0])
    """
    n_keys = len(overlay.content_p)
    n_pubs = len(overlay.publisher_ids)
    out_links = _out_links(overlay)
    masks = _link_key_masks(overlay, matching, out_links)
    link_broker = overlay.link_broker.tolist()
    reverse = overlay.link_reverse.tolist()
    to_brokers = [[j for j in links if link_broker[j] >= 0] for links in out_links]
    pub_mask = [0] * n_pubs
    for k, p in enumerate(overlay.content_publisher.tolist()):
        pub_mask[p] |= 1 << k

    publisher: list[int] = []
    last_link: list[int] = []
    parent: list[int] = []
    depth: list[int] = []
    key_mask: list[int] = []
    count = [0] * n_pubs
    frontier = [(p, int(overlay.publisher_link[p]), -1, pub_mask[p]) for p in range(n_pubs)]
    level = 0
    while frontier:
        ahead: list[tuple[int, int, int, int]] = []
        for p, link, up, keys in frontier:
            node = len(publisher)
            publisher.append(p)
            last_link.append(link)
            parent.append(up)
            depth.append(level)
            key_mask.append(keys)
            count[p] += 1
            if count[p] > _MAX_ROUTE_HOPS:
                raise _fail(
                    f"publishers[{p}] ('{overlay.publisher_ids[p]}')",
                    f"its events can travel more than {_MAX_ROUTE_HOPS} distinct paths: the broker network has too "
                    "many distinct paths (use a tree)",
                )
            back = reverse[link]
            for j in to_brokers[link_broker[link]]:
                if j != back:
                    below = masks[j] & pub_mask[p]
                    if below:
                        ahead.append((p, j, node, below))
        frontier = ahead
        level += 1

    keys_of: dict[int, IntArray] = {}
    node_keys: list[IntArray] = []
    for m in key_mask:
        found = keys_of.get(m)
        if found is None:
            found = keys_of[m] = _key_bits(m, n_keys)
        node_keys.append(found)
    sizes = np.array([len(k) for k in node_keys], dtype=np.int64)
    node_key_offset = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    node_key = np.concatenate(node_keys).astype(np.int64) if node_keys else np.zeros(0, dtype=np.int64)

    # Leaves: a node's subscribers that match some content of its publisher.
    node_publisher = np.array(publisher, dtype=np.int64)
    node_link = np.array(last_link, dtype=np.int64)
    node_broker = overlay.link_broker[node_link] if len(node_link) else np.zeros(0, dtype=np.int64)
    pub_onehot = np.zeros((n_keys, n_pubs), dtype=np.int64)
    pub_onehot[np.arange(n_keys), overlay.content_publisher] = 1
    any_of_pub = (matching.table[matching.key_class].T.astype(np.int64) @ pub_onehot) > 0  # (filters, publishers)
    home = overlay.link_source_broker[overlay.subscriber_link]
    by_home = np.argsort(home, kind="stable")
    start = np.searchsorted(home[by_home], np.arange(len(overlay.broker_ids) + 1))
    lo, hi = start[node_broker], start[node_broker + 1]
    n_cand = hi - lo
    cand_node = np.repeat(np.arange(len(node_broker), dtype=np.int64), n_cand)
    first = np.repeat(lo - (np.cumsum(n_cand) - n_cand), n_cand)
    cand_sub = by_home[np.arange(int(n_cand.sum()), dtype=np.int64) + first] if len(cand_node) else cand_node
    keep = any_of_pub[matching.filter_class[cand_sub], node_publisher[cand_node]]
    return RouteTree(
        node_publisher=node_publisher,
        node_link=node_link,
        node_broker=node_broker.astype(np.int64),
        node_parent=np.array(parent, dtype=np.int64),
        node_depth=np.array(depth, dtype=np.int64),
        node_key_offset=node_key_offset,
        node_key=node_key,
        leaf_node=cand_node[keep].astype(np.int64),
        leaf_subscriber=cand_sub[keep].astype(np.int64),
    )


def compile_system(system: Mapping[str, object], matcher: Matcher) -> Network:
    """Validate a SPEC §4 system document and propagate its filters, densely (the simulator's
    input; ``routing.reliability.qos.predict`` uses the sparse :func:`compile_routes` instead).

    Parameters
    ----------
    system : mapping
        The JSON document: ``brokers``, ``links``, ``publishers``, ``subscribers``.
    matcher : callable
        ``matcher(filter_text, attributes) -> bool``; called once per distinct filter with empty
        attributes (to validate it) and once per (distinct filter, distinct attribute set),
        or once in all through ``match_many`` (:class:`BulkMatcher`).

    Returns
    -------
    Network

    Raises
    ------
    ValueError
        As :func:`validate_system` and :func:`match_content` do, or when one content entry has
        more than 200,000 potential hops (a DAG with too many paths).

    Examples
    --------
    >>> zero = {"kind": "deterministic", "value": 0}
    >>> system = {"brokers": [{"id": "b1", "service_ms": zero}],
    ...           "links": [{"from": "p1", "to": "b9", "reliability": 1, "delay_ms": zero}],
    ...           "publishers": [], "subscribers": []}
    >>> compile_system(system, lambda text, attributes: True)
    Traceback (most recent call last):
    ...
    ValueError: links[0]: 'from' names no publisher or broker ('p1'); known: b1
    """
    overlay = validate_system(system, matcher)
    matching = match_content(overlay, matcher)
    out_links = _out_links(overlay)
    masks = _link_key_masks(overlay, matching, out_links)
    link_broker = overlay.link_broker.tolist()
    reverse = overlay.link_reverse.tolist()
    n_links, n_subs = len(link_broker), len(overlay.subscriber_ids)

    # downstream[l] = subscribers reachable through l, children before parents.
    downstream = np.zeros((n_links, n_subs), dtype=np.bool_)
    downstream[overlay.subscriber_link, np.arange(n_subs)] = True
    for i in _children_first(overlay, out_links):
        for j in out_links[link_broker[i]]:
            if j != reverse[i]:
                downstream[i] |= downstream[j]

    # Potential routes per content key: the event crosses link l iff some subscriber downstream
    # of l matches it; the publisher's own link is always crossed (the home broker matches
    # every event it receives).
    route_offset = [0]
    route_link: list[int] = []
    route_parent: list[int] = []
    route_depth: list[int] = []
    used_links: set[int] = set()
    for k, (p, j) in enumerate(zip(overlay.content_publisher.tolist(), overlay.content_index.tolist(), strict=True)):
        bit = 1 << k
        hops = [(int(overlay.publisher_link[p]), -1, 0)]
        h = 0
        while h < len(hops):
            link, _parent, depth = hops[h]
            b = link_broker[link]
            if b >= 0:
                hops.extend((i, h, depth + 1) for i in out_links[b] if i != reverse[link] and masks[i] & bit)
            if len(hops) > _MAX_ROUTE_HOPS:
                raise _fail(
                    f"publishers[{p}] ('{overlay.publisher_ids[p]}')",
                    f"content[{j}] has more than {_MAX_ROUTE_HOPS} potential hops: the broker "
                    "network has too many distinct paths (use a tree)",
                )
            h += 1
        for link, parent, depth in hops:
            route_link.append(link)
            route_parent.append(parent)
            route_depth.append(depth)
            used_links.add(link)
        route_offset.append(len(route_link))

    edges: list[set[int]] = [set() for _ in overlay.broker_ids]
    for i in used_links:
        if overlay.link_source_broker[i] >= 0 and link_broker[i] >= 0:
            edges[int(overlay.link_source_broker[i])].add(link_broker[i])
    components = tuple(tuple(c) for c in _strong_components(len(overlay.broker_ids), edges))

    fields = {f.name: getattr(overlay, f.name) for f in dataclasses.fields(Overlay)}
    return Network(
        **fields,
        match=matching.dense(),
        downstream=downstream,
        route_offset=np.array(route_offset, dtype=np.int64),
        route_link=np.array(route_link, dtype=np.int64),
        route_parent=np.array(route_parent, dtype=np.int64),
        route_depth=np.array(route_depth, dtype=np.int64),
        components=components,
    )


# --------------------------------------------------------------------------------------------
# The random inputs, all drawn before any timing is computed
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Draws:
    """Every random input of one run: events and their potential transmissions ("rows").

    Events are sorted by publication time. A row is one hop of the event's potential route
    (its content's route, :attr:`Network.route_link`); rows of an event are contiguous with
    parents before children. Whether a row is actually transmitted depends on the losses
    upstream of it, never on timing.

    Attributes
    ----------
    seconds, warmup_s : float
        Counting window [0, seconds); publications run over [-warmup_s, seconds + warmup_s).
    event_publisher, event_key : int array
        Per event, its publisher and content key.
    published_at_ms : float array
        Per event, the publication time (ms; negative during warm-up).
    row_event, row_link, row_parent, row_depth : int array
        Per row: its event, link, parent row (-1 for the publisher's link) and depth.
    row_lost : bool array
        Per row, whether the transmission is lost (if it happens).
    row_delay_ms : float array
        Per row, the link delay draw.
    row_service_ms : float array
        Per row ending at a broker, the service draw there; NaN for rows ending at a subscriber.
    """

    seconds: float
    warmup_s: float
    event_publisher: IntArray
    event_key: IntArray
    published_at_ms: FloatArray
    row_event: IntArray
    row_link: IntArray
    row_parent: IntArray
    row_depth: IntArray
    row_lost: BoolArray
    row_delay_ms: FloatArray
    row_service_ms: FloatArray

    @property
    def counted(self) -> BoolArray:
        """Per event: published in the counting window [0, seconds)."""
        t = self.published_at_ms
        out: BoolArray = (t >= 0.0) & (t < self.seconds * 1000.0)
        return out


def _renewal_times(dist: Distribution, start: float, end: float, rng: np.random.Generator) -> FloatArray:
    """Renewal epochs in [start, end): first one at start + U * I_0 (a uniformly random phase,
    exactly stationary for periodic publishers), then cumulative inter-arrival draws."""
    mean = dist.mean
    first = start + rng.random() * float(dist.sample(rng, 1)[0])
    chunks = [np.array([first])]
    last = first
    while last < end:
        n = int((end - last) / mean * 1.05) + 16
        steps = last + np.cumsum(dist.sample(rng, n))
        chunks.append(steps)
        last = float(steps[-1])
    times = np.concatenate(chunks)
    out: FloatArray = times[times < end]
    return out


def draw_inputs(network: Network, seconds: float, seed: int, warmup_s: float | None = None) -> Draws:
    """Draw every random input of a run, in a fixed order, from ``numpy.random.default_rng(seed)``.

    The order: per publisher its publication times, then its events' content entries; then one
    loss draw per potential transmission; then link delays, link by link; then service times,
    broker by broker. Each publisher starts at -warmup_s with a uniformly random phase, so
    periodic publishers are not in step.

    Parameters
    ----------
    network : Network
    seconds : float
        Length of the counting window [0, seconds) of simulated time.
    seed : int
    warmup_s : float, optional
        Warm-up (and cool-down) length; default 10% of ``seconds``, at most 300 s.

    Returns
    -------
    Draws

    Examples
    --------
    >>> system = {"brokers": [{"id": "b", "service_ms": {"kind": "deterministic", "value": 1}}],
    ...           "links": [{"from": "p", "to": "b", "reliability": 1,
    ...                      "delay_ms": {"kind": "deterministic", "value": 0}}],
    ...           "publishers": [{"id": "p", "broker": "b", "interarrival_ms": {"kind": "deterministic", "value": 100},
    ...                           "content": [{"p": 1, "lifetime_ms": 10, "attributes": {}}]}],
    ...           "subscribers": []}
    >>> draws = draw_inputs(compile_system(system, lambda t, a: True), seconds=1.0, seed=0, warmup_s=0.0)
    >>> len(draws.published_at_ms), int(draws.counted.sum())
    (10, 10)
    """
    if not (seconds > 0.0 and math.isfinite(seconds)):
        raise ValueError(f"seconds must be a finite number > 0 (got {seconds!r})")
    warm = min(0.1 * seconds, 300.0) if warmup_s is None else float(warmup_s)
    if not (warm >= 0.0 and math.isfinite(warm)):
        raise ValueError(f"warmup_s must be a finite number >= 0 (got {warmup_s!r})")
    rng = np.random.default_rng(seed)
    start, end = -warm * 1000.0, (seconds + warm) * 1000.0

    times: list[FloatArray] = []
    pubs: list[IntArray] = []
    keys: list[IntArray] = []
    for p, dist in enumerate(network.interarrival):
        t = _renewal_times(dist, start, end, rng)
        own = np.flatnonzero(network.content_publisher == p)
        cum = np.cumsum(network.content_p[own])
        pick = np.minimum(np.searchsorted(cum, rng.random(len(t)) * cum[-1], side="right"), len(own) - 1)
        times.append(t)
        pubs.append(np.full(len(t), p, dtype=np.int64))
        keys.append(own[pick].astype(np.int64))
    published = np.concatenate(times) if times else np.zeros(0)
    publisher = np.concatenate(pubs) if pubs else np.zeros(0, dtype=np.int64)
    key = np.concatenate(keys) if keys else np.zeros(0, dtype=np.int64)
    order = np.lexsort((publisher, published))
    published, publisher, key = published[order], publisher[order], key[order]

    # Rows: every event's potential route, laid out contiguously.
    lengths = (network.route_offset[1:] - network.route_offset[:-1])[key]
    n_rows = int(lengths.sum())
    event_start = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    row_event = np.repeat(np.arange(len(key), dtype=np.int64), lengths)
    local = np.arange(n_rows, dtype=np.int64) - event_start[row_event]
    hop = network.route_offset[key][row_event] + local
    row_link = network.route_link[hop]
    parent_local = network.route_parent[hop]
    row_parent = np.where(parent_local >= 0, event_start[row_event] + parent_local, -1)
    row_depth = network.route_depth[hop]

    row_lost = rng.random(n_rows) >= network.link_reliability[row_link]
    row_delay = np.zeros(n_rows)
    by_link = np.argsort(row_link, kind="stable")
    bounds = np.concatenate(([0], np.cumsum(np.bincount(row_link, minlength=len(network.link_from)))))
    for link, dist in enumerate(network.link_delay):
        rows = by_link[bounds[link] : bounds[link + 1]]
        row_delay[rows] = dist.sample(rng, len(rows))
    row_service = np.full(n_rows, np.nan)
    row_broker = network.link_broker[row_link]
    at_broker = np.flatnonzero(row_broker >= 0)
    by_broker = at_broker[np.argsort(row_broker[at_broker], kind="stable")]
    bounds = np.concatenate(([0], np.cumsum(np.bincount(row_broker[at_broker], minlength=len(network.broker_ids)))))
    for b, dist in enumerate(network.service):
        rows = by_broker[bounds[b] : bounds[b + 1]]
        row_service[rows] = dist.sample(rng, len(rows))

    return Draws(
        seconds=float(seconds),
        warmup_s=warm,
        event_publisher=publisher,
        event_key=key,
        published_at_ms=published,
        row_event=row_event,
        row_link=row_link,
        row_parent=row_parent,
        row_depth=row_depth,
        row_lost=row_lost,
        row_delay_ms=row_delay,
        row_service_ms=row_service,
    )


# --------------------------------------------------------------------------------------------
# Timing: the vectorised solver and the event-driven reference
# --------------------------------------------------------------------------------------------


TICKS_PER_MS = 1_000_000
"""The solvers compute in integer ticks of 1 ns: sums and maxima are then exact, so the result
does not depend on how the work is batched, and the vectorised solver and the event-driven
reference agree bit for bit."""

_NEVER = np.iinfo(np.int64).max // 4  # "not (yet) at this broker": later than any real time
_IDLE = -_NEVER  # "the server has been idle since forever"


def _ticks(ms: FloatArray) -> IntArray:
    out: IntArray = np.rint(ms * TICKS_PER_MS).astype(np.int64)
    return out


def _ms(ticks: IntArray, valid: BoolArray) -> FloatArray:
    out: FloatArray = np.where(valid, ticks / TICKS_PER_MS, np.nan)
    return out


@dataclass(frozen=True, eq=False)
class Schedule:
    """The times of one run, per row of :class:`Draws`, in integer ticks (:data:`TICKS_PER_MS`).

    Attributes
    ----------
    sent : bool array
        The transmission happened (the parent row arrived, or it is the publisher's link).
    arrived : bool array
        ``sent`` and not lost.
    at_broker : bool array
        The row's link ends at a broker (else at a subscriber).
    sent_at, arrived_at : int array
        Send and arrival time; meaningful where ``sent`` / ``arrived``.
    departed_at : int array
        For rows that arrived at a broker, when its service there ended.
    sweeps : int
        Relaxation sweeps spent on cyclic components (0 when the broker graph is acyclic).
    fallback : bool
        Whether some component fell back to the event-driven loop.
    """

    sent: BoolArray
    arrived: BoolArray
    at_broker: BoolArray
    sent_at: IntArray
    arrived_at: IntArray
    departed_at: IntArray
    sweeps: int = 0
    fallback: bool = False

    @property
    def sent_at_ms(self) -> FloatArray:
        """Send times in ms, NaN where not sent."""
        return _ms(self.sent_at, self.sent)

    @property
    def arrived_at_ms(self) -> FloatArray:
        """Arrival times in ms, NaN where not arrived."""
        return _ms(self.arrived_at, self.arrived)

    @property
    def departed_at_ms(self) -> FloatArray:
        """Departure times from the broker in ms, NaN where the row is no broker visit."""
        return _ms(self.departed_at, self.arrived & self.at_broker)


def fifo_departures(arrivals: NDArray[_T], services: NDArray[_T]) -> NDArray[_T]:
    """Departure times of a FIFO single server, customers in arrival order.

    The Lindley recursion D_n = max(A_n, D_{n-1}) + S_n unrolls to
    D_n = C_n + max_{k <= n} (A_k - C_{k-1}) with C_n = S_1 + ... + S_n, which is two cumulative
    numpy passes (the trace-driven form of QUEUEING-NOTES §5.2, as in Ebert et al.'s
    queuecomputer, JSS 95(5), 2020). Exact for integer times.

    Parameters
    ----------
    arrivals : array
        A_n, non-decreasing.
    services : array
        S_n, the service time of customer n.

    Returns
    -------
    array
        D_n.

    Examples
    --------
    >>> fifo_departures(np.array([0, 1, 10]), np.array([5, 2, 1])).tolist()
    [5, 7, 11]
    """
    cs = np.cumsum(services)
    out: NDArray[_T] = cs + np.maximum.accumulate(arrivals - (cs - services))
    return out


def _segment_fifo(arrivals: IntArray, services: IntArray, brokers: IntArray, last: IntArray) -> IntArray:
    """:func:`fifo_departures` for several servers at once, server b busy until ``last[b]``.

    Rows come sorted by (broker, arrival). With D_0 = last[b] and C counted within the server's
    rows, D_n = C_n + max(D_0, max_{k <= n} (A_k - C_{k-1})). One ``maximum.accumulate`` serves
    every server by lifting server b's values by b * span, span exceeding their spread, so that
    no server's running maximum sees another's (exact in integers).
    """
    cs = np.cumsum(services)
    before = cs - services
    before -= before[np.searchsorted(brokers, brokers)]  # C_{n-1} within the server's rows
    x = arrivals - before
    lift = brokers * (x.max() - x.min() + 1)
    x += lift
    running = np.maximum.accumulate(x)
    running -= lift
    np.maximum(running, last[brokers], out=running)
    running += before
    running += services
    return running


@dataclass(frozen=True)
class _Rows:
    """Per-row inputs of the solvers, in ticks."""

    parent: IntArray
    delay: IntArray
    service: IntArray  # 0 for rows ending at a subscriber
    broker: IntArray  # broker the row ends at, -1 for a subscriber
    pub_at: IntArray  # publication time of the row's event
    visit: BoolArray  # the row arrived at a broker


def _reachability(draws: Draws) -> tuple[BoolArray, BoolArray]:
    n = len(draws.row_link)
    sent = np.zeros(n, dtype=np.bool_)
    arrived = np.zeros(n, dtype=np.bool_)
    sent[draws.row_parent < 0] = True
    for depth in range(int(draws.row_depth.max(initial=0)) + 1):
        rows = np.flatnonzero(draws.row_depth == depth)
        if depth > 0:
            sent[rows] = arrived[draws.row_parent[rows]]
        arrived[rows] = sent[rows] & ~draws.row_lost[rows]
    return sent, arrived


def _rows(network: Network, draws: Draws, arrived: BoolArray) -> _Rows:
    broker = network.link_broker[draws.row_link]
    return _Rows(
        parent=draws.row_parent,
        delay=_ticks(draws.row_delay_ms),
        service=_ticks(np.nan_to_num(draws.row_service_ms)),
        broker=broker,
        pub_at=_ticks(draws.published_at_ms)[draws.row_event],
        visit=arrived & (broker >= 0),
    )


def _finish(rows: _Rows, sent: BoolArray, arrived: BoolArray, dep: IntArray, sweeps: int, fallback: bool) -> Schedule:
    has_parent = rows.parent >= 0
    sent_at = np.where(has_parent, dep[np.maximum(rows.parent, 0)], rows.pub_at)
    sent_at = np.where(sent, sent_at, 0)
    arrived_at = np.where(arrived, sent_at + rows.delay, 0)
    departed = np.where(rows.visit, dep, 0)
    return Schedule(sent, arrived, rows.broker >= 0, sent_at, arrived_at, departed, sweeps, fallback)


def _relax_component(
    component: Sequence[int], rows: _Rows, dep: IntArray, window_rows: int, max_sweeps: int
) -> int | None:
    """Departure times of the visits to a cyclic broker component, by windowed relaxation.

    Visits enter in order of a lower bound on their arrival (no queueing inside the component:
    lb(r) = lb(parent) + S(parent) + L(r)). A window takes the next ``window_rows`` of them, up
    to tau (the next lower bound), plus the visits still pending; Jacobi sweeps then recompute
    every broker's FIFO departures, over the visits whose current arrival is before tau,
    starting from each broker's last final departure, until nothing changes.

    Why the fixed point is the true schedule, and why the sweeps reach it: a visit's departure
    depends only on arrivals ahead of it at its broker, and its arrival on its parent's
    departure, which is at least S + L earlier. Take the earliest time t at which the current
    values and the true ones differ (a visit present at t in one and not the other, or at
    other times). Everything before t agrees, so a sweep reproduces the true values up to at
    least t + min(S + L): the horizon of agreement grows every sweep until the window is exact.
    Every true arrival before tau is among the candidates, since its lower bound is below tau.
    Integer ticks keep this true of the computed values, not only of exact arithmetic.

    Returns the number of sweeps, or None when a window did not settle within ``max_sweeps``
    (possible only when S + L can be 0).
    """
    members = np.zeros(int(rows.broker.max(initial=-1)) + 2, dtype=np.bool_)
    members[list(component)] = True
    mine = np.flatnonzero(rows.visit & members[rows.broker])
    if len(mine) == 0:
        return 0
    parent = rows.parent[mine]
    has_parent = parent >= 0
    safe_parent = np.maximum(parent, 0)
    inside = has_parent & rows.visit[safe_parent] & members[rows.broker[safe_parent]]
    # Entries from outside arrive at known times: publication, or an upstream component's departure.
    entry = np.where(has_parent, dep[safe_parent], rows.pub_at[mine]) + rows.delay[mine]
    n = len(rows.parent)
    lb = np.full(n, _NEVER)
    lb[mine[~inside]] = entry[~inside]
    todo = mine[inside]
    while len(todo):  # parents before children: each pass settles one more generation
        ready = lb[rows.parent[todo]] < _NEVER
        r = todo[ready]
        lb[r] = lb[rows.parent[r]] + rows.service[rows.parent[r]] + rows.delay[r]
        todo = todo[~ready]
    by_lb = mine[np.argsort(lb[mine], kind="stable")]

    position = np.full(n, -1, dtype=np.int64)  # row -> index among the window's candidates
    last = np.full(len(members), _IDLE, dtype=np.int64)  # last final departure per broker
    pending = np.zeros(0, dtype=np.int64)
    taken = 0
    sweeps = 0
    while taken < len(by_lb) or len(pending):
        upto = min(taken + window_rows, len(by_lb))
        tau = int(lb[by_lb[upto]]) if upto < len(by_lb) else _NEVER
        cand = np.sort(np.concatenate((pending, by_lb[taken:upto])))
        taken = upto
        position[cand] = np.arange(len(cand))
        cpar = rows.parent[cand]
        ppos = np.where(cpar >= 0, position[np.maximum(cpar, 0)], -1)
        internal = ppos >= 0  # the parent is a candidate too: its departure is being solved
        delay = rows.delay[cand]
        arrive = np.where(cpar >= 0, dep[np.maximum(cpar, 0)], rows.pub_at[cand]) + delay
        ip, idelay = ppos[internal], delay[internal]
        cb, cs = rows.broker[cand], rows.service[cand]
        # Start from the departures without queueing: exact wherever nothing queued, so only
        # the corrections queueing causes have to travel from sweep to sweep.
        current = np.minimum(lb[cand] + cs, _NEVER)
        for _ in range(max_sweeps):
            sweeps += 1
            arrive[internal] = current[ip] + idelay
            inw = np.flatnonzero(arrive < tau)
            new = np.full(len(cand), _NEVER)
            if len(inw):
                order = inw[np.lexsort((arrive[inw], cb[inw]))]
                new[order] = _segment_fifo(arrive[order], cs[order], cb[order], last)
            if np.array_equal(new, current):
                break
            current = new
        else:
            return None
        final = current < _NEVER
        dep[cand[final]] = current[final]
        np.maximum.at(last, cb[final], current[final])  # a server's last departure is its latest
        position[cand] = -1
        pending = cand[~final]
    return sweeps


def _event_loop(rows: _Rows, dep: IntArray, brokers: Sequence[int] | None) -> None:
    """Departure times of the visits to ``brokers`` (all when None) by one heap of arrivals in
    (time, row) order, each broker a FIFO server: D = max(A, D_prev) + S. Visits elsewhere must
    already have their departures in ``dep``."""
    n = len(rows.parent)
    n_brokers = int(rows.broker.max(initial=-1)) + 1
    members = [brokers is None] * n_brokers
    for b in brokers or ():
        members[b] = True
    broker = rows.broker.tolist()
    parent = rows.parent.tolist()
    visit = rows.visit.tolist()
    delay = rows.delay.tolist()
    service = rows.service.tolist()
    pub_at = rows.pub_at.tolist()
    out = dep.tolist()
    children: list[list[int]] = [[] for _ in range(n)]
    heap: list[tuple[int, int]] = []
    for row in range(n):
        b = broker[row]
        if b < 0 or not visit[row] or not members[b]:
            continue
        par = parent[row]
        if par >= 0 and members[broker[par]]:
            children[par].append(row)
        else:
            heap.append(((out[par] if par >= 0 else pub_at[row]) + delay[row], row))
    heapq.heapify(heap)
    last = [-(2**62)] * n_brokers
    while heap:
        t, row = heapq.heappop(heap)
        b = broker[row]
        d = max(t, last[b]) + service[row]
        last[b] = d
        out[row] = d
        for child in children[row]:
            heapq.heappush(heap, (d + delay[child], child))
    dep[:] = out


def solve(network: Network, draws: Draws, *, window_rows: int = 512, max_sweeps: int = 100_000) -> Schedule:
    """Event times of a run, vectorised (see the module docstring).

    Components of the broker graph are taken in topological order. A single broker is one FIFO
    pass (:func:`fifo_departures`) over its arrivals, whose times are final once the upstream
    components are. A cyclic component (brokers linked both ways) is solved by windowed
    relaxation (:func:`_relax_component`); should a window not settle within ``max_sweeps``
    sweeps, the component goes to the event-driven loop of :func:`solve_reference`.

    Parameters
    ----------
    network : Network
    draws : Draws
    window_rows : int
        Visits admitted per relaxation window. A speed knob only (the result does not depend on
        it): sweeps per window grow with the time a window spans, the cost of a sweep with its
        size; 512 is within about 20% of the best from 1 to 100 events/s per publisher.
    max_sweeps : int
        Sweeps allowed per window before falling back.

    Returns
    -------
    Schedule
        Identical to :func:`solve_reference`'s.
    """
    sent, arrived = _reachability(draws)
    rows = _rows(network, draws, arrived)
    dep = np.zeros(len(rows.parent), dtype=np.int64)
    visit_rows = np.flatnonzero(rows.visit)
    by_broker = visit_rows[np.argsort(rows.broker[visit_rows], kind="stable")]
    bounds = np.concatenate(([0], np.cumsum(np.bincount(rows.broker[visit_rows], minlength=len(network.broker_ids)))))
    sweeps = 0
    fallback = False
    for component in network.components:
        if len(component) == 1:
            # rows in row order: the stable sort breaks ties in arrival by row, as the heap does
            mine = by_broker[bounds[component[0]] : bounds[component[0] + 1]]
            if len(mine) == 0:
                continue
            par = rows.parent[mine]
            arrive = np.where(par >= 0, dep[np.maximum(par, 0)], rows.pub_at[mine]) + rows.delay[mine]
            order = np.argsort(arrive, kind="stable")
            dep[mine[order]] = fifo_departures(arrive[order], rows.service[mine[order]])
            continue
        spent = _relax_component(component, rows, dep, window_rows, max_sweeps)
        if spent is None:
            fallback = True
            _event_loop(rows, dep, component)
        else:
            sweeps += spent
    return _finish(rows, sent, arrived, dep, sweeps, fallback)


def solve_reference(network: Network, draws: Draws) -> Schedule:
    """Event times of a run by a plain event-driven simulation: one heap of arrivals ordered by
    (time, row), each broker a FIFO server (D = max(A, D_prev) + S), one event at a time.

    This is the oracle for :func:`solve` (CONVENTIONS 6); it shares only the draws and the
    reachability of rows (which depends on losses alone) with it. It is also the fallback of
    :func:`solve` for a component whose relaxation does not settle.

    Parameters
    ----------
    network : Network
    draws : Draws

    Returns
    -------
    Schedule
    """
    sent, arrived = _reachability(draws)
    rows = _rows(network, draws, arrived)
    dep = np.zeros(len(rows.parent), dtype=np.int64)
    _event_loop(rows, dep, None)
    return _finish(rows, sent, arrived, dep, 0, False)


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SubscriberStats:
    """What subscriber s measured over events published in [0, seconds).

    Attributes
    ----------
    reliability : float
        R_s = on_time / matching; NaN when no matching event was published.
    on_time : int
        Matching events that reached s within their lifetime.
    delivered : int
        Matching events that reached s at all (late ones included).
    matching : int
        Events that match s's filter.
    mean_delay_ms, p95_delay_ms : float
        Over delivered events, publication to (first) arrival; NaN when none was delivered.
    """

    reliability: float
    on_time: int
    delivered: int
    matching: int
    mean_delay_ms: float
    p95_delay_ms: float


@dataclass(frozen=True)
class BrokerStats:
    """What broker b measured over arrivals in [0, seconds).

    Attributes
    ----------
    arrival_rate_per_s : float
        Events received per second.
    rho : float
        Measured busy fraction of [0, seconds).
    mean_wait_ms : float
        Mean time in queue before service (0 when nothing arrived).
    mean_service_ms : float
        Mean service time of those events (0 when nothing arrived).
    arrivals : int
        Events received.
    """

    arrival_rate_per_s: float
    rho: float
    mean_wait_ms: float
    mean_service_ms: float
    arrivals: int


@dataclass(frozen=True, eq=False)
class LinkSamples:
    """One row per transmission (SiftStream ``LinkSample``), sorted by link then ``seq``.

    ``link`` indexes :attr:`Telemetry.link_from` / :attr:`Telemetry.link_to`; ``seq`` numbers a
    link's transmissions from 0 in sending order; ``delay_ms`` is NaN when ``lost``.
    """

    link: IntArray
    seq: IntArray
    sent_at_ms: FloatArray
    delay_ms: FloatArray
    lost: BoolArray
    event: IntArray


@dataclass(frozen=True, eq=False)
class BrokerSamples:
    """One row per event processed by a broker (SiftStream ``BrokerSample``), sorted by broker
    then arrival; ``queue_length`` counts the events waiting (not in service) when it arrived."""

    broker: IntArray
    event: IntArray
    arrived_at_ms: FloatArray
    wait_ms: FloatArray
    service_ms: FloatArray
    queue_length: IntArray


@dataclass(frozen=True, eq=False)
class Receipts:
    """One row per arrival at a subscriber (SiftStream ``Receipt``), late ones included, sorted
    by arrival time."""

    subscriber: IntArray
    event: IntArray
    received_at_ms: FloatArray


@dataclass(frozen=True, eq=False)
class EventTable:
    """One row per published event (SiftStream ``Event``), warm-up and cool-down included; the
    row number is the event index the other tables use. ``content`` is the position in the
    publisher's ``content`` list, whose ``attributes`` the event carries."""

    publisher: IntArray
    content: IntArray
    published_at_ms: FloatArray
    lifetime_ms: FloatArray


@dataclass(frozen=True, eq=False)
class Telemetry:
    """Column tables of everything a run did; times are ms from the start of the counting window.

    Integer columns index ``broker_ids``, ``subscriber_ids``, ``publisher_ids`` and the link
    arrays ``link_from`` / ``link_to``.
    """

    broker_ids: tuple[str, ...]
    publisher_ids: tuple[str, ...]
    subscriber_ids: tuple[str, ...]
    link_from: tuple[str, ...]
    link_to: tuple[str, ...]
    links: LinkSamples
    brokers: BrokerSamples
    receipts: Receipts
    events: EventTable


@dataclass(frozen=True)
class SimulationResult:
    """The measurements of one run.

    Attributes
    ----------
    seconds, warmup_s : float
    seed : int
    subscribers : dict of str to SubscriberStats
    brokers : dict of str to BrokerStats
    event_hops : int
        Transmissions simulated (lost ones and warm-up included): the work measure.
    events : int
        Events simulated (warm-up included).
    sweeps : int
        Gauss-Seidel sweeps of the timing solver.
    warnings : tuple of str
    telemetry : Telemetry or None
    """

    seconds: float
    warmup_s: float
    seed: int
    subscribers: dict[str, SubscriberStats]
    brokers: dict[str, BrokerStats]
    event_hops: int
    events: int
    sweeps: int
    warnings: tuple[str, ...] = ()
    telemetry: Telemetry | None = field(default=None, repr=False)


def measure(network: Network, draws: Draws, schedule: Schedule) -> SimulationResult:
    """Per-subscriber and per-broker measurements of a solved run, without telemetry.

    Parameters
    ----------
    network : Network
    draws : Draws
    schedule : Schedule
        From :func:`solve` or :func:`solve_reference` on these draws.

    Returns
    -------
    SimulationResult
        With ``seed`` 0 (the draws do not record theirs).
    """
    return _measure(network, draws, schedule, 0, False)


def _measure(network: Network, draws: Draws, schedule: Schedule, seed: int, telemetry: bool) -> SimulationResult:
    window = round(draws.seconds * 1000.0 * TICKS_PER_MS)
    counted = draws.counted
    n_keys, n_subs = network.match.shape
    per_key = np.bincount(draws.event_key[counted], minlength=n_keys).astype(np.int64)
    matching = per_key @ network.match.astype(np.int64)
    published = _ticks(draws.published_at_ms)
    lifetime = _ticks(network.content_lifetime_ms)

    row_sub = network.link_subscriber[draws.row_link]
    got = np.flatnonzero(schedule.arrived & (row_sub >= 0))
    sub, event, when = row_sub[got], draws.row_event[got], schedule.arrived_at[got]
    order = np.lexsort((when, event, sub))
    sub, event, when = sub[order], event[order], when[order]
    first = np.ones(len(sub), dtype=np.bool_)  # the first arrival of an event counts
    first[1:] = (sub[1:] != sub[:-1]) | (event[1:] != event[:-1])
    keep = first & counted[event]
    f_sub, f_event = sub[keep], event[keep]
    delay = when[keep] - published[f_event]
    on_time = delay <= lifetime[draws.event_key[f_event]]
    delay_ms = delay / TICKS_PER_MS

    warnings: list[str] = []
    subscribers: dict[str, SubscriberStats] = {}
    by_sub = np.argsort(f_sub, kind="stable")
    bounds = np.concatenate(([0], np.cumsum(np.bincount(f_sub, minlength=n_subs))))
    for s, sid in enumerate(network.subscriber_ids):
        mine = by_sub[bounds[s] : bounds[s + 1]]
        m = int(matching[s])
        k = int(on_time[mine].sum())
        d = delay_ms[mine]
        if m == 0:
            warnings.append(f"{sid}: no matching event was published in {draws.seconds:g} s; reliability undefined")
        subscribers[sid] = SubscriberStats(
            reliability=k / m if m else math.nan,
            on_time=k,
            delivered=len(mine),
            matching=m,
            mean_delay_ms=float(d.mean()) if len(d) else math.nan,
            p95_delay_ms=float(np.percentile(d, 95)) if len(d) else math.nan,
        )

    visits = np.flatnonzero(schedule.arrived & schedule.at_broker)
    vb = network.link_broker[draws.row_link[visits]]
    arrive = schedule.arrived_at[visits]
    depart = schedule.departed_at[visits]
    service = _ticks(draws.row_service_ms[visits])
    busy = np.clip(depart, 0, window) - np.clip(depart - service, 0, window)
    inside = (arrive >= 0) & (arrive < window)
    n_b = len(network.broker_ids)
    arrivals = np.bincount(vb[inside], minlength=n_b)
    wait_sum = np.bincount(vb[inside], weights=(depart - service - arrive)[inside] / TICKS_PER_MS, minlength=n_b)
    service_sum = np.bincount(vb[inside], weights=service[inside] / TICKS_PER_MS, minlength=n_b)
    busy_sum = np.bincount(vb, weights=busy.astype(np.float64), minlength=n_b)
    brokers: dict[str, BrokerStats] = {}
    for b, bid in enumerate(network.broker_ids):
        a = int(arrivals[b])
        rho = float(busy_sum[b]) / window
        if rho >= _RHO_WARNING:
            warnings.append(f"{bid}: measured rho {rho:.2f} >= {_RHO_WARNING}, the queue may not be stable")
        brokers[bid] = BrokerStats(
            arrival_rate_per_s=a / draws.seconds,
            rho=rho,
            mean_wait_ms=float(wait_sum[b]) / a if a else 0.0,
            mean_service_ms=float(service_sum[b]) / a if a else 0.0,
            arrivals=a,
        )
    if schedule.fallback:
        warnings.append("a cyclic broker component did not settle; its times come from the event-driven loop")

    return SimulationResult(
        seconds=draws.seconds,
        warmup_s=draws.warmup_s,
        seed=seed,
        subscribers=subscribers,
        brokers=brokers,
        event_hops=int(schedule.sent.sum()),
        events=len(draws.published_at_ms),
        sweeps=schedule.sweeps,
        warnings=tuple(warnings),
        telemetry=_telemetry(network, draws, schedule) if telemetry else None,
    )


def _telemetry(network: Network, draws: Draws, schedule: Schedule) -> Telemetry:
    rows = np.flatnonzero(schedule.sent)
    link = draws.row_link[rows]
    sent_at = schedule.sent_at[rows]
    order = np.lexsort((rows, sent_at, link))
    rows, link, sent_at = rows[order], link[order], sent_at[order]
    starts = np.concatenate(([0], np.cumsum(np.bincount(link, minlength=len(network.link_from)))))
    seq = np.arange(len(rows), dtype=np.int64) - starts[link]
    lost = draws.row_lost[rows]
    delay = schedule.arrived_at[rows] - sent_at
    links = LinkSamples(
        link=link,
        seq=seq,
        sent_at_ms=sent_at / TICKS_PER_MS,
        delay_ms=np.where(lost, np.nan, delay / TICKS_PER_MS),
        lost=lost,
        event=draws.row_event[rows],
    )

    visits = np.flatnonzero(schedule.arrived & schedule.at_broker)
    row_broker = network.link_broker[draws.row_link[visits]]
    arrive = schedule.arrived_at[visits]
    order = np.lexsort((visits, arrive, row_broker))
    visits, arrive, broker = visits[order], arrive[order], row_broker[order]
    service = _ticks(draws.row_service_ms[visits])
    start = schedule.departed_at[visits] - service
    queue = np.zeros(len(visits), dtype=np.int64)
    bstarts = np.concatenate(([0], np.cumsum(np.bincount(broker, minlength=len(network.broker_ids)))))
    for b in range(len(network.broker_ids)):
        lo, hi = int(bstarts[b]), int(bstarts[b + 1])
        # waiting when n arrives: the events ahead of n in FIFO order whose service starts
        # after A_n (starts are non-decreasing in FIFO order)
        ahead = np.arange(hi - lo) - np.searchsorted(start[lo:hi], arrive[lo:hi], side="right")
        queue[lo:hi] = np.maximum(ahead, 0)
    brokers = BrokerSamples(
        broker=broker,
        event=draws.row_event[visits],
        arrived_at_ms=arrive / TICKS_PER_MS,
        wait_ms=(start - arrive) / TICKS_PER_MS,
        service_ms=service / TICKS_PER_MS,
        queue_length=queue,
    )

    got = np.flatnonzero(schedule.arrived & ~schedule.at_broker)
    when = schedule.arrived_at[got]
    order = np.lexsort((got, when))
    got, when = got[order], when[order]
    receipts = Receipts(
        subscriber=network.link_subscriber[draws.row_link[got]],
        event=draws.row_event[got],
        received_at_ms=when / TICKS_PER_MS,
    )

    events = EventTable(
        publisher=draws.event_publisher,
        content=network.content_index[draws.event_key],
        published_at_ms=_ticks(draws.published_at_ms) / TICKS_PER_MS,
        lifetime_ms=network.content_lifetime_ms[draws.event_key],
    )
    return Telemetry(
        broker_ids=network.broker_ids,
        publisher_ids=network.publisher_ids,
        subscriber_ids=network.subscriber_ids,
        link_from=network.link_from,
        link_to=network.link_to,
        links=links,
        brokers=brokers,
        receipts=receipts,
        events=events,
    )


def simulate(
    system: Mapping[str, object],
    seconds: float,
    seed: int,
    matcher: Matcher,
    collect_telemetry: bool = False,
    *,
    warmup_s: float | None = None,
) -> SimulationResult:
    """Simulate a SPEC §4 system and measure every subscriber's R_s (``qos simulate``).

    Parameters
    ----------
    system : mapping
        The SPEC §4 system document.
    seconds : float
        Counting window [0, seconds) of simulated time.
    seed : int
        All randomness comes from ``numpy.random.default_rng(seed)``; the same seed gives the
        same result.
    matcher : callable
        ``matcher(filter_text, attributes) -> bool`` (for instance a cached
        ``routing.matching.language.parse_filter(text).matches(attributes)``).
    collect_telemetry : bool
        Also return column tables of every transmission, broker visit, receipt and event.
    warmup_s : float, optional
        Warm-up and cool-down length (default 10% of ``seconds``, at most 300 s).

    Returns
    -------
    SimulationResult
        Per subscriber R_s and delays, per broker load, the work done (``event_hops``: link
        transmissions simulated, lost ones and warm-up included) and, on request, telemetry.

    Raises
    ------
    ValueError
        For an invalid system (see :func:`compile_system`) or run parameters.

    Notes
    -----
    :func:`compile_system`, :func:`draw_inputs`, :func:`solve` and :func:`measure` are the steps;
    call them directly to reuse a compiled network across seeds or to compare solvers.
    """
    network = compile_system(system, matcher)
    draws = draw_inputs(network, seconds, seed, warmup_s)
    schedule = solve(network, draws)
    return _measure(network, draws, schedule, seed, collect_telemetry)


def wilson_interval(successes: int, trials: int, level: float = _WILSON_LEVEL) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion.

    E. B. Wilson, "Probable inference, the law of succession, and statistical inference", JASA
    22(158), 1927: the p with |p_hat - p| <= z sqrt(p (1 - p) / n), z the two-sided normal
    quantile of ``level``.

    Examples
    --------
    >>> [round(x, 4) for x in wilson_interval(90, 100)]  # scipy's binomtest(90, 100).proportion_ci(0.9, 'wilson')
    [0.8396, 0.9393]
    >>> wilson_interval(0, 0)
    (0.0, 1.0)
    """
    if trials <= 0:
        return 0.0, 1.0
    z = float(stats.norm.ppf(0.5 + level / 2.0))
    p = successes / trials
    z2n = z * z / trials
    center = (p + z2n / 2.0) / (1.0 + z2n)
    half = z / (1.0 + z2n) * math.sqrt(p * (1.0 - p) / trials + z2n / (4.0 * trials))
    return max(0.0, center - half), min(1.0, center + half)


def _json_number(x: float) -> float | None:
    return None if math.isnan(x) else x


def to_spec_output(result: SimulationResult) -> dict[str, Any]:
    """The SPEC §4 output document of a simulation run.

    ``reliability_low`` / ``reliability_high`` are the 90% Wilson interval on on_time/matching
    (it ignores the autocorrelation that shared queues cause; QUEUEING-NOTES §4.5). Undefined
    values (no matching events, nothing delivered) are ``None`` (JSON null).

    Examples
    --------
    >>> r = SimulationResult(1.0, 0.0, 0, {"s1": SubscriberStats(0.9, 90, 95, 100, 12.0, 30.0)},
    ...                      {"b1": BrokerStats(100.0, 0.5, 4.0, 5.0, 100)}, 300, 100, 0)
    >>> out = to_spec_output(r)
    >>> out["model"], out["subscribers"]["s1"]["reliability"], round(out["subscribers"]["s1"]["reliability_low"], 3)
    ('simulation', 0.9, 0.84)
    """
    subscribers: dict[str, object] = {}
    for sid, s in result.subscribers.items():
        low, high = wilson_interval(s.on_time, s.matching)
        defined = s.matching > 0
        subscribers[sid] = {
            "reliability": _json_number(s.reliability),
            "reliability_low": low if defined else None,
            "reliability_high": high if defined else None,
            "mean_delay_ms": _json_number(s.mean_delay_ms),
            "p95_delay_ms": _json_number(s.p95_delay_ms),
        }
    brokers: dict[str, object] = {
        bid: {"arrival_rate_per_s": b.arrival_rate_per_s, "rho": b.rho, "mean_wait_ms": b.mean_wait_ms}
        for bid, b in result.brokers.items()
    }
    return {"model": "simulation", "subscribers": subscribers, "brokers": brokers, "warnings": list(result.warnings)}


# --------------------------------------------------------------------------------------------
# The paper's evaluation system
# --------------------------------------------------------------------------------------------


def _zipf_weights(n: int, s: float) -> FloatArray:
    w = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** s
    out: FloatArray = w / w.sum()
    return out


def _interval(kind: str, mean: float) -> dict[str, object]:
    if kind == "exponential":
        return {"kind": "exponential", "mean": mean}
    if kind == "deterministic":
        return {"kind": "deterministic", "value": mean}
    if kind == "uniform":
        return {"kind": "uniform", "low": 0.0, "high": 2.0 * mean}
    raise ValueError(f"unknown distribution kind {kind!r}; valid: deterministic, exponential, uniform")


def reliability_tree_system(
    seed: int,
    *,
    brokers: int = 20,
    publishers: int = 8,
    subscribers: int = 100,
    topics: int = 4,
    attributes: int = 21,
    values_per_attribute: int = 4,
    content_entries: int = 40,
    rate_per_s: float = 1.0,
    lifetime_ms: float = 1000.0,
    publishing: str = "exponential",
    matching: str = "exponential",
    ms_per_subscription: float = 1.0,
    max_degree: int = 4,
    zipf_s: float = 1.0,
    link_median_ms: tuple[float, float] = (40.0, 120.0),
    access_median_ms: tuple[float, float] = (5.0, 20.0),
    link_scv: float = 0.5,
    link_reliability: tuple[float, float] = (0.97, 1.0),
) -> dict[str, Any]:
    """A SPEC §4 system in the style of the Pongthawornkamol paper's evaluation (§5.1, Table 3).

    Table 3: 20 brokers, 8 publishers at about 1 message/s, 100 subscribers, 4 topics,
    21 attributes (the topic plus 20 others), lifetime 1 s, Zipf-like content; matching time
    grows 1 ms per stored subscription (every subscription reaches every broker of the tree, so
    E[S] = 1 ms x subscribers = 100 ms), uniform or exponential; publishing intervals
    exponential, deterministic or uniform. Choices the paper leaves open follow
    QUEUEING-NOTES §6.3: a random recursive tree of maximum degree ``max_degree``; link delays
    lognormal with a median uniform in ``link_median_ms`` and scv ``link_scv`` (the same in
    both directions of a broker pair); link reliability uniform in ``link_reliability``.

    Content: attribute ``topic`` takes values 0..topics-1; the other ``attributes - 1``
    attributes ``a1``, ``a2``, ... belong to topics round-robin and take integer values
    0..values_per_attribute-1. Each publisher has ``content_entries`` distinct entries (topic
    and values Zipf(``zipf_s``), value 0 the most popular) with Zipf popularity by rank.
    Subscriber filters are a topic plus one or two range predicates on that topic's attributes,
    in SPEC §1 syntax (``topic = 2 and a3 <= 1``).

    Parameters
    ----------
    seed : int
        Everything random comes from ``numpy.random.default_rng(seed)``.
    publishing, matching : str
        Kind of the inter-publication and the service distribution: ``exponential``,
        ``deterministic`` or ``uniform`` (on [0, 2 x mean]).

    Returns
    -------
    dict
        The system document.

    Examples
    --------
    >>> system = reliability_tree_system(7)
    >>> len(system["brokers"]), len(system["publishers"]), len(system["subscribers"])
    (20, 8, 100)
    >>> system["brokers"][0]["service_ms"]
    {'kind': 'exponential', 'mean': 100.0}
    """
    if brokers < 1 or publishers < 0 or subscribers < 0 or topics < 1 or attributes < 2:
        raise ValueError("need brokers >= 1, publishers >= 0, subscribers >= 0, topics >= 1, attributes >= 2")
    if max_degree < 2 and brokers > 2:
        raise ValueError(f"max_degree must be >= 2 to build a tree of {brokers} brokers")
    rng = np.random.default_rng(seed)
    broker_ids = [f"b{i + 1}" for i in range(brokers)]
    service = _interval(matching, ms_per_subscription * subscribers)
    degree = [0] * brokers
    edges: list[tuple[int, int]] = []
    for i in range(1, brokers):
        open_ = [j for j in range(i) if degree[j] < max_degree]
        j = open_[int(rng.integers(len(open_)))]
        degree[i] += 1
        degree[j] += 1
        edges.append((j, i))

    cv = math.sqrt(link_scv)

    def link(src: str, dst: str, median_range: tuple[float, float]) -> list[dict[str, object]]:
        median = float(rng.uniform(*median_range))
        mean = median * math.sqrt(1.0 + link_scv)  # lognormal: mean = median * exp(sigma^2 / 2)
        reliability = round(float(rng.uniform(*link_reliability)), 4)
        delay = {"kind": "lognormal", "mean": round(mean, 3), "cv": cv}
        return [{"from": src, "to": dst, "reliability": reliability, "delay_ms": delay}]

    links: list[dict[str, object]] = []
    for j, i in edges:
        pair = link(broker_ids[j], broker_ids[i], link_median_ms)
        links += [*pair, {**pair[0], "from": broker_ids[i], "to": broker_ids[j]}]

    owned: list[list[str]] = [[] for _ in range(topics)]
    for a in range(1, attributes):
        owned[(a - 1) % topics].append(f"a{a}")
    topic_weights = _zipf_weights(topics, zipf_s)
    value_weights = _zipf_weights(values_per_attribute, zipf_s)

    publisher_docs: list[dict[str, object]] = []
    for p in range(publishers):
        pid = f"p{p + 1}"
        home = broker_ids[int(rng.integers(brokers))]
        entries: dict[tuple[tuple[str, int], ...], None] = {}
        for _ in range(50 * content_entries):
            if len(entries) >= content_entries:
                break
            topic = int(rng.choice(topics, p=topic_weights))
            values = rng.choice(values_per_attribute, size=len(owned[topic]), p=value_weights)
            entries.setdefault((("topic", topic), *zip(owned[topic], (int(v) for v in values), strict=True)))
        weights = _zipf_weights(len(entries), zipf_s)
        content = [
            {"p": float(w), "lifetime_ms": lifetime_ms, "attributes": dict(entry)}
            for w, entry in zip(weights, entries, strict=True)
        ]
        publisher_docs.append(
            {
                "id": pid,
                "broker": home,
                "interarrival_ms": _interval(publishing, 1000.0 / rate_per_s),
                "content": content,
            }
        )
        links += link(pid, home, access_median_ms)

    top = values_per_attribute - 1
    subscriber_docs: list[dict[str, object]] = []
    for s in range(subscribers):
        sid = f"s{s + 1}"
        home = broker_ids[int(rng.integers(brokers))]
        topic = int(rng.choice(topics, p=topic_weights))
        names = owned[topic]
        chosen = rng.choice(len(names), size=min(len(names), 1 + int(rng.random() < 0.3)), replace=False)
        predicates = [f"topic = {topic}"]
        for c in sorted(int(x) for x in chosen):
            lo = int(rng.integers(values_per_attribute))
            hi = int(rng.integers(lo, values_per_attribute))
            name = names[c]
            if lo == hi:
                predicates.append(f"{name} = {lo}")
            elif lo == 0:
                predicates.append(f"{name} <= {min(hi, top - 1)}")
            elif hi == top:
                predicates.append(f"{name} >= {lo}")
            else:
                predicates.append(f"{name} between {lo} and {hi}")
        subscriber_docs.append({"id": sid, "broker": home, "filter": " and ".join(predicates)})
        links += link(home, sid, access_median_ms)

    return {
        "brokers": [{"id": b, "service_ms": dict(service)} for b in broker_ids],
        "links": links,
        "publishers": publisher_docs,
        "subscribers": subscriber_docs,
    }
