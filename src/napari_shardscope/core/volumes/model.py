"""What :func:`~napari_shardscope.core.volumes.open_volume` returns: a multiscale volume.

Everything a viewer needs to place a volume in the world without reading voxels: per scale a lazy
array, the voxel size and the world position of voxel 0 (both in nanometres when the format says
what its unit is), the axis names, and whether the data is an image or a segmentation. The
arrays are always presented in NumPy order with the slowest axis first, ``(z, y, x)`` or
``(c, z, y, x)``, whatever the format stores (precomputed and N5 list x first).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np

from napari_shardscope.core.formats.volume_spec import ChannelDisplay, FormatName, Kind
from napari_shardscope.core.volumes.lazy import LazyArray


@dataclass(frozen=True)
class ScaleLevel:
    """One resolution of a volume.

    Attributes
    ----------
    key
        The format's own name for the scale (precomputed ``"8_8_40"``, OME-Zarr ``"0"``, N5 ``"s1"``).
    array
        The lazy array, axes in :attr:`Volume.axes` order.
    voxel_size
        World size of one voxel along each axis (``1.0`` on non-spatial axes).
    translate
        World position of the voxel with index 0 along each axis (``voxel_offset * voxel_size``).
    downsampling_factors
        Voxels of the finest scale per voxel of this one along each axis (``1.0`` for the finest).
    """

    key: str
    array: LazyArray
    voxel_size: tuple[float, ...]
    translate: tuple[float, ...]
    downsampling_factors: tuple[float, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape


@dataclass(frozen=True)
class Volume:
    """A multiscale volume, finest scale first.

    Attributes
    ----------
    url
        Where it was opened from, as the user typed it.
    name
        A short display name (the last path component, or the OME label name).
    format
        ``"precomputed"``, ``"zarr3"``, ``"ome-zarr"`` or ``"n5"``.
    kind
        ``"segmentation"`` (integer object ids, shown as labels) or ``"image"``.
    axes
        Axis names in array order, e.g. ``("z", "y", "x")`` or ``("c", "z", "y", "x")``.
    unit
        The world unit of :attr:`ScaleLevel.voxel_size` on spatial axes: ``"nm"`` when the
        metadata names a length unit (converted to nanometres), ``None`` when it names none.
    levels
        The scales, finest first, each strictly smaller than the previous one.
    contrast_limits
        Display range for images, from metadata or the dtype (never computed from voxels).
    channel_axis
        Index of a channel axis in :attr:`axes`, if any.
    metadata
        Format-specific extras (e.g. the raw ``info``), for widgets that want them.
    channels
        How the metadata asks each channel to be shown (OME-Zarr ``omero``: label, colour, window,
        visibility), in channel order; empty when it says nothing. See
        :func:`~napari_shardscope.core.volumes.display.display_of` for what a viewer shows.
    """

    url: str
    name: str
    format: FormatName
    kind: Kind
    axes: tuple[str, ...]
    unit: str | None
    levels: tuple[ScaleLevel, ...]
    contrast_limits: tuple[float, float] | None = None
    channel_axis: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    channels: tuple[ChannelDisplay, ...] = ()

    @property
    def arrays(self) -> list[LazyArray]:
        """The lazy arrays, finest first (what napari takes as multiscale data)."""
        return [level.array for level in self.levels]

    @property
    def shape(self) -> tuple[int, ...]:
        return self.levels[0].shape

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.levels[0].array.dtype

    @property
    def ndim(self) -> int:
        return len(self.axes)

    @property
    def voxel_size(self) -> tuple[float, ...]:
        """Voxel size of the finest scale."""
        return self.levels[0].voxel_size

    @property
    def translate(self) -> tuple[float, ...]:
        """World position of voxel 0 of the finest scale."""
        return self.levels[0].translate

    @property
    def is_segmentation(self) -> bool:
        return self.kind == "segmentation"

    def level(self, key: str) -> ScaleLevel:
        """The scale named ``key`` (KeyError listing the names when absent)."""
        for level in self.levels:
            if level.key == key:
                return level
        raise KeyError(f"no scale {key!r}; scales are {[lv.key for lv in self.levels]}")


class _Shaped(Protocol):
    @property
    def shape(self) -> tuple[int, ...]: ...


ShapedT = TypeVar("ShapedT", bound=_Shaped)


def keep_decreasing(levels: Sequence[ShapedT]) -> tuple[ShapedT, ...]:
    """Drop scales that are not strictly smaller than the previous kept one.

    napari requires a multiscale pyramid to shrink at every level; a format may list a
    duplicate or out-of-order scale, which would otherwise make the whole layer fail.
    """
    kept: list[ShapedT] = []
    for level in sorted(levels, key=lambda lv: -int(np.prod(lv.shape, dtype=np.int64))):
        if kept:
            prev = kept[-1].shape
            if not (all(a <= b for a, b in zip(level.shape, prev, strict=True)) and level.shape != prev):
                continue
        kept.append(level)
    return tuple(kept)
