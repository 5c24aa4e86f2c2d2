"""Build the one SparkSession a process uses, with the connector jars and sane local settings."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from infra.jars import JarSets
from streaming import logs

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from infra.connection import KafkaConnection


__all__ = [
    "INTERRUPTIONS",
    "BatchFunction",
    "SparkConfig",
    "await_query",
    "build_session",
    "check_executors",
    "executor_environment",
    "kafka_stream",
    "short_error",
    "start_batches",
    "submitted",
]


@dataclass(frozen=True)
class SparkConfig:
    """Spark settings chosen at the edge.

    Attributes
    ----------
    master : str
        ``local[2]`` (default: this machine's two cores) or ``spark://host:port``.
    shuffle_partitions : int
        Frozen into a query's checkpoint at its first run; 200 (Spark's default) makes every
        stateful micro-batch take seconds on two cores.
    ui : bool
        Whether to start the Spark web UI.
    fair_scheduler : bool
        Spark's fair scheduler (``spark.scheduler.mode=FAIR``): concurrent queries of one
        application share the cores by pool instead of first come, first served.
    """

    master: str = "local[2]"
    shuffle_partitions: int = 2
    app_name: str = "siftstream"
    ui: bool = False
    driver_memory: str = "4g"
    executor_memory: str = "1g"
    fair_scheduler: bool = False


def submitted() -> bool:
    """Whether spark-submit started this process: its JVM is already running and ``PythonRunner``
    passed the gateway's port in ``PYSPARK_GATEWAY_PORT`` (a plain ``python`` starts its own JVM
    and sets no such variable)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


# Settings that only take effect when the driver's JVM starts, or that pin the driver to loopback:
# under spark-submit its command line (--driver-memory, --driver-java-options, --jars) and the
# cluster's network decide them.
_DRIVER_LAUNCH = (
    "spark.jars",
    "spark.driver.host",
    "spark.driver.bindAddress",
    "spark.driver.memory",
    "spark.driver.extraJavaOptions",
)


def build_session(cfg: SparkConfig, jars: JarSets) -> SparkSession:
    """Create (or return the running) SparkSession. Jars only load on the first call in a process.

    Under spark-submit (:func:`submitted`; docs/guide/cluster.md) its settings win: the master and
    every ``--conf`` that spark-submit passed stay as they are, ``cfg.master`` and ``jars`` are not
    used (its ``--jars`` are), the settings of :data:`_DRIVER_LAUNCH` are left to spark-submit's
    command line, and the rest below are defaults for what it did not set.
    """
    # Python workers must run this interpreter (the venv's), and Spark must stay on loopback.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    java_logs = logs.spark_java_options()
    settings = {
        "spark.master": cfg.master,
        "spark.app.name": cfg.app_name,
        "spark.jars": ",".join(str(j) for j in jars.spark),
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.memory": cfg.driver_memory,
        "spark.executor.memory": cfg.executor_memory,
        "spark.ui.enabled": str(cfg.ui).lower(),
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(cfg.shuffle_partitions),
        "spark.default.parallelism": "2",
        "spark.scheduler.mode": "FAIR" if cfg.fair_scheduler else "FIFO",
        # pyspark 4.2.0 can hang in Arrow-optimised Python UDFs (SPARK-58241, fixed in 4.2.1,
        # whose connector jars Maven Central does not serve); our hot paths use mapInArrow.
        "spark.sql.execution.pythonUDF.arrow.enabled": "false",
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
        "spark.sql.session.timeZone": "UTC",
        # Spark 4.2 asks whether its new "types framework" is on for every nested struct that a
        # decoder builds (TypeOps via SpecificInternalRow, once per event's `attributes` record);
        # left unset, an executor evaluates the default function each time (a new SQLConf plus a
        # read of the environment; docs/decisions/spark-session-settings.md). It only serves TIME
        # columns, which no SiftStream schema has.
        "spark.sql.types.framework.enabled": "false",
        # file:// paths (the local checkpoints) without Hadoop's .crc side files: every trigger
        # writes an offset-log and a commit-log entry, and each went through a checksummed write
        # and rename of two files; about half of their time (docs/decisions/spark-session-settings.md)
        "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
        "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
        # Spark's generated code for decode-and-validate exceeds HotSpot's 8,000-byte limit for
        # JIT-compiling a method; without this flag it runs in the bytecode interpreter. ParallelGC:
        # throughput over pause times for micro-batches (docs/decisions/spark-session-settings.md)
        # and the driver's log4j2 configuration: this process's --log-level and --log-format, the
        # messages Spark logs in normal operation hidden (infra/spark-log4j2.properties)
        "spark.driver.extraJavaOptions": f"-XX:-DontCompileHugeMethods -XX:+UseParallelGC {java_logs}",
        "spark.executor.extraJavaOptions": "-XX:-DontCompileHugeMethods -XX:+UseParallelGC",
    }
    if submitted():
        settings = _unset_by_submit(settings)
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(logs.spark_level())
    if logs.current()[0] != "debug":
        _quiet_loggers(spark)
    if submitted():
        logs.get("session").info(check_executors(spark))
    return spark


