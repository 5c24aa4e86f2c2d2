"""The executor side of the matching job over plain pyarrow batches (no JVM): the typed attribute
maps become the same events, and ``match_batches`` answers like the oracle as the table changes.
Its decoding and encoding are tested on their own in ``tests/unit/schemas/test_event_records.py``
and ``tests/unit/schemas/test_match_records.py``."""

from __future__ import annotations

import datetime
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from routing.matching.digest import texts_digest
from routing.matching.index import BruteForceIndex
from routing.matching.table import SubscriptionTable
from schemas.codec import codec_for, decode
from schemas.match_records import Targets
from schemas.rules import VALUE_KINDS
from streaming import arrow_matching
from streaming.arrow_matching import INPUT_COLUMNS, ShipState, event_batch, match_batches
from tests.strategies import INDEX_IDS, index_filters, wire_events
from tests.unit.schemas.test_match_records import _expected_rows, _written

_MAP_TYPES = {
    "longs": pa.map_(pa.string(), pa.int64()),
    "doubles": pa.map_(pa.string(), pa.float64()),
    "strings": pa.map_(pa.string(), pa.string()),
    "booleans": pa.map_(pa.string(), pa.bool_()),
}


def _maps(events: list[dict[str, Any] | None]) -> dict[str, pa.Array]:
    """The four map columns as Spark hands them to ``mapInArrow`` (None: a rejected row)."""
    wire = [None if e is None else codec_for("Event").to_wire(e)["attributes"] for e in events]
    return {
        k: pa.array([None if w is None else list(w[k].items()) for w in wire], type=_MAP_TYPES[k]) for k in VALUE_KINDS
    }


def _typed(attrs: dict[str, object]) -> dict[str, tuple[type, object]]:
    return {k: (type(v), v) for k, v in attrs.items()}


@settings(max_examples=80, deadline=None)
@given(events=wire_events(), rejected=st.lists(st.booleans(), max_size=12))
def test_the_maps_become_the_same_events(events: list[dict[str, Any]], rejected: list[bool]) -> None:
    rows = [None if i < len(rejected) and rejected[i] else e for i, e in enumerate(events)]
    batch = event_batch(_maps(rows), len(rows))
    for i, row in enumerate(rows):
        expected = {} if row is None else row["attributes"]
        assert _typed(batch.event(i)) == _typed(expected)


def test_sliced_and_chunked_columns() -> None:
    events = [{"event_id": f"e{i}", "publisher_id": "p", "published_at": 0, "lifetime_ms": 0,
               "attributes": {"x": i, "s": f"v{i}"}} for i in range(6)]  # fmt: skip
    maps = _maps(events)
    sliced = {k: v.slice(2, 3) for k, v in maps.items()}
    assert [event_batch(sliced, 3).event(i) for i in range(3)] == [e["attributes"] for e in events[2:5]]
    chunked = {k: pa.chunked_array([v.slice(0, 2), v.slice(2)]) for k, v in maps.items()}
    assert [event_batch(chunked, 6).event(i) for i in range(6)] == [e["attributes"] for e in events]


def _record_batch(rows: list[dict[str, Any] | None]) -> pa.RecordBatch:
    """Kafka rows of the events topic as the job hands them to ``mapInArrow`` (None: a value that
    does not decode)."""
    n = len(rows)
    ts = pa.array([datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)] * n, type=pa.timestamp("us", tz="UTC"))
    codec = codec_for("Event")
    cols: dict[str, pa.Array] = {
        "key": pa.array([r["publisher_id"].encode() if r else b"k" for r in rows], type=pa.binary()),
        "value": pa.array([codec.encode(r) if r else b"\x00" for r in rows], type=pa.binary()),
        "partition": pa.array([0] * n, type=pa.int32()),
        "offset": pa.array(range(n), type=pa.int64()),
        "timestamp": ts,
    }
    return pa.RecordBatch.from_pydict({name: cols[name] for name in INPUT_COLUMNS})


TARGETS = Targets("events", "matches", "dead")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    subs=st.dictionaries(st.sampled_from(INDEX_IDS), index_filters().map(str), max_size=12),
    later=st.dictionaries(st.sampled_from(INDEX_IDS), st.one_of(st.none(), index_filters().map(str)), max_size=6),
    events=wire_events(),
    rejected=st.lists(st.booleans(), max_size=12),
)
def test_match_batches_answers_like_the_oracle_as_the_table_changes(
    subs: dict[str, str], later: dict[str, str | None], events: list[dict[str, Any]], rejected: list[bool]
) -> None:
    arrow_matching._REPLICAS.clear()
    rows = [None if i < len(rejected) and rejected[i] else e for i, e in enumerate(events)]
    table = SubscriptionTable()
    table.apply(subs.items())
    base = SimpleNamespace(value=dict(table.filters))
    base_version = table.version
    for step in range(2):  # the same worker, two micro-batches: a rebuild, then deltas only
        if step == 1:
            table.apply(later.items())
        ship = ShipState("job", "match", base_version, base, table.deltas(after=base_version), table.version)
        out = list(match_batches(ship, TARGETS, iter([_record_batch(rows[:5]), _record_batch(rows[5:])])))
        oracle = BruteForceIndex()
        for sid, text in table.filters.items():
            oracle.add(sid, text)
        expected = oracle.match([r["attributes"] if r else {} for r in rows]).all_ids()
        offsets = list(range(min(5, len(rows)))) + list(range(max(0, len(rows) - 5)))
        got = _written(out)
        assert [(t, k, v if t == "matches" else None) for t, k, v in got] == _expected_rows(rows, expected, offsets)
        for (t, _, v), o in zip(got, offsets, strict=True):
            if t == "dead":
                assert decode(v, "DeadLetter")[1]["error_code"] == "bad_framing"
                assert decode(v, "DeadLetter")[1]["source_offset"] == o
    if rows:
        assert arrow_matching._REPLICAS["job"].rebuilds == 1


