"""Zarr v3 arrays and OME-Zarr multiscale groups as :class:`~napari_shardscope.core.formats.volume_spec.VolumeSpec`.

* A single zarr v3 array (sharded or not) is one single-scale volume. Axis names come from
  ``dimension_names`` (all of them strings; otherwise the defaults, ending in z, y, x); zarr v3 has
  no voxel-size field, so the unit is ``None`` and voxels are unit-sized.
* An OME-Zarr image group is one multiscale volume: each ``datasets[i]`` is a scale, placed by its
  composed coordinate transforms (:mod:`.ome`), with length units on ``space`` axes converted to
  nanometres. A scale's downsampling factors are its ``scale`` over the first dataset's. Its
  ``labels`` group adds one segmentation volume per label image, so opening an image brings its
  labels along, as the OME-Zarr spec intends.

Shapes and dtypes come from each array's parsed ``zarr.json`` (:class:`~.metadata.ArrayMetadata`,
the object the inspector reads shards with); voxels are read by TensorStore's ``zarr3`` driver in
the array's own axis order, which is already the presented order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from napari_shardscope.core.bytestore import ByteStore, Location, check_level_tree
from napari_shardscope.core.formats.ome import (
    OmeMultiscale,
    channel_axis_by_name,
    is_label_array,
    ome_placement,
)
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
from napari_shardscope.core.formats.zarr3.codecs import check_codec_names
from napari_shardscope.core.formats.zarr3.direct_source import zarr3_chunk_source
from napari_shardscope.core.formats.zarr3.metadata import ArrayMetadata, max_chunk_file_bytes


def array_axes(meta: ArrayMetadata) -> tuple[str, ...]:
    """``dimension_names`` when every one is a string, else the default names."""
    names = meta.dimension_names
    if names is not None and all(isinstance(n, str) for n in names):
        return tuple(str(n) for n in names)
    return default_axes(meta.ndim)


def array_placement(meta: ArrayMetadata, key: str = "") -> VolumePlacement:
    """A lone array: one scale of unit-sized voxels at the origin, unitless, axes in presented order."""
    return lone_array_placement(array_axes(meta), meta.shape, meta.dtype.name, key)


def array_volume_spec(location: Location, meta: ArrayMetadata, document: Mapping[str, Any], *,
                      kind: Kind | None = None, store: ByteStore | None = None) -> VolumeSpec:
    """A single zarr v3 array as a one-scale volume (``document``: its raw ``zarr.json``).

    ``store`` (rooted at ``location``) serves an array we decode faster than TensorStore's driver
    (:func:`~.direct_source.zarr3_chunk_source`)."""
    check_codec_names(meta.codecs, key=f"{location.url.rstrip('/')}/zarr.json")
    placement = array_placement(meta)
    volume_kind: Kind = kind or ("segmentation" if is_label_array(meta.attributes) else guess_kind(meta.dtype))
    # TensorStore reads the chunks below: no FIFO, no link out, no file larger than the spec allows
    check_level_tree(location, "", max_file_bytes=max_chunk_file_bytes(meta), is_data_key=chunk_key_test(meta))
    level = LevelSpec.of(placement.levels[0], {"driver": "zarr3", "kvstore": location.kvstore},
                         ArrayTransform(order=reader_order(array_axes(meta))), zarr3_chunk_source(store, "", meta))
    return VolumeSpec(
        url=location.url, name=location.name, format="zarr3", kind=volume_kind, axes=placement.axes, unit=None,
        levels=(level,), contrast_limits=image_contrast_limits(volume_kind, meta.dtype),
        channel_axis=channel_axis_by_name(placement.axes) if volume_kind == "image" else None,
        metadata={"zarr.json": dict(document)},
    )


def chunk_key_test(meta: ArrayMetadata) -> Callable[[str], bool]:
    """Whether a key below the array is one of its chunk (or shard) keys inside the grid: a directory there
    reads as fill."""
    grid = meta.grid_shape

    def test(rel: str) -> bool:
        pos = meta.chunk_key_encoding.decode(rel, meta.ndim)
        return pos is not None and all(0 <= p < n for p, n in zip(pos, grid, strict=True))
    return test


def ome_volume_spec(location: Location, ms: OmeMultiscale, arrays: Mapping[str, ArrayMetadata],
                    ome: Mapping[str, Any], *, kind: Kind | None = None, name: str | None = None,
                    store: ByteStore | None = None) -> VolumeSpec:
    """One OME-Zarr multiscale image or label image at ``location``.

    ``arrays`` maps each dataset path to its parsed ``zarr.json``; ``ome`` is the group's OME
    metadata (kept as the volume's metadata); ``store`` (rooted at ``location``) serves the arrays
    we decode faster than TensorStore's driver (:func:`~.direct_source.zarr3_chunk_source`).
    """
    key = f"{location.url.rstrip('/')}/zarr.json"
    for path, meta in arrays.items():
        check_codec_names(meta.codecs, key=f"{location.child(path).url}/zarr.json")
    placement = ome_placement(ms, arrays, key=key)
    for path, meta in arrays.items():  # TensorStore reads <group>/<path>/…: keep it inside the group
        check_level_tree(location, path, max_file_bytes=max_chunk_file_bytes(meta), is_data_key=chunk_key_test(meta))
    levels = tuple(LevelSpec.of(level, {"driver": "zarr3", "kvstore": location.child(level.key).kvstore},
                                ArrayTransform(order=ms.order), zarr3_chunk_source(store, level.key, arrays[level.key]))
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
