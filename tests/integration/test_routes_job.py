"""The routes job end to end: an overlay, subscriptions, matches and link telemetry through the
real broker and Spark, to distribution plans on ``siftstream.routes.v1``.

The overlay is a cyclic broker graph with clients. Matches arrive at steady, known rates: the job
must write one feasible plan that serves every interest at the right cost (checked against an
instance built here from the known rates), send broken records to the dead-letter topic without
losing valid ones, and, after a restart from its checkpoint, re-plan once when a flow's rate
triples (and not before), continuing the version numbers. Two links carry policies that the
unconstrained plan would break (an event id on one, a publisher on another): every plan record the
job writes passes ``routing.planning.policy.check_policy``, the policy check written apart from the
planner, against the topology read back from its topic.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from infra.connection import KafkaConnection
from producers.kafka_writer import KafkaWriter
from routing.monitors.routes import PlannerConfig
from routing.planning.check import check_plan
from routing.planning.distribution import plan as make_plan
from routing.planning.model import Instance, Plan
from routing.planning.policy import check_policy
from routing.planning.topology import attach_clients, flat_random
from schemas.codec import codec_for
from streaming.readers import read_topic
from streaming.routes_job import RoutesConfig, run

pytestmark = pytest.mark.kafka

EPOCH_MS = 1_760_000_000_000
FILTERS = {"sub-a": "price < 50", "sub-b": "price < 50", "sub-c": "symbol = 'IBM'", "sub-d": "volume > 10"}
RATES = {
    ("p0", "price < 50"): 4.0,
    ("p1", "price < 50"): 2.0,
    ("p1", "symbol = 'IBM'"): 1.0,
    ("p0", "volume > 10"): 0.5,
}


def overlay() -> Any:
    brokers = flat_random(8, 12, seed=3, cost_range=(1, 5), integer_costs=True)
    return attach_clients(brokers, publishers=2, subscribers=4, seed=3)


def subscriptions(topo: Any) -> list[dict[str, Any]]:
    homes = {r["element_id"]: r["broker"] for r in topo.topology_records() if r["kind"] == "subscriber"}
    subs = sorted(homes)
    return [
        {"type": "subscribe", "subscription_id": sid, "subscriber_id": subs[i], "broker": homes[subs[i]], "filter": f}
        for i, (sid, f) in enumerate(FILTERS.items())
    ]


def matches(start_s: float, stop_s: float, boost: float = 1.0) -> list[dict[str, Any]]:
    """Evenly spaced matches of every flow in [start_s, stop_s); p1's price flow sped up by ``boost``."""
    out = []
    for (pub, text), rate in RATES.items():
        r = rate * (boost if (pub, text) == ("p1", "price < 50") else 1.0)
        sids = sorted(s for s, f in FILTERS.items() if f == text)
        n = round((stop_s - start_s) * r)
        for k in range(n):
            at = EPOCH_MS + int((start_s + k / r) * 1000)
            out.append(
                {"event_id": f"{pub}-{text}-{at}", "publisher_id": pub, "published_at": at, "subscription_ids": sids}
            )
    return out


def send(conn: KafkaConnection, prefix: str, topic: str, schema: str, records: list[dict[str, Any]], key: str) -> None:
    writer = KafkaWriter(conn)
    codec = codec_for(schema)
    for r in records:
        writer.send(prefix + topic, str(r[key]), codec.encode(r))
    assert not writer.flush().failed


def expected_instance(
    topo: Any, rates: dict[tuple[str, str], float], policy: dict[str, list[str]] | None = None
) -> Instance:
    """The MICPICE instance of the overlay at ``rates``; ``policy``: link id -> forbidden event or
    publisher ids (the topology records' ``forbidden_events``)."""
    subs = {s["subscription_id"]: s for s in subscriptions(topo)}
    events = {f"{p}|{t}": (p, r) for (p, t), r in rates.items()}
    policy = policy or {}
    return Instance.from_json(
        {
            "nodes": [{"id": n.id, "role": n.role} for n in topo.nodes],
            "links": [{"from": k.src, "to": k.dst, "cost": float(k.cost)} for k in topo.links],
            "events": [{"id": e, "rate": r, "publisher": p} for e, (p, r) in events.items()],
            "interests": [
                {"subscriber": s["subscriber_id"], "event": e}
                for s in subs.values()
                for e in events
                if e.split("|", 1)[1] == s["filter"]
            ],
            "forbidden": [
                {"from": k.src, "to": k.dst, "event": e}
                for k in topo.links
                for e in events
                if {e, e.split("|", 1)[0]} & set(policy.get(f"{k.src}->{k.dst}", ()))
            ],
        }
    )


BOOSTED = {**RATES, ("p1", "price < 50"): 16 / 3}


def binding_policy(topo: Any) -> tuple[dict[str, list[str]], Plan]:
    """Forbid, on two broker links that the unconstrained plan uses, one of the events it sends
    there (by event id) and another one's publisher, keeping every interest servable at both rate
    sets; return the policy and that unconstrained plan."""
    free = make_plan(expected_instance(topo, RATES), "enhanced")
    brokers = {n.id for n in topo.nodes if n.role == "broker"}
    policy: dict[str, list[str]] = {}
    for u, v, e in free.transmissions:
        key = f"{u}->{v}"
        if u not in brokers or v not in brokers or key in policy:
            continue
        trial = {**policy, key: [e if not policy else e.split("|", 1)[0]]}
        if not any(expected_instance(topo, r, trial).infeasibility() for r in (RATES, BOOSTED)):
            policy = trial
        if len(policy) == 2:
            return policy, free
    raise AssertionError(f"no binding policy keeps the overlay feasible: {free.transmissions}")


