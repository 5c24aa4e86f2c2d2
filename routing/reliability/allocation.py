"""Memory allocation for large reliability predictions.

:func:`populated_zeros` allocates the large tables of a prediction (zeroed arrays, up to a few
hundred MB) in anonymous memory mappings that the kernel faults in at once; it changes nothing
outside the array it returns, and the predictor uses it everywhere.

:func:`bulk_allocation` is an opt-in for a process whose job is to predict large systems (the
``siftstream qos predict`` command, the benchmarks): a context manager that changes
process-wide settings while it is entered (the cyclic garbage collector, numpy's huge-page
requests) and restores them on the way out. Library calls (:func:`routing.reliability.prediction.predict`,
``compile_prediction``, ``predict_reliability``) never enter it themselves, because they also
run inside other programs (the QoS job's Spark driver) whose collector and memory settings are
not theirs to change. The settings change no number of a prediction, only its time; why they
pay, with the measurements: docs/decisions/qos-prediction-memory.md.

Examples
--------
>>> import gc
>>> before = gc.isenabled()
>>> with bulk_allocation():
...     gc.isenabled()
False
>>> gc.isenabled() == before
True
>>> populated_zeros((2, 3)).tolist()
[[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
"""

from __future__ import annotations

import contextlib
import gc
import math
import mmap
from collections.abc import Iterator
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["bulk_allocation", "populated_zeros"]


@contextlib.contextmanager
def bulk_allocation() -> Iterator[None]:
    """Pause the cyclic garbage collector and numpy's requests for transparent huge pages while
    entered; both are as they were before on the way out. A process-wide setting: enter it
    around the calls of a program that predicts large systems, never inside a library call.

    The collector: a large system makes ~10^5 result objects next to a system document of
    millions, and every collection would walk them all; the predictor creates no reference
    cycles, so nothing waits for the collector. On the way out, the objects made meanwhile are
    not left in the youngest generation either (its first collection would walk them all once
    more): they are moved to the oldest generation at once (``gc.freeze`` then
    ``gc.unfreeze``, which splice the generations' lists; skipped where the process keeps
    frozen objects of its own).

    Huge pages: numpy asks the kernel for transparent huge pages for every array of 4 MiB or
    more (``madvise``); where free huge pages are scarce (a machine shared with other
    processes), the kernel compacts memory to find them at the first touch. The switch is
    numpy's own (``_set_madvise_hugepage``, looked up defensively: without it, nothing changes).
    """
    enabled = gc.isenabled()
    gc.disable()
    hugepages = getattr(getattr(getattr(np, "_core", None), "multiarray", None), "_set_madvise_hugepage", None)
    was = hugepages(False) if hugepages is not None else None
    try:
        yield
    finally:
        if hugepages is not None:
            hugepages(was)
        if gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()
        if enabled:
            gc.enable()


def populated_zeros(shape: int | tuple[int, ...], dtype: type[Any] = np.float64) -> NDArray[Any]:
    """``np.zeros(shape, dtype)``; from 4 MiB on, in an anonymous memory mapping of its own,
    faulted in by the kernel in one go (``MAP_POPULATE``, where the platform has it) instead of
    one fault per 4 KiB page: the large tables of a prediction are written whole. The mapping
    is not numpy's allocation, so numpy's huge-page requests do not apply to it. The mapping
    goes with the array."""
    n = math.prod(shape) if isinstance(shape, tuple) else shape
    size = n * np.dtype(dtype).itemsize
    if size < 1 << 22:
        return np.zeros(shape, dtype)
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)
    out: NDArray[Any] = np.frombuffer(mmap.mmap(-1, size, flags=flags), dtype=dtype, count=n).reshape(shape)
    return out
