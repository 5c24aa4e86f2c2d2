"""The matching job's pure pieces: record -> change, the versioned table, index replicas, the store.

Models are plain dicts (docs/conventions.md §7); expected matches come from ``BruteForceIndex`` over the
model, never from the replica's own index.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from routing.matching.index import BruteForceIndex, MatchIndex
from routing.matching.language import Filter, parse_filter
from routing.matching.table import (
    Delta,
    IndexReplica,
    RecordColumns,
    SubscriptionRecord,
    SubscriptionTable,
    plan_change,
    plan_changes,
    plan_columns,
)
from streaming.subscription_store import TableStore
from tests.strategies import INDEX_IDS, index_events, index_filters

# --- plan_change -------------------------------------------------------------------------------


def _sub(**fields: object) -> SubscriptionRecord:
    base: dict[str, object] = {"key": "s1", "op": "subscribe", "subscription_id": "s1"}
    base.update(fields)
    return SubscriptionRecord(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("record", "change", "code", "skipped"),
    [
        (_sub(filter="x > 1"), ("s1", "x > 1"), None, False),
        (_sub(op="unsubscribe"), ("s1", None), None, False),
        (SubscriptionRecord(key="s9", tombstone=True), ("s9", None), None, False),
        (SubscriptionRecord(key=None, tombstone=True), None, None, False),
        (_sub(composite='{"op": "or", "children": ["x = 1"]}'), ("s1", None), None, True),
        (_sub(filter="x <"), None, "invalid_filter", False),
        (_sub(filter="flag < true"), None, "invalid_filter", False),
        (_sub(error_code="bad_framing", reason="value does not start with ..."), None, "bad_framing", False),
        (_sub(error_code="invalid_value", reason="subscriber_id is required"), None, "invalid_value", False),
        (_sub(), None, "invalid_value", False),
    ],
)
def test_plan_change(record: SubscriptionRecord, change: object, code: str | None, skipped: bool) -> None:
    outcome = plan_change(record)
    assert outcome.change == change
    assert (outcome.rejection[0] if outcome.rejection else None) == code
    assert outcome.skipped == skipped


def test_plan_changes_decides_as_plan_change_one_by_one() -> None:
    """A batch (the between form read from bytes, other shapes, bad texts one edit from the form,
    non-ASCII, every other kind of record) is planned as ``plan_change`` plans each record."""
    texts = [
        "a between 1 and 5 and b between -2 and 0",
        "a between 1 and 5 and",
        "a between 1234567890123456 and 1",
        "a between 1 and 5 and b  between 3 and 4",
        "é between 1 and 2",
        "price < 120 and symbol = 'IBM'",
        "x <",
        "a between 'x' and 'y'",
        "",
    ]
    records = [_sub(filter=t, subscription_id=f"s{i}") for i, t in enumerate(texts)]
    records += [_sub(op="unsubscribe"), SubscriptionRecord(key="s9", tombstone=True), _sub(error_code="bad_framing")]
    records += [_sub(composite='{"op": "or", "children": ["x = 1"]}'), _sub()]
    assert plan_changes(records) == [plan_change(r) for r in records]
    assert sum(o.change is not None for o in plan_changes(records)) >= 4


_KINDS = [
    _sub(filter="a between 1 and 5 and b between -2 and 0"),
    _sub(filter="a = 3", subscription_id="s2", key="s2"),
    _sub(filter="a between 1 and 5 and"),
    _sub(filter="é between 1 and 2"),
    _sub(filter="price < 120 and symbol = 'IBM'"),
    _sub(filter="x <"),
    _sub(filter=""),
    _sub(op="unsubscribe", filter="a = 1"),
    SubscriptionRecord(key="s9", tombstone=True),
    SubscriptionRecord(key=None, tombstone=True),
    _sub(error_code="bad_framing", reason="value does not start with ...", filter="a = 1"),
    _sub(composite='{"op": "or", "children": ["x = 1"]}'),
    _sub(subscription_id=None, filter="a = 1"),
    _sub(),
]


def _gathered(records: list[SubscriptionRecord]) -> tuple[list[object], list[object], int]:
    outcomes = [plan_change(r) for r in records]
    changes = [o.change for o in outcomes if o.change is not None]
    rejections = [(i, o.rejection) for i, o in enumerate(outcomes) if o.rejection is not None]
    return changes, rejections, sum(o.skipped for o in outcomes)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(range(len(_KINDS))), st.integers(0, 30)), max_size=40))
def test_plan_columns_gathers_what_plan_change_decides_one_by_one(picks: list[tuple[int, int]]) -> None:
    """Any mix and order of record kinds (runs of plain numeric subscribes, every other kind
    between them, none at all): the same changes in the same order, the same rejections at the
    same indexes, the same skipped count."""
    records = []
    for kind, n in picks:
        r = _KINDS[kind]
        sid = None if r.subscription_id is None else f"{r.subscription_id}-{n}"
        records.append(r._replace(subscription_id=sid))
    assert plan_columns(RecordColumns.of(records)) == _gathered(records)


def test_plan_columns_of_only_plain_subscribes_keeps_their_order() -> None:
    records = [_sub(subscription_id=f"s{i}", filter=f"a between {i} and {i + 9}") for i in range(1000)]
    changes, rejections, skipped = plan_columns(RecordColumns.of(records))
    assert changes == [(f"s{i}", f"a between {i} and {i + 9}") for i in range(1000)]
    assert (rejections, skipped) == ([], 0)


def test_a_rejected_filter_carries_the_parsers_message() -> None:
    outcome = plan_change(_sub(filter="region in ('eu', )"))
    assert outcome.rejection is not None
    code, reason = outcome.rejection
    assert code == "invalid_filter"
    assert "at position 17" in reason and "expected a literal" in reason and "region in ('eu', )" in reason


def test_an_invalid_subscribe_leaves_the_existing_subscription() -> None:
    table = SubscriptionTable()
    for record in (_sub(filter="x > 1"), _sub(filter="x >"), _sub(error_code="malformed_body", reason="r")):
        change = plan_change(record).change
        if change is not None:
            table.apply([change])
    assert dict(table.filters) == {"s1": "x > 1"}


# --- SubscriptionTable: a stateful test against a dict ------------------------------------------

ids = st.sampled_from(INDEX_IDS[:8])
texts = st.sampled_from(["a > 1", "b = 'x'", "c exists", "a > 1 and b = 'x'"])


class TableMachine(RuleBasedStateMachine):
    @initialize(rebase_min=st.integers(1, 6))
    def setup(self, rebase_min: int) -> None:
        self.table = SubscriptionTable(rebase_min=rebase_min, rebase_fraction=0.5)
        self.model: dict[str, str] = {}
        self.effective = 0
        self.base: dict[str, str] = {}
        self.previous: dict[str, str] = {}  # the base before the last snapshot

    @rule(changes=st.lists(st.tuples(ids, st.one_of(st.none(), texts)), max_size=5))
    def apply(self, changes: list[tuple[str, str | None]]) -> None:
        for sid, text in changes:
            before = dict(self.model)
            if text is None:
                self.model.pop(sid, None)
            else:
                self.model[sid] = text
            self.effective += before != self.model
        self.table.apply(changes)

    @rule()
    def snapshot(self) -> None:
        if self.table.due_for_snapshot() or len(self.table.deltas()) > 10:
            self.table.snapshot()
            self.previous, self.base = self.base, dict(self.model)

    @invariant()
    def same_as_the_model(self) -> None:
        assert dict(self.table.filters) == self.model
        assert self.table.version == self.effective

    @invariant()
    def base_plus_deltas_is_the_table(self) -> None:
        state = dict(self.base)
        versions = []
        for v, sid, text in self.table.deltas():
            versions.append(v)
            if text is None:
                del state[sid]
            else:
                state[sid] = text
        assert state == self.model
        assert versions == list(range(self.table.base_version + 1, self.table.version + 1))
        assert self.table.deltas(after=self.table.version) == ()

    @invariant()
    def previous_base_plus_bridge_is_the_base(self) -> None:
        start, bridge = self.table.bridge()
        state = dict(self.previous)
        for _, sid, text in bridge:
            if text is None:
                del state[sid]
            else:
                state[sid] = text
        assert state == self.base
        assert [v for v, _, _ in bridge] == list(range(start + 1, self.table.base_version + 1))


TestTable = TableMachine.TestCase
TestTable.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)


# --- IndexReplica: readers that sync at random points equal the table ----------------------------

changes = st.lists(st.tuples(ids, st.one_of(st.none(), index_filters().map(str))), max_size=8)


def _holds(replica: IndexReplica, table: SubscriptionTable) -> bool:
    """The replica's index holds exactly the table's ids (its answers are checked on events)."""
    return len(replica.index) == len(table) and all(sid in replica.index for sid in table.filters)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rounds=st.lists(st.tuples(changes, st.booleans(), st.lists(st.booleans(), min_size=3, max_size=3)), max_size=6),
    events=st.lists(index_events(), min_size=1, max_size=6),
)
def test_replicas_synced_at_any_point_match_like_the_oracle_over_the_table(
    rounds: list[tuple[list[tuple[str, str | None]], bool, list[bool]]], events: list[dict[str, object]]
) -> None:
    table = SubscriptionTable(rebase_min=3, rebase_fraction=0.0)
    snapshot: dict[str, str] = {}
    base_version = 0
    bridge: tuple[int, tuple[Delta, ...]] = (0, ())
    replicas = [IndexReplica() for _ in range(3)]
    for batch, rebase, who_syncs in rounds:
        table.apply(batch)
        if rebase:  # as the job's shipper does: a fresh snapshot broadcast at the current version
            table.snapshot()
            snapshot, base_version = dict(table.filters), table.version
            start, deltas = table.bridge()
            bridge = (start, deltas + table.deltas())
        frozen, bridged = dict(snapshot), bridge
        for i, (replica, syncs) in enumerate(zip(replicas, who_syncs, strict=True)):
            if syncs:  # the last replica takes the deltas as an iterator (read one by one), the first no bridge
                deltas = table.deltas(after=base_version)
                replica.sync(
                    base_version,
                    lambda f=frozen: f.items(),
                    iter(deltas) if i == 2 else deltas,
                    table.version,
                    None if i == 0 else (bridged[0], lambda b=bridged: b[1]),
                )
                assert _holds(replica, table)
    oracle = BruteForceIndex()
    for sid, text in table.filters.items():
        oracle.add(sid, parse_filter(text))
    expected = oracle.match(events).all_ids()
    for replica in replicas:
        replica.sync(base_version, lambda: snapshot.items(), table.deltas(after=base_version), table.version)
        assert replica.version == table.version
        assert _holds(replica, table)
        assert replica.index.match(events).all_ids() == expected


class _Shipped:
    """What the job's shipper would ship for ``table`` now (``streaming.matching_job._Shipper``):
    a snapshot and a bridge broadcast at each new base, the deltas since."""

    def __init__(self) -> None:
        self.base_version: int | None = None
        self.snapshot: dict[str, str] = {}
        self.bridge: tuple[int, tuple[Delta, ...]] = (0, ())
        self.snapshot_reads = 0

    def ship(self, table: SubscriptionTable) -> tuple[int, Callable[[], Iterable[tuple[str, str]]], tuple[Delta, ...]]:
        """``(base version, the snapshot's loader, the deltas since the base)``; ``self.bridge`` the bridge."""
        if self.base_version is None or table.base_version > self.base_version:
            start, deltas = table.bridge()
            self.snapshot, self.bridge = dict(table.filters), (start, deltas + table.deltas())
            self.base_version = table.version
        snapshot = self.snapshot

        def load_base() -> Iterable[tuple[str, str]]:
            self.snapshot_reads += 1
            return snapshot.items()

        return self.base_version, load_base, table.deltas(after=self.base_version)


def _range_text(a: int, lo: int, width: int, b: int | None, value: int) -> str:
    return f"a{a} between {lo} and {lo + width}" + ("" if b is None else f" and b{b} = {value}")


range_texts = st.builds(
    _range_text,
    st.integers(0, 3),
    st.integers(0, 40),
    st.integers(0, 20),
    st.none() | st.integers(0, 2),
    st.integers(0, 3),
)
churn = st.lists(st.tuples(st.sampled_from([f"s{i}" for i in range(12)]), st.none() | range_texts), max_size=10)
range_values = {**{f"a{i}": st.integers(-2, 65) for i in range(4)}, **{f"b{i}": st.integers(0, 3) for i in range(3)}}
range_events = st.lists(st.fixed_dictionaries({}, optional=range_values), min_size=1, max_size=6)
follows_rebases = st.lists(st.booleans(), min_size=2, max_size=2)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rounds=st.lists(st.tuples(churn, follows_rebases), max_size=12), events=range_events)
def test_a_replica_across_rebases_by_bridges_equals_one_that_loads_and_the_oracle(
    rounds: list[tuple[list[tuple[str, str | None]], list[bool]]], events: list[dict[str, object]]
) -> None:
    """Random range-heavy churn with frequent rebases: a replica that follows the shipped states
    (bridges when it can, the snapshot when it must) equals, after every change, a replica that
    loads every new base from its snapshot, and both equal the oracle over the table."""
    table = SubscriptionTable(rebase_min=2, rebase_fraction=0.25)
    shipped = _Shipped()
    follower, loader = IndexReplica(), IndexReplica()
    for batch, (follows, rebase) in rounds:
        table.apply(batch)
        if rebase or table.due_for_snapshot():
            table.snapshot()
        base_version, load_base, deltas = shipped.ship(table)
        start, bridge = shipped.bridge
        if follows:  # a replica may skip batches: one generation behind it still bridges
            before, reads = follower.version, shipped.snapshot_reads
            follower.sync(base_version, load_base, deltas, table.version, (start, lambda b=bridge: b))
            if before is not None and start <= before:
                assert shipped.snapshot_reads == reads  # reached by deltas alone
        loader.sync(base_version, load_base, deltas, table.version)
        oracle = BruteForceIndex()
        oracle.apply((sid, parse_filter(text)) for sid, text in table.filters.items())
        expected = oracle.match(events).all_ids()
        assert loader.index.match(events).all_ids() == expected and _holds(loader, table)
        if follows:
            assert follower.version == table.version and _holds(follower, table)
            assert follower.index.match(events).all_ids() == expected


