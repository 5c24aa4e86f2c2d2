"""The ``siftstream`` command line: infrastructure, producers, jobs and the demo pipeline.

Every command builds its frozen configs here, at the edge, and passes them down.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infra.connection import KafkaConnection
from streaming import logs
from streaming.cli_clients import add_client_parsers
from streaming.cli_plan import add_plan_parsers
from streaming.config import CONFIG_ENV, DEFAULT_FILE, ConfigError
from streaming.config import load as load_config
from streaming.config import show as show_config

__all__ = ["DEFAULT_HOME", "build_parser", "connection", "main"]

DEFAULT_HOME = Path(".siftstream")


def _home(args: argparse.Namespace) -> Path:
    return Path(args.home).resolve()


def _broker_cfg(args: argparse.Namespace) -> Any:
    from infra.kafka import BrokerConfig

    return BrokerConfig(home=_home(args) / "kafka", port=args.port, controller_port=args.controller_port)


def _secure_cfg(args: argparse.Namespace) -> Any:
    """The secured single broker of ``infra up --secure`` (HOME/kafka-secure, profiles in its profiles/)."""
    from infra.kafka import BrokerConfig

    return BrokerConfig(home=_home(args) / "kafka-secure", port=args.port, controller_port=args.controller_port)


def _local_bootstrap(args: argparse.Namespace) -> str:
    """The local broker, or every node of the local cluster (``infra up --brokers N``) whose first
    port is ``--port`` while any node of it runs, so that a client starts even while one is down."""
    from infra.kafka import cluster_status, read_cluster

    cluster = read_cluster(_home(args) / "kafka-cluster")
    if cluster is not None and cluster.port == args.port and any(n["pid"] for n in cluster_status(cluster)):
        return cluster.bootstrap
    return f"127.0.0.1:{args.port}"


def _kafka_cluster_cfg(args: argparse.Namespace) -> Any:
    """``--brokers N`` nodes: client ports from ``--port`` up, controller ports from
    ``--controller-port`` up, or from ``--port`` + N when those two runs would overlap (the defaults
    9092 and 9093 do).

    >>> c = _kafka_cluster_cfg(build_parser().parse_args(["infra", "up", "--brokers", "3"]))
    >>> [(n.node_id, n.port, n.controller_port) for n in c.nodes()]
    [(1, 9092, 9095), (2, 9093, 9096), (3, 9094, 9097)]
    >>> args = ["infra", "up", "--brokers", "3", "--controller-port", "19093"]
    >>> c = _kafka_cluster_cfg(build_parser().parse_args(args))
    >>> c.nodes()[2].controller_port, c.home.name
    (19095, 'kafka-cluster')
    >>> _kafka_cluster_cfg(build_parser().parse_args(["infra", "up", "--brokers", "3", "--secure"])).home.name
    'kafka-secure-cluster'
    """
    from infra.kafka import KafkaClusterConfig

    n, port, controller = args.brokers, args.port, args.controller_port
    if not (controller >= port + n or controller + n <= port):
        controller = port + n
    folder = "kafka-secure-cluster" if getattr(args, "secure", False) else "kafka-cluster"
    return KafkaClusterConfig(home=_home(args) / folder, brokers=n, port=port, controller_port=controller)


def connection(args: argparse.Namespace) -> KafkaConnection:
    """The cluster: ``--bootstrap-servers`` when given, else the local broker."""
    servers = args.bootstrap_servers or _local_bootstrap(args)
    return KafkaConnection.from_file(servers, args.kafka_config)


def _jars(args: argparse.Namespace) -> Any:
    from infra.jars import ensure_jars

    return ensure_jars()


def _cluster_cfg(args: argparse.Namespace) -> Any:
    from infra.spark_cluster import ClusterConfig

    return ClusterConfig(
        home=_home(args) / "spark",
        port=args.spark_port,
        webui_port=args.spark_webui_port,
        worker_webui_port=args.spark_webui_port + 1,
    )


# ---- infra -----------------------------------------------------------------------------------


def cmd_config(args: argparse.Namespace) -> int:
    """``siftstream config show``: the effective settings and their sources (docs/guide/configuration.md)."""
    target = list(args.target)
    while target and target[0] in ("--json", "--all"):  # the remainder starts at the first word after show
        setattr(args, target.pop(0)[2:], True)
    doc = show_config(args.config_layers, args.config_file, target, args.all)
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"configuration file: {doc['file'] or f'none (--config, ${CONFIG_ENV} or ./{DEFAULT_FILE})'}")
    if not doc["commands"]:
        console.print("every option has its built-in default; siftstream config show COMMAND lists them")
    table = Table()
    for column in ("command", "option", "value", "from"):
        table.add_column(column, overflow="fold")
    for name, settings in doc["commands"].items():
        for s in settings:
            table.add_row(name, f"--{s['key']}", "" if s["value"] is None else str(s["value"]), s["source"])
    if doc["commands"]:
        console.print(table)
    return 0


def cmd_infra(args: argparse.Namespace) -> int:
    from infra import kafka, spark_cluster
    from infra.topics import ensure_topics

    action = args.action
    if action == "jars":
        jars = _jars(args)
        print("spark connector jars:\n  " + "\n  ".join(str(j) for j in jars.spark))
        print(f"kafka broker jars: {jars.kafka_dir}")
    elif action == "up":
        if args.bootstrap_servers:
            print(f"using the cluster at {args.bootstrap_servers}; nothing local is started")
            return 0
        if args.secure:  # TLS + SCRAM + ACLs per role (docs/guide/security.md)
            from infra import security

            if args.brokers > 1:
                print(security.cluster_up(_kafka_cluster_cfg(args), _jars(args), prefix=args.topic_prefix))
            else:
                print(security.up(_secure_cfg(args), _jars(args), prefix=args.topic_prefix))
        elif args.brokers > 1:
            print(kafka.cluster_up(_kafka_cluster_cfg(args), _jars(args)))
        else:
            print(kafka.up(_broker_cfg(args), _jars(args)))
    elif action == "down":
        print(kafka.down(_broker_cfg(args)))
        if kafka.broker_status(_secure_cfg(args))["pid"] is not None:
            print(kafka.down(_secure_cfg(args)))
        for folder in ("kafka-cluster", "kafka-secure-cluster"):
            cluster = kafka.read_cluster(_home(args) / folder)
            if cluster is not None:
                print(kafka.cluster_down(cluster))
    elif action == "status":
        return _infra_status(args)
    elif action == "topics":
        for line in ensure_topics(connection(args), args.topic_prefix, args.replication):
            print(line)
    elif action == "spark-up":
        print(spark_cluster.up(_cluster_cfg(args)))
    elif action == "spark-down":
        print(spark_cluster.down(_cluster_cfg(args)))
    return 0


def _infra_status(args: argparse.Namespace) -> int:
    """The local broker and cluster nodes (``--json``: one object per node with its node id, port,
    controller port and pid, for anyone who wants to kill one) and the Spark cluster."""
    from infra import kafka, spark_cluster

    single = _broker_cfg(args)
    folder = "kafka-secure-cluster" if args.secure else "kafka-cluster"
    cluster = kafka.read_cluster(_home(args) / folder)
    if args.json:
        brokers = [b for b in [kafka.broker_status(single)] if b["pid"] is not None]
        if cluster is not None:
            brokers += kafka.cluster_status(cluster)
        doc = {
            "cluster": None if cluster is None else {"bootstrap": cluster.bootstrap, "brokers": cluster.brokers},
            "brokers": brokers,
            "active_controller": None if cluster is None else kafka.quorum_leader(cluster),
        }
        print(json.dumps(doc, indent=2))
        return 0
    print(kafka.status(single))
    if cluster is not None:
        for node in kafka.cluster_status(cluster):
            state = "stopped" if node["pid"] is None else f"running (pid {node['pid']})"
            where = f"127.0.0.1:{node['port']}, controller port {node['controller_port']}"
            print(f"Kafka cluster node {node['node_id']} {state} at {where}")
    print(spark_cluster.status(_cluster_cfg(args)))
    return 0


# ---- produce ---------------------------------------------------------------------------------


def _pairs(pairs: list[str]) -> dict[str, str]:
    """``--param key=value`` pairs as text (dashes in keys become underscores)."""
    out: dict[str, str] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ValueError(f"--param expects key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        out[key.replace("-", "_")] = value
    return out


def _params(pairs: list[str]) -> dict[str, Any]:
    """``--param`` pairs with values read as JSON where they parse (numbers, true), else text."""
    out: dict[str, Any] = {}
    for key, value in _pairs(pairs).items():
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def cmd_produce(args: argparse.Namespace) -> int:
    if args.workload != "events":
        return _produce_preset(args)
    from producers.produce import ProduceConfig, produce_events
    from schemas.topics import EVENTS_TOPIC

    topic = args.topic_prefix + EVENTS_TOPIC
    cfg = ProduceConfig(
        topic=topic,
        count=args.count,
        rate=args.rate,
        bad_fraction=args.bad_fraction,
        publishers=args.publishers,
        seed=args.seed,
        progress=not args.quiet,
        workers=args.workers,
    )
    result = produce_events(connection(args), cfg)
    rep = result.report
    print(
        f"{rep.delivered} of {rep.sent} records delivered to {topic} in {result.seconds:.2f}s "
        f"({result.events_per_s:,.0f} events/s, {result.mb_per_s:.1f} MB/s); "
        f"{result.good} well-formed, {sum(result.faults.values())} deliberately bad"
        + (f" {dict(result.faults)}" if result.faults else "")
    )
    if rep.failed:
        print(f"FAILED: {rep.failed} records were not delivered: {rep.errors}", file=sys.stderr)
        return 1
    return 0


# ---- jobs ------------------------------------------------------------------------------------


def _produce_preset(args: argparse.Namespace) -> int:
    import inspect

    from producers.replay import Replay
    from producers.sinks import JsonlSink, KafkaSink, run_workload
    from producers.workloads import PRESETS

    params = _params(args.param)
    if args.workload == "replay":
        if not args.file:
            raise ValueError("replay needs --file PATH (.jsonl, .csv or .avro)")
        workload: Any = Replay(Path(args.file), speed=args.speed)
        count = args.count if args.count_given else 2**62
    else:
        cls = PRESETS[args.workload]
        accepted = set(inspect.signature(cls).parameters)
        unknown = set(params) - accepted
        if unknown:
            raise ValueError(f"{args.workload} has no parameter {sorted(unknown)}; it takes {sorted(accepted)}")
        workload = cls(**{"seed": args.seed, **params})
        count = args.count
    if args.out:
        sink: Any = JsonlSink(folder=Path(args.out))
        where = f"{args.out}/events.jsonl and subscriptions.jsonl"
    elif args.log:
        sink = JsonlSink(log=Path(args.log))
        where = f"the matching log {args.log}"
    else:
        sink = KafkaSink(connection(args), args.topic_prefix)
        where = f"Kafka ({sink.events_topic}, {sink.subs_topic})"
    report = run_workload(workload, sink, count, rate=args.rate, progress=not args.quiet)
    w = report.written
    print(
        f"{args.workload}: {w.get('subscriptions', 0):,} subscriptions and {w.get('events', 0):,} events written to "
        f"{where} in {report.seconds:.2f}s ({report.events_per_s:,.0f} events/s)"
    )
    summary = {k: v for k, v in report.workload.items() if k != "event_types"}
    print(json.dumps(summary, default=str))
    return 0


def cmd_topology(args: argparse.Namespace) -> int:
    from routing.planning.named_topologies import generate
    from routing.planning.topology import to_micpice_nodes_links

    topo = generate(args.kind, **_pairs(args.param))  # generate converts text to each parameter's type
    if args.format == "json":
        doc: Any = topo.to_json()
    elif args.format == "micpice":
        doc = to_micpice_nodes_links(topo)
    else:
        doc = topo.topology_records()
    if args.to_kafka:
        from producers.kafka_writer import KafkaWriter
        from schemas.codec import codec_for
        from schemas.topics import TOPOLOGY_TOPIC

        topic = args.topic_prefix + TOPOLOGY_TOPIC
        writer, codec = KafkaWriter(connection(args)), codec_for("TopologyElement")
        for record in topo.topology_records():
            writer.send(topic, record["element_id"], codec.encode(record))
        report = writer.flush()
        if report.failed:
            raise RuntimeError(f"{report.failed} topology records were not delivered: {report.errors}")
        logs.get("topology").info(f"{report.delivered} topology elements written to {topic}")
    text = json.dumps(doc, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
        summary = f"{topo.name}: {len(topo.nodes)} nodes, {len(topo.links)} directed links -> {args.out}"
        logs.get("topology").info(summary)
    elif not args.to_kafka:
        print(text)
    return 0


def _system(args: argparse.Namespace) -> dict[str, Any]:
    if args.system:
        loaded: dict[str, Any] = json.loads(Path(args.system).read_text())
        return loaded
    from routing.reliability.evaluation_system import reliability_tree_system

    return reliability_tree_system(args.seed)


def cmd_qos_predict(args: argparse.Namespace) -> int:
    from routing.reliability.allocation import bulk_allocation
    from routing.reliability.prediction import predict, to_spec_output

    system = _system(args)
    with bulk_allocation():  # a one-shot process: pausing the collector is ours to do
        prediction = predict(system, model=args.model, superposition=args.superposition)
    print(json.dumps(to_spec_output(prediction), indent=2))
    return 0


def cmd_qos_simulate(args: argparse.Namespace) -> int:
    from producers.overlay import run
    from routing.reliability.simulator import to_spec_output

    result = run(_system(args), args.seconds, args.seed)
    print(json.dumps(to_spec_output(result), indent=2))
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    """Run the overlay simulator and emit what a real overlay would: events, telemetry, receipts."""
    import time as _time

    from producers import overlay
    from routing.reliability.simulator import to_spec_output
    from schemas.codec import codec_for

    system = _system(args)
    started = _time.monotonic()
    result = overlay.run(system, args.seconds, args.seed, telemetry=True)
    sim_s = _time.monotonic() - started
    assert result.telemetry is not None
    rows = overlay.records(system, result.telemetry, int(_time.time() * 1000), args.min_reliability)
    truth = to_spec_output(result)
    if args.out:
        import orjson

        folder = Path(args.out)
        folder.mkdir(parents=True, exist_ok=True)
        files = {t: (folder / f"{t.split('.', 1)[1].replace('.v1', '')}.jsonl").open("wb") for t in overlay.SCHEMA_OF}
        n = overlay.emit(rows, lambda topic, key, rec: files[topic].write(orjson.dumps(rec) + b"\n"), args.time_scale)
        for f in files.values():
            f.close()
        (folder / "ground_truth.json").write_text(json.dumps(truth, indent=2))
        where = f"{folder}/ (and ground_truth.json)"
    else:
        from producers.kafka_writer import KafkaWriter

        writer = KafkaWriter(connection(args))
        codecs = {t: codec_for(s) for t, s in overlay.SCHEMA_OF.items()}
        n = overlay.emit(
            rows,
            lambda topic, key, rec: writer.send(args.topic_prefix + topic, key, codecs[topic].encode(rec)),
            args.time_scale,
        )
        report = writer.flush()
        if report.failed:
            raise RuntimeError(f"{report.failed} records were not delivered: {report.errors}")
        where = "Kafka"
    logs.get("simulate").info(
        f"simulated {args.seconds:g}s of the overlay in {sim_s:.2f}s ({result.event_hops / sim_s:,.0f} event-hops/s); "
        f"{n:,} records to {where}"
    )
    print(
        json.dumps(
            {"summary": overlay.summary(result), "ground_truth": truth} if args.verbose else overlay.summary(result)
        )
    )
    return 0


def _spark(args: argparse.Namespace) -> Any:
    from streaming.session import SparkConfig, build_session

    return build_session(SparkConfig(master=args.master, ui=args.spark_ui), _jars(args))


def _job_paths(args: argparse.Namespace, job: str) -> tuple[Path, Path]:
    """A streaming job's checkpoint folder and stats file: the flags, else under HOME per topic prefix."""
    home = _home(args)
    checkpoint = Path(args.checkpoint) if args.checkpoint else home / "checkpoints" / f"{job}{args.topic_prefix}"
    stats = Path(args.stats) if args.stats else home / "stats" / f"{job}{args.topic_prefix}.jsonl"
    return checkpoint, stats


