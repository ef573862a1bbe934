"""The LZ4 framing N5 uses: lz4-java's ``LZ4BlockOutputStream``, not the standard LZ4 frame format.

Java N5 (``Lz4Compression``) wraps block data in lz4-java's block stream, a framing of its own that
neither TensorStore, zarr nor numcodecs reads (numcodecs' ``LZ4`` codec prefixes a 4-byte size,
``lz4.frame`` is the official ``0x184D2204`` frame). The framing is simple enough to decode here,
with the ``lz4`` package doing the LZ4 *block* work. A stream is a sequence of blocks::

    "LZ4Block"        8 bytes magic
    token             1 byte: method (0x10 raw, 0x20 lz4) | level, where the block holds at most
                      2**(10 + level) decompressed bytes
    compressed len    int32 little-endian
    decompressed len  int32 little-endian
    checksum          int32 little-endian: xxHash32 (seed 0x9747b28c) of the decompressed bytes,
                      masked to its low 28 bits (lz4-java's ``Checksum`` view does that)
    data              ``compressed len`` bytes

and ends with an empty block (both lengths 0, checksum 0). A block stored with method ``raw`` is
the decompressed bytes themselves (the writer falls back to it when LZ4 does not shrink them).

xxHash32 is implemented here (:func:`compute_xxh32`) because verifying the checksum is what catches a
corrupted block, and no xxHash package is a dependency; blocks are small (64 KiB by default).
"""

from __future__ import annotations

import struct
from typing import Any

from napari_shardscope.core.errors import ArgumentError, ChecksumError, ChunkDecodeError

MAGIC = b"LZ4Block"
HEADER_SIZE = len(MAGIC) + 1 + 4 + 4 + 4
METHOD_RAW = 0x10
METHOD_LZ4 = 0x20
LEVEL_BASE = 10
CHECKSUM_SEED = 0x9747B28C
CHECKSUM_MASK = 0x0FFFFFFF
DEFAULT_BLOCK_SIZE = 1 << 16
MIN_BLOCK_SIZE = 64
MAX_BLOCK_SIZE = 1 << (LEVEL_BASE + 0x0F)

_P1 = 0x9E3779B1
_P2 = 0x85EBCA77
_P3 = 0xC2B2AE3D
_P4 = 0x27D4EB2F
_P5 = 0x165667B1
_M32 = 0xFFFFFFFF


class UnsupportedCompressionError(ChunkDecodeError):
    """Bytes use a compression this installation cannot decode (an optional package is missing)."""


