"""Strings packed as numpy arrays: one UTF-8 byte blob and the offsets of its strings.

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
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

import numpy as np
import numpy.typing as npt

__all__ = ["pack_strings", "unpack_strings"]


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
