"""Event-load similarity between subscriptions (Tariq §3.2, §3.3.1.1; docs/reference/channels.md §3).

Symbols: ψ (``psi``) the window; R(s) = the last ψ events of M(s) in sample order (all of M(s)
when it has fewer); J(i, j) = |R_i ∩ R_j| / |R_i ∪ R_j| for i ≠ j, 0 when both are empty, and
J(i, i) = 0. The similarity graph joins i and j when J(i, j) > 0; a subscription without an edge
is *isolated*.

:func:`jaccard` builds the dense J with a sparse product (scipy.sparse); :func:`jaccard_sparse`
keeps J sparse (only pairs that share an event); :func:`jaccard_by_sets` is the oracle of both
with Python sets, and :func:`recent_windows_by_rows` that of :func:`recent_windows`
(docs/conventions.md §6). :func:`distinct_windows` collapses equal windows, whose rows of J are
equal. Invariants: J is symmetric, in [0, 1], zero on the diagonal.

Examples
--------
>>> import numpy as np
>>> hits = np.array([[1, 1, 0], [0, 1, 1], [0, 0, 0]], dtype=bool)
>>> jaccard(recent_windows(hits, 20)).round(3).tolist()
[[0.0, 0.333, 0.0], [0.333, 0.0, 0.0], [0.0, 0.0, 0.0]]
>>> isolated(jaccard(recent_windows(hits, 20))).tolist()
[False, False, True]
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy import sparse

__all__ = [
    "csr_of",
    "distinct_windows",
    "first_appearance",
    "isolated",
    "jaccard",
    "jaccard_by_sets",
    "jaccard_sparse",
    "nonzero_of",
    "recent_windows",
    "recent_windows_by_rows",
]

BoolMatrix = npt.NDArray[np.bool_]
FloatMatrix = npt.NDArray[np.float64]


def nonzero_of(hits: BoolMatrix) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``np.nonzero(hits)`` of a 2-D bool matrix (rows, then columns, in row-major order), from the
    8-byte words that hold a True: a match matrix is mostly False, and numpy's scan of every element
    costs many times the scan of its words (docs/decisions/channels-recluster-at-scale.md). A matrix
    whose size is not a multiple of 8 takes ``np.nonzero``.

    >>> [v.tolist() for v in nonzero_of(np.array([[0, 1, 0], [1, 0, 1]], dtype=bool))]
    [[0, 1, 1], [1, 0, 2]]
    """
    flat = np.ascontiguousarray(hits, dtype=bool).reshape(-1)
    width = hits.shape[1] if hits.ndim == 2 else 0
    if width == 0 or len(flat) % 8:
        rows, cols = np.nonzero(hits)
        return rows.astype(np.int64), cols.astype(np.int64)
    words = np.flatnonzero(flat.view(np.uint64))
    inside, byte = np.nonzero(flat.reshape(-1, 8)[words])
    position = words[inside] * 8 + byte
    return position // width, position % width


def csr_of(hits: BoolMatrix, dtype: type = np.float32) -> sparse.csr_matrix:
    """``hits`` as a CSR matrix of ``dtype`` (1 per True), from :func:`nonzero_of`, without the dense
    copy in ``dtype`` that ``scipy.sparse.csr_matrix(hits, dtype=...)`` makes; sorted indices.

    >>> csr_of(np.array([[0, 1], [1, 1]], dtype=bool)).toarray().tolist()
    [[0.0, 1.0], [1.0, 1.0]]
    """
    rows, cols = nonzero_of(hits)
    indptr = np.zeros(len(hits) + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=len(hits)), out=indptr[1:])
    return sparse.csr_matrix((np.ones(len(cols), dtype=dtype), cols, indptr), shape=hits.shape)


def recent_windows(hits: BoolMatrix, psi: int) -> BoolMatrix:
    """R(s) per row: keep only the last ``psi`` True entries of each row of ``hits``.

    Works on the True entries only (row-major, so each row's are in sample order): an entry is kept
    when fewer than ``psi`` of its row's entries follow it. :func:`recent_windows_by_rows` is the
    plain twin.

    >>> recent_windows(np.array([[1, 1, 1]], dtype=bool), 2).tolist()
    [[False, True, True]]
    """
    rows, cols = nonzero_of(hits)
    ends = np.cumsum(np.bincount(rows, minlength=len(hits)))
    after = ends[rows] - 1 - np.arange(len(rows))  # entries of the same row after this one
    keep = after < psi
    out = np.zeros(hits.shape, dtype=bool)
    out[rows[keep], cols[keep]] = True
    return out


