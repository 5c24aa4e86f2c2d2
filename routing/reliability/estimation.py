"""Online estimation of the QoS model's inputs from telemetry (docs/reference/reliability-model.md §6).

The reliability predictor (docs/reference/qos-predict.md) needs, per broker, its service-time distribution; per link,
its delay distribution and reliability r_l; per publisher, its inter-publication process. In
production these come from telemetry, not from a hand-written system document. This module turns
the telemetry column tables (``LinkSample``, ``BrokerSample``, ``Receipt``, ``Event`` and ``Match``
records, or the simulator's :class:`routing.reliability.simulator.Telemetry`) into rolling-window
estimates, and measures each subscriber's R_s from receipts, the number the prediction is compared
with.

:class:`TelemetryEstimator` ingests the column batches, resolves events at their deadlines and
answers per publisher (:class:`PublisherEstimate`), broker (:class:`BrokerEstimate`), link
(:class:`LinkEstimate`, its loss a :class:`LinkLossEstimate`) and subscriber
(:class:`SubscriberEstimate`); :meth:`TelemetryEstimator.to_system` writes the estimates into a
docs/reference/qos-predict.md system document for the predictor (:class:`EstimatedSystem`). It is built from the
mergeable summaries of :mod:`routing.stats`, held in :class:`routing.stats.windows.RollingWindow`
buckets: :class:`~routing.stats.moments.Moments` for means and burstiness,
:class:`~routing.stats.delay_sketch.DelaySketch` for delay distributions,
:class:`~routing.stats.sequence_log.SequenceLog` for link loss and
:class:`~routing.stats.moments.Tally` for R_s. Its state serialises like theirs
(:mod:`routing.stats.state`), so that Spark streaming state can hold it.

Windows and time
----------------
All times are milliseconds (since the Unix epoch in production; the simulator's are relative to
its counting window). Windows are those of :mod:`routing.stats.windows`: ``buckets`` buckets of
``bucket_ms`` ending at ``end_ms``. Each quantity is bucketed by one time: publications by
``published_at``, broker samples by ``arrived_at``, link samples by ``sent_at``, a subscriber's
outcomes and receipt delays by the event's *deadline* (``published_at + lifetime_ms``), the time
at which its outcome is known.

Examples
--------
>>> est = TelemetryEstimator(EstimationConfig(bucket_ms=1000, buckets=10))
>>> est.add_publications(["p1"] * 3, ["e1", "e2", "e3"], [100.0, 200.0, 300.0], [50.0, 50.0, 50.0])
>>> est.add_matches(["e1", "e2", "e3"], [["s1"], ["s1"], ["s1"]])
>>> est.add_receipts(["s1", "s1"], ["e1", "e2"], [120.0, 290.0])  # e2 is late, e3 never arrives
>>> est.advance(1000.0)
>>> s1 = est.subscriber("s1", 1000.0)
>>> s1.on_time, s1.matching, s1.reliability
(1, 3, 0.3333333333333333)
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence, Sized
from copy import deepcopy
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from routing.common.arrays import distinct_sorted
from routing.stats.delay_sketch import DelaySketch
from routing.stats.intervals import batch_means_interval, wilson_interval
from routing.stats.moments import Moments, Tally
from routing.stats.sequence_log import SequenceLog
from routing.stats.state import State, child_state, nest_state, pack_state, string_array, unpack_state
from routing.stats.windows import RollingWindow, WindowItem

__all__ = [
    "BrokerEstimate",
    "EstimatedSystem",
    "EstimationConfig",
    "LinkEstimate",
    "LinkLossEstimate",
    "MatchedSubscribers",
    "PublisherEstimate",
    "SubscriberEstimate",
    "TelemetryEstimator",
    "add_link_delays",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]
T = TypeVar("T", bound=WindowItem)


def _floats(values: ArrayLike) -> FloatArray:
    return np.asarray(values, dtype=np.float64).reshape(-1)


def _check_lengths(method: str, **columns: Sized) -> int:
    lengths = {name: len(col) for name, col in columns.items()}
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"{name} {n}" for name, n in lengths.items())
        raise ValueError(f"{method}: the columns must have one length (got {shown})")
    return next(iter(lengths.values()), 0)


def _non_negative(method: str, name: str, values: FloatArray) -> None:
    bad = ~np.isfinite(values) | (values < 0.0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{method}: {name}[{i}] must be finite and >= 0 ms (got {float(values[i])!r})")


# --------------------------------------------------------------------------------------------
# Estimates
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EstimationConfig:
    """Parameters of a :class:`TelemetryEstimator`, built once at the edge (docs/conventions.md §4).

    Attributes
    ----------
    bucket_ms, buckets : int
        Window = ``buckets`` buckets of ``bucket_ms`` (default 30 x 10 s).
    grace_ms : float
        A link's sequence numbers count towards loss only once their bucket ended at least this
        long before the window end, since messages are reordered (docs/reference/reliability-model.md §6.5); the loss
        window is thus the window minus ceil(grace_ms / bucket_ms) buckets.
    relative_accuracy : float
        alpha of every :class:`DelaySketch`.
    late_ms : float
        How long an event is kept after its deadline to collect the delays of late receipts. Its
        outcome (on time or not) is fixed at the deadline; its receipt delays enter the subscriber's
        delay sketch when it is dropped, ``late_ms`` after the deadline, so the delays of a window
        are complete once the watermark is ``late_ms`` past its end (the windows keep that many
        more buckets). A receipt that comes later still is ignored (counted as an orphan).
    level : float
        Confidence level of the intervals (docs/reference/qos-predict.md: 0.90).
    min_samples : int
        :meth:`TelemetryEstimator.to_system` keeps the skeleton's value for an element with fewer
        samples in the window.
    max_points : int
        Largest empirical distribution written by ``to_system``.
    min_batches : int
        Fewest non-empty window buckets for a batch-means interval on R_s.
    """

    bucket_ms: int = 10_000
    buckets: int = 30
    grace_ms: float = 5_000.0
    relative_accuracy: float = 0.005
    late_ms: float = 0.0
    level: float = 0.90
    min_samples: int = 30
    max_points: int = 200
    min_batches: int = 10

    def __post_init__(self) -> None:
        problems = []
        if self.bucket_ms <= 0 or self.buckets <= 0:
            problems.append(f"bucket_ms and buckets must be > 0 (got {self.bucket_ms}, {self.buckets})")
        if self.grace_ms < 0 or self.late_ms < 0:
            problems.append(f"grace_ms and late_ms must be >= 0 (got {self.grace_ms}, {self.late_ms})")
        if not 0.0 < self.relative_accuracy < 1.0:
            problems.append(f"relative_accuracy must be in (0, 1) (got {self.relative_accuracy})")
        if not 0.0 < self.level < 1.0:
            problems.append(f"level must be in (0, 1) (got {self.level})")
        if self.min_samples < 1 or self.max_points < 2 or self.min_batches < 2:
            problems.append(
                f"need min_samples >= 1, max_points >= 2, min_batches >= 2 "
                f"(got {self.min_samples}, {self.max_points}, {self.min_batches})"
            )
        if problems:
            raise ValueError("EstimationConfig: " + "; ".join(problems))

    @property
    def window_ms(self) -> int:
        return self.bucket_ms * self.buckets


@dataclass(frozen=True)
class PublisherEstimate:
    """A publisher over a window.

    Attributes
    ----------
    events : int
        Publications in the window.
    window_s : float
        Observed length of the window (it starts no earlier than the first publication seen).
    rate_per_s : float
        lambda_p = events / window_s.
    mean_interarrival_ms, interarrival_scv : float
        Mean and c_a^2 of the gaps between consecutive publications ending in the window.
    gaps : int
    mean_lifetime_ms : float
    """

    events: int
    window_s: float
    rate_per_s: float
    mean_interarrival_ms: float
    interarrival_scv: float
    gaps: int
    mean_lifetime_ms: float


@dataclass(frozen=True)
class BrokerEstimate:
    """A broker over a window (events that arrived in it).

    Attributes
    ----------
    arrivals : int
    window_s : float
    arrival_rate_per_s : float
        lambda_b.
    arrival_scv : float
        c_a^2 of the inter-arrival gaps.
    mean_service_ms, service_scv, service_third_moment : float
        E[S], c_s^2 and E[S^3].
    utilisation : float
        Sum of the service times / window: the busy fraction, a cross-check of rho = lambda E[S].
    mean_wait_ms : float
        Measured E[W] (time in queue).
    service, wait : DelaySketch
        Service and wait distributions (the wait sketch serves the measured-input prediction).
    """

    arrivals: int
    window_s: float
    arrival_rate_per_s: float
    arrival_scv: float
    mean_service_ms: float
    service_scv: float
    service_third_moment: float
    utilisation: float
    mean_wait_ms: float
    service: DelaySketch
    wait: DelaySketch


@dataclass(frozen=True)
class LinkLossEstimate:
    """A link's reliability r_l from the sequence numbers received (docs/reference/reliability-model.md §6.5, §6.7).

    Attributes
    ----------
    received, expected : int
        Distinct sequence numbers seen, and last - first + 1, over the settled part of the window.
    reliability : float
        r_l = received / expected (NaN when expected is 0).
    reliability_low, reliability_high : float
        Wilson score interval at ``level`` (0 and 1 when expected is 0). It assumes independent
        losses; bursty (Gilbert-Elliott) loss makes it too narrow.
    level : float
    """

    received: int
    expected: int
    reliability: float
    reliability_low: float
    reliability_high: float
    level: float

    @classmethod
    def from_log(cls, log: SequenceLog | None, level: float = 0.90) -> LinkLossEstimate:
        """The estimate from a (merged) :class:`SequenceLog`.

        Examples
        --------
        >>> log = SequenceLog()
        >>> log.add(np.delete(np.arange(100), [10, 20]))
        >>> est = LinkLossEstimate.from_log(log)
        >>> est.received, est.expected, est.reliability, round(est.reliability_low, 3)
        (98, 100, 0.98, 0.941)
        """
        k = log.received if log is not None else 0
        n = log.expected if log is not None else 0
        low, high = wilson_interval(k, n, level, exact_ends=True)
        return cls(k, n, k / n if n else math.nan, low, high, level)


@dataclass(frozen=True)
class LinkEstimate:
    """A link over a window (messages sent in it).

    Attributes
    ----------
    delivered : int
        Delay samples (messages received).
    mean_delay_ms : float
    delay : DelaySketch or None
    loss : LinkLossEstimate
        Over the settled buckets (``EstimationConfig.grace_ms``).
    """

    delivered: int
    mean_delay_ms: float
    delay: DelaySketch | None
    loss: LinkLossEstimate


@dataclass(frozen=True)
class SubscriberEstimate:
    """A subscriber's measured R_s over the events whose deadline falls in the window.

    Attributes
    ----------
    on_time, matching : int
        Matching events with a receipt no later than their deadline, and all matching events.
    reliability : float
        R_s = on_time / matching (NaN when no matching event was resolved).
    reliability_low, reliability_high : float
        Wilson interval at the configured level.
    batch_low, batch_high : float
        Batch-means interval, the window buckets as batches (docs/reference/reliability-model.md §6.7: events share
        queues, so outcomes are correlated and the Wilson interval is too narrow); NaN with fewer
        than ``min_batches`` non-empty buckets.
    receipts : int
        Receipts with a delay (first per event).
    p50_delay_ms, p95_delay_ms : float
        Measured delay quantiles of those receipts, late ones included (NaN when none).
    """

    on_time: int
    matching: int
    reliability: float
    reliability_low: float
    reliability_high: float
    batch_low: float
    batch_high: float
    receipts: int
    p50_delay_ms: float
    p95_delay_ms: float


@dataclass(frozen=True)
class EstimatedSystem:
    """The result of :meth:`TelemetryEstimator.to_system`.

    Attributes
    ----------
    system : dict
        A copy of the skeleton with the estimated DISTs and reliabilities.
    no_data : tuple of str
        One line per value kept from the skeleton, saying why (``"broker b3 service_ms: 4 samples
        < 30"``).
    """

    system: dict[str, Any]
    no_data: tuple[str, ...]


# --------------------------------------------------------------------------------------------
# TelemetryEstimator
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MatchedSubscribers:
    """The subscribers of a batch of events as columns: event ``i`` has ``lengths[i]``
    subscribers, ``names[index[j]]`` for its ``j``s in ``index`` (the events' lists end to end;
    ``names`` may hold names no event has)."""

    lengths: NDArray[np.int64]
    names: Sequence[str]
    index: NDArray[np.int64]

    @classmethod
    def of_lists(cls, subscriber_ids: Sequence[Sequence[str]]) -> MatchedSubscribers:
        """From one list of subscriber ids per event.

        >>> m = MatchedSubscribers.of_lists([["b", "a"], [], ["a"]])
        >>> m.lengths.tolist(), list(m.names), m.index.tolist()
        ([2, 0, 1], ['b', 'a'], [0, 1, 1])
        """
        numbers: dict[str, int] = {}
        index = np.fromiter(
            (numbers.setdefault(str(sid), len(numbers)) for group in subscriber_ids for sid in group), dtype=np.int64
        )
        lengths = np.fromiter((len(s) for s in subscriber_ids), dtype=np.int64, count=len(subscriber_ids))
        return cls(lengths, list(numbers), index)

    def lists(self) -> list[list[str]]:
        """One list of subscriber ids per event (:meth:`of_lists` back).

        >>> MatchedSubscribers.of_lists([["b", "a"], [], ["a"]]).lists()
        [['b', 'a'], [], ['a']]
        """
        names = [self.names[k] for k in self.index.tolist()]
        bounds = np.concatenate(([0], np.cumsum(self.lengths))).tolist()
        return [names[bounds[i] : bounds[i + 1]] for i in range(len(self.lengths))]


Match = Callable[[Any], "Sequence[Sequence[str]] | MatchedSubscribers"]
"""``match(attributes of the events) -> their subscribers`` (e.g. over a ``MatchIndex``): one id
list per event, or the same as :class:`MatchedSubscribers`. The attributes are what
:meth:`TelemetryEstimator.add_publications` was given (one mapping per event, or any sized
batch the function reads, such as a ``routing.matching.EventBatch``)."""

_WINDOWS: dict[str, str] = {  # window attribute (without the leading _) -> item kind
    "pub_lifetime": "moments",  # by published_at: lifetimes (their count gives the rate)
    "pub_gaps": "moments",  # by published_at of the later event: inter-publication gaps
    "broker_service": "moments",  # by arrived_at, and so on for every broker window
    "broker_wait": "moments",
    "broker_gaps": "moments",
    "broker_service_sketch": "sketch",
    "broker_wait_sketch": "sketch",
    "link_delay": "moments",  # by sent_at, and so on for every link window
    "link_delay_sketch": "sketch",
    "link_seq": "seq",
    "sub_outcome": "tally",  # by deadline, both subscriber windows
    "sub_delay_sketch": "sketch",
}
_STREAMS = ("publications", "brokers", "links")
_COUNTERS = ("orphans_dropped", "unmatched_receipts")


def _groups(keys: NDArray[Any]) -> Iterator[tuple[Any, IntArray]]:
    """(key, row indices) per distinct key, keys sorted, rows in their original order."""
    if len(keys) == 0:
        return
    uniq, inverse = np.unique(keys, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    cuts = np.cumsum(np.bincount(inverse, minlength=len(uniq)))[:-1]
    yield from zip(uniq.tolist(), np.split(order, cuts), strict=True)


def _ids(values: Sequence[str] | NDArray[Any]) -> NDArray[np.str_]:
    arr = np.asarray(values)
    if arr.size == 0:
        return np.empty(0, dtype="<U1")
    return arr.astype(np.str_).reshape(-1)


def _times(method: str, name: str, values: ArrayLike) -> FloatArray:
    t = _floats(values)
    if not np.isfinite(t).all():
        i = int(np.flatnonzero(~np.isfinite(t))[0])
        raise ValueError(f"{method}: {name}[{i}] must be a finite time in ms (got {float(t[i])!r})")
    return t


class TelemetryEstimator:
    """Rolling-window estimates of the docs/reference/qos-predict.md model's inputs, and measured R_s, from telemetry.

    Ingest column batches with the ``add_*`` methods (each column one array, one row per record;
    any order within and across batches), call :meth:`advance` as the watermark moves (it resolves
    events whose deadline has passed and rotates the windows), then query :meth:`publisher`,
    :meth:`broker`, :meth:`link`, :meth:`subscriber` or :meth:`to_system` for a window ending at some
    time. Memory is bounded by the window (the sketches and moments per bucket and key, a link's
    sequence numbers as runs) plus the events not yet resolved.

    Measured R_s (docs/reference/reliability-model.md §6.7; the paper's §2.2): an event counts for subscriber s once its
    deadline ``published_at + lifetime_ms`` is at or before the watermark passed to :meth:`advance`;
    it is on time when s has a receipt for it no later than the deadline, and a miss otherwise (also
    when no receipt ever comes). The denominator is the matching events, from :meth:`add_matches`
    (the matching job's records) or from ``match`` applied to the publications' attributes.
    :meth:`advance` must only be called with a watermark up to which receipts are complete, since a
    receipt arriving after its event was resolved cannot change the outcome. Duplicate
    publications, matches and receipts (at-least-once delivery) count once.

    Parameters
    ----------
    config : EstimationConfig, optional
    match : callable, optional
        ``match(attributes_per_event) -> subscriber ids per event``, used by
        :meth:`add_publications` when it gets ``attributes``.
    """

    def __init__(self, config: EstimationConfig | None = None, *, match: Match | None = None) -> None:
        self._config = config or EstimationConfig()
        self._match = match
        self._pub_lifetime = self._window(Moments)
        self._pub_gaps = self._window(Moments)
        self._broker_service = self._window(Moments)
        self._broker_wait = self._window(Moments)
        self._broker_gaps = self._window(Moments)
        self._broker_service_sketch = self._window(self._new_sketch)
        self._broker_wait_sketch = self._window(self._new_sketch)
        self._link_delay = self._window(Moments)
        self._link_delay_sketch = self._window(self._new_sketch)
        self._link_seq = self._window(SequenceLog)
        self._sub_outcome = self._window(Tally)
        self._sub_delay_sketch = self._window(self._new_sketch)
        self._last: dict[str, dict[str, float]] = {"publications": {}, "brokers": {}}  # per key, last time seen
        self._origin: dict[str, float] = {}  # per stream, the first time seen
        self._clock = math.nan  # largest time seen in any input
        self._watermark = -math.inf  # largest time passed to advance()
        self._counters = dict.fromkeys(_COUNTERS, 0)
        # the events held, one slot each
        self._slot: dict[str, int] = {}
        self._ev_id: list[str] = []
        self._ev_published: FloatArray = np.empty(0)
        self._ev_deadline: FloatArray = np.empty(0)
        self._ev_seen: FloatArray = np.empty(0)
        self._ev_resolved: BoolArray = np.empty(0, dtype=np.bool_)
        # subscriber ids, coded
        self._sub_code: dict[str, int] = {}
        self._sub_id: list[str] = []
        # (slot, subscriber) pairs of the matches, and of the receipts with their times
        self._m_slot: IntArray = np.empty(0, dtype=np.int64)
        self._m_sub: IntArray = np.empty(0, dtype=np.int64)
        self._r_slot: IntArray = np.empty(0, dtype=np.int64)
        self._r_sub: IntArray = np.empty(0, dtype=np.int64)
        self._r_at: FloatArray = np.empty(0)

    def _new_sketch(self) -> DelaySketch:
        return DelaySketch(self._config.relative_accuracy)

    def _window(self, factory: Callable[[], T]) -> RollingWindow[T]:
        c = self._config
        extra = math.ceil(c.late_ms / c.bucket_ms)  # so that a window ending late_ms ago is whole
        return RollingWindow(factory, bucket_ms=c.bucket_ms, buckets=c.buckets, retain=c.buckets + extra)

    def _factory(self, kind: str) -> Callable[[], Any]:
        factories: dict[str, Callable[[], Any]] = {
            "moments": Moments,
            "sketch": self._new_sketch,
            "seq": SequenceLog,
            "tally": Tally,
        }
        return factories[kind]

    def _windows(self) -> dict[str, RollingWindow[Any]]:
        return {name: getattr(self, f"_{name}") for name in _WINDOWS}

    @property
    def config(self) -> EstimationConfig:
        return self._config

    @property
    def watermark_ms(self) -> float:
        """The largest time passed to :meth:`advance` (-inf before the first call)."""
        return self._watermark

    @property
    def pending_events(self) -> int:
        """Events held: not yet resolved, or resolved but kept ``late_ms`` for late receipts."""
        return len(self._ev_id)

    @property
    def counters(self) -> dict[str, int]:
        """Diagnostics: ``orphans_dropped`` (events with receipts or matches but no publication
        after a whole window, as for a receipt later than ``late_ms``), ``unmatched_receipts``
        (receipts of a resolved event from a subscriber it did not match), ``late_dropped`` (values
        for a window bucket already dropped)."""
        late = sum(w.late_dropped for w in self._windows().values())
        return {**self._counters, "late_dropped": late}

    # -- ingestion -----------------------------------------------------------------------

    def _see(self, stream: str | None, times: FloatArray) -> None:
        if times.size:
            if stream is not None:
                self._origin[stream] = min(self._origin.get(stream, math.inf), float(times.min()))
            self._clock = float(np.fmax(self._clock, times.max()))

    def _gaps(self, stream: str, key: str, t: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Gaps between consecutive times of ``key`` (across batches; times before the last one
        seen are skipped) and the later time of each gap."""
        t = np.sort(t)
        last = self._last[stream].get(key)
        if last is not None:
            t = np.concatenate(([last], t[t >= last]))
        self._last[stream][key] = float(t[-1])
        return np.diff(t), t[1:]

    def add_publications(
        self,
        publisher_id: Sequence[str] | NDArray[Any],
        event_id: Sequence[str] | NDArray[Any],
        published_at_ms: ArrayLike,
        lifetime_ms: ArrayLike,
        attributes: Sequence[Mapping[str, object]] | Sized | None = None,
    ) -> None:
        """Add published events (SiftStream ``Event`` records as columns).

        ``attributes`` (one mapping per event, or a batch the ``match`` function reads) is used
        only when the estimator has a ``match``: the matching subscribers are then recorded as by
        :meth:`add_matches`.
        """
        pubs, ids = _ids(publisher_id), _ids(event_id)
        at = _times("add_publications", "published_at_ms", published_at_ms)
        life = _floats(lifetime_ms)
        n = _check_lengths("add_publications", publisher_id=pubs, event_id=ids, published_at_ms=at, lifetime_ms=life)
        _non_negative("add_publications", "lifetime_ms", life)
        if attributes is not None and len(attributes) != n:
            raise ValueError(f"add_publications: {len(attributes)} attribute mappings for {n} events")
        if n == 0:
            return
        self._see("publications", at)
        slots = self._slots_for(ids, at)
        first = np.zeros(n, dtype=np.bool_)
        first[np.unique(slots, return_index=True)[1]] = True
        rows = np.flatnonzero(first & np.isnan(self._ev_published[slots]))  # duplicates count once
        self._ev_published[slots[rows]] = at[rows]
        self._ev_deadline[slots[rows]] = at[rows] + life[rows]
        for pid, mine in _groups(pubs[rows]):
            r = rows[mine]
            self._pub_lifetime.add(str(pid), at[r], life[r])
            gaps, when = self._gaps("publications", str(pid), at[r])
            self._pub_gaps.add(str(pid), when, gaps)
        if attributes is not None and self._match is not None:
            self.add_matches(ids, self._match(attributes))

    def add_matches(
        self,
        event_id: Sequence[str] | NDArray[Any],
        subscriber_ids: Sequence[Sequence[str]] | MatchedSubscribers,
    ) -> None:
        """Add the subscribers each event matches (SiftStream ``Match`` records: one id list per
        event, or the lists as :class:`MatchedSubscribers`). New subscribers are numbered in the
        order they first appear in the lists, end to end."""
        ids = _ids(event_id)
        if isinstance(subscriber_ids, MatchedSubscribers):
            matched = subscriber_ids
        else:
            matched = MatchedSubscribers.of_lists(subscriber_ids)
        _check_lengths("add_matches", event_id=ids, subscriber_ids=matched.lengths)
        if ids.size == 0:
            return
        slots = self._slots_for(ids, np.full(len(ids), self._clock))
        index = np.asarray(matched.index, dtype=np.int64)
        used, first = np.unique(index, return_index=True)  # each name used, where it first appears
        by_first = used[np.argsort(first, kind="stable")]
        code_of = np.zeros(len(matched.names), dtype=np.int64)
        code_of[by_first] = self._sub_codes([str(matched.names[k]) for k in by_first.tolist()])
        self._m_slot = np.concatenate((self._m_slot, np.repeat(slots, matched.lengths)))
        self._m_sub = np.concatenate((self._m_sub, code_of[index]))

    def add_receipts(
        self,
        subscriber_id: Sequence[str] | NDArray[Any],
        event_id: Sequence[str] | NDArray[Any],
        received_at_ms: ArrayLike,
    ) -> None:
        """Add receipts (SiftStream ``Receipt`` records as columns); late ones and duplicates are fine."""
        subs, ids = _ids(subscriber_id), _ids(event_id)
        at = _times("add_receipts", "received_at_ms", received_at_ms)
        n = _check_lengths("add_receipts", subscriber_id=subs, event_id=ids, received_at_ms=at)
        if n == 0:
            return
        self._see(None, at)
        self._r_slot = np.concatenate((self._r_slot, self._slots_for(ids, at)))
        self._r_sub = np.concatenate((self._r_sub, self._sub_codes(subs.tolist())))
        self._r_at = np.concatenate((self._r_at, at))

    def add_link_samples(
        self,
        from_id: Sequence[str] | NDArray[Any],
        to_id: Sequence[str] | NDArray[Any],
        seq: ArrayLike,
        sent_at_ms: ArrayLike,
        delay_ms: ArrayLike,
        lost: ArrayLike | None = None,
    ) -> None:
        """Add link samples (SiftStream ``LinkSample`` records as columns).

        A row with ``lost`` true or a NaN delay is a message the receiver did not get: it adds
        nothing, since loss shows as a gap in the sequence numbers received. Receiver-side
        telemetry, without such rows, gives the same estimates.
        """
        src, dst = _ids(from_id), _ids(to_id)
        seqs = np.asarray(seq, dtype=np.int64).reshape(-1)
        sent = _times("add_link_samples", "sent_at_ms", sent_at_ms)
        delay = _floats(delay_ms)
        gone = np.zeros(len(sent), dtype=np.bool_) if lost is None else np.asarray(lost, dtype=np.bool_).reshape(-1)
        n = _check_lengths(
            "add_link_samples", from_id=src, to_id=dst, seq=seqs, sent_at_ms=sent, delay_ms=delay, lost=gone
        )
        if n == 0:
            return
        got = ~gone & ~np.isnan(delay)
        _non_negative("add_link_samples", "delay_ms", np.where(got, delay, 0.0))
        self._see("links", sent)
        keys = np.char.add(np.char.add(src, "->"), dst)
        for key, rows in _groups(keys):
            r = rows[got[rows]]
            self._link_seq.add(str(key), sent[r], seqs[r])
            self._link_delay.add(str(key), sent[r], delay[r])
            self._link_delay_sketch.add(str(key), sent[r], delay[r])

    def add_broker_samples(
        self,
        broker_id: Sequence[str] | NDArray[Any],
        arrived_at_ms: ArrayLike,
        wait_ms: ArrayLike,
        service_ms: ArrayLike,
    ) -> None:
        """Add broker samples (SiftStream ``BrokerSample`` records as columns)."""
        brokers = _ids(broker_id)
        at = _times("add_broker_samples", "arrived_at_ms", arrived_at_ms)
        wait, service = _floats(wait_ms), _floats(service_ms)
        n = _check_lengths("add_broker_samples", broker_id=brokers, arrived_at_ms=at, wait_ms=wait, service_ms=service)
        if n == 0:
            return
        _non_negative("add_broker_samples", "wait_ms", wait)
        _non_negative("add_broker_samples", "service_ms", service)
        self._see("brokers", at)
        for bid, rows in _groups(brokers):
            key, t = str(bid), at[rows]
            self._broker_service.add(key, t, service[rows])
            self._broker_service_sketch.add(key, t, service[rows])
            self._broker_wait.add(key, t, wait[rows])
            self._broker_wait_sketch.add(key, t, wait[rows])
            gaps, when = self._gaps("brokers", key, t)
            self._broker_gaps.add(key, when, gaps)

    # -- the events held -----------------------------------------------------------------

    def _sub_codes(self, ids: Sequence[str]) -> IntArray:
        codes = np.empty(len(ids), dtype=np.int64)
        table = self._sub_code
        for i, sid in enumerate(ids):
            code = table.get(sid)
            if code is None:
                code = table[sid] = len(self._sub_id)
                self._sub_id.append(sid)
            codes[i] = code
        return codes

    def _slots_for(self, ids: NDArray[np.str_], seen_ms: FloatArray) -> IntArray:
        """The slot of each event id, new slots for new ids (first seen at ``seen_ms``, NaN: unknown)."""
        slots = np.empty(len(ids), dtype=np.int64)
        table = self._slot
        start = len(self._ev_id)
        new_seen: list[float] = []
        for i, eid in enumerate(ids.tolist()):
            slot = table.get(eid)
            if slot is None:
                slot = table[eid] = len(self._ev_id)
                self._ev_id.append(eid)
                new_seen.append(float(seen_ms[i]))
            slots[i] = slot
        added = len(self._ev_id) - start
        if added:
            self._ev_published = np.concatenate((self._ev_published, np.full(added, math.nan)))
            self._ev_deadline = np.concatenate((self._ev_deadline, np.full(added, math.nan)))
            self._ev_seen = np.concatenate((self._ev_seen, np.array(new_seen)))
            self._ev_resolved = np.concatenate((self._ev_resolved, np.zeros(added, dtype=np.bool_)))
        return slots

    def _first_receipts(self, slot_mask: BoolArray) -> tuple[IntArray, IntArray, FloatArray]:
        """(slot, subscriber, first receipt time) per pair, sorted by pair, over the masked slots."""
        keep = slot_mask[self._r_slot]
        slot, sub, at = self._r_slot[keep], self._r_sub[keep], self._r_at[keep]
        order = np.lexsort((at, sub, slot))
        slot, sub, at = slot[order], sub[order], at[order]
        first = np.ones(len(slot), dtype=np.bool_)
        first[1:] = (slot[1:] != slot[:-1]) | (sub[1:] != sub[:-1])
        return slot[first], sub[first], at[first]

    def advance(self, now_ms: float) -> None:
        """The watermark reached ``now_ms``: resolve the events whose deadline is at or before it,
        drop what is no longer needed and rotate the windows.

        An event's outcome for each subscriber it matches goes into that subscriber's window at the
        deadline; ``late_ms`` after the deadline its first receipt per subscriber gives a delay
        sample (publication to receipt, late ones included) and the event is dropped. Events seen
        only through receipts or matches are dropped after a whole window without publication.
        """
        if not math.isfinite(now_ms):
            raise ValueError(f"advance: now_ms must be finite (got {now_ms})")
        self._watermark = now = max(self._watermark, now_ms)
        for window in self._windows().values():
            window.advance(now)
        if not self._ev_id:
            return
        self._ev_seen = np.where(np.isnan(self._ev_seen), now, self._ev_seen)
        n_subs = max(len(self._sub_id), 1)
        deadline = self._ev_deadline
        due = ~self._ev_resolved & (deadline <= now)  # NaN (no publication yet) compares false
        if due.any():
            m = due[self._m_slot]
            pair = distinct_sorted(self._m_slot[m] * n_subs + self._m_sub[m])
            slot, sub = pair // n_subs, pair % n_subs
            r_slot, r_sub, r_at = self._first_receipts(due)
            r_key = r_slot * n_subs + r_sub  # sorted, like pair
            first_at = np.full(len(pair), math.inf)
            pos = np.searchsorted(r_key, pair)
            found = pos < len(r_key)
            found[found] = r_key[pos[found]] == pair[found]
            first_at[found] = r_at[pos[found]]
            on_time = first_at <= deadline[slot]
            hit = np.searchsorted(pair, r_key)  # pair is sorted and distinct
            matched = hit < len(pair)
            matched[matched] = pair[hit[matched]] == r_key[matched]
            self._counters["unmatched_receipts"] += int(np.count_nonzero(~matched))
            for code, rows in _groups(sub):
                self._sub_outcome.add(self._sub_id[int(code)], deadline[slot[rows]], on_time[rows])
            self._ev_resolved |= due
        done = self._ev_resolved & (deadline + self._config.late_ms <= now)
        orphan = np.isnan(self._ev_published) & (self._ev_seen < now - self._config.window_ms)
        if done.any():
            r_slot, r_sub, r_at = self._first_receipts(done)
            delay = np.maximum(r_at - self._ev_published[r_slot], 0.0)  # clock skew never makes it < 0
            for code, rows in _groups(r_sub):
                self._sub_delay_sketch.add(self._sub_id[int(code)], deadline[r_slot[rows]], delay[rows])
        if done.any() or orphan.any():
            self._counters["orphans_dropped"] += int(np.count_nonzero(orphan))
            self._compact(~(done | orphan))

    def _compact(self, keep: BoolArray) -> None:
        new_slot = np.cumsum(keep) - 1
        m = keep[self._m_slot]
        self._m_slot, self._m_sub = new_slot[self._m_slot[m]], self._m_sub[m]
        r = keep[self._r_slot]
        self._r_slot, self._r_sub, self._r_at = new_slot[self._r_slot[r]], self._r_sub[r], self._r_at[r]
        self._ev_id = [eid for eid, k in zip(self._ev_id, keep.tolist(), strict=True) if k]
        self._slot = {eid: i for i, eid in enumerate(self._ev_id)}
        self._ev_published = self._ev_published[keep]
        self._ev_deadline = self._ev_deadline[keep]
        self._ev_seen = self._ev_seen[keep]
        self._ev_resolved = self._ev_resolved[keep]

    # -- queries -------------------------------------------------------------------------

    def _window_s(self, stream: str, end_ms: float) -> float:
        """Seconds of the window ending at ``end_ms`` during which ``stream`` was observed."""
        start, stop = self._pub_lifetime.span(end_ms)
        start = max(start, self._origin.get(stream, math.inf))
        return max(min(stop, end_ms) - start, 0.0) / 1000.0

    def publishers(self) -> list[str]:
        """Publishers with data in the kept buckets."""
        return self._pub_lifetime.keys()

    def brokers(self) -> list[str]:
        """Brokers with data in the kept buckets."""
        return self._broker_service.keys()

    def links(self) -> list[str]:
        """Links (``"from->to"``) with data in the kept buckets."""
        return self._link_seq.keys()

    def subscribers(self) -> list[str]:
        """Subscribers with data in the kept buckets."""
        return sorted(set(self._sub_outcome.keys()) | set(self._sub_delay_sketch.keys()))

    def publisher(self, publisher_id: str, end_ms: float) -> PublisherEstimate | None:
        """Rate and burstiness of a publisher over the window ending at ``end_ms`` (None: no data)."""
        life = self._pub_lifetime.query(publisher_id, end_ms)
        if life is None:
            return None
        gaps = self._pub_gaps.query(publisher_id, end_ms) or Moments()
        window_s = self._window_s("publications", end_ms)
        return PublisherEstimate(
            events=life.count,
            window_s=window_s,
            rate_per_s=life.count / window_s if window_s > 0 else math.nan,
            mean_interarrival_ms=gaps.mean,
            interarrival_scv=gaps.scv,
            gaps=gaps.count,
            mean_lifetime_ms=life.mean,
        )

    def broker(self, broker_id: str, end_ms: float) -> BrokerEstimate | None:
        """Load, service and wait of a broker over the window ending at ``end_ms`` (None: no data)."""
        service = self._broker_service.query(broker_id, end_ms)
        wait = self._broker_wait.query(broker_id, end_ms)
        service_sketch = self._broker_service_sketch.query(broker_id, end_ms)
        wait_sketch = self._broker_wait_sketch.query(broker_id, end_ms)
        if service is None or wait is None or service_sketch is None or wait_sketch is None:
            return None
        gaps = self._broker_gaps.query(broker_id, end_ms) or Moments()
        window_s = self._window_s("brokers", end_ms)
        return BrokerEstimate(
            arrivals=service.count,
            window_s=window_s,
            arrival_rate_per_s=service.count / window_s if window_s > 0 else math.nan,
            arrival_scv=gaps.scv,
            mean_service_ms=service.mean,
            service_scv=service.scv,
            service_third_moment=service.third_moment,
            utilisation=service.sum / (1000.0 * window_s) if window_s > 0 else math.nan,
            mean_wait_ms=wait.mean,
            service=service_sketch,
            wait=wait_sketch,
        )

    def link(self, link_key: str, end_ms: float) -> LinkEstimate | None:
        """Delay and loss of link ``"from->to"`` over the window ending at ``end_ms`` (None: no data).

        The loss counts only the buckets that ended ``grace_ms`` or more before ``end_ms``.
        """
        if not self._link_seq.items(link_key, end_ms):
            return None
        delay = self._link_delay.query(link_key, end_ms) or Moments()
        log = self._link_seq.query(link_key, end_ms, before_ms=end_ms - self._config.grace_ms)
        return LinkEstimate(
            delivered=delay.count,
            mean_delay_ms=delay.mean,
            delay=self._link_delay_sketch.query(link_key, end_ms),
            loss=LinkLossEstimate.from_log(log, self._config.level),
        )

    def subscriber(self, subscriber_id: str, end_ms: float) -> SubscriberEstimate | None:
        """Measured R_s over the events whose deadline is in the window ending at ``end_ms`` and at
        or before the watermark (None: no data)."""
        parts = self._sub_outcome.items(subscriber_id, end_ms)
        sketch = self._sub_delay_sketch.query(subscriber_id, end_ms)
        if not parts and sketch is None:
            return None
        k = np.array([t.successes for _, t in parts], dtype=np.int64)
        n = np.array([t.trials for _, t in parts], dtype=np.int64)
        on_time, matching = int(k.sum()), int(n.sum())
        low, high = wilson_interval(on_time, matching, self._config.level, exact_ends=True)
        used = n > 0
        b_low = b_high = math.nan
        if int(used.sum()) >= self._config.min_batches:
            b_low, b_high = batch_means_interval(k[used], n[used], self._config.level)
        p50 = p95 = math.nan
        if sketch is not None and sketch.count:
            p50, p95 = (float(v) for v in sketch.quantile([0.5, 0.95]))
        return SubscriberEstimate(
            on_time=on_time,
            matching=matching,
            reliability=on_time / matching if matching else math.nan,
            reliability_low=low,
            reliability_high=high,
            batch_low=b_low,
            batch_high=b_high,
            receipts=sketch.count if sketch is not None else 0,
            p50_delay_ms=p50,
            p95_delay_ms=p95,
        )

    def to_system(self, skeleton: Mapping[str, Any], end_ms: float) -> EstimatedSystem:
        """The docs/reference/qos-predict.md system ``skeleton`` with its measured inputs replaced by the estimates.

        Per broker ``service_ms``, per link ``delay_ms`` and ``reliability``, per publisher
        ``interarrival_ms``, from the window ending at ``end_ms``: sketches become ``empirical``
        DISTs of at most ``max_points`` values, a reliability its point estimate, and an
        inter-publication process a ``gamma`` with the measured mean and cv (``deterministic`` when
        the cv is below 1e-3). A value with fewer than ``min_samples`` samples stays as it is and
        gets a line in ``no_data``. Ids, filters and content are the skeleton's; the skeleton is
        not changed.
        """
        c = self._config
        system: dict[str, Any] = deepcopy(dict(skeleton))
        missing: list[str] = []

        def enough(what: str, n: int) -> bool:
            if n < c.min_samples:
                missing.append(f"{what}: {n} samples < {c.min_samples}")
                return False
            return True

        for b in system.get("brokers", []):
            est = self.broker(str(b["id"]), end_ms)
            if enough(f"broker {b['id']} service_ms", est.arrivals if est else 0) and est is not None:
                b["service_ms"] = est.service.to_distribution(c.max_points).to_dict()
        for link in system.get("links", []):
            key = f"{link['from']}->{link['to']}"
            lest = self.link(key, end_ms)
            delivered = lest.delivered if lest else 0
            if enough(f"link {key} delay_ms", delivered) and lest is not None and lest.delay is not None:
                link["delay_ms"] = lest.delay.to_distribution(c.max_points).to_dict()
            if enough(f"link {key} reliability", lest.loss.expected if lest else 0) and lest is not None:
                link["reliability"] = lest.loss.reliability
        for p in system.get("publishers", []):
            pest = self.publisher(str(p["id"]), end_ms)
            if enough(f"publisher {p['id']} interarrival_ms", pest.gaps if pest else 0) and pest is not None:
                mean, cv = pest.mean_interarrival_ms, math.sqrt(max(pest.interarrival_scv, 0.0))
                if cv < 1e-3 or mean <= 0.0:
                    p["interarrival_ms"] = {"kind": "deterministic", "value": max(mean, 0.0)}
                else:
                    p["interarrival_ms"] = {"kind": "gamma", "mean": mean, "cv": cv}
        return EstimatedSystem(system, tuple(missing))

    # -- state ---------------------------------------------------------------------------

    def to_state(self) -> State:
        state: State = {"config": np.array([json.dumps(asdict(self._config))])}
        for name, window in self._windows().items():
            state.update(nest_state(f"w.{name}", window.to_state()))
        for stream, last in self._last.items():
            state[f"last.{stream}.keys"] = string_array(list(last))
            state[f"last.{stream}.values"] = np.array(list(last.values()), dtype=np.float64)
        state["origin"] = np.array([self._origin.get(s, math.inf) for s in _STREAMS], dtype=np.float64)
        state["clock"] = np.array([self._clock, self._watermark], dtype=np.float64)
        state["counters"] = np.array([self._counters[k] for k in _COUNTERS], dtype=np.int64)
        state["ev.id"] = string_array(self._ev_id)
        state["ev.published"] = self._ev_published.copy()
        state["ev.deadline"] = self._ev_deadline.copy()
        state["ev.seen"] = self._ev_seen.copy()
        state["ev.resolved"] = self._ev_resolved.copy()
        state["sub.id"] = string_array(self._sub_id)
        state["m.slot"], state["m.sub"] = self._m_slot.copy(), self._m_sub.copy()
        state["r.slot"], state["r.sub"], state["r.at"] = self._r_slot.copy(), self._r_sub.copy(), self._r_at.copy()
        return state

    @classmethod
    def from_state(cls, state: Mapping[str, NDArray[Any]], *, match: Match | None = None) -> TelemetryEstimator:
        out = cls(EstimationConfig(**json.loads(str(state["config"][0]))), match=match)
        for name, kind in _WINDOWS.items():
            setattr(out, f"_{name}", RollingWindow.from_state(child_state(f"w.{name}", state), out._factory(kind)))
        for stream in out._last:
            keys = [str(k) for k in state[f"last.{stream}.keys"].tolist()]
            out._last[stream] = dict(zip(keys, state[f"last.{stream}.values"].tolist(), strict=True))
        origin = state["origin"].tolist()
        out._origin = {s: float(v) for s, v in zip(_STREAMS, origin, strict=True) if math.isfinite(v)}
        out._clock, out._watermark = (float(v) for v in state["clock"])
        out._counters = dict(zip(_COUNTERS, (int(v) for v in state["counters"]), strict=True))
        out._ev_id = [str(e) for e in state["ev.id"].tolist()]
        out._slot = {eid: i for i, eid in enumerate(out._ev_id)}
        out._ev_published = state["ev.published"].astype(np.float64)
        out._ev_deadline = state["ev.deadline"].astype(np.float64)
        out._ev_seen = state["ev.seen"].astype(np.float64)
        out._ev_resolved = state["ev.resolved"].astype(np.bool_)
        out._sub_id = [str(s) for s in state["sub.id"].tolist()]
        out._sub_code = {sid: i for i, sid in enumerate(out._sub_id)}
        out._m_slot, out._m_sub = state["m.slot"].astype(np.int64), state["m.sub"].astype(np.int64)
        out._r_slot, out._r_sub = state["r.slot"].astype(np.int64), state["r.sub"].astype(np.int64)
        out._r_at = state["r.at"].astype(np.float64)
        return out

    def to_bytes(self) -> bytes:
        return pack_state("TelemetryEstimator", self.to_state())

    @classmethod
    def from_bytes(cls, data: bytes, *, match: Match | None = None) -> TelemetryEstimator:
        return cls.from_state(unpack_state("TelemetryEstimator", data), match=match)


def add_link_delays(
    window: RollingWindow[Moments],
    src: Sequence[str],
    dst: Sequence[str],
    sent_at: ArrayLike,
    delay_ms: ArrayLike,
) -> None:
    """Link telemetry into ``window``, keyed ``"from->to"``: the delays of delivered
    transmissions by send time (lost ones, with a NaN delay, are skipped)."""
    d = np.asarray(delay_ms, dtype=np.float64)
    t = np.asarray(sent_at, dtype=np.float64)
    keys = np.char.add(np.char.add(np.asarray(src, dtype=str), "->"), np.asarray(dst, dtype=str))
    ok = np.isfinite(d)
    for key in np.unique(keys[ok]).tolist():
        rows = ok & (keys == key)
        window.add(key, t[rows], d[rows])
