"""The reliability simulator (``routing.reliability.simulation``) and its distributions (``routing.stats.distributions``).

What is checked, all in seconds and with fixed seeds:

- distributions: moments and CDFs against samples, clear errors for bad DISTs;
- single queues against closed forms: M/M/1, M/D/1 (Pollaczek-Khinchine), D/M/1 (the GI/M/1
  root), utilisation, and the queue length seen by arrivals (PASTA);
- the vectorised solver against the event-driven reference on random trees and DAGs: identical
  delivery sets and times, bit for bit, whatever the relaxation window;
- routing against filter semantics (every matching event once, never a non-matching one), link
  loss against 1 - reliability, determinism per seed, and the validation messages;
- the paper's 20-broker tree, with a performance print (no timing assert: CONVENTIONS 10).

The matcher here is a small test-only reading of SPEC §1 conjunctions: ``routing.matching.language`` is
written separately and the simulator takes the matcher as an argument. Hypothesis strategies
for these tests live here rather than in ``tests/strategies.py`` because they draw whole systems
from one seed, not records.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping
from functools import cache
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize
from scipy.stats import binomtest

from routing.reliability.simulation import (
    TICKS_PER_MS,
    compile_system,
    draw_inputs,
    fifo_departures,
    measure,
    reliability_tree_system,
    simulate,
    solve,
    solve_reference,
    to_spec_output,
    wilson_interval,
)
from routing.stats.distributions import KINDS, parse_distribution

PARITY = settings(max_examples=40, deadline=None)

# --------------------------------------------------------------------------------------------
# A test matcher for SPEC §1 conjunctions: =, !=, <, <=, >, >=, between, in; numbers and strings
# --------------------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"\s*(?:(?P<num>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)|(?P<str>'(?:[^']|'')*')"
    r"|(?P<op><=|>=|!=|=|<|>|\(|\)|,)|(?P<word>[A-Za-z_][A-Za-z0-9_.]*))"
)
_COMPARE = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def _tokens(text: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    pos = 0
    while text[pos:].strip():
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValueError(f"position {pos}: unexpected {text[pos:]!r}")
        kind = m.lastgroup or ""
        raw = m.group(kind)
        value: Any = raw
        if kind == "num":
            value = float(raw) if any(c in raw for c in ".eE") else int(raw)
        elif kind == "str":
            value = raw[1:-1].replace("''", "'")
        elif kind == "word":
            value = raw
        out.append((kind, value))
        pos = m.end()
    return out


@cache
def _parse(text: str) -> tuple[tuple[Any, ...], ...]:
    tokens = [*_tokens(text), ("end", "end of filter")]
    predicates: list[tuple[Any, ...]] = []
    i = 0

    def literal() -> Any:
        nonlocal i
        kind, value = tokens[i]
        if kind not in ("num", "str"):
            raise ValueError(f"token {i}: expected a literal, got {value!r}")
        i += 1
        return value

    while True:
        kind, name = tokens[i]
        if kind != "word":
            raise ValueError(f"token {i}: expected an attribute name, got {name!r}")
        kind, op = tokens[i + 1]
        i += 2
        if kind == "op" and op in _COMPARE:
            predicates.append(("cmp", name, op, literal()))
        elif kind == "word" and op.lower() == "between":
            low = literal()
            if tokens[i][0] != "word" or tokens[i][1].lower() != "and":
                raise ValueError(f"token {i}: expected 'and' in between")
            i += 1
            predicates.append(("between", name, low, literal()))
        elif kind == "word" and op.lower() == "in":
            if tokens[i][1] != "(":
                raise ValueError(f"token {i}: expected '('")
            i += 1
            values = [literal()]
            while tokens[i][1] == ",":
                i += 1
                values.append(literal())
            if tokens[i][1] != ")":
                raise ValueError(f"token {i}: expected ')'")
            i += 1
            predicates.append(("in", name, tuple(values)))
        else:
            raise ValueError(f"token {i - 1}: expected an operator, got {op!r}")
        if tokens[i][0] == "end":
            return tuple(predicates)
        if tokens[i][0] != "word" or tokens[i][1].lower() != "and":
            raise ValueError(f"token {i}: expected 'and', got {tokens[i][1]!r}")
        i += 1


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    return "num" if isinstance(value, int | float) else "str" if isinstance(value, str) else "other"


def matcher(text: str, attributes: Mapping[str, object]) -> bool:
    """SPEC §1 semantics for the forms above: a missing attribute or a kind mismatch is false."""
    for predicate in _parse(text):
        value = attributes.get(predicate[1])
        if value is None:
            return False
        if predicate[0] == "cmp":
            _, _, op, lit = predicate
            if _kind(value) != _kind(lit) or not _COMPARE[op](value, lit):
                return False
        elif predicate[0] == "between":
            _, _, low, high = predicate
            if _kind(value) != _kind(low) or not low <= value <= high:
                return False
        elif value not in predicate[2] or _kind(value) != _kind(predicate[2][0]):
            return False
    return True


def test_the_test_matcher_reads_spec_filters() -> None:
    event = {"symbol": "IBM", "price": 100.5, "volume": 2000, "region": "eu"}
    assert matcher("symbol = 'IBM' and price < 120.5 and volume >= 1000", event)
    assert matcher("region in ('eu', 'us') and price between 10 and 200", event)
    assert not matcher("price < 'abc'", event)  # a kind mismatch is false
    assert not matcher("missing != 3", event)  # so is a missing attribute
    with pytest.raises(ValueError, match="expected"):
        matcher("price <", event)


# --------------------------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------------------------


def det(value: float) -> dict[str, Any]:
    return {"kind": "deterministic", "value": value}


def expo(mean: float) -> dict[str, Any]:
    return {"kind": "exponential", "mean": mean}


def link(src: str, dst: str, reliability: float = 1.0, delay: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"from": src, "to": dst, "reliability": reliability, "delay_ms": delay or det(0.0)}


def single_queue(interarrival: dict[str, Any], service: dict[str, Any]) -> dict[str, Any]:
    """One publisher feeding one broker over an instant, perfect link; nobody subscribed."""
    return {
        "brokers": [{"id": "b1", "service_ms": service}],
        "links": [link("p1", "b1")],
        "publishers": [
            {
                "id": "p1",
                "broker": "b1",
                "interarrival_ms": interarrival,
                "content": [{"p": 1.0, "lifetime_ms": 1000.0, "attributes": {"t": 1}}],
            }
        ],
        "subscribers": [],
    }


def random_dist(rng: np.random.Generator, mean: float) -> dict[str, Any]:
    kind = KINDS[int(rng.integers(len(KINDS)))]
    cv = float(rng.uniform(0.3, 1.5))
    choices: dict[str, dict[str, Any]] = {
        "exponential": {"kind": "exponential", "mean": mean},
        "deterministic": {"kind": "deterministic", "value": mean},
        "uniform": {"kind": "uniform", "low": 0.0, "high": 2.0 * mean},
        "lognormal": {"kind": "lognormal", "mean": mean, "cv": cv},
        "gamma": {"kind": "gamma", "mean": mean, "cv": cv},
        "empirical": {"kind": "empirical", "values": [mean / 2.0, 1.5 * mean], "probs": [0.5, 0.5]},
    }
    return choices[kind]


def random_system(seed: int, *, shape: str, reliable: bool = False) -> dict[str, Any]:
    """A small random system: ``shape`` "tree" (each tree edge one way or both ways, so cyclic
    broker components are common), "both" (a tree, every edge both ways: everybody is reachable)
    or "dag" (edges from lower to higher broker index, so an event can reach a broker twice).
    Loads are high enough that queues form."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 7))
    brokers = [f"b{i}" for i in range(n)]
    links: list[dict[str, Any]] = []

    def add(i: int, j: int) -> None:
        r = 1.0 if reliable else float(rng.uniform(0.7, 1.0))
        links.append(link(brokers[i], brokers[j], r, random_dist(rng, float(rng.uniform(0.2, 3.0)))))

    if shape in ("tree", "both"):
        for i in range(1, n):
            j = int(rng.integers(i))
            way = 0.0 if shape == "both" else rng.random()
            if way < 0.7:
                add(i, j)
                add(j, i)
            elif way < 0.85:
                add(i, j)
            else:
                add(j, i)
    else:
        for i in range(n):
            for j in range(i + 1, n):
                if rng.random() < 0.5:
                    add(i, j)
    publishers = []
    for p in range(int(rng.integers(1, 4))):
        home = int(rng.integers(n))
        k = int(rng.integers(1, 4))
        probs = rng.dirichlet(np.ones(k))
        content = [
            {
                "p": float(probs[c]),
                "lifetime_ms": float(rng.uniform(5.0, 50.0)),
                "attributes": {"t": int(rng.integers(3)), "x": int(rng.integers(4))},
            }
            for c in range(k)
        ]
        publishers.append(
            {
                "id": f"p{p}",
                "broker": brokers[home],
                "interarrival_ms": random_dist(rng, float(rng.uniform(2.0, 6.0))),
                "content": content,
            }
        )
        links.append(link(f"p{p}", brokers[home], 1.0 if reliable else 0.95, random_dist(rng, 0.5)))
    subscribers = []
    filters = ["t = 0", "t = 1", "x <= 1", "t = 2 and x >= 2", "t in (0, 2)", "x between 1 and 2"]
    for s in range(int(rng.integers(1, 6))):
        home = int(rng.integers(n))
        subscribers.append({"id": f"s{s}", "broker": brokers[home], "filter": filters[int(rng.integers(len(filters)))]})
        links.append(link(brokers[home], f"s{s}", 1.0 if reliable else 0.9, random_dist(rng, 0.5)))
    services = [{"id": b, "service_ms": random_dist(rng, float(rng.uniform(0.3, 2.0)))} for b in brokers]
    return {"brokers": services, "links": links, "publishers": publishers, "subscribers": subscribers}


