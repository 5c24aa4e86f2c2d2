"""The compiled broker network of the QoS model: a docs/reference/qos-predict.md system validated, matched and routed.

Both ``qos simulate`` (:mod:`routing.reliability.simulator`) and ``qos predict``
(:mod:`routing.reliability.prediction`) start here. The model is the one of Pongthawornkamol, Nahrstedt
and Wang, "Towards Timeliness and Reliability Analysis of Distributed Content-based
Publish/Subscribe Systems over Best-effort Networks" (§2, §4.1;
), as docs/reference/qos-predict.md states it. Three steps:

1. :func:`validate_system` checks the document and indexes it (:class:`Overlay`): brokers,
   publishers and subscribers per kind in document order, directed links with their reliability
   r_l and delay D_l, and every publisher's content entries flattened into one index k, the
   *content key*. Errors name the element, what is wrong and what would be valid.
2. :func:`match_content` decides which subscribers each content entry matches
   (:class:`Matching`), each distinct filter text against each distinct attribute set once
   (through ``match_many`` for a :class:`BulkMatcher`).
3. Filter propagation (the paper's §4.1): content key k of publisher p crosses link l iff some
   subscriber downstream of l matches k, never back over the link it came in on (the paper's
   up(l), eq. 2); p's own link is always crossed. :func:`compile_system` unrolls it densely per
   content key into a :class:`Network` (the simulator's input); :func:`compile_routes` keeps it
   sparse, one tree of paths per publisher (:class:`RouteTree`, the predictor's input).

Invariants: the links events can travel form no cycle apart from the two directions of one broker
pair; :attr:`Network.components` lists the strongly connected components of the broker graph in
topological order; routes list parents before children.

Examples
--------
>>> zero = {"kind": "deterministic", "value": 0}
>>> link = lambda a, b: {"from": a, "to": b, "reliability": 1, "delay_ms": zero}
>>> system = {"brokers": [{"id": "b1", "service_ms": zero}, {"id": "b2", "service_ms": zero}],
...           "links": [link("p", "b1"), link("b1", "b2"), link("b2", "s")],
...           "publishers": [{"id": "p", "broker": "b1", "interarrival_ms": zero | {"value": 1},
...                           "content": [{"p": 1, "lifetime_ms": 1, "attributes": {"t": 1}}]}],
...           "subscribers": [{"id": "s", "broker": "b2", "filter": "t = 1"}]}
>>> network = compile_system(system, lambda text, attributes: True)
>>> network.route_link.tolist(), network.components
([0, 1, 2], ((0,), (1,)))
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from routing.stats.distributions import Distribution, parse_distribution

__all__ = [
    "BulkMatcher",
    "Matcher",
    "Matching",
    "Network",
    "Overlay",
    "RouteTree",
    "compile_routes",
    "compile_system",
    "match_content",
    "validate_system",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

Matcher = Callable[[str, Mapping[str, object]], bool]
"""``matcher(filter_text, attributes) -> bool``: does an event with these attributes match the
docs/reference/filters.md filter? It must raise (any exception) for a filter it cannot parse."""

_PROB_TOLERANCE = 1e-6  # how far a publisher's content p values may sum from 1 (JSON rounding)
_MAX_ROUTE_HOPS = 200_000  # potential hops of one content entry; more means a DAG with too many paths


@runtime_checkable
class BulkMatcher(Protocol):
    """A :data:`Matcher` that can also match many filters against many events in one call.

    :func:`match_content` uses ``match_many`` when the matcher has it (``routing.reliability.prediction.filter_matcher``
    does, through :class:`routing.matching.index.MatchIndex`) and calls the matcher once per (distinct
    filter, distinct attribute set) otherwise.
    """

    def __call__(self, text: str, attributes: Mapping[str, object]) -> bool: ...

    def match_many(self, texts: Sequence[str], events: Sequence[Mapping[str, object]]) -> BoolArray:
        """``out[e, f]``: event ``events[e]`` matches filter ``texts[f]``, exactly as ``self(texts[f], events[e])``."""
        ...


@dataclass(frozen=True, eq=False)
class Overlay:
    """A validated docs/reference/qos-predict.md system, before filter propagation (:func:`validate_system`).

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
        Per subscriber, its docs/reference/filters.md filter text.
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
        "apart from the two directions of one broker pair (docs/reference/qos-predict.md)"
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
    """Validate a docs/reference/qos-predict.md system document (the first step of :func:`compile_system` and of
    ``routing.reliability.prediction.predict``).

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
    """Validate a docs/reference/qos-predict.md system document and propagate its filters, densely (the simulator's
    input; ``routing.reliability.prediction.predict`` uses the sparse :func:`compile_routes` instead).

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
