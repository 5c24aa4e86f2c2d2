"""Composite detection (routing.composite.detection): the incremental detector against the brute-force
oracle ``detect_reference`` over generated trees and event sequences delivered out of order
within the watermark (docs/conventions.md §6), the policy on hand-written cases, late and expired
matches, the state bound, save/restore, and add/remove against a model (docs/conventions.md §7)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from routing.composite.detection import (
    CompositeDetector,
    DetectionRecord,
    DetectorConfig,
    detect_reference,
    detection_id,
)
from routing.composite.trees import CompositeTable, CompositeTree, filter_id, parse_composite, plan_composite_change
from routing.matching.table import SubscriptionRecord
from schemas.codec import codec_for
from tests.strategies import component_matches, composite_docs, composite_trees, out_of_order_deliveries

Detection = tuple[tuple[str, str, int], ...]
FAR = 10**6  # a watermark past every generated time plus every window


def _components(record: DetectionRecord) -> Detection:
    return tuple((c["leaf"], c["event_id"], c["published_at"]) for c in record["components"])


def _tree(doc: dict[str, Any]) -> CompositeTree:
    return parse_composite(doc)


def _run(tree: CompositeTree, matches: list[tuple[str, str, int]], k: int = 1000) -> list[Detection]:
    det = CompositeDetector(DetectorConfig(max_instances=k))
    det.add("c", tree)
    det.update([("c", leaf, e, t) for leaf, e, t in matches])
    return [_components(r) for r in det.advance(FAR)]


# --- the policy on hand-written cases ----------------------------------------------------------

AND = _tree({"op": "and", "within_ms": 10, "children": ["a = 1", "b = 1"]})
SEQ3 = _tree({"op": "seq", "within_ms": 10, "children": ["a = 1", "b = 1", "c = 1"]})


def test_and_uses_the_most_recent_partner_and_consumes_it() -> None:
    got = _run(AND, [("L1", "a1", 1), ("L1", "a2", 2), ("L2", "b1", 3), ("L2", "b2", 4), ("L2", "b3", 5)])
    # b1 takes a2 (the most recent), b2 takes a1, b3 finds nothing left
    assert got == [(("0", "a2", 2), ("1", "b1", 3)), (("0", "a1", 1), ("1", "b2", 4))]


def test_and_respects_the_window_inclusively() -> None:
    assert _run(AND, [("L1", "a", 0), ("L2", "b", 10)]) == [(("0", "a", 0), ("1", "b", 10))]
    assert _run(AND, [("L1", "a", 0), ("L2", "b", 11)]) == []


def test_seq_needs_strictly_increasing_times_and_looks_backwards() -> None:
    assert _run(SEQ3, [("L1", "a", 1), ("L2", "b", 1), ("L3", "c", 2)]) == []
    got = _run(SEQ3, [("L1", "a1", 1), ("L2", "b1", 2), ("L1", "a2", 3), ("L2", "b2", 4), ("L3", "c", 5)])
    assert got == [(("0", "a2", 3), ("1", "b2", 4), ("2", "c", 5))]
    # the most recent b (b2 at 4) is taken; then the most recent a strictly before it (a1, not a2 at 5)
    got = _run(SEQ3, [("L1", "a1", 1), ("L2", "b1", 2), ("L2", "b2", 4), ("L1", "a2", 5), ("L3", "c", 6)])
    assert got == [(("0", "a1", 1), ("1", "b2", 4), ("2", "c", 6))]
    # a last child that completes nothing is dropped: the later a/b cannot precede it
    assert _run(SEQ3, [("L3", "c", 1), ("L1", "a", 2), ("L2", "b", 3)]) == []


def test_or_reports_every_child_instance() -> None:
    tree = _tree({"op": "or", "children": ["a = 1", "b = 1"]})
    assert _run(tree, [("L2", "x", 3), ("L1", "y", 1), ("L1", "x", 3)]) == [
        (("0", "y", 1),),
        (("0", "x", 3),),
        (("1", "x", 3),),
    ]


def test_nested_trees_take_first_and_last_times_from_their_components() -> None:
    tree = _tree(
        {
            "op": "seq",
            "within_ms": 10,
            "children": [{"op": "and", "within_ms": 3, "children": ["a = 1", "b = 1"]}, "c = 1"],
        }
    )
    # the and completes at 5 (first 3); c at 5 is not strictly after its last time, c at 6 is
    got = _run(tree, [("L1", "a", 3), ("L2", "b", 5), ("L3", "c0", 5), ("L3", "c1", 6)])
    assert got == [(("0.0", "a", 3), ("0.1", "b", 5), ("1", "c1", 6))]
    # the window of the seq counts from the and's first component
    assert _run(tree, [("L1", "a", 3), ("L2", "b", 5), ("L3", "c", 14)]) == []


def test_or_within_bounds_the_span_of_child_detections() -> None:
    tree = _tree(
        {
            "op": "or",
            "within_ms": 2,
            "children": ["z = 1", {"op": "and", "within_ms": 10, "children": ["a = 1", "b = 1"]}],
        }
    )
    det = CompositeDetector()
    det.add("c", tree)
    det.update(
        [("c", "L2", "a", 0), ("c", "L3", "b", 5), ("c", "L2", "a2", 7), ("c", "L3", "b2", 8), ("c", "L1", "z", 9)]
    )
    assert [_components(r) for r in det.advance(FAR)] == [
        (("1.0", "a2", 7), ("1.1", "b2", 8)),
        (("0", "z", 9),),
    ]
    assert det.stats.expired == 1  # the (a, b) detection spans 5 > 2


def test_one_event_may_serve_several_leaves_of_an_and_but_never_of_a_seq() -> None:
    both = [("L1", "e", 4), ("L2", "e", 4)]
    assert _run(AND, both) == [(("0", "e", 4), ("1", "e", 4))]
    seq = _tree({"op": "seq", "within_ms": 10, "children": ["a = 1", "a = 1"]})
    assert _run(seq, both) == []
    assert _run(seq, [*both, ("L1", "f", 5), ("L2", "f", 5)]) == [(("0", "e", 4), ("1", "f", 5))]


def test_records_match_the_schema_and_name_their_components() -> None:
    tree = _tree({"op": "and", "within_ms": 100, "children": ["a = 1", {"op": "or", "children": ["b = 1", "c = 1"]}]})
    det = CompositeDetector()
    det.add('cs"1', tree, subscriber_id="u1")
    det.update([('cs"1', "L3", 'é"v', 1_700_000_000_050), ('cs"1', "L1", "e1", 1_700_000_000_000)])
    (record,) = det.advance(1_700_000_000_051)
    assert record == {
        "detection_id": detection_id('cs"1', ["0", "1.1"], ["e1", 'é"v']),
        "subscription_id": 'cs"1',
        "subscriber_id": "u1",
        "detected_at": 1_700_000_000_050,
        "components": [
            {"leaf": "0", "event_id": "e1", "published_at": 1_700_000_000_000},
            {"leaf": "1.1", "event_id": 'é"v', "published_at": 1_700_000_000_050},
        ],
    }
    assert record["detection_id"] == '["cs\\"1",[["0","e1"],["1.1","é\\"v"]]]'
    codec = codec_for("CompositeDetection")
    assert codec.decode_body(codec.encode(dict(record))[10:]) == record


# --- parity with the oracle, out-of-order delivery, late arrivals ------------------------------


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[CompositeTree, list[tuple[str, str, int]], Any, int]:
    tree = draw(composite_trees(max_depth=3))
    matches = draw(component_matches(tree))
    plan = draw(out_of_order_deliveries(matches))
    k = draw(st.sampled_from((1, 2, 3, 1000)))
    return tree, matches, plan, k


@settings(max_examples=250, deadline=None)
@given(scenarios(), st.data())
def test_detections_equal_the_oracle_whatever_the_arrival_order(scenario: Any, data: st.DataObject) -> None:
    tree, matches, plan, k = scenario
    config = DetectorConfig(max_instances=k)
    det = CompositeDetector(config)
    det.add("c", tree, "u")
    got: list[DetectionRecord] = []
    late = 0
    restore_at = data.draw(st.integers(-1, len(plan) - 1), label="restore after chunk")
    for i, (chunk, wm) in enumerate(plan):
        det.update([("c", leaf, e, t) for leaf, e, t in chunk])
        if det.watermark is not None and data.draw(st.booleans(), label="send a late one"):
            leaf = tree.leaf_nodes[0].id
            det.update([("c", leaf, "late", det.watermark - 1)])
            late += 1
        got.extend(det.advance(wm))
        for counts in det.stored_counts("c").values():
            assert all(n <= k for n in counts)
        if i == restore_at:
            det = CompositeDetector.from_bytes(det.to_bytes(), config)
    got.extend(det.advance(FAR))
    ref = detect_reference(tree, matches, max_instances=k)
    assert [_components(r) for r in got] == ref.detections
    stats = det.stats
    assert stats.late == late and stats.accepted == len(matches) and stats.unknown == 0
    assert stats.expired == ref.expired and stats.evicted == ref.evicted
    assert stats.stored == 0 and stats.pending == 0 and stats.detections == len(got)
    root_within = tree.root.within_ms
    for record in got:
        times = [c["published_at"] for c in record["components"]]
        assert record["detected_at"] == max(times)
        if root_within is not None:
            assert max(times) - min(times) <= root_within
        paths = [c["leaf"] for c in record["components"]]
        assert paths == sorted(paths, key=lambda p: [int(x) for x in p.split(".")])
        assert record["detection_id"] == detection_id("c", paths, [c["event_id"] for c in record["components"]])


@st.composite
def nested_scenarios(draw: st.DrawFn) -> tuple[CompositeTree, list[tuple[str, str, int]], Any]:
    """Operators over operators: instances whose first times are not in the order they were made,
    so the most recent partner within the window is not always the last one stored."""
    windows = st.sampled_from((2, 3, 4, 6))
    ops = st.sampled_from(("and", "seq"))

    def inner() -> Any:
        if draw(st.booleans()):
            return draw(st.sampled_from(("c = 1", "d = 1")))
        return {"op": draw(ops), "within_ms": draw(windows), "children": ["a = 1", "b = 1"]}

    tree = parse_composite({"op": draw(ops), "within_ms": draw(windows), "children": [inner(), inner(), inner()]})
    matches = draw(component_matches(tree, max_events=24, max_time=14))
    return tree, matches, draw(out_of_order_deliveries(matches))


@settings(max_examples=150, deadline=None)
@given(nested_scenarios())
def test_nested_operators_equal_the_oracle(scenario: Any) -> None:
    tree, matches, plan = scenario
    det = CompositeDetector()
    det.add("c", tree)
    got: list[DetectionRecord] = []
    for chunk, wm in plan:
        det.update([("c", leaf, e, t) for leaf, e, t in chunk])
        got.extend(det.advance(wm))
    got.extend(det.advance(FAR))
    ref = detect_reference(tree, matches)
    assert [_components(r) for r in got] == ref.detections
    assert det.stats.expired == ref.expired


# the shapes with their own loop in ``advance``: and/seq of two leaves, or of leaves
LOOP_TREES = (
    *(_tree({"op": op, "within_ms": w, "children": ["a = 1", "b = 1"]}) for op in ("and", "seq") for w in (1, 3, 6)),
    _tree({"op": "or", "children": ["a = 1", "b = 1", "c = 1"]}),
    _tree({"op": "or", "children": ["a = 1"]}),
)


def _feed(det: CompositeDetector, chunk: list[tuple[str, str, int]], per_leaf: bool) -> None:
    """``chunk`` of subscription "c" as ``update`` takes it, or leaf by leaf as ``update_leaf``."""
    if not per_leaf:
        det.update([("c", leaf, e, t) for leaf, e, t in chunk])
        return
    for leaf in sorted({leaf for leaf, _, _ in chunk}):
        mine = [(e, t) for other, e, t in chunk if other == leaf]
        det.update_leaf("c", leaf, [e for e, _ in mine], [t for _, t in mine])


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(LOOP_TREES), st.data())
def test_the_shapes_with_their_own_loop_equal_the_oracle(tree: CompositeTree, data: st.DataObject) -> None:
    matches = data.draw(component_matches(tree, max_events=30, max_time=25), label="matches")
    plan = data.draw(out_of_order_deliveries(matches), label="plan")
    k = data.draw(st.sampled_from((1, 2, 3, 1000)), label="K")
    det = CompositeDetector(DetectorConfig(max_instances=k))
    det.add("c", tree, "u")
    got: list[DetectionRecord] = []
    for chunk, wm in plan:
        _feed(det, chunk, data.draw(st.booleans(), label="per leaf"))
        got.extend(det.advance(wm))
        assert all(n <= k for counts in det.stored_counts("c").values() for n in counts)
        if data.draw(st.booleans(), label="save and restore"):
            det = CompositeDetector.from_bytes(det.to_bytes(), det.config)
    got.extend(det.advance(FAR))
    ref = detect_reference(tree, matches, max_instances=k)
    assert [_components(r) for r in got] == ref.detections
    assert (det.stats.expired, det.stats.evicted, det.stats.stored) == (ref.expired, ref.evicted, 0)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from((AND, SEQ3, *LOOP_TREES)), st.data())
def test_update_leaf_is_update_of_each_match(tree: CompositeTree, data: st.DataObject) -> None:
    matches = data.draw(component_matches(tree), label="matches")
    watermark = data.draw(st.integers(-1, 21), label="watermark first")
    unknown = data.draw(st.sampled_from(("L9", "nope")), label="unknown")
    twins = [CompositeDetector(), CompositeDetector()]
    for det in twins:
        det.add("c", tree, "u")
        det.advance(watermark)
    twins[0].update([("c", leaf, e, t) for leaf, e, t in matches])
    twins[0].update([("c" if unknown == "L9" else unknown, "L9" if unknown == "L9" else "L1", "x", t) for t in (0, 30)])
    _feed(twins[1], matches, per_leaf=True)
    if unknown == "L9":
        twins[1].update_leaf("c", "L9", ["x", "x"], [0, 30])
    else:
        twins[1].update_leaf(unknown, "L1", ["x", "x"], [0, 30])
    assert twins[0].stats == twins[1].stats
    assert twins[0].advance(FAR) == twins[1].advance(FAR)
    with pytest.raises(ValueError, match="2 event ids but 1 event times"):
        twins[1].update_leaf("c", "L1", ["a", "b"], [1])


def test_detections_are_kept_compact_until_asked_for() -> None:
    det = CompositeDetector()
    det.add("s", AND, "u1")
    det.add("o", _tree({"op": "or", "children": ["a = 1", "b = 1"]}), "u2")
    det.add("n", _tree({"op": "and", "within_ms": 5, "children": ["a = 1", {"op": "or", "children": ["b=1", "c=1"]}]}))
    det.update(
        [("s", "L1", "a", 1), ("s", "L2", "b", 2), ("o", "L2", "x", 3), ("n", "L3", "y", 4), ("n", "L1", "z", 4)]
    )
    found = det.advance_rows(10)
    assert len(found) == 3 and [len(b) for b in found.blocks] == [1, 1, 1]
    assert [(src.subscription_id, at, comps) for src, at, comps in found.rows()] == [
        ("s", 2, ((0, "a", 1), (1, "b", 2))),
        ("o", 3, ((1, "x", 3),)),
        ("n", 4, ((0, "z", 4), (2, "y", 4))),
    ]
    assert (
        found.ids()
        == [r["detection_id"] for r in found]
        == [
            detection_id(
                r["subscription_id"], [c["leaf"] for c in r["components"]], [c["event_id"] for c in r["components"]]
            )
            for r in found
        ]
    )
    assert found == list(found) and found[1:] == found.records()[1:] and found != "x"
    assert found[2]["components"] == [
        {"leaf": "0", "event_id": "z", "published_at": 4},
        {"leaf": "1.1", "event_id": "y", "published_at": 4},
    ]
    assert det.advance_rows(10) == [] and len(det.advance_rows(11)) == 0


def test_and_and_seq_skip_a_recent_partner_that_started_too_early() -> None:
    for op in ("and", "seq"):
        inner = {"op": "and", "within_ms": 5, "children": ["a = 1", "b = 1"]}
        tree = _tree({"op": op, "within_ms": 5, "children": [inner, "c = 1"]})
        # (a3, b4) is made at 4 with first time 3, (a0, b5) at 5 with first time 0: c at 6 can only use
        # the older one
        got = _run(tree, [("L1", "a0", 0), ("L1", "a3", 3), ("L2", "b4", 4), ("L2", "b5", 5), ("L3", "c", 6)])
        assert got == [(("0.0", "a3", 3), ("0.1", "b4", 4), ("1", "c", 6))]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_subscriptions_are_independent_in_one_detector(data: st.DataObject) -> None:
    trees = {f"c{i}": data.draw(composite_trees(max_depth=2), label=f"tree {i}") for i in range(3)}
    per_sub = {sid: data.draw(component_matches(tree, max_events=8), label=sid) for sid, tree in trees.items()}
    tagged = [(sid, leaf, e, t) for sid, ms in per_sub.items() for leaf, e, t in ms]
    plan = data.draw(out_of_order_deliveries(tagged), label="plan")
    det = CompositeDetector()
    for sid, tree in trees.items():
        det.add(sid, tree)
    got: dict[str, list[Detection]] = {sid: [] for sid in trees}
    for chunk, wm in plan:
        det.update(chunk)
        for record in det.advance(wm):
            got[record["subscription_id"]].append(_components(record))
    for record in det.advance(FAR):
        got[record["subscription_id"]].append(_components(record))
    for sid, tree in trees.items():
        assert got[sid] == detect_reference(tree, per_sub[sid]).detections


def test_late_and_unknown_matches_are_dropped_and_counted() -> None:
    det = CompositeDetector()
    det.add("c", AND)
    det.update([("c", "L1", "a", 5)])
    assert det.advance(5) == []  # 5 is not below the watermark 5: still pending
    det.update([("c", "L1", "x", 4), ("nope", "L1", "y", 9), ("c", "L9", "z", 9), ("c", "L2", "b", 5)])
    assert [_components(r) for r in det.advance(6)] == [(("0", "a", 5), ("1", "b", 5))]
    assert (det.stats.late, det.stats.unknown, det.stats.accepted) == (1, 2, 2)
    assert det.advance(3) == [] and det.watermark == 6  # a watermark never goes back


def test_update_from_matches_reads_the_matching_jobs_output() -> None:
    det = CompositeDetector()
    det.add("c#1", AND)
    det.update_from_matches(
        ["e1", "e2", "e3"],
        [1, 2, 3],
        [[filter_id("c#1", "L1"), "s1"], ["c#1#n1", "x#"], [filter_id("c#1", "L2"), filter_id("other", "L1")]],
    )
    assert det.stats.accepted == 2 and det.stats.unknown == 1
    assert [r["detection_id"] for r in det.advance(10)] == ['["c#1",[["0","e1"],["1","e3"]]]']


# --- expiry and the state bound ----------------------------------------------------------------


def test_expired_partial_matches_are_dropped_by_the_watermark() -> None:
    det = CompositeDetector()
    det.add("c", SEQ3)
    det.update([("c", "L1", "a", 0), ("c", "L2", "b", 1), ("c", "L1", "a2", 8)])
    det.advance(10)
    assert det.stored_counts("c") == {"n1": [2, 1, 0]} and det.stats.expired == 0
    det.advance(11)  # a and b (first time 0, 1) can no longer complete a pattern ending at >= 11
    assert det.stored_counts("c") == {"n1": [1, 1, 0]} and det.stats.expired == 1
    det.advance(12)
    assert det.stored_counts("c") == {"n1": [1, 0, 0]} and det.stats.expired == 2


def test_the_state_bound_evicts_the_oldest() -> None:
    det = CompositeDetector(DetectorConfig(max_instances=3))
    det.add("c", AND)
    det.update([("c", "L1", f"a{i}", i) for i in range(10)])
    det.advance(10)
    assert det.stored_counts("c") == {"n1": [3, 0]} and det.stats.evicted == 7
    det.update([("c", "L2", f"b{i}", 10 + i) for i in range(4)])
    assert [_components(r)[0][1] for r in det.advance(20)] == ["a9", "a8", "a7"]
    with pytest.raises(ValueError, match="max_instances must be >= 1"):
        DetectorConfig(max_instances=0)


# --- subscriptions: add, replace, remove -------------------------------------------------------


def test_replace_with_an_equal_tree_keeps_state_and_another_resets_it() -> None:
    det = CompositeDetector()
    det.add("c", AND, "u")
    det.update([("c", "L1", "a", 1)])
    det.advance(2)
    det.add("c", parse_composite({"op": "and", "within_ms": 10, "children": ["a=1", "b  = 1"]}), "u")
    assert det.stats.stored == 1
    det.update([("c", "L2", "x", 2)])  # pending when the next replacement comes
    det.add("c", AND, "u2")  # drops the stored a and the pending x (it belonged to the old one)
    assert det.stats.stored == 0 and det.stats.pending == 0 and det.stats.dropped_removed == 2
    det.update([("c", "L2", "b", 3)])
    assert det.advance(5) == [] and det.stats.dropped_removed == 2
    det.remove("c")
    assert "c" not in det and len(det) == 0 and det.stats.dropped_removed == 3
    with pytest.raises(KeyError):
        det.remove("c")


MACHINE_SIDS = ("c1", "c2")
MACHINE_TREES = tuple(
    _tree(doc)
    for doc in (
        {"op": "and", "within_ms": 3, "children": ["a = 1", "b = 1"]},
        {"op": "seq", "within_ms": 4, "children": ["a = 1", "b = 1", "c = 1"]},
        {"op": "or", "children": ["a = 1", {"op": "seq", "within_ms": 2, "children": ["b = 1", "a = 1"]}]},
    )
)


class DetectorMachine(RuleBasedStateMachine):
    """Subscriptions added, replaced and removed between updates and watermarks. The model keeps,
    per subscription incarnation, the tree and the matches it accepted; what the detector emitted
    for the incarnation must be the oracle's detections over them that the watermark has passed."""

    def __init__(self) -> None:
        super().__init__()
        self.det = CompositeDetector(DetectorConfig(max_instances=2))
        self.model: dict[str, tuple[CompositeTree, list[tuple[str, str, int]]]] = {}
        self.emitted: dict[str, list[Detection]] = {}
        self.wm = 0
        self.det.advance(self.wm)  # the model's watermark from the start (a new detector has none)
        self.next_event = 0

    @rule(sid=st.sampled_from(MACHINE_SIDS), tree=st.sampled_from(MACHINE_TREES))
    def add(self, sid: str, tree: CompositeTree) -> None:
        self.det.add(sid, tree)
        if sid not in self.model or self.model[sid][0] != tree:
            self.model[sid] = (tree, [])
            self.emitted[sid] = []

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from(sorted(self.model)))
        self.det.remove(sid)
        del self.model[sid], self.emitted[sid]
        assert sid not in self.det

    @rule(
        sid=st.sampled_from(MACHINE_SIDS),
        leaf=st.sampled_from(("L1", "L2", "L3", "L4")),
        dt=st.integers(-2, 4),
    )
    def match(self, sid: str, leaf: str, dt: int) -> None:
        t = self.wm + dt
        eid = f"e{self.next_event}"
        self.next_event += 1
        self.det.update([(sid, leaf, eid, t)])
        if sid in self.model and t >= self.wm:
            tree, accepted = self.model[sid]
            if any(node.id == leaf for node in tree.leaf_nodes):
                accepted.append((leaf, eid, t))

    @rule(step=st.integers(0, 3))
    def advance(self, step: int) -> None:
        self.wm += step
        for record in self.det.advance(self.wm):
            self.emitted[record["subscription_id"]].append(_components(record))

    @invariant()
    def agrees(self) -> None:
        assert self.det.subscription_ids() == sorted(self.model)
        for sid, (tree, accepted) in self.model.items():
            ref = detect_reference(tree, accepted, max_instances=2)
            final = [d for d in ref.detections if max(t for _, _, t in d) < self.wm]
            assert self.emitted[sid] == final
            assert all(n <= 2 for counts in self.det.stored_counts(sid).values() for n in counts)