# --------------------------------------------------------------------------------------------
# Distributions
# --------------------------------------------------------------------------------------------

DISTS = [
    {"kind": "exponential", "mean": 20.0},
    {"kind": "deterministic", "value": 7.5},
    {"kind": "uniform", "low": 10.0, "high": 30.0},
    {"kind": "lognormal", "mean": 50.0, "cv": 0.3},
    {"kind": "gamma", "mean": 50.0, "cv": 0.5},
    {"kind": "empirical", "values": [1.0, 5.0, 9.0], "probs": [0.2, 0.5, 0.3]},
]


@pytest.mark.parametrize("spec", DISTS, ids=lambda d: str(d["kind"]))
def test_distribution_moments_and_cdf_match_samples(spec: dict[str, Any]) -> None:
    dist = parse_distribution(spec)
    assert dist.to_dict() == {
        k: (list(v) if isinstance(v, list) else float(v)) for k, v in spec.items() if k != "kind"
    } | {"kind": spec["kind"]}
    x = dist.sample(np.random.default_rng(5), 400_000)
    assert x.dtype == np.float64 and x.shape == (400_000,) and x.min() >= 0.0
    assert x.mean() == pytest.approx(dist.mean, rel=0.01)
    assert x.var() / x.mean() ** 2 == pytest.approx(dist.scv, rel=0.03, abs=1e-9)
    assert np.mean(x**3) == pytest.approx(dist.third_moment, rel=0.03)
    grid = np.quantile(x, [0.05, 0.25, 0.5, 0.75, 0.95])
    empirical = np.searchsorted(np.sort(x), grid, side="right") / len(x)
    assert np.abs(dist.cdf(grid) - empirical).max() < 0.005


