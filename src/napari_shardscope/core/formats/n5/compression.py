"""N5 block compressions: parsing the ``compression`` attribute, decoding and encoding block data.

The N5 spec names ``raw``, ``gzip`` (``useZlib: true`` = a zlib stream rather than gzip), ``bzip2``,
``xz`` and ``lz4``; ``blosc`` and ``zstd`` are the common compression annotations (n5-blosc,
n5-zstandard) that TensorStore also writes. Each decoder is *bounded*: it never produces more than
the block's expected byte count plus one, so a corrupted header or a compression bomb gives a typed
error instead of exhausting memory, and a stream that decodes to the wrong size is reported as such
(TensorStore refuses those blocks too).

Encoders exist for every type so tests and writers can produce blocks; ``gzip`` is written with the
header Java's ``GZIPOutputStream`` writes (no mtime, ``XFL`` 0, ``OS`` 0) around a DEFLATE stream
from libdeflate at the level that matches zlib's output size for the level asked
(:data:`~napari_shardscope.core.encoding.LIBDEFLATE_LEVEL_FOR_ZLIB`: the default 6 is libdeflate's 7),
faster than zlib (``bench/n5_gzip.py``). The bytes therefore differ from Java's or TensorStore's (zlib's); every
reader (n5-java, TensorStore, zarr-python/numcodecs, z5) decodes them, which the tests check.

gzip and zlib go through :mod:`napari_shardscope.core.encoding` both ways, the one door to
libdeflate (and to CPython's zlib where libdeflate cannot load): decoding writes straight into the
block's buffer, stops at its size (a bomb costs nothing), decodes every concatenated gzip member,
and names the member's byte offset when one is damaged.
"""

from __future__ import annotations

import bz2
import ctypes
import io
import lzma
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from napari_shardscope.core import encoding, libdeflate
from napari_shardscope.core.errors import ArgumentError, ChunkDecodeError, MetadataError, UnsupportedFeatureError
from napari_shardscope.core.formats.n5.lz4_stream import (
    DEFAULT_BLOCK_SIZE,
    MAX_BLOCK_SIZE,
    MIN_BLOCK_SIZE,
    UnsupportedCompressionError,
    decode_lz4_stream,
    encode_lz4_stream,
)

COMPRESSION_TYPES = ("raw", "gzip", "bzip2", "xz", "lz4", "blosc", "zstd")
BLOSC_CNAMES = ("blosclz", "lz4", "lz4hc", "snappy", "zlib", "zstd")
#: A Java gzip member header: magic, deflate, no flags, mtime 0, XFL 0, OS 0 (as in the N5 spec's example).
JAVA_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x00"
BLOSC_HEADER_SIZE = 16
#: The deflate level N5's gzip ``level`` -1 stands for: zlib's ``Z_DEFAULT_COMPRESSION`` (6), which Java
#: N5's ``GzipCompression`` (``Deflater.DEFAULT_COMPRESSION``) and TensorStore's ``n5`` driver (level -1
#: unless given) both compress at. The attribute's default stays -1, as theirs does.
DEFAULT_DEFLATE_LEVEL = 6


