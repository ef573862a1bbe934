"""Many keys of one width at once: sorted as an array, not as a list of ``bytes`` tuples.

A bulk add writes 10⁵–10⁷ keys of one width (an annotation record key is a prefix byte and a
big-endian id). The engines take their entries in key order; sorting the list of ``(key, value)``
tuples was the largest part of a bulk add after the writes themselves. The escape of the engine
keys (:func:`~.keys.escape_tkey`) keeps the byte order of keys, so sorting the raw keys as an array
sorts the engine keys built from them.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

U8 = npt.NDArray[np.uint8]


def sorted_rows(keys: U8) -> npt.NDArray[np.intp]:
    """The permutation sorting the rows of an ``(n, w)`` uint8 array as bytes (the engines' order)."""
    k = np.ascontiguousarray(keys, dtype=np.uint8)
    n, w = k.shape
    if n < 2 or not w:
        return np.arange(n, dtype=np.intp)
    # NumPy's "S" comparison ignores trailing zero bytes; among keys of one width that keeps byte order
    return np.argsort(k.view(f"S{w}").reshape(-1), kind="stable")


def row_bytes(keys: U8) -> list[bytes]:
    """Each row of an ``(n, w)`` uint8 array as ``bytes`` (one buffer, one slice per row)."""
    k = np.ascontiguousarray(keys, dtype=np.uint8)
    n, w = k.shape
    buf = k.tobytes()
    return [buf[i:i + w] for i in range(0, n * w, w)]


def escaped_keys(head: bytes, keys: U8, tail: bytes) -> list[bytes]:
    """``head + escape_tkey(row) + tail`` of every row of an ``(n, w)`` uint8 array, built as one buffer.

    The engine key of a type-specific key escapes each zero byte as ``00 ff``
    (:func:`~.keys.escape_tkey`), so rows grow by their zero count: every byte's place in the
    output is its row's start, its column and the zeros before it in the row. One ``bytes.replace``
    and three concatenations per key were most of a bulk add's Python time.
    """
    k = np.ascontiguousarray(keys, dtype=np.uint8)
    n, w = k.shape
    if not n:
        return []
    zeros = k == 0
    lengths = len(head) + w + zeros.sum(axis=1, dtype=np.int64) + len(tail)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    out = np.empty(int(ends[-1]), dtype=np.uint8)
    before = np.cumsum(zeros, axis=1, dtype=np.int64) - zeros  # zeros left of each byte, in its row
    pos = starts[:, None] + len(head) + np.arange(w, dtype=np.int64)[None, :] + before
    out[pos] = k
    out[pos[zeros] + 1] = 0xFF
    for i, b in enumerate(head):
        out[starts + i] = b
    for i, b in enumerate(tail):
        out[ends - len(tail) + i] = b
    buf = out.tobytes()
    return [buf[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