def test_scv_is_computed_not_named() -> None:
    """QUEUEING-NOTES §1: the paper's 'uniform has burstiness 0' is wrong; Uniform(0, 2m) has 1/3."""
    assert parse_distribution({"kind": "uniform", "low": 0, "high": 2000}).scv == pytest.approx(1 / 3)
    assert parse_distribution({"kind": "gamma", "mean": 4, "cv": 0.5}).scv == pytest.approx(0.25)
    assert parse_distribution({"kind": "deterministic", "value": 0}).scv == 0.0


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"kind": "pareto", "alpha": 2}, "unknown kind 'pareto'; valid kinds: deterministic, empirical"),
        ({"mean": 3}, "unknown kind None"),
        ({"kind": "exponential", "mean": -1}, "exponential mean must be > 0"),
        ({"kind": "lognormal", "mean": 10}, "lognormal needs mean, cv .missing cv"),
        ({"kind": "gamma", "mean": 10, "cv": 0}, "gamma cv must be > 0"),
        ({"kind": "uniform", "low": 5, "high": 1}, "uniform needs 0 <= low <= high"),
        ({"kind": "deterministic", "value": -0.5}, "deterministic value must be >= 0"),
        ({"kind": "deterministic", "value": True}, "value must be a finite number"),
        ({"kind": "exponential", "mean": float("nan")}, "mean must be a finite number"),
        ({"kind": "exponential", "mean": 1, "scale": 2}, "unexpected scale for exponential, which takes mean"),
        ({"kind": "empirical", "values": [1, 2], "probs": [0.5, 0.6]}, "probs must sum to 1 .got 1.1"),
        ({"kind": "empirical", "values": [1, 2], "probs": [1.0]}, "differ in length"),
        ({"kind": "empirical", "values": [-1], "probs": [1.0]}, "values must be >= 0"),
        ({"kind": "empirical", "values": [], "probs": []}, "non-empty list"),
        ("exponential", "must be an object with a 'kind'"),
    ],
)
def test_bad_distributions_say_what_is_wrong_and_where(spec: object, message: str) -> None:
    with pytest.raises(ValueError, match=f"^links\\[2\\].delay_ms: .*{message}"):
        parse_distribution(spec, "links[2].delay_ms")


