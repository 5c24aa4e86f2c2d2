"""Mergeable count-and-moment summaries: :class:`Moments` of a stream of numbers, :class:`Tally`
of successes out of trials.

Both follow the shape of every incremental summary here (docs/conventions.md §2): ``add(batch)`` takes a
whole batch of values at once, ``merge(other)`` adds what another summary has seen (so that the
work can be split across partitions and window buckets), ``copy()``, and the state forms of
:mod:`routing.stats.state`.

:class:`Moments` keeps n, the mean and the central sums M2 = sum (x - mean)^2 and
M3 = sum (x - mean)^3. A batch's own moments are computed in two passes, then combined with the
running ones by the pairwise formulas of Chan, Golub and LeVeque ("Updating formulae and a
pairwise algorithm for computing sample variances", 1979) for M2 and of Pébay ("Formulas for
robust, one-pass parallel computation of covariances and arbitrary-order statistical moments",
SAND2008-6212, eq. 2.1-2.2) for M3; Welford (1962) is the one-value-at-a-time special case.

Invariant: any split of the data, added batch by batch or merged in any grouping, gives the
moments of the whole (up to rounding); :class:`Tally` merges are exact.

Examples
--------
>>> m = Moments()
>>> m.add([1.0, 2.0, 3.0, 4.0])
>>> m.count, m.mean, round(m.variance, 6)
(4, 2.5, 1.666667)
>>> t = Tally()
>>> t.add([True, False, True, True])
>>> t.proportion
0.75
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from routing.stats.intervals import wilson_interval
from routing.stats.state import State, pack_state, unpack_state

__all__ = ["Moments", "Tally"]


class Moments:
    """Count, mean and central sums M2, M3 of a stream of numbers, merged a batch at a time.

    Per batch, the batch's own moments are computed in two passes (numpy), then combined with
    the running ones by the pairwise formulas: with n = n_a + n_b and delta = mean_b - mean_a,

    - mean = mean_a + delta n_b / n,
    - M2 = M2_a + M2_b + delta^2 n_a n_b / n (Chan, Golub and LeVeque, "Updating formulae and a
      pairwise algorithm for computing sample variances", 1979),
    - M3 = M3_a + M3_b + delta^3 n_a n_b (n_a - n_b) / n^2 + 3 delta (n_a M2_b - n_b M2_a) / n
      (Pébay, "Formulas for robust, one-pass parallel computation of covariances and arbitrary-order
      statistical moments", SAND2008-6212, eq. 2.2).

    M2 = sum (x - mean)^2 and M3 = sum (x - mean)^3 over the values seen.

    Examples
    --------
    >>> m = Moments()
    >>> m.add([1.0, 2.0])
    >>> other = Moments()
    >>> other.add([3.0, 4.0])
    >>> m.merge(other)
    >>> m.count, m.mean, round(m.variance, 6), m.third_moment
    (4, 2.5, 1.666667, 25.0)
    """

    __slots__ = ("_m2", "_m3", "_mean", "_n")

    def __init__(self) -> None:
        self._n = 0
        self._mean = 0.0
        self._m2 = 0.0
        self._m3 = 0.0

    def _combine(self, n_b: int, mean_b: float, m2_b: float, m3_b: float) -> None:
        if n_b == 0:
            return
        n_a = self._n
        if n_a == 0:
            self._n, self._mean, self._m2, self._m3 = n_b, mean_b, m2_b, m3_b
            return
        n = n_a + n_b
        delta = mean_b - self._mean
        d_n = delta / n
        m2_a = self._m2
        self._m3 = self._m3 + m3_b + delta * d_n * d_n * n_a * n_b * (n_a - n_b) + 3.0 * d_n * (n_a * m2_b - n_b * m2_a)
        self._m2 = m2_a + m2_b + delta * d_n * n_a * n_b
        self._mean += d_n * n_b
        self._n = n

    def add(self, values: ArrayLike) -> None:
        """Add a batch of finite numbers (any shape; flattened)."""
        x = np.asarray(values, dtype=np.float64).reshape(-1)
        if x.size == 0:
            return
        mean_b = float(x.mean())
        d = x - mean_b
        d2 = d * d
        self._combine(int(x.size), mean_b, float(d2.sum()), float((d2 * d).sum()))

    def add_repeated(self, value: float, n: int) -> None:
        """Add ``n`` copies of ``value``: what ``add`` of them gives, bit for bit, without numpy
        when ``value`` is an integer below ``2**53 / n`` in magnitude (their sum is then exact, so
        the batch's mean is ``value`` and its central sums 0: counts, as the routes job's rates).

        >>> a, b = Moments(), Moments()
        >>> a.add([2.0, 5.0]); b.add([2.0, 5.0])
        >>> a.add(np.ones(3)); b.add_repeated(1.0, 3)
        >>> a.to_bytes() == b.to_bytes(), b.count
        (True, 5)
        """
        v = float(value)
        if n <= 0:
            return
        if v.is_integer() and abs(v) * n < 2.0**53:
            self._combine(int(n), v, 0.0, 0.0)
        else:
            self.add(np.full(n, v))

    def merge(self, other: Moments) -> None:
        """Add everything ``other`` has seen (``other`` is unchanged)."""
        self._combine(other._n, other._mean, other._m2, other._m3)

    def copy(self) -> Moments:
        out = Moments()
        out._n, out._mean, out._m2, out._m3 = self._n, self._mean, self._m2, self._m3
        return out

    @property
    def count(self) -> int:
        """Values seen."""
        return self._n

    @property
    def sum(self) -> float:
        """Sum of the values."""
        return self._n * self._mean

    @property
    def mean(self) -> float:
        """Sample mean (NaN when empty)."""
        return self._mean if self._n else math.nan

    @property
    def variance(self) -> float:
        """Unbiased sample variance M2 / (n - 1) (NaN for fewer than 2 values)."""
        return self._m2 / (self._n - 1) if self._n > 1 else math.nan

    @property
    def scv(self) -> float:
        """Squared coefficient of variation variance / mean^2 (c^2; 0 when mean^2 is 0, also
        when it underflows)."""
        if self._n < 2:
            return math.nan
        square = self._mean * self._mean
        return 0.0 if square == 0.0 else self.variance / square

    @property
    def third_moment(self) -> float:
        """Raw third moment E[X^3] = M3/n + 3 mean M2/n + mean^3 (plug-in; NaN when empty)."""
        if self._n == 0:
            return math.nan
        n, m = self._n, self._mean
        return self._m3 / n + 3.0 * m * self._m2 / n + m**3

    @property
    def central_sums(self) -> tuple[float, float]:
        """(M2, M3), the central sums of squares and cubes."""
        return self._m2, self._m3

    def to_state(self) -> State:
        return {
            "n": np.array([self._n], dtype=np.int64),
            "sums": np.array([self._mean, self._m2, self._m3], dtype=np.float64),
        }

    @staticmethod
    def stacked_states(items: Sequence[Moments]) -> State:
        """The ``to_state`` arrays of ``items`` end to end (``RollingWindow.to_state``'s layout),
        in one pass rather than two small arrays per item.

        >>> a, b = Moments(), Moments()
        >>> a.add([1.0, 3.0])
        >>> {k: v.tolist() for k, v in Moments.stacked_states([a, b]).items()}
        {'n': [2, 0], 'sums': [2.0, 2.0, 0.0, 0.0, 0.0, 0.0]}
        """
        n = np.fromiter((m._n for m in items), dtype=np.int64, count=len(items))
        sums = np.array([(m._mean, m._m2, m._m3) for m in items], dtype=np.float64).reshape(-1)
        return {"n": n, "sums": sums}

    @classmethod
    def from_state(cls, state: Mapping[str, NDArray[Any]]) -> Moments:
        out = cls()
        out._n = int(state["n"][0])
        out._mean, out._m2, out._m3 = (float(v) for v in state["sums"])
        return out

    def to_bytes(self) -> bytes:
        return pack_state("Moments", self.to_state())

    @classmethod
    def from_bytes(cls, data: bytes) -> Moments:
        return cls.from_state(unpack_state("Moments", data))

    def __repr__(self) -> str:
        return f"Moments(count={self._n}, mean={self.mean:.6g}, variance={self.variance:.6g})"


class Tally:
    """Successes out of trials (on-time deliveries out of matching events).

    Examples
    --------
    >>> t = Tally()
    >>> t.add([True, True, False, True])
    >>> t.successes, t.trials, t.proportion
    (3, 4, 0.75)
    """

    __slots__ = ("_k", "_n")

    def __init__(self) -> None:
        self._k = 0
        self._n = 0

    def add(self, values: ArrayLike) -> None:
        """Add a batch of outcomes (booleans: True is a success)."""
        x = np.asarray(values, dtype=np.bool_).reshape(-1)
        self._k += int(np.count_nonzero(x))
        self._n += int(x.size)

    def merge(self, other: Tally) -> None:
        self._k += other._k
        self._n += other._n

    def copy(self) -> Tally:
        out = Tally()
        out._k, out._n = self._k, self._n
        return out

    @property
    def successes(self) -> int:
        return self._k

    @property
    def trials(self) -> int:
        return self._n

    @property
    def proportion(self) -> float:
        """successes / trials (NaN without trials)."""
        return self._k / self._n if self._n else math.nan

    def interval(self, level: float = 0.90) -> tuple[float, float]:
        """Wilson score interval (:func:`routing.stats.intervals.wilson_interval`, exact ends)."""
        return wilson_interval(self._k, self._n, level, exact_ends=True)

    def to_state(self) -> State:
        return {"counts": np.array([self._k, self._n], dtype=np.int64)}

    @classmethod
    def from_state(cls, state: Mapping[str, NDArray[Any]]) -> Tally:
        out = cls()
        out._k, out._n = (int(v) for v in state["counts"])
        return out

    def to_bytes(self) -> bytes:
        return pack_state("Tally", self.to_state())

    @classmethod
    def from_bytes(cls, data: bytes) -> Tally:
        return cls.from_state(unpack_state("Tally", data))

    def __repr__(self) -> str:
        return f"Tally({self._k}/{self._n})"
