"""Incremental content matching: the subscription index and its brute-force oracle.

Two indexes share one interface (CONVENTIONS.md, "an index has add, remove and a query"):

- ``MatchIndex``, the fast exact index: per-attribute bucketed bitsets over the distinct filters,
  ANDed per event, with an exact check of the candidates whose buckets are not decisive, and
  numba-compiled kernels (``routing._kernels``) for the inner loops.
- ``BruteForceIndex``, the oracle: ``Filter.matches`` on every subscription for every event.

Both take ``add(subscription_id, filter)`` (a ``Filter`` or its text; adding an existing id
replaces it), ``remove(subscription_id)`` and ``match(events)``, where ``events`` is an
``EventBatch`` or a sequence of attribute mappings; ``match`` returns a ``Matches``: per event,
the ids of the subscriptions active at that point that the event satisfies.

Examples
--------
>>> index = MatchIndex()
>>> index.add("s1", "price < 120 and symbol = 'IBM'")
>>> index.add("s2", "price between 100 and 200")
>>> result = index.match([{"symbol": "IBM", "price": 100.5}, {"symbol": "HP", "price": 150}])
>>> result.ids(0), result.ids(1)
(['s1', 's2'], ['s2'])
>>> index.remove("s2")
>>> index.match([{"symbol": "IBM", "price": 100.5}]).ids(0)
['s1']
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeAlias, cast

import numpy as np
import numpy.typing as npt

from routing import _kernels as K
from routing.filters import Filter, Kind, Op, parse_filter

__all__ = ["BruteForceIndex", "EventBatch", "MatchIndex", "Matches"]

_MISSING: Final = object()


class EventBatch:
    """A batch of events' attributes, kept column by column for the index.

    Build it with ``EventBatch.from_events`` (one mapping of attribute name to value per event)
    or ``EventBatch.from_columns`` (one column per attribute name, with a mask of which events
    carry it). Values are numbers, strings or booleans; other values (``None``, lists) are of no
    kind and satisfy only ``exists``.

    Examples
    --------
    >>> batch = EventBatch.from_events([{"x": 1}, {"y": "a"}])
    >>> len(batch), batch.event(1)
    (2, {'y': 'a'})
    >>> cols = EventBatch.from_columns(2, {"x": (np.array([1.0, 2.0]), np.array([True, False]))})
    >>> cols.event(0), cols.event(1)
    ({'x': 1.0}, {})
    """

    __slots__ = ("_columns", "_events", "_n")

    def __init__(
        self,
        n: int,
        columns: dict[str, tuple[npt.NDArray[np.generic], npt.NDArray[np.bool_]]],
        events: Sequence[Mapping[str, object]] | None,
    ) -> None:
        self._n = n
        self._columns = columns
        self._events = events

    @classmethod
    def from_events(cls, events: Sequence[Mapping[str, object]]) -> EventBatch:
        """A batch from one attribute mapping per event (kept as given; columns built lazily)."""
        return cls(len(events), {}, events)

    @classmethod
    def from_columns(
        cls,
        n: int,
        columns: Mapping[str, tuple[npt.ArrayLike, npt.ArrayLike | None]],
    ) -> EventBatch:
        """A batch from columns: ``name -> (values, present)``.

        Parameters
        ----------
        n : int
            The number of events.
        columns : Mapping[str, tuple]
            For each attribute, its ``n`` values (a numeric, boolean, string or object array)
            and a boolean mask of the events that carry it (None: all do). Values where the
            mask is false are ignored.
        """
        cols: dict[str, tuple[npt.NDArray[np.generic], npt.NDArray[np.bool_]]] = {}
        for name, (values, present) in columns.items():
            arr = np.asarray(values)
            mask = np.ones(n, dtype=bool) if present is None else np.asarray(present, dtype=bool)
            if arr.shape != (n,) or mask.shape != (n,):
                raise ValueError(f"column {name!r}: expected {n} values and a mask of {n}")
            cols[name] = (arr, mask)
        return cls(n, cols, None)

    def __len__(self) -> int:
        return self._n

    def columns(self) -> dict[str, tuple[npt.NDArray[np.generic], npt.NDArray[np.bool_]]]:
        """``name -> (values, present)`` for every attribute some event carries."""
        if self._events is None or self._columns:
            return self._columns
        names: dict[str, None] = {}
        for attrs in self._events:
            names.update(dict.fromkeys(attrs))
        n = self._n
        for name in names:
            values = np.empty(n, dtype=object)
            present = np.zeros(n, dtype=bool)
            for i, attrs in enumerate(self._events):
                v = attrs.get(name, _MISSING)
                if v is not _MISSING:
                    values[i] = v
                    present[i] = True
            self._columns[name] = (values, present)
        return self._columns

    def event(self, i: int) -> dict[str, object]:
        """The attributes of event ``i`` as a dict (numpy scalars become Python values)."""
        if self._events is not None:
            return dict(self._events[i])
        out: dict[str, object] = {}
        for name, (values, present) in self._columns.items():
            if present[i]:
                v = values[i]
                out[name] = v.item() if isinstance(v, np.generic) else v
        return out


def _as_batch(events: EventBatch | Sequence[Mapping[str, object]]) -> EventBatch:
    return events if isinstance(events, EventBatch) else EventBatch.from_events(events)


def _as_filter(filt: Filter | str) -> Filter:
    return filt if isinstance(filt, Filter) else parse_filter(filt)


@dataclass(frozen=True)
class Matches:
    """The result of ``match``: per event, the subscriptions it satisfies.

    ``slots[offsets[i]:offsets[i + 1]]`` are the internal slots of event ``i``'s subscriptions
    (unordered); ``ids(i)`` names them, sorted by plain string order. The names are resolved
    against the index as it was at ``match`` time: ask for them before the next change.

    Attributes
    ----------
    offsets : ndarray of int64, shape (n + 1,)
    slots : ndarray of int32
    """

    offsets: npt.NDArray[np.int64]
    slots: npt.NDArray[np.int32]
    _names: Sequence[str | None]
    _ranker: Callable[[], tuple[npt.NDArray[np.object_], npt.NDArray[np.int64]]] | None = None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def counts(self) -> npt.NDArray[np.int64]:
        """How many subscriptions each event matched."""
        return np.diff(self.offsets)

    def ids(self, i: int) -> list[str]:
        """The ids of the subscriptions event ``i`` matched, sorted by plain string order."""
        names = self._names
        return sorted(str(names[s]) for s in self.slots[self.offsets[i] : self.offsets[i + 1]].tolist())

    def all_ids(self) -> list[list[str]]:
        """``ids(i)`` for every event."""
        offsets, ids = self.flat_ids()
        flat = ids.tolist()
        bounds = offsets.tolist()
        return [flat[bounds[i] : bounds[i + 1]] for i in range(len(self))]

    def flat_ids(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.object_]]:
        """Every event's ids at once: ``ids[offsets[i]:offsets[i + 1]]`` is ``ids(i)`` as an array.

        Vectorized (one sort of the whole batch by event, then by the ids' rank), for writers
        that turn the result into columns.

        Examples
        --------
        >>> index = MatchIndex()
        >>> for sid in ("b", "a", "c"):
        ...     index.add(sid, "x > 0")
        >>> offsets, ids = index.match([{"x": 1}, {"x": 0}, {"x": 2}]).flat_ids()
        >>> offsets.tolist(), ids.tolist()
        ([0, 3, 3, 6], ['a', 'b', 'c', 'a', 'b', 'c'])
        """
        if self._ranker is not None:
            names, rank = self._ranker()
        else:
            names, rank = _name_ranks(self._names)
        events = np.repeat(np.arange(len(self)), self.counts())
        order = np.lexsort((rank[self.slots], events))
        return self.offsets, names[self.slots[order]]


def _name_ranks(names: Sequence[str | None]) -> tuple[npt.NDArray[np.object_], npt.NDArray[np.int64]]:
    """The names as an object array, and each one's rank in plain string (code point) order."""
    arr = np.empty(len(names), dtype=object)
    arr[:] = [n if n is not None else "" for n in names]
    rank = np.empty(len(arr), dtype=np.int64)
    # Python's sort: numpy's fixed-width strings would drop trailing NUL characters
    rank[sorted(range(len(arr)), key=arr.__getitem__)] = np.arange(len(arr))
    return arr, rank


class BruteForceIndex:
    """The oracle: every subscription's ``Filter.matches`` on every event.

    Examples
    --------
    >>> oracle = BruteForceIndex()
    >>> oracle.add("a", "x > 1")
    >>> oracle.add("b", "x exists")
    >>> oracle.match([{"x": 2}, {"x": None}, {}]).all_ids()
    [['a', 'b'], ['b'], []]
    """

    def __init__(self) -> None:
        self._filters: dict[str, Filter] = {}

    def add(self, subscription_id: str, filt: Filter | str) -> None:
        """Add a subscription, or replace the one with this id. Raises ``FilterError`` on bad text."""
        self._filters[subscription_id] = _as_filter(filt)

    def remove(self, subscription_id: str) -> None:
        """Remove a subscription; raises ``KeyError`` for an unknown id."""
        del self._filters[subscription_id]

    def __len__(self) -> int:
        return len(self._filters)

    def __contains__(self, subscription_id: object) -> bool:
        return subscription_id in self._filters

    def match(self, events: EventBatch | Sequence[Mapping[str, object]]) -> Matches:
        """Per event, the subscriptions it satisfies."""
        batch = _as_batch(events)
        names = list(self._filters)
        filters = [self._filters[k] for k in names]
        offsets = [0]
        slots: list[int] = []
        for i in range(len(batch)):
            attrs = batch.event(i)
            slots.extend(j for j, f in enumerate(filters) if f.matches(attrs))
            offsets.append(len(slots))
        return Matches(np.asarray(offsets, dtype=np.int64), np.asarray(slots, dtype=np.int32), names)


# keyed by the operators' names: an Enum member hashes in Python code, a str in C
_OPS: Final = {
    Op.EQ.name: K.O_EQ, Op.NE.name: K.O_NE, Op.LT.name: K.O_LT, Op.LE.name: K.O_LE, Op.GT.name: K.O_GT,
    Op.GE.name: K.O_GE, Op.BETWEEN.name: K.O_BETWEEN, Op.IN.name: K.O_IN, Op.NOT_IN.name: K.O_NOT_IN,
}  # fmt: skip
_DOUBLE_INTS: Final = 2**53  # integers up to this magnitude are exact doubles
_NUMBER: Final = Kind.NUMBER

# a compiled predicate: (attribute index, P_* kind, O_* operator, a, b, list literals)
_Record: TypeAlias = tuple[int, int, int, float, float, tuple[float, ...]]


def _grow(arr: npt.NDArray[Any], size: int, fill: Any = 0) -> npt.NDArray[Any]:
    """``arr`` with its first axis grown to at least ``size`` (by half again), new entries ``fill``."""
    if arr.shape[0] >= size:
        return arr
    new = np.full((max(size, arr.shape[0] + arr.shape[0] // 2), *arr.shape[1:]), fill, dtype=arr.dtype)
    new[: arr.shape[0]] = arr
    return new


def _exact_double(x: object) -> bool:
    """Whether a number literal is a double exactly (ints beyond 2**53 mostly are not)."""
    if type(x) is not int or -_DOUBLE_INTS <= x <= _DOUBLE_INTS:
        return True
    try:
        return float(x) == x
    except OverflowError:  # beyond the largest double
        return False


def _number_cell(x: int) -> tuple[float, int]:
    """An integer as ``(float(x), sign of x - float(x))``; beyond the doubles, +-inf."""
    try:
        f = float(x)
    except OverflowError:
        return (math.inf, -1) if x > 0 else (-math.inf, 1)
    return f, (x > int(f)) - (x < int(f))


class MatchIndex:
    """The fast exact index over a changing set of atomic subscriptions.

    Structure (the layout is described in ``routing._kernels``): identical filters share one
    *fid* (distinct-filter slot) that lists its subscriptions. Each attribute that some
    predicate names gets bitset rows over the fids, one per bucket of its values: missing,
    no kind, false, true, each interned string literal (up to ``max_strings`` per attribute) and
    the other strings, and the numbers cut at up to ``max_cuts`` literals per attribute (each cut
    a point bucket between two open intervals). An event's candidates are the AND of one row per
    attribute; a fid whose buckets were all decisive is a match outright, others are verified
    against their compiled predicates, and the few predicates doubles and codes cannot express
    (string orderings, ``startswith``, ``endswith``, ``contains``, integers beyond 2**53) are
    checked by ``Filter.matches`` on the candidates that reach them. Matching walks the fids in
    blocks that stay in cache while the whole batch of events streams by.

    A change never rebuilds the index: ``add`` compiles one filter (new literals become cuts or
    string rows by copying the row of the bucket they split, which keeps every other fid's bits
    correct), ``remove`` unlists a subscription, and the bit work of both is batched into the
    next ``match``.

    Parameters
    ----------
    max_cuts : int
        Numeric literals per attribute that become bucket boundaries (more buckets: fewer
        candidates to verify, more bits per filter).
    max_strings : int
        String literals per attribute with a row of their own.

    Examples
    --------
    >>> index = MatchIndex()
    >>> index.add("cheap", "price < 120 and symbol in ('IBM', 'HP')")
    >>> index.add("air", "name startswith 'air'")
    >>> index.add("twin", "symbol in ('HP', 'IBM') and price < 120")
    >>> index.match([{"symbol": "HP", "price": 99}, {"name": "airport"}]).all_ids()
    [['cheap', 'twin'], ['air']]
    >>> index.stats()["distinct_filters"]
    2
    """

    cache_bytes = 1 << 18
    """Bytes of bitset rows per block of fids (the rows' slices of one block should stay in L2)."""

    def __init__(self, max_cuts: int = 48, max_strings: int = 64) -> None:
        if max_cuts < 0 or max_strings < 0:
            raise ValueError("max_cuts and max_strings must be >= 0")
        self._max_cuts = max_cuts
        # subscriptions (slots)
        self._slot_of: dict[str, int] = {}
        self._names: list[str | None] = []
        self._free_slots: list[int] = []
        self._sub_fid = np.zeros(64, dtype=np.int32)
        self._sub_pos = np.zeros(64, dtype=np.int32)  # where the slot sits in ``_members``
        # distinct filters (fids): the M_* columns of ``_meta``, and their subscriptions
        self._fid_of_key: dict[int, int] = {}
        self._free_fids: list[int] = []
        self._n_fids = 0
        self._meta = np.zeros((64, 6), dtype=np.int32)
        self._f_key = np.zeros(64, dtype=np.int64)
        self._f_keyed = np.zeros(64, dtype=bool)
        self._slow: dict[int, Filter] = {}
        self._members = np.zeros(64, dtype=np.int32)
        self._m_used = 0
        self._m_garbage = 0
        # compiled predicates (``routing._kernels.verify``) and list literals
        self._p_code = np.zeros(256, dtype=np.int64)
        self._p_ab = np.zeros((256, 2), dtype=np.float64)
        self._p_used = 0
        self._p_garbage = 0
        self._lit = np.zeros(64, dtype=np.float64)
        self._lit_used = 0
        # attributes and their buckets
        self._attr_of: dict[str, int] = {}
        self._attr_names: list[str] = []
        self._str_codes: list[dict[str, int]] = []
        self._cut_sets: list[set[float]] = []
        self._fixed_rows = np.zeros((4, 5), dtype=np.int64)
        self._str_rows = np.full((4, max_strings), -1, dtype=np.int64)
        self._str_count = np.zeros(4, dtype=np.int64)
        self._num_cuts = np.zeros((4, max_cuts), dtype=np.float64)
        self._num_ncuts = np.zeros(4, dtype=np.int64)
        self._num_rows = np.zeros((4, 2 * max_cuts + 1), dtype=np.int64)
        # bitset rows over fids
        self._rows = np.zeros((16, 1), dtype=np.uint64)
        self._n_rows = 0
        self._alive = np.zeros(1, dtype=np.uint64)
        # bit work batched until the next match
        self._pending_set: list[int] = []
        self._pending_clear: list[int] = []
        self._expected = 16.0  # matches per event, a running estimate that sizes match's buffers
        self._version = 0  # bumped by every change; ``Matches`` of an older version cannot name slots
        self._ranks: tuple[int, npt.NDArray[np.object_], npt.NDArray[np.int64]] | None = None

    # -- changes ----------------------------------------------------------------------------

    def add(self, subscription_id: str, filt: Filter | str) -> None:
        """Add a subscription, or replace the one with this id.

        Raises ``FilterError`` (nothing changes) when ``filt`` is text that does not parse.
        """
        f = _as_filter(filt)
        records, slow = self._compile(f)
        self._version += 1
        if subscription_id in self._slot_of:
            self.remove(subscription_id)
        fid = self._fid_for(records, f if slow else None)
        if self._free_slots:
            s = self._free_slots.pop()
            self._names[s] = subscription_id
        else:
            s = len(self._names)
            self._names.append(subscription_id)
            if s >= len(self._sub_fid):
                self._sub_fid = _grow(self._sub_fid, s + 1)
                self._sub_pos = _grow(self._sub_pos, s + 1)
        self._slot_of[subscription_id] = s
        meta = self._meta
        start, count, cap = meta[fid, K.M_MSTART :].tolist()
        if count == cap:  # move the members to the end with twice the room
            new_start = self._reserve(2 * cap)
            start = int(meta[fid, K.M_MSTART])  # the reserve may have compacted the pool
            self._members[new_start : new_start + count] = self._members[start : start + count]
            self._sub_pos[self._members[new_start : new_start + count]] += new_start - start
            self._m_garbage += cap
            start = new_start
            meta[fid, K.M_MSTART], meta[fid, K.M_MCAP] = start, 2 * cap
        self._members[start + count] = s
        self._sub_fid[s], self._sub_pos[s] = fid, start + count
        meta[fid, K.M_MCOUNT] = count + 1

    def remove(self, subscription_id: str) -> None:
        """Remove a subscription; ``KeyError`` when no subscription has this id."""
        s = self._slot_of.pop(subscription_id)
        self._version += 1
        fid, pos = int(self._sub_fid[s]), int(self._sub_pos[s])
        meta = self._meta
        last = int(meta[fid, K.M_MSTART] + meta[fid, K.M_MCOUNT] - 1)
        moved = int(self._members[last])
        self._members[pos] = moved
        self._sub_pos[moved] = pos
        meta[fid, K.M_MCOUNT] -= 1
        self._names[s] = None
        self._free_slots.append(s)
        if meta[fid, K.M_MCOUNT] == 0:
            self._drop_fid(fid)

    def _reserve(self, size: int) -> int:
        """Room for ``size`` members at the end of the pool (squeezing out garbage when large)."""
        if self._m_used + size > len(self._members) and self._m_garbage > self._m_used // 2:
            self._compact_members()
        start = self._m_used
        self._members = _grow(self._members, start + size)
        self._m_used = start + size
        return start

    def _compact_members(self) -> None:
        live = np.flatnonzero(self._meta[: self._n_fids, K.M_MCAP] > 0)
        caps = self._meta[live, K.M_MCAP].astype(np.int64)
        starts = self._meta[live, K.M_MSTART].astype(np.int64)
        new_start = np.concatenate(([0], np.cumsum(caps)[:-1])).astype(np.int64) if len(live) else starts
        total = int(caps.sum())
        idx = np.repeat(starts - new_start, caps) + np.arange(total)
        self._members[:total] = self._members[idx]
        counts = self._meta[live, K.M_MCOUNT].astype(np.int64)
        first = np.repeat(new_start - (np.cumsum(counts) - counts), counts)
        used = first + np.arange(int(counts.sum()))
        self._sub_pos[self._members[used]] = used
        self._meta[live, K.M_MSTART] = new_start
        self._m_used, self._m_garbage = total, 0

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, subscription_id: object) -> bool:
        return subscription_id in self._slot_of

    # -- compiling a filter -----------------------------------------------------------------

    def _attr(self, name: str) -> int:
        a = self._attr_of.get(name)
        if a is not None:
            return a
        a = len(self._attr_names)
        self._attr_of[name] = a
        self._attr_names.append(name)
        self._str_codes.append({})
        self._cut_sets.append(set())
        self._fixed_rows = _grow(self._fixed_rows, a + 1)
        self._str_rows = _grow(self._str_rows, a + 1, -1)
        self._str_count = _grow(self._str_count, a + 1)
        self._num_cuts = _grow(self._num_cuts, a + 1)
        self._num_ncuts = _grow(self._num_ncuts, a + 1)
        self._num_rows = _grow(self._num_rows, a + 1)
        for j in range(5):  # every fid so far says nothing about a: its bits are set everywhere
            self._fixed_rows[a, j] = self._new_row(None)
        self._num_rows[a, 0] = self._new_row(None)
        return a

    def _new_row(self, copy_of: int | None) -> int:
        """A new bitset row: a copy of row ``copy_of``, or of the alive fids."""
        r = self._n_rows
        if r >= self._rows.shape[0]:  # rows come early and seldom: grow by a few, not by half again
            rows = np.zeros((r + 64, self._rows.shape[1]), dtype=np.uint64)
            rows[:r] = self._rows[:r]
            self._rows = rows
        self._rows[r] = self._alive if copy_of is None else self._rows[copy_of]
        self._n_rows += 1
        return r

    def _cut(self, a: int, x: float) -> None:
        """Make the number ``x`` a cut of attribute ``a`` when there is room."""
        nc = int(self._num_ncuts[a])
        if nc >= self._max_cuts:
            return
        cuts = self._num_cuts[a, :nc]
        pos = int(np.searchsorted(cuts, x))
        if pos < nc and cuts[pos] == x:
            return
        self._num_cuts[a, pos + 1 : nc + 1] = cuts[pos:nc].copy()
        self._num_cuts[a, pos] = x
        self._cut_sets[a].add(x)
        split = int(self._num_rows[a, 2 * pos])  # the interval that x splits: three buckets now
        old = self._num_rows[a, 2 * pos + 1 : 2 * nc + 1].copy()
        self._num_rows[a, 2 * pos + 3 : 2 * nc + 3] = old
        self._num_rows[a, 2 * pos + 1] = self._new_row(split)
        self._num_rows[a, 2 * pos + 2] = self._new_row(split)
        self._num_ncuts[a] = nc + 1

    def _code(self, a: int, text: str) -> int:
        """The interned code of a string literal of attribute ``a`` (new ones get a row)."""
        codes = self._str_codes[a]
        c = codes.get(text)
        if c is None:
            c = codes[text] = len(codes)
            if c < self._str_rows.shape[1]:
                self._str_rows[a, c] = self._new_row(int(self._fixed_rows[a, 4]))
            self._str_count[a] = len(codes)
        return c

    def _compile(self, f: Filter) -> tuple[list[_Record], bool]:
        """The predicate records of ``f`` sorted by attribute, and whether Python must check it."""
        records: list[_Record] = []
        slow = False
        max_cuts = self._max_cuts
        cut_sets = self._cut_sets
        for p in f.predicates:
            a = self._attr_of.get(p.attribute)
            if a is None:
                a = self._attr(p.attribute)
            op, values, kind = p.op, p.values, p._kind
            name = op._name_
            if op is Op.EXISTS:
                records.append((a, K.P_EXISTS, K.O_NONE, 0.0, 0.0, ()))
            elif kind is _NUMBER:
                if len(values) == 1 and op is not Op.IN and op is not Op.NOT_IN:
                    x = values[0]
                    if not _exact_double(x):
                        records.append((a, K.P_SLOW_NUMBER, K.O_NONE, 0.0, 0.0, ()))
                        slow = True
                        continue
                    v = float(x)
                    if v not in cut_sets[a] and len(cut_sets[a]) < max_cuts:
                        self._cut(a, v)
                    records.append((a, K.P_NUMBER, _OPS[name], v, v, ()))
                    continue
                if not all(map(_exact_double, values)):
                    records.append((a, K.P_SLOW_NUMBER, K.O_NONE, 0.0, 0.0, ()))
                    slow = True
                    continue
                nums = [float(v) for v in values]
                cuts = cut_sets[a]
                for x in nums:
                    if x not in cuts and len(cuts) < max_cuts:
                        self._cut(a, x)
                if op is Op.IN or op is Op.NOT_IN:
                    records.append((a, K.P_NUMBER, _OPS[name], 0.0, 0.0, tuple(sorted(set(nums)))))
                else:
                    records.append((a, K.P_NUMBER, _OPS[name], nums[0], nums[-1], ()))
            elif kind is Kind.BOOLEAN:
                records.append((a, K.P_BOOL, _OPS[name], 1.0 if values[0] else 0.0, 0.0, ()))
            elif op is Op.EQ or op is Op.NE or op is Op.IN or op is Op.NOT_IN:
                codes = [float(self._code(a, cast(str, v))) for v in values]
                if op is Op.IN or op is Op.NOT_IN:
                    records.append((a, K.P_STRING, _OPS[name], 0.0, 0.0, tuple(sorted(set(codes)))))
                else:
                    records.append((a, K.P_STRING, _OPS[name], codes[0], 0.0, ()))
            else:
                records.append((a, K.P_SLOW_STRING, K.O_NONE, 0.0, 0.0, ()))
                slow = True
        records.sort()
        return records, slow

    def _fid_for(self, records: list[_Record], slow: Filter | None) -> int:
        """The fid of these records: an existing identical one, or a new one."""
        key = hash((tuple(records), slow))
        fid = self._fid_of_key.get(key)
        if fid is not None and self._records_of(fid) == records and (slow is None or self._slow.get(fid) == slow):
            return fid
        keyed = fid is None  # on a hash collision the new fid simply is not shared
        fid = self._free_fids.pop() if self._free_fids else self._next_fid()
        start = self._store(records)
        mstart = self._reserve(1)
        self._meta[fid] = (K.SLOW if slow is not None else 0, start, len(records), mstart, 0, 1)
        self._f_key[fid] = key
        self._f_keyed[fid] = keyed
        if keyed:
            self._fid_of_key[key] = fid
        if slow is not None:
            self._slow[fid] = slow
        self._pending_set.append(fid)
        return fid

    def _next_fid(self) -> int:
        fid = self._n_fids
        self._n_fids += 1
        if fid >= len(self._meta):
            self._meta = _grow(self._meta, fid + 1)
            self._f_key = _grow(self._f_key, fid + 1)
            self._f_keyed = _grow(self._f_keyed, fid + 1)
        words = (len(self._meta) + 63) // 64
        if words > self._rows.shape[1]:
            rows = np.zeros((self._rows.shape[0], words), dtype=np.uint64)
            rows[:, : self._rows.shape[1]] = self._rows
            self._rows = rows
            alive = np.zeros(words, dtype=np.uint64)
            alive[: len(self._alive)] = self._alive
            self._alive = alive
        return fid

    def _store(self, records: list[_Record]) -> int:
        m = len(records)
        start = self._p_used
        if start + m > len(self._p_code):
            if self._p_garbage > start // 2:
                self._compact()
                start = self._p_used
            self._p_code = _grow(self._p_code, start + m)
            self._p_ab = _grow(self._p_ab, start + m)
        codes, ab = [], []
        for a, kind, op, x, y, lits in records:
            if lits:
                x, y = float(self._lit_used), float(len(lits))
                self._lit = _grow(self._lit, self._lit_used + len(lits))
                self._lit[self._lit_used : self._lit_used + len(lits)] = lits
                self._lit_used += len(lits)
            codes.append(a << 8 | kind << 4 | op)
            ab.append((x, y))
        self._p_code[start : start + m] = codes
        self._p_ab[start : start + m] = ab
        self._p_used = start + m
        return start

    def _records_of(self, fid: int) -> list[_Record]:
        start = int(self._meta[fid, K.M_PSTART])
        end = start + int(self._meta[fid, K.M_PCOUNT])
        out: list[_Record] = []
        for code, (x, y) in zip(self._p_code[start:end].tolist(), self._p_ab[start:end].tolist(), strict=True):
            op = code & 15
            lits: tuple[float, ...] = ()
            if op == K.O_IN or op == K.O_NOT_IN:
                lits = tuple(self._lit[int(x) : int(x) + int(y)].tolist())
                x = y = 0.0
            out.append((code >> 8, (code >> 4) & 15, op, x, y, lits))
        return out

    def _drop_fid(self, fid: int) -> None:
        if self._f_keyed[fid]:
            del self._fid_of_key[int(self._f_key[fid])]
        self._slow.pop(fid, None)
        self._p_garbage += int(self._meta[fid, K.M_PCOUNT])
        self._m_garbage += int(self._meta[fid, K.M_MCAP])
        self._meta[fid] = 0
        self._pending_clear.append(fid)
        self._free_fids.append(fid)

    def _compact(self) -> None:
        """Squeeze the predicate store (and list literals) down to the live fids' records."""
        live = np.flatnonzero(self._meta[: self._n_fids, K.M_PCOUNT] > 0)
        counts = self._meta[live, K.M_PCOUNT].astype(np.int64)
        starts = self._meta[live, K.M_PSTART].astype(np.int64)
        total = int(counts.sum())
        new_start = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64) if len(live) else starts
        idx = np.repeat(starts - new_start, counts) + np.arange(total)
        self._p_code[:total] = self._p_code[idx]
        self._p_ab[:total] = self._p_ab[idx]
        self._meta[live, K.M_PSTART] = new_start
        ops = self._p_code[:total] & 15
        lists = np.flatnonzero((ops == K.O_IN) | (ops == K.O_NOT_IN))
        lit = np.zeros(max(64, self._lit_used), dtype=np.float64)
        used = 0
        for i in lists.tolist():
            x, y = int(self._p_ab[i, 0]), int(self._p_ab[i, 1])
            lit[used : used + y] = self._lit[x : x + y]
            self._p_ab[i, 0] = used
            used += y
        self._lit, self._lit_used = lit, used
        self._p_used, self._p_garbage = total, 0

    def flush(self) -> None:
        """Apply the bit work of the changes since the last ``match`` now (``match`` does it too)."""
        self._flush()

    def _flush(self) -> None:
        """Apply the bit work of the changes since the last match."""
        if self._pending_clear:
            fids = np.unique(np.asarray(self._pending_clear, dtype=np.int64))
            self._pending_clear = []
            K.clear_fid_bits(fids, self._rows, self._n_rows)
            np.bitwise_and.at(self._alive, fids >> 6, ~(np.uint64(1) << (fids & 63).astype(np.uint64)))
        if self._pending_set:
            fids = np.unique(np.asarray(self._pending_set, dtype=np.int64))
            self._pending_set = []
            fids = fids[self._meta[fids, K.M_MCOUNT] > 0]
            K.set_fid_bits(
                fids,
                len(self._attr_names),
                self._fixed_rows,
                self._str_rows,
                self._str_count,
                self._num_cuts,
                self._num_ncuts,
                self._num_rows,
                self._rows,
                self._meta,
                self._p_code,
                self._p_ab,
                self._lit,
            )
            np.bitwise_or.at(self._alive, fids >> 6, np.uint64(1) << (fids & 63).astype(np.uint64))

    # -- matching ---------------------------------------------------------------------------

    def _encode(self, batch: EventBatch) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.float64], npt.NDArray[np.int8]]:
        """The events as the kernels' kind/value/delta matrices over the index's attributes."""
        n, m = len(batch), len(self._attr_names)
        kinds = np.zeros((n, m), dtype=np.uint8)
        vals = np.zeros((n, m), dtype=np.float64)
        deltas = np.zeros((n, m), dtype=np.int8)
        for name, (values, present) in batch.columns().items():
            a = self._attr_of.get(name)
            if a is not None:
                _encode_column(values, present, self._str_codes[a], kinds[:, a], vals[:, a], deltas[:, a])
        return kinds, vals, deltas

    def match(self, events: EventBatch | Sequence[Mapping[str, object]]) -> Matches:
        """Per event, the subscriptions it satisfies (exactly; ``Matches.ids`` names them)."""
        batch = _as_batch(events)
        self._flush()
        kinds, vals, deltas = self._encode(batch)
        n = len(batch)
        n_words = (self._n_fids + 63) // 64
        # fid blocks whose rows (one slice per bucket) fit in L2 stay there while events stream by
        block = max(8, min(n_words, self.cache_bytes // max(1, 8 * self._n_rows)))
        size = max(1024, int(self._expected * n) + 1024)
        offsets = np.zeros(n + 1, dtype=np.int64)
        ev = np.empty(size, dtype=np.int32)
        sl = np.empty(size, dtype=np.int32)
        slow = np.empty((max(64, size // 16), 2), dtype=np.int64)
        resume = np.zeros(4, dtype=np.int64)
        while not K.match_batch(
            kinds,
            vals,
            deltas,
            len(self._attr_names),
            self._fixed_rows,
            self._str_rows,
            self._num_cuts,
            self._num_ncuts,
            self._num_rows,
            self._rows,
            n_words,
            block,
            self._meta,
            self._members,
            self._p_code,
            self._p_ab,
            self._lit,
            offsets,
            ev,
            sl,
            slow,
            resume,
        ):
            ev, sl, slow = _grow(ev, 2 * len(ev)), _grow(sl, 2 * len(sl)), _grow(slow, 2 * len(slow))
        used, n_slow = int(resume[2]), int(resume[3])
        if n:
            self._expected = max(0.8 * self._expected, 1.1 * used / n)
        if n_words <= block:
            slots = sl[:used]
        else:
            slots = np.empty(used, dtype=np.int32)
            K.group_by_event(n, ev, sl, used, offsets, slots)
        if n_slow:
            offsets, slots = self._check_slow(batch, offsets, slots, slow[:n_slow])
        version = self._version

        def ranker() -> tuple[npt.NDArray[np.object_], npt.NDArray[np.int64]]:
            if self._version != version:
                raise RuntimeError("the index changed since this match: its slots name other subscriptions now")
            if self._ranks is None or self._ranks[0] != version:
                self._ranks = (version, *_name_ranks(self._names))
            return self._ranks[1], self._ranks[2]

        return Matches(offsets, slots, self._names, ranker)

    def _check_slow(
        self,
        batch: EventBatch,
        offsets: npt.NDArray[np.int64],
        slots: npt.NDArray[np.int32],
        pairs: npt.NDArray[np.int64],
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]:
        """Merge in the slow candidates that ``Filter.matches`` accepts."""
        extra_e: list[int] = []
        extra_s: list[int] = []
        cache: dict[int, dict[str, object]] = {}
        for e, fid in pairs.tolist():
            attrs = cache.get(e)
            if attrs is None:
                attrs = cache[e] = batch.event(e)
            if self._slow[fid].matches(attrs):
                start, count = int(self._meta[fid, K.M_MSTART]), int(self._meta[fid, K.M_MCOUNT])
                members = self._members[start : start + count].tolist()
                extra_e.extend([e] * len(members))
                extra_s.extend(members)
        if not extra_e:
            return offsets, slots
        n = len(offsets) - 1
        events = np.concatenate((np.repeat(np.arange(n), np.diff(offsets)), np.asarray(extra_e)))
        order = np.argsort(events, kind="stable")
        merged = np.concatenate((slots, np.asarray(extra_s, dtype=np.int32)))[order]
        counts = np.bincount(events, minlength=n)
        return np.concatenate(([0], np.cumsum(counts))).astype(np.int64), merged

    # -- introspection ----------------------------------------------------------------------

    def memory_bytes(self) -> int:
        """Bytes held: the arrays, plus the id maps and strings (estimated with ``sys.getsizeof``)."""
        arrays = sum(v.nbytes for v in vars(self).values() if isinstance(v, np.ndarray))
        python = sys.getsizeof(self._slot_of) + sys.getsizeof(self._names) + sys.getsizeof(self._fid_of_key)
        python += sum(sys.getsizeof(k) for k in self._slot_of) + 36 * len(self._slot_of) + 36 * len(self._fid_of_key)
        python += sum(sys.getsizeof(d) for d in self._str_codes) + sys.getsizeof(self._free_slots)
        return int(arrays + python)

    def stats(self) -> dict[str, Any]:
        """Sizes: subscriptions, distinct filters, attributes, bitset rows, bytes (total and per subscription)."""
        total = self.memory_bytes()
        return {
            "subscriptions": len(self),
            "distinct_filters": self._n_fids - len(self._free_fids),
            "attributes": len(self._attr_names),
            "rows": self._n_rows,
            "bytes": total,
            "bytes_per_subscription": total / max(1, len(self)),
        }


def _encode_column(
    values: npt.NDArray[Any],
    present: npt.NDArray[np.bool_],
    codes: dict[str, int],
    kinds: npt.NDArray[np.uint8],
    vals: npt.NDArray[np.float64],
    deltas: npt.NDArray[np.int8],
) -> None:
    """Fill one attribute's kind/value/delta column from an event column."""
    dt = values.dtype
    if dt.kind == "b":
        kinds[present] = K.K_BOOL
        vals[present] = values[present]
    elif dt.kind == "f":
        v = values.astype(np.float64)
        nan = np.isnan(v)
        kinds[present] = K.K_NUMBER
        kinds[present & nan] = K.K_NOVALUE
        vals[present & ~nan] = v[present & ~nan]
    elif dt.kind in "iu":
        kinds[present] = K.K_NUMBER
        vals[present] = values[present].astype(np.float64)
        big = present & ((values > _DOUBLE_INTS) | (values < -_DOUBLE_INTS)) if len(values) else present
        for i in np.flatnonzero(big).tolist():
            vals[i], deltas[i] = _number_cell(int(values[i]))
    elif dt.kind == "S":  # bytes are of no kind: only ``exists`` holds
        kinds[present] = K.K_NOVALUE
    elif dt.kind == "U":
        idx = np.flatnonzero(present)
        if len(idx):
            uniq, inverse = np.unique(values[idx], return_inverse=True)
            table = np.array([codes.get(str(u), -1) for u in uniq.tolist()], dtype=np.float64)
            kinds[idx] = K.K_STRING
            vals[idx] = table[inverse]
    else:
        for i in np.flatnonzero(present).tolist():
            x = values[i]
            if isinstance(x, bool | np.bool_):
                kinds[i], vals[i] = K.K_BOOL, float(x)
            elif isinstance(x, str):
                kinds[i], vals[i] = K.K_STRING, codes.get(x, -1)
            elif isinstance(x, int | np.integer):
                x = int(x)
                if -_DOUBLE_INTS <= x <= _DOUBLE_INTS:
                    kinds[i], vals[i] = K.K_NUMBER, x
                else:
                    kinds[i] = K.K_NUMBER
                    vals[i], deltas[i] = _number_cell(x)
            elif isinstance(x, float | np.floating) and x == x:
                kinds[i], vals[i] = K.K_NUMBER, float(x)
            else:
                kinds[i] = K.K_NOVALUE
