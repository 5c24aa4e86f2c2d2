"""Compiled inner loops of ``routing.matching.index.MatchIndex`` (numba, no Python objects inside).

The layout they work on (all arrays owned by ``MatchIndex``; "fid" is a distinct filter's slot):

- ``rows[r, w]``: bitset rows over fids, 64 per word. Each attribute ``a`` owns some rows, one
  per *bucket* of its values: ``fixed_rows[a, 0..4]`` for missing / no kind (None, NaN) / false /
  true / "another string"; ``str_rows[a, c]`` for the interned literal string of code ``c``;
  ``num_rows[a, j]`` for the numbers, split by the sorted cut points ``num_cuts[a, :k]`` into
  ``2k + 1`` buckets (``2i + 1`` is the point ``cuts[i]``, ``2i`` the open interval below it).
  A fid's bit is set in a row when some value of that bucket may satisfy the fid's predicates on
  ``a`` (always, when the fid says nothing about ``a``).
- ``meta[f]``: flags, predicate range, member range (the ``M_*`` columns). Flags: ``INEXACT``
  when some set bit of ``f`` is not decisive (the candidate must be
  verified against the predicates), ``SLOW`` when a predicate needs Python (string orderings,
  ``startswith``/``endswith``/``contains``, integers beyond 2**53 that doubles cannot hold).
- predicates ``p_code/p_ab[pstart : pstart + pcount]`` (see ``verify``); list literals in ``lit``.
- subscriptions of a fid: ``members[mstart : mstart + mcount]`` (room for ``mcap``); what
  matching reads instead, rebuilt by the flush after changes (``pack_members``): every fid's
  subscriptions packed in fid order, ``m_packed[m_start[f] : m_start[f + 1]]``, and the bitset
  ``exact`` of the fids whose set bits are all decisive.

Each row has a summary, a bit per word (``summary[r, w >> 6]``: does ``rows[r, w]`` hold a bit?),
refreshed by the flush (``flush_fid_bits`` for the words whose fids changed, ``summarize_rows`` for new rows).

Matching (``MatchIndex.match``): ``event_rows`` (each event's bucket rows, sparsest first, and
its path), ``match_listed`` (events whose summaries leave few words: those words alone) and
``match_hits`` (the others, blockwise) give the matching fids as ``(event, fid)`` hits,
``group_hits`` groups them by event (``event_offsets`` when all came from ``match_listed``); the
``Matches`` it returns spells out subscription slots on demand (``slot_offsets``, ``copy_slots``).

A batch of changes (``MatchIndex.apply``) runs ``same_records`` (is the fid found by a filter's
hash really that filter?), ``new_records_size`` and ``store_fids`` (the new fids' predicates),
then ``unlist_members`` and ``list_members`` (the subscriptions of each fid); ``flush_fid_bits``
does the bit work at the next flush (``routing.matching.numeric_form`` reads texts of the numeric
form from their bytes).

Events arrive as three ``(n, n_attr)`` matrices: ``ev_kind`` (``K_*`` codes), ``ev_val`` (the
number, 0/1 for booleans, the interned code for strings, -1 for a string no literal has) and
``ev_delta`` (the sign of ``x - float(x)`` for integers a double cannot hold, else 0).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros as _cttz

__all__ = [
    "K_BOOL",
    "K_NOVALUE",
    "K_NUMBER",
    "K_STRING",
    "LISTED",
    "M_FLAGS",
    "M_MCAP",
    "M_MCOUNT",
    "M_MSTART",
    "M_PCOUNT",
    "M_PSTART",
    "O_BETWEEN",
    "O_EQ",
    "O_GE",
    "O_GT",
    "O_IN",
    "O_LE",
    "O_LT",
    "O_NE",
    "O_NONE",
    "O_NOT_IN",
    "P_BOOL",
    "P_EXISTS",
    "P_NUMBER",
    "P_SLOW_NUMBER",
    "P_SLOW_STRING",
    "P_STRING",
    "SLOW",
    "clear_fid_bits_plain",
    "copy_slots",
    "event_offsets",
    "event_rows",
    "first_positions",
    "flush_fid_bits",
    "group_hits",
    "list_members",
    "match_hits",
    "match_listed",
    "new_records_size",
    "pack_members",
    "ranked_members",
    "row_attributes",
    "same_records",
    "set_fid_bits_plain",
    "slot_offsets",
    "sort_segments",
    "sorted_distinct",
    "store_fids",
    "summarize_rows",
    "unlist_members",
]

# value kinds of an event cell
K_MISSING, K_NOVALUE, K_BOOL, K_NUMBER, K_STRING = 0, 1, 2, 3, 4
# predicate kinds
P_EXISTS, P_BOOL, P_NUMBER, P_STRING, P_SLOW_STRING, P_SLOW_NUMBER = 0, 2, 3, 4, 5, 6
# operators
O_EQ, O_NE, O_LT, O_LE, O_GT, O_GE, O_BETWEEN, O_IN, O_NOT_IN, O_NONE = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9
# fid flags
INEXACT, SLOW = 1, 2
# columns of the per-fid table ``meta``
M_FLAGS, M_PSTART, M_PCOUNT, M_MSTART, M_MCOUNT, M_MCAP = 0, 1, 2, 3, 4, 5
# bucket outcomes
NONE, FULL, PARTIAL = 0, 1, 2
# how an event's rows are ANDed (``event_rows``): whole, word by word after two, or only the listed words
DENSE, SPARSE, LISTED = 0, 1, 2
# an event is LISTED when at most 1 / LISTED_RATIO of the words can hold a match by the summaries
LISTED_RATIO = 4
# events that ``match_hits`` takes against a block of fids at a time (their listed words are buffered)
EVENT_CHUNK = 1024

trailing_zeros: Any = _cttz  # LLVM's count of trailing zeros (numba's intrinsic, untyped for mypy)


@njit(cache=True, inline="always")
def _cmp(v: float, d: int, lit: float) -> int:
    """Sign of ``x - lit`` for the event number ``x`` given as ``(float(x), sign(x - float(x)))``."""
    if v < lit:
        return -1
    if v > lit:
        return 1
    return d


@njit(cache=True, inline="always")
def _holds(op, c, c_hi):  # type: ignore[no-untyped-def]
    """Whether a comparison holds, given ``c = sign(x - a)`` and ``c_hi = sign(x - b)`` (between)."""
    if op == O_EQ:
        return c == 0
    if op == O_NE:
        return c != 0
    if op == O_LT:
        return c < 0
    if op == O_LE:
        return c <= 0
    if op == O_GT:
        return c > 0
    if op == O_GE:
        return c >= 0
    return c >= 0 and c_hi <= 0  # between


@njit(cache=True)
def bucket_rows(ev_kind, ev_val, ev_delta, e, n_attr, fixed_rows, str_rows, num_cuts, num_ncuts, num_rows, out):  # type: ignore[no-untyped-def]
    """The row of every attribute's bucket for event ``e`` (into ``out``)."""
    strc = str_rows.shape[1]
    for a in range(n_attr):
        k = ev_kind[e, a]
        if k == K_NUMBER:
            v = ev_val[e, a]
            nc = num_ncuts[a]
            lo = 0
            hi = nc
            while lo < hi:  # first cut >= v
                mid = (lo + hi) >> 1
                if num_cuts[a, mid] < v:
                    lo = mid + 1
                else:
                    hi = mid
            if lo < nc and num_cuts[a, lo] == v:
                d = ev_delta[e, a]
                if d == 0:
                    out[a] = num_rows[a, 2 * lo + 1]
                elif d > 0:
                    out[a] = num_rows[a, 2 * lo + 2]
                else:
                    out[a] = num_rows[a, 2 * lo]
            else:
                out[a] = num_rows[a, 2 * lo]
        elif k == K_STRING:
            c = np.int64(ev_val[e, a])
            r = -1
            if 0 <= c < strc:
                r = str_rows[a, c]
            out[a] = r if r >= 0 else fixed_rows[a, 4]
        elif k == K_BOOL:
            out[a] = fixed_rows[a, 3] if ev_val[e, a] != 0 else fixed_rows[a, 2]
        elif k == K_NOVALUE:
            out[a] = fixed_rows[a, 1]
        else:
            out[a] = fixed_rows[a, 0]


