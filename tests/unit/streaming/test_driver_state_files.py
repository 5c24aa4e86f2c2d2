"""streaming.driver_batch.DriverBatch's state files: whole states, changes between them, which
files are kept, and the state restored for a batch replayed after a crash."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from streaming import driver_batch
from streaming.driver_batch import SNAPSHOT_EVERY, BatchStats, DriverBatch


class Counter(DriverBatch):
    """A step object that is a list of the batch ids it saw; its changes are the ids since the
    last dump (None when ``changes`` is false: whole states only)."""

    job = "counter"

    def __init__(self, folder: Path, changes: bool) -> None:
        super().__init__(None, None, {}, folder)  # type: ignore[arg-type]
        self.changes = changes
        self.seen: list[int] = []
        self.unsaved: list[int] = []

    def new_state(self) -> None:
        self.seen, self.unsaved = [], []

    def load_state(self, blob: bytes) -> None:
        self.seen, self.unsaved = json.loads(blob), []

    def dump_state(self) -> bytes:
        self.unsaved = []
        return json.dumps(self.seen).encode()

    def dump_changes(self) -> bytes | None:
        if not self.changes:
            return None
        blob, self.unsaved = json.dumps(self.unsaved).encode(), []
        return blob

    def load_changes(self, blob: bytes) -> None:
        self.seen += json.loads(blob)

    def step(self, tables: dict[str, Any], stats: BatchStats) -> list[tuple[str, bytes, bytes]]:
        return []

    def run(self, batch_id: int) -> None:
        """What ``__call__`` does with the state around the step."""
        if not self.ready:
            self._restore(batch_id)
        self.seen.append(batch_id)
        self.unsaved.append(batch_id)
        self.max_time_ms = float(batch_id)
        self._save(batch_id)


@pytest.mark.parametrize("changes", [True, False])
def test_every_recent_batch_restores_and_old_files_go(tmp_path: Path, changes: bool) -> None:
    job = Counter(tmp_path, changes)
    last = 2 * SNAPSHOT_EVERY + 7
    for b in range(last + 1):
        job.run(b)
    for b in range(last - driver_batch.KEEP_STATES, last + 1):  # a restart at b + 1 reads b's state
        again = Counter(tmp_path, changes)
        again._restore(b + 1)
        assert again.seen == list(range(b + 1)) and again.max_time_ms == b
    names = sorted(p.name for p in tmp_path.iterdir())
    if changes:  # the whole state at 2 * SNAPSHOT_EVERY and the changes after it
        assert names == sorted(
            [f"{2 * SNAPSHOT_EVERY}.npz"] + [f"{b}.delta" for b in range(2 * SNAPSHOT_EVERY + 1, last + 1)]
        )
    else:
        assert names == sorted(f"{b}.npz" for b in range(last - driver_batch.KEEP_STATES, last + 1))


def test_a_replayed_batch_goes_on_from_the_state_before_it(tmp_path: Path) -> None:
    """A crash after batch 26's state was saved but before Spark committed it: the next life runs
    batch 26 again from batch 25's state (a whole state and five changes) and saves it again."""
    first = Counter(tmp_path, True)
    for b in range(27):
        first.run(b)
    second = Counter(tmp_path, True)
    for b in range(26, 45):
        second.run(b)
    assert second.seen == list(range(45))
    third = Counter(tmp_path, True)
    third._restore(45)
    assert third.seen == list(range(45))


def test_a_broken_chain_starts_empty(tmp_path: Path) -> None:
    job = Counter(tmp_path, True)
    for b in range(5):
        job.run(b)
    (tmp_path / "0.npz").unlink()
    again = Counter(tmp_path, True)
    again._restore(5)
    assert again.seen == []
