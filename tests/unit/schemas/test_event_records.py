"""The matching workers' event decoder (``schemas.event_records``) against the reference decoder
and rules: every Kafka value gets ``schemas.rules.classify``'s verdict, and the good ones the
fields and attributes that ``schemas.codec`` decodes (docs/conventions.md §6)."""

from __future__ import annotations

import random

import pyarrow as pa

from producers.events import EventGenerator
from producers.faults import FAULTS, corrupt
from routing.matching.index import EventBatch
from schemas.codec import codec_for
from schemas.event_records import decode_rows
from schemas.rules import classify


def _typed(attrs: dict[str, object]) -> dict[str, tuple[type, object]]:
    return {k: (type(v), v) for k, v in attrs.items()}


def test_kafka_values_get_the_validation_jobs_verdict_and_good_ones_their_fields() -> None:
    """Every fault kind, a tombstone, events with non-ASCII text (referred by the fast path, good)
    and plain events in one Arrow batch: ``decode_rows`` gives ``classify``'s verdict to each, and
    the good ones' fields and attributes are the reference decoder's."""
    rng = random.Random(11)
    codec = codec_for("Event")
    events = EventGenerator(publishers=3, seed=11).batch(30, 1_700_000_000_000)
    events[3]["attributes"]["city"] = "Zürich"
    events[4]["event_id"] = "é-4"
    values: list[bytes | None] = [codec.encode(e) for e in events]
    values += [corrupt(kind, rng, events[i])[0] for i, kind in enumerate(sorted(FAULTS))] + [None]
    decoded = decode_rows(pa.array(values, pa.binary()))
    verdicts = [classify(v, "Event") for v in values]
    assert list(zip(decoded.error_code, decoded.reason, strict=True)) == verdicts
    assert decoded.good.tolist() == [code is None for code, _ in verdicts]
    assert [c for c, _ in verdicts[30:]] == [FAULTS[k] for k in sorted(FAULTS)] + ["bad_framing"]
    batch = EventBatch.from_columns(len(values), decoded.columns())
    for i, e in enumerate(events):
        assert _typed(batch.event(i)) == _typed(e["attributes"])
        start, length = decoded.event_id[0][i], decoded.event_id[1][i]
        assert decoded.data[start : start + length].tobytes().decode() == e["event_id"]
        assert decoded.published_at[i] == e["published_at"]
    assert all(batch.event(i) == {} for i in range(30, len(values)))
