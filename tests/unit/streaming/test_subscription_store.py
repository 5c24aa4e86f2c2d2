"""``TableStore``'s periodic snapshot of an unchanged table: a hard link, not a rewrite, and the
chain of snapshots and deltas restores the same table either way."""

from __future__ import annotations

import os
from pathlib import Path

from routing.matching.table import SubscriptionTable
from streaming.subscription_store import TableStore


def _table(changes: list[tuple[str, str | None]]) -> SubscriptionTable:
    table = SubscriptionTable()
    table.apply(changes)
    return table


def test_an_unchanged_table_is_snapshotted_by_a_link_and_a_changed_one_is_written(tmp_path: Path) -> None:
    store = TableStore(tmp_path)
    table = _table([("s1", "x > 1"), ("s2", "y = 'a'")])
    store.save_snapshot(0, table.filters, table.version, {0: 2})
    for b in range(1, 100):
        store.save_delta(b, [], table.version, {0: 2})
    store.save_snapshot(100, table.filters, table.version, {0: 2})
    loaded = store.load(99)  # from the linked snapshot 0 and its deltas
    assert loaded is not None and set(loaded[0].filters) == {"s1", "s2"}
    first, second = tmp_path / "snapshot-0.json", tmp_path / "snapshot-100.json"
    assert os.stat(first).st_ino == os.stat(second).st_ino  # the same file, not a second copy

    # offsets moved (a rejected record was read) with the same version: written out
    store.save_snapshot(101, table.filters, table.version, {0: 3})
    assert os.stat(tmp_path / "snapshot-101.json").st_ino != os.stat(second).st_ino
    # a change: written out, and the oldest snapshot pruned
    table.apply([("s3", "z < 4")])
    store.save_delta(102, [("s3", "z < 4")], table.version, {0: 4})
    store.save_snapshot(103, table.filters, table.version, {0: 4})
    assert not first.exists()
    for upto, want, offsets in [(101, {"s1", "s2"}, {0: 3}), (102, {"s1", "s2", "s3"}, {0: 4})]:
        loaded = store.load(upto)
        assert loaded is not None
        restored, got = loaded
        assert set(restored.filters) == want and got == offsets


def test_a_linked_snapshot_restores_like_a_written_one_after_a_restart(tmp_path: Path) -> None:
    linked, written = TableStore(tmp_path / "a"), TableStore(tmp_path / "b")
    table = _table([("s1", "x > 1")])
    for store in (linked, written):
        store.save_snapshot(0, table.filters, table.version, {0: 1})
    linked.save_snapshot(1, table.filters, table.version, {0: 1})
    TableStore(tmp_path / "b").save_snapshot(1, table.filters, table.version, {0: 1})  # a new object writes
    assert os.stat(tmp_path / "b" / "snapshot-1.json").st_nlink == 1
    assert os.stat(tmp_path / "a" / "snapshot-1.json").st_nlink == 2
    a, b = TableStore(tmp_path / "a").load(1), TableStore(tmp_path / "b").load(1)
    assert a is not None and b is not None
    assert dict(a[0].filters) == dict(b[0].filters) and a[0].version == b[0].version and a[1] == b[1]
    # a replay of the linked batch rewrites it in full, the older snapshot untouched
    linked.save_snapshot(1, table.filters, table.version, {0: 1})
    assert os.stat(tmp_path / "a" / "snapshot-1.json").st_nlink == 1
    assert (tmp_path / "a" / "snapshot-0.json").exists()


def test_a_packed_table_is_saved_and_restored_as_text(tmp_path: Path) -> None:
    """The snapshot of a table whose texts are packed holds the texts, and restores them."""
    texts = {"s1": "x between 1 and 5 and y = 2", "s2": "name startswith 'a' and z != 3", "s3": "odd = '\x01'"}
    table = _table(list(texts.items()))
    assert table.pack() == 2  # the third holds a keyword's character: kept as it is
    store = TableStore(tmp_path)
    store.save_snapshot(0, table.filters, table.version, {0: 3})
    loaded = store.load(0)
    assert loaded is not None
    restored, _ = loaded
    assert dict(restored.filters) == texts == table.texts() and restored.version == table.version
