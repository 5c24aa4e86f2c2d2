"""``streaming.matching_job.SubscriptionRows``: the subscription records collected as Arrow give
their columns in (partition, offset) order, the key as text, and each row back for its dead
letter; ``PlannedRecords`` plans them as ``plan_change`` plans each record (no Spark)."""

from __future__ import annotations

import pyarrow as pa

from routing.matching.table import SubscriptionRecord, plan_change
from streaming.subscription_rows import RECORD_COLUMNS, PlannedRecords, SubscriptionRows

ROWS = [
    # partition, offset, key, tombstone, error_code, reason, op, subscription_id, filter, composite, value
    (1, 7, b"s3", False, None, None, "subscribe", "s3", "x > 1", None, b"v3"),
    (0, 9, b"s1", True, None, None, None, None, None, None, None),
    (0, 2, b"s1", False, None, None, "subscribe", "s1", "y = 'a'", None, b"v1"),
    (1, 3, b"\xff\xfe", False, "bad_framing", "not single-object Avro", None, None, None, None, b"junk"),
    (0, 4, None, False, "missing_key", "no key", "subscribe", "s9", "z < 2", None, b"v9"),
    (1, 1, b"c1", False, None, None, "subscribe", "c1", None, "A; B", b"vc"),
]
NAMES = ("partition", "offset", *RECORD_COLUMNS, "value")


def table() -> pa.Table:
    columns = list(zip(*ROWS, strict=True))
    types = [pa.int32(), pa.int64(), pa.binary(), pa.bool_(), *[pa.string()] * 6, pa.binary()]
    return pa.table({n: pa.array(c, t) for n, c, t in zip(NAMES, columns, types, strict=True)})


def _ordered() -> list[dict[str, object]]:
    return sorted((dict(zip(NAMES, r, strict=True)) for r in ROWS), key=lambda r: (r["partition"], r["offset"]))


def test_columns_are_the_rows_in_partition_offset_order_with_the_key_as_text() -> None:
    rows = SubscriptionRows(table())
    assert len(rows) == len(ROWS)
    cols = rows.columns()
    ordered = _ordered()
    for name in RECORD_COLUMNS[1:]:
        assert getattr(cols, name) == [r[name] for r in ordered], name
    assert cols.key == ["s1", None, "s1", "c1", None, "s3"]  # absent and not UTF-8: None


def test_planned_records_decide_as_plan_change_row_by_row() -> None:
    ordered = _ordered()
    records = [SubscriptionRecord(*(r[c] for c in RECORD_COLUMNS)) for r in ordered]
    records = [r._replace(key=None if r.key is None else r.key.decode("utf-8", "replace")) for r in records]
    outcomes = [plan_change(r) for r in records]
    planned = PlannedRecords.of(SubscriptionRows(table()))
    assert planned.records == len(ROWS)
    assert planned.changes == [o.change for o in outcomes if o.change is not None]
    assert planned.skipped == sum(o.skipped for o in outcomes) == 1
    assert [(r["offset"], why[0]) for r, why in planned.rejected] == [(4, "missing_key"), (3, "bad_framing")]


def test_row_gives_every_column_back_for_the_dead_letter() -> None:
    rows = SubscriptionRows(table())
    row = rows.row(len(ROWS) - 1 - 1)  # partition 1 sorted: offsets 1, 3, 7 -> index 4 is offset 3
    assert (row["partition"], row["offset"], row["key"], row["value"], row["error_code"]) == (
        1,
        3,
        b"\xff\xfe",
        b"junk",
        "bad_framing",
    )


def test_an_empty_table_has_no_records() -> None:
    rows = SubscriptionRows(table().slice(0, 0))
    assert len(rows) == 0 and rows.columns().key == []
    assert PlannedRecords.of(rows) == PlannedRecords.of(None) == PlannedRecords()
