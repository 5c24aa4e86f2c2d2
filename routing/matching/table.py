"""The subscription table of the matching job: record -> change, a versioned table, index replicas.

The compacted topic ``siftstream.subscriptions.v1`` is a changelog of atomic and composite
subscriptions. The matching job turns it into the set of active atomic filters in three pure steps:

1. ``plan_change`` decides what one record does (a change, a rejection with its reason, or
   nothing) from the record alone;
2. ``SubscriptionTable`` holds ``subscription id -> filter text``; every effective change gets the
   next version number, and the table remembers the changes since its last snapshot (its base),
   and those of the generation before it (its bridge), so a reader that is behind by up to two
   generations can catch up from deltas alone;
3. ``IndexReplica`` keeps a ``MatchIndex`` equal to the table at some version, without the filter
   texts: it catches up from the deltas (across a new base by the bridge), or loads a snapshot
   when it is new, behind the bridge, or ahead (a reader of another run).

What a record does (``plan_change``)
------------------------------------
- a tombstone (null value) removes the subscription named by its key;
- ``unsubscribe`` removes ``subscription_id`` (an unknown id is no change);
- ``subscribe`` with an atomic ``filter`` that parses adds it or replaces the one with that id;
- ``subscribe`` with a ``composite`` tree removes any atomic subscription of that id (the id now
  names a composite subscription, which another job detects) and is otherwise skipped: not
  matched here and not a dead letter;
- a record that does not decode, breaks a rule of ``schemas.rules``, or whose filter does not
  parse is rejected with the reason (the parser's message for filters: position, what was found,
  what was expected) and changes nothing: an existing subscription of that id stays as it was.
  This is the decision of the offline twin (``siftstream match``, docs/reference/matching-log.md): a bad update
  never silently unsubscribes anyone.

Examples
--------
>>> table = SubscriptionTable()
>>> outcome = plan_change(SubscriptionRecord(key="s1", op="subscribe", subscription_id="s1", filter="x > 1"))
>>> outcome.change
('s1', 'x > 1')
>>> table.apply([outcome.change, ("s2", "y = 'a'"), ("s1", None), ("s3", None)])
>>> dict(table.filters), table.version, [v for v, _, _ in table.deltas()]
({'s2': "y = 'a'"}, 3, [1, 2, 3])
>>> replica = IndexReplica()
>>> replica.sync(0, lambda: [], table.deltas(), table.version)
>>> replica.index.match([{"y": "a"}]).ids(0)
['s2']
>>> code, reason = plan_change(SubscriptionRecord(op="subscribe", subscription_id="s4", filter="x <")).rejection
>>> print(code, reason)
invalid_filter filter at position 3: expected a literal (number, 'string', true or false), found end of input
  x <
     ^
"""

from __future__ import annotations

from collections.abc import Callable, ItemsView, Iterable, Iterator, Mapping, Sequence, ValuesView
from dataclasses import dataclass
from itertools import compress, islice, repeat
from operator import itemgetter, ne
from typing import Any, NamedTuple, Protocol, cast

import numpy as np

from routing.matching.collector import collector_paused
from routing.matching.index import BruteForceIndex, MatchIndex
from routing.matching.language import FilterError, validate_filter
from routing.matching.numeric_form import read_numeric_form
from routing.matching.packing import pack_texts, packable, unpack_text, unpack_texts

__all__ = [
    "Bridge",
    "Change",
    "CompiledStore",
    "Delta",
    "IndexReplica",
    "LoadedIndex",
    "Outcome",
    "RecordColumns",
    "SubscriptionRecord",
    "SubscriptionTable",
    "plan_change",
    "plan_changes",
    "plan_columns",
]

_ID_FILTER = itemgetter(1, 2)


Change = tuple[str, str | None]
"""``(subscription id, filter text)``; a filter of None removes the subscription."""

Delta = tuple[int, str, str | None]
"""``(version, subscription id, filter text or None)``: one effective change of a table."""


