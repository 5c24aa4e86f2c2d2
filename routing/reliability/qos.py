"""Predicted real-time reliability R'_s of every subscriber of a SPEC §4 broker network.

Two models share one pipeline (``siftstream qos predict --model gg1|mm1``):

``mm1``, the baseline, is the algorithm of Pongthawornkamol, Nahrstedt and Wang, "Towards
Timeliness and Reliability Analysis of Distributed Content-based Publish/Subscribe Systems over
Best-effort Networks" (``seeds/pongthawornkamol-timeliness-reliability-analysis.txt``):

- filter propagation (§4.1) and per-link rates and contents (§4.2, Eq. 1-4) are the routes of
  :func:`routing.reliability.simulation.compile_routes`: every content entry k of publisher p crosses link l
  iff a subscriber downstream of l matches it, so lambda_l = sum over k of lambda_p C_p(k) times
  the reliabilities up to and including l;
- broker delay (§4.3, Eq. 5-7): mean wait q_b = lambda_b / (mu_b (mu_b - lambda_b)) and the
  broker delay is the service distribution shifted by q_b;
- content-remain time (§4.4, Eq. 8-10) and R'_s (Eq. 11): the remaining lifetime is the lifetime
  minus the sum of link and broker delays along the route. The paper propagates C_l(a, d) link
  by link; the convolutions commute, so evaluating them along each route (sharing route
  prefixes) gives the same numbers with less bookkeeping (QUEUEING-NOTES §2.5).

``gg1``, the default, keeps that pipeline and replaces the broker delay (QUEUEING-NOTES §0-2):

- burstiness (the paper's §4.5, Eq. 12-13: z_p^2 of publishers, z_b^2 of matching) is carried
  through the network with Whitt's QNA ("The Queueing Network Analyzer", BSTJ 62(9), 1983):
  departure c_d^2 = rho^2 c_s^2 + (1 - rho^2) c_a^2, thinning c^2 = p c^2 + 1 - p (by filtering,
  p = forwarded / processed, and by loss, p = r_l), superposition either rate-weighted
  ("asymptotic") or Albin's hybrid w sum(pi_i c_i^2) + 1 - w. Pairs of brokers linked both ways
  make the broker graph cyclic, so the arrival scvs are a fixed point, found by iteration.
  Which superposition rule is right depends on link jitter (QUEUEING-NOTES §3.5): jitter that is
  large against a flow's spacing makes it Poisson-like (hybrid), small jitter keeps periodic
  flows smooth (asymptotic). ``superposition="auto"`` picks per broker from the rate-weighted
  jitter ratio sd(link delay) x flow rate of its inputs;
- the mean wait E[W] by Kraemer and Langenbach-Belz (ITC-8, 1976), the probability of waiting
  sigma by QNA, the conditional delay scv c_D^2 = 2 rho - 1 + 4 (1 - rho) d_s3 / (3 (c_s^2 + 1)^2)
  (exact for M/G/1), and the waiting-time *distribution* as an atom 1 - sigma at 0 plus a gamma
  body with mean E[W] / sigma and scv c_D^2, convolved with the service distribution on a grid;
- an interval for R'_s: the range of R'_s over both superposition rules, widened by a margin for
  the regimes where two-moment methods are known to err (QUEUEING-NOTES §3.6): periodic
  publishers with near-deterministic service (low c_a^2 and c_s^2 at a loaded broker).

Both models flag brokers with rho >= 0.95; a broker with rho >= 1 makes every delivery through
it late (R'_s = 0 for subscribers that only it serves).

Distributions live on one grid of step ``h`` ms; a value x is rounded to the nearest point, so
a point i stands for [(i - 1/2) h, (i + 1/2) h), sums of rounded values stay unbiased, and mass
beyond the grid's end counts as late, never as on time.

How it scales (10^3 brokers, 10^5 subscribers in a few seconds on one core). The compile step
validates each distinct filter once, matches every distinct filter against every distinct
content entry in one :class:`routing.matching.index.MatchIndex` pass, and keeps the routes as one tree
of paths per publisher (:class:`routing.reliability.simulation.RouteTree`: for a tree overlay a node per
(publisher, broker), a leaf per (node, matching subscriber)), never a links x subscribers or
content x hop array. Since the delay to a broker depends on the publisher and the path, not on
the content, every node carries one departure distribution, worked out level by level with
batched FFTs; a subscriber's on-time probability is then one point of the convolution with its
own link, P(A + L <= lifetime) = sum over cells u of L[u] P(A <= lifetime - u), and per broker
one matrix product gives it for every (node, subscriber) pair there. Sums of non-negative delays
are causal, so reliability needs the distributions only up to the longest lifetime, and those
first points are exactly what a pass over the whole grid would give. The four queue states of
the gg1 interval share the grid, the link and service pmfs, the routes and the matching. The
p95 delays need more of the grid: each is found by a search on the mixture's cdf (details at
:func:`_p95`), within about 1e-9 of the whole convolution in probability.

:func:`predict_reference` keeps the previous implementation, hop by hop on the dense
:class:`routing.reliability.simulation.Network`, as the oracle of the parity tests (CONVENTIONS 6).

Examples
--------
>>> exp = lambda mean: {"kind": "exponential", "mean": mean}
>>> zero = {"kind": "deterministic", "value": 0}
>>> system = {
...     "brokers": [{"id": "b1", "service_ms": exp(5)}],
...     "links": [{"from": "p1", "to": "b1", "reliability": 1.0, "delay_ms": zero},
...               {"from": "b1", "to": "s1", "reliability": 0.9, "delay_ms": zero}],
...     "publishers": [{"id": "p1", "broker": "b1", "interarrival_ms": exp(10),
...                     "content": [{"p": 1.0, "lifetime_ms": 20, "attributes": {"t": 1}}]}],
...     "subscribers": [{"id": "s1", "broker": "b1", "filter": "t = 1"}]}
>>> out = predict(system)
>>> s1 = out.subscribers["s1"]  # M/M/1, rho 0.5: T ~ Exp(1/10 per ms), R = 0.9 (1 - e^-2)
>>> round(s1.reliability, 3), round(0.9 * (1 - math.exp(-2)), 3), round(out.brokers["b1"].mean_wait_ms, 3)
(0.778, 0.778, 5.0)
"""

from __future__ import annotations

import contextlib
import functools
import gc
import math
import mmap
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, overload

import numpy as np
import scipy.fft as sfft
from numpy.typing import NDArray
from scipy import special, stats

from routing.reliability.system import (
    Matcher,
    Matching,
    Network,
    Overlay,
    RouteTree,
    compile_routes,
    compile_system,
    match_content,
    validate_system,
)
from routing.stats.distributions import Distribution, Exponential, Lognormal

