"""A site's voxel as two small integers: its labelmap block and its offset in that block.

An import spills every site's position several times (sorted by block, then by id). Three int32
coordinates and a u64 block index were 20 bytes a site; here the block is its (z, y, x) grid
coordinates packed as bit fields (u32 for any grid of up to 2³² blocks: sorting the fields sorts
the blocks in (z, y, x) order, as the spatial keys are) and the voxel's offset inside the block is
packed the same way (u32 for blocks of up to 2³² voxels): 8 bytes, and the block field is the spill's
sort key anyway. For a block whose sides are powers of two (every labelmap's default) the offset
*is* the voxel's index in the block's C-ordered array, so a block's supervoxels are gathered with it
directly, and packing and unpacking are shifts and masks: exact both ways.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.annotation.base import BLOCK_BITS
from napari_shardscope.core.labelmap.geometry import Box
from napari_shardscope.core.labelmap.version import LabelmapVersion

U64 = npt.NDArray[np.uint64]


def _bits(n: int) -> int:
    return max(0, (int(n) - 1).bit_length())


@dataclass(frozen=True)
class PositionCodec:
    """Packs (z, y, x) voxels of a labelmap of ``grid`` blocks of ``block`` voxels into (block, offset)."""

    block: tuple[int, int, int]
    grid: tuple[int, int, int]
    #: bits of the block fields (grid) and of the offset fields (block), z, y, x
    grid_bits: tuple[int, ...] = field(init=False)
    off_bits: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "grid_bits", tuple(_bits(g) for g in self.grid))
        object.__setattr__(self, "off_bits", tuple(_bits(b) for b in self.block))

    @property
    def lin_dtype(self) -> np.dtype[Any]:
        return np.dtype(np.uint32 if sum(self.grid_bits) <= 32 else np.uint64)

    @property
    def offset_dtype(self) -> np.dtype[Any]:
        return np.dtype(np.uint32 if sum(self.off_bits) <= 32 else np.uint64)

    @property
    def pow2(self) -> bool:
        """Every side of the block is a power of two (the offset is then the index in the block's array)."""
        return all(b == 1 << s for b, s in zip(self.block, self.off_bits, strict=True))

    def pack(self, zyx: npt.NDArray[Any]) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        """``(n, 3)`` z, y, x voxels (non-negative, inside the labelmap) → each row's block and offset in it."""
        lt, ot = self.lin_dtype, self.offset_dtype
        lin = np.zeros(len(zyx), lt)
        off = np.zeros(len(zyx), ot)
        for axis in range(3):
            v = zyx[:, axis]
            b, s = self.block[axis], self.off_bits[axis]
            q, r = (v >> s, v & (b - 1)) if b == 1 << s else (v // b, v % b)
            if axis:
                lin <<= lt.type(self.grid_bits[axis])
                off <<= ot.type(s)
            lin |= q.astype(lt)
            off |= r.astype(ot)
        return lin, off

    def fields(self, lin: npt.NDArray[Any]) -> tuple[npt.NDArray[Any], ...]:
        """The z, y, x block coordinates of block fields ``lin`` (their dtype)."""
        return _split(lin, self.grid_bits)

    def block_codes(self, lin: npt.NDArray[Any]) -> U64:
        """The spatial table's block codes (:func:`~.base.block_code`) of block fields ``lin``, same order."""
        bz, by, bx = (f.astype(np.uint64) for f in self.fields(lin))
        bz <<= np.uint64(2 * BLOCK_BITS)
        by <<= np.uint64(BLOCK_BITS)
        bz |= by
        bz |= bx
        return bz

    def unpack(self, lin: npt.NDArray[Any], off: npt.NDArray[Any]) -> tuple[npt.NDArray[np.int32], ...]:
        """The int32 z, y, x columns of rows given by :meth:`pack` (labelmaps below 2³¹ voxels per axis)."""
        out = []
        for q, r, b, s in zip(self.fields(lin), _split(off, self.off_bits), self.block, self.off_bits, strict=True):
            v: npt.NDArray[Any] = q.astype(np.int64 if q.dtype == np.uint64 else np.uint32)
            v = (v << v.dtype.type(s)) if b == 1 << s else (v * v.dtype.type(b))
            v += r.astype(v.dtype)
            out.append(v.astype(np.int32) if v.dtype.itemsize != 4 else v.view(np.int32))
        return tuple(out)


def _split(packed: npt.NDArray[Any], bits: Sequence[int]) -> tuple[npt.NDArray[Any], ...]:
    t = packed.dtype.type
    _, sy, sx = bits
    return (packed >> t(sy + sx), (packed >> t(sx)) & t((1 << sy) - 1), packed & t((1 << sx) - 1))


def codec_of(block: Sequence[int], grid: Sequence[int]) -> PositionCodec:
    """The codec of a labelmap's block grid."""
    return PositionCodec((int(block[0]), int(block[1]), int(block[2])), (int(grid[0]), int(grid[1]), int(grid[2])))


def supervoxels_of_offsets(lmv: LabelmapVersion, codec: PositionCodec, lin: npt.NDArray[Any],
                           off: npt.NDArray[Any], starts: npt.NDArray[Any]) -> U64:
    """The supervoxel under each site given as (block, offset) rows grouped by block (``starts``: each
    block's first row, ascending from 0): each block read once, past the caches, and gathered by offset.

    A whole power-of-two block is gathered with the offsets as they are (no coordinates rebuilt); a block
    cut by the labelmap's edge, or of other sides, by the offsets unpacked against its shape.
    """
    out = np.zeros(len(lin), dtype=np.uint64)
    shape = lmv.scales[0].shape
    bounds = [*np.asarray(starts, dtype=np.int64).tolist(), len(lin)]
    for a, b in itertools.pairwise(bounds):
        cell = [int(f[0]) for f in codec.fields(lin[a:a + 1])]
        lo = [c * s for c, s in zip(cell, codec.block, strict=True)]
        hi = [min(v + s, n) for v, s, n in zip(lo, codec.block, shape, strict=True)]
        data = lmv.read_once(Box(tuple(lo), tuple(hi)), bodies=False)  # type: ignore[arg-type]
        flat = np.ascontiguousarray(data).reshape(-1)
        if codec.pow2 and tuple(data.shape) == codec.block:
            out[a:b] = flat[off[a:b]]
            continue
        rz, ry, rx = (r.astype(np.intp) for r in _split(off[a:b], codec.off_bits))
        _, ny, nx = data.shape
        out[a:b] = flat[(rz * ny + ry) * nx + rx]
    return out
