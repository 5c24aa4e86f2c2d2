"""The channel-planning methods of docs/reference/channels.md §4 and the rules they share.

Every method maps the N x M match matrix ``hits`` (row s is M(s)) to a channel per subscription
(an int64 array, ``labels``). Bounded methods use at most K channels; ``ideal`` uses one per
distinct match set. Final channel numbers follow :func:`number_channels` (by each channel's
smallest subscription id, plain string order).

Sources: flooding and ideal, Opyrchal §2.1–2.2; ``ck`` and ``ov``, Tariq §3.3.2.1 ([CM07],
[BFPB10, RLW+02]); ``kmeans``, Tariq §3.3.1.3; ``spectral-rassoc`` and ``spectral-ncut``,
Tariq Alg. 5 with Eq. 3.1 and 3.2 (row scaling of Ng, Jordan and Weiss); ``approx``, Opyrchal
§2.6 with its net waste induced NWI(a, b) = |S_a| |U_b \\ U_a| + |S_b| |U_a \\ U_b|.

Large N: :func:`spectral_ncut_sparse` runs ``spectral-ncut`` on one node per distinct recent window
(sparse J, ``eigsh``, weighted k-means) without the N x N matrix; :func:`approx` keeps its order
and the window's NWI incrementally.

Oracles (docs/conventions.md §6): :func:`exact_by_enumeration` for :func:`exact`,
:func:`net_waste_induced` (sets) for the matrix NWI inside :func:`approx`,
:func:`approx_by_sorting` for :func:`approx`, :func:`spectral_ncut` (the dense steps) for
:func:`spectral_ncut_sparse`.

Examples
--------
>>> import numpy as np
>>> hits = np.array([[1, 0, 0, 0, 0], [1, 1, 1, 0, 0], [0, 1, 1, 0, 1], [0, 0, 1, 0, 1]], dtype=bool)
>>> ids = ["s1", "s2", "s3", "s4"]
>>> exact(hits, 2, ids).tolist()
[0, 0, 1, 1]
>>> approx(hits, 2, ids).tolist()
[0, 0, 1, 1]
>>> flooding(4).tolist(), ideal(hits, ids).tolist()
([0, 0, 0, 0], [0, 1, 2, 3])
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt
from scipy import sparse
from scipy.sparse import linalg as sparse_linalg

from routing.channels.instance import Domain, ExactLimitError
from routing.channels.kernels import approx_merges
from routing.channels.kmeans import RESTARTS, kmeans, kmeans_weighted
from routing.channels.similarity import (
    csr_of,
    distinct_windows,
    first_appearance,
    isolated,
    nonzero_of,
    recent_windows,
)
from routing.matching.language import Filter

__all__ = [
    "APPROX_WINDOW",
    "AUTO_BASELINES",
    "AUTO_RUN_ORDER",
    "BOUNDED_METHODS",
    "CHANNEL_METHODS",
    "EXACT_LIMIT",
    "ChannelUnions",
    "approx",
    "approx_by_sorting",
    "ck",
    "ck_coordinates",
    "exact",
    "exact_by_enumeration",
    "flooding",
    "ideal",
    "join_isolated",
    "kmeans_on_rows",
    "net_waste_induced",
    "number_channels",
    "ov",
    "overlap",
    "overlap_by_pairs",
    "spectral_ncut",
    "spectral_ncut_sparse",
    "spectral_rassoc",
]

CHANNEL_METHODS = (
    "flooding",
    "ideal",
    "exact",
    "ck",
    "ov",
    "kmeans",
    "spectral-rassoc",
    "spectral-ncut",
    "approx",
    "auto",
)
"""Every ``--method``, in the contract's table order (``auto`` breaks ties in this order)."""

BOUNDED_METHODS = tuple(m for m in CHANNEL_METHODS if m not in ("ideal", "auto"))
"""The methods ``auto`` may choose among."""

AUTO_BASELINES = ("flooding", "approx", "ck", "ov")
"""Candidates ``auto`` always runs (each where it applies), whatever its budget: flooding and the
three baselines it must never do worse than (Opyrchal's ``approx``, the structural ``ck`` and
``ov``). ``routing.channels.planner.AUTO_ALWAYS`` adds the default method; the budget bounds only
the others."""

