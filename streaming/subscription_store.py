"""The matching job's subscription table, persisted per micro-batch beside Spark's checkpoint.

Spark's checkpoint makes a micro-batch replayable: after a crash, the batch that was planned but
not committed runs again over exactly the same offsets. For the matching job that is only half
the story: the batch's events must also be matched against the same subscriptions as the first
time. So the job writes, for every micro-batch ``B`` before it writes any output of ``B``:

- ``delta-B.json``: the subscription changes that ``B`` read (in order), the table version after
  them and the subscriptions topic's end offsets of ``B``; or
- ``snapshot-B.json``: the whole table after ``B`` (every ``snapshot_every`` batches, and when many
  changes piled up), with the version and offsets.

The state a batch ``B`` starts from is then "latest snapshot at or before ``B - 1``, plus the
deltas after it up to ``B - 1``": a pure function of committed history, the same on a replay. A
replay rewrites its own ``delta-B`` with identical content. Writes are atomic (temporary file,
then rename). A gap in the chain (a file lost) makes ``load`` return None, and the job then
rebuilds the table from the compacted subscriptions topic instead.

>>> import tempfile
>>> from pathlib import Path
>>> from routing.matching.table import SubscriptionTable
>>> store = TableStore(Path(tempfile.mkdtemp()))
>>> table = SubscriptionTable()
>>> table.apply([("s1", "x > 1")])
>>> store.save_delta(0, [("s1", "x > 1")], table.version, {0: 1})
>>> store.save_snapshot(1, table.filters, table.version, {0: 1})
>>> store.save_delta(2, [("s1", None), ("s2", "y = 2")], 3, {0: 3})
>>> restored, offsets = store.load(2)
>>> dict(restored.filters), restored.version, offsets
({'s2': 'y = 2'}, 3, {0: 3})
>>> store.load(5) is None  # batches 3 to 5 are missing
True
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from routing.matching.table import Change, SubscriptionTable

__all__ = ["TableStore"]

_FILE = re.compile(r"^(snapshot|delta)-(\d+)\.json$")


class TableStore:
    """Snapshots and per-batch deltas of a ``SubscriptionTable`` in one folder.

    Parameters
    ----------
    folder : Path
        Where the files live (the job uses ``<checkpoint>/subscriptions``).
    table_params : dict
        Passed to ``SubscriptionTable.restore`` (rebase thresholds).
    """

    def __init__(self, folder: Path, **table_params: Any) -> None:
        self.folder = folder
        self._params = table_params

    def _write(self, name: str, doc: dict[str, Any]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".{name}.tmp"
        tmp.write_bytes(orjson.dumps(doc))
        os.replace(tmp, self.folder / name)

    def save_delta(self, batch_id: int, changes: Iterable[Change], version: int, offsets: Mapping[int, int]) -> None:
        """Record batch ``batch_id``: its changes in order, the version after them, the end offsets."""
        doc = {"batch_id": batch_id, "version": version, "offsets": _json_offsets(offsets), "changes": list(changes)}
        self._write(f"delta-{batch_id}.json", doc)

    def save_snapshot(
        self, batch_id: int, filters: Mapping[str, str], version: int, offsets: Mapping[int, int]
    ) -> None:
        """Record the whole table after batch ``batch_id``; prune what no restore can need any more."""
        doc = {"batch_id": batch_id, "version": version, "offsets": _json_offsets(offsets), "filters": dict(filters)}
        self._write(f"snapshot-{batch_id}.json", doc)
        self._prune()

    def _files(self) -> dict[str, dict[int, Path]]:
        out: dict[str, dict[int, Path]] = {"snapshot": {}, "delta": {}}
        if self.folder.is_dir():
            for entry in self.folder.iterdir():
                m = _FILE.match(entry.name)
                if m:
                    out[m.group(1)][int(m.group(2))] = entry
        return out

    def _prune(self) -> None:
        """Keep the two latest snapshots and the deltas after the older one (a restore starts at the
        latest snapshot before the replayed batch, which is at worst the older of the two)."""
        files = self._files()
        snaps = sorted(files["snapshot"])
        if len(snaps) < 2:
            return
        keep_from = snaps[-2]
        for b, path in files["snapshot"].items():
            if b < keep_from:
                path.unlink(missing_ok=True)
        for b, path in files["delta"].items():
            if b <= keep_from:
                path.unlink(missing_ok=True)

    def last_snapshot(self, upto: int) -> int | None:
        """The batch id of the latest snapshot at or before ``upto``."""
        snaps = [b for b in self._files()["snapshot"] if b <= upto]
        return max(snaps) if snaps else None

    def load(self, upto: int) -> tuple[SubscriptionTable, dict[int, int]] | None:
        """The table and the subscriptions topic's offsets after batch ``upto`` (-1: before any batch);
        None when the files do not cover every batch up to ``upto``."""
        if upto < 0:
            return SubscriptionTable(**self._params), {}
        files = self._files()
        start = self.last_snapshot(upto)
        if start is None:
            table, offsets, first = SubscriptionTable(**self._params), {}, 0
        else:
            doc = orjson.loads(files["snapshot"][start].read_bytes())
            table = SubscriptionTable.restore(doc["filters"], doc["version"], **self._params)
            offsets, first = _int_offsets(doc["offsets"]), start + 1
        for b in range(first, upto + 1):
            path = files["delta"].get(b)
            if path is None:
                return None
            doc = orjson.loads(path.read_bytes())
            table.apply((sid, filt) for sid, filt in doc["changes"])
            if table.version != doc["version"]:
                return None  # the files do not belong together
            offsets = _int_offsets(doc["offsets"])
        return table, offsets


def _json_offsets(offsets: Mapping[int, int]) -> dict[str, int]:
    return {str(p): int(o) for p, o in offsets.items()}


def _int_offsets(offsets: Mapping[str, int]) -> dict[int, int]:
    return {int(p): int(o) for p, o in offsets.items()}
