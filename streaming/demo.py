"""``siftstream run``: the whole pipeline on the built-in default, then a readable summary.

The pipeline: local broker up, topics, a burst of events (a few deliberately bad) and
link telemetry, the validation job over everything new, and a summary of what was accepted and
what went to the dead letter and why; then a simulated broker overlay (the reliability paper's
20-broker tree) publishes its topology, subscriptions with a reliability wish, events, telemetry
and receipts, and the QoS job turns them into predicted and measured reliability per
subscriber, with alerts; the matching job matches the overlay's events against its
subscriptions, and the routes job turns the matches' rates into a min-cost distribution plan
(MICPICE); last, the composite workload of Chen et al. (composite subscriptions over a 15-broker
tree) runs through the composites job, which detects composite events and places each
composite's detection; and the channels job groups a Gryphon subscription set into delivery
channels while the matching job delivers through them to a few real subscriber clients, which
follow their channel as it changes.
"""

from __future__ import annotations

import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.connection import KafkaConnection
from schemas.topics import (
    CHANNELS_TOPIC,
    COMPOSITES_TOPIC,
    DEADLETTER_TOPIC,
    EVENTS_TOPIC,
    LINK_TELEMETRY_TOPIC,
    MATCHES_TOPIC,
    PLACEMENTS_TOPIC,
    QOS_TOPIC,
    ROUTES_TOPIC,
    SUBSCRIPTIONS_TOPIC,
    TOPOLOGY_TOPIC,
)

__all__ = ["DemoConfig", "run_demo"]


@dataclass(frozen=True)
class DemoConfig:
    home: Path
    port: int = 9092
    controller_port: int = 9093
    bootstrap_servers: str | None = None
    kafka_config: str | None = None
    events: int = 20_000
    bad_fraction: float = 0.02
    seed: int = 0
    master: str = "local[2]"
    overlay_seconds: float = 180.0
    min_reliability: float = 0.9
    lifetime_ms: float = 4000.0
    composite_events: int = 20_000
    channel_subscriptions: int = 1_000
    channel_events: int = 4_000
    channel_k: int = 8


def _say(text: str) -> None:
    print(f"==> {text}", file=sys.stderr, flush=True)


def _telemetry(conn: KafkaConnection, topic: str, n: int, seed: int) -> tuple[int, int]:
    """A little link telemetry; every 25th sample carries a NaN delay (bad)."""
    from producers.kafka_writer import KafkaWriter
    from schemas.codec import codec_for

    codec = codec_for("LinkSample")
    rng = random.Random(seed)
    writer = KafkaWriter(conn)
    now = int(time.time() * 1000)
    bad = 0
    for i in range(n):
        delay = float("nan") if i % 25 == 24 else rng.lognormvariate(1.5, 0.5)
        bad += i % 25 == 24
        sample = {
            "from": "b1",
            "to": "b2",
            "seq": i,
            "sent_at": now + i,
            "delay_ms": delay,
            "lost": False,
            "event_id": None,
        }
        writer.send(topic, "b1->b2", codec.encode(sample))
    report = writer.flush()
    if report.failed:
        raise RuntimeError(f"telemetry not delivered: {report.errors}")
    return n - bad, bad


