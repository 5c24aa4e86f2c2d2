"""The matching job: events x subscriptions -> the matches topic (``MATCHES_TOPIC``), incrementally.

One streaming query. Its Kafka source subscribes to both the events topic (``EVENTS_TOPIC``) and
the compacted subscriptions topic (``SUBSCRIPTIONS_TOPIC``; names from ``schemas.topics``), so
every micro-batch ``B`` is one consistent cut of both topics, recorded by Spark in its offset log
before ``B`` runs. ``foreachBatch`` then:

1. **Subscriptions, on the driver.** The subscription records of ``B`` are read by offset range
   (``B - 1``'s end offsets to ``B``'s, from Spark's offset log; no read at all when the topic did
   not move, which is most batches) with a consumer of the driver's own
   (``streaming.readers.read_range``), decoded and validated by the driver jobs' ``TopicReader``
   (``streaming.driver_batch``: a columnar fast path, and the JVM's ``streaming.decode`` for the
   values it refers, which gives the verdicts and reasons), and applied in (partition, offset)
   order to the driver's ``SubscriptionTable`` through ``routing.matching.table.plan_columns``: a
   filter is validated with ``validate_filter``, a bad one goes to the dead-letter topic with the
   parser's message, composites are skipped, tombstones and ``unsubscribe`` remove. The batch's
   changes (or a snapshot) are written to ``<checkpoint>/subscriptions``
   (``streaming.subscription_store``) *before* any output of ``B``. At a fresh start a
   ``streaming.head_start.HeadStart`` begun before the Spark session has read and planned the
   topic up to a cut; the first batch then reads only from the cut
   (docs/decisions/fresh-start-head-start.md).
2. **Shipping to executors.** Python workers keep a ``MatchIndex`` per job in a module-level
   ``IndexReplica`` (``streaming.arrow_matching``). The driver ships a small ``ShipState`` inside
   the task closure: the table version, the changes since the current snapshot, and a broadcast
   of that snapshot. A worker that is up to date applies just the new changes; only a new worker
   (or one far behind) reads the broadcast and rebuilds. A new snapshot broadcast is made only
   when the changes since the last one reach ``max(1024, a quarter of the table)``, so 100k
   subscriptions are not re-broadcast per batch.
3. **Matching, on executors, vectorized.** The streaming plan hands the events topic's Kafka rows
   (key, value and coordinates) to one ``mapInArrow`` (a batch with many subscription records,
   such as a cold start's first, reads its events by offset range instead:
   ``MatchingConfig.events_by_range_from``); its Python workers decode each Arrow batch
   of values (``schemas.event_records``: the columnar fast path of ``schemas.columnar`` for
   every value it is sure of, the reference decoder and rules of ``schemas`` for the others, so
   bad events get the validation job's verdict and reason), call ``index.match`` once per Arrow
   batch, encode the finished Kafka rows (topic, key, value; ``schemas.match_records``) and send
   them with their own producer (``arrow_matching.write_batches``: idempotent, ``acks=all``,
   Java's partitioner, so each row lands where Spark's Kafka sink would put it); a task ends only
   when its rows are acknowledged. The rows: each valid event's whole ``Match`` record (Avro
   single-object encoding) keyed by ``event_id``, and each bad event's ``DeadLetter`` keyed
   ``topic/partition/offset``, exactly as the validation job writes it
   (``schemas.rules.dead_letter``). Why the workers decode, encode and send rather than the JVM:
   docs/decisions/decode-in-python-workers.md, docs/decisions/match-records-encoded-in-workers.md
   and docs/decisions/match-records-written-by-workers.md. The driver sends the rejected
   subscriptions' dead letters before the events' rows. Every valid event gets a ``Match``
   record, with an empty ``subscription_ids`` when nothing matched (as
   docs/reference/matching-log.md).

4. **Delivery** (``MatchingConfig.deliver``, on by default; docs/reference/delivery.md). Before
   the events are matched, ``streaming.delivery`` installs the newest planned channel
   assignment (markers, the installed record with the hand-over offsets) and the workers add,
   per channel topic, one ``ChannelEvents`` record with the batch's matched events that the
   channel carries (each as published, once), in the same write. The source then also subscribes to the channels topic
   (``CHANNELS_TOPIC``; its rows are not matched), so that a new planned version starts a
   micro-batch even when no events arrive.

Guarantees
----------
- **Order.** All subscription changes of micro-batch ``B`` apply before ``B``'s events are matched;
  events of ``B`` never see changes of ``B + 1``. Within ``B``, changes apply in (partition,
  offset) order; a subscription id's records share a partition (the topic is keyed by id), so each
  id's changes apply in the order they were written.
- **Restart.** Spark's checkpoint is ``<checkpoint>/query``. On start, the table is restored to the
  end of the last batch before the first one this run executes: the latest snapshot plus the
  per-batch deltas after it. If those files are missing or do not fit Spark's offset log, the
  table is rebuilt from the compacted subscriptions topic up to that batch's offsets instead
  (exact unless compaction has already dropped records from that range) and a warning is printed.
- **Replays see the same subscriptions.** A batch that crashed before Spark committed it runs
  again with the same ``batch_id`` over the same offsets; it starts from the state persisted for
  ``batch_id - 1``, so it reads the same changes and matches against the same set. Its output is
  therefore identical: duplicates after a crash are identical records with identical keys
  (``event_id`` for matches, ``topic/partition/offset`` for dead letters). Nothing is lost: Spark
  commits ``B`` only after every task of ``B`` ended, and a task ends only when its rows are
  acknowledged.
- **Bad input.** Undecodable or invalid events and subscriptions go to the dead-letter topic and
  never fail a batch. An invalid subscription changes nothing (an existing one of that id stays).

Limits: the checkpoint must be a local (driver-side) path; a ``Match`` record bigger than the
matches topic's ``max.message.bytes`` (an event matching ~100k subscriptions) fails the write.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infra.connection import KafkaConnection
from producers.kafka_writer import KafkaWriter
from routing.matching.digest import texts_digest
from routing.matching.table import SubscriptionTable
from schemas.topics import CHANNELS_TOPIC, DEADLETTER_TOPIC, EVENTS_TOPIC, MATCHES_TOPIC, SUBSCRIPTIONS_TOPIC
from streaming import logs
from streaming.driver_batch import TopicReader
from streaming.head_start import HeadStart, HeadStartTable
from streaming.session import await_query, kafka_stream, start_batches
from streaming.subscription_rows import PlannedRecords, SubscriptionRows, subscription_dead_letters
from streaming.subscription_store import CompiledIndexFolder, TableStore

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from streaming.delivery import DeliveryStage

__all__ = [
    "BatchStats",
    "MatchingBatch",
    "MatchingConfig",
    "build_query",
    "event_rows",
    "read_offset_log",
    "run",
]

_log = logs.get("matching")


@dataclass(frozen=True)
class MatchingConfig:
    """Settings of the matching query.

    Attributes
    ----------
    conn : KafkaConnection
        The cluster.
    checkpoint : Path
        Local folder: Spark's checkpoint (``query/``) and the subscription table
        (``subscriptions/``). Keep it to resume; delete it to start over from the earliest offsets.
    topic_prefix : str
        Prepended to every topic name (tests and side-by-side deployments).
    available_now : bool
        Process what is in the topics now, then stop.
    max_offsets_per_trigger : int, optional
        Cap on records (of both topics together) per micro-batch.
    trigger_interval : str
        Processing-time trigger when not ``available_now`` ("0 seconds": back to back).
    index : str
        ``match`` (``MatchIndex``) or ``brute-force`` (the oracle; slow, for checks and benchmarks).
    snapshot_every : int
        Write a full snapshot of the subscription table at least every this many batches (the
        per-batch deltas in between make a restore replay at most this many files).
    stats_file : Path, optional
        Append one JSON line per micro-batch (``BatchStats``: counts and timings).
    deliver : bool
        Also deliver matched events through the channel topics (``streaming.delivery``;
        docs/reference/delivery.md).
    events_by_range_from : int
        A micro-batch whose subscriptions range holds about this many records or more reads its
        events by offset range (``MatchingBatch._events_by_range``) instead of from Spark's own
        batch, which would read every one of those subscription records in the JVM only to drop
        them (about 4 us each on a warm JVM) where a range read costs about 70 ms more to plan
        (docs/decisions/events-read-by-range.md).
    pack_from : int
        After a micro-batch, the driver packs the subscription texts set since it last did
        (``SubscriptionTable.pack``: about half the bytes of a range filter) once there are this
        many, and a sixteenth of the table (docs/decisions/subscription-state-memory.md).
    """

    conn: KafkaConnection
    checkpoint: Path
    topic_prefix: str = ""
    available_now: bool = False
    max_offsets_per_trigger: int | None = None
    trigger_interval: str = "0 seconds"
    index: str = "match"
    snapshot_every: int = 100
    stats_file: Path | None = None
    deliver: bool = True
    events_by_range_from: int = 20_000
    pack_from: int = 4096

    def __post_init__(self) -> None:
        from streaming.arrow_matching import INDEX_KINDS

        if self.index not in INDEX_KINDS:
            raise ValueError(f"index must be one of {sorted(INDEX_KINDS)}, got {self.index!r}")

    @property
    def events_topic(self) -> str:
        return self.topic_prefix + EVENTS_TOPIC

    @property
    def subscriptions_topic(self) -> str:
        return self.topic_prefix + SUBSCRIPTIONS_TOPIC

    @property
    def matches_topic(self) -> str:
        return self.topic_prefix + MATCHES_TOPIC

    @property
    def deadletter_topic(self) -> str:
        return self.topic_prefix + DEADLETTER_TOPIC

    @property
    def query_checkpoint(self) -> Path:
        return self.checkpoint / "query"

    @property
    def table_folder(self) -> Path:
        return self.checkpoint / "subscriptions"

    @property
    def delivery_folder(self) -> Path:
        return self.checkpoint / "delivery"


# ---- pure DataFrame transforms ----------------------------------------------------------------


def event_rows(source: DataFrame, events_topic: str) -> DataFrame:
    """The Kafka columns of the events topic's rows that ``arrow_matching.match_batches`` reads."""
    from pyspark.sql import functions as F

    from streaming.arrow_matching import INPUT_COLUMNS

    return source.where(F.col("topic") == events_topic).select(*INPUT_COLUMNS)


