"""Packed filter texts (``routing.matching.packing``) and a subscription table that packs them:
exact for every text, and a packed table reads and changes like one that never packs."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from routing.matching.packing import pack_texts, unpack_text, unpack_texts
from routing.matching.table import SubscriptionTable

# texts near the packing's edges: its keywords, their characters, NUL, a lone surrogate
_PIECES = [" between ", " and ", " = ", "a1", " 5", "'x'", "\x00", "\x01", "\x02", "\x03", "é", "\ud800", " ", "="]
texts = st.lists(st.lists(st.sampled_from(_PIECES), max_size=8).map("".join), max_size=12)


@settings(max_examples=300, deadline=None)
@given(texts)
def test_packing_is_exact_for_every_text(batch: list[str]) -> None:
    packed = pack_texts(batch)
    assert unpack_texts(packed) == batch
    assert [unpack_text(p) for p in packed] == batch
    for text, p in zip(batch, packed, strict=True):
        odd = any(c in text for c in "\x00\x01\x02\x03\ud800")
        assert isinstance(p, str) == odd  # kept as it is exactly when it cannot be packed
        if not odd:
            assert len(p) <= len(text.encode())


def test_a_range_filter_packs_to_about_half() -> None:
    text = " and ".join(f"a{i} between {100_000 + i} and {600_000 + i}" for i in range(10))
    (packed,) = pack_texts([text])
    assert isinstance(packed, bytes) and len(packed) < 0.55 * len(text)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32))
def test_a_table_that_packs_equals_one_that_does_not(seed: int) -> None:
    """Random changes (new texts, the same text again, removals) with packs between them: the
    filters, texts, versions and deltas equal those of a table that never packs."""
    rng = random.Random(seed)
    packing, plain = SubscriptionTable(), SubscriptionTable()
    pool = ["x between N and 9", "y = N", "odd \x01 N", "b = 'é' and c = N"]
    for _ in range(15):
        changes: list[tuple[str, str | None]] = []
        for _ in range(rng.randint(0, 8)):
            sid = f"s{rng.randrange(10)}"
            changes.append((sid, None if rng.random() < 0.25 else rng.choice(pool).replace("N", str(rng.randrange(3)))))
        packing.apply(changes)
        plain.apply(changes)
        if rng.random() < 0.5:
            packing.pack(limit=rng.choice([1, 2, 1000]))
        assert dict(packing.filters.items()) == dict(plain.filters.items()) == packing.texts()
        assert dict(packing.filters) == dict(plain.filters)
        assert sorted(packing.filters.values()) == sorted(plain.filters.values())
        assert packing.version == plain.version and packing.deltas() == plain.deltas()
    packing.pack(limit=len(packing))
    held = list(packing._filters.values())
    assert all(isinstance(v, bytes) or "\x01" in v for v in held)
    packing.apply([(sid, text) for sid, text in plain.filters.items()])  # the same texts again: no change
    assert packing.version == plain.version
