"""The matching job's subscription table, persisted per micro-batch beside Spark's checkpoint.

Spark's checkpoint makes a micro-batch replayable: after a crash, the batch that was planned but
not committed runs again over exactly the same offsets. For the matching job that is only half
the story: the batch's events must also be matched against the same subscriptions as the first
time. So the job writes, for every micro-batch ``B`` before it writes any output of ``B``:

- ``delta-B.json``: the subscription changes that ``B`` read (in order), the table version after
  them and the subscriptions topic's end offsets of ``B``; or
- ``snapshot-B.json``: the whole table after ``B`` (every ``snapshot_every`` batches, and when many
  changes piled up), with the version and offsets. A periodic snapshot of a table that did not
  change since the last one (same version, same offsets) is a hard link to that file, whose
  ``batch_id`` field keeps the batch it was written for: a file's batch is the one in its name.

The state a batch ``B`` starts from is then "latest snapshot at or before ``B - 1``, plus the
deltas after it up to ``B - 1``": a pure function of committed history, the same on a replay. A
replay rewrites its own ``delta-B`` with identical content. Writes are atomic (temporary file,
then rename). A gap in the chain (a file lost) makes ``load`` return None, and the job then
rebuilds the table from the compacted subscriptions topic instead.

Beside them, ``CompiledIndexFolder`` keeps the compiled form of a worker's index
(``MatchIndex.to_arrays``, with the ``id -> filter text`` map it holds) in ``compiled/``: a Python
worker that built its index from a snapshot saves it there, and a new worker (a restarted job)
loads the latest one and applies only what differs from the snapshot it is shipped, instead of
compiling every filter again (``routing.matching.table.IndexReplica``;
docs/decisions/compiled-index.md). The workers must share the driver's disk (local mode); where
they do not, the folder is theirs alone and a restart compiles as before.

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

import logging
import os
import re
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from routing.matching.digest import texts_digest
from routing.matching.index import MatchIndex
from routing.matching.packing import pack_strings, unpack_strings
from routing.matching.table import Change, LoadedIndex, SubscriptionTable

__all__ = ["CompiledIndexFolder", "TableStore"]

_FILE = re.compile(r"^(snapshot|delta)-(\d+)\.json$")
_COMPILED = re.compile(r"^index-(\d+)\.npz$")
_TEXT_ARRAYS = ("filter_ids", "filter_id_offsets", "filter_texts", "filter_offsets")
_BESIDE_INDEX = (*_TEXT_ARRAYS, "lineage", "texts_digest")  # in a compiled file, not the index's arrays
_log = logging.getLogger(__name__)


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
        # (batch id, (version, offsets)) of the last snapshot written by this object
        self._last_written: tuple[int, tuple[int, dict[str, int]]] | None = None

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
        """Record the whole table after batch ``batch_id``; prune what no restore can need any more.

        When the table's version and the offsets are those of the snapshot this store wrote last,
        the table is the same, so the new snapshot is a hard link to that file: a periodic
        snapshot of an unchanged table (the matching job takes one every ``snapshot_every``
        batches to bound the chain of deltas) costs no serialisation and no write.
        """
        key = (version, _json_offsets(offsets))
        last = self._last_written
        if last is not None and last[1] == key and last[0] != batch_id:
            source = self.folder / f"snapshot-{last[0]}.json"
            tmp = self.folder / f".snapshot-{batch_id}.json.tmp"
            try:
                tmp.unlink(missing_ok=True)
                os.link(source, tmp)
                os.replace(tmp, self.folder / f"snapshot-{batch_id}.json")
                self._last_written = (batch_id, key)
                self._prune()
                return
            except OSError:  # the source was removed, or links are not supported: write it out
                tmp.unlink(missing_ok=True)
        doc = {"batch_id": batch_id, "version": version, "offsets": key[1], "filters": dict(filters.items())}
        self._write(f"snapshot-{batch_id}.json", doc)
        self._last_written = (batch_id, key)
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


class CompiledIndexFolder:
    """Compiled indexes in one folder (``routing.matching.table.CompiledStore``).

    ``index-<version>.npz`` holds ``MatchIndex.to_arrays`` of an index equal to the table at
    ``version``, the ``id -> filter text`` map it holds as packed strings (``filter_ids``,
    ``filter_texts`` and their offsets), the map's digest (``texts_digest``: the hex of
    ``routing.matching.digest.texts_digest``, ASCII bytes) and the table's lineage (``lineage``,
    UTF-8 bytes), written uncompressed (``numpy.savez``) to a temporary file and renamed, so a
    reader sees a whole file or none. ``load`` reads the most recently written one, without its
    texts when asked for the digest it has; a file that does not load (damaged, another format or
    Python) is logged and skipped. Files written before the digest (2026-11-28) load with their
    texts. Only the ``keep`` newest files stay.

    >>> import tempfile
    >>> folder = CompiledIndexFolder(Path(tempfile.mkdtemp()))
    >>> folder.holds_any()
    False
    >>> index = MatchIndex()
    >>> index.apply([("s1", "x > 1")])
    >>> folder.save(index, {"s1": "x > 1"}, 7)
    >>> folder.holds_any()
    True
    >>> loaded = folder.load()
    >>> loaded.index.match([{"x": 2}]).ids(0), loaded.texts, loaded.version
    (['s1'], {'s1': 'x > 1'}, 7)
    >>> from routing.matching.digest import texts_digest
    >>> folder.load(texts_digest({"s1": "x > 1"})).texts is None  # the texts asked for: not read
    True
    >>> folder.texts(7, ""), folder.texts(7, "another run"), folder.texts(8, "")
    ({'s1': 'x > 1'}, None, None)
    """

    def __init__(self, folder: Path, keep: int = 2) -> None:
        self.folder = folder
        self.keep = keep

    def holds_any(self) -> bool:
        """Whether the folder holds a compiled index (a fresh start's does not)."""
        return bool(self._files())

    def _files(self) -> list[Path]:
        """The compiled indexes, the most recently written first."""
        if not self.folder.is_dir():
            return []
        found = []
        for entry in self.folder.iterdir():
            if _COMPILED.match(entry.name):
                try:
                    found.append((entry.stat().st_mtime_ns, entry.name, entry))
                except FileNotFoundError:  # pruned by another worker meanwhile
                    continue
        return [path for _, _, path in sorted(found, reverse=True)]

    def save(self, index: MatchIndex, filters: Mapping[str, str], version: int, lineage: str = "") -> None:
        """Write ``index`` (equal to the table of ``lineage`` at ``version``) with the texts it
        holds, unless a file of that version is there; keep the ``keep`` newest files."""
        path = self.folder / f"index-{version}.npz"
        if path.exists():
            return
        arrays = index.to_arrays()
        ids, id_offsets = pack_strings(list(filters))
        texts, text_offsets = pack_strings(list(filters.values()))
        arrays.update(filter_ids=ids, filter_id_offsets=id_offsets, filter_texts=texts, filter_offsets=text_offsets)
        arrays["lineage"] = np.frombuffer(lineage.encode(), np.uint8)
        arrays["texts_digest"] = np.frombuffer(texts_digest(filters).encode(), np.uint8)
        tmp = self.folder / f".index-{version}-{os.getpid()}.tmp"
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with tmp.open("wb") as f:
                np.savez(f, **arrays)  # type: ignore[arg-type]
            os.replace(tmp, path)
        except OSError as exc:  # a full or read-only disk costs the next start its shortcut, nothing else
            tmp.unlink(missing_ok=True)
            _log.warning(f"compiled index {path} not written ({exc})")
            return
        for old in self._files()[self.keep :]:
            old.unlink(missing_ok=True)

    def load(self, digest: str | None = None) -> LoadedIndex | None:
        """The most recently written index that loads, with the texts it holds, or without them
        (not read) when they have ``digest``; None if none loads."""
        for path in self._files():
            try:
                with np.load(path) as npz:
                    names = set(npz.files)
                    same = (
                        digest is not None
                        and "texts_digest" in names
                        and npz["texts_digest"].tobytes() == digest.encode()
                    )
                    lineage = npz["lineage"].tobytes().decode() if "lineage" in names else ""
                    skipped = _BESIDE_INDEX if same else ("lineage", "texts_digest")
                    arrays = {name: npz[name] for name in npz.files if name not in skipped}
                held = None
                if not same:
                    ids = unpack_strings(arrays.pop("filter_ids"), arrays.pop("filter_id_offsets"))
                    texts = unpack_strings(arrays.pop("filter_texts"), arrays.pop("filter_offsets"))
                    held = dict(zip(ids, texts, strict=True))
                version = int(path.name[len("index-") : -len(".npz")])
                return LoadedIndex(MatchIndex.from_arrays(arrays), held, version, lineage)
            except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
                _log.warning(f"compiled index {path} does not load ({exc}); skipped")
        return None

    def texts(self, version: int, lineage: str) -> dict[str, str] | None:
        """The ``id -> filter text`` map saved at ``version`` under ``lineage`` (only those arrays
        read), or None when no such file loads."""
        try:
            with np.load(self.folder / f"index-{version}.npz") as npz:
                if "lineage" not in npz.files or npz["lineage"].tobytes() != lineage.encode():
                    return None
                ids = unpack_strings(npz["filter_ids"], npz["filter_id_offsets"])
                texts = unpack_strings(npz["filter_texts"], npz["filter_offsets"])
        except (OSError, ValueError, KeyError, zipfile.BadZipFile):
            return None
        return dict(zip(ids, texts, strict=True))
