"""The papers' topologies by name, and :func:`generate`, the entry point of ``siftstream topology``.

The setups the papers evaluate on, each a seeded function over the generators of
:mod:`routing.planning.topology`:

- ``chen-flat-12``, ``chen-ts-100``, ``chen-flat-100``: Chen et al. 2004, §4.2-§4.3;
- ``opyrchal-fig5``: Opyrchal et al. 2000, §3.1 and Fig. 5;
- ``reliability-tree-20``: Pongthawornkamol et al., §5.1 and Table 3.

:data:`NAMED` maps those names, and :data:`GENERATORS` the parametric generators' names, to their
functions; :func:`generate` builds any of them from command-line strings.

>>> topo = generate("chen-flat-12", seed=3)
>>> len(topo.nodes), len(topo.undirected_edges()), len(topo.links), topo.is_connected()
(12, 18, 36, True)
>>> sorted({n.role for n in topo.nodes})
['broker', 'publisher', 'subscriber']
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from routing.planning.topology import (
    DEFAULT_TS_COSTS,
    OPYRCHAL_BANDWIDTH_MBPS,
    Link,
    Node,
    Topology,
    _undirected,
    application_overlay,
    attach_clients,
    flat_random,
    pure_random,
    random_tree,
    transit_stub,
    tree,
    waxman,
)

__all__ = [
    "GENERATORS",
    "NAMED",
    "chen_flat_12",
    "chen_flat_100",
    "chen_transit_stub_100",
    "generate",
    "opyrchal_fig5",
    "reliability_tree",
]

# --------------------------------------------------------------------------------------------
# The papers' setups
# --------------------------------------------------------------------------------------------


def _substream(seed: int) -> int:
    """A seed for a second, independent random choice made from the same user seed."""
    return int(np.random.default_rng([seed, 1]).integers(2**62))


def chen_flat_12(seed: int = 0) -> Topology:
    """The small flat network of Chen et al. 2004, §4.3.1: 12 nodes, 18 links, 3 publishers, 3 subscribers, 6 brokers.

    "A Flat random graph G(V, L) is generated with |V| = 12 and |L| = 18 ... we have G = G_P" and,
    §4.2, "All physical links have a link cost of one". So: :func:`flat_random` with n = 12, m = 18
    (exactly) and cost 1, then the 12 nodes are given roles at random by :func:`application_overlay`
    with |P| = |S| = 3 and |B| = 6, which with unit costs keeps every edge (G = G_P). The paper's
    |L| = 18 counts undirected links: the topology has 36 directed ones.

    >>> topo = chen_flat_12(seed=0)
    >>> len(topo.ids("publisher")), len(topo.ids("subscriber")), len(topo.ids("broker")), len(topo.undirected_edges())
    (3, 3, 6, 18)
    """
    physical = flat_random(12, 18, seed=seed, cost_range=(1, 1), role="router")
    return application_overlay(physical, 3, 3, 6, seed=_substream(seed), name=f"chen-flat-12(seed={seed})")


def _ts_100(seed: int, costs: Mapping[str, float] | None = None, name: str | None = None) -> Topology:
    """GT-ITM's sample ``t100`` shape: 1 transit domain x 4 transit nodes x (1 + 3 stub domains x 8) = 100 nodes."""
    return transit_stub(1, 4, 3, 8, seed=seed, transit_alpha=0.6, stub_alpha=0.42, costs=costs, name=name)


def chen_transit_stub_100(seed: int = 0, overlay: bool = False) -> Topology:
    """The 100-node transit-stub network of Chen et al. 2004, §4.3.2.

    Chen: "The Transit-Stub topology contains four transit nodes forming one transit domain, with
    the remaining stub nodes forming 12 stub domains", and §4.2, every physical link costs 1. So:
    one transit domain of 4 transit nodes, 3 stub domains per transit node (4 x 3 = 12), and
    (100 - 4) / 12 = 8 nodes per stub domain: 1 x 4 x (1 + 3 x 8) = 100. These
    are exactly GT-ITM's sample specification ``t100`` (``ts``; ``3 0 0`` / ``1 20 3 1.0`` /
    ``4 20 3 0.6`` / ``8 10 3 0.42``), whose edge probabilities (0.6 in the transit domain, 0.42 in
    stub domains, pure random edges) are used here; Chen does not state them. GT-ITM randomises
    domain sizes around these means; here they are exact.

    Parameters
    ----------
    seed : int
        Seed of ``numpy.random.default_rng``.
    overlay : bool
        Return instead the application-level network of §4.3.2 over it: |P| = |S| = 10, |B| = 20
        (:func:`application_overlay`).

    >>> topo = chen_transit_stub_100(seed=1)
    >>> len(topo.nodes), len(topo.ids("transit")), len({n.domain for n in topo.nodes if n.role == "stub"})
    (100, 4, 12)
    """
    physical = _ts_100(seed, dict.fromkeys(DEFAULT_TS_COSTS, 1.0), f"chen-ts-100(seed={seed})")
    return application_overlay(physical, 10, 10, 20, seed=_substream(seed)) if overlay else physical


