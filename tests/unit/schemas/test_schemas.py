"""Schemas, codec, rules, topics and schema evolution: fast checks, no Kafka, no Spark."""

from __future__ import annotations

import io
import json
import math
import shutil
import struct
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.codec import (
    MAGIC,
    Codec,
    DecodeError,
    codec_for,
    crc64_avro,
    decode,
    decode_wire,
    make_codec,
    schema_files,
    versions_of,
)
from schemas.compat import check_backward
from schemas.rules import ATTRIBUTE_NAME, EXACTLY_ONE, RULES, Rule, validate
from schemas.topics import TOPICS, channel_spec
from tests.strategies import records_for, valid_records

ROOT = Path(__file__).resolve().parents[3]
SCHEMA_DIR = ROOT / "schemas"
NAMES = sorted(schema_files())
SCHEMA_FILES = sorted(p.name for p in SCHEMA_DIR.glob("*.avsc"))
HISTORY_FILES = sorted(p.name for p in (SCHEMA_DIR / "history").glob("*.avsc"))
DOCUMENTED_TOPICS = [  # docs/reference/topics.md §2
    "siftstream.events.v1",
    "siftstream.subscriptions.v1",
    "siftstream.telemetry.links.v1",
    "siftstream.telemetry.brokers.v1",
    "siftstream.topology.v1",
    "siftstream.receipts.v1",
    "siftstream.matches.v1",
    "siftstream.routes.v1",
    "siftstream.placements.v1",
    "siftstream.composites.v1",
    "siftstream.channels.v1",
    "siftstream.qos.v1",
    "siftstream.deadletter.v1",
]
PROPERTY = settings(max_examples=50, deadline=None)