@njit(cache=True, inline="always")
def _in_list(x, lit, start, count):  # type: ignore[no-untyped-def]
    for i in range(start, start + count):
        if lit[i] == x:
            return True
    return False


@njit(cache=True)
def verify(e, f, ev_kind, ev_val, ev_delta, meta, p_code, p_ab, lit):  # type: ignore[no-untyped-def]
    """Whether event ``e`` satisfies every compiled predicate of fid ``f`` (slow ones: kind only).

    ``p_code[p] = attribute << 8 | kind << 4 | op``; ``p_ab[p] = (a, b)``: the literal (``a``),
    the bounds of ``between`` (``a``, ``b``), or the list ``lit[a : a + b]``.
    """
    for p in range(meta[f, M_PSTART], meta[f, M_PSTART] + meta[f, M_PCOUNT]):
        code = p_code[p]
        a = code >> 8
        pk = (code >> 4) & 15
        op = code & 15
        k = ev_kind[e, a]
        if pk == P_EXISTS:
            if k == K_MISSING:
                return False
        elif pk == P_NUMBER:
            if k != K_NUMBER:
                return False
            v = ev_val[e, a]
            d = ev_delta[e, a]
            if op >= O_IN:
                found = d == 0 and _in_list(v, lit, np.int64(p_ab[p, 0]), np.int64(p_ab[p, 1]))
                if found != (op == O_IN):
                    return False
                continue
            ok = _holds(op, _cmp(v, d, p_ab[p, 0]), _cmp(v, d, p_ab[p, 1]))
            if not ok:
                return False
        elif pk == P_STRING:
            if k != K_STRING:
                return False
            v = ev_val[e, a]
            if op >= O_IN:
                found = _in_list(v, lit, np.int64(p_ab[p, 0]), np.int64(p_ab[p, 1]))
            else:
                found = v == p_ab[p, 0]
            if found != (op == O_EQ or op == O_IN):
                return False
        elif pk == P_BOOL:
            if k != K_BOOL or (ev_val[e, a] == p_ab[p, 0]) != (op == O_EQ):
                return False
        elif pk == P_SLOW_STRING:
            if k != K_STRING:
                return False
        elif k != K_NUMBER:  # P_SLOW_NUMBER
            return False
    return True


@njit(cache=True, inline="always")
def _popcount(x):  # type: ignore[no-untyped-def]
    """Set bits of a 64-bit word (the SWAR count, which LLVM turns into one instruction)."""
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@njit(cache=True)
def summarize_rows(rows, r0, r1, summary):  # type: ignore[no-untyped-def]
    """Recompute ``summary`` of rows ``r0 .. r1 - 1`` whole."""
    for r in range(r0, r1):
        for sw in range(summary.shape[1]):
            summary[r, sw] = 0
        for w in range(rows.shape[1]):
            if rows[r, w] != 0:
                summary[r, w >> 6] |= np.uint64(1) << np.uint64(w & 63)