def test_a_replica_at_the_shipped_version_keeps_its_index_version() -> None:
    """Micro-batches with no subscription change reuse the ids in rank order (the same array):
    the id strings and channels that workers keep per ``by_rank`` stay valid between them; a
    change makes a new one."""
    arrow_matching._REPLICAS.clear()
    table = SubscriptionTable()
    table.apply([("b", "x > 1"), ("a", "x > 0")])
    base = SimpleNamespace(value=dict(table.filters))

    def by_rank() -> Any:
        ship = ShipState("job", "match", table.base_version, base, table.deltas(), table.version)
        return arrow_matching.replica_for(ship).index.match([{"x": 2}]).sorted_ranks()[2]

    first = by_rank()
    again = by_rank()
    assert again is first and again.tolist() == ["a", "b"]
    table.apply([("c", "x > 5")])
    changed = by_rank()
    assert changed is not first and changed.tolist() == ["a", "b", "c"]


class _Broadcast:
    """A Spark broadcast stand-in that counts the reads of its value."""

    def __init__(self, value: Any) -> None:
        self._value, self.reads = value, 0

    @property
    def value(self) -> Any:
        self.reads += 1
        return self._value

    def unpersist(self, blocking: bool = False) -> None:
        pass


def _shipper(kind: str = "match", compiled_dir: str | None = "compiled") -> Any:
    from streaming.matching_job import _Shipper

    spark = SimpleNamespace(sparkContext=SimpleNamespace(broadcast=_Broadcast))
    return _Shipper(spark, "job", kind, compiled_dir)  # type: ignore[arg-type]


def test_the_shipper_sends_the_digest_of_the_runs_first_snapshot_only(tmp_path: Any) -> None:
    from pathlib import Path

    from routing.matching.index import MatchIndex
    from streaming.subscription_store import CompiledIndexFolder

    table = SubscriptionTable(rebase_min=1, rebase_fraction=0.0)
    table.apply([("a", "x > 1"), ("b", "y = 2")])
    table.snapshot()
    assert _shipper("match", str(tmp_path / "empty")).ship(table).base_digest is None  # a fresh start: no index
    saved = MatchIndex()
    saved.apply([("a", "x > 1")])
    CompiledIndexFolder(Path(tmp_path / "compiled")).save(saved, {"a": "x > 1"}, 1)
    shipper = _shipper("match", str(tmp_path / "compiled"))
    first = shipper.ship(table)
    assert first.base_digest == texts_digest(table.filters)
    table.apply([("c", "z < 3")])  # a delta, the same base: the same digest
    assert shipper.ship(table).base_digest == first.base_digest
    table.snapshot()
    table.apply([("d", "w exists")])
    later = shipper.ship(table)  # a new base: workers cross it by the bridge, new ones diff
    assert later.base_version > first.base_version and later.base_digest is None
    assert table.bridge()[1] and first.bridge is None  # the run's first snapshot: no worker to bridge
    assert later.bridge is not None and later.bridge.value == table.bridge()[1] + table.deltas()
    for kind, folder in (("brute-force", "compiled"), ("match", None)):  # no compiled index to skip to
        assert _shipper(kind, folder).ship(table).base_digest is None


def test_a_restarted_worker_with_the_shipped_digest_never_reads_the_snapshot(tmp_path: Any) -> None:
    """A run's worker builds and saves its index; the next run's worker (a new replica), shipped
    the digest of the same snapshot, loads that index and never fetches the snapshot broadcast."""
    arrow_matching._REPLICAS.clear()
    table = SubscriptionTable()
    table.apply([(f"s{i}", f"x between {i} and {i + 5}") for i in range(20)])
    table.snapshot()
    folder = str(tmp_path / "compiled")
    run1 = ShipState("run-1", "match", table.version, _Broadcast(dict(table.filters)), (), table.version,
                     compiled_dir=folder)  # fmt: skip
    arrow_matching.replica_for(run1)
    arrow_matching.save_compiled(run1)  # its first save reads the snapshot again
    assert run1.base.reads == 2 and list((tmp_path / "compiled").glob("index-*.npz"))
    table.apply([("s0", None), ("n", "x = 3")])  # the next run's first batch changes two
    run2 = ShipState("run-2", "match", table.base_version, _Broadcast(dict(table.filters)), table.deltas(),
                     table.version, compiled_dir=folder, base_digest=texts_digest(run1.base._value))  # fmt: skip
    replica = arrow_matching.replica_for(run2)
    assert run2.base.reads == 0 and replica.digest_loads == 1
    events = [{"x": x} for x in (0, 3, 7, 24, 30)]
    oracle = BruteForceIndex()
    oracle.apply(table.filters.items())
    assert replica.index.match(events).all_ids() == oracle.match(events).all_ids()
    arrow_matching._REPLICAS.clear()
