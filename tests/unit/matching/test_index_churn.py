"""Batches of subscription changes (``MatchIndex.apply``) against the oracle, ``BruteForceIndex.apply``.

The streaming job applies the subscription changes of a micro-batch at once, so the index takes
them as one list: adds, replaces and removes mixed, an id changed several times, ids that are not
there removed, identical filters arriving together. Expectations come from ``BruteForceIndex``
(``Filter.matches`` on every subscription, changes applied one by one) with the events as plain
Python dicts; the few checks written by hand say why. The stateful test of single and batched
changes is ``tests/unit/matching/test_index.py::IndexMachine``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from routing.matching.index import BruteForceIndex, MatchIndex
from routing.matching.language import Filter, FilterError, parse_filter
from tests.strategies import INDEX_IDS, index_events, index_filters

PARITY = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
Change = tuple[str, Filter | str | None]
CHANGES = st.tuples(st.sampled_from(INDEX_IDS), st.one_of(st.none(), index_filters(), index_filters().map(str)))


def check_same(index: MatchIndex, oracle: BruteForceIndex, events: Sequence[dict[str, object]]) -> None:
    """The index answers what the oracle answers, and holds the same ids."""
    assert index.match(list(events)).all_ids() == oracle.match(list(events)).all_ids()
    assert len(index) == len(oracle) == index.stats()["subscriptions"]
    for sid in (*INDEX_IDS, "never added"):
        assert (sid in index) == (sid in oracle), sid


def apply_both(index: MatchIndex, oracle: BruteForceIndex, changes: Sequence[Change]) -> None:
    index.apply(changes)
    oracle.apply(changes)


@PARITY
@given(
    batches=st.lists(st.lists(CHANGES, max_size=30), min_size=1, max_size=6),
    events=st.lists(index_events(), min_size=1, max_size=15),
    small_caps=st.booleans(),
)
def test_batches_against_the_oracle(
    batches: list[list[Change]], events: list[dict[str, object]], small_caps: bool
) -> None:
    index = MatchIndex(max_cuts=1, max_strings=1) if small_caps else MatchIndex()
    oracle = BruteForceIndex()
    for batch in batches:
        apply_both(index, oracle, batch)
        check_same(index, oracle, events)


@PARITY
@given(
    pool=st.lists(index_filters(), min_size=1, max_size=6),
    events=st.lists(index_events(), min_size=1, max_size=10),
    seed=st.integers(0, 2**32 - 1),
)
def test_batched_churn_over_a_few_filters_against_the_oracle(
    pool: list[Filter], events: list[dict[str, object]], seed: int
) -> None:
    """Hundreds of subscriptions of a few filters churned in batches: member lists that grow
    within one batch, freed slots and fids taken again, identical filters as objects and text."""
    rng = random.Random(seed)
    index, oracle = MatchIndex(), BruteForceIndex()
    live: list[str] = []
    for round_ in range(6):
        batch: list[Change] = []
        for i in range(rng.randrange(1, 400)):
            if live and rng.random() < 0.5:
                batch.append((live.pop(rng.randrange(len(live))), None))
            else:
                sid = f"r{round_}-{i}"
                f = rng.choice(pool)
                batch.append((sid, str(f) if rng.random() < 0.5 else f))
                live.append(sid)
        apply_both(index, oracle, batch)
        assert index.match(events).all_ids() == oracle.match(events).all_ids()
        assert len(index) == len(oracle) == len(live)


def test_add_then_remove_within_one_batch() -> None:
    index = MatchIndex()
    index.apply([("a", "x = 1"), ("b", "x = 1"), ("a", None)])
    assert index.match([{"x": 1}]).all_ids() == [["b"]]
    assert len(index) == 1 and "a" not in index


def test_remove_then_add_within_one_batch() -> None:
    index = MatchIndex()
    index.apply([("a", "x = 1")])
    index.apply([("a", None), ("a", "x = 2"), ("b", None), ("b", "x = 1")])
    assert index.match([{"x": 1}, {"x": 2}]).all_ids() == [["b"], ["a"]]
    assert len(index) == 2


@pytest.mark.parametrize("same", ["same object", "same text", "reparsed"])
def test_replace_by_re_adding_within_one_batch(same: str) -> None:
    f = parse_filter("x between 1 and 5 and s startswith 'ab'")
    again = {"same object": f, "same text": str(f), "reparsed": parse_filter(str(f))}[same]
    index = MatchIndex()
    index.apply([("a", f), ("b", "x = 9")])
    index.apply([("a", "x = 9"), ("a", again), ("b", "x = 2"), ("b", "x = 3")])
    events: list[dict[str, object]] = [{"x": 2, "s": "abc"}, {"x": 3}, {"x": 9}]
    assert index.match(events).all_ids() == [["a"], ["b"], []]
    assert index.stats()["distinct_filters"] == 2  # a kept its filter; b's old one is gone


def test_removing_unknown_ids_changes_nothing() -> None:
    index = MatchIndex()
    index.apply([("a", "x = 1"), ("zz", None)])
    index.apply([("zz", None), ("a", None), ("a", None), ("never", None)])
    assert len(index) == 0 and index.match([{"x": 1}]).all_ids() == [[]]
    with pytest.raises(KeyError):
        index.remove("a")


@pytest.mark.parametrize(
    "text", ["x > 1 and s in ('p', 'q')", "s startswith 'ab' and x = 18446744073709551617"], ids=["fast", "slow"]
)
def test_identical_filters_in_one_batch_share_one_distinct_filter(text: str) -> None:
    f = parse_filter(text)
    copies: list[Filter | str] = [f, f, text, str(f), parse_filter(text)]
    index, oracle = MatchIndex(), BruteForceIndex()
    apply_both(index, oracle, [(f"s{i}", c) for i, c in enumerate(copies)])
    assert index.stats()["distinct_filters"] == 1
    events: list[dict[str, object]] = [
        {"x": 2, "s": "p"},
        {"x": 18446744073709551617, "s": "abc"},
        {"x": 2.0**64, "s": "abc"},  # the double next to it: not equal
    ]
    check_same(index, oracle, events)
    apply_both(index, oracle, [(f"s{i}", None) for i in range(1, len(copies))])  # the shared one stays
    check_same(index, oracle, events)
    assert index.stats()["distinct_filters"] == 1


def test_reordered_filters_in_one_batch() -> None:
    """The same predicates in another order: one distinct filter when the kernels check it alone,
    two when Python checks it (slow filters are shared only when equal); exact either way."""
    fast, slow = "x > 1 and y = 'a'", "s endswith 'z' and x > 1"
    index, oracle = MatchIndex(), BruteForceIndex()
    apply_both(
        index, oracle, [("f1", fast), ("f2", "y = 'a' and x > 1"), ("l1", slow), ("l2", "x > 1 and s endswith 'z'")]
    )
    assert index.stats()["distinct_filters"] == 3
    check_same(index, oracle, [{"x": 2, "y": "a", "s": "az"}, {"x": 2, "s": "za"}, {"x": 1, "y": "a"}])


def test_hash_collisions_are_never_shared() -> None:
    """``hash(-1.0) == hash(-2.0)`` in CPython, so ``x = -1`` and ``x = -2`` get one key: the index
    finds the other filter by that key and must tell them apart by their records."""
    assert hash(-1.0) == hash(-2.0)
    index, oracle = MatchIndex(), BruteForceIndex()
    events: list[dict[str, object]] = [{"x": -1}, {"x": -2}, {"x": -1.5}]
    apply_both(index, oracle, [("a", "x = -1"), ("b", "x = -2")])  # in one batch
    check_same(index, oracle, events)
    apply_both(index, oracle, [("c", "x = -2"), ("d", "x = -1")])  # each against the stored one
    check_same(index, oracle, events)
    apply_both(index, oracle, [("a", None), ("d", None), ("e", "x in (-1, -2)")])  # the keyed one goes
    check_same(index, oracle, events)
    apply_both(index, oracle, [("f", "x = -1"), ("g", "x = -2"), ("b", None)])
    check_same(index, oracle, events)


def test_a_bad_text_changes_nothing() -> None:
    index = MatchIndex()
    index.apply([("a", "x = 1")])
    index.add("q", "x = 1")  # queued before the failing batch: stays queued
    with pytest.raises(FilterError):
        index.apply([("a", None), ("b", "x = 2"), ("c", "x <")])
    assert sorted(sid for sid in ("a", "b", "c", "q") if sid in index) == ["a", "q"]
    assert index.match([{"x": 1}, {"x": 2}]).all_ids() == [["a", "q"], []]


def test_single_changes_queue_until_the_next_batch() -> None:
    """``add`` and ``remove`` only queue; ``len``, ``in`` and ``remove``'s KeyError see the queue."""
    index = MatchIndex()
    index.add("a", "x = 1")
    index.add("b", "x = 1")
    index.remove("a")
    assert len(index) == 1 and "a" not in index and "b" in index
    with pytest.raises(KeyError):
        index.remove("a")
    assert index.stats()["subscriptions"] == 1  # stats applies the queue
    index.add("a", "x = 2")
    index.apply([("b", None)])  # the queue and the batch together
    assert index.match([{"x": 1}, {"x": 2}]).all_ids() == [[], ["a"]]


