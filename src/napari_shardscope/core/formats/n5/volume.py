"""N5 datasets and multiscale groups as :class:`~napari_shardscope.core.formats.volume_spec.VolumeSpec`.

* A dataset (``attributes.json`` with ``dimensions`` and ``dataType``) is a one-scale volume.
* A multiscale group is one volume whose scales, factors and resolutions are exactly the
  :class:`~.attributes.ScaleLevel` list :func:`~.attributes.list_scales` gives the inspector (the
  rules, and why, are in :mod:`.attributes`).

N5 lists dimensions fastest first (x, y, z) and TensorStore's ``n5`` driver keeps that order, so
every array is presented through a lazy transpose in the reader's order — reversed, z, y, x, for
the usual x, y, z; a channel axis first (:func:`stored_axes` names the axes) — and so are the voxel
sizes and factors. What that driver does not read — ``lz4`` blocks, N5 before 1.0 (``compressionType``), a
dataset without ``blockSize`` — is read block by block by :class:`N5ChunkSource` (our own block
decoder behind TensorStore's ``virtual_chunked`` driver), the same way for the viewer and export;
local ``raw`` and ``gzip`` datasets, which it reads, are decoded faster by
:class:`~.direct_source.N5DirectSource` (libdeflate, straight into the reader's buffers).
Voxel sizes are converted to nanometres when every axis names a length unit; otherwise they stay as
written and the volume is unitless. N5 has no offset field: translate is 0, unless a COSEM
``transform`` gives one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.bytestore import ByteStore, Location, check_level_tree
from napari_shardscope.core.errors import UnsupportedFeatureError
from napari_shardscope.core.formats.n5.attributes import DatasetAttributes, ScaleLevel, is_dataset, needs_own_reader
from napari_shardscope.core.formats.n5.block import (
    MODE_DEFAULT,
    format_block_key,
    max_block_bytes,
    parse_block_path,
    read_block,
)
from napari_shardscope.core.formats.n5.direct_source import n5_direct_source
from napari_shardscope.core.formats.ome import channel_axis_by_name
from napari_shardscope.core.formats.units import nm_factors
from napari_shardscope.core.formats.volume_spec import (
    ArrayTransform,
    ChunkSource,
    Kind,
    LevelPlacement,
    LevelSpec,
    VolumePlacement,
    VolumeSpec,
    default_axes,
    guess_kind,
    image_contrast_limits,
    permute,
    reader_order,
)

#: The longest axis still taken for channels when the layout (block size 1) marks it as one (:func:`stored_axes`).
MAX_CHANNELS = 16


def voxel_sizes(levels: Sequence[ScaleLevel]) -> tuple[list[tuple[float, ...]], str | None]:
    """Every scale's voxel size in N5 order, and the unit: nm when every axis of every scale names a length unit.

    Without a resolution, voxels are unit-sized; with units that are not all lengths (Neuroglancer's
    ``["nm", "s"]``), values are kept as written and the volume is unitless — all scales alike, so
    a pyramid is never half converted.
    """
    raw = [level.resolution or (1.0,) * level.attributes.ndim for level in levels]
    factors = [nm_factors(level.units) if level.units is not None and level.resolution is not None else None
               for level in levels]
    if any(f is None for f in factors):
        return [tuple(float(v) for v in r) for r in raw], None
    sizes = [tuple(float(v) * x for v, x in zip(r, f or (), strict=True)) for r, f in zip(raw, factors, strict=True)]
    return sizes, "nm"


def stored_axes(levels: Sequence[ScaleLevel], root: Mapping[str, Any]) -> tuple[str, ...] | None:
    """Axis names in N5 order (fastest first), as written or as the layout makes plain; ``None`` when unknown.

    The ``axes`` attribute when it names every axis (a group's is read before its ``s0``'s, as
    Neuroglancer reads it). Without one, the axes are ``x, y(, z)`` (N5's and Java's convention) and a
    channel axis, recognised by its layout: a short axis (at most :data:`MAX_CHANNELS`) stored one
    block per index (block size 1) while every other axis is blocked.

    * First axis (fastest): channels, for 3-D and 4-D data — nobody blocks a spatial x by 1. This
      is how n5-java, zarr-python's ``N5Store`` and z5py store an RGB image (``[3, 512, 512]``,
      blocks ``[1, 100, 100]``: ``c, x, y``) and webKnossos a 4-D volume (``c, x, y, z``).
    * Last axis of 4-D data (after x, y, z): channels (``x, y, z, c``).
    * Last axis of 3-D data stays ``z``: one block per section is how EM stacks are often written, so a
      short stack blocked by section is a stack, not channels.

    The same names go to every route that reads the blocks (TensorStore's driver, our block decoder,
    the direct libdeflate source): they all share one presented order (:func:`presented_order`).
    """
    first = levels[0].attributes
    ndim = first.ndim
    sources = [root] if is_dataset(root) else [root, first.extra]
    for doc in sources:
        names = doc.get("axes")
        if isinstance(names, list) and len(names) == ndim and all(isinstance(n, str) for n in names):
            return tuple(str(n) for n in names)
    if ndim == 2:
        return ("x", "y")
    if ndim not in (3, 4):
        return None

    def channel_like(i: int) -> bool:
        others = [b for j, b in enumerate(first.block_size) if j != i]
        return first.block_size[i] == 1 and first.dimensions[i] <= MAX_CHANNELS and min(others) > 1

    last = ndim - 1
    if channel_like(0) and not channel_like(last):
        return ("c", "x", "y", "z")[:ndim]
    if ndim == 4 and channel_like(last) and not channel_like(0):
        return ("x", "y", "z", "c")
    return ("x", "y", "z") if ndim == 3 else None


def presented_order(levels: Sequence[ScaleLevel], root: Mapping[str, Any]) -> tuple[int, ...]:
    """For each presented axis, the N5 axis it shows: the reader's order of the named axes, else reversed."""
    names = stored_axes(levels, root)
    ndim = levels[0].attributes.ndim
    reversed_order = tuple(reversed(range(ndim)))
    if names is None:
        return reversed_order
    order = reader_order(names)
    if order is None:  # already slowest-first, or no x and y named: N5's order reversed, as always
        return reversed_order if reader_order(tuple(reversed(names))) is None else tuple(range(ndim))
    return order


