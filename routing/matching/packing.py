r"""Strings packed as numpy arrays: one UTF-8 byte blob and the offsets of its strings.

The compiled form of a ``MatchIndex`` (``MatchIndex.to_arrays``) and of the texts an index
replica holds are plain numpy arrays, so that they are written and read as a few large
buffers (``numpy.savez``, ``numpy.load``) instead of one Python object per string.
``pack_strings(strings)`` gives ``(blob, offsets)``: ``blob`` is the concatenation of the
strings' UTF-8 bytes (``uint8``), and string ``i`` is ``blob[offsets[i] : offsets[i + 1]]``
(``offsets`` is ``int64``, ``len(strings) + 1`` long, starting at 0). ``unpack_strings`` is its
inverse.

>>> blob, offsets = pack_strings(["s1", "", "prix < 5 and ville = 'Liège'"])
>>> offsets.tolist()
[0, 2, 2, 31]
>>> unpack_strings(blob, offsets)
['s1', '', "prix < 5 and ville = 'Liège'"]

Filter texts are also kept packed, one ``bytes`` each, by the subscription table
(``SubscriptionTable.pack``): ``pack_texts`` gives a text's UTF-8 bytes with the filter
language's commonest keywords (`` between ``, `` and ``, `` = ``) each replaced by one control
character, so a W1 filter of ten ``between`` predicates (328 characters, 377 bytes as a Python
string) is kept in 172 bytes plus the 33 of a ``bytes`` object. A text that holds NUL or one of
those characters, or that UTF-8 cannot encode (a lone surrogate), is kept as it is, a ``str``:
the packing is exact for every text (``unpack_texts(pack_texts(t)) == t``).

>>> packed = pack_texts(["a1 between 1 and 5 and b = 'x'", "odd \x01 text", ""])
>>> packed
[b"a1\x021\x015\x01b\x03'x'", 'odd \x01 text', b'']
>>> unpack_texts(packed), unpack_text(packed[0])
(["a1 between 1 and 5 and b = 'x'", 'odd \x01 text', ''], "a1 between 1 and 5 and b = 'x'")
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate, compress, repeat
from typing import Final, cast

import numpy as np
import numpy.typing as npt

__all__ = ["pack_strings", "pack_texts", "packable", "unpack_strings", "unpack_text", "unpack_texts"]

_KEYWORDS: Final = ((" between ", "\x02"), (" and ", "\x01"), (" = ", "\x03"))
"""The keywords a packed text holds as one control character each, in the order they are replaced."""
_CODES: Final = tuple(code for _, code in _KEYWORDS)  # a text holding one of them is not packed, nor one with NUL


def pack_strings(strings: Sequence[str]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """The strings as one UTF-8 blob and the offsets of each (see the module docstring)."""
    joined = "".join(strings)
    raw = joined.encode("utf-8")
    if len(raw) == len(joined):  # ASCII: a character is a byte
        lengths = list(map(len, strings))
    else:
        lengths = [len(s.encode("utf-8")) for s in strings]
    offsets = np.fromiter(accumulate(lengths, initial=0), dtype=np.int64, count=len(strings) + 1)
    return np.frombuffer(raw, dtype=np.uint8).copy(), offsets


def unpack_strings(blob: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64]) -> list[str]:
    """The strings that ``pack_strings`` packed into ``blob`` and ``offsets``."""
    raw = blob.tobytes()
    starts, ends = offsets[:-1].tolist(), offsets[1:].tolist()
    if raw.isascii():
        text = raw.decode("ascii")
        return list(map(text.__getitem__, map(slice, starts, ends)))
    return [raw[a:b].decode("utf-8") for a, b in zip(starts, ends, strict=True)]


def pack_texts(texts: Sequence[str]) -> list[str | bytes]:
    """Each text packed (see the module docstring): ``bytes``, or the text itself (a ``str``) when
    it holds NUL or a keyword's character, or UTF-8 cannot encode it. The texts are packed
    together, as one string, unless some cannot be."""
    if not texts:
        return []
    blob = "\x00".join(texts)
    if blob.count("\x00") == len(texts) - 1 and not any(map(blob.__contains__, _CODES)):  # memchr-fast
        try:
            return list(_pack_blob(blob))
        except UnicodeEncodeError:  # a lone surrogate somewhere: text by text below
            pass
    ok = list(map(packable, texts))
    out: list[str | bytes] = list(texts)
    if any(ok):
        packed = iter(_pack_blob("\x00".join(compress(texts, ok))))
        out = [next(packed) if good else text for text, good in zip(texts, ok, strict=True)]
    return out


def unpack_text(value: str | bytes) -> str:
    """The text that ``pack_texts`` packed into ``value`` (a ``str`` is the text itself)."""
    if type(value) is str:
        return value
    text = cast(bytes, value).decode()
    for keyword, code in _KEYWORDS:
        text = text.replace(code, keyword)
    return text


def unpack_texts(values: Sequence[str | bytes]) -> list[str]:
    """``unpack_text`` of each value, the ``bytes`` among them together."""
    packed = list(map(isinstance, values, repeat(bytes)))
    if all(packed) and values:
        return _unpack_blob(b"\x00".join(values))  # type: ignore[arg-type]
    if not any(packed):
        return list(values)  # type: ignore[arg-type]
    texts = iter(_unpack_blob(b"\x00".join(compress(values, packed))))  # type: ignore[arg-type]
    return [next(texts) if p else v for v, p in zip(values, packed, strict=True)]  # type: ignore[misc]


def packable(text: str) -> bool:
    """Whether ``pack_texts`` packs ``text`` (it holds no NUL or keyword character, and UTF-8 encodes it)."""
    if "\x00" in text or any(map(text.__contains__, _CODES)):
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _pack_blob(blob: str) -> list[bytes]:
    for keyword, code in _KEYWORDS:
        blob = blob.replace(keyword, code)
    return blob.encode().split(b"\x00")


def _unpack_blob(raw: bytes) -> list[str]:
    text = raw.decode()
    for keyword, code in _KEYWORDS:
        text = text.replace(code, keyword)
    return text.split("\x00")