class SubscriptionRecord(NamedTuple):
    """One record of the subscriptions topic, decoded (by ``streaming.decode`` or ``schemas.codec``).

    A named tuple, the cheapest record Python makes: a cold start makes one per record of the
    topic.

    Attributes
    ----------
    key : str or None
        The Kafka key as text (None when absent or not UTF-8).
    tombstone : bool
        The Kafka value is null: a deletion on the compacted topic.
    error_code, reason : str or None
        The decoder's verdict when the value does not decode or breaks a rule; None when valid.
    op : str or None
        ``subscribe`` or ``unsubscribe``.
    subscription_id, filter, composite, subscriber_id : str or None
        The record's fields.
    """

    key: str | None = None
    tombstone: bool = False
    error_code: str | None = None
    reason: str | None = None
    op: str | None = None
    subscription_id: str | None = None
    filter: str | None = None
    composite: str | None = None
    subscriber_id: str | None = None


class Outcome(NamedTuple):
    """What one record does: a ``change`` to apply, a ``rejection`` ``(error_code, reason)`` for the
    dead-letter topic, or neither (``skipped`` says it was a composite subscription)."""

    change: Change | None = None
    rejection: tuple[str, str] | None = None
    skipped: bool = False


def plan_change(record: SubscriptionRecord) -> Outcome:
    """Decide what one subscriptions-topic record does (see the module docstring)."""
    return _plan(record, False)


def _plan(record: SubscriptionRecord, valid: bool) -> Outcome:
    """``plan_change(record)``, its filter taken as valid without parsing it when ``valid``."""
    if record.tombstone:
        return Outcome(change=(record.key, None)) if record.key is not None else Outcome()
    if record.error_code is not None:
        return Outcome(rejection=(record.error_code, record.reason or record.error_code))
    sid = record.subscription_id
    if sid is None:  # the decoder guarantees it for valid records; never trust that blindly
        return Outcome(rejection=("invalid_value", "subscription_id is required"))
    if record.op == "unsubscribe":
        return Outcome(change=(sid, None))
    if record.filter is None:
        if record.composite is not None:
            return Outcome(change=(sid, None), skipped=True)
        return Outcome(rejection=("invalid_value", "a subscribe needs a filter or a composite tree"))
    if not valid:
        try:
            validate_filter(record.filter)
        except FilterError as exc:
            return Outcome(rejection=("invalid_filter", f"filter {exc}"))
    return Outcome(change=(sid, record.filter))


def plan_changes(records: Iterable[SubscriptionRecord]) -> list[Outcome]:
    """``plan_change`` of each record, in order, with Python's garbage collector paused: the
    matching job plans a micro-batch's records, or the whole topic at a cold start, at once
    (docs/decisions/collector-paused.md). The filters of the numeric form (W1's ranges and
    Gryphon's equalities, ``language._NUMERIC_FILTER``) are recognised together from their bytes
    (``numeric_form.read_numeric_form``: exactly the texts the pattern accepts, all valid); the
    others are validated one by one.

    Examples
    --------
    >>> [o.change for o in plan_changes([SubscriptionRecord(key="a", tombstone=True)])]
    [('a', None)]
    """
    with collector_paused():
        records = list(records)
        texts = [r.filter or "" for r in records]  # "" is not of the numeric form
        return list(map(_plan, records, (read_numeric_form(texts)[0] >= 0).tolist()))


class RecordColumns(NamedTuple):
    """Subscription records as columns: equal-length lists, one per field of
    ``SubscriptionRecord`` but ``subscriber_id`` (row ``i`` of every list is record ``i``)."""

    key: list[str | None]
    tombstone: list[bool]
    error_code: list[str | None]
    reason: list[str | None]
    op: list[str | None]
    subscription_id: list[str | None]
    filter: list[str | None]
    composite: list[str | None]

    @classmethod
    def of(cls, records: Sequence[SubscriptionRecord]) -> RecordColumns:
        """``records`` as columns (``subscriber_id`` left out).

        >>> RecordColumns.of([SubscriptionRecord("a", op="subscribe"), SubscriptionRecord("b", True)]).tombstone
        [False, True]
        """
        return cls(*([getattr(r, name) for r in records] for name in cls._fields))

    def record(self, i: int) -> SubscriptionRecord:
        """Record ``i`` as ``plan_change`` takes it."""
        values: list[Any] = [column[i] for column in self]  # the record's leading fields, in order
        return SubscriptionRecord(*values)