AUTO_RUN_ORDER = (*AUTO_BASELINES, "spectral-ncut", "exact", "spectral-rassoc", "kmeans")
"""The order ``auto`` runs its candidates in: the baselines, the default ``spectral-ncut``, then the
rest cheapest first as N grows (``exact`` refuses at once beyond its limit; ``kmeans`` on full
similarity rows costs most). Ties between candidates still go to the first in :data:`BOUNDED_METHODS` (the contract's
table order)."""

EXACT_LIMIT = 12
"""The most distinct match sets ``exact`` accepts (the contract requires at least 12)."""

DENSE_EIGEN_LIMIT = 1000
"""Up to this many distinct windows, :func:`spectral_ncut_sparse` solves its eigenproblem densely."""

APPROX_WINDOW = 100
"""``approx`` looks for the best pair among the first this many channels of its order."""

BoolMatrix = npt.NDArray[np.bool_]
FloatMatrix = npt.NDArray[np.float64]
Labels = npt.NDArray[np.int64]


def number_channels(labels: Labels, ids: Sequence[str]) -> Labels:
    """Renumber channels 0, 1, ... in order of their smallest subscription id (plain string order).

    >>> number_channels(np.array([5, 2, 5]), ["b", "c", "a"]).tolist()
    [0, 1, 0]
    """
    first: dict[int, str] = {}
    for label, sid in zip(labels.tolist(), ids, strict=True):
        if label not in first or sid < first[label]:
            first[label] = sid
    order = {label: rank for rank, label in enumerate(sorted(first, key=lambda lab: first[lab]))}
    return np.array([order[label] for label in labels.tolist()], dtype=np.int64)


def flooding(n: int) -> Labels:
    """Every subscription on channel 0 (Opyrchal §2.2)."""
    return np.zeros(n, dtype=np.int64)


def _distinct_rows(hits: BoolMatrix) -> tuple[BoolMatrix, Labels]:
    """The distinct match sets (first-appearance order) and each subscription's index among them."""
    which = first_appearance(hits)
    firsts = np.unique(which, return_index=True)[1] if len(which) else np.zeros(0, dtype=np.int64)
    return hits[firsts], which


def ideal(hits: BoolMatrix, ids: Sequence[str]) -> Labels:
    """One channel per distinct match set (Opyrchal §2.1): FP = 0, ``ideal_channels`` channels."""
    return number_channels(_distinct_rows(hits)[1], ids)


def exact(hits: BoolMatrix, k: int, ids: Sequence[str], limit: int = EXACT_LIMIT) -> Labels:
    """A plan of least FP with at most K channels.

    Subscriptions with equal match sets share a channel in some optimal plan, so the search runs
    over the m distinct match sets: f_j(X) = min over blocks B ∋ min(X) of cost(B) + f_{j−1}(X \\ B),
    cost(B) = (subscriptions in B) · |∪ B| − Σ_{s ∈ B} |M(s)|, in O(K · 3^m).

    Raises
    ------
    ExactLimitError
        When m exceeds ``limit``.
    """
    sets, which = _distinct_rows(hits)
    m = len(sets)
    if m > limit:
        raise ExactLimitError(
            f"exact: the instance has {m} distinct match sets, more than the limit of {limit}; "
            "use another --method (docs/reference/channels.md)"
        )
    if k >= m:
        return number_channels(which, ids)
    count = np.bincount(which, minlength=m)
    weight = sets.sum(axis=1)
    bits = [int("".join("1" if b else "0" for b in row[::-1]) or "0", 2) for row in sets]
    full = (1 << m) - 1
    cost = np.zeros(1 << m, dtype=np.int64)
    union = [0] * (1 << m)
    cnt = np.zeros(1 << m, dtype=np.int64)
    wanted = np.zeros(1 << m, dtype=np.int64)
    for mask in range(1, 1 << m):
        low = (mask & -mask).bit_length() - 1
        rest = mask & (mask - 1)
        union[mask] = union[rest] | bits[low]
        cnt[mask] = cnt[rest] + count[low]
        wanted[mask] = wanted[rest] + int(count[low]) * int(weight[low])
        cost[mask] = cnt[mask] * union[mask].bit_count() - wanted[mask]
    masks: list[int] = []
    subs: list[int] = []
    for mask in range(1, 1 << m):
        low = mask & -mask
        rest = mask ^ low
        sub = rest
        while True:
            masks.append(mask)
            subs.append(sub | low)
            if sub == 0:
                break
            sub = (sub - 1) & rest
    mask_arr = np.array(masks, dtype=np.int64)
    sub_arr = np.array(subs, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, mask_arr[1:] != mask_arr[:-1]])
    inf = np.int64(2**62)
    layers = [np.full(1 << m, inf, dtype=np.int64)]
    layers[0][0] = 0
    for _ in range(k):
        prev = layers[-1]
        vals = cost[sub_arr] + prev[mask_arr ^ sub_arr]
        new = np.full(1 << m, inf, dtype=np.int64)
        new[0] = 0
        new[mask_arr[starts]] = np.minimum.reduceat(vals, starts)
        layers.append(np.minimum(new, inf))
    block_of = np.empty(m, dtype=np.int64)
    mask, j, block = full, k, 0
    while mask:
        low = mask & -mask
        rest = mask ^ low
        sub = rest
        while True:
            b = sub | low
            if cost[b] + layers[j - 1][mask ^ b] == layers[j][mask]:
                break
            sub = (sub - 1) & rest
        for g in range(m):
            if b >> g & 1:
                block_of[g] = block
        block += 1
        mask ^= b
        j -= 1
    return number_channels(block_of[which], ids)


