"""The zarr v3 part of the shard browser's layout tree.

A sharded array: array → shard file → inner chunk. An unsharded array: array → chunk file (the
reader treats each chunk as a shard holding one inner chunk, the whole file). Coordinates are in
the array's own axis order (``zarr.json`` ``shape`` order), as ``shardscope locate`` takes them.

Everything is read through :class:`~.reader.Zarr3ArrayReader`, the inspector's readers, so the
tree and ``shardscope inspect``/``locate`` share one set of decoded shard indexes.
"""

from __future__ import annotations

import contextlib
import math
import re
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ArgumentError, ShardscopeError, StoreError
from napari_shardscope.core.formats.layout_model import (
    BackendBase,
    Expansion,
    LayoutNode,
    NodePath,
    ScaleGeometry,
    ShardMapBy,
    cheap_size,
    chunk_in_file_node,
    error_node,
    format_part,
    format_shape,
    scale_node,
    shard_node,
    with_totals,
)
from napari_shardscope.core.formats.problem import Problem
from napari_shardscope.core.formats.volume_spec import reader_order
from napari_shardscope.core.formats.zarr3.inspector import Zarr3Inspector
from napari_shardscope.core.formats.zarr3.reader import InnerChunkLocation, Zarr3ArrayReader

#: How ``validate`` names an inner chunk in its messages (its position inside the shard).
_INNER_CHUNK = re.compile(r"inner chunk \[([0-9, ]+)\]")


