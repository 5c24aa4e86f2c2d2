"""Decode and validate Kafka records inside Spark: the JVM twin of ``schemas.codec`` + ``schemas.rules``.

Every job reads each input topic through :func:`decode` (the record as a struct, plus the
verdict: error class and reason). Decoding runs in the JVM
(``from_avro`` over the single-object body), so it is columnar and fast; the checks are the
declarations of ``schemas.rules`` rendered into Spark column expressions. A parity test runs
both twins over the same generated records.

Error classes, in the order they are tested: ``bad_framing`` (null value on a non-table topic,
too short, or no C3 01 marker), ``unknown_schema`` (a fingerprint that is not a version of the
topic's schema), ``malformed_body`` (the Avro body does not decode, or a string in it is not valid UTF-8; like
Avro's own readers, bytes after a complete record are ignored),
``invalid_value`` (a rule of ``schemas.rules`` is broken).
"""

from __future__ import annotations

import itertools
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro, to_avro

from schemas.codec import HEADER_LEN, MAGIC, Codec, codec_for, schema_files, versions_of
from schemas.rules import ATTRIBUTE_NAME, EXACTLY_ONE, Rule, exactly_one_text, rules_for
from schemas.topics import TopicSpec

__all__ = ["TopicDecoder", "dead_letter_columns", "dead_letters", "decode", "good"]

_AVRO_OPTIONS = {"mode": "PERMISSIVE", "enableStableIdentifiersForUnionType": "true"}  # member_<type> names


def _header() -> Column:
    """The 10-byte header; ``decode`` materializes it once per row as column ``_header``."""
    return F.col("_header")


def _body() -> Column:
    return F.expr(f"substring(value, {HEADER_LEN + 1})")


def _record(name: str) -> Column:
    """The decoded struct (all-null fields when the body is malformed), from any known version."""
    current = codec_for(name)
    versions = versions_of(name)
    if len(versions) == 1:
        return from_avro(_body(), current.schema_json, _AVRO_OPTIONS)
    expr = None
    for version in versions:
        options = dict(_AVRO_OPTIONS, avroSchema=current.schema_json)
        decoded = from_avro(_body(), version.schema_json, options)
        cond = _header() == F.lit(version.header)
        expr = F.when(cond, decoded) if expr is None else expr.when(cond, decoded)
    assert expr is not None
    return expr


def _required_fields(codec: Codec) -> list[str]:
    def nullable(t: Any) -> bool:
        return isinstance(t, list) and "null" in t

    return [f["name"] for f in codec.schema["fields"] if not nullable(f["type"])]


def _texts(t: Any, col: Column) -> list[Column]:
    """The strings of a value of Avro type ``t`` at ``col``: each string, and each array's or map's
    strings joined by an ASCII separator (a joined text is valid UTF-8 exactly when every part
    is: a cut sequence cannot be completed across an ASCII byte)."""
    if isinstance(t, list):
        members = [m for m in t if m != "null"]
        return _texts(members[0], col) if len(members) == 1 else []
    if t == "string":
        return [col]
    if isinstance(t, dict):
        if t["type"] == "record":
            return [c for f in t["fields"] for c in _texts(f["type"], col[f["name"]])]
        if t["type"] == "array" and t["items"] == "string":
            return [F.array_join(col, "\u0001")]
        if t["type"] == "map":
            keys = [F.array_join(F.map_keys(col), "\u0001")]
            return keys + ([F.array_join(F.map_values(col), "\u0001")] if t["values"] == "string" else [])
    return []


def _bad_text(codec: Codec, rec: Column) -> Column | None:
    """Whether some string of the decoded record is not valid UTF-8 (never null), or None when the
    record has no strings. ``from_avro`` keeps a string's bytes as they are, where the Python
    twin's reader (and every Avro reader that makes text) refuses them: such a body is malformed."""
    texts = _texts(codec.schema, rec)
    if not texts:
        return None
    return reduce(lambda x, y: x | y, (~F.coalesce(F.is_valid_utf8(c), F.lit(True)) for c in texts))