def exact_by_enumeration(hits: BoolMatrix, k: int) -> int:
    """The oracle of :func:`exact`: the least FP over every labelling of the subscriptions with K labels."""
    n = len(hits)
    sizes = hits.sum(axis=1)
    best = None
    for labels in itertools.product(range(k), repeat=n):
        lab = np.array(labels)
        fp = 0
        for c in set(labels):
            members = lab == c
            fp += int(members.sum()) * int(hits[members].any(axis=0).sum()) - int(sizes[members].sum())
        best = fp if best is None else min(best, fp)
    assert best is not None
    return best


class ChannelUnions:
    """What each of K channels carries, kept between placements: the join rule one subscription
    at a time.

    ``carried[c]`` is U_c (a bool row over the sample's events), ``size[c]`` is |S_c| and ``width[c]``
    is |U_c|, kept with ``carried`` by :meth:`add`, :meth:`fill` and :meth:`place` (write a channel
    through them, not into ``carried``). :meth:`place` applies the join rule to one match set M(s):
    the channel c in 0..K-1 of least ΔFP(c) = |U_c \\ M(s)| + |S_c| · |M(s) \\ U_c|, the lowest c on a
    tie, and adds s to it. With i(c) = |U_c ∩ M(s)|, ΔFP(c) = (|U_c| − i(c)) + |S_c| (|M(s)| − i(c)),
    so a placement reads only the K columns of M(s)'s events.

    >>> unions = ChannelUnions(2, 3)
    >>> unions.add(0, np.array([True, True, False]))
    >>> unions.place(np.array([False, False, True])), unions.place(np.array([True, False, False]))
    (1, 0)
    >>> unions.width.tolist(), unions.size.tolist()
    ([2, 1], [2, 1])
    """

    def __init__(self, k: int, events: int) -> None:
        self.carried = np.zeros((k, events), dtype=bool)
        self.size = np.zeros(k, dtype=np.int64)
        self.width = np.zeros(k, dtype=np.int64)

    @classmethod
    def of(cls, hits: BoolMatrix, labels: Labels, k: int) -> ChannelUnions:
        """The unions of a plan: subscription i (row i of ``hits``) on channel ``labels[i]``; a
        label −1 is not placed."""
        unions = cls(k, hits.shape[1])
        rows, cols = nonzero_of(hits)
        on = labels[rows] >= 0
        unions.carried[labels[rows[on]], cols[on]] = True
        unions.size = np.bincount(labels[labels >= 0], minlength=k).astype(np.int64)
        unions.width = unions.carried.sum(axis=1, dtype=np.int64)
        return unions

    def fill(self, channel: int, carried: npt.NDArray[np.bool_], size: int) -> None:
        """Set ``channel`` to carry ``carried`` for ``size`` subscriptions."""
        self.carried[channel] = carried
        self.size[channel] = size
        self.width[channel] = int(np.count_nonzero(carried))

    def add(self, channel: int, row: npt.NDArray[np.bool_]) -> None:
        """Put a subscription with match set ``row`` on ``channel``."""
        self.carried[channel] |= row
        self.size[channel] += 1
        self.width[channel] = int(np.count_nonzero(self.carried[channel]))

    def place(self, row: npt.NDArray[np.bool_]) -> int:
        """The join rule for one subscription with match set ``row``: its channel, now joined."""
        events = np.flatnonzero(row)
        inter = self.carried[:, events].sum(axis=1, dtype=np.int64)
        delta = (self.width - inter) + self.size * (len(events) - inter)
        channel = int(np.argmin(delta))
        self.width[channel] += len(events) - int(inter[channel])
        self.carried[channel, events] = True
        self.size[channel] += 1
        return channel


