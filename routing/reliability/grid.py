"""The delay grid of the reliability predictor, and many distributions' cdfs and pmfs on it.

Delays live on one grid of step ``h`` ms (:class:`Grid`): a value x is rounded to the nearest
point, so point i stands for [(i - 1/2) h, (i + 1/2) h), sums of rounded values stay unbiased,
and mass beyond the grid's end counts as late, never as on time (docs/reference/reliability-model.md §3).
:class:`CdfTable` evaluates the cdfs of many distributions row by row, with one vectorised
expression per kind that has a closed form (lognormal, exponential); :func:`pmf_rows` turns
them into :meth:`Grid.pmf` rows.

Examples
--------
>>> from routing.stats.distributions import Exponential
>>> g = Grid(step=1.0, n=4)
>>> bool(np.allclose(pmf_rows(g, [Exponential(2.0)])[0], g.pmf(Exponential(2.0))))
True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import special

from routing.stats.distributions import Distribution, Exponential, Lognormal

__all__ = ["CdfTable", "Grid", "pmf_rows"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

_CDF_CHUNK = 1 << 15  # values per block of CdfTable.rows


@dataclass(frozen=True)
class Grid:
    """``n`` points 0, h, 2h, ...; point i carries the mass of [(i - 1/2) h, (i + 1/2) h).

    >>> g = Grid(step=1.0, n=8)
    >>> g.pmf_of_cdf(lambda x: np.clip(np.asarray(x) / 4.0, 0, 1)).round(3).tolist()  # U(0, 4)
    [0.125, 0.25, 0.25, 0.25, 0.125, 0.0, 0.0, 0.0]
    """

    step: float
    n: int

    @property
    def points(self) -> FloatArray:
        out: FloatArray = np.arange(self.n, dtype=np.float64) * self.step
        return out

    def pmf_of_cdf(self, cdf: Callable[[FloatArray], Any]) -> FloatArray:
        """Masses per point from a CDF (mass beyond the grid's end is dropped: it is late)."""
        edges = (np.arange(self.n + 1, dtype=np.float64) - 0.5) * self.step
        c = np.asarray(cdf(np.maximum(edges, 0.0)), dtype=np.float64)
        c[0] = 0.0  # nothing is negative: the first point takes [0, h/2)
        out: FloatArray = np.maximum(np.diff(c), 0.0)
        return out

    def pmf(self, dist: Distribution) -> FloatArray:
        """``dist`` on the grid; atoms (deterministic, empirical) land on their nearest point."""
        return self.pmf_of_cdf(lambda x: dist.cdf(x))

    def shift(self, pmf: FloatArray, by: float) -> FloatArray:
        """``pmf`` delayed by ``by`` ms, split linearly between the two nearest points."""
        if not math.isfinite(by):
            return np.zeros_like(pmf)
        cells = by / self.step
        whole = math.floor(cells)
        frac = cells - whole
        out = np.zeros_like(pmf)
        if whole < self.n:
            out[whole:] += (1.0 - frac) * pmf[: self.n - whole]
        if whole + 1 < self.n:
            out[whole + 1 :] += frac * pmf[: self.n - whole - 1]
        return out

    @property
    def fft_size(self) -> int:
        """Zero padding that keeps a sum of two grid variables from wrapping around."""
        return 1 << int(2 * self.n - 1).bit_length()

    def spectrum(self, pmf: FloatArray) -> NDArray[np.complex128]:
        """The padded transform of ``pmf``, to convolve many pmfs with the same one."""
        out: NDArray[np.complex128] = np.fft.rfft(pmf, self.fft_size)
        return out

    def convolve(self, a: FloatArray, b: FloatArray | NDArray[np.complex128]) -> FloatArray:
        """The pmf of the sum, truncated to the grid (what falls beyond is late); ``b`` may be
        a :meth:`spectrum`."""
        fb = b if np.iscomplexobj(b) else self.spectrum(np.asarray(b, dtype=np.float64))
        out: FloatArray = np.fft.irfft(self.spectrum(a) * fb, self.fft_size)[: self.n]
        return np.maximum(out, 0.0)

    def cdf_at(self, pmf: FloatArray, x: float) -> float:
        """P(X <= x), linear between the cells' upper edges."""
        cum = np.cumsum(pmf)
        edges = (np.arange(self.n, dtype=np.float64) + 0.5) * self.step
        return float(np.interp(x, edges, cum, left=0.0))

    def quantile(self, pmf: FloatArray, q: float, total: float) -> float | None:
        """The q-quantile of a distribution with total mass ``total`` (part of it maybe beyond
        the grid); None when it lies beyond the grid."""
        if total <= 0.0:
            return None
        cum = np.cumsum(pmf) / total
        i = int(np.searchsorted(cum, q))
        if i >= self.n:
            return None
        lo = cum[i - 1] if i > 0 else 0.0
        frac = (q - lo) / (cum[i] - lo) if cum[i] > lo else 0.5
        return float((i - 0.5 + frac) * self.step) if i > 0 else float(frac * 0.5 * self.step)


class CdfTable:
    """The cdfs of many distributions, evaluated row by row: one vectorised expression per kind
    with a closed form (the distribution's own arithmetic, to rounding), the distribution's
    ``cdf`` otherwise.

    >>> from routing.stats.distributions import Gamma
    >>> dists = [Lognormal(10.0, 0.5), Exponential(3.0), Gamma(4.0, 0.7)]
    >>> x = np.linspace(0.0, 30.0, 7)
    >>> bool(np.allclose(CdfTable(dists).rows(np.arange(3), x), [d.cdf(x) for d in dists], rtol=1e-13, atol=1e-15))
    True
    """

    def __init__(self, dists: Sequence[Distribution]) -> None:
        self.dists = list(dists)
        self.kind = np.array([2 if type(d) is Lognormal else 1 if type(d) is Exponential else 0 for d in dists])
        self.a = np.ones(len(dists))  # lognormal: mu; exponential: the mean
        self.b = np.ones(len(dists))  # lognormal: sigma
        logn = np.flatnonzero(self.kind == 2)
        if len(logn):
            cv = np.array([self.dists[i].cv for i in logn.tolist()])  # type: ignore[attr-defined]
            self.b[logn] = np.sqrt(np.log1p(cv * cv))
            self.a[logn] = np.log(np.array([self.dists[i].mean for i in logn.tolist()])) - 0.5 * self.b[logn] ** 2
        expo = np.flatnonzero(self.kind == 1)
        self.a[expo] = [self.dists[i].mean for i in expo.tolist()]

    def rows(self, rows: IntArray, x: FloatArray) -> FloatArray:
        """``dists[r].cdf(x)`` for each r in ``rows``, one row each. The closed forms are worked
        out in place, a few hundred kB of rows at a time (the same operations, in the same order,
        as one expression over all rows, without its temporaries of the whole table's size)."""
        out = np.empty((len(rows), len(x)))
        kind = self.kind[rows]
        positive = x > 0.0
        logx, negx = x, -np.maximum(x, 0.0)
        for code in np.unique(kind).tolist():
            sel = np.flatnonzero(kind == code)
            r = rows[sel]
            if code == 0:
                for k, i in zip(sel.tolist(), r.tolist(), strict=True):
                    out[k] = self.dists[i].cdf(x)
                continue
            whole = len(sel) == len(rows)
            block = out if whole else np.empty((len(sel), len(x)))
            if code == 2:  # each code comes once
                with np.errstate(divide="ignore"):
                    logx = np.log(np.maximum(x, 0.0))
            step = max(1, _CDF_CHUNK // max(len(x), 1))
            for lo in range(0, len(sel), step):
                part, a = block[lo : lo + step], self.a[r[lo : lo + step], None]
                if code == 2:
                    np.subtract(logx, a, out=part)  # (log x - mu) / sigma
                    np.divide(part, self.b[r[lo : lo + step], None], out=part)
                    special.ndtr(part, out=part)
                else:
                    np.divide(negx, a, out=part)  # 1 - exp(-x / mean)
                    np.expm1(part, out=part)
                    np.negative(part, out=part)
            block[:, ~positive] = 0.0
            if not whole:
                out[sel] = block
        return out


def _cdf_rows(dists: Sequence[Distribution], x: FloatArray) -> FloatArray:
    """``dists[i].cdf(x)`` for every i, as rows (see :class:`CdfTable`)."""
    return CdfTable(dists).rows(np.arange(len(dists)), x)


def pmf_rows(grid: Grid, dists: Sequence[Distribution]) -> FloatArray:
    """:meth:`Grid.pmf` of each distribution, as rows."""
    edges = (np.arange(grid.n + 1, dtype=np.float64) - 0.5) * grid.step
    c = _cdf_rows(dists, np.maximum(edges, 0.0))
    c[:, 0] = 0.0
    out: FloatArray = np.maximum(np.diff(c, axis=1), 0.0)
    return out