def _validation_cfg(args: argparse.Namespace) -> Any:
    from streaming.validation_job import ValidationConfig

    checkpoint, stats = _job_paths(args, "validation")
    return ValidationConfig(
        conn=connection(args),
        checkpoint=checkpoint,
        topic_prefix=args.topic_prefix,
        available_now=args.available_now,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        stats_file=stats,
    )


def cmd_validate(args: argparse.Namespace) -> int:
    from streaming.validation_job import run

    cfg = _validation_cfg(args)
    spark = _spark(args)
    logs.get("validation").info(
        f"reading {len(cfg.input_specs())} input topics, dead letters to {cfg.deadletter_topic}, "
        f"checkpoint {cfg.checkpoint}"
    )
    run(spark, cfg, quiet=args.quiet)
    spark.stop()
    return 0


def cmd_match_job(args: argparse.Namespace) -> int:
    from streaming.head_start import HeadStart
    from streaming.matching_job import MatchingConfig, run

    checkpoint, stats = _job_paths(args, "matching")
    direct = args.mode == "direct"
    if direct and args.available_now:
        raise SystemExit("match-job --mode direct runs continuously; --available-now needs --mode exact")
    cfg = MatchingConfig(
        conn=connection(args),
        checkpoint=checkpoint,
        topic_prefix=args.topic_prefix,
        available_now=args.available_now,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        trigger_interval=args.trigger_interval,
        index=args.index,
        stats_file=stats,
        deliver=not (args.no_delivery or direct),
    )
    # a fresh start reads and plans the subscriptions while Spark starts (docs/decisions/fresh-start-head-start.md)
    head_start = None if direct else HeadStart.begin(cfg)
    spark = _spark(args)
    log = logs.get("matching")
    if direct:  # docs/decisions/direct-matching.md
        from streaming import matching_direct

        log.info(
            f"direct mode: {cfg.events_topic} -> {cfg.matches_topic}, each worker following "
            f"{cfg.subscriptions_topic} (dead letters to {cfg.deadletter_topic}), checkpoint {cfg.checkpoint}"
        )
        totals = matching_direct.run(spark, cfg)
        spark.stop()
        logs.log_batch(log, None, totals, what="direct mode")
        return 0
    log.info(
        f"{cfg.events_topic} x {cfg.subscriptions_topic} -> {cfg.matches_topic} "
        f"(dead letters to {cfg.deadletter_topic})"
        + ("" if args.no_delivery else ", delivery through the channel topics (docs/reference/delivery.md)")
        + f", checkpoint {cfg.checkpoint}"
    )
    history = run(spark, cfg, quiet=args.quiet, head_start=head_start)
    spark.stop()
    totals = {
        "events_matched": sum(b.events for b in history),
        "dead_lettered_events": sum(b.rejected_events for b in history),
        "dead_lettered_subscription_records": sum(b.rejected_subscriptions for b in history),
        "matches": sum(b.matches for b in history),
        "deliveries": sum(b.deliveries for b in history),
    }
    logs.log_batch(log, None, totals, what=f"{len(history)} micro-batches")
    return 0


