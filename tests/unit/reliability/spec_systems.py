"""docs/reference/qos-predict.md system builders and a test matcher, shared by the reliability tests.

The matcher is a small test-only reading of docs/reference/filters.md conjunctions: ``routing.matching.language`` is
written separately, and the simulator and the predictor take the matcher as an argument. The
builders draw whole systems from one seed (:func:`random_system`), which is why they live here
rather than in ``tests/strategies.py`` (which holds the record strategies).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from typing import Any

import numpy as np

from routing.stats.distributions import KINDS

# --------------------------------------------------------------------------------------------
# A test matcher for docs/reference/filters.md conjunctions: =, !=, <, <=, >, >=, between, in; numbers and strings
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
def parse_conjunction(text: str) -> tuple[tuple[Any, ...], ...]:
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
    """docs/reference/filters.md semantics for the forms above: a missing attribute or a kind mismatch is false."""
    for predicate in parse_conjunction(text):
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


def valid_system() -> dict[str, Any]:
    """Two brokers in a line, one publisher, one subscriber: a valid system to break."""
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
