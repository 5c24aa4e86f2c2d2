"""Open-addressing tables of int64 keys for ``MatchIndex``: a distinct filter's fid by its dedup
key, a subscription's slot by its id (numba kernels, no Python object per entry).

A Python ``dict`` from an int to an int holds, per entry, its slot (about 40 bytes with the index
arrays) and two int objects (28-32 bytes each); at a million subscriptions the index's two maps
(fid by key, slot by id) held about 160 bytes per subscription. Here a map holds one ``int32``
per slot of a power-of-two table, at most five eighths full: about 8 bytes per entry, the keys
themselves being read from an array the owner already keeps (``MatchIndex._f_key``, or
``SubscriptionSlots.hashes``).

:class:`KeyTable`
    A set of values ``v`` (fids, slots: small non-negative ints) found by their key
    ``keys_of[v]``. The owner passes ``keys_of`` to every call and must not change ``keys_of[v]``
    while ``v`` is in the table. Linear probing from the key's Fibonacci hash; a deletion shifts
    the entries after it back (no tombstones, so lookups never slow down with churn).
:class:`SubscriptionSlots`
    ``subscription id -> slot``: the slots' ids (``names``), their free list, and a ``KeyTable``
    of the ids' ``hash``. A found slot is checked against its name, so two ids of one hash never
    mix: the second one and any later ones go to a small ``dict`` (``overflow``), which is
    otherwise empty.

Examples
--------
>>> keys = np.asarray([70, -5, 2**40], dtype=np.int64)
>>> table = KeyTable()
>>> table.add(keys, np.asarray([0, 1, 2])).tolist()  # each value inserted: itself
[0, 1, 2]
>>> table.find(keys, np.asarray([-5, 7, 2**40])).tolist()
[1, -1, 2]
>>> table.discard(keys, np.asarray([1])); table.find(keys, np.asarray([-5])).tolist(), len(table)
([-1], 2)
>>> slots = SubscriptionSlots()
>>> slots.assign(["s1", "s2"]).tolist(), slots.find(["s2", "s3"]).tolist()
([0, 1], [1, -1])
>>> slots.release(np.asarray([0])); slots.assign(["s4"]).tolist(), slots.names
([0], ['s4', 's2'])
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Iterator, Sequence
from itertools import compress, repeat
from operator import eq, is_not
from typing import Any, cast

import numpy as np
import numpy.typing as npt
from numba import njit

__all__ = ["KeyTable", "SubscriptionSlots", "add_keys", "discard_values", "find_keys"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # 2**64 / the golden ratio: Fibonacci hashing
_GOLDEN_INT = 0x9E3779B97F4A7C15
_MASK64 = (1 << 64) - 1
_MIN_BITS = 4
_EMPTY = -1


@njit(cache=True, inline="always")
def _home(key, shift, mask):  # type: ignore[no-untyped-def]
    """The table slot a key's probe starts at: the top bits of ``key`` times the golden ratio."""
    return np.int64((np.uint64(key) * _GOLDEN) >> shift) & mask


@njit(cache=True)
def find_keys(table, shift, keys_of, keys, out):  # type: ignore[no-untyped-def]
    """``out[i]``: the value ``v`` in ``table`` with ``keys_of[v] == keys[i]``, or -1."""
    mask = len(table) - 1
    for i in range(len(keys)):
        k = keys[i]
        p = _home(k, shift, mask)
        out[i] = -1
        while True:
            v = table[p]
            if v < 0:
                break
            if keys_of[v] == k:
                out[i] = v
                break
            p = (p + 1) & mask


@njit(cache=True)
def add_keys(table, shift, keys_of, values, out):  # type: ignore[no-untyped-def]
    """Insert each ``values[i]`` under ``keys_of[values[i]]`` unless a value of that key is there
    (``dict.setdefault``, in order): ``out[i]`` is the value the key has after the step. The table
    must have room for all of them. Returns how many were inserted."""
    mask = len(table) - 1
    added = 0
    for i in range(len(values)):
        v = values[i]
        k = keys_of[v]
        p = _home(k, shift, mask)
        while True:
            t = table[p]
            if t < 0:
                table[p] = v
                out[i] = v
                added += 1
                break
            if keys_of[t] == k:
                out[i] = t
                break
            p = (p + 1) & mask
    return added


@njit(cache=True)
def discard_values(table, shift, keys_of, values):  # type: ignore[no-untyped-def]
    """Remove each of ``values`` that is in the table (found from ``keys_of[v]``), shifting the
    entries after it back to where their probes reach them. Returns how many were removed."""
    mask = len(table) - 1
    removed = 0
    for i in range(len(values)):
        v = values[i]
        p = _home(keys_of[v], shift, mask)
        while table[p] >= 0 and table[p] != v:
            p = (p + 1) & mask
        if table[p] < 0:
            continue
        removed += 1
        hole = p
        q = (p + 1) & mask
        while table[q] >= 0:
            h = _home(keys_of[table[q]], shift, mask)
            # the entry at q may fill the hole unless its home lies cyclically in (hole, q]
            stays = (hole < h <= q) if hole < q else (h > hole or h <= q)
            if not stays:
                table[hole] = table[q]
                hole = q
            q = (q + 1) & mask
        table[hole] = -1
    return removed


