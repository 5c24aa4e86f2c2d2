"""The QoS monitor fed with a simulated overlay's records, as the QoS job feeds it from Kafka."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from producers import overlay
from routing.matching.table import SubscriptionRecord
from routing.monitors.qos import QosMonitor, QosMonitorConfig, _Empirical, _scale, _scaled, _with_cached_moments
from routing.reliability.estimation import EstimationConfig
from routing.reliability.evaluation_system import reliability_tree_system
from routing.reliability.prediction import compile_prediction, predict
from routing.reliability.simulator import SimulationResult
from routing.stats.distributions import parse_distribution

EPOCH = 10_000_000.0  # simulated ms -> "wall" ms, so warm-up times stay positive
CHUNK_MS = 10_000.0
LATENESS_MS = 5_000.0


def small_system() -> dict[str, Any]:
    return reliability_tree_system(
        5, brokers=6, publishers=4, subscribers=15, rate_per_s=4.0, ms_per_subscription=3.0, content_entries=12
    )


@pytest.fixture(scope="module")
def run() -> tuple[dict[str, Any], SimulationResult]:
    system = small_system()
    return system, overlay.run(system, 400.0, seed=4, telemetry=True)


def setup(monitor: QosMonitor, system: dict[str, Any], min_reliability: float) -> None:
    shape = overlay.setup_records(system, int(EPOCH), min_reliability)
    monitor.apply_topology([(key, rec) for topic, key, rec in shape if topic == "siftstream.topology.v1"])
    subs = [rec for topic, _key, rec in shape if topic == "siftstream.subscriptions.v1"]
    rejected = monitor.apply_subscriptions(
        [
            SubscriptionRecord(
                key=r["subscription_id"], op=r["type"], subscription_id=r["subscription_id"], filter=r["filter"]
            )
            for r in subs
        ],
        subs,
    )
    assert rejected == []


def feed(monitor: QosMonitor, system: dict[str, Any], result: SimulationResult, start: float, end: float) -> list[Any]:
    """Hand the monitor everything the overlay emitted in [start, end) simulated ms, then report."""
    tel = result.telemetry
    assert tel is not None
    content = {p["id"]: [c["attributes"] for c in p["content"]] for p in system["publishers"]}
    ev = tel.events
    mine = np.flatnonzero((ev.published_at_ms >= start) & (ev.published_at_ms < end))
    pubs = [tel.publisher_ids[p] for p in ev.publisher[mine]]
    monitor.add_events(
        [f"e{i}" for i in mine],
        pubs,
        ev.published_at_ms[mine] + EPOCH,
        ev.lifetime_ms[mine],
        [content[p][c] for p, c in zip(pubs, ev.content[mine], strict=True)],
    )
    ls = tel.links
    rows = np.flatnonzero((ls.sent_at_ms >= start) & (ls.sent_at_ms < end))
    monitor.add_link_samples(
        [tel.link_from[i] for i in ls.link[rows]],
        [tel.link_to[i] for i in ls.link[rows]],
        ls.seq[rows],
        ls.sent_at_ms[rows] + EPOCH,
        ls.delay_ms[rows],
        ls.lost[rows],
    )
    bs = tel.brokers
    rows = np.flatnonzero((bs.arrived_at_ms >= start) & (bs.arrived_at_ms < end))
    monitor.add_broker_samples(
        [tel.broker_ids[b] for b in bs.broker[rows]],
        bs.arrived_at_ms[rows] + EPOCH,
        bs.wait_ms[rows],
        bs.service_ms[rows],
    )
    rc = tel.receipts
    rows = np.flatnonzero((rc.received_at_ms >= start) & (rc.received_at_ms < end))
    monitor.add_receipts(
        [tel.subscriber_ids[s] for s in rc.subscriber[rows]],
        [f"e{i}" for i in rc.event[rows]],
        rc.received_at_ms[rows] + EPOCH,
    )
    out = []
    for window_end in monitor.advance(end + EPOCH - LATENESS_MS):
        out.append(monitor.report(window_end))
    return out


def config(bootstrap: int = 0) -> QosMonitorConfig:
    return QosMonitorConfig(
        update_period_ms=10_000,
        estimation=EstimationConfig(bucket_ms=10_000, buckets=30),
        min_events=20,
        bootstrap=bootstrap,
    )


def test_reports_predict_measure_and_explain(run: tuple[dict[str, Any], SimulationResult]) -> None:
    system, result = run
    monitor = QosMonitor(config())
    setup(monitor, system, min_reliability=0.999)
    reports = []
    t = -20_000.0
    while t < 400_000.0:
        reports += feed(monitor, system, result, t, t + CHUNK_MS)
        t += CHUNK_MS
    assert len(reports) >= 30
    records, problems = reports[-1]
    subs = {r["id"]: r for r in records if r["kind"] == "subscriber"}
    brokers = {r["id"]: r for r in records if r["kind"] == "broker"}
    assert set(subs) == {s["id"] for s in system["subscribers"]}
    assert set(brokers) == {b["id"] for b in system["brokers"]}

    # Prediction from estimated inputs agrees with measurement, subscriber by subscriber.
    pairs = [
        (r["reliability"], r["measured_reliability"])
        for r in subs.values()
        if r["reliability"] is not None and r["measured_reliability"] is not None
    ]
    assert len(pairs) >= 10
    gaps = np.abs(np.subtract(*zip(*pairs, strict=True)))
    assert gaps.mean() < 0.05, pairs
    for r in subs.values():
        if r["reliability"] is not None:
            assert r["reliability_low"] <= r["reliability"] <= r["reliability_high"]

    # Measured numbers are the simulator's (a 300 s window of the same run).
    truth = result.subscribers
    close = [
        abs(r["measured_reliability"] - truth[sid].reliability) for sid, r in subs.items() if r["measured_reliability"]
    ]
    assert np.mean(close) < 0.05

    # A wish of 0.999 is missed: critical alerts that name real elements of the overlay.
    names = {b["id"] for b in system["brokers"]} | {f"{link['from']}->{link['to']}" for link in system["links"]}
    critical = [r for r in subs.values() if r["alert"] and r["alert"]["severity"] == "critical"]
    assert critical
    for r in critical:
        assert "below the wished 0.999" in r["alert"]["message"]
        assert r["alert"]["contributors"]
        assert {c["element"] for c in r["alert"]["contributors"]} <= names
        shares = [c["share"] for c in r["alert"]["contributors"]]
        assert shares == sorted(shares, reverse=True)

    # Broker load is the measured one.
    for bid, r in brokers.items():
        assert r["rho"] == pytest.approx(result.brokers[bid].rho, abs=0.05)
        assert r["arrival_rate_per_s"] == pytest.approx(result.brokers[bid].arrival_rate_per_s, rel=0.1, abs=0.1)
    # Every broker had telemetry: none of them is reported as lacking data.
    assert not [p for p in problems if p.startswith("no data: broker")]


def test_state_round_trip_gives_the_same_reports(run: tuple[dict[str, Any], SimulationResult]) -> None:
    system, result = run
    a = QosMonitor(config())
    setup(a, system, min_reliability=0.9)
    t = -20_000.0
    while t < 100_000.0:
        feed(a, system, result, t, t + CHUNK_MS)
        t += CHUNK_MS
    b = QosMonitor.from_bytes(a.to_bytes())
    out_a = feed(a, system, result, t, t + 3 * CHUNK_MS)
    out_b = feed(b, system, result, t, t + 3 * CHUNK_MS)
    assert out_a == out_b
    assert out_a


def test_unsubscribe_and_bad_filters() -> None:
    monitor = QosMonitor(config())
    rejected = monitor.apply_subscriptions(
        [
            SubscriptionRecord(key="a", op="subscribe", subscription_id="a", filter="x > 1"),
            SubscriptionRecord(key="b", op="subscribe", subscription_id="b", filter="x >"),
            SubscriptionRecord(key="a", op="unsubscribe", subscription_id="a"),
        ],
        [{"subscriber_id": "u1"}, {"subscriber_id": "u2"}, {}],
    )
    assert [code for code, _ in rejected] == ["invalid_filter"]
    assert monitor.wishes == {}


def test_bootstrap_intervals_cover_the_truth(run: tuple[dict[str, Any], SimulationResult]) -> None:
    """Intervals from estimated inputs, widened by the bootstrap, hold the simulator's R_s (within
    its own 90% noise band) for at least 85% of the subscribers; without it they are narrower."""
    system, result = run
    widths = {}
    for b in (0, 20):
        monitor = QosMonitor(config(bootstrap=b))
        setup(monitor, system, min_reliability=0.9)
        records, _ = feed(monitor, system, result, -20_000.0, 420_000.0)[-1]
        subs = [r for r in records if r["kind"] == "subscriber" and r["reliability"] is not None]
        widths[b] = np.mean([r["reliability_high"] - r["reliability_low"] for r in subs])
        if b:
            covered = []
            for r in subs:
                truth = result.subscribers[r["id"]]
                band = 1.645 * np.sqrt(max(truth.reliability * (1 - truth.reliability), 1e-9) / truth.matching)
                covered.append(r["reliability_low"] - band <= truth.reliability <= r["reliability_high"] + band)
            assert np.mean(covered) >= 0.85, covered
    assert widths[20] > widths[0]


def test_bootstrap_on_the_compiled_overlay_matches_the_reference(
    run: tuple[dict[str, Any], SimulationResult],
) -> None:
    """The fast redraws (the compiled overlay with the redrawn distributions swapped in, the point
    R'_s alone) draw the same numbers and give the same predictions as the reference (a redrawn
    document each, predicted from scratch), also for a subscriber with two subscriptions.

    Tolerance 1e-12: a fast redraw scales an empirical distribution's moments instead of summing
    the scaled values again (equal to a few ulps), and predicts one queue state, not four (a
    matrix product over fewer rows may round differently); measured differences are below 1e-15."""
    system, result = run
    monitor = QosMonitor(config(bootstrap=4))
    setup(monitor, system, min_reliability=0.9)
    owner = system["subscribers"][0]
    extra = SubscriptionRecord(key="extra", op="subscribe", subscription_id="extra", filter=owner["filter"])
    assert monitor.apply_subscriptions([extra], [{"subscriber_id": owner["id"], "broker": owner["broker"]}]) == []
    feed(monitor, system, result, -20_000.0, 120_000.0)
    end = monitor.last_report_ms
    assert end is not None
    estimated = monitor.estimator.to_system(monitor.system(), float(end))
    expanded, model = monitor._expand(estimated.system)
    assert sum(1 for wish in model.values() if wish.subscriber_id == owner["id"]) == 2
    compiled = compile_prediction(expanded)
    cached = _with_cached_moments(compiled)
    fast = monitor._redraws(expanded, end, cached)
    reference = monitor._redraws_reference(expanded, end)
    assert len(fast) == 4
    assert [sorted(d) for d in fast] == [sorted(d) for d in reference]
    for f, r in zip(fast, reference, strict=True):
        assert all(f[k] == pytest.approx(r[k], abs=1e-12) for k in r)
    point = predict(expanded, model="gg1", compiled=cached)
    assert point == predict(expanded, model="gg1")  # cached moments: the very same numbers
    fast_point = monitor._bootstrap(expanded, point, end, cached)
    reference_point = monitor._bootstrap(expanded, point, end)
    for sid, want in reference_point.subscribers.items():
        got = fast_point.subscribers[sid]
        assert got.reliability == want.reliability
        for name in ("reliability_low", "reliability_high"):
            a, b = getattr(got, name), getattr(want, name)
            assert (a is None and b is None) or a == pytest.approx(b, abs=1e-12)


@pytest.mark.parametrize(
    "dist",
    [
        {"kind": "empirical", "values": [0.0, 1.5, 4.0], "probs": [0.25, 0.5, 0.25]},
        {"kind": "gamma", "mean": 3.0, "cv": 0.5},
        {"kind": "deterministic", "value": 2.0},
        {"kind": "uniform", "low": 1.0, "high": 3.0},
    ],
)
def test_scaled_distribution_is_the_parsed_scaled_dist(dist: dict[str, Any]) -> None:
    got = _scaled(dist, 1.7)
    scaled = dict(dist)
    _scale(scaled, 1.7)
    want = parse_distribution(scaled)
    assert isinstance(got, type(want))
    assert (got.mean, got.variance, got.third_moment) == (want.mean, want.variance, want.third_moment)
    assert np.array_equal(got.cdf([0.0, 2.0, 5.0]), want.cdf([0.0, 2.0, 5.0]))
    before = {k: list(v) if isinstance(v, list) else v for k, v in dist.items()}
    _scaled(dist, 3.0)
    assert dist == before  # the DIST itself is not changed


def test_scaled_empirical_keeps_values_and_scales_moments() -> None:
    """A redraw's empirical distribution (:meth:`_Empirical.scaled`) has the scaled DIST's values
    and cdf exactly, and its moments to a few ulps; the cached cdf is Empirical's."""
    dist = {"kind": "empirical", "values": [0.0, 1.5, 4.0, 4.0, 9.25], "probs": [0.2, 0.3, 0.1, 0.25, 0.15]}
    base = _Empirical(tuple(dist["values"]), tuple(dist["probs"]))
    want = _scaled(dist, 1.37)
    got = base.scaled(1.37)
    assert got.values == want.values and got.probs == want.probs
    x = [-1.0, 0.0, 2.0, 5.48, 5.5, 20.0]
    assert np.array_equal(got.cdf(x), parse_distribution(dict(dist, values=list(want.values))).cdf(x))
    assert np.array_equal(base.cdf(x), parse_distribution(dist).cdf(x))
    for name in ("mean", "variance", "third_moment"):
        assert getattr(got, name) == pytest.approx(getattr(want, name), rel=1e-14)