def plan_columns(columns: RecordColumns) -> tuple[list[Change], list[tuple[int, tuple[str, str]]], int]:
    """``plan_changes`` over records given as columns: ``(changes, rejections, skipped)``, the
    changes in record order, each rejected record's index with its ``(error_code, reason)``, and
    the number of composites skipped.

    The plain records make their change with no object per record, so a cold start's whole topic,
    or a micro-batch of churn, is planned in C loops: a subscribe (no tombstone or decoder
    verdict, not an ``unsubscribe``) with an id and a filter of the numeric form
    (``numeric_form.read_numeric_form``: valid without parsing) makes ``(id, filter)``, an
    ``unsubscribe`` with an id (and no verdict) ``(id, None)``, a tombstone with a key
    ``(key, None)``. Every other record goes through ``plan_change``. The answer is
    ``plan_changes``' on the same records, gathered.

    Examples
    --------
    >>> cols = RecordColumns(["a", "b", "c"], [False, False, True], [None, None, None], [None, None, None],
    ...                      ["subscribe", "subscribe", None], ["a", "b", None], ["x < 1", "x <", None],
    ...                      [None, None, None])
    >>> changes, rejections, skipped = plan_columns(cols)
    >>> changes, rejections[0][0], rejections[0][1][0], skipped
    ([('a', 'x < 1'), ('c', None)], 1, 'invalid_filter', 0)
    """
    none: Any = None  # numpy's stubs take no None operand; the object comparisons do
    with collector_paused():
        n = len(columns.key)
        tombstone = np.array(columns.tombstone, dtype=np.bool_)
        keys = np.array(columns.key, dtype=object)
        sids = np.array(columns.subscription_id, dtype=object)
        filters = np.array(columns.filter, dtype=object)
        record = ~tombstone & np.equal(np.array(columns.error_code, dtype=object), none) & np.not_equal(sids, none)
        dropped = record & np.equal(np.array(columns.op, dtype=object), "unsubscribe")
        subscribed = record & ~dropped & np.not_equal(filters, none)
        texts = columns.filter if subscribed.all() else np.where(subscribed, filters, "").tolist()
        subscribed &= read_numeric_form(texts)[0] >= 0  # type: ignore[arg-type]
        plain = subscribed | dropped | (tombstone & np.not_equal(keys, none))
        ids = np.where(tombstone, keys, sids).tolist()  # each plain record's change: (ids[i], kept[i])
        kept = np.where(subscribed, filters, none).tolist()
        changes: list[Change] = []
        rejections: list[tuple[int, tuple[str, str]]] = []
        skipped, at = 0, 0
        for i in np.flatnonzero(~plain).tolist():  # the other records, one by one, in order
            changes.extend(zip(ids[at:i], kept[at:i], strict=True))
            outcome = _plan(columns.record(i), False)
            if outcome.change is not None:
                changes.append(outcome.change)
            if outcome.rejection is not None:
                rejections.append((i, outcome.rejection))
            skipped += outcome.skipped
            at = i + 1
        changes.extend(zip(ids[at:n], kept[at:n], strict=True))
        return changes, rejections, skipped


