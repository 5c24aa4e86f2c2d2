"""How many multicast groups each delivery scheme needs: Opyrchal et al.'s closed forms.

Opyrchal, Astley, Auerbach, Banavar, Strom and Sturman, "Exploiting IP multicast in
content-based publish-subscribe systems" (2000), count the groups that N endpoints (brokers; in
SiftStream, channel consumers) need when they are split into C clusters of B = N / C endpoints
(their Fig. 4), with a TCGM threshold T and k neighbours per endpoint. The contract, with the
paper's Fig. 2 as its check, is docs/reference/channels.md (group counts).

Symbols: ``n`` endpoints N, ``c`` clusters C, ``b`` = N / C endpoints per cluster B, ``t`` the
TCGM threshold T (1 <= T <= B - 1), ``k`` neighbours per endpoint.

=========  ==============================  =====================================  ===============
scheme     groups                          groups per endpoint                    sends per event
=========  ==============================  =====================================  ===============
ideal      2^N                             2^(N-1)                                1
flooding   1                               1                                      1
CGM        C 2^B                           2^(B-1)                                C
TCGM       C sum_{i=0..T} binom(B, i)      sum_{i=0..T-1} binom(B-1, i) + 1       C
neighbor   N 2^k                           k 2^(k-1)                              one per hop
=========  ==============================  =====================================  ===============

Invariants: every count is an exact integer (``2^168`` has 51 digits); CGM counts each cluster's
empty subset, as the paper's Fig. 2 does; TCGM's i = 0 term stands for the group of the whole
cluster, which every endpoint of the cluster belongs to (the paper's per-endpoint formula leaves
it out; here it is counted).

Examples
--------
>>> counts = group_counts(168, 8, threshold=5, neighbors=6)
>>> counts["groups"]["cgm"], counts["groups"]["tcgm"], counts["groups_per_endpoint"]["tcgm"]
(16777216, 223168, 6197)
>>> cgm_max_endpoints(2**24, 8), cgm_max_endpoints(2**24, 4)
(168, 88)
"""

from __future__ import annotations

from math import comb
from typing import Any

__all__ = ["cgm_max_endpoints", "group_counts"]


def _positive(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def group_counts(n: int, c: int, threshold: int | None = None, neighbors: int | None = None) -> dict[str, Any]:
    """The group counts of every scheme for ``n`` endpoints in ``c`` clusters.

    ``tcgm`` appears when ``threshold`` is given and ``neighbor`` when ``neighbors`` is given;
    ``threshold`` and ``neighbors`` are echoed only when given. Raises ``ValueError`` for N or C
    below 1, C not dividing N, T outside 1..B-1, or k below 1.

    >>> group_counts(4, 2)["groups"]
    {'ideal': 16, 'flooding': 1, 'cgm': 8}
    """
    n = _positive("endpoints", n)
    c = _positive("clusters", c)
    if n % c:
        raise ValueError(f"clusters must divide endpoints: {n} endpoints in {c} clusters")
    b = n // c
    out: dict[str, Any] = {"endpoints": n, "clusters": c, "per_cluster": b}
    groups: dict[str, int] = {"ideal": 2**n, "flooding": 1, "cgm": c * 2**b}
    per_endpoint: dict[str, int] = {"ideal": 2 ** (n - 1), "flooding": 1, "cgm": 2 ** (b - 1)}
    sends: dict[str, int] = {"ideal": 1, "flooding": 1, "cgm": c}
    if threshold is not None:
        if not isinstance(threshold, int) or isinstance(threshold, bool) or not 1 <= threshold <= b - 1:
            raise ValueError(
                f"threshold must be an integer in 1..{b - 1} (endpoints per cluster - 1), got {threshold!r}"
            )
        out["threshold"] = threshold
        groups["tcgm"] = c * sum(comb(b, i) for i in range(threshold + 1))
        per_endpoint["tcgm"] = sum(comb(b - 1, i) for i in range(threshold)) + 1
        sends["tcgm"] = c
    if neighbors is not None:
        k = _positive("neighbors", neighbors)
        out["neighbors"] = k
        groups["neighbor"] = n * 2**k
        per_endpoint["neighbor"] = k * 2 ** (k - 1)
    out["groups"] = groups
    out["groups_per_endpoint"] = per_endpoint
    out["sends_per_event_max"] = sends
    return out


def cgm_max_endpoints(budget: int, c: int) -> int:
    """The most endpoints CGM supports with ``budget`` groups and ``c`` clusters:
    C floor(log2(G / C)), computed exactly on integers (0 when G < C).

    >>> cgm_max_endpoints(2**17, 8), cgm_max_endpoints(2**13, 4)
    (112, 44)
    """
    g = _positive("budget", budget)
    c = _positive("clusters", c)
    if g < c:
        return 0
    return c * ((g // c).bit_length() - 1)
