"""Composite subscriptions (docs/reference/composites.md): parse and validate the tree, keep a live table.

A composite subscription is a tree whose leaves are atomic filters (docs/reference/filters.md)::

    {"op": "and", "within_ms": 60000,
     "children": ["kind = 'flight' and price < 400",
                  {"op": "or", "children": ["kind = 'weather' and sky = 'clear'", "temp > 25"]}]}

``parse_composite`` turns the JSON text (or the decoded mapping) into a ``CompositeTree`` of frozen
``Operator`` and ``Leaf`` nodes, or raises ``CompositeError`` naming where the problem is, what was
wrong and what would be valid. ``CompositeTable`` keeps the composite subscriptions of the
compacted topic ``siftstream.subscriptions.v1`` live, the way ``routing.matching.table`` keeps the
atomic ones; ``routing.composite.detection`` detects composite events from the matches of the leaves.

The tree
--------
- An operator node is an object with ``op`` (``and``, ``or`` or ``seq``; case-insensitive),
  ``children`` (a list) and ``within_ms``. No other keys are allowed (a typo such as
  ``withinMs`` is an error, not a silently ignored field).
- ``within_ms`` bounds the time between the first and the last component event of one detection
  of the node. It is a positive integer number of milliseconds, at most ``MAX_WITHIN_MS``.
  It is required on ``and`` and ``seq``. It is optional on ``or``: an ``or`` detection is one of
  its children's, so there it only rejects children's detections that span more than it (a leaf's
  span is 0). Nothing is inherited: a node's ``within_ms`` bounds its own detections only, so an
  ``or`` under an ``and`` without one of its own has no bound, and the ``and``'s bound applies to
  the ``and``'s detections, which contain the ``or``'s.
- ``and`` and ``seq`` need at least 2 children (with one child there is nothing to correlate:
  most likely a child was forgotten); ``or`` needs at least 1 (a one-child ``or`` is its child,
  harmless in generated trees).
- A child is an operator node or a leaf: the text of an atomic filter, parsed by
  ``routing.matching.language.parse_filter``; its errors (with their positions) are wrapped naming the leaf.
- The root must be an operator node (a bare filter is an atomic subscription), at most
  ``MAX_DEPTH`` operator levels deep, with at most ``MAX_LEAVES`` leaves.

Ids and paths
-------------
Every node has a stable id in document order (depth first, children left to right): operators
``n1`` (the root), ``n2``, ... and leaves ``L1``, ``L2``, ... -- the ids of docs/reference/placement.md
(placement). Every node also has a ``path``, the 0-based child indices from the root joined by
``.`` (``"0"``, ``"2.1"``; the root's is ``""``): the ``leaf`` of a component in
``schemas/composite_detection.avsc``. Errors name a node by its JSON path (``root``,
``children[2].children[0]``).

The detection job registers every leaf in the matching index as an atomic filter under the
synthetic id ``filter_id(subscription_id, leaf_id)`` (``"cs1#L2"``); ``split_filter_id`` reverses
it (leaf ids never contain ``#``, so the last ``#`` splits it even when the subscription id holds
one).

Examples
--------
>>> tree = parse_composite('{"op": "seq", "within_ms": 5000, "children": ["a = 1", '
...                        '{"op": "or", "children": ["b > 2", "c exists"]}]}')
>>> [(node.id, node.path) for node in tree.nodes()]
[('n1', ''), ('L1', '0'), ('n2', '1'), ('L2', '1.0'), ('L3', '1.1')]
>>> leaves(tree)
{'L1': 'a = 1', 'L2': 'b > 2', 'L3': 'c exists'}
>>> output_rate(tree, {"L1": 10.0, "L2": 1.0, "L3": 2.5})
3.5
>>> to_json(tree)
'{"op":"seq","within_ms":5000,"children":["a = 1",{"op":"or","children":["b > 2","c exists"]}]}'
>>> try:
...     parse_composite('{"op": "and", "children": ["a = 1", "b = 2"]}')
... except CompositeError as error:
...     print(error)
root: 'and' needs within_ms, a positive integer number of milliseconds (e.g. "within_ms": 60000)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, Literal, TypeAlias

from routing.matching.language import Filter, FilterError, parse_filter
from routing.matching.table import SubscriptionRecord, plan_change

__all__ = [
    "MAX_DEPTH",
    "MAX_LEAVES",
    "MAX_WITHIN_MS",
    "OPS",
    "CompositeChange",
    "CompositeError",
    "CompositeOutcome",
    "CompositeSubscription",
    "CompositeTable",
    "CompositeTree",
    "Leaf",
    "Node",
    "Operator",
    "filter_id",
    "leaf_filter_changes",
    "leaves",
    "output_rate",
    "output_rates",
    "parse_composite",
    "plan_composite_change",
    "split_filter_id",
    "to_json",
    "to_placement_tree",
]

OpName: TypeAlias = Literal["and", "or", "seq"]
OPS: Final[tuple[OpName, ...]] = ("and", "or", "seq")
MAX_DEPTH: Final = 16
"""Most operator levels from the root (the root is level 1)."""
MAX_LEAVES: Final = 64
"""Most leaves (atomic filters) in one tree."""
MAX_WITHIN_MS: Final = 2**53 - 1
"""Largest ``within_ms``: exact in a JSON number (a double), far beyond any useful window."""
_KEYS: Final = ("op", "within_ms", "children")
_OPS_TEXT: Final = "'and', 'or', 'seq'"
_WITHIN_TEXT: Final = 'a positive integer number of milliseconds (e.g. "within_ms": 60000)'
_FILTER_ID_SEPARATOR: Final = "#"


class CompositeError(ValueError):
    """A composite tree that does not parse or breaks a rule.

    Attributes
    ----------
    path : str
        Where: ``root`` or the JSON path of the node (``children[2].children[0]``).
    reason : str
        What was wrong and what would be valid (the message without the path).
    filter_error : FilterError or None
        The parser's error when a leaf's filter text does not parse.
    """

    def __init__(self, path: str, reason: str, filter_error: FilterError | None = None) -> None:
        self.path = path
        self.reason = reason
        self.filter_error = filter_error
        super().__init__(f"{path}: {reason}")


@dataclass(frozen=True)
class Leaf:
    """An atomic filter of a composite tree.

    Attributes
    ----------
    id : str
        ``L1``, ``L2``, ... in document order.
    path : str
        0-based child indices from the root, joined by ``.`` (``"2.1"``).
    filter : Filter
        The parsed filter; ``text`` is its canonical text.
    """

    id: str
    path: str
    filter: Filter

    @property
    def text(self) -> str:
        """The canonical filter text (``str(filter)``)."""
        return str(self.filter)


@dataclass(frozen=True)
class Operator:
    """An operator node: ``and``, ``or`` or ``seq`` over its children (see the module docstring).

    Attributes
    ----------
    id : str
        ``n1`` (the root), ``n2``, ... in document order.
    path : str
        0-based child indices from the root (``""`` for the root).
    op : {'and', 'or', 'seq'}
        The operator.
    within_ms : int or None
        Bound on (last - first) component time of one detection; None only on ``or``.
    children : tuple of Node
        The operands, in order (the order matters for ``seq``).
    """

    id: str
    path: str
    op: OpName
    within_ms: int | None
    children: tuple[Node, ...]


Node: TypeAlias = Operator | Leaf


@dataclass(frozen=True)
class CompositeTree:
    """A validated composite subscription tree.

    Attributes
    ----------
    root : Operator
        The root operator (id ``n1``).
    leaf_nodes : tuple of Leaf
        The leaves in document order (``leaf_nodes[i].id == f"L{i + 1}"``).
    """

    root: Operator
    leaf_nodes: tuple[Leaf, ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "leaf_nodes", tuple(n for n in self.nodes() if isinstance(n, Leaf)))

    def nodes(self) -> Iterator[Node]:
        """Every node in document order (depth first, children left to right)."""
        stack: list[Node] = [self.root]
        while stack:
            node = stack.pop()
            yield node
            if isinstance(node, Operator):
                stack.extend(reversed(node.children))

    def operators(self) -> tuple[Operator, ...]:
        """The operator nodes in document order."""
        return tuple(n for n in self.nodes() if isinstance(n, Operator))

    def leaf(self, leaf_id: str) -> Leaf:
        """The leaf with this id (``KeyError`` when there is none)."""
        for node in self.leaf_nodes:
            if node.id == leaf_id:
                return node
        raise KeyError(leaf_id)


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------


def _reject_duplicate_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


class _Parser:
    def __init__(self) -> None:
        self.operators = 0
        self.leaves = 0

    def node(self, doc: object, json_path: str, path: tuple[int, ...], depth: int) -> Node:
        if isinstance(doc, str):
            return self.leaf(doc, json_path, path)
        if not isinstance(doc, Mapping):
            raise CompositeError(
                json_path,
                f'expected a filter text or an operator object {{"op": ..., "children": [...]}}, '
                f"found {_json_type(doc)}",
            )
        return self.operator(doc, json_path, path, depth)

    def leaf(self, text: str, json_path: str, path: tuple[int, ...]) -> Leaf:
        if not path:
            raise CompositeError(
                json_path,
                'the root must be an operator object ({"op": "and"|"or"|"seq", ...}); '
                "a bare filter is an atomic subscription (use the filter field)",
            )
        self.leaves += 1
        if self.leaves > MAX_LEAVES:
            raise CompositeError(json_path, f"too many leaves: at most {MAX_LEAVES} filters per composite tree")
        try:
            parsed = parse_filter(text)
        except FilterError as exc:
            raise CompositeError(json_path, f"filter {exc}", exc) from exc
        return Leaf(f"L{self.leaves}", ".".join(map(str, path)), parsed)

    def operator(self, doc: Mapping[object, object], json_path: str, path: tuple[int, ...], depth: int) -> Operator:
        if depth > MAX_DEPTH:
            raise CompositeError(json_path, f"the tree is too deep: at most {MAX_DEPTH} levels of operators")
        unknown = [k for k in doc if k not in _KEYS]
        if unknown:
            raise CompositeError(
                json_path, f"unknown key {unknown[0]!r}; an operator object has only 'op', 'within_ms' and 'children'"
            )
        if "op" not in doc:
            raise CompositeError(json_path, f"missing 'op'; expected one of {_OPS_TEXT}")
        raw_op = doc["op"]
        op = raw_op.lower() if isinstance(raw_op, str) else None
        if op not in OPS:
            if isinstance(raw_op, str):
                raise CompositeError(json_path, f"unknown op {raw_op!r}; expected one of {_OPS_TEXT}")
            raise CompositeError(json_path, f"'op' must be one of {_OPS_TEXT}, found {_json_type(raw_op)}")
        within = self.within(doc, op, json_path)
        if "children" not in doc:
            raise CompositeError(json_path, f"missing 'children': {op!r} needs a list of filter texts and operators")
        children = doc["children"]
        if not isinstance(children, list | tuple):
            raise CompositeError(
                json_path,
                f"'children' must be a list of filter texts and operator objects, found {_json_type(children)}",
            )
        least = 1 if op == "or" else 2
        if len(children) < least:
            what = "1 child" if least == 1 else f"{least} children"
            raise CompositeError(json_path, f"{op!r} needs at least {what}, found {len(children)}")
        self.operators += 1
        node_id = f"n{self.operators}"
        kids = tuple(
            self.node(child, f"{'' if not path else json_path + '.'}children[{i}]", (*path, i), depth + 1)
            for i, child in enumerate(children)
        )
        return Operator(node_id, ".".join(map(str, path)), op, within, kids)

    def within(self, doc: Mapping[object, object], op: str, json_path: str) -> int | None:
        if "within_ms" not in doc or (op == "or" and doc["within_ms"] is None):
            if op == "or":
                return None
            raise CompositeError(json_path, f"{op!r} needs within_ms, {_WITHIN_TEXT}")
        value = doc["within_ms"]
        if isinstance(value, bool) or not isinstance(value, int):
            raise CompositeError(json_path, f"within_ms must be {_WITHIN_TEXT}, found {_json_type(value)}")
        if not 0 < value <= MAX_WITHIN_MS:
            raise CompositeError(
                json_path, f"within_ms must be {_WITHIN_TEXT} between 1 and {MAX_WITHIN_MS}, found {value}"
            )
        return value


def parse_composite(doc: str | Mapping[str, object]) -> CompositeTree:
    """Parse and validate a composite subscription tree (docs/reference/composites.md).

    Parameters
    ----------
    doc : str or Mapping
        The JSON text of the tree (as the subscriptions topic carries it), or the decoded object.

    Returns
    -------
    CompositeTree

    Raises
    ------
    CompositeError
        Naming the node (``root``, ``children[1].children[0]``), what was wrong and what would be
        valid: text that is not JSON (with line and column) or has a duplicate key, an unknown or
        missing ``op``, a missing or bad ``within_ms``, ``children`` missing, not a list or too
        short, a child that is neither a filter text nor an object, an unknown key, a leaf whose
        filter does not parse (the parser's message, with its position and a caret), a tree
        deeper than ``MAX_DEPTH`` or with more than ``MAX_LEAVES`` leaves.

    Examples
    --------
    >>> tree = parse_composite({"op": "AND", "within_ms": 100, "children": ["a=1", "b  =  2"]})
    >>> tree.root.op, tree.root.within_ms, [leaf.text for leaf in tree.leaf_nodes]
    ('and', 100, ['a = 1', 'b = 2'])
    >>> try:
    ...     parse_composite('{"op": "and", "within_ms": 100, "children": ["a = 1", {"op": "xor"}]}')
    ... except CompositeError as error:
    ...     print(error)
    children[1]: unknown op 'xor'; expected one of 'and', 'or', 'seq'
    >>> try:
    ...     parse_composite({"op": "or", "children": ["a = 1", {"op": "or", "children": ["x <"]}]})
    ... except CompositeError as error:
    ...     print(error.path, "|", error.filter_error.reason)
    ...     print(error)  # doctest: +ELLIPSIS
    children[1].children[0] | at position 3: expected a literal (number, 'string', true or false), found end of input
    children[1].children[0]: filter at position 3: expected a literal ..., found end of input
      x <
         ^
    """
    if isinstance(doc, str | bytes):
        try:
            decoded: object = json.loads(doc, object_pairs_hook=_reject_duplicate_keys)
        except json.JSONDecodeError as exc:
            raise CompositeError(
                "root",
                f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}; expected a JSON object "
                '{"op": "and"|"or"|"seq", "within_ms": N, "children": [...]}',
            ) from exc
        except ValueError as exc:  # a duplicate key (from the hook)
            raise CompositeError("root", f"not valid: {exc}; every key of an object must appear once") from exc
    else:
        decoded = doc
    node = _Parser().node(decoded, "root", (), 1)
    assert isinstance(node, Operator)  # a leaf at the root was rejected
    return CompositeTree(node)


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def leaves(tree: CompositeTree) -> dict[str, str]:
    """Leaf id -> canonical filter text, in document order.

    Examples
    --------
    >>> leaves(parse_composite({"op": "or", "children": ["x>1", "y in ('a','b')"]}))
    {'L1': 'x > 1', 'L2': "y in ('a', 'b')"}
    """
    return {leaf.id: leaf.text for leaf in tree.leaf_nodes}


def output_rates(tree: CompositeTree, leaf_rates: Mapping[str, float]) -> dict[str, float]:
    """The output rate of every node (Li & Jacobsen, Definition 2; docs/reference/placement.md).

    A leaf's output rate is its own (events/s matching it); an ``or`` node's is the sum of its
    children's; an ``and`` or ``seq`` node's is the minimum of its children's (a detection needs
    an event from each child and consumes it).

    Parameters
    ----------
    tree : CompositeTree
    leaf_rates : Mapping[str, float]
        Leaf id -> rate (>= 0); every leaf must have one.

    Returns
    -------
    dict[str, float]
        Node id -> output rate, in document order.

    Examples
    --------
    >>> tree = parse_composite(
    ...     {"op": "and", "within_ms": 9, "children": ["a = 1", {"op": "or", "children": ["b = 1", "c = 1"]}]}
    ... )
    >>> output_rates(tree, {"L1": 5.0, "L2": 1.0, "L3": 2.0})
    {'n1': 3.0, 'L1': 5.0, 'n2': 3.0, 'L2': 1.0, 'L3': 2.0}
    """
    rates: dict[str, float] = {}

    def visit(node: Node) -> float:
        if isinstance(node, Leaf):
            if node.id not in leaf_rates:
                raise ValueError(f"no rate for leaf {node.id} ({node.text!r}); every leaf needs one")
            rate = float(leaf_rates[node.id])
            if not rate >= 0.0:
                raise ValueError(f"rate of leaf {node.id} must be a number >= 0, got {leaf_rates[node.id]!r}")
            rates[node.id] = rate
            return rate
        rates[node.id] = 0.0  # reserve the document-order slot
        kids = [visit(child) for child in node.children]
        rates[node.id] = sum(kids) if node.op == "or" else min(kids)
        return rates[node.id]

    visit(tree.root)
    return rates


def output_rate(tree: CompositeTree, leaf_rates: Mapping[str, float]) -> float:
    """The root's output rate (see ``output_rates``).

    Examples
    --------
    >>> output_rate(parse_composite({"op": "seq", "within_ms": 9, "children": ["a = 1", "b = 1"]}), {"L1": 4, "L2": 2})
    2.0
    """
    return output_rates(tree, leaf_rates)[tree.root.id]


def _to_doc(node: Node) -> object:
    if isinstance(node, Leaf):
        return node.text
    doc: dict[str, object] = {"op": node.op}
    if node.within_ms is not None:
        doc["within_ms"] = node.within_ms
    doc["children"] = [_to_doc(child) for child in node.children]
    return doc


def to_json(tree: CompositeTree) -> str:
    """The canonical JSON text: keys ``op``, ``within_ms`` (when set), ``children`` in that order,
    lower-case ops, canonical filter texts, no spaces. ``parse_composite(to_json(t)) == t``.

    Examples
    --------
    >>> to_json(parse_composite('{"children": ["a=1", "b=2"], "within_ms": 5, "op": "SEQ"}'))
    '{"op":"seq","within_ms":5,"children":["a = 1","b = 2"]}'
    """
    return json.dumps(_to_doc(tree.root), separators=(",", ":"), ensure_ascii=False)


def to_placement_tree(tree: CompositeTree) -> dict[str, object]:
    """The tree in the form of docs/reference/placement.md (``siftstream plan placement``).

    Examples
    --------
    >>> to_placement_tree(parse_composite({"op": "or", "children": ["a = 1", "b = 1"]}))
    {'id': 'n1', 'op': 'or', 'children': [{'leaf': 'L1'}, {'leaf': 'L2'}]}
    """

    def visit(node: Node) -> dict[str, object]:
        if isinstance(node, Leaf):
            return {"leaf": node.id}
        return {"id": node.id, "op": node.op, "children": [visit(child) for child in node.children]}

    return visit(tree.root)


def filter_id(subscription_id: str, leaf_id: str) -> str:
    """The synthetic id under which a leaf is registered as an atomic filter: ``"cs1#L2"``.

    Examples
    --------
    >>> filter_id("cs1", "L2")
    'cs1#L2'
    """
    return f"{subscription_id}{_FILTER_ID_SEPARATOR}{leaf_id}"


def split_filter_id(fid: str) -> tuple[str, str] | None:
    """``(subscription id, leaf id)`` of a synthetic filter id; None for any other id.

    Examples
    --------
    >>> split_filter_id("a#b#L3"), split_filter_id("s1"), split_filter_id("s#x")
    (('a#b', 'L3'), None, None)
    """
    sid, sep, leaf_id = fid.rpartition(_FILTER_ID_SEPARATOR)
    if not sep or len(leaf_id) < 2 or leaf_id[0] != "L" or not leaf_id[1:].isdigit():
        return None
    return sid, leaf_id


# ---------------------------------------------------------------------------------------------
# The live table of composite subscriptions
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompositeSubscription:
    """An active composite subscription.

    Attributes
    ----------
    subscription_id, subscriber_id : str
        Its id and its subscriber's (``""`` when the record did not carry one).
    tree : CompositeTree
        The validated tree; ``to_json(tree)`` is its canonical text.
    """

    subscription_id: str
    subscriber_id: str
    tree: CompositeTree

    def filters(self) -> dict[str, str]:
        """Synthetic filter id -> canonical filter text of every leaf (for the matching index)."""
        return {filter_id(self.subscription_id, leaf.id): leaf.text for leaf in self.tree.leaf_nodes}


CompositeChange: TypeAlias = tuple[str, CompositeSubscription | None]
"""``(subscription id, subscription)``; None removes it."""


@dataclass(frozen=True)
class CompositeOutcome:
    """What one subscriptions-topic record does to the composite table: a ``change``, a
    ``rejection`` ``(error_code, reason)`` for the dead-letter topic, or neither."""

    change: CompositeChange | None = None
    rejection: tuple[str, str] | None = None


def plan_composite_change(record: SubscriptionRecord) -> CompositeOutcome:
    """Decide what one subscriptions-topic record does to the composite subscriptions.

    The mirror of ``routing.matching.table.plan_change``, which decides for the atomic ones:

    - a tombstone, or ``unsubscribe``, removes the id (an unknown id is no change);
    - ``subscribe`` with a ``composite`` tree that parses adds it or replaces the one of that id;
    - ``subscribe`` with a valid atomic ``filter`` removes any composite of that id (the id now
      names an atomic subscription);
    - ``subscribe`` with a composite tree that does not parse is rejected with code
      ``invalid_composite`` and the parser's message, and changes nothing: an existing
      subscription of that id stays (a bad update never silently unsubscribes anyone);
    - every other bad record (it does not decode, breaks a rule, its atomic filter does not
      parse) changes nothing here and is not rejected here: the matching job dead-letters it.

    ``subscriber_id`` is the record's (``""`` when it has none).

    Examples
    --------
    >>> rec = SubscriptionRecord(op="subscribe", subscription_id="c1", composite='{"op": "or", "children": ["a = 1"]}')
    >>> plan_composite_change(rec).change[1].tree.root.op
    'or'
    >>> code, reason = plan_composite_change(
    ...     SubscriptionRecord(op="subscribe", subscription_id="c1", composite="{")
    ... ).rejection
    >>> print(code, reason)  # doctest: +ELLIPSIS
    invalid_composite composite root: not valid JSON: Expecting property name ... at line 1 column 2; expected ...
    """
    if record.tombstone:
        return CompositeOutcome(change=(record.key, None)) if record.key is not None else CompositeOutcome()
    if record.error_code is not None or record.subscription_id is None:
        return CompositeOutcome()
    sid = record.subscription_id
    if record.op == "unsubscribe":
        return CompositeOutcome(change=(sid, None))
    if record.composite is None or record.filter is not None:
        atomic = plan_change(record)
        return CompositeOutcome(change=(sid, None)) if atomic.change is not None else CompositeOutcome()
    try:
        tree = parse_composite(record.composite)
    except CompositeError as exc:
        return CompositeOutcome(rejection=("invalid_composite", f"composite {exc}"))
    subscriber = record.subscriber_id
    return CompositeOutcome(
        change=(sid, CompositeSubscription(sid, subscriber if isinstance(subscriber, str) else "", tree))
    )


def leaf_filter_changes(
    old: CompositeSubscription | None, new: CompositeSubscription | None
) -> list[tuple[str, str | None]]:
    """The atomic-filter changes that replace ``old``'s leaves by ``new``'s in a matching index.

    Each leaf is an atomic filter under its synthetic id (``filter_id``); the result is a list of
    ``routing.matching.table.Change`` ``(filter id, text or None)`` for ``SubscriptionTable.apply``:
    every leaf of ``new`` set (an unchanged text is no change there) and every leaf of ``old`` that
    ``new`` lacks removed.

    Examples
    --------
    >>> old = CompositeSubscription("c", "u", parse_composite({"op": "or", "children": ["a = 1", "b = 1"]}))
    >>> new = CompositeSubscription("c", "u", parse_composite({"op": "or", "children": ["a = 2"]}))
    >>> leaf_filter_changes(old, new)
    [('c#L1', 'a = 2'), ('c#L2', None)]
    >>> leaf_filter_changes(new, None)
    [('c#L1', None)]
    """
    after = new.filters() if new is not None else {}
    before = old.filters() if old is not None else {}
    changes: list[tuple[str, str | None]] = list(after.items())
    changes.extend((fid, None) for fid in before if fid not in after)
    return changes


class CompositeTable:
    """``subscription id -> CompositeSubscription``, with a count of effective changes.

    Examples
    --------
    >>> table = CompositeTable()
    >>> rejected = table.apply_records([
    ...     SubscriptionRecord(op="subscribe", subscription_id="c1", composite='{"op": "or", "children": ["a = 1"]}'),
    ...     SubscriptionRecord(op="subscribe", subscription_id="c2", composite='{"op": "and", "children": []}'),
    ...     SubscriptionRecord(op="subscribe", subscription_id="c3", composite='{"op": "or", "children": ["b = 1"]}'),
    ...     SubscriptionRecord(key="c3", tombstone=True)])
    >>> sorted(table.subscriptions), table.version
    (['c1'], 3)
    >>> [(i, code) for i, (code, _) in rejected]
    [(1, 'invalid_composite')]
    """

    def __init__(self) -> None:
        self._subs: dict[str, CompositeSubscription] = {}
        self._version = 0

    @property
    def subscriptions(self) -> Mapping[str, CompositeSubscription]:
        """The active composite subscriptions (a read-only view)."""
        return MappingProxyType(self._subs)

    @property
    def version(self) -> int:
        """The number of effective changes ever applied."""
        return self._version

    def __len__(self) -> int:
        return len(self._subs)

    def __contains__(self, subscription_id: object) -> bool:
        return subscription_id in self._subs

    def get(self, subscription_id: str) -> CompositeSubscription | None:
        return self._subs.get(subscription_id)

    def apply(self, changes: Iterable[CompositeChange]) -> None:
        """Apply changes in order; removing an absent id, or setting an equal subscription (same
        canonical tree and subscriber), is no change."""
        for sid, sub in changes:
            if sub is None:
                if self._subs.pop(sid, None) is None:
                    continue
            else:
                if self._subs.get(sid) == sub:
                    continue
                self._subs[sid] = sub
            self._version += 1

    def apply_records(self, records: Iterable[SubscriptionRecord]) -> list[tuple[int, tuple[str, str]]]:
        """Plan and apply records in order (``plan_composite_change``).

        Returns
        -------
        list of (int, (str, str))
            ``(position in records, (error_code, reason))`` of every rejected record, for the
            dead-letter topic.
        """
        rejected: list[tuple[int, tuple[str, str]]] = []
        for i, record in enumerate(records):
            outcome = plan_composite_change(record)
            if outcome.rejection is not None:
                rejected.append((i, outcome.rejection))
            elif outcome.change is not None:
                self.apply([outcome.change])
        return rejected