# --------------------------------------------------------------------------------------------
# Single queues against closed forms
# --------------------------------------------------------------------------------------------


def _single(interarrival: dict[str, Any], service: dict[str, Any], customers: int, seed: int) -> Any:
    mean_gap = parse_distribution(interarrival).mean
    seconds = customers * mean_gap / 1000.0
    return simulate(single_queue(interarrival, service), seconds, seed, matcher, warmup_s=0.05 * seconds).brokers["b1"]


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_mm1_mean_wait_and_utilisation(rho: float) -> None:
    """M/M/1: E[W] = rho tau / (1 - rho) (Kleinrock vol. 1 §3.2; the paper's eq. 5)."""
    tau = 1.0
    b1 = _single(expo(tau / rho), expo(tau), 1_000_000, seed=11)
    assert b1.mean_wait_ms == pytest.approx(rho * tau / (1 - rho), rel=0.04)
    assert b1.rho == pytest.approx(rho, rel=0.01)
    assert b1.arrival_rate_per_s == pytest.approx(1000.0 * rho / tau, rel=0.01)
    assert b1.mean_service_ms == pytest.approx(tau, rel=0.01)


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_md1_mean_wait_is_pollaczek_khinchine(rho: float) -> None:
    """M/G/1: E[W] = rho tau (1 + c_s^2) / (2 (1 - rho)), c_s^2 = 0 for deterministic service."""
    tau = 2.0
    b1 = _single(expo(tau / rho), det(tau), 600_000, seed=12)
    assert b1.mean_wait_ms == pytest.approx(rho * tau / (2 * (1 - rho)), rel=0.04)


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_dm1_mean_wait_uses_the_gi_m_1_root(rho: float) -> None:
    """D/M/1: sigma = exp(-(1 - sigma)/rho) on (0, 1), E[W] = sigma tau / (1 - sigma)
    (GI/M/1, Kleinrock vol. 1 §6.4; QUEUEING-NOTES §2.2)."""
    tau = 1.0
    sigma = optimize.brentq(lambda s: s - math.exp(-(1 - s) / rho), 1e-12, 1 - 1e-12)
    b1 = _single(det(tau / rho), expo(tau), 600_000, seed=13)
    assert b1.mean_wait_ms == pytest.approx(sigma * tau / (1 - sigma), rel=0.04)


def test_mm1_arrivals_see_time_averages() -> None:
    """PASTA: the mean queue length an M/M/1 arrival sees is L_q = rho^2 / (1 - rho)."""
    rho, tau = 0.7, 1.0
    system = single_queue(expo(tau / rho), expo(tau))
    result = simulate(system, 300.0, 21, matcher, collect_telemetry=True, warmup_s=10.0)
    telemetry = result.telemetry
    assert telemetry is not None
    samples = telemetry.brokers
    counted = (samples.arrived_at_ms >= 0) & (samples.arrived_at_ms < 300_000.0)
    assert samples.queue_length[counted].mean() == pytest.approx(rho**2 / (1 - rho), rel=0.05)
    assert samples.wait_ms[counted].mean() == pytest.approx(result.brokers["b1"].mean_wait_ms)


def test_fifo_departures_is_the_lindley_recursion() -> None:
    rng = np.random.default_rng(3)
    arrivals = np.sort(rng.integers(0, 10_000, 500))
    services = rng.integers(0, 60, 500)
    expected, last = [], -(10**9)
    for a, s in zip(arrivals.tolist(), services.tolist(), strict=True):
        last = max(a, last) + s
        expected.append(last)
    assert fifo_departures(arrivals, services).tolist() == expected


# --------------------------------------------------------------------------------------------
# The vectorised solver against the event-driven reference
# --------------------------------------------------------------------------------------------


def _same_schedule(a: Any, b: Any) -> None:
    assert np.array_equal(a.sent, b.sent)
    assert np.array_equal(a.arrived, b.arrived)
    assert np.array_equal(a.sent_at[a.sent], b.sent_at[b.sent])
    assert np.array_equal(a.arrived_at[a.arrived], b.arrived_at[b.arrived])
    visits = a.arrived & a.at_broker
    assert np.array_equal(a.departed_at[visits], b.departed_at[visits])


