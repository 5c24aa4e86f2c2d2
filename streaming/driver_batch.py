"""The shape shared by the jobs whose state lives on the driver (QoS, routes).

Such a job reads several Kafka topics in one streaming query; ``foreachBatch`` collects the
batch's raw rows once (one Arrow table; a job that sets ``driver_consumer`` reads them from
Kafka on the driver by the batch's offset range instead), decodes and validates each topic into one Arrow table
per topic (:class:`TopicReader`: flat telemetry by the columnar fast path of ``schemas.columnar``,
the rest and whatever that path refers by the JVM's ``streaming.decode.TopicDecoder``), hands the good
rows to a pure step object from ``routing/`` (the job's subclass of :class:`DriverBatch` does
that), saves that object's state as ``<state folder>/<batch id>.npz`` and writes the outputs and
the dead letters (every record that did not decode or validate, keyed ``topic/partition/offset``
as every job writes them) in one Kafka write; a job that sets ``driver_producer`` (QoS, routes,
composites) sends its outputs from the driver by one producer instead, the dead letters still
by Spark. A job whose state is large and changes in part per
batch (routes: its rate window) saves ``<batch id>.delta``, the changes since the batch before,
and its whole state every ``SNAPSHOT_EVERY`` batches; its state after batch ``b`` is the last
whole state up to ``b`` with the changes after it applied in order.

Restart: the state of the batch before the first one a run executes is loaded, so a batch that
crashed before Spark committed it is replayed from the same state over the same offsets and
writes the same records (duplicates after a crash are identical records with identical keys).
Without a state file (or with a chain of changes whose whole state is gone) the step object
starts empty.
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from routing.matching.table import SubscriptionRecord
from schemas.columnar import (
    EventFields,
    FlatColumns,
    FlatDecoder,
    MatchFields,
    ascii_rows,
    binary_buffers,
    decode_events,
    decode_matches,
    gather_spans,
    supports,
)
from schemas.rules import VALUE_KINDS
from schemas.topics import (
    BROKER_TELEMETRY_TOPIC,
    DEADLETTER_TOPIC,
    EVENTS_TOPIC,
    LINK_TELEMETRY_TOPIC,
    MATCHES_TOPIC,
    RECEIPTS_TOPIC,
    SUBSCRIPTIONS_TOPIC,
    TOPICS,
    TOPOLOGY_TOPIC,
)
from streaming import logs

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from infra.connection import KafkaConnection

__all__ = [
    "FIELDS",
    "KEEP_STATES",
    "RAW_EXPRS",
    "RAW_SCHEMA",
    "BatchStats",
    "DriverBatch",
    "FastSplit",
    "TopicReader",
    "column",
    "fast_split",
    "good_rows",
    "link_samples",
    "subscription_records",
    "topology_changes",
]

KEEP_STATES = 3  # batches besides the newest whose state can still be restored
SNAPSHOT_EVERY = 20
"""A job that saves its changes (:meth:`DriverBatch.dump_changes`) saves its whole state every
this many batches, and its changes since the batch before in between."""

FIELDS: dict[str, list[tuple[str, str]]] = {
    TOPOLOGY_TOPIC: [
        ("kind", "t_kind"),
        ("broker", "t_broker"),
        ("from", "t_from"),
        ("to", "t_to"),
        ("reliability", "t_reliability"),
        ("cost", "t_cost"),
        ("forbidden_events", "t_forbidden"),
    ],
    SUBSCRIPTIONS_TOPIC: [
        ("type", "s_op"),
        ("subscription_id", "s_id"),
        ("subscriber_id", "s_subscriber"),
        ("broker", "s_broker"),
        ("filter", "s_filter"),
        ("composite", "s_composite"),
        ("deadline_ms", "s_deadline"),
        ("min_reliability", "s_min_reliability"),
    ],
    EVENTS_TOPIC: [
        ("event_id", "e_id"),
        ("publisher_id", "e_publisher"),
        ("published_at", "e_at"),
        ("lifetime_ms", "e_lifetime"),
    ]
    + [(f"attributes.{k}", f"e_{k}") for k in ("longs", "doubles", "strings", "booleans")],
    LINK_TELEMETRY_TOPIC: [
        ("from", "l_from"),
        ("to", "l_to"),
        ("seq", "l_seq"),
        ("sent_at", "l_sent"),
        ("delay_ms", "l_delay"),
        ("lost", "l_lost"),
    ],
    BROKER_TELEMETRY_TOPIC: [
        ("broker_id", "b_id"),
        ("arrived_at", "b_at"),
        ("wait_ms", "b_wait"),
        ("service_ms", "b_service"),
    ],
    RECEIPTS_TOPIC: [("subscriber_id", "r_subscriber"), ("event_id", "r_event"), ("received_at", "r_at")],
    MATCHES_TOPIC: [
        ("event_id", "m_event"),
        ("publisher_id", "m_publisher"),
        ("published_at", "m_at"),
        ("subscription_ids", "m_subscriptions"),
    ],
}
"""Per input topic, the record fields the driver reads (path in the record, column alias)."""

_ENUMS = ("t_kind", "s_op")  # enum-typed fields, read as their symbol text


RAW_SCHEMA = "topic string, partition int, offset long, ts_ms long, key binary, value binary"
"""The raw Kafka rows as the driver jobs collect them (``ts_ms``: the record's timestamp)."""
RAW_EXPRS = ("topic", "partition", "offset", "unix_millis(timestamp) AS ts_ms", "key", "value")
"""A Kafka frame's columns as :data:`RAW_SCHEMA` (``DataFrame.selectExpr``)."""


@dataclass(frozen=True)
class FastSplit:
    """Raw rows split by the columnar fast path (:func:`fast_split`): its decoded ``out``, the
    rows it accepts (``idx``, ascending) and those it refers to the JVM (``referred``), which
    rows are a compacted topic's tombstones, and the key and value columns as one chunk each."""

    out: Any
    idx: np.ndarray
    referred: np.ndarray
    tombstone: np.ndarray
    key: Any
    value: Any


def fast_split(
    decode: Callable[[np.ndarray, np.ndarray, np.ndarray], FlatColumns | EventFields | MatchFields],
    compacted: bool,
    raw: Any,
) -> FastSplit:
    """``raw`` (Arrow, :data:`RAW_SCHEMA`) through a columnar decoder ``decode`` (a
    ``FlatDecoder``'s ``decode``, ``decode_events``, ``decode_matches``): a row is accepted when
    its value is and its key is null or ASCII, or, on a ``compacted`` topic, when it is a
    tombstone (a null value) with such a key. No Spark: :class:`TopicReader` sends the referred
    rows to the JVM; the matching job's head start leaves them to the first batch."""
    value, key = raw.column("value").combine_chunks(), raw.column("key").combine_chunks()
    buffers = binary_buffers(value)
    out = decode(*buffers)
    ascii_keys = ascii_rows(*binary_buffers(key))
    tombstone = ~buffers[2] & ascii_keys if compacted else np.zeros(len(ascii_keys), dtype=np.bool_)
    accepted = (out.accepted & ascii_keys) | tombstone
    return FastSplit(out, np.flatnonzero(accepted), np.flatnonzero(~accepted), tombstone, key, value)


class TopicReader:
    """One input topic's decoder: from the batch's raw rows of this topic (an Arrow table of
    :data:`RAW_SCHEMA`) to an Arrow table of its good records' fields, and for rejected records
    what a dead letter needs (raw key and value, coordinates, the verdict).

    A flat record (``schemas.columnar``: the telemetry, the receipts and the subscriptions, and
    a compacted topic's tombstones with an ASCII key), an ``Event`` (the
    events topic, by the matching job's compiled pass ``schemas.columnar.decode_events``) and a
    ``Match`` (``schemas.columnar.decode_matches``) are decoded here, by a columnar fast path;
    the values it refers (none in a clean stream) and every other topic's values go to the JVM
    (``streaming.decode``), which is the reference. Both give the same table (an event's
    attribute maps as Arrow maps, equal as mappings: the fast path keeps the wire order of their
    entries, the JVM its own).
    """

    def __init__(self, spark: SparkSession, topic: str, name: str, raw: bool = False) -> None:
        from pyspark.sql import functions as F

        from streaming.decode import TopicDecoder

        self.spark = spark
        self.topic, self.name = topic, name
        self.decoder = TopicDecoder(TOPICS[topic])
        schema = TOPICS[topic].schema
        self.flat = FlatDecoder(schema) if supports(schema) else None
        self.compacted = TOPICS[topic].compacted  # a null value is a tombstone, a good record
        self.compiled = {"Event": decode_events, "Match": decode_matches}.get(schema)  # their compiled passes
        self._schema: Any = None  # the Arrow schema of the output
        bad = F.col("error_code").isNotNull()
        rec = F.col("record")
        fields = []
        for path, alias in FIELDS[topic]:
            c = rec
            for part in path.split("."):
                c = c[part]
            fields.append((c.cast("string") if alias in _ENUMS else c).alias(alias))
        self.columns = [
            F.col("topic"),
            F.col("partition"),
            F.col("offset"),
            F.col("ts_ms"),
            F.col("error_code"),
            F.col("reason"),
            F.col("key").cast("string").alias("key_text"),
            F.col("value").isNull().alias("tombstone"),
            F.when(bad, F.col("key")).alias("bad_key"),
            F.when(bad, F.col("value")).alias("bad_value"),
            *fields,
        ]
        if raw:  # every record's bytes, for records the job itself rejects after decoding
            self.columns += [F.col("key").alias("raw_key"), F.col("value").alias("raw_value")]

    @property
    def schema(self) -> Any:
        """The Arrow schema of :meth:`collect`'s tables: the JVM plan's over an empty frame, turned
        into Arrow as ``DataFrame.toArrow`` turns it (``to_arrow_schema``, UTC, large types as
        ``spark.sql.execution.arrow.useLargeVarTypes``), without running a Spark job, which on a
        new JVM takes seconds of a cold start."""
        if self._schema is None:
            from pyspark.sql import functions as F
            from pyspark.sql.pandas.types import to_arrow_schema

            empty = self.spark.createDataFrame([], RAW_SCHEMA).withColumn("timestamp", F.timestamp_millis("ts_ms"))
            large = self.spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false") == "true"
            self._schema = to_arrow_schema(
                self.plan(empty).schema,
                error_on_duplicated_field_names_in_struct=True,
                timezone="UTC",
                prefers_large_types=large,
            )
        return self._schema

    def collect(self, raw: Any) -> Any:
        """This topic's raw rows ``raw`` (Arrow, :data:`RAW_SCHEMA`) decoded and checked."""
        if (self.flat is None and self.compiled is None) or raw.num_rows == 0:
            return self.decoded(raw)
        decode = self.flat.decode if self.flat is not None else self.compiled
        split = fast_split(decode, self.compacted, raw)  # type: ignore[arg-type]
        fast = self._fast_table(raw, split.out, split.idx, split.key, split.value, split.tombstone[split.idx])
        if not len(split.referred):
            return fast
        import pyarrow as pa

        return pa.concat_tables([fast, self.decoded(raw.take(pa.array(split.referred)))])

    def decoded(self, raw: Any) -> Any:
        """The JVM path: ``raw`` decoded and checked by ``streaming.decode``, as an Arrow table."""
        if raw.num_rows == 0:
            return self.schema.empty_table()
        from pyspark.sql import functions as F

        # a frame made from local data is a LocalRelation, and the optimizer would evaluate the
        # decoding over it on the driver, interpreted (ConvertToLocalRelation); a lazy local
        # checkpoint makes it an RDD scan that the executors run as generated code
        # (docs/decisions/jvm-decoding-plans.md)
        rows = self.spark.createDataFrame(raw).localCheckpoint(eager=False)
        try:
            frame = rows.withColumn("timestamp", F.timestamp_millis("ts_ms"))
            return self.plan(frame).toArrow().cast(self.schema)
        finally:
            _release(rows)

    def plan(self, frame: DataFrame) -> DataFrame:
        """The JVM path over ``frame`` (raw Kafka rows with ``ts_ms``): the output's columns."""
        return self.decoder(frame).select(*self.columns)

    def _fast_table(
        self,
        raw: Any,
        out: FlatColumns | EventFields | MatchFields,
        idx: np.ndarray,
        key: Any,
        value: Any,
        tombstone: np.ndarray,
    ) -> Any:
        """The accepted rows ``idx`` (ascending) of the fast path as the JVM path's table; those
        where ``tombstone`` holds are a compacted topic's null values (no field decoded)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        m = len(idx)
        take = pa.array(idx)
        cols: dict[str, Any] = {
            "topic": raw.column("topic").take(take),
            "partition": raw.column("partition").take(take),
            "offset": raw.column("offset").take(take),
            "ts_ms": raw.column("ts_ms").take(take),
            "error_code": pa.nulls(m, pa.string()),
            "reason": pa.nulls(m, pa.string()),
            "key_text": pc.cast(key.take(take), pa.string()),  # ASCII: checked
            "tombstone": pa.array(tombstone),
            "bad_key": pa.nulls(m, pa.binary()),
            "bad_value": pa.nulls(m, pa.binary()),
        }
        schema = self.schema
        if isinstance(out, EventFields):
            cols.update(_event_columns(out, idx, schema))
        elif isinstance(out, MatchFields):
            cols.update(_match_columns(out, idx, schema))
        else:
            for path, alias in FIELDS[self.topic]:
                cols[alias] = out.arrow(path, idx, schema.field(alias).type)
        if "raw_key" in schema.names:
            cols["raw_key"], cols["raw_value"] = key.take(take), value.take(take)
        return pa.Table.from_arrays([cols[n] for n in schema.names], schema=schema)


def _event_columns(out: EventFields, idx: np.ndarray, schema: Any) -> dict[str, Any]:
    """The ``FIELDS`` columns of the events topic at the accepted rows ``idx`` (ascending) of
    ``decode_events``' output, typed as ``schema`` (the JVM path's) has them: the head fields, and
    per map kind an Arrow map of the row's entries in wire order (empty for a row without any)."""
    import pyarrow as pa

    cols: dict[str, Any] = {"e_id": _strings(out, "event_id", idx), "e_publisher": _strings(out, "publisher_id", idx)}
    cols["e_at"] = pa.array(out.longs("published_at")[idx], schema.field("e_at").type)
    cols["e_lifetime"] = pa.array(out.longs("lifetime_ms")[idx], schema.field("e_lifetime").type)
    for kind in VALUE_KINDS:
        rows, names, values = out.attributes(kind)  # rows ascending: entries are in row order
        keep = np.isin(rows, idx)  # rows accepted by the decoder whose key the JVM must read
        if not keep.all():
            rows, names, values = rows[keep], names.filter(pa.array(keep)), values[keep]
        kind_type = schema.field(f"e_{kind}").type
        offsets = np.append(np.searchsorted(rows, idx), len(rows)).astype(np.int32)
        items = pa.array(values, kind_type.item_type)
        cols[f"e_{kind}"] = pa.MapArray.from_arrays(pa.array(offsets), names.cast(kind_type.key_type), items).cast(
            kind_type
        )
    return cols


