"""Predicted real-time reliability R'_s of every subscriber of a docs/reference/qos-predict.md broker network.

Two models share one pipeline (``siftstream qos predict --model gg1|mm1``):

``mm1``, the baseline, is the algorithm of Pongthawornkamol, Nahrstedt and Wang, "Towards
Timeliness and Reliability Analysis of Distributed Content-based Publish/Subscribe Systems over
Best-effort Networks":

- filter propagation (§4.1) and per-link rates and contents (§4.2, Eq. 1-4) are the routes of
  :func:`routing.reliability.system.compile_routes`: every content entry k of publisher p crosses link l
  iff a subscriber downstream of l matches it, so lambda_l = sum over k of lambda_p C_p(k) times
  the reliabilities up to and including l (:mod:`routing.reliability.propagation`);
- broker delay (§4.3, Eq. 5-7): mean wait q_b = lambda_b / (mu_b (mu_b - lambda_b)) and the
  broker delay is the service distribution shifted by q_b (:mod:`routing.reliability.queueing`);
- content-remain time (§4.4, Eq. 8-10) and R'_s (Eq. 11): the remaining lifetime is the lifetime
  minus the sum of link and broker delays along the route. The paper propagates C_l(a, d) link
  by link; the convolutions commute, so evaluating them along each route (sharing route
  prefixes) gives the same numbers with less bookkeeping (docs/reference/reliability-model.md §3;
  :mod:`routing.reliability.delay_distributions`).

``gg1``, the default, keeps that pipeline and replaces the broker delay (docs/reference/reliability-model.md §1.5, §2):

- burstiness (the paper's §4.5, Eq. 12-13: z_p^2 of publishers, z_b^2 of matching) is carried
  through the network with Whitt's QNA ("The Queueing Network Analyzer", BSTJ 62(9), 1983):
  departure c_d^2 = rho^2 c_s^2 + (1 - rho^2) c_a^2, thinning c^2 = p c^2 + 1 - p (by filtering,
  p = forwarded / processed, and by loss, p = r_l), superposition either rate-weighted
  ("asymptotic") or Albin's hybrid w sum(pi_i c_i^2) + 1 - w. Pairs of brokers linked both ways
  make the broker graph cyclic, so the arrival scvs are a fixed point, found by iteration.
  Which superposition rule is right depends on link jitter (docs/reference/reliability-model.md §5.4): jitter that is
  large against a flow's spacing makes it Poisson-like (hybrid), small jitter keeps periodic
  flows smooth (asymptotic). ``superposition="auto"`` picks per broker from the rate-weighted
  jitter ratio sd(link delay) x flow rate of its inputs;
- the mean wait E[W] by Kraemer and Langenbach-Belz (ITC-8, 1976), the probability of waiting
  sigma by QNA, the conditional delay scv c_D^2 = 2 rho - 1 + 4 (1 - rho) d_s3 / (3 (c_s^2 + 1)^2)
  (exact for M/G/1), and the waiting-time *distribution* as an atom 1 - sigma at 0 plus a gamma
  body with mean E[W] / sigma and scv c_D^2, convolved with the service distribution on a grid;
- an interval for R'_s: the range of R'_s over both superposition rules, widened by a margin for
  the regimes where two-moment methods are known to err (docs/reference/reliability-model.md §5.5): periodic
  publishers with near-deterministic service (low c_a^2 and c_s^2 at a loaded broker).

Both models flag brokers with rho >= 0.95; a broker with rho >= 1 makes every delivery through
it late (R'_s = 0 for subscribers that only it serves).

Distributions live on one grid of step ``h`` ms (:class:`routing.reliability.grid.Grid`); a
value x is rounded to the nearest point, so a point i stands for [(i - 1/2) h, (i + 1/2) h),
sums of rounded values stay unbiased, and mass beyond the grid's end counts as late, never as
on time.

How it scales. The compile step (:func:`compile_prediction`) validates each distinct filter
once, matches every distinct filter against every distinct content entry in one
:class:`routing.matching.index.MatchIndex` pass, and keeps the routes as one tree of paths per
publisher (:class:`routing.reliability.system.RouteTree`: for a tree overlay a node per
(publisher, broker), a leaf per (node, matching subscriber)), never a links x subscribers or
content x hop array. Every node carries one departure distribution, worked out level by level
with batched FFTs, and per broker one matrix product gives every (node, subscriber) pair's
on-time probability there (:mod:`routing.reliability.delay_distributions`). Reliability needs
the distributions only up to the longest lifetime. The four queue states of the gg1 interval
share the grid, the link and service pmfs, the routes and the matching. The p95 delays need more
of the grid: each is found by a search on the mixture's cdf, within about 1e-9 of the whole
convolution in probability (:mod:`routing.reliability.delay_quantiles`). Measured times:
docs/results/qos-predict-scale.md.

:func:`routing.reliability.reference_predictor.predict_reference` computes the same model the
readable way, hop by hop on the dense :class:`routing.reliability.system.Network`: the
oracle of the parity tests (docs/conventions.md §6). No function here changes process-wide state; a
program that predicts large systems may enter :func:`routing.reliability.allocation.bulk_allocation`.

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

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from routing.reliability.blame import Blame, BlameContext, Contributor
from routing.reliability.delay_distributions import (
    Evaluator,
    lifetime_cells,
    on_time_probabilities,
    reliability_from_on_time,
)
from routing.reliability.delay_quantiles import p95_pass
from routing.reliability.propagation import (
    BASE_MARGIN,
    LOW_VARIABILITY_MARGIN,
    LOW_VARIABILITY_RHO,
    Paths,
    Queues,
    auto_rules,
    broker_queues,
    broker_source_scv,
    compile_paths,
    fit_grid,
    low_variability,
    node_means,
    publisher_arrivals,
    wait_variance,
)
from routing.reliability.queueing import RHO_WARNING
from routing.reliability.system import (
    Matcher,
    Matching,
    Network,
    Overlay,
    RouteTree,
    compile_routes,
    match_content,
    validate_system,
)

__all__ = [
    "MODELS",
    "SUPERPOSITION_RULES",
    "BrokerPrediction",
    "CompiledSystem",
    "FilterMatcher",
    "Prediction",
    "SubscriberPrediction",
    "compile_prediction",
    "filter_matcher",
    "predict",
    "predict_reliability",
    "to_spec_output",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

MODELS: tuple[str, ...] = ("gg1", "mm1")
SUPERPOSITION_RULES: tuple[str, ...] = ("auto", "asymptotic", "hybrid")

_PREDICATE_TESTS_PER_FILTER = 300  # match_many: predicate tests per filter below which no index is built


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


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
    """The docs/reference/qos-predict.md output document."""
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
    """docs/reference/filters.md filter semantics through :mod:`routing.matching.language`, each filter parsed once.

    Calling it matches one filter against one event; :meth:`match_many` matches many filters
    against many events at once (what :func:`routing.reliability.system.match_content` uses). An event
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
    """docs/reference/filters.md semantics through :mod:`routing.matching.language` (a :class:`FilterMatcher`)."""
    return FilterMatcher()


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
            f"{LOW_VARIABILITY_RHO}): two-moment waiting times are least accurate there; intervals are wider"
        )
    return warnings