def run_demo(cfg: DemoConfig) -> int:
    from rich.console import Console
    from rich.table import Table

    from infra import kafka
    from infra.jars import ensure_jars
    from infra.topics import ensure_topics
    from producers.produce import ProduceConfig, produce_events
    from streaming.session import SparkConfig, build_session
    from streaming.validation_job import ValidationConfig, read_stats, run

    t0 = time.monotonic()
    _say("fetching jars (cached after the first run)")
    jars = ensure_jars()
    if cfg.bootstrap_servers:
        conn = KafkaConnection.from_file(cfg.bootstrap_servers, cfg.kafka_config)
        _say(f"using the Kafka cluster at {cfg.bootstrap_servers}")
    else:
        broker = kafka.BrokerConfig(home=cfg.home / "kafka", port=cfg.port, controller_port=cfg.controller_port)
        _say(kafka.up(broker, jars))
        conn = KafkaConnection(broker.bootstrap)
    _say("creating topics")
    created = [line for line in ensure_topics(conn) if line.startswith("created")]
    _say(f"{len(created)} topics created, the rest already existed")

    from schemas.topics import INPUT_TOPICS
    from streaming.readers import end_offsets, read_topic, summarize_dead_letters

    # this run's job starts where the topics end now, so the summary accounts for this run exactly
    run_id = time.strftime("%Y%m%d-%H%M%S")
    start_offsets = end_offsets(conn, [t.name for t in INPUT_TOPICS])
    _say(f"publishing {cfg.events:,} events ({cfg.bad_fraction:.0%} deliberately bad) and link telemetry")
    result = produce_events(
        conn,
        ProduceConfig(EVENTS_TOPIC, cfg.events, bad_fraction=cfg.bad_fraction, seed=cfg.seed + int(time.time())),
    )
    if result.report.failed:
        raise RuntimeError(f"{result.report.failed} events were not delivered: {result.report.errors}")
    tele_good, tele_bad = _telemetry(conn, LINK_TELEMETRY_TOPIC, 500, cfg.seed)

    _say("running the validation job over everything new (Spark, available-now)")
    stats = cfg.home / "stats" / f"run-{run_id}.jsonl"
    vcfg = ValidationConfig(
        conn=conn,
        checkpoint=cfg.home / "checkpoints" / f"run-{run_id}",
        available_now=True,
        starting_offsets=start_offsets,
        stats_file=stats,
    )
    spark = build_session(SparkConfig(master=cfg.master), jars)
    spark.sparkContext.setLogLevel("ERROR")  # the demo prints its own summary
    run(spark, vcfg, quiet=True)
    spark.stop()
    counts = read_stats(stats)

    console = Console(width=max(110, Console().width))
    table = Table(title="SiftStream validation: this run")
    for col in ("topic", "accepted", "dead-lettered", "by error class"):
        table.add_column(col, justify="right" if col in ("accepted", "dead-lettered") else "left")
    topics = sorted({k.split("|")[1] for k in counts})
    for topic in topics:
        ok = counts.get(f"ok|{topic}", 0)
        bad = {k.split("|")[2]: v for k, v in counts.items() if k.startswith(f"bad|{topic}|")}
        table.add_row(
            topic, f"{ok:,}", f"{sum(bad.values()):,}", ", ".join(f"{c}: {n}" for c, n in sorted(bad.items()))
        )
    console.print(table)
    console.print(
        f"published: {result.good:,} good events + {sum(result.faults.values())} bad "
        f"({dict(sorted(result.expected_errors.items()))}); {tele_good} good + {tele_bad} bad link samples"
    )

    summary = summarize_dead_letters(read_topic(conn, DEADLETTER_TOPIC, "DeadLetter"))
    reasons = Table(
        title=f"Dead-letter topic (all runs): {summary['total']:,} records, {summary['distinct']:,} distinct keys"
    )
    reasons.add_column("error class")
    reasons.add_column("count", justify="right")
    reasons.add_column("example reason")
    for code, entry in summary["by_code"].items():
        reasons.add_row(code, f"{entry['count']:,}", entry["example"])
    console.print(reasons)
    expected_ok = result.good + tele_good
    got_ok = sum(v for k, v in counts.items() if k.startswith("ok|"))
    verdict = "every record accounted for" if got_ok == expected_ok else f"MISMATCH: expected {expected_ok} accepted"
    console.print(verdict)

    qos_ok = _qos_stage(cfg, conn, jars, console)
    routes_ok = _routes_stage(cfg, conn, jars, console)
    composites_ok = _composites_stage(cfg, conn, jars, console)
    channels_ok = _channels_stage(cfg, conn, jars, console)
    console.print(
        f"finished in {time.monotonic() - t0:.0f}s. The broker keeps running: `siftstream infra down` stops it."
    )
    console.print(
        "Next: `make serve` runs every job continuously with live feeds; the dashboard and metrics at "
        "http://127.0.0.1:8080/ (docs/guide/serve.md)."
    )
    return 0 if got_ok == expected_ok and qos_ok and routes_ok and composites_ok and channels_ok else 1


