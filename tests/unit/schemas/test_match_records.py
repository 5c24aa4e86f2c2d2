"""The matching workers' output writer (``schemas.match_records``): for any batch, every good row's
``Match`` value is what ``schemas.codec`` writes for it (ids in plain string order, as an oracle
index finds them) and every bad row's dead letter is the validation job's (docs/conventions.md §6)."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from routing.matching.index import BruteForceIndex, EventBatch, MatchIndex
from schemas import match_records
from schemas.codec import codec_for, decode
from schemas.event_records import decode_rows
from schemas.fastenc import zigzag
from schemas.match_records import OUTPUT_NAMES, Targets, match_values, output_batches
from tests.strategies import INDEX_IDS, index_filters, wire_events

INPUT_COLUMNS = ("key", "value", "partition", "offset", "timestamp")  # the events topic's Kafka rows
TARGETS = Targets("events", "matches", "dead")


def _record_batch(rows: list[dict[str, Any] | None]) -> pa.RecordBatch:
    """Kafka rows of the events topic as the job hands them to ``mapInArrow`` (None: a value that
    does not decode)."""
    n = len(rows)
    ts = pa.array([datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)] * n, type=pa.timestamp("us", tz="UTC"))
    codec = codec_for("Event")
    cols: dict[str, pa.Array] = {
        "key": pa.array([r["publisher_id"].encode() if r else b"k" for r in rows], type=pa.binary()),
        "value": pa.array([codec.encode(r) if r else b"\x00" for r in rows], type=pa.binary()),
        "partition": pa.array([0] * n, type=pa.int32()),
        "offset": pa.array(range(n), type=pa.int64()),
        "timestamp": ts,
    }
    return pa.RecordBatch.from_pydict({name: cols[name] for name in INPUT_COLUMNS})


def _kafka_rows(index: MatchIndex | BruteForceIndex, rb: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
    """Decode -> match -> encode, as the matching job's workers do."""
    events = decode_rows(rb.column("value"))
    matches = index.match(EventBatch.from_columns(rb.num_rows, events.columns()))
    data, row_off = match_values(events, *matches.sorted_ranks())
    return output_batches(rb, events, data, row_off, TARGETS)


def _written(out: list[pa.RecordBatch]) -> list[tuple[str, bytes, bytes]]:
    """The Kafka rows returned: (topic, key, value)."""
    assert all(rb.schema.names == ["topic", "key", "value"] == OUTPUT_NAMES for rb in out)
    return [
        row for rb in out for row in zip(*(rb.column(c).to_pylist() for c in ("topic", "key", "value")), strict=True)
    ]


def _expected_rows(
    rows: list[dict[str, Any] | None], ids: list[list[str]], offsets: list[int]
) -> list[tuple[str, bytes, bytes | None]]:
    """A ``Match`` keyed by event id for each good row; for each bad one (None) a dead letter keyed
    by its coordinates (its value is checked apart)."""
    return [
        ("matches", r["event_id"].encode(), _match_bytes(r, e)) if r else ("dead", f"events/0/{o}".encode(), None)
        for r, e, o in zip(rows, ids, offsets, strict=True)
    ]


def _match_bytes(event: dict[str, Any], ids: list[str]) -> bytes:
    """What ``schemas.codec`` writes for the event's ``Match`` record."""
    fields = {k: event[k] for k in ("event_id", "publisher_id", "published_at")}
    return codec_for("Match").encode({**fields, "subscription_ids": ids})


