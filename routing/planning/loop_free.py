"""Content-based routing with tree identifiers on a cyclic broker overlay (Li and Jacobsen, §3.1-3.2).

Li and Jacobsen, "Adaptive Content-based Routing based-on General Overlay in Publish/Subscribe
Systems" (PADRES), section 3: every advertisement gets a *tree identifier* (TID, here its id) and
is flooded over the overlay, so that each advertisement builds its own spanning tree; a
subscription is sent, one copy per overlapping advertisement, in reverse along that
advertisement's tree and never switches trees (§3.1); a publication carries the TID of its
advertisement and follows the subscriptions that carry the same TID. §3.2 (Algorithm 1) lets a
broker change a publication's TID to the subscription path whose outgoing link is fastest
("hot potato").

:class:`TidOverlay` simulates one such overlay deterministically. Its tables are the paper's:

- ORT, each broker's neighbours (:meth:`TidOverlay.neighbours`);
- SRT, ``[advertisement, last hop]`` per broker (:meth:`TidOverlay.srt`);
- PRT, ``[subscription, set of {TID, last hop}]`` per broker (:meth:`TidOverlay.prt`);
- the Link Delay Table of each broker (:class:`LinkDelayTable`).

A last hop is a neighbour broker id, or a :class:`Client` at the edge broker of a client.

Message order
-------------
Messages cross a link in its current delay (:meth:`TidOverlay.set_delay`, 1.0 by default) and are
handled in order of arrival time; simultaneous arrivals in order of receiver id, then sender id.
An advertisement tree is therefore the shortest-delay tree from the advertiser's broker (with unit
delays, the breadth-first tree), the first copy to reach a broker coming from the smallest-id
sender among the fastest. Each received message updates the receiver's Link Delay Table for the
link it came over (the paper: "we update the link latency whenever a broker receives a message
from the link"). A subscription already stored when a new advertisement arrives is sent, from its
subscriber's broker and with the new TID, along the new tree once the flood is over.

Path selection: the gap in §3.2, and the rule shipped
-------------------------------------------------------
Lemma 1 (no duplicates) is proved for a fixed TID: one advertisement tree, one path from the root
to each broker. Algorithm 1 switches TIDs per subscription, and copies that leave a broker on
different trees can meet again. ``tests/unit/planning/test_loop_free.py`` pins three counterexamples,
run with ``algorithm1=`` (the paper's Algorithm 1 at every broker, for study):

- 7 brokers, the link delays changed between two advertisements: at the publisher's broker one
  subscription's fastest pair is on the other tree, the other's is not; both copies reach the
  second subscription's broker (Lemma 1 fails whether a subscription matches by the copy's TID
  or by any TID, and whether TIDs change at every broker or only at the publisher's);
- 5 brokers, matching by the copy's TID (the paper: TID is matched like any attribute): two
  subscriptions pick the same next hop with different TIDs, the copy carries the first one's TID
  and the second subscription, holding no pair for it there, is never reached (Lemma 2 fails);
- a triangle with fixed delays, matching by any TID: a broker off the publication's tree forwards
  it along another tree to a broker the first copy reaches directly (Lemma 1 fails).

With fixed link delays these floods give every subscription at a broker the same last hop on all
its trees (each tree below a broker on it is that broker's own shortest-delay tree, ties broken
alike), so there is nothing to choose; path diversity comes from trees built under different
delays, which :meth:`TidOverlay.set_delay` between advertisements models. What ships
(``select_paths=True``) is a rule for which both lemmas hold:

    The TID may change once, at the publisher's broker ``x0``, and for the whole publication, to
    a TID ``b`` for which every matching subscription in ``PRT(x0)`` of a subscriber elsewhere
    holds a ``{b, last hop}`` pair (local subscribers get it at ``x0`` whatever their TIDs).
    Among those TIDs, Algorithm 1's hot-potato cost decides: the sum over these subscriptions
    of the Link Delay Table's delay to their ``b`` last hop (infinity for a link never
    measured); ties keep the advertisement's own TID, then take the smallest TID. The
    publication then keeps ``b`` (plain §3.1 routing).

Lemma 1 holds because the publication follows one tree, ``T_b``, downwards from ``x0`` (and never
comes back to ``x0``). Lemma 2 holds because each matching subscription ``s`` elsewhere holds a
``b`` pair at ``x0``, so its ``b`` copy passed ``x0`` and every broker of ``T_b`` from ``x0`` to
``s``'s broker holds a ``b`` pair pointing on towards it; conversely a subscription with a ``b``
pair below ``x0`` has one at ``x0``, so no one else is reached. When every subscription's
cheapest pair in Algorithm 1 has the same TID, the rule picks that TID. In every mode a broker
drops a copy it has already received and :attr:`Delivery.duplicates` counts it (so a subscriber
is never handed a second copy; only the ``algorithm1`` modes ever drop one).

Examples
--------
>>> net = TidOverlay(["1", "2", "3"], [("1", "2"), ("2", "3"), ("1", "3")])
>>> _ = net.advertise("a1", "P", "1", "price < 100")
>>> net.srt("3")
{'a1': '1'}
>>> _ = net.subscribe("s1", "S", "3", "price < 50")
>>> sorted(net.prt("1")["s1"])
[('a1', '3')]
>>> d = net.publish("P", {"price": 10})
>>> d.tid, d.hops, dict(d.deliveries)
('a1', (Hop(kind='publication', sender='1', receiver='3', tids=frozenset({'a1'})),), {'S': 1})
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, TypeAlias

from routing.matching.language import Filter, overlaps, parse_filter

__all__ = [
    "Advertisement",
    "Client",
    "Delivery",
    "Hop",
    "LastHop",
    "LinkDelayTable",
    "Subscription",
    "TidOverlay",
    "Trace",
]


@dataclass(frozen=True, order=True)
class Client:
    """A publisher or subscriber client, as the last hop of an SRT or PRT entry at its broker."""

    name: str


LastHop: TypeAlias = str | Client
"""A neighbour broker's id, or the client attached to this broker."""