def _strings(out: EventFields | MatchFields, name: str, idx: np.ndarray) -> Any:
    """String head field ``name`` of the rows ``idx`` as an Arrow string array."""
    import pyarrow as pa

    starts, lengths = out.string_span(name)
    offsets, blob = gather_spans(out.data, starts[idx], lengths[idx])
    return pa.Array.from_buffers(pa.string(), len(idx), [None, pa.py_buffer(offsets), pa.py_buffer(blob)])


def _match_columns(out: MatchFields, idx: np.ndarray, schema: Any) -> dict[str, Any]:
    """The ``FIELDS`` columns of the matches topic at the accepted rows ``idx`` of
    ``decode_matches``' output, typed as ``schema`` (the JVM path's) has them."""
    import pyarrow as pa

    lists, ids = out.ids(idx)
    kind = schema.field("m_subscriptions").type
    return {
        "m_event": _strings(out, "event_id", idx),
        "m_publisher": _strings(out, "publisher_id", idx),
        "m_at": pa.array(out.published_at()[idx], schema.field("m_at").type),
        "m_subscriptions": pa.ListArray.from_arrays(pa.array(lists), ids).cast(kind),
    }


@dataclass
class BatchStats:
    """What one micro-batch did (one JSON line of the stats file); jobs add their own counts to
    ``extra``."""

    batch_id: int
    records: dict[str, int] = field(default_factory=dict)
    dead_letters: int = 0
    outputs: int = 0
    watermark_ms: float | None = None
    read_ms: float = 0.0
    decode_ms: float = 0.0
    step_ms: float = 0.0
    write_ms: float = 0.0
    duration_ms: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def good_rows(table: Any) -> np.ndarray:
    """Row numbers of ``table``'s valid records in partition/offset order."""
    import pyarrow.compute as pc

    ok = np.asarray(pc.is_null(table.column("error_code")).to_numpy(zero_copy_only=False), dtype=bool)
    order = np.lexsort((table.column("offset").to_numpy(zero_copy_only=False), table.column("partition").to_numpy()))
    return order[ok[order]]