def test_lists_and_literals_of_new_filters_in_one_batch() -> None:
    """New filters with list literals are stored together (each list kept apart), beside
    filters that differ only in one literal of a list."""
    texts = [
        "x in (1, 2, 3)",
        "x in (3, 2, 1)",  # the same list: shared
        "x in (1, 2, 4)",
        "x not in (1, 2) and s in ('a', 'b')",
        "s not in ('b', 'c') and x in (7, 2)",
        "s in ('a', 'b', 'c', 'd')",
    ]
    index, oracle = MatchIndex(), BruteForceIndex()
    apply_both(index, oracle, [(f"s{i}", t) for i, t in enumerate(texts)])
    assert index.stats()["distinct_filters"] == len(texts) - 1
    events = [{"x": x, "s": s} for x in (1, 2, 3, 4, 7, 8) for s in ("a", "b", "c", "d", "e")]
    check_same(index, oracle, events)
    apply_both(index, oracle, [("s0", None), ("s2", None), ("t", texts[1]), ("u", "x in (4, 2, 1)")])
    check_same(index, oracle, events)


def test_long_churn_in_batches_against_the_oracle() -> None:
    """Thousands of subscriptions churned in batches of a few hundred: the member pool and the
    predicate store fill with garbage and are squeezed, fids and slots are taken again."""
    rng = random.Random(5)
    names = ["a", "b", "c", "d"]

    def text() -> str:
        parts = [
            f"{n} {rng.choice(['=', '!=', '<', '>='])} {rng.randrange(6)}"
            if rng.random() < 0.7
            else f"{n} in ({rng.randrange(4)}, {rng.randrange(4, 8)})"
            for n in rng.sample(names, rng.randrange(1, 4))
        ]
        return " and ".join(parts)

    index, oracle = MatchIndex(), BruteForceIndex()
    live: list[str] = []
    events = [{n: rng.randrange(8) for n in names if rng.random() < 0.9} for _ in range(40)]
    for round_ in range(30):
        batch: list[Change] = []
        for i in range(300):
            if live and rng.random() < 0.5 - 0.3 * (len(live) < 500):
                batch.append((live.pop(rng.randrange(len(live))), None))
            else:
                sid = f"c{round_}-{i}"
                batch.append((sid, text()))
                live.append(sid)
        apply_both(index, oracle, batch)
        if round_ % 5 == 4:
            check_matches = index.match(events).all_ids() == oracle.match(events).all_ids()
            assert check_matches, f"round {round_}"
            assert len(index) == len(oracle) == index.stats()["subscriptions"] == len(live)


