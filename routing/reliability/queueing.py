"""Single-queue formulas of the reliability predictor: waits, delay probabilities and scvs.

The broker delay of :func:`routing.reliability.prediction.predict` comes from these formulas
(docs/reference/reliability-model.md §2). Symbols: ``rho = lambda tau`` is a broker's load (lambda its arrival rate,
tau = E[S] its mean service time, both per ms), ``ca2`` and ``cs2`` are the squared coefficients
of variation (scvs) of its inter-arrival and service times, ``ds3 = E[S^3] / E[S]^3``, ``sigma``
is the probability of waiting P(W > 0), and ``cd2`` the scv of the conditional delay
D = W | W > 0.

- ``mm1``, the baseline, is Pongthawornkamol, Nahrstedt and Wang, "Towards Timeliness and
  Reliability Analysis of Distributed Content-based Publish/Subscribe Systems over Best-effort
  Networks", §4.3, Eq. 5: the mean wait :func:`mm1_wait`, the service shifted by it.
- ``gg1`` (:func:`gg1_wait_model`): the mean wait by Kraemer and Langenbach-Belz (ITC-8, 1976,
  :func:`klb_wait`, Kingman's :func:`kingman_wait` times a correction), sigma by Whitt's QNA
  ("The Queueing Network Analyzer", BSTJ 62(9), 1983, :func:`qna_delay_probability`), and
  :func:`conditional_delay_scv`, exact for M/G/1; the wait W is then an atom 1 - sigma at 0 plus
  a gamma body (:class:`WaitModel`).
- QNA's network operations on scvs: :func:`departure_scv` of a single server,
  :func:`thinned_scv` for Bernoulli splitting, and :func:`superposed_scv` for a merge of flows,
  rate-weighted ("asymptotic") or Albin's hybrid (:func:`hybrid_weight`).

Invariants: every wait is ``inf`` when ``rho >= 1``; sigma stays in [1e-3, 0.999] and c_D^2 at
or above 0.05 (docs/reference/reliability-model.md §9). :data:`RHO_WARNING` is the load from which every formula is
unreliable (docs/reference/reliability-model.md §5.5).

Examples
--------
>>> w = gg1_wait_model(rho=0.8, ca2=1.0, cs2=1.0, ds3=6.0, tau=1.0)  # M/M/1: W ~ 0.2 at 0 + 0.8 Exp(mean 5)
>>> round(w.mean, 6), round(w.sigma, 6), w.cd2
(4.0, 0.8, 1.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import stats

__all__ = [
    "RHO_WARNING",
    "WaitModel",
    "conditional_delay_scv",
    "departure_scv",
    "gg1_wait_model",
    "hybrid_weight",
    "kingman_wait",
    "klb_wait",
    "mm1_wait",
    "qna_delay_probability",
    "superposed_scv",
    "thinned_scv",
]

FloatArray = NDArray[np.float64]

RHO_WARNING = 0.95  # docs/reference/reliability-model.md §5.5: at or above, every formula is unreliable
_SIGMA_CLIP = (1e-3, 0.999)  # docs/reference/reliability-model.md §9
_CD2_FLOOR = 0.05  # docs/reference/reliability-model.md §9


def mm1_wait(rho: float, tau: float) -> float:
    """Paper Eq. 5, q_b = lambda / (mu (mu - lambda)) = rho tau / (1 - rho); inf when rho >= 1.

    >>> mm1_wait(0.5, 10.0)
    10.0
    """
    return math.inf if rho >= 1.0 else rho * tau / (1.0 - rho)


def kingman_wait(rho: float, ca2: float, cs2: float, tau: float) -> float:
    """Kingman's heavy-traffic approximation of E[W]: rho / (1 - rho) (c_a^2 + c_s^2) / 2 tau.

    Exact for M/G/1 (it is then Pollaczek-Khinchine).

    >>> kingman_wait(0.5, 1.0, 0.0, 10.0)  # M/D/1: rho tau / (2 (1 - rho))
    5.0
    """
    if rho >= 1.0:
        return math.inf
    return rho / (1.0 - rho) * (ca2 + cs2) / 2.0 * tau


def klb_wait(rho: float, ca2: float, cs2: float, tau: float) -> float:
    """Kraemer and Langenbach-Belz (ITC-8, 1976): Kingman's E[W] times a correction g.

    g = exp(-2 (1 - rho) (1 - c_a^2)^2 / (3 rho (c_a^2 + c_s^2))) when c_a^2 <= 1,
    g = exp(-(1 - rho) (c_a^2 - 1) / (c_a^2 + 4 c_s^2)) otherwise. D/D/1 (both scvs 0) never waits.

    >>> round(klb_wait(0.8, 1.0, 1.0, 1.0), 6)  # M/M/1: exact
    4.0
    """
    if rho >= 1.0:
        return math.inf
    if rho <= 0.0 or ca2 + cs2 <= 0.0:
        return 0.0
    if ca2 <= 1.0:
        g = math.exp(-2.0 * (1.0 - rho) * (1.0 - ca2) ** 2 / (3.0 * rho * (ca2 + cs2)))
    else:
        g = math.exp(-(1.0 - rho) * (ca2 - 1.0) / (ca2 + 4.0 * cs2))
    return kingman_wait(rho, ca2, cs2, tau) * g


def qna_delay_probability(rho: float, ca2: float, cs2: float) -> float:
    """QNA's probability of waiting sigma = P(W > 0), clipped to [1e-3, 0.999].

    sigma = rho + (c_a^2 - 1) rho (1 - rho) h(rho, c_a^2, c_s^2) (docs/reference/reliability-model.md §2.2); it is rho
    for Poisson arrivals, as for every M/G/1 queue.

    >>> round(qna_delay_probability(0.5, 0.0, 1.0), 3)  # D/M/1: exact 0.203
    0.2
    """
    if rho <= 0.0:
        return _SIGMA_CLIP[0]
    r = min(rho, 1.0)
    if ca2 <= 1.0:
        h = (1.0 + ca2 + r * cs2) / (1.0 + r * (cs2 - 1.0) + r * r * (4.0 * ca2 + cs2))
    else:
        h = 4.0 * r / (ca2 + r * r * (4.0 * ca2 + cs2))
    sigma = r + (ca2 - 1.0) * r * (1.0 - r) * h
    return min(max(sigma, _SIGMA_CLIP[0]), _SIGMA_CLIP[1])


def conditional_delay_scv(rho: float, cs2: float, ds3: float) -> float:
    """The scv of D = W | W > 0: 2 rho - 1 + 4 (1 - rho) d_s3 / (3 (c_s^2 + 1)^2), floored at 0.05.

    ``ds3`` is E[S^3] / E[S]^3. Exact for M/G/1 (docs/reference/reliability-model.md §2.3).

    >>> conditional_delay_scv(0.5, 1.0, 6.0)  # M/M/1: D is exponential
    1.0
    >>> round(conditional_delay_scv(0.5, 0.0, 1.0), 4)  # M/D/1: (2 rho + 1) / 3
    0.6667
    """
    value = 2.0 * rho - 1.0 + 4.0 * (1.0 - rho) * ds3 / (3.0 * (cs2 + 1.0) ** 2)
    return max(value, _CD2_FLOOR)


def departure_scv(rho: float, ca2: float, cs2: float) -> float:
    """QNA departure scv of a single server: rho^2 c_s^2 + (1 - rho^2) c_a^2.

    >>> departure_scv(0.0, 0.3, 2.0), departure_scv(1.0, 0.3, 2.0)
    (0.3, 2.0)
    """
    r2 = min(rho, 1.0) ** 2
    return r2 * cs2 + (1.0 - r2) * ca2


def thinned_scv(p: float, c2: float) -> float:
    """QNA splitting: an independent Bernoulli(p) thinning turns scv c^2 into p c^2 + 1 - p.

    >>> round(thinned_scv(1.0, 0.2), 12), thinned_scv(0.0, 0.2)
    (0.2, 1.0)
    """
    return p * c2 + 1.0 - p


def hybrid_weight(rho: float, rate_shares: Sequence[float]) -> float:
    """Albin's hybrid weight w = 1 / (1 + 4 (1 - rho)^2 (v - 1)), v = 1 / sum(pi_i^2).

    >>> hybrid_weight(0.5, [1.0]), hybrid_weight(1.0, [0.5, 0.5])
    (1.0, 1.0)
    """
    squares = sum(p * p for p in rate_shares)
    v = 1.0 / squares if squares > 0.0 else 1.0
    return 1.0 / (1.0 + 4.0 * (1.0 - min(rho, 1.0)) ** 2 * (v - 1.0))


def superposed_scv(rates: Sequence[float], scvs: Sequence[float], rho: float, rule: str) -> float:
    """The arrival scv of a merge of flows: rate-weighted ("asymptotic") or Albin's "hybrid".

    >>> superposed_scv([1.0, 3.0], [0.0, 1.0], 0.5, "asymptotic")
    0.75
    >>> round(superposed_scv([1.0, 1.0], [0.0, 0.0], 0.5, "hybrid"), 3)  # w = 1/2
    0.5
    """
    total = sum(rates)
    if total <= 0.0:
        return 1.0
    shares = [r / total for r in rates]
    weighted = sum(p * c for p, c in zip(shares, scvs, strict=True))
    if rule == "asymptotic":
        return weighted
    if rule == "hybrid":
        w = hybrid_weight(rho, shares)
        return w * weighted + 1.0 - w
    raise ValueError(f"unknown superposition rule {rule!r}; valid: asymptotic, hybrid")


@dataclass(frozen=True)
class WaitModel:
    """The waiting time W of a broker: P(W = 0) = 1 - sigma, W | W > 0 ~ gamma(mean, scv cd2).

    >>> w = WaitModel(mean=4.0, sigma=0.8, cd2=1.0)  # M/M/1, rho 0.8, tau 1
    >>> round(float(w.survival(2.0)), 4), round(0.8 * math.exp(-0.2 * 2.0), 4)
    (0.5363, 0.5363)
    """

    mean: float
    sigma: float
    cd2: float

    def survival(self, x: float | FloatArray) -> FloatArray:
        """P(W > x) for x >= 0."""
        xs = np.asarray(x, dtype=np.float64)
        if self.mean <= 0.0 or self.sigma <= 0.0:
            return np.zeros_like(xs)
        shape = 1.0 / self.cd2
        scale = self.mean / self.sigma / shape
        out: FloatArray = self.sigma * stats.gamma.sf(xs, shape, scale=scale)
        return out


def gg1_wait_model(rho: float, ca2: float, cs2: float, ds3: float, tau: float) -> WaitModel:
    """The gg1 model's W: KLB mean, QNA sigma (exactly rho when c_a^2 = 1), M/G/1 c_D^2."""
    mean = klb_wait(rho, ca2, cs2, tau)
    sigma = rho if abs(ca2 - 1.0) < 1e-12 else qna_delay_probability(rho, ca2, cs2)
    sigma = min(max(sigma, _SIGMA_CLIP[0]), _SIGMA_CLIP[1])
    return WaitModel(mean=mean, sigma=sigma, cd2=conditional_delay_scv(min(rho, 0.999), cs2, ds3))
