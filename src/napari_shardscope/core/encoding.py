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
from dataclasses import dataclass
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
    exact: bool = False,
    blosc: BloscExpected | None = None,
) -> bytes:
    """Undo the numcodecs compressor ``codec`` on ``data``, producing at most ``max_size`` bytes.

    Streams (gzip, zlib, bz2, lzma, zstd) are decoded piecewise with a cap one byte past the budget;
    blosc and lz4 buffers declare their decoded size in a header, which is checked against the
    budget (and against the buffer) before any C code sees the bytes; so is a zstd frame's content
    size. ``exact``: the data must decode to ``max_size`` bytes, and a header saying otherwise is
    refused before decoding. ``blosc`` is what the codec's configuration says of a blosc header.
    Failures are :class:`ChunkDecodeError` naming ``key`` and ``offset``.
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
        return _decode_zstd(data, key, offset, max_size, exact)
    if codec == "blosc":
        said = blosc or BloscExpected()
        if exact:
            said = BloscExpected(said.cname, said.shuffle, said.typesizes, max_size)
        return _decode_blosc(data, key, offset, max_size, said)
    if codec == "lz4":
        return _decode_lz4(data, key, offset, max_size, exact)
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


def check_zstd_frame(data: bytes, *, max_size: int, exact: bool = False, key: str | None = None,
                     offset: int | None = None) -> None:
    """Check the first zstd frame's header: a content size it declares must fit ``max_size`` (equal it if ``exact``).

    The decoder bounds its output anyway; this names the lying header, before any decoding, as
    the field it is (the frame header's content size).
    """
    import zstandard

    if not data:
        raise ChunkDecodeError("zstd data is empty", key=key, offset=offset)
    try:
        params = zstandard.get_frame_parameters(data)
    except zstandard.ZstdError as exc:
        raise ChunkDecodeError(f"bad zstd frame header ({exc})", key=key, offset=offset) from exc
    size = params.content_size
    if size == zstandard.CONTENTSIZE_UNKNOWN:
        return
    if size > max_size or (exact and size != max_size):
        raise ChunkDecodeError(f"zstd frame header declares {size} bytes of content, the chunk has "
                               f"{'' if exact else 'at most '}{max_size}", key=key,
                               offset=None if offset is None else offset + 4)


def _decode_zstd(data: bytes, key: str | None, offset: int | None, max_size: int, exact: bool = False) -> bytes:
    import io

    import zstandard

    check_zstd_frame(data, max_size=max_size, exact=exact, key=key, offset=offset)
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


#: c-blosc 1's compressor codes (header flags >> 5) by the names codec configurations use.
BLOSC_COMPRESSOR_CODES = {"blosclz": 0, "lz4": 1, "lz4hc": 1, "snappy": 2, "zlib": 3, "zstd": 4}
BLOSC_DOSHUFFLE, BLOSC_MEMCPYED, BLOSC_DOBITSHUFFLE, BLOSC_DONT_SPLIT = 0x01, 0x02, 0x04, 0x10
#: Header format versions c-blosc 1 reads (it writes 2).
BLOSC_VERSIONS = (1, 2)


@dataclass(frozen=True)
class BloscExpected:
    """What a blosc buffer's header must say, from the codec's configuration and the chunk (``None``: unknown).

    ``shuffle`` is 0 (none), 1 (byte) or 2 (bit): a header that shuffles otherwise (or not at all)
    decodes to other bytes than were written, with no error, so it is refused. ``typesizes`` are the element sizes a
    writer may have shuffled by (the data type's, the configuration's): a shuffling header with another
    type size unshuffles into other bytes too. Writers disagree about the type size of unshuffled data
    (zarrita writes the data type's under a configuration that names another), so it is not checked there.
    """

    cname: str | None = None
    shuffle: int | None = None
    typesizes: tuple[int, ...] = ()
    nbytes: int | None = None


@dataclass(frozen=True)
class BloscHeader:
    """The 16-byte header of a c-blosc 1 buffer."""

    version: int
    versionlz: int
    flags: int
    typesize: int
    nbytes: int
    blocksize: int
    cbytes: int

    @property
    def memcpyed(self) -> bool:
        return bool(self.flags & BLOSC_MEMCPYED)


def check_blosc_header(data: bytes, *, max_size: int, expected: BloscExpected = BloscExpected(),
                       key: str | None = None, offset: int | None = None) -> BloscHeader:
    """Check every field of a blosc buffer's header, and its block offsets, before c-blosc reads them.

    c-blosc trusts the header's sizes and the table of block starts after it; here they must hold
    for the bytes we have: the buffer's length is ``cbytes``; ``nbytes`` is the chunk's size (at most
    ``max_size``); a stored-raw buffer (``memcpyed``) is that many bytes after the header; otherwise
    ``blocksize`` splits ``nbytes`` into blocks whose starts all lie after the table and inside the
    buffer. Version, flags, compressor, shuffle and type size must agree with the format and with
    ``expected``. Failures are :class:`ChunkDecodeError` at the offending field's byte offset.
    """
    import struct

    def fail(message: str, at: int) -> ChunkDecodeError:
        return ChunkDecodeError(f"blosc: {message}", key=key, offset=None if offset is None else offset + at)

    if len(data) < BLOSC_HEADER_SIZE:
        raise fail(f"{len(data)} bytes cannot hold the {BLOSC_HEADER_SIZE}-byte header", 0)
    head = BloscHeader(*struct.unpack_from("<BBBBIII", data, 0))
    if head.version not in BLOSC_VERSIONS:
        raise fail(f"header format version {head.version} (c-blosc 1 reads {list(BLOSC_VERSIONS)})", 0)
    known = BLOSC_DOSHUFFLE | BLOSC_MEMCPYED | BLOSC_DOBITSHUFFLE | BLOSC_DONT_SPLIT | 0xE0
    code = head.flags >> 5
    if head.flags & ~known or code > max(BLOSC_COMPRESSOR_CODES.values()):
        raise fail(f"flags {head.flags:#04x} hold bits c-blosc 1 does not define", 2)
    if expected.cname is not None and BLOSC_COMPRESSOR_CODES.get(expected.cname) != code:
        raise fail(f"compressed with compressor code {code}, the codec says {expected.cname!r}", 2)
    byte, bit = bool(head.flags & BLOSC_DOSHUFFLE), bool(head.flags & BLOSC_DOBITSHUFFLE)
    # c-blosc sets the flag of the shuffle it was asked for, whatever the type size or level (even on
    # a buffer it stored raw), so a configured shuffle pins both flags.
    if (byte and bit) or (expected.shuffle is not None and (byte, bit) != (expected.shuffle == 1,
                                                                          expected.shuffle == 2)):
        said = {0: "no shuffle", 1: "byte shuffle", 2: "bit shuffle", None: "a shuffle"}[expected.shuffle]
        raise fail(f"flags {head.flags:#04x} shuffle otherwise than the codec's {said}", 2)
    if head.typesize == 0:
        raise fail("type size 0", 3)
    if expected.typesizes and head.typesize not in expected.typesizes and (byte or bit):
        raise fail(f"shuffled by a type size of {head.typesize}, the data's elements have "
                   f"{' or '.join(map(str, expected.typesizes))} bytes", 3)
    if head.nbytes > max_size:
        raise fail(f"data decodes to {head.nbytes} bytes, more than {max_size}", 4)
    if expected.nbytes is not None and head.nbytes != expected.nbytes:
        raise fail(f"data decodes to {head.nbytes} bytes, the chunk has {expected.nbytes}", 4)
    if head.cbytes != len(data):
        raise fail(f"header says {head.cbytes} compressed bytes, the buffer holds {len(data)}", 12)
    if head.nbytes == 0:
        return head
    if head.memcpyed:
        if head.cbytes != BLOSC_HEADER_SIZE + head.nbytes:
            raise fail(f"stored raw ({head.nbytes} bytes) in a buffer of {head.cbytes}", 12)
        return head
    if not 1 <= head.blocksize <= head.nbytes:
        raise fail(f"block size {head.blocksize} for {head.nbytes} bytes", 8)
    nblocks = -(-head.nbytes // head.blocksize)
    table_end = BLOSC_HEADER_SIZE + 4 * nblocks
    if table_end > head.cbytes:
        raise fail(f"{nblocks} block starts do not fit in the {head.cbytes}-byte buffer", 8)
    import numpy as np

    starts = np.frombuffer(data, dtype="<u4", count=nblocks, offset=BLOSC_HEADER_SIZE)
    bad = (starts < table_end) | (starts >= head.cbytes)
    if bad.any():
        i = int(np.argmax(bad))
        raise fail(f"block {i} starts at byte {int(starts[i])}, outside {table_end}..{head.cbytes}",
                   BLOSC_HEADER_SIZE + 4 * i)
    return head


def _decode_blosc(data: bytes, key: str | None, offset: int | None, max_size: int,
                  expected: BloscExpected = BloscExpected()) -> bytes:
    head = check_blosc_header(data, max_size=max_size, expected=expected, key=key, offset=offset)
    if head.nbytes == 0:  # c-blosc reports an error for an empty buffer it compressed itself
        return b""
    from numcodecs import blosc

    try:
        out = bytes(blosc.decompress(data))
    except Exception as exc:  # numcodecs raises RuntimeError/ValueError with no common base
        raise ChunkDecodeError(f"bad blosc data ({exc})", key=key, offset=offset) from exc
    if len(out) != head.nbytes:  # pragma: no cover - c-blosc returns what the checked header says
        raise ChunkDecodeError(f"blosc data decoded to {len(out)} bytes, its header says {head.nbytes}", key=key,
                               offset=offset)
    return out


def _decode_lz4(data: bytes, key: str | None, offset: int | None, max_size: int, exact: bool = False) -> bytes:
    """numcodecs' LZ4: a little-endian uint32 of the decoded size, then one LZ4 block."""
    if len(data) < 4:
        raise ChunkDecodeError(f"lz4: {len(data)} bytes cannot hold the 4-byte size header", key=key, offset=offset)
    nbytes = int.from_bytes(data[:4], "little")
    if nbytes > max_size or (exact and nbytes != max_size):
        raise ChunkDecodeError(f"lz4 data decodes to {nbytes} bytes, the chunk has {'' if exact else 'at most '}"
                               f"{max_size}", key=key, offset=offset)
    if nbytes == 0:  # numcodecs cannot decode the empty buffer it encodes itself
        return b""
    from numcodecs import lz4

    try:
        return bytes(lz4.decompress(data))
    except Exception as exc:  # numcodecs raises RuntimeError for a bad block
        raise ChunkDecodeError(f"bad lz4 data ({exc})", key=key, offset=offset) from exc
