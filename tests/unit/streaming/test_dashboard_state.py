"""The dashboard's pure reducers (streaming/dashboard/state.py) and its metrics (metrics.py).

Each test folds a few hand-made records, as ``schemas.codec`` decodes them, into a
``DashboardState`` and checks one view of the snapshot: histories are sorted and bounded, the
latest report decides the open alert, a subscriber's wish is that of its subscriptions, tables
drop their oldest key at their limit, and the snapshot is strict JSON.
"""

from __future__ import annotations

import json
import math
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from streaming.dashboard.metrics import TopicMetrics, job_metrics
from streaming.dashboard.state import DashboardState, Limits

ALERT = {
    "severity": "critical",
    "message": "measured 0.8 below the wish 0.95",
    "contributors": [{"element": "b2", "utilisation": 0.97, "delay_ms": 300.0, "share": 0.9}],
}


def report(sid: str, t: int, predicted: float | None = 0.9, alert: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "kind": "subscriber",
        "id": sid,
        "window_end": t,
        "reliability": predicted,
        "reliability_low": None if predicted is None else predicted - 0.05,
        "reliability_high": None if predicted is None else predicted + 0.05,
        "measured_reliability": 0.8,
        "alert": alert,
        "warnings": [],
    }


def subscription(sid: str, subscriber: str, min_rel: float | None, deadline: float | None) -> dict[str, Any]:
    return {
        "type": "subscribe",
        "subscription_id": sid,
        "subscriber_id": subscriber,
        "min_reliability": min_rel,
        "deadline_ms": deadline,
    }


def test_history_is_sorted_and_bounded_and_the_latest_report_decides_the_alert() -> None:
    s = DashboardState(Limits(history=3))
    for t in (10, 20, 40):
        s.apply("QosReport", report("s1", t))
    s.apply("QosReport", report("s1", 30, alert=ALERT))  # late, out of window order
    detail = s.subscriber("s1")
    assert detail is not None
    assert [p["t"] for p in detail["history"]] == [20, 30, 40]
    assert detail["alert"] is None  # the newest window (40) has no alert
    assert detail["alerts"][0]["message"] == ALERT["message"]
    s.apply("QosReport", report("s1", 50, alert=ALERT))
    assert s.open_alerts() == {"critical": 1}
    assert s.snapshot()["subscribers"][0]["alert"] == {"t": 50, "severity": "critical", "message": ALERT["message"]}
    assert s.subscriber("s1")["alert"]["contributors"][0]["element"] == "b2"  # type: ignore[index]
    assert s.snapshot()["subscribers"][0]["recent"][-2:] == [[40, 0.9, 0.8], [50, 0.9, 0.8]]
    s.apply("QosReport", report("s1", 60))
    assert s.open_alerts() == {}
    assert s.snapshot()["alerts"]["recent"][0]["t"] == 50  # newest first


def test_wish_is_that_of_the_subscriptions_and_leaves_with_them() -> None:
    s = DashboardState()
    s.apply("Subscription", subscription("a", "u1", 0.9, 500))
    s.apply("Subscription", subscription("b", "u1", 0.99, None))
    s.apply("Subscription", subscription("c", "u2", None, 100))
    assert s.wish_of("u1") == {
        "min_reliability": 0.99,
        "deadline_ms": 500.0,
        "subscriptions": ["a", "b"],
        "subscription_count": 2,
    }
    s.apply("Subscription", {"type": "unsubscribe", "subscription_id": "b"})
    assert s.wish_of("u1")["min_reliability"] == 0.9
    s.apply("Subscription", None, key="a")  # a tombstone
    assert s.wish_of("u1")["subscriptions"] == []
    s.apply("QosReport", report("u2", 1))
    assert s.snapshot()["subscribers"][0]["wish"]["deadline_ms"] == 100.0
    assert list(s.subscribers_matching("C")) == ["u2"]  # by subscription id, any case


def test_tables_drop_their_least_recent_key_at_the_limit() -> None:
    s = DashboardState(Limits(subscribers=2))
    for sid in ("a", "b", "c"):
        s.apply("QosReport", report(sid, 1))
    s.apply("QosReport", report("b", 2))
    s.apply("QosReport", report("d", 1))
    snap = s.snapshot()
    assert [x["id"] for x in snap["subscribers"]] == ["b", "d"]
    assert snap["subscribers_dropped"] == 2


