"""Serialised state of the mergeable summaries, for Spark streaming state and checkpoints.

Every summary in :mod:`routing.stats` (and the estimators built on them) has two forms of its
state:

- ``to_state()`` / ``from_state(state)``: a :data:`State`, names to 1-D numpy arrays, strings as
  unicode arrays and never objects, so that it can be concatenated, nested and stored without
  pickling;
- ``to_bytes()`` / ``from_bytes(data)``: that state as one ``.npz`` blob (:func:`pack_state`),
  tagged with the kind of object it holds, so that a blob read back as the wrong kind fails with
  a message instead of giving nonsense (:func:`unpack_state`).

A composite object stores its parts' states under a dotted prefix (:func:`nest_state`,
:func:`child_state`); a step object whose state is partly JSON (tables) and partly blobs (its
estimators' own ``to_bytes``) uses :func:`pack_documents` / :func:`unpack_documents`.

Examples
--------
>>> blob = pack_state("Example", {"n": np.array([3]), "ids": string_array(["a", "b"])})
>>> state = unpack_state("Example", blob)
>>> state["n"].tolist(), state["ids"].tolist()
([3], ['a', 'b'])
>>> unpack_state("Other", blob)
Traceback (most recent call last):
...
ValueError: not a serialised Other of siftstream.estimation.v1 (['siftstream.estimation.v1', 'Example'])
>>> child_state("w", nest_state("w", {"x": np.zeros(1)}))
{'x': array([0.])}
>>> meta, blobs = unpack_documents(pack_documents({"rows": [1, 2]}, window=b"abc"))
>>> meta, blobs
({'rows': [1, 2]}, {'window': b'abc'})
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "State",
    "child_state",
    "nest_state",
    "pack_documents",
    "pack_state",
    "string_array",
    "unpack_documents",
    "unpack_state",
]

State = dict[str, NDArray[Any]]
"""A serialised state: names to 1-D numpy arrays (strings as unicode arrays, never objects)."""

# The tag written into every pack_state blob; stored state carries it, so it never changes.
_FORMAT = "siftstream.estimation.v1"


def pack_state(kind: str, state: Mapping[str, NDArray[Any]]) -> bytes:
    """``state`` as one ``.npz`` blob tagged with ``kind`` (the class name, by convention)."""
    buf = io.BytesIO()
    arrays: dict[str, Any] = {"__format__": np.array([_FORMAT, kind]), **state}  # Any: savez's kwargs
    np.savez(buf, allow_pickle=False, **arrays)
    return buf.getvalue()


def unpack_state(kind: str, data: bytes) -> State:
    """The state in a :func:`pack_state` blob.

    Raises
    ------
    ValueError
        When the blob is not tagged as a serialised ``kind``.
    """
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        state = {name: npz[name] for name in npz.files}
    tag = state.pop("__format__", None)
    if tag is None or tag.tolist() != [_FORMAT, kind]:
        found = "no format tag" if tag is None else f"{tag.tolist()}"
        raise ValueError(f"not a serialised {kind} of {_FORMAT} ({found})")
    return state


def nest_state(prefix: str, state: Mapping[str, NDArray[Any]]) -> State:
    """``state`` with every name prefixed ``prefix.``, to store it inside another state."""
    return {f"{prefix}.{name}": value for name, value in state.items()}


def child_state(prefix: str, state: Mapping[str, NDArray[Any]]) -> State:
    """The part of ``state`` that :func:`nest_state` stored under ``prefix``."""
    head = prefix + "."
    return {name[len(head) :]: value for name, value in state.items() if name.startswith(head)}


def string_array(values: Sequence[str]) -> NDArray[np.str_]:
    """``values`` as a unicode array (an empty one too, which numpy would make float)."""
    return np.array(list(values), dtype=np.str_) if len(values) else np.empty(0, dtype="<U1")


def pack_documents(meta: Mapping[str, Any], **blobs: bytes) -> bytes:
    """One blob holding a JSON document and named byte strings (a step object's whole state:
    its tables as JSON, its estimators' own ``to_bytes``); :func:`unpack_documents` reads it."""
    buf = io.BytesIO()
    arrays = {name: np.frombuffer(blob, dtype=np.uint8) for name, blob in blobs.items()}
    np.savez(buf, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


def unpack_documents(data: bytes) -> tuple[Any, dict[str, bytes]]:
    """The JSON document and the named byte strings of :func:`pack_documents`."""
    with np.load(io.BytesIO(data)) as npz:
        meta = json.loads(npz["meta"].tobytes().decode())
        blobs = {name: npz[name].tobytes() for name in npz.files if name != "meta"}
    return meta, blobs