class KeyTable:
    """Values found by their int64 key ``keys_of[value]`` (see the module docstring).

    ``find``, ``add`` and ``discard`` take the owner's ``keys_of`` array and int64 keys or values
    (any integer sequence); the table grows by doubling once more than five eighths of it would
    be full, and shrinks by half once under an eighth is.

    Examples
    --------
    >>> keys = np.arange(100, dtype=np.int64) * 7
    >>> table = KeyTable()
    >>> table.add(keys, np.arange(100)).tolist() == list(range(100)), len(table), table.nbytes
    (True, 100, 1024)
    >>> table.discard(keys, np.arange(0, 100, 2)); table.find(keys, keys[:4]).tolist()
    [-1, 1, -1, 3]
    """

    def __init__(self) -> None:
        self._table = np.full(1 << _MIN_BITS, _EMPTY, dtype=np.int32)
        self._shift = np.uint64(64 - _MIN_BITS)
        self._count = 0

    def __len__(self) -> int:
        return self._count

    @property
    def nbytes(self) -> int:
        return int(self._table.nbytes)

    def find(self, keys_of: npt.NDArray[np.int64], keys: Any) -> npt.NDArray[np.int64]:
        """The value of each key (-1 for none)."""
        keys = np.asarray(keys, dtype=np.int64)
        out = np.empty(len(keys), dtype=np.int64)
        find_keys(self._table, self._shift, keys_of, keys, out)
        return out

    def find_one(self, keys_of: npt.NDArray[np.int64], key: int) -> int:
        """The value of one key (-1 for none), probed in Python: cheaper than ``find`` for one key.

        >>> keys = np.asarray([5, -9], dtype=np.int64)
        >>> table = KeyTable(); _ = table.add(keys, [0, 1])
        >>> table.find_one(keys, -9), table.find_one(keys, 7)
        (1, -1)
        """
        table = self._table
        mask = len(table) - 1
        p = ((key & _MASK64) * _GOLDEN_INT & _MASK64) >> int(self._shift)
        while True:
            v = table.item(p)
            if v < 0 or keys_of.item(v) == key:
                return int(v)
            p = (p + 1) & mask

    def add(self, keys_of: npt.NDArray[np.int64], values: Any) -> npt.NDArray[np.int64]:
        """Insert each value under its key unless the key has a value (in order, as
        ``dict.setdefault``); the value each key has afterwards (equal to the one given where
        it was inserted)."""
        values = np.asarray(values, dtype=np.int64)
        self._fit(keys_of, self._count + len(values))
        out = np.empty(len(values), dtype=np.int64)
        self._count += int(add_keys(self._table, self._shift, keys_of, values, out))
        return out

    def discard(self, keys_of: npt.NDArray[np.int64], values: Any) -> None:
        """Remove the values that are in the table (those that are not are ignored)."""
        values = np.asarray(values, dtype=np.int64)
        if len(values):
            self._count -= int(discard_values(self._table, self._shift, keys_of, values))
            self._fit(keys_of, self._count)

    def _fit(self, keys_of: npt.NDArray[np.int64], count: int) -> None:
        """A table of a size for ``count`` entries, rebuilt from the present ones if it changes."""
        size = len(self._table)
        if count * 8 > size * 5:
            new = size
            while count * 8 > new * 5:
                new *= 2
        elif count * 8 < size and size > 1 << _MIN_BITS:
            new = 1 << max(_MIN_BITS, (count * 4).bit_length())
        else:
            return
        values = self._table[self._table >= 0].astype(np.int64)
        self._table = np.full(new, _EMPTY, dtype=np.int32)
        self._shift = np.uint64(64 - (new.bit_length() - 1))
        out = np.empty(len(values), dtype=np.int64)
        add_keys(self._table, self._shift, keys_of, values, out)


