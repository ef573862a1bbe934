"""Boxes, block grids and voxel selections in (z, y, x) array coordinates.

Every position here is a zero-origin index of one scale's array (the reader presents every volume
that way); world coordinates are the caller's business (``voxel_size`` and ``translate`` of each
scale are kept in the configuration for them). Scale ``s`` voxel ``i`` covers scale-0 voxels
``[i·f, (i+1)·f)`` per axis, ``f`` the scale's downsampling factor, the convention of mode
downsampling (TensorStore's ``downsample`` driver) and of Neuroglancer pyramids.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ArgumentError

Coord = tuple[int, int, int]


def as_coord(values: Sequence[int] | npt.ArrayLike, what: str = "coordinate") -> Coord:
    """Three ints (z, y, x), or :class:`ArgumentError` naming ``what``."""
    arr = np.asarray(values)
    if arr.shape != (3,) or arr.dtype.kind not in "iu":
        raise ArgumentError(f"{what} must be three integers (z, y, x), got {values!r}")
    return int(arr[0]), int(arr[1]), int(arr[2])


@dataclass(frozen=True)
class Box:
    """A half-open box ``[lo, hi)`` of voxels (z, y, x)."""

    lo: Coord
    hi: Coord

    @classmethod
    def of_shape(cls, shape: Sequence[int]) -> Box:
        return cls((0, 0, 0), as_coord(shape, "shape"))

    @property
    def shape(self) -> Coord:
        return (max(0, self.hi[0] - self.lo[0]), max(0, self.hi[1] - self.lo[1]), max(0, self.hi[2] - self.lo[2]))

    @property
    def empty(self) -> bool:
        return any(h <= lo for lo, h in zip(self.lo, self.hi, strict=True))

    @property
    def slices(self) -> tuple[slice, slice, slice]:
        return (slice(self.lo[0], self.hi[0]), slice(self.lo[1], self.hi[1]), slice(self.lo[2], self.hi[2]))

    def intersect(self, other: Box) -> Box:
        lo = (max(self.lo[0], other.lo[0]), max(self.lo[1], other.lo[1]), max(self.lo[2], other.lo[2]))
        hi = (min(self.hi[0], other.hi[0]), min(self.hi[1], other.hi[1]), min(self.hi[2], other.hi[2]))
        return Box(lo, hi)

    def union(self, other: Box) -> Box:
        """The smallest box holding both (an empty box is ignored)."""
        if self.empty:
            return other
        if other.empty:
            return self
        lo = (min(self.lo[0], other.lo[0]), min(self.lo[1], other.lo[1]), min(self.lo[2], other.lo[2]))
        hi = (max(self.hi[0], other.hi[0]), max(self.hi[1], other.hi[1]), max(self.hi[2], other.hi[2]))
        return Box(lo, hi)

    def relative_to(self, origin: Coord) -> tuple[slice, slice, slice]:
        """Slices of this box inside an array whose element 0 is at ``origin``."""
        return tuple(slice(lo - o, h - o) for lo, h, o in zip(self.lo, self.hi, origin, strict=True))  # type: ignore[return-value]

    def to_json(self) -> dict[str, list[int]]:
        return {"lo": list(self.lo), "hi": list(self.hi)}


def box_from_key(key: Any, shape: Coord) -> tuple[Box, tuple[int, ...]]:
    """The box a NumPy-style key (ints, step-1 slices, one ``...``) selects, and the axes ints drop."""
    items = list(key) if isinstance(key, tuple) else [key]
    if sum(1 for i in items if i is Ellipsis) > 1:
        raise ArgumentError("an index can only have a single ellipsis ('...')")
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at:at + 1] = [slice(None)] * (3 - (len(items) - 1))
    if len(items) > 3:
        raise ArgumentError(f"too many indices for a (z, y, x) volume: {key!r}")
    lo: list[int] = []
    hi: list[int] = []
    dropped: list[int] = []
    for axis in range(3):
        item = items[axis] if axis < len(items) else slice(None)
        n = shape[axis]
        if isinstance(item, int | np.integer) and not isinstance(item, bool):
            i = int(item) + (n if int(item) < 0 else 0)
            if not 0 <= i < n:
                raise ArgumentError(f"index {item} out of bounds for axis {axis} of size {n}")
            lo.append(i)
            hi.append(i + 1)
            dropped.append(axis)
        elif isinstance(item, slice):
            start, stop, step = item.indices(n)
            if step != 1:
                raise ArgumentError("region reads take step-1 slices")
            lo.append(start)
            hi.append(max(start, stop))
        else:
            raise ArgumentError(f"region reads take ints and slices, got {item!r}")
    return Box((lo[0], lo[1], lo[2]), (hi[0], hi[1], hi[2])), tuple(dropped)


@dataclass(frozen=True)
class BlockGrid:
    """The overlay block grid of one scale: blocks of ``block`` voxels over an array of ``shape``."""

    shape: Coord
    block: Coord

    @property
    def grid(self) -> Coord:
        return (-(-self.shape[0] // self.block[0]), -(-self.shape[1] // self.block[1]),
                -(-self.shape[2] // self.block[2]))

    def box(self, coords: Coord) -> Box:
        """Voxels of block ``coords`` (clipped at the array's far faces)."""
        lo = (coords[0] * self.block[0], coords[1] * self.block[1], coords[2] * self.block[2])
        hi = (min(lo[0] + self.block[0], self.shape[0]), min(lo[1] + self.block[1], self.shape[1]),
              min(lo[2] + self.block[2], self.shape[2]))
        return Box(lo, hi)

    def blocks_in(self, box: Box) -> Iterator[Coord]:
        """Grid positions of every block ``box`` touches, z-major."""
        box = box.intersect(Box.of_shape(self.shape))
        if box.empty:
            return
        ranges = [range(lo // b, -(-h // b)) for lo, h, b in zip(box.lo, box.hi, self.block, strict=True)]
        yield from ((z, y, x) for z, y, x in itertools.product(*ranges))

    def block_of(self, voxel: Coord) -> Coord:
        return (voxel[0] // self.block[0], voxel[1] // self.block[1], voxel[2] // self.block[2])


def coarse_box(box: Box, factors: Coord, shape: Coord) -> Box:
    """The voxels of a scale with ``factors`` (array ``shape``) whose footprints meet scale-0 ``box``."""
    lo = (box.lo[0] // factors[0], box.lo[1] // factors[1], box.lo[2] // factors[2])
    hi = (-(-box.hi[0] // factors[0]), -(-box.hi[1] // factors[1]), -(-box.hi[2] // factors[2]))
    return Box(lo, hi).intersect(Box.of_shape(shape))


def footprint(box: Box, factors: Coord, shape0: Coord) -> Box:
    """The scale-0 voxels a box of a coarser scale downsamples from (clipped to scale 0)."""
    lo = (box.lo[0] * factors[0], box.lo[1] * factors[1], box.lo[2] * factors[2])
    hi = (box.hi[0] * factors[0], box.hi[1] * factors[1], box.hi[2] * factors[2])
    return Box(lo, hi).intersect(Box.of_shape(shape0))


@dataclass(frozen=True)
class VoxelMask:
    """A set of scale-0 voxels: a boolean ``mask`` whose element 0 is voxel ``offset`` (z, y, x).

    The form a painted selection naturally has (a brush stroke in a small box); coordinate lists
    convert to it with :func:`voxel_mask`.
    """

    offset: Coord
    mask: npt.NDArray[np.bool_]

    @property
    def box(self) -> Box:
        s = self.mask.shape
        return Box(self.offset, (self.offset[0] + s[0], self.offset[1] + s[1], self.offset[2] + s[2]))

    @property
    def count(self) -> int:
        return int(np.count_nonzero(self.mask))

    def coordinates(self) -> npt.NDArray[np.int64]:
        """The selected voxels as an (N, 3) array of (z, y, x)."""
        return np.argwhere(self.mask).astype(np.int64) + np.asarray(self.offset, dtype=np.int64)


def voxel_mask(voxels: VoxelMask | npt.ArrayLike) -> VoxelMask:
    """A :class:`VoxelMask` from itself, or from an (N, 3) array of voxel coordinates (z, y, x)."""
    if isinstance(voxels, VoxelMask):
        if voxels.mask.ndim != 3:
            raise ArgumentError(f"a voxel mask must be 3-D, got shape {voxels.mask.shape}")
        return VoxelMask(voxels.offset, np.asarray(voxels.mask, dtype=bool))
    arr = np.asarray(voxels)
    if arr.size == 0:
        return VoxelMask((0, 0, 0), np.zeros((0, 0, 0), dtype=bool))
    if arr.ndim != 2 or arr.shape[1] != 3 or arr.dtype.kind not in "iu":
        raise ArgumentError(f"voxels must be an (N, 3) integer array of (z, y, x), got shape {arr.shape}")
    arr = arr.astype(np.int64)
    if arr.min() < 0:
        raise ArgumentError("voxel coordinates must be non-negative")
    lo = arr.min(axis=0)
    hi = arr.max(axis=0) + 1
    mask = np.zeros(tuple(int(v) for v in hi - lo), dtype=bool)
    rel = arr - lo
    mask[rel[:, 0], rel[:, 1], rel[:, 2]] = True
    return VoxelMask((int(lo[0]), int(lo[1]), int(lo[2])), mask)