def test_telemetry_gives_loss_delay_and_waits_over_a_bounded_ring() -> None:
    s = DashboardState(Limits(samples=4))
    for seq, delay in enumerate([100.0, None, 2.0, 4.0, None, 6.0]):
        sample = {"from": "b1", "to": "b2", "seq": seq, "sent_at": seq, "delay_ms": delay, "lost": delay is None}
        s.apply("LinkSample", sample)
    s.apply("BrokerSample", {"broker_id": "b2", "arrived_at": 0, "wait_ms": 3.0, "service_ms": 1.0})
    s.apply("QosReport", {"kind": "broker", "id": "b1", "window_end": 5, "rho": 0.5, "mean_wait_ms": 2.0})
    snap = s.snapshot()
    (link,) = snap["links"]
    assert link["id"] == "b1->b2" and link["samples"] == 4
    assert link["loss"] == 0.25 and link["mean_delay_ms"] == 4.0  # the last four: 2, 4, lost, 6
    brokers = {b["id"]: b for b in snap["brokers"]}
    assert brokers["b1"]["rho"] == 0.5 and brokers["b2"]["sampled_wait_ms"] == 3.0
    assert {n["id"] for n in snap["topology"]["nodes"]} == {"b1", "b2"}


def test_topology_draws_attachments_and_forgets_removed_elements() -> None:
    s = DashboardState()
    s.apply("TopologyElement", {"element_id": "b1", "kind": "broker"})
    s.apply("TopologyElement", {"element_id": "p1", "kind": "publisher", "broker": "b1"})
    s.apply("TopologyElement", {"element_id": "b1->b2", "kind": "link", "from": "b1", "to": "b2", "cost": 2.0})
    topo = s.snapshot()["topology"]
    assert [e["id"] for e in topo["edges"]] == ["b1->b2", "p1--b1"]
    s.apply("TopologyElement", None, key="p1")
    assert "p1" not in {n["id"] for n in s.snapshot()["topology"]["nodes"]}


def test_channels_keep_the_latest_planned_version_and_the_waste_series() -> None:
    s = DashboardState(Limits(channel_members=1))

    def version(v: int, stage: str, waste: float) -> dict[str, Any]:
        members = {"channel": 0, "subscription_ids": ["x", "y"], "subscriber_ids": ["u", "v"], "waste_ratio": waste}
        return {
            "version": v,
            "stage": stage,
            "created_at": 100 * v,
            "k": 1,
            "reason": "reclustered",
            "waste_ratio": waste,
            "flooding_waste_ratio": 0.9,
            "channels": [members] if stage == "planned" else [],
        }

    s.apply("ChannelAssignment", version(2, "planned", 0.2))
    s.apply("ChannelAssignment", version(1, "planned", 0.5))  # an older version read later
    s.apply("ChannelAssignment", version(2, "installed", 0.2))
    snap = s.snapshot()["channels"]
    assert snap["planned"]["version"] == 2
    (channel,) = snap["planned"]["channels"]
    assert channel["subscribers"] == 2 and channel["subscriber_ids"] == ["u"]
    assert [w["waste_ratio"] for w in snap["waste"]] == [0.2, 0.5]
    assert snap["installed"] == [{"version": 2, "t": 200}]
    assert s.channel_ratios() == {"channels": {"0": 0.2}, "assignment": 0.2, "flooding": 0.9}


def test_dead_letters_routes_composites_and_matches() -> None:
    s = DashboardState()
    for reason in ("first", "second"):
        s.apply("DeadLetter", {"error_code": "invalid_value", "reason": reason, "source_topic": "r"})
    s.apply("DeadLetter", {"error_code": "bad_framing", "reason": "x", "source_topic": "e"})
    s.apply("RoutePlan", {"plan_id": "p", "version": 2, "planned_at": 20, "feasible": True, "cost": 5.0})
    s.apply("RoutePlan", {"plan_id": "p", "version": 1, "planned_at": 10, "feasible": True, "cost": 9.0})
    s.apply("Placement", {"subscription_id": "c1", "decided_at": 1, "placement": {"0": "b"}, "cost": 1.0})
    s.apply("CompositeDetection", {"subscription_id": "c1", "subscriber_id": "u", "detected_at": 7, "components": []})
    s.apply("Match", {"event_id": "e", "published_at": 3, "subscription_ids": ["a", "b", "c"]})
    s.count_matches(9)
    snap = s.snapshot()
    assert snap["dead_letters"]["total"] == 3
    assert snap["dead_letters"]["by_class"][0] == {
        "error_class": "invalid_value",
        "count": 2,
        "example": "first",
        "topics": ["r"],
    }
    assert snap["routes"]["plan"]["cost"] == 5.0 and len(snap["routes"]["costs"]) == 2
    assert snap["composites"]["detections"] == [{"subscription_id": "c1", "subscriber_id": "u", "count": 1, "last": 7}]
    assert snap["matches"] == {"events": 10, "sampled": 1, "per_event": 3.0, "last_published_at": 3}


