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


# -- the compressors of zarr v2 (numcodecs ids), each bounded -----------------------------------------

#: numcodecs compressor ids :func:`decompress` decodes (what zarr v2 arrays in the wild use).
COMPRESSORS: tuple[str, ...] = ("gzip", "zlib", "bz2", "lzma", "zstd", "blosc", "lz4")
#: Size of the header every blosc buffer starts with (sizes c-blosc would otherwise trust).
BLOSC_HEADER_SIZE = 16


def decompress(
    codec: str,
    data: bytes,
    *,
    max_size: int,
    key: str | None = None,
    offset: int | None = None,
) -> bytes:
    """Undo the numcodecs compressor ``codec`` on ``data``, producing at most ``max_size`` bytes.

    Streams (gzip, zlib, bz2, lzma, zstd) are decoded piecewise with a cap one byte past the budget;
    blosc and lz4 buffers declare their decoded size in a header, which is checked against the
    budget (and against the buffer) before any C code sees the bytes. Failures are
    :class:`ChunkDecodeError` naming ``key`` and ``offset``.
    """
    if codec == "gzip":
        return gunzip(data, key=key, offset=offset, max_size=max_size)
    if codec == "zlib":
        return inflate(data, key=key, offset=offset, max_size=max_size)
    if codec == "bz2":
        import bz2

        return _decode_stream(data, bz2.BZ2Decompressor, (OSError, ValueError), "bz2", key, offset, max_size)
    if codec == "lzma":
        import lzma

        return _decode_stream(data, lzma.LZMADecompressor, lzma.LZMAError, "lzma", key, offset, max_size)
    if codec == "zstd":
        return _decode_zstd(data, key, offset, max_size)
    if codec == "blosc":
        return _decode_blosc(data, key, offset, max_size)
    if codec == "lz4":
        return _decode_lz4(data, key, offset, max_size)
    raise ArgumentError(f"unknown compressor {codec!r}; expected one of {COMPRESSORS}")


def _decode_stream(data: bytes, make: type, errors: type[Exception] | tuple[type[Exception], ...], what: str,
                   key: str | None, offset: int | None, max_size: int) -> bytes:
    """One bz2/lzma stream, at most ``max_size`` bytes, nothing after its end."""
    dec = make()
    try:
        out: bytes = dec.decompress(data, max_size + 1)
    except errors as exc:
        raise ChunkDecodeError(f"bad {what} data ({exc})", key=key, offset=offset) from exc
    if len(out) > max_size:
        raise ChunkDecodeError(f"{what} data decodes to more than {max_size} bytes", key=key, offset=offset)
    if not dec.eof:
        raise ChunkDecodeError(f"{what} stream of {len(data)} bytes is truncated", key=key, offset=offset)
    if dec.unused_data:
        raise ChunkDecodeError(f"{len(dec.unused_data)} bytes after the end of the {what} stream",
                               key=key, offset=offset)
    return out


def _decode_zstd(data: bytes, key: str | None, offset: int | None, max_size: int) -> bytes:
    import io

    import zstandard

    if not data:
        raise ChunkDecodeError("zstd data is empty", key=key, offset=offset)
    parts: list[bytes] = []
    total = 0
    try:
        # A stream reader, not decompress(): frames need not record their content size.
        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
        while block := reader.read(min(1 << 20, max_size + 1 - total)):
            total += len(block)
            if total > max_size:
                raise ChunkDecodeError(f"zstd data decodes to more than {max_size} bytes", key=key, offset=offset)
            parts.append(block)
    except zstandard.ZstdError as exc:
        raise ChunkDecodeError(f"bad zstd data ({exc})", key=key, offset=offset) from exc
    return b"".join(parts)


def _decode_blosc(data: bytes, key: str | None, offset: int | None, max_size: int) -> bytes:
    import struct

    if len(data) < BLOSC_HEADER_SIZE:
        raise ChunkDecodeError(f"blosc: {len(data)} bytes cannot hold the {BLOSC_HEADER_SIZE}-byte header",
                               key=key, offset=offset)
    version, _versionlz, _flags, typesize, nbytes, _blocksize, cbytes = struct.unpack("<BBBBIII", data[:16])
    if nbytes > max_size:
        raise ChunkDecodeError(f"blosc data decodes to {nbytes} bytes, more than {max_size}", key=key, offset=offset)
    if version == 0 or typesize == 0 or cbytes != len(data):
        raise ChunkDecodeError(f"blosc: bad header (version {version}, typesize {typesize}, nbytes {nbytes}, "
                               f"cbytes {cbytes}) for {len(data)} stored bytes", key=key, offset=offset)
    if nbytes == 0:  # c-blosc reports an error for an empty buffer it compressed itself
        return b""
    from numcodecs import blosc

    try:
        return bytes(blosc.decompress(data))
    except Exception as exc:  # numcodecs raises RuntimeError/ValueError with no common base
        raise ChunkDecodeError(f"bad blosc data ({exc})", key=key, offset=offset) from exc


def _decode_lz4(data: bytes, key: str | None, offset: int | None, max_size: int) -> bytes:
    """numcodecs' LZ4: a little-endian uint32 of the decoded size, then one LZ4 block."""
    if len(data) < 4:
        raise ChunkDecodeError(f"lz4: {len(data)} bytes cannot hold the 4-byte size header", key=key, offset=offset)
    nbytes = int.from_bytes(data[:4], "little")
    if nbytes > max_size:
        raise ChunkDecodeError(f"lz4 data decodes to {nbytes} bytes, more than {max_size}", key=key, offset=offset)
    if nbytes == 0:  # numcodecs cannot decode the empty buffer it encodes itself
        return b""
    from numcodecs import lz4

    try:
        return bytes(lz4.decompress(data))
    except Exception as exc:  # numcodecs raises RuntimeError for a bad block
        raise ChunkDecodeError(f"bad lz4 data ({exc})", key=key, offset=offset) from exc