def _field(rec: Column, path: str) -> Column:
    for step in path.split("."):
        rec = rec[step]
    return rec


def _keys_column(rule: Rule) -> str:
    """The column that holds the keys a ``map_keys_match`` rule reads (the keys of the maps
    ``parts`` of ``field``, or of the map ``field``): made once per row by :class:`TopicDecoder`."""
    return "_keys:" + rule.field + (":" + ",".join(rule.parts) if rule.parts else "")


def _key_array(rec: Column, rule: Rule) -> Column:
    col = _field(rec, rule.field)
    return F.concat(*(F.map_keys(col[p]) for p in rule.parts)) if rule.parts else F.map_keys(col)


def _key_columns(name: str) -> dict[str, Rule]:
    """Per key column that the rules of record ``name`` read, a rule that defines it."""
    return {_keys_column(r): r for r in rules_for(name) if r.kind == "map_keys_match"}


def _names_broken(keys: Column) -> Column:
    """Whether some string of the non-empty array ``keys`` is not an :data:`ATTRIBUTE_NAME`: one
    regex over the keys joined by a separator; and no key may contain the separator, so that a
    key holding it cannot pass as two keys."""
    sep = "\u0001"
    name = "[A-Za-z_][\\w.]*"  # Java's \w is [a-zA-Z_0-9] (no UNICODE_CHARACTER_CLASS): one table lookup
    pattern = f"\\A(?:{name})(?:{sep}(?:{name}))*\\z"
    return ~F.array_join(keys, sep).rlike(pattern) | F.array_join(keys, "").contains(sep)


def _shares_a_key(maps: list[Column]) -> Column:
    """Whether two of ``maps`` share a key (each map's own keys are distinct): each map's keys
    against the keys of the maps after it, cheaper per row than a hash set over all keys
    (``array_distinct``; docs/decisions/jvm-decoding-plans.md)."""
    keys = [F.map_keys(m) for m in maps]
    later = (F.arrays_overlap(keys[i], F.concat(*keys[i + 1 :])) for i in range(len(keys) - 1))
    return reduce(lambda x, y: x | y, later)


def _violated(rule: Rule, rec: Column) -> Column:
    """Whether ``rec`` breaks ``rule`` (never null). ``map_keys_match`` reads its key array from
    its column (:func:`_key_columns`, made by :class:`TopicDecoder`)."""
    col = _field(rec, rule.field)
    num = col.cast("double")
    present = col.isNotNull()
    if rule.kind == "required":
        bad = col.isNull()
    elif rule.kind == "absent":
        bad = present
    elif rule.kind == "non_empty":
        bad = present & (F.length(col) == 0)
    elif rule.kind == "finite":
        bad = present & (F.isnan(num) | (F.abs(num) == F.lit(float("inf"))))
    elif rule.kind == "min":  # Spark orders NaN above every number: test it explicitly
        bad = present & (F.isnan(num) | (num < F.lit(rule.bound)))
    elif rule.kind == "max":
        bad = present & (F.isnan(num) | (num > F.lit(rule.bound)))
    elif rule.kind == "gt":
        bad = present & (F.isnan(num) | (num <= F.lit(rule.bound)))
    elif rule.kind == "finite_map_values":
        # array_max/array_min skip nulls and order NaN above +inf: no per-element lambda needed
        # (Spark's higher-order functions run interpreted)
        doubles = F.map_values(col)
        top, bottom = F.array_max(doubles), F.array_min(doubles)
        bad = present & (F.isnan(top) | (top == F.lit(float("inf"))) | (bottom == F.lit(float("-inf"))))
    elif rule.kind == "map_keys_match":
        if rule.pattern != ATTRIBUTE_NAME:
            raise ValueError(f"map_keys_match has a JVM check for {ATTRIBUTE_NAME} only, not {rule.pattern!r}")
        keys = F.col(f"`{_keys_column(rule)}`")
        bad = present & (F.size(keys) > 0) & _names_broken(keys)
    elif rule.kind == "distinct_keys":
        bad = present & (F.lit(False) if len(rule.parts) < 2 else _shares_a_key([col[p] for p in rule.parts]))
    else:
        raise ValueError(f"unknown rule kind {rule.kind!r}")
    if rule.when is not None:
        bad = bad & (_field(rec, rule.when[0]) == F.lit(rule.when[1]))
    return F.coalesce(bad, F.lit(False))


