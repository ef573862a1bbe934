"""Multiscale volumes read lazily through TensorStore (a layer of the core, see docs/architecture.md).

The public API (also ``napari_shardscope.open_volume`` …); a path or an ``https://``, ``gs://`` or
``s3://`` URL of precomputed, zarr v3 / OME-Zarr, zarr v2 or N5:

>>> import numpy as np
>>> from napari_shardscope.core.sample_data import ensure_sample_dataset
>>> from napari_shardscope.core.volumes import open_volume
>>> vol = open_volume(ensure_sample_dataset().segmentation)
>>> vol.kind, vol.axes, vol.voxel_size, vol.translate     # voxel size and offset in nm
('segmentation', ('z', 'y', 'x'), (40.0, 8.0, 8.0), (0.0, 0.0, 0.0))
>>> arr = vol.levels[0].array                             # a LazyArray, (z, y, x)
>>> plane = arr[10, 0:128, 0:128]                         # still lazy
>>> data = np.asarray(plane)                              # reads only those chunks
>>> data.shape, data.dtype.name
((128, 128), 'uint64')

What a volume is made of — levels, shapes, voxel sizes, axes — is decided by the format packages
(:meth:`~napari_shardscope.core.formats.api.Dataset.volume_specs`, pure data); this package only
opens those specs through TensorStore (:func:`open_volume_specs`) and presents them lazily.

Every volume shares one TensorStore context (:func:`shared_context`), whose cache pool size the
user sets with ``SHARDSCOPE_CACHE_MB`` or :func:`set_cache_pool_size`.
"""

from napari_shardscope.core.bytestore.context import (
    CACHE_ENV,
    cache_pool_bytes,
    make_context,
    set_cache_pool_size,
    shared_context,
)
from napari_shardscope.core.bytestore.url import Location, is_remote, parse_url
from napari_shardscope.core.formats.volume_spec import Kind
from napari_shardscope.core.volumes.lazy import LazyArray, ValueTransform
from napari_shardscope.core.volumes.model import ScaleLevel, Volume
from napari_shardscope.core.volumes.opening import open_dataset_volumes, open_volume, open_volume_specs, open_volumes

__all__ = [
    "CACHE_ENV",
    "Kind",
    "LazyArray",
    "Location",
    "ScaleLevel",
    "ValueTransform",
    "Volume",
    "cache_pool_bytes",
    "is_remote",
    "make_context",
    "open_dataset_volumes",
    "open_volume",
    "open_volume_specs",
    "open_volumes",
    "parse_url",
    "set_cache_pool_size",
    "shared_context",
]
