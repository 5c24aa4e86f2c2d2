"""The QoS monitor: what the QoS job keeps and computes, free of Spark and Kafka.

It joins three things:

- the overlay's shape, from the topology topic (brokers, links with their configured
  reliability, publishers and subscribers with their home broker) and the subscriptions topic
  (filters and the QoS wishes ``min_reliability`` and ``deadline_ms``);
- rolling estimates of the model's inputs from telemetry and the measured R_s from receipts
  (:class:`routing.reliability.estimation.TelemetryEstimator`); which subscribers an event matches comes
  from the same index the matching job uses (:class:`routing.matching.index.MatchIndex`) over the
  live subscriptions;
- each publisher's content mix, counted from its events (attribute sets and lifetimes, with
  exponential forgetting, the ``max_content`` most frequent kept).

Every update period :meth:`QosMonitor.report` writes those into a docs/reference/qos-predict.md system, predicts R'_s
with :func:`routing.reliability.prediction.predict`, and returns one ``QosReport`` record (``schemas/qos_report.avsc``)
per subscriber and per broker:

- subscriber: predicted R'_s with its interval, measured R_s, predicted mean and p95 delay,
  measured p50 and p95 delay, and an alert when a wish is violated (``critical``: measured R_s
  below ``min_reliability``) or predicted to be (``warning``: R'_s below it, or a p95 delay
  above ``deadline_ms``), naming the brokers and links contributing most to the deadline-miss
  probability with their utilisation and delay. A measured R_s outside the predicted interval
  (widened by its own 90% interval) adds a warning: the model and the telemetry disagree.
- broker: measured arrival rate, utilisation (rho) and mean wait, with the model's wait in a
  warning when the two differ by more than half.

A subscriber with several subscriptions is modelled once per subscription; its predicted
numbers are the subscriptions' numbers weighted by their matching rates (an event matching two
of them counts twice, a documented approximation).

The monitor's clock is the telemetry's own time: :meth:`QosMonitor.advance` takes a watermark
(the largest time seen minus the allowed lateness) and returns the update-period ends it passed.
Its whole state round-trips through :meth:`QosMonitor.to_bytes`.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from routing.common.arrays import distinct_sorted
from routing.matching.index import EventBatch, MatchIndex
from routing.matching.table import SubscriptionRecord, plan_change
from routing.reliability.estimation import EstimationConfig, MatchedSubscribers, TelemetryEstimator
from routing.reliability.prediction import (
    MODELS,
    CompiledSystem,
    Prediction,
    SubscriberPrediction,
    compile_prediction,
    predict,
    predict_reliability,
)
from routing.reliability.queueing import RHO_WARNING
from routing.stats.distributions import Distribution, Empirical, parse_distribution
from routing.stats.state import pack_documents, unpack_documents

__all__ = ["QosMonitor", "QosMonitorConfig", "SubscriptionWish", "content_keys"]

_ZERO = {"kind": "deterministic", "value": 0.0}
_UNBOUNDED_MS = 1e9  # a contributor delay this large comes from a saturated broker (rho >= 1)
_WAIT_MISMATCH = 0.5  # broker warning when |model wait - measured wait| > this x measured wait


@dataclass(frozen=True)
class QosMonitorConfig:
    """Parameters of a :class:`QosMonitor`.

    Attributes
    ----------
    update_period_ms : int
        Reports are written for every multiple of this (default 10 s).
    estimation : EstimationConfig
        Windows of the telemetry estimates (default 30 buckets of 10 s).
    model : str
        ``gg1`` or ``mm1`` (see :mod:`routing.reliability.prediction`).
    max_content : int
        Content entries kept per publisher (the most frequent).
    content_half_life_ms : float
        Counts of content entries halve over this much time.
    min_events : int
        Fewest resolved matching events before a measured R_s can raise a critical alert.
    contributors : int
        Elements named in an alert.
    bootstrap : int
        Predictions from redrawn inputs that widen each interval by the inputs' estimation
        error (0: the model's interval alone).
    """

    update_period_ms: int = 10_000
    estimation: EstimationConfig = field(default_factory=EstimationConfig)
    model: str = "gg1"
    max_content: int = 64
    content_half_life_ms: float = 300_000.0
    min_events: int = 30
    contributors: int = 3
    bootstrap: int = 20

    def __post_init__(self) -> None:
        if self.update_period_ms <= 0:
            raise ValueError(f"update_period_ms must be > 0 (got {self.update_period_ms})")
        if self.model not in MODELS:
            raise ValueError(f"unknown model {self.model!r}; valid: {', '.join(MODELS)}")
        if self.max_content < 1 or self.min_events < 1 or self.contributors < 1 or self.bootstrap < 0:
            raise ValueError("max_content, min_events and contributors must be >= 1, bootstrap >= 0")


@dataclass(frozen=True)
class SubscriptionWish:
    """An atomic subscription with its owner, home broker and QoS wishes."""

    subscription_id: str
    subscriber_id: str
    broker: str | None
    filter: str
    deadline_ms: float | None = None
    min_reliability: float | None = None


_WISH_FIELDS = tuple(f.name for f in dataclasses.fields(SubscriptionWish))


def _scale(dist: dict[str, Any], factor: float) -> None:
    """Scale a DIST (as a dict) in place by ``factor``: its values or its mean."""
    if "values" in dist:
        dist["values"] = [v * factor for v in dist["values"]]
    for key in ("mean", "value", "low", "high"):
        if key in dist:
            dist[key] = dist[key] * factor


class _Empirical(Empirical):
    """An :class:`~routing.stats.distributions.Empirical` that computes each moment and its cdf's
    table (values sorted, cumulative probabilities) once, by the same arithmetic: the predictor
    reads every distribution's mean, variance and third moment many times, each a Python sum
    over up to ``max_points`` values (a third of a redraw's time), and its cdf at every pass.

    :meth:`scaled` makes the distribution of ``factor`` X with its moments scaled from these
    (``factor^k E[X^k]``), not summed again: equal to the moments of the scaled values to a few
    ulps (what a bootstrap redraw needs, many times per report)."""

    def _moment(self, k: int) -> float:
        cache: dict[int, float] = self.__dict__.setdefault("_moments", {})  # frozen: no setattr
        if k not in cache:
            cache[k] = super()._moment(k)
        return cache[k]

    def _cdf_table(self) -> tuple[np.ndarray, np.ndarray]:
        table: tuple[np.ndarray, np.ndarray] | None = self.__dict__.get("_cdf_cache")
        if table is None:  # frozen: no setattr
            table = self.__dict__["_cdf_cache"] = super()._cdf_table()
        return table

    def scaled(self, factor: float) -> _Empirical:
        """The distribution of ``factor`` X (``factor`` > 0): values as :func:`_scale` scales
        them (the same products), moments scaled from this one's."""
        out = _Empirical(tuple((np.asarray(self.values) * factor).tolist()), self.probs)
        out.__dict__["_moments"] = {k: self._moment(k) * factor**k for k in (1, 2, 3)}
        return out


def _cached(dist: Distribution) -> Distribution:
    """``dist`` as a :class:`_Empirical` when it is an empirical one (the same numbers)."""
    return _Empirical(dist.values, dist.probs) if type(dist) is Empirical else dist


def _scaled(dist: Mapping[str, Any], factor: float) -> Distribution:
    """``parse_distribution`` of the DIST ``dist`` scaled by ``factor`` (:func:`_scale`), built
    directly for an empirical one (its values are finite and its probabilities checked already)."""
    scaled = dict(dist)
    _scale(scaled, factor)
    if scaled.get("kind") == "empirical":
        return _Empirical(tuple(float(v) for v in scaled["values"]), tuple(float(p) for p in scaled["probs"]))
    return parse_distribution(scaled)


def _with_cached_moments(compiled: CompiledSystem) -> CompiledSystem:
    """``compiled`` with its empirical service and delay distributions as :class:`_Empirical`
    (the same numbers, each moment and cdf table worked out once)."""
    ov = compiled.overlay
    made: dict[int, Distribution] = {}  # equal DISTs share one parsed object: keep them shared

    def cached(d: Distribution) -> Distribution:
        if id(d) not in made:
            made[id(d)] = _cached(d)
        return made[id(d)]

    overlay = dataclasses.replace(
        ov, service=tuple(cached(d) for d in ov.service), link_delay=tuple(cached(d) for d in ov.link_delay)
    )
    return CompiledSystem(overlay, compiled.matching, compiled.routes)


def _num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def _as_batch(attributes: EventBatch | Sequence[Mapping[str, object]]) -> EventBatch:
    return attributes if isinstance(attributes, EventBatch) else EventBatch.from_events(list(attributes))


def _pieces(name: str, values: np.ndarray, present: np.ndarray) -> np.ndarray:
    """``"name":value`` (JSON, as ``json.dumps`` writes them) for the events that carry attribute
    ``name``, None for the others; each distinct value encoded once (a double by its bits, so
    that -0.0 stays apart from 0.0)."""
    out = np.full(len(present), None, dtype=object)
    rows = np.flatnonzero(present)
    if not len(rows):
        return out
    head = json.dumps(name) + ":"
    vals = values[rows]
    if vals.dtype.kind in "iub" or vals.dtype.kind == "f":
        as_float = vals.dtype.kind == "f"
        keys = vals.astype(np.float64).view(np.int64) if as_float else vals
        uniq, inverse = np.unique(keys, return_inverse=True)
        shown = uniq.view(np.float64) if as_float else uniq
        texts = np.array([head + json.dumps(v) for v in shown.tolist()], dtype=object)
        out[rows] = texts[inverse.reshape(-1)]
        return out
    seen: dict[tuple[type, object], str] = {}  # by type: 1, 1.0 and True are equal keys
    for i, v in zip(rows.tolist(), vals.tolist(), strict=True):
        if type(v) is float:  # -0.0 == 0.0 and NaN != NaN: a float is encoded each time
            out[i] = head + json.dumps(v)
            continue
        k = (type(v), v)
        text = seen.get(k)
        if text is None:
            text = seen[k] = head + json.dumps(v)
        out[i] = text
    return out


def content_keys(batch: EventBatch, lifetime_ms: np.ndarray) -> list[str]:
    """Each event's content-mix key, ``"<lifetime>|<attributes as canonical JSON>"``: exactly
    ``f"{lifetime:g}|" + json.dumps(attributes, sort_keys=True, separators=(",", ":"))``, built
    column by column (each attribute's distinct values encoded once) rather than one
    ``json.dumps`` per event.

    >>> batch = EventBatch.from_events([{"b": 1.5, "a": "x"}, {}, {"a": True}])
    >>> content_keys(batch, np.array([1000.0, 0.0, 2.5]))
    ['1000|{"a":"x","b":1.5}', '0|{}', '2.5|{"a":true}']
    """
    columns = batch.columns()
    cols = [_pieces(name, *columns[name]) for name in sorted(columns)]
    rows: Any = zip(*cols, strict=True) if cols else ((),) * len(batch)
    return [
        f"{lt:g}|{{" + ",".join([p for p in row if p is not None]) + "}"
        for lt, row in zip(lifetime_ms.tolist(), rows, strict=True)
    ]


class QosMonitor:
    """See the module docstring.

    Examples
    --------
    >>> m = QosMonitor(QosMonitorConfig(update_period_ms=1000))
    >>> m.apply_topology([("b1", {"kind": "broker"}), ("p1", {"kind": "publisher", "broker": "b1"}),
    ...                   ("s1", {"kind": "subscriber", "broker": "b1"}),
    ...                   ("p1->b1", {"kind": "link", "from": "p1", "to": "b1", "reliability": 1.0}),
    ...                   ("b1->s1", {"kind": "link", "from": "b1", "to": "s1", "reliability": 1.0})])
    >>> m.apply_subscriptions([SubscriptionRecord(key="s1", op="subscribe", subscription_id="s1", filter="t = 1")],
    ...                       [{"subscriber_id": "s1", "broker": "b1", "min_reliability": 0.99}])
    []
    >>> m.advance(2500.0), m.advance(2900.0), m.advance(4100.0)
    ([2000], [], [3000, 4000])
    """

    def __init__(self, config: QosMonitorConfig | None = None) -> None:
        self.config = config or QosMonitorConfig()
        self.brokers: dict[str, None] = {}
        self.publishers: dict[str, str | None] = {}
        self.subscribers: dict[str, str | None] = {}
        self.links: dict[str, dict[str, Any]] = {}
        self.wishes: dict[str, SubscriptionWish] = {}
        self.content: dict[str, dict[str, float]] = {}  # publisher -> canonical "lifetime|attrs" -> weight
        self.content_clock: float = -math.inf
        self.last_report_ms: int | None = None
        self.counters: dict[str, int] = {"unknown_subscriber_receipts": 0, "skipped_subscriptions": 0}
        self._index = MatchIndex()
        # (the index's subscription of each rank, subscriber names in order, subscriber of each rank)
        self._owners_memo: tuple[np.ndarray, list[str], np.ndarray] | None = None
        self.estimator = TelemetryEstimator(self.config.estimation, match=self._match)

    # -- the overlay's shape ---------------------------------------------------------------

    def apply_topology(self, records: Sequence[tuple[str, Mapping[str, Any] | None]]) -> None:
        """Apply topology records ``(element id, record or None for a tombstone)`` in order."""
        for key, rec in records:
            if rec is None:
                for table in (self.brokers, self.publishers, self.subscribers, self.links):
                    table.pop(key, None)
                continue
            kind = rec.get("kind")
            if kind == "broker":
                self.brokers[key] = None
            elif kind == "publisher":
                self.publishers[key] = rec.get("broker")
            elif kind == "subscriber":
                self.subscribers[key] = rec.get("broker")
            elif kind == "link" and rec.get("from") and rec.get("to"):
                reliability = rec.get("reliability")
                self.links[key] = {
                    "from": str(rec["from"]),
                    "to": str(rec["to"]),
                    "reliability": 1.0 if reliability is None else float(reliability),
                }

    def apply_subscriptions(
        self, records: Sequence[SubscriptionRecord], extras: Sequence[Mapping[str, Any]]
    ) -> list[tuple[str, str]]:
        """Apply subscription records in order; ``extras[i]`` holds record i's ``subscriber_id``,
        ``broker``, ``deadline_ms`` and ``min_reliability``. Returns the rejections
        ``(error code, reason)`` (the matching job dead-letters the same records)."""
        rejected: list[tuple[str, str]] = []
        self._owners_memo = None
        for rec, extra in zip(records, extras, strict=True):
            outcome = plan_change(rec)
            if outcome.rejection is not None:
                rejected.append(outcome.rejection)
                continue
            if outcome.skipped:
                self.counters["skipped_subscriptions"] += 1
            if outcome.change is None:
                continue
            sid, text = outcome.change
            if text is None:
                if self.wishes.pop(sid, None) is not None:
                    self._index.remove(sid)
                continue
            owner = extra.get("subscriber_id") or sid
            self.wishes[sid] = SubscriptionWish(
                subscription_id=sid,
                subscriber_id=str(owner),
                broker=extra.get("broker"),
                filter=text,
                deadline_ms=_num(extra.get("deadline_ms")),
                min_reliability=_num(extra.get("min_reliability")),
            )
            self._index.add(sid, text)
        return rejected

    def _match(self, attributes: EventBatch | Sequence[Mapping[str, object]]) -> MatchedSubscribers:
        """Subscribers (not subscriptions) matching each event, each event's in name order."""
        batch = _as_batch(attributes)
        n = len(batch)
        if not self.wishes:
            return MatchedSubscribers(np.zeros(n, dtype=np.int64), [], np.zeros(0, dtype=np.int64))
        offsets, ranks, by_rank = self._index.match(batch).sorted_ranks()
        # (event, subscriber) pairs as numbers: subscribers numbered in string order, so that
        # sorting the numbers sorts the names
        memo = self._owners_memo  # by_rank and the wishes change only when the subscriptions do
        if memo is not None and (memo[0] is by_rank or np.array_equal(memo[0], by_rank)):
            owners, owner_of_rank = memo[1], memo[2]
        else:
            owners = sorted({wish.subscriber_id for wish in self.wishes.values()})
            number = {name: k for k, name in enumerate(owners)}
            wishes = self.wishes
            owner_of_rank = np.array(
                [number[wishes[sid].subscriber_id] if sid in wishes else -1 for sid in by_rank.tolist()],
                dtype=np.int64,
            )
            self._owners_memo = (by_rank, owners, owner_of_rank)
        owner = owner_of_rank[ranks] if len(ranks) else np.zeros(0, dtype=np.int64)
        event = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
        keep = owner >= 0  # a freed slot's rank (no subscription) is never matched; kept out anyway
        width = max(len(owners), 1)
        pairs = distinct_sorted(event[keep] * width + owner[keep])  # by event, then subscriber name
        lengths = np.bincount(pairs // width, minlength=n).astype(np.int64)
        return MatchedSubscribers(lengths, owners, (pairs % width).astype(np.int64))

    # -- telemetry -------------------------------------------------------------------------

    def add_events(
        self,
        event_id: Sequence[str],
        publisher_id: Sequence[str],
        published_at_ms: ArrayLike,
        lifetime_ms: ArrayLike,
        attributes: EventBatch | Sequence[Mapping[str, object]],
    ) -> None:
        """Publications: the estimator's publisher statistics, the matching subscribers (the
        denominator of R_s) and the publishers' content mix. ``attributes``: one mapping per
        event, or the events' attribute columns (``EventBatch.from_columns``)."""
        at = np.asarray(published_at_ms, dtype=np.float64)
        life = np.asarray(lifetime_ms, dtype=np.float64)
        batch = _as_batch(attributes)
        self.estimator.add_publications(list(publisher_id), list(event_id), at, life, batch)
        if len(at) == 0:
            return
        now = float(at.max())
        if math.isfinite(self.content_clock) and now > self.content_clock:
            decay = 0.5 ** ((now - self.content_clock) / self.config.content_half_life_ms)
            for mix in self.content.values():
                for k in mix:
                    mix[k] *= decay
        self.content_clock = max(self.content_clock, now)
        for pid, key in zip(publisher_id, content_keys(batch, life), strict=True):
            mix = self.content.setdefault(str(pid), {})
            mix[key] = mix.get(key, 0.0) + 1.0
            if len(mix) > 4 * self.config.max_content:
                keep = sorted(mix.items(), key=lambda kv: -kv[1])[: self.config.max_content]
                self.content[str(pid)] = dict(keep)

    def add_link_samples(self, *columns: Any) -> None:
        """``from, to, seq, sent_at_ms, delay_ms, lost`` columns (LinkSample records)."""
        self.estimator.add_link_samples(*columns)

    def add_broker_samples(self, *columns: Any) -> None:
        """``broker_id, arrived_at_ms, wait_ms, service_ms`` columns (BrokerSample records)."""
        self.estimator.add_broker_samples(*columns)

    def add_receipts(self, subscriber_id: Sequence[str], event_id: Sequence[str], received_at_ms: ArrayLike) -> None:
        self.estimator.add_receipts(list(subscriber_id), list(event_id), received_at_ms)

    def advance(self, watermark_ms: float) -> list[int]:
        """Move the clock; returns the update-period ends at or before ``watermark_ms`` not yet
        reported (the first call reports only the latest one)."""
        period = self.config.update_period_ms
        last_end = math.floor(watermark_ms / period) * period
        if self.last_report_ms is None:
            ends = [last_end] if last_end > 0 else []
        else:
            ends = list(range(self.last_report_ms + period, last_end + 1, period))
        if ends:
            self.last_report_ms = ends[-1]
        return ends

    # -- reports ---------------------------------------------------------------------------

    def system(self) -> dict[str, Any]:
        """The docs/reference/qos-predict.md skeleton (placeholder distributions) of what is known now: brokers, links,
        publishers with observed content, one subscriber entry per subscription (id ``sub:<id>``,
        its link copied from its subscriber's)."""
        brokers = sorted(self.brokers)
        publishers = []
        for pid, home in sorted(self.publishers.items()):
            mix = self.content.get(pid)
            if not mix or home not in self.brokers or f"{pid}->{home}" not in self.links:
                continue
            top = sorted(mix.items(), key=lambda kv: -kv[1])[: self.config.max_content]
            total = sum(w for _k, w in top)
            content = []
            for key, w in top:
                lt, attrs = key.split("|", 1)
                content.append({"p": w / total, "lifetime_ms": float(lt), "attributes": json.loads(attrs)})
            publishers.append({"id": pid, "broker": home, "interarrival_ms": dict(_ZERO), "content": content})
        senders = set(brokers) | {p["id"] for p in publishers}
        receivers = set(brokers) | set(self.subscribers)
        links = [
            dict(v, delay_ms=dict(_ZERO))
            for _k, v in sorted(self.links.items())
            if v["from"] in senders and v["to"] in receivers
        ]
        return {
            "brokers": [{"id": b, "service_ms": dict(_ZERO)} for b in brokers],
            "links": links,
            "publishers": publishers,
            "subscribers": [],
        }

    def _expand(self, system: dict[str, Any]) -> tuple[dict[str, Any], dict[str, SubscriptionWish]]:
        """Replace subscriber nodes by one model subscriber per subscription."""
        by_node = {(link["from"], link["to"]): link for link in system["links"]}
        links = [link for link in system["links"] if link["to"] not in self.subscribers]
        model: dict[str, SubscriptionWish] = {}
        subs = []
        for sid, wish in sorted(self.wishes.items()):
            home = wish.broker or self.subscribers.get(wish.subscriber_id)
            link = by_node.get((home, wish.subscriber_id)) if home else None
            if home not in self.brokers or link is None:
                continue
            node = f"sub:{sid}"
            model[node] = wish
            subs.append({"id": node, "broker": home, "filter": wish.filter})
            # its own DIST: a bootstrap redraw scales each link's delay in place, and one DIST shared
            # by a subscriber's model links would be scaled once per link (compounded)
            links.append(dict(link, to=node, delay_ms=dict(link["delay_ms"])))
        return dict(system, links=links, subscribers=subs), model

    def report(self, window_end_ms: int) -> tuple[list[dict[str, Any]], list[str]]:
        """QosReport records for the window ending at ``window_end_ms``, and warnings about the
        model's inputs (elements without enough telemetry)."""
        self.estimator.advance(float(window_end_ms))
        estimated = self.estimator.to_system(self.system(), float(window_end_ms))
        system, model = self._expand(estimated.system)
        prediction: Prediction | None = None
        problems: list[str] = [f"no data: {line}" for line in estimated.no_data]
        if system["publishers"] and system["subscribers"]:
            try:
                compiled = _with_cached_moments(compile_prediction(system))  # once: redraws change no route
                prediction = predict(system, model=self.config.model, compiled=compiled)
                if self.config.bootstrap and self.config.model == "gg1":
                    prediction = self._bootstrap(system, prediction, window_end_ms, compiled)
            except ValueError as exc:
                problems.append(f"prediction skipped: {exc}")
        # each subscriber's model nodes and wishes, grouped once: a scan of every subscription per
        # subscriber is quadratic in the subscriptions
        nodes: dict[str, list[tuple[str, SubscriptionWish]]] = {}
        for node, wish in model.items():
            nodes.setdefault(wish.subscriber_id, []).append((node, wish))
        wishes: dict[str, list[SubscriptionWish]] = {}
        for wish in self.wishes.values():
            wishes.setdefault(wish.subscriber_id, []).append(wish)
        records = [
            self._subscriber_report(s, window_end_ms, prediction, nodes.get(s, []), wishes[s]) for s in sorted(wishes)
        ]
        records += [self._broker_report(b, window_end_ms, prediction) for b in sorted(self.brokers)]
        if prediction is not None:
            problems += [w for w in prediction.warnings if "no publisher's content" not in w]
        return records, problems

    def _bootstrap(
        self, system: dict[str, Any], prediction: Prediction, end: int, compiled: CompiledSystem | None = None
    ) -> Prediction:
        """Widen each R'_s interval by the uncertainty of the estimated inputs (docs/reference/reliability-model.md
        §4.5, parametric bootstrap): ``bootstrap`` predictions from inputs redrawn as their
        estimation error allows, the interval then covering their 5-95% range as well.

        Redrawn: each publisher's mean inter-publication time and each broker's service and link's
        delay distribution, scaled by exp(N(0, cv^2 / n)) for n samples in the window (the
        relative standard error of a mean); each link's reliability from its Jeffreys posterior
        Beta(k + 1/2, n - k + 1/2). The draws are seeded by the window's end, so a replayed batch
        reports the same interval.

        With ``compiled`` (``system`` compiled by :func:`routing.reliability.prediction.compile_prediction`), each
        redraw replaces only the redrawn distributions and reliabilities of the compiled overlay
        and reuses its matching and routes (:meth:`_redraws`); without it every redraw is a new
        document predicted from scratch (:meth:`_redraws_reference`, the oracle of the parity
        test). Both draw the same numbers in the same order and give the same interval.
        """
        if compiled is None:
            draws = self._redraws_reference(system, end)
        else:
            draws = self._redraws(system, end, compiled)
        if not draws:
            return prediction
        subscribers = {}
        for sid, sp in prediction.subscribers.items():
            values = np.array([d[sid] for d in draws if sid in d])
            if sp.reliability is None or len(values) < 2 or sp.reliability_low is None or sp.reliability_high is None:
                subscribers[sid] = sp
                continue
            lo, hi = np.percentile(values, [5.0, 95.0])
            subscribers[sid] = dataclasses.replace(
                sp,
                reliability_low=min(sp.reliability_low, float(lo)),
                reliability_high=max(sp.reliability_high, float(hi)),
            )
        return dataclasses.replace(prediction, subscribers=subscribers)

    def _redraws_reference(self, system: dict[str, Any], end: int) -> list[dict[str, float]]:
        """The bootstrap's predictions, each from a redrawn copy of the whole document."""
        rng = np.random.default_rng(end)
        end_ms = float(end)
        draws: list[dict[str, float]] = []
        for _ in range(self.config.bootstrap):
            doc = copy.deepcopy(system)
            for p in doc["publishers"]:
                est = self.estimator.publisher(p["id"], end_ms)
                if est is not None and est.gaps > 1 and "mean" in p["interarrival_ms"]:
                    scv = max(est.interarrival_scv, 1e-3)
                    p["interarrival_ms"]["mean"] *= math.exp(rng.normal(0.0, math.sqrt(scv / est.gaps)))
            for b in doc["brokers"]:
                est_b = self.estimator.broker(b["id"], end_ms)
                if est_b is not None and est_b.arrivals > 1:
                    _scale(b["service_ms"], math.exp(rng.normal(0.0, math.sqrt(est_b.service_scv / est_b.arrivals))))
            for link in doc["links"]:
                real_to = self._owner_of(link["to"][4:]) if link["to"].startswith("sub:") else link["to"]
                est_l = self.estimator.link(f"{link['from']}->{real_to}", end_ms)
                if est_l is None:
                    continue
                if est_l.delivered > 1 and est_l.delay is not None:
                    # the sketch keeps no variance; cv^2 = 1 (exponential-like) keeps the redraw wide
                    _scale(link["delay_ms"], math.exp(rng.normal(0.0, math.sqrt(1.0 / est_l.delivered))))
                loss = est_l.loss
                if loss.expected > 0:
                    link["reliability"] = float(
                        rng.beta(loss.received + 0.5, max(loss.expected - loss.received, 0) + 0.5)
                    )
            try:
                redrawn = predict(doc, model=self.config.model)
            except ValueError:
                continue
            draws.append({k: v.reliability for k, v in redrawn.subscribers.items() if v.reliability is not None})
        return draws

    def _redraws(self, system: dict[str, Any], end: int, compiled: CompiledSystem) -> list[dict[str, float]]:
        """:meth:`_redraws_reference` on the compiled overlay: the estimates are read once, and a
        redraw swaps the redrawn distributions (scaled as :func:`_scale` scales their DIST) and
        reliabilities into a copy of the overlay (no deep copy, no validation, no matching), then
        predicts the point R'_s alone (:func:`routing.reliability.prediction.predict_reliability`). An empirical
        distribution's redraw keeps the moments of the one it scales, scaled (:meth:`_Empirical.scaled`),
        so the draws equal the reference's to rounding, not to the last bit."""
        rng = np.random.default_rng(end)
        end_ms = float(end)
        ov = compiled.overlay
        pub_at = {pid: i for i, pid in enumerate(ov.publisher_ids)}
        broker_at = {bid: i for i, bid in enumerate(ov.broker_ids)}
        link_at = {pair: i for i, pair in enumerate(zip(ov.link_from, ov.link_to, strict=True))}

        def scaler(dist: dict[str, Any], parsed: Distribution) -> Callable[[float], Distribution]:
            if isinstance(parsed, _Empirical):
                return parsed.scaled
            return lambda factor: _scaled(dist, factor)

        # (overlay index, DIST, sd of the log factor) per redrawn mean, in the reference's order
        pubs: list[tuple[int, dict[str, Any], float]] = []
        for p in system["publishers"]:
            est = self.estimator.publisher(p["id"], end_ms)
            if est is not None and est.gaps > 1 and "mean" in p["interarrival_ms"]:
                scv = max(est.interarrival_scv, 1e-3)
                pubs.append((pub_at[p["id"]], p["interarrival_ms"], math.sqrt(scv / est.gaps)))
        brokers: list[tuple[int, Callable[[float], Distribution], float]] = []
        for b in system["brokers"]:
            est_b = self.estimator.broker(b["id"], end_ms)
            if est_b is not None and est_b.arrivals > 1:
                i = broker_at[b["id"]]
                brokers.append(
                    (i, scaler(b["service_ms"], ov.service[i]), math.sqrt(est_b.service_scv / est_b.arrivals))
                )
        # per link: (index, its redraw, sd or None, Beta parameters or None)
        links: list[tuple[int, Callable[[float], Distribution], float | None, tuple[float, float] | None]] = []
        estimates: dict[str, Any] = {}
        for link in system["links"]:
            real_to = self._owner_of(link["to"][4:]) if link["to"].startswith("sub:") else link["to"]
            key = f"{link['from']}->{real_to}"
            if key not in estimates:
                estimates[key] = self.estimator.link(key, end_ms)
            est_l = estimates[key]
            if est_l is None:
                continue
            sd_l = math.sqrt(1.0 / est_l.delivered) if est_l.delivered > 1 and est_l.delay is not None else None
            loss = est_l.loss
            beta = (loss.received + 0.5, max(loss.expected - loss.received, 0) + 0.5) if loss.expected > 0 else None
            i = link_at[(link["from"], link["to"])]
            links.append((i, scaler(link["delay_ms"], ov.link_delay[i]), sd_l, beta))
        draws: list[dict[str, float]] = []
        for _ in range(self.config.bootstrap):
            interarrival = list(ov.interarrival)
            service = list(ov.service)
            delay = list(ov.link_delay)
            reliability = np.array(ov.link_reliability, dtype=np.float64, copy=True)
            for i, dist, sd in pubs:
                interarrival[i] = parse_distribution(dict(dist, mean=dist["mean"] * math.exp(rng.normal(0.0, sd))))
            for i, redraw, sd in brokers:
                service[i] = redraw(math.exp(rng.normal(0.0, sd)))
            for i, redraw, sd_l, beta in links:
                if sd_l is not None:
                    delay[i] = redraw(math.exp(rng.normal(0.0, sd_l)))
                if beta is not None:
                    reliability[i] = float(rng.beta(*beta))
            overlay = dataclasses.replace(
                ov,
                interarrival=tuple(interarrival),
                service=tuple(service),
                link_delay=tuple(delay),
                link_reliability=reliability,
            )
            redrawn_system = CompiledSystem(overlay, compiled.matching, compiled.routes)
            try:
                draws.append(predict_reliability(redrawn_system, model=self.config.model))
            except ValueError:
                continue
        return draws

    def _subscriber_report(
        self,
        subscriber: str,
        end: int,
        prediction: Prediction | None,
        nodes: Sequence[tuple[str, SubscriptionWish]],
        wishes: Sequence[SubscriptionWish],
    ) -> dict[str, Any]:
        """The ``QosReport`` of ``subscriber`` from its model ``nodes`` (``(model node, wish)``, in
        the model's order) and its ``wishes``."""
        parts = [
            (prediction.subscribers[node], wish)
            for node, wish in nodes
            if prediction is not None and node in prediction.subscribers
        ]
        parts = [(p, w) for p, w in parts if p.reliability is not None]
        weights = np.array([max(p.matching_rate_per_s, 0.0) for p, _w in parts])
        weights = (
            weights / weights.sum() if len(parts) and weights.sum() > 0 else np.full(len(parts), 1 / max(len(parts), 1))
        )

        def mix(values: list[float | None]) -> float | None:
            pairs = [(w, v) for w, v in zip(weights, values, strict=True) if v is not None and math.isfinite(v)]
            if not pairs:
                return None
            total = sum(w for w, _v in pairs)
            return float(sum(w * v for w, v in pairs) / total) if total > 0 else float(pairs[0][1])

        predicted = mix([p.reliability for p, _w in parts])
        low = mix([p.reliability_low for p, _w in parts])
        high = mix([p.reliability_high for p, _w in parts])
        measured = self.estimator.subscriber(subscriber, float(end))
        min_rel = max((w.min_reliability for w in wishes if w.min_reliability is not None), default=None)
        deadline = min((w.deadline_ms for w in wishes if w.deadline_ms is not None), default=None)
        p95 = mix([p.p95_delay_ms for p, _w in parts])
        record: dict[str, Any] = {
            "kind": "subscriber",
            "id": subscriber,
            "window_end": int(end),
            "model": self.config.model,
            "reliability": predicted,
            "reliability_low": low,
            "reliability_high": high,
            "measured_reliability": None,
            "mean_delay_ms": mix([p.mean_delay_ms for p, _w in parts]),
            "p95_delay_ms": p95,
            "measured_p50_delay_ms": None,
            "measured_p95_delay_ms": None,
            "arrival_rate_per_s": None,
            "rho": None,
            "mean_wait_ms": None,
            "alert": None,
            "warnings": [],
        }
        enough = measured is not None and measured.matching >= self.config.min_events
        if measured is not None and measured.matching > 0:
            record["measured_reliability"] = _num(measured.reliability)
            record["measured_p50_delay_ms"] = _num(measured.p50_delay_ms)
            record["measured_p95_delay_ms"] = _num(measured.p95_delay_ms)
        contributors = self._contributors([p for p, _w in parts], weights)
        alerts: list[tuple[str, str]] = []
        if min_rel is not None and enough and measured is not None and measured.reliability < min_rel:
            alerts.append(
                (
                    "critical",
                    f"measured reliability {measured.reliability:.3f} (90% interval "
                    f"{measured.reliability_low:.3f}-{measured.reliability_high:.3f}, {measured.matching} events) "
                    f"is below the wished {min_rel:g}",
                )
            )
        if min_rel is not None and predicted is not None and predicted < min_rel:
            alerts.append(("warning", f"predicted reliability {predicted:.3f} is below the wished {min_rel:g}"))
        if deadline is not None and p95 is not None and p95 > deadline:
            alerts.append(("warning", f"predicted p95 delay {p95:.0f} ms exceeds the wished deadline {deadline:g} ms"))
        if alerts:
            severity = "critical" if any(s == "critical" for s, _m in alerts) else "warning"
            blame = ", ".join(
                f"{c['element']} ({c['share']:.0%} of misses, "
                + (f"{c['delay_ms']:.0f} ms" if c["delay_ms"] < _UNBOUNDED_MS else "unbounded delay")
                + (f", rho {c['utilisation']:.2f})" if c["utilisation"] is not None else ")")
                for c in contributors
            )
            message = "; ".join(m for _s, m in alerts) + (f"; most to blame: {blame}" if blame else "")
            record["alert"] = {"severity": severity, "message": message, "contributors": contributors}
        if (
            enough
            and measured is not None
            and low is not None
            and high is not None
            and (measured.reliability_high < low or measured.reliability_low > high)
        ):
            record["warnings"].append(
                f"measured {measured.reliability:.3f} lies outside the predicted interval {low:.3f}-{high:.3f}: "
                "the model and the telemetry disagree (changed load, non-stationary input or missing telemetry)"
            )
        if not parts:
            record["warnings"].append("no prediction: no observed publisher content matches, or its links are unknown")
        return record

    def _contributors(self, parts: list[SubscriberPrediction], weights: Any) -> list[dict[str, Any]]:
        shares: dict[str, list[float]] = {}
        info: dict[str, tuple[float | None, float]] = {}
        for p, w in zip(parts, weights, strict=True):
            for c in p.contributors:
                name = c.element
                if "->sub:" in name:  # a model subscriber's link: name it as the real link
                    name = name.split("->sub:", 1)[0] + "->" + self._owner_of(c.element.split("->sub:", 1)[1])
                shares.setdefault(name, []).append(float(w) * c.share)
                info[name] = (c.utilisation, c.delay_ms)
        ranked = sorted(shares.items(), key=lambda kv: -sum(kv[1]))[: self.config.contributors]
        return [
            {
                "element": name,
                "utilisation": _num(info[name][0]),
                "delay_ms": float(info[name][1]),
                "share": float(min(max(sum(s), 0.0), 1.0)),
            }
            for name, s in ranked
        ]

    def _owner_of(self, subscription_id: str) -> str:
        wish = self.wishes.get(subscription_id)
        return wish.subscriber_id if wish else subscription_id

    def _broker_report(self, broker: str, end: int, prediction: Prediction | None) -> dict[str, Any]:
        est = self.estimator.broker(broker, float(end))
        warnings: list[str] = []
        modelled = prediction.brokers.get(broker) if prediction is not None else None
        if est is not None and modelled is not None and est.arrivals >= self.config.min_events:
            gap = abs(modelled.mean_wait_ms - est.mean_wait_ms)
            if gap > _WAIT_MISMATCH * max(est.mean_wait_ms, 1e-9) and gap > 1.0:
                warnings.append(
                    f"model mean wait {modelled.mean_wait_ms:.1f} ms vs measured {est.mean_wait_ms:.1f} ms "
                    f"(rho {modelled.rho:.2f}, arrival scv {modelled.ca2:.2f}, service scv {modelled.cs2:.2f})"
                )
        if modelled is not None and modelled.rho >= RHO_WARNING:
            warnings.append(f"rho {modelled.rho:.2f} >= {RHO_WARNING}: saturated, predictions behind it unreliable")
        return {
            "kind": "broker",
            "id": broker,
            "window_end": int(end),
            "model": self.config.model,
            "reliability": None,
            "reliability_low": None,
            "reliability_high": None,
            "measured_reliability": None,
            "mean_delay_ms": None,
            "p95_delay_ms": None,
            "measured_p50_delay_ms": None,
            "measured_p95_delay_ms": None,
            "arrival_rate_per_s": est.arrival_rate_per_s if est else 0.0,
            "rho": est.utilisation if est else 0.0,
            "mean_wait_ms": est.mean_wait_ms if est else None,
            "alert": None,
            "warnings": warnings,
        }

    # -- state -----------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """The whole state: the estimator's blob and the rest as JSON."""
        meta = {
            "config": {**asdict(self.config), "estimation": asdict(self.config.estimation)},
            "brokers": list(self.brokers),
            "publishers": self.publishers,
            "subscribers": self.subscribers,
            "links": self.links,
            # the fields read directly: dataclasses.asdict deep-copies every value, and this runs every batch
            "wishes": [{f: getattr(w, f) for f in _WISH_FIELDS} for w in self.wishes.values()],
            "content": self.content,
            "content_clock": self.content_clock if math.isfinite(self.content_clock) else None,
            "last_report_ms": self.last_report_ms,
            "counters": self.counters,
        }
        return pack_documents(meta, estimator=self.estimator.to_bytes())

    @classmethod
    def from_bytes(cls, data: bytes) -> QosMonitor:
        meta, blobs = unpack_documents(data)
        estimator_blob = blobs["estimator"]
        cfg = dict(meta["config"])
        cfg["estimation"] = EstimationConfig(**cfg["estimation"])
        monitor = cls(QosMonitorConfig(**cfg))
        monitor.brokers = dict.fromkeys(meta["brokers"])
        monitor.publishers = meta["publishers"]
        monitor.subscribers = meta["subscribers"]
        monitor.links = meta["links"]
        for w in meta["wishes"]:
            wish = SubscriptionWish(**w)
            monitor.wishes[wish.subscription_id] = wish
            monitor._index.add(wish.subscription_id, wish.filter)
        monitor.content = meta["content"]
        monitor.content_clock = -math.inf if meta["content_clock"] is None else meta["content_clock"]
        monitor.last_report_ms = meta["last_report_ms"]
        monitor.counters = meta["counters"]
        monitor.estimator = TelemetryEstimator.from_bytes(estimator_blob, match=monitor._match)
        return monitor
