"""Compiled inner loop of ``routing.channels.methods.approx`` (numba, no Python objects inside).

:func:`approx_merges` runs Opyrchal's merging (docs/reference/channels.md §4, ``approx``) on channels
given as packed bit rows: it is the loop that :func:`routing.channels.methods.approx` ran in Python
with numpy calls on a 100 x 100 matrix per merge, where the per-merge work is a few hundred machine
operations and the calls cost most of the time. The Python loop's twin is
:func:`routing.channels.methods.approx_by_sorting` (docs/conventions.md §6).

Symbols: channel c (0 .. cap − 1; the first m are the ideal channels, each merge makes the next id)
carries the events whose bits are set in ``words[c]`` (64 per word); ``width[c]`` = |U_c|,
``members[c]`` = |S_c|, ``matches[c]`` = Σ_{s ∈ S_c} |M(s)|, ``first[c]`` the rank of its smallest
member id in plain string order. The order key of c is (width, −matches, first, c), ascending;
``order[:alive]`` holds the live channels in that order. The window is ``order[:size]``: slot
``slot_of[c]`` of a channel in it indexes the kept NWI matrix ``nwi`` (int64 max for an empty slot
and the diagonal). Invariant: the window's channels are exactly those with a slot (a channel leaves
the window only by merging, since a merge removes two channels of the window before inserting one).

Example (through the method):

>>> import numpy as np
>>> from routing.channels.methods import approx
>>> hits = np.array([[1, 0, 0], [1, 1, 0], [0, 0, 1]], dtype=bool)
>>> approx(hits, 2, ["a", "b", "c"]).tolist()
[0, 0, 1]
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

__all__ = ["approx_merges"]

_BIG = np.iinfo(np.int64).max


@njit(cache=True, inline="always")
def _popcount(v: Any) -> Any:
    """Set bits of one uint64 word (the SWAR sum)."""
    v = v - ((v >> np.uint64(1)) & np.uint64(0x5555555555555555))
    v = (v & np.uint64(0x3333333333333333)) + ((v >> np.uint64(2)) & np.uint64(0x3333333333333333))
    v = (v + (v >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((v * np.uint64(0x0101010101010101)) >> np.uint64(56))


@njit(cache=True, inline="always")
def _before(a: Any, b: Any, width: Any, matches: Any, first: Any) -> Any:
    """Whether channel a's key (width, −matches, first, id) is below channel b's."""
    if width[a] != width[b]:
        return width[a] < width[b]
    if matches[a] != matches[b]:
        return matches[a] > matches[b]
    if first[a] != first[b]:
        return first[a] < first[b]
    return a < b


@njit(cache=True)
def approx_merges(
    words: Any, width: Any, members: Any, matches: Any, first: Any, order: Any, m: int, k: int, window: int
) -> Any:
    """Merge the m ideal channels down to at most K; returns ``parent`` (each merged channel's id, a
    channel's own id while it lives) and the number of channel ids used.

    ``words``, ``width``, ``members``, ``matches`` and ``first`` have room for 2m channels (filled
    for the first m; written in place for the merged ones); ``order`` holds the first m sorted by
    key (room for m). Each step: the pair (i, j), i < j, of window positions with the least
    NWI(a, b) = |S_a| |U_b \\ U_a| + |S_b| |U_a \\ U_b|, the lexicographically first on a tie;
    merge a and b into a new channel and insert it in the order."""
    n_words = words.shape[1]
    cap = words.shape[0]
    parent = np.arange(cap)
    size = min(window, m)
    slot_of = np.full(cap, -1, dtype=np.int64)
    slot_ch = np.full(size, -1, dtype=np.int64)
    free = np.arange(size - 1, -1, -1)  # a stack: free[:n_free]
    n_free = size
    nwi = np.full((size, size), _BIG, dtype=np.int64)
    alive = m
    next_cid = m
    while alive > k:
        span = min(size, alive)
        for pos in range(span):  # channels new to the window get a slot and their NWI
            c = order[pos]
            if slot_of[c] >= 0:
                continue
            n_free -= 1
            x = free[n_free]
            slot_of[c] = x
            slot_ch[x] = c
            for y in range(size):
                d = slot_ch[y]
                if d < 0 or y == x:
                    continue
                inter = 0
                for w in range(n_words):
                    inter += _popcount(words[c, w] & words[d, w])
                value = members[c] * (width[d] - inter) + members[d] * (width[c] - inter)
                nwi[x, y] = value
                nwi[y, x] = value
        best = _BIG
        bi = -1
        bj = -1
        for i in range(span):  # positions compare as the keys do: the first (i, j) on a tie
            xi = slot_of[order[i]]
            for j in range(i + 1, span):
                value = nwi[xi, slot_of[order[j]]]
                if value < best:
                    best = value
                    bi = i
                    bj = j
        a = order[bi]
        b = order[bj]
        c = next_cid
        next_cid += 1
        parent[a] = c
        parent[b] = c
        bits = 0
        for w in range(n_words):
            words[c, w] = words[a, w] | words[b, w]
            bits += _popcount(words[c, w])
        width[c] = bits
        members[c] = members[a] + members[b]
        matches[c] = matches[a] + matches[b]
        first[c] = min(first[a], first[b])
        for gone in (a, b):
            x = slot_of[gone]
            slot_of[gone] = -1
            slot_ch[x] = -1
            nwi[x, :] = _BIG
            nwi[:, x] = _BIG
            free[n_free] = x
            n_free += 1
        # drop positions bi < bj, then insert c at its key's place (binary search)
        out = bi
        for pos in range(bi + 1, alive):
            if pos != bj:
                order[out] = order[pos]
                out += 1
        alive -= 1
        lo = 0
        hi = alive - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if _before(order[mid], c, width, matches, first):
                lo = mid + 1
            else:
                hi = mid
        for pos in range(alive - 1, lo, -1):
            order[pos] = order[pos - 1]
        order[lo] = c
    return parent, next_cid
