"""The shard map as a Labels layer: one value per chunk (its shard or minishard), on the volume's own grid.

The map itself is the core's (:meth:`~napari_shardscope.core.layout.LayoutTree.shard_map`, computed
from chunk ids, no data read); this is how the viewer shows it. The values are read on the volume's
own voxels and levels (:class:`~.placement.Blocks`): placed at the chunk's scale, a partial last
chunk's centre would lie past the volume's last voxel and lengthen the slider, and a chunk-sized
step would become the dims step where the volume has no layer. The colormap's background is a value
that never occurs, so shard 0 has a colour like every other shard. Split from :mod:`.shard_browser`,
the panel that asks for the map.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.layout import ShardMap
from napari_shardscope.widgets.placement import Blocks, VolumeGrid, add_on_grid

if TYPE_CHECKING:
    from napari.layers import Layer


def shard_map_name(smap: ShardMap) -> str:
    """The layer name of a shard map: ``shard map <scale> (<shard|minishard>)``."""
    return f"shard map {smap.scale} ({smap.by})"


def add_shard_map(viewer: Any, grid: VolumeGrid, volume: Layer | None, smap: ShardMap,
                  previous: Layer | None) -> Layer:
    """Add ``smap`` as a Labels layer on the volume's grid, in place of the ``previous`` map layer.

    Raises
    ------
    ArgumentError
        When the map has more axes than the volume's grid (it is then not shown; ``previous`` is gone).
    """
    from napari.utils.colormaps import label_colormap

    # background = a value that never occurs, so shard 0 gets a colour like every other shard
    colormap = label_colormap(num_colors=min(max(smap.num_values, 1), 256), background_value=smap.num_values)
    data = smap.values
    if volume is not None and data.ndim > volume.ndim:
        data = data.reshape(data.shape[-volume.ndim:]) if math.prod(data.shape[:-volume.ndim]) == 1 \
            else data
    if previous is not None and previous in viewer.layers:
        viewer.layers.remove(previous)
    size, translate = tuple(smap.voxel_size[-data.ndim:]), tuple(smap.translate[-data.ndim:])
    extra = grid.ndim - data.ndim  # axes the map has no chunks along (a channel axis): one block each
    if extra > 0:
        data = data.reshape((1,) * extra + data.shape)
        size, translate = (1.0,) * extra + size, grid.translate[:extra] + translate
    elif extra < 0:
        raise ArgumentError(f"the shard map of {smap.scale} has {data.ndim} axes and the layer "
                            f"{volume.name if volume is not None else ''!r} {grid.ndim}: not shown")
    layer: Layer = add_on_grid(viewer, grid, "blocks", Blocks(data, size, translate), name=shard_map_name(smap),
                               opacity=0.45, colormap=colormap,
                               metadata={"shardscope_shard_map": {"scale": smap.scale, "by": smap.by}})
    return layer
