"""Fuzz targets: one function per input surface, each taking bytes (docs/guide/fuzzing.md).

Every target turns arbitrary bytes into an input of one decoder, parser or reader and checks the
contract that docs/guide/fuzzing.md states for it:

- **clear error**: a bad input raises the surface's documented exception (``DecodeError``,
  ``FilterError``, ``CompositeError``, ``InstanceError``, ``ChannelError``, ``PlacementError``;
  ``ValueError`` for ``qos predict``'s system reader, which documents it) or is a dead letter (the
  telemetry checkers' verdict); anything else escaping (``IndexError``, ``KeyError``,
  ``TypeError``, ``RecursionError``, ...) propagates out of the target and is a crash;
- **valid record not lost**: an input that is accepted round-trips (an Avro record decoded,
  encoded and decoded again is equal; a parsed filter's text parses to an equal filter) and the
  two checkers of one input agree (``validate_filter`` and ``parse_filter``; the columnar
  telemetry checker and ``schemas.rules.classify``).

A hang is caught by the runner (``bench/fuzz.py``'s per-input time limit) and by the tests'
deadlines. ``TARGETS`` maps a name to ``(check, seeds)``; ``seeds()`` gives valid inputs (the
corpus the runner writes before fuzzing).

>>> check, seeds = TARGETS["filter"]
>>> all(check(s) is None for s in seeds())
True
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from typing import Any

import numpy as np

from routing.channels.instance import ChannelError, ChannelInstance
from routing.composite.placement import PlacementError, PlacementInstance
from routing.composite.trees import CompositeError, parse_composite
from routing.matching.language import FilterError, parse_filter, validate_filter
from routing.planning.model import Instance, InstanceError, Plan
from routing.reliability.prediction import compile_prediction
from schemas.codec import DecodeError, codec_for, decode
from schemas.columnar import T_STRING, FlatDecoder
from schemas.rules import classify

__all__ = ["TARGETS", "mutate_bytes", "mutate_json"]

# -- seeds -------------------------------------------------------------------------------------

_RECORDS: dict[str, dict[str, Any]] = {
    "Receipt": {"subscriber_id": "u1", "event_id": "e1", "received_at": 1_700_000_000_000},
    "LinkSample": {"from": "b1", "to": "b2", "seq": 7, "sent_at": 1_700_000_000_000, "delay_ms": 2.5, "lost": False},
    "BrokerSample": {"broker_id": "b1", "arrived_at": 1_700_000_000_000, "wait_ms": 0.5, "service_ms": 1.25},
    "Event": {
        "event_id": "e1",
        "publisher_id": "p1",
        "published_at": 1_700_000_000_000,
        "lifetime_ms": 1000,
        "attributes": {"price": 5, "sym": "ACME", "ok": True, "w": 1.5},
    },
}

_FILTERS = (
    "price < 10",
    "a between 1 and 5 and s = 'x'",
    "sym in ('ACME', 'INIT') and not (vol >= 1e6 or ok = false)",
    "name prefix 'ab' or name matches 'a*c' and exists t",
    "x != 3.5e-2 and y = -7 and z = true",
)

_EXP = {"kind": "exponential", "mean": 1.0}

_INSTANCES: dict[str, dict[str, Any]] = {
    "plan": {
        "nodes": [
            {"id": "p1", "role": "publisher"},
            {"id": "b1", "role": "broker"},
            {"id": "s1", "role": "subscriber"},
        ],
        "links": [{"from": "p1", "to": "b1", "cost": 1.0}, {"from": "b1", "to": "s1", "cost": 2.0}],
        "events": [{"id": "e1", "rate": 0.5, "publisher": "p1"}],
        "interests": [{"subscriber": "s1", "event": "e1"}],
    },
    "channels": {
        "k": 2,
        "subscriptions": [
            {"subscription_id": "s1", "subscriber_id": "u1", "filter": "price < 10"},
            {"subscription_id": "s2", "subscriber_id": "u2", "filter": "sym = 'A'"},
        ],
        "events": [{"event_id": "e1", "attributes": {"price": 5}}, {"event_id": "e2", "attributes": {"sym": "A"}}],
    },
    "placement": {
        "brokers": ["b1", "b2", "b3"],
        "links": [
            {"from": a, "to": b, "cost": 1.0} for a, b in [("b1", "b2"), ("b2", "b1"), ("b2", "b3"), ("b3", "b2")]
        ],
        "sources": [{"leaf": "A", "broker": "b3", "rate": 10.0}, {"leaf": "B", "broker": "b2", "rate": 1.0}],
        "subscription": {
            "id": "cs",
            "broker": "b1",
            "tree": {"id": "n1", "op": "and", "children": [{"leaf": "A"}, {"leaf": "B"}]},
        },
    },
    "qos": {
        "brokers": [{"id": "b1", "service_ms": _EXP}],
        "links": [
            {"from": "p1", "to": "b1", "reliability": 1.0, "delay_ms": _EXP},
            {"from": "b1", "to": "s1", "reliability": 0.9, "delay_ms": _EXP},
        ],
        "publishers": [
            {
                "id": "p1",
                "broker": "b1",
                "interarrival_ms": _EXP,
                "content": [{"p": 1.0, "lifetime_ms": 20, "attributes": {"t": 1}}],
            }
        ],
        "subscribers": [{"id": "s1", "broker": "b1", "filter": "t = 1"}],
    },
}

_COMPOSITES = (
    {"op": "and", "children": ["a = 1", "b > 2"]},
    {"op": "seq", "within_ms": 1000, "children": ["a = 1", {"op": "or", "children": ["b = 2", "c < 3"]}]},
)


# -- helpers -----------------------------------------------------------------------------------


def _same(a: object, b: object) -> bool:
    """Equality with NaN equal to itself (``repr`` of the decoded values is exact)."""
    return a == b or repr(a) == repr(b)


_PALETTE: tuple[Any, ...] = (
    None,
    True,
    0,
    -1,
    1,
    2**63,
    1e308,
    -0.0,
    math.inf,
    math.nan,
    "",
    "x",
    "b1",
    "a = 1",
    "\udcff",
    [],
    {},
    [None],
    {"": None},
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = value
    return doc


def mutate_json(seed: Any, script: bytes) -> Any:
    """``seed`` (a JSON document, copied) with one structural mutation per two bytes of ``script``:
    a node chosen by the first byte replaced by a palette value, deleted, duplicated or nested by
    the second (a deterministic mutation of bytes into documents, for the byte-level fuzzer).

    >>> mutate_json({"a": [1, 2]}, bytes([2, 3]))  # node 2 (the first element) becomes -1
    {'a': [-1, 2]}
    """
    doc = json.loads(json.dumps(seed))
    for i in range(0, len(script) - 1, 2):
        paths = _paths(doc)
        path = paths[script[i] % len(paths)]
        action = script[i + 1]
        if action < len(_PALETTE):
            doc = _set(doc, path, json.loads(json.dumps(_PALETTE[action])) if action > 10 else _PALETTE[action])
            continue
        node: Any = doc
        for step in path:
            node = node[step]
        if action % 4 == 0 and path:  # delete
            parent: Any = doc
            for step in path[:-1]:
                parent = parent[step]
            del parent[path[-1]]
        elif action % 4 == 1 and isinstance(node, list):  # duplicate an element
            node.append(json.loads(json.dumps(node[action % len(node)])) if node else None)
        elif action % 4 == 2:  # nest
            doc = _set(doc, path, [node] if action % 8 < 4 else {"id": node})
        else:  # a number nudged or a text changed
            if isinstance(node, bool) or node is None:
                doc = _set(doc, path, not node)
            elif isinstance(node, (int, float)):
                doc = _set(doc, path, node * -1 if action & 16 else node + 1)
            elif isinstance(node, str):
                doc = _set(doc, path, node + chr(action) if action & 32 else node[: action % (len(node) + 1)])
    return doc


_TOKENS = (
    b" and ",
    b" or ",
    b"not ",
    b"(",
    b")",
    b"'",
    b"between",
    b" in (",
    b",",
    b"1e999",
    b"-",
    b"\\",
    b"{",
    b"}",
    b"[",
    b"]",
    b'"',
    b"\x00",
    b"\xff",
)


def mutate_bytes(seed: bytes, rng: random.Random) -> bytes:
    """``seed`` with 1-4 random byte-level mutations (flip, insert, delete, splice a token,
    truncate): the coverage-free engine of ``bench/fuzz.py`` and of the unit tier's smoke test.

    >>> mutate_bytes(b"price < 10", random.Random(0)) != b"price < 10"
    True
    """
    data = bytearray(seed)
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(5)
        at = rng.randint(0, len(data))
        if kind == 0 and data:
            data[min(at, len(data) - 1)] = rng.randrange(256)
        elif kind == 1:
            data[at:at] = bytes([rng.randrange(256)])
        elif kind == 2 and data:
            del data[at : at + rng.randint(1, 8)]
        elif kind == 3:
            data[at:at] = rng.choice(_TOKENS)
        else:
            del data[at:]
    return bytes(data) if bytes(data) != seed else seed + b"\x00"


def _document(data: bytes, seeds: list[Any]) -> Any:
    """The JSON document ``data`` holds, or, when it is not JSON text, a seed mutated by it."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        pass
    if not data:
        return seeds[0]
    return mutate_json(seeds[data[0] % len(seeds)], data[1:])


