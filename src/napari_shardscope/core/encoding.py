"""Byte encodings shared by the formats: ``raw`` and ``gzip``.

Neuroglancer precomputed names these in ``minishard_index_encoding`` / ``data_encoding`` (absent
means ``raw``); N5 and zarr v3 have gzip codecs of their own that produce the same RFC 1952 stream.
Decoding failures become :class:`ChunkDecodeError` naming where the bytes came from.

Every decode is capped: a few KB of gzip can inflate to gigabytes, so callers pass the most bytes
the spec implies (a chunk's voxels x item size, an index's entries x entry size) and decoding stops
as soon as the output would exceed it. :data:`MAX_DECODED_BYTES` is the budget when nothing
tighter is known, and also the largest chunk the metadata parsers accept.
"""

from __future__ import annotations

import gzip
import zlib
from typing import Literal

from napari_shardscope.core.errors import ArgumentError, ChunkDecodeError, FormatError

Encoding = Literal["raw", "gzip"]
ENCODINGS: tuple[Encoding, ...] = ("raw", "gzip")

#: The memory budget of one decoded chunk or index (TensorStore allocates per chunk, so one chunk
#: larger than this is refused at parse time, and no decode ever produces more).
MAX_DECODED_BYTES = 1 << 30


def decode_bytes(
    data: bytes,
    encoding: Encoding,
    *,
    key: str | None = None,
    offset: int | None = None,
    max_size: int = MAX_DECODED_BYTES,
    error: type[FormatError] = ChunkDecodeError,
) -> bytes:
    """Undo ``encoding`` on ``data``; ``key``/``offset`` say where ``data`` was stored.

    Output longer than ``max_size`` raises ``error`` (the raw encoding's output is its input, so
    a raw chunk longer than the cap is refused too).
    """
    if encoding == "raw":
        if len(data) > max_size:
            raise error(f"data of {len(data)} bytes is more than the {max_size} bytes expected", key=key, offset=offset)
        return data
    if encoding == "gzip":
        return gunzip(data, key=key, offset=offset, max_size=max_size, error=error)
    raise ArgumentError(f"unknown encoding {encoding!r}; expected one of {ENCODINGS}")


def encode_bytes(data: bytes, encoding: Encoding, level: int = 6) -> bytes:
    """Apply ``encoding`` to ``data`` (gzip with a zero mtime, so output is reproducible)."""
    if encoding == "raw":
        return data
    if encoding == "gzip":
        return gzip.compress(data, compresslevel=level, mtime=0)
    raise ArgumentError(f"unknown encoding {encoding!r}; expected one of {ENCODINGS}")


def gunzip(
    data: bytes,
    *,
    key: str | None = None,
    offset: int | None = None,
    max_size: int = MAX_DECODED_BYTES,
    error: type[FormatError] = ChunkDecodeError,
) -> bytes:
    """Decompress one or more concatenated gzip members, rejecting truncated or trailing bytes."""
    return inflate(data, wbits=31, what="gzip", key=key, offset=offset, max_size=max_size, error=error)


def inflate(
    data: bytes,
    *,
    wbits: int = 15,
    what: str = "zlib",
    key: str | None = None,
    offset: int | None = None,
    max_size: int = MAX_DECODED_BYTES,
    error: type[FormatError] = ChunkDecodeError,
) -> bytes:
    """Decompress deflate streams (``wbits`` as :func:`zlib.decompressobj`), at most ``max_size`` bytes.

    Concatenated members are all decoded (gzip allows them); truncated streams are errors. Output
    is produced at most ``max_size + 1`` bytes at a time, so a bomb costs no more than the cap.
    """
    out: list[bytes] = []
    total = 0
    pos = 0
    view = memoryview(data)
    while True:
        dec = zlib.decompressobj(wbits=wbits)
        chunk = view[pos:]
        try:
            while True:
                piece = dec.decompress(chunk, max_size + 1 - total)
                total += len(piece)
                out.append(piece)
                if total > max_size:
                    raise error(f"{what} data decodes to more than {max_size} bytes", key=key, offset=offset)
                if dec.eof or not dec.unconsumed_tail:
                    break
                chunk = memoryview(dec.unconsumed_tail)
        except zlib.error as exc:
            raise error(f"bad {what} data ({exc})", key=key, offset=offset) from exc
        if not dec.eof:
            raise error(f"{what} stream of {len(data)} bytes is truncated", key=key, offset=offset)
        consumed = len(data) - pos - len(dec.unused_data)
        pos += consumed
        if not dec.unused_data or wbits != 31:
            if dec.unused_data:
                raise error(f"{len(dec.unused_data)} bytes after the end of the {what} stream", key=key, offset=offset)
            break
        if consumed == 0:  # pragma: no cover - zlib always consumes a header
            raise error(f"{what} stream makes no progress", key=key, offset=offset)
    return b"".join(out)
