"""The routes job's logic: keep a MICPICE distribution plan for the live overlay, re-plan on drift.

The routes job (``streaming/routes_job.py``) feeds a :class:`RoutePlanner` with the overlay's
shape (the compacted topology topic), the atomic subscriptions, the observed matches and the link
telemetry; every check period the planner builds the current MICPICE instance (Chen et al. 2004,
§2; :mod:`routing.planning.distribution`) and decides whether to re-plan.

From the stream to an instance
------------------------------
- **Nodes and links**: brokers, publishers and subscribers of the topology topic, its links with
  their ``cost`` (or, with ``link_cost="delay"``, the mean delay in ms measured over the rate
  window, the topology's cost while a link has no samples). A subscriber named only by its
  subscriptions gets a cost-0 link from the broker it subscribed at.
- **Events**: a primitive event per (publisher, filter) pair with matches in the rate window, id
  ``"<publisher>|<filter>"``, rate = its matches per second over the window (over the time since
  the first match while the job is younger than a window; Li & Jacobsen §4.1's data set size of an
  atomic subscription, measured rather than estimated). Subscriptions with
  the same filter text share the event, so a flow that serves several subscribers is sent once
  per link; overlapping but different filters are separate flows (the MICPICE model's events
  are disjoint), which over-counts the overlap's cost.
- **Interests**: subscriber s wants ``p|f`` when one of its subscriptions has filter f.
- **Policy**: a link's ``forbidden_events`` forbids every event whose id or publisher is listed.
- Composite subscriptions are left to the composite jobs and not planned here.

When to re-plan (hysteresis)
----------------------------
At every check (``check_period_ms``), the inputs are compared with those the current plan was
made from. The overlay or the subscriptions changing structurally (a node, a link, a
subscription, a flow appearing or vanishing) re-plans at once; an event rate or link cost moving
by more than ``drift`` (relative) re-plans only when it persists for ``sustain`` checks in a row.
The new plan replaces the current one only when the current one became invalid (checked by
:func:`routing.planning.check.check_plan`) or when the new one is cheaper by at least
``min_saving`` (relative) at the new rates; otherwise the current routes are kept and re-costed.
Every re-plan writes one ``RoutePlan`` record (version + 1) with the old cost (the current plan at
the new inputs), the new cost and the reasons.

>>> planner = RoutePlanner(PlannerConfig(check_period_ms=1000, rate_window_ms=10_000))
>>> planner.apply_topology([("b1", {"kind": "broker"}), ("p1", {"kind": "publisher", "broker": "b1"}),
...     ("p1->b1", {"kind": "link", "from": "p1", "to": "b1", "cost": 1.0})])
>>> planner.apply_subscriptions([("s1-a", "s1", "b1", "price < 10")])
>>> planner.add_matches(["p1"] * 20, [500.0 * i for i in range(20)], [["s1-a"]] * 20)
>>> [(r["version"], r["cost"], r["reasons"][0]) for r in planner.advance(10_000)]
[(1, 2.0, 'first plan')]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from routing.common.arrays import distinct_sorted
from routing.matching.language import FilterError, parse_filter
from routing.planning.check import check_plan
from routing.planning.distribution import METHODS, plan
from routing.planning.heuristics import ORDERS
from routing.planning.model import Instance, InstanceError, Plan
from routing.reliability.estimation import add_link_delays
from routing.stats.moments import Moments
from routing.stats.state import pack_documents, pack_state, unpack_documents, unpack_state
from routing.stats.windows import RollingWindow

__all__ = ["PlannerConfig", "RoutePlanner"]

CATCH_UP_PERIODS = 60
"""Check periods of history kept beyond the rate window: a backlog up to this long (e.g. after a
restart) is checked period by period as if it had arrived live; older periods are skipped."""


@dataclass(frozen=True)
class PlannerConfig:
    """Settings of the routes job.

    Attributes
    ----------
    plan_id : str
        Key of the plan's records on ``siftstream.routes.v1``.
    method : str
        ``greedy``, ``enhanced`` or ``exact`` (:func:`routing.planning.distribution.plan`).
    order : str
        Subscriber order of the enhanced heuristic.
    check_period_ms : int
        How often the inputs are compared with the plan's (event time).
    rate_window_ms : int
        Rates and link delays are averaged over this window (a multiple of ``check_period_ms``).
    drift : float
        Relative change of a rate or link cost that counts as drift.
    sustain : int
        Checks in a row a drift must last before it re-plans.
    min_saving : float
        A new plan replaces a still-valid current plan only when cheaper by this fraction.
    min_rate_per_s : float
        Flows slower than this are left out of the instance.
    link_cost : str
        ``topology`` (the links' configured cost) or ``delay`` (measured mean delay, ms).
    """

    plan_id: str = "overlay"
    method: str = "enhanced"
    order: str = "min-cost"
    check_period_ms: int = 10_000
    rate_window_ms: int = 60_000
    drift: float = 0.25
    sustain: int = 2
    min_saving: float = 0.05
    min_rate_per_s: float = 0.0
    link_cost: str = "topology"

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)} (got {self.method!r})")
        if self.order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)} (got {self.order!r})")
        if self.link_cost not in ("topology", "delay"):
            raise ValueError(f"link_cost must be topology or delay (got {self.link_cost!r})")
        if self.check_period_ms <= 0 or self.rate_window_ms % self.check_period_ms:
            raise ValueError(
                f"rate_window_ms ({self.rate_window_ms}) must be a positive multiple of "
                f"check_period_ms ({self.check_period_ms})"
            )
        if self.drift <= 0 or self.sustain < 1 or not 0 <= self.min_saving < 1:
            raise ValueError("need drift > 0, sustain >= 1 and 0 <= min_saving < 1")


@dataclass(frozen=True)
class Inputs:
    """What a plan was made from: the structure (nodes, links, flows, interests) and the
    numbers that may drift (event rates, link costs)."""

    instance: Instance
    rates: Mapping[str, float]
    costs: Mapping[str, float]

    @property
    def structure(self) -> tuple[Any, ...]:
        inst = self.instance
        return (
            tuple(sorted(inst.roles.items())),
            tuple(sorted(inst.links)),
            tuple(sorted(inst.events)),
            tuple(sorted(inst.interests)),
            tuple(sorted(inst.forbidden)),
        )


def _drifted(old: Mapping[str, float], new: Mapping[str, float], drift: float, what: str) -> list[str]:
    out = []
    for key, value in new.items():
        before = old.get(key)
        if before is None:
            continue
        base = max(abs(before), 1e-9)
        if abs(value - before) / base > drift:
            out.append(f"{what} {key} moved {100 * (value - before) / base:+.0f}% ({before:.4g} -> {value:.4g})")
    return out


def _structure_changes(old: Inputs, new: Inputs) -> list[str]:
    out = []
    names = ("nodes", "links", "event flows", "interests", "policy constraints")
    for name, a, b in zip(names, old.structure, new.structure, strict=True):
        if a != b:
            added, removed = len(set(b) - set(a)), len(set(a) - set(b))
            out.append(f"{name} changed (+{added} / -{removed})")
    return out


class RoutePlanner:
    """The routes job's state and step functions (module docstring).

    Mutators return nothing; :meth:`advance` returns the ``RoutePlan`` records to write.
    """

    def __init__(self, config: PlannerConfig | None = None) -> None:
        self.config = config or PlannerConfig()
        self.nodes: dict[str, dict[str, Any]] = {}
        self.links: dict[str, dict[str, Any]] = {}
        self.subscriptions: dict[str, dict[str, str]] = {}
        cfg = self.config
        buckets = cfg.rate_window_ms // cfg.check_period_ms
        # kept beyond the window so that a backlog read in one batch is still checked period by period
        retain = buckets + CATCH_UP_PERIODS
        self._rates: RollingWindow[Moments] = RollingWindow(
            Moments, bucket_ms=cfg.check_period_ms, buckets=buckets, retain=retain
        )
        self._delays: RollingWindow[Moments] = RollingWindow(
            Moments, bucket_ms=cfg.check_period_ms, buckets=buckets, retain=retain
        )
        self.next_check_ms: int | None = None
        self.first_ms: float | None = None  # the earliest match seen: rates are per observed time
        self.current: Plan | None = None
        self.current_inputs: Inputs | None = None
        self.version = 0
        self.drift_streak = 0
        self.counters: dict[str, int] = {"replans": 0, "kept": 0, "switched": 0, "unknown_subscriptions": 0}
        self.notes: list[str] = []
        self._codes: tuple[dict[str, int], list[str]] | None = None  # see _filter_codes

    # -- inputs ----------------------------------------------------------------------------

    def apply_topology(self, records: Sequence[tuple[str, Mapping[str, Any] | None]]) -> None:
        """Apply topology records ``(element id, record or None for a tombstone)`` in order."""
        for key, rec in records:
            self.nodes.pop(key, None)
            self.links.pop(key, None)
            if rec is None:
                continue
            kind = rec.get("kind")
            if kind in ("broker", "publisher", "subscriber"):
                self.nodes[key] = {"role": kind, "broker": rec.get("broker")}
            elif kind == "link" and rec.get("from") and rec.get("to"):
                cost = rec.get("cost")
                self.links[key] = {
                    "from": str(rec["from"]),
                    "to": str(rec["to"]),
                    "cost": 1.0 if cost is None or not math.isfinite(float(cost)) else float(cost),
                    "forbidden": sorted(str(e) for e in rec.get("forbidden_events") or ()),
                }

    def apply_subscriptions(self, changes: Sequence[tuple[str, str | None, str | None, str | None]]) -> None:
        """Apply ``(subscription id, subscriber id, broker, filter text or None to remove)`` in order.

        Invalid filters are the matching job's to dead-letter; here they just remove the id.
        """
        self._codes = None
        for sid, subscriber, broker, text in changes:
            self.subscriptions.pop(sid, None)
            if text is None:
                continue
            try:
                canonical = str(parse_filter(text))
            except FilterError:
                continue
            self.subscriptions[sid] = {"subscriber": subscriber or sid, "broker": broker or "", "filter": canonical}

    def add_matches(
        self, publishers: Sequence[str], published_at: Sequence[float], subscription_ids: Sequence[Sequence[str]]
    ) -> None:
        """Count matched events per (publisher, filter): one count per event and distinct filter.

        ``subscription_ids``: one list per match (the ``Match`` records' field); numbered here and
        handed to :meth:`add_match_columns`.
        """
        numbers: dict[str, int] = {}
        index = np.fromiter(
            (numbers.setdefault(sid, len(numbers)) for sids in subscription_ids for sid in sids), dtype=np.int64
        )
        lengths = np.fromiter((len(s) for s in subscription_ids), dtype=np.int64, count=len(subscription_ids))
        self.add_match_columns(publishers, published_at, lengths, list(numbers), index)

    def add_match_columns(
        self,
        publishers: Sequence[str],
        published_at: Sequence[float] | np.ndarray,
        lengths: np.ndarray,
        ids: Sequence[str],
        index: np.ndarray,
    ) -> None:
        """:meth:`add_matches` with the subscription ids as columns: match ``i`` names
        ``lengths[i]`` subscriptions, ``ids[index[j]]`` for its ``j``s in ``index`` (the matches'
        lists end to end; ``ids`` each distinct id once, e.g. an Arrow dictionary encoding).

        Columnar: every (event, filter) pair at once (numpy), then one window update per flow and
        bucket (:meth:`RollingWindow.add_groups`); the subscription -> filter numbering is kept
        until the subscriptions change.

        >>> p = RoutePlanner()
        >>> p.apply_subscriptions([("s1", "u1", "b1", "x = 1"), ("s2", "u2", "b1", "x = 1")])
        >>> p.add_match_columns(["p1", "p1"], [1000.0, 1500.0], np.array([2, 1]), ["s2", "s1"], np.array([0, 1, 0]))
        >>> p._rates.query("p1|x = 1", 2000.0).count
        2
        """
        n = len(lengths)
        if n == 0:
            return
        codes, filters = self._filter_codes()
        id_code = np.fromiter((codes.get(sid, -1) for sid in ids), dtype=np.int64, count=len(ids))
        flat = id_code[np.asarray(index, dtype=np.int64)] if len(index) else np.zeros(0, dtype=np.int64)
        event = np.repeat(np.arange(n, dtype=np.int64), np.asarray(lengths, dtype=np.int64))
        known = flat >= 0
        self.counters["unknown_subscriptions"] += int(np.count_nonzero(~known))
        if not known.any():
            return
        width = len(filters)
        pairs = distinct_sorted(event[known] * width + flat[known])  # distinct (event, filter)
        event, flow_filter = pairs // width, pairs % width
        pub_names, pub_code = np.unique(np.asarray([str(p) for p in publishers]), return_inverse=True)
        flow, row_flow = np.unique(pub_code.reshape(-1)[event] * width + flow_filter, return_inverse=True)
        names = [f"{pub_names[k // width]}|{filters[k % width]}" for k in flow.tolist()]
        times = np.asarray(published_at, dtype=np.float64)[event]
        self._rates.add_groups(names, row_flow, times, np.ones(len(times)))
        first = float(times.min())
        self.first_ms = first if self.first_ms is None else min(self.first_ms, first)

    def _filter_codes(self) -> tuple[dict[str, int], list[str]]:
        """Each subscription's filter as a number, and the filters by number (kept until
        :meth:`apply_subscriptions` changes the subscriptions)."""
        if self._codes is None:
            numbers: dict[str, int] = {}
            codes = {sid: numbers.setdefault(sub["filter"], len(numbers)) for sid, sub in self.subscriptions.items()}
            self._codes = (codes, list(numbers))
        return self._codes

    def add_link_samples(
        self, src: Sequence[str], dst: Sequence[str], sent_at: Sequence[float], delay_ms: Sequence[float]
    ) -> None:
        """Link telemetry: delays of delivered transmissions (NaN for lost ones, skipped)."""
        add_link_delays(self._delays, src, dst, sent_at, delay_ms)

    # -- the instance -------------------------------------------------------------------------

    def inputs(self, end_ms: float) -> Inputs:
        """The MICPICE instance of the window ending at ``end_ms`` (module docstring)."""
        start, stop = self._rates.span(end_ms)
        if self.first_ms is not None:  # a young job has seen less than a whole window
            start = max(start, math.floor(self.first_ms / self.config.check_period_ms) * self.config.check_period_ms)
        window_s = max(stop - start, self.config.check_period_ms) / 1000.0
        roles = {nid: n["role"] for nid, n in self.nodes.items()}
        for sub in self.subscriptions.values():
            if sub["subscriber"] not in roles and sub["broker"] in roles:
                roles[sub["subscriber"]] = "subscriber"
        links: dict[str, dict[str, Any]] = {}
        costs: dict[str, float] = {}
        for key, link in self.links.items():
            if link["from"] in roles and link["to"] in roles:
                links[key] = link
                cost = link["cost"]
                if self.config.link_cost == "delay":
                    measured = self._delays.query(key, end_ms)
                    if measured is not None and measured.count:
                        cost = max(float(measured.mean), 0.0)
                costs[key] = cost
        pairs = {(k["from"], k["to"]) for k in links.values()}
        for sub in self.subscriptions.values():
            edge = (sub["broker"], sub["subscriber"])
            if sub["broker"] in roles and roles.get(sub["subscriber"]) == "subscriber" and edge not in pairs:
                key = f"{edge[0]}->{edge[1]}"
                links[key] = {"from": edge[0], "to": edge[1], "cost": 0.0, "forbidden": []}
                costs[key] = 0.0
                pairs.add(edge)
        rates: dict[str, float] = {}
        for key in self._rates.keys():  # noqa: SIM118 (a RollingWindow, not a dict)
            if roles.get(key.split("|", 1)[0]) != "publisher":
                continue
            # the window's count: the buckets' counts summed (what their merge would count)
            rate = sum(item.count for _b, item in self._rates.items(key, end_ms)) / window_s
            if rate > self.config.min_rate_per_s and rate > 0:
                rates[key] = rate
        by_filter: dict[str, list[str]] = {}
        for key in rates:
            by_filter.setdefault(key.split("|", 1)[1], []).append(key)
        interests = sorted(
            {
                (sub["subscriber"], key)
                for sub in self.subscriptions.values()
                if roles.get(sub["subscriber"]) == "subscriber"
                for key in by_filter.get(sub["filter"], ())
            }
        )
        used = {key for _, key in interests}
        rates = {k: v for k, v in rates.items() if k in used}
        forbidden = [
            {"from": link["from"], "to": link["to"], "event": key}
            for lk, link in links.items()
            if link["forbidden"]
            for key in rates
            if key in link["forbidden"] or key.split("|", 1)[0] in link["forbidden"]
        ]
        doc = {
            "nodes": [{"id": n, "role": r} for n, r in sorted(roles.items())],
            "links": [{"from": link["from"], "to": link["to"], "cost": costs[k]} for k, link in sorted(links.items())],
            "events": [{"id": k, "rate": r, "publisher": k.split("|", 1)[0]} for k, r in sorted(rates.items())],
            "interests": [{"subscriber": s, "event": e} for s, e in interests],
            "forbidden": forbidden,
        }
        return Inputs(Instance.from_json(doc), rates, costs)

    # -- re-planning ----------------------------------------------------------------------------

    def advance(self, watermark_ms: float) -> list[dict[str, Any]]:
        """Event time reached ``watermark_ms``: run every check period that ended since the last
        call (from the first period after the first match; a backlog longer than
        :data:`CATCH_UP_PERIODS` is checked from its last periods only) and return the
        ``RoutePlan`` records of the re-plans (module docstring, "When to re-plan")."""
        period = self.config.check_period_ms
        if not math.isfinite(watermark_ms) or self.first_ms is None:
            return []
        if self.next_check_ms is None:
            self.next_check_ms = (math.floor(self.first_ms / period) + 1) * period
        oldest = (math.floor(watermark_ms / period) - CATCH_UP_PERIODS + 1) * period
        if self.next_check_ms < oldest:
            skipped = (oldest - self.next_check_ms) // period
            self.notes.append(f"skipped {skipped} check periods older than the kept history")
            self.next_check_ms = oldest
        out: list[dict[str, Any]] = []
        while self.next_check_ms <= watermark_ms:
            record = self._check(self.next_check_ms)
            if record is not None:
                out.append(record)
            self.next_check_ms += period
        # the buckets before the window of the last check done: no later check reads them, nor
        # inputs() of that last check (retain bounds them too, later)
        floor = self.next_check_ms // period - 1 - self.config.rate_window_ms // period
        self._rates.drop_before(floor)
        self._delays.drop_before(floor)
        return out

    def _check(self, end_ms: int) -> dict[str, Any] | None:
        try:
            new = self.inputs(end_ms)
        except InstanceError as exc:  # guarded above; a bug here must not stop the job
            self.notes.append(f"{end_ms}: could not build the instance: {exc}")
            return None
        if not new.instance.events and self.current is None:
            return None
        old = self.current_inputs
        if old is None:
            reasons = ["first plan"]
        else:
            reasons = _structure_changes(old, new)
            if not reasons:
                drift = _drifted(old.rates, new.rates, self.config.drift, "rate of")
                drift += _drifted(old.costs, new.costs, self.config.drift, "cost of link")
                self.drift_streak = self.drift_streak + 1 if drift else 0
                if self.drift_streak < self.config.sustain:
                    return None
                reasons = drift[:5] + ([f"... and {len(drift) - 5} more"] if len(drift) > 5 else [])
        self.drift_streak = 0
        return self._replan(end_ms, new, reasons)

    def _replan(self, end_ms: int, new: Inputs, reasons: list[str]) -> dict[str, Any]:
        cfg = self.config
        fresh = plan(new.instance, cfg.method, cfg.order)
        previous_cost: float | None = None
        chosen = fresh
        if self.current is not None and self.current.feasible:
            still = check_plan(new.instance, _recosted(self.current, new.instance))
            if still.ok:
                previous_cost = still.cost
                if fresh.feasible and fresh.cost is not None and previous_cost is not None:
                    saving = 1.0 - fresh.cost / previous_cost if previous_cost > 0 else 0.0
                    if saving < cfg.min_saving:
                        chosen = _recosted(self.current, new.instance)
                        reasons = [*reasons, f"kept the current routes: the new plan would save {100 * saving:.1f}%"]
                        self.counters["kept"] += 1
            else:
                reasons = [*reasons, "the current routes no longer serve every interest"]
        if chosen is fresh and self.current is not None:
            self.counters["switched"] += 1
        if not chosen.feasible:
            reasons = [*reasons, *chosen.reasons]
        self.counters["replans"] += 1
        self.version += 1
        self.current, self.current_inputs = chosen, new
        return {
            "plan_id": cfg.plan_id,
            "version": self.version,
            "planned_at": int(end_ms),
            "method": cfg.method,
            "feasible": chosen.feasible,
            "cost": chosen.cost,
            "transmissions": [{"from": u, "to": v, "event": e} for u, v, e in chosen.transmissions],
            "generated": [{"node": n, "event": e} for n, e in chosen.generated],
            "previous_cost": previous_cost,
            "reasons": reasons,
        }

    # -- state ----------------------------------------------------------------------------------

    def _meta(self) -> dict[str, Any]:
        """The state besides the rolling windows, as JSON."""
        return {
            "config": asdict(self.config),
            "nodes": self.nodes,
            "links": self.links,
            "subscriptions": self.subscriptions,
            "next_check_ms": self.next_check_ms,
            "first_ms": self.first_ms,
            "current": None if self.current is None else {**self.current.to_json(), "method": self.current.method},
            "current_inputs": None
            if self.current_inputs is None
            else {
                "instance": self.current_inputs.instance.to_json(),
                "rates": self.current_inputs.rates,
                "costs": self.current_inputs.costs,
            },
            "version": self.version,
            "drift_streak": self.drift_streak,
            "counters": self.counters,
        }

    def _load_meta(self, meta: Mapping[str, Any]) -> None:
        self.nodes, self.links, self.subscriptions = meta["nodes"], meta["links"], meta["subscriptions"]
        self.next_check_ms, self.first_ms = meta["next_check_ms"], meta["first_ms"]
        self.current = None if meta["current"] is None else Plan.from_json(meta["current"])
        self.current_inputs = None
        if meta["current_inputs"] is not None:
            ci = meta["current_inputs"]
            self.current_inputs = Inputs(Instance.from_json(ci["instance"]), ci["rates"], ci["costs"])
        self.version, self.drift_streak = meta["version"], meta["drift_streak"]
        self.counters = meta["counters"]
        self._codes = None

    def to_bytes(self) -> bytes:
        """The whole state (JSON for the tables and the plan, the rolling windows' own blobs)."""
        return pack_documents(self._meta(), rates=self._rates.to_bytes(), delays=self._delays.to_bytes())

    @classmethod
    def from_bytes(cls, data: bytes) -> RoutePlanner:
        meta, blobs = unpack_documents(data)
        planner = cls(PlannerConfig(**meta["config"]))
        planner._load_meta(meta)
        planner._rates = RollingWindow.from_bytes(blobs["rates"], Moments)
        planner._delays = RollingWindow.from_bytes(blobs["delays"], Moments)
        return planner

    def changes_to_bytes(self) -> bytes:
        """The state that changed since :meth:`mark_saved` (or since this planner was made or
        restored): the JSON tables and plan whole, of the rolling windows only the buckets that
        took values (:meth:`RollingWindow.changes_state`). :meth:`apply_changes` on the planner as
        it was at the mark gives this one: saving the changes after every batch is O(batch), where
        :meth:`to_bytes` is O(window).

        >>> p = RoutePlanner(PlannerConfig(check_period_ms=1000, rate_window_ms=2000))
        >>> p.apply_subscriptions([("s1", "u1", "b1", "x = 1")])
        >>> p.add_matches(["p1"] * 3, [100.0, 1100.0, 2100.0], [["s1"]] * 3)
        >>> saved = p.to_bytes()
        >>> p.mark_saved()
        >>> p.add_matches(["p1"] * 2, [3100.0, 3200.0], [["s1"]] * 2)
        >>> _ = p.advance(4000.0)
        >>> restored = RoutePlanner.from_bytes(saved)
        >>> restored.apply_changes(p.changes_to_bytes())
        >>> restored.to_bytes() == p.to_bytes()
        True
        """
        rates = pack_state("RollingWindowChanges", self._rates.changes_state())
        delays = pack_state("RollingWindowChanges", self._delays.changes_state())
        return pack_documents(self._meta(), rates=rates, delays=delays)

    def mark_saved(self) -> None:
        """The state was saved: :meth:`changes_to_bytes` counts from here."""
        self._rates.mark_saved()
        self._delays.mark_saved()

    def apply_changes(self, data: bytes) -> None:
        """Bring this planner up to date with :meth:`changes_to_bytes` of a planner that was equal to
        it at its mark."""
        meta, blobs = unpack_documents(data)
        self._load_meta(meta)
        self._rates.apply_changes(unpack_state("RollingWindowChanges", blobs["rates"]))
        self._delays.apply_changes(unpack_state("RollingWindowChanges", blobs["delays"]))


def _recosted(current: Plan, instance: Instance) -> Plan:
    """``current``'s routes with their cost at ``instance``'s rates and link costs (transmissions
    of events or links the instance no longer has are dropped; the checker judges the rest)."""
    keep = tuple(t for t in current.transmissions if (t[0], t[1]) in instance.links and t[2] in instance.events)
    gens = tuple(g for g in current.generated if g[1] in instance.events)
    return Plan(True, current.method, instance.cost_of(keep), keep, gens)
