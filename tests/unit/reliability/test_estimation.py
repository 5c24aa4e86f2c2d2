"""Online estimation from telemetry (``routing.reliability.estimation``).

What is checked, all with fixed seeds and in seconds:

- ``Moments``: any split of the data, added or merged in any grouping, gives numpy's two-pass
  count, mean, variance, third central sum and E[X^3] (property test);
- ``DelaySketch``: CDF and quantile accuracy on 10^5 delays against the exact empirical CDF, the
  accuracy the predictor needs at R near 0.99; merges are exact (any split gives the same state);
  the atom at 0, point masses, the grid pmf and its tail, the compact empirical distribution;
- ``SequenceLog`` against a set of ints, ``RollingWindow`` against a list model (stateful test),
  link loss with its grace period, reordering and duplicates;
- ``TelemetryEstimator`` on hand-made batches (deadlines, late and missing receipts, duplicates,
  out-of-order arrival of publications, matches and receipts, bounded state, ``to_system``), and
  on the telemetry of ``routing.reliability.simulation.simulate``: the estimates recover the simulated
  parameters within statistical tolerances and the measured R_s equals the simulator's own;
- every class round-trips through ``to_bytes``/``from_bytes``.

Hypothesis strategies are local: they are a few lists of numbers, not records
(``tests/strategies.py`` holds the record strategies).
"""

from __future__ import annotations

import ast
import itertools
import math
import sys
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from numpy.typing import NDArray
from scipy.stats import binomtest

from routing.matching.language import parse_filter
from routing.reliability.estimation import (
    DelaySketch,
    EstimationConfig,
    LinkLossEstimate,
    Moments,
    RollingWindow,
    SequenceLog,
    Tally,
    TelemetryEstimator,
    batch_means_interval,
)
from routing.reliability.simulation import Telemetry, compile_system, simulate, wilson_interval

ROOT = Path(__file__).resolve().parents[3]
PROPERTY = settings(max_examples=60, deadline=None)


@cache
def _filter(text: str) -> Any:
    return parse_filter(text)


def matcher(text: str, attributes: Any) -> bool:
    return bool(_filter(text).matches(attributes))


def _splits(draw: st.DrawFn, n: int) -> list[int]:
    cuts = draw(st.lists(st.integers(0, n), max_size=6))
    return [0, *sorted(cuts), n]


# --------------------------------------------------------------------------------------------
# Moments
# --------------------------------------------------------------------------------------------


@st.composite
def values_and_splits(draw: st.DrawFn) -> tuple[NDArray[np.float64], list[int]]:
    values = draw(st.lists(st.floats(-1e3, 1e3, allow_nan=False), max_size=80))
    return np.array(values, dtype=np.float64), _splits(draw, len(values))


@PROPERTY
@given(values_and_splits())
def test_moments_of_any_split_equal_numpy(case: tuple[NDArray[np.float64], list[int]]) -> None:
    x, cuts = case
    parts = [x[a:b] for a, b in itertools.pairwise(cuts)]
    added = Moments()  # one estimator, one batch after another
    merged = Moments()  # one estimator per batch, merged
    for part in parts:
        added.add(part)
        one = Moments()
        one.add(part)
        merged.merge(one)
    n = len(x)
    scale = max(1.0, float(np.abs(x).max())) if n else 1.0
    for m in (added, merged):
        assert m.count == n
        if n == 0:
            assert math.isnan(m.mean) and math.isnan(m.third_moment)
            continue
        d = x - x.mean()
        m2, m3 = m.central_sums
        assert m.mean == pytest.approx(x.mean(), abs=1e-10 * scale)
        assert m2 == pytest.approx(float(d @ d), abs=1e-9 * n * scale**2)
        assert m3 == pytest.approx(float((d**3).sum()), abs=1e-8 * n * scale**3)
        assert m.third_moment == pytest.approx(float(np.mean(x**3)), abs=1e-9 * scale**3)
        if n > 1:
            assert m.variance == pytest.approx(float(x.var(ddof=1)), abs=1e-9 * scale**2)
        else:
            assert math.isnan(m.variance) and math.isnan(m.scv)


def test_moments_recover_exponential_scv_and_third_moment() -> None:
    x = np.random.default_rng(3).exponential(5.0, 200_000)
    m = Moments()
    for part in np.array_split(x, 7):
        m.add(part)
    assert m.scv == pytest.approx(1.0, abs=4 * 2 / math.sqrt(len(x)))  # se of the scv estimate: 2/sqrt(n)
    assert m.third_moment == pytest.approx(6 * 5.0**3, abs=4 * float(np.std(x**3)) / math.sqrt(len(x)))
    zero = Moments()
    zero.add([0.0, 0.0])
    assert zero.scv == 0.0 and zero.variance == 0.0


