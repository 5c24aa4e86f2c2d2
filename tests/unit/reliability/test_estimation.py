"""Online estimation from telemetry (``routing.reliability.estimation``).

What is checked, all with fixed seeds and in seconds:

- link loss with its grace period, reordering and duplicates;
- ``TelemetryEstimator`` on hand-made batches (deadlines, late and missing receipts, duplicates,
  out-of-order arrival of publications, matches and receipts, bounded state, ``to_system``), and
  on the telemetry of ``routing.reliability.simulator.simulate``: the estimates recover the simulated
  parameters within statistical tolerances and the measured R_s equals the simulator's own; the
  estimator round-trips through ``to_bytes``/``from_bytes``.

The summaries themselves (``Moments``, ``Tally``, ``DelaySketch``, ``SequenceLog``,
``RollingWindow``) are checked in ``tests/unit/stats/``; which modules they may import, in
``tests/unit/test_architecture.py``.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from routing.matching.language import parse_filter
from routing.reliability.estimation import EstimationConfig, LinkLossEstimate, TelemetryEstimator
from routing.reliability.simulator import Telemetry, simulate
from routing.reliability.system import compile_system
from routing.stats.intervals import wilson_interval
from routing.stats.moments import Moments, Tally


@cache
def _filter(text: str) -> Any:
    return parse_filter(text)


def matcher(text: str, attributes: Any) -> bool:
    return bool(_filter(text).matches(attributes))


# --------------------------------------------------------------------------------------------
# Link loss
# --------------------------------------------------------------------------------------------


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

    # the estimated system is a valid docs/reference/qos-predict.md document and simulates to the same reliabilities
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