class SubscriptionSlots:
    """``subscription id -> slot`` (see the module docstring).

    ``names[s]`` is slot ``s``'s id (None when free), ``hashes[s]`` that id's ``hash``; freed
    slots are taken again, the last freed first. Ids are found by hash and checked by name; an
    id whose hash another present id already has lives in ``overflow``.

    Examples
    --------
    >>> slots = SubscriptionSlots()
    >>> slots.assign(["a", "b", "c"]).tolist(), len(slots), "b" in slots
    ([0, 1, 2], 3, True)
    >>> slots.release(slots.find(["a", "c"])); slots.find(["a", "b", "c"]).tolist(), slots.free
    ([-1, 1, -1], [0, 2])
    """

    def __init__(self) -> None:
        self.names: list[str | None] = []
        self.free: list[int] = []
        self.hashes = np.zeros(64, dtype=np.int64)
        self.overflow: dict[str, int] = {}
        self._table = KeyTable()

    key = staticmethod(hash)
    """An id's int64 key: Python's ``hash`` (a test gives ids of one key to reach the overflow)."""

    @classmethod
    def of(cls, names: list[str | None], free: Sequence[int]) -> SubscriptionSlots:
        """Slots named ``names`` (None where free), with the free list ``free``."""
        slots = cls()
        slots.names, slots.free = names, list(free)
        named = np.fromiter(map(is_not, names, repeat(None)), dtype=np.bool_, count=len(names))
        slots.hashes = np.zeros(max(64, len(names)), dtype=np.int64)
        slots._put(cast(list[str], list(compress(names, named.tolist()))), np.flatnonzero(named))
        return slots

    def __len__(self) -> int:
        return len(self._table) + len(self.overflow)

    def __contains__(self, subscription_id: object) -> bool:
        return isinstance(subscription_id, str) and self.slot(subscription_id) >= 0

    def slot(self, subscription_id: str) -> int:
        """One id's slot (-1 for an id not present), found without building an array.

        >>> slots = SubscriptionSlots(); _ = slots.assign(["a", "b"])
        >>> slots.slot("b"), slots.slot("c")
        (1, -1)
        """
        if self.overflow:
            got = self.overflow.get(subscription_id)
            if got is not None:
                return got
        s = self._table.find_one(self.hashes, self.key(subscription_id))
        return s if s >= 0 and self.names[s] == subscription_id else -1

    @property
    def nbytes(self) -> int:
        """Bytes of the table, the hashes and the names list (not the ids themselves)."""
        return self._table.nbytes + int(self.hashes.nbytes) + sys.getsizeof(self.names) + sys.getsizeof(self.free)

    def find(self, ids: Sequence[str]) -> npt.NDArray[np.int64]:
        """Each id's slot (-1 for an id not present)."""
        hashes = np.fromiter(map(self.key, ids), dtype=np.int64, count=len(ids))
        got = self._table.find(self.hashes, hashes)
        names = self.names
        found = got >= 0
        same = np.fromiter(
            map(eq, map(names.__getitem__, got[found].tolist()), compress(ids, found.tolist())),
            dtype=np.bool_,
            count=int(found.sum()),
        )
        if not same.all():  # an id of another id's hash: not that slot (it may be in the overflow)
            got[np.flatnonzero(found)[~same]] = -1
        if self.overflow:
            for i in np.flatnonzero(got < 0).tolist():
                got[i] = self.overflow.get(ids[i], -1)
        return got

    def assign(self, ids: Sequence[str]) -> npt.NDArray[np.int64]:
        """Slots for ids not present (free ones first, the last freed first), named and found from now on."""
        free, names = self.free, self.names
        k = min(len(free), len(ids))
        reused = free[len(free) - k :][::-1]  # the order single pops would take them in
        del free[len(free) - k :]
        _consume(map(names.__setitem__, reused, ids))
        n = len(names)
        names.extend(ids[k:])
        slots = np.asarray(reused + list(range(n, len(names))), dtype=np.int64)
        if len(names) > len(self.hashes):
            grown = np.zeros(max(len(names), len(self.hashes) * 3 // 2), dtype=np.int64)
            grown[: len(self.hashes)] = self.hashes
            self.hashes = grown
        self._put(ids, slots)
        return slots

    def release(self, slots: npt.NDArray[np.int64]) -> None:
        """Free present slots: their ids are no longer found, and the slots are taken again."""
        if not len(slots):
            return
        listed = slots.tolist()
        if self.overflow:
            pop = self.overflow.pop  # an id in the overflow is there at its slot, and nowhere else
            in_table = [s for s in listed if pop(cast(str, self.names[s]), -1) != s]
            self._table.discard(self.hashes, in_table)
        else:
            self._table.discard(self.hashes, slots)
        _consume(map(self.names.__setitem__, listed, repeat(None)))
        self.free.extend(listed)

    def _put(self, ids: Sequence[str], slots: npt.NDArray[np.int64]) -> None:
        """Find ``ids`` at ``slots`` from now on (they were not present)."""
        self.hashes[slots] = np.fromiter(map(self.key, ids), dtype=np.int64, count=len(ids))
        got = self._table.add(self.hashes, slots)
        if not np.array_equal(got, slots):  # ids of hashes that other present ids have
            for i in np.flatnonzero(got != slots).tolist():
                self.overflow[ids[i]] = int(slots[i])


def _consume(side_effects: Iterator[object]) -> None:
    """Run an iterator to its end in C, for the side effects of its steps (itertools' recipe)."""
    deque(side_effects, maxlen=0)
