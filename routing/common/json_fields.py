"""Reading the offline commands' JSON documents with errors that name the item.

The instances of docs/reference/distribution.md (``routing.planning.model``) and
docs/reference/placement.md (``routing.composite.placement``) are checked the same
way: lists of objects, non-empty strings, finite numbers with a lower bound. Each function takes
the module's own error class, so a user sees ``InstanceError`` or ``PlacementError`` with a
message that says where, what was wrong and what would be valid.

>>> number({"cost": -1}, "cost", "links[0]", ValueError, strict=False)
Traceback (most recent call last):
...
ValueError: links[0]: 'cost' must be >= 0 (got -1)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["items", "kind", "number", "text"]


def kind(value: object) -> str:
    """The JSON-ish type name of ``value`` for an error message."""
    return type(value).__name__


def items(
    doc: Mapping[str, Any], key: str, error: type[Exception], keys_note: str, required: bool = True
) -> list[Mapping[str, Any]]:
    """``doc[key]`` as a list of objects (``[]`` when absent and not ``required``); ``keys_note``
    says which keys a document has, for the message of a missing one."""
    if key not in doc:
        if required:
            raise error(f"missing key {key!r}: {keys_note}")
        return []
    found = doc[key]
    if not isinstance(found, list):
        raise error(f"{key} must be a list of objects (got {kind(found)})")
    for i, item in enumerate(found):
        if not isinstance(item, Mapping):
            raise error(f"{key}[{i}] must be an object (got {kind(item)})")
    return found


def text(item: Mapping[str, Any], key: str, where: str, error: type[Exception]) -> str:
    """``item[key]`` as a non-empty string."""
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise error(f"{where}: {key!r} must be a non-empty string (got {value!r})")
    return value


def number(
    item: Mapping[str, Any], key: str, where: str, error: type[Exception], lowest: float = 0.0, strict: bool = False
) -> float:
    """``item[key]`` as a finite number ``>= lowest`` (``> lowest`` when ``strict``)."""
    value = item.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise error(f"{where}: {key!r} must be a finite number (got {value!r})")
    if value < lowest or (strict and value == lowest):
        raise error(f"{where}: {key!r} must be {'>' if strict else '>='} {lowest:g} (got {value})")
    return float(value)
