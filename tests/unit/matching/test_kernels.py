"""Compiled kernels of ``routing.matching.kernels`` against their plain twins (docs/conventions.md §6).

``flush_fid_bits`` clears the dropped fids and decides the new fids of a run of words of the rows
together (an attribute of numbers' intervals from its end buckets alone, an attribute a fid says
nothing about once for all its rows), refreshing the runs' summary bits; ``clear_fid_bits_plain``
then ``set_fid_bits_plain`` clear and decide every bucket of every fid, one fid after the other,
and ``summarize_rows`` recomputes the summaries. Both run on copies of one index's rows, fid
table and summaries, after a batch of changes whose bit work is pending, and must leave the same
bits, the same flags and the same summaries.
The filters are range-heavy (W1's ``between`` and the orderings, bounds on and off the cuts,
empty spans), mixed with every other kind of predicate, and numerous enough that the new fids
span several runs of words and reuse freed fids.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from routing.matching import kernels as K
from routing.matching.index import MatchIndex
from tests.strategies import index_filters


def _pending_bits(index: MatchIndex) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Both ways' rows and fid table after the pending dropped and new fids: (rows, meta) of
    each, the new fids; the summaries of the rows summarised so far are checked here."""
    clear = np.unique(np.asarray(index._pending_clear, dtype=np.int64))
    fids = np.unique(np.asarray(index._pending_set, dtype=np.int64))
    fids = fids[index._meta[fids, K.M_MCOUNT] > 0]
    shared = (len(index._attr_names), index._fixed_rows, index._str_rows, index._str_count, index._num_cuts)
    shared += (index._num_ncuts, index._num_rows)
    tail = (index._p_code, index._p_ab, index._lit)
    rows, meta, summary = index._rows.copy(), index._meta.copy(), index._summary.copy()
    current = summary.shape == (rows.shape[0], (rows.shape[1] + 63) // 64)  # else the flush summarises all
    n_summary = min(index._summarised_rows, index._n_rows) if current else 0
    K.flush_fid_bits(fids, clear, *shared, rows, index._n_rows, meta, *tail, summary, n_summary)
    rows_plain, meta_plain = index._rows.copy(), index._meta.copy()
    K.clear_fid_bits_plain(clear, rows_plain, index._n_rows)
    K.set_fid_bits_plain(fids, *shared, rows_plain, meta_plain, *tail)
    summary_plain = index._summary.copy()
    K.summarize_rows(rows_plain, 0, n_summary, summary_plain)
    assert np.array_equal(summary, summary_plain)
    return rows, meta, rows_plain, meta_plain, fids


def _range_text(rng: random.Random) -> str:
    """A range-heavy filter: ``between`` (sometimes empty), orderings and equalities on numbers,
    bounds drawn from a small range so that many fall on cuts."""
    parts = []
    for name in rng.sample(["a", "b", "c", "d", "e", "f"], rng.randrange(1, 5)):
        for _ in range(rng.choice((1, 1, 1, 2))):  # two predicates on one attribute now and then
            low = rng.randrange(-20, 20)
            shape = rng.randrange(6)
            if shape < 3:
                parts.append(f"{name} between {low} and {low + rng.randrange(-2, 25)}")
            else:
                parts.append(f"{name} {rng.choice(('<', '<=', '>', '>=', '=', '!='))} {low}")
    return " and ".join(parts)


@pytest.mark.parametrize("max_cuts", [0, 1, 4, 48])
def test_flush_fid_bits_equals_the_plain_kernels_on_range_heavy_filters(max_cuts: int) -> None:
    rng = random.Random(max_cuts)
    index = MatchIndex(max_cuts=max_cuts)
    index.apply([(f"s{i}", _range_text(rng)) for i in range(1500)])
    rows, meta, rows_plain, meta_plain, fids = _pending_bits(index)
    assert len(fids) > 600  # several runs of 8 words of 64 fids
    assert np.array_equal(rows, rows_plain)
    assert np.array_equal(meta, meta_plain)
    inexact = (meta[fids, K.M_FLAGS] & K.INEXACT) > 0
    assert inexact.all() if max_cuts == 0 else inexact.any() and not inexact.all()  # no cuts: no bucket decides
    index.flush()
    # freed fids reused by the next batch (scattered runs of words), others dropped beside them
    index.apply([(f"s{i}", None) for i in range(0, 1500, 3)])
    index.flush()
    index.apply([(f"n{i}", _range_text(rng)) for i in range(400)] + [(f"s{i}", None) for i in range(1, 1500, 7)])
    assert len(index._pending_clear) > 100
    rows, meta, rows_plain, meta_plain, fids = _pending_bits(index)
    assert len(fids) > 300 and fids.min() < 1000
    assert np.array_equal(rows, rows_plain)
    assert np.array_equal(meta, meta_plain)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(filters=st.lists(index_filters(max_predicates=4), min_size=1, max_size=80), max_cuts=st.sampled_from((1, 3, 48)))
def test_flush_fid_bits_equals_the_plain_kernels_on_every_kind(filters: list, max_cuts: int) -> None:
    """Every kind of predicate (strings, booleans, lists, exists, integers past 2**53), then half
    of them dropped and new ones added in one batch."""
    index = MatchIndex(max_cuts=max_cuts, max_strings=2)
    index.apply([(f"s{i}", f) for i, f in enumerate(filters)])
    rows, meta, rows_plain, meta_plain, _ = _pending_bits(index)
    assert np.array_equal(rows, rows_plain)
    assert np.array_equal(meta, meta_plain)
    index.flush()
    index.apply(
        [(f"s{i}", None) for i in range(0, len(filters), 2)] + [(f"t{i}", f) for i, f in enumerate(filters[::3])]
    )
    rows, meta, rows_plain, meta_plain, _ = _pending_bits(index)
    assert np.array_equal(rows, rows_plain)
    assert np.array_equal(meta, meta_plain)


@pytest.mark.parametrize("seed", [0, 1])
def test_flush_fid_bits_clears_as_the_plain_kernel(seed: int) -> None:
    """Dropped fids alone (scattered, several in a word, the last word's last bits) cleared from
    full and random rows, the other bits kept, the summaries of the rows below ``n_summary``
    refreshed."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, 2**63, size=(40, 30), dtype=np.uint64) | np.uint64(1 << 63)
    rows[:5] = ~np.uint64(0)
    rows[5, :3] = np.uint64(1)  # words that the clearing empties
    fids = np.unique(np.concatenate((rng.choice(30 * 64, 300, replace=False), [0, 63, 64, 30 * 64 - 1, 128])))
    none = np.zeros(0, dtype=np.int64)
    empty = np.zeros((1, 1), dtype=np.int64)
    fast, plain = rows.copy(), rows.copy()
    summary, summary_plain = np.zeros((40, 1), dtype=np.uint64), np.zeros((40, 1), dtype=np.uint64)
    K.summarize_rows(rows, 0, 40, summary)
    zeros = np.zeros(1, dtype=np.int64)
    K.flush_fid_bits(
        none, fids, 0, empty, empty, zeros, np.zeros((1, 1)), zeros, empty, fast, 37, np.zeros((1, 6), dtype=np.int32),
        zeros, np.zeros((1, 2)), np.zeros(1), summary, 30,
    )  # fmt: skip
    K.clear_fid_bits_plain(fids, plain, 37)
    K.summarize_rows(rows, 0, 40, summary_plain)
    K.summarize_rows(plain, 0, 30, summary_plain)
    assert np.array_equal(fast, plain)
    assert not np.array_equal(fast, rows)
    assert np.array_equal(fast[37:], rows[37:])  # rows past n_rows untouched
    assert int(fast[0, 0]) & 1 == 0 and int(fast[0, 0]) >> 63 == 0  # fids 0 and 63 of a full row
    assert np.array_equal(summary, summary_plain)
    assert int(summary[5, 0]) & 7 != 7  # a word emptied: its summary bit cleared
