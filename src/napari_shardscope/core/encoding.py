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

import zlib
from typing import Any, Literal

from napari_shardscope.core import libdeflate
from napari_shardscope.core.errors import ArgumentError, ChunkDecodeError, FormatError, UnsupportedFeatureError

Encoding = Literal["raw", "gzip"]
ENCODINGS: tuple[Encoding, ...] = ("raw", "gzip")

#: The memory budget of one decoded chunk or index (TensorStore allocates per chunk, so one chunk
#: larger than this is refused at parse time, and no decode ever produces more).
MAX_DECODED_BYTES = 1 << 30

#: The gzip level precomputed writers use unless told otherwise: TensorStore's. Its
#: ``neuroglancer_uint64_sharded`` encoder compresses shard data and minishard indexes at zlib
#: level 9 (``EncodeData`` in ``uint64_sharded_encoder.cc``), so an export and TensorStore's write
#: of the same volume are compared at equal compression.
DEFAULT_GZIP_LEVEL = 9

#: The libdeflate level that compresses like zlib's level ``i`` (index): within ~5% of zlib's output
#: size, and faster. libdeflate's own numbers search less than zlib's from 6 up: at 6, label
#: volumes (igneous pinky, 64³ uint64 blocks) come out 1.12-1.17x zlib 6's size, at 7 1.00-1.01x
#: and still 1.0-1.6x faster; zlib 7 ~ libdeflate 8 (0.95-0.97x), zlib 8 and 9 ~ libdeflate 9
#: (1.02-1.04x). Images barely compress and come out the same size at any level. A level given to
#: us means zlib's (TensorStore's, N5's, numcodecs'), so the output a user gets is the size the
#: level promises elsewhere.
LIBDEFLATE_LEVEL_FOR_ZLIB = (0, 1, 2, 3, 4, 5, 7, 8, 9, 9)


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


def encode_bytes(data: bytes, encoding: Encoding, level: int = DEFAULT_GZIP_LEVEL) -> bytes:
    """Apply ``encoding`` to ``data`` (gzip with a zero mtime, so output is reproducible)."""
    if encoding == "raw":
        return data
    if encoding == "gzip":
        return gzip_compress(data, level)
    raise ArgumentError(f"unknown encoding {encoding!r}; expected one of {ENCODINGS}")


def gzip_compress(data: bytes | bytearray | memoryview, level: int = DEFAULT_GZIP_LEVEL) -> bytes:
    """One gzip member (RFC 1952, zero mtime) at zlib-style ``level`` 0-9, compressed by libdeflate.

    ``level`` is zlib's, mapped to the libdeflate level of the same output size
    (:data:`LIBDEFLATE_LEVEL_FOR_ZLIB`), so a level asked of TensorStore or zlib means the same here.
    """
    check_level(level)
    if not libdeflate.can_compress():  # pragma: no cover - the deflate package is a dependency
        import gzip

        return gzip.compress(data, compresslevel=level, mtime=0)
    return libdeflate.compress(data, "gzip", LIBDEFLATE_LEVEL_FOR_ZLIB[level])


def zlib_compress(data: bytes | bytearray | memoryview, level: int = DEFAULT_GZIP_LEVEL) -> bytes:
    """One zlib stream (RFC 1950) at ``level`` 0-9, compressed by libdeflate."""
    check_level(level)
    if not libdeflate.can_compress():  # pragma: no cover - the deflate package is a dependency
        return zlib.compress(data, level)
    return libdeflate.compress(data, "zlib", LIBDEFLATE_LEVEL_FOR_ZLIB[level])


def deflate_compress(data: bytes | bytearray | memoryview, level: int = DEFAULT_GZIP_LEVEL) -> bytes:
    """A bare DEFLATE stream (RFC 1951) at ``level`` 0-9, for formats that frame it themselves (N5's gzip)."""
    check_level(level)
    if not libdeflate.can_compress():  # pragma: no cover - the deflate package is a dependency
        packer = zlib.compressobj(level, zlib.DEFLATED, -15)
        return packer.compress(data) + packer.flush()
    return libdeflate.compress(data, "deflate", LIBDEFLATE_LEVEL_FOR_ZLIB[level])