@PARITY
@given(filters=st.lists(index_filters(), min_size=1, max_size=8), events=st.lists(index_events(), max_size=8))
def test_texts_of_the_simple_shapes_compile_as_their_filters(
    filters: list[Filter], events: list[dict[str, object]]
) -> None:
    """A text of the parser's simple shapes is compiled from the text (no ``Filter``); its
    records, and the fids it shares, are those of the parsed filter, and it matches like it."""
    from routing.matching.language import _SIMPLE_FILTER

    index = MatchIndex(max_cuts=2, max_strings=2)
    for f in filters:
        text = str(f)
        direct = index._compile_simple(text) if _SIMPLE_FILTER.fullmatch(text) else None
        recs, slows, keys = index._compile_many([parse_filter(text)])
        if direct is not None:
            assert direct == (recs[0], slows[0], keys[0]), text
    index.apply([(f"t{i}", str(f)) for i, f in enumerate(filters)] + [(f"f{i}", f) for i, f in enumerate(filters)])
    oracle = BruteForceIndex()
    oracle.apply([(f"t{i}", f) for i, f in enumerate(filters)] + [(f"f{i}", f) for i, f in enumerate(filters)])
    check_same(index, oracle, events or [{}])
    for i in range(len(filters)):  # a text and its filter share one distinct filter
        slots = index._subs.find([f"t{i}", f"f{i}"])
        assert index._sub_fid[slots[0]] == index._sub_fid[slots[1]]