@PARITY
@given(
    seed=st.integers(0, 2**32 - 1), shape=st.sampled_from(["tree", "both", "dag"]), window=st.sampled_from([1, 5, 512])
)
def test_vectorised_solver_equals_event_driven_reference(seed: int, shape: str, window: int) -> None:
    network = compile_system(random_system(seed, shape=shape), matcher)
    draws = draw_inputs(network, seconds=0.3, seed=seed, warmup_s=0.02)
    reference = solve_reference(network, draws)
    fast = solve(network, draws, window_rows=window)
    _same_schedule(fast, reference)
    assert not fast.fallback


def test_parity_holds_on_cyclic_components_under_load() -> None:
    """Bidirectional trees make cyclic broker components: the relaxation path, loaded."""
    cyclic = 0
    for seed in range(200):
        network = compile_system(random_system(seed, shape="both"), matcher)
        if max(map(len, network.components)) < 3:
            continue
        cyclic += 1
        draws = draw_inputs(network, seconds=2.0, seed=seed)
        _same_schedule(solve(network, draws, window_rows=16), solve_reference(network, draws))
        if cyclic == 6:
            break
    assert cyclic == 6


def test_a_window_that_does_not_settle_falls_back_to_the_event_loop() -> None:
    network = compile_system(reliability_tree_system(4, brokers=6, subscribers=12, publishers=3), matcher)
    assert any(len(c) > 1 for c in network.components)
    draws = draw_inputs(network, seconds=60.0, seed=4)
    fallen = solve(network, draws, max_sweeps=1)
    assert fallen.fallback
    _same_schedule(fallen, solve_reference(network, draws))
    result = measure(network, draws, fallen)
    assert any("event-driven loop" in w for w in result.warnings)


# --------------------------------------------------------------------------------------------
# Routing, loss, determinism
# --------------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_perfect_links_deliver_each_matching_event_exactly_once(seed: int) -> None:
    """Reliability 1 on a tree: every event reaches every subscriber it matches once, and no other
    (SPEC §4: forwarded once per link on which some subscription downstream matches)."""
    system = random_system(seed, shape="both", reliable=True)
    result = simulate(system, 0.5, seed, matcher, collect_telemetry=True, warmup_s=0.0)
    telemetry = result.telemetry
    assert telemetry is not None
    publishers = {p["id"]: p for p in system["publishers"]}
    subscribers = system["subscribers"]
    events = telemetry.events
    expected = np.array(
        [
            [
                matcher(s["filter"], publishers[telemetry.publisher_ids[p]]["content"][c]["attributes"])
                for s in subscribers
            ]
            for p, c in zip(events.publisher.tolist(), events.content.tolist(), strict=True)
        ],
        dtype=np.int64,
    ).reshape(len(events.publisher), len(subscribers))
    got = np.zeros_like(expected)
    np.add.at(got, (telemetry.receipts.event, telemetry.receipts.subscriber), 1)
    assert np.array_equal(got, expected)
    for stats in result.subscribers.values():
        assert stats.delivered == stats.matching
        assert stats.on_time <= stats.delivered
    # and no event crosses a link twice
    pairs = telemetry.links.link * (len(events.publisher) + 1) + telemetry.links.event
    assert len(np.unique(pairs)) == len(pairs)


