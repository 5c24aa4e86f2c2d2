"""Non-negative time distributions (milliseconds) of the QoS model, docs/reference/qos-predict.md ``DIST``.

A ``DIST`` is a JSON object with a ``kind`` and that kind's parameters:

=============  ==========================  =========================================
kind           parameters                  meaning
=============  ==========================  =========================================
exponential    ``mean`` > 0                rate 1/mean
deterministic  ``value`` >= 0              always ``value``
uniform        ``low``, ``high``           0 <= low <= high
lognormal      ``mean`` > 0, ``cv`` > 0    ln X ~ N(mu, sigma^2), sigma^2 = ln(1 + cv^2)
gamma          ``mean`` > 0, ``cv`` > 0    shape k = 1/cv^2, scale theta = mean * cv^2
empirical      ``values``, ``probs``       values >= 0, probs >= 0 summing to 1
=============  ==========================  =========================================

``cv`` is the coefficient of variation (standard deviation over mean); :attr:`Distribution.scv`
is its square, the ``c^2`` of the queueing formulas (Whitt, "The Queueing Network Analyzer",
BSTJ 62(9), 1983). Keep the two apart: docs/reference/reliability-model.md §9 lists mixing them as a classic trap.

>>> d = parse_distribution({"kind": "gamma", "mean": 100, "cv": 0.5})
>>> d.mean, d.scv
(100.0, 0.25)
>>> parse_distribution({"kind": "normal", "mean": 1})
Traceback (most recent call last):
...
ValueError: DIST: unknown kind 'normal'; valid kinds: deterministic, empirical, exponential, gamma, lognormal, uniform
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import special

__all__ = [
    "KINDS",
    "Deterministic",
    "Distribution",
    "Empirical",
    "Exponential",
    "Gamma",
    "Lognormal",
    "Uniform",
    "parse_distribution",
]

FloatArray = NDArray[np.float64]

_PROB_TOLERANCE = 1e-6  # how far the probs of an empirical DIST may sum from 1 (JSON rounding)


class Distribution(ABC):
    """A distribution of a non-negative duration in milliseconds.

    Every kind offers the same small interface: :meth:`sample`, :meth:`cdf`, :attr:`mean`,
    :attr:`scv` (squared coefficient of variation, Var/mean^2; 0 by convention when the mean is
    0), :attr:`third_moment` (E[X^3], used by the M/G/1 delay-variance formula) and
    :meth:`to_dict` (the docs/reference/qos-predict.md JSON form it was parsed from).
    """

    kind: str

    @abstractmethod
    def sample(self, rng: np.random.Generator, size: int) -> FloatArray:
        """``size`` independent draws, in ms, as a float64 array."""

    @abstractmethod
    def cdf(self, x: ArrayLike) -> FloatArray:
        """P(X <= x), element-wise, as a float64 array of the shape of ``x``."""

    @property
    @abstractmethod
    def mean(self) -> float:
        """E[X] in ms."""

    @property
    @abstractmethod
    def variance(self) -> float:
        """Var[X] in ms^2."""

    @property
    @abstractmethod
    def third_moment(self) -> float:
        """E[X^3] in ms^3."""

    @abstractmethod
    def to_dict(self) -> dict[str, object]:
        """The docs/reference/qos-predict.md JSON form."""

    @property
    def scv(self) -> float:
        """Squared coefficient of variation Var[X]/E[X]^2 (0 when E[X] = 0)."""
        m = self.mean
        return 0.0 if m == 0.0 else self.variance / (m * m)


def _as_array(x: ArrayLike) -> FloatArray:
    return np.asarray(x, dtype=np.float64)


@dataclass(frozen=True)
class Exponential(Distribution):
    """Exponential with mean ``mean`` ms (rate 1/mean); scv 1.

    >>> Exponential(10.0).cdf([0.0, 10.0]).round(4)
    array([0.    , 0.6321])
    """

    mean_ms: float
    kind = "exponential"

    def sample(self, rng: np.random.Generator, size: int) -> FloatArray:
        return rng.exponential(self.mean_ms, size)

    def cdf(self, x: ArrayLike) -> FloatArray:
        xs = _as_array(x)
        return np.where(xs > 0.0, -np.expm1(-np.maximum(xs, 0.0) / self.mean_ms), 0.0)

    @property
    def mean(self) -> float:
        return self.mean_ms

    @property
    def variance(self) -> float:
        return self.mean_ms**2

    @property
    def third_moment(self) -> float:
        return 6.0 * self.mean_ms**3

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "mean": self.mean_ms}


@dataclass(frozen=True)
class Deterministic(Distribution):
    """A point mass at ``value`` ms; scv 0.

    >>> Deterministic(5.0).cdf([4.9, 5.0]).tolist()
    [0.0, 1.0]
    """

    value: float
    kind = "deterministic"

    def sample(self, rng: np.random.Generator, size: int) -> FloatArray:
        return np.full(size, self.value, dtype=np.float64)

    def cdf(self, x: ArrayLike) -> FloatArray:
        return (_as_array(x) >= self.value).astype(np.float64)

    @property
    def mean(self) -> float:
        return self.value

    @property
    def variance(self) -> float:
        return 0.0

    @property
    def third_moment(self) -> float:
        return self.value**3

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "value": self.value}


@dataclass(frozen=True)
class Uniform(Distribution):
    """Uniform on [``low``, ``high``] ms; scv (high - low)^2 / (3 (low + high)^2).

    The Pongthawornkamol paper (§4.5) says a uniform publisher has burstiness 0; it does not:
    Uniform(0, 2/lambda) has scv 1/3 (docs/reference/reliability-model.md §1.5).

    >>> round(Uniform(0.0, 2.0).scv, 4)
    0.3333
    """

    low: float
    high: float
    kind = "uniform"

    def sample(self, rng: np.random.Generator, size: int) -> FloatArray:
        return rng.uniform(self.low, self.high, size)

    def cdf(self, x: ArrayLike) -> FloatArray:
        xs = _as_array(x)
        if self.high == self.low:
            return (xs >= self.low).astype(np.float64)
        return np.clip((xs - self.low) / (self.high - self.low), 0.0, 1.0)

    @property
    def mean(self) -> float:
        return 0.5 * (self.low + self.high)

    @property
    def variance(self) -> float:
        return (self.high - self.low) ** 2 / 12.0

    @property
    def third_moment(self) -> float:
        a, b = self.low, self.high
        return (a**3 + a * a * b + a * b * b + b**3) / 4.0  # (b^4 - a^4) / (4 (b - a)), also for a == b

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "low": self.low, "high": self.high}


@dataclass(frozen=True)
class Lognormal(Distribution):
    """Lognormal with mean ``mean`` ms and coefficient of variation ``cv``.

    ln X ~ N(mu, sigma^2) with sigma^2 = ln(1 + cv^2) and mu = ln(mean) - sigma^2 / 2, so that
    E[X] = mean and Var[X] = (cv * mean)^2.

    >>> d = Lognormal(100.0, 0.5)
    >>> round(float(d.cdf(d.median)[()]), 6), round(d.scv, 6)
    (0.5, 0.25)
    """

    mean_ms: float
    cv: float
    kind = "lognormal"

    @property
    def sigma(self) -> float:
        """Standard deviation of ln X."""
        return math.sqrt(math.log1p(self.cv * self.cv))

    @property
    def mu(self) -> float:
        """Mean of ln X."""
        return math.log(self.mean_ms) - 0.5 * self.sigma**2

    @property
    def median(self) -> float:
        """exp(mu), in ms."""
        return math.exp(self.mu)

    def sample(self, rng: np.random.Generator, size: int) -> FloatArray:
        return rng.lognormal(self.mu, self.sigma, size)

    def cdf(self, x: ArrayLike) -> FloatArray:
        xs = _as_array(x)
        with np.errstate(divide="ignore"):
            z = (np.log(np.maximum(xs, 0.0)) - self.mu) / self.sigma
        return np.where(xs > 0.0, special.ndtr(z), 0.0)

    @property
    def mean(self) -> float:
        return self.mean_ms

    @property
    def variance(self) -> float:
        return (self.cv * self.mean_ms) ** 2

    @property
    def third_moment(self) -> float:
        return math.exp(3.0 * self.mu + 4.5 * self.sigma**2)

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "mean": self.mean_ms, "cv": self.cv}


@dataclass(frozen=True)
class Gamma(Distribution):
    """Gamma with mean ``mean`` ms and coefficient of variation ``cv``.

    Shape k = 1/cv^2 and scale theta = mean * cv^2; cv = 1 is the exponential, cv = 1/sqrt(k)
    the Erlang-k.

    >>> g = Gamma(10.0, 1.0)
    >>> bool(np.allclose(g.cdf([5.0, 20.0]), Exponential(10.0).cdf([5.0, 20.0])))
    True
    """

    mean_ms: float
    cv: float
    kind = "gamma"

    @property
    def shape(self) -> float:
        """k = 1/cv^2."""
        return 1.0 / (self.cv * self.cv)

    @property
    def scale(self) -> float:
        """theta = mean * cv^2, in ms."""
        return self.mean_ms * self.cv * self.cv

    def sample(self, rng: np.random.Generator, size: int) -> FloatArray:
        return rng.gamma(self.shape, self.scale, size)

    def cdf(self, x: ArrayLike) -> FloatArray:
        xs = _as_array(x)
        return np.asarray(special.gammainc(self.shape, np.maximum(xs, 0.0) / self.scale), dtype=np.float64)

    @property
    def mean(self) -> float:
        return self.mean_ms

    @property
    def variance(self) -> float:
        return (self.cv * self.mean_ms) ** 2

    @property
    def third_moment(self) -> float:
        k = self.shape
        return k * (k + 1.0) * (k + 2.0) * self.scale**3

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "mean": self.mean_ms, "cv": self.cv}


@dataclass(frozen=True)
class Empirical(Distribution):
    """A discrete distribution: ``values[i]`` ms with probability ``probs[i]``.

    The probabilities are used as given for the moments and renormalised (they may be off 1 by
    at most 1e-6) for sampling and the CDF.

    >>> e = Empirical((10.0, 30.0), (0.75, 0.25))
    >>> e.mean, float(e.cdf(10.0)[()])
    (15.0, 0.75)
    """

    values: tuple[float, ...]
    probs: tuple[float, ...]
    kind = "empirical"

    def _normalised(self) -> tuple[FloatArray, FloatArray]:
        v = np.asarray(self.values, dtype=np.float64)
        p = np.asarray(self.probs, dtype=np.float64)
        return v, p / p.sum()

    def sample(self, rng: np.random.Generator, size: int) -> FloatArray:
        v, p = self._normalised()
        cum = np.cumsum(p)
        idx = np.searchsorted(cum, rng.random(size) * cum[-1], side="right")
        out: FloatArray = v[np.minimum(idx, len(v) - 1)]
        return out

    def cdf(self, x: ArrayLike) -> FloatArray:
        values, cum = self._cdf_table()
        return np.minimum(cum[np.searchsorted(values, _as_array(x), side="right")], 1.0)

    def _cdf_table(self) -> tuple[FloatArray, FloatArray]:
        """The values sorted and the cumulative probabilities before each (``cum[0] = 0``)."""
        v, p = self._normalised()
        order = np.argsort(v, kind="stable")
        return v[order], np.concatenate(([0.0], np.cumsum(p[order])))

    def _moment(self, k: int) -> float:
        return float(sum(p * v**k for v, p in zip(self.values, self.probs, strict=True)) / sum(self.probs))

    @property
    def mean(self) -> float:
        return self._moment(1)

    @property
    def variance(self) -> float:
        return max(self._moment(2) - self._moment(1) ** 2, 0.0)

    @property
    def third_moment(self) -> float:
        return self._moment(3)

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "values": list(self.values), "probs": list(self.probs)}


_PARAMETERS: dict[str, tuple[str, ...]] = {
    "deterministic": ("value",),
    "empirical": ("values", "probs"),
    "exponential": ("mean",),
    "gamma": ("mean", "cv"),
    "lognormal": ("mean", "cv"),
    "uniform": ("low", "high"),
}
KINDS: tuple[str, ...] = tuple(sorted(_PARAMETERS))
"""The valid ``kind`` values of a DIST."""


def _number(spec: Mapping[str, object], name: str, where: str) -> float:
    value = spec[name]
    if type(value) is float and math.isfinite(value):  # the common case, without the checks below
        return value
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{where}: {name} must be a finite number (got {value!r})")
    return float(value)


def _numbers(spec: Mapping[str, object], name: str, where: str) -> tuple[float, ...]:
    value = spec[name]
    if not isinstance(value, list | tuple) or not value:
        raise ValueError(f"{where}: {name} must be a non-empty list of numbers (got {value!r})")
    out = []
    for i, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, int | float) or not math.isfinite(item):
            raise ValueError(f"{where}: {name}[{i}] must be a finite number (got {item!r})")
        out.append(float(item))
    return tuple(out)


def parse_distribution(spec: object, where: str = "DIST") -> Distribution:
    """Parse one docs/reference/qos-predict.md ``DIST`` object.

    Parameters
    ----------
    spec : mapping
        ``{"kind": ..., <parameters>}``; see the module docstring for the kinds.
    where : str
        Where the DIST sits in its document (``"links[3].delay_ms"``), used in error messages.

    Returns
    -------
    Distribution

    Raises
    ------
    ValueError
        Naming ``where``, what was wrong and what would be valid: an unknown kind, a missing or
        unexpected parameter, a negative or non-finite number, probabilities that do not sum to 1.

    Examples
    --------
    >>> parse_distribution({"kind": "uniform", "low": 0, "high": 200}).mean
    100.0
    >>> parse_distribution({"kind": "exponential", "mean": -5}, "service_ms")
    Traceback (most recent call last):
    ...
    ValueError: service_ms: exponential mean must be > 0 (got -5.0); use deterministic with value 0 for no delay
    >>> parse_distribution({"kind": "empirical", "values": [1, 2], "probs": [0.5, 0.4]})
    Traceback (most recent call last):
    ...
    ValueError: DIST: empirical probs must sum to 1 (got 0.9)
    """
    if type(spec) is not dict and not isinstance(spec, Mapping):  # a dict skips the ABC check
        raise ValueError(f"{where}: a DIST must be an object with a 'kind' (got {spec!r})")
    kind = spec.get("kind")
    if not isinstance(kind, str) or kind not in _PARAMETERS:
        raise ValueError(f"{where}: unknown kind {kind!r}; valid kinds: {', '.join(KINDS)}")
    expected = _PARAMETERS[kind]
    missing = [name for name in expected if name not in spec]
    if missing:
        raise ValueError(f"{where}: {kind} needs {', '.join(expected)} (missing {', '.join(missing)})")
    if len(spec) != len(expected) + 1:  # keys besides the kind and its parameters
        extra = sorted(str(k) for k in spec if k != "kind" and k not in expected)
        raise ValueError(f"{where}: unexpected {', '.join(extra)} for {kind}, which takes {', '.join(expected)}")

    if kind in ("exponential", "lognormal", "gamma"):
        mean = _number(spec, "mean", where)
        if mean <= 0.0:
            raise ValueError(
                f"{where}: {kind} mean must be > 0 (got {mean}); use deterministic with value 0 for no delay"
            )
        if kind == "exponential":
            return Exponential(mean)
        cv = _number(spec, "cv", where)
        if cv <= 0.0:
            raise ValueError(f"{where}: {kind} cv must be > 0 (got {cv}); use deterministic for cv 0")
        return Lognormal(mean, cv) if kind == "lognormal" else Gamma(mean, cv)
    if kind == "deterministic":
        value = _number(spec, "value", where)
        if value < 0.0:
            raise ValueError(f"{where}: deterministic value must be >= 0 (got {value})")
        return Deterministic(value)
    if kind == "uniform":
        low, high = _number(spec, "low", where), _number(spec, "high", where)
        if not 0.0 <= low <= high:
            raise ValueError(f"{where}: uniform needs 0 <= low <= high (got low {low}, high {high})")
        return Uniform(low, high)
    values, probs = _numbers(spec, "values", where), _numbers(spec, "probs", where)
    if len(values) != len(probs):
        raise ValueError(f"{where}: empirical values and probs differ in length ({len(values)} vs {len(probs)})")
    if min(values) < 0.0:
        raise ValueError(f"{where}: empirical values must be >= 0 (got {min(values)})")
    if min(probs) < 0.0:
        raise ValueError(f"{where}: empirical probs must be >= 0 (got {min(probs)})")
    total = math.fsum(probs)
    if abs(total - 1.0) > _PROB_TOLERANCE:
        raise ValueError(f"{where}: empirical probs must sum to 1 (got {total:.6g})")
    return Empirical(values, probs)