def join_isolated(hits: BoolMatrix, labels: Labels, ids: Sequence[str], k: int) -> Labels:
    """The join rule: each unplaced subscription (label −1), in id order, joins a channel by
    :meth:`ChannelUnions.place`. Placed subscriptions keep their labels, which must lie in 0..K−1.

    A subscription that matches nothing has ΔFP(c) = |U_c| and leaves every U_c as it is, so a run of
    them (consecutive in id order) joins one channel, found once."""
    labels = labels.copy()
    unions = ChannelUnions.of(hits, labels, k)
    empty: npt.NDArray[np.bool_] = ~np.asarray(hits.any(axis=1), dtype=bool)
    run: list[int] = []
    for i in sorted(np.flatnonzero(labels < 0).tolist(), key=ids.__getitem__):
        if empty[i]:
            run.append(i)
            continue
        if run:
            labels[run] = _join_empty(unions, len(run))
            run = []
        labels[i] = unions.place(hits[i])
    if run:
        labels[run] = _join_empty(unions, len(run))
    return labels


def _join_empty(unions: ChannelUnions, count: int) -> int:
    """``count`` subscriptions with empty match sets, placed one after another: all on one channel."""
    channel = int(np.argmin(unions.width))
    unions.size[channel] += count
    return channel


def _clustered_then_joined(
    hits: BoolMatrix,
    weights: FloatMatrix,
    k: int,
    ids: Sequence[str],
    embed: str,
    seed: int,
    sigma: float | None,
    unit_rows: bool = False,
) -> Labels:
    """Cluster the non-isolated subscriptions of ``weights`` on an embedding, number the clusters by
    smallest id, then place the isolated ones by :func:`join_isolated`. ``unit_rows`` scales each
    point of the ``rassoc`` embedding to unit length (the ``ncut`` embedding always is)."""
    n = len(hits)
    lonely = isolated(weights)
    inner = np.flatnonzero(~lonely)
    labels = np.full(n, -1, dtype=np.int64)
    if len(inner):
        w = weights[np.ix_(inner, inner)]
        points = _ncut_embedding(w, k, sigma) if embed == "ncut" else _rassoc_embedding(w, k)
        if unit_rows and embed != "ncut":
            norms = np.linalg.norm(points, axis=1, keepdims=True)
            points = np.divide(points, norms, out=np.zeros_like(points), where=norms > 0)
        found = kmeans(points, k, seed)
        labels[inner] = number_channels(found, [ids[int(i)] for i in inner])
    return join_isolated(hits, labels, ids, k)


def _ncut_embedding(w: FloatMatrix, k: int, sigma: float | None) -> FloatMatrix:
    a = np.where(w > 0, np.exp(-(1.0 - w) / sigma**2), 0.0) if sigma is not None else w
    d = a.sum(axis=1)
    scale = 1.0 / np.sqrt(d)
    normal = scale[:, None] * a * scale[None, :]
    _, vectors = np.linalg.eigh((normal + normal.T) / 2)
    top = min(k, len(w))
    u = vectors[:, ::-1][:, :top]  # eigh sorts ascending: the K largest eigenvalues
    norms = np.linalg.norm(u, axis=1)
    return np.asarray(np.divide(u, norms[:, None], out=np.zeros_like(u), where=norms[:, None] > 0))


def _rassoc_embedding(w: FloatMatrix, k: int) -> FloatMatrix:
    centred = w - w.mean(axis=1, keepdims=True)  # subtract the mean column from every column
    _, singular, vt = np.linalg.svd(centred)
    tol = singular.max(initial=0.0) * max(centred.shape) * np.finfo(float).eps
    keep = np.flatnonzero(singular > tol)[:k]
    if len(keep) == 0:
        return np.zeros((len(w), 1))
    return np.asarray((singular[keep, None] * vt[keep]).T)