class Zarr3Layout(BackendBase):
    """:class:`~napari_shardscope.core.formats.layout_model.LayoutBackend` of a zarr v3 array or OME-Zarr group."""

    format_name = "zarr3"

    def __init__(self, inspector: Zarr3Inspector) -> None:
        self.ins = inspector

    def spatial_scales(self) -> list[str]:
        return self.ins.scale_keys()

    def reader(self, scale: str) -> Zarr3ArrayReader:
        return self.ins.reader(scale)

    def clear_cache(self) -> None:
        for key in self.ins.scale_keys():
            self.reader(key).clear_cache()

    def roots(self) -> list[LayoutNode]:
        out = []
        for key in self.ins.scale_keys():
            r = self.reader(key)
            meta = r.metadata
            if r.sharding is not None:
                layout = (
                    f"shards {format_shape(r.shard_shape)} ({math.prod(r.shard_grid_shape)} in the grid) of inner "
                    f"chunks {format_shape(r.inner_chunk_shape)}, index at the {r.sharding.index_location}"
                )
            else:
                layout = f"unsharded chunks {format_shape(meta.chunk_shape)}"
            detail = f"{format_shape(meta.shape)} {meta.data_type}; {layout}"
            out.append(scale_node(key, key or "(array)", detail, math.prod(meta.shape) * meta.dtype.itemsize))
        return out

    def geometry(self, scale: str) -> ScaleGeometry:
        r = self.reader(scale)
        meta = r.metadata
        names = meta.dimension_names or (None,) * meta.ndim
        axes = tuple(n or f"d{i}" for i, n in enumerate(names))
        return ScaleGeometry(
            scale=scale,
            axes=axes,
            shape=meta.shape,
            origin=(0,) * meta.ndim,
            chunk_shape=r.inner_chunk_shape,
            reversed_axes=False,
            voxel_size=(1.0,) * meta.ndim,
            translate=(0.0,) * meta.ndim,
            order=reader_order(axes) if meta.dimension_names is not None else None,
        )

    # -- expand --------------------------------------------------------------------------------------
    def expand(self, node: LayoutNode) -> Expansion:
        if node.kind == "scale":
            return self._expand_scale(node)
        if node.kind == "shard":
            return self._expand_shard(node)
        return Expansion(node, [])

    def _expand_scale(self, node: LayoutNode) -> Expansion:
        r = self.reader(node.scale)
        try:
            files = [(k, p) for k, p in r.list_shard_files() if r.in_grid(p)]
        except StoreError as exc:
            return Expansion(node, [error_node(node, "cannot list", str(exc), "list")])
        children = []
        for key, pos in files:
            size = cheap_size(self.ins.store, key)
            path: NodePath = (*node.path, ("shard" if r.sharding else "chunk", pos))
            if r.sharding is None:
                rng = (0, size) if size is not None else None
                loc = InnerChunkLocation(key, pos, pos, (0,) * len(pos), rng)
                children.append(self._chunk(node.scale, loc, path, size))
            else:
                children.append(shard_node(node.scale, f"shard {format_part(pos)}", path, key, size))
        updated = replace(node, detail=f"{node.detail}; {len(files)} {'shard' if r.sharding else 'chunk'} files")
        return Expansion(updated if r.sharding else with_totals(updated, children), children)

    def _expand_shard(self, node: LayoutNode) -> Expansion:
        r = self.reader(node.scale)
        shard = node.path[-1][1]
        assert isinstance(shard, tuple)
        try:
            locations = list(r.list_inner_chunks(shard))
        except ShardscopeError as exc:
            return Expansion(node, [error_node(node, "shard index", str(exc), "index")])
        children = [self._chunk(node.scale, loc, (*node.path, ("chunk", loc.inner_chunk))) for loc in locations]
        return Expansion(with_totals(node, children), children)

    def _chunk(
        self, scale: str, loc: InnerChunkLocation, path: NodePath, file_size: int | None = None, present: bool = True
    ) -> LayoutNode:
        """The row of an inner chunk (of an unsharded array: of a chunk file)."""
        meta = self.reader(scale).metadata
        return chunk_in_file_node(
            scale,
            f"chunk {format_part(loc.inner_chunk)}",
            path,
            file=loc.shard_key,
            byte_range=loc.byte_range,
            raw_bytes=self.geometry(scale).chunk_voxels(loc.inner_chunk) * meta.dtype.itemsize,
            grid_position=loc.inner_chunk,
            present=present,
            file_size=file_size,
        )

    # -- locate --------------------------------------------------------------------------------------
    def locate_grid(self, scale: str, grid: tuple[int, ...]) -> LayoutNode:
        r = self.reader(scale)
        loc = r.locate_inner_chunk(grid)
        return self._chunk(scale, loc, _chunk_path(r, scale, loc), present=loc.present)

    def shard_levels(self, scale: str) -> tuple[ShardMapBy, ...]:
        return ("shard",) if self.reader(scale).sharding is not None else ()

    def shard_values(self, scale: str, by: ShardMapBy) -> tuple[npt.NDArray[np.uint64], int]:
        r = self.reader(scale)
        if by != "shard":
            raise ArgumentError("zarr v3 shards have no minishards; map by shard")
        if r.sharding is None:
            raise ArgumentError(f"array {scale!r} is not sharded: every chunk is its own file")
        shard_of_axis = [np.arange(n) // c for n, c in zip(r.inner_grid_shape, r.chunks_per_shard, strict=True)]
        flat = np.ravel_multi_index(np.meshgrid(*shard_of_axis, indexing="ij"), r.shard_grid_shape)
        return flat.astype(np.uint64), math.prod(r.shard_grid_shape)

    # -- problems ------------------------------------------------------------------------------------
    def problem_node(self, problem: Problem) -> LayoutNode | None:
        for scale in self.ins.scale_keys():
            r = self.reader(scale)
            pos = r.shard_position(problem.key)
            if pos is None or not r.in_grid(pos):
                continue
            if r.sharding is None:
                return self.locate_grid(scale, pos)
            in_shard = _inner_chunk_named(problem.message, len(pos))
            if in_shard is None:
                path: NodePath = (("scale", scale), ("shard", pos))
                return shard_node(scale, f"shard {format_part(pos)}", path, problem.key, detail="")
            inner = tuple(p * c + i for p, c, i in zip(pos, r.chunks_per_shard, in_shard, strict=True))
            byte_range = None
            with contextlib.suppress(ShardscopeError):
                byte_range = r.locate_inner_chunk(inner).byte_range
            loc = InnerChunkLocation(problem.key, pos, inner, in_shard, byte_range)
            return self._chunk(scale, loc, _chunk_path(r, scale, loc))
        return None


def _chunk_path(reader: Zarr3ArrayReader, scale: str, loc: InnerChunkLocation) -> NodePath:
    """Where the tree shows an inner chunk: under its shard, or (unsharded) right under the array."""
    if reader.sharding is None:
        return (("scale", scale), ("chunk", loc.shard))
    return (("scale", scale), ("shard", loc.shard), ("chunk", loc.inner_chunk))


def _inner_chunk_named(message: str, ndim: int) -> tuple[int, ...] | None:
    """The position inside its shard of the inner chunk a validation message names, if it names one."""
    found = _INNER_CHUNK.search(message)
    if found is None:
        return None
    position = tuple(int(v) for v in found.group(1).split(","))
    return position if len(position) == ndim else None
