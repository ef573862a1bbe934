"""The ``sharding_indexed`` codec: configuration, shard index, shard assembly.

Binary format (ZEP 2 / sharding-indexed v1.0, "Binary shard format"): inner chunks stored
anywhere in the shard, plus an index of ``chunks_per_shard + [2]`` uint64 values — ``(offset,
nbytes)`` of each inner chunk in C order of the inner-chunk grid — encoded with ``index_codecs``
(``bytes`` in either byte order, optionally followed by ``crc32c``) and placed at the start or
the end (``index_location``, absent = ``end``) of the shard. Empty inner chunks have both values
``2**64 - 1``. The index size is fixed: ``16 * prod(chunks_per_shard)`` (+ 4 with ``crc32c``),
which is what lets a reader fetch it with one range request.

Decoding checks what makes an index unreadable (length, checksum) and raises; the softer
problems a shard can have (ranges past the end of the file, overlaps, half-empty entries) are
collected by :func:`find_index_problems` so ``validate`` can report all of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import product
from typing import Any, Literal, cast

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.encoding import MAX_DECODED_BYTES
from napari_shardscope.core.errors import ChunkDecodeError, IndexDecodeError, MetadataError
from napari_shardscope.core.formats.zarr3.codecs import (
    CodecChain,
    append_crc32c,
    decode_chunk,
    encode_chunk,
    split_codec_chain,
    strip_crc32c,
)
from napari_shardscope.core.formats.zarr3.metadata import CodecSpec, parse_codec_list, parse_int_list

U64 = npt.NDArray[np.uint64]

#: ``offset`` and ``nbytes`` of an empty inner chunk.
EMPTY = 2**64 - 1

#: Refuse shard indexes larger than this (a corrupt ``chunk_shape`` must not trigger a huge read).
MAX_INDEX_BYTES = 2**31

IndexLocation = Literal["start", "end"]


@dataclass(frozen=True)
class ShardingConfig:
    """A checked ``sharding_indexed`` configuration for a given shard shape.

    Attributes
    ----------
    shard_shape
        Shape of the array the codec encodes (the outer chunk, after any transposes before it).
    chunk_shape
        Inner chunk shape, same order as ``shard_shape``.
    codecs
        The inner chunks' codec chain.
    index_codecs
        The index codec list as written (``bytes`` [+ ``crc32c``]).
    index_location
        ``"start"`` or ``"end"``.
    """

    shard_shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]
    codecs: CodecChain
    index_codecs: tuple[CodecSpec, ...]
    index_location: IndexLocation = "end"

    @property
    def chunks_per_shard(self) -> tuple[int, ...]:
        return tuple(s // c for s, c in zip(self.shard_shape, self.chunk_shape, strict=True))

    @property
    def num_chunks(self) -> int:
        return math.prod(self.chunks_per_shard)

    @property
    def index_endian(self) -> Literal["little", "big"]:
        return "big" if self.index_codecs[0].configuration.get("endian") == "big" else "little"

    @property
    def index_checksum(self) -> bool:
        return len(self.index_codecs) == 2

    @property
    def index_size(self) -> int:
        """Encoded index size in bytes: ``16 * prod(chunks_per_shard)`` (+ 4 with ``crc32c``)."""
        return 16 * self.num_chunks + (4 if self.index_checksum else 0)

    def to_json(self) -> dict[str, Any]:
        """The ``configuration`` object of the codec."""
        chain = self.codecs
        return {
            "chunk_shape": list(self.chunk_shape),
            "codecs": [c.to_json() for c in (*chain.array_to_array, chain.array_to_bytes, *chain.bytes_to_bytes)],
            "index_codecs": [c.to_json() for c in self.index_codecs],
            "index_location": self.index_location,
        }


@dataclass(frozen=True, eq=False)
class ShardIndex:
    """A decoded shard index: ``offsets`` and ``nbytes``, each shaped ``chunks_per_shard``."""

    offsets: U64
    nbytes: U64

    @property
    def chunks_per_shard(self) -> tuple[int, ...]:
        return tuple(int(n) for n in self.offsets.shape)

    @property
    def present(self) -> npt.NDArray[np.bool_]:
        """Which inner chunks are stored (both values not ``2**64 - 1``)."""
        present: npt.NDArray[np.bool_] = (self.offsets != np.uint64(EMPTY)) & (self.nbytes != np.uint64(EMPTY))
        return present

    def byte_range(self, position: Sequence[int]) -> tuple[int, int] | None:
        """``[start, end)`` of the inner chunk at ``position`` in the shard, ``None`` when empty.

        A half-empty entry (one value ``2**64 - 1``) counts as empty here; validation reports it.
        """
        pos = tuple(position)
        offset, nbytes = int(self.offsets[pos]), int(self.nbytes[pos])
        if offset == EMPTY or nbytes == EMPTY:
            return None
        return offset, offset + nbytes

    def stored_positions(self) -> Iterator[tuple[int, ...]]:
        """Positions (C order) of the stored inner chunks."""
        for flat in np.flatnonzero(self.present.ravel()):
            yield tuple(int(i) for i in np.unravel_index(int(flat), self.offsets.shape))

    def stored_bytes(self) -> int:
        """Sum of ``nbytes`` over the stored inner chunks."""
        return int(self.nbytes[self.present].sum(dtype=np.uint64)) if self.offsets.size else 0

    @classmethod
    def empty(cls, chunks_per_shard: Sequence[int]) -> ShardIndex:
        shape = tuple(chunks_per_shard)
        return cls(np.full(shape, EMPTY, np.uint64), np.full(shape, EMPTY, np.uint64))


@dataclass(frozen=True)
class IndexProblem:
    """One inconsistency in a shard index; ``offset`` is a byte offset in the shard file."""

    message: str
    offset: int | None
    position: tuple[int, ...] | None = None


def parse_sharding_config(
    codec: CodecSpec, shard_shape: Sequence[int], dtype: np.dtype[Any], *, key: str
) -> ShardingConfig:
    """Check a ``sharding_indexed`` codec entry against the shape it encodes.

    Raises
    ------
    MetadataError
        Naming the field and value: a ``chunk_shape`` of the wrong rank or not dividing the shard
        shape, unsupported ``codecs`` or ``index_codecs``, a bad ``index_location``.
    """
    cfg = codec.configuration
    where = "sharding_indexed"
    shard_shape = tuple(shard_shape)
    chunk_shape = parse_int_list(cfg.get("chunk_shape"), f"{where} chunk_shape", key=key, minimum=1)
    if len(chunk_shape) != len(shard_shape):
        raise MetadataError(
            f"{where} chunk_shape {list(chunk_shape)} has {len(chunk_shape)} dimensions, "
            f"the shard {list(shard_shape)} has {len(shard_shape)}",
            key=key,
        )
    if any(s % c for s, c in zip(shard_shape, chunk_shape, strict=True)):
        raise MetadataError(
            f"{where} chunk_shape {list(chunk_shape)} does not evenly divide the shard shape {list(shard_shape)}",
            key=key,
        )
    inner = split_codec_chain(
        parse_codec_list(cfg.get("codecs"), f"{where} codecs", key=key),
        len(chunk_shape),
        dtype,
        key=key,
        field=f"{where} codecs",
    )
    if inner.array_to_bytes.name == "sharding_indexed":
        parse_sharding_config(inner.array_to_bytes, inner.encoded_shape(chunk_shape), dtype, key=key)
    index_codecs = parse_codec_list(cfg.get("index_codecs"), f"{where} index_codecs", key=key)
    _check_index_codecs(index_codecs, key)
    location = cfg.get("index_location", "end")
    if location not in ("start", "end"):
        raise MetadataError(f"{where} index_location must be 'start' or 'end', got {location!r}", key=key)
    config = ShardingConfig(shard_shape, chunk_shape, inner, index_codecs, location)
    if config.index_size > MAX_INDEX_BYTES:
        raise MetadataError(
            f"{where}: {config.num_chunks} inner chunks per shard make a {config.index_size}-byte index",
            key=key,
        )
    return config


def _check_index_codecs(codecs: tuple[CodecSpec, ...], key: str) -> None:
    names = [c.name for c in codecs]
    if names not in (["bytes"], ["bytes", "crc32c"]):
        raise MetadataError(
            f"sharding_indexed index_codecs {names} are not supported (expected ['bytes'] or ['bytes', 'crc32c'])",
            key=key,
        )
    endian = codecs[0].configuration.get("endian")
    if endian not in ("little", "big"):
        raise MetadataError(
            f"sharding_indexed index_codecs: bytes endian must be 'little' or 'big', got {endian!r}", key=key
        )
    if len(codecs) == 2 and codecs[1].configuration:
        raise MetadataError("sharding_indexed index_codecs: crc32c takes no configuration", key=key)


# -- the index --------------------------------------------------------------------------------


def decode_shard_index(data: bytes, config: ShardingConfig, *, key: str, offset: int | None = None) -> ShardIndex:
    """Decode the encoded index bytes of one shard.

    Parameters
    ----------
    data
        Exactly ``config.index_size`` bytes (fewer means the shard file is truncated).
    config
        The sharding configuration (gives the index shape and codecs).
    key
        The shard file, for error messages.
    offset
        Where ``data`` starts in the shard file (errors name ``offset`` + position in ``data``).

    Raises
    ------
    IndexDecodeError
        When ``data`` has the wrong length.
    ChecksumError
        When the ``crc32c`` stored after the index does not match (offset: the checksum's).
    """
    if len(data) != config.index_size:
        raise IndexDecodeError(
            f"shard index must be {config.index_size} bytes ({config.num_chunks} inner chunks"
            f"{' + crc32c' if config.index_checksum else ''}), got {len(data)}",
            key=key,
            offset=offset,
        )
    if config.index_checksum:
        data = strip_crc32c(data, key=key, offset=offset)
    order = "<" if config.index_endian == "little" else ">"
    values = np.frombuffer(data, dtype=f"{order}u8").astype(np.uint64).reshape((*config.chunks_per_shard, 2))
    # .copy(), not ascontiguousarray: the latter turns a 0-d index (0-d array) into 1-d.
    return ShardIndex(values[..., 0].copy(), values[..., 1].copy())


def encode_shard_index(index: ShardIndex, config: ShardingConfig) -> bytes:
    """Encode an index with the configured byte order and optional ``crc32c``."""
    if index.chunks_per_shard != config.chunks_per_shard:
        raise MetadataError(
            f"index of shape {list(index.chunks_per_shard)} does not match chunks_per_shard "
            f"{list(config.chunks_per_shard)}"
        )
    order = "<" if config.index_endian == "little" else ">"
    values = np.stack([index.offsets, index.nbytes], axis=-1).astype(f"{order}u8")
    data = values.tobytes()
    return append_crc32c(data) if config.index_checksum else data


def index_span(config: ShardingConfig, file_size: int) -> tuple[int, int]:
    """``[start, end)`` of the index in a shard file of ``file_size`` bytes."""
    if config.index_location == "start":
        return 0, config.index_size
    return file_size - config.index_size, file_size


def index_entry_offset(config: ShardingConfig, position: Sequence[int], file_size: int | None) -> int | None:
    """Byte offset in the shard file of the index entry of inner chunk ``position``."""
    flat = int(np.ravel_multi_index(tuple(position), config.chunks_per_shard)) if position else 0
    if config.index_location == "start":
        return 16 * flat
    if file_size is None:
        return None
    return file_size - config.index_size + 16 * flat


def find_index_problems(
    index: ShardIndex,
    config: ShardingConfig,
    file_size: int,
    name: Callable[[tuple[int, ...]], Sequence[int]] | None = None,
) -> list[IndexProblem]:
    """Every inconsistency of a decoded index with its shard file, in index order.

    Checks: half-empty entries, ranges that run past the end of the file or into the index
    itself, and ranges that overlap another inner chunk's. Offsets name the index entry (for a
    bad entry) or the first overlapping byte (for an overlap). ``name`` maps an index position
    to the position shown in messages (the array's axis order when transposes precede sharding).
    """

    def label(pos: tuple[int, ...]) -> list[int]:
        return list(name(pos) if name is not None else pos)

    problems: list[IndexProblem] = []
    lo, hi = index_span(config, file_size)
    ranges: list[tuple[int, int, tuple[int, ...]]] = []
    offsets, nbytes = index.offsets.ravel(), index.nbytes.ravel()
    for flat in range(offsets.size):
        off, n = int(offsets[flat]), int(nbytes[flat])
        if off == EMPTY and n == EMPTY:
            continue
        pos = tuple(int(i) for i in np.unravel_index(flat, index.offsets.shape))
        at = index_entry_offset(config, pos, file_size)
        if off == EMPTY or n == EMPTY:
            problems.append(
                IndexProblem(
                    f"inner chunk {label(pos)}: half-empty index entry (offset {off}, nbytes {n}); "
                    f"empty chunks must have both set to 2**64-1",
                    at,
                    pos,
                )
            )
            continue
        end = off + n
        if end > file_size:
            problems.append(
                IndexProblem(
                    f"inner chunk {label(pos)}: byte range [{off}, {end}) ends past the end of the file "
                    f"({file_size} bytes)",
                    at,
                    pos,
                )
            )
            continue
        if off < hi and end > lo and n > 0:
            problems.append(
                IndexProblem(
                    f"inner chunk {label(pos)}: byte range [{off}, {end}) overlaps the shard index [{lo}, {hi})",
                    at,
                    pos,
                )
            )
            continue
        ranges.append((off, end, pos))
    ranges.sort()
    furthest_end, furthest_pos = -1, cast(tuple[int, ...], ())
    for off, end, pos in ranges:
        if off < furthest_end and end > off:
            problems.append(
                IndexProblem(
                    f"inner chunk {label(pos)}: byte range [{off}, {end}) "
                    f"overlaps inner chunk {label(furthest_pos)} "
                    f"(which ends at {furthest_end})",
                    off,
                    pos,
                )
            )
        if end > furthest_end:
            furthest_end, furthest_pos = end, pos
    return problems


# -- whole shards -----------------------------------------------------------------------------


def encode_shard(chunks: Mapping[tuple[int, ...], bytes], config: ShardingConfig) -> bytes:
    """Assemble a shard file from already-encoded inner chunks (C order, index start or end).

    Returns ``b""`` never: a shard without chunks is still a valid file (an all-empty index),
    though writers usually skip it since a missing shard means all-empty too.
    """
    cps = config.chunks_per_shard
    index = ShardIndex.empty(cps)
    base = config.index_size if config.index_location == "start" else 0
    pieces: list[bytes] = []
    pos_bytes = base
    for position in product(*(range(n) for n in cps)):
        data = chunks.get(position)
        if data is None:
            continue
        index.offsets[position] = pos_bytes
        index.nbytes[position] = len(data)
        pieces.append(data)
        pos_bytes += len(data)
    unknown = set(chunks) - set(product(*(range(n) for n in cps)))
    if unknown:
        raise MetadataError(f"inner chunk positions {sorted(unknown)} are outside chunks_per_shard {list(cps)}")
    encoded_index = encode_shard_index(index, config)
    body = b"".join(pieces)
    return encoded_index + body if config.index_location == "start" else body + encoded_index


def encode_shard_array(array: npt.NDArray[Any], config: ShardingConfig, fill_value: np.generic | None = None) -> bytes:
    """Encode a whole shard (``array`` has the shard shape); inner chunks equal to ``fill_value``
    are left out (empty), as TensorStore and zarr-python do by default."""
    if tuple(array.shape) != config.shard_shape:
        raise MetadataError(f"array of shape {list(array.shape)} is not a shard of shape {list(config.shard_shape)}")
    chunks: dict[tuple[int, ...], bytes] = {}
    for position in product(*(range(n) for n in config.chunks_per_shard)):
        sel = tuple(slice(p * c, (p + 1) * c) for p, c in zip(position, config.chunk_shape, strict=True))
        block = array[sel]
        if fill_value is not None and is_all_value(block, fill_value):
            continue
        chunks[position] = encode_chunk(block, config.codecs, fill_value)
    return encode_shard(chunks, config)


def decode_shard_array(
    data: bytes,
    config: ShardingConfig,
    shape: Sequence[int],
    dtype: np.dtype[Any],
    fill_value: np.generic,
    *,
    key: str,
    offset: int | None = None,
) -> npt.NDArray[Any]:
    """Decode a whole shard held in memory (used for nested sharding and validation).

    ``offset`` is where ``data`` starts in ``key``, so errors point into the outer file.
    """
    base = 0 if offset is None else offset
    n = config.index_size
    if len(data) < n:
        raise IndexDecodeError(f"shard of {len(data)} bytes is shorter than its {n}-byte index", key=key, offset=offset)
    lo = 0 if config.index_location == "start" else len(data) - n
    index = decode_shard_index(data[lo : lo + n], config, key=key, offset=base + lo)
    problems = find_index_problems(index, config, len(data))
    if problems:
        first = problems[0]
        raise IndexDecodeError(first.message, key=key, offset=None if first.offset is None else base + first.offset)
    total = math.prod(shape) * dtype.itemsize
    if total > MAX_DECODED_BYTES:
        raise ChunkDecodeError(
            f"shard of shape {list(shape)} ({total} bytes) is too large to decode", key=key, offset=offset
        )
    out = np.full(tuple(shape), fill_value, dtype=dtype)
    for position in index.stored_positions():
        rng = index.byte_range(position)
        assert rng is not None
        start, end = rng
        sel = tuple(slice(p * c, (p + 1) * c) for p, c in zip(position, config.chunk_shape, strict=True))
        out[sel] = decode_chunk(
            data[start:end],
            config.codecs,
            config.chunk_shape,
            dtype,
            fill_value,
            key=key,
            offset=base + start,
        )
    return out


def is_all_value(block: npt.NDArray[Any], value: np.generic) -> bool:
    """Whether every element equals ``value`` (NaN equal to NaN: a NaN fill value is still empty)."""
    if block.dtype.kind in "fc":
        both_nan = np.isnan(block) & np.isnan(np.asarray(value, dtype=block.dtype))
        return bool(np.all((block == value) | both_nan))
    return bool(np.all(block == value))