def test_flush_compacts_the_predicate_store_under_range_churn(monkeypatch: pytest.MonkeyPatch) -> None:
    """W1-like range filters churned in batches: with no minimum, every flush leaves at most a
    quarter of the predicate store as garbage, and the index answers as the oracle throughout."""
    from routing.matching import index as index_module

    monkeypatch.setattr(index_module, "_COMPACT_MIN", 0)
    rng = random.Random(8)

    def text() -> str:
        parts = []
        for name in rng.sample(["a", "b", "c", "d", "e"], rng.randrange(1, 4)):
            low = rng.randrange(-50, 50)
            parts.append(f"{name} between {low} and {low + rng.randrange(30)}")
        return " and ".join(parts)

    index, oracle = MatchIndex(max_cuts=3), BruteForceIndex()
    live: list[str] = []
    events = [{n: rng.randrange(-60, 90) for n in "abcde" if rng.random() < 0.9} for _ in range(40)]
    compactions = 0
    for round_ in range(20):
        batch: list[Change] = []
        for i in range(100):
            if live and rng.random() < 0.5:
                batch.append((live.pop(rng.randrange(len(live))), None))
            else:
                live.append(f"c{round_}-{i}")
                batch.append((live[-1], text()))
        garbage = index._p_garbage
        apply_both(index, oracle, batch)
        index.flush()
        compactions += index._p_garbage < garbage
        assert index._p_garbage <= index._p_used // 4
        assert index.match(events).all_ids() == oracle.match(events).all_ids()
    assert compactions > 0


def _simple_texts(rng: random.Random) -> list[str]:
    """Texts of the parser's simple shapes: W1's canonical ``between`` texts (the numeric form,
    read from the batch's bytes) and their variants that take the pattern (other spacing and case,
    orderings, strings and booleans, integers of more than 15 digits, a string ordering that
    Python must check), with repeated texts and ``-0``."""

    def between(name: str) -> str:
        low = rng.randrange(-30, 30)
        return f"{name} between {low} and {low + rng.randrange(-3, 40)}"

    names = ["a", "b", "c", "d", "e", "a.b", "_x"]
    texts = []
    for _ in range(300):
        k = rng.randrange(1, 5)
        texts.append(" and ".join(between(n) for n in rng.sample(names, k)))
    texts += [
        "a between -0 and 0 and b between 007 and 7",
        "a BETWEEN 1 and 2",
        "a  between 1 and 2 and b between 3 and 4",
        "a between 1 and 2\tand b between 3 and 4",
        "a>=5 and b between 1 and 2",
        "a = 'x' and b between 1 and 2",
        "a = true and b between 1 and 2",
        "a between 1234567890123456 and 2234567890123456",
        "a between 123456789012345 and 223456789012345",
        "a < 'm' and b between 1 and 2",
        "a between 1 and 2 and a between 0 and 5",
        " a between 1 and 2",
        "a between 1 and 2 ",
        "between between 1 and 2",
    ]
    texts += rng.sample(texts, 40)
    rng.shuffle(texts)
    return texts


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_simple_texts_compile_together_as_one_by_one(seed: int) -> None:
    """The texts of the numeric form, read from their bytes at once (``_compile_numeric``, keys
    by ``record_keys``), compile as ``_compile_simple`` text by text (records and key); the others
    are told apart exactly as the pattern does; the index built from the texts at once answers as
    the oracle."""
    from routing.matching.language import _NUMERIC_FILTER, _SIMPLE_FILTER
    from routing.matching.numeric_form import read_numeric_form, record_keys

    rng = random.Random(seed)
    texts = _simple_texts(rng)
    assert all(_SIMPLE_FILTER.fullmatch(t) for t in texts)
    index = MatchIndex(max_cuts=rng.choice((0, 3, 48)))
    one_by_one = [index._compile_simple(t) for t in texts]
    form = read_numeric_form(texts)[0] >= 0
    assert form.tolist() == [_NUMERIC_FILTER.fullmatch(t) is not None for t in texts]
    numeric = [t for t, f in zip(texts, form.tolist(), strict=True) if f]
    offs, codes, x, y = index._compile_numeric(numeric)
    keys = record_keys(offs, codes, x, y)
    made = [
        (tuple(zip(codes[i:j].tolist(), x[i:j].tolist(), y[i:j].tolist(), [()] * (j - i), strict=True)), None, key)
        for i, j, key in zip(offs[:-1].tolist(), offs[1:].tolist(), keys, strict=True)
    ]
    assert made == [c for c, f in zip(one_by_one, form.tolist(), strict=True) if f]
    assert sum(c is None for c in one_by_one) >= 1
    fresh, oracle = MatchIndex(max_cuts=3), BruteForceIndex()
    apply_both(fresh, oracle, [(f"t{i}", t) for i, t in enumerate(texts)])
    events = [{n: rng.randrange(-40, 80) for n in ("a", "b", "c", "d", "e", "a.b", "_x")} for _ in range(30)]
    events += [{"a": "x", "b": 1}, {"a": True, "b": 2}, {"a": 1234567890123457}, {"a": -0.0, "b": 7}]
    assert fresh.match(events).all_ids() == oracle.match(events).all_ids()