# ---- Spark's offset log -----------------------------------------------------------------------


def read_offset_log(query_checkpoint: Path, batch_id: int) -> dict[str, dict[int, int]] | None:
    """The end offsets of micro-batch ``batch_id`` (topic -> partition -> offset), from the offset
    log Spark writes before running the batch; None when there is no such entry.

    The file is ``v1``, a metadata line, then one line per source; this query has one source,
    Spark's Kafka source, whose offsets are ``{"topic": {"partition": offset}}`` JSON.
    """
    path = query_checkpoint / "offsets" / str(batch_id)
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return None
    if len(lines) < 3 or not lines[0].startswith("v"):
        raise RuntimeError(f"{path}: not a Spark offset log entry this job understands")
    doc = json.loads(lines[2])
    return {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in doc.items()}


# ---- the micro-batch --------------------------------------------------------------------------


@dataclass
class BatchStats:
    """What one micro-batch did (one JSON line of the stats file).

    The ``*_ms`` are wall-clock milliseconds on the driver (``duration_ms`` the whole
    ``foreachBatch``, ``write_ms`` its one Spark job: the workers' matching and the Kafka write),
    except ``worker_*``: summed over the batch's tasks (which run side by side), from the Python
    workers (``streaming.arrow_matching.ShipState.counters``). ``subscription_records`` counts
    the records of the batch's range, ``head_start_records`` those of them a ``HeadStart`` read
    and planned before the batch (its ``read_ms`` and ``plan_ms`` are of the rest).
    ``events_by_range``: the batch read its events by offset range (``MatchingConfig.events_by_range_from``).
    """

    batch_id: int
    events: int = 0
    rejected_events: int = 0
    subscription_records: int = 0
    head_start_records: int = 0
    rejected_subscriptions: int = 0
    skipped_composites: int = 0
    subscriptions: int = 0
    table_version: int = 0
    matches: int = 0
    delivery_version: int = 0
    deliveries: int = 0
    subscriptions_ms: float = 0.0
    restore_ms: float = 0.0
    read_ms: float = 0.0
    plan_ms: float = 0.0
    store_ms: float = 0.0
    worker_ready_ms: float = 0.0
    prepare_ms: float = 0.0
    ship_ms: float = 0.0
    worker_decode_ms: float = 0.0
    worker_match_ms: float = 0.0
    worker_encode_ms: float = 0.0
    worker_deliver_ms: float = 0.0
    worker_write_ms: float = 0.0
    write_ms: float = 0.0
    duration_ms: float = 0.0
    started_at_ms: int = 0
    events_by_range: bool = False


