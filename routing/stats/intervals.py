"""Confidence intervals for a proportion and for a ratio of sums.

Two intervals for "successes out of trials", such as a subscriber's on-time deliveries out of
its matching events (R_s) or a link's received sequence numbers out of those expected (r_l):

- :func:`wilson_interval`: the Wilson score interval of a binomial proportion (E. B. Wilson,
  "Probable inference, the law of succession, and statistical inference", JASA 22(158), 1927).
  It treats the trials as independent.
- :func:`batch_means_interval`: an interval for sum(k) / sum(n) that treats batches (k_i, n_i)
  as the independent replicates instead (Cochran, "Sampling Techniques", 3rd ed., §6.4), for
  outcomes that are correlated within a batch (events that share queues).

Symbols: k successes, n trials, p_hat = k / n, z the two-sided normal quantile of ``level``;
b batches, R = sum(k_i) / sum(n_i).

Invariants: both intervals lie in [0, 1]; with ``exact_ends=True`` a Wilson interval holds the
point estimate even where it is 0 or 1.

Examples
--------
>>> [round(x, 4) for x in wilson_interval(90, 100)]
[0.8396, 0.9393]
>>> [round(x, 3) for x in batch_means_interval(np.array([9, 8, 10, 9]), np.array([10, 10, 10, 10]), 0.9)]
[0.804, 0.996]
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numpy.typing import NDArray
from scipy import stats

__all__ = ["batch_means_interval", "wilson_interval"]

_WILSON_LEVEL = 0.90  # docs/reference/qos-predict.md: reliability_low/high form a 90% interval


@functools.cache
def _normal_quantile(q: float) -> float:
    """The standard normal quantile of ``q`` (scipy's ``norm.ppf``), kept per ``q``: callers
    ask for one level thousands of times a report."""
    return float(stats.norm.ppf(q))


def wilson_interval(
    successes: int, trials: int, level: float = _WILSON_LEVEL, *, exact_ends: bool = False
) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion.

    E. B. Wilson, "Probable inference, the law of succession, and statistical inference", JASA
    22(158), 1927: the p with |p_hat - p| <= z sqrt(p (1 - p) / n), z the two-sided normal
    quantile of ``level``.

    Parameters
    ----------
    successes, trials : int
        k and n; n <= 0 gives (0, 1).
    level : float
        Confidence level in (0, 1).
    exact_ends : bool
        In floating point the upper end for k = n (the lower end for k = 0) can fall an ulp
        inside 1 (0), e.g. 0.9999999999999999 for 149/149, which leaves p_hat = 1 outside its own
        interval. True sets those ends to exactly 1 (0); the other ends are unchanged.

    Examples
    --------
    >>> [round(x, 4) for x in wilson_interval(90, 100)]  # scipy's binomtest(90, 100).proportion_ci(0.9, 'wilson')
    [0.8396, 0.9393]
    >>> wilson_interval(0, 0)
    (0.0, 1.0)
    >>> wilson_interval(149, 149)[1], wilson_interval(149, 149, exact_ends=True)[1]
    (0.9999999999999999, 1.0)
    """
    if trials <= 0:
        low, high = 0.0, 1.0
    else:
        z = _normal_quantile(0.5 + level / 2.0)
        p = successes / trials
        z2n = z * z / trials
        center = (p + z2n / 2.0) / (1.0 + z2n)
        half = z / (1.0 + z2n) * math.sqrt(p * (1.0 - p) / trials + z2n / (4.0 * trials))
        low, high = max(0.0, center - half), min(1.0, center + half)
    if exact_ends:
        return (0.0 if successes == 0 else low), (1.0 if successes == trials else high)
    return low, high


def batch_means_interval(successes: NDArray[np.int64], trials: NDArray[np.int64], level: float) -> tuple[float, float]:
    """Interval for the ratio sum(k) / sum(n) with the batches (k_i, n_i) as independent replicates.

    The ratio estimator's variance is b/(b - 1) sum (k_i - R n_i)^2 / (sum n)^2 (Cochran, "Sampling
    Techniques", 3rd ed., §6.4), with a Student t quantile of b - 1 degrees of freedom.

    Returns (NaN, NaN) for fewer than 2 batches or no trials.

    Examples
    --------
    >>> k = np.array([9, 8, 10, 9]); n = np.array([10, 10, 10, 10])
    >>> [round(x, 3) for x in batch_means_interval(k, n, 0.9)]
    [0.804, 0.996]
    """
    k = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    b = len(k)
    total = float(n.sum())
    if b < 2 or total == 0.0:
        return math.nan, math.nan
    r = float(k.sum()) / total
    var = b / (b - 1) * float(((k - r * n) ** 2).sum()) / total**2
    half = float(stats.t.ppf(0.5 + level / 2.0, b - 1)) * math.sqrt(var)
    return max(0.0, r - half), min(1.0, r + half)
