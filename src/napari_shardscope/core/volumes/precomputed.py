"""Neuroglancer precomputed volumes (sharded or not) as :class:`Volume` objects.

The ``info`` file is parsed by our strict parser (:mod:`napari_shardscope.core.formats.precomputed.info`)
for the geometry, and every scale is opened with TensorStore's ``neuroglancer_precomputed``
driver for the voxels, so decoding, sharding and caching are TensorStore's and the metadata
errors are ours (with the JSON path of the bad field).

TensorStore presents precomputed as ``(x, y, z, channel)`` with the domain starting at
``voxel_offset``; we drop a single channel and transpose, which is a lazy view, to
``(z, y, x)`` — napari's slowest-axis-first order.
"""

from __future__ import annotations

from typing import Any

from napari_shardscope.core.bytestore.kvreads import read_bytes
from napari_shardscope.core.bytestore.url import Location
from napari_shardscope.core.errors import MetadataError
from napari_shardscope.core.formats.precomputed.info import PrecomputedInfo, parse_info
from napari_shardscope.core.volumes.lazy import LazyArray
from napari_shardscope.core.volumes.model import (
    Kind,
    ScaleLevel,
    Volume,
    dtype_contrast_limits,
    keep_decreasing,
)
from napari_shardscope.core.volumes.tsopen import open_stores


def read_precomputed_info(loc: Location, context: Any) -> PrecomputedInfo | None:
    """The parsed ``info`` at ``loc``, ``None`` when there is none."""
    data = read_bytes(loc, "info", context)
    if data is None:
        return None
    return parse_info(data, key=f"{loc.url.rstrip('/')}/info")


def open_precomputed(loc: Location, context: Any, *, kind: Kind | None = None,
                     info: PrecomputedInfo | None = None) -> Volume:
    """Open every scale listed in ``info`` as one multiscale volume.

    Raises
    ------
    MetadataError
        When there is no ``info`` or it breaks the spec.
    """
    info = info or read_precomputed_info(loc, context)
    if info is None:
        raise MetadataError("no info file: not a precomputed volume", key=loc.url)
    specs = [{"driver": "neuroglancer_precomputed", "kvstore": loc.kvstore, "scale_index": i}
             for i in range(len(info.scales))]
    stores = open_stores(specs, context, where=loc.url)
    multichannel = info.num_channels > 1
    levels = []
    for scale, store in zip(info.scales, stores, strict=True):
        # (x, y, z, c) -> (z, y, x) or (c, z, y, x); both are lazy index transforms.
        view = store.T if multichannel else store[..., 0].T
        spatial = tuple(reversed(scale.resolution))
        offset = tuple(float(o) * r for o, r in zip(reversed(scale.voxel_offset), spatial, strict=True))
        voxel_size = ((1.0, *spatial) if multichannel else spatial)
        translate = ((0.0, *offset) if multichannel else offset)
        levels.append(ScaleLevel(key=scale.key, array=LazyArray(view), voxel_size=voxel_size,
                                 translate=translate))
    volume_kind: Kind = kind or ("segmentation" if info.type == "segmentation" else "image")
    dtype = levels[0].array.dtype
    return Volume(
        url=loc.url,
        name=loc.name,
        format="precomputed",
        kind=volume_kind,
        axes=("c", "z", "y", "x") if multichannel else ("z", "y", "x"),
        unit="nm",
        levels=keep_decreasing(levels),
        contrast_limits=dtype_contrast_limits(dtype) if volume_kind == "image" else None,
        channel_axis=0 if multichannel else None,
        metadata={"info": dict(info.raw)},
    )