def spectral_ncut(
    hits: BoolMatrix, similarity: FloatMatrix, k: int, ids: Sequence[str], seed: int, sigma: float | None = None
) -> Labels:
    """Tariq Alg. 5 with Eq. 3.2: top-K eigenvectors of D^−1/2 A D^−1/2, rows scaled to unit length,
    k-means; isolated subscriptions by the join rule. With ``sigma``, A = exp(−(1 − J)/σ²) where J > 0."""
    return number_channels(_clustered_then_joined(hits, similarity, k, ids, "ncut", seed, sigma), ids)


def _ncut_embedding_weighted(m: sparse.csr_matrix, count: Labels, k: int, seed: int, tol: float = 0.0) -> FloatMatrix:
    """The ``spectral-ncut`` embedding of a graph whose node g stands for ``count[g]`` subscriptions with
    one window: M(g, h) = A between members of g and h (M(g, g) = 1, the weight between equal
    windows). The full A = P M P^T − I (P: subscription to node) maps vectors constant on each node
    to such vectors, and the others to multiples of themselves with eigenvalue −1/d, so the top-K
    eigenvectors of D^−1/2 A D^−1/2 are u = P C^−1/2 y for the top-K eigenvectors y of
    B = D^−1/2 (C^1/2 M C^1/2 − I) D^−1/2, C = diag(count), d = M count − 1. A member's row of u is
    y_g / sqrt(count_g): after the row scaling, y_g / |y_g|.

    B is M's entries scaled in place (every node has its diagonal entry, M(g, g) = 1); ``tol`` is
    ``eigsh``'s relative accuracy of the eigenvalues (0: machine precision)."""
    c = count.astype(np.float64)
    d = m @ c - 1.0
    scale = np.sqrt(c / d)
    b = m.copy()
    row_of = np.repeat(np.arange(len(c)), np.diff(b.indptr))
    b.data = b.data * scale[row_of] * scale[b.indices]  # the products diag @ M @ diag forms, in its order
    diagonal = b.indices == row_of
    b.data[diagonal] -= 1.0 / d[row_of[diagonal]]
    g = len(c)
    top = min(k, g)
    if g <= max(DENSE_EIGEN_LIMIT, top + 1):
        dense = b.toarray()
        _, vectors = np.linalg.eigh((dense + dense.T) / 2)
        y = vectors[:, ::-1][:, :top]
    else:
        # single precision: the rows are scaled and clustered, and each product costs half as much
        start = np.random.default_rng(seed % 2**64).uniform(0.5, 1.5, size=g).astype(np.float32)
        values, vectors = sparse_linalg.eigsh(
            b.astype(np.float32), k=top, which="LA", v0=start, ncv=min(g - 1, 3 * top + 1), tol=tol
        )
        y = vectors[:, np.argsort(-values, kind="stable")].astype(np.float64)
    norms = np.linalg.norm(y, axis=1)
    return np.asarray(np.divide(y, norms[:, None], out=np.zeros_like(y), where=norms[:, None] > 0))


