"""A digest of an ``id -> filter text`` map that does not depend on the order of its pairs.

A compiled index stands for the texts saved with it (docs/decisions/compiled-index.md). A
restarted worker may skip reading the snapshot it is shipped when the compiled file's texts
equal it; this digest decides that equality without comparing the texts one by one.

Construction
------------
Each pair ``(i, t)`` is encoded as the UTF-8 bytes (lone surrogates passed through) of
``f"{len(i)}:{i}{t}"``: the length of the id in characters, a colon, the id, the text. The
encoding is injective: the digits before the first colon give the id's length, so the id and the
text are read back unambiguously. Each encoding is hashed with BLAKE2b to 32 bytes (personal
``b"siftstream:pair"``); the 32-byte pair hashes are sorted as big-endian bytes, and their
concatenation is hashed with BLAKE2b to 32 bytes (personal ``b"siftstream:texts"``). The hex
form of that hash is the digest.

Why it is sound: sorting makes the digest a function of the *set* of pair hashes, so the order
of the map does not matter. Two different maps with the same digest give either two different
sorted sequences with the same outer hash (a BLAKE2b-256 collision), or the same sorted sequence,
which means a pair of one map and a different pair of the other with the same pair hash (again a
BLAKE2b-256 collision). Finding one costs about 2^128 hash evaluations, so a collision crafted
by someone who controls the subscriptions is not a concern. A sum of the pair hashes modulo
2^128 (AdHash) would also be order-free and incremental, but Wagner's generalized-birthday
algorithm (Wagner 2002, "A generalized birthday problem", CRYPTO, section 4.2) finds colliding
multisets of a 128-bit additive hash with about 2^16-2^20 work once the attacker may choose a
few hundred elements; a multiplicative hash (MuHash) is sound but a 3072-bit modular product per
pair is several seconds in Python at 10^6 pairs. Sorting is not incremental, which the job does
not need: the driver computes one digest per run and a worker one per save.

Cost: four C-level ``map`` passes (format, encode, hash, digest) and a ``numpy.lexsort`` of the
hashes; :func:`texts_digest_reference` is the plain loop it must equal.

>>> a = texts_digest({"s1": "x > 1", "s2": "y = 'a'"})
>>> a == texts_digest({"s2": "y = 'a'", "s1": "x > 1"}) == texts_digest_reference([("s2", "y = 'a'"), ("s1", "x > 1")])
True
>>> a == texts_digest({"s1": "x > 1", "s2": "y = 'b'"}), len(a)
(False, 64)
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from functools import partial

import numpy as np

__all__ = ["texts_digest", "texts_digest_reference"]

_PAIR_PERSON = b"siftstream:pair"
_SET_PERSON = b"siftstream:texts"
_SIZE = 32  # bytes of each BLAKE2b hash: collisions cost about 2^128 evaluations


def texts_digest(filters: Mapping[str, str] | Iterable[tuple[str, str]]) -> str:
    """The order-free digest of ``id -> filter text`` pairs (see the module docstring), as 64 hex
    characters. ``filters`` is a mapping or an iterable of ``(id, text)`` pairs with distinct ids.
    """
    if isinstance(filters, Mapping):
        ids: Iterable[str] = filters.keys()
        texts: Iterable[str] = filters.values()
    else:
        pairs = list(filters)
        ids, texts = [p[0] for p in pairs], [p[1] for p in pairs]
    try:
        joined = _pair_hashes(ids, texts, str.encode)
    except UnicodeEncodeError:  # a lone surrogate: passed through (all other text gives the same bytes)
        joined = _pair_hashes(ids, texts, partial(str.encode, encoding="utf-8", errors="surrogatepass"))
    words = np.frombuffer(joined, dtype=">u8").reshape(-1, _SIZE // 8)  # a hash as 4 big-endian words
    ordered = words[np.lexsort(words.T[::-1])] if len(words) > 1 else words  # byte order, all 32 bytes
    return hashlib.blake2b(ordered.tobytes(), digest_size=_SIZE, person=_SET_PERSON).hexdigest()


def texts_digest_reference(filters: Mapping[str, str] | Iterable[tuple[str, str]]) -> str:
    """:func:`texts_digest` written plainly, one pair at a time (its oracle)."""
    items = filters.items() if isinstance(filters, Mapping) else filters
    hashes = []
    for sid, text in items:
        data = f"{len(sid)}:{sid}{text}".encode("utf-8", "surrogatepass")
        hashes.append(hashlib.blake2b(data, digest_size=_SIZE, person=_PAIR_PERSON).digest())
    return hashlib.blake2b(b"".join(sorted(hashes)), digest_size=_SIZE, person=_SET_PERSON).hexdigest()


def _pair_hashes(ids: Iterable[str], texts: Iterable[str], encode: Callable[[str], bytes]) -> bytes:
    """The pairs' 32-byte hashes, concatenated in the pairs' order (C loops; no list of texts)."""
    encoded = map(encode, map("{}:{}{}".format, map(len, ids), ids, texts))
    hashes = map(partial(hashlib.blake2b, digest_size=_SIZE, person=_PAIR_PERSON), encoded)
    return b"".join(map(hashlib.blake2b.digest, hashes))