@dataclass(frozen=True)
class Advertisement:
    """An advertisement; its id is its TID."""

    adv_id: str
    publisher: str
    broker: str
    filter: Filter


@dataclass(frozen=True)
class Subscription:
    """A subscription of a subscriber attached to ``broker``."""

    sub_id: str
    subscriber: str
    broker: str
    filter: Filter


class Hop(NamedTuple):
    """One message over one link: its kind, the sending and receiving brokers and the TIDs it carries."""

    kind: str
    sender: str
    receiver: str
    tids: frozenset[str]


@dataclass(frozen=True)
class Trace:
    """The broker-to-broker messages of one advertise, subscribe or unsubscribe, in arrival order.

    ``duplicates`` counts messages a broker dropped because it had already handled them (for an
    advertisement: a second copy; the paper: only advertisements are ever duplicated).
    """

    hops: tuple[Hop, ...]
    duplicates: int


@dataclass(frozen=True)
class Delivery:
    """What one publication did.

    Attributes
    ----------
    tid : str or None
        The TID the publication got at its broker (its matching advertisement); None when the
        publisher has no advertisement that matches it, and then nothing was routed.
    reason : str or None
        Why it was not routed, when it was not.
    ingress : str or None
        The publisher's broker.
    hops : tuple of Hop
        Every broker-to-broker copy, in arrival order, with the TID it carried.
    deliveries : Mapping[str, int]
        Subscriber to the number of copies it got.
    duplicates : int
        Copies that reached a broker that already had the publication (dropped there).
    """

    tid: str | None
    reason: str | None = None
    ingress: str | None = None
    hops: tuple[Hop, ...] = ()
    deliveries: Mapping[str, int] = field(default_factory=dict)
    duplicates: int = 0

    @property
    def messages(self) -> int:
        """The number of broker-to-broker publication messages."""
        return len(self.hops)

    @property
    def brokers(self) -> frozenset[str]:
        """The brokers that received the publication, its own broker included."""
        start = frozenset() if self.ingress is None else frozenset({self.ingress})
        return start | {h.receiver for h in self.hops}

    @property
    def subscribers(self) -> frozenset[str]:
        """The subscribers that received it (at least once)."""
        return frozenset(self.deliveries)


