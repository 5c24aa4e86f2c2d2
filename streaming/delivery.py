"""The matching job's delivery stage, on the driver: which assignment version each micro-batch
delivers by, and installing a new one (docs/reference/delivery.md §4).

Before micro-batch B's events are matched, :meth:`DeliveryStage.prepare` reads the planned
``ChannelAssignment`` records that reached ``siftstream.channels.v1`` since the last batch. When
the newest is newer than the installed version it installs it:

1. makes sure the K channel topics exist (``schemas.topics.channel_spec``);
2. writes a ``ChannelMarker`` of the version to every channel topic, its own K and those of the
   version it replaces (a version with a smaller K moves the subscriptions of the channels it
   drops, and their clients learn it from the marker there), and waits for each
   acknowledgement, keeping the markers' offsets;
3. writes the version's ``installed`` record (the planned record's numbers, no members, the
   markers' offsets as ``handover``) to ``siftstream.channels.v1``;
4. saves the version's members under ``<checkpoint>/delivery/versions/``.

Every batch then saves ``<checkpoint>/delivery/batches/<B>.json`` (its version and how far it
read ``siftstream.channels.v1``) *before* B's deliveries are written, so a replayed batch delivers
by the version the first attempt used. Before any version is installed (version 0) every
matched event goes to the lobby, channel 0. The members reach the Python workers as a Spark
broadcast, made once per installed version (``streaming.arrow_matching.DeliveryShip``).

Planned records that do not decode are skipped with a warning: the topic is SiftStream's own
output, so such a record means a writer of another version, not bad user input.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infra.connection import KafkaConnection
from routing.channels.assignment import Assignment
from schemas.codec import DecodeError, codec_for, decode
from schemas.topics import CHANNELS_TOPIC, channel_spec, channel_topic
from streaming import logs
from streaming.arrow_matching import DeliveryShip

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["KEEP_BATCHES", "DeliveryStage"]

_log = logs.get("delivery")

KEEP_BATCHES = 20  # batch files kept (a replay needs only the last)
_COPIED = (
    "k",
    "reason",
    "detail",
    "method",
    "sample_events",
    "waste_ratio",
    "flooding_waste_ratio",
    "previous_waste_ratio",
)


class DeliveryStage:
    """Installs assignment versions and ships the installed one with every micro-batch.

    Parameters
    ----------
    spark : SparkSession
    conn : KafkaConnection
    topic_prefix : str
    folder : Path
        ``<checkpoint>/delivery``: the batches' versions and the installed versions' members.
    quiet : bool
        No log line per installation.
    """

    def __init__(
        self, spark: SparkSession, conn: KafkaConnection, topic_prefix: str, folder: Path, quiet: bool
    ) -> None:
        self._sc = spark.sparkContext
        self.conn, self.prefix, self.folder, self.quiet = conn, topic_prefix, folder, quiet
        self.assignment = Assignment(0, 1)
        self.read_to = 0  # offset in the channels topic up to which planned records were read
        self._restored = False
        self._broadcast: Any = None
        self._shipped_version = -1
        self._ensured_k = 0
        self._consumer: Any = None
        self._producer: Any = None
        self.installed_at_batch: list[tuple[int, int]] = []  # (batch, version) of this run's installations

    @property
    def channels_topic(self) -> str:
        return self.prefix + CHANNELS_TOPIC

    # -- persistence --------------------------------------------------------------------------

    def _batch_file(self, batch_id: int) -> Path:
        return self.folder / "batches" / f"{batch_id}.json"

    def _version_file(self, version: int) -> Path:
        return self.folder / "versions" / f"{version}.json"

    def _load_version(self, version: int) -> Assignment:
        if version == 0:
            return Assignment(0, 1)
        doc = json.loads(self._version_file(version).read_text())
        return Assignment(version, int(doc["k"]), doc["members"])

    def _restore(self, batch_id: int) -> None:
        """The state after the newest saved batch before ``batch_id`` (nothing saved: version 0)."""
        folder = self.folder / "batches"
        saved = sorted(int(p.stem) for p in folder.glob("*.json")) if folder.exists() else []
        before = [b for b in saved if b < batch_id]
        if before:
            doc = json.loads(self._batch_file(before[-1]).read_text())
            self.assignment, self.read_to = self._load_version(int(doc["version"])), int(doc["read_to"])
        self._restored = True

    def _save_batch(self, batch_id: int) -> None:
        path = self._batch_file(batch_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"version": self.assignment.version, "read_to": self.read_to}))
        tmp.replace(path)
        for old in sorted(int(p.stem) for p in path.parent.glob("*.json"))[:-KEEP_BATCHES]:
            self._batch_file(old).unlink(missing_ok=True)

    # -- Kafka ---------------------------------------------------------------------------------

    def _clients(self) -> tuple[Any, Any]:
        from confluent_kafka import Consumer, Producer

        if self._consumer is None:
            self._consumer = Consumer(
                self.conn.confluent(**{"group.id": "siftstream-delivery", "enable.auto.commit": False})
            )
            self._producer = Producer(self.conn.confluent(**{"acks": "all", "enable.idempotence": True}))
        return self._consumer, self._producer

    def _ensure_channels(self, k: int) -> None:
        if k <= self._ensured_k:
            return
        from infra.topics import ensure_topics

        ensure_topics(self.conn, self.prefix, specs=tuple(channel_spec(c) for c in range(k)))
        self._ensured_k = k

    def _newest_planned(self) -> dict[str, Any] | None:
        """The newest planned record in ``[read_to, end)`` of the channels topic; advances ``read_to``."""
        from confluent_kafka import TopicPartition

        consumer, _ = self._clients()
        _, end = consumer.get_watermark_offsets(TopicPartition(self.channels_topic, 0), timeout=10)
        if end <= self.read_to:
            return None
        consumer.assign([TopicPartition(self.channels_topic, 0, self.read_to)])
        newest: dict[str, Any] | None = None
        deadline = time.monotonic() + 30
        while self.read_to < end:
            if time.monotonic() > deadline:
                raise RuntimeError(f"could not read {self.channels_topic} up to offset {end} within 30 s")
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                raise RuntimeError(f"reading {self.channels_topic}: {msg.error()}")
            self.read_to = msg.offset() + 1
            try:
                _, record = decode(msg.value(), "ChannelAssignment")
            except DecodeError as exc:
                _log.warning(f"skipped {self.channels_topic}@{msg.offset()}: {exc}")
                continue
            if record["stage"] == "planned" and (newest is None or record["version"] > newest["version"]):
                newest = record
        consumer.unassign()
        return newest

    def _install(self, planned: dict[str, Any]) -> None:
        """Steps 1-4 of the module docstring for one planned record."""
        new = Assignment.from_record(planned)
        self._ensure_channels(new.k)
        _, producer = self._clients()
        marker_codec, record_codec = codec_for("ChannelMarker"), codec_for("ChannelAssignment")
        now = int(time.time() * 1000)
        offsets: dict[int, int] = {}
        errors: list[str] = []

        def acked(channel: int | None) -> Any:
            def callback(err: Any, msg: Any) -> None:
                if err is not None:
                    errors.append(str(err))
                elif channel is not None:
                    offsets[channel] = msg.offset()

            return callback

        marked = max(new.k, self.assignment.k)  # the channels the replaced version may still have readers in
        for c in range(marked):
            value = marker_codec.encode({"channel": c, "version": new.version, "installed_at": now})
            key = f"marker/{new.version}".encode()
            producer.produce(channel_topic(c, self.prefix), value, key, on_delivery=acked(c))
        producer.flush(30)
        if errors or len(offsets) != marked:
            raise RuntimeError(
                f"could not write the markers of version {new.version}: {errors or 'no acknowledgement'}"
            )
        installed = {key: planned[key] for key in _COPIED}
        installed.update(version=new.version, stage="installed", created_at=now, channels=[])
        installed["handover"] = [{"channel": c, "offset": offsets[c]} for c in range(marked)]
        producer.produce(
            self.channels_topic, record_codec.encode(installed), str(new.version).encode(), on_delivery=acked(None)
        )
        producer.flush(30)
        if errors:
            raise RuntimeError(f"could not write the installed record of version {new.version}: {errors}")
        path = self._version_file(new.version)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"k": new.k, "members": dict(new.channel_of)}))
        self.assignment = new
        _log.log(
            logging.DEBUG if self.quiet else logging.INFO,
            f"installed version {new.version} ({planned['reason']}): {new.k} channels, "
            f"{len(new.channel_of):,} subscriptions placed",
        )

    # -- per batch -----------------------------------------------------------------------------

    def prepare(self, batch_id: int) -> DeliveryShip:
        """The version micro-batch ``batch_id`` delivers by, installed first when a newer one was
        planned, and saved before the batch writes anything."""
        if not self._restored:
            self._restore(batch_id)
        replay = self._batch_file(batch_id)
        if replay.exists():  # a batch that ran before: deliver by the version it used
            doc = json.loads(replay.read_text())
            if int(doc["version"]) != self.assignment.version:
                self.assignment = self._load_version(int(doc["version"]))
            self.read_to = int(doc["read_to"])
        else:
            self._ensure_channels(max(1, self.assignment.k))
            planned = self._newest_planned()
            if planned is not None and planned["version"] > self.assignment.version:
                self._install(planned)
                self.installed_at_batch.append((batch_id, self.assignment.version))
            self._save_batch(batch_id)
        return self._ship()

    def _ship(self) -> DeliveryShip:
        version = self.assignment.version
        if self._shipped_version != version:
            old = self._broadcast
            self._broadcast = self._sc.broadcast(dict(self.assignment.channel_of))
            self._shipped_version = version
            if old is not None:
                old.unpersist(blocking=False)
        topics = tuple(channel_topic(c, self.prefix) for c in range(self.assignment.k))
        return DeliveryShip(version, topics, self._broadcast)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        if self._producer is not None:
            self._producer.flush(10)
            self._producer = None