def _qos_stage(cfg: DemoConfig, conn: KafkaConnection, jars: Any, console: Any) -> bool:
    """Simulate the overlay into Kafka, run the QoS job (its checkpoint persists across runs, as a
    deployment's would), and print its latest report per subscriber and broker."""
    from rich.table import Table

    from infra.topics import ensure_topics
    from producers import overlay
    from producers.kafka_writer import KafkaWriter
    from routing.reliability.evaluation_system import reliability_tree_system
    from routing.reliability.simulator import to_spec_output
    from schemas.codec import codec_for
    from streaming.qos_job import QosConfig, run
    from streaming.readers import read_topic
    from streaming.session import SparkConfig, build_session

    # The overlay is its own deployment: its topics carry a prefix, so the demo events above (whose
    # publisher and event ids look alike) never mix with it.
    prefix = "demo-overlay."
    ensure_topics(conn, prefix)
    system = reliability_tree_system(cfg.seed + 1, lifetime_ms=cfg.lifetime_ms)
    _say(
        f"simulating {cfg.overlay_seconds:g} s of a 20-broker overlay (8 publishers, 100 subscribers wishing "
        f"{cfg.min_reliability:g} of the events within their {cfg.lifetime_ms:g} ms lifetime) and publishing it"
    )
    result = overlay.run(system, cfg.overlay_seconds, cfg.seed + int(time.time()) % 1000, telemetry=True)
    assert result.telemetry is not None
    started_ms = int(time.time() * 1000)
    rows = overlay.records(system, result.telemetry, started_ms - int(cfg.overlay_seconds * 1000), cfg.min_reliability)
    writer = KafkaWriter(conn)
    codecs = {t: codec_for(name) for t, name in overlay.SCHEMA_OF.items()}
    sent = 0
    for _t, topic, key, record in rows:
        writer.send(prefix + topic, key, codecs[topic].encode(record))
        sent += 1
    report = writer.flush()
    if report.failed:
        raise RuntimeError(f"overlay records not delivered: {report.errors}")
    _say(f"{sent:,} overlay records published; running the QoS job (Spark, available-now)")
    qcfg = QosConfig(
        conn=conn, checkpoint=cfg.home / "checkpoints" / "qos-demo", topic_prefix=prefix, available_now=True
    )
    spark = build_session(SparkConfig(master=cfg.master), jars)
    spark.sparkContext.setLogLevel("ERROR")
    history = run(spark, qcfg, quiet=True)
    spark.stop()
    reports = [r.value for r in read_topic(conn, prefix + QOS_TOPIC, "QosReport")]
    if not reports:
        console.print("QoS job wrote no report")
        return False
    end = max(r["window_end"] for r in reports)
    latest = [r for r in reports if r["window_end"] == end]
    subs = sorted(
        (r for r in latest if r["kind"] == "subscriber" and r["reliability"] is not None),
        key=lambda r: r["reliability"],
    )
    truth = to_spec_output(result)["subscribers"]
    table = Table(title=f"SiftStream QoS: the 12 least reliable subscribers, window ending {time.ctime(end / 1000)}")
    for col in ("subscriber", "predicted R' [90%]", "measured R", "simulator", "p95 ms pred/meas", "alert"):
        table.add_column(col)
    for r in subs[:12]:
        alert = r["alert"]
        blame = ""
        if alert:
            top = alert["contributors"][0] if alert["contributors"] else None
            blame = f"{alert['severity']}: {top['element']} {top['share']:.0%}" if top else alert["severity"]
        meas = r["measured_reliability"]
        sim = truth.get(r["id"], {}).get("reliability")
        table.add_row(
            r["id"],
            f"{r['reliability']:.3f} [{r['reliability_low']:.2f}-{r['reliability_high']:.2f}]",
            "-" if meas is None else f"{meas:.3f}",
            "-" if sim is None else f"{sim:.3f}",
            f"{r['p95_delay_ms'] or 0:.0f} / {r['measured_p95_delay_ms'] or 0:.0f}",
            blame,
        )
    console.print(table)
    brokers = sorted((r for r in latest if r["kind"] == "broker"), key=lambda r: -(r["rho"] or 0.0))[:5]
    console.print(
        "busiest brokers: "
        + ", ".join(f"{r['id']} rho {r['rho']:.2f} wait {r['mean_wait_ms'] or 0:.0f} ms" for r in brokers)
    )
    alerts = [r for r in latest if r["alert"]]
    console.print(
        f"{len(subs)} subscribers reported, {len(alerts)} alerts in the latest window; "
        f"{sum(len(b.extra['windows']) for b in history)} windows this run. Example alert: "
        + (alerts[0]["alert"]["message"] if alerts else "none")
    )
    return True


