"""Hypothesis strategies for SiftStream's Avro records.

``records_for(schema)`` generates complete records (every field present, defaults not relied
on) for any Avro schema of the project, old versions included; ``valid_records(name)`` generates
records of a current schema that also pass ``schemas.rules.validate``, built constructively from
the declared rules so that Hypothesis rarely has to throw a draw away.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from hypothesis import strategies as st

from schemas.codec import codec_for
from schemas.rules import EXACTLY_ONE, Rule, field_value, rules_for, validate

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
_SIZE = 4  # most elements per generated array, map, string of bytes


@dataclass(frozen=True)
class Limits:
    """What the declared rules demand of one top-level field (applied to every branch of it)."""

    lo: float | None = None  # inclusive lower bound
    hi: float | None = None  # inclusive upper bound
    exclude_lo: bool = False
    non_empty: bool = False
    key_pattern: str | None = None
    not_null: bool = False


def _limits(rules: list[Rule]) -> Limits:
    limits = Limits()
    for rule in rules:
        if rule.when is not None:
            continue  # conditional rules are repaired after drawing (see valid_records)
        if rule.kind in ("min", "gt"):
            limits = replace(limits, lo=rule.bound, exclude_lo=rule.kind == "gt")
        elif rule.kind == "max":
            limits = replace(limits, hi=rule.bound)
        elif rule.kind == "non_empty":
            limits = replace(limits, non_empty=True)
        elif rule.kind == "map_keys_match":
            limits = replace(limits, key_pattern=rule.pattern)
        elif rule.kind == "required":
            limits = replace(limits, not_null=True)
    return limits


class _Builder:
    def __init__(self, allow_nonfinite: bool) -> None:
        self.allow_nonfinite = allow_nonfinite
        self.named: dict[str, st.SearchStrategy[Any]] = {}  # full and short name -> strategy

    def build(self, schema: Any, limits: Limits | None = None, namespace: str = "") -> st.SearchStrategy[Any]:
        limits = limits or Limits()
        if isinstance(schema, list):
            branches = [b for b in schema if not (limits.not_null and b == "null")]
            return st.one_of(*[self.build(b, limits, namespace) for b in branches])
        if isinstance(schema, str):
            for key in (schema, f"{namespace}.{schema}", schema.rsplit(".", 1)[-1]):
                if key in self.named:
                    return self.named[key]
            return self.primitive(schema, limits)
        kind = schema["type"]
        if not isinstance(kind, str) or kind not in ("record", "error", "enum", "fixed", "array", "map"):
            return self.build(kind, limits, namespace)  # {"type": "long", ...} or a wrapped schema
        if kind == "array":
            return st.lists(self.build(schema["items"], Limits(), namespace), max_size=_SIZE)
        if kind == "map":
            keys = st.from_regex(limits.key_pattern, fullmatch=True) if limits.key_pattern else st.text(max_size=8)
            return st.dictionaries(keys, self.build(schema["values"], Limits(), namespace), max_size=_SIZE)
        name = schema["name"]
        full = name if "." in name else ".".join(p for p in (schema.get("namespace", namespace), name) if p)
        if kind == "enum":
            strategy: st.SearchStrategy[Any] = st.sampled_from(schema["symbols"])
        elif kind == "fixed":
            strategy = st.binary(min_size=schema["size"], max_size=schema["size"])
        else:
            inner = full.rpartition(".")[0]
            later: dict[str, st.SearchStrategy[Any]] = {}
            strategy = st.deferred(lambda: st.fixed_dictionaries(later))
            self.named[full] = self.named[name.rsplit(".", 1)[-1]] = strategy  # before the fields: recursion
            for field in schema["fields"]:
                nested = Limits(key_pattern=limits.key_pattern)  # key rules reach maps inside a record
                later[field["name"]] = self.build(field["type"], nested, inner)
        self.named[full] = self.named[name.rsplit(".", 1)[-1]] = strategy
        return strategy

    def primitive(self, kind: str, limits: Limits) -> st.SearchStrategy[Any]:
        if kind == "null":
            return st.none()
        if kind == "boolean":
            return st.booleans()
        if kind in ("int", "long"):
            lo, hi = INT32 if kind == "int" else INT64
            if limits.lo is not None:
                lo = max(lo, int(limits.lo) + (1 if limits.exclude_lo and limits.lo == int(limits.lo) else 0))
            if limits.hi is not None:
                hi = min(hi, int(limits.hi))
            return st.integers(lo, hi)
        if kind in ("float", "double"):
            bounded = limits.lo is not None or limits.hi is not None
            return st.floats(
                min_value=limits.lo,
                max_value=limits.hi,
                exclude_min=limits.exclude_lo and limits.lo is not None,
                allow_nan=self.allow_nonfinite and not bounded,
                allow_infinity=self.allow_nonfinite and not bounded,
                width=32 if kind == "float" else 64,
            )
        if kind == "string":
            return st.text(min_size=1 if limits.non_empty else 0, max_size=12)
        if kind == "bytes":
            return st.binary(max_size=_SIZE * 4)
        raise ValueError(f"unknown Avro type {kind!r}")


def records_for(schema: dict[str, Any], allow_nonfinite: bool = False) -> st.SearchStrategy[dict[str, Any]]:
    """Complete records of ``schema``: strings as text, ints in int32, longs in int64, doubles
    finite (NaN and infinities too with ``allow_nonfinite``), named types by reference."""
    return _Builder(allow_nonfinite).build(schema)


def _rules_under(rules: tuple[Rule, ...], field: str) -> list[Rule]:
    """Rules on ``field`` itself, plus key patterns of maps nested in it (``attributes.longs``),
    which the builder applies to every map inside the field."""
    return [r for r in rules if r.field == field or (r.field.startswith(field + ".") and r.kind == "map_keys_match")]


@cache
def valid_records(name: str) -> st.SearchStrategy[dict[str, Any]]:
    """Complete records of the current schema ``name`` that ``schemas.rules.validate`` accepts."""
    schema = codec_for(name).schema
    rules = rules_for(name)
    builder = _Builder(allow_nonfinite=False)
    namespace = schema.get("namespace", "")
    fields = {
        f["name"]: builder.build(f["type"], _limits(_rules_under(rules, f["name"])), namespace)
        for f in schema["fields"]
    }
    types = {f["name"]: f["type"] for f in schema["fields"]}

    def present(field: str) -> st.SearchStrategy[Any]:
        """A non-null value of ``field`` that keeps its unconditional rules."""
        return builder.build(
            types[field], replace(_limits([r for r in rules if r.field == field]), not_null=True), namespace
        )

    @st.composite
    def repaired(draw: st.DrawFn) -> dict[str, Any]:
        record = draw(st.fixed_dictionaries(fields))
        for rule in rules:
            if rule.when is None or not rule.applies(record) or rule.ok(field_value(record, rule.field)):
                continue
            if rule.kind == "required":
                record[rule.field] = draw(present(rule.field))
            elif rule.kind == "absent":
                record[rule.field] = None
        if name in EXACTLY_ONE:
            (a, b), (field, value) = EXACTLY_ONE[name]
            if record.get(field) == value and (record.get(a) is None) == (record.get(b) is None):
                keep, drop = (a, b) if draw(st.booleans()) else (b, a)
                record[drop] = None
                if record.get(keep) is None:
                    record[keep] = draw(present(keep))
        return record

    return repaired().filter(lambda record: not validate(name, record))
