"""The open-addressing tables of ``routing.matching.keyed`` against Python dicts, under random
churn, with keys made to share probe paths and ids made to share hashes."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from routing.matching.index import BruteForceIndex, MatchIndex
from routing.matching.keyed import KeyTable, SubscriptionSlots


class CollidingSlots(SubscriptionSlots):
    """Ids whose key is their length: most ids share their key with other ids."""

    key = staticmethod(len)


def keys_sharing_paths(n: int, seed: int) -> np.ndarray:
    """``n`` distinct int64 keys of a few kinds: small, negative, huge, and multiples of 2**40
    (their Fibonacci hashes still differ, but many meet on a small table)."""
    rng = random.Random(seed)
    pool = {rng.choice([rng.randrange(64), -rng.randrange(1, 64), rng.randrange(2**62), rng.randrange(64) << 40])
            for _ in range(4 * n)}  # fmt: skip
    return np.asarray(sorted(pool)[:n], dtype=np.int64)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 300))
def test_a_key_table_under_churn_equals_a_dict(seed: int, n: int) -> None:
    rng = random.Random(seed)
    keys_of = keys_sharing_paths(n, seed)
    n = len(keys_of)
    table, model = KeyTable(), {}
    for _ in range(12):
        if rng.random() < 0.6:
            values = rng.sample(range(n), rng.randint(0, n))
            got = table.add(keys_of, values).tolist()
            assert got == [model.setdefault(int(keys_of[v]), v) for v in values]
        else:
            values = rng.sample(range(n), rng.randint(0, n))
            table.discard(keys_of, values)
            for v in values:
                model.pop(int(keys_of[v]), None)
        assert len(table) == len(model)
        probe = np.concatenate([keys_of, np.asarray([2**63 - 1, -(2**63), 12345], dtype=np.int64)])
        expected = [model.get(int(k), -1) for k in probe.tolist()]
        assert table.find(keys_of, probe).tolist() == expected
        assert [table.find_one(keys_of, k) for k in probe.tolist()] == expected
        assert table.nbytes * 5 >= len(model) * 4 * 8  # at most five eighths full


def test_a_key_table_shrinks_when_emptied_and_finds_what_stays() -> None:
    keys_of = np.arange(10_000, dtype=np.int64) * 1_000_003
    table = KeyTable()
    table.add(keys_of, np.arange(10_000))
    full = table.nbytes
    table.discard(keys_of, np.arange(1, 10_000))
    assert table.nbytes < full // 8
    assert table.find(keys_of, keys_of[:3]).tolist() == [0, -1, -1]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32), st.booleans())
def test_subscription_slots_under_churn_equal_a_dict(seed: int, colliding: bool) -> None:
    """Ids of shared keys (``CollidingSlots``) live in the overflow; every id is still found at its
    own slot, freed slots are reused, and a restored copy finds the same slots."""
    rng = random.Random(seed)
    slots = CollidingSlots() if colliding else SubscriptionSlots()
    model: dict[str, int] = {}
    universe = [f"s{i}" * rng.randint(1, 3) for i in range(60)]
    universe = sorted(set(universe))
    for _ in range(10):
        present = list(model)
        gone = rng.sample(present, rng.randint(0, len(present)))
        if gone:
            slots.release(np.asarray([model.pop(sid) for sid in gone], dtype=np.int64))
        new = [sid for sid in rng.sample(universe, rng.randint(0, len(universe))) if sid not in model]
        model.update(zip(new, slots.assign(new).tolist(), strict=True))
        assert len(slots) == len(model)
        assert slots.find(universe).tolist() == [model.get(sid, -1) for sid in universe]
        assert [slots.slot(sid) for sid in universe] == [model.get(sid, -1) for sid in universe]
        assert all(slots.names[s] == sid for sid, s in model.items())
        assert set(slots.free) == {s for s, name in enumerate(slots.names) if name is None}
    restored = type(slots).of(list(slots.names), slots.free)
    assert restored.find(universe).tolist() == slots.find(universe).tolist()
    if colliding and len(model) > 3:
        assert slots.overflow


def test_a_match_index_whose_ids_share_hashes_matches_like_the_oracle() -> None:
    """The index's slots found through the overflow: churn by id, answers equal the oracle's."""
    rng = random.Random(7)
    index, oracle = MatchIndex(), BruteForceIndex()
    index._subs = CollidingSlots()
    for step in range(6):
        changes: list[tuple[str, str | None]] = []
        for _ in range(80):
            sid = "x" * rng.randint(1, 4) + str(rng.randrange(30))
            changes.append(
                (sid, None if rng.random() < 0.3 else f"v between {rng.randrange(50)} and {rng.randrange(50, 99)}")
            )
        index.apply(changes)
        oracle.apply(changes)
        events = [{"v": rng.randrange(100)} for _ in range(20)]
        assert index.match(events).all_ids() == oracle.match(events).all_ids(), step
        assert len(index) == len(oracle)
    assert index._subs.overflow
    loaded = MatchIndex.from_arrays(index.to_arrays())
    events = [{"v": v} for v in range(0, 100, 7)]
    assert loaded.match(events).all_ids() == oracle.match(events).all_ids()