def crc32(data: bytes | bytearray | memoryview) -> int:
    """The CRC-32 of ``data`` (a gzip trailer's), by libdeflate when it is there."""
    if not libdeflate.can_compress():  # pragma: no cover - the deflate package is a dependency
        return zlib.crc32(data) & 0xFFFFFFFF
    return libdeflate.crc32(data)


def check_level(level: object) -> None:
    """Refuse a compression level outside zlib's 0-9 with an :class:`ArgumentError`."""
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 9:
        raise ArgumentError(f"compression level must be an integer in [0, 9], got {level!r}")


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


def gunzip_into(data: bytes, out: Any, *, key: str | None = None, offset: int | None = None,
                error: type[FormatError] = ChunkDecodeError) -> None:
    """Decompress gzip ``data`` into ``out`` (a writable C- or F-contiguous numpy array), which it must fill exactly.

    The chunk's size is known before its bytes are read, so the output goes straight into its place
    (no buffer allocated, grown or copied) and decoding stops at ``out.nbytes``: a bomb costs no more.
    Anything libdeflate refuses (bad data, more than ``out.nbytes``) is decoded again by :func:`gunzip`
    for the error message, as in :func:`inflate`; a stream of another decoded length is ``error`` too.
    """
    size = int(out.nbytes)
    got = inflate_into(data, int(out.ctypes.data), size, wbits=31, what="gzip", key=key, offset=offset, error=error)
    if got != size:
        raise error(f"gzip data decodes to {got} bytes, expected {size}", key=key, offset=offset)


def inflate_into(data: bytes, address: int, size: int, *, wbits: int = 15, what: str = "zlib",
                 key: str | None = None, offset: int | None = None,
                 error: type[FormatError] = ChunkDecodeError, start: int = 0) -> int:
    """Decompress ``data[start:]`` (``wbits`` 15: zlib, 31: gzip members) into the ``size`` bytes at ``address``.

    Returns how many bytes were written (the caller checks that against what it expects). Output
    longer than ``size``, bad or truncated data and trailing bytes are ``error`` with the message
    and offset :func:`inflate` gives (zlib decodes the refused data again to name the fault), so
    the output goes straight into its place and a bomb costs no more than ``size`` bytes of work.
    The caller keeps the memory at ``address`` alive and writable for the call. ``start`` skips a
    header before the stream without copying the rest (``offset`` is where ``data[start:]`` is stored).
    """
    if libdeflate.available() and wbits in (15, 31):
        try:
            return libdeflate.inflate_into(data if isinstance(data, bytes) else bytes(data),
                                           "gzip" if wbits == 31 else "zlib", address, size, start)
        except libdeflate.InflateError:
            pass  # bad data or more than ``size`` bytes: zlib below says which, in the project's words
    if start:
        data = data[start:]
    decoded = _inflate_zlib(data, wbits=wbits, what=what, key=key, offset=offset, max_size=size, error=error)
    if decoded:
        import ctypes

        ctypes.memmove(address, decoded, len(decoded))
    return len(decoded)


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

    libdeflate decodes (several times faster than zlib, GIL released); anything it refuses is
    decoded again by zlib, so errors and their messages are zlib's and the two never disagree.
    A damaged, truncated or extra member is named by where it starts (``offset`` plus its position
    in ``data``); output past ``max_size`` by ``offset``.
    """
    if libdeflate.available() and wbits in (15, 31):
        try:
            return libdeflate.inflate(data if isinstance(data, bytes) else bytes(data),
                                      "gzip" if wbits == 31 else "zlib", max_size)
        except libdeflate.InflateError:
            pass  # zlib below names the fault (and the position) in the project's words
    return _inflate_zlib(data, wbits=wbits, what=what, key=key, offset=offset, max_size=max_size, error=error)


#: The first window of input :func:`_inflate_zlib` gives zlib per member (doubled, up to the maximum, as it goes on).
ZLIB_FIRST_WINDOW = 1 << 10
ZLIB_MAX_WINDOW = 1 << 20


def _inflate_zlib(
    data: bytes,
    *,
    wbits: int,
    what: str,
    key: str | None,
    offset: int | None,
    max_size: int,
    error: type[FormatError],
) -> bytes:
    """:func:`inflate` with CPython's zlib (the reference the libdeflate path must agree with)."""
    out: list[bytes] = []
    total = 0
    pos = 0
    view = memoryview(data)
    while True:
        dec = zlib.decompressobj(wbits=wbits)
        # The member's input is fed in windows that start small and double: zlib copies the input left
        # after a member into ``unused_data``, so feeding the whole rest made many tiny members cost
        # time quadratic in the input's length; this way a member costs at most twice its own length.
        fed = pos
        window = ZLIB_FIRST_WINDOW
        try:
            while True:
                if dec.unconsumed_tail:
                    chunk: bytes | memoryview = dec.unconsumed_tail
                elif fed < len(data):
                    chunk = view[fed:fed + window]
                    fed += len(chunk)
                    window = min(2 * window, ZLIB_MAX_WINDOW)
                else:
                    break  # all input given and the stream has not ended: truncated
                piece = dec.decompress(chunk, max_size + 1 - total)
                total += len(piece)
                out.append(piece)
                if total > max_size:
                    raise error(f"{what} data decodes to more than {max_size} bytes", key=key, offset=offset)
                if dec.eof:
                    break
        except zlib.error as exc:
            zlib_inside = wbits == 31 and _is_zlib_header(view[pos:pos + 2])
            hint = "; the bytes are a zlib stream, not gzip" if zlib_inside else ""
            raise error(f"bad {what} data ({exc}{hint})", key=key, offset=_at(offset, pos)) from exc
        if not dec.eof:
            raise error(f"{what} stream of {len(data) - pos} bytes is truncated", key=key, offset=_at(offset, pos))
        consumed = fed - pos - len(dec.unused_data)
        pos += consumed
        rest = len(data) - pos  # bytes after this member (fed or not yet)
        if not rest or wbits != 31:
            if rest:
                raise error(f"{rest} bytes after the end of the {what} stream", key=key, offset=_at(offset, pos))
            break
        if consumed == 0:  # pragma: no cover - zlib always consumes a header
            raise error(f"{what} stream makes no progress", key=key, offset=_at(offset, pos))
    return b"".join(out)


