"""Which scale-0 blocks of a base hold data: from the format's own listing, never the declared extent.

A petavoxel segmentation declares 10¹⁰ blocks and stores a few thousand chunks; the label index
counts voxels, and absent chunks read as background, so only the blocks meeting a stored chunk need
reading. The format says which chunks are stored (its inspector's listing: shard and minishard
indexes for sharded precomputed, shard indexes for zarr v3, the key listing for unsharded
precomputed, zarr v2 and N5); each stored chunk's voxel box, in array order, gives the overlay
blocks it meets. Nothing here allocates per declared block.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from napari_shardscope.core.errors import ShardscopeError
from napari_shardscope.core.labelmap.config import LabelmapConfig
from napari_shardscope.core.labelmap.geometry import Coord

_log = logging.getLogger(__name__)

#: A base with at most this many blocks holding data is indexed on first need (threads, in the
#: process that needs it); a larger one must be indexed by ``shardscope index`` (the Dask job).
ON_DEMAND_BLOCKS = 4096
#: When the store cannot list (plain http), a base of at most this many declared blocks is indexed
#: block by block; a larger one is refused rather than read whole.
UNLISTED_BLOCKS = 1 << 16


def declared_blocks(config: LabelmapConfig) -> int:
    g = config.grid(0).grid
    return int(g[0]) * int(g[1]) * int(g[2])


def present_blocks(base: str, config: LabelmapConfig, *, fill_value: Any = 0) -> list[Coord] | None:
    """The scale-0 overlay blocks (z, y, x, sorted) that meet a stored chunk of the base.

    ``None`` when the format cannot list its chunks here (a store without listing), or when absent
    chunks are not background (a non-zero fill value: every declared block holds that label).
    """
    if fill_value is not None and np.any(np.asarray(fill_value) != 0):
        return None
    from napari_shardscope.core.formats import open_dataset

    try:
        dataset = open_dataset(base)
        key = config.scales[0].key
        geometry = dataset.layout_backend().geometry(key)
        inspector = dataset.inspector()
        records = inspector.list_chunks(key)
        block = np.asarray(config.block, dtype=np.int64)
        shape = np.asarray(config.shape, dtype=np.int64)
        origin = np.asarray(geometry.to_array_order(geometry.origin), dtype=np.int64)
        found: set[Coord] = set()
        for rec in records:
            pos = _grid_position(inspector, key, rec)
            if pos is None:
                continue
            start, stop = geometry.chunk_bounds(pos)
            lo = np.asarray(geometry.to_array_order(start), dtype=np.int64) - origin
            hi = np.asarray(geometry.to_array_order(stop), dtype=np.int64) - origin
            lo, hi = np.maximum(lo, 0), np.minimum(hi, shape)
            if np.any(hi <= lo):
                continue
            b0, b1 = lo // block, -(-hi // block)
            for z in range(int(b0[0]), int(b1[0])):
                for y in range(int(b0[1]), int(b1[1])):
                    for x in range(int(b0[2]), int(b1[2])):
                        found.add((z, y, x))
    except ShardscopeError as exc:  # no listing here (http), or a layout the inspector does not map
        _log.info("%s: stored chunks cannot be listed (%s); indexing the declared blocks instead", base, exc)
        return None
    return sorted(found)


def _grid_position(inspector: Any, key: str, rec: dict[str, Any]) -> tuple[int, ...] | None:
    """A listed chunk's grid position (format order); unsharded precomputed records name only the file."""
    pos = rec.get("grid_position", rec.get("inner_chunk"))  # zarr v3 names the inner chunk's position
    if isinstance(pos, list | tuple):
        return tuple(int(p) for p in pos)
    if pos is False:
        return None
    name = rec.get("chunk_key")
    source = getattr(inspector, "source", None)
    if isinstance(name, str) and source is not None:
        scale = getattr(source(key), "scale", None)
        if scale is not None:
            grid = scale.grid_position_of_chunk_name(name.rsplit("/", 1)[-1])
            return None if grid is None else tuple(int(g) for g in grid)
    return None
