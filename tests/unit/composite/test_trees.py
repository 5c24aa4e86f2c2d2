"""Composite subscriptions (routing.composite.trees): the parser and its errors, ids and paths,
canonical JSON, output rates, synthetic filter ids, and the live table against a dict model."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from routing.composite.trees import (
    MAX_DEPTH,
    MAX_LEAVES,
    MAX_WITHIN_MS,
    CompositeError,
    CompositeSubscription,
    CompositeTable,
    CompositeTree,
    Leaf,
    Operator,
    filter_id,
    leaf_filter_changes,
    leaves,
    output_rate,
    output_rates,
    parse_composite,
    plan_composite_change,
    split_filter_id,
    to_json,
    to_placement_tree,
)
from routing.matching.language import FilterError, parse_filter
from routing.matching.table import SubscriptionRecord
from tests.strategies import composite_docs

AND2 = {"op": "and", "within_ms": 10, "children": ["a = 1", "b = 1"]}


def _nest(depth: int) -> dict[str, Any]:
    doc: dict[str, Any] = {"op": "or", "children": ["a = 1"]}
    for _ in range(depth - 1):
        doc = {"op": "or", "children": [doc]}
    return doc


# --- errors: every class, with where, what and what would be valid ------------------------------


@pytest.mark.parametrize(
    ("doc", "path", "message"),
    [
        ("{", "root", "not valid JSON: Expecting property name enclosed in double quotes at line 1 column 2"),
        ('{"op": "or",\n "children": ["a = 1"],}', "root", "at line 2 column 24; expected a JSON object"),
        ('{"op": "or", "op": "and", "children": ["a = 1"]}', "root", "duplicate key 'op'"),
        ('"a = 1"', "root", "the root must be an operator object"),
        ('["a = 1"]', "root", "expected a filter text or an operator object"),
        ({"children": ["a = 1"]}, "root", "missing 'op'; expected one of 'and', 'or', 'seq'"),
        ({"op": "xor", "children": ["a = 1"]}, "root", "unknown op 'xor'; expected one of 'and', 'or', 'seq'"),
        ({"op": 3, "children": ["a = 1"]}, "root", "'op' must be one of 'and', 'or', 'seq', found the number 3"),
        ({"op": "and", "children": ["a = 1", "b = 1"]}, "root", "'and' needs within_ms, a positive integer"),
        ({"op": "seq", "children": ["a = 1", "b = 1"]}, "root", "'seq' needs within_ms"),
        ({**AND2, "within_ms": 0}, "root", "between 1 and 9007199254740991, found 0"),
        ({**AND2, "within_ms": -5}, "root", "found -5"),
        ({**AND2, "within_ms": 1.5}, "root", "within_ms must be a positive integer number of milliseconds"),
        ({**AND2, "within_ms": 100.0}, "root", "found the number 100.0"),
        ({**AND2, "within_ms": "100"}, "root", "found a string"),
        ({**AND2, "within_ms": True}, "root", "found a boolean"),
        ({**AND2, "within_ms": None}, "root", "found null"),
        ({**AND2, "within_ms": MAX_WITHIN_MS + 1}, "root", "between 1 and"),
        ({"op": "or", "within_ms": 0, "children": ["a = 1"]}, "root", "within_ms must be"),
        ({"op": "or"}, "root", "missing 'children': 'or' needs a list"),
        ({"op": "or", "children": "a = 1"}, "root", "'children' must be a list of filter texts and operator objects"),
        ({"op": "or", "children": []}, "root", "'or' needs at least 1 child, found 0"),
        ({"op": "and", "within_ms": 5, "children": ["a = 1"]}, "root", "'and' needs at least 2 children, found 1"),
        ({"op": "seq", "within_ms": 5, "children": ["a = 1"]}, "root", "'seq' needs at least 2 children"),
        ({"op": "or", "children": ["a = 1", 5]}, "children[1]", "found the number 5"),
        ({"op": "or", "children": [None]}, "children[0]", "found null"),
        ({"op": "or", "children": [["a = 1"]]}, "children[0]", "found a list"),
        ({"op": "or", "withinMs": 5, "children": ["a = 1"]}, "root", "unknown key 'withinMs'; an operator object"),
        (
            {"op": "or", "children": ["a = 1", {"op": "and", "within_ms": 5, "children": ["b = 1", {"op": "nand"}]}]},
            "children[1].children[1]",
            "unknown op 'nand'",
        ),
        (_nest(MAX_DEPTH + 1), "root" + ".children[0]" * MAX_DEPTH, "too deep: at most 16 levels of operators"),
        (
            {"op": "or", "children": [f"a = {i}" for i in range(MAX_LEAVES + 1)]},
            f"children[{MAX_LEAVES}]",
            "too many leaves: at most 64 filters",
        ),
    ],
)
def test_errors_name_the_node_what_was_wrong_and_what_is_valid(doc: Any, path: str, message: str) -> None:
    with pytest.raises(CompositeError) as info:
        parse_composite(doc)
    # nested paths start at the root's children: "root.children[0]..." is written "children[0]..."
    expected_path = path.removeprefix("root.") if path != "root" else path
    assert info.value.path == expected_path
    assert message in info.value.reason
    assert str(info.value) == f"{expected_path}: {info.value.reason}"
    assert isinstance(info.value, ValueError)


def test_a_leaf_that_does_not_parse_is_named_and_carries_the_parsers_error() -> None:
    doc = {"op": "or", "children": ["a = 1", {"op": "seq", "within_ms": 3, "children": ["b = 1", "flag < true"]}]}
    with pytest.raises(CompositeError) as info:
        parse_composite(json.dumps(doc))
    error = info.value
    assert error.path == "children[1].children[1]"
    assert isinstance(error.filter_error, FilterError)
    assert error.filter_error.position == 7
    assert str(error) == (
        "children[1].children[1]: filter at position 7: expected a number or a 'string' "
        "(booleans take only = and !=), found 'true'\n  flag < true\n         ^"
    )


def test_the_limits_themselves_are_allowed() -> None:
    assert parse_composite(_nest(MAX_DEPTH)).root.op == "or"
    wide = parse_composite({"op": "or", "children": [f"a = {i}" for i in range(MAX_LEAVES)]})
    assert len(wide.leaf_nodes) == MAX_LEAVES
    assert parse_composite({**AND2, "within_ms": MAX_WITHIN_MS}).root.within_ms == MAX_WITHIN_MS


# --- ids, paths, canonical form ----------------------------------------------------------------


def test_ids_and_paths_in_document_order() -> None:
    tree = parse_composite(
        {
            "op": "and",
            "within_ms": 60000,
            "children": [
                "kind = 'flight' and price < 400",
                "kind = 'hotel' and nights >= 3",
                {"op": "or", "children": ["kind = 'weather' and sky = 'clear'", "kind = 'weather' and temp > 25"]},
            ],
        }
    )
    assert [(n.id, n.path) for n in tree.nodes()] == [
        ("n1", ""),
        ("L1", "0"),
        ("L2", "1"),
        ("n2", "2"),
        ("L3", "2.0"),
        ("L4", "2.1"),
    ]
    inner = tree.root.children[2]
    assert isinstance(inner, Operator) and inner.within_ms is None and inner.op == "or"
    assert tree.leaf("L4").text == "kind = 'weather' and temp > 25"
    with pytest.raises(KeyError):
        tree.leaf("L5")
    assert list(leaves(tree)) == ["L1", "L2", "L3", "L4"]
    assert to_placement_tree(tree) == {
        "id": "n1",
        "op": "and",
        "children": [
            {"leaf": "L1"},
            {"leaf": "L2"},
            {"id": "n2", "op": "or", "children": [{"leaf": "L3"}, {"leaf": "L4"}]},
        ],
    }


def _walk(doc: Any, path: tuple[int, ...] = ()) -> list[tuple[tuple[int, ...], Any]]:
    out = [(path, doc)]
    if isinstance(doc, dict):
        for i, child in enumerate(doc["children"]):
            out.extend(_walk(child, (*path, i)))
    return out


@settings(max_examples=150, deadline=None)
@given(composite_docs(max_depth=4))
def test_round_trips_ids_and_paths(doc: dict[str, Any]) -> None:
    tree = parse_composite(doc)
    text = to_json(tree)
    again = parse_composite(text)
    assert again == tree and to_json(again) == text
    assert parse_composite(json.loads(text)) == tree
    nodes = list(tree.nodes())
    walked = _walk(doc)
    assert len(nodes) == len(walked)
    n_ops = n_leaves = 0
    for node, (path, sub) in zip(nodes, walked, strict=True):
        assert node.path == ".".join(map(str, path))
        if isinstance(node, Leaf):
            n_leaves += 1
            assert node.id == f"L{n_leaves}"
            assert node.filter == parse_filter(sub) and node.text == str(parse_filter(sub))
        else:
            n_ops += 1
            assert node.id == f"n{n_ops}"
            assert node.op == sub["op"].lower() and node.within_ms == sub.get("within_ms")
    assert tree.leaf_nodes == tuple(n for n in nodes if isinstance(n, Leaf))
    assert leaves(tree) == {leaf.id: leaf.text for leaf in tree.leaf_nodes}


def test_or_within_ms_is_optional_and_kept() -> None:
    tree = parse_composite({"op": "or", "within_ms": 7, "children": ["a = 1"]})
    assert tree.root.within_ms == 7
    assert to_json(tree) == '{"op":"or","within_ms":7,"children":["a = 1"]}'
    assert parse_composite({"op": "or", "within_ms": None, "children": ["a = 1"]}).root.within_ms is None


def test_canonical_json_is_spacing_and_case_insensitive() -> None:
    a = parse_composite('{"op":"SEQ","within_ms":5,"children":["x>1","y  in ( \'a\' ,\'b\')"]}')
    b = parse_composite({"children": ["x > 1", "y IN ('a', 'b')"], "within_ms": 5, "op": "seq"})
    assert (
        a == b and to_json(a) == to_json(b) == '{"op":"seq","within_ms":5,"children":["x > 1","y in (\'a\', \'b\')"]}'
    )
    assert parse_composite({**AND2, "within_ms": 11}) != parse_composite(AND2)


# --- output rates (Li & Jacobsen Definition 2) -------------------------------------------------


def test_output_rates() -> None:
    tree = parse_composite(
        {
            "op": "or",
            "children": [
                {"op": "and", "within_ms": 5, "children": ["a = 1", "b = 1", "c = 1"]},
                {"op": "seq", "within_ms": 5, "children": ["d = 1", {"op": "or", "children": ["e = 1", "f = 1"]}]},
                "g = 1",
            ],
        }
    )
    rates = {"L1": 4.0, "L2": 2.0, "L3": 3.0, "L4": 10.0, "L5": 1.5, "L6": 2.5, "L7": 0.25}
    got = output_rates(tree, rates)
    assert got == {
        "n1": 2.0 + 4.0 + 0.25,
        "n2": 2.0,
        **{k: rates[k] for k in ("L1", "L2", "L3", "L4")},
        "n3": 4.0,
        "L4": 10.0,
        "n4": 4.0,
        "L5": 1.5,
        "L6": 2.5,
        "L7": 0.25,
    }
    assert list(got) == [n.id for n in tree.nodes()]
    assert output_rate(tree, rates) == 6.25
    with pytest.raises(ValueError, match="no rate for leaf L7"):
        output_rate(tree, {k: v for k, v in rates.items() if k != "L7"})
    with pytest.raises(ValueError, match="rate of leaf L1 must be a number >= 0"):
        output_rate(tree, {**rates, "L1": -1.0})
    with pytest.raises(ValueError, match="rate of leaf L1"):
        output_rate(tree, {**rates, "L1": float("nan")})


# --- synthetic filter ids ----------------------------------------------------------------------


@given(st.text(max_size=6), st.integers(1, MAX_LEAVES))
def test_filter_ids_split_back(sid: str, k: int) -> None:
    assert split_filter_id(filter_id(sid, f"L{k}")) == (sid, f"L{k}")


@pytest.mark.parametrize("fid", ["s1", "s1#", "s1#L", "s1#n1", "s1#Lx", "s1#l1", "#", "L1"])
def test_other_ids_are_not_synthetic(fid: str) -> None:
    assert split_filter_id(fid) is None


def test_subscription_filters_name_every_leaf() -> None:
    sub = CompositeSubscription("c#1", "u", parse_composite(AND2))
    assert sub.filters() == {"c#1#L1": "a = 1", "c#1#L2": "b = 1"}


# --- the table ---------------------------------------------------------------------------------


def _comp(sid: str, doc: Any, **fields: Any) -> SubscriptionRecord:
    text = doc if isinstance(doc, str) else json.dumps(doc)
    return SubscriptionRecord(key=sid, op="subscribe", subscription_id=sid, composite=text, **fields)


def test_plan_composite_change() -> None:
    tree = parse_composite(AND2)
    assert plan_composite_change(_comp("c1", AND2)).change == ("c1", CompositeSubscription("c1", "", tree))
    rec = SubscriptionRecord(op="subscribe", subscription_id="c1", composite=json.dumps(AND2), subscriber_id="u7")
    assert plan_composite_change(rec).change == ("c1", CompositeSubscription("c1", "u7", tree))
    assert plan_composite_change(SubscriptionRecord(key="c1", tombstone=True)).change == ("c1", None)
    assert plan_composite_change(SubscriptionRecord(tombstone=True)).change is None
    assert plan_composite_change(SubscriptionRecord(op="unsubscribe", subscription_id="c1")).change == ("c1", None)
    atomic = SubscriptionRecord(op="subscribe", subscription_id="c1", filter="x > 1")
    assert plan_composite_change(atomic).change == ("c1", None)  # the id now names an atomic subscription
    for ignored in [
        SubscriptionRecord(op="subscribe", subscription_id="c1", filter="x <"),  # the matching job rejects it
        SubscriptionRecord(op="subscribe", subscription_id="c1", error_code="bad_framing", reason="..."),
        SubscriptionRecord(op="subscribe", subscription_id="c1"),
        SubscriptionRecord(op="subscribe"),
    ]:
        outcome = plan_composite_change(ignored)
        assert outcome.change is None and outcome.rejection is None
    bad = plan_composite_change(_comp("c1", {"op": "and", "children": ["a = 1", "b = 1"]}))
    assert bad.change is None
    assert bad.rejection == (
        "invalid_composite",
        "composite root: 'and' needs within_ms, a positive integer number of milliseconds (e.g. \"within_ms\": 60000)",
    )


def test_table_add_replace_remove_reject() -> None:
    table = CompositeTable()
    other = {"op": "or", "children": ["c = 1"]}
    rejected = table.apply_records(
        [
            _comp("c1", AND2),
            _comp("c2", other),
            _comp("c1", AND2),  # equal: no change
            _comp("c2", '{"op": "or", "children": ["c  =  1"]}'),  # the same canonical tree: no change
            _comp("c1", {"op": "xor"}),  # rejected: c1 stays as it was
            _comp("c2", AND2),  # replaced
            SubscriptionRecord(op="unsubscribe", subscription_id="nope"),  # unknown: no change
            SubscriptionRecord(key="c1", tombstone=True),
            SubscriptionRecord(op="subscribe", subscription_id="c3", filter="x = 1"),  # atomic: not ours
        ]
    )
    assert [(i, code) for i, (code, _) in rejected] == [(4, "invalid_composite")]
    assert "unknown op 'xor'" in rejected[0][1][1]
    assert sorted(table.subscriptions) == ["c2"] and len(table) == 1 and "c2" in table and "c1" not in table
    assert table.get("c2") == CompositeSubscription("c2", "", parse_composite(AND2))
    assert table.version == 4  # c1 added, c2 added, c2 replaced, c1 removed
    with pytest.raises(TypeError):
        table.subscriptions["x"] = table.get("c2")  # type: ignore[index]


SIDS = ("c1", "c2", "c3")
TREE_DOCS = (AND2, {"op": "or", "children": ["c = 1"]}, {"op": "seq", "within_ms": 2, "children": ["a = 1", "a = 1"]})


class TableMachine(RuleBasedStateMachine):
    """CompositeTable against a dict model (docs/conventions.md §7)."""

    def __init__(self) -> None:
        super().__init__()
        self.table = CompositeTable()
        self.model: dict[str, str] = {}
        self.version = 0

    def _set(self, sid: str, text: str | None) -> None:
        if text is None:
            if self.model.pop(sid, None) is not None:
                self.version += 1
        elif self.model.get(sid) != text:
            self.model[sid] = text
            self.version += 1

    @rule(sid=st.sampled_from(SIDS), doc=st.sampled_from(TREE_DOCS))
    def subscribe(self, sid: str, doc: dict[str, Any]) -> None:
        assert self.table.apply_records([_comp(sid, doc)]) == []
        self._set(sid, to_json(parse_composite(doc)))

    @rule(sid=st.sampled_from(SIDS))
    def subscribe_invalid(self, sid: str) -> None:
        assert len(self.table.apply_records([_comp(sid, {"op": "and", "within_ms": 1, "children": []})])) == 1

    @rule(sid=st.sampled_from(SIDS), valid=st.booleans())
    def subscribe_atomic(self, sid: str, valid: bool) -> None:
        text = "x = 1" if valid else "x ="
        assert self.table.apply_records([SubscriptionRecord(op="subscribe", subscription_id=sid, filter=text)]) == []
        if valid:
            self._set(sid, None)

    @rule(sid=st.sampled_from(SIDS), tombstone=st.booleans())
    def unsubscribe(self, sid: str, tombstone: bool) -> None:
        rec = (
            SubscriptionRecord(key=sid, tombstone=True)
            if tombstone
            else SubscriptionRecord(op="unsubscribe", subscription_id=sid)
        )
        assert self.table.apply_records([rec]) == []
        self._set(sid, None)

    @invariant()
    def agrees(self) -> None:
        assert {sid: to_json(sub.tree) for sid, sub in self.table.subscriptions.items()} == self.model
        assert self.table.version == self.version


TestTable = TableMachine.TestCase
TestTable.settings = settings(max_examples=60, stateful_step_count=20, deadline=None)


def test_tree_equality_ignores_nothing_that_matters() -> None:
    a, b = parse_composite(AND2), parse_composite({**AND2, "children": ["b = 1", "a = 1"]})
    assert a != b  # children order matters (for seq it is the meaning; for and, the leaf ids)
    assert isinstance(a, CompositeTree) and hash(a.root) == hash(parse_composite(AND2).root)


def test_leaf_filter_changes_move_a_matching_index_from_one_tree_to_the_next() -> None:
    old = CompositeSubscription("c", "u", parse_composite({"op": "or", "children": ["a = 1", "b = 1", "c = 1"]}))
    new = CompositeSubscription("c", "u", parse_composite(AND2))
    assert leaf_filter_changes(None, new) == [("c#L1", "a = 1"), ("c#L2", "b = 1")]
    assert leaf_filter_changes(old, new) == [("c#L1", "a = 1"), ("c#L2", "b = 1"), ("c#L3", None)]
    assert leaf_filter_changes(old, None) == [("c#L1", None), ("c#L2", None), ("c#L3", None)]
