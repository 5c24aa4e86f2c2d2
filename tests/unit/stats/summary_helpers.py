"""Helpers shared by the tests of the mergeable summaries (``routing.stats``): how a batch of
values is split into parts, and when two serialised states are the same.

The strategies that use them are local to each test module: they are a few lists of numbers, not
records (``tests/strategies.py`` holds the record strategies).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from numpy.typing import NDArray

PROPERTY = settings(max_examples=60, deadline=None)


def splits(draw: st.DrawFn, n: int) -> list[int]:
    """Cut points 0 <= ... <= n of up to 7 parts (empty parts included)."""
    cuts = draw(st.lists(st.integers(0, n), max_size=6))
    return [0, *sorted(cuts), n]


def same_state(a: dict[str, NDArray[Any]], b: dict[str, NDArray[Any]]) -> bool:
    """Two ``to_state`` results hold the same names and equal arrays."""
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
