"""Rolling time windows of mergeable summaries: :class:`RollingWindow`.

Per key (a broker, a link, a subscriber), a ring of time buckets of ``bucket_ms`` holds one
summary each (any :class:`WindowItem`: :class:`routing.stats.moments.Moments`,
:class:`routing.stats.delay_sketch.DelaySketch`, :class:`routing.stats.sequence_log.SequenceLog`,
:class:`routing.stats.moments.Tally`); a query merges the buckets of the window. Old buckets are
dropped whole, never subtracted from (docs/reference/reliability-model.md §6.2: exact window semantics, no deletion
from sketches).

Windows and time
----------------
All times are milliseconds. A window of ``buckets`` buckets of ``bucket_ms`` ending at ``end_ms``
covers the buckets ``e - buckets + 1 .. e``, ``e = ceil(end_ms / bucket_ms) - 1``: for an ``end_ms``
on a bucket boundary that is exactly [end_ms - buckets * bucket_ms, end_ms). The newest bucket seen
decides what is kept: the last ``retain`` buckets up to it.

Examples
--------
>>> from routing.stats.moments import Tally
>>> w = RollingWindow(Tally, bucket_ms=1000, buckets=3)
>>> w.add("s1", [500.0, 1500.0, 2500.0], np.array([True, False, True]))
>>> w.query("s1", 3000.0).proportion
0.6666666666666666
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, Protocol, Self, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from routing.common.arrays import distinct_sorted
from routing.stats.state import State, pack_state, unpack_state

__all__ = ["RollingWindow", "WindowItem"]


class WindowItem(Protocol):
    """What a :class:`RollingWindow` holds per bucket: a mergeable, serialisable summary."""

    def add(self, values: NDArray[Any]) -> None: ...

    def merge(self, other: Self) -> None: ...

    def copy(self) -> Self: ...

    def to_state(self) -> State: ...

    @classmethod
    def from_state(cls, state: Mapping[str, NDArray[Any]]) -> Self: ...


T = TypeVar("T", bound=WindowItem)


class RollingWindow(Generic[T]):
    """Per key, a ring of time buckets of ``bucket_ms`` holding one mergeable summary each.

    A query merges the buckets of the window that ends at a given time (module docstring, "Windows
    and time"). The newest bucket seen (by :meth:`add` or :meth:`advance`) decides what is kept: the
    last ``retain`` buckets up to it; older buckets are dropped, and values for a dropped bucket are
    ignored and counted in :attr:`late_dropped` (docs/reference/reliability-model.md §6.2: no deletion from sketches).

    Parameters
    ----------
    factory : callable
        Makes an empty summary, e.g. ``Moments`` or ``lambda: DelaySketch(0.01)``.
    bucket_ms : int
        Bucket length.
    buckets : int
        Buckets per window.
    retain : int, optional
        Buckets kept (default ``buckets``); more lets a window that ends before the newest bucket
        be queried whole.

    Examples
    --------
    >>> from routing.stats.moments import Moments
    >>> w = RollingWindow(Moments, bucket_ms=1000, buckets=2)
    >>> w.add("b1", [100.0, 1500.0, 2500.0], np.array([1.0, 2.0, 3.0]))
    >>> w.query("b1", 3000.0).count, w.query("b1", 3000.0).mean  # [1000, 3000)
    (2, 2.5)
    >>> w.query("b1", 2000.0).count  # [0, 2000), but the bucket [0, 1000) was dropped
    1
    >>> w.span(3000.0)
    (1000.0, 3000.0)
    """

    def __init__(
        self, factory: Callable[[], T], *, bucket_ms: int = 10_000, buckets: int = 30, retain: int | None = None
    ) -> None:
        retain = buckets if retain is None else retain
        if bucket_ms <= 0 or buckets <= 0 or retain < buckets:
            raise ValueError(f"need bucket_ms > 0 and 0 < buckets <= retain (got {bucket_ms}, {buckets}, {retain})")
        self._factory = factory
        self._bucket_ms = int(bucket_ms)
        self._buckets = int(buckets)
        self._retain = int(retain)
        self._data: dict[str, dict[int, T]] = {}
        self._newest: int | None = None
        self._dropped = 0
        # query results until the data changes: a report reads each estimate more than once
        # (docs/decisions/rolling-window-query-memo.md)
        self._merged: dict[tuple[str, float, float | None], T | None] = {}
        # what changed since the state was last saved (changes_state)
        self._touched: set[int] = set()
        self._dirty_floor: int | None = None
        self._oldest: int | None = None  # no kept bucket is older (a bound: drop_before skips when it drops nothing)

    @property
    def bucket_ms(self) -> int:
        return self._bucket_ms

    @property
    def buckets(self) -> int:
        return self._buckets

    @property
    def retain(self) -> int:
        return self._retain

    @property
    def late_dropped(self) -> int:
        """Values that arrived for a bucket already dropped."""
        return self._dropped

    def _last_bucket(self, end_ms: float) -> int:
        return math.ceil(end_ms / self._bucket_ms) - 1

    def span(self, end_ms: float) -> tuple[float, float]:
        """[start, stop) in ms of the window that ends at ``end_ms``."""
        e = self._last_bucket(end_ms)
        return float((e - self._buckets + 1) * self._bucket_ms), float((e + 1) * self._bucket_ms)

    def _rotate(self, newest: int) -> None:
        if self._newest is not None and newest <= self._newest:
            return
        self._newest = newest
        self._merged.clear()
        oldest = newest - self._retain + 1
        self._oldest = oldest if self._oldest is None else max(self._oldest, oldest)
        self._drop(lambda b: b < oldest)

    def _drop(self, gone: Callable[[int], bool]) -> None:
        """Drop every key's buckets ``b`` with ``gone(b)``, and the keys left without any."""
        for key in list(self._data):
            ring = self._data[key]
            for b in [b for b in ring if gone(b)]:
                del ring[b]
            if not ring:
                del self._data[key]

    def advance(self, now_ms: float) -> None:
        """Time has reached ``now_ms``: drop the buckets before the window that ends there."""
        self._rotate(self._last_bucket(now_ms))

    def add(self, key: str, t_ms: ArrayLike, values: ArrayLike) -> None:
        """Add ``values`` (rows aligned with ``t_ms``) to ``key``'s buckets by time."""
        t = np.asarray(t_ms, dtype=np.float64).reshape(-1)
        v = np.asarray(values)
        if len(t) != len(v):
            raise ValueError(f"RollingWindow.add: {len(t)} times but {len(v)} values")
        self.add_groups([key], np.zeros(len(t), dtype=np.int64), t, v)

    def add_groups(self, names: Sequence[str], code: ArrayLike, t_ms: ArrayLike, values: ArrayLike) -> None:
        """Add the rows of many keys at once (:meth:`add` is this for one key): row ``i`` belongs to
        key ``names[code[i]]``. One rotation to the newest bucket of all the rows, then one summary
        ``add`` per key and bucket (rows in their order), not a pass over the rows per key; when
        every value is one number and the summary has ``add_repeated`` (:class:`Moments`), that
        instead, with the group's size (the same summary, no numpy call per group).

        >>> from routing.stats.moments import Moments
        >>> w = RollingWindow(Moments, bucket_ms=1000, buckets=2)
        >>> w.add_groups(["a", "b"], [0, 1, 0], [100.0, 1500.0, 1900.0], np.array([1.0, 2.0, 3.0]))
        >>> w.query("a", 2000.0).count, w.query("a", 2000.0).mean, w.query("b", 2000.0).mean
        (2, 2.0, 2.0)
        """
        c = np.asarray(code, dtype=np.int64).reshape(-1)
        t = np.asarray(t_ms, dtype=np.float64).reshape(-1)
        v = np.asarray(values)
        if not len(c) == len(t) == len(v):
            raise ValueError(f"RollingWindow.add_groups: {len(c)} codes, {len(t)} times, {len(v)} values")
        if t.size == 0:
            return
        if not np.isfinite(t).all():
            raise ValueError("RollingWindow.add_groups: times must be finite")
        bucket = np.floor(t / self._bucket_ms).astype(np.int64)
        self._rotate(int(bucket.max()))
        assert self._newest is not None
        late = bucket < self._newest - self._retain + 1
        self._dropped += int(np.count_nonzero(late))
        keep = np.flatnonzero(~late)
        if not keep.size:
            return
        self._merged.clear()
        self._touched.update(distinct_sorted(bucket[keep]).tolist())
        low = int(bucket[keep].min())
        self._oldest = low if self._oldest is None else min(self._oldest, low)
        order = keep[np.lexsort((bucket[keep], c[keep]))]  # by key, then bucket; stable
        ck, bk, vk = c[order], bucket[order], v[order]
        starts = np.flatnonzero(np.r_[True, (ck[1:] != ck[:-1]) | (bk[1:] != bk[:-1])])
        ends = np.r_[starts[1:], len(order)]
        # one value repeated (counts: every value 1) goes to a summary's add_repeated, where it
        # has one (Moments), as a size: no numpy call per key and bucket
        repeated = hasattr(self._factory, "add_repeated") and vk.dtype.kind in "fiu" and bool((vk == vk[0]).all())
        for s, e, k, b in zip(starts.tolist(), ends.tolist(), ck[starts].tolist(), bk[starts].tolist(), strict=True):
            ring = self._data.setdefault(names[k], {})
            item = ring.get(b)
            if item is None:
                item = ring[b] = self._factory()
            if repeated:
                item.add_repeated(float(vk[0]), e - s)  # type: ignore[attr-defined]
            else:
                item.add(vk[s:e])

    def keys(self) -> list[str]:
        """Keys with at least one kept bucket, sorted."""
        return sorted(self._data)

    def items(self, key: str, end_ms: float) -> list[tuple[int, T]]:
        """(bucket index, summary) of the window ending at ``end_ms``, oldest first (not copies)."""
        e = self._last_bucket(end_ms)
        ring = self._data.get(key, {})
        return sorted(((b, item) for b, item in ring.items() if e - self._buckets < b <= e), key=lambda p: p[0])

    def query(self, key: str, end_ms: float, *, before_ms: float | None = None) -> T | None:
        """The merge of ``key``'s buckets in the window ending at ``end_ms`` (None when none).

        ``before_ms``, when given, keeps only the buckets that end at or before it. The result is
        the caller's own (a copy of the merge, which is kept until the data changes).
        """
        memo = (key, float(end_ms), before_ms)
        if memo in self._merged:
            found = self._merged[memo]
            return None if found is None else found.copy()
        merged: T | None = None
        for b, item in self.items(key, end_ms):
            if before_ms is not None and (b + 1) * self._bucket_ms > before_ms:
                continue
            if merged is None:
                merged = item.copy()
            else:
                merged.merge(item)
        self._merged[memo] = merged
        return None if merged is None else merged.copy()

    def drop_before(self, bucket: int) -> None:
        """Drop every bucket older than ``bucket`` (a bucket index, ``floor(t_ms / bucket_ms)``):
        those no later query reads, e.g. older than every window still to be checked. Unlike the
        rotation this is no clock: a later value for a dropped bucket is kept again (until the
        next call drops it).

        >>> from routing.stats.moments import Tally
        >>> w = RollingWindow(Tally, bucket_ms=1000, buckets=2, retain=5)
        >>> w.add("s1", [500.0, 1500.0, 2500.0], np.array([True, False, True]))
        >>> w.drop_before(2)
        >>> w.query("s1", 3000.0).trials, w.items("s1", 2000.0)
        (1, [])
        """
        self._dirty_floor = bucket if self._dirty_floor is None else max(self._dirty_floor, bucket)
        if self._oldest is not None and self._oldest >= bucket:
            return
        self._oldest = bucket
        self._merged.clear()
        self._drop(lambda b: b < bucket)

    def _state(self, buckets: set[int] | None) -> State:
        """``to_state``'s arrays over the buckets in ``buckets`` (all when None)."""
        keys: list[str] = []
        counts: list[int] = []
        bucket_ids: list[int] = []
        items: list[T] = []
        for key in sorted(self._data):
            ring = self._data[key]
            chosen = sorted(ring.items()) if buckets is None else sorted(p for p in ring.items() if p[0] in buckets)
            if not chosen:
                continue
            keys.append(key)
            counts.append(len(chosen))
            for b, item in chosen:
                bucket_ids.append(b)
                items.append(item)
        stacked: State = {}
        lengths: dict[str, NDArray[np.int64]] = {}
        stack = getattr(type(items[0]), "stacked_states", None) if items else None
        if stack is not None and all(type(item) is type(items[0]) for item in items):
            # the summaries' arrays at once (Moments: one row of numbers each), the same layout
            stacked = stack(items)
            for name, arr in stacked.items():
                lengths[name] = np.full(len(items), len(arr) // len(items), dtype=np.int64)
        else:
            parts: dict[str, list[NDArray[Any]]] = {}
            for item in items:
                for name, arr in item.to_state().items():
                    parts.setdefault(name, []).append(np.asarray(arr).reshape(-1))
            for name, arrays in parts.items():
                stacked[name] = np.concatenate(arrays)
                lengths[name] = np.array([len(a) for a in arrays], dtype=np.int64)
        encoded = [k.encode() for k in keys]
        state: State = {
            "config": np.array(
                [
                    self._bucket_ms,
                    self._buckets,
                    self._retain,
                    -1 if self._newest is None else self._newest,
                    self._dropped,
                ],
                dtype=np.int64,
            ),
            "has_newest": np.array([self._newest is not None]),
            "key_text": np.frombuffer(b"".join(encoded), dtype=np.uint8),
            "key_bytes": np.array([len(k) for k in encoded], dtype=np.int64),
            "key_items": np.array(counts, dtype=np.int64),
            "bucket": np.array(bucket_ids, dtype=np.int64),
        }
        for name, arr in stacked.items():
            state[f"item.{name}"] = arr
            state[f"len.{name}"] = lengths[name]
        return state

    def to_state(self) -> State:
        """Every kept summary: per distinct key (sorted) its UTF-8 text end to end (``key_text``,
        ``key_bytes`` each) and its number of buckets (``key_items``); per summary, key by key and
        oldest bucket first, its ``bucket`` and its own state's arrays end to end (``item.<name>``,
        with their lengths ``len.<name>``); ``config``: bucket_ms, buckets, retain, the newest
        bucket (-1 when none, ``has_newest``) and the late values dropped."""
        return self._state(None)

    def changes_state(self) -> State:
        """What changed since :meth:`mark_saved` (or since this window was made or restored): the
        whole contents of every bucket values were added to (``to_state``'s arrays over those
        buckets only), their indices (``touched``), the newest bucket and the late count
        (``config``), and the :meth:`drop_before` bound (``floor``; -1 and ``has_floor`` false when
        none). :meth:`apply_changes` on a copy of the window as it was at the mark gives this window.

        >>> from routing.stats.moments import Tally
        >>> w = RollingWindow(Tally, bucket_ms=1000, buckets=2, retain=4)
        >>> w.add("s1", [500.0, 1500.0], np.array([True, False]))
        >>> saved = w.to_bytes()
        >>> w.mark_saved()
        >>> w.add("s2", [1700.0, 4500.0], np.array([True, True]))
        >>> w.changes_state()["touched"].tolist()
        [1, 4]
        >>> copy = RollingWindow.from_bytes(saved, Tally)
        >>> copy.apply_changes(w.changes_state())
        >>> copy.to_bytes() == w.to_bytes()
        True
        """
        state = self._state(self._touched)
        state["touched"] = np.array(sorted(self._touched), dtype=np.int64)
        state["floor"] = np.array([-1 if self._dirty_floor is None else self._dirty_floor], dtype=np.int64)
        state["has_floor"] = np.array([self._dirty_floor is not None])
        return state

    def mark_saved(self) -> None:
        """Start counting changes afresh (:meth:`changes_state`): the state was saved."""
        self._touched = set()
        self._dirty_floor = None

    def apply_changes(self, changes: Mapping[str, NDArray[Any]]) -> None:
        """Bring this window up to date with :meth:`changes_state` of a window that was equal to it
        at its mark: rotate to its newest bucket, drop below its floor, replace its touched buckets."""
        _b, _n, _r, newest, dropped = (int(v) for v in changes["config"])
        if bool(changes["has_newest"][0]):
            self._rotate(newest)
        self._dropped = dropped
        if bool(changes["has_floor"][0]):
            self.drop_before(int(changes["floor"][0]))
        touched = {int(b) for b in changes["touched"]}
        self._drop(lambda b: b in touched)
        self._load_items(changes)
        self._merged.clear()
        self._dirty_floor = None  # this window is now the saved one: no changes since

    def _load_items(self, state: Mapping[str, NDArray[Any]]) -> None:
        """Put the summaries of ``state`` (``to_state``'s layout) into their rings."""
        kind = type(self._factory())
        names = [name[len("item.") :] for name in state if name.startswith("item.")]
        offsets = {name: np.concatenate(([0], np.cumsum(state[f"len.{name}"]))) for name in names}
        if "key_text" in state:
            text = state["key_text"].tobytes()
            ends = np.cumsum(state["key_bytes"]).tolist()
            distinct = [text[a:b].decode() for a, b in zip([0, *ends][: len(ends)], ends, strict=True)]
            keys = [k for k, n in zip(distinct, state["key_items"].tolist(), strict=True) for _ in range(n)]
        else:  # the layout before key_text: one unicode key per summary
            keys = [str(k) for k in state["keys"].tolist()]
        if len(state["bucket"]):
            low = int(state["bucket"].min())
            self._oldest = low if self._oldest is None else min(self._oldest, low)
        for i, (key, b) in enumerate(zip(keys, state["bucket"].tolist(), strict=True)):
            item_state = {name: state[f"item.{name}"][offsets[name][i] : offsets[name][i + 1]] for name in names}
            self._data.setdefault(key, {})[int(b)] = kind.from_state(item_state)

    @classmethod
    def from_state(cls, state: Mapping[str, NDArray[Any]], factory: Callable[[], T]) -> RollingWindow[T]:
        bucket_ms, buckets, retain, newest, dropped = (int(v) for v in state["config"])
        out = cls(factory, bucket_ms=bucket_ms, buckets=buckets, retain=retain)
        out._newest = newest if bool(state["has_newest"][0]) else None
        out._dropped = dropped
        out._load_items(state)
        return out

    def to_bytes(self) -> bytes:
        return pack_state("RollingWindow", self.to_state())

    @classmethod
    def from_bytes(cls, data: bytes, factory: Callable[[], T]) -> RollingWindow[T]:
        return cls.from_state(unpack_state("RollingWindow", data), factory)
