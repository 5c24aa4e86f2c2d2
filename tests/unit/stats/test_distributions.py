"""routing.stats.distributions.parse_distribution: the fast path for well-formed dicts of floats
gives what the checks give, and every malformed DIST still gets its message."""

from __future__ import annotations

import math
import re
import types

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
