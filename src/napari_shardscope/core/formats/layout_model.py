"""The shard browser's layout tree as data: nodes, geometry, locate results, and what a format provides.

This module is the seam between :mod:`napari_shardscope.core.layout` (the format-agnostic tree a
viewer or a notebook browses) and the format packages, each of which implements
:class:`LayoutBackend` in its own ``layout`` module with its own metadata, chunk keys, hashes and
index readers. It sits beside :mod:`.api` so that the format packages can import it without
importing anything above them.

Coordinates: inside the tree, voxels and grid positions are in the *format's* order (x, y, z for
precomputed and N5, ``zarr.json`` order for zarr v3) and absolute (a precomputed ``voxel_offset``
included), as the files name them. What a person types or reads is the reader's index instead — z, y,
x (non-spatial axes first) from 0, as napari and ``open_volume`` index the volume: every door converts
with :meth:`ScaleGeometry.format_voxel` / :meth:`ScaleGeometry.reader_index`, and
:meth:`Located.describe` shows both orders where they differ. World boxes are in the
order of the volume's arrays (z, y, x — napari's order) and in the volume's world unit (nm where
the metadata names a unit), with voxel ``i`` centred at ``translate + i * voxel_size`` as napari
and OME-Zarr place it: a chunk of voxels ``[start, stop)`` covers
``[translate + (start - 0.5) * voxel_size, translate + (stop - 0.5) * voxel_size]``. Those conversions
are :class:`ScaleGeometry`'s (:mod:`.scale_geometry`, re-exported here).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.bytestore import ByteStore
from napari_shardscope.core.errors import ArgumentError, FormatCapabilityError, StoreError
from napari_shardscope.core.formats.problem import Problem
from napari_shardscope.core.formats.scale_geometry import ScaleGeometry as ScaleGeometry  # re-exported: its old home

NodeKind = Literal["scale", "shard", "minishard", "group", "chunk", "error"]
#: One step of a node's path: ``("shard", 3)``, ``("chunk", (1, 0, 2))``, ``("scale", "8_8_40")``.
PathPart = tuple[str, int | str | tuple[int, ...]]
NodePath = tuple[PathPart, ...]
ShardMapBy = Literal["shard", "minishard"]
#: A chunk stored as a file of its own: ``(grid position, key)``.
ChunkFile = tuple[tuple[int, ...], str]




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
        The voxel that was asked for, if a voxel was (absolute, format order, like :attr:`bounds`).
    geometry
        The scale's geometry, which turns :attr:`bounds` and :attr:`voxel` into the reader's index
        (:attr:`index_bounds`, :attr:`voxel_index`).
    """

    node: LayoutNode
    bounds: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    world_box: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    voxel: tuple[int, ...] | None = None
    geometry: ScaleGeometry | None = field(default=None, compare=False)

    @property
    def scale(self) -> str:
        return self.node.scale

    @property
    def path(self) -> NodePath:
        return self.node.path

    @property
    def index_bounds(self) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """:attr:`bounds` as the reader indexes the volume: ``[start, stop)`` in z, y, x from 0."""
        if self.bounds is None or self.geometry is None:
            return None
        return self.geometry.reader_index(self.bounds[0]), self.geometry.reader_index(self.bounds[1])

    @property
    def voxel_index(self) -> tuple[int, ...] | None:
        """:attr:`voxel` as the reader indexes the volume (z, y, x from 0)."""
        if self.voxel is None or self.geometry is None:
            return None
        return self.geometry.reader_index(self.voxel)

    def describe(self) -> str:
        """One line: what was found (voxels z, y, x from 0, the format's own order beside) and where its bytes are."""
        parts = [f"{self.node.scale or '(root)'}: {self.node.name}"]
        geo = self.geometry
        if self.bounds is not None and geo is not None:
            lo, hi = self.index_bounds or self.bounds
            parts.append("voxels " + ", ".join(f"{n} {a}–{b}" for n, a, b in zip(geo.array_axes, lo, hi, strict=True)))
            if not geo.same_order:
                flo, fhi = self.bounds
                parts[-1] += " (stored as " + ", ".join(
                    f"{n} {a}–{b}" for n, a, b in zip(geo.axes, flo, fhi, strict=True)) + ")"
        elif self.bounds is not None:
            lo, hi = self.bounds
            parts.append("voxels " + " ".join(f"{a}–{b}" for a, b in zip(lo, hi, strict=True)))
        for kind, value in self.node.path[1:-1]:
            parts.append(f"{kind} {format_part(value)}")
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


