"""The layout of a sharded dataset as a lazily expanded tree, and where a chunk sits in the world.

This is everything the shard browser shows, as calls a notebook can make too (a path or a URL):

>>> from napari_shardscope.core.layout import open_layout
>>> from napari_shardscope.core.sample_data import ensure_sample_dataset
>>> tree = open_layout(ensure_sample_dataset().segmentation)   # reads metadata only
>>> scale = tree.roots()[0]
>>> scale.name, scale.raw_bytes                      # the finest scale, and its voxels' size decoded
('8_8_40', 33554432)
>>> shards = tree.children(scale)                   # lists shard files; no index is read
>>> [shard.file for shard in shards]
['8_8_40/0.shard', '8_8_40/1.shard', '8_8_40/2.shard', '8_8_40/3.shard']
>>> minishards = tree.children(shards[0])           # reads that shard's indexes, nothing else
>>> hit = tree.locate_voxel((20, 30, 100))          # z, y, x from 0: chunk, shard, minishard, bytes, world box
>>> hit.node.name, hit.node.file, hit.node.byte_range
('chunk 33 @ [1, 0, 2]', '8_8_40/0.shard', (19111, 21404))
>>> tree.shard_map(by="shard").values.shape         # the chunk grid coloured by shard: ids only, no reads
(8, 4, 4)
>>> list(tree.validate())                           # every index and chunk checked: no problems
[]

Why a tree that expands lazily: a large volume has 10⁴–10⁶ shard files, each with its own index.
Opening must cost the metadata only, listing a scale costs one directory listing (plus a stat per
file where a stat is cheap), and an index is read only when its shard is expanded, so a
proofreader can look at one corner of a petabyte dataset without waiting for the rest.

The levels are, per format (each format package's ``layout`` module makes them):

* precomputed (sharded): scale → shard file → minishard → chunk (Morton id); segment-keyed
  directories (meshes, skeletons, annotations) are further roots whose chunks are segment ids;
* precomputed (unsharded) and N5: scale/dataset → slab of chunks along the slowest axis (z) →
  chunk file / block (neither format has an index, so a slab groups a listing into pieces a person
  can scroll);
* zarr v3: array → shard file → inner chunk (an unsharded array: array → chunk file).

Every node carries what is known about it without further reads: stored chunks, stored bytes, raw
(decoded) bytes and so the compression ratio; ``None`` means "not known until expanded".

This module is format-agnostic: it caches expansions, places chunks in the volume's world and
turns grid positions into locate results. The node types and coordinate conventions are those
of :mod:`napari_shardscope.core.formats.layout_model`, re-exported here as the tree's public API.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import replace

import numpy as np

from napari_shardscope.core.bytestore import Location
from napari_shardscope.core.bytestore.url import split_format
from napari_shardscope.core.errors import ArgumentError, ShardscopeError
from napari_shardscope.core.formats import Dataset, DatasetInspector, Problem, format_named, open_dataset
from napari_shardscope.core.formats.layout_model import (
    Expansion,
    LayoutBackend,
    LayoutNode,
    Located,
    NodePath,
    ScaleGeometry,
    ShardMap,
    ShardMapBy,
    format_bytes,
    format_part,
)
from napari_shardscope.core.formats.volume_spec import LevelSpec, VolumeSpec
from napari_shardscope.core.progress import Progress
from napari_shardscope.core.volumes.model import ScaleLevel as VolumeLevel
from napari_shardscope.core.volumes.model import Volume

#: A shard map is one value per chunk; beyond this many chunks ask for a coarser scale.
MAX_SHARD_MAP_CHUNKS = 1 << 22


# -- formatting ---------------------------------------------------------------------------------------
def format_ratio(ratio: float | None) -> str:
    """``3.25`` → ``"3.2×"``; ``None`` → ``""``."""
    return "" if ratio is None else f"{ratio:.1f}×"


def parse_position(text: str, length: int | None = None) -> tuple[int, ...]:
    """Integers typed by a person: ``"10, 20, 3"``, ``"10 20 3"``, ``"[10, 20, 3]"`` or ``"42"``.

    Raises
    ------
    ArgumentError
        For anything else, or a count other than ``length`` when given.
    """
    parts = [p for p in re.split(r"[\s,;]+", text.strip().strip("[]()").strip()) if p]
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise ArgumentError(f"{text!r} is not a list of integers (e.g. 10, 20, 3)") from None
    if not values:
        raise ArgumentError("nothing to locate: type a number or a position such as 10, 20, 3")
    if length is not None and len(values) != length:
        raise ArgumentError(f"expected {length} integer(s), got {len(values)} in {text!r}")
    return values


def _format_path(path: NodePath) -> str:
    return " / ".join(f"{kind} {format_part(value)}" for kind, value in path)


# -- the tree -----------------------------------------------------------------------------------------
class LayoutTree:
    """A lazily expanded tree over a dataset's :class:`~napari_shardscope.core.formats.api.DatasetInspector`.

    Parameters
    ----------
    inspector
        The dataset's inspector (``open_dataset(url).inspector()``); the format's layout backend
        comes from its dataset, or, for an inspector made without one, from the format registry.
    volume
        The same dataset's volume (``open_dataset_volumes(dataset)[0]``) or its volume spec
        (``dataset.volume_specs()[0]``); gives each scale's axes, voxel size and translate exactly as
        the viewer shows them. Without it they come from the format's metadata (precomputed
        resolution, N5 resolution, else 1).
    dataset
        The dataset ``inspector`` belongs to (:meth:`from_dataset` passes it): the tree then shares
        its layout backend, and validation runs on a new inspector of the same dataset, so it reads
        the files as they are now and never competes with the tree's caches.

    Expansions are cached: expanding a node twice reads nothing the second time
    (:meth:`clear_cache` forgets them after files changed).
    """

    def __init__(
        self, inspector: DatasetInspector, volume: Volume | VolumeSpec | None = None, *,
        dataset: Dataset | None = None,
    ) -> None:
        if dataset is not None and dataset.inspector() is not inspector:
            raise ArgumentError("the inspector of a layout tree must be its dataset's (use LayoutTree.from_dataset)")
        self.inspector = inspector
        self.volume = volume
        self.dataset = dataset
        self._backend: LayoutBackend = (
            dataset.layout_backend()
            if dataset is not None
            else format_named(inspector.format_name).layout_backend(inspector)
        )
        self._expanded: dict[NodePath, Expansion] = {}
        self._roots: list[LayoutNode] | None = None

    @classmethod
    def from_dataset(cls, dataset: Dataset, volume: Volume | VolumeSpec | None = None) -> LayoutTree:
        """The tree of an opened dataset (metadata only).

        Without ``volume`` the dataset's (first) volume spec is used (pure data, nothing opened), so
        axes and world boxes match a viewer's; a dataset with nothing to view (a mesh directory) gets
        metadata-derived geometry.
        """
        inspector = dataset.inspector()
        if volume is None:
            try:
                specs = dataset.volume_specs()
            except ShardscopeError:
                specs = []
            volume = specs[0] if specs else None
        return cls(inspector, volume, dataset=dataset)

    def __repr__(self) -> str:
        return f"LayoutTree({self.inspector.store.url!r}, format={self.format_name!r})"

    @property
    def url(self) -> str | None:
        """Where the dataset is (``None`` for a tree over an inspector alone)."""
        return self.dataset.url if self.dataset is not None else None

    @property
    def format_title(self) -> str:
        """The format in words for people (``"zarr v2"``, ``"N5"``), from the format registry."""
        return format_named(self.format_name).title

    @property
    def format_name(self) -> str:
        return self.inspector.format_name

    # -- browsing --------------------------------------------------------------------------------
    def roots(self) -> list[LayoutNode]:
        """One node per scale (and per segment-keyed directory of a precomputed volume)."""
        if self._roots is None:
            self._roots = self._backend.roots()
        return list(self._roots)

    def spatial_scales(self) -> list[str]:
        """Scale keys that have voxels (can be located by voxel and mapped): not segment-keyed dirs."""
        return self._backend.spatial_scales()

    def expand(self, node: LayoutNode) -> Expansion:
        """The children of ``node`` and the node updated with their totals (reads as the docstring says)."""
        cached = self._expanded.get(node.path)
        if cached is not None:
            return cached
        result = self._backend.expand(node) if node.expandable else Expansion(node, [])
        self._expanded[node.path] = result
        return result

    def children(self, node: LayoutNode) -> list[LayoutNode]:
        """The children of ``node`` (see :meth:`expand`)."""
        return self.expand(node).children

    def node_at(self, path: NodePath) -> LayoutNode:
        """The node at ``path``, expanding its ancestors (reading what they need)."""
        if not path:
            raise ArgumentError("an empty path names no node")
        level = self.roots()
        node: LayoutNode | None = None
        for depth in range(1, len(path) + 1):
            node = next((n for n in level if n.path == path[:depth]), None)
            if node is None:
                raise ArgumentError(f"no node {_format_path(path[:depth])} in {self!r}")
            if depth < len(path):
                level = self.children(node)
        assert node is not None
        return node

    def clear_cache(self) -> None:
        """Forget expansions and decoded indexes (after the files changed)."""
        self._expanded.clear()
        self._roots = None
        self._backend.clear_cache()

    # -- geometry -------------------------------------------------------------------------------------
    def geometry(self, scale: str | None = None) -> ScaleGeometry:
        """Voxel grid and world placement of a scale (default: the finest spatial one)."""
        key = self._spatial_scale(scale)
        base = self._backend.geometry(key)
        level = self._volume_level(key)
        if level is None or self.volume is None:
            return base
        n = base.ndim
        return replace(
            base,
            axes=base.to_format_order(self.volume.axes[-n:]),
            voxel_size=tuple(float(v) for v in level.voxel_size[-n:]),
            translate=tuple(float(t) for t in level.translate[-n:]),
            unit=self.volume.unit,
        )

    def _volume_level(self, key: str) -> VolumeLevel | LevelSpec | None:
        if self.volume is None:
            return None
        for level in self.volume.levels:
            if level.key == key:
                return level
        scales = self.spatial_scales()
        if len(scales) == 1 and len(self.volume.levels) == 1:
            return self.volume.levels[0]  # e.g. an N5 dataset: "" here, its directory name there
        return None

    def scale_of_volume_level(self, index: int) -> str:
        """The scale key of ``volume.levels[index]`` (napari's ``layer.data_level``)."""
        if self.volume is None:
            return self.spatial_scales()[index]
        key = self.volume.levels[index].key
        scales = self.spatial_scales()
        if key in scales:
            return key
        if len(scales) == 1:
            return scales[0]
        raise ArgumentError(f"volume level {key!r} is not a scale of this dataset ({scales})")

    def _spatial_scale(self, scale: str | None) -> str:
        scales = self.spatial_scales()
        if scale is None:
            if not scales:
                raise ArgumentError("this dataset has no voxel scales (it is keyed by segment id)")
            return scales[0]
        if scale not in scales:
            raise ArgumentError(f"no voxel scale {scale!r}; scales are {scales}")
        return scale

    # -- locate ---------------------------------------------------------------------------------------
    def locate_voxel(self, voxel: Sequence[int], scale: str | None = None) -> Located:
        """The chunk holding ``voxel`` at ``scale`` (default: the finest).

        ``voxel`` is the reader's index: z, y, x from 0 (as napari, ``open_volume`` and ``shardscope
        locate --voxel`` index the volume), whatever order and offset the format stores; a leading
        channel axis may be left out. Reads at most the shard index and one minishard index
        (precomputed), the shard index (zarr v3), or a stat (N5, unsharded precomputed).
        """
        geo = self.geometry(scale)
        return self.locate_format_voxel(geo.format_voxel(voxel), geo.scale)

    def locate_format_voxel(self, voxel: Sequence[int], scale: str | None = None) -> Located:
        """The chunk holding ``voxel`` given as the format stores it (absolute, format order: a precomputed
        voxel_offset included, x, y, z for precomputed and N5)."""
        geo = self.geometry(scale)
        grid = geo.grid_position(voxel)
        found = self._locate_grid(geo, grid)
        return replace(found, voxel=tuple(int(v) for v in voxel))

    def locate_chunk(self, chunk: int | Sequence[int], scale: str | None = None) -> Located:
        """A chunk by precomputed chunk id (an int) or by its position in the chunk grid, in the reader's order
        (z, y, x, like a voxel)."""
        geo = self.geometry(scale)
        if isinstance(chunk, int | np.integer):
            grid = self._backend.grid_of_chunk_id(geo.scale, int(chunk))
        else:
            typed = tuple(int(g) for g in chunk)
            shape = geo.to_array_order(geo.grid_shape)
            if len(typed) != geo.ndim or any(not 0 <= g < n for g, n in zip(typed, shape, strict=True)):
                raise ArgumentError(
                    f"grid position {typed} is outside the chunk grid of scale {geo.scale!r}: "
                    f"{', '.join(f'{a} {n}' for a, n in zip(geo.array_axes, shape, strict=True))} chunks"
                )
            grid = geo.to_format_order(typed)
        return self._locate_grid(geo, grid)

    def locate_world(self, world: Sequence[float], scale: str | None = None) -> Located:
        """The chunk under a world position (array order), e.g. the mouse cursor in a viewer."""
        geo = self.geometry(scale)
        return self.locate_format_voxel(geo.voxel_at_world(world), geo.scale)

    def locate_segment(self, segment_id: int) -> list[Located]:
        """Where a segment's meshes, skeletons or annotations are stored (precomputed only)."""
        return self._backend.locate_segment(int(segment_id))

    def _locate_grid(self, geo: ScaleGeometry, grid: tuple[int, ...]) -> Located:
        node = self._backend.locate_grid(geo.scale, grid)
        bounds = geo.chunk_bounds(grid)
        return Located(node=node, bounds=bounds, world_box=geo.world_box(*bounds), geometry=geo)

    def locate_problem(self, problem: Problem) -> Located | None:
        """The chunk (or shard / minishard) a validation problem is about, ``None`` if no node fits.

        Uses the problem's file and, where the message names one, the chunk; chunks are located
        where they are *stored* (a chunk in the wrong shard is found in that shard).
        """
        node = self._backend.problem_node(problem)
        return None if node is None else self.locate_node(node)

    def locate_node(self, node: LayoutNode) -> Located:
        """A tree row as a locate result: with voxel bounds and world box when it is a chunk of a scale."""
        if node.kind != "chunk" or node.grid_position is None or node.scale not in self.spatial_scales():
            return Located(node=node)
        geo = self.geometry(node.scale)
        bounds = geo.chunk_bounds(node.grid_position)
        return Located(node=node, bounds=bounds, world_box=geo.world_box(*bounds), geometry=geo)

    # -- shard map ------------------------------------------------------------------------------------
    def shard_map_levels(self, scale: str | None = None) -> tuple[ShardMapBy, ...]:
        """What :meth:`shard_map` can colour ``scale``'s chunks by (default: the finest scale): ``("shard",
        "minishard")`` for sharded precomputed, ``("shard",)`` for sharded zarr v3, nothing for a scale whose
        chunks are files of their own (N5, zarr v2, unsharded zarr v3 and precomputed). Reads metadata only."""
        return self._backend.shard_levels(self._spatial_scale(scale))

    def shard_map(
        self, scale: str | None = None, by: ShardMapBy = "shard", max_chunks: int = MAX_SHARD_MAP_CHUNKS
    ) -> ShardMap:
        """The shard (or minishard) of every chunk of a scale, from chunk ids alone (no reads).

        Raises
        ------
        ArgumentError
            For N5 (no shards), minishards of zarr v3 (none), an unsharded scale, or a grid of more
            than ``max_chunks`` chunks (ask for a coarser scale).
        """
        if by not in ("shard", "minishard"):
            raise ArgumentError(f"by must be 'shard' or 'minishard', got {by!r}")
        geo = self.geometry(scale)
        n = math.prod(geo.grid_shape)
        if n > max_chunks:
            raise ArgumentError(
                f"scale {geo.scale!r} has {n} chunks, more than {max_chunks} for a shard map; choose a coarser scale"
            )
        values_fmt, num_values = self._backend.shard_values(geo.scale, by)
        values = np.transpose(values_fmt, geo.array_order)
        chunk = geo.to_array_order(geo.chunk_shape)
        voxel_size = tuple(c * v for c, v in zip(chunk, geo.voxel_size, strict=True))
        translate = tuple(t + (c / 2 - 0.5) * v for t, c, v in zip(geo.translate, chunk, geo.voxel_size, strict=True))
        return ShardMap(
            scale=geo.scale,
            by=by,
            values=np.ascontiguousarray(values, dtype=np.uint64),
            voxel_size=voxel_size,
            translate=translate,
            num_values=num_values,
        )

    # -- validate -------------------------------------------------------------------------------------
    def validate(self, scale: str | None = None, progress: Progress | None = None) -> Iterator[Problem]:
        """Check every shard/block of a scale (default: all); yields each problem (none when clean).

        Runs on a new inspector of the dataset (when the tree has one), so it reads the files as
        they are now and can run in a worker thread while the tree is browsed.
        """
        inspector = self.dataset.new_inspector() if self.dataset is not None else self.inspector
        return inspector.validate(scale, progress)


def open_layout(url: str | os.PathLike[str] | Location, volume: Volume | VolumeSpec | None = None) -> LayoutTree:
    """Open the layout tree of the dataset at ``url`` (metadata only; see :meth:`LayoutTree.from_dataset`).

    With ``volume`` (what a layer was opened from), the tree is of the format the volume was read as: a
    volume's URL has lost the ``zarr2://`` / ``n5://`` … prefix it was opened with, and a directory
    holding two formats' documents would otherwise be detected as the first (zarr v3 before zarr v2).
    """
    if isinstance(url, str | os.PathLike) and volume is not None and volume.format in FORMAT_NAMES:
        text = os.fspath(url)
        if split_format(text)[1] is None:
            url = f"{volume.format}://{text}"
    return LayoutTree.from_dataset(open_dataset(url), volume)


#: The formats a volume's ``format`` names that are also registry formats (an OME-Zarr group is not one).
FORMAT_NAMES = ("precomputed", "zarr3", "zarr2", "n5")

__all__ = [
    "MAX_SHARD_MAP_CHUNKS",
    "Expansion",
    "LayoutNode",
    "LayoutTree",
    "Located",
    "NodePath",
    "ScaleGeometry",
    "ShardMap",
    "ShardMapBy",
    "format_bytes",
    "format_ratio",
    "open_layout",
    "parse_position",
]