def _driver_job(args: argparse.Namespace, job: str) -> dict[str, Any]:
    """The settings every driver-state job (QoS, routes, composites) takes from the command line."""
    checkpoint, stats = _job_paths(args, job)
    return {
        "conn": connection(args),
        "checkpoint": checkpoint,
        "topic_prefix": args.topic_prefix,
        "available_now": args.available_now,
        "trigger_interval": args.trigger_interval,
        "lateness_ms": int(args.lateness_s * 1000),
        "max_offsets_per_trigger": args.max_offsets_per_trigger,
        "stats_file": stats,
    }


def _run_driver_job(args: argparse.Namespace, job: str, cfg: Any, run: Any, banner: str, counts: Sequence[str]) -> int:
    """Start Spark, run a driver-state job until done or interrupted, and summarise its batches."""
    spark = _spark(args)
    log = logs.get(job)
    log.info(f"{banner}; checkpoint {cfg.checkpoint}")
    history = run(spark, cfg, quiet=args.quiet)
    spark.stop()
    totals = {
        "records": sum(sum(b.records.values()) for b in history),
        "dead_letters": sum(b.dead_letters for b in history),
        **{k: sum(b.extra[k] for b in history) for k in counts},
    }
    logs.log_batch(log, None, totals, what=f"{len(history)} micro-batches")
    return 0


def cmd_routes_job(args: argparse.Namespace) -> int:
    from routing.monitors.routes import PlannerConfig
    from schemas.topics import ROUTES_TOPIC
    from streaming.routes_job import RoutesConfig, run

    planner = PlannerConfig(
        plan_id=args.plan_id,
        method=args.method,
        order=args.order,
        check_period_ms=int(args.check_period_s * 1000),
        rate_window_ms=int(args.check_period_s * 1000) * args.window_periods,
        drift=args.drift,
        sustain=args.sustain,
        min_saving=args.min_saving,
        link_cost=args.link_cost,
    )
    cfg = RoutesConfig(planner=planner, **_driver_job(args, "routes"))
    banner = (
        f"topology, subscriptions, matches, link telemetry -> {cfg.topic(ROUTES_TOPIC)} "
        f"({planner.method}), checked every {args.check_period_s:g} s"
    )
    return _run_driver_job(args, "routes", cfg, run, banner, ["plans"])


def cmd_composites_job(args: argparse.Namespace) -> int:
    from routing.monitors.composites import CompositeMonitorConfig
    from schemas.topics import COMPOSITES_TOPIC, PLACEMENTS_TOPIC
    from streaming.composites_job import CompositesConfig, run

    monitor = CompositeMonitorConfig(
        max_instances=args.max_instances,
        method=args.method,
        check_period_ms=int(args.check_period_s * 1000),
        rate_window_ms=int(args.check_period_s * 1000) * args.window_periods,
        min_saving=args.min_saving,
        sustain=args.sustain,
        link_cost=args.link_cost,
    )
    cfg = CompositesConfig(monitor=monitor, **_driver_job(args, "composites"))
    banner = (
        f"events x composite subscriptions -> {cfg.topic(COMPOSITES_TOPIC)}, placements "
        f"({monitor.method}) -> {cfg.topic(PLACEMENTS_TOPIC)}"
    )
    return _run_driver_job(args, "composites", cfg, run, banner, ["detections", "placements"])