def topology_records(topo: Any, policy: dict[str, list[str]]) -> list[dict[str, Any]]:
    return [{**r, "forbidden_events": policy.get(r["element_id"], [])} for r in topo.topology_records()]


def test_routes_job_plans_replans_on_sustained_drift_and_resumes(
    spark: Any, kafka_conn: KafkaConnection, topic_prefix: str, tmp_path: Path
) -> None:
    topo = overlay()
    policy, free = binding_policy(topo)
    records = topology_records(topo, policy)
    send(kafka_conn, topic_prefix, "siftstream.topology.v1", "TopologyElement", records, "element_id")
    send(
        kafka_conn, topic_prefix, "siftstream.subscriptions.v1", "Subscription", subscriptions(topo), "subscription_id"
    )
    first = matches(0, 120)
    send(kafka_conn, topic_prefix, "siftstream.matches.v1", "Match", first, "event_id")
    links = [
        {"from": k.src, "to": k.dst, "seq": i, "sent_at": EPOCH_MS + 1000 * i, "delay_ms": 2.0}
        for i, k in enumerate(topo.links)
    ]
    send(kafka_conn, topic_prefix, "siftstream.telemetry.links.v1", "LinkSample", links, "from")
    writer = KafkaWriter(kafka_conn)
    writer.send(topic_prefix + "siftstream.matches.v1", "x", b"not avro at all")
    writer.send(
        topic_prefix + "siftstream.telemetry.links.v1",
        "x",
        codec_for("LinkSample").encode({"from": "b0", "to": "b1", "seq": -1, "sent_at": EPOCH_MS, "delay_ms": -3.0}),
    )
    assert not writer.flush().failed

    cfg = RoutesConfig(
        conn=kafka_conn,
        checkpoint=tmp_path / "ckpt",
        planner=PlannerConfig(check_period_ms=10_000, rate_window_ms=60_000, drift=0.25, sustain=2),
        topic_prefix=topic_prefix,
        available_now=True,
        lateness_ms=5_000,
    )
    history = run(spark, cfg, quiet=True)
    assert sum(b.dead_letters for b in history) == 2
    valid = len(first) + len(links) + len(records) + len(FILTERS)
    assert sum(sum(b.records.values()) for b in history) == valid  # every valid record was read
    dead = read_topic(kafka_conn, topic_prefix + "siftstream.deadletter.v1", "DeadLetter")
    assert len(dead) == 2 and "bad_framing" in {d.value["error_code"] for d in dead}

    plans = [r.value for r in read_topic(kafka_conn, topic_prefix + "siftstream.routes.v1", "RoutePlan")]
    assert [p["version"] for p in plans] == [1]  # steady rates: one plan, no flapping
    plan = plans[0]
    assert plan["feasible"] and plan["reasons"] == ["first plan"] and plan["method"] == "enhanced"
    verdict = check_plan(expected_instance(topo, RATES, policy), Plan.from_json(plan), tol=0.02)
    assert verdict.ok, verdict.problems

    # restart on the same checkpoint; p1's price flow triples from 120 s on
    send(kafka_conn, topic_prefix, "siftstream.matches.v1", "Match", matches(120, 200, boost=3.0), "event_id")
    history = run(spark, cfg, quiet=True)
    assert history and not any(b.dead_letters for b in history)
    plans = [r.value for r in read_topic(kafka_conn, topic_prefix + "siftstream.routes.v1", "RoutePlan")]
    # over the 60 s window the rate ramps from 2/s to 6/s: 2.67 at 130 s (+33%), 3.33 at 140 s (+67%,
    # the second check in a row: re-plan), 4.0 at 150 s (+20% on 3.33: no drift), 4.67 and 5.33 at
    # 160 and 170 s (+40%, +60%: re-plan), 6.0 at 180 s (+12.5%)
    assert [p["version"] for p in plans] == [1, 2, 3]
    assert [p["planned_at"] for p in plans[1:]] == [EPOCH_MS + 140_000, EPOCH_MS + 170_000]
    for replan in plans[1:]:
        assert any("rate of p1|price < 50 moved" in r for r in replan["reasons"])
        assert replan["previous_cost"] is not None and replan["cost"] > plan["cost"]
    last = plans[2]
    verdict = check_plan(expected_instance(topo, BOOSTED, policy), Plan.from_json(last), tol=0.02)
    assert verdict.ok, verdict.problems

    # policy safety over every plan record the job wrote, against the topology as its topic holds it
    topology = [
        (r.key.decode(), r.value)
        for r in read_topic(kafka_conn, topic_prefix + "siftstream.topology.v1", "TopologyElement")
        if r.key is not None
    ]
    safety = check_policy(topology, plans)
    assert safety.ok and safety.plans == 3, safety.violations
    assert not check_policy(topology, [{"version": 0, **free.to_json()}]).ok  # the policy binds
