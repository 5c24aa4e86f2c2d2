"""Intervals for a proportion and a ratio (``routing.stats.intervals``).

What is checked: the Wilson interval against scipy's; with exact ends it differs from the plain one
only where k = 0 or k = n, and there it holds the point estimate exactly (which the plain one can
miss by an ulp, so both are kept); ``Tally.interval`` is the Wilson interval; batch means widen the
interval for outcomes clumped into batches.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binomtest

from routing.stats.intervals import batch_means_interval, wilson_interval
from routing.stats.moments import Tally


@pytest.mark.parametrize(("k", "n"), [(0, 10), (3, 10), (90, 100), (100, 100), (7, 2000)])
def test_wilson_interval_agrees_with_scipy(k: int, n: int) -> None:
    ci = binomtest(k, n).proportion_ci(0.9, method="wilson")
    assert wilson_interval(k, n) == pytest.approx((ci.low, ci.high), abs=1e-12)


@pytest.mark.parametrize("level", [0.9, 0.999])
@pytest.mark.parametrize("n", [0, 1, 2, 5, 10, 100, 149, 800, 2000])
def test_exact_ends_change_only_the_ends_at_k_0_and_k_n(n: int, level: float) -> None:
    for k in range(n + 1):
        plain = wilson_interval(k, n, level)
        exact = wilson_interval(k, n, level, exact_ends=True)
        assert exact[0] == (0.0 if k == 0 else plain[0])
        assert exact[1] == (1.0 if k == n else plain[1])
        assert exact == pytest.approx(plain, abs=1e-15)  # at most rounding apart
        if n:
            assert exact[0] <= k / n <= exact[1]


def test_the_plain_interval_can_miss_its_own_estimate_by_an_ulp() -> None:
    """Why both forms stay: the docs/reference/qos-predict.md output keeps the plain ends (its bytes must not change),
    the estimators need an interval that holds r = 1 when every message arrived."""
    assert wilson_interval(149, 149)[1] == 0.9999999999999999
    assert wilson_interval(149, 149, exact_ends=True)[1] == 1.0


def test_tally_interval_is_wilson_and_batch_means_widen_for_clumped_outcomes() -> None:
    t = Tally()
    t.add(np.arange(100) < 90)
    other = Tally()
    other.add([True, False])
    t.merge(other)
    assert (t.successes, t.trials) == (91, 102)
    low, high = binomtest(91, 102).proportion_ci(0.9, method="wilson")
    assert t.interval(0.9) == pytest.approx((low, high))
    # the same 900/1000 successes, clumped into whole batches, are far more uncertain than binomial
    k = np.array([100] * 9 + [0])
    n = np.full(10, 100)
    b_low, b_high = batch_means_interval(k, n, 0.9)
    w_low, w_high = wilson_interval(900, 1000, 0.9)
    assert b_low < w_low and b_high > w_high
    assert all(math.isnan(v) for v in batch_means_interval(np.array([3]), np.array([4]), 0.9))