def executor_environment(_: int) -> str:
    """What an executor's Python worker imports: where the project comes from (the ``--py-files``
    zip on a cluster), whether a schema loads from there, and the libraries' versions."""
    import socket

    import fastavro
    import numpy
    import pyarrow
    import scipy

    import routing
    from schemas.codec import codec_for

    codec_for("Match")  # schemas/*.avsc read through importlib.resources (from the zip)
    libs = f"numpy {numpy.__version__}, scipy {scipy.__version__}, pyarrow {pyarrow.__version__}"
    libs += f", fastavro {fastavro.__version__}, Python {sys.version.split()[0]}"
    where = os.path.abspath(routing.__file__).rsplit("/routing/", 1)[0]  # relative to the executor's folder
    return f"{socket.gethostname()}: SiftStream from {where} ({libs})"


def check_executors(spark: SparkSession) -> str:
    """Run :func:`executor_environment` in one task per core of the cluster, before any query
    starts: a Python worker that cannot import the project or its libraries fails here with the
    import error instead of in the first micro-batch; returns one line per distinct answer."""
    sc = spark.sparkContext
    n = max(1, sc.defaultParallelism)
    try:
        seen = sorted(set(sc.parallelize(range(n), n).map(executor_environment).collect()))
    except Exception as exc:  # py4j's error carries the worker's traceback
        raise RuntimeError(f"the executors cannot run SiftStream (docs/guide/cluster.md): {exc}") from exc
    return f"executors of {sc.master}: " + "; ".join(seen)


def _unset_by_submit(settings: dict[str, str]) -> dict[str, str]:
    """``settings`` less :data:`_DRIVER_LAUNCH` and less every key that spark-submit already set
    (the JVM's ``spark.*`` system properties, read through the gateway it started)."""
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connects to spark-submit's gateway; starts no JVM
    present = SparkConf()  # loadDefaults: the spark.* system properties spark-submit passed
    return {k: v for k, v in settings.items() if k not in _DRIVER_LAUNCH and not present.contains(k)}


# Warnings Spark repeats for every query or micro-batch that say nothing about this project's
# queries: to_avro of a struct whose catalyst fields are nullable (the dead letters' fields that
# the schema requires are never null: topic coordinates, a concat_ws id, a filtered error code),
# and adaptive execution being off in streaming (it always is).
_QUIET_LOGGERS = (
    "org.apache.spark.sql.avro.AvroSerializer",
    "org.apache.spark.sql.execution.streaming.runtime.ResolveWriteToStream",
)


def _quiet_loggers(spark: SparkSession) -> None:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    error = jvm.org.apache.logging.log4j.Level.ERROR
    for name in _QUIET_LOGGERS:
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, error)


def kafka_stream(spark: SparkSession, conn: KafkaConnection, topics: list[str], max_offsets: int | None) -> DataFrame:
    """A Kafka source over ``topics`` from their earliest offsets (the jobs read compacted topics,
    which are tables, from the start), never stopping when retention or compaction removed records;
    large fetches; at most ``max_offsets`` records per micro-batch when given."""
    reader = spark.readStream.format("kafka").options(**conn.spark_options())
    reader = reader.option("subscribe", ",".join(topics))
    reader = reader.option("startingOffsets", "earliest")
    reader = reader.option("failOnDataLoss", "false")
    reader = reader.option("kafka.max.partition.fetch.bytes", str(8 << 20))
    reader = reader.option("kafka.fetch.max.bytes", str(32 << 20))
    if max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    return reader.load()


EARLIEST = -2
"""Spark's Kafka offsets JSON: -2 stands for a partition's earliest offset."""


