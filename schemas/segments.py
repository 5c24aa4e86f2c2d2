"""Avro binary columns, a whole batch at a time: byte segments laid out row after row.

Every field of every row is a byte segment (a constant, an entry of a small table, a varint, the
bytes of an Arrow string column), and one compiled gather lays the segments out (:func:`assemble`),
so a batch of records is encoded without a Python loop over records. The producers encode events
this way (``producers.columns``), the matching job its ``Match`` records
(``schemas.match_records``); tests hold both to ``schemas.codec``'s record-at-a-time bytes.

>>> data, offsets = assemble([const(b"<"), varints(np.array([1, -1, 64])), const(b">")], 3)
>>> [bytes(data[a:b]).hex() for a, b in zip(offsets[:-1], offsets[1:])]
['3c023e', '3c013e', '3c80013e']
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit

__all__ = [
    "Segments",
    "assemble",
    "const",
    "copy_bytes",
    "doubles_le",
    "entry_runs",
    "len_prefixed",
    "slotted",
    "split_rows",
    "table",
    "varints",
]


@dataclass(frozen=True)
class Segments:
    """``n`` byte strings: row ``i`` is ``data[starts[i] : starts[i] + lens[i]]``.

    ``starts`` and ``lens`` may be plain ints, meaning the same for every row (a constant).
    """

    data: np.ndarray
    starts: np.ndarray | int
    lens: np.ndarray | int

    @property
    def constant(self) -> bool:
        return isinstance(self.starts, int) and isinstance(self.lens, int)

    def masked(self, present: np.ndarray | None) -> Segments:
        """The same segments, empty in the rows where ``present`` is false."""
        if present is None:
            return self
        return Segments(self.data, self.starts, np.where(present, self.lens, 0))


def const(raw: bytes) -> Segments:
    return Segments(np.frombuffer(raw, np.uint8), 0, len(raw))


def table(entries: Sequence[bytes], codes: np.ndarray) -> Segments:
    """Row ``i`` is ``entries[codes[i]]``."""
    lens = np.fromiter((len(e) for e in entries), np.int64, len(entries))
    starts = np.cumsum(lens) - lens
    return Segments(np.frombuffer(b"".join(entries), np.uint8), starts[codes], lens[codes])


_SHIFTS = np.arange(0, 70, 7, dtype=np.uint64)  # ten 7-bit groups cover 64 bits


@njit(inline="always")
def copy_bytes(out: np.ndarray, p: int, src: np.ndarray, s: int, m: int) -> None:
    """``out[p : p + m] = src[s : s + m]`` in compiled code, for ``p, s, m >= 0``.

    The indices are unsigned: with signed ones numba checks every index for a negative value (to
    wrap it around), which keeps LLVM from vectorizing the loop
    (docs/decisions/match-records-encoded-in-workers.md).
    """
    pu, su = np.uint64(p), np.uint64(s)
    for b in range(np.uint64(m)):
        out[pu + b] = src[su + b]


def varints(values: np.ndarray | int) -> Segments:
    """Avro's zig-zag varint of each value (``long`` and ``int``; lengths and counts too)."""
    if isinstance(values, int):
        from schemas.fastenc import zigzag

        return const(zigzag(values))
    v = values.astype(np.int64)
    z = ((v << 1) ^ (v >> 63)).view(np.uint64)
    if len(z) and int(z.max()) < 0x80:  # the usual case for lengths and small numbers: one byte
        return Segments(z.astype(np.uint8), np.arange(len(z)), 1)
    groups = ((z[:, None] >> _SHIFTS) & np.uint64(0x7F)).astype(np.uint8)
    nbytes = 1 + np.count_nonzero(z[:, None] >> _SHIFTS[1:], axis=1)
    groups[np.arange(10) < (nbytes - 1)[:, None]] |= 0x80
    return Segments(groups.ravel(), np.arange(len(z)) * 10, nbytes)


def doubles_le(values: np.ndarray) -> Segments:
    """Avro's ``double``: 8 bytes, little-endian IEEE 754."""
    data = np.ascontiguousarray(values, dtype="<f8").view(np.uint8)
    return Segments(data, np.arange(len(values)) * 8, 8)


