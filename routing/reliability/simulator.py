"""Discrete-event simulation of the docs/reference/qos-predict.md broker network, vectorised with numpy.

This is the ``siftstream qos simulate`` twin of the reliability predictor: it measures the
subscriber real-time reliability R_s that the predictor estimates. The model is the one of
Pongthawornkamol, Nahrstedt and Wang, "Towards Timeliness and Reliability Analysis of
Distributed Content-based Publish/Subscribe Systems over Best-effort Networks" (§2, §4.1;
), as docs/reference/qos-predict.md states it:

- publishers emit events at renewal times (``interarrival_ms``); each event draws one
  ``content`` entry (attributes and lifetime) with probability ``p``, and goes to the home broker;
- each broker is one FIFO single server; every event it receives, from a publisher or a
  neighbour, takes one ``service_ms`` draw;
- a broker forwards an event once over each outgoing link on which some subscription downstream
  matches it (the link to a matching local subscriber included), never back over the link the
  event came in on (the paper's up(l), eq. 2);
- links do not queue: each transmission draws its own delay (messages may overtake each other)
  and is lost with probability 1 - ``reliability``; a lost transmission drops the event for
  everything behind that link;
- R_s = (events published in [0, seconds) that match s and reach s within their lifetime) /
  (events published in [0, seconds) that match s), the paper's definition in §2.2.

The system document is first compiled (:func:`routing.reliability.system.compile_system`): validated,
matched, and its filters propagated into every content entry's potential route.

Algorithm
---------
Routing does not depend on time, so every random input is drawn first (:func:`draw_inputs`):
publication times and contents, then for every *potential* transmission (a hop of the content's
route, the paper's filter propagation §4.1 unrolled per content entry) its loss, its delay and,
at a broker, its service time. Timing is then a function of those draws (:func:`solve`):

- A broker's departures follow the FIFO (Lindley) recursion D_n = max(A_n, D_{n-1}) + S_n over
  its arrivals in time order, which numpy evaluates at once as
  ``D = cumsum(S) + maximum.accumulate(A - (cumsum(S) - S))`` (:func:`fifo_departures`).
- Brokers are taken in topological order of the strongly connected components of the broker
  graph. A lone broker needs one pass once its upstream brokers are done. But a broker pair
  linked both ways (any tree that carries events both ways, such as the paper's) is a cycle of
  queues, and no broker order works: such a component is solved by *windowed relaxation*
  (:func:`_relax_component`). Visits are admitted in order of a lower bound on their arrival
  time, a few hundred at a time; vectorised Jacobi sweeps of the recursion over all brokers of
  the component then run until no departure changes, and every visit that arrives before the
  window's end is then final, with its exact time (the proof is in that function). A sweep
  extends the settled horizon by at least one hop, so the number of sweeps grows with simulated
  time over hop time, while the work per sweep is vectorised over the events in flight.
- Times are integer nanoseconds (:data:`TICKS_PER_MS`): the sums and maxima are exact, so the
  batching cannot change the result.
- :func:`solve_reference` is the textbook event-driven simulation (one heap, one event at a
  time) over the same draws, the oracle of the parity tests (docs/conventions.md §6): both give
  identical times, bit for bit.

Warm-up: publishers start at -``warmup_s`` with a uniformly random phase and run until
``seconds + warmup_s``; only events published in [0, seconds) are counted, and broker statistics
cover [0, seconds). Events published outside that window still load the queues.

Examples
--------
>>> dist = lambda mean: {"kind": "exponential", "mean": mean}
>>> system = {
...     "brokers": [{"id": "b1", "service_ms": dist(5)}],
...     "links": [{"from": "p1", "to": "b1", "reliability": 1.0, "delay_ms": dist(1)},
...               {"from": "b1", "to": "s1", "reliability": 0.9, "delay_ms": dist(1)}],
...     "publishers": [{"id": "p1", "broker": "b1", "interarrival_ms": dist(10),
...                     "content": [{"p": 1.0, "lifetime_ms": 1000, "attributes": {"t": 1}}]}],
...     "subscribers": [{"id": "s1", "broker": "b1", "filter": "t = 1"}]}
>>> result = simulate(system, seconds=100, seed=1, matcher=lambda text, attributes: True)
>>> s1 = result.subscribers["s1"]
>>> s1.matching > 9000, abs(s1.reliability - 0.9) < 0.02, round(result.brokers["b1"].rho, 1)
(True, True, 0.5)
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from routing.reliability.system import Matcher, Network, compile_system
from routing.stats.distributions import Distribution
from routing.stats.intervals import wilson_interval

__all__ = [
    "TICKS_PER_MS",
    "BrokerSamples",
    "BrokerStats",
    "Draws",
    "EventTable",
    "LinkSamples",
    "Receipts",
    "Schedule",
    "SimulationResult",
    "SubscriberStats",
    "Telemetry",
    "draw_inputs",
    "fifo_departures",
    "measure",
    "simulate",
    "solve",
    "solve_reference",
    "to_spec_output",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]
_T = TypeVar("_T", bound=np.number[Any])

_RHO_WARNING = 0.95  # docs/reference/reliability-model.md §9: rho >= 0.95 marks a broker saturated


# --------------------------------------------------------------------------------------------
# The random inputs, all drawn before any timing is computed
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Draws:
    """Every random input of one run: events and their potential transmissions ("rows").

    Events are sorted by publication time. A row is one hop of the event's potential route
    (its content's route, :attr:`routing.reliability.system.Network.route_link`); rows of an event are contiguous with
    parents before children. Whether a row is actually transmitted depends on the losses
    upstream of it, never on timing.

    Attributes
    ----------
    seconds, warmup_s : float
        Counting window [0, seconds); publications run over [-warmup_s, seconds + warmup_s).
    event_publisher, event_key : int array
        Per event, its publisher and content key.
    published_at_ms : float array
        Per event, the publication time (ms; negative during warm-up).
    row_event, row_link, row_parent, row_depth : int array
        Per row: its event, link, parent row (-1 for the publisher's link) and depth.
    row_lost : bool array
        Per row, whether the transmission is lost (if it happens).
    row_delay_ms : float array
        Per row, the link delay draw.
    row_service_ms : float array
        Per row ending at a broker, the service draw there; NaN for rows ending at a subscriber.
    """

    seconds: float
    warmup_s: float
    event_publisher: IntArray
    event_key: IntArray
    published_at_ms: FloatArray
    row_event: IntArray
    row_link: IntArray
    row_parent: IntArray
    row_depth: IntArray
    row_lost: BoolArray
    row_delay_ms: FloatArray
    row_service_ms: FloatArray

    @property
    def counted(self) -> BoolArray:
        """Per event: published in the counting window [0, seconds)."""
        t = self.published_at_ms
        out: BoolArray = (t >= 0.0) & (t < self.seconds * 1000.0)
        return out


def _renewal_times(dist: Distribution, start: float, end: float, rng: np.random.Generator) -> FloatArray:
    """Renewal epochs in [start, end): first one at start + U * I_0 (a uniformly random phase,
    exactly stationary for periodic publishers), then cumulative inter-arrival draws."""
    mean = dist.mean
    first = start + rng.random() * float(dist.sample(rng, 1)[0])
    chunks = [np.array([first])]
    last = first
    while last < end:
        n = int((end - last) / mean * 1.05) + 16
        steps = last + np.cumsum(dist.sample(rng, n))
        chunks.append(steps)
        last = float(steps[-1])
    times = np.concatenate(chunks)
    out: FloatArray = times[times < end]
    return out


def draw_inputs(network: Network, seconds: float, seed: int, warmup_s: float | None = None) -> Draws:
    """Draw every random input of a run, in a fixed order, from ``numpy.random.default_rng(seed)``.

    The order: per publisher its publication times, then its events' content entries; then one
    loss draw per potential transmission; then link delays, link by link; then service times,
    broker by broker. Each publisher starts at -warmup_s with a uniformly random phase, so
    periodic publishers are not in step.

    Parameters
    ----------
    network : Network
    seconds : float
        Length of the counting window [0, seconds) of simulated time.
    seed : int
    warmup_s : float, optional
        Warm-up (and cool-down) length; default 10% of ``seconds``, at most 300 s.

    Returns
    -------
    Draws

    Examples
    --------
    >>> system = {"brokers": [{"id": "b", "service_ms": {"kind": "deterministic", "value": 1}}],
    ...           "links": [{"from": "p", "to": "b", "reliability": 1,
    ...                      "delay_ms": {"kind": "deterministic", "value": 0}}],
    ...           "publishers": [{"id": "p", "broker": "b", "interarrival_ms": {"kind": "deterministic", "value": 100},
    ...                           "content": [{"p": 1, "lifetime_ms": 10, "attributes": {}}]}],
    ...           "subscribers": []}
    >>> draws = draw_inputs(compile_system(system, lambda t, a: True), seconds=1.0, seed=0, warmup_s=0.0)
    >>> len(draws.published_at_ms), int(draws.counted.sum())
    (10, 10)
    """
    if not (seconds > 0.0 and math.isfinite(seconds)):
        raise ValueError(f"seconds must be a finite number > 0 (got {seconds!r})")
    warm = min(0.1 * seconds, 300.0) if warmup_s is None else float(warmup_s)
    if not (warm >= 0.0 and math.isfinite(warm)):
        raise ValueError(f"warmup_s must be a finite number >= 0 (got {warmup_s!r})")
    rng = np.random.default_rng(seed)
    start, end = -warm * 1000.0, (seconds + warm) * 1000.0

    times: list[FloatArray] = []
    pubs: list[IntArray] = []
    keys: list[IntArray] = []
    for p, dist in enumerate(network.interarrival):
        t = _renewal_times(dist, start, end, rng)
        own = np.flatnonzero(network.content_publisher == p)
        cum = np.cumsum(network.content_p[own])
        pick = np.minimum(np.searchsorted(cum, rng.random(len(t)) * cum[-1], side="right"), len(own) - 1)
        times.append(t)
        pubs.append(np.full(len(t), p, dtype=np.int64))
        keys.append(own[pick].astype(np.int64))
    published = np.concatenate(times) if times else np.zeros(0)
    publisher = np.concatenate(pubs) if pubs else np.zeros(0, dtype=np.int64)
    key = np.concatenate(keys) if keys else np.zeros(0, dtype=np.int64)
    order = np.lexsort((publisher, published))
    published, publisher, key = published[order], publisher[order], key[order]

    # Rows: every event's potential route, laid out contiguously.
    lengths = (network.route_offset[1:] - network.route_offset[:-1])[key]
    n_rows = int(lengths.sum())
    event_start = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    row_event = np.repeat(np.arange(len(key), dtype=np.int64), lengths)
    local = np.arange(n_rows, dtype=np.int64) - event_start[row_event]
    hop = network.route_offset[key][row_event] + local
    row_link = network.route_link[hop]
    parent_local = network.route_parent[hop]
    row_parent = np.where(parent_local >= 0, event_start[row_event] + parent_local, -1)
    row_depth = network.route_depth[hop]

    row_lost = rng.random(n_rows) >= network.link_reliability[row_link]
    row_delay = np.zeros(n_rows)
    by_link = np.argsort(row_link, kind="stable")
    bounds = np.concatenate(([0], np.cumsum(np.bincount(row_link, minlength=len(network.link_from)))))
    for link, dist in enumerate(network.link_delay):
        rows = by_link[bounds[link] : bounds[link + 1]]
        row_delay[rows] = dist.sample(rng, len(rows))
    row_service = np.full(n_rows, np.nan)
    row_broker = network.link_broker[row_link]
    at_broker = np.flatnonzero(row_broker >= 0)
    by_broker = at_broker[np.argsort(row_broker[at_broker], kind="stable")]
    bounds = np.concatenate(([0], np.cumsum(np.bincount(row_broker[at_broker], minlength=len(network.broker_ids)))))
    for b, dist in enumerate(network.service):
        rows = by_broker[bounds[b] : bounds[b + 1]]
        row_service[rows] = dist.sample(rng, len(rows))

    return Draws(
        seconds=float(seconds),
        warmup_s=warm,
        event_publisher=publisher,
        event_key=key,
        published_at_ms=published,
        row_event=row_event,
        row_link=row_link,
        row_parent=row_parent,
        row_depth=row_depth,
        row_lost=row_lost,
        row_delay_ms=row_delay,
        row_service_ms=row_service,
    )


# --------------------------------------------------------------------------------------------
# Timing: the vectorised solver and the event-driven reference
# --------------------------------------------------------------------------------------------


TICKS_PER_MS = 1_000_000
"""The solvers compute in integer ticks of 1 ns: sums and maxima are then exact, so the result
does not depend on how the work is batched, and the vectorised solver and the event-driven
reference agree bit for bit."""

_NEVER = np.iinfo(np.int64).max // 4  # "not (yet) at this broker": later than any real time
_IDLE = -_NEVER  # "the server has been idle since forever"


def _ticks(ms: FloatArray) -> IntArray:
    out: IntArray = np.rint(ms * TICKS_PER_MS).astype(np.int64)
    return out


def _ms(ticks: IntArray, valid: BoolArray) -> FloatArray:
    out: FloatArray = np.where(valid, ticks / TICKS_PER_MS, np.nan)
    return out


@dataclass(frozen=True, eq=False)
class Schedule:
    """The times of one run, per row of :class:`Draws`, in integer ticks (:data:`TICKS_PER_MS`).

    Attributes
    ----------
    sent : bool array
        The transmission happened (the parent row arrived, or it is the publisher's link).
    arrived : bool array
        ``sent`` and not lost.
    at_broker : bool array
        The row's link ends at a broker (else at a subscriber).
    sent_at, arrived_at : int array
        Send and arrival time; meaningful where ``sent`` / ``arrived``.
    departed_at : int array
        For rows that arrived at a broker, when its service there ended.
    sweeps : int
        Relaxation sweeps spent on cyclic components (0 when the broker graph is acyclic).
    fallback : bool
        Whether some component fell back to the event-driven loop.
    """

    sent: BoolArray
    arrived: BoolArray
    at_broker: BoolArray
    sent_at: IntArray
    arrived_at: IntArray
    departed_at: IntArray
    sweeps: int = 0
    fallback: bool = False

    @property
    def sent_at_ms(self) -> FloatArray:
        """Send times in ms, NaN where not sent."""
        return _ms(self.sent_at, self.sent)

    @property
    def arrived_at_ms(self) -> FloatArray:
        """Arrival times in ms, NaN where not arrived."""
        return _ms(self.arrived_at, self.arrived)

    @property
    def departed_at_ms(self) -> FloatArray:
        """Departure times from the broker in ms, NaN where the row is no broker visit."""
        return _ms(self.departed_at, self.arrived & self.at_broker)


def fifo_departures(arrivals: NDArray[_T], services: NDArray[_T]) -> NDArray[_T]:
    """Departure times of a FIFO single server, customers in arrival order.

    The Lindley recursion D_n = max(A_n, D_{n-1}) + S_n unrolls to
    D_n = C_n + max_{k <= n} (A_k - C_{k-1}) with C_n = S_1 + ... + S_n, which is two cumulative
    numpy passes (the trace-driven form of docs/reference/reliability-model.md §8.2, as in Ebert et al.'s
    queuecomputer, JSS 95(5), 2020). Exact for integer times.

    Parameters
    ----------
    arrivals : array
        A_n, non-decreasing.
    services : array
        S_n, the service time of customer n.

    Returns
    -------
    array
        D_n.

    Examples
    --------
    >>> fifo_departures(np.array([0, 1, 10]), np.array([5, 2, 1])).tolist()
    [5, 7, 11]
    """
    cs = np.cumsum(services)
    out: NDArray[_T] = cs + np.maximum.accumulate(arrivals - (cs - services))
    return out


def _segment_fifo(arrivals: IntArray, services: IntArray, brokers: IntArray, last: IntArray) -> IntArray:
    """:func:`fifo_departures` for several servers at once, server b busy until ``last[b]``.

    Rows come sorted by (broker, arrival). With D_0 = last[b] and C counted within the server's
    rows, D_n = C_n + max(D_0, max_{k <= n} (A_k - C_{k-1})). One ``maximum.accumulate`` serves
    every server by lifting server b's values by b * span, span exceeding their spread, so that
    no server's running maximum sees another's (exact in integers).
    """
    cs = np.cumsum(services)
    before = cs - services
    before -= before[np.searchsorted(brokers, brokers)]  # C_{n-1} within the server's rows
    x = arrivals - before
    lift = brokers * (x.max() - x.min() + 1)
    x += lift
    running = np.maximum.accumulate(x)
    running -= lift
    np.maximum(running, last[brokers], out=running)
    running += before
    running += services
    return running


@dataclass(frozen=True)
class _Rows:
    """Per-row inputs of the solvers, in ticks."""

    parent: IntArray
    delay: IntArray
    service: IntArray  # 0 for rows ending at a subscriber
    broker: IntArray  # broker the row ends at, -1 for a subscriber
    pub_at: IntArray  # publication time of the row's event
    visit: BoolArray  # the row arrived at a broker


def _reachability(draws: Draws) -> tuple[BoolArray, BoolArray]:
    n = len(draws.row_link)
    sent = np.zeros(n, dtype=np.bool_)
    arrived = np.zeros(n, dtype=np.bool_)
    sent[draws.row_parent < 0] = True
    for depth in range(int(draws.row_depth.max(initial=0)) + 1):
        rows = np.flatnonzero(draws.row_depth == depth)
        if depth > 0:
            sent[rows] = arrived[draws.row_parent[rows]]
        arrived[rows] = sent[rows] & ~draws.row_lost[rows]
    return sent, arrived


def _rows(network: Network, draws: Draws, arrived: BoolArray) -> _Rows:
    broker = network.link_broker[draws.row_link]
    return _Rows(
        parent=draws.row_parent,
        delay=_ticks(draws.row_delay_ms),
        service=_ticks(np.nan_to_num(draws.row_service_ms)),
        broker=broker,
        pub_at=_ticks(draws.published_at_ms)[draws.row_event],
        visit=arrived & (broker >= 0),
    )


def _finish(rows: _Rows, sent: BoolArray, arrived: BoolArray, dep: IntArray, sweeps: int, fallback: bool) -> Schedule:
    has_parent = rows.parent >= 0
    sent_at = np.where(has_parent, dep[np.maximum(rows.parent, 0)], rows.pub_at)
    sent_at = np.where(sent, sent_at, 0)
    arrived_at = np.where(arrived, sent_at + rows.delay, 0)
    departed = np.where(rows.visit, dep, 0)
    return Schedule(sent, arrived, rows.broker >= 0, sent_at, arrived_at, departed, sweeps, fallback)


def _relax_component(
    component: Sequence[int], rows: _Rows, dep: IntArray, window_rows: int, max_sweeps: int
) -> int | None:
    """Departure times of the visits to a cyclic broker component, by windowed relaxation.

    Visits enter in order of a lower bound on their arrival (no queueing inside the component:
    lb(r) = lb(parent) + S(parent) + L(r)). A window takes the next ``window_rows`` of them, up
    to tau (the next lower bound), plus the visits still pending; Jacobi sweeps then recompute
    every broker's FIFO departures, over the visits whose current arrival is before tau,
    starting from each broker's last final departure, until nothing changes.

    Why the fixed point is the true schedule, and why the sweeps reach it: a visit's departure
    depends only on arrivals ahead of it at its broker, and its arrival on its parent's
    departure, which is at least S + L earlier. Take the earliest time t at which the current
    values and the true ones differ (a visit present at t in one and not the other, or at
    other times). Everything before t agrees, so a sweep reproduces the true values up to at
    least t + min(S + L): the horizon of agreement grows every sweep until the window is exact.
    Every true arrival before tau is among the candidates, since its lower bound is below tau.
    Integer ticks keep this true of the computed values, not only of exact arithmetic.

    Returns the number of sweeps, or None when a window did not settle within ``max_sweeps``
    (possible only when S + L can be 0).
    """
    members = np.zeros(int(rows.broker.max(initial=-1)) + 2, dtype=np.bool_)
    members[list(component)] = True
    mine = np.flatnonzero(rows.visit & members[rows.broker])
    if len(mine) == 0:
        return 0
    parent = rows.parent[mine]
    has_parent = parent >= 0
    safe_parent = np.maximum(parent, 0)
    inside = has_parent & rows.visit[safe_parent] & members[rows.broker[safe_parent]]
    # Entries from outside arrive at known times: publication, or an upstream component's departure.
    entry = np.where(has_parent, dep[safe_parent], rows.pub_at[mine]) + rows.delay[mine]
    n = len(rows.parent)
    lb = np.full(n, _NEVER)
    lb[mine[~inside]] = entry[~inside]
    todo = mine[inside]
    while len(todo):  # parents before children: each pass settles one more generation
        ready = lb[rows.parent[todo]] < _NEVER
        r = todo[ready]
        lb[r] = lb[rows.parent[r]] + rows.service[rows.parent[r]] + rows.delay[r]
        todo = todo[~ready]
    by_lb = mine[np.argsort(lb[mine], kind="stable")]

    position = np.full(n, -1, dtype=np.int64)  # row -> index among the window's candidates
    last = np.full(len(members), _IDLE, dtype=np.int64)  # last final departure per broker
    pending = np.zeros(0, dtype=np.int64)
    taken = 0
    sweeps = 0
    while taken < len(by_lb) or len(pending):
        upto = min(taken + window_rows, len(by_lb))
        tau = int(lb[by_lb[upto]]) if upto < len(by_lb) else _NEVER
        cand = np.sort(np.concatenate((pending, by_lb[taken:upto])))
        taken = upto
        position[cand] = np.arange(len(cand))
        cpar = rows.parent[cand]
        ppos = np.where(cpar >= 0, position[np.maximum(cpar, 0)], -1)
        internal = ppos >= 0  # the parent is a candidate too: its departure is being solved
        delay = rows.delay[cand]
        arrive = np.where(cpar >= 0, dep[np.maximum(cpar, 0)], rows.pub_at[cand]) + delay
        ip, idelay = ppos[internal], delay[internal]
        cb, cs = rows.broker[cand], rows.service[cand]
        # Start from the departures without queueing: exact wherever nothing queued, so only
        # the corrections queueing causes have to travel from sweep to sweep.
        current = np.minimum(lb[cand] + cs, _NEVER)
        for _ in range(max_sweeps):
            sweeps += 1
            arrive[internal] = current[ip] + idelay
            inw = np.flatnonzero(arrive < tau)
            new = np.full(len(cand), _NEVER)
            if len(inw):
                order = inw[np.lexsort((arrive[inw], cb[inw]))]
                new[order] = _segment_fifo(arrive[order], cs[order], cb[order], last)
            if np.array_equal(new, current):
                break
            current = new
        else:
            return None
        final = current < _NEVER
        dep[cand[final]] = current[final]
        np.maximum.at(last, cb[final], current[final])  # a server's last departure is its latest
        position[cand] = -1
        pending = cand[~final]
    return sweeps


def _event_loop(rows: _Rows, dep: IntArray, brokers: Sequence[int] | None) -> None:
    """Departure times of the visits to ``brokers`` (all when None) by one heap of arrivals in
    (time, row) order, each broker a FIFO server: D = max(A, D_prev) + S. Visits elsewhere must
    already have their departures in ``dep``."""
    n = len(rows.parent)
    n_brokers = int(rows.broker.max(initial=-1)) + 1
    members = [brokers is None] * n_brokers
    for b in brokers or ():
        members[b] = True
    broker = rows.broker.tolist()
    parent = rows.parent.tolist()
    visit = rows.visit.tolist()
    delay = rows.delay.tolist()
    service = rows.service.tolist()
    pub_at = rows.pub_at.tolist()
    out = dep.tolist()
    children: list[list[int]] = [[] for _ in range(n)]
    heap: list[tuple[int, int]] = []
    for row in range(n):
        b = broker[row]
        if b < 0 or not visit[row] or not members[b]:
            continue
        par = parent[row]
        if par >= 0 and members[broker[par]]:
            children[par].append(row)
        else:
            heap.append(((out[par] if par >= 0 else pub_at[row]) + delay[row], row))
    heapq.heapify(heap)
    last = [-(2**62)] * n_brokers
    while heap:
        t, row = heapq.heappop(heap)
        b = broker[row]
        d = max(t, last[b]) + service[row]
        last[b] = d
        out[row] = d
        for child in children[row]:
            heapq.heappush(heap, (d + delay[child], child))
    dep[:] = out


def solve(network: Network, draws: Draws, *, window_rows: int = 512, max_sweeps: int = 100_000) -> Schedule:
    """Event times of a run, vectorised (see the module docstring).

    Components of the broker graph are taken in topological order. A single broker is one FIFO
    pass (:func:`fifo_departures`) over its arrivals, whose times are final once the upstream
    components are. A cyclic component (brokers linked both ways) is solved by windowed
    relaxation (:func:`_relax_component`); should a window not settle within ``max_sweeps``
    sweeps, the component goes to the event-driven loop of :func:`solve_reference`.

    Parameters
    ----------
    network : Network
    draws : Draws
    window_rows : int
        Visits admitted per relaxation window. A speed knob only (the result does not depend on
        it): sweeps per window grow with the time a window spans, the cost of a sweep with its
        size (docs/decisions/simulator-relaxation-window.md: why 512).
    max_sweeps : int
        Sweeps allowed per window before falling back.

    Returns
    -------
    Schedule
        Identical to :func:`solve_reference`'s.
    """
    sent, arrived = _reachability(draws)
    rows = _rows(network, draws, arrived)
    dep = np.zeros(len(rows.parent), dtype=np.int64)
    visit_rows = np.flatnonzero(rows.visit)
    by_broker = visit_rows[np.argsort(rows.broker[visit_rows], kind="stable")]
    bounds = np.concatenate(([0], np.cumsum(np.bincount(rows.broker[visit_rows], minlength=len(network.broker_ids)))))
    sweeps = 0
    fallback = False
    for component in network.components:
        if len(component) == 1:
            # rows in row order: the stable sort breaks ties in arrival by row, as the heap does
            mine = by_broker[bounds[component[0]] : bounds[component[0] + 1]]
            if len(mine) == 0:
                continue
            par = rows.parent[mine]
            arrive = np.where(par >= 0, dep[np.maximum(par, 0)], rows.pub_at[mine]) + rows.delay[mine]
            order = np.argsort(arrive, kind="stable")
            dep[mine[order]] = fifo_departures(arrive[order], rows.service[mine[order]])
            continue
        spent = _relax_component(component, rows, dep, window_rows, max_sweeps)
        if spent is None:
            fallback = True
            _event_loop(rows, dep, component)
        else:
            sweeps += spent
    return _finish(rows, sent, arrived, dep, sweeps, fallback)


def solve_reference(network: Network, draws: Draws) -> Schedule:
    """Event times of a run by a plain event-driven simulation: one heap of arrivals ordered by
    (time, row), each broker a FIFO server (D = max(A, D_prev) + S), one event at a time.

    This is the oracle for :func:`solve` (docs/conventions.md §6); it shares only the draws and the
    reachability of rows (which depends on losses alone) with it. It is also the fallback of
    :func:`solve` for a component whose relaxation does not settle.

    Parameters
    ----------
    network : Network
    draws : Draws

    Returns
    -------
    Schedule
    """
    sent, arrived = _reachability(draws)
    rows = _rows(network, draws, arrived)
    dep = np.zeros(len(rows.parent), dtype=np.int64)
    _event_loop(rows, dep, None)
    return _finish(rows, sent, arrived, dep, 0, False)


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SubscriberStats:
    """What subscriber s measured over events published in [0, seconds).

    Attributes
    ----------
    reliability : float
        R_s = on_time / matching; NaN when no matching event was published.
    on_time : int
        Matching events that reached s within their lifetime.
    delivered : int
        Matching events that reached s at all (late ones included).
    matching : int
        Events that match s's filter.
    mean_delay_ms, p95_delay_ms : float
        Over delivered events, publication to (first) arrival; NaN when none was delivered.
    """

    reliability: float
    on_time: int
    delivered: int
    matching: int
    mean_delay_ms: float
    p95_delay_ms: float


@dataclass(frozen=True)
class BrokerStats:
    """What broker b measured over arrivals in [0, seconds).

    Attributes
    ----------
    arrival_rate_per_s : float
        Events received per second.
    rho : float
        Measured busy fraction of [0, seconds).
    mean_wait_ms : float
        Mean time in queue before service (0 when nothing arrived).
    mean_service_ms : float
        Mean service time of those events (0 when nothing arrived).
    arrivals : int
        Events received.
    """

    arrival_rate_per_s: float
    rho: float
    mean_wait_ms: float
    mean_service_ms: float
    arrivals: int


@dataclass(frozen=True, eq=False)
class LinkSamples:
    """One row per transmission (SiftStream ``LinkSample``), sorted by link then ``seq``.

    ``link`` indexes :attr:`Telemetry.link_from` / :attr:`Telemetry.link_to`; ``seq`` numbers a
    link's transmissions from 0 in sending order; ``delay_ms`` is NaN when ``lost``.
    """

    link: IntArray
    seq: IntArray
    sent_at_ms: FloatArray
    delay_ms: FloatArray
    lost: BoolArray
    event: IntArray


@dataclass(frozen=True, eq=False)
class BrokerSamples:
    """One row per event processed by a broker (SiftStream ``BrokerSample``), sorted by broker
    then arrival; ``queue_length`` counts the events waiting (not in service) when it arrived."""

    broker: IntArray
    event: IntArray
    arrived_at_ms: FloatArray
    wait_ms: FloatArray
    service_ms: FloatArray
    queue_length: IntArray


@dataclass(frozen=True, eq=False)
class Receipts:
    """One row per arrival at a subscriber (SiftStream ``Receipt``), late ones included, sorted
    by arrival time."""

    subscriber: IntArray
    event: IntArray
    received_at_ms: FloatArray


@dataclass(frozen=True, eq=False)
class EventTable:
    """One row per published event (SiftStream ``Event``), warm-up and cool-down included; the
    row number is the event index the other tables use. ``content`` is the position in the
    publisher's ``content`` list, whose ``attributes`` the event carries."""

    publisher: IntArray
    content: IntArray
    published_at_ms: FloatArray
    lifetime_ms: FloatArray


@dataclass(frozen=True, eq=False)
class Telemetry:
    """Column tables of everything a run did; times are ms from the start of the counting window.

    Integer columns index ``broker_ids``, ``subscriber_ids``, ``publisher_ids`` and the link
    arrays ``link_from`` / ``link_to``.
    """

    broker_ids: tuple[str, ...]
    publisher_ids: tuple[str, ...]
    subscriber_ids: tuple[str, ...]
    link_from: tuple[str, ...]
    link_to: tuple[str, ...]
    links: LinkSamples
    brokers: BrokerSamples
    receipts: Receipts
    events: EventTable


@dataclass(frozen=True)
class SimulationResult:
    """The measurements of one run.

    Attributes
    ----------
    seconds, warmup_s : float
    seed : int
    subscribers : dict of str to SubscriberStats
    brokers : dict of str to BrokerStats
    event_hops : int
        Transmissions simulated (lost ones and warm-up included): the work measure.
    events : int
        Events simulated (warm-up included).
    sweeps : int
        Gauss-Seidel sweeps of the timing solver.
    warnings : tuple of str
    telemetry : Telemetry or None
    """

    seconds: float
    warmup_s: float
    seed: int
    subscribers: dict[str, SubscriberStats]
    brokers: dict[str, BrokerStats]
    event_hops: int
    events: int
    sweeps: int
    warnings: tuple[str, ...] = ()
    telemetry: Telemetry | None = field(default=None, repr=False)


def measure(network: Network, draws: Draws, schedule: Schedule) -> SimulationResult:
    """Per-subscriber and per-broker measurements of a solved run, without telemetry.

    Parameters
    ----------
    network : Network
    draws : Draws
    schedule : Schedule
        From :func:`solve` or :func:`solve_reference` on these draws.

    Returns
    -------
    SimulationResult
        With ``seed`` 0 (the draws do not record theirs).
    """
    return _measure(network, draws, schedule, 0, False)


def _measure(network: Network, draws: Draws, schedule: Schedule, seed: int, telemetry: bool) -> SimulationResult:
    window = round(draws.seconds * 1000.0 * TICKS_PER_MS)
    counted = draws.counted
    n_keys, n_subs = network.match.shape
    per_key = np.bincount(draws.event_key[counted], minlength=n_keys).astype(np.int64)
    matching = per_key @ network.match.astype(np.int64)
    published = _ticks(draws.published_at_ms)
    lifetime = _ticks(network.content_lifetime_ms)

    row_sub = network.link_subscriber[draws.row_link]
    got = np.flatnonzero(schedule.arrived & (row_sub >= 0))
    sub, event, when = row_sub[got], draws.row_event[got], schedule.arrived_at[got]
    order = np.lexsort((when, event, sub))
    sub, event, when = sub[order], event[order], when[order]
    first = np.ones(len(sub), dtype=np.bool_)  # the first arrival of an event counts
    first[1:] = (sub[1:] != sub[:-1]) | (event[1:] != event[:-1])
    keep = first & counted[event]
    f_sub, f_event = sub[keep], event[keep]
    delay = when[keep] - published[f_event]
    on_time = delay <= lifetime[draws.event_key[f_event]]
    delay_ms = delay / TICKS_PER_MS

    warnings: list[str] = []
    subscribers: dict[str, SubscriberStats] = {}
    by_sub = np.argsort(f_sub, kind="stable")
    bounds = np.concatenate(([0], np.cumsum(np.bincount(f_sub, minlength=n_subs))))
    for s, sid in enumerate(network.subscriber_ids):
        mine = by_sub[bounds[s] : bounds[s + 1]]
        m = int(matching[s])
        k = int(on_time[mine].sum())
        d = delay_ms[mine]
        if m == 0:
            warnings.append(f"{sid}: no matching event was published in {draws.seconds:g} s; reliability undefined")
        subscribers[sid] = SubscriberStats(
            reliability=k / m if m else math.nan,
            on_time=k,
            delivered=len(mine),
            matching=m,
            mean_delay_ms=float(d.mean()) if len(d) else math.nan,
            p95_delay_ms=float(np.percentile(d, 95)) if len(d) else math.nan,
        )

    visits = np.flatnonzero(schedule.arrived & schedule.at_broker)
    vb = network.link_broker[draws.row_link[visits]]
    arrive = schedule.arrived_at[visits]
    depart = schedule.departed_at[visits]
    service = _ticks(draws.row_service_ms[visits])
    busy = np.clip(depart, 0, window) - np.clip(depart - service, 0, window)
    inside = (arrive >= 0) & (arrive < window)
    n_b = len(network.broker_ids)
    arrivals = np.bincount(vb[inside], minlength=n_b)
    wait_sum = np.bincount(vb[inside], weights=(depart - service - arrive)[inside] / TICKS_PER_MS, minlength=n_b)
    service_sum = np.bincount(vb[inside], weights=service[inside] / TICKS_PER_MS, minlength=n_b)
    busy_sum = np.bincount(vb, weights=busy.astype(np.float64), minlength=n_b)
    brokers: dict[str, BrokerStats] = {}
    for b, bid in enumerate(network.broker_ids):
        a = int(arrivals[b])
        rho = float(busy_sum[b]) / window
        if rho >= _RHO_WARNING:
            warnings.append(f"{bid}: measured rho {rho:.2f} >= {_RHO_WARNING}, the queue may not be stable")
        brokers[bid] = BrokerStats(
            arrival_rate_per_s=a / draws.seconds,
            rho=rho,
            mean_wait_ms=float(wait_sum[b]) / a if a else 0.0,
            mean_service_ms=float(service_sum[b]) / a if a else 0.0,
            arrivals=a,
        )
    if schedule.fallback:
        warnings.append("a cyclic broker component did not settle; its times come from the event-driven loop")

    return SimulationResult(
        seconds=draws.seconds,
        warmup_s=draws.warmup_s,
        seed=seed,
        subscribers=subscribers,
        brokers=brokers,
        event_hops=int(schedule.sent.sum()),
        events=len(draws.published_at_ms),
        sweeps=schedule.sweeps,
        warnings=tuple(warnings),
        telemetry=_telemetry(network, draws, schedule) if telemetry else None,
    )


def _telemetry(network: Network, draws: Draws, schedule: Schedule) -> Telemetry:
    rows = np.flatnonzero(schedule.sent)
    link = draws.row_link[rows]
    sent_at = schedule.sent_at[rows]
    order = np.lexsort((rows, sent_at, link))
    rows, link, sent_at = rows[order], link[order], sent_at[order]
    starts = np.concatenate(([0], np.cumsum(np.bincount(link, minlength=len(network.link_from)))))
    seq = np.arange(len(rows), dtype=np.int64) - starts[link]
    lost = draws.row_lost[rows]
    delay = schedule.arrived_at[rows] - sent_at
    links = LinkSamples(
        link=link,
        seq=seq,
        sent_at_ms=sent_at / TICKS_PER_MS,
        delay_ms=np.where(lost, np.nan, delay / TICKS_PER_MS),
        lost=lost,
        event=draws.row_event[rows],
    )

    visits = np.flatnonzero(schedule.arrived & schedule.at_broker)
    row_broker = network.link_broker[draws.row_link[visits]]
    arrive = schedule.arrived_at[visits]
    order = np.lexsort((visits, arrive, row_broker))
    visits, arrive, broker = visits[order], arrive[order], row_broker[order]
    service = _ticks(draws.row_service_ms[visits])
    start = schedule.departed_at[visits] - service
    queue = np.zeros(len(visits), dtype=np.int64)
    bstarts = np.concatenate(([0], np.cumsum(np.bincount(broker, minlength=len(network.broker_ids)))))
    for b in range(len(network.broker_ids)):
        lo, hi = int(bstarts[b]), int(bstarts[b + 1])
        # waiting when n arrives: the events ahead of n in FIFO order whose service starts
        # after A_n (starts are non-decreasing in FIFO order)
        ahead = np.arange(hi - lo) - np.searchsorted(start[lo:hi], arrive[lo:hi], side="right")
        queue[lo:hi] = np.maximum(ahead, 0)
    brokers = BrokerSamples(
        broker=broker,
        event=draws.row_event[visits],
        arrived_at_ms=arrive / TICKS_PER_MS,
        wait_ms=(start - arrive) / TICKS_PER_MS,
        service_ms=service / TICKS_PER_MS,
        queue_length=queue,
    )

    got = np.flatnonzero(schedule.arrived & ~schedule.at_broker)
    when = schedule.arrived_at[got]
    order = np.lexsort((got, when))
    got, when = got[order], when[order]
    receipts = Receipts(
        subscriber=network.link_subscriber[draws.row_link[got]],
        event=draws.row_event[got],
        received_at_ms=when / TICKS_PER_MS,
    )

    events = EventTable(
        publisher=draws.event_publisher,
        content=network.content_index[draws.event_key],
        published_at_ms=_ticks(draws.published_at_ms) / TICKS_PER_MS,
        lifetime_ms=network.content_lifetime_ms[draws.event_key],
    )
    return Telemetry(
        broker_ids=network.broker_ids,
        publisher_ids=network.publisher_ids,
        subscriber_ids=network.subscriber_ids,
        link_from=network.link_from,
        link_to=network.link_to,
        links=links,
        brokers=brokers,
        receipts=receipts,
        events=events,
    )


def simulate(
    system: Mapping[str, object],
    seconds: float,
    seed: int,
    matcher: Matcher,
    collect_telemetry: bool = False,
    *,
    warmup_s: float | None = None,
) -> SimulationResult:
    """Simulate a docs/reference/qos-predict.md system and measure every subscriber's R_s (``qos simulate``).

    Parameters
    ----------
    system : mapping
        The docs/reference/qos-predict.md system document.
    seconds : float
        Counting window [0, seconds) of simulated time.
    seed : int
        All randomness comes from ``numpy.random.default_rng(seed)``; the same seed gives the
        same result.
    matcher : callable
        ``matcher(filter_text, attributes) -> bool`` (for instance a cached
        ``routing.matching.language.parse_filter(text).matches(attributes)``).
    collect_telemetry : bool
        Also return column tables of every transmission, broker visit, receipt and event.
    warmup_s : float, optional
        Warm-up and cool-down length (default 10% of ``seconds``, at most 300 s).

    Returns
    -------
    SimulationResult
        Per subscriber R_s and delays, per broker load, the work done (``event_hops``: link
        transmissions simulated, lost ones and warm-up included) and, on request, telemetry.

    Raises
    ------
    ValueError
        For an invalid system (see :func:`routing.reliability.system.compile_system`) or run
        parameters.

    Notes
    -----
    :func:`routing.reliability.system.compile_system`, :func:`draw_inputs`, :func:`solve` and
    :func:`measure` are the steps; call them directly to reuse a compiled network across seeds or
    to compare solvers.
    """
    network = compile_system(system, matcher)
    draws = draw_inputs(network, seconds, seed, warmup_s)
    schedule = solve(network, draws)
    return _measure(network, draws, schedule, seed, collect_telemetry)


def _json_number(x: float) -> float | None:
    return None if math.isnan(x) else x


def to_spec_output(result: SimulationResult) -> dict[str, Any]:
    """The docs/reference/qos-predict.md output document of a simulation run.

    ``reliability_low`` / ``reliability_high`` are the 90% Wilson interval on on_time/matching
    (it ignores the autocorrelation that shared queues cause; docs/reference/reliability-model.md §6.7). Undefined
    values (no matching events, nothing delivered) are ``None`` (JSON null).

    Examples
    --------
    >>> r = SimulationResult(1.0, 0.0, 0, {"s1": SubscriberStats(0.9, 90, 95, 100, 12.0, 30.0)},
    ...                      {"b1": BrokerStats(100.0, 0.5, 4.0, 5.0, 100)}, 300, 100, 0)
    >>> out = to_spec_output(r)
    >>> out["model"], out["subscribers"]["s1"]["reliability"], round(out["subscribers"]["s1"]["reliability_low"], 3)
    ('simulation', 0.9, 0.84)
    """
    subscribers: dict[str, object] = {}
    for sid, s in result.subscribers.items():
        low, high = wilson_interval(s.on_time, s.matching)
        defined = s.matching > 0
        subscribers[sid] = {
            "reliability": _json_number(s.reliability),
            "reliability_low": low if defined else None,
            "reliability_high": high if defined else None,
            "mean_delay_ms": _json_number(s.mean_delay_ms),
            "p95_delay_ms": _json_number(s.p95_delay_ms),
        }
    brokers: dict[str, object] = {
        bid: {"arrival_rate_per_s": b.arrival_rate_per_s, "rho": b.rho, "mean_wait_ms": b.mean_wait_ms}
        for bid, b in result.brokers.items()
    }
    return {"model": "simulation", "subscribers": subscribers, "brokers": brokers, "warnings": list(result.warnings)}