class SubscriptionTable:
    """``subscription id -> filter text``, versioned, with the changes since its last snapshot.

    Parameters
    ----------
    rebase_min : int
        ``due_for_snapshot`` holds once at least this many changes, and at least
        ``rebase_fraction`` times the table's size, were made since the last snapshot: readers
        then rebuild from a fresh snapshot instead of replaying a long list of deltas.
    rebase_fraction : float
        See ``rebase_min``.

    Notes
    -----
    The texts are kept as they come until ``pack`` packs them (``routing.matching.packing``:
    about half the bytes for range filters); ``filters`` reads either form as text, and a
    packed table's ``texts`` unpacks them all at once. The matching job packs after each batch,
    so a cold start's first batch ships its texts without unpacking them.
    """

    def __init__(self, rebase_min: int = 1024, rebase_fraction: float = 0.25) -> None:
        self._filters: dict[str, str | bytes] = {}
        self._packed = 0  # the filters held packed (bytes)
        self._stuck = 0  # those of the others that the last pack could not pack
        self._deltas: list[Delta] = []
        self._version = 0
        self._base_version = 0
        self._bridge: tuple[int, tuple[Delta, ...]] = (0, ())  # the deltas of the previous generation
        self._rebase_min = rebase_min
        self._rebase_fraction = rebase_fraction

    @classmethod
    def restore(
        cls, filters: Mapping[str, str], version: int, rebase_min: int = 1024, rebase_fraction: float = 0.25
    ) -> SubscriptionTable:
        """A table holding ``filters`` at ``version``, with that version as its snapshot."""
        table = cls(rebase_min, rebase_fraction)
        table._filters = dict(filters.items())
        table._version = table._base_version = version
        table._bridge = (version, ())
        return table

    @property
    def filters(self) -> Mapping[str, str]:
        """The active subscriptions: a read-only view of the table as it is whenever it is read,
        whose ``items`` and ``values`` unpack the packed texts together."""
        return _Unpacked(self)

    def texts(self) -> dict[str, str]:
        """The active subscriptions as a new dict (the packed texts unpacked at once)."""
        if not self._packed:
            return cast(dict[str, str], dict(self._filters))
        return dict(zip(self._filters, unpack_texts(list(self._filters.values())), strict=True))

    def pack(self, limit: int = 1 << 18, least: int = 1) -> int:
        """Pack up to ``limit`` of the texts held as they came (``routing.matching.packing``),
        if at least ``least`` of them were set since the last pack; return how many were packed.
        What ``filters`` and ``texts`` read is the same before and after.

        >>> table = SubscriptionTable()
        >>> table.apply([("a", "x between 1 and 2"), ("b", "y = 3")])
        >>> table.pack(least=3), table.pack(), table.filters["a"], len(table.texts()), table.pack()
        (0, 2, 'x between 1 and 2', 2, 0)
        """
        filters = self._filters
        if len(filters) - self._packed - self._stuck < max(1, least):
            return 0
        ids = list(islice((sid for sid, text in filters.items() if type(text) is str), limit))
        packed = pack_texts([cast(str, filters[sid]) for sid in ids])
        filters.update(zip(ids, packed, strict=True))
        done = sum(map(isinstance, packed, repeat(bytes)))
        self._packed += done
        self._stuck = len(filters) - self._packed if len(ids) < limit else 0
        return done

    @property
    def version(self) -> int:
        """The number of effective changes ever applied (restored tables continue the count)."""
        return self._version

    @property
    def base_version(self) -> int:
        """The version of the last snapshot: ``deltas()`` covers ``(base_version, version]``."""
        return self._base_version

    def __len__(self) -> int:
        return len(self._filters)

    def apply(self, changes: Iterable[Change]) -> None:
        """Apply changes in order; removing an absent id, or setting the same text, is no change.
        Python's garbage collector is paused meanwhile (each change keeps a new delta tuple;
        docs/decisions/collector-paused.md)."""
        filters, deltas = self._filters, self._deltas
        version, packed, stuck = self._version, self._packed, self._stuck
        with collector_paused():
            try:
                for sid, filt in changes:
                    old = filters.get(sid)
                    if filt is None:
                        if old is None:
                            continue
                        del filters[sid]
                    else:
                        if old == filt or (type(old) is bytes and unpack_text(old) == filt):
                            continue
                        filters[sid] = filt
                    if type(old) is bytes:
                        packed -= 1
                    elif stuck and type(old) is str and not packable(old):
                        stuck -= 1  # a text the last pack could not pack goes
                    version += 1
                    deltas.append((version, sid, filt))
            finally:
                self._version, self._packed, self._stuck = version, packed, stuck

    def deltas(self, after: int | None = None) -> tuple[Delta, ...]:
        """The changes since the snapshot (or since version ``after`` >= ``base_version``)."""
        if after is None or after <= self._base_version:
            return tuple(self._deltas)
        if after > self._version:
            raise ValueError(f"version {after} is ahead of the table (at {self._version})")
        return tuple(self._deltas[after - self._base_version :])

    def due_for_snapshot(self) -> bool:
        """Whether enough changed since the last snapshot to take a new one (see the parameters)."""
        n = len(self._deltas)
        return n >= self._rebase_min and n >= self._rebase_fraction * len(self._filters)

    def snapshot(self, bridge: bool = True) -> None:
        """Make the current state the base: its deltas become the ``bridge`` to it, and the bridge
        before them is forgotten. A snapshot with no change since the base changes nothing.

        ``bridge=False`` keeps no bridge (``bridge()`` is then ``(base_version, ())``, which no
        reader behind the base can take): for a table that no reader has followed since its last
        base, such as a cold start's table of the whole topic, whose deltas would otherwise stay
        held until the next snapshot.

        >>> table = SubscriptionTable()
        >>> table.apply([("a", "x = 1"), ("b", "y = 2")]); table.snapshot(bridge=False)
        >>> table.base_version, table.bridge(), table.deltas()
        (2, (2, ()), ())
        """
        if not self._deltas:
            return
        self._bridge = (self._base_version, tuple(self._deltas)) if bridge else (self._version, ())
        self._deltas = []
        self._base_version = self._version

    def bridge(self) -> tuple[int, tuple[Delta, ...]]:
        """``(previous base version, the deltas over (previous base, base_version])``: the changes
        of the generation before the last snapshot, which take a reader at any version from the
        previous base on to the base without the snapshot (``IndexReplica.sync``'s ``bridge``).

        >>> table = SubscriptionTable(rebase_min=1)
        >>> table.apply([("a", "x = 1")]); table.snapshot(); table.apply([("a", None), ("b", "y = 2")])
        >>> table.snapshot(); table.bridge()
        (1, ((2, 'a', None), (3, 'b', 'y = 2')))
        """
        return self._bridge


