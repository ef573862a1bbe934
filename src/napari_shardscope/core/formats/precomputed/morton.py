"""Compressed Morton codes: the chunk ids of sharded precomputed volumes.

A chunk's id is its grid position ``(gx, gy, gz)`` (relative to ``voxel_offset``) with the bits of
the three coordinates interleaved x, y, z from the least significant bit up — but a dimension
stops contributing once its ``bit_length(grid_shape - 1)`` bits are used. Dropping those always-zero
bits keeps ids dense for long, thin volumes ("compressed").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ArgumentError

U64 = npt.NDArray[np.uint64]


def bits_per_dimension(grid_shape: Sequence[int]) -> tuple[int, ...]:
    """``bit_length(n - 1)`` for each grid extent: the bits that dimension contributes."""
    if any(int(n) < 1 for n in grid_shape):
        raise ArgumentError(f"grid shape must be positive in every dimension, got {tuple(grid_shape)}")
    return tuple(max(0, int(n) - 1).bit_length() for n in grid_shape)


def _bit_plan(grid_shape: Sequence[int]) -> list[tuple[int, int]]:
    """For each output bit, from least significant: (dimension, input bit)."""
    bits = bits_per_dimension(grid_shape)
    if sum(bits) > 64:
        raise ArgumentError(f"grid shape {tuple(grid_shape)} needs {sum(bits)} bits, more than a uint64 holds")
    plan = []
    for level in range(max(bits, default=0)):
        for dim, nbits in enumerate(bits):
            if level < nbits:
                plan.append((dim, level))
    return plan


def encode_morton(positions: npt.ArrayLike, grid_shape: Sequence[int]) -> U64:
    """Compressed Morton codes of grid positions.

    Parameters
    ----------
    positions
        Shape ``(..., ndim)`` integer grid positions (x, y, z order for precomputed).
    grid_shape
        Number of chunks along each dimension.

    Returns
    -------
    numpy.ndarray
        uint64 codes with shape ``positions.shape[:-1]``.
    """
    pos = np.asarray(positions)
    if pos.ndim == 0 or pos.shape[-1] != len(grid_shape):
        raise ArgumentError(f"positions must have a last axis of length {len(grid_shape)}, got shape {pos.shape}")
    if pos.dtype.kind not in "iu":
        raise ArgumentError(f"grid positions must be integers, got dtype {pos.dtype}")
    shape = np.asarray(grid_shape, dtype=np.int64)
    if pos.size and (np.any(pos < 0) or np.any(pos >= shape)):
        raise ArgumentError(f"grid position outside the grid {tuple(grid_shape)}")
    pos64 = pos.astype(np.uint64)
    code = np.zeros(pos.shape[:-1], dtype=np.uint64)
    one = np.uint64(1)
    for out_bit, (dim, in_bit) in enumerate(_bit_plan(grid_shape)):
        code |= ((pos64[..., dim] >> np.uint64(in_bit)) & one) << np.uint64(out_bit)
    return code


def decode_morton(codes: npt.ArrayLike, grid_shape: Sequence[int], *, check: bool = True) -> npt.NDArray[np.int64]:
    """Grid positions of compressed Morton codes (inverse of :func:`encode_morton`).

    With ``check`` (the default), codes with bits set above the grid's total bit count, or that
    land outside the grid, raise :class:`ArgumentError`: they name no chunk of this volume. Without
    it, such positions are returned as decoded (some coordinate >= the grid) for the caller to
    filter — an export walks whole id ranges of a non-power-of-two grid that way.
    """
    arr = np.asarray(codes)
    if arr.dtype.kind not in "iu" and not (arr.dtype.kind == "O" and arr.size == 0):
        raise ArgumentError(f"Morton codes must be integers, got dtype {arr.dtype}")
    if arr.dtype.kind == "i" and arr.size and int(arr.min()) < 0:
        raise ArgumentError("Morton codes must be non-negative")
    c = arr.astype(np.uint64)
    plan = _bit_plan(grid_shape)
    if check and len(plan) < 64 and c.size and int(c.max()) >> len(plan):
        raise ArgumentError(f"Morton code {int(c.max())} has bits beyond the {len(plan)} of grid {tuple(grid_shape)}")
    out = np.zeros((*c.shape, len(grid_shape)), dtype=np.uint64)
    one = np.uint64(1)
    for out_bit, (dim, in_bit) in enumerate(plan):
        out[..., dim] |= ((c >> np.uint64(out_bit)) & one) << np.uint64(in_bit)
    result = out.astype(np.int64)
    if check and result.size and np.any(result >= np.asarray(grid_shape, dtype=np.int64)):
        raise ArgumentError(f"Morton code names a position outside the grid {tuple(grid_shape)}")
    return result