def _read_domains(path: Path | None) -> dict[str, Any] | None:
    """The ``--domains`` file's JSON object (None without the flag); a bad file exits with its reason."""
    if path is None:
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"error: --domains {path}: {exc}") from None
    if not isinstance(doc, dict):
        raise SystemExit(f"error: --domains {path}: must be a JSON object keyed by attribute")
    return doc


def _channel_monitor_config(args: argparse.Namespace) -> Any:
    from routing.monitors.channels import ChannelMonitorConfig

    return ChannelMonitorConfig(
        k=args.k,
        psi=args.psi,
        sample_events=args.sample_events,
        method=args.method,
        drift=args.drift,
        margin=args.margin,
        min_interval_ms=int(args.min_interval_s * 1000),
        budget_ms=args.budget_ms,
        seed=args.seed,
        domains=_read_domains(args.domains),
    )


def cmd_channels_job(args: argparse.Namespace) -> int:
    """Subscriptions and matches -> planned channel assignment versions (docs/guide/channels.md)."""
    from schemas.topics import CHANNELS_TOPIC
    from streaming.channels_job import ChannelsConfig, run

    try:
        monitor = _channel_monitor_config(args)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    opts = _driver_job(args, "channels")
    del opts["lateness_ms"]  # the clock is the matches' event time; nothing waits for late records
    cfg = ChannelsConfig(monitor=monitor, **opts)
    banner = (
        f"subscriptions, matches -> {cfg.topic(CHANNELS_TOPIC)}: K = {monitor.k}, re-clustered by "
        f"{monitor.method} over the last {monitor.sample_events:,} events"
    )
    return _run_driver_job(args, "channels", cfg, run, banner, ["versions"])


def cmd_qos_job(args: argparse.Namespace) -> int:
    from schemas.topics import QOS_TOPIC
    from streaming.qos_job import QosConfig, run

    cfg = QosConfig(
        update_period_ms=int(args.update_period_s * 1000),
        window_buckets=args.window_periods,
        model=args.model,
        **_driver_job(args, "qos"),
    )
    banner = (
        f"topology, subscriptions, events, telemetry, receipts -> {cfg.topic(QOS_TOPIC)} every "
        f"{args.update_period_s:g} s (window {args.update_period_s * args.window_periods:g} s)"
    )
    return _run_driver_job(args, "qos", cfg, run, banner, ["reports", "alerts"])


def cmd_deadletter(args: argparse.Namespace) -> int:
    from schemas.topics import DEADLETTER_TOPIC
    from streaming.readers import read_topic, summarize_dead_letters

    records = read_topic(connection(args), args.topic_prefix + DEADLETTER_TOPIC, "DeadLetter")
    summary = summarize_dead_letters(records)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{summary['total']} dead letters ({summary['distinct']} distinct keys)")
        for code, entry in summary["by_code"].items():
            print(f"  {code:15} {entry['count']:7}  e.g. {entry['example']}")
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    """The live dashboard of any cluster's topics (docs/guide/dashboard.md), until Ctrl-C."""
    import time

    from streaming.dashboard import Dashboard
    from streaming.web import WebServer

    conn = connection(args)
    dashboard = Dashboard(conn, args.topic_prefix)
    server = WebServer(args.http_host, args.http_port, dashboard)
    try:
        url = server.start()
    except OSError as exc:
        dashboard.stop()
        raise RuntimeError(f"cannot serve on {args.http_host}:{args.http_port}: {exc}") from None
    prefix = f" (topic prefix {args.topic_prefix!r})" if args.topic_prefix else ""
    print(f"dashboard of {conn.bootstrap_servers}{prefix}: {url}   Ctrl-C stops it", flush=True)
    said = ""
    try:
        while True:
            health = dashboard.health()
            if health != said and (health == "ok" or health.startswith("feed")):
                print(f"feed: {'read every topic to its end; following' if health == 'ok' else health}", flush=True)
                said = health
            time.sleep(1.0)
    except KeyboardInterrupt:
        print("stopping the dashboard", flush=True)
    finally:
        server.stop()
    return 0


def cmd_match(args: argparse.Namespace) -> int:
    """Apply a matching log (docs/reference/matching-log.md), one output line per event; exit 2 if
    any line was invalid."""
    import contextlib
    import io

    from streaming.match_log import run_match_log

    # surrogateescape: a line that is not UTF-8 is reported as invalid, not a crash; newline="\n": line
    # numbers count \n only, as editors do; utf-8-sig: a leading byte order mark is dropped
    with contextlib.ExitStack() as stack:
        if args.log and args.log != "-":
            src: Any = stack.enter_context(open(args.log, encoding="utf-8-sig", errors="surrogateescape", newline="\n"))
        elif hasattr(sys.stdin, "buffer"):
            src = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8-sig", errors="surrogateescape", newline="\n")
            stack.callback(src.detach)  # leave sys.stdin open
        else:
            src = sys.stdin
        if args.out and args.out != "-":
            out: Any = stack.enter_context(open(args.out, "w", encoding="utf-8", newline="\n"))
        else:
            out = sys.stdout
        summary = run_match_log(src, out, sys.stderr)
        out.flush()
    print(summary.describe(), file=sys.stderr)
    return summary.exit_code


def cmd_run(args: argparse.Namespace) -> int:
    from streaming.demo import DemoConfig, run_demo

    cfg = DemoConfig(
        home=_home(args),
        port=args.port,
        controller_port=args.controller_port,
        bootstrap_servers=args.bootstrap_servers,
        kafka_config=args.kafka_config,
        events=args.events,
        bad_fraction=args.bad_fraction,
        seed=args.seed,
        master=args.master,
    )
    return run_demo(cfg)


def cmd_serve(args: argparse.Namespace) -> int:
    """Every job continuously, supervised, with metrics (docs/guide/serve.md)."""
    from streaming.serve import ServeConfig, serve
    from streaming.status import JOBS

    jobs = tuple(j for j in (args.jobs.split(",") if args.jobs is not None else JOBS) if j and j != "none")
    unknown = sorted(set(jobs) - set(JOBS))
    if unknown:
        raise ValueError(f"--jobs: unknown {', '.join(unknown)}; the jobs are {', '.join(JOBS)}")
    conn = _serve_connection(args, start_broker=True)
    cfg = ServeConfig(
        conn=conn,
        checkpoint_dir=_checkpoint_dir(args),
        stats_dir=_home(args) / "stats",
        topic_prefix=args.topic_prefix,
        jobs=jobs,
        master=args.master,
        spark_ui=args.spark_ui,
        trigger_interval=args.trigger_interval,
        demo=args.demo,
        demo_rate=args.demo_rate,
        seed=args.seed,
        http_host=args.http_host,
        http_port=args.http_port,
        dashboard=not args.no_dashboard,
        quiet=not args.verbose,
        kafka_config=args.kafka_config,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        job_trigger_intervals=dict(args.job_trigger_interval),
        job_max_offsets=dict(args.job_max_offsets_per_trigger),
        gateway=None if args.gateway is None else KafkaConnection.from_file(conn.bootstrap_servers, args.gateway),
        revoke_grace_s=args.revoke_grace_s,
    )
    return serve(cfg)