@dataclass(frozen=True)
class Compression:
    """A dataset's ``compression`` attribute, with the defaults Java N5 applies filled in.

    Only the fields of :attr:`type` are meaningful; :meth:`to_json` emits exactly those.

    Attributes
    ----------
    type
        One of :data:`COMPRESSION_TYPES`.
    level
        gzip: -1 (zlib's default) .. 9; zstd: the zstd level.
    use_zlib
        gzip: the data is a zlib (RFC 1950) stream instead of a gzip (RFC 1952) member.
    block_size
        bzip2: 1..9 (×100 kB); lz4: decompressed bytes per LZ4Block (default 65536).
    preset
        xz: 0..9.
    cname, clevel, shuffle, blosc_blocksize
        blosc: inner codec name, level 0..9, 0 none / 1 byte / 2 bit shuffle, block size (0 = auto).
    """

    type: str = "raw"
    level: int = -1
    use_zlib: bool = False
    block_size: int = 0
    preset: int = 6
    cname: str = "lz4"
    clevel: int = 5
    shuffle: int = 1
    blosc_blocksize: int = 0

    def to_json(self) -> dict[str, Any]:
        """The attribute as N5 spells it (what ``attributes.json`` holds)."""
        if self.type == "gzip":
            return {"type": "gzip", "level": self.level, "useZlib": self.use_zlib}
        if self.type in ("bzip2", "lz4"):
            return {"type": self.type, "blockSize": self.block_size}
        if self.type == "xz":
            return {"type": "xz", "preset": self.preset}
        if self.type == "blosc":
            return {"type": "blosc", "cname": self.cname, "clevel": self.clevel, "shuffle": self.shuffle,
                    "blocksize": self.blosc_blocksize}
        if self.type == "zstd":
            return {"type": "zstd", "level": self.level}
        return {"type": self.type}


def make_compression(kind: str, **params: Any) -> Compression:
    """A :class:`Compression` of type ``kind`` with N5's defaults, overridden by N5-spelled ``params``.

    ``make_compression("gzip", useZlib=True)`` is the same as parsing
    ``{"type": "gzip", "useZlib": true}``.
    """
    return parse_compression({"type": kind, **params})


def parse_compression(value: Any, *, key: str | None = None, field: str = "compression") -> Compression:
    """Parse the ``compression`` attribute of a dataset.

    Parameters
    ----------
    value
        The JSON value of the attribute.
    key
        The ``attributes.json`` key, for error messages.
    field
        The attribute's name in messages.

    Raises
    ------
    MetadataError
        Naming the field and the value: not an object, no ``type``, a parameter of the wrong type
        or out of range.
    UnsupportedFeatureError
        For a compression ``type`` we do not implement (N5 lets libraries add their own).
    """
    if not isinstance(value, Mapping):
        raise MetadataError(f"field {field!r} must be an object with a 'type', got {value!r}", key=key)
    kind = value.get("type")
    if not isinstance(kind, str) or not kind:
        raise MetadataError(f"field '{field}.type' must be a compression name, got {kind!r}", key=key)
    if kind not in COMPRESSION_TYPES:  # N5 compressions are open-ended (n5-zstandard, n5-blosc, …)
        raise UnsupportedFeatureError(f"N5 compression {kind!r} (field '{field}.type')", key=key,
                                      detail=f"shardscope reads {', '.join(COMPRESSION_TYPES)}")

    def number(name: str, default: int, lo: int, hi: int) -> int:
        got = value.get(name, default)
        if isinstance(got, bool) or not isinstance(got, int) or not lo <= got <= hi:
            raise MetadataError(f"field '{field}.{name}' must be an integer in [{lo}, {hi}], got {got!r}", key=key)
        return got

    if kind == "gzip":
        use_zlib = value.get("useZlib", False)
        if not isinstance(use_zlib, bool):
            raise MetadataError(f"field '{field}.useZlib' must be true or false, got {use_zlib!r}", key=key)
        return Compression("gzip", level=number("level", -1, -1, 9), use_zlib=use_zlib)
    if kind == "bzip2":
        return Compression("bzip2", block_size=number("blockSize", 9, 1, 9))
    if kind == "xz":
        return Compression("xz", preset=number("preset", 6, 0, 9))
    if kind == "lz4":
        return Compression("lz4", block_size=number("blockSize", DEFAULT_BLOCK_SIZE, MIN_BLOCK_SIZE, MAX_BLOCK_SIZE))
    if kind == "zstd":
        return Compression("zstd", level=number("level", 3, -(1 << 17), 22))
    if kind == "blosc":
        cname = value.get("cname", "lz4")
        if cname not in BLOSC_CNAMES:
            raise MetadataError(f"field '{field}.cname' has unsupported value {cname!r}; "
                                f"expected one of {list(BLOSC_CNAMES)}", key=key)
        return Compression("blosc", cname=cname, clevel=number("clevel", 5, 0, 9),
                           shuffle=number("shuffle", 1, 0, 2),
                           blosc_blocksize=number("blocksize", 0, 0, (1 << 31) - 1))
    return Compression("raw")