def test_the_subscribers_an_event_matches_follow_a_subscription_that_changes_owner() -> None:
    """The rank -> subscriber numbering is kept between batches until the subscriptions change."""

    def sub(sid: str, owner: str, text: str) -> SubscriptionRecord:
        return SubscriptionRecord(
            key=sid,
            tombstone=False,
            op="subscribe",
            subscription_id=sid,
            filter=text,
            composite=None,
            subscriber_id=owner,
        )

    m = QosMonitor()
    m.apply_subscriptions(
        [sub("s1", "alice", "a = 1"), sub("s2", "bob", "a > 0")], [{"subscriber_id": "alice"}, {"subscriber_id": "bob"}]
    )
    assert m._match([{"a": 1}, {"a": 2}]).lists() == [["alice", "bob"], ["bob"]]
    assert m._match([{"a": 2}, {"a": 1}]).lists() == [["bob"], ["alice", "bob"]]  # the kept numbering
    m.apply_subscriptions([sub("s1", "carol", "a = 1")], [{"subscriber_id": "carol"}])
    assert m._match([{"a": 1}]).lists() == [["bob", "carol"]]
    m.apply_subscriptions([sub("s3", "alice", "a = 2")], [{"subscriber_id": "alice"}])
    assert m._match([{"a": 2}, {"a": 1}]).lists() == [["alice", "bob"], ["bob", "carol"]]
    restored = QosMonitor.from_bytes(m.to_bytes())
    assert restored._match([{"a": 2}, {"a": 1}]).lists() == [["alice", "bob"], ["bob", "carol"]]
    assert restored.wishes == m.wishes