def _at(offset: int | None, pos: int) -> int | None:
    """Where the member at ``pos`` of data stored at ``offset`` starts (unknown when ``offset`` is)."""
    return None if offset is None else offset + pos


def _is_zlib_header(head: memoryview) -> bool:
    """Whether two bytes open a zlib stream (deflate, checksum of RFC 1950): a writer's zlib where gzip is declared."""
    return len(head) == 2 and head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0


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


def unbrotli(data: bytes, *, key: str | None = None, offset: int | None = None, max_size: int) -> bytes:
    """Decompress a brotli stream (CloudVolume's ``NAME.br`` chunk files), at most ``max_size`` bytes.

    The ``brotli`` package's output limit stops the decoder once the budget is reached, so a bomb
    costs no more than the cap.
    """
    try:
        import brotli
    except ImportError as exc:  # pragma: no cover - brotli is in the codecs extra
        raise UnsupportedFeatureError("brotli-compressed chunks need the 'brotli' package", key=key,
                                      detail="pip install 'napari-shardscope[codecs]'") from exc
    dec = brotli.Decompressor()
    try:
        out = dec.process(data, output_buffer_limit=max_size + 1)
        while len(out) <= max_size and not dec.is_finished() and not dec.can_accept_more_data():
            out += dec.process(b"", output_buffer_limit=max_size + 1 - len(out))
    except brotli.error as exc:
        raise ChunkDecodeError(f"bad brotli data ({exc})", key=key, offset=offset) from exc
    if len(out) > max_size:
        raise ChunkDecodeError(f"brotli data decodes to more than {max_size} bytes", key=key, offset=offset)
    if not dec.is_finished():
        raise ChunkDecodeError(f"brotli stream of {len(data)} bytes is truncated", key=key, offset=offset)
    return bytes(out)


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