@njit(cache=True)
def event_rows(
    ev_kind,
    ev_val,
    ev_delta,
    n_attr,
    fixed_rows,
    str_rows,
    num_cuts,
    num_ncuts,
    num_rows,
    rows,
    n_rows,
    n_words,
    summary,
):  # type: ignore[no-untyped-def]
    """Each event's bucket rows (``bucket_rows``), sorted by how many bits they have, fewest first,
    and how ``match_listed``/``match_hits`` should AND them (``path``).

    ``path[e]`` is ``LISTED`` when few words hold a bit in all of the event's rows by their
    ``summary`` (a bit per word: does it hold any?): those words alone are ANDed
    (``match_listed``; Gryphon's equality filters, whose fids cluster in sorted order). Otherwise
    the rows are sampled on up to 64 words: ``SPARSE`` when few sampled words of the AND of the
    two sparsest rows hold a bit (the sparsest rows come first in the AND, so that
    ``match_hits`` can tell early which words are empty), ``DENSE`` for the plain whole-row AND
    (range filters, as W1's).
    """
    n = ev_kind.shape[0]
    pop = np.zeros(max(1, n_rows), dtype=np.int64)
    step = max(1, n_words // 64)
    for r in range(n_rows):
        c = 0
        for j in range(0, n_words, step):
            c += _popcount(rows[r, j])
        pop[r] = c
    row_of = np.empty((n, max(1, n_attr)), dtype=np.int64)
    path = np.full(n, DENSE, dtype=np.int8)
    sw_n = (n_words + 63) // 64
    for e in range(n):
        out = row_of[e]
        bucket_rows(ev_kind, ev_val, ev_delta, e, n_attr, fixed_rows, str_rows, num_cuts, num_ncuts, num_rows, out)
        for i in range(1, n_attr):  # insertion sort by bit count
            r = out[i]
            p = pop[r]
            j = i - 1
            while j >= 0 and pop[out[j]] > p:
                out[j + 1] = out[j]
                j -= 1
            out[j + 1] = r
        if n_attr == 0:
            continue
        c = 0
        for sw in range(sw_n):
            s = summary[out[0], sw]
            for a in range(1, n_attr):
                s &= summary[out[a], sw]
            c += _popcount(s)
        if LISTED_RATIO * c <= n_words:
            path[e] = LISTED
        elif n_attr > 1:
            c = 0
            t = 0
            for j in range(0, n_words, step):
                c += (rows[out[0], j] & rows[out[1], j]) != 0
                t += 1
            if 4 * c <= t:
                path[e] = SPARSE
    return row_of, path


@njit(cache=True, inline="always")
def _emit_all(e, base, x, hit_ev, hit_fid, k):  # type: ignore[no-untyped-def]
    """Event ``e``'s hits ``base + i`` for every set bit ``i`` of ``x`` (room is the caller's
    concern); returns the new hit count."""
    while x != 0:
        hit_ev[k] = e
        hit_fid[k] = base + trailing_zeros(x)
        k += 1
        x &= x - np.uint64(1)
    return k


@njit(cache=True, inline="always")
def _emit(e, base, x, exw, ev_kind, ev_val, ev_delta, meta, p_code, p_ab, lit, hit_ev, hit_fid, slow_pairs, k, ns):  # type: ignore[no-untyped-def]
    """Event ``e``'s hits among the fids ``base + i`` of the set bits ``i`` of word ``x``
    (``exw``: which of them are decisive). Returns ``(k, ns, full)``: the hit and slow-pair
    counts, and 1 when ``hit_fid`` filled up, 2 when ``slow_pairs`` did (the caller then redoes
    the event later). The callers take a word whose bits are all decisive themselves (inline,
    the common case: a call per word would cost more than the AND)."""
    cap = hit_fid.shape[0]
    y = x & exw  # decisive: matches outright
    if k + _popcount(y) > cap:
        return k, ns, 1
    k = _emit_all(e, base, y, hit_ev, hit_fid, k)
    y = x & ~exw
    while y != 0:
        f = base + trailing_zeros(y)
        y &= y - np.uint64(1)
        flags = meta[f, M_FLAGS]
        if flags & INEXACT:
            if not verify(e, f, ev_kind, ev_val, ev_delta, meta, p_code, p_ab, lit):
                continue
        if flags & SLOW:
            if ns >= slow_pairs.shape[0]:
                return k, ns, 2
            slow_pairs[ns, 0] = e
            slow_pairs[ns, 1] = f
            ns += 1
            continue
        if k >= cap:
            return k, ns, 1
        hit_ev[k] = e
        hit_fid[k] = f
        k += 1
    return k, ns, 0


@njit(cache=True)
def _emit_call(e, base, x, exw, ev_kind, ev_val, ev_delta, meta, p_code, p_ab, lit, hit_ev, hit_fid, slow_pairs, k, ns):  # type: ignore[no-untyped-def]
    """``_emit`` as a call: where words needing a check are rare (``match_listed``), its code
    inline slows the common path; in ``match_hits`` (W1's verified ranges) the call costs more
    (docs/decisions/numba-kernels.md)."""
    return _emit(
        e, base, x, exw, ev_kind, ev_val, ev_delta, meta, p_code, p_ab, lit, hit_ev, hit_fid, slow_pairs, k, ns
    )


@njit(cache=True)
def match_listed(
    row_of,
    path,
    n_attr,
    rows,
    n_words,
    summary,
    exact,
    ev_kind,
    ev_val,
    ev_delta,
    meta,
    p_code,
    p_ab,
    lit,
    hit_ev,
    hit_fid,
    slow_pairs,
    resume,
):  # type: ignore[no-untyped-def]
    """The matching fids of the ``LISTED`` events, from the position ``resume = [_, event, hits,
    slow pairs, _]``, event after event (so their hits come out grouped by event, in fid order).

    The words whose bit is set in the ``summary`` of every one of the event's rows are listed
    (they are all that can hold a match), and only they are ANDed, row after row over the list
    (a gather with no branch). Hits and the buffers' ``resume`` as ``match_hits``.
    """
    n = row_of.shape[0]
    resume[4] = 0
    sw_n = (n_words + 63) // 64
    words = np.empty(max(1, n_words), dtype=np.int64)
    acc = np.empty(max(1, n_words), dtype=np.uint64)
    k = resume[2]
    ns = resume[3]
    for e in range(resume[1], n):
        if path[e] != LISTED:
            continue
        rr = row_of[e]
        c = 0
        for sw in range(sw_n):
            s = summary[rr[0], sw]
            for a in range(1, n_attr):
                s &= summary[rr[a], sw]
            while s != 0:
                words[c] = sw * 64 + trailing_zeros(s)
                c += 1
                s &= s - np.uint64(1)
        src = rows[rr[0]]
        for i in range(c):
            acc[i] = src[words[i]]
        for a in range(1, n_attr):
            src = rows[rr[a]]
            for i in range(c):
                acc[i] &= src[words[i]]
        k_event = k
        ns_event = ns
        for i in range(c):
            x = acc[i]
            if x == 0:
                continue
            j = words[i]
            base = j * 64
            exw = exact[j]
            full = 0
            if x & ~exw == 0 and k + 64 <= hit_fid.shape[0]:
                k = _emit_all(e, base, x, hit_ev, hit_fid, k)
            else:
                k, ns, full = _emit_call(
                    e, base, x, exw, ev_kind, ev_val, ev_delta, meta, p_code, p_ab, lit, hit_ev, hit_fid,
                    slow_pairs, k, ns,
                )  # fmt: skip
            if full:
                resume[1] = e
                resume[2] = k_event
                resume[3] = ns_event
                resume[4] = full - 1
                return False
    resume[1] = n
    resume[2] = k
    resume[3] = ns
    return True


@njit(cache=True)
def match_hits(
    row_of,
    path,
    n_attr,
    rows,
    n_words,
    block_words,
    exact,
    ev_kind,
    ev_val,
    ev_delta,
    meta,
    p_code,
    p_ab,
    lit,
    hit_ev,
    hit_fid,
    slow_pairs,
    resume,
):  # type: ignore[no-untyped-def]
    """The matching fids of every event not ``LISTED``, from the position ``resume = [block, event,
    hits, slow pairs, _]``.

    ``row_of[e]``: event ``e``'s bucket rows, sparsest first, and ``path[e]`` (``event_rows``). The
    fids are taken ``block_words`` words (64 fids each) at a time, and within a block the events
    ``EVENT_CHUNK`` at a time, in two passes:

    1. every event of the chunk against the block: the block's slice of the rows stays in cache
       while the events stream by. A ``DENSE`` event gets the AND of its rows whole. For a
       ``SPARSE`` one, the AND of the two sparsest rows says which words can hold a match; when few
       can (filters stored in sorted order cluster, so an equality on a leading attribute empties
       whole stretches of words), each of those words is ANDed with the other rows one by one,
       stopping at the first zero; when many can, the other rows are ANDed whole (a loop LLVM
       vectorizes). Each nonzero word is listed as ``(event, word, bits)``, without a branch.
    2. the listed words by word (a stable counting sort), and word after word every event's bits:
       fids in ``exact`` match outright, the others are verified (``verify``). A word's 64 fids and
       their predicates stay in cache while the events that need them are checked, where event
       after event would fetch the predicates of fids all over the block.

    Hits come out as ``(hit_ev, hit_fid)`` pairs, in fid order within an event (block by block,
    word by word, bit by bit); a slow pair ``(event, fid)`` still needs Python's
    check. Returns True when done; False when a buffer filled up, with ``resume`` set to the start
    of the chunk that did not fit (and ``resume[4]`` to 1 when it was ``slow_pairs``): the hit
    buffer must hold every candidate bit of a chunk.
    """
    n = row_of.shape[0]
    resume[4] = 0
    if n_attr == 0 or n_words == 0:
        return True
    acc = np.empty(block_words, dtype=np.uint64)
    nz = np.empty(block_words, dtype=np.int64)
    size = min(n, EVENT_CHUNK) * block_words
    t_e = np.empty(size, dtype=np.int32)  # the listed words: event, word in the block, bits
    t_j = np.empty(size, dtype=np.int32)
    t_x = np.empty(size, dtype=np.uint64)
    s_e = np.empty(size, dtype=np.int32)  # the same by word
    s_x = np.empty(size, dtype=np.uint64)
    start = np.empty(block_words + 1, dtype=np.int64)
    cap = hit_fid.shape[0]
    k = resume[2]
    ns = resume[3]
    for b in range(resume[0], (n_words + block_words - 1) // block_words):
        w0 = b * block_words
        m = min(w0 + block_words, n_words) - w0
        ex = exact[w0 : w0 + m]
        acc_m = acc[:m]  # 1-D views let LLVM vectorize the AND (2-D indexing does not)
        for e0 in range(resume[1] if b == resume[0] else 0, n, EVENT_CHUNK):
            t = 0
            bits = 0
            for e in range(e0, min(n, e0 + EVENT_CHUNK)):
                if path[e] == LISTED:
                    continue
                rr = row_of[e]
                src = rows[rr[0], w0 : w0 + m]
                sparse = path[e] == SPARSE
                if not sparse:  # the plain AND of whole rows
                    acc_m[:] = src
                    for a in range(1, n_attr):
                        src = rows[rr[a], w0 : w0 + m]
                        for j in range(m):
                            acc_m[j] &= src[j]
                elif n_attr > 1:
                    src1 = rows[rr[1], w0 : w0 + m]
                    for j in range(m):
                        acc_m[j] = src[j] & src1[j]
                else:
                    acc_m[:] = src
                if sparse:
                    c = 0
                    for j in range(m):  # the words left, listed without a branch
                        nz[c] = j
                        c += acc_m[j] != 0
                    if 4 * c > m:
                        for a in range(2, n_attr):
                            src = rows[rr[a], w0 : w0 + m]
                            for j in range(m):
                                acc_m[j] &= src[j]
                    else:
                        for i in range(c):
                            j = nz[i]
                            x = acc_m[j]
                            for a in range(2, n_attr):
                                x &= rows[rr[a], w0 + j]
                                if x == 0:
                                    break
                            t_e[t] = e
                            t_j[t] = j
                            t_x[t] = x
                            t += x != 0
                            bits += _popcount(x)
                        continue
                for j in range(m):
                    x = acc_m[j]
                    t_e[t] = e
                    t_j[t] = j
                    t_x[t] = x
                    t += x != 0
                    bits += _popcount(x)
            if t == 0:
                continue
            if k + bits > cap:
                resume[0] = b
                resume[1] = e0
                resume[2] = k
                resume[3] = ns
                return False
            for j in range(m + 1):  # by word, events in order within a word
                start[j] = 0
            for i in range(t):
                start[t_j[i] + 1] += 1
            for j in range(m):
                start[j + 1] += start[j]
            for i in range(t):
                j = t_j[i]
                p = start[j]
                s_e[p] = t_e[i]
                s_x[p] = t_x[i]
                start[j] = p + 1
            k_chunk = k
            ns_chunk = ns
            p = 0
            for j in range(m):  # start[j] is now the end of word j's entries
                base = (w0 + j) * 64
                exw = ex[j]
                for i in range(p, start[j]):
                    e = s_e[i]
                    x = s_x[i]
                    if x & ~exw == 0:  # every bit decisive: matches outright
                        k = _emit_all(e, base, x, hit_ev, hit_fid, k)
                        continue
                    while x != 0:  # in fid order: decisive bits match outright, the others are checked
                        f = base + trailing_zeros(x)
                        one = x & (~x + np.uint64(1))
                        x ^= one
                        if exw & one == 0:  # (inline: a shared helper with _emit cost W1 about 50%)
                            flags = meta[f, M_FLAGS]
                            if flags & INEXACT:
                                if not verify(e, f, ev_kind, ev_val, ev_delta, meta, p_code, p_ab, lit):
                                    continue
                            if flags & SLOW:
                                if ns >= slow_pairs.shape[0]:  # (the hits have room)
                                    resume[0] = b
                                    resume[1] = e0
                                    resume[2] = k_chunk
                                    resume[3] = ns_chunk
                                    resume[4] = 1
                                    return False
                                slow_pairs[ns, 0] = e
                                slow_pairs[ns, 1] = f
                                ns += 1
                                continue
                        hit_ev[k] = e
                        hit_fid[k] = f
                        k += 1
                p = start[j]
    resume[2] = k
    resume[3] = ns
    return True


@njit(cache=True)
def event_offsets(hit_ev, k, fid_offsets):  # type: ignore[no-untyped-def]
    """CSR offsets by event of the first ``k`` hits when they are already grouped by event."""
    n = fid_offsets.shape[0] - 1
    i = 0
    fid_offsets[0] = 0
    for e in range(n):
        while i < k and hit_ev[i] == e:
            i += 1
        fid_offsets[e + 1] = i


@njit(cache=True)
def group_hits(hit_ev, hit_fid, k, fid_offsets, fids):  # type: ignore[no-untyped-def]
    """CSR by event of the first ``k`` hits (a stable counting sort: fid order within an event)."""
    n = fid_offsets.shape[0] - 1
    for e in range(n + 1):
        fid_offsets[e] = 0
    for i in range(k):
        fid_offsets[hit_ev[i] + 1] += 1
    for e in range(n):
        fid_offsets[e + 1] += fid_offsets[e]
    fill = fid_offsets[:n].copy()
    for i in range(k):
        e = hit_ev[i]
        fids[fill[e]] = hit_fid[i]
        fill[e] += 1


@njit(cache=True)
def slot_offsets(fid_offsets, fids, m_start, offsets):  # type: ignore[no-untyped-def]
    """CSR offsets by event of the subscriptions of each event's fids (``fids[fid_offsets[e] :
    fid_offsets[e + 1]]``, whose members are ``m_packed[m_start[f] : m_start[f + 1]]``)."""
    n = fid_offsets.shape[0] - 1
    offsets[0] = 0
    for e in range(n):
        c = 0
        for i in range(fid_offsets[e], fid_offsets[e + 1]):
            f = fids[i]
            c += m_start[f + 1] - m_start[f]
        offsets[e + 1] = offsets[e] + c


@njit(cache=True)
def sort_segments(offsets, values):  # type: ignore[no-untyped-def]
    """Sort ``values[offsets[i] : offsets[i + 1]]`` in place for every ``i``."""
    for i in range(offsets.shape[0] - 1):
        a, b = offsets[i], offsets[i + 1]
        if b - a > 1:
            values[a:b] = np.sort(values[a:b])


@njit(cache=True)
def ranked_members(fid_offsets, fids, m_start, m_rank, n_ranks, offsets, out):  # type: ignore[no-untyped-def]
    """Each event's subscriptions as their rank, ascending: ``out[offsets[e] : offsets[e + 1]]``
    (``slot_offsets`` counts them), read from the runs of its fids; ``m_rank[q]`` is the rank of
    packed member ``q`` (read in order, where the rank of ``m_packed[q]`` would be a random read).

    An event with many subscriptions sets their ranks in a bitmap over all ranks, and each word it
    touches in a summary bitmap (a bit per word), then reads back the touched words in order: no
    comparison sort, and no scan over the words in between (at low match rates nearly every
    touched word holds one rank). One with few sorts them.
    """
    n = fid_offsets.shape[0] - 1
    words = (n_ranks + 63) // 64
    bitmap = np.zeros(max(1, words), dtype=np.uint64)
    summary = np.zeros(max(1, (words + 63) // 64), dtype=np.uint64)
    one, six, low = np.uint64(1), np.uint64(6), np.uint64(63)
    for e in range(n):
        a = offsets[e]
        count = offsets[e + 1] - a
        if count == 0:
            continue
        if 16 * count < words:
            p = a
            for i in range(fid_offsets[e], fid_offsets[e + 1]):
                f = fids[i]
                for q in range(m_start[f], m_start[f + 1]):
                    out[p] = m_rank[q]
                    p += 1
            if count > 1:
                out[a : a + count] = np.sort(out[a : a + count])
            continue
        lo = np.uint64(summary.shape[0])
        hi = np.uint64(0)
        for i in range(fid_offsets[e], fid_offsets[e + 1]):
            f = fids[i]
            for q in range(m_start[f], m_start[f + 1]):
                r = np.uint64(m_rank[q])  # unsigned: no negative-index checks on the bitmaps
                w = r >> six
                bitmap[w] |= one << (r & low)
                sw = w >> six
                summary[sw] |= one << (w & low)
                lo = min(lo, sw)
                hi = max(hi, sw)
        p = a
        for u in range(lo, hi + one):
            y = summary[u]
            summary[u] = 0
            while y != 0:
                v = (u << six) + trailing_zeros(y)
                y &= y - one
                x = bitmap[v]
                bitmap[v] = 0
                while x != 0:
                    out[p] = (v << six) + trailing_zeros(x)
                    p += 1
                    x &= x - one


@njit(cache=True)
def copy_slots(fid_offsets, fids, m_start, m_packed, lo, hi, slots):  # type: ignore[no-untyped-def]
    """The subscriptions of events ``lo .. hi - 1`` one after another (as ``slot_offsets`` counts).

    Fids are in order within an event, and their members lie in fid order in ``m_packed``: a run
    of consecutive fids is one stretch of ``m_packed``, copied as one.
    """
    d = 0
    k = fid_offsets[hi]
    i = fid_offsets[lo]
    while i < k:
        f = fids[i]
        g = f + 1
        i += 1
        while i < k and fids[i] == g:  # across an event's end too: its slots follow on
            g += 1
            i += 1
        s = m_start[f]
        t = m_start[g]
        if t - s > 32:
            slots[d : d + t - s] = m_packed[s:t]
        else:
            for q in range(s, t):
                slots[d + q - s] = m_packed[q]
        d += t - s


@njit(cache=True)
def pack_members(n_fids, meta, members, m_start, m_packed):  # type: ignore[no-untyped-def]
    """The subscriptions of every fid packed in fid order: ``m_packed[m_start[f] : m_start[f + 1]]``."""
    k = 0
    for f in range(n_fids):
        m_start[f] = k
        start = meta[f, M_MSTART]
        for i in range(meta[f, M_MCOUNT]):
            m_packed[k + i] = members[start + i]
        k += meta[f, M_MCOUNT]
    m_start[n_fids] = k


@njit(cache=True)
def _bucket_outcome(kind, lo, hi, p0, p1, p_code, p_ab, lit, strc):  # type: ignore[no-untyped-def]
    """NONE/FULL/PARTIAL of the predicates ``p0..p1`` (one fid, one attribute) over a bucket.

    ``kind``: 0 missing, 1 no kind, 2 false, 3 true, 4 other strings, 5 string code ``lo``,
    6 number point ``lo``, 7 open number interval ``(lo, hi)``.
    """
    result = FULL
    for p in range(p0, p1):
        pk = (p_code[p] >> 4) & 15
        op = p_code[p] & 15
        o = NONE
        if kind == 0:
            o = NONE
        elif pk == P_EXISTS:
            o = FULL
        elif kind == 1:
            o = NONE
        elif kind == 2 or kind == 3:
            if pk == P_BOOL:
                o = FULL if ((kind == 3) == (p_ab[p, 0] != 0)) == (op == O_EQ) else NONE
        elif kind == 4:  # strings with no point row of their own
            if pk == P_SLOW_STRING:
                o = PARTIAL
            elif pk == P_STRING:
                beyond = False  # a literal without a point row falls in this bucket
                if op == O_IN or op == O_NOT_IN:
                    for i in range(np.int64(p_ab[p, 0]), np.int64(p_ab[p, 0]) + np.int64(p_ab[p, 1])):
                        if lit[i] >= strc:
                            beyond = True
                else:
                    beyond = p_ab[p, 0] >= strc
                if op == O_EQ or op == O_IN:
                    o = PARTIAL if beyond else NONE
                else:
                    o = PARTIAL if beyond else FULL
        elif kind == 5:
            if pk == P_SLOW_STRING:
                o = PARTIAL
            elif pk == P_STRING:
                found = False
                if op == O_IN or op == O_NOT_IN:
                    for i in range(np.int64(p_ab[p, 0]), np.int64(p_ab[p, 0]) + np.int64(p_ab[p, 1])):
                        if lit[i] == lo:
                            found = True
                else:
                    found = p_ab[p, 0] == lo
                o = FULL if found == (op == O_EQ or op == O_IN) else NONE
        elif pk == P_SLOW_NUMBER:
            o = PARTIAL
        elif pk == P_NUMBER:
            if kind == 6:  # the point lo
                if op == O_IN or op == O_NOT_IN:
                    found = False
                    for i in range(np.int64(p_ab[p, 0]), np.int64(p_ab[p, 0]) + np.int64(p_ab[p, 1])):
                        if lit[i] == lo:
                            found = True
                    ok = found == (op == O_IN)
                else:
                    ok = _holds(op, _cmp(lo, 0, p_ab[p, 0]), _cmp(lo, 0, p_ab[p, 1]))
                o = FULL if ok else NONE
            else:  # the open interval (lo, hi)
                a = p_ab[p, 0]
                if op == O_EQ or op == O_NE:
                    inside = lo < a < hi
                    if op == O_EQ:
                        o = PARTIAL if inside else NONE
                    else:
                        o = PARTIAL if inside else FULL
                elif op == O_IN or op == O_NOT_IN:
                    inside = False
                    for i in range(np.int64(a), np.int64(a) + np.int64(p_ab[p, 1])):
                        if lo < lit[i] < hi:
                            inside = True
                    if op == O_IN:
                        o = PARTIAL if inside else NONE
                    else:
                        o = PARTIAL if inside else FULL
                elif op == O_LT or op == O_LE:  # x < a: full when hi <= a, none when lo >= a
                    o = FULL if hi <= a else (NONE if lo >= a else PARTIAL)
                elif op == O_GT or op == O_GE:
                    o = FULL if lo >= a else (NONE if hi <= a else PARTIAL)
                else:  # between [a, b]
                    b = p_ab[p, 1]
                    if hi <= a or lo >= b:
                        o = NONE
                    elif lo >= a and hi <= b:
                        o = FULL
                    else:
                        o = PARTIAL
        if o == NONE:
            return NONE
        if o == PARTIAL:
            result = PARTIAL
    return result


@njit(cache=True, inline="always")
def _number_bucket(cuts, nc, x):  # type: ignore[no-untyped-def]
    """The numeric bucket of ``x`` over the sorted ``cuts[:nc]``, and whether it is a cut's point."""
    lo, hi = 0, nc
    while lo < hi:  # the number of cuts below x
        mid = (lo + hi) >> 1
        if cuts[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    if lo < nc and cuts[lo] == x:
        return 2 * lo + 1, True
    return 2 * lo, False


@njit(cache=True)
def _number_span(p0, p1, p_code, p_ab, cuts, nc):  # type: ignore[no-untyped-def]
    """The numeric buckets ``jl..jh`` outside which the predicates ``p0..p1`` (one fid, one
    attribute) hold nowhere, when each is a number's =, <, <=, >, >= or between (the values of
    each are an interval, and so is their intersection); ``(0, -1)`` when some predicate is of
    another shape, and when the span is empty."""
    jl, jh = 0, 2 * nc
    for p in range(p0, p1):
        if (p_code[p] >> 4) & 15 != P_NUMBER:
            return 0, -1
        op = p_code[p] & 15
        a = p_ab[p, 0]
        if op == O_EQ or op == O_BETWEEN or op == O_GE or op == O_GT:
            j, point = _number_bucket(cuts, nc, a)
            if op == O_GT and point:
                j += 1
            jl = max(jl, j)
        elif op != O_LT and op != O_LE:
            return 0, -1
        if op == O_EQ or op == O_BETWEEN or op == O_LE or op == O_LT:
            b = p_ab[p, 1] if op == O_BETWEEN else a
            j, point = _number_bucket(cuts, nc, b)
            if op == O_LT and point:
                j -= 1
            jh = min(jh, j)
    return jl, jh


@njit(cache=True, inline="always")
def _fid_row_bits(
    f,
    bit,
    col,
    n_attr,
    fixed_rows,
    str_rows,
    str_count,
    num_cuts,
    num_ncuts,
    num_rows,
    acc,
    dc,
    meta,
    p_code,
    p_ab,
    lit,
):  # type: ignore[no-untyped-def]
    """OR ``bit`` into ``acc[r, col]`` for every row ``r`` where fid ``f`` may match, and into
    ``dc[a, col]`` for every attribute ``a`` it says nothing about (every row of ``a``); whether
    some set bit is not decisive (``set_fid_bits_plain``'s decisions, into buffers instead of ``rows``).

    An attribute whose predicates are all numbers' =, <, <=, >, >= or between (``_number_span``)
    has its bits only in the numeric buckets ``jl..jh``, and every bucket strictly inside lies
    within each predicate's interval (a full bucket): only the two end buckets are decided.
    """
    strc = str_rows.shape[1]
    p = meta[f, M_PSTART]
    pend = p + meta[f, M_PCOUNT]
    inexact = False
    for a in range(n_attr):
        p0 = p
        while p < pend and (p_code[p] >> 8) == a:
            p += 1
        p1 = p
        nst = min(str_count[a], strc)
        nc = num_ncuts[a]
        if p0 == p1:  # don't care: every row of a
            dc[a, col] |= bit
            continue
        jl, jh = _number_span(p0, p1, p_code, p_ab, num_cuts[a], nc)
        if jl <= jh:
            for j in range(jl + 1, jh):
                acc[num_rows[a, j], col] |= bit
            step = max(1, jh - jl)  # the end buckets alone
        else:  # not numbers' intervals alone (or an empty one): every bucket decided
            jl, jh, step = 0, 2 * nc, 1
            for j in range(5):
                kind = j if j < 4 else 4
                o = _bucket_outcome(kind, 0.0, 0.0, p0, p1, p_code, p_ab, lit, strc)
                if o != NONE:
                    acc[fixed_rows[a, j], col] |= bit
                    if o == PARTIAL:
                        inexact = True
            for c in range(nst):
                o = _bucket_outcome(5, float(c), 0.0, p0, p1, p_code, p_ab, lit, strc)
                if o != NONE:
                    acc[str_rows[a, c], col] |= bit
                    if o == PARTIAL:
                        inexact = True
        for j in range(jl, jh + 1, step):
            if j & 1:
                c = num_cuts[a, j >> 1]
                o = _bucket_outcome(6, c, c, p0, p1, p_code, p_ab, lit, strc)
            else:
                lo = num_cuts[a, (j >> 1) - 1] if j > 0 else -np.inf
                hi = num_cuts[a, j >> 1] if (j >> 1) < nc else np.inf
                o = _bucket_outcome(7, lo, hi, p0, p1, p_code, p_ab, lit, strc)
            if o != NONE:
                acc[num_rows[a, j], col] |= bit
                if o == PARTIAL:
                    inexact = True
    return inexact


_BIT_WORDS = 8  # words of the rows that ``flush_fid_bits`` decides together (one cache line per row)


@njit(cache=True)
def row_attributes(n_attr, fixed_rows, str_rows, str_count, num_ncuts, num_rows, n_rows):  # type: ignore[no-untyped-def]
    """The attribute that owns each of the first ``n_rows`` rows (-1: none): its fixed rows,
    its string rows and its numeric buckets."""
    owner = np.full(n_rows, -1, dtype=np.int64)
    strc = str_rows.shape[1]
    for a in range(n_attr):
        for j in range(5):
            owner[fixed_rows[a, j]] = a
        for c in range(min(str_count[a], strc)):
            owner[str_rows[a, c]] = a
        for j in range(2 * num_ncuts[a] + 1):
            owner[num_rows[a, j]] = a
    return owner


@njit(cache=True)
def flush_fid_bits(
    set_fids,
    clear_fids,
    n_attr,
    fixed_rows,
    str_rows,
    str_count,
    num_cuts,
    num_ncuts,
    num_rows,
    rows,
    n_rows,
    meta,
    p_code,
    p_ab,
    lit,
    summary,
    n_summary,
):  # type: ignore[no-untyped-def]
    """The bit work of a flush in one pass over the words it touches: clear each fid of
    ``clear_fids`` in the first ``n_rows`` rows, then set each new fid of ``set_fids`` in every
    row where it may match (marking it INEXACT where not decisive), and refresh the summary bits
    (``summary[r, w >> 6]``, bit ``w & 63``: does ``rows[r, w]`` hold a bit?) of the rows below
    ``n_summary`` for the words passed.

    Both fid lists are sorted. The words are taken in aligned runs of ``_BIT_WORDS`` (a cache
    line of each row) that hold some fid of either list: the new fids of a run are decided into
    buffers (``acc``: those words of every row; ``dc``: those words of every attribute that a fid
    says nothing about, which sets its bit in all the attribute's rows, ``row_attributes``), then
    each row takes, per word, ``(row & clear mask) | acc | dc[owner]`` and its summary bit, once:
    a row is touched once per run, not once per fid nor once per kind of work (the rows are
    ``n_words`` words apart, so each touch is a cache miss at scale). Equal to
    ``clear_fid_bits_plain``, then ``set_fid_bits_plain``, then ``summarize_rows`` of the rows
    below ``n_summary`` (tests/unit/matching/test_kernels.py). The predicates of a fid are grouped
    by attribute (attributes non-decreasing within a fid).
    """
    owner = row_attributes(n_attr, fixed_rows, str_rows, str_count, num_ncuts, num_rows, n_rows)
    acc = np.zeros((n_rows, _BIT_WORDS), dtype=np.uint64)
    dc = np.zeros((n_attr + 1, _BIT_WORDS), dtype=np.uint64)  # row n_attr: rows of no attribute
    for r in range(n_rows):
        if owner[r] < 0:
            owner[r] = n_attr
    keep = np.empty(_BIT_WORDS, dtype=np.uint64)
    n_words = rows.shape[1]
    ns = set_fids.shape[0]
    nc = clear_fids.shape[0]
    i = 0
    j = 0
    while i < ns or j < nc:
        w = n_words
        if i < ns:
            w = set_fids[i] >> 6
        if j < nc:
            w = min(w, clear_fids[j] >> 6)
        w0 = w // _BIT_WORDS * _BIT_WORDS
        width = min(_BIT_WORDS, n_words - w0)
        for t in range(width):
            keep[t] = ~np.uint64(0)
        while j < nc and (clear_fids[j] >> 6) < w0 + width:
            f = clear_fids[j]
            keep[(f >> 6) - w0] &= ~(np.uint64(1) << np.uint64(f & 63))
            j += 1
        any_set = False
        while i < ns and (set_fids[i] >> 6) < w0 + width:
            f = set_fids[i]
            any_set = True
            if _fid_row_bits(
                f, np.uint64(1) << np.uint64(f & 63), (f >> 6) - w0, n_attr, fixed_rows, str_rows, str_count,
                num_cuts, num_ncuts, num_rows, acc, dc, meta, p_code, p_ab, lit,
            ):  # fmt: skip
                meta[f, M_FLAGS] |= INEXACT
            i += 1
        for r in range(n_rows):
            a = owner[r]
            sumw = np.uint64(0)
            for t in range(width):
                v = rows[r, w0 + t] & keep[t]
                if any_set:
                    v |= acc[r, t] | dc[a, t]
                    acc[r, t] = np.uint64(0)
                rows[r, w0 + t] = v
                if v != 0:
                    sumw |= np.uint64(1) << np.uint64((w0 + t) & 63)
            if r < n_summary:  # the run lies within one summary word (64 is a multiple of the run)
                mask = ((np.uint64(1) << np.uint64(width)) - np.uint64(1)) << np.uint64(w0 & 63)
                summary[r, w0 >> 6] = (summary[r, w0 >> 6] & ~mask) | sumw
        if any_set:
            for a in range(n_attr + 1):
                for t in range(width):
                    dc[a, t] = np.uint64(0)


@njit(cache=True)
def set_fid_bits_plain(
    fids,
    n_attr,
    fixed_rows,
    str_rows,
    str_count,
    num_cuts,
    num_ncuts,
    num_rows,
    rows,
    meta,
    p_code,
    p_ab,
    lit,
):  # type: ignore[no-untyped-def]
    """The oracle of ``flush_fid_bits``' setting: each fid's bits set row by row, fid after fid.

    The predicates of a fid are grouped by attribute (attributes non-decreasing within a fid).
    """
    strc = str_rows.shape[1]
    for i in range(fids.shape[0]):
        f = fids[i]
        word = f >> 6
        bit = np.uint64(1) << np.uint64(f & 63)
        p = meta[f, M_PSTART]
        pend = p + meta[f, M_PCOUNT]
        inexact = False
        for a in range(n_attr):
            p0 = p
            while p < pend and (p_code[p] >> 8) == a:
                p += 1
            p1 = p
            nst = min(str_count[a], strc)
            nc = num_ncuts[a]
            if p0 == p1:  # don't care: every row of a
                for j in range(5):
                    rows[fixed_rows[a, j], word] |= bit
                for c in range(nst):
                    rows[str_rows[a, c], word] |= bit
                for j in range(2 * nc + 1):
                    rows[num_rows[a, j], word] |= bit
                continue
            for j in range(5):
                kind = j if j < 4 else 4
                o = _bucket_outcome(kind, 0.0, 0.0, p0, p1, p_code, p_ab, lit, strc)
                if o != NONE:
                    rows[fixed_rows[a, j], word] |= bit
                    if o == PARTIAL:
                        inexact = True
            for c in range(nst):
                o = _bucket_outcome(5, float(c), 0.0, p0, p1, p_code, p_ab, lit, strc)
                if o != NONE:
                    rows[str_rows[a, c], word] |= bit
                    if o == PARTIAL:
                        inexact = True
            for j in range(2 * nc + 1):
                if j & 1:
                    c = num_cuts[a, j >> 1]
                    o = _bucket_outcome(6, c, c, p0, p1, p_code, p_ab, lit, strc)
                else:
                    lo = num_cuts[a, (j >> 1) - 1] if j > 0 else -np.inf
                    hi = num_cuts[a, j >> 1] if (j >> 1) < nc else np.inf
                    o = _bucket_outcome(7, lo, hi, p0, p1, p_code, p_ab, lit, strc)
                if o != NONE:
                    rows[num_rows[a, j], word] |= bit
                    if o == PARTIAL:
                        inexact = True
        if inexact:
            meta[f, M_FLAGS] |= INEXACT


@njit(cache=True)
def first_positions(codes, n):  # type: ignore[no-untyped-def]
    """The position in ``codes`` of the first occurrence of each value ``k < n`` (-1 where ``k``
    does not occur); the scan stops once every value was met. With ``codes`` the inverse of a
    sorted unique, this is ``np.unique(..., return_index=True)``'s index without a sort.

    >>> first_positions(np.array([2, 0, 2, 0, 1]), 4).tolist()
    [1, 4, 0, -1]
    """
    out = np.full(n, -1, dtype=np.int64)
    left = n
    for i in range(codes.shape[0]):
        k = codes[i]
        if out[k] < 0:
            out[k] = i
            left -= 1
            if left == 0:
                break
    return out


@njit(cache=True)
def sorted_distinct(values):  # type: ignore[no-untyped-def]
    """``np.unique(values)``, without its sort when ``values`` already strictly increase (a bulk
    build's new fids do): then ``values`` itself.

    >>> sorted_distinct(np.array([3, 1, 3])).tolist(), sorted_distinct(np.array([1, 2, 5])).tolist()
    ([1, 3], [1, 2, 5])
    """
    for i in range(1, values.shape[0]):
        if values[i] <= values[i - 1]:
            return np.unique(values)
    return values


@njit(cache=True)
def clear_fid_bits_plain(fids, rows, n_rows):  # type: ignore[no-untyped-def]
    """The oracle of ``flush_fid_bits``' clearing: each fid's bit cleared row by row, fid after fid."""
    for i in range(fids.shape[0]):
        f = fids[i]
        word = f >> 6
        mask = ~(np.uint64(1) << np.uint64(f & 63))
        for r in range(n_rows):
            rows[r, word] &= mask


@njit(cache=True)
def unlist_members(slots, sub_fid, sub_pos, members, meta, emptied):  # type: ignore[no-untyped-def]
    """Take each slot out of its fid's member list (the fid's last member fills the hole).

    Returns how many fids were left with no member; they are ``emptied[:n]``.
    """
    n = 0
    for i in range(slots.shape[0]):
        s = slots[i]
        f = sub_fid[s]
        pos = sub_pos[s]
        last = meta[f, M_MSTART] + meta[f, M_MCOUNT] - 1
        moved = members[last]
        members[pos] = moved
        sub_pos[moved] = pos
        meta[f, M_MCOUNT] -= 1
        if meta[f, M_MCOUNT] == 0:
            emptied[n] = f
            n += 1
    return n


@njit(cache=True)
def list_members(slots, fids, first, sub_fid, sub_pos, members, meta, used):  # type: ignore[no-untyped-def]
    """Append ``slots[i]`` to the member list of ``fids[i]``, from ``i = first`` on.

    A full list moves to ``members[used:]`` with twice the room (one, when it had none). Returns
    ``(i, used, garbage)``: where it stopped (``len(slots)`` when done; earlier when ``members``
    has no room for a move), the pool's new end, and the room the moved lists left behind.
    """
    garbage = 0
    for i in range(first, slots.shape[0]):
        s = slots[i]
        f = fids[i]
        start = meta[f, M_MSTART]
        count = meta[f, M_MCOUNT]
        cap = meta[f, M_MCAP]
        if count == cap:
            new_cap = max(1, 2 * cap)
            if used + new_cap > members.shape[0]:
                return i, used, garbage
            for j in range(count):
                moved = members[start + j]
                members[used + j] = moved
                sub_pos[moved] = used + j
            garbage += cap
            start = used
            meta[f, M_MSTART] = used
            meta[f, M_MCAP] = new_cap
            used += new_cap
        members[start + count] = s
        sub_fid[s] = f
        sub_pos[s] = start + count
        meta[f, M_MCOUNT] = count + 1
    return slots.shape[0], used, garbage


@njit(cache=True)
def same_records(cand, offs, r_code, r_x, r_y, r_lits, meta, p_code, p_ab, lit, same):  # type: ignore[no-untyped-def]
    """Whether each candidate fid ``cand[g]`` (-1: none) holds exactly the records of group ``g``.

    Group ``g``'s records are ``offs[g] .. offs[g + 1] - 1`` of ``r_code``, ``r_x``, ``r_y``: as
    ``p_code`` and ``p_ab`` (a list's literals are ``r_lits[r_x : r_x + r_y]``).
    """
    for g in range(cand.shape[0]):
        f = cand[g]
        same[g] = False
        if f < 0:
            continue
        r0 = offs[g]
        m = offs[g + 1] - r0
        if meta[f, M_PCOUNT] != m:
            continue
        p0 = meta[f, M_PSTART]
        ok = True
        for j in range(m):
            r = r0 + j
            p = p0 + j
            code = r_code[r]
            if p_code[p] != code:
                ok = False
            elif (code & 15) == O_IN or (code & 15) == O_NOT_IN:
                c = np.int64(r_y[r])
                if np.int64(p_ab[p, 1]) != c:
                    ok = False
                else:
                    a = np.int64(p_ab[p, 0])
                    b = np.int64(r_x[r])
                    for t in range(c):
                        if lit[a + t] != r_lits[b + t]:
                            ok = False
                            break
            elif p_ab[p, 0] != r_x[r] or p_ab[p, 1] != r_y[r]:
                ok = False
            if not ok:
                break
        same[g] = ok


@njit(cache=True)
def new_records_size(same, offs, r_code, r_y):  # type: ignore[no-untyped-def]
    """``(records, list literals)`` that storing the groups that are not ``same`` takes."""
    m = 0
    nl = 0
    for g in range(same.shape[0]):
        if same[g]:
            continue
        for r in range(offs[g], offs[g + 1]):
            op = r_code[r] & 15
            if op == O_IN or op == O_NOT_IN:
                nl += int(r_y[r])
            m += 1
    return m, nl


@njit(cache=True)
def store_fids(same, fids, flags, offs, r_code, r_x, r_y, r_lits, p_used, lit_used, p_code, p_ab, lit, meta):  # type: ignore[no-untyped-def]
    """Store the records of each group that is not ``same`` (as in ``same_records``), the i-th of
    them as the predicates of the new fid ``fids[i]`` with flags ``flags[i]`` and no members, from
    ``p_used`` and ``lit_used`` on (``new_records_size`` says how much room that takes)."""
    p = p_used
    q = lit_used
    i = 0
    for g in range(same.shape[0]):
        if same[g]:
            continue
        f = fids[i]
        meta[f, M_FLAGS] = flags[i]
        meta[f, M_PSTART] = p
        meta[f, M_PCOUNT] = offs[g + 1] - offs[g]
        meta[f, M_MSTART] = 0
        meta[f, M_MCOUNT] = 0
        meta[f, M_MCAP] = 0
        i += 1
        for r in range(offs[g], offs[g + 1]):
            code = r_code[r]
            p_code[p] = code
            if (code & 15) == O_IN or (code & 15) == O_NOT_IN:
                c = np.int64(r_y[r])
                b = np.int64(r_x[r])
                for t in range(c):
                    lit[q + t] = r_lits[b + t]
                p_ab[p, 0] = q
                p_ab[p, 1] = c
                q += c
            else:
                p_ab[p, 0] = r_x[r]
                p_ab[p, 1] = r_y[r]
            p += 1
