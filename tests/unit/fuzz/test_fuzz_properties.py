"""Property tests of the fuzz targets' contracts (docs/guide/fuzzing.md) with Hypothesis inputs:
random bytes and mutated valid encodings to the Avro decoder and the telemetry checkers, random
text and mutated valid filters to ``parse_filter``/``validate_filter``, mutated valid composite
trees to ``parse_composite``, mutated valid documents to the offline commands' readers. Each
target raises only its documented error and round-trips what it accepts."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from routing.matching.language import parse_filter
from schemas.codec import codec_for, decode, decode_wire
from schemas.columnar import FlatDecoder
from schemas.rules import classify
from tests.fuzz.targets import TARGETS, mutate_json
from tests.strategies import composite_docs, filters, placement_docs, valid_records

RECORDS = ("Event", "Receipt", "LinkSample", "BrokerSample", "Subscription", "Match")


@st.composite
def mutated(draw: st.DrawFn, raw: bytes) -> bytes:
    """``raw`` with a few bytes overwritten, inserted or cut (positions drawn)."""
    data = bytearray(raw)
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(data)))
        how = draw(st.sampled_from(("set", "insert", "cut")))
        if how == "set" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif how == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
        else:
            del data[at:]
    return bytes(data)


def encodings(name: str) -> st.SearchStrategy[bytes]:
    return valid_records(name).map(codec_for(name).encode_wire)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_avro_random_bytes(raw: bytes) -> None:
    TARGETS["avro"][0](raw)
    TARGETS["avro"][0](codec_for("Event").header + raw)  # a known header, a random body


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(RECORDS).flatmap(lambda n: encodings(n).flatmap(mutated)))
def test_avro_mutated_encodings(raw: bytes) -> None:
    TARGETS["avro"][0](raw)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(RECORDS).flatmap(lambda n: st.tuples(st.just(n), valid_records(n))))
def test_valid_records_round_trip(named: tuple[str, dict[str, Any]]) -> None:
    name, record = named
    raw = codec_for(name).encode_wire(record)
    assert decode_wire(raw, name) == (name, record)
    assert decode(codec_for(name).encode(decode(raw)[1]), name) == decode(raw, name)
    assert classify(raw, name) == (None, None)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(("LinkSample", "BrokerSample")).flatmap(lambda n: encodings(n).flatmap(mutated)))
def test_telemetry_mutated(raw: bytes) -> None:
    TARGETS["telemetry"][0](raw)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(("LinkSample", "BrokerSample")).flatmap(lambda n: st.tuples(st.just(n), encodings(n))))
def test_valid_telemetry_is_accepted_by_the_fast_path(named: tuple[str, bytes]) -> None:
    name, raw = named
    # every valid record with ASCII texts is the fast path's; the rest it refers to the JVM path
    texts = [v for v in decode_wire(raw, name)[1].values() if isinstance(v, str)]
    assert FlatDecoder(name).decode_values([raw]).accepted[0] or not all(t.isascii() for t in texts)
    TARGETS["telemetry"][0](raw)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_filter_random_text(text: str) -> None:
    TARGETS["filter"][0](text.encode("utf-8", "surrogatepass"))


@settings(max_examples=300, deadline=None)
@given(filters().flatmap(lambda f: st.tuples(st.just(f), mutated(str(f).encode()))))
def test_filter_valid_and_mutated(pair: Any) -> None:
    f, raw = pair
    assert parse_filter(str(f)) == f  # a valid filter round-trips through its text
    TARGETS["filter"][0](raw)


@settings(max_examples=200, deadline=None)
@given(composite_docs(), st.binary(max_size=8))
def test_composite_mutated(doc: dict[str, Any], script: bytes) -> None:
    TARGETS["composite"][0](json.dumps(doc).encode())
    TARGETS["composite"][0](json.dumps(mutate_json(doc, script)).encode())


@settings(max_examples=100, deadline=None)
@given(placement_docs(), st.binary(max_size=8))
def test_placement_reader_mutated(doc: dict[str, Any], script: bytes) -> None:
    TARGETS["placement-instance"][0](json.dumps(mutate_json(doc, script)).encode())


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(("plan-instance", "channels-instance", "qos-system", "plan-document")), st.binary(max_size=12))
def test_instance_readers_mutated(name: str, script: bytes) -> None:
    check, seeds = TARGETS[name]
    doc = json.loads(seeds()[0])
    check(json.dumps(mutate_json(doc, script), allow_nan=True).encode())