def spectral_ncut_sparse(
    hits: BoolMatrix,
    psi: int,
    k: int,
    ids: Sequence[str],
    seed: int,
    sigma: float | None = None,
    restarts: int = RESTARTS,
    tol: float = 0.0,
) -> Labels:
    """``spectral-ncut`` without the N x N similarity: the same steps on one node per distinct window.

    Subscriptions with equal windows R(s) have equal rows of J (and J = 1 between them), so the
    graph is built on the distinct non-empty windows with their multiplicities (a sparse Jaccard from
    the intersections R R^T), the top-K eigenvectors of its normalised weights come from
    :func:`scipy.sparse.linalg.eigsh` (:func:`numpy.linalg.eigh` up to :data:`DENSE_EIGEN_LIMIT`
    nodes), and k-means weighs each node by its multiplicity (:func:`kmeans_weighted`). Isolated
    subscriptions (an empty window, or a window no other subscription shares an event with) follow
    the join rule. The plan can differ from :func:`spectral_ncut`'s (other eigensolver, other
    k-means draws); it is a plan of the same method.

    ``restarts`` (k-means) and ``tol`` (``eigsh``) default to the contract's 10 restarts and a
    converged eigensolver, what ``siftstream plan channels`` runs; the channels job passes fewer
    restarts and a looser tolerance (``routing.channels.planner.recluster``).
    """
    n = len(hits)
    match_sets, by_match_set = _distinct_rows(hits)  # equal match sets have equal windows
    rows, by_window, _ = distinct_windows(recent_windows(match_sets, psi))
    which = by_window[by_match_set]
    count = np.bincount(which, minlength=len(rows)).astype(np.int64)
    size = np.asarray(rows.sum(axis=1), dtype=np.float64)
    nonempty = np.flatnonzero(size > 0)  # the empty window is isolated: left out of the graph
    r = csr_of(rows[nonempty], np.float64)
    a = sparse.csr_matrix(r @ r.T)  # |R_g ∩ R_h|, the diagonal |R_g|
    # sorted column indices from one counting pass: the CSC arrays of a symmetric matrix are its
    # CSR arrays, each row's columns in order (the counts are integers, equal both ways)
    t = a.tocsc()
    a = sparse.csr_matrix((t.data, t.indices, t.indptr), shape=a.shape)
    kept = size[nonempty]
    row_of = np.repeat(np.arange(len(nonempty)), np.diff(a.indptr))
    a.data = a.data / (kept[row_of] + kept[a.indices] - a.data)  # J, and 1 on the diagonal
    if sigma is not None:
        a.data = np.exp(-(1.0 - a.data) / sigma**2)
    edges = np.diff(a.indptr) - 1  # off-diagonal entries per node
    local = np.flatnonzero((count[nonempty] > 1) | (edges > 0))
    inner = nonempty[local]
    labels = np.full(n, -1, dtype=np.int64)
    if len(inner):
        node = np.full(len(rows), -1, dtype=np.int64)
        node[inner] = np.arange(len(inner))
        graph = a if len(local) == len(nonempty) else sparse.csr_matrix(a[local][:, local])
        points = _ncut_embedding_weighted(graph, count[inner], k, seed, tol)
        found = kmeans_weighted(points, count[inner], k, seed, restarts)
        members = np.flatnonzero(node[which] >= 0)
        labels[members] = number_channels(found[node[which[members]]], [ids[int(i)] for i in members])
    return number_channels(join_isolated(hits, labels, ids, k), ids)


def spectral_rassoc(
    hits: BoolMatrix, similarity: FloatMatrix, k: int, ids: Sequence[str], seed: int, unit_rows: bool = False
) -> Labels:
    """Tariq Alg. 5 with Eq. 3.1: Y = Λ_K V_K^T of the column-centred J, k-means on Y's columns;
    isolated subscriptions by the join rule.

    ``unit_rows=True`` is not the contract's ``spectral-rassoc`` (docs/reference/channels.md §4 fixes
    the coordinates Y): it scales each subscription's column of Y to unit length before k-means, as
    ``spectral-ncut`` does, for the benchmark's measurement of what that step is worth. A column's
    length follows the subscription's degree (sum of its J row), so without the scaling the
    low-degree subscriptions gather near the origin and k-means gives them one wide channel
    (docs/results/channels.md)."""
    return number_channels(
        _clustered_then_joined(hits, similarity, k, ids, "rassoc", seed, None, unit_rows=unit_rows), ids
    )


def kmeans_on_rows(similarity: FloatMatrix, k: int, ids: Sequence[str], seed: int) -> Labels:
    """The ablation ``kmeans``: k-means on the rows of J, no embedding, no join rule."""
    return number_channels(kmeans(similarity, k, seed), ids)


def _allowed(filt: Filter, domains: Mapping[str, Domain]) -> list[set[int]]:
    """Per declared attribute (name order), the positions of the values all of ``filt``'s predicates accept."""
    out = []
    for name in sorted(domains):
        dom = domains[name]
        preds = [p for p in filt.predicates if p.attribute == name]
        out.append(
            {pos for v, pos in zip(dom.values, dom.positions, strict=True) if all(p.matches(True, v) for p in preds)}
        )
    return out


def ck_coordinates(filters: Sequence[Filter], domains: Mapping[str, Domain]) -> FloatMatrix:
    """CK's point per subscription: per declared attribute, (mean allowed position − first) / (last − first),
    0.5 when nothing is allowed or the domain has one value.

    >>> from routing.matching.language import parse_filter
    >>> ck_coordinates([parse_filter("x < 2")], {"x": Domain((0, 1, 2, 3, 4), (0, 1, 2, 3, 4))}).tolist()
    [[0.125]]
    """
    names = sorted(domains)
    rows = []
    for filt in filters:
        row = []
        for name, allowed in zip(names, _allowed(filt, domains), strict=True):
            first, last = domains[name].positions[0], domains[name].positions[-1]
            row.append(0.5 if not allowed or last == first else (sum(allowed) / len(allowed) - first) / (last - first))
        rows.append(row)
    return np.array(rows, dtype=np.float64).reshape(len(filters), len(names))


