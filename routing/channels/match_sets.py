"""Match sets of a channel instance and the exact metrics of a channel plan.

Definitions (docs/reference/channels.md §2; Tariq §3.1 for false positives, Opyrchal §2.1 for
precision and the ideal groups). With subscriptions s_1..s_N, sample e_1..e_M and a plan giving
subscription s the channel ``labels[s]``:

- M(s): the events s's filter matches, row s of the boolean matrix ``hits`` (N x M);
- S_c: the members of channel c; U_c = ∪_{s ∈ S_c} M(s), what channel c carries;
- D = Σ_c |S_c| |U_c| (deliveries), T = Σ_s |M(s)| (matches), FP = D − T;
- waste ratio FP / D (0 when D = 0); writes W = Σ_c |U_c|;
- mean precision: over events matched by some subscription, (matching subscriptions) /
  (receiving subscriptions), averaged;
- flooding FP = N |∪_s M(s)| − T; ideal_channels = distinct rows of ``hits``; ideal_groups =
  distinct non-empty columns.

:func:`plan_metrics` is the numpy path; :func:`plan_metrics_by_sets` its oracle in Python sets
(docs/conventions.md §6). Both return the same :class:`PlanMetrics`. Invariant: FP = D − T >= 0.

Examples
--------
>>> import numpy as np
>>> hits = np.array([[1, 0, 0, 0, 0], [1, 1, 1, 0, 0], [0, 1, 1, 0, 1], [0, 0, 1, 0, 1]], dtype=bool)
>>> m = plan_metrics(hits, np.array([0, 0, 1, 1]))
>>> m.deliveries, m.false_positives, m.waste_ratio, m.mean_precision, m.writes
(12, 3, 0.25, 0.8125, 6)
>>> m.flooding_false_positives, m.ideal_channels, m.ideal_groups
(7, 4, 4)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from routing.matching.index import BruteForceIndex, MatchIndex
from routing.matching.language import Filter

__all__ = [
    "PlanMetrics",
    "derive_hits",
    "derive_hits_by_filters",
    "false_positives",
    "plan_metrics",
    "plan_metrics_by_sets",
]

BoolMatrix = npt.NDArray[np.bool_]
Labels = npt.NDArray[np.int64]


def derive_hits(filters: Sequence[Filter], events: Sequence[Mapping[str, Any]], fast: bool = True) -> BoolMatrix:
    """The N x M match matrix: ``hits[i, j]`` when filter i matches event j.

    Uses :class:`~routing.matching.index.MatchIndex` (``fast``) or its oracle
    :class:`~routing.matching.index.BruteForceIndex`: the matcher of ``siftstream match``.

    >>> from routing.matching.language import parse_filter
    >>> derive_hits([parse_filter("x > 1")], [{"x": 0}, {"x": 2}]).tolist()
    [[False, True]]
    """
    index: MatchIndex | BruteForceIndex = MatchIndex() if fast else BruteForceIndex()
    keys = [f"{i}" for i in range(len(filters))]
    for key, filt in zip(keys, filters, strict=True):
        index.add(key, filt)
    hits = np.zeros((len(filters), len(events)), dtype=bool)
    matched = index.match([dict(e) for e in events]).all_ids()
    for j, ids in enumerate(matched):
        for key in ids:
            hits[int(key), j] = True
    return hits


def derive_hits_by_filters(filters: Sequence[Filter], events: Sequence[Mapping[str, Any]]) -> BoolMatrix:
    """The oracle of :func:`derive_hits`: every filter against every event with ``Filter.matches``."""
    return np.array([[f.matches(e) for e in events] for f in filters], dtype=bool).reshape(len(filters), len(events))


@dataclass(frozen=True)
class PlanMetrics:
    """The numbers of docs/reference/channels.md §5 for one plan.

    ``channels`` holds, per used channel in ascending number, (members, carried events,
    deliveries, false positives) with members and events as indices in input order.
    """

    subscriptions: int
    events: int
    matched_events: int
    matches: int
    deliveries: int
    false_positives: int
    waste_ratio: float
    mean_precision: float
    channels_used: int
    writes: int
    flooding_false_positives: int
    ideal_channels: int
    ideal_groups: int
    channels: tuple[tuple[tuple[int, ...], tuple[int, ...], int, int], ...]

    def summary(self) -> dict[str, Any]:
        """The ``summary`` object of the output, keys in the contract's order."""
        return {
            "subscriptions": self.subscriptions,
            "events": self.events,
            "matched_events": self.matched_events,
            "matches": self.matches,
            "deliveries": self.deliveries,
            "false_positives": self.false_positives,
            "waste_ratio": self.waste_ratio,
            "mean_precision": self.mean_precision,
            "channels_used": self.channels_used,
            "writes": self.writes,
            "flooding_false_positives": self.flooding_false_positives,
            "ideal_channels": self.ideal_channels,
            "ideal_groups": self.ideal_groups,
        }


def _ratio(num: int, den: int) -> float:
    return num / den if den else 0.0


