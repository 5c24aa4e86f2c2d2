"""Composite event detection (docs/reference/composites.md) with event-time semantics and watermarks.

The detection job registers every leaf of every composite subscription as an atomic filter in
the matching index under the synthetic id ``routing.composite.trees.filter_id(subscription_id,
leaf_id)`` (``"cs1#L2"``). The matches of those filters are the *component matches* fed to a
``CompositeDetector``: ``(subscription_id, leaf_id, event_id, event_time_ms)``, where the event
time is the event's ``published_at``. ``update_from_matches`` takes the matching job's output
(``schemas/match.avsc``: per event its id, ``published_at`` and matched ids) directly and picks
out the synthetic ids. ``advance(watermark_ms)`` then emits the detections that the watermark makes
final, as ``siftstream.composites.v1`` records (``schemas/composite_detection.avsc``).

Event time and watermarks
-------------------------
A watermark ``W`` promises that no component match with event time ``< W`` arrives any more.
``update`` buffers matches; a match whose event time is below the current watermark is *late*:
dropped and counted. ``advance(W)`` processes every buffered match with event time ``< W`` in
*event order* -- by event time, then event id, then leaf (document order) -- and returns the
detections completed on the way: a subscription's in the order they are made, subscriptions one
after another (subscriptions are independent). The result therefore does not depend on the order
in which matches arrive, as long as each arrives before the watermark passes its event time. A
watermark below the current one changes nothing.

Instances, selection and consumption
------------------------------------
An *instance* of a node is a leaf's component match, or a detection of an operator node. Its
*components* are its component matches in leaf order, its *last* time the latest component
time (for a leaf, the event time) and its *first* time the earliest. The instances of a node
are made in event order, so its later-made instances have later or equal last times; the *most
recent* of a set of instances is the last made. A node with ``within_ms`` ``w`` accepts an
instance made at time ``T`` (its last time) only when all of its components lie within ``w``,
i.e. ``first >= T - w``. Processing an instance of child ``c`` of operator ``n`` at time ``T``
(its last time):

- ``or``: the instance is a detection of ``n`` (when ``n`` has ``within_ms``, only if
  ``T - first <= w``; otherwise it is dropped and counted as expired).
- ``and``: for every other child, take its most recent *unconsumed* stored instance with
  ``first >= T - w``. If every other child has one, they and the new instance form a detection of
  ``n``, and are *consumed*: each instance completes a pattern at most once. Otherwise the new
  instance is stored for child ``c`` (when its own ``first < T - w`` it can never complete one:
  it is dropped and counted as expired instead).
- ``seq`` (children ``c_1 .. c_k`` in time order, strictly): an instance of ``c_1 .. c_{k-1}`` is
  stored. An instance of ``c_k`` looks backwards: for ``c_{k-1}`` the most recent unconsumed
  stored instance whose last time is strictly before the new instance's first time and whose
  ``first >= T - w``; then for ``c_{k-2}`` the most recent one whose last time is strictly before
  that instance's first time (and ``first >= T - w``); and so on down to ``c_1``. If every child
  has one, they form a detection and are consumed; if not, the ``c_k`` instance is dropped (it
  could only ever complete a sequence now: nothing later can precede it). Not counted.
- A detection of ``n`` is an instance of ``n``'s parent, processed right away (same ``T``); a
  detection of the root is emitted. Its time (``detected_at``) is ``T``, the last time of its
  components; its first time is the earliest.

The same event may be a component of several leaves of one detection (when it matches several
leaves' filters): component matches are per leaf. ``seq`` requires strictly increasing times, so
it never pairs an event with itself. A component match delivered twice is two instances.

Bounded state
-------------
Each child of an ``and``/``seq`` node keeps at most ``DetectorConfig.max_instances`` (``K``)
stored instances per subscription. When an instance is stored at time ``T``, the stored
instances of that child with ``first < T - w`` are dropped (expired: no future instance can
complete a pattern with them); then, if ``K`` remain, the oldest is dropped (evicted). Both are
counted. ``advance(W)`` also drops, after processing, every stored instance with
``first < W - w`` (expired): the state of a subscription is at most ``K`` instances per
``and``/``seq`` child, each younger than its window. These rules depend on event time only, so
the detections do not depend on when watermarks come (the counters reach the same totals once
the watermark has passed every window). ``remove`` drops the subscription's stored instances
and its buffered matches (counted as ``dropped_removed``); ``add`` with a different tree or
subscriber replaces the subscription and starts it empty; ``add`` with an equal one changes
nothing.

``detect_reference`` is the oracle (docs/conventions.md §6): the same policy computed directly over the
whole event-ordered sequence, keeping every instance with consumed/evicted flags and choosing by
linear scans, with no watermark, no expiry and no deletion.

How it runs
-----------
Buffered matches wait per subscription (``update_leaf`` takes a leaf's matches in one call), so
``advance`` sorts each subscription's alone and feeds them to it in one go. The commonest trees
have loops of their own there, the policy above written out for their shape: an ``and`` or
``seq`` of two leaves (its stored instances are points in time: a time and an event id each) and
an ``or`` of leaves; every other tree goes instance by instance through the general step.
``advance_rows`` returns the detections column by column (``Detections``, one
``DetectionBlock`` per subscription), made records only when asked for, so a writer can encode
them without building a dict per detection.

Examples
--------
>>> from routing.composite.trees import parse_composite
>>> tree = parse_composite({"op": "seq", "within_ms": 100, "children": ["kind = 'a'", "kind = 'b'"]})
>>> det = CompositeDetector()
>>> det.add("cs1", tree, subscriber_id="u1")
>>> det.update([("cs1", "L2", "e3", 1050), ("cs1", "L1", "e1", 1000), ("cs1", "L1", "e2", 1020)])
>>> [r["detection_id"] for r in det.advance(1051)]
['["cs1",[["0","e2"],["1","e3"]]]']
>>> det.update([("cs1", "L2", "e0", 990)])  # late: the watermark is at 1051
>>> det.advance(2000), det.stats.late, det.stats.expired
([], 1, 1)
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import repeat
from operator import itemgetter
from typing import Any, Final, TypeAlias, TypedDict, overload

from routing.composite.trees import CompositeChange, CompositeTree, Leaf, Operator, parse_composite, to_json

__all__ = [
    "ComponentRecord",
    "CompositeDetector",
    "DetectionBlock",
    "DetectionRecord",
    "DetectionRow",
    "DetectionSource",
    "Detections",
    "DetectorConfig",
    "DetectorStats",
    "ReferenceResult",
    "detect_reference",
    "detection_id",
]

_AND: Final = 0
_OR: Final = 1
_SEQ: Final = 2
_OP_CODES: Final = {"and": _AND, "or": _OR, "seq": _SEQ}
# plan shapes with their own loop in ``advance`` (one operator whose children are all leaves)
_GENERAL: Final = 0
_PAIR_AND: Final = 1  # and of two leaves
_PAIR_SEQ: Final = 2  # seq of two leaves
_FLAT_OR: Final = 3  # or of leaves
_STATE_FORMAT: Final = 1
_ID_ENCODER: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_escape: Final = json.encoder.encode_basestring  # a JSON string literal, quotes included (C-accelerated)

Component: TypeAlias = tuple[int, str, int]
"""``(leaf index, event id, event time)`` inside the detector."""
Comps: TypeAlias = tuple[Component, ...]


class ComponentRecord(TypedDict):
    """One component of a detection (``Component`` in ``schemas/composite_detection.avsc``)."""

    leaf: str
    event_id: str
    published_at: int


class DetectionRecord(TypedDict):
    """A ``siftstream.composites.v1`` record (``schemas/composite_detection.avsc``)."""

    detection_id: str
    subscription_id: str
    subscriber_id: str
    detected_at: int
    components: list[ComponentRecord]


@dataclass(frozen=True)
class DetectorConfig:
    """Parameters of a ``CompositeDetector``.

    Parameters
    ----------
    max_instances : int
        ``K``: most stored (unconsumed) instances per child of an ``and``/``seq`` node, per
        subscription; the oldest is evicted beyond it.
    """

    max_instances: int = 1000

    def __post_init__(self) -> None:
        if self.max_instances < 1:
            raise ValueError(f"max_instances must be >= 1, got {self.max_instances}")


@dataclass(frozen=True)
class DetectorStats:
    """Counters of a ``CompositeDetector`` (totals since it was made, restored ones included).

    Attributes
    ----------
    accepted : int
        Component matches buffered by ``update``.
    late : int
        Matches dropped because their event time was below the watermark when they arrived.
    unknown : int
        Matches naming a subscription or leaf not registered when they arrived.
    dropped_removed : int
        Buffered matches and stored instances dropped because their subscription was removed or
        replaced.
    expired : int
        Instances dropped because they can no longer complete a pattern within ``within_ms``
        (and ``or`` detections spanning more than the ``or``'s ``within_ms``).
    evicted : int
        Stored instances dropped to keep ``max_instances`` per child.
    detections : int
        Detections emitted.
    pending : int
        Matches buffered, waiting for the watermark.
    stored : int
        Instances stored in partial matches.
    watermark : int or None
        The current watermark (None before the first ``advance``).
    """

    accepted: int
    late: int
    unknown: int
    dropped_removed: int
    expired: int
    evicted: int
    detections: int
    pending: int
    stored: int
    watermark: int | None


def detection_id(subscription_id: str, leaf_paths: Sequence[str], event_ids: Sequence[str]) -> str:
    """The deterministic id of a detection: compact JSON ``[subscription_id, [[leaf, event_id], ...]]``.

    Unambiguous for any ids, and equal for equal detections, so replays can be deduplicated.

    Examples
    --------
    >>> detection_id("cs1", ["0", "2.1"], ["e1", "e7"])
    '["cs1",[["0","e1"],["2.1","e7"]]]'
    """
    return _ID_ENCODER.encode([subscription_id, [[p, e] for p, e in zip(leaf_paths, event_ids, strict=True)]])


# ---------------------------------------------------------------------------------------------
# A tree compiled to flat arrays
# ---------------------------------------------------------------------------------------------


class _Plan:
    """Operators numbered in document order (``n1`` is 0); leaves likewise (``L1`` is 0)."""

    __slots__ = (
        "leaf_index",
        "leaf_node",
        "leaf_path",
        "leaf_slot",
        "monotone",
        "n_children",
        "op",
        "parent",
        "shape",
        "slot",
        "within",
    )

    def __init__(self, tree: CompositeTree) -> None:
        operators = tree.operators()
        index = {node.id: i for i, node in enumerate(operators)}
        self.leaf_index: dict[str, int] = {leaf.id: i for i, leaf in enumerate(tree.leaf_nodes)}
        self.leaf_path: tuple[str, ...] = tuple(leaf.path for leaf in tree.leaf_nodes)
        leaf_node = [0] * len(tree.leaf_nodes)
        leaf_slot = [0] * len(tree.leaf_nodes)
        self.op: tuple[int, ...] = tuple(_OP_CODES[n.op] for n in operators)
        self.within: tuple[int | None, ...] = tuple(n.within_ms for n in operators)
        self.n_children: tuple[int, ...] = tuple(len(n.children) for n in operators)
        parent = [-1] * len(operators)
        slot = [0] * len(operators)
        monotone: list[tuple[bool, ...]] = []
        for i, node in enumerate(operators):
            for j, child in enumerate(node.children):
                if isinstance(child, Leaf):
                    leaf_node[self.leaf_index[child.id]] = i
                    leaf_slot[self.leaf_index[child.id]] = j
                else:
                    parent[index[child.id]] = i
                    slot[index[child.id]] = j
            monotone.append(tuple(_point_like(child) for child in node.children))
        self.leaf_node = tuple(leaf_node)
        self.leaf_slot = tuple(leaf_slot)
        self.parent = tuple(parent)
        self.slot = tuple(slot)
        self.monotone = tuple(monotone)
        self.shape = _GENERAL
        if len(operators) == 1:  # every leaf is a child of the root: leaf index == slot
            if self.op[0] == _OR:
                self.shape = _FLAT_OR
            elif self.n_children[0] == 2:
                self.shape = _PAIR_AND if self.op[0] == _AND else _PAIR_SEQ


def _point_like(node: Operator | Leaf) -> bool:
    """Whether every instance of the node has first == last (no and/seq below it)."""
    if isinstance(node, Leaf):
        return True
    return node.op == "or" and all(_point_like(c) for c in node.children)


class _Buffer:
    """The stored instances of one child of an and/seq node, in the order they were made.

    A *bare* buffer (``leaf >= 0``: a leaf child of a two-leaf ``and``/``seq``, read only by that
    shape's own loop in ``advance``) keeps each instance as its time in ``firsts`` and its event
    id in ``ids``; its ``lasts`` (equal to ``firsts``) and ``comps`` stay empty.
    """

    __slots__ = ("comps", "firsts", "ids", "lasts", "leaf", "monotone")

    def __init__(self, monotone: bool, leaf: int = -1) -> None:
        self.monotone = monotone  # first == last for every instance: firsts is sorted too
        self.leaf = leaf
        self.firsts: list[int] = []
        self.lasts: list[int] = []
        self.comps: list[Comps] = []
        self.ids: list[str] = []

    def __len__(self) -> int:
        return len(self.firsts)

    def instances(self) -> tuple[list[int], list[int], list[Comps]]:
        """The stored instances' first times, last times and components."""
        if self.leaf < 0:
            return self.firsts, self.lasts, self.comps
        leaf = self.leaf
        return self.firsts, self.firsts, [((leaf, e, t),) for e, t in zip(self.ids, self.firsts, strict=True)]

    def expire(self, thr: int) -> int:
        """Drop every instance with first < thr; return how many."""
        firsts = self.firsts
        if not firsts:
            return 0
        if self.monotone:
            k = bisect_left(firsts, thr)
            if k:
                del self.firsts[:k], self.lasts[:k], self.comps[:k], self.ids[:k]
            return k
        if min(firsts) >= thr:
            return 0
        keep = [i for i, f in enumerate(firsts) if f >= thr]
        dropped = len(firsts) - len(keep)
        self.firsts = [firsts[i] for i in keep]
        self.lasts = [self.lasts[i] for i in keep]
        self.comps = [self.comps[i] for i in keep]
        return dropped

    def latest(self, thr: int) -> int:
        """Index of the most recent instance with first >= thr, or -1."""
        if self.monotone:
            n = len(self.firsts)
            return n - 1 if n and self.firsts[-1] >= thr else -1
        firsts, lasts = self.firsts, self.lasts
        i = len(lasts) - 1
        while i >= 0 and lasts[i] >= thr:
            if firsts[i] >= thr:
                return i
            i -= 1
        return -1

    def latest_before(self, bound: int, thr: int) -> int:
        """Index of the most recent instance with last < bound and first >= thr, or -1."""
        i = bisect_left(self.lasts, bound) - 1
        if self.monotone:
            return i if i >= 0 and self.firsts[i] >= thr else -1
        firsts, lasts = self.firsts, self.lasts
        while i >= 0 and lasts[i] >= thr:
            if firsts[i] >= thr:
                return i
            i -= 1
        return -1

    def take(self, i: int) -> tuple[int, Comps]:
        """Remove instance ``i``; return its first time and components."""
        if i == len(self.lasts) - 1:
            self.lasts.pop()
            return self.firsts.pop(), self.comps.pop()
        del self.lasts[i]
        return self.firsts.pop(i), self.comps.pop(i)


class DetectionSource:
    """Whose detections a row holds: one object per subscription (and per incarnation of it).

    Attributes
    ----------
    subscription_id, subscriber_id : str
    leaf_paths : tuple of str
        The path of each leaf (``leaf_paths[i]`` for leaf index ``i``, leaf ``L{i + 1}``).
    """

    __slots__ = ("id_heads", "id_prefix", "leaf_paths", "subscriber_id", "subscription_id")

    def __init__(self, subscription_id: str, subscriber_id: str, leaf_paths: tuple[str, ...]) -> None:
        self.subscription_id = subscription_id
        self.subscriber_id = subscriber_id
        self.leaf_paths = leaf_paths
        # ``detection_id`` from pre-escaped parts: prefix + ",".join(head + escaped id + "]") + "]]"
        self.id_prefix = "[" + _escape(subscription_id) + ",["
        self.id_heads = tuple("[" + _escape(path) + "," for path in leaf_paths)

    def __repr__(self) -> str:
        return f"DetectionSource({self.subscription_id!r}, {self.subscriber_id!r}, {self.leaf_paths!r})"


DetectionRow: TypeAlias = tuple[DetectionSource, int, Comps]
"""``(source, detected_at, components)``: one detection, its components ``(leaf index, event id,
event time)`` in leaf order."""


class DetectionBlock:
    """The detections of one subscription in one ``advance_rows``, column by column.

    Attributes
    ----------
    source : DetectionSource
    detected_at : list of int
        Per detection, in the order made.
    sizes : int or list of int
        Components per detection (one int when every detection has that many).
    leaves : list of int or None
        Per component, its leaf index (None: detection ``d``'s components are the leaves
        ``0 .. size - 1`` in order).
    event_ids, times : list
        Per component (detection by detection, each one's in leaf order), its event id and time.
    """

    __slots__ = ("detected_at", "event_ids", "leaves", "sizes", "source", "times")

    def __init__(self, source: DetectionSource, size: int = 0) -> None:
        self.source = source
        self.detected_at: list[int] = []
        self.sizes: int | list[int] = size if size else []
        self.leaves: list[int] | None = None if size else []
        self.event_ids: list[str] = []
        self.times: list[int] = []

    def __len__(self) -> int:
        return len(self.detected_at)

    def add(self, last: int, comps: Comps) -> None:
        """Append one detection (a block of varying sizes)."""
        assert isinstance(self.sizes, list) and self.leaves is not None
        self.detected_at.append(last)
        self.sizes.append(len(comps))
        for li, eid, t in comps:
            self.leaves.append(li)
            self.event_ids.append(eid)
            self.times.append(t)

    def rows(self) -> list[DetectionRow]:
        """The detections as ``(source, detected_at, components)``."""
        src, ids, times = self.source, self.event_ids, self.times
        out: list[DetectionRow] = []
        start = 0
        sizes = self.sizes
        for d, last in enumerate(self.detected_at):
            size = sizes if isinstance(sizes, int) else sizes[d]
            leaves = range(size) if self.leaves is None else self.leaves[start : start + size]
            out.append(
                (src, last, tuple(zip(leaves, ids[start : start + size], times[start : start + size], strict=True)))
            )
            start += size
        return out


class Detections(Sequence[DetectionRecord]):
    """The detections of one ``advance_rows``, kept compact (``DetectionBlock``) until asked for.

    Indexing and iterating give ``DetectionRecord`` dicts, made on the first ask (``records``);
    ``blocks`` (per subscription, column by column) and ``rows`` serve writers that encode the
    records straight from them. The detections of one subscription are in the order made.

    Examples
    --------
    >>> from routing.composite.trees import parse_composite
    >>> det = CompositeDetector()
    >>> det.add("c", parse_composite({"op": "and", "within_ms": 9, "children": ["a = 1", "b = 1"]}), "u")
    >>> det.update([("c", "L1", "x", 1), ("c", "L2", "y", 2)])
    >>> found = det.advance_rows(10)
    >>> len(found), found.ids(), found.rows()[0][1:]
    (1, ['["c",[["0","x"],["1","y"]]]'], (2, ((0, 'x', 1), (1, 'y', 2))))
    >>> found[0]["components"][1]
    {'leaf': '1', 'event_id': 'y', 'published_at': 2}
    """

    __slots__ = ("_ids", "_records", "_rows", "blocks")

    def __init__(self, blocks: list[DetectionBlock] | None = None) -> None:
        self.blocks: list[DetectionBlock] = blocks if blocks is not None else []
        self._rows: list[DetectionRow] | None = None
        self._ids: list[str] | None = None
        self._records: list[DetectionRecord] | None = None

    def __len__(self) -> int:
        return sum(len(b.detected_at) for b in self.blocks)

    @overload
    def __getitem__(self, i: int) -> DetectionRecord: ...

    @overload
    def __getitem__(self, i: slice) -> list[DetectionRecord]: ...

    def __getitem__(self, i: int | slice) -> DetectionRecord | list[DetectionRecord]:
        return self.records()[i]

    def __iter__(self) -> Iterator[DetectionRecord]:
        return iter(self.records())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Detections):
            return self.records() == other.records()
        if isinstance(other, list):
            return self.records() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, like a list

    def __repr__(self) -> str:
        return f"Detections({self.records()!r})"

    def rows(self) -> list[DetectionRow]:
        """Every detection as ``(source, detected_at, components)``, in order (made once)."""
        if self._rows is None:
            self._rows = [row for block in self.blocks for row in block.rows()]
        return self._rows

    def ids(self) -> list[str]:
        """Every detection's ``detection_id``, in order (made once)."""
        if self._ids is None:
            esc = _escape
            ids: list[str] = []
            append = ids.append
            for src, _, comps in self.rows():
                heads = src.id_heads
                if len(comps) == 2:
                    (l0, e0, _), (l1, e1, _) = comps
                    append(f"{src.id_prefix}{heads[l0]}{esc(e0)}],{heads[l1]}{esc(e1)}]]]")
                else:
                    append(src.id_prefix + ",".join([heads[li] + esc(e) + "]" for li, e, _ in comps]) + "]]")
            self._ids = ids
        return self._ids

    def records(self) -> list[DetectionRecord]:
        """Every detection as a ``siftstream.composites.v1`` record, in order (made once)."""
        if self._records is None:
            self._records = [
                {
                    "detection_id": did,
                    "subscription_id": src.subscription_id,
                    "subscriber_id": src.subscriber_id,
                    "detected_at": last,
                    "components": [
                        {"leaf": src.leaf_paths[li], "event_id": eid, "published_at": t} for li, eid, t in comps
                    ],
                }
                for did, (src, last, comps) in zip(self.ids(), self.rows(), strict=True)
            ]
        return self._records


class _Subscription:
    __slots__ = ("buffers", "gen", "pending", "plan", "source", "subscriber_id", "subscription_id", "text", "tree")

    def __init__(
        self, subscription_id: str, subscriber_id: str, tree: CompositeTree, gen: int, plan: _Plan | None = None
    ) -> None:
        self.subscription_id = subscription_id
        self.subscriber_id = subscriber_id
        self.tree = tree
        self.plan = plan or _Plan(tree)
        self.text: str | None = None  # canonical JSON of the tree, made on the first save
        self.gen = gen
        self.source = DetectionSource(subscription_id, subscriber_id, self.plan.leaf_path)
        self.pending: list[Pending] = []  # buffered component matches, waiting for the watermark
        self.buffers: list[list[_Buffer] | None] = [
            None if op == _OR else [_Buffer(m) for m in mono]
            for op, mono in zip(self.plan.op, self.plan.monotone, strict=True)
        ]
        if self.plan.shape in (_PAIR_AND, _PAIR_SEQ):
            self.buffers[0] = [_Buffer(True, 0), _Buffer(True, 1)]

    def stored(self) -> int:
        return sum(len(b) for bufs in self.buffers if bufs is not None for b in bufs)


Pending: TypeAlias = tuple[int, str, int]
"""``(event time, event id, leaf index)`` of a buffered component match: sorts in event order."""
_time_of: Final = itemgetter(0)


class CompositeDetector:
    """Incremental detection of composite events for many composite subscriptions.

    See the module docstring for the semantics (event order, selection and consumption, state
    bounds). ``add``/``remove`` change the subscriptions, ``update`` (or ``update_leaf``) feeds
    component matches, ``advance`` moves the watermark and returns the detections it makes final
    (``advance_rows``: the same, compact); ``to_bytes`` and ``from_bytes`` save and restore the
    whole state (JSON, no pickle).

    Parameters
    ----------
    config : DetectorConfig, optional
        ``max_instances`` per child (default 1000).

    Examples
    --------
    >>> from routing.composite.trees import parse_composite
    >>> det = CompositeDetector(DetectorConfig(max_instances=10))
    >>> det.add("c", parse_composite({"op": "and", "within_ms": 10, "children": ["a = 1", "b = 1"]}), "u")
    >>> det.update([("c", "L1", "x", 5), ("c", "L2", "y", 12), ("c", "L1", "z", 1)])
    >>> [[(c["leaf"], c["event_id"]) for c in r["components"]] for r in det.advance(100)]
    [[('0', 'x'), ('1', 'y')]]
    >>> det.stats.expired  # z (time 1) never found a partner within 10 ms
    1
    >>> CompositeDetector.from_bytes(det.to_bytes()).stats == det.stats
    True
    """

    def __init__(self, config: DetectorConfig | None = None) -> None:
        self._config = config or DetectorConfig()
        self._max_instances = self._config.max_instances
        self._subs: dict[str, _Subscription] = {}
        self._watermark: int | None = None
        self._next_gen = 0
        self._accepted = self._late = self._unknown = self._dropped_removed = 0
        self._expired = self._evicted = self._detections = 0

    # --- subscriptions -----------------------------------------------------------------------

    @property
    def config(self) -> DetectorConfig:
        return self._config

    def __len__(self) -> int:
        return len(self._subs)

    def __contains__(self, subscription_id: object) -> bool:
        return subscription_id in self._subs

    def subscription_ids(self) -> list[str]:
        """The registered subscription ids, sorted."""
        return sorted(self._subs)

    def add(self, subscription_id: str, tree: CompositeTree, subscriber_id: str = "") -> None:
        """Register a composite subscription, or replace the one with this id.

        Replacing with an equal tree and subscriber changes nothing (partial matches are kept);
        any other replacement drops the old one's state and buffered matches, as ``remove``.
        """
        old = self._subs.get(subscription_id)
        if old is not None:
            if old.tree == tree and old.subscriber_id == subscriber_id:
                return
            self._dropped_removed += old.stored() + len(old.pending)
        self._subs[subscription_id] = _Subscription(subscription_id, subscriber_id, tree, self._next_gen)
        self._next_gen += 1

    def remove(self, subscription_id: str) -> None:
        """Unregister a subscription, dropping its partial matches and buffered component matches
        (``KeyError`` when it is not registered)."""
        sub = self._subs.pop(subscription_id)
        self._dropped_removed += sub.stored() + len(sub.pending)

    def apply(self, changes: Iterable[CompositeChange]) -> None:
        """Follow a ``CompositeTable``'s changes: ``(id, subscription)`` adds or replaces (as
        ``add``), ``(id, None)`` removes (an unknown id is no change)."""
        for sid, sub in changes:
            if sub is not None:
                self.add(sid, sub.tree, sub.subscriber_id)
            elif sid in self._subs:
                self.remove(sid)

    # --- input -------------------------------------------------------------------------------

    def update(self, matches: Iterable[tuple[str, str, str, int]]) -> None:
        """Buffer component matches ``(subscription_id, leaf_id, event_id, event_time_ms)``.

        Matches with event time below the watermark are dropped (``late``); those naming an
        unregistered subscription or leaf are dropped (``unknown``).
        """
        subs = self._subs
        wm = self._watermark
        late = unknown = accepted = 0
        for sid, leaf_id, event_id, t in matches:
            if wm is not None and t < wm:
                late += 1
                continue
            sub = subs.get(sid)
            li = None if sub is None else sub.plan.leaf_index.get(leaf_id)
            if sub is None or li is None:
                unknown += 1
                continue
            sub.pending.append((t, event_id, li))
            accepted += 1
        self._late += late
        self._unknown += unknown
        self._accepted += accepted

    def update_leaf(
        self, subscription_id: str, leaf_id: str, event_ids: Sequence[str], event_times_ms: Sequence[int]
    ) -> None:
        """Buffer component matches of one leaf at once: ``update`` of
        ``(subscription_id, leaf_id, event_ids[i], event_times_ms[i])`` for every ``i``.

        Examples
        --------
        >>> from routing.composite.trees import parse_composite
        >>> det = CompositeDetector()
        >>> det.add("c", parse_composite({"op": "or", "children": ["a = 1"]}))
        >>> det.update_leaf("c", "L1", ["e1", "e2"], [5, 3])
        >>> [r["detection_id"] for r in det.advance(10)]
        ['["c",[["0","e2"]]]', '["c",[["0","e1"]]]']
        """
        n = len(event_ids)
        if len(event_times_ms) != n:
            raise ValueError(f"{n} event ids but {len(event_times_ms)} event times")
        if not n:
            return
        wm = self._watermark
        if wm is not None and min(event_times_ms) < wm:
            keep = [i for i, t in enumerate(event_times_ms) if t >= wm]
            self._late += n - len(keep)
            event_ids = [event_ids[i] for i in keep]
            event_times_ms = [event_times_ms[i] for i in keep]
            n = len(keep)
        sub = self._subs.get(subscription_id)
        li = None if sub is None else sub.plan.leaf_index.get(leaf_id)
        if sub is None or li is None:
            self._unknown += n
            return
        sub.pending.extend(zip(event_times_ms, event_ids, repeat(li, n), strict=True))
        self._accepted += n

    def update_from_matches(
        self,
        event_ids: Sequence[str],
        published_at: Sequence[int],
        subscription_ids: Sequence[Sequence[str]],
    ) -> None:
        """Buffer the component matches in the matching job's output (``schemas/match.avsc``).

        Parameters
        ----------
        event_ids, published_at : sequences
            Per event: its id and publication time (ms).
        subscription_ids : sequence of sequences of str
            Per event: the ids it matched. Synthetic leaf ids ``"cs1#L2"`` are component
            matches; ids without a ``#L<n>`` suffix (atomic subscriptions) are ignored.

        Examples
        --------
        >>> from routing.composite.trees import parse_composite
        >>> det = CompositeDetector()
        >>> det.add("c", parse_composite({"op": "or", "children": ["a = 1"]}))
        >>> det.update_from_matches(["e1", "e2"], [5, 6], [["c#L1", "s9"], []])
        >>> [r["detection_id"] for r in det.advance(10)]
        ['["c",[["0","e1"]]]']
        """
        flat: list[tuple[str, str, str, int]] = []
        append = flat.append
        for eid, t, ids in zip(event_ids, published_at, subscription_ids, strict=True):
            for fid in ids:
                sid, sep, leaf_id = fid.rpartition("#")
                if sep and leaf_id[:1] == "L":
                    append((sid, leaf_id, eid, int(t)))
        self.update(flat)

    # --- detection ---------------------------------------------------------------------------

    def advance(self, watermark_ms: int) -> list[DetectionRecord]:
        """Move the watermark to ``watermark_ms`` and return the detections it makes final.

        Processes every buffered match with event time ``< watermark_ms`` in event order (see the
        module docstring), then expires stored instances that can no longer complete a pattern.
        A watermark below the current one does nothing. The detections of one subscription come
        in the order they are made; subscriptions come one after another (in the order they were
        added).
        """
        return self.advance_rows(watermark_ms).records()

    def advance_rows(self, watermark_ms: int) -> Detections:
        """``advance``, with the detections kept compact (``Detections``: records made on demand)."""
        if self._watermark is not None and watermark_ms <= self._watermark:
            return Detections()
        self._watermark = watermark_ms
        blocks: list[DetectionBlock] = []
        expired = detections = 0
        for sub in self._subs.values():
            pending = sub.pending
            if pending:
                pending.sort()
                if pending[-1][0] < watermark_ms:
                    ready, sub.pending = pending, []
                else:
                    k = bisect_left(pending, watermark_ms, key=_time_of)
                    ready = pending[:k]
                    del pending[:k]
                if ready:
                    shape = sub.plan.shape
                    if shape == _PAIR_AND:
                        block = self._pair_and(sub, ready)
                    elif shape == _PAIR_SEQ:
                        block = self._pair_seq(sub, ready)
                    elif shape == _FLAT_OR:  # every instance is a detection
                        block = DetectionBlock(sub.source, 1)
                        block.leaves = [li for _, _, li in ready]
                        block.event_ids = [eid for _, eid, _ in ready]
                        block.times = [t for t, _, _ in ready]
                        block.detected_at = block.times.copy()
                    else:
                        block = DetectionBlock(sub.source)
                        plan = sub.plan
                        leaf_node, leaf_slot, feed = plan.leaf_node, plan.leaf_slot, self._feed
                        for t, eid, li in ready:
                            feed(sub, leaf_node[li], leaf_slot[li], t, t, ((li, eid, t),), block)
                    if block.detected_at:
                        blocks.append(block)
                        detections += len(block.detected_at)
            # expire what can no longer complete a pattern (first < watermark - within)
            within = sub.plan.within
            for node, bufs in enumerate(sub.buffers):
                if bufs is None:
                    continue
                w = within[node]
                assert w is not None
                thr = watermark_ms - w
                for buf in bufs:
                    if buf.firsts:
                        expired += buf.expire(thr)
        self._expired += expired
        self._detections += detections
        return Detections(blocks)

    def _pair_and(self, sub: _Subscription, ready: list[Pending]) -> DetectionBlock:
        """``_feed`` of every ready match of an ``and`` of two leaves, inlined (the same policy):
        the other leaf's most recent stored instance within the window is the last one stored
        (leaves are point-like), else the new one is stored."""
        w = sub.plan.within[0]
        assert w is not None
        bufs = sub.buffers[0]
        assert bufs is not None
        f0, f1, i0, i1 = bufs[0].firsts, bufs[1].firsts, bufs[0].ids, bufs[1].ids
        k_max = self._max_instances
        expired = evicted = 0
        block = DetectionBlock(sub.source, 2)
        at, ids, times = block.detected_at, block.event_ids, block.times
        for t, eid, li in ready:
            thr = t - w
            if li:
                if f0 and f0[-1] >= thr:  # pairs with the latest L1 instance
                    at.append(t)
                    times.append(f0.pop())
                    times.append(t)
                    ids.append(i0.pop())
                    ids.append(eid)
                    continue
                mf, mi = f1, i1
            else:
                if f1 and f1[-1] >= thr:  # pairs with the latest L2 instance
                    at.append(t)
                    times.append(t)
                    times.append(f1.pop())
                    ids.append(eid)
                    ids.append(i1.pop())
                    continue
                mf, mi = f0, i0
            if mf and mf[0] < thr:  # stored (``_store``): expire, then evict beyond K
                k = bisect_left(mf, thr)
                del mf[:k], mi[:k]
                expired += k
            if len(mf) >= k_max:
                del mf[0], mi[0]
                evicted += 1
            mf.append(t)
            mi.append(eid)
        self._expired += expired
        self._evicted += evicted
        return block

    def _pair_seq(self, sub: _Subscription, ready: list[Pending]) -> DetectionBlock:
        """``_feed`` of every ready match of a ``seq`` of two leaves, inlined (the same policy):
        an L1 instance is stored; an L2 one takes the most recent L1 instance strictly before it
        within the window, or is dropped."""
        w = sub.plan.within[0]
        assert w is not None
        bufs = sub.buffers[0]
        assert bufs is not None
        firsts, stored = bufs[0].firsts, bufs[0].ids
        k_max = self._max_instances
        expired = evicted = 0
        block = DetectionBlock(sub.source, 2)
        at, ids, times = block.detected_at, block.event_ids, block.times
        for t, eid, li in ready:
            thr = t - w
            if li:
                i = bisect_left(firsts, t) - 1
                if i < 0 or firsts[i] < thr:
                    continue  # a last child that completes nothing now never will
                at.append(t)
                if i == len(firsts) - 1:
                    times.append(firsts.pop())
                    ids.append(stored.pop())
                else:
                    times.append(firsts.pop(i))
                    ids.append(stored.pop(i))
                times.append(t)
                ids.append(eid)
                continue
            if firsts and firsts[0] < thr:  # stored (``_store``): expire, then evict beyond K
                k = bisect_left(firsts, thr)
                del firsts[:k], stored[:k]
                expired += k
            if len(firsts) >= k_max:
                del firsts[0], stored[0]
                evicted += 1
            firsts.append(t)
            stored.append(eid)
        self._expired += expired
        self._evicted += evicted
        return block

    def _feed(
        self, sub: _Subscription, node: int, slot: int, first: int, last: int, comps: Comps, out: DetectionBlock
    ) -> None:
        """Process one instance of child ``slot`` of operator ``node`` (and its consequences).

        The common shapes (two children, leaves or ``or``s of leaves) take inlined fast paths;
        every path implements the policy of the module docstring.
        """
        plan = sub.plan
        ops, withins = plan.op, plan.within
        while True:
            op = ops[node]
            w = withins[node]
            if op == _OR:
                if w is not None and last - first > w:
                    self._expired += 1
                    return
            else:
                assert w is not None
                thr = last - w
                if first < thr:
                    self._expired += 1
                    return
                bufs = sub.buffers[node]
                assert bufs is not None
                n = len(bufs)
                if n == 2 and bufs[1 - slot].monotone:  # fast path: one other child, point-like
                    other = bufs[1 - slot]
                    ofirsts = other.firsts
                    if op == _AND:
                        if not ofirsts or ofirsts[-1] < thr:
                            self._store(bufs[slot], first, last, comps, thr)
                            return
                        f = ofirsts.pop()
                        other.lasts.pop()
                        c = other.comps.pop()
                    else:
                        if slot == 0:
                            self._store(bufs[0], first, last, comps, thr)
                            return
                        i = bisect_left(ofirsts, first) - 1  # point-like: firsts == lasts
                        if i < 0 or ofirsts[i] < thr:
                            return  # a last child that completes nothing now never will
                        f, c = other.take(i)
                    comps = comps + c if slot == 0 else c + comps
                    if f < first:
                        first = f
                else:
                    picks = [-1] * n
                    if op == _AND:
                        for j in range(n):
                            if j != slot:
                                i = bufs[j].latest(thr)
                                if i < 0:
                                    self._store(bufs[slot], first, last, comps, thr)
                                    return
                                picks[j] = i
                    else:  # seq
                        if slot != n - 1:
                            self._store(bufs[slot], first, last, comps, thr)
                            return
                        bound = first
                        for j in range(n - 2, -1, -1):
                            i = bufs[j].latest_before(bound, thr)
                            if i < 0:
                                return  # a last child that completes nothing now never will
                            picks[j] = i
                            bound = bufs[j].firsts[i]
                    parts: list[Component] = []
                    for j in range(n):
                        if j == slot:
                            parts.extend(comps)
                        else:
                            f, c = bufs[j].take(picks[j])
                            if f < first:
                                first = f
                            parts.extend(c)
                    comps = tuple(parts)
            parent = plan.parent[node]
            if parent < 0:
                out.add(last, comps)
                return
            slot = plan.slot[node]
            node = parent

    def _store(self, buf: _Buffer, first: int, last: int, comps: Comps, thr: int) -> None:
        firsts = buf.firsts
        if firsts and (firsts[0] < thr or not buf.monotone):
            self._expired += buf.expire(thr)
            firsts = buf.firsts
        if len(firsts) >= self._max_instances:
            del firsts[0], buf.lasts[0], buf.comps[0]
            self._evicted += 1
        firsts.append(first)
        buf.lasts.append(last)
        buf.comps.append(comps)

    # --- introspection and state -------------------------------------------------------------

    @property
    def watermark(self) -> int | None:
        return self._watermark

    @property
    def stats(self) -> DetectorStats:
        """The counters and sizes now."""
        return DetectorStats(
            accepted=self._accepted,
            late=self._late,
            unknown=self._unknown,
            dropped_removed=self._dropped_removed,
            expired=self._expired,
            evicted=self._evicted,
            detections=self._detections,
            pending=sum(len(sub.pending) for sub in self._subs.values()),
            stored=sum(sub.stored() for sub in self._subs.values()),
            watermark=self._watermark,
        )

    def stored_counts(self, subscription_id: str) -> dict[str, list[int]]:
        """Operator id -> number of stored instances per child (empty lists for ``or``)."""
        sub = self._subs[subscription_id]
        return {
            node.id: [] if bufs is None else [len(b) for b in bufs]
            for node, bufs in zip(sub.tree.operators(), sub.buffers, strict=True)
        }

    def to_bytes(self) -> bytes:
        """The whole state as UTF-8 JSON (subscriptions with their trees, partial matches,
        buffered matches, watermark, counters); ``from_bytes`` restores it."""
        subs = []
        for sub in self._subs.values():
            buffers = [
                None
                if bufs is None
                else [
                    [firsts, lasts, [[list(c) for c in cs] for cs in comps]]
                    for firsts, lasts, comps in (b.instances() for b in bufs)
                ]
                for bufs in sub.buffers
            ]
            if sub.text is None:
                sub.text = to_json(sub.tree)
            subs.append([sub.subscription_id, sub.subscriber_id, sub.text, sub.gen, buffers])
        state = {
            "format": _STATE_FORMAT,
            "watermark": self._watermark,
            "next_gen": self._next_gen,
            "counters": [
                self._accepted,
                self._late,
                self._unknown,
                self._dropped_removed,
                self._expired,
                self._evicted,
                self._detections,
            ],
            "subscriptions": subs,
            "pending": [
                (t, e, sub.subscription_id, li, sub.gen) for sub in self._subs.values() for t, e, li in sub.pending
            ],
        }
        return json.dumps(state, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes, config: DetectorConfig | None = None) -> CompositeDetector:
        """A detector restored from ``to_bytes`` (``config`` is not part of the saved state)."""
        state: dict[str, Any] = json.loads(data)
        if state.get("format") != _STATE_FORMAT:
            raise ValueError(f"unknown detector state format {state.get('format')!r}; expected {_STATE_FORMAT}")
        det = cls(config)
        det._watermark = state["watermark"]
        det._next_gen = state["next_gen"]
        (
            det._accepted,
            det._late,
            det._unknown,
            det._dropped_removed,
            det._expired,
            det._evicted,
            det._detections,
        ) = state["counters"]
        for sid, subscriber, tree_json, gen, buffers in state["subscriptions"]:
            tree, plan = _compiled(tree_json)
            sub = _Subscription(sid, subscriber, tree, gen, plan)
            for bufs, saved in zip(sub.buffers, buffers, strict=True):
                if bufs is None:
                    continue
                for buf, (firsts, lasts, comps) in zip(bufs, saved, strict=True):
                    buf.firsts = firsts
                    if buf.leaf >= 0:
                        buf.ids = [cs[0][1] for cs in comps]
                    else:
                        buf.lasts = lasts
                        buf.comps = [tuple((c[0], c[1], c[2]) for c in cs) for cs in comps]
            sub.text = tree_json
            det._subs[sid] = sub
        for t, eid, sid, li, gen in state["pending"]:
            owner = det._subs.get(sid)
            if owner is None or owner.gen != gen:  # saved by an earlier version: its subscription is gone
                det._dropped_removed += 1
            else:
                owner.pending.append((t, eid, li))
        return det


@lru_cache(maxsize=65536)
def _compiled(text: str) -> tuple[CompositeTree, _Plan]:
    """Trees and plans are immutable: a process restoring state every batch compiles each once."""
    tree = parse_composite(text)
    return tree, _Plan(tree)


# ---------------------------------------------------------------------------------------------
# The oracle
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReferenceResult:
    """What ``detect_reference`` finds.

    Attributes
    ----------
    detections : list of tuple of (str, str, int)
        Each detection's components ``(leaf path, event id, event time)`` in leaf order, in the
        order the detections are made.
    expired : int
        Instances that never completed a pattern within their window and were not evicted
        (what a ``CompositeDetector`` counts as expired once the watermark has passed every
        window).
    evicted : int
        Instances evicted by the ``max_instances`` bound.
    """

    detections: list[tuple[tuple[str, str, int], ...]]
    expired: int
    evicted: int


@dataclass
class _Kept:
    made: int  # creation number: larger is more recent
    first: int
    last: int
    comps: tuple[tuple[int, str, int], ...]
    consumed: bool = False
    evicted: bool = False


def detect_reference(
    tree: CompositeTree, instances: Iterable[tuple[str, str, int]], max_instances: int | None = None
) -> ReferenceResult:
    """Detect composite events over a whole sequence of component matches, directly.

    The oracle of ``CompositeDetector`` (same policy: see the module docstring). It sorts the
    matches into event order, keeps every instance ever made with consumed/evicted flags, and
    chooses partners by scanning all of them; nothing expires or is deleted.

    Parameters
    ----------
    tree : CompositeTree
    instances : iterable of (leaf_id, event_id, event_time_ms)
        The component matches of one subscription (leaf ids ``L1``, ...).
    max_instances : int, optional
        ``K`` of ``DetectorConfig``; None for no bound.

    Returns
    -------
    ReferenceResult

    Examples
    --------
    >>> from routing.composite.trees import parse_composite
    >>> tree = parse_composite({"op": "and", "within_ms": 10, "children": ["a = 1", "b = 1"]})
    >>> detect_reference(tree, [("L1", "x", 5), ("L2", "y", 12), ("L1", "z", 1)])
    ReferenceResult(detections=[(('0', 'x', 5), ('1', 'y', 12))], expired=1, evicted=0)
    """
    leaf_of = {leaf.id: i for i, leaf in enumerate(tree.leaf_nodes)}
    paths = [leaf.path for leaf in tree.leaf_nodes]
    ordered = sorted(instances, key=lambda m: (m[2], m[1], leaf_of[m[0]]))
    kept: dict[tuple[str, int], list[_Kept]] = {}  # (operator id, child) -> every stored instance
    for node in tree.operators():
        for j in range(len(node.children)):
            kept[(node.id, j)] = []
    parents: dict[str, tuple[Operator, int]] = {}
    for node in tree.operators():
        for j, child in enumerate(node.children):
            parents[child.id] = (node, j)
    made = 0
    expired = 0
    detections: list[tuple[tuple[str, str, int], ...]] = []

    def usable(k: _Kept, thr: int) -> bool:
        return not k.consumed and not k.evicted and k.first >= thr

    def newest(candidates: list[_Kept]) -> _Kept | None:
        return max(candidates, key=lambda k: k.made) if candidates else None

    def deliver(child_id: str, first: int, last: int, comps: tuple[tuple[int, str, int], ...]) -> None:
        nonlocal made, expired
        if child_id == tree.root.id:
            detections.append(tuple((paths[li], e, t) for li, e, t in comps))
            return
        node, slot = parents[child_id]
        w = node.within_ms
        if node.op == "or":
            if w is not None and last - first > w:
                expired += 1
                return
            deliver(node.id, first, last, comps)
            return
        assert w is not None
        thr = last - w
        if first < thr:
            expired += 1
            return
        n = len(node.children)
        chosen: dict[int, _Kept] = {}
        if node.op == "and":
            for j in range(n):
                if j != slot:
                    pick = newest([k for k in kept[(node.id, j)] if usable(k, thr)])
                    if pick is not None:
                        chosen[j] = pick
        elif slot == n - 1:
            bound = first
            for j in reversed(range(n - 1)):
                pick = newest([k for k in kept[(node.id, j)] if usable(k, thr) and k.last < bound])
                if pick is None:
                    break
                chosen[j] = pick
                bound = pick.first
            if len(chosen) < n - 1:
                return  # a seq's last child that completes nothing is dropped
        if len(chosen) == n - 1:
            for k in chosen.values():
                k.consumed = True
            parts = [comps if j == slot else chosen[j].comps for j in range(n)]
            deliver(node.id, min([first, *(k.first for k in chosen.values())]), last, sum(parts, ()))
            return
        store = kept[(node.id, slot)]
        live = [k for k in store if usable(k, thr)]
        if max_instances is not None and len(live) >= max_instances:
            min(live, key=lambda k: k.made).evicted = True
        made += 1
        store.append(_Kept(made, first, last, comps))

    for leaf_id, event_id, t in ordered:
        li = leaf_of[leaf_id]
        deliver(leaf_id, t, t, ((li, event_id, t),))
    leftover = sum(1 for store in kept.values() for k in store if not k.consumed and not k.evicted)
    evicted = sum(1 for store in kept.values() for k in store if k.evicted)
    return ReferenceResult(detections, expired + leftover, evicted)