@dataclass(frozen=True)
class LoadedIndex:
    """A compiled index as ``CompiledStore.load`` returns it.

    Attributes
    ----------
    index : MatchIndex
        The loaded index.
    texts : dict or None
        The ``id -> filter text`` map the index holds; None only when the store was asked for a
        digest (``routing.matching.digest.texts_digest``) that the saved map has: the map then
        equals the one that digest was taken of, and it is not read.
    version : int
        The table version the index was saved at.
    lineage : str
        The lineage it was saved under ("" for none).
    """

    index: MatchIndex
    texts: dict[str, str] | None
    version: int
    lineage: str


class CompiledStore(Protocol):
    """Where an ``IndexReplica`` keeps the compiled form of its index between processes
    (``streaming.subscription_store.CompiledIndexFolder`` on disk).

    ``save`` stores a ``MatchIndex`` (``MatchIndex.to_arrays``) with the ``id -> filter text``
    map it holds and that map's digest (``routing.matching.digest.texts_digest``), the table
    version it equals and the lineage of that table (a name under which one version means one
    content; "" for none); ``load`` returns the latest saved index that loads (a
    :class:`LoadedIndex`) with its map, or without it when ``digest`` is the saved map's digest,
    or None when there is none that loads (missing, of another format, damaged); ``texts``
    returns the map saved at ``version`` under ``lineage``, or None when there is none.
    """

    def load(self, digest: str | None = None) -> LoadedIndex | None: ...

    def save(self, index: MatchIndex, filters: Mapping[str, str], version: int, lineage: str = "") -> None: ...

    def texts(self, version: int, lineage: str) -> dict[str, str] | None: ...


Bridge = tuple[int, Callable[[], Sequence[Delta]]]
"""``(from version, a loader of the deltas over (from version, base version])``: the table's
``bridge`` as the job ships it, read only by a replica that takes it."""