def _routes_stage(cfg: DemoConfig, conn: KafkaConnection, jars: Any, console: Any) -> bool:
    """Match the overlay's events (matching job), plan their distribution from the matches' rates
    (routes job; checkpoints persist across runs, as a deployment's would) and print the plan."""
    from collections import Counter

    from rich.table import Table

    from routing.monitors.routes import PlannerConfig
    from streaming.matching_job import MatchingConfig
    from streaming.matching_job import run as run_matching
    from streaming.readers import read_topic
    from streaming.routes_job import RoutesConfig
    from streaming.routes_job import run as run_routes
    from streaming.session import SparkConfig, build_session

    prefix = "demo-overlay."
    spark = build_session(SparkConfig(master=cfg.master), jars)
    spark.sparkContext.setLogLevel("ERROR")
    _say("matching the overlay's events against its subscriptions (matching job, available-now)")
    mcfg = MatchingConfig(
        conn=conn, checkpoint=cfg.home / "checkpoints" / "matching-demo", topic_prefix=prefix, available_now=True
    )
    matched = run_matching(spark, mcfg, quiet=True)
    _say(f"{sum(b.matches for b in matched):,} matches; planning their distribution (routes job, available-now)")
    rcfg = RoutesConfig(
        conn=conn,
        checkpoint=cfg.home / "checkpoints" / "routes-demo",
        planner=PlannerConfig(check_period_ms=10_000, rate_window_ms=60_000),
        topic_prefix=prefix,
        available_now=True,
    )
    run_routes(spark, rcfg, quiet=True)
    spark.stop()
    plans = [r.value for r in read_topic(conn, prefix + ROUTES_TOPIC, "RoutePlan")]
    if not plans:
        console.print("routes job wrote no plan")
        return False
    plan = max(plans, key=lambda p: (p["planned_at"], p["version"]))
    per_link = Counter((t["from"], t["to"]) for t in plan["transmissions"])
    flows = {t["event"] for t in plan["transmissions"]}
    table = Table(title=f"SiftStream routes: plan v{plan['version']} ({plan['method']}), the 8 busiest links")
    for col in ("link", "flows sent", "example flow (publisher|filter)"):
        table.add_column(col)
    for (u, v), n in per_link.most_common(8):
        example = next(t["event"] for t in plan["transmissions"] if (t["from"], t["to"]) == (u, v))
        table.add_row(f"{u} -> {v}", str(n), example)
    console.print(table)
    cost = "infeasible" if plan["cost"] is None else f"{plan['cost']:.1f} (events/s x link cost)"
    previous = "" if plan["previous_cost"] is None else f", replacing a plan costing {plan['previous_cost']:.1f}"
    console.print(
        f"plan cost {cost}{previous}: {len(flows)} publisher/filter flows over {len(per_link)} links; "
        f"{len(plans)} plans on the topic; why: {'; '.join(plan['reasons'][:3])}"
    )
    return bool(plan["feasible"])