# -- decoding ----------------------------------------------------------------------------------


def decode_payload(payload: bytes, compression: Compression, expected_nbytes: int, *,
                   key: str | None = None, offset: int = 0, itemsize: int | None = None) -> bytes | bytearray:
    """Decompress a block's data (the bytes after its header) to exactly ``expected_nbytes``.

    Parameters
    ----------
    payload
        The compressed data.
    compression
        The dataset's compression.
    expected_nbytes
        Elements × item size the header promises; more or fewer decoded bytes is an error.
    key, offset
        Where ``payload`` is stored (``offset`` = header length), for error messages.
    itemsize
        Bytes per element (the data type's), which a blosc header's type size must match when it shuffles.

    Raises
    ------
    ChunkDecodeError
        The data cannot be decoded, or decodes to the wrong number of bytes.
    UnsupportedCompressionError
        The optional package the compression needs is not installed.
    """
    decoder = _DECODERS.get(compression.type)
    if decoder is None:  # pragma: no cover - parse_compression admits only known types
        raise UnsupportedCompressionError(f"cannot decode N5 compression {compression.type!r}",
                                          key=key, offset=offset)
    out = decoder(payload, compression, expected_nbytes, key, offset, itemsize)
    if len(out) != expected_nbytes:
        size = f"more than {expected_nbytes}" if len(out) > expected_nbytes else str(len(out))
        raise ChunkDecodeError(f"{_label(compression)} data decodes to {size} bytes, expected {expected_nbytes}",
                               key=key, offset=offset)
    return out


def _label(compression: Compression) -> str:
    return "zlib" if compression.type == "gzip" and compression.use_zlib else compression.type


#: A decoder returns bytes, or a bytearray it decoded into in place (gzip: no copy on the way to numpy).
#: Its arguments: payload, compression, expected bytes, key, offset, item size (when known).
Decoder = Callable[[bytes, Compression, int, str | None, int, int | None], bytes | bytearray]


def _decode_raw(payload: bytes, compression: Compression, expected: int, key: str | None,
                offset: int, itemsize: int | None = None) -> bytes:
    return bytes(payload)


def _decode_gzip(payload: bytes, compression: Compression, expected: int, key: str | None,
                 offset: int, itemsize: int | None = None) -> bytearray:
    """gzip members (all of them: Java and pigz-style writers may concatenate) or one zlib stream.

    Decoded straight into a buffer of the expected size; more output than that is an error there,
    before anything past it is produced. Fewer bytes come back short for :func:`decode_payload` to report.
    The buffer is no larger than DEFLATE can expand ``payload`` to, so a header promising gigabytes
    over a few bytes of data costs no allocation (that block decodes short, an error all the same).
    """
    room = min(expected, libdeflate.MAX_DEFLATE_RATIO * len(payload))
    out = bytearray(room)
    address = ctypes.addressof(ctypes.c_char.from_buffer(out)) if room else 0
    got = inflate_gzip_into(payload, compression, address, room, key=key, offset=offset)
    del out[got:]
    return out


def inflate_gzip_into(payload: bytes, compression: Compression, address: int, size: int, *,
                      key: str | None = None, offset: int = 0, start: int = 0) -> int:
    """A ``gzip`` block's data (gzip members, or one zlib stream when ``useZlib``) into ``size`` bytes at ``address``.

    Returns how many bytes were written; output longer than ``size``, bad or truncated data and
    trailing bytes are a :class:`ChunkDecodeError` at ``offset`` (where the data starts), so a bomb
    costs no more than ``size`` bytes of work. Shared by :func:`decode_payload` and the direct
    reader (:mod:`.direct_source`), which decodes into the reader's buffer, from ``payload[start:]``
    (a whole block's bytes: ``start`` skips its header without a copy; ``offset`` is then ``start``).
    """
    return encoding.inflate_into(payload, address, size, wbits=15 if compression.use_zlib else 31,
                                 what=_label(compression), key=key, offset=offset, start=start)


