"""Python's cyclic garbage collector held off during bulk work on subscriptions.

Loading subscriptions allocates many small container objects (a parsed filter's predicates,
their compiled tests, tuples) that stay alive. Every few hundred allocations CPython's cyclic
collector runs (``gc.get_threshold()``), and its full passes walk every tracked object of the
process: the index's state and everything the imported modules hold (numpy, numba). During a
bulk parse those passes cost several times the parse itself (docs/decisions/collector-paused.md).

``collector_paused`` disables the collector for a block of such work and restores it after;
the garbage of the block is found by the next collection as usual, since reference counting
frees everything acyclic at once. With ``freeze=True`` it also calls ``gc.freeze()`` at the end,
which moves every object alive then into a permanent generation that later collections do not
walk: right after a cold-start load, so that the loaded state (and the imported modules)
leave the collector's scans for good.

Invariants
----------
- Nesting is safe: an inner block leaves the collector as the outer one set it, and a block
  entered with the collector already disabled (by the caller) leaves it disabled.
- The state is per process (``gc`` is global): a block running in one thread pauses the
  collector for every thread of the process until it ends.

Examples
--------
>>> import gc
>>> with collector_paused():
...     gc.isenabled()
False
>>> gc.isenabled()
True
>>> with collector_paused(), collector_paused():
...     pass
>>> gc.isenabled()
True
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]


@contextmanager
def collector_paused(freeze: bool = False) -> Iterator[None]:
    """Disable Python's cyclic garbage collector for the block (see the module docstring).

    Parameters
    ----------
    freeze : bool
        Call ``gc.freeze()`` when the block ends (also when it raises): every object alive then
        is left out of later collections (``gc.unfreeze()`` undoes it). For the end of a bulk
        load whose state lives long.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if was_enabled:
            gc.enable()