def _composites_stage(cfg: DemoConfig, conn: KafkaConnection, jars: Any, console: Any) -> bool:
    """Publish the composite workload (Chen et al. §4.2: composite subscriptions over primitive
    event types) on a 15-broker tree, run the composites job, print detections and placements."""
    from collections import Counter

    import numpy as np
    from rich.table import Table

    from infra.topics import ensure_topics
    from producers.kafka_writer import KafkaWriter
    from producers.workloads import CompositeWorkload
    from routing.monitors.composites import CompositeMonitorConfig
    from routing.planning.topology import element_record, tree
    from schemas.codec import codec_for
    from streaming.composites_job import CompositesConfig, run
    from streaming.readers import read_topic
    from streaming.session import SparkConfig, build_session

    prefix = "demo-composites."
    ensure_topics(conn, prefix)
    rng = np.random.default_rng(cfg.seed + int(time.time()) % 1000)
    brokers = tree(15, 2, name="demo-composites")
    workload = CompositeWorkload(subscribers=30, within_ms=30_000, seed=int(rng.integers(1 << 30)))
    topology = brokers.topology_records()
    for i in range(workload.params["publishers"]):
        topology.append(element_record(f"cp{i}", "publisher", 0, broker=f"b{int(rng.integers(15))}"))
    homes = {s: f"b{int(rng.integers(15))}" for s, _ in workload.interests}
    subscriptions = [
        {**sub, "broker": homes[sub["subscriber_id"]]} for sub in workload.subscriptions() if sub.get("composite")
    ]
    events = workload.batch(cfg.composite_events)
    shift = int(time.time() * 1000) - int(events[-1]["published_at"])  # this run's events end now
    for e in events:
        e["published_at"] += shift
    writer = KafkaWriter(conn)
    for topic, schema, key, records in (
        (TOPOLOGY_TOPIC, "TopologyElement", "element_id", topology),
        (SUBSCRIPTIONS_TOPIC, "Subscription", "subscription_id", subscriptions),
        (EVENTS_TOPIC, "Event", "event_id", events),
    ):
        codec = codec_for(schema)
        for r in records:
            writer.send(prefix + topic, str(r[key]), codec.encode(r))
    report = writer.flush()
    if report.failed:
        raise RuntimeError(f"composite workload not delivered: {report.errors}")
    span_s = (events[-1]["published_at"] - events[0]["published_at"]) / 1000
    _say(
        f"{len(subscriptions)} composite subscriptions and {len(events):,} events ({span_s:,.0f} s of event time) "
        "published; running the composites job (Spark, available-now)"
    )
    spark = build_session(SparkConfig(master=cfg.master), jars)
    spark.sparkContext.setLogLevel("ERROR")
    ccfg = CompositesConfig(
        conn=conn,
        checkpoint=cfg.home / "checkpoints" / "composites-demo",
        monitor=CompositeMonitorConfig(check_period_ms=60_000, rate_window_ms=600_000),
        topic_prefix=prefix,
        available_now=True,
    )
    history = run(spark, ccfg, quiet=True)
    spark.stop()
    detections = sum(b.extra["detections"] for b in history)
    placements = {}
    for r in read_topic(conn, prefix + PLACEMENTS_TOPIC, "Placement"):
        placements[r.value["subscription_id"]] = r.value
    since = events[0]["published_at"]
    found = Counter(
        r.value["subscription_id"]
        for r in read_topic(conn, prefix + COMPOSITES_TOPIC, "CompositeDetection")
        if r.value["detected_at"] >= since
    )
    table = Table(title="SiftStream composites: detections and where they are detected (8 busiest subscriptions)")
    for col in ("subscription", "tree", "detections", "detected at", "traffic cost / joint point", "why"):
        table.add_column(col)
    trees = {s["subscription_id"]: _tree_text(json.loads(s["composite"])) for s in subscriptions}
    for sid, n in found.most_common(8):
        p = placements.get(sid)
        where = "-" if p is None else ", ".join(f"{k}@{v}" for k, v in sorted(p["placement"].items()))
        costs = "-" if p is None else f"{p['cost']:.2f} / {p['baseline_cost']:.2f}"
        why = "-" if p is None else next(iter(p["reasons"].values()), "")
        # a subscription of an earlier run that this run's workload did not replace is still live
        table.add_row(sid, trees.get(sid, "(from an earlier run)"), str(n), where, costs, why)
    console.print(table)
    stats = history[-1].extra if history else {}
    console.print(
        f"{detections:,} composite detections this run over {len(found)} subscriptions; {len(placements)} placed; "
        f"state now {stats.get('stored', 0)} partial matches, {stats.get('expired', 0)} expired, "
        f"{stats.get('late', 0)} late"
    )
    return detections > 0 and bool(placements)


