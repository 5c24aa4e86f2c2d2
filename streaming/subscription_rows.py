"""The subscriptions topic's records on the driver: decoded rows, their plan, their dead letters.

- :class:`SubscriptionRows`: decoded records as one Arrow table in (partition, offset) order
  (``streaming.driver_batch.TopicReader``'s table of the topic, or :func:`fast_subscription_rows`'),
  and their columns as ``routing.matching.table.plan_columns`` takes them;
- :class:`PlannedRecords`: a batch's records planned (the changes in order, the rejected rows
  with their verdicts, the skipped composites);
- :func:`subscription_dead_letters`: the rejected rows as dead-letter rows;
- :func:`fast_subscription_rows`: raw records decoded without Spark by the columnar fast path,
  up to the first record on each partition that the path refers to the JVM (the matching job's
  head start, ``streaming.head_start``).

Used by the matching job's exact mode (``streaming.matching_job``) and its direct mode's
rejections (``streaming.matching_direct``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from routing.matching.collector import collector_paused
from routing.matching.table import Change, RecordColumns, plan_columns

__all__ = [
    "READER_NAMES",
    "RECORD_COLUMNS",
    "PlannedRecords",
    "SubscriptionRows",
    "fast_subscription_rows",
    "subscription_dead_letters",
]


RECORD_COLUMNS = ("key", "tombstone", "error_code", "reason", "op", "subscription_id", "filter", "composite")
"""The columns of :class:`SubscriptionRows` that make ``routing.matching.table.RecordColumns``, in its order."""

READER_NAMES = {
    "raw_key": "key",
    "raw_value": "value",
    "s_op": "op",
    "s_id": "subscription_id",
    "s_filter": "filter",
    "s_composite": "composite",
}
"""``streaming.driver_batch.TopicReader``'s columns of the subscriptions topic (``raw=True``) by
their names in :class:`SubscriptionRows`."""


def _key_texts(keys: Any) -> list[str | None]:
    """An Arrow column of raw Kafka keys as text (None where absent or not UTF-8)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        return pc.cast(keys, pa.string()).to_pylist()  # type: ignore[no-any-return]
    except pa.ArrowInvalid:  # some key is not UTF-8: that one only is None
        out: list[str | None] = []
        for key in keys.to_pylist():
            try:
                out.append(None if key is None else bytes(key).decode("utf-8"))
            except UnicodeDecodeError:
                out.append(None)
        return out


class SubscriptionRows:
    """Decoded subscription records as one Arrow table (no Python object per row and column on
    the way), sorted by (partition, offset): ``streaming.driver_batch.TopicReader``'s table of the
    subscriptions topic (``raw=True``; its columns renamed by :data:`READER_NAMES`), or any table
    with the columns :data:`RECORD_COLUMNS` and, for dead letters, topic, partition, offset,
    ts_ms and value.

    >>> import pyarrow as pa
    >>> t = pa.table({"partition": [1, 0], "offset": [0, 5], "key": [b"s2", b"s1"], "tombstone": [True, False],
    ...               "error_code": [None, None], "reason": [None, None], "op": [None, "subscribe"],
    ...               "subscription_id": [None, "s1"], "filter": [None, "x > 1"], "composite": [None, None]})
    >>> rows = SubscriptionRows(t)
    >>> cols = rows.columns()
    >>> cols.key, cols.tombstone, cols.filter, rows.row(1)["offset"]
    (['s1', 's2'], [False, True], ['x > 1', None], 0)
    """

    def __init__(self, table: Any) -> None:
        table = table.rename_columns([READER_NAMES.get(n, n) for n in table.column_names])
        self.table = table.sort_by([("partition", "ascending"), ("offset", "ascending")])

    def __len__(self) -> int:
        return int(self.table.num_rows)

    def columns(self) -> RecordColumns:
        """Every row as ``routing.matching.table.plan_columns`` takes them, in order: the
        :data:`RECORD_COLUMNS` as lists, the key as text (None where absent or not UTF-8)."""
        import pyarrow.compute as pc

        with collector_paused():
            table = self.table
            tombstone = pc.fill_null(table.column("tombstone"), False).to_pylist()
            rest = [table.column(c).to_pylist() for c in RECORD_COLUMNS[2:]]
            return RecordColumns(_key_texts(table.column("key")), tombstone, *rest)

    def row(self, i: int) -> dict[str, Any]:
        """Row ``i`` as a dict of every column (for its dead letter)."""
        return dict(self.table.slice(i, 1).to_pylist()[0])


