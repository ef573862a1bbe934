"""Write a whole Zarr v3 array — ``zarr.json`` plus every shard (or chunk) file — from numpy.

This is the encoding half of the format layer: tests use it to prove that shards *we* write are
read back identically by TensorStore and zarr-python, and export can build on it. Every file is
written through :meth:`ByteStore.write` (atomic), whole shards at a time; shards (or chunks)
holding only the fill value are not written, because a missing file means all fill value.
"""

from __future__ import annotations

from itertools import product
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.bytestore import ByteStore, join_key
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.formats.zarr3.codecs import encode_chunk
from napari_shardscope.core.formats.zarr3.metadata import ArrayMetadata, parse_array_metadata
from napari_shardscope.core.formats.zarr3.reader import Zarr3ArrayReader
from napari_shardscope.core.formats.zarr3.sharding import encode_shard_array, is_all_value


def encode_metadata(metadata: ArrayMetadata) -> bytes:
    """The ``zarr.json`` bytes of ``metadata`` (checked by parsing them back)."""
    import json

    data = json.dumps(metadata.to_json(), indent=2).encode()
    parse_array_metadata(data, key="zarr.json")
    return data


def write_array(store: ByteStore, path: str, metadata: ArrayMetadata, array: npt.NDArray[Any]) -> list[str]:
    """Write ``array`` as the Zarr v3 array ``metadata`` describes, at ``path`` in ``store``.

    Returns
    -------
    list of str
        The keys written (``zarr.json`` first), so a caller can report or clean up.

    Raises
    ------
    ArgumentError
        When ``array``'s shape or dtype does not match ``metadata``.
    MetadataError
        When the codec chain is not one we can encode.
    """
    if tuple(array.shape) != metadata.shape:
        raise ArgumentError(f"array shape {list(array.shape)} does not match metadata shape {list(metadata.shape)}")
    if array.dtype != metadata.dtype:
        raise ArgumentError(f"array dtype {array.dtype} does not match metadata data_type {metadata.data_type}")
    reader = Zarr3ArrayReader(store, path, metadata)  # checks the codec chain
    fill = metadata.fill_scalar
    keys = [join_key(path, "zarr.json")]
    store.write(keys[0], encode_metadata(metadata))
    chunk = metadata.chunk_shape
    for grid in product(*(range(n) for n in metadata.grid_shape)):
        block = np.full(chunk, fill, dtype=metadata.dtype)
        src = tuple(slice(g * c, min((g + 1) * c, s)) for g, c, s in zip(grid, chunk, metadata.shape, strict=True))
        block[tuple(slice(0, s.stop - s.start) for s in src)] = array[src]
        if is_all_value(block, fill):
            continue
        if reader.sharding is not None:
            # Transposes before sharding_indexed permute the whole shard first.
            shard = block
            for codec in reader.chain.array_to_array:
                shard = shard.transpose(codec.configuration["order"])
            data = encode_shard_array(shard, reader.sharding, fill)
        else:
            data = encode_chunk(block, reader.chain, fill)
        key = reader.shard_key(grid)
        store.write(key, data)
        keys.append(key)
    return keys