def _same(a: Any, b: Any) -> bool:
    """Equality that also tells bool from int, int from float, -0.0 from 0.0, and NaN equals NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or struct.pack("<d", a) == struct.pack("<d", b)
    return bool(a == b)


def _records(schema: Any) -> Iterator[dict[str, Any]]:
    """Every record definition in ``schema``, nested ones included."""
    if isinstance(schema, list):
        for branch in schema:
            yield from _records(branch)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind == "record":
            yield schema
            for field in schema["fields"]:
                yield from _records(field["type"])
        elif kind == "array":
            yield from _records(schema["items"])
        elif kind == "map":
            yield from _records(schema["values"])
        elif isinstance(kind, (dict, list)):
            yield from _records(kind)


@cache
def _strategy(name: str, allow_nonfinite: bool = False) -> st.SearchStrategy[dict[str, Any]]:
    return records_for(codec_for(name).schema, allow_nonfinite=allow_nonfinite)


# --- schema files and topics -------------------------------------------------------------------


@pytest.mark.parametrize("file", SCHEMA_FILES + [f"history/{f}" for f in HISTORY_FILES])
def test_schema_file_parses_and_documents_every_field(file: str) -> None:
    schema = json.loads((SCHEMA_DIR / file).read_text())
    fastavro.parse_schema(schema)
    assert schema["type"] == "record" and str(schema.get("doc", "")).strip(), f"{file}: the record needs a doc"
    undocumented = [
        f"{record['name']}.{field['name']}"
        for record in _records(schema)
        for field in record["fields"]
        if not (isinstance(field.get("doc"), str) and field["doc"].strip())
    ]
    assert undocumented == [], f"{file}: fields without a doc"
    assert all(str(r.get("doc", "")).strip() for r in _records(schema)), f"{file}: a nested record lacks a doc"


def test_one_schema_file_per_record_name() -> None:
    assert sorted(schema_files().values()) == SCHEMA_FILES, "two schema files declare the same record name"


def test_topics_are_exactly_those_of_design() -> None:
    assert len(DOCUMENTED_TOPICS) == 13
    assert sorted(TOPICS) == sorted(DOCUMENTED_TOPICS)
    for name, spec in TOPICS.items():
        assert spec.name == name
        assert spec.schema in schema_files(), f"{name}: no schema file for {spec.schema}"
        assert spec.role in ("input", "output")
    # one schema per topic; ChannelMarker and ChannelEvents ride in the channel topics
    assert sorted(spec.schema for spec in TOPICS.values()) == [
        n for n in NAMES if n not in ("ChannelMarker", "ChannelEvents")
    ]
    assert channel_spec(0).schema == "Event" and channel_spec(0).partitions == 1
    compacted = {name for name, spec in TOPICS.items() if spec.compacted}
    assert {"siftstream.subscriptions.v1", "siftstream.topology.v1"} <= compacted
    for name in compacted:
        assert TOPICS[name].config()["cleanup.policy"] == "compact"


# --- codec: round trips, byte identity with fastavro, fingerprints, errors ---------------------


@pytest.mark.parametrize("name", NAMES)
@PROPERTY
@given(data=st.data())
def test_round_trip_and_compiled_encoder_matches_fastavro(name: str, data: st.DataObject) -> None:
    codec = codec_for(name)
    record = data.draw(_strategy(name), label="record")
    raw = codec.encode_wire(record)
    assert raw == codec.encode_reference(record)
    assert raw[:10] == codec.header
    decoded_name, decoded = decode_wire(raw, expected=name)
    assert decoded_name == name
    assert _same(decoded, record)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_non_finite_doubles_encode_like_fastavro(name: str, data: st.DataObject) -> None:
    codec = codec_for(name)
    record = data.draw(_strategy(name, allow_nonfinite=True), label="record")
    raw = codec.encode_wire(record)
    assert raw == codec.encode_reference(record)
    assert _same(decode_wire(raw)[1], record)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_valid_records_stay_valid_over_the_wire(name: str, data: st.DataObject) -> None:
    record = data.draw(valid_records(name), label="record")
    assert validate(name, record) == []
    assert validate(name, decode_wire(codec_for(name).encode_wire(record))[1]) == []


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_every_truncated_body_is_malformed(name: str, data: st.DataObject) -> None:
    raw = codec_for(name).encode_wire(data.draw(_strategy(name), label="record"))
    for end in range(10, len(raw)):
        with pytest.raises(DecodeError) as caught:
            decode_wire(raw[:end])
        assert caught.value.code == "malformed_body", end


@pytest.mark.parametrize("name", NAMES)
def test_fingerprint_agrees_with_fastavro(name: str) -> None:
    codec = codec_for(name)
    canonical = fastavro.schema.to_parsing_canonical_form(fastavro.parse_schema(codec.schema))
    assert fastavro.schema.fingerprint(canonical, "CRC-64-AVRO") == codec.header[2:].hex()
    assert codec.fingerprint == crc64_avro(canonical.encode())
    assert codec.header[:2] == MAGIC


@settings(max_examples=100, deadline=None)
@given(text=st.text())
def test_crc64_avro_agrees_with_fastavro_on_any_text(text: str) -> None:
    assert fastavro.schema.fingerprint(text, "CRC-64-AVRO") == crc64_avro(text.encode()).to_bytes(8, "little").hex()


def test_fingerprints_are_distinct() -> None:
    headers = [version.header for name in NAMES for version in versions_of(name)]
    assert len(set(headers)) == len(headers)


RECEIPT = {"subscriber_id": "u1", "event_id": "e1", "received_at": 5}


@pytest.mark.parametrize(
    "raw",
    [None, b"", b"\xc3", b"\xc3\x01\x00", b"plain text, not framed", b"\x00\x01" + bytes(12), b'{"event_id": "e1"}'],
    ids=["none", "empty", "half-magic", "short-header", "text", "wrong-magic", "json"],
)
def test_unframed_values_are_bad_framing(raw: bytes | None) -> None:
    with pytest.raises(DecodeError) as caught:
        decode_wire(raw)
    assert caught.value.code == "bad_framing"


def test_unknown_fingerprint_is_unknown_schema() -> None:
    body = codec_for("Receipt").encode_wire(RECEIPT)[10:]
    with pytest.raises(DecodeError) as caught:
        decode_wire(MAGIC + bytes(8) + body)
    assert caught.value.code == "unknown_schema"


def test_another_topics_schema_is_unknown_schema() -> None:
    raw = codec_for("Receipt").encode_wire(RECEIPT)
    assert decode_wire(raw, expected="Receipt") == ("Receipt", RECEIPT)
    with pytest.raises(DecodeError) as caught:
        decode_wire(raw, expected="Event")
    assert caught.value.code == "unknown_schema"


@pytest.mark.parametrize("cut", [1, 3, 7])
def test_truncated_body_is_malformed_body(cut: int) -> None:
    raw = codec_for("Receipt").encode_wire(RECEIPT)
    with pytest.raises(DecodeError) as caught:
        decode_wire(raw[:-cut], expected="Receipt")
    assert caught.value.code == "malformed_body"


def test_garbage_body_is_malformed_body() -> None:
    with pytest.raises(DecodeError) as caught:
        decode_wire(codec_for("Receipt").header + b"\xff" * 5)
    assert caught.value.code == "malformed_body"


def test_encode_rejects_a_record_that_does_not_fit() -> None:
    with pytest.raises(ValueError, match="Receipt"):
        codec_for("Receipt").encode_wire({"subscriber_id": "u1", "event_id": "e1"})
    with pytest.raises(ValueError, match="Receipt"):
        codec_for("Receipt").encode_wire({**RECEIPT, "received_at": "soon"})


NAMED_REUSE = {
    "type": "record",
    "name": "R",
    "namespace": "ns",
    "fields": [
        {"name": "a", "type": {"type": "record", "name": "P", "fields": [{"name": "x", "type": "int"}]}},
        {"name": "b", "type": ["null", "P"]},
        {"name": "c", "type": {"type": "array", "items": "ns.P"}},
        {"name": "d", "type": {"type": "enum", "name": "E", "symbols": ["x", "y"]}},
        {"name": "e", "type": {"type": "map", "values": "ns.E"}},
    ],
}


@settings(max_examples=50, deadline=None)
@given(record=records_for(NAMED_REUSE, allow_nonfinite=True))
def test_compiled_encoder_handles_named_types_referenced_again(record: dict[str, Any]) -> None:
    codec = make_codec(NAMED_REUSE)
    assert codec.encode_wire(record) == codec.encode_reference(record)
    assert _same(decode_with(codec, codec.encode_wire(record)), record)


def decode_with(codec: Codec, raw: bytes) -> dict[str, Any]:
    assert raw[:10] == codec.header
    return codec.decode_body(raw[10:])


def test_compiled_encoder_refuses_recursive_records() -> None:
    with pytest.raises(ValueError, match="recursive"):
        make_codec({"type": "record", "name": "L", "fields": [{"name": "next", "type": ["null", "L"]}]})


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 2**70])
def test_longs_beyond_int64_do_not_encode(value: int) -> None:
    with pytest.raises(ValueError, match="Receipt"):
        codec_for("Receipt").encode_wire({**RECEIPT, "received_at": value})


# --- rules -------------------------------------------------------------------------------------

NAN, INF = math.nan, math.inf
RULE_CASES = [  # (rule, a record that violates it, a record that passes)
    (Rule("x", "non_empty"), {"x": ""}, {"x": "a"}),
    (Rule("x", "finite"), {"x": NAN}, {"x": -1.5}),
    (Rule("x", "finite"), {"x": -INF}, {"x": 0}),
    (Rule("x", "min", 0), {"x": -1}, {"x": 0}),
    (Rule("x", "min", 0), {"x": NAN}, {"x": 0.0}),
    (Rule("x", "max", 1), {"x": 1.5}, {"x": 1}),
    (Rule("x", "gt", 0), {"x": 0.0}, {"x": 1e-9}),
    (Rule("x", "required"), {"x": None}, {"x": 0}),
    (Rule("x", "absent"), {"x": "set"}, {"x": None}),
    (Rule("x", "finite_map_values"), {"x": {"a": 1.0, "b": INF}}, {"x": {"a": 1.0, "b": "s", "c": True, "d": 2}}),
    (Rule("x", "map_keys_match", pattern=ATTRIBUTE_NAME), {"x": {"1a": 1}}, {"x": {"a.b_1": 1, "_": 2}}),
    (Rule("x", "map_keys_match", pattern=ATTRIBUTE_NAME), {"x": {"a\n": 1}}, {"x": {}}),
    (Rule("x", "min", 0, when=("k", "on")), {"k": "on", "x": -1}, {"k": "off", "x": -1}),
]


@pytest.mark.parametrize(("rule", "bad", "good"), RULE_CASES, ids=lambda v: getattr(v, "kind", None))
def test_each_rule_kind_fails_and_passes(
    rule: Rule, bad: dict[str, Any], good: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(RULES, "T", (rule,))
    problems = validate("T", bad)
    assert len(problems) == 1 and problems[0].startswith("x ") and rule.describe() in problems[0]
    assert validate("T", good) == []
    if rule.kind != "required":
        assert validate("T", {"k": "on", "x": None}) == [], "null passes every kind but required"


def test_rules_name_real_fields() -> None:
    for name, rules in RULES.items():
        fields = {f["name"] for f in codec_for(name).schema["fields"]}
        nested = {
            f"{f['name']}.{g['name']}"
            for f in codec_for(name).schema["fields"]
            if isinstance(f["type"], dict) and f["type"].get("type") == "record"
            for g in f["type"]["fields"]
        }
        for rule in rules:
            assert rule.field in fields | nested, (name, rule)
            assert rule.when is None or rule.when[0] in fields, (name, rule)
            rule.describe()
    for name, ((a, b), when) in EXACTLY_ONE.items():
        assert {a, b, when[0]} <= {f["name"] for f in codec_for(name).schema["fields"]}


def test_rules_of_real_records() -> None:
    none: dict[str, dict[str, Any]] = {"longs": {}, "doubles": {}, "strings": {}, "booleans": {}}
    event = {
        "event_id": "e",
        "publisher_id": "p",
        "published_at": 0,
        "lifetime_ms": 0,
        "attributes": {**none, "doubles": {"a": 1.0}},
    }
    assert validate("Event", event) == []
    assert validate("Event", {**event, "attributes": {**none, "doubles": {"a b": NAN}}}) == [
        "attributes.doubles must hold only finite numbers",
        f"attributes keys must match {ATTRIBUTE_NAME}",
    ]
    assert validate("Event", {**event, "event_id": ""}) == ["event_id must be a non-empty string (got '')"]
    sub = {"type": "subscribe", "subscription_id": "s", "subscriber_id": "u", "filter": "a > 1", "composite": None}
    assert validate("Subscription", sub) == []
    assert validate("Subscription", {**sub, "composite": "{}"}) == [
        "exactly one of filter and composite must be set when type is subscribe"
    ]
    assert validate("Subscription", {**sub, "subscriber_id": None}) == [
        "subscriber_id is required when type is subscribe (got null)"
    ]
    assert validate("Subscription", {"type": "unsubscribe", "subscription_id": "s"}) == []
    link = {"from": "a", "to": "b", "seq": 0, "sent_at": 0, "delay_ms": None, "lost": False}
    assert validate("LinkSample", link) == ["delay_ms is required when lost is False (got null)"]
    assert validate("LinkSample", {**link, "lost": True}) == []
    assert validate("Receipt", {**RECEIPT, "received_at": -3}) == ["received_at must be >= 0 (got -3)"]


@pytest.mark.parametrize("name", sorted(RULES))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_validate_never_raises_on_decodable_records(name: str, data: st.DataObject) -> None:
    problems = validate(name, data.draw(_strategy(name, allow_nonfinite=True), label="record"))
    assert all(isinstance(p, str) for p in problems)


# --- schema evolution --------------------------------------------------------------------------


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)


@cache
def committed_versions(file: str) -> tuple[dict[str, Any], ...]:
    """Every committed version of ``schemas/<file>``, newest first (none before the first commit)."""
    if shutil.which("git") is None or _git("rev-parse", "--verify", "-q", "HEAD").returncode != 0:
        return ()  # not a git checkout, or no commit yet
    log = _git("log", "--format=%H", "--", f"schemas/{file}")
    assert log.returncode == 0, log.stderr
    versions = []
    for sha in log.stdout.split():
        shown = _git("show", f"{sha}:schemas/{file}")
        if shown.returncode == 0:  # not a commit that deleted the file
            versions.append(json.loads(shown.stdout))
    return tuple(versions)


def _old_schemas(name: str) -> list[dict[str, Any]]:
    """What data of ``name`` may have been written with: committed versions (the working tree's
    before any commit) and the copies kept in schemas/history/."""
    committed = list(committed_versions(schema_files()[name])) or [codec_for(name).schema]
    return committed + [version.schema for version in versions_of(name)[1:]]


@cache
def writer_versions(name: str) -> tuple[Codec, ...]:
    """Distinct writer versions of ``name`` (by fingerprint), the current one included."""
    unique = {codec_for(name).header: codec_for(name)}
    for schema in _old_schemas(name):
        codec = make_codec(schema)
        unique.setdefault(codec.header, codec)
    return tuple(unique.values())


@pytest.mark.parametrize("name", NAMES)
def test_current_schema_reads_every_older_version(name: str) -> None:
    current = codec_for(name).schema
    for old in _old_schemas(name):
        assert check_backward(current, old) == [], f"{name}: not backward compatible with an older version"


@pytest.mark.parametrize("name", NAMES)
def test_every_committed_version_stays_decodable(name: str) -> None:
    known = {version.header for version in versions_of(name)}
    for old in committed_versions(schema_files()[name]):
        assert make_codec(old).header in known, (
            f"{name}: a committed version (fingerprint {make_codec(old).header[2:].hex()}) is neither the current"
            " schema nor in schemas/history/: copy it there so its data still decodes"
        )


def test_history_files_are_older_versions_of_current_schemas() -> None:
    for file in HISTORY_FILES:
        schema = json.loads((SCHEMA_DIR / "history" / file).read_text())
        assert schema["name"] in schema_files(), f"history/{file} names no current schema"
        assert check_backward(codec_for(schema["name"]).schema, schema) == [], f"history/{file}"


@pytest.mark.parametrize(("name", "index"), [(n, i) for n in NAMES for i in range(len(writer_versions(n)))])
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_data_of_every_version_resolves_into_the_current_schema(name: str, index: int, data: st.DataObject) -> None:
    writer, current = writer_versions(name)[index], codec_for(name)
    record = data.draw(records_for(writer.schema), label="written")
    body = writer.encode_reference(record)[10:]
    old_parsed, new_parsed = fastavro.parse_schema(writer.schema), fastavro.parse_schema(current.schema)
    resolved = fastavro.schemaless_reader(io.BytesIO(body), old_parsed, new_parsed)
    assert isinstance(resolved, dict)
    written_types = {f["name"]: f["type"] for f in writer.schema["fields"]}
    for field in current.schema["fields"]:
        if written_types.get(field["name"]) == field["type"]:
            assert _same(resolved[field["name"]], record[field["name"]]), field["name"]
    assert current.encode_wire(resolved) == current.encode_reference(resolved)
    if writer.header in {v.header for v in versions_of(name)}:  # what decode_wire() itself does
        assert _same(decode_wire(writer.header + body, expected=name)[1], resolved)


# --- check_backward itself ---------------------------------------------------------------------


def _rec(*fields: dict[str, Any], name: str = "R", **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def _f(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


E2 = {"type": "enum", "name": "E", "symbols": ["a", "b"]}
E1 = {"type": "enum", "name": "E", "symbols": ["a"]}
NODE_INT = _rec(_f("v", "int"), _f("next", ["null", "R"]))
NODE_LONG = _rec(_f("v", "long"), _f("next", ["null", "R"]))
COMPAT_CASES = [  # (id, reader, writer, substring of the expected problem or None when compatible)
    ("add-field-with-default", _rec(_f("a", "int"), _f("b", "string", default="")), _rec(_f("a", "int")), None),
    ("add-field-without-default", _rec(_f("a", "int"), _f("b", "string")), _rec(_f("a", "int")), "R.b"),
    ("remove-field", _rec(_f("a", "int")), _rec(_f("a", "int"), _f("b", "string")), None),
    ("int-to-long", _rec(_f("a", "long")), _rec(_f("a", "int")), None),
    ("int-to-double", _rec(_f("a", "double")), _rec(_f("a", "int")), None),
    ("long-to-float", _rec(_f("a", "float")), _rec(_f("a", "long")), None),
    ("float-to-double", _rec(_f("a", "double")), _rec(_f("a", "float")), None),
    ("string-to-bytes", _rec(_f("a", "bytes")), _rec(_f("a", "string")), None),
    ("bytes-to-string", _rec(_f("a", "string")), _rec(_f("a", "bytes")), None),
    ("long-to-int", _rec(_f("a", "int")), _rec(_f("a", "long")), "long cannot be read as int"),
    ("double-to-long", _rec(_f("a", "long")), _rec(_f("a", "double")), "double cannot be read as long"),
    ("enum-symbol-added", _rec(_f("e", E2)), _rec(_f("e", E1)), None),
    ("enum-symbol-removed", _rec(_f("e", E1)), _rec(_f("e", E2)), "['b']"),
    ("enum-symbol-removed-with-default", _rec(_f("e", {**E1, "default": "a"})), _rec(_f("e", E2)), None),
    ("union-branch-added", _rec(_f("u", ["null", "string", "long"])), _rec(_f("u", ["null", "string"])), None),
    ("union-branch-removed", _rec(_f("u", ["null", "string"])), _rec(_f("u", ["null", "string", "long"])), "<2>"),
    ("value-to-union", _rec(_f("u", ["null", "long"])), _rec(_f("u", "int")), None),
    ("union-to-value", _rec(_f("u", "string")), _rec(_f("u", ["null", "string"])), "null cannot be read as string"),
    ("union-to-promoted-value", _rec(_f("u", "double")), _rec(_f("u", ["int", "long", "float"])), None),
    ("record-renamed", _rec(_f("a", "int"), name="S"), _rec(_f("a", "int")), "does not match"),
    ("record-renamed-with-alias", _rec(_f("a", "int"), name="S", aliases=["R"]), _rec(_f("a", "int")), None),
    ("field-renamed-with-alias", _rec(_f("b", "int", aliases=["a"])), _rec(_f("a", "int")), None),
    ("field-renamed", _rec(_f("b", "int")), _rec(_f("a", "int")), "R.b"),
    (
        "array-items-promoted",
        _rec(_f("xs", {"type": "array", "items": "long"})),
        _rec(_f("xs", {"type": "array", "items": "int"})),
        None,
    ),
    (
        "map-values-narrowed",
        _rec(_f("m", {"type": "map", "values": "int"})),
        _rec(_f("m", {"type": "map", "values": "long"})),
        "R.m{}",
    ),
    (
        "array-to-map",
        _rec(_f("m", {"type": "map", "values": "int"})),
        _rec(_f("m", {"type": "array", "items": "int"})),
        "array cannot be read as map",
    ),
    (
        "fixed-resized",
        _rec(_f("h", {"type": "fixed", "name": "H", "size": 4})),
        _rec(_f("h", {"type": "fixed", "name": "H", "size": 8})),
        "size",
    ),
    (
        "fixed-same",
        _rec(_f("h", {"type": "fixed", "name": "H", "size": 4})),
        _rec(_f("h", {"type": "fixed", "name": "H", "size": 4})),
        None,
    ),
    ("named-reference", _rec(_f("a", E1), _f("b", "E")), _rec(_f("a", E2), _f("b", "E")), "R.b"),
    (
        "nested-record-field-added",
        _rec(_f("n", _rec(_f("x", "int"), _f("y", "int"), name="N"))),
        _rec(_f("n", _rec(_f("x", "int"), name="N"))),
        "R.n.y",
    ),
    ("recursive-promoted", NODE_LONG, NODE_INT, None),
    ("recursive-narrowed", NODE_INT, NODE_LONG, "R.v"),
]


@pytest.mark.parametrize(
    ("reader", "writer", "expected"), [c[1:] for c in COMPAT_CASES], ids=[c[0] for c in COMPAT_CASES]
)
def test_check_backward_cases(reader: dict[str, Any], writer: dict[str, Any], expected: str | None) -> None:
    problems = check_backward(reader, writer)
    if expected is None:
        assert problems == []
    else:
        assert problems and any(expected in p for p in problems), problems


def test_check_backward_accepts_every_schema_against_itself() -> None:
    for name in NAMES:
        assert check_backward(codec_for(name).schema, codec_for(name).schema) == [], name


# bytes -> string resolves only bytes that are UTF-8, which the generated data rarely are
RESOLVABLE = [c for c in COMPAT_CASES if c[3] is None and c[0] != "bytes-to-string"]


@pytest.mark.parametrize(("reader", "writer"), [c[1:3] for c in RESOLVABLE], ids=[c[0] for c in RESOLVABLE])
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_what_check_backward_accepts_fastavro_resolves(
    reader: dict[str, Any], writer: dict[str, Any], data: st.DataObject
) -> None:
    record = data.draw(records_for(writer), label="written")
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(writer), record)
    buf.seek(0)
    fastavro.schemaless_reader(buf, fastavro.parse_schema(writer), fastavro.parse_schema(reader))


def test_event_json_view_splits_attributes_by_kind_on_the_wire() -> None:
    event = {
        "event_id": "e1",
        "publisher_id": "p1",
        "published_at": 5,
        "lifetime_ms": 10,
        "attributes": {"n": 3, "x": 1.5, "s": "IBM", "b": True},
    }
    raw = codec_for("Event").encode(event)
    assert decode(raw) == ("Event", event)
    wire = decode_wire(raw)[1]["attributes"]
    assert wire == {"longs": {"n": 3}, "doubles": {"x": 1.5}, "strings": {"s": "IBM"}, "booleans": {"b": True}}
    with pytest.raises(ValueError, match="allowed: long, double, string, boolean"):
        codec_for("Event").encode({**event, "attributes": {"bad": [1]}})


def test_an_attribute_name_in_two_typed_maps_is_invalid() -> None:
    wire = {
        "event_id": "e1",
        "publisher_id": "p1",
        "published_at": 5,
        "lifetime_ms": 10,
        "attributes": {"longs": {"x": 1}, "doubles": {"x": 1.5}, "strings": {}, "booleans": {}},
    }
    assert validate("Event", wire) == ["attributes must not repeat a name across longs, doubles, strings, booleans"]
