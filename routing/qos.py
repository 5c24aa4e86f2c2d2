"""Predicted real-time reliability R'_s of every subscriber of a SPEC §4 broker network.

Two models share one pipeline (``siftstream qos predict --model gg1|mm1``):

``mm1``, the baseline, is the algorithm of Pongthawornkamol, Nahrstedt and Wang, "Towards
Timeliness and Reliability Analysis of Distributed Content-based Publish/Subscribe Systems over
Best-effort Networks" (``seeds/pongthawornkamol-timeliness-reliability-analysis.txt``):

- filter propagation (§4.1) and per-link rates and contents (§4.2, Eq. 1-4) are the routes of
  :func:`routing.simulation.compile_system`: every content entry k of publisher p crosses link l
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

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray
from scipy import stats

from routing.distributions import Distribution
from routing.simulation import Matcher, Network, compile_system

__all__ = [
    "MODELS",
    "SUPERPOSITION_RULES",
    "BrokerPrediction",
    "Contributor",
    "Grid",
    "Prediction",
    "SubscriberPrediction",
    "WaitModel",
    "conditional_delay_scv",
    "departure_scv",
    "filter_matcher",
    "gg1_wait_model",
    "hybrid_weight",
    "kingman_wait",
    "klb_wait",
    "mm1_wait",
    "predict",
    "qna_delay_probability",
    "superposed_scv",
    "thinned_scv",
    "to_spec_output",
]

FloatArray = NDArray[np.float64]
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
    contributors: tuple[Contributor, ...] = ()


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
# The network pass
# --------------------------------------------------------------------------------------------


def filter_matcher() -> Matcher:
    """SPEC §1 semantics through :mod:`routing.filters`, each filter parsed once."""
    from routing.filters import parse_filter

    cache: dict[str, Any] = {}

    def match(text: str, attributes: Mapping[str, object]) -> bool:
        f = cache.get(text)
        if f is None:
            f = cache[text] = parse_filter(text)
        return bool(f.matches(attributes)) if attributes else True

    return match


@dataclass(frozen=True)
class _Flows:
    """Rates of a compiled network (per ms), independent of the queueing model."""

    key_rate: FloatArray  # per content key: lambda_p p_k
    hop_reach: FloatArray  # per route hop (global index): P(the hop's transmission arrives)
    hop_key: NDArray[np.int64]
    hop_global_parent: NDArray[np.int64]
    link_sent: FloatArray  # per link: transmissions per ms
    link_arrived: FloatArray  # per link: arrivals per ms
    broker_rate: FloatArray  # per broker: arrivals per ms


def _flows(net: Network) -> _Flows:
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
    return _Flows(
        key_rate=key_rate,
        hop_reach=reach,
        hop_key=hop_key.astype(np.int64),
        hop_global_parent=parent.astype(np.int64),
        link_sent=link_sent.astype(np.float64),
        link_arrived=link_arrived.astype(np.float64),
        broker_rate=broker_rate.astype(np.float64),
    )


def _arrival_scvs(
    net: Network, flows: _Flows, rho: FloatArray, cs2: FloatArray, rules: list[str], thinning: bool = True
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


def _auto_rules(net: Network, flows: _Flows) -> list[str]:
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


def _grid(net: Network, flows: _Flows, wait_means: FloatArray, wait_vars: FloatArray, points: int) -> Grid:
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
class _Pass:
    """One evaluation of the network under a model and superposition rules."""

    reliability: FloatArray  # per subscriber, NaN when it matches nothing
    mean_delay: FloatArray
    p95: list[float | None]
    ca2: FloatArray
    waits: list[WaitModel]
    mean_wait: FloatArray
    hop_pmf_ids: NDArray[np.int64]


def _evaluate(net: Network, flows: _Flows, grid: Grid, model: str, rules: list[str], thinning: bool = True) -> _Pass:
    n_b = len(net.broker_ids)
    tau = np.array([d.mean for d in net.service])
    cs2 = np.array([d.scv if d.mean > 0 else 0.0 for d in net.service])
    ds3 = np.array([d.third_moment / d.mean**3 if d.mean > 0 else 1.0 for d in net.service])
    rho = flows.broker_rate * tau
    if model == "mm1":
        ca2 = np.ones(n_b)
        waits = [WaitModel(mm1_wait(rho[b], tau[b]), min(rho[b], 1.0), 1.0) for b in range(n_b)]
    else:
        ca2 = _arrival_scvs(net, flows, rho, cs2, rules, thinning)
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
    return _Pass(reliability, mean_delay, p95, ca2, waits, mean_wait, hop_id)


def _source_scv(net: Network, flows: _Flows) -> FloatArray:
    """Per broker, the rate-weighted inter-publication scv of the publishers whose events it
    processes (1 where nothing arrives)."""
    at_broker = np.flatnonzero(net.link_broker[net.route_link] >= 0)
    b = net.link_broker[net.route_link[at_broker]]
    w = flows.key_rate[flows.hop_key[at_broker]] * flows.hop_reach[at_broker]
    pub_scv = np.array([d.scv for d in net.interarrival])
    scv = pub_scv[net.content_publisher[flows.hop_key[at_broker]]] if len(at_broker) else np.zeros(0)
    n_b = len(net.broker_ids)
    total = np.bincount(b, weights=w, minlength=n_b)
    weighted = np.bincount(b, weights=w * scv, minlength=n_b)
    out: FloatArray = np.where(total > 0, weighted / np.where(total > 0, total, 1.0), 1.0)
    return out


def _low_variability(rho: FloatArray, source_scv: FloatArray, cs2: FloatArray) -> NDArray[np.bool_]:
    """Loaded brokers fed by smooth (periodic-like) publishers or with near-constant matching:
    where two-moment waiting times err most (QUEUEING-NOTES §3.1, §3.4, §3.6)."""
    smooth = (source_scv < _LOW_VARIABILITY_SCV) | (cs2 < _LOW_VARIABILITY_SCV)
    out: NDArray[np.bool_] = (rho >= _LOW_VARIABILITY_RHO) & smooth
    return out


def _path_brokers(net: Network, flows: _Flows) -> list[set[int]]:
    """Per subscriber, the brokers its matching events cross."""
    out: list[set[int]] = [set() for _ in net.subscriber_ids]
    for h in np.flatnonzero(net.link_subscriber[net.route_link] >= 0):
        s = int(net.link_subscriber[net.route_link[h]])
        par = int(flows.hop_global_parent[h])
        while par >= 0:
            out[s].add(int(net.link_broker[net.route_link[par]]))
            par = int(flows.hop_global_parent[par])
    return out


def _contributors(
    net: Network, flows: _Flows, s: int, rho: FloatArray, mean_wait: FloatArray, miss: float
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
    if total_rate <= 0.0:
        return ()
    reach = 1.0
    loss_weight: dict[str, float] = {}
    delay_weight: dict[str, tuple[float | None, float]] = {}
    for link, w in links.items():
        r = float(net.link_reliability[link])
        name = f"{net.link_from[link]}->{net.link_to[link]}"
        loss_weight[name] = -math.log(max(r, 1e-12)) * w / total_rate
        reach *= r ** (w / total_rate)
        delay_weight[name] = (None, net.link_delay[link].mean * w / total_rate)
    for b, w in brokers.items():
        d = (mean_wait[b] if math.isfinite(mean_wait[b]) else 1e12) + net.service[b].mean
        delay_weight[net.broker_ids[b]] = (float(rho[b]), float(d) * w / total_rate)
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


def predict(
    system: Mapping[str, object],
    *,
    model: str = "gg1",
    superposition: str = "auto",
    grid_points: int = 4096,
    matcher: Matcher | None = None,
    network: Network | None = None,
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
    matcher, network
        The filter semantics (default: SPEC §1 via :mod:`routing.filters`) or an already
        compiled network.

    Returns
    -------
    Prediction

    Raises
    ------
    ValueError
        For an invalid system (naming the element) or an unknown model or rule.
    """
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; valid: {', '.join(MODELS)}")
    if superposition not in SUPERPOSITION_RULES:
        raise ValueError(f"unknown superposition rule {superposition!r}; valid: {', '.join(SUPERPOSITION_RULES)}")
    if grid_points < 64:
        raise ValueError(f"grid_points must be at least 64, got {grid_points}")
    net = network if network is not None else compile_system(system, matcher or filter_matcher())
    if not net.broker_ids:
        raise ValueError("system: no brokers; a SPEC §4 system needs brokers, links, publishers and subscribers")
    flows = _flows(net)
    n_b = len(net.broker_ids)
    tau = np.array([d.mean for d in net.service])
    cs2 = np.array([d.scv if d.mean > 0 else 0.0 for d in net.service])
    rho = flows.broker_rate * tau

    if model == "gg1":
        rule_sets = {
            "auto": _auto_rules(net, flows),
            "asymptotic": ["asymptotic"] * n_b,
            "hybrid": ["hybrid"] * n_b,
        }
        chosen = rule_sets[superposition]
    else:
        rule_sets = {}
        chosen = ["-"] * n_b

    # A first pass for the waits sizes the grid; the chosen rules give the point prediction.
    probe = _evaluate(net, flows, Grid(1.0, 64), model, chosen)
    wait_var = np.array(
        [
            (w.mean**2) * ((w.cd2 + 1.0 - w.sigma) / w.sigma) if w.sigma > 0 and math.isfinite(w.mean) else 0.0
            for w in probe.waits
        ]
    )
    grid = _grid(net, flows, probe.mean_wait, wait_var, grid_points)
    main = _evaluate(net, flows, grid, model, chosen)
    low = high = main.reliability
    if model == "gg1":
        others = [
            _evaluate(net, flows, grid, model, rules).reliability
            for name, rules in rule_sets.items()
            if name in ("asymptotic", "hybrid") and rules != chosen
        ]
        others.append(_evaluate(net, flows, grid, model, rule_sets["asymptotic"], thinning=False).reliability)
        for r in others:
            low = np.fmin(low, r)
            high = np.fmax(high, r)
        risky = _low_variability(rho, _source_scv(net, flows), cs2)
        paths = _path_brokers(net, flows)
        margin = np.array(
            [_BASE_MARGIN + (_LOW_VARIABILITY_MARGIN if any(risky[b] for b in p) else 0.0) for p in paths]
        )
        low = np.clip(low - margin, 0.0, 1.0)
        high = np.clip(high + margin, 0.0, 1.0)

    warnings: list[str] = []
    for b, bid in enumerate(net.broker_ids):
        if rho[b] >= 1.0:
            warnings.append(f"{bid}: rho {rho[b]:.2f} >= 1, overloaded; every delivery through it is late")
        elif rho[b] >= RHO_WARNING:
            warnings.append(f"{bid}: rho {rho[b]:.2f} >= {RHO_WARNING}, prediction unreliable")
    if model == "gg1":
        risky = _low_variability(rho, _source_scv(net, flows), cs2)
        if risky.any():
            names = ", ".join(net.broker_ids[i] for i in np.flatnonzero(risky))
            warnings.append(
                f"low variability at {names} (periodic-like publishers or near-constant matching at rho >= "
                f"{_LOW_VARIABILITY_RHO}): two-moment waiting times are least accurate there; intervals are wider"
            )

    matching_rate = flows.key_rate @ net.match * 1000.0 if len(flows.key_rate) else np.zeros(len(net.subscriber_ids))
    subscribers: dict[str, SubscriberPrediction] = {}
    for s, sid in enumerate(net.subscriber_ids):
        r_s = float(main.reliability[s])
        defined = math.isfinite(r_s)
        if not defined:
            warnings.append(f"{sid}: no publisher's content matches its filter; reliability undefined")
        subscribers[sid] = SubscriberPrediction(
            reliability=r_s if defined else None,
            reliability_low=float(low[s]) if defined and model == "gg1" else None,
            reliability_high=float(high[s]) if defined and model == "gg1" else None,
            mean_delay_ms=float(main.mean_delay[s]) if math.isfinite(main.mean_delay[s]) else None,
            p95_delay_ms=main.p95[s],
            matching_rate_per_s=float(matching_rate[s]),
            contributors=_contributors(net, flows, s, rho, main.mean_wait, 1.0 - r_s) if defined else (),
        )
    brokers = {
        bid: BrokerPrediction(
            arrival_rate_per_s=float(flows.broker_rate[b] * 1000.0),
            rho=float(rho[b]),
            mean_wait_ms=float(main.mean_wait[b]),
            mean_service_ms=float(tau[b]),
            ca2=float(main.ca2[b]),
            cs2=float(cs2[b]),
            delay_probability=float(main.waits[b].sigma),
            superposition=chosen[b],
        )
        for b, bid in enumerate(net.broker_ids)
    }
    return Prediction(model=model, subscribers=subscribers, brokers=brokers, warnings=tuple(warnings))
