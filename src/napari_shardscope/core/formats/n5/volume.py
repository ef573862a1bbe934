"""N5 datasets and multiscale groups as :class:`~napari_shardscope.core.formats.volume_spec.VolumeSpec`.

* A dataset (``attributes.json`` with ``dimensions`` and ``dataType``) is a one-scale volume.
* A multiscale group is one volume whose scales, factors and resolutions are exactly the
  :class:`~.attributes.ScaleLevel` list :func:`~.attributes.list_scales` gives the inspector (the
  rules, and why, are in :mod:`.attributes`).

N5 lists dimensions fastest first (x, y, z) and TensorStore's ``n5`` driver keeps that order, so
every array is presented reversed (a lazy transpose) as z, y, x, and so are the voxel sizes and
factors. Voxel sizes are converted to nanometres when every axis names a length unit; otherwise
they stay as written and the volume is unitless. N5 has no offset field: translate is 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from napari_shardscope.core.bytestore import Location, check_level_tree
from napari_shardscope.core.formats.n5.attributes import ScaleLevel, is_dataset
from napari_shardscope.core.formats.n5.block import max_block_bytes
from napari_shardscope.core.formats.units import nm_factors
from napari_shardscope.core.formats.volume_spec import (
    ArrayTransform,
    Kind,
    LevelPlacement,
    LevelSpec,
    VolumePlacement,
    VolumeSpec,
    default_axes,
    guess_kind,
    image_contrast_limits,
)


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


def volume_axes(levels: Sequence[ScaleLevel], root: Mapping[str, Any]) -> tuple[str, ...]:
    """Axis names, slowest first: the ``axes`` attribute (N5 order, reversed), else the defaults.

    A group's ``axes`` is read before its ``s0``'s (Neuroglancer reads the multiscale group's).
    """
    ndim = levels[0].attributes.ndim
    sources = [root] if is_dataset(root) else [root, levels[0].attributes.extra]
    for doc in sources:
        names = doc.get("axes")
        if isinstance(names, list) and len(names) == ndim and all(isinstance(n, str) for n in names):
            return tuple(reversed([str(n) for n in names]))
    return default_axes(ndim)


def volume_placement(levels: Sequence[ScaleLevel], root: Mapping[str, Any]) -> VolumePlacement:
    """Axes, unit and every scale's placement (presented z, y, x order)."""
    sizes, unit = voxel_sizes(levels)
    placed = tuple(
        LevelPlacement(level.key, tuple(reversed(level.attributes.dimensions)),
                       np.dtype(level.attributes.data_type).name, tuple(reversed(size)),
                       (0.0,) * level.attributes.ndim, tuple(float(f) for f in reversed(level.downsampling_factors)))
        for level, size in zip(levels, sizes, strict=True)
    )
    return VolumePlacement(volume_axes(levels, root), unit, placed)


def volume_spec(location: Location, levels: Sequence[ScaleLevel], root: Mapping[str, Any], *,
                kind: Kind | None = None) -> VolumeSpec:
    """The volume at ``location``: ``levels`` from :func:`~.attributes.list_scales`, ``root`` its attributes."""
    placement = volume_placement(levels, root)
    transform = ArrayTransform(order=tuple(reversed(range(levels[0].attributes.ndim))))
    for level in levels:  # TensorStore reads <root>/<sN>/…: keep it inside the group
        check_level_tree(location, level.attributes.path, max_file_bytes=max_block_bytes(level.attributes))
    specs = tuple(
        LevelSpec.of(placed, {"driver": "n5", "kvstore": location.child(level.attributes.path).kvstore}, transform)
        for placed, level in zip(placement.levels, levels, strict=True)
    )
    dtype = np.dtype(levels[0].attributes.data_type)
    volume_kind: Kind = kind or guess_kind(dtype)
    return VolumeSpec(
        url=location.url, name=location.name, format="n5", kind=volume_kind, axes=placement.axes,
        unit=placement.unit, levels=specs, contrast_limits=image_contrast_limits(volume_kind, dtype),
        metadata={"attributes": dict(root)},
    )