def test_events_cross_only_links_with_matching_subscribers_downstream() -> None:
    """b1 -> b2 -> b3; s2 at b2 wants t = 1, s3 at b3 wants t = 2; t = 3 interests nobody."""
    system = {
        "brokers": [{"id": b, "service_ms": expo(1.0)} for b in ("b1", "b2", "b3")],
        "links": [
            link("p1", "b1", 1.0, expo(1.0)),
            link("b1", "b2", 1.0, expo(1.0)),
            link("b2", "b3", 1.0, expo(1.0)),
            link("b2", "s2", 1.0, expo(1.0)),
            link("b3", "s3", 1.0, expo(1.0)),
        ],
        "publishers": [
            {
                "id": "p1",
                "broker": "b1",
                "interarrival_ms": expo(10.0),
                "content": [{"p": 1 / 3, "lifetime_ms": 100.0, "attributes": {"t": t}} for t in (1, 2, 3)],
            }
        ],
        "subscribers": [
            {"id": "s2", "broker": "b2", "filter": "t = 1"},
            {"id": "s3", "broker": "b3", "filter": "t = 2"},
        ],
    }
    result = simulate(system, 60.0, 8, matcher, collect_telemetry=True)
    telemetry = result.telemetry
    assert telemetry is not None
    topic = np.array([1, 2, 3])[telemetry.events.content]
    crossing = {
        f"{telemetry.link_from[k]}->{telemetry.link_to[k]}": set(
            topic[telemetry.links.event[telemetry.links.link == k]].tolist()
        )
        for k in range(len(telemetry.link_from))
    }
    assert crossing == {"p1->b1": {1, 2, 3}, "b1->b2": {1, 2}, "b2->b3": {2}, "b2->s2": {1}, "b3->s3": {2}}
    rates = {b: s.arrival_rate_per_s for b, s in result.brokers.items()}
    assert rates["b1"] == pytest.approx(100.0, rel=0.03)
    assert rates["b2"] == pytest.approx(200.0 / 3, rel=0.03)
    assert rates["b3"] == pytest.approx(100.0 / 3, rel=0.04)
    assert result.subscribers["s2"].reliability == 1.0  # lifetime 100 ms: nothing is late here
    assert result.subscribers["s3"].matching == pytest.approx(60.0 * 100 / 3, rel=0.05)


def test_losses_match_link_reliability_and_compound_along_the_path() -> None:
    """Three links of reliability 0.9 after a perfect one: R_s = 0.9^3 with an endless lifetime,
    and each link loses about 10% of what it carries."""
    system = {
        "brokers": [{"id": b, "service_ms": det(0.1)} for b in ("b1", "b2")],
        "links": [link("p1", "b1"), link("b1", "b2", 0.9, expo(1.0)), link("b2", "s1", 0.9), link("b1", "s0", 0.9)],
        "publishers": [
            {
                "id": "p1",
                "broker": "b1",
                "interarrival_ms": expo(1.0),
                "content": [{"p": 1.0, "lifetime_ms": 1e9, "attributes": {"t": 1}}],
            }
        ],
        "subscribers": [
            {"id": "s1", "broker": "b2", "filter": "t = 1"},
            {"id": "s0", "broker": "b1", "filter": "t = 1"},
        ],
    }
    result = simulate(system, 100.0, 5, matcher, collect_telemetry=True)
    s1, s0 = result.subscribers["s1"], result.subscribers["s0"]
    for stats, expected in ((s1, 0.81), (s0, 0.9)):
        se = math.sqrt(expected * (1 - expected) / stats.matching)
        assert abs(stats.reliability - expected) < 4 * se
    telemetry = result.telemetry
    assert telemetry is not None
    for k in range(1, 4):
        lost = telemetry.links.lost[telemetry.links.link == k]
        se = math.sqrt(0.09 / len(lost))
        assert abs(lost.mean() - 0.1) < 4 * se
    assert telemetry.links.lost[telemetry.links.link == 0].sum() == 0


def test_same_seed_same_result_and_another_seed_differs() -> None:
    system = reliability_tree_system(2, brokers=8, subscribers=20, publishers=4)
    one = simulate(system, 30.0, 99, matcher, collect_telemetry=True)
    two = simulate(system, 30.0, 99, matcher, collect_telemetry=True)
    other = simulate(system, 30.0, 100, matcher)
    assert json.dumps(to_spec_output(one)) == json.dumps(to_spec_output(two))
    assert one.telemetry is not None and two.telemetry is not None
    for table in ("links", "brokers", "receipts", "events"):
        a, b = getattr(one.telemetry, table), getattr(two.telemetry, table)
        for column in vars(a):
            assert np.array_equal(getattr(a, column), getattr(b, column), equal_nan=True), (table, column)
    assert json.dumps(to_spec_output(other)) != json.dumps(to_spec_output(one))


def test_telemetry_tables_are_consistent() -> None:
    system = random_system(17, shape="tree")
    result = simulate(system, 1.0, 17, matcher, collect_telemetry=True)
    t = result.telemetry
    assert t is not None
    links = t.links
    assert len(links.link) == result.event_hops
    for k in range(len(t.link_from)):  # per-link sequence numbers 0, 1, 2, ... in sending order
        mine = links.link == k
        assert np.array_equal(links.seq[mine], np.arange(mine.sum()))
        assert np.all(np.diff(links.sent_at_ms[mine]) >= 0)
    assert np.array_equal(np.isnan(links.delay_ms), links.lost)
    assert (t.brokers.wait_ms >= 0).all() and (t.brokers.queue_length >= 0).all()
    assert (t.brokers.service_ms >= 0).all()
    assert np.all(np.diff(t.receipts.received_at_ms) >= 0)
    published = t.events.published_at_ms[t.receipts.event]
    assert (t.receipts.received_at_ms >= published).all()
    assert np.all(np.diff(t.events.published_at_ms) >= 0)
    assert TICKS_PER_MS == 1_000_000


