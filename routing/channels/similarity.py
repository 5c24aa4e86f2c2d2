"""Event-load similarity between subscriptions (Tariq §3.2, §3.3.1.1; docs/reference/channels.md §3).

Symbols: ψ (``psi``) the window; R(s) = the last ψ events of M(s) in sample order (all of M(s)
when it has fewer); J(i, j) = |R_i ∩ R_j| / |R_i ∪ R_j| for i ≠ j, 0 when both are empty, and
J(i, i) = 0. The similarity graph joins i and j when J(i, j) > 0; a subscription without an edge
is *isolated*.

:func:`jaccard` builds J with a sparse product (scipy.sparse); :func:`jaccard_by_sets` is its
oracle with Python sets (docs/conventions.md §6). Invariants: J is symmetric, in [0, 1], zero
on the diagonal.

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

__all__ = ["isolated", "jaccard", "jaccard_by_sets", "recent_windows"]

BoolMatrix = npt.NDArray[np.bool_]
FloatMatrix = npt.NDArray[np.float64]


def recent_windows(hits: BoolMatrix, psi: int) -> BoolMatrix:
    """R(s) per row: keep only the last ``psi`` True entries of each row of ``hits``.

    >>> recent_windows(np.array([[1, 1, 1]], dtype=bool), 2).tolist()
    [[False, True, True]]
    """
    from_end = np.cumsum(hits[:, ::-1], axis=1)[:, ::-1]  # matches at or after each column
    return np.asarray(hits & (from_end <= psi), dtype=bool)


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
