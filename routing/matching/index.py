"""Incremental content matching: the subscription index and its brute-force oracle.

Two indexes share one interface (docs/conventions.md §2: an index has add, remove and a query):

- ``MatchIndex``, the fast exact index: per-attribute bucketed bitsets over the distinct filters,
  ANDed per event, with an exact check of the candidates whose buckets are not decisive, and
  numba-compiled kernels (``routing.matching.kernels``) for the inner loops.
- ``BruteForceIndex``, the oracle: ``Filter.matches`` on every subscription for every event
  (``routing.matching.oracle``, with ``EventBatch`` and ``Matches``; all three re-exported here).

Both take ``add(subscription_id, filter)`` (a ``Filter`` or its text; adding an existing id
replaces it), ``remove(subscription_id)``, ``apply(changes)`` (a batch of ``(id, filter)`` and
``(id, None)`` changes, as in ``routing.matching.table``) and ``match(events)``, where ``events``
is an ``EventBatch`` or a sequence of attribute mappings; ``match`` returns a ``Matches``: per
event, the ids of the subscriptions active at that point that the event satisfies.

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
import re
import sys
import zlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from itertools import accumulate, chain, compress, count, islice, repeat
from operator import attrgetter, eq, is_, is_not, itemgetter, not_
from typing import Any, Final, TypeAlias, cast

import numpy as np
import numpy.typing as npt

from routing.matching import kernels as K
from routing.matching.collector import collector_paused
from routing.matching.keyed import KeyTable, SubscriptionSlots
from routing.matching.language import (
    _SIMPLE_FILTER,
    _SIMPLE_PREDICATE,
    Filter,
    Kind,
    Op,
    Predicate,
    Value,
    _simple_parts,
    parse_filter,
)
from routing.matching.numeric_form import read_numeric_form, record_keys, same_spans, sort_records
from routing.matching.oracle import BruteForceIndex, EventBatch, Matches, Ranks, _as_batch, _name_ranks
from routing.matching.packing import pack_strings, unpack_strings

__all__ = ["COMPILED_FORMAT", "BruteForceIndex", "EventBatch", "MatchIndex", "Matches"]

COMPILED_FORMAT: Final = 2
"""The version of ``MatchIndex.to_arrays``' layout; ``from_arrays`` refuses any other."""

_MISSING: Final = object()


_OPS: Final = {
    Op.EQ.name: K.O_EQ, Op.NE.name: K.O_NE, Op.LT.name: K.O_LT, Op.LE.name: K.O_LE, Op.GT.name: K.O_GT,
    Op.GE.name: K.O_GE, Op.BETWEEN.name: K.O_BETWEEN, Op.IN.name: K.O_IN, Op.NOT_IN.name: K.O_NOT_IN,
}  # fmt: skip
_SYMBOL_OPS: Final = {"=": K.O_EQ, "!=": K.O_NE, "<": K.O_LT, "<=": K.O_LE, ">": K.O_GT, ">=": K.O_GE}
_MAX_ATTRIBUTES: Final = 1 << 23  # a predicate's code (attribute << 8 | kind << 4 | op) is an int32
_DOUBLE_INTS: Final = 2**53  # integers up to this magnitude are exact doubles
_NUMBER: Final = Kind.NUMBER

# a compiled predicate: (attribute index << 8 | P_* kind << 4 | O_* operator, a, b, list literals)
_Record: TypeAlias = tuple[int, float, float, tuple[float, ...]]
# a compiled filter: its records sorted, the filter itself when Python must check it, the dedup key
_Compiled: TypeAlias = tuple[tuple[_Record, ...], Filter | None, int]
# compiled filters as three lists: the records, the filters that Python must check, the keys
_CompiledMany: TypeAlias = tuple[list[tuple[_Record, ...]], list[Filter | None], list[int]]
# a predicate's cache entry: its record, whether Python must check it, and the literals' kind
_Cached: TypeAlias = tuple[_Record, bool, Kind | None]
_PREDICATES: Final = attrgetter("predicates")
_ATTRIBUTE: Final = attrgetter("attribute")
_OP_NAME: Final = attrgetter("op._name_")
_VALUES: Final = attrgetter("values")
_KIND: Final = attrgetter("_kind")
_FIRST, _SECOND, _THIRD, _FOURTH = itemgetter(0), itemgetter(1), itemgetter(2), itemgetter(3)
_MEMO_SIZE: Final = 1 << 14  # entries of each compile cache (emptied when full)


def _python_identity() -> npt.NDArray[np.int64]:
    """This interpreter's major and minor version and hash width: the dedup keys of a compiled
    index (hashes of tuples of numbers) hold in another process of the same identity."""
    return np.asarray([sys.version_info[0], sys.version_info[1], sys.hash_info.width], dtype=np.int64)


def _checksum(arrays: Mapping[str, npt.NDArray[Any]]) -> int:
    """CRC-32 of the arrays' names, dtypes, shapes and bytes, in name order."""
    crc = 0
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        crc = zlib.crc32(f"{name}:{a.dtype.str}:{a.shape}".encode(), crc)
        crc = zlib.crc32(a.view(np.uint8).reshape(-1).data if a.size else b"", crc)
    return crc


def _grow(arr: npt.NDArray[Any], size: int, fill: Any = 0) -> npt.NDArray[Any]:
    """``arr`` with its first axis grown to at least ``size`` (by half again), new entries ``fill``."""
    if arr.shape[0] >= size:
        return arr
    new = np.full((max(size, arr.shape[0] + arr.shape[0] // 2), *arr.shape[1:]), fill, dtype=arr.dtype)
    new[: arr.shape[0]] = arr
    return new


def _by_op_memo() -> defaultdict[str, dict[tuple[object, ...], _Cached]]:
    """One attribute's part of the predicate cache: by operator name, then literals."""
    return defaultdict(dict)


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


_COMPACT_MIN: Final = 1 << 14  # garbage predicate records that a flush leaves in place whatever the store's size
_ORDER_RECORDS: Final = 4  # leading records of a filter that order new fids


def _record_order(
    groups: npt.NDArray[np.int64],
    offs: npt.NDArray[np.int64],
    r_code: npt.NDArray[np.int64],
    r_x: npt.NDArray[np.float64],
) -> npt.NDArray[np.int64]:
    """The groups (compiled filters ``offs[g] .. offs[g + 1] - 1`` of ``r_code``, ``r_x``) in the
    order of their leading records: by attribute, operator and literal, a filter with no record on
    an attribute after those that have one (ties in the order given). Only equalities order:
    a record with another operator counts as absent.

    New fids are taken in this order, so that the fids an equality on a leading attribute
    excludes lie together and whole words of the AND of an event's rows come out empty. Range
    filters (W1) keep the order given: sorted by their bounds they give the sparse path nothing to
    skip and slow the dense AND (docs/decisions/matching-bitset-index.md).
    """
    starts = offs[groups]
    lens = offs[groups + 1] - starts
    keys: list[npt.NDArray[Any]] = []
    for t in range(_ORDER_RECORDS):
        at = np.where(lens > t, starts + t, 0)
        has = (lens > t) & ((r_code[at] & 15) == K.O_EQ)
        keys += [np.where(has, r_code[at], np.iinfo(np.int64).max), np.where(has, r_x[at], 0.0)]
    return np.lexsort(keys[::-1]).astype(np.int64)


def _flatten(
    recs: list[tuple[_Record, ...]],
) -> tuple[
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
]:
    """Compiled filters' record tuples as arrays: ``(offs, r_code, r_x, r_y, r_lits)``, group ``g``
    the records ``offs[g] .. offs[g + 1] - 1``; a list's literals are ``r_lits[r_x : r_x + r_y]``."""
    n = len(recs)
    offs = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, recs), dtype=np.int64, count=n), out=offs[1:])
    flat = list(chain.from_iterable(recs))
    r_code = np.fromiter(map(_FIRST, flat), dtype=np.int64, count=len(flat))
    r_x = np.fromiter(map(_SECOND, flat), dtype=np.float64, count=len(flat))
    r_y = np.fromiter(map(_THIRD, flat), dtype=np.float64, count=len(flat))
    lits: list[float] = []
    if any(map(_FOURTH, flat)):  # a list's literals: r_x and r_y say where in ``lits``
        for r, rec in enumerate(flat):
            if rec[3]:
                r_x[r], r_y[r] = len(lits), len(rec[3])
                lits.extend(rec[3])
    return offs, r_code, r_x, r_y, np.asarray(lits, dtype=np.float64)