# --------------------------------------------------------------------------------------------
# Output and validation
# --------------------------------------------------------------------------------------------


def test_spec_output_has_exactly_the_spec_shape() -> None:
    system = random_system(3, shape="tree")
    system["subscribers"].append({"id": "nobody", "broker": "b0", "filter": "t = 9"})
    system["links"].append(link("b0", "nobody"))
    out = to_spec_output(simulate(system, 1.0, 3, matcher))
    json.dumps(out, allow_nan=False)
    assert set(out) == {"model", "subscribers", "brokers", "warnings"} and out["model"] == "simulation"
    subscribers = out["subscribers"]
    assert isinstance(subscribers, dict)
    for s in subscribers.values():
        assert set(s) == {"reliability", "reliability_low", "reliability_high", "mean_delay_ms", "p95_delay_ms"}
    assert subscribers["nobody"]["reliability"] is None
    assert any(w.startswith("nobody: no matching event") for w in out["warnings"])
    brokers = out["brokers"]
    assert isinstance(brokers, dict)
    for b in brokers.values():
        assert set(b) == {"arrival_rate_per_s", "rho", "mean_wait_ms"}


@pytest.mark.parametrize(("k", "n"), [(0, 10), (3, 10), (90, 100), (100, 100), (7, 2000)])
def test_wilson_interval_agrees_with_scipy(k: int, n: int) -> None:
    ci = binomtest(k, n).proportion_ci(0.9, method="wilson")
    assert wilson_interval(k, n) == pytest.approx((ci.low, ci.high), abs=1e-12)


def _valid() -> dict[str, Any]:
    return {
        "brokers": [{"id": "b1", "service_ms": expo(1.0)}, {"id": "b2", "service_ms": expo(1.0)}],
        "links": [link("p1", "b1"), link("b1", "b2"), link("b2", "s1")],
        "publishers": [
            {
                "id": "p1",
                "broker": "b1",
                "interarrival_ms": expo(5.0),
                "content": [{"p": 1.0, "lifetime_ms": 10.0, "attributes": {"t": 1}}],
            }
        ],
        "subscribers": [{"id": "s1", "broker": "b2", "filter": "t = 1"}],
    }


def _broken(change: Any) -> dict[str, Any]:
    system = _valid()
    change(system)
    return system