class _Sums:
    """Accumulator parameter over ``streaming.arrow_matching.ShipState.counters``: element-wise
    sums of ``(events, rejected events, matches, deliveries)``, the largest ``ready ms``, and the
    sums of the workers' ``(decode, match, encode, deliver, write)`` ms."""

    ZERO = (0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)

    def zero(self, value: tuple[float, ...]) -> tuple[float, ...]:
        return self.ZERO

    def addInPlace(self, a: tuple[float, ...], b: tuple[float, ...]) -> tuple[float, ...]:
        sums = [x + y for x, y in zip(a, b, strict=True)]
        return (*sums[:4], max(a[4], b[4]), *sums[5:])


class _Shipper:
    """Driver side of shipping the table: a snapshot broadcast, and a bridge broadcast (the
    table's changes from its previous base to the snapshot), both renewed when the table rebases;
    workers that follow the table cross the new base by the bridge, new ones read the snapshot.
    The run's first snapshot ships no bridge: every worker of the run is new then.

    With compiled indexes (a ``match`` index and a ``compiled_dir``), the run's first snapshot
    also ships its digest (``ShipState.base_digest``, ``routing.matching.digest.texts_digest``)
    when the folder holds a compiled index: every worker of a restarted job is new and reads that
    snapshot, and when the compiled index it loads was saved with the same texts (the usual
    restart) it reads neither. A fresh start, whose folder is empty, skips the digest. Later snapshots
    ship none: only a worker that is new mid-run reads them, and it diffs."""

    def __init__(self, spark: SparkSession, job: str, index_kind: str, compiled_dir: str | None = None) -> None:
        self._sc = spark.sparkContext
        self._job, self._kind, self._compiled_dir = job, index_kind, compiled_dir
        self._broadcasts: tuple[Any, Any] = (None, None)  # the snapshot's, the bridge's (None: empty)
        self._base_version: int | None = None
        self._bridge_version = 0
        self._base_digest: str | None = None

    def ship(self, table: SubscriptionTable) -> Any:
        from streaming.arrow_matching import ShipState

        if self._base_version is None or table.base_version > self._base_version:
            old = self._broadcasts
            first, self._base_digest = self._base_version is None, None
            self._bridge_version, bridge = table.bridge()
            # over (previous base, version]: the new snapshot is at version. A run's first ship has
            # no worker of this run behind it to cross it (a fresh start's would be the whole topic)
            bridge = () if first else bridge + table.deltas()
            snapshot = table.texts()
            compiled = first and self._compiled_dir is not None and self._kind == "match"
            if compiled and CompiledIndexFolder(Path(str(self._compiled_dir))).holds_any():  # none when fresh
                self._base_digest = texts_digest(snapshot)
            self._broadcasts = (self._sc.broadcast(snapshot), self._sc.broadcast(bridge) if bridge else None)
            self._base_version = table.version
            for broadcast in old:
                if broadcast is not None:
                    broadcast.unpersist(blocking=False)
        deltas = table.deltas(after=self._base_version)
        return ShipState(
            self._job, self._kind, self._base_version, self._broadcasts[0], deltas, table.version,
            compiled_dir=self._compiled_dir, bridge_version=self._bridge_version, bridge=self._broadcasts[1],
            base_digest=self._base_digest,
        )  # fmt: skip