TestDetectorMachine = DetectorMachine.TestCase
TestDetectorMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


@settings(max_examples=30, deadline=None)
@given(composite_docs(max_depth=3))
def test_a_restored_detector_keeps_its_subscriptions(doc: dict[str, Any]) -> None:
    det = CompositeDetector()
    det.add("c", parse_composite(doc), "u")
    det.update([("c", "L1", "e", 5)])
    blob = det.to_bytes()
    again = CompositeDetector.from_bytes(blob)
    assert again.to_bytes() == blob and again.stats == det.stats and again.subscription_ids() == ["c"]
    with pytest.raises(ValueError, match="unknown detector state format"):
        CompositeDetector.from_bytes(b'{"format": 99}')


def test_apply_follows_the_table() -> None:
    table = CompositeTable()
    det = CompositeDetector()
    records = [
        SubscriptionRecord(op="subscribe", subscription_id="c1", composite='{"op": "or", "children": ["a = 1"]}'),
        SubscriptionRecord(op="subscribe", subscription_id="c2", composite='{"op": "or", "children": ["b = 1"]}'),
        SubscriptionRecord(op="unsubscribe", subscription_id="c1"),
        SubscriptionRecord(op="unsubscribe", subscription_id="c9"),
    ]
    changes = [c for c in (plan_composite_change(r).change for r in records) if c is not None]
    table.apply(changes)
    det.apply(changes)
    assert det.subscription_ids() == sorted(table.subscriptions) == ["c2"]
