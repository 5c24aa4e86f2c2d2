"""The composites job's logic: match component filters, detect composites, place their detection.

:class:`CompositeMonitor` is the step object of ``streaming/composites_job.py``. It keeps

- the live composite subscriptions (:class:`routing.composite.trees.CompositeTable`) and, in one
  :class:`routing.matching.index.MatchIndex`, every leaf filter under the id ``"<subscription>#<leaf>"``
  (:func:`routing.composite.trees.filter_id`), so each batch of events is matched against all
  components at once;
- the detector (:class:`routing.composite.detection.CompositeDetector`): event time, watermarks, the
  selection and consumption policy and the state bound are documented there;
- for placement (Li & Jacobsen §4; :mod:`routing.composite.placement`): the overlay's brokers and links
  (the topology topic), each publisher's home broker, the rate at which each leaf's matches enter
  the overlay at each broker over a rolling window (Definition 1, measured), and measured link
  delays (with ``link_cost="delay"`` they are the distances).

Placement, every ``check_period_ms`` of event time, per composite subscription whose leaves all
have observed sources: the docs/reference/placement.md instance of the window is solved (``method``, default
``optimal``; the joint-point baseline and the reasons come with it). The first placement is
written at once; afterwards the detection moves only when the new placement is cheaper than the
current one, at the new rates, by at least ``min_saving`` (relative) for ``sustain`` checks in a
row (no flapping), or at once when the current one became impossible (a broker or link vanished,
the tree or the subscriber's broker changed). Each decision is one ``Placement`` record.

Policy constraints: when links' ``forbidden_events`` name a composite (``sid``, ``sid/<operator>``
or ``sid#<leaf>``), docs/reference/placement.md's model cannot say where its detection may happen. Then the detection
and the delivery of its composite events are planned as a MICPICE instance (Chen et al. 2004;
:func:`policy_instance`): operators are composite events, each leaf's matches per source broker
are primitive events, and the plan's generation nodes are the placement (method
``micpice-exact`` or ``micpice-enhanced``, cost by :func:`micpice_cost`). Without a policy-allowed
placement nothing is written and the subscription is counted ``infeasible``.

>>> mon = CompositeMonitor(CompositeMonitorConfig(check_period_ms=1000, rate_window_ms=10_000))
>>> mon.apply_topology([("b1", {"kind": "broker"}), ("b2", {"kind": "broker"}),
...     ("b1->b2", {"kind": "link", "from": "b1", "to": "b2", "cost": 1.0}),
...     ("b2->b1", {"kind": "link", "from": "b2", "to": "b1", "cost": 1.0}),
...     ("p1", {"kind": "publisher", "broker": "b2"})])
>>> tree = '{"op": "and", "within_ms": 1000, "children": ["x = 1", "y = 1"]}'
>>> mon.apply_subscriptions([SubscriptionRecord(op="subscribe", subscription_id="c1", composite=tree,
...     subscriber_id="s1")], ["b1"])
[]
>>> mon.add_events(["e1", "e2"], ["p1", "p1"], [100, 200], [{"x": 1}, {"y": 1}])
2
>>> detections, placements = mon.advance(1000)
>>> [d["components"][1]["event_id"] for d in detections], placements[0]["placement"]
(['e2'], {'n1': 'b2'})
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from routing.composite.detection import CompositeDetector, Detections, DetectorConfig
from routing.composite.placement import (
    METHODS,
    FloatVector,
    Operator,
    PlacementError,
    PlacementInstance,
    place,
    traffic_cost,
)
from routing.composite.trees import CompositeTable, leaf_filter_changes, plan_composite_change, to_json
from routing.composite.trees import to_placement_tree as _placement_tree
from routing.matching.index import EventBatch, MatchIndex
from routing.matching.table import SubscriptionRecord
from routing.planning.heuristics import plan_enhanced
from routing.planning.model import Instance, Plan
from routing.reliability.estimation import add_link_delays
from routing.stats.moments import Moments
from routing.stats.state import pack_documents, unpack_documents
from routing.stats.windows import RollingWindow

__all__ = [
    "CompositeMonitor",
    "CompositeMonitorConfig",
    "micpice_cost",
    "policy_instance",
]

CATCH_UP_PERIODS = 60
"""Check periods of counts kept beyond the rate window, so that a backlog read in one batch is
still placed period by period (as ``routing.monitors.routes`` does)."""


@dataclass(frozen=True)
class CompositeMonitorConfig:
    """Settings of the composites job.

    Attributes
    ----------
    max_instances : int
        Detector state bound: partial-match instances kept per operator child per subscription.
    method : str
        Placement method: ``optimal`` (default), ``adaptive`` (Algorithm 2) or ``joint-point``.
    check_period_ms : int
        How often placements are reconsidered (event time).
    rate_window_ms : int
        Leaf rates and link delays are averaged over this window (a multiple of the period).
    min_saving : float
        A detection moves only when the new placement is cheaper by this fraction...
    sustain : int
        ...for this many checks in a row.
    link_cost : str
        ``topology`` (the links' cost) or ``delay`` (measured mean delay, ms).
    """

    max_instances: int = 1000
    method: str = "optimal"
    check_period_ms: int = 10_000
    rate_window_ms: int = 60_000
    min_saving: float = 0.1
    sustain: int = 3
    link_cost: str = "topology"

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)} (got {self.method!r})")
        if self.link_cost not in ("topology", "delay"):
            raise ValueError(f"link_cost must be topology or delay (got {self.link_cost!r})")
        if self.check_period_ms <= 0 or self.rate_window_ms % self.check_period_ms:
            raise ValueError("rate_window_ms must be a positive multiple of check_period_ms")
        if not 0 <= self.min_saving < 1 or self.sustain < 1:
            raise ValueError("need 0 <= min_saving < 1 and sustain >= 1")


class _SharedDistances(PlacementInstance):
    """A ``PlacementInstance`` whose all-pairs distances (Dijkstra over every link) are computed
    once per network and shared, read-only: at one check every composite subscription's instance
    has the same brokers and links."""

    _known: ClassVar[dict[tuple[Any, ...], FloatVector]] = {}

    @cached_property
    def distances(self) -> FloatVector:
        key = (self.brokers, tuple((u, v, link.cost) for (u, v), link in self.links.items()))
        known = self._known.get(key)
        if known is None:
            known = super().distances
            known.flags.writeable = False
            if len(self._known) >= 16:  # a network changes now and then: keep the recent ones
                self._known.clear()
            self._known[key] = known
        return known


class CompositeMonitor:
    """The composites job's state and step functions (module docstring)."""

    def __init__(self, config: CompositeMonitorConfig | None = None) -> None:
        self.config = config or CompositeMonitorConfig()
        cfg = self.config
        self.table = CompositeTable()
        self.index = MatchIndex()
        self.detector = CompositeDetector(DetectorConfig(max_instances=cfg.max_instances))
        self.homes: dict[str, str] = {}  # subscription id -> the subscriber's broker
        self.brokers: dict[str, None] = {}
        self.publishers: dict[str, str | None] = {}
        self.links: dict[str, dict[str, Any]] = {}
        buckets = cfg.rate_window_ms // cfg.check_period_ms
        self._counts: dict[str, dict[int, int]] = {}  # "<leaf filter>|<broker>" -> check period -> matches
        self._leaf_of: dict[str, tuple[str, str]] = {}  # leaf filter id -> (subscription id, leaf id)
        self._delays: RollingWindow[Moments] = RollingWindow(Moments, bucket_ms=cfg.check_period_ms, buckets=buckets)
        self._sources: dict[str, set[str]] = {}  # leaf filter id -> brokers its matches entered at
        self.first_ms: float | None = None
        self.next_check_ms: int | None = None
        self.placed: dict[str, dict[str, Any]] = {}  # subscription id -> its current Placement record
        self.streaks: dict[str, int] = {}
        self.counters: dict[str, int] = {"placements": 0, "moves": 0, "kept": 0, "waiting": 0, "infeasible": 0}
        self.notes: list[str] = []

    # -- inputs ----------------------------------------------------------------------------

    def apply_topology(self, records: Sequence[tuple[str, Mapping[str, Any] | None]]) -> None:
        """Apply topology records ``(element id, record or None for a tombstone)`` in order."""
        for key, rec in records:
            for table in (self.brokers, self.publishers, self.links):
                table.pop(key, None)
            if rec is None:
                continue
            kind = rec.get("kind")
            if kind == "broker":
                self.brokers[key] = None
            elif kind == "publisher":
                self.publishers[key] = rec.get("broker")
            elif kind == "link" and rec.get("from") and rec.get("to"):
                cost = rec.get("cost")
                self.links[key] = {
                    "from": str(rec["from"]),
                    "to": str(rec["to"]),
                    "cost": 1.0 if cost is None or not math.isfinite(float(cost)) or cost <= 0 else float(cost),
                    "forbidden": sorted(str(e) for e in rec.get("forbidden_events") or ()),
                }

    def apply_subscriptions(
        self, records: Sequence[SubscriptionRecord], brokers: Sequence[str | None]
    ) -> list[tuple[int, tuple[str, str]]]:
        """Apply subscription records in order (``brokers[i]``: record i's broker field).

        Returns ``(position, (error code, reason))`` for each composite that does not parse, for
        the dead-letter topic; it changes nothing (an existing subscription of that id stays).
        """
        rejected: list[tuple[int, tuple[str, str]]] = []
        for i, (rec, broker) in enumerate(zip(records, brokers, strict=True)):
            outcome = plan_composite_change(rec)
            if outcome.rejection is not None:
                rejected.append((i, outcome.rejection))
                continue
            if outcome.change is None:
                continue
            sid, new = outcome.change
            old = self.table.get(sid)
            if old is None and new is None:
                continue
            for fid, text in leaf_filter_changes(old, new):
                if text is None:
                    self.index.remove(fid)
                    self._sources.pop(fid, None)
                    self._leaf_of.pop(fid, None)
                else:
                    self.index.add(fid, text)
                    self._leaf_of[fid] = (sid, fid.rpartition("#")[2])
            self.table.apply([(sid, new)])
            if new is None:
                self.detector.apply([(sid, None)])
                self.homes.pop(sid, None)
                self.placed.pop(sid, None)
                self.streaks.pop(sid, None)
            else:
                self.detector.add(sid, new.tree, new.subscriber_id)
                if broker:
                    self.homes[sid] = broker
        return rejected

    def add_events(
        self,
        event_ids: Sequence[str],
        publishers: Sequence[str],
        published_at: Sequence[int],
        events: EventBatch | Sequence[Mapping[str, object]],
    ) -> int:
        """Match a batch of events against every leaf filter, feed the component matches to the
        detector, and count each leaf's matches per check period at the publisher's home broker.
        Returns the number of component matches."""
        if not len(event_ids) or not len(self.table):
            return 0
        offsets, ids = self.index.match(events).flat_ids()
        if not len(ids):
            return 0
        rows = np.repeat(np.arange(len(event_ids)), np.diff(offsets))
        times = np.asarray(published_at, dtype=np.int64)[rows]
        # leaf filters coded once through a dict (hashing, not sorting: a batch has millions of
        # matches); the detector takes each leaf's matches in one call (a stable sort by leaf
        # filter keeps them in batch order)
        fid_code: dict[str, int] = {}
        fid_codes = np.fromiter((fid_code.setdefault(f, len(fid_code)) for f in ids.tolist()), np.int64, len(ids))
        by_fid = np.argsort(fid_codes, kind="stable")
        bounds = np.zeros(len(fid_code) + 1, dtype=np.int64)
        np.cumsum(np.bincount(fid_codes, minlength=len(fid_code)), out=bounds[1:])
        cuts = bounds.tolist()
        eids = np.asarray(event_ids, dtype=object)[rows[by_fid]].tolist()
        ts = times[by_fid].tolist()
        update_leaf, split = self.detector.update_leaf, self._leaf_of
        for k, fid in enumerate(fid_code):
            sid, leaf_id = split[fid]
            lo, hi = cuts[k], cuts[k + 1]
            update_leaf(sid, leaf_id, eids[lo:hi], ts[lo:hi])
        first = float(times.min())
        self.first_ms = first if self.first_ms is None else min(self.first_ms, first)
        # counts per (leaf filter, home broker, check period): one np.unique of ints
        broker_code: dict[str, int] = {}
        pub_home = {p: broker_code.setdefault(self.publishers.get(p) or "", len(broker_code)) for p in set(publishers)}
        event_home = np.fromiter((pub_home[p] for p in publishers), np.int64, len(event_ids))
        period = self.config.check_period_ms
        bucket = times // period
        low = int(bucket.min())
        span = int(bucket.max()) - low + 1
        nb = len(broker_code)
        code = (fid_codes * nb + event_home[rows]) * span + (bucket - low)
        found, counts = np.unique(code, return_counts=True)
        fids_l, brokers_l = list(fid_code), list(broker_code)
        for c, n in zip(found.tolist(), counts.tolist(), strict=True):
            pair, b = divmod(c, span)
            fid, home = fids_l[pair // nb], brokers_l[pair % nb]
            if home:
                ring = self._counts.setdefault(f"{fid}|{home}", {})
                ring[low + b] = ring.get(low + b, 0) + n
                self._sources.setdefault(fid, set()).add(home)
        return len(ids)

    def _rate_window(self, end_ms: float) -> tuple[int, int]:
        """Check periods (first, last) of the rate window that ends at ``end_ms``."""
        period = self.config.check_period_ms
        last = math.ceil(end_ms / period) - 1
        return last - self.config.rate_window_ms // period + 1, last

    def _count(self, key: str, end_ms: float) -> int:
        first, last = self._rate_window(end_ms)
        return sum(n for b, n in self._counts.get(key, {}).items() if first <= b <= last)

    def _forget(self, end_ms: float) -> None:
        """Drop counts of periods no check can ask for any more."""
        oldest = self._rate_window(end_ms)[0] - CATCH_UP_PERIODS
        for key in list(self._counts):
            ring = self._counts[key]
            for b in [b for b in ring if b < oldest]:
                del ring[b]
            if not ring:
                del self._counts[key]

    def add_link_samples(
        self, src: Sequence[str], dst: Sequence[str], sent_at: Sequence[float], delay_ms: Sequence[float]
    ) -> None:
        """Link telemetry: delays of delivered transmissions (NaN for lost ones, skipped)."""
        add_link_delays(self._delays, src, dst, sent_at, delay_ms)

    # -- placement -----------------------------------------------------------------------------

    def instance(self, sid: str, end_ms: float) -> dict[str, Any] | str:
        """The placement instance (docs/reference/placement.md) of ``sid`` for the window ending at
        ``end_ms``, or why there is none."""
        sub = self.table.get(sid)
        home = self.homes.get(sid)
        if sub is None:
            return f"{sid} is not a composite subscription"
        if home is None or home not in self.brokers:
            return f"{sid}: the subscriber's broker {home!r} is not in the topology"
        period = self.config.check_period_ms
        first, last = self._rate_window(end_ms)
        start, stop = first * period, (last + 1) * period
        if self.first_ms is not None:
            start = max(start, math.floor(self.first_ms / period) * period)
        window_s = max(stop - start, period) / 1000.0
        sources = []
        for leaf in sub.tree.leaf_nodes:
            fid = f"{sid}#{leaf.id}"
            found = False
            for broker in sorted(self._sources.get(fid, ())):
                counted = self._count(f"{fid}|{broker}", end_ms)
                if counted and broker in self.brokers:
                    sources.append({"leaf": leaf.id, "broker": broker, "rate": counted / window_s})
                    found = True
            if not found:
                return f"{sid}: no matches of {leaf.id} in the window yet"
        links = []
        for key, link in sorted(self.links.items()):
            if link["from"] in self.brokers and link["to"] in self.brokers:
                cost = link["cost"]
                if self.config.link_cost == "delay":
                    measured = self._delays.query(key, end_ms)
                    if measured is not None and measured.count and measured.mean > 0:
                        cost = float(measured.mean)
                links.append({"from": link["from"], "to": link["to"], "cost": cost})
        return {
            "brokers": sorted(self.brokers),
            "links": links,
            "sources": sources,
            "subscription": {"id": sid, "broker": home, "tree": _placement_tree(sub.tree)},
        }

    def _policy(self, sid: str) -> dict[tuple[str, str], set[str]]:
        """Links whose ``forbidden_events`` name this composite: ``sid`` (its detections),
        ``sid/<operator>`` (one operator's output) or ``sid#<leaf>`` (a leaf's component events)."""
        out: dict[tuple[str, str], set[str]] = {}
        for link in self.links.values():
            named = {e for e in link.get("forbidden", ()) if e == sid or e.startswith((f"{sid}/", f"{sid}#"))}
            if named and link["from"] in self.brokers and link["to"] in self.brokers:
                out[(link["from"], link["to"])] = named
        return out

    def _decide(self, sid: str, end_ms: int) -> dict[str, Any] | None:
        doc = self.instance(sid, end_ms)
        if isinstance(doc, str):
            self.counters["waiting"] += 1
            return None
        try:
            inst = _SharedDistances.from_json(doc)
            best = place(inst, self.config.method)
        except PlacementError:
            self.counters["waiting"] += 1
            return None
        record: dict[str, Any] = {
            "subscription_id": sid,
            "decided_at": int(end_ms),
            "method": best.method,
            "placement": dict(best.placement),
            "cost": float(best.cost),
            "baseline_placement": dict(best.baseline_placement),
            "baseline_cost": float(best.baseline_cost),
            "reasons": dict(best.reasons),
        }
        policy = self._policy(sid)
        micpice_inst: Instance | None = None
        if policy:
            micpice_inst = policy_instance(inst, sid, policy)
            planned = micpice_plan(micpice_inst)
            if not planned.feasible:
                self.counters["infeasible"] = self.counters.get("infeasible", 0) + 1
                self.notes = [
                    *self.notes[-99:],
                    f"{sid}: no policy-allowed placement: {'; '.join(planned.reasons[:2])}",
                ]
                return None
            where = micpice_placement(planned, inst)
            record.update(
                method=f"micpice-{planned.method}",
                placement=where,
                cost=float(planned.cost or 0.0),
                reasons={
                    n: f"policy constraints on {len(policy)} links; MICPICE ({planned.method}) generates it at {b}, "
                    f"delivery cost {planned.cost:.4g}/s (the traffic-cost optimum ignoring them: {best.cost:.4g}/s)"
                    for n, b in where.items()
                },
            )

        current = self.placed.get(sid)
        if current is not None:
            same_tree = set(current["placement"]) == set(record["placement"])
            try:
                if not same_tree:
                    now = math.inf
                elif micpice_inst is not None:
                    now = micpice_cost(micpice_inst, current["placement"])
                else:
                    now = traffic_cost(inst, current["placement"])
            except (KeyError, PlacementError):
                now = math.inf
            if math.isfinite(now):
                if record["cost"] > now * (1.0 - self.config.min_saving):
                    self.streaks[sid] = 0
                    self.counters["kept"] += 1
                    return None
                self.streaks[sid] = self.streaks.get(sid, 0) + 1
                if self.streaks[sid] < self.config.sustain:
                    return None
                record["reasons"] = {
                    **record["reasons"],
                    "moved": f"saves {now - record['cost']:.4g}/s of traffic against the current placement "
                    f"(cost {now:.4g}) for {self.streaks[sid]} checks in a row",
                }
            self.counters["moves"] += 1
        self.streaks[sid] = 0
        self.counters["placements"] += 1
        self.placed[sid] = record
        return record

    def advance(self, watermark_ms: float) -> tuple[Detections, list[dict[str, Any]]]:
        """Event time reached ``watermark_ms``: the detections it makes final (``detect``) and the
        placement records of every check period that ended (``place``)."""
        return self.detect(watermark_ms), self.place(watermark_ms)

    def detect(self, watermark_ms: float) -> Detections:
        """The detections that ``watermark_ms`` makes final: a sequence of ``DetectionRecord``,
        kept compact for writers (``routing.composite.detection.Detections``)."""
        if not math.isfinite(watermark_ms):
            return Detections()
        return self.detector.advance_rows(int(watermark_ms))

    def place(self, watermark_ms: float) -> list[dict[str, Any]]:
        """The placement records of every check period that ended by ``watermark_ms`` (module
        docstring)."""
        placements: list[dict[str, Any]] = []
        if not math.isfinite(watermark_ms) or self.first_ms is None:
            return placements
        period = self.config.check_period_ms
        if self.next_check_ms is None:
            self.next_check_ms = (math.floor(self.first_ms / period) + 1) * period
        while self.next_check_ms <= watermark_ms:
            for sid in sorted(self.table.subscriptions):
                record = self._decide(sid, self.next_check_ms)
                if record is not None:
                    placements.append(record)
            self.next_check_ms += period
        self._forget(watermark_ms)
        return placements

    # -- state ----------------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """The whole state: tables as JSON; the detector and the rolling windows as their own blobs."""
        meta = {
            "config": asdict(self.config),
            "subscriptions": [
                {"id": sid, "subscriber": sub.subscriber_id, "tree": to_json(sub.tree)}
                for sid, sub in self.table.subscriptions.items()
            ],
            "homes": self.homes,
            "brokers": list(self.brokers),
            "publishers": self.publishers,
            "links": self.links,
            "first_ms": self.first_ms,
            "next_check_ms": self.next_check_ms,
            "sources": {fid: sorted(b) for fid, b in self._sources.items()},
            "counts": {key: {str(b): n for b, n in ring.items()} for key, ring in self._counts.items()},
            "placed": self.placed,
            "streaks": self.streaks,
            "counters": self.counters,
        }
        return pack_documents(meta, detector=self.detector.to_bytes(), delays=self._delays.to_bytes())

    @classmethod
    def from_bytes(cls, data: bytes) -> CompositeMonitor:
        meta, blobs = unpack_documents(data)
        mon = cls(CompositeMonitorConfig(**meta["config"]))
        for entry in meta["subscriptions"]:
            rec = SubscriptionRecord(
                op="subscribe", subscription_id=entry["id"], composite=entry["tree"], subscriber_id=entry["subscriber"]
            )
            mon.apply_subscriptions([rec], [meta["homes"].get(entry["id"])])
        mon.detector = CompositeDetector.from_bytes(
            blobs["detector"], DetectorConfig(max_instances=mon.config.max_instances)
        )
        mon.brokers = dict.fromkeys(meta["brokers"])
        mon.publishers, mon.links = meta["publishers"], meta["links"]
        mon.first_ms, mon.next_check_ms = meta["first_ms"], meta["next_check_ms"]
        mon._sources = {fid: set(b) for fid, b in meta["sources"].items()}
        mon.placed, mon.streaks, mon.counters = meta["placed"], meta["streaks"], meta["counters"]
        mon._counts = {key: {int(b): n for b, n in ring.items()} for key, ring in meta["counts"].items()}
        mon._delays = RollingWindow.from_bytes(blobs["delays"], Moments)
        return mon


# --------------------------------------------------------------------------------------------
# Placement under policy constraints, by MICPICE (Chen et al. 2004)
# --------------------------------------------------------------------------------------------


def policy_instance(inst: PlacementInstance, sid: str, policy: Mapping[tuple[str, str], set[str]]) -> Instance:
    """The composite's detection and delivery as a MICPICE instance (docs/reference/distribution.md).

    Brokers and links as they are; each leaf's matches entering at broker b are a primitive
    event ``<leaf>@<b>`` published by a pseudo node ``src:<leaf>@<b>`` linked to b at cost 0;
    every operator n is a composite event ``<sid>/<n>`` whose components are its children's
    events (all of a leaf's sources), at its Definition 2 rate, generated at whatever node
    holds them all; the subscriber ``sub:<sid>``, linked from its broker at cost 0, wants the
    root. docs/reference/placement.md's cost sends every child's flow to its operator's broker whatever the
    operator, which is MICPICE's "all components" rule. Policy: a link naming ``sid`` forbids
    every operator's output on it, ``sid/<n>`` operator n's, ``sid#<leaf>`` that leaf's events.
    """
    nodes = [{"id": b, "role": "broker"} for b in inst.brokers]
    links = [{"from": u, "to": v, "cost": link.cost} for (u, v), link in inst.links.items()]
    events: list[dict[str, Any]] = []
    leaf_events: dict[str, list[str]] = {}
    for leaf, pairs in inst.sources.items():
        for broker, rate in pairs:
            if rate <= 0:
                continue
            eid, pub = f"{leaf}@{broker}", f"src:{leaf}@{broker}"
            nodes.append({"id": pub, "role": "publisher"})
            links.append({"from": pub, "to": broker, "cost": 0.0})
            events.append({"id": eid, "rate": rate, "publisher": pub})
            leaf_events.setdefault(leaf, []).append(eid)
    for n in reversed(inst.operators):  # children before parents
        comps: list[str] = []
        for child in n.children:
            comps += [f"{sid}/{child.id}"] if isinstance(child, Operator) else leaf_events.get(child.name, [])
        events.append({"id": f"{sid}/{n.id}", "rate": max(inst.rates[n.id], 1e-9), "components": sorted(set(comps))})
    subscriber = f"sub:{sid}"
    nodes.append({"id": subscriber, "role": "subscriber"})
    links.append({"from": inst.subscriber, "to": subscriber, "cost": 0.0})
    operator_ids = [f"{sid}/{n.id}" for n in inst.operators]
    forbidden = []
    for (u, v), named in policy.items():
        for e in events:
            eid = e["id"]
            leaf_name = eid.split("@", 1)[0] if "@" in eid else None
            if (eid in operator_ids and (sid in named or eid in named)) or (
                leaf_name is not None and f"{sid}#{leaf_name}" in named
            ):
                forbidden.append({"from": u, "to": v, "event": eid})
    root = f"{sid}/{inst.tree.id}"
    return Instance.from_json(
        {
            "nodes": nodes,
            "links": links,
            "events": events,
            "interests": [{"subscriber": subscriber, "event": root}],
            "forbidden": forbidden,
        }
    )


def micpice_plan(instance: Instance) -> Plan:
    """A proven optimum when the exact program is small enough, else the enhanced heuristic."""
    from routing.planning.exact import ExactTooLarge, plan_exact

    try:
        return plan_exact(instance, time_limit_s=5.0)
    except (ExactTooLarge, RuntimeError):
        return plan_enhanced(instance)


def micpice_placement(plan: Plan, inst: PlacementInstance) -> dict[str, str]:
    """Operator id -> the broker that generates it in ``plan`` (the first, when several do;
    a pseudo node's operator is placed at the broker it hangs on)."""
    out: dict[str, str] = {}
    for node, event in plan.generated:
        n = event.rsplit("/", 1)[1]
        broker = (
            node.split("@", 1)[1] if node.startswith("src:") else inst.subscriber if node.startswith("sub:") else node
        )
        out.setdefault(n, broker)
    return {n.id: out.get(n.id, inst.subscriber) for n in inst.operators}


def micpice_cost(instance: Instance, placement: Mapping[str, str]) -> float:
    """Cost of detecting each operator at its broker in ``placement`` under the policy: every
    component reaches its operator's broker and the root's output the subscriber by the cheapest
    policy-allowed paths (infinite when some has none)."""
    total = 0.0
    by_id = instance.events
    for eid, ev in by_id.items():
        if ev.primitive:
            continue
        n = eid.rsplit("/", 1)[1]
        at = placement.get(n)
        if at is None:
            return math.inf
        for comp in ev.components:
            src = by_id[comp].publisher if by_id[comp].primitive else placement.get(comp.rsplit("/", 1)[1])
            if src is None:
                return math.inf
            total += by_id[comp].lam * _policy_distance(instance, comp, src, at)
    root = next(e for _, e in instance.interests)
    subscriber = instance.interests[0][0]
    total += by_id[root].lam * _policy_distance(instance, root, placement[root.rsplit("/", 1)[1]], subscriber)
    return total


def _policy_distance(instance: Instance, event: str, source: str, target: str) -> float:
    """Cheapest policy-allowed path cost for ``event`` from ``source`` to ``target``."""
    import heapq

    best = {source: 0.0}
    heap = [(0.0, source)]
    while heap:
        d, u = heapq.heappop(heap)
        if u == target:
            return d
        if d > best.get(u, math.inf):
            continue
        for (a, b), c in instance.links.items():
            if a == u and instance.allowed(a, b, event) and d + c < best.get(b, math.inf):
                best[b] = d + c
                heapq.heappush(heap, (d + c, b))
    return math.inf