def volume_axes(levels: Sequence[ScaleLevel], root: Mapping[str, Any]) -> tuple[str, ...]:
    """Axis names in presented order (:func:`presented_order`); the defaults when none can be told."""
    names = stored_axes(levels, root)
    if names is None:
        return default_axes(levels[0].attributes.ndim)
    return permute(names, presented_order(levels, root))


def offsets(levels: Sequence[ScaleLevel], unit: str | None) -> list[tuple[float, ...]]:
    """Every scale's world position of voxel 0 (N5 order): a COSEM ``translate`` in the volume's unit, else 0."""
    out = []
    for level in levels:
        n = level.attributes.ndim
        if level.translate is None:
            out.append((0.0,) * n)
            continue
        factors = nm_factors(level.units) if unit == "nm" and level.units is not None else None
        out.append(tuple(t * f for t, f in zip(level.translate, factors or (1.0,) * n, strict=True)))
    return out


def volume_placement(levels: Sequence[ScaleLevel], root: Mapping[str, Any]) -> VolumePlacement:
    """Axes, unit and every scale's placement (presented z, y, x order)."""
    sizes, unit = voxel_sizes(levels)
    order = presented_order(levels, root)
    placed = tuple(
        LevelPlacement(level.key, permute(level.attributes.dimensions, order),
                       np.dtype(level.attributes.data_type).name, permute(size, order),
                       permute(offset, order), permute(tuple(float(f) for f in level.downsampling_factors), order))
        for level, size, offset in zip(levels, sizes, offsets(levels, unit), strict=True)
    )
    return VolumePlacement(volume_axes(levels, root), unit, placed)


