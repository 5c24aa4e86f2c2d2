"""Array helpers shared by the driver-side monitors (``routing.monitors``).

:func:`distinct_sorted` is ``np.unique`` of a one-dimensional array without its other outputs,
computed by one sort and a comparison of neighbours: numpy 2's ``np.unique`` takes a hash-based
path for that call, which is far slower on the hundreds of thousands of (event, subscriber) or
(event, filter) pair codes a batch makes (docs/results/soak.md, 2026-11-28 section).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["distinct_sorted"]


def distinct_sorted(values: NDArray[Any]) -> NDArray[Any]:
    """The distinct values of ``values`` (any shape; flattened), ascending: ``np.unique(values)``.

    >>> distinct_sorted(np.array([5, 1, 5, 3, 1])).tolist()
    [1, 3, 5]
    >>> distinct_sorted(np.zeros(0, dtype=np.int64)).tolist()
    []
    """
    out = np.sort(np.asarray(values).reshape(-1))
    if len(out) < 2:
        return out
    keep = np.empty(len(out), dtype=bool)
    keep[0] = True
    np.not_equal(out[1:], out[:-1], out=keep[1:])
    return out[keep]
