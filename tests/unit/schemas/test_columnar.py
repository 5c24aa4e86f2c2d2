"""The columnar fast path (``schemas.columnar``) against the reference decoder and rules.

Soundness: every value it accepts is a good record for ``schemas.rules.classify`` and decodes to
the same fields as ``schemas.codec.decode_wire``. Completeness: it accepts every canonical
encoding of a valid record with ASCII strings (the jobs' telemetry, the subscriptions), so the
fast path is taken.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.codec import codec_for, decode_wire, versions_of
from schemas.columnar import (
    T_BOOLEAN,
    T_DOUBLE,
    T_ENUM,
    T_STRING,
    FlatDecoder,
    _field,
    _rule_supported,
    _when_supported,
    decode_events,
    fields_of,
    supports,
)
from schemas.rules import VALUE_KINDS, Rule, classify, validate
from tests.strategies import records_for, valid_records

FLAT = ("LinkSample", "BrokerSample", "Receipt", "Subscription")


def _ascii(record: dict[str, Any]) -> bool:
    return all(v.isascii() for v in record.values() if isinstance(v, str))


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, float):
        return isinstance(got, float) and (got == want or (math.isnan(got) and math.isnan(want)))
    return got == want and type(got) is type(want)


def _fields(decoder: FlatDecoder, out: Any, row: int) -> dict[str, Any]:
    """Row ``row`` of ``out`` as a Python record (the reference's layout)."""
    rec: dict[str, Any] = {}
    rows = np.array([row])
    for f in decoder.fields:
        if not out.present(f.name)[row]:
            rec[f.name] = None
        elif f.type in (T_STRING, T_ENUM):
            rec[f.name] = out.strings(f.name, rows)[0]
        else:
            value = out.values(f.name)[row]
            rec[f.name] = bool(value) if f.type == T_BOOLEAN else (float(value) if f.type == T_DOUBLE else int(value))
    return rec


def _check_sound(name: str, values: list[bytes | None]) -> Any:
    decoder = FlatDecoder(name)
    out = decoder.decode_values(values)
    for i, raw in enumerate(values):
        if out.accepted[i]:
            assert classify(raw, name) == (None, None), (raw, classify(raw, name))
            _, want = decode_wire(raw, name)
            got = _fields(decoder, out, i)
            assert all(_same(got[k], want[k]) for k in want), (got, want)
    return out


def test_supported_records_are_the_flat_telemetry_and_the_subscriptions() -> None:
    assert {n for n in ("Event", "Subscription", "TopologyElement", "Match", *FLAT) if supports(n)} == set(FLAT)
    with pytest.raises(ValueError, match="not a flat record"):
        FlatDecoder("Event")
    assert fields_of("Receipt") is not None


@pytest.mark.parametrize("name", FLAT)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_valid_ascii_records_are_accepted_with_the_reference_fields(name: str, data: st.DataObject) -> None:
    records = data.draw(st.lists(valid_records(name), min_size=1, max_size=20))
    values: list[bytes | None] = [codec_for(name).encode_wire(r) for r in records]
    out = _check_sound(name, values)
    for record, accepted in zip(records, out.accepted.tolist(), strict=True):
        assert accepted == _ascii(record), record


@pytest.mark.parametrize("name", FLAT)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_any_record_is_accepted_only_when_the_reference_calls_it_good(name: str, data: st.DataObject) -> None:
    schema = codec_for(name).schema
    records = data.draw(st.lists(records_for(schema, allow_nonfinite=True), min_size=1, max_size=20))
    values: list[bytes | None] = [codec_for(name).encode_wire(r) for r in records]
    out = _check_sound(name, values)
    for raw, accepted in zip(values, out.accepted.tolist(), strict=True):
        _, record = decode_wire(raw, name)
        assert accepted == (classify(raw, name) == (None, None) and _ascii(record))


@st.composite
def _damaged(draw: st.DrawFn, name: str) -> bytes | None:
    """An encoding of a valid record, then cut, extended, overwritten or re-framed."""
    raw = codec_for(name).encode_wire(draw(valid_records(name)))
    how = draw(st.sampled_from(("cut", "extend", "flip", "header", "none", "null", "short")))
    if how == "cut":
        return raw[: draw(st.integers(0, len(raw) - 1))]
    if how == "extend":
        return raw + draw(st.binary(min_size=1, max_size=8))
    if how == "flip":
        at = draw(st.integers(0, len(raw) - 1))
        return raw[:at] + bytes([draw(st.integers(0, 255))]) + raw[at + 1 :]
    if how == "header":
        other = draw(st.sampled_from([c.header for n in ("Event", *FLAT) for c in versions_of(n)]))
        return other + raw[10:]
    if how == "null":
        return None
    if how == "short":
        return raw[:2]
    return raw


@pytest.mark.parametrize("name", FLAT)
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_damaged_values_are_never_accepted_wrongly(name: str, data: st.DataObject) -> None:
    _check_sound(name, data.draw(st.lists(_damaged(name), min_size=1, max_size=20)))


def test_hand_made_encodings_are_referred() -> None:
    """Encodings a reader may take but the fast path does not decide: a boolean byte other than
    0 or 1, an over-long varint, a non-ASCII string, a bad union branch."""
    codec = codec_for("LinkSample")
    record = {"from": "b1", "to": "b2", "seq": 3, "sent_at": 10, "delay_ms": 1.5, "lost": False, "event_id": None}
    raw = codec.encode_wire(record)
    decoder = FlatDecoder("LinkSample")
    body = raw[10:]
    # from "b1", to "b2", seq 3, sent_at 10, union 1 + 8-byte double, lost, union 0
    assert body == b"\x04b1\x04b2\x06\x14\x02" + struct.pack("<d", 1.5) + b"\x00\x00"
    lost_at = 10 + len(body) - 2
    bad_bool = raw[:lost_at] + b"\x02" + raw[lost_at + 1 :]
    long_varint = raw[:10] + b"\x04b1\x04b2" + b"\x86\x80\x80\x80\x80\x80\x80\x80\x80\x80\x00" + raw[17:]
    non_ascii = codec.encode_wire(dict(record, to="bé"))
    bad_branch = raw[: lost_at - 9] + b"\x04" + raw[lost_at - 8 :]
    out = decoder.decode_values([raw, bad_bool, long_varint, non_ascii, bad_branch])
    assert out.accepted.tolist() == [True, False, False, False, False]
    assert out.values("delay_ms")[0] == 1.5 and out.values("seq")[0] == 3 and not out.values("lost")[0]


def test_rules_with_a_condition_follow_the_condition() -> None:
    """LinkSample's delay is required only when the message was not lost."""
    codec = codec_for("LinkSample")
    base = {"from": "a", "to": "b", "seq": 1, "sent_at": 1, "event_id": "e"}
    lost = codec.encode_wire(dict(base, delay_ms=None, lost=True))
    kept = codec.encode_wire(dict(base, delay_ms=None, lost=False))
    negative = codec.encode_wire(dict(base, delay_ms=-1.0, lost=False))
    out = FlatDecoder("LinkSample").decode_values([lost, kept, negative])
    assert out.accepted.tolist() == [True, False, False]
    assert [classify(v, "LinkSample")[0] for v in (lost, kept, negative)] == [None, "invalid_value", "invalid_value"]


# ---- events -------------------------------------------------------------------------------------


def _decode_events(values: list[bytes | None]) -> Any:
    lengths = [0 if v is None else len(v) for v in values]
    offsets = np.concatenate(([0], np.cumsum(lengths, dtype=np.int64)))
    data = np.frombuffer(b"".join(v for v in values if v is not None), dtype=np.uint8)
    return decode_events(offsets, data, np.array([v is not None for v in values], dtype=np.bool_))


def _event(out: Any, row: int) -> dict[str, Any]:
    """Row ``row`` of ``decode_events``' answer in the reference's (wire) layout."""
    rec: dict[str, Any] = {}
    for name in ("event_id", "publisher_id"):
        starts, lens = out.string_span(name)
        rec[name] = out.data[starts[row] : starts[row] + lens[row]].tobytes().decode("ascii")
    for name in ("published_at", "lifetime_ms"):
        rec[name] = int(out.longs(name)[row])
    rec["attributes"] = {}
    for kind in VALUE_KINDS:
        rows, names, values = out.attributes(kind)
        picked = np.flatnonzero(rows == row)
        cast = {"longs": int, "doubles": float, "booleans": bool, "strings": str}[kind]
        rec["attributes"][kind] = {names[int(j)].as_py(): cast(values[j]) for j in picked}
    return rec


def _check_events_sound(values: list[bytes | None]) -> Any:
    out = _decode_events(values)
    for i, raw in enumerate(values):
        if out.accepted[i]:
            assert classify(raw, "Event") == (None, None), (raw, classify(raw, "Event"))
            _, want = decode_wire(raw, "Event")
            got = _event(out, i)
            assert got == want and all(
                _same(got["attributes"][k][a], v) for k, m in want["attributes"].items() for a, v in m.items()
            ), (got, want)
    rows = out.entries[0]
    assert np.all(out.accepted[rows]) and np.all(np.diff(rows) >= 0)  # entries: accepted rows, in order
    return out


def _ascii_event(record: dict[str, Any]) -> bool:
    strings = [record["event_id"], record["publisher_id"]]
    for m in record["attributes"].values():
        strings += list(m)
    strings += list(record["attributes"]["strings"].values())
    return all(s.isascii() for s in strings)


@settings(max_examples=80, deadline=None)
@given(records=st.lists(valid_records("Event"), min_size=1, max_size=20))
def test_valid_ascii_events_are_accepted_with_the_reference_fields(records: list[dict[str, Any]]) -> None:
    values: list[bytes | None] = [codec_for("Event").encode_wire(r) for r in records]
    out = _check_events_sound(values)
    for record, accepted in zip(records, out.accepted.tolist(), strict=True):
        assert accepted == _ascii_event(record), record


@settings(max_examples=80, deadline=None)
@given(records=st.lists(records_for(codec_for("Event").schema, allow_nonfinite=True), min_size=1, max_size=20))
def test_any_event_is_accepted_only_when_the_reference_calls_it_good(records: list[dict[str, Any]]) -> None:
    values: list[bytes | None] = [codec_for("Event").encode_wire(r) for r in records]
    out = _check_events_sound(values)
    for raw, record, accepted in zip(values, records, out.accepted.tolist(), strict=True):
        assert accepted == (classify(raw, "Event") == (None, None) and _ascii_event(record))


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_damaged_events_are_never_accepted_wrongly(data: st.DataObject) -> None:
    _check_events_sound(data.draw(st.lists(_damaged("Event"), min_size=1, max_size=20)))


def test_hand_made_event_encodings() -> None:
    """A map in a block with its byte size (a negative count: valid Avro, accepted), a name twice in
    one map or across two, a name the rules refuse, trailing bytes, NaN and infinite doubles (all
    referred), and a large finite double (accepted)."""
    codec = codec_for("Event")
    head = {"event_id": "e", "publisher_id": "p", "published_at": 7, "lifetime_ms": 0}
    raw = codec.encode_wire({**head, "attributes": {"longs": {"x": 1}, "doubles": {}, "strings": {}, "booleans": {}}})
    header, body = raw[:10], raw[10:]
    fixed = b"\x02e\x02p\x0e\x00"  # event_id, publisher_id, published_at 7, lifetime_ms 0
    assert body == fixed + b"\x02\x02x\x02\x00" + b"\x00\x00\x00"
    sized = header + fixed + b"\x01\x06\x02x\x02" + b"\x00" + b"\x00\x00\x00"  # one entry, 3 bytes
    twice = header + fixed + b"\x04\x02x\x02\x02x\x04\x00" + b"\x00\x00\x00"
    across = header + fixed + b"\x02\x02x\x02\x00" + b"\x00" + b"\x02\x02x\x02y\x00" + b"\x00"
    bad_name = header + fixed + b"\x02\x041a\x02\x00" + b"\x00\x00\x00"
    trailing = raw + b"\x00"
    doubles = [
        codec.encode_wire({**head, "attributes": {"longs": {}, "doubles": {"p": v}, "strings": {}, "booleans": {}}})
        for v in (float("nan"), float("inf"), -float("inf"), 1e308)
    ]
    out = _check_events_sound([raw, sized, twice, across, bad_name, trailing, *doubles])
    assert out.accepted.tolist() == [True, True, False, False, False, False, False, False, False, True]
    assert {classify(v, "Event")[0] for v in doubles[:3]} == {"invalid_value"}
    assert decode_wire(sized, "Event")[1]["attributes"]["longs"] == {"x": 1} and _event(out, 1)["attributes"][
        "longs"
    ] == {"x": 1}
    assert [classify(v, "Event")[0] for v in (across, bad_name)] == ["invalid_value", "invalid_value"]


def test_many_attributes_grow_the_entry_room() -> None:
    codec = codec_for("Event")
    wide = {f"a{i}": i for i in range(300)}
    values: list[bytes | None] = [
        codec.encode(
            {"event_id": f"e{i}", "publisher_id": "p", "published_at": i, "lifetime_ms": 1, "attributes": wide}
        )
        for i in range(5)
    ]
    out = _check_events_sound(values)
    assert out.accepted.all() and out.entries.shape[1] == 1500


# ---- subscriptions: an enum, a condition on it, a pair rule -------------------------------------

_WORDS = st.text(alphabet="abcxyz_0 >=", min_size=1, max_size=8)
_IDS = st.one_of(_WORDS, _WORDS, st.just(""), st.text(max_size=4))  # mostly good, some empty or non-ASCII
_TEXTS = st.one_of(st.none(), _IDS, st.text(alphabet="abc >=1", min_size=300, max_size=320))


@st.composite
def _subscriptions(draw: st.DrawFn) -> dict[str, Any]:
    """A Subscription in every case its rules tell apart: either op, a filter, a composite, both or
    neither, a subscriber or none, empty and non-ASCII texts, bounds kept or broken."""
    return {
        "type": draw(st.sampled_from(("subscribe", "unsubscribe"))),
        "subscription_id": draw(_IDS),
        "subscriber_id": draw(_TEXTS),
        "broker": draw(st.one_of(st.none(), _IDS)),
        "filter": draw(_TEXTS),
        "composite": draw(_TEXTS),
        "deadline_ms": draw(
            st.one_of(st.none(), st.integers(0, 10**6), st.integers(-2, 2), st.integers(-(2**63), 2**63 - 1))
        ),
        "min_reliability": draw(
            st.one_of(st.none(), st.floats(0, 1), st.sampled_from((0.0, 1.0, -0.0)), st.floats(-0.5, 1.5), st.floats())
        ),
        "issued_at": draw(st.integers(-(2**63), 2**63 - 1)),
    }


@st.composite
def _good_subscriptions(draw: st.DrawFn) -> dict[str, Any]:
    """A valid Subscription with ASCII texts (one the fast path accepts)."""
    text = draw(_WORDS)
    return {
        "type": draw(st.sampled_from(("subscribe", "unsubscribe"))),
        "subscription_id": draw(_WORDS),
        "subscriber_id": draw(_WORDS),
        "broker": None,
        "filter": text if draw(st.booleans()) else None,
        "composite": None,
        "deadline_ms": draw(st.none() | st.integers(0, 10**6)),
        "min_reliability": draw(st.none() | st.floats(0, 1)),
        "issued_at": draw(st.integers(-(2**63), 2**63 - 1)),
    }


@st.composite
def _subscription_values(draw: st.DrawFn) -> bytes:
    """An encoded Subscription, maybe with another enum index (zig-zag varint, any int) or cut."""
    record = draw(_subscriptions() | _good_subscriptions())
    if record["filter"] is None and record["composite"] is None and record["type"] == "subscribe":
        record["composite"] = "{}"
    raw = codec_for("Subscription").encode_wire(record)
    how = draw(st.sampled_from(("keep", "index", "index", "cut")))
    if how == "index":
        index = draw(st.sampled_from((-2, -1, 2, 3, 64)) | st.integers(-(2**31), 2**31 - 1))
        zigzag = (index << 1) ^ (index >> 63)
        varint = bytearray()
        while zigzag >= 0x80:
            varint.append(zigzag & 0x7F | 0x80)
            zigzag >>= 7
        varint.append(zigzag)
        return raw[:10] + bytes(varint) + raw[11:]
    if how == "cut":
        return raw[: draw(st.integers(0, len(raw) - 1))]
    return raw


@settings(max_examples=100, deadline=None)
@given(records=st.lists(_subscriptions(), min_size=1, max_size=20))
def test_subscriptions_are_accepted_exactly_when_valid_and_ascii(records: list[dict[str, Any]]) -> None:
    values: list[bytes | None] = [codec_for("Subscription").encode_wire(r) for r in records]
    out = _check_sound("Subscription", values)
    for record, accepted in zip(records, out.accepted.tolist(), strict=True):
        assert accepted == (not validate("Subscription", record) and _ascii(record)), record


@settings(max_examples=100, deadline=None)
@given(values=st.lists(_subscription_values(), min_size=1, max_size=20))
def test_subscriptions_with_bad_indices_or_cut_are_never_accepted_wrongly(values: list[bytes | None]) -> None:
    out = _check_sound("Subscription", values)
    for raw, accepted in zip(values, out.accepted.tolist(), strict=True):
        assert raw is not None
        if len(raw) <= 10 or raw[10] not in (0, 2):
            assert not accepted  # an index other than 0 or 1 is referred, whatever the reference says


def test_hand_made_subscriptions() -> None:
    """The pair rule and the condition on the enum, case by case, against ``classify``."""
    codec = codec_for("Subscription")
    base = {"subscription_id": "s1", "subscriber_id": "u1", "filter": None, "composite": None, "issued_at": 1}
    cases = [
        ({"type": "unsubscribe", "subscriber_id": None}, True),  # neither, no subscriber: fine
        ({"type": "unsubscribe", "filter": "x > 1", "composite": "{}"}, True),  # both: the pair needs a subscribe
        ({"type": "subscribe", "filter": "x > 1"}, True),
        ({"type": "subscribe", "composite": '{"op": "and"}'}, True),
        ({"type": "subscribe", "filter": "x > 1", "composite": "{}"}, False),  # both
        ({"type": "subscribe"}, False),  # neither
        ({"type": "subscribe", "filter": "x > 1", "subscriber_id": None}, False),  # no subscriber
        ({"type": "subscribe", "filter": "x > 1", "subscriber_id": ""}, False),
        ({"type": "subscribe", "filter": ""}, False),
        ({"type": "subscribe", "filter": "x > 'é'"}, None),  # non-ASCII: valid, referred
        ({"type": "subscribe", "filter": "x > 1", "min_reliability": 1.5}, False),
        ({"type": "subscribe", "filter": "x > 1", "min_reliability": float("nan")}, False),
        ({"type": "subscribe", "filter": "x > 1", "min_reliability": 1.0, "deadline_ms": 0}, True),
        ({"type": "subscribe", "filter": "x > 1", "deadline_ms": -1}, False),
    ]
    values: list[bytes | None] = [codec.encode({**base, **c}) for c, _ in cases]
    raw = values[2]
    assert raw is not None and raw[10] == 0  # the enum index comes first: 0, subscribe
    values += [raw[:10] + b"\x04" + raw[11:], raw[:10] + b"\x01" + raw[11:], raw[:-1], None]
    out = _check_sound("Subscription", values)
    verdicts = [classify(v, "Subscription")[0] for v in values]
    want_fast = [ok is True for _, ok in cases] + [False] * 4
    assert out.accepted.tolist() == want_fast
    assert verdicts[: len(cases)] == [None if ok is not False else "invalid_value" for _, ok in cases]
    assert verdicts[len(cases) :] == ["malformed_body", None, "malformed_body", "bad_framing"]  # index -1: fastavro's
    assert out.values("type")[:3].tolist() == [1, 1, 0] and out.symbols("type") == ("subscribe", "unsubscribe")
    assert out.arrow("type", np.array([0, 2]), pa.string()).to_pylist() == ["unsubscribe", "subscribe"]
    assert out.strings("type", np.array([3])) == ["subscribe"]


def test_enum_shapes_and_conditions_the_fast_path_refuses() -> None:
    """An enum only where it is defined, nullable or not; a condition on an enum only with one of
    its symbols; rules on an enum only about its presence."""
    enum = {"type": "enum", "name": "Op", "symbols": ["a", "b"]}
    assert _field({"name": "t", "type": enum}) is not None
    nullable = _field({"name": "t", "type": ["null", enum]})
    assert nullable is not None and nullable.null_branch == 0 and nullable.symbols == ("a", "b")
    assert _field({"name": "t", "type": "Op"}) is None  # a reference to a named type
    assert _field({"name": "t", "type": ["null", "string", enum]}) is None
    fields = {f.name: f for f in (_field({"name": "t", "type": enum}), _field({"name": "s", "type": "string"})) if f}
    assert _when_supported(("t", "b"), fields)
    assert not _when_supported(("t", "c"), fields) and not _when_supported(("t", 1), fields)
    assert not _when_supported(("s", "b"), fields)
    assert _rule_supported(Rule("s", "required", when=("t", "a")), fields)
    assert _rule_supported(Rule("t", "required"), fields) and not _rule_supported(Rule("t", "non_empty"), fields)
