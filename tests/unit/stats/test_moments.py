"""Count, mean and central sums (``routing.stats.moments.Moments``).

What is checked: any split of the data, added or merged in any grouping, gives numpy's two-pass
count, mean, variance, third central sum and E[X^3] (property test); the scv and E[X^3] of an
exponential sample. :class:`Tally` is checked with the intervals (``test_intervals.py``).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

from routing.stats.moments import Moments
from tests.unit.stats.summary_helpers import PROPERTY, splits


@st.composite
def values_and_splits(draw: st.DrawFn) -> tuple[NDArray[np.float64], list[int]]:
    values = draw(st.lists(st.floats(-1e3, 1e3, allow_nan=False), max_size=80))
    return np.array(values, dtype=np.float64), splits(draw, len(values))


@PROPERTY
@given(values_and_splits())
def test_moments_of_any_split_equal_numpy(case: tuple[NDArray[np.float64], list[int]]) -> None:
    x, cuts = case
    parts = [x[a:b] for a, b in itertools.pairwise(cuts)]
    added = Moments()  # one estimator, one batch after another
    merged = Moments()  # one estimator per batch, merged
    for part in parts:
        added.add(part)
        one = Moments()
        one.add(part)
        merged.merge(one)
    n = len(x)
    scale = max(1.0, float(np.abs(x).max())) if n else 1.0
    for m in (added, merged):
        assert m.count == n
        if n == 0:
            assert math.isnan(m.mean) and math.isnan(m.third_moment)
            continue
        d = x - x.mean()
        m2, m3 = m.central_sums
        assert m.mean == pytest.approx(x.mean(), abs=1e-10 * scale)
        assert m2 == pytest.approx(float(d @ d), abs=1e-9 * n * scale**2)
        assert m3 == pytest.approx(float((d**3).sum()), abs=1e-8 * n * scale**3)
        assert m.third_moment == pytest.approx(float(np.mean(x**3)), abs=1e-9 * scale**3)
        if n > 1:
            assert m.variance == pytest.approx(float(x.var(ddof=1)), abs=1e-9 * scale**2)
        else:
            assert math.isnan(m.variance) and math.isnan(m.scv)


def test_moments_recover_exponential_scv_and_third_moment() -> None:
    x = np.random.default_rng(3).exponential(5.0, 200_000)
    m = Moments()
    for part in np.array_split(x, 7):
        m.add(part)
    assert m.scv == pytest.approx(1.0, abs=4 * 2 / math.sqrt(len(x)))  # se of the scv estimate: 2/sqrt(n)
    assert m.third_moment == pytest.approx(6 * 5.0**3, abs=4 * float(np.std(x**3)) / math.sqrt(len(x)))
    zero = Moments()
    zero.add([0.0, 0.0])
    assert zero.scv == 0.0 and zero.variance == 0.0


def test_scv_of_a_mean_whose_square_underflows_is_zero_not_an_error() -> None:
    m = Moments()
    m.add(np.array([7.6e-247, 7.6e-247]))
    assert m.mean > 0.0 and m.mean * m.mean == 0.0
    assert m.scv == 0.0