def _checkpoint_dir(args: argparse.Namespace) -> Path:
    return Path(args.checkpoint_dir).resolve() if args.checkpoint_dir else _home(args) / "checkpoints"


def _serve_connection(args: argparse.Namespace, start_broker: bool) -> KafkaConnection:
    """The cluster, with the local broker started (as ``run`` does) and every topic created."""
    from infra import kafka
    from infra.topics import ensure_topics

    if start_broker and not args.bootstrap_servers:
        logs.get("serve").info(kafka.up(_broker_cfg(args), _jars(args)))
    conn = connection(args)
    ensure_topics(conn, args.topic_prefix)
    return conn


def cmd_status(args: argparse.Namespace) -> int:
    """Topics, jobs' progress and lag, subscriptions, alerts; exit 3 when a job is unhealthy."""
    from rich.console import Console

    from streaming.status import EXIT_HEALTHY, EXIT_UNHEALTHY, collect, render

    doc = collect(connection(args), args.topic_prefix, _checkpoint_dir(args), args.max_lag)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        render(doc, Console(width=max(110, Console().width)))
    return EXIT_HEALTHY if doc["healthy"] else EXIT_UNHEALTHY


_INTERVAL = re.compile(r"\d+(\.\d+)?\s*(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?)")


class _JobOptionError(argparse.ArgumentTypeError, ValueError):
    """A per-job serve option's bad value: argparse prints its text, a config file's reader too."""


def _job_setting(text: str, option: str) -> tuple[str, str]:
    """``JOB=VALUE`` of a per-job serve option, the job one of serve's."""
    from streaming.status import JOBS

    job, sep, value = text.partition("=")
    if not sep or job.strip() not in JOBS or not value.strip():
        raise _JobOptionError(f"{option}: expected JOB=VALUE with JOB one of {', '.join(JOBS)} (got {text!r})")
    return job.strip(), value.strip()


def _job_trigger(text: str) -> tuple[str, str]:
    """``--job-trigger-interval``'s ``JOB=INTERVAL``, the interval as Spark reads it, e.g. ``10 seconds``."""
    job, value = _job_setting(text, "--job-trigger-interval")
    if not _INTERVAL.fullmatch(value):
        raise _JobOptionError(
            f"--job-trigger-interval: {value!r} is no interval; give a number and a unit, e.g. '10 seconds'"
        )
    return job, value


def _job_max_offsets(text: str) -> tuple[str, int]:
    """``--job-max-offsets-per-trigger``'s ``JOB=N``, N a positive integer."""
    job, value = _job_setting(text, "--job-max-offsets-per-trigger")
    if not value.isdigit() or int(value) <= 0:
        raise _JobOptionError(f"--job-max-offsets-per-trigger: {value!r} is not a positive integer")
    return job, int(value)


def _service_parsers(sub: Any) -> None:
    """``siftstream serve`` and ``siftstream status``: the live service and its health check."""
    from streaming.status import DEFAULT_MAX_LAG, JOBS

    p = sub.add_parser(
        "serve",
        help="run every job continuously, supervised, with metrics (and --demo's live feeds)",
        description="Starts the local broker (unless --bootstrap-servers), every topic, and every job "
        "(validation, matching with delivery, channels, QoS, routes, composites) continuously in one Spark "
        "application; restarts a failed query with exponential backoff; serves /metrics over HTTP; stops "
        "cleanly on Ctrl-C or SIGTERM, and a restart resumes from the checkpoints. --demo also starts live "
        "feeds. Guide: docs/guide/serve.md",
    )
    _common(p)
    _spark_opts(p)
    p.add_argument(
        "--http-port", type=int, default=8080, help="HTTP port, 0 = a free one, -1 = none (default: %(default)s)"
    )
    p.add_argument("--http-host", default="127.0.0.1", help="HTTP address to bind (default: %(default)s)")
    p.add_argument("--no-dashboard", action="store_true", help="serve /metrics only, no dashboard at /")
    p.add_argument("--checkpoint-dir", help="the jobs' checkpoints: DIR/<job><prefix> (default: HOME/checkpoints)")
    p.add_argument("--jobs", help=f"comma-separated jobs to run, 'none' for none (default: all of {','.join(JOBS)})")
    p.add_argument("--trigger-interval", default="5 seconds", help="every query's trigger (default: %(default)s)")
    p.add_argument("--max-offsets-per-trigger", type=int, help="every query's cap on records per micro-batch")
    p.add_argument(
        "--job-trigger-interval",
        metavar="JOB=INTERVAL",
        type=_job_trigger,
        action="append",
        default=[],
        help="one job's trigger instead of --trigger-interval, e.g. qos='10 seconds' (repeatable; default: none)",
    )
    p.add_argument(
        "--job-max-offsets-per-trigger",
        metavar="JOB=N",
        type=_job_max_offsets,
        action="append",
        default=[],
        help="one job's cap on records per micro-batch instead of --max-offsets-per-trigger, e.g. routes=100000 "
        "(repeatable; default: none)",
    )
    p.add_argument(
        "--gateway",
        metavar="ADMIN_PROFILE",
        help="secured Kafka: also run the subscription gateway and grant subscribers their channels, "
        "as the admin profile given (docs/guide/security.md)",
    )
    p.add_argument(
        "--revoke-grace-s",
        type=float,
        default=3600.0,
        help="with --gateway: seconds after a move until a subscriber loses the channel it left even when its "
        "client did not pass the hand-over marker there (default: %(default)s)",
    )
    p.add_argument("--demo", action="store_true", help="also start the live feeds: stocks, sensors, overlay, clients")
    p.add_argument(
        "--demo-rate", type=float, default=50.0, help="events per second of each demo feed (default: %(default)s)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the demo feeds (default: %(default)s)")
    p.add_argument("--verbose", action="store_true", help="one line per job and batch, Spark's warnings")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser(
        "status",
        help="topics, each job's committed progress and lag, subscriptions, open alerts (exit 3 if unhealthy)",
        description="Topics with their end offsets, each job's last committed batch and lag (from its checkpoint), "
        "the live subscriptions and the open QoS alerts. Exit 3 when a job has no committed batch or is more "
        "than --max-lag records behind: usable as a health check. Guide: docs/guide/serve.md",
    )
    _common(p)
    p.add_argument("--checkpoint-dir", help="the jobs' checkpoints (default: HOME/checkpoints)")
    p.add_argument(
        "--max-lag",
        type=int,
        default=DEFAULT_MAX_LAG,
        help="records a job may be behind and still be healthy (default: %(default)s)",
    )
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    p.set_defaults(func=cmd_status)


# ---- a Spark cluster -------------------------------------------------------------------------