# -- targets -----------------------------------------------------------------------------------


def check_avro(data: bytes) -> None:
    """Any framed value: ``DecodeError`` or a record that re-encodes and decodes back equal."""
    try:
        name, record = decode(data)
    except DecodeError:
        return
    codec = codec_for(name)
    again = decode(codec.encode(record), name)
    assert again[0] == name and _same(again[1], record), (record, again)


def _avro_seeds() -> list[bytes]:
    return [codec_for(n).encode(r) for n, r in _RECORDS.items()]


_FLAT = {name: FlatDecoder(name) for name in ("LinkSample", "BrokerSample")}


def check_telemetry(data: bytes) -> None:
    """A telemetry value: ``classify`` (the Python twin of the JVM path's verdict) never raises, and
    what the columnar checker (the QoS job's fast path) accepts it also accepts, with the same
    field values (the fast path refers what it does not accept to the JVM path, so a refusal
    there is no verdict)."""
    for name, flat in _FLAT.items():
        code, reason = classify(data, name)
        cols = flat.decode_values([data])
        fast_ok = bool(cols.accepted[0])
        assert code is None or not fast_ok, (name, code, reason)
        if fast_ok:
            _, record = decode(data, name)
            for f in flat.fields:
                expected = record.get(f.name)
                if not cols.present(f.name)[0]:
                    value: object = None
                elif f.type == T_STRING:
                    value = cols.strings(f.name, np.array([0]))[0]
                else:
                    value = cols.values(f.name)[0].item()
                assert _same(value, expected), (name, f.name, value, expected)