__all__ = [
    "MODELS",
    "SUPERPOSITION_RULES",
    "BrokerPrediction",
    "CompiledSystem",
    "Contributor",
    "FilterMatcher",
    "Grid",
    "Prediction",
    "SubscriberPrediction",
    "WaitModel",
    "compile_prediction",
    "conditional_delay_scv",
    "departure_scv",
    "filter_matcher",
    "gg1_wait_model",
    "hybrid_weight",
    "kingman_wait",
    "klb_wait",
    "mm1_wait",
    "predict",
    "predict_reference",
    "predict_reliability",
    "qna_delay_probability",
    "superposed_scv",
    "thinned_scv",
    "to_spec_output",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
Model = Literal["gg1", "mm1"]
Rule = Literal["auto", "asymptotic", "hybrid"]

MODELS: tuple[str, ...] = ("gg1", "mm1")
SUPERPOSITION_RULES: tuple[str, ...] = ("auto", "asymptotic", "hybrid")

RHO_WARNING = 0.95  # QUEUEING-NOTES §3.6: at or above, every formula is unreliable
_SIGMA_CLIP = (1e-3, 0.999)  # QUEUEING-NOTES §7
_CD2_FLOOR = 0.05  # QUEUEING-NOTES §7
_LOW_VARIABILITY_SCV = 0.5  # both c_a^2 and c_s^2 below: two-moment methods degrade (§3.1, §3.6)
_LOW_VARIABILITY_RHO = 0.3  # ... at a broker loaded at least this much
_BASE_MARGIN = 0.01  # interval half-width added to the rule bracket, everywhere
_LOW_VARIABILITY_MARGIN = 0.05  # ... and where the path crosses a low-variability broker
_JITTER_THRESHOLD = 0.25  # "auto": above, link jitter makes the inputs Poisson-like (hybrid rule)
_SOURCE_BLEND = 0.5  # how far toward the publishers' view the arrival scv moves with periodic publishers
_PREDICATE_TESTS_PER_FILTER = 300  # match_many: predicate tests per filter below which no index is built
_FIXED_POINT_ITERATIONS = 500
_FIXED_POINT_TOLERANCE = 1e-10


# --------------------------------------------------------------------------------------------
# Single-queue formulas (QUEUEING-NOTES §2); rho = lambda tau, scvs are squared cvs
# --------------------------------------------------------------------------------------------


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

    sigma = rho + (c_a^2 - 1) rho (1 - rho) h(rho, c_a^2, c_s^2) (QUEUEING-NOTES §2.2); it is rho
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

    ``ds3`` is E[S^3] / E[S]^3. Exact for M/G/1 (QUEUEING-NOTES §2.3).

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


# --------------------------------------------------------------------------------------------
# The grid
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Contributor:
    """A broker or link on a subscriber's routes and its share of the deadline-miss probability."""

    element: str
    utilisation: float | None
    delay_ms: float
    share: float


@dataclass(frozen=True)
class SubscriberPrediction:
    """R'_s and its interval; delays are over delivered events (late ones included), None when
    the subscriber matches nothing or its p95 lies beyond the grid."""

    reliability: float | None
    reliability_low: float | None
    reliability_high: float | None
    mean_delay_ms: float | None
    p95_delay_ms: float | None
    matching_rate_per_s: float
    contributors: Sequence[Contributor] = ()  # largest share first; worked out on first use


@dataclass(frozen=True)
class BrokerPrediction:
    """A broker's load and waiting time under the model; ``ca2`` is the arrival scv used."""

    arrival_rate_per_s: float
    rho: float
    mean_wait_ms: float
    mean_service_ms: float
    ca2: float
    cs2: float
    delay_probability: float
    superposition: str


@dataclass(frozen=True)
class Prediction:
    model: str
    subscribers: dict[str, SubscriberPrediction]
    brokers: dict[str, BrokerPrediction]
    warnings: tuple[str, ...] = field(default=())


def _json(x: float | None, digits: int = 6) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return round(x, digits)


def to_spec_output(prediction: Prediction) -> dict[str, Any]:
    """The SPEC §4 output document."""
    subscribers = {
        sid: {
            "reliability": _json(s.reliability),
            "reliability_low": _json(s.reliability_low),
            "reliability_high": _json(s.reliability_high),
            "mean_delay_ms": _json(s.mean_delay_ms, 3),
            "p95_delay_ms": _json(s.p95_delay_ms, 3),
        }
        for sid, s in prediction.subscribers.items()
    }
    brokers = {
        bid: {
            "arrival_rate_per_s": _json(b.arrival_rate_per_s),
            "rho": _json(b.rho),
            "mean_wait_ms": _json(b.mean_wait_ms, 3),
        }
        for bid, b in prediction.brokers.items()
    }
    return {
        "model": prediction.model,
        "subscribers": subscribers,
        "brokers": brokers,
        "warnings": list(prediction.warnings),
    }


# --------------------------------------------------------------------------------------------
# The filter semantics
# --------------------------------------------------------------------------------------------


class FilterMatcher:
    """SPEC §1 filter semantics through :mod:`routing.matching.language`, each filter parsed once.

    Calling it matches one filter against one event; :meth:`match_many` matches many filters
    against many events at once (what :func:`routing.reliability.simulation.match_content` uses). An event
    without attributes matches every filter: that is how a filter is validated
    (``matcher(text, {})`` raises for a bad one).

    >>> m = FilterMatcher()
    >>> m("t = 1 and x <= 3", {"t": 1, "x": 2}), m("t = 1", {"t": 2})
    (True, False)
    >>> m.match_many(["t = 1", "t >= 1"], [{"t": 1}, {"t": 2}, {}]).tolist()
    [[True, True], [False, True], [True, True]]
    >>> try:
    ...     m("t = = 1", {})
    ... except ValueError as exc:
    ...     print(type(exc).__name__)
    FilterError
    """

    def __init__(self) -> None:
        self._parsed: dict[str, Any] = {}

    def _filter(self, text: str) -> Any:
        f = self._parsed.get(text)
        if f is None:
            from routing.matching.language import parse_filter

            f = self._parsed[text] = parse_filter(text)
        return f

    def __call__(self, text: str, attributes: Mapping[str, object]) -> bool:
        f = self._filter(text)  # first: a filter that does not parse raises, whatever the event
        return bool(f.matches(attributes)) if attributes else True

    def match_many(self, texts: Sequence[str], events: Sequence[Mapping[str, object]]) -> NDArray[np.bool_]:
        """``out[e, f]``: ``self(texts[f], events[e])`` for every pair.

        A filter is a conjunction of predicates, and filters share predicates: while the
        distinct predicates are few, each is tested once per event and every filter ANDs its
        columns; otherwise one :class:`routing.matching.index.MatchIndex` pass."""
        out = np.zeros((len(events), len(texts)), dtype=np.bool_)
        if not texts or not events:
            return out
        filters = [self._filter(text) for text in texts]
        column: dict[Any, int] = {}
        used = [[column.setdefault(p, len(column)) for p in f.predicates] for f in filters]
        if len(column) * len(events) <= _PREDICATE_TESTS_PER_FILTER * len(texts):
            predicates = list(column)
            missing = object()
            tests = np.array(
                [
                    [(v := event.get(p.attribute, missing)) is not missing and p.matches(True, v) for p in predicates]
                    for event in events
                ],
                dtype=np.bool_,
            ).reshape(len(events), len(predicates))
            sizes = np.array([len(u) for u in used])
            flat = np.array([j for u in used for j in u], dtype=np.int64)
            out = np.logical_and.reduceat(tests[:, flat], np.cumsum(sizes) - sizes, axis=1)
        else:
            from routing.matching.index import EventBatch, MatchIndex

            index = MatchIndex()
            for f, filt in enumerate(filters):
                index.add(str(f), filt)
            offsets, ids = index.match(EventBatch.from_events(events)).flat_ids()
            out[np.repeat(np.arange(len(events)), np.diff(offsets)), ids.astype(np.int64)] = True
        out[[e for e, attributes in enumerate(events) if not attributes]] = True
        return out


def filter_matcher() -> FilterMatcher:
    """SPEC §1 semantics through :mod:`routing.matching.language` (a :class:`FilterMatcher`)."""
    return FilterMatcher()


# --------------------------------------------------------------------------------------------
# The network pass on the route tree (QUEUEING-NOTES §2.5-2.6)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _Paths:
    """Rates and reach of a compiled system (per ms), independent of the queueing model.

    Nodes and leaves are those of the :class:`RouteTree`. A (leaf, group) pair ``lg`` is a leaf
    with one group g = (publisher, lifetime) of the content its subscriber matches, and its
    rate: the sum of lambda_p p_k over those content keys."""

    key_rate: FloatArray  # per content key: lambda_p p_k
    node_reach: FloatArray  # P(an event of the node's publisher arrives at the node's broker)
    node_rate: FloatArray  # rate of the content keys that cross the node's link
    leaf_link: IntArray
    leaf_reach: FloatArray  # node reach times the subscriber link's reliability
    leaf_rate: FloatArray  # rate of the node publisher's content that the subscriber matches
    lg_leaf: IntArray
    lg_group: IntArray
    lg_rate: FloatArray
    group_lifetime: FloatArray
    matching_rate: FloatArray  # per subscriber: rate of all matching content
    link_sent: FloatArray
    link_arrived: FloatArray
    broker_rate: FloatArray
    depth_start: IntArray  # nodes[depth_start[d]:depth_start[d + 1]] have depth d
    link_mean: FloatArray  # per link, E[D_l] and Var[D_l]
    link_var: FloatArray
    service_mean: FloatArray  # per broker, E[S_b] and Var[S_b]
    service_var: FloatArray
    single_path: bool  # at most one node per (publisher, broker): every (subscriber, group) has one leaf


def _moments(dists: Sequence[Distribution]) -> tuple[FloatArray, FloatArray]:
    """Mean and variance of each distribution, worked out once per distinct object (equal
    DISTs share one: the parse is memoised)."""
    ids = np.fromiter(map(id, dists), dtype=np.int64, count=len(dists))
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    mean = np.array([dists[i].mean for i in first.tolist()])
    var = np.array([dists[i].variance for i in first.tolist()])
    inverse = inverse.reshape(-1)
    out: tuple[FloatArray, FloatArray] = (mean[inverse], var[inverse])
    return out


def _paths(ov: Overlay, matching: Matching, tree: RouteTree) -> _Paths:
    n_keys, n_links, n_nodes = len(ov.content_p), len(ov.link_from), len(tree.node_link)
    pub_rate = np.array([1.0 / d.mean if d.mean > 0 else math.inf for d in ov.interarrival])
    key_rate = pub_rate[ov.content_publisher] * ov.content_p if n_keys else np.zeros(0)
    r = ov.link_reliability
    depth_start = np.searchsorted(tree.node_depth, np.arange(int(tree.node_depth.max(initial=-1)) + 2))
    reach = np.empty(n_nodes)
    sent = np.ones(n_nodes)
    for d in range(len(depth_start) - 1):
        idx = np.arange(depth_start[d], depth_start[d + 1])
        up = tree.node_parent[idx]
        sent[idx] = np.where(up >= 0, reach[np.maximum(up, 0)], 1.0)
        reach[idx] = sent[idx] * r[tree.node_link[idx]]
    sizes = np.diff(tree.node_key_offset)
    node_rate = np.bincount(np.repeat(np.arange(n_nodes), sizes), weights=key_rate[tree.node_key], minlength=n_nodes)

    # Groups of content keys with one publisher and one lifetime; per distinct filter, the rate
    # of each group's content it matches.
    pairs = np.stack([ov.content_publisher, ov.content_lifetime_ms.view(np.int64)], axis=1) if n_keys else None
    if pairs is not None:
        uniq, group_of_key = np.unique(pairs, axis=0, return_inverse=True)
        group_of_key = group_of_key.reshape(-1)
        group_publisher, group_lifetime = uniq[:, 0], uniq[:, 1].copy().view(np.float64)
    else:
        group_of_key = np.zeros(0, dtype=np.int64)
        group_publisher, group_lifetime = np.zeros(0, dtype=np.int64), np.zeros(0)
    n_groups = len(group_publisher)
    by_group = np.zeros((n_keys, n_groups))
    by_group[np.arange(n_keys), group_of_key] = key_rate
    filter_group = matching.table[matching.key_class].T.astype(np.float64) @ by_group  # (filters, groups)
    matching_rate = filter_group.sum(axis=1)[matching.filter_class] if n_groups else np.zeros(len(ov.subscriber_ids))

    leaf_pub = tree.node_publisher[tree.leaf_node]
    group_start = np.searchsorted(group_publisher, np.arange(len(ov.publisher_ids) + 1))
    n_per = (group_start[1:] - group_start[:-1])[leaf_pub]
    lg_leaf = np.repeat(np.arange(len(leaf_pub)), n_per)
    offsets = (np.cumsum(n_per) - n_per).astype(np.int64)
    lg_group = np.arange(int(n_per.sum())) - np.repeat(offsets, n_per) + np.repeat(group_start[:-1][leaf_pub], n_per)
    lg_group = lg_group.astype(np.int64)
    lg_rate = (
        filter_group[matching.filter_class[tree.leaf_subscriber[lg_leaf]], lg_group] if len(lg_leaf) else np.zeros(0)
    )
    keep = lg_rate > 0.0
    lg_leaf, lg_group, lg_rate = lg_leaf[keep], lg_group[keep], lg_rate[keep]
    leaf_rate = np.bincount(lg_leaf, weights=lg_rate, minlength=len(leaf_pub))
    leaf_link = ov.subscriber_link[tree.leaf_subscriber]
    leaf_reach = reach[tree.leaf_node] * r[leaf_link]

    link_sent = np.bincount(tree.node_link, weights=node_rate * sent, minlength=n_links)
    link_sent += np.bincount(leaf_link, weights=leaf_rate * reach[tree.leaf_node], minlength=n_links)
    link_arrived = np.bincount(tree.node_link, weights=node_rate * reach, minlength=n_links)
    link_arrived += np.bincount(leaf_link, weights=leaf_rate * leaf_reach, minlength=n_links)
    to_broker = ov.link_broker >= 0
    broker_rate = np.bincount(ov.link_broker[to_broker], weights=link_arrived[to_broker], minlength=len(ov.broker_ids))
    link_mean, link_var = _moments(ov.link_delay)
    return _Paths(
        key_rate=key_rate,
        node_reach=reach,
        node_rate=node_rate.astype(np.float64),
        leaf_link=leaf_link.astype(np.int64),
        leaf_reach=leaf_reach,
        leaf_rate=leaf_rate.astype(np.float64),
        lg_leaf=lg_leaf.astype(np.int64),
        lg_group=lg_group,
        lg_rate=lg_rate,
        group_lifetime=group_lifetime,
        matching_rate=matching_rate,
        link_sent=link_sent.astype(np.float64),
        link_arrived=link_arrived.astype(np.float64),
        broker_rate=broker_rate.astype(np.float64),
        depth_start=depth_start.astype(np.int64),
        link_mean=link_mean,
        link_var=link_var,
        service_mean=np.array([d.mean for d in ov.service]),
        service_var=np.array([d.variance for d in ov.service]),
        single_path=len(np.unique(tree.node_publisher * len(ov.broker_ids) + tree.node_broker)) == n_nodes,
    )


def _arrival_scvs(
    ov: Overlay, paths: _Paths, rho: FloatArray, cs2: FloatArray, hybrid: NDArray[np.bool_], thinning: bool = True
) -> FloatArray:
    """Per broker, the QNA arrival scv: the fixed point of departure, thinning, superposition
    (vectorised over the links into brokers; :func:`_ref_arrival_scvs` is the per-broker loop).

    ``thinning=False`` keeps a flow's scv through filtering and loss: the smooth end of the
    interval, for superposed periodic flows whose effective variability is well below their
    renewal scv (QUEUEING-NOTES §3.4)."""
    n_b = len(ov.broker_ids)
    e = np.flatnonzero((ov.link_broker >= 0) & (paths.link_arrived > 0.0))
    dst, src, r = ov.link_broker[e], ov.link_source_broker[e], ov.link_reliability[e]
    rate = paths.link_arrived[e]
    from_pub = src < 0
    publisher_of_link = np.full(len(ov.link_from), -1, dtype=np.int64)
    publisher_of_link[ov.publisher_link] = np.arange(len(ov.publisher_ids))
    pub_scv = np.array([d.scv for d in ov.interarrival] or [1.0])
    c2_pub = pub_scv[publisher_of_link[e[from_pub]]]
    if thinning:
        c2_pub = r[from_pub] * c2_pub + 1.0 - r[from_pub]
    src_b = np.maximum(src[~from_pub], 0)
    upstream = paths.broker_rate[src_b]
    forward = np.where(upstream > 0.0, paths.link_sent[e[~from_pub]] / np.where(upstream > 0.0, upstream, 1.0), 0.0)
    keep = np.minimum(forward, 1.0) * r[~from_pub]
    total = np.bincount(dst, weights=rate, minlength=n_b)
    share = rate / total[dst]
    squares = np.bincount(dst, weights=share * share, minlength=n_b)
    v = np.where(squares > 0.0, 1.0 / np.where(squares > 0.0, squares, 1.0), 1.0)
    w = 1.0 / (1.0 + 4.0 * (1.0 - np.minimum(rho, 1.0)) ** 2 * (v - 1.0))
    fed = total > 0.0
    r2 = np.minimum(rho, 1.0) ** 2
    c2 = np.empty(len(e))
    c2[from_pub] = c2_pub
    ca2 = np.ones(n_b)
    for _ in range(_FIXED_POINT_ITERATIONS):
        dep = r2 * cs2 + (1.0 - r2) * ca2
        c2[~from_pub] = keep * dep[src_b] + 1.0 - keep if thinning else dep[src_b]
        weighted = np.bincount(dst, weights=share * c2, minlength=n_b)
        new = np.where(fed, np.where(hybrid, w * weighted + 1.0 - w, weighted), 1.0)
        done = float(np.max(np.abs(new - ca2))) < _FIXED_POINT_TOLERANCE if n_b else True
        ca2 = new
        if done:
            break
    return ca2


def _publisher_arrivals(ov: Overlay, tree: RouteTree, paths: _Paths) -> FloatArray:
    """``arrivals[b, p]``: the rate at which publisher p's events reach broker b."""
    arrivals = np.zeros((len(ov.broker_ids), len(ov.publisher_ids)))
    np.add.at(arrivals, (tree.node_broker, tree.node_publisher), paths.node_rate * paths.node_reach)
    return arrivals


def _source_scv(arrivals: FloatArray, pub_scv: FloatArray) -> FloatArray:
    """Per broker, the rate-weighted inter-publication scv of the publishers whose events it
    processes (1 where nothing arrives)."""
    total = arrivals.sum(axis=1)
    fed = total > 0.0
    out: FloatArray = np.where(fed, (arrivals * pub_scv).sum(axis=1) / np.where(fed, total, 1.0), 1.0)
    return out


def _source_view(
    arrivals: FloatArray, pub_rate: FloatArray, pub_scv: FloatArray, rho: FloatArray, hybrid: NDArray[np.bool_]
) -> FloatArray:
    """The publishers' view of each broker's arrival scv.

    ``arrivals[b, p]`` is the rate at which publisher p's events reach broker b. Each publisher's
    stream reaches b thinned at random by content and loss (q = arrivals / rate, scv
    q c_p^2 + 1 - q, exact for i.i.d. content); the streams are superposed by b's rule (1 where
    nothing arrives).
    """
    n_b = arrivals.shape[0]
    total = arrivals.sum(axis=1)
    fed = total > 0.0
    q = np.where(pub_rate > 0.0, arrivals / np.where(pub_rate > 0.0, pub_rate, 1.0), 0.0)
    c2 = q * pub_scv + 1.0 - q
    share = arrivals / np.where(fed, total, 1.0)[:, None]
    weighted = (share * c2).sum(axis=1)
    squares = (share * share).sum(axis=1)
    v = np.where(squares > 0.0, 1.0 / np.where(squares > 0.0, squares, 1.0), 1.0)
    w = 1.0 / (1.0 + 4.0 * (1.0 - np.minimum(rho, 1.0)) ** 2 * (v - 1.0))
    view: FloatArray = np.where(fed, np.where(hybrid[:n_b], w * weighted + 1.0 - w, weighted), 1.0)
    return view


def _blend_sources(
    ca2: FloatArray,
    arrivals: FloatArray,
    interarrival: Sequence[Distribution],
    rho: FloatArray,
    hybrid: NDArray[np.bool_],
) -> FloatArray:
    """QNA's arrival scv moved toward the publishers' view when that is smoother.

    QNA treats forwarding as random thinning of a broker's whole departure stream; but content
    decides forwarding, so for a superposition of periodic publishers it splits off whole
    publishers' streams, which are far smoother than thinned aggregates: QNA then overstates the
    arrival variability (QUEUEING-NOTES §3.4: the effective c_a^2 of superposed periodic streams
    is about half of the hybrid rule's). The publishers' view ignores the jitter that upstream
    queues add, so it understates it. The scv used lies between the two: the midpoint when the
    publishers are periodic (scv 0), QNA's value for Poisson publishers (scv 1), linear between.
    On the paper's tree (seeds 1-2, 6,000 s; the benchmark uses other seeds) this halves the
    error with periodic publishers (deterministic/uniform: MAE 0.054 -> 0.030) and leaves the
    Poisson cases as they were.
    """
    pub_rate = np.array([1.0 / d.mean if d.mean > 0 else 0.0 for d in interarrival])
    pub_scv = np.array([d.scv for d in interarrival])
    view = _source_view(arrivals, pub_rate, pub_scv, rho, hybrid)
    weight = _SOURCE_BLEND * np.clip(1.0 - _source_scv(arrivals, pub_scv), 0.0, 1.0)
    out: FloatArray = np.where(view < ca2, ca2 - weight * (ca2 - view), ca2)
    return out


def _auto_rules(ov: Overlay, paths: _Paths) -> NDArray[np.bool_]:
    """Per broker: hybrid when link jitter is large against its input flows' spacing."""
    n_b = len(ov.broker_ids)
    e = np.flatnonzero((ov.link_broker >= 0) & (paths.link_arrived > 0.0))
    dst, rate = ov.link_broker[e], paths.link_arrived[e]
    sd = np.sqrt(paths.link_var[e])
    total = np.bincount(dst, weights=rate, minlength=n_b)
    ratio = np.bincount(dst, weights=rate / total[dst] * sd * rate, minlength=n_b) if len(e) else np.zeros(n_b)
    out: NDArray[np.bool_] = (total > 0.0) & (ratio >= _JITTER_THRESHOLD)
    return out


@dataclass(frozen=True, eq=False)
class _Queues:
    """The brokers under one model and superposition rule set."""

    ca2: FloatArray
    waits: list[WaitModel]

    @property
    def mean_wait(self) -> FloatArray:
        return np.array([w.mean for w in self.waits])


def _queues(
    ov: Overlay,
    paths: _Paths,
    model: str,
    hybrid: NDArray[np.bool_] | None,
    thinning: bool = True,
    arrivals: FloatArray | None = None,
) -> _Queues:
    """The brokers' waits; with ``arrivals`` (:func:`_publisher_arrivals`) and thinning, QNA's
    arrival scvs are blended with the publishers' view (:func:`_blend_sources`)."""
    tau = np.array([d.mean for d in ov.service])
    cs2 = np.array([d.scv if d.mean > 0 else 0.0 for d in ov.service])
    ds3 = np.array([d.third_moment / d.mean**3 if d.mean > 0 else 1.0 for d in ov.service])
    rho = paths.broker_rate * tau
    n_b = len(ov.broker_ids)
    if model == "mm1" or hybrid is None:
        return _Queues(np.ones(n_b), [WaitModel(mm1_wait(rho[b], tau[b]), min(rho[b], 1.0), 1.0) for b in range(n_b)])
    ca2 = _arrival_scvs(ov, paths, rho, cs2, hybrid, thinning)
    if thinning and arrivals is not None:
        ca2 = _blend_sources(ca2, arrivals, ov.interarrival, rho, hybrid)
    return _Queues(ca2, [gg1_wait_model(rho[b], ca2[b], cs2[b], ds3[b], tau[b]) for b in range(n_b)])


def _wait_variance(waits: Sequence[WaitModel]) -> FloatArray:
    return np.array(
        [
            (w.mean**2) * ((w.cd2 + 1.0 - w.sigma) / w.sigma) if w.sigma > 0 and math.isfinite(w.mean) else 0.0
            for w in waits
        ]
    )


def _node_means(ov: Overlay, tree: RouteTree, paths: _Paths, wait_mean: FloatArray, finite_only: bool) -> FloatArray:
    """Per node, E[arrival delay at its broker] (waits that are not finite count as 0 when
    ``finite_only``, as the grid's sizing does)."""
    link_mean, service_mean = paths.link_mean, paths.service_mean
    w = np.where(np.isfinite(wait_mean), wait_mean, 0.0) if finite_only else wait_mean
    out = np.empty(len(tree.node_link))
    for d in range(len(paths.depth_start) - 1):
        idx = np.arange(paths.depth_start[d], paths.depth_start[d + 1])
        up = tree.node_parent[idx]
        if d == 0:
            out[idx] = link_mean[tree.node_link[idx]]
        else:
            b = tree.node_broker[up]
            out[idx] = out[up] + w[b] + service_mean[b] + link_mean[tree.node_link[idx]]
    return out


def _spans(
    ov: Overlay, tree: RouteTree, paths: _Paths, wait_mean: FloatArray, wait_var: FloatArray, k: float = 6.0
) -> tuple[FloatArray, FloatArray]:
    """Mean + k sd of the delay to each node's broker and to each leaf's subscriber (waits that
    are not finite count as 0)."""
    link_var, service_var = paths.link_var, paths.service_var
    w_v = np.where(np.isfinite(wait_var), wait_var, 0.0)
    mean = _node_means(ov, tree, paths, wait_mean, finite_only=True)
    var = np.empty(len(tree.node_link))
    for d in range(len(paths.depth_start) - 1):
        idx = np.arange(paths.depth_start[d], paths.depth_start[d + 1])
        up = tree.node_parent[idx]
        var[idx] = link_var[tree.node_link[idx]]
        if d > 0:
            b = tree.node_broker[up]
            var[idx] += var[up] + w_v[b] + service_var[b]
    b = tree.node_broker[tree.leaf_node]
    w_m = np.where(np.isfinite(wait_mean), wait_mean, 0.0)
    leaf_mean = mean[tree.leaf_node] + w_m[b] + paths.service_mean[b] + paths.link_mean[paths.leaf_link]
    leaf_var = var[tree.leaf_node] + w_v[b] + service_var[b] + link_var[paths.leaf_link]
    return mean + k * np.sqrt(var), leaf_mean + k * np.sqrt(leaf_var)


def _grid(
    ov: Overlay, tree: RouteTree, paths: _Paths, wait_mean: FloatArray, wait_var: FloatArray, points: int
) -> Grid:
    """Cover every lifetime and the bulk (mean + 6 sd) of every route's delay."""
    node_span, leaf_span = _spans(ov, tree, paths, wait_mean, wait_var)
    life = float(ov.content_lifetime_ms.max()) if len(ov.content_lifetime_ms) else 1.0
    spans = np.concatenate((node_span, leaf_span))
    bulk = float(np.max(spans)) if len(spans) else life
    horizon = max(1.25 * life, min(bulk, 20.0 * life), 1e-6)
    return Grid(step=horizon / points, n=points)


def _p95_lengths(ov: Overlay, tree: RouteTree, paths: _Paths, grid: Grid, rho: FloatArray, q: _Queues) -> IntArray:
    """A first guess of how many grid points the p95 search reads per broker: the largest
    mean + 2.5 sd (``_P95_GUESS_SD``) of the delays to the subscribers there, plus 4 cells for
    the grid's rounding (a quantile of a mixture is at most the largest of its parts', and
    delays' 95% points lie below mean + 2.5 sd but for very skewed ones; :func:`_p95` checks,
    and the brokers where it falls short are done again on the whole grid). The whole grid
    where a path crosses a broker with rho >= 1, whose deliveries never arrive in the model."""
    n_b = len(ov.broker_ids)
    _, leaf_span = _spans(ov, tree, paths, q.mean_wait, _wait_variance(q.waits), _P95_GUESS_SD)
    dead = rho[tree.node_broker] >= 1.0
    for d in range(1, len(paths.depth_start) - 1):
        idx = np.arange(paths.depth_start[d], paths.depth_start[d + 1])
        dead[idx] |= dead[tree.node_parent[idx]]
    need = np.zeros(n_b)
    np.maximum.at(need, tree.node_broker[tree.leaf_node], leaf_span)
    out: IntArray = np.minimum(np.ceil(need / grid.step) + 4, grid.n).astype(np.int64)
    out[np.unique(tree.node_broker[dead])] = grid.n
    return out


def _node_lengths(tree: RouteTree, paths: _Paths, broker_len: IntArray) -> IntArray:
    """Per node, the points its departure pmf needs: its broker's, or more for its children."""
    out = broker_len[tree.node_broker].copy()
    for d in range(len(paths.depth_start) - 2, 0, -1):  # children first
        idx = np.arange(paths.depth_start[d], paths.depth_start[d + 1])
        np.maximum.at(out, tree.node_parent[idx], out[idx])
    return out


class _CdfTable:
    """The cdfs of many distributions, evaluated row by row: one vectorised expression per kind
    with a closed form (the distribution's own arithmetic, to rounding), the distribution's
    ``cdf`` otherwise.

    >>> from routing.stats.distributions import Gamma
    >>> dists = [Lognormal(10.0, 0.5), Exponential(3.0), Gamma(4.0, 0.7)]
    >>> x = np.linspace(0.0, 30.0, 7)
    >>> bool(np.allclose(_CdfTable(dists).rows(np.arange(3), x), [d.cdf(x) for d in dists], rtol=1e-13, atol=1e-15))
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
    """``dists[i].cdf(x)`` for every i, as rows (see :class:`_CdfTable`)."""
    return _CdfTable(dists).rows(np.arange(len(dists)), x)


def _pmf_rows(grid: Grid, dists: Sequence[Distribution]) -> FloatArray:
    """:meth:`Grid.pmf` of each distribution, as rows."""
    edges = (np.arange(grid.n + 1, dtype=np.float64) - 0.5) * grid.step
    c = _cdf_rows(dists, np.maximum(edges, 0.0))
    c[:, 0] = 0.0
    out: FloatArray = np.maximum(np.diff(c, axis=1), 0.0)
    return out


def _zeros(shape: int | tuple[int, ...], dtype: type[Any] = np.float64) -> NDArray[Any]:
    """``np.zeros(shape, dtype)``; from 4 MiB on, in an anonymous memory mapping of its own,
    faulted in by the kernel in one go (``MAP_POPULATE``, where the platform has it): the large
    tables of a prediction (up to a few hundred MB) are written whole, and on the virtual
    machines this was measured on, one fault per 4 KiB page cost about twice the system time
    of the populated mapping (0.2 s against 0.1 s for 160 MB). Transparent huge pages are kept
    out (see :func:`_allocation_settings`). The mapping goes with the array."""
    n = math.prod(shape) if isinstance(shape, tuple) else shape
    size = n * np.dtype(dtype).itemsize
    if size < 1 << 22:
        return np.zeros(shape, dtype)
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)
    out: NDArray[Any] = np.frombuffer(mmap.mmap(-1, size, flags=flags), dtype=dtype, count=n).reshape(shape)
    return out


_BATCH_VALUES = 1 << 18  # values (2 MiB of float64) per batched FFT: see _batch_rows
_CDF_CHUNK = 1 << 15  # values per block of _CdfTable.rows
_P95_LEVEL = 0.95
_P95_GUESS_SD = 2.5  # the p95 pass first covers mean + this many sd of every delay (then checks)
_P95_DENSE_SURVIVAL = 1e-8  # p95: a subscriber link's pmf is kept cell by cell down to this survival...
_P95_BLOCK_GROWTH = 1.25  # then in blocks this much longer each
_P95_TAIL_SURVIVAL = 1e-10  # down to this survival (the rest is dropped)
_P95_BATCH_ROWS = 4096  # subscribers searched together
_P95_SHARED_ATOMS = 20_000_000  # one atom layout for all subscriber links while the table stays this small
_P95_LINK_LEVEL = 0.999  # the search's upper bound: where every link has this much of its mass
_P95_COARSE = 16  # the search first reads each subscriber's departure mixture at every 16th cell
_P95_CHUNK = 128  # subscribers of a broker whose brackets start within this many cells share one window


@dataclass(frozen=True, eq=False)
class _BrokerGroup:
    """The leaves at one broker: its nodes and subscribers, and each leaf's position in both."""

    leaves: IntArray
    nodes: IntArray
    node_pos: IntArray
    subs: IntArray
    sub_pos: IntArray


def _batch_rows(fft: int) -> int:
    """Rows per batched FFT of length ``fft``: about ``_BATCH_VALUES`` values, 16 to 512 rows.
    A batch's buffers then stay in the CPU's caches between the steps that read and write them
    (gather, rfft, product, irfft, truncation): on the 1000-broker benchmark the p95 pass's
    departure table (FFTs of ~5,000 points) took 0.56 s in batches of 64 rows against 0.69 s in
    batches of 256, while the short FFTs of the reliability pass want a few hundred rows."""
    return max(16, min(512, _BATCH_VALUES // max(fft, 1)))


def _broker_groups(ov: Overlay, tree: RouteTree) -> list[_BrokerGroup]:
    """The leaves grouped by broker (brokers in order, a broker's leaves by subscriber): every
    array is worked out once for all leaves, and a group holds slices of them."""
    n_b = len(ov.broker_ids)
    home = ov.link_source_broker[ov.subscriber_link]
    sub_order = np.argsort(home, kind="stable")
    sub_start = np.searchsorted(home[sub_order], np.arange(n_b + 1))
    sub_local = np.empty(len(home), dtype=np.int64)
    sub_local[sub_order] = np.arange(len(home)) - sub_start[home[sub_order]]
    node_order = np.argsort(tree.node_broker, kind="stable").astype(np.int64)
    node_start = np.searchsorted(tree.node_broker[node_order], np.arange(n_b + 1))
    node_local = np.empty(len(node_order), dtype=np.int64)
    node_local[node_order] = np.arange(len(node_order)) - node_start[tree.node_broker[node_order]]
    leaf_broker = tree.node_broker[tree.leaf_node]
    # By broker, then subscriber: one stable sort of a combined key (as np.lexsort of the two
    # keys, at a fifth of its cost).
    order = np.argsort(leaf_broker * max(len(home), 1) + tree.leaf_subscriber, kind="stable").astype(np.int64)
    node_pos = node_local[tree.leaf_node[order]]
    sub_pos = sub_local[tree.leaf_subscriber[order]]
    sub_order = sub_order.astype(np.int64)
    if not len(order):
        return []
    bounds = np.flatnonzero(np.diff(leaf_broker[order])) + 1
    starts, ends = np.append(0, bounds).tolist(), np.append(bounds, len(order)).tolist()
    out: list[_BrokerGroup] = []
    for lo, hi, b in zip(starts, ends, leaf_broker[order[starts]].tolist(), strict=True):
        out.append(
            _BrokerGroup(
                leaves=order[lo:hi],
                nodes=node_order[node_start[b] : node_start[b + 1]],
                node_pos=node_pos[lo:hi],
                subs=sub_order[sub_start[b] : sub_start[b + 1]],
                sub_pos=sub_pos[lo:hi],
            )
        )
    return out


class _Evaluator:
    """The delay distributions of one compiled system on one grid, truncated to the first ``m``
    points: for causal sums of non-negative delays the first m points of every pmf depend on
    the first m points of its inputs only, so a pass over m points is exact there (reliability
    needs the points up to the longest lifetime only). Inputs shared by every queue state
    (link and service pmfs, the subscriber links) are computed once."""

    def __init__(self, ov: Overlay, tree: RouteTree, paths: _Paths, grid: Grid) -> None:
        self.ov, self.tree, self.paths, self.grid = ov, tree, paths, grid
        self._links: dict[int, tuple[IntArray, FloatArray]] = {}
        self._services: dict[int, tuple[IntArray, FloatArray]] = {}
        self._waits: dict[tuple[int, float, float, float], FloatArray] = {}
        self._leaf_link_pmf: dict[int, tuple[IntArray, FloatArray]] = {}
        self._link_table: _CdfTable | None = None
        self._link_cdf: _LinkCdf | None = None
        self._link_row: tuple[IntArray, IntArray, _CdfTable] | None = None
        self.subscriber_link_row = np.zeros(0, dtype=np.int64)
        self.groups = _broker_groups(ov, tree)

    def sub(self, m: int) -> Grid:
        return Grid(self.grid.step, m)

    def link_pmfs(self, m: int) -> tuple[IntArray, FloatArray]:
        """Per link into a broker that some node uses: its row, and the pmf rows on m points."""
        if m not in self._links:
            row, _, table = self._link_rows()
            self._links[m] = (row, _pmf_rows(self.sub(m), table.dists))
        return self._links[m]

    def _link_rows(self) -> tuple[IntArray, IntArray, _CdfTable]:
        """Per link, its row among the links into a broker that some node uses (-1 if none);
        per row, its link and delay."""
        if self._link_row is None:
            used = np.unique(self.tree.node_link)
            row = np.full(len(self.ov.link_from), -1, dtype=np.int64)
            row[used] = np.arange(len(used))
            self._link_row = (row, used, _CdfTable([self.ov.link_delay[i] for i in used.tolist()]))
        return self._link_row

    def hops(self, rows: IntArray, k: int, delay: FloatArray, keep: bool, padded: bool = False) -> FloatArray:
        """The pmfs (k points) of link delay plus broker delay (``delay``) of these link rows;
        with ``keep``, the link pmfs on k points are kept for other calls (:meth:`link_pmfs`);
        with ``padded``, each row is followed by zeros up to the FFT length of k points (as
        :meth:`departure_table` transforms them). The inputs are zero-padded in one buffer
        (rfft's own padding allocates and zeroes a new array per call)."""
        _, link, table = self._link_rows()
        size = sfft.next_fast_len(2 * k - 1, real=True)
        buf = np.zeros((len(rows), size))
        if keep:
            buf[:, :k] = self.link_pmfs(k)[1][rows]
        else:
            edges = (np.arange(k + 1, dtype=np.float64) - 0.5) * self.grid.step
            c = table.rows(rows, np.maximum(edges, 0.0))
            c[:, 0] = 0.0
            np.maximum(np.diff(c, axis=1), 0.0, out=buf[:, :k])
        spec = sfft.rfft(buf, axis=1)
        buf[:, :k] = delay[self.ov.link_broker[link[rows]], :k]
        spec *= sfft.rfft(buf, axis=1)
        out: FloatArray = buf if padded else np.empty((len(rows), k))
        np.maximum(sfft.irfft(spec, size, axis=1)[:, :k], 0.0, out=out[:, :k])
        return out

    def subscriber_link_table(self) -> _CdfTable:
        """The distinct subscriber-link delays; ``subscriber_link_row`` gives each subscriber's."""
        if self._link_table is None:
            # Equal DISTs share one object (the parse is memoised), so identity finds most repeats.
            delays = [self.ov.link_delay[i] for i in self.ov.subscriber_link.tolist()]
            ids = np.fromiter(map(id, delays), dtype=np.int64, count=len(delays))
            _, first, rows = np.unique(ids, return_index=True, return_inverse=True)
            dists = [delays[i] for i in first.tolist()]
            rows = rows.reshape(-1).astype(np.int64)
            self.subscriber_link_row = rows
            self._link_table = _CdfTable(dists)
        return self._link_table

    def subscriber_link_cdf(self) -> _LinkCdf:
        """The cdfs of the distinct subscriber-link delays at the cell edges (shared by the
        reliability and the p95 pass, which read many of the same points)."""
        if self._link_cdf is None:
            self._link_cdf = _LinkCdf(self.subscriber_link_table(), self.grid.step)
        return self._link_cdf

    def subscriber_link_pmfs(self, m: int) -> tuple[IntArray, FloatArray]:
        """Per subscriber, a row of the distinct subscriber-link delay pmfs on m points."""
        if m not in self._leaf_link_pmf:
            pmf = np.diff(self.subscriber_link_cdf().prefix(m + 1), axis=1)
            self._leaf_link_pmf[m] = (self.subscriber_link_row, np.maximum(pmf, 0.0, out=pmf))
        return self._leaf_link_pmf[m]

    def broker_delays(
        self, m: int, model: str, rho: FloatArray, q: _Queues, lengths: IntArray | None = None
    ) -> FloatArray:
        """Per broker, the pmf of wait plus service (zero where rho >= 1: every delivery is late).
        ``lengths`` may ask for fewer points per broker (the rest stays 0, and a broker asked for
        0 points is left all 0): by causality those first points are the same."""
        grid = self.sub(m)
        ov = self.ov
        n_b = len(ov.broker_ids)
        need = np.full(n_b, m, dtype=np.int64) if lengths is None else np.minimum(lengths, m)
        if m not in self._services:
            dists: dict[Distribution, int] = {}
            row = np.array([dists.setdefault(d, len(dists)) for d in ov.service], dtype=np.int64)
            self._services[m] = (row, _pmf_rows(grid, list(dists)))
        row, pmfs = self._services[m]
        out = _zeros((n_b, m))
        tau = np.array([d.mean for d in ov.service])
        todo: list[int] = []
        for b in range(n_b):
            w = q.waits[b]
            if rho[b] >= 1.0 or need[b] <= 0:
                continue
            if model == "mm1":
                out[b] = grid.shift(pmfs[row[b]], mm1_wait(float(rho[b]), float(tau[b])))
            elif w.mean <= 0.0:
                out[b] = pmfs[row[b]]
            else:
                todo.append(b)
        by_length = need[todo]
        for k in np.unique(by_length).tolist():
            brokers = np.asarray(todo, dtype=np.int64)[by_length == k]
            size = sfft.next_fast_len(2 * k - 1, real=True)
            service = sfft.rfft(pmfs[:, :k], size, axis=1)  # per distinct service distribution
            batch = _batch_rows(size)
            for lo in range(0, len(brokers), batch):
                chunk = brokers[lo : lo + batch]
                wait = self._wait_pmfs(grid, [q.waits[b] for b in chunk.tolist()], need[chunk], size)
                wait = sfft.rfft(wait, axis=1)
                wait *= service[row[chunk]]
                out[chunk, :k] = np.maximum(sfft.irfft(wait, size, axis=1)[:, :k], 0.0)
        return out

    def _wait_pmfs(self, grid: Grid, waits: Sequence[WaitModel], lengths: IntArray, columns: int = 0) -> FloatArray:
        """Grid pmfs of the waits (atom 1 - sigma at 0, gamma body of shape 1 / c_D^2), row r on
        its first ``lengths[r]`` points (0 beyond, up to ``columns`` if that is more: zero padding
        for an FFT), memoised per (points, mean, sigma, c_D^2).

        The cdf is 1 - sigma Q(shape, x / scale) with Q the regularised upper incomplete gamma
        function. Where sigma Q is below 2^-56 the cdf rounds to exactly 1, so Q is evaluated
        only before that point (``gammainccinv``), which changes no value; for shape 1 (c_D^2 = 1:
        M/M/1, and M/G/1 with exponential service) Q(1, x) = e^-x, to a few ulps of ``gammaincc``
        and at a fifth of its cost."""
        width = int(lengths.max()) if len(lengths) else 0
        out = np.zeros((len(waits), max(width, columns)))
        missing: list[int] = []
        for i, (w, k) in enumerate(zip(waits, lengths.tolist(), strict=True)):
            found = self._waits.get((k, w.mean, w.sigma, w.cd2))
            if found is None:
                missing.append(i)
            else:
                out[i, :k] = found
        if not missing:
            return out
        ws = [waits[i] for i in missing]
        k_of = lengths[missing]
        edges = np.maximum((np.arange(width + 1, dtype=np.float64) - 0.5) * grid.step, 0.0)
        shape = np.array([1.0 / w.cd2 for w in ws])
        sigma = np.array([w.sigma for w in ws])
        scale = np.array([w.mean / w.sigma for w in ws]) / shape
        with np.errstate(all="ignore"):
            cut = special.gammainccinv(shape, 2.0**-56 / sigma) * scale
        stop = np.where(np.isfinite(cut), np.searchsorted(edges, cut, side="right") + 1, width + 1)
        stop = np.minimum(stop, k_of + 1)
        # Row r on its first stop[r] edges, as one flat array (not the ufunc's where=: with
        # broadcast inputs, scipy 1.17's gammaincc writes out of bounds).
        row = np.repeat(np.arange(len(ws)), stop)
        col = np.arange(len(row)) - np.repeat(np.cumsum(stop) - stop, stop)
        x = edges[col] / scale[row]
        expo = np.abs(shape[row] - 1.0) <= 1e-12
        q = np.zeros((len(ws), width + 1))
        q[row[expo], col[expo]] = np.exp(-x[expo])
        q[row[~expo], col[~expo]] = special.gammaincc(shape[row[~expo]], x[~expo])
        c = 1.0 - sigma[:, None] * q
        c[:, 0] = 0.0
        fresh = np.maximum(np.diff(c, axis=1), 0.0)
        fresh[np.arange(width)[None, :] >= k_of[:, None]] = 0.0
        out[missing, :width] = fresh
        for j, (w, k) in enumerate(zip(ws, k_of.tolist(), strict=True)):
            self._waits[(k, w.mean, w.sigma, w.cd2)] = fresh[j, :k]
        return out

    def departures(self, m: int, delay: FloatArray) -> FloatArray:
        """Per node, the pmf of (publication to departure from the node's broker) on m points
        (:meth:`departure_table`, as one row per node)."""
        table = self.departure_table(m, delay)
        out: FloatArray = table.flat.reshape(-1, m)[table.off // m]
        return out

    def departure_table(self, m: int, delay: FloatArray, lengths: IntArray | None = None) -> _Ragged:
        """Per node, the pmf of (publication to departure from the node's broker), m points:
        level by level, each node's departure is its parent's convolved with its link's delay
        and its broker's delay, a hop (batched FFTs). ``lengths`` may ask for fewer points per
        node (never fewer for a parent than for its children; :func:`_fft_lengths` rounds them
        up), and for none (0). A node behind a broker whose delay pmf is all zero (rho >= 1)
        stays 0 without any work. ``delay`` is read on as many points as the nodes at its broker
        ask for; a hop is worked out on as many points as the nodes behind its link ask for.

        The nodes are laid out by depth and length, so that each batch of an FFT is one block
        of the table (no scatter) and the table holds each node on its own length only."""
        tree, paths = self.tree, self.paths
        n_nodes = len(tree.node_link)
        size = _fft_lengths(m, lengths) if lengths is not None else np.full(n_nodes, m, dtype=np.int64)
        live_broker: NDArray[np.bool_] = np.asarray(delay.any(axis=1))
        live = live_broker[tree.node_broker] & (size > 0)
        for d in range(1, len(paths.depth_start) - 1):
            idx = np.arange(paths.depth_start[d], paths.depth_start[d + 1])
            live[idx] &= live[tree.node_parent[idx]]
        keep = lengths is None  # every queue state of the reliability pass reads the same link pmfs
        table = _Ragged.of(size, 2 * tree.node_depth + ~live)  # per depth, the live nodes first
        row, _, _ = self._link_rows()
        link_row = row[tree.node_link]
        # Per length, the hop of every link row that a live node (below the roots) of that length uses.
        spectra: dict[int, tuple[IntArray, NDArray[np.complex128]]] = {}
        below = live & (tree.node_depth > 0)
        for k in np.unique(size[below]).tolist():
            rows = np.unique(link_row[below & (size == k)])
            fft = sfft.next_fast_len(2 * k - 1, real=True)
            spec = _zeros((len(rows), fft // 2 + 1), np.complex128)
            step = _batch_rows(fft)
            for lo in range(0, len(rows), step):
                spec[lo : lo + step] = sfft.rfft(self.hops(rows[lo : lo + step], k, delay, keep, True), axis=1)
            where = np.full(len(row), -1, dtype=np.int64)
            where[rows] = np.arange(len(rows))
            spectra[k] = (where, spec)
        for first, count, k in table.runs:
            nodes = table.order[first : first + count]
            if not live[nodes[0]]:
                continue
            at = int(table.off[nodes[0]])
            if tree.node_depth[nodes[0]] == 0:  # the publishers' own links
                table.flat[at : at + len(nodes) * k] = self.hops(link_row[nodes], k, delay, keep).reshape(-1)
                continue
            fft = sfft.next_fast_len(2 * k - 1, real=True)
            where, spec_of = spectra[k]
            # The parents' rows, zero-padded to the FFT's length in one buffer for the whole run
            # (rfft's own padding allocates and zeroes a new array per call, as much as the FFT).
            step = _batch_rows(fft)
            padded = np.zeros((min(len(nodes), step), fft))
            for lo in range(0, len(nodes), step):
                batch = nodes[lo : lo + step]
                parents, inverse = _distinct(tree.node_parent[batch])
                distinct = len(parents) == len(batch)
                if distinct:  # each its own parent: in the batch's order, no gather after the FFT
                    parents = tree.node_parent[batch]
                rows = padded[: len(parents)]
                rows[:, :k] = _runs(table.flat, k)[table.off[parents]]
                spec = sfft.rfft(rows, axis=1)
                if not distinct:
                    spec = spec[inverse]
                spec *= spec_of[where[link_row[batch]]]
                block = table.flat[at + lo * k : at + (lo + len(batch)) * k].reshape(len(batch), k)
                np.maximum(sfft.irfft(spec, fft, axis=1)[:, :k], 0.0, out=block)
        return table


def _distinct(x: IntArray) -> tuple[IntArray, IntArray]:
    """``np.unique(x, return_inverse=True)``, without sorting when x is already in order (as
    the parents of the nodes of one depth are where the route tree lists children parent by
    parent)."""
    if len(x) and bool((x[1:] >= x[:-1]).all()):
        new = np.empty(len(x), dtype=np.bool_)
        new[0] = True
        np.not_equal(x[1:], x[:-1], out=new[1:])
        inverse: IntArray = np.cumsum(new) - 1
        return x[new], inverse
    values, inverse = np.unique(x, return_inverse=True)
    return values, inverse.reshape(-1)


def _runs(flat: FloatArray, k: int) -> FloatArray:
    """Every run of k consecutive values of a contiguous 1-d array, as a read-only view (row j:
    ``flat[j:j + k]``): ``sliding_window_view`` without its argument checks, which cost more
    than the reads in the loops that use this."""
    step = flat.strides[0]
    out: FloatArray = np.ndarray((len(flat) - k + 1, k), dtype=flat.dtype, buffer=flat, strides=(step, step))
    out.flags.writeable = False
    return out


@dataclass(frozen=True, eq=False)
class _Ragged:
    """Per node a row of its own length in one flat array: row n is ``flat[off[n]:off[n] +
    size[n]]`` (no row where size is 0). The rows lie in ``order``, in runs of equal length
    (``runs``: first position in ``order``, count, length)."""

    flat: FloatArray
    off: IntArray
    size: IntArray
    order: IntArray
    runs: list[tuple[int, int, int]]

    @classmethod
    def of(cls, size: IntArray, group: IntArray) -> _Ragged:
        """Zero rows of these sizes, laid out by group and then size (a run never spans two
        groups)."""
        order = np.lexsort((size, group))
        order = order[size[order] > 0]
        sizes = size[order]
        off = np.zeros(len(size), dtype=np.int64)
        off[order] = np.cumsum(sizes) - sizes
        change = (np.diff(sizes, prepend=-1) != 0) | (np.diff(group[order], prepend=-1) != 0)
        first = np.flatnonzero(change)
        count = np.diff(np.append(first, len(order)))
        runs = list(zip(first.tolist(), count.tolist(), sizes[first].tolist(), strict=True))
        return cls(_zeros(int(sizes.sum())), off, size, order, runs)

    def rows(self, index: IntArray, k: int) -> FloatArray:
        """The first k points of these rows (each at least k long), as a new array."""
        out: FloatArray = _runs(self.flat, k)[self.off[index]]
        return out

    def cumsum(self) -> None:
        """Every row, in place, by its cumulative sum."""
        for first, count, k in self.runs:
            at = int(self.off[self.order[first]])
            block = self.flat[at : at + count * k].reshape(count, k)
            np.cumsum(block, axis=1, out=block)


def _fft_lengths(m: int, lengths: IntArray) -> IntArray:
    """The points :meth:`_Evaluator.departure_table` works out per node for ``lengths``: rounded
    up to a multiple of about m / 32, so that nodes of one size share their FFT size and hop
    spectra. (Coarser steps share more parent transforms but make every row longer; on the
    1000-broker benchmark, steps of m / 32 to m / 16 cost least.)"""
    step = 1 << max(int(m).bit_length() - 6, 5)
    out: IntArray = np.where(lengths > 0, np.minimum(m, -(-np.maximum(lengths, 1) // step) * step), 0)
    return out


def _lifetime_cells(grid: Grid, lifetimes: FloatArray) -> tuple[IntArray, FloatArray]:
    """Per lifetime, (i, f) with P(X <= lifetime) = (1 - f) cum[i] + f cum[i + 1] as
    :meth:`Grid.cdf_at` interpolates (i = -1: before the first cell edge, probability 0)."""
    edges = (np.arange(grid.n, dtype=np.float64) + 0.5) * grid.step
    i = np.searchsorted(edges, lifetimes, side="right") - 1
    top = i >= grid.n - 1
    i = np.minimum(i, grid.n - 1)
    safe = np.clip(i, 0, grid.n - 2) if grid.n > 1 else np.zeros_like(i)
    f = np.where(
        (i < 0) | top, 0.0, (lifetimes - edges[safe]) / (edges[np.minimum(safe + 1, grid.n - 1)] - edges[safe])
    )
    return i.astype(np.int64), f


def _on_time(
    ev: _Evaluator, m: int, departures: Sequence[FloatArray], cells: tuple[IntArray, FloatArray]
) -> FloatArray:
    """P(departure + subscriber link <= lifetime) per (queue state, leaf, lifetime class): per
    broker one matrix product of the departure cdfs around each lifetime with the subscriber
    links' pmfs there (the on-time point of the convolution, not all of it).

    At lifetime cell i with interpolation f (:func:`_lifetime_cells`), P = sum over link cells
    u of L[u] ((1 - f) C[i - u] + f C[i + 1 - u]) (C[< 0] = 0, C[>= m] = C[m - 1]): the cdf's
    cells i - top .. i + 1 (top = min(i + 1, m - 1)) weighted by (1 - f) L and f L reversed."""
    tree = ev.tree
    cell, frac = cells
    n_t, n_e = len(cell), len(departures)
    n_nodes = len(tree.node_link)
    out = _zeros((len(tree.leaf_node), n_e, n_t))
    alive = np.zeros(n_nodes, dtype=np.bool_)
    for dep in departures:
        alive |= dep.any(axis=1)
    if not alive.any():  # every path crosses an overloaded broker: nothing is ever on time
        return out.transpose(1, 0, 2)
    cum = _zeros((n_nodes, n_e, m + 2))  # cum[:, e, j + 1] = C[j], and C[m - 1] once more at the end
    for e, dep in enumerate(departures):
        np.cumsum(dep, axis=1, out=cum[:, e, 1 : m + 1])
    cum[:, :, m + 1] = cum[:, :, m]
    link_row, link_pmf = ev.subscriber_link_pmfs(m)
    for t in range(n_t):
        i, f = int(cell[t]), float(frac[t])
        if i < 0:
            continue
        top = min(i + 1, m - 1)  # highest u with a nonzero term
        reversed_pmf = link_pmf[:, top::-1]
        weight = np.zeros((len(link_pmf), top + 2))  # on the cdf's cells i - top .. i + 1
        weight[:, : top + 1] = (1.0 - f) * reversed_pmf
        if f > 0.0:
            weight[:, 1:] += f * reversed_pmf
        for g in ev.groups:
            if not alive[g.nodes].any():
                continue
            lhs = cum[g.nodes, :, i - top + 1 : i + 3].reshape(len(g.nodes) * n_e, top + 2)
            product = (lhs @ weight[link_row[g.subs]].T).reshape(len(g.nodes), n_e, len(g.subs))
            out[g.leaves, :, t] = product[g.node_pos, :, g.sub_pos]
    transposed: FloatArray = out.transpose(1, 0, 2)
    return transposed


def _reliability(paths: _Paths, tree: RouteTree, on_time: FloatArray, lg_class: IntArray, n_subs: int) -> FloatArray:
    """R'_s from P(on time) per (leaf, lifetime class): per (subscriber, group) the chance that
    some copy is on time (several copies when several paths reach the subscriber), weighted by
    the group's matching rate."""
    ok = np.minimum(paths.leaf_reach[paths.lg_leaf] * on_time[paths.lg_leaf, lg_class], 1.0)
    sub = tree.leaf_subscriber[paths.lg_leaf]
    if paths.single_path:
        on_rate = np.bincount(sub, weights=paths.lg_rate * ok, minlength=n_subs)
        with np.errstate(invalid="ignore", divide="ignore"):
            single: FloatArray = np.where(paths.matching_rate > 0, on_rate / paths.matching_rate, np.nan)
        return single
    pair = sub * max(len(paths.group_lifetime), 1) + paths.lg_group
    order = np.argsort(pair, kind="stable")
    pair, ok_sorted, sub_sorted, rate = pair[order], ok[order], sub[order], paths.lg_rate[order]
    starts = np.flatnonzero(np.concatenate(([True], pair[1:] != pair[:-1]))) if len(pair) else np.zeros(0, np.int64)
    got = 1.0 - np.multiply.reduceat(1.0 - ok_sorted, starts) if len(starts) else np.zeros(0)
    on_rate = np.bincount(sub_sorted[starts], weights=rate[starts] * got, minlength=n_subs)
    with np.errstate(invalid="ignore", divide="ignore"):
        out: FloatArray = np.where(paths.matching_rate > 0, on_rate / paths.matching_rate, np.nan)
    return out


class _LinkCdf:
    """P(D <= (i - 1/2) h) of distinct delays D (rows of ``table``) at cells i (0 at cell 0:
    the first point takes [0, h/2)). The first columns asked for every row are kept, and
    later questions about them read the copy.

    >>> cdf = _LinkCdf(_CdfTable([Exponential(2.0)]), 1.0)
    >>> bool(np.allclose(cdf.prefix(3), [[0.0, 1 - math.exp(-0.25), 1 - math.exp(-0.75)]]))
    True
    >>> bool(np.array_equal(cdf.at(np.array([0]), np.array([2, 5])), cdf.prefix(6)[:, [2, 5]]))
    True
    """

    def __init__(self, table: _CdfTable, step: float) -> None:
        self.table, self.step = table, step
        self.kept = np.zeros((len(table.dists), 1))

    def _compute(self, rows: IntArray, cells: IntArray) -> FloatArray:
        out = self.table.rows(rows, np.maximum((cells - 0.5) * self.step, 0.0))
        out[:, cells == 0] = 0.0
        return out

    def prefix(self, n: int) -> FloatArray:
        """Every row at cells 0 .. n - 1 (kept)."""
        have = self.kept.shape[1]
        every = np.arange(len(self.table.dists))
        if n > have == 1:  # only cell 0 (0) so far: all at once, without a copy
            self.kept = self._compute(every, np.arange(n))
        elif n > have:
            self.kept = np.concatenate((self.kept, self._compute(every, np.arange(have, n))), axis=1)
        return self.kept[:, :n]

    def at(self, rows: IntArray, cells: IntArray) -> FloatArray:
        """These rows at these cells."""
        out = np.empty((len(rows), len(cells)))
        kept = cells < self.kept.shape[1]
        if kept.any():
            out[:, kept] = self.kept[rows[:, None], cells[kept]]
        if not kept.all():
            out[:, ~kept] = self._compute(rows, cells[~kept])
        return out


def _dense_cells(grid: Grid, cdf: _LinkCdf) -> IntArray:
    """Per distribution of ``table``, the cells (a multiple of 4, at most the grid) by which
    its survival is down to 1e-8."""
    n = grid.n
    probes = np.arange(4, n + 4, 4)
    probes[-1] = min(probes[-1], n)
    found = np.full(len(cdf.table.dists), n, dtype=np.int64)
    todo = np.arange(len(cdf.table.dists))
    start = 0
    while len(todo) and start < len(probes):  # in chunks of probes: most links are short
        chunk = probes[start : start + 64]
        done = 1.0 - cdf.at(todo, chunk) <= _P95_DENSE_SURVIVAL
        hit = done.any(axis=1)
        found[todo[hit]] = chunk[np.argmax(done[hit], axis=1)]
        todo = todo[~hit]
        start += 64
    return found


def _link_atoms(grid: Grid, cdf: _LinkCdf, rows: IntArray, dense: int) -> tuple[IntArray, FloatArray]:
    """Grid pmfs of (subscriber link) delays as masses at cells common to all of them: each of
    the first ``dense`` cells, then one per block of cells growing by a quarter, at the block's
    middle, until every survival is below 1e-10 (the rest is dropped). Returns the cells and the
    masses (one row per distribution).

    >>> cdf = _LinkCdf(_CdfTable([Exponential(2.0)]), 1.0)
    >>> cells, masses = _link_atoms(Grid(1.0, 64), cdf, np.array([0]), 32)
    >>> cells[:3].tolist(), round(float(masses.sum()), 9)  # what is dropped is below 1e-10
    ([0, 1, 2], 1.0)
    """
    n = grid.n
    dense = max(min(dense, n), 1)
    edges = [dense]
    while edges[-1] < n:
        edges.append(min(n, max(edges[-1] + 1, math.ceil(edges[-1] * _P95_BLOCK_GROWTH))))
    cells = np.concatenate((np.arange(dense + 1), np.array(edges[1:], dtype=np.int64)))
    c = cdf.at(rows, cells)
    masses = np.maximum(np.diff(c, axis=1), 0.0)
    tail = 1.0 - c[:, dense:].min(axis=0, initial=1.0)  # worst survival at each block's start
    blocks = len(edges) - 1
    small = tail[:blocks] <= _P95_TAIL_SURVIVAL
    keep = int(np.argmax(small)) if small.any() else blocks
    bounds = np.array(edges[: keep + 1], dtype=np.int64)
    at = np.concatenate((np.arange(dense, dtype=np.int64), (bounds[:-1] + bounds[1:] - 1) // 2))
    return at, masses[:, : dense + keep]


@dataclass(frozen=True, eq=False)
class _Atoms:
    """Subscriber-link pmfs as atoms (:func:`_link_atoms`), in the form the p95 search reads:
    per row the first ``dense`` cells' masses, last cell first (``lrev``), the masses of the
    tail atoms at cells ``tail_at`` (common to the rows), the first cell by which the row has
    0.999 of its cell-by-cell mass and that mass (``q_cell``, ``q_mass``), and its mean cell."""

    lrev: FloatArray
    tail_at: IntArray
    tail_mass: FloatArray
    q_cell: IntArray
    q_mass: FloatArray
    mu: FloatArray

    @property
    def reach(self) -> int:
        """The farthest cell an atom stands for."""
        return max(int(self.tail_at.max(initial=0)), int(self.lrev.shape[1]) - 1)

    @classmethod
    def of(cls, at: IntArray, mass: FloatArray, dense: int) -> _Atoms:
        """From the cells and masses of :func:`_link_atoms` (the first ``dense`` cells one by one)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            mu = np.where(mass.sum(axis=1) > 0, (mass @ at) / mass.sum(axis=1), 0.0)
        return cls(mass[:, dense - 1 :: -1].copy(), at[dense:], mass[:, dense:], *_bulk_of(mass, dense), mu)


class _LinkAtoms:
    """The subscriber links' atoms, worked out on first use: one layout for every link while
    that table stays small, one per broker otherwise (:func:`_link_atoms`)."""

    def __init__(self, ev: _Evaluator) -> None:
        self.ev = ev
        self.cdf: _LinkCdf | None = None
        self.dense_of = np.zeros(0, dtype=np.int64)
        self.shared: _Atoms | None = None

    def of(self, subs: IntArray) -> tuple[_Atoms, IntArray]:
        """The atoms of these subscribers' links, and the row of each there."""
        grid = self.ev.grid
        if self.cdf is None:
            self.cdf = self.ev.subscriber_link_cdf()
            self.dense_of = _dense_cells(grid, self.cdf)
            every = np.arange(len(self.cdf.table.dists))
            dense = int(self.dense_of.max())
            if len(every) * (dense + 64) <= _P95_SHARED_ATOMS:
                self.shared = _Atoms.of(*_link_atoms(grid, self.cdf, every, dense), dense)
        rows = self.ev.subscriber_link_row[subs]
        if self.shared is not None:
            return self.shared, rows
        dense = int(self.dense_of[rows].max())
        return _Atoms.of(*_link_atoms(grid, self.cdf, rows, dense), dense), np.arange(len(subs))


def _bulk_of(mass: FloatArray, dense: int) -> tuple[IntArray, FloatArray]:
    """Per row of link masses, the first cell by which it has 0.999 of its cell-by-cell mass,
    and the mass up to there."""
    bulk = mass[:, :dense].cumsum(axis=1)
    q_cell: IntArray = np.argmax(bulk >= _P95_LINK_LEVEL * bulk[:, -1:], axis=1).astype(np.int64)
    q_mass: FloatArray = bulk[np.arange(len(mass)), q_cell]
    return q_cell, q_mass


@dataclass(frozen=True, eq=False)
class _P95Rows:
    """The subscribers at one broker that get events, ready for the p95 search (independent of
    the departure distributions, so worked out once)."""

    broker: int
    subs: IntArray
    nodes: IntArray  # the broker's nodes that feed them
    w: FloatArray  # per subscriber and node: rate times reach
    total: FloatArray  # delivered rate: the mixture's mass
    atoms: _Atoms
    atom_row: IntArray  # per subscriber: its row of ``atoms``


def _p95_rows(ev: _Evaluator, weight: FloatArray) -> list[_P95Rows]:
    """Per broker group with delivered events, its :class:`_P95Rows`."""
    atoms = _LinkAtoms(ev)
    out: list[_P95Rows] = []
    for group in ev.groups:
        n_nodes = len(group.nodes)
        cell = group.sub_pos * n_nodes + group.node_pos
        w = np.bincount(cell, weights=weight[group.leaves], minlength=len(group.subs) * n_nodes).reshape(-1, n_nodes)
        total = w.sum(axis=1)
        has = total > 0.0
        if not has.any():
            continue
        w, subs = w[has], group.subs[has]
        used = w.any(axis=0)
        broker = int(ev.tree.node_broker[group.nodes[0]])
        out.append(_P95Rows(broker, subs, group.nodes[used], w[:, used], total[has], *atoms.of(subs)))
    return out


@dataclass(frozen=True, eq=False)
class _P95Batch:
    """Subscribers of several brokers in one search, one row each: its bracket of cells, its
    window of the departure mixture's cdf M (cells a, a + 1, ... at ``flat[off:]``; cells below
    0 hold 0) and its link atoms (as :class:`_Atoms`, padded to the widest in the batch)."""

    sub: IntArray
    part: IntArray  # which of the batch's _P95Rows
    total: FloatArray  # the mixture's mass
    target: FloatArray  # 0.95 total
    low: IntArray  # M(low) < target, so G(low) < target (-1: before every cell)
    up: IntArray  # M(up) >= target
    high: IntArray  # G(high) >= target but for rounding, or the last valid cell
    stop: IntArray  # cells valid in the departure cdfs
    off: IntArray
    a: IntArray
    flat: FloatArray
    lrev: FloatArray
    tail_at: IntArray
    tail_mass: FloatArray
    mu: FloatArray  # the link's mean, in cells

    def g(self, i: IntArray, rows: IntArray | None = None) -> FloatArray:
        """G(i) = sum over link cells u of L[u] M(i - u), per row (all, or ``rows``)."""
        if rows is None:
            base, lrev, tail_at, tail_mass = self.off + i - self.a, self.lrev, self.tail_at, self.tail_mass
        else:
            base, lrev = self.off[rows] + i - self.a[rows], self.lrev[rows]
            tail_at, tail_mass = self.tail_at[rows], self.tail_mass[rows]
        dense = lrev.shape[1]
        value: FloatArray = np.einsum("rd,rd->r", _runs(self.flat, dense)[base - (dense - 1)], lrev)
        if tail_at.shape[1]:
            value = value + np.einsum("rt,rt->r", self.flat[base[:, None] - tail_at], tail_mass)
        return value

    def m(self, i: IntArray) -> FloatArray:
        """M(i) per row."""
        out: FloatArray = self.flat[self.off + i - self.a]
        return out


def _atom_rows(parts: Sequence[_P95Rows], part: IntArray, local: IntArray) -> IntArray | None:
    """Rows of the one :class:`_Atoms` table the parts share (None if they do not) for these
    rows (subscriber ``local`` of ``parts[part]``)."""
    if any(p.atoms is not parts[0].atoms for p in parts):
        return None
    start = np.cumsum([0, *(len(p.subs) for p in parts)])
    at: IntArray = np.concatenate([p.atom_row for p in parts])[start[part] + local]
    return at


def _batch_bulk(parts: Sequence[_P95Rows], part: IntArray, local: IntArray) -> tuple[IntArray, FloatArray]:
    """``q_cell`` and ``q_mass`` (see :class:`_Atoms`) for these rows."""
    at = _atom_rows(parts, part, local)
    if at is not None:
        return parts[0].atoms.q_cell[at], parts[0].atoms.q_mass[at]
    q_cell, q_mass = np.empty(len(part), dtype=np.int64), np.empty(len(part))
    for k in np.unique(part).tolist():
        rows = np.flatnonzero(part == k)
        a, at_k = parts[k].atoms, parts[k].atom_row[local[rows]]
        q_cell[rows], q_mass[rows] = a.q_cell[at_k], a.q_mass[at_k]
    return q_cell, q_mass


def _batch_atoms(
    parts: Sequence[_P95Rows], part: IntArray, local: IntArray
) -> tuple[FloatArray, IntArray, FloatArray, FloatArray]:
    """``lrev``, ``tail_at`` (per row), ``tail_mass`` and ``mu`` of :class:`_P95Batch` for these
    rows: gathered from one table when the parts share it, else padded per part (a shorter
    dense part with zeros at its far end, missing tail atoms at cell 0 with no mass)."""
    at = _atom_rows(parts, part, local)
    if at is not None:
        first = parts[0].atoms
        tail_at = np.broadcast_to(first.tail_at, (len(at), len(first.tail_at)))
        return first.lrev[at], tail_at, first.tail_mass[at], first.mu[at]
    dense = max(p.atoms.lrev.shape[1] for p in parts)
    n_tail = max(len(p.atoms.tail_at) for p in parts)
    n = len(part)
    lrev, tail_at, tail_mass = np.zeros((n, dense)), np.zeros((n, n_tail), dtype=np.int64), np.zeros((n, n_tail))
    mu = np.empty(n)
    for k in np.unique(part).tolist():
        rows = np.flatnonzero(part == k)
        a, at_k = parts[k].atoms, parts[k].atom_row[local[rows]]
        d, t = a.lrev.shape[1], len(a.tail_at)
        lrev[rows, dense - d :] = a.lrev[at_k]
        tail_at[rows, :t] = a.tail_at
        tail_mass[rows, :t] = a.tail_mass[at_k]
        mu[rows] = a.mu[at_k]
    return lrev, tail_at, tail_mass, mu


def _coarse_mixtures(cdf: _Ragged, parts: Sequence[_P95Rows], stops: Sequence[int]) -> tuple[FloatArray, IntArray]:
    """Per subscriber of ``parts`` (one row each), M at every ``_P95_COARSE``-th cell and at
    the last valid one (-inf beyond: never reached), one matrix product per broker; per part
    those cells. (Only those cells of the nodes' cdfs are read.)"""
    n_cols = max(-(-stop // _P95_COARSE) + 1 for stop in stops)
    coarse = np.full((sum(len(p.subs) for p in parts), n_cols), -np.inf)
    col_cell = np.zeros((len(parts), n_cols), dtype=np.int64)
    r = 0
    for k, (p, stop) in enumerate(zip(parts, stops, strict=True)):
        cols = np.arange(0, stop + _P95_COARSE - 1, _P95_COARSE)
        cols[-1] = stop - 1
        col_cell[k, : len(cols)] = cols
        c = cdf.flat[cdf.off[p.nodes][:, None] + cols]
        np.matmul(p.w, c, out=coarse[r : r + len(p.subs), : len(cols)])
        r += len(p.subs)
    return coarse, col_cell


def _windows(
    parts: Sequence[_P95Rows],
    cdf: _Ragged,
    part: IntArray,
    local: IntArray,
    low: IntArray,
    high: IntArray,
) -> tuple[FloatArray, IntArray, IntArray]:
    """M on each row's cells low - reach .. high (rows sorted by part, then low), as ``flat``,
    ``off`` and ``a`` of :class:`_P95Batch`: rows of a part whose ``low`` lie within
    ``_P95_CHUNK`` cells share one window, worked out by one matrix product (of the nodes'
    cdfs, ``cdf``, on the window's cells only: they end within the cells valid for the part)."""
    new_part = np.diff(part, prepend=-1) != 0
    part_low = low[np.maximum.accumulate(np.where(new_part, np.arange(len(part)), 0))]
    first = np.flatnonzero(new_part | (np.diff((low - part_low) // _P95_CHUNK, prepend=-1) != 0))
    count = np.diff(np.append(first, len(part)))
    start = low[first] - max(p.atoms.reach for p in parts)
    width = np.maximum.reduceat(high, first) + 1 - start
    at = np.cumsum(count * width) - count * width
    flat = np.empty(int((count * width).sum()))
    for i, n, a, w, o in zip(first.tolist(), count.tolist(), start.tolist(), width.tolist(), at.tolist(), strict=True):
        k = int(part[i])
        block = flat[o : o + n * w].reshape(n, w)
        zero = min(max(-a, 0), w)  # cells below 0
        block[:, :zero] = 0.0
        if zero < w:
            nodes = _runs(cdf.flat, w - zero)[cdf.off[parts[k].nodes] + a + zero]
            np.matmul(parts[k].w[local[i : i + n]], nodes, out=block[:, zero:])
    off = np.repeat(at - first * width, count) + np.arange(len(part)) * np.repeat(width, count)
    return flat, off, np.repeat(start, count)


def _p95_batch(
    ev: _Evaluator, cdf: _Ragged, parts: Sequence[_P95Rows], stops: Sequence[int], wide: bool
) -> tuple[_P95Batch | None, list[int]]:
    """Brackets and windows for the subscribers of ``parts`` (``cdf``: each node's departure
    cdf, valid on the first ``stops`` cells of its part): the batch (None if empty), and the
    parts whose valid cells are too few (some M below its target there while the grid goes
    on). Subscribers whose M stays below the target on the whole grid have no quantile and are
    left out.

    M on the coarse cells (:func:`_coarse_mixtures`) brackets each subscriber's quantile: G <
    target up to the last coarse cell where M < target, and G >= q M(i - q_cell) >= target
    from q_cell cells after the first coarse cell i where M reaches target / q (q: the link's
    mass within q_cell cells); with ``wide``, brackets end at the last valid cell. Then M on
    each bracket, less the link atoms' reach (:func:`_windows`)."""
    coarse, col_cell = _coarse_mixtures(cdf, parts, stops)
    size = np.array([len(p.subs) for p in parts])
    part = np.repeat(np.arange(len(parts)), size)
    local = np.arange(len(part)) - np.repeat(np.cumsum(size) - size, size)
    stop = np.asarray(stops, dtype=np.int64)[part]
    target = _P95_LEVEL * np.concatenate([p.total for p in parts])
    hit = coarse >= target[:, None]
    found = hit.any(axis=1)
    short = np.unique(part[~found & (stop < ev.grid.n)]).tolist()
    rows = np.flatnonzero(found & ~np.isin(part, short))
    if not len(rows):
        return None, short
    hit, coarse = hit[rows], coarse[rows]
    j = np.argmax(hit, axis=1)
    low = np.where(j > 0, col_cell[part[rows], np.maximum(j - 1, 0)], -1)
    up = col_cell[part[rows], j]
    high = stop[rows] - 1
    if not wide:
        q_cell, q_mass = _batch_bulk(parts, part[rows], local[rows])
        hit = coarse >= (target[rows] / q_mass)[:, None]
        j = np.argmax(hit, axis=1)
        high = np.where(hit.any(axis=1), np.minimum(col_cell[part[rows], j] + q_cell, high), high)
    order = np.lexsort((low, part[rows]))  # by part, then bracket
    low, up, high, rows = low[order], up[order], high[order], rows[order]
    part, local, stop, target = part[rows], local[rows], stop[rows], target[rows]
    flat, off, a = _windows(parts, cdf, part, local, low, high)
    lrev, tail_at, tail_mass, mu = _batch_atoms(parts, part, local)
    sub = np.concatenate([p.subs for p in parts])[np.cumsum(np.append(0, size))[part] + local]
    return _P95Batch(
        sub, part, target / _P95_LEVEL, target, low, up, high, stop, off, a, flat, lrev, tail_at, tail_mass, mu
    ), short


def _p95_quantiles(bt: _P95Batch, grid: Grid) -> tuple[NDArray[np.bool_], FloatArray]:
    """The search within the brackets of a batch: per row whether G reaches its target by the
    bracket's end, and the quantile (as :meth:`Grid.quantile` interpolates).

    The first cell where M reaches the target is found by bisection between the coarse cells.
    G is M smoothed by the link, so it first reaches the target about the link's mean later:
    G is evaluated there and one cell before, and where that guess misses, bisection goes on
    between the cells known to be below and above. Every G is evaluated exactly (the guess
    only saves evaluations), so the answer is the first cell where G reaches the target."""
    target = bt.target
    lo, hi = bt.low.copy(), bt.up.copy()
    m_lo, m_hi = bt.m(lo), bt.m(hi)
    while True:
        gap = hi - lo > 1
        if not gap.any():
            break
        mid = np.where(gap, (lo + hi) // 2, hi)
        m = bt.m(mid)
        up = gap & (m >= target)
        down = gap & ~up
        hi, m_hi = np.where(up, mid, hi), np.where(up, m, m_hi)
        lo, m_lo = np.where(down, mid, lo), np.where(down, m, m_lo)
    # G(lo) <= M(lo) < target: the quantile's cell is in [hi, high].
    with np.errstate(invalid="ignore", divide="ignore"):
        x = lo + np.where(m_hi > m_lo, (target - m_lo) / (m_hi - m_lo), 1.0) + bt.mu
    guess = np.minimum(np.maximum(np.ceil(x).astype(np.int64), hi), bt.high)
    g_before, g_at = bt.g(guess - 1), bt.g(guess)
    before = g_before >= target  # the quantile is before the guess: in [hi, guess - 1]
    after = ~before & (g_at < target)  # after it: in [guess + 1, high]
    low = np.where(before, lo, np.where(after, guess, guess - 1))
    g_low = np.where(before, np.nan, np.where(after, g_at, g_before))  # NaN: not evaluated
    top = np.where(before, guess - 1, np.where(after, bt.high, guess))
    g_high = np.where(before, g_before, np.where(after & (guess < bt.high), np.nan, g_at))
    rows = np.flatnonzero(top - low > 1)
    while len(rows):
        mid = (low[rows] + top[rows]) // 2
        g_mid = bt.g(mid, rows)
        up = g_mid >= target[rows]
        top[rows[up]], g_high[rows[up]] = mid[up], g_mid[up]
        low[rows[~up]], g_low[rows[~up]] = mid[~up], g_mid[~up]
        rows = rows[top[rows] - low[rows] > 1]
    todo = np.flatnonzero(np.isnan(g_high))  # the bracket's end, never evaluated
    if len(todo):
        g_high[todo] = bt.g(top[todo], todo)
    found = g_high >= target
    todo = np.flatnonzero(np.isnan(g_low) & found & (top > 0))
    if len(todo):
        g_low[todo] = bt.g(top[todo] - 1, todo)
    total = bt.total
    cum_i, cum_lo = g_high / total, np.where(top > 0, g_low, 0.0) / total
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(cum_i > cum_lo, (_P95_LEVEL - cum_lo) / (cum_i - cum_lo), 0.5)
    value = np.where(top > 0, (top - 0.5 + frac) * grid.step, frac * 0.5 * grid.step)
    return found, value


def _p95(ev: _Evaluator, cdf: _Ragged, parts: Sequence[_P95Rows], stops: Sequence[int], out: FloatArray) -> list[int]:
    """Per subscriber of ``parts``, the 0.95 quantile of its delivered events' delay, written to
    ``out`` (as :meth:`Grid.quantile` of the mixture over its leaves, weighted by rate times
    reach, of departure plus subscriber link; left as it is, NaN, beyond the grid). ``cdf``
    holds each node's departure cdf, valid on the first ``stops`` cells of its part's broker;
    the parts for which that is too few are returned.

    The mixture's cdf G(i) = sum over link cells u of L[u] M(i - u), M the cumulative departure
    mixture, is searched instead of convolved whole (:func:`_p95_batch`, :func:`_p95_quantiles`):
    per broker, matrix products give M on a coarse grid, which brackets each quantile within a
    few dozen cells, then on each subscriber's bracket; the link pmf is summed cell by cell down
    to survival 1e-8 and in geometric blocks beyond (each at its middle cell): within ~1e-9 of
    the full convolution in probability. Brokers are searched together, a few thousand
    subscribers at a time."""
    short: list[int] = []
    todo, wide = list(range(len(parts))), False
    while todo:
        wider: list[int] = []
        lo = 0
        while lo < len(todo):  # batches of whole brokers, _P95_BATCH_ROWS subscribers or a few more
            hi = lo + 1 + int(np.searchsorted(np.cumsum([len(parts[k].subs) for k in todo[lo:]]), _P95_BATCH_ROWS))
            batch = todo[lo:hi]
            lo = hi
            bt, too_short = _p95_batch(ev, cdf, [parts[k] for k in batch], [stops[k] for k in batch], wide)
            short += [batch[k] for k in too_short]
            if bt is None:
                continue
            found, value = _p95_quantiles(bt, ev.grid)
            out[bt.sub[found]] = value[found]
            for k in np.unique(bt.part[~found]).tolist():
                miss = (bt.part == k) & ~found
                if not wide and bool((bt.high[miss] < bt.stop[miss] - 1).any()):
                    wider.append(batch[k])  # rounding kept G below its target at the bracket's end
                elif stops[batch[k]] < ev.grid.n:
                    short.append(batch[k])  # again, once its nodes are known on the whole grid
        todo, wide = wider, True
    return short


class _Blame(Sequence[Contributor]):
    """A subscriber's contributors, worked out on first use (a large system has too many
    (subscriber, element) pairs to build them all up front)."""

    __slots__ = ("_ctx", "_done", "_miss", "_s")

    def __init__(self, ctx: _BlameContext, s: int, miss: float) -> None:
        self._ctx, self._s, self._miss = ctx, s, miss
        self._done: tuple[Contributor, ...] | None = None

    def _get(self) -> tuple[Contributor, ...]:
        if self._done is None:
            self._done = self._ctx.contributors(self._s, self._miss)
        return self._done

    @overload
    def __getitem__(self, i: int) -> Contributor: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[Contributor]: ...

    def __getitem__(self, i: int | slice) -> Contributor | Sequence[Contributor]:
        return self._get()[i]

    def __len__(self) -> int:
        return len(self._get())

    def __eq__(self, other: object) -> bool:
        return tuple(self) == tuple(other) if isinstance(other, Sequence) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._get())

    def __repr__(self) -> str:
        return repr(self._get())


class _BlameContext:
    """What :class:`_Blame` needs, shared by all subscribers; the per-subscriber leaf index is
    built on the first use."""

    def __init__(self, ov: Overlay, tree: RouteTree, paths: _Paths, rho: FloatArray, mean_wait: FloatArray) -> None:
        self.ov, self.tree, self.paths, self.rho, self.mean_wait = ov, tree, paths, rho, mean_wait
        self._index: tuple[IntArray, IntArray] | None = None

    def leaves(self, s: int) -> list[int]:
        """Subscriber s's leaves, by publisher and then path (the order the hops were walked)."""
        if self._index is None:
            tree = self.tree
            order = np.lexsort((tree.leaf_node, tree.node_publisher[tree.leaf_node], tree.leaf_subscriber))
            offset = np.searchsorted(tree.leaf_subscriber[order], np.arange(len(self.ov.subscriber_ids) + 1))
            self._index = (offset.astype(np.int64), order.astype(np.int64))
        offset, order = self._index
        out: list[int] = order[offset[s] : offset[s + 1]].tolist()
        return out

    def contributors(self, s: int, miss: float) -> tuple[Contributor, ...]:
        """Blame for s's misses: the loss part by -log r_l, the lateness part by mean delay added."""
        if not math.isfinite(miss) or miss <= 0.0:
            return ()
        ov, tree = self.ov, self.tree
        links: dict[int, float] = {}
        brokers: dict[int, float] = {}
        total_rate = 0.0
        for leaf in self.leaves(s):
            w = float(self.paths.leaf_rate[leaf])
            total_rate += w
            sub_link = int(self.paths.leaf_link[leaf])
            links[sub_link] = links.get(sub_link, 0.0) + w
            node = int(tree.leaf_node[leaf])
            while node >= 0:
                b = int(tree.node_broker[node])
                brokers[b] = brokers.get(b, 0.0) + w
                link = int(tree.node_link[node])
                links[link] = links.get(link, 0.0) + w
                node = int(tree.node_parent[node])
        return _blame(ov, links, brokers, total_rate, self.rho, self.mean_wait, miss)


def _blame(
    ov: Overlay,
    links: Mapping[int, float],
    brokers: Mapping[int, float],
    total_rate: float,
    rho: FloatArray,
    mean_wait: FloatArray,
    miss: float,
) -> tuple[Contributor, ...]:
    """Shares of the miss probability from per-element matching rates (see :class:`Contributor`)."""
    if total_rate <= 0.0:
        return ()
    reach = 1.0
    loss_weight: dict[str, float] = {}
    delay_weight: dict[str, tuple[float | None, float]] = {}
    for link, w in links.items():
        r = float(ov.link_reliability[link])
        name = f"{ov.link_from[link]}->{ov.link_to[link]}"
        loss_weight[name] = -math.log(max(r, 1e-12)) * w / total_rate
        reach *= r ** (w / total_rate)
        delay_weight[name] = (None, ov.link_delay[link].mean * w / total_rate)
    for b, w in brokers.items():
        d = (mean_wait[b] if math.isfinite(mean_wait[b]) else 1e12) + ov.service[b].mean
        delay_weight[ov.broker_ids[b]] = (float(rho[b]), float(d) * w / total_rate)
    loss_part = min(1.0 - reach, miss)
    late_part = miss - loss_part
    total_loss = sum(loss_weight.values())
    total_delay = sum(d for _u, d in delay_weight.values())
    out: list[Contributor] = []
    for name, (util, d) in delay_weight.items():
        share = 0.0
        if total_loss > 0.0:
            share += loss_part * loss_weight.get(name, 0.0) / total_loss
        if total_delay > 0.0:
            share += late_part * d / total_delay
        out.append(Contributor(name, util, float(d), float(share / miss)))
    out.sort(key=lambda c: -c.share)
    return tuple(out)


def _low_variability(rho: FloatArray, source_scv: FloatArray, cs2: FloatArray) -> NDArray[np.bool_]:
    """Loaded brokers fed by smooth (periodic-like) publishers or with near-constant matching:
    where two-moment waiting times err most (QUEUEING-NOTES §3.1, §3.4, §3.6)."""
    smooth = (source_scv < _LOW_VARIABILITY_SCV) | (cs2 < _LOW_VARIABILITY_SCV)
    out: NDArray[np.bool_] = (rho >= _LOW_VARIABILITY_RHO) & smooth
    return out


def _broker_warnings(ids: Sequence[str], rho: FloatArray, risky: NDArray[np.bool_] | None) -> list[str]:
    warnings: list[str] = []
    for b, bid in enumerate(ids):
        if rho[b] >= 1.0:
            warnings.append(f"{bid}: rho {rho[b]:.2f} >= 1, overloaded; every delivery through it is late")
        elif rho[b] >= RHO_WARNING:
            warnings.append(f"{bid}: rho {rho[b]:.2f} >= {RHO_WARNING}, prediction unreliable")
    if risky is not None and risky.any():
        names = ", ".join(ids[i] for i in np.flatnonzero(risky).tolist())
        warnings.append(
            f"low variability at {names} (periodic-like publishers or near-constant matching at rho >= "
            f"{_LOW_VARIABILITY_RHO}): two-moment waiting times are least accurate there; intervals are wider"
        )
    return warnings


def _assemble(
    ov: Overlay,
    model: str,
    rules: Sequence[str],
    rho: FloatArray,
    broker_rate: FloatArray,
    main: _Queues,
    reliability: FloatArray,
    low: FloatArray,
    high: FloatArray,
    mean_delay: FloatArray,
    p95: Sequence[float | None],
    matching_rate: FloatArray,
    blame: Callable[[int, float], Sequence[Contributor]],
    risky: NDArray[np.bool_] | None,
) -> Prediction:
    """The :class:`Prediction` from per-subscriber and per-broker arrays (both implementations)."""
    tau = np.array([d.mean for d in ov.service])
    cs2 = np.array([d.scv if d.mean > 0 else 0.0 for d in ov.service])
    warnings = _broker_warnings(ov.broker_ids, rho, risky)
    subscribers: dict[str, SubscriberPrediction] = {}
    n_s = len(ov.subscriber_ids)
    r_list, rate_list = reliability.tolist(), (matching_rate * 1000.0).tolist()
    lo_list: list[float | None] = low.tolist() if model == "gg1" else [None] * n_s
    hi_list: list[float | None] = high.tolist() if model == "gg1" else [None] * n_s
    delay_list: list[float | None] = mean_delay.tolist()
    for s in np.flatnonzero(~np.isfinite(mean_delay)).tolist():
        delay_list[s] = None
    for s, (sid, r_s, low_s, high_s, delay_s, p95_s, rate_s) in enumerate(
        zip(ov.subscriber_ids, r_list, lo_list, hi_list, delay_list, p95, rate_list, strict=True)
    ):
        if r_s == r_s:  # not NaN: some content matches
            subscribers[sid] = SubscriberPrediction(r_s, low_s, high_s, delay_s, p95_s, rate_s, blame(s, 1.0 - r_s))
        else:
            warnings.append(f"{sid}: no publisher's content matches its filter; reliability undefined")
            subscribers[sid] = SubscriberPrediction(None, None, None, delay_s, p95_s, rate_s, ())
    mean_wait = main.mean_wait
    brokers = {
        bid: BrokerPrediction(
            arrival_rate_per_s=float(broker_rate[b] * 1000.0),
            rho=float(rho[b]),
            mean_wait_ms=float(mean_wait[b]),
            mean_service_ms=float(tau[b]),
            ca2=float(main.ca2[b]),
            cs2=float(cs2[b]),
            delay_probability=float(main.waits[b].sigma),
            superposition=rules[b],
        )
        for b, bid in enumerate(ov.broker_ids)
    }
    return Prediction(model=model, subscribers=subscribers, brokers=brokers, warnings=tuple(warnings))


def _check_arguments(model: str, superposition: str, grid_points: int) -> None:
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; valid: {', '.join(MODELS)}")
    if superposition not in SUPERPOSITION_RULES:
        raise ValueError(f"unknown superposition rule {superposition!r}; valid: {', '.join(SUPERPOSITION_RULES)}")
    if grid_points < 64:
        raise ValueError(f"grid_points must be at least 64, got {grid_points}")


def _no_brokers() -> ValueError:
    return ValueError("system: no brokers; a SPEC §4 system needs brokers, links, publishers and subscribers")


def _p95_pass(ev: _Evaluator, model: str, rho: FloatArray, q: _Queues, weight: FloatArray, out: FloatArray) -> None:
    """The p95s of the point prediction: departure cdfs on as much of the grid as the search
    can read (:func:`_p95_lengths`), and on the whole grid where that first guess falls short.
    Each broker's delay is worked out on as many points as its nodes need."""
    tree, paths, grid = ev.tree, ev.paths, ev.grid
    broker_len = _p95_lengths(ev.ov, tree, paths, grid, rho, q)
    parts = _p95_rows(ev, weight)
    redo = list(range(len(parts)))
    stops = [int(broker_len[p.broker]) for p in parts]
    while redo:
        lengths = _node_lengths(tree, paths, broker_len)
        delay = ev.broker_delays(grid.n, model, rho, q, _broker_need(ev, grid.n, lengths))
        cdf = ev.departure_table(grid.n, delay, lengths)
        cdf.cumsum()
        short = _p95(ev, cdf, [parts[k] for k in redo], [stops[k] for k in redo], out)
        redo = [redo[k] for k in short]  # again, with their nodes on the whole grid
        broker_len = np.zeros_like(broker_len)
        broker_len[[parts[k].broker for k in redo]] = grid.n
        for k in redo:
            stops[k] = grid.n


def _broker_need(ev: _Evaluator, m: int, lengths: IntArray) -> IntArray:
    """Per broker, the points of its delay that :meth:`_Evaluator.departures` reads for these
    node ``lengths``: the longest of its nodes, as rounded there."""
    need = np.zeros(len(ev.ov.broker_ids), dtype=np.int64)
    np.maximum.at(need, ev.tree.node_broker, _fft_lengths(m, lengths))
    return need


@contextlib.contextmanager
def _allocation_settings() -> Iterator[None]:
    """Pause the cyclic garbage collector, and numpy's requests for transparent huge pages
    (both as they were before, afterwards).

    A large system makes ~10^5 result objects next to a document of millions, and every
    collection would walk them all; nothing here creates reference cycles, so nothing waits
    for the collector. Afterwards, the objects made meanwhile are not left in the youngest
    generation either: its first collection would walk them all once more (about 0.1 s for
    1000 brokers and 10^5 subscribers, at the first allocation after the call). They are
    moved to the oldest generation at once (``gc.freeze`` then ``gc.unfreeze``, which splice
    the generations' lists; skipped where the process keeps frozen objects of its own).

    numpy asks the kernel for huge pages for every array of 4 MiB or more (``madvise``);
    where free huge pages are scarce (a machine shared with other processes), the kernel
    compacts memory to find them at the first touch, which cost up to 0.5 s of system time per
    prediction of 1000 brokers and 10^5 subscribers, against about 0.05 s for ordinary pages
    (measured on the 2-core VM of the benchmark). The switch is numpy's own
    (``_set_madvise_hugepage``; without it, nothing changes)."""
    enabled = gc.isenabled()
    gc.disable()
    hugepages = getattr(getattr(getattr(np, "_core", None), "multiarray", None), "_set_madvise_hugepage", None)
    was = hugepages(False) if hugepages is not None else None
    try:
        yield
    finally:
        if hugepages is not None:
            hugepages(was)
        if gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()
        if enabled:
            gc.enable()


@dataclass(frozen=True, eq=False)
class CompiledSystem:
    """A SPEC §4 system ready for :func:`predict`: validated, matched and routed.

    Build it with :func:`compile_prediction`; :func:`predict` builds one itself unless given it,
    so one system can be predicted under several models or rules for one compile."""

    overlay: Overlay
    matching: Matching
    routes: RouteTree


def compile_prediction(system: Mapping[str, object], matcher: Matcher | None = None) -> CompiledSystem:
    """Validate a SPEC §4 system, match every filter against every content entry and build the
    route tree (:func:`routing.reliability.simulation.validate_system`, ``match_content``, ``compile_routes``).

    >>> exp = lambda mean: {"kind": "exponential", "mean": mean}
    >>> system = {"brokers": [{"id": "b1", "service_ms": exp(5)}],
    ...           "links": [{"from": "p1", "to": "b1", "reliability": 1.0, "delay_ms": exp(1)},
    ...                     {"from": "b1", "to": "s1", "reliability": 1.0, "delay_ms": exp(1)}],
    ...           "publishers": [{"id": "p1", "broker": "b1", "interarrival_ms": exp(10),
    ...                           "content": [{"p": 1.0, "lifetime_ms": 20, "attributes": {"t": 1}}]}],
    ...           "subscribers": [{"id": "s1", "broker": "b1", "filter": "t = 1"}]}
    >>> compiled = compile_prediction(system)
    >>> len(compiled.routes.node_link), len(compiled.routes.leaf_node)
    (1, 1)
    >>> predict(system, compiled=compiled) == predict(system)
    True
    """
    m = matcher if matcher is not None else filter_matcher()
    with _allocation_settings():
        overlay = validate_system(system, m)
        matching = match_content(overlay, m)
        return CompiledSystem(overlay, matching, compile_routes(overlay, matching))


def predict(
    system: Mapping[str, object],
    *,
    model: str = "gg1",
    superposition: str = "auto",
    grid_points: int = 4096,
    matcher: Matcher | None = None,
    network: Network | None = None,
    compiled: CompiledSystem | None = None,
) -> Prediction:
    """Predict R'_s for every subscriber of a SPEC §4 system (``siftstream qos predict``).

    Parameters
    ----------
    system : mapping
        The SPEC §4 document (ignored when ``network`` is given).
    model : {"gg1", "mm1"}
        ``mm1`` is the paper's algorithm; ``gg1`` the QNA / KLB / atom-plus-gamma model.
    superposition : {"auto", "asymptotic", "hybrid"}
        gg1's rule for merging flows at a broker (see the module docstring).
    grid_points : int
        Points of the delay grid (the step is the horizon over this).
    matcher, network, compiled
        The filter semantics (default: SPEC §1 via :mod:`routing.matching.language`), or the system
        already compiled: densely for the simulator (``network``) or by
        :func:`compile_prediction` (``compiled``); either makes ``system`` ignored.

    Returns
    -------
    Prediction

    Raises
    ------
    ValueError
        For an invalid system (naming the element) or an unknown model or rule.

    Notes
    -----
    :func:`predict_reference` is the previous, hop-by-hop implementation of the same model,
    kept as the oracle of the parity tests: both give the same numbers (to rounding).
    """
    _check_arguments(model, superposition, grid_points)
    with _allocation_settings():
        return _predict(system, model, superposition, grid_points, matcher, network, compiled)


def _predict(
    system: Mapping[str, object],
    model: str,
    superposition: str,
    grid_points: int,
    matcher: Matcher | None,
    network: Network | None,
    compiled: CompiledSystem | None,
) -> Prediction:
    if compiled is None and network is not None:
        n_keys, n_subs = network.match.shape
        matching = Matching(np.arange(n_keys, dtype=np.int64), np.arange(n_subs, dtype=np.int64), network.match)
        compiled = CompiledSystem(network, matching, compile_routes(network, matching))
    elif compiled is None:
        compiled = compile_prediction(system, matcher)
    point = _point(compiled, model, superposition, grid_points, point_only=False)
    ov, tree, paths, rho, tau, rules = point.ov, point.tree, point.paths, point.rho, point.tau, point.rules
    states, ev = point.states, point.ev
    n_s = len(ov.subscriber_ids)
    cs2 = np.array([d.scv if d.mean > 0 else 0.0 for d in ov.service])
    main = states[0]
    results = _reliabilities(point)
    reliability = results[0]
    low = high = reliability
    if model == "gg1":
        for r in results[1:]:
            low = np.fmin(low, r)
            high = np.fmax(high, r)

    # Delays of the point prediction: means along the routes, the p95 from the distributions.
    mean_wait = main.mean_wait
    node_mean = _node_means(ov, tree, paths, mean_wait, finite_only=False)
    b = tree.node_broker[tree.leaf_node]
    leaf_mean = node_mean[tree.leaf_node] + mean_wait[b] + tau[b] + paths.link_mean[paths.leaf_link]
    weight = paths.leaf_reach * paths.leaf_rate
    delivered = np.bincount(tree.leaf_subscriber, weights=weight, minlength=n_s)
    with np.errstate(invalid="ignore"):
        delay_sum = np.bincount(tree.leaf_subscriber, weights=weight * leaf_mean, minlength=n_s)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_delay = np.where(delivered > 0, delay_sum / delivered, np.nan)
    p95_ms = np.full(n_s, np.nan)
    if bool((rho < 1.0).any()) and len(tree.leaf_node):
        _p95_pass(ev, model, rho, main, weight, p95_ms)
    p95: list[float | None] = [None if v != v else v for v in p95_ms.tolist()]  # NaN: beyond the grid

    risky = None
    if model == "gg1":
        pub_scv = np.array([d.scv for d in ov.interarrival])
        risky = _low_variability(rho, _source_scv(_publisher_arrivals(ov, tree, paths), pub_scv), cs2)
        node_risky = risky[tree.node_broker].copy()
        for d in range(1, len(paths.depth_start) - 1):
            idx = np.arange(paths.depth_start[d], paths.depth_start[d + 1])
            node_risky[idx] |= node_risky[tree.node_parent[idx]]
        crosses = np.bincount(tree.leaf_subscriber, weights=node_risky[tree.leaf_node], minlength=n_s) > 0
        margin = _BASE_MARGIN + np.where(crosses, _LOW_VARIABILITY_MARGIN, 0.0)
        low = np.clip(low - margin, 0.0, 1.0)
        high = np.clip(high + margin, 0.0, 1.0)

    ctx = _BlameContext(ov, tree, paths, rho, mean_wait)
    return _assemble(
        ov,
        model,
        rules,
        rho,
        paths.broker_rate,
        main,
        reliability,
        low,
        high,
        mean_delay,
        p95,
        paths.matching_rate,
        functools.partial(_Blame, ctx),
        risky,
    )


@dataclass(frozen=True, eq=False)
class _Point:
    """What every pass of one prediction shares: the paths, the loads, the queue states (the
    point prediction's first), the grid and its evaluator."""

    model: str
    ov: Overlay
    tree: RouteTree
    paths: _Paths
    tau: FloatArray
    rho: FloatArray
    rules: list[str]
    states: list[_Queues]
    ev: _Evaluator


def _point(compiled: CompiledSystem, model: str, superposition: str, grid_points: int, point_only: bool) -> _Point:
    """The queue states of a compiled system: under the chosen rules (the point prediction),
    then, for gg1 and unless ``point_only``, under the other rules (the interval)."""
    ov, matching, tree = compiled.overlay, compiled.matching, compiled.routes
    if not ov.broker_ids:
        raise _no_brokers()
    paths = _paths(ov, matching, tree)
    n_b = len(ov.broker_ids)
    tau = np.array([d.mean for d in ov.service])
    rho = paths.broker_rate * tau

    # The queue states: the chosen rules give the point prediction, the others the interval.
    states: list[_Queues] = []
    if model == "gg1":
        auto = _auto_rules(ov, paths)
        rule_sets = {"auto": auto, "asymptotic": np.zeros(n_b, dtype=np.bool_), "hybrid": np.ones(n_b, dtype=np.bool_)}
        chosen = rule_sets[superposition]
        rules = ["hybrid" if h else "asymptotic" for h in chosen.tolist()]
        arrivals = _publisher_arrivals(ov, tree, paths)
        states.append(_queues(ov, paths, model, chosen, arrivals=arrivals))
        if not point_only:
            for name in ("asymptotic", "hybrid"):
                if not np.array_equal(rule_sets[name], chosen):
                    states.append(_queues(ov, paths, model, rule_sets[name], arrivals=arrivals))
            states.append(_queues(ov, paths, model, rule_sets["asymptotic"], thinning=False))
    else:
        rules = ["-"] * n_b
        states.append(_queues(ov, paths, model, None))
    main = states[0]
    grid = _grid(ov, tree, paths, main.mean_wait, _wait_variance(main.waits), grid_points)
    return _Point(model, ov, tree, paths, tau, rho, rules, states, _Evaluator(ov, tree, paths, grid))


def _reliabilities(point: _Point) -> list[FloatArray]:
    """R'_s per subscriber under each queue state of ``point``."""
    ev, paths, tree, model = point.ev, point.paths, point.tree, point.model
    # Reliability needs the delay distributions up to the longest lifetime only.
    lifetimes, lg_class = np.unique(paths.group_lifetime[paths.lg_group], return_inverse=True)
    cells = _lifetime_cells(ev.grid, lifetimes)
    m_rel = int(max([1, *(c + (2 if f > 0 else 1) for c, f in zip(*cells, strict=True))]))
    m_rel = min(m_rel, ev.grid.n)
    departures = [ev.departures(m_rel, ev.broker_delays(m_rel, model, point.rho, q)) for q in point.states]
    on_time = _on_time(ev, m_rel, departures, cells)
    n_s = len(point.ov.subscriber_ids)
    return [_reliability(paths, tree, on_time[e], lg_class.reshape(-1), n_s) for e in range(len(point.states))]


def predict_reliability(
    compiled: CompiledSystem, *, model: str = "gg1", superposition: str = "auto", grid_points: int = 4096
) -> dict[str, float]:
    """R'_s of the point prediction of :func:`predict` alone, per subscriber (those with a
    prediction): no interval, delays, broker numbers or blame. What a bootstrap redraw reads
    (:meth:`routing.monitors.qos.QosMonitor._bootstrap`), at a fraction of the cost: one queue
    state instead of the gg1 interval's three or four, and no p95 search.

    The numbers are :func:`predict`'s ``reliability`` (the same arithmetic; a matrix product
    over fewer rows may round differently, so to a few ulps).

    >>> exp = lambda mean: {"kind": "exponential", "mean": mean}
    >>> system = {"brokers": [{"id": "b1", "service_ms": exp(5)}],
    ...           "links": [{"from": "p1", "to": "b1", "reliability": 1.0, "delay_ms": exp(1)},
    ...                     {"from": "b1", "to": "s1", "reliability": 0.9, "delay_ms": exp(1)}],
    ...           "publishers": [{"id": "p1", "broker": "b1", "interarrival_ms": exp(10),
    ...                           "content": [{"p": 1.0, "lifetime_ms": 20, "attributes": {"t": 1}}]}],
    ...           "subscribers": [{"id": "s1", "broker": "b1", "filter": "t = 1"}]}
    >>> compiled = compile_prediction(system)
    >>> full = predict(system, compiled=compiled).subscribers["s1"].reliability
    >>> abs(predict_reliability(compiled)["s1"] - full) < 1e-12
    True
    """
    _check_arguments(model, superposition, grid_points)
    with _allocation_settings():
        point = _point(compiled, model, superposition, grid_points, point_only=True)
        reliability = _reliabilities(point)[0]
    ids = point.ov.subscriber_ids
    return {sid: float(r) for sid, r in zip(ids, reliability.tolist(), strict=True) if r == r}


# --------------------------------------------------------------------------------------------
# The reference implementation: the hop-by-hop network pass on the dense Network
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _RefFlows:
    """Rates of a compiled network (per ms), independent of the queueing model."""

    key_rate: FloatArray  # per content key: lambda_p p_k
    hop_reach: FloatArray  # per route hop (global index): P(the hop's transmission arrives)
    hop_key: NDArray[np.int64]
    hop_global_parent: NDArray[np.int64]
    link_sent: FloatArray  # per link: transmissions per ms
    link_arrived: FloatArray  # per link: arrivals per ms
    broker_rate: FloatArray  # per broker: arrivals per ms


def _ref_flows(net: Network) -> _RefFlows:
    n_keys = len(net.content_p)
    pub_rate = np.array([1.0 / d.mean if d.mean > 0 else math.inf for d in net.interarrival])
    key_rate = pub_rate[net.content_publisher] * net.content_p if n_keys else np.zeros(0)
    n_hops = len(net.route_link)
    hop_key = np.repeat(np.arange(n_keys), np.diff(net.route_offset))
    start = net.route_offset[:-1][hop_key] if n_hops else np.zeros(0, dtype=np.int64)
    parent = np.where(net.route_parent >= 0, net.route_parent + start, -1)
    r = net.link_reliability[net.route_link]
    reach = np.empty(n_hops)
    sent_p = np.empty(n_hops)
    for h in range(n_hops):  # parents come before children
        up = 1.0 if parent[h] < 0 else reach[parent[h]]
        sent_p[h] = up
        reach[h] = up * r[h]
    n_links = len(net.link_from)
    link_sent = np.bincount(net.route_link, weights=key_rate[hop_key] * sent_p, minlength=n_links)
    link_arrived = np.bincount(net.route_link, weights=key_rate[hop_key] * reach, minlength=n_links)
    to_broker = net.link_broker >= 0
    broker_rate = np.bincount(
        net.link_broker[to_broker], weights=link_arrived[to_broker], minlength=len(net.broker_ids)
    )
    return _RefFlows(
        key_rate=key_rate,
        hop_reach=reach,
        hop_key=hop_key.astype(np.int64),
        hop_global_parent=parent.astype(np.int64),
        link_sent=link_sent.astype(np.float64),
        link_arrived=link_arrived.astype(np.float64),
        broker_rate=broker_rate.astype(np.float64),
    )


def _ref_arrival_scvs(
    net: Network, flows: _RefFlows, rho: FloatArray, cs2: FloatArray, rules: list[str], thinning: bool = True
) -> FloatArray:
    """Per broker, the QNA arrival scv: the fixed point of departure, thinning, superposition.

    ``thinning=False`` keeps a flow's scv through filtering and loss: the smooth end of the
    interval, for superposed periodic flows whose effective variability is well below their
    renewal scv (QUEUEING-NOTES §3.4)."""
    n_b = len(net.broker_ids)
    publisher_of_link = {int(link): p for p, link in enumerate(net.publisher_link)}
    in_links: list[list[int]] = [[] for _ in range(n_b)]
    for link, b in enumerate(net.link_broker):
        if b >= 0 and flows.link_arrived[link] > 0.0:
            in_links[int(b)].append(link)
    ca2 = np.ones(n_b)
    for _ in range(_FIXED_POINT_ITERATIONS):
        dep = np.array([departure_scv(rho[b], ca2[b], cs2[b]) for b in range(n_b)])
        new = np.empty(n_b)
        for b in range(n_b):
            rates: list[float] = []
            scvs: list[float] = []
            for link in in_links[b]:
                src = int(net.link_source_broker[link])
                r = float(net.link_reliability[link])
                if src < 0:
                    c2 = net.interarrival[publisher_of_link[link]].scv
                    c2 = thinned_scv(r, c2) if thinning else c2
                else:
                    forward = flows.link_sent[link] / flows.broker_rate[src] if flows.broker_rate[src] > 0 else 0.0
                    c2 = thinned_scv(min(forward, 1.0) * r, float(dep[src])) if thinning else float(dep[src])
                rates.append(float(flows.link_arrived[link]))
                scvs.append(c2)
            new[b] = superposed_scv(rates, scvs, float(rho[b]), rules[b]) if rates else 1.0
        done = float(np.max(np.abs(new - ca2))) < _FIXED_POINT_TOLERANCE if n_b else True
        ca2 = new
        if done:
            break
    return ca2


def _ref_auto_rules(net: Network, flows: _RefFlows) -> list[str]:
    """Per broker: hybrid when link jitter is large against its input flows' spacing."""
    rules: list[str] = []
    for b in range(len(net.broker_ids)):
        links = np.flatnonzero((net.link_broker == b) & (flows.link_arrived > 0.0))
        total = float(flows.link_arrived[links].sum())
        if total <= 0.0:
            rules.append("asymptotic")
            continue
        ratio = sum(
            float(flows.link_arrived[i]) / total * math.sqrt(net.link_delay[i].variance) * float(flows.link_arrived[i])
            for i in links
        )
        rules.append("hybrid" if ratio >= _JITTER_THRESHOLD else "asymptotic")
    return rules


def _ref_grid(net: Network, flows: _RefFlows, wait_means: FloatArray, wait_vars: FloatArray, points: int) -> Grid:
    """Cover every lifetime and the bulk (mean + 6 sd) of every route's delay."""
    n_hops = len(net.route_link)
    mean = np.zeros(n_hops)
    var = np.zeros(n_hops)
    link_mean = np.array([d.mean for d in net.link_delay])
    link_var = np.array([d.variance for d in net.link_delay])
    service_mean = np.array([d.mean for d in net.service])
    service_var = np.array([d.variance for d in net.service])
    for h in range(n_hops):
        link = int(net.route_link[h])
        m, v = link_mean[link], link_var[link]
        par = flows.hop_global_parent[h]
        if par >= 0:
            b = int(net.link_broker[net.route_link[par]])
            w_m = wait_means[b] if math.isfinite(wait_means[b]) else 0.0
            w_v = wait_vars[b] if math.isfinite(wait_vars[b]) else 0.0
            m += mean[par] + w_m + service_mean[b]
            v += var[par] + w_v + service_var[b]
        mean[h], var[h] = m, v
    life = float(net.content_lifetime_ms.max()) if len(net.content_lifetime_ms) else 1.0
    bulk = float(np.max(mean + 6.0 * np.sqrt(var))) if n_hops else life
    horizon = max(1.25 * life, min(bulk, 20.0 * life), 1e-6)
    return Grid(step=horizon / points, n=points)


def _broker_delay_pmf(
    grid: Grid, model: str, service_pmf: FloatArray, rho: float, wait: WaitModel, tau: float
) -> FloatArray:
    if rho >= 1.0:
        return np.zeros(grid.n)
    if model == "mm1":
        return grid.shift(service_pmf, mm1_wait(rho, tau))
    if wait.mean <= 0.0:
        return service_pmf
    w_pmf = grid.pmf_of_cdf(lambda x: 1.0 - wait.survival(x))
    return grid.convolve(w_pmf, service_pmf)


@dataclass
class _RefPass:
    """One evaluation of the network under a model and superposition rules."""

    reliability: FloatArray  # per subscriber, NaN when it matches nothing
    mean_delay: FloatArray
    p95: list[float | None]
    ca2: FloatArray
    waits: list[WaitModel]
    mean_wait: FloatArray
    hop_pmf_ids: NDArray[np.int64]


def _ref_evaluate(
    net: Network, flows: _RefFlows, grid: Grid, model: str, rules: list[str], thinning: bool = True
) -> _RefPass:
    n_b = len(net.broker_ids)
    tau = np.array([d.mean for d in net.service])
    cs2 = np.array([d.scv if d.mean > 0 else 0.0 for d in net.service])
    ds3 = np.array([d.third_moment / d.mean**3 if d.mean > 0 else 1.0 for d in net.service])
    rho = flows.broker_rate * tau
    if model == "mm1":
        ca2 = np.ones(n_b)
        waits = [WaitModel(mm1_wait(rho[b], tau[b]), min(rho[b], 1.0), 1.0) for b in range(n_b)]
    else:
        ca2 = _ref_arrival_scvs(net, flows, rho, cs2, rules, thinning)
        if thinning:
            hybrid = np.array([r == "hybrid" for r in rules], dtype=np.bool_)
            ca2 = _blend_sources(ca2, _ref_publisher_arrivals(net, flows), net.interarrival, rho, hybrid)
        waits = [gg1_wait_model(rho[b], ca2[b], cs2[b], ds3[b], tau[b]) for b in range(n_b)]
    service_pmf = [grid.pmf(d) for d in net.service]
    delay_pmf = [_broker_delay_pmf(grid, model, service_pmf[b], rho[b], waits[b], tau[b]) for b in range(n_b)]
    delay_spectrum = [grid.spectrum(p) for p in delay_pmf]
    link_pmf: dict[int, FloatArray] = {}
    link_spectrum: dict[int, NDArray[np.complex128]] = {}

    # Arrival-delay pmf per route hop, shared by hops with the same publisher and link path;
    # a hop's departure pmf (arrival plus the broker's delay) is shared by its children.
    n_hops = len(net.route_link)
    memo: dict[tuple[int, int, int], int] = {}
    pmfs: list[FloatArray] = []
    means: list[float] = []
    departures: dict[int, FloatArray] = {}
    hop_id = np.empty(n_hops, dtype=np.int64)
    link_mean = [d.mean for d in net.link_delay]
    for h in range(n_hops):
        link = int(net.route_link[h])
        par = int(flows.hop_global_parent[h])
        if par < 0:
            key = (0, int(net.content_publisher[flows.hop_key[h]]), link)
        else:
            key = (1, int(hop_id[par]), link)
        found = memo.get(key)
        if found is None:
            if link not in link_pmf:
                link_pmf[link] = grid.pmf(net.link_delay[link])
                link_spectrum[link] = grid.spectrum(link_pmf[link])
            if par < 0:
                pmf, mean = link_pmf[link], link_mean[link]
            else:
                up = int(hop_id[par])
                b = int(net.link_broker[net.route_link[par]])
                if up not in departures:
                    departures[up] = grid.convolve(pmfs[up], delay_spectrum[b])
                pmf = grid.convolve(departures[up], link_spectrum[link])
                mean = means[up] + waits[b].mean + tau[b] + link_mean[link]
            found = memo[key] = len(pmfs)
            pmfs.append(pmf)
            means.append(mean)
        hop_id[h] = found

    n_s = len(net.subscriber_ids)
    to_sub = np.flatnonzero(net.link_subscriber[net.route_link] >= 0)
    sub_of = net.link_subscriber[net.route_link[to_sub]]
    keys = flows.hop_key[to_sub]
    matching_rate = flows.key_rate @ net.match if len(flows.key_rate) else np.zeros(n_s)
    miss = np.ones((len(flows.key_rate), n_s))  # P(no on-time copy) per (key, subscriber)
    delivered = np.zeros(n_s)
    delay_sum = np.zeros(n_s)
    mix = np.zeros((n_s, grid.n))
    cums: dict[int, FloatArray] = {}
    edges = (np.arange(grid.n, dtype=np.float64) + 0.5) * grid.step  # cdf_at's interpolation points
    for hop, s_, k_ in zip(to_sub, sub_of, keys, strict=True):
        s, k = int(s_), int(k_)
        pmf = pmfs[int(hop_id[hop])]
        reach = flows.hop_reach[hop]
        node = int(hop_id[hop])
        if node not in cums:
            cums[node] = np.cumsum(pmf)
        on_time = reach * float(np.interp(float(net.content_lifetime_ms[k]), edges, cums[node], left=0.0))
        miss[k, s] *= 1.0 - min(on_time, 1.0)
        w = flows.key_rate[k] * reach
        delivered[s] += w
        delay_sum[s] += w * means[int(hop_id[hop])]
        mix[s] += w * pmf
    on_rate = flows.key_rate @ (1.0 - miss) if len(flows.key_rate) else np.zeros(n_s)
    with np.errstate(invalid="ignore", divide="ignore"):
        reliability = np.where(matching_rate > 0, on_rate / matching_rate, np.nan)
        mean_delay = np.where(delivered > 0, delay_sum / delivered, np.nan)
    p95 = [grid.quantile(mix[s], 0.95, float(delivered[s])) for s in range(n_s)]
    mean_wait = np.array([w.mean for w in waits])
    return _RefPass(reliability, mean_delay, p95, ca2, waits, mean_wait, hop_id)


def _ref_publisher_arrivals(net: Network, flows: _RefFlows) -> FloatArray:
    """:func:`_publisher_arrivals` from the route hops."""
    at_broker = np.flatnonzero(net.link_broker[net.route_link] >= 0)
    arrivals = np.zeros((len(net.broker_ids), len(net.publisher_ids)))
    np.add.at(
        arrivals,
        (net.link_broker[net.route_link[at_broker]], net.content_publisher[flows.hop_key[at_broker]]),
        flows.key_rate[flows.hop_key[at_broker]] * flows.hop_reach[at_broker],
    )
    return arrivals


def _ref_path_brokers(net: Network, flows: _RefFlows) -> list[set[int]]:
    """Per subscriber, the brokers its matching events cross."""
    out: list[set[int]] = [set() for _ in net.subscriber_ids]
    for h in np.flatnonzero(net.link_subscriber[net.route_link] >= 0):
        s = int(net.link_subscriber[net.route_link[h]])
        par = int(flows.hop_global_parent[h])
        while par >= 0:
            out[s].add(int(net.link_broker[net.route_link[par]]))
            par = int(flows.hop_global_parent[par])
    return out


def _ref_contributors(
    net: Network, flows: _RefFlows, s: int, rho: FloatArray, mean_wait: FloatArray, miss: float
) -> tuple[Contributor, ...]:
    """Blame for s's misses: the loss part by -log r_l, the lateness part by mean delay added."""
    if not math.isfinite(miss) or miss <= 0.0:
        return ()
    links: dict[int, float] = {}
    brokers: dict[int, float] = {}
    total_rate = 0.0
    for h in np.flatnonzero(net.link_subscriber[net.route_link] == s):
        w = float(flows.key_rate[flows.hop_key[h]])
        total_rate += w
        i = int(h)
        while i >= 0:
            link = int(net.route_link[i])
            links[link] = links.get(link, 0.0) + w
            par = int(flows.hop_global_parent[i])
            if par >= 0:
                b = int(net.link_broker[net.route_link[par]])
                brokers[b] = brokers.get(b, 0.0) + w
            i = par
    return _blame(net, links, brokers, total_rate, rho, mean_wait, miss)


def predict_reference(
    system: Mapping[str, object],
    *,
    model: str = "gg1",
    superposition: str = "auto",
    grid_points: int = 4096,
    matcher: Matcher | None = None,
    network: Network | None = None,
) -> Prediction:
    """:func:`predict` the readable way, the oracle of its parity tests (CONVENTIONS 6).

    It walks every hop of every content entry's route in the dense :class:`Network` of
    :func:`routing.reliability.simulation.compile_system`, convolving the delay pmfs along each route
    (memoised per publisher and link path) and each subscriber's own link on the whole grid.
    The per-(link, subscriber) and per-(content key, hop) arrays make it quadratic: use it for
    systems of a few hundred subscribers."""
    _check_arguments(model, superposition, grid_points)
    net = network if network is not None else compile_system(system, matcher or filter_matcher())
    if not net.broker_ids:
        raise _no_brokers()
    flows = _ref_flows(net)
    n_b = len(net.broker_ids)
    tau = np.array([d.mean for d in net.service])
    cs2 = np.array([d.scv if d.mean > 0 else 0.0 for d in net.service])
    rho = flows.broker_rate * tau

    if model == "gg1":
        rule_sets = {
            "auto": _ref_auto_rules(net, flows),
            "asymptotic": ["asymptotic"] * n_b,
            "hybrid": ["hybrid"] * n_b,
        }
        chosen = rule_sets[superposition]
    else:
        rule_sets = {}
        chosen = ["-"] * n_b

    # A first pass for the waits sizes the grid; the chosen rules give the point prediction.
    probe = _ref_evaluate(net, flows, Grid(1.0, 64), model, chosen)
    grid = _ref_grid(net, flows, probe.mean_wait, _wait_variance(probe.waits), grid_points)
    main = _ref_evaluate(net, flows, grid, model, chosen)
    low = high = main.reliability
    risky = None
    if model == "gg1":
        others = [
            _ref_evaluate(net, flows, grid, model, rules).reliability
            for name, rules in rule_sets.items()
            if name in ("asymptotic", "hybrid") and rules != chosen
        ]
        others.append(_ref_evaluate(net, flows, grid, model, rule_sets["asymptotic"], thinning=False).reliability)
        for r in others:
            low = np.fmin(low, r)
            high = np.fmax(high, r)
        pub_scv = np.array([d.scv for d in net.interarrival])
        risky = _low_variability(rho, _source_scv(_ref_publisher_arrivals(net, flows), pub_scv), cs2)
        paths = _ref_path_brokers(net, flows)
        margin = np.array(
            [_BASE_MARGIN + (_LOW_VARIABILITY_MARGIN if any(risky[b] for b in p) else 0.0) for p in paths]
        )
        low = np.clip(low - margin, 0.0, 1.0)
        high = np.clip(high + margin, 0.0, 1.0)

    n_s = len(net.subscriber_ids)
    matching_rate = flows.key_rate @ net.match if len(flows.key_rate) else np.zeros(n_s)
    return _assemble(
        net,
        model,
        chosen,
        rho,
        flows.broker_rate,
        _Queues(main.ca2, main.waits),
        main.reliability,
        low,
        high,
        main.mean_delay,
        main.p95,
        matching_rate,
        lambda s, miss: _ref_contributors(net, flows, s, rho, main.mean_wait, miss),
        risky,
    )