def chen_flat_100(seed: int = 0, overlay: bool = False) -> Topology:
    """The 100-node flat network of Chen et al. 2004, §4.3.2.

    Chen: "The flat topology is generated with parameters scale=10, edgmethod=3 and alpha=0.3"
    (GT-ITM). GT-ITM's edge method 3 is "pure random": every node pair is an edge with probability
    alpha, so this is :func:`pure_random` with n = 100, alpha = 0.3 (expected 0.3 x 4950 = 1485
    undirected edges; the count varies with the seed) and, §4.2, cost 1 per link. ``scale`` only
    places nodes in the plane and does not affect this method.

    Parameters
    ----------
    seed : int
        Seed of ``numpy.random.default_rng``.
    overlay : bool
        Return instead the application-level network of §4.3.2 over it: |P| = |S| = 10, |B| = 20.

    >>> topo = chen_flat_100(seed=2)
    >>> len(topo.nodes), 1300 < len(topo.undirected_edges()) < 1670
    (100, True)
    """
    physical = pure_random(100, 0.3, seed=seed, role="router", name=f"chen-flat-100(seed={seed})")
    return application_overlay(physical, 10, 10, 20, seed=_substream(seed)) if overlay else physical


def opyrchal_fig5(seed: int = 0, cost: str = "inverse-bandwidth") -> Topology:
    """The simulated WAN of Opyrchal et al. 2000, §3.1 (Fig. 5): 100 routers, 88 brokers (8 publishing, 80 subscribing).

    The paper: a GT-ITM transit-stub topology with "eighty broker nodes with only subscribing
    clients ..., eight broker nodes with only publishing clients ..., and one hundred
    multicast-enabled router nodes"; "backbone links ... OC-12 class (622Mbit), intermediate links
    ... OC-3 class (155Mbit), and fringe links ... high-speed LAN class (100Mbit)"; §3.2: intermediate
    links are router to router, fringe links router to broker.

    The GT-ITM parameters of Fig. 5 are not given; the 100 routers use the same 100-node shape as
    :func:`chen_transit_stub_100` (4 transit routers, 12 stub domains of 8). Transit-transit links
    are backbone, every other router-router link intermediate. Each broker hangs by one fringe link
    off its own stub router (88 of the 96, drawn without replacement); publishing brokers are
    ``pb0`` ... ``pb7``, subscribing brokers ``sb0`` ... ``sb79`` (role ``broker``, domain of their
    router). The 4 transit routers (stub domains ``S0.k.*`` hang off ``t0.k``) can serve as the 4 regions of
    the paper's CGM-4 clustering. Fig. 5's per-link latencies are not in the text: ``delay_ms`` is
    None.

    Parameters
    ----------
    seed : int
        Seed of ``numpy.random.default_rng``.
    cost : {"inverse-bandwidth", "hops"}
        ``inverse-bandwidth``: 622 / bandwidth, as OSPF's reference-bandwidth metric with the
        fastest link as reference (backbone 1, intermediate 4.01, fringe 6.22); ``hops``: 1.

    >>> topo = opyrchal_fig5(seed=0)
    >>> len(topo.ids("router")), len(topo.ids("broker")), sorted({k.bandwidth_mbps for k in topo.links})
    (100, 88, [100.0, 155.0, 622.0])
    """
    if cost not in ("inverse-bandwidth", "hops"):
        raise ValueError(f"cost must be 'inverse-bandwidth' or 'hops' (got {cost!r})")
    rng = np.random.default_rng(seed)
    routers = _ts_100(int(rng.integers(2**31)))

    def link(src: str, dst: str, link_class: str) -> Link:
        bw = OPYRCHAL_BANDWIDTH_MBPS[link_class]
        price = 1.0 if cost == "hops" else OPYRCHAL_BANDWIDTH_MBPS["backbone"] / bw
        return Link(src, dst, price, bandwidth_mbps=bw, link_class=link_class)

    nodes = [Node(n.id, "router", n.domain) for n in routers.nodes]
    edges = [
        link(u, v, "backbone" if routers.node(u).role == routers.node(v).role == "transit" else "intermediate")
        for u, v in routers.undirected_edges()
    ]
    stubs = routers.ids("stub")
    hosts = [stubs[int(i)] for i in rng.choice(len(stubs), size=88, replace=False)]
    for index, host in enumerate(hosts):
        broker = f"pb{index}" if index < 8 else f"sb{index - 8}"
        nodes.append(Node(broker, "broker", routers.node(host).domain))
        edges.append(link(host, broker, "fringe"))
    return _undirected(f"opyrchal-fig5(seed={seed},cost={cost})", nodes, edges)