class IndexReplica:
    """A ``MatchIndex`` kept equal to a ``SubscriptionTable`` at a version, from snapshots and deltas.

    Parameters
    ----------
    factory : callable
        Makes an empty index (``MatchIndex``; tests pass ``BruteForceIndex``).
    freeze_first_build : bool
        End the first build of the index (from nothing) with ``gc.freeze()`` (a long-lived worker
        process: the loaded state leaves the garbage collector's later scans;
        ``routing.matching.collector``).
    compiled : CompiledStore, optional
        Where compiled indexes are kept (``MatchIndex`` replicas only). A replica that must load a
        snapshot loads the latest one and applies what differs between the texts saved with it
        and the snapshot, instead of compiling every filter; when the snapshot's digest is
        shipped (``sync``'s ``base_digest``) and the latest one's texts have it, the replica
        takes that index as it is, reading neither the snapshot nor the saved texts. A save is
        due, for the next ``save_compiled``, after a build from a snapshot (not empty), and after a sync that
        reaches a new base (a load or a bridge) once at least ``save_min`` changes were applied
        since the index was built, loaded or saved.
    save_min : int
        See ``compiled``.
    build_chunk : int
        A build from nothing applies the snapshot this many subscriptions at a time: the compile's
        temporaries (the words of every text, the record tuples) are those of one chunk, not of
        the whole snapshot.
    lineage : str, optional
        Names the table the replica follows, such that one version under one name is one content
        (the matching job's run). With it, a save writes the lineage, and the next save takes the
        texts from the last one's (``CompiledStore.texts``) and the changes since, instead of
        reading the snapshot.

    Notes
    -----
    The replica holds its index and its version, not the filter texts. A replica at a version
    ``v`` that a new snapshot (base) leaves behind reaches the base by the table's ``bridge``
    when the bridge starts at or before ``v``: the deltas of the generation before the base,
    those after ``v`` applied with the deltas after the base as one batch, the snapshot never
    read. A replica that is new, behind the bridge, or ahead of ``version`` (a reader of another
    run) loads the snapshot: a new index built from it, or the latest compiled index with what
    differs from the snapshot applied; a compiled index stands for the texts saved with it,
    whatever table version or run it came from, so the replica equals the snapshot either way.
    A save writes the texts at the replica's version: those of the replica's last save (with a
    ``lineage``, when the store still has them and the last sync's bridge and deltas reach from
    there), or the last sync's snapshot, with the changes since; an index loaded by its digest
    counts as the replica's last save when it was saved under the replica's lineage. ``rebuilds``
    counts the loads of a snapshot, ``bridges`` the bases reached by a bridge,
    ``compiled_loads`` the compiled indexes loaded, ``digest_loads`` those of them taken by the
    snapshot's digest (the snapshot not read) and ``compiled_saves`` those saved.
    """

    def __init__(
        self,
        factory: Callable[[], MatchIndex | BruteForceIndex] = MatchIndex,
        freeze_first_build: bool = False,
        compiled: CompiledStore | None = None,
        save_min: int = 1024,
        build_chunk: int = 1 << 16,
        lineage: str | None = None,
    ) -> None:
        self._factory = factory
        self._lineage = lineage
        self._saved: int | None = None  # the version of the last save under ``lineage``
        self._index = factory()
        self._version: int | None = None
        self._freeze_first_build = freeze_first_build
        self._compiled = compiled
        self._save_min = save_min
        self._build_chunk = max(1, build_chunk)
        self.rebuilds = 0
        self.bridges = 0
        self.compiled_loads = 0
        self.digest_loads = 0
        self.compiled_saves = 0
        self._save_due = False
        self._unsaved = 0  # changes applied since the index was built, loaded or saved
        # the last sync's snapshot, deltas and bridge: read again only by a save
        self._source: tuple[int, Callable[[], Iterable[tuple[str, str]]], Sequence[Delta], Bridge | None] | None = None

    @property
    def index(self) -> MatchIndex | BruteForceIndex:
        return self._index

    @property
    def version(self) -> int | None:
        """The table version the index equals (None before the first ``sync``)."""
        return self._version

    def sync(
        self,
        base_version: int,
        load_base: Callable[[], Iterable[tuple[str, str]]],
        deltas: Iterable[Delta],
        version: int,
        bridge: Bridge | None = None,
        base_digest: str | None = None,
    ) -> None:
        """Bring the index to ``version``.

        The changes reach the index as one batch (``apply``; a build from a snapshot in chunks
        of ``build_chunk``), with Python's garbage collector paused
        (``routing.matching.collector``); the first build, made with ``freeze_first_build``, ends
        with ``gc.freeze()``, which takes the loaded state out of the collector's later scans
        (docs/decisions/collector-paused.md).

        Parameters
        ----------
        base_version : int
            The version of the snapshot that ``load_base`` returns.
        load_base : callable
            Returns the snapshot's ``(id, filter)`` pairs; called only when the replica must load
            it (it is new, behind ``base_version`` and the bridge, or ahead of ``version``), and
            by a due ``save_compiled``.
        deltas : iterable of (version, id, filter or None)
            The table's changes over ``(base_version, version]``, in version order.
        version : int
            The version to reach.
        bridge : (int, callable), optional
            ``(b, load)``: ``load()`` returns the table's changes over ``(b, base_version]`` in
            version order (``SubscriptionTable.bridge``); called only by a replica at a version
            in ``[b, base_version)``, which then reaches the base without the snapshot.
        base_digest : str, optional
            ``routing.matching.digest.texts_digest`` of the snapshot: a replica that must load
            the snapshot and whose latest compiled index was saved with texts of that digest
            takes that index as it is, without calling ``load_base``.
        """
        if self._version == version and base_version <= version:
            return  # at the version already (most micro-batches): no delta to walk, nothing to apply
        deltas = deltas if isinstance(deltas, tuple | list) else list(deltas)
        current = self._version
        with collector_paused(freeze=current is None and self._freeze_first_build):
            changes: dict[str, str | None] = {}
            crossed = False
            if current is not None and bridge is not None and bridge[0] <= current < base_version <= version:
                changes = _last_changes(bridge[1](), current, base_version)
                current, crossed = base_version, True
                self.bridges += 1
            if current is None or current < base_version or current > version:
                self._version = None  # a load that fails leaves a replica that loads again
                self._load(load_base, base_digest)
                current, crossed = base_version, True
            changes.update(_last_changes(deltas, current, version))
            self._index.apply(list(changes.items()))
            self._unsaved += len(changes)
            self._version = version
            self._source = (base_version, load_base, deltas, bridge)
            if crossed and self._compiled is not None and isinstance(self._index, MatchIndex):
                self._save_due = self._save_due or self._unsaved >= self._save_min

    def _load(self, load_base: Callable[[], Iterable[tuple[str, str]]], digest: str | None = None) -> None:
        """Make the index equal to the snapshot: the latest compiled index, as it is when its
        texts have the snapshot's ``digest``, else with what differs from it applied; or a new
        index built from the snapshot."""
        loaded = None if self._compiled is None else self._compiled.load(digest)
        held = None if loaded is None else loaded.texts
        if loaded is not None and held is None and digest is not None:
            # its texts have the snapshot's digest: neither is read (docs/decisions/compiled-index.md)
            self._index, self._unsaved, self._save_due = loaded.index, 0, False
            self.compiled_loads, self.digest_loads = self.compiled_loads + 1, self.digest_loads + 1
            # a file of this lineage holds its texts at its version: the next save may start there
            same = self._lineage is not None and loaded.lineage == self._lineage
            self._saved = loaded.version if same else None
            self.rebuilds += 1
            return
        base = load_base()
        if loaded is None or held is None:
            self._index = self._factory()  # the old index goes before the new one is built
            items = base if isinstance(base, list) else list(base)
            if isinstance(self._index, MatchIndex):
                self._index.reserve(len(items))
            for at in range(0, len(items), self._build_chunk):  # bounded temporaries: a chunk at a time
                self._index.apply(items[at : at + self._build_chunk])
            if isinstance(self._index, MatchIndex):
                self._index.fit()
            self._unsaved = len(items)
            self._save_due = len(items) > 0 and self._compiled is not None and isinstance(self._index, MatchIndex)
        else:
            self._index, self.compiled_loads = loaded.index, self.compiled_loads + 1
            snapshot = dict(base)
            diff: list[tuple[str, str | None]] = [(sid, None) for sid in held.keys() - snapshot.keys()]
            diff += compress(snapshot.items(), map(ne, map(held.get, snapshot.keys()), snapshot.values()))  # C loops
            self._index.apply(diff)
            self._unsaved, self._save_due = len(diff), False
        self._saved = None
        self.rebuilds += 1

    def save_compiled(self) -> bool:
        """Save the index, with the texts at its version and that version, to the compiled store
        when a ``sync`` made that due (see ``compiled``); return whether it saved. Separate from
        ``sync`` so that a caller can answer first (the matching job's workers save once a task's
        rows are out); a save left due is made by a later call, of the state then."""
        if not self._save_due or self._compiled is None or self._version is None or self._source is None:
            return False
        since_save = self._texts_since_save()
        if since_save is None:  # from the snapshot
            base_version, load_base, deltas, _ = self._source
            texts, changes = dict(load_base()), _last_changes(deltas, base_version, self._version)
        else:
            texts, changes = since_save
        for sid, filt in changes.items():
            if filt is None:
                texts.pop(sid, None)
            else:
                texts[sid] = filt
        self._compiled.save(cast(MatchIndex, self._index), texts, self._version, self._lineage or "")
        self._save_due, self._unsaved = False, 0
        self._saved = None if self._lineage is None else self._version
        self.compiled_saves += 1
        return True

    def _texts_since_save(self) -> tuple[dict[str, str], dict[str, str | None]] | None:
        """The texts of the last save under the lineage and the changes since (to the replica's
        version), or None when the store or the last sync's bridge and deltas do not reach."""
        saved, source = self._saved, self._source
        if saved is None or source is None or self._compiled is None or self._lineage is None:
            return None
        base_version, _, deltas, bridge = source
        version = cast(int, self._version)
        if saved > version:
            return None  # a save ahead of the replica (not under one lineage): read the snapshot
        if saved >= base_version:
            changes = _last_changes(deltas, saved, version)
        elif bridge is not None and bridge[0] <= saved:
            changes = _last_changes(bridge[1](), saved, base_version)
            changes.update(_last_changes(deltas, base_version, version))
        else:
            return None
        texts = self._compiled.texts(saved, self._lineage)
        return None if texts is None else (texts, changes)


