"""``streaming.matching_job.SubscriptionRows``: the subscription records collected as Arrow give
the same ``SubscriptionRecord`` values, in (partition, offset) order, as ``to_record`` over the
same rows one by one, and each row back for its dead letter (no Spark)."""

from __future__ import annotations

import pyarrow as pa

from streaming.matching_job import RECORD_COLUMNS, SubscriptionRows, to_record

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


def test_records_equal_to_record_row_by_row_in_partition_offset_order() -> None:
    ordered = sorted((dict(zip(NAMES, r, strict=True)) for r in ROWS), key=lambda r: (r["partition"], r["offset"]))
    rows = SubscriptionRows(table())
    assert len(rows) == len(ROWS)
    assert rows.records() == [to_record(r) for r in ordered]


def test_bad_rows_keep_no_record_fields_and_an_undecodable_key_is_none() -> None:
    records = SubscriptionRows(table()).records()
    bad = [r for r in records if r.error_code is not None]
    assert [(r.error_code, r.key, r.op, r.filter) for r in bad] == [
        ("missing_key", None, None, None),
        ("bad_framing", None, None, None),
    ]


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
    assert len(rows) == 0 and rows.records() == []
