"""``siftstream produce events``: the built-in generator to Kafka, at a rate, with a progress bar."""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from infra.connection import KafkaConnection
from producers.events import EventGenerator
from producers.faults import FAULTS, corrupt
from producers.kafka_writer import DeliveryReport, KafkaWriter
from schemas.codec import codec_for

CHUNK = 2000


@dataclass(frozen=True)
class ProduceConfig:
    """What to produce.

    Attributes
    ----------
    count : int
        Number of records to write.
    rate : float
        Target records per second; 0 writes as fast as possible.
    bad_fraction : float
        Fraction of records replaced by deliberately bad ones (cycling through every fault kind
        of ``producers.faults``), for demos and tests of the dead-letter path.
    """

    topic: str
    count: int
    rate: float = 0.0
    bad_fraction: float = 0.0
    publishers: int = 8
    lifetime_ms: int = 1000
    seed: int = 0
    progress: bool = True


@dataclass
class ProduceResult:
    """What was written, and what the validation job should make of it."""

    report: DeliveryReport
    seconds: float
    good: int = 0
    expected_errors: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)

    @property
    def events_per_s(self) -> float:
        return self.report.delivered / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.report.bytes_delivered / self.seconds / 1e6 if self.seconds > 0 else 0.0


def produce_events(conn: KafkaConnection, cfg: ProduceConfig, writer: KafkaWriter | None = None) -> ProduceResult:
    """Write ``cfg.count`` events (some deliberately bad) and wait for every delivery report."""
    if cfg.count < 0 or cfg.rate < 0 or not 0 <= cfg.bad_fraction <= 1:
        raise ValueError("count and rate must be >= 0 and bad_fraction in [0, 1]")
    writer = writer or KafkaWriter(conn)
    codec = codec_for("Event")
    gen = EventGenerator(cfg.publishers, cfg.lifetime_ms, cfg.seed)
    rng = random.Random(cfg.seed)
    kinds = sorted(FAULTS)
    result = ProduceResult(writer.report, 0.0)
    progress = _progress(cfg) if cfg.progress else None
    start = time.monotonic()
    written = 0
    try:
        while written < cfg.count:
            n = min(CHUNK, cfg.count - written)
            now_ms = int(time.time() * 1000)
            spacing = 1000.0 / cfg.rate if cfg.rate > 0 else 0.0
            for event in gen.batch(n, now_ms, spacing):
                if cfg.bad_fraction and rng.random() < cfg.bad_fraction:
                    kind = kinds[sum(result.faults.values()) % len(kinds)]
                    raw, code = corrupt(kind, rng, event)
                    result.faults[kind] += 1
                    result.expected_errors[code] += 1
                else:
                    raw = codec.encode(event)
                    result.good += 1
                writer.send(cfg.topic, event["publisher_id"], raw)
            written += n
            writer.poll()
            if progress is not None:
                progress[0].update(progress[1], completed=written)
            if cfg.rate > 0:  # pace to the target rate
                ahead = written / cfg.rate - (time.monotonic() - start)
                if ahead > 0:
                    time.sleep(ahead)
        writer.flush()
    finally:
        result.seconds = time.monotonic() - start
        if progress is not None:
            progress[0].stop()
    return result


def _progress(cfg: ProduceConfig) -> tuple[Any, Any]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn(f"producing to {cfg.topic}"), BarColumn(), MofNCompleteColumn(),
                   TimeRemainingColumn(), transient=True)
    task = bar.add_task("produce", total=cfg.count)
    bar.start()
    return bar, task