def kafka_range(
    spark: SparkSession, conn: KafkaConnection, topic: str, start: Mapping[int, int], end: Mapping[int, int]
) -> DataFrame | None:
    """A batch read of ``topic``'s records in ``[start, end)`` per partition of ``end`` (a missing
    start: the earliest offset); None when no partition has a record in its range.

    Only the records in range are fetched, where a filter on a streaming batch's ``offset`` column
    would fetch the whole batch first. Gaps that compaction or retention left are skipped
    (``failOnDataLoss`` false).

    Example: ``kafka_range(spark, conn, "siftstream.matches.v1", {0: 900}, {0: 1000})`` reads
    offsets 900-999 of partition 0.
    """
    import json

    parts = sorted(p for p, o in end.items() if o > 0 and start.get(p, EARLIEST) != o)
    if not parts:
        return None
    reader = spark.read.format("kafka").options(**conn.spark_options())
    reader = reader.option("assign", json.dumps({topic: parts}))
    reader = reader.option("startingOffsets", json.dumps({topic: {str(p): start.get(p, EARLIEST) for p in parts}}))
    reader = reader.option("endingOffsets", json.dumps({topic: {str(p): end[p] for p in parts}}))
    reader = reader.option("failOnDataLoss", "false")
    reader = reader.option("kafka.max.partition.fetch.bytes", str(8 << 20))
    return reader.option("kafka.fetch.max.bytes", str(32 << 20)).load()


INTERRUPTIONS = (
    "java.lang.InterruptedException",
    "java.io.InterruptedIOException",
    "java.nio.channels.ClosedByInterruptException",
)
"""The Java exceptions by which Spark recognises a batch interrupted by the query's stop."""


class BatchFunction:
    """A ``foreachBatch`` handler whose failures reach the JVM as one short line.

    Spark (``StreamExecution.isInterruptionException``) tells a batch that its query's stop
    interrupted from a failed one by matching the Python error's text against
    ``Py4JJavaError: An error occurred while calling((.|\\r\\n|\\r|\\n)*)(`` and an interruption's
    class name (:data:`INTERRUPTIONS`); that pattern recurses once per character, so the text of
    a Py4J error from inside the handler (the Python traceback with the Java stack trace, many
    kilobytes) overflows the stream thread's stack: a StackOverflowError at every stop that
    interrupts a batch. Here an exception with a Py4J error in its chain is raised again, without
    the chain, as that pattern's short form when the Java exception (or a cause) is an
    interruption or a cancelled Spark job, else as a ``RuntimeError`` naming the call and the
    Java exception's first line; the whole traceback goes to the ``spark`` logger (debug).

    >>> BatchFunction(print).handler is print
    True
    """

    def __init__(self, handler: Callable[[DataFrame, int], None]) -> None:
        self.handler = handler

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        try:
            self.handler(batch, batch_id)
        except Exception as exc:
            short = short_error(exc)
            if short is None:
                raise
            logs.get("spark").debug(f"batch {batch_id}: {short}", exc_info=True)
            raise short from None


def short_error(exc: BaseException) -> Exception | None:
    """:class:`BatchFunction`'s short form of ``exc`` (None when no Py4J error is in its chain)."""
    from py4j.protocol import Py4JJavaError

    seen: set[int] = set()
    found: BaseException | None = exc
    while found is not None and not isinstance(found, Py4JJavaError) and id(found) not in seen:
        seen.add(id(found))
        found = found.__cause__ or found.__context__
    if not isinstance(found, Py4JJavaError):
        return None
    call = str(found.errmsg).strip().rstrip(".")  # "An error occurred while calling o123.method"
    throwable, first = found.java_exception, ""
    for _depth in range(32):
        if throwable is None:
            break
        text = str(throwable.toString()).strip().splitlines()
        first = first or (text[0][:300] if text else "")
        name = str(throwable.getClass().getName())
        if name in INTERRUPTIONS or (name == "org.apache.spark.SparkException" and "cancelled" in (text or [""])[0]):
            return InterruptedError(f"py4j.protocol.Py4JJavaError: {call}: {INTERRUPTIONS[0]} ({first})")
        throwable = throwable.getCause()
    return RuntimeError(f"{call.replace('An error occurred while calling', 'calling')} failed: {first}")


def start_batches(
    df: DataFrame,
    handler: Callable[[DataFrame, int], None],
    checkpoint: Path,
    name: str,
    available_now: bool,
    trigger_interval: str,
) -> StreamingQuery:
    """Start ``df.writeStream.foreachBatch(handler)`` (as :class:`BatchFunction`): available-now,
    or on a processing-time trigger."""
    batches = df.writeStream.foreachBatch(BatchFunction(handler))
    writer = batches.option("checkpointLocation", str(checkpoint)).queryName(name)
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime=trigger_interval)
    return writer.start()


def await_query(query: StreamingQuery, job: str) -> None:
    """Wait until the query ends (available-now) or Ctrl-C; stop it; a failure becomes RuntimeError."""
    from pyspark.errors import StreamingQueryException

    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        logs.get(job).info("stopping ...")
    except StreamingQueryException as exc:
        raise RuntimeError(f"the {job} query failed: {exc}") from exc
    finally:
        if query.isActive:
            query.stop()