def _telemetry_seeds() -> list[bytes]:
    return [codec_for(n).encode(_RECORDS[n]) for n in ("LinkSample", "BrokerSample")]


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def check_filter(data: bytes) -> None:
    """Filter text: ``FilterError`` from both ``parse_filter`` and ``validate_filter``, or a
    filter whose text parses to an equal filter."""
    text = _text(data)
    try:
        f = parse_filter(text)
    except FilterError as exc:
        try:
            validate_filter(text)
        except FilterError as again:
            assert str(again) == str(exc), (str(exc), str(again))
            return
        raise AssertionError(f"validate_filter accepts what parse_filter rejects: {exc}") from None
    validate_filter(text)
    assert parse_filter(str(f)) == f, (text, str(f))


def _filter_seeds() -> list[bytes]:
    return [t.encode() for t in _FILTERS]


def check_composite(data: bytes) -> None:
    """A composite subscription document (JSON text): ``CompositeError`` or a tree."""
    try:
        parse_composite(_text(data))
    except CompositeError:
        return


def _composite_seeds() -> list[bytes]:
    return [json.dumps(c).encode() for c in _COMPOSITES]


def _reader(read: Callable[[Any], object], error: type[Exception], seeds: list[Any]) -> Callable[[bytes], None]:
    def check(data: bytes) -> None:
        doc = _document(data, seeds)
        try:
            read(doc)
        except error:
            return

    return check


def _instance_seeds(name: str) -> Callable[[], list[bytes]]:
    return lambda: [json.dumps(_INSTANCES[name]).encode()]


_PLANS: list[dict[str, Any]] = [
    {
        "feasible": True,
        "cost": 7.5,
        "method": "exact",
        "transmissions": [{"from": "p1", "to": "b1", "event": "e1"}, {"from": "b1", "to": "s1", "event": "e3"}],
        "generated": [{"node": "b1", "event": "e3"}],
    },
    {"feasible": False, "reasons": ["e2 has no publisher"]},
]


def check_plan_document(data: bytes) -> None:
    """``plan check``'s plan reader: ``InstanceError`` or a plan that reads back equal from its output."""
    doc = _document(data, _PLANS)
    try:
        plan = Plan.from_json(doc)
    except InstanceError:
        return
    again = Plan.from_json(plan.to_json())
    assert (again.feasible, again.cost, again.transmissions, again.generated, again.reasons) == (
        plan.feasible,
        plan.cost,
        plan.transmissions,
        plan.generated,
        plan.reasons,
    ), (plan, again)


def _plan_seeds() -> list[bytes]:
    return [json.dumps(p).encode() for p in _PLANS]


TARGETS: dict[str, tuple[Callable[[bytes], None], Callable[[], list[bytes]]]] = {
    "avro": (check_avro, _avro_seeds),
    "telemetry": (check_telemetry, _telemetry_seeds),
    "filter": (check_filter, _filter_seeds),
    "composite": (check_composite, _composite_seeds),
    "plan-instance": (_reader(Instance.from_json, InstanceError, [_INSTANCES["plan"]]), _instance_seeds("plan")),
    "channels-instance": (
        _reader(ChannelInstance.from_json, ChannelError, [_INSTANCES["channels"]]),
        _instance_seeds("channels"),
    ),
    "placement-instance": (
        _reader(PlacementInstance.from_json, PlacementError, [_INSTANCES["placement"]]),
        _instance_seeds("placement"),
    ),
    "qos-system": (_reader(compile_prediction, ValueError, [_INSTANCES["qos"]]), _instance_seeds("qos")),
    "plan-document": (check_plan_document, _plan_seeds),
}
"""Target name -> (check taking bytes, seeds giving valid inputs)."""
