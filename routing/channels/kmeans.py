"""k-means with the exact rules of docs/reference/channels.md §4.1 (Tariq §3.3.1.3).

Rules: k-means++ seeding drawn from ``seed`` (Arthur and Vassilvitskii: the first centre uniform,
each next one with probability proportional to D(x)², the squared distance to the nearest chosen
centre); Lloyd iterations until no assignment changes, at most 100; the best of 10 restarts by
within-cluster sum of squares (the first restart on a tie); a point's nearest centre on a tie is
the lowest-numbered one; a cluster left empty takes the point farthest from its centre; with no
more points than K, each point is its own cluster.

Written here in numpy rather than taken from a library because every one of these rules is part
of the contract (scikit-learn's seeding draws several candidates per step and its empty-cluster
and tie handling differ; scipy's ``kmeans2`` restarts nothing).

Symbols: X (n x d) the points, K the clusters, SS = Σ_i ||x_i − c_{label(i)}||².

:func:`kmeans_weighted` applies the same rules to distinct points that stand for several equal
ones (a point of weight w counts as w copies: in the seeding draws, the means and SS), with
distances from one matrix product; with every weight 1 it draws what :func:`kmeans` draws, and
:func:`kmeans` is its oracle (docs/conventions.md §6). Where a cluster is left empty it takes the
farthest distinct point, copies and all.

Examples
--------
>>> import numpy as np
>>> x = np.array([[0.0], [0.1], [5.0], [5.1]])
>>> kmeans(x, 2, seed=0).tolist() in ([0, 0, 1, 1], [1, 1, 0, 0])
True
>>> kmeans(x[:2], 3, seed=0).tolist()
[0, 1]
>>> kmeans_weighted(x, np.array([1, 3, 1, 1]), 2, seed=0).tolist() in ([0, 0, 1, 1], [1, 1, 0, 0])
True
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy import sparse

__all__ = ["BROADCAST_MAX", "MAX_ITERATIONS", "RESTARTS", "kmeans", "kmeans_weighted", "nearest", "within_ss"]

MAX_ITERATIONS = 100
RESTARTS = 10
"""Restarts of the contract (§4.1); :func:`kmeans_weighted` takes fewer when its caller says so."""

Points = npt.NDArray[np.float64]
Labels = npt.NDArray[np.int64]


BROADCAST_MAX = 1 << 20
"""Above this many n x K x d elements :func:`nearest` finds the nearest centres by one matrix
product and settles only the unsure points by the direct differences."""


def _sq_dist(x: Points, centres: Points) -> Points:
    return np.asarray(((x[:, None, :] - centres[None, :, :]) ** 2).sum(axis=2), dtype=np.float64)


def _nearest_direct(x: Points, centres: Points) -> Labels:
    """argmin over the centres of Σ_j (x_j − c_j)², computed element by element in row chunks."""
    rows = max(1, BROADCAST_MAX // max(1, centres.size))
    out = np.empty(len(x), dtype=np.int64)
    for start in range(0, len(x), rows):
        out[start : start + rows] = np.argmin(_sq_dist(x[start : start + rows], centres), axis=1)
    return out


def nearest(x: Points, centres: Points, broadcast_max: int = BROADCAST_MAX) -> Labels:
    """Each point's nearest centre (the lowest-numbered on a tie), the labels of the direct
    differences Σ_j (x_j − c_j)² exactly, at the cost of one matrix product.

    The product form ||x||² − 2 x·c + ||c||² differs from the direct sum by at most
    δ = 16 (d + 4) ε (||x||² + max ||c||²) per entry (ε the float64 unit roundoff; a generous
    bound on the rounding of either sum). Where its best centre leads its second by more than δ
    the direct sums order them alike; the other points (ties, near ties) are decided by the
    direct sums. So the result equals ``argmin`` of the direct sums, bit for bit: the contract's
    tie rule holds, and :func:`kmeans` stays the oracle of :func:`kmeans_weighted`.

    >>> x = np.array([[0.0, 0.0], [1.0, 1.0], [0.5, 0.5]])
    >>> nearest(x, np.array([[0.0, 0.0], [1.0, 1.0]]), broadcast_max=0).tolist()  # [0.5, 0.5]: a tie, centre 0
    [0, 1, 0]
    """
    n, d = x.shape
    k = len(centres)
    if n * k * d <= broadcast_max or k < 2:
        return _nearest_direct(x, centres)
    x_sq = np.einsum("ij,ij->i", x, x)
    c_sq = np.einsum("ij,ij->i", centres, centres)
    scores = x @ centres.T
    scores *= -2.0
    scores += c_sq[None, :]
    scores += x_sq[:, None]
    labels = np.asarray(np.argmin(scores, axis=1), dtype=np.int64)
    two = np.partition(scores, 1, axis=1)
    slack = 16.0 * (d + 4) * np.finfo(np.float64).eps * (x_sq + float(c_sq.max()))
    unsure = np.flatnonzero(two[:, 1] - two[:, 0] <= slack)
    if unsure.size:
        labels[unsure] = _nearest_direct(x[unsure], centres)
    return labels


def within_ss(x: Points, labels: Labels, k: int) -> float:
    """SS of a labelling: squared distances of the points to their cluster's mean."""
    total = 0.0
    for c in range(k):
        members = x[labels == c]
        if len(members):
            total += float(((members - members.mean(axis=0)) ** 2).sum())
    return total