def _decode_bzip2(payload: bytes, compression: Compression, expected: int, key: str | None,
                offset: int, itemsize: int | None = None) -> bytes:
    return _decode_streams(payload, expected, key, offset, "bzip2", bz2.BZ2Decompressor, (OSError, ValueError))


def _decode_xz(payload: bytes, compression: Compression, expected: int, key: str | None,
                offset: int, itemsize: int | None = None) -> bytes:
    return _decode_streams(payload, expected, key, offset, "xz",
                           lambda: lzma.LZMADecompressor(format=lzma.FORMAT_XZ), lzma.LZMAError)


def _decode_streams(payload: bytes, expected: int, key: str | None, offset: int, label: str,
                    make: Callable[[], Any], errors: type[Exception] | tuple[type[Exception], ...]) -> bytes:
    """Decode one or more concatenated streams (bzip2 and xz allow that), bounded.

    ``max_length`` caps each call at one byte past what is still allowed, so exceeding the expected
    size is detected without ever materialising more than ``expected + 1`` bytes.
    """
    out = bytearray()
    pos = 0
    while True:
        dec = make()
        try:
            out += dec.decompress(payload[pos:], expected + 1 - len(out))
        except errors as exc:
            raise ChunkDecodeError(f"bad {label} data ({exc})", key=key, offset=offset + pos) from exc
        if len(out) > expected:
            return bytes(out)  # decode_payload reports "more than expected"
        if not dec.eof:
            raise ChunkDecodeError(f"{label} stream of {len(payload) - pos} bytes is truncated",
                                   key=key, offset=offset + pos)
        rest = len(dec.unused_data)
        if rest == 0:
            return bytes(out)
        consumed = len(payload) - pos - rest
        if consumed == 0:
            raise ChunkDecodeError(f"{rest} bytes after the end of the {label} stream",
                                   key=key, offset=offset + len(payload) - rest)
        pos += consumed


def _decode_lz4(payload: bytes, compression: Compression, expected: int, key: str | None,
                offset: int, itemsize: int | None = None) -> bytes:
    return decode_lz4_stream(payload, expected, key=key, offset=offset)


def _decode_blosc(payload: bytes, compression: Compression, expected: int, key: str | None, offset: int,
                  itemsize: int | None = None) -> bytes:
    # Every field of the 16-byte blosc header, and the block starts after it, are checked ourselves
    # before c-blosc reads them: the sizes must match the buffer and the block, the compressor and
    # shuffle the dataset's attributes, so c-blosc never reads past what we hold nor unshuffles wrongly.
    blosc_expected = encoding.BloscExpected(cname=compression.cname, shuffle=compression.shuffle,
                                            typesizes=(itemsize,) if itemsize else (), nbytes=expected)
    head = encoding.check_blosc_header(payload, max_size=expected, expected=blosc_expected, key=key, offset=offset)
    if head.nbytes == 0:  # c-blosc reports "0 bytes decompressed" as a failure; nothing to decode anyway
        return b""
    try:
        from numcodecs import blosc
    except ImportError as exc:  # pragma: no cover - numcodecs is in the codecs extra
        raise UnsupportedCompressionError("N5 blosc compression needs the 'numcodecs' package "
                                          "(pip install 'napari-shardscope[codecs]')", key=key, offset=offset) from exc
    try:
        out = blosc.decompress(bytes(payload))
    except Exception as exc:  # c-blosc reports failures as RuntimeError/ValueError
        raise ChunkDecodeError(f"bad blosc data ({exc})", key=key, offset=offset) from exc
    return bytes(out)


