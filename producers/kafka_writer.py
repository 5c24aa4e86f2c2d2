"""Write records to Kafka with confluent-kafka, counting every delivery report.

Idempotent producer with ``acks=all``: a record is counted as delivered only when the broker
acknowledged it, and every failure is counted and its first errors kept, never dropped silently.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, Message, Producer

from infra.connection import KafkaConnection


@dataclass
class DeliveryReport:
    """What happened to everything a writer sent."""

    sent: int = 0
    delivered: int = 0
    failed: int = 0
    bytes_delivered: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def pending(self) -> int:
        return self.sent - self.delivered - self.failed


class KafkaWriter:
    """A thin, counting wrapper over ``confluent_kafka.Producer``.

    Parameters
    ----------
    conn : KafkaConnection
        The cluster.
    overrides : dict
        Extra librdkafka settings (tuning in benchmarks).
    """

    def __init__(self, conn: KafkaConnection, **overrides: str | int | bool) -> None:
        settings: dict[str, str | int | bool] = {
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 500_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "message.timeout.ms": 60_000,
        }
        settings.update(overrides)
        self._producer = Producer(conn.confluent(**settings))
        self.report = DeliveryReport()

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.report.delivered += 1
            self.report.bytes_delivered += len(msg.value() or b"")
        else:
            self.report.failed += 1
            if len(self.report.errors) < 10:
                self.report.errors.append(f"{msg.topic()}: {err.str()}")

    def send(self, topic: str, key: bytes | str | None, value: bytes | None) -> None:
        """Queue one record; waits for queue space rather than failing when the queue is full."""
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, on_delivery=self._on_delivery)
                break
            except BufferError:
                self._producer.poll(0.05)
        self.report.sent += 1
        if self.report.sent % 1000 == 0:
            self._producer.poll(0)

    def poll(self) -> None:
        self._producer.poll(0)

    def flush(self, timeout_s: float = 60.0) -> DeliveryReport:
        """Wait for every delivery report (or the timeout); the unreported count as failed."""
        deadline = time.monotonic() + timeout_s
        while self.report.pending > 0 and time.monotonic() < deadline:
            self._producer.flush(min(1.0, max(0.0, deadline - time.monotonic())))
        if self.report.pending > 0:
            missing = self.report.pending
            self.report.failed += missing
            self.report.errors.append(f"{missing} records not acknowledged within {timeout_s:.0f}s")
        return self.report
