"""The one codec for every SiftStream topic: Avro single-object encoding.

Wire framing (decided once, see ``schemas/README.md``): every Kafka value is

    0xC3 0x01 | 8-byte little-endian CRC-64-AVRO fingerprint of the writer schema's
    Parsing Canonical Form | Avro binary body

as the Avro specification's *single-object encoding* defines it. No schema registry is needed:
the fingerprint names the writer schema, and every schema version ever committed is known to
the code. Producers and readers use this module; Spark jobs decode the same framing in the JVM
(``streaming.decode``), and a parity test holds the two together.

>>> codec = codec_for("Receipt")
>>> raw = codec.encode({"subscriber_id": "u1", "event_id": "e1", "received_at": 5})
>>> raw[:2].hex(), len(raw)
('c301', 17)
>>> decode(raw)
('Receipt', {'subscriber_id': 'u1', 'event_id': 'e1', 'received_at': 5})
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any

import fastavro

from schemas.fastenc import compile_encoder

__all__ = [
    "HEADER_LEN",
    "MAGIC",
    "Codec",
    "DecodeError",
    "codec_for",
    "crc64_avro",
    "decode",
    "decode_wire",
    "make_codec",
    "schema_files",
    "split_header",
    "versions_of",
]

MAGIC = b"\xc3\x01"
HEADER_LEN = 10
_CRC64_EMPTY = 0xC15D213AA4D7A795


def _crc64_table() -> list[int]:
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (_CRC64_EMPTY & -(fp & 1))
        table.append(fp)
    return table


_CRC64_TABLE = _crc64_table()


def crc64_avro(data: bytes) -> int:
    """CRC-64-AVRO fingerprint (the Avro specification's "Rabin" fingerprint) of ``data``.

    >>> hex(crc64_avro(b'"int"'))
    '0x7275d51a3f395c8f'
    """
    fp = _CRC64_EMPTY
    for byte in data:
        fp = (fp >> 8) ^ _CRC64_TABLE[(fp ^ byte) & 0xFF]
    return fp


class DecodeError(ValueError):
    """A value that is not a SiftStream record.

    Attributes
    ----------
    code : str
        ``bad_framing`` (no single-object header), ``unknown_schema`` (fingerprint of no known
        schema, or of another topic's schema) or ``malformed_body`` (the Avro body does not decode).
    reason : str
        The reason the validation job writes in the dead letter; the message (``str``) may add the
        decoding library's detail after it.
    """

    def __init__(self, code: str, reason: str, detail: str | None = None) -> None:
        super().__init__(reason if detail is None else f"{reason}: {detail}")
        self.code, self.reason = code, reason


@dataclass(frozen=True)
class Codec:
    """Encoder and decoder for one schema version.

    Attributes
    ----------
    name : str
        The record's simple name, e.g. ``Event``.
    schema : dict
        The schema as parsed JSON (the ``.avsc`` file).
    header : bytes
        The 10-byte single-object header for this schema.
    """

    name: str
    schema: dict[str, Any]
    header: bytes
    _parsed: Any
    _encode: Callable[[dict[str, Any]], bytes]
    to_wire: Callable[[dict[str, Any]], dict[str, Any]]
    from_wire: Callable[[dict[str, Any]], dict[str, Any]]

    @property
    def fingerprint(self) -> int:
        return int.from_bytes(self.header[2:], "little")

    @property
    def schema_json(self) -> str:
        return json.dumps(self.schema)

    def encode(self, record: dict[str, Any]) -> bytes:
        """Frame and encode one record in its JSON view (raises ``ValueError`` if it does not fit).

        Uses the compiled encoder of ``schemas.fastenc``; ``encode_reference`` is the fastavro
        twin that tests hold it to.
        """
        try:
            wire = self.to_wire(record)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"record does not fit schema {self.name}: {type(exc).__name__}: {exc}") from exc
        return self.encode_wire(wire)

    def encode_wire(self, record: dict[str, Any]) -> bytes:
        """Frame and encode one record laid out as the Avro schema has it."""
        try:
            return self.header + self._encode(record)
        except (KeyError, TypeError, AttributeError, ValueError, OverflowError, struct.error) as exc:
            raise ValueError(f"record does not fit schema {self.name}: {type(exc).__name__}: {exc}") from exc

    def encode_reference(self, record: dict[str, Any]) -> bytes:
        """``encode_wire`` done by fastavro (slow, the reference implementation)."""
        buf = io.BytesIO()
        buf.write(self.header)
        fastavro.schemaless_writer(buf, self._parsed, record, strict=True)
        return buf.getvalue()

    def decode_body(self, body: bytes) -> dict[str, Any]:
        """Decode an unframed Avro body written with this schema; raise DecodeError if it does not."""
        # Like Avro's own readers (and Spark's from_avro), bytes after a complete record are ignored.
        try:
            record = fastavro.schemaless_reader(io.BytesIO(body), self._parsed, None)
        except Exception as exc:  # fastavro raises many types on garbage
            raise DecodeError("malformed_body", f"Avro body does not decode as {self.name}", str(exc)) from exc
        return record  # type: ignore[return-value]


def _same(record: dict[str, Any]) -> dict[str, Any]:
    return record


_KIND_MAPS = {bool: "booleans", int: "longs", float: "doubles", str: "strings"}


def _event_to_wire(record: dict[str, Any]) -> dict[str, Any]:
    """JSON view (one ``attributes`` object) -> wire record (one map per value kind)."""
    wire: dict[str, dict[str, Any]] = {"longs": {}, "doubles": {}, "strings": {}, "booleans": {}}
    for name, value in record["attributes"].items():
        try:
            wire[_KIND_MAPS[type(value)]][name] = value
        except KeyError:
            raise ValueError(
                f"attribute {name!r} has a {type(value).__name__}; allowed: long, double, string, boolean"
            ) from None
    return {**record, "attributes": wire}


def _event_from_wire(record: dict[str, Any]) -> dict[str, Any]:
    """Wire record -> JSON view. A name in two maps (invalid, see rules) keeps its last kind."""
    attributes: dict[str, Any] = {}
    for kind in ("longs", "doubles", "strings", "booleans"):
        attributes.update(record["attributes"][kind])
    return {**record, "attributes": attributes}


# record name -> (JSON view -> wire record, wire record -> JSON view), where the two differ
_VIEWS: dict[str, tuple[Callable[[dict[str, Any]], dict[str, Any]], Callable[[dict[str, Any]], dict[str, Any]]]] = {
    "Event": (_event_to_wire, _event_from_wire),
}


def _schema_dir() -> Traversable:
    """The package's ``.avsc`` files, read through ``importlib.resources`` so that they load from a
    zip on ``sys.path`` too (the package ``--py-files`` ships to Spark's executors:
    docs/guide/cluster.md), not only from a folder."""
    return files("schemas")


@cache
def schema_files() -> dict[str, str]:
    """Record name -> ``.avsc`` file name, for every schema shipped in the package."""
    out: dict[str, str] = {}
    for entry in _schema_dir().iterdir():
        if entry.name.endswith(".avsc"):
            out[json.loads(entry.read_text())["name"]] = entry.name
    return out


def make_codec(schema: dict[str, Any]) -> Codec:
    """Build a codec from a parsed schema document (any version, e.g. one from git history)."""
    parsed = fastavro.parse_schema(schema)
    canonical = fastavro.schema.to_parsing_canonical_form(parsed)
    header = MAGIC + crc64_avro(canonical.encode()).to_bytes(8, "little")
    to_wire, from_wire = _VIEWS.get(schema["name"], (_same, _same))
    return Codec(schema["name"], schema, header, parsed, compile_encoder(schema), to_wire, from_wire)


@cache
def codec_for(name: str) -> Codec:
    """The current codec of the record named ``name`` (cached: schemas load once)."""
    try:
        file = schema_files()[name]
    except KeyError:
        raise KeyError(f"no schema named {name!r}; known: {sorted(schema_files())}") from None
    return make_codec(json.loads((_schema_dir() / file).read_text()))


@cache
def versions_of(name: str) -> tuple[Codec, ...]:
    """Every version of ``name`` that data may have been written with: the current one first,
    then the earlier ones kept in ``schemas/history/`` (so old records still decode)."""
    current = codec_for(name)
    older = []
    history = _schema_dir() / "history"
    if history.is_dir():
        for entry in sorted(history.iterdir(), key=lambda e: e.name):
            if entry.name.endswith(".avsc"):
                doc = json.loads(entry.read_text())
                if doc["name"] == name:
                    old = make_codec(doc)
                    if old.header != current.header:
                        older.append(old)
    return (current, *older)


@cache
def _by_fingerprint() -> dict[bytes, Codec]:
    return {version.header: version for name in schema_files() for version in versions_of(name)}


def split_header(raw: bytes | None) -> tuple[Codec, bytes]:
    """Find the writer codec of a framed value; raise DecodeError when there is none."""
    if raw is None:
        raise DecodeError("bad_framing", "value is null (a tombstone) where a record was expected")
    if len(raw) < HEADER_LEN or raw[:2] != MAGIC:
        raise DecodeError(
            "bad_framing",
            f"value does not start with the Avro single-object marker C3 01 (got {raw[:2].hex() or 'nothing'},"
            f" {len(raw)} bytes)",
        )
    codec = _by_fingerprint().get(raw[:HEADER_LEN])
    if codec is None:
        raise DecodeError(
            "unknown_schema", f"schema fingerprint {raw[2:HEADER_LEN].hex()} is not a known SiftStream schema"
        )
    return codec, raw[HEADER_LEN:]


def decode(raw: bytes | None, expected: str | None = None) -> tuple[str, dict[str, Any]]:
    """Decode a framed value into ``(record name, record)``, the record in its JSON view.

    Parameters are those of :func:`decode_wire`.
    """
    name, record = decode_wire(raw, expected)
    return name, codec_for(name).from_wire(record)


def decode_wire(raw: bytes | None, expected: str | None = None) -> tuple[str, dict[str, Any]]:
    """Decode a framed value into ``(record name, record)``, the record as the Avro schema has it.

    Parameters
    ----------
    raw : bytes
        The Kafka value.
    expected : str, optional
        The record name the topic carries; another schema raises ``DecodeError('unknown_schema')``.
    """
    writer, body = split_header(raw)
    if expected is not None and writer.name != expected:
        raise DecodeError("unknown_schema", f"record is a {writer.name}, this topic carries {expected}")
    current = codec_for(writer.name)
    if writer.header == current.header:
        return writer.name, writer.decode_body(body)
    # an older version: resolve it into the current schema (Avro schema resolution)
    buf = io.BytesIO(body)
    try:
        record = fastavro.schemaless_reader(buf, writer._parsed, current._parsed)
    except Exception as exc:
        raise DecodeError(
            "malformed_body", f"Avro body does not decode as {writer.name}", f"older version: {exc}"
        ) from exc
    return writer.name, record  # type: ignore[return-value]
