"""Rates, reach and arrival variability along the route tree; the brokers' queues.

The network pass of :func:`routing.reliability.prediction.predict` before any distribution is
worked out (docs/reference/reliability-model.md §3-4), after Pongthawornkamol, Nahrstedt and Wang ("Towards
Timeliness and Reliability Analysis of Distributed Content-based Publish/Subscribe Systems over
Best-effort Networks", §4.1-4.2, Eq. 1-4) and Whitt's QNA ("The Queueing Network Analyzer",
BSTJ 62(9), 1983):

- :func:`compile_paths` gives the rates (per ms) and reach of every node and leaf of the route
  tree (:class:`routing.reliability.system.RouteTree`): every content entry k of publisher
  p crosses link l iff a subscriber downstream of l matches it, so lambda_l = sum over k of
  lambda_p C_p(k) times the reliabilities up to and including l; from them each broker's
  arrival rate (:class:`Paths`);
- :func:`broker_queues` gives each broker's wait (:class:`Queues`): M/M/1 for ``mm1``; for
  ``gg1`` the arrival scvs c_a^2 are QNA's fixed point of departure, thinning (by filtering and
  loss) and superposition (pairs of brokers linked both ways make the broker graph cyclic),
  blended toward the publishers' own streams (:func:`blend_sources`), then
  :func:`routing.reliability.queueing.gg1_wait_model`; :func:`auto_rules` picks each broker's
  superposition rule from link jitter (docs/reference/reliability-model.md §5.4);
- :func:`fit_grid` sizes the delay grid from the delays' means and variances along the routes
  (:func:`node_means`, :func:`delay_spans`, :func:`wait_variance`);
- :func:`low_variability` marks the loaded brokers fed by smooth streams, where two-moment
  methods err most, and the interval's margins (:data:`BASE_MARGIN`,
  :data:`LOW_VARIABILITY_MARGIN`) widen the predicted interval there (docs/reference/reliability-model.md §5.5).

Symbols: ``ov`` the validated overlay, ``tree`` its route tree, ``rho`` per broker its load,
``ca2``, ``cs2`` the scvs of its arrivals and service, ``hybrid`` per broker whether its inputs
merge by Albin's hybrid rule (else rate-weighted, "asymptotic").
:mod:`routing.reliability.reference_predictor` computes the same quantities hop by hop.

Examples
--------
>>> from routing.reliability.prediction import compile_prediction
>>> exp = lambda mean: {"kind": "exponential", "mean": mean}
>>> system = {"brokers": [{"id": "b1", "service_ms": exp(5)}],
...           "links": [{"from": "p1", "to": "b1", "reliability": 1.0, "delay_ms": exp(1)},
...                     {"from": "b1", "to": "s1", "reliability": 1.0, "delay_ms": exp(1)}],
...           "publishers": [{"id": "p1", "broker": "b1", "interarrival_ms": exp(10),
...                           "content": [{"p": 1.0, "lifetime_ms": 20, "attributes": {"t": 1}}]}],
...           "subscribers": [{"id": "s1", "broker": "b1", "filter": "t = 1"}]}
>>> c = compile_prediction(system)
>>> paths = compile_paths(c.overlay, c.matching, c.routes)
>>> paths.broker_rate.tolist()  # one event per 10 ms
[0.1]
>>> q = broker_queues(c.overlay, paths, "gg1", auto_rules(c.overlay, paths))
>>> round(float(q.mean_wait[0]), 6), round(float(q.ca2[0]), 6)  # M/M/1 at rho 0.5
(5.0, 1.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from routing.reliability.grid import Grid
from routing.reliability.queueing import WaitModel, gg1_wait_model, mm1_wait
from routing.reliability.system import Matching, Overlay, RouteTree
from routing.stats.distributions import Distribution

__all__ = [
    "BASE_MARGIN",
    "FIXED_POINT_ITERATIONS",
    "FIXED_POINT_TOLERANCE",
    "JITTER_THRESHOLD",
    "LOW_VARIABILITY_MARGIN",
    "LOW_VARIABILITY_RHO",
    "Paths",
    "Queues",
    "auto_rules",
    "blend_sources",
    "broker_queues",
    "broker_source_scv",
    "compile_paths",
    "delay_spans",
    "fit_grid",
    "low_variability",
    "node_means",
    "publisher_arrivals",
    "wait_variance",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

_LOW_VARIABILITY_SCV = 0.5  # both c_a^2 and c_s^2 below: two-moment methods degrade (§3.1, §3.6)
LOW_VARIABILITY_RHO = 0.3  # ... at a broker loaded at least this much
BASE_MARGIN = 0.01  # interval half-width added to the rule bracket, everywhere
LOW_VARIABILITY_MARGIN = 0.05  # ... and where the path crosses a low-variability broker
JITTER_THRESHOLD = 0.25  # "auto": above, link jitter makes the inputs Poisson-like (hybrid rule)
_SOURCE_BLEND = 0.5  # how far toward the publishers' view the arrival scv moves with periodic publishers
FIXED_POINT_ITERATIONS = 500
FIXED_POINT_TOLERANCE = 1e-10


@dataclass(frozen=True, eq=False)
class Paths:
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


def compile_paths(ov: Overlay, matching: Matching, tree: RouteTree) -> Paths:
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
    return Paths(
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
    ov: Overlay, paths: Paths, rho: FloatArray, cs2: FloatArray, hybrid: NDArray[np.bool_], thinning: bool = True
) -> FloatArray:
    """Per broker, the QNA arrival scv: the fixed point of departure, thinning, superposition
    (vectorised over the links into brokers; :func:`routing.reliability.reference_predictor._ref_arrival_scvs`
    is the per-broker loop).

    ``thinning=False`` keeps a flow's scv through filtering and loss: the smooth end of the
    interval, for superposed periodic flows whose effective variability is well below their
    renewal scv (docs/reference/reliability-model.md §5.3)."""
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
    for _ in range(FIXED_POINT_ITERATIONS):
        dep = r2 * cs2 + (1.0 - r2) * ca2
        c2[~from_pub] = keep * dep[src_b] + 1.0 - keep if thinning else dep[src_b]
        weighted = np.bincount(dst, weights=share * c2, minlength=n_b)
        new = np.where(fed, np.where(hybrid, w * weighted + 1.0 - w, weighted), 1.0)
        done = float(np.max(np.abs(new - ca2))) < FIXED_POINT_TOLERANCE if n_b else True
        ca2 = new
        if done:
            break
    return ca2


def publisher_arrivals(ov: Overlay, tree: RouteTree, paths: Paths) -> FloatArray:
    """``arrivals[b, p]``: the rate at which publisher p's events reach broker b."""
    arrivals = np.zeros((len(ov.broker_ids), len(ov.publisher_ids)))
    np.add.at(arrivals, (tree.node_broker, tree.node_publisher), paths.node_rate * paths.node_reach)
    return arrivals


