"""The reliability predictor the readable way: the oracle of :func:`routing.reliability.prediction.predict`.

:func:`predict_reference` computes the same model as
:func:`routing.reliability.prediction.predict` (both ``mm1`` and ``gg1``, after Pongthawornkamol,
Nahrstedt and Wang, §4, and docs/reference/reliability-model.md §1.5, §2), hop by hop on the dense
:class:`routing.reliability.system.Network` of
:func:`routing.reliability.system.compile_system`: rates and reach per route hop
(:class:`_RefFlows`), the arrival scvs per broker in a plain loop over its input links
(:func:`_ref_arrival_scvs`), and every route's delay pmf convolved on the whole grid, memoised
per publisher and link path (:func:`_ref_evaluate`). It shares the single-queue formulas, the
grid, the interval's margins, the blame and the result assembly with ``predict``, and nothing
of its route tree, truncated passes or p95 search; the parity tests compare the two (CONVENTIONS
6). The per-(link, subscriber) and per-(content key, hop) arrays make it quadratic: use it for
systems of a few hundred subscribers.

Examples
--------
>>> from routing.reliability.prediction import predict
>>> exp = lambda mean: {"kind": "exponential", "mean": mean}
>>> system = {"brokers": [{"id": "b1", "service_ms": exp(5)}],
...           "links": [{"from": "p1", "to": "b1", "reliability": 1.0, "delay_ms": exp(1)},
...                     {"from": "b1", "to": "s1", "reliability": 0.9, "delay_ms": exp(1)}],
...           "publishers": [{"id": "p1", "broker": "b1", "interarrival_ms": exp(10),
...                           "content": [{"p": 1.0, "lifetime_ms": 20, "attributes": {"t": 1}}]}],
...           "subscribers": [{"id": "s1", "broker": "b1", "filter": "t = 1"}]}
>>> ref = predict_reference(system).subscribers["s1"]
>>> abs(ref.reliability - predict(system).subscribers["s1"].reliability) < 1e-9
True
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from routing.reliability.blame import Contributor, blame_shares
from routing.reliability.grid import Grid
from routing.reliability.prediction import Prediction, _assemble, _check_arguments, _no_brokers, filter_matcher
from routing.reliability.propagation import (
    BASE_MARGIN,
    FIXED_POINT_ITERATIONS,
    FIXED_POINT_TOLERANCE,
    JITTER_THRESHOLD,
    LOW_VARIABILITY_MARGIN,
    Queues,
    blend_sources,
    broker_source_scv,
    low_variability,
    wait_variance,
)
from routing.reliability.queueing import (
    WaitModel,
    departure_scv,
    gg1_wait_model,
    mm1_wait,
    superposed_scv,
    thinned_scv,
)
from routing.reliability.system import Matcher, Network, compile_system

__all__ = ["predict_reference"]

FloatArray = NDArray[np.float64]


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
    renewal scv (docs/reference/reliability-model.md §5.3)."""
    n_b = len(net.broker_ids)
    publisher_of_link = {int(link): p for p, link in enumerate(net.publisher_link)}
    in_links: list[list[int]] = [[] for _ in range(n_b)]
    for link, b in enumerate(net.link_broker):
        if b >= 0 and flows.link_arrived[link] > 0.0:
            in_links[int(b)].append(link)
    ca2 = np.ones(n_b)
    for _ in range(FIXED_POINT_ITERATIONS):
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
        done = float(np.max(np.abs(new - ca2))) < FIXED_POINT_TOLERANCE if n_b else True
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
        rules.append("hybrid" if ratio >= JITTER_THRESHOLD else "asymptotic")
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
            ca2 = blend_sources(ca2, _ref_publisher_arrivals(net, flows), net.interarrival, rho, hybrid)
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
    """:func:`routing.reliability.propagation.publisher_arrivals` from the route hops."""
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
    return blame_shares(net, links, brokers, total_rate, rho, mean_wait, miss)


def predict_reference(
    system: Mapping[str, object],
    *,
    model: str = "gg1",
    superposition: str = "auto",
    grid_points: int = 4096,
    matcher: Matcher | None = None,
    network: Network | None = None,
) -> Prediction:
    """:func:`routing.reliability.prediction.predict` the readable way, the oracle of its parity
    tests (docs/conventions.md §6).

    It walks every hop of every content entry's route in the dense :class:`Network` of
    :func:`routing.reliability.system.compile_system`, convolving the delay pmfs along each route
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
    grid = _ref_grid(net, flows, probe.mean_wait, wait_variance(probe.waits), grid_points)
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
        risky = low_variability(rho, broker_source_scv(_ref_publisher_arrivals(net, flows), pub_scv), cs2)
        paths = _ref_path_brokers(net, flows)
        margin = np.array([BASE_MARGIN + (LOW_VARIABILITY_MARGIN if any(risky[b] for b in p) else 0.0) for p in paths])
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
        Queues(main.ca2, main.waits),
        main.reliability,
        low,
        high,
        main.mean_delay,
        main.p95,
        matching_rate,
        lambda s, miss: _ref_contributors(net, flows, s, rho, main.mean_wait, miss),
        risky,
    )