class LinkDelayTable:
    """A broker's Link Delay Table (§3.2): an estimate of the delay of each outgoing link.

    Each observation ``x`` over the link to a neighbour updates its estimate ``d`` as an
    exponentially weighted moving average, ``d <- (1 - alpha) * d + alpha * x`` (the first
    observation sets ``d = x``); ``alpha = 1`` keeps the last value. A link never observed has
    delay infinity.

    Parameters
    ----------
    alpha : float
        Weight of the newest observation, in ``(0, 1]`` (default 0.125, TCP's smoothed RTT gain,
        RFC 6298).

    Examples
    --------
    >>> t = LinkDelayTable(alpha=0.5)
    >>> t.update("2", 10.0); t.update("2", 20.0)
    >>> t.get("2"), t.get("9")
    (15.0, inf)
    """

    def __init__(self, alpha: float = 0.125) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {alpha!r}")
        self.alpha = alpha
        self._delay: dict[str, float] = {}

    def update(self, neighbour: str, delay: float) -> None:
        """Fold one observed delay of the link to ``neighbour`` into its estimate."""
        if not (math.isfinite(delay) and delay >= 0.0):
            raise ValueError(f"a link delay must be finite and >= 0, got {delay!r}")
        old = self._delay.get(neighbour)
        self._delay[neighbour] = delay if old is None else (1.0 - self.alpha) * old + self.alpha * delay

    def get(self, neighbour: str) -> float:
        """The current estimate for the link to ``neighbour`` (infinity if never observed)."""
        return self._delay.get(neighbour, math.inf)

    def as_dict(self) -> dict[str, float]:
        """Every observed link's estimate."""
        return dict(self._delay)


_Step = Callable[[str, LastHop, frozenset[str]], list[tuple[str, frozenset[str]]] | None]


def _as_filter(f: Filter | str) -> Filter:
    return parse_filter(f) if isinstance(f, str) else f