def test_content_keys_are_the_json_of_each_events_attributes() -> None:
    """``content_keys`` (column by column) gives, for every event, the canonical JSON that
    ``json.dumps(..., sort_keys=True)`` writes of its attributes: every value kind, a name with
    two kinds in one batch, -0.0 beside 0.0, big integers, text that JSON escapes, no attributes;
    from mappings and from columns alike."""
    import json

    import numpy as np
    import pyarrow as pa

    from routing.matching.index import EventBatch
    from routing.monitors.qos import content_keys
    from streaming.arrow_matching import event_batch

    events: list[dict[str, object]] = [
        {"a": 1, "b": 2.5, "s": "x"},
        {"a": 2.0, "ok": True, "s": 'q"\\\u00e9\n'},
        {},
        {"d": -0.0, "big": 2**62, "z_": False},
        {"d": 0.0, "a": -7},
        {"s": "x", "b": 2.5},
    ]
    life = np.array([1000.0, 0.0, 2.5, 1e12, 30000.0, 1000.0])
    want = [
        f"{lt:g}|" + json.dumps(e, sort_keys=True, separators=(",", ":")) for lt, e in zip(life, events, strict=True)
    ]
    assert content_keys(EventBatch.from_events(events), life) == want
    kinds = {"longs": (int, pa.int64()), "doubles": (float, pa.float64()), "strings": (str, pa.string())}
    kinds["booleans"] = (bool, pa.bool_())
    maps = {
        k: pa.array([[(n, v) for n, v in e.items() if type(v) is t] for e in events], pa.map_(pa.string(), at))
        for k, (t, at) in kinds.items()
    }
    assert content_keys(event_batch(maps, len(events)), life) == want
