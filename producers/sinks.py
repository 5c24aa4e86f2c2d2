"""Where workloads go: Kafka topics (single-object Avro) or JSON Lines files; and the loop that
drives a workload into a sink at a rate, with a progress bar and a final report."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson

from infra.connection import KafkaConnection
from producers.columns import EventColumns
from producers.kafka_writer import KafkaWriter
from producers.produce import progress_bar
from producers.workloads import Record, Workload
from schemas.codec import codec_for
from schemas.topics import EVENTS_TOPIC, SUBSCRIPTIONS_TOPIC

__all__ = [
    "JsonlSink",
    "KafkaSink",
    "RunReport",
    "Sink",
    "run_workload",
]


class Sink(Protocol):
    def events(self, batch: EventColumns) -> None: ...

    def subscriptions(self, records: list[Record]) -> None: ...

    def close(self) -> dict[str, Any]: ...


class JsonlSink:
    """``events.jsonl`` and ``subscriptions.jsonl`` in a folder (docs/reference/topics.md §1.3, one per line).

    With ``log`` set, one docs/reference/matching-log.md matching log instead: subscribe operations first, then events.
    """

    def __init__(self, folder: Path | None = None, log: Path | None = None) -> None:
        if (folder is None) == (log is None):
            raise ValueError("give exactly one of folder and log")
        self.log = log
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            self._events = self._subs = log.open("wb")
        else:
            assert folder is not None
            folder.mkdir(parents=True, exist_ok=True)
            self._events = (folder / "events.jsonl").open("wb")
            self._subs = (folder / "subscriptions.jsonl").open("wb")
        self.written = {"events": 0, "subscriptions": 0, "bytes": 0}

    def events(self, batch: EventColumns) -> None:
        if self.log is not None:
            lines = b"".join(
                orjson.dumps({"type": "event", "event_id": r["event_id"], "attributes": r["attributes"]}) + b"\n"
                for r in batch.records()
            )
        else:
            lines = batch.jsonl()
        self._events.write(lines)
        self.written["events"] += len(batch)
        self.written["bytes"] += len(lines)

    def subscriptions(self, records: list[Record]) -> None:
        lines = b"".join(orjson.dumps(r) + b"\n" for r in records)
        self._subs.write(lines)
        self.written["subscriptions"] += len(records)

    def close(self) -> dict[str, Any]:
        self._events.close()
        if self._subs is not self._events:
            self._subs.close()
        return dict(self.written)


class KafkaSink:
    """Events to ``siftstream.events.v1`` (keyed by publisher), subscriptions to the compacted
    ``siftstream.subscriptions.v1`` (keyed by subscription id), both single-object Avro."""

    def __init__(self, conn: KafkaConnection, prefix: str = "", writer: KafkaWriter | None = None) -> None:
        self.writer = writer or KafkaWriter(conn)
        self.events_topic = prefix + EVENTS_TOPIC
        self.subs_topic = prefix + SUBSCRIPTIONS_TOPIC
        self._sub = codec_for("Subscription")
        self.counts = {"events": 0, "subscriptions": 0}

    def events(self, batch: EventColumns) -> None:
        self.writer.send_many(self.events_topic, batch.keys(), batch.avro())
        self.counts["events"] += len(batch)

    def subscriptions(self, records: list[Record]) -> None:
        for r in records:
            self.writer.send(self.subs_topic, r["subscription_id"], self._sub.encode(r))
        self.counts["subscriptions"] += len(records)

    def close(self) -> dict[str, Any]:
        report = self.writer.flush()
        if report.failed:
            raise RuntimeError(f"{report.failed} records were not delivered: {report.errors}")
        return {**self.counts, "bytes": report.bytes_delivered, "delivered": report.delivered}


@dataclass
class RunReport:
    """What a preset run wrote."""

    workload: dict[str, Any]
    written: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def events_per_s(self) -> float:
        return self.written.get("events", 0) / self.seconds if self.seconds else 0.0


def run_workload(
    workload: Workload, sink: Sink, count: int, rate: float = 0.0, chunk: int = 5000, progress: bool = True
) -> RunReport:
    """Subscriptions first, then ``count`` events (fewer if the source runs out) at ``rate``
    events/s (0: as fast as possible)."""
    bar, task = progress_bar(workload.name, count) if progress else (None, None)
    start = time.monotonic()
    try:
        sink.subscriptions(workload.subscriptions())
        done = 0
        while done < count:
            n = min(chunk, count - done)
            batch = workload.columns(n)
            if not len(batch):  # a finite source (replay) ran out
                break
            sink.events(batch)
            done += len(batch)
            if bar is not None:
                bar.update(task, completed=done)
            if rate > 0:
                ahead = done / rate - (time.monotonic() - start)
                if ahead > 0:
                    time.sleep(ahead)
        written = sink.close()
    finally:
        if bar is not None:
            bar.stop()
    seconds = time.monotonic() - start
    return RunReport(workload.describe(), written, seconds)
