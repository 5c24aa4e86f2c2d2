"""Which brokers and links account for a subscriber's predicted deadline misses.

Each :class:`routing.reliability.prediction.SubscriberPrediction` carries its contributors
(:class:`Contributor`): every broker and link on the subscriber's routes with its share of the
miss probability 1 - R'_s. The miss splits into a loss part, 1 - prod r_l^(w_l) (at most the
miss), shared among the links by -log r_l, and a lateness part (the rest), shared among brokers
and links by the mean delay each adds (wait plus service for a broker, E[D_l] for a link); w_l is
the fraction of the subscriber's matching rate whose routes cross the element
(:func:`blame_shares`). Shares sum to 1, largest first.

A large system has too many (subscriber, element) pairs to build them all up front, so
:class:`Blame` works a subscriber's contributors out on first use, from a
:class:`BlameContext` that all subscribers of one prediction share.

Examples
--------
>>> from routing.reliability.prediction import predict
>>> exp = lambda mean: {"kind": "exponential", "mean": mean}
>>> zero = {"kind": "deterministic", "value": 0}
>>> system = {"brokers": [{"id": "b1", "service_ms": exp(1)}, {"id": "b2", "service_ms": exp(8)}],
...           "links": [{"from": "p1", "to": "b1", "reliability": 1.0, "delay_ms": zero},
...                     {"from": "b1", "to": "b2", "reliability": 1.0, "delay_ms": zero},
...                     {"from": "b2", "to": "s1", "reliability": 1.0, "delay_ms": zero}],
...           "publishers": [{"id": "p1", "broker": "b1", "interarrival_ms": exp(10),
...                           "content": [{"p": 1.0, "lifetime_ms": 30, "attributes": {"t": 1}}]}],
...           "subscribers": [{"id": "s1", "broker": "b2", "filter": "t = 1"}]}
>>> first = predict(system).subscribers["s1"].contributors[0]  # b2 is loaded 0.8, b1 0.1
>>> first.element, round(first.utilisation, 2)
('b2', 0.8)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np
from numpy.typing import NDArray

from routing.reliability.propagation import Paths
from routing.reliability.system import Overlay, RouteTree

__all__ = ["Blame", "BlameContext", "Contributor", "blame_shares"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class Contributor:
    """A broker or link on a subscriber's routes and its share of the deadline-miss probability."""

    element: str
    utilisation: float | None
    delay_ms: float
    share: float


class Blame(Sequence[Contributor]):
    """A subscriber's contributors, worked out on first use (a large system has too many
    (subscriber, element) pairs to build them all up front)."""

    __slots__ = ("_ctx", "_done", "_miss", "_s")

    def __init__(self, ctx: BlameContext, s: int, miss: float) -> None:
        self._ctx, self._s, self._miss = ctx, s, miss
        self._done: tuple[Contributor, ...] | None = None

    def _get(self) -> tuple[Contributor, ...]:
        if self._done is None:
            self._done = self._ctx.contributors(self._s, self._miss)
        return self._done

    @overload
    def __getitem__(self, i: int) -> Contributor: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[Contributor]: ...

    def __getitem__(self, i: int | slice) -> Contributor | Sequence[Contributor]:
        return self._get()[i]

    def __len__(self) -> int:
        return len(self._get())

    def __eq__(self, other: object) -> bool:
        return tuple(self) == tuple(other) if isinstance(other, Sequence) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._get())

    def __repr__(self) -> str:
        return repr(self._get())


class BlameContext:
    """What :class:`Blame` needs, shared by all subscribers; the per-subscriber leaf index is
    built on the first use."""

    def __init__(self, ov: Overlay, tree: RouteTree, paths: Paths, rho: FloatArray, mean_wait: FloatArray) -> None:
        self.ov, self.tree, self.paths, self.rho, self.mean_wait = ov, tree, paths, rho, mean_wait
        self._index: tuple[IntArray, IntArray] | None = None

    def leaves(self, s: int) -> list[int]:
        """Subscriber s's leaves, by publisher and then path (the order the hops were walked)."""
        if self._index is None:
            tree = self.tree
            order = np.lexsort((tree.leaf_node, tree.node_publisher[tree.leaf_node], tree.leaf_subscriber))
            offset = np.searchsorted(tree.leaf_subscriber[order], np.arange(len(self.ov.subscriber_ids) + 1))
            self._index = (offset.astype(np.int64), order.astype(np.int64))
        offset, order = self._index
        out: list[int] = order[offset[s] : offset[s + 1]].tolist()
        return out

    def contributors(self, s: int, miss: float) -> tuple[Contributor, ...]:
        """Blame for s's misses: the loss part by -log r_l, the lateness part by mean delay added."""
        if not math.isfinite(miss) or miss <= 0.0:
            return ()
        ov, tree = self.ov, self.tree
        links: dict[int, float] = {}
        brokers: dict[int, float] = {}
        total_rate = 0.0
        for leaf in self.leaves(s):
            w = float(self.paths.leaf_rate[leaf])
            total_rate += w
            sub_link = int(self.paths.leaf_link[leaf])
            links[sub_link] = links.get(sub_link, 0.0) + w
            node = int(tree.leaf_node[leaf])
            while node >= 0:
                b = int(tree.node_broker[node])
                brokers[b] = brokers.get(b, 0.0) + w
                link = int(tree.node_link[node])
                links[link] = links.get(link, 0.0) + w
                node = int(tree.node_parent[node])
        return blame_shares(ov, links, brokers, total_rate, self.rho, self.mean_wait, miss)


def blame_shares(
    ov: Overlay,
    links: Mapping[int, float],
    brokers: Mapping[int, float],
    total_rate: float,
    rho: FloatArray,
    mean_wait: FloatArray,
    miss: float,
) -> tuple[Contributor, ...]:
    """Shares of the miss probability from per-element matching rates (see :class:`Contributor`)."""
    if total_rate <= 0.0:
        return ()
    reach = 1.0
    loss_weight: dict[str, float] = {}
    delay_weight: dict[str, tuple[float | None, float]] = {}
    for link, w in links.items():
        r = float(ov.link_reliability[link])
        name = f"{ov.link_from[link]}->{ov.link_to[link]}"
        loss_weight[name] = -math.log(max(r, 1e-12)) * w / total_rate
        reach *= r ** (w / total_rate)
        delay_weight[name] = (None, ov.link_delay[link].mean * w / total_rate)
    for b, w in brokers.items():
        d = (mean_wait[b] if math.isfinite(mean_wait[b]) else 1e12) + ov.service[b].mean
        delay_weight[ov.broker_ids[b]] = (float(rho[b]), float(d) * w / total_rate)
    loss_part = min(1.0 - reach, miss)
    late_part = miss - loss_part
    total_loss = sum(loss_weight.values())
    total_delay = sum(d for _u, d in delay_weight.values())
    out: list[Contributor] = []
    for name, (util, d) in delay_weight.items():
        share = 0.0
        if total_loss > 0.0:
            share += loss_part * loss_weight.get(name, 0.0) / total_loss
        if total_delay > 0.0:
            share += late_part * d / total_delay
        out.append(Contributor(name, util, float(d), float(share / miss)))
    out.sort(key=lambda c: -c.share)
    return tuple(out)
