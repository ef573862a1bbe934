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

The checksum is verified (it is what catches a corrupted block) with the ``xxhash`` package.
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



class UnsupportedCompressionError(ChunkDecodeError):
    """Bytes use a compression this installation cannot decode (an optional package is missing)."""


def compute_xxh32(data: bytes, seed: int = 0) -> int:
    """xxHash32 of ``data`` with ``seed`` (unsigned 32-bit), by the ``xxhash`` package (C).

    lz4-java's block stream uses seed ``0x9747b28c``; a pure-Python xxHash32 made checksumming
    2,000x slower than decoding (``bench/n5_lz4.py`` measures both).
    """
    try:
        import xxhash
    except ImportError as exc:  # pragma: no cover - xxhash is in the codecs extra
        raise UnsupportedCompressionError("N5 lz4 blocks need the 'xxhash' package to check their checksums "
                                          "(pip install 'napari-shardscope[codecs]')") from exc
    return int(xxhash.xxh32_intdigest(data, seed & 0xFFFFFFFF))


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


def encode_lz4_stream(data: bytes | memoryview, block_size: int = DEFAULT_BLOCK_SIZE) -> bytes:
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