# -- what a format provides --------------------------------------------------------------------------
class LayoutBackend(Protocol):
    """A format's part of the layout tree, over that format's inspector.

    Nodes are made here, with the format's own names and reads; the tree
    (:class:`napari_shardscope.core.layout.LayoutTree`) caches expansions, places chunks in the
    world and turns grid positions into locate results. Voxels and grid positions are in the
    format's order.
    """

    format_name: str

    def roots(self) -> list[LayoutNode]:
        """One node per scale (and per segment-keyed directory); reads metadata only."""
        ...

    def spatial_scales(self) -> list[str]:
        """Scale keys that have voxels (not segment-keyed directories)."""
        ...

    def expand(self, node: LayoutNode) -> Expansion:
        """The children of an expandable node, and the node updated with their totals."""
        ...

    def geometry(self, scale: str) -> ScaleGeometry:
        """A scale's voxel grid, placed by the format's own metadata (the tree prefers the volume's)."""
        ...

    def locate_grid(self, scale: str, grid: tuple[int, ...]) -> LayoutNode:
        """The chunk node at a grid position, on the path the tree shows it (``present=False`` if absent)."""
        ...

    def grid_of_chunk_id(self, scale: str, chunk_id: int) -> tuple[int, ...]:
        """The grid position of a chunk id (formats whose chunks have ids)."""
        ...

    def locate_segment(self, segment_id: int) -> list[Located]:
        """Where a segment's meshes, skeletons or annotations are stored (segment-keyed formats)."""
        ...

    def shard_values(self, scale: str, by: ShardMapBy) -> tuple[npt.NDArray[np.uint64], int]:
        """Per chunk (format order) its shard or minishard number, and how many numbers there can be."""
        ...

    def shard_levels(self, scale: str) -> tuple[ShardMapBy, ...]:
        """What a shard map of ``scale`` can colour by: ``("shard", "minishard")``, ``("shard",)`` or nothing
        (a scale whose chunks are files of their own: N5, zarr v2, unsharded zarr v3 and precomputed)."""
        ...

    def problem_node(self, problem: Problem) -> LayoutNode | None:
        """The node a validation problem is about, ``None`` when none fits."""
        ...

    def clear_cache(self) -> None:
        """Drop decoded indexes (after the files changed)."""
        ...


class BackendBase:
    """The answers of a :class:`LayoutBackend` whose format lacks chunk ids, segments or shards."""

    format_name = ""

    def grid_of_chunk_id(self, scale: str, chunk_id: int) -> tuple[int, ...]:
        raise FormatCapabilityError(self.format_name, "chunk ids", hint="give a grid position")

    def locate_segment(self, segment_id: int) -> list[Located]:
        raise FormatCapabilityError(self.format_name, "segment-keyed data", hint="locate a voxel or chunk")

    def shard_values(self, scale: str, by: ShardMapBy) -> tuple[npt.NDArray[np.uint64], int]:
        raise ArgumentError(f"{self.format_name} datasets have no shards")

    def shard_levels(self, scale: str) -> tuple[ShardMapBy, ...]:
        return ()

    def clear_cache(self) -> None:
        """Nothing is cached."""


# -- node makers ---------------------------------------------------------------------------------------
def scale_node(
    scale: str, label: str, detail: str, raw_bytes: int | None = None, expandable: bool = True
) -> LayoutNode:
    """The root row of a scale (array, dataset, segment-keyed directory)."""
    return LayoutNode(
        "scale", scale, label, (("scale", scale),), detail=detail, raw_bytes=raw_bytes, expandable=expandable
    )


def shard_node(
    scale: str, name: str, path: NodePath, file: str, file_size: int | None = None, detail: str | None = None
) -> LayoutNode:
    """An expandable row for one shard file (its index is read when it is expanded)."""
    if detail is None:
        detail = file + (f", {format_bytes(file_size)}" if file_size is not None else "")
    return LayoutNode("shard", scale, name, path, detail=detail, file=file, file_size=file_size, expandable=True)


def error_node(parent: LayoutNode, name: str, message: str, tag: str | None = None) -> LayoutNode:
    """A row saying why ``parent`` (or part of it) could not be read; ``tag`` names it in the path."""
    return LayoutNode("error", parent.scale, name, (*parent.path, ("error", tag or name)), detail=message)


def chunk_in_file_node(
    scale: str,
    name: str,
    path: NodePath,
    *,
    file: str,
    byte_range: tuple[int, int] | None,
    raw_bytes: int | None,
    grid_position: tuple[int, ...] | None,
    chunk_id: int | None = None,
    present: bool = True,
    file_size: int | None = None,
) -> LayoutNode:
    """A chunk stored as a byte range of a (shard) file; ``byte_range=None`` when it is not stored."""
    return LayoutNode(
        "chunk",
        scale,
        name,
        path,
        detail=f"bytes [{byte_range[0]}, {byte_range[1]})" if byte_range is not None else _absent(present),
        chunks=1 if present else 0,
        stored_bytes=byte_range[1] - byte_range[0] if byte_range is not None else None,
        raw_bytes=raw_bytes,
        file=file,
        file_size=file_size,
        byte_range=byte_range,
        grid_position=grid_position,
        chunk_id=chunk_id,
        present=present,
    )