# --------------------------------------------------------------------------------------------
# Tally and intervals
# --------------------------------------------------------------------------------------------


def test_tally_interval_is_wilson_and_batch_means_widen_for_clumped_outcomes() -> None:
    t = Tally()
    t.add(np.arange(100) < 90)
    other = Tally()
    other.add([True, False])
    t.merge(other)
    assert (t.successes, t.trials) == (91, 102)
    low, high = binomtest(91, 102).proportion_ci(0.9, method="wilson")
    assert t.interval(0.9) == pytest.approx((low, high))
    # the same 900/1000 successes, clumped into whole batches, are far more uncertain than binomial
    k = np.array([100] * 9 + [0])
    n = np.full(10, 100)
    b_low, b_high = batch_means_interval(k, n, 0.9)
    w_low, w_high = wilson_interval(900, 1000, 0.9)
    assert b_low < w_low and b_high > w_high
    assert all(math.isnan(v) for v in batch_means_interval(np.array([3]), np.array([4]), 0.9))


# --------------------------------------------------------------------------------------------
# DelaySketch
# --------------------------------------------------------------------------------------------


def _delays(kind: str, seed: int) -> NDArray[np.float64]:
    rng = np.random.default_rng(seed)
    if kind == "lognormal":  # mean 100, cv 1
        s2 = math.log(2.0)
        return rng.lognormal(math.log(100.0) - s2 / 2, math.sqrt(s2), 100_000)
    if kind == "exponential":
        return rng.exponential(100.0, 100_000)
    x = rng.exponential(500.0, 100_000)  # an M/M/1 wait at rho 0.8: an atom of 0.2 at 0
    x[rng.random(100_000) < 0.2] = 0.0
    return x


QS = np.array([0.5, 0.9, 0.95, 0.99, 0.995, 0.999])


@pytest.mark.parametrize("kind", ["lognormal", "exponential", "wait"])
@pytest.mark.parametrize("seed", [0, 1])
def test_sketch_cdf_is_accurate_where_r_is_near_099(kind: str, seed: int) -> None:
    """Against the exact empirical CDF of the same data: |dF| <= 5e-4 everywhere tested, at most 2%
    of 1 - F at the 0.99 quantile (KLL with k = 1000 measured 5-9%), quantiles within alpha."""
    x = _delays(kind, seed)
    sketch = DelaySketch(relative_accuracy=0.005)
    for part in np.array_split(x, 5):
        sketch.add(part)
    points = np.quantile(x, QS)
    exact = np.searchsorted(np.sort(x), points, side="right") / len(x)
    error = np.abs(sketch.cdf(points) - exact)
    assert error.max() <= 5e-4, dict(zip(QS.tolist(), error.tolist(), strict=True))
    assert error[3] <= 0.02 * (1.0 - exact[3])
    assert np.abs(sketch.quantile(QS) / points - 1.0).max() <= 0.005
    assert sketch.count == len(x) and sketch.max == x.max() and sketch.min == x.min()


@st.composite
def delays_and_splits(draw: st.DrawFn) -> tuple[NDArray[np.float64], list[int]]:
    value = st.one_of(st.just(0.0), st.floats(0.0, 1e-3), st.floats(1e-3, 1e6, allow_nan=False))
    values = draw(st.lists(value, max_size=60))
    return np.array(values, dtype=np.float64), _splits(draw, len(values))


