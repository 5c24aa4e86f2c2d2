"""The evaluation system of the Pongthawornkamol paper as a docs/reference/qos-predict.md document.

:func:`reliability_tree_system` builds a broker tree with publishers, subscribers and content in
the style of the evaluation of Pongthawornkamol, Nahrstedt and Wang, "Towards Timeliness and
Reliability Analysis of Distributed Content-based Publish/Subscribe Systems over Best-effort
Networks" (§5.1, Table 3), with the choices the paper leaves open taken as docs/reference/reliability-model.md §8.4
says. It is the default workload of ``siftstream qos`` and ``siftstream simulate``, of the
reliability benchmarks and of the tests that need a realistic network.

Invariant: everything random comes from ``numpy.random.default_rng(seed)``, so one seed gives one
document.

Examples
--------
>>> system = reliability_tree_system(1, brokers=3, publishers=1, subscribers=2)
>>> [b["id"] for b in system["brokers"]], len(system["links"])  # 2 tree edges both ways + 3 access links
(['b1', 'b2', 'b3'], 7)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["reliability_tree_system"]

FloatArray = NDArray[np.float64]


def _zipf_weights(n: int, s: float) -> FloatArray:
    w = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** s
    out: FloatArray = w / w.sum()
    return out


def _interval(kind: str, mean: float) -> dict[str, object]:
    if kind == "exponential":
        return {"kind": "exponential", "mean": mean}
    if kind == "deterministic":
        return {"kind": "deterministic", "value": mean}
    if kind == "uniform":
        return {"kind": "uniform", "low": 0.0, "high": 2.0 * mean}
    raise ValueError(f"unknown distribution kind {kind!r}; valid: deterministic, exponential, uniform")


def reliability_tree_system(
    seed: int,
    *,
    brokers: int = 20,
    publishers: int = 8,
    subscribers: int = 100,
    topics: int = 4,
    attributes: int = 21,
    values_per_attribute: int = 4,
    content_entries: int = 40,
    rate_per_s: float = 1.0,
    lifetime_ms: float = 1000.0,
    publishing: str = "exponential",
    matching: str = "exponential",
    ms_per_subscription: float = 1.0,
    max_degree: int = 4,
    zipf_s: float = 1.0,
    link_median_ms: tuple[float, float] = (40.0, 120.0),
    access_median_ms: tuple[float, float] = (5.0, 20.0),
    link_scv: float = 0.5,
    link_reliability: tuple[float, float] = (0.97, 1.0),
) -> dict[str, Any]:
    """A docs/reference/qos-predict.md system in the style of the Pongthawornkamol paper's evaluation (§5.1, Table 3).

    Table 3: 20 brokers, 8 publishers at about 1 message/s, 100 subscribers, 4 topics,
    21 attributes (the topic plus 20 others), lifetime 1 s, Zipf-like content; matching time
    grows 1 ms per stored subscription (every subscription reaches every broker of the tree, so
    E[S] = 1 ms x subscribers = 100 ms), uniform or exponential; publishing intervals
    exponential, deterministic or uniform. Choices the paper leaves open follow
    docs/reference/reliability-model.md §8.4: a random recursive tree of maximum degree ``max_degree``; link delays
    lognormal with a median uniform in ``link_median_ms`` and scv ``link_scv`` (the same in
    both directions of a broker pair); link reliability uniform in ``link_reliability``.

    Content: attribute ``topic`` takes values 0..topics-1; the other ``attributes - 1``
    attributes ``a1``, ``a2``, ... belong to topics round-robin and take integer values
    0..values_per_attribute-1. Each publisher has ``content_entries`` distinct entries (topic
    and values Zipf(``zipf_s``), value 0 the most popular) with Zipf popularity by rank.
    Subscriber filters are a topic plus one or two range predicates on that topic's attributes,
    in docs/reference/filters.md syntax (``topic = 2 and a3 <= 1``).

    Parameters
    ----------
    seed : int
        Everything random comes from ``numpy.random.default_rng(seed)``.
    publishing, matching : str
        Kind of the inter-publication and the service distribution: ``exponential``,
        ``deterministic`` or ``uniform`` (on [0, 2 x mean]).

    Returns
    -------
    dict
        The system document.

    Examples
    --------
    >>> system = reliability_tree_system(7)
    >>> len(system["brokers"]), len(system["publishers"]), len(system["subscribers"])
    (20, 8, 100)
    >>> system["brokers"][0]["service_ms"]
    {'kind': 'exponential', 'mean': 100.0}
    """
    if brokers < 1 or publishers < 0 or subscribers < 0 or topics < 1 or attributes < 2:
        raise ValueError("need brokers >= 1, publishers >= 0, subscribers >= 0, topics >= 1, attributes >= 2")
    if max_degree < 2 and brokers > 2:
        raise ValueError(f"max_degree must be >= 2 to build a tree of {brokers} brokers")
    rng = np.random.default_rng(seed)
    broker_ids = [f"b{i + 1}" for i in range(brokers)]
    service = _interval(matching, ms_per_subscription * subscribers)
    degree = [0] * brokers
    edges: list[tuple[int, int]] = []
    for i in range(1, brokers):
        open_ = [j for j in range(i) if degree[j] < max_degree]
        j = open_[int(rng.integers(len(open_)))]
        degree[i] += 1
        degree[j] += 1
        edges.append((j, i))

    cv = math.sqrt(link_scv)

    def link(src: str, dst: str, median_range: tuple[float, float]) -> list[dict[str, object]]:
        median = float(rng.uniform(*median_range))
        mean = median * math.sqrt(1.0 + link_scv)  # lognormal: mean = median * exp(sigma^2 / 2)
        reliability = round(float(rng.uniform(*link_reliability)), 4)
        delay = {"kind": "lognormal", "mean": round(mean, 3), "cv": cv}
        return [{"from": src, "to": dst, "reliability": reliability, "delay_ms": delay}]

    links: list[dict[str, object]] = []
    for j, i in edges:
        pair = link(broker_ids[j], broker_ids[i], link_median_ms)
        links += [*pair, {**pair[0], "from": broker_ids[i], "to": broker_ids[j]}]

    owned: list[list[str]] = [[] for _ in range(topics)]
    for a in range(1, attributes):
        owned[(a - 1) % topics].append(f"a{a}")
    topic_weights = _zipf_weights(topics, zipf_s)
    value_weights = _zipf_weights(values_per_attribute, zipf_s)

    publisher_docs: list[dict[str, object]] = []
    for p in range(publishers):
        pid = f"p{p + 1}"
        home = broker_ids[int(rng.integers(brokers))]
        entries: dict[tuple[tuple[str, int], ...], None] = {}
        for _ in range(50 * content_entries):
            if len(entries) >= content_entries:
                break
            topic = int(rng.choice(topics, p=topic_weights))
            values = rng.choice(values_per_attribute, size=len(owned[topic]), p=value_weights)
            entries.setdefault((("topic", topic), *zip(owned[topic], (int(v) for v in values), strict=True)))
        weights = _zipf_weights(len(entries), zipf_s)
        content = [
            {"p": float(w), "lifetime_ms": lifetime_ms, "attributes": dict(entry)}
            for w, entry in zip(weights, entries, strict=True)
        ]
        publisher_docs.append(
            {
                "id": pid,
                "broker": home,
                "interarrival_ms": _interval(publishing, 1000.0 / rate_per_s),
                "content": content,
            }
        )
        links += link(pid, home, access_median_ms)

    top = values_per_attribute - 1
    subscriber_docs: list[dict[str, object]] = []
    for s in range(subscribers):
        sid = f"s{s + 1}"
        home = broker_ids[int(rng.integers(brokers))]
        topic = int(rng.choice(topics, p=topic_weights))
        names = owned[topic]
        chosen = rng.choice(len(names), size=min(len(names), 1 + int(rng.random() < 0.3)), replace=False)
        predicates = [f"topic = {topic}"]
        for c in sorted(int(x) for x in chosen):
            lo = int(rng.integers(values_per_attribute))
            hi = int(rng.integers(lo, values_per_attribute))
            name = names[c]
            if lo == hi:
                predicates.append(f"{name} = {lo}")
            elif lo == 0:
                predicates.append(f"{name} <= {min(hi, top - 1)}")
            elif hi == top:
                predicates.append(f"{name} >= {lo}")
            else:
                predicates.append(f"{name} between {lo} and {hi}")
        subscriber_docs.append({"id": sid, "broker": home, "filter": " and ".join(predicates)})
        links += link(home, sid, access_median_ms)

    return {
        "brokers": [{"id": b, "service_ms": dict(service)} for b in broker_ids],
        "links": links,
        "publishers": publisher_docs,
        "subscribers": subscriber_docs,
    }
