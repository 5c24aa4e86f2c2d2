"""The executor side of the matching job: Arrow batches of Kafka rows in, Kafka rows to write out.

``match_batches`` is what ``mapInArrow`` runs in each Python worker. It reads as decode ->
match -> encode:

1. brings the worker's ``IndexReplica`` up to the table version that the driver shipped with
   this micro-batch (``ShipState``): replicas live in this module, one per job, so they survive
   from task to task and from batch to batch in a reused Python worker, and only the deltas since
   the worker's last batch are applied, across a new base by the bridge broadcast; a new worker
   rebuilds from the snapshot broadcast (a broadcast is fetched from the driver only by the
   workers that read its value);
2. decodes the batch's values as ``Event`` records (``schemas.event_records.decode_rows``), so
   every row gets the validation job's verdict and reason, and the good rows' attributes become
   ``EventBatch`` columns;
3. matches the batch with one ``index.match`` call;
4. encodes the Kafka rows to write (topic, key, value;
   ``schemas.match_records``): for a good row its whole ``Match`` record, single-object Avro
   (``subscription_ids`` sorted, per docs/reference/topics.md), keyed by event id; for a bad row its
   ``DeadLetter`` (the validation job's bytes), keyed ``topic/partition/offset``;
5. with delivery on (``ShipState.delivery``, a :class:`DeliveryShip`), adds the delivery rows:
   per channel topic one ``ChannelEvents`` record with every matched event of the batch that the
   channel carries under the installed assignment version (one of its subscriptions is on it),
   each as published (docs/reference/delivery.md).

``match_batches`` yields those rows; the matching job runs :func:`write_batches`, which sends
them with the worker's own Kafka producer and returns when every one is acknowledged.

The composites job reads events decoded by the JVM, as typed map columns: :func:`event_batch`
makes its ``EventBatch`` from those.

No pyspark here: the module is tested with plain pyarrow as well as through Spark.

>>> import pyarrow as pa
>>> maps = {"longs": pa.array([[("x", 1)], None, []], type=pa.map_(pa.string(), pa.int64())),
...         "strings": pa.array([[("s", "a")], [("x", "b")], []], type=pa.map_(pa.string(), pa.string()))}
>>> batch = event_batch(maps, 3)
>>> [batch.event(i) for i in range(3)]
[{'x': 1, 's': 'a'}, {'x': 'b'}, {}]
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from infra.connection import KafkaConnection
from producers.kafka_writer import KafkaWriter
from routing.matching.index import BruteForceIndex, EventBatch, MatchIndex
from routing.matching.table import Delta, IndexReplica
from schemas.event_records import attribute_columns, decode_rows, map_entries
from schemas.match_records import Targets, delivery_batch, delivery_pairs, match_values, output_batches
from schemas.rules import VALUE_KINDS

__all__ = [
    "INDEX_KINDS",
    "INPUT_COLUMNS",
    "DeliveryShip",
    "ShipState",
    "channels_by_rank",
    "event_batch",
    "match_batches",
    "replica_for",
    "save_compiled",
    "write_batches",
]

INPUT_COLUMNS = ("key", "value", "partition", "offset", "timestamp")  # of the events topic's Kafka rows
INDEX_KINDS = {"match": MatchIndex, "brute-force": BruteForceIndex}


@dataclass(frozen=True)
class DeliveryShip:
    """The installed assignment version, shipped with a micro-batch.

    Attributes
    ----------
    version : int
        The installed version (0: none yet, every subscription in the lobby).
    topics : tuple of str
        The channel topics, channel c's at index c.
    members : object
        Anything with a ``value`` attribute holding ``{subscription id: channel}`` (a Spark
        broadcast on a cluster); subscriptions missing from it go to the lobby.
    """

    version: int
    topics: tuple[str, ...]
    members: Any


@dataclass(frozen=True)
class ShipState:
    """What the driver ships to executors with one micro-batch: how to reach table ``version``.

    Attributes
    ----------
    job : str
        Identifies the query run; a worker keeps one replica per job.
    index_kind : str
        ``match`` (``MatchIndex``) or ``brute-force`` (``BruteForceIndex``, the oracle).
    base_version : int
        The version of the snapshot in ``base``.
    base : object
        Anything with a ``value`` attribute holding the snapshot, ``{id: filter text}`` (a Spark
        broadcast on a cluster): read only by workers that must rebuild.
    deltas : tuple of (version, id, filter or None)
        The table's changes over ``(base_version, version]``.
    version : int
        The table version this micro-batch's events are matched against.
    counters : object, optional
        Anything with ``add((events, rejected events, matches, deliveries, ready ms, decode ms,
        match ms, encode ms, deliver ms, write ms))`` (a Spark accumulator); ready ms is the time from a
        task's first non-empty Arrow batch until its first matches (the replica's sync and the
        index's first flush), 0 for the later batches; the next four are the Arrow batch's
        steps (``Event`` decoding, ``index.match`` with the ranks, the ``Match`` rows and dead
        letters, the delivery rows), ready ms counted in match ms; write ms is a task's time
        sending its rows and waiting for their acknowledgements (:func:`write_batches`).
    delivery : DeliveryShip, optional
        Write delivery rows by this assignment version; None: no delivery.
    compiled_dir : str, optional
        A folder on the workers' disk for compiled indexes (``MatchIndex`` replicas only;
        ``streaming.subscription_store.CompiledIndexFolder``): a new worker loads the latest one
        instead of compiling every filter of the snapshot, and a worker that built its index
        saves it there once its task's rows are out. None: every new worker compiles the snapshot.
    bridge_version, bridge : int, object
        ``bridge.value`` (a Spark broadcast on a cluster) holds the table's changes over
        ``(bridge_version, base_version]`` (``SubscriptionTable.bridge``): a worker whose replica
        is at a version from ``bridge_version`` on reaches the new base by them and never reads
        ``base``. None: no bridge (a replica behind the base reads the snapshot).
    base_digest : str, optional
        ``routing.matching.digest.texts_digest`` of the snapshot in ``base``, shipped with the
        first snapshot of a run only (the one every new worker of a restarted job reads): a new
        worker whose latest compiled index was saved with texts of this digest loads that index
        as it is and never reads ``base`` (docs/decisions/compiled-index.md). None: a new worker
        diffs the snapshot against the compiled index's texts.
    """

    job: str
    index_kind: str
    base_version: int
    base: Any
    deltas: tuple[Delta, ...]
    version: int
    counters: Any = None
    delivery: DeliveryShip | None = None
    compiled_dir: str | None = None
    bridge_version: int = 0
    bridge: Any = None
    base_digest: str | None = None


_REPLICAS: OrderedDict[str, IndexReplica] = OrderedDict()
_MAX_REPLICAS = 2  # jobs whose replicas a worker keeps (tests run several queries in one session)


def replica_for(ship: ShipState) -> IndexReplica:
    """This worker's replica for ``ship.job``, synced to ``ship.version``."""
    replica = _REPLICAS.get(ship.job)
    if replica is None:
        compiled = None
        if ship.compiled_dir is not None and ship.index_kind == "match":
            from streaming.subscription_store import CompiledIndexFolder

            compiled = CompiledIndexFolder(Path(ship.compiled_dir))
        replica = IndexReplica(  # long-lived; one table per job run: its id names the lineage
            INDEX_KINDS[ship.index_kind], freeze_first_build=True, compiled=compiled, lineage=ship.job
        )
        _REPLICAS[ship.job] = replica
        while len(_REPLICAS) > _MAX_REPLICAS:
            _REPLICAS.popitem(last=False)
    _REPLICAS.move_to_end(ship.job)
    bridge = None if ship.bridge is None else (ship.bridge_version, lambda: ship.bridge.value)
    replica.sync(
        ship.base_version, lambda: ship.base.value.items(), ship.deltas, ship.version, bridge, ship.base_digest
    )
    return replica