def recent_windows_by_rows(hits: BoolMatrix, psi: int) -> BoolMatrix:
    """The oracle of :func:`recent_windows`: each row's last ``psi`` matches, one row at a time."""
    out = np.zeros(hits.shape, dtype=bool)
    for i, row in enumerate(hits):
        matched = np.flatnonzero(row)
        out[i, matched[max(0, len(matched) - psi) :]] = True
    return out


def distinct_windows(windows: BoolMatrix) -> tuple[BoolMatrix, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The distinct rows of ``windows`` (first-appearance order), each row's index among them, and how
    many rows each distinct one stands for.

    >>> rows, which, count = distinct_windows(np.array([[1, 0], [0, 1], [1, 0]], dtype=bool))
    >>> rows.astype(int).tolist(), which.tolist(), count.tolist()
    ([[1, 0], [0, 1]], [0, 1, 0], [2, 1])
    """
    which = first_appearance(windows)
    firsts = np.unique(which, return_index=True)[1]
    return windows[firsts], which, np.bincount(which, minlength=len(firsts)).astype(np.int64)


def first_appearance(rows: BoolMatrix) -> npt.NDArray[np.int64]:
    """Each row's index among the distinct rows of ``rows``, numbered in order of first appearance.

    The rows are packed to bytes and sorted as opaque keys (``np.unique``, whose stable sort
    keeps each key's first row), so no Python step runs per row.

    >>> first_appearance(np.array([[0, 1], [1, 0], [0, 1], [0, 0]], dtype=bool)).tolist()
    [0, 1, 0, 2]
    """
    if len(rows) == 0:
        return np.zeros(0, dtype=np.int64)
    packed = np.ascontiguousarray(np.packbits(rows, axis=1))
    if packed.shape[1] == 0:  # no columns: every row is the empty one
        return np.zeros(len(rows), dtype=np.int64)
    keys = packed.view(np.dtype((np.void, packed.shape[1]))).reshape(-1)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[np.asarray(inverse).reshape(-1)]


def jaccard_sparse(windows: BoolMatrix) -> sparse.csr_matrix:
    """J as a sparse matrix (only the pairs that share an event are stored), zero diagonal.

    >>> jaccard_sparse(np.array([[1, 1, 0], [0, 1, 1], [0, 0, 0]], dtype=bool)).toarray().round(3).tolist()
    [[0.0, 0.333, 0.0], [0.333, 0.0, 0.0], [0.0, 0.0, 0.0]]
    """
    r = sparse.csr_matrix(windows, dtype=np.float64)
    inter = sparse.triu(r @ r.T, k=1, format="coo")  # counts, exact in float64
    sizes = np.asarray(windows.sum(axis=1), dtype=np.float64)
    data = inter.data / (sizes[inter.row] + sizes[inter.col] - inter.data)
    n = len(windows)
    upper = sparse.coo_matrix((data, (inter.row, inter.col)), shape=(n, n))
    return sparse.csr_matrix(upper + upper.T)


def jaccard(windows: BoolMatrix) -> FloatMatrix:
    """J from the windows R(s) (rows), via the sparse Gram matrix of intersections."""
    r = sparse.csr_matrix(windows.astype(np.int64))
    inter = np.asarray((r @ r.T).todense(), dtype=np.float64)
    sizes = windows.sum(axis=1).astype(np.float64)
    union = sizes[:, None] + sizes[None, :] - inter
    out = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
    np.fill_diagonal(out, 0.0)
    return np.asarray(out, dtype=np.float64)


def jaccard_by_sets(windows: BoolMatrix) -> FloatMatrix:
    """The oracle of :func:`jaccard`: the definition with Python sets."""
    sets = [set(np.flatnonzero(row).tolist()) for row in windows]
    n = len(sets)
    out = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            union = sets[i] | sets[j]
            if i != j and union:
                out[i, j] = len(sets[i] & sets[j]) / len(union)
    return out


def isolated(weights: FloatMatrix) -> npt.NDArray[np.bool_]:
    """Which subscriptions have no edge (no positive weight to another)."""
    off = weights.copy()
    np.fill_diagonal(off, 0.0)
    return np.asarray(~(off > 0).any(axis=1), dtype=bool)