def _same_state(a: dict[str, NDArray[Any]], b: dict[str, NDArray[Any]]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


@PROPERTY
@given(delays_and_splits())
def test_sketch_merges_are_exact_in_any_order(case: tuple[NDArray[np.float64], list[int]]) -> None:
    x, cuts = case
    whole = DelaySketch()
    whole.add(x)
    parts = []
    for a, b in itertools.pairwise(cuts):
        part = DelaySketch()
        part.add(x[a:b])
        parts.append(part)
    forward, backward = DelaySketch(), DelaySketch()
    for part in parts:
        forward.merge(part)
    for part in reversed(parts):
        backward.merge(part)
    assert _same_state(forward.to_state(), whole.to_state())
    assert _same_state(backward.to_state(), whole.to_state())
    assert _same_state(DelaySketch.from_bytes(whole.to_bytes()).to_state(), whole.to_state())
    if len(x):
        grid = np.linspace(0.0, float(x.max()) * 1.1, 17)
        cdf = whole.cdf(grid)
        assert np.all(np.diff(cdf) >= 0) and cdf[-1] == 1.0


def test_sketch_atoms_point_masses_and_grid_pmf() -> None:
    s = DelaySketch()
    s.add([0.0, 0.0, 20.0, 20.0])  # half at 0, half at exactly 20
    assert s.cdf([-1.0, 0.0, 19.99, 20.0]).tolist() == [0.0, 0.5, 0.5, 1.0]
    assert s.quantile([0.0, 0.5, 0.75, 1.0]).tolist() == [0.0, 0.0, 20.0, 20.0]
    mass, tail = s.pmf_on_grid(10.0, 3)  # [0, 10), [10, 20), [20, 30): 20 is in the third cell
    assert mass.tolist() == [0.5, 0.0, 0.5] and tail == 0.0
    mass, tail = s.pmf_on_grid(10.0, 2)  # the grid ends at 20: that mass is beyond it, late
    assert mass.tolist() == [0.5, 0.0] and tail == 0.5
    x = _delays("lognormal", 4)
    s = DelaySketch()
    s.add(x)
    mass, tail = s.pmf_on_grid(5.0, 80)  # to 400 ms, about the 0.99 quantile
    exact = np.histogram(x, bins=np.arange(81) * 5.0)[0] / len(x)
    assert np.abs(mass - exact).max() < 5e-4
    assert tail == pytest.approx(np.mean(x >= 400.0), abs=2e-4)
    assert mass.sum() + tail == pytest.approx(1.0)
    with pytest.raises(ValueError, match="finite and >= 0"):
        s.add([1.0, -2.0])
    with pytest.raises(ValueError, match="different parameters"):
        s.merge(DelaySketch(0.01))
    empty = DelaySketch()
    assert math.isnan(float(empty.cdf(1.0))) and math.isnan(float(empty.quantile(0.5)))


@pytest.mark.parametrize("kind", ["lognormal", "exponential", "wait"])
def test_sketch_to_distribution_is_compact_and_keeps_the_tail(kind: str) -> None:
    x = _delays(kind, 2)
    s = DelaySketch()
    s.add(x)
    dist = s.to_distribution(max_points=200)
    assert len(dist.values) <= 200 < s.buckets
    assert sum(dist.probs) == pytest.approx(1.0, abs=1e-9)
    assert dist.mean == pytest.approx(x.mean(), rel=0.005)
    for q in (0.5, 0.9, 0.99):  # within 10% of 1 - F, near R = 0.99 included (measured: about 6%)
        near = np.quantile(x, np.linspace(q - (1 - q) / 2, q + (1 - q) / 2, 21))
        exact = np.searchsorted(np.sort(x), near, side="right") / len(x)
        assert np.abs(dist.cdf(near) - exact).max() <= 0.1 * (1 - q)
    small = DelaySketch()
    small.add([5.0, 5.0, 7.0])
    assert small.to_distribution(200).values == pytest.approx((5.0, 7.0), rel=0.005)


# --------------------------------------------------------------------------------------------
# SequenceLog and link loss
# --------------------------------------------------------------------------------------------


@st.composite
def seqs_and_splits(draw: st.DrawFn) -> tuple[NDArray[np.int64], list[int]]:
    values = draw(st.lists(st.integers(0, 60), max_size=80))
    return np.array(values, dtype=np.int64), _splits(draw, len(values))


@PROPERTY
@given(seqs_and_splits())
def test_sequence_log_counts_distinct_numbers_like_a_set(case: tuple[NDArray[np.int64], list[int]]) -> None:
    seqs, cuts = case
    log, merged = SequenceLog(), SequenceLog()
    for a, b in itertools.pairwise(cuts):
        log.add(seqs[a:b])
        part = SequenceLog()
        part.add(seqs[a:b])
        merged.merge(part)
    seen = set(seqs.tolist())
    for got in (log, merged, SequenceLog.from_bytes(log.to_bytes())):
        assert got.received == len(seen)
        assert got.expected == (max(seen) - min(seen) + 1 if seen else 0)
        runs = sum(1 for s in seen if s - 1 not in seen)
        assert got.runs == runs


def test_link_loss_waits_for_the_grace_period_and_forgives_reordering() -> None:
    est = TelemetryEstimator(EstimationConfig(bucket_ms=1000, buckets=10, grace_ms=2000))
    seq = np.arange(1000)
    sent = seq * 10.0  # 100 messages per second for 10 s
    lost = np.isin(seq, [100, 500, 700, 995])
    est.add_link_samples(["b1"] * 1000, ["b2"] * 1000, seq, sent, np.full(1000, 5.0), lost)
    est.add_link_samples(["b1"] * 2, ["b2"] * 2, [10, 10], [100.0, 100.0], [5.0, 6.0])  # duplicates
    loss = est.link("b1->b2", 10_000.0).loss  # settled: buckets ending by 8 s, seq 0..799
    assert (loss.received, loss.expected) == (797, 800)
    assert (loss.reliability_low, loss.reliability_high) == wilson_interval(797, 800, 0.9)
    est.add_link_samples(["b1"], ["b2"], [700], [7000.0], [3100.0])  # 700 was only late
    loss = est.link("b1->b2", 10_000.0).loss
    assert (loss.received, loss.expected) == (798, 800)
    link = est.link("b1->b2", 10_000.0)
    assert link is not None and link.delivered == 1000 - 4 + 2 + 1
    assert est.link("b2->b1", 10_000.0) is None
    empty = LinkLossEstimate.from_log(None)
    assert (
        empty.expected == 0
        and math.isnan(empty.reliability)
        and (empty.reliability_low, empty.reliability_high) == (0, 1)
    )


# --------------------------------------------------------------------------------------------
# RollingWindow: a stateful test against a list of the values kept
# --------------------------------------------------------------------------------------------

BUCKET_MS, BUCKETS, RETAIN = 10, 3, 4


class WindowMachine(RuleBasedStateMachine):
    """``RollingWindow[Tally]`` against a list of (key, bucket, outcome): the buckets kept are the
    last ``RETAIN`` up to the newest seen, and a query merges its ``BUCKETS`` buckets."""

    def __init__(self) -> None:
        super().__init__()
        self.window = RollingWindow(Tally, bucket_ms=BUCKET_MS, buckets=BUCKETS, retain=RETAIN)
        self.kept: list[tuple[str, int, bool]] = []
        self.newest: int | None = None
        self.dropped = 0

    def _rotate(self, newest: int) -> None:
        self.newest = newest if self.newest is None else max(self.newest, newest)
        self.kept = [v for v in self.kept if v[1] > self.newest - RETAIN]

    @rule(key=st.sampled_from(["a", "b"]), times=st.lists(st.integers(0, 300), min_size=1, max_size=6))
    def add(self, key: str, times: list[int]) -> None:
        outcomes = [t % 3 == 0 for t in times]
        self.window.add(key, np.array(times, dtype=np.float64), np.array(outcomes))
        buckets = [t // BUCKET_MS for t in times]
        self._rotate(max(buckets))
        assert self.newest is not None
        for b, ok in zip(buckets, outcomes, strict=True):
            if b > self.newest - RETAIN:
                self.kept.append((key, b, ok))
            else:
                self.dropped += 1

    @rule(now=st.integers(0, 320))
    def advance(self, now: int) -> None:
        self.window.advance(float(now))
        self._rotate(math.ceil(now / BUCKET_MS) - 1)

    @rule(key=st.sampled_from(["a", "b"]), end=st.integers(0, 330))
    def query(self, key: str, end: int) -> None:
        e = math.ceil(end / BUCKET_MS) - 1
        inside = [ok for k, b, ok in self.kept if k == key and e - BUCKETS < b <= e]
        got = self.window.query(key, float(end))
        if not inside:
            assert got is None
        else:
            assert got is not None and (got.successes, got.trials) == (sum(inside), len(inside))
            got.merge(got)  # the caller's own: the window's next answer is unchanged
            again = self.window.query(key, float(end))
            assert again is not None and (again.successes, again.trials) == (sum(inside), len(inside))
        start, stop = self.window.span(float(end))
        assert (start, stop) == ((e - BUCKETS + 1) * BUCKET_MS, (e + 1) * BUCKET_MS)

    @invariant()
    def same_keys_and_round_trip(self) -> None:
        assert self.window.keys() == sorted({k for k, _, _ in self.kept})
        assert self.window.late_dropped == self.dropped
        copy = RollingWindow.from_bytes(self.window.to_bytes(), Tally)
        assert copy.to_state().keys() == self.window.to_state().keys()
        assert _same_state(copy.to_state(), self.window.to_state())


TestRollingWindow = WindowMachine.TestCase
TestRollingWindow.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)


def test_rolling_window_holds_sketches_and_sequence_logs() -> None:
    w = RollingWindow(lambda: DelaySketch(0.01), bucket_ms=1000, buckets=2)
    w.add("l", [0.0, 1500.0, 1600.0], np.array([1.0, 2.0, 3.0]))
    merged = w.query("l", 2000.0)
    assert merged is not None and merged.count == 3 and merged.relative_accuracy == 0.01
    copy = RollingWindow.from_bytes(w.to_bytes(), lambda: DelaySketch(0.01))
    assert _same_state(copy.to_state(), w.to_state())
    logs = RollingWindow(SequenceLog, bucket_ms=1000, buckets=2)
    logs.add("l", [0.0, 10.0, 1500.0], np.array([0, 1, 3]))
    log = logs.query("l", 2000.0)
    assert log is not None and (log.received, log.expected) == (3, 4)
    with pytest.raises(ValueError, match="2 times but 3 values"):
        w.add("l", [0.0, 1.0], np.array([1.0, 2.0, 3.0]))


# --------------------------------------------------------------------------------------------
# TelemetryEstimator on hand-made batches
# --------------------------------------------------------------------------------------------


def test_measured_reliability_counts_resolved_events_only() -> None:
    est = TelemetryEstimator(EstimationConfig(bucket_ms=1000, buckets=10))
    # receipts may come before the publication and the match records
    est.add_receipts(["s1", "s1", "s1", "s2"], ["e1", "e1", "e2", "e1"], [150.0, 160.0, 700.0, 130.0])
    est.add_publications(["p"] * 4, ["e1", "e2", "e3", "e4"], [100.0, 200.0, 300.0, 900.0], [100.0, 400.0, 50.0, 500.0])
    est.add_publications(["p"], ["e1"], [100.0], [100.0])  # a duplicate publication counts once
    est.add_matches(["e1", "e2", "e3", "e4"], [["s1"], ["s1"], ["s1", "s2"], ["s1"]])
    est.advance(1000.0)
    s1 = est.subscriber("s1", 1000.0)
    assert s1 is not None
    # e1 on time (first of two receipts), e2 late (700 > 600), e3 missed, e4 not due (deadline 1400)
    assert (s1.on_time, s1.matching, s1.receipts) == (1, 3, 2)  # receipt delays 50 and 500 ms
    assert s1.p95_delay_ms == pytest.approx(500.0, rel=0.005)
    s2 = est.subscriber("s2", 1000.0)
    assert s2 is not None and (s2.on_time, s2.matching) == (0, 1)
    assert est.counters["unmatched_receipts"] == 1  # s2 received e1, which it does not match
    assert est.pending_events == 1  # e4
    pub = est.publisher("p", 1000.0)
    assert pub is not None and pub.events == 4 and pub.window_s == pytest.approx(0.9)
    est.add_receipts(["s1"], ["e4"], [1200.0])
    est.advance(2000.0)
    s1 = est.subscriber("s1", 2000.0)
    assert s1 is not None and (s1.on_time, s1.matching) == (2, 4)
    assert est.pending_events == 0
    est.add_receipts(["s1"], ["e9"], [2100.0])  # never published
    est.advance(20_000.0)
    assert est.pending_events == 0 and est.counters["orphans_dropped"] == 1
    assert est.subscriber("s1", 20_000.0) is None  # its buckets have left the window


def test_matches_from_attributes_and_late_receipts_within_late_ms() -> None:
    def match(events: Any) -> list[list[str]]:
        return [[s for s, f in (("s1", "t = 1"), ("s2", "t = 2")) if matcher(f, a)] for a in events]

    est = TelemetryEstimator(EstimationConfig(bucket_ms=100, buckets=20, late_ms=500), match=match)
    est.add_publications(["p", "p"], ["e1", "e2"], [0.0, 10.0], [100.0, 100.0], [{"t": 1}, {"t": 2}])
    est.advance(150.0)  # both resolved, neither received in time
    est.add_receipts(["s1"], ["e1"], [300.0])  # late, but inside late_ms: a delay sample
    est.advance(700.0)
    s1 = est.subscriber("s1", 200.0)
    assert s1 is not None and (s1.on_time, s1.matching, s1.receipts) == (0, 1, 1)
    assert s1.p95_delay_ms == pytest.approx(300.0, rel=0.01)
    assert est.pending_events == 0
    with pytest.raises(ValueError, match="2 attribute mappings for 1 events"):
        est.add_publications(["p"], ["e3"], [0.0], [1.0], [{}, {}])


def test_inputs_are_validated_with_clear_messages() -> None:
    est = TelemetryEstimator()
    with pytest.raises(ValueError, match=r"the columns must have one length \(got publisher_id 2, event_id 1"):
        est.add_publications(["p", "p"], ["e"], [0.0, 1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match=r"service_ms\[1\] must be finite and >= 0 ms \(got -1.0\)"):
        est.add_broker_samples(["b", "b"], [0.0, 1.0], [0.0, 0.0], [1.0, -1.0])
    with pytest.raises(ValueError, match=r"received_at_ms\[0\] must be a finite time"):
        est.add_receipts(["s"], ["e"], [math.nan])
    with pytest.raises(ValueError, match="level must be in"):
        EstimationConfig(level=1.5)
    with pytest.raises(ValueError, match="not a serialised Moments"):
        Moments.from_bytes(Tally().to_bytes())


def test_to_system_replaces_measured_inputs_and_reports_the_rest() -> None:
    rng = np.random.default_rng(5)
    est = TelemetryEstimator(EstimationConfig(bucket_ms=1000, buckets=60, min_samples=30))
    t = np.sort(rng.uniform(0.0, 60_000.0, 600))
    est.add_broker_samples(["b1"] * 600, t, rng.exponential(2.0, 600), rng.exponential(5.0, 600))
    seq = np.arange(600)
    est.add_link_samples(["p1"] * 600, ["b1"] * 600, seq, t, rng.lognormal(2.0, 0.5, 600), seq % 50 == 7)
    est.add_publications(["p1"] * 600, [f"e{i}" for i in range(600)], t, np.full(600, 1000.0))
    skeleton = {
        "brokers": [
            {"id": "b1", "service_ms": {"kind": "deterministic", "value": 1.0}},
            {"id": "b2", "service_ms": {"kind": "exponential", "mean": 7.0}},
        ],
        "links": [
            {"from": "p1", "to": "b1", "reliability": 1.0, "delay_ms": {"kind": "deterministic", "value": 0}},
            {"from": "b1", "to": "s1", "reliability": 0.5, "delay_ms": {"kind": "deterministic", "value": 3}},
        ],
        "publishers": [{"id": "p1", "broker": "b1", "interarrival_ms": {"kind": "exponential", "mean": 50}}],
        "subscribers": [{"id": "s1", "broker": "b1", "filter": "t = 1"}],
    }
    out = est.to_system(skeleton, 60_000.0)
    b1, b2 = out.system["brokers"]
    assert b1["service_ms"]["kind"] == "empirical" and len(b1["service_ms"]["values"]) <= 200
    assert b2 == skeleton["brokers"][1] and skeleton["brokers"][0]["service_ms"]["kind"] == "deterministic"
    access, downstream = out.system["links"]
    assert access["delay_ms"]["kind"] == "empirical"
    assert access["reliability"] == pytest.approx(1 - 11 / 550, abs=0.01)  # grace cuts the last 5 s
    assert downstream == skeleton["links"][1]
    inter = out.system["publishers"][0]["interarrival_ms"]
    assert inter["kind"] == "gamma" and inter["mean"] == pytest.approx(100.0, rel=0.1)
    assert inter["cv"] == pytest.approx(1.0, abs=0.2)  # uniform arrival times are Poisson
    assert out.no_data == (
        "broker b2 service_ms: 0 samples < 30",
        "link b1->s1 delay_ms: 0 samples < 30",
        "link b1->s1 reliability: 0 samples < 30",
    )


# --------------------------------------------------------------------------------------------
# TelemetryEstimator on the simulator's telemetry
# --------------------------------------------------------------------------------------------


def _lognormal(mean: float, cv: float) -> dict[str, Any]:
    return {"kind": "lognormal", "mean": mean, "cv": cv}


def _link(src: str, dst: str, reliability: float, delay: dict[str, Any]) -> dict[str, Any]:
    return {"from": src, "to": dst, "reliability": reliability, "delay_ms": delay}


SYSTEM: dict[str, Any] = {
    "brokers": [
        {"id": "b1", "service_ms": {"kind": "exponential", "mean": 4.0}},
        {"id": "b2", "service_ms": {"kind": "uniform", "low": 1.0, "high": 5.0}},
        {"id": "b3", "service_ms": {"kind": "exponential", "mean": 2.0}},
    ],
    "links": [
        _link("p1", "b1", 1.0, _lognormal(5.0, 0.5)),
        _link("p2", "b2", 1.0, _lognormal(5.0, 0.5)),
        _link("b1", "b2", 0.95, _lognormal(20.0, 0.5)),
        _link("b2", "b1", 1.0, _lognormal(20.0, 0.5)),
        _link("b2", "b3", 0.9, _lognormal(400.0, 0.6)),  # lossy and slow: some events are late at s3
        _link("b1", "s1", 1.0, _lognormal(10.0, 0.5)),
        _link("b2", "s2", 0.98, _lognormal(10.0, 0.5)),
        _link("b3", "s3", 1.0, _lognormal(10.0, 0.5)),
    ],
    "publishers": [
        {
            "id": "p1",
            "broker": "b1",
            "interarrival_ms": {"kind": "exponential", "mean": 25.0},
            "content": [
                {"p": 0.6, "lifetime_ms": 1000, "attributes": {"t": 1}},
                {"p": 0.4, "lifetime_ms": 1000, "attributes": {"t": 2}},
            ],
        },
        {
            "id": "p2",
            "broker": "b2",
            "interarrival_ms": {"kind": "uniform", "low": 10.0, "high": 40.0},
            "content": [
                {"p": 0.5, "lifetime_ms": 1000, "attributes": {"t": 1}},
                {"p": 0.5, "lifetime_ms": 1000, "attributes": {"t": 2}},
            ],
        },
    ],
    "subscribers": [
        {"id": "s1", "broker": "b1", "filter": "t = 2"},
        {"id": "s2", "broker": "b2", "filter": "t = 1"},
        {"id": "s3", "broker": "b3", "filter": "t = 1"},
    ],
}
SECONDS, LIFETIME_MS = 200.0, 1000.0


class Feed:
    """The telemetry tables as the streaming job would deliver them: by time, in batches."""

    def __init__(self, t: Telemetry, system: dict[str, Any]) -> None:
        self.t = t
        n = len(t.events.publisher)
        self.event_id = np.array([f"e{i}" for i in range(n)])
        self.publisher = np.array(t.publisher_ids)[t.events.publisher]
        contents = {p["id"]: p["content"] for p in system["publishers"]}
        per_content = {
            (p, c): [s["id"] for s in system["subscribers"] if matcher(s["filter"], entry["attributes"])]
            for p, content in contents.items()
            for c, entry in enumerate(content)
        }
        self.matches = [per_content[p, int(c)] for p, c in zip(self.publisher.tolist(), t.events.content, strict=True)]
        self.link_from = np.array(t.link_from)[t.links.link]
        self.link_to = np.array(t.link_to)[t.links.link]
        self.broker = np.array(t.broker_ids)[t.brokers.broker]
        self.subscriber = np.array(t.subscriber_ids)[t.receipts.subscriber]

    def run(self, est: TelemetryEstimator, start_ms: float, stop_ms: float, batch_ms: float = 5000.0) -> None:
        t = self.t
        for a in np.arange(start_ms, stop_ms, batch_ms):
            b = min(a + batch_ms, stop_ms)
            e = (t.events.published_at_ms >= a) & (t.events.published_at_ms < b)
            est.add_publications(
                self.publisher[e], self.event_id[e], t.events.published_at_ms[e], t.events.lifetime_ms[e]
            )
            est.add_matches(self.event_id[e], [self.matches[i] for i in np.flatnonzero(e)])
            k = (t.links.sent_at_ms >= a) & (t.links.sent_at_ms < b)
            L = t.links
            est.add_link_samples(
                self.link_from[k], self.link_to[k], L.seq[k], L.sent_at_ms[k], L.delay_ms[k], L.lost[k]
            )
            k = (t.brokers.arrived_at_ms >= a) & (t.brokers.arrived_at_ms < b)
            B = t.brokers
            est.add_broker_samples(self.broker[k], B.arrived_at_ms[k], B.wait_ms[k], B.service_ms[k])
            k = (t.receipts.received_at_ms >= a) & (t.receipts.received_at_ms < b)
            est.add_receipts(self.subscriber[k], self.event_id[t.receipts.event[k]], t.receipts.received_at_ms[k])
            est.advance(b)


def _scv_se(x: NDArray[np.float64]) -> float:
    """Standard error of the sample scv by the delta method: influence ((x-m)^2 - v)/m^2 - 2 v (x-m)/m^3."""
    m, v = x.mean(), x.var()
    influence = ((x - m) ** 2 - v) / m**2 - 2 * v * (x - m) / m**3
    return float(influence.std() / math.sqrt(len(x)))


def test_estimates_from_simulated_telemetry_recover_the_system() -> None:
    result = simulate(SYSTEM, SECONDS, 7, matcher, collect_telemetry=True)
    t = result.telemetry
    assert t is not None
    end = SECONDS * 1000.0
    config = EstimationConfig(bucket_ms=1000, buckets=int(SECONDS), late_ms=10_000)
    est = TelemetryEstimator(config)
    feed = Feed(t, SYSTEM)
    feed.run(est, -result.warmup_s * 1000.0, end)

    # brokers: the arrivals in [0, end) are the simulator's, so rate and mean wait are its own
    for b, bid in enumerate(t.broker_ids):
        got, sim = est.broker(bid, end), result.brokers[bid]
        assert got is not None
        mine = (t.brokers.broker == b) & (t.brokers.arrived_at_ms >= 0) & (t.brokers.arrived_at_ms < end)
        service = t.brokers.service_ms[mine]
        assert got.arrivals == sim.arrivals and got.arrival_rate_per_s == pytest.approx(sim.arrival_rate_per_s)
        assert got.mean_wait_ms == pytest.approx(sim.mean_wait_ms, rel=1e-9)
        assert got.mean_service_ms == pytest.approx(sim.mean_service_ms, rel=1e-9)
        assert got.utilisation == pytest.approx(sim.rho, abs=2e-3)  # edges: services that straddle 0 or end
        assert got.service_scv == pytest.approx(service.var(ddof=1) / service.mean() ** 2, rel=1e-9)
        assert got.service.count == got.wait.count == got.arrivals
        truth = compile_system(SYSTEM, matcher).service[b]
        se = service.std() / math.sqrt(len(service))
        assert abs(got.mean_service_ms - truth.mean) < 4 * se
        assert abs(got.service_scv - truth.scv) < 4 * _scv_se(service)
        assert abs(got.service_third_moment - truth.third_moment) < 4 * (service**3).std() / math.sqrt(len(service))

    # publishers: counts are Poisson-like with variance lambda T c_a^2 (renewal counting)
    for pid, mean, scv in (("p1", 25.0, 1.0), ("p2", 25.0, 0.12)):
        got_p = est.publisher(pid, end)
        assert got_p is not None
        expected = end / mean
        assert abs(got_p.events - expected) < 4 * math.sqrt(expected * scv)
        assert got_p.rate_per_s == pytest.approx(got_p.events / SECONDS)
        p = t.publisher_ids.index(pid)
        times = np.sort(t.events.published_at_ms[t.events.publisher == p])
        gaps = np.diff(times)[(times[1:] >= 0) & (times[1:] < end)]
        assert got_p.gaps == len(gaps) and got_p.interarrival_scv == pytest.approx(gaps.var(ddof=1) / gaps.mean() ** 2)
        assert abs(got_p.interarrival_scv - scv) < 4 * _scv_se(gaps)

    # links: counts against the telemetry, the true reliability inside a 99.9% interval
    for k, (src, dst) in enumerate(zip(t.link_from, t.link_to, strict=True)):
        got_l = est.link(f"{src}->{dst}", end)
        assert got_l is not None
        rows = t.links.link == k
        settled = rows & (t.links.sent_at_ms >= 0) & (t.links.sent_at_ms < end - config.grace_ms)
        received = t.links.seq[settled & ~t.links.lost]
        loss = got_l.loss
        assert (loss.received, loss.expected) == (len(received), int(received.max() - received.min() + 1))
        r = next(x["reliability"] for x in SYSTEM["links"] if (x["from"], x["to"]) == (src, dst))
        low, high = wilson_interval(loss.received, loss.expected, 0.999)
        assert low <= r <= high + 1e-12  # wilson_interval's upper end at k = n is 1 - 2e-16
        if loss.received == loss.expected:
            assert (loss.reliability, loss.reliability_high) == (1.0, 1.0)
        delays = t.links.delay_ms[rows & (t.links.sent_at_ms >= 0) & (t.links.sent_at_ms < end) & ~t.links.lost]
        assert got_l.delivered == len(delays) and got_l.delay is not None
        assert np.abs(got_l.delay.quantile([0.5, 0.95, 0.99]) / np.quantile(delays, [0.5, 0.95, 0.99]) - 1).max() < 0.01
        mean = next(x["delay_ms"]["mean"] for x in SYSTEM["links"] if (x["from"], x["to"]) == (src, dst))
        assert abs(got_l.mean_delay_ms - mean) < 4 * delays.std() / math.sqrt(len(delays))

    # the estimated system is a valid SPEC §4 document and simulates to the same reliabilities
    estimated = est.to_system(SYSTEM, end)
    assert estimated.no_data == ()
    replay = simulate(estimated.system, SECONDS, 8, matcher)

    # subscribers: events published in [0, end) have their deadlines in [LIFETIME, end + LIFETIME);
    # the state survives a round trip through bytes halfway
    est = TelemetryEstimator.from_bytes(est.to_bytes())
    feed.run(est, end, end + LIFETIME_MS + config.late_ms)
    for sid, sim_s in result.subscribers.items():
        got_s = est.subscriber(sid, end + LIFETIME_MS)
        assert got_s is not None
        assert (got_s.on_time, got_s.matching, got_s.receipts) == (sim_s.on_time, sim_s.matching, sim_s.delivered)
        assert got_s.reliability == sim_s.reliability
        assert got_s.reliability_low <= sim_s.reliability <= got_s.reliability_high
        assert got_s.batch_low <= sim_s.reliability <= got_s.batch_high
        assert got_s.p95_delay_ms == pytest.approx(sim_s.p95_delay_ms, rel=0.01)
        other = replay.subscribers[sid]
        se = math.sqrt(sum(x.reliability * (1 - x.reliability) / x.matching for x in (sim_s, other)))
        assert abs(other.reliability - sim_s.reliability) < 4 * se + 1e-9
    # bounded state: only the events whose deadline + late_ms is still ahead are held
    now = end + LIFETIME_MS + config.late_ms
    published = t.events.published_at_ms
    assert est.pending_events == int(
        np.count_nonzero((published < now) & (published + LIFETIME_MS + config.late_ms > now))
    )


# --------------------------------------------------------------------------------------------
# The module stays pure
# --------------------------------------------------------------------------------------------


def test_estimation_imports_only_the_standard_library_numpy_scipy_and_routing() -> None:
    tree = ast.parse((ROOT / "routing" / "reliability" / "estimation.py").read_text())
    modules = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    modules |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 0}
    roots = {m.split(".")[0] for m in modules}
    assert roots - set(sys.stdlib_module_names) - {"__future__"} <= {"numpy", "scipy", "routing"}
