"""docs/reference/qos-predict.md systems and a comparison shared by the predictor's tests.

:func:`chain` is a tandem of brokers with one publisher and one subscriber (the closed forms of
``test_prediction.py``); :func:`diamond` is a small network with two paths to one broker, a
pair of brokers linked both ways and two lifetimes (the parity tests);
:func:`assert_same_prediction` compares two predictions field by field, to rounding;
:func:`gi_m1_case` is a GI/M/1 queue's arrivals and its exact probability of waiting.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
from scipy import optimize

from routing.reliability.prediction import Prediction

ZERO = {"kind": "deterministic", "value": 0}


def exp(mean: float) -> dict[str, Any]:
    return {"kind": "exponential", "mean": mean}


def lognormal(mean: float, cv: float) -> dict[str, Any]:
    return {"kind": "lognormal", "mean": mean, "cv": cv}


def chain(
    services: list[dict[str, Any]],
    interarrival: dict[str, Any],
    lifetime_ms: float,
    *,
    delay: dict[str, Any] = ZERO,
    reliability: float = 1.0,
) -> dict[str, Any]:
    """p1 -> b1 -> ... -> bn -> s1, one content entry that s1 matches."""
    ids = [f"b{i + 1}" for i in range(len(services))]
    links = [{"from": "p1", "to": ids[0], "reliability": 1.0, "delay_ms": ZERO}]
    links += [{"from": a, "to": b, "reliability": reliability, "delay_ms": delay} for a, b in itertools.pairwise(ids)]
    links.append({"from": ids[-1], "to": "s1", "reliability": 1.0, "delay_ms": ZERO})
    return {
        "brokers": [{"id": b, "service_ms": s} for b, s in zip(ids, services, strict=True)],
        "links": links,
        "publishers": [
            {
                "id": "p1",
                "broker": ids[0],
                "interarrival_ms": interarrival,
                "content": [{"p": 1.0, "lifetime_ms": lifetime_ms, "attributes": {"t": 1}}],
            }
        ],
        "subscribers": [{"id": "s1", "broker": ids[-1], "filter": "t = 1"}],
    }


def diamond(lifetimes: tuple[float, float] = (60.0, 200.0), service_b4: float = 4.0) -> dict[str, Any]:
    """p1 -> b1, which feeds b4 both through b2 and through b3 (one event reaches b4 twice), and
    b4 <-> b5 both ways; two content entries with different lifetimes."""

    def link(a: str, b: str, r: float = 0.95, d: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"from": a, "to": b, "reliability": r, "delay_ms": d or lognormal(8.0, 0.6)}

    links = [link("p1", "b1", 1.0, exp(1.0)), link("p2", "b5", 0.99, exp(2.0))]
    links += [
        link("b1", "b2"),
        link("b1", "b3", 0.9),
        link("b2", "b4"),
        link("b3", "b4"),
        link("b4", "b5"),
        link("b5", "b4"),
    ]
    links += [link("b4", "s1", 1.0, exp(2.0)), link("b5", "s2"), link("b2", "s3", 0.97, exp(1.0))]
    content = [
        {"p": 0.6, "lifetime_ms": lifetimes[0], "attributes": {"t": 1}},
        {"p": 0.4, "lifetime_ms": lifetimes[1], "attributes": {"t": 2}},
    ]
    services = {"b1": exp(2.0), "b2": {"kind": "uniform", "low": 0.0, "high": 6.0}, "b3": exp(3.0)}
    services |= {"b4": exp(service_b4), "b5": {"kind": "gamma", "mean": 3.0, "cv": 0.5}}
    return {
        "brokers": [{"id": b, "service_ms": s} for b, s in services.items()],
        "links": links,
        "publishers": [
            {"id": "p1", "broker": "b1", "interarrival_ms": exp(25.0), "content": content},
            {
                "id": "p2",
                "broker": "b5",
                "interarrival_ms": {"kind": "deterministic", "value": 40.0},
                "content": content,
            },
        ],
        "subscribers": [
            {"id": "s1", "broker": "b4", "filter": "t >= 1"},
            {"id": "s2", "broker": "b5", "filter": "t = 2"},
            {"id": "s3", "broker": "b2", "filter": "t = 1"},
        ],
    }


def assert_same_prediction(fast: Prediction, ref: Prediction, p95_rel: float = 1e-7) -> None:
    assert fast.subscribers.keys() == ref.subscribers.keys()
    assert fast.warnings == ref.warnings
    for sid, f in fast.subscribers.items():
        r = ref.subscribers[sid]
        for name in ("reliability", "reliability_low", "reliability_high"):
            a, b = getattr(f, name), getattr(r, name)
            assert (a is None) == (b is None), (sid, name)
            if a is not None:
                assert a == pytest.approx(b, abs=1e-9), (sid, name)
        for name, rel in (("mean_delay_ms", 1e-9), ("p95_delay_ms", p95_rel)):
            a, b = getattr(f, name), getattr(r, name)
            assert (a is None) == (b is None), (sid, name, a, b)
            if a is not None:
                assert a == pytest.approx(b, rel=rel, abs=1e-9), (sid, name)
        assert f.matching_rate_per_s == pytest.approx(r.matching_rate_per_s, rel=1e-12)
        shares = {c.element: c.share for c in f.contributors}
        assert shares.keys() == {c.element for c in r.contributors}
        for c in r.contributors:
            assert shares[c.element] == pytest.approx(c.share, abs=1e-9)
    for bid, fb in fast.brokers.items():
        rb = ref.brokers[bid]
        for name in ("arrival_rate_per_s", "rho", "mean_wait_ms", "ca2", "delay_probability"):
            assert getattr(fb, name) == pytest.approx(getattr(rb, name), rel=1e-9, abs=1e-12), (bid, name)
        assert fb.superposition == rb.superposition


def gi_m1_sigma(laplace: Any, mu: float) -> float:
    """The root in (0, 1) of sigma = A*(mu (1 - sigma))."""
    return float(optimize.brentq(lambda s: laplace(mu * (1.0 - s)) - s, 1e-9, 1.0 - 1e-12))


def gi_m1_case(rho: float, k: int, tau: float) -> tuple[dict[str, Any], float, float]:
    """A GI/M/1 queue of mean service ``tau`` at load ``rho``, with deterministic (``k = 0``)
    or Erlang-k arrivals: the arrivals' DIST, the exact sigma and the arrivals' scv."""
    mean_gap = tau / rho
    if k == 0:
        arrivals: dict[str, Any] = {"kind": "deterministic", "value": mean_gap}

        def laplace(s: float) -> float:
            return math.exp(-s * mean_gap)

    else:
        arrivals = {"kind": "gamma", "mean": mean_gap, "cv": 1.0 / math.sqrt(k)}

        def laplace(s: float) -> float:
            return (k / mean_gap / (k / mean_gap + s)) ** k

    mu = 1.0 / tau
    sigma = gi_m1_sigma(laplace, mu)
    ca2 = 0.0 if k == 0 else 1.0 / k
    return arrivals, sigma, ca2
