"""Batched, blocked matching (``MatchIndex.match`` over a batch of events) against the same index
asked one event at a time, and against ``BruteForceIndex``.

A batch is matched block of fids by block of fids, every event of the batch against a block
before the next block (docs/decisions/matching-bitset-index.md); an event alone walks the same
blocks by itself. The instances are W1-like (range predicates on random attributes, bounds that
outnumber the cut points, so most candidates need a check) and Gryphon-like (Zipf equalities and
don't-cares, identical filters sharing a slot), with blocks of one word up to the whole index,
batches that mix the listed, sparse and dense paths, and events that carry no value, a string or a
boolean where the filters expect numbers.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from routing.matching.index import BruteForceIndex, EventBatch, MatchIndex
from routing.matching.language import Filter, Op, Predicate, parse_filter


def w1_like(rng: random.Random, n: int, attrs: int, domain: int) -> list[Filter]:
    """``n`` filters of 2-6 ``between`` predicates (and now and then ``<`` or ``>=``) on distinct
    attributes of ``attrs``."""
    out = []
    for _ in range(n):
        preds = []
        for a in rng.sample(range(attrs), rng.randint(2, min(6, attrs))):
            lo = rng.randrange(domain)
            kind = rng.random()
            if kind < 0.8:
                preds.append(Predicate(f"a{a}", Op.BETWEEN, (lo, lo + rng.randrange(domain // 2 + 1))))
            elif kind < 0.9:
                preds.append(Predicate(f"a{a}", Op.LT, (lo,)))
            else:
                preds.append(Predicate(f"a{a}", Op.GE, (lo,)))
        out.append(Filter(tuple(preds)))
    return out


def gryphon_like(rng: random.Random, n: int, attrs: int, decay: float) -> list[Filter]:
    """``n`` filters of equalities on the leading attributes (each present with probability
    ``decay ** a``) over 4 Zipf-like values."""
    out = []
    for _ in range(n):
        preds = [
            f"a{a} = {rng.choices((1, 2, 3, 4), (8, 4, 2, 1))[0]}" for a in range(attrs) if rng.random() < decay**a
        ]
        out.append(parse_filter(" and ".join(preds or ["a0 = 1"])))
    return out


def events_like(rng: random.Random, n: int, attrs: int, values: list[object]) -> list[dict[str, object]]:
    """``n`` events over ``attrs`` attributes; now and then one leaves an attribute out or carries
    a value of another kind (a string, a boolean, None)."""
    out = []
    for _ in range(n):
        ev: dict[str, object] = {}
        for a in range(attrs):
            u = rng.random()
            if u < 0.03:
                continue
            ev[f"a{a}"] = rng.choice(("x", True, None)) if u < 0.05 else rng.choice(values)
        out.append(ev)
    return out


def index_of(filters: list[Filter], cache_bytes: int) -> tuple[MatchIndex, BruteForceIndex]:
    index, oracle = MatchIndex(max_cuts=8), BruteForceIndex()
    index.cache_bytes = cache_bytes
    changes = [(f"s{i}", f) for i, f in enumerate(filters)]
    index.apply(changes)
    for sid, f in changes:
        oracle.add(sid, f)
    return index, oracle


def one_by_one(index: MatchIndex, events: list[dict[str, object]]) -> list[list[str]]:
    return [index.match([ev]).ids(0) for ev in events]


def check_batches(index: MatchIndex, oracle: BruteForceIndex, events: list[dict[str, object]]) -> None:
    """The batch's answers equal the per-event answers and the oracle's; so do the answers of the
    batch cut into uneven pieces and of the batch as columns."""
    expected = oracle.match(events).all_ids()
    batched = index.match(events)
    assert batched.all_ids() == expected
    assert one_by_one(index, events) == expected
    cuts = [0, 1, 7, len(events) // 2, len(events)]
    pieces = [index.match(events[a:b]).all_ids() for a, b in itertools.pairwise(cuts)]
    assert [ids for piece in pieces for ids in piece] == expected
    assert index.match(EventBatch.from_events(events)).all_ids() == expected
    assert batched.counts().tolist() == [len(ids) for ids in expected]
    assert sum(map(len, expected)) > 0  # the instance matches something


@pytest.mark.parametrize("cache_bytes", [64, 1 << 12, 1 << 18, 1 << 30])
@pytest.mark.parametrize("seed", [1, 2])
def test_w1_like_batches_equal_events_one_by_one(cache_bytes: int, seed: int) -> None:
    """Range filters whose bounds outnumber the 8 cut points per attribute (most candidates are
    verified), 3,000 of them over 10 attributes, 150 events: batch, event by event, oracle."""
    rng = random.Random(seed)
    domain = 1000
    index, oracle = index_of(w1_like(rng, 3000, 10, domain), cache_bytes)
    values: list[object] = [rng.randrange(-5, domain + 5) for _ in range(60)] + [0, domain, 0.5, -0.0]
    check_batches(index, oracle, events_like(rng, 150, 10, values))
    assert index.stats()["paths"]["dense"] + index.stats()["paths"]["sparse"] > 0


@pytest.mark.parametrize("cache_bytes", [64, 1 << 18])
@pytest.mark.parametrize("decay", [0.78, 0.88])
def test_gryphon_like_batches_equal_events_one_by_one(cache_bytes: int, decay: float) -> None:
    """Zipf equality filters with don't-cares (many identical: shared slots), 4,000 of them over 12
    attributes, 150 events, and the same after a third of them are removed and others added."""
    rng = random.Random(int(decay * 100))
    filters = gryphon_like(rng, 4000, 12, decay)
    index, oracle = index_of(filters, cache_bytes)
    values: list[object] = [1, 1, 1, 2, 2, 3, 4, 5]
    check_batches(index, oracle, events_like(rng, 150, 12, values))
    changes: list[tuple[str, Filter | None]] = [(f"s{i}", None) for i in range(0, 4000, 3)]
    changes += [(f"n{i}", f) for i, f in enumerate(gryphon_like(rng, 500, 12, decay))]
    index.apply(changes)
    for sid, f in changes:
        if f is None:
            oracle.remove(sid)
        else:
            oracle.add(sid, f)
    check_batches(index, oracle, events_like(rng, 150, 12, values))


def test_mixed_paths_in_one_batch_equal_events_one_by_one() -> None:
    """Gryphon-like and W1-like filters in one index: a batch whose events take the listed path
    (equalities only) beside ones that take the blockwise paths (ranges too)."""
    rng = random.Random(5)
    filters = gryphon_like(rng, 2000, 6, 0.8)
    filters += [
        Filter((Predicate("z", Op.GE, (rng.randrange(100),)), *f.predicates)) for f in w1_like(rng, 2000, 6, 100)
    ]
    index, oracle = index_of(filters, 1 << 10)
    events = events_like(rng, 120, 6, [1, 2, 3, 4, 50, 99])
    for ev in events[::2]:
        ev["z"] = rng.randrange(100)
    check_batches(index, oracle, events)
    paths = index.stats()["paths"]
    assert paths["listed"] > 0 and np.sum([paths["dense"], paths["sparse"]]) > 0, paths