def _channels_stage(cfg: DemoConfig, conn: KafkaConnection, jars: Any, console: Any) -> bool:
    """Subscriptions (the Gryphon workload) and three real subscriber clients; events in two waves,
    each delivered by the matching job through the channels the channels job planned (the second
    wave after it re-clustered on the first wave's matches); per channel its members and waste,
    and what each client received against the Match records naming its subscription."""
    import threading

    from rich.table import Table

    from infra.topics import ensure_topics
    from producers.sinks import KafkaSink
    from producers.workloads import GryphonWorkload
    from routing.monitors.channels import ChannelMonitorConfig
    from streaming.channels_job import ChannelsConfig
    from streaming.channels_job import run as run_channels
    from streaming.client import Subscriber
    from streaming.matching_job import MatchingConfig
    from streaming.matching_job import run as run_matching
    from streaming.readers import read_topic
    from streaming.session import SparkConfig, build_session

    prefix = "demo-channels."
    ensure_topics(conn, prefix)
    clients_per_broker = max(1, cfg.channel_subscriptions // (20 * 5))
    w = GryphonWorkload(decay=0.78, brokers=20, clients_per_broker=clients_per_broker, subs_per_client=5, seed=cfg.seed)
    subs = w.subscriptions()
    sink = KafkaSink(conn, prefix)
    sink.subscriptions(subs)
    sink.close()
    run_tag = time.strftime("%H%M%S")
    broad = sorted({s["filter"] for s in subs}, key=lambda f: (f.count(" and "), f))  # fewest predicates first
    wanted = {f"client{i}-{run_tag}": broad[i * 7] for i in range(3)}
    received: dict[str, list[str]] = {sid: [] for sid in wanted}
    moves: dict[str, int] = {}
    stop = threading.Event()
    ready = threading.Barrier(len(wanted) + 1)

    def client(sid: str, text: str) -> None:
        with Subscriber(conn=conn, topic_prefix=prefix, subscriber_id=f"demo-{sid}") as sub:
            stream = sub.subscribe(text, subscription_id=sid)
            ready.wait()
            while not stop.is_set():
                event = stream.poll(0.5)
                if event is not None:
                    received[sid].append(event["event_id"])
            moves[sid] = stream.counters.moves

    threads = [threading.Thread(target=client, args=item, daemon=True) for item in wanted.items()]
    for t in threads:
        t.start()
    ready.wait()
    _say(
        f"channels: {len(subs):,} Gryphon subscriptions and 3 subscriber clients; the channels job plans "
        f"K = {cfg.channel_k} channels, the matching job delivers through them ({cfg.channel_events:,} events "
        "in two waves)"
    )
    spark = build_session(SparkConfig(master=cfg.master), jars)
    spark.sparkContext.setLogLevel("ERROR")
    ccfg = ChannelsConfig(
        conn=conn,
        checkpoint=cfg.home / "checkpoints" / "channels-demo",
        monitor=ChannelMonitorConfig(k=cfg.channel_k, min_interval_ms=0),
        topic_prefix=prefix,
        available_now=True,
    )
    mcfg = MatchingConfig(
        conn=conn,
        checkpoint=cfg.home / "checkpoints" / "matching-channels-demo",
        topic_prefix=prefix,
        available_now=True,
    )
    run_channels(spark, ccfg, quiet=True)  # places the subscriptions (and the clients') by the join rule
    for _wave in range(2):
        batch = w.columns(cfg.channel_events // 2)
        sink = KafkaSink(conn, prefix)
        sink.events(batch)
        sink.close()
        run_matching(spark, mcfg, quiet=True)  # installs the newest planned version, delivers by it
        run_channels(spark, ccfg, quiet=True)  # learns from the matches; re-clusters when waste drifted
    spark.stop()
    matched: dict[str, set[str]] = {sid: set() for sid in wanted}
    for r in read_topic(conn, prefix + MATCHES_TOPIC, "Match"):
        assert r.value is not None
        for sid in set(r.value["subscription_ids"]) & matched.keys():
            matched[sid].add(r.value["event_id"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(len(set(received[s])) < len(matched[s]) for s in wanted):
        time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join(30)
    versions = [r.value for r in read_topic(conn, prefix + CHANNELS_TOPIC, "ChannelAssignment") if r.value]
    planned = [v for v in versions if v["stage"] == "planned"]
    installed = [v["version"] for v in versions if v["stage"] == "installed"]
    if not planned:
        console.print("channels job wrote no assignment")
        return False
    last = planned[-1]
    table = Table(title=f"SiftStream channels: version {last['version']} ({last['reason']}, {last['method']})")
    for col in ("channel", "subscriptions", "subscribers", "deliveries", "waste ratio"):
        table.add_column(col, justify="right" if col != "channel" else "left")
    for ch in last["channels"]:
        ratio = "-" if ch["waste_ratio"] is None else f"{ch['waste_ratio']:.3f}"
        table.add_row(
            str(ch["channel"]),
            f"{len(ch['subscription_ids']):,}",
            f"{len(ch['subscriber_ids']):,}",
            f"{ch['deliveries']:,}",
            ratio,
        )
    console.print(table)

    def ratio(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    console.print(
        f"waste ratio (unwanted deliveries / deliveries over the last {last['sample_events']:,} matched events): "
        f"{ratio(last['waste_ratio'])} against {ratio(last['flooding_waste_ratio'])} if every event went to "
        f"everyone (flooding); {len(planned)} versions planned, installed so far: {installed}. Why: {last['detail']}"
    )
    ok = True
    clients = Table(title="Subscriber clients (streaming.client.Subscriber): received against their Match records")
    for col in ("subscription", "filter", "received", "matched", "moves", "verdict"):
        clients.add_column(col)
    for sid, text in wanted.items():
        got, want = received[sid], matched[sid]
        same = len(got) == len(set(got)) and set(got) == want
        ok = ok and same
        clients.add_row(
            sid,
            text,
            f"{len(got):,}",
            f"{len(want):,}",
            str(moves.get(sid, 0)),
            "every event once" if same else "MISMATCH",
        )
    console.print(clients)
    return ok


def _tree_text(node: Any) -> str:
    """A composite tree in one line: ``and(kind = 'e3', kind = 'e7') 30 s``."""
    if isinstance(node, str):
        return node
    inner = ", ".join(_tree_text(c) for c in node["children"])
    window = f" {node['within_ms'] / 1000:g} s" if node.get("within_ms") else ""
    return f"{node['op']}({inner}){window}"
