"""Write records to Kafka with confluent-kafka, counting every record's fate.

Idempotent producer with ``acks=all``. librdkafka reports only the failures
(``delivery.report.only.error``), each counted with its first errors kept; a Python callback for
every acknowledged record would cost a Python call per record. ``flush`` waits until no record is
in flight, so at that point every record sent and not reported failed was acknowledged by the
broker; records still unacknowledged when ``flush`` gives up count as failed. Nothing is dropped
silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import repeat

from confluent_kafka import KafkaError, Message, Producer

from infra.connection import KafkaConnection

__all__ = ["DeliveryReport", "KafkaWriter"]


@dataclass
class DeliveryReport:
    """What happened to everything a writer sent (``delivered`` is known after a flush)."""

    sent: int = 0
    delivered: int = 0
    failed: int = 0
    bytes_sent: int = 0
    bytes_delivered: int = 0
    errors: list[str] = field(default_factory=list)


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
            "delivery.report.only.error": True,  # successes are counted at flush (see the module doc)
        }
        settings.update(overrides)
        self._settings = conn.confluent(**settings)
        self._producer = Producer(self._settings)
        self.report = DeliveryReport()
        self._bytes_failed = 0
        self._failed_checked = 0  # failures already raised by ``flush_or_raise``

    @classmethod
    def like_spark(cls, conn: KafkaConnection) -> KafkaWriter:
        """A writer that puts each keyed record where Spark's Kafka sink would: Java's partitioner
        (murmur2 of the key, ``murmur2_random`` in librdkafka), batches lingering 5 ms, lz4."""
        settings: dict[str, str | int | bool] = {"linger.ms": 5, "partitioner": "murmur2_random"}
        return cls(conn, **settings)

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.report.failed += 1
            self._bytes_failed += len(msg.value() or b"")
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
        self.report.bytes_sent += len(value or b"")
        if self.report.sent % 1000 == 0:
            self._producer.poll(0)

    def send_many(self, topic: str, keys: list[str], values: list[bytes]) -> None:
        """``send`` for each (key, value), in a tight loop."""
        self.send_rows(repeat(topic, len(values)), keys, values)

    def send_rows(
        self, topics: Iterable[str], keys: Sequence[bytes | str | None], values: Sequence[bytes | None]
    ) -> None:
        """``send`` for each (topic, key, value), in a tight loop (the rows may name several topics)."""
        produce, poll, on_delivery = self._producer.produce, self._producer.poll, self._on_delivery
        for topic, key, value in zip(topics, keys, values, strict=True):
            while True:
                try:
                    produce(topic, value, key, on_delivery=on_delivery)
                    break
                except BufferError:
                    poll(0.05)
        self.report.sent += len(values)
        self.report.bytes_sent += sum(len(v) for v in values if v is not None)
        poll(0)

    def poll(self) -> None:
        self._producer.poll(0)

    def flush(self, timeout_s: float = 60.0) -> DeliveryReport:
        """Wait until no record is in flight (or the timeout); the unacknowledged count as failed."""
        missing = self._producer.flush(timeout_s)
        if missing > 0:
            self.report.failed += missing
            self.report.errors.append(f"{missing} records not acknowledged within {timeout_s:.0f}s")
        self.report.delivered = self.report.sent - self.report.failed
        # bytes of records still in flight at a timeout are unknown here: an upper bound then
        self.report.bytes_delivered = self.report.bytes_sent - self._bytes_failed
        return self.report

    def flush_or_raise(self, what: str, timeout_s: float = 120.0) -> None:
        """``flush``, then raise RuntimeError when a record sent since the last call failed (the
        caller's batch fails, to run again); the writer then goes on with a fresh producer."""
        report = self.flush(timeout_s)
        failed, self._failed_checked = report.failed - self._failed_checked, report.failed
        if failed:
            self._producer = Producer(self._settings)  # an idempotent producer may be fenced after a failure
            raise RuntimeError(f"{what}: {failed} records not written: {report.errors[-3:]}")

    def write_rows(self, rows: Sequence[tuple[str, bytes | None, bytes | None]], what: str) -> None:
        """Send ``(topic, key, value)`` rows in order and wait for all of them (``flush_or_raise``)."""
        topics, keys, values = (list(c) for c in zip(*rows, strict=True)) if rows else ([], [], [])
        self.send_rows(topics, keys, values)
        self.flush_or_raise(what)
