"""The channels job's logic: keep the subscriptions' delivery channels low in waste as things change.

:class:`ChannelMonitor` is the step object of ``streaming/channels_job.py``. It keeps the live
atomic subscriptions, a recent sample of matched events, and the current assignment of every
subscription to one of K channels, and plans the assignment versions of
docs/reference/delivery.md §3 (``ChannelAssignment`` records with ``stage`` ``planned``;
docs/reference/topics.md §4.5). It is Tariq's cluster maintenance (§3.5) on a live sample: new
subscriptions join a channel at once by a cheap local rule, and the whole set is re-clustered
only when the event load drifted far enough to make it worth it.

Symbols (docs/reference/channels.md §2): the sample E is the last ``sample_events`` events of the
matches topic, oldest first; M(s) the sample's events that subscription s matched; S_c the
members of channel c and U_c = ∪_{s ∈ S_c} M(s) what c carries; deliveries D = Σ_c |S_c| |U_c|,
matches T = Σ_s |M(s)|, false positives FP = D − T and the **waste ratio** w = FP / D (0 when
D = 0), all computed by :func:`routing.channels.plan_metrics`.

What each input does
--------------------
- :meth:`ChannelMonitor.apply_subscriptions`: the matching job's rules
  (:func:`routing.matching.table.plan_change`): a subscribe adds (or replaces) an atomic
  subscription and remembers its subscriber; an unsubscribe, a tombstone or a composite of that
  id removes it (composites are not delivered by channels). Each new subscription is placed at
  once by the **join rule** (docs/reference/channels.md §4.1) on the channel unions U_c over the
  sample (:class:`routing.channels.ChannelUnions`), in id order within one call; a removed one is
  dropped.
- :meth:`ChannelMonitor.add_matches`: each ``Match`` record's event enters the sample with the
  live subscriptions it matched (ids of unknown subscriptions are counted and ignored; an event id
  already in the sample is a replayed duplicate and is skipped). The sample is a ring of
  ``sample_events`` columns over a bit matrix with one row per live subscription: a batch
  overwrites the oldest columns, nothing is rebuilt.

When a version is planned (:meth:`ChannelMonitor.step`, at most one per call)
-----------------------------------------------------------------------------
1. ``initial``: the first call with live subscriptions. With at least two subscriptions and a
   non-empty sample they are re-clustered (``recluster`` below, without the margin test);
   otherwise the join placements stand.
2. ``reclustered``: the current assignment's false positives as a share of flooding's on the
   same sample, r = FP / FP_flooding, exceed r₀, the share right after the last re-clustering,
   by more than ``drift`` (r > r₀ + drift: hysteresis), at least ``min_interval_ms`` passed since
   the last re-clustering attempt, and the candidate of :func:`routing.channels.recluster`
   (``method``, ψ = ``psi``, ``seed``, ``budget_ms``) has FP' <= (1 − ``margin``) · FP on the
   same sample. Not the waste ratio w itself: with many subscriptions per channel w stays close
   to 1 even when a re-clustering cuts the deliveries tenfold, while r goes from 1 to 0.1. A
   candidate that fails the margin is dropped (counted as ``rejected``; r₀ stays, so the next
   attempt waits ``min_interval_ms``). The candidate's
   channels are renumbered to keep as many subscriptions as possible on the channel they are on
   (an assignment problem over the K × K overlap, :func:`scipy.optimize.linear_sum_assignment`),
   so that a re-clustering moves few subscribers.
3. ``joined`` / ``left``: otherwise, when the membership changed since the last version
   (``left`` when subscriptions were only removed; ``joined`` when one was placed or a
   subscription's subscriber changed).

Every version lists all K channels (members and their subscribers sorted, deliveries and waste
ratio over the sample), the waste ratio w, the flooding ratio (one channel for everyone: N |∪_s
M(s)| − T over N |∪_s M(s)|), and ``previous_waste_ratio``: the version it replaces on the same
sample, with the subscriptions that version does not place on the lobby (channel 0), as the
delivery stage delivers them. The ratios are null while the sample is empty. ``created_at`` is
``now_ms``, the caller's clock (the job's largest input time), so a replayed batch plans
identical records. Versions are numbered 1, 2, ... with no gap.

Invariants: every live subscription has exactly one channel in 0..K−1; the sample holds at most
``sample_events`` events, each once; a version's ``waste_ratio`` is
``plan_metrics(hits, labels).waste_ratio`` of the sample at that step.

Examples
--------
>>> from routing.matching.table import SubscriptionRecord
>>> mon = ChannelMonitor(ChannelMonitorConfig(k=2, method="exact", min_interval_ms=0))
>>> mon.apply_subscriptions([SubscriptionRecord(op="subscribe", subscription_id=s, filter="x > 0",
...     subscriber_id="u-" + s) for s in ("a", "b", "c")])
>>> [(v["version"], v["reason"], v["waste_ratio"]) for v in mon.step(1_000)]
[(1, 'initial', None)]
>>> mon.add_matches(["e1", "e2", "e3"], [["a", "b"], ["a", "b"], ["c"]], [1_100, 1_200, 1_300])
>>> round(mon.waste_ratio() or 0.0, 3)
0.444
>>> v = mon.step(2_000)[0]
>>> v["reason"], v["waste_ratio"], round(v["previous_waste_ratio"], 3), [c["subscription_ids"] for c in v["channels"]]
('reclustered', 0.0, 0.444, [['a', 'b'], ['c']])
>>> ChannelMonitor.from_bytes(mon.to_bytes()).channel_of == mon.channel_of
True
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.optimize import linear_sum_assignment

from routing.channels import (
    DEFAULT_BUDGET_MS,
    LOBBY,
    RECLUSTER_METHODS,
    Assignment,
    ChannelUnions,
    Domain,
    recluster,
)
from routing.channels.planner import AutoTimes
from routing.matching.language import Filter, FilterError, parse_filter
from routing.matching.table import SubscriptionRecord, plan_change
from routing.stats.state import pack_documents, pack_state, unpack_documents, unpack_state

__all__ = ["JOB_METHOD", "ChannelMonitor", "ChannelMonitorConfig"]

JOB_METHOD = "auto"
"""The channels job's re-clustering method (``siftstream plan channels`` keeps ``spectral-ncut``, the
contract's default). Held-out ``auto`` with spectral-ncut always among its candidates chose
spectral-ncut at 100,000 Gryphon 0.88 subscriptions, K = 32, where judging on the sample alone
had chosen approx in the delivery run (docs/results/channels.md, docs/results/delivery.md)."""

BoolMatrix = npt.NDArray[np.bool_]
Labels = npt.NDArray[np.int64]

_LISTED = 5  # subscriptions named in a detail sentence before "and N more"


@dataclass(frozen=True)
class ChannelMonitorConfig:
    """Settings of the channels job (module docstring).

    Attributes
    ----------
    k : int
        K, the number of channels (each a topic ``siftstream.channel.v1.<c>``).
    psi : int
        ψ, the recent-event window of the similarity (docs/reference/channels.md §3).
    sample_events : int
        Matched events in the recent sample the waste is measured and re-clustered on.
    method : str
        Re-clustering method, one of ``routing.channels.RECLUSTER_METHODS``; default
        :data:`JOB_METHOD`, ``auto``: flooding, the baselines and ``spectral-ncut`` always, the
        others within ``budget_ms`` (skipping one that the fit times of the monitor's earlier
        re-clusterings predict to overrun it), each fitted on the sample's older events, and the fewest false
        positives on its newest quarter kept, so that a plan that fits the sample more than the
        stream is not preferred (docs/reference/channels.md §4,
        ``routing.channels.planner.select_auto``).
    drift : float
        Re-cluster only when the false positives, as a share of flooding's on the same sample,
        exceed their share right after the last re-clustering by more than this (absolute).
    margin : float
        ...and only when the candidate cuts the false positives on the sample by at least this
        fraction.
    min_interval_ms : int
        Least time between two re-clustering attempts (the caller's clock).
    budget_ms : float
        Time budget of ``auto``.
    seed : int
        Seed of the k-means in the clustering methods.
    domains : dict or None
        The attributes' finite domains, as in a channel instance (docs/reference/channels.md §1:
        ``{"price": {"min": 0, "max": 200}, "region": {"values": ["eu", "us"]}}``). With them the
        monitor keeps each subscription's filter and the structural methods ``ck`` and ``ov`` can
        re-cluster (and ``auto`` tries them); without them they cannot.
    """

    k: int = 32
    psi: int = 20
    sample_events: int = 2000
    method: str = JOB_METHOD
    drift: float = 0.05
    margin: float = 0.1
    min_interval_ms: int = 60_000
    budget_ms: float = DEFAULT_BUDGET_MS
    seed: int = 0
    domains: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.method not in RECLUSTER_METHODS:
            raise ValueError(f"method must be one of {', '.join(RECLUSTER_METHODS)} (got {self.method!r})")
        if self.method in ("ck", "ov") and not self.domains:
            raise ValueError(f"method {self.method} needs the attributes' domains (the filters alone give no volumes)")
        self.parsed_domains()  # a bad domain fails here, not at the first re-clustering
        for name in ("k", "psi", "sample_events"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {getattr(self, name)}")
        if not self.drift >= 0 or not 0 <= self.margin < 1:
            raise ValueError(f"need drift >= 0 and 0 <= margin < 1 (got {self.drift}, {self.margin})")
        if self.min_interval_ms < 0 or not self.budget_ms >= 0:
            raise ValueError("min_interval_ms and budget_ms must be >= 0")

    def parsed_domains(self) -> dict[str, Domain]:
        """``domains`` as :class:`routing.channels.Domain` objects (empty without domains)."""
        if self.domains is not None and not isinstance(self.domains, Mapping):
            raise ValueError("domains must be an object keyed by attribute")
        return {str(name): Domain.from_json(str(name), doc) for name, doc in (self.domains or {}).items()}


class ChannelMonitor:
    """The channels job's state and step functions (module docstring).

    Attributes
    ----------
    config : ChannelMonitorConfig
    version : int
        The last planned version (0 before the first).
    method : str
        The method of the last re-clustering, ``join`` before the first.
    counters : dict of str to int
        ``versions``, ``reclusters`` (adopted), ``rejected`` (candidates short of the margin),
        ``joined`` and ``left`` (subscriptions), ``duplicates`` (events already in the sample),
        ``unknown`` (matched subscription ids that are not live).
    decision : str
        What the last :meth:`step` decided, in words.
    last_waste_ratio : float or None
        w of the assignment the last :meth:`step` left (None while the sample is empty).
    """

    def __init__(self, config: ChannelMonitorConfig | None = None) -> None:
        self.config = config or ChannelMonitorConfig()
        self._domains: dict[str, Domain] = self.config.parsed_domains()
        size = self.config.sample_events
        self._subscribers: dict[str, str] = {}  # live subscription id -> subscriber id
        self._filters: dict[str, str] = {}  # live subscription id -> filter text (kept only with domains)
        self._parsed: dict[str, Filter | None] = {}  # filter text -> parsed (None: unparsable), a cache
        self._row: dict[str, int] = {}  # live subscription id -> its row of _hits
        self._free: list[int] = []
        self._hits: BoolMatrix = np.zeros((64, size), dtype=bool)  # rows x ring columns
        self._row_channel = np.full(64, -1, dtype=np.int64)  # the channel of each row's subscription, -1: free
        # per channel and ring column, its subscriptions that matched the column's event: the waste
        # ratio, the flooding ratio and the join rule's unions follow from it in O(K x sample)
        self._carried = np.zeros((self.config.k, size), dtype=np.int32)
        self._slot_ids: list[str | None] = [None] * size  # the event in each ring column
        self._slot_of: dict[str, int] = {}
        self._next = 0  # the ring column the next event overwrites
        self._filled = 0
        self._channel: dict[str, int] = {}  # live subscription id -> channel (placed at once)
        self._versioned: dict[str, int] = {}  # the channels of the last version
        self._versioned_subscribers: dict[str, str] = {}
        self.version = 0
        self.method = "join"  # the method of the last re-clustering
        self._base_ratio = 0.0  # r0: FP as a share of flooding's right after the last re-clustering
        self._last_attempt_ms: float | None = None
        # auto's fit time per candidate, from one re-clustering to the next (not checkpointed: after a
        # restart the first re-clustering runs without predictions)
        self._auto_times = AutoTimes()
        self.counters: dict[str, int] = {
            "versions": 0,
            "reclusters": 0,
            "rejected": 0,
            "joined": 0,
            "left": 0,
            "duplicates": 0,
            "unknown": 0,
        }
        self.decision = ""  # what the last step decided, in words
        self.last_waste_ratio: float | None = None  # w of the assignment the last step left

    # -- read methods ----------------------------------------------------------------------

    @property
    def channel_of(self) -> dict[str, int]:
        """Every live subscription's current channel (placements included that no version lists yet)."""
        return dict(self._channel)

    @property
    def subscribers(self) -> dict[str, str]:
        """Every live subscription's subscriber id."""
        return dict(self._subscribers)

    @property
    def sample_size(self) -> int:
        """Events in the recent sample."""
        return self._filled

    def assignment(self) -> Assignment:
        """The last planned version as an :class:`routing.channels.Assignment` (version 0, empty, before any)."""
        return Assignment(self.version, self.config.k, dict(self._versioned))

    def sample(self) -> tuple[tuple[str, ...], BoolMatrix]:
        """The live subscription ids (sorted) and their match matrix over the sample, oldest event first."""
        ids = tuple(sorted(self._subscribers))
        size = self.config.sample_events
        order = (np.arange(self._filled) + (self._next - self._filled)) % size
        rows = np.array([self._row[s] for s in ids], dtype=np.int64)
        return ids, self._hits[rows][:, order]

    def waste_ratio(self) -> float | None:
        """w of the current assignment over the sample (None while the sample is empty)."""
        return self._ratios()[0] if self._filled else None

    # -- inputs ------------------------------------------------------------------------------

    def apply_subscriptions(self, records: Sequence[SubscriptionRecord]) -> None:
        """Apply subscriptions-topic records in order, then place the new ones by the join rule."""
        new: list[str] = []
        for rec in records:
            change = plan_change(rec).change
            if change is None:
                continue
            sid, text = change
            if text is None:
                self._remove(sid)
                continue
            if sid not in self._subscribers:
                self._row[sid] = self._take_row()
                new.append(sid)
            self._subscribers[sid] = rec.subscriber_id or ""
            if self.config.domains:
                self._filters[sid] = text
        placing = sorted({s for s in new if s in self._subscribers and s not in self._channel})
        if placing:
            unions = self._unions()
            for sid in placing:
                row = self._row[sid]
                c = unions.place(self._hits[row])
                self._channel[sid] = c
                self._row_channel[row] = c
                self._carried[c] += self._hits[row]  # a new row is empty; kept exact all the same
            self.counters["joined"] += len(placing)

    def add_matches(
        self,
        event_ids: Sequence[str],
        subscription_id_lists: Sequence[Sequence[str]],
        published_at: Sequence[int],
    ) -> None:
        """Add matched events (oldest first) to the sample with the live subscriptions each matched.

        ``published_at`` is accepted for the caller's clock and not stored: the sample's order is
        the order of arrival.
        """
        del published_at
        size = self.config.sample_events
        fresh: list[int] = []  # first occurrences of events not in the sample, in batch order
        seen: set[str] = set()
        for i, eid in enumerate(event_ids):
            if eid in seen or eid in self._slot_of:
                self.counters["duplicates"] += 1
                continue
            seen.add(eid)
            fresh.append(i)
        kept = fresh[-size:]
        if not kept:
            return
        lists = [subscription_id_lists[i] for i in kept]
        counts = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        row_of = self._row.get
        rows = np.fromiter(map(row_of, itertools.chain.from_iterable(lists), itertools.repeat(-1)), np.int64)
        slots = (self._next + np.arange(len(kept))) % size
        cols = np.repeat(slots, counts)
        known = rows >= 0
        self.counters["unknown"] += int(len(rows) - known.sum())
        # an id named twice by one event is one match
        cell = np.sort(rows[known] * size + cols[known])
        cell = cell[np.concatenate(([True], cell[1:] != cell[:-1]))] if len(cell) else cell
        rows, cols = cell // size, cell % size
        for slot, i in zip(slots.tolist(), kept, strict=True):
            old = self._slot_ids[slot]
            if old is not None:
                del self._slot_of[old]
            self._slot_ids[slot] = event_ids[i]
            self._slot_of[event_ids[i]] = slot
        first, last = int(slots[0]), int(slots[-1])  # the ring's next len(kept) columns: one or two runs
        for run in (slice(first, last + 1),) if first <= last else (slice(first, size), slice(0, last + 1)):
            self._hits[:, run] = False
            self._carried[:, run] = 0
        self._hits[rows, cols] = True
        self._carried += (
            np.bincount(self._row_channel[rows] * size + cols, minlength=self._carried.size)
            .reshape(self._carried.shape)
            .astype(np.int32)
        )
        self._next = int((self._next + len(kept)) % size)
        self._filled = min(size, self._filled + len(kept))

    # -- the step ------------------------------------------------------------------------------

    def step(self, now_ms: float) -> list[dict[str, Any]]:
        """The planned versions due at ``now_ms`` (none or one; module docstring)."""
        if not math.isfinite(now_ms) or (self.version == 0 and not self._subscribers):
            self.decision = "waiting for subscriptions"
            return []
        cfg = self.config
        w, share = self._ratios() if self._filled else (None, 0.0)
        self.last_waste_ratio = w
        if self.version == 0:
            detail = ""
            if len(self._subscribers) >= 2 and self._filled:
                w_join = w
                ids, hits = self.sample()
                labels, used = self._recluster(ids, hits, self._labels(ids, self._channel), now_ms)
                w = _waste(hits, labels)
                self._base_ratio = _flooding_share(hits, labels)
                detail = (
                    f"{len(ids):,} subscriptions clustered by {used} over {self._filled:,} events (the join "
                    f"placements had waste ratio {w_join:.3f})"
                )
            else:
                detail = f"{len(self._subscribers):,} subscriptions placed by the join rule" + (
                    f" over {self._filled:,} events" if self._filled else " before any matched event"
                )
            self.decision = "initial"
            return [self._version("initial", detail, now_ms)]
        if w is not None and len(self._subscribers) >= 2 and share > self._base_ratio + cfg.drift:
            drifted = (
                f"false positives at {share:.1%} of flooding's (waste ratio {w:.3f}), more than {cfg.drift:.0%} "
                f"above the {self._base_ratio:.1%} after the last re-clustering"
            )
            if self._last_attempt_ms is not None and now_ms - self._last_attempt_ms < cfg.min_interval_ms:
                self.decision = f"{drifted}; waiting for the interval"
            else:
                base = self._base_ratio
                ids, hits = self.sample()
                labels = self._labels(ids, self._channel)
                candidate, used = self._recluster(ids, hits, labels, now_ms, adopt=False)
                w_new = _waste(hits, candidate)
                fp, fp_new = _false_positives(hits, labels), _false_positives(hits, candidate)
                if fp_new <= (1.0 - cfg.margin) * fp:
                    moved = int((candidate != labels).sum())
                    self._adopt(ids, candidate, used)
                    self._base_ratio = _flooding_share(hits, candidate)
                    cut = 1.0 - fp_new / fp
                    detail = (
                        f"false positives at {share:.1%} of flooding's, more than {cfg.drift:.0%} above the "
                        f"{base:.1%} after the last re-clustering; {used} over {self._filled:,} events cuts them "
                        f"by {cut:.0%} (margin {cfg.margin:.0%}), waste ratio {w:.3f} -> {w_new:.3f}; "
                        f"{moved:,} of {len(ids):,} subscriptions move"
                    )
                    self.counters["reclusters"] += 1
                    self.decision = f"reclustered {w:.3f} -> {w_new:.3f}"
                    return [self._version("reclustered", detail, now_ms)]
                self.counters["rejected"] += 1
                self.decision = (
                    f"{drifted}, but {used} gives {w_new:.3f}: fewer false positives by less than the "
                    f"{cfg.margin:.0%} margin; kept"
                )
        else:
            self.decision = "no drift" if w is not None else "no events yet"
        if self._channel != self._versioned or self._subscribers != self._versioned_subscribers:
            return [self._membership_version(now_ms)]
        return []

    # -- internals ---------------------------------------------------------------------------

    def _recluster(
        self, ids: tuple[str, ...], hits: BoolMatrix, labels: Labels, now_ms: float, adopt: bool = True
    ) -> tuple[Labels, str]:
        """A re-clustering of the sample, renumbered to keep subscriptions where they are."""
        cfg = self.config
        self._last_attempt_ms = now_ms
        found, used = recluster(
            hits,
            ids,
            cfg.k,
            cfg.method,
            cfg.psi,
            cfg.seed,
            cfg.budget_ms,
            self._filters_of(ids),
            self._domains,
            self._auto_times,
        )
        candidate = _align(found, labels, cfg.k)
        if adopt:
            self._adopt(ids, candidate, used)
        return candidate, used

    def _filters_of(self, ids: tuple[str, ...]) -> tuple[Filter, ...]:
        """The parsed filters of ``ids`` for ``ck`` and ``ov``; empty without domains or when one does
        not parse (those two methods are then not candidates)."""
        if not self.config.domains:
            return ()
        out = []
        for sid in ids:
            text = self._filters.get(sid, "")
            if text not in self._parsed:
                try:
                    self._parsed[text] = parse_filter(text)
                except (FilterError, ValueError):
                    self._parsed[text] = None
            filt = self._parsed[text]
            if filt is None:
                return ()
            out.append(filt)
        return tuple(out)

    def _adopt(self, ids: tuple[str, ...], labels: Labels, method: str) -> None:
        self._channel = {sid: int(c) for sid, c in zip(ids, labels.tolist(), strict=True)}
        self.method = method
        self._rebuild_carried()

    def _rebuild_carried(self) -> None:
        """``_row_channel`` and ``_carried`` from ``_channel`` and the sample, from scratch."""
        self._row_channel = np.full(len(self._hits), -1, dtype=np.int64)
        for sid, c in self._channel.items():
            self._row_channel[self._row[sid]] = c
        self._carried = np.zeros((self.config.k, self.config.sample_events), dtype=np.int32)
        rows, cols = np.nonzero(self._hits)
        placed = self._row_channel[rows] >= 0
        np.add.at(self._carried, (self._row_channel[rows[placed]], cols[placed]), 1)

    def _summary(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], int, int]:
        """Per channel its subscriptions |S_c| and deliveries |S_c| |U_c| over the sample, the
        matches T and flooding's false positives N |∪_s M(s)| − T: the numbers of
        :func:`routing.channels.plan_metrics` for the current assignment, from ``_carried``."""
        k = self.config.k
        placed = self._row_channel[self._row_channel >= 0]
        sizes = np.bincount(placed, minlength=k).astype(np.int64)
        deliveries = sizes * (self._carried > 0).sum(axis=1)
        matches = int(self._carried.sum())
        matched_events = int((self._carried.sum(axis=0) > 0).sum())
        return sizes, deliveries, matches, len(self._subscribers) * matched_events - matches

    def _waste_of(self, channel_of: Mapping[str, int]) -> float:
        """w of another assignment of the live subscriptions over the same sample."""
        row_channel = np.full(len(self._hits), -1, dtype=np.int64)
        for sid, c in channel_of.items():
            row_channel[self._row[sid]] = c
        sizes = np.bincount(row_channel[row_channel >= 0], minlength=self.config.k)
        rows, cols = np.nonzero(self._hits)
        carried = np.zeros((self.config.k, self.config.sample_events), dtype=bool)
        carried[row_channel[rows], cols] = True
        d = int((sizes * carried.sum(axis=1)).sum())
        return (d - len(rows)) / d if d else 0.0

    def _ratios(self) -> tuple[float, float]:
        """The waste ratio w = FP / D and FP as a share of flooding's, from :meth:`_summary`."""
        _, deliveries, matches, flooding_fp = self._summary()
        d = int(deliveries.sum())
        fp = d - matches
        return (fp / d if d else 0.0), (fp / flooding_fp if flooding_fp else 0.0)

    def _membership_version(self, now_ms: float) -> dict[str, Any]:
        joined = sorted(s for s in self._channel if s not in self._versioned)
        left = sorted(s for s in self._versioned if s not in self._channel)
        parts = []
        if joined:
            where = ", ".join(f"{s} on {self._channel[s]}" for s in joined[:_LISTED])
            more = f" and {len(joined) - _LISTED:,} more" if len(joined) > _LISTED else ""
            parts.append(f"{len(joined):,} joined by the join rule ({where}{more})")
        if left:
            names = ", ".join(left[:_LISTED]) + (f" and {len(left) - _LISTED:,} more" if len(left) > _LISTED else "")
            parts.append(f"{len(left):,} left ({names})")
        if not parts:
            parts.append("subscriber ids changed")
        reason = "left" if left and not joined else "joined"  # a changed subscriber re-joins
        self.counters["left"] += len(left)
        return self._version(reason, "; ".join(parts), now_ms)

    def _version(self, reason: str, detail: str, now_ms: float) -> dict[str, Any]:
        """The planned record of the current assignment as the next version."""
        cfg = self.config
        ids = tuple(sorted(self._subscribers))
        labels = self._labels(ids, self._channel)
        sampled = self._filled > 0
        sizes, deliveries, matches, flooding_fp = self._summary()
        waste = flooding = previous = None
        if sampled:
            d = int(deliveries.sum())
            waste = (d - matches) / d if d else 0.0
            flooding = flooding_fp / (flooding_fp + matches) if flooding_fp + matches else 0.0
            if self.version:
                prev = self.assignment()
                previous = self._waste_of({s: prev.channel(s) for s in ids})
        per_channel = {
            c: (int(deliveries[c]), int(deliveries[c]) - int(self._carried[c].sum()))
            for c in np.flatnonzero(sizes).tolist()
        }
        members: dict[int, list[str]] = {c: [] for c in range(cfg.k)}
        for sid, c in zip(ids, labels.tolist(), strict=True):
            members[c].append(sid)
        channels = []
        for c in range(cfg.k):
            d, fp = per_channel.get(c, (0, 0))
            subs = sorted({self._subscribers[s] for s in members[c]} - {""})
            channels.append(
                {
                    "channel": c,
                    "subscription_ids": members[c],
                    "subscriber_ids": subs,
                    "deliveries": d,
                    "waste_ratio": (fp / d if d else 0.0) if sampled else None,
                }
            )
        if waste is not None and reason != "reclustered":
            detail += f"; waste ratio {waste:.3f}"
            if previous is not None:
                detail += f" (was {previous:.3f})"
        if flooding is not None:
            detail += f"; flooding {flooding:.3f}"
        self.last_waste_ratio = waste
        self.version += 1
        self.counters["versions"] += 1
        self._versioned = dict(self._channel)
        self._versioned_subscribers = dict(self._subscribers)
        return {
            "version": self.version,
            "stage": "planned",
            "created_at": int(now_ms),
            "k": cfg.k,
            "reason": reason,
            "detail": detail,
            "method": self.method,
            "sample_events": self._filled,
            "waste_ratio": waste,
            "flooding_waste_ratio": flooding,
            "previous_waste_ratio": previous,
            "channels": channels,
            "handover": [],
        }

    def _labels(self, ids: Sequence[str], channel: Mapping[str, int]) -> Labels:
        return np.array([channel.get(s, LOBBY) for s in ids], dtype=np.int64)

    def _unions(self) -> ChannelUnions:
        """What each channel carries over the sample now (ring columns, in any order)."""
        unions = ChannelUnions(self.config.k, self.config.sample_events)
        sizes = self._summary()[0]
        for c in np.flatnonzero(sizes).tolist():
            unions.fill(c, self._carried[c] > 0, int(sizes[c]))
        return unions

    def _take_row(self) -> int:
        if self._free:
            return self._free.pop()
        row = len(self._row) + len(self._free)
        if row >= len(self._hits):
            grown = np.zeros((2 * len(self._hits), self.config.sample_events), dtype=bool)
            grown[: len(self._hits)] = self._hits
            self._hits = grown
            self._row_channel = np.concatenate([self._row_channel, np.full(len(grown) - row, -1, dtype=np.int64)])
        return row

    def _remove(self, sid: str) -> None:
        if sid not in self._subscribers:
            return
        del self._subscribers[sid]
        self._filters.pop(sid, None)
        self._channel.pop(sid, None)
        row = self._row.pop(sid)
        c = int(self._row_channel[row])
        if c >= 0:
            self._carried[c] -= self._hits[row]
        self._row_channel[row] = -1
        self._hits[row] = False
        self._free.append(row)

    # -- state ----------------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """The whole state: the tables as JSON lists by row (much faster to write than id-keyed
        objects at 100,000 subscriptions), the channels and the sample's bit matrix as blobs."""
        ids: list[str | None] = [None] * len(self._hits)
        for sid, row in self._row.items():
            ids[row] = sid
        versioned = sorted(self._versioned)
        meta = {
            "config": asdict(self.config),
            "ids": ids,
            "subscribers": [None if sid is None else self._subscribers[sid] for sid in ids],
            "filters": self._filters,
            "free": self._free,
            "slot_ids": self._slot_ids,
            "next": self._next,
            "filled": self._filled,
            "versioned": versioned,
            "versioned_channels": [self._versioned[s] for s in versioned],
            "versioned_subscribers": [self._versioned_subscribers.get(s) for s in versioned],
            "version": self.version,
            "method": self.method,
            "base_ratio": self._base_ratio,
            "last_attempt_ms": self._last_attempt_ms,
            "counters": self.counters,
            "decision": self.decision,
            "last_waste_ratio": self.last_waste_ratio,
        }
        channels = pack_state("ChannelRows", {"channel": self._row_channel})
        bits = pack_state(
            "ChannelSample", {"bits": np.packbits(self._hits, axis=1).ravel(), "rows": np.array([len(self._hits)])}
        )
        return pack_documents(meta, sample=bits, channels=channels)

    @classmethod
    def from_bytes(cls, data: bytes) -> ChannelMonitor:
        """The monitor that :meth:`to_bytes` saved."""
        meta, blobs = unpack_documents(data)
        mon = cls(ChannelMonitorConfig(**meta["config"]))
        state = unpack_state("ChannelSample", blobs["sample"])
        rows, size = int(state["rows"][0]), mon.config.sample_events
        packed = state["bits"].reshape(rows, -1)
        mon._hits = np.unpackbits(packed, axis=1, count=size).astype(bool)
        if "ids" in meta:
            ids, subscribers = meta["ids"], meta["subscribers"]
            row_channel = unpack_state("ChannelRows", blobs["channels"])["channel"].tolist()
            mon._row = {sid: row for row, sid in enumerate(ids) if sid is not None}
            mon._subscribers = {sid: subscribers[row] for sid, row in mon._row.items()}
            mon._channel = {sid: row_channel[row] for sid, row in mon._row.items() if row_channel[row] >= 0}
            versioned = meta["versioned"]
            mon._versioned = dict(zip(versioned, meta["versioned_channels"], strict=True))
            mon._versioned_subscribers = {
                s: sub for s, sub in zip(versioned, meta["versioned_subscribers"], strict=True) if sub is not None
            }
        else:  # the id-keyed tables that states saved before the lists
            mon._row, mon._subscribers, mon._channel = meta["row"], meta["subscribers"], meta["channel"]
            mon._versioned, mon._versioned_subscribers = meta["versioned"], meta["versioned_subscribers"]
        mon._free = meta["free"]
        mon._filters = meta.get("filters", {})
        mon._slot_ids = meta["slot_ids"]
        mon._slot_of = {eid: i for i, eid in enumerate(mon._slot_ids) if eid is not None}
        mon._next, mon._filled = meta["next"], meta["filled"]
        mon.version, mon.method = meta["version"], meta["method"]
        mon._base_ratio, mon._last_attempt_ms = meta["base_ratio"], meta["last_attempt_ms"]
        mon.counters, mon.decision = meta["counters"], meta["decision"]
        mon.last_waste_ratio = meta["last_waste_ratio"]
        mon._rebuild_carried()
        return mon


