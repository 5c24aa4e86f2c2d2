"""Validation rules for input records, declared once and checked in two places.

Avro decoding already guarantees types and required fields. These rules add what a schema
cannot say: ranges, finiteness (no NaN or infinity), non-empty ids, fields required only in some
cases. Python code checks them with :func:`validate`; Spark jobs render the same declarations
into column expressions (``streaming.decode``), and a parity test keeps both in step.

>>> validate("Receipt", {"subscriber_id": "u1", "event_id": "e1", "received_at": -3})
['received_at must be >= 0 (got -3)']
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ATTRIBUTE_NAME",
    "EXACTLY_ONE",
    "RULES",
    "VALUE_KINDS",
    "Rule",
    "checked",
    "classify",
    "dead_letter",
    "exactly_one_text",
    "field_value",
    "reason_text",
    "rules_for",
    "validate",
]

ATTRIBUTE_NAME = r"[A-Za-z_][A-Za-z0-9_.]*"
VALUE_KINDS = ("longs", "doubles", "strings", "booleans")  # the typed maps of Event.attributes


@dataclass(frozen=True)
class Rule:
    """One check on one top-level field.

    Attributes
    ----------
    field : str
        The field checked, a dotted path for nested fields (``attributes.doubles``). A null value
        passes every kind but ``required``.
    kind : str
        ``non_empty`` (string with at least one character), ``finite`` (a number that is not NaN
        or infinite), ``min`` / ``max`` (inclusive bound ``bound``, NaN fails), ``gt`` (strict lower
        bound), ``required`` (not null), ``absent`` (null), ``finite_map_values`` (no NaN or
        infinite double among a map's values), ``map_keys_match`` (every map key fully matches
        the regular expression ``pattern``; with ``parts``, the keys of those maps of a record),
        ``distinct_keys`` (the maps named in ``parts`` of a record share no key).
    bound : float
        The bound of ``min``, ``max`` and ``gt``.
    pattern : str
        The regular expression of ``map_keys_match``.
    parts : tuple of str
        The map fields of a record that ``distinct_keys`` and ``map_keys_match`` look into.
    when : tuple of (str, object), optional
        Check only records whose field ``when[0]`` equals ``when[1]``.
    """

    field: str
    kind: str
    bound: float = 0.0
    pattern: str = ""
    parts: tuple[str, ...] = ()
    when: tuple[str, Any] | None = None

    def describe(self) -> str:
        """What a valid value looks like, as the reason text says it."""
        text = {
            "non_empty": "must be a non-empty string",
            "finite": "must be a finite number",
            "min": f"must be >= {self.bound:g}",
            "max": f"must be <= {self.bound:g}",
            "gt": f"must be > {self.bound:g}",
            "required": "is required",
            "absent": "must be null",
            "finite_map_values": "must hold only finite numbers",
            "map_keys_match": f"keys must match {self.pattern}",
            "distinct_keys": f"must not repeat a name across {', '.join(self.parts)}",
        }[self.kind]
        if self.when is not None:
            text += f" when {self.when[0]} is {self.when[1]}"
        return text

    def applies(self, record: dict[str, Any]) -> bool:
        return self.when is None or field_value(record, self.when[0]) == self.when[1]

    def ok(self, value: Any) -> bool:
        """Whether ``value`` passes (the record-level condition ``when`` is checked by the caller)."""
        if self.kind == "required":
            return value is not None
        if self.kind == "absent":
            return value is None
        if value is None:
            return True
        if self.kind == "non_empty":
            return isinstance(value, str) and value != ""
        if self.kind == "finite":
            return math.isfinite(value)
        if self.kind == "min":
            return bool(value >= self.bound)
        if self.kind == "max":
            return bool(value <= self.bound)
        if self.kind == "gt":
            return bool(value > self.bound)
        if self.kind == "finite_map_values":
            return all(math.isfinite(v) for v in value.values() if isinstance(v, float))
        if self.kind == "map_keys_match":
            maps = [value[p] for p in self.parts] if self.parts else [value]
            return all(re.fullmatch(self.pattern, k) for m in maps for k in m)
        if self.kind == "distinct_keys":
            maps = [value[p] for p in self.parts]
            return sum(map(len, maps)) == len(set().union(*maps))
        raise ValueError(f"unknown rule kind {self.kind!r}")


def field_value(record: dict[str, Any], path: str) -> Any:
    """The value at a dotted ``path`` (None where any step is missing)."""
    value: Any = record
    for step in path.split("."):
        value = value.get(step) if isinstance(value, dict) else None
    return value


def _ids(*fields: str) -> list[Rule]:
    return [Rule(f, "non_empty") for f in fields]


def _nonneg_times(*fields: str) -> list[Rule]:
    return [Rule(f, "min", 0) for f in fields]


def _finite_nonneg(*fields: str) -> list[Rule]:
    return [r for f in fields for r in (Rule(f, "finite"), Rule(f, "min", 0))]


def _unit_interval(field: str) -> list[Rule]:
    return [Rule(field, "finite"), Rule(field, "min", 0), Rule(field, "max", 1)]


_SUBSCRIBE = ("type", "subscribe")
_LINK = ("kind", "link")

RULES: dict[str, tuple[Rule, ...]] = {
    "Event": (
        *_ids("event_id", "publisher_id"),
        *_nonneg_times("published_at", "lifetime_ms"),
        Rule("attributes.doubles", "finite_map_values"),
        Rule("attributes", "map_keys_match", pattern=ATTRIBUTE_NAME, parts=VALUE_KINDS),
        Rule("attributes", "distinct_keys", parts=VALUE_KINDS),
    ),
    "Subscription": (
        *_ids("subscription_id", "subscriber_id"),
        Rule("subscriber_id", "required", when=_SUBSCRIBE),
        Rule("filter", "non_empty"),
        Rule("composite", "non_empty"),
        Rule("deadline_ms", "min", 0),
        *_unit_interval("min_reliability"),
    ),
    "LinkSample": (
        *_ids("from", "to"),
        *_nonneg_times("seq", "sent_at"),
        *_finite_nonneg("delay_ms"),
        Rule("delay_ms", "required", when=("lost", False)),
    ),
    "BrokerSample": (
        *_ids("broker_id"),
        *_nonneg_times("arrived_at", "queue_length"),
        *_finite_nonneg("wait_ms", "service_ms"),
    ),
    "TopologyElement": (
        *_ids("element_id"),
        *_finite_nonneg("cost"),
        Rule("bandwidth_mbps", "finite"),
        Rule("bandwidth_mbps", "gt", 0),
        *_unit_interval("reliability"),
        Rule("from", "required", when=_LINK),
        Rule("to", "required", when=_LINK),
    ),
    "Receipt": (
        *_ids("subscriber_id", "event_id"),
        *_nonneg_times("received_at"),
    ),
}

# A subscribe names exactly one of an atomic filter and a composite tree: checked as a pair.
EXACTLY_ONE: dict[str, tuple[tuple[str, str], tuple[str, Any]]] = {
    "Subscription": (("filter", "composite"), _SUBSCRIBE),
}


def rules_for(name: str) -> tuple[Rule, ...]:
    """The rules of the record named ``name`` (none for output records)."""
    return RULES.get(name, ())


def reason_text(rule: Rule, value: Any) -> str:
    shown = repr(value) if isinstance(value, str) else ("null" if value is None else str(value))
    if rule.kind in ("finite_map_values", "map_keys_match", "distinct_keys"):
        return f"{rule.field} {rule.describe()}"
    return f"{rule.field} {rule.describe()} (got {shown})"


def exactly_one_text(fields: tuple[str, str], when: tuple[str, Any]) -> str:
    return f"exactly one of {fields[0]} and {fields[1]} must be set when {when[0]} is {when[1]}"


def validate(name: str, record: dict[str, Any]) -> list[str]:
    """Every violation of ``name``'s rules in ``record``, as reason texts (empty when valid)."""
    out = [
        reason_text(r, field_value(record, r.field))
        for r in rules_for(name)
        if r.applies(record) and not r.ok(field_value(record, r.field))
    ]
    if name in EXACTLY_ONE:
        (a, b), when = EXACTLY_ONE[name]
        if record.get(when[0]) == when[1] and (record.get(a) is None) == (record.get(b) is None):
            out.append(exactly_one_text((a, b), when))
    return out


