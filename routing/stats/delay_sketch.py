"""A mergeable sketch of non-negative delays with a small CDF error relative to the tail.

:class:`DelaySketch` is DDSketch's log-bucket mapping (Masson, Rim and Lee, "DDSketch: a fast and
fully-mergeable quantile sketch with relative-error guarantees", PVLDB 12(12), 2019, §2) with exact
integer counts, computed with numpy a batch at a time:

- bucket i holds the delays in [gamma^i, gamma^(i+1)), gamma = (1 + alpha) / (1 - alpha), alpha the
  ``relative_accuracy``; delays below ``zero_below_ms`` count as exactly 0, which keeps the atom of
  a queueing wait at 0;
- the CDF is interpolated linearly inside a bucket (which brings its error far below a bucket's
  mass), and the first and last buckets are clipped to the exact smallest positive and largest
  delay;
- :meth:`DelaySketch.pmf_on_grid` gives the mass per cell of a regular grid and the tail beyond it,
  the form the predictor convolves; :meth:`DelaySketch.to_distribution` a compact
  :class:`routing.stats.distributions.Empirical` for a docs/reference/qos-predict.md system document.

The reliability predictor reads delay CDFs where 1 - F is about 0.01 (R_s near 0.99), so the
error that matters is the error relative to 1 - F there. docs/decisions/delay-sketch.md records
why this sketch was chosen over KLL, REQ and the ``ddsketch`` package, with the measurements.

Invariants:

- merging adds counts, so it is exact, associative and commutative: any split of the data, merged
  in any order, gives the very same sketch;
- a quantile is interpolated inside the bucket of the true one, so its relative error is below
  gamma - 1 = 2 alpha / (1 - alpha) (about 2 alpha; DDSketch's alpha holds for the bucket's
  midpoint, not for an interpolated value);
- the size is the number of distinct buckets touched, at most about 230 per decade of delays at
  alpha = 0.5 %, serialised as two integer arrays.

Examples
--------
>>> s = DelaySketch(relative_accuracy=0.01)
>>> s.add([0.0, 10.0, 20.0, 30.0])
>>> s.count, float(s.cdf(0.0)), round(float(s.quantile(1.0)), 6)
(4, 0.25, 30.0)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from routing.stats.distributions import Empirical
from routing.stats.state import State, pack_state, unpack_state

__all__ = ["DelaySketch"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


def _non_negative(method: str, name: str, values: FloatArray) -> None:
    bad = ~np.isfinite(values) | (values < 0.0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{method}: {name}[{i}] must be finite and >= 0 ms (got {float(values[i])!r})")


class DelaySketch:
    """A mergeable quantile/CDF sketch of non-negative delays in ms (a DDSketch-style log histogram).

    Bucket i counts the delays in [gamma^i, gamma^(i+1)), gamma = (1 + alpha) / (1 - alpha), alpha the
    ``relative_accuracy``; delays below ``zero_below_ms`` count as exactly 0 (an absolute error of at
    most ``zero_below_ms``), which keeps the atom of a queueing wait at 0. The CDF is linear inside a
    bucket, the first and last buckets clipped to the exact smallest positive and largest delay.
    docs/decisions/delay-sketch.md records why this sketch was chosen, with its measured accuracy.

    Parameters
    ----------
    relative_accuracy : float
        alpha in (0, 1): the bucket width; quantiles are within relative error 2 alpha / (1 - alpha).
    zero_below_ms : float
        Delays below this are 0.

    Examples
    --------
    >>> x = np.random.default_rng(1).exponential(10.0, 100_000)
    >>> s = DelaySketch()
    >>> s.add(x)
    >>> s.count, s.buckets < 2000
    (100000, True)
    >>> d99 = float(np.quantile(x, 0.99))
    >>> bool(abs(s.cdf(d99) - np.mean(x <= d99)) < 1e-4), bool(abs(s.quantile(0.99) / d99 - 1) < 0.005)
    (True, True)
    >>> mass, tail = s.pmf_on_grid(10.0, 3)  # [0, 10), [10, 20), [20, 30) and beyond
    >>> mass.round(3).tolist(), round(tail, 3)
    ([0.632, 0.235, 0.084], 0.049)
    """

    __slots__ = ("_alpha", "_counts", "_index", "_ln_gamma", "_max", "_min", "_min_pos", "_zero", "_zero_below")

    def __init__(self, relative_accuracy: float = 0.005, zero_below_ms: float = 1e-3) -> None:
        if not 0.0 < relative_accuracy < 1.0:
            raise ValueError(f"relative_accuracy must be in (0, 1) (got {relative_accuracy})")
        if not zero_below_ms > 0.0:
            raise ValueError(f"zero_below_ms must be > 0 (got {zero_below_ms})")
        self._alpha = float(relative_accuracy)
        self._zero_below = float(zero_below_ms)
        self._ln_gamma = math.log((1.0 + self._alpha) / (1.0 - self._alpha))
        self._index: IntArray = np.empty(0, dtype=np.int64)
        self._counts: IntArray = np.empty(0, dtype=np.int64)
        self._zero = 0
        self._min = math.inf
        self._max = -math.inf
        self._min_pos = math.inf

    # -- updates -------------------------------------------------------------------------

    def add(self, values: ArrayLike) -> None:
        """Add a batch of delays in ms (finite, >= 0)."""
        x = np.asarray(values, dtype=np.float64).reshape(-1)
        if x.size == 0:
            return
        _non_negative("DelaySketch.add", "values", x)
        small = x < self._zero_below
        self._zero += int(np.count_nonzero(small))
        self._min = min(self._min, float(x.min()))
        self._max = max(self._max, float(x.max()))
        pos = x[~small]
        if pos.size:
            self._min_pos = min(self._min_pos, float(pos.min()))
            idx = np.floor(np.log(pos) / self._ln_gamma).astype(np.int64)
            index, counts = np.unique(idx, return_counts=True)
            self._absorb(index, counts.astype(np.int64))

    def _absorb(self, index: IntArray, counts: IntArray) -> None:
        if self._index.size == 0:
            self._index, self._counts = index.copy(), counts.copy()
            return
        both = np.concatenate((self._index, index))
        merged, inverse = np.unique(both, return_inverse=True)
        self._counts = np.bincount(
            inverse, weights=np.concatenate((self._counts, counts)), minlength=len(merged)
        ).astype(np.int64)
        self._index = merged

    def merge(self, other: DelaySketch) -> None:
        """Add everything ``other`` has seen (exact: counts add). Both need the same parameters."""
        if (other._alpha, other._zero_below) != (self._alpha, self._zero_below):
            raise ValueError(
                f"cannot merge sketches with different parameters: relative_accuracy {self._alpha} vs "
                f"{other._alpha}, zero_below_ms {self._zero_below} vs {other._zero_below}"
            )
        self._zero += other._zero
        self._min = min(self._min, other._min)
        self._max = max(self._max, other._max)
        self._min_pos = min(self._min_pos, other._min_pos)
        if other._index.size:
            self._absorb(other._index, other._counts)

    def copy(self) -> DelaySketch:
        out = DelaySketch(self._alpha, self._zero_below)
        out._index, out._counts = self._index.copy(), self._counts.copy()
        out._zero, out._min, out._max, out._min_pos = self._zero, self._min, self._max, self._min_pos
        return out

    # -- reading -------------------------------------------------------------------------

    @property
    def relative_accuracy(self) -> float:
        return self._alpha

    @property
    def count(self) -> int:
        """Delays seen."""
        return self._zero + int(self._counts.sum())

    @property
    def min(self) -> float:
        """Smallest delay seen (inf when empty)."""
        return self._min

    @property
    def max(self) -> float:
        """Largest delay seen (-inf when empty)."""
        return self._max

    @property
    def buckets(self) -> int:
        """Non-empty buckets, the zero bucket included: the sketch's size."""
        return int(self._index.size) + (self._zero > 0)

    def _bounds(self) -> tuple[FloatArray, FloatArray]:
        lo = np.exp(self._index * self._ln_gamma)
        hi = np.exp((self._index + 1) * self._ln_gamma)
        if lo.size:
            lo[0] = self._min_pos
            hi[-1] = self._max
            hi = np.maximum(hi, lo)
        return lo, hi

    def _cdf(self, x: ArrayLike, left: bool) -> FloatArray:
        xs = np.asarray(x, dtype=np.float64)
        n = self.count
        if n == 0:
            return np.full(xs.shape, math.nan)
        flat = xs.reshape(-1)
        below = np.where(flat > 0.0 if left else flat >= 0.0, float(self._zero), 0.0)
        if self._index.size:
            lo, hi = self._bounds()
            counts = self._counts.astype(np.float64)
            before = np.concatenate(([0.0], np.cumsum(counts)))
            j = np.searchsorted(lo, flat, side="right") - 1
            inside = j >= 0
            jj = np.maximum(j, 0)
            width = hi[jj] - lo[jj]
            with np.errstate(divide="ignore", invalid="ignore"):
                frac = np.where(width > 0.0, np.clip((flat - lo[jj]) / width, 0.0, 1.0), 0.0)
            point = width <= 0.0  # a bucket of one value: a step there
            frac = np.where(point, (flat > lo[jj]) if left else (flat >= lo[jj]), frac)
            below = below + np.where(inside, before[jj] + counts[jj] * frac, 0.0)
        out: FloatArray = np.minimum(below / n, 1.0).reshape(xs.shape)
        return out

    def cdf(self, x: ArrayLike) -> FloatArray:
        """P(X <= x), element-wise, shaped like ``x`` (NaN when the sketch is empty)."""
        return self._cdf(x, left=False)

    def quantile(self, q: ArrayLike) -> FloatArray:
        """The inverse of :meth:`cdf` at probabilities ``q`` in [0, 1], shaped like ``q``."""
        qs = np.asarray(q, dtype=np.float64)
        if np.any((qs < 0.0) | (qs > 1.0) | np.isnan(qs)):
            raise ValueError(f"quantile: q must be in [0, 1] (got {qs.reshape(-1).tolist()[:5]})")
        n = self.count
        if n == 0:
            return np.full(qs.shape, math.nan)
        rank = qs.reshape(-1) * n - self._zero
        out = np.zeros(rank.shape, dtype=np.float64)
        positive = rank > 0.0
        if self._index.size and positive.any():
            lo, hi = self._bounds()
            counts = self._counts.astype(np.float64)
            cum = np.cumsum(counts)
            r = rank[positive]
            j = np.minimum(np.searchsorted(cum, r, side="left"), len(cum) - 1)
            frac = np.clip((r - (cum[j] - counts[j])) / counts[j], 0.0, 1.0)
            out[positive] = lo[j] + frac * (hi[j] - lo[j])
        if self._zero == 0 and self._index.size:
            out = np.maximum(out, self._min_pos)
        result: FloatArray = out.reshape(qs.shape)
        return result

    def pmf_on_grid(self, step_ms: float, n: int) -> tuple[FloatArray, float]:
        """Probability mass per grid cell [i step, (i + 1) step), i = 0..n-1, and the tail beyond.

        Returns
        -------
        mass : float array of length n
        tail : float
            P(X >= n step), the mass a convolution on this grid must count as late, never on time
            (docs/reference/reliability-model.md §9). ``mass.sum() + tail`` is 1.
        """
        if not step_ms > 0.0 or n < 1:
            raise ValueError(f"pmf_on_grid: need step_ms > 0 and n >= 1 (got {step_ms}, {n})")
        if self.count == 0:
            raise ValueError("pmf_on_grid: the sketch is empty")
        below = self._cdf(np.arange(n + 1, dtype=np.float64) * step_ms, left=True)
        mass: FloatArray = np.maximum(np.diff(below), 0.0)
        return mass, float(max(1.0 - below[-1], 0.0))

    def to_distribution(self, max_points: int = 200) -> Empirical:
        """A compact :class:`routing.stats.distributions.Empirical` of at most ``max_points`` values.

        Consecutive buckets are grouped, each group becoming one value (the count-weighted mean of
        its buckets' midpoints, so the mean is kept) with the group's probability. The groups are
        equal steps of u = 2 F - ln max(S, 1e-4), F the mass below a bucket and S = 1 - F: in the
        body a group holds at most about a step / 2 of mass, in the tail at most a fraction (the
        step) of the survival S, so the CDF keeps its *relative* accuracy where R near 0.99 reads
        it (docs/decisions/delay-sketch.md: the error this leaves, against grouping by log value).
        """
        if max_points < 2:
            raise ValueError(f"max_points must be >= 2 (got {max_points})")
        n = self.count
        if n == 0:
            raise ValueError("to_distribution: the sketch is empty")
        values: list[float] = [0.0] if self._zero else []
        weights: list[float] = [float(self._zero)] if self._zero else []
        if self._index.size:
            lo, hi = self._bounds()
            counts = self._counts.astype(np.float64)
            below = (self._zero + np.concatenate(([0.0], np.cumsum(counts)[:-1]))) / n
            u = 2.0 * below - np.log(np.maximum(1.0 - below, 1e-4))
            room = max_points - (self._zero > 0)
            span = float(u[-1] - u[0])
            scale = (room - 1) / span if span > 0.0 else 0.0
            inverse = np.unique(np.floor((u - u[0]) * scale).astype(np.int64), return_inverse=True)[1]
            mass = np.bincount(inverse, weights=counts)
            values += (np.bincount(inverse, weights=counts * 0.5 * (lo + hi)) / mass).tolist()
            weights += mass.tolist()
        total = math.fsum(weights)
        return Empirical(tuple(values), tuple(w / total for w in weights))

    # -- state ---------------------------------------------------------------------------

    def to_state(self) -> State:
        return {
            "params": np.array([self._alpha, self._zero_below], dtype=np.float64),
            "extent": np.array([self._min, self._max, self._min_pos], dtype=np.float64),
            "zero": np.array([self._zero], dtype=np.int64),
            "index": self._index.copy(),
            "counts": self._counts.copy(),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, NDArray[Any]]) -> DelaySketch:
        alpha, zero_below = (float(v) for v in state["params"])
        out = cls(alpha, zero_below)
        out._min, out._max, out._min_pos = (float(v) for v in state["extent"])
        out._zero = int(state["zero"][0])
        out._index = np.asarray(state["index"], dtype=np.int64).copy()
        out._counts = np.asarray(state["counts"], dtype=np.int64).copy()
        return out

    def to_bytes(self) -> bytes:
        return pack_state("DelaySketch", self.to_state())

    @classmethod
    def from_bytes(cls, data: bytes) -> DelaySketch:
        return cls.from_state(unpack_state("DelaySketch", data))

    def __repr__(self) -> str:
        return f"DelaySketch(count={self.count}, buckets={self.buckets}, relative_accuracy={self._alpha})"