def _counts(hits: BoolMatrix, labels: Labels) -> tuple[int, int, int]:
    """Deliveries D, matches T and flooding's false positives N |∪_s M(s)| − T of ``labels`` over
    ``hits``: those numbers of :func:`routing.channels.plan_metrics` without the rest of its work
    (one pass over the matches, not one per channel).

    >>> hits = np.array([[1, 0, 0], [0, 1, 0], [0, 1, 0]], dtype=bool)
    >>> _counts(hits, np.array([0, 0, 1]))
    (5, 3, 3)
    """
    if not len(labels):
        return 0, 0, 0
    labels = np.asarray(labels, dtype=np.int64)
    rows, cols = np.nonzero(hits)
    carried = np.zeros((int(labels.max()) + 1, hits.shape[1]), dtype=bool)
    carried[labels[rows], cols] = True
    d = int((np.bincount(labels, minlength=len(carried)) * carried.sum(axis=1)).sum())
    t = len(rows)
    return d, t, len(labels) * int(carried.any(axis=0).sum()) - t


def _false_positives(hits: BoolMatrix, labels: Labels) -> int:
    """FP of ``labels`` over ``hits``."""
    d, t, _ = _counts(hits, labels)
    return d - t


def _flooding_share(hits: BoolMatrix, labels: Labels) -> float:
    """FP of ``labels`` as a share of flooding's FP on the same sample (0 when flooding has none).

    >>> hits = np.array([[1, 0], [0, 1]], dtype=bool)
    >>> _flooding_share(hits, np.array([0, 1])), _flooding_share(hits, np.array([0, 0]))
    (0.0, 1.0)
    """
    d, t, flooding_fp = _counts(hits, labels)
    return (d - t) / flooding_fp if flooding_fp else 0.0


def _waste(hits: BoolMatrix, labels: Labels) -> float:
    """w = FP / D of ``labels`` over ``hits`` (0 without subscriptions)."""
    d, t, _ = _counts(hits, labels)
    return (d - t) / d if d else 0.0


def _align(found: Labels, current: Labels, k: int) -> Labels:
    """``found`` renumbered so that the most subscriptions keep their ``current`` channel
    (maximum-weight matching of the K × K overlap counts)."""
    overlap = np.zeros((k, k), dtype=np.int64)
    np.add.at(overlap, (found, current), 1)
    rows, cols = linear_sum_assignment(overlap, maximize=True)
    mapping = np.empty(k, dtype=np.int64)
    mapping[rows] = cols
    return np.asarray(mapping[found], dtype=np.int64)