def compute_xxh32(data: bytes, seed: int = 0) -> int:
    """xxHash32 of ``data`` with ``seed`` (the algorithm of Yann Collet's reference, 32-bit).

    Parameters
    ----------
    data
        Bytes to hash.
    seed
        Unsigned 32-bit seed (lz4-java's block stream uses ``0x9747b28c``).

    Returns
    -------
    int
        The unsigned 32-bit hash.
    """
    n = len(data)
    seed &= _M32
    pos = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M32
        v2 = (seed + _P2) & _M32
        v3 = seed
        v4 = (seed - _P1) & _M32
        nwords = (n // 16) * 4
        words = struct.unpack_from(f"<{nwords}I", data)
        for i in range(0, nwords, 4):
            a = (v1 + words[i] * _P2) & _M32
            v1 = (((a << 13) | (a >> 19)) * _P1) & _M32
            a = (v2 + words[i + 1] * _P2) & _M32
            v2 = (((a << 13) | (a >> 19)) * _P1) & _M32
            a = (v3 + words[i + 2] * _P2) & _M32
            v3 = (((a << 13) | (a >> 19)) * _P1) & _M32
            a = (v4 + words[i + 3] * _P2) & _M32
            v4 = (((a << 13) | (a >> 19)) * _P1) & _M32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M32
        pos = nwords * 4
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while pos + 4 <= n:
        (word,) = struct.unpack_from("<I", data, pos)
        h = (_rotl((h + word * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        h = (_rotl((h + data[pos] * _P5) & _M32, 11) * _P1) & _M32
        pos += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def compute_block_checksum(data: bytes) -> int:
    """The checksum lz4-java stores for a block: xxHash32 (seed ``0x9747b28c``) & ``0x0FFFFFFF``."""
    return compute_xxh32(data, CHECKSUM_SEED) & CHECKSUM_MASK


def compute_level(block_size: int) -> int:
    """The token's level nibble for ``block_size``: ``max(0, ceil(log2(block_size)) - 10)``."""
    if not MIN_BLOCK_SIZE <= block_size <= MAX_BLOCK_SIZE:
        raise ArgumentError(f"lz4 blockSize must be in [{MIN_BLOCK_SIZE}, {MAX_BLOCK_SIZE}], got {block_size}")
    return max(0, (block_size - 1).bit_length() - LEVEL_BASE)


def _import_lz4_block() -> Any:
    try:
        import lz4.block
    except ImportError as exc:  # pragma: no cover - lz4 is in the codecs extra
        raise UnsupportedCompressionError(
            "N5 lz4 compression needs the 'lz4' package (pip install 'napari-shardscope[codecs]')"
        ) from exc
    return lz4.block


def encode_lz4_stream(data: bytes, block_size: int = DEFAULT_BLOCK_SIZE) -> bytes:
    """Frame ``data`` the way lz4-java's ``LZ4BlockOutputStream(out, block_size)`` does.

    Parameters
    ----------
    data
        The bytes to compress.
    block_size
        Maximum decompressed bytes per block (N5's ``compression.blockSize``).

    Returns
    -------
    bytes
        The framed stream, ending with the empty end-of-stream block.
    """
    level = compute_level(block_size)
    lz4_block = _import_lz4_block()
    out: list[bytes] = []
    for start in range(0, len(data), block_size):
        chunk = bytes(data[start : start + block_size])
        packed: bytes = lz4_block.compress(chunk, mode="default", store_size=False)
        method = METHOD_LZ4
        if len(packed) >= len(chunk):
            method, packed = METHOD_RAW, chunk
        out.append(MAGIC + bytes([method | level])
                   + struct.pack("<iii", len(packed), len(chunk), compute_block_checksum(chunk)))
        out.append(packed)
    out.append(MAGIC + bytes([METHOD_RAW | level]) + struct.pack("<iii", 0, 0, 0))
    return b"".join(out)


def decode_lz4_stream(data: bytes, max_nbytes: int, *, key: str | None = None, offset: int = 0) -> bytes:
    """Undo :func:`encode_lz4_stream`, checking every block header and checksum.

    Parameters
    ----------
    data
        The framed stream.
    max_nbytes
        Refuse to produce more than this many bytes (the block's expected size), so a corrupted
        length cannot make us allocate gigabytes.
    key, offset
        Where ``data`` was stored (``offset`` = its position in the file), for error messages.

    Returns
    -------
    bytes
        The decompressed bytes. A stream that ends without the end-of-stream block is accepted as
        long as every block is whole (Java N5 stops reading once it has the block's elements);
        bytes after the end-of-stream block are ignored for the same reason.

    Raises
    ------
    ChunkDecodeError
        Bad magic, bad token, impossible lengths, truncation, undecodable LZ4 data.
    ChecksumError
        A block whose checksum does not match its decompressed bytes.
    """
    out: list[bytes] = []
    total = 0
    pos = 0
    n = len(data)
    while pos < n:
        where = offset + pos
        if n - pos < HEADER_SIZE:
            raise ChunkDecodeError(f"lz4 block header truncated: {n - pos} of {HEADER_SIZE} bytes",
                                   key=key, offset=where)
        if data[pos : pos + len(MAGIC)] != MAGIC:
            raise ChunkDecodeError(f"lz4 block does not start with the LZ4Block magic "
                                   f"(found {bytes(data[pos:pos + 8])!r})", key=key, offset=where)
        token = data[pos + len(MAGIC)]
        method, level = token & 0xF0, LEVEL_BASE + (token & 0x0F)
        if method not in (METHOD_RAW, METHOD_LZ4):
            raise ChunkDecodeError(f"lz4 block token 0x{token:02x} names no known method", key=key,
                                   offset=where + len(MAGIC))
        clen, olen, check = struct.unpack_from("<iii", data, pos + len(MAGIC) + 1)
        if (olen < 0 or clen < 0 or olen > 1 << level or (olen == 0) != (clen == 0)
                or (method == METHOD_RAW and olen != clen)):
            raise ChunkDecodeError(f"lz4 block header is corrupted (method 0x{method:02x}, level {level - LEVEL_BASE}, "
                                   f"compressed {clen}, decompressed {olen})", key=key, offset=where + len(MAGIC) + 1)
        pos += HEADER_SIZE
        if olen == 0:
            if check != 0:
                raise ChunkDecodeError(f"lz4 end-of-stream block has checksum {check}, expected 0",
                                       key=key, offset=where + len(MAGIC) + 9)
            break
        if total + olen > max_nbytes:
            raise ChunkDecodeError(f"lz4 data decodes to more than the {max_nbytes} bytes expected",
                                   key=key, offset=where)
        if n - pos < clen:
            raise ChunkDecodeError(f"lz4 block data truncated: {n - pos} of {clen} bytes", key=key,
                                   offset=offset + pos)
        chunk = bytes(data[pos : pos + clen])
        if method == METHOD_LZ4:
            lz4_block = _import_lz4_block()
            try:
                plain: bytes = lz4_block.decompress(chunk, uncompressed_size=olen)
            except Exception as exc:  # lz4.block.LZ4BlockError, ValueError on bad sizes
                raise ChunkDecodeError(f"bad lz4 block data ({exc})", key=key, offset=offset + pos) from exc
            if len(plain) != olen:
                raise ChunkDecodeError(f"lz4 block decodes to {len(plain)} bytes, header says {olen}",
                                       key=key, offset=offset + pos)
        else:
            plain = chunk
        actual = compute_block_checksum(plain)
        if actual != check:
            raise ChecksumError(f"lz4 block checksum 0x{check:07x} does not match its data (0x{actual:07x})",
                                key=key, offset=where + len(MAGIC) + 9)
        out.append(plain)
        total += olen
        pos += clen
    return b"".join(out)