def _near_between(draw: st.DrawFn) -> str:
    """A text of the numeric form (``between`` and comparisons), or one edit away from it (a byte
    replaced, inserted or dropped, other spacing or case, a 16-digit literal, a sign in the wrong
    place)."""
    names = ["a", "b_1", "x.y", "_", "A9", "between", "and"]
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        low = draw(st.integers(-(10**15) + 1, 10**15 - 1))
        high = draw(st.integers(-(10**15) + 1, 10**15 - 1))
        if draw(st.booleans()):
            parts.append(f"{draw(st.sampled_from(names))} between {low} and {high}")
        else:
            parts.append(
                f"{draw(st.sampled_from(names))} {draw(st.sampled_from(['=', '!=', '<', '<=', '>', '>=']))} {low}"
            )
    text = " and ".join(parts)
    edit = draw(st.integers(0, 5))
    if edit and text:
        at = draw(st.integers(0, len(text)))
        piece = draw(
            st.sampled_from([" ", "  ", "-", "0", "9", "a", ".", "\t", "and", "AND", "1234567890123456", "é", "+"])
        )
        if edit == 1:
            text = text[:at] + piece + text[at:]
        elif edit == 2:
            text = text[:at] + text[at + 1 :]
        elif edit == 3:
            text = text[:at] + piece + text[at + 1 :]
    return text


near_between = st.composite(_near_between)


@PARITY
@given(texts=st.lists(near_between(), min_size=1, max_size=20))
def test_the_numeric_form_read_from_bytes_is_the_patterns(texts: list[str]) -> None:
    """``read_numeric_form`` accepts exactly the texts ``_NUMERIC_FILTER`` matches whole, and
    reads each predicate's name, operator and literals as the parsed filter has them."""
    from routing.matching import kernels as K
    from routing.matching.language import _NUMERIC_FILTER
    from routing.matching.numeric_form import read_numeric_form

    ops = {"BETWEEN": K.O_BETWEEN, "EQ": K.O_EQ, "NE": K.O_NE, "LT": K.O_LT, "LE": K.O_LE, "GT": K.O_GT, "GE": K.O_GE}
    counts, start, end, hashes, op, low, high, buf = read_numeric_form(texts)
    k = 0
    for text, n in zip(texts, counts.tolist(), strict=True):
        assert (n >= 0) == (_NUMERIC_FILTER.fullmatch(text) is not None), text
        if n < 0:
            continue
        predicates = parse_filter(text).predicates
        assert n == len(predicates)
        for p in predicates:
            assert buf[start[k] : end[k]].tobytes().decode() == p.attribute
            assert int(op[k]) == ops[p.op.name]
            assert (int(low[k]), int(high[k])) == (p.values[0], p.values[-1])
            k += 1
    assert k == len(low) == len(hashes)