def plan_metrics(hits: BoolMatrix, labels: Labels) -> PlanMetrics:
    """Every metric of §2 for ``labels`` (channel per subscription), computed with numpy."""
    n, m = hits.shape
    labels = np.asarray(labels, dtype=np.int64)
    used = np.unique(labels)
    sizes = np.array([(labels == c).sum() for c in used], dtype=np.int64)
    carried = np.array([hits[labels == c].any(axis=0) for c in used], dtype=bool).reshape(len(used), m)
    per_sub = hits.sum(axis=1)
    matches = int(per_sub.sum())
    widths = carried.sum(axis=1)
    deliveries = int((sizes * widths).sum())
    per_event_matches = hits.sum(axis=0)
    receivers = (sizes[:, None] * carried).sum(axis=0)
    matched = per_event_matches > 0
    precision = sum(
        (Fraction(int(a), int(b)) for a, b in zip(per_event_matches[matched], receivers[matched], strict=True)),
        Fraction(0),
    )
    n_matched = int(matched.sum())
    channels = []
    for row, c in enumerate(used):
        members = tuple(int(i) for i in np.flatnonzero(labels == c))
        events = tuple(int(j) for j in np.flatnonzero(carried[row]))
        d = int(sizes[row] * widths[row])
        channels.append((members, events, d, d - int(per_sub[list(members)].sum())))
    distinct_rows = len({row.tobytes() for row in np.packbits(hits, axis=1)}) if m else 1
    cols = np.packbits(hits[:, matched], axis=0).T
    return PlanMetrics(
        subscriptions=n,
        events=m,
        matched_events=n_matched,
        matches=matches,
        deliveries=deliveries,
        false_positives=deliveries - matches,
        waste_ratio=_ratio(deliveries - matches, deliveries),
        mean_precision=float(precision / n_matched) if n_matched else 0.0,
        channels_used=len(used),
        writes=int(widths.sum()),
        flooding_false_positives=n * n_matched - matches,
        ideal_channels=distinct_rows,
        ideal_groups=len({col.tobytes() for col in cols}),
        channels=tuple(channels),
    )


def false_positives(hits: Any, labels: Labels) -> int:
    """FP = Σ_c |S_c| |U_c| − T of ``labels`` alone, without the other metrics of :func:`plan_metrics`.

    What ``auto`` scores every candidate with (on the whole sample and on its held-out events), so
    it must stay cheap at 100,000 subscriptions: the carried sets U_c are one sparse product of the
    channel-membership matrix with ``hits`` (counts > 0), where :func:`plan_metrics` loops over the
    channels and adds precision, writes and the ideal counts. ``hits`` is the dense bool matrix or
    a :class:`scipy.sparse.csr_matrix` of it (built once, it serves every candidate). Equal to
    ``plan_metrics(hits, labels).false_positives`` (its oracle; a parity test).

    >>> hits = np.array([[1, 0, 0, 0, 0], [1, 1, 1, 0, 0], [0, 1, 1, 0, 1], [0, 0, 1, 0, 1]], dtype=bool)
    >>> false_positives(hits, np.array([0, 0, 1, 1])), false_positives(hits, np.zeros(4, dtype=np.int64))
    (3, 7)
    """
    from scipy import sparse

    matrix = sparse.csr_matrix(hits, dtype=np.float32)
    matrix.eliminate_zeros()
    labels = np.asarray(labels, dtype=np.int64)
    n = len(labels)
    if n == 0 or matrix.shape[1] == 0:
        return 0
    used, channel = np.unique(labels, return_inverse=True)
    member = sparse.csr_matrix((np.ones(n, dtype=np.float32), (channel, np.arange(n))), shape=(len(used), n))
    widths = np.asarray(((member @ matrix) > 0).sum(axis=1)).ravel()
    sizes = np.bincount(channel, minlength=len(used))
    return int((sizes.astype(np.int64) * widths.astype(np.int64)).sum()) - int(matrix.nnz)


def plan_metrics_by_sets(hits: BoolMatrix, labels: Labels) -> PlanMetrics:
    """The oracle of :func:`plan_metrics`: the definitions of §2 with Python sets, one loop each."""
    n, m = hits.shape
    match_sets = [frozenset(j for j in range(m) if hits[i, j]) for i in range(n)]
    members: dict[int, list[int]] = {}
    for i in range(n):
        members.setdefault(int(labels[i]), []).append(i)
    carried = {c: frozenset().union(*(match_sets[i] for i in ms)) for c, ms in members.items()}
    matches = sum(len(s) for s in match_sets)
    deliveries = sum(len(ms) * len(carried[c]) for c, ms in members.items())
    fp = sum(len(carried[c] - match_sets[i]) for c, ms in members.items() for i in ms)
    everything = frozenset().union(*match_sets)
    precision = Fraction(0)
    for e in everything:
        wanted = sum(1 for s in match_sets if e in s)
        received = sum(len(ms) for c, ms in members.items() if e in carried[c])
        precision += Fraction(wanted, received)
    channels = tuple(
        (
            tuple(ms),
            tuple(sorted(carried[c])),
            len(ms) * len(carried[c]),
            sum(len(carried[c] - match_sets[i]) for i in ms),
        )
        for c, ms in sorted(members.items())
    )
    groups = {frozenset(i for i in range(n) if e in match_sets[i]) for e in everything}
    return PlanMetrics(
        subscriptions=n,
        events=m,
        matched_events=len(everything),
        matches=matches,
        deliveries=deliveries,
        false_positives=fp,
        waste_ratio=_ratio(fp, deliveries),
        mean_precision=float(precision / len(everything)) if everything else 0.0,
        channels_used=len(members),
        writes=sum(len(u) for u in carried.values()),
        flooding_false_positives=n * len(everything) - matches,
        ideal_channels=len(set(match_sets)),
        ideal_groups=len(groups),
        channels=channels,
    )
