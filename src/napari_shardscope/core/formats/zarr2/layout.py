"""The zarr v2 part of the shard browser's layout tree: array → slab of chunks along the first axis → chunk.

A v2 array has no shards and no index: each chunk is a file (key) named by its grid position, so
a scale is a store listing and a chunk's size is a stat, as for N5. Coordinates are the array's
own order (the order of ``shape``), which is also the viewer's.
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
from napari_shardscope.core.formats.problem import Problem
from napari_shardscope.core.formats.volume_spec import reader_order
from napari_shardscope.core.formats.zarr2.chunk import chunk_store_key, list_chunks
from napari_shardscope.core.formats.zarr2.inspector import Zarr2Inspector
from napari_shardscope.core.formats.zarr2.metadata import Zarr2ArrayMetadata
from napari_shardscope.core.formats.zarr2.volume import array_axes


class Zarr2Layout(BackendBase):
    """:class:`~napari_shardscope.core.formats.layout_model.LayoutBackend` of a zarr v2 array or OME-Zarr 0.4 image."""

    format_name = "zarr2"

    def __init__(self, inspector: Zarr2Inspector) -> None:
        self.ins = inspector

    def spatial_scales(self) -> list[str]:
        return self.ins.scale_keys()

    def roots(self) -> list[LayoutNode]:
        out = []
        for key in self.ins.scale_keys():
            meta = self.ins.metadata(key)
            detail = (f"{format_shape(meta.shape)} {meta.dtype.str} in {format_shape(meta.grid_shape)} chunks of "
                      f"{format_shape(meta.chunks)}, {meta.compressor_id or 'raw'}, order {meta.order}; "
                      "no shards (one file per chunk)")
            out.append(scale_node(key, key or "(array)", detail, math.prod(meta.shape) * meta.dtype.itemsize))
        return out

    def geometry(self, scale: str) -> ScaleGeometry:
        meta = self.ins.metadata(scale)
        placement = self.ins.placement(scale)
        ms = self.ins.dataset.multiscale
        axes = ms.axes if ms is not None else array_axes(meta)
        return ScaleGeometry(
            scale=scale, axes=axes, shape=meta.shape, origin=(0,) * meta.ndim, chunk_shape=meta.chunks,
            reversed_axes=False, voxel_size=placement.voxel_size, translate=placement.translate,
            unit=ms.nm_factors()[1] if ms is not None else None, order=reader_order(axes),
        )

    def _chunks(self, scale: str) -> list[ChunkFile]:
        """``(grid position, key)`` of every stored chunk inside the grid."""
        meta = self.ins.metadata(scale)
        return [(grid, key) for key, grid in list_chunks(self.ins.store, scale, meta)
                if meta.contains_grid_position(grid)]

    def expand(self, node: LayoutNode) -> Expansion:
        if node.kind == "scale":
            files = list_chunk_files(node, lambda: self._chunks(node.scale))
            return expand_slabs(node, files, self.geometry(node.scale))
        if node.kind == "group":
            store = self.ins.store
            return expand_slab(node, self._chunks(node.scale), self.geometry(node.scale),
                               lambda f: self._chunk(node.scale, f, cheap_size(store, f[1])))
        return Expansion(node, [])

    def _chunk(self, scale: str, chunk: ChunkFile, size: int | None, present: bool = True) -> LayoutNode:
        grid, key = chunk
        meta: Zarr2ArrayMetadata = self.ins.metadata(scale)
        return chunk_file_node(
            scale, f"chunk {meta.chunk_key(grid)}",
            (("scale", scale), ("group", grid[self.geometry(scale).slab_axis]), ("chunk", grid)),
            key=key, size=size, raw_bytes=meta.chunk_nbytes, grid_position=grid, present=present,
        )

    def locate_grid(self, scale: str, grid: tuple[int, ...]) -> LayoutNode:
        key = chunk_store_key(scale, self.ins.metadata(scale), grid)
        present, size = probe_file(self.ins.store, key)
        return self._chunk(scale, (grid, key), size, present)

    def problem_node(self, problem: Problem) -> LayoutNode | None:
        for scale in self.ins.scale_keys():
            meta = self.ins.metadata(scale)
            prefix = f"{scale}/" if scale else ""
            if not problem.key.startswith(prefix):
                continue
            grid = meta.parse_chunk_key(problem.key[len(prefix):])
            if grid is not None and meta.contains_grid_position(grid):
                return self._chunk(scale, (grid, problem.key), cheap_size(self.ins.store, problem.key))
        return None
