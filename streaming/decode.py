"""Decode and validate Kafka records inside Spark: the JVM twin of ``schemas.codec`` + ``schemas.rules``.

Every job reads its inputs through :func:`verdict` (error class and reason per record) or
:func:`decode` (the record as a struct, plus the verdict). Decoding runs in the JVM
(``from_avro`` over the single-object body), so it is columnar and fast; the checks are the
declarations of ``schemas.rules`` rendered into Spark column expressions. A parity test runs
both twins over the same generated records.

Error classes, in the order they are tested: ``bad_framing`` (null value on a non-table topic,
too short, or no C3 01 marker), ``unknown_schema`` (a fingerprint that is not a version of the
topic's schema), ``malformed_body`` (the Avro body does not decode; like Avro's own readers,
bytes after a complete record are ignored),
``invalid_value`` (a rule of ``schemas.rules`` is broken).
"""

from __future__ import annotations

from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro, to_avro

from schemas.codec import HEADER_LEN, MAGIC, Codec, codec_for, schema_files, versions_of
from schemas.rules import EXACTLY_ONE, Rule, exactly_one_text, rules_for
from schemas.topics import TopicSpec

_AVRO_OPTIONS = {"mode": "PERMISSIVE", "enableStableIdentifiersForUnionType": "true"}  # member_<type> names
KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")


def _header() -> Column:
    return F.substring(F.col("value"), 1, HEADER_LEN)


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


def _field(rec: Column, path: str) -> Column:
    for step in path.split("."):
        rec = rec[step]
    return rec


def _violated(rule: Rule, rec: Column) -> Column:
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
        # (Spark's higher-order functions run interpreted, several times slower on this hot path)
        doubles = F.map_values(col)
        top, bottom = F.array_max(doubles), F.array_min(doubles)
        bad = present & (F.isnan(top) | (top == F.lit(float("inf"))) | (bottom == F.lit(float("-inf"))))
    elif rule.kind == "map_keys_match":
        # one regex over the keys joined by a separator; the separator count must equal the key
        # count minus one, so a key that itself contains the separator cannot pass as two keys
        sep = "\u0001"
        joined = F.array_join(F.map_keys(col), sep)
        seps = F.length(joined) - F.length(F.regexp_replace(joined, sep, ""))
        pattern = f"\\A(?:{rule.pattern})(?:{sep}(?:{rule.pattern}))*\\z"
        bad = present & (F.size(col) > 0) & (~joined.rlike(pattern) | (seps != F.size(col) - 1))
    elif rule.kind == "distinct_keys":
        keys = [F.map_keys(col[p]) for p in rule.parts]
        bad = present & (F.size(F.array_distinct(F.concat(*keys))) != reduce(lambda a, b: a + b, (F.size(k) for k in keys)))
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
            shown = (F.concat(F.lit("'"), col, F.lit("'")) if is_string(rule.field) else col.cast("string"))
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


def _verdict_columns(spec: TopicSpec, rec: Column) -> tuple[Column, Column]:
    """(error_code, reason) columns for rows of ``spec``'s topic; both null for a good record."""
    name = spec.schema
    codec = codec_for(name)
    value = F.col("value")
    known = [v.header for v in versions_of(name)]
    other = {v.header: v.name for n in schema_files() if n != name for v in versions_of(n)}
    header_hex = F.lower(F.hex(F.substring(value, 3, 8)))
    malformed = reduce(lambda x, y: x | y, (rec[f].isNull() for f in _required_fields(codec)))
    any_bad, reasons = _checks(name, rec)

    code = F.when(value.isNull(), F.lit(None if spec.compacted else "bad_framing"))
    text = F.when(value.isNull(), F.lit(None if spec.compacted else
                                        "value is null (a tombstone) where a record was expected"))
    short = (F.length(value) < HEADER_LEN) | (F.substring(value, 1, 2) != F.lit(MAGIC))
    code = code.when(short, "bad_framing")
    text = text.when(short, F.concat(
        F.lit("value does not start with the Avro single-object marker C3 01 (got "),
        F.lower(F.hex(F.substring(value, 1, 2))), F.lit(", "), F.length(value).cast("string"), F.lit(" bytes)")))
    unknown = ~_header().isin(*[F.lit(h) for h in known])
    code = code.when(unknown, "unknown_schema")
    wrong = None
    for header, other_name in other.items():
        cond = _header() == F.lit(header)
        msg = F.lit(f"record is a {other_name}, this topic carries {name}")
        wrong = F.when(cond, msg) if wrong is None else wrong.when(cond, msg)
    fallback = F.concat(F.lit("schema fingerprint "), header_hex, F.lit(" is not a known SiftStream schema"))
    text = text.when(unknown, fallback if wrong is None else wrong.otherwise(fallback))
    code = code.when(malformed, "malformed_body")
    text = text.when(malformed, F.lit(f"Avro body does not decode as {name}"))
    code = code.when(any_bad, "invalid_value")
    text = text.when(any_bad, reasons)
    return code, text


def verdict(df: DataFrame, specs: dict[str, TopicSpec]) -> DataFrame:
    """Add ``error_code`` and ``reason`` to Kafka rows from several topics.

    Parameters
    ----------
    df : DataFrame
        Rows of Spark's Kafka source (``key, value, topic, partition, offset, timestamp``).
    specs : dict
        Actual topic name (with any prefix) -> its declaration.
    """
    # decode once per row into a per-topic column; the checks then read that column (inlining
    # from_avro into every check would decode the same bytes dozens of times)
    names = {topic: f"_record_{i}" for i, topic in enumerate(specs)}
    decoded = df.select("*", *(F.when(F.col("topic") == F.lit(topic), _record(spec.schema)).alias(names[topic])
                               for topic, spec in specs.items()))
    code: Column | None = None
    text: Column | None = None
    for topic, spec in specs.items():
        c, t = _verdict_columns(spec, F.col(names[topic]))
        is_topic = F.col("topic") == F.lit(topic)
        code = F.when(is_topic, c) if code is None else code.when(is_topic, c)
        text = F.when(is_topic, t) if text is None else text.when(is_topic, t)
    assert code is not None and text is not None
    unknown_topic = F.concat(F.lit("topic "), F.col("topic"), F.lit(" is not a SiftStream input topic"))
    return decoded.select(*df.columns, code.otherwise(F.lit("unknown_topic")).alias("error_code"),
                          text.otherwise(unknown_topic).alias("reason"))


def decode(df: DataFrame, spec: TopicSpec) -> DataFrame:
    """Kafka rows of one topic -> the same rows plus ``record`` (the decoded struct),
    ``error_code`` and ``reason`` (null for good records). Split with ``good``/``bad``."""
    with_rec = df.withColumn("record", _record(spec.schema))
    code, text = _verdict_columns(spec, F.col("record"))
    return with_rec.withColumn("error_code", code).withColumn("reason", text)


def good(decoded: DataFrame) -> DataFrame:
    """The records that decoded and validated, flattened to their fields (tombstones included,
    with null fields, on table topics)."""
    return decoded.where(F.col("error_code").isNull())


def dead_letters(checked: DataFrame) -> DataFrame:
    """Bad rows -> Kafka ``key``/``value`` pairs for the dead-letter topic (single-object Avro)."""
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
    return checked.where(F.col("error_code").isNotNull()).select(
        dl_id.cast("binary").alias("key"), value.alias("value"))
