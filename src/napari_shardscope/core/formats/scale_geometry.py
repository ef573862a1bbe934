"""Where the voxels of one scale are: axis orders, the chunk grid, and the volume's world.

:class:`ScaleGeometry` is the one place the layout tree converts between the three ways a voxel is
named: the *format's* order and origin (x, y, z for precomputed and N5, ``zarr.json`` order for
zarr v3; a precomputed ``voxel_offset`` included), the reader's index (z, y, x from 0, as napari
and ``open_volume`` index the volume) and world coordinates (array order, voxel ``i`` centred at
``translate + i * voxel_size``). Split from :mod:`.layout_model` (which re-exports it): every
format's layout backend and every locate door converts through it, and the rules are easier to
check in a module of their own. See :mod:`.layout_model` for the conventions in full.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from napari_shardscope.core.errors import ArgumentError

#: Record fields that are positions in a chunk grid (one value per axis, format order in an inspector's record).
_GRID_FIELDS = ("grid_position", "inner_chunk", "inner_chunk_in_shard", "shard")

@dataclass(frozen=True)
class ScaleGeometry:
    """Where the voxels of one scale are in the volume's world.

    Attributes
    ----------
    scale
        The scale key.
    axes
        Axis names in format order.
    shape
        Voxels per axis (format order).
    origin
        Absolute coordinate of the first voxel (precomputed ``voxel_offset``; 0 elsewhere).
    chunk_shape
        The unit the tree lists as a chunk: precomputed chunk, zarr v3 inner chunk, N5 block.
    reversed_axes
        Whether the format's order is the reverse of the array order (precomputed and N5 list x
        first, arrays are z, y, x).
    order
        Any other permutation: for each array axis, the format axis it shows (zarr ``c, x, y, z``
        presented as ``c, z, y, x``); overrides :attr:`reversed_axes` when set.
    voxel_size, translate
        Per array axis (the last ``len(shape)`` axes of the volume): world size of a voxel and
        world position of the centre of voxel 0.
    unit
        World unit (``"nm"``) or ``None`` for unitless voxels.
    """

    scale: str
    axes: tuple[str, ...]
    shape: tuple[int, ...]
    origin: tuple[int, ...]
    chunk_shape: tuple[int, ...]
    reversed_axes: bool
    voxel_size: tuple[float, ...]
    translate: tuple[float, ...]
    unit: str | None = None
    order: tuple[int, ...] | None = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return tuple(-(-s // c) for s, c in zip(self.shape, self.chunk_shape, strict=True))

    @property
    def array_axes(self) -> tuple[str, ...]:
        return self.to_array_order(self.axes)

    @property
    def array_order(self) -> tuple[int, ...]:
        """For each array (napari) axis, the format axis it shows."""
        if self.order is not None:
            return self.order
        return tuple(reversed(range(self.ndim))) if self.reversed_axes else tuple(range(self.ndim))

    @property
    def slab_axis(self) -> int:
        """The format axis shown as the slowest spatial one (z): z for precomputed and N5, the first for zarr."""
        order = self.array_order
        return order[-3] if self.order is not None and self.ndim >= 3 else order[0]

    def to_array_order(self, values: Sequence[Any]) -> tuple[Any, ...]:
        """Format order → array (napari) order."""
        values = tuple(values)
        return tuple(values[i] for i in self.array_order)

    def to_format_order(self, values: Sequence[Any]) -> tuple[Any, ...]:
        """Array (napari) order → format order."""
        out: list[Any] = [None] * len(values)
        for array_axis, format_axis in enumerate(self.array_order):
            out[format_axis] = values[array_axis]
        return tuple(out)

    @property
    def array_shape(self) -> tuple[int, ...]:
        """Voxels per axis in the reader's (array) order."""
        return self.to_array_order(self.shape)

    @property
    def same_order(self) -> bool:
        """Whether the format's coordinates are the reader's index (same order, no offset)."""
        return self.array_order == tuple(range(self.ndim)) and not any(self.origin)

    def format_voxel(self, index: Sequence[int]) -> tuple[int, ...]:
        """A voxel as the reader indexes it (z, y, x from 0; leading non-spatial axes may be left out and are
        then 0) → absolute, format order (what :meth:`grid_position` and the format's files use).

        Raises
        ------
        ArgumentError
            For a count of coordinates other than the axes', or a voxel outside the scale, naming the
            axes in the reader's order and the scale's shape.
        """
        values = [int(v) for v in index]
        axes = self.array_axes
        spatial = min(self.ndim, 3)
        if not spatial <= len(values) <= self.ndim:
            wanted = ", ".join(axes[-spatial:]) if spatial == self.ndim else f"{', '.join(axes[-spatial:])} or " \
                f"{', '.join(axes)}"
            raise ArgumentError(f"a voxel of scale {self.scale!r} is {wanted} (from 0), got {tuple(values)}")
        full = [0] * (self.ndim - len(values)) + values
        shape = self.array_shape
        if any(not 0 <= v < n for v, n in zip(full, shape, strict=True)):
            raise ArgumentError(
                f"voxel ({', '.join(map(str, values))}) is outside scale {self.scale!r}: its shape is "
                f"{', '.join(f'{a} {n}' for a, n in zip(axes, shape, strict=True))}"
            )
        return tuple(v + o for v, o in zip(self.to_format_order(full), self.origin, strict=True))

    def reader_index(self, voxel: Sequence[int]) -> tuple[int, ...]:
        """An absolute format-order voxel (or chunk bound) → the reader's index (array order, from 0)."""
        return self.to_array_order([int(v) - o for v, o in zip(voxel, self.origin, strict=True)])

    def reader_record(self, record: dict[str, Any]) -> dict[str, Any]:
        """An inspector's locate / ls record in the reader's terms, the format's own beside.

        ``voxel`` becomes z, y, x from 0 and the grid positions (``grid_position``, ``inner_chunk``,
        ``inner_chunk_in_shard``, a zarr ``shard``) the reader's axis order; where a value differs from
        the format's, that one is kept as ``format_<field>``, with ``format_axes`` naming its order.
        ``axes`` names the reader's order. Byte ranges are ``[start, end)`` either way.
        """
        out = dict(record)
        out["axes"] = list(self.array_axes)
        differs = False
        voxel = record.get("voxel")
        if isinstance(voxel, list) and len(voxel) == self.ndim:
            index = [int(v) for v in self.reader_index(voxel)]
            if index != voxel:
                out["format_voxel"], differs = voxel, True
            out["voxel"] = index
        for name in _GRID_FIELDS:
            grid = record.get(name)
            if isinstance(grid, list) and len(grid) == self.ndim and all(isinstance(g, int) for g in grid):
                ordered = list(self.to_array_order(grid))
                if ordered != grid:
                    out[f"format_{name}"], differs = grid, True
                out[name] = ordered
        if differs:
            out["format_axes"] = list(self.axes)
        return out

    def grid_position(self, voxel: Sequence[int]) -> tuple[int, ...]:
        """The chunk holding ``voxel`` (absolute, format order); :class:`ArgumentError` outside."""
        if len(voxel) != self.ndim:
            raise ArgumentError(
                f"a voxel of scale {self.scale!r} has {self.ndim} coordinates "
                f"({', '.join(self.axes)}), got {tuple(voxel)}"
            )
        rel = [int(v) - o for v, o in zip(voxel, self.origin, strict=True)]
        if any(not 0 <= r < s for r, s in zip(rel, self.shape, strict=True)):
            hi = tuple(o + s for o, s in zip(self.origin, self.shape, strict=True))
            raise ArgumentError(
                f"voxel {tuple(int(v) for v in voxel)} is outside scale {self.scale!r}: "
                f"[{self.origin}, {hi}) in {', '.join(self.axes)} order"
            )
        return tuple(r // c for r, c in zip(rel, self.chunk_shape, strict=True))

    def chunk_bounds(self, grid_position: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Absolute voxel bounds ``[start, stop)`` of a chunk (format order), clipped to the volume."""
        start = tuple(o + int(g) * c for o, g, c in zip(self.origin, grid_position, self.chunk_shape, strict=True))
        stop = tuple(
            min(a + c, o + s) for a, c, o, s in zip(start, self.chunk_shape, self.origin, self.shape, strict=True)
        )
        return start, stop

    def chunk_voxels(self, grid_position: Sequence[int]) -> int:
        """Voxels of a chunk inside the volume (an edge chunk is clipped)."""
        start, stop = self.chunk_bounds(grid_position)
        return math.prod(b - a for a, b in zip(start, stop, strict=True))

    def world_box(self, start: Sequence[int], stop: Sequence[int]) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """World corners (array order) of the voxels ``[start, stop)`` given absolutely in format order.

        The box runs along voxel edges: half a voxel before the first centre, half after the last.
        """
        a = self.to_array_order([int(s) - o for s, o in zip(start, self.origin, strict=True)])
        b = self.to_array_order([int(s) - o for s, o in zip(stop, self.origin, strict=True)])
        lo = tuple(t + (i - 0.5) * v for t, i, v in zip(self.translate, a, self.voxel_size, strict=True))
        hi = tuple(t + (i - 0.5) * v for t, i, v in zip(self.translate, b, self.voxel_size, strict=True))
        return lo, hi

    def chunk_world_box(self, grid_position: Sequence[int]) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """World corners (array order) of one chunk."""
        return self.world_box(*self.chunk_bounds(grid_position))

    def voxel_at_world(self, world: Sequence[float]) -> tuple[int, ...]:
        """The voxel (absolute, format order) whose centre is nearest ``world`` (array order).

        ``world`` may carry leading non-spatial axes (a channel); only its last :attr:`ndim`
        values are used.
        """
        w = tuple(float(x) for x in world)[-self.ndim :]
        if len(w) != self.ndim:
            raise ArgumentError(f"a world position of scale {self.scale!r} has {self.ndim} coordinates, got {world}")
        index = [math.floor((x - t) / v + 0.5) for x, t, v in zip(w, self.translate, self.voxel_size, strict=True)]
        return tuple(i + o for i, o in zip(self.to_format_order(index), self.origin, strict=True))