def subscription_records(rows: list[dict[str, Any]]) -> list[SubscriptionRecord]:
    """Decoded subscription rows (their ``key_text``, ``tombstone`` and ``s_*`` columns) as the
    records of ``routing.matching.table``."""
    return [
        SubscriptionRecord(
            key=r["key_text"],
            tombstone=bool(r["tombstone"]),
            op=r["s_op"],
            subscription_id=r["s_id"],
            filter=r["s_filter"],
            composite=r["s_composite"],
            subscriber_id=r["s_subscriber"],
        )
        for r in rows
    ]


def column(table: Any, name: str, idx: np.ndarray) -> np.ndarray:
    """Column ``name`` of ``table`` at rows ``idx`` as numpy."""
    return np.asarray(table.column(name).take(idx).to_numpy(zero_copy_only=False))


def topology_changes(table: Any, idx: np.ndarray) -> list[tuple[str, dict[str, Any] | None]]:
    """The topology topic's rows ``idx`` as ``(element id, fields or None for a tombstone)``."""
    names = ("kind", "broker", "from", "to", "reliability", "cost")
    return [
        (
            r["key_text"],
            None if r["tombstone"] else {**{k: r[f"t_{k}"] for k in names}, "forbidden_events": r["t_forbidden"]},
        )
        for r in table.take(idx).to_pylist()
    ]