def _seed_centres(x: Points, k: int, rng: np.random.Generator) -> Points:
    n = len(x)
    chosen = [int(rng.integers(n))]
    nearest = ((x - x[chosen[0]]) ** 2).sum(axis=1)
    for _ in range(1, k):
        total = float(nearest.sum())
        if total > 0:
            pick = int(rng.choice(n, p=nearest / total))
        else:  # every point sits on a chosen centre: draw uniformly
            pick = int(rng.integers(n))
        chosen.append(pick)
        nearest = np.minimum(nearest, ((x - x[pick]) ** 2).sum(axis=1))
    return x[chosen].copy()


def _refill_empty(x: Points, labels: Labels, centres: Points) -> None:
    """Give each empty cluster, lowest first, the point farthest from its centre among those whose
    cluster has another point (in place; filling one never empties another)."""
    k = len(centres)
    for c in np.flatnonzero(np.bincount(labels, minlength=k) == 0).tolist():
        dist = ((x - centres[labels]) ** 2).sum(axis=1)
        counts = np.bincount(labels, minlength=k)
        dist[counts[labels] <= 1] = -1.0  # never empty another cluster
        far = int(np.argmax(dist))
        labels[far] = c
        centres[c] = x[far]


def _lloyd(x: Points, centres: Points) -> Labels:
    k = len(centres)
    labels = nearest(x, centres)  # argmin: lowest index on a tie
    for _ in range(MAX_ITERATIONS):
        centres = np.array([x[labels == c].mean(axis=0) if (labels == c).any() else centres[c] for c in range(k)])
        _refill_empty(x, labels, centres)
        new = nearest(x, centres)
        if np.array_equal(new, labels):
            break
        labels = new
    return np.asarray(labels, dtype=np.int64)


def kmeans(x: Points, k: int, seed: int) -> Labels:
    """Cluster labels (0..K−1) of the rows of ``x`` under the rules above."""
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    if n <= k:
        return np.arange(n, dtype=np.int64)
    rng = np.random.default_rng(seed % 2**64)  # any integer seed, negative ones too
    best: Labels | None = None
    best_ss = np.inf
    for _ in range(RESTARTS):
        labels = _lloyd(x, _seed_centres(x, k, rng))
        ss = within_ss(x, labels, k)
        if best is None or ss < best_ss:  # the first restart wins a tie
            best, best_ss = labels, ss
    assert best is not None
    return np.asarray(best, dtype=np.int64)


Weights = npt.NDArray[np.int64]