def cmd_package(args: argparse.Namespace) -> int:
    """Write the zip that spark-submit ships to the executors (docs/guide/cluster.md)."""
    from infra.submit import package

    built = package(Path(args.dist))
    print(f"{built} ({built.stat().st_size:,} bytes)")
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    """Package, then run ``siftstream COMMAND...`` as an application of a Spark cluster through
    spark-submit, or print that command (docs/guide/cluster.md)."""
    import shlex

    from infra.submit import package, submit_command, submit_env
    from streaming.session import SparkConfig

    command = args.command_line[1:] if args.command_line[:1] == ["--"] else args.command_line
    if not command:
        raise ValueError("submit: name the siftstream command to run after --, e.g. -- serve --bootstrap-servers H:P")
    built = package(Path(args.dist))
    defaults = SparkConfig()
    cmd = submit_command(
        args.master,
        built,
        _jars(args).spark,
        command,
        driver_memory=args.driver_memory or defaults.driver_memory,
        driver_java_options=f"-XX:-DontCompileHugeMethods -XX:+UseParallelGC {logs.spark_java_options()}",
        executor_memory=args.executor_memory or defaults.executor_memory,
        total_executor_cores=args.total_executor_cores,
        conf=args.conf,
    )
    if args.dry_run:
        print(shlex.join(cmd))
        return 0
    env = submit_env()
    os.execve(cmd[0], cmd, env)  # spark-submit takes this process over: signals reach it directly


def _cluster_parsers(sub: Any) -> None:
    """``siftstream package`` and ``siftstream submit``: the project on a Spark cluster."""
    p = sub.add_parser(
        "package",
        help="write the zip of the project that spark-submit ships to a Spark cluster's executors",
        description="Writes DIST/siftstream.zip: routing, streaming, producers, schemas and infra with their data "
        "files, importable from the zip (spark-submit --py-files). Guide: docs/guide/cluster.md",
    )
    p.add_argument("--dist", default="dist", help="output folder (default: %(default)s)")
    p.set_defaults(func=cmd_package)

    p = sub.add_parser(
        "submit",
        help="run a siftstream command (serve, a job) on a Spark cluster through spark-submit",
        description="Packages the project (as siftstream package does), then runs spark-submit --master MASTER "
        "--deploy-mode client with the Kafka connector jars, the zip as --py-files and streaming/submit_main.py "
        "running COMMAND: the driver runs here, the executors import the zip. Put the command after --, with "
        "--bootstrap-servers of a Kafka cluster that the driver and the executors reach. Guide: docs/guide/cluster.md",
    )
    p.add_argument("--master", required=True, help="the cluster's master URL, e.g. spark://host:7077")
    p.add_argument("--dist", default="dist", help="where the zip is written (default: %(default)s)")
    p.add_argument("--driver-memory", help="the driver's heap (default: the local session's, 4g)")
    p.add_argument("--executor-memory", help="each executor's heap (default: 1g)")
    p.add_argument("--total-executor-cores", type=int, help="cores of the cluster to take (default: all)")
    p.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting for spark-submit (repeatable)"
    )
    p.add_argument("--dry-run", action="store_true", help="print the spark-submit command instead of running it")
    p.add_argument("command_line", nargs=argparse.REMAINDER, metavar="-- COMMAND ...", help="the siftstream command")
    p.set_defaults(func=cmd_submit)


# ---- parser ----------------------------------------------------------------------------------


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--home", default=str(DEFAULT_HOME), help="state folder: broker data, checkpoints, logs (default: %(default)s)"
    )
    p.add_argument("--bootstrap-servers", help="use this Kafka cluster instead of the local broker")
    p.add_argument(
        "--kafka-config", help="client properties file (SASL/TLS); 'java.'/'librdkafka.' prefixes target one client"
    )
    p.add_argument("--port", type=int, default=9092, help="local broker port (default: %(default)s)")
    p.add_argument(
        "--controller-port", type=int, default=9093, help="local KRaft controller port (default: %(default)s)"
    )
    p.add_argument("--topic-prefix", default="", help="prefix for every topic name (default: none)")


def _spark_opts(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--master", default="local[2]", help="Spark master: local[N] or spark://host:port (default: %(default)s)"
    )
    p.add_argument("--spark-ui", action="store_true", help="start the Spark web UI")


def _job_opts(p: argparse.ArgumentParser, job: str) -> None:
    """The options every streaming job takes: connection, Spark, stop condition, state paths."""
    _common(p)
    _spark_opts(p)
    p.add_argument("--available-now", action="store_true", help="process what is there now, then stop")
    p.add_argument("--checkpoint", help=f"checkpoint folder (default: HOME/checkpoints/{job})")
    p.add_argument("--stats", help=f"JSON Lines file for per-batch counts (default: HOME/stats/{job}.jsonl)")
    p.add_argument("--max-offsets-per-trigger", type=int, help="cap on records per micro-batch")


