"""Sharding parameters of an annotation index, chosen from what the index holds.

Split from :mod:`.writer`: the choice is a rule of its own (and tested on its own). The id-keyed
indexes (``by_id``, relationships) hash ids with ``murmurhash3_x86_128`` (ids are not spatial),
about :data:`KEYS_PER_MINISHARD` keys per minishard, at most 2**:data:`MAX_MINISHARD_BITS`
minishards per shard and shards of about ``shard_bytes``; spatial levels use the identity hash of
the cells' Morton codes, so a shard and a minishard are spatially compact blocks of cells.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from napari_shardscope.core.encoding import Encoding
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.formats.precomputed.morton import bits_per_dimension
from napari_shardscope.core.formats.precomputed.sharding import ShardingSpec

#: Target uncompressed bytes of one shard file.
DEFAULT_SHARD_BYTES = 1 << 30
#: About this many keys per minishard index (24 bytes each before gzip: a 24 KiB index).
KEYS_PER_MINISHARD = 1 << 10
#: At most this many minishards per shard (an 8 KiB shard index).
MAX_MINISHARD_BITS = 9

# -- sharding parameters -----------------------------------------------------------------------------------
def _ceil_log2(x: float) -> int:
    return 0 if x <= 1 else math.ceil(math.log2(x))


def choose_id_sharding(num_keys: int, total_bytes: int, *, shard_bytes: int = DEFAULT_SHARD_BYTES,
                       data_encoding: Encoding = "gzip") -> ShardingSpec:
    """Sharding of an id-keyed index (``by_id``, a relationship) holding ``num_keys`` chunks of ``total_bytes``.

    Ids are hashed (``murmurhash3_x86_128``, no preshift): about :data:`KEYS_PER_MINISHARD` keys per
    minishard, at most 2**:data:`MAX_MINISHARD_BITS` minishards per shard, and enough shards that each
    holds about ``shard_bytes``.
    """
    if shard_bytes <= 0:
        raise ArgumentError(f"shard_bytes must be positive, got {shard_bytes}")
    group_bits = _ceil_log2(num_keys / KEYS_PER_MINISHARD)
    shard_bits = min(64, max(_ceil_log2(total_bytes / shard_bytes), group_bits - MAX_MINISHARD_BITS, 0))
    minishard_bits = min(64 - shard_bits, max(0, group_bits - shard_bits))
    return ShardingSpec(preshift_bits=0, hash="murmurhash3_x86_128", minishard_bits=minishard_bits,
                        shard_bits=shard_bits, minishard_index_encoding="gzip", data_encoding=data_encoding)


def choose_spatial_sharding(grid_shape: Sequence[int], nonempty_cells: int, total_bytes: int, *,
                            shard_bytes: int = DEFAULT_SHARD_BYTES) -> ShardingSpec:
    """Sharding of a spatial level: identity hash of the cells' Morton codes, shards and minishards as blocks.

    The shard number is the top bits of the Morton code (enough shards for about ``shard_bytes`` each),
    the minishard the bits below (about :data:`KEYS_PER_MINISHARD` non-empty cells per minishard), and
    the rest is the preshift: neighbouring cells share a minishard.
    """
    if shard_bytes <= 0:
        raise ArgumentError(f"shard_bytes must be positive, got {shard_bytes}")
    bits = sum(bits_per_dimension(grid_shape))
    shard_bits = min(bits, _ceil_log2(total_bytes / shard_bytes))
    minishard_bits = max(0, min(bits - shard_bits, MAX_MINISHARD_BITS,
                                _ceil_log2(nonempty_cells / KEYS_PER_MINISHARD) - shard_bits))
    return ShardingSpec(preshift_bits=bits - shard_bits - minishard_bits, hash="identity",
                        minishard_bits=minishard_bits, shard_bits=shard_bits, minishard_index_encoding="gzip",
                        data_encoding="gzip")
