"""Write whole precomputed shard files from ``{chunk_id: bytes}``.

The format cannot rewrite one chunk in place (the spec says so), so the unit of writing is the
shard. Layout written: shard index, then per minishard (ascending) its chunks' data in ascending id
order followed by that minishard's index — the order Neuroglancer's and TensorStore's writers use,
which keeps a minishard's data and index close together for readers. Files are written through
the byte store's atomic write (temporary file + rename locally).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from napari_shardscope.core.bytestore import ByteStore, join_key
from napari_shardscope.core.encoding import DEFAULT_GZIP_LEVEL, encode_bytes
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.formats.precomputed.shard_index import encode_minishard_index, encode_shard_index
from napari_shardscope.core.formats.precomputed.sharding import ShardingSpec, assign_chunk_ids, format_shard_name


def group_by_shard(spec: ShardingSpec, chunk_ids: object) -> dict[int, list[int]]:
    """Chunk ids grouped by the shard that must hold them."""
    a = assign_chunk_ids(spec, chunk_ids)
    groups: dict[int, list[int]] = {}
    for cid, shard in zip(a.chunk_ids.tolist(), a.shard.tolist(), strict=True):
        groups.setdefault(int(shard), []).append(int(cid))
    return groups


def encode_shard(
    spec: ShardingSpec,
    chunks: Mapping[int, bytes],
    *,
    shard: int | None = None,
    encoded: bool = False,
    level: int = DEFAULT_GZIP_LEVEL,
) -> bytes:
    """The bytes of one shard file holding ``chunks``.

    Parameters
    ----------
    spec
        The sharding spec.
    chunks
        Chunk id → chunk bytes. All ids must hash to one shard (``shard``, if given).
    shard
        The shard being written; checked against the ids.
    encoded
        ``True`` when the values are already encoded with ``spec.data_encoding``.
    level
        gzip level (0-9) of gzip-encoded data and minishard indexes; TensorStore's by default.
    """
    ids = np.asarray(sorted(chunks), dtype=np.uint64)
    if ids.size == 0:
        if shard is None:
            raise ArgumentError("an empty shard needs its shard number")
        ids_shard = np.zeros(0, dtype=np.uint64)
        minis = np.zeros(0, dtype=np.uint64)
    else:
        a = assign_chunk_ids(spec, ids)
        ids_shard, minis = a.shard, a.minishard
        shards = np.unique(ids_shard)
        if shards.size != 1 or (shard is not None and int(shards[0]) != shard):
            raise ArgumentError(
                f"chunks of one shard file must all hash to shard {shard if shard is not None else int(shards[0])}"
                f", got shards {shards.tolist()[:8]}"
            )
    base = spec.shard_index_size
    body: list[bytes] = []
    pos = base
    starts = np.zeros(spec.num_minishards, dtype=np.uint64)
    ends = np.zeros(spec.num_minishards, dtype=np.uint64)
    indexes: list[tuple[int, bytes]] = []
    for m in np.unique(minis).tolist():
        sel = ids[minis == m]
        c_starts, c_ends = [], []
        for cid in sel.tolist():
            value = chunks[int(cid)]
            data = value if encoded else encode_bytes(value, spec.data_encoding, level)
            c_starts.append(pos)
            pos += len(data)
            c_ends.append(pos)
            body.append(data)
        indexes.append((m, encode_minishard_index(spec, sel, c_starts, c_ends, level)))
    # Every minishard index after all the chunk data, contiguous (as Igneous and neuroglancer-scripts
    # lay shards out): a remote reader fetches a shard's whole index region in one range request
    # instead of one per minishard. Readers follow the shard index's offsets, so any order is valid.
    for m, index in indexes:
        starts[m], ends[m] = pos, pos + len(index)
        body.append(index)
        pos += len(index)
    return encode_shard_index(spec, starts, ends) + b"".join(body)


def write_shard(
    store: ByteStore,
    prefix: str,
    spec: ShardingSpec,
    shard: int,
    chunks: Mapping[int, bytes],
    *,
    encoded: bool = False,
    level: int = DEFAULT_GZIP_LEVEL,
) -> str:
    """Encode and atomically write one shard file; returns its key."""
    key = join_key(prefix, f"{format_shard_name(spec, shard)}.shard")
    store.write(key, encode_shard(spec, chunks, shard=shard, encoded=encoded, level=level))
    return key


def write_shards(
    store: ByteStore,
    prefix: str,
    spec: ShardingSpec,
    chunks: Mapping[int, bytes],
    *,
    encoded: bool = False,
    level: int = DEFAULT_GZIP_LEVEL,
) -> list[str]:
    """Write every shard needed for ``chunks`` (one atomic file each); returns the keys."""
    keys = []
    for shard, ids in sorted(group_by_shard(spec, list(chunks)).items()):
        keys.append(write_shard(store, prefix, spec, shard, {i: chunks[i] for i in ids}, encoded=encoded, level=level))
    return keys
