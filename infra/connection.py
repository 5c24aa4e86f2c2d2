"""How SiftStream reaches Kafka: one frozen config, built at the edge, used by every client.

A user with their own cluster passes ``--bootstrap-servers`` and, for SASL/TLS, ``--kafka-config
FILE``: a Java-style properties file. Keys in it go to both client stacks (Spark's JVM client and
librdkafka in confluent-kafka); a key prefixed ``java.`` goes only to Spark and one prefixed
``librdkafka.`` only to confluent-kafka, for the few settings whose names differ
(``sasl.jaas.config`` vs ``sasl.username``, truststores vs PEM files).

>>> c = KafkaConnection("127.0.0.1:9092", (("security.protocol", "SASL_SSL"),
...                                        ("java.sasl.mechanism", "PLAIN"), ("librdkafka.sasl.mechanisms", "PLAIN")))
>>> c.spark_options()["kafka.sasl.mechanism"], c.confluent()["sasl.mechanisms"]
('PLAIN', 'PLAIN')
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["KAFKA_LOGGER", "KafkaConnection", "arrived"]

KAFKA_LOGGER = logging.getLogger("siftstream.kafka")
"""Where the confluent-kafka clients' (librdkafka's) log lines go."""


@dataclass(frozen=True)
class KafkaConnection:
    """Bootstrap servers plus extra client properties (security and the like)."""

    bootstrap_servers: str
    properties: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_file(cls, bootstrap_servers: str, path: str | Path | None) -> KafkaConnection:
        """Read extra properties from a ``key=value`` file (``#`` comments, blank lines allowed)."""
        if path is None:
            return cls(bootstrap_servers)
        props = []
        for number, line in enumerate(Path(path).read_text().splitlines(), 1):
            line = line.strip()
            if not line or line.startswith(("#", "!")):
                continue
            if "=" not in line:
                raise ValueError(f"{path}:{number}: expected key=value, got {line!r}")
            key, value = line.split("=", 1)
            props.append((key.strip(), value.strip()))
        return cls(bootstrap_servers, tuple(props))

    def _props(self, own: str, other: str) -> dict[str, str]:
        out = {}
        for key, value in self.properties:
            if key.startswith(other):
                continue
            out[key.removeprefix(own)] = value
        return out

    def confluent(self, **extra: Any) -> dict[str, Any]:
        """Configuration for a confluent-kafka (librdkafka) client. librdkafka's log lines go to
        the Python logger ``siftstream.kafka`` instead of straight to standard error, so that the
        process's logging setup formats them and hides the benign ones (streaming/logs.py)."""
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers, "logger": KAFKA_LOGGER}
        conf.update(self._props("librdkafka.", "java."))
        conf.update(extra)
        return conf

    def spark_options(self) -> dict[str, str]:
        """Options for Spark's Kafka source and sink (``kafka.``-prefixed client properties)."""
        opts = {"kafka.bootstrap.servers": self.bootstrap_servers}
        opts.update({f"kafka.{k}": v for k, v in self._props("java.", "librdkafka.").items()})
        return opts


def arrived(consumer: Any, max_messages: int, timeout_s: float) -> list[Any]:
    """The messages a confluent-kafka ``consumer`` holds now, up to ``max_messages``, waiting at
    most ``timeout_s`` for the first: every read of a Kafka topic in SiftStream goes through it.

    ``Consumer.consume(n, timeout)`` returns when it has ``n`` messages or when the timeout has
    passed, so a reader that asks for a batch of 500 with half a second's timeout while a few
    records trickle in holds each of them for up to half a second (``bench/consume_wait.py``;
    docs/decisions/kafka-reads-wait-for-the-first-record.md). Here ``poll(timeout_s)`` waits for one
    message, and ``consume(n - 1, 0)`` takes whatever else librdkafka has already fetched.
    Errors (partition ends included) come back as messages, as ``consume`` gives them.

    Example: ``for msg in arrived(consumer, 10_000, 0.5): ...`` in a loop that reads to an end.
    """
    first = consumer.poll(max(timeout_s, 0.0))
    if first is None:
        return []
    if max_messages <= 1:
        return [first]
    return [first, *consumer.consume(max_messages - 1, 0)]
