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

__all__ = [
    "ProduceConfig",
    "ProduceResult",
    "produce_events",
    "progress_bar",
]

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
    workers : int
        Producer processes; generating and encoding in Python is the bottleneck, not Kafka.
    """

    topic: str
    count: int
    rate: float = 0.0
    bad_fraction: float = 0.0
    publishers: int = 8
    lifetime_ms: int = 1000
    seed: int = 0
    progress: bool = True
    workers: int = 1
    note_len: int = 0


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
    """Write ``cfg.count`` events (some deliberately bad) and wait for every delivery report.

    With ``cfg.workers > 1`` the work is split over that many processes, each with its own
    publishers (so event ids stay unique), generator seed and producer; their reports are added up.
    """
    if cfg.count < 0 or cfg.rate < 0 or not 0 <= cfg.bad_fraction <= 1:
        raise ValueError("count and rate must be >= 0 and bad_fraction in [0, 1]")
    if not 1 <= cfg.workers <= cfg.publishers:
        raise ValueError(f"workers must be between 1 and the number of publishers ({cfg.publishers})")
    progress = progress_bar(f"producing to {cfg.topic}", cfg.count) if cfg.progress else None
    start = time.monotonic()
    try:
        if cfg.workers == 1:
            result = _produce_share(conn, cfg, 0, progress=progress, writer=writer)
        else:
            result = _produce_parallel(conn, cfg, progress)
    finally:
        if progress is not None:
            progress[0].stop()
    result.seconds = time.monotonic() - start
    return result


def _share(total: int, index: int, parts: int) -> int:
    return total // parts + (1 if index < total % parts else 0)


def _produce_share(
    conn: KafkaConnection,
    cfg: ProduceConfig,
    index: int,
    progress: Any = None,
    writer: KafkaWriter | None = None,
    counter: Any = None,
) -> ProduceResult:
    """One worker's part: its publishers, its share of the count and of the rate."""
    writer = writer or KafkaWriter(conn)
    count = _share(cfg.count, index, cfg.workers)
    rate = cfg.rate / cfg.workers
    first = sum(_share(cfg.publishers, i, cfg.workers) for i in range(index))
    gen = EventGenerator(
        _share(cfg.publishers, index, cfg.workers),
        cfg.lifetime_ms,
        cfg.seed * 1000 + index,
        note_len=cfg.note_len,
        first_publisher=first,
    )
    rng = random.Random(cfg.seed * 1000 + index)
    kinds = sorted(FAULTS)
    result = ProduceResult(writer.report, 0.0)
    start = time.monotonic()
    written = 0
    while written < count:
        n = min(CHUNK, count - written)
        now_ms = int(time.time() * 1000)
        spacing = 1000.0 / rate if rate > 0 else 0.0
        batch = gen.columns(n, now_ms, spacing)
        values = batch.avro()
        bad = [i for i in range(n) if rng.random() < cfg.bad_fraction] if cfg.bad_fraction else []
        if bad:  # the few bad records are made from their events' JSON form
            events = batch.records()
            for i in bad:
                kind = kinds[sum(result.faults.values()) % len(kinds)]
                values[i], code = corrupt(kind, rng, events[i])
                result.faults[kind] += 1
                result.expected_errors[code] += 1
        result.good += n - len(bad)
        writer.send_many(cfg.topic, batch.keys(), values)
        written += n
        if counter is not None:
            with counter.get_lock():
                counter.value += n
        if progress is not None:
            progress[0].update(progress[1], completed=written)
        if rate > 0:  # pace to the target rate
            ahead = written / rate - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)
    writer.flush()
    return result


_COUNTER: Any = None  # the shared progress counter of a worker process (set by _init_worker)


def _init_worker(counter: Any) -> None:
    """A forked worker's start: the shared counter, and SIGTERM back to its default action. The
    worker inherits the parent's Python handlers (a CLI run in the same process installs one),
    and ``Pool``'s exit ends its workers with SIGTERM while they wait for tasks; a handler that
    does not end the process would leave the parent waiting for that worker forever."""
    import signal

    global _COUNTER
    _COUNTER = counter
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _worker(args: tuple[KafkaConnection, ProduceConfig, int]) -> ProduceResult:
    conn, cfg, index = args
    return _produce_share(conn, cfg, index, counter=_COUNTER)


def _produce_parallel(conn: KafkaConnection, cfg: ProduceConfig, progress: Any) -> ProduceResult:
    import multiprocessing as mp

    ctx = mp.get_context("fork")  # children inherit the loaded codecs; each opens its own producer
    counter = ctx.Value("q", 0)
    total = ProduceResult(DeliveryReport(), 0.0)
    # a shared Value cannot travel as a task argument, only to the workers at their start
    with ctx.Pool(cfg.workers, initializer=_init_worker, initargs=(counter,)) as pool:
        pending = pool.map_async(_worker, [(conn, cfg, i) for i in range(cfg.workers)])
        while not pending.ready():
            pending.wait(0.2)
            if progress is not None:
                progress[0].update(progress[1], completed=counter.value)
        for part in pending.get():
            rep = part.report
            total.report.sent += rep.sent
            total.report.delivered += rep.delivered
            total.report.failed += rep.failed
            total.report.bytes_sent += rep.bytes_sent
            total.report.bytes_delivered += rep.bytes_delivered
            total.report.errors.extend(rep.errors)
            total.good += part.good
            total.expected_errors.update(part.expected_errors)
            total.faults.update(part.faults)
        pool.close()  # the workers end at the queue's sentinels: the exit's terminate finds none left
        pool.join()
    return total


def progress_bar(label: str, total: int) -> tuple[Any, Any]:
    """A started rich progress bar (removed when stopped) and its task, for ``label``."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), transient=True)
    task = bar.add_task(label, total=total)
    bar.start()
    return bar, task