class _Unpacked(Mapping[str, str]):
    """``SubscriptionTable.filters``: a read-only view of ``id -> text`` over the table's texts,
    some of which may be packed."""

    __slots__ = ("_held", "_table")

    def __init__(self, table: SubscriptionTable) -> None:
        self._table, self._held = table, table._filters

    def __getitem__(self, sid: str) -> str:
        return unpack_text(self._held[sid])

    def __iter__(self) -> Iterator[str]:
        return iter(self._held)

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, sid: object) -> bool:
        return sid in self._held

    def values(self) -> ValuesView[str]:
        if not self._table._packed:
            return cast(ValuesView[str], self._held.values())
        return self._table.texts().values()

    def items(self) -> ItemsView[str, str]:
        if not self._table._packed:
            return cast(ItemsView[str, str], self._held.items())
        return self._table.texts().items()


def _last_changes(deltas: Sequence[Delta], current: int, version: int) -> dict[str, str | None]:
    """The last change of each id among ``deltas`` after ``current`` (a filter, or None for a
    removal); ValueError when they do not reach ``version``.

    >>> _last_changes(((1, "a", "x = 1"), (2, "b", "y = 2"), (3, "a", None)), 1, 3)
    {'b': 'y = 2', 'a': None}
    """
    skip = current + 1 - deltas[0][0] if deltas else 0
    if deltas and 0 <= skip <= len(deltas) and deltas[-1][0] == version == current + len(deltas) - skip:
        # versions rise by one (a table's deltas): those after ``current`` at once, in C loops
        return dict(map(_ID_FILTER, islice(deltas, skip, None)))
    last: dict[str, str | None] = {}
    for v, sid, filt in deltas:
        if v <= current:
            continue
        last[sid] = filt
        current = v
    if current != version:
        raise ValueError(f"the deltas reach version {current}, not {version}: some are missing")
    return last
