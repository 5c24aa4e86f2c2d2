"""Workload presets modelled on the papers' setups: events and subscriptions in docs/reference/topics.md §1.3.

Every workload is deterministic for its ``seed`` and exposes the same small interface:
``subscriptions()`` (the subscribe records), ``columns(n)`` (the next ``n`` events as
:class:`producers.columns.EventColumns`, with publication times following the workload's arrival
process), ``batch(n)`` (the same as records in docs/reference/topics.md §1.3), and ``describe()`` (its
parameters and what it realized, e.g. the match rate). ``producers.sinks`` writes them to Kafka or
files, encoded a batch at a time from the columns.

>>> w = GryphonWorkload(brokers=2, clients_per_broker=2, subs_per_client=2, seed=1)
>>> len(w.subscriptions()), sorted(w.batch(1)[0]["attributes"])[:3]
(8, ['a0', 'a1', 'a10'])
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np

from producers.columns import Attr, EventColumns, Text, Vocab
from producers.events import EventGenerator
from routing.planning.model import chen_events

__all__ = [
    "PRESETS",
    "ClustersWorkload",
    "CompositeWorkload",
    "GryphonWorkload",
    "Record",
    "ReliabilityWorkload",
    "SensorsWorkload",
    "StocksWorkload",
    "Workload",
    "zipf_probs",
]

Record = dict[str, Any]


class Workload(Protocol):
    name: str

    def subscriptions(self) -> list[Record]: ...

    def columns(self, n: int) -> EventColumns: ...

    def batch(self, n: int) -> list[Record]: ...

    def describe(self) -> dict[str, Any]: ...


def zipf_probs(k: int, s: float) -> np.ndarray:
    """Zipf-like probabilities of ranks 1..k with exponent ``s``.

    >>> [round(float(p), 3) for p in zipf_probs(4, 1.0)]
    [0.48, 0.24, 0.16, 0.12]
    """
    w = 1.0 / np.arange(1, k + 1) ** s
    return w / w.sum()


def _subscribe(sid: str, subscriber: str, broker: str, filt: str, **extra: Any) -> Record:
    return {
        "type": "subscribe",
        "subscription_id": sid,
        "subscriber_id": subscriber,
        "broker": broker,
        "filter": filt,
        **extra,
    }


class _Columnar:
    """Workloads that generate columns: ``batch`` is their records."""

    def columns(self, n: int) -> EventColumns:
        raise NotImplementedError

    def batch(self, n: int) -> list[Record]:
        return self.columns(n).records()


class _Clock:
    """Publication times: Poisson (exponential gaps), periodic, or uniform gaps, in ms from ``start_ms``."""

    def __init__(
        self, rng: np.random.Generator, rate_per_s: float, kind: str = "exponential", start_ms: float = 1.7e12
    ) -> None:
        if rate_per_s <= 0:
            raise ValueError("rate_per_s must be > 0")
        self.rng, self.mean_ms, self.kind, self.t = rng, 1000.0 / rate_per_s, kind, start_ms

    def next(self, n: int) -> np.ndarray:
        if self.kind == "exponential":
            gaps = self.rng.exponential(self.mean_ms, n)
        elif self.kind == "deterministic":
            gaps = np.full(n, self.mean_ms)
        elif self.kind == "uniform":
            gaps = self.rng.uniform(0, 2 * self.mean_ms, n)
        else:
            raise ValueError(f"unknown inter-arrival kind {self.kind!r}; use exponential, deterministic or uniform")
        times = self.t + np.cumsum(gaps)
        self.t = float(times[-1]) if n else self.t
        return np.floor(times).astype(np.int64)


class GryphonWorkload(_Columnar):
    """The Gryphon workload of Opyrchal et al. (2000), §3.1.

    ``attributes`` attributes ``a0..`` with ``values`` values each (1..values), Zipf-distributed in
    events and in subscriptions. A subscription gives attribute i a concrete value with
    probability ``first_prob * decay**i`` (the paper: 0.98 for the first attribute, decreasing
    at 78% gives a match rate near 2.24%, at 88% near 0.21%), else don't-care. With
    ``regionalism`` p > 0, events carry a ``region`` attribute (1..regions) and a subscription of
    a client in region r asks for ``region = r`` with probability p (brokers are assigned to
    regions round-robin). Default: 80 brokers x 25 clients x 5 subscriptions; 8 publishers with
    Poisson arrivals of mean gap 200 us each.
    """

    name = "gryphon"

    def __init__(
        self,
        attributes: int = 15,
        values: int = 4,
        zipf_s: float = 1.0,
        first_prob: float = 0.98,
        decay: float = 0.78,
        regionalism: float = 0.0,
        regions: int = 4,
        brokers: int = 80,
        clients_per_broker: int = 25,
        subs_per_client: int = 5,
        publishers: int = 8,
        mean_gap_us: float = 200.0,
        lifetime_ms: int = 1000,
        seed: int = 0,
    ) -> None:
        if not 0 <= regionalism <= 1 or not 0 < decay <= 1 or not 0 < first_prob <= 1:
            raise ValueError("regionalism and first_prob must be in [0, 1], decay in (0, 1]")
        self.k, self.v, self.p = attributes, values, zipf_probs(values, zipf_s)
        self.params = dict(
            attributes=attributes,
            values=values,
            zipf_s=zipf_s,
            first_prob=first_prob,
            decay=decay,
            regionalism=regionalism,
            regions=regions,
            brokers=brokers,
            clients_per_broker=clients_per_broker,
            subs_per_client=subs_per_client,
            publishers=publishers,
            mean_gap_us=mean_gap_us,
            seed=seed,
        )
        self.regionalism, self.regions, self.publishers, self.lifetime_ms = (
            regionalism,
            regions,
            publishers,
            lifetime_ms,
        )
        rng = np.random.default_rng(seed)
        n = brokers * clients_per_broker * subs_per_client
        concrete = rng.random((n, attributes)) < first_prob * decay ** np.arange(attributes)
        concrete[~concrete.any(axis=1), 0] = True  # a filter needs at least one predicate
        vals = rng.choice(np.arange(1, values + 1), size=(n, attributes), p=self.p)
        self.sub_matrix = np.where(concrete, vals, 0)  # 0 = don't care
        self.sub_broker = np.repeat(np.arange(brokers), clients_per_broker * subs_per_client)
        self.sub_client = np.repeat(np.arange(brokers * clients_per_broker), subs_per_client)
        self.sub_region = np.where(rng.random(n) < regionalism, self.sub_broker % regions + 1, 0)
        self._rng = np.random.default_rng(seed + 1)
        self._clock = _Clock(self._rng, publishers * 1e6 / mean_gap_us)
        self._count = 0

    def subscriptions(self) -> list[Record]:
        out = []
        for i, row in enumerate(self.sub_matrix):
            preds = [f"a{j} = {int(x)}" for j, x in enumerate(row) if x]
            if self.sub_region[i]:
                preds.append(f"region = {int(self.sub_region[i])}")
            out.append(
                _subscribe(f"g{i}", f"c{int(self.sub_client[i])}", f"b{int(self.sub_broker[i])}", " and ".join(preds))
            )
        return out

    def _event_matrix(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        vals = self._rng.choice(np.arange(1, self.v + 1), size=(n, self.k), p=self.p)
        region = self._rng.integers(1, self.regions + 1, n)
        return vals, region

    def match_counts(self, vals: np.ndarray, region: np.ndarray) -> np.ndarray:
        """How many subscriptions each event (rows of ``vals``) matches, vectorized."""
        out = np.empty(len(vals), dtype=np.int64)
        s, r = self.sub_matrix, self.sub_region
        for i in range(len(vals)):
            ok = np.all((s == 0) | (s == vals[i]), axis=1) & ((r == 0) | (r == region[i]))
            out[i] = int(ok.sum())
        return out

    def columns(self, n: int) -> EventColumns:
        vals, region = self._event_matrix(n)
        times = self._clock.next(n)
        k = self._count + np.arange(n)
        pub = Vocab.numbered("gp", self.publishers, k % self.publishers)
        attrs = [Attr(f"a{j}", "long", vals[:, j]) for j in range(self.k)]
        if self.regionalism:
            attrs.append(Attr("region", "long", region))
        self._count += n
        return EventColumns(Text((pub, "-", k // self.publishers)), Text((pub,)), times, self.lifetime_ms, tuple(attrs))

    def realized_match_rate(self, events: int = 2000) -> float:
        """Mean fraction of subscriptions an event matches, over ``events`` fresh events (own rng)."""
        rng = np.random.default_rng(int(self.params["seed"]) + 99)
        vals = rng.choice(np.arange(1, self.v + 1), size=(events, self.k), p=self.p)
        region = rng.integers(1, self.regions + 1, events)
        return float(self.match_counts(vals, region).sum()) / (events * len(self.sub_matrix))

    def describe(self) -> dict[str, Any]:
        return {
            "workload": self.name,
            **self.params,
            "subscriptions": len(self.sub_matrix),
            "realized_match_rate": self.realized_match_rate(),
        }


class ReliabilityWorkload(_Columnar):
    """The setting of Pongthawornkamol et al., Table 3: 21 attributes (``topic`` plus ``a1..a20``),
    4 topics, 8 publishers at 1 event/s each, 100 subscribers on 20 brokers, event lifetime 1 s,
    Zipf-like content (exponent ``alpha``); inter-arrival ``exponential``, ``deterministic`` or
    ``uniform``. Each topic uses 5 of the 20 attributes, each with ``values`` Zipf values; a
    subscription names a topic and bounds one or two of its attributes."""

    name = "reliability"

    def __init__(
        self,
        publishers: int = 8,
        rate_per_publisher: float = 1.0,
        subscribers: int = 100,
        brokers: int = 20,
        topics: int = 4,
        values: int = 10,
        alpha: float = 1.0,
        interarrival: str = "exponential",
        lifetime_ms: int = 1000,
        seed: int = 0,
    ) -> None:
        self.params = dict(
            publishers=publishers,
            rate_per_publisher=rate_per_publisher,
            subscribers=subscribers,
            brokers=brokers,
            topics=topics,
            values=values,
            alpha=alpha,
            interarrival=interarrival,
            lifetime_ms=lifetime_ms,
            seed=seed,
        )
        self.publishers, self.topics, self.values, self.lifetime_ms = publishers, topics, values, lifetime_ms
        self.p_val = zipf_probs(values, alpha)
        self.p_topic = zipf_probs(topics, alpha)
        rng = np.random.default_rng(seed)
        self._subs = []
        for i in range(subscribers):
            t = int(rng.choice(topics, p=self.p_topic)) + 1
            attrs = rng.choice(5, size=int(rng.integers(1, 3)), replace=False)
            preds = [f"topic = {t}"] + [
                f"a{(t - 1) * 5 + int(a) + 1} <= {int(rng.choice(values, p=self.p_val)) + 1}" for a in sorted(attrs)
            ]
            self._subs.append(
                _subscribe(
                    f"r{i}",
                    f"s{i}",
                    f"b{int(rng.integers(brokers))}",
                    " and ".join(preds),
                    deadline_ms=lifetime_ms,
                    min_reliability=0.9,
                )
            )
        self._rng = np.random.default_rng(seed + 1)
        self._clock = _Clock(self._rng, publishers * rate_per_publisher, interarrival)
        self._count = 0

    def subscriptions(self) -> list[Record]:
        return list(self._subs)

    def columns(self, n: int) -> EventColumns:
        times = self._clock.next(n)
        topic = self._rng.choice(self.topics, size=n, p=self.p_topic)  # 0-based
        vals = self._rng.choice(self.values, size=(n, 5), p=self.p_val) + 1
        k = self._count + np.arange(n)
        pub = Vocab.numbered("rp", self.publishers, k % self.publishers)
        # topic t (1-based) uses attributes a{5(t-1)+1} .. a{5t}
        names = [[f"a{t * 5 + j + 1}" for t in range(self.topics)] for j in range(5)]
        attrs = [Attr("topic", "long", topic + 1)]
        attrs += [Attr(Text((Vocab(names[j], topic),)), "long", vals[:, j]) for j in range(5)]
        self._count += n
        return EventColumns(Text((pub, "-", k // self.publishers)), Text((pub,)), times, self.lifetime_ms, tuple(attrs))

    def describe(self) -> dict[str, Any]:
        return {"workload": self.name, **self.params, "subscriptions": len(self._subs)}


class CompositeWorkload(_Columnar):
    """Composite events of Chen et al. §4.2: one primitive event type per publisher, composite
    types in levels 2 and 3 with 1-3 components from lower levels (:func:`routing.planning.model.chen_events`,
    the same graph as the MICPICE instances), each type popular with probability ``alpha``; a
    subscriber wants a popular type with probability ``p_pop``, an unpopular one with ``p_unp``.
    Primitive rates are uniform in (0, 1) events/s; a composite's rate is uniform in
    (0, min(1, sum of its components' rates)). Events carry ``kind`` (the primitive type) and a
    ``value``; subscriptions are composite trees (``and`` within ``within_ms``) whose leaves
    select component kinds."""

    name = "composite"

    def __init__(
        self,
        publishers: int = 10,
        composites: int = 10,
        subscribers: int = 10,
        alpha: float = 0.2,
        p_pop: float = 0.6,
        p_unp: float = 0.1,
        within_ms: int = 60_000,
        seed: int = 0,
    ) -> None:
        rng = np.random.default_rng(seed)
        self.params = dict(
            publishers=publishers,
            composites=composites,
            subscribers=subscribers,
            alpha=alpha,
            p_pop=p_pop,
            p_unp=p_unp,
            within_ms=within_ms,
            seed=seed,
        )
        # the composition graph of Chen et al. 2004 §4.2, shared with the MICPICE instances
        self.types: list[dict[str, Any]] = []
        level: dict[str, int] = {}
        for ev in chen_events([f"cp{i}" for i in range(publishers)], composites, rng):
            level[ev.id] = 1 if ev.primitive else 1 + max(level[c] for c in ev.components)
            kind: dict[str, Any] = {"publisher": ev.publisher} if ev.primitive else {"components": list(ev.components)}
            self.types.append({"id": ev.id, "level": level[ev.id], "rate": ev.lam, **kind})
        for t in self.types:
            t["popular"] = bool(rng.random() < alpha)
        self.interests = [
            (f"cs{s}", t["id"])
            for s in range(subscribers)
            for t in self.types
            if rng.random() < (p_pop if t["popular"] else p_unp)
        ]
        self.within_ms = within_ms
        rates = np.array([t["rate"] for t in self.types[:publishers]])
        self._rng = np.random.default_rng(seed + 1)
        self._clock = _Clock(self._rng, float(rates.sum()))
        self._p_pub = rates / rates.sum()
        self._count = 0

    def leaves(self, type_id: str) -> list[str]:
        t = next(x for x in self.types if x["id"] == type_id)
        if "components" not in t:
            return [type_id]
        return [leaf for c in t["components"] for leaf in self.leaves(c)]

    def subscriptions(self) -> list[Record]:
        out = []
        for i, (subscriber, type_id) in enumerate(self.interests):
            leaves = self.leaves(type_id)
            if len(leaves) == 1:
                out.append(_subscribe(f"c{i}", subscriber, "b0", f"kind = '{leaves[0]}'"))
            else:
                import json

                tree = {"op": "and", "within_ms": self.within_ms, "children": [f"kind = '{x}'" for x in leaves]}
                out.append(
                    {
                        "type": "subscribe",
                        "subscription_id": f"c{i}",
                        "subscriber_id": subscriber,
                        "broker": "b0",
                        "filter": None,
                        "composite": json.dumps(tree),
                    }
                )
        return out

    def columns(self, n: int) -> EventColumns:
        times = self._clock.next(n)
        pubs = self._rng.choice(len(self._p_pub), size=n, p=self._p_pub)
        values = np.round(self._rng.uniform(0, 100, n), 2)
        primitive = self.types[: len(self._p_pub)]
        attrs = (
            Attr("kind", "string", Text((Vocab([t["id"] for t in primitive], pubs),))),
            Attr("value", "double", values),
        )
        ids = Text(("ce", self._count + np.arange(n)))
        self._count += n
        publishers = Text((Vocab([t["publisher"] for t in primitive], pubs),))
        return EventColumns(ids, publishers, times, self.within_ms, attrs)

    def describe(self) -> dict[str, Any]:
        return {"workload": self.name, **self.params, "event_types": self.types, "interests": len(self.interests)}


class ClustersWorkload(_Columnar):
    """Subscription-clustering workloads of Tariq's thesis §3.3.2 and §3.6: ``dims`` (up to 5)
    integer attributes ``x1..`` on [0, 30]. ``distribution`` ``WL1``: subscriptions and events uniform; ``WL2``:
    five hotspots, each subscription and event drawn around a hotspot chosen with Zipf
    popularity. ``subscriptions_distribution`` (default: ``distribution``) draws the subscriptions
    from the other one: the thesis's false-positive experiment (§3.3.2, Fig. 3.2c-d) keeps the
    subscriptions uniform and draws only the events from WL2, so that ``ck`` and ``ov``, which see
    the filters, get no head start from subscriptions piled on the hotspots. A subscription is a
    box (one ``between`` per attribute) whose side is chosen so that an event matches about
    ``match_rate`` (5%) of subscriptions (calibrated at construction).

    Example: ``ClustersWorkload(1000, distribution="WL2", subscriptions_distribution="WL1")``."""

    name = "clusters"

    def __init__(
        self,
        subscriptions: int = 2000,
        dims: int = 5,
        distribution: str = "WL1",
        match_rate: float = 0.05,
        hotspots: int = 5,
        seed: int = 0,
        subscriptions_distribution: str | None = None,
    ) -> None:
        sub_dist = subscriptions_distribution or distribution
        if not 1 <= dims <= 5 or distribution not in ("WL1", "WL2") or sub_dist not in ("WL1", "WL2"):
            raise ValueError("dims must be 1..5 and distribution (and subscriptions_distribution) WL1 or WL2")
        self.params = dict(
            subscriptions=subscriptions,
            dims=dims,
            distribution=distribution,
            subscriptions_distribution=sub_dist,
            match_rate=match_rate,
            hotspots=hotspots,
            seed=seed,
        )
        rng = np.random.default_rng(seed)
        self.dims, self.distribution, self._rng = dims, distribution, np.random.default_rng(seed + 1)
        self.centers = rng.integers(5, 26, size=(hotspots, dims))
        self.p_hot = zipf_probs(hotspots, 1.0)
        mids = self._points(rng, subscriptions, sub_dist)
        # box side: start from volume = match_rate, then correct for clipping at the domain's edges
        side = 31 * match_rate ** (1 / dims)
        for _ in range(12):
            self.boxes = self._boxes(mids, side)
            realized = self.realized_match_rate(300)
            if abs(realized - match_rate) < 0.05 * match_rate:
                break
            side *= (match_rate / max(realized, 1e-6)) ** (1 / dims)
        self._count = 0
        self._clock = _Clock(self._rng, 1000.0)

    @staticmethod
    def _boxes(mids: np.ndarray, side: float) -> np.ndarray:
        lo = mids - side / 2
        return np.stack([np.clip(np.round(lo), 0, 30), np.clip(np.round(lo + side), 0, 30)], axis=-1).astype(int)

    def _points(self, rng: np.random.Generator, n: int, distribution: str | None = None) -> np.ndarray:
        if (distribution or self.distribution) == "WL1":
            return rng.uniform(0, 30, size=(n, self.dims))
        hot = rng.choice(len(self.centers), size=n, p=self.p_hot)
        return np.clip(self.centers[hot] + rng.normal(0, 2.5, size=(n, self.dims)), 0, 30)

    def subscriptions(self) -> list[Record]:
        return [
            _subscribe(
                f"k{i}",
                f"u{i}",
                f"b{i % 10}",
                " and ".join(f"x{d + 1} between {int(b[d, 0])} and {int(b[d, 1])}" for d in range(self.dims)),
            )
            for i, b in enumerate(self.boxes)
        ]

    def columns(self, n: int) -> EventColumns:
        pts = np.round(self._points(self._rng, n)).astype(np.int64)
        times = self._clock.next(n)
        k = self._count + np.arange(n)
        self._count += n
        attrs = tuple(Attr(f"x{d + 1}", "long", pts[:, d]) for d in range(self.dims))
        return EventColumns(Text(("ke", k)), Text((Vocab.numbered("kp", 4, k % 4),)), times, 1000, attrs)

    def realized_match_rate(self, events: int = 500) -> float:
        rng = np.random.default_rng(12345)
        pts = np.round(self._points(rng, events)).astype(int)
        lo, hi = self.boxes[:, :, 0], self.boxes[:, :, 1]
        hits = sum(int(np.all((lo <= p) & (p <= hi), axis=1).sum()) for p in pts)
        return hits / (events * len(self.boxes))

    def describe(self) -> dict[str, Any]:
        return {"workload": self.name, **self.params, "realized_match_rate": self.realized_match_rate()}


class StocksWorkload(_Columnar):
    """A demo trade feed with temporal locality: per-symbol random-walk prices, Zipf-popular symbols,
    bursts of trades in the same symbol. Subscriptions are typical trader filters."""

    name = "stocks"

    def __init__(
        self, rate_per_s: float = 1000.0, subscribers: int = 50, seed: int = 0, first_publisher: int = 0
    ) -> None:
        # first_publisher: publishers p<first_publisher> ... (the live demo keeps them apart from the overlay's)
        self.params = dict(rate_per_s=rate_per_s, subscribers=subscribers, seed=seed)
        self._gen = EventGenerator(publishers=8, seed=seed, first_publisher=first_publisher)
        self._rng = np.random.default_rng(seed + 1)
        self._clock = _Clock(self._rng, rate_per_s)
        rng = np.random.default_rng(seed)
        from producers.events import SYMBOLS

        self._subs = []
        for i in range(subscribers):
            sym = SYMBOLS[int(rng.integers(len(SYMBOLS)))]
            kind = i % 3
            filt = (
                f"symbol = '{sym}' and price < {int(rng.integers(60, 140))}"
                if kind == 0
                else f"symbol in ('{sym}', '{SYMBOLS[(i + 1) % len(SYMBOLS)]}') and volume >= 5000"
                if kind == 1
                else "exchange = 'NYSE' and urgent = true"
            )
            self._subs.append(_subscribe(f"st{i}", f"trader{i}", f"b{i % 4}", filt))
        self._last: int | None = None  # the symbol (code) of the last trade
        self._price: dict[int, float] = {}

    def subscriptions(self) -> list[Record]:
        return list(self._subs)

    def columns(self, n: int) -> EventColumns:
        drawn = self._gen.draw(n)
        times = self._clock.next(n)
        steps = self._rng.normal(0, 0.002, n).tolist()
        repeat = (self._rng.random(n) < 0.4).tolist()
        symbols, first_price = drawn["symbol"].tolist(), drawn["price"].tolist()
        prices = [0.0] * n
        for i in range(n):  # a random walk per symbol, in order: a short Python loop
            if repeat[i] and self._last is not None:  # bursts: the same symbol trades again
                symbols[i] = self._last
            sym = symbols[i]
            prices[i] = self._price[sym] = self._price.get(sym, first_price[i]) * math.exp(steps[i])
            self._last = sym
        drawn["symbol"], drawn["price"] = np.array(symbols), np.round(prices, 2)
        return self._gen.build(drawn, times)

    def describe(self) -> dict[str, Any]:
        return {"workload": self.name, **self.params, "subscriptions": len(self._subs)}


class SensorsWorkload(_Columnar):
    """A demo sensor feed: sites with sensors of several kinds, slowly drifting readings with noise
    and occasional spikes; subscriptions watch thresholds per site and kind."""

    name = "sensors"
    KINDS = (
        ("temperature", "C", 20.0, 5.0),
        ("humidity", "%", 50.0, 10.0),
        ("pressure", "hPa", 1013.0, 8.0),
        ("co2", "ppm", 600.0, 150.0),
    )

    def __init__(
        self,
        sites: int = 20,
        sensors_per_site: int = 8,
        rate_per_s: float = 1000.0,
        subscribers: int = 40,
        seed: int = 0,
    ) -> None:
        self.params = dict(
            sites=sites, sensors_per_site=sensors_per_site, rate_per_s=rate_per_s, subscribers=subscribers, seed=seed
        )
        rng = np.random.default_rng(seed)
        self.sensors = [
            (f"site{s}", self.KINDS[j % len(self.KINDS)], f"site{s}-sensor{j}")
            for s in range(sites)
            for j in range(sensors_per_site)
        ]
        self.level = [kind[2] for _, kind, _ in self.sensors]  # each sensor's current level
        self._sites = [f"site{s}" for s in range(sites)]
        self._site_of = np.repeat(np.arange(sites), sensors_per_site)
        self._kind_of = np.tile(np.arange(sensors_per_site) % len(self.KINDS), sites)
        self._rng = np.random.default_rng(seed + 1)
        self._clock = _Clock(self._rng, rate_per_s)
        self._subs = []
        for i in range(subscribers):
            site, kind, _ = self.sensors[int(rng.integers(len(self.sensors)))]
            self._subs.append(
                _subscribe(
                    f"se{i}",
                    f"ops{i}",
                    f"b{i % 4}",
                    f"site = '{site}' and kind = '{kind[0]}' and value > {kind[2] + kind[3]:g}",
                )
            )
        self._count = 0

    def subscriptions(self) -> list[Record]:
        return list(self._subs)

    def columns(self, n: int) -> EventColumns:
        which = self._rng.integers(len(self.sensors), size=n)
        noise = self._rng.normal(0, 1, n).tolist()
        spikes = (self._rng.random(n) < 0.01).tolist()
        times = self._clock.next(n)
        values = [0.0] * n
        level = self.level
        for i, w in enumerate(which.tolist()):  # each sensor's reading drifts from its last one
            _, (_, _, mean, sd), _ = self.sensors[w]
            level[w] += 0.05 * sd * noise[i] + 0.01 * (mean - level[w])
            values[i] = level[w] + (3 * sd if spikes[i] else 0.0)
        attrs = (
            Attr("site", "string", Text((Vocab(self._sites, self._site_of[which]),))),
            Attr("kind", "string", Text((Vocab([k[0] for k in self.KINDS], self._kind_of[which]),))),
            Attr("unit", "string", Text((Vocab([k[1] for k in self.KINDS], self._kind_of[which]),))),
            Attr("value", "double", np.round(values, 2)),
        )
        ids = Vocab([sid for _, _, sid in self.sensors], which)
        k = self._count + np.arange(n)
        self._count += n
        return EventColumns(Text((ids, "-", k)), Text((ids,)), times, 5000, attrs)

    def describe(self) -> dict[str, Any]:
        return {"workload": self.name, **self.params, "subscriptions": len(self._subs)}


PRESETS = {
    w.name: w
    for w in (
        GryphonWorkload,
        ReliabilityWorkload,
        CompositeWorkload,
        ClustersWorkload,
        StocksWorkload,
        SensorsWorkload,
    )
}
