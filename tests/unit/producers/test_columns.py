"""Events as columns (producers.columns): the batch encoders give exactly the bytes of the
record-at-a-time ones, for generated batches and for every preset."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from hypothesis import given, settings

from producers.columns import EventColumns, Text, Vocab, number_text
from producers.workloads import PRESETS
from schemas.codec import codec_for, decode
from schemas.fastenc import zigzag
from schemas.segments import assemble, const, split_rows, varints
from tests.strategies import event_columns


@settings(max_examples=200, deadline=None)
@given(event_columns())
def test_batch_encodings_equal_the_record_at_a_time_ones(cols: EventColumns) -> None:
    records = cols.records()
    assert cols.jsonl() == b"".join(orjson.dumps(r) + b"\n" for r in records)
    assert cols.avro() == [codec_for("Event").encode(r) for r in records]
    assert cols.keys() == [r["publisher_id"] for r in records]


@settings(max_examples=100, deadline=None)
@given(event_columns())
def test_from_records_keeps_every_event(cols: EventColumns) -> None:
    records = cols.records()
    again = EventColumns.from_records(records)
    assert again.records() == records
    assert [decode(raw, "Event")[1] for raw in again.avro()] == records
    assert [orjson.loads(line) for line in again.jsonl().splitlines()] == records


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_encodes_as_its_records(name: str) -> None:
    small = {"gryphon": {"brokers": 2, "regionalism": 0.5}, "clusters": {"subscriptions": 100}}.get(name, {})
    cols = PRESETS[name](seed=3, **small).columns(300)
    records = cols.records()
    assert len(records) == 300
    assert cols.jsonl() == b"".join(orjson.dumps(r) + b"\n" for r in records)
    assert cols.avro() == [codec_for("Event").encode(r) for r in records]


def test_varints_are_avros_zigzag() -> None:
    values = np.array([0, -1, 1, 63, -64, 64, 2**31, -(2**63), 2**63 - 1, 300])
    assert split_rows(*assemble([varints(values)], len(values))) == [zigzag(int(v)) for v in values]


def test_number_text_is_orjsons() -> None:
    values = np.array([0.1, 1e16, -2.5e-300, 100.0, 5e-324])
    data, _ = assemble([const(b"<"), number_text(values), const(b">")], len(values))
    assert data.tobytes() == b"".join(b"<" + orjson.dumps(float(v)) + b">" for v in values)


def test_text_parts_concatenate_per_row() -> None:
    t = Text(("x", Vocab(("a", "é"), np.array([1, 0, 1])), "-", np.array([5, 60, 700])))
    assert t.strings(3) == ["xé-5", "xa-60", "xé-700"]


def test_from_records_refuses_values_of_no_kind() -> None:
    bad = {"event_id": "e", "publisher_id": "p", "published_at": 1, "lifetime_ms": 1, "attributes": {"x": [1]}}
    with pytest.raises(ValueError, match="attribute 'x' has a list"):
        EventColumns.from_records([bad])
