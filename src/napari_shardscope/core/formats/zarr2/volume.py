"""Zarr v2 arrays and OME-Zarr 0.4 multiscale groups as :class:`~napari_shardscope.core.formats.volume_spec.VolumeSpec`.

* A lone v2 array is one single-scale volume of unit-sized voxels; its axis names come from
  xarray's ``_ARRAY_DIMENSIONS`` attribute when present (else the defaults, ending in z, y, x).
* An OME-Zarr 0.4 image (a v2 group whose ``.zattrs`` hold ``multiscales``) is one multiscale
  volume placed by its coordinate transforms (:mod:`napari_shardscope.core.formats.ome`, shared with
  NGFF 0.5 in zarr v3), and its ``labels/`` group adds one segmentation per label image.

Voxels are read by TensorStore's ``zarr`` driver (which reads ``.zarray`` itself: order,
separator, compressor and fill value as the writer set them). Chunks compressed with what it does
not decode (``lz4``, ``lzma``) are decoded by :class:`~.chunk.Zarr2ChunkSource`, which the volumes
layer wraps in TensorStore's ``virtual_chunked`` driver.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from napari_shardscope.core.bytestore import ByteStore, Location, check_level_tree
from napari_shardscope.core.formats.ome import OmeMultiscale, channel_axis_by_name, ome_placement
from napari_shardscope.core.formats.volume_spec import (
    ArrayTransform,
    Kind,
    LevelSpec,
    VolumePlacement,
    VolumeSpec,
    default_axes,
    guess_kind,
    image_contrast_limits,
    lone_array_placement,
    reader_order,
)
from napari_shardscope.core.formats.zarr2.chunk import Zarr2ChunkSource
from napari_shardscope.core.formats.zarr2.metadata import (
    VIEWER_COMPRESSORS,
    Zarr2ArrayMetadata,
    array_dimension_names,
)


def array_axes(meta: Zarr2ArrayMetadata) -> tuple[str, ...]:
    """``_ARRAY_DIMENSIONS`` when complete, else the default names."""
    return array_dimension_names(meta) or default_axes(meta.ndim)


def array_placement(meta: Zarr2ArrayMetadata, key: str = "") -> VolumePlacement:
    """A lone array: one scale of unit-sized voxels at the origin, unitless, axes in presented order."""
    return lone_array_placement(array_axes(meta), meta.shape, meta.dtype.name, key)


def chunk_source(store: ByteStore, path: str, meta: Zarr2ArrayMetadata) -> Zarr2ChunkSource | None:
    """Our own chunk reader for a compressor TensorStore's zarr driver cannot decode, else ``None``."""
    codec = meta.compressor_id
    return Zarr2ChunkSource(store, path, meta) if codec is not None and codec not in VIEWER_COMPRESSORS else None


def _tensorstore(location: Location) -> dict[str, Any]:
    return {"driver": "zarr", "kvstore": location.kvstore}


def array_volume_spec(location: Location, store: ByteStore, meta: Zarr2ArrayMetadata, document: Mapping[str, Any],
                      *, kind: Kind | None = None) -> VolumeSpec:
    """A lone v2 array as a one-scale volume (``document``: its raw ``.zarray``; ``store``: rooted at it)."""
    placement = array_placement(meta)
    labelled = "image-label" in meta.attributes
    volume_kind: Kind = kind or ("segmentation" if labelled else guess_kind(meta.dtype))
    # TensorStore reads the chunks below: no FIFO, no link out, no file larger than a chunk can be
    check_level_tree(location, "", max_file_bytes=meta.max_chunk_file_bytes, is_data_key=chunk_key_test(meta))
    order = reader_order(array_axes(meta))
    level = LevelSpec.of(placement.levels[0], _tensorstore(location), ArrayTransform(order=order),
                         chunk_source=chunk_source(store, "", meta))
    return VolumeSpec(
        url=location.url, name=location.name, format="zarr2", kind=volume_kind, axes=placement.axes, unit=None,
        levels=(level,), contrast_limits=image_contrast_limits(volume_kind, meta.dtype),
        channel_axis=channel_axis_by_name(placement.axes) if volume_kind == "image" else None,
        metadata={".zarray": dict(document), ".zattrs": dict(meta.attributes)},
    )


def chunk_key_test(meta: Zarr2ArrayMetadata) -> Callable[[str], bool]:
    """Whether a key below the array is one of its chunk keys inside the grid: a directory there reads as fill."""
    def test(rel: str) -> bool:
        grid = meta.parse_chunk_key(rel)
        return grid is not None and meta.contains_grid_position(grid)
    return test


def ome_volume_spec(location: Location, store: ByteStore, ms: OmeMultiscale, arrays: Mapping[str, Zarr2ArrayMetadata],
                    ome: Mapping[str, Any], *, kind: Kind | None = None, name: str | None = None) -> VolumeSpec:
    """One OME-Zarr 0.4 multiscale image or label image at ``location`` (``ome``: the group's ``.zattrs``;
    ``store``: rooted at the group)."""
    placement = ome_placement(ms, arrays, key=f"{location.url.rstrip('/')}/.zattrs")
    for path, meta in arrays.items():  # TensorStore reads <group>/<path>/…: keep it inside the group
        check_level_tree(location, path, max_file_bytes=meta.max_chunk_file_bytes, is_data_key=chunk_key_test(meta))
    levels = tuple(LevelSpec.of(level, _tensorstore(location.child(level.key)), ArrayTransform(order=ms.order),
                                chunk_source=chunk_source(store, level.key, arrays[level.key]))
                   for level in placement.levels)
    volume_kind: Kind = kind or ("segmentation" if ms.is_label else "image")
    dtype = arrays[ms.datasets[0].path].dtype
    return VolumeSpec(
        url=location.url, name=name or ms.name or location.name, format="ome-zarr", kind=volume_kind,
        axes=placement.axes, unit=placement.unit, levels=levels,
        contrast_limits=image_contrast_limits(volume_kind, dtype, ms.window),
        channel_axis=ms.channel_axis if volume_kind == "image" else None, metadata={"ome": dict(ome)},
        channels=ms.channels if volume_kind == "image" else (),
    )
