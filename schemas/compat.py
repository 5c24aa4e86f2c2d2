"""Static check of Avro *backward compatibility*: can a reader with a new schema read old data?

The rules are those of the Avro specification's "Schema Resolution" section: primitive
promotions (int -> long, float, double; long -> float, double; float -> double; string <-> bytes),
records matched by unqualified name or reader alias, reader fields the writer lacks need a
default, writer fields the reader lacks are skipped, enums need every writer symbol (or a reader
default), fixed types need the same name and size, arrays and maps recurse, and unions resolve
branch by branch. Logical types are checked as their underlying types.

>>> old = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
>>> new = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"},
...        {"name": "b", "type": ["null", "string"], "default": None}]}
>>> check_backward(new, old)
[]
>>> check_backward(old, new)
['R.a: writer type long cannot be read as int']
"""

from __future__ import annotations

from typing import Any

__all__ = ["PRIMITIVES", "PROMOTIONS", "check_backward"]

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
# writer type -> reader types it may be read as (besides itself)
PROMOTIONS: dict[str, frozenset[str]] = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}
_NAMED = ("record", "error", "enum", "fixed")


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _collect(schema: Any, namespace: str, table: dict[str, Any]) -> None:
    """Register every named type defined in ``schema`` by full and by unqualified name."""
    if isinstance(schema, list):
        for branch in schema:
            _collect(branch, namespace, table)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in _NAMED:
            name = str(schema["name"])
            full = name if "." in name else ".".join(p for p in (schema.get("namespace", namespace), name) if p)
            table[full] = schema
            table.setdefault(_short(full), schema)
            for field in schema.get("fields", []):
                _collect(field["type"], full.rpartition(".")[0], table)
        elif kind == "array":
            _collect(schema["items"], namespace, table)
        elif kind == "map":
            _collect(schema["values"], namespace, table)
        elif isinstance(kind, (dict, list)):
            _collect(kind, namespace, table)


def _kind(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, str):
        return schema
    kind = str(schema["type"])
    return "record" if kind == "error" else kind


def _describe(schema: Any) -> str:
    kind = _kind(schema)
    if kind == "union":
        return "[" + ", ".join(_describe(b) for b in schema) + "]"
    return f"{kind} {schema['name']}" if kind in _NAMED else kind


class _Checker:
    def __init__(self, reader: Any, writer: Any) -> None:
        self.names: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
        _collect(reader, "", self.names[0])
        _collect(writer, "", self.names[1])
        self.open: set[tuple[int, int]] = set()  # record pairs being checked (recursive types)

    def resolve(self, schema: Any, side: int) -> Any:
        """Follow name references and unwrap ``{"type": <primitive or nested schema>}``."""
        while True:
            if isinstance(schema, str) and schema not in PRIMITIVES:
                found = self.names[side].get(schema, self.names[side].get(_short(schema)))
                if found is None:
                    raise KeyError(f"{('reader', 'writer')[side]} schema references unknown type {schema!r}")
                schema = found
            elif isinstance(schema, dict) and schema.get("type") not in (*_NAMED, "array", "map"):
                schema = schema["type"]  # {"type": "long", "logicalType": ...}, {"type": [...]}, {"type": "Ref"}
            else:
                return schema

    def same_name(self, reader: Any, writer: Any) -> bool:
        names = {_short(str(a)) for a in reader.get("aliases", [])} | {_short(str(reader["name"]))}
        return _short(str(writer["name"])) in names

    def check(self, reader: Any, writer: Any, path: str) -> list[str]:
        try:
            reader, writer = self.resolve(reader, 0), self.resolve(writer, 1)
        except KeyError as exc:
            return [f"{path}: {exc.args[0]}"]
        rk, wk = _kind(reader), _kind(writer)
        if wk == "union":
            return [p for i, branch in enumerate(writer) for p in self.check(reader, branch, f"{path}<{i}>")]
        if rk == "union":
            tried = [(branch, self.check(branch, writer, path)) for branch in reader]
            if any(not problems for _, problems in tried):
                return []
            for branch, problems in tried:  # a branch of the same kind (and name) tells the most
                resolved = self.names[0].get(branch, branch) if isinstance(branch, str) else branch
                if _kind(resolved) == wk and (wk not in _NAMED or self.same_name(resolved, writer)):
                    return problems
            return [f"{path}: writer type {_describe(writer)} matches no branch of reader union {_describe(reader)}"]
        if rk in PRIMITIVES and wk in PRIMITIVES:
            ok = rk == wk or rk in PROMOTIONS.get(wk, frozenset())
            return [] if ok else [f"{path}: writer type {wk} cannot be read as {rk}"]
        if rk != wk:
            return [f"{path}: writer type {_describe(writer)} cannot be read as {_describe(reader)}"]
        if rk == "array":
            return self.check(reader["items"], writer["items"], f"{path}[]")
        if rk == "map":
            return self.check(reader["values"], writer["values"], f"{path}{{}}")
        if not self.same_name(reader, writer):
            return [f"{path}: writer {wk} {writer['name']} does not match reader {rk} {reader['name']}"]
        if rk == "fixed" and reader["size"] != writer["size"]:
            return [f"{path}: fixed size changed from {writer['size']} to {reader['size']}"]
        if rk == "enum":
            missing = [s for s in writer["symbols"] if s not in reader["symbols"]]
            if missing and "default" not in reader:
                return [f"{path}: reader enum {reader['name']} lacks writer symbols {missing} and has no default"]
        if rk == "record":
            return self.record(reader, writer, path)
        return []

    def record(self, reader: Any, writer: Any, path: str) -> list[str]:
        key = (id(reader), id(writer))
        if key in self.open:
            return []  # a recursive reference: its problems are reported where the check began
        self.open.add(key)
        written = {str(f["name"]): f for f in writer["fields"]}
        problems: list[str] = []
        for field in reader["fields"]:
            where = f"{path}.{field['name']}"
            match = next((written[n] for n in (field["name"], *field.get("aliases", [])) if n in written), None)
            if match is not None:
                problems += self.check(field["type"], match["type"], where)
            elif "default" not in field:
                problems.append(f"{where}: reader field has no default and the writer has no such field")
        self.open.discard(key)
        return problems


def check_backward(reader: dict[str, Any], writer: dict[str, Any]) -> list[str]:
    """Problems that keep a reader using ``reader`` from reading data written with ``writer``.

    Parameters
    ----------
    reader : dict
        The new schema (parsed JSON of an ``.avsc`` file).
    writer : dict
        The old schema that existing data was written with.

    Returns
    -------
    list of str
        One human-readable problem per incompatibility, prefixed by the path of the field
        (``<i>`` is a writer union branch, ``[]`` array items, ``{}`` map values); empty when
        every datum written with ``writer`` resolves into ``reader``.

    Examples
    --------
    >>> check_backward({"type": "enum", "name": "E", "symbols": ["a"]},
    ...                {"type": "enum", "name": "E", "symbols": ["a", "b"]})
    ["E: reader enum E lacks writer symbols ['b'] and has no default"]
    >>> check_backward({"type": "array", "items": ["null", "long"]}, {"type": "array", "items": "int"})
    []
    """
    path = _short(str(reader["name"])) if isinstance(reader, dict) and _kind(reader) in _NAMED else "<root>"
    return _Checker(reader, writer).check(reader, writer, path)