def _qos_parsers(sub: Any) -> None:
    """``siftstream qos``: predict a system's reliability, or simulate it, each with its own options."""
    p = sub.add_parser(
        "qos",
        help="reliability of a broker network: predict it, or simulate the same network",
        description="Offline reliability of one system document (docs/reference/qos-predict.md). predict: "
        "the predicted reliability R'_s of every subscriber (the model: docs/reference/reliability-model.md); "
        "simulate: the measured R_s of the same network, simulated.",
    )
    qos = p.add_subparsers(dest="action", required=True)

    q = qos.add_parser(
        "predict",
        help="predicted reliability of every subscriber",
        description="The predicted reliability R'_s of every subscriber with its interval, delays, broker loads "
        "and warnings. Reference: docs/reference/qos-predict.md; the model: docs/reference/reliability-model.md",
    )
    q.add_argument("--system", required=True, metavar="FILE", help="the system document (JSON)")
    q.add_argument(
        "--model",
        choices=["gg1", "mm1"],
        default="gg1",
        help="gg1 (QNA, KLB, waiting-time distribution) or mm1 (the paper's method) (default: %(default)s)",
    )
    q.add_argument(
        "--superposition",
        choices=["auto", "asymptotic", "hybrid"],
        default="auto",
        help="gg1: how flows merge at a broker; auto picks by link jitter (default: %(default)s)",
    )
    q.set_defaults(func=cmd_qos_predict)

    q = qos.add_parser(
        "simulate",
        help="measured reliability of the same network, simulated",
        description="Simulates the system document's network (FIFO brokers, lossy links) and prints the measured "
        "R_s of every subscriber in the shape of qos predict. Reference: docs/reference/qos-predict.md",
    )
    q.add_argument("--system", required=True, metavar="FILE", help="the system document (JSON)")
    q.add_argument("--seconds", type=float, default=600.0, help="simulated time (default: %(default)s)")
    q.add_argument("--seed", type=int, default=0, help="the random seed (default: %(default)s)")
    q.set_defaults(func=cmd_qos_simulate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="siftstream",
        description="Content-based publish/subscribe on Kafka and Spark. Every option can also be set in a "
        "TOML file or the environment (docs/guide/configuration.md).",
        allow_abbrev=False,  # `siftstream match --log FILE` is match's option, not an abbreviated --log-level
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help=f"settings file, TOML (default: ${CONFIG_ENV}, else ./{DEFAULT_FILE} when present)",
    )
    parser.add_argument(
        "--log-level",
        choices=logs.LEVELS,
        help=f"least level logged on stderr (default: ${logs.LOG_LEVEL_ENV}, else info; docs/guide/logs.md)",
    )
    parser.add_argument(
        "--log-format",
        choices=logs.FORMATS,
        help=f"text lines or JSON Lines for log shippers (default: ${logs.LOG_FORMAT_ENV}, else text)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "config",
        help="show the effective settings and where each came from (file, environment, flag, default)",
        description="Effective settings: the built-in defaults, the TOML file, SIFTSTREAM_* variables and "
        "flags, later ones winning (docs/guide/configuration.md).",
    )
    p.add_argument("action", choices=["show"])
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--all", action="store_true", help="without a command: every option, defaults too")
    p.add_argument(
        "target",
        nargs=argparse.REMAINDER,
        help="a command and, optionally, its flags: every option of it (e.g. channels-job --k 16)",
    )
    p.set_defaults(func=cmd_config)

    p = sub.add_parser("infra", help="local Kafka broker, topics, jars, Spark standalone cluster")
    p.add_argument("action", choices=["up", "down", "status", "topics", "jars", "spark-up", "spark-down"])
    _common(p)
    p.add_argument(
        "--replication",
        type=int,
        help="replication factor for new topics (default: the cluster's own, 1 on one broker, 3 on --brokers 3)",
    )
    p.add_argument(
        "--brokers",
        type=int,
        default=1,
        help="up: start a KRaft cluster of this many broker+controller nodes under HOME/kafka-cluster, client "
        "ports from --port up, controller ports from --controller-port up (from --port + N if they would overlap); "
        "replication factor 3, min.insync.replicas 2, a 512 MiB heap per node (docs/guide/faults.md). "
        "down and status find the cluster themselves (default: %(default)s, the single broker)",
    )
    p.add_argument(
        "--secure",
        action="store_true",
        help="up: a single broker under HOME/kafka-secure with TLS, SASL/SCRAM and ACLs per role, and a "
        "--kafka-config profile per role in HOME/kafka-secure/profiles; with --brokers N, a secured cluster "
        "under HOME/kafka-secure-cluster (profiles in its profiles/); status --secure: that cluster's nodes "
        "(docs/guide/security.md)",
    )
    p.add_argument("--json", action="store_true", help="status: one JSON object per broker (node id, ports, pid)")
    p.add_argument("--spark-port", type=int, default=7077, help="standalone master port (default: %(default)s)")
    p.add_argument("--spark-webui-port", type=int, default=18080, help="master web UI port; the worker's is +1")
    p.set_defaults(func=cmd_infra)

    from producers.workloads import PRESETS

    p = sub.add_parser("produce", help="write a workload to Kafka or files")
    p.add_argument(
        "workload",
        choices=["events", *PRESETS, "replay"],
        help="events: the simple built-in generator (with --bad-fraction); the others are the papers' "
        "workloads and demo feeds (see README), or replay of a recorded file",
    )
    _common(p)
    p.add_argument("--count", type=int, default=10_000, help="events to write (default: %(default)s)")
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a preset parameter, e.g. --param decay=0.88 (repeatable)",
    )
    p.add_argument("--out", help="write JSON Lines files into this folder instead of Kafka")
    p.add_argument(
        "--log", help="write one matching log (subscribes, then events; docs/reference/matching-log.md) instead"
    )
    p.add_argument("--file", help="replay: the .jsonl, .csv or .avro file")
    p.add_argument(
        "--speed", type=float, default=0.0, help="replay: 1 = original timing, 2 = twice as fast, 0 = flat out"
    )
    p.add_argument("--rate", type=float, default=0.0, help="records per second, 0 = as fast as possible (default)")
    p.add_argument("--bad-fraction", type=float, default=0.0, help="fraction of deliberately bad records (default: 0)")
    p.add_argument("--publishers", type=int, default=8, help="number of publishers (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=1, help="producer processes (default: %(default)s)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_produce)

    p = sub.add_parser("topology", help="generate a broker overlay (random, transit-stub, trees, the papers' setups)")
    p.add_argument(
        "kind",
        help="chen-flat-12, chen-ts-100, chen-flat-100, opyrchal-fig5, reliability-tree-20, "
        "flat-random, pure-random, waxman, transit-stub, tree, random-tree",
    )
    _common(p)
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="generator parameter (repeatable)")
    p.add_argument(
        "--format",
        choices=["json", "micpice", "records"],
        default="json",
        help="json: nodes and links; micpice: the nodes/links of a docs/reference/distribution.md instance; "
        "records: topology topic",
    )
    p.add_argument("--out", help="write to this file instead of stdout")
    p.add_argument("--to-kafka", action="store_true", help="also publish the elements to the topology topic")
    p.set_defaults(func=cmd_topology)

    _qos_parsers(sub)
    add_plan_parsers(sub)
    add_client_parsers(sub, _common, connection)
    _service_parsers(sub)
    _cluster_parsers(sub)

    p = sub.add_parser("simulate", help="play a broker overlay: events, link/broker telemetry, receipts")
    _common(p)
    p.add_argument(
        "--system",
        help="a system document, docs/reference/qos-predict.md (default: the reliability paper's 20-broker tree)",
    )
    p.add_argument("--seconds", type=float, default=60.0, help="simulated time (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="write JSON Lines files and ground_truth.json here instead of Kafka")
    p.add_argument(
        "--time-scale",
        type=float,
        default=0.0,
        help="emit in real time: 1 = as simulated, 10 = ten times faster, 0 = flat out (default)",
    )
    p.add_argument("--verbose", action="store_true", help="also print the per-subscriber ground truth")
    p.add_argument(
        "--min-reliability",
        type=float,
        help="the QoS wish written into each simulated subscriber's subscription (default: none)",
    )
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("qos-job", help="run the QoS job: telemetry and receipts -> predicted and measured reliability")
    _job_opts(p, "qos")
    p.add_argument("--trigger-interval", default="5 seconds", help="micro-batch interval (default: %(default)s)")
    p.add_argument("--update-period-s", type=float, default=10.0, help="report period (default: %(default)s)")
    p.add_argument(
        "--window-periods", type=int, default=30, help="estimates cover this many periods (default: %(default)s)"
    )
    p.add_argument(
        "--lateness-s", type=float, default=5.0, help="how late telemetry and receipts may come (default: %(default)s)"
    )
    p.add_argument("--model", choices=["gg1", "mm1"], default="gg1", help="reliability model (default: %(default)s)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_qos_job)

    p = sub.add_parser("routes-job", help="run the routes job: overlay, matches, telemetry -> distribution plans")
    _job_opts(p, "routes")
    p.add_argument("--trigger-interval", default="5 seconds", help="micro-batch interval (default: %(default)s)")
    p.add_argument("--plan-id", default="overlay", help="key of the plan records (default: %(default)s)")
    p.add_argument("--method", choices=["greedy", "enhanced", "exact"], default="enhanced")
    p.add_argument("--order", choices=["min-cost", "longest", "random"], default="min-cost")
    p.add_argument(
        "--check-period-s", type=float, default=10.0, help="how often to compare inputs (default: %(default)s)"
    )
    p.add_argument("--window-periods", type=int, default=6, help="rates over this many periods (default: %(default)s)")
    p.add_argument("--drift", type=float, default=0.25, help="relative change that counts (default: %(default)s)")
    p.add_argument("--sustain", type=int, default=2, help="checks a drift must last (default: %(default)s)")
    p.add_argument("--min-saving", type=float, default=0.05, help="switch routes only if this much cheaper")
    p.add_argument("--link-cost", choices=["topology", "delay"], default="topology", help="what a link costs")
    p.add_argument("--lateness-s", type=float, default=5.0, help="how late matches may come (default: %(default)s)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_routes_job)

    p = sub.add_parser("composites-job", help="run the composites job: detect composite events, place detection")
    _job_opts(p, "composites")
    p.add_argument("--trigger-interval", default="5 seconds", help="micro-batch interval (default: %(default)s)")
    p.add_argument("--max-instances", type=int, default=1000, help="partial matches kept per operator child")
    p.add_argument("--method", choices=["optimal", "adaptive", "joint-point"], default="optimal")
    p.add_argument("--check-period-s", type=float, default=10.0, help="placement check period (default: %(default)s)")
    p.add_argument("--window-periods", type=int, default=6, help="rates over this many periods (default: %(default)s)")
    p.add_argument("--min-saving", type=float, default=0.1, help="move a detection only if this much cheaper")
    p.add_argument("--sustain", type=int, default=3, help="checks a saving must last (default: %(default)s)")
    p.add_argument("--link-cost", choices=["topology", "delay"], default="topology", help="what a link costs")
    p.add_argument("--lateness-s", type=float, default=5.0, help="how late events may come (default: %(default)s)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_composites_job)

    p = sub.add_parser(
        "channels-job",
        help="run the channels job: subscriptions and matches -> delivery channel versions",
        description="Groups the live subscriptions into at most K delivery channels with few false positives, "
        "places new subscriptions by the join rule, re-clusters when the waste drifts, and writes planned "
        "ChannelAssignment versions (docs/guide/channels.md; methods: docs/reference/channels.md).",
    )
    _job_opts(p, "channels")
    p.add_argument("--trigger-interval", default="5 seconds", help="micro-batch interval (default: %(default)s)")
    p.add_argument("--k", type=int, default=32, help="number of channels K (default: %(default)s)")
    p.add_argument("--psi", type=int, default=20, help="recent-event window of the similarity (default: %(default)s)")
    p.add_argument(
        "--sample-events", type=int, default=2000, help="matched events in the recent sample (default: %(default)s)"
    )
    p.add_argument(
        "--method",
        choices=["flooding", "exact", "ck", "ov", "kmeans", "spectral-rassoc", "spectral-ncut", "approx", "auto"],
        default="auto",
        help="re-clustering method, routing.channels.RECLUSTER_METHODS; auto fits flooding, the baselines, "
        "spectral-ncut and what else --budget-ms allows on the sample's older events and keeps the fewest false "
        "positives on its newest quarter (docs/reference/channels.md) (default: %(default)s)",
    )
    p.add_argument("--budget-ms", type=float, default=2000.0, help="time budget of auto (default: %(default)s)")
    p.add_argument(
        "--domains",
        type=Path,
        metavar="FILE",
        help="JSON object of the attributes' finite domains (docs/reference/channels.md §1); lets ck and ov "
        "re-cluster and auto try them",
    )
    p.add_argument(
        "--drift",
        type=float,
        default=0.05,
        help="rise of the false positives as a share of flooding's that re-clusters (default: %(default)s)",
    )
    p.add_argument(
        "--margin",
        type=float,
        default=0.1,
        help="least fraction of the false positives a new clustering must cut to be adopted (default: %(default)s)",
    )
    p.add_argument(
        "--min-interval-s", type=float, default=60.0, help="least time between attempts (default: %(default)s)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the k-means (default: %(default)s)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_channels_job, lateness_s=0.0)

    p = sub.add_parser("validate", help="run the validation / dead-letter job")
    _job_opts(p, "validation")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("match-job", help="run the matching job: events x subscriptions -> matches topic")
    _job_opts(p, "matching")
    p.add_argument(
        "--trigger-interval", default="0 seconds", help="micro-batch interval (default: %(default)s, back to back)"
    )
    p.add_argument(
        "--index",
        choices=["match", "brute-force"],
        default="match",
        help="match: the fast index; brute-force: the oracle, for checks (default: %(default)s)",
    )
    p.add_argument(
        "--no-delivery",
        action="store_true",
        help="write the matches only, no delivery through the channel topics (docs/reference/delivery.md)",
    )
    p.add_argument(
        "--mode",
        choices=["exact", "direct"],
        default="exact",
        help="exact: a batch's events see the subscriptions of its offset range, replays see the same; direct: "
        "lower latency, each worker follows the subscriptions topic itself, no delivery, runs continuously "
        "(docs/decisions/direct-matching.md) (default: %(default)s)",
    )
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_match_job)

    p = sub.add_parser("deadletter", help="summarize the dead-letter topic")
    _common(p)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_deadletter)

    p = sub.add_parser(
        "dashboard",
        help="the live dashboard of a cluster's output topics, in the browser",
        description="Reads the output topics from the beginning of their retained data and serves the live "
        "dashboard at / and the metrics at /metrics; prints the URL; Ctrl-C stops it. Guide: docs/guide/dashboard.md",
    )
    _common(p)
    p.add_argument("--http-port", type=int, default=8080, help="HTTP port, 0 = a free one (default: %(default)s)")
    p.add_argument("--http-host", default="127.0.0.1", help="HTTP address to bind (default: %(default)s)")
    p.set_defaults(func=cmd_dashboard)

    p = sub.add_parser(
        "match", help="apply a matching log (docs/reference/matching-log.md): the subscriptions each event matches"
    )
    p.add_argument("--log", help="the matching log, JSON Lines (default: stdin)")
    p.add_argument("--out", help="write one JSON line per event here (default: stdout)")
    p.set_defaults(func=cmd_match)

    p = sub.add_parser("run", help="the whole pipeline on the built-in default, with a summary")
    _common(p)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--events", type=int, default=20_000, help="events to publish (default: %(default)s)")
    p.add_argument("--bad-fraction", type=float, default=0.02, help="deliberately bad share (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_run)
    return parser


def _setup_logs(args: argparse.Namespace, environ: Any) -> None:
    """``--log-level`` and ``--log-format``, else ``$SIFTSTREAM_LOG_LEVEL`` and
    ``$SIFTSTREAM_LOG_FORMAT``, else info and text (docs/guide/logs.md)."""
    level = args.log_level or environ.get(logs.LOG_LEVEL_ENV) or "info"
    fmt = args.log_format or environ.get(logs.LOG_FORMAT_ENV) or "text"
    source = "--log-level" if args.log_level else f"${logs.LOG_LEVEL_ENV}"
    if level.lower() not in logs.LEVELS:
        raise ValueError(f"{source}: the log level is one of {', '.join(logs.LEVELS)} (got {level!r})")
    source = "--log-format" if args.log_format else f"${logs.LOG_FORMAT_ENV}"
    if fmt.lower() not in logs.FORMATS:
        raise ValueError(f"{source}: the log format is one of {', '.join(logs.FORMATS)} (got {fmt!r})")
    logs.setup(level.lower(), fmt.lower())


def main(argv: Sequence[str] | None = None) -> int:
    from confluent_kafka import KafkaException  # a client error ends a command with its reason, not a traceback

    raw = list(argv) if argv is not None else sys.argv[1:]
    parser = build_parser()
    try:
        layers, config_file = load_config(parser, raw)
    except ConfigError as exc:
        print(f"siftstream: error: {exc}", file=sys.stderr)
        return 2
    args = parser.parse_args(raw)
    try:
        _setup_logs(args, os.environ)
    except ValueError as exc:
        print(f"siftstream: error: {exc}", file=sys.stderr)
        return 2
    args.config_layers, args.config_file = layers, config_file
    args.count_given = "--count" in raw
    # a job stopped by SIGTERM (service managers, CI) shuts down as on Ctrl-C
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 0
    except (RuntimeError, TimeoutError, ValueError, FileNotFoundError, KafkaException) as exc:
        message = str(exc)
        if isinstance(exc, KafkaException) and exc.args and hasattr(exc.args[0], "str"):
            message = f"the Kafka cluster: {exc.args[0].str()}"  # not KafkaError{code=...,val=...}
        if logs.current()[1] == "json":  # stderr stays JSON Lines
            logs.get("cli").error(message)
        else:
            print(f"siftstream: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