class MatchingBatch:
    """The ``foreachBatch`` function: keeps the subscription table and writes each batch's output."""

    def __init__(
        self, spark: SparkSession, cfg: MatchingConfig, quiet: bool = True, head_start: HeadStart | None = None
    ) -> None:
        self.spark, self.cfg, self.quiet = spark, cfg, quiet
        self.store = TableStore(cfg.table_folder)
        self.table: SubscriptionTable | None = None
        self.offsets: dict[int, int] = {}  # the subscriptions topic's offsets the table has read to
        self.last_snapshot = -1
        # compiled indexes beside the table (workers on the driver's disk: docs/decisions/compiled-index.md)
        self.shipper = _Shipper(spark, uuid.uuid4().hex, cfg.index, str(cfg.table_folder / "compiled"))
        self.delivery: DeliveryStage | None = None
        if cfg.deliver:
            from streaming.delivery import DeliveryStage

            self.delivery = DeliveryStage(spark, cfg.conn, cfg.topic_prefix, cfg.delivery_folder, quiet)
        self.history: list[BatchStats] = []
        self._writer: KafkaWriter | None = None  # the driver's rows (rejected subscriptions)
        self.reader = TopicReader(spark, SUBSCRIPTIONS_TOPIC, "matching", raw=True)
        self.head_start = head_start

    # -- subscriptions ------------------------------------------------------------------------

    def _read_subscriptions(self, start: Mapping[int, int], end: Mapping[int, int]) -> SubscriptionRows | None:
        """Decoded subscription records in ``[start, end)`` per partition (a missing start: the
        earliest offset), sorted by (partition, offset); None when there are none to read.

        Read by ``streaming.readers.read_range`` (a consumer on the driver: a cold start reads the
        whole topic; docs/decisions/driver-reads-subscriptions-with-its-own-consumer.md) and
        decoded by the driver jobs' ``TopicReader`` (the columnar fast path, the JVM's
        ``streaming.decode`` for the values it refers)."""
        from streaming.readers import read_range

        raw = read_range(self.cfg.conn, self.cfg.subscriptions_topic, start, end)
        if raw is None:
            return None
        return SubscriptionRows(self.reader.collect(raw))

    def _restore(self, batch_id: int) -> None:
        """The table as it was after ``batch_id - 1`` (see the module docstring, Restart)."""
        prev = read_offset_log(self.cfg.query_checkpoint, batch_id - 1) if batch_id > 0 else {}
        prev_subs = None if prev is None else prev.get(self.cfg.subscriptions_topic, {})
        loaded = self.store.load(batch_id - 1)
        if loaded is not None and (prev_subs is None or all(loaded[1].get(p) == o for p, o in prev_subs.items())):
            self.table, self.offsets = loaded
            last = self.store.last_snapshot(batch_id - 1)
            self.last_snapshot = -1 if last is None else last
            return
        if prev_subs is None:
            raise RuntimeError(f"cannot restore the subscription table: no offsets for batch {batch_id - 1}")
        _log.warning(
            f"the subscription table in {self.cfg.table_folder} does not cover batch "
            f"{batch_id - 1}; rebuilding it from {self.cfg.subscriptions_topic}"
        )
        table = SubscriptionTable()
        rows = self._read_subscriptions({}, prev_subs)
        table.apply(PlannedRecords.of(rows).changes)
        table.snapshot(bridge=False)  # every worker of this run is new to it
        self.table, self.offsets = table, dict(prev_subs)
        self.store.save_snapshot(batch_id - 1, table.filters, table.version, self.offsets)
        self.last_snapshot = batch_id - 1

    def _take_head_start(self, subs_end: Mapping[int, int]) -> HeadStartTable | None:
        """The head start's table, made this batch's starting table, when the batch starts fresh
        (the empty table at the earliest offsets) and its end is at or past the cut."""
        head, self.head_start = self.head_start, None
        assert self.table is not None
        if head is None or self.offsets or self.table.version:
            return None
        taken = head.take(subs_end)
        if taken is not None:
            self.table, self.offsets = taken.table, dict(taken.cut)
        return taken

    # -- the batch ----------------------------------------------------------------------------

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        from schemas.match_records import OUTPUT_SCHEMA, Targets
        from streaming.arrow_matching import write_batches

        started = time.monotonic()
        stats = BatchStats(batch_id, started_at_ms=int(time.time() * 1000))
        end = read_offset_log(self.cfg.query_checkpoint, batch_id)
        if end is None:
            raise RuntimeError(f"Spark's offset log has no entry for batch {batch_id}")
        warming: threading.Thread | None = None
        subs_end = end.get(self.cfg.subscriptions_topic, {})
        head: HeadStartTable | None = None
        first = self.table is None
        if first:
            warming = self._warm_workers(end.get(self.cfg.events_topic, {}))
            self._restore(batch_id)
        # the subscription records Spark's own batch holds (from the end of the batch before)
        in_range = sum(max(0, o - self.offsets.get(p, 0)) for p, o in subs_end.items())
        if first:
            head = self._take_head_start(subs_end)
            stats.restore_ms = (time.monotonic() - started) * 1000
        assert self.table is not None

        # 1. this batch's subscription changes, in order, before any of its events
        read_started = time.monotonic()
        rows = self._read_subscriptions(self.offsets, subs_end)
        stats.read_ms = (time.monotonic() - read_started) * 1000
        planned = PlannedRecords.of(rows)
        changes, rejected = planned.changes, planned.rejected
        if head is not None:  # the records below its cut, planned and applied already
            rejected = head.planned.rejected + rejected
            stats.head_start_records = head.planned.records
        stats.skipped_composites = planned.skipped + (0 if head is None else head.planned.skipped)
        self.table.apply(changes)
        store_started = time.monotonic()
        stats.plan_ms = (store_started - read_started) * 1000 - stats.read_ms
        self.offsets = {**self.offsets, **subs_end}
        whole = head is not None  # a head start's changes are in no delta: its batch saves the whole table
        if whole or self.table.due_for_snapshot() or batch_id - self.last_snapshot >= self.cfg.snapshot_every:
            if self.table.due_for_snapshot():
                self.table.snapshot()
            self.store.save_snapshot(batch_id, self.table.filters, self.table.version, self.offsets)
            self.last_snapshot = batch_id
        else:
            self.store.save_delta(batch_id, changes, self.table.version, self.offsets)
        stats.store_ms = (time.monotonic() - store_started) * 1000
        stats.subscription_records = planned.records + stats.head_start_records
        stats.rejected_subscriptions = len(rejected)
        stats.subscriptions, stats.table_version = len(self.table), self.table.version
        stats.subscriptions_ms = (time.monotonic() - started) * 1000
        del rows, changes, planned, head  # a cold start's whole topic: not held through the batch's Spark job

        # 2. + 3. ship the table, match the events on executors, one write of everything
        # (Spark's Observation never completes under the Kafka sink's batch write: its query runs
        # nested in a command. The Python workers count into an accumulator instead.)
        counters = self.spark.sparkContext.accumulator(_Sums.ZERO, _Sums())
        prepare_started = time.monotonic()
        delivery = None if self.delivery is None else self.delivery.prepare(batch_id)
        stats.prepare_ms = (time.monotonic() - prepare_started) * 1000
        ship_started = time.monotonic()
        ship = dataclasses.replace(self.shipper.ship(self.table), counters=counters, delivery=delivery)
        stats.ship_ms = (time.monotonic() - ship_started) * 1000
        stats.delivery_version = 0 if delivery is None else delivery.version
        targets = Targets(self.cfg.events_topic, self.cfg.matches_topic, self.cfg.deadletter_topic)
        write_started = time.monotonic()
        if rejected:
            if self._writer is None:
                self._writer = KafkaWriter.like_spark(self.cfg.conn)
            self._writer.write_rows(subscription_dead_letters(rejected, self.cfg.deadletter_topic), "matching")
        # the workers send their rows themselves (arrow_matching.write_batches); noop drives the tasks
        if warming is not None:
            warming.join(timeout=120)
        body = functools.partial(write_batches, self.cfg.conn, ship, targets)
        events_rows: DataFrame | None = batch
        if in_range >= self.cfg.events_by_range_from:
            prev = read_offset_log(self.cfg.query_checkpoint, batch_id - 1) if batch_id > 0 else {}
            if prev is not None:  # Spark keeps the entry of the batch before (minBatchesToRetain)
                events_rows = self._events_by_range(
                    prev.get(self.cfg.events_topic, {}), end.get(self.cfg.events_topic, {})
                )
                stats.events_by_range = True
        if events_rows is not None:
            events_rows.mapInArrow(body, OUTPUT_SCHEMA).write.format("noop").mode("overwrite").save()
        events, rejected_events, matches, deliveries, stats.worker_ready_ms, *steps = counters.value
        stats.worker_decode_ms, stats.worker_match_ms, stats.worker_encode_ms, stats.worker_deliver_ms = steps[:4]
        stats.worker_write_ms = steps[4]
        stats.events, stats.rejected_events = int(events), int(rejected_events)
        stats.matches, stats.deliveries = int(matches), int(deliveries)
        stats.write_ms = (time.monotonic() - write_started) * 1000
        # after the batch: a fresh start ships its texts as they came. A pack scans the table, so a
        # large one packs only after a sixteenth of it changed
        self.table.pack(least=max(self.cfg.pack_from, len(self.table) // 16))
        stats.duration_ms = (time.monotonic() - started) * 1000
        self._report(stats)

    def _events_by_range(self, start: Mapping[int, int], end: Mapping[int, int]) -> DataFrame | None:
        """The events of a micro-batch as Kafka rows (``INPUT_COLUMNS``), read by offset range
        (``start``: the batch before's end offsets of the events topic, ``end``: this batch's)
        rather than from the batch's own rows; None when it holds no event. Spark's batch would
        read the subscription records of its range too, only to drop them
        (docs/decisions/events-read-by-range.md)."""
        from streaming.arrow_matching import INPUT_COLUMNS
        from streaming.session import kafka_range

        frame = kafka_range(self.spark, self.cfg.conn, self.cfg.events_topic, start, end)
        return None if frame is None else frame.select(*INPUT_COLUMNS)

    def _warm_workers(self, events_end: Mapping[int, int]) -> threading.Thread | None:
        """Start, in a thread, a Spark job that readies the executors for the run's first batch
        while the driver restores or reads the subscriptions: the last event of each events
        partition below ``events_end`` read by Spark's Kafka source into
        ``arrow_matching.warm_batches`` (the executors' first Kafka consumer and the Python
        workers' imports and kernels, which on a new JVM take seconds of the batch's own job;
        docs/decisions/first-batch-warm-up.md).
        None when the events topic holds no event yet. A failure only costs that time: it is
        logged, and the batch runs as it would."""
        from streaming.arrow_matching import INPUT_COLUMNS, warm_batches
        from streaming.session import kafka_range

        start = {p: max(0, o - 1) for p, o in events_end.items()}
        frame = kafka_range(self.spark, self.cfg.conn, self.cfg.events_topic, start, events_end)
        if frame is None:
            return None
        rows = frame.select(*INPUT_COLUMNS)

        def run() -> None:
            try:
                rows.mapInArrow(warm_batches, "warm long").write.format("noop").mode("overwrite").save()
            except Exception as exc:
                _log.warning(f"warming the executors for the first batch failed: {exc}")

        thread = threading.Thread(target=run, name="siftstream-matching-warm-up", daemon=True)
        thread.start()
        return thread

    def _report(self, stats: BatchStats) -> None:
        self.history.append(stats)
        if self.cfg.stats_file is not None:
            self.cfg.stats_file.parent.mkdir(parents=True, exist_ok=True)
            with self.cfg.stats_file.open("a") as f:
                f.write(json.dumps(stats.__dict__) + "\n")
        fields: dict[str, Any] = {
            "events": stats.events,
            "dead_lettered_events": stats.rejected_events,
            "subscription_records": stats.subscription_records,
            "dead_lettered_subscriptions": stats.rejected_subscriptions,
            "composite_records": stats.skipped_composites,
            "active_subscriptions": stats.subscriptions,
            "matches": stats.matches,
        }
        if self.delivery is not None:
            fields.update(deliveries=stats.deliveries, channel_version=stats.delivery_version)
        fields["duration_ms"] = stats.duration_ms
        detail = {
            "table_version": stats.table_version,
            "subscriptions_ms": stats.subscriptions_ms,
            "restore_ms": stats.restore_ms,
            "read_ms": stats.read_ms,
            "plan_ms": stats.plan_ms,
            "store_ms": stats.store_ms,
            "worker_ready_ms": stats.worker_ready_ms,
            "prepare_ms": stats.prepare_ms,
            "ship_ms": stats.ship_ms,
            "worker_decode_ms": stats.worker_decode_ms,
            "worker_match_ms": stats.worker_match_ms,
            "worker_encode_ms": stats.worker_encode_ms,
            "worker_deliver_ms": stats.worker_deliver_ms,
            "worker_write_ms": stats.worker_write_ms,
        }
        logs.log_batch(_log, stats.batch_id, fields, self.quiet, {**detail, "write_ms": stats.write_ms})


def build_query(
    spark: SparkSession, cfg: MatchingConfig, quiet: bool = True, head_start: HeadStart | None = None
) -> tuple[StreamingQuery, MatchingBatch]:
    """Wire Kafka (events + subscriptions) -> ``MatchingBatch`` -> Kafka and start the query; return
    it with its ``MatchingBatch`` (per-batch ``BatchStats`` in ``.history``). A fresh checkpoint's
    first batch takes ``head_start`` when given (``streaming.head_start``)."""
    # The subscriptions topic is in the source for the offset log's consistent cut of both topics;
    # its records are read by offset range in each batch (MatchingBatch). The events' rows go to
    # the Python workers undecoded (module docstring, 3.).
    topics = [cfg.events_topic, cfg.subscriptions_topic]
    if cfg.deliver:  # a new planned version starts a micro-batch, which installs it (streaming.delivery)
        topics.append(cfg.topic_prefix + CHANNELS_TOPIC)
    source = kafka_stream(spark, cfg.conn, topics, cfg.max_offsets_per_trigger)
    events = event_rows(source, cfg.events_topic)
    handler = MatchingBatch(spark, cfg, quiet, head_start)
    query = start_batches(
        events,
        handler,
        cfg.query_checkpoint,
        f"siftstream-matching-{cfg.topic_prefix or 'default'}",
        cfg.available_now,
        cfg.trigger_interval,
    )
    return query, handler


def run(
    spark: SparkSession, cfg: MatchingConfig, quiet: bool = False, head_start: HeadStart | None = None
) -> list[BatchStats]:
    """Run until done (available-now) or interrupted; raise RuntimeError when the query failed.
    ``head_start``: as ``build_query``."""
    query, handler = build_query(spark, cfg, quiet, head_start)
    try:
        await_query(query, "matching")
    finally:
        if handler.delivery is not None:
            handler.delivery.close()
    return handler.history