def classify(raw: bytes | None, schema: str, table: bool = False) -> tuple[str | None, str | None]:
    """The verdict the validation job gives a Kafka value: ``(error_code, reason)``, both None if good.

    Parameters
    ----------
    raw : bytes or None
        The Kafka value (None is a tombstone).
    schema : str
        The record name the topic carries.
    table : bool
        Whether the topic is a compacted table, where a tombstone is a valid deletion.

    >>> from schemas.codec import codec_for
    >>> classify(codec_for("Receipt").encode({"subscriber_id": "u", "event_id": "e", "received_at": -1}), "Receipt")
    ('invalid_value', 'received_at must be >= 0 (got -1)')
    """
    code, reason, _ = checked(raw, schema, table)
    return code, reason


def checked(
    raw: bytes | None, schema: str, table: bool = False
) -> tuple[str | None, str | None, dict[str, Any] | None]:
    """:func:`classify`'s verdict and the record it decoded (the Avro, or wire, form; None for a
    tombstone and for a value that does not decode)."""
    from schemas.codec import DecodeError, decode_wire

    if raw is None and table:
        return None, None, None
    try:
        _, record = decode_wire(raw, schema)
    except DecodeError as exc:
        return exc.code, exc.reason, None
    problems = validate(schema, record)
    return ("invalid_value", "; ".join(problems), record) if problems else (None, None, record)


def dead_letter(
    topic: str,
    partition: int,
    offset: int,
    timestamp_us: int | None,
    error_code: str,
    reason: str,
    key: bytes | None,
    value: bytes | None,
) -> tuple[bytes, bytes]:
    """The dead-letter topic's Kafka key and value (single-object Avro ``DeadLetter``) for a bad
    record at ``topic``/``partition``/``offset``, byte for byte as the JVM jobs write it
    (``streaming.decode.dead_letter_columns``): ``source_timestamp`` is the Kafka timestamp in
    microseconds divided by 1,000 as a double and truncated, as Spark casts it.

    >>> from schemas.codec import decode
    >>> key, value = dead_letter("t", 1, 7, 1_500_999, "bad_framing", "too short", b"k", None)
    >>> key, decode(value, "DeadLetter")[1]["source_timestamp"]
    (b't/1/7', 1500)
    """
    from schemas.codec import codec_for

    dl_id = f"{topic}/{partition}/{offset}"
    record = {
        "dead_letter_id": dl_id,
        "source_topic": topic,
        "source_partition": partition,
        "source_offset": offset,
        "source_timestamp": None if timestamp_us is None else int(timestamp_us / 1000),
        "error_code": error_code,
        "reason": reason,
        "key": key,
        "value": value,
    }
    return dl_id.encode(), codec_for("DeadLetter").encode(record)
