"""Sequence numbers as runs (``routing.stats.sequence_log.SequenceLog``) against a set of ints:
any split of the numbers, added or merged, counts what the set counts, also through bytes. Link
loss, with its grace period, is checked with the estimator (``tests/unit/reliability/test_estimation.py``).
"""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

from routing.stats.sequence_log import SequenceLog
from tests.unit.stats.summary_helpers import PROPERTY, splits


@st.composite
def seqs_and_splits(draw: st.DrawFn) -> tuple[NDArray[np.int64], list[int]]:
    values = draw(st.lists(st.integers(0, 60), max_size=80))
    return np.array(values, dtype=np.int64), splits(draw, len(values))


@PROPERTY
@given(seqs_and_splits())
def test_sequence_log_counts_distinct_numbers_like_a_set(case: tuple[NDArray[np.int64], list[int]]) -> None:
    seqs, cuts = case
    log, merged = SequenceLog(), SequenceLog()
    for a, b in itertools.pairwise(cuts):
        log.add(seqs[a:b])
        part = SequenceLog()
        part.add(seqs[a:b])
        merged.merge(part)
    seen = set(seqs.tolist())
    for got in (log, merged, SequenceLog.from_bytes(log.to_bytes())):
        assert got.received == len(seen)
        assert got.expected == (max(seen) - min(seen) + 1 if seen else 0)
        runs = sum(1 for s in seen if s - 1 not in seen)
        assert got.runs == runs