def test_snapshot_is_strict_json_and_counts_every_record() -> None:
    s = DashboardState()
    s.apply("QosReport", report("s1", 1, predicted=math.nan))
    s.apply("NotAView", {"x": 1})
    s.skip("t.siftstream.qos.v1", "malformed_body")
    snap = s.snapshot()
    json.dumps(snap, allow_nan=False)
    assert snap["subscribers"][0]["predicted"] is None
    assert s.version == 3 and snap["records"] == {"QosReport": 1, "NotAView": 1}
    assert snap["undecodable"] == {"t.siftstream.qos.v1": {"count": 1, "example": "malformed_body"}}


def test_job_metrics_reads_the_jobs_series_and_histogram_means() -> None:
    r = CollectorRegistry()
    Gauge("siftstream_job_consumer_lag_records", "x", ["job"], registry=r).labels("matching").set(40)
    Counter("siftstream_job_processed_records", "x", ["job"], registry=r).labels("matching").inc(7)
    h = Histogram("siftstream_job_batch_duration_seconds", "x", ["job"], registry=r)
    h.labels("matching").observe(1.0)
    h.labels("matching").observe(3.0)
    Gauge("siftstream_unrelated", "x", ["job"], registry=r).labels("matching").set(1)
    assert job_metrics(r) == {"matching": {"lag": 40.0, "processed": 7.0, "mean_batch_duration_s": 2.0}}


def test_job_metrics_reads_what_the_jobs_register() -> None:
    from streaming.metrics import JobMetrics, committed_offsets

    m = JobMetrics(CollectorRegistry())
    m.register("qos")
    doc = {
        "batchId": 3,
        "timestamp": "2026-01-02T03:04:05.000Z",
        "numInputRows": 500,
        "inputRowsPerSecond": 250.0,
        "batchDuration": 1200,
        "durationMs": {"addBatch": 1100},
        "sources": [{"endOffset": '{"t": {"0": 700}}'}],
    }
    m.observe("validation", "q1", doc)
    m.set_lag("validation", {"q1": committed_offsets(doc)}, {"t": {0: 900}})
    jobs = job_metrics(m.registry)
    assert jobs["validation"]["input_rate"] == 250.0 and jobs["validation"]["processed"] == 500.0
    assert jobs["validation"]["lag"] == 200.0 and jobs["validation"]["batch_duration_s"] == 1.2
    assert jobs["qos"]["processed"] == 0.0  # registered before its first batch: a row with zeros


def test_topic_metrics_follow_the_attached_source() -> None:
    class Source:
        def metric_values(self) -> dict[str, Any]:
            return {
                "dead_letters": {"bad_framing": 2},
                "alerts": {"critical": 1},
                "channels": {"channels": {"1": 0.25, "0": None}, "assignment": 0.2, "flooding": 0.8},
                "records": {"siftstream.qos.v1": 5},
            }

    collector = TopicMetrics()
    assert all(not f.samples for f in collector.collect())  # nothing attached: names, no values
    collector.source = Source()  # type: ignore[assignment]
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in collector.collect() for s in f.samples}
    assert samples[("siftstream_dead_letters_total", (("error_class", "bad_framing"),))] == 2
    assert samples[("siftstream_qos_alerts", (("severity", "warning"),))] == 0
    assert samples[("siftstream_qos_alerts", (("severity", "critical"),))] == 1
    assert samples[("siftstream_channel_waste_ratio", (("channel", "1"),))] == 0.25
    assert ("siftstream_channel_waste_ratio", (("channel", "0"),)) not in samples
    assert samples[("siftstream_channel_flooding_waste_ratio", ())] == 0.8
    assert samples[("siftstream_dashboard_records_total", (("topic", "siftstream.qos.v1"),))] == 5