def broker_source_scv(arrivals: FloatArray, pub_scv: FloatArray) -> FloatArray:
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


def blend_sources(
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
    arrival variability (docs/reference/reliability-model.md §5.3: the effective c_a^2 of superposed periodic streams
    is about half of the hybrid rule's). The publishers' view ignores the jitter that upstream
    queues add, so it understates it. The scv used lies between the two: the midpoint when the
    publishers are periodic (scv 0), QNA's value for Poisson publishers (scv 1), linear between
    (how that weight was chosen: docs/decisions/qos-arrival-scv-blend.md).
    """
    pub_rate = np.array([1.0 / d.mean if d.mean > 0 else 0.0 for d in interarrival])
    pub_scv = np.array([d.scv for d in interarrival])
    view = _source_view(arrivals, pub_rate, pub_scv, rho, hybrid)
    weight = _SOURCE_BLEND * np.clip(1.0 - broker_source_scv(arrivals, pub_scv), 0.0, 1.0)
    out: FloatArray = np.where(view < ca2, ca2 - weight * (ca2 - view), ca2)
    return out


def auto_rules(ov: Overlay, paths: Paths) -> NDArray[np.bool_]:
    """Per broker: hybrid when link jitter is large against its input flows' spacing."""
    n_b = len(ov.broker_ids)
    e = np.flatnonzero((ov.link_broker >= 0) & (paths.link_arrived > 0.0))
    dst, rate = ov.link_broker[e], paths.link_arrived[e]
    sd = np.sqrt(paths.link_var[e])
    total = np.bincount(dst, weights=rate, minlength=n_b)
    ratio = np.bincount(dst, weights=rate / total[dst] * sd * rate, minlength=n_b) if len(e) else np.zeros(n_b)
    out: NDArray[np.bool_] = (total > 0.0) & (ratio >= JITTER_THRESHOLD)
    return out


@dataclass(frozen=True, eq=False)
class Queues:
    """The brokers under one model and superposition rule set."""

    ca2: FloatArray
    waits: list[WaitModel]

    @property
    def mean_wait(self) -> FloatArray:
        return np.array([w.mean for w in self.waits])


def broker_queues(
    ov: Overlay,
    paths: Paths,
    model: str,
    hybrid: NDArray[np.bool_] | None,
    thinning: bool = True,
    arrivals: FloatArray | None = None,
) -> Queues:
    """The brokers' waits; with ``arrivals`` (:func:`publisher_arrivals`) and thinning, QNA's
    arrival scvs are blended with the publishers' view (:func:`blend_sources`)."""
    tau = np.array([d.mean for d in ov.service])
    cs2 = np.array([d.scv if d.mean > 0 else 0.0 for d in ov.service])
    ds3 = np.array([d.third_moment / d.mean**3 if d.mean > 0 else 1.0 for d in ov.service])
    rho = paths.broker_rate * tau
    n_b = len(ov.broker_ids)
    if model == "mm1" or hybrid is None:
        return Queues(np.ones(n_b), [WaitModel(mm1_wait(rho[b], tau[b]), min(rho[b], 1.0), 1.0) for b in range(n_b)])
    ca2 = _arrival_scvs(ov, paths, rho, cs2, hybrid, thinning)
    if thinning and arrivals is not None:
        ca2 = blend_sources(ca2, arrivals, ov.interarrival, rho, hybrid)
    return Queues(ca2, [gg1_wait_model(rho[b], ca2[b], cs2[b], ds3[b], tau[b]) for b in range(n_b)])


def wait_variance(waits: Sequence[WaitModel]) -> FloatArray:
    return np.array(
        [
            (w.mean**2) * ((w.cd2 + 1.0 - w.sigma) / w.sigma) if w.sigma > 0 and math.isfinite(w.mean) else 0.0
            for w in waits
        ]
    )


def node_means(ov: Overlay, tree: RouteTree, paths: Paths, wait_mean: FloatArray, finite_only: bool) -> FloatArray:
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


def delay_spans(
    ov: Overlay, tree: RouteTree, paths: Paths, wait_mean: FloatArray, wait_var: FloatArray, k: float = 6.0
) -> tuple[FloatArray, FloatArray]:
    """Mean + k sd of the delay to each node's broker and to each leaf's subscriber (waits that
    are not finite count as 0)."""
    link_var, service_var = paths.link_var, paths.service_var
    w_v = np.where(np.isfinite(wait_var), wait_var, 0.0)
    mean = node_means(ov, tree, paths, wait_mean, finite_only=True)
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


def fit_grid(
    ov: Overlay, tree: RouteTree, paths: Paths, wait_mean: FloatArray, wait_var: FloatArray, points: int
) -> Grid:
    """Cover every lifetime and the bulk (mean + 6 sd) of every route's delay."""
    node_span, leaf_span = delay_spans(ov, tree, paths, wait_mean, wait_var)
    life = float(ov.content_lifetime_ms.max()) if len(ov.content_lifetime_ms) else 1.0
    spans = np.concatenate((node_span, leaf_span))
    bulk = float(np.max(spans)) if len(spans) else life
    horizon = max(1.25 * life, min(bulk, 20.0 * life), 1e-6)
    return Grid(step=horizon / points, n=points)


def low_variability(rho: FloatArray, source_scv: FloatArray, cs2: FloatArray) -> NDArray[np.bool_]:
    """Loaded brokers fed by smooth (periodic-like) publishers or with near-constant matching:
    where two-moment waiting times err most (docs/reference/reliability-model.md §5.1, §5.3, §5.5)."""
    smooth = (source_scv < _LOW_VARIABILITY_SCV) | (cs2 < _LOW_VARIABILITY_SCV)
    out: NDArray[np.bool_] = (rho >= LOW_VARIABILITY_RHO) & smooth
    return out
