"""``CompositeDetection`` records, a whole batch at once: the composites job's Kafka keys and values.

:func:`encode_detections` makes each detection's Kafka key (its ``detection_id``, UTF-8) and value
(the framed Avro record) column by column with Arrow kernels, from the detector's compact output
(``routing.composite.detection.Detections``: one block per subscription, column by column), with
no record dicts: each component's ``leaf``, ``event_id`` and ``published_at`` encoded and joined
per detection, each subscription's ids encoded once. A codec whose schema is not laid out as
``composite_detection.avsc`` (:data:`DETECTION_LAYOUT`) is used record by record instead.

Invariant: the keys and values are byte for byte what ``codec.encode(record)`` writes record by
record (a parity test holds them to it and to fastavro). The ``detection_id`` is the JSON text
``[subscription id, [[leaf path, event id], ...]]`` that ``routing.composite.detection`` defines,
made here from its pre-escaped parts (``DetectionSource.id_prefix`` and ``id_heads``) and each
event id escaped as ``json.encoder.encode_basestring`` does. Pure code: numpy and pyarrow.

The detector's types are read through the protocols :class:`DetectionSourceLike`,
:class:`DetectionBlockLike` and :class:`DetectionsLike` (what this module needs of them), so that
``schemas`` does not import ``routing``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import chain
from json.encoder import encode_basestring as _escape
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from schemas.codec import Codec
from schemas.fastenc import zigzag

__all__ = [
    "DETECTION_LAYOUT",
    "DetectionBlockLike",
    "DetectionSourceLike",
    "DetectionsLike",
    "avro_longs",
    "encode_detections",
]


class DetectionSourceLike(Protocol):
    """Whose detections a block holds (``routing.composite.detection.DetectionSource``)."""

    @property
    def subscription_id(self) -> str: ...

    @property
    def subscriber_id(self) -> str: ...

    @property
    def leaf_paths(self) -> Sequence[str]: ...

    @property
    def id_prefix(self) -> str: ...

    @property
    def id_heads(self) -> Sequence[str]: ...


class DetectionBlockLike(Protocol):
    """One subscription's detections, column by column (``routing.composite.detection.DetectionBlock``)."""

    @property
    def source(self) -> DetectionSourceLike: ...

    @property
    def detected_at(self) -> Sequence[int]: ...

    @property
    def sizes(self) -> int | Sequence[int]: ...

    @property
    def leaves(self) -> Sequence[int] | None: ...

    @property
    def event_ids(self) -> Sequence[str]: ...

    @property
    def times(self) -> Sequence[int]: ...


class DetectionsLike(Protocol):
    """The detections of one step (``routing.composite.detection.Detections``): the records, and
    the same as blocks."""

    @property
    def blocks(self) -> Sequence[DetectionBlockLike]: ...

    def __iter__(self) -> Iterator[Mapping[str, Any]]: ...


DETECTION_LAYOUT = (
    ("detection_id", "string"),
    ("subscription_id", "string"),
    ("subscriber_id", "string"),
    ("detected_at", "long"),
    ("components", (("leaf", "string"), ("event_id", "string"), ("published_at", "long"))),
)
"""The layout that :func:`encode_detections` writes directly; another schema falls back to the codec."""


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
    """Avro's zig-zag varint encoding of each int64 value (``schemas.fastenc.zigzag``), vectorized,
    as an Arrow binary array.

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


def encode_detections(detections: DetectionsLike, codec: Codec) -> tuple[list[bytes], list[bytes]]:
    """Kafka keys and values of the detections: each one's ``detection_id`` (UTF-8), and the
    framed Avro record, the bytes ``codec.encode(record)`` writes (module docstring).

    Examples
    --------
    >>> from routing.composite.trees import parse_composite
    >>> from routing.composite.detection import CompositeDetector
    >>> from schemas.codec import codec_for
    >>> det = CompositeDetector()
    >>> det.add("c", parse_composite({"op": "and", "within_ms": 9, "children": ["a = 1", "b = 1"]}), "u")
    >>> det.update([("c", "L1", "x", 1), ("c", "L2", 'y"', 2)])
    >>> found = det.advance_rows(10)
    >>> codec = codec_for("CompositeDetection")
    >>> encode_detections(found, codec) == ([found[0]["detection_id"].encode()], [codec.encode(dict(found[0]))])
    True
    """
    if _layout(codec.schema) != DETECTION_LAYOUT:
        return [r["detection_id"].encode() for r in detections], [codec.encode(dict(r)) for r in detections]
    keys: list[bytes] = []
    values: list[bytes] = []
    chunk: list[DetectionBlockLike] = []
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


def _block_sizes(block: DetectionBlockLike) -> npt.NDArray[np.int64]:
    """Components per detection."""
    if isinstance(block.sizes, int):
        return np.full(len(block.detected_at), block.sizes, dtype=np.int64)
    return np.asarray(block.sizes, dtype=np.int64)


def _block_leaves(block: DetectionBlockLike) -> npt.NDArray[np.int64]:
    """Leaf index per component."""
    if block.leaves is not None:
        return np.asarray(block.leaves, dtype=np.int64)
    assert isinstance(block.sizes, int)
    return np.tile(np.arange(block.sizes, dtype=np.int64), len(block.detected_at))


def _encode_blocks(blocks: Sequence[DetectionBlockLike], header: bytes) -> tuple[pa.BinaryArray, pa.BinaryArray]:
    """The keys and values (Arrow binary arrays) of the detections of ``blocks``."""
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
