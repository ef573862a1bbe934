"""Byte encodings shared by the formats: ``raw`` and ``gzip``.

Neuroglancer precomputed names these in ``minishard_index_encoding`` / ``data_encoding`` (absent
means ``raw``); N5 and zarr v3 have gzip codecs of their own that produce the same RFC 1952 stream.
Decoding failures become :class:`ChunkDecodeError` naming where the bytes came from.
"""

from __future__ import annotations

import gzip
import zlib
from typing import Literal

from napari_shardscope.core.errors import ArgumentError, ChunkDecodeError

Encoding = Literal["raw", "gzip"]
ENCODINGS: tuple[Encoding, ...] = ("raw", "gzip")


def decode_bytes(data: bytes, encoding: Encoding, *, key: str | None = None, offset: int | None = None) -> bytes:
    """Undo ``encoding`` on ``data``; ``key``/``offset`` say where ``data`` was stored."""
    if encoding == "raw":
        return data
    if encoding == "gzip":
        return gunzip(data, key=key, offset=offset)
    raise ArgumentError(f"unknown encoding {encoding!r}; expected one of {ENCODINGS}")


def encode_bytes(data: bytes, encoding: Encoding, level: int = 6) -> bytes:
    """Apply ``encoding`` to ``data`` (gzip with a zero mtime, so output is reproducible)."""
    if encoding == "raw":
        return data
    if encoding == "gzip":
        return gzip.compress(data, compresslevel=level, mtime=0)
    raise ArgumentError(f"unknown encoding {encoding!r}; expected one of {ENCODINGS}")


def gunzip(data: bytes, *, key: str | None = None, offset: int | None = None) -> bytes:
    """Decompress one or more concatenated gzip members, rejecting truncated or trailing bytes."""
    out = []
    pos = 0
    while True:
        dec = zlib.decompressobj(wbits=31)
        try:
            out.append(dec.decompress(data[pos:]))
            out.append(dec.flush())
        except zlib.error as exc:
            raise ChunkDecodeError(f"bad gzip data ({exc})", key=key, offset=offset) from exc
        if not dec.eof:
            raise ChunkDecodeError(f"gzip stream of {len(data)} bytes is truncated", key=key, offset=offset)
        consumed = len(data) - pos - len(dec.unused_data)
        pos += consumed
        if not dec.unused_data:
            break
        if consumed == 0:  # pragma: no cover - zlib always consumes a header
            raise ChunkDecodeError("gzip stream makes no progress", key=key, offset=offset)
    return b"".join(out)