def subscription_dead_letters(
    rejected: list[tuple[Any, tuple[str, str]]], deadletter_topic: str
) -> list[tuple[str, bytes, bytes]]:
    """Kafka ``(topic, key, value)`` rows for rejected subscription records: ``(row of
    SubscriptionRows, (error_code, reason))`` pairs, encoded as the validation job does
    (``schemas.rules.dead_letter``)."""
    from schemas.rules import dead_letter

    return [
        (
            deadletter_topic,
            *dead_letter(
                r["topic"], r["partition"], r["offset"], r["ts_ms"] * 1000, code, reason, r["key"], r["value"]
            ),
        )
        for r, (code, reason) in rejected
    ]


@dataclass
class PlannedRecords:
    """Subscription records planned into changes (``routing.matching.table.plan_columns``) as a
    batch takes them (the changes in order, each rejected record's row with its verdict, the skipped
    composites) and how many records there were."""

    changes: list[Change] = field(default_factory=list)
    rejected: list[tuple[Any, tuple[str, str]]] = field(default_factory=list)
    skipped: int = 0
    records: int = 0

    @classmethod
    def of(cls, rows: SubscriptionRows | None) -> PlannedRecords:
        """``rows`` planned in their order (``plan_columns``; none: nothing)."""
        if rows is None or not len(rows):
            return cls()
        changes, rejections, skipped = plan_columns(rows.columns())
        return cls(changes, [(rows.row(i), why) for i, why in rejections], skipped, len(rows))


def fast_subscription_rows(raw: Any, cut: Mapping[int, int]) -> tuple[SubscriptionRows, dict[int, int]]:
    """Raw records of the subscriptions topic below ``cut`` (partition -> offset; ``raw`` an Arrow
    table of ``streaming.driver_batch.RAW_SCHEMA``'s columns) decoded without Spark: the rows of
    :class:`SubscriptionRows` that the columnar fast path (``streaming.driver_batch.fast_split``)
    decodes, with the cut lowered on each partition to its first record that the path refers to
    the JVM, so that every record below the new cut is in the rows and the others are left to a
    reader with the JVM. Returns the rows and the new cut.

    >>> import pyarrow as pa
    >>> from schemas.codec import codec_for
    >>> good = codec_for("Subscription").encode({"type": "subscribe", "subscription_id": "s1",
    ...                                          "subscriber_id": "u", "filter": "x > 1"})
    >>> raw = pa.table({"topic": ["t"] * 3, "partition": pa.array([0, 0, 1], pa.int32()),
    ...                 "offset": [0, 1, 0], "ts_ms": [5, 5, 5], "key": [b"s1", b"s2", b"s3"],
    ...                 "value": [good, b"junk", None]})
    >>> rows, cut = fast_subscription_rows(raw, {0: 2, 1: 1})
    >>> cut, rows.columns().key, rows.columns().filter
    ({0: 1, 1: 1}, ['s1', 's3'], ['x > 1', None])
    """
    import pyarrow as pa

    from schemas.columnar import FlatDecoder
    from schemas.topics import SUBSCRIPTIONS_TOPIC, TOPICS
    from streaming.driver_batch import fast_split

    split = fast_split(FlatDecoder(TOPICS[SUBSCRIPTIONS_TOPIC].schema).decode, True, raw)
    partition = raw.column("partition").to_numpy()
    offset = raw.column("offset").to_numpy()
    cut = dict(cut)
    for p, o in zip(partition[split.referred].tolist(), offset[split.referred].tolist(), strict=True):
        cut[p] = min(cut.get(p, o), o)
    bound = np.array([cut.get(p, 0) for p in partition[split.idx].tolist()], dtype=np.int64)
    idx = split.idx[offset[split.idx] < bound]
    take = pa.array(idx)
    out = split.out
    table = pa.table(
        {
            "topic": raw.column("topic").take(take),
            "partition": raw.column("partition").take(take),
            "offset": raw.column("offset").take(take),
            "ts_ms": raw.column("ts_ms").take(take),
            "key": split.key.take(take),
            "value": split.value.take(take),
            "tombstone": pa.array(split.tombstone[idx]),
            "error_code": pa.nulls(len(idx), pa.string()),
            "reason": pa.nulls(len(idx), pa.string()),
            "op": out.arrow("type", idx, pa.string()),
            "subscription_id": out.arrow("subscription_id", idx, pa.string()),
            "filter": out.arrow("filter", idx, pa.string()),
            "composite": out.arrow("composite", idx, pa.string()),
        }
    )
    return SubscriptionRows(table), cut
