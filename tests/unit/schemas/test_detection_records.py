"""The composites job's detection writer (``schemas.detection_records.encode_detections``): the
keys and values it makes column by column equal, byte for byte, what the schema codec writes
record by record, and fastavro (the reference encoder) too (docs/conventions.md §6)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from routing.composite.detection import CompositeDetector, Detections
from routing.composite.trees import parse_composite
from schemas import detection_records
from schemas.codec import codec_for, make_codec
from schemas.detection_records import avro_longs, encode_detections
from schemas.fastenc import zigzag
from tests.strategies import component_matches, composite_docs

CODEC = codec_for("CompositeDetection")
FAR = 10**6
# ids with quotes, backslashes, control characters, non-ASCII; some longer than a one-byte length
IDS = st.text(st.characters(codec="utf-8"), max_size=90)


def _reference(found: Detections) -> tuple[list[bytes], list[bytes]]:
    records = [dict(r) for r in found]
    return [r["detection_id"].encode() for r in records], [CODEC.encode(r) for r in records]


@settings(max_examples=150, deadline=None)
@given(composite_docs(max_depth=2), st.data())
def test_encoded_detections_are_the_codecs_bytes(doc: dict[str, Any], data: st.DataObject) -> None:
    tree = parse_composite(doc)
    det = CompositeDetector()
    subs = data.draw(st.lists(st.tuples(IDS, IDS), min_size=1, max_size=3, unique_by=lambda s: s[0]), label="subs")
    base = data.draw(st.sampled_from((0, -7_000, 1_700_000_000_000, 2**62)), label="time base")
    matches = []
    for sid, subscriber in subs:
        det.add(sid, tree, subscriber)
        found = data.draw(component_matches(tree), label=f"matches of {sid!r}")
        names = data.draw(st.lists(IDS, min_size=len(found), max_size=len(found)), label="event ids")
        rename = dict(zip(sorted({e for _, e, _ in found}), names, strict=False))
        matches += [(sid, leaf, rename[e], base + t) for leaf, e, t in found]
    det.update(matches)
    found = det.advance_rows(base + FAR)
    keys, values = encode_detections(found, CODEC)
    assert (keys, values) == _reference(found)
    assert values == [CODEC.encode_reference(dict(r)) for r in found]


def test_blocks_are_encoded_in_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    tree = parse_composite({"op": "and", "within_ms": 10, "children": ["a = 1", {"op": "or", "children": ["b=1"]}]})
    det = CompositeDetector()
    for i in range(7):
        det.add(f"c{i}", tree, f"u{i}")
    det.update([(f"c{i}", f"L{1 + j % 2}", f"e{j}", j) for i in range(7) for j in range(10 + i)])
    found = det.advance_rows(FAR)
    assert len(found.blocks) == 7
    monkeypatch.setattr(detection_records, "_CHUNK", 9)
    assert encode_detections(found, CODEC) == _reference(found)
    assert encode_detections(Detections(), CODEC) == ([], [])


def test_another_schema_layout_is_encoded_by_its_codec() -> None:
    doc = copy.deepcopy(CODEC.schema)
    doc["fields"].append({"name": "note", "type": ["null", "string"], "default": None})
    other = make_codec(doc)
    det = CompositeDetector()
    det.add("c", parse_composite({"op": "or", "children": ["a = 1"]}), "u")
    det.update([("c", "L1", "e1", 5)])
    found = det.advance_rows(10)
    assert encode_detections(found, other) == ([b'["c",[["0","e1"]]]'], [other.encode(dict(found[0]))])


@given(st.lists(st.integers(-(2**63), 2**63 - 1)))
def test_vectorized_longs_are_zigzag_varints(values: list[int]) -> None:
    edges = [0, -1, 63, -64, 64, -65, 2**63 - 1, -(2**63), 2**35, 1_700_000_000_000]
    assert avro_longs(values + edges).to_pylist() == [zigzag(v) for v in values + edges]
