"""``siftstream run``: the whole pipeline on the built-in default, then a readable summary.

Today the pipeline is: local broker up, topics, a burst of events (a few deliberately bad) and
link telemetry, the validation job over everything new, and a summary of what was accepted and
what went to the dead letter and why. Later capabilities join this same command.
"""

from __future__ import annotations

import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from infra.connection import KafkaConnection


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
        ProduceConfig(
            "siftstream.events.v1", cfg.events, bad_fraction=cfg.bad_fraction, seed=cfg.seed + int(time.time())
        ),
    )
    if result.report.failed:
        raise RuntimeError(f"{result.report.failed} events were not delivered: {result.report.errors}")
    tele_good, tele_bad = _telemetry(conn, "siftstream.telemetry.links.v1", 500, cfg.seed)

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

    summary = summarize_dead_letters(read_topic(conn, "siftstream.deadletter.v1", "DeadLetter"))
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
    console.print(
        f"{verdict}; finished in {time.monotonic() - t0:.0f}s. The broker keeps running: "
        "`siftstream infra down` stops it."
    )
    return 0 if got_ok == expected_ok else 1
