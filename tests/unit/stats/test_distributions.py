"""The docs/reference/qos-predict.md distributions (``routing.stats.distributions``).

What is checked: every kind's moments and CDF against 400,000 samples, the scv computed rather than
named, clear errors for bad DISTs naming where they sit; and ``parse_distribution``'s fast path for
well-formed dicts of floats gives what the checks give, while every malformed DIST still gets its
message.
"""

from __future__ import annotations

import math
import re
import types
from typing import Any

import numpy as np
import pytest

from routing.stats.distributions import Exponential, Gamma, Lognormal, Uniform, parse_distribution


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"kind": "lognormal", "mean": 10.5, "cv": 0.5}, Lognormal(10.5, 0.5)),
        ({"kind": "lognormal", "mean": 10, "cv": 1}, Lognormal(10.0, 1.0)),  # ints: the checked path
        ({"kind": "uniform", "low": 0, "high": 2.5}, Uniform(0.0, 2.5)),
        (types.MappingProxyType({"kind": "gamma", "mean": 4.0, "cv": 0.7}), Gamma(4.0, 0.7)),  # not a dict
    ],
)
def test_well_formed(spec: object, expected: object) -> None:
    got = parse_distribution(spec)
    assert got == expected
    assert all(type(v) is float for v in vars(got).values())


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"kind": "exponential", "mean": math.inf}, "mean must be a finite number"),
        ({"kind": "exponential", "mean": -math.inf}, "mean must be a finite number"),
        ({"kind": "exponential", "mean": False}, "mean must be a finite number"),
        ({"kind": "exponential", "mean": "1"}, "mean must be a finite number"),
        ({"kind": "lognormal", "mean": 1.0, "cv": 0.5, "sd": 2.0}, "unexpected sd for lognormal"),
        ({"kind": "lognormal", "mean": 1.0, "sd": 2.0}, "lognormal needs mean, cv (missing cv)"),
        ([("kind", "exponential")], "a DIST must be an object"),
    ],
)
def test_malformed(spec: object, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_distribution(spec)


def test_exponential_value() -> None:
    assert parse_distribution({"kind": "exponential", "mean": 2.0}) == Exponential(2.0)


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
    """docs/reference/reliability-model.md §1.5: the paper's 'uniform has burstiness 0' is wrong;
    Uniform(0, 2m) has 1/3."""
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