def _decode_zstd(payload: bytes, compression: Compression, expected: int, key: str | None, offset: int,
                 itemsize: int | None = None) -> bytes:
    try:
        import zstandard
    except ImportError as exc:  # pragma: no cover - zstandard is in the codecs extra
        raise UnsupportedCompressionError("N5 zstd compression needs the 'zstandard' package "
                                          "(pip install 'napari-shardscope[codecs]')", key=key, offset=offset) from exc
    encoding.check_zstd_frame(payload, max_size=expected, exact=True, key=key, offset=offset)
    out = bytearray()
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(payload), read_across_frames=True)
        while len(out) <= expected:
            piece = reader.read(min(expected + 1 - len(out), 1 << 20))
            if not piece:
                break
            out += piece
    except zstandard.ZstdError as exc:
        raise ChunkDecodeError(f"bad zstd data ({exc})", key=key, offset=offset) from exc
    return bytes(out)


_DECODERS: dict[str, Decoder] = {
    "raw": _decode_raw,
    "gzip": _decode_gzip,
    "bzip2": _decode_bzip2,
    "xz": _decode_xz,
    "lz4": _decode_lz4,
    "blosc": _decode_blosc,
    "zstd": _decode_zstd,
}


# -- encoding ----------------------------------------------------------------------------------


def encode_payload(data: bytes | memoryview, compression: Compression, itemsize: int = 1) -> bytes:
    """Compress a block's data as ``compression`` says (the inverse of :func:`decode_payload`).

    Parameters
    ----------
    data
        The block's elements, big-endian, x fastest (bytes, or a byte view of them).
    compression
        The dataset's compression.
    itemsize
        Bytes per element; blosc shuffles by it.
    """
    kind = compression.type
    if kind == "raw":
        return bytes(data)
    if kind == "gzip":
        if compression.use_zlib:
            return encoding.zlib_compress(data, deflate_level(compression.level))
        return encode_java_gzip(data, compression.level)
    if kind == "bzip2":
        return bz2.compress(data, compression.block_size)
    if kind == "xz":
        return lzma.compress(data, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=compression.preset)
    if kind == "lz4":
        return encode_lz4_stream(data, compression.block_size)
    if kind == "blosc":
        return _encode_blosc(data, compression, itemsize)
    if kind == "zstd":
        import zstandard

        return bytes(zstandard.ZstdCompressor(level=compression.level, write_content_size=True).compress(data))
    raise ArgumentError(f"cannot encode N5 compression {kind!r}")


def encode_java_gzip(data: bytes | memoryview, level: int = -1) -> bytes:
    """One gzip member framed as Java's ``GZIPOutputStream`` frames it: fixed header, deflate, CRC32, size.

    ``level`` is N5's (-1 = :data:`DEFAULT_DEFLATE_LEVEL`); the DEFLATE stream is libdeflate's.
    """
    body = encoding.deflate_compress(data, deflate_level(level))
    trailer = struct.pack("<II", encoding.crc32(data), len(data) & 0xFFFFFFFF)
    return b"".join((JAVA_GZIP_HEADER, body, trailer))


def deflate_level(level: int) -> int:
    """The deflate level (0-9) of N5's gzip ``level`` (-1 .. 9; -1 is zlib's default, 6)."""
    return DEFAULT_DEFLATE_LEVEL if level == -1 else level


def _encode_blosc(data: bytes | memoryview, compression: Compression, itemsize: int) -> bytes:
    import numpy as np
    from numcodecs import Blosc

    if itemsize not in (1, 2, 4, 8) or len(data) % itemsize:
        raise ArgumentError(f"blosc item size must be 1, 2, 4 or 8 and divide the data, got {itemsize}")
    codec = Blosc(cname=compression.cname, clevel=compression.clevel, shuffle=compression.shuffle,
                  blocksize=compression.blosc_blocksize)
    return bytes(codec.encode(np.frombuffer(data, dtype=f"u{itemsize}")))
