"""The matching interface's data and its oracle: ``EventBatch`` (events as typed columns),
``Matches`` (per event, the ids of the subscriptions it satisfies) and ``BruteForceIndex`` (every
filter tried on every event with ``Filter.matches``), which ``routing.matching.index.MatchIndex``
is held to (docs/conventions.md §6). ``routing.matching.index`` re-exports all three, the names
callers use.

Examples
--------
>>> oracle = BruteForceIndex()
>>> oracle.add("s1", "price < 120 and symbol = 'IBM'")
>>> oracle.match([{"symbol": "IBM", "price": 100.5}, {"symbol": "HP", "price": 150}]).all_ids()
[['s1'], []]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, cast

import numpy as np
import numpy.typing as npt

from routing.matching import kernels as K
from routing.matching.language import Filter, parse_filter

__all__ = ["BruteForceIndex", "EventBatch", "Matches"]

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


# (each slot's rank in id order, the ids in rank order, each packed member's rank or None)
Ranks = tuple[npt.NDArray[np.int64], npt.NDArray[np.object_], npt.NDArray[np.int32] | None]


class Matches:
    """The result of ``match``: per event, the subscriptions it satisfies.

    ``slots[offsets[i]:offsets[i + 1]]`` are the internal slots of event ``i``'s subscriptions
    (unordered); ``ids(i)`` names them, sorted by plain string order. The names are resolved
    against the index as it was at ``match`` time: ask for them before the next change.

    ``MatchIndex`` hands its answer over as it finds it: per event, the distinct filters that
    match, each standing for the run of its subscriptions in a member table that the index never
    changes afterwards. ``offsets`` and ``slots`` are spelled out from them when first asked for
    (and kept); ``counts`` and ``ids`` need only the runs.

    Attributes
    ----------
    offsets : ndarray of int64, shape (n + 1,)
    slots : ndarray of int32
    """

    __slots__ = ("_counts", "_names", "_offsets", "_ranker", "_runs", "_slots")

    def __init__(
        self,
        offsets: npt.NDArray[np.int64] | None,
        slots: npt.NDArray[np.int32] | None,
        names: Sequence[str | None],
        ranker: Callable[[], Ranks] | None = None,
        runs: tuple[npt.NDArray[np.int64], npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.int32]]
        | None = None,
    ) -> None:
        if (offsets is None or slots is None) and runs is None:
            raise ValueError("Matches needs offsets and slots, or runs")
        self._offsets = offsets
        self._slots = slots
        self._names = names
        self._ranker = ranker
        # (fid_offsets, fids, m_start, m_packed): event i's filters are fids[fid_offsets[i] :
        # fid_offsets[i + 1]], filter f's subscriptions m_packed[m_start[f] : m_start[f + 1]]
        self._runs = runs
        self._counts: npt.NDArray[np.int64] | None = None

    @property
    def offsets(self) -> npt.NDArray[np.int64]:
        if self._offsets is None:
            fid_offsets, fids, m_start, _ = cast(tuple[Any, ...], self._runs)
            offsets = np.empty(len(fid_offsets), dtype=np.int64)
            K.slot_offsets(fid_offsets, fids, m_start, offsets)
            self._offsets = offsets
        return self._offsets

    @property
    def slots(self) -> npt.NDArray[np.int32]:
        if self._slots is None:
            fid_offsets, fids, m_start, m_packed = cast(tuple[Any, ...], self._runs)
            offsets = self.offsets
            slots = np.empty(int(offsets[-1]), dtype=np.int32)
            K.copy_slots(fid_offsets, fids, m_start, m_packed, 0, len(fid_offsets) - 1, slots)
            self._slots = slots
        return self._slots

    def _event_slots(self, i: int) -> npt.NDArray[np.int32]:
        """Event ``i``'s slots (spelled out for it alone while ``slots`` is not)."""
        if self._slots is not None or self._runs is None:
            return self.slots[self.offsets[i] : self.offsets[i + 1]]
        fid_offsets, fids, m_start, m_packed = self._runs
        f = fids[fid_offsets[i] : fid_offsets[i + 1]]
        out = np.empty(int((m_start[f + 1] - m_start[f]).sum()), dtype=np.int32)
        K.copy_slots(fid_offsets, fids, m_start, m_packed, i, i + 1, out)
        return out

    def __len__(self) -> int:
        return len(self._runs[0] if self._runs is not None else cast(npt.NDArray[np.int64], self._offsets)) - 1

    def counts(self) -> npt.NDArray[np.int64]:
        """How many subscriptions each event matched."""
        if self._counts is None:
            self._counts = np.diff(self.offsets)
        return self._counts

    def ids(self, i: int) -> list[str]:
        """The ids of the subscriptions event ``i`` matched, sorted by plain string order."""
        names = self._names
        return sorted(str(names[s]) for s in self._event_slots(i).tolist())

    def all_ids(self) -> list[list[str]]:
        """``ids(i)`` for every event."""
        offsets, ids = self.flat_ids()
        flat = ids.tolist()
        bounds = offsets.tolist()
        return [flat[bounds[i] : bounds[i + 1]] for i in range(len(self))]

    def flat_ids(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.object_]]:
        """Every event's ids at once: ``ids[offsets[i]:offsets[i + 1]]`` is ``ids(i)`` as an array.

        Vectorized (``sorted_ranks``), for writers that turn the result into columns.

        Examples
        --------
        >>> from routing.matching.index import MatchIndex
        >>> index = MatchIndex()
        >>> for sid in ("b", "a", "c"):
        ...     index.add(sid, "x > 0")
        >>> offsets, ids = index.match([{"x": 1}, {"x": 0}, {"x": 2}]).flat_ids()
        >>> offsets.tolist(), ids.tolist()
        ([0, 3, 3, 6], ['a', 'b', 'c', 'a', 'b', 'c'])
        """
        offsets, ranks, by_rank = self.sorted_ranks()
        return offsets, by_rank[ranks]

    def sorted_ranks(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.object_]]:
        """Every event's subscriptions as ranks of their ids in plain string order, ascending within
        each event, and the ids in rank order: ``by_rank[ranks[offsets[i]:offsets[i + 1]]]`` are
        ``ids(i)``. ``by_rank`` is the same array for every ``Matches`` of one index version (a
        writer may keep what it derives from it); ``ranks`` come from compiled loops (a bitmap
        over the ranks for events with many subscriptions, without spelling out ``slots``).

        >>> from routing.matching.index import MatchIndex
        >>> index = MatchIndex()
        >>> for sid in ("b", "a", "c"):
        ...     index.add(sid, "x > 0" if sid != "b" else "x > 1")
        >>> offsets, ranks, by_rank = index.match([{"x": 1}, {"x": 2}]).sorted_ranks()
        >>> offsets.tolist(), ranks.tolist(), by_rank.tolist()
        ([0, 2, 5], [0, 2, 0, 1, 2], ['a', 'b', 'c'])
        """
        packed = None
        if self._ranker is not None:
            rank, by_rank, packed = self._ranker()
        else:
            rank, by_rank = _name_ranks(self._names)
        offsets = self.offsets
        if self._slots is None and self._runs is not None:  # straight from the runs
            fid_offsets, fids, m_start, _ = self._runs
            assert packed is not None, "runs come from MatchIndex, whose ranker gives the packed ranks"
            ranks = np.empty(int(offsets[-1]), dtype=np.int64)
            K.ranked_members(fid_offsets, fids, m_start, packed, len(rank), offsets, ranks)
        else:
            ranks = rank[self.slots]
            K.sort_segments(offsets, ranks)
        return offsets, ranks, by_rank


def _name_ranks(names: Sequence[str | None]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.object_]]:
    """Each name's rank in plain string (code point) order, and the names in that order (an object
    array; None as "")."""
    arr = np.empty(len(names), dtype=object)
    arr[:] = [n if n is not None else "" for n in names]
    # Python's sort: numpy's fixed-width strings would drop trailing NUL characters
    order = np.asarray(sorted(range(len(arr)), key=arr.__getitem__), dtype=np.int64)
    rank = np.empty(len(arr), dtype=np.int64)
    rank[order] = np.arange(len(arr))
    return rank, arr[order]


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

    def apply(self, changes: Iterable[tuple[str, Filter | str | None]]) -> None:
        """Apply changes in order: ``(id, filter)`` adds or replaces, ``(id, None)`` removes (an
        unknown id: nothing to remove). Raises ``FilterError`` (nothing changes) on bad text."""
        parsed = [(sid, None if filt is None else _as_filter(filt)) for sid, filt in changes]
        for sid, f in parsed:
            if f is None:
                self._filters.pop(sid, None)
            else:
                self._filters[sid] = f

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