def reliability_tree(seed: int = 0, clients: bool = False) -> Topology:
    """The 20-broker tree of Pongthawornkamol et al., §5.1 (Table 3: 20 brokers, 8 publishers, 100 subscribers).

    The paper assumes an acyclic broker tree (§2.1, §2.3) and gives its size (Table 3) but not its shape,
    so this is a balanced tree: the complete binary tree on 20 brokers ``b0`` ... ``b19`` in heap
    order (:func:`tree`; depths 0-4), each link cost 1. Link delays came from PlanetLab traces in
    the paper and are not reproduced: give them with :func:`to_qos_links`.

    Parameters
    ----------
    seed : int
        Seed of ``numpy.random.default_rng`` (used only with ``clients``).
    clients : bool
        Also attach Table 3's 8 publishers and 100 subscribers, each to a uniformly random broker.

    >>> topo = reliability_tree()
    >>> len(topo.nodes), len(topo.undirected_edges()), topo.neighbors("b0")
    (20, 19, ('b1', 'b2'))
    """
    brokers = tree(20, 2, name="reliability-tree-20")
    if not clients:
        return brokers
    return attach_clients(brokers, 8, 100, seed=seed, name=f"reliability-tree-20+clients(seed={seed})")


# --------------------------------------------------------------------------------------------
# Registry and the command-line entry point
# --------------------------------------------------------------------------------------------

NAMED: dict[str, Callable[..., Topology]] = {
    "chen-flat-12": chen_flat_12,
    "chen-ts-100": chen_transit_stub_100,
    "chen-flat-100": chen_flat_100,
    "opyrchal-fig5": opyrchal_fig5,
    "reliability-tree-20": reliability_tree,
}
"""The papers' setups by name (see each function for its source and parameters)."""

GENERATORS: dict[str, Callable[..., Topology]] = {
    "flat-random": flat_random,
    "pure-random": pure_random,
    "waxman": waxman,
    "transit-stub": transit_stub,
    "tree": tree,
    "random-tree": random_tree,
}
"""The parametric generators by name."""


def generate(kind: str, **params: Any) -> Topology:
    """Build the topology ``kind`` (a key of :data:`NAMED` or :data:`GENERATORS`) with ``params``.

    String values (as a command line gives them) are converted to the parameter's type: ``"12"``
    to 12 for an int, ``"0.3"`` for a float, ``"true"``/``"false"`` for a bool, ``"1,10"`` for a
    pair of floats, ``"none"`` for an optional parameter. Unknown kinds and parameters raise
    ``ValueError`` listing the valid ones.

    >>> len(generate("flat-random", n="6", m="7", seed="2", cost_range="1,3").links)
    14
    >>> generate("chen-ts-100", seed="1", overlay="true").ids("publisher")[:3]
    ('p0', 'p1', 'p2')
    """
    fn = NAMED.get(kind) or GENERATORS.get(kind)
    if fn is None:
        raise ValueError(f"unknown topology kind {kind!r}; valid: {', '.join([*NAMED, *GENERATORS])}")
    signature = inspect.signature(fn)
    hints = typing.get_type_hints(fn)
    args: dict[str, Any] = {}
    for key, value in params.items():
        if key not in signature.parameters:
            raise ValueError(f"{kind} takes no parameter {key!r}; valid: {', '.join(signature.parameters)}")
        args[key] = _coerce(kind, key, value, hints.get(key, Any))
    missing = [
        p.name for p in signature.parameters.values() if p.default is inspect.Parameter.empty and p.name not in args
    ]
    if missing:
        raise ValueError(f"{kind} needs parameter {missing[0]!r}")
    return fn(**args)


def _coerce(kind: str, key: str, value: Any, hint: Any) -> Any:
    """``value`` converted to ``hint`` when it is a string (the command line's form)."""
    if not isinstance(value, str):
        return value
    options = [hint]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        options = list(typing.get_args(hint))
        if type(None) in options and value.lower() in ("none", "null", ""):
            return None
        options = [o for o in options if o is not type(None)]
    target = options[0] if options else Any
    try:
        if target is bool:
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(value)
            return value.lower() in ("true", "1", "yes")
        if target is int:
            return int(value)
        if target is float:
            return float(value)
        if typing.get_origin(target) is tuple:
            return tuple(float(part) for part in value.split(","))
    except ValueError:
        raise ValueError(
            f"{kind}: parameter {key}={value!r} is not a valid {getattr(target, '__name__', target)}"
        ) from None
    return value
