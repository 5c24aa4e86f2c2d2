"""The dashboard's state: pure reducers that fold SiftStream's output records into bounded
in-memory views, and the JSON snapshot the page draws.

Source: the records of docs/reference/topics.md, decoded by ``schemas.codec`` (their JSON view).
:meth:`DashboardState.apply` takes one record with the name of its schema and updates the view
of that schema; nothing here reads Kafka, a clock or the environment, so every reducer is a
plain function of the records it was given (tests/unit/streaming/test_dashboard_state.py).

Views
-----
subscribers
    ``QosReport`` of kind ``subscriber``: per subscriber, the last :attr:`Limits.history` reports
    (``window_end``, predicted R'_s with its 90% band, measured R_s, delays), the latest alert
    with its explanation and contributors, and the last :attr:`Limits.alerts` alerts. Its wish is
    that of its subscriptions (``Subscription`` records): the largest ``min_reliability`` and the
    smallest ``deadline_ms``, the rule the QoS job applies.
brokers, links
    ``QosReport`` of kind ``broker`` (utilisation rho, mean wait, arrival rate), ``BrokerSample``
    and ``LinkSample`` telemetry over the last :attr:`Limits.samples` samples of each element
    (mean wait and service time; loss rate and mean delay), and ``TopologyElement`` for the
    overlay's nodes and links (a link seen only in telemetry is drawn too).
channels
    ``ChannelAssignment``: the latest planned version's channels (members, deliveries, waste
    ratio), the versions installed, and the waste ratio against flooding's per version.
composites
    ``Placement`` (latest per composite subscription, with the joint-point baseline's cost) and
    ``CompositeDetection`` (count per subscription, the last few detections).
routes
    ``RoutePlan``: the latest plan (cost, previous cost, feasibility, method, reasons) and the
    cost of each plan over time.
dead letters
    ``DeadLetter``: count per ``error_code`` with the first reason seen as its example and the
    source topics.
matches
    ``Match``: events matched, subscription ids named, matches per event.

Invariants: every per-key table holds at most its limit of keys (the oldest key by last update
is dropped first, and ``dropped`` counts them); every history is a ring of fixed length; the
snapshot is JSON (no NaN, no infinity: such a value is shown as null); ``version`` grows by one
per applied record.

>>> s = DashboardState()
>>> s.apply("QosReport", {"kind": "subscriber", "id": "s1", "window_end": 1000, "reliability": 0.9,
...                       "reliability_low": 0.85, "reliability_high": 0.95, "measured_reliability": None,
...                       "alert": None, "warnings": []})
>>> s.snapshot()["subscribers"][0]["id"], s.version
('s1', 1)
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["DashboardState", "Limits"]

_SHOWN_SUBSCRIPTIONS = 50  # subscription ids listed per subscriber (the count is complete)
_SHOWN_CONTRIBUTORS = 5  # contributors kept per alert, largest share first as the QoS job orders them
_BROKER_HISTORY = 60  # broker reports kept per broker: the utilisation trend
_TREND_POINTS = 12  # reports per subscriber in the snapshot's trend (the detail has them all)


@dataclass(frozen=True)
class Limits:
    """How much the dashboard keeps: every view is bounded by one of these.

    Attributes
    ----------
    subscribers : int
        Subscribers tracked (the least recently reported is dropped first).
    history : int
        Reports kept per subscriber and per broker (a ring).
    alerts : int
        Alerts kept per subscriber, and in the overall list of recent alerts.
    samples : int
        Telemetry samples per broker and per link that the means are taken over.
    elements : int
        Brokers, links and topology elements tracked.
    subscriptions : int
        Subscriptions whose subscriber and wish are known (for search and wishes).
    channel_members : int
        Member ids per channel shown in the snapshot (the counts are always complete).
    versions : int
        Channel versions and route plans kept in the over-time series.
    composites : int
        Composite subscriptions with a placement or detections tracked.
    detections : int
        Recent detections kept.
    """

    subscribers: int = 5000
    history: int = 240
    alerts: int = 10
    samples: int = 500
    elements: int = 2000
    subscriptions: int = 200_000
    channel_members: int = 30
    versions: int = 200
    composites: int = 1000
    detections: int = 20


def _num(x: Any) -> float | None:
    """A finite float, or None (JSON has no NaN)."""
    if x is None:
        return None
    try:
        value = float(x)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


class _Bounded(OrderedDict[str, Any]):
    """A table of at most ``limit`` keys; touching a key makes it the newest; ``on_drop`` hears
    of each key dropped for room."""

    def __init__(self, limit: int, on_drop: Callable[[str, Any], None] | None = None) -> None:
        super().__init__()
        self.limit = limit
        self.dropped = 0
        self.on_drop = on_drop

    def touch(self, key: str, make: Any) -> Any:
        if key in self:
            self.move_to_end(key)
            return self[key]
        value = make()
        self[key] = value
        while len(self) > self.limit:
            old_key, old_value = self.popitem(last=False)
            self.dropped += 1
            if self.on_drop is not None:
                self.on_drop(old_key, old_value)
        return value


class _Samples:
    """The last ``limit`` telemetry values in a numpy ring (NaN for a lost message)."""

    def __init__(self, limit: int) -> None:
        self.values = np.full(limit, np.nan)
        self.count = 0

    def add(self, value: float | None) -> None:
        self.values[self.count % len(self.values)] = np.nan if value is None else value
        self.count += 1

    def __len__(self) -> int:
        return min(self.count, len(self.values))

    def mean(self) -> float | None:
        kept = self.values[: len(self)]
        present = kept[~np.isnan(kept)]
        return float(present.mean()) if len(present) else None

    def share_none(self) -> float | None:
        n = len(self)
        return float(np.isnan(self.values[:n]).sum() / n) if n else None


_SERIES = ("t", "predicted", "low", "high", "measured")


class _Series:
    """A subscriber's reports over time: a numpy ring of rows (window end, R'_s, its 90% band,
    R_s), NaN for a missing value, kept in window order; at most ``limit`` rows."""

    def __init__(self, limit: int) -> None:
        self.rows = np.full((limit, len(_SERIES)), np.nan)
        self.count = 0

    def __len__(self) -> int:
        return min(self.count, len(self.rows))

    def ordered(self) -> npt.NDArray[np.float64]:
        """The rows, oldest first."""
        n, cap = len(self), len(self.rows)
        if self.count <= cap:
            return self.rows[:n]
        start = self.count % cap
        return np.concatenate([self.rows[start:], self.rows[:start]])

    def last_t(self) -> float | None:
        return float(self.rows[(self.count - 1) % len(self.rows), 0]) if self.count else None

    def add(self, row: tuple[float | None, ...]) -> None:
        values = [np.nan if v is None else v for v in row]
        last = self.last_t()
        if last is not None and values[0] < last:
            # a report out of window order (a replay, a late write): re-sort the kept rows
            rows = np.vstack([self.ordered(), values])
            rows = rows[np.argsort(rows[:, 0], kind="stable")][-len(self.rows) :]
            self.rows[: len(rows)] = rows
            self.count = len(rows)
            return
        self.rows[self.count % len(self.rows)] = values
        self.count += 1

    def trend(self, last: int) -> list[list[float | None]]:
        """The last ``last`` rows as ``[window end, R'_s, R_s]``, four decimals, None for missing."""
        rows = np.round(self.ordered()[-last:][:, [0, 1, 4]], 4).tolist()
        return [[int(t), None if p != p else p, None if m != m else m] for t, p, m in rows]

    def points(self, last: int | None = None) -> list[dict[str, Any]]:
        """The rows as dicts (None for a missing value), the last ``last`` of them when given."""
        rows = self.ordered()
        if last is not None:
            rows = rows[-last:]
        return [
            {
                name: (int(v) if name == "t" else None if math.isnan(v) else float(v))
                for name, v in zip(_SERIES, row, strict=True)
            }
            for row in rows.tolist()
        ]


@dataclass
class _Subscriber:
    history: _Series
    alerts: deque[dict[str, Any]]
    latest: dict[str, Any] = field(default_factory=dict)
    alert: dict[str, Any] | None = None
    reports: int = 0


@dataclass(slots=True)
class _Wish:
    subscriber_id: str
    min_reliability: float | None
    deadline_ms: float | None


class DashboardState:
    """Bounded views of SiftStream's output topics, updated one decoded record at a time.

    Parameters
    ----------
    limits : Limits
        How much each view keeps.

    Examples
    --------
    >>> s = DashboardState()
    >>> s.apply("DeadLetter", {"error_code": "bad_framing", "reason": "no marker", "source_topic": "e"})
    >>> s.apply("DeadLetter", {"error_code": "bad_framing", "reason": "short", "source_topic": "e"})
    >>> s.snapshot()["dead_letters"]["by_class"]
    [{'error_class': 'bad_framing', 'count': 2, 'example': 'no marker', 'topics': ['e']}]
    """

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        lim = self.limits
        self.version = 0
        self.records: Counter[str] = Counter()
        self.undecodable: Counter[str] = Counter()
        self.undecodable_example: dict[str, str] = {}
        self._subscribers = _Bounded(lim.subscribers)
        self._wishes = _Bounded(lim.subscriptions, on_drop=self._unindex)
        self._wishes_of: dict[str, dict[str, _Wish]] = {}  # subscriber -> its subscriptions' wishes
        self._wish_cache: dict[str, dict[str, Any]] = {}
        self._recent_alerts: deque[dict[str, Any]] = deque(maxlen=lim.alerts)
        self._broker_reports = _Bounded(lim.elements)
        self._broker_samples = _Bounded(lim.elements)
        self._link_samples = _Bounded(lim.elements)
        self._topology = _Bounded(lim.elements)
        self._planned: dict[str, Any] | None = None
        self._installed: deque[dict[str, Any]] = deque(maxlen=lim.versions)
        self._waste: deque[dict[str, Any]] = deque(maxlen=lim.versions)
        self._placements = _Bounded(lim.composites)
        self._detections = _Bounded(lim.composites)
        self._recent_detections: deque[dict[str, Any]] = deque(maxlen=lim.detections)
        self._plan: dict[str, Any] | None = None
        self._plan_costs: deque[dict[str, Any]] = deque(maxlen=lim.versions)
        self._dead: Counter[str] = Counter()
        self._dead_example: dict[str, str] = {}
        self._dead_topics: dict[str, set[str]] = {}
        self._matched_events = 0
        self._matched_ids = 0
        self._matched_sampled = 0
        self._last_match_at: int | None = None

    # ---- applying records --------------------------------------------------------------------

    def apply(self, schema: str, record: dict[str, Any] | None, key: str | None = None) -> None:
        """Fold one decoded record of ``schema`` into its view; ``record`` None is a tombstone
        (``key`` says of what: a subscription or a topology element leaves its table)."""
        self.version += 1
        self.records[schema] += 1
        reducer = getattr(self, f"_on_{schema}", None)
        if reducer is None:
            return
        if record is None:
            self._tombstone(schema, key)
            return
        reducer(record)

    def count_matches(self, events: int) -> None:
        """Count ``events`` Match records read but not decoded (the feed decodes a sample of a
        busy matches topic; the ids per event come from the sample)."""
        self.version += 1
        self.records["Match"] += events
        self._matched_events += events

    def skip(self, topic: str, error: str) -> None:
        """Count a record of ``topic`` that did not decode (an output topic's record is written by
        SiftStream's jobs, so this is shown, not hidden)."""
        self.version += 1
        self.undecodable[topic] += 1
        self.undecodable_example.setdefault(topic, error)

    def _tombstone(self, schema: str, key: str | None) -> None:
        if key is None:
            return
        if schema == "Subscription":
            self._forget(key)
        elif schema == "TopologyElement":
            self._topology.pop(key, None)

    def _on_QosReport(self, r: dict[str, Any]) -> None:
        if r.get("kind") == "broker":
            self._on_broker_report(r)
            return
        sid = str(r["id"])
        sub: _Subscriber = self._subscribers.touch(
            sid, lambda: _Subscriber(_Series(self.limits.history), deque(maxlen=self.limits.alerts))
        )
        t = int(r.get("window_end") or 0)
        point: dict[str, Any] = {
            "t": t,
            "predicted": _num(r.get("reliability")),
            "low": _num(r.get("reliability_low")),
            "high": _num(r.get("reliability_high")),
            "measured": _num(r.get("measured_reliability")),
        }
        newest = sub.history.last_t() is None or t >= (sub.history.last_t() or 0)
        sub.history.add(tuple(point[name] for name in _SERIES))
        if newest:
            sub.latest = {
                **point,
                "mean_delay_ms": _num(r.get("mean_delay_ms")),
                "p95_delay_ms": _num(r.get("p95_delay_ms")),
                "measured_p95_delay_ms": _num(r.get("measured_p95_delay_ms")),
                "model": r.get("model"),
                "warnings": list(r.get("warnings") or []),
            }
        sub.reports += 1
        alert = r.get("alert")
        if alert is not None:
            shown = {
                "t": point["t"],
                "subscriber": sid,
                "severity": str(alert.get("severity")),
                "message": str(alert.get("message")),
                "contributors": [
                    {
                        "element": str(c.get("element")),
                        "utilisation": _num(c.get("utilisation")),
                        "delay_ms": _num(c.get("delay_ms")),
                        "share": _num(c.get("share")),
                    }
                    for c in (alert.get("contributors") or [])[:_SHOWN_CONTRIBUTORS]
                ],
            }
            sub.alerts.append(shown)
            self._recent_alerts.append(shown)
            if newest:
                sub.alert = shown
        elif newest:
            sub.alert = None

    def _on_broker_report(self, r: dict[str, Any]) -> None:
        entry = self._broker_reports.touch(str(r["id"]), lambda: deque(maxlen=_BROKER_HISTORY))
        entry.append(
            {
                "t": int(r.get("window_end") or 0),
                "rho": _num(r.get("rho")),
                "mean_wait_ms": _num(r.get("mean_wait_ms")),
                "arrival_rate_per_s": _num(r.get("arrival_rate_per_s")),
                "warnings": list(r.get("warnings") or []),
            }
        )

    def _on_Subscription(self, r: dict[str, Any]) -> None:
        sid = str(r["subscription_id"])
        self._forget(sid)
        if r.get("type") == "unsubscribe" or not r.get("subscriber_id"):
            return
        wish = _Wish(str(r["subscriber_id"]), _num(r.get("min_reliability")), _num(r.get("deadline_ms")))
        self._wishes.touch(sid, lambda: wish)
        self._wishes_of.setdefault(wish.subscriber_id, {})[sid] = wish
        self._wish_cache.pop(wish.subscriber_id, None)

    def _forget(self, sid: str) -> None:
        old = self._wishes.pop(sid, None)
        if old is not None:
            self._unindex(sid, old)

    def _unindex(self, sid: str, wish: _Wish) -> None:
        self._wish_cache.pop(wish.subscriber_id, None)
        mine = self._wishes_of.get(wish.subscriber_id)
        if mine is not None:
            mine.pop(sid, None)
            if not mine:
                del self._wishes_of[wish.subscriber_id]

    def _on_BrokerSample(self, r: dict[str, Any]) -> None:
        entry = self._broker_samples.touch(
            str(r["broker_id"]),
            lambda: {"wait": _Samples(self.limits.samples), "service": _Samples(self.limits.samples)},
        )
        entry["wait"].add(_num(r.get("wait_ms")))
        entry["service"].add(_num(r.get("service_ms")))

    def _on_LinkSample(self, r: dict[str, Any]) -> None:
        key = f"{r['from']}->{r['to']}"
        ring: _Samples = self._link_samples.touch(key, lambda: _Samples(self.limits.samples))
        ring.add(None if r.get("lost") else _num(r.get("delay_ms")))

    def _on_TopologyElement(self, r: dict[str, Any]) -> None:
        element = {
            "id": str(r["element_id"]),
            "kind": str(r.get("kind")),
            "broker": r.get("broker"),
            "from": r.get("from"),
            "to": r.get("to"),
            "cost": _num(r.get("cost")),
        }
        self._topology.touch(element["id"], lambda: element)
        self._topology[element["id"]] = element

    def _on_ChannelAssignment(self, r: dict[str, Any]) -> None:
        version = int(r["version"])
        if r.get("stage") == "installed":
            self._installed.append({"version": version, "t": int(r.get("created_at") or 0)})
            return
        channels = []
        for c in r.get("channels") or []:
            subs, members = list(c.get("subscription_ids") or []), list(c.get("subscriber_ids") or [])
            channels.append(
                {
                    "channel": int(c["channel"]),
                    "subscriptions": len(subs),
                    "subscribers": len(members),
                    "subscriber_ids": members[: self.limits.channel_members],
                    "subscription_ids": subs[: self.limits.channel_members],
                    "deliveries": int(c.get("deliveries") or 0),
                    "waste_ratio": _num(c.get("waste_ratio")),
                }
            )
        planned = {
            "version": version,
            "t": int(r.get("created_at") or 0),
            "k": int(r.get("k") or len(channels)),
            "reason": str(r.get("reason") or ""),
            "detail": str(r.get("detail") or ""),
            "method": str(r.get("method") or ""),
            "sample_events": int(r.get("sample_events") or 0),
            "waste_ratio": _num(r.get("waste_ratio")),
            "flooding_waste_ratio": _num(r.get("flooding_waste_ratio")),
            "previous_waste_ratio": _num(r.get("previous_waste_ratio")),
            "channels": sorted(channels, key=lambda c: c["channel"]),
        }
        if self._planned is None or version >= self._planned["version"]:
            self._planned = planned
        self._waste.append(
            {
                "version": version,
                "t": planned["t"],
                "waste_ratio": planned["waste_ratio"],
                "flooding_waste_ratio": planned["flooding_waste_ratio"],
                "reason": planned["reason"],
            }
        )

    def _on_Placement(self, r: dict[str, Any]) -> None:
        placement = {
            "subscription_id": str(r["subscription_id"]),
            "t": int(r.get("decided_at") or 0),
            "method": str(r.get("method") or ""),
            "placement": dict(r.get("placement") or {}),
            "cost": _num(r.get("cost")),
            "baseline_cost": _num(r.get("baseline_cost")),
            "reasons": dict(r.get("reasons") or {}),
        }
        self._placements.touch(placement["subscription_id"], lambda: placement)
        self._placements[placement["subscription_id"]] = placement

    def _on_CompositeDetection(self, r: dict[str, Any]) -> None:
        sid = str(r["subscription_id"])
        entry = self._detections.touch(sid, lambda: {"subscriber_id": r.get("subscriber_id"), "count": 0, "last": 0})
        entry["count"] += 1
        entry["last"] = max(entry["last"], int(r.get("detected_at") or 0))
        self._recent_detections.append(
            {
                "subscription_id": sid,
                "subscriber_id": r.get("subscriber_id"),
                "t": int(r.get("detected_at") or 0),
                "events": [c.get("event_id") for c in r.get("components") or []],
            }
        )

    def _on_RoutePlan(self, r: dict[str, Any]) -> None:
        plan = {
            "plan_id": str(r["plan_id"]),
            "version": int(r.get("version") or 0),
            "t": int(r.get("planned_at") or 0),
            "method": str(r.get("method") or ""),
            "feasible": bool(r.get("feasible")),
            "cost": _num(r.get("cost")),
            "previous_cost": _num(r.get("previous_cost")),
            "transmissions": len(r.get("transmissions") or []),
            "generated": len(r.get("generated") or []),
            "reasons": list(r.get("reasons") or []),
        }
        if self._plan is None or plan["t"] >= self._plan["t"]:
            self._plan = plan
        self._plan_costs.append({"t": plan["t"], "version": plan["version"], "cost": plan["cost"]})

    def _on_DeadLetter(self, r: dict[str, Any]) -> None:
        code = str(r.get("error_code") or "unknown")
        self._dead[code] += 1
        self._dead_example.setdefault(code, str(r.get("reason") or ""))
        self._dead_topics.setdefault(code, set()).add(str(r.get("source_topic") or ""))

    def _on_Match(self, r: dict[str, Any]) -> None:
        self._matched_events += 1
        self._matched_sampled += 1
        self._matched_ids += len(r.get("subscription_ids") or [])
        published = r.get("published_at")
        if published is not None:
            self._last_match_at = max(self._last_match_at or 0, int(published))

    # ---- reading -----------------------------------------------------------------------------

    def wish_of(self, subscriber: str) -> dict[str, Any]:
        """The subscriber's wish and subscriptions: the largest ``min_reliability`` and the
        smallest ``deadline_ms`` over its subscriptions (None when none says)."""
        mine = self._wishes_of.get(subscriber, {})
        return {
            "min_reliability": max(
                (w.min_reliability for w in mine.values() if w.min_reliability is not None), default=None
            ),
            "deadline_ms": min((w.deadline_ms for w in mine.values() if w.deadline_ms is not None), default=None),
            "subscriptions": sorted(mine)[:_SHOWN_SUBSCRIPTIONS],
            "subscription_count": len(mine),
        }

    def _wish_summary(self, subscriber: str) -> dict[str, Any]:
        """:meth:`wish_of` without the ids, cached until the subscriber's subscriptions change."""
        cached = self._wish_cache.get(subscriber)
        if cached is None:
            cached = self.wish_of(subscriber)
            del cached["subscriptions"]  # the page searches through /api/search; the count is enough here
            self._wish_cache[subscriber] = cached
        return cached

    def open_alerts(self) -> Counter[str]:
        """Subscribers whose latest report carries an alert, by severity."""
        return Counter(sub.alert["severity"] for sub in self._subscribers.values() if sub.alert is not None)

    def dead_letters(self) -> dict[str, int]:
        """Dead letters read, by error class."""
        return dict(self._dead)

    def channel_ratios(self) -> dict[str, Any]:
        """The latest planned version's waste ratios: per channel, the whole version, flooding."""
        if self._planned is None:
            return {"channels": {}, "assignment": None, "flooding": None}
        return {
            "channels": {str(c["channel"]): c["waste_ratio"] for c in self._planned["channels"]},
            "assignment": self._planned["waste_ratio"],
            "flooding": self._planned["flooding_waste_ratio"],
        }

    def subscriber(self, subscriber: str) -> dict[str, Any] | None:
        """One subscriber's full view: history, wish, alerts; None when no report named it."""
        sub: _Subscriber | None = self._subscribers.get(subscriber)
        if sub is None:
            return None
        return {
            "id": subscriber,
            "wish": self.wish_of(subscriber),
            "history": sub.history.points(),
            "alerts": list(sub.alerts),
            "alert": sub.alert,
            "latest": sub.latest,
            "reports": sub.reports,
        }

    def snapshot(self) -> dict[str, Any]:
        """Everything the page draws, as JSON-ready data (see the module docstring)."""
        subscribers = []
        for sid, sub in self._subscribers.items():
            alert = sub.alert
            subscribers.append(
                {
                    "id": sid,
                    **{k: sub.latest.get(k) for k in ("t", "predicted", "low", "high", "measured")},
                    "p95_delay_ms": sub.latest.get("p95_delay_ms"),
                    "wish": self._wish_summary(sid),
                    # the row's alert; its contributors are in the subscriber's detail and the recent alerts
                    "alert": None if alert is None else {k: alert[k] for k in ("t", "severity", "message")},
                    "reports": sub.reports,
                    "recent": sub.history.trend(_TREND_POINTS),
                }
            )
        subscribers.sort(key=lambda s: s["id"])
        return {
            "version": self.version,
            "records": dict(self.records),
            "undecodable": {
                t: {"count": n, "example": self.undecodable_example[t]} for t, n in self.undecodable.items()
            },
            "subscribers": subscribers,
            "subscribers_dropped": self._subscribers.dropped,
            "alerts": {"open": dict(self.open_alerts()), "recent": list(self._recent_alerts)[::-1]},
            "brokers": self._brokers(),
            "links": self._links(),
            "topology": self._topology_view(),
            "channels": {
                "planned": self._planned,
                "installed": list(self._installed)[-10:],
                "waste": list(self._waste),
            },
            "composites": {
                "placements": sorted(self._placements.values(), key=lambda p: p["subscription_id"]),
                "detections": [{"subscription_id": k, **v} for k, v in sorted(self._detections.items())],
                "recent": list(self._recent_detections)[::-1],
            },
            "routes": {"plan": self._plan, "costs": list(self._plan_costs)},
            "dead_letters": {
                "total": sum(self._dead.values()),
                "by_class": [
                    {
                        "error_class": code,
                        "count": n,
                        "example": self._dead_example[code],
                        "topics": sorted(self._dead_topics[code]),
                    }
                    for code, n in self._dead.most_common()
                ],
            },
            "matches": {
                "events": self._matched_events,
                "sampled": self._matched_sampled,
                "per_event": self._matched_ids / self._matched_sampled if self._matched_sampled else None,
                "last_published_at": self._last_match_at,
            },
        }

    def _brokers(self) -> list[dict[str, Any]]:
        names = set(self._broker_reports) | set(self._broker_samples)
        names |= {e["id"] for e in self._topology.values() if e["kind"] == "broker"}
        out = []
        for name in sorted(names):
            reports = self._broker_reports.get(name)
            last = reports[-1] if reports else {}
            samples = self._broker_samples.get(name)
            out.append(
                {
                    "id": name,
                    "rho": last.get("rho"),
                    "mean_wait_ms": last.get("mean_wait_ms"),
                    "arrival_rate_per_s": last.get("arrival_rate_per_s"),
                    "warnings": last.get("warnings", []),
                    "sampled_wait_ms": samples["wait"].mean() if samples else None,
                    "sampled_service_ms": samples["service"].mean() if samples else None,
                    "samples": len(samples["wait"]) if samples else 0,
                    "rho_history": [[p["t"], p["rho"]] for p in list(reports or [])[-60:]],
                }
            )
        return out

    def _links(self) -> list[dict[str, Any]]:
        out = []
        for key, ring in sorted(self._link_samples.items()):
            src, _, dst = key.partition("->")
            out.append(
                {
                    "id": key,
                    "from": src,
                    "to": dst,
                    "loss": ring.share_none(),
                    "mean_delay_ms": ring.mean(),
                    "samples": len(ring),
                }
            )
        return out

    def _topology_view(self) -> dict[str, Any]:
        nodes: dict[str, str] = {}
        edges: dict[str, dict[str, Any]] = {}

        def node(name: Any, kind: str) -> None:
            if name:
                nodes.setdefault(str(name), kind)

        for e in self._topology.values():
            if e["kind"] == "link":
                edges[e["id"]] = {"id": e["id"], "from": e["from"], "to": e["to"], "cost": e["cost"]}
                node(e["from"], "broker")
                node(e["to"], "broker")
            else:
                nodes[e["id"]] = e["kind"]
                if e["broker"]:
                    node(e["broker"], "broker")
                    key = f"{e['id']}--{e['broker']}"
                    edges[key] = {"id": key, "from": e["id"], "to": e["broker"], "cost": None}
        for link in self._link_samples:
            src, _, dst = link.partition("->")
            node(src, "broker")
            node(dst, "broker")
            edges.setdefault(link, {"id": link, "from": src, "to": dst, "cost": None})
        for name in self._broker_reports:
            node(name, "broker")
        return {
            "nodes": [{"id": n, "kind": k} for n, k in sorted(nodes.items())],
            "edges": sorted(edges.values(), key=lambda e: e["id"]),
        }

    def subscribers_matching(self, text: str) -> Iterable[str]:
        """Subscribers with a report whose id, or one of whose subscriptions' ids, contains
        ``text`` (any case)."""
        text = text.lower()
        for sid in self._subscribers:
            if text in sid.lower() or any(text in s.lower() for s in self._wishes_of.get(sid, ())):
                yield sid
