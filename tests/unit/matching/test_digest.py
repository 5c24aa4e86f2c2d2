"""``routing.matching.digest.texts_digest``: the order-free digest of an ``id -> filter text`` map
against its plain oracle; any change of an id, a text or the set of pairs changes it."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from routing.matching.digest import texts_digest, texts_digest_reference

MAPS = st.dictionaries(st.text(max_size=6), st.text(max_size=12), max_size=20)


@settings(max_examples=200, deadline=None)
@given(filters=MAPS, seed=st.integers(0, 2**32 - 1))
def test_the_digest_does_not_depend_on_order_and_equals_the_oracle(filters: dict[str, str], seed: int) -> None:
    pairs = list(filters.items())
    random.Random(seed).shuffle(pairs)
    digest = texts_digest(filters)
    assert digest == texts_digest(dict(pairs)) == texts_digest(pairs) == texts_digest_reference(pairs)
    assert len(digest) == 64 and int(digest, 16) >= 0


@settings(max_examples=200, deadline=None)
@given(a=MAPS, b=MAPS)
def test_different_maps_have_different_digests(a: dict[str, str], b: dict[str, str]) -> None:
    assert (texts_digest(a) == texts_digest(b)) == (a == b)


@settings(max_examples=100, deadline=None)
@given(filters=MAPS.filter(bool), data=st.data())
def test_any_change_of_one_id_or_text_changes_the_digest(filters: dict[str, str], data: st.DataObject) -> None:
    sid = data.draw(st.sampled_from(sorted(filters)))
    before = texts_digest(filters)
    text = data.draw(st.text(max_size=12).filter(lambda t: t != filters[sid]))
    assert texts_digest({**filters, sid: text}) != before  # a text changed
    new_id = data.draw(st.text(max_size=6).filter(lambda s: s not in filters))
    moved = {(new_id if k == sid else k): v for k, v in filters.items()}
    assert texts_digest(moved) != before  # an id changed
    assert texts_digest({k: v for k, v in filters.items() if k != sid}) != before  # a pair removed


def test_where_the_id_ends_and_the_text_begins_is_part_of_the_pair() -> None:
    """The id's length is encoded: moving characters between id and text is a change."""
    assert texts_digest({"ab": "c"}) != texts_digest({"a": "bc"}) != texts_digest({"abc": ""})
    assert texts_digest({"1:a": "b"}) != texts_digest({"1": ":ab"})
    assert texts_digest({}) == texts_digest([]) == texts_digest_reference({})


def test_lone_surrogates_are_digested_not_refused() -> None:
    odd = {"s\ud800": "x > 1", "t": "name = '\udfff'"}
    assert texts_digest(odd) == texts_digest_reference(odd) != texts_digest({"s": "x > 1", "t": "name = ''"})


def test_a_large_map_equals_the_oracle() -> None:
    """Many pairs (the vectorised sort of the pair hashes over several thousand rows)."""
    filters = {f"s{i}": f"x between {i} and {i * 7 % 1000}" for i in range(5000)}
    items = list(filters.items())[::-1]
    assert texts_digest(filters) == texts_digest_reference(items)