def _absent(present: bool) -> str:
    return "" if present else "not stored"


def chunk_file_node(
    scale: str,
    name: str,
    path: NodePath,
    *,
    key: str,
    size: int | None,
    raw_bytes: int | None,
    grid_position: tuple[int, ...],
    chunk_id: int | None = None,
    present: bool = True,
) -> LayoutNode:
    """A chunk stored as a file of its own (an N5 block, an unsharded precomputed chunk): all of its bytes."""
    node = chunk_in_file_node(
        scale,
        name,
        path,
        file=key,
        byte_range=(0, size) if size is not None else None,
        raw_bytes=raw_bytes,
        grid_position=grid_position,
        chunk_id=chunk_id,
        present=present,
        file_size=size,
    )
    return replace(node, detail=key if present else f"{key}: not stored")


# -- unindexed chunk files, grouped in slabs -----------------------------------------------------------
def list_chunk_files(parent: LayoutNode, list_files: Callable[[], list[ChunkFile]]) -> list[ChunkFile] | LayoutNode:
    """``list_files()``, or an error row under ``parent`` when the store cannot list."""
    try:
        return list_files()
    except StoreError as exc:
        return error_node(parent, "cannot list", str(exc), "list")


def expand_slabs(node: LayoutNode, files: list[ChunkFile] | LayoutNode, geo: ScaleGeometry) -> Expansion:
    """A scale of unindexed chunk files as slabs along its slowest axis (z), so a listing can be scrolled.

    Neither N5 nor unsharded precomputed has an index: a slab groups the files of one layer of
    chunks, and the scale's total is the number of files.
    """
    if isinstance(files, LayoutNode):
        return Expansion(node, [files])
    axis = geo.slab_axis
    name = geo.axes[axis]
    counts: dict[int, int] = {}
    for grid, _ in files:
        counts[grid[axis]] = counts.get(grid[axis], 0) + 1
    slabs = []
    for g in sorted(counts):
        lo = geo.origin[axis] + g * geo.chunk_shape[axis]
        hi = min(lo + geo.chunk_shape[axis], geo.origin[axis] + geo.shape[axis])
        slabs.append(
            LayoutNode(
                "group",
                node.scale,
                f"{name} {lo}–{hi}",
                (*node.path, ("group", g)),
                detail=f"{counts[g]} chunk files with {name} in [{lo}, {hi})",
                chunks=counts[g],
                expandable=True,
            )
        )
    return Expansion(replace(node, chunks=len(files)), slabs)


def expand_slab(
    node: LayoutNode, files: Iterable[ChunkFile], geo: ScaleGeometry, make_chunk: Callable[[ChunkFile], LayoutNode]
) -> Expansion:
    """The chunk files of one slab (``node.path[-1] == ("group", g)``), with their totals."""
    g = node.path[-1][1]
    children = [make_chunk(f) for f in files if f[0][geo.slab_axis] == g]
    return Expansion(with_totals(node, children), children)


# -- stores --------------------------------------------------------------------------------------------
def cheap_size(store: ByteStore, key: str) -> int | None:
    """A file's size where a stat is cheap (local disk); ``None`` where it would mean a download."""
    return store.size(key) if store.cheap_size else None


def probe_file(store: ByteStore, key: str) -> tuple[bool, int | None]:
    """Whether a file exists, and its size where a stat is cheap (else an empty range read answers)."""
    if store.cheap_size:
        size = store.size(key)
        return size is not None, size
    return store.read_range(key, 0, 0) is not None, None


# -- formatting and sums -------------------------------------------------------------------------------
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


def format_part(value: object) -> str:
    """A path part's value for people: ``(1, 0, 2)`` → ``"[1, 0, 2]"``."""
    if isinstance(value, tuple):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def format_shape(shape: Sequence[int]) -> str:
    """``(64, 64, 8)`` → ``"64×64×8"``."""
    return "×".join(map(str, shape))


def sum_known(values: Sequence[int | None]) -> int | None:
    """The sum, or ``None`` if any value is unknown."""
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def with_totals(node: LayoutNode, children: Sequence[LayoutNode]) -> LayoutNode:
    """``node`` with chunks and bytes summed over ``children`` (bytes ``None`` if any is unknown)."""
    return replace(
        node,
        chunks=sum(c.chunks or 0 for c in children),
        stored_bytes=sum_known([c.stored_bytes for c in children]),
        raw_bytes=sum_known([c.raw_bytes for c in children]),
    )