class TidOverlay:
    """A simulated PADRES overlay with TID routing on an arbitrary (cyclic) broker graph (§3.1-3.2).

    Parameters
    ----------
    brokers : Iterable[str]
        Broker ids.
    links : Iterable[tuple[str, str]]
        Undirected links between brokers (the ORT).
    delays : Mapping[tuple[str, str], float], optional
        The true delay of each link (either orientation of the pair); 1.0 where not given.
    alpha : float
        The Link Delay Tables' EWMA weight (see :class:`LinkDelayTable`).

    Attributes
    ----------
    message_count, duplicate_count : collections.Counter
        Broker-to-broker messages handled and duplicates dropped, by kind (``"advertisement"``,
        ``"subscription"``, ``"unsubscription"``, ``"publication"``), since construction.
    """

    def __init__(
        self,
        brokers: Iterable[str],
        links: Iterable[tuple[str, str]],
        *,
        delays: Mapping[tuple[str, str], float] | None = None,
        alpha: float = 0.125,
    ) -> None:
        adjacency: dict[str, set[str]] = {b: set() for b in brokers}
        self._delay: dict[frozenset[str], float] = {}
        for u, v in links:
            if u not in adjacency or v not in adjacency or u == v:
                raise ValueError(f"link ({u!r}, {v!r}) must join two different known brokers")
            adjacency[u].add(v)
            adjacency[v].add(u)
            self._delay[frozenset((u, v))] = 1.0
        self._ort = {b: tuple(sorted(ns)) for b, ns in adjacency.items()}
        for (u, v), d in (delays or {}).items():
            self.set_delay(u, v, d)
        self._ldt = {b: LinkDelayTable(alpha) for b in self._ort}
        self._srt: dict[str, dict[str, LastHop]] = {b: {} for b in self._ort}
        self._prt: dict[str, dict[str, dict[str, LastHop]]] = {b: {} for b in self._ort}
        self._advs: dict[str, Advertisement] = {}
        self._subs: dict[str, Subscription] = {}
        self._attached: dict[str, str] = {}  # client -> its broker
        self.message_count: Counter[str] = Counter()
        self.duplicate_count: Counter[str] = Counter()

    # --- views -----------------------------------------------------------------------------

    @property
    def brokers(self) -> tuple[str, ...]:
        """The broker ids, sorted."""
        return tuple(sorted(self._ort))

    def neighbours(self, broker: str) -> tuple[str, ...]:
        """The ORT of ``broker``: its neighbours, sorted."""
        return self._ort[self._known(broker)]

    def srt(self, broker: str) -> dict[str, LastHop]:
        """The SRT of ``broker``: advertisement id (TID) to the last hop it came from."""
        return dict(self._srt[self._known(broker)])

    def prt(self, broker: str) -> dict[str, frozenset[tuple[str, LastHop]]]:
        """The PRT of ``broker``: subscription id to its set of ``(TID, last hop)`` pairs."""
        return {s: frozenset(pairs.items()) for s, pairs in self._prt[self._known(broker)].items()}

    def link_delays(self, broker: str) -> LinkDelayTable:
        """The Link Delay Table of ``broker``."""
        return self._ldt[self._known(broker)]

    @property
    def advertisements(self) -> dict[str, Advertisement]:
        """The advertisements, by id."""
        return dict(self._advs)

    @property
    def subscriptions(self) -> dict[str, Subscription]:
        """The subscriptions in force, by id."""
        return dict(self._subs)

    # --- link delays -----------------------------------------------------------------------

    def set_delay(self, u: str, v: str, delay: float) -> None:
        """Set the true delay of link ``u``-``v``, which later messages over it take (and report)."""
        key = frozenset((u, v))
        if key not in self._delay:
            raise ValueError(f"no link between {u!r} and {v!r}")
        if not (math.isfinite(delay) and delay > 0.0):
            raise ValueError(f"a link's delay must be finite and > 0, got {delay!r}")
        self._delay[key] = float(delay)

    def observe(self, broker: str, neighbour: str, delay: float) -> None:
        """Record at ``broker`` one observed delay of its link to ``neighbour``."""
        if neighbour not in self.neighbours(broker):
            raise ValueError(f"{neighbour!r} is not a neighbour of broker {broker!r}")
        self._ldt[broker].update(neighbour, delay)

    # --- operations ------------------------------------------------------------------------

    def advertise(self, adv_id: str, publisher: str, broker: str, filter: Filter | str) -> Trace:
        """Flood an advertisement, TID ``adv_id``, from the publisher's broker (§3.1, "Advertisement").

        Each broker records ``[advertisement, last hop]`` in its SRT at the first copy and forwards
        it to every neighbour but the one it came from; later copies are dropped and counted. Then
        every stored subscription that overlaps it is sent along the new tree (see the module
        docstring). Returns the messages of both.
        """
        if adv_id in self._advs:
            raise ValueError(f"advertisement id {adv_id!r} is already in use")
        self._attach(publisher, broker)
        adv = Advertisement(adv_id, publisher, broker, _as_filter(filter))
        self._advs[adv_id] = adv
        tid = frozenset({adv_id})

        def step(x: str, sender: LastHop, tids: frozenset[str]) -> list[tuple[str, frozenset[str]]] | None:
            if adv_id in self._srt[x]:
                return None
            self._srt[x][adv_id] = sender
            return [(n, tids) for n in self._ort[x] if n != sender]

        hops, duplicates = self._run("advertisement", broker, Client(publisher), tid, step)
        for sub in sorted(self._subs.values(), key=lambda s: s.sub_id):
            if overlaps(sub.filter, adv.filter):
                more, dup = self._run("subscription", sub.broker, Client(sub.subscriber), tid, self._sub_step(sub))
                hops += more
                duplicates += dup
        return Trace(tuple(hops), duplicates)

    def subscribe(self, sub_id: str, subscriber: str, broker: str, filter: Filter | str) -> Trace:
        """Route a subscription in reverse along every overlapping advertisement's tree (§3.1).

        The subscriber's broker gives it the TIDs of the advertisements in its SRT that it
        overlaps; at each broker the copies are recorded in the PRT with their last hop and sent
        on to the SRT last hop of each TID, one message per next hop carrying all its TIDs.
        """
        if sub_id in self._subs:
            raise ValueError(f"subscription id {sub_id!r} is already in use")
        self._attach(subscriber, broker)
        sub = Subscription(sub_id, subscriber, broker, _as_filter(filter))
        self._subs[sub_id] = sub
        tids = frozenset(t for t in self._srt[broker] if overlaps(sub.filter, self._advs[t].filter))
        if not tids:
            return Trace((), 0)
        hops, duplicates = self._run("subscription", broker, Client(subscriber), tids, self._sub_step(sub))
        return Trace(tuple(hops), duplicates)

    def unsubscribe(self, sub_id: str) -> Trace:
        """Remove a subscription from every PRT, following its TID paths (§3.1, "Unsubscription")."""
        sub = self._subs.pop(sub_id, None)
        if sub is None:
            raise KeyError(f"no subscription {sub_id!r}")
        edge = Client(sub.subscriber)
        tids = frozenset(t for t, hop in self._prt[sub.broker].get(sub_id, {}).items() if hop == edge)

        def step(x: str, sender: LastHop, carried: frozenset[str]) -> list[tuple[str, frozenset[str]]] | None:
            pairs = self._prt[x].get(sub_id, {})
            mine = frozenset(t for t in carried if pairs.get(t) == sender)
            for t in mine:
                del pairs[t]
            if not pairs:
                self._prt[x].pop(sub_id, None)
            return None if not mine else self._towards_advertisers(x, mine)

        if not tids:
            return Trace((), 0)
        hops, duplicates = self._run("unsubscription", sub.broker, edge, tids, step)
        return Trace(tuple(hops), duplicates)

    def publish(
        self,
        publisher: str,
        attributes: Mapping[str, object],
        *,
        select_paths: bool = False,
        algorithm1: Literal["current-tid", "any-tid"] | None = None,
    ) -> Delivery:
        """Route one publication (§3.1 "Publication"; with ``select_paths``, §3.2 and Algorithm 1).

        Parameters
        ----------
        publisher : str
            The publishing client; the publication gets the TID of its first (in advertising
            order) advertisement whose filter matches ``attributes``.
        attributes : Mapping[str, object]
            The publication's content.
        select_paths : bool
            False: the publication keeps its TID and follows the subscriptions with that TID.
            True: the shipped path selection, which may change the TID once at the publisher's
            broker (module docstring).
        algorithm1 : {"current-tid", "any-tid"}, optional
            With ``select_paths``: the paper's Algorithm 1 at every broker instead of the shipped
            rule, a subscription matching when its filter does and it holds a pair with the
            copy's current TID (``"current-tid"``: the TID matched as an attribute, as §3.2 says)
            or any pair (``"any-tid"``); a copy is never sent back to the broker it came from.
            Both break Lemma 1, and the first Lemma 2, on some cyclic overlays; for study only.

        Returns
        -------
        Delivery
        """
        if algorithm1 is not None and not select_paths:
            raise ValueError("algorithm1 is a kind of path selection: pass select_paths=True too")
        ingress = self._attached.get(publisher)
        ads = [a for a in self._advs.values() if a.publisher == publisher]
        own = next((a.adv_id for a in ads if a.filter.matches(attributes)), None)
        if ingress is None or own is None:
            why = "has no advertisements" if not ads else f"has no advertisement matching {dict(attributes)!r}"
            return Delivery(None, reason=f"publisher {publisher!r} {why}; the publication is not routed")
        deliveries: Counter[str] = Counter()
        received: set[str] = set()

        def step(x: str, sender: LastHop, tids: frozenset[str]) -> list[tuple[str, frozenset[str]]] | None:
            if x in received:
                return None
            received.add(x)
            (tid,) = tids
            matching = {s: p for s, p in self._prt[x].items() if self._subs[s].filter.matches(attributes)}
            if algorithm1 is not None:
                if algorithm1 == "current-tid":
                    matching = {s: p for s, p in matching.items() if tid in p}
                route = self._algorithm1(x, sender, tid, matching)
            else:
                route = {}
                if select_paths and x == ingress:
                    local = {s: p for s, p in matching.items() if _local(p)}
                    route = {next(iter(p.values())): tid for p in local.values()}
                    matching = {s: p for s, p in matching.items() if s not in local}
                    tid = self._select_tid(x, tid, matching)
                route.update({p[tid]: tid for p in matching.values() if tid in p})
            out = []
            for hop, t in sorted(route.items(), key=lambda item: _order(item[0])):
                if isinstance(hop, Client):
                    deliveries[hop.name] += 1
                elif hop != sender:
                    out.append((hop, frozenset({t})))
            return out

        hops, duplicates = self._run("publication", ingress, Client(publisher), frozenset({own}), step)
        return Delivery(own, None, ingress, tuple(hops), dict(deliveries), duplicates)

    # --- internals -------------------------------------------------------------------------

    def _select_tid(self, x: str, tid: str, matching: Mapping[str, Mapping[str, LastHop]]) -> str:
        """The shipped rule: one TID for the whole publication, chosen at its broker ``x`` over
        the matching subscriptions of subscribers elsewhere (``matching``)."""
        if not matching:
            return tid
        common = set.intersection(*(set(pairs) for pairs in matching.values()))
        cost = {b: math.fsum(self._hop_delay(x, pairs[b]) for pairs in matching.values()) for b in common}
        return min(cost, key=lambda b: (cost[b], b != tid, b))

    def _algorithm1(
        self, x: str, sender: LastHop, tid: str, matching: Mapping[str, Mapping[str, LastHop]]
    ) -> dict[LastHop, str]:
        """Algorithm 1: per subscription (by id) its pair with the fastest link, the copy's own
        TID on a tie (so a TID changes only for a strictly faster link); one copy per hop, with
        the TID of the first subscription that chose it."""
        route: dict[LastHop, str] = {}
        for s in sorted(matching):
            paths = [(t, hop) for t, hop in matching[s].items() if hop != sender]
            if paths:
                t, hop = min(paths, key=lambda p: (self._hop_delay(x, p[1]), p[0] != tid, _order(p[1]), p[0]))
                route.setdefault(hop, t)
        return route

    def _hop_delay(self, x: str, hop: LastHop) -> float:
        return 0.0 if isinstance(hop, Client) else self._ldt[x].get(hop)

    def _sub_step(self, sub: Subscription) -> _Step:
        def step(x: str, sender: LastHop, tids: frozenset[str]) -> list[tuple[str, frozenset[str]]] | None:
            pairs = self._prt[x].setdefault(sub.sub_id, {})
            new = frozenset(t for t in tids if t not in pairs)
            for t in new:
                pairs[t] = sender
            return None if not new else self._towards_advertisers(x, new)

        return step

    def _towards_advertisers(self, x: str, tids: frozenset[str]) -> list[tuple[str, frozenset[str]]]:
        """Group TIDs by their SRT last hop at ``x`` (stopping at each advertiser's broker)."""
        by_hop: dict[str, set[str]] = {}
        for t in tids:
            hop = self._srt[x][t]
            if not isinstance(hop, Client):
                by_hop.setdefault(hop, set()).add(t)
        return [(hop, frozenset(ts)) for hop, ts in sorted(by_hop.items())]

    def _run(
        self, kind: str, start: str, source: Client, payload: frozenset[str], step: _Step
    ) -> tuple[list[Hop], int]:
        """Deliver messages in order of arrival time (ties: receiver, then sender id) until none is left."""
        hops: list[Hop] = []
        duplicates = 0
        queue: list[tuple[float, str, str, int, frozenset[str]]] = []
        seq = 0

        def send(now: float, sender: str, out: list[tuple[str, frozenset[str]]] | None) -> None:
            nonlocal seq
            for receiver, tids in out or ():
                seq += 1
                heapq.heappush(queue, (now + self._delay[frozenset((sender, receiver))], receiver, sender, seq, tids))

        send(0.0, start, step(start, source, payload))
        while queue:
            now, receiver, sender, _, tids = heapq.heappop(queue)
            self._ldt[receiver].update(sender, self._delay[frozenset((sender, receiver))])
            hops.append(Hop(kind, sender, receiver, tids))
            self.message_count[kind] += 1
            out = step(receiver, sender, tids)
            if out is None:
                duplicates += 1
                self.duplicate_count[kind] += 1
            send(now, receiver, out)
        return hops, duplicates

    def _attach(self, client: str, broker: str) -> None:
        attached = self._attached.setdefault(client, self._known(broker))
        if attached != broker:
            raise ValueError(f"client {client!r} is attached to broker {attached!r}, not {broker!r}")

    def _known(self, broker: str) -> str:
        if broker not in self._ort:
            raise ValueError(f"unknown broker {broker!r}; brokers are {sorted(self._ort)}")
        return broker


def _local(pairs: Mapping[str, LastHop]) -> bool:
    """Whether a PRT entry is a local subscriber's (its last hops are its client)."""
    return any(isinstance(hop, Client) for hop in pairs.values())


def _order(hop: LastHop) -> tuple[int, str]:
    """Sort key of a last hop: clients first, then brokers by id."""
    return (0, hop.name) if isinstance(hop, Client) else (1, hop)