@dataclass(frozen=True)
class N5ChunkSource:
    """The blocks of one N5 dataset decoded by :mod:`.block`, for what TensorStore's ``n5`` driver does not read.

    A :class:`~napari_shardscope.core.formats.volume_spec.ChunkSource` in N5 order (x first), like
    the array TensorStore's driver opens, so the level's transform reverses it the same way.
    """

    store: ByteStore
    attributes: DatasetAttributes

    @property
    def shape(self) -> tuple[int, ...]:
        return self.attributes.dimensions

    @property
    def dtype(self) -> np.dtype[Any]:
        return np.dtype(self.attributes.data_type)

    @property
    def chunk_shape(self) -> tuple[int, ...]:
        return self.attributes.block_size

    @property
    def fill_value(self) -> Any:
        return 0

    def read_chunk(self, grid: tuple[int, ...]) -> npt.NDArray[Any] | None:
        block = read_block(self.store, self.attributes, grid)
        if block is None:
            return None
        if block.header.mode != MODE_DEFAULT:
            raise UnsupportedFeatureError("N5 varlength blocks in the viewer", key=format_block_key(self.attributes,
                                                                                                     grid))
        return block.data.T.astype(self.dtype)  # x first, native byte order


def level_chunk_source(store: ByteStore | None, attributes: DatasetAttributes) -> ChunkSource | None:
    """Who decodes a level's blocks instead of TensorStore's driver: ``None`` when the driver does.

    :class:`N5ChunkSource` for what the driver cannot read (:func:`needs_own_reader`); our
    libdeflate decoder (:class:`~.direct_source.N5DirectSource`) for local raw and gzip datasets,
    which it reads faster; the driver for the rest. Nothing without ``store``.
    """
    if store is None:
        return None
    if needs_own_reader(attributes):
        return N5ChunkSource(store, attributes)
    return n5_direct_source(store, attributes)


def block_path_test(attributes: DatasetAttributes) -> Callable[[str], bool]:
    """Whether a key below the dataset is one of its block paths inside the grid: a directory there reads as fill."""
    def test(rel: str) -> bool:
        grid = parse_block_path(rel, attributes.ndim)
        return grid is not None and attributes.contains_grid_position(grid)
    return test


def volume_spec(location: Location, levels: Sequence[ScaleLevel], root: Mapping[str, Any], *,
                kind: Kind | None = None, store: ByteStore | None = None) -> VolumeSpec:
    """The volume at ``location``: ``levels`` from :func:`~.attributes.list_scales`, ``root`` its attributes.

    ``store`` (rooted at ``location``) serves the levels TensorStore's driver cannot read
    (:func:`needs_own_reader`) and those our own decoder reads faster (:func:`level_chunk_source`);
    without it they are opened through the driver all the same.
    """
    placement = volume_placement(levels, root)
    transform = ArrayTransform(order=presented_order(levels, root))
    for level in levels:  # TensorStore reads <root>/<sN>/…: keep it inside the group
        check_level_tree(location, level.attributes.path, max_file_bytes=max_block_bytes(level.attributes),
                         is_data_key=block_path_test(level.attributes))
    specs = tuple(
        LevelSpec.of(placed, {"driver": "n5", "kvstore": location.child(level.attributes.path).kvstore}, transform,
                     level_chunk_source(store, level.attributes))
        for placed, level in zip(placement.levels, levels, strict=True)
    )
    dtype = np.dtype(levels[0].attributes.data_type)
    volume_kind: Kind = kind or guess_kind(dtype)
    return VolumeSpec(
        url=location.url, name=location.name, format="n5", kind=volume_kind, axes=placement.axes,
        unit=placement.unit, levels=specs, contrast_limits=image_contrast_limits(volume_kind, dtype),
        channel_axis=channel_axis_by_name(placement.axes) if volume_kind == "image" else None,
        metadata={"attributes": dict(root)},
    )
