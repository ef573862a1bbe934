"""Default sharding parameters for an exported precomputed scale.

Google's pipelines shard volumes with the identity hash and a preshift, so a minishard is a run of
Morton-consecutive chunks — a spatially compact brick — and a viewer panning through a region hits
few minishard indexes. We follow that: about a thousand chunks per minishard (``preshift_bits`` =
10, fewer for small grids or when fewer chunks fit the shard budget), then as many minishards per
shard as keep a shard's uncompressed data under a target size (2 GiB by default) and its shard index
small (at most 2**9 minishards = 8 KiB), and the remaining bits for shards. Every chunk id of the
grid then has a unique (shard, minishard) slot sequence and no shard is empty by construction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.formats.precomputed.morton import bits_per_dimension
from napari_shardscope.core.formats.precomputed.sharding import ShardingSpec

CHUNKS_PER_MINISHARD_BITS = 10  # ~1000 chunks per minishard
MAX_MINISHARD_BITS = 9  # shard index of 8 KiB at most
DEFAULT_SHARD_BYTES = 1 << 31


def choose_sharding(
    grid_shape: Sequence[int],
    chunk_bytes: int,
    *,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    chunks_per_minishard_bits: int = CHUNKS_PER_MINISHARD_BITS,
    data_encoding: str = "gzip",
) -> ShardingSpec:
    """A sharding spec for a scale with ``grid_shape`` chunks of ``chunk_bytes`` uncompressed bytes.

    Parameters
    ----------
    grid_shape
        Chunks along x, y, z.
    chunk_bytes
        Uncompressed bytes of one chunk (sets how many chunks fit in ``shard_bytes``).
    shard_bytes
        Target upper bound of a shard's uncompressed data.
    chunks_per_minishard_bits
        log2 of the chunks per minishard (``preshift_bits``).
    data_encoding
        ``"gzip"`` (default) or ``"raw"``.
    """
    if chunk_bytes <= 0 or shard_bytes <= 0:
        raise ArgumentError("chunk_bytes and shard_bytes must be positive")
    total_bits = sum(bits_per_dimension(grid_shape))
    chunks_per_shard_bits = max(0, math.floor(math.log2(max(1, shard_bytes // chunk_bytes))))
    # a minishard never outgrows the shard budget (a chunk larger than the budget gets a shard of its own)
    preshift = min(total_bits, chunks_per_minishard_bits, chunks_per_shard_bits)
    remaining = total_bits - preshift
    minishard_bits = max(0, min(remaining, MAX_MINISHARD_BITS, chunks_per_shard_bits - preshift))
    shard_bits = remaining - minishard_bits
    if data_encoding not in ("gzip", "raw"):
        raise ArgumentError(f"data_encoding must be 'gzip' or 'raw', got {data_encoding!r}")
    return ShardingSpec(
        preshift_bits=preshift,
        hash="identity",
        minishard_bits=minishard_bits,
        shard_bits=shard_bits,
        minishard_index_encoding="gzip",
        data_encoding="gzip" if data_encoding == "gzip" else "raw",
    )