def link_samples(table: Any, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The link telemetry rows ``idx`` as numpy: from, to, sent_at (ms) and delay_ms (NaN when lost)."""
    import pyarrow.compute as pc

    delay = pc.fill_null(table.column("l_delay").take(idx), float("nan"))
    return (
        column(table, "l_from", idx).astype(str),
        column(table, "l_to", idx).astype(str),
        column(table, "l_sent", idx).astype(np.float64),
        np.asarray(delay.to_numpy(zero_copy_only=False), dtype=np.float64),
    )


def _release(df: DataFrame) -> None:
    """Drop the blocks of a local checkpoint now rather than when the JVM collects its RDD."""
    df._jdf.queryExecution().analyzed().rdd().unpersist(False)


class DriverBatch(ABC):
    """The ``foreachBatch`` function of a driver-state job (module docstring).

    Subclasses set :attr:`job` and implement :meth:`new_state`, :meth:`load_state`,
    :meth:`dump_state` and :meth:`step`.
    """

    job = "job"
    raw_topics: tuple[str, ...] = ()
    """Input topics whose every record keeps its raw key and value (see :meth:`reject`)."""
    write_options: tuple[tuple[str, str], ...] = ()
    """Extra options of the batch's Kafka write (``kafka.``-prefixed producer settings)."""
    driver_producer = False
    """Send the outputs from the driver by one idempotent producer kept for the job's life
    (:meth:`_produce`) instead of a Spark write; dead letters are written by Spark either way."""
    driver_consumer = False
    """Read the batch's raw rows from Kafka on the driver, by the batch's offset range
    (:meth:`_consume`), instead of collecting the streaming batch (a Spark job)."""

    def __init__(
        self,
        spark: SparkSession,
        conn: KafkaConnection,
        inputs: dict[str, str],
        state_folder: Path,
        topic_prefix: str = "",
        stats_file: Path | None = None,
        quiet: bool = True,
    ) -> None:
        self.spark, self.conn, self.quiet = spark, conn, quiet
        self.log = logs.get(self.job)
        self.names = inputs
        self.state_folder, self.topic_prefix, self.stats_file = state_folder, topic_prefix, stats_file
        self.readers = {
            topic: TopicReader(spark, topic, name, topic in self.raw_topics) for topic, name in inputs.items()
        }
        self.rejections: list[tuple[Any, ...]] = []
        self.max_time_ms = -np.inf
        self.history: list[BatchStats] = []
        self.ready = False
        self._producer: Any = None  # the KafkaWriter of _produce, made on first use
        self._consumer: Any = None  # the Consumer of _consume, made on first use
        self._query_folder: Path | None = None  # Spark's checkpoint of the query (its offset log)
        self._since_whole: int | None = None  # changes saved since the last whole state (None: none yet)

    # -- the subclass's part ----------------------------------------------------------------

    @abstractmethod
    def new_state(self) -> None:
        """Start with an empty step object."""

    @abstractmethod
    def load_state(self, blob: bytes) -> None:
        """Restore the step object from :meth:`dump_state`'s bytes."""

    @abstractmethod
    def dump_state(self) -> bytes:
        """The step object's state."""

    def dump_changes(self) -> bytes | None:
        """What changed in the step object since the last :meth:`dump_state` or
        :meth:`dump_changes`, or None: this job saves its whole state after every batch (the
        default). Each call counts from the previous one."""
        return None

    def load_changes(self, blob: bytes) -> None:
        """Apply :meth:`dump_changes`' bytes to the step object as it was when they were taken."""
        raise NotImplementedError(f"the {self.job} job saves no changes")

    @abstractmethod
    def step(self, tables: dict[str, Any], stats: BatchStats) -> list[tuple[str, bytes, bytes]]:
        """Feed the good rows of ``tables`` (one Arrow table per input topic) to the step object;
        return the output records as ``(topic, key, Avro value)``. Advance
        :attr:`max_time_ms` to the largest event time seen."""

    def start(
        self, checkpoint: Path, available_now: bool, trigger_interval: str, max_offsets: int | None = None
    ) -> StreamingQuery:
        """Start the query: the input topics (raw Kafka rows) -> this handler, checkpoint in
        ``checkpoint``, named after the job and the topic prefix."""
        from streaming.session import kafka_stream, start_batches

        source = kafka_stream(self.spark, self.conn, list(self.names.values()), max_offsets)
        source = source.select("topic", "partition", "offset", "key", "value", "timestamp")
        self._query_folder = checkpoint
        name = f"siftstream-{self.job}-{self.topic_prefix or 'default'}"
        return start_batches(source, self, checkpoint, name, available_now, trigger_interval)

    def rows(self, batch: DataFrame, batch_id: int) -> DataFrame:
        """The batch's raw rows this job reads (all of them unless a subclass says otherwise)."""
        return batch

    def reject(self, table: Any, row: int, code: str, reason: str) -> None:
        """Dead-letter row ``row`` of ``table`` (a topic in :attr:`raw_topics`): a record that
        decoded but that the job cannot use, e.g. a composite tree that does not parse."""
        r = table.slice(row, 1).to_pylist()[0]
        self.rejections.append(
            (r["topic"], r["partition"], r["offset"], r["ts_ms"], r["raw_key"], r["raw_value"], code, reason)
        )

    # -- state ----------------------------------------------------------------------------------

    def _state_path(self, batch_id: int, changes: bool = False) -> Path:
        return self.state_folder / f"{batch_id}.{'delta' if changes else 'npz'}"

    def _chain(self, batch_id: int) -> list[Path] | None:
        """The files that give the state after ``batch_id``: its last whole state and the changes
        after it, in order (None when a file is missing)."""
        chain: list[Path] = []
        for b in range(batch_id, -1, -1):
            if self._state_path(b).exists():
                return [self._state_path(b), *reversed(chain)]
            if not self._state_path(b, changes=True).exists():
                return None
            chain.append(self._state_path(b, changes=True))
        return None

    def _restore(self, batch_id: int) -> None:
        chain = self._chain(batch_id - 1) if batch_id > 0 else None
        self.ready = True
        self._since_whole = None
        if chain is not None:
            for i, path in enumerate(chain):
                blob = path.read_bytes()
                self.max_time_ms = float(np.frombuffer(blob[:8], dtype=np.float64)[0])
                (self.load_state if i == 0 else self.load_changes)(blob[8:])
            self._since_whole = len(chain) - 1
            return
        if batch_id > 0:
            self.log.warning(f"no state for batch {batch_id - 1} in {self.state_folder}; starting empty")
        self.new_state()

    def _save(self, batch_id: int) -> None:
        folder = self.state_folder
        folder.mkdir(parents=True, exist_ok=True)
        blob = None
        if self._since_whole is not None and self._since_whole < SNAPSHOT_EVERY - 1:
            blob = self.dump_changes()
        changes = blob is not None
        if blob is None:
            blob = self.dump_state()
        self._since_whole = self._since_whole + 1 if changes and self._since_whole is not None else 0
        tmp = folder / f".{batch_id}.tmp"
        tmp.write_bytes(np.float64(self.max_time_ms).tobytes() + blob)
        tmp.replace(self._state_path(batch_id, changes))
        self._state_path(batch_id, not changes).unlink(missing_ok=True)  # a replayed batch's other kind
        # keep what restoring each of the last KEEP_STATES batches needs: from the last whole state
        # at or before the oldest of them
        ids = [int(f.stem) for f in folder.glob("*.npz") if f.stem.isdigit()]
        whole = [b for b in ids if b <= batch_id - KEEP_STATES]
        if whole:
            keep_from = max(whole)
            for old in [*folder.glob("*.npz"), *folder.glob("*.delta")]:
                if old.stem.isdigit() and int(old.stem) < keep_from:
                    old.unlink(missing_ok=True)

    # -- the batch --------------------------------------------------------------------------------

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        stats = BatchStats(batch_id)
        if not self.ready:
            self._restore(batch_id)
        # read once: the batch's raw rows collected as Arrow (one Spark job), split by topic here;
        # the flat topics are decoded here, the others sent back to the JVM to be decoded
        import pyarrow.compute as pc

        raw = self._consume(batch_id) if self.driver_consumer else None
        if raw is None:
            raw = self.rows(batch, batch_id).selectExpr(*RAW_EXPRS).toArrow()
        stats.read_ms = (time.monotonic() - started) * 1000
        t0 = time.monotonic()
        topics = raw.column("topic")
        tables = {
            topic: reader.collect(raw.filter(pc.equal(topics, reader.name))) for topic, reader in self.readers.items()
        }
        stats.decode_ms = (time.monotonic() - t0) * 1000
        t0 = time.monotonic()
        self.rejections = []
        outputs = self.step(tables, stats)
        stats.step_ms = (time.monotonic() - t0) * 1000
        stats.outputs = len(outputs)
        self._save(batch_id)
        t0 = time.monotonic()
        dead = self._dead_letters(tables) + self.rejections
        stats.dead_letters = len(dead)
        produced = outputs if self.driver_producer else []
        written = [] if self.driver_producer else outputs
        if dead or written:
            writer = self._frame(dead, written).write.format("kafka").options(**self.conn.spark_options())
            writer.options(**dict(self.write_options)).save()
        if produced:
            self._produce(produced)
        stats.write_ms = (time.monotonic() - t0) * 1000
        stats.duration_ms = (time.monotonic() - started) * 1000
        self._report(stats)

    def _consume(self, batch_id: int) -> Any:
        """The batch's raw rows (an Arrow table of :data:`RAW_SCHEMA` in the order read, each
        partition in offset order) read by one Kafka consumer on the driver
        (``streaming.readers.read_ranges``), or None when Spark's offset log has not this batch's
        range (then the batch is collected).

        The range is Spark's own: from the previous batch's end offsets (the earliest for a
        partition without one, as the query starts) to this batch's, both from the offset log
        Spark writes before it runs a batch (``streaming.matching_job.read_offset_log``), so these
        are the streaming batch's records; offsets that retention or compaction removed are
        skipped, as the query does (``failOnDataLoss`` false)."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer

        from streaming.matching_job import read_offset_log
        from streaming.readers import RANGE_READER, read_ranges

        if self._query_folder is None:
            return None
        ends = read_offset_log(self._query_folder, batch_id)
        starts = read_offset_log(self._query_folder, batch_id - 1) if batch_id > 0 else {}
        if ends is None or starts is None:
            return None
        wanted: dict[tuple[str, int], tuple[int, int]] = {}
        for name in self.names.values():
            for part, end in sorted(ends.get(name, {}).items()):
                start = starts.get(name, {}).get(part, OFFSET_BEGINNING)
                if end > 0 and start != end:
                    wanted[(name, part)] = (start, end)
        if self._consumer is None:
            self._consumer = Consumer(self.conn.confluent(**RANGE_READER, **{"queued.max.messages.kbytes": 16384}))
        try:
            return read_ranges(self._consumer, wanted)
        except RuntimeError as exc:
            raise RuntimeError(f"{self.job}: batch {batch_id}: {exc}") from exc

    def _produce(self, outputs: list[tuple[str, bytes, bytes]]) -> None:
        """Send ``outputs`` in order and wait for every acknowledgement (raise RuntimeError when
        one failed: the batch fails and is run again). One idempotent ``acks=all`` producer
        (``producers.kafka_writer.KafkaWriter``) keeps each key's records in the order sent, as the
        one task of a Spark write does, and Java's partitioner (murmur2 of the key) puts a key on
        the partition a Spark write puts it on: the same records on the same partitions."""
        if self._producer is None:
            from producers.kafka_writer import KafkaWriter

            self._producer = KafkaWriter.like_spark(self.conn)
        self._producer.write_rows(outputs, self.job)

    def _dead_letters(self, tables: dict[str, Any]) -> list[tuple[Any, ...]]:
        out: list[tuple[Any, ...]] = []
        for table in tables.values():
            bad = table.filter(table.column("error_code").is_valid())
            if bad.num_rows:
                cols = ["topic", "partition", "offset", "ts_ms", "bad_key", "bad_value", "error_code", "reason"]
                out += list(zip(*(bad.column(c).to_pylist() for c in cols), strict=True))
        return out

    def _frame(self, dead: list[tuple[Any, ...]], outputs: list[tuple[str, bytes, bytes]]) -> DataFrame:
        """One frame for one Kafka write: dead letters (encoded as every job does) and outputs."""
        from pyspark.sql import functions as F

        from streaming.decode import dead_letter_columns

        schema = (
            "topic string, partition int, offset long, ts_ms long, key binary, value binary, "
            "error_code string, reason string"
        )
        df = self.spark.createDataFrame(dead, schema).withColumn("timestamp", F.timestamp_millis("ts_ms"))
        key, value = dead_letter_columns()
        deadletter = F.lit(self.topic_prefix + DEADLETTER_TOPIC).alias("topic")
        out = df.select(deadletter, key.alias("key"), value.alias("value"))
        if outputs:  # from Arrow columns rather than Python rows (docs/decisions/jvm-decoding-plans.md)
            import pyarrow as pa

            topics, keys, values = zip(*outputs, strict=True)
            table = pa.table(
                {
                    "topic": pa.array(topics, pa.string()),
                    "key": pa.array(keys, pa.binary()),
                    "value": pa.array(values, pa.binary()),
                }
            )
            out = out.unionByName(self.spark.createDataFrame(table))
        # one task writes the records in order: a key's later record (a newer plan version, a later
        # window's report) must land after its earlier ones on the compacted, latest-wins topics
        return out.coalesce(1)

    def _report(self, stats: BatchStats) -> None:
        self.history.append(stats)
        if self.stats_file is not None:
            self.stats_file.parent.mkdir(parents=True, exist_ok=True)
            with self.stats_file.open("a") as f:
                f.write(json.dumps(stats.__dict__) + "\n")
        counts = {k.split(".")[-2]: v for k, v in stats.records.items() if v} or {"records": 0}
        fields = {**counts, "dead_letters": stats.dead_letters, "outputs": stats.outputs, **stats.extra}
        timings = {k: getattr(stats, k) for k in ("read_ms", "decode_ms", "step_ms", "write_ms", "watermark_ms")}
        logs.log_batch(self.log, stats.batch_id, {**fields, "duration_ms": stats.duration_ms}, self.quiet, timings)