def _nearest_gram(x: Points, centres: Points) -> Labels:
    """Each point's nearest centre (the lowest-numbered on a tie) by ||c||² − 2 x·c, one matrix product."""
    scores = x @ centres.T
    scores *= -2.0  # in place: ||c||² + (−2 x·c) is ||c||² − 2 x·c bit for bit (scaling by 2 is exact)
    scores += (centres * centres).sum(axis=1)[None, :]
    return np.asarray(np.argmin(scores, axis=1), dtype=np.int64)


def _weighted_means(wx: Points, mass_of: Points, labels: Labels, centres: Points) -> Points:
    """Per cluster Σ w x / Σ w (``wx`` = w x per point); a cluster without points keeps its centre.

    The sums are one product with the K x n membership matrix in column form, which adds each
    cluster's rows in point order, as ``np.bincount`` over the flattened rows does (the same floats,
    bit for bit; a test compares them), in about a third of its time."""
    k = len(centres)
    n = len(labels)
    member = sparse.csc_matrix((np.ones(n), labels, np.arange(n + 1)), shape=(k, n))
    sums = np.asarray(member @ wx)
    mass = np.bincount(labels, weights=mass_of, minlength=k)
    return np.where(mass[:, None] > 0, sums / np.where(mass > 0, mass, 1.0)[:, None], centres)


def _seed_weighted(x: Points, w: Weights, k: int, rng: np.random.Generator) -> Points:
    n = len(x)
    ends = np.cumsum(w)
    chosen = [int(np.searchsorted(ends, rng.integers(int(ends[-1])), side="right"))]  # a copy, uniformly
    nearest = ((x - x[chosen[0]]) ** 2).sum(axis=1)
    for _ in range(1, k):
        mass = w * nearest
        total = float(mass.sum())
        pick = int(rng.choice(n, p=mass / total)) if total > 0 else int(rng.integers(n))
        chosen.append(pick)
        nearest = np.minimum(nearest, ((x - x[pick]) ** 2).sum(axis=1))
    return x[chosen].copy()


def _lloyd_weighted(x: Points, wx: Points, w: Weights, centres: Points) -> Labels:
    wf = w.astype(np.float64)
    labels = _nearest_gram(x, centres)
    for _ in range(MAX_ITERATIONS):
        centres = _weighted_means(wx, wf, labels, centres)
        _refill_empty(x, labels, centres)
        new = _nearest_gram(x, centres)
        if np.array_equal(new, labels):
            break
        labels = new
    return np.asarray(labels, dtype=np.int64)


def kmeans_weighted(x: Points, weights: Weights, k: int, seed: int, restarts: int = RESTARTS) -> Labels:
    """Cluster labels (0..K−1) of the rows of ``x``, row i standing for ``weights[i]`` >= 1 equal points.

    ``restarts`` (default the contract's :data:`RESTARTS`): the restarts drawn one after another
    from one generator, so a run with r restarts returns the best of the first r of a run with
    more (the first on a tie); ``routing.channels.planner.recluster`` takes fewer at the channels
    job's sizes."""
    if restarts < 1:
        raise ValueError(f"restarts must be >= 1, got {restarts}")
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(weights, dtype=np.int64)
    n = len(x)
    if n <= k:
        return np.arange(n, dtype=np.int64)
    rng = np.random.default_rng(seed % 2**64)
    wf = w.astype(np.float64)
    wx = wf[:, None] * x
    best: Labels | None = None
    best_ss = np.inf
    for _ in range(restarts):
        labels = _lloyd_weighted(x, wx, w, _seed_weighted(x, w, k, rng))
        centres = _weighted_means(wx, wf, labels, np.zeros((k, x.shape[1])))
        ss = float((wf * ((x - centres[labels]) ** 2).sum(axis=1)).sum())
        if best is None or ss < best_ss:  # the first restart wins a tie
            best, best_ss = labels, ss
    assert best is not None
    return np.asarray(best, dtype=np.int64)