@pytest.mark.parametrize(
    ("system", "message"),
    [
        (
            _broken(lambda s: s["links"].append(link("b1", "b7"))),
            r"links\[3\]: 'to' names no broker or subscriber \('b7'\)",
        ),
        (_broken(lambda s: s["links"].append(link("q", "b1"))), r"links\[3\]: 'from' names no publisher or broker"),
        (
            _broken(
                lambda s: (
                    s.update(brokers=[*s["brokers"], {"id": "b3", "service_ms": expo(1.0)}])
                    or s["links"].extend([link("b2", "b3"), link("b3", "b1")])
                )
            ),
            r"cycle b1 -> b2 -> b3 -> b1",
        ),
        (
            _broken(lambda s: s["publishers"][0]["content"].append({"p": 0.5, "lifetime_ms": 1, "attributes": {}})),
            r"publishers\[0\] \('p1'\): content p values must sum to 1 \(got 1.5\)",
        ),
        (
            _broken(lambda s: s["subscribers"][0].update(filter="t = = 1")),
            r"subscribers\[0\] \('s1'\): filter 't = = 1' rejected: ",
        ),
        (
            _broken(lambda s: s["links"].pop(0)),
            r"publishers\[0\] \('p1'\): needs exactly one link, to its home broker 'b1'",
        ),
        (
            _broken(lambda s: s["links"].pop(2)),
            r"subscribers\[0\] \('s1'\): needs exactly one link, from its home broker",
        ),
        (
            _broken(lambda s: s["links"].append(link("b1", "b2"))),
            r"links\[3\]: duplicate link b1 -> b2 \(first at links\[1\]\)",
        ),
        (
            _broken(lambda s: s["subscribers"].append({"id": "b1", "broker": "b1", "filter": "t = 1"})),
            "already used by a broker",
        ),
        (_broken(lambda s: s["links"][1].update(reliability=1.5)), r"links\[1\]: 'reliability' must be in \[0, 1\]"),
        (
            _broken(lambda s: s["links"][1].update(delay_ms={"kind": "normal"})),
            r"links\[1\] \(b1 -> b2\).delay_ms: unknown kind",
        ),
        (
            _broken(lambda s: s["publishers"][0].update(broker="b9")),
            r"'broker' names no broker \('b9'\); known: b1, b2",
        ),
        (_broken(lambda s: s.update(extra=[])), "unknown section"),
        (_broken(lambda s: s["publishers"][0].update(interarrival_ms=det(0))), "mean > 0"),
    ],
)
def test_invalid_systems_are_rejected_with_a_clear_message(system: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        compile_system(system, matcher)


def test_both_directions_of_a_broker_pair_are_no_cycle_but_a_cyclic_component() -> None:
    """Events never go back over the link they came in on (the paper's up(l), eq. 2), so b1 <-> b2
    is valid; with traffic both ways the two queues form one component for the relaxation."""
    system = _valid()
    system["links"] += [link("b2", "b1"), link("p2", "b2"), link("b1", "s2")]
    system["publishers"].append({**system["publishers"][0], "id": "p2", "broker": "b2"})
    system["subscribers"].append({"id": "s2", "broker": "b1", "filter": "t = 1"})
    network = compile_system(system, matcher)
    assert network.components == ((0, 1),)
    draws = draw_inputs(network, 5.0, 1)
    _same_schedule(solve(network, draws), solve_reference(network, draws))


def test_bad_run_parameters_are_rejected() -> None:
    network = compile_system(_valid(), matcher)
    with pytest.raises(ValueError, match="seconds must be a finite number > 0"):
        draw_inputs(network, 0.0, 1)
    with pytest.raises(ValueError, match="warmup_s must be"):
        draw_inputs(network, 1.0, 1, warmup_s=-1.0)


# --------------------------------------------------------------------------------------------
# The paper's 20-broker tree
# --------------------------------------------------------------------------------------------


def test_reliability_tree_system_follows_table_3() -> None:
    system = reliability_tree_system(7)
    assert system == reliability_tree_system(7) and system != reliability_tree_system(8)
    brokers, links = system["brokers"], system["links"]
    publishers, subscribers = system["publishers"], system["subscribers"]
    assert isinstance(brokers, list) and isinstance(links, list)
    assert isinstance(publishers, list) and isinstance(subscribers, list)
    assert (len(brokers), len(publishers), len(subscribers)) == (20, 8, 100)
    assert len(links) == 2 * 19 + 8 + 100  # a tree, both directions, plus access links
    assert {b["service_ms"]["mean"] for b in brokers} == {100.0}  # 1 ms x 100 stored subscriptions
    assert {p["interarrival_ms"]["mean"] for p in publishers} == {1000.0}
    names = {name for p in publishers for c in p["content"] for name in c["attributes"]}
    assert names <= {"topic"} | {f"a{i}" for i in range(1, 21)}
    for p in publishers:
        assert math.fsum(c["p"] for c in p["content"]) == pytest.approx(1.0)
        assert {c["lifetime_ms"] for c in p["content"]} == {1000.0}
    for s in subscribers:
        assert s["filter"].startswith("topic = ")
        _parse(s["filter"])
    network = compile_system(system, matcher)
    assert max(len(c) for c in network.components) > 1  # events flow both ways: cyclic queues
    assert network.match.any(axis=0).mean() > 0.9  # nearly everybody can receive something
    uniform = reliability_tree_system(7, publishing="deterministic", matching="uniform")
    assert uniform["brokers"][0]["service_ms"] == {"kind": "uniform", "low": 0.0, "high": 200.0}


def test_tree_performance_smoke(capsys: pytest.CaptureFixture[str]) -> None:
    """Prints event-hops/s for the 20-broker tree (no timing assert; bench/ owns timings)."""
    system = reliability_tree_system(1)
    start = time.perf_counter()
    result = simulate(system, 300.0, 1, matcher)
    elapsed = time.perf_counter() - start
    rhos = [b.rho for b in result.brokers.values()]
    assert min(rhos) > 0.1 and max(rhos) < 0.9  # QUEUEING-NOTES §6.3: rho spans about 0.1-0.8
    with capsys.disabled():
        print(
            f"\n20-broker tree, 300 s (+{result.warmup_s:g} s warm-up/cool-down): {result.event_hops} event-hops "
            f"in {elapsed:.2f} s = {result.event_hops / elapsed:,.0f} event-hops/s ({result.sweeps} sweeps)"
        )