def assemble(parts: Sequence[Segments], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate the parts row by row: row ``i`` is part 0's row ``i``, part 1's row ``i``, ...

    Returns the bytes of all rows (uint8) and the ``n + 1`` row offsets into them.
    """
    merged: list[Segments] = []
    for p in parts:  # neighbouring constants become one segment
        if merged and p.constant and merged[-1].constant:
            merged[-1] = const(merged[-1].data.tobytes() + p.data.tobytes())
        else:
            merged.append(p)
    varying = [p for p in merged if not p.constant]
    starts = np.empty((len(varying), n), np.int64)
    lens = np.empty((len(varying), n), np.int64)
    part_start = np.empty(len(merged), np.int64)  # a constant's start, or -1 - its row in the matrices
    part_len = np.empty(len(merged), np.int64)
    base, v = 0, 0
    for j, p in enumerate(merged):
        if p.constant:
            part_start[j], part_len[j] = base + int(p.starts), int(p.lens)
        else:
            starts[v] = p.starts
            starts[v] += base
            lens[v] = p.lens
            part_start[j], part_len[j] = -1 - v, 0
            v += 1
        base += len(p.data)
    source = np.concatenate([p.data for p in merged])
    offsets = np.zeros(n + 1, np.int64)
    offsets[1:] = np.cumsum(lens.sum(axis=0) + part_len.sum())
    out = np.empty(int(offsets[-1]), np.uint8)
    _gather(source, part_start, part_len, starts, lens, offsets, out)
    return out, offsets


@njit(cache=True)
def _gather(
    source: np.ndarray,
    part_start: np.ndarray,
    part_len: np.ndarray,
    starts: np.ndarray,
    lens: np.ndarray,
    offsets: np.ndarray,
    out: np.ndarray,
) -> None:
    """The copy loop of :func:`assemble` (compiled: a numpy gather needs an index per byte).

    Rows go in blocks, part by part within a block, so that the (varying parts, rows) matrices
    ``starts`` and ``lens`` are read in order and the block's output stays in cache.
    """
    n = offsets.shape[0] - 1
    block = 512
    pos = np.empty(block, np.int64)
    for b0 in range(0, n, block):
        b1 = min(n, b0 + block)
        for i in range(b0, b1):
            pos[i - b0] = offsets[i]
        for j in range(part_start.shape[0]):
            v = -1 - part_start[j]
            for i in range(b0, b1):
                if v < 0:
                    s, m = part_start[j], part_len[j]
                else:
                    s, m = starts[v, i], lens[v, i]
                p = pos[i - b0]
                copy_bytes(out, p, source, s, m)
                pos[i - b0] = p + m


_SLOT_WIDTHS = (8, 16, 32, 64)


def slotted(entries: Segments) -> np.ndarray | None:
    """``entries`` (a table) in fixed slots, for :func:`entry_runs`: row ``c`` holds entry ``c``'s
    bytes and its length in the last byte, so that reading an entry touches one cache line rather
    than three (its start, its length, its bytes), which is what copying thousands of entries
    picked at random from a large table costs. None when an entry is too long for 64-byte slots."""
    starts = np.asarray(entries.starts, np.int64)
    lens = np.asarray(entries.lens, np.int64)
    longest = int(lens.max()) if len(lens) else 0
    width = next((w for w in _SLOT_WIDTHS if longest < w), None)
    if width is None:
        return None
    slots = np.zeros((len(lens), width), np.uint8)
    _fill_slots(entries.data, starts, lens, slots)
    return slots


@njit(cache=True)
def _fill_slots(data: np.ndarray, starts: np.ndarray, lens: np.ndarray, slots: np.ndarray) -> None:
    last = slots.shape[1] - 1
    for c in range(lens.shape[0]):
        copy_bytes(slots[c], 0, data, starts[c], lens[c])
        slots[c, last] = lens[c]


def entry_runs(
    entries: Segments, codes: np.ndarray, code_offsets: np.ndarray, slots: np.ndarray | None = None
) -> Segments:
    """Row ``i``: the ``entries`` of ``codes[code_offsets[i] : code_offsets[i + 1]]``, one after another
    (``entries`` a table: ``starts`` and ``lens`` arrays indexed by code), as one segment per row.
    ``slots``, the entries' :func:`slotted` copy when the caller keeps one, makes it faster.

    >>> t = Segments(np.frombuffer(b"abc", np.uint8), np.array([0, 1, 2]), np.array([1, 1, 1]))
    >>> runs = entry_runs(t, np.array([2, 0, 1, 1]), np.array([0, 2, 2, 4]))
    >>> [bytes(runs.data[s : s + m]) for s, m in zip(runs.starts, runs.lens)]
    [b'ca', b'', b'bb']
    >>> fast = entry_runs(t, np.array([2, 0, 1, 1]), np.array([0, 2, 2, 4]), slotted(t))
    >>> [bytes(fast.data[s : s + m]) for s, m in zip(fast.starts, fast.lens)]
    [b'ca', b'', b'bb']
    """
    n = len(code_offsets) - 1
    lens = np.empty(n, np.int64)
    if slots is not None:  # the entries' slotted() copy: one pass, one cache line per entry
        out = np.empty(len(codes) * (slots.shape[1] - 1), np.uint8)
        row_starts = np.empty(n, np.int64)
        used = _copy_slotted(slots, codes, code_offsets, row_starts, lens, out)
        return Segments(out[:used], row_starts, lens)
    starts = np.asarray(entries.starts, np.int64)
    entry_lens = np.asarray(entries.lens, np.int64)
    _run_lengths(entry_lens, codes, code_offsets, lens)
    row_starts = np.cumsum(lens) - lens
    out = np.empty(int(lens.sum()), np.uint8)
    _copy_runs(entries.data, starts, entry_lens, codes, code_offsets, row_starts, out)
    return Segments(out, row_starts, lens)


@njit(cache=True)
def _run_lengths(entry_lens: np.ndarray, codes: np.ndarray, code_offsets: np.ndarray, lens: np.ndarray) -> None:
    for i in range(code_offsets.shape[0] - 1):
        t = 0
        for j in range(code_offsets[i], code_offsets[i + 1]):
            t += entry_lens[codes[j]]
        lens[i] = t


@njit(cache=True)
def _copy_runs(
    data: np.ndarray,
    starts: np.ndarray,
    entry_lens: np.ndarray,
    codes: np.ndarray,
    code_offsets: np.ndarray,
    row_starts: np.ndarray,
    out: np.ndarray,
) -> None:
    """The copy loop of :func:`entry_runs`."""
    for i in range(code_offsets.shape[0] - 1):
        p = row_starts[i]
        for j in range(code_offsets[i], code_offsets[i + 1]):
            c = codes[j]
            copy_bytes(out, p, data, starts[c], entry_lens[c])
            p += entry_lens[c]


@njit(cache=True)
def _copy_slotted(
    slots: np.ndarray,
    codes: np.ndarray,
    code_offsets: np.ndarray,
    row_starts: np.ndarray,
    lens: np.ndarray,
    out: np.ndarray,
) -> int:
    """The copy loop of :func:`entry_runs` from slots; returns the bytes written."""
    last = slots.shape[1] - 1
    p = 0
    for i in range(code_offsets.shape[0] - 1):
        row_starts[i] = p
        for j in range(code_offsets[i], code_offsets[i + 1]):
            c = codes[j]
            copy_bytes(out, p, slots[c], 0, last)  # the whole slot: a fixed-length copy, no branch on m
            p += slots[c, last]
        lens[i] = p - row_starts[i]
    return p


def split_rows(data: np.ndarray, offsets: np.ndarray) -> list[bytes]:
    raw = data.tobytes()
    bounds = offsets.tolist()
    return [raw[a:b] for a, b in itertools.pairwise(bounds)]


def len_prefixed(segs: list[Segments], n: int) -> list[Segments]:
    """Avro's string: the byte length as a varint, then the bytes."""
    if all(s.constant for s in segs):
        total: np.ndarray | int = sum(int(s.lens) for s in segs)
    else:
        total = np.zeros(n, np.int64)
        for s in segs:
            total = total + s.lens
    return [varints(total), *segs]
