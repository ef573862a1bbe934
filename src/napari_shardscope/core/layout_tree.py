"""The layout of a sharded dataset as a lazily expanded tree, and where a chunk sits in the world.

This is everything the shard browser shows, as calls a notebook can make too::

    from napari_shardscope.core.layout_tree import open_layout

    tree = open_layout("gs://bucket/segmentation")      # reads metadata only
    scale = tree.roots()[0]
    shards = tree.children(scale)                       # lists shard files; no index is read
    minishards = tree.children(shards[0])               # reads that shard's indexes, nothing else
    hit = tree.locate_voxel((1000, 2000, 30))           # chunk, shard, minishard, byte range, world box
    smap = tree.shard_map(by="shard")                   # chunk grid coloured by shard: ids only, no reads
    problems = list(tree.validate())

Why a tree that expands lazily: a large volume has 10⁴–10⁶ shard files, each with its own index.
Opening must cost the metadata only, listing a scale costs one directory listing (plus a stat per
file where a stat is cheap), and an index is read only when its shard is expanded, so a
proofreader can look at one corner of a petabyte dataset without waiting for the rest.

The levels are, per format:

* precomputed (sharded): scale → shard file → minishard → chunk (Morton id); segment-keyed
  directories (meshes, skeletons, annotations) are further roots whose chunks are segment ids;
* precomputed (unsharded) and N5: scale/dataset → slab of chunks along the slowest axis (z) →
  chunk file / block (neither format has an index, so a slab groups a listing into pieces a person
  can scroll);
* zarr v3: array → shard file → inner chunk (an unsharded array: array → chunk file).

Every node carries what is known about it without further reads: stored chunks, stored bytes, raw
(decoded) bytes and so the compression ratio; ``None`` means "not known until expanded".

Coordinates: voxels and grid positions are in the *format's* order (x, y, z for precomputed and
N5, ``zarr.json`` order for zarr v3), as ``shardscope locate`` takes them. World boxes are in the
order of the volume's arrays (z, y, x — napari's order) and in the volume's world unit (nm where
the metadata names a unit), with voxel ``i`` centred at ``translate + i * voxel_size`` as napari
and OME-Zarr place it: a chunk of voxels ``[start, stop)`` covers
``[translate + (start - 0.5) * voxel_size, translate + (stop - 0.5) * voxel_size]``.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ArgumentError, ShardscopeError, StoreError
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.api import DatasetInspector, Problem, Progress
from napari_shardscope.core.formats.n5.attributes import ScaleLevel as N5Level
from napari_shardscope.core.formats.n5.block import format_block_key, format_block_path, parse_block_path
from napari_shardscope.core.formats.n5.inspector import N5Inspector
from napari_shardscope.core.formats.precomputed.info import ScaleInfo, parse_unsharded_chunk_name
from napari_shardscope.core.formats.precomputed.inspector import PrecomputedInspector, Source
from napari_shardscope.core.formats.precomputed.morton import decode_morton, encode_morton
from napari_shardscope.core.formats.precomputed.shard_reader import ShardedReader
from napari_shardscope.core.formats.precomputed.sharding import assign_chunk_ids, format_shard_name, parse_shard_name
from napari_shardscope.core.formats.units import nm_per_unit
from napari_shardscope.core.formats.volume_spec import LevelSpec, VolumeSpec
from napari_shardscope.core.formats.zarr3.inspector import Zarr3Inspector
from napari_shardscope.core.formats.zarr3.reader import Zarr3ArrayReader
from napari_shardscope.core.volumes.model import ScaleLevel as VolumeLevel
from napari_shardscope.core.volumes.model import Volume

NodeKind = Literal["scale", "shard", "minishard", "group", "chunk", "error"]
#: One step of a node's path: ``("shard", 3)``, ``("chunk", (1, 0, 2))``, ``("scale", "8_8_40")``.
PathPart = tuple[str, int | str | tuple[int, ...]]
NodePath = tuple[PathPart, ...]
ShardMapBy = Literal["shard", "minishard"]

#: Above this many shards a store that cannot list is not enumerated shard by shard.
MAX_UNLISTED_SHARDS = 1 << 16
#: A shard map is one value per chunk; beyond this many chunks ask for a coarser scale.
MAX_SHARD_MAP_CHUNKS = 1 << 22
#: Shard/minishard indexes of one shard are read with this many concurrent requests on expand.
EXPAND_WORKERS = 8


# -- nodes -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LayoutNode:
    """One row of the layout tree.

    Attributes
    ----------
    kind
        ``"scale"`` (a scale, array, dataset or segment-keyed directory), ``"shard"``,
        ``"minishard"``, ``"group"`` (a slab of unindexed chunk files), ``"chunk"``, or ``"error"``
        (an index that could not be read; :attr:`detail` says why).
    scale
        The scale key the node belongs to (``DatasetInspector.scale_keys`` / precomputed source).
    name
        Short label.
    path
        Identity of the node: the parts from its scale down to it (a locate result gives the
        path, and a viewer walks it to select the row).
    detail
        One line for people: geometry, file, byte range.
    chunks
        Stored chunks in the subtree (``None`` until known).
    stored_bytes
        Bytes the stored chunks take (encoded; ``None`` until known).
    raw_bytes
        Bytes the same chunks take decoded (voxels × item size), where the geometry says it.
    file
        The file holding the node (shard file, chunk file, block).
    file_size
        Size of :attr:`file` when known without a read (a local stat).
    byte_range
        ``[start, end)`` of a chunk's bytes (or of a minishard's index) in :attr:`file`.
    grid_position
        A chunk's position in the chunk grid (format order; zarr v3: the inner-chunk grid).
    chunk_id
        A precomputed chunk's id (compressed Morton code, or a segment id in id-keyed dirs).
    present
        ``False`` for a chunk that a locate found not stored (it reads as the fill value).
    expandable
        Whether :meth:`LayoutTree.children` can list anything below.
    """

    kind: NodeKind
    scale: str
    name: str
    path: NodePath
    detail: str = ""
    chunks: int | None = None
    stored_bytes: int | None = None
    raw_bytes: int | None = None
    file: str | None = None
    file_size: int | None = None
    byte_range: tuple[int, int] | None = None
    grid_position: tuple[int, ...] | None = None
    chunk_id: int | None = None
    present: bool = True
    expandable: bool = False

    @property
    def ratio(self) -> float | None:
        """Compression ratio ``raw / stored`` when both are known (``> 1`` means compressed)."""
        if self.raw_bytes is None or not self.stored_bytes:
            return None
        return self.raw_bytes / self.stored_bytes


@dataclass(frozen=True)
class Expansion:
    """What expanding a node yields: the node with what its children told (totals), and the children."""

    node: LayoutNode
    children: list[LayoutNode]


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

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return tuple(-(-s // c) for s, c in zip(self.shape, self.chunk_shape, strict=True))

    @property
    def array_axes(self) -> tuple[str, ...]:
        return self.to_array_order(self.axes)

    def to_array_order(self, values: Sequence[Any]) -> tuple[Any, ...]:
        """Format order → array (napari) order."""
        return tuple(reversed(tuple(values))) if self.reversed_axes else tuple(values)

    def to_format_order(self, values: Sequence[Any]) -> tuple[Any, ...]:
        """Array (napari) order → format order."""
        return self.to_array_order(values)  # a reversal is its own inverse

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


@dataclass(frozen=True)
class Located:
    """A chunk (or, for an index problem, a shard or minishard) found by a locate.

    Attributes
    ----------
    node
        The tree node; :attr:`LayoutNode.path` leads to it from its scale.
    bounds
        Absolute voxel bounds ``[start, stop)`` of a chunk, format order (``None`` for shards,
        minishards and segment-keyed chunks, which have no place in space).
    world_box
        :meth:`ScaleGeometry.world_box` of :attr:`bounds` (array order), when there are bounds.
    voxel
        The voxel that was asked for, if a voxel was.
    """

    node: LayoutNode
    bounds: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    world_box: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    voxel: tuple[int, ...] | None = None

    @property
    def scale(self) -> str:
        return self.node.scale

    @property
    def path(self) -> NodePath:
        return self.node.path

    def describe(self) -> str:
        """One line: what was found and where its bytes are."""
        parts = [f"{self.node.scale or '(root)'}: {self.node.name}"]
        if self.bounds is not None:
            lo, hi = self.bounds
            parts.append("voxels " + " ".join(f"{a}–{b}" for a, b in zip(lo, hi, strict=True)))
        for kind, value in self.node.path[1:-1]:
            parts.append(f"{kind} {_format_part(value)}")
        if not self.node.present:
            parts.append("not stored (reads as fill value)")
        elif self.node.byte_range is not None:
            a, b = self.node.byte_range
            parts.append(f"{self.node.file} bytes [{a}, {b}) ({format_bytes(b - a)})")
        elif self.node.file:
            parts.append(str(self.node.file))
        return ", ".join(parts)


@dataclass(frozen=True)
class ShardMap:
    """Each chunk of a scale coloured by the shard (or minishard) holding it.

    Attributes
    ----------
    scale
        The scale key.
    by
        ``"shard"``: the shard number; ``"minishard"``: ``shard * 2**minishard_bits + minishard``,
        so minishards of different shards differ.
    values
        One value per chunk, array order (z, y, x), ``uint64``.
    voxel_size
        World size of one value: chunk shape × voxel size (array order).
    translate
        World position of the centre of value ``[0, 0, 0]`` (the centre of the first chunk).
    num_values
        How many different values the spec allows (shards, or shards × minishards).
    """

    scale: str
    by: ShardMapBy
    values: npt.NDArray[np.uint64]
    voxel_size: tuple[float, ...]
    translate: tuple[float, ...]
    num_values: int


# -- formatting ---------------------------------------------------------------------------------------
def format_bytes(n: int | None) -> str:
    """``1536`` → ``"1.5 KiB"``; ``None`` → ``""`` (unknown)."""
    if n is None:
        return ""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


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


def _format_part(value: object) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def _int_part(part: PathPart) -> int:
    value = part[1]
    if not isinstance(value, int):
        raise ArgumentError(f"{part[0]} {value!r} is not a number")
    return value


def _sum_known(values: Sequence[int | None]) -> int | None:
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def _with_totals(node: LayoutNode, children: Sequence[LayoutNode]) -> LayoutNode:
    """``node`` with chunks and bytes summed over ``children`` (bytes ``None`` if any is unknown)."""
    return replace(
        node,
        chunks=sum(c.chunks or 0 for c in children),
        stored_bytes=_sum_known([c.stored_bytes for c in children]),
        raw_bytes=_sum_known([c.raw_bytes for c in children]),
    )


# -- the tree -----------------------------------------------------------------------------------------
class LayoutTree:
    """A lazily expanded tree over a :class:`~napari_shardscope.core.formats.api.DatasetInspector`.

    Parameters
    ----------
    inspector
        The dataset (:func:`~napari_shardscope.core.formats.open_dataset`).
    volume
        The same dataset's volume (:func:`~napari_shardscope.core.volumes.open_volume`) or its
        volume spec (:meth:`~napari_shardscope.core.formats.api.Dataset.volume_specs`); gives each
        scale's axes, voxel size and translate exactly as the viewer shows them. Without it they
        come from the format's metadata (precomputed resolution, N5 resolution, else 1).
    url
        Where the dataset is; validation then opens its own inspector, so it reads the files as
        they are now and never competes with the tree's caches.

    Expansions are cached: expanding a node twice reads nothing the second time
    (:meth:`clear_cache` forgets them after files changed).
    """

    def __init__(self, inspector: DatasetInspector, volume: Volume | VolumeSpec | None = None,
                 url: str | None = None) -> None:
        self.inspector = inspector
        self.volume = volume
        self.url = url
        self._backend = make_backend(inspector)
        self._expanded: dict[NodePath, Expansion] = {}
        self._roots: list[LayoutNode] | None = None

    def __repr__(self) -> str:
        return f"LayoutTree({self.inspector.store.url!r}, format={self.format_name!r})"

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
        """The chunk holding ``voxel`` (absolute, format order) at ``scale`` (default: the finest).

        Reads at most the shard index and one minishard index (precomputed), the shard index
        (zarr v3), or a stat (N5, unsharded precomputed).
        """
        geo = self.geometry(scale)
        grid = geo.grid_position(voxel)
        found = self._locate_grid(geo, grid)
        return replace(found, voxel=tuple(int(v) for v in voxel))

    def locate_chunk(self, chunk: int | Sequence[int], scale: str | None = None) -> Located:
        """A chunk by precomputed chunk id (an int) or by grid position (format order)."""
        geo = self.geometry(scale)
        if isinstance(chunk, int | np.integer):
            grid = self._backend.grid_of_chunk_id(geo.scale, int(chunk))
        else:
            grid = tuple(int(g) for g in chunk)
            if len(grid) != geo.ndim or any(not 0 <= g < n for g, n in zip(grid, geo.grid_shape, strict=True)):
                raise ArgumentError(
                    f"grid position {grid} is outside the chunk grid {geo.grid_shape} of scale {geo.scale!r}"
                )
        return self._locate_grid(geo, grid)

    def locate_world(self, world: Sequence[float], scale: str | None = None) -> Located:
        """The chunk under a world position (array order), e.g. the mouse cursor in a viewer."""
        geo = self.geometry(scale)
        return self.locate_voxel(geo.voxel_at_world(world), geo.scale)

    def locate_segment(self, segment_id: int) -> list[Located]:
        """Where a segment's meshes, skeletons or annotations are stored (precomputed only)."""
        return self._backend.locate_segment(int(segment_id))

    def _locate_grid(self, geo: ScaleGeometry, grid: tuple[int, ...]) -> Located:
        node = self._backend.locate_grid(geo.scale, grid)
        bounds = geo.chunk_bounds(grid)
        return Located(node=node, bounds=bounds, world_box=geo.world_box(*bounds))

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
        return Located(node=node, bounds=bounds, world_box=geo.world_box(*bounds))

    # -- shard map ------------------------------------------------------------------------------------
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
        values = values_fmt.transpose() if geo.reversed_axes else values_fmt
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

        Runs on a fresh inspector when :attr:`url` is known, so it reads the files as they are now
        and can run in a worker thread while the tree is browsed.
        """
        inspector = open_dataset(self.url).inspector() if self.url is not None else self.inspector
        return inspector.validate(scale, progress)


def open_layout(url: str, volume: Volume | VolumeSpec | None = None) -> LayoutTree:
    """Open the layout tree of the dataset at ``url`` (metadata only).

    Without ``volume`` the dataset's volume spec is used (pure data, nothing opened) so axes and
    world boxes match a viewer's; a dataset with nothing to view (a mesh directory) gets
    metadata-derived geometry.
    """
    dataset = open_dataset(url)
    inspector = dataset.inspector()
    if volume is None:
        try:
            volume = dataset.volume_specs()[0]
        except ShardscopeError:
            volume = None
    return LayoutTree(inspector, volume, url=url)


def _format_path(path: NodePath) -> str:
    return " / ".join(f"{kind} {_format_part(value)}" for kind, value in path)


# -- backends -----------------------------------------------------------------------------------------
class _Backend:
    """What each format provides to :class:`LayoutTree`."""

    def roots(self) -> list[LayoutNode]:
        raise NotImplementedError

    def spatial_scales(self) -> list[str]:
        raise NotImplementedError

    def expand(self, node: LayoutNode) -> Expansion:
        raise NotImplementedError

    def geometry(self, scale: str) -> ScaleGeometry:
        raise NotImplementedError

    def locate_grid(self, scale: str, grid: tuple[int, ...]) -> LayoutNode:
        raise NotImplementedError

    def grid_of_chunk_id(self, scale: str, chunk_id: int) -> tuple[int, ...]:
        raise ArgumentError(f"{self.format_name} chunks have no ids; give a grid position")

    def locate_segment(self, segment_id: int) -> list[Located]:
        raise ArgumentError(f"{self.format_name} datasets have no segment-keyed data; locate a voxel or chunk")

    def shard_values(self, scale: str, by: ShardMapBy) -> tuple[npt.NDArray[np.uint64], int]:
        raise ArgumentError(f"{self.format_name} datasets have no shards")

    def problem_node(self, problem: Problem) -> LayoutNode | None:
        raise NotImplementedError

    def clear_cache(self) -> None:
        """Drop decoded indexes."""

    format_name = ""


def make_backend(inspector: DatasetInspector) -> _Backend:
    if isinstance(inspector, PrecomputedInspector):
        return _PrecomputedBackend(inspector)
    if isinstance(inspector, Zarr3Inspector):
        return _Zarr3Backend(inspector)
    if isinstance(inspector, N5Inspector):
        return _N5Backend(inspector)
    raise ArgumentError(f"no layout tree for {type(inspector).__name__}")


def _grid_nodes_by_slab(
    scale: str, entries: Sequence[tuple[tuple[int, ...], str]], geo: ScaleGeometry, slab_axis_name: str
) -> list[LayoutNode]:
    """Group unindexed chunk files ``(grid position, key)`` into slabs along the slowest axis."""
    axis = 0 if not geo.reversed_axes else geo.ndim - 1
    groups: dict[int, int] = {}
    for grid, _ in entries:
        groups[grid[axis]] = groups.get(grid[axis], 0) + 1
    out = []
    for g in sorted(groups):
        lo = geo.origin[axis] + g * geo.chunk_shape[axis]
        hi = min(lo + geo.chunk_shape[axis], geo.origin[axis] + geo.shape[axis])
        out.append(
            LayoutNode(
                "group",
                scale,
                f"{slab_axis_name} {lo}–{hi}",
                (("scale", scale), ("group", g)),
                detail=f"{groups[g]} chunk files with {slab_axis_name} in [{lo}, {hi})",
                chunks=groups[g],
                expandable=True,
            )
        )
    return out


def _slab_axis(geo: ScaleGeometry) -> int:
    return 0 if not geo.reversed_axes else geo.ndim - 1


# -- precomputed --------------------------------------------------------------------------------------
class _PrecomputedBackend(_Backend):
    format_name = "precomputed"

    def __init__(self, inspector: PrecomputedInspector) -> None:
        self.ins = inspector
        self._segment_sources: list[Source] | None = None
        vol = inspector.volume
        self.itemsize = vol.dtype.itemsize * vol.num_channels if vol is not None else 0

    # sources
    def sources(self) -> list[Source]:
        if self._segment_sources is None:
            extra = self.ins.segment_sources() if self.ins.volume is not None else []
            self._segment_sources = extra
        return [*self.ins.sources, *self._segment_sources]

    def source(self, name: str) -> Source:
        for s in self.sources():
            if s.name == name:
                return s
        raise ArgumentError(f"no scale or directory {name!r}; this dataset has {[s.name for s in self.sources()]}")

    def spatial_scales(self) -> list[str]:
        return [s.name for s in self.ins.sources if s.scale is not None]

    def roots(self) -> list[LayoutNode]:
        return [self._root(s) for s in self.sources()]

    def _root(self, s: Source) -> LayoutNode:
        path: NodePath = (("scale", s.name),)
        label = s.name or "(root)"
        if s.scale is not None:
            sc = s.scale
            raw = math.prod(sc.size) * self.itemsize
            geo = (
                f"{'×'.join(map(str, sc.size))} voxels in {'×'.join(map(str, sc.grid_shape))} chunks of "
                f"{'×'.join(map(str, sc.chunk_size))}, {sc.encoding}"
            )
            if s.sharding is None:
                return LayoutNode(
                    "scale",
                    s.name,
                    label,
                    path,
                    detail=f"{geo}; unsharded (one file per chunk)",
                    raw_bytes=raw,
                    expandable=True,
                )
            sp = s.sharding
            detail = (
                f"{geo}; {sp.num_shards} shards × {sp.num_minishards} minishards, {sp.hash}, "
                f"preshift {sp.preshift_bits}, data {sp.data_encoding}, index {sp.minishard_index_encoding}"
            )
            return LayoutNode("scale", s.name, label, path, detail=detail, raw_bytes=raw, expandable=True)
        if s.sharding is None:
            return LayoutNode("scale", s.name, label, path, detail=f"{s.kind}: unsharded (one file per id)")
        sp = s.sharding
        return LayoutNode(
            "scale",
            s.name,
            label,
            path,
            expandable=True,
            detail=f"{s.kind} keyed by id; {sp.num_shards} shards × {sp.num_minishards} minishards",
        )

    def reader(self, s: Source) -> ShardedReader:
        return self.ins.reader(s)

    def clear_cache(self) -> None:
        for s in self.sources():
            if s.sharding is not None:
                self.reader(s).clear_cache()

    # geometry
    def scale_info(self, name: str) -> ScaleInfo:
        s = self.source(name)
        if s.scale is None:
            raise ArgumentError(f"{name!r} is keyed by segment id, not by voxel")
        return s.scale

    def geometry(self, scale: str) -> ScaleGeometry:
        sc = self.scale_info(scale)
        res = sc.resolution
        return ScaleGeometry(
            scale=scale,
            axes=("x", "y", "z"),
            shape=sc.size,
            origin=sc.voxel_offset,
            chunk_shape=sc.chunk_size,
            reversed_axes=True,
            voxel_size=tuple(reversed(res)),
            translate=tuple(reversed([o * r for o, r in zip(sc.voxel_offset, res, strict=True)])),
            unit="nm",
        )

    def _raw_sizes(
        self, s: Source, ids: npt.NDArray[np.uint64]
    ) -> tuple[npt.NDArray[np.int64] | None, npt.NDArray[np.int64] | None]:
        """Grid positions ``(n, 3)`` and decoded byte sizes of chunk ids (``None`` for id-keyed dirs)."""
        if s.scale is None or ids.size == 0:
            return None, None
        sc = s.scale
        try:
            pos = decode_morton(ids, sc.grid_shape)
        except ArgumentError:
            return None, None  # an id outside the grid: validate reports it
        chunk = np.asarray(sc.chunk_size, dtype=np.int64)
        size = np.asarray(sc.size, dtype=np.int64)
        start = pos * chunk
        extent = np.minimum(start + chunk, size) - start
        return pos, extent.prod(axis=1) * self.itemsize

    # expand
    def expand(self, node: LayoutNode) -> Expansion:
        s = self.source(node.scale)
        if node.kind == "scale":
            return self._expand_scale(node, s)
        if node.kind == "group":
            return self._expand_group(node, s)
        if node.kind == "shard":
            return self._expand_shard(node, s)
        if node.kind == "minishard":
            return self._expand_minishard(node, s)
        return Expansion(node, [])

    def _expand_scale(self, node: LayoutNode, s: Source) -> Expansion:
        if s.sharding is None:
            entries = self._unsharded_files(s)
            geo = self.geometry(s.name)
            groups = _grid_nodes_by_slab(s.name, entries, geo, "z")
            return Expansion(replace(node, chunks=len(entries)), groups)
        spec = s.sharding
        reader = self.reader(s)
        listed = True
        try:
            shards = reader.existing_shards()
        except StoreError:
            if spec.num_shards > MAX_UNLISTED_SHARDS:
                msg = f"the store cannot list and there are {spec.num_shards} possible shards: use locate"
                return Expansion(node, [self._error(node, "cannot list", msg)])
            shards, listed = list(range(spec.num_shards)), False
        cheap = self.ins.store.cheap_size
        children = []
        for shard in shards:
            file = reader.shard_file(shard) if cheap else None
            key = file.display_key if file is not None else reader.shard_key(shard)
            size = file.size if file is not None else None
            detail = key + (f", {format_bytes(size)}" if size is not None else "")
            children.append(
                LayoutNode(
                    "shard",
                    s.name,
                    f"shard {format_shard_name(spec, shard)}",
                    (*node.path, ("shard", shard)),
                    detail=detail,
                    file=key,
                    file_size=size,
                    expandable=True,
                )
            )
        what = (
            f"{len(shards)} of {spec.num_shards} shard files present"
            if listed
            else f"{spec.num_shards} possible shards (the store cannot list)"
        )
        return Expansion(replace(node, detail=f"{node.detail}; {what}"), children)

    def _unsharded_files(self, s: Source) -> list[tuple[tuple[int, ...], str]]:
        assert s.scale is not None
        sc = s.scale
        prefix = f"{s.prefix}/"
        out = []
        for key in self.ins.store.list(prefix):
            grid = _unsharded_grid(sc, key[len(prefix) :])
            if grid is not None:
                out.append((grid, key))
        return out

    def _expand_group(self, node: LayoutNode, s: Source) -> Expansion:
        assert s.scale is not None
        sc = s.scale
        g = node.path[-1][1]
        entries = [(grid, key) for grid, key in self._unsharded_files(s) if grid[2] == g]
        children = []
        cheap = self.ins.store.cheap_size
        for grid, key in entries:
            size = self.ins.store.size(key) if cheap else None
            start, stop = sc.chunk_bounds(grid)
            raw = math.prod(b - a for a, b in zip(start, stop, strict=True)) * self.itemsize
            cid = sc.chunk_id(grid)
            children.append(
                LayoutNode(
                    "chunk",
                    s.name,
                    f"chunk {cid} @ {_format_part(grid)}",
                    (*node.path, ("chunk", cid)),
                    detail=key,
                    chunks=1,
                    stored_bytes=size,
                    raw_bytes=raw,
                    file=key,
                    file_size=size,
                    byte_range=(0, size) if size is not None else None,
                    grid_position=grid,
                    chunk_id=cid,
                )
            )
        return Expansion(_with_totals(node, children), children)

    def _error(self, parent: LayoutNode, name: str, message: str) -> LayoutNode:
        return LayoutNode("error", parent.scale, name, (*parent.path, ("error", name)), detail=message)

    def _expand_shard(self, node: LayoutNode, s: Source) -> Expansion:
        assert s.sharding is not None
        shard = _int_part(node.path[-1])
        reader = self.reader(s)
        with contextlib.suppress(ShardscopeError):  # the loop below reports which index is broken
            reader.prefetch_indexes([shard], workers=EXPAND_WORKERS)
        try:
            index = reader.shard_index(shard)
        except ShardscopeError as exc:
            return Expansion(node, [self._error(node, "shard index", str(exc))])
        file = reader.shard_file(shard)
        if index is None or file is None:
            return Expansion(replace(node, chunks=0, stored_bytes=0, raw_bytes=0, detail=f"{node.detail}; no file"), [])
        children = []
        for m in index.nonempty_minishards().tolist():
            start, end = index.minishard_range(m)
            try:
                mi = reader.minishard_index(shard, m)
            except ShardscopeError as exc:
                children.append(self._error(node, f"minishard {m}", str(exc)))
                continue
            _, raw = self._raw_sizes(s, mi.chunk_ids)
            children.append(
                LayoutNode(
                    "minishard",
                    s.name,
                    f"minishard {m}",
                    (*node.path, ("minishard", m)),
                    detail=f"index bytes [{start}, {end}) of {file.display_key}",
                    chunks=len(mi),
                    stored_bytes=int(mi.sizes.sum()) if len(mi) else 0,
                    raw_bytes=int(raw.sum()) if raw is not None else (0 if len(mi) == 0 else None),
                    file=file.display_key,
                    byte_range=(start, end),
                    expandable=len(mi) > 0,
                )
            )
        ok = [c for c in children if c.kind == "minishard"]
        updated = replace(
            node,
            file=file.display_key,
            file_size=file.size,
            chunks=sum(c.chunks or 0 for c in ok),
            stored_bytes=sum(c.stored_bytes or 0 for c in ok),
            raw_bytes=_sum_known([c.raw_bytes for c in ok]) if len(ok) == len(children) else None,
        )
        return Expansion(updated, children)

    def _expand_minishard(self, node: LayoutNode, s: Source) -> Expansion:
        shard = _int_part(node.path[-2])
        m = _int_part(node.path[-1])
        reader = self.reader(s)
        mi = reader.minishard_index(shard, m)
        pos, raw = self._raw_sizes(s, mi.chunk_ids)
        file = reader.shard_file(shard)
        key = file.display_key if file is not None else reader.shard_key(shard)
        children = []
        for i in range(len(mi)):
            cid = int(mi.chunk_ids[i])
            a, b = int(mi.starts[i]), int(mi.ends[i])
            grid = tuple(int(p) for p in pos[i]) if pos is not None else None
            name = (
                f"chunk {cid} @ {_format_part(grid)}"
                if grid is not None
                else (f"segment {cid}" if s.scale is None else f"chunk {cid}")
            )
            children.append(
                LayoutNode(
                    "chunk",
                    s.name,
                    name,
                    (*node.path, ("chunk", cid)),
                    detail=f"bytes [{a}, {b})",
                    chunks=1,
                    stored_bytes=b - a,
                    raw_bytes=int(raw[i]) if raw is not None else None,
                    file=key,
                    byte_range=(a, b),
                    grid_position=grid,
                    chunk_id=cid,
                )
            )
        return Expansion(node, children)

    # locate
    def grid_of_chunk_id(self, scale: str, chunk_id: int) -> tuple[int, ...]:
        sc = self.scale_info(scale)
        if not 0 <= int(chunk_id) < 1 << 64:
            raise ArgumentError(f"chunk id {chunk_id} is not a chunk of scale {scale!r}: chunk ids are uint64")
        try:
            pos = decode_morton(np.asarray([chunk_id], dtype=np.uint64), sc.grid_shape)[0]
        except ArgumentError as exc:
            raise ArgumentError(f"chunk id {chunk_id} is not a chunk of scale {scale!r}: {exc}") from None
        return tuple(int(p) for p in pos)

    def locate_grid(self, scale: str, grid: tuple[int, ...]) -> LayoutNode:
        s = self.source(scale)
        sc = self.scale_info(scale)
        cid = sc.chunk_id(grid)
        start, stop = sc.chunk_bounds(grid)
        raw = math.prod(b - a for a, b in zip(start, stop, strict=True)) * self.itemsize
        name = f"chunk {cid} @ {_format_part(grid)}"
        if s.sharding is None:
            key = sc.unsharded_chunk_key(grid)
            store = self.ins.store
            size = store.size(key) if store.cheap_size else None
            present = size is not None if store.cheap_size else store.read_range(key, 0, 0) is not None
            return LayoutNode(
                "chunk",
                scale,
                name,
                (("scale", scale), ("group", grid[2]), ("chunk", cid)),
                detail=key,
                chunks=1 if present else 0,
                stored_bytes=size,
                raw_bytes=raw,
                file=key,
                file_size=size,
                byte_range=(0, size) if size is not None else None,
                grid_position=grid,
                chunk_id=cid,
                present=present,
            )
        loc = self.reader(s).locate(cid)
        return self._chunk_node(
            s, loc.shard, loc.minishard, cid, loc.shard_file, loc.byte_range, grid, raw, loc.present
        )

    def _chunk_node(
        self,
        s: Source,
        shard: int,
        minishard: int,
        cid: int,
        file: str,
        byte_range: tuple[int, int] | None,
        grid: tuple[int, ...] | None,
        raw: int | None,
        present: bool,
    ) -> LayoutNode:
        path: NodePath = (("scale", s.name), ("shard", shard), ("minishard", minishard), ("chunk", cid))
        if grid is not None:
            name = f"chunk {cid} @ {_format_part(grid)}"
        else:
            name = f"segment {cid}" if s.scale is None else f"chunk {cid}"
        detail = f"bytes [{byte_range[0]}, {byte_range[1]})" if byte_range is not None else "not stored"
        stored = byte_range[1] - byte_range[0] if byte_range is not None else None
        return LayoutNode(
            "chunk",
            s.name,
            name,
            path,
            detail=detail,
            chunks=1 if present else 0,
            stored_bytes=stored,
            raw_bytes=raw,
            file=file,
            byte_range=byte_range,
            grid_position=grid,
            chunk_id=cid,
            present=present,
        )

    def locate_segment(self, segment_id: int) -> list[Located]:
        out = []
        for s in self.sources():
            if (
                s.scale is not None
                or s.sharding is None
                or s.kind not in ("segment", "annotation_by_id", "annotation_relationship")
            ):
                continue
            loc = self.reader(s).locate(segment_id)
            out.append(
                Located(
                    node=self._chunk_node(
                        s, loc.shard, loc.minishard, segment_id, loc.shard_file, loc.byte_range, None, None, loc.present
                    )
                )
            )
        if not out:
            raise ArgumentError("this dataset has no sharded segment-keyed data (meshes, skeletons, annotations)")
        return out

    # shard map
    def shard_values(self, scale: str, by: ShardMapBy) -> tuple[npt.NDArray[np.uint64], int]:
        s = self.source(scale)
        sc = self.scale_info(scale)
        if s.sharding is None:
            raise ArgumentError(f"scale {scale!r} is not sharded: every chunk is its own file")
        spec = s.sharding
        grid = sc.grid_shape
        pos = np.stack(np.meshgrid(*(np.arange(n) for n in grid), indexing="ij"), axis=-1)
        ids = encode_morton(pos.reshape(-1, 3), grid)
        a = assign_chunk_ids(spec, ids)
        if by == "shard":
            values, count = a.shard, spec.num_shards
        else:
            values = (a.shard << np.uint64(spec.minishard_bits)) | a.minishard if spec.shard_bits else a.minishard
            count = spec.num_shards * spec.num_minishards
        return values.reshape(grid), count

    # problems
    def problem_node(self, problem: Problem) -> LayoutNode | None:
        key = problem.key.split(" + ")[0]
        directory, _, name = key.rpartition("/")
        for s in self.sources():
            if s.prefix.strip("/") != directory:
                continue
            if s.sharding is None:
                if s.scale is None:
                    return None
                grid = _unsharded_grid(s.scale, name)
                return self.locate_grid(s.name, grid) if grid is not None else None
            shard = parse_shard_name(s.sharding, name)
            if shard is None:
                return None
            return self._problem_in_shard(s, shard, problem)
        return None

    def _problem_in_shard(self, s: Source, shard: int, problem: Problem) -> LayoutNode:
        spec = s.sharding
        assert spec is not None
        shard_node = LayoutNode(
            "shard",
            s.name,
            f"shard {format_shard_name(spec, shard)}",
            (("scale", s.name), ("shard", shard)),
            file=problem.key,
            expandable=True,
        )
        chunk = re.match(r"chunk (\d+)", problem.message)
        if chunk is not None:
            cid = int(chunk.group(1))
            stored = self._find_stored(s, shard, cid)
            if stored is not None:
                return stored
        mini = re.match(r"minishard (\d+)", problem.message)
        if mini is not None and int(mini.group(1)) < spec.num_minishards:
            m = int(mini.group(1))
            return LayoutNode(
                "minishard",
                s.name,
                f"minishard {m}",
                (*shard_node.path, ("minishard", m)),
                file=problem.key,
                expandable=True,
            )
        return shard_node

    def _find_stored(self, s: Source, shard: int, cid: int) -> LayoutNode | None:
        """The chunk node of ``cid`` where shard ``shard`` stores it (its indexes are cached by validate's peer)."""
        reader = self.reader(s)
        try:
            index = reader.shard_index(shard)
            if index is None:
                return None
            for m in index.nonempty_minishards().tolist():
                mi = reader.minishard_index(shard, m)
                hit = mi.find(cid)
                if hit is None:
                    continue
                pos, raw = self._raw_sizes(s, mi.chunk_ids[hit : hit + 1])
                grid = tuple(int(p) for p in pos[0]) if pos is not None else None
                file = reader.shard_file(shard)
                return self._chunk_node(
                    s,
                    shard,
                    m,
                    cid,
                    file.display_key if file else reader.shard_key(shard),
                    (int(mi.starts[hit]), int(mi.ends[hit])),
                    grid,
                    int(raw[0]) if raw is not None else None,
                    True,
                )
        except ShardscopeError:
            return None
        return None


def _unsharded_grid(sc: ScaleInfo, name: str) -> tuple[int, ...] | None:
    """The grid position named by an unsharded chunk file ``x0-x1_y0-y1_z0-z1``, or ``None``."""
    if "/" in name:
        return None
    bounds = parse_unsharded_chunk_name(name)
    if bounds is None:
        return None
    grid = tuple((a - o) // c for a, o, c in zip(bounds[0], sc.voxel_offset, sc.chunk_size, strict=True))
    if any(not 0 <= g < n for g, n in zip(grid, sc.grid_shape, strict=True)):
        return None
    start, stop = sc.chunk_bounds(grid)
    if (start, stop) != bounds:
        return None
    return grid


# -- zarr v3 ------------------------------------------------------------------------------------------
class _Zarr3Backend(_Backend):
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
            raw = math.prod(meta.shape) * meta.dtype.itemsize
            shape = "×".join(map(str, meta.shape))
            if r.sharding is not None:
                detail = (
                    f"{shape} {meta.data_type}; shards {'×'.join(map(str, r.shard_shape))} "
                    f"({math.prod(r.shard_grid_shape)} in the grid) of inner chunks "
                    f"{'×'.join(map(str, r.inner_chunk_shape))}, index at the {r.sharding.index_location}"
                )
            else:
                detail = f"{shape} {meta.data_type}; unsharded chunks {'×'.join(map(str, meta.chunk_shape))}"
            out.append(
                LayoutNode(
                    "scale", key, key or "(array)", (("scale", key),), detail=detail, raw_bytes=raw, expandable=True
                )
            )
        return out

    def geometry(self, scale: str) -> ScaleGeometry:
        r = self.reader(scale)
        meta = r.metadata
        names = meta.dimension_names
        axes = (
            tuple(n or f"d{i}" for i, n in enumerate(names))
            if names is not None
            else tuple(f"d{i}" for i in range(meta.ndim))
        )
        return ScaleGeometry(
            scale=scale,
            axes=axes,
            shape=meta.shape,
            origin=(0,) * meta.ndim,
            chunk_shape=r.inner_chunk_shape,
            reversed_axes=False,
            voxel_size=(1.0,) * meta.ndim,
            translate=(0.0,) * meta.ndim,
        )

    def _raw(self, scale: str, inner: Sequence[int]) -> int:
        start, stop = self.geometry(scale).chunk_bounds(inner)
        return math.prod(b - a for a, b in zip(start, stop, strict=True)) * self.reader(scale).metadata.dtype.itemsize

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
            return Expansion(
                node, [LayoutNode("error", node.scale, "cannot list", (*node.path, ("error", "list")), detail=str(exc))]
            )
        cheap = self.ins.store.cheap_size
        children = []
        for key, pos in files:
            size = self.ins.store.size(key) if cheap else None
            if r.sharding is None:
                children.append(
                    self._chunk(
                        node.scale,
                        key,
                        pos,
                        pos,
                        (0, size) if size is not None else None,
                        (*node.path, ("chunk", pos)),
                        size,
                    )
                )
                continue
            children.append(
                LayoutNode(
                    "shard",
                    node.scale,
                    f"shard {_format_part(pos)}",
                    (*node.path, ("shard", pos)),
                    detail=key + (f", {format_bytes(size)}" if size is not None else ""),
                    file=key,
                    file_size=size,
                    expandable=True,
                )
            )
        updated = replace(node, detail=f"{node.detail}; {len(files)} {'shard' if r.sharding else 'chunk'} files")
        if r.sharding is None:
            updated = replace(
                updated,
                chunks=len(children),
                stored_bytes=_sum_known([c.stored_bytes for c in children]),
                raw_bytes=_sum_known([c.raw_bytes for c in children]),
            )
        return Expansion(updated, children)

    def _chunk(
        self,
        scale: str,
        key: str,
        shard: tuple[int, ...],
        inner: tuple[int, ...],
        byte_range: tuple[int, int] | None,
        path: NodePath,
        file_size: int | None = None,
        present: bool = True,
    ) -> LayoutNode:
        stored = byte_range[1] - byte_range[0] if byte_range is not None else None
        detail = (
            f"bytes [{byte_range[0]}, {byte_range[1]})"
            if byte_range is not None
            else ("not stored" if not present else "")
        )
        return LayoutNode(
            "chunk",
            scale,
            f"chunk {_format_part(inner)}",
            path,
            detail=detail,
            chunks=1 if present else 0,
            stored_bytes=stored,
            raw_bytes=self._raw(scale, inner),
            file=key,
            file_size=file_size,
            byte_range=byte_range,
            grid_position=inner,
            present=present,
        )

    def _expand_shard(self, node: LayoutNode) -> Expansion:
        r = self.reader(node.scale)
        shard = node.path[-1][1]
        assert isinstance(shard, tuple)
        try:
            locations = list(r.list_inner_chunks(shard))
        except ShardscopeError as exc:
            return Expansion(
                node,
                [LayoutNode("error", node.scale, "shard index", (*node.path, ("error", "index")), detail=str(exc))],
            )
        children = [
            self._chunk(
                node.scale,
                loc.shard_key,
                loc.shard,
                loc.inner_chunk,
                loc.byte_range,
                (*node.path, ("chunk", loc.inner_chunk)),
            )
            for loc in locations
        ]
        return Expansion(_with_totals(node, children), children)

    def locate_grid(self, scale: str, grid: tuple[int, ...]) -> LayoutNode:
        r = self.reader(scale)
        loc = r.locate_inner_chunk(grid)
        if r.sharding is None:
            path: NodePath = (("scale", scale), ("chunk", loc.shard))
        else:
            path = (("scale", scale), ("shard", loc.shard), ("chunk", loc.inner_chunk))
        return self._chunk(scale, loc.shard_key, loc.shard, loc.inner_chunk, loc.byte_range, path, present=loc.present)

    def shard_values(self, scale: str, by: ShardMapBy) -> tuple[npt.NDArray[np.uint64], int]:
        r = self.reader(scale)
        if by != "shard":
            raise ArgumentError("zarr v3 shards have no minishards; map by shard")
        if r.sharding is None:
            raise ArgumentError(f"array {scale!r} is not sharded: every chunk is its own file")
        grid = r.inner_grid_shape
        cps = np.asarray(r.chunks_per_shard, dtype=np.int64)
        pos = np.stack(np.meshgrid(*(np.arange(n) for n in grid), indexing="ij"), axis=-1).reshape(-1, len(grid))
        shard = pos // cps
        flat = np.ravel_multi_index(tuple(shard.T), r.shard_grid_shape)
        return flat.astype(np.uint64).reshape(grid), math.prod(r.shard_grid_shape)

    def problem_node(self, problem: Problem) -> LayoutNode | None:
        for scale in self.ins.scale_keys():
            r = self.reader(scale)
            pos = r.shard_position(problem.key)
            if pos is None or not r.in_grid(pos):
                continue
            if r.sharding is None:
                return self.locate_grid(scale, pos)
            found = re.search(r"inner chunk \[([0-9, ]+)\]", problem.message)
            if found is not None:
                in_shard = tuple(int(v) for v in found.group(1).split(","))
                if len(in_shard) == len(pos):
                    inner = tuple(p * c + i for p, c, i in zip(pos, r.chunks_per_shard, in_shard, strict=True))
                    byte_range = None
                    with contextlib.suppress(ShardscopeError):
                        byte_range = r.locate_inner_chunk(inner).byte_range
                    return self._chunk(
                        scale, problem.key, pos, inner, byte_range, (("scale", scale), ("shard", pos), ("chunk", inner))
                    )
            return LayoutNode(
                "shard",
                scale,
                f"shard {_format_part(pos)}",
                (("scale", scale), ("shard", pos)),
                file=problem.key,
                expandable=True,
            )
        return None


# -- N5 -----------------------------------------------------------------------------------------------
class _N5Backend(_Backend):
    format_name = "n5"

    def __init__(self, inspector: N5Inspector) -> None:
        self.ins = inspector

    def spatial_scales(self) -> list[str]:
        return self.ins.scale_keys()

    def level(self, scale: str) -> N5Level:
        return self.ins.level(scale)

    def roots(self) -> list[LayoutNode]:
        out = []
        for lvl in self.ins.levels:
            a = lvl.attributes
            raw = math.prod(a.dimensions) * a.dtype.itemsize
            detail = (
                f"{'×'.join(map(str, a.dimensions))} {a.data_type} in {'×'.join(map(str, a.grid_shape))} "
                f"blocks of {'×'.join(map(str, a.block_size))}, {a.compression.to_json().get('type')}; "
                "no shards (one file per block)"
            )
            out.append(
                LayoutNode(
                    "scale",
                    lvl.key,
                    lvl.key or "(dataset)",
                    (("scale", lvl.key),),
                    detail=detail,
                    raw_bytes=raw,
                    expandable=True,
                )
            )
        return out

    def geometry(self, scale: str) -> ScaleGeometry:
        lvl = self.level(scale)
        a = lvl.attributes
        n = a.ndim
        res = lvl.resolution or (1.0,) * n
        factor = nm_per_unit(lvl.unit) or 1.0
        names = ("x", "y", "z", "c", "t")[:n] if n <= 5 else tuple(f"d{i}" for i in range(n))
        return ScaleGeometry(
            scale=scale,
            axes=names,
            shape=a.dimensions,
            origin=(0,) * n,
            chunk_shape=a.block_size,
            reversed_axes=True,
            voxel_size=tuple(reversed([r * factor for r in res])),
            translate=(0.0,) * n,
            unit="nm" if lvl.unit and nm_per_unit(lvl.unit) else None,
        )

    def _blocks(self, scale: str) -> list[tuple[tuple[int, ...], str]]:
        a = self.level(scale).attributes
        prefix = f"{a.path}/" if a.path else ""
        out = []
        for key in self.ins.store.list(prefix):
            grid = parse_block_path(key[len(prefix) :], a.ndim)
            if grid is not None and a.contains_grid_position(grid):
                out.append((grid, key))
        return out

    def expand(self, node: LayoutNode) -> Expansion:
        geo = self.geometry(node.scale)
        if node.kind == "scale":
            try:
                blocks = self._blocks(node.scale)
            except StoreError as exc:
                return Expansion(
                    node,
                    [LayoutNode("error", node.scale, "cannot list", (*node.path, ("error", "list")), detail=str(exc))],
                )
            axis_name = geo.axes[_slab_axis(geo)]
            return Expansion(replace(node, chunks=len(blocks)), _grid_nodes_by_slab(node.scale, blocks, geo, axis_name))
        if node.kind == "group":
            g = node.path[-1][1]
            axis = _slab_axis(geo)
            cheap = self.ins.store.cheap_size
            children = []
            for grid, key in self._blocks(node.scale):
                if grid[axis] != g:
                    continue
                size = self.ins.store.size(key) if cheap else None
                children.append(self._block(node.scale, grid, key, size, True))
            return Expansion(
                replace(
                    node,
                    chunks=len(children),
                    stored_bytes=_sum_known([c.stored_bytes for c in children]),
                    raw_bytes=_sum_known([c.raw_bytes for c in children]),
                ),
                children,
            )
        return Expansion(node, [])

    def _block(self, scale: str, grid: tuple[int, ...], key: str, size: int | None, present: bool) -> LayoutNode:
        a = self.level(scale).attributes
        geo = self.geometry(scale)
        raw = math.prod(a.block_shape(grid)) * a.dtype.itemsize
        path: NodePath = (("scale", scale), ("group", grid[_slab_axis(geo)]), ("chunk", grid))
        return LayoutNode(
            "chunk",
            scale,
            f"block {format_block_path(grid)}",
            path,
            detail=key if present else f"{key}: not stored",
            chunks=1 if present else 0,
            stored_bytes=size,
            raw_bytes=raw,
            file=key,
            file_size=size,
            byte_range=(0, size) if size is not None else None,
            grid_position=grid,
            present=present,
        )

    def locate_grid(self, scale: str, grid: tuple[int, ...]) -> LayoutNode:
        a = self.level(scale).attributes
        key = format_block_key(a, grid)
        store = self.ins.store
        if store.cheap_size:
            size = store.size(key)
            present = size is not None
        else:
            size = None
            present = store.read_range(key, 0, 0) is not None
        return self._block(scale, grid, key, size, present)

    def problem_node(self, problem: Problem) -> LayoutNode | None:
        for lvl in self.ins.levels:
            a = lvl.attributes
            prefix = f"{a.path}/" if a.path else ""
            if not problem.key.startswith(prefix):
                continue
            grid = parse_block_path(problem.key[len(prefix) :], a.ndim)
            if grid is not None and a.contains_grid_position(grid):
                size = self.ins.store.size(problem.key) if self.ins.store.cheap_size else None
                return self._block(lvl.key, grid, problem.key, size, True)
        return None


__all__ = [
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
