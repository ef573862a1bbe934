"""Multiscale volumes read lazily through TensorStore (a layer of the core, see docs/architecture.md).

Public API::

    from napari_shardscope.core.volumes import open_volume, open_volumes, set_cache_pool_size

    vol = open_volume("https://host/path/segmentation")   # precomputed, zarr v3/OME-Zarr or N5
    vol.kind, vol.axes, vol.voxel_size, vol.translate     # "segmentation", ("z","y","x"), nm, nm
    arr = vol.levels[0].array                             # LazyArray, (z, y, x)
    plane = arr[10, 0:512, 0:512]                         # still lazy
    data = np.asarray(plane)                              # reads only those chunks

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