def test_a_replica_rebuilds_only_when_it_must() -> None:
    table = SubscriptionTable()
    table.apply([("s1", "a > 1"), ("s2", "b = 2")])
    replica = IndexReplica(BruteForceIndex)
    replica.sync(0, lambda: [], table.deltas(), table.version)
    assert replica.rebuilds == 1
    table.apply([("s1", None)])
    replica.sync(0, lambda: pytest.fail("an up-to-date replica must not load the snapshot"), table.deltas(), 3)
    assert replica.rebuilds == 1 and "s1" not in replica.index
    replica.sync(0, lambda: [("s1", "a > 1"), ("s2", "b = 2")], table.deltas()[:2], 2)  # ahead: another run
    assert replica.rebuilds == 2 and "s1" in replica.index
    with pytest.raises(ValueError, match="missing"):
        replica.sync(2, lambda: [], (), 3)


def test_a_replica_built_from_a_snapshot_keeps_little_room_in_its_predicate_store() -> None:
    snapshot = [(f"s{i}", f"a{i % 7} between {i} and {i + 50} and b{i % 3} > {i}") for i in range(4000)]
    replica = IndexReplica(build_chunk=512)
    replica.sync(1, lambda: snapshot, (), 1)
    index = replica.index
    assert isinstance(index, MatchIndex)
    assert len(index._p_code) <= index._p_used * 17 // 16 + 256  # the build's growth by half again, given back
    oracle = BruteForceIndex()
    oracle.apply(snapshot)
    events = [{"a3": v, "b1": v // 2} for v in range(0, 5000, 97)]
    assert index.match(events).all_ids() == oracle.match(events).all_ids()


def test_a_replica_behind_a_new_snapshot_crosses_it_by_the_bridge() -> None:
    applied: list[list[tuple[str, object]]] = []

    class Recording(BruteForceIndex):
        def apply(self, changes: Iterable[tuple[str, Filter | str | None]]) -> None:
            staged = list(changes)
            applied.append(staged)
            super().apply(staged)

    table = SubscriptionTable(rebase_min=1, rebase_fraction=0.0)
    table.apply([("s1", "a > 1"), ("s2", "b = 2"), ("s3", "c < 3")])
    replica = IndexReplica(Recording)
    replica.sync(0, lambda: [], table.deltas(), table.version)
    table.apply([("s2", None), ("s3", "c < 4")])
    table.snapshot()  # the replica (at 3) is now behind the base (5); the bridge covers (0, 5]
    table.apply([("s4", "d = 1"), ("s3", "c < 3.5")])
    start, bridge = table.bridge()
    assert start == 0
    applied.clear()
    fail = lambda: pytest.fail("a replica the bridge covers must not load the snapshot")  # noqa: E731
    replica.sync(table.base_version, fail, table.deltas(), table.version, (start, lambda: bridge))
    assert replica.rebuilds == 1 and replica.bridges == 1 and replica.version == 7
    assert applied == [[("s2", None), ("s3", "c < 3.5"), ("s4", "d = 1")]]  # one batch, the last change of each id
    assert replica.index.match([{"a": 2, "b": 2, "c": 3.2, "d": 1}]).all_ids() == [["s1", "s3", "s4"]]
    # behind the bridge: the snapshot is loaded, into a new index
    table.snapshot()
    table.apply([("s1", None)])
    table.snapshot()
    behind = IndexReplica(Recording)
    behind.sync(0, lambda: [], (), 0)
    snapshot = dict(table.filters)
    start, bridge = table.bridge()
    behind.sync(table.base_version, lambda: snapshot.items(), table.deltas(), table.version, (start, lambda: bridge))
    assert behind.rebuilds == 2 and behind.bridges == 0
    assert behind.index.match([{"a": 2, "b": 2, "c": 3.2, "d": 1}]).all_ids() == [["s3", "s4"]]


# --- TableStore ---------------------------------------------------------------------------------


def test_store_restores_any_batch_from_snapshot_and_deltas(tmp_path: Path) -> None:
    store = TableStore(tmp_path)
    table = SubscriptionTable()
    states = {}
    plan = {0: [("s1", "a > 1")], 1: [], 2: [("s2", "b = 'x'"), ("s1", None)], 3: [("s3", "c exists")], 4: []}
    for b, batch in plan.items():
        table.apply(batch)
        offsets = {0: b * 10, 1: b}
        if b in (1, 3):
            store.save_snapshot(b, table.filters, table.version, offsets)
        else:
            store.save_delta(b, batch, table.version, offsets)
        states[b] = (dict(table.filters), table.version, offsets)
    for b in range(1, 5):  # 0 was pruned with the snapshot at 3 (restores need at most the last two)
        loaded = store.load(b)
        assert loaded is not None
        restored, offsets = loaded
        assert (dict(restored.filters), restored.version, offsets) == states[b]
    assert store.load(-1) is not None and len(store.load(-1)[0]) == 0  # type: ignore[index]
    assert store.load(5) is None
    (tmp_path / "delta-4.json").unlink()
    assert store.load(4) is None


def test_store_rejects_files_that_do_not_belong_together(tmp_path: Path) -> None:
    store = TableStore(tmp_path)
    store.save_delta(0, [("s1", "a > 1")], 1, {0: 1})
    store.save_delta(1, [("s1", None)], 7, {0: 2})  # says version 7 where the changes give 2
    assert store.load(0) is not None
    assert store.load(1) is None
