"""Replay recorded events from JSON Lines, CSV or Avro files: with their original timing, a speed
factor, or flat out. Acts as a workload (``batch``, ``columns``), so every sink works with it.

CSV: a header row; the columns ``event_id``, ``publisher_id``, ``published_at``, ``lifetime_ms``
(optional, default 1000) are the event's, every other column is an attribute whose value is read
as an integer, a decimal, ``true``/``false``, or else a string. Avro: an object container file of
``Event`` records (JSON view or wire layout).
"""

from __future__ import annotations

import csv
import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from producers.columns import EventColumns
from producers.workloads import Record

__all__ = ["Replay", "read_events"]

_EVENT_FIELDS = ("event_id", "publisher_id", "published_at", "lifetime_ms")


def _value(text: str) -> Any:
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def read_events(path: Path) -> Iterator[Record]:
    """Events from a ``.jsonl``/``.json``, ``.csv`` or ``.avro`` file, in file order."""
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        with path.open("rb") as f:
            for number, line in enumerate(f, 1):
                if line.strip():
                    try:
                        record = orjson.loads(line)
                    except orjson.JSONDecodeError as exc:
                        raise ValueError(f"{path}:{number}: not JSON: {exc}") from None
                    yield record if "type" not in record else {k: v for k, v in record.items() if k != "type"}
    elif suffix == ".csv":
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                yield {
                    "event_id": row["event_id"],
                    "publisher_id": row["publisher_id"],
                    "published_at": int(row["published_at"]),
                    "lifetime_ms": int(row.get("lifetime_ms") or 1000),
                    "attributes": {k: _value(v) for k, v in row.items() if k not in _EVENT_FIELDS and v != ""},
                }
    elif suffix == ".avro":
        import fastavro

        from schemas.codec import codec_for

        view = codec_for("Event").from_wire
        with path.open("rb") as f:
            for record in fastavro.reader(f):
                attrs = record["attributes"]  # type: ignore[index]
                yield view(record) if "longs" in attrs else record  # type: ignore[arg-type,return-value]
    else:
        raise ValueError(f"cannot replay {path}: use .jsonl, .csv or .avro")


class Replay:
    """Replays a file. ``speed``: 1.0 keeps the original gaps between ``published_at`` values,
    2.0 halves them, 0 sends flat out. Publication times are re-based to now (ms)."""

    name = "replay"

    def __init__(self, path: Path, speed: float = 0.0) -> None:
        if speed < 0:
            raise ValueError("speed must be >= 0 (0: flat out)")
        self.path, self.speed = path, speed
        self._it = read_events(path)
        self._first_ts: int | None = None
        self._wall0 = 0.0
        self._count = 0

    def subscriptions(self) -> list[Record]:
        return []

    def batch(self, n: int) -> list[Record]:
        out = list(itertools.islice(self._it, n))
        now_ms = int(time.time() * 1000)
        for r in out:
            if self._first_ts is None:
                self._first_ts, self._wall0 = int(r["published_at"]), time.monotonic()
            offset = int(r["published_at"]) - self._first_ts
            if self.speed > 0:
                due = self._wall0 + offset / 1000.0 / self.speed
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                r["published_at"] = int(time.time() * 1000)
            else:
                r["published_at"] = now_ms + offset
        self._count += len(out)
        return out

    def columns(self, n: int) -> EventColumns:
        return EventColumns.from_records(self.batch(n))

    @property
    def exhausted_after(self) -> int:
        return self._count

    def describe(self) -> dict[str, Any]:
        return {"workload": self.name, "path": str(self.path), "speed": self.speed, "events": self._count}