_CHANNELS: list[Any] = [None, None, None]  # (ids in rank order, assignment version, channel per rank)


def channels_by_rank(by_rank: Any, delivery: DeliveryShip) -> Any:
    """The channel of each subscription in rank order, kept while the index version and the
    assignment version are.

    >>> import numpy as np
    >>> ship = DeliveryShip(3, ("c0", "c1"), type("B", (), {"value": {"b": 1}})())
    >>> channels_by_rank(np.array(["a", "b"], dtype=object), ship).tolist()
    [0, 1]
    """
    import numpy as np

    from routing.channels.assignment import LOBBY

    if _CHANNELS[0] is by_rank and _CHANNELS[1] == delivery.version:
        return _CHANNELS[2]
    members = delivery.members.value
    table = np.fromiter((members.get(s, LOBBY) for s in by_rank.tolist()), np.int64, len(by_rank))
    _CHANNELS[:] = [by_rank, delivery.version, table]
    return table


def event_batch(maps: Mapping[str, pa.Array], n: int) -> EventBatch:
    """The ``EventBatch`` of ``n`` events given as typed attribute map columns (``longs``, ...;
    each ``n`` long, null for events that carry no map)."""
    return EventBatch.from_columns(n, attribute_columns((map_entries(maps[k]) for k in VALUE_KINDS if k in maps), n))


