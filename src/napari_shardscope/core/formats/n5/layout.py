"""The N5 part of the shard browser's layout tree: dataset → slab of blocks along z → block.

N5 has no shards and no index: each block is a file named by its grid position, so a scale is a
store listing and a block's size is a stat. Slabs group the listing into pieces a person can
scroll. Coordinates are N5's (``dimensions`` order, x first).
"""

from __future__ import annotations

import math

from napari_shardscope.core.formats.layout_model import (
    BackendBase,
    ChunkFile,
    Expansion,
    LayoutNode,
    ScaleGeometry,
    cheap_size,
    chunk_file_node,
    expand_slab,
    expand_slabs,
    format_shape,
    list_chunk_files,
    probe_file,
    scale_node,
)
from napari_shardscope.core.formats.n5.attributes import DatasetAttributes
from napari_shardscope.core.formats.n5.block import format_block_key, format_block_path, list_blocks, parse_block_key
from napari_shardscope.core.formats.n5.inspector import N5Inspector
from napari_shardscope.core.formats.problem import Problem
from napari_shardscope.core.formats.units import nm_per_unit

#: Axis names of an N5 dataset in its own order (x first), up to five axes.
AXIS_NAMES = ("x", "y", "z", "c", "t")


class N5Layout(BackendBase):
    """:class:`~napari_shardscope.core.formats.layout_model.LayoutBackend` of an N5 dataset or multiscale group."""

    format_name = "n5"

    def __init__(self, inspector: N5Inspector) -> None:
        self.ins = inspector

    def spatial_scales(self) -> list[str]:
        return self.ins.scale_keys()

    def attributes(self, scale: str) -> DatasetAttributes:
        return self.ins.level(scale).attributes

    def roots(self) -> list[LayoutNode]:
        out = []
        for lvl in self.ins.levels:
            a = lvl.attributes
            detail = (
                f"{format_shape(a.dimensions)} {a.data_type} in {format_shape(a.grid_shape)} blocks of "
                f"{format_shape(a.block_size)}, {a.compression.to_json().get('type')}; no shards (one file per block)"
            )
            out.append(scale_node(lvl.key, lvl.key or "(dataset)", detail, math.prod(a.dimensions) * a.dtype.itemsize))
        return out

    def geometry(self, scale: str) -> ScaleGeometry:
        lvl = self.ins.level(scale)
        n = lvl.attributes.ndim
        placed = self.ins.placement.level(scale) if scale in self.ins.scale_keys() else None
        factor = nm_per_unit(lvl.unit) or 1.0
        return ScaleGeometry(
            scale=scale,
            axes=self.ins.stored_axes or (AXIS_NAMES[:n] if n <= len(AXIS_NAMES) else tuple(f"d{i}" for i in range(n))),
            shape=lvl.attributes.dimensions,
            origin=(0,) * n,
            chunk_shape=lvl.attributes.block_size,
            reversed_axes=True,
            order=self.ins.presented_order,
            voxel_size=placed.voxel_size if placed is not None else tuple(
                reversed([r * factor for r in lvl.resolution or (1.0,) * n])),
            translate=placed.translate if placed is not None else (0.0,) * n,
            unit=self.ins.placement.unit if placed is not None else ("nm" if nm_per_unit(lvl.unit) else None),
        )

    def _blocks(self, scale: str) -> list[ChunkFile]:
        """``(grid position, key)`` of every stored block inside the grid."""
        a = self.attributes(scale)
        return [(grid, key) for key, grid in list_blocks(self.ins.store, a) if a.contains_grid_position(grid)]

    def expand(self, node: LayoutNode) -> Expansion:
        if node.kind == "scale":
            files = list_chunk_files(node, lambda: self._blocks(node.scale))
            return expand_slabs(node, files, self.geometry(node.scale))
        if node.kind == "group":
            store = self.ins.store
            return expand_slab(
                node,
                self._blocks(node.scale),
                self.geometry(node.scale),
                lambda f: self._block(node.scale, f, cheap_size(store, f[1])),
            )
        return Expansion(node, [])

    def _block(self, scale: str, block: ChunkFile, size: int | None, present: bool = True) -> LayoutNode:
        grid, key = block
        a = self.attributes(scale)
        return chunk_file_node(
            scale,
            f"block {format_block_path(grid)}",
            (("scale", scale), ("group", grid[self.geometry(scale).slab_axis]), ("chunk", grid)),
            key=key,
            size=size,
            raw_bytes=math.prod(a.block_shape(grid)) * a.dtype.itemsize,
            grid_position=grid,
            present=present,
        )

    def locate_grid(self, scale: str, grid: tuple[int, ...]) -> LayoutNode:
        key = format_block_key(self.attributes(scale), grid)
        present, size = probe_file(self.ins.store, key)
        return self._block(scale, (grid, key), size, present)

    def problem_node(self, problem: Problem) -> LayoutNode | None:
        for lvl in self.ins.levels:
            grid = parse_block_key(lvl.attributes, problem.key)
            if grid is not None and lvl.attributes.contains_grid_position(grid):
                return self._block(lvl.key, (grid, problem.key), cheap_size(self.ins.store, problem.key))
        return None