def _checks(name: str, rec: Column) -> tuple[Column, Column]:
    """(any rule broken, the reasons joined by '; ') for a decoded record of ``name``."""
    codec = codec_for(name)
    types = {f["name"]: f["type"] for f in codec.schema["fields"]}

    def is_string(field: str) -> bool:
        t = types.get(field)
        return t == "string" or (isinstance(t, list) and "string" in t)

    pairs = []
    for rule in rules_for(name):
        bad = _violated(rule, rec)
        if rule.kind in ("finite_map_values", "map_keys_match", "distinct_keys"):
            msg = F.lit(f"{rule.field} {rule.describe()}")
        else:
            col = _field(rec, rule.field)
            shown = F.concat(F.lit("'"), col, F.lit("'")) if is_string(rule.field) else col.cast("string")
            msg = F.concat(F.lit(f"{rule.field} {rule.describe()} (got "), F.coalesce(shown, F.lit("null")), F.lit(")"))
        pairs.append((bad, msg))
    if name in EXACTLY_ONE:
        (a, b), when = EXACTLY_ONE[name]
        bad = (rec[when[0]] == F.lit(when[1])) & (rec[a].isNull() == rec[b].isNull())
        pairs.append((F.coalesce(bad, F.lit(False)), F.lit(exactly_one_text((a, b), when))))
    if not pairs:
        return F.lit(False), F.lit(None).cast("string")
    any_bad = reduce(lambda x, y: x | y, (bad for bad, _ in pairs))
    reasons = F.concat_ws("; ", *(F.when(bad, msg) for bad, msg in pairs))
    return any_bad, reasons


def _verdict(spec: TopicSpec, rec: Column) -> Column:
    """``struct(error_code, reason)`` for rows of ``spec``'s topic; both fields null for a good record.

    One CASE yields both fields, so every check runs once per row (two CASEs over the same
    conditions would evaluate the rules twice).
    """
    name = spec.schema
    codec = codec_for(name)
    value = F.col("value")
    known = [v.header for v in versions_of(name)]
    other = {v.header: v.name for n in schema_files() if n != name for v in versions_of(n)}
    malformed = reduce(lambda x, y: x | y, (rec[f].isNull() for f in _required_fields(codec)))
    bad_text = _bad_text(codec, rec)
    if bad_text is not None:
        malformed = malformed | bad_text
    any_bad, reasons = _checks(name, rec)

    def out(code: str | None, text: Column | str | None) -> Column:
        text_col = text if isinstance(text, Column) else F.lit(text)
        return F.struct(F.lit(code).cast("string").alias("error_code"), text_col.cast("string").alias("reason"))

    tombstone = "value is null (a tombstone) where a record was expected"
    verdict = F.when(value.isNull(), out(None, None) if spec.compacted else out("bad_framing", tombstone))
    short = (F.length(value) < HEADER_LEN) | (F.substring(value, 1, 2) != F.lit(MAGIC))
    verdict = verdict.when(
        short,
        out(
            "bad_framing",
            F.concat(
                F.lit("value does not start with the Avro single-object marker C3 01 (got "),
                F.when(F.length(value) == 0, F.lit("nothing")).otherwise(F.lower(F.hex(F.substring(value, 1, 2)))),
                F.lit(", "),
                F.length(value).cast("string"),
                F.lit(" bytes)"),
            ),
        ),
    )
    unknown = ~_header().isin(*[F.lit(h) for h in known])
    unknown_text = F.concat(
        F.lit("schema fingerprint "),
        F.lower(F.hex(F.substring(value, 3, 8))),
        F.lit(" is not a known SiftStream schema"),
    )
    for header, other_name in other.items():  # only evaluated for records already found unknown
        unknown_text = F.when(
            _header() == F.lit(header), F.lit(f"record is a {other_name}, this topic carries {name}")
        ).otherwise(unknown_text)
    verdict = verdict.when(unknown, out("unknown_schema", unknown_text))
    verdict = verdict.when(malformed, out("malformed_body", f"Avro body does not decode as {name}"))
    verdict = verdict.when(any_bad, out("invalid_value", reasons))
    return verdict.otherwise(out(None, None))


