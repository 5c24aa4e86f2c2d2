"""The composites job: events and composite subscriptions -> detections and their placement.

One streaming query reads the compacted ``siftstream.topology.v1`` and
``siftstream.subscriptions.v1``, ``siftstream.events.v1`` and ``siftstream.telemetry.links.v1``.
Each micro-batch (``streaming.driver_batch``: decode in the JVM, collect per topic as Arrow, dead
letters, state per batch) feeds the driver's :class:`routing.monitors.composites.CompositeMonitor`:

1. topology and subscription changes first, in partition/offset order; a composite tree that
   does not parse goes to the dead-letter topic as ``invalid_composite`` with the parser's
   message (the path in the tree, what was wrong, what would be valid), and an existing
   subscription of that id stays;
2. the batch's events, matched in one vectorised call against every leaf filter of every live
   composite subscription, feed the detector (event time: ``published_at``); link telemetry feeds
   the placement's link delays;
3. the watermark (the largest event or telemetry time seen, minus ``lateness_ms``) makes
   detections final: one ``CompositeDetection`` per detection on ``siftstream.composites.v1``,
   keyed by its deterministic ``detection_id`` (subscription and component events), so a replayed
   batch writes identical records (encoded column by column from the detector's compact output
   by :func:`encode_detections`, byte for byte what the schema's codec writes); and at every
   check period the placement of each composite's detection is reconsidered, writing a
   ``Placement`` (keyed by subscription id) when it is first decided or moves (Li & Jacobsen §4,
   with hysteresis: ``routing.monitors.composites``).

The selection and consumption policy and the state bound are ``routing.composite.detection``'s.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain, repeat
from json.encoder import encode_basestring as _escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from infra.connection import KafkaConnection
from routing.composite.detection import DetectionBlock, Detections
from routing.matching.table import SubscriptionRecord
from routing.monitors.composites import CompositeMonitor, MonitorConfig
from schemas.codec import Codec, codec_for
from schemas.fastenc import zigzag
from schemas.topics import TOPICS
from streaming.arrow_matching import event_batch
from streaming.driver_batch import BatchStats, DriverBatch, column, good_rows, link_samples, topology_changes
from streaming.session import await_query

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

TOPOLOGY = "siftstream.topology.v1"
SUBSCRIPTIONS = "siftstream.subscriptions.v1"
EVENTS = "siftstream.events.v1"
LINKS = "siftstream.telemetry.links.v1"
COMPOSITES = "siftstream.composites.v1"
PLACEMENTS = "siftstream.placements.v1"
INPUTS = (TOPOLOGY, SUBSCRIPTIONS, EVENTS, LINKS)


@dataclass(frozen=True)
class CompositesConfig:
    """Settings of the composites query.

    Attributes
    ----------
    conn : KafkaConnection
    checkpoint : Path
        Local folder: Spark's checkpoint (``query/``) and the monitor's state (``monitor/``).
    monitor : MonitorConfig
        Detector bound and placement settings (:class:`routing.monitors.composites.MonitorConfig`).
    topic_prefix : str
    available_now : bool
    trigger_interval : str
    lateness_ms : int
        Events may arrive this late (event time); later ones are dropped and counted.
    max_offsets_per_trigger : int, optional
    stats_file : Path, optional
    """

    conn: KafkaConnection
    checkpoint: Path
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    topic_prefix: str = ""
    available_now: bool = False
    trigger_interval: str = "5 seconds"
    lateness_ms: int = 5_000
    max_offsets_per_trigger: int | None = None
    stats_file: Path | None = None

    def topic(self, name: str) -> str:
        return self.topic_prefix + name


# the layout that ``encode_detections`` writes directly; another schema falls back to the codec
_DETECTION_LAYOUT = (
    ("detection_id", "string"),
    ("subscription_id", "string"),
    ("subscriber_id", "string"),
    ("detected_at", "long"),
    ("components", (("leaf", "string"), ("event_id", "string"), ("published_at", "long"))),
)


def _layout(schema: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    fields = []
    for f in schema["fields"]:
        kind = f["type"]
        if isinstance(kind, dict) and kind.get("type") == "array" and isinstance(kind["items"], dict):
            kind = tuple((g["name"], g["type"]) for g in kind["items"]["fields"])
        fields.append((f["name"], kind))
    return tuple(fields)


_CHUNK = 500_000  # detections encoded per round (bounded memory; Arrow binary offsets are 32-bit)
_JSON_ESCAPED = r'[\x00-\x1f"\\]'  # what json.encoder.encode_basestring escapes (ensure_ascii=False)


def _avro_string(text: str) -> bytes:
    raw = text.encode()
    return zigzag(len(raw)) + raw


def avro_longs(values: npt.ArrayLike) -> pa.BinaryArray:
    """Avro's zig-zag varint encoding of each int64 value (``schemas.fastenc.zigzag``), vectorized.

    >>> avro_longs([0, -1, 64, 1_700_000_000_000]).to_pylist() == [zigzag(0), zigzag(-1), zigzag(64),
    ...                                                            zigzag(1_700_000_000_000)]
    True
    """
    v = np.asarray(values, dtype=np.int64)
    z = ((v << 1) ^ (v >> 63)).view(np.uint64)
    n = len(z)
    width = max(1, -(-int(z.max()).bit_length() // 7)) if n else 1
    groups = np.empty((n, width), dtype=np.uint8)
    size = np.ones(n, dtype=np.int32)
    for k in range(width):
        low = (z & np.uint64(0x7F)).astype(np.uint8)
        z = z >> np.uint64(7)
        more = z != 0
        groups[:, k] = low | (more.astype(np.uint8) << np.uint8(7))
        size += more
    data = groups[np.arange(width) < size[:, None]]
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(size, out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _avro_strings(text: pa.StringArray) -> pa.BinaryArray:
    return pc.binary_join_element_wise(avro_longs(pc.binary_length(text).to_numpy()), text.cast(pa.binary()), b"")


def encode_detections(detections: Detections, codec: Codec) -> tuple[list[bytes], list[bytes]]:
    """Kafka keys and values of the detections: each one's ``detection_id`` (UTF-8), and the
    framed Avro record, the bytes ``codec.encode(record)`` writes.

    Made column by column with Arrow kernels from the detector's blocks (no record dicts): each
    component's ``leaf``, ``event_id`` and ``published_at`` encoded and joined per detection,
    each subscription's ids encoded once. A codec whose schema is not laid out as
    ``composite_detection.avsc`` is used record by record instead.

    Examples
    --------
    >>> from routing.composite.trees import parse_composite
    >>> from routing.composite.detection import CompositeDetector
    >>> det = CompositeDetector()
    >>> det.add("c", parse_composite({"op": "and", "within_ms": 9, "children": ["a = 1", "b = 1"]}), "u")
    >>> det.update([("c", "L1", "x", 1), ("c", "L2", 'y"', 2)])
    >>> found = det.advance_rows(10)
    >>> codec = codec_for("CompositeDetection")
    >>> encode_detections(found, codec) == ([found[0]["detection_id"].encode()], [codec.encode(dict(found[0]))])
    True
    """
    if _layout(codec.schema) != _DETECTION_LAYOUT:
        return [r["detection_id"].encode() for r in detections], [codec.encode(dict(r)) for r in detections]
    keys: list[bytes] = []
    values: list[bytes] = []
    chunk: list[DetectionBlock] = []
    size = 0
    for block in [*detections.blocks, None]:
        if block is None or (chunk and size + len(block.event_ids) > _CHUNK):
            if chunk:
                some_keys, some_values = _encode_blocks(chunk, codec.header)
                keys += some_keys.to_pylist()
                values += some_values.to_pylist()
            chunk, size = [], 0
        if block is not None:
            chunk.append(block)
            size += len(block.event_ids)
    return keys, values


def _block_sizes(block: DetectionBlock) -> npt.NDArray[np.int64]:
    """Components per detection."""
    if isinstance(block.sizes, int):
        return np.full(len(block.detected_at), block.sizes, dtype=np.int64)
    return np.asarray(block.sizes, dtype=np.int64)


def _block_leaves(block: DetectionBlock) -> npt.NDArray[np.int64]:
    """Leaf index per component."""
    if block.leaves is not None:
        return np.asarray(block.leaves, dtype=np.int64)
    assert isinstance(block.sizes, int)
    return np.tile(np.arange(block.sizes, dtype=np.int64), len(block.detected_at))


def _encode_blocks(blocks: Sequence[DetectionBlock], header: bytes) -> tuple[pa.BinaryArray, pa.BinaryArray]:
    n_blocks = len(blocks)
    lengths = np.fromiter((len(b.detected_at) for b in blocks), np.int64, n_blocks)
    src = np.repeat(np.arange(n_blocks), lengths)  # per detection, its block
    sizes = np.concatenate([_block_sizes(b) for b in blocks])
    offsets = pa.array(np.concatenate(([0], np.cumsum(sizes))).astype(np.int32))
    # per component: the row of its (subscription, leaf) in the leaf tables
    leaf_base = np.zeros(n_blocks + 1, dtype=np.int64)
    np.cumsum([len(b.source.leaf_paths) for b in blocks], out=leaf_base[1:])
    per_block = np.fromiter((len(b.event_ids) for b in blocks), np.int64, n_blocks)
    leaf_row = np.repeat(leaf_base[:-1], per_block) + np.concatenate([_block_leaves(b) for b in blocks])
    paths = pa.array([_avro_string(p) for b in blocks for p in b.source.leaf_paths], pa.binary())
    heads = pa.array([h.encode() for b in blocks for h in b.source.id_heads], pa.binary())
    n_components = int(per_block.sum())
    events = pa.array(chain.from_iterable(b.event_ids for b in blocks), pa.string(), size=n_components)
    event_bytes = events.cast(pa.binary())
    times = np.fromiter(chain.from_iterable(b.times for b in blocks), np.int64, n_components)
    component = pc.binary_join_element_wise(paths.take(leaf_row), _avro_strings(events), avro_longs(times), b"")
    components = pc.binary_join(pa.ListArray.from_arrays(offsets, component), b"")
    # detection ids: prefix + ",".join(head + JSON string of the event id + "]") + "]]"
    quoted = pc.binary_join_element_wise(b'"', event_bytes, b'"', b"")
    unsafe = pc.match_substring_regex(events, _JSON_ESCAPED)
    if pc.any(unsafe).as_py():
        where = np.flatnonzero(unsafe.to_numpy(zero_copy_only=False))
        fixes = [_escape(e).encode() for e in events.take(where).to_pylist()]
        quoted = pc.replace_with_mask(quoted, unsafe, pa.array(fixes, pa.binary()))
    pieces = pc.binary_join_element_wise(heads.take(leaf_row), quoted, b"]", b"")
    prefixes = pa.array([b.source.id_prefix.encode() for b in blocks], pa.binary()).take(src)
    joined = pc.binary_join(pa.ListArray.from_arrays(offsets, pieces), b",")
    keys = pc.binary_join_element_wise(prefixes, joined, b"]]", b"")
    whose = pa.array(
        [_avro_string(b.source.subscription_id) + _avro_string(b.source.subscriber_id) for b in blocks], pa.binary()
    )
    detected_at = np.fromiter(chain.from_iterable(b.detected_at for b in blocks), np.int64, len(src))
    values = pc.binary_join_element_wise(
        header,
        avro_longs(pc.binary_length(keys).to_numpy()),
        keys,
        whose.take(src),
        avro_longs(detected_at),
        avro_longs(sizes),
        components,
        b"\x00",
        b"",
    )
    return keys, values


class CompositesBatch(DriverBatch):
    """The ``foreachBatch`` function: feeds the monitor, writes detections, placements, dead letters."""

    job = "composites"
    raw_topics = (SUBSCRIPTIONS,)

    def __init__(self, spark: SparkSession, cfg: CompositesConfig, quiet: bool = True) -> None:
        names = {topic: cfg.topic(topic) for topic in INPUTS}
        state = cfg.checkpoint / "monitor"
        super().__init__(spark, cfg.conn, names, state, cfg.topic_prefix, cfg.stats_file, quiet)
        self.cfg = cfg
        self.monitor = CompositeMonitor(cfg.monitor)
        self.detection_codec = codec_for(TOPICS[COMPOSITES].schema)
        self.placement_codec = codec_for(TOPICS[PLACEMENTS].schema)

    def new_state(self) -> None:
        self.monitor = CompositeMonitor(self.cfg.monitor)

    def load_state(self, blob: bytes) -> None:
        self.monitor = CompositeMonitor.from_bytes(blob)

    def dump_state(self) -> bytes:
        return self.monitor.to_bytes()

    def step(self, tables: dict[str, Any], stats: BatchStats) -> list[tuple[str, bytes, bytes]]:
        # A batch makes millions of tuples and lists (component matches, partial matches,
        # detections) and no reference cycles; the cyclic collector, run every 700 allocations,
        # walks more and more of them as the survivors pile up (offline, matching and detecting
        # a 1.5M-match batch took about twice as long with it on). It resumes after the step.
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._step(tables, stats)
        finally:
            if enabled:
                gc.enable()

    def _step(self, tables: dict[str, Any], stats: BatchStats) -> list[tuple[str, bytes, bytes]]:
        mon = self.monitor
        times: list[float] = []
        component_matches = 0
        match_ms = detect_ms = 0.0
        table = tables[TOPOLOGY]
        idx = good_rows(table)
        stats.records[TOPOLOGY] = len(idx)
        if len(idx):
            mon.apply_topology(topology_changes(table, idx))
        table = tables[SUBSCRIPTIONS]
        idx = good_rows(table)
        stats.records[SUBSCRIPTIONS] = len(idx)
        if len(idx):
            rows = table.take(idx).to_pylist()
            records = [
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
            for pos, (code, reason) in mon.apply_subscriptions(records, [r["s_broker"] for r in rows]):
                self.reject(table, int(idx[pos]), code, reason)
        table = tables[EVENTS]
        idx = good_rows(table)
        stats.records[EVENTS] = len(idx)
        if len(idx):
            at = column(table, "e_at", idx).astype(np.int64)
            maps = {
                kind: table.column(f"e_{kind}").take(idx).combine_chunks()
                for kind in ("longs", "doubles", "strings", "booleans")
            }
            started = time.perf_counter()
            component_matches = mon.add_events(
                column(table, "e_id", idx).astype(str).tolist(),
                column(table, "e_publisher", idx).astype(str).tolist(),
                at.tolist(),
                event_batch(maps, len(idx)),
            )
            times.append(float(at.max()))
            match_ms = (time.perf_counter() - started) * 1000
        table = tables[LINKS]
        idx = good_rows(table)
        stats.records[LINKS] = len(idx)
        if len(idx):
            src, dst, sent, delay = link_samples(table, idx)
            mon.add_link_samples(src, dst, sent, delay)
            times.append(float(sent.max()))
        if times:
            self.max_time_ms = max(self.max_time_ms, *times)
        detections = Detections()
        placements: list[dict[str, Any]] = []
        started = time.perf_counter()
        if np.isfinite(self.max_time_ms):
            stats.watermark_ms = self.max_time_ms - self.cfg.lateness_ms
            detections = mon.detect(stats.watermark_ms)
            detect_ms = (time.perf_counter() - started) * 1000
            placements = mon.place(stats.watermark_ms)
        place_ms = (time.perf_counter() - started) * 1000 - detect_ms
        started = time.perf_counter()
        keys, values = encode_detections(detections, self.detection_codec)
        out = list(zip(repeat(self.cfg.topic(COMPOSITES)), keys, values))
        out += [
            (self.cfg.topic(PLACEMENTS), p["subscription_id"].encode(), self.placement_codec.encode(p))
            for p in placements
        ]
        det_stats = mon.detector.stats
        stats.extra = {
            "component_matches": component_matches,
            "detections": len(detections),
            "placements": len(placements),
            "pending": det_stats.pending,
            "stored": det_stats.stored,
            "late": det_stats.late,
            "expired": det_stats.expired,
            "evicted": det_stats.evicted,
            # where the step's time went (ms): matching and buffering, detection, placement, encoding
            "match_ms": round(match_ms),
            "detect_ms": round(detect_ms),
            "place_ms": round(place_ms),
            "encode_ms": round((time.perf_counter() - started) * 1000),
        }
        return out


def build_query(
    spark: SparkSession, cfg: CompositesConfig, quiet: bool = True
) -> tuple[StreamingQuery, CompositesBatch]:
    """Wire Kafka (the four inputs) -> ``CompositesBatch`` -> Kafka and start the query."""
    handler = CompositesBatch(spark, cfg, quiet)
    checkpoint = cfg.checkpoint / "query"
    query = handler.start(checkpoint, cfg.available_now, cfg.trigger_interval, cfg.max_offsets_per_trigger)
    return query, handler


def run(spark: SparkSession, cfg: CompositesConfig, quiet: bool = False) -> list[BatchStats]:
    """Run until done (available-now) or interrupted; raise RuntimeError when the query failed."""
    query, handler = build_query(spark, cfg, quiet)
    await_query(query, "composites")
    return handler.history