@pytest.mark.parametrize("kind", ["match", "brute-force"])
def test_match_values_of_sliced_batches_in_chunks(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Many ids per event (multi-byte length varints, a non-ASCII id, counts past 63), events
    that match nothing, rejected rows, a sliced input batch (Arrow offsets not at 0), and an
    output split into pieces when the records would overflow a binary column (made small here)."""
    filters = {f"s{i:03d}" + "x" * (i % 150): f"x > {i % 97}" for i in range(300)} | {"é": "x = 5"}
    index = MatchIndex() if kind == "match" else BruteForceIndex()
    for sid, text in filters.items():
        index.add(sid, text)
    rows: list[dict[str, Any] | None] = [
        None if i % 7 == 3 else
        {"event_id": f"e{i}" * (i % 40 + 1), "publisher_id": "pub", "published_at": 10**12 + i * (-1) ** i,
         "lifetime_ms": 0, "attributes": {"x": i * 3 % 120}}
        for i in range(40)
    ]  # fmt: skip
    batch = _record_batch([None, *rows, None]).slice(1, len(rows))
    monkeypatch.setattr(match_records, "_MAX_CHUNK_BYTES", 40_000)
    out = list(_kafka_rows(index, batch))
    assert len(out) > 2  # split
    assert all(rb.column("value").nbytes < 45_000 for rb in out)
    oracle = BruteForceIndex()
    for sid, text in filters.items():
        oracle.add(sid, text)
    expected = oracle.match([r["attributes"] if r else {} for r in rows]).all_ids()
    got = _written(out)
    offsets = list(range(1, len(rows) + 1))
    assert [(t, k, v if t == "matches" else None) for t, k, v in got] == _expected_rows(rows, expected, offsets)
    assert any(len(e) > 64 for e in expected) and any(not e for e, r in zip(expected, rows, strict=True) if r)
    assert all(decode(v, "DeadLetter")[1]["value"] == b"\x00" for t, _, v in got if t == "dead")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    subs=st.dictionaries(st.sampled_from(INDEX_IDS), index_filters().map(str), max_size=12),
    events=wire_events(),
    rejected=st.lists(st.booleans(), max_size=12),
)
def test_every_row_is_the_codecs_match_or_the_validation_jobs_dead_letter(
    subs: dict[str, str], events: list[dict[str, Any]], rejected: list[bool]
) -> None:
    rows = [None if i < len(rejected) and rejected[i] else e for i, e in enumerate(events)]
    index, oracle = MatchIndex(), BruteForceIndex()
    for sid, text in subs.items():
        index.add(sid, text)
        oracle.add(sid, text)
    got = _written(list(_kafka_rows(index, _record_batch(rows))))
    expected = oracle.match([r["attributes"] if r else {} for r in rows]).all_ids()
    offsets = list(range(len(rows)))
    assert [(t, k, v if t == "matches" else None) for t, k, v in got] == _expected_rows(rows, expected, offsets)
    for (t, _, v), o in zip(got, offsets, strict=True):
        if t == "dead":
            letter = decode(v, "DeadLetter")[1]
            assert (letter["error_code"], letter["source_offset"]) == ("bad_framing", o)
            assert letter["source_topic"] == "events"


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 300), min_size=1, max_size=40),
    st.lists(st.tuples(st.integers(0, 39), st.integers(0, 2)), min_size=1, max_size=80, unique=True),
    st.integers(1, 2000),
)
def test_channel_records_split_by_size_keep_every_event_in_order(
    pads: list[int], pairs: list[tuple[int, int]], max_bytes: int
) -> None:
    """Split or not, a channel's records hold its events once each, in row order, each record keyed by
    its first event; a record of more than one event stays within ``max_bytes`` of events."""
    evs = [
        {"event_id": f"e{i}", "publisher_id": "p", "published_at": 5, "lifetime_ms": 0, "attributes": {"s": "x" * pad}}
        for i, pad in enumerate(pads)
    ]
    values = [codec_for("Event").encode(e) for e in evs]
    rb = pa.RecordBatch.from_arrays([pa.array(values, pa.binary())], ["value"])
    events = decode_rows(rb.column("value"))
    pairs = [(r, c) for r, c in pairs if r < len(evs)] or [(0, 0)]
    rows = np.array([r for r, _ in pairs], dtype=np.int64)
    chans = np.array([c for _, c in pairs], dtype=np.int64)
    out = match_records.delivery_batch(rb, events, rows, chans, ["c0", "c1", "c2"], max_bytes=max_bytes)
    got: dict[str, list[str]] = {}
    for topic, key, value in zip(*(out.column(n).to_pylist() for n in OUTPUT_NAMES), strict=True):
        inner = decode(value, "ChannelEvents")[1]["events"]
        ids = [decode(v, "Event")[1]["event_id"] for v in inner]
        assert key == ids[0].encode()
        if len(inner) > 1:
            assert sum(len(v) + len(zigzag(len(v))) for v in inner) <= max_bytes
        got.setdefault(topic, []).extend(ids)
    want = {f"c{c}": [f"e{r}" for r in sorted(r for r, cc in pairs if cc == c)] for c in set(chans.tolist())}
    assert got == want


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), st.lists(st.integers(0, 29), max_size=12)), max_size=30),
    st.lists(st.integers(0, 99), min_size=30, max_size=30),
    st.sampled_from([1, 2, 32, 64, 65, 100]),
)
def test_delivery_pairs_equal_the_set_oracle(rows: list[tuple[bool, list[int]]], channels: list[int], k: int) -> None:
    """Each good row's channels once, channel-major, for K up to 64 (bit masks) and beyond (the
    scatter), with empty rows, repeated ranks and rows that are not good."""
    good = np.array([g for g, _ in rows], dtype=bool)
    offsets = np.concatenate([[0], np.cumsum([len(r) for _, r in rows])]).astype(np.int64)
    ranks = np.array([r for _, rs in rows for r in sorted(rs)], dtype=np.int64)
    channel_by_rank = np.array([c % k for c in channels], dtype=np.int64)
    got = match_records.delivery_pairs(good, offsets, ranks, channel_by_rank)
    want = match_records.delivery_pairs_by_sets(good, offsets, ranks, channel_by_rank)
    assert [a.tolist() for a in got] == [a.tolist() for a in want]
    assert all(a.dtype == np.int64 for a in got)
