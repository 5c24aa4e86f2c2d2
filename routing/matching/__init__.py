"""Content matching: the filter language, the matching index and the live subscription table.

An event matches a subscription when it satisfies every predicate of the subscription's filter
(a conjunction such as ``price < 120 and symbol = 'IBM'``; docs/reference/filters.md). This
family turns filter text into :class:`Filter` objects, keeps thousands to millions of them in
an index that matches batches of events at once, and keeps the table of live subscriptions that
the matching job updates from the subscriptions topic.

Modules
-------
language
    The filter language: parser (:func:`parse_filter`, :func:`validate_filter`, :class:`FilterError`
    with the position), predicates, evaluation, and covering/overlap between filters.
index
    :class:`MatchIndex` (bitset rows per attribute bucket, compiled kernels) and its oracle
    :class:`BruteForceIndex`, both taking :class:`EventBatch` and returning :class:`Matches`.
oracle
    Where :class:`BruteForceIndex`, :class:`EventBatch` and :class:`Matches` are defined
    (``index`` re-exports them).
collector
    :func:`collector_paused`: Python's garbage collector held off (and the heap frozen) during
    bulk loads of subscriptions.
digest
    :func:`texts_digest`: an order-free digest of an ``id -> filter text`` map, by which a
    restarted worker knows that a compiled index's texts are the snapshot's without reading it.
kernels
    The numba-compiled inner loops of :class:`MatchIndex` (internal).
keyed
    Open-addressing tables of int64 keys: a distinct filter's slot by its dedup key, a
    subscription's slot by its id, about 8 bytes an entry instead of a dict's 70-120 (internal).
numeric_form
    Filter texts of the numeric form (``between`` and comparisons on integers, written
    canonically) read from their bytes a batch at once, with their records' dedup keys (internal).
packing
    :func:`pack_strings`, :func:`unpack_strings`: strings as a byte blob and offsets, for the
    compiled form of an index (:meth:`MatchIndex.to_arrays`).
table
    :class:`SubscriptionTable`: the live subscriptions keyed by id, the changes a record makes
    (:func:`plan_change`, :func:`plan_changes`; :func:`plan_columns` over :class:`RecordColumns`),
    and :class:`IndexReplica` for executors that follow the table
    (loading a compiled index from a :class:`CompiledStore` when one is given).

Examples
--------
>>> from routing import matching
>>> index = matching.MatchIndex()
>>> index.add("s1", "price < 120 and symbol = 'IBM'")
>>> index.add("s2", "price between 100 and 200")
>>> index.match([{"symbol": "IBM", "price": 100.5}, {"symbol": "HP", "price": 150}]).all_ids()
[['s1', 's2'], ['s2']]
"""

from routing.matching.collector import collector_paused
from routing.matching.digest import texts_digest
from routing.matching.index import COMPILED_FORMAT, BruteForceIndex, EventBatch, Matches, MatchIndex
from routing.matching.language import (
    END_OF_INPUT,
    Event,
    Filter,
    FilterError,
    Kind,
    Op,
    Predicate,
    Value,
    cover_counterexample,
    covers,
    kind_of,
    matching_event,
    overlap_witness,
    overlaps,
    parse_filter,
    validate_filter,
)
from routing.matching.packing import pack_strings, unpack_strings
from routing.matching.table import (
    Change,
    CompiledStore,
    Delta,
    IndexReplica,
    LoadedIndex,
    Outcome,
    RecordColumns,
    SubscriptionRecord,
    SubscriptionTable,
    plan_change,
    plan_changes,
    plan_columns,
)

__all__ = [
    "COMPILED_FORMAT",
    "END_OF_INPUT",
    "BruteForceIndex",
    "Change",
    "CompiledStore",
    "Delta",
    "Event",
    "EventBatch",
    "Filter",
    "FilterError",
    "IndexReplica",
    "Kind",
    "LoadedIndex",
    "MatchIndex",
    "Matches",
    "Op",
    "Outcome",
    "Predicate",
    "RecordColumns",
    "SubscriptionRecord",
    "SubscriptionTable",
    "Value",
    "collector_paused",
    "cover_counterexample",
    "covers",
    "kind_of",
    "matching_event",
    "overlap_witness",
    "overlaps",
    "pack_strings",
    "parse_filter",
    "plan_change",
    "plan_changes",
    "plan_columns",
    "texts_digest",
    "unpack_strings",
    "validate_filter",
]