class TopicDecoder:
    """:func:`decode` for one topic with its column expressions built once.

    Building Spark columns from Python costs hundreds of py4j calls; a job that decodes in every
    micro-batch (``foreachBatch``) keeps one decoder per topic and applies it to each batch.
    """

    def __init__(self, spec: TopicSpec) -> None:
        self.spec = spec
        self._header = F.substring(F.col("value"), 1, HEADER_LEN)
        self._record = _record(spec.schema)
        record = F.col("record")
        self._keys = {name: _key_array(record, rule) for name, rule in _key_columns(spec.schema).items()}
        self._verdict = _verdict(spec, record)

    def __call__(self, df: DataFrame) -> DataFrame:
        # header, record and the key arrays that several rules read are computed once per row
        # into columns that the checks then read
        framed = df.withColumn("_header", self._header).withColumn("record", self._record)
        if self._keys:
            framed = framed.withColumns(self._keys)
        with_rec = framed.withColumn("_verdict", self._verdict)
        return with_rec.select(*df.columns, "record", "_verdict.error_code", "_verdict.reason")


def decode(df: DataFrame, spec: TopicSpec) -> DataFrame:
    """Kafka rows of one topic -> the same rows plus ``record`` (the decoded struct),
    ``error_code`` and ``reason`` (null for good records). Split with ``good``/``bad``."""
    return TopicDecoder(spec)(df)


def _unpushable(decoded: DataFrame) -> DataFrame:
    """``decoded`` behind an ``observe`` (a count nobody reads), which the optimizer does not push
    filters through. A filter on the verdict pushed below :class:`TopicDecoder`'s projection gets
    the decoded record inlined into every rule that reads it, ``from_avro`` once per rule
    (docs/decisions/jvm-decoding-plans.md)."""
    return decoded.observe(f"siftstream_decoded_{next(_OBSERVATIONS)}", F.count(F.lit(1)).alias("rows"))


_OBSERVATIONS = itertools.count()  # observe() names must be unique within a query


def good(decoded: DataFrame) -> DataFrame:
    """The rows whose record decoded and validated (tombstones of table topics included, with a
    null ``record``)."""
    return _unpushable(decoded).where(F.col("error_code").isNull())


def dead_letter_columns() -> tuple[Column, Column]:
    """The Kafka ``key`` and ``value`` (single-object Avro) of the dead letter of a row that has the
    Kafka source's columns and ``error_code``/``reason``."""
    codec = codec_for("DeadLetter")
    dl_id = F.concat_ws("/", F.col("topic"), F.col("partition").cast("string"), F.col("offset").cast("string"))
    record = F.struct(
        dl_id.alias("dead_letter_id"),
        F.col("topic").alias("source_topic"),
        F.col("partition").cast("int").alias("source_partition"),
        F.col("offset").cast("long").alias("source_offset"),
        (F.unix_micros(F.col("timestamp")) / 1000).cast("long").alias("source_timestamp"),
        F.col("error_code"),
        F.col("reason"),
        F.col("key").cast("binary").alias("key"),
        F.col("value").cast("binary").alias("value"),
    )
    value = F.concat(F.lit(codec.header), to_avro(record, codec.schema_json))
    return dl_id.cast("binary"), value


def dead_letters(checked: DataFrame) -> DataFrame:
    """Bad rows -> Kafka ``key``/``value`` pairs for the dead-letter topic (single-object Avro)."""
    key, value = dead_letter_columns()
    return _unpushable(checked).where(F.col("error_code").isNotNull()).select(key.alias("key"), value.alias("value"))