@settings(max_examples=60, deadline=None)
@given(
    groups=st.lists(
        st.lists(
            st.tuples(
                st.integers(0, 2**40),
                st.one_of(st.integers(-(2**53) + 1, 2**53 - 1), st.sampled_from([-2, -1, 0, 1])),
                st.one_of(st.integers(-(2**53) + 1, 2**53 - 1), st.sampled_from([-2, -1, 0, 1])),
            ),
            max_size=12,
        ),
        max_size=20,
    )
)
def test_record_keys_are_the_hashes_of_the_record_tuples(groups: list[list[tuple[int, int, int]]]) -> None:
    """``numeric_form.hash_records`` computes ``hash`` of each group's record tuples (CPython's tuple
    and number hashes, -1 included), so a filter read from bytes and the same filter compiled
    through tuples share their key and their fid."""
    import numpy as np

    from routing.matching.numeric_form import hash_records, record_keys, tuple_keys

    offs = np.zeros(len(groups) + 1, dtype=np.int64)
    np.cumsum([len(g) for g in groups], out=offs[1:])
    flat = [r for g in groups for r in g]
    codes = np.asarray([r[0] for r in flat], dtype=np.int64)
    x = np.asarray([float(r[1]) for r in flat], dtype=np.float64)
    y = np.asarray([float(r[2]) for r in flat], dtype=np.float64)
    keys = np.empty(len(groups), dtype=np.int64)
    assert hash_records(offs, codes, x, y, hash(()), keys)
    expected = [hash(tuple((c, float(a), float(b), ()) for c, a, b in g)) for g in groups]
    assert keys.tolist() == expected == tuple_keys(offs, codes, x, y)
    assert record_keys(offs, codes, x, y) == expected
    if len(x):  # a literal that is no integer: the tuples decide
        x[0] = 0.5
        assert not hash_records(offs, codes, x, y, hash(()), keys)
        assert record_keys(offs, codes, x, y) == tuple_keys(offs, codes, x, y)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("mixed", [False, True])
def test_numeric_texts_build_the_index_the_pattern_path_builds(
    seed: int, mixed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Churn in batches of texts of the numeric form (W1's between texts, Gryphon's equalities and
    other comparisons, with repeats) applied through the bytes path
    and, in another index, with the numeric form turned off (every text through the pattern and
    ``_compile_simple``): once the cuts are made by a common first load, both indexes hold the
    same arrays (rows and their summaries, fid table, predicate store, keys, members). With texts
    of other shapes and ``Filter`` objects in the batches (fids then taken in another order),
    both answer as the oracle."""
    from routing.matching import index as index_module

    rng = random.Random(seed)

    def predicate(name: str) -> str:
        low = rng.randrange(-60, 60)
        if rng.random() < 0.5:
            return f"{name} between {low} and {low + rng.randrange(50)}"
        return f"{name} {rng.choice(['=', '=', '!=', '<', '<=', '>', '>='])} {low}"

    def text() -> str:
        return " and ".join(map(predicate, rng.sample(["a", "b", "c", "d", "e", "f.g"], rng.randrange(1, 5))))

    first = [(f"s{i}", parse_filter(text())) for i in range(400)]  # the cuts: full after this load
    batches: list[list[Change]] = []
    live = [sid for sid, _ in first]
    pool = [text() for _ in range(60)]
    for round_ in range(8):
        batch: list[Change] = []
        for i in range(150):
            roll = rng.random()
            if live and roll < 0.45:
                batch.append((live.pop(rng.randrange(len(live))), None))
                continue
            sid = f"c{round_}-{i}"
            if roll < 0.6:
                batch.append((sid, rng.choice(pool)))  # a text seen before
            elif not mixed:
                batch.append((sid, text()))
            elif roll < 0.7:
                batch.append((sid, f"s = 'v{rng.randrange(5)}' and {text()}"))  # another shape
            elif roll < 0.75:
                batch.append((sid, parse_filter(text())))
            else:
                batch.append((sid, text()))
            live.append(sid)
        batches.append(batch)

    def build(fast: bool) -> MatchIndex:
        if not fast:
            real = index_module.read_numeric_form

            def none_of_the_form(texts: Sequence[str]):  # type: ignore[no-untyped-def]
                counts, *rest = real(texts)
                return (counts * 0 - 1, *rest)

            monkeypatch.setattr(index_module, "read_numeric_form", none_of_the_form)
        index = MatchIndex(max_cuts=6)
        index.apply(first)
        index.flush()
        for batch in batches:
            index.apply(batch)
            index.flush()
        monkeypatch.undo()
        return index

    fast, slow = build(True), build(False)
    if not mixed:
        a, b = fast.to_arrays(), slow.to_arrays()
        assert sorted(a) == sorted(b)
        for name in a:
            assert np.array_equal(a[name], b[name]), name
        assert np.array_equal(fast._summary[: fast._n_rows], slow._summary[: slow._n_rows])
    oracle = BruteForceIndex()
    oracle.apply(first)
    for batch in batches:
        oracle.apply(batch)
    events = [
        {n: rng.randrange(-70, 120) for n in ("a", "b", "c", "d", "e", "f.g") if rng.random() < 0.9} for _ in range(60)
    ]
    assert fast.match(events).all_ids() == slow.match(events).all_ids() == oracle.match(events).all_ids()
    assert fast.stats()["distinct_filters"] == slow.stats()["distinct_filters"]
