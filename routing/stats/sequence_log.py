"""The sequence numbers a receiver has seen, as runs: a mergeable summary for loss counting.

A sender numbers its messages 0, 1, 2, ... in sending order; the receiver sees the ones not lost,
possibly reordered or duplicated. :class:`SequenceLog` keeps the union of the numbers seen as
sorted, disjoint runs [start, end] of consecutive numbers, so its size is the number of gaps, not
of messages, and duplicates vanish. From it, received = distinct numbers seen and expected =
last - first + 1 (docs/reference/reliability-model.md §6.5); their ratio is the delivery ratio, a link's r_l.

Invariant: the log of any split of the numbers, added or merged in any order, equals the log of
the set of all of them.

Examples
--------
>>> log = SequenceLog()
>>> log.add([0, 1, 2, 5, 5, 3])
>>> log.received, log.expected, log.runs
(5, 6, 2)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from routing.stats.state import State, pack_state, unpack_state

__all__ = ["SequenceLog"]

IntArray = NDArray[np.int64]


def _union_runs(starts: IntArray, ends: IntArray) -> tuple[IntArray, IntArray]:
    """The union of the integer ranges [starts[i], ends[i]] as sorted, disjoint, non-adjacent runs."""
    if starts.size == 0:
        return starts, ends
    order = np.lexsort((ends, starts))
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=np.bool_)
    new[1:] = s[1:] > reach[:-1] + 1
    first = np.flatnonzero(new)
    return s[first], np.maximum.reduceat(e, first)


class SequenceLog:
    """The distinct sequence numbers a link's receiver has seen, as runs of consecutive numbers.

    A link numbers its transmissions 0, 1, 2, ... in sending order (SiftStream ``LinkSample.seq``);
    the receiver sees the ones not lost, possibly reordered or duplicated. The log keeps the union as
    runs [start, end], so its size is the number of gaps, not of messages, and duplicates vanish.
    docs/reference/reliability-model.md §6.5: received = distinct numbers seen, expected = last - first + 1.

    Examples
    --------
    >>> log = SequenceLog()
    >>> log.add([0, 1, 2, 5, 5, 3])
    >>> log.received, log.expected, log.runs
    (5, 6, 2)
    """

    __slots__ = ("_ends", "_starts")

    def __init__(self) -> None:
        self._starts: IntArray = np.empty(0, dtype=np.int64)
        self._ends: IntArray = np.empty(0, dtype=np.int64)

    def add(self, values: ArrayLike) -> None:
        """Add received sequence numbers (integers >= 0; any order, duplicates allowed)."""
        seq = np.unique(np.asarray(values, dtype=np.int64).reshape(-1))
        if seq.size == 0:
            return
        if seq[0] < 0:
            raise ValueError(f"SequenceLog.add: sequence numbers must be >= 0 (got {int(seq[0])})")
        cut = np.flatnonzero(np.diff(seq) > 1) + 1
        starts = seq[np.concatenate(([0], cut))]
        ends = seq[np.concatenate((cut - 1, [len(seq) - 1]))]
        self._starts, self._ends = _union_runs(
            np.concatenate((self._starts, starts)), np.concatenate((self._ends, ends))
        )

    def merge(self, other: SequenceLog) -> None:
        self._starts, self._ends = _union_runs(
            np.concatenate((self._starts, other._starts)), np.concatenate((self._ends, other._ends))
        )

    def copy(self) -> SequenceLog:
        out = SequenceLog()
        out._starts, out._ends = self._starts.copy(), self._ends.copy()
        return out

    @property
    def received(self) -> int:
        """Distinct sequence numbers seen."""
        return int((self._ends - self._starts + 1).sum())

    @property
    def expected(self) -> int:
        """last - first + 1 (0 when empty)."""
        return int(self._ends[-1] - self._starts[0] + 1) if self._starts.size else 0

    @property
    def runs(self) -> int:
        """Runs of consecutive numbers: the log's size."""
        return int(self._starts.size)

    def to_state(self) -> State:
        return {"starts": self._starts.copy(), "ends": self._ends.copy()}

    @classmethod
    def from_state(cls, state: Mapping[str, NDArray[Any]]) -> SequenceLog:
        out = cls()
        out._starts = np.asarray(state["starts"], dtype=np.int64).copy()
        out._ends = np.asarray(state["ends"], dtype=np.int64).copy()
        return out

    def to_bytes(self) -> bytes:
        return pack_state("SequenceLog", self.to_state())

    @classmethod
    def from_bytes(cls, data: bytes) -> SequenceLog:
        return cls.from_state(unpack_state("SequenceLog", data))

    def __repr__(self) -> str:
        return f"SequenceLog(received={self.received}, expected={self.expected}, runs={self.runs})"
