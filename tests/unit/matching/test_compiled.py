"""The compiled form of a MatchIndex (``to_arrays`` / ``from_arrays``) and the replicas that load it.

A loaded index must be the index that was written, array for array, answer like the oracle and
like an index rebuilt from the same texts, and go on changing exactly (docs/conventions.md §6, §7).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from routing.matching.digest import texts_digest
from routing.matching.index import BruteForceIndex, MatchIndex
from routing.matching.language import Filter
from routing.matching.table import IndexReplica, LoadedIndex, SubscriptionTable
from streaming.subscription_store import CompiledIndexFolder
from tests.strategies import INDEX_IDS, index_events, index_filters

PARITY = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
Change = tuple[str, Filter | str | None]
CHANGES = st.tuples(st.sampled_from(INDEX_IDS), st.one_of(st.none(), index_filters(), index_filters().map(str)))


def reloaded(index: MatchIndex) -> MatchIndex:
    """``index`` written and loaded back (copies: a loaded index owns its arrays)."""
    return MatchIndex.from_arrays({k: v.copy() for k, v in index.to_arrays().items()})


def assert_same_arrays(a: Mapping[str, npt.NDArray[Any]], b: Mapping[str, npt.NDArray[Any]]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        assert np.array_equal(a[name], b[name]), name


@PARITY
@given(
    batches=st.lists(st.lists(CHANGES, max_size=30), min_size=1, max_size=5),
    events=st.lists(index_events(), min_size=1, max_size=12),
    small_caps=st.booleans(),
)
def test_a_loaded_index_is_the_written_one_and_goes_on_like_the_oracle(
    batches: list[list[Change]], events: list[dict[str, object]], small_caps: bool
) -> None:
    """After every batch the index is written and loaded back; the loaded one carries on."""
    index = MatchIndex(max_cuts=1, max_strings=1) if small_caps else MatchIndex()
    oracle = BruteForceIndex()
    for batch in batches:
        index.apply(batch)
        oracle.apply(batch)
        written = {k: v.copy() for k, v in index.to_arrays().items()}
        loaded = MatchIndex.from_arrays({k: v.copy() for k, v in written.items()})
        assert_same_arrays(loaded.to_arrays(), written)
        expected = oracle.match(events).all_ids()
        assert loaded.match(events).all_ids() == expected == index.match(events).all_ids()
        assert len(loaded) == len(oracle)
        for sid in (*INDEX_IDS, "never added"):
            assert (sid in loaded) == (sid in oracle), sid
        index = loaded
    rebuilt = MatchIndex(max_cuts=1, max_strings=1) if small_caps else MatchIndex()
    rebuilt.apply((sid, oracle._filters[sid]) for sid in oracle._filters)
    assert rebuilt.match(events).all_ids() == index.match(events).all_ids()


def test_w1_like_churn_after_a_load_equals_the_same_churn_without_it() -> None:
    """Range filters over many attributes, a third removed, then the same churn on the index and
    on its loaded copy: the two stay array for array equal (slots, fids, cuts and rows)."""
    rng = np.random.default_rng(7)

    def text() -> str:
        attrs = rng.choice(20, size=10, replace=False)
        lows = rng.integers(0, 1000, size=10)
        pairs = zip(attrs, lows, strict=True)
        return " and ".join(f"a{a} between {lo} and {lo + rng.integers(0, 400)}" for a, lo in pairs)

    index = MatchIndex()
    index.apply([(f"s{i}", text()) for i in range(2500)])
    index.apply([(f"s{i}", None) for i in range(0, 2500, 3)])
    index.add("slow", "name startswith 'ai' and a1 > 3")
    loaded = reloaded(index)
    churn: list[tuple[str, str | None]] = [(f"s{i}", text()) for i in range(0, 2500, 4)]
    churn += [(f"n{i}", text()) for i in range(300)]
    churn += [("slow", None), ("slow2", "name startswith 'ai' and a1 > 3")]
    for target in (index, loaded):
        target.apply(churn)
    assert_same_arrays(index.to_arrays(), loaded.to_arrays())
    events = [{f"a{j}": int(v) for j, v in enumerate(rng.integers(0, 1400, size=20))} | {"name": "air"}]
    assert loaded.match(events).all_ids() == index.match(events).all_ids()


def test_filters_python_checks_are_keyed_again_under_another_hash_seed(tmp_path: Path) -> None:
    """The dedup key of a filter that Python checks hashes strings: a process with another hash
    seed re-keys it, so an identical filter added later shares its distinct filter."""
    path = tmp_path / "index.npz"
    script = (
        "import numpy as np\n"
        "from routing.matching.index import MatchIndex\n"
        "i = MatchIndex()\n"
        "i.apply([('a', \"name startswith 'ai' and x > 3\"), ('b', \"name > 'm'\"), ('c', 'x between 1 and 2')])\n"
        f"np.savez({str(path)!r}, **i.to_arrays())\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    subprocess.run([sys.executable, "-c", script], check=True, env=env, cwd=Path(__file__).parents[3])
    with np.load(path) as npz:
        index = MatchIndex.from_arrays({name: npz[name] for name in npz.files})
    assert index.stats()["distinct_filters"] == 3
    index.apply([("d", "name startswith 'ai' and x > 3"), ("e", "name > 'm'"), ("f", "x between 1 and 2")])
    assert index.stats()["distinct_filters"] == 3
    assert index.match([{"name": "air", "x": 4}, {"name": "zed", "x": 1}]).all_ids() == [
        ["a", "d"],
        ["b", "c", "e", "f"],
    ]


def test_arrays_of_another_format_python_or_content_are_refused() -> None:
    index = MatchIndex()
    index.apply([("a", "x > 1")])
    for name, change in (("format", 0), ("python", 1), ("meta", 2)):
        arrays = {k: v.copy() for k, v in index.to_arrays().items()}
        if name == "meta":
            arrays["meta"][0, 0] += 1  # a flipped byte: the checksum catches it
        else:
            arrays[name][change - 1 if name == "python" else 0] += 1
        with pytest.raises(ValueError, match=r"format|Python|checksum"):
            MatchIndex.from_arrays(arrays)
    with pytest.raises(ValueError, match="format"):
        MatchIndex.from_arrays({})


# --- replicas and the folder ----------------------------------------------------------------------


def test_a_new_replica_loads_the_saved_index_and_applies_only_what_differs(tmp_path: Path) -> None:
    folder = CompiledIndexFolder(tmp_path / "compiled")
    table = SubscriptionTable()
    table.apply([(f"s{i}", f"x between {i} and {i + 10}") for i in range(50)] + [("w", "name startswith 'ai'")])
    table.snapshot()
    first = IndexReplica(compiled=folder, save_min=1)
    snapshot = dict(table.filters)
    first.sync(table.version, lambda: snapshot.items(), (), table.version)
    assert first.compiled_saves == 0 and not list(folder.folder.glob("*.npz"))  # saved when asked
    assert first.save_compiled() and not first.save_compiled()  # once
    assert first.compiled_loads == 0 and first.compiled_saves == 1
    # a later run: the table moved on and rebased; a new replica starts from the saved index
    table.apply([("s1", None), ("s2", "x < 0"), ("n", "x = 5")])
    table.snapshot()
    snapshot = dict(table.filters)
    table.apply([("s3", None)])
    second = IndexReplica(compiled=folder, save_min=100)
    second.sync(table.base_version, lambda: snapshot.items(), table.deltas(), table.version)
    assert not second.save_compiled()  # 3 differences < save_min
    assert second.compiled_loads == 1 and second.compiled_saves == 0
    oracle = BruteForceIndex()
    oracle.apply(table.filters.items())
    events = [{"x": x, "name": "air"} for x in (-1, 2, 5, 12, 30, 70)]
    assert second.index.match(events).all_ids() == oracle.match(events).all_ids()
    assert len(second.index) == len(table)


def test_a_replica_that_loads_applies_the_difference_in_one_batch(tmp_path: Path) -> None:
    """What a loaded replica applies is exactly what differs from the snapshot."""
    folder = CompiledIndexFolder(tmp_path)
    index = MatchIndex()
    held = {"a": "x > 1", "b": "y = 'q'", "c": "z < 3"}
    index.apply(held.items())
    folder.save(index, held, 3)
    applied: list[list[tuple[str, Filter | str | None]]] = []
    loaded = folder.load()
    assert loaded is not None and loaded.texts == held and loaded.version == 3 and loaded.lineage == ""
    loaded_index, filters = loaded.index, loaded.texts

    class Spy:
        def load(self, digest: str | None = None) -> LoadedIndex | None:
            original = loaded_index.apply

            def apply(changes: Iterable[tuple[str, Filter | str | None]]) -> None:
                staged = list(changes)
                applied.append(staged)
                original(staged)

            loaded_index.apply = apply  # type: ignore[method-assign]
            return LoadedIndex(loaded_index, dict(filters), 3, "")

        def save(self, index: MatchIndex, filters: Mapping[str, str], version: int) -> None:
            pytest.fail("a small difference is not saved")

    replica = IndexReplica(compiled=Spy())
    replica.sync(5, lambda: [("a", "x > 1"), ("b", "y = 'r'"), ("d", "w exists")], (), 5)
    assert not replica.save_compiled()
    assert sorted(sorted(batch) for batch in applied if batch) == [[("b", "y = 'r'"), ("c", None), ("d", "w exists")]]
    assert replica.index.match([{"x": 2, "y": "r", "z": 1, "w": 0}]).all_ids() == [["a", "b", "d"]]


def test_the_folder_skips_damaged_files_and_keeps_the_newest(tmp_path: Path) -> None:
    folder = CompiledIndexFolder(tmp_path, keep=2)
    assert folder.load() is None
    for version in (1, 2, 3):
        index = MatchIndex()
        index.apply([("a", f"x > {version}")])
        folder.save(index, {"a": f"x > {version}"}, version)
        os.utime(tmp_path / f"index-{version}.npz", ns=(version * 10**9, version * 10**9))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index-2.npz", "index-3.npz"]
    (tmp_path / "index-4.npz").write_bytes(b"not a zip file")  # the newest, and damaged
    loaded = folder.load()
    assert loaded is not None and loaded.texts == {"a": "x > 3"}
    assert loaded.index.match([{"x": 3.5}]).all_ids() == [["a"]]


def test_saves_across_bridges_take_the_texts_of_the_last_save_not_the_snapshot(tmp_path: Path) -> None:
    """A replica with a lineage saves at a build, then at each base it crosses by a bridge with
    the texts of its last save and the changes since: the snapshot is not read again, and every
    file's texts are the table's at its version, so a new replica that loads it equals the oracle."""
    folder = CompiledIndexFolder(tmp_path)
    table = SubscriptionTable(rebase_min=1, rebase_fraction=0.0)
    table.apply([(f"s{i}", f"x between {i} and {i + 10}") for i in range(30)])
    table.snapshot()
    replica = IndexReplica(compiled=folder, save_min=1, lineage="run-1")
    snapshot = dict(table.filters)
    replica.sync(table.version, lambda: snapshot.items(), (), table.version)
    assert replica.save_compiled()
    unread = lambda: pytest.fail("a save across a bridge must not read the snapshot")  # noqa: E731
    for step in range(3):
        table.apply([(f"s{step}", None), (f"s{step + 5}", f"x < {step}"), (f"n{step}", "x = 3")])
        table.snapshot()
        table.apply([(f"s{step + 10}", f"x > {step + 20}")])
        start, bridge = table.bridge()
        replica.sync(table.base_version, unread, table.deltas(), table.version, (start, lambda b=bridge: b))
        assert replica.bridges == step + 1 and replica.rebuilds == 1
        assert replica.save_compiled()
        assert folder.texts(table.version, "run-1") == dict(table.filters)
    assert folder.texts(table.version, "run-2") is None  # another run's name: not these texts
    fresh = IndexReplica(compiled=folder)
    now = dict(table.filters)
    fresh.sync(table.version, lambda: now.items(), (), table.version)
    assert fresh.compiled_loads == 1
    oracle = BruteForceIndex()
    oracle.apply(table.filters.items())
    events = [{"x": x} for x in (-1, 0, 2, 3, 5, 12, 25, 38, 45)]
    assert fresh.index.match(events).all_ids() == oracle.match(events).all_ids()


def test_a_save_without_the_last_saves_texts_reads_the_snapshot(tmp_path: Path) -> None:
    folder = CompiledIndexFolder(tmp_path, keep=1)
    table = SubscriptionTable(rebase_min=1, rebase_fraction=0.0)
    table.apply([("a", "x > 1"), ("b", "y = 2")])
    table.snapshot()
    replica = IndexReplica(compiled=folder, save_min=1, lineage="run-1")
    snapshot = dict(table.filters)
    replica.sync(table.version, lambda: snapshot.items(), (), table.version)
    assert replica.save_compiled()
    for path in tmp_path.glob("*.npz"):
        path.unlink()  # the last save's file is gone (pruned, lost)
    table.apply([("a", None), ("c", "z < 3")])
    table.snapshot()
    snapshot = dict(table.filters)
    start, bridge = table.bridge()
    reads: list[int] = []
    replica.sync(table.version, lambda: reads.append(1) or snapshot.items(), (), table.version, (start, lambda: bridge))
    assert not reads and replica.save_compiled() and reads == [1]
    assert folder.texts(table.version, "run-1") == {"b": "y = 2", "c": "z < 3"}


# --- a restart by the snapshot's digest -----------------------------------------------------------


def _unread() -> Iterable[tuple[str, str]]:
    pytest.fail("a replica loading by the snapshot's digest must not read the snapshot")


def _oracle_ids(filters: Mapping[str, str], events: list[dict[str, object]]) -> list[list[str]]:
    oracle = BruteForceIndex()
    oracle.apply(filters.items())
    return oracle.match(events).all_ids()


@PARITY
@given(
    subs=st.dictionaries(st.sampled_from(INDEX_IDS), index_filters().map(str), max_size=12),
    later=st.dictionaries(st.sampled_from(INDEX_IDS), st.one_of(st.none(), index_filters().map(str)), max_size=6),
    events=st.lists(index_events(), min_size=1, max_size=12),
)
def test_a_replica_with_the_snapshots_digest_takes_the_saved_index_unread_and_equals_the_oracle(
    tmp_path_factory: pytest.TempPathFactory,
    subs: dict[str, str],
    later: dict[str, str | None],
    events: list[dict[str, object]],
) -> None:
    """A run saves its index; the next run's replica, shipped the digest of the same snapshot,
    loads it without reading the snapshot or the saved texts, then applies the deltas after it."""
    folder = CompiledIndexFolder(tmp_path_factory.mktemp("compiled"))
    table = SubscriptionTable()
    table.apply(subs.items())
    table.snapshot()
    snapshot = dict(table.filters)
    first = IndexReplica(compiled=folder, save_min=1, lineage="run-1")
    first.sync(table.version, lambda: snapshot.items(), (), table.version)
    assert first.save_compiled() == bool(subs)
    table.apply(later.items())  # the next run: changes after its first snapshot
    second = IndexReplica(compiled=folder, lineage="run-2")
    load_base = _unread if subs else lambda: iter(())  # nothing saved: an empty snapshot is built
    second.sync(table.base_version, load_base, table.deltas(), table.version, base_digest=texts_digest(snapshot))
    if subs:
        assert (second.compiled_loads, second.digest_loads, second.rebuilds) == (1, 1, 1)
        assert second.index.match(events).all_ids() == _oracle_ids(table.filters, events)
        assert len(second.index) == len(table)
    assert not second.save_compiled()  # nothing due: the loaded index was saved with these texts


def test_a_digest_is_only_asked_of_the_store_and_the_texts_are_not_read(tmp_path: Path) -> None:
    """The folder leaves the texts' arrays unread for the digest they have, and reads them for
    another digest or none."""
    folder = CompiledIndexFolder(tmp_path)
    index = MatchIndex()
    held = {"a": "x > 1", "b": "y = 'q'"}
    index.apply(held.items())
    folder.save(index, held, 4, "run-1")
    same = folder.load(texts_digest(held))
    assert same is not None and same.texts is None and (same.version, same.lineage) == (4, "run-1")
    assert same.index.match([{"x": 2, "y": "q"}]).all_ids() == [["a", "b"]]
    other = folder.load(texts_digest({"a": "x > 1"}))
    assert other is not None and other.texts == held
    plain = folder.load()
    assert plain is not None and plain.texts == held


def test_a_mismatching_digest_diffs_the_snapshot_as_before(tmp_path: Path) -> None:
    folder = CompiledIndexFolder(tmp_path)
    index = MatchIndex()
    held = {"a": "x > 1", "b": "y = 'q'", "c": "z < 3"}
    index.apply(held.items())
    folder.save(index, held, 3, "run-1")
    snapshot = {"a": "x > 1", "b": "y = 'r'", "d": "w exists"}
    reads: list[int] = []
    replica = IndexReplica(compiled=folder, lineage="run-2")
    replica.sync(5, lambda: reads.append(1) or snapshot.items(), (), 5, base_digest=texts_digest(snapshot))
    assert reads == [1] and (replica.compiled_loads, replica.digest_loads) == (1, 0)
    events: list[dict[str, object]] = [{"x": 2, "y": "r", "z": 1, "w": 0}, {"y": "q", "z": 1}]
    assert replica.index.match(events).all_ids() == _oracle_ids(snapshot, events) == [["a", "b", "d"], []]


def test_a_file_without_a_digest_loads_with_its_texts(tmp_path: Path) -> None:
    """A file written before the digest: the replica diffs the snapshot against its texts."""
    folder = CompiledIndexFolder(tmp_path)
    index = MatchIndex()
    held = {"a": "x > 1", "b": "y = 'q'"}
    index.apply(held.items())
    folder.save(index, held, 2)
    path = tmp_path / "index-2.npz"
    with np.load(path) as npz:
        arrays = {name: npz[name] for name in npz.files if name != "texts_digest"}
    with path.open("wb") as f:
        np.savez(f, **arrays)  # type: ignore[arg-type]
    loaded = folder.load(texts_digest(held))
    assert loaded is not None and loaded.texts == held
    reads: list[int] = []
    replica = IndexReplica(compiled=folder)
    replica.sync(2, lambda: reads.append(1) or held.items(), (), 2, base_digest=texts_digest(held))
    assert reads == [1] and (replica.compiled_loads, replica.digest_loads) == (1, 0)
    assert replica.index.match([{"x": 2, "y": "q"}]).all_ids() == [["a", "b"]]


def _saved_run(folder: CompiledIndexFolder, lineage: str) -> tuple[SubscriptionTable, dict[str, str]]:
    """A table of 40 range filters, snapshotted, and its index saved under ``lineage``."""
    table = SubscriptionTable(rebase_min=1, rebase_fraction=0.0)
    table.apply([(f"s{i}", f"x between {i} and {i + 10}") for i in range(40)])
    table.snapshot()
    snapshot = dict(table.filters)
    replica = IndexReplica(compiled=folder, save_min=1, lineage=lineage)
    replica.sync(table.version, lambda: snapshot.items(), (), table.version)
    assert replica.save_compiled()
    return table, snapshot


@pytest.mark.parametrize("lineage", ["run-2", "run-1"])
def test_a_save_after_a_load_by_digest_has_the_tables_texts(tmp_path: Path, lineage: str) -> None:
    """After a load by the digest, the table rebases and the replica crosses by the bridge and
    saves. Under another lineage (a restarted job) the save reads the snapshot it was last
    shipped; under the lineage of the loaded file it starts from that file's texts and never
    reads a snapshot. Either way the file's texts are the table's, and a new replica that loads
    it by their digest answers like the oracle."""
    folder = CompiledIndexFolder(tmp_path)
    table, snapshot = _saved_run(folder, "run-1")
    replica = IndexReplica(compiled=folder, save_min=1, lineage=lineage)
    replica.sync(table.version, _unread, (), table.version, base_digest=texts_digest(snapshot))
    assert replica.digest_loads == 1 and not replica.save_compiled()
    table.apply([("s1", None), ("s2", "x < 0"), ("n", "x = 5")])
    table.snapshot()
    at_base = dict(table.filters)  # the new snapshot
    table.apply([("s3", None)])
    start, bridge = table.bridge()
    now = dict(table.filters)
    reads: list[int] = []
    replica.sync(table.base_version, lambda: reads.append(1) or at_base.items(), table.deltas(), table.version,
                 (start, lambda: bridge))  # fmt: skip
    assert replica.bridges == 1 and reads == []
    assert replica.save_compiled()
    assert reads == ([1] if lineage == "run-2" else [])
    assert folder.texts(table.version, lineage) == now
    fresh = IndexReplica(compiled=folder)
    fresh.sync(table.version, _unread, (), table.version, base_digest=texts_digest(now))
    events: list[dict[str, object]] = [{"x": x} for x in (-1, 0, 3, 5, 12, 25, 38, 45, 60)]
    assert fresh.digest_loads == 1 and fresh.index.match(events).all_ids() == _oracle_ids(now, events)
