"""Filter texts of the numeric form read from their bytes, a batch at once (numba, no Python objects inside).

The *numeric form* (``routing.matching.language._NUMERIC_FILTER``) is the canonical text of
range-heavy and numeric equality subscriptions (W1's ``between`` filters, Gryphon's integer
equalities): one or more predicates joined by `` and ``, each ``NAME between INT and INT`` or
``NAME OP INT`` with ``OP`` one of ``= != < <= > >=``; names ``[A-Za-z_][A-Za-z0-9_.]*``, integers
``-?[0-9]{1,15}`` (exact doubles), single spaces, nothing before or after. Every such text is a
valid filter of the parser's simple shapes (``_SIMPLE_FILTER``), compiled by
``MatchIndex._compile_simple`` into the same records that ``MatchIndex`` makes here from the bytes.

- ``read_numeric_form(texts)``: the texts' predicates as arrays (``numeric_predicates``, over
  the texts' ASCII bytes joined), a count of -1 for each text not of the form;
- ``sort_records`` sorts each filter's records as Python sorts their tuples;
- ``record_keys(offs, r_code, r_x, r_y)``: each filter's dedup key, the hash CPython gives the
  tuple of its record tuples (``tuple_keys``, the oracle), computed without a tuple
  (``hash_records``) when this interpreter's ``hash`` agrees (checked on first use).

Symbols: a compiled record is ``(code, x, y, ())`` with ``code = attribute << 8 | kind << 4 |
operator`` (``routing.matching.kernels``); group ``g`` of records is ``offs[g] .. offs[g + 1] - 1``.

Examples
--------
>>> counts, start, end, _, ops, low, high, buf = read_numeric_form(["a between 1 and 2 and b != -3", "a <"])
>>> counts.tolist(), [buf[s:e].tobytes() for s, e in zip(start, end)], ops.tolist(), low.tolist(), high.tolist()
([2, -1], [b'a', b'b'], [6, 1], [1, -3], [2, -3])
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise, repeat
from typing import Final

import numpy as np
import numpy.typing as npt
from numba import njit

from routing.matching.kernels import O_BETWEEN, O_EQ, O_GE, O_GT, O_LE, O_LT, O_NE

__all__ = [
    "hash_records",
    "numeric_predicates",
    "read_numeric_form",
    "record_keys",
    "same_spans",
    "sort_records",
    "tuple_keys",
]

_B_BETWEEN = np.frombuffer(b"between ", dtype=np.uint8)
_B_AND = np.frombuffer(b" and ", dtype=np.uint8)
_FNV_OFFSET, _FNV_PRIME = np.uint64(14695981039346656037), np.uint64(1099511628211)


@njit(cache=True, inline="always")
def _name_byte(c, first):  # type: ignore[no-untyped-def]
    """Whether byte ``c`` may stand in a name (``[A-Za-z_]`` first, then ``[A-Za-z0-9_.]``)."""
    if (65 <= c <= 90) or (97 <= c <= 122) or c == 95:
        return True
    return not first and ((48 <= c <= 57) or c == 46)


@njit(cache=True, inline="always")
def _word_at(buf, p, e, word):  # type: ignore[no-untyped-def]
    """Whether ``buf[p : e]`` starts with the bytes ``word``."""
    if p + word.shape[0] > e:
        return False
    for t in range(word.shape[0]):  # noqa: SIM110 (a loop compiles to a tight one; all() over a generator does not)
        if buf[p + t] != word[t]:
            return False
    return True


@njit(cache=True, inline="always")
def _integer_at(buf, p, e):  # type: ignore[no-untyped-def]
    """The integer ``-?[0-9]{1,15}`` at ``buf[p]`` that no digit follows before ``e``:
    ``(value, end, found)``."""
    neg = p < e and buf[p] == 45
    q = p + 1 if neg else p
    v = np.int64(0)
    d = q
    while d < e and 48 <= buf[d] <= 57:
        if d - q == 15:
            return v, d, False
        v = v * 10 + np.int64(buf[d] - 48)
        d += 1
    if d == q:
        return v, d, False
    return (-v if neg else v), d, True


@njit(cache=True, inline="always")
def _operator_at(buf, p, e):  # type: ignore[no-untyped-def]
    """The operator ``= != < <= > >=`` at ``buf[p]`` followed by a space: ``(O_* code, end)``,
    code -1 when there is none."""
    if p >= e:
        return -1, p
    c = buf[p]
    two = p + 1 < e and buf[p + 1] == 61  # "="
    if c == 61:
        o, n = O_EQ, 1
    elif c == 33 and two:
        o, n = O_NE, 2
    elif c == 60:
        o, n = (O_LE, 2) if two else (O_LT, 1)
    elif c == 62:
        o, n = (O_GE, 2) if two else (O_GT, 1)
    else:
        return -1, p
    if p + n >= e or buf[p + n] != 32:
        return -1, p
    return o, p + n + 1


@njit(cache=True)
def numeric_predicates(buf, starts, ends, counts, name_start, name_end, name_hash, ops, low, high):  # type: ignore[no-untyped-def]
    """Read texts of the numeric form (module docstring) from their ASCII bytes.

    Text ``i`` is ``buf[starts[i] : ends[i]]``. ``counts[i]`` is its number of predicates, or -1
    when it is not of the form: the pattern's match fails exactly then, since every name, integer,
    operator and keyword ends where the next fixed byte must begin, so this reading is the
    pattern's only way through. The predicates of the texts of the form are numbered in text
    order; predicate ``k``'s name is ``buf[name_start[k] : name_end[k]]`` with FNV-1a hash
    ``name_hash[k]``, its operator ``ops[k]`` (an ``O_*`` code), its literals ``low[k]`` and
    ``high[k]`` (equal but for ``between``). The predicates' arrays need room for the texts'
    predicates (a text with more is read as not of the form). Returns the number of predicates.
    """
    k = 0
    for i in range(starts.shape[0]):
        p = starts[i]
        e = ends[i]
        k0 = k
        ok = True
        while ok:
            ok = False
            if p >= e or not _name_byte(buf[p], True):
                break
            s = p
            h = _FNV_OFFSET
            while p < e and _name_byte(buf[p], False):
                h = (h ^ np.uint64(buf[p])) * _FNV_PRIME
                p += 1
            ne = p
            if p >= e or buf[p] != 32:
                break
            p += 1
            if _word_at(buf, p, e, _B_BETWEEN):
                op = O_BETWEEN
                lo, p, found = _integer_at(buf, p + _B_BETWEEN.shape[0], e)
                if not found or not _word_at(buf, p, e, _B_AND):
                    break
                hi, p, found = _integer_at(buf, p + _B_AND.shape[0], e)
            else:
                op, p = _operator_at(buf, p, e)
                if op < 0:
                    break
                lo, p, found = _integer_at(buf, p, e)
                hi = lo
            if not found or k >= low.shape[0]:
                break
            name_start[k], name_end[k], name_hash[k] = s, ne, h
            ops[k], low[k], high[k] = op, lo, hi
            k += 1
            if p == e:
                ok = True
                break
            if not _word_at(buf, p, e, _B_AND):
                break
            p += _B_AND.shape[0]
            ok = True
        if ok:
            counts[i] = k - k0
        else:
            counts[i] = -1
            k = k0
    return k


def read_numeric_form(
    texts: Sequence[str],
) -> tuple[
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.uint64],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.uint8],
]:
    """``numeric_predicates`` over ``texts`` (a text that is not ASCII is not of the form):
    ``(counts, name_start, name_end, name_hash, ops, low, high, buf)``, ``counts[i]`` the
    predicates of text ``i`` (-1: not of the numeric form), the predicates' arrays over the bytes
    ``buf`` of all the texts."""
    joined = "".join(texts)
    if not joined.isascii():
        texts = [t if t.isascii() else "" for t in texts]
        joined = "".join(texts)
    buf = np.frombuffer(joined.encode("ascii"), dtype=np.uint8)
    ends = np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)))
    starts = np.zeros_like(ends)
    starts[1:] = ends[:-1]
    room = joined.count(" and ") + len(texts) + 1  # a text's predicates: its separators and one
    counts = np.empty(len(texts), dtype=np.int64)
    start, end, ops, low, high = (np.empty(room, dtype=np.int64) for _ in range(5))
    hashes = np.empty(room, dtype=np.uint64)
    k = numeric_predicates(buf, starts, ends, counts, start, end, hashes, ops, low, high)
    return counts, start[:k], end[:k], hashes[:k], ops[:k], low[:k], high[:k], buf


@njit(cache=True)
def same_spans(buf, start, end, other_start, other_end):  # type: ignore[no-untyped-def]
    """Whether ``buf[start[k] : end[k]]`` equals ``buf[other_start[k] : other_end[k]]`` for every ``k``."""
    for k in range(start.shape[0]):
        n = end[k] - start[k]
        if other_end[k] - other_start[k] != n:
            return False
        for t in range(n):
            if buf[start[k] + t] != buf[other_start[k] + t]:
                return False
    return True


@njit(cache=True)
def sort_records(offs, r_code, r_x, r_y):  # type: ignore[no-untyped-def]
    """Sort each group's records in place by ``(r_code, r_x, r_y)``, the order of Python's
    ``sorted`` on the record tuples (insertion sort: groups are short)."""
    for g in range(offs.shape[0] - 1):
        for i in range(offs[g] + 1, offs[g + 1]):
            c, x, y = r_code[i], r_x[i], r_y[i]
            j = i - 1
            while j >= offs[g] and (r_code[j] > c or (r_code[j] == c and (r_x[j] > x or (r_x[j] == x and r_y[j] > y)))):
                r_code[j + 1], r_x[j + 1], r_y[j + 1] = r_code[j], r_x[j], r_y[j]
                j -= 1
            r_code[j + 1], r_x[j + 1], r_y[j + 1] = c, x, y


# CPython's hash of a tuple (Objects/tupleobject.c, ``tuplehash``: xxHash's round over the items'
# hashes) and of a number (Python/pyhash.c: an integer below 2**61 - 1 in magnitude is its own
# hash, but -1 hashes to -2; an integral double hashes as its integer)
_XXPRIME_1, _XXPRIME_2, _XXPRIME_5 = (
    np.uint64(11400714785074694791),
    np.uint64(14029467366897019727),
    np.uint64(2870177450012600261),
)
_XXLEN = np.uint64(2870177450012600261 ^ 3527539)


@njit(cache=True, inline="always")
def _tuple_round(acc, lane):  # type: ignore[no-untyped-def]
    acc += np.uint64(lane) * _XXPRIME_2
    acc = (acc << np.uint64(31)) | (acc >> np.uint64(33))
    return acc * _XXPRIME_1


@njit(cache=True, inline="always")
def _tuple_end(acc, n):  # type: ignore[no-untyped-def]
    acc += np.uint64(n) ^ _XXLEN
    h = np.int64(acc)
    return np.int64(1546275796) if h == -1 else h


@njit(cache=True, inline="always")
def _integral_hash(x):  # type: ignore[no-untyped-def]
    """``hash(x)`` of an integral double or an integer of magnitude below 2**61 - 1."""
    h = np.int64(x)
    return np.int64(-2) if h == -1 else h


@njit(cache=True)
def hash_records(offs, r_code, r_x, r_y, empty_hash, keys):  # type: ignore[no-untyped-def]
    """``keys[g] = hash(tuple((r_code[r], r_x[r], r_y[r], ()) for r in group g))`` as CPython
    computes it, for codes of at least 0 and literals that are integers of magnitude below 2**53;
    ``empty_hash`` is ``hash(())``. Returns False, with ``keys`` unspecified, when some literal is
    not such an integer."""
    for r in range(r_x.shape[0]):
        if not (abs(r_x[r]) < 2.0**53 and abs(r_y[r]) < 2.0**53):
            return False
        if r_x[r] != np.floor(r_x[r]) or r_y[r] != np.floor(r_y[r]) or r_code[r] < 0:
            return False
    for g in range(offs.shape[0] - 1):
        acc = _XXPRIME_5
        for r in range(offs[g], offs[g + 1]):
            rec = _XXPRIME_5
            rec = _tuple_round(rec, _integral_hash(r_code[r]))
            rec = _tuple_round(rec, _integral_hash(r_x[r]))
            rec = _tuple_round(rec, _integral_hash(r_y[r]))
            rec = _tuple_round(rec, empty_hash)
            acc = _tuple_round(acc, _tuple_end(rec, 4))
        keys[g] = _tuple_end(acc, offs[g + 1] - offs[g])
    return True


_EMPTY_HASH: Final = hash(())
_KEYS_AGREE: bool | None = None  # whether hash_records computes this interpreter's hash (``record_keys``)


def tuple_keys(
    offs: npt.NDArray[np.int64],
    r_code: npt.NDArray[np.int64],
    r_x: npt.NDArray[np.float64],
    r_y: npt.NDArray[np.float64],
) -> list[int]:
    """The dedup key of each group of records without a list literal: the hash of its record
    tuples, as ``MatchIndex`` makes them (the oracle of ``hash_records``)."""
    flat = list(zip(r_code.tolist(), r_x.tolist(), r_y.tolist(), repeat(()), strict=False))
    return [hash(tuple(flat[i:j])) for i, j in pairwise(offs.tolist())]


def record_keys(
    offs: npt.NDArray[np.int64],
    r_code: npt.NDArray[np.int64],
    r_x: npt.NDArray[np.float64],
    r_y: npt.NDArray[np.float64],
) -> list[int]:
    """``tuple_keys``, computed by ``hash_records`` when it agrees with this interpreter's ``hash``
    (checked once, on records of every sign and size) and the literals are integers.

    >>> offs, codes = np.asarray([0, 1]), np.asarray([310])
    >>> record_keys(offs, codes, np.asarray([2.0]), np.asarray([9.0])) == [hash(((310, 2.0, 9.0, ()),))]
    True
    """
    global _KEYS_AGREE
    if _KEYS_AGREE is None:
        probe = np.asarray([0, 3, 5], dtype=np.int64)
        codes = np.asarray([1, 310, 2**40, 566, 7], dtype=np.int64)
        xs = np.asarray([0.0, -1.0, 2.0**52, -(2.0**52) + 1, 123456789012345.0])
        ys = np.asarray([-2.0, 1.0, -5.0, 1e15, -1e15])
        got = np.empty(2, dtype=np.int64)
        agree = bool(hash_records(probe, codes, xs, ys, _EMPTY_HASH, got))
        _KEYS_AGREE = agree and got.tolist() == tuple_keys(probe, codes, xs, ys)
    keys = np.empty(len(offs) - 1, dtype=np.int64)
    if _KEYS_AGREE and hash_records(offs, r_code, r_x, r_y, _EMPTY_HASH, keys):
        return keys.tolist()
    return tuple_keys(offs, r_code, r_x, r_y)
