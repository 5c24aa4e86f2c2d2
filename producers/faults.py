"""Deliberately bad records, each with the error class the validation job must give it.

Used by ``siftstream produce events --bad-fraction`` (the demo) and by the integration tests.

>>> import random
>>> raw, code = corrupt("negative_lifetime", random.Random(1), {"event_id": "e", "publisher_id": "p",
...     "published_at": 1, "lifetime_ms": 5, "attributes": {}})
>>> code
'invalid_value'
"""

from __future__ import annotations

import random
from typing import Any

from schemas.codec import MAGIC, codec_for

__all__ = ["FAULTS", "corrupt"]

# fault kind -> the error_code the validation job must report for it
FAULTS: dict[str, str] = {
    "garbage": "bad_framing",
    "empty_value": "bad_framing",
    "unknown_fingerprint": "unknown_schema",
    "wrong_schema": "unknown_schema",
    "truncated": "malformed_body",
    "negative_lifetime": "invalid_value",
    "nan_attribute": "invalid_value",
    "empty_event_id": "invalid_value",
    "bad_attribute_name": "invalid_value",
}


def corrupt(kind: str, rng: random.Random, event: dict[str, Any]) -> tuple[bytes, str]:
    """A bad Kafka value for the events topic built from a good ``event``, and its error class."""
    codec = codec_for("Event")
    if kind == "garbage":
        raw = bytes([0x7B]) + rng.randbytes(rng.randint(5, 60))  # '{': somebody sent JSON-ish bytes
    elif kind == "empty_value":
        raw = b""
    elif kind == "unknown_fingerprint":
        raw = MAGIC + rng.randbytes(8) + codec.encode(event)[10:]
    elif kind == "wrong_schema":
        raw = codec_for("Receipt").encode({"subscriber_id": "u1", "event_id": event["event_id"], "received_at": 1})
    elif kind == "truncated":
        good = codec.encode(event)
        raw = good[: rng.randint(11, len(good) - 1)]
    elif kind == "negative_lifetime":
        raw = codec.encode({**event, "lifetime_ms": -rng.randint(1, 1000)})
    elif kind == "nan_attribute":
        raw = codec.encode({**event, "attributes": {**event["attributes"], "price": float("nan")}})
    elif kind == "empty_event_id":
        raw = codec.encode({**event, "event_id": ""})
    elif kind == "bad_attribute_name":
        raw = codec.encode({**event, "attributes": {**event["attributes"], "2bad name": 1}})
    else:
        raise ValueError(f"unknown fault {kind!r}; known: {sorted(FAULTS)}")
    return raw, FAULTS[kind]
