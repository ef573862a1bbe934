"""Encoding of overlay label blocks (supervoxel ids rewritten by splits) for the versioned store.

A 64³ block of uint64 supervoxel ids is 2 MiB raw but holds a handful of distinct ids. As in DVID's
label-block format, the block is stored as its label table plus, per voxel, an index into the table
in the narrowest unsigned type that fits, then zlib-compressed (level 1: these values are written
on every split and read on every view refresh, so speed beats the last few percent). A real
block comes to ~10–30 KB.

Layout (little endian): magic ``b"SSLB"``, version u8 (1), ndim u8, index itemsize u8, reserved
u8, shape (ndim × u32), label count u32, then zlib(labels (count × u64) + indices).
"""

from __future__ import annotations

import math
import struct

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.encoding import MAX_DECODED_BYTES, inflate, zlib_compress
from napari_shardscope.core.errors import ArgumentError, ChunkDecodeError

MAGIC = b"SSLB"
_HEAD = struct.Struct("<4sBBBB")
_INDEX_TYPES = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def encode_label_block(block: npt.ArrayLike) -> bytes:
    """Encode an array of label ids (any integer dtype ≤ 64 bits, any shape up to 8-D)."""
    arr = np.ascontiguousarray(np.asarray(block).astype(np.uint64, copy=False))
    if arr.ndim > 8 or arr.ndim == 0:
        raise ArgumentError(f"label blocks have 1 to 8 dimensions, got {arr.ndim}")
    labels, inverse = np.unique(arr.reshape(-1), return_inverse=True)
    n = labels.size
    itemsize = 1 if n <= 1 << 8 else 2 if n <= 1 << 16 else 4 if n <= 1 << 32 else 8
    indices = inverse.astype(_INDEX_TYPES[itemsize]).astype(f"<u{itemsize}", copy=False)
    head = _HEAD.pack(MAGIC, 1, arr.ndim, itemsize, 0) + struct.pack(f"<{arr.ndim}I", *arr.shape)
    head += struct.pack("<I", n)
    return head + zlib_compress(labels.astype("<u8").tobytes() + indices.tobytes(), 1)


def decode_label_block(data: bytes, *, key: str | None = None) -> npt.NDArray[np.uint64]:
    """Decode :func:`encode_label_block` output; damaged bytes raise :class:`ChunkDecodeError`."""
    if len(data) < _HEAD.size:
        raise ChunkDecodeError(f"label block header truncated ({len(data)} bytes)", key=key, offset=len(data))
    magic, version, ndim, itemsize, _ = _HEAD.unpack_from(data, 0)
    if magic != MAGIC or version != 1:
        raise ChunkDecodeError("not a shardscope label block (bad magic or version)", key=key, offset=0)
    if not 1 <= ndim <= 8 or itemsize not in _INDEX_TYPES:
        raise ChunkDecodeError(f"bad label block header (ndim {ndim}, index size {itemsize})", key=key, offset=4)
    pos = _HEAD.size
    if len(data) < pos + 4 * ndim + 4:
        raise ChunkDecodeError("label block header truncated", key=key, offset=len(data))
    shape = struct.unpack_from(f"<{ndim}I", data, pos)
    pos += 4 * ndim
    (n,) = struct.unpack_from("<I", data, pos)
    pos += 4
    count = math.prod(shape)
    expected = 8 * n + itemsize * count
    if expected > MAX_DECODED_BYTES:
        raise ChunkDecodeError(f"label block claims {expected} bytes", key=key, offset=_HEAD.size)
    payload = inflate(data[pos:], what="label block zlib", key=key, offset=pos, max_size=expected)
    if len(payload) != expected:
        raise ChunkDecodeError(f"label block payload is {len(payload)} bytes, expected {expected}", key=key, offset=pos)
    labels = np.frombuffer(payload, dtype="<u8", count=n).astype(np.uint64)
    indices = np.frombuffer(payload, dtype=f"<u{itemsize}", count=count, offset=8 * n)
    if count and n == 0:
        raise ChunkDecodeError("label block has voxels but no labels", key=key, offset=pos)
    if count and int(indices.max()) >= n:
        raise ChunkDecodeError("label block index points past its label table", key=key, offset=pos)
    out: npt.NDArray[np.uint64] = labels[indices].reshape(shape)
    return out
