"""A site's voxel as two small integers: its labelmap block (linear, x fastest) and its offset in that block.

An import spills every site's position several times (sorted by block, then by id). Three int32
coordinates and a u64 block index were 20 bytes a site; the block's linear index (u32 for any grid
of up to 2³² blocks) and the offset inside the block (u32 for blocks of up to 2³² voxels: the bits of
each axis of the block packed z, y, x) are 8, and the block index is the spill's sort key anyway.
Packing and unpacking are a few vectorised integer operations, exact both ways.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class PositionCodec:
    """Packs (z, y, x) voxels of a labelmap of ``grid`` blocks of ``block`` voxels into (block, offset)."""

    block: tuple[int, int, int]
    grid: tuple[int, int, int]

    @property
    def bits(self) -> tuple[int, int, int]:
        """Bits of an offset along z, y, x (a block of 64 voxels: 6)."""
        return tuple(max(0, (b - 1).bit_length()) for b in self.block)  # type: ignore[return-value]

    @property
    def lin_dtype(self) -> np.dtype[Any]:
        top = self.grid[0] * self.grid[1] * self.grid[2]
        return np.dtype(np.uint32 if top <= 1 << 32 else np.uint64)

    @property
    def offset_dtype(self) -> np.dtype[Any]:
        return np.dtype(np.uint32 if sum(self.bits) <= 32 else np.uint64)

    def pack(self, zyx: npt.NDArray[Any]) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        """``(n, 3)`` z, y, x voxels (inside the labelmap) → each row's block index and offset in it."""
        lin_t, off_t = self.lin_dtype.type, self.offset_dtype.type
        bz, by, bx = self.block
        gy, gx = self.grid[1], self.grid[2]
        _, sy, sx = self.bits
        z, y, x = zyx[:, 0], zyx[:, 1], zyx[:, 2]
        lin = (z // bz).astype(self.lin_dtype)
        lin *= lin_t(gy)
        lin += (y // by).astype(self.lin_dtype)
        lin *= lin_t(gx)
        lin += (x // bx).astype(self.lin_dtype)
        off = (z % bz).astype(self.offset_dtype)
        off <<= off_t(sy + sx)
        off |= ((y % by).astype(self.offset_dtype) << off_t(sx))
        off |= (x % bx).astype(self.offset_dtype)
        return lin, off

    def unpack(self, lin: npt.NDArray[Any], off: npt.NDArray[Any]) -> tuple[npt.NDArray[np.int32], ...]:
        """The int32 z, y, x columns of rows given by :meth:`pack` (labelmaps below 2³¹ voxels per axis)."""
        bz, by, bx = self.block
        gy, gx = self.grid[1], self.grid[2]
        _, sy, sx = self.bits
        lin64 = lin.astype(np.int64)
        off64 = off.astype(np.int64)
        x = (lin64 % gx) * bx + (off64 & ((1 << sx) - 1))
        rest = lin64 // gx
        y = (rest % gy) * by + ((off64 >> sx) & ((1 << sy) - 1))
        z = (rest // gy) * bz + (off64 >> (sy + sx))
        return z.astype(np.int32), y.astype(np.int32), x.astype(np.int32)


def codec_of(block: Sequence[int], grid: Sequence[int]) -> PositionCodec:
    """The codec of a labelmap's block grid."""
    return PositionCodec((int(block[0]), int(block[1]), int(block[2])), (int(grid[0]), int(grid[1]), int(grid[2])))