def ck(filters: Sequence[Filter], domains: Mapping[str, Domain], k: int, ids: Sequence[str], seed: int) -> Labels:
    """The structural baseline CK: k-means on the centroids of the subscriptions' regions."""
    return number_channels(kmeans(ck_coordinates(filters, domains), k, seed), ids)


def _allowed_matrices(filters: Sequence[Filter], domains: Mapping[str, Domain]) -> list[npt.NDArray[np.float64]]:
    """Per declared attribute (name order), the N x V 0/1 matrix of the values each filter accepts."""
    out = []
    for name in sorted(domains):
        one = {name: domains[name]}
        index = {pos: i for i, pos in enumerate(domains[name].positions)}
        m = np.zeros((len(filters), len(index)))
        for s, filt in enumerate(filters):
            m[s, [index[p] for p in _allowed(filt, one)[0]]] = 1.0
        out.append(m)
    return out


def overlap(filters: Sequence[Filter], domains: Mapping[str, Domain]) -> FloatMatrix:
    """O(i, j) = vol(A_i ∩ A_j) / vol(A_i ∪ A_j), vol the product of allowed-value counts; O(i, i) = 0.

    Per attribute the intersection counts of every pair are one product of 0/1 matrices, so the
    N x N matrix costs a few BLAS calls instead of N² Python steps; the counts are integers held
    exactly in float64 (below 2^53), so O equals :func:`overlap_by_pairs` (its oracle) bit for bit.

    >>> from routing.matching.language import parse_filter
    >>> doms = {"x": Domain.from_json("x", {"min": 0, "max": 9})}
    >>> overlap([parse_filter("x < 4"), parse_filter("x between 2 and 5")], doms).round(3).tolist()
    [[0.0, 0.333], [0.333, 0.0]]
    """
    n = len(filters)
    inter = np.ones((n, n))
    vol = np.ones(n)
    for m in _allowed_matrices(filters, domains):
        inter *= m @ m.T
        vol *= m.sum(axis=1)
    union = vol[:, None] + vol[None, :] - inter
    out = np.divide(inter, union, out=np.zeros((n, n)), where=union > 0)
    np.fill_diagonal(out, 0.0)
    return out


def overlap_by_pairs(filters: Sequence[Filter], domains: Mapping[str, Domain]) -> FloatMatrix:
    """The oracle of :func:`overlap`: one pair at a time, with Python sets."""
    allowed = [_allowed(f, domains) for f in filters]
    n = len(filters)
    vol = [float(np.prod([len(a) for a in sets])) for sets in allowed]
    out = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            inter = float(np.prod([len(a & b) for a, b in zip(allowed[i], allowed[j], strict=True)]))
            union = vol[i] + vol[j] - inter
            out[i, j] = out[j, i] = inter / union if union > 0 else 0.0
    return out


def ov(
    hits: BoolMatrix,
    filters: Sequence[Filter],
    domains: Mapping[str, Domain],
    k: int,
    ids: Sequence[str],
    seed: int,
    sigma: float | None = None,
) -> Labels:
    """The structural baseline OV: the ``spectral-ncut`` steps on the overlap O instead of J."""
    return spectral_ncut(hits, overlap(filters, domains), k, ids, seed, sigma)


def net_waste_induced(members_a: int, carried_a: set[int], members_b: int, carried_b: set[int]) -> int:
    """NWI(a, b) = |S_a| · |U_b \\ U_a| + |S_b| · |U_a \\ U_b| with sets: the FP that merging a and b adds.

    >>> net_waste_induced(2, {1, 2}, 1, {2, 3})
    3
    """
    return members_a * len(carried_b - carried_a) + members_b * len(carried_a - carried_b)


