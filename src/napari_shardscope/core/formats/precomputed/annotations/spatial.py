"""The spatial index: grid cells, their keys, the cells a box touches, and building the levels.

A level is a grid of ``grid_shape`` cells of ``chunk_size`` starting at the ``info``'s
``lower_bound``; cell ``c`` spans ``[lower + c * chunk_size, lower + (c + 1) * chunk_size]`` in each
dimension (closed, as the spec writes it). An unsharded level stores cell ``(1, 2, 3)`` as the file
``1_2_3``; a sharded one under the cell's compressed Morton code (:mod:`..morton`).

Building follows the spec's sampling rule: level 0 is the whole box; each finer level keeps every
``chunk_size`` component or halves it, whichever gives the more isotropic cell (the halving rule the
spec recommends and CloudVolume's writer follows). At each level, ``maxCount`` is the most annotations
remaining in any one cell; every remaining annotation is emitted with probability
``min(1, limit / maxCount)``, in every cell it touches, and the rest go on to the next level — so each
annotation is stored at exactly one level, the coarsest where it was kept, and a viewer reading the
coarse levels sees a uniform subsample. The draw is a hash of the annotation id and the level (the
output is reproducible), and a cell lists its annotations in the order of a hash of their ids (the
spec's "pseudo-randomly based on the annotation id").

Two bounds keep the build proportionate: an annotation (a long line, a large box) is emitted at the
latest at the level after which its bounding box would touch more than :data:`MAX_CELLS_PER_ANNOTATION`
cells; and at the level where the grid would need more than 62 bits of cell index (any sharded key is a
64-bit Morton code), everything left is emitted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.formats.precomputed.annotations.info import SpatialLevel
from napari_shardscope.core.formats.precomputed.annotations.table import I64, U64, Annotations
from napari_shardscope.core.formats.precomputed.morton import bits_per_dimension, decode_morton, encode_morton

F64 = npt.NDArray[np.float64]

#: Most cells one annotation is written into at one level (see the module docstring).
MAX_CELLS_PER_ANNOTATION = 64
#: Most bits of cell index a built level may need (keys are int64 while building, Morton codes stored).
MAX_GRID_BITS = 62
#: Most levels a build makes (the grid-bits bound ends it first for any float extent).
MAX_BUILD_LEVELS = 40


# -- cells and keys --------------------------------------------------------------------------------------
def cell_key(cell: Sequence[int]) -> str:
    """The unsharded file name of a cell: ``"1_2_3"``."""
    return "_".join(str(int(c)) for c in cell)


def parse_cell_key(name: str, level: SpatialLevel) -> tuple[int, ...] | None:
    """The cell an unsharded file name holds (``.gz`` of CloudVolume's local layout allowed), or ``None``."""
    stem = name.removesuffix(".gz")
    parts = stem.split("_")
    if len(parts) != len(level.grid_shape) or not all(p.isdigit() and (p == "0" or not p.startswith("0"))
                                                       for p in parts):
        return None
    cell = tuple(int(p) for p in parts)
    return cell if all(c < g for c, g in zip(cell, level.grid_shape, strict=True)) else None


def cell_chunk_id(level: SpatialLevel, cell: Sequence[int]) -> int:
    """The compressed Morton code of a cell: its key in a sharded level."""
    return int(encode_morton(np.asarray([list(cell)], dtype=np.int64), level.grid_shape)[0])


def cell_chunk_ids(level: SpatialLevel, cells: npt.NDArray[np.int64]) -> U64:
    return encode_morton(cells, level.grid_shape)


def cell_of_chunk_id(level: SpatialLevel, chunk_id: int) -> tuple[int, ...]:
    """The cell a sharded level's key names (ArgumentError for a code outside the grid)."""
    return tuple(int(c) for c in decode_morton(np.asarray([chunk_id], dtype=np.uint64), level.grid_shape)[0])


def check_cell(level: SpatialLevel, cell: Sequence[int], name: str = "cell") -> tuple[int, ...]:
    """``cell`` as integers inside the level's grid (ArgumentError naming the grid otherwise)."""
    values = tuple(int(c) for c in cell)
    if len(values) != len(level.grid_shape) or any(not 0 <= c < g for c, g in zip(values, level.grid_shape,
                                                                                    strict=True)):
        raise ArgumentError(f"{name} {list(cell)} is not a cell of grid {list(level.grid_shape)} ({level.key})")
    return values


def cell_bounds(level: SpatialLevel, lower_bound: Sequence[float], cell: Sequence[int]) -> tuple[F64, F64]:
    """The box a cell spans: ``(lower, upper)`` in the annotations' coordinates."""
    lower = np.asarray(lower_bound, dtype=np.float64)
    size = np.asarray(level.chunk_size, dtype=np.float64)
    c = np.asarray(cell, dtype=np.float64)
    return lower + c * size, lower + (c + 1) * size


def cell_ranges(level: SpatialLevel, lower_bound: Sequence[float], lo: npt.ArrayLike,
                hi: npt.ArrayLike) -> tuple[I64, I64]:
    """The first and last cell (inclusive, clipped to the grid) each box ``[lo, hi]`` touches.

    ``lo``/``hi`` are ``(rank,)`` or ``(n, rank)``; a box entirely outside the grid gets an empty range
    (some last < first).
    """
    lower = np.asarray(lower_bound, dtype=np.float64)
    size = np.asarray(level.chunk_size, dtype=np.float64)
    grid = np.asarray(level.grid_shape, dtype=np.int64)
    with np.errstate(invalid="ignore", over="ignore"):
        first = np.floor((np.asarray(lo, dtype=np.float64) - lower) / size)
        last = np.floor((np.asarray(hi, dtype=np.float64) - lower) / size)
    first = np.nan_to_num(first, nan=0.0, posinf=float(1 << 62), neginf=-1.0)
    last = np.nan_to_num(last, nan=-1.0, posinf=float(1 << 62), neginf=-1.0)
    empty = (last < 0) | (first > grid - 1)
    first_i = np.clip(first, 0, grid - 1).astype(np.int64)
    last_i = np.clip(last, 0, grid - 1).astype(np.int64)
    last_i = np.where(empty, first_i - 1, last_i)
    return first_i, last_i


def cells_in_range(first: Sequence[int] | I64, last: Sequence[int] | I64) -> npt.NDArray[np.int64]:
    """Every cell of the inclusive range ``[first, last]``, as ``(k, rank)`` (C order, last axis fastest)."""
    spans = [max(0, int(b) - int(a) + 1) for a, b in zip(first, last, strict=True)]
    if 0 in spans:
        return np.zeros((0, len(spans)), dtype=np.int64)
    grids = np.meshgrid(*[np.arange(int(a), int(a) + s, dtype=np.int64) for a, s in zip(first, spans, strict=True)],
                        indexing="ij")
    return np.stack([g.reshape(-1) for g in grids], axis=1)


def count_cells(first: Sequence[int] | I64, last: Sequence[int] | I64) -> int:
    return math.prod(max(0, int(b) - int(a) + 1) for a, b in zip(first, last, strict=True))


# -- building the levels -----------------------------------------------------------------------------------
def next_chunk_size(chunk_size: Sequence[float]) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """The next level's ``chunk_size`` and per-dimension factor (2 where halved, else 1).

    The largest component is halved; every other one is halved when its half is closer (in ratio) to
    that new size than it is itself — the spec's "equal to, or half of, whichever results in a more
    spatially isotropic chunk".
    """
    target = max(chunk_size) / 2
    out, factors = [], []
    for c in chunk_size:
        halve = abs(math.log(c / 2 / target)) < abs(math.log(c / target))
        out.append(c / 2 if halve else c)
        factors.append(2 if halve else 1)
    return tuple(out), tuple(factors)


@dataclass(frozen=True, eq=False)
class LevelCells:
    """One built level: its grid, and per non-empty cell the annotations it lists.

    ``cells[j]`` lists ``members[starts[j]:starts[j + 1]]`` (indices into the batch), in the order the
    cell's encoding stores them.
    """

    grid_shape: tuple[int, ...]
    chunk_size: tuple[float, ...]
    cells: npt.NDArray[np.int64]
    starts: I64
    members: I64

    @property
    def max_count(self) -> int:
        return int(np.diff(self.starts).max()) if self.cells.shape[0] else 0

    def members_of(self, j: int) -> I64:
        return self.members[int(self.starts[j]): int(self.starts[j + 1])]


def splitmix64(values: U64) -> U64:
    """The splitmix64 finaliser of each value: a well-mixed 64-bit hash (vectorised, wraps modulo 2**64)."""
    with np.errstate(over="ignore"):
        z = values + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def uniform_draw(ids: U64, level: int) -> F64:
    """A number in ``[0, 1)`` per (id, level), the same every time."""
    with np.errstate(over="ignore"):
        salted = ids ^ (np.uint64(level + 1) * np.uint64(0xD1B54A32D192ED03))
    return (splitmix64(salted) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def build_levels(batch: Annotations, lower_bound: Sequence[float], upper_bound: Sequence[float],
                 limit: int) -> list[LevelCells]:
    """The spatial index levels of ``batch`` (see the module docstring), coarse to fine.

    ``upper_bound`` must exceed ``lower_bound`` in every dimension (a zero extent has no cells), and every
    annotation's box must lie inside them.
    """
    if limit < 1:
        raise ArgumentError(f"limit must be a positive integer, got {limit}")
    lower = np.asarray(lower_bound, dtype=np.float64)
    extent = np.asarray(upper_bound, dtype=np.float64) - lower
    if np.any(extent <= 0):
        raise ArgumentError(f"upper_bound {list(upper_bound)} must exceed lower_bound {list(lower_bound)} "
                            "in every dimension")
    lo, hi = batch.bounds()
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        raise ArgumentError("annotation geometry must be finite (NaN or infinite coordinates have no cell)")
    rel_lo = lo - lower
    rel_hi = rel_lo if batch.schema.annotation_type == "point" else hi - lower
    rank = lower.size
    chunk: tuple[float, ...] = tuple(float(e) for e in extent)
    grid: tuple[int, ...] = (1,) * rank
    remaining = np.arange(len(batch), dtype=np.int64)
    hashes = splitmix64(batch.ids)
    levels: list[LevelCells] = []
    for level in range(MAX_BUILD_LEVELS):
        if remaining.size == 0:
            break
        next_chunk, factors = next_chunk_size(chunk)
        next_grid = tuple(g * f for g, f in zip(grid, factors, strict=True))
        last = level == MAX_BUILD_LEVELS - 1 or sum(bits_per_dimension(next_grid)) > MAX_GRID_BITS
        sub_lo = rel_lo[remaining]
        sub_hi = sub_lo if rel_hi is rel_lo else rel_hi[remaining]
        first_c = _cells_at(sub_lo, chunk, grid)
        spans = np.ones_like(first_c) if sub_hi is sub_lo else _cells_at(sub_hi, chunk, grid) - first_c + 1
        owners, flat = _pairs(first_c, spans, np.prod(spans, axis=1), grid)
        max_count = _max_count(flat, math.prod(grid))
        p = min(1.0, limit / max_count) if max_count else 1.0
        keep = uniform_draw(batch.ids[remaining], level) < p
        if last:
            keep[:] = True
        elif sub_hi is not sub_lo:  # a point touches one cell at every level
            n_spans = _cells_at(sub_hi, next_chunk, next_grid) - _cells_at(sub_lo, next_chunk, next_grid) + 1
            keep |= np.prod(n_spans, axis=1) > MAX_CELLS_PER_ANNOTATION
        emitted_pairs = keep[owners]
        levels.append(_level_cells(grid, chunk, remaining[owners[emitted_pairs]], flat[emitted_pairs], hashes))
        remaining = remaining[~keep]
        chunk, grid = next_chunk, next_grid
    return levels


def _cells_at(rel: F64, chunk: tuple[float, ...], grid: tuple[int, ...]) -> I64:
    """The cell of each position (relative to the lower bound, inside the bounds) at one level."""
    cells = np.floor(rel / np.asarray(chunk, dtype=np.float64)).astype(np.int64)
    np.clip(cells, 0, np.asarray(grid, dtype=np.int64) - 1, out=cells)
    return cells


def _max_count(flat: I64, num_cells: int) -> int:
    """The most pairs in one cell: counted in a table when the grid is small, by sorting otherwise."""
    if flat.size == 0:
        return 0
    if num_cells <= max(1 << 22, 4 * flat.size):
        return int(np.bincount(flat, minlength=1).max())
    return int(np.unique(flat, return_counts=True)[1].max())


def _pairs(first: I64, spans: I64, ncells: I64, grid: tuple[int, ...]) -> tuple[I64, I64]:
    """``(owner, flat cell index)`` of every (annotation, touched cell) pair; owners index ``first``."""
    n = first.shape[0]
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if np.all(ncells == 1):
        return np.arange(n, dtype=np.int64), np.asarray(np.ravel_multi_index(tuple(first.T), grid), dtype=np.int64)
    owners = np.repeat(np.arange(n, dtype=np.int64), ncells)
    within = np.arange(owners.size, dtype=np.int64) - np.repeat(np.cumsum(ncells) - ncells, ncells)
    cells = np.empty((owners.size, first.shape[1]), dtype=np.int64)
    for d in range(first.shape[1] - 1, -1, -1):  # last dimension fastest
        s = spans[owners, d]
        cells[:, d] = first[owners, d] + within % s
        within //= s
    return owners, np.asarray(np.ravel_multi_index(tuple(cells.T), grid), dtype=np.int64)


def _level_cells(grid: tuple[int, ...], chunk: tuple[float, ...], members: I64, flat: I64, hashes: U64) -> LevelCells:
    order = np.lexsort((hashes[members], flat))
    flat, members = flat[order], members[order]
    if flat.size:
        boundaries = np.flatnonzero(np.diff(flat)) + 1
        starts = np.concatenate([[0], boundaries, [flat.size]]).astype(np.int64)
        unique_flat = flat[starts[:-1]]
        cells = np.stack(np.unravel_index(unique_flat, grid), axis=1).astype(np.int64)
    else:
        starts = np.zeros(1, np.int64)
        cells = np.zeros((0, len(grid)), np.int64)
    return LevelCells(grid, chunk, cells, starts, members)