def _take_groups(
    groups: npt.NDArray[np.int64], offs: npt.NDArray[np.int64], *columns: npt.NDArray[Any]
) -> tuple[npt.NDArray[np.int64], list[npt.NDArray[Any]]]:
    """The records of ``groups`` (in that order) of ``columns`` grouped by ``offs``: new offsets and columns."""
    lens = offs[groups + 1] - offs[groups]
    new = np.zeros(len(groups) + 1, dtype=np.int64)
    np.cumsum(lens, out=new[1:])
    at = np.repeat(offs[groups] - new[:-1], lens) + np.arange(int(new[-1]), dtype=np.int64)
    return new, [c[at] for c in columns]


class MatchIndex:
    """The fast exact index over a changing set of atomic subscriptions.

    Structure (the layout is described in ``routing.matching.kernels``): identical filters share one
    *fid* (distinct-filter slot) that lists its subscriptions. Each attribute that some
    predicate names gets bitset rows over the fids, one per bucket of its values: missing,
    no kind, false, true, each interned string literal (up to ``max_strings`` per attribute) and
    the other strings, and the numbers cut at up to ``max_cuts`` literals per attribute (each cut
    a point bucket between two open intervals). An event's candidates are the AND of one row per
    attribute; a fid whose buckets were all decisive is a match outright, others are verified
    against their compiled predicates, and the few predicates doubles and codes cannot express
    (string orderings, ``startswith``, ``endswith``, ``contains``, integers beyond 2**53) are
    checked by ``Filter.matches`` on the candidates that reach them. Matching walks the fids in
    blocks that stay in cache while the whole batch of events streams by, ANDing an event's
    sparsest rows first; new fids are numbered in the order of their filters' leading records, so
    that an equality on a leading attribute (Gryphon-style equality and don't-care filters)
    leaves whole words empty, which are skipped. Each row keeps a summary bit per word (does it
    hold any?), refreshed by the flush for new rows and the words whose fids changed; an event
    whose summaries leave few words to AND (as Gryphon's equality filters do) is matched on those
    words alone, event after event, so that its hits need no grouping. ``match`` answers with each
    event's matching fids; a fid's subscriptions lie together in a member table rebuilt after
    changes, so the ``Matches`` names them as runs and spells out slots only when asked.

    Changes never rebuild the index, and they are applied in batches: ``apply(changes)``
    applies a batch, together with the changes that ``add`` and ``remove`` queued (``flush`` and
    ``match`` apply the queue too). Python compiles each filter (each distinct predicate and each
    distinct text once: both are cached; new literals become cuts or string rows by copying the
    row of the bucket they split, which keeps every other fid's bits correct); compiled kernels
    find the fids of identical filters (by hash, then record by record) and list and unlist the
    subscriptions; the bit work of new and dropped fids waits for the next ``match`` or ``flush``.

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
        self._subs = SubscriptionSlots()
        self._sub_fid = np.zeros(64, dtype=np.int32)
        self._sub_pos = np.zeros(64, dtype=np.int32)  # where the slot sits in ``_members``
        # distinct filters (fids): the M_* columns of ``_meta``, and their subscriptions
        self._fid_keys = KeyTable()  # the keyed fids by their ``_f_key``
        self._free_fids: list[int] = []
        self._n_fids = 0
        self._meta = np.zeros((64, 6), dtype=np.int32)
        self._f_key = np.zeros(64, dtype=np.int64)
        self._f_keyed = np.zeros(64, dtype=bool)
        self._slow: dict[int, Filter] = {}
        # compile caches: a predicate's record by attribute, operator name and literals, with
        # the count of its entries; a filter text's compiled form
        self._pred_memo: defaultdict[str, defaultdict[str, dict[tuple[object, ...], _Cached]]] = defaultdict(
            _by_op_memo
        )
        self._memo_size = 0
        self._text_memo: dict[str, _Compiled] = {}
        self._members = np.zeros(64, dtype=np.int32)
        self._m_used = 0
        self._m_garbage = 0
        # what matching reads instead, rebuilt by the flush after changes: every fid's members
        # packed in fid order (``m_packed[m_start[f] : m_start[f + 1]]``), and the bitset of the
        # fids whose every set bit is decisive (matched without a check)
        self._m_start = np.zeros(65, dtype=np.int32)
        self._m_packed = np.zeros(64, dtype=np.int32)
        self._packed_stale = False
        self._packed_shared = False  # whether a Matches holds them (then a rebuild takes new ones)
        self._exact = np.zeros(1, dtype=np.uint64)
        # match's buffers of (event, fid) hits and slow pairs, kept between calls
        self._hit_ev = np.zeros(1024, dtype=np.int32)
        self._hit_fid = np.zeros(1024, dtype=np.int32)
        self._slow_pairs = np.zeros((64, 2), dtype=np.int64)
        # compiled predicates (``routing.matching.kernels.verify``) and list literals
        self._p_code = np.zeros(256, dtype=np.int32)
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
        # a bit per word of each row: does it hold any? (``summarize``; refreshed by the flush, for
        # rows up to ``_summarised_rows`` and the words whose fids changed)
        self._summary = np.zeros((16, 1), dtype=np.uint64)
        self._summarised_rows = 0
        self._last_paths = np.zeros(3, dtype=np.int64)  # events per path of the last match (``stats``)
        # changes queued until the next apply, flush or match (the last of each id), with the texts
        # among them that the text cache lacks, parsed; the subscriptions with the queue applied
        self._queue: dict[str, Filter | str | None] = {}
        # True: of the numeric form, None: of another simple shape (both compiled from the text)
        self._queue_parsed: dict[str, Filter | bool | None] = {}
        # the last bulk read of new texts that were all of the numeric form, with those texts: the
        # compile of exactly those texts takes it instead of reading them again (a build's chunks)
        self._numeric_read: tuple[list[str], Any] | None = None
        self._simple_memo: dict[tuple[str | None, ...], _Record] = {}  # a simple predicate's record by its groups
        self._n_subs = 0
        # bit work batched until the next match
        self._pending_set: list[int] = []
        self._pending_clear: list[int] = []
        self._expected = 16.0  # matches per event, a running estimate that sizes match's buffers
        self._version = 0  # bumped by every change; ``Matches`` of an older version cannot name slots
        self._ranks: tuple[int, Ranks] | None = None

    # -- changes ----------------------------------------------------------------------------

    def add(self, subscription_id: str, filt: Filter | str) -> None:
        """Add a subscription, or replace the one with this id.

        The change joins the queue that the next ``apply``, ``flush`` or ``match`` applies in one
        batch. Raises ``FilterError`` (nothing changes) when ``filt`` is text that does not parse.
        """
        self._enqueue(((subscription_id, filt),))

    def remove(self, subscription_id: str) -> None:
        """Remove a subscription (queued like ``add``); ``KeyError`` when no subscription has this id."""
        if subscription_id not in self:
            raise KeyError(subscription_id)
        self._enqueue(((subscription_id, None),))

    def apply(self, changes: Iterable[tuple[str, Filter | str | None]]) -> None:
        """Apply subscription changes in order, with any queued by ``add`` and ``remove``, as one batch.

        ``(id, filter)`` adds a subscription or replaces the one with this id; ``(id, None)``
        removes it (an unknown id: nothing to remove). The index ends as if the changes had been
        applied one by one: only the last change of each id matters. Filters are compiled in
        Python (each distinct predicate and each distinct text once: both are cached); finding
        the distinct filters they share, and the bookkeeping of subscriptions, is done for the
        whole batch at once, by compiled kernels; the bit work waits for the next ``match`` or
        ``flush``.

        Raises ``FilterError`` (nothing changes) when some filter is text that does not parse.

        Examples
        --------
        >>> index = MatchIndex()
        >>> index.apply([("a", "x > 1"), ("b", "x > 1"), ("c", "y = 'q'"), ("a", None), ("z", None)])
        >>> index.match([{"x": 2, "y": "q"}]).all_ids(), index.stats()["distinct_filters"]
        ([['b', 'c']], 2)
        """
        with collector_paused():  # a bulk of small objects: docs/decisions/collector-paused.md
            staged = self._parse(changes)
            if not staged and not self._queue:
                return  # nothing changes: the index keeps its version (and its Matches' ranks)
            self._queue.update(staged)
            self._version += 1
            self._apply_queue()

    def _parse(self, changes: Iterable[tuple[str, Filter | str | None]]) -> list[tuple[str, Filter | str | None]]:
        """The changes as a list, once every text among them parses (``FilterError`` if not); texts
        that the text cache lacks are kept parsed for the queue: True for the numeric form (read
        in bulk, ``numeric_form.read_numeric_form``), None for the parser's other simple shapes,
        else the filter."""
        staged = list(changes)
        if any(map(isinstance, map(_SECOND, staged), repeat(str))):
            texts, parsed = self._text_memo, self._queue_parsed
            fresh = [filt for _, filt in staged if isinstance(filt, str) and filt not in texts and filt not in parsed]
            if fresh:
                fresh = list(dict.fromkeys(fresh))
                read = read_numeric_form(fresh)
                form = read[0] >= 0
                self._numeric_read = (fresh, read) if form.all() else None
                new: dict[str, Filter | bool | None] = dict.fromkeys(compress(fresh, form.tolist()), True)
                simple = _SIMPLE_FILTER.fullmatch
                for filt in compress(fresh, (~form).tolist()):
                    new[filt] = None if simple(filt) is not None else parse_filter(filt)
                parsed.update(new)
        return staged

    def _enqueue(self, changes: Iterable[tuple[str, Filter | str | None]]) -> None:
        """Queue changes (the last of each id wins), counting the subscriptions they leave."""
        staged = self._parse(changes)
        if not staged:
            return
        queue, subs = self._queue, self._subs
        live = self._n_subs
        # a few ids are probed one by one (SubscriptionSlots.slot), more at once
        present = subs.find(list(map(_FIRST, staged))).tolist() if len(staged) > 8 else None
        for i, (sid, filt) in enumerate(staged):
            queued = queue.get(sid, _MISSING)
            if queued is _MISSING:
                live -= (subs.slot(sid) if present is None else present[i]) >= 0
            else:
                live -= queued is not None
            live += filt is not None
            queue[sid] = filt
        self._n_subs = live
        self._version += 1

    def _apply_queue(self) -> None:
        """Apply the queued changes: the subscriptions' bookkeeping now, the bit work at the next flush."""
        if not self._queue:
            return
        final, self._queue = self._queue, {}
        parsed, self._queue_parsed = self._queue_parsed, {}
        ids, filters = list(final), list(final.values())
        olds = self._subs.find(ids)  # each id's slot now (-1: not there)
        stays = np.fromiter(map(is_not, filters, repeat(None)), dtype=np.bool_, count=len(ids))
        removed = olds[~stays & (olds >= 0)].tolist()
        add_ids = list(compress(ids, stays.tolist()))
        if add_ids:
            fids = self._fids_of(cast(list[Filter | str], list(compress(filters, stays.tolist()))), parsed)
            old = olds[stays]
            had = old >= 0
            if had.any():
                same = had & (self._sub_fid[np.maximum(old, 0)] == fids)  # replaced by an identical filter
                removed.extend(old[had & ~same].tolist())
                if same.any():
                    add_ids = list(compress(add_ids, (~same).tolist()))
                    fids = fids[~same]
        emptied = None
        self._packed_stale = True
        if removed:
            slots = np.asarray(removed, dtype=np.int64)
            emptied = np.empty(len(removed), dtype=np.int64)
            n = K.unlist_members(slots, self._sub_fid, self._sub_pos, self._members, self._meta, emptied)
            emptied = emptied[:n]
            self._subs.release(slots)
        if add_ids:
            slots = self._assign_slots(add_ids)
            done = 0
            while done < len(slots):
                done, self._m_used, garbage = K.list_members(
                    slots, fids, done, self._sub_fid, self._sub_pos, self._members, self._meta, self._m_used
                )
                self._m_garbage += garbage
                if done < len(slots):  # a member list must move and the pool is full
                    self._make_room(2 * int(self._meta[fids[done], K.M_MCAP]) + 1)
        if emptied is not None and len(emptied):
            self._drop_fids(emptied[self._meta[emptied, K.M_MCOUNT] == 0])
        self._n_subs = len(self._subs)

    def _assign_slots(self, ids: list[str]) -> npt.NDArray[np.int64]:
        """Slots for new subscriptions (free ones first), named and found by their ids."""
        slots = self._subs.assign(ids)
        if len(self._subs.names) > len(self._sub_fid):
            self._sub_fid = _grow(self._sub_fid, len(self._subs.names))
            self._sub_pos = _grow(self._sub_pos, len(self._subs.names))
        return slots

    def _make_room(self, size: int) -> None:
        """Room for ``size`` more members at the end of the pool (squeezing out garbage when large)."""
        if self._m_used + size > len(self._members) and self._m_garbage > self._m_used // 2:
            self._compact_members()
        self._members = _grow(self._members, self._m_used + size)

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
        return self._n_subs

    def __contains__(self, subscription_id: object) -> bool:
        queued = self._queue.get(subscription_id, _MISSING)  # type: ignore[call-overload]
        return subscription_id in self._subs if queued is _MISSING else queued is not None

    # -- compiling a filter -----------------------------------------------------------------

    def _attr(self, name: str) -> int:
        a = self._attr_of.get(name)
        if a is not None:
            return a
        a = len(self._attr_names)
        if a >= _MAX_ATTRIBUTES:
            raise ValueError(f"an index holds at most {_MAX_ATTRIBUTES:,} attributes")
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
        if r >= self._rows.shape[0]:  # by half again (a bulk build makes them by the thousand); flush trims
            rows = np.zeros((r + max(64, r // 2), self._rows.shape[1]), dtype=np.uint64)
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

    def _fids_of(self, filters: list[Filter | str], parsed: dict[str, Filter | bool | None]) -> npt.NDArray[np.int64]:
        """The fid of each filter (texts that the text cache lacks are in ``parsed``): the texts of
        the numeric form compiled from their bytes at once (``_fids_numeric``), the others through
        the record tuples (``_compile_texts``, ``_compile_many``); the second finds the fids the
        first made (the keys are the same, ``numeric_form.record_keys``)."""
        fid_at = np.empty(len(filters), dtype=np.int64)
        numeric = [type(f) is str and parsed.get(f) is True for f in filters]
        rest = list(map(not_, numeric))
        if True in rest:
            others = list(compress(filters, rest))
            if all(map(isinstance, others, repeat(Filter))):
                recs, slows, keys = self._compile_many(cast(list[Filter], others))
            else:
                recs, slows, keys = self._compile_texts(others, parsed)
            fid_at[np.flatnonzero(rest)] = self._fids_of_compiled(recs, slows, keys)
        if True in numeric:
            fid_at[np.flatnonzero(numeric)] = self._fids_numeric(cast(list[str], list(compress(filters, numeric))))
        return fid_at

    def _fids_of_compiled(
        self, recs: list[tuple[_Record, ...]], slows: list[Filter | None], keys: list[int]
    ) -> npt.NDArray[np.int64]:
        """The fid of each compiled filter: identical filters of the batch form one group, led by
        the first, found by key and then compared (by identity first: the compile cache shares
        records)."""
        lead_of: dict[int, int] = {}
        lead = list(map(lead_of.setdefault, keys, count()))
        if not (all(map(eq, recs, map(recs.__getitem__, lead))) and all(map(eq, slows, map(slows.__getitem__, lead)))):
            for i, j in enumerate(lead):  # a hash collision: a group of its own, not found by key
                if j != i and (recs[i] != recs[j] or slows[i] != slows[j]):
                    lead[i] = i
        leads = sorted(set(lead))
        fid_at = np.empty(len(recs), dtype=np.int64)
        fid_at[leads] = self._fids_for(
            *_flatten([recs[i] for i in leads]), [slows[i] for i in leads], [keys[i] for i in leads]
        )
        return fid_at[np.asarray(lead, dtype=np.int64)]

    def _fids_numeric(self, texts: list[str]) -> npt.NDArray[np.int64]:
        """The fid of each text of the numeric form (``numeric_form``), its records made from the
        bytes (``_compile_numeric``) and its key computed without a tuple (``record_keys``). The
        index is the same as through ``_compile_simple`` text by text once the attributes are
        known (tests/unit/matching/test_index_churn.py). Each distinct text is compiled once, in
        the order of its first use (which keeps the order in which new attributes and cuts come),
        so the compile reads exactly the batch's new texts when ``apply`` has read them."""
        position: dict[str, int] = {}
        at = np.fromiter(map(position.setdefault, texts, count()), dtype=np.int64, count=len(texts))
        if len(position) == len(texts):
            return self._fids_numeric_distinct(texts)
        firsts = np.fromiter(position.values(), dtype=np.int64, count=len(position))  # ascending
        fids = self._fids_numeric_distinct(list(position))
        return fids[np.searchsorted(firsts, at)]

    def _fids_numeric_distinct(self, texts: list[str]) -> npt.NDArray[np.int64]:
        """``_fids_numeric`` of distinct texts."""
        offs, codes, x, y = self._compile_numeric(texts)
        keys = record_keys(offs, codes, x, y)
        lead_of: dict[int, int] = {}
        lead = np.fromiter(map(lead_of.setdefault, keys, count()), dtype=np.int64, count=len(keys))
        dup = np.flatnonzero(lead != np.arange(len(keys)))
        for i in dup.tolist():  # equal keys: the same records, or a hash collision (a group of its own)
            j = int(lead[i])
            if not (
                np.array_equal(codes[offs[i] : offs[i + 1]], codes[offs[j] : offs[j + 1]])
                and np.array_equal(x[offs[i] : offs[i + 1]], x[offs[j] : offs[j + 1]])
                and np.array_equal(y[offs[i] : offs[i + 1]], y[offs[j] : offs[j + 1]])
            ):
                lead[i] = i
        leads = np.flatnonzero(lead == np.arange(len(lead)))  # each group's lead leads itself
        if len(leads) < len(keys):
            offs, (codes, x, y) = _take_groups(leads, offs, codes, x, y)
            keys = [keys[i] for i in leads.tolist()]
        fids = self._fids_for(offs, codes, x, y, np.zeros(0, dtype=np.float64), [None] * len(keys), keys)
        if len(leads) == len(lead):
            return fids
        fid_at = np.empty(len(lead), dtype=np.int64)
        fid_at[leads] = fids
        return fid_at[lead]

    def _compile_numeric(
        self, texts: Sequence[str]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """The records of texts of the numeric form as arrays: group ``i`` (text ``i``) is records
        ``offs[i] .. offs[i + 1] - 1`` of ``codes``, ``x``, ``y``, sorted as ``_compile_simple``
        sorts its tuples (``sort_records``). Names are looked up once per distinct name (by hash,
        the bytes compared); new attributes are numbered in the order met; new literals become
        cuts in their order in the batch while there is room, as one by one (``_cut_many``).

        Examples
        --------
        >>> index = MatchIndex()
        >>> offs, codes, x, y = index._compile_numeric(["b between 2 and 9 and a between 0 and 5", "c = 1"])
        >>> offs.tolist(), codes.tolist(), x.tolist(), y.tolist(), index._attr_names
        ([0, 2, 3], [54, 310, 560], [2.0, 0.0, 1.0], [9.0, 5.0, 1.0], ['b', 'a', 'c'])
        """
        memo, self._numeric_read = self._numeric_read, None
        read = memo[1] if memo is not None and memo[0] == texts else read_numeric_form(texts)
        counts, start, end, hashes, ops, low, high, buf = read
        if (counts < 0).any():
            raise ValueError("a text is not of the numeric form")
        unique = np.unique(hashes)  # few distinct names: a hash pass and a search, no sort of every name
        inv = np.searchsorted(unique, hashes)
        first = K.first_positions(inv, len(unique))
        rep = first[inv]
        if same_spans(buf, start, end, start[rep], end[rep]):
            names = [buf[start[k] : end[k]].tobytes().decode("ascii") for k in first.tolist()]
            order = np.argsort(first, kind="stable").tolist()
        else:  # two names of one hash: each name read apart
            names = [buf[s:e].tobytes().decode("ascii") for s, e in zip(start.tolist(), end.tolist(), strict=True)]
            inv = np.arange(len(names))
            order = list(range(len(names)))
        attr_u = np.empty(len(names), dtype=np.int64)
        for u in order:  # new attributes in the order they come
            a = self._attr_of.get(names[u])
            attr_u[u] = self._attr(names[u]) if a is None else a
        attrs = attr_u[inv]
        x = low.astype(np.float64)
        y = high.astype(np.float64)
        self._cut_many(attrs, x, y)
        codes = attrs << 8 | K.P_NUMBER << 4 | ops
        offs = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offs[1:])
        sort_records(offs, codes, x, y)
        return offs, codes, x, y

    def _compile_texts(self, filters: list[Filter | str], parsed: dict[str, Filter | bool | None]) -> _CompiledMany:
        """``_compile_many`` of filters among which are texts (cached by text); a new text of the
        parser's simple shapes is compiled from the text itself (``_compile_simple``). Texts of the
        numeric form take ``_fids_numeric`` instead."""
        texts = self._text_memo
        compiled: list[_Compiled] = []
        to_compile: list[Filter] = []
        where: list[int] = []
        new_texts: list[tuple[int, str]] = []
        simple: list[tuple[int, str]] = []
        none: _Compiled = ((), None, 0)
        for item in filters:
            if isinstance(item, str):
                known = texts.get(item)
                if known is not None:
                    compiled.append(known)
                    continue
                new_texts.append((len(compiled), item))
                form = parsed[item]  # parsed when queued, since the cache lacked it then
                if not isinstance(form, Filter):  # of the simple shapes: compiled below
                    simple.append((len(compiled), item))
                    compiled.append(none)
                    continue
                filt = form
            else:
                filt = item
            where.append(len(compiled))
            to_compile.append(filt)
            compiled.append(none)
        for i, text in simple:
            direct = self._compile_simple(text)
            if direct is not None:
                compiled[i] = direct
            else:  # a predicate Python must check: the Filter path
                where.append(i)
                to_compile.append(parse_filter(text))
        for i, c in zip(where, zip(*self._compile_many(to_compile), strict=True), strict=True):
            compiled[i] = c
        for i, text in new_texts:
            if len(texts) >= _MEMO_SIZE:
                texts.clear()
            texts[text] = compiled[i]
        return list(map(_FIRST, compiled)), list(map(_SECOND, compiled)), list(map(_THIRD, compiled))

    def _cut_many(self, attrs: npt.NDArray[np.int64], x: npt.NDArray[np.float64], y: npt.NDArray[np.float64]) -> None:
        """Make cuts of the literals ``x[i], y[i]`` of attribute ``attrs[i]``, in that order, while
        the attribute has room (``_simple_number_record``'s cuts, for a batch)."""
        limit = self._max_cuts
        for a in np.unique(attrs).tolist():
            cuts = self._cut_sets[a]
            if len(cuts) >= limit:
                continue
            on = attrs == a
            seq = np.column_stack((x[on], y[on])).ravel()
            seq = seq[~np.isin(seq, np.fromiter(cuts, dtype=np.float64, count=len(cuts)))]  # new literals
            pos, size = 0, 4 * limit
            while pos < len(seq) and len(cuts) < limit:  # a prefix at a time: the cuts fill early
                values, first = np.unique(seq[pos : pos + size], return_index=True)
                for v in values[np.argsort(first, kind="stable")].tolist():
                    if len(cuts) >= limit:
                        break
                    if v not in cuts:
                        self._cut(a, v)
                pos, size = pos + size, 4 * size

    def _compile_simple(self, text: str) -> _Compiled | None:
        """The compiled form of a text that ``_SIMPLE_FILTER`` accepts, made from the matched groups
        of each predicate without a ``Filter`` (each predicate's record cached by its groups), or
        None when some predicate is one Python must check (an integer beyond 2**53, a string
        ordering): those take the ``Filter`` path. Equal to what ``_compile_many`` makes of
        ``parse_filter(text)``: the records are those of ``_record_of`` for the same predicates."""
        memo = self._simple_memo
        records: list[_Record] = []
        match, pos, n = _SIMPLE_PREDICATE.match, 0, len(text)
        while pos < n or not records:
            m = cast(re.Match[str], match(text, pos))  # the whole text matched _SIMPLE_FILTER
            groups = m.groups()
            record = memo.get(groups)
            if record is None:
                record = self._simple_number_record(groups)
                if record is None:
                    parts = _simple_parts(groups)
                    if parts is None:  # pragma: no cover  (_SIMPLE_FILTER takes no boolean ordered)
                        return None
                    record, slow, _ = self._record_of(*parts)
                    if slow:
                        return None
                if len(memo) >= _MEMO_SIZE:
                    memo.clear()
                memo[groups] = record
            records.append(record)
            pos = m.end()
        records.sort()
        recs = tuple(records)
        return recs, None, hash(recs)

    def _simple_number_record(self, groups: tuple[str | None, ...]) -> _Record | None:
        """``_record_of`` for a simple predicate on an integer literal of at most 15 characters
        (an exact double) without making its parts: ``between``, then the comparisons; None for
        the others. New literals become cuts as in ``_record_of``."""
        name, symbol, number, _, _, low, high = groups
        if symbol is None:
            if len(cast(str, low)) > 15 or len(cast(str, high)) > 15:
                return None
            x, y, o = float(int(cast(str, low))), float(int(cast(str, high))), K.O_BETWEEN
        elif number is not None and len(number) <= 15:
            x = y = float(int(number))
            o = _SYMBOL_OPS[symbol]
        else:
            return None
        a = self._attr_of.get(cast(str, name))
        if a is None:
            a = self._attr(cast(str, name))
        cuts = self._cut_sets[a]
        if len(cuts) < self._max_cuts:
            if x not in cuts:
                self._cut(a, x)
            if y not in cuts and len(cuts) < self._max_cuts:
                self._cut(a, y)
        return a << 8 | K.P_NUMBER << 4 | o, x, y, ()

    def _compile_many(self, filters: Sequence[Filter]) -> _CompiledMany:
        """Each filter's predicate records sorted by attribute, the filter itself when Python must
        check it (else None), and the dedup key (the hash of the records, and of the filter when
        Python checks it).

        A predicate's record is cached by its attribute, operator and literals (with the kind,
        which tells apart equal literals such as ``1`` and ``true``). The work runs over the whole
        batch at once, in C loops (``map``) that allocate little: a cache hit costs three lookups.
        """
        if self._memo_size >= _MEMO_SIZE:  # full: emptied before the next batch (it stops filling up)
            self._pred_memo.clear()
            self._memo_size = 0
        preds = list(chain.from_iterable(map(_PREDICATES, filters)))
        kinds = list(map(_KIND, preds))
        by_attribute = map(self._pred_memo.__getitem__, map(_ATTRIBUTE, preds))
        by_op = list(map(dict.__getitem__, by_attribute, map(_OP_NAME, preds)))  # defaultdicts: missing ones made
        hits = list(map(dict.get, by_op, map(_VALUES, preds)))
        if None in hits or not all(map(is_, map(_THIRD, cast(list[_Cached], hits)), kinds)):
            room = _MEMO_SIZE - self._memo_size
            for i in [i for i, hit in enumerate(hits) if hit is None or hit[2] is not kinds[i]]:
                p = preds[i]
                hit = by_op[i].get(p.values)  # cached by an earlier predicate of this batch?
                if hit is None or hit[2] is not kinds[i]:
                    hit = self._compile_predicate(p)
                    if room > 0:
                        by_op[i][p.values] = hit
                        room -= 1
                hits[i] = hit
            self._memo_size = _MEMO_SIZE - room
        cached = cast(list[_Cached], hits)
        records = list(map(_FIRST, cached))
        ends = list(accumulate(map(len, map(_PREDICATES, filters))))
        starts = [0, *ends][:-1]
        recs = list(map(tuple, map(sorted, map(records.__getitem__, map(slice, starts, ends)))))
        if True not in map(_SECOND, cached):
            return recs, [None] * len(recs), list(map(hash, recs))
        slow_at = list(map(_SECOND, cached))
        slows = [f if True in slow_at[i:j] else None for f, i, j in zip(filters, starts, ends, strict=True)]
        return recs, slows, [hash(r) if f is None else hash((r, f)) for r, f in zip(recs, slows, strict=True)]

    def _compile_predicate(self, p: Predicate) -> _Cached:
        """The record of one predicate, whether Python must check it, and the kind of its literals.

        New literals become cuts or string rows here, once: the record depends only on the
        predicate (attribute indexes and string codes never change), so it is cached.
        """
        return self._record_of(p.attribute, p.op, p.values, p._kind)

    def _record_of(self, attribute: str, op: Op, values: tuple[Value, ...], kind: Kind | None) -> _Cached:
        """``_compile_predicate`` of the predicate ``attribute op values`` (literals of ``kind``)."""
        a = self._attr_of.get(attribute)
        if a is None:
            a = self._attr(attribute)
        lists = op is Op.IN or op is Op.NOT_IN
        if op is Op.EXISTS:
            return (a << 8 | K.P_EXISTS << 4 | K.O_NONE, 0.0, 0.0, ()), False, kind
        if kind is _NUMBER:
            if not all(map(_exact_double, values)):
                return (a << 8 | K.P_SLOW_NUMBER << 4 | K.O_NONE, 0.0, 0.0, ()), True, kind
            nums = [float(v) for v in values]
            cuts = self._cut_sets[a]
            for x in nums:
                if x not in cuts and len(cuts) < self._max_cuts:
                    self._cut(a, x)
            code = a << 8 | K.P_NUMBER << 4 | _OPS[op._name_]
            if lists:
                return (code, 0.0, 0.0, tuple(sorted(set(nums)))), False, kind
            return (code, nums[0], nums[-1], ()), False, kind
        if kind is Kind.BOOLEAN:
            return (a << 8 | K.P_BOOL << 4 | _OPS[op._name_], 1.0 if values[0] else 0.0, 0.0, ()), False, kind
        if op is Op.EQ or op is Op.NE or lists:
            codes = [float(self._code(a, cast(str, v))) for v in values]
            code = a << 8 | K.P_STRING << 4 | _OPS[op._name_]
            if lists:
                return (code, 0.0, 0.0, tuple(sorted(set(codes)))), False, kind
            return (code, codes[0], 0.0, ()), False, kind
        return (a << 8 | K.P_SLOW_STRING << 4 | K.O_NONE, 0.0, 0.0, ()), True, kind

    def _fids_for(
        self,
        offs: npt.NDArray[np.int64],
        r_code: npt.NDArray[np.int64],
        r_x: npt.NDArray[np.float64],
        r_y: npt.NDArray[np.float64],
        r_lits: npt.NDArray[np.float64],
        slows: list[Filter | None],
        keys: list[int],
    ) -> npt.NDArray[np.int64]:
        """The fid of each distinct compiled filter (group ``g``: records ``offs[g] .. offs[g + 1] - 1``
        of ``r_code``, ``r_x``, ``r_y``, a list's literals in ``r_lits``, as ``_flatten`` makes
        them): an existing identical one, or a new one (no members yet).

        A fid is found by its key and then checked record by record against the predicate store
        (``same_records``), so a hash collision is never a match.
        """
        n = len(keys)
        cand = self._fid_keys.find(self._f_key, np.fromiter(keys, dtype=np.int64, count=n))
        same = np.empty(n, dtype=np.bool_)
        K.same_records(cand, offs, r_code, r_x, r_y, r_lits, self._meta, self._p_code, self._p_ab, self._lit, same)
        if self._slow:  # a slow fid is shared by equal filters only
            for g in np.flatnonzero(same).tolist():
                if slows[g] is not None and self._slow.get(int(cand[g])) != slows[g]:
                    same[g] = False
        if not same.all():
            new = np.flatnonzero(~same)
            cand[new] = self._new_fids(
                [slows[g] for g in new.tolist()],
                [keys[g] for g in new.tolist()],
                same,
                offs,
                r_code,
                r_x,
                r_y,
                r_lits,
                _record_order(new, offs, r_code, r_x),
            )
        return cand

    def _new_fids(
        self,
        slows: list[Filter | None],
        keys: list[int],
        same: npt.NDArray[np.bool_],
        offs: npt.NDArray[np.int64],
        r_code: npt.NDArray[np.int64],
        r_x: npt.NDArray[np.float64],
        r_y: npt.NDArray[np.float64],
        r_lits: npt.NDArray[np.float64],
        order: npt.NDArray[np.int64],
    ) -> npt.NDArray[np.int64]:
        """New fids for the groups that are not ``same`` (see ``same_records``), whose slow filters
        and keys are ``slows`` and ``keys``: their records stored, their bit work pending.

        The fids taken go to the groups in the order ``order`` (the lowest to ``order[0]``).
        """
        m, n_lits = K.new_records_size(same, offs, r_code, r_y)
        start = self._p_used
        if start + m > len(self._p_code):
            if self._p_garbage > start // 2:
                self._compact()
                start = self._p_used
            self._p_code = _grow(self._p_code, start + m)
            self._p_ab = _grow(self._p_ab, start + m)
        self._lit = _grow(self._lit, self._lit_used + n_lits)
        # the fids: free ones first
        k = len(keys)
        free = self._free_fids
        reused = free[max(0, len(free) - k) :][::-1]
        del free[max(0, len(free) - k) :]
        n_fids = self._n_fids
        taken = np.sort(np.asarray(reused + list(range(n_fids, n_fids + k - len(reused))), dtype=np.int64))
        if len(reused) < k:
            self._grow_fids(n_fids + k - len(reused))
        fids = np.empty(k, dtype=np.int64)
        fids[order] = taken
        fid_list = fids.tolist()
        flags = np.asarray([0 if s is None else K.SLOW for s in slows], dtype=np.int32)
        K.store_fids(
            same, fids, flags, offs, r_code, r_x, r_y, r_lits, start, self._lit_used,
            self._p_code, self._p_ab, self._lit, self._meta,
        )  # fmt: skip
        self._p_used = start + m
        self._lit_used += n_lits
        self._f_key[fids] = keys
        # on a hash collision the new fid simply is not shared
        self._f_keyed[fids] = self._fid_keys.add(self._f_key, fids) == fids
        for fid, slow in zip(fid_list, slows, strict=True):
            if slow is not None:
                self._slow[fid] = slow
        self._pending_set.extend(fid_list)
        return fids

    def _grow_fids(self, n_fids: int) -> None:
        """Room for fids up to ``n_fids`` (per-fid arrays, and the bitset rows' words)."""
        self._n_fids = n_fids
        if n_fids > len(self._meta):
            self._meta = _grow(self._meta, n_fids)
            self._f_key = _grow(self._f_key, n_fids)
            self._f_keyed = _grow(self._f_keyed, n_fids)
        self._fit_words()

    def reserve(self, subscriptions: int) -> None:
        """Make room for ``subscriptions`` subscriptions and as many distinct filters at once
        (a bulk load that knows its size): each growth otherwise copies the arrays, by half again,
        and ends with up to half of them unused.

        >>> index = MatchIndex()
        >>> index.reserve(1000)
        >>> index.apply([(f"s{i}", f"x > {i}") for i in range(1000)])
        >>> len(index._meta), index._rows.shape[1]  # no growth beyond the reservation
        (1000, 16)
        """
        for name in ("_meta", "_f_key", "_f_keyed", "_sub_fid", "_sub_pos"):
            arr = getattr(self, name)
            if subscriptions > arr.shape[0]:
                new = np.zeros((subscriptions, *arr.shape[1:]), dtype=arr.dtype)
                new[: arr.shape[0]] = arr
                setattr(self, name, new)
        self._fit_words()

    def _fit_words(self) -> None:
        """The bitset rows' words (and the alive and exact bits) grown to cover every fid slot."""
        words = (len(self._meta) + 63) // 64
        if words > self._rows.shape[1]:
            rows = np.zeros((self._rows.shape[0], words), dtype=np.uint64)
            rows[:, : self._rows.shape[1]] = self._rows
            self._rows = rows
            alive = np.zeros(words, dtype=np.uint64)
            alive[: len(self._alive)] = self._alive
            self._alive = alive
            exact = np.zeros(words, dtype=np.uint64)
            exact[: len(self._exact)] = self._exact
            self._exact = exact

    def fit(self) -> None:
        """Give back the predicate store's room beyond its used records and a sixteenth: a bulk
        build grows it by half again at a time, so it can end with a third of it unused (about
        80 bytes per W1 subscription at 10^6).

        >>> index = MatchIndex()
        >>> index.apply([(f"s{i}", f"x between {i} and {i + 9} and y < {i}") for i in range(3000)])
        >>> index.fit(); len(index._p_code) <= index._p_used * 17 // 16 + 256
        True
        >>> index.apply([("t", "x = 3")]); index.match([{"x": 3, "y": 0}]).all_ids()
        [['s1', 's2', 's3', 't']]
        """
        keep = self._p_used + self._p_used // 16 + 256
        if len(self._p_code) > keep:
            self._p_code, self._p_ab = self._p_code[:keep].copy(), self._p_ab[:keep].copy()

    def _fit_rows(self) -> None:
        """Give back the bitset rows beyond the used ones and 64 spare: ``_new_row`` grows the rows
        by half again, so a bulk build that made a few thousand does not copy them all each 64."""
        if self._rows.shape[0] - self._n_rows > 64:
            self._rows = self._rows[: self._n_rows + 64].copy()

    def _drop_fids(self, fids: npt.NDArray[np.int64]) -> None:
        """Forget fids that have no subscription left (their bits are cleared at the next flush)."""
        if not len(fids):
            return
        self._fid_keys.discard(self._f_key, fids[self._f_keyed[fids]])
        if self._slow:
            for fid in fids.tolist():
                self._slow.pop(fid, None)
        self._p_garbage += int(self._meta[fids, K.M_PCOUNT].sum())
        self._m_garbage += int(self._meta[fids, K.M_MCAP].sum())
        self._meta[fids] = 0
        self._f_keyed[fids] = False
        dropped = fids.tolist()
        self._pending_clear.extend(dropped)
        self._free_fids.extend(dropped)

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
        """Apply the queued changes and their bit work now (``match`` does it too).

        When the predicate records of dropped filters make up more than a quarter of the
        predicate store (and at least ``_COMPACT_MIN`` records), the store is also squeezed back to
        the live filters' records in fid order (``_compact``): matching verifies candidates by
        reading it, and under churn the live records spread over a store of garbage
        (docs/results/matching.md). Each pass is one numpy pass over the store, between matches.
        """
        with collector_paused():
            self._apply_queue()
            self._fit_rows()
            self._flush()
            if self._p_garbage > max(self._p_used // 4, _COMPACT_MIN):
                self._compact()

    def _flush(self) -> None:
        """Apply the bit work of the changes since the last match (``flush_fid_bits``: one pass
        over the words the dropped and the new fids touch, their summary bits refreshed with them)."""
        clear = K.sorted_distinct(np.asarray(self._pending_clear, dtype=np.int64))
        fids = K.sorted_distinct(np.asarray(self._pending_set, dtype=np.int64))
        self._pending_clear, self._pending_set = [], []
        fids = fids[self._meta[fids, K.M_MCOUNT] > 0]
        current = self._summary.shape == (self._rows.shape[0], (self._rows.shape[1] + 63) // 64)
        if len(clear) or len(fids):
            K.flush_fid_bits(
                fids,
                clear,
                len(self._attr_names),
                self._fixed_rows,
                self._str_rows,
                self._str_count,
                self._num_cuts,
                self._num_ncuts,
                self._num_rows,
                self._rows,
                self._n_rows,
                self._meta,
                self._p_code,
                self._p_ab,
                self._lit,
                self._summary,
                min(self._summarised_rows, self._n_rows) if current else 0,
            )
        if len(clear):
            bits = ~(np.uint64(1) << (clear & 63).astype(np.uint64))
            np.bitwise_and.at(self._alive, clear >> 6, bits)
            np.bitwise_and.at(self._exact, clear >> 6, bits)
        if len(fids):
            np.bitwise_or.at(self._alive, fids >> 6, np.uint64(1) << (fids & 63).astype(np.uint64))
            fids = fids[self._meta[fids, K.M_FLAGS] == 0]
            np.bitwise_or.at(self._exact, fids >> 6, np.uint64(1) << (fids & 63).astype(np.uint64))
        self._summarize()
        if self._packed_stale:
            self._packed_stale = False
            if self._packed_shared or len(self._m_start) < self._n_fids + 1:  # a Matches reads the old ones
                self._m_start = np.empty(self._n_fids + self._n_fids // 8 + 64, dtype=np.int32)
            if self._packed_shared or len(self._m_packed) < len(self._subs):
                self._m_packed = np.empty(len(self._subs) + len(self._subs) // 8 + 64, dtype=np.int32)
            self._packed_shared = False
            K.pack_members(self._n_fids, self._meta, self._members, self._m_start, self._m_packed)

    def _summarize(self) -> None:
        """Bring the rows' summaries up to date for the rows made since the last flush (all rows
        when the rows grew); ``flush_fid_bits`` refreshes the words whose fids changed."""
        shape = (self._rows.shape[0], (self._rows.shape[1] + 63) // 64)
        if self._summary.shape != shape:  # the rows grew (seldom): all again
            self._summary = np.zeros(shape, dtype=np.uint64)
            K.summarize_rows(self._rows, 0, self._n_rows, self._summary)
        else:
            K.summarize_rows(self._rows, self._summarised_rows, self._n_rows, self._summary)  # new rows
        self._summarised_rows = self._n_rows

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
        self.flush()
        kinds, vals, deltas = self._encode(batch)
        n = len(batch)
        n_attr = len(self._attr_names)
        n_words = (self._n_fids + 63) // 64
        # fid blocks whose rows (one slice per bucket) fit in L2 stay there while events stream by
        block = max(8, min(n_words, self.cache_bytes // max(1, 8 * self._n_rows)))
        row_of, path = K.event_rows(
            kinds, vals, deltas, n_attr, self._fixed_rows, self._str_rows, self._num_cuts, self._num_ncuts,
            self._num_rows, self._rows, self._n_rows, n_words, self._summary,
        )  # fmt: skip
        size = int(self._expected * n) + 1024
        if len(self._hit_fid) < size:
            self._hit_ev, self._hit_fid = np.empty(size, dtype=np.int32), np.empty(size, dtype=np.int32)
        resume = np.zeros(5, dtype=np.int64)
        while not K.match_listed(
            row_of, path, n_attr, self._rows, n_words, self._summary, self._exact, kinds, vals, deltas, self._meta,
            self._p_code, self._p_ab, self._lit, self._hit_ev, self._hit_fid, self._slow_pairs, resume,
        ):  # fmt: skip
            self._grow_hits(bool(resume[4]))
        self._last_paths = np.bincount(path, minlength=3)
        listed_only = bool(self._last_paths[K.LISTED] == n)
        resume[1] = 0
        while not listed_only and not K.match_hits(
            row_of, path, n_attr, self._rows, n_words, block, self._exact, kinds, vals, deltas, self._meta,
            self._p_code, self._p_ab, self._lit, self._hit_ev, self._hit_fid, self._slow_pairs, resume,
        ):  # fmt: skip
            self._grow_hits(bool(resume[4]))
        hits, n_slow = int(resume[2]), int(resume[3])
        if n:
            self._expected = max(0.8 * self._expected, 1.1 * hits / n)
        fid_offsets = np.empty(n + 1, dtype=np.int64)
        if listed_only:  # event after event already
            K.event_offsets(self._hit_ev, hits, fid_offsets)
            fids = self._hit_fid[:hits].copy()
        else:
            fids = np.empty(hits, dtype=np.int32)
            K.group_hits(self._hit_ev, self._hit_fid, hits, fid_offsets, fids)
        if n_slow:
            fid_offsets, fids = self._check_slow(batch, fid_offsets, fids, self._slow_pairs[:n_slow])
        version = self._version

        def ranker() -> Ranks:
            if self._version != version:
                raise RuntimeError("the index changed since this match: its slots name other subscriptions now")
            if self._ranks is None or self._ranks[0] != version:
                rank, by_rank = _name_ranks(self._subs.names)
                # each packed member's rank, in m_packed's order: read in order by ranked_members
                packed = rank[self._m_packed[: int(self._m_start[self._n_fids])]].astype(np.int32)
                self._ranks = (version, (rank, by_rank, packed))
            return self._ranks[1]

        self._packed_shared = True
        return Matches(None, None, self._subs.names, ranker, (fid_offsets, fids, self._m_start, self._m_packed))

    def _grow_hits(self, slow: bool) -> None:
        """Double the buffer that filled up: the slow pairs, or the (event, fid) hits."""
        if slow:
            self._slow_pairs = _grow(self._slow_pairs, 2 * len(self._slow_pairs))
        else:
            self._hit_ev = _grow(self._hit_ev, 2 * len(self._hit_ev))
            self._hit_fid = _grow(self._hit_fid, 2 * len(self._hit_fid))

    def _check_slow(
        self,
        batch: EventBatch,
        fid_offsets: npt.NDArray[np.int64],
        fids: npt.NDArray[np.int32],
        pairs: npt.NDArray[np.int64],
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]:
        """Merge in the slow candidates ``(event, fid)`` that ``Filter.matches`` accepts."""
        extra_e: list[int] = []
        extra_f: list[int] = []
        cache: dict[int, dict[str, object]] = {}
        for e, fid in pairs.tolist():
            attrs = cache.get(e)
            if attrs is None:
                attrs = cache[e] = batch.event(e)
            if self._slow[fid].matches(attrs):
                extra_e.append(e)
                extra_f.append(fid)
        if not extra_e:
            return fid_offsets, fids
        n = len(fid_offsets) - 1
        events = np.concatenate((np.repeat(np.arange(n), np.diff(fid_offsets)), np.asarray(extra_e)))
        merged = np.concatenate((fids, np.asarray(extra_f, dtype=np.int32)))
        order = np.lexsort((merged, events))  # fid order within an event, as the kernels' hits
        counts = np.bincount(events, minlength=n)
        return np.concatenate(([0], np.cumsum(counts))).astype(np.int64), merged[order]

    # -- the compiled form ------------------------------------------------------------------

    def to_arrays(self) -> dict[str, npt.NDArray[Any]]:
        """The index as named numpy arrays, once the queued changes and their bit work are applied:
        what ``from_arrays`` loads back without parsing or compiling a filter.

        The arrays are the index's own state: the bitset rows and their summaries, the alive and
        exact bits, the bucket tables of each attribute, the fid table (``_meta``, dedup keys),
        the predicate store and list literals (their used parts), the member pool, the slot
        arrays, the free slots and fids in their order, and as packed strings
        (``routing.matching.packing``) the subscription id of each slot, the attribute names,
        each attribute's interned strings in code order and the canonical text of each filter
        that Python checks. ``format`` holds ``COMPILED_FORMAT`` and the settings and counters,
        ``python`` the interpreter's version and hash width (the dedup keys are hashes of the
        compiled records), ``checksum`` the CRC-32 of every other array's bytes in name order.
        The compile caches are not kept. Arrays are copies where the index keeps a larger buffer,
        views of the index's own arrays otherwise: write them before changing the index.

        Examples
        --------
        >>> index = MatchIndex()
        >>> index.apply([("a", "x between 1 and 5"), ("b", "name startswith 'ai'")])
        >>> loaded = MatchIndex.from_arrays(index.to_arrays())
        >>> loaded.match([{"x": 2, "name": "air"}]).all_ids(), len(loaded)
        ([['a', 'b']], 2)
        """
        self.flush()
        n_attr = len(self._attr_names)
        names = self._subs.names
        free = set(self._subs.free)
        id_blob, id_offsets = pack_strings(["" if s in free else cast(str, name) for s, name in enumerate(names)])
        attr_blob, attr_offsets = pack_strings(self._attr_names)
        str_blob, str_offsets = pack_strings([text for codes in self._str_codes for text in codes])
        slow_fids = sorted(self._slow)
        slow_blob, slow_offsets = pack_strings([str(self._slow[f]) for f in slow_fids])
        head = [COMPILED_FORMAT, self._max_cuts, self._str_rows.shape[1], self._n_fids, self._n_rows, self._m_used]
        head += [self._m_garbage, self._p_used, self._p_garbage, self._lit_used, self._version, len(names), n_attr]
        out: dict[str, npt.NDArray[Any]] = {
            "format": np.asarray(head, dtype=np.int64),
            "python": _python_identity(),
            "rows": self._rows[: self._n_rows],
            "summary": self._summary[: self._n_rows],
            "alive": self._alive,
            "exact": self._exact,
            "meta": self._meta,
            "f_key": self._f_key,
            "f_keyed": self._f_keyed,
            "p_code": self._p_code[: self._p_used].copy(),
            "p_ab": self._p_ab[: self._p_used].copy(),
            "lit": self._lit[: self._lit_used].copy(),
            "members": self._members[: self._m_used].copy(),
            "sub_fid": self._sub_fid,
            "sub_pos": self._sub_pos,
            "fixed_rows": self._fixed_rows,
            "str_rows": self._str_rows,
            "str_count": self._str_count,
            "num_cuts": self._num_cuts,
            "num_ncuts": self._num_ncuts,
            "num_rows": self._num_rows,
            "free_slots": np.asarray(self._subs.free, dtype=np.int64),
            "free_fids": np.asarray(self._free_fids, dtype=np.int64),
            "ids": id_blob,
            "id_offsets": id_offsets,
            "attributes": attr_blob,
            "attribute_offsets": attr_offsets,
            "strings": str_blob,
            "string_offsets": str_offsets,
            "slow_fids": np.asarray(slow_fids, dtype=np.int64),
            "slow": slow_blob,
            "slow_offsets": slow_offsets,
        }
        out["checksum"] = np.asarray([_checksum(out)], dtype=np.int64)
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, npt.NDArray[Any]]) -> MatchIndex:
        """The index that ``to_arrays`` wrote, without parsing or compiling any filter.

        Raises ``ValueError`` when the arrays are not of ``COMPILED_FORMAT``, were written by
        another Python version or hash width, or their checksum does not match: the caller then
        builds the index from the filters' texts. Read-only arrays (a memory map) are copied;
        writable ones are taken over by the index. The dedup keys of the filters that Python
        checks hash their ``Filter`` (strings, whose hashes differ between processes), so those
        few are recompiled from their canonical text to key them again.
        """
        head = np.asarray(arrays.get("format", np.zeros(0, dtype=np.int64)))
        if len(head) != 13 or int(head[0]) != COMPILED_FORMAT:
            raise ValueError(f"not a compiled MatchIndex of format {COMPILED_FORMAT}")
        if not np.array_equal(arrays["python"], _python_identity()):
            raise ValueError("the compiled MatchIndex was written by another Python (version or hash width)")
        if int(arrays["checksum"][0]) != _checksum({k: v for k, v in arrays.items() if k != "checksum"}):
            raise ValueError("the compiled MatchIndex's checksum does not match its arrays")
        max_cuts, max_strings, n_fids, n_rows, m_used, m_garbage = head[1:7].tolist()
        p_used, p_garbage, lit_used, version, _, n_attr = head[7:].tolist()
        index = cls(max_cuts, max_strings)

        def own(name: str) -> npt.NDArray[Any]:
            return np.require(arrays[name], requirements=["C", "W"])

        for name in ("rows", "summary", "alive", "exact", "meta", "f_key", "f_keyed", "p_code", "p_ab", "lit",
                     "members", "sub_fid", "sub_pos", "fixed_rows", "str_rows", "str_count", "num_cuts",
                     "num_ncuts", "num_rows"):  # fmt: skip
            setattr(index, f"_{name}", own(name))
        index._n_fids, index._n_rows, index._summarised_rows = n_fids, n_rows, n_rows
        index._m_used, index._m_garbage, index._p_used, index._p_garbage = m_used, m_garbage, p_used, p_garbage
        index._lit_used, index._version = lit_used, version
        index._packed_stale = True  # the members packed in fid order: remade by the first flush
        index._free_fids = arrays["free_fids"].tolist()
        names: list[str | None] = list(unpack_strings(arrays["ids"], arrays["id_offsets"]))
        free_slots = arrays["free_slots"].tolist()
        for s in free_slots:
            names[s] = None
        index._subs = SubscriptionSlots.of(names, free_slots)
        index._n_subs = len(index._subs)
        index._attr_names = unpack_strings(arrays["attributes"], arrays["attribute_offsets"])
        index._attr_of = dict(zip(index._attr_names, range(n_attr), strict=True))
        strings = iter(unpack_strings(arrays["strings"], arrays["string_offsets"]))
        counts = index._str_count[:n_attr].tolist()
        index._str_codes = [dict(zip(islice(strings, c), range(c), strict=True)) for c in counts]
        index._cut_sets = [set(index._num_cuts[a, :c].tolist()) for a, c in enumerate(index._num_ncuts[:n_attr])]
        keyed = np.flatnonzero(index._f_keyed[:n_fids])
        index._fid_keys.add(index._f_key, keyed)
        slow_fids = arrays["slow_fids"].tolist()
        slows = [parse_filter(t) for t in unpack_strings(arrays["slow"], arrays["slow_offsets"])]
        index._slow = dict(zip(slow_fids, slows, strict=True))
        if slows:  # key the filters Python checks again: their keys hash strings
            _, _, keys = index._compile_many(slows)
            fids = np.asarray(slow_fids, dtype=np.int64)
            index._fid_keys.discard(index._f_key, fids[index._f_keyed[fids]])
            index._f_key[fids] = keys
            index._f_keyed[fids] = index._fid_keys.add(index._f_key, fids) == fids
        return index

    # -- introspection ----------------------------------------------------------------------

    def memory_bytes(self) -> int:
        """Bytes held: the arrays, plus the id maps, strings and compile caches (estimated with
        ``sys.getsizeof``), once the queued changes are applied."""
        self._apply_queue()
        arrays = sum(v.nbytes for v in vars(self).values() if isinstance(v, np.ndarray))
        python = self._subs.nbytes + self._fid_keys.nbytes + sum(map(sys.getsizeof, filter(None, self._subs.names)))
        python += sum(sys.getsizeof(d) for d in self._str_codes)
        memo = [d for by_op in self._pred_memo.values() for d in by_op.values()]
        python += sum(sys.getsizeof(d) + sum(sys.getsizeof(r) for r, _, _ in d.values()) for d in memo)
        python += sys.getsizeof(self._text_memo) + sum(sys.getsizeof(t) for t in self._text_memo)
        return int(arrays + python)

    def stats(self) -> dict[str, Any]:
        """Sizes: subscriptions, distinct filters, attributes, bitset rows, bytes (total and per
        subscription), and how the last ``match`` ANDed its events' rows (``paths``: events per
        path, ``dense``, ``sparse`` or ``listed``; see ``routing.matching.kernels.event_rows``)."""
        total = self.memory_bytes()
        return {
            "subscriptions": len(self._subs),
            "distinct_filters": self._n_fids - len(self._free_fids),
            "attributes": len(self._attr_names),
            "rows": self._n_rows,
            "bytes": total,
            "bytes_per_subscription": total / max(1, len(self)),
            "paths": dict(zip(("dense", "sparse", "listed"), self._last_paths.tolist(), strict=True)),
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