def _popcount_rows(words: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
    """Set bits per row of a packed bit matrix."""
    return np.asarray(np.bitwise_count(words).sum(axis=1, dtype=np.int64), dtype=np.int64)


def _pack_words(rows: BoolMatrix) -> npt.NDArray[np.uint64]:
    """Rows of bits packed into 64-bit words (zero padded), for AND/OR and popcounts."""
    packed = np.packbits(rows, axis=1)
    pad = (-packed.shape[1]) % 8
    if pad or packed.shape[1] == 0:
        packed = np.pad(packed, ((0, 0), (0, pad if packed.shape[1] else 8)))
    return np.ascontiguousarray(packed).view(np.uint64)


def approx(hits: BoolMatrix, k: int, ids: Sequence[str], window: int = APPROX_WINDOW) -> Labels:
    """Opyrchal's approximation: from the ideal channels, merge the pair of least NWI among the first
    ``window`` channels ordered by (|U_c| ascending, Σ|M(s)| descending, smallest member id), ties to the
    lexicographically first positions, until at most K channels remain.

    The merging runs compiled (:func:`routing.channels.kernels.approx_merges`): the order is kept
    sorted (a merge removes two channels and inserts one), the carried sets are packed bit rows, and
    NWI is kept for the pairs of the window's channels; channels only leave the window by merging, so
    only the channels that enter it get new NWI rows. :func:`approx_by_sorting` is the plain twin
    that sorts every channel and recomputes the window's NWI at every merge (docs/conventions.md §6).
    """
    if window < 2:
        raise ValueError(f"approx needs a window of at least 2 channels, got {window}")
    n = len(hits)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    sets, which = _distinct_rows(hits)
    m = len(sets)
    if m <= k:
        return number_channels(which, ids)
    cap = 2 * m
    words = np.zeros((cap, _pack_words(sets[:1]).shape[1]), dtype=np.uint64)
    words[:m] = _pack_words(sets)
    width = np.zeros(cap, dtype=np.int64)
    width[:m] = sets.sum(axis=1)
    members = np.zeros(cap, dtype=np.int64)
    members[:m] = np.bincount(which, minlength=m)
    matches = np.zeros(cap, dtype=np.int64)
    matches[:m] = np.bincount(which, weights=hits.sum(axis=1), minlength=m).astype(np.int64)
    rank = np.empty(n, dtype=np.int64)
    rank[sorted(range(n), key=ids.__getitem__)] = np.arange(n)
    first = np.full(cap, n, dtype=np.int64)
    np.minimum.at(first, which, rank)  # the smallest member id, as its rank in string order
    order = np.lexsort((np.arange(m), first[:m], -matches[:m], width[:m])).astype(np.int64)
    parent, used = approx_merges(words, width, members, matches, first, order, m, k, window)
    root = parent.copy()
    for c in range(used - 1, -1, -1):  # a merged channel's id exceeds its parts': one pass from the top
        root[c] = root[root[c]]
    return number_channels(root[which], ids)


def approx_by_sorting(hits: BoolMatrix, k: int, ids: Sequence[str], window: int = APPROX_WINDOW) -> Labels:
    """The plain twin of :func:`approx`: sort every channel and recompute the window's NWI at each merge."""
    _, which = _distinct_rows(hits)
    sizes = hits.sum(axis=1)
    channels = []
    for g in range(int(which.max()) + 1):
        members = [int(i) for i in np.flatnonzero(which == g)]
        channels.append((members, hits[members].any(axis=0), int(sizes[members].sum()), min(ids[i] for i in members)))
    while len(channels) > k:
        channels.sort(key=lambda ch: (int(ch[1].sum()), -ch[2], ch[3]))
        top = channels[: min(window, len(channels))]
        u = np.array([ch[1] for ch in top], dtype=np.float64)  # BLAS; counts stay exact below 2^53
        s = np.array([len(ch[0]) for ch in top], dtype=np.int64)
        only = np.rint((1.0 - u) @ u.T).astype(np.int64)  # only[a, b] = |U_b \ U_a|
        nwi = s[:, None] * only + s[None, :] * only.T
        nwi[np.tril_indices(len(top))] = np.iinfo(np.int64).max
        a, b = divmod(int(np.argmin(nwi)), len(top))  # row-major: the lexicographically first (i, j)
        ma, mb = channels[a], channels[b]
        merged = (ma[0] + mb[0], ma[1] | mb[1], ma[2] + mb[2], min(ma[3], mb[3]))
        channels = [ch for pos, ch in enumerate(channels) if pos not in (a, b)] + [merged]
    labels = np.empty(len(hits), dtype=np.int64)
    for c, ch in enumerate(channels):
        labels[ch[0]] = c
    return number_channels(labels, ids)
