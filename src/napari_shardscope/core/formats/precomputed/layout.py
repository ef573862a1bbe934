"""The precomputed part of the shard browser's layout tree.

Sharded scales: scale → shard file → minishard → chunk (its compressed Morton id). Segment-keyed
directories (meshes, skeletons, annotations) are further roots whose chunks are segment ids.
Unsharded scales: scale → slab of chunk files along z → chunk file (there is no index to group by).

Everything is read through :class:`~.inspector.PrecomputedInspector`'s readers, so the tree and
``shardscope inspect``/``locate`` share one set of decoded indexes; listing a scale reads no
index, expanding a shard reads its shard index and its non-empty minishard indexes.
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
    ChunkFile,
    Expansion,
    LayoutNode,
    Located,
    NodePath,
    PathPart,
    ScaleGeometry,
    ShardMapBy,
    cheap_size,
    chunk_file_node,
    chunk_in_file_node,
    error_node,
    expand_slab,
    expand_slabs,
    format_part,
    format_shape,
    list_chunk_files,
    probe_file,
    scale_node,
    shard_node,
    with_totals,
)
from napari_shardscope.core.formats.precomputed.annotations.spatial import parse_cell_key
from napari_shardscope.core.formats.precomputed.info import ScaleInfo
from napari_shardscope.core.formats.precomputed.inspector import PrecomputedInspector
from napari_shardscope.core.formats.precomputed.morton import decode_morton
from napari_shardscope.core.formats.precomputed.shard_reader import ShardedReader
from napari_shardscope.core.formats.precomputed.sharding import assign_chunk_ids, format_shard_name, parse_shard_name
from napari_shardscope.core.formats.precomputed.sources import Source
from napari_shardscope.core.formats.problem import Problem

#: Above this many shards a store that cannot list is not enumerated shard by shard.
MAX_UNLISTED_SHARDS = 1 << 16
#: Shard/minishard indexes of one shard are read with this many concurrent requests on expand.
EXPAND_WORKERS = 8
#: Kinds of segment-keyed sources that ``locate_segment`` looks a segment id up in.
SEGMENT_KINDS = ("segment", "annotation_by_id", "annotation_relationship")
#: What the keys of an id-keyed annotation index are, as the tree names its rows.
_ID_WORD = {"annotation_by_id": "annotation", "annotation_relationship": "segment"}
#: Files an unsharded annotation index lists in the tree (beyond them, ``shardscope ls``).
MAX_LISTED_FILES = 4096


def _annotation_detail(s: Source) -> str:
    """The root row of an annotation index: what it is keyed by, and how it is stored."""
    sp = s.sharding
    if s.level is not None:
        what = (f"spatial index level {s.level_index}: {format_shape(s.level.grid_shape)} cells of "
                f"{' × '.join(f'{c:g}' for c in s.level.chunk_size)}, limit {s.level.limit}")
        unit = "cell"
    elif s.relationship is not None:
        what, unit = f"annotations by related segment ({s.relationship})", "segment"
    else:
        what, unit = "annotations by id", "annotation"
    if sp is None:
        return f"{what}; unsharded (one file per {unit})"
    return (f"{what}; {sp.num_shards} shards × {sp.num_minishards} minishards, {sp.hash}, preshift "
            f"{sp.preshift_bits}, data {sp.data_encoding}, index {sp.minishard_index_encoding}")


class PrecomputedLayout:
    """:class:`~napari_shardscope.core.formats.layout_model.LayoutBackend` of a precomputed dataset."""

    format_name = "precomputed"

    def __init__(self, inspector: PrecomputedInspector) -> None:
        self.ins = inspector
        self._segment_sources: list[Source] | None = None
        self.bytes_per_voxel = inspector.volume.bytes_per_voxel if inspector.volume is not None else 0

    # -- sources -------------------------------------------------------------------------------------
    def sources(self) -> list[Source]:
        """The dataset's own sources, then the volume's mesh/skeleton directories (read once)."""
        if self._segment_sources is None:
            self._segment_sources = self.ins.segment_sources() if self.ins.volume is not None else []
        return [*self.ins.sources, *self._segment_sources]

    def source(self, name: str) -> Source:
        for s in self.sources():
            if s.name == name:
                return s
        raise ArgumentError(f"no scale or directory {name!r}; this dataset has {[s.name for s in self.sources()]}")

    def spatial_scales(self) -> list[str]:
        return [s.name for s in self.ins.sources if s.scale is not None]

    def scale_info(self, name: str) -> ScaleInfo:
        s = self.source(name)
        if s.scale is None:
            raise ArgumentError(f"{name!r} is keyed by segment id, not by voxel")
        return s.scale

    def reader(self, s: Source) -> ShardedReader:
        return self.ins.reader(s)

    def clear_cache(self) -> None:
        for s in self.sources():
            if s.sharding is not None:
                self.reader(s).clear_cache()

    def roots(self) -> list[LayoutNode]:
        return [self._root(s) for s in self.sources()]

    def _root(self, s: Source) -> LayoutNode:
        label = s.name or "(root)"
        sp = s.sharding
        if s.kind.startswith("annotation_"):
            return scale_node(s.name, label, _annotation_detail(s))
        if s.scale is None:
            if sp is None:
                return scale_node(s.name, label, f"{s.kind}: unsharded (one file per id)", expandable=False)
            return scale_node(
                s.name, label, f"{s.kind} keyed by id; {sp.num_shards} shards × {sp.num_minishards} minishards"
            )
        sc = s.scale
        raw = math.prod(sc.size) * self.bytes_per_voxel
        geo = (
            f"{format_shape(sc.size)} voxels in {format_shape(sc.grid_shape)} chunks of "
            f"{format_shape(sc.chunk_size)}, {sc.encoding}"
        )
        if sp is None:
            return scale_node(s.name, label, f"{geo}; unsharded (one file per chunk)", raw)
        detail = (
            f"{geo}; {sp.num_shards} shards × {sp.num_minishards} minishards, {sp.hash}, "
            f"preshift {sp.preshift_bits}, data {sp.data_encoding}, index {sp.minishard_index_encoding}"
        )
        return scale_node(s.name, label, detail, raw)

    # -- geometry ------------------------------------------------------------------------------------
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

    def _grid_and_raw(
        self, s: Source, ids: npt.NDArray[np.uint64]
    ) -> tuple[npt.NDArray[np.int64] | None, npt.NDArray[np.int64] | None]:
        """Grid positions ``(n, 3)`` and decoded byte sizes of chunk ids (``None`` for id-keyed dirs).

        An annotation spatial level's chunks are cells of its grid (no decoded size is implied).
        """
        if s.level is not None and ids.size:
            try:
                return decode_morton(ids, s.level.grid_shape), None
            except ArgumentError:
                return None, None
        if s.scale is None or ids.size == 0:
            return None, None
        try:
            pos = decode_morton(ids, s.scale.grid_shape)
        except ArgumentError:
            return None, None  # an id outside the grid: validate reports it
        return pos, s.scale.chunk_voxels(pos) * self.bytes_per_voxel

    # -- expand --------------------------------------------------------------------------------------
    def expand(self, node: LayoutNode) -> Expansion:
        s = self.source(node.scale)
        if node.kind == "scale":
            return self._expand_scale(node, s)
        if node.kind == "group":
            store = self.ins.store

            def row(file: ChunkFile) -> LayoutNode:
                return self._file_chunk(s, file, cheap_size(store, file[1]))

            return expand_slab(node, self._chunk_files(s), self.geometry(s.name), row)
        if node.kind == "shard":
            return self._expand_shard(node, s)
        if node.kind == "minishard":
            return self._expand_minishard(node, s)
        return Expansion(node, [])

    def _expand_scale(self, node: LayoutNode, s: Source) -> Expansion:
        if s.sharding is None and s.kind.startswith("annotation_"):
            return self._expand_annotation_files(node, s)
        if s.sharding is None:
            return expand_slabs(node, list_chunk_files(node, lambda: self._chunk_files(s)), self.geometry(s.name))
        spec = s.sharding
        reader = self.reader(s)
        listed = True
        try:
            shards = reader.existing_shards()
        except StoreError:
            if spec.num_shards > MAX_UNLISTED_SHARDS:
                msg = f"the store cannot list and there are {spec.num_shards} possible shards: use locate"
                return Expansion(node, [error_node(node, "cannot list", msg)])
            shards, listed = list(range(spec.num_shards)), False
        cheap = self.ins.store.cheap_size
        children = []
        for shard in shards:
            file = reader.shard_file(shard) if cheap else None
            children.append(
                shard_node(
                    s.name,
                    f"shard {format_shard_name(spec, shard)}",
                    (*node.path, ("shard", shard)),
                    file.display_key if file is not None else reader.shard_key(shard),
                    file.size if file is not None else None,
                )
            )
        what = (
            f"{len(shards)} of {spec.num_shards} shard files present"
            if listed
            else f"{spec.num_shards} possible shards (the store cannot list)"
        )
        return Expansion(replace(node, detail=f"{node.detail}; {what}"), children)

    def _expand_annotation_files(self, node: LayoutNode, s: Source) -> Expansion:
        """An unsharded annotation index: one row per file (a cell, an annotation, a segment's list)."""
        prefix = f"{s.prefix}/" if s.prefix else ""
        try:
            keys = sorted(k for k in self.ins.store.list(prefix) if "/" not in k[len(prefix):])
        except StoreError as exc:
            return Expansion(node, [error_node(node, "cannot list", str(exc))])
        children = [self._annotation_file(s, key, cheap_size(self.ins.store, key))
                    for key in keys[:MAX_LISTED_FILES]]
        if len(keys) > MAX_LISTED_FILES:
            children.append(error_node(node, "more files", f"{len(keys) - MAX_LISTED_FILES} more files: "
                                       "list them with shardscope ls, find one with shardscope locate"))
        shown = [c for c in children if c.kind == "chunk"]
        return Expansion(with_totals(replace(node, detail=f"{node.detail}; {len(keys)} files"), shown), children)

    def _annotation_file(self, s: Source, key: str, size: int | None, present: bool = True) -> LayoutNode:
        name = key.rsplit("/", 1)[-1].removesuffix(".gz")
        cell = parse_cell_key(name, s.level) if s.level is not None else None
        ident = int(name) if s.level is None and name.isdigit() and int(name) < 1 << 64 else None
        label = (f"cell {format_part(cell)}" if cell is not None
                 else f"{_ID_WORD.get(s.kind, 'key')} {ident}" if ident is not None else name)
        return chunk_in_file_node(s.name, label, (("scale", s.name), ("file", name)), file=key,
                                  byte_range=(0, size) if size is not None and present else None, raw_bytes=None,
                                  grid_position=cell, chunk_id=ident, present=present, file_size=size)

    def _chunk_files(self, s: Source) -> list[ChunkFile]:
        """``(grid position, key)`` of every chunk file of an unsharded scale."""
        assert s.scale is not None
        prefix = f"{s.prefix}/"
        out: list[ChunkFile] = []
        for key in self.ins.store.list(prefix):
            grid = s.scale.grid_position_of_chunk_name(key[len(prefix) :])
            if grid is not None:
                out.append((grid, key))
        return out

    def _file_chunk(self, s: Source, file: ChunkFile, size: int | None, present: bool = True) -> LayoutNode:
        """The row of an unsharded chunk file."""
        assert s.scale is not None
        grid, key = file
        cid = s.scale.chunk_id(grid)
        return chunk_file_node(
            s.name,
            f"chunk {cid} @ {format_part(grid)}",
            (("scale", s.name), ("group", grid[2]), ("chunk", cid)),
            key=key,
            size=size,
            raw_bytes=int(s.scale.chunk_voxels(grid)) * self.bytes_per_voxel,
            grid_position=grid,
            chunk_id=cid,
            present=present,
        )

    def _expand_shard(self, node: LayoutNode, s: Source) -> Expansion:
        assert s.sharding is not None
        shard = _int_part(node.path[-1])
        reader = self.reader(s)
        with contextlib.suppress(ShardscopeError):  # the loop below reports which index is broken
            reader.prefetch_indexes([shard], workers=EXPAND_WORKERS)
        try:
            index = reader.shard_index(shard)
        except ShardscopeError as exc:
            return Expansion(node, [error_node(node, "shard index", str(exc))])
        file = reader.shard_file(shard)
        if index is None or file is None:
            return Expansion(replace(node, chunks=0, stored_bytes=0, raw_bytes=0, detail=f"{node.detail}; no file"), [])
        children = []
        for m in index.nonempty_minishards().tolist():
            start, end = index.minishard_range(m)
            try:
                mi = reader.minishard_index(shard, m)
            except ShardscopeError as exc:
                children.append(error_node(node, f"minishard {m}", str(exc)))
                continue
            _, raw = self._grid_and_raw(s, mi.chunk_ids)
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
        updated = with_totals(replace(node, file=file.display_key, file_size=file.size), ok)
        if len(ok) != len(children):  # a minishard index that cannot be read hides its chunks' raw size
            updated = replace(updated, raw_bytes=None)
        return Expansion(updated, children)

    def _expand_minishard(self, node: LayoutNode, s: Source) -> Expansion:
        shard, m = _int_part(node.path[-2]), _int_part(node.path[-1])
        reader = self.reader(s)
        mi = reader.minishard_index(shard, m)
        pos, raw = self._grid_and_raw(s, mi.chunk_ids)
        key = self._shard_display_key(reader, shard)
        children = [
            self._stored_chunk(
                s,
                shard,
                m,
                int(mi.chunk_ids[i]),
                key,
                (int(mi.starts[i]), int(mi.ends[i])),
                tuple(int(p) for p in pos[i]) if pos is not None else None,
                int(raw[i]) if raw is not None else None,
            )
            for i in range(len(mi))
        ]
        return Expansion(node, children)

    @staticmethod
    def _shard_display_key(reader: ShardedReader, shard: int) -> str:
        file = reader.shard_file(shard)
        return file.display_key if file is not None else reader.shard_key(shard)

    def _stored_chunk(
        self,
        s: Source,
        shard: int,
        minishard: int,
        cid: int,
        file: str,
        byte_range: tuple[int, int] | None,
        grid: tuple[int, ...] | None,
        raw: int | None,
        present: bool = True,
    ) -> LayoutNode:
        """A chunk (or segment) in a minishard of a shard file."""
        if s.level is not None:
            name = f"cell {format_part(grid)} (chunk {cid})" if grid is not None else f"chunk {cid}"
        elif s.kind in _ID_WORD:
            name = f"{_ID_WORD[s.kind]} {cid}"
        elif grid is not None:
            name = f"chunk {cid} @ {format_part(grid)}"
        else:
            name = f"segment {cid}" if s.scale is None else f"chunk {cid}"
        return chunk_in_file_node(
            s.name,
            name,
            (("scale", s.name), ("shard", shard), ("minishard", minishard), ("chunk", cid)),
            file=file,
            byte_range=byte_range,
            raw_bytes=raw,
            grid_position=grid,
            chunk_id=cid,
            present=present,
        )

    # -- locate --------------------------------------------------------------------------------------
    def grid_of_chunk_id(self, scale: str, chunk_id: int) -> tuple[int, ...]:
        return self.scale_info(scale).grid_position_of_chunk_id(chunk_id)

    def locate_grid(self, scale: str, grid: tuple[int, ...]) -> LayoutNode:
        s = self.source(scale)
        sc = self.scale_info(scale)
        if s.sharding is None:
            key = sc.unsharded_chunk_key(grid)
            present, size = probe_file(self.ins.store, key)
            return self._file_chunk(s, (grid, key), size, present)
        cid = sc.chunk_id(grid)
        loc = self.reader(s).locate(cid)
        raw = int(sc.chunk_voxels(grid)) * self.bytes_per_voxel
        return self._stored_chunk(
            s, loc.shard, loc.minishard, cid, loc.shard_file, loc.byte_range, grid, raw, loc.present
        )

    def locate_segment(self, segment_id: int) -> list[Located]:
        out = []
        for s in self.sources():
            if s.scale is not None or s.kind not in SEGMENT_KINDS:
                continue
            if s.sharding is None:
                if not s.kind.startswith("annotation_"):
                    continue
                found = self.ins.annotations.locate_annotation(segment_id) if s.kind == "annotation_by_id" else \
                    self.ins.annotations.locate_related(s.relationship or "", segment_id)
                out.append(Located(node=self._annotation_file(s, found["key"], found.get("size"), found["present"])))
                continue
            loc = self.reader(s).locate(segment_id)
            node = self._stored_chunk(
                s, loc.shard, loc.minishard, segment_id, loc.shard_file, loc.byte_range, None, None, loc.present
            )
            out.append(Located(node=node))
        if not out:
            raise ArgumentError("this dataset has no sharded segment-keyed data (meshes, skeletons, annotations)")
        return out

    # -- shard map -----------------------------------------------------------------------------------
    def shard_levels(self, scale: str) -> tuple[ShardMapBy, ...]:
        return ("shard", "minishard") if self.source(scale).sharding is not None else ()

    def shard_values(self, scale: str, by: ShardMapBy) -> tuple[npt.NDArray[np.uint64], int]:
        s = self.source(scale)
        sc = self.scale_info(scale)
        if s.sharding is None:
            raise ArgumentError(f"scale {scale!r} is not sharded: every chunk is its own file")
        spec = s.sharding
        a = assign_chunk_ids(spec, sc.chunk_ids_of_grid())
        if by == "shard":
            values, count = a.shard, spec.num_shards
        else:
            values = (a.shard << np.uint64(spec.minishard_bits)) | a.minishard if spec.shard_bits else a.minishard
            count = spec.num_shards * spec.num_minishards
        return values.reshape(sc.grid_shape), count

    # -- problems ------------------------------------------------------------------------------------
    def problem_node(self, problem: Problem) -> LayoutNode | None:
        key = problem.key.split(" + ")[0]  # an .index + .data pair is named by its .index file
        directory, _, name = key.rpartition("/")
        for s in self.sources():
            if s.prefix.strip("/") != directory:
                continue
            if s.sharding is None and s.kind.startswith("annotation_"):
                return self._annotation_file(s, key, cheap_size(self.ins.store, key))
            if s.sharding is None:
                grid = s.scale.grid_position_of_chunk_name(name) if s.scale is not None else None
                return self.locate_grid(s.name, grid) if grid is not None else None
            shard = parse_shard_name(s.sharding, name)
            return self._problem_in_shard(s, shard, problem) if shard is not None else None
        return None

    def _problem_in_shard(self, s: Source, shard: int, problem: Problem) -> LayoutNode:
        spec = s.sharding
        assert spec is not None
        path: NodePath = (("scale", s.name), ("shard", shard))
        chunk = re.match(r"chunk (\d+)", problem.message)
        if chunk is not None:
            stored = self._find_stored(s, shard, int(chunk.group(1)))
            if stored is not None:
                return stored
        mini = re.match(r"minishard (\d+)", problem.message)
        if mini is not None and int(mini.group(1)) < spec.num_minishards:
            m = int(mini.group(1))
            return LayoutNode(
                "minishard", s.name, f"minishard {m}", (*path, ("minishard", m)), file=problem.key, expandable=True
            )
        return shard_node(s.name, f"shard {format_shard_name(spec, shard)}", path, problem.key, detail="")

    def _find_stored(self, s: Source, shard: int, cid: int) -> LayoutNode | None:
        """The chunk node of ``cid`` where shard ``shard`` stores it (wherever the hash says it should be)."""
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
                pos, raw = self._grid_and_raw(s, mi.chunk_ids[hit : hit + 1])
                return self._stored_chunk(
                    s,
                    shard,
                    m,
                    cid,
                    self._shard_display_key(reader, shard),
                    (int(mi.starts[hit]), int(mi.ends[hit])),
                    tuple(int(p) for p in pos[0]) if pos is not None else None,
                    int(raw[0]) if raw is not None else None,
                )
        except ShardscopeError:
            return None
        return None


def _int_part(part: PathPart) -> int:
    value = part[1]
    if not isinstance(value, int):
        raise ArgumentError(f"{part[0]} {value!r} is not a number")
    return value