def _assemble(
    ov: Overlay,
    model: str,
    rules: Sequence[str],
    rho: FloatArray,
    broker_rate: FloatArray,
    main: Queues,
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
    return ValueError(
        "system: no brokers; a system (docs/reference/qos-predict.md) needs brokers, links, publishers and subscribers"
    )


# --------------------------------------------------------------------------------------------
# The prediction
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class CompiledSystem:
    """A docs/reference/qos-predict.md system ready for :func:`predict`: validated, matched and routed.

    Build it with :func:`compile_prediction`; :func:`predict` builds one itself unless given it,
    so one system can be predicted under several models or rules for one compile."""

    overlay: Overlay
    matching: Matching
    routes: RouteTree


def compile_prediction(system: Mapping[str, object], matcher: Matcher | None = None) -> CompiledSystem:
    """Validate a docs/reference/qos-predict.md system, match every filter against every content entry and build the
    route tree (:func:`routing.reliability.system.validate_system`, ``match_content``, ``compile_routes``).

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
    """Predict R'_s for every subscriber of a docs/reference/qos-predict.md system (``siftstream qos predict``).

    Parameters
    ----------
    system : mapping
        The docs/reference/qos-predict.md document (ignored when ``network`` is given).
    model : {"gg1", "mm1"}
        ``mm1`` is the paper's algorithm; ``gg1`` the QNA / KLB / atom-plus-gamma model.
    superposition : {"auto", "asymptotic", "hybrid"}
        gg1's rule for merging flows at a broker (see the module docstring).
    grid_points : int
        Points of the delay grid (the step is the horizon over this).
    matcher, network, compiled
        The filter semantics (default: docs/reference/filters.md via :mod:`routing.matching.language`), or the system
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
    :func:`routing.reliability.reference_predictor.predict_reference` is the readable,
    hop-by-hop implementation of the same model, the oracle of the parity tests: both give the
    same numbers (to rounding). ``predict`` changes no process-wide setting; a program that
    predicts large systems may enter :func:`routing.reliability.allocation.bulk_allocation`
    around its calls.
    """
    _check_arguments(model, superposition, grid_points)
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
    node_mean = node_means(ov, tree, paths, mean_wait, finite_only=False)
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
        p95_pass(ev, model, rho, main, weight, p95_ms)
    p95: list[float | None] = [None if v != v else v for v in p95_ms.tolist()]  # NaN: beyond the grid

    risky = None
    if model == "gg1":
        pub_scv = np.array([d.scv for d in ov.interarrival])
        risky = low_variability(rho, broker_source_scv(publisher_arrivals(ov, tree, paths), pub_scv), cs2)
        node_risky = risky[tree.node_broker].copy()
        for d in range(1, len(paths.depth_start) - 1):
            idx = np.arange(paths.depth_start[d], paths.depth_start[d + 1])
            node_risky[idx] |= node_risky[tree.node_parent[idx]]
        crosses = np.bincount(tree.leaf_subscriber, weights=node_risky[tree.leaf_node], minlength=n_s) > 0
        margin = BASE_MARGIN + np.where(crosses, LOW_VARIABILITY_MARGIN, 0.0)
        low = np.clip(low - margin, 0.0, 1.0)
        high = np.clip(high + margin, 0.0, 1.0)

    ctx = BlameContext(ov, tree, paths, rho, mean_wait)
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
        functools.partial(Blame, ctx),
        risky,
    )


@dataclass(frozen=True, eq=False)
class _Point:
    """What every pass of one prediction shares: the paths, the loads, the queue states (the
    point prediction's first), the grid and its evaluator."""

    model: str
    ov: Overlay
    tree: RouteTree
    paths: Paths
    tau: FloatArray
    rho: FloatArray
    rules: list[str]
    states: list[Queues]
    ev: Evaluator


def _point(compiled: CompiledSystem, model: str, superposition: str, grid_points: int, point_only: bool) -> _Point:
    """The queue states of a compiled system: under the chosen rules (the point prediction),
    then, for gg1 and unless ``point_only``, under the other rules (the interval)."""
    ov, matching, tree = compiled.overlay, compiled.matching, compiled.routes
    if not ov.broker_ids:
        raise _no_brokers()
    paths = compile_paths(ov, matching, tree)
    n_b = len(ov.broker_ids)
    tau = np.array([d.mean for d in ov.service])
    rho = paths.broker_rate * tau

    # The queue states: the chosen rules give the point prediction, the others the interval.
    states: list[Queues] = []
    if model == "gg1":
        auto = auto_rules(ov, paths)
        rule_sets = {"auto": auto, "asymptotic": np.zeros(n_b, dtype=np.bool_), "hybrid": np.ones(n_b, dtype=np.bool_)}
        chosen = rule_sets[superposition]
        rules = ["hybrid" if h else "asymptotic" for h in chosen.tolist()]
        arrivals = publisher_arrivals(ov, tree, paths)
        states.append(broker_queues(ov, paths, model, chosen, arrivals=arrivals))
        if not point_only:
            for name in ("asymptotic", "hybrid"):
                if not np.array_equal(rule_sets[name], chosen):
                    states.append(broker_queues(ov, paths, model, rule_sets[name], arrivals=arrivals))
            states.append(broker_queues(ov, paths, model, rule_sets["asymptotic"], thinning=False))
    else:
        rules = ["-"] * n_b
        states.append(broker_queues(ov, paths, model, None))
    main = states[0]
    grid = fit_grid(ov, tree, paths, main.mean_wait, wait_variance(main.waits), grid_points)
    return _Point(model, ov, tree, paths, tau, rho, rules, states, Evaluator(ov, tree, paths, grid))


def _reliabilities(point: _Point) -> list[FloatArray]:
    """R'_s per subscriber under each queue state of ``point``."""
    ev, paths, tree, model = point.ev, point.paths, point.tree, point.model
    # Reliability needs the delay distributions up to the longest lifetime only.
    lifetimes, lg_class = np.unique(paths.group_lifetime[paths.lg_group], return_inverse=True)
    cells = lifetime_cells(ev.grid, lifetimes)
    m_rel = int(max([1, *(c + (2 if f > 0 else 1) for c, f in zip(*cells, strict=True))]))
    m_rel = min(m_rel, ev.grid.n)
    departures = [ev.departures(m_rel, ev.broker_delays(m_rel, model, point.rho, q)) for q in point.states]
    on_time = on_time_probabilities(ev, m_rel, departures, cells)
    n_s = len(point.ov.subscriber_ids)
    return [
        reliability_from_on_time(paths, tree, on_time[e], lg_class.reshape(-1), n_s) for e in range(len(point.states))
    ]


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
    point = _point(compiled, model, superposition, grid_points, point_only=True)
    reliability = _reliabilities(point)[0]
    ids = point.ov.subscriber_ids
    return {sid: float(r) for sid, r in zip(ids, reliability.tolist(), strict=True) if r == r}