def match_batches(
    ship: ShipState, targets: Targets, batches: Iterator[pa.RecordBatch], save: bool = True
) -> Iterator[pa.RecordBatch]:
    """Kafka rows of events in (``INPUT_COLUMNS``), the Kafka rows to write out
    (``schemas.match_records.OUTPUT_SCHEMA``; see the module docstring). With ``save``, a compiled
    index that is due is saved once the last rows are out (else the caller calls
    :func:`save_compiled` when it has written them)."""
    replica: IndexReplica | None = None
    for rb in batches:
        n = rb.num_rows
        if n == 0:
            continue
        ready_ms, started = 0.0, time.monotonic()
        first = replica is None
        if replica is None:  # sync lazily: tasks of partitions without events never build an index
            replica = replica_for(ship)
        synced = time.monotonic()
        events = decode_rows(rb.column("value"))
        decoded = time.monotonic()
        matches = replica.index.match(EventBatch.from_columns(n, events.columns()))
        if first:
            ready_ms = (time.monotonic() - started) * 1000
        offsets, ranks, by_rank = matches.sorted_ranks()
        matched = time.monotonic()
        data, row_off = match_values(events, offsets, ranks, by_rank)
        out = list(output_batches(rb, events, data, row_off, targets))
        encoded = time.monotonic()
        delivered = 0
        if ship.delivery is not None:
            rows, chans = delivery_pairs(events.good, offsets, ranks, channels_by_rank(by_rank, ship.delivery))
            delivered = len(rows)
            if delivered:
                out.append(delivery_batch(rb, events, rows, chans, list(ship.delivery.topics)))
        if ship.counters is not None:
            good_count = int(events.good.sum())
            done = time.monotonic()
            steps = (decoded - synced, matched - decoded, encoded - matched, done - encoded)
            ship.counters.add(
                (
                    good_count,
                    n - good_count,
                    int(matches.counts()[events.good].sum()),
                    delivered,
                    ready_ms,
                    *(1000 * s for s in steps),
                    0.0,
                )
            )
        yield from out
    if save and replica is not None:
        replica.save_compiled()


def save_compiled(ship: ShipState) -> None:
    """Save this worker's replica for ``ship.job`` as a compiled index if one is due
    (``ShipState.compiled_dir``); after a task's rows are written, off the batch's critical path."""
    replica = _REPLICAS.get(ship.job)
    if replica is not None:
        replica.save_compiled()


_WRITERS: dict[KafkaConnection, KafkaWriter] = {}  # one producer per cluster, for the worker's life


def warm_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A ``mapInArrow`` body that readies a Python worker for matching and yields nothing: the
    events' decoder, a small index's build, flush and match (their compiled kernels loaded from
    numba's cache) run once over the rows it is given (events topic's Kafka rows, as
    :data:`INPUT_COLUMNS`). The matching job runs it while its driver reads a cold start's
    subscriptions, so that the batch's own task finds a worker that has done all this.

    >>> list(warm_batches(iter([])))
    []
    """
    index = MatchIndex()
    index.apply([("warm", "x between 1 and 2 and s = 'a'")])
    index.match(EventBatch.from_columns(1, {}))
    for rb in batches:
        if rb.num_rows:
            decode_rows(rb.column("value"))
    yield from ()


def write_batches(
    conn: KafkaConnection, ship: ShipState, targets: Targets, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The matching job's ``mapInArrow`` body: :func:`match_batches`'s rows sent to Kafka by this
    worker's own producer; yields nothing.

    The producer (``KafkaWriter.like_spark``: idempotent, ``acks=all``, Java's partitioner) puts
    each row where Spark's Kafka sink would, and the task ends only when every row is
    acknowledged, so a micro-batch that Spark commits has all its rows written; a failed row fails
    the task (and the micro-batch, which runs again and writes the same rows under the same keys).
    Why the workers write rather than the JVM: docs/decisions/match-records-written-by-workers.md.
    ``ship.counters`` gets the time spent sending and waiting (its write ms).
    """
    writer = _WRITERS.get(conn)
    if writer is None:
        writer = _WRITERS[conn] = KafkaWriter.like_spark(conn)
    spent = 0.0
    for out in match_batches(ship, targets, batches, save=False):
        started = time.monotonic()
        writer.send_rows(out.column(0).to_pylist(), out.column(1).to_pylist(), out.column(2).to_pylist())
        spent += time.monotonic() - started
    started = time.monotonic()
    writer.flush_or_raise("matching")
    if ship.counters is not None:
        ship.counters.add((0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 1000 * (spent + time.monotonic() - started)))
    save_compiled(ship)
    yield from ()
